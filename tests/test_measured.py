"""Pricing from this machine's own promoted receipts: exact (measured here), and the residual."""

from __future__ import annotations

from club3090.reports.measured import EXACT_HERE, find_measured, model_token, residual_for

ENTRY = {"id": "receipts-abc", "status": "validated",
         "shape": {"model": "/models/club3090/pulls/acme-widget-7b", "tensor_parallel_size": 2,
                   "max_model_len": 8192, "gpu_memory_utilization": 0.9, "gpu_memory_gib": 23.69},
         "measured": {"available_kv_cache_gib": 3.76, "gpu_kv_cache_tokens": 61632, "num_gpu_blocks": 3852,
                      "max_concurrency": 7.52}}


def test_model_spellings():
    assert model_token("/models/club3090/pulls/acme-widget-7b") == "acme-widget-7b"   # a derived compose's mount
    assert model_token("acme/Widget-7B") == "widget-7b" and model_token("/srv/Widget-7B/") == "widget-7b"
    assert model_token(None) == ""


def test_the_same_shape_on_the_same_gpu_is_exact_measured_here():
    got = find_measured([ENTRY], repo_id="acme/Widget-7B", gpu_memory_gib=23.6, tensor_parallel_size=2,
                        max_model_len=8192, gpu_memory_utilization=0.9)
    assert got is not None and got.confidence == EXACT_HERE == "exact (measured here)"
    assert (got.gpu_kv_cache_tokens, got.num_gpu_blocks, got.available_kv_cache_gib) == (61632, 3852, 3.76)
    assert got.band_gib == 0.01                                  # the receipt's rounding


def test_another_shape_gpu_model_or_state_is_not_a_match():
    base = {"repo_id": "acme/Widget-7B", "gpu_memory_gib": 23.69, "tensor_parallel_size": 2,
            "max_model_len": 8192, "gpu_memory_utilization": 0.9}
    for change in ({"max_model_len": 16384}, {"tensor_parallel_size": 1}, {"gpu_memory_gib": 79.2},
                   {"repo_id": "acme/Other-7B"}, {"gpu_memory_utilization": 0.95}, {"kv_cache_dtype": "fp8"}):
        assert find_measured([ENTRY], **{**base, **change}) is None, change
    assert find_measured([{**ENTRY, "status": "candidate"}], **base) is None


def test_residual_over_receipts_with_a_band():
    receipts = [{"shape": ENTRY["shape"], "term_error": {"available_kv_cache_gib": e}} for e in (-0.2, -0.4)]
    assert residual_for(receipts, repo_id="acme/Widget-7B", gpu_memory_gib=23.69) == (-0.3, 0.1)
    assert residual_for(receipts, repo_id="acme/Widget-7B", gpu_memory_gib=79.0) is None


def test_apply_measured_replaces_the_predicted_terms_down_to_the_rounding():
    import json

    from club3090.fit import memory
    from club3090.fit.shape import profile_shape
    from club3090.model.architecture import parse_config
    from club3090.reports.measured import MeasuredHere, apply_measured
    from tests.fixtures_path import fixture_path

    configs = json.loads(fixture_path("calibration", "vllm_startup_configs.json").read_text())
    config = {k: v for k, v in configs["Qwen/Qwen2.5-7B-Instruct"].items() if not k.startswith("config_")}
    fit = memory.predict(parse_config(config), weights_bytes=0, weights_bytes_per_rank=int(14.25 * 2**30),
                         gpu_memory_bytes=[int(79.19 * 2**30)],
                         shape=profile_shape(None, None, max_model_len=8192, vllm_version="0.11.0"))
    assert isinstance(fit, memory.FitResult)
    match = MeasuredHere("receipts-abc", 56.25, 1053328, None, 128.58)
    got = apply_measured(fit, match)
    assert (got.kv_cache_tokens, got.max_concurrency, got.confidence) == (1053328, 128.58, "exact")
    assert got.per_gpu.kv_pool_bytes == int(56.25 * 2**30) and got.num_blocks == fit.num_blocks
    assert got.error_band_bytes == int(0.01 * 2**30) < fit.error_band_bytes
    assert got.notes[-1] == "exact (measured here): receipts-abc"
