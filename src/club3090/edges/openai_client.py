"""A stdlib client for an OpenAI-compatible server (vLLM): the one owner of that wire.

Users: ``boot`` ([E] ``/v1/models`` poll and smoke) and the validation tools
(``club3090.validate``: verify, verify-stress, bench, soak). The transport is one injectable
function, ``Http`` (``club3090.edges.http_transport``: a deadline per request, a stall detector,
bounded redirects that drop ``Authorization`` across origins, capped bodies, a JSON nesting
budget); it is re-exported here, with ``urllib_http`` as the name older callers import.

The API key travels only in the ``Authorization`` header and is scrubbed from every error string
this module returns.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from club3090.edges.http_transport import Http, HttpResponse, http_request, loads

REDACTED = "<REDACTED>"
urllib_http = http_request     # the name boot and older callers import


# --------------------------------------------------------------------------------------------
# SSE (chat.completion.chunk streams)
# --------------------------------------------------------------------------------------------

@dataclass(slots=True)
class ToolCall:
    name: str
    arguments: str            # raw JSON text as the server sent it (may be malformed)
    id: str | None = None

    def parsed_arguments(self) -> Any:
        """The arguments as JSON, or None when they do not parse."""
        try:
            return loads(self.arguments) if self.arguments.strip() else {}
        except ValueError:
            return None


@dataclass(slots=True)
class SseParser:
    """Feeds raw SSE lines; accumulates what a chat stream carried.

    ``chunks`` counts data events whose ``choices`` is present and not null; ``token_chunks``
    those carrying content, reasoning or tool-call text (a token count of last resort: with
    speculative decoding one chunk can hold several tokens). ``malformed`` is the first payload
    that is not a chat chunk (``{"error": ...}`` events included); ``after_done`` marks data after
    ``[DONE]``.
    """
    chunks: int = 0
    token_chunks: int = 0
    done: bool = False
    malformed: str | None = None
    after_done: bool = False
    content: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    tools: dict[int, ToolCall] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: Mapping[str, Any] | None = None
    ids: set[str] = field(default_factory=set)

    def feed(self, raw: bytes | str) -> bool:
        """Consume one line; True when it carried generated text (the first one is TTFT)."""
        line = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        line = line.strip()
        if not line.startswith("data:"):
            return False            # blank separators, ": keep-alive" comments, event: lines
        payload = line[5:].strip()
        if payload == "[DONE]":
            self.done = True
            return False
        if self.done:
            self.after_done = True
        try:
            data = loads(payload)
            choices = data["choices"]
        except (ValueError, KeyError, TypeError):
            if self.malformed is None:
                self.malformed = payload[:200]
            return False
        if isinstance(data.get("usage"), Mapping):
            self.usage = data["usage"]
        if isinstance(data.get("id"), str):
            self.ids.add(data["id"])
        if choices is None:
            return False
        self.chunks += 1
        produced = False
        for choice in choices if isinstance(choices, list) else ():
            if not isinstance(choice, Mapping):
                continue
            if choice.get("finish_reason"):
                self.finish_reason = str(choice["finish_reason"])
            delta = choice.get("delta")
            if not isinstance(delta, Mapping):
                continue
            for key, sink in (("content", self.content), ("reasoning_content", self.reasoning),
                              ("reasoning", self.reasoning)):
                text = delta.get(key)
                if isinstance(text, str) and text:
                    sink.append(text)
                    produced = True
            for call in _calls(delta.get("tool_calls")):
                if isinstance(call, Mapping) and self._tool_delta(call):
                    produced = True
        if produced:
            self.token_chunks += 1
        return produced

    def _tool_delta(self, call: Mapping[str, Any]) -> bool:
        index = call.get("index", len(self.tools))
        index = index if isinstance(index, int) else len(self.tools)
        slot = self.tools.setdefault(index, ToolCall("", ""))
        if isinstance(call.get("id"), str):
            slot.id = call["id"]
        fn = call.get("function")
        if not isinstance(fn, Mapping):
            return False
        if isinstance(fn.get("name"), str):
            slot.name += fn["name"]
        if isinstance(fn.get("arguments"), str):
            slot.arguments += fn["arguments"]
        return bool(fn.get("name") or fn.get("arguments"))


def parse_sse_body(body: bytes) -> SseParser:
    parser = SseParser()
    for line in body.decode("utf-8", "replace").splitlines():
        parser.feed(line)
    return parser


# --------------------------------------------------------------------------------------------
# the client
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ChatResult:
    """One chat completion, plain or streamed. ``error`` None = a well-formed answer (possibly empty)."""
    status: int                               # 0 = transport failure
    error: str | None = None
    content: str = ""
    reasoning: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str | None = None
    completion_tokens: int | None = None
    prompt_tokens: int | None = None
    tokens_source: str = "none"               # "usage" | "chunks" | "none"
    wall_s: float = 0.0
    ttft_s: float | None = None               # streaming only: first content/reasoning/tool text
    chunks: int = 0
    done: bool = False                        # streaming: ended with [DONE]
    stream_problem: str | None = None         # streaming: malformed chunk, data after [DONE], no [DONE]

    @property
    def unreachable(self) -> bool:
        return self.status == 0

    @property
    def empty(self) -> bool:
        return self.error is None and not self.content.strip() and not self.reasoning.strip() and not self.tool_calls


@dataclass(frozen=True, slots=True)
class ModelsResult:
    status: int
    ids: tuple[str, ...] = ()
    error: str | None = None
    contexts: Mapping[str, int] = field(default_factory=dict)   # id -> max_model_len, where the server says

    def context(self, model: str | None) -> int | None:
        return self.contexts.get(model) if model is not None else None

    @property
    def unreachable(self) -> bool:
        return self.status == 0


class _Deadline(Exception):
    pass


def api_base(url: str) -> str:
    """``http://host:8020``, ``http://host:8020/``, ``http://host:8020/v1`` -> ``http://host:8020/v1``."""
    parts = urlsplit(url.strip())
    path = parts.path.rstrip("/")
    if not path.endswith("/v1"):
        path += "/v1"
    return urlunsplit(parts._replace(path=path, query="", fragment=""))


