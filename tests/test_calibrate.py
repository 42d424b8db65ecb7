"""``club3090 calibrate``: vLLM start-up logs into receipts, on the 23 recorded start-ups and real logs."""

from __future__ import annotations

import io
import json
import sys

import pytest

from club3090 import cli
from club3090.cli import exit_codes
from club3090.reports.receipt import build_receipt, validate_receipt
from club3090.reports.redact import Redactor
from club3090.reports.vllm_log import cpu_kv_cache_tokens, parse_startup, serving_shape
from tests.fixtures_path import fixture_path

CASES = json.loads(fixture_path("calibration", "vllm_startup_cases.json").read_text())
CONFIGS = json.loads(fixture_path("calibration", "vllm_startup_configs.json").read_text())
TERMS = ("model_loading_gib", "available_kv_cache_gib", "gpu_kv_cache_tokens", "num_gpu_blocks", "max_concurrency",
         "max_concurrency_for_len", "error")
# the phrase of each term's log line; a case whose quote holds it must yield the term
MARKERS = {"model_loading_gib": "Model loading took", "available_kv_cache_gib": "KV cache memory",
           "gpu_kv_cache_tokens": "tokens", "num_gpu_blocks": "# GPU blocks", "max_concurrency": "Maximum concurrency",
           "max_concurrency_for_len": "Maximum concurrency", "error": "ValueError"}
# the cases whose quote holds log lines (the others are transcriptions: markdown tables, parse_log
# records); counted from the fixture itself so a case added with log lines is parsed too
LINE_PHRASES = ("Model loading took", "GPU KV cache size", "Available KV cache memory", "# GPU blocks",
                "Maximum concurrency", "max seq len", "Actual usage is")
# every recorded set: the first collection and each later round (``vllm_startup_cases_r5.json``, ...)
CASE_FILES = sorted(fixture_path("calibration").glob("vllm_startup_cases*.json"))


def _holds_lines(case: dict) -> bool:
    return any(p in q for q in case["quote"] for p in LINE_PHRASES)
# what the log parser classifies; a start that failed for another reason (a download, a kernel
# build, a busy GPU) is recorded by its own name and not compared
PARSER_OUTCOMES = {"ok", "kv_error_max_len_too_large", "kv_error_needed_gt_available",
                   "kv_error_no_available_memory"}


@pytest.mark.parametrize("cases_file", CASE_FILES, ids=lambda p: p.name)
def test_every_recorded_startup_whose_quote_holds_the_lines_parses_to_its_numbers(cases_file):
    cases = json.loads(cases_file.read_text())
    parsed = 0
    for case in cases:
        text = "\n".join(case["quote"])
        log = parse_startup(text)
        if not log.measured:
            assert "Model loading took" not in text and "GPU KV cache size" not in text, case["id"]
            continue
        parsed += 1
        recorded = case["measured"]
        for term in TERMS:
            got = log.measured.get(term)
            if term == "error" and isinstance(recorded[term], str):
                continue            # recorded as the message text, not as the parser's structure
            if any(str(d).startswith(term) for d in recorded.get("derived_fields") or ()):
                continue            # computed by the case's author from other lines (V0: blocks x 16)
            if any(str(d).startswith(term) for d in recorded.get("unrecorded_fields") or ()):
                continue            # printed only for some ranks (Ray deduplicated the limiting one): left null
            if got is not None:
                assert got == recorded[term], (case["id"], term, got, recorded[term])
            elif recorded.get(term) is not None and term != "num_gpu_blocks":
                assert MARKERS[term] not in text, (case["id"], term)
        if recorded["startup_outcome"] in PARSER_OUTCOMES:
            assert log.startup_outcome == recorded["startup_outcome"], case["id"]
        elif recorded["startup_outcome"].startswith("oom"):
            assert log.startup_outcome == "oom", case["id"]
    assert parsed == sum(1 for c in cases if _holds_lines(c)) >= 18


