"""Upstream's ``verify-stress.sh`` checks: the needle-in-a-haystack ladder up to the served context,
the ~25K-token tool-response prefill (the request shape that runs a tight KV pool out of memory),
and the agent / coding / reasoning probes. ``stress`` runs them after its own load checks.

Every prompt is sized by our own bound (``MAX_PROBE_TOKENS``), never by a number the server
reports, and each probe is one bounded request (the client's timeout and the run's deadline).
Model output is data: the coding probe parses the answer with ``ast`` and never runs it.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from club3090.edges.openai_client import OpenAIClient
from club3090.validate.bench import haystack
from club3090.validate.verify import FAIL, PASS, SKIP, WEATHER_TOOL

LADDER_TOKENS = (1024, 4096, 16384, 32768, 65536, 131072, 262144)
MAX_PROBE_TOKENS = 262_144          # our own ceiling for any prompt we build
TOOL_PREFILL_TOKENS = 25_000        # upstream's tool-response prefill size
FILL = 0.9                          # the top rung: this share of the served context
ANSWER_TOKENS = 48
CALIBRATION_CHARS = 2000
NEEDLE_QUESTION = ("\n\nWhat is the secret passphrase mentioned in the text above? "
                   "Reply with the passphrase only.")
NEEDLE_WORDS = ("amber", "cobalt", "falcon", "juniper", "lantern", "meridian", "orchid", "quartz")
CODING_PROMPT = ("Write a Python function named add that takes two numbers a and b and returns their sum. "
                 "Reply with only the code in a ```python block.")
REASONING_PROMPT = "A box holds 17 red and 25 blue marbles. How many marbles are in the box? Give the final number."
REASONING_ANSWER = "42"
AGENT_PROMPT = "Plan a picnic in Paris: first check the weather there with the get_weather tool."
_CODE_BLOCK = re.compile(r"```(?:python|py)?[ \t]*\n(.{1,20000}?)```", re.S)

Probe = Callable[[], tuple[str, str]]


MAX_CHARS_PER_TOKEN = 8.0           # a measured ratio is clamped to 1..8: "1 token per 2,000 chars" sizes nothing


@dataclass(frozen=True, slots=True)
class Sizer:
    """Characters per prompt token, measured on this server with one small request."""
    chars_per_token: float

    @classmethod
    def of(cls, chars: int, tokens: int) -> "Sizer":
        """The ratio the server's ``usage.prompt_tokens`` gives, within our own 1..8 bound."""
        return cls(min(MAX_CHARS_PER_TOKEN, max(1.0, chars / tokens)))

    def chars(self, tokens: int, reserve: int = 0) -> int:
        return max(0, int(tokens * self.chars_per_token * 0.98) - reserve)


def measure_sizer(client: OpenAIClient, model: str, salt: str) -> Sizer | str:
    """A ``Sizer``, or why none: the server must report ``usage.prompt_tokens``."""
    text = haystack(salt, CALIBRATION_CHARS)
    r = client.chat({"model": model, "messages": [{"role": "user", "content": text}], "max_tokens": 1})
    if r.error is not None:
        return f"calibration request failed: {r.error}"
    if not r.prompt_tokens:
        return "the server reports no usage.prompt_tokens: a prompt's size cannot be confirmed"
    return Sizer.of(len(text), r.prompt_tokens)


def rungs(context: int, top: int | None = None) -> list[int]:
    """The ladder's lengths in tokens: the standard steps below the ceiling, then the ceiling
    (``FILL`` of the served context, ``top`` and ``MAX_PROBE_TOKENS``, whichever is smallest)."""
    ceiling = min(int(FILL * context) - ANSWER_TOKENS, top or MAX_PROBE_TOKENS, MAX_PROBE_TOKENS)
    if ceiling < 256:
        return []
    steps = [n for n in LADDER_TOKENS if n < 0.95 * ceiling]
    return [*steps, ceiling]


def passphrase(salt: str, tokens: int) -> str:
    word = NEEDLE_WORDS[sum(map(ord, salt)) % len(NEEDLE_WORDS)]
    return f"{word}-{tokens % 9973}-{salt[:4]}"


