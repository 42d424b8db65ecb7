"""vLLM's release-line rules (fit/vllm_rules.py) and how predict follows them: V0 vs V1, V0's
profile batch without chunked prefill, MLA disabled, max_model_len auto-fit, unknown versions,
encoder and speculative-sampler profiling, the config-only weight estimate."""

from __future__ import annotations

import json

import pytest

from club3090.fit import profiling
from club3090.fit.memory import ServeShape, Unpriceable, logged_rank, predict
from club3090.fit.vllm_rules import (
    NEWEST_KNOWN_VLLM,
    RELEASES_IN_USE,
    choose_engine,
    mla_rule,
    parse_version,
    sampler_path,
    v0_batched_tokens,
)
from club3090.model.architecture import parse_config
from club3090.model.param_estimate import bytes_per_parameter, estimate_weights
from club3090.units import GiB
from tests.fixtures_path import fixture_path

HUB = fixture_path("hub")
QWEN7 = "Qwen--Qwen2.5-7B"


def arch(name: str, **override):
    config = json.loads((HUB / name / "config.json").read_text())
    config.update(override)
    return parse_config(config)


def run(a, gpu: int = 24 * GiB, weights: int = 0, **shape):
    return predict(a, weights_bytes=weights, weights_bytes_per_rank=weights, gpu_memory_bytes=[gpu],
                   shape=ServeShape(**shape))


# --- engine selection ------------------------------------------------------------------------

@pytest.mark.parametrize("version, pp, kv, state, spec, engine", [
    ("0.6.3", 1, "auto", False, None, "v0"),          # before V1
    ("0.8.5", 1, "auto", False, None, "v1"),          # V1 by default
    ("0.8.5", 2, "auto", False, None, "v0"),          # PP without Ray falls back
    ("0.9.2", 2, "auto", False, None, "v1"),          # PP with the mp executor on V1
    ("0.8.4", 1, "fp8", False, None, "v0"),           # fp8 KV needed FlashAttention 3
    ("0.9.1", 1, "auto", True, None, "v0"),           # Mamba-style layers before 0.10
    ("0.10.1", 1, "auto", False, "draft_model", "v0"),
    ("0.11.0", 2, "fp8", True, "draft_model", "v1"),  # V0 removed
])
def test_engine_choice(version, pp, kv, state, spec, engine):
    choice = choose_engine(parse_version(version), requested=None, pp=pp, kv_cache_dtype=kv,
                           has_state_layers=state, spec_method=spec)
    assert choice.engine == engine
    assert (choice.reason is None) == (engine == "v1" or parse_version(version) < (0, 8, 0))


def test_v0_chunked_prefill_default_and_profile_batch():
    v = parse_version("0.7.3")
    # > 32K without sliding window / speculation / multimodal / MLA: chunked, 2048 tokens
    assert v0_batched_tokens(v, max_model_len=65536, chunked=None, sliding_window=False, speculative=False,
                             multimodal=False, mla=False) == (True, 2048)
    # <= 32K: no chunked prefill, the budget is the context itself (at least 2048)
    assert v0_batched_tokens(v, max_model_len=32768, chunked=None, sliding_window=False, speculative=False,
                             multimodal=False, mla=False) == (False, 32768)
    assert v0_batched_tokens(v, max_model_len=1024, chunked=None, sliding_window=False, speculative=False,
                             multimodal=True, mla=False) == (False, 5120)
    # MLA in V0 could not chunk: a 64K context profiles 64K tokens
    assert v0_batched_tokens(v, max_model_len=65536, chunked=None, sliding_window=False, speculative=False,
                             multimodal=False, mla=True) == (False, 65536)
    # before 0.6.0 chunked prefill was never on by default
    assert v0_batched_tokens(parse_version("0.5.4"), max_model_len=65536, chunked=None, sliding_window=False,
                             speculative=False, multimodal=False, mla=False) == (False, 65536)