@pytest.mark.parametrize("name, expected", [
    ("startup_v05_weights.log", {"model_loading_gib": 2.3463, "num_gpu_blocks": 22982}),
    ("startup_v064_profiling.log", {"memory_budget_gib": 14.2, "profile_weights_gib": 7.51, "non_torch_gib": 0.39,
                                    "activation_peak_gib": 2.53, "available_kv_cache_gib": 3.76,
                                    "num_gpu_blocks": 3852, "max_concurrency_for_len": 40000,
                                    "max_concurrency": 1.54}),
    ("startup_v1_nondefault_args.log", {"gpu_kv_cache_tokens": 620944, "max_concurrency_for_len": 262144,
                                        "max_concurrency": 2.37}),
])
def test_each_log_format_yields_its_terms(name, expected):
    log = parse_startup(fixture_path("logs", name).read_text())
    assert log.measured == expected


# the breakdown forms, as vLLM's format strings print them (the 0.27.1 line is quoted from the
# club-3090 PR #1139 case of the calibration fixture)
V1_08_PROFILING = ("INFO 03-14 09:13:07 [gpu_worker.py:227] Memory profiling takes 11.85 seconds. Total non KV cache "
                   "memory: 16.51GiB; torch peak memory increase: 1.21GiB; non-torch forward increase memory: "
                   "0.31GiB; weights memory: 14.99GiB.")
V1_011_USAGE = ("(Worker_TP1 pid=1806414) INFO 10-23 15:14:56 [gpu_worker.py:391] Free memory on device "
                "(139.21/139.81 GiB) on startup. Desired GPU memory utilization is (0.9, 125.83 GiB). Actual usage "
                "is 74.28 GiB for weight, 5.58 GiB for peak activation, 1.38 GiB for non-torch memory, and 2.37 GiB "
                "for CUDAGraph memory. Replace gpu_memory_utilization config with `--kv-cache-memory=45175492096` "
                "to fit into requested memory, or `--kv-cache-memory=59540753920` to fully utilize gpu memory. "
                "Current kv cache memory in use is 47878721024 bytes.")


def _case_quote(case_id):
    return "\n".join(next(c for c in CASES if c["id"] == case_id)["quote"])


def test_each_breakdown_form_yields_separate_terms():
    v08 = parse_startup(V1_08_PROFILING).measured
    assert v08 == {"non_kv_gib": 16.51, "activation_peak_gib": 1.21, "non_torch_gib": 0.31,
                   "profile_weights_gib": 14.99}
    v011 = parse_startup(V1_011_USAGE)
    assert v011.gpu_total_memory_gib == 139.81 and serving_shape(v011)["gpu_memory_utilization"] == 0.9
    assert {k: round(v, 3) for k, v in v011.measured.items()} == {
        "free_memory_at_start_gib": 139.21, "memory_budget_gib": 125.83, "profile_weights_gib": 74.28,
        "activation_peak_gib": 5.58, "non_torch_gib": 1.38, "cudagraph_gib": 2.37, "kv_cache_in_use_gib": 44.591}
    assert v011.startup_outcome == "ok"
    newest = parse_startup(_case_quote("gh-club3090-pr1139-qwen38-27b-fp8-mtp-2gpu-v0271")
                           + "\nINFO Model loading took 14.95 GiB memory and 30.1 seconds")
    m = newest.measured
    assert (m["weights_plus_non_torch_gib"], m["activation_peak_gib"], m["cudagraph_gib"],
            m["cudagraph_estimate_gib"], m["kv_cache_in_use_gib"]) == (15.25, 1.66, 0.14, 0.2, 4.76)
    assert m["non_torch_gib"] == 0.3         # consumed - weights
    wrapped = parse_startup("Actual usage is 8.28 GiB for weight, 1.02 GiB for peak activation,\n"
                            "  -3.58 GiB for non-torch memory, and 0.68 GiB for CUDAGraph memory.").measured
    assert wrapped == {"profile_weights_gib": 8.28, "activation_peak_gib": 1.02, "non_torch_gib": -3.58,
                       "cudagraph_gib": 0.68}


