"""Weights in the standard Hugging Face cache (``HF_HOME/hub``), where vLLM and ``hf`` find them.

The one download path of ``up``, ``swap`` and ``pull``'s ``[E]``. ``fetch_into_cache`` fetches the
selected files of one repo at one commit into the cache layout (``models--ORG--NAME/blobs/<etag>``
plus ``snapshots/<commit>/NAME`` links):

- A file the listing gives an LFS sha256 for (every weight file; a missing one is ``no-etag``) is
  fetched (with ``--allow-xet``, first by huggingface_hub's Xet transfer, :func:`_via_xet`, then) by
  :func:`_resumable`: a GET of the resolve URL through huggingface_hub's own session into
  ``blobs/<sha256>.club3090-partial``, which an interrupted run leaves behind and the next run resumes
  with ``Range: bytes=<size>-``. It is renamed to ``blobs/<sha256>`` only once its sha256 matched, so
  the cache never holds an unverified weight file; a mismatch deletes it (``sha-mismatch``).
- Any other file (config, tokenizer, chat template, ``*.py``) goes through ``hf_hub_download`` in cache
  mode; its blob is named by the Hub's ETag (a git blob id or a sha256) and the bytes are checked
  against that name, on download and every time a cached copy is reused (never by its size alone).
- ``adopt`` (``pull --verify-in-place``): same-named files in other folders are taken into the cache
  (a hard link, else a checked copy) once their sha256 matches; a mismatch is said and re-downloaded.
- Offline (``HF_HUB_OFFLINE``) only the cache (and ``adopt``) is read.

The deadlines, stall detection, lock and failure tokens are :mod:`club3090.edges.download`'s.
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING

from club3090.edges import download as dl
from club3090.edges.download import _HEX40, _HEX64
from club3090.edges.request_budget import Budget, bounded, install_policy
from club3090.units import GiB

if TYPE_CHECKING:
    from club3090.model.spec import RepoFile
    from club3090.settings import Settings

# the small files vLLM reads next to the weights; anything else (images, READMEs, other formats) stays remote
SMALL_SUFFIXES = (".json", ".txt", ".model", ".jinja", ".tiktoken", ".py")
OFFLINE_MISSING = dl.OFFLINE_MISSING


def serving_files(files: Sequence["RepoFile"]) -> tuple["RepoFile", ...]:
    """The selected weight set (top-level ``*.safetensors``) plus the small files vLLM needs."""
    picked = [f for f in files if "/" not in f.name and
              (f.name.endswith(".safetensors") or f.name.endswith(SMALL_SUFFIXES))]
    return tuple(sorted(picked, key=lambda f: f.name))


def repo_folder(hub_cache: Path, repo_id: str) -> Path:
    return Path(hub_cache) / ("models--" + repo_id.replace("/", "--"))


def snapshot_dir(hub_cache: Path, repo_id: str, commit: str) -> Path:
    return repo_folder(hub_cache, repo_id) / "snapshots" / commit


def cached_snapshot(hub_cache: Path, repo_id: str, commit: str | None) -> Path | None:
    """Offline: the snapshot at ``commit``, else the newest one holding a config.json (``up`` pins
    snapshots by commit, so no ``refs/main`` exists for them)."""
    snaps = repo_folder(hub_cache, repo_id) / "snapshots"
    if commit:
        return snaps / commit if (snaps / commit / "config.json").is_file() else None
    try:
        found = [p for p in snaps.iterdir() if (p / "config.json").is_file()]
    except OSError:
        return None
    return max(found, key=lambda p: p.stat().st_mtime, default=None)


def cached_listing(hub_cache: Path, repo_id: str, commit: str | None) -> tuple[str, tuple["RepoFile", ...]] | None:
    """Offline: (commit, files) of the cached snapshot (a safetensors blob named by its sha256 keeps
    it), or None when the cache holds no snapshot of ``repo_id``."""
    from club3090.model.spec import RepoFile

    snap = cached_snapshot(hub_cache, repo_id, commit)
    if snap is None:
        return None
    files = []
    for p in sorted(snap.iterdir()):
        blob = p.resolve().name
        sha = blob if len(blob) == 64 and p.name.endswith(".safetensors") else None
        files.append(RepoFile(p.name, p.stat().st_size, sha))
    return snap.name, tuple(files)


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


def _fail_early(hub_cache: Path, repo_id: str, commit: str, files: Sequence["RepoFile"]) -> dl.DownloadReport | None:
    """The refusal before anything is created: a weight file with no LFS sha256, or a name, oid or
    commit that would land outside the repo's cache folder."""
    dest = snapshot_dir(hub_cache, repo_id, commit)
    missing_hash = [f.name for f in files if dl._is_weights(f.name) and not f.sha256]
    if missing_hash:
        return dl.DownloadReport(False, dest, failure=dl.NO_ETAG, failed_file=missing_hash[0],
                                 detail=f"the Hub lists no LFS sha256 for {', '.join(missing_hash)}; "
                                        "refusing weights that cannot be verified")
    unsafe = _unsafe_name(hub_cache, repo_id, commit, files)
    if unsafe is not None:
        return dl.DownloadReport(False, dest, failure=unsafe.token, detail=unsafe.detail, failed_file=unsafe.name)
    return None


