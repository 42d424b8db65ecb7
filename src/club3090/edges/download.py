"""[E] download: fetch a derived repo's files into ``<HF_HOME>/club3090/pulls/<slug>-<hash>/``.

Besides ``hub`` this is the only module that imports ``huggingface_hub`` (inside functions, never
at import). The endpoint and token come from ``Settings`` and are passed explicitly.

- The file set is the disk gate's (``ModelSpec.download_files``), nothing more.
- Each file lands in ``<dest>/.incomplete/`` first and is moved into ``<dest>`` with one rename
  once it passed its checks; a file that fails is deleted, so ``<dest>`` only ever holds checked
  files. The staging folder is removed at the end, success or not.
- The folder name is the repo id's slug plus a short hash of the exact id, so two repo ids whose
  slugs agree (``coll/a-b``, ``coll-a/b``) never share a folder.
- Every ``*.safetensors`` and ``*.gguf`` is SHA-256-checked against the Hub's LFS sha256 (``RepoFile.sha256``,
  from ``siblings[].lfs.sha256``); no hash is a hard ``no-etag``. Other files (tokenizers, chat
  templates, ``*.py`` run under ``--trust-remote-code``) are small: they are fetched again on
  every pull and checked against their content address (the ETag: git blob id or LFS sha256);
  a copy already in the folder is never trusted by its size.
- A per-folder lock (``<pulls>/.locks/<folder>.flock``, an OS file lock through ``filelock``)
  refuses a second concurrent pull (``in-progress``). The OS releases it when its process ends,
  so there is no stale lock to take over and no takeover race.
- Time: metadata requests have the Hub request deadline (``Settings.hub_deadline_s``); a body
  that makes no progress for ``Settings.download_stall_s`` fails (``request_budget``).
- Ladder: (1) ``hf_hub_download`` (classic LFS; rung 2, Xet, only with ``--allow-xet``
  (``Settings.allow_xet``, ``hub.xet_rung``), never when ``HF_HUB_DISABLE_XET`` is set), (3) a single-stream GET of the resolve URL, capped at the listed size (no
  resume: staging starts empty); both failing is ``fallback-failed``.
- Offline (``Settings.offline``) the Hub fetcher requests nothing; a repo found in the HF cache is
  copied out of its snapshot by ``folder_fetcher`` instead.

Failures are values (``DownloadReport.failure`` is one of ``TOKENS``); nothing here raises for a
download problem.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from club3090.compose.generate import MAX_SLUG
from club3090.edges.request_budget import Budget, bounded, install_policy
from club3090.model.slug import sanitize_slug

if TYPE_CHECKING:
    from club3090.model.spec import RepoFile
    from club3090.settings import Settings

NO_ETAG = "no-etag"
SHA_MISMATCH = "sha-mismatch"
GATED_401 = "gated-401"
DISK = "disk"
IN_PROGRESS = "in-progress"
FALLBACK_FAILED = "fallback-failed"
UNSAFE_NAME = "unsafe-name"        # a listed name or oid that is not a plain relative path / 64 hex
OFFLINE_MISSING = "offline-not-cached"
TOKENS = (NO_ETAG, SHA_MISMATCH, GATED_401, DISK, IN_PROGRESS, FALLBACK_FAILED, UNSAFE_NAME, OFFLINE_MISSING)

PULLS_DIR = ("club3090", "pulls")
STAGING = ".incomplete"
LOCKS = ".locks"
HASH_CHUNK = 1 << 20
TIMEOUT_S = 30.0
STALL_BYTES = 64 * 1024          # less than this per stall window is a stalled download
ID_HASH_CHARS = 8

_HEX40 = re.compile(r"[0-9a-f]{40}")
_HEX64 = re.compile(r"[0-9a-f]{64}")

Progress = Callable[[str], None]
Fetch = Callable[[str, str, Path], Path]  # (repo_id, filename, staging dir) -> the staged file


def pulls_root(hf_home: Path) -> Path:
    return Path(hf_home).expanduser().absolute().joinpath(*PULLS_DIR)


def pull_dir(hf_home: Path, repo_id: str) -> Path:
    """``<HF_HOME>/club3090/pulls/<slug>-<hash>``: where [E] puts a repo and the compose mounts it.

    The hash is of the exact repo id, so ids that sanitize to one slug keep apart."""
    digest = hashlib.sha256(repo_id.encode("utf-8")).hexdigest()[:ID_HASH_CHARS]
    return pulls_root(hf_home) / f"{sanitize_slug(repo_id, max_len=MAX_SLUG - ID_HASH_CHARS - 1)}-{digest}"


@dataclass(frozen=True, slots=True)
class DownloadReport:
    ok: bool
    dest: Path
    files: tuple[str, ...] = ()            # files present and checked in dest
    bytes: int = 0
    sha_verified: bool = False             # every weight file matched its LFS sha256
    failure: str | None = None             # one of TOKENS
    detail: str = ""
    failed_file: str | None = None

    def to_point(self) -> dict[str, Any]:
        """pt2-download.json's keys (plus ``detail``)."""
        return {"ok": self.ok, "files": list(self.files), "bytes": self.bytes,
                "sha_verified": self.sha_verified, "failure": self.failure, "detail": self.detail}


