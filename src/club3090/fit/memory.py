"""vLLM start-up memory accounting per GPU rank (V1, and V0 where the release line ran it).

``predict(arch, weights_bytes=..., gpu_memory_bytes=[...], shape=ServeShape(...))`` returns a
:class:`FitResult`: the per-rank budget split (weights, non-torch, activation peak, CUDA-graph
pool, KV pool), the KV page layout (block size, groups, bytes per block), ``num_blocks`` (minimum
over ranks), the concurrency at ``max_model_len``, the "GPU KV cache size" line as the chosen vLLM
version prints it, a verdict and the largest context that fits.

Exact parts (page sizes, grouping, blocks per request, the refusal check: ``fit/kv_layout.py``)
follow vLLM's code paths; so do the release-line rules (engine, profile batch, MLA, auto-fit,
defaults: ``fit/vllm_rules.py``, applied to a shape in ``fit/serve_settings.py``) and the weights
each rank holds (``fit/rank_weights.py``). The free terms (non-torch, activation peak with sampler
and encoder, CUDA graphs: ``fit/profiling.py``) are small physical formulas whose coefficients were
fitted to real start-up logs out of sample (``benchmarks/refit.py``, docs/ACCURACY.md); they are
module constants, not per-model values.

Pure: no I/O, no environment, no clock, no printing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from fractions import Fraction
from typing import Any

from club3090.fit import profiling
from club3090.fit.correction import Calibration
from club3090.fit.drafter_kv import drafter_kv_layers, drafter_method
from club3090.fit.kv_formats import KvStorage, dtype_bytes, kv_format
from club3090.fit.kv_layout import (
    CannotPrice,
    KvGroup,
    Layout,
    Unpriceable,
    blocks_per_request,
    bytes_needed,
    kv_page_layout,
    mamba_groups,
    tp_geometry_problem,
)
from club3090.fit.rank_weights import pp_layer_counts, weights_per_rank
from club3090.fit.serve_settings import Resolved, ServeShape, quant_method, resolve_defaults
from club3090.fit.vllm_rules import (
    AUTO_FIT_FLAG_FROM,
    GRAPH_ESTIMATE_FROM,
    NEWEST_KNOWN_VLLM,
    RELEASES_IN_USE,
    VERSION_RE,
    capture_sizes,
    choose_engine,
    fp8_marlin_scale_ratio,
    mla_block_size,
    mla_rule,
    parse_version,
    pool_logged_by_first_rank,
    sampler_path,
    version_note,
)
from club3090.model.architecture import Architecture, LayerSpec
from club3090.units import GiB, MiB

__all__ = [
    "NEWEST_KNOWN_VLLM",
    "VERDICTS",
    "VERSION_RE",
    "FitResult",
    "KvGroup",
    "MiB",
    "RankBreakdown",
    "Resolved",
    "ServeShape",
    "Unpriceable",
    "capture_sizes",
    "kv_page_layout",
    "logged_rank",
    "mamba_groups",
    "parse_version",
    "pp_layer_counts",
    "predict",
    "resolve_defaults",
    "tp_geometry_problem",
]

VERDICTS = ("fits-clean", "fits-constrained", "wont-fit")
CONSTRAINED_SLACK = Fraction(105, 100)   # requested concurrency may exceed the pool by 5 % and stay "clean"


# ---------------------------------------------------------------------------------------------
# the start-up free-memory check, and the margin vLLM suggests on top
ERROR_BAND_FRACTION = Fraction(3, 100)
ERROR_BAND_FLOOR = int(0.5 * GiB)


# ---------------------------------------------------------------------------------------------
# the result


@dataclass(frozen=True, slots=True)
class RankBreakdown:
    rank: int
    gpu_memory_bytes: int
    budget_bytes: int
    weights_bytes: int
    non_torch_bytes: int
    activation_bytes: int
    cudagraph_bytes: int           # subtracted from the budget (0 when this version captures outside it)
    kv_pool_bytes: int
    num_blocks: int
    bytes_per_block: int
    kv_bytes_per_token: int        # attention layers on this rank, bytes per token
    num_layers: int

    def to_json(self) -> dict[str, int]:
        return {"budget_bytes": self.budget_bytes, "weights_bytes": self.weights_bytes,
                "non_torch_bytes": self.non_torch_bytes, "activation_bytes": self.activation_bytes,
                "cudagraph_bytes": self.cudagraph_bytes, "kv_pool_bytes": self.kv_pool_bytes}


@dataclass(frozen=True, slots=True)
class FitResult:
    per_gpu: RankBreakdown           # the limiting rank (fewest blocks)
    ranks: tuple[RankBreakdown, ...]
    kv_bytes_per_token: int          # per rank: attention KV one token costs on the limiting rank
    state_bytes_per_request: int     # per rank: fixed linear-attention/Mamba state of one request
    block_size: int                  # attention block size (raised for hybrids)
    bytes_per_block: int
    num_blocks: int
    blocks_per_request: int
    kv_cache_tokens: int
    max_concurrency: float
    raw_verdict: str
    max_model_len: int
    max_model_len_fit: int
    confidence: str
    error_band_bytes: int
    groups: tuple[KvGroup, ...]
    settings: Resolved
    notes: tuple[str, ...] = field(default=())
    cudagraph_outside_budget_bytes: int = 0
    requested_concurrency: int = 1
    calibration: Calibration | None = None   # a local measurement priced it (fit/correction.py)

    def to_json(self) -> dict[str, Any]:
        return {
            "per_gpu": self.per_gpu.to_json(),
            # ranks count from 1 in JSON and text alike (``fits``' worst_rank too); the first GPU is rank 1
            "ranks": [{"rank": r.rank + 1, "gpu_memory_bytes": r.gpu_memory_bytes, **r.to_json(),
                       "num_blocks": r.num_blocks} for r in self.ranks],
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "state_bytes_per_request": self.state_bytes_per_request,
            "block_size": self.block_size,
            "bytes_per_block": self.bytes_per_block,
            "num_blocks": self.num_blocks,
            "blocks_per_request": self.blocks_per_request,
            "kv_cache_tokens": self.kv_cache_tokens,
            "max_concurrency": round(self.max_concurrency, 2),
            "requested_concurrency": self.requested_concurrency,
            "raw_verdict": self.raw_verdict,
            "max_model_len": self.max_model_len,
            "max_model_len_fit": self.max_model_len_fit,
            "confidence": self.confidence,
            "error_band_bytes": self.error_band_bytes,
            "cudagraph_outside_budget_bytes": self.cudagraph_outside_budget_bytes,
            "groups": [asdict(g) for g in self.groups],
            "settings": asdict(self.settings),
            "notes": list(self.notes),
            "calibration": self.calibration.to_json() if self.calibration is not None else None,
        }


def logged_rank(result: FitResult) -> RankBreakdown:
    """The rank whose pool and breakdown the start-up log prints, to compare a log with: the first
    rank where the release logs once (under pipeline parallelism the first stage, not the limiting
    one), else the limiting rank (``vllm_rules.pool_logged_by_first_rank``). The log's tokens and
    blocks are the limiting rank's either way."""
    settings = result.settings
    if pool_logged_by_first_rank(parse_version(settings.vllm_version), settings.engine):
        return result.ranks[0]
    return result.per_gpu


