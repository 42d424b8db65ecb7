"""``verify-stress``: does the server hold up under load? (docs/DESIGN.md, validation tools.)

Checks, each bounded in count and by the run's deadline:

- ``concurrent-streams``: ``streams`` streamed chats at once; every one must answer 200, carry
  text and end with ``[DONE]`` (an engine that cuts one stream short for another fails).
- ``long-prompt``: one prompt of about ``fill`` x the serving context (the context from
  ``/v1/models``' ``max_model_len`` or ``--context``), sized from a calibration request's
  ``usage.prompt_tokens``; the server must take it, report a prompt within 80-100 % of the
  target, and answer.
- ``tool-round-trip`` x ``rounds``: a named ``tool_choice`` for ``get_weather``, the tool's
  result sent back as a ``tool`` message, and a plain answer (``tool_choice: none``) after it.

- upstream's ``verify-stress.sh`` checks (``validate.ladder``): ``needle-N`` per rung of the
  needle-in-a-haystack ladder up to the served context and ``needle-ladder`` (the largest passing
  length), ``tool-prefill`` (a ~25K-token tool result), ``agent``, ``coding``, ``reasoning``.

Exit code as ``verify``: 0 no check failed, 1 a check failed or the deadline stopped the run, 2
the server was unreachable.
"""

from __future__ import annotations

import contextlib
import functools
import json
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from club3090.edges.openai_client import ChatResult, OpenAIClient
from club3090.validate.bench import haystack
from club3090.validate.ladder import MAX_PROBE_TOKENS, TOOL_PREFILL_TOKENS, Sizer
from club3090.validate.ladder import plan as upstream_plan
from club3090.validate.verify import (
    FAIL,
    PASS,
    SKIP,
    TOOL_PROMPT,
    WEATHER_TOOL,
    Check,
    VerifyReport,
    list_model,
)

STREAMS = 4
MAX_STREAMS = 64
FILL = 0.9
ROUNDS = 2
MAX_ROUNDS = 20
STREAM_TOKENS = 128
BARRIER_TIMEOUT_S = 10.0
ANSWER_TOKENS = 32
CALIBRATION_CHARS = 2000
LONG_SUFFIX = "\n\nReply with the single word OK."
STREAM_PROMPT = "Write a short paragraph about lighthouses, stream {i}."


@dataclass(frozen=True, slots=True)
class UpstreamChecks:
    """Which of upstream's verify-stress checks run, and their sizes (``validate.ladder``)."""
    ladder: bool = True
    probes: bool = True
    ladder_max: int | None = None
    tool_prefill_tokens: int = TOOL_PREFILL_TOKENS


def concurrent_streams(client: OpenAIClient, model: str, streams: int) -> tuple[str, str]:
    # the requests leave together: streams that merely follow one another would test nothing
    start = threading.Barrier(streams)

    def one(i: int) -> ChatResult:
        with contextlib.suppress(threading.BrokenBarrierError):
            start.wait(timeout=BARRIER_TIMEOUT_S)
        return client.chat({"model": model, "messages": [{"role": "user", "content": STREAM_PROMPT.format(i=i)}],
                            "max_tokens": STREAM_TOKENS}, stream=True)

    with ThreadPoolExecutor(max_workers=streams) as pool:
        results = list(pool.map(one, range(streams)))
    bad: list[str] = []
    for i, r in enumerate(results):
        if r.error is not None:
            bad.append(f"stream {i + 1}: {r.error}")
        elif not r.done:
            bad.append(f"stream {i + 1}: no [DONE]")
        elif r.empty:
            bad.append(f"stream {i + 1}: no text")
    if bad:
        return FAIL, f"{streams - len(bad)}/{streams} streams complete; " + "; ".join(bad[:3])
    tokens = sum(r.completion_tokens or 0 for r in results)
    return PASS, f"{streams}/{streams} concurrent streams complete with [DONE], {tokens} tokens in all"


def long_prompt(client: OpenAIClient, model: str, context: int | None, *, fill: float = FILL,
                salt: Callable[[], str] = lambda: uuid.uuid4().hex, top: int | None = None) -> tuple[str, str]:
    """One prompt near the serving context (or ``top``, the user's ``--ladder-max``), sized from a
    calibration request and never past ``MAX_PROBE_TOKENS``."""
    if context is None:
        return SKIP, "serving context unknown (no max_model_len in /v1/models); pass --context N"
    target = int(fill * min(context, top or MAX_PROBE_TOKENS, MAX_PROBE_TOKENS)) - ANSWER_TOKENS
    if target < 64:
        return SKIP, f"context {context} too small to probe"

    def ask(chars: int) -> tuple[ChatResult, int]:
        text = haystack(salt(), chars) + LONG_SUFFIX
        return client.chat({"model": model, "messages": [{"role": "user", "content": text}],
                            "max_tokens": ANSWER_TOKENS}), len(text)

    calib, size = ask(CALIBRATION_CHARS)
    if calib.error is not None:
        return FAIL, f"calibration request failed: {calib.error}"
    if not calib.prompt_tokens:
        return SKIP, "the server reports no usage.prompt_tokens: a prompt's size cannot be confirmed"
    # sized by our own bounds (MAX_PROBE_TOKENS, Sizer's 1..8 chars per token), never the server's numbers
    r, _ = ask(Sizer.of(size, calib.prompt_tokens).chars(target, reserve=len(LONG_SUFFIX)))
    if r.error is not None:
        return FAIL, f"a {target}-token prompt in a {context}-token context was refused: {r.error}"
    got = r.prompt_tokens or 0
    if not 0.8 * target <= got <= context:
        return FAIL, f"the server counted {got} prompt tokens for a {target}-token target"
    if r.empty:
        return FAIL, f"{got}-token prompt accepted but the answer is empty (finish_reason {r.finish_reason})"
    return PASS, f"{got}-token prompt ({got / context:.0%} of {context}) answered in {r.wall_s:.1f}s"


