"""Per-layer cache layout: :class:`LayerSpec` (one decoder layer's attention/state geometry), the
layer kinds, and :func:`layer_layout`, which reads a config's layer list (``layer_types``,
``hybrid_override_pattern``, interval and family rules) into one spec per layer.

Pure: no I/O, no environment, no printing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from club3090.model.config_reading import _first_int, _int
from club3090.model.families import Family

__all__ = ["ATTENTION_KINDS", "LAYER_KINDS", "STATE_KINDS", "Dimensions", "LayerLayout", "LayerSpec", "layer_layout"]

LAYER_KINDS = ("full", "sliding", "chunked", "mla", "gdn", "mamba2", "linear", "none")
ATTENTION_KINDS = frozenset({"full", "sliding", "chunked", "mla"})
STATE_KINDS = frozenset({"gdn", "mamba2", "linear"})


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
class Dimensions:
    """The generic dimensions the config reader found; the layer list is built from them."""

    num_layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    max_pos: int | None
    sliding: int | None
    chunk: int | None
    k_eq_v: bool
    use_mla: bool
    kv_lora_rank: int | None
    qk_rope: int | None
    v_head_dim: int | None
    mtp: int
    # MoE, as the config states them (gated on ``num_experts`` where the architecture is assembled)
    num_experts: int = 0
    top_k: int = 0
    moe_inter: int | None = None
    shared_inter: int | None = None
    num_dense: int = 0


@dataclass(frozen=True, slots=True)
class LayerLayout:
    """What :func:`layer_layout` read: the layer count (taken from the layer list when the config
    states none), one spec per layer, the MTP layer's spec, and the problems and notes found."""

    num_hidden_layers: int
    layers: tuple[LayerSpec, ...]
    mtp_layer: LayerSpec | None
    problems: tuple[str, ...]
    notes: tuple[str, ...]


def layer_layout(cfg: Mapping[str, Any], fam: Family, dims: Dimensions, *, oversized: bool) -> LayerLayout:
    """One :class:`LayerSpec` per layer; ``oversized`` (a sanity cap is exceeded) builds no table."""
    problems: list[str] = []
    notes: list[str] = []
    num_layers, kinds = _layer_kinds(cfg, fam, dims, oversized, problems)
    kinds = _window_kinds(dims, kinds, problems, notes)
    specs = _specs(cfg, fam, dims, kinds, problems)
    if "full" in kinds and dims.k_eq_v:
        notes.append("attention_k_eq_v: full-attention layers share K and V weights; vLLM still caches both")
    # MTP layers are full-attention decoder layers (MLA on DeepSeek)
    mtp_layer = None
    if dims.mtp:
        mtp_layer = specs["mla"] if dims.use_mla else specs["full"]
    return LayerLayout(num_hidden_layers=num_layers, layers=tuple(specs[k] for k in kinds), mtp_layer=mtp_layer,
                       problems=tuple(problems), notes=tuple(notes))


def _layer_kinds(cfg: Mapping[str, Any], fam: Family, dims: Dimensions, oversized: bool,
                 problems: list[str]) -> tuple[int, list[str]]:
    """The layer count and each layer's kind: a listed layout, else a family or interval rule, else uniform."""
    num_layers = dims.num_layers
    kinds: list[str] | None
    if oversized:
        kinds = []  # unpriceable already; never allocate a table this large
    else:
        num_layers, kinds = _listed_kinds(cfg, num_layers, problems)
        if kinds is None:
            kinds = _rule_kinds(cfg, fam, dims)
    if kinds is None:
        if dims.use_mla:
            kinds = ["mla"] * num_layers
        elif dims.sliding and (dims.max_pos is None or dims.sliding < dims.max_pos):
            kinds = ["sliding"] * num_layers
        else:
            kinds = ["full"] * num_layers
    elif dims.use_mla:
        kinds = ["mla" if k == "full" else k for k in kinds]
    return num_layers, kinds


def _listed_kinds(cfg: Mapping[str, Any], num_layers: int, problems: list[str]) -> tuple[int, list[str] | None]:
    """``layer_types`` or ``hybrid_override_pattern``, when the config lists its layers."""
    layer_types, pattern = cfg.get("layer_types"), cfg.get("hybrid_override_pattern")
    if isinstance(layer_types, list) and layer_types and all(isinstance(x, str) for x in layer_types):
        kinds = []
        for name in layer_types:
            kind = _LAYER_TYPE_KINDS.get(name.lower())
            if kind is None:
                problems.append(f"unknown layer type {name!r} in layer_types")
            kinds.append(kind or "linear")
        if num_layers and len(kinds) != num_layers:
            if len(kinds) > num_layers:
                kinds = kinds[:num_layers]
            else:
                problems.append(f"layer_types has {len(kinds)} entries for {num_layers} layers")
        elif not num_layers:
            num_layers = len(kinds)
        return num_layers, kinds
    if isinstance(pattern, str) and pattern:
        kinds = []
        for char in pattern:
            if char not in _PATTERN_KINDS:
                problems.append(f"unknown layer symbol {char!r} in hybrid_override_pattern")
            kinds.append(_PATTERN_KINDS.get(char, "linear"))
        if not num_layers:
            num_layers = len(kinds)
        elif len(kinds) != num_layers:
            problems.append(f"hybrid_override_pattern has {len(kinds)} entries for {num_layers} layers")
        return num_layers, kinds
    return num_layers, None


