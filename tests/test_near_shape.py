"""A receipt of a near shape on this rig corrects the next prediction by its measured residual, with
a stated band, for kv-calc, pull and fits; a far shape is untouched; the correction never raises
the KV pool past what the receipt's band guarantees (docs/DESIGN.md, the Loop)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from club3090 import cli
from club3090.fit.correction import NEAR_HERE, ROUNDING_BYTES, near_correction
from club3090.reports.measured import near_receipts
from tests.fixtures_path import fixture_path

REPO = "Qwen/Qwen3-8B"
GIB = 2**30


def run(argv: list[str], capsys) -> tuple[int, dict]:
    code = cli.main(argv)
    return code, json.loads(capsys.readouterr().out)


def boot(tmp_path: Path, capsys, *, name: str, measured_gib: float, util: float, length: int, version: str,
         gpus: str = "1x3090", **args: object) -> dict:
    """One boot of REPO that measured ``measured_gib`` of KV pool: a real v0.6.4 start-up log whose
    utilisation and KV lines state this boot's values, saved as a receipt (``calibrate --save``)."""
    text = fixture_path("logs", "startup_v064_profiling.log").read_text()
    assert "gpu_memory_utilization (0.90)" in text and "reserved for KV Cache is 3.76GiB" in text
    text = text.replace("gpu_memory_utilization (0.90)", f"gpu_memory_utilization ({util:.2f})")
    text = text.replace("reserved for KV Cache is 3.76GiB", f"reserved for KV Cache is {measured_gib:.2f}GiB")
    log = tmp_path / name
    log.write_text(text)
    code, out = run(["calibrate", str(log), "--gpus", gpus, "--save", "--json", f"--arg=model={REPO}",
                     f"--arg=max_model_len={length}", f"--arg=vllm_version={version}",
                     *(f"--arg={k}={v}" for k, v in args.items())], capsys)
    assert code == 0 and len(out["saved"]) == 1
    (receipt,) = out["receipts"]
    assert receipt["measured"]["available_kv_cache_gib"] == pytest.approx(measured_gib, abs=0.005)
    return receipt


def kv_calc(capsys, length: int, *extra: str) -> tuple[int, dict]:
    return run(["kv-calc", REPO, "--gpus", "1x3090", "--max-model-len", str(length), "--mem-util", "0.9",
                *extra, "--json"], capsys)