class OpenAIClient:
    """``models()`` and ``chat(body, stream=...)`` against ``{base}/models`` and ``{base}/chat/completions``.

    ``timeout``: seconds per request (connect, first byte and whole body). ``stall_s``: longest
    silence inside a streamed body. ``deadline_s``: seconds for the whole run, counted from the
    client's creation: every request gets at most what is left, and none starts once it is spent
    (``expired``).
    """

    def __init__(self, url: str, *, api_key: str | None = None, timeout: float = 600.0, http: Http = http_request,
                 clock: Callable[[], float] = time.monotonic, stall_s: float | None = None,
                 deadline_s: float | None = None) -> None:
        self.base = api_base(url)
        self._key = api_key or None
        self.timeout, self.http, self.clock, self.stall_s = timeout, http, clock, stall_s
        self.deadline_s = deadline_s
        self._end = None if deadline_s is None else clock() + deadline_s

    def remaining(self) -> float | None:
        """Seconds left of the run's deadline; None without one."""
        return None if self._end is None else self._end - self.clock()

    @property
    def expired(self) -> bool:
        left = self.remaining()
        return left is not None and left <= 0

    def _limit(self, timeout: float | None) -> float | None:
        """This request's deadline: the smaller of its timeout and the run's time left; None when spent."""
        limit = self.timeout if timeout is None else timeout
        left = self.remaining()
        if left is not None:
            if left <= 0:
                return None
            limit = min(limit, left)
        return limit

    def deadline_message(self) -> str:
        return f"run deadline reached ({self.deadline_s:g}s, --deadline)"

    def __repr__(self) -> str:  # never the key
        return f"OpenAIClient({self.base!r})"

    def scrub(self, text: str | None) -> str | None:
        if text is None or not self._key:
            return text
        return text.replace(self._key, REDACTED)

    def _headers(self) -> dict[str, str] | None:
        return {"authorization": f"Bearer {self._key}"} if self._key else None

    def _status_error(self, resp: HttpResponse) -> str:
        if resp.error:
            return self.scrub(resp.error) or ""
        text = resp.body[:300].decode("utf-8", "replace").strip()
        return self.scrub(f"HTTP {resp.status}" + (f": {text}" if text else "")) or ""

    def models(self, *, timeout: float | None = None) -> ModelsResult:
        limit = self._limit(timeout)
        if limit is None:
            return ModelsResult(0, (), self.deadline_message())
        resp = self.http("GET", f"{self.base}/models", None, limit, headers=self._headers(), stall_s=self.stall_s)
        if resp.status != 200:
            return ModelsResult(resp.status, (), self._status_error(resp))
        try:
            data = loads(resp.body)
            entries = [m for m in data["data"] if isinstance(m, Mapping) and "id" in m]
        except (ValueError, KeyError, TypeError):
            return ModelsResult(resp.status, (), "not an OpenAI model list")
        contexts = {str(m["id"]): n for m in entries if (n := _int(m.get("max_model_len")))}
        return ModelsResult(resp.status, tuple(str(m["id"]) for m in entries), None, contexts)

    def metrics(self, *, timeout: float | None = None) -> tuple[str | None, str | None]:
        """(text, None) of the server's Prometheus ``/metrics`` (beside ``/v1``), or (None, error)."""
        limit = self._limit(timeout)
        if limit is None:
            return None, self.deadline_message()
        root = self.base.removesuffix("/v1")
        resp = self.http("GET", f"{root}/metrics", None, limit, headers=self._headers(), stall_s=self.stall_s)
        if resp.status != 200:
            return None, self._status_error(resp)
        return resp.body.decode("utf-8", "replace"), None

    def chat(self, body: Mapping[str, Any], *, stream: bool = False, timeout: float | None = None) -> ChatResult:
        limit = self._limit(timeout)
        if limit is None:
            return ChatResult(0, self.deadline_message())
        url = f"{self.base}/chat/completions"
        if stream:
            return self._stream(url, body, limit)
        t0 = self.clock()
        resp = self.http("POST", url, dict(body), limit, headers=self._headers(), stall_s=self.stall_s)
        wall = self.clock() - t0
        if resp.status != 200:
            return ChatResult(resp.status, self._status_error(resp), wall_s=wall)
        try:
            data = loads(resp.body)
            choice = data["choices"][0]
            message = choice["message"]
            if not isinstance(message, Mapping):
                raise TypeError("message is not an object")
        except (ValueError, KeyError, IndexError, TypeError):
            return ChatResult(resp.status, "not an OpenAI chat completion", wall_s=wall)
        calls = []
        for call in _calls(message.get("tool_calls")):
            fn = call.get("function") if isinstance(call, Mapping) else None
            if isinstance(fn, Mapping):
                args = fn.get("arguments")
                calls.append(ToolCall(str(fn.get("name") or ""),
                                      args if isinstance(args, str) else json.dumps(args), call.get("id")))
        usage = data.get("usage") if isinstance(data.get("usage"), Mapping) else {}
        completion = _int(usage.get("completion_tokens"))
        reasoning = message.get("reasoning_content") or message.get("reasoning") or ""
        return ChatResult(resp.status, None, _text(message.get("content")), _text(reasoning), tuple(calls),
                          choice.get("finish_reason"), completion, _int(usage.get("prompt_tokens")),
                          "usage" if completion is not None else "none", wall)

    def _stream(self, url: str, body: Mapping[str, Any], limit: float) -> ChatResult:
        sent = {**body, "stream": True, "stream_options": {"include_usage": True}}
        parser = SseParser()
        t0 = self.clock()
        first: list[float] = []

        def on_line(line: bytes) -> None:
            now = self.clock()
            if parser.feed(line) and not first:
                first.append(now - t0)
            if now - t0 > limit:
                raise _Deadline()

        try:
            resp = self.http("POST", url, sent, limit, headers=self._headers(), on_line=on_line,
                             stall_s=self.stall_s)
        except _Deadline:
            return ChatResult(0, f"deadline: no complete answer within {limit:g}s", wall_s=self.clock() - t0,
                              ttft_s=first[0] if first else None, chunks=parser.chunks)
        wall = self.clock() - t0
        if resp.status != 200:
            return ChatResult(resp.status, self._status_error(resp), wall_s=wall)
        if not parser.chunks and not parser.done and resp.body:
            parser = parse_sse_body(resp.body)   # a transport that ignored on_line: no TTFT then
        usage = parser.usage or {}
        completion = _int(usage.get("completion_tokens"))
        if completion is not None:
            tokens, source = completion, "usage"
        else:
            tokens, source = parser.token_chunks, "chunks"
        problem = None
        if parser.malformed is not None:
            problem = f"a stream event is not a chat completion chunk: {parser.malformed[:120]}"
        elif parser.after_done:
            problem = "data after [DONE]"
        elif not parser.done:
            problem = "the stream did not end with [DONE]"
        return ChatResult(resp.status, self.scrub(problem), "".join(parser.content), "".join(parser.reasoning),
                          tuple(parser.tools[i] for i in sorted(parser.tools)), parser.finish_reason, tokens,
                          _int(usage.get("prompt_tokens")), source, wall, first[0] if first else None,
                          parser.chunks, parser.done, self.scrub(problem))


MAX_COUNT = 2**53   # a token count or context a server states; a 400-digit one is not a count


def _int(value: Any) -> int | None:
    """A count the server states: a non-negative integer up to ``MAX_COUNT``, else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_COUNT else None


def _calls(value: Any) -> list[Any]:
    """``tool_calls`` as the list the API defines; anything else (a string, a number, an object) is none."""
    return value if isinstance(value, list) else []


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


__all__ = ["ChatResult", "Http", "HttpResponse", "ModelsResult", "OpenAIClient", "SseParser", "ToolCall", "api_base",
           "http_request", "loads", "parse_sse_body", "urllib_http"]
