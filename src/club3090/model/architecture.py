"""config.json -> :class:`Architecture`: per-layer attention/state geometry, read tolerantly.

This is the Hub boundary's tolerant reader (STYLE.md §10): it picks the keys it knows under
every spelling seen in the wild (``num_key_value_heads`` / ``n_head_kv`` /
``multi_query_group_num``, ``n_embd`` / ``n_layer`` / ``n_head``, ``text_config`` wrappers) and
ignores the rest. It never raises on odd input: when a dimension the fit engine needs is missing
or a layer type is stateful and unmodelled, ``unpriceable_reason`` says why and the fit engine
refuses (VLLM_MEMORY.md: no guessing). What a model family needs beyond the generic reader
(transformers' class defaults, its layer layout, whether RoPE scaling stretches the context, a
state we do not model) is a row of :data:`FAMILIES`, not a branch.

Layer kinds (``LayerSpec.kind``):

- ``full``     full attention (MHA / GQA / MQA); K and V heads of ``head_dim`` / ``v_head_dim``
- ``sliding``  sliding-window attention, ``window`` tokens
- ``chunked``  chunked local attention (Llama 4), ``window`` = attention chunk size
- ``mla``      multi-head latent attention: one latent "head" of ``kv_lora_rank + qk_rope_head_dim``
- ``gdn``      gated delta net (Qwen3-Next / Qwen3.5 / Qwen3.6 linear attention): fixed state
- ``mamba2``   Mamba-2 SSM mixer: fixed state
- ``linear``   another linear-attention layer (reserved; always unpriceable today)
- ``none``     no cache at all (MLP-only / MoE-only blocks of Nemotron-H)

Pure: no I/O, no environment, no printing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from club3090.model.vision import VisionSpec, vision_spec

__all__ = [
    "ATTENTION_KINDS",
    "DIMENSION_CAPS",
    "FAMILIES",
    "GENERIC",
    "LAYER_KINDS",
    "SIGNED_DIMENSIONS",
    "STATE_KINDS",
    "Architecture",
    "Family",
    "LayerSpec",
    "family",
    "parse_config",
]

LAYER_KINDS = ("full", "sliding", "chunked", "mla", "gdn", "mamba2", "linear", "none")
ATTENTION_KINDS = frozenset({"full", "sliding", "chunked", "mla"})
STATE_KINDS = frozenset({"gdn", "mamba2", "linear"})

# Sanity bounds, far above any released model (today: <= ~200 layers, 128 heads, hidden 32k,
# vocab ~262k, 512 experts). A config over one is corrupt or hostile: it is unpriceable, and no
# per-layer table is built for it (the table is one record per layer: 10**7 layers is gigabytes).
DIMENSION_CAPS: Mapping[str, int] = MappingProxyType({
    "num_hidden_layers": 10_000,
    "mtp_layers": 10_000,
    "num_attention_heads": 65_536,
    "num_key_value_heads": 65_536,
    "head_dim": 65_536,
    "kv_lora_rank": 65_536,
    "qk_rope_head_dim": 65_536,
    "hidden_size": 2**24,
    "intermediate_size": 2**24,
    "moe_intermediate_size": 2**24,
    "shared_expert_intermediate_size": 2**24,
    "vocab_size": 2**24,
    "num_experts": 65_536,
    "num_experts_per_tok": 65_536,
})


# Every integer key this reader takes a size, count or index from (under any spelling, wrapper
# keys included). A negative value, or one past MAX_DIMENSION, is malformed: the config is
# unpriceable, whichever key the reader ends up using. ``sliding_window`` and the context-length
# keys are not here: their non-positive values are read as "absent" (see ``_parse``).
SIGNED_DIMENSIONS = frozenset({
    "attention_chunk_size", "attention_head_dim", "conv_kernel", "d_conv", "d_model", "d_state", "dim",
    "embedding_size", "expand", "expert_intermediate_size", "experts_per_token", "ff_intermediate_size",
    "ffn_dim", "ffn_hidden_size", "first_k_dense_replace", "full_attention_interval", "global_head_dim",
    "head_dim", "head_size", "hidden_size", "intermediate_size", "kv_channels", "kv_lora_rank",
    "linear_conv_kernel_dim", "linear_key_head_dim", "linear_num_key_heads", "linear_num_value_heads",
    "linear_value_head_dim", "mamba_d_conv", "mamba_d_head", "mamba_d_state", "mamba_expand",
    "mamba_head_dim", "mamba_n_groups", "mamba_n_heads", "mamba_num_heads", "mlp_dim", "model_dim",
    "moe_intermediate_size", "moe_num_experts", "moe_shared_expert_intermediate_size", "moe_top_k",
    "moe_topk", "mtp_num_hidden_layers", "multi_query_group_num", "n_embd", "n_groups", "n_head",
    "n_head_kv", "n_heads", "n_inner", "n_kv_heads", "n_layer", "n_layers", "n_mtp_layers",
    "n_routed_experts", "n_shared_experts", "n_vocab", "ngroups", "no_rope_layer_interval",
    "num_attention_heads", "num_experts", "num_experts_per_tok", "num_global_key_value_heads",
    "num_heads", "num_hidden_layers", "num_key_value_heads", "num_kv_heads", "num_layers",
    "num_local_experts", "num_mtp_layers", "num_nextn_predict_layers", "num_routed_experts",
    "num_selected_experts", "num_shared_experts", "padded_vocab_size", "qk_nope_head_dim",
    "qk_rope_head_dim", "shared_expert_intermediate_size", "sliding_window_pattern", "ssm_state_size",
    "state_size", "top_k_experts", "v_head_dim", "vocab_size",
})
MAX_DIMENSION = 2**31 - 1


def _out_of_range(cfg: Mapping[str, Any]) -> list[str]:
    """The one sign-and-range check of the integers this module reads (see SIGNED_DIMENSIONS)."""
    problems = []
    for key in sorted(SIGNED_DIMENSIONS & cfg.keys()):
        value = _int(cfg[key])
        if value is not None and value < 0:
            problems.append(f"{key} {value} is negative")
        elif value is not None and value > MAX_DIMENSION:
            problems.append(f"{key} {value} is over the sanity cap of {MAX_DIMENSION}")
    return problems


@dataclass(frozen=True, slots=True)
class LayerSpec:
    """Cache geometry of one decoder layer (global, i.e. before any tensor-parallel split)."""

    kind: str
    num_kv_heads: int = 0          # attention KV heads (1 for MLA)
    head_dim: int = 0              # K head size (MLA: kv_lora_rank + qk_rope_head_dim)
    v_head_dim: int = 0            # V head size (0 for MLA)
    window: int | None = None      # sliding window or attention chunk, tokens
    k_eq_v: bool = False           # K and V share one tensor (stored once)
    # gated delta net
    linear_num_key_heads: int = 0
    linear_num_value_heads: int = 0
    linear_key_head_dim: int = 0
    linear_value_head_dim: int = 0
    # mamba-2
    mamba_num_heads: int = 0
    mamba_head_dim: int = 0
    ssm_state_size: int = 0
    n_groups: int = 0
    mamba_intermediate: int = 0
    conv_kernel: int = 0           # both state kinds

    @property
    def is_attention(self) -> bool:
        return self.kind in ATTENTION_KINDS

    @property
    def is_state(self) -> bool:
        return self.kind in STATE_KINDS


@dataclass(frozen=True, slots=True)
class Architecture:
    architecture: str
    model_type: str
    config_architectures: tuple[str, ...]
    num_hidden_layers: int
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    max_position_embeddings: int | None
    torch_dtype: str | None
    tie_word_embeddings: bool
    num_experts: int
    num_experts_per_tok: int
    moe_intermediate_size: int | None
    shared_expert_intermediate_size: int | None
    kv_lora_rank: int | None
    qk_rope_head_dim: int | None
    sliding_window: int | None
    mtp_layers: int
    has_vision: bool
    auto_map: bool
    quantization_config: Mapping[str, Any] | None
    layers: tuple[LayerSpec, ...]
    layer_kinds: tuple[str, ...]
    unpriceable_reason: str | None
    # additions beyond the DESIGN.md minimum
    v_head_dim: int | None = None                 # MLA value head size (weights/activation only)
    attention_chunk_size: int | None = None
    attention_k_eq_v: bool = False
    num_dense_layers: int = 0                     # MoE models: leading dense-MLP layers
    mamba_ssm_cache_dtype: str | None = None      # config's recurrent-state dtype, if it states one
    mtp_layer: LayerSpec | None = None            # cache geometry of one MTP/draft layer
    derived_max_model_len: int | None = None      # vLLM's default max_model_len (rope scaling applied)
    notes: tuple[str, ...] = field(default=())
    vision: VisionSpec | None = None              # the vision tower vLLM's encoder profiling runs

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def attention_layers(self) -> tuple[LayerSpec, ...]:
        return tuple(layer for layer in self.layers if layer.is_attention)

    @property
    def state_layers(self) -> tuple[LayerSpec, ...]:
        return tuple(layer for layer in self.layers if layer.is_state)


# ---------------------------------------------------------------------------------------------
# tolerant key access


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            return None
    return None


def _first_int(cfg: Mapping[str, Any], *keys: str) -> int | None:
    for key in keys:
        value = _int(cfg.get(key))
        if value is not None:
            return value
    return None


def _first_str(cfg: Mapping[str, Any], *keys: str) -> str | None:
    for key in keys:
        value = cfg.get(key)
        if isinstance(value, str) and value:
            return value
    return None


TEXT_CONFIG_KEYS = ("text_config", "llm_config", "language_config")   # where wrappers keep the text model


def _merged_text_config(config: Mapping[str, Any]) -> tuple[dict[str, Any], Mapping[str, Any], bool]:
    """Flatten a multimodal wrapper: the text model's keys win over the outer ones.

    Returns ``(merged, inner, has_vision)``; ``inner`` is the text model's own mapping (empty
    without a wrapper), for the keys where the outer config wins (``torch_dtype``)."""
    merged: dict[str, Any] = {k: v for k, v in config.items() if k not in TEXT_CONFIG_KEYS}
    inner = None
    for key in TEXT_CONFIG_KEYS:
        candidate = config.get(key)
        if isinstance(candidate, Mapping):
            inner = candidate
            break
    if inner is not None:
        for key, value in inner.items():
            if value is None and merged.get(key) is not None:
                continue
            merged[key] = value
    has_vision = any(isinstance(config.get(k), Mapping) for k in ("vision_config", "audio_config",
                                                                  "visual", "vision_tower_config"))
    return merged, inner if inner is not None else {}, has_vision


# ``layer_types`` entries -> layer kind
_LAYER_TYPE_KINDS: Mapping[str, str] = MappingProxyType({
    **dict.fromkeys(("full_attention", "attention", "global", "global_attention", "full", "attn"), "full"),
    **dict.fromkeys(("sliding_attention", "sliding", "local", "local_attention", "sliding_window"), "sliding"),
    **dict.fromkeys(("chunked_attention", "chunked"), "chunked"),
    **dict.fromkeys(("linear_attention", "gated_delta_net", "gdn"), "gdn"),
    **dict.fromkeys(("mamba", "mamba2", "ssm"), "mamba2"),
    **dict.fromkeys(("mlp", "moe", "ffn", "none"), "none"),
})
# ``hybrid_override_pattern`` symbols (Nemotron-H) -> layer kind
_PATTERN_KINDS: Mapping[str, str] = MappingProxyType({"M": "mamba2", "*": "full", "-": "none", "E": "none"})
_NOPE_LAYER_INTERVAL = 4    # transformers' Llama4 default: every 4th layer is global (NoPE)


@dataclass(frozen=True, slots=True)
class Family:
    """What one ``model_type`` needs beyond the generic reader: transformers' class behaviour that
    its config.json leaves unsaid. Adding a family is adding a row to :data:`FAMILIES`."""

    defaults: Mapping[str, Any] = field(default_factory=dict)  # class defaults for keys configs omit
    scales_max_len: bool = True          # False: vLLM ignores rope_scaling for the default max_model_len
    sliding_period: int | None = None    # every Nth layer full, the rest sliding (sliding_window_pattern wins)
    chunked_attention: bool = False      # chunked local layers, a global NoPE layer every no_rope_layer_interval
    uniform_kind: str | None = None      # every layer is this kind
    mlp_hidden_ratio: int | None = None  # no intermediate_size: this many x hidden_size
    tie_word_embeddings: bool = False    # the default when the config omits it
    key_aliases: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # extra spellings of a key
    unmodelled: str | None = None        # refusal ({model_type!r} is filled in): a cache we do not model


GENERIC = Family()
_RECURRENT = "model type {model_type!r} keeps a recurrent state club3090 does not model"
_DSV4_CSA = "DeepSeek-V4 compressed sparse attention (compress_ratios) is not modelled"
_GEMMA3_TEXT = Family(defaults={"vocab_size": 262208, "max_position_embeddings": 131072,
                                "sliding_window_pattern": 6, "num_key_value_heads": 4, "head_dim": 256},
                      scales_max_len=False, sliding_period=6, tie_word_embeddings=True)
_GPT2_MLP = Family(mlp_hidden_ratio=4)   # GPT-2 style: n_inner null means 4 x n_embd

# Keyed by model_type; a type without a row uses its base's (``gemma3_text`` -> ``gemma3``,
# ``lfm2_vl`` -> ``lfm2``: see :func:`family`), else :data:`GENERIC`.
FAMILIES: Mapping[str, Family] = MappingProxyType({
    "gemma2": Family(defaults={"max_position_embeddings": 8192, "sliding_window": 4096}, sliding_period=2,
                     tie_word_embeddings=True),
    "gemma3": _GEMMA3_TEXT,              # a wrapper whose text_config names no type: the text class
    "gemma3_text": _GEMMA3_TEXT,
    "gemma3n": Family(scales_max_len=False, sliding_period=6),
    "llama4": Family(chunked_attention=True),
    "llama4_text": Family(defaults={"attention_chunk_size": 8192}, chunked_attention=True),
    "mamba2": Family(uniform_kind="mamba2",
                     key_aliases={"mamba_num_heads": ("num_heads",), "mamba_head_dim": ("head_dim",)}),
    "gpt2": Family(mlp_hidden_ratio=4, tie_word_embeddings=True),
    "gpt_neox": _GPT2_MLP,
    "gptj": _GPT2_MLP,
    "gpt_bigcode": _GPT2_MLP,
    "deepseek_v4": Family(unmodelled=_DSV4_CSA),
    # a recurrent state we do not model (RWKV, xLSTM, RetNet, SSM hybrids other than Mamba-2)
    **dict.fromkeys(("rwkv", "rwkv5", "rwkv6", "rwkv7", "xlstm", "retnet", "mamba", "falcon_mamba", "jamba",
                     "zamba", "zamba2", "lfm2", "minimax_m1", "minimax_text_01", "kimi_linear", "plamo2",
                     "falcon_h1", "bamba", "recurrent_gemma"), Family(unmodelled=_RECURRENT)),
})


def family(model_type: str) -> Family:
    """The :data:`FAMILIES` row of ``model_type``, else of its base (``_suffix`` dropped), else
    :data:`GENERIC`."""
    name = model_type.lower()
    while name:
        if name in FAMILIES:
            return FAMILIES[name]
        name, sep, _ = name.rpartition("_")
        if not sep:
            break
    return GENERIC


def _derived_max_len(cfg: Mapping[str, Any], max_pos: int | None, fam: Family) -> int | None:
    """vLLM's default max_model_len: max_position_embeddings, scaled for yarn/dynamic RoPE."""
    if max_pos is None:
        return None
    scaling = cfg.get("rope_scaling")
    if not isinstance(scaling, Mapping) or not fam.scales_max_len:
        return max_pos
    rope_type = str(scaling.get("rope_type") or scaling.get("type") or "")
    factor = scaling.get("factor")
    if rope_type in ("", "su", "longrope", "llama3", "mrope", "default", "proportional") or \
            not isinstance(factor, (int, float)) or isinstance(factor, bool) or factor <= 1:
        return max_pos
    base = max_pos
    if rope_type == "yarn":
        original = _int(scaling.get("original_max_position_embeddings"))
        base = original if original is not None and original > 0 else max_pos
    return int(base * factor)


