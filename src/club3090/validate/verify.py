"""``verify``: is the served model answering correctly? (SYSTEM.md section 14 ``verify`` and ``verify-full``.)

Basic (about 10 s on a warm server): ``models`` (``/v1/models`` lists the model), ``completion``
("capital of France" -> Paris), ``streaming`` (coherent SSE chunks ending in ``[DONE]``),
``tool-call`` (one ``get_weather(city)`` call with ``tool_choice: auto``). ``full`` adds
``thinking`` (reasoning with ``enable_thinking`` on, none with it off), ``long-output`` (a
~2K-token answer scanned for ``<tool_call>`` leaks and degenerate repetition) and
``streaming-tool-call`` (the same tool call, streamed, thinking on).

Exit code: 0 every check passed or was skipped, 1 any failed, 2 the server was unreachable.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from club3090.cli.exit_codes import exit_code
from club3090.edges.openai_client import ChatResult, OpenAIClient
from club3090.gate.outcome import Outcome

PASS, FAIL, SKIP = "pass", "fail", "skip"

CAPITAL_PROMPT = "What is the capital of France? Answer in one word."
STREAM_PROMPT = "Count from 1 to 10, separated by commas."
TOOL_PROMPT = "What is the weather like in Paris right now? Use the get_weather tool."
THINK_PROMPT = "What is 17 multiplied by 23? Give the final number."
LONG_PROMPT = ("Write a detailed technical explanation, about 1500 words, of how TCP congestion control works: "
               "slow start, congestion avoidance, fast retransmit, fast recovery, CUBIC and BBR. Use prose, "
               "not lists.")
LONG_MAX_TOKENS = 2048
REPEAT_WIDTH = 50          # a window this many characters long ...
REPEAT_TIMES = 5           # ... found this many times (non-overlapping) is degenerate repetition
TOOL_TAG = "<tool_call>"

WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"}},
                       "required": ["city"]},
    },
}


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    status: str                 # pass | fail | skip
    detail: str = ""
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "detail": self.detail, "seconds": round(self.seconds, 3)}


@dataclass(frozen=True, slots=True)
class VerifyReport:
    url: str
    model: str | None
    full: bool
    checks: tuple[Check, ...]
    unreachable: bool = False

    @property
    def outcome(self) -> Outcome:
        if self.unreachable:
            return Outcome.INCONCLUSIVE
        return Outcome.FAILED if any(c.status == FAIL for c in self.checks) else Outcome.OK

    @property
    def exit_code(self) -> int:
        return exit_code(self.outcome)

    @property
    def ok(self) -> bool:
        return self.outcome is Outcome.OK

    def to_json(self) -> dict[str, Any]:
        return {"tool": "verify", "ok": self.ok, "exit_code": self.exit_code, "url": self.url, "model": self.model,
                "full": self.full, "unreachable": self.unreachable, "checks": [c.to_json() for c in self.checks],
                "passed": sum(c.status == PASS for c in self.checks),
                "failed": sum(c.status == FAIL for c in self.checks),
                "skipped": sum(c.status == SKIP for c in self.checks)}


def repeated_window(text: str, width: int = REPEAT_WIDTH, times: int = REPEAT_TIMES) -> str | None:
    """A ``width``-character window of ``text`` (whitespace collapsed) that occurs ``times`` or more
    times without overlapping, or None. Windows are tried every ``width // 2`` characters."""
    flat = " ".join(text.split())
    if len(flat) < width * times:
        return None
    for start in range(0, len(flat) - width + 1, max(1, width // 2)):
        window = flat[start:start + width]
        if window.strip() and flat.count(window) >= times:
            return window
    return None


def _messages(prompt: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": prompt}]


def _thinking(on: bool) -> dict[str, Any]:
    return {"chat_template_kwargs": {"enable_thinking": on}}


def _failed(result: ChatResult) -> str | None:
    if result.error is not None:
        return result.error
    return None


def check_completion(client: OpenAIClient, model: str) -> tuple[str, str]:
    r = client.chat({"model": model, "messages": _messages(CAPITAL_PROMPT), "max_tokens": 512, "temperature": 0,
                     **_thinking(False)})
    if (err := _failed(r)) is not None:
        return FAIL, err
    if "paris" in r.content.lower():
        return PASS, f"answered {r.content.strip()[:60]!r}"
    if "paris" in r.reasoning.lower():
        return FAIL, "Paris only in reasoning_content, not in the answer (finish_reason " \
                     f"{r.finish_reason}); raise max_tokens or check the reasoning parser"
    return FAIL, f"expected Paris, got {(r.content or r.reasoning).strip()[:80]!r}"


def check_streaming(client: OpenAIClient, model: str) -> tuple[str, str]:
    r = client.chat({"model": model, "messages": _messages(STREAM_PROMPT), "max_tokens": 64, "temperature": 0,
                     **_thinking(False)}, stream=True)
    if r.unreachable or r.status != 200:
        return FAIL, r.error or f"HTTP {r.status}"
    if r.stream_problem:
        return FAIL, r.stream_problem
    if not r.chunks:
        return FAIL, "no stream chunks"
    if not (r.content.strip() or r.reasoning.strip()):
        return FAIL, f"{r.chunks} chunks but no text"
    return PASS, f"{r.chunks} chunks, [DONE], {len(r.content)} chars"


def _tool_verdict(r: ChatResult) -> tuple[str, str]:
    if (err := _failed(r)) is not None:
        return FAIL, err
    if not r.tool_calls:
        return FAIL, f"no tool_calls (finish_reason {r.finish_reason}; content {r.content.strip()[:60]!r}); " \
                     "is --enable-auto-tool-choice / --tool-call-parser set?"
    for call in r.tool_calls:
        args = call.parsed_arguments()
        if call.name == "get_weather" and isinstance(args, dict):
            return PASS, f"get_weather({json.dumps(args)[:80]})"
    first = r.tool_calls[0]
    if first.name != "get_weather":
        return FAIL, f"tool call names {first.name!r}, not get_weather"
    return FAIL, f"tool-call arguments are not a JSON object: {first.arguments[:80]!r}"


def check_tool_call(client: OpenAIClient, model: str) -> tuple[str, str]:
    return _tool_verdict(client.chat({"model": model, "messages": _messages(TOOL_PROMPT), "tools": [WEATHER_TOOL],
                                      "tool_choice": "auto", "max_tokens": 512, "temperature": 0,
                                      **_thinking(False)}))


def check_streaming_tool_call(client: OpenAIClient, model: str) -> tuple[str, str]:
    r = client.chat({"model": model, "messages": _messages(TOOL_PROMPT), "tools": [WEATHER_TOOL],
                     "tool_choice": "auto", "max_tokens": 2048, "temperature": 0, **_thinking(True)}, stream=True)
    return _tool_verdict(r)


def check_thinking(client: OpenAIClient, model: str) -> tuple[str, str]:
    on = client.chat({"model": model, "messages": _messages(THINK_PROMPT), "max_tokens": 2048, "temperature": 0,
                      **_thinking(True)})
    off = client.chat({"model": model, "messages": _messages(THINK_PROMPT), "max_tokens": 512, "temperature": 0,
                       **_thinking(False)})
    for label, r in (("thinking on", on), ("thinking off", off)):
        if (err := _failed(r)) is not None:
            return FAIL, f"{label}: {err}"
    if not on.reasoning.strip() and not off.reasoning.strip():
        return SKIP, "the server returned no reasoning_content either way (not a reasoning model, or no " \
                     "--reasoning-parser)"
    if not on.reasoning.strip():
        return FAIL, "enable_thinking=true gave no reasoning_content"
    if off.reasoning.strip():
        return FAIL, "enable_thinking=false still filled reasoning_content"
    if not off.content.strip():
        return FAIL, "enable_thinking=false gave an empty answer"
    if not on.content.strip():
        return FAIL, f"enable_thinking=true filled reasoning but no answer (finish_reason {on.finish_reason})"
    return PASS, f"reasoning {len(on.reasoning)} chars with thinking on, none with it off"


def check_long_output(client: OpenAIClient, model: str) -> tuple[str, str]:
    r = client.chat({"model": model, "messages": _messages(LONG_PROMPT), "max_tokens": LONG_MAX_TOKENS,
                     **_thinking(False)})
    if (err := _failed(r)) is not None:
        return FAIL, err
    text = r.reasoning + "\n" + r.content
    if not r.content.strip():
        return FAIL, "empty answer"
    tags = text.count(TOOL_TAG)
    if tags:
        return FAIL, f"{tags} {TOOL_TAG} tag(s) in plain output without tools (tool-call cascade)"
    window = repeated_window(text)
    if window is not None:
        return FAIL, f"degenerate repetition: {window!r} occurs >= {REPEAT_TIMES} times"
    tokens = f"{r.completion_tokens} tokens" if r.completion_tokens is not None else f"{len(r.content)} chars"
    return PASS, f"{tokens}, finish_reason {r.finish_reason}, no cascade or repetition"


Probe = Callable[[OpenAIClient, str], "tuple[str, str]"]
BASIC: tuple[tuple[str, Probe], ...] = (("completion", check_completion), ("streaming", check_streaming),
                                        ("tool-call", check_tool_call))
FULL: tuple[tuple[str, Probe], ...] = (("thinking", check_thinking), ("long-output", check_long_output),
                                       ("streaming-tool-call", check_streaming_tool_call))


def verify(client: OpenAIClient, *, model: str | None = None, full: bool = False, skip_tools: bool = False,
           progress: Callable[[str], None] = lambda _s: None) -> VerifyReport:
    """Run the checks in order; a probe's exception is a failed check, never a crash."""
    clock = client.clock
    t0 = clock()
    listed = client.models()
    seconds = clock() - t0
    if listed.unreachable:
        checks = [Check("models", FAIL, f"server unreachable at {client.base}: {listed.error}", seconds)]
        return VerifyReport(client.base, model, full, tuple(checks), unreachable=True)
    checks: list[Check] = []
    if listed.error is not None:
        checks.append(Check("models", FAIL, listed.error, seconds))
    elif model is None and not listed.ids:
        checks.append(Check("models", FAIL, "/v1/models lists no model", seconds))
    elif model is None:
        model = listed.ids[0]
        checks.append(Check("models", PASS, f"serving {model}", seconds))
    elif model in listed.ids:
        checks.append(Check("models", PASS, f"serving {model}", seconds))
    else:
        checks.append(Check("models", FAIL, f"{model!r} not in /v1/models ({', '.join(listed.ids[:5]) or 'empty'})",
                            seconds))
    progress(f"[verify] models: {checks[0].status} {checks[0].detail}")
    probes = BASIC + (FULL if full else ())
    for name, probe in probes:
        if model is None:
            checks.append(Check(name, SKIP, "no model to ask"))
            continue
        if skip_tools and "tool" in name:
            checks.append(Check(name, SKIP, "--skip-tools"))
            continue
        t = clock()
        try:
            status, detail = probe(client, model)
        except Exception as exc:  # noqa: BLE001 - a probe failure is a red check
            status, detail = FAIL, f"{type(exc).__name__}: {exc}"
        checks.append(Check(name, status, client.scrub(detail) or "", clock() - t))
        progress(f"[verify] {name}: {status} {checks[-1].detail}")
    return VerifyReport(client.base, model, full, tuple(checks))


__all__ = ["WEATHER_TOOL", "Check", "VerifyReport", "repeated_window", "verify"]