def _rule_kinds(cfg: Mapping[str, Any], fam: Family, dims: Dimensions) -> list[str] | None:
    """The interval and family rules of configs that do not list their layers."""
    num_layers, sliding, chunk = dims.num_layers, dims.sliding, dims.chunk
    if _first_int(cfg, "full_attention_interval") and (cfg.get("linear_num_value_heads") is not None):
        interval = _first_int(cfg, "full_attention_interval") or 1
        return ["full" if (i + 1) % interval == 0 else "gdn" for i in range(num_layers)]
    if (fam.sliding_period or _first_int(cfg, "sliding_window_pattern")) and sliding:
        period = _first_int(cfg, "sliding_window_pattern") or fam.sliding_period or 1
        return ["full" if (i + 1) % period == 0 else "sliding" for i in range(num_layers)]
    if chunk and (fam.chunked_attention or cfg.get("no_rope_layers") is not None):
        nope = cfg.get("no_rope_layers")
        if isinstance(nope, list) and len(nope) == num_layers:
            # no_rope_layers[i] == 1 means the layer uses RoPE: those are the chunked local ones
            return ["chunked" if _int(v) else "full" for v in nope]
        interval = _first_int(cfg, "no_rope_layer_interval") or _NOPE_LAYER_INTERVAL
        return ["full" if (i + 1) % interval == 0 else "chunked" for i in range(num_layers)]
    if fam.uniform_kind:
        return [fam.uniform_kind] * num_layers
    return None


def _window_kinds(dims: Dimensions, kinds: list[str], problems: list[str], notes: list[str]) -> list[str]:
    sliding, max_pos = dims.sliding, dims.max_pos
    # a window as long as the model's context is plain full attention
    if sliding and max_pos and sliding >= max_pos:
        kinds = ["full" if k == "sliding" else k for k in kinds]
        notes.append(f"sliding_window {sliding} >= max_position_embeddings {max_pos}: priced as full attention")
    if "sliding" in kinds and not sliding:
        problems.append("sliding-attention layers without a sliding_window size")
    if "chunked" in kinds and not dims.chunk:
        problems.append("chunked-attention layers without attention_chunk_size")
    return kinds


def _specs(cfg: Mapping[str, Any], fam: Family, dims: Dimensions, kinds: list[str],
           problems: list[str]) -> dict[str, LayerSpec]:
    """One spec per layer kind present."""
    kv_heads, head_dim = dims.kv_heads, dims.head_dim
    global_heads = _first_int(cfg, "num_global_key_value_heads") or kv_heads
    global_head_dim = _first_int(cfg, "global_head_dim") or head_dim
    conv_kernel = _first_int(cfg, "linear_conv_kernel_dim", "conv_kernel", "d_conv", "mamba_d_conv") or 4
    specs: dict[str, LayerSpec] = {
        "full": LayerSpec(kind="full", num_kv_heads=global_heads, head_dim=global_head_dim,
                          v_head_dim=global_head_dim, k_eq_v=dims.k_eq_v),
        "sliding": LayerSpec(kind="sliding", num_kv_heads=kv_heads, head_dim=head_dim, v_head_dim=head_dim,
                             window=dims.sliding),
        "chunked": LayerSpec(kind="chunked", num_kv_heads=kv_heads, head_dim=head_dim, v_head_dim=head_dim,
                             window=dims.chunk),
        "none": LayerSpec(kind="none"),
        "linear": LayerSpec(kind="linear"),
    }
    if dims.use_mla:
        specs["mla"] = LayerSpec(kind="mla", num_kv_heads=1,
                                 head_dim=(dims.kv_lora_rank or 0) + (dims.qk_rope or 0), v_head_dim=0)
        if not dims.qk_rope:
            problems.append("MLA config without qk_rope_head_dim")
    if "gdn" in kinds:
        specs["gdn"] = _gdn_spec(cfg, conv_kernel, problems)
    if "mamba2" in kinds:
        specs["mamba2"] = _mamba_spec(cfg, fam, dims.hidden, conv_kernel, problems)
    return specs


def _gdn_spec(cfg: Mapping[str, Any], conv_kernel: int, problems: list[str]) -> LayerSpec:
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
    return gdn


def _mamba_spec(cfg: Mapping[str, Any], fam: Family, hidden: int, conv_kernel: int,
                problems: list[str]) -> LayerSpec:
    aliases = fam.key_aliases
    m_heads = _first_int(cfg, "mamba_num_heads", "mamba_n_heads", *aliases.get("mamba_num_heads", ())) or 0
    m_head_dim = _first_int(cfg, "mamba_head_dim", "mamba_d_head", *aliases.get("mamba_head_dim", ())) or 0
    d_state = _first_int(cfg, "ssm_state_size", "state_size", "mamba_d_state", "d_state") or 0
    groups = _first_int(cfg, "n_groups", "mamba_n_groups", "ngroups") or 1
    inter = m_heads * m_head_dim
    if not inter:
        expand = _first_int(cfg, "expand", "mamba_expand") or 2
        inter = expand * hidden
    if min(m_heads, m_head_dim, d_state) <= 0:
        problems.append("Mamba-2 layers without mamba_num_heads / mamba_head_dim / ssm_state_size")
    return LayerSpec(kind="mamba2", mamba_num_heads=m_heads, mamba_head_dim=m_head_dim, ssm_state_size=d_state,
                     n_groups=groups, mamba_intermediate=inter, conv_kernel=conv_kernel)