def tool_round_trip(client: OpenAIClient, model: str) -> tuple[str, str]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": TOOL_PROMPT}]
    first = client.chat({"model": model, "messages": messages, "tools": [WEATHER_TOOL], "max_tokens": 256,
                         "tool_choice": {"type": "function", "function": {"name": "get_weather"}}, "temperature": 0})
    if first.error is not None:
        return FAIL, f"named tool call: {first.error}"
    call = next((c for c in first.tool_calls if c.name == "get_weather"), None)
    if call is None:
        return FAIL, f"named tool_choice gave no get_weather call (content {first.content.strip()[:60]!r})"
    args = call.parsed_arguments()
    if not isinstance(args, dict):
        return FAIL, f"tool-call arguments are not a JSON object: {call.arguments[:80]!r}"
    call_id = call.id or "call_1"
    result = {"city": str(args.get("city", "?"))[:80], "sky": "clear", "temperature_c": 21}
    messages += [{"role": "assistant", "content": "",       # "" not null: some servers refuse null
                  "tool_calls": [{"id": call_id, "type": "function",
                                  "function": {"name": call.name, "arguments": call.arguments}}]},
                 {"role": "tool", "tool_call_id": call_id, "content": json.dumps(result)}]
    second = client.chat({"model": model, "messages": messages, "tools": [WEATHER_TOOL], "tool_choice": "none",
                          "max_tokens": 256, "temperature": 0})
    if second.error is not None:
        return FAIL, f"answer after the tool result: {second.error}"
    if not second.content.strip():
        return FAIL, f"empty answer after the tool result (finish_reason {second.finish_reason})"
    return PASS, f"get_weather({json.dumps(args)[:60]}) -> tool result -> {len(second.content)}-char answer"


def stress(client: OpenAIClient, *, model: str | None = None, streams: int = STREAMS, context: int | None = None,
           fill: float = FILL, rounds: int = ROUNDS, skip_tools: bool = False, upstream: UpstreamChecks | None = None,
           progress: Callable[[str], None] = lambda _s: None) -> VerifyReport:
    """Run the checks in order; a check's exception is a failed check, never a crash. The load
    checks come first, then upstream's (``validate.ladder``) unless ``upstream`` turns them off."""
    upstream = upstream or UpstreamChecks()
    streams, rounds = max(1, min(streams, MAX_STREAMS)), max(0, min(rounds, MAX_ROUNDS))
    first, model, listed = list_model(client, model)
    if listed.unreachable:
        return VerifyReport(client.base, model, False, (first,), unreachable=True, tool="verify-stress")
    checks = [first]
    progress(f"[verify-stress] models: {first.status} {first.detail}")
    context = context or listed.context(model)
    plan: list[tuple[str, Callable[[], tuple[str, str]]]] = []
    if model is not None:
        # partial binds the served name now: the loop below rebinds `name` (a closure would ask the server
        # for a model called "long-prompt")
        plan.append(("concurrent-streams", functools.partial(concurrent_streams, client, model, streams)))
        plan.append(("long-prompt", functools.partial(long_prompt, client, model, context, fill=fill,
                                                      top=upstream.ladder_max)))
        for i in range(rounds):
            plan.append((f"tool-round-trip-{i + 1}", (lambda: (SKIP, "--skip-tools")) if skip_tools
                         else functools.partial(tool_round_trip, client, model)))
        plan.extend(upstream_plan(client, model, context, salt=lambda: uuid.uuid4().hex, ladder_max=upstream.ladder_max,
                                  tool_prefill_tokens=upstream.tool_prefill_tokens, ladder=upstream.ladder,
                                  probes=upstream.probes, skip_tools=skip_tools).probes)
    deadline_hit = False
    for name, run in plan:
        if client.expired:
            deadline_hit = True
            checks.append(Check(name, SKIP, f"not run: {client.deadline_message()}"))
            continue
        t = client.clock()
        try:
            status, detail = run()
        except Exception as exc:  # noqa: BLE001 - a check's failure is a red check
            status, detail = FAIL, f"{type(exc).__name__}: {exc}"
        checks.append(Check(name, status, client.scrub(detail) or "", client.clock() - t))
        progress(f"[verify-stress] {name}: {status} {checks[-1].detail}")
    return VerifyReport(client.base, model, False, tuple(checks), deadline_hit=deadline_hit,
                        tool="verify-stress")


__all__ = ["UpstreamChecks", "concurrent_streams", "long_prompt", "stress", "tool_round_trip"]
