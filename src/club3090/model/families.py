"""The per-family data table: what one ``model_type`` needs beyond the generic reader
(transformers' class defaults, its layer layout, whether RoPE scaling stretches the context, a
state we do not model), as rows of :data:`FAMILIES`; and vLLM's default max_model_len, which
depends on the family.

Pure: no I/O, no environment, no printing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from club3090.model.config_reading import _int

__all__ = ["FAMILIES", "GENERIC", "Family", "family"]


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
# transformers' Gemma3TextConfig field defaults: google/gemma-3-4b-it's config.json names only
# hidden_size, intermediate_size and num_hidden_layers in its text_config
_GEMMA3_TEXT = Family(defaults={"vocab_size": 262208, "hidden_size": 2304, "intermediate_size": 9216,
                                "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4,
                                "head_dim": 256, "max_position_embeddings": 131072, "sliding_window": 4096,
                                "sliding_window_pattern": 6},
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

