"""The tolerant key readers of config.json: integers and strings under any of their spellings,
multimodal wrappers flattened onto their text model, and the one sign-and-range check of every
dimension the reader takes (``SIGNED_DIMENSIONS``, ``DIMENSION_CAPS``).

Pure: no I/O, no environment, no printing.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

__all__ = ["DIMENSION_CAPS", "MAX_DIMENSION", "SIGNED_DIMENSIONS", "TEXT_CONFIG_KEYS"]

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


def _over_caps(values: Mapping[str, int | None]) -> list[str]:
    return [f"{key} {value} is over the sanity cap of {DIMENSION_CAPS[key]}"
            for key, value in values.items() if value is not None and value > DIMENSION_CAPS[key]]



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


def int_or_zero(value: Any) -> int:
    """A config value as an integer; 0 when it is absent or not one (booleans are not numbers)."""
    return _int(value) or 0


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

