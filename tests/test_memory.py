"""memory.predict: exact KV page maths pinned by hand, defaults, verdicts.

Every exact number below is derived in the comment next to it from vLLM's page-size, grouping,
capacity and refusal rules (docs/DESIGN.md §17; the rules' vLLM sources are in fit/kv_layout.py).
`kv_cache_memory_bytes` pins the pool so that these tests do not depend on the fitted overheads.
"""

from __future__ import annotations

import json

import pytest

from club3090.fit.memory import (
    NEWEST_KNOWN_VLLM,
    GiB,
    ServeShape,
    Unpriceable,
    capture_sizes,
    parse_version,
    predict,
    resolve_defaults,
)
from club3090.model.architecture import parse_config
from tests.fixtures_path import fixture_path

HUB = fixture_path("hub")


def arch(name: str, **override):
    config = json.loads((HUB / name / "config.json").read_text())
    config.update(override)
    return parse_config(config)


def run(a, pool: int | None = None, gpu: int = 24 * GiB, weights: int = 0, **shape):
    return predict(a, weights_bytes=weights, weights_bytes_per_rank=weights, gpu_memory_bytes=[gpu],
                   shape=ServeShape(kv_cache_memory_bytes=pool, **shape))


QWEN7 = "Qwen--Qwen2.5-7B"


# --- dense GQA: Qwen2.5-7B -----------------------------------------------------------------------

def test_dense_gqa_bytes_per_token():
    r = run(arch(QWEN7), pool=GiB, max_model_len=32768)
    # 28 layers x 4 KV heads x (128 + 128) x 2 B = 57,344 B/token
    assert r.kv_bytes_per_token == 57_344
    # one 16-token page per layer: 16 x 4 x 256 x 2 = 32,768 B; 28 layers share a block: 917,504 B
    assert r.groups[0].page_bytes == 32_768 and r.bytes_per_block == 917_504 and r.block_size == 16


def test_worked_example_12_1():
    pool = int(6.43 * GiB)
    r = run(arch(QWEN7), pool=pool, max_model_len=32768, vllm_version="0.22.0")
    assert r.num_blocks == 7_524                     # floor(6.43 GiB / 917,504 B) = floor(7524.96)
    assert r.blocks_per_request == 2_048             # cdiv(32,768, 16)
    assert r.kv_cache_tokens == 120_384              # 7,524 blocks x 16 (one group: = concurrency x L)
    assert round(r.max_concurrency, 2) == 3.67       # 7,524 / 2,048
    assert r.raw_verdict == "fits-clean"
    fp8 = run(arch(QWEN7), pool=pool, max_model_len=32768, kv_cache_dtype="fp8")
    assert (fp8.num_blocks, fp8.kv_cache_tokens) == (15_049, 240_784)   # page halves: 458,752 B/block
    base = run(arch(QWEN7), pool=pool, max_model_len=131072)
    # 131,072 tokens need 8,192 blocks > 7,524: vLLM refuses and estimates 7,524 x 16 = 120,384
    assert base.raw_verdict == "wont-fit" and base.max_model_len_fit == 120_384


def test_tp_split_and_replication():
    # Qwen2.5-7B TP2: 2 KV heads per rank -> 28 x 2 x 256 x 2 = 28,672; TP4: 1 head -> 14,336
    assert run(arch(QWEN7), pool=GiB, max_model_len=8192, tp=2).kv_bytes_per_token == 28_672
    assert run(arch(QWEN7), pool=GiB, max_model_len=8192, tp=4).kv_bytes_per_token == 14_336
    mistral = arch("mistralai--Mistral-7B-Instruct-v0.3")          # 32 heads, 8 KV heads
    tp8 = run(mistral, pool=GiB, max_model_len=8192, tp=8)          # 32 x 1 x 256 x 2 = 16,384
    tp16 = run(mistral, pool=GiB, max_model_len=8192, tp=16)        # replicated: still 1 head per rank
    assert tp8.kv_bytes_per_token == tp16.kv_bytes_per_token == 16_384
    assert isinstance(run(arch(QWEN7), pool=GiB, max_model_len=8192, tp=3), Unpriceable)  # 28 heads, TP 3


