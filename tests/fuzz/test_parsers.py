"""Property fuzzing of the parsers added by hardening round 3: GGUF headers (``model.gguf`` +
``model.gguf_model`` + the llama.cpp KV model), vLLM start-up logs (``reports.vllm_log.parse_startup``,
its public API, then the receipt's number bounds) and OpenAI answers (a whole chat completion
through ``OpenAIClient.chat``). Same runner and seeds as ``test_fuzz.py``: ``CASES`` inputs per
target from the fixed seed plus ``RANDOM_CASES`` from one random seed; 0 unexpected exceptions.
"""

from __future__ import annotations

import json
import math
import random
from typing import Any

import pytest

from club3090.edges.http_transport import HttpResponse
from club3090.edges.openai_client import MAX_COUNT, ChatResult, OpenAIClient, ToolCall
from club3090.errors import InputError
from club3090.fit.llamacpp import LlamaCppArgs, kv_cache
from club3090.model.gguf import parse_header as parse_gguf
from club3090.model.gguf_model import from_files
from club3090.outcome import Outcome
from club3090.reports.receipt import MEASURED_TERMS, finite_log, number_problem, validate_receipt
from club3090.reports.vllm_log import parse_startup
from tests.fixtures_path import FIXTURES
from tests.fuzz.test_fuzz import any_json, any_scalar, cases, mutate_bytes, run_cases

# --------------------------------------------------------------------------------------------
# GGUF headers
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gguf_bases(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[bytes, int]]:
    from tests.gguf_fixtures import Q, header_only

    folder = tmp_path_factory.mktemp("gguf")
    bases = []
    for i, (arch, heads, kv) in enumerate([("llama", 8, 2), ("qwen2", 4, 4), ("gemma2", 8, 4)]):
        meta = {f"{arch}.block_count": 2, f"{arch}.embedding_length": 256, f"{arch}.attention.head_count": heads,
                f"{arch}.attention.head_count_kv": kv, f"{arch}.feed_forward_length": 512,
                f"{arch}.context_length": 4096}
        tensors = [("token_embd.weight", (256, 300), Q.F16), ("blk.0.attn_q.weight", (256, 256), Q.Q8_0),
                   ("blk.1.attn_q.weight", (256, 256), Q.Q4_0), ("output.weight", (256, 300), Q.F16)]
        bases.append(header_only(arch, meta, tensors, folder / f"m{i}.gguf"))
    return bases


def gguf_case(rng: random.Random, bases: list[tuple[bytes, int]], parsed: list[int]) -> None:
    header, size = rng.choice(bases)
    data = mutate_bytes(rng, header) if rng.random() < 0.4 else header
    for _ in range(rng.randint(0, 3)):           # a 32-bit word rewritten: a head count, a length, a type, a dim
        pos = rng.randrange(24, max(25, len(data) - 4))
        word = rng.choice([0, 1, 2, 3, 0xFFFFFFFF, 2**31, 2**16, rng.randrange(2**32)])
        data = data[:pos] + word.to_bytes(4, "little") + data[pos + 4:]
    try:
        model = from_files([parse_gguf(data, file="fuzz.gguf", file_size=rng.choice([size, len(data), None]))])
    except InputError:
        return
    parsed[0] += 1
    assert model.n_layer >= 0 and model.weights_bytes >= 0 and any(model.n_head) and any(model.n_head_kv)
    cache = kv_cache(model, LlamaCppArgs(ctx_size=rng.choice([512, 4096, 131072]), parallel=rng.choice([1, 4])))
    if hasattr(cache, "total_bytes"):
        assert cache.total_bytes >= 0


def test_fuzz_gguf_headers(gguf_bases: list[tuple[bytes, int]]) -> None:
    parsed = [0]
    assert run_cases("gguf", lambda rng: gguf_case(rng, gguf_bases, parsed)) >= 5000
    assert parsed[0] > cases("gguf") // 10        # enough mutations still parse: the KV model was reached


# --------------------------------------------------------------------------------------------
# vLLM start-up logs
# --------------------------------------------------------------------------------------------
LOGS = [p.read_text(encoding="utf-8") for p in sorted((FIXTURES / "logs").glob("*.log"))]
HOSTILE_NUMBERS = ["9" * 400, "1" * 40, "0", "-1", "1e999", "nan", "inf", "4,294,967,296", "1.5.5", "٣"]
HOSTILE_LINES = ["\x1b[31mERROR\x1b[0m " + "a." * 200, "(" * 300, "non-default args: {" + "[" * 200,
                 "GPU KV cache size: " + "9" * 400 + " tokens", "Maximum concurrency for 1 tokens per request: 1e9x",
                 "Model loading took " + "9" * 330 + " GiB and 1e308 seconds", "\x00\xff" * 10]