class _Failed(Exception):
    def __init__(self, token: str, detail: str, name: str | None = None) -> None:
        super().__init__(detail)
        self.token, self.detail, self.name = token, detail, name


def within(root: Path, name: str) -> Path:
    """``files.inside`` for a listed file name or oid: an unsafe one fails the download with
    ``unsafe-name`` before anything is created, deleted or written."""
    from club3090.edges.files import inside
    from club3090.errors import UnsafePath

    try:
        return inside(root, name)
    except UnsafePath as exc:
        raise _Failed(UNSAFE_NAME, exc.message, name) from None


def raise_for(report: DownloadReport, repo_id: str, what: str = "download") -> None:
    """The error a failed download of ``repo_id`` ends ``up`` / ``swap`` with, by its token: each
    cause its own headline (nothing to raise when ``report.ok``)."""
    from club3090.errors import HubFault, HubOffline, HubUnreachable, IntegrityError, UnverifiableWeights

    if report.ok:
        return
    if report.failure == SHA_MISMATCH:
        raise IntegrityError(report.failed_file or repo_id, f"{report.detail}; the file was deleted, nothing "
                                                            "was started (re-run to download it again)")
    if report.failure == NO_ETAG:
        raise UnverifiableWeights(repo_id, report.detail, file=report.failed_file)
    if report.failure == OFFLINE_MISSING:
        raise HubOffline(repo_id, report.detail)
    if report.failure == UNSAFE_NAME:
        raise HubFault(repo_id, f"{what}: {report.detail}")
    raise HubUnreachable(repo_id, f"{what} failed ({report.failure}): {report.detail}")


# --------------------------------------------------------------------------------------------
# the per-slug lock
# --------------------------------------------------------------------------------------------

@dataclass
class SlugLock:
    """An OS file lock (``filelock``); ``acquire`` is False while another holder has it.

    Taking it is one atomic ``flock``: of any number of concurrent pulls exactly one wins, and a
    holder that dies releases it with its process."""

    path: Path
    held: bool = field(default=False, init=False)
    _lock: Any = field(default=None, init=False, repr=False)

    def acquire(self) -> bool:
        from filelock import FileLock, Timeout

        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(self.path), thread_local=False, is_singleton=False)
        try:
            lock.acquire(timeout=0)
        except Timeout:
            return False
        self._lock, self.held = lock, True
        return True

    def release(self) -> None:
        if self.held and self._lock is not None:
            self._lock.release()
            self._lock, self.held = None, False


# --------------------------------------------------------------------------------------------
# fetching one file
# --------------------------------------------------------------------------------------------

def hub_fetcher(settings: "Settings", *, revision: str | None = None, timeout: float = TIMEOUT_S) -> Fetch:
    """Fetch one file from the Hub into the staging folder.

    A HEAD first gives the file's size and ETag at ``revision`` (the commit the gate derived);
    then rung 1 (``hf_hub_download``) with rung 3 (a single-stream GET of the resolve URL, capped
    at that size) behind it. A non-weight file is checked against its ETag, the Hub's content
    address: the git blob id (``sha1("blob <size>\\0" + bytes)``) of a plain file, the sha256 of
    an LFS file; weights are checked by ``download`` against the LFS sha256 the gate saw. Hub
    errors are mapped once, by ``hub.translate``: access refused -> ``gated-401``, no ETag ->
    ``no-etag``. Offline (``Settings.offline``) nothing is requested.
    """
    from club3090.edges import hub

    def fetch(repo_id: str, filename: str, staging: Path) -> Path:
        if settings.offline:
            raise _Failed(FALLBACK_FAILED, f"{filename}: HF_HUB_OFFLINE is set; nothing is fetched from the Hub",
                          filename)
        from huggingface_hub import get_hf_file_metadata, hf_hub_download, hf_hub_url

        within(staging, filename)
        install_policy()
        token: bool | str = settings.token or False
        url = hf_hub_url(repo_id, filename, revision=revision, endpoint=settings.endpoint)
        try:
            with hub.online(), bounded(Budget.for_request(settings.hub_deadline_s)):
                meta = get_hf_file_metadata(url, token=token, timeout=timeout, library_name="club3090",
                                            endpoint=settings.endpoint)
        except Exception as exc:  # noqa: BLE001 - classified, else a rung-1-style failure
            raise _hub_failure(exc, repo_id, filename) or _Failed(
                FALLBACK_FAILED, f"{filename}: {_one(exc)}", filename) from None
        if not meta.etag or meta.size is None:
            raise _Failed(NO_ETAG, f"{filename}: the Hub sent no ETag or size", filename)
        try:
            with hub.online(), hub.xet_rung(settings.allow_xet), \
                    bounded(Budget.for_stream(settings.download_stall_s, STALL_BYTES)):
                staged = Path(hf_hub_download(repo_id, filename, revision=revision, endpoint=settings.endpoint,
                                              token=token, local_dir=staging, cache_dir=settings.hub_cache,
                                              library_name="club3090", etag_timeout=timeout))
        except Exception as exc:  # noqa: BLE001 - anything not decisive falls back to rung 3
            failed = _hub_failure(exc, repo_id, filename)
            if failed is not None:
                raise failed from None
            try:
                with hub.online(), bounded(Budget.for_stream(settings.download_stall_s, STALL_BYTES)):
                    staged = _single_stream(settings, url, filename, staging, meta.size, timeout)
            except _Failed:
                raise
            except Exception as fallback:  # noqa: BLE001
                raise _Failed(FALLBACK_FAILED, f"{filename}: {_one(exc)}; fallback: {_one(fallback)}",
                              filename) from None
        if not _is_weights(filename):
            _verify_content(staged, filename, meta.etag)
        return staged

    return fetch