def _without_mla(arch: Architecture, ver: tuple[int, int, int], quant: str | None, disabled: bool) -> Architecture:
    """vLLM versions that did not (or could not) use MLA cache every head's K and V."""
    _used, padded, _why = mla_rule(ver, quant_method=quant, disabled=disabled, quant_config=arch.quantization_config)
    size = padded or arch.head_dim
    full = LayerSpec(kind="full", num_kv_heads=arch.num_attention_heads, head_dim=size, v_head_dim=size)
    layers = tuple(full if layer.kind == "mla" else layer for layer in arch.layers)
    mtp = full if arch.mtp_layer is not None and arch.mtp_layer.kind == "mla" else arch.mtp_layer
    return replace(arch, layers=layers, mtp_layer=mtp, num_key_value_heads=arch.num_attention_heads,
                   layer_kinds=tuple(sorted({layer.kind for layer in layers})))


# ---------------------------------------------------------------------------------------------
# the prediction


def predict(arch: Architecture, *, weights_bytes: int, gpu_memory_bytes: Sequence[int], shape: ServeShape,
            weights_bytes_per_rank: int | None = None,
            confidence: str = "estimated-lower-bound",
            drafter: Architecture | None = None) -> FitResult | Unpriceable:
    """vLLM's start-up memory split for ``arch`` on these GPUs at ``shape``, or why it cannot be priced.

    ``drafter``: the config of a separate draft model (EAGLE, DFlash, draft model); with
    ``shape.num_speculative_tokens`` its cache layers join the KV groups (``fit/drafter_kv.py``);
    its weights are ``shape.extra_weights_bytes``."""
    kwargs: dict[str, Any] = {"weights_bytes": weights_bytes, "gpu_memory_bytes": gpu_memory_bytes,
                              "weights_bytes_per_rank": weights_bytes_per_rank, "confidence": confidence,
                              "drafter": drafter}
    try:
        if shape.vllm_version is None:
            return _tightest_release(arch, shape, kwargs)
        return _predict(arch, shape=shape, **kwargs)
    except CannotPrice as exc:
        return Unpriceable(str(exc))


