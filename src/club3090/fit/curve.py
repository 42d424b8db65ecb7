"""What one fit says about other context lengths: concurrent full-length requests per context, and
the memory split per GPU, as plain values for pictures (the terminal bar, the HTML page).

``concurrency_at(result, length) -> float`` uses the fit's own KV pool and block layout, so at the
priced ``max_model_len`` it equals ``result.max_concurrency``. ``concurrency_curve(result)`` samples
it from 1K tokens to the largest context that fits. ``memory_segments(rank)`` is one GPU's split.

Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from club3090.fit.kv_layout import _blocks_for
from club3090.fit.memory import FitResult, RankBreakdown

__all__ = ["Segment", "concurrency_at", "concurrency_curve", "memory_segments"]

CURVE_POINTS = 12
CURVE_START = 1024


@dataclass(frozen=True, slots=True)
class Segment:
    key: str          # weights | non_torch | activation | cudagraphs | kv_pool | reserved
    label: str
    bytes: int


def _blocks_per_request(result: FitResult, length: int, num_spec: int) -> int:
    inflight = result.settings.max_num_batched_tokens
    return sum(_blocks_for(g.kind, g.block_size, length, g.window, inflight, num_spec) for g in result.groups)


def _num_spec(result: FitResult) -> int:
    """Speculative pages per state group, recovered from the fit's own blocks per request."""
    state_groups = sum(1 for g in result.groups if g.kind == "state")
    if not state_groups:
        return 0
    extra = result.blocks_per_request - _blocks_per_request(result, result.max_model_len, 0)
    return max(0, extra // state_groups)


def concurrency_at(result: FitResult, length: int) -> float:
    """Concurrent requests of ``length`` tokens the fit's KV pool holds (0 when none)."""
    per_request = _blocks_per_request(result, max(int(length), 1), _num_spec(result))
    return result.num_blocks / per_request if per_request > 0 else 0.0


def concurrency_curve(result: FitResult, points: int = CURVE_POINTS) -> tuple[tuple[int, float], ...]:
    """(context, concurrency) from :data:`CURVE_START` (or less) to the largest context that fits,
    log-spaced, always including the priced ``max_model_len`` when it fits."""
    top = max(result.max_model_len_fit, 1)
    start = min(CURVE_START, top)
    lengths = {start, top}
    if points > 2 and top > start:
        ratio = (top / start) ** (1 / (points - 1))
        lengths.update(int(start * ratio ** i) for i in range(1, points - 1))
    if result.max_model_len <= top:
        lengths.add(result.max_model_len)
    return tuple((n, concurrency_at(result, n)) for n in sorted(lengths))


def memory_segments(rank: RankBreakdown, cudagraph_outside_budget_bytes: int = 0) -> tuple[Segment, ...]:
    """One GPU's memory, left to right: weights, non-torch, activation peak, CUDA graphs, KV pool,
    and what stays outside ``--gpu-memory-utilization`` (reserved). Sums to the GPU's memory (a
    negative KV pool, i.e. an over-budget rank, shows as zero pool and no reserve)."""
    used = [Segment("weights", "weights", rank.weights_bytes),
            Segment("non_torch", "non-torch", rank.non_torch_bytes),
            Segment("activation", "activation peak", rank.activation_bytes),
            Segment("cudagraphs", "CUDA graphs", rank.cudagraph_bytes + cudagraph_outside_budget_bytes),
            Segment("kv_pool", "KV pool", max(rank.kv_pool_bytes, 0))]
    reserved = rank.gpu_memory_bytes - sum(s.bytes for s in used)
    used.append(Segment("reserved", "outside util", max(reserved, 0)))
    return tuple(s for s in used if s.bytes > 0 or s.key == "kv_pool")