@pytest.fixture
def qwen(fake_hub, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", fake_hub.url)
    fake_hub.add_fixture("Qwen--Qwen3-8B")
    return fake_hub


def test_a_near_receipt_corrects_kv_calc_by_its_residual(qwen, tmp_path, capsys):
    _, at_a = kv_calc(capsys, 8192)
    _, before = kv_calc(capsys, 16384)
    assert before["calibration"] is None
    version = at_a["settings"]["vllm_version"]
    predicted_a = at_a["per_gpu"]["kv_pool_bytes"] / GIB
    measured = round(predicted_a - 0.30, 2)                    # the engine over-predicted shape A
    boot(tmp_path, capsys, name="a.log", measured_gib=measured, util=0.9, length=8192, version=version)

    code, after = kv_calc(capsys, 16384)
    cal = after["calibration"]
    assert cal["label"] == NEAR_HERE == "calibrated (measured here, near shape)"
    residual = predicted_a - measured
    assert cal["residual_gib"] == pytest.approx(residual, abs=1e-3)
    assert cal["predicted_kv_pool_gib"] == pytest.approx(before["per_gpu"]["kv_pool_bytes"] / GIB, abs=1e-4)
    pool = after["per_gpu"]["kv_pool_bytes"]
    assert pool / GIB == pytest.approx(before["per_gpu"]["kv_pool_bytes"] / GIB - residual, abs=1e-3)
    assert cal["priced_kv_pool_gib"] == pytest.approx(pool / GIB, abs=1e-4) and not cal["capped"]
    # blocks, tokens and the verdict follow the corrected pool by the one rule
    assert after["num_blocks"] == pool // after["bytes_per_block"] < before["num_blocks"]
    assert after["kv_cache_tokens"] < before["kv_cache_tokens"]
    # the stated band: the receipt's rounding plus how far the overheads move between the shapes
    assert ROUNDING_BYTES <= after["error_band_bytes"] < before["error_band_bytes"]
    assert cal["band_gib"] == pytest.approx(after["error_band_bytes"] / GIB, abs=1e-4)
    assert after["confidence"] == before["confidence"]       # a near shape is not an exact measurement
    assert code in (0, 2)

    cli.main(["kv-calc", REPO, "--gpus", "1x3090", "--max-model-len", "16384", "--mem-util", "0.9"])
    text = capsys.readouterr().out
    assert "calibrated (measured here, near shape)" in text and f"±{cal['band_gib']:.2f} GiB" in text


def test_far_shapes_are_untouched(qwen, tmp_path, capsys):
    _, at_a = kv_calc(capsys, 8192)
    version = at_a["settings"]["vllm_version"]
    measured = round(at_a["per_gpu"]["kv_pool_bytes"] / GIB - 0.5, 2)
    boot(tmp_path, capsys, name="a.log", measured_gib=measured, util=0.9, length=8192, version=version)
    for extra in (["--vllm-version", "0.8.5"],                  # another engine version
                  ["--tensor-parallel-size", "2", "--gpus", "2x3090"]):   # another topology
        _, far = kv_calc(capsys, 16384, *extra)
        assert far["calibration"] is None, extra
    _, other_gpu = run(["kv-calc", REPO, "--gpus", "1xA100-80GB", "--max-model-len", "16384", "--mem-util", "0.9",
                        "--json"], capsys)
    assert other_gpu["calibration"] is None
    qwen.add_fixture("Qwen--Qwen3-0.6B")
    _, other_model = run(["kv-calc", "Qwen/Qwen3-0.6B", "--gpus", "1x3090", "--max-model-len", "16384",
                          "--mem-util", "0.9", "--json"], capsys)
    assert other_model["calibration"] is None
    _, near = kv_calc(capsys, 16384)
    assert near["calibration"]["label"] == NEAR_HERE            # the same receipt, a near shape


def test_a_raising_correction_stops_at_the_bands_lower_edge(qwen, tmp_path, capsys):
    _, at_a = kv_calc(capsys, 8192)
    _, before = kv_calc(capsys, 16384)
    version = at_a["settings"]["vllm_version"]
    predicted_a = at_a["per_gpu"]["kv_pool_bytes"] / GIB
    measured = round(predicted_a + 1.0, 2)                     # the engine under-predicted shape A by ~1 GiB
    boot(tmp_path, capsys, name="a.log", measured_gib=measured, util=0.9, length=8192, version=version)
    _, after = kv_calc(capsys, 16384)
    cal, predicted = after["calibration"], before["per_gpu"]["kv_pool_bytes"]
    pool = after["per_gpu"]["kv_pool_bytes"]
    assert cal["capped"] and cal["residual_gib"] == pytest.approx(predicted_a - measured, abs=1e-3)
    assert predicted < pool < cal["central_kv_pool_gib"] * GIB
    assert pool / GIB == pytest.approx(predicted / GIB + (measured - predicted_a) - cal["band_gib"], abs=2e-3)


def test_an_under_prediction_within_the_band_raises_nothing(qwen, tmp_path, capsys):
    _, at_a = kv_calc(capsys, 8192)
    _, before = kv_calc(capsys, 16384)
    predicted_a = at_a["per_gpu"]["kv_pool_bytes"] / GIB
    measured = round(predicted_a + 0.005, 2) + (0.01 if round(predicted_a + 0.005, 2) <= predicted_a else 0)
    boot(tmp_path, capsys, name="a.log", measured_gib=measured, util=0.9, length=8192,
         version=at_a["settings"]["vllm_version"])
    _, after = kv_calc(capsys, 16384)
    assert after["calibration"]["capped"] and after["calibration"]["residual_gib"] < 0
    assert after["per_gpu"]["kv_pool_bytes"] == before["per_gpu"]["kv_pool_bytes"]
    assert after["num_blocks"] == before["num_blocks"] and after["raw_verdict"] == before["raw_verdict"]


def test_pull_and_fits_show_the_near_shape_correction(qwen, tmp_path, capsys):
    pull = ["pull", REPO, "--profile-like", "vllm/minimal", "--gpus", "1x3090", "--dry-run", "--json"]
    _, before = run(pull, capsys)
    settings = before["fit"]["settings"]
    assert before["fit"]["calibration"] is None and "measured-near" not in before["notice_codes"]
    length = max(1024, settings["max_model_len"] // 2)
    measured = round(before["fit"]["per_gpu"]["kv_pool_bytes"] / GIB - 0.4, 2)
    # the same concurrency and batch as the profile: only the context differs
    boot(tmp_path, capsys, name="a.log", measured_gib=measured, util=settings["mem_util"], length=length,
         version=settings["vllm_version"], max_num_seqs=settings["max_num_seqs"],
         max_num_batched_tokens=settings["max_num_batched_tokens"])
    _, after = run(pull, capsys)
    cal = after["fit"]["calibration"]
    assert "measured-near" in after["notice_codes"] and cal["label"] == NEAR_HERE
    assert after["confidence"] == before["confidence"]        # the gate's confidence is unchanged
    assert after["fit"]["per_gpu"]["kv_pool_bytes"] / GIB == pytest.approx(
        before["fit"]["per_gpu"]["kv_pool_bytes"] / GIB - cal["residual_gib"], abs=2e-3)
    cli.main(pull[:-1])
    assert "calibrated (measured here, near shape)" in capsys.readouterr().out


def test_fits_shows_the_near_shape_correction(qwen, tmp_path, capsys):
    fits = ["fits", REPO, "--gpus", "1x3090", "--json"]
    _, before = run(fits, capsys)
    (row,) = before["models"]
    assert row["calibration"] is None and row["fits"]
    # the derived shape fits prices (the same one `pull` derives with no --profile-like)
    _, derived = run(["pull", REPO, "--gpus", "1x3090", "--dry-run", "--json"], capsys)
    settings = derived["fit"]["settings"]
    assert settings["max_model_len"] == row["max_model_len"]
    measured = round(derived["fit"]["per_gpu"]["kv_pool_bytes"] / GIB - 0.4, 2)
    boot(tmp_path, capsys, name="a.log", measured_gib=measured, util=settings["mem_util"],
         length=settings["max_model_len"] // 2, version=settings["vllm_version"],
         max_num_seqs=settings["max_num_seqs"], max_num_batched_tokens=settings["max_num_batched_tokens"])
    _, after = run(fits, capsys)
    (corrected,) = after["models"]
    assert corrected["calibration"]["label"] == NEAR_HERE and corrected["calibration"]["residual_gib"] > 0.3
    assert corrected["max_concurrency"] < row["max_concurrency"]
    cli.main(fits[:-1])
    assert "calibrated (measured here, near shape)" in capsys.readouterr().out


# -- the pure pieces ---------------------------------------------------------------------------------


def test_near_correction_arithmetic():
    over = near_correction(10 * GIB, [GIB // 2], 0)
    assert (over.priced_bytes, over.capped, over.band_bytes) == (10 * GIB - GIB // 2, False, ROUNDING_BYTES)
    under = near_correction(10 * GIB, [-GIB], GIB // 4)
    assert under.capped and under.central_bytes == 11 * GIB
    assert under.priced_bytes == 10 * GIB + GIB - under.band_bytes and under.band_bytes == ROUNDING_BYTES + GIB // 4
    small = near_correction(10 * GIB, [-ROUNDING_BYTES // 2], 0)
    assert small.priced_bytes == 10 * GIB                      # within the band: nothing is raised
    spread = near_correction(10 * GIB, [GIB // 10, 3 * GIB // 10], 0)
    assert spread.residual_bytes == GIB // 5 and spread.band_bytes == GIB // 10
    with pytest.raises(ValueError):
        near_correction(GIB, [], 0)


RECEIPT = {"source": {"sha256": "ab" * 32},
           "shape": {"model": "/models/acme-widget-7b", "tensor_parallel_size": 2, "max_model_len": 8192,
                     "gpu_memory_utilization": 0.9, "gpu_memory_gib": 23.69, "vllm_version": "0.11.0",
                     "kv_cache_dtype": "auto"},
           "measured": {"available_kv_cache_gib": 3.76}}
NEAR = {"repo_id": "acme/Widget-7B", "gpu_memory_gib": 23.6, "tensor_parallel_size": 2, "vllm_version": "0.11.0"}


def test_near_receipts_keep_the_rig_engine_and_model_fixed():
    (got,) = near_receipts([RECEIPT], **NEAR)
    assert got.id == "ab" * 8 and got.measured_kv_gib == 3.76
    assert got.settings["max_model_len"] == 8192 and got.settings["mem_util"] == 0.9
    assert near_receipts([RECEIPT], **{**NEAR, "vllm_version": "0.11.0.post1"})   # the same release
    for change in ({"repo_id": "acme/Other-7B"}, {"gpu_memory_gib": 79.2}, {"tensor_parallel_size": 1},
                   {"pipeline_parallel_size": 2}, {"vllm_version": "0.10.2"}, {"vllm_version": None},
                   {"enforce_eager": True}):
        assert not near_receipts([RECEIPT], **{**NEAR, **change}), change
    for key, have, other in (("quantization", "awq", "gptq"), ("dtype", "float16", "bfloat16")):
        stated = {**RECEIPT, "shape": {**RECEIPT["shape"], key: have}}
        assert near_receipts([stated], **NEAR)                     # unstated on the priced side: the repo's own
        assert near_receipts([stated], **NEAR, **{key: have.upper()})
        assert not near_receipts([stated], **NEAR, **{key: other}), key
    for broken in ({"vllm_version": None}, {"max_model_len": "8192"}, {"gpu_memory_utilization": 1.5}):
        assert not near_receipts([{**RECEIPT, "shape": {**RECEIPT["shape"], **broken}}], **NEAR), broken
    assert not near_receipts([{**RECEIPT, "measured": {}}], **NEAR)


def test_a_zero_residual_reprices_to_the_same_fit_and_a_large_one_flips_the_verdict():
    from club3090.fit import memory
    from club3090.fit.shape import profile_shape
    from club3090.model.architecture import parse_config
    from club3090.model.spec import ModelSpec
    from club3090.pipeline.stages import near_here

    configs = json.loads(fixture_path("calibration", "vllm_startup_configs.json").read_text())
    config = {k: v for k, v in configs["Qwen/Qwen2.5-7B-Instruct"].items() if not k.startswith("config_")}
    arch = parse_config(config)
    memory_bytes = [24 * GIB]
    shape = profile_shape(None, None, max_model_len=32768, mem_util=0.9, vllm_version="0.11.0")
    fit = memory.predict(arch, weights_bytes=0, weights_bytes_per_rank=int(14.25 * GIB),
                         gpu_memory_bytes=memory_bytes, shape=shape)
    at_a = memory.predict(arch, weights_bytes=0, weights_bytes_per_rank=int(14.25 * GIB),
                          gpu_memory_bytes=memory_bytes, shape=replace(shape, max_model_len=8192))
    assert isinstance(fit, memory.FitResult) and isinstance(at_a, memory.FitResult)
    spec = ModelSpec.__new__(ModelSpec)
    object.__setattr__(spec, "ref", "Qwen/Qwen2.5-7B-Instruct")
    object.__setattr__(spec, "arch", arch)

    def receipt(pool_gib: float) -> dict:
        return {"source": {"sha256": "cd" * 32}, "measured": {"available_kv_cache_gib": pool_gib},
                "shape": {"model": "Qwen/Qwen2.5-7B-Instruct", "max_model_len": 8192, "gpu_memory_utilization": 0.9,
                          "gpu_memory_gib": 24.0, "vllm_version": "0.11.0"}}

    same = near_here(fit, spec, shape, memory_bytes, [receipt(at_a.per_gpu.kv_pool_bytes / GIB)])
    assert same is not None
    got, notice = same
    assert (got.num_blocks, got.kv_cache_tokens, got.raw_verdict, got.max_model_len_fit) == \
        (fit.num_blocks, fit.kv_cache_tokens, fit.raw_verdict, fit.max_model_len_fit)
    assert notice.code == "measured-near" and got.calibration is not None
    assert not any("--kv-cache-memory-bytes" in n for n in got.notes)

    lower = near_here(fit, spec, shape, memory_bytes, [receipt(0.05)])
    assert lower is not None
    low = lower[0]
    assert low.per_gpu.kv_pool_bytes < fit.per_gpu.kv_pool_bytes
    assert low.num_blocks == low.per_gpu.kv_pool_bytes // low.bytes_per_block
    assert low.raw_verdict == "wont-fit" != fit.raw_verdict
    assert near_here(fit, spec, replace(shape, pp=2), memory_bytes * 2, [receipt(0.05)]) is None
    assert near_here(fit, spec, replace(shape, kv_cache_memory_bytes=4 * GIB), memory_bytes, [receipt(0.05)]) is None
