"""architecture.parse_config over every fixture config and the odd shapes the reader must survive."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from club3090.model.architecture import (
    DIMENSION_CAPS,
    FAMILIES,
    GENERIC,
    LAYER_KINDS,
    family,
    parse_config,
)
from tests.fixtures_path import fixture_path

HUB = fixture_path("hub")
FIXTURES = sorted(p.parent.name for p in HUB.glob("*/config.json"))


def load(name: str):
    return parse_config(json.loads((HUB / name / "config.json").read_text()))


@pytest.mark.parametrize("name", FIXTURES)
def test_every_fixture_parses_without_raising(name):
    arch = load(name)
    assert len(arch.layers) == arch.num_hidden_layers
    assert arch.layer_kinds == tuple(sorted({layer.kind for layer in arch.layers}))
    if name != "RedHatAI--DeepSeek-V4-Flash-NVFP4-FP8":
        assert arch.unpriceable_reason is None, arch.unpriceable_reason


@pytest.mark.parametrize("name, kinds", [
    ("Qwen--Qwen2.5-7B", {"full": 28}),                    # use_sliding_window: false
    ("mistralai--Mistral-7B-v0.1", {"sliding": 32}),
    ("google--gemma-2-2b-it", {"sliding": 13, "full": 13}),
    ("google--gemma-3-1b-it", {"sliding": 22, "full": 4}),  # sliding_window_pattern 6
    ("google--gemma-3-27b-it", {"sliding": 52, "full": 10}),
    ("google--gemma-4-31B-it", {"sliding": 50, "full": 10}),
    ("openai--gpt-oss-20b", {"sliding": 12, "full": 12}),
    ("meta-llama--Llama-4-Scout-17B-16E-Instruct", {"chunked": 36, "full": 12}),
    ("deepseek-ai--DeepSeek-V2-Lite", {"mla": 27}),
    ("moonshotai--Kimi-K2-Instruct", {"mla": 61}),
    ("Qwen--Qwen3-Next-80B-A3B-Instruct", {"gdn": 36, "full": 12}),
    ("Qwen--Qwen3.6-35B-A3B", {"gdn": 30, "full": 10}),
    ("nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", {"mamba2": 23, "none": 23, "full": 6}),
])
def test_layer_kinds(name, kinds):
    assert dict(Counter(layer.kind for layer in load(name).layers)) == kinds


def test_moe_keys_of_every_family():
    mixtral = load("mistralai--Mixtral-8x7B-Instruct-v0.1")
    assert (mixtral.num_experts, mixtral.num_experts_per_tok, mixtral.moe_intermediate_size) == (8, 2, 14336)
    ds = load("deepseek-ai--DeepSeek-V3")
    assert (ds.num_experts, ds.num_experts_per_tok, ds.moe_intermediate_size) == (256, 8, 2048)
    assert ds.shared_expert_intermediate_size == 2048 and ds.num_dense_layers == 3 and ds.mtp_layers == 1
    qn = load("Qwen--Qwen3-Next-80B-A3B-Instruct")
    assert (qn.num_experts, qn.num_experts_per_tok, qn.shared_expert_intermediate_size) == (512, 10, 512)
    nem = load("nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16")
    assert (nem.num_experts, nem.shared_expert_intermediate_size) == (128, 3712)
    gemma = load("google--gemma-4-26B-A4B")
    assert (gemma.num_experts, gemma.num_experts_per_tok, gemma.moe_intermediate_size) == (128, 8, 704)
    assert load("google--gemma-4-31B-it").num_experts == 0
    assert load("Qwen--Qwen2.5-7B").num_experts == 0


def test_multimodal_text_config_and_mtp():
    q = load("Qwen--Qwen3.6-35B-A3B")
    assert q.has_vision and q.hidden_size == 2048 and q.vocab_size == 248320 and q.mtp_layers == 1
    assert q.mamba_ssm_cache_dtype == "float32" and q.torch_dtype == "bfloat16"
    g3 = load("google--gemma-3-27b-it")       # text_config omits vocab/max positions: class defaults
    assert g3.vocab_size == 262208 and g3.max_position_embeddings == 131072
    assert g3.derived_max_model_len == 131072   # vLLM does not scale gemma3's linear RoPE


def test_mla_and_geometry_details():
    d = load("deepseek-ai--DeepSeek-V2-Lite")
    assert (d.kv_lora_rank, d.qk_rope_head_dim, d.layers[0].head_dim, d.layers[0].num_kv_heads) == (512, 64, 576, 1)
    assert d.derived_max_model_len == 163840    # yarn: original 4096 x factor 40
    g4 = load("google--gemma-4-26B-A4B")
    full = next(layer for layer in g4.layers if layer.kind == "full")
    sliding = next(layer for layer in g4.layers if layer.kind == "sliding")
    assert (full.num_kv_heads, full.head_dim, full.k_eq_v) == (2, 512, True)
    assert (sliding.num_kv_heads, sliding.head_dim, sliding.window) == (8, 256, 1024)
    nem = load("nvidia--Nemotron-H-56B-Base-8K")
    m = next(layer for layer in nem.layers if layer.kind == "mamba2")
    assert (m.mamba_num_heads, m.mamba_head_dim, m.ssm_state_size, m.n_groups, m.mamba_intermediate) == (256, 64, 256, 8, 16384)


def test_odd_key_names():
    gpt2 = load("openai-community--gpt2-large")
    assert (gpt2.num_hidden_layers, gpt2.hidden_size, gpt2.num_attention_heads, gpt2.num_key_value_heads,
            gpt2.head_dim, gpt2.max_position_embeddings, gpt2.intermediate_size) == (36, 1280, 20, 20, 64, 1024, 5120)
    glm = load("THUDM--chatglm3-6b")
    assert (glm.num_hidden_layers, glm.num_key_value_heads, glm.head_dim, glm.vocab_size) == (28, 2, 128, 65024)
    assert glm.auto_map
    qwen1 = load("Qwen--Qwen-72B")
    assert (qwen1.num_key_value_heads, qwen1.head_dim) == (64, 128)
    falcon = parse_config({"architectures": ["FalconForCausalLM"], "model_type": "falcon", "hidden_size": 4544,
                           "n_layer": 32, "n_head": 71, "n_head_kv": 1, "vocab_size": 65024})
    assert (falcon.num_key_value_heads, falcon.head_dim, falcon.unpriceable_reason) == (1, 64, None)


@pytest.mark.parametrize("config", [
    {}, None, [], {"num_hidden_layers": "many"}, {"layer_types": 5, "num_hidden_layers": -3},
    {"text_config": "x", "hidden_size": None}, {"num_hidden_layers": 2, "hidden_size": 8, "vocab_size": 10,
                                                 "num_attention_heads": 0},
])
def test_never_raises_and_flags_missing_dimensions(config):
    arch = parse_config(config)
    assert arch.unpriceable_reason


@pytest.mark.parametrize("config, word", [
    ({"model_type": "rwkv", "hidden_size": 2048, "num_hidden_layers": 24, "vocab_size": 50277,
      "attention_hidden_size": 2048}, "RWKV"),
    ({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
      "vocab_size": 100, "layer_types": ["full_attention", "retention"]}, "unknown layer type"),
    ({"model_type": "nemotron_h", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
      "vocab_size": 100, "hybrid_override_pattern": "M?"}, "unknown layer symbol"),
    ({"model_type": "jamba", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
      "vocab_size": 100}, "recurrent state"),
])
def test_unknown_stateful_layers_are_unpriceable(config, word):
    assert word in (parse_config(config).unpriceable_reason or "")


# ---------------------------------------------------------------------------------------------
# sanity caps and invalid context lengths

_BASE = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 4,
         "hidden_size": 256, "num_attention_heads": 8, "num_key_value_heads": 2, "intermediate_size": 512,
         "vocab_size": 1000, "max_position_embeddings": 4096}
_CAP_KEYS = {"mtp_layers": "num_nextn_predict_layers"}  # cap name -> config key, where they differ


def test_base_config_is_priceable():
    arch = parse_config(_BASE)
    assert arch.unpriceable_reason is None and len(arch.layers) == 4 and arch.notes == ()


@pytest.mark.parametrize("cap", sorted(DIMENSION_CAPS))
@pytest.mark.parametrize("over", [1, 10**12])
def test_dimension_over_its_cap_is_unpriceable_without_a_layer_table(cap, over):
    arch = parse_config({**_BASE, _CAP_KEYS.get(cap, cap): DIMENSION_CAPS[cap] + over})
    assert arch.unpriceable_reason is not None
    assert arch.layers == () and arch.layer_kinds == ()


def test_caps_are_far_above_real_models_and_inclusive():
    assert DIMENSION_CAPS["num_hidden_layers"] >= 1000 and DIMENSION_CAPS["vocab_size"] >= 2**20
    arch = parse_config({**_BASE, "num_hidden_layers": DIMENSION_CAPS["num_hidden_layers"]})
    assert arch.unpriceable_reason is None and len(arch.layers) == DIMENSION_CAPS["num_hidden_layers"]


@pytest.mark.parametrize("extra", [
    {"num_hidden_layers": 10**7},
    {"num_hidden_layers": 1e300},
    {"layer_types": ["full_attention"] * (DIMENSION_CAPS["num_hidden_layers"] + 1)},
    {"num_hidden_layers": ..., "layer_types": ["full_attention"] * (DIMENSION_CAPS["num_hidden_layers"] + 1)},
    {"hybrid_override_pattern": "M" * 10**6},
])
def test_huge_layer_lists_are_refused_before_they_are_built(extra):
    config = {**_BASE, **extra}
    config = {k: v for k, v in config.items() if v is not ...}
    arch = parse_config(config)
    assert arch.unpriceable_reason is not None and arch.layers == ()


@pytest.mark.parametrize("value", [-1, 0, "-5", -1.0])
def test_non_positive_max_position_embeddings_is_absent_with_a_note(value):
    arch = parse_config({**_BASE, "max_position_embeddings": value})
    assert arch.max_position_embeddings is None and arch.derived_max_model_len is None
    assert len(arch.notes) == 1  # invalid, not silently missing
    assert arch.unpriceable_reason is None
    missing = parse_config({k: v for k, v in _BASE.items() if k != "max_position_embeddings"})
    assert missing.max_position_embeddings is None and missing.notes == ()


def test_invalid_max_position_embeddings_falls_through_to_the_next_spelling():
    arch = parse_config({**_BASE, "max_position_embeddings": -1, "n_positions": 2048})
    assert arch.max_position_embeddings == 2048 and len(arch.notes) == 1


def test_non_positive_yarn_original_length_falls_back_to_max_position_embeddings():
    arch = parse_config({**_BASE, "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                                   "original_max_position_embeddings": -1}})
    assert arch.derived_max_model_len == 4 * 4096


# ---------------------------------------------------------------------------------------------
# multimodal wrappers: what the text model declares counts (derive's trust-remote-code rule)

_REMOTE_CODE = {"AutoModelForCausalLM": "modeling_x.M"}


def wrapper_config(*, inner_auto_map: bool = True, outer_dtype: str | None = None) -> dict:
    """A multimodal wrapper whose custom modelling code is declared only inside text_config."""
    text = {k: v for k, v in _BASE.items() if k != "architectures"}
    text = {**text, "model_type": "qwen2", "torch_dtype": "float16",
            **({"auto_map": _REMOTE_CODE} if inner_auto_map else {})}
    return {"architectures": ["Qwen2ForCausalLM"], "model_type": "acme_vl", "text_config": text,
            "vision_config": {"hidden_size": 32}, **({"torch_dtype": outer_dtype} if outer_dtype else {})}


def write_wrapper_folder(folder, **kwargs):
    """A local model folder (config.json + one small bf16 safetensors file) for ``wrapper_config``."""
    from tests.safetensors_fixtures import build

    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(wrapper_config(**kwargs)), encoding="utf-8")
    header, data_bytes = build({"model.embed_tokens.weight": ("BF16", [1000, 256]),
                                "model.norm.weight": ("BF16", [256])})
    (folder / "model.safetensors").write_bytes(header + bytes(data_bytes))
    return folder


@pytest.mark.parametrize("where", ["outer", "inner"])
def test_auto_map_in_the_wrapper_or_its_text_config_sets_auto_map(where):
    config = wrapper_config(inner_auto_map=where == "inner")
    if where == "outer":
        config["auto_map"] = _REMOTE_CODE
    assert parse_config(config).auto_map is True
    assert parse_config(wrapper_config(inner_auto_map=False)).auto_map is False
    assert parse_config({**config, "auto_map": {}, "text_config": {**config["text_config"], "auto_map": {}}}
                        ).auto_map is False


def test_torch_dtype_outer_config_first_then_text_config():
    assert parse_config(wrapper_config()).torch_dtype == "float16"
    assert parse_config(wrapper_config(outer_dtype="bfloat16")).torch_dtype == "bfloat16"
    assert parse_config({**wrapper_config(), "dtype": "float32"}).torch_dtype == "float32"


def test_derive_on_a_local_wrapper_with_text_config_auto_map_requires_remote_code(tmp_path):
    from club3090.edges.resolve import resolve as derive
    from club3090.model.spec import ModelSpec
    from club3090.settings import Settings

    folder = write_wrapper_folder(tmp_path / "wrapper")
    spec = derive(str(folder), Settings(hf_home=tmp_path / "hf"))
    assert isinstance(spec, ModelSpec), spec
    assert (spec.arch.auto_map, spec.requires_trust_remote_code, spec.compute_dtype) == (True, True, "float16")
    plain = derive(str(write_wrapper_folder(tmp_path / "plain", inner_auto_map=False)), Settings(hf_home=tmp_path / "hf"))
    assert (plain.arch.auto_map, plain.requires_trust_remote_code) == (False, False)


# ---------------------------------------------------------------------------------------------
# per-family behaviour is data (FAMILIES), looked up by model_type and its base type


def test_family_lookup_falls_back_to_the_base_type():
    assert family("gemma3_text") is FAMILIES["gemma3_text"]
    assert family("lfm2_vl") is FAMILIES["lfm2"] and family("LFM2_VL") is FAMILIES["lfm2"]
    assert family("llama4_text").chunked_attention and family("llama4").chunked_attention
    assert family("qwen2") is GENERIC and family("") is GENERIC and family("mambaout") is GENERIC


def test_every_family_row_is_consistent():
    for name, fam in FAMILIES.items():
        assert name == name.lower()
        assert fam.uniform_kind in (None, *LAYER_KINDS), name
        assert fam.sliding_period is None or fam.sliding_period >= 1, name
        assert set(fam.defaults) <= {"vocab_size", "max_position_embeddings", "sliding_window_pattern",
                                     "num_key_value_heads", "head_dim", "sliding_window",
                                     "attention_chunk_size", "hidden_size", "intermediate_size",
                                     "num_hidden_layers", "num_attention_heads"}, name
        if fam.unmodelled:
            fam.unmodelled.format(model_type=name)  # the template fills in


@pytest.mark.parametrize("model_type", ["jamba", "lfm2_vl", "deepseek_v4", "falcon_mamba"])
def test_unmodelled_families_are_unpriceable(model_type):
    assert parse_config({**_BASE, "model_type": model_type}).unpriceable_reason
    assert parse_config({**_BASE, "model_type": "qwen2_vl"}).unpriceable_reason is None


def test_gemma3_4b_names_only_three_text_keys_and_transformers_fills_the_rest():
    """google/gemma-3-4b-it's text_config gives hidden_size, intermediate_size and the layer count;
    heads, KV heads, head_dim and vocabulary are Gemma3TextConfig's defaults (8, 4, 256, 262,208)."""
    configs = json.loads(fixture_path("calibration", "vllm_startup_configs.json").read_text())
    config = {k: v for k, v in configs["google/gemma-3-4b-it"].items() if not k.startswith("config_")}
    assert "num_attention_heads" not in config["text_config"]
    arch = parse_config(config)
    assert arch.unpriceable_reason is None
    assert (arch.hidden_size, arch.num_hidden_layers, arch.num_attention_heads, arch.num_key_value_heads,
            arch.head_dim, arch.vocab_size) == (2560, 34, 8, 4, 256, 262208)
    assert [layer.kind for layer in arch.layers].count("full") == 5       # every 6th of 34 layers