# --- MLA: DeepSeek-V2-Lite -----------------------------------------------------------------------

def test_mla_bytes_per_token_and_tp():
    a = arch("deepseek-ai--DeepSeek-V2-Lite")
    r = run(a, pool=GiB, max_model_len=8192)
    # 27 layers x (512 + 64) latent x 2 B, one head, no V = 31,104 B/token; page 16 x 1,152 x 27 = 497,664
    assert r.kv_bytes_per_token == 31_104 and r.bytes_per_block == 497_664
    assert run(a, pool=GiB, max_model_len=8192, tp=2).kv_bytes_per_token == 31_104   # TP does not split MLA
    logged = run(a, pool=94_097 * 497_664, max_model_len=8192, vllm_version="0.19.0")
    assert (logged.num_blocks, logged.kv_cache_tokens) == (94_097, 1_505_552)      # logged values
    assert round(logged.max_concurrency, 2) == 183.78                               # 94,097 / 512


def test_mla_refusal_of_issue_15871():
    # one 32,768-token request: 2,048 blocks x 497,664 B = 1,019,215,872 B = 0.95 GiB > 0.93 GiB
    r = run(arch("deepseek-ai--DeepSeek-V2-Lite"), pool=int(0.93 * GiB), max_model_len=32768)
    assert r.raw_verdict == "wont-fit" and r.max_model_len_fit < 32768


# --- sliding window: gemma-2-2b-it ---------------------------------------------------------------

def test_sliding_window_worked_example_12_3():
    a = arch("google--gemma-2-2b-it")
    # page 16 x 4 x (256 + 256) x 2 = 65,536; two groups of 13 layers -> 13 x 65,536 = 851,968 B/block
    r = run(a, pool=83_770 * 851_968, max_model_len=8192, max_num_batched_tokens=8192, vllm_version="0.19.0")
    assert r.kv_bytes_per_token == 26 * 4 * 512 * 2 == 106_496
    assert r.bytes_per_block == 851_968 and len(r.groups) == 2 and r.num_blocks == 83_770
    # full: cdiv(8192, 16) = 512; window: cdiv(min(4095 + 8192, 8192), 16) + 1 = 513 -> 1,025 blocks
    assert r.blocks_per_request == 1_025
    assert round(r.max_concurrency, 2) == 81.73                      # 83,770 / 1,025
    assert r.kv_cache_tokens == 670_160                              # v0.19: 83,770 // 2 groups x 16
    current = run(a, pool=83_770 * 851_968, max_model_len=8192, max_num_batched_tokens=8192, vllm_version="0.22.0")
    assert current.kv_cache_tokens == 669_506                        # int(81.7268 x 8192)
    small = run(a, pool=83_770 * 851_968, max_model_len=8192, max_num_batched_tokens=2048)
    assert small.blocks_per_request == 512 + 385                     # cdiv(4095 + 2048, 16) + 1 = 385


def test_disabling_hybrid_manager_promotes_windows_to_full():
    a = arch("mistralai--Mistral-7B-v0.1")                            # every layer W = 4096
    hybrid = run(a, pool=GiB, max_model_len=32768, max_num_batched_tokens=2048)
    full = run(a, pool=GiB, max_model_len=32768, max_num_batched_tokens=2048, disable_hybrid_kv_cache_manager=True)
    assert hybrid.blocks_per_request == (4095 + 2048 + 15) // 16 + 1 == 385
    assert full.blocks_per_request == 2048


# --- hybrid linear attention: Qwen3.6-35B-A3B ----------------------------------------------------