def _over_caps(values: Mapping[str, int | None]) -> list[str]:
    return [f"{key} {value} is over the sanity cap of {DIMENSION_CAPS[key]}"
            for key, value in values.items() if value is not None and value > DIMENSION_CAPS[key]]


def parse_config(config: Mapping[str, Any]) -> Architecture:
    """Read a config.json dict into an :class:`Architecture`. Never raises on odd input."""
    if not isinstance(config, Mapping):
        config = {}
    try:
        return _parse(config)
    except Exception as exc:  # noqa: BLE001 - the contract is "never raise on odd configs"
        return _empty(config, f"config could not be read: {type(exc).__name__}: {exc}")


def _declares_auto_map(config: Mapping[str, Any]) -> bool:
    """Custom modelling code, declared by the wrapper or by its text model (the trust-remote-code rule)."""
    models = (config, *(config.get(k) for k in TEXT_CONFIG_KEYS))
    return any(isinstance(c, Mapping) and isinstance(c.get("auto_map"), Mapping) and bool(c.get("auto_map"))
               for c in models)


def _empty(config: Mapping[str, Any], reason: str) -> Architecture:
    archs = config.get("architectures") if isinstance(config, Mapping) else None
    archs_t = tuple(a for a in archs if isinstance(a, str)) if isinstance(archs, list) else ()
    # an unreadable config still fails closed on trust-remote-code
    return Architecture(
        architecture=archs_t[0] if archs_t else "", model_type=str(config.get("model_type") or ""),
        config_architectures=archs_t, num_hidden_layers=0, hidden_size=0, num_attention_heads=0,
        num_key_value_heads=0, head_dim=0, intermediate_size=0, vocab_size=0,
        max_position_embeddings=None, torch_dtype=None, tie_word_embeddings=False, num_experts=0,
        num_experts_per_tok=0, moe_intermediate_size=None, shared_expert_intermediate_size=None,
        kv_lora_rank=None, qk_rope_head_dim=None, sliding_window=None, mtp_layers=0,
        has_vision=False, auto_map=_declares_auto_map(config), quantization_config=None, layers=(),
        layer_kinds=(), unpriceable_reason=reason)


