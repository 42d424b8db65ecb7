"""Download vocabulary shared by every download: failure tokens, the report, the per-repo lock, the
content checks and the classification of Hub errors. The downloading itself is ``hf_cache``'s (the
one path of ``up``, ``swap`` and ``pull``'s [E], into the standard HF cache).

- ``pull_dir``: ``<HF_HOME>/club3090/pulls/<slug>-<hash>``, the folder downloads went to before they
  went into the HF cache; ``pull`` keeps its derived compose next to it
  (``<slug>-<hash>.compose.yml``) and ``pull --verify-in-place`` adopts verified files from it. The
  hash is of the exact repo id, so two ids whose slugs agree (``coll/a-b``, ``coll-a/b``) never
  share a name.
- ``SlugLock``: an OS file lock through ``filelock``; a second concurrent download of one repo is
  ``in-progress``. The OS releases it when its process ends: no stale lock, no takeover race.
- ``within``: a listed file name or oid that would leave its folder is ``unsafe-name``.

Failures are values (``DownloadReport.failure`` is one of ``TOKENS``); nothing here raises for a
download problem.
"""

from __future__ import annotations

import errno
import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from club3090.compose.generate import MAX_SLUG
from club3090.model.slug import sanitize_slug

if TYPE_CHECKING:
    from club3090.model.spec import RepoFile

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
LOCKS = ".locks"
HASH_CHUNK = 1 << 20
TIMEOUT_S = 30.0
STALL_BYTES = 64 * 1024          # less than this per stall window is a stalled download
ID_HASH_CHARS = 8

_HEX40 = re.compile(r"[0-9a-f]{40}")
_HEX64 = re.compile(r"[0-9a-f]{64}")

Progress = Callable[[str], None]


def pulls_root(hf_home: Path) -> Path:
    return Path(hf_home).expanduser().absolute().joinpath(*PULLS_DIR)


def pull_dir(hf_home: Path, repo_id: str) -> Path:
    """``<HF_HOME>/club3090/pulls/<slug>-<hash>``: the pre-cache download folder of a repo (its derived
    compose sits next to it; ``--verify-in-place`` adopts from it).

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
# content checks and failure classification
# --------------------------------------------------------------------------------------------

def git_blob_id(path: Path) -> str:
    """The git object id of a file's bytes: ``sha1(b"blob <size>\\0" + data)``."""
    digest = hashlib.sha1(b"blob %d\0" % path.stat().st_size)
    with open(path, "rb") as handle:
        while chunk := handle.read(HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


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


__all__ = [
    "TOKENS",
    "DownloadReport",
    "SlugLock",
    "git_blob_id",
    "pull_dir",
    "pulls_root",
]
