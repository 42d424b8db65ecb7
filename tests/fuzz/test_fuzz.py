"""Seeded, bounded fuzzing of every parser of untrusted bytes; 0 unexpected exceptions.

Targets: safetensors headers (``model.safetensors``), ``config.json`` (``parse_json_capped`` +
``model.architecture.parse_config``, then the fit engine on whatever parsed), repo ids and
revisions (``model.repo_id``, plus the pull folder built from a valid id) and chat SSE streams
(``edges.openai_client.parse_sse_body``). The only exceptions allowed are the documented ones:
``InputError`` from the parsers, an ``Unpriceable`` value from the fit engine.

The default suite runs ``DEFAULT_CASES`` (5,000) cases per target with the fixed seed ``SEED``,
then ``RANDOM_CASES`` more with one random seed drawn per run; a failure names the seed and the
case index, so ``CLUB3090_FUZZ_SEED`` reproduces it (for either part). The other targets (GGUF
headers, vLLM start-up logs, OpenAI answers) are in ``test_parsers.py`` and share this runner.
For a long local run::

    CLUB3090_FUZZ_CASES=200000 CLUB3090_FUZZ_SEED=7 pytest tests/fuzz -q
"""

from __future__ import annotations

import json
import os
import random
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

from club3090.edges.download import pull_dir, pulls_root
from club3090.edges.openai_client import parse_sse_body
from club3090.errors import InputError
from club3090.fit.memory import ServeShape, Unpriceable, predict
from club3090.model.architecture import SIGNED_DIMENSIONS, parse_config
from club3090.model.budgets import parse_json_capped
from club3090.model.repo_id import repo_id_problem, revision_problem, source_problem
from club3090.model.safetensors import DTYPE_BITS, MAX_U64, PREFIX_BYTES, header_length, parse_header
from club3090.model.vision import VISION_SIZE_KEYS
from tests.fixtures_path import FIXTURES

DEFAULT_CASES = 5000
CASES = int(os.environ.get("CLUB3090_FUZZ_CASES") or DEFAULT_CASES)
SEED = int(os.environ.get("CLUB3090_FUZZ_SEED") or 20261201)
RANDOM_CASES = int(os.environ.get("CLUB3090_FUZZ_RANDOM_CASES") or 1000)
RANDOM_SEED = random.SystemRandom().randrange(2**32)    # one per run: new inputs every CI run
SHARES = {"repo_id": 0.2}  # the cheap checks run a share of CASES; every parser target runs CASES
PREDICT_EVERY = 4           # the fit engine is the slow part: price every 4th parsed config
GIB = 2**30

CONFIGS = [json.loads(p.read_text(encoding="utf-8")) for p in sorted((FIXTURES / "hub").glob("*/config.json"))]


def cases(target: str) -> int:
    return max(1, int(CASES * SHARES.get(target, 1.0)))


def run_cases(target: str, one: Callable[[random.Random], None]) -> int:
    """``cases(target)`` inputs from the fixed seed, then ``RANDOM_CASES`` from this run's random
    seed; returns how many ran. A failure names the seed that reproduces it."""
    ran = 0
    for seed, count in ((SEED, cases(target)), (RANDOM_SEED, RANDOM_CASES)):
        rng = random.Random(f"{seed}:{target}")
        for index in range(count):
            state = rng.getstate()
            try:
                one(rng)
            except Exception as exc:  # an undocumented exception (or a broken property): name the case
                rng.setstate(state)
                raise AssertionError(f"{target} case {index} (CLUB3090_FUZZ_SEED={seed} reproduces it): "
                                     f"{type(exc).__name__}: {str(exc)[:300]}") from exc
            ran += 1
    return ran


# --------------------------------------------------------------------------------------------
# random values
# --------------------------------------------------------------------------------------------
INTERESTING_INTS = [0, 1, -1, 2, 7, 8, 64, 128, 255, 256, 4096, 2**31 - 1, 2**31, 2**32, 2**53, 2**63,
                    MAX_U64, MAX_U64 + 1, -(2**63), 10**30]


def any_int(rng: random.Random) -> int:
    return rng.choice(INTERESTING_INTS) if rng.random() < 0.6 else rng.randint(-10**6, 10**6)


def any_scalar(rng: random.Random) -> Any:
    pick = rng.randrange(9)
    return [lambda: any_int(rng), lambda: rng.uniform(-1e6, 1e6), lambda: float("inf"), lambda: None,
            lambda: True, lambda: rng.choice(["", "x", "-8", "1e9", "bfloat16", "\x1b[2J", "٣"]),
            lambda: [any_int(rng)], lambda: {"a": any_int(rng)}, lambda: -rng.randint(1, 4096)][pick]()


