"""A hostile loopback Hub (test fixture): the fake Hub of ``tests/fakehub.py`` plus misbehaviours.

``hostile_hub.misbehave(kind, match="", method=None, whole_only=False)`` makes every request
whose path contains ``match`` (and, with ``whole_only``, that carries no ``Range`` header: a
download, not a header read) answer with:

- ``trickle``: the normal answer, sent one byte every ``TRICKLE_S`` seconds from the status line
  on (slow-loris: every socket read succeeds, the request never ends);
- ``trickle-body``: status line and headers at once, then the body one byte at a time;
- ``redirect-loop``: ``302`` to the same URL, forever;
- ``html``: ``200 text/html`` with a login page instead of JSON;
- ``huge-headers``: ``200`` with about 1 MiB of header lines.

Everything else is the fake Hub's normal behaviour.
"""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from dataclasses import dataclass

from tests.fakehub import FakeHub, _Handler, _Server

TRICKLE_S = 1.0
KINDS = ("trickle", "trickle-body", "redirect-loop", "html", "huge-headers")


@dataclass
class Misbehaviour:
    kind: str
    match: str = ""
    method: str | None = None
    whole_only: bool = False


class _HostileHandler(_Handler):
    def _dispatch(self, body: bool) -> None:
        hub: HostileHub = self.server.hub  # type: ignore[assignment]
        bad = hub.pick(self.command, self.path, has_range="range" in {k.lower() for k in self.headers})
        if bad is None:
            return super()._dispatch(body)
        self._entry = {"method": self.command, "path": self.path, "query": "", "headers": {}, "status": 0,
                       "sent": 0}
        hub._record(self._entry)
        try:
            if bad.kind in ("trickle", "trickle-body"):
                self._trickle(body, headers_too=bad.kind == "trickle")
            elif bad.kind == "redirect-loop":
                self._reply(302, {"Location": self.path}, b"", body)
            elif bad.kind == "html":
                page = b"<html><body>Please log in to the proxy</body></html>"
                self._reply(200, {"Content-Type": "text/html"}, page, body)
            elif bad.kind == "huge-headers":
                filler = {f"X-Filler-{i}": "x" * 1000 for i in range(1000)}
                self._reply(200, {"Content-Type": "application/json", **filler}, b"{}", body)
        except OSError:
            self.close_connection = True

    def _trickle(self, body: bool, *, headers_too: bool) -> None:
        """Produce the normal answer into a buffer, then send it one byte at a time."""
        real = self.wfile
        buffer = io.BytesIO()
        self.wfile = buffer  # type: ignore[assignment]
        try:
            _Handler._dispatch(self, body)
            self.wfile.flush()
        finally:
            self.wfile = real
        data = buffer.getvalue()
        head_end = data.find(b"\r\n\r\n") + 4
        start = 0 if headers_too else head_end
        if start:
            real.write(data[:start])
            real.flush()
        for i in range(start, len(data)):
            real.write(data[i:i + 1])
            real.flush()
            time.sleep(TRICKLE_S)
        self.close_connection = True


class HostileHub(FakeHub):
    def __init__(self) -> None:
        super().__init__()
        self.misbehaviours: list[Misbehaviour] = []

    def start(self) -> "HostileHub":
        import threading

        server = _Server(("127.0.0.1", 0), _HostileHandler)
        server.hub = self
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="hostile-hub", daemon=True)
        self._thread.start()
        port = server.server_address[1]
        self.url = f"http://127.0.0.1:{port}"
        self.cdn_url = f"http://localhost:{port}"
        return self

    def misbehave(self, kind: str, match: str = "", *, method: str | None = None,
                  whole_only: bool = False) -> Misbehaviour:
        assert kind in KINDS, kind
        bad = Misbehaviour(kind, match, method, whole_only)
        self.misbehaviours.append(bad)
        return bad

    def pick(self, method: str, path: str, *, has_range: bool) -> Misbehaviour | None:
        for bad in self.misbehaviours:
            if bad.match in path and (bad.method is None or bad.method == method) \
                    and not (bad.whole_only and has_range):
                return bad
        return None


def serve() -> Iterator[HostileHub]:
    """Body of a fixture: a started hostile Hub, stopped afterwards (``yield from serve()``)."""
    from huggingface_hub.utils import close_session

    hub = HostileHub().start()
    try:
        yield hub
    finally:
        hub.stop()
        close_session()
