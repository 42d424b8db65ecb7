"""The stdlib HTTP transport our OpenAI-compatible client speaks through, under one request policy.

``http_request(method, url, json_body | None, timeout, *, headers=None, on_line=None,
stall_s=None) -> HttpResponse``; a transport failure (refused, reset, deadline, stall, redirect
loop) is ``status=0`` with ``error`` set, never an exception. ``on_line`` receives each raw line
of the body as it arrives (SSE); whatever it raises propagates. ``http.client``, so proxies are
never used.

- ``timeout`` is a deadline for the whole request: connect, first byte and the whole body. A
  watchdog shuts the socket when it passes, so a server that trickles one byte a second cannot
  stretch a read.
- ``stall_s``: once the body has started, the longest silence allowed between two reads (before
  it, only the deadline: a long prefill may precede the first byte).
- Redirects: at most ``MAX_REDIRECTS``; a redirect to another origin (scheme, host, port) drops
  ``Authorization``, so an API key never reaches another host; 303 (and 301/302 after a POST)
  continue as GET without a body.
- Bodies are capped (``MAX_BODY_BYTES``, lines ``MAX_LINE_BYTES``) and JSON is parsed under the
  nesting budget of ``club3090.model.budgets`` (``loads``).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urljoin, urlsplit, urlunsplit

from club3090.model.budgets import MAX_JSON_DEPTH, json_depth

MAX_BODY_BYTES = 8 * 1024 * 1024
MAX_ERROR_BYTES = 64 * 1024
MAX_LINE_BYTES = 1024 * 1024
MAX_REDIRECTS = 5
READ_CHUNK = 64 * 1024
_REDIRECTS = frozenset({301, 302, 303, 307, 308})


@dataclass(frozen=True, slots=True)
class HttpResponse:
    status: int
    body: bytes = b""
    error: str | None = None      # transport failure (refused, deadline, stall, reset, redirects)


LineSink = Callable[[bytes], None]


class Http(Protocol):
    def __call__(self, method: str, url: str, body: Any, timeout: float, *,
                 headers: Mapping[str, str] | None = None, on_line: LineSink | None = None,
                 stall_s: float | None = None) -> HttpResponse: ...


def loads(data: bytes | str, *, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``json.loads`` under a nesting budget: deeper than ``max_depth`` (or than the parser's own
    recursion allows) is a ``ValueError``, never a ``RecursionError``."""
    text = data.decode("utf-8") if isinstance(data, bytes) else data
    try:
        doc = json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    if json_depth(doc) > max_depth:
        raise ValueError(f"JSON nested deeper than {max_depth} levels")
    return doc


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    return (parts.scheme, (parts.hostname or "").lower(), port)


class _Watchdog:
    """Shuts a connection's socket when the request's deadline passes (unblocks any read)."""

    def __init__(self, seconds: float) -> None:
        self.fired = False
        self.sock: Any = None          # set once connected; kept: http.client drops conn.sock early
        self._timer = threading.Timer(max(0.0, seconds), self._fire)
        self._timer.daemon = True
        self._timer.start()

    def _fire(self) -> None:
        import socket

        self.fired = True
        if self.sock is not None:
            with contextlib.suppress(OSError):
                self.sock.shutdown(socket.SHUT_RDWR)

    def cancel(self) -> None:
        self._timer.cancel()


def http_request(method: str, url: str, body: Any, timeout: float, *, headers: Mapping[str, str] | None = None,
                 on_line: LineSink | None = None, stall_s: float | None = None) -> HttpResponse:
    """The real transport, under the policy in the module docstring."""
    t0 = time.monotonic()
    data = json.dumps(body).encode("utf-8") if body is not None else None
    sent = {"content-type": "application/json"} if data else {}
    sent.update({k.lower(): v for k, v in (headers or {}).items()})
    origin = _origin(url)
    for _hop in range(MAX_REDIRECTS + 1):
        left = timeout - (time.monotonic() - t0)
        if left <= 0:
            return HttpResponse(0, b"", f"deadline: no complete answer within {timeout:g}s")
        result = _one_request(method, url, data, sent, left, timeout, on_line, stall_s)
        if isinstance(result, HttpResponse):
            return result
        status, location = result
        url = urljoin(url, location)
        if urlsplit(url).scheme not in ("http", "https"):
            return HttpResponse(0, b"", f"redirect to an unsupported scheme: {urlsplit(url).scheme or '?'}")
        if _origin(url) != origin:
            sent.pop("authorization", None)         # the key never leaves its origin
        if status == 303 or (status in (301, 302) and method == "POST"):
            method, data = "GET", None
            sent.pop("content-type", None)
    return HttpResponse(0, b"", f"too many redirects (more than {MAX_REDIRECTS})")


