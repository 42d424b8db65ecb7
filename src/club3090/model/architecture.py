"""config.json -> :class:`Architecture`: per-layer attention/state geometry, read tolerantly.

This is the Hub boundary's tolerant reader (STYLE.md §10): it picks the keys it knows under
every spelling seen in the wild (``num_key_value_heads`` / ``n_head_kv`` /
``multi_query_group_num``, ``n_embd`` / ``n_layer`` / ``n_head``, ``text_config`` wrappers) and
ignores the rest. It never raises on odd input: when a dimension the fit engine needs is missing
or a layer type is stateful and unmodelled, ``unpriceable_reason`` says why and the fit engine
refuses (docs/DESIGN.md §17: no guessing). What a model family needs beyond the generic reader
(transformers' class defaults, its layer layout, whether RoPE scaling stretches the context, a
state we do not model) is a row of :data:`FAMILIES` (``families``), not a branch. The tolerant
key readers and range checks are ``config_reading``; the per-layer layout is ``layer_layout``.
This module owns :class:`Architecture` and :func:`parse_config`, and re-exports the public values
of the others.

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
from dataclasses import dataclass, field, replace
from typing import Any

from club3090.model.class_defaults import complete_text_config
from club3090.model.config_reading import (
    DIMENSION_CAPS,
    SIGNED_DIMENSIONS,
    TEXT_CONFIG_KEYS,
    _first_int,
    _first_str,
    _int,
    _merged_text_config,
    _out_of_range,
    _over_caps,
)
from club3090.model.families import _DSV4_CSA, FAMILIES, GENERIC, Family, _derived_max_len, family
from club3090.model.layer_layout import (
    ATTENTION_KINDS,
    LAYER_KINDS,
    STATE_KINDS,
    Dimensions,
    LayerLayout,
    LayerSpec,
    layer_layout,
)
from club3090.model.vision import VisionSpec, vision_problems, vision_spec

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
    class_defaults: tuple[str, ...] = ()          # text_config keys filled from transformers' class defaults

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def attention_layers(self) -> tuple[LayerSpec, ...]:
        return tuple(layer for layer in self.layers if layer.is_attention)

    @property
    def state_layers(self) -> tuple[LayerSpec, ...]:
        return tuple(layer for layer in self.layers if layer.is_state)

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
    config, defaulted, completed = complete_text_config(config)   # a wrapper's text_config left to class defaults
    cfg, inner, has_vision = _merged_text_config(config)
    archs = _architectures(config)
    model_type = str(config.get("model_type") or cfg.get("model_type") or "")
    text_model_type = str(cfg.get("model_type") or model_type)
    fam = family(text_model_type)      # the language model's family drives its layout and defaults
    _apply_family_defaults(cfg, fam)
    notes: list[str] = [completed] if completed else []
    problems: list[str] = _out_of_range(cfg)
    dims = _dimensions(cfg, fam, notes)
    oversized = _oversized(cfg, dims)
    problems.extend(oversized)
    problems.extend(vision_problems(config) if has_vision else ())
    problems.extend(_unmodelled(cfg, archs[0] if archs else "", model_type, text_model_type, fam, dims.use_mla))
    layout = layer_layout(cfg, fam, dims, oversized=bool(oversized))
    problems.extend(layout.problems)
    notes.extend(layout.notes)
    _check_required(dims, layout, problems, notes)
    return replace(_assemble(config, cfg, inner, has_vision=has_vision, archs=archs, model_type=model_type, fam=fam,
                             dims=dims, layout=layout, problems=problems, notes=notes),
                   class_defaults=defaulted)


def _architectures(config: Mapping[str, Any]) -> tuple[str, ...]:
    archs_raw = config.get("architectures")
    return tuple(a for a in archs_raw if isinstance(a, str)) if isinstance(archs_raw, list) else ()


def _apply_family_defaults(cfg: dict[str, Any], fam: Family) -> None:
    """A key the config leaves out takes the family's default (transformers' class default)."""
    for key, value in fam.defaults.items():
        if cfg.get(key) is None:
            cfg[key] = value


def _dimensions(cfg: Mapping[str, Any], fam: Family, notes: list[str]) -> Dimensions:
    """The generic dimensions: sizes, heads, context, attention window, MLA and MTP."""
    hidden = _first_int(cfg, "hidden_size", "n_embd", "d_model", "dim", "model_dim") or 0
    heads = _first_int(cfg, "num_attention_heads", "n_head", "num_heads", "n_heads") or 0
    head_dim = _first_int(cfg, "head_dim", "kv_channels", "attention_head_dim", "head_size")
    if not head_dim and hidden and heads:
        head_dim = hidden // heads
    kv_lora_rank = _first_int(cfg, "kv_lora_rank")
    qk_rope = _first_int(cfg, "qk_rope_head_dim")
    use_mla = bool(kv_lora_rank and kv_lora_rank > 0)
    if use_mla:
        head_dim = (_first_int(cfg, "qk_nope_head_dim") or 0) + (qk_rope or 0) or head_dim
    sliding = _first_int(cfg, "sliding_window", "sliding_window_size")
    if cfg.get("use_sliding_window") is False or (sliding is not None and sliding <= 0):
        sliding = None
    intermediate = _intermediate(cfg, fam, hidden)
    experts, top_k, moe_inter, shared_inter, num_dense = _moe(cfg, intermediate)
    return Dimensions(
        num_layers=_first_int(cfg, "num_hidden_layers", "n_layer", "num_layers", "n_layers") or 0,
        hidden=hidden, heads=heads, kv_heads=_kv_heads(cfg, heads), head_dim=head_dim or 0,
        intermediate=intermediate, vocab=_vocab(cfg), max_pos=_max_position(cfg, notes),
        sliding=sliding, chunk=_first_int(cfg, "attention_chunk_size"),
        k_eq_v=cfg.get("attention_k_eq_v") is True, use_mla=use_mla, kv_lora_rank=kv_lora_rank,
        qk_rope=qk_rope, v_head_dim=_first_int(cfg, "v_head_dim"),
        mtp=_first_int(cfg, "num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_layers",
                       "n_mtp_layers") or 0,
        num_experts=experts, top_k=top_k, moe_inter=moe_inter, shared_inter=shared_inter, num_dense=num_dense)


def _kv_heads(cfg: Mapping[str, Any], heads: int) -> int:
    kv_heads = _first_int(cfg, "num_key_value_heads", "n_head_kv", "num_kv_heads", "n_kv_heads")
    if kv_heads is None and cfg.get("multi_query_attention") is True:
        kv_heads = _first_int(cfg, "multi_query_group_num")
    if kv_heads is None and (cfg.get("multi_query") is True):
        kv_heads = 1
    return heads if kv_heads is None else kv_heads


def _intermediate(cfg: Mapping[str, Any], fam: Family, hidden: int) -> int:
    intermediate = _first_int(cfg, "intermediate_size", "ffn_hidden_size", "ff_intermediate_size",
                              "n_inner", "ffn_dim", "mlp_dim") or 0
    if not intermediate and hidden and fam.mlp_hidden_ratio:
        intermediate = fam.mlp_hidden_ratio * hidden
    return intermediate


def _vocab(cfg: Mapping[str, Any]) -> int:
    vocab = _first_int(cfg, "vocab_size", "padded_vocab_size", "embedding_size", "n_vocab") or 0
    padded = _first_int(cfg, "padded_vocab_size", "embedding_size")
    return padded if padded and padded > vocab else vocab


def _max_position(cfg: Mapping[str, Any], notes: list[str]) -> int | None:
    for key in ("max_position_embeddings", "n_positions", "seq_length", "max_sequence_length", "n_ctx",
                "max_seq_len"):
        value = _int(cfg.get(key))
        if value is not None and value <= 0:
            notes.append(f"{key} {value} is invalid (not positive): ignored, as if absent")
        elif value is not None:
            return value
    return None


def _torch_dtype(config: Mapping[str, Any], inner: Mapping[str, Any], cfg: Mapping[str, Any]) -> str | None:
    # the outer config's dtype first (vLLM reads the top-level config), then the text model's
    torch_dtype = _first_str(config, "torch_dtype", "dtype") or _first_str(inner, "torch_dtype", "dtype")
    if torch_dtype is None:
        if cfg.get("bf16") is True:
            torch_dtype = "bfloat16"
        elif cfg.get("fp16") is True:
            torch_dtype = "float16"
    return torch_dtype


def _tie_word_embeddings(config: Mapping[str, Any], cfg: Mapping[str, Any], fam: Family) -> bool:
    tie = cfg.get("tie_word_embeddings")
    if not isinstance(tie, bool):
        tie = config.get("tie_word_embeddings") if isinstance(config.get("tie_word_embeddings"), bool) else \
            fam.tie_word_embeddings
    return bool(tie)


def _moe(cfg: Mapping[str, Any], intermediate: int) -> tuple[int, int, int | None, int | None, int]:
    """(routed experts, experts per token, expert MLP size, shared-expert MLP size, leading dense layers)."""
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
    return num_experts, top_k, moe_inter, shared_inter, num_dense


def _oversized(cfg: Mapping[str, Any], dims: Dimensions) -> list[str]:
    """The sanity caps, checked before any per-layer table is built."""
    oversized = _over_caps({
        "num_hidden_layers": dims.num_layers, "mtp_layers": dims.mtp, "num_attention_heads": dims.heads,
        "num_key_value_heads": dims.kv_heads, "head_dim": dims.head_dim, "kv_lora_rank": dims.kv_lora_rank,
        "qk_rope_head_dim": dims.qk_rope, "hidden_size": dims.hidden, "intermediate_size": dims.intermediate,
        "moe_intermediate_size": dims.moe_inter, "shared_expert_intermediate_size": dims.shared_inter,
        "vocab_size": dims.vocab, "num_experts": dims.num_experts, "num_experts_per_tok": dims.top_k,
    })
    for key in ("layer_types", "hybrid_override_pattern"):
        value = cfg.get(key)
        if isinstance(value, (list, str)) and len(value) > DIMENSION_CAPS["num_hidden_layers"]:
            oversized.append(f"{key} lists {len(value)} layers, over the sanity cap of "
                             f"{DIMENSION_CAPS['num_hidden_layers']}")
    return oversized


def _unmodelled(cfg: Mapping[str, Any], architecture: str, model_type: str, text_model_type: str, fam: Family,
                use_mla: bool) -> list[str]:
    """Stateful families and caches the fit engine does not model."""
    problems = []
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
    return problems


def _check_required(dims: Dimensions, layout: LayerLayout, problems: list[str], notes: list[str]) -> None:
    """The dimensions every priced model needs, and those its attention layers need."""
    if layout.num_hidden_layers <= 0:
        problems.append("num_hidden_layers missing or not positive")
    if dims.hidden <= 0:
        problems.append("hidden_size missing or not positive")
    if dims.vocab <= 0:
        problems.append("vocab_size missing or not positive")
    if any(layer.kind in ("full", "sliding", "chunked") for layer in layout.layers):
        heads, kv_heads = dims.heads, dims.kv_heads
        if heads <= 0:
            problems.append("num_attention_heads missing or not positive")
        if kv_heads <= 0 or dims.head_dim <= 0:
            problems.append("KV heads / head_dim missing or not positive")
        elif heads > 0 and heads % kv_heads != 0 and not dims.k_eq_v:
            notes.append(f"{heads} attention heads are not a multiple of {kv_heads} KV heads")


def _assemble(config: Mapping[str, Any], cfg: Mapping[str, Any], inner: Mapping[str, Any], *, has_vision: bool,
              archs: tuple[str, ...], model_type: str, fam: Family, dims: Dimensions,
              layout: LayerLayout, problems: list[str], notes: list[str]) -> Architecture:
    qc = config.get("quantization_config") if isinstance(config.get("quantization_config"), Mapping) \
        else (cfg.get("quantization_config") if isinstance(cfg.get("quantization_config"), Mapping) else None)
    unique = list(dict.fromkeys(problems))  # dedupe, keep order
    experts = dims.num_experts
    mla = dims.use_mla
    return Architecture(
        architecture=archs[0] if archs else "",
        model_type=model_type,
        config_architectures=archs,
        num_hidden_layers=layout.num_hidden_layers,
        hidden_size=dims.hidden,
        num_attention_heads=dims.heads,
        num_key_value_heads=dims.kv_heads,
        head_dim=dims.head_dim,
        intermediate_size=dims.intermediate,
        vocab_size=dims.vocab,
        max_position_embeddings=dims.max_pos,
        torch_dtype=_torch_dtype(config, inner, cfg),
        tie_word_embeddings=_tie_word_embeddings(config, cfg, fam),
        num_experts=experts,
        num_experts_per_tok=dims.top_k if experts else 0,
        moe_intermediate_size=dims.moe_inter if experts else None,
        shared_expert_intermediate_size=dims.shared_inter if experts else None,
        kv_lora_rank=dims.kv_lora_rank if mla else None,
        qk_rope_head_dim=dims.qk_rope if mla else None,
        sliding_window=dims.sliding,
        mtp_layers=dims.mtp,
        has_vision=has_vision,
        auto_map=_declares_auto_map(config),
        quantization_config=qc,
        layers=layout.layers,
        layer_kinds=tuple(sorted({layer.kind for layer in layout.layers})),
        unpriceable_reason="; ".join(unique) if unique else None,
        v_head_dim=dims.v_head_dim if mla else None,
        attention_chunk_size=dims.chunk,
        attention_k_eq_v=dims.k_eq_v,
        num_dense_layers=dims.num_dense,
        mamba_ssm_cache_dtype=_first_str(cfg, "mamba_ssm_cache_dtype", "mamba_ssm_dtype"),
        mtp_layer=layout.mtp_layer,
        derived_max_model_len=_derived_max_len(cfg, dims.max_pos, fam),
        notes=tuple(notes),
        vision=vision_spec(config) if has_vision else None,
    )