def any_json(rng: random.Random, depth: int = 0) -> Any:
    if depth > 3 or rng.random() < 0.5:
        return any_scalar(rng)
    if rng.random() < 0.5:
        return [any_json(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {rng.choice(["a", "dtype", "shape", "data_offsets", "__metadata__", "x"]): any_json(rng, depth + 1)
            for _ in range(rng.randrange(4))}


def mutate_bytes(rng: random.Random, raw: bytes) -> bytes:
    data = bytearray(raw)
    for _ in range(rng.randint(1, 6)):
        op = rng.randrange(4)
        pos = rng.randrange(len(data) + 1)
        if op == 0 and data:
            data[min(pos, len(data) - 1)] = rng.randrange(256)
        elif op == 1:
            data[pos:pos] = bytes(rng.choice(b'{}[]",:0123456789-eE.\\ \x00\xff') for _ in range(rng.randint(1, 4)))
        elif op == 2 and data:
            del data[pos:pos + rng.randint(1, 8)]
        else:
            data[pos:pos] = data[: rng.randint(0, 16)]
    return bytes(data)


# --------------------------------------------------------------------------------------------
# safetensors headers
# --------------------------------------------------------------------------------------------
def valid_header(rng: random.Random) -> tuple[dict[str, Any], int]:
    doc: dict[str, Any] = {}
    offset = 0
    for i in range(rng.randint(0, 6)):
        dtype = rng.choice(sorted(DTYPE_BITS))
        shape = [rng.randint(0, 8) for _ in range(rng.randint(0, 3))]
        elements = 1
        for d in shape:
            elements *= d
        size = -(-elements * DTYPE_BITS[dtype] // 8)
        doc[f"t{i}"] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    if rng.random() < 0.3:
        doc["__metadata__"] = {"format": "pt"}
    return doc, offset


def header_case(rng: random.Random) -> None:
    doc, data_len = valid_header(rng)
    kind = rng.randrange(4)
    if kind == 1 and doc:                      # a field replaced by anything
        entry = doc[rng.choice(sorted(doc))]
        if isinstance(entry, dict) and entry:
            entry[rng.choice(sorted(entry))] = any_json(rng)
    elif kind == 2:                            # a whole random document
        doc = any_json(rng) if rng.random() < 0.7 else {"t": any_json(rng)}
    raw = json.dumps(doc).encode()
    if kind == 3:
        raw = mutate_bytes(rng, raw)
    declared = len(raw) if rng.random() < 0.8 else rng.choice([0, 1, len(raw) + 1, 2**63, any_int(rng) % 2**64])
    prefix = struct.pack("<Q", declared % 2**64)
    file_size = PREFIX_BYTES + len(raw) + data_len if rng.random() < 0.8 else rng.randint(0, 10**6)
    try:
        n = header_length(prefix, file="fuzz")
        header = parse_header(raw[:n], file="fuzz", file_size=file_size if rng.random() < 0.7 else None)
    except InputError:
        return
    assert header.data_bytes >= 0 and all(t.begin <= t.end for t in header.tensors.values())


def test_fuzz_safetensors_headers() -> None:
    assert run_cases("safetensors", header_case) >= 5000


# --------------------------------------------------------------------------------------------
# config.json
# --------------------------------------------------------------------------------------------
SIGNED = sorted(SIGNED_DIMENSIONS)


def mutate_config(rng: random.Random, config: Any) -> Any:
    config = json.loads(json.dumps(config))
    target = config.get("text_config") if isinstance(config.get("text_config"), dict) and rng.random() < 0.5 \
        else config
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(6)
        if op == 5:                                   # the vision tower: under the same bounds (BUG-1)
            tower = config.setdefault("vision_config", {}) if isinstance(config.get("vision_config"), dict) \
                or "vision_config" not in config else {}
            tower[rng.choice([*VISION_SIZE_KEYS, "mlp_ratio"])] = rng.choice([1e30, 1e308, -1.5, any_scalar(rng)])
        elif op == 0:
            target[rng.choice(SIGNED)] = any_scalar(rng)
        elif op == 1 and target:
            target[rng.choice(sorted(target))] = any_scalar(rng)
        elif op == 2:
            target["layer_types"] = [rng.choice(["full_attention", "sliding_attention", "linear_attention",
                                                 "mamba", "x", 3]) for _ in range(rng.randint(0, 70))]
        elif op == 3:
            target[rng.choice(["rope_scaling", "quantization_config", "architectures", "model_type",
                               "hybrid_override_pattern", "no_rope_layers"])] = any_json(rng)
        else:
            target.pop(rng.choice(sorted(target)), None) if target else None
    return config


def config_case(rng: random.Random, index: list[int]) -> None:
    config = mutate_config(rng, rng.choice(CONFIGS))
    raw = json.dumps(config).encode()
    if rng.random() < 0.15:
        raw = mutate_bytes(rng, raw)
    try:
        parsed = parse_json_capped(raw, name="config.json")
    except InputError:
        return
    arch = parse_config(parsed)
    index[0] += 1
    if arch.unpriceable_reason or index[0] % PREDICT_EVERY:
        return
    result = predict(arch, weights_bytes=rng.choice([GIB, 8 * GIB]), gpu_memory_bytes=[24 * GIB],
                     shape=ServeShape(max_model_len=rng.choice([None, 4096, 32768])))
    if isinstance(result, Unpriceable):
        return
    assert result.kv_bytes_per_token >= 0 and result.num_blocks >= 0 and result.kv_cache_tokens >= 0
    assert result.bytes_per_block >= 0 and result.state_bytes_per_request >= 0


def test_fuzz_config_json() -> None:
    parsed = [0]
    run_cases("config", lambda rng: config_case(rng, parsed))
    assert parsed[0] > cases("config") // 2          # most mutations still parse: the engine was reached


# --------------------------------------------------------------------------------------------
# repo ids and revisions
# --------------------------------------------------------------------------------------------
ALPHABET = "abcXYZ019_.-/@~^:?*[]\\ \t\n\r\x00\x1b\x7f\x85\u2028\u202eé日"


def repo_id_case(rng: random.Random, root: Path) -> None:
    pick = rng.random()
    if pick < 0.4:
        text = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 40)))
    elif pick < 0.8:
        base = rng.choice(["Qwen/Qwen3-0.6B", "a/b", "org/name", "coll/a-b", "x" * 96 + "/y"])
        text = mutate_bytes(rng, base.encode()).decode("utf-8", "replace")
    else:
        text = "".join(rng.choice("ab.-_/") for _ in range(rng.randint(1, 300)))
    for check in (repo_id_problem, revision_problem, source_problem):
        verdict = check(text)
        assert verdict is None or isinstance(verdict, str)
    if repo_id_problem(text) is None:
        assert text.count("/") == 1 and ".." not in text and len(text) <= 193 and text.isascii()
        assert text.isprintable() and " " not in text
        folder = pull_dir(root, text)
        assert folder.parent == pulls_root(root) and folder.name not in ("", ".", "..")
    if revision_problem(text) is None:
        assert ".." not in text and text.isprintable() and text.split("/")[0] not in ("", ".")


