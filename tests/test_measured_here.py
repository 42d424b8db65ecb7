"""The Loop closes: two equal receipts of a shape, a promotion, and the next pull and kv-calc of that
repo on that rig are priced from the measurement (``exact (measured here)``), not predicted."""

from __future__ import annotations

import json
from pathlib import Path

from club3090 import cli
from club3090.catalog import load_catalog
from tests.fixtures_path import fixture_path

REPO = "Qwen/Qwen3-8B"
GIB = 2**30


def run(argv: list[str], capsys) -> tuple[int, dict]:
    code = cli.main(argv)
    out = capsys.readouterr().out
    return code, json.loads(out)


def measure_and_promote(tmp_path: Path, capsys, shape: dict) -> dict:
    """Two boots of ``shape`` that printed the same numbers, ingested and promoted. The log is a real
    v0.6.4 start-up; its utilisation line is set to the shape's, as if those boots had used it (the
    log's own line outranks ``--arg``)."""
    args = [f"--arg={key}={value}" for key, value in shape.items()]
    text = fixture_path("logs", "startup_v064_profiling.log").read_text()
    text = text.replace("gpu_memory_utilization (0.90)", f"gpu_memory_utilization ({shape['gpu_memory_utilization']:.2f})")
    for name in ("a.log", "b.log"):
        log = tmp_path / name
        log.write_text(text + f"INFO boot {name}\n")
        code, _ = run(["calibrate", str(log), "--gpus", "1x3090", "--save", "--json", *args], capsys)
        assert code == 0
    code, listing = run(["loop", "ingest", str(tmp_path), "--json"], capsys)
    (group,) = [g for g in listing["groups"] if g["kind"] == "receipts"]
    assert code == 0 and group["state"] == "validated"
    code, promoted = run(["loop", "promote", group["id"], "--json"], capsys)
    assert code == 0
    return promoted["entry"]


def test_a_promoted_measurement_prices_the_next_pull_and_kv_calc(fake_hub, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("HF_ENDPOINT", fake_hub.url)
    fake_hub.add_fixture("Qwen--Qwen3-8B")
    pull = ["pull", REPO, "--profile-like", "vllm/minimal", "--gpus", "1x3090", "--dry-run", "--json"]
    before_code, before = run(pull, capsys)
    assert before["confidence"] == "estimated-lower-bound" and "measured-here" not in before["notice_codes"]
    fit, settings = before["fit"], before["fit"]["settings"]
    kv_format = load_catalog().kv_formats.get(settings["kv_cache_dtype"])
    shape = {"model": REPO, "max_model_len": fit["max_model_len"], "tensor_parallel_size": 1,
             "gpu_memory_utilization": settings["mem_util"],
             "kv_cache_dtype": (kv_format.vllm_arg if kv_format else settings["kv_cache_dtype"]) or "auto"}
    entry = measure_and_promote(tmp_path, capsys, shape)
    measured_pool = entry["measured"]["available_kv_cache_gib"]

    code, after = run(pull, capsys)
    assert after["confidence"] == "exact" and "measured-here" in after["notice_codes"]
    assert abs(after["fit"]["per_gpu"]["kv_pool_bytes"] / GIB - measured_pool) < 0.01   # the receipt's rounding
    assert after["fit"]["kv_cache_tokens"] == entry["measured"]["num_gpu_blocks"] * after["fit"]["block_size"] \
        or after["fit"]["num_blocks"] == entry["measured"]["num_gpu_blocks"]
    assert after["fit"]["error_band_bytes"] <= 0.01 * GIB < before["fit"]["error_band_bytes"]
    assert code in (0, 2, 3) and before_code in (0, 2, 3)
    cli.main(pull[:-1])
    assert "exact (measured here)" in capsys.readouterr().out

    kv = ["kv-calc", REPO, "--gpus", "1x3090", "--max-model-len", str(fit["max_model_len"]),
          "--mem-util", str(settings["mem_util"]), "--kv-cache-dtype", settings["kv_cache_dtype"], "--json"]
    code, priced = run(kv, capsys)
    assert priced["confidence"] == "exact" and any("measured here" in n for n in priced["notes"])
    assert abs(priced["per_gpu"]["kv_pool_bytes"] / GIB - measured_pool) < 0.01


def test_another_shape_is_still_predicted(fake_hub, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("HF_ENDPOINT", fake_hub.url)
    fake_hub.add_fixture("Qwen--Qwen3-8B")
    measure_and_promote(tmp_path, capsys, {"model": REPO, "max_model_len": 1234, "tensor_parallel_size": 1,
                                           "gpu_memory_utilization": 0.5})
    _, result = run(["pull", REPO, "--profile-like", "vllm/minimal", "--gpus", "1x3090", "--dry-run", "--json"],
                       capsys)
    assert result["confidence"] == "estimated-lower-bound" and "measured-here" not in result["notice_codes"]


def test_kv_calc_defaults_do_not_match_a_measurement_of_another_context(fake_hub, monkeypatch, tmp_path, capsys):
    """An unset --max-model-len is vLLM's default, a definite value: it must not match any context."""
    monkeypatch.setenv("HF_ENDPOINT", fake_hub.url)
    fake_hub.add_fixture("Qwen--Qwen3-8B")
    measure_and_promote(tmp_path, capsys, {"model": REPO, "max_model_len": 1234, "tensor_parallel_size": 1,
                                           "gpu_memory_utilization": 0.9})
    _, priced = run(["kv-calc", REPO, "--gpus", "1x3090", "--json"], capsys)
    assert priced["confidence"] != "exact" and not any("measured here" in n for n in priced["notes"])