def test_gated_delta_net_hybrid():
    r = run(arch("Qwen--Qwen3.6-35B-A3B"), pool=10 * GiB, max_model_len=262144, enable_prefix_caching=False)
    # attention: 10 full layers x 2 KV heads x (256 + 256) x 2 B = 20,480 B/token
    assert r.kv_bytes_per_token == 20_480
    # GDN state per layer: conv (2 x 16 x 128 + 32 x 128) x (4 - 1) = 24,576 el x 2 B = 49,152
    #                      recurrent 32 x 128 x 128 = 524,288 el x 4 B (mamba_ssm_dtype float32) = 2,097,152
    assert r.state_bytes_per_request == 30 * 2_146_304
    # attention block raised: 16 x cdiv(2,146,304, 16 x 2,048) = 16 x 66 = 1,056 tokens
    assert r.block_size == 1_056
    # groups of 10 layers: 1 full + 3 state; page 1,056 x 2,048 = 2,162,688; block = 10 pages
    assert len(r.groups) == 4 and r.bytes_per_block == 10 * 2_162_688
    # per request: cdiv(262,144, 1,056) = 249 + 3 state pages = 252
    assert r.blocks_per_request == 252
    assert r.settings.mamba_cache_mode == "none"
    # prefix caching on (from 0.15): mamba "align" mode keeps 2 state pages per request in each of
    # the 3 state groups: 249 + 3 x 2 = 255 blocks, the same pool holds fewer requests
    aligned = run(arch("Qwen--Qwen3.6-35B-A3B"), pool=10 * GiB, max_model_len=262144, enable_prefix_caching=True)
    assert aligned.settings.mamba_cache_mode == "align" and aligned.blocks_per_request == 255
    assert aligned.num_blocks == r.num_blocks and aligned.max_concurrency < r.max_concurrency
    # before align mode existed, and on the newest line with prefix caching left to its default (on)
    old = run(arch("Qwen--Qwen3.6-35B-A3B"), pool=10 * GiB, max_model_len=262144, enable_prefix_caching=True,
              vllm_version="0.14.0")
    assert old.settings.mamba_cache_mode == "none" and old.blocks_per_request == 252
    default = run(arch("Qwen--Qwen3.6-35B-A3B"), pool=10 * GiB, max_model_len=262144)
    assert default.settings.mamba_cache_mode == "align"
    tp2 = run(arch("Qwen--Qwen3.6-35B-A3B"), pool=10 * GiB, max_model_len=262144, tp=2)
    assert tp2.kv_bytes_per_token == 10_240 and tp2.state_bytes_per_request == 30 * 1_073_152


def test_mtp_layers_join_the_full_attention_group():
    a = arch("Qwen--Qwen3.6-35B-A3B")
    r = run(a, pool=10 * GiB, max_model_len=32768, num_speculative_tokens=3)
    assert r.kv_bytes_per_token == 11 * 2_048        # 10 + 1 MTP layer
    # conv state gains num_spec columns: (8192 x (3 + 3)) x 2 B + 2,097,152
    assert r.state_bytes_per_request == 30 * (8192 * 6 * 2 + 2_097_152)


def test_mamba2_hybrid_nemotron():
    r = run(arch("nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16"), pool=10 * GiB, max_model_len=32768)
    # attention: 6 layers x 2 x (128 + 128) x 2 = 6,144 B/token
    assert r.kv_bytes_per_token == 6_144
    # mamba2: conv (64 x 64 + 2 x 8 x 128) x 3 = 18,432 el x 2 B; recurrent 64 x 64 x 128 x 4 B (fp32)
    assert r.state_bytes_per_request == 23 * (18_432 * 2 + 524_288 * 4)
    assert r.block_size == 16 * 131                   # cdiv(2,134,016, 16 x 1,024) = 131


# --- MoE: Mixtral --------------------------------------------------------------------------------