def fetch_into_cache(settings: "Settings", repo_id: str, commit: str, files: Sequence["RepoFile"], *,
                     progress: Callable[[str], None] | None = None, bar: bool = True,
                     adopt: Sequence[Path] = ()) -> dl.DownloadReport:
    """Download ``files`` of ``repo_id@commit`` into the HF cache and verify them; never raises for a
    download problem (the report carries the token). ``bar`` shows huggingface_hub's progress bar.
    ``adopt`` (``pull --verify-in-place``): folders whose same-named files are taken into the cache,
    instead of being downloaded, once their sha256 matches the Hub's LFS sha256. Progress lines are
    ``i/n NAME ...``: the caller adds its own prefix."""
    from huggingface_hub import utils as hf_utils

    say = progress or (lambda _m: None)
    hub_cache = Path(settings.hub_cache)
    dest = snapshot_dir(hub_cache, repo_id, commit)
    refused = _fail_early(hub_cache, repo_id, commit, files)
    if refused is not None:
        return refused
    try:
        hub_cache.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return dl.DownloadReport(False, dest, failure=dl.DISK if exc.errno == errno.ENOSPC else dl.FALLBACK_FAILED,
                                 detail=f"{hub_cache}: {exc}")
    lock = dl.SlugLock(hub_cache / dl.LOCKS / "club3090" / (repo_id.replace("/", "--") + ".flock"))
    if not lock.acquire():
        return dl.DownloadReport(False, dest, failure=dl.IN_PROGRESS, detail=f"another download holds {lock.path}")
    install_policy()
    getattr(hf_utils, "enable_progress_bars" if bar else "disable_progress_bars")()
    done: list[str] = []
    total_bytes = 0
    try:
        for i, f in enumerate(files, 1):
            def step(message: str, i: int = i) -> None:
                say(f"{i}/{len(files)} {message}")
            cached = _ensure(settings, repo_id, commit, f, tuple(adopt), bar=bar, say=step)
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