def _tightest_release(arch: Architecture, shape: ServeShape, kwargs: dict[str, Any]) -> FitResult:
    """No version given: the shape priced on every release line still in use; the tightest answers
    (the worst verdict, then the smallest pool), naming itself and the band, so a start-up on an
    older release is never a false "fits"."""
    priced: list[FitResult] = []
    refused: CannotPrice | None = None
    for version in RELEASES_IN_USE:
        try:
            priced.append(_predict(arch, shape=replace(shape, vllm_version=version), **kwargs))
        except CannotPrice as exc:       # e.g. --max-model-len auto before 0.12: that line cannot run it
            refused = exc
    if not priced:
        assert refused is not None
        raise refused
    worst = min(priced, key=lambda r: (-VERDICTS.index(r.raw_verdict), r.per_gpu.kv_pool_bytes, r.max_concurrency))
    pools = [r.per_gpu.kv_pool_bytes / GiB for r in priced]
    tokens = [r.kv_cache_tokens for r in priced]
    note = (f"vLLM version not given: priced as vLLM {worst.settings.vllm_version}, the tightest of the release "
            f"lines in use ({RELEASES_IN_USE[0]} to {RELEASES_IN_USE[-1]}: KV pool {min(pools):.2f}-{max(pools):.2f} "
            f"GiB per GPU, {min(tokens):,}-{max(tokens):,} tokens); --vllm-version prices one release")
    return replace(worst, notes=(note, *worst.notes))


@dataclass(frozen=True, slots=True)
class _Run:
    """What every stage and rank of one prediction shares."""

    arch: Architecture
    shape: ServeShape
    res: Resolved
    ver: tuple[int, int, int]
    fmt: KvStorage
    tp: int
    pp: int
    mems: tuple[int, ...]
    model_bytes: int
    ssm_bytes: int
    num_spec: int
    nvswitch: bool
    util: Fraction
    block_size: int | None
    repack: Fraction                 # FP8-Marlin scale growth of the weights (``_with_block_size``)
    weights_bytes: int
    weights_bytes_per_rank: int | None


@dataclass(frozen=True, slots=True)
class _Ranks:
    """The per-rank breakdowns, each rank's page layout, and each PP stage's graph estimate."""

    ranks: tuple[RankBreakdown, ...]
    layouts: tuple[Layout, ...]
    stage_graphs: tuple[int, ...]