def test_v0_activation_grows_with_context_and_v1_does_not():
    a = arch(QWEN7)
    base = dict(gpu=80 * GiB, weights=15 * GiB)
    old_8k = run(a, max_model_len=8192, vllm_version="0.6.3", **base)
    old_32k = run(a, max_model_len=32768, vllm_version="0.6.3", **base)
    assert old_8k.settings.engine == "v0" and not old_8k.settings.chunked_prefill
    assert (old_8k.settings.max_num_batched_tokens, old_32k.settings.max_num_batched_tokens) == (8192, 32768)
    assert old_32k.per_gpu.activation_bytes > 3 * old_8k.per_gpu.activation_bytes
    assert old_32k.per_gpu.kv_pool_bytes < old_8k.per_gpu.kv_pool_bytes
    assert any("V0 engine" in n for n in old_32k.notes)
    new_8k = run(a, max_model_len=8192, vllm_version="0.22.0", **base)
    new_32k = run(a, max_model_len=32768, vllm_version="0.22.0", **base)
    assert new_8k.per_gpu.activation_bytes == new_32k.per_gpu.activation_bytes


def test_v0_pp_fallback_on_0_8():
    a = arch(QWEN7)
    r = predict(a, weights_bytes=15 * GiB, gpu_memory_bytes=[24 * GiB] * 2,
                shape=ServeShape(pp=2, max_model_len=32768, vllm_version="0.8.5"))
    assert r.settings.engine == "v0" and r.settings.max_num_batched_tokens == 32768
    assert any("pipeline parallelism" in n for n in r.notes)
    assert r.cudagraph_outside_budget_bytes > 0 and r.per_gpu.cudagraph_bytes == 0


def test_logged_pool_is_the_first_stage_from_0_11_1_and_the_limiting_rank_before():
    """The "Available KV cache memory" line: the first rank's from the 0.11.1 line (PR #26740), so
    under PP the first stage's pool (no sampler), larger than the limiting last stage's; before it
    every worker printed and a record quotes the limiting one (the llm-d PP sweep, harvest r6)."""
    a = arch(QWEN7)
    pp2 = dict(weights_bytes=15 * GiB, gpu_memory_bytes=[80 * GiB] * 2)
    new = predict(a, **pp2, shape=ServeShape(pp=2, max_model_len=8192, max_num_seqs=1024, vllm_version="0.19.0"))
    assert logged_rank(new) is new.ranks[0]
    assert new.per_gpu.rank == 1 and logged_rank(new).kv_pool_bytes > new.per_gpu.kv_pool_bytes
    old = predict(a, **pp2, shape=ServeShape(pp=2, max_model_len=8192, vllm_version="0.10.1"))
    assert logged_rank(old) is old.per_gpu
    tp2 = predict(a, weights_bytes=15 * GiB, gpu_memory_bytes=[80 * GiB] * 2,
                  shape=ServeShape(tp=2, max_model_len=8192, vllm_version="0.19.0"))
    assert logged_rank(tp2).kv_pool_bytes == tp2.per_gpu.kv_pool_bytes


@pytest.mark.parametrize("version, engine, said, device, path", [
    ("0.8.3", "v0", None, None, "sort"),             # V0's profile_run samples top_p 0.99 / top_k vocab-1: a sort
    ("0.10.1", "v1", None, None, "sort"),            # V1 before 0.17: the PyTorch-native full sort
    ("0.10.1", "v1", "FlashInfer", None, "flashinfer"),   # ... unless the log names FlashInfer
    ("0.19.0", "v1", None, "NVIDIA H100 80GB HBM3", "kernel"),   # the Triton kernel
    ("0.19.0", "v1", "PyTorch-native", None, "kernel"),          # "native" is the Triton kernel from 0.17
    ("0.21.0", "v1", None, "NVIDIA GeForce RTX 3090", "flashinfer"),   # PR #40376: FlashInfer by default
    ("0.31.1", "v1", None, "AMD Instinct MI300X", "kernel"),     # not on ROCm
    ("0.27.1", "v1", "Triton", None, "kernel"),
])
def test_the_profiling_samplers_path(version, engine, said, device, path):
    assert sampler_path(parse_version(version), engine, said, device) == path


