"""The only module that talks HTTP: a thin wrapper over the real ``huggingface_hub`` client.

- The endpoint and token come from ``Settings`` and are passed explicitly (never the client's
  import-time ``ENDPOINT``); the token is sent as a header and never logged, printed or stored.
- ``Settings.offline`` alone decides offline-ness. Offline, every call raises
  ``errors.HubUnreachable`` before any request. Online, the client's import-time
  ``HF_HUB_OFFLINE`` constant (which would refuse every request if the variable was set when
  huggingface_hub was first imported) is lifted for the span of each call and then restored.
- ``translate`` is the one place that maps huggingface_hub / transport exceptions to ``errors``.
- Transport faults, truncated bodies and 5xx/429 answers are retried a bounded number of times,
  then reported as ``errors.HubUnreachable`` (the CLI exits 69): an outage is not a verdict.
- Time is bounded (``request_budget``): each attempt has a deadline covering connect, first byte
  and the whole body (``Settings.hub_deadline_s``), and all attempts of one client share the
  command's deadline (``Settings.hub_command_deadline_s``); no retry starts after it. A redirect
  loop, an answer that is not the JSON the client expects, or a missed deadline is
  ``HubUnreachable`` too. Messages never carry credentials written into ``HF_ENDPOINT``.
- Safetensors headers are read with ranged GETs through the client's own session (one pool of
  kept-alive connections), up to ``MAX_WORKERS`` shards at a time, streaming and stopping after the
  bytes asked for (so a server that ignores ``Range`` still costs one header, not the file). The
  first range is speculative: sized from the index's tensor names when there is one
  (``safetensors.estimate_header_bytes``), else ``FIRST_READ_BYTES``, and never past the file, a
  fair share of the repo's header budget or ``MAX_FIRST_READ_BYTES``; so one round trip per
  shard is the rule and a second range (only the missing tail) the exception. JSON files
  (config, index) are fetched the same way, capped, and not written to the HF cache.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from club3090.edges.request_budget import Budget, bounded, install_policy
from club3090.errors import (
    Club3090Error,
    EntryNotFound,
    FileMetadataMissing,
    GatedRepo,
    HubError,
    HubFault,
    HubOffline,
    HubUnreachable,
    InputError,
    RepoNotFound,
    RevisionNotFound,
    UsageError,
)
from club3090.model.budgets import MAX_JSON_BYTES, header_bytes_budget, parse_json_capped
from club3090.model.repo_id import (
    commit_problem,
    file_name_problem,
    oid_problem,
    repo_id_problem,
    revision_problem,
    shown,
)
from club3090.model.safetensors import (
    PREFIX_BYTES,
    SafetensorsHeader,
    estimate_header_bytes,
    header_length,
    parse_header,
)
from club3090.model.spec import RepoFile
from club3090.settings import redact_url_credentials

if TYPE_CHECKING:
    from club3090.settings import Settings

Progress = Callable[[int, int], None]  # (files done, files total)

DEFAULT_TIMEOUT_S = 30.0
DEFAULT_RETRIES = 3                     # retries after the first attempt
DEFAULT_BACKOFF_S = 0.5                 # doubled per retry
FIRST_READ_BYTES = 100_000              # no index to size it from: most single-file headers fit
MAX_FIRST_READ_BYTES = 1 << 20          # a speculative range never asks for more than this
HINT_SLACK_BYTES = 4096                 # on top of the estimate: metadata it did not foresee
MAX_WORKERS = 32                        # shards in flight: enough to hide latency, within the pool's keep-alive

_TRANSPORT_NAMES = frozenset({"TransportError", "TimeoutException", "NetworkError", "ProtocolError",
                              "StreamError", "ConnectError", "ReadError", "WriteError", "PoolTimeout"})


class HeaderAllowance:
    """The safetensors header bytes one repo may still cost (``budgets.header_bytes_budget``)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._lock = threading.Lock()
        self._taken: set[str] = set()

    def take(self, name: str, nbytes: int) -> None:
        """Reserve ``nbytes`` for file ``name`` (once per file; retries do not pay twice)."""
        with self._lock:
            if name in self._taken:
                return
            if self.used + nbytes > self.limit:
                raise InputError(name, f"a {nbytes}-byte safetensors header takes this repo's headers past "
                                       f"their {self.limit}-byte budget")
            self.used += nbytes
            self._taken.add(name)