def _ensure(settings: "Settings", repo_id: str, commit: str, f: "RepoFile", adopt: tuple[Path, ...], *,
            bar: bool, say: Callable[[str], None]) -> Path:
    """One file in the cache, checked: already there, adopted from ``adopt``, or downloaded."""
    hub_cache = Path(settings.hub_cache)
    cached = dl.within(snapshot_dir(hub_cache, repo_id, commit), f.name)
    if _verified(f, cached, offline=settings.offline):
        say(f"{f.name}: in the HF cache, checked")
        return cached
    dropped = cached.is_symlink() or cached.exists()
    if dropped:
        _drop(cached)                       # a copy that failed its check is never served
    adopted, refused = _adopt(f, adopt, hub_cache, repo_id, commit, say) if adopt else (None, "")
    if adopted is not None:
        return adopted
    if settings.offline:
        where = "the HF cache held a copy that failed its check (deleted)" if dropped else "it is not in the HF cache"
        raise dl._Failed(dl.OFFLINE_MISSING, f"{f.name}: {where}{refused} and HF_HUB_OFFLINE is set; "
                                             "run once online", f.name)
    size = f"{f.size_bytes / GiB:.2f} GiB" if f.size_bytes else "? bytes"
    say(f"{f.name} ({size})")
    try:
        with _online(), _xet(settings), bounded(Budget.for_stream(settings.download_stall_s, dl.STALL_BYTES)):
            cached = (_hashed(settings, repo_id, commit, f, hub_cache, bar=bar) if f.sha256
                      else _small(settings, repo_id, commit, f, hub_cache))
    except dl._Failed:
        raise
    except Exception as exc:  # noqa: BLE001 - classified once
        raise dl._hub_failure(exc, repo_id, f.name) or dl._Failed(
            dl.FALLBACK_FAILED, f"{f.name}: {dl._one(exc)} (re-run to resume)", f.name) from None
    problem = dl._check(f, cached)
    if problem is not None:
        _drop(cached)
        raise dl._Failed(dl.FALLBACK_FAILED, problem, f.name)
    # a file with an LFS sha256 was hashed on its way into blobs/ (every rung); hashing it again here
    # would read every weight byte twice
    if not f.sha256 and _content_ok(cached) is False:
        etag = cached.resolve().name
        _drop(cached)
        raise dl._Failed(dl.SHA_MISMATCH, f"{f.name}: its content hash is not the Hub's ({etag}); the file was "
                                          "deleted", f.name)
    return cached


def _small(settings: "Settings", repo_id: str, commit: str, f: "RepoFile", hub_cache: Path) -> Path:
    """A file the listing gives no sha256 for (tokenizer, config, ``*.py``): huggingface_hub's own
    download into the cache; its blob is named by the Hub's ETag, checked afterwards."""
    from huggingface_hub import hf_hub_download

    return Path(hf_hub_download(repo_id, f.name, revision=commit, cache_dir=str(hub_cache),
                                endpoint=settings.endpoint, token=settings.token or False,
                                library_name="club3090", etag_timeout=dl.TIMEOUT_S))


def _verified(f: "RepoFile", cached: Path, *, offline: bool) -> bool:
    """``cached`` is ``f``: its size, and its sha256 (a file the listing gives one for) or the content
    address its blob is named by (git blob id or sha256). A file with neither is taken by its size only
    offline (nothing better is known then)."""
    if not cached.is_file() or dl._check(f, cached) is not None:
        return False
    if f.sha256:
        return dl._sha256(cached) == f.sha256
    checked = _content_ok(cached)
    return checked if checked is not None else offline


def _content_ok(path: Path) -> bool | None:
    """Whether a cached file hashes to the name of the blob it links to (the Hub's ETag: a git blob id
    or an LFS sha256); None when it is no link to a content-addressed blob."""
    if not path.is_symlink():
        return None
    etag = path.resolve().name
    if _HEX40.fullmatch(etag):
        return dl.git_blob_id(path) == etag
    if _HEX64.fullmatch(etag):
        return dl._sha256(path) == etag
    return None


def _adopt(f: "RepoFile", folders: Sequence[Path], hub_cache: Path, repo_id: str, commit: str,
           say: Callable[[str], None]) -> tuple[Path | None, str]:
    """``--verify-in-place``: the first same-named file in ``folders`` whose sha256 is the Hub's, taken
    into the cache (a hard link, else a checked copy) -> (its snapshot path, ""), or (None, why none
    was taken: a mismatch is said and named). Only files the listing gives a sha256 for qualify."""
    if not f.sha256:
        return None, ""
    why = ""
    for folder in folders:
        candidate = dl.within(Path(folder), f.name)
        if not candidate.is_file():
            continue
        problem = dl._check(f, candidate)
        digest = None if problem is not None else dl._sha256(candidate)
        if digest != f.sha256:
            mismatch = problem or f"sha256 {digest}, the Hub says {f.sha256}"
            why = f" (the copy in {folder} does not match: {mismatch})"
            say(f"{f.name}: not adopted from {folder}: {mismatch}")
            continue
        blob = _place(candidate, repo_folder(hub_cache, repo_id) / "blobs", f.sha256, f.name)
        say(f"{f.name}: adopted from {folder} (sha256 matches the Hub)")
        return _link(blob, dl.within(snapshot_dir(hub_cache, repo_id, commit), f.name)), ""
    return None, why