def test_the_profiling_samplers_path_is_read_and_priced(tmp_path):
    """vLLM logs which top-k / top-p path its sampler takes (``topk_topp_sampler.py``); a receipt
    prices the one the log names: the kernel path has no full sort of the logits."""
    kernel = "INFO 09-22 20:31:06 [topk_topp_sampler.py:49] Using FlashInfer for top-p & top-k sampling."
    native = ("WARNING 02-26 18:56:48 [topk_topp_sampler.py:60] FlashInfer is not available. Falling back to the "
              "PyTorch-native implementation of top-p & top-k sampling. For the best performance, please install "
              "FlashInfer.")
    assert parse_startup(kernel).sampler == "FlashInfer" and parse_startup(native).sampler == "PyTorch-native"
    assert parse_startup("INFO Available KV cache memory: 1.00 GiB").sampler is None
    case = infsim_case()
    config = CONFIGS[case["hf_repo"]]
    base = "\n".join(case["quote"])
    peaks = {}
    for name, line in (("kernel", kernel), ("native", native)):
        log = parse_startup(line + "\n" + base)
        receipt = build_receipt(log, log_bytes=b"", source_name=name, redactor=Redactor(), gpu_memory_gib=79.19,
                                config={k: v for k, v in config.items() if not k.startswith("config_")})
        peaks[name] = receipt["predicted"]["activation_peak_gib"]
    assert peaks["native"] > peaks["kernel"]


def test_the_v0_breakdowns_still_yield_their_terms():
    v063 = parse_startup("INFO worker.py:262] Memory profiling results: duration=3.2 seconds, total_gpu_memory="
                         "79.10GiB, initial_memory_usage=15.70GiB, peak_torch_memory=16.23GiB, "
                         "memory_usage_post_profile=15.89GiB, non_torch_memory=0.36GiB, kv_cache_size=54.62GiB, "
                         "gpu_memory_utilization=0.90.")
    assert v063.measured == {"non_torch_gib": 0.36, "available_kv_cache_gib": 54.62}
    assert v063.gpu_total_memory_gib == 79.10


def test_calibrate_reads_a_4_mib_adversarial_log_in_under_5_seconds(tmp_path, capsys):
    import time

    hostile = [
        "a" * 65_000,                                                   # one word run: (\\w+)= scans
        "x='" * 21_000,                                                  # unterminated quotes
        "Initializing a LLM engine (v0.1) with config: " + "k=" * 30_000,
        "non-default args: {" + "}" * 60_000 + " ",
        "Memory profiling results: " + "k" * 60_000,
        "1" * 65_000 + " GiB for peak actvation",                      # a figure before its label
        "Model loading took " + "9" * 65_000,
        "'k': '" * 10_000,
    ]
    lines = []
    while sum(len(x) + 1 for x in lines) < 4 * 2**20:
        lines.extend(hostile)
    log = tmp_path / "hostile.log"
    log.write_text("\n".join(lines) + "\nINFO Available KV cache memory: 1.00 GiB\n")
    assert log.stat().st_size >= 4 * 2**20
    started = time.perf_counter()
    code = cli.main(["calibrate", str(log), "--json"])
    elapsed = time.perf_counter() - started
    capsys.readouterr()
    assert code == 0 and elapsed < 5.0, elapsed


def test_the_engine_config_and_non_default_args_lines_give_the_shape():
    v0 = parse_startup(fixture_path("logs", "startup_v0_engine_config.log").read_text())
    assert v0.vllm_version == "0.6.4.post2.dev395+g02222a02.d20241217" and v0.engine == "v0"
    shape = serving_shape(v0)
    assert {k: shape[k] for k in ("dtype", "tensor_parallel_size", "pipeline_parallel_size", "max_model_len",
                                  "kv_cache_dtype", "enforce_eager")} == {
        "dtype": "float16", "tensor_parallel_size": 1, "pipeline_parallel_size": 1, "max_model_len": 2048,
        "kv_cache_dtype": "auto", "enforce_eager": True}
    v1 = serving_shape(parse_startup(fixture_path("logs", "startup_v1_nondefault_args.log").read_text()))
    assert (v1["quantization"], v1["tensor_parallel_size"], v1["kv_cache_dtype"], v1["max_model_len"],
            v1["max_num_seqs"]) == ("auto_round", 2, "fp8_e5m2", 262144, 2)
    profiling = parse_startup(fixture_path("logs", "startup_v064_profiling.log").read_text())
    assert profiling.gpu_total_memory_gib == 15.77 and serving_shape(profiling)["gpu_memory_utilization"] == 0.9