def test_moe_kv_is_the_attention_only():
    a = arch("mistralai--Mixtral-8x7B-Instruct-v0.1")
    # 32 layers x 8 KV heads x 256 x 2 B = 131,072 B/token; TP2 halves the heads
    assert run(a, pool=GiB, max_model_len=8192).kv_bytes_per_token == 131_072
    assert run(a, pool=GiB, max_model_len=8192, tp=2).kv_bytes_per_token == 65_536


# --- KV formats ----------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt, per_token", [
    ("auto", 57_344), ("bf16", 57_344), ("fp16", 57_344), ("fp32", 114_688), ("fp8", 28_672),
    ("fp8_e4m3", 28_672), ("fp8_e5m2", 28_672),
    ("int8_per_token_head", 28 * 4 * (256 + 8)),        # 1 B/element + 2 fp32 scales per head
    ("fp8_per_token_head", 28 * 4 * (256 + 8)),
    ("nvfp4", 28 * 4 * 256 * 9 // 16),                  # 0.5625 B/element
    ("turboquant_3bit_nc", -(-28 * 4 * 256 * 17 // 40)),  # 0.425 B/element: 12,185.6 rounded up
    ("turboquant_k8v4", 28 * 4 * (128 + 64)),            # K 1 B, V 0.5 B
    ("q8_0", 28 * 4 * 256 * 34 // 32), ("q4_0", 28 * 4 * 256 * 18 // 32), ("q5_0", 28 * 4 * 256 * 22 // 32),
    ("k8v4", 28 * 4 * (128 + 64)),                       # K 1 B, V 0.5 B: 0.75 B per element
])
def test_kv_formats(fmt, per_token):
    assert run(arch(QWEN7), pool=GiB, max_model_len=8192, kv_cache_dtype=fmt).kv_bytes_per_token == per_token


def test_unknown_kv_format_and_unpriceable_models():
    assert isinstance(run(arch(QWEN7), pool=GiB, max_model_len=8192, kv_cache_dtype="fp3"), Unpriceable)
    assert isinstance(run(arch("RedHatAI--DeepSeek-V4-Flash-NVFP4-FP8"), pool=GiB, max_model_len=8192), Unpriceable)


# --- verdicts ------------------------------------------------------------------------------------

def test_verdict_boundaries():
    a = arch(QWEN7)
    need = 2048 * 917_504                                   # one 32K request, bytes
    assert run(a, pool=need, max_model_len=32768).raw_verdict == "fits-clean"
    assert run(a, pool=need - 1, max_model_len=32768).raw_verdict == "wont-fit"
    pool = 20_480 * 917_504                                 # 20,480 blocks = 10 requests
    assert run(a, pool=pool, max_model_len=32768, max_num_seqs=10).raw_verdict == "fits-clean"
    # 11 x 2,048 = 22,528 > 20,480 x 1.05 = 21,504 -> the pool caps concurrency
    assert run(a, pool=pool, max_model_len=32768, max_num_seqs=11).raw_verdict == "fits-constrained"
    assert run(a, pool=0, max_model_len=32768).raw_verdict == "wont-fit"


def test_full_accounting_and_pp_min_over_ranks():
    a = arch(QWEN7)
    r = predict(a, weights_bytes=15_231_233_024, gpu_memory_bytes=[24 * GiB, 24 * GiB],
                shape=ServeShape(pp=2, max_model_len=32768, vllm_version="0.22.0"))
    assert len(r.ranks) == 2 and r.num_blocks == min(x.num_blocks for x in r.ranks)
    g = r.per_gpu
    assert g.budget_bytes == int(24 * GiB * 0.92)
    assert g.kv_pool_bytes == g.budget_bytes - g.weights_bytes - g.non_torch_bytes - g.activation_bytes - g.cudagraph_bytes
    assert r.ranks[0].kv_bytes_per_token == 14 * 4 * 256 * 2      # 14 layers per stage
    keys = set(r.to_json()) | set(r.to_json()["per_gpu"])
    assert {"budget_bytes", "weights_bytes", "non_torch_bytes", "activation_bytes", "cudagraph_bytes",
            "kv_pool_bytes", "kv_bytes_per_token", "block_size", "num_blocks", "kv_cache_tokens",
            "max_concurrency", "raw_verdict", "max_model_len_fit", "confidence"} <= keys


def test_weights_split_by_tp():
    a = arch(QWEN7)
    one = predict(a, weights_bytes=15_231_233_024, gpu_memory_bytes=[80 * GiB], shape=ServeShape(max_model_len=8192))
    two = predict(a, weights_bytes=15_231_233_024, gpu_memory_bytes=[80 * GiB], shape=ServeShape(tp=2, max_model_len=8192))
    assert one.per_gpu.weights_bytes == 15_231_233_024
    assert two.per_gpu.weights_bytes == 15_231_233_024 // 2         # vocab-parallel embeddings and head too


# --- version-dependent defaults -----------------------------------------------------------------

def test_versions_and_defaults():
    a = arch(QWEN7)
    assert parse_version("0.8.3.dev172+g2b93162f") == (0, 8, 3)
    assert parse_version(None) >= (0, 21, 0)
    r20 = resolve_defaults(a, ServeShape(vllm_version="0.20.2"), [24 * GiB])
    r21 = resolve_defaults(a, ServeShape(vllm_version="0.21.0"), [24 * GiB])
    assert (r20.mem_util, r20.cudagraphs_subtracted) == (0.90, False)
    assert (r21.mem_util, r21.cudagraphs_subtracted) == (0.92, True)
    assert resolve_defaults(a, ServeShape(vllm_version="0.21.0", enforce_eager=True), [24 * GiB]).cudagraphs_subtracted is False
    small = resolve_defaults(a, ServeShape(), [24 * GiB])
    assert (small.max_num_seqs, small.max_num_batched_tokens) == (256, 2048)
    assert resolve_defaults(a, ServeShape(entrypoint="llm"), [24 * GiB]).max_num_batched_tokens == 8192
    big = resolve_defaults(a, ServeShape(), [80 * GiB])
    assert (big.max_num_seqs, big.max_num_batched_tokens) == (1024, 8192)
    a100 = resolve_defaults(a, ServeShape(device_name="NVIDIA A100-SXM4-80GB"), [80 * GiB])
    assert (a100.max_num_seqs, a100.max_num_batched_tokens) == (256, 2048)
    huge = resolve_defaults(a, ServeShape(), [180 * GiB])
    assert (huge.max_num_seqs, huge.max_num_batched_tokens) == (1024, 16384)
    assert small.max_model_len == 131072                             # the base config's positions
    assert resolve_defaults(a, ServeShape(vllm_version="0.19.0"), [24 * GiB]).kv_tokens_formula == "blocks"


def test_capture_sizes():
    assert len(capture_sizes(256)) == 51 and capture_sizes(256)[-1] == 512
    assert capture_sizes(1) == [1, 2]
    assert capture_sizes(1, num_speculative_tokens=3) == [1, 2, 4, 8]


def test_graphs_outside_the_budget_before_0_21():
    a = arch(QWEN7)
    old = predict(a, weights_bytes=0, weights_bytes_per_rank=14 * GiB, gpu_memory_bytes=[24 * GiB],
                  shape=ServeShape(max_model_len=8192, vllm_version="0.20.0"))
    new = predict(a, weights_bytes=0, weights_bytes_per_rank=14 * GiB, gpu_memory_bytes=[24 * GiB],
                  shape=ServeShape(max_model_len=8192, vllm_version="0.21.0", mem_util=0.90))
    assert old.per_gpu.cudagraph_bytes == 0 and old.cudagraph_outside_budget_bytes > 0
    assert new.per_gpu.cudagraph_bytes > 0 and new.per_gpu.kv_pool_bytes < old.per_gpu.kv_pool_bytes


def test_activation_grows_with_batched_tokens_and_sampler():
    a = arch(QWEN7)
    base = dict(weights_bytes=0, weights_bytes_per_rank=0, gpu_memory_bytes=[80 * GiB])
    few = predict(a, shape=ServeShape(max_model_len=8192, max_num_seqs=8, max_num_batched_tokens=64), **base)
    many = predict(a, shape=ServeShape(max_model_len=8192, max_num_seqs=8, max_num_batched_tokens=8192), **base)
    seqs = predict(a, shape=ServeShape(max_model_len=8192, max_num_seqs=1024, max_num_batched_tokens=8192), **base)
    assert few.per_gpu.activation_bytes < many.per_gpu.activation_bytes < seqs.per_gpu.activation_bytes


# --- Gemma 4 31B: sliding + global layers with their own geometry --------------------------------

GEMMA31 = "google--gemma-4-31B-it"


def test_gemma4_31b_bytes_per_token_per_layer_group_bf16_tp2():
    # 50 sliding layers: 16 KV heads, head_dim 256; 10 global layers: num_global_key_value_heads 4,
    # global_head_dim 512, attention_k_eq_v (K and V still both cached). At TP2 on one rank:
    #   sliding: 8 heads x (256 + 256) x 2 B = 8,192 B/token/layer -> 16-token page 131,072 B
    #   global:  2 heads x (512 + 512) x 2 B = 4,096 B/token/layer -> page 65,536 B at 16 tokens,
    #            so vLLM doubles its block to 32 tokens (page 131,072 B)
    #   per token on the rank: 50 x 8,192 + 10 x 4,096 = 450,560 B
    r = run(arch(GEMMA31), pool=10 * GiB, tp=2, max_model_len=131072, max_num_batched_tokens=4096)
    assert r.kv_bytes_per_token == 50 * 8_192 + 10 * 4_096 == 450_560
    kinds = [(g.kind, g.num_layers, g.block_size, g.page_bytes, g.window) for g in r.groups]
    # groups of 10 layers (the minority type's count): 5 sliding groups + 1 global group
    assert kinds == [("sliding", 10, 16, 131_072, 1024)] * 5 + [("full", 10, 32, 131_072, None)]
    assert r.bytes_per_block == 10 * 131_072
    # one 131,072-token request: global 131,072 / 32 = 4,096 blocks; each sliding group holds
    # W - 1 + in-flight tokens = 1,023 + 4,096 -> cdiv(5,119, 16) + 1 = 321 blocks
    assert r.blocks_per_request == 4_096 + 5 * 321


def test_gemma4_31b_int8_per_token_head_page_padding_pr40391():
    # int8_per_token_head: 1 B per element + 8 B of fp32 K/V scales per head and token.
    #   sliding: 8 heads x (256 + 256 + 8) = 4,160 B/token/layer -> page 66,560 B
    #   global:  2 heads x (512 + 512 + 8) = 2,064 B/token/layer -> page 33,024 B; 66,560 / 33,024
    #            is not whole, so PR #40391 pads a global head to 1,040 B: block 32, page 66,560 B
    r = run(arch(GEMMA31), pool=10 * GiB, tp=2, max_model_len=262144, kv_cache_dtype="int8_per_token_head",
            max_num_batched_tokens=4096)
    assert r.kv_bytes_per_token == 50 * 4_160 + 10 * 2_064
    full = [g for g in r.groups if g.kind == "full"]
    assert [(g.block_size, g.page_bytes) for g in full] == [(32, 66_560)]
    assert r.bytes_per_block == 10 * 66_560
    assert r.blocks_per_request == 262_144 // 32 + 5 * 321


def test_gemma4_single_global_kv_head_is_replicated_at_tp2():
    # Gemma 4 12B: 8 KV heads (sliding), 1 global KV head (replicated when TP > heads).
    config = json.loads((HUB / GEMMA31 / "config.json").read_text())
    text = dict(config["text_config"], num_hidden_layers=48, num_key_value_heads=8, num_global_key_value_heads=1,
                hidden_size=3840, num_attention_heads=16,
                layer_types=config["text_config"]["layer_types"][:48])
    a = parse_config(dict(config, text_config=text))
    r = run(a, pool=int(8.16 * GiB), tp=2, max_model_len=131072, max_num_batched_tokens=4096,
            vllm_version=NEWEST_KNOWN_VLLM)   # a preview build of today's line booted it
    # sliding 4 x 512 x 2 = 4,096; global 1 x 1,024 x 2 = 2,048 B/token/layer on each rank
    assert r.kv_bytes_per_token == 40 * 4_096 + 8 * 2_048
    # the upstream 12B boot log: 8.16 GiB available -> 384,019 tokens (2.93x at 131,072)
    assert abs(r.kv_cache_tokens - 384_019) / 384_019 < 0.002


# --- PP stages without cache layers; Mamba-2 group replication -----------------------------------

NEMOTRON_H = "nvidia--Nemotron-H-56B-Base-8K"


@pytest.mark.parametrize("version", ["0.22.0", "0.19.0"])
def test_pp_stage_without_cache_layers_never_limits(version):
    """Bug 3: pattern M*---- at PP 2 puts only MLP layers on stage 1; it allocates no KV and must
    not be the limiting rank (0 tokens on >= 0.20, min() of no groups on <= 0.19)."""
    a = arch(NEMOTRON_H, hybrid_override_pattern="M*----", num_hidden_layers=6)
    r = run(a, pool=4 * GiB, pp=2, max_model_len=4096, vllm_version=version)
    assert r.per_gpu.rank == 0 and r.groups
    assert r.kv_cache_tokens > 0 and r.raw_verdict != "wont-fit"
    one = run(a, pool=4 * GiB, pp=1, max_model_len=4096, vllm_version=version)
    assert r.bytes_per_block == one.bytes_per_block


@pytest.mark.parametrize("n_groups,tp,expected", [(8, 1, 8), (8, 2, 8), (8, 8, 8), (1, 4, 4), (2, 2, 2)])
def test_mamba_groups_follow_vllm_replication(n_groups, tp, expected):
    from club3090.fit.memory import mamba_groups

    assert mamba_groups(n_groups, tp) == expected


def test_mamba_groups_neither_dividing_nor_single_are_unpriceable():
    from club3090.fit.memory import mamba_groups

    assert isinstance(mamba_groups(8, 16), Unpriceable)   # the old `groups + (tp - groups)` gave 16
    assert isinstance(mamba_groups(6, 4), Unpriceable)


def test_mamba_state_at_tp_above_groups_uses_replicated_conv():
    a = arch(NEMOTRON_H, n_groups=1, mamba_num_heads=256)
    layer = next(layer for layer in a.layers if layer.kind == "mamba2")
    r2 = run(a, pool=8 * GiB, tp=2, max_model_len=4096)
    conv = (layer.mamba_intermediate + 2 * 2 * layer.ssm_state_size) // 2 * (layer.conv_kernel - 1)
    recurrent = layer.mamba_num_heads // 2 * layer.mamba_head_dim * layer.ssm_state_size
    per_layer = (conv + recurrent) * 2
    mamba_layers = sum(1 for layer in a.layers if layer.kind == "mamba2")
    assert r2.state_bytes_per_request == per_layer * mamba_layers


def test_tp_geometry_rule_is_shared_with_the_gate():
    from club3090.fit.memory import tp_geometry_problem
    from club3090.gate import engine_support

    assert engine_support.tp_geometry_problem is tp_geometry_problem
    assert tp_geometry_problem(4, 32, 6) and not tp_geometry_problem(4, 32, 8) and not tp_geometry_problem(8, 32, 4)
    # KV heads 6 at TP 4: neither split nor replicated
    assert isinstance(run(arch(QWEN7, num_key_value_heads=6, num_attention_heads=28), pool=GiB, tp=4,
                          max_model_len=4096), Unpriceable)
