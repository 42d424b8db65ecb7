"""Weights in the standard Hugging Face cache (``HF_HOME/hub``), where vLLM and ``hf`` find them.

``fetch_into_cache`` downloads the selected files of one repo at one commit with
``hf_hub_download`` in cache mode: an interrupted transfer leaves ``blobs/<etag>.incomplete``
behind and the next run resumes it with a ranged GET. Each weight file is then checked against the
LFS sha256 the gate saw; a mismatch deletes the blob and its link and fails with ``sha-mismatch``
(nothing is served from a file that did not verify). Offline (``HF_HUB_OFFLINE``) only the cache is
read. The deadlines, stall detection, lock and failure tokens are :mod:`club3090.edges.download`'s.
"""

from __future__ import annotations

import errno
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING

from club3090.edges import download as dl
from club3090.edges.request_budget import Budget, bounded, install_policy

if TYPE_CHECKING:
    from club3090.model.spec import RepoFile
    from club3090.settings import Settings

# the small files vLLM reads next to the weights; anything else (images, READMEs, other formats) stays remote
SMALL_SUFFIXES = (".json", ".txt", ".model", ".jinja", ".tiktoken", ".py")
OFFLINE_MISSING = "offline-not-cached"


def serving_files(files: Sequence["RepoFile"]) -> tuple["RepoFile", ...]:
    """The selected weight set (top-level ``*.safetensors``) plus the small files vLLM needs."""
    picked = [f for f in files if "/" not in f.name and
              (f.name.endswith(".safetensors") or f.name.endswith(SMALL_SUFFIXES))]
    return tuple(sorted(picked, key=lambda f: f.name))


def repo_folder(hub_cache: Path, repo_id: str) -> Path:
    return Path(hub_cache) / ("models--" + repo_id.replace("/", "--"))


def snapshot_dir(hub_cache: Path, repo_id: str, commit: str) -> Path:
    return repo_folder(hub_cache, repo_id) / "snapshots" / commit


def cached_bytes(hub_cache: Path, repo_id: str, commit: str | None, files: Sequence["RepoFile"]) -> int:
    """Bytes of ``files`` already complete in the cache at ``commit`` (the disk check subtracts them)."""
    if not commit:
        return 0
    snap = snapshot_dir(hub_cache, repo_id, commit)
    total = 0
    for f in files:
        path = snap / f.name
        try:
            size = path.stat().st_size
        except OSError:
            continue
        if f.size_bytes is None or size == f.size_bytes:
            total += size
    return total


def _drop(path: Path) -> None:
    """Remove a cached file and the blob it links to (a file that failed its check)."""
    try:
        blob = path.resolve()
        path.unlink(missing_ok=True)
        if blob != path:
            blob.unlink(missing_ok=True)
    except OSError:
        pass


def fetch_into_cache(settings: "Settings", repo_id: str, commit: str, files: Sequence["RepoFile"], *,
                     progress: Callable[[str], None] | None = None,
                     bar: bool = True) -> dl.DownloadReport:
    """Download ``files`` of ``repo_id@commit`` into the HF cache and verify them; never raises for a
    download problem (the report carries the token). ``bar`` shows huggingface_hub's progress bar."""
    from huggingface_hub import disable_progress_bars, enable_progress_bars, hf_hub_download

    say = progress or (lambda _m: None)
    hub_cache = Path(settings.hub_cache)
    dest = snapshot_dir(hub_cache, repo_id, commit)
    missing_hash = [f.name for f in files if dl._is_weights(f.name) and not f.sha256]
    if missing_hash:
        return dl.DownloadReport(False, dest, failure=dl.NO_ETAG, failed_file=missing_hash[0],
                                 detail=f"the Hub lists no LFS sha256 for {', '.join(missing_hash)}; "
                                        "refusing weights that cannot be verified")
    try:
        hub_cache.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return dl.DownloadReport(False, dest, failure=dl.DISK if exc.errno == errno.ENOSPC else dl.FALLBACK_FAILED,
                                 detail=f"{hub_cache}: {exc}")
    lock = dl.SlugLock(hub_cache / dl.LOCKS / "club3090" / (repo_id.replace("/", "--") + ".flock"))
    if not lock.acquire():
        return dl.DownloadReport(False, dest, failure=dl.IN_PROGRESS, detail=f"another download holds {lock.path}")
    install_policy()
    (enable_progress_bars if bar else disable_progress_bars)()
    done: list[str] = []
    total_bytes = 0
    try:
        for i, f in enumerate(files, 1):
            size = f"{f.size_bytes / 2**30:.2f} GiB" if f.size_bytes else "? bytes"
            cached = dest / f.name
            if cached.is_file() and dl._check(f, cached) is None and (
                    not dl._is_weights(f.name) or dl._sha256(cached) == f.sha256):
                say(f"[up] weights {i}/{len(files)} {f.name}: in the HF cache, checked")
            else:
                if settings.offline:
                    raise dl._Failed(OFFLINE_MISSING, f"{f.name} is not in the HF cache and HF_HUB_OFFLINE is "
                                                      "set; run once online", f.name)
                say(f"[up] weights {i}/{len(files)} {f.name} ({size})")
                try:
                    with _online(), bounded(Budget.for_stream(settings.download_stall_s, dl.STALL_BYTES)):
                        cached = Path(hf_hub_download(repo_id, f.name, revision=commit, cache_dir=str(hub_cache),
                                                      endpoint=settings.endpoint, token=settings.token or False,
                                                      library_name="club3090", etag_timeout=dl.TIMEOUT_S))
                except Exception as exc:  # noqa: BLE001 - classified once, like download.hub_fetcher
                    raise dl._hub_failure(exc, repo_id, f.name) or dl._Failed(
                        dl.FALLBACK_FAILED, f"{f.name}: {dl._one(exc)} (re-run to resume)", f.name) from None
                problem = dl._check(f, cached)
                if problem is not None:
                    _drop(cached)
                    raise dl._Failed(dl.FALLBACK_FAILED, problem, f.name)
                if dl._is_weights(f.name):
                    got = dl._sha256(cached)
                    if got != f.sha256:
                        _drop(cached)
                        raise dl._Failed(dl.SHA_MISMATCH, f"{f.name}: sha256 {got}, the Hub says {f.sha256}",
                                         f.name)
            done.append(f.name)
            total_bytes += cached.stat().st_size
        return dl.DownloadReport(True, dest, files=tuple(done), bytes=total_bytes,
                                 sha_verified=all(f.sha256 for f in files if dl._is_weights(f.name)))
    except dl._Failed as exc:
        return dl.DownloadReport(False, dest, files=tuple(done), bytes=total_bytes, failure=exc.token,
                                 detail=exc.detail, failed_file=exc.name)
    except OSError as exc:
        return dl.DownloadReport(False, dest, files=tuple(done), bytes=total_bytes,
                                 failure=dl.DISK if exc.errno == errno.ENOSPC else dl.FALLBACK_FAILED,
                                 detail=dl._one(exc))
    finally:
        lock.release()


def _online() -> AbstractContextManager[None]:
    from club3090.edges import hub

    return hub.online()


__all__ = ["OFFLINE_MISSING", "cached_bytes", "fetch_into_cache", "repo_folder", "serving_files", "snapshot_dir"]