def test_non_torch_pays_the_multi_gpu_term_for_a_tp_group_only():
    """llm-d's PP 2 / PP 4 H100 runs (0.19) log 0.07 GiB of non-torch memory on every stage, their
    TP 2 / TP 4 runs 2.07-2.21 (NVLS): the all-reduce buffers belong to the TP group."""
    tp1 = profiling.NON_TORCH_TP1
    assert profiling.non_torch_bytes(1, 2, False) == profiling.non_torch_bytes(1, 4, True) == tp1
    assert profiling.non_torch_bytes(2, 1, False) == tp1 + profiling.NON_TORCH_MULTI
    assert profiling.non_torch_bytes(2, 2, False, "v0") == tp1 + profiling.NON_TORCH_MULTI_V0
    assert profiling.non_torch_bytes(4, 1, True) == tp1 + profiling.NON_TORCH_MULTI + profiling.NON_TORCH_NVSWITCH


def test_each_sampler_path_prices_its_own_coefficient():
    a = arch(QWEN7)
    logits = 256 * a.vocab_size * 4
    for path, coef in (("sort", profiling.SAMPLER_NATIVE_COEF), ("kernel", profiling.SAMPLER_COEF),
                       ("flashinfer", profiling.SAMPLER_FLASHINFER_COEF)):
        got = profiling.activation(a, tp=1, tokens=4096, num_seqs=256, last_stage=True, sampler=path).sampler
        assert got == int(coef * logits)


# --- MLA by version ----------------------------------------------------------------------------

def test_mla_rule_by_version():
    assert mla_rule(parse_version("0.6.6"), quant_method=None, disabled=False)[:2] == (False, 256)
    assert mla_rule(parse_version("0.7.2"), quant_method="awq", disabled=False)[:2] == (False, None)
    assert mla_rule(parse_version("0.7.2"), quant_method="fp8", disabled=False)[0] is True
    assert mla_rule(parse_version("0.8.0"), quant_method="awq", disabled=False)[0] is True
    assert mla_rule(parse_version("0.22.0"), quant_method=None, disabled=True)[0] is False
    # 0.7.x keeps MLA for compressed-tensors only with fp8 weights and activations in every group
    fp8 = {"config_groups": {"g0": {"weights": {"type": "float", "num_bits": 8},
                                    "input_activations": {"type": "float", "num_bits": 8}}}}
    w4 = {"config_groups": {"g0": {"weights": {"type": "int", "num_bits": 4}, "input_activations": None}}}
    assert mla_rule(parse_version("0.7.3"), quant_method="compressed-tensors", disabled=False,
                    quant_config=fp8)[0] is True
    assert mla_rule(parse_version("0.7.3"), quant_method="compressed-tensors", disabled=False,
                    quant_config=w4)[:2] == (False, None)
    assert mla_rule(parse_version("0.8.0"), quant_method="compressed-tensors", disabled=False,
                    quant_config=w4)[0] is True


def test_mla_disabled_caches_every_head():
    a = arch("deepseek-ai--DeepSeek-V2-Lite")                  # 27 layers, 16 heads, qk 128 + 64, v 128
    mla = run(a, max_model_len=8192, kv_cache_memory_bytes=GiB, vllm_version="0.22.0")
    assert mla.kv_bytes_per_token == 27 * 576 * 2
    # 0.6: no MLA; heads padded to 256 for K and V: 27 x 16 x 512 x 2 B
    old = run(a, max_model_len=8192, kv_cache_memory_bytes=GiB, vllm_version="0.6.3")
    assert old.kv_bytes_per_token == 27 * 16 * 512 * 2 and not old.settings.use_mla
    # VLLM_MLA_DISABLE: K and V of 192 per head
    off = run(a, max_model_len=8192, kv_cache_memory_bytes=GiB, vllm_version="0.22.0", mla_disabled=True)
    assert off.kv_bytes_per_token == 27 * 16 * 384 * 2
    assert any("MLA" in n for n in off.notes)


# --- max_model_len auto-fit -------------------------------------------------------------------

