"""vLLM's KV page layout on one rank (the exact part of the fit engine; docs/DESIGN.md §17).

Per-layer page sizes for every attention and state kind, vLLM's grouping of layers into
equal-size groups sharing one block pool (``v1/core/kv_cache_utils.py``), blocks per request and
the bytes one request of a given length needs (``_check_enough_kv_cache_memory``). Also the one
owner of the TP geometry rule and of Mamba-2 group replication.

Pure: no I/O.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from functools import lru_cache
from typing import Any

from club3090.fit.kv_formats import KvStorage
from club3090.model.architecture import LayerSpec

__all__ = [
    "K_EQ_V_STORED_ONCE",
    "CannotPrice",
    "KvGroup",
    "Layout",
    "Unpriceable",
    "blocks_per_request",
    "bytes_needed",
    "kv_page_layout",
    "mamba_groups",
    "tp_geometry_problem",
]


@dataclass(frozen=True, slots=True)
class Unpriceable:
    """The fit engine cannot price this model/shape (unmodelled layer type, impossible TP, ...):
    a verdict (``no-fit-model``), returned by :func:`memory.predict` instead of a ``FitResult``."""

    reason: str

    def __str__(self) -> str:
        return self.reason


class CannotPrice(Exception):
    """Raised deep in the pricing maths, turned into :class:`Unpriceable` by :func:`memory.predict`;
    never leaves the fit package."""



# K=V tied caches (Gemma 4 `attention_k_eq_v`, global layers only): vLLM's attention layer still
# allocates a K and a V plane, so they cost full price. Evidence: vLLM PR #40391 sizes a Gemma 4
# global head at 1,032 B/token in int8_per_token_head (512 K + 512 V + 8 scale bytes, padded to
# 1,040), and the measured pools (gemma-bf16-mtp 196,527 tokens, gemma-int8-mtp 447K, the 12B boot
# log's 384,019 tokens / 8.16 GiB) are reproduced with K + V and are 2x off with K only
# (docs/ACCURACY.md).
K_EQ_V_STORED_ONCE = False


@dataclass(frozen=True, slots=True)
class KvGroup:
    kind: str                  # full | sliding | chunked | mla | state
    num_layers: int            # real layers in this group (<= group size; the rest is padding)
    block_size: int            # tokens per block for this group
    page_bytes: int            # one layer's page
    window: int | None = None





def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _kv_heads_on_rank(total: int, tp: int) -> int:
    return max(1, total // tp)


def _attn_token_bytes(layer: LayerSpec, tp: int, fmt: KvStorage, model_bytes: int) -> Fraction:
    """Bytes one token costs in one attention layer on one rank."""
    if layer.kind == "mla":
        if fmt.mla_bytes_per_token is not None:
            return Fraction(fmt.mla_bytes_per_token)
        k, _v = fmt.element_bytes(model_bytes)
        return layer.head_dim * k                       # one latent head, never split by TP
    heads = _kv_heads_on_rank(layer.num_kv_heads, tp)
    k, v = fmt.element_bytes(model_bytes)
    v_dim = layer.v_head_dim or (layer.head_dim if layer.k_eq_v else 0)
    if layer.k_eq_v and K_EQ_V_STORED_ONCE:
        v_dim = 0
    per_head = layer.head_dim * k + v_dim * v + fmt.scale_bytes_per_head
    return heads * per_head


def tp_geometry_problem(tp: int, heads: int | None, kv_heads: int | None) -> str | None:
    """Why vLLM cannot split attention over ``tp`` ranks, else None. The one owner of the rule
    (the gate's [C0] and :func:`predict` both use it): the query heads must divide by TP; the KV
    heads are split when TP divides them and replicated when TP is a multiple of them
    (``config/model.py::get_num_kv_heads``)."""
    if tp <= 1:
        return None
    if heads and heads % tp:
        return f"tp={tp} does not divide the {heads} attention heads"
    if kv_heads and kv_heads % tp and tp % kv_heads:
        return f"tp={tp} neither divides nor is a multiple of the {kv_heads} KV heads"
    return None


def mamba_groups(n_groups: int, tp: int) -> int | Unpriceable:
    """Mamba-2 groups across all ranks after vLLM's replication (MambaMixer2,
    ``extra_groups_for_head_shards``): TP dividing the groups shards them as they are; a single
    group is replicated once per rank; any other non-dividing count vLLM refuses to load."""
    if n_groups % tp == 0:
        return n_groups
    if n_groups == 1:
        return tp
    return Unpriceable(f"{n_groups} Mamba groups are neither divisible by TP {tp} nor a single group")


def _state_bytes(layer: LayerSpec, tp: int, num_spec: int, conv_bytes: int, ssm_bytes: int) -> int:
    """One request's recurrent state for one layer on one rank (mamba_utils state shapes)."""
    if layer.kind == "gdn":
        conv_dim = (2 * layer.linear_num_key_heads * layer.linear_key_head_dim
                    + layer.linear_num_value_heads * layer.linear_value_head_dim)
        conv = (conv_dim // tp) * (layer.conv_kernel - 1 + num_spec)
        recurrent = (layer.linear_num_value_heads // tp) * layer.linear_value_head_dim * layer.linear_key_head_dim
        return conv * conv_bytes + recurrent * ssm_bytes
    if layer.kind == "mamba2":
        groups = mamba_groups(layer.n_groups, tp)
        if isinstance(groups, Unpriceable):
            raise CannotPrice(groups.reason)
        conv_dim = layer.mamba_intermediate + 2 * groups * layer.ssm_state_size
        conv = (conv_dim // tp) * (layer.conv_kernel - 1 + num_spec)
        recurrent = (layer.mamba_num_heads // tp) * layer.mamba_head_dim * layer.ssm_state_size
        return conv * conv_bytes + recurrent * ssm_bytes
    raise CannotPrice(f"layer kind {layer.kind!r} has no state model")


@dataclass(frozen=True, slots=True)
class Layout:
    groups: tuple[KvGroup, ...]
    group_size: int
    bytes_per_block: int
    attn_block_size: int
    kv_bytes_per_token: int
    state_bytes_per_request: int
    layer_needs: tuple[tuple[str, int, int, int | None], ...]  # (kind, block_size, page, window) per layer
    state_pages: int = 1       # state pages a request holds before speculative ones (2: mamba "align" mode)


def kv_page_layout(layers: Sequence[LayerSpec], *, tp: int, fmt: KvStorage, model_bytes: int,
                   block_size: int | None, num_spec: int = 0, conv_bytes: int = 2, ssm_bytes: int = 2,
                   disable_hybrid: bool = False, max_model_len: int = 0, state_pages: int = 1) -> Layout:
    """Per-layer pages, vLLM's grouping into equal-size groups and bytes per block for one rank.
    Remembered per argument set: a shape priced on every release line in use repeats it."""
    return _layout(tuple(layers), tp, fmt, model_bytes, block_size, num_spec, conv_bytes, ssm_bytes,
                   disable_hybrid, state_pages)


@lru_cache(maxsize=512)
def _layout(layers: tuple[LayerSpec, ...], tp: int, fmt: KvStorage, model_bytes: int, block_size: int | None,
            num_spec: int, conv_bytes: int, ssm_bytes: int, disable_hybrid: bool, state_pages: int) -> Layout:
    attn = [layer for layer in layers if layer.is_attention]
    state = [layer for layer in layers if layer.is_state]
    if disable_hybrid:
        attn = [replace(layer, kind="full", window=None) if layer.kind in ("sliding", "chunked") else layer
                for layer in attn]
    bs = block_size or 16
    # a model repeats a few layer shapes many times: the exact fractions once per shape
    shapes = Counter(attn)
    per_shape = {layer: _attn_token_bytes(layer, tp, fmt, model_bytes) for layer in shapes}
    kv_per_token = sum((per_shape[layer] * n for layer, n in shapes.items()), Fraction(0))

    state_page = 0
    if state:
        state_page = max(_state_bytes(layer, tp, num_spec, conv_bytes, ssm_bytes) for layer in state)
        if attn and block_size is None:
            # raise the attention block size until one attention page holds a state page
            # (platforms/interface.py::update_block_size_for_backend; kernel alignment 16, 128 for MLA)
            align = 128 if any(layer.kind == "mla" for layer in attn) else 16
            one_token = max(per_shape.values())
            bs = max(bs, align * math.ceil(Fraction(state_page) / (align * one_token)))

    # one page per layer; key = spec identity (kind, page, window)
    entries: list[tuple[str, int, int, int | None]] = []
    page_of = {layer: math.ceil(bs * token_bytes) for layer, token_bytes in per_shape.items()}
    for layer in attn:
        entries.append((layer.kind, bs, page_of[layer], layer.window))
    if state:
        att_page = max((e[2] for e in entries), default=state_page)
        padded = max(state_page, att_page)
        entries.extend(("state", bs, padded, None) for _ in state)

    if not entries:
        return Layout((), 0, 0, bs, 0, 0, ())

    # uniform page size: layers with smaller pages get proportionally larger blocks
    max_page = max(e[2] for e in entries)
    unified: list[tuple[str, int, int, int | None]] = []
    for kind, block, page, window in entries:
        if page != max_page and kind != "state":
            # vLLM's unify_kv_cache_spec_page_size multiplies the block size by max_page // page when it
            # divides. Per-token-head scales break the ratio (Gemma 4 int8_per_token_head at TP2:
            # sliding 8 heads x (256 + 256 + 8) = 4,160 B/token, global 2 x (512 + 512 + 8) = 2,064);
            # vLLM PR #40391 (the overlay every such profile runs) pads the smaller layer's per-token
            # bytes up to max_page / (max_page // page) (1,032 -> 1,040 B per head), so the block grows
            # by the floor of the ratio and the page is padded to max_page.
            block, page = block * max(1, max_page // page), max_page
        elif kind == "state":
            page = max_page
        unified.append((kind, block, page, window))

    buckets: dict[tuple[str, int, int | None], int] = {}
    for kind, block, _page, window in unified:
        buckets[(kind, block, window)] = buckets.get((kind, block, window), 0) + 1
    counts = list(buckets.values())
    group_size = min(counts)
    if max(counts) < group_size * 1.25:
        group_size = max(counts)
    groups: list[KvGroup] = []
    for (kind, block, window), n in buckets.items():
        for start in range(0, n, group_size):
            groups.append(KvGroup(kind=kind, num_layers=min(group_size, n - start), block_size=block,
                                  page_bytes=max_page, window=window))
    state_per_request = sum(_state_bytes(layer, tp, num_spec, conv_bytes, ssm_bytes) for layer in state)
    return Layout(groups=tuple(groups), group_size=group_size, bytes_per_block=group_size * max_page,
                   attn_block_size=bs, kv_bytes_per_token=math.ceil(kv_per_token),
                   state_bytes_per_request=state_per_request, layer_needs=tuple(unified),
                   state_pages=state_pages)


def _tokens_needed(kind: str, length: int, window: int | None, inflight: int) -> int | None:
    if kind in ("full", "mla"):
        return length
    if kind == "sliding":
        return min((window or 0) - 1 + inflight, length)
    if kind == "chunked":
        return min((window or 0) + inflight, length)
    return None


def _blocks_for(kind: str, block: int, length: int, window: int | None, inflight: int, num_spec: int,
                state_pages: int = 1) -> int:
    tokens = _tokens_needed(kind, length, window, inflight)
    if tokens is None:                       # state: one page (two in align mode) + speculative pages
        return state_pages + num_spec
    blocks = _cdiv(tokens, block)
    return blocks + 1 if kind == "sliding" else blocks


def blocks_per_request(layout: Layout, length: int, inflight: int, num_spec: int) -> int:
    return sum(_blocks_for(g.kind, g.block_size, length, g.window, inflight, num_spec, layout.state_pages)
               for g in layout.groups)


def bytes_needed(layout: Layout, length: int, inflight: int, num_spec: int) -> int:
    """vLLM's _check_enough_kv_cache_memory: sum over layers of each layer's max memory use
    (layers with the same need counted once, times how many: the bisection calls this often)."""
    return sum(_blocks_for(kind, block, length, window, inflight, num_spec, layout.state_pages) * page * n
               for (kind, block, page, window), n in _need_counts(layout.layer_needs))


@lru_cache(maxsize=256)
def _need_counts(needs: tuple[tuple[str, int, int, int | None], ...]) -> tuple[tuple[Any, int], ...]:
    return tuple(Counter(needs).items())
