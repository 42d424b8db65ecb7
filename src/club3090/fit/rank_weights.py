"""Model weights per GPU rank: decoder layers per pipeline stage as vLLM splits them, and the
bytes of the checkpoint each tensor- and pipeline-parallel rank holds.

Pure: no I/O, no environment, no clock, no printing.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

from club3090.fit.kv_layout import CannotPrice
from club3090.model.architecture import Architecture

__all__ = ["pp_layer_counts", "weights_per_rank"]


def pp_layer_counts(num_layers: int, pp: int, partition: Sequence[int] | None = None) -> list[int]:
    """Decoder layers per pipeline stage, as vLLM's ``get_pp_indices`` (vllm/distributed/utils.py)
    splits them: ``VLLM_PP_LAYER_PARTITION`` (``partition``) when given, else an even split whose
    remainder goes one layer each to the stages before the last, nearest the last first (the last
    stage also holds the final norm and the LM head). Raises ``CannotPrice`` on a partition vLLM
    refuses (wrong length or sum)."""
    if partition is not None:
        parts = [int(p) for p in partition]
        if len(parts) != pp:
            raise CannotPrice(f"VLLM_PP_LAYER_PARTITION has {len(parts)} stages for PP {pp}")
        if sum(parts) != num_layers or any(p < 0 for p in parts):
            raise CannotPrice(f"VLLM_PP_LAYER_PARTITION sums to {sum(parts)}; the model has {num_layers} layers")
        return parts
    base = num_layers // pp
    parts = [base] * pp
    for i in range(2, num_layers % pp + 2):
        parts[-i] += 1
    return parts


def _layer_params(arch: Architecture) -> list[int] | None:
    """Relative parameter count of each decoder layer when they differ (a MoE model whose first
    layers are dense: DeepSeek-V3's three dense layers weigh a twentieth of an expert layer);
    None when every layer weighs the same."""
    layers = arch.num_hidden_layers
    if not arch.is_moe or not 0 < arch.num_dense_layers < layers:
        return None
    h = arch.hidden_size
    attn = h * arch.num_attention_heads * arch.head_dim * 2 + h * arch.num_key_value_heads * arch.head_dim * 2
    dense = attn + 3 * h * arch.intermediate_size
    expert = 3 * h * (arch.moe_intermediate_size or arch.intermediate_size)
    moe = attn + expert * arch.num_experts + 3 * h * (arch.shared_expert_intermediate_size or 0) + h * arch.num_experts
    return [dense if i < arch.num_dense_layers else moe for i in range(layers)]


def weights_per_rank(arch: Architecture, weights_bytes: int, tp: int, pp: int, stage: int,
                      first: int, layers_here: int, model_bytes: int, repack: Fraction = Fraction(0)) -> int:
    embed = arch.vocab_size * arch.hidden_size * model_bytes
    head = 0 if arch.tie_word_embeddings else embed
    if embed + head >= weights_bytes:           # tiny or odd checkpoints: just split
        embed = head = 0
    body = weights_bytes - embed - head
    sizes = _layer_params(arch) if pp > 1 else None
    if sizes is not None:
        share = body * sum(sizes[first:first + layers_here]) // sum(sizes)
    else:
        share = body * layers_here // max(arch.num_hidden_layers, 1)
    total = share + int(share * repack)        # kernel repacking (Marlin FP8 scales) grows the body
    if stage == 0:
        total += embed
    if stage == pp - 1:
        total += head if (head or pp == 1) else embed   # a tied head is a second copy on the last stage
    per_rank = total // tp
    attn_layers = sum(1 for layer in arch.layers if layer.kind in ("full", "sliding", "chunked"))
    if tp > arch.num_key_value_heads > 0 and attn_layers:
        # K/V projections are replicated once TP exceeds the KV heads
        kv_proj = arch.hidden_size * arch.head_dim * 2 * model_bytes
        extra = kv_proj - kv_proj * arch.num_key_value_heads // tp
        per_rank += extra * attn_layers * layers_here // max(arch.num_hidden_layers, 1)
    return per_rank