def test_max_model_len_auto_reports_the_length_vllm_chooses():
    a = arch(QWEN7)                                             # 131,072 positions
    pool = int(6.43 * GiB)                                      # 7,524 blocks: 120,384 tokens
    auto = run(a, max_model_len=-1, kv_cache_memory_bytes=pool, vllm_version="0.22.0")
    assert auto.settings.max_model_len_auto and auto.max_model_len == 120_384
    assert auto.raw_verdict != "wont-fit" and any("auto-fits" in n for n in auto.notes)
    fixed = run(a, max_model_len=131072, kv_cache_memory_bytes=pool, vllm_version="0.22.0")
    assert fixed.raw_verdict == "wont-fit" and fixed.max_model_len_fit == 120_384
    # unset: 0.26 auto-fits, 0.25 refuses at the model's maximum
    assert run(a, kv_cache_memory_bytes=pool, vllm_version="0.26.0").max_model_len == 120_384
    assert run(a, kv_cache_memory_bytes=pool, vllm_version="0.25.1").raw_verdict == "wont-fit"
    # a length that fits is kept
    small = run(a, max_model_len=-1, kv_cache_memory_bytes=20 * GiB, vllm_version="0.22.0")
    assert small.max_model_len == 131_072
    assert isinstance(run(a, max_model_len=-1, kv_cache_memory_bytes=pool, vllm_version="0.11.0"), Unpriceable)


def test_unknown_version_is_priced_on_the_tightest_release_line_in_use_and_named():
    """A version-less answer names the release it assumed and is never "fits" where an older
    release line still in use would refuse (issue 24, item 5)."""
    a = arch(QWEN7)
    weights = int(14.25 * GiB)
    shape = {"max_model_len": 32768, "max_num_seqs": 1024}
    # a card where the newest line fits and the full-sort sampler of 0.16 (1,024 requests x a
    # 152K vocabulary) leaves too little for one 32K request
    gpus = [int((16 + 0.125 * i) * GiB) for i in range(64)]
    split = next(g for g in gpus if run(a, gpu=g, weights=weights, vllm_version="0.16.0", **shape).raw_verdict
                 == "wont-fit" and run(a, gpu=g, weights=weights, vllm_version=NEWEST_KNOWN_VLLM,
                                       **shape).raw_verdict != "wont-fit")
    r = run(a, gpu=split, weights=weights, **shape)
    assert r.raw_verdict == "wont-fit"
    assert r.settings.vllm_version in RELEASES_IN_USE and r.settings.vllm_version != NEWEST_KNOWN_VLLM
    assert any("version not given" in n and f"vLLM {r.settings.vllm_version}" in n for n in r.notes)
    # where every line fits, the answer still names the release it assumed, and its pool is the least
    roomy = run(a, gpu=80 * GiB, weights=weights, **shape)
    assert roomy.raw_verdict != "wont-fit"
    assert roomy.per_gpu.kv_pool_bytes == min(
        run(a, gpu=80 * GiB, weights=weights, vllm_version=v, **shape).per_gpu.kv_pool_bytes for v in RELEASES_IN_USE)
    assert any(f"priced as vLLM {roomy.settings.vllm_version}" in n for n in roomy.notes)
    odd = run(a, max_model_len=8192, kv_cache_memory_bytes=GiB, vllm_version="nightly")
    assert any("unreadable" in n for n in odd.notes)
    assert not any("version" in n for n in run(a, max_model_len=8192, kv_cache_memory_bytes=GiB,
                                              vllm_version="0.22.0").notes)


# --- profiling terms ----------------------------------------------------------------------------

def _vision_config(tokens_per_image: int = 280) -> dict:
    return {"vision_soft_tokens_per_image": tokens_per_image,
            "vision_config": {"model_type": "gemma4_vision", "hidden_size": 1152, "intermediate_size": 4304,
                              "num_hidden_layers": 27, "patch_size": 16, "pooling_kernel_size": 3}}