def needle_prompt(salt: str, secret: str, chars: int) -> str:
    """``chars`` of filler with the needle sentence in its middle, then the question."""
    filler = haystack(salt, chars)
    cut = filler.rfind(" ", 0, len(filler) // 2) + 1
    needle = f" The secret passphrase is {secret}. "
    return filler[:cut] + needle + filler[cut:] + NEEDLE_QUESTION


def needle_rung(client: OpenAIClient, model: str, tokens: int, sizer: Sizer, salt: str) -> tuple[str, str]:
    secret = passphrase(salt, tokens)
    text = needle_prompt(salt, secret, sizer.chars(tokens, reserve=len(NEEDLE_QUESTION) + 64))
    r = client.chat({"model": model, "messages": [{"role": "user", "content": text}],
                     "max_tokens": ANSWER_TOKENS, "temperature": 0})
    got = r.prompt_tokens or 0
    if r.error is not None:
        return FAIL, f"a {tokens}-token haystack was refused: {r.error}"
    if secret in r.content or secret in r.reasoning:
        return PASS, f"{got}-token haystack: the needle was found"
    return FAIL, f"{got}-token haystack: the needle was not in the answer ({_clip(r.content)!r})"


def tool_prefill(client: OpenAIClient, model: str, tokens: int, sizer: Sizer, salt: str) -> tuple[str, str]:
    """A tool call whose result is ``tokens`` long, then the answer that must read it."""
    call_id = "call_prefill"
    result = json.dumps({"city": "Paris", "report": haystack(salt, sizer.chars(tokens, reserve=200))})
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "What is the weather like in Paris right now? Use the get_weather tool."},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": call_id, "content": result}]
    r = client.chat({"model": model, "messages": messages, "tools": [WEATHER_TOOL], "tool_choice": "none",
                     "max_tokens": ANSWER_TOKENS, "temperature": 0})
    if r.error is not None:
        return FAIL, f"a {tokens}-token tool result was refused: {r.error}"
    # the probe is about the prefill (the shape that runs a tight pool out of memory); whether the
    # model answers well after a tool result is the tool round trip's check
    answer = "an empty answer" if r.empty else f"a {len(r.content)}-char answer"
    return PASS, f"{r.prompt_tokens or '?'}-token tool-result prefill taken, {answer} in {r.wall_s:.1f}s"


def agent_probe(client: OpenAIClient, model: str) -> tuple[str, str]:
    """An agent's first step: the model must choose the tool itself (``tool_choice: auto``)."""
    r = client.chat({"model": model, "messages": [{"role": "user", "content": AGENT_PROMPT}],
                     "tools": [WEATHER_TOOL], "tool_choice": "auto", "max_tokens": 256, "temperature": 0})
    if r.error is not None:
        return FAIL, f"agent step: {r.error}"
    call = next((c for c in r.tool_calls if c.name == "get_weather"), None)
    if call is None:
        return FAIL, f"the model did not call get_weather by itself ({_clip(r.content)!r})"
    if not isinstance(call.parsed_arguments(), dict):
        return FAIL, f"tool-call arguments are not a JSON object: {call.arguments[:80]!r}"
    return PASS, f"chose get_weather({call.arguments[:60]}) on its own"


def coding_probe(client: OpenAIClient, model: str) -> tuple[str, str]:
    r = client.chat({"model": model, "messages": [{"role": "user", "content": CODING_PROMPT}],
                     "max_tokens": 256, "temperature": 0})
    if r.error is not None:
        return FAIL, f"coding: {r.error}"
    match = _CODE_BLOCK.search(r.content)
    code = match.group(1) if match else r.content
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return FAIL, f"the answer is not valid Python ({_clip(code)!r})"
    if not any(isinstance(n, ast.FunctionDef) and n.name == "add" for n in ast.walk(tree)):
        return FAIL, "valid Python, but no function named add"
    return PASS, "a well-formed Python function add (parsed, not run)"


