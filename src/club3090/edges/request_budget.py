"""Bounded time for every Hub request, enforced under huggingface_hub's own session.

httpx's ``timeout`` bounds each socket operation, so a server that trickles one byte a second
(status line, headers or body) never trips it. Here every socket operation of the shared client
(``huggingface_hub.utils.get_session()``) is clamped to the *budget* of the request running in
the calling thread:

- ``deadline``: connect + first byte + the whole body must end by then (metadata requests);
- ``stall_s`` / ``stall_bytes``: fewer than ``stall_bytes`` in any ``stall_s`` window is a stall
  (streamed downloads, whose total time is unbounded by design).

A budget that ran out stays spent: every later connect, read or write under it fails at once,
so a caller that retries on its own (the client's resuming download loop) cannot restart the
clock. The failure is the transport's own timeout exception (``ReadTimeout`` /
``ConnectTimeout`` of httpcore or httpcore2), which ``hub.translate`` maps to ``HubUnreachable``.

``install_policy()`` puts this in place once per process through
``huggingface_hub.set_client_factory``: the client keeps its own configuration (event hooks,
proxies, redirect handling); only the pools' network backend is wrapped and ``max_redirects``
lowered. Requests made outside a ``bounded(...)`` block are untouched.
"""

from __future__ import annotations

import importlib
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

MAX_REDIRECTS = 10


@dataclass
class Budget:
    """Time allowed to one request (or one download with its internal retries)."""

    deadline: float | None = None            # time.monotonic() value
    stall_s: float | None = None
    stall_bytes: int = 1
    clock: Callable[[], float] = time.monotonic
    spent: str | None = field(default=None, init=False)   # why it ran out, once it has
    _mark: float = field(default=0.0, init=False)
    _since_mark: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        self._mark = self.clock()

    @classmethod
    def for_request(cls, seconds: float, *, not_after: float | None = None,
                    clock: Callable[[], float] = time.monotonic) -> "Budget":
        deadline = clock() + seconds
        if not_after is not None:
            deadline = min(deadline, not_after)
        return cls(deadline=deadline, clock=clock)

    @classmethod
    def for_stream(cls, stall_s: float, stall_bytes: int, *,
                   clock: Callable[[], float] = time.monotonic) -> "Budget":
        return cls(stall_s=stall_s, stall_bytes=max(1, stall_bytes), clock=clock)

    def allowance(self, timeout: float | None) -> float | None:
        """The wait allowed for the next socket operation; raises ``_Spent`` when none is left."""
        if self.spent is not None:
            raise _Spent(self.spent)
        now = self.clock()
        limits = [] if timeout is None else [timeout]
        if self.deadline is not None:
            left = self.deadline - now
            if left <= 0:
                self.spent = "the request deadline passed"
                raise _Spent(self.spent)
            limits.append(left)
        if self.stall_s is not None:
            left = self._mark + self.stall_s - now
            if left <= 0:
                self.spent = (f"stalled: fewer than {self.stall_bytes} bytes in {self.stall_s:g} s")
                raise _Spent(self.spent)
            limits.append(left)
        return min(limits) if limits else None

    def progress(self, nbytes: int) -> None:
        self._since_mark += nbytes
        if self._since_mark >= self.stall_bytes:
            self._mark = self.clock()
            self._since_mark = 0

    def expire_if_timed_out(self) -> None:
        """Called when the wrapped operation itself timed out at the allowance we gave it."""
        with suppress(_Spent):
            self.allowance(None)


class _Spent(Exception):
    """Internal: converted to the transport's own timeout exception before it leaves the stream."""


_local = threading.local()


def current() -> Budget | None:
    budget = getattr(_local, "budget", None)
    return budget if isinstance(budget, Budget) else None


@contextmanager
def bounded(budget: Budget) -> Iterator[Budget]:
    """Run the requests made by this thread inside the block under ``budget``."""
    previous = getattr(_local, "budget", None)
    _local.budget = budget
    try:
        yield budget
    finally:
        _local.budget = previous


def _timeout_error(inner: Any, kind: str) -> type[Exception]:
    """The ``ReadTimeout``-like class of the httpcore flavour ``inner`` comes from."""
    root = type(inner).__module__.split(".")[0]
    module = importlib.import_module(root)
    found = getattr(module, kind, None)
    return found if isinstance(found, type) and issubclass(found, Exception) else TimeoutError


class _BoundedStream:
    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def _wait(self, timeout: float | None, kind: str) -> tuple[Budget | None, float | None]:
        budget = current()
        if budget is None:
            return None, timeout
        try:
            return budget, budget.allowance(timeout)
        except _Spent as exc:
            raise _timeout_error(self._inner, kind)(str(exc)) from None

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        budget, wait = self._wait(timeout, "ReadTimeout")
        try:
            data: bytes = self._inner.read(max_bytes, wait)
        except Exception:
            if budget is not None:
                budget.expire_if_timed_out()
            raise
        if budget is not None:
            budget.progress(len(data))
        return data

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        budget, wait = self._wait(timeout, "WriteTimeout")
        try:
            self._inner.write(buffer, wait)
        except Exception:
            if budget is not None:
                budget.expire_if_timed_out()
            raise

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                  timeout: float | None = None) -> "_BoundedStream":
        _, wait = self._wait(timeout, "ConnectTimeout")
        return _BoundedStream(self._inner.start_tls(ssl_context, server_hostname, wait))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _BoundedBackend:
    """A network backend whose streams obey the calling thread's budget."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def _wait(self, timeout: float | None) -> float | None:
        budget = current()
        if budget is None:
            return timeout
        try:
            return budget.allowance(timeout)
        except _Spent as exc:
            raise _timeout_error(self._inner, "ConnectTimeout")(str(exc)) from None

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Any = None) -> _BoundedStream:
        return _BoundedStream(self._inner.connect_tcp(host, port, self._wait(timeout), local_address,
                                                      socket_options))

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Any = None) -> _BoundedStream:
        return _BoundedStream(self._inner.connect_unix_socket(path, self._wait(timeout), socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def _wrap_pool(transport: Any) -> bool:
    pool = getattr(transport, "_pool", None)
    backend = getattr(pool, "_network_backend", None)
    if pool is None or backend is None:
        return False
    if not isinstance(backend, _BoundedBackend):
        pool._network_backend = _BoundedBackend(backend)
    return True


def bound_client(client: Any) -> Any:
    """Wrap every pool of an httpx / httpx2 client in place; lower its redirect limit."""
    transports = [getattr(client, "_transport", None), *getattr(client, "_mounts", {}).values()]
    wrapped = [_wrap_pool(t) for t in transports if t is not None]
    if not wrapped or not wrapped[0]:
        raise RuntimeError("the HTTP client has no pool to bound; huggingface_hub's client changed")
    client.max_redirects = MAX_REDIRECTS
    return client


def _client_factory() -> Any:
    from huggingface_hub.utils import _http

    return bound_client(_http.default_client_factory())


_install_lock = threading.Lock()
_installed = False


def install_policy() -> None:
    """Make huggingface_hub's shared session the bounded one (once per process)."""
    global _installed
    with _install_lock:
        if _installed:
            return
        from huggingface_hub import set_client_factory

        set_client_factory(_client_factory)
        _installed = True


def is_installed() -> bool:
    from huggingface_hub import get_session

    session = get_session()
    pool = getattr(getattr(session, "_transport", None), "_pool", None)
    return isinstance(getattr(pool, "_network_backend", None), _BoundedBackend)
