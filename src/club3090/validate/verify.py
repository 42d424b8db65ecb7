"""``verify``: is the served model answering correctly? (docs/DESIGN.md, validation tools.)

Basic (about 10 s on a warm server): ``models`` (``/v1/models`` lists the model), ``completion``
("capital of France" -> Paris, and the answer must stop by itself: ``finish_reason: stop``),
``streaming`` (coherent SSE chunks ending in ``[DONE]``), ``tool-call`` (one ``get_weather(city)``
call with ``tool_choice: auto``). ``full`` adds ``thinking`` (reasoning with ``enable_thinking``
on, none with it off), ``long-output`` (a ~2K-token request whose answer must reach
``LONG_MIN_FRACTION`` of ``max_tokens``, scanned for ``<tool_call>`` leaks and degenerate
repetition), ``streaming-tool-call`` (the same tool call, streamed, thinking on), then the launch
checks (``club3090.validate.launch_checks``: ``patches-applied`` from the launch log,
``spec-acceptance`` from ``/metrics``) and a probe of the optional capabilities (tool calls,
reasoning, vision, long context), each reported as what was observed, never assumed.

Statuses: ``pass``, ``fail``, ``skip`` (could not be checked; the detail says what is missing),
``not-applicable`` (the check does not apply to this profile). Exit code: 0 no check failed, 1 a
check failed (or the run's deadline stopped it), 2 the server was unreachable.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from club3090.edges.openai_client import ChatResult, ModelsResult, OpenAIClient
from club3090.outcome import Outcome
from club3090.validate.hints import VLLM_HINTS, ServerHints
from club3090.validate.launch_checks import LaunchFacts, check_acceptance, check_patches

PASS, FAIL, SKIP, NOT_APPLICABLE = "pass", "fail", "skip", "not-applicable"

CAPITAL_PROMPT = "What is the capital of France? Answer in one word."
STREAM_PROMPT = "Count from 1 to 10, separated by commas."
TOOL_PROMPT = "What is the weather like in Paris right now? Use the get_weather tool."
THINK_PROMPT = "What is 17 multiplied by 23? Give the final number."
LONG_PROMPT = ("Write a detailed technical explanation, about 1500 words, of how TCP congestion control works: "
               "slow start, congestion avoidance, fast retransmit, fast recovery, CUBIC and BBR. Use prose, "
               "not lists.")
LONG_MAX_TOKENS = 2048
LONG_MIN_FRACTION = 0.5    # a long answer shorter than this share of max_tokens stopped early
CHARS_PER_TOKEN = 4.0      # only when the server reports no usage
VISION_PROMPT = "What colour is this image? Answer in one word."
# a 1x1 red PNG
RED_PIXEL = ("data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAA"
             "AABJRU5ErkJggg==")
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
    capabilities: Mapping[str, str] = field(default_factory=dict)
    deadline_hit: bool = False
    tool: str = "verify"

    @property
    def outcome(self) -> Outcome:
        if self.unreachable:
            return Outcome.INCONCLUSIVE
        return Outcome.FAILED if self.deadline_hit or any(c.status == FAIL for c in self.checks) else Outcome.OK

    @property
    def ok(self) -> bool:
        return self.outcome is Outcome.OK

    def to_json(self) -> dict[str, Any]:
        return {"tool": self.tool, "ok": self.ok, "outcome": self.outcome.value, "url": self.url, "model": self.model,
                "full": self.full, "unreachable": self.unreachable, "checks": [c.to_json() for c in self.checks],
                "passed": sum(c.status == PASS for c in self.checks),
                "failed": sum(c.status == FAIL for c in self.checks),
                "skipped": sum(c.status == SKIP for c in self.checks),
                "not_applicable": sum(c.status == NOT_APPLICABLE for c in self.checks),
                "capabilities": dict(self.capabilities), "deadline_hit": self.deadline_hit}


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
    if "paris" in r.content.lower() and r.finish_reason != "stop":
        return FAIL, f"answered {r.content.strip()[:40]!r} but did not stop by itself (finish_reason " \
                     f"{r.finish_reason}): a short factual answer must end with stop"
    if "paris" in r.content.lower():
        return PASS, f"answered {r.content.strip()[:60]!r}, finish_reason stop"
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


def hinted(detail: str, hints: ServerHints) -> str:
    """A probe's detail with the server's own flag names in place of vLLM's."""
    return detail.replace(VLLM_HINTS.tools, hints.tools).replace(VLLM_HINTS.reasoning, hints.reasoning)


def _tool_verdict(r: ChatResult) -> tuple[str, str]:
    if (err := _failed(r)) is not None:
        return FAIL, err
    if not r.tool_calls:
        return FAIL, f"no tool_calls (finish_reason {r.finish_reason}; content {r.content.strip()[:60]!r}); " \
                     + VLLM_HINTS.tools
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
                     f"{VLLM_HINTS.reasoning})"
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
    if r.completion_tokens is not None:
        tokens, unit = r.completion_tokens, "tokens"
    else:
        tokens, unit = int(len(text.strip()) / CHARS_PER_TOKEN), "tokens (estimated from characters, no usage)"
    need = int(LONG_MIN_FRACTION * LONG_MAX_TOKENS)
    if tokens < need:
        return FAIL, f"stopped early: {tokens} {unit} of {LONG_MAX_TOKENS} requested (finish_reason " \
                     f"{r.finish_reason}); needs >= {need} ({LONG_MIN_FRACTION:.0%})"
    return PASS, f"{tokens} {unit} of {LONG_MAX_TOKENS} (>= {LONG_MIN_FRACTION:.0%}), finish_reason " \
                 f"{r.finish_reason}, no cascade or repetition"


