"""vLLM's V0 engine on public V0 start-up logs (tests/fixtures/calibration/vllm_v0_startup_cases.json):
without chunked prefill the profile run is one batch of ``max(max_model_len, 2048)`` tokens, so the
activation peak, and with it the KV pool and the verdict, follow the context length."""

from __future__ import annotations

import json

import pytest

from club3090.fit.memory import ServeShape, predict
from club3090.model.architecture import parse_config
from club3090.units import GiB
from tests.fixtures_path import fixture_path

CAL = fixture_path("calibration")
CASES = {c["id"]: c for c in json.loads((CAL / "vllm_v0_startup_cases.json").read_text())}
CONFIGS = json.loads((CAL / "vllm_startup_configs.json").read_text())
L40_GIB = 44.99                 # NVIDIA L40: 46,068 MiB


def arch(repo: str):
    return parse_config({k: v for k, v in CONFIGS[repo].items() if not k.startswith("config_")})


def shape(case: dict, **over) -> ServeShape:
    util = None if case["gpu_memory_utilization_defaulted"] else case["gpu_memory_utilization"]
    base = dict(tp=case["tensor_parallel_size"], vllm_version=case["vllm_version"], mem_util=util,
                max_model_len=case["max_model_len"], dtype=case["dtype"])
    base.update(over)
    return ServeShape(**base)


def test_cases_cite_their_sources():
    for case in CASES.values():
        assert case["engine"] == "v0" and case["source"]["url"].startswith("https://github.com/vllm-project/vllm/")
        assert case["quote"], case["id"]
        assert case["hf_repo"] in CONFIGS


def test_llama3_8b_profile_batch_is_the_context():
    case = CASES["gh-vllm-10511-llama3-8b-h100-tp1"]
    m = case["measured"]
    r = predict(arch(case["hf_repo"]), weights_bytes=0, weights_bytes_per_rank=int(m["model_loading_gib"] * GiB),
                gpu_memory_bytes=[int(case["gpu_total_memory_gib"] * GiB)], shape=shape(case))
    assert r.settings.engine == "v0" and not r.settings.chunked_prefill
    assert r.settings.max_num_batched_tokens == 8192                    # max(8192, 2048)
    # the logged activation peak of that 8,192-token batch, within the model's band
    assert r.per_gpu.activation_bytes / GiB == pytest.approx(m["activation_peak_gib"], rel=0.15)
    # the budget split reproduces the log's "can use" line exactly
    assert r.per_gpu.budget_bytes / GiB == pytest.approx(71.29, abs=0.01)
    # what is left for the KV cache: off by the build's unusual non-torch figure, no more
    err = r.per_gpu.kv_pool_bytes / GiB - m["available_kv_cache_gib"]
    assert abs(err - (m["non_torch_gib"] - r.per_gpu.non_torch_bytes / GiB)) < 0.2


def test_deepseek_v2_lite_v0_refusal_and_start_follow_the_context():
    refused = CASES["gh-vllm-6211-dscoder-v2-lite-2xl40-163840"]
    started = CASES["gh-vllm-6211-dscoder-v2-lite-2xl40-30720"]
    # weights: the same architecture's logged load (DeepSeek-V2-Lite-Chat, 29.43 GiB) split by TP 2
    weights = int(29.43 / 2 * GiB)
    a = arch(refused["hf_repo"])
    long = predict(a, weights_bytes=0, weights_bytes_per_rank=weights, gpu_memory_bytes=[int(L40_GIB * GiB)] * 2,
                   shape=shape(refused))
    short = predict(a, weights_bytes=0, weights_bytes_per_rank=weights, gpu_memory_bytes=[int(L40_GIB * GiB)] * 2,
                    shape=shape(started))
    # 0.5.1 predates MLA: every head's K and V, padded to 256 (27 layers x 8 heads per rank x 512 x 2 B)
    assert long.kv_bytes_per_token == 27 * 8 * 512 * 2 and not long.settings.use_mla
    # no chunked prefill: the profile batch is the context itself
    assert long.settings.max_num_batched_tokens == 163_840 and short.settings.max_num_batched_tokens == 30_720
    assert long.per_gpu.activation_bytes > 5 * short.per_gpu.activation_bytes
    # vLLM refused 163,840 (capacity 63,040 tokens) and started at 30,720: no false fit, no false refusal
    assert long.raw_verdict == "wont-fit" and short.raw_verdict != "wont-fit"
    capacity = long.num_blocks * long.block_size
    measured = refused["measured"]["gpu_kv_cache_tokens"]
    assert capacity <= measured and capacity == pytest.approx(measured, rel=0.3)
    assert long.max_model_len_fit < 163_840