def _one_request(method: str, url: str, data: bytes | None, headers: dict[str, str], left: float, timeout: float,
                 on_line: LineSink | None, stall_s: float | None) -> HttpResponse | tuple[int, str]:
    import http.client

    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return HttpResponse(0, b"", f"not an http(s) URL: {parts.scheme or '?'}://")
    target = urlunsplit(("", "", parts.path or "/", parts.query, ""))
    try:
        port = parts.port
    except ValueError:
        return HttpResponse(0, b"", "ValueError: invalid port in URL")
    conn_cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = conn_cls(parts.hostname, port, timeout=left)
    dog = _Watchdog(left)
    body_started = False
    deadline = HttpResponse(0, b"", f"deadline: no complete answer within {timeout:g}s")
    try:
        conn.connect()
        dog.sock = conn.sock
        if dog.fired:
            return deadline
        conn.request(method, target, body=data, headers=headers)
        resp = conn.getresponse()
        if resp.status in _REDIRECTS and resp.getheader("location"):
            return (resp.status, resp.getheader("location") or "")

        def started() -> None:     # the stall limit starts with the body: a long prefill may precede it
            nonlocal body_started
            body_started = True
            if stall_s is not None and dog.sock is not None:
                dog.sock.settimeout(max(0.001, min(stall_s, timeout)))
        if resp.status >= 400:
            got = HttpResponse(resp.status, _read_all(resp, MAX_ERROR_BYTES, started))
        elif on_line is None:
            got = HttpResponse(resp.status, _read_all(resp, MAX_BODY_BYTES, started))
        else:
            got = HttpResponse(resp.status, _read_lines(resp, on_line, started))
        return deadline if dog.fired else got
    except (OSError, http.client.HTTPException, ValueError) as exc:
        if dog.fired:
            return deadline
        if isinstance(exc, TimeoutError) and stall_s is not None and body_started:
            return HttpResponse(0, b"", f"stalled: no data for {stall_s:g}s")
        reason = getattr(exc, "reason", None) or exc
        return HttpResponse(0, b"", f"{type(exc).__name__}: {reason}")
    finally:
        dog.cancel()
        conn.close()


def _read_all(resp: Any, cap: int, started: Callable[[], None]) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while size < cap:
        chunk = resp.read1(min(READ_CHUNK, cap - size))
        if not chunk:
            break
        if not chunks:
            started()
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _read_lines(resp: Any, on_line: LineSink, started: Callable[[], None]) -> bytes:
    """Read in chunks (each bounded by the socket timeout), hand out complete lines as they arrive."""
    kept: list[bytes] = []
    size = 0
    pending = b""
    while size < MAX_BODY_BYTES:
        chunk = resp.read1(READ_CHUNK)
        if not chunk:
            break
        if not size:
            started()
        size += len(chunk)
        pending += chunk
        while True:
            cut = pending.find(b"\n")
            if cut < 0:
                break
            line, pending = pending[:cut + 1], pending[cut + 1:]
            kept.append(line)
            on_line(line)
        if len(pending) > MAX_LINE_BYTES:
            kept.append(pending)
            on_line(pending)        # an over-long line is handed out cut; the parser sees garbage
            pending = b""
    if pending:
        kept.append(pending)
        on_line(pending)
    return b"".join(kept)


__all__ = ["MAX_BODY_BYTES", "MAX_LINE_BYTES", "MAX_REDIRECTS", "Http", "HttpResponse", "LineSink", "http_request",
           "loads"]