def _place(source: Path, blobs: Path, sha256: str, name: str) -> Path:
    """``blobs/<sha256>`` holding ``source``'s bytes: a hard link (no second copy on disk), else a copy
    that is hashed again before it is renamed into place."""
    blob, staged = dl.within(blobs, sha256), dl.within(blobs, sha256 + ADOPTING)
    blobs.mkdir(parents=True, exist_ok=True)
    staged.unlink(missing_ok=True)
    try:
        os.link(source, staged)
    except OSError:
        shutil.copyfile(source, staged)
        digest = dl._sha256(staged)
        if digest != sha256:
            staged.unlink(missing_ok=True)
            raise dl._Failed(dl.SHA_MISMATCH, f"{name}: the copy hashed to {digest}, the Hub says {sha256}",
                             name) from None
    os.replace(staged, blob)
    return blob


def _link(blob: Path, link: Path) -> Path:
    """The snapshot's relative link to its blob, as huggingface_hub lays it out."""
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.exists():
        link.unlink(missing_ok=True)
        os.symlink(os.path.relpath(blob, link.parent), link)
    return link


PARTIAL = ".club3090-partial"
ADOPTING = ".club3090-adopting"   # --verify-in-place: a link or copy on its way into blobs/
XET_STAGING = ".club3090-xet"     # --allow-xet: huggingface_hub's download, checked before it becomes the blob


def _unsafe_name(hub_cache: Path, repo_id: str, commit: str, files: Sequence["RepoFile"]) -> "dl._Failed | None":
    """The failure when the commit, a file name or an LFS oid would name a path outside the
    repo's cache folder (checked before the lock, a mkdir or a delete); else None."""
    from club3090.model.repo_id import commit_problem, oid_problem

    folder = repo_folder(hub_cache, repo_id)
    try:
        problem = commit_problem(commit)
        if problem is not None:
            raise dl._Failed(dl.UNSAFE_NAME, problem)
        for f in files:
            dl.within(folder / "snapshots" / commit, f.name)
            if f.sha256 is not None:
                problem = oid_problem(f.sha256)
                if problem is not None:
                    raise dl._Failed(dl.UNSAFE_NAME, problem, f.name)
                dl.within(folder / "blobs", f.sha256 + PARTIAL)
    except dl._Failed as exc:
        return exc
    return None


def _hashed(settings: "Settings", repo_id: str, commit: str, f: "RepoFile", hub_cache: Path, *, bar: bool) -> Path:
    """A file with an LFS sha256: rung 2, huggingface_hub's Xet transfer, when ``--allow-xet`` is given
    and huggingface_hub can use it (``hf_xet`` installed, ``HF_HUB_DISABLE_XET`` unset); else, or when
    it fails for any reason but a decisive one, the resumable ranged GET (rung 3)."""
    from huggingface_hub.utils._runtime import is_xet_available

    if settings.allow_xet and is_xet_available():     # read inside ``_xet``: the person's switch wins
        try:
            return _via_xet(settings, repo_id, commit, f, hub_cache)
        except dl._Failed:
            raise
        except Exception as exc:  # noqa: BLE001 - decisive failures stop, the rest fall back to rung 3
            failed = dl._hub_failure(exc, repo_id, f.name)
            if failed is not None:
                raise failed from None
    return _resumable(settings, repo_id, commit, f, hub_cache, bar=bar)


