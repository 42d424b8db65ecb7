"""vLLM's release-line rules checked against the public start-ups that show them
(tests/fixtures/calibration/vllm_startup_cases.json; each case cites its log): the sampler of the
profiling run, the prefix-caching state pages of hybrid models and the "GPU KV cache size" formula."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from club3090.fit.memory import FitResult, predict
from club3090.fit.vllm_rules import native_sampler, parse_version
from club3090.model.architecture import parse_config
from club3090.units import GiB
from tests.fixtures_path import fixture_path

ROOT = Path(__file__).resolve().parents[1]
CASES = {c["id"]: c for c in json.loads(fixture_path("calibration", "vllm_startup_cases.json").read_text())}
CONFIGS = json.loads(fixture_path("calibration", "vllm_startup_configs.json").read_text())


def _accuracy():
    spec = importlib.util.spec_from_file_location("accuracy", ROOT / "benchmarks" / "accuracy.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ACCURACY = _accuracy()


def priced(case_id: str, *, pool_from_log: bool) -> FitResult:
    """The case priced as the benchmark prices it; ``pool_from_log``: through the logged KV pool
    (the page maths: weights and card size do not matter then)."""
    case = CASES[case_id]
    config = CONFIGS[case["hf_repo"]]
    arch = parse_config({k: v for k, v in config.items() if not k.startswith("config_")})
    if pool_from_log:
        pool, weights, gpu = int(case["measured"]["available_kv_cache_gib"] * GiB), 0, 80 * GiB
    else:
        pool, weights = None, int(case["measured"]["model_loading_gib"] * GiB)
        gpu = int(ACCURACY._gpu_gib(case) * GiB)
    result = predict(arch, weights_bytes=0, weights_bytes_per_rank=weights, gpu_memory_bytes=[gpu],
                     shape=ACCURACY._shape(case, pool))
    assert isinstance(result, FitResult)
    return result


@pytest.mark.parametrize("version, native", [("0.10.0", True), ("0.15.0", True), ("0.16.0", True),
                                             ("0.17.0", False), ("0.19.0", False)])
def test_the_native_sampler_line(version, native):
    assert native_sampler(parse_version(version), "v1") is native
    assert native_sampler(parse_version(version), "v0") is False


def test_the_sampler_change_at_0_17_on_the_llm_d_version_sweep():
    """Qwen3-14B on an H100, 1,024 sequences: the same settings profile 5.64 GiB on 0.15 / 0.16 and
    2.23 GiB on 0.17 / 0.18 (the sort-free sampler); the predicted pools follow the logged ones."""
    for version in ("0150", "0160", "0170", "0180"):
        case_id = f"llmd-h100-qwen3-14b-tp1-8192-v{version}"
        got = priced(case_id, pool_from_log=False)
        logged = CASES[case_id]["measured"]["available_kv_cache_gib"]
        assert got.per_gpu.kv_pool_bytes / GiB == pytest.approx(logged, abs=0.25), case_id
    old = priced("llmd-h100-qwen3-14b-tp1-8192-v0150", pool_from_log=False)
    new = priced("llmd-h100-qwen3-14b-tp1-8192-v0170", pool_from_log=False)
    assert old.per_gpu.activation_bytes - new.per_gpu.activation_bytes > 3 * GiB


def test_prefix_caching_keeps_two_state_pages_per_request():
    """Qwen3.6-27B, 4,096 tokens, prefix caching on (0.27.1): only align mode gives the logged 71.42x."""
    case_id = "gh-meettrans-qwen36-27b-fp8-eager-v0271"
    got = priced(case_id, pool_from_log=True)
    assert got.settings.mamba_cache_mode == "align"
    assert got.max_concurrency == pytest.approx(CASES[case_id]["measured"]["max_concurrency"], abs=0.01)
    assert got.kv_cache_tokens == pytest.approx(CASES[case_id]["measured"]["gpu_kv_cache_tokens"], rel=0.001)


def test_0_20_0_still_logs_blocks_per_group_as_its_token_count():
    """Qwen3.6-35B-A3B NVFP4 on 0.20.0: 3.87x concurrency but 75,456 tokens = blocks // 4 groups x 2,096."""
    case = CASES["gh-fileid-qwen36-35b-a3b-nvfp4-wsl-v0200"]
    got = priced(case["id"], pool_from_log=True)
    assert got.settings.kv_tokens_formula == "blocks" and got.block_size == 2096
    assert got.kv_cache_tokens == case["measured"]["gpu_kv_cache_tokens"]
    assert got.max_concurrency == pytest.approx(case["measured"]["max_concurrency"], abs=0.01)


@pytest.mark.parametrize("case_id", ["gh-club3090-91-qwen36-27b-int4-mtp-2x3090-v0201",
                                     "gh-club3090-922-qwen36-27b-int4-mtp-2x3090-v0251"])
def test_mtp_with_prefix_caching_on_two_3090s(case_id):
    """The MTP layer joins the full-attention group and each state group keeps 2 + 3 pages."""
    got = priced(case_id, pool_from_log=True)
    assert got.settings.mamba_cache_mode == "align"
    assert got.kv_cache_tokens == pytest.approx(CASES[case_id]["measured"]["gpu_kv_cache_tokens"], rel=0.005)