def _predict(arch: Architecture, *, weights_bytes: int, gpu_memory_bytes: Sequence[int], shape: ServeShape,
             weights_bytes_per_rank: int | None, confidence: str,
             drafter: Architecture | None = None) -> FitResult:
    notes: list[str] = []
    run = _prepare(arch, shape, gpu_memory_bytes, weights_bytes, weights_bytes_per_rank, notes)
    arch, res = run.arch, run.res
    spec_layers = _speculative_layers(arch, shape, drafter, run.num_spec, notes)
    run = _with_block_size(run, notes)
    if res.mamba_cache_mode == "align":
        notes.append(f"vLLM {res.vllm_version} keeps 2 state pages per request with prefix caching on "
                     "(mamba_cache_mode align)")
    per = _ranks(run, spec_layers)
    if not any(lay.groups for lay in per.layouts):
        raise CannotPrice("the model has no KV cache or state layers to size")
    # a PP stage holding no cache layers (Nemotron-H's trailing MLP stages) allocates no KV and
    # cannot limit the pool: only stages with groups compete
    limiting = min((i for i in range(len(per.ranks)) if per.layouts[i].groups),
                   key=lambda i: (per.ranks[i].num_blocks, i))
    lim, layout = per.ranks[limiting], per.layouts[limiting]
    num_blocks = lim.num_blocks
    inflight = res.max_num_batched_tokens * (run.pp if run.pp > 1 else 1)
    length = res.max_model_len
    max_fit = _longest_fit(per, inflight, run.num_spec, max(length, arch.derived_max_model_len or 0))
    if res.max_model_len_auto and not _fits(per, length, inflight, run.num_spec) and max_fit > 0:
        notes.append(f"vLLM {res.vllm_version} auto-fits max_model_len: reduced from {length} to {max_fit}")
        length = max_fit
        res = replace(res, max_model_len=max_fit)
    per_request = max(blocks_per_request(lay, length, inflight, run.num_spec) for lay in per.layouts if lay.groups)
    concurrency = num_blocks / per_request if per_request else 0.0
    if res.kv_tokens_formula == "concurrency":
        kv_tokens = int(concurrency * length)
    else:
        kv_tokens = num_blocks // len(layout.groups) * min(g.block_size for g in layout.groups)
    requested = shape.max_num_seqs or 1
    if not _fits(per, length, inflight, run.num_spec):
        verdict = "wont-fit"
    elif requested * per_request > num_blocks * CONSTRAINED_SLACK:
        verdict = "fits-constrained"
    else:
        verdict = "fits-clean"
    outside = 0 if res.cudagraphs_subtracted or shape.enforce_eager else per.stage_graphs[limiting // run.tp]
    _closing_notes(arch, shape, res, outside, notes)
    band = max(ERROR_BAND_FLOOR, int(lim.budget_bytes * ERROR_BAND_FRACTION))
    return FitResult(
        per_gpu=lim, ranks=per.ranks, kv_bytes_per_token=lim.kv_bytes_per_token,
        state_bytes_per_request=layout.state_bytes_per_request, block_size=layout.attn_block_size,
        bytes_per_block=layout.bytes_per_block, num_blocks=num_blocks, blocks_per_request=per_request,
        kv_cache_tokens=kv_tokens, max_concurrency=concurrency, raw_verdict=verdict,
        max_model_len=length, max_model_len_fit=max_fit, confidence=confidence,
        error_band_bytes=band, groups=layout.groups, settings=res, notes=tuple(notes),
        cudagraph_outside_budget_bytes=outside, requested_concurrency=requested)


def _memories(gpu_memory_bytes: Sequence[int], tp: int, pp: int) -> tuple[int, ...]:
    """One memory size per rank: a single size stands for every GPU."""
    if tp < 1 or pp < 1:
        raise CannotPrice("tensor and pipeline parallel sizes must be >= 1")
    world = tp * pp
    mems = list(gpu_memory_bytes)
    if not mems:
        raise CannotPrice("no GPU memory given")
    if len(mems) == 1:
        mems = mems * world
    if len(mems) < world:
        raise CannotPrice(f"{len(mems)} GPUs given for TP {tp} x PP {pp}")
    return tuple(mems[:world])


def _prepare(arch: Architecture, shape: ServeShape, gpu_memory_bytes: Sequence[int], weights_bytes: int,
             weights_bytes_per_rank: int | None, notes: list[str]) -> _Run:
    """Checks the request, resolves vLLM's defaults, and notes the engine and MLA choices."""
    if arch.unpriceable_reason:
        raise CannotPrice(arch.unpriceable_reason)
    tp, pp = int(shape.tp), int(shape.pp)
    mems = _memories(gpu_memory_bytes, tp, pp)
    fmt = kv_format(shape.kv_cache_dtype)
    if fmt is None:
        raise CannotPrice(f"unknown KV cache dtype {shape.kv_cache_dtype!r}")
    if fmt.mla_bytes_per_token is not None and not any(layer.kind == "mla" for layer in arch.layers):
        raise CannotPrice(f"KV cache dtype {fmt.name} applies to MLA models only")
    res = resolve_defaults(arch, shape, list(mems))
    if shape.max_model_len is not None and shape.max_model_len < 0 and \
            parse_version(shape.vllm_version) < AUTO_FIT_FLAG_FROM:
        raise CannotPrice(f"--max-model-len auto needs vLLM >= 0.12.0 (priced as {res.vllm_version})")
    unread = version_note(shape.vllm_version)
    if unread:
        notes.append(unread)
    ver = parse_version(shape.vllm_version)
    if res.engine == "v0":
        why = choose_engine(ver, requested=shape.engine, pp=pp, kv_cache_dtype=str(shape.kv_cache_dtype or "auto"),
                            has_state_layers=bool(arch.state_layers),
                            spec_method=shape.speculative_method,
                            ray=shape.distributed_executor_backend == "ray").reason
        notes.append(f"vLLM {res.vllm_version} runs the V0 engine" + (f" ({why})" if why else "")
                     + (": chunked prefill on" if res.chunked_prefill else
                        f": no chunked prefill, the profile batch is {res.max_num_batched_tokens} tokens"))
    if any(layer.kind == "mla" for layer in arch.layers) and not res.use_mla:
        notes.append(mla_rule(ver, quant_method=quant_method(arch, shape), disabled=shape.mla_disabled,
                              quant_config=arch.quantization_config)[2] or "")
        arch = _without_mla(arch, ver, quant_method(arch, shape), shape.mla_disabled)
    _check_geometry(arch, tp, pp)
    if res.max_model_len <= 0:
        raise CannotPrice("max_model_len unknown: the config has no max_position_embeddings")
    model_bytes = dtype_bytes(res.model_dtype)
    ssm_name = shape.mamba_ssm_cache_dtype or arch.mamba_ssm_cache_dtype
    return _Run(arch=arch, shape=shape, res=res, ver=ver, fmt=fmt, tp=tp, pp=pp, mems=mems,
                model_bytes=model_bytes,
                ssm_bytes=dtype_bytes(ssm_name) if ssm_name and ssm_name != "auto" else model_bytes,
                num_spec=int(shape.num_speculative_tokens or 0),
                nvswitch=shape.nvswitch if shape.nvswitch is not None else (
                    min(mems) >= 70 * GiB and profiling.nvls_capable(shape.device_name, shape.compute_capability)),
                util=Fraction(res.mem_util).limit_denominator(10_000), block_size=shape.block_size, repack=Fraction(0),
                weights_bytes=int(weights_bytes), weights_bytes_per_rank=weights_bytes_per_rank)


def _speculative_layers(arch: Architecture, shape: ServeShape, drafter: Architecture | None, num_spec: int,
                        notes: list[str]) -> list[LayerSpec]:
    """The cache layers speculative decoding adds to the last stage: a drafter's, or the MTP layers."""
    method = shape.speculative_method or (drafter_method(drafter) if drafter is not None else None)
    if num_spec > 0 and drafter is not None and method != "mtp":
        layers = list(drafter_kv_layers(method, drafter))
        if layers:
            notes.append(f"{len(layers)} {method} drafter layer(s) join the KV cache groups")
        else:
            notes.append(f"the {method} drafter adds no KV of its own")
        return layers
    if num_spec > 0 and arch.mtp_layers and arch.mtp_layer is not None:
        notes.append(f"{arch.mtp_layers} MTP layer(s) add their own KV")
        return [arch.mtp_layer] * arch.mtp_layers
    return []


def _with_block_size(run: _Run, notes: list[str]) -> _Run:
    """vLLM's forced MLA block size, and the FP8-Marlin scale repack of the weights."""
    arch, shape, res = run.arch, run.shape, run.res
    block_size = run.block_size
    if block_size is None and res.use_mla and any(layer.kind == "mla" for layer in arch.layers):
        block_size = mla_block_size(run.ver, shape.compute_capability)
        if block_size:
            notes.append(f"vLLM {res.vllm_version} forces {block_size}-token KV blocks for MLA on compute "
                         f"capability {shape.compute_capability}")
    repack = fp8_marlin_scale_ratio(quant_method(arch, shape),
                                    (arch.quantization_config or {}).get("weight_block_size"),
                                    shape.compute_capability)
    if repack and run.weights_bytes_per_rank is None:
        notes.append(f"FP8 weights run as Marlin W8A16 on compute capability {shape.compute_capability}: "
                     f"block scales expand to 16-bit groups (+{float(repack):.1%} of the quantized weights)")
    return replace(run, block_size=block_size, repack=repack)


def _ranks(run: _Run, spec_layers: list[LayerSpec]) -> _Ranks:
    """Each PP stage's page layout and graphs, and the memory breakdown of each of its TP ranks."""
    arch, res, shape = run.arch, run.res, run.shape
    counts = pp_layer_counts(arch.num_hidden_layers, run.pp, shape.pp_layer_partition)
    ranks: list[RankBreakdown] = []
    layouts: list[Layout] = []
    stage_graphs: list[int] = []
    start = 0
    for stage in range(run.pp):
        last = stage == run.pp - 1
        # MTP and drafter layers sit on the last stage, and capture their own graphs there
        stage_layers = list(arch.layers[start:start + counts[stage]]) + (spec_layers if last else [])
        layout = kv_page_layout(stage_layers, tp=run.tp, fmt=run.fmt, model_bytes=run.model_bytes,
                                block_size=run.block_size, num_spec=run.num_spec,
                                conv_bytes=run.model_bytes, ssm_bytes=run.ssm_bytes,
                                disable_hybrid=shape.disable_hybrid_kv_cache_manager,
                                max_model_len=res.max_model_len,
                                state_pages=2 if res.mamba_cache_mode == "align" else 1)
        graphs = profiling.cudagraph_bytes(arch, res.capture_sizes, counts[stage] + (len(spec_layers) if last else 0),
                                           run.tp)
        stage_graphs.append(graphs)
        for rank in _stage_ranks(run, stage, start, counts[stage], layout, graphs, len(stage_layers)):
            ranks.append(rank)
            layouts.append(layout)
        start += counts[stage]
    return _Ranks(tuple(ranks), tuple(layouts), tuple(stage_graphs))


def _stage_ranks(run: _Run, stage: int, first_layer: int, num_layers: int, layout: Layout, graphs: int,
                 cache_layers: int) -> list[RankBreakdown]:
    """The TP ranks of one PP stage: budget, weights, non-torch, activation, graphs and the KV pool."""
    arch, res, shape, tp = run.arch, run.res, run.shape, run.tp
    last = stage == run.pp - 1
    if run.weights_bytes_per_rank is not None:
        weights = int(run.weights_bytes_per_rank)
    else:
        weights = weights_per_rank(arch, run.weights_bytes, tp, run.pp, stage, first_layer, num_layers,
                                   run.model_bytes, run.repack)
    if last and shape.extra_weights_bytes:
        weights += int(shape.extra_weights_bytes) // tp
    non_torch = profiling.non_torch_bytes(tp, run.pp, run.nvswitch, res.engine)
    act = profiling.activation(arch, tp=tp, tokens=res.max_num_batched_tokens, num_seqs=res.max_num_seqs,
                               last_stage=last, num_spec=run.num_spec, engine=res.engine,
                               encoder=shape.mm_encoder_profiling and stage == 0,
                               graphs_in_budget=res.engine == "v1" and run.ver >= GRAPH_ESTIMATE_FROM,
                               sampler=sampler_path(run.ver, res.engine, shape.sampler, shape.device_name))
    subtracted = graphs if res.cudagraphs_subtracted else 0
    ranks = []
    for tp_rank in range(tp):
        idx = stage * tp + tp_rank
        budget = int(run.mems[idx] * run.util)
        if shape.kv_cache_memory_bytes is not None:
            pool = int(shape.kv_cache_memory_bytes)
        else:
            pool = max(0, budget - weights - non_torch - act.total - subtracted)
        ranks.append(RankBreakdown(rank=idx, gpu_memory_bytes=int(run.mems[idx]), budget_bytes=budget,
                                   weights_bytes=weights, non_torch_bytes=non_torch,
                                   activation_bytes=act.total, cudagraph_bytes=subtracted,
                                   kv_pool_bytes=pool,
                                   num_blocks=pool // layout.bytes_per_block if layout.bytes_per_block else 0,
                                   bytes_per_block=layout.bytes_per_block,
                                   kv_bytes_per_token=layout.kv_bytes_per_token, num_layers=cache_layers))
    return ranks


def _fits(per: _Ranks, length: int, inflight: int, num_spec: int) -> bool:
    """Every rank that holds cache layers has the pages one request of ``length`` tokens needs."""
    for rank, lay in zip(per.ranks, per.layouts, strict=True):
        if not lay.groups:
            continue
        if rank.kv_pool_bytes <= 0 or bytes_needed(lay, length, inflight, num_spec) > rank.kv_pool_bytes:
            return False
    return True


def _longest_fit(per: _Ranks, inflight: int, num_spec: int, upper: int) -> int:
    """The largest length that fits, by bisection (vLLM's estimate_max_model_len)."""
    lo, hi = 0, upper
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _fits(per, mid, inflight, num_spec):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _closing_notes(arch: Architecture, shape: ServeShape, res: Resolved, outside: int, notes: list[str]) -> None:
    if outside:
        notes.append(f"vLLM {res.vllm_version} captures CUDA graphs outside the budget "
                     f"(~{outside / GiB:.2f} GiB in the remaining {1 - res.mem_util:.0%})")
    if arch.has_vision and arch.vision is None and shape.mm_encoder_profiling:
        notes.append("multimodal encoder profiling is not modelled for this vision tower (text-only activation peak)")
    if shape.kv_cache_memory_bytes is not None:
        notes.append("--kv-cache-memory-bytes sets the pool; util does not size the cache")
    notes.extend(arch.notes)


def _check_geometry(arch: Architecture, tp: int, pp: int) -> None:
    if any(layer.kind in ("full", "sliding", "chunked", "mla") for layer in arch.layers):
        kv_split = any(layer.kind in ("full", "sliding", "chunked") for layer in arch.layers)
        problem = tp_geometry_problem(tp, arch.num_attention_heads,
                                      arch.num_key_value_heads if kv_split else None)
        if problem:
            raise CannotPrice(problem)
    for layer in arch.layers:
        if layer.kind == "gdn" and (layer.linear_num_key_heads % tp or layer.linear_num_value_heads % tp):
            raise CannotPrice(f"linear-attention heads are not divisible by TP {tp}")
        if layer.kind == "mamba2" and layer.mamba_num_heads % tp:
            raise CannotPrice(f"Mamba heads are not divisible by TP {tp}")
        if layer.kind == "linear":
            raise CannotPrice("unmodelled linear-attention layer")
    if pp > arch.num_hidden_layers:
        raise CannotPrice(f"PP {pp} exceeds {arch.num_hidden_layers} layers")