def _via_xet(settings: "Settings", repo_id: str, commit: str, f: "RepoFile", hub_cache: Path) -> Path:
    """Rung 2: ``hf_hub_download`` into a staging folder beside the blobs, checked, then renamed to
    ``blobs/<sha256>``: the cache never holds an unchecked weight file on this rung either."""
    from huggingface_hub import hf_hub_download

    assert f.sha256 is not None
    blobs = repo_folder(hub_cache, repo_id) / "blobs"
    staging = dl.within(blobs, f.sha256 + XET_STAGING)
    shutil.rmtree(staging, ignore_errors=True)
    try:
        got = Path(hf_hub_download(repo_id, f.name, revision=commit, local_dir=str(staging),
                                   endpoint=settings.endpoint, token=settings.token or False,
                                   library_name="club3090", etag_timeout=dl.TIMEOUT_S))
        digest = dl._sha256(got)
        if digest != f.sha256:
            raise dl._Failed(dl.SHA_MISMATCH, f"{f.name}: sha256 {digest}, the Hub says {f.sha256}", f.name)
        os.replace(got, dl.within(blobs, f.sha256))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return _link(dl.within(blobs, f.sha256), dl.within(snapshot_dir(hub_cache, repo_id, commit), f.name))


def _resumable(settings: "Settings", repo_id: str, commit: str, f: "RepoFile", hub_cache: Path, *,
               bar: bool) -> Path:
    """One weight file into the cache layout (``blobs/<sha256>`` + the snapshot link), resuming a
    ``<sha256>.club3090-partial`` left by an interrupted run with a ranged GET. The blob is only
    renamed into place after its sha256 matched, so the cache never holds an unverified weight file.
    (huggingface_hub downloads to a per-process temporary file and cannot resume across runs.)"""
    from huggingface_hub import get_session, hf_hub_url, hf_raise_for_status
    from huggingface_hub.utils._headers import build_hf_headers
    from tqdm.auto import tqdm  # type: ignore[import-untyped]

    assert f.sha256 is not None
    blobs = repo_folder(hub_cache, repo_id) / "blobs"
    blob, part = dl.within(blobs, f.sha256), dl.within(blobs, f.sha256 + PARTIAL)
    if blob.is_file() and dl._sha256(blob) != f.sha256:
        blob.unlink()
    if not blob.is_file():
        blobs.mkdir(parents=True, exist_ok=True)
        start = part.stat().st_size if part.is_file() else 0
        if f.size_bytes is not None and start > f.size_bytes:
            part.unlink()
            start = 0
        headers = build_hf_headers(token=settings.token or False, library_name="club3090")
        if start:
            headers["Range"] = f"bytes={start}-"
        url = hf_hub_url(repo_id, f.name, revision=commit, endpoint=settings.endpoint)
        # httpx drops Authorization on a redirect to another origin (the LFS CDN)
        with get_session().stream("GET", url, headers=headers, timeout=dl.TIMEOUT_S, follow_redirects=True) as resp:
            if resp.status_code >= 400:
                resp.read()
                hf_raise_for_status(resp)
            got = start if start and resp.status_code == 206 else 0
            with open(part, "ab" if got else "wb") as fh, tqdm(total=f.size_bytes, initial=got, unit="B",
                                                              unit_scale=True, desc=f.name, disable=not bar,
                                                              leave=False) as progress:
                for chunk in resp.iter_bytes():
                    got += len(chunk)
                    if f.size_bytes is not None and got > f.size_bytes:
                        part.unlink(missing_ok=True)
                        raise dl._Failed(dl.FALLBACK_FAILED, f"{f.name}: the body is longer than the "
                                                             f"{f.size_bytes} bytes the Hub lists", f.name)
                    fh.write(chunk)
                    progress.update(len(chunk))
        digest = dl._sha256(part)
        if digest != f.sha256:
            part.unlink(missing_ok=True)
            raise dl._Failed(dl.SHA_MISMATCH, f"{f.name}: sha256 {digest}, the Hub says {f.sha256}", f.name)
        os.replace(part, blob)
    return _link(blob, dl.within(snapshot_dir(hub_cache, repo_id, commit), f.name))


def _online() -> AbstractContextManager[None]:
    from club3090.edges import hub

    return hub.online()


def _xet(settings: "Settings") -> AbstractContextManager[None]:
    from club3090.edges import hub

    return hub.xet_rung(settings.allow_xet)


__all__ = ["OFFLINE_MISSING", "cached_bytes", "cached_snapshot", "fetch_into_cache", "repo_folder", "serving_files", "snapshot_dir"]