def test_encoder_profiling_batch_follows_the_budget():
    a = arch(QWEN7, **_vision_config())
    assert a.vision is not None and a.vision.patches_per_token == 9
    # budget max(4096, 280) -> 14 images of 280 tokens, 2,520 patches each
    assert profiling.encoder_items(a, 4096) == 14 and profiling.encoder_items(a, 100) == 1
    small = profiling.activation(a, tp=2, tokens=2048, num_seqs=4, last_stage=True)
    large = profiling.activation(a, tp=2, tokens=4096, num_seqs=4, last_stage=True)
    width = 2 * (4304 + 2 * 1152)
    assert large.encoder == pytest.approx(profiling.ENCODER_COEF * 14 * 280 * 9 * width, abs=1)
    assert large.encoder > small.encoder
    off = profiling.activation(a, tp=2, tokens=4096, num_seqs=4, last_stage=True, encoder=False)
    assert off.encoder == 0
    text = run(arch(QWEN7), max_model_len=8192, vllm_version="0.22.0", max_num_seqs=4)
    vision = run(a, max_model_len=8192, vllm_version="0.22.0", max_num_seqs=4)
    assert vision.per_gpu.activation_bytes > text.per_gpu.activation_bytes
    skipped = run(a, max_model_len=8192, vllm_version="0.22.0", max_num_seqs=4, mm_encoder_profiling=False)
    assert skipped.per_gpu.activation_bytes == text.per_gpu.activation_bytes


def test_speculative_rejection_sampler_buffers():
    a = arch(QWEN7)
    plain = profiling.activation(a, tp=1, tokens=4096, num_seqs=256, last_stage=True)
    spec = profiling.activation(a, tp=1, tokens=4096, num_seqs=256, last_stage=True, num_spec=4)
    logits = 256 * a.vocab_size * 4
    assert plain.sampler == int(profiling.SAMPLER_COEF * logits)
    assert spec.sampler - plain.sampler == pytest.approx(profiling.SPEC_SAMPLER_COEF * logits, rel=1e-6)
    # vLLM's dummy rejection-sampler batch is one draft token per request at any depth
    for depth in (1, 2, 5):
        assert profiling.activation(a, tp=1, tokens=4096, num_seqs=256, last_stage=True,
                                    num_spec=depth).sampler == spec.sampler
    assert profiling.activation(a, tp=1, tokens=4096, num_seqs=256, last_stage=False, num_spec=4).sampler == 0
    # V0 samples every profiled sequence; V1 min(max_num_seqs, tokens)
    assert profiling.activation(a, tp=1, tokens=64, num_seqs=256, last_stage=True, engine="v0").sampler == \
        int(profiling.SAMPLER_COEF * 256 * a.vocab_size * 4)
    assert profiling.activation(a, tp=1, tokens=64, num_seqs=256, last_stage=True).sampler == \
        int(profiling.SAMPLER_COEF * 64 * a.vocab_size * 4)


# --- config-only weights ------------------------------------------------------------------------

def test_weight_estimate_unquantized_matches_the_checkpoint():
    # Qwen2.5-7B: 7.62 B parameters, 15,231,233,024 bytes of bf16 tensors
    est = estimate_weights(arch(QWEN7))
    assert abs(est.bytes - 15_231_233_024) / 15_231_233_024 < 0.01
    assert est.low_bytes < 15_231_233_024 < est.high_bytes and "estimated" in est.note
    assert estimate_weights(arch(QWEN7), dtype="float32").bytes == pytest.approx(2 * est.bytes, rel=1e-9)


def test_weight_estimate_quantized_keeps_embeddings_16_bit():
    qc = {"quant_method": "awq", "bits": 4, "group_size": 128}
    per, scheme = bytes_per_parameter(qc)
    assert per == pytest.approx(0.5 + 2 / 128 + 0.5 / 128) and "4-bit" in scheme
    plain = estimate_weights(arch(QWEN7))
    awq = estimate_weights(arch(QWEN7, quantization_config=qc))
    a = arch(QWEN7)
    embed = 2 * a.vocab_size * a.hidden_size * 2                  # untied embeddings + LM head, bf16
    body = plain.bytes - embed
    assert awq.bytes == pytest.approx(embed + body / 2 * float(per), rel=1e-6)
    assert "16-bit" in awq.scheme
    assert bytes_per_parameter({"quant_method": "fp8"})[0] == 1
    assert bytes_per_parameter({"quant_method": "mxfp4"})[0] == pytest.approx(17 / 32)