def _parse(config: Mapping[str, Any]) -> Architecture:
    cfg, inner, has_vision = _merged_text_config(config)
    archs_raw = config.get("architectures")
    archs = tuple(a for a in archs_raw if isinstance(a, str)) if isinstance(archs_raw, list) else ()
    architecture = archs[0] if archs else ""
    model_type = str(config.get("model_type") or cfg.get("model_type") or "")
    text_model_type = str(cfg.get("model_type") or model_type)
    fam = family(text_model_type)      # the language model's family drives its layout and defaults
    for key, value in fam.defaults.items():
        if cfg.get(key) is None:
            cfg[key] = value
    notes: list[str] = []
    problems: list[str] = _out_of_range(cfg)

    num_layers = _first_int(cfg, "num_hidden_layers", "n_layer", "num_layers", "n_layers") or 0
    hidden = _first_int(cfg, "hidden_size", "n_embd", "d_model", "dim", "model_dim") or 0
    heads = _first_int(cfg, "num_attention_heads", "n_head", "num_heads", "n_heads") or 0

    kv_heads = _first_int(cfg, "num_key_value_heads", "n_head_kv", "num_kv_heads", "n_kv_heads")
    if kv_heads is None and cfg.get("multi_query_attention") is True:
        kv_heads = _first_int(cfg, "multi_query_group_num")
    if kv_heads is None and (cfg.get("multi_query") is True):
        kv_heads = 1
    if kv_heads is None:
        kv_heads = heads

    head_dim = _first_int(cfg, "head_dim", "kv_channels", "attention_head_dim", "head_size")
    if not head_dim and hidden and heads:
        head_dim = hidden // heads
    head_dim = head_dim or 0

    intermediate = _first_int(cfg, "intermediate_size", "ffn_hidden_size", "ff_intermediate_size",
                              "n_inner", "ffn_dim", "mlp_dim") or 0
    if not intermediate and hidden and fam.mlp_hidden_ratio:
        intermediate = fam.mlp_hidden_ratio * hidden
    vocab = _first_int(cfg, "vocab_size", "padded_vocab_size", "embedding_size", "n_vocab") or 0
    padded = _first_int(cfg, "padded_vocab_size", "embedding_size")
    if padded and padded > vocab:
        vocab = padded
    max_pos = None
    for key in ("max_position_embeddings", "n_positions", "seq_length", "max_sequence_length", "n_ctx",
                "max_seq_len"):
        value = _int(cfg.get(key))
        if value is not None and value <= 0:
            notes.append(f"{key} {value} is invalid (not positive): ignored, as if absent")
        elif value is not None:
            max_pos = value
            break
    derived_max_len = _derived_max_len(cfg, max_pos, fam)
    # the outer config's dtype first (vLLM reads the top-level config), then the text model's
    torch_dtype = _first_str(config, "torch_dtype", "dtype") or _first_str(inner, "torch_dtype", "dtype")
    if torch_dtype is None:
        if cfg.get("bf16") is True:
            torch_dtype = "bfloat16"
        elif cfg.get("fp16") is True:
            torch_dtype = "float16"
    tie = cfg.get("tie_word_embeddings")
    if not isinstance(tie, bool):
        tie = config.get("tie_word_embeddings") if isinstance(config.get("tie_word_embeddings"), bool) else \
            fam.tie_word_embeddings

    # --- MoE -------------------------------------------------------------------------------
    num_experts = _first_int(cfg, "num_experts", "num_local_experts", "n_routed_experts",
                             "moe_num_experts", "num_routed_experts") or 0
    if cfg.get("enable_moe_block") is False:
        num_experts = 0
    top_k = _first_int(cfg, "num_experts_per_tok", "experts_per_token", "top_k_experts", "moe_topk",
                       "moe_top_k", "num_selected_experts") or 0
    if num_experts and not top_k:
        top_k = 1
    moe_inter = _first_int(cfg, "moe_intermediate_size", "expert_intermediate_size")
    if num_experts and moe_inter is None:
        moe_inter = intermediate or None  # Mixtral-style: the expert MLP is intermediate_size
    shared_inter = _first_int(cfg, "shared_expert_intermediate_size", "moe_shared_expert_intermediate_size")
    n_shared = _first_int(cfg, "n_shared_experts", "num_shared_experts")
    if shared_inter is None and n_shared and moe_inter:
        shared_inter = n_shared * moe_inter
    num_dense = (_first_int(cfg, "first_k_dense_replace") or 0) if num_experts else 0

    # --- MLA -------------------------------------------------------------------------------
    kv_lora_rank = _first_int(cfg, "kv_lora_rank")
    qk_rope = _first_int(cfg, "qk_rope_head_dim")
    v_head_dim = _first_int(cfg, "v_head_dim")
    use_mla = bool(kv_lora_rank and kv_lora_rank > 0)
    if use_mla:
        qk_nope = _first_int(cfg, "qk_nope_head_dim") or 0
        head_dim = qk_nope + (qk_rope or 0) or head_dim

    # --- MTP -------------------------------------------------------------------------------
    mtp = _first_int(cfg, "num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_layers",
                     "n_mtp_layers") or 0

    # --- sliding window --------------------------------------------------------------------
    sliding = _first_int(cfg, "sliding_window", "sliding_window_size")
    if cfg.get("use_sliding_window") is False:
        sliding = None
    if sliding is not None and sliding <= 0:
        sliding = None
    chunk = _first_int(cfg, "attention_chunk_size")
    k_eq_v = cfg.get("attention_k_eq_v") is True

    # --- sanity caps: checked before any per-layer table is built ---------------------------
    layer_types = cfg.get("layer_types")
    pattern = cfg.get("hybrid_override_pattern")
    oversized = _over_caps({
        "num_hidden_layers": num_layers, "mtp_layers": mtp, "num_attention_heads": heads,
        "num_key_value_heads": kv_heads, "head_dim": head_dim, "kv_lora_rank": kv_lora_rank,
        "qk_rope_head_dim": qk_rope, "hidden_size": hidden, "intermediate_size": intermediate,
        "moe_intermediate_size": moe_inter, "shared_expert_intermediate_size": shared_inter,
        "vocab_size": vocab, "num_experts": num_experts, "num_experts_per_tok": top_k,
    })
    for key, value in (("layer_types", layer_types), ("hybrid_override_pattern", pattern)):
        if isinstance(value, (list, str)) and len(value) > DIMENSION_CAPS["num_hidden_layers"]:
            oversized.append(f"{key} lists {len(value)} layers, over the sanity cap of "
                             f"{DIMENSION_CAPS['num_hidden_layers']}")
    problems.extend(oversized)

    # --- unmodelled stateful families -----------------------------------------------------
    refused = next(((name.lower(), f.unmodelled) for name, f in ((model_type, family(model_type)),
                                                                 (text_model_type, fam)) if f.unmodelled), None)
    if refused is not None:
        problems.append(refused[1].format(model_type=refused[0]))
    if "rwkv" in architecture.lower() or any(k in cfg for k in ("attention_hidden_size", "rescale_every")):
        problems.append("RWKV-style recurrent state is not modelled")
    if isinstance(cfg.get("attn_type_list"), list) or isinstance(cfg.get("layers_block_type"), list):
        problems.append("per-layer linear-attention / SSM list (attn_type_list / layers_block_type) is not modelled")
    if cfg.get("compress_ratios") is not None:
        problems.append(_DSV4_CSA)
    elif use_mla and _first_int(cfg, "index_topk") is not None and refused is None:
        problems.append("DeepSeek sparse-attention indexer cache (index_topk) is not modelled")

    # --- layer list ------------------------------------------------------------------------
    layer_kinds_raw: list[str] | None = None

    if oversized:
        layer_kinds_raw = []  # unpriceable already; never allocate a table this large
    elif isinstance(layer_types, list) and layer_types and all(isinstance(x, str) for x in layer_types):
        layer_kinds_raw = []
        for name in layer_types:
            kind = _LAYER_TYPE_KINDS.get(name.lower())
            if kind is None:
                problems.append(f"unknown layer type {name!r} in layer_types")
            layer_kinds_raw.append(kind or "linear")
        if num_layers and len(layer_kinds_raw) != num_layers:
            if len(layer_kinds_raw) > num_layers:
                layer_kinds_raw = layer_kinds_raw[:num_layers]
            else:
                problems.append(f"layer_types has {len(layer_kinds_raw)} entries for {num_layers} layers")
        elif not num_layers:
            num_layers = len(layer_kinds_raw)
    elif isinstance(pattern, str) and pattern:
        layer_kinds_raw = []
        for char in pattern:
            if char not in _PATTERN_KINDS:
                problems.append(f"unknown layer symbol {char!r} in hybrid_override_pattern")
            layer_kinds_raw.append(_PATTERN_KINDS.get(char, "linear"))
        if not num_layers:
            num_layers = len(layer_kinds_raw)
        elif len(layer_kinds_raw) != num_layers:
            problems.append(f"hybrid_override_pattern has {len(layer_kinds_raw)} entries for "
                            f"{num_layers} layers")
    elif _first_int(cfg, "full_attention_interval") and (cfg.get("linear_num_value_heads") is not None):
        interval = _first_int(cfg, "full_attention_interval") or 1
        layer_kinds_raw = ["full" if (i + 1) % interval == 0 else "gdn" for i in range(num_layers)]
    elif (fam.sliding_period or _first_int(cfg, "sliding_window_pattern")) and sliding:
        period = _first_int(cfg, "sliding_window_pattern") or fam.sliding_period or 1
        layer_kinds_raw = ["full" if (i + 1) % period == 0 else "sliding" for i in range(num_layers)]
    elif chunk and (fam.chunked_attention or cfg.get("no_rope_layers") is not None):
        nope = cfg.get("no_rope_layers")
        if isinstance(nope, list) and len(nope) == num_layers:
            # no_rope_layers[i] == 1 means the layer uses RoPE: those are the chunked local ones
            layer_kinds_raw = ["chunked" if _int(v) else "full" for v in nope]
        else:
            interval = _first_int(cfg, "no_rope_layer_interval") or _NOPE_LAYER_INTERVAL
            layer_kinds_raw = ["full" if (i + 1) % interval == 0 else "chunked" for i in range(num_layers)]
    elif fam.uniform_kind:
        layer_kinds_raw = [fam.uniform_kind] * num_layers

    if layer_kinds_raw is None:
        if use_mla:
            layer_kinds_raw = ["mla"] * num_layers
        elif sliding and (max_pos is None or sliding < max_pos):
            layer_kinds_raw = ["sliding"] * num_layers
        else:
            layer_kinds_raw = ["full"] * num_layers
    elif use_mla:
        layer_kinds_raw = ["mla" if k == "full" else k for k in layer_kinds_raw]

    # a window as long as the model's context is plain full attention
    if sliding and max_pos and sliding >= max_pos:
        layer_kinds_raw = ["full" if k == "sliding" else k for k in layer_kinds_raw]
        notes.append(f"sliding_window {sliding} >= max_position_embeddings {max_pos}: priced as full attention")
    if "sliding" in layer_kinds_raw and not sliding:
        problems.append("sliding-attention layers without a sliding_window size")
    if "chunked" in layer_kinds_raw and not chunk:
        problems.append("chunked-attention layers without attention_chunk_size")

    # --- per-kind specs --------------------------------------------------------------------
    global_heads = _first_int(cfg, "num_global_key_value_heads") or kv_heads
    global_head_dim = _first_int(cfg, "global_head_dim") or head_dim
    conv_kernel = _first_int(cfg, "linear_conv_kernel_dim", "conv_kernel", "d_conv", "mamba_d_conv") or 4

    specs: dict[str, LayerSpec] = {
        "full": LayerSpec(kind="full", num_kv_heads=global_heads, head_dim=global_head_dim,
                          v_head_dim=global_head_dim, k_eq_v=k_eq_v),
        "sliding": LayerSpec(kind="sliding", num_kv_heads=kv_heads, head_dim=head_dim, v_head_dim=head_dim,
                             window=sliding),
        "chunked": LayerSpec(kind="chunked", num_kv_heads=kv_heads, head_dim=head_dim, v_head_dim=head_dim,
                             window=chunk),
        "none": LayerSpec(kind="none"),
        "linear": LayerSpec(kind="linear"),
    }
    if use_mla:
        specs["mla"] = LayerSpec(kind="mla", num_kv_heads=1, head_dim=(kv_lora_rank or 0) + (qk_rope or 0),
                                 v_head_dim=0)
        if not qk_rope:
            problems.append("MLA config without qk_rope_head_dim")
    if "gdn" in layer_kinds_raw:
        gdn = LayerSpec(
            kind="gdn",
            linear_num_key_heads=_first_int(cfg, "linear_num_key_heads") or 0,
            linear_num_value_heads=_first_int(cfg, "linear_num_value_heads") or 0,
            linear_key_head_dim=_first_int(cfg, "linear_key_head_dim") or 0,
            linear_value_head_dim=_first_int(cfg, "linear_value_head_dim") or 0,
            conv_kernel=conv_kernel)
        if min(gdn.linear_num_key_heads, gdn.linear_num_value_heads, gdn.linear_key_head_dim,
               gdn.linear_value_head_dim) <= 0:
            problems.append("linear-attention layers without linear_num_*_heads / linear_*_head_dim")
        specs["gdn"] = gdn
    if "mamba2" in layer_kinds_raw:
        aliases = fam.key_aliases
        m_heads = _first_int(cfg, "mamba_num_heads", "mamba_n_heads", *aliases.get("mamba_num_heads", ())) or 0
        m_head_dim = _first_int(cfg, "mamba_head_dim", "mamba_d_head", *aliases.get("mamba_head_dim", ())) or 0
        d_state = _first_int(cfg, "ssm_state_size", "state_size", "mamba_d_state", "d_state") or 0
        groups = _first_int(cfg, "n_groups", "mamba_n_groups", "ngroups") or 1
        inter = m_heads * m_head_dim
        if not inter:
            expand = _first_int(cfg, "expand", "mamba_expand") or 2
            inter = expand * hidden
        specs["mamba2"] = LayerSpec(kind="mamba2", mamba_num_heads=m_heads, mamba_head_dim=m_head_dim,
                                    ssm_state_size=d_state, n_groups=groups, mamba_intermediate=inter,
                                    conv_kernel=conv_kernel)
        if min(m_heads, m_head_dim, d_state) <= 0:
            problems.append("Mamba-2 layers without mamba_num_heads / mamba_head_dim / ssm_state_size")
    if "full" in layer_kinds_raw and k_eq_v:
        notes.append("attention_k_eq_v: full-attention layers share K and V weights; vLLM still caches both")

    layers = tuple(specs[k] for k in layer_kinds_raw)

    # MTP layers are full-attention decoder layers (MLA on DeepSeek)
    mtp_layer = None
    if mtp:
        mtp_layer = specs["mla"] if use_mla else LayerSpec(kind="full", num_kv_heads=global_heads,
                                                           head_dim=global_head_dim,
                                                           v_head_dim=global_head_dim,
                                                           k_eq_v=k_eq_v)

    # --- required dimensions ---------------------------------------------------------------
    if num_layers <= 0:
        problems.append("num_hidden_layers missing or not positive")
    if hidden <= 0:
        problems.append("hidden_size missing or not positive")
    if vocab <= 0:
        problems.append("vocab_size missing or not positive")
    if any(layer.kind in ("full", "sliding", "chunked") for layer in layers):
        if heads <= 0:
            problems.append("num_attention_heads missing or not positive")
        if kv_heads <= 0 or head_dim <= 0:
            problems.append("KV heads / head_dim missing or not positive")
        elif heads > 0 and heads % kv_heads != 0 and not k_eq_v:
            notes.append(f"{heads} attention heads are not a multiple of {kv_heads} KV heads")

    ssm_dtype = _first_str(cfg, "mamba_ssm_cache_dtype", "mamba_ssm_dtype")
    auto_map = _declares_auto_map(config)
    qc = config.get("quantization_config") if isinstance(config.get("quantization_config"), Mapping) \
        else (cfg.get("quantization_config") if isinstance(cfg.get("quantization_config"), Mapping) else None)

    # dedupe problems, keep order
    unique = list(dict.fromkeys(problems))
    return Architecture(
        architecture=architecture,
        model_type=model_type,
        config_architectures=archs,
        num_hidden_layers=num_layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=intermediate,
        vocab_size=vocab,
        max_position_embeddings=max_pos,
        torch_dtype=torch_dtype,
        tie_word_embeddings=bool(tie),
        num_experts=num_experts,
        num_experts_per_tok=top_k if num_experts else 0,
        moe_intermediate_size=moe_inter if num_experts else None,
        shared_expert_intermediate_size=shared_inter if num_experts else None,
        kv_lora_rank=kv_lora_rank if use_mla else None,
        qk_rope_head_dim=qk_rope if use_mla else None,
        sliding_window=sliding,
        mtp_layers=mtp,
        has_vision=has_vision,
        auto_map=auto_map,
        quantization_config=qc,
        layers=layers,
        layer_kinds=tuple(sorted({layer.kind for layer in layers})),
        unpriceable_reason="; ".join(unique) if unique else None,
        v_head_dim=v_head_dim if use_mla else None,
        attention_chunk_size=chunk,
        attention_k_eq_v=k_eq_v,
        num_dense_layers=num_dense,
        mamba_ssm_cache_dtype=ssm_dtype,
        mtp_layer=mtp_layer,
        derived_max_model_len=derived_max_len,
        notes=tuple(notes),
        vision=vision_spec(config) if has_vision else None,
    )