def reasoning_probe(client: OpenAIClient, model: str) -> tuple[str, str]:
    r = client.chat({"model": model, "messages": [{"role": "user", "content": REASONING_PROMPT}],
                     "max_tokens": 512, "temperature": 0})
    if r.error is not None:
        return FAIL, f"reasoning: {r.error}"
    if re.search(rf"(?<!\d){REASONING_ANSWER}(?!\d)", r.content[-2000:]):
        where = "with a reasoning trace" if r.reasoning.strip() else "without a reasoning trace"
        return PASS, f"17 + 25 = {REASONING_ANSWER} answered {where}"
    return FAIL, f"expected {REASONING_ANSWER} in the answer ({_clip(r.content)!r})"


@dataclass(frozen=True, slots=True)
class LadderPlan:
    """What ``plan`` adds to a run: named probes in order."""
    probes: tuple[tuple[str, Probe], ...]


def plan(client: OpenAIClient, model: str, context: int | None, *, salt: Callable[[], str],
         ladder_max: int | None = None, tool_prefill_tokens: int = TOOL_PREFILL_TOKENS,
         ladder: bool = True, probes: bool = True, skip_tools: bool = False) -> LadderPlan:
    """The upstream checks as named probes. The sizer is measured once, lazily, by the first
    probe that needs it; a server without usage counts skips the sized probes."""
    measured: list[Sizer | str] = []

    def sizer() -> Sizer | str:
        if not measured:
            measured.append(measure_sizer(client, model, salt()))
        return measured[0]

    def sized(run: Callable[[Sizer], tuple[str, str]]) -> Probe:
        def probe() -> tuple[str, str]:
            s = sizer()
            return (SKIP, s) if isinstance(s, str) else run(s)
        return probe

    out: list[tuple[str, Probe]] = []
    if ladder:
        out += _ladder_probes(client, model, context, ladder_max, sized, salt)
    if skip_tools:
        out.append(("tool-prefill", lambda: (SKIP, "--skip-tools")))
    elif context is None:
        out.append(("tool-prefill", lambda: (SKIP, "serving context unknown; pass --context N")))
    else:
        size = max(256, min(tool_prefill_tokens, int(FILL * context) - ANSWER_TOKENS, MAX_PROBE_TOKENS))
        out.append(("tool-prefill", sized(lambda s: tool_prefill(client, model, size, s, salt()))))
    if probes:
        out.append(("agent", (lambda: (SKIP, "--skip-tools")) if skip_tools else (lambda: agent_probe(client, model))))
        out.append(("coding", lambda: coding_probe(client, model)))
        out.append(("reasoning", lambda: reasoning_probe(client, model)))
    return LadderPlan(tuple(out))


def _ladder_probes(client: OpenAIClient, model: str, context: int | None, ladder_max: int | None,
                   sized: Callable[[Callable[[Sizer], tuple[str, str]]], Probe],
                   salt: Callable[[], str]) -> list[tuple[str, Probe]]:
    if context is None:
        return [("needle-ladder", lambda: (SKIP, "serving context unknown; pass --context N"))]
    lengths = rungs(context, ladder_max)
    if not lengths:
        return [("needle-ladder", lambda: (SKIP, f"context {context} too small for a needle"))]
    results: dict[int, str] = {}

    def rung(tokens: int) -> Probe:
        def run(s: Sizer) -> tuple[str, str]:
            status, detail = needle_rung(client, model, tokens, s, salt())
            results[tokens] = status
            return status, detail
        return sized(run)

    def summary() -> tuple[str, str]:
        passed = [n for n in lengths if results.get(n) == PASS]
        if not results:
            return SKIP, "no rung ran"
        best = max(passed, default=0)
        status = PASS if len(passed) == len(lengths) else FAIL
        return status, (f"largest passing length {best} tokens; {len(passed)}/{len(lengths)} rungs green "
                        f"(top rung {lengths[-1]} of a {context}-token context)")

    return [*((f"needle-{n}", rung(n)) for n in lengths), ("needle-ladder", summary)]


def _clip(text: str, width: int = 60) -> str:
    return text.strip()[:width]


__all__ = ["LADDER_TOKENS", "MAX_CHARS_PER_TOKEN", "MAX_PROBE_TOKENS", "TOOL_PREFILL_TOKENS", "LadderPlan", "Sizer", "agent_probe",
           "coding_probe", "needle_rung", "plan", "reasoning_probe", "rungs", "tool_prefill"]