class TruncatedBody(Exception):
    """A response body ended before the bytes its headers promised (retryable transport fault)."""


@dataclass(frozen=True, slots=True)
class RepoInfo:
    """What ``model_info(files_metadata=True)`` tells us, reduced to what derivation needs."""

    repo_id: str
    revision: str | None                # as asked (None = the default branch)
    commit: str | None                  # the resolved 40-hex sha
    files: tuple[RepoFile, ...]
    gated: bool = False

    @property
    def names(self) -> frozenset[str]:
        return frozenset(f.name for f in self.files)

    def file(self, name: str) -> RepoFile | None:
        return next((f for f in self.files if f.name == name), None)


class HubSource(Protocol):
    """The seam ``derive`` talks to; ``HubClient`` is the real one, tests may pass a fake."""

    def repo_info(self, repo_id: str, revision: str | None) -> RepoInfo: ...

    def fetch_json(self, repo_id: str, filename: str, revision: str | None) -> Any: ...

    def read_headers(self, repo_id: str, files: Sequence[RepoFile], revision: str | None,
                     progress: Progress | None = None, *,
                     index: Mapping[str, Any] | None = None) -> dict[str, SafetensorsHeader]: ...


def is_transport_failure(exc: BaseException) -> bool:
    """True for connection/timeout/protocol faults, whichever of httpx or httpx2 raised them."""
    if isinstance(exc, (ConnectionError, TimeoutError, TruncatedBody)):
        return True
    for cls in type(exc).__mro__:
        if cls.__module__.split(".")[0] in {"httpx", "httpx2", "httpcore"} and cls.__name__ in _TRANSPORT_NAMES:
            return True
    return False


