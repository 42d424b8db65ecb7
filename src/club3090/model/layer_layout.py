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

__all__ = ["ATTENTION_KINDS", "LAYER_KINDS", "STATE_KINDS", "LayerLayout", "LayerSpec", "layer_layout"]

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
class LayerLayout:
    """What :func:`layer_layout` read: the layer count (taken from the layer list when the config
    states none), one spec per layer, the MTP layer's spec, and the problems and notes found."""

    num_hidden_layers: int
    layers: tuple[LayerSpec, ...]
    mtp_layer: LayerSpec | None
    problems: tuple[str, ...]
    notes: tuple[str, ...]


def layer_layout(cfg: Mapping[str, Any], fam: Family, *, num_layers: int, oversized: bool, layer_types: Any,
                 pattern: Any, use_mla: bool, sliding: int | None, chunk: int | None, max_pos: int | None,
                 kv_heads: int, head_dim: int, k_eq_v: bool, kv_lora_rank: int | None, qk_rope: int | None,
                 hidden: int, mtp: int) -> LayerLayout:
    """One :class:`LayerSpec` per layer; ``oversized`` (a sanity cap is exceeded) builds no table."""
    problems: list[str] = []
    notes: list[str] = []
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
    return LayerLayout(num_hidden_layers=num_layers, layers=layers, mtp_layer=mtp_layer,
                       problems=tuple(problems), notes=tuple(notes))