def folder_fetcher(folder: Path) -> Fetch:
    """Copy files out of a local snapshot (the HF cache, offline) into the staging folder.

    In the HF cache every file is a link to ``blobs/<etag>``, so a non-weight file is checked
    against the name of its blob, as ``hub_fetcher`` checks it against the ETag."""
    folder = Path(folder)

    def fetch(_repo_id: str, filename: str, staging: Path) -> Path:
        source = within(folder, filename)
        target = within(staging, filename)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            shutil.copyfile(source, target)
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                raise _Failed(DISK, f"{filename}: {exc}", filename) from None
            raise _Failed(FALLBACK_FAILED, f"{filename}: {_one(exc)}", filename) from None
        if not _is_weights(filename) and source.is_symlink():
            _verify_content(target, filename, source.resolve().name)
        return target

    return fetch


def git_blob_id(path: Path) -> str:
    """The git object id of a file's bytes: ``sha1(b"blob <size>\\0" + data)``."""
    digest = hashlib.sha1(b"blob %d\0" % path.stat().st_size)
    with open(path, "rb") as handle:
        while chunk := handle.read(HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _verify_content(path: Path, filename: str, etag: str) -> None:
    """Raise ``sha-mismatch`` unless ``path`` hashes to ``etag`` (a git blob id or an LFS sha256)."""
    etag = etag.strip().strip('"').removeprefix("W/").strip('"').lower()
    if _HEX40.fullmatch(etag):
        got = git_blob_id(path)
    elif _HEX64.fullmatch(etag):
        got = _sha256(path)
    else:
        raise _Failed(NO_ETAG, f"{filename}: ETag {etag[:80]!r} is not a content hash; cannot verify", filename)
    if got != etag:
        path.unlink(missing_ok=True)
        raise _Failed(SHA_MISMATCH, f"{filename}: content hash {got}, the Hub says {etag}", filename)


def _hub_failure(exc: BaseException, repo_id: str, filename: str) -> "_Failed | None":
    """The decisive failures (no retry on rung 3); None lets the caller fall back."""
    from club3090.edges.hub import translate
    from club3090.errors import FileMetadataMissing, RepoNotFound

    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return _Failed(DISK, f"{filename}: {exc}", filename)
    mapped = translate(exc, repo_id, has_token=False)   # gated comes back as GatedRepo either way
    if isinstance(mapped, RepoNotFound):   # GatedRepo included: the gate saw this repo, so access was refused
        return _Failed(GATED_401, f"{filename}: the Hub refused access ({mapped.detail or type(exc).__name__})",
                       filename)
    if isinstance(mapped, FileMetadataMissing):
        return _Failed(NO_ETAG, f"{filename}: the Hub sent no ETag/commit ({mapped.detail})", filename)
    return None


def _one(exc: BaseException) -> str:
    from club3090.settings import redact_url_credentials

    text = str(exc).splitlines()[0] if str(exc) else ""
    return redact_url_credentials(f"{type(exc).__name__}: {text}"[:300])


def _single_stream(settings: "Settings", url: str, filename: str, staging: Path, size: int,
                   timeout: float) -> Path:
    """Rung 3: GET the resolve URL (redirects followed) into the staging folder, reading at most
    ``size + 1`` bytes; a longer body is refused rather than written."""
    from huggingface_hub import get_session, hf_raise_for_status
    from huggingface_hub.utils._headers import build_hf_headers

    target = within(staging, filename)
    target.parent.mkdir(parents=True, exist_ok=True)
    headers = build_hf_headers(token=settings.token or False, library_name="club3090")
    with get_session().stream("GET", url, headers=headers, timeout=timeout, follow_redirects=True) as resp:
        if resp.status_code >= 400:
            resp.read()
            hf_raise_for_status(resp)
        got = 0
        try:
            with open(target, "wb") as handle:
                for chunk in resp.iter_bytes():
                    got += len(chunk)
                    if got > size:
                        raise _Failed(FALLBACK_FAILED, f"{filename}: the body is longer than the "
                                                       f"{size} bytes the Hub lists", filename)
                    handle.write(chunk)
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                raise _Failed(DISK, f"{filename}: {exc}", filename) from None
            raise
    return target


# --------------------------------------------------------------------------------------------
# the download stage
# --------------------------------------------------------------------------------------------

def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _check(file: "RepoFile", path: Path) -> str | None:
    """None when ``path`` is ``file``; else why not (and the token to report)."""
    if not path.is_file():
        return f"{file.name}: missing after download"
    size = path.stat().st_size
    if file.size_bytes is not None and size != file.size_bytes:
        return f"{file.name}: {size} bytes, the Hub lists {file.size_bytes}"
    return None


def _is_weights(name: str) -> bool:
    return name.endswith((".safetensors", ".gguf"))


def download(repo_id: str, files: Sequence["RepoFile"], dest: Path, *, fetch: Fetch,
             progress: Progress | None = None) -> DownloadReport:
    """Fetch ``files`` of ``repo_id`` into ``dest`` (see the module docstring). Never raises for a
    download problem: the report says which token failed and where."""
    dest = Path(dest)
    say = progress or (lambda _msg: None)
    lock = SlugLock(dest.parent / LOCKS / (dest.name + ".flock"))
    missing_hash = [f.name for f in files if _is_weights(f.name) and not f.sha256]
    if missing_hash:
        return DownloadReport(False, dest, failure=NO_ETAG, failed_file=missing_hash[0],
                              detail=f"the Hub lists no LFS sha256 for {', '.join(missing_hash)}; "
                                     "refusing to download weights that cannot be verified")
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return DownloadReport(False, dest, failure=DISK if exc.errno == errno.ENOSPC else FALLBACK_FAILED,
                              detail=f"{dest.parent}: {exc}")
    if not lock.acquire():
        return DownloadReport(False, dest, failure=IN_PROGRESS,
                              detail=f"another pull of this repo holds {lock.path}")
    staging = dest / STAGING
    done: list[str] = []
    total_bytes = 0
    try:
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        total = len(files)
        for file in files:   # every name is checked before anything is deleted or written
            within(dest, file.name)
        for i, file in enumerate(files, 1):
            final = within(dest, file.name)
            size = f"{file.size_bytes / 2**30:.2f} GiB" if file.size_bytes else "? bytes"
            if _is_weights(file.name) and _check(file, final) is None and _sha256(final) == file.sha256:
                say(f"[pull] download {i}/{total} {file.name}: already here, checked")
            else:
                say(f"[pull] download {i}/{total} {file.name} ({size})")
                final.unlink(missing_ok=True)
                staged = fetch(repo_id, file.name, staging)
                problem = _check(file, staged)
                if problem is not None:
                    staged.unlink(missing_ok=True)
                    raise _Failed(FALLBACK_FAILED, problem, file.name)
                if _is_weights(file.name):
                    got = _sha256(staged)
                    if got != file.sha256:
                        staged.unlink(missing_ok=True)
                        raise _Failed(SHA_MISMATCH, f"{file.name}: sha256 {got}, the Hub says {file.sha256}",
                                      file.name)
                final.parent.mkdir(parents=True, exist_ok=True)
                os.replace(staged, final)  # one rename: dest only ever holds checked files
            done.append(file.name)
            total_bytes += final.stat().st_size
        return DownloadReport(True, dest, files=tuple(done), bytes=total_bytes,
                              sha_verified=all(f.sha256 for f in files if _is_weights(f.name)))
    except _Failed as exc:
        return DownloadReport(False, dest, files=tuple(done), bytes=total_bytes, failure=exc.token,
                              detail=exc.detail, failed_file=exc.name)
    except OSError as exc:
        token = DISK if exc.errno == errno.ENOSPC else FALLBACK_FAILED
        return DownloadReport(False, dest, files=tuple(done), bytes=total_bytes, failure=token,
                              detail=_one(exc))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        lock.release()


__all__ = [
    "TOKENS",
    "DownloadReport",
    "SlugLock",
    "download",
    "folder_fetcher",
    "git_blob_id",
    "hub_fetcher",
    "pull_dir",
    "pulls_root",
]