class _OnlineOverride:
    """Ref-counted lift of ``huggingface_hub.constants.HF_HUB_OFFLINE`` while online calls run.

    huggingface_hub computes the constant once, at import, and its request hook refuses every
    request while it is true. Parallel header reads share one lift; the last call out restores
    the value it found, so code outside our calls still sees the library's own setting.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._depth = 0
        self._saved = False

    @contextmanager
    def __call__(self) -> Iterator[None]:
        from huggingface_hub import constants

        with self._lock:
            if self._depth == 0:
                self._saved = constants.HF_HUB_OFFLINE
                constants.HF_HUB_OFFLINE = False
            self._depth += 1
        try:
            yield
        finally:
            with self._lock:
                self._depth -= 1
                if self._depth == 0:
                    constants.HF_HUB_OFFLINE = self._saved


online = _OnlineOverride()
"""Wrap every online huggingface_hub call (here and in ``download``) in ``with online():``."""


_XET_LOCK = threading.Lock()


@contextmanager
def xet_rung(allow: bool) -> Iterator[None]:
    """The Xet transfer rung of ``hf_hub_download`` for the calls inside: off unless ``allow``
    (``--allow-xet``); ``HF_HUB_DISABLE_XET`` set by the person keeps it off either way.
    huggingface_hub reads ``constants.HF_HUB_DISABLE_XET`` at call time, so the switch is scoped."""
    from huggingface_hub import constants

    with _XET_LOCK:
        saved = constants.HF_HUB_DISABLE_XET
        constants.HF_HUB_DISABLE_XET = saved or not allow
    try:
        yield
    finally:
        with _XET_LOCK:
            constants.HF_HUB_DISABLE_XET = saved


def _status(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    code = getattr(response, "status_code", None)
    return code if isinstance(code, int) else None


def _retryable(exc: BaseException) -> bool:
    from huggingface_hub import errors as hf_errors

    if isinstance(exc, hf_errors.OfflineModeIsEnabled):
        return False
    if is_transport_failure(exc):
        return True
    status = _status(exc)
    return status is not None and (status >= 500 or status == 429)


def _describe(exc: BaseException) -> str:
    status = _status(exc)
    head = f"HTTP {status}" if status is not None else type(exc).__name__
    text = str(exc).splitlines()[0] if str(exc) else ""
    return redact_url_credentials(f"{head}: {text}"[:300] if text else head)


def translate(exc: BaseException, repo_id: str, has_token: bool) -> HubError | None:
    """Map a huggingface_hub or transport exception to our tree; None if it is not a Hub problem."""
    from huggingface_hub import errors as hf_errors

    if isinstance(exc, HubError):
        return exc
    if isinstance(exc, hf_errors.OfflineModeIsEnabled):
        return HubOffline(repo_id, "HF_HUB_OFFLINE is set")
    if type(exc).__name__ == "TooManyRedirects":  # httpx / httpx2: a redirect loop is an unusable Hub
        return HubUnreachable(repo_id, f"too many redirects ({_describe(exc)})")
    if isinstance(exc, hf_errors.GatedRepoError):  # subclass of RepositoryNotFoundError: test it first
        return RepoNotFound(repo_id, "gated") if has_token else GatedRepo(repo_id, "gated")
    if isinstance(exc, hf_errors.RepositoryNotFoundError):
        return RepoNotFound(repo_id, "not found")
    if isinstance(exc, hf_errors.RevisionNotFoundError):
        return RevisionNotFound(repo_id, "revision not found")
    if isinstance(exc, hf_errors.RemoteEntryNotFoundError):
        return EntryNotFound(repo_id, "file not found")
    if isinstance(exc, hf_errors.FileMetadataError):  # no ETag / X-Repo-Commit on a file's answer
        return FileMetadataMissing(repo_id, _describe(exc))
    if isinstance(exc, hf_errors.HfHubHTTPError):
        status = _status(exc)
        if status is not None and (status >= 500 or status == 429):
            return HubUnreachable(repo_id, _describe(exc))
        return RepoNotFound(repo_id, _describe(exc))  # any other non-2xx answer
    if is_transport_failure(exc):
        return HubUnreachable(repo_id, _describe(exc))
    return None


class HubClient:
    """Hub access for one settings object. Thread-safe; share one per command."""

    def __init__(self, settings: "Settings", *, timeout: float | None = None, retries: int | None = None,
                 backoff: float | None = None, max_workers: int = MAX_WORKERS,
                 sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic) -> None:
        # None -> the module defaults, read at construction so tests can shorten them
        self.endpoint = settings.endpoint.rstrip("/")
        self._token = settings.token or None
        self.offline = settings.offline
        self.timeout = min(DEFAULT_TIMEOUT_S, settings.hub_deadline_s) if timeout is None else timeout
        self.retries = DEFAULT_RETRIES if retries is None else retries
        self.backoff = DEFAULT_BACKOFF_S if backoff is None else backoff
        self.max_workers = max_workers
        self._sleep = sleep
        self._clock = clock
        self.deadline_s = settings.hub_deadline_s
        self._command_deadline = clock() + settings.hub_command_deadline_s
        install_policy()

    def __repr__(self) -> str:  # never show the token
        return f"HubClient(endpoint={self.endpoint!r}, token={'<set>' if self._token else None})"

    # -- plumbing ---------------------------------------------------------------------------
    def _auth(self) -> bool | str:
        return self._token if self._token else False

    def _headers(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        from huggingface_hub.utils._headers import build_hf_headers

        return build_hf_headers(token=self._auth(), library_name="club3090", headers=extra)

    def _url(self, repo_id: str, filename: str, revision: str | None) -> str:
        from huggingface_hub import hf_hub_url

        return hf_hub_url(repo_id, filename, revision=revision, endpoint=self.endpoint)

    def _call(self, repo_id: str, fn: Callable[[], Any]) -> Any:
        """Every request goes through here: the offline check, retries, error translation."""
        if self.offline:
            raise HubOffline(repo_id, "HF_HUB_OFFLINE is set: no Hub requests")
        attempt = 0
        while True:
            budget = Budget.for_request(self.deadline_s, not_after=self._command_deadline, clock=self._clock)
            try:
                with online(), bounded(budget):
                    return fn()
            except Exception as exc:
                pause = self.backoff * (2 ** attempt)
                if _retryable(exc) and attempt < self.retries and self._clock() + pause < self._command_deadline:
                    self._sleep(pause)
                    attempt += 1
                    continue
                mapped = translate(exc, repo_id, self._token is not None)
                if mapped is None and isinstance(exc, (ValueError, TypeError, KeyError, AttributeError)) \
                        and not isinstance(exc, Club3090Error):
                    # the Hub answered, but not with what the client parses (HTML, a list, no "id")
                    mapped = HubUnreachable(repo_id, f"the Hub's answer is not what the API returns "
                                                     f"({type(exc).__name__}); check HF_ENDPOINT")
                if mapped is None:
                    raise
                if isinstance(mapped, HubUnreachable) and budget.spent:
                    mapped = type(mapped)(repo_id, f"{mapped.detail}: {budget.spent}")
                if isinstance(mapped, HubUnreachable) and attempt:
                    mapped = type(mapped)(repo_id, f"{mapped.detail} (after {attempt + 1} attempts)")
                raise mapped from None

    def _get(self, url: str, *, start: int = 0, length: int, ranged: bool) -> bytes:
        """GET ``length`` bytes from ``start`` (Range when ``ranged``); stream and stop early."""
        from huggingface_hub import get_session, hf_raise_for_status

        extra = {"range": f"bytes={start}-{start + length - 1}"} if ranged else None
        with get_session().stream("GET", url, headers=self._headers(extra), timeout=self.timeout) as resp:
            if resp.status_code >= 400:
                resp.read()
                hf_raise_for_status(resp)
            total: int | None = None
            if resp.status_code == 206:
                content_range = resp.headers.get("content-range", "")
                if not content_range.startswith(f"bytes {start}-"):
                    raise TruncatedBody(f"unexpected Content-Range {content_range!r}")
                tail = content_range.rpartition("/")[2]
                total = int(tail) if tail.isdigit() else None
                skip = 0
            else:  # Range ignored (or not asked): the body starts at byte 0
                length_header = resp.headers.get("content-length", "")
                total = int(length_header) if length_header.isdigit() else None
                skip = start
            expected = length if total is None else max(0, min(length, total - start))
            chunks: list[bytes] = []
            got = 0
            for chunk in resp.iter_bytes():
                if skip:
                    cut = min(skip, len(chunk))
                    chunk, skip = chunk[cut:], skip - cut
                chunks.append(chunk)
                got += len(chunk)
                if got > length:  # more than asked (Range ignored): stop. At exactly ``length`` the
                    break         # stream ends by itself and the connection goes back to the pool
            if got < expected:
                raise TruncatedBody(f"got {got} of {expected} bytes")
            return b"".join(chunks)[:length]

    # -- HubSource ----------------------------------------------------------------------------
    def repo_info(self, repo_id: str, revision: str | None) -> RepoInfo:
        from huggingface_hub import HfApi

        _check_reference(repo_id, revision)
        api = HfApi(endpoint=self.endpoint, token=self._auth(), library_name="club3090")
        info = self._call(repo_id, lambda: api.model_info(repo_id, revision=revision, files_metadata=True,
                                                          timeout=self.timeout))
        return RepoInfo(repo_id=repo_id, revision=revision, commit=_listed_commit(repo_id, getattr(info, "sha", None)),
                        files=_listed_files(repo_id, info.siblings or ()),
                        gated=bool(getattr(info, "gated", False)))

    def fetch_json(self, repo_id: str, filename: str, revision: str | None,
                   *, limit: int = MAX_JSON_BYTES) -> Any:
        """Fetch and parse a JSON file of the repo (capped at ``limit`` bytes; over -> InputError)."""
        _check_reference(repo_id, revision)
        url = self._url(repo_id, filename, revision)
        raw = _naming(filename, lambda: self._call(repo_id, lambda: self._get_whole(url, limit + 1)))
        return parse_json_capped(raw, name=f"{repo_id}/{filename}", limit=limit)

    def _get_whole(self, url: str, limit: int) -> bytes:
        from huggingface_hub import get_session, hf_raise_for_status

        with get_session().stream("GET", url, headers=self._headers(), timeout=self.timeout) as resp:
            if resp.status_code >= 400:
                resp.read()
                hf_raise_for_status(resp)
            chunks: list[bytes] = []
            got = 0
            for chunk in resp.iter_bytes():
                chunks.append(chunk)
                got += len(chunk)
                if got >= limit:
                    break
            return b"".join(chunks)

    def read_header(self, repo_id: str, file: RepoFile, revision: str | None,
                    allowance: HeaderAllowance | None = None, *, first_read: int | None = None) -> SafetensorsHeader:
        """One file's header: one ranged GET of ``first_read`` bytes (default ``FIRST_READ_BYTES``),
        a second for the rest only when the header is longer than that."""
        _check_reference(repo_id, revision)
        url = self._url(repo_id, file.name, revision)
        name = f"{repo_id}/{file.name}"
        size = file.size_bytes
        want = FIRST_READ_BYTES if first_read is None else first_read
        want = max(PREFIX_BYTES, want) if size is None else max(1, min(want, size))

        def attempt() -> SafetensorsHeader:
            first = self._get(url, start=0, length=want, ranged=True)
            n = header_length(first[:PREFIX_BYTES], file=name)
            if allowance is not None:
                allowance.take(name, n)
            if size is not None and PREFIX_BYTES + n > size:
                raise InputError(name, f"truncated: header of {n} bytes does not fit in a {size}-byte file")
            end = PREFIX_BYTES + n
            if len(first) >= end:
                raw = first[PREFIX_BYTES:end]
            else:  # longer than the speculative range: fetch only the missing tail
                tail = self._get(url, start=len(first), length=end - len(first), ranged=True)
                raw = first[PREFIX_BYTES:] + tail
                if len(raw) < n:  # the file itself ends inside its header
                    raise InputError(name, f"truncated: got {len(raw)} of {n} header bytes")
            return parse_header(raw, file=name, file_size=size)

        header: SafetensorsHeader = _naming(file.name, lambda: self._call(repo_id, attempt))
        return header

    def read_headers(self, repo_id: str, files: Sequence[RepoFile], revision: str | None,
                     progress: Progress | None = None, *,
                     index: Mapping[str, Any] | None = None) -> dict[str, SafetensorsHeader]:
        """Read every file's header, ``max_workers`` at a time; the first failure cancels the rest.

        ``index`` (the parsed ``*.safetensors.index.json``) sizes each first range. All headers
        together stay within ``budgets.header_bytes_budget(len(files))``."""
        allowance = HeaderAllowance(header_bytes_budget(len(files)))
        sizes = first_read_sizes(files, index, allowance.limit)
        return read_all(lambda f: self.read_header(repo_id, f, revision, allowance, first_read=sizes[f.name]),
                        files, progress, max_workers=self.max_workers)


def first_read_sizes(files: Sequence[RepoFile], index: Mapping[str, Any] | None, budget: int) -> dict[str, int]:
    """The speculative first range of each file: the index's estimate of its header (plus slack),
    else ``FIRST_READ_BYTES``; never more than ``MAX_FIRST_READ_BYTES`` or an equal share of
    ``budget``, so the speculative reads of one repo together stay within its header budget."""
    weight_map = index.get("weight_map") if isinstance(index, Mapping) else None
    hints = estimate_header_bytes(weight_map) if isinstance(weight_map, Mapping) else {}
    share = max(PREFIX_BYTES, budget // max(1, len(files)))
    out: dict[str, int] = {}
    for f in files:
        hint = hints.get(f.name)
        want = FIRST_READ_BYTES if hint is None else PREFIX_BYTES + hint + HINT_SLACK_BYTES
        out[f.name] = min(want, MAX_FIRST_READ_BYTES, share)
    return out


def _listed_files(repo_id: str, siblings: Iterable[Any]) -> tuple[RepoFile, ...]:
    """The listing's files, each name and LFS oid checked before it can name a path or a blob;
    a malformed one is a Hub fault (``HubFault``, exit 69), never the user's mistake."""
    files = []
    for sibling in siblings:
        lfs = getattr(sibling, "lfs", None)
        size = getattr(sibling, "size", None)
        if size is None and lfs is not None:
            size = lfs.size
        sha = getattr(lfs, "sha256", None) if lfs is not None else None
        problem = file_name_problem(sibling.rfilename) or (oid_problem(sha) if sha is not None else None)
        if problem is None and size is not None and not (isinstance(size, int) and 0 <= size < 2**63):
            problem = f"size {shown(size)} of {shown(sibling.rfilename)} is not a byte count"
        if problem is not None:
            raise HubFault(repo_id, problem)
        files.append(RepoFile(name=sibling.rfilename, size_bytes=size, sha256=sha))
    return tuple(files)


