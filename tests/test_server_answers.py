"""A hostile or broken OpenAI-compatible server gets a clean failed check, never exit 70 or a
memory blow-up (hardening round 3: BUG-4 prompt sizes clamped by our own limits, BUG-5 a
non-list ``tool_calls`` or a 400-digit token count)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from club3090.cli.exit_codes import exit_code
from club3090.edges.http_transport import HttpResponse
from club3090.edges.openai_client import OpenAIClient
from club3090.validate.bench import bench
from club3090.validate.ladder import MAX_CHARS_PER_TOKEN, MAX_PROBE_TOKENS
from club3090.validate.soak import SoakOptions, soak
from club3090.validate.stress import long_prompt, stress
from club3090.validate.verify import verify
from tests.fakeopenai import TickClock

HUGE = 10**400


class Scripted:
    """An ``Http`` that answers /v1/models with ``models`` and every chat with ``answer(body)``."""

    def __init__(self, models: Mapping[str, Any], answer: Callable[[Mapping[str, Any]], Mapping[str, Any]]) -> None:
        self.models, self.answer = models, answer
        self.sizes: list[int] = []

    def __call__(self, method: str, url: str, body: Any, timeout: float, *,
                 on_line: Callable[[bytes], None] | None = None, **_kw: Any) -> HttpResponse:
        if url.endswith("/models"):
            return HttpResponse(200, json.dumps(self.models).encode())
        self.sizes.append(sum(len(str(m.get("content", ""))) for m in body.get("messages", ())))
        doc = self.answer(body)
        if body.get("stream"):
            chunk = {"choices": [{"index": 0, "delta": doc["choices"][0]["message"],
                                  "finish_reason": doc["choices"][0].get("finish_reason")}]}
            events = [chunk, {"choices": [], "usage": doc.get("usage")}]
            text = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
            for line in text.encode().splitlines(keepends=True) if on_line is not None else ():
                on_line(line)   # as the real transport does: TTFT and decode rates get measured
            return HttpResponse(200, text.encode())
        return HttpResponse(200, json.dumps(doc).encode())


def _answer(message: Mapping[str, Any], usage: Mapping[str, Any]) -> Callable[[Mapping[str, Any]], Mapping[str, Any]]:
    return lambda _body: {"choices": [{"index": 0, "message": dict(message), "finish_reason": "stop"}],
                          "usage": dict(usage)}


def _client(http: Scripted) -> OpenAIClient:
    return OpenAIClient("http://127.0.0.1:9/v1", http=http, clock=TickClock(0.01))


# --- BUG-4: the long prompt is sized by our limits ---------------------------------------------
@pytest.mark.parametrize("context", [10**9, 2**53, HUGE])
def test_a_claimed_giant_context_and_token_ratio_cannot_size_a_giant_prompt(context: int) -> None:
    http = Scripted({"data": [{"id": "m", "max_model_len": context}]},
                    _answer({"role": "assistant", "content": "OK"}, {"prompt_tokens": 1, "completion_tokens": 1}))
    status, detail = long_prompt(_client(http), "m", _client(http).models().context("m") or context)
    limit = MAX_PROBE_TOKENS * MAX_CHARS_PER_TOKEN
    assert max(http.sizes) <= limit and status in ("FAIL", "fail", "SKIP", "skip", "PASS", "pass"), detail


def test_verify_stress_and_verify_full_stay_within_the_limit() -> None:
    http = Scripted({"data": [{"id": "m", "max_model_len": 10**12}]},
                    _answer({"role": "assistant", "content": "OK"}, {"prompt_tokens": 1, "completion_tokens": 1}))
    stress(_client(http), rounds=0, streams=1)
    verify(_client(http), full=True, skip_tools=True)
    assert max(http.sizes) <= MAX_PROBE_TOKENS * MAX_CHARS_PER_TOKEN


# --- BUG-5: malformed answers are failed checks --------------------------------------------------
MALFORMED = [
    ({"role": "assistant", "content": "hi", "tool_calls": 5}, {"completion_tokens": 10, "prompt_tokens": 3}),
    ({"role": "assistant", "content": "hi", "tool_calls": "abc"}, {"completion_tokens": 10}),
    ({"role": "assistant", "content": "hi", "tool_calls": {"a": 1}}, {"completion_tokens": 10}),
    ({"role": "assistant", "content": "hi"}, {"completion_tokens": HUGE, "prompt_tokens": HUGE}),
    ({"role": "assistant", "content": "hi"}, {"completion_tokens": 1e308, "prompt_tokens": -5}),
]


@pytest.mark.parametrize("message,usage", MALFORMED)
def test_bench_on_a_malformed_answer_is_clean(message: dict, usage: dict) -> None:  # type: ignore[type-arg]
    http = Scripted({"data": [{"id": "m"}]}, _answer(message, usage))
    report = bench(_client(http), runs=1, warmups=0, prefill=(512,))
    json.dumps(report.to_json(), allow_nan=False)
    assert exit_code(report.outcome) in (0, 1, 2)
    for run in report.runs:
        assert run.tokens is None or run.tokens <= 2**53


@pytest.mark.parametrize("message,usage", MALFORMED)
def test_soak_on_a_malformed_answer_is_clean(message: dict, usage: dict) -> None:  # type: ignore[type-arg]
    http = Scripted({"data": [{"id": "m"}]}, _answer(message, usage))
    report = soak(_client(http), SoakOptions(mode="quick", sessions=1, turns=2, probes=1))
    json.dumps(report.to_json(), allow_nan=False)


@pytest.mark.parametrize("message,usage", MALFORMED[:3])
def test_verify_tool_check_on_a_non_list_tool_calls_is_a_failed_check(message: dict, usage: dict) -> None:  # type: ignore[type-arg]
    http = Scripted({"data": [{"id": "m"}]}, _answer(message, usage))
    report = verify(_client(http))
    json.dumps(report.to_json(), allow_nan=False)