def test_errors_are_read_as_measurements():
    oom = parse_startup(fixture_path("logs", "oom_v1_wrapped.log").read_text())
    assert oom.measured["error"] == {"type": "cuda_oom", "attempted_alloc_gib": 2.5}
    assert oom.gpu_total_memory_gib == 79.25 and oom.startup_outcome == "oom"


# the line vLLM 0.32.0's CPU build logs for its KV pool (host memory, VLLM_CPU_KVCACHE_SPACE GiB)
CPU_POOL_LINE = ("(EngineCore pid=24018) INFO 12-02 03:22:12 [kv_cache_utils.py:2327] CPU KV cache size: "
                 "1,048,576 tokens, Maximum concurrency for 1,024 tokens per request: 1024.00x")


def test_the_cpu_builds_pool_is_read_as_a_cpu_pool():
    assert cpu_kv_cache_tokens(CPU_POOL_LINE) == 1_048_576
    assert cpu_kv_cache_tokens("GPU KV cache size: 1,048,576 tokens") is None
    log = parse_startup("INFO 12-02 03:12:05 [api_server.py:1] vLLM API server version 0.32.0\n" + CPU_POOL_LINE)
    assert log.device == "cpu" and log.startup_outcome == "ok"
    assert log.measured["cpu_kv_cache_tokens"] == 1_048_576 and "gpu_kv_cache_tokens" not in log.measured
    assert log.measured["max_concurrency"] == 1024.0
    # never compared with a GPU prediction, even with the model's config at hand
    receipt = build_receipt(log, log_bytes=CPU_POOL_LINE.encode(), source_name="cpu.log", redactor=Redactor(),
                            gpu_name="NVIDIA GeForce RTX 3090", gpu_memory_gib=24.0, gpu_count=1,
                            config={"architectures": ["LlamaForCausalLM"], "hidden_size": 256})
    assert receipt["shape"]["device"] == "cpu" and receipt["predicted"] is None and not receipt["term_error"]
    assert "CPU build" in receipt["prediction_note"]
    gpu = build_receipt(parse_startup("GPU KV cache size: 1,000 tokens"), log_bytes=b"", source_name="gpu.log",
                        redactor=Redactor())
    assert "device" not in gpu["shape"]


def test_a_negative_kv_reserve_is_the_logged_shortfall_and_a_valid_receipt():
    """vLLM's V0 worker logs budget - non-KV memory signed, then clamps the blocks at 0 (issue #13882's
    RTX 4060): the receipt keeps the shortfall; any other negative measurement is still refused."""
    case = next(c for f in CASE_FILES for c in json.loads(f.read_text()) if c["id"].startswith("r5-vllm-13882"))
    log = parse_startup("\n".join(case["quote"]))
    assert log.measured["available_kv_cache_gib"] == case["measured"]["available_kv_cache_gib"] == -1.05
    assert log.measured["num_gpu_blocks"] == 0
    receipt = build_receipt(log, log_bytes=b"", source_name="13882.log", redactor=Redactor())
    assert validate_receipt(receipt, "r") == []
    receipt["measured"]["model_loading_gib"] = -5.2
    assert validate_receipt(receipt, "r") == ["r: measured.model_loading_gib must be a non-negative finite number below 2^53"]


def run(argv, capsys, stdin=None, monkeypatch=None):
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin.encode())))
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def infsim_case():
    return next(c for c in CASES if c["id"] == "gh-infsim-qwen25-7b-v0110")