def mutate_log(rng: random.Random, text: str) -> str:
    lines = text.splitlines()
    for _ in range(rng.randint(1, 5)):
        op = rng.randrange(5)
        at = rng.randrange(len(lines) + 1)
        if op == 0 and lines:                     # a number in a real line replaced
            line = lines[min(at, len(lines) - 1)]
            digits = [i for i, c in enumerate(line) if c.isdigit()]
            if digits:
                i = rng.choice(digits)
                lines[min(at, len(lines) - 1)] = line[:i] + rng.choice(HOSTILE_NUMBERS) + line[i + 1:]
        elif op == 1:
            lines.insert(at, rng.choice(HOSTILE_LINES))
        elif op == 2 and lines:                   # a line cut or doubled
            lines[min(at, len(lines) - 1)] = lines[min(at, len(lines) - 1)][: rng.randint(0, 80)] * rng.randint(1, 3)
        elif op == 3:
            lines.insert(at, "".join(chr(rng.randrange(32, 0x3000)) for _ in range(rng.randint(0, 60))))
        else:
            lines.insert(at, json.dumps(any_json(rng)))
    return "\n".join(lines)


def log_case(rng: random.Random) -> None:
    text = mutate_log(rng, rng.choice(LOGS))
    log = parse_startup(text)
    assert isinstance(log.args, dict) and isinstance(log.measured, dict)
    bounded = finite_log(log)
    receipt = {"schema": 1, "kind": "vllm-startup-receipt", "shape": {}, "source": {},
               "measured": {k: bounded.measured.get(k) for k in MEASURED_TERMS}}
    json.dumps(receipt, allow_nan=False)          # never Infinity or NaN once bounded
    for problem in validate_receipt(receipt, "fuzz"):
        assert "measured." in problem             # only a negative measurement is left to refuse
    for value in bounded.measured.values():
        assert number_problem(value) is None


def test_fuzz_vllm_startup_logs() -> None:
    assert LOGS and run_cases("vllm_log", log_case) >= 5000


# --------------------------------------------------------------------------------------------
# OpenAI answers (a whole, non-streamed chat completion)
# --------------------------------------------------------------------------------------------
def answer_doc(rng: random.Random) -> Any:
    message: dict[str, Any] = {"role": "assistant", "content": rng.choice(["hi", "", None, any_scalar(rng)])}
    if rng.random() < 0.5:
        message["tool_calls"] = rng.choice([
            [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}],
            [{"function": any_json(rng)}], any_scalar(rng), any_json(rng), "abc", 5, {"a": 1}])
    if rng.random() < 0.3:
        message["reasoning_content"] = any_scalar(rng)
    usage = {k: rng.choice([1, 0, -1, 10**400, 2**53, 2**53 + 1, 1e308, math.inf, "12", None, True])
             for k in ("prompt_tokens", "completion_tokens") if rng.random() < 0.8}
    doc: Any = {"choices": [{"index": 0, "message": message, "finish_reason": rng.choice(["stop", None, 3])}],
                "usage": usage}
    pick = rng.random()
    if pick < 0.15:
        doc = any_json(rng)
    elif pick < 0.25:
        doc["choices"] = rng.choice([[], [any_scalar(rng)], any_scalar(rng), [{"message": any_json(rng)}]])
    return doc


def openai_case(rng: random.Random) -> None:
    raw = json.dumps(answer_doc(rng)).encode()
    if rng.random() < 0.15:
        raw = mutate_bytes(rng, raw)

    def http(method: str, url: str, body: Any, timeout: float, **_kw: Any) -> HttpResponse:
        return HttpResponse(200, raw)

    result = OpenAIClient("http://127.0.0.1:9/v1", http=http).chat({"model": "m", "messages": []})
    assert isinstance(result, ChatResult) and isinstance(result.content, str)
    assert all(isinstance(call, ToolCall) for call in result.tool_calls)
    for count in (result.completion_tokens, result.prompt_tokens):
        assert count is None or (type(count) is int and 0 <= count <= MAX_COUNT)


def test_fuzz_openai_answers() -> None:
    assert run_cases("openai", openai_case) >= 5000


def test_every_new_target_runs_the_ci_floor() -> None:
    assert all(cases(t) >= 5000 for t in ("gguf", "vllm_log", "openai")) and Outcome.OK
