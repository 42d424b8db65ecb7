"""The model's own maximum context: one rule for every command.

vLLM's ``_get_and_verify_max_len`` (vllm/config/model.py): the config's first length key
(``max_position_embeddings``, ``n_positions``, ``seq_length``, ...), scaled by the RoPE factor for
the scaling types that extend it (``yarn`` from ``original_max_position_embeddings``, ``dynamic``,
``linear``; not ``su``/``longrope``/``llama3``, whose key already states the extended length).
``model/families._derived_max_len`` applies it when the config is read; this is what every stage
asks (the automatic shape, vLLM's settings, the gate's cap on a profile's context).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover - typing only
    from club3090.model.architecture import Architecture

__all__ = ["model_max_len"]


def model_max_len(arch: "Architecture", fallback: int | None = None) -> int | None:
    """vLLM's default ``max_model_len`` for ``arch`` (rope scaling applied); ``fallback`` when the
    config states no length."""
    return arch.derived_max_model_len or arch.max_position_embeddings or fallback
