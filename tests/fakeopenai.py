"""A loopback fake OpenAI-compatible server (vLLM-shaped) for hermetic tests (a fixture, not product code).

    def test_something(fake_openai):
        fake_openai.mode["wrong_answer"] = True
        url = fake_openai.url                      # http://127.0.0.1:<port>/v1

Switches in ``mode`` (all off by default): ``ready`` (default True; False -> 503 on /v1/models),
``model`` (served id, default ``fake-model``), ``wrong_answer`` (Lyon), ``no_tool_call``,
``bad_tool_args``, ``broken_stream`` (no ``[DONE]``), ``garbage_stream`` (a non-JSON event),
``empty`` (200 with no text), ``no_usage``, ``no_reasoning``, ``degenerate`` (repeated text),
``tool_call_text`` (``<tool_call>`` in plain text), ``slowdown`` (k: every request after the
first ``slowdown_after`` (10) sends k SSE keep-alive comment lines per token, which a ticking
test clock turns into a slowdown),
``status`` (every POST answers it, e.g. 500), ``require_key`` (401 echoing the presented key
unless ``Authorization: Bearer <key>`` matches), ``stop_early`` (long answers end after 15
tokens with ``stop``), ``never_stop`` (the short answer repeats until ``max_tokens``, ``length``),
``max_model_len`` (listed in ``/v1/models``), ``metrics`` (the text of ``/metrics``),
``no_vision`` (400 for a message with content parts), ``sees_images`` (an image is called ``Red.``),
``no_structured`` (a ``response_format`` JSON-schema request is answered in prose; without it, with
``{"city": "Paris"}``).

Hostile switches (issue: a server that fights the client): ``trickle`` (seconds: POST answers
dribble one byte every 0.05 s for that long; ``trickle_done`` tells whether the server got to
the end, i.e. the client did not hang up first), ``redirect`` (a base URL: every request not yet
redirected answers 307 to ``<redirect>/redirected<path>``), ``redirect_loop`` (302 to itself),
``nested`` (a stream event nested 100,000 levels deep), ``non_json`` (200 HTML for everything),
``stall`` (seconds: one stream chunk, then silence).
``log`` holds (method, path, json body) and ``headers`` the lowercased request headers (plus
``host``).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

DEFAULT_MODEL = "fake-model"
LONG_SENTENCE = ("Segment {i} notes that window {w} grew after ack {a}, while the sender kept "
                 "{r} bytes in flight. ")
HTML = b"<html><body>Welcome to nginx!</body></html>"


class OpenAIHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *_a: Any) -> None:
        return

    @property
    def mode(self) -> dict[str, Any]:
        return self.server.mode  # type: ignore[attr-defined]

    def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _authorized(self) -> bool:
        key = self.mode.get("require_key")
        got = self.headers.get("authorization", "")
        if key is None or got == f"Bearer {key}":
            return True
        self._send(401, json.dumps({"error": f"invalid api key: {got}"}).encode())
        return False

    def _hostile(self) -> bool:
        """Redirects and non-JSON answers; True when the request was answered here."""
        mode = self.mode
        if mode.get("redirect_loop"):
            self.send_response(302)
            self.send_header("Location", self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return True
        if mode.get("redirect") and not self.path.startswith("/redirected"):
            self.send_response(307)
            self.send_header("Location", f"{mode['redirect']}/redirected{self.path}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return True
        self.path = self.path.removeprefix("/redirected")
        if mode.get("non_json"):
            self._send(200, HTML, "text/html")
            return True
        return False

    def _record(self, method: str, body: Any) -> None:
        self.server.log.append((method, self.path, body))  # type: ignore[attr-defined]
        self.server.headers.append({k.lower(): v for k, v in self.headers.items()})  # type: ignore[attr-defined]

    def do_GET(self) -> None:
        self._record("GET", None)
        if not self._authorized() or self._hostile():
            return
        if self.path == "/metrics" and self.mode.get("metrics") is not None:
            self._send(200, str(self.mode["metrics"]).encode(), "text/plain")
        elif self.path == "/v1/models" and self.mode.get("ready", True):
            entry: dict[str, Any] = {"id": self.mode.get("model", DEFAULT_MODEL)}
            if self.mode.get("max_model_len"):
                entry["max_model_len"] = self.mode["max_model_len"]
            self._send(200, json.dumps({"object": "list", "data": [entry]}).encode())
        else:
            self._send(503 if self.path == "/v1/models" else 404, b'{"error": "loading"}')

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"null")
        server = self.server
        self._record("POST", body)
        with server.lock:  # type: ignore[attr-defined]
            server.posts += 1  # type: ignore[attr-defined]
            n = server.posts  # type: ignore[attr-defined]
        if not self._authorized() or self._hostile():
            return
        if self.path != "/v1/chat/completions":
            return self._send(404, b"{}")
        if self.mode.get("status"):
            return self._send(int(self.mode["status"]), b'{"error": "internal server error"}')
        if self.mode.get("trickle"):
            return self._trickle(float(self.mode["trickle"]))
        if self.mode.get("stall"):
            return self._stall(float(self.mode["stall"]))
        if self.mode.get("no_vision") and any(isinstance(m.get("content"), list) for m in body["messages"]):
            return self._send(400, b'{"error": "this model does not take images"}')
        reasoning, words, tool = self._answer(body)
        prompt_tokens = sum(len(str(m.get("content") or "")) for m in body.get("messages", [])) // 4
        if body.get("stream"):
            return self._stream(body, n, reasoning, words, tool, prompt_tokens)
        message: dict[str, Any] = {"role": "assistant", "content": "".join(words) if words or not tool else None}
        if reasoning:
            message["reasoning_content"] = "".join(reasoning)
        if tool:
            message["tool_calls"] = [{"id": "call_1", "type": "function",
                                      "function": {"name": tool[0], "arguments": tool[1]}}]
        reply: dict[str, Any] = {"id": f"chatcmpl-{n}", "object": "chat.completion",
                                 "choices": [{"index": 0, "message": message,
                                              "finish_reason": self._finish(body, words, tool)}]}
        if not self.mode.get("no_usage"):
            reply["usage"] = {"prompt_tokens": prompt_tokens, "completion_tokens": len(words) + len(reasoning)}
        self._send(200, json.dumps(reply).encode())

    def _answer(self, body: dict[str, Any]) -> tuple[list[str], list[str], tuple[str, str] | None]:
        """(reasoning tokens, content tokens, (tool name, arguments) or None)."""
        mode = self.mode
        if mode.get("empty"):
            return [], [], None
        text = " ".join(str(m.get("content") or "") for m in body.get("messages", []) if m.get("role") == "user")
        last = str(body.get("messages", [{}])[-1].get("content") or "")
        thinking = (body.get("chat_template_kwargs") or {}).get("enable_thinking")
        reasoning = ["Let ", "me ", "think ", "it ", "through."] if thinking and not mode.get("no_reasoning") else []
        if mode.get("sees_images") and any(isinstance(m.get("content"), list) for m in body.get("messages", [])):
            return reasoning, ["Red."], None
        if (body.get("response_format") or {}).get("type") == "json_schema" and not mode.get("no_structured"):
            return [], ['{"city": ', '"Paris"}'], None
        if body.get("tools") and body.get("tool_choice") != "none" and not mode.get("no_tool_call"):
            args = '{"city": "Par' if mode.get("bad_tool_args") else '{"city": "Paris"}'
            return reasoning, [], ("get_weather", args)
        max_tokens = int(body.get("max_tokens") or 16)
        upstream = self._upstream_probe(last)
        if upstream is not None:
            return [], upstream, None
        if "capital of France" in text:
            if mode.get("never_stop"):
                return reasoning, ["Paris "] * max_tokens, None
            return reasoning, ["Lyon." if mode.get("wrong_answer") else "Paris."], None
        if max_tokens >= 1000:
            if mode.get("degenerate"):
                sentence = "The window grows and the window grows and it grows. "
                words = [w + " " for w in (sentence * 40).split()]
            elif mode.get("tool_call_text"):
                words = ["<tool_call>", '{"name": "x"}', "</tool_call>", " "] * 6
            else:
                long = "".join(LONG_SENTENCE.format(i=i, w=i * 3 + 1, a=i * 7 + 2, r=i * 11 + 5) for i in range(100))
                words = [w + " " for w in long.split()]
            return reasoning, words[:15 if mode.get("stop_early") else max_tokens], None
        if "Reply with the single word OK" in last:
            return [], ["OK"], None
        words = [f"word{i} " for i in range(min(max_tokens, 24))]
        return reasoning, words, None

    def _upstream_probe(self, last: str) -> list[str] | None:
        """verify-stress's needle, coding and reasoning prompts (``validate.ladder``); None otherwise.
        ``needle_limit`` (prompt tokens, 4 characters each) is the longest haystack still read."""
        mode = self.mode
        if "secret passphrase" in last:
            found = re.search(r"The secret passphrase is (\S+)\. ", last)
            limit = mode.get("needle_limit")
            if found is None or (limit is not None and len(last) // 4 > int(limit)):
                return ["I ", "do ", "not ", "know."]
            return [found.group(1)]
        if "function named add" in last:
            return ["def add(a, b) return a"] if mode.get("bad_code") else ["```python\n", "def add(a, b):\n",
                                                                            "    return a + b\n", "```"]
        if "How many marbles" in last:
            return ["The ", "box ", "holds ", "41." if mode.get("wrong_sum") else "42."]
        return None

    def _stream(self, body: dict[str, Any], n: int, reasoning: list[str], words: list[str],
                tool: tuple[str, str] | None, prompt_tokens: int) -> None:
        mode = self.mode
        cid = f"chatcmpl-{n}"
        slow = int(mode.get("slowdown") or 0) if n > int(mode.get("slowdown_after", 10)) else 0
        pad = "".join(": keep-alive\n\n" for _ in range(slow))

        def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
            data = {"id": cid, "object": "chat.completion.chunk", "model": body.get("model"),
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
            return f"data: {json.dumps(data)}\n\n"

        out = [chunk({"role": "assistant", "content": ""})]
        out += [pad + chunk({"reasoning_content": t}) for t in reasoning]
        out += [pad + chunk({"content": t}) for t in words]
        if mode.get("garbage_stream"):
            out.append("data: {not json\n\n")
        if mode.get("nested"):
            out.append("data: " + "[" * 100_000 + "]" * 100_000 + "\n\n")
        if tool:
            half = len(tool[1]) // 2
            out.append(chunk({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                              "function": {"name": tool[0], "arguments": ""}}]}))
            out.append(chunk({"tool_calls": [{"index": 0, "function": {"arguments": tool[1][:half]}}]}))
            out.append(chunk({"tool_calls": [{"index": 0, "function": {"arguments": tool[1][half:]}}]}))
        out.append(chunk({}, self._finish(body, words, tool)))
        if (body.get("stream_options") or {}).get("include_usage") and not mode.get("no_usage"):
            usage = {"prompt_tokens": prompt_tokens, "completion_tokens": len(words) + len(reasoning) + (5 if tool else 0)}
            out.append(f"data: {json.dumps({'id': cid, 'object': 'chat.completion.chunk', 'choices': [], 'usage': usage})}\n\n")
        if not mode.get("broken_stream"):
            out.append("data: [DONE]\n\n")
        self._send(200, "".join(out).encode(), "text/event-stream")


    def _finish(self, body: dict[str, Any], words: list[str], tool: tuple[str, str] | None) -> str:
        if tool:
            return "tool_calls"
        return "length" if self.mode.get("never_stop") and len(words) >= int(body.get("max_tokens") or 16) else "stop"

    def _trickle(self, seconds: float) -> None:
        """Headers at once, then one byte of a keep-alive comment every 0.05 s for ``seconds``."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        end = time.monotonic() + seconds
        try:
            while time.monotonic() < end:
                self.wfile.write(b":")
                self.wfile.flush()
                time.sleep(0.05)
            self.server.trickle_done = True  # type: ignore[attr-defined]
        except OSError:
            self.server.trickle_done = False  # type: ignore[attr-defined]
        self.close_connection = True


    def _stall(self, seconds: float) -> None:
        """One chunk of a stream, then silence for ``seconds`` (the connection stays open)."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        try:
            self.wfile.write(b'data: {"id": "s", "choices": [{"index": 0, "delta": {"content": "Hel"}}]}\n\n')
            self.wfile.flush()
            time.sleep(seconds)
        except OSError:
            pass
        self.close_connection = True


class FakeOpenAI:
    def __init__(self, server: ThreadingHTTPServer) -> None:
        self.server = server
        host, port = server.server_address[:2]
        self.url = f"http://{host}:{port}/v1"

    @property
    def mode(self) -> dict[str, Any]:
        return self.server.mode  # type: ignore[attr-defined]

    @property
    def log(self) -> list[tuple[str, str, Any]]:
        return self.server.log  # type: ignore[attr-defined]

    @property
    def headers(self) -> list[dict[str, str]]:
        return self.server.headers  # type: ignore[attr-defined]

    @property
    def trickle_done(self) -> bool | None:
        return self.server.trickle_done  # type: ignore[attr-defined]

    def posts(self) -> list[dict[str, Any]]:
        return [b for m, _p, b in self.log if m == "POST"]


def start() -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", 0), OpenAIHandler)
    server.daemon_threads = True
    server.mode = {}  # type: ignore[attr-defined]
    server.log = []  # type: ignore[attr-defined]
    server.headers = []  # type: ignore[attr-defined]
    server.posts = 0  # type: ignore[attr-defined]
    server.trickle_done = None  # type: ignore[attr-defined]
    server.lock = threading.Lock()  # type: ignore[attr-defined]
    return server


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    server = start()
    worker = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    worker.start()
    try:
        yield FakeOpenAI(server)
    finally:
        server.shutdown()
        server.server_close()
        worker.join(timeout=5)


class TickClock:
    """A fake monotonic clock: every read advances it by ``step``; ``sleep`` advances it too."""

    def __init__(self, step: float = 0.01) -> None:
        self.t = 0.0
        self.step = step
        self.slept: list[float] = []

    def __call__(self) -> float:
        self.t += self.step
        return self.t

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.t += seconds


def closed_port_url() -> str:
    """A loopback URL where nothing listens (the port was just released)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"