def probe_vision(client: OpenAIClient, model: str) -> str:
    """``supported`` (a red pixel was called red), ``answered-unverified`` (an image part was taken and
    answered, but not with its colour: the server may have dropped the image), ``unsupported``
    (refused with 4xx), or ``error``."""
    r = client.chat({"model": model, "max_tokens": 16, "temperature": 0, **_thinking(False),
                     "messages": [{"role": "user", "content": [{"type": "text", "text": VISION_PROMPT},
                                                               {"type": "image_url", "image_url": {"url": RED_PIXEL}}]}]})
    if r.error is None and not r.empty:
        return "supported" if "red" in r.content.lower() else "answered-unverified"
    return "unsupported" if 400 <= r.status < 500 else "error"


Probe = Callable[[OpenAIClient, str], "tuple[str, str]"]
BASIC: tuple[tuple[str, Probe], ...] = (("completion", check_completion), ("streaming", check_streaming),
                                        ("tool-call", check_tool_call))
FULL: tuple[tuple[str, Probe], ...] = (("thinking", check_thinking), ("long-output", check_long_output),
                                       ("streaming-tool-call", check_streaming_tool_call))


def list_model(client: OpenAIClient, model: str | None) -> tuple[Check, str | None, ModelsResult]:
    """The ``models`` check: (check, the model to ask or None, the listing)."""
    t0 = client.clock()
    listed = client.models()
    seconds = client.clock() - t0
    if listed.unreachable:
        return Check("models", FAIL, f"server unreachable at {client.base}: {listed.error}", seconds), model, listed
    if listed.error is not None:
        return Check("models", FAIL, listed.error, seconds), model, listed
    if model is None and not listed.ids:
        return Check("models", FAIL, "/v1/models lists no model", seconds), None, listed
    if model is None:
        model = listed.ids[0]
    if model in listed.ids:
        return Check("models", PASS, f"serving {model}", seconds), model, listed
    return Check("models", FAIL, f"{model!r} not in /v1/models ({', '.join(listed.ids[:5]) or 'empty'})",
                 seconds), model, listed


def _capabilities(checks: list[Check], vision: str | None, long_context: Check | None) -> dict[str, str]:
    status = {c.name: c.status for c in checks}
    tool = status.get("tool-call")
    think = status.get("thinking")
    out = {"tool-calls": {PASS: "supported", FAIL: "unsupported"}.get(tool or "", "not-probed"),
           "reasoning": {PASS: "supported", SKIP: "unsupported", FAIL: "broken"}.get(think or "", "not-probed"),
           "vision": vision or "not-probed"}
    if long_context is None:
        out["long-context"] = "not-probed"
    else:
        out["long-context"] = {PASS: "supported", FAIL: "failed"}.get(long_context.status, "not-probed")
    return out


def verify(client: OpenAIClient, *, model: str | None = None, full: bool = False, skip_tools: bool = False,
           launch: LaunchFacts | None = None, context: int | None = None,
           progress: Callable[[str], None] = lambda _s: None, skip_tools_why: str = "--skip-tools",
           hints: ServerHints = VLLM_HINTS) -> VerifyReport:
    """Run the checks in order; a probe's exception is a failed check, never a crash. ``skip_tools_why``:
    the detail of a skipped tool check (the real reason); ``hints``: the server's own flag names."""
    clock = client.clock
    first, model, listed = list_model(client, model)
    if listed.unreachable:
        return VerifyReport(client.base, model, full, (first,), unreachable=True)
    checks: list[Check] = [first]
    progress(f"[verify] models: {first.status} {first.detail}")
    deadline_hit = False

    def run(name: str, probe: Callable[[], tuple[str, str]]) -> Check:
        nonlocal deadline_hit
        if client.expired:
            deadline_hit = True
            check = Check(name, SKIP, f"not run: {client.deadline_message()}")
        else:
            t = clock()
            try:
                status, detail = probe()
            except Exception as exc:  # noqa: BLE001 - a probe failure is a red check
                status, detail = FAIL, f"{type(exc).__name__}: {exc}"
            check = Check(name, status, hinted(client.scrub(detail) or "", hints), clock() - t)
        checks.append(check)
        progress(f"[verify] {name}: {check.status} {check.detail}")
        return check

    for name, probe in BASIC + (FULL if full else ()):
        if model is None:
            checks.append(Check(name, SKIP, "no model to ask"))
        elif skip_tools and "tool" in name:
            checks.append(Check(name, SKIP, skip_tools_why))
        else:
            run(name, functools.partial(probe, client, model))
    vision: str | None = None
    long_check: Check | None = None
    if full and model is not None:
        facts = launch or LaunchFacts()
        run("patches-applied", lambda: check_patches(facts))
        run("spec-acceptance", lambda: check_acceptance(facts, *(client.metrics() if facts.drafter else
                                                                  (None, None))))
        if not client.expired:
            try:
                vision = probe_vision(client, model)
            except Exception:  # noqa: BLE001 - a probe that breaks reports "error"
                vision = "error"
        from club3090.validate.stress import long_prompt

        ctx, name = context or listed.context(model), model
        long_check = run("long-context", lambda: long_prompt(client, name, ctx))
    caps = _capabilities(checks, vision, long_check) if full else \
        {"tool-calls": _capabilities(checks, None, None)["tool-calls"]}
    return VerifyReport(client.base, model, full, tuple(checks), capabilities=caps, deadline_hit=deadline_hit)


__all__ = ["WEATHER_TOOL", "Check", "VerifyReport", "hinted", "list_model", "repeated_window", "verify"]