def _listed_commit(repo_id: str, commit: Any) -> str | None:
    problem = commit_problem(commit) if commit is not None else None
    if problem is not None:
        raise HubFault(repo_id, problem)
    return commit if isinstance(commit, str) else None


def _check_reference(repo_id: str, revision: str | None) -> None:
    """No URL is built from an inexact repo id or revision (callers check first; this is the floor)."""
    problem = repo_id_problem(repo_id) or (revision_problem(revision) if revision is not None else None)
    if problem is not None:
        raise UsageError(problem)


def _naming(filename: str, call: Callable[[], Any]) -> Any:
    """Run ``call``; a missing file comes out as ``EntryNotFound`` naming ``filename``."""
    try:
        return call()
    except EntryNotFound as exc:
        if exc.file is not None:
            raise
        raise EntryNotFound(exc.repo_id, exc.detail, file=filename) from None


def cached_snapshot(repo_id: str, revision: str | None, cache_dir: Path) -> Path | None:
    """The snapshot folder of ``repo_id@revision`` in the HF cache, if its config.json is cached."""
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(repo_id, "config.json", cache_dir=str(cache_dir),
                                   revision=revision or "main")
    if isinstance(found, str):
        return Path(found).parent
    return None


def read_all(read: Callable[[RepoFile], SafetensorsHeader], files: Iterable[RepoFile],
             progress: Progress | None, *, max_workers: int = MAX_WORKERS) -> dict[str, SafetensorsHeader]:
    files = list(files)
    total = len(files)
    out: dict[str, SafetensorsHeader] = {}
    if progress is not None:
        progress(0, total)
    if total == 0:
        return out
    with ThreadPoolExecutor(max_workers=max(1, min(max_workers, total)),
                            thread_name_prefix="club3090-header") as pool:
        pending = {pool.submit(read, f): f for f in files}
        while pending:
            done, _ = wait(pending, return_when=FIRST_EXCEPTION)
            for future in done:
                file = pending.pop(future)
                exc = future.exception()
                if exc is not None:
                    for other in pending:
                        other.cancel()
                    raise exc
                out[file.name] = future.result()
                if progress is not None:
                    progress(len(out), total)
    return out