def test_fuzz_repo_ids_and_revisions(tmp_path: Path) -> None:
    run_cases("repo_id", lambda rng: repo_id_case(rng, tmp_path))


def test_distinct_valid_ids_get_distinct_folders(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    seen: dict[Path, str] = {}
    for _ in range(cases("repo_id")):
        text = "".join(rng.choice("ab-._") for _ in range(rng.randint(1, 4))) + "/" + \
            "".join(rng.choice("ab-._") for _ in range(rng.randint(1, 4)))
        if repo_id_problem(text) is not None:
            continue
        folder = pull_dir(tmp_path, text)
        assert seen.setdefault(folder, text) == text, (text, seen[folder])


# --------------------------------------------------------------------------------------------
# SSE chat streams (read-only use of the OpenAI client's parser)
# --------------------------------------------------------------------------------------------
def sse_event(rng: random.Random) -> bytes:
    pick = rng.randrange(6)
    if pick == 0:
        payload: Any = {"id": "x", "choices": [{"delta": {"content": "hi"}, "finish_reason": None}]}
    elif pick == 1:
        payload = {"choices": [{"delta": {"tool_calls": [{"index": any_scalar(rng),
                                                          "function": any_json(rng)}]}}]}
    elif pick == 2:
        payload = any_json(rng)
    elif pick == 3:
        return b"data: [DONE]"
    elif pick == 4:
        depth = rng.choice([10, 100, 500])
        return b"data: " + b"[" * depth + b"]" * depth
    else:
        return bytes(rng.randrange(256) for _ in range(rng.randint(0, 30)))
    return b"data: " + json.dumps(payload).encode()


def sse_case(rng: random.Random) -> None:
    body = b"\n\n".join(sse_event(rng) for _ in range(rng.randint(0, 8)))
    if rng.random() < 0.2:
        body = mutate_bytes(rng, body)
    parser = parse_sse_body(body)
    assert parser.chunks >= parser.token_chunks >= 0


def test_fuzz_sse_streams() -> None:
    run_cases("sse", sse_case)


def test_sse_event_nested_past_the_recursion_limit() -> None:
    """An event nested past Python's recursion limit is a malformed event, not a RecursionError."""
    depth = 100_000
    parser = parse_sse_body(b"data: " + b"[" * depth + b"]" * depth + b"\n\ndata: [DONE]\n")
    assert parser.malformed is not None and parser.done


def test_fuzz_case_budget_meets_the_ci_floor() -> None:
    assert CASES >= 5000 and RANDOM_CASES >= 1 and all(cases(t) >= 5000 for t in ("safetensors", "config", "sse"))