def test_calibrate_prices_the_same_shape_and_reports_the_per_term_error(tmp_path, capsys):
    case = infsim_case()
    log = tmp_path / "boot.log"
    log.write_text("\n".join(case["quote"]) + "\n")
    config = tmp_path / "config.json"
    config.write_text(json.dumps({k: v for k, v in CONFIGS[case["hf_repo"]].items() if not k.startswith("config_")}))
    code, out, _ = run(["calibrate", str(log), "--config", str(config), "--gpus", "80GiB", "--arg",
                        "vllm_version=0.11.0", "--json"], capsys)
    assert code == 0
    (receipt,) = json.loads(out)["receipts"]
    assert receipt["measured"]["gpu_kv_cache_tokens"] == 1053328
    assert receipt["shape"]["max_model_len"] == 8192 and receipt["shape"]["vllm_version"] == "0.11.0"
    assert receipt["shape_given"] == ["vllm_version"]
    predicted, errors = receipt["predicted"], receipt["term_error"]
    for term in ("available_kv_cache_gib", "gpu_kv_cache_tokens", "max_concurrency"):
        assert errors[term] == pytest.approx(predicted[term] - receipt["measured"][term], abs=1e-3)
    assert abs(errors["available_kv_cache_gib"]) < 1.0       # the same shape, priced from its own weights


def test_calibrate_a_folder_and_stdin(tmp_path, capsys, monkeypatch):
    code, out, _ = run(["calibrate", str(fixture_path("logs")), "--json"], capsys)
    doc = json.loads(out)
    assert code == 0 and len(doc["receipts"]) >= 10 and "SOURCE.md" not in json.dumps(doc["skipped"])
    text = fixture_path("logs", "startup_v064_profiling.log").read_text()
    code, out, _ = run(["calibrate", "-"], capsys, stdin=text, monkeypatch=monkeypatch)
    assert code == 0 and "num_gpu_blocks: 3852" in out and "gpu_memory_utilization=0.9" in out


def test_a_log_without_startup_lines_is_bad_input(tmp_path, capsys):
    empty = tmp_path / "x.log"
    empty.write_text("hello\nworld\n")
    code, _, err = run(["calibrate", str(empty)], capsys)
    assert code == exit_codes.DATAERR and "no vLLM start-up lines" in err
    code, _, err = run(["calibrate", str(tmp_path / "missing.log")], capsys)
    assert code == exit_codes.USAGE
    code, _, err = run(["calibrate", str(empty), "--arg", "nonsense=1"], capsys)
    assert code == exit_codes.USAGE


def test_receipts_are_redacted(tmp_path, capsys):
    home, host, token = "/home/alice", "gpubox-7", "hf_" + "aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dE3f"
    text = (f"(APIServer pid=1) INFO 06-01 09:20:16 [utils.py:278] non-default args: {{'model': "
            f"'{home}/models/secret-proj', 'max_model_len': 4096, 'api_key': '{token}'}}\n"
            f"INFO 06-01 09:22:30 [kv_cache_utils.py:1733] GPU KV cache size: 1,000 tokens on {host}\n")
    receipt = build_receipt(parse_startup(text), log_bytes=text.encode(), source_name="./runs/secret-proj/boot.log",
                            redactor=Redactor(home=home, user="alice", host=host, local_paths=["./runs/secret-proj"]))
    dumped = json.dumps(receipt)
    for planted in (home, "alice", host, token, "secret-proj"):
        assert planted not in dumped, planted
    assert receipt["measured"]["gpu_kv_cache_tokens"] == 1000


