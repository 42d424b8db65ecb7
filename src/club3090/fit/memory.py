"""vLLM start-up memory accounting per GPU rank (V1, and V0 where the release line ran it).

``predict(arch, weights_bytes=..., gpu_memory_bytes=[...], shape=ServeShape(...))`` returns a
:class:`FitResult`: the per-rank budget split (weights, non-torch, activation peak, CUDA-graph
pool, KV pool), the KV page layout (block size, groups, bytes per block), ``num_blocks`` (minimum
over ranks), the concurrency at ``max_model_len``, the "GPU KV cache size" line as the chosen vLLM
version prints it, a verdict and the largest context that fits.

Exact parts (page sizes, grouping, blocks per request, the refusal check: ``fit/kv_layout.py``)
follow vLLM's code paths; so do the release-line rules (engine, profile batch, MLA, auto-fit,
defaults: ``fit/vllm_rules.py``). The free terms (non-torch, activation peak with sampler and
encoder, CUDA graphs: ``fit/profiling.py``) are small physical formulas whose coefficients were
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
from club3090.fit.kv_formats import canonical_dtype, dtype_bytes, kv_format
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
from club3090.fit.vllm_rules import (
    AUTO_FIT_FLAG_FROM,
    AUTO_FIT_UNSET_FROM,
    GRAPH_ESTIMATE_FROM,
    KV_TOKENS_BY_CONCURRENCY_FROM,
    NEWEST_KNOWN_VLLM,
    UTIL_092_FROM,
    VERSION_RE,
    batch_defaults,
    capture_sizes,
    choose_engine,
    fp8_marlin_scale_ratio,
    mla_block_size,
    mla_rule,
    parse_version,
    v0_batched_tokens,
    version_note,
)
from club3090.model.architecture import Architecture, LayerSpec

__all__ = [
    "NEWEST_KNOWN_VLLM",
    "VERDICTS",
    "VERSION_RE",
    "FitResult",
    "GiB",
    "KvGroup",
    "MiB",
    "RankBreakdown",
    "ServeShape",
    "Unpriceable",
    "capture_sizes",
    "kv_page_layout",
    "mamba_groups",
    "parse_version",
    "pp_layer_counts",
    "predict",
    "resolve_defaults",
    "tp_geometry_problem",
]

GiB = 1 << 30
MiB = 1 << 20
VERDICTS = ("fits-clean", "fits-constrained", "wont-fit")
CONSTRAINED_SLACK = Fraction(105, 100)   # requested concurrency may exceed the pool by 5 % and stay "clean"



# ---------------------------------------------------------------------------------------------
# the start-up free-memory check, and the margin vLLM suggests on top
ERROR_BAND_FRACTION = Fraction(3, 100)
ERROR_BAND_FLOOR = int(0.5 * GiB)


# ---------------------------------------------------------------------------------------------
# inputs


@dataclass(frozen=True, slots=True)
class ServeShape:
    """Serving settings. ``None`` means vLLM's default for the chosen version and device."""

    tp: int = 1
    pp: int = 1
    mem_util: float | None = None
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    block_size: int | None = None
    kv_cache_dtype: str = "auto"
    enforce_eager: bool = False
    vllm_version: str | None = None
    num_speculative_tokens: int = 0
    extra_weights_bytes: int = 0
    # additions beyond the DESIGN.md minimum
    dtype: str | None = None                 # --dtype; None/"auto" = the config's dtype (fp32 -> bf16)
    entrypoint: str = "api_server"           # "api_server" | "llm" (batch defaults differ)
    device_name: str | None = None           # e.g. "NVIDIA A100-SXM4-80GB" (batch defaults exclude A100/GB10)
    nvswitch: bool | None = None             # None: assumed for >= 70 GiB data-centre parts at TP > 1
    kv_cache_memory_bytes: int | None = None  # --kv-cache-memory-bytes (per GPU)
    disable_hybrid_kv_cache_manager: bool = False
    mamba_ssm_cache_dtype: str | None = None  # None: config's value, else the model dtype
    enable_prefix_caching: bool | None = None
    # vLLM's release-line rules (fit/vllm_rules.py); None = that version's default
    engine: str | None = None                # "v0" | "v1" (VLLM_USE_V1) on the 0.8-0.10 lines
    enable_chunked_prefill: bool | None = None   # V0 only; V1 always chunks
    mla_disabled: bool = False               # VLLM_MLA_DISABLE=1
    quantization: str | None = None          # --quantization; None = the config's quant_method
    speculative_method: str | None = None    # "mtp" | "eagle" | "eagle3" | "dflash" | "ngram" | "draft_model"
    mm_encoder_profiling: bool = True        # False: no encoder dummy batch (language-only / images 0)
    pp_layer_partition: tuple[int, ...] | None = None   # VLLM_PP_LAYER_PARTITION; None = vLLM's even split
    distributed_executor_backend: str | None = None     # "ray" (multi-node) | "mp"; None = vLLM's choice
    compute_capability: str | None = None    # e.g. "8.6"; FP8 weights run as Marlin W8A16 below 8.9


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
class Resolved:
    vllm_version: str
    mem_util: float
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    kv_cache_dtype: str
    model_dtype: str
    cudagraphs_subtracted: bool
    capture_sizes: int
    kv_tokens_formula: str          # "blocks" (<= 0.19) | "concurrency"
    engine: str = "v1"              # "v0" | "v1"
    chunked_prefill: bool = True
    use_mla: bool = True
    max_model_len_auto: bool = False   # vLLM fits max_model_len itself (-1 / auto, or unset from 0.26)


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
            "ranks": [{"rank": r.rank, "gpu_memory_bytes": r.gpu_memory_bytes, **r.to_json(),
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


# ---------------------------------------------------------------------------------------------
# versions and defaults


def _quant_method(arch: Architecture, shape: ServeShape) -> str | None:
    if shape.quantization:
        return shape.quantization
    qc = arch.quantization_config or {}
    method = qc.get("quant_method")
    return str(method) if method else None


def resolve_defaults(arch: Architecture, shape: ServeShape, gpu_memory_bytes: Sequence[int]) -> Resolved:
    """The settings vLLM would run with: the shape's, else the release line's defaults."""
    version = shape.vllm_version or NEWEST_KNOWN_VLLM
    ver = parse_version(shape.vllm_version)
    num_spec = int(shape.num_speculative_tokens or 0)
    spec_method = shape.speculative_method or ("mtp" if num_spec and arch.mtp_layers else None)
    choice = choose_engine(ver, requested=shape.engine, pp=int(shape.pp),
                           kv_cache_dtype=str(shape.kv_cache_dtype or "auto"),
                           has_state_layers=bool(arch.state_layers), spec_method=spec_method,
                           ray=shape.distributed_executor_backend == "ray")
    util = shape.mem_util if shape.mem_util is not None else (0.92 if ver >= UTIL_092_FROM else 0.90)
    device_gib = min(gpu_memory_bytes) / GiB if gpu_memory_bytes else 0.0
    mns, mnbt = batch_defaults(ver, choice.engine, device_gib=device_gib, device_name=shape.device_name or "",
                               api_server=shape.entrypoint != "llm")
    max_num_seqs = shape.max_num_seqs or mns
    auto = shape.max_model_len is not None and shape.max_model_len < 0
    model_len = arch.derived_max_model_len or arch.max_position_embeddings or 0
    max_len = model_len if auto or not shape.max_model_len else shape.max_model_len
    auto = auto or (shape.max_model_len is None and choice.engine == "v1" and ver >= AUTO_FIT_UNSET_FROM)
    use_mla = any(layer.kind == "mla" for layer in arch.layers)
    if use_mla:
        use_mla = mla_rule(ver, quant_method=_quant_method(arch, shape), disabled=shape.mla_disabled,
                           quant_config=arch.quantization_config)[0]
    chunked = True
    if choice.engine == "v0":
        chunked, mnbt = v0_batched_tokens(
            ver, max_model_len=max_len, chunked=shape.enable_chunked_prefill,
            sliding_window=any(layer.kind == "sliding" for layer in arch.layers), speculative=num_spec > 0,
            multimodal=arch.has_vision, mla=use_mla)
    if shape.max_num_batched_tokens:
        mnbt = shape.max_num_batched_tokens
    elif choice.engine == "v1":
        mnbt = max(mnbt, max_num_seqs, 1)
    model_dtype = canonical_dtype(shape.dtype) if shape.dtype and shape.dtype != "auto" else None
    if model_dtype is None:
        cfg = canonical_dtype(arch.torch_dtype)
        model_dtype = "bfloat16" if cfg in (None, "float32") else cfg
    graphs = choice.engine == "v1" and ver >= GRAPH_ESTIMATE_FROM and not shape.enforce_eager
    if shape.enforce_eager:
        n_sizes = 0
    elif choice.engine == "v0":     # worker/model_runner.py: _BATCH_SIZES_TO_CAPTURE cut at max_num_seqs
        n_sizes = len([s for s in [1, 2, 4, *range(8, 257, 8)] if s <= max_num_seqs])
    else:
        n_sizes = len(capture_sizes(max_num_seqs, num_spec))
    return Resolved(vllm_version=version, mem_util=float(util), max_model_len=int(max_len),
                    max_num_seqs=int(max_num_seqs), max_num_batched_tokens=int(max(mnbt, 1)),
                    kv_cache_dtype=shape.kv_cache_dtype or "auto", model_dtype=model_dtype,
                    cudagraphs_subtracted=graphs, capture_sizes=n_sizes,
                    kv_tokens_formula="concurrency" if ver >= KV_TOKENS_BY_CONCURRENCY_FROM else "blocks",
                    engine=choice.engine, chunked_prefill=chunked, use_mla=use_mla, max_model_len_auto=auto)


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
# weights per rank


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


def _weights_per_rank(arch: Architecture, weights_bytes: int, tp: int, pp: int, stage: int,
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
    try:
        return _predict(arch, weights_bytes=weights_bytes, gpu_memory_bytes=gpu_memory_bytes, shape=shape,
                        weights_bytes_per_rank=weights_bytes_per_rank, confidence=confidence, drafter=drafter)
    except CannotPrice as exc:
        return Unpriceable(str(exc))


def _predict(arch: Architecture, *, weights_bytes: int, gpu_memory_bytes: Sequence[int], shape: ServeShape,
             weights_bytes_per_rank: int | None, confidence: str,
             drafter: Architecture | None = None) -> FitResult:
    if arch.unpriceable_reason:
        raise CannotPrice(arch.unpriceable_reason)
    tp, pp = int(shape.tp), int(shape.pp)
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
    mems = mems[:world]
    fmt = kv_format(shape.kv_cache_dtype)
    if fmt is None:
        raise CannotPrice(f"unknown KV cache dtype {shape.kv_cache_dtype!r}")
    if fmt.mla_bytes_per_token is not None and not any(layer.kind == "mla" for layer in arch.layers):
        raise CannotPrice(f"KV cache dtype {fmt.name} applies to MLA models only")

    res = resolve_defaults(arch, shape, mems)
    if shape.max_model_len is not None and shape.max_model_len < 0 and \
            parse_version(shape.vllm_version) < AUTO_FIT_FLAG_FROM:
        raise CannotPrice(f"--max-model-len auto needs vLLM >= 0.12.0 (priced as {res.vllm_version})")
    notes: list[str] = []
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
        notes.append(mla_rule(ver, quant_method=_quant_method(arch, shape), disabled=shape.mla_disabled,
                              quant_config=arch.quantization_config)[2] or "")
        arch = _without_mla(arch, ver, _quant_method(arch, shape), shape.mla_disabled)
    _check_geometry(arch, tp, pp)
    if res.max_model_len <= 0:
        raise CannotPrice("max_model_len unknown: the config has no max_position_embeddings")
    model_bytes = dtype_bytes(res.model_dtype)
    ssm_name = shape.mamba_ssm_cache_dtype or arch.mamba_ssm_cache_dtype
    ssm_bytes = dtype_bytes(ssm_name) if ssm_name and ssm_name != "auto" else model_bytes
    num_spec = int(shape.num_speculative_tokens or 0)
    inflight = res.max_num_batched_tokens * (pp if pp > 1 else 1)
    nvswitch = shape.nvswitch if shape.nvswitch is not None else (min(mems) >= 70 * GiB)
    util = Fraction(res.mem_util).limit_denominator(10_000)

    # layers per PP stage (MTP layers sit on the last stage when speculative decoding is on)
    counts = pp_layer_counts(arch.num_hidden_layers, pp, shape.pp_layer_partition)
    mtp_layers: list[LayerSpec] = []
    method = shape.speculative_method or (drafter_method(drafter) if drafter is not None else None)
    if num_spec > 0 and drafter is not None and method != "mtp":
        mtp_layers = list(drafter_kv_layers(method, drafter))
        if mtp_layers:
            notes.append(f"{len(mtp_layers)} {method} drafter layer(s) join the KV cache groups")
        else:
            notes.append(f"the {method} drafter adds no KV of its own")
    elif num_spec > 0 and arch.mtp_layers and arch.mtp_layer is not None:
        mtp_layers = [arch.mtp_layer] * arch.mtp_layers
        notes.append(f"{arch.mtp_layers} MTP layer(s) add their own KV")

    block_size = shape.block_size
    if block_size is None and res.use_mla and any(layer.kind == "mla" for layer in arch.layers):
        block_size = mla_block_size(ver, shape.compute_capability)
        if block_size:
            notes.append(f"vLLM {res.vllm_version} forces {block_size}-token KV blocks for MLA on compute "
                         f"capability {shape.compute_capability}")
    repack = fp8_marlin_scale_ratio(_quant_method(arch, shape),
                                    (arch.quantization_config or {}).get("weight_block_size"),
                                    shape.compute_capability)
    if repack and weights_bytes_per_rank is None:
        notes.append(f"FP8 weights run as Marlin W8A16 on compute capability {shape.compute_capability}: "
                     f"block scales expand to 16-bit groups (+{float(repack):.1%} of the quantized weights)")

    ranks: list[RankBreakdown] = []
    layouts: list[Layout] = []
    stage_graphs: list[int] = []
    start = 0
    for stage in range(pp):
        stage_layers = list(arch.layers[start:start + counts[stage]])
        start += counts[stage]
        last = stage == pp - 1
        if last:
            stage_layers += mtp_layers
        layout = kv_page_layout(stage_layers, tp=tp, fmt=fmt, model_bytes=model_bytes,
                                block_size=block_size, num_spec=num_spec,
                                conv_bytes=model_bytes, ssm_bytes=ssm_bytes,
                                disable_hybrid=shape.disable_hybrid_kv_cache_manager,
                                max_model_len=res.max_model_len)
        if weights_bytes_per_rank is not None:
            weights = int(weights_bytes_per_rank)
        else:
            weights = _weights_per_rank(arch, int(weights_bytes), tp, pp, stage, start - counts[stage],
                                        counts[stage], model_bytes, repack)
        if last and shape.extra_weights_bytes:
            weights += int(shape.extra_weights_bytes) // tp
        non_torch = profiling.non_torch_bytes(tp, pp, nvswitch)
        act = profiling.activation(arch, tp=tp, tokens=res.max_num_batched_tokens, num_seqs=res.max_num_seqs,
                                   last_stage=last, num_spec=num_spec, engine=res.engine,
                                   encoder=shape.mm_encoder_profiling and stage == 0,
                                   graphs_in_budget=res.engine == "v1" and ver >= GRAPH_ESTIMATE_FROM)
        # drafter layers capture their own graphs on the last stage
        graph_layers = counts[stage] + (len(mtp_layers) if last else 0)
        graphs = profiling.cudagraph_bytes(arch, res.capture_sizes, graph_layers, tp)
        stage_graphs.append(graphs)
        for tp_rank in range(tp):
            idx = stage * tp + tp_rank
            budget = int(mems[idx] * util)
            subtracted = graphs if res.cudagraphs_subtracted else 0
            if shape.kv_cache_memory_bytes is not None:
                pool = int(shape.kv_cache_memory_bytes)
            else:
                pool = max(0, budget - weights - non_torch - act.total - subtracted)
            blocks = pool // layout.bytes_per_block if layout.bytes_per_block else 0
            ranks.append(RankBreakdown(rank=idx, gpu_memory_bytes=int(mems[idx]), budget_bytes=budget,
                                       weights_bytes=weights, non_torch_bytes=non_torch,
                                       activation_bytes=act.total, cudagraph_bytes=subtracted,
                                       kv_pool_bytes=pool, num_blocks=blocks,
                                       bytes_per_block=layout.bytes_per_block,
                                       kv_bytes_per_token=layout.kv_bytes_per_token,
                                       num_layers=len(stage_layers)))
            layouts.append(layout)

    if not any(lay.groups for lay in layouts):
        raise CannotPrice("the model has no KV cache or state layers to size")
    # a PP stage holding no cache layers (Nemotron-H's trailing MLP stages) allocates no KV and
    # cannot limit the pool: only stages with groups compete
    limiting = min((i for i in range(len(ranks)) if layouts[i].groups),
                   key=lambda i: (ranks[i].num_blocks, i))
    lim, layout = ranks[limiting], layouts[limiting]
    num_blocks = lim.num_blocks

    def fits(candidate: int) -> bool:
        for rank, lay in zip(ranks, layouts, strict=True):
            if not lay.groups:
                continue
            if rank.kv_pool_bytes <= 0 or bytes_needed(lay, candidate, inflight, num_spec) > rank.kv_pool_bytes:
                return False
        return True

    length = res.max_model_len
    upper = max(length, arch.derived_max_model_len or 0)
    lo, hi = 0, upper
    while lo < hi:                               # largest length that fits (estimate_max_model_len)
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    max_fit = lo
    if res.max_model_len_auto and not fits(length) and max_fit > 0:
        notes.append(f"vLLM {res.vllm_version} auto-fits max_model_len: reduced from {length} to {max_fit}")
        length = max_fit
        res = replace(res, max_model_len=max_fit)
    per_request = max(blocks_per_request(lay, length, inflight, num_spec) for lay in layouts if lay.groups)
    concurrency = num_blocks / per_request if per_request else 0.0
    if res.kv_tokens_formula == "concurrency":
        kv_tokens = int(concurrency * length)
    else:
        min_block = min(g.block_size for g in layout.groups)
        kv_tokens = num_blocks // len(layout.groups) * min_block

    requested = shape.max_num_seqs or 1
    if not fits(length):
        verdict = "wont-fit"
    elif requested * per_request > num_blocks * CONSTRAINED_SLACK:
        verdict = "fits-constrained"
    else:
        verdict = "fits-clean"

    cg_est = stage_graphs[limiting // tp]
    outside = 0 if res.cudagraphs_subtracted or shape.enforce_eager else cg_est
    if outside:
        notes.append(f"vLLM {res.vllm_version} captures CUDA graphs outside the budget "
                     f"(~{outside / GiB:.2f} GiB in the remaining {1 - res.mem_util:.0%})")
    if arch.has_vision and arch.vision is None and shape.mm_encoder_profiling:
        notes.append("multimodal encoder profiling is not modelled for this vision tower (text-only activation peak)")
    if shape.kv_cache_memory_bytes is not None:
        notes.append("--kv-cache-memory-bytes sets the pool; util does not size the cache")
    notes.extend(arch.notes)
    band = max(ERROR_BAND_FLOOR, int(lim.budget_bytes * ERROR_BAND_FRACTION))
    return FitResult(
        per_gpu=lim, ranks=tuple(ranks), kv_bytes_per_token=lim.kv_bytes_per_token,
        state_bytes_per_request=layout.state_bytes_per_request, block_size=layout.attn_block_size,
        bytes_per_block=layout.bytes_per_block, num_blocks=num_blocks, blocks_per_request=per_request,
        kv_cache_tokens=kv_tokens, max_concurrency=concurrency, raw_verdict=verdict,
        max_model_len=length, max_model_len_fit=max_fit, confidence=confidence,
        error_band_bytes=band, groups=layout.groups, settings=res, notes=tuple(notes),
        cudagraph_outside_budget_bytes=outside, requested_concurrency=requested)


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