def test_mla_block_size_by_backend():
    from club3090.fit.vllm_rules import mla_block_size

    assert mla_block_size(parse_version("0.8.3"), "9.0") == 64        # FlashMLA on Hopper
    assert mla_block_size(parse_version("0.10.1"), "10.0") == 128     # CUTLASS MLA on Blackwell
    assert mla_block_size(parse_version("0.8.3"), "8.6") is None      # Triton MLA: 16
    assert mla_block_size(parse_version("0.19.0"), "9.0") is None     # 16-token blocks again
    assert mla_block_size(parse_version("0.7.2"), "9.0") is None      # before FlashMLA
    a = arch("deepseek-ai--DeepSeek-V2-Lite")
    hopper = run(a, max_model_len=8192, kv_cache_memory_bytes=GiB, vllm_version="0.10.1", compute_capability="9.0")
    ampere = run(a, max_model_len=8192, kv_cache_memory_bytes=GiB, vllm_version="0.10.1", compute_capability="8.6")
    assert hopper.block_size == 64 and ampere.block_size == 16
    assert hopper.kv_bytes_per_token == ampere.kv_bytes_per_token
    assert hopper.num_blocks == ampere.num_blocks // 4
    # the user's --block-size wins
    assert run(a, max_model_len=8192, kv_cache_memory_bytes=GiB, vllm_version="0.10.1", compute_capability="9.0",
               block_size=16).block_size == 16


def test_nvls_buffers_only_on_gpus_with_nvlink_multicast():
    """NCCL's NVLS buffers (the NVSwitch non-torch term) need Hopper-class NVSwitch: an A100 SXM at
    TP 2 does not pay them, an H100 does, an unnamed 80 GiB card is assumed to (the safe side)."""
    a = arch(QWEN7)
    shape = {"tp": 2, "max_model_len": 8192, "vllm_version": "0.19.0"}
    a100 = run(a, gpu=80 * GiB, device_name="NVIDIA A100-SXM4-80GB", **shape)
    h100 = run(a, gpu=80 * GiB, device_name="NVIDIA H100 80GB HBM3", **shape)
    unnamed = run(a, gpu=80 * GiB, **shape)
    assert h100.per_gpu.non_torch_bytes - a100.per_gpu.non_torch_bytes == profiling.NON_TORCH_NVSWITCH
    assert unnamed.per_gpu.non_torch_bytes == h100.per_gpu.non_torch_bytes
    assert a100.per_gpu.kv_pool_bytes > h100.per_gpu.kv_pool_bytes
    assert not profiling.nvls_capable("NVIDIA H100", "8.0") and profiling.nvls_capable(None, "9.0")


def test_one_list_of_speculative_methods_serves_kv_calc_and_the_catalog_drafters():
    """vLLM's methods are one tuple: kv-calc's --speculative-config accepts them, and a catalog drafter
    adds speculative tokens to a vLLM shape exactly when its method is one (llama.cpp drafters do not)."""
    from club3090.catalog import load_catalog
    from club3090.cli.commands import kv_calc
    from club3090.fit import drafter_kv, shape
    from club3090.fit.vllm_rules import SPECULATIVE_METHODS

    assert kv_calc.SPECULATIVE_METHODS is SPECULATIVE_METHODS is shape.SPECULATIVE_METHODS
    assert set(drafter_kv.OWN_KV_METHODS) | set(drafter_kv.KV_SHARING_METHODS) <= set(SPECULATIVE_METHODS)
    drafters = load_catalog().drafters.values()
    vllm = {d.method for d in drafters if d.method in SPECULATIVE_METHODS}
    assert vllm == {"mtp", "mtp_assistant", "dflash", "eagle3"} & {d.method for d in drafters}
    for drafter in drafters:
        tokens, _weights = shape.drafter_terms(drafter)
        llama_cpp = drafter.method in ("mtp_gguf", "dspark")
        assert (tokens == 0) if llama_cpp or not drafter.n_default else tokens == drafter.n_default


def test_one_kv_format_class_per_concept():
    """The catalog's record of a KV format and the estimator's storage table have different names."""
    from club3090.catalog import model as catalog_model
    from club3090.fit import kv_formats

    assert not hasattr(kv_formats, "KvFormat")
    assert {f.name for f in kv_formats.KV_FORMATS.values()} == set(kv_formats.KV_FORMATS)
    assert isinstance(kv_formats.kv_format("fp8"), kv_formats.KvStorage)
    assert hasattr(catalog_model, "KvFormat")