def test_save_keeps_receipts_in_the_overlay(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("CLUB3090_STATE_DIR", str(tmp_path / "state"))
    code, out, _ = run(["calibrate", str(fixture_path("logs", "startup_v05_weights.log")), "--save"], capsys)
    assert code == 0 and "saved" in out
    saved = list((tmp_path / "state" / "receipts").glob("*.json"))
    assert len(saved) == 1 and json.loads(saved[0].read_text())["measured"]["num_gpu_blocks"] == 22982


def test_kv_calc_calibration_scores_this_machines_receipts(tmp_path, capsys):
    """A saved receipt (a real start-up, priced with its config) becomes a row of kv-calc --calibration."""
    case = infsim_case()
    log = tmp_path / "boot.log"
    log.write_text("\n".join(case["quote"]) + "\n")
    config = tmp_path / "config.json"
    config.write_text(json.dumps({k: v for k, v in CONFIGS[case["hf_repo"]].items() if not k.startswith("config_")}))
    code, out, _ = run(["kv-calc", "--calibration", "--json"], capsys)
    assert json.loads(out)["local_receipts"] == []
    code, out, _ = run(["calibrate", str(log), "--config", str(config), "--gpus", "80GiB", "--arg",
                        "vllm_version=0.11.0", "--save", "--json"], capsys)
    (receipt,) = json.loads(out)["receipts"]
    code, out, _ = run(["kv-calc", "--calibration", "--json"], capsys)
    assert code == 0
    (row,) = json.loads(out)["local_receipts"]
    assert row["model"] == receipt["shape"]["model"] and row["max_model_len"] == 8192
    assert row["measured_kv_cache_gib"] == receipt["measured"]["available_kv_cache_gib"]
    assert row["kv_error_gib"] == receipt["term_error"]["available_kv_cache_gib"]
    _, text, _ = run(["kv-calc", "--calibration"], capsys)
    assert "This machine's receipts (club3090 calibrate --save, up): 1" in text


def test_the_cli_receipt_and_its_saved_copy_hide_every_planted_value(tmp_path, capsys, monkeypatch):
    """End to end: a log naming this machine's home, user and host, a token, a model folder outside
    home and a relative run folder; neither the printed receipt nor the overlay copy holds any."""
    import socket
    from pathlib import Path

    home = tmp_path / "home" / "alicex"
    home.mkdir(parents=True)
    for name, value in (("HOME", str(home)), ("USER", "alicex"), ("LOGNAME", "alicex")):
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(socket, "gethostname", lambda: "gpubox-77")
    monkeypatch.chdir(tmp_path)
    model = tmp_path / "work" / "client-acme" / "secret-model"
    model.mkdir(parents=True)
    token = "hf_" + "aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dE3f"
    (tmp_path / "runs" / "secret-proj").mkdir(parents=True)
    text = (f"(APIServer pid=1) INFO 06-01 09:20:16 [utils.py:278] non-default args: {{'model': '{model}', "
            f"'max_model_len': 4096, 'api_key': '{token}', 'download_dir': '{home}/cache'}}\n"
            "INFO 06-01 09:22:30 [kv_cache_utils.py:1733] GPU KV cache size: 1,000 tokens on gpubox-77 for alicex\n")
    (tmp_path / "runs" / "secret-proj" / "boot.log").write_text(text)
    planted = ("alicex", "gpubox-77", token, "secret-proj", "secret-model", "client-acme", str(home), str(tmp_path))
    for extra in ([], ["--arg", "model=acme/Widget-7B"]):
        code, out, _ = run(["calibrate", "runs/secret-proj/boot.log", "--save", "--json", *extra], capsys)
        doc = json.loads(out)
        written = out + "".join(Path(p).read_text() for p in doc["saved"])
        assert code == 0 and doc["receipts"][0]["measured"]["gpu_kv_cache_tokens"] == 1000
        for value in planted:
            assert value not in written.replace(json.dumps(doc["saved"])[1:-1], ""), (value, extra)
    # a model given for a log that names only a local folder is the receipt's identity
    assert doc["receipts"][0]["shape"]["model"] == "acme/Widget-7B" and doc["receipts"][0]["shape_given"] == ["model"]


def test_a_snapshot_in_the_hf_cache_is_its_repo():
    text = ("INFO 06-01 09:20:16 [utils.py:278] non-default args: {'model': "
            "'/home/u/.cache/huggingface/hub/models--acme--Widget-7B/snapshots/0123abcd', 'max_model_len': 4096}\n"
            "INFO 06-01 09:22:30 [kv_cache_utils.py:1733] GPU KV cache size: 1,000 tokens\n")
    assert serving_shape(parse_startup(text))["model"] == "acme/Widget-7B"