def test_gemma3_wrapper_without_a_text_model_type_gets_the_text_class_defaults():
    text = {"hidden_size": 256, "num_hidden_layers": 12, "num_attention_heads": 8, "intermediate_size": 512,
            "sliding_window": 512, "rope_scaling": {"rope_type": "linear", "factor": 8.0}}
    arch = parse_config({"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
                         "text_config": text})
    assert (arch.vocab_size, arch.max_position_embeddings, arch.num_key_value_heads, arch.head_dim) == \
        (262208, 131072, 4, 256)
    assert arch.derived_max_model_len == 131072     # gemma3: rope_scaling does not stretch it
    assert dict(Counter(layer.kind for layer in arch.layers)) == {"sliding": 10, "full": 2}
    assert arch.unpriceable_reason is None


def test_family_layouts_and_the_config_pattern_override():
    gemma2 = parse_config({**_BASE, "model_type": "gemma2", "sliding_window": 256})
    assert [layer.kind for layer in gemma2.layers] == ["sliding", "full"] * 2
    pattern = parse_config({**_BASE, "model_type": "llama", "sliding_window": 256, "sliding_window_pattern": 4})
    assert [layer.kind for layer in pattern.layers] == ["sliding"] * 3 + ["full"]
    llama4 = parse_config({**_BASE, "model_type": "llama4_text"})      # attention_chunk_size: class default
    assert [layer.kind for layer in llama4.layers] == ["chunked"] * 3 + ["full"]
    assert llama4.attention_chunk_size == 8192
    gpt2 = parse_config({**_BASE, "model_type": "gpt2", "intermediate_size": None})
    assert (gpt2.intermediate_size, gpt2.tie_word_embeddings) == (4 * 256, True)
    mamba = parse_config({"model_type": "mamba2", "hidden_size": 256, "num_hidden_layers": 2, "vocab_size": 1000,
                          "num_heads": 8, "head_dim": 64, "state_size": 128})
    assert {layer.kind for layer in mamba.layers} == {"mamba2"}
    assert (mamba.layers[0].mamba_num_heads, mamba.layers[0].mamba_head_dim) == (8, 64)


@pytest.mark.parametrize("where", ["auto_map", "text_config", "llm_config", "language_config"])
def test_unreadable_config_still_fails_closed_on_remote_code(monkeypatch, where):
    import club3090.model.architecture as A

    def broken(_config):
        raise ZeroDivisionError("a config the parser cannot read")

    monkeypatch.setattr(A, "_parse", broken)
    auto = {"AutoModelForCausalLM": "modeling_x.XForCausalLM"}
    config = {"architectures": ["XForCausalLM"]}
    config.update({"auto_map": auto} if where == "auto_map" else {where: {"auto_map": auto}})
    arch = A.parse_config(config)
    assert arch.unpriceable_reason and arch.auto_map is True
    assert A.parse_config({"architectures": ["XForCausalLM"]}).auto_map is False
