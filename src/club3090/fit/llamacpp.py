"""llama.cpp's start-up memory per device, and solvers for the largest context / fewest CPU layers.

The parts llama.cpp sizes by formula are reproduced exactly (docs/ACCURACY.md compares them with a
real llama.cpp's start-up lines):

- context: ``-c`` rounded up to 256 cells; with ``--parallel N`` and a non-unified cache each of
  the N streams gets ``ceil256(n_ctx / N)`` cells; ``-b`` is capped by ``-c`` and ``-ub`` by ``-b``;
- KV cache: per attention layer ``ggml_row_size(type, n_head_kv x head_dim) x cells x streams`` for
  K (``--cache-type-k``) and V (``--cache-type-v``); sliding-window layers get
  ``ceil256(min(cells, window x (N if unified else 1) + n_ubatch))`` cells unless ``--swa-full``;
  recurrent layers keep one f32 conv + SSM state per sequence instead;
- placement: ``--n-gpu-layers`` offloads the last layers (the output head counts as layer
  ``n_layer``), ``--tensor-split`` (default: proportional to GPU memory) assigns consecutive
  layers by llama.cpp's cumulative-split rule, ``--split-mode row`` shares each layer's matrices,
  ``none`` puts everything on ``--main-gpu``; token embeddings stay on the host; a tied output
  head is a second copy of the embeddings on the output device; ``--n-cpu-moe N`` keeps the expert
  tensors of the first N layers on the host; each layer's KV lives with the layer.

Estimated parts: the compute buffers (the largest phase of one ``-ub`` micro-batch's graph:
attention masks / scores, FFN or logits activations, plus the copy of a host weight that op offload
multiplies on the GPU; calibrated on logged starts, docs/ACCURACY.md) and the CUDA context per GPU.
Answers are ``estimated``.

Pure: no I/O, no environment, no printing.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from itertools import accumulate

from club3090.fit.memory import Unpriceable
from club3090.model.gguf import TYPE_BY_NAME, GgmlType
from club3090.model.gguf_model import GgufModel
from club3090.units import MiB

CELL_PAD = 256                         # llama.cpp pads the context (and each stream) to 256 cells
MASK_TOKEN_PAD = 64                    # GGML_KQ_MASK_PAD: the attention mask's token rows
OP_OFFLOAD_MIN_BATCH = 32              # ggml-cuda offloads host-weight ops from this batch size
CUDA_CONTEXT_BYTES = 350 * MiB         # CUDA context + cuBLAS workspace per GPU (estimated)
CONFIDENCE = "estimated"
# llama.cpp's --cache-type-k/-v choices; forks add their own (given by the catalog).
KV_CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
SPLIT_MODES = ("layer", "row", "none")
# catalog KV formats that name a K/V pair rather than one llama.cpp type
# kvarn4 (beellama.cpp's KVarN 4-bit compression) is priced with q4_0's blocks until measured
KV_FORMAT_PAIRS = {"k8v4": ("q8_0", "q4_0"), "auto": ("f16", "f16"), "fp16": ("f16", "f16"),
                   "bf16": ("bf16", "bf16"), "fp32": ("f32", "f32"), "kvarn4": ("q4_0", "q4_0")}


def _pad(n: int, to: int) -> int:
    return -(-n // to) * to


@dataclass(frozen=True, slots=True)
class LlamaCppArgs:
    """``llama-server`` flags that change memory (llama.cpp's own names and defaults)."""

    ctx_size: int                      # -c
    batch_size: int = 2048             # -b
    ubatch_size: int = 512             # -ub
    parallel: int = 1                  # -np
    kv_unified: bool = True            # --kv-unified (llama-server turns it on for its slots)
    cache_type_k: str = "f16"
    cache_type_v: str = "f16"
    flash_attn: bool = True            # -fa on (auto resolves to on for CUDA)
    n_gpu_layers: int = -1             # -ngl; -1 = all (llama.cpp's 999)
    split_mode: str = "layer"          # -sm
    tensor_split: tuple[float, ...] = ()   # -ts
    main_gpu: int = 0                  # -mg
    n_cpu_moe: int = 0                 # --n-cpu-moe (>= n_layer: --cpu-moe)
    swa_full: bool = False             # --swa-full
    kv_offload: bool = True            # --no-kv-offload turns it off
    override_tensors: tuple[tuple[str, str], ...] = ()   # -ot PATTERN=BUFFER (CPU, CUDA0, ...); first match wins


@dataclass(frozen=True, slots=True)
class KvCache:
    n_ctx: int                         # cells x streams, as llama.cpp prints n_ctx
    cells: int                         # per stream, full-attention layers
    swa_cells: int                     # per stream, sliding-window layers
    streams: int
    n_ubatch: int
    layers: int
    swa_layers: int
    k_bytes: int
    v_bytes: int
    swa_k_bytes: int
    swa_v_bytes: int
    state_bytes: int                   # recurrent layers (all sequences)

    @property
    def total_bytes(self) -> int:
        return self.k_bytes + self.v_bytes + self.swa_k_bytes + self.swa_v_bytes + self.state_bytes


@dataclass(frozen=True, slots=True)
class Device:
    name: str                          # "CUDA0", ..., "CPU"
    layers: int
    weights_bytes: int
    kv_bytes: int
    compute_bytes: int
    overhead_bytes: int
    capacity_bytes: int | None

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.kv_bytes + self.compute_bytes + self.overhead_bytes

    @property
    def fits(self) -> bool:
        return self.capacity_bytes is None or self.total_bytes <= self.capacity_bytes


@dataclass(frozen=True, slots=True)
class LlamaCppBreakdown:
    args: LlamaCppArgs
    kv: KvCache
    devices: tuple[Device, ...]        # GPUs first, then the host
    gpu_layers: int                    # layers offloaded (the output head counts as one)
    confidence: str = CONFIDENCE

    @property
    def fits(self) -> bool:
        return all(d.fits for d in self.devices)

    @property
    def host(self) -> Device:
        return self.devices[-1]


class _CannotPrice(Exception):
    """Raised inside the maths, returned as :class:`Unpriceable` by the public functions."""


def _cache_type(name: str) -> GgmlType:
    kind = TYPE_BY_NAME.get(name.lower())
    if kind is None:
        raise _CannotPrice(f"unknown llama.cpp cache type {name!r}; known: {', '.join(KV_CACHE_TYPES)}")
    return kind


def cache_types(kv_format: str) -> tuple[str, str] | Unpriceable:
    """(--cache-type-k, --cache-type-v) for a catalog KV format (q4_0, q8_0, k8v4, ...)."""
    name = kv_format.strip().lower()
    if name in KV_FORMAT_PAIRS:
        return KV_FORMAT_PAIRS[name]
    if name not in TYPE_BY_NAME:
        return Unpriceable(f"KV format {kv_format!r} has no llama.cpp cache type; known: {', '.join(KV_CACHE_TYPES)}")
    return name, name


def _context(args: LlamaCppArgs) -> tuple[int, int, int]:
    """(cells per stream, streams, n_ubatch) as llama_context sets them up."""
    if args.ctx_size < 1 or args.parallel < 1 or args.batch_size < 1 or args.ubatch_size < 1:
        raise _CannotPrice("context, batch, ubatch and parallel must be positive")
    n_ubatch = min(min(args.ctx_size, args.batch_size), args.ubatch_size)
    n_ctx = _pad(args.ctx_size, CELL_PAD)
    if args.kv_unified or args.parallel == 1:
        return n_ctx, 1, n_ubatch
    return _pad(n_ctx // args.parallel, CELL_PAD), args.parallel, n_ubatch


def _layer_kv_bytes(model: GgufModel, args: LlamaCppArgs) -> tuple[list[int], KvCache]:
    """Per-layer KV + state bytes and the cache summary."""
    cells, streams, n_ubatch = _context(args)
    tk, tv = _cache_type(args.cache_type_k), _cache_type(args.cache_type_v)
    window = model.swa_window or 0
    swa_cells = cells if args.swa_full else min(
        cells, _pad(window * (args.parallel if args.kv_unified else 1) + n_ubatch, CELL_PAD))
    per_layer: list[int] = []
    k = v = sk = sv = state = n_full = n_swa = 0
    for i, layer in enumerate(model.kv_layers):
        if model.recurrent_layers[i]:
            b = model.state_bytes * args.parallel
            state += b
            per_layer.append(b)
            continue
        if layer.k_elems == 0:
            per_layer.append(0)
            continue
        for kind, elems in ((tk, layer.k_elems), (tv, layer.v_elems)):
            if elems % kind.block:
                raise _CannotPrice(f"cache type {kind.name.lower()} needs a multiple of {kind.block} "
                                       f"values per row, this model has {elems}")
        n = swa_cells if layer.window else cells
        kb, vb = tk.row_bytes(layer.k_elems) * n * streams, tv.row_bytes(layer.v_elems) * n * streams
        if layer.window:
            sk, sv, n_swa = sk + kb, sv + vb, n_swa + 1
        else:
            k, v, n_full = k + kb, v + vb, n_full + 1
        per_layer.append(kb + vb)
    cache = KvCache(n_ctx=cells * streams, cells=cells, swa_cells=swa_cells if n_swa else 0, streams=streams,
                    n_ubatch=n_ubatch, layers=n_full, swa_layers=n_swa, k_bytes=k, v_bytes=v,
                    swa_k_bytes=sk, swa_v_bytes=sv, state_bytes=state)
    return per_layer, cache


def kv_cache(model: GgufModel, args: LlamaCppArgs) -> KvCache | Unpriceable:
    """The KV cache ``args`` ask for, or why it cannot be priced (a cache type, a context)."""
    try:
        return _layer_kv_bytes(model, args)[1]
    except _CannotPrice as exc:
        return Unpriceable(str(exc))


def _splits(args: LlamaCppArgs, capacities: Sequence[int]) -> list[float]:
    weights = list(args.tensor_split) or [float(c) for c in capacities]
    if len(weights) != len(capacities) or any(w < 0 for w in weights) or sum(weights) <= 0:
        raise _CannotPrice(f"--tensor-split needs {len(capacities)} non-negative values, not all zero")
    total = sum(weights)
    return [c / total for c in accumulate(weights)]


def _masks(cache: KvCache, args: LlamaCppArgs, *, attention: bool, swa: bool, itemsize: int) -> int:
    """The KQ mask inputs (one per attention kind): ``n_kv x pad(n_ubatch, 64)`` values."""
    rows = _pad(cache.n_ubatch, MASK_TOKEN_PAD)
    return sum(n_kv * rows * itemsize for present, n_kv in ((attention, cache.cells), (swa, cache.swa_cells))
               if present)


def _compute_bytes(model: GgufModel, cache: KvCache, args: LlamaCppArgs, *, attention: bool, swa: bool,
                   logits: bool) -> int:
    """A device's compute buffer: the peak of one ``-ub`` micro-batch's graph (estimated).

    llama.cpp reserves the worst-case graph (``n_ubatch`` tokens, every one an output) and ggml's
    allocator reuses a tensor's memory once its consumers ran, so the buffer is the largest of the
    phases, not their sum (docs/ACCURACY.md fits these terms to logged buffers): the attention
    (flash: the f16 masks + Q/out/residual rows; without: the f32 scores ``n_kv x n_ub x n_head``
    + the f32 masks), the FFN (gate/up/act/mul rows of the widest dense or routed FFN) and, on the
    device holding the output head, the f32 logits ``n_ub x n_vocab`` with two rows of inputs.
    """
    n_ub = cache.n_ubatch
    row = 4 * n_ub                                    # one f32 value per token of the micro-batch
    itemsize = 2 if args.flash_attn else 4
    masks = _masks(cache, args, attention=attention, swa=swa, itemsize=itemsize)
    phases = []
    if attention or swa:
        if args.flash_attn:
            phases.append(masks + row * 3 * model.n_embd)
        else:
            n_kv = max(cache.cells if attention else 0, cache.swa_cells if swa else 0)
            heads = max(model.n_head, default=1)
            phases.append(masks + n_kv * n_ub * 4 * heads + row * (11 * model.n_embd // 2))
        ffn = max(4 * model.n_ff, 4 * model.n_ff_exp * model.n_expert_used + model.n_expert)
        phases.append(row * ffn)
    if logits:
        phases.append(row * (model.n_vocab + 2 * model.n_embd))
    return max(phases, default=0)


def _host_staging_bytes(model: GgufModel, cache: KvCache, *, attention: bool, swa: bool) -> int:
    """The host-side compute buffer when the layers run on GPUs (``CUDA_Host compute buffer``): the
    f32 masks as built on the host and the embedded input rows."""
    masks = _masks(cache, LlamaCppArgs(ctx_size=1, flash_attn=False), attention=attention, swa=swa, itemsize=4)
    return masks + 4 * cache.n_ubatch * model.n_embd


def _largest_host_weight(model: GgufModel, args: LlamaCppArgs, device_of: Callable[[int], int], out_dev: int,
                         cpu: int) -> int:
    """The largest matrix left in host memory that a layer or the output head multiplies with.

    With a micro-batch of at least 32 tokens ggml offloads such an op to the GPU (op offload) and
    the copy of the weight lives in the main GPU's compute buffer. Token embeddings are looked up
    (``get_rows``), never copied."""
    rules = [(re.compile(p), b.upper() == "CPU") for p, b in args.override_tensors]
    largest = 0
    for name, nbytes in model.tensors:
        if name.startswith(("token_embd", "per_layer_token_embd")) or nbytes <= largest:
            continue
        forced = next((on_host for rx, on_host in rules if rx.search(name)), None)
        m = re.match(r"blk\.(\d+)\.", name)
        if forced is not None:
            on_host = forced
        elif m and int(m[1]) < model.n_layer:
            il = int(m[1])
            on_host = device_of(il) == cpu or ("_exps" in name and il < args.n_cpu_moe)
        else:
            on_host = name.startswith("output.") and out_dev == cpu
        if on_host:
            largest = nbytes
    return largest


def predict(model: GgufModel, args: LlamaCppArgs, gpu_bytes: Sequence[int],
            host_bytes: int | None = None) -> LlamaCppBreakdown | Unpriceable:
    """Memory per GPU (``gpu_bytes``: each GPU's usable bytes) and on the host, or why the flags
    cannot be priced."""
    try:
        return _predict(model, args, gpu_bytes, host_bytes)
    except _CannotPrice as exc:
        return Unpriceable(str(exc))


def _predict(model: GgufModel, args: LlamaCppArgs, gpu_bytes: Sequence[int],
             host_bytes: int | None) -> LlamaCppBreakdown:
    if args.split_mode not in SPLIT_MODES:
        raise _CannotPrice(f"--split-mode must be one of {', '.join(SPLIT_MODES)}")
    n_layer, n_gpu = model.n_layer, len(gpu_bytes)
    per_layer_kv, cache = _layer_kv_bytes(model, args)
    ngl = 0 if n_gpu == 0 else (n_layer + 1 if args.n_gpu_layers < 0 else min(args.n_gpu_layers, n_layer + 1))
    start = max(n_layer - ngl, 0)
    cpu = n_gpu                                        # index of the host in the tallies
    if n_gpu and not 0 <= args.main_gpu < n_gpu:
        raise _CannotPrice(f"--main-gpu {args.main_gpu} is not one of the {n_gpu} GPUs")
    splits = _splits(args, gpu_bytes) if n_gpu else []

    def device_of(il: int) -> int:
        if il < start or il - start >= ngl:
            return cpu
        if args.split_mode != "layer":
            return args.main_gpu
        return min(bisect_right(splits, (il - start) / ngl), n_gpu - 1)

    weights, kv, layers = [0] * (n_gpu + 1), [0] * (n_gpu + 1), [0] * (n_gpu + 1)
    attn, swa = [False] * (n_gpu + 1), [False] * (n_gpu + 1)
    fractions = [b - a for a, b in zip([0.0, *splits], splits, strict=False)]
    kv_layers = model.kv_layers          # a property that builds the tuple: once, not per layer
    for il in range(n_layer):
        d = device_of(il)
        layers[d] += 1
        dense, experts = model.layer_bytes[il], model.expert_bytes[il]
        if il < args.n_cpu_moe:
            weights[cpu] += experts
            experts = 0
        if d != cpu and args.split_mode == "row":
            for g, f in enumerate(fractions):
                weights[g] += int((dense + experts) * f)
        else:
            weights[d] += dense + experts
        kv[d if args.kv_offload else cpu] += per_layer_kv[il]
        layer = kv_layers[il]
        if layer.k_elems:
            if layer.window:
                swa[d] = True
            else:
                attn[d] = True
    out_dev = device_of(n_layer)
    weights[cpu] += model.embd_bytes + model.other_bytes
    if out_dev != cpu or not model.tied_output:
        weights[out_dev] += model.output_bytes + (model.embd_bytes if model.tied_output else 0)
    if args.override_tensors:
        _apply_overrides(model, args, weights, device_of, out_dev, fractions)
    devices = []
    copy = _largest_host_weight(model, args, device_of, out_dev, cpu) \
        if n_gpu and cache.n_ubatch >= OP_OFFLOAD_MIN_BATCH else 0
    any_attn, any_swa = any(attn[:cpu]), any(swa[:cpu])
    for g in range(n_gpu + 1):
        used = layers[g] > 0 or g == out_dev
        compute = _compute_bytes(model, cache, args, attention=attn[g], swa=swa[g], logits=g == out_dev) \
            if used else 0
        if g == (args.main_gpu if args.split_mode != "layer" else 0) and g != cpu:
            compute += copy
        if g == cpu and n_gpu:   # the inputs staged on the host for the GPUs
            compute = max(compute, _host_staging_bytes(model, cache, attention=any_attn or attn[cpu],
                                                       swa=any_swa or swa[cpu]))
        devices.append(Device(
            name="CPU" if g == cpu else f"CUDA{g}", layers=layers[g] + (1 if g == out_dev else 0),
            weights_bytes=weights[g], kv_bytes=kv[g], compute_bytes=compute,
            overhead_bytes=CUDA_CONTEXT_BYTES if g != cpu and (used or weights[g]) else 0,
            capacity_bytes=host_bytes if g == cpu else gpu_bytes[g]))
    return LlamaCppBreakdown(args=args, kv=cache, devices=tuple(devices), gpu_layers=ngl)


def _buffer_index(name: str, n_gpu: int) -> int:
    if name.upper() == "CPU":
        return n_gpu
    m = re.fullmatch(r"CUDA(\d+)", name, flags=re.IGNORECASE)
    if m is None or int(m[1]) >= n_gpu:
        raise _CannotPrice(f"-ot buffer {name!r} is not CPU or one of CUDA0..CUDA{max(n_gpu - 1, 0)}")
    return int(m[1])


def _apply_overrides(model: GgufModel, args: LlamaCppArgs, weights: list[int], device_of: Callable[[int], int],
                     out_dev: int, fractions: list[float]) -> None:
    """Move the tensors an ``-ot`` pattern matches (llama.cpp: regex search, first pattern wins)."""
    cpu = len(weights) - 1
    try:
        rules = [(re.compile(p), _buffer_index(b, cpu)) for p, b in args.override_tensors]
    except re.error as exc:
        raise _CannotPrice(f"-ot pattern is not a regular expression: {exc}") from None
    for name, nbytes in model.tensors:
        target = next((dev for rx, dev in rules if rx.search(name)), None)
        if target is None:
            continue
        home: dict[int, float] = {}
        m = re.match(r"blk\.(\d+)\.", name)
        if m and int(m[1]) < model.n_layer:
            il = int(m[1])
            d = cpu if "_exps" in name and il < args.n_cpu_moe else device_of(il)
            home = {g: f for g, f in enumerate(fractions)} if d != cpu and args.split_mode == "row" else {d: 1.0}
        elif name.startswith(("output.", "output_norm.")) and (out_dev != cpu or not model.tied_output):
            home = {out_dev: 1.0}
        else:
            home = {cpu: 1.0}
        for g, f in home.items():
            weights[g] -= int(nbytes * f)
        weights[target] += sum(int(nbytes * f) for f in home.values())


def largest_context(model: GgufModel, args: LlamaCppArgs, gpu_bytes: Sequence[int],
                    host_bytes: int | None = None, limit: int | None = None) -> int | None:
    """The largest ``-c`` (a multiple of 256, at most ``limit`` or the trained context) that fits."""
    top = limit or model.ctx_train or 1 << 20
    lo, hi = 0, top // CELL_PAD
    if hi == 0:
        return None
    while lo < hi:
        mid = (lo + hi + 1) // 2
        priced = predict(model, replace(args, ctx_size=mid * CELL_PAD), gpu_bytes, host_bytes)
        if isinstance(priced, LlamaCppBreakdown) and priced.fits:
            lo = mid
        else:
            hi = mid - 1
    return lo * CELL_PAD if lo else None


def fewest_offloaded(model: GgufModel, args: LlamaCppArgs, gpu_bytes: Sequence[int],
                     host_bytes: int | None = None) -> LlamaCppBreakdown | None:
    """The fit that keeps the most on the GPUs: all layers, else MoE experts of the fewest layers
    on the host (``--n-cpu-moe``), else the fewest layers on the host (``-ngl``); None if none fits."""
    n = model.n_layer
    candidates = [replace(args, n_gpu_layers=-1, n_cpu_moe=0)]
    if model.is_moe:
        candidates += [replace(args, n_gpu_layers=-1, n_cpu_moe=k) for k in range(1, n + 1)]
    candidates += [replace(args, n_gpu_layers=k, n_cpu_moe=0) for k in range(n, -1, -1)]
    for candidate in candidates:
        result = predict(model, candidate, gpu_bytes, host_bytes)
        if isinstance(result, LlamaCppBreakdown) and result.fits:
            return result
    return None
