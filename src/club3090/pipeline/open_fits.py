"""``fits`` over the open-model index: every index model on the rig, under the engine that serves it best.

``open_fits(index, rig, request) -> tuple[OpenRow, ...]``, ranked. For each model of
``catalog/data/open_models.yaml`` (filtered by ``--task``):

- **vLLM** (safetensors): the best-quality variant whose weights can fit (bf16, then FP8, then the
  4-bit repositories; NVFP4 only on cards with native FP4) priced once with vLLM's memory model at
  the largest context that fits (``fit.memory.predict``);
- **llama.cpp** (GGUF): the best-quality quant within ``--max-quant-loss`` that fits on the GPUs,
  else the best one that runs with part of the model in host memory, planned by
  ``fit.offload.plan_offload`` (``-ngl``, ``--n-cpu-moe``, context, speed).

A model is served by vLLM when a safetensors variant fits (and ``--engine`` allows it), else by
llama.cpp when a GGUF quant runs, on the GPUs alone or with offload. Every row is ``estimated``:
the index holds configs and sizes, not measurements. The ranking puts rows that fit on the GPUs
first, then offloaded rows, then rows that do not run, each by parameter count (the larger model
first: a crude proxy of capability), then by context.

No I/O: the index, the rig and the host memory are given.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from club3090.fit.memory import FitResult, ServeShape, Unpriceable, predict
from club3090.fit.offload import DEFAULT_RAM_BANDWIDTH_GB_S, OffloadPlan, fit_quant, gguf_from_arch, plan_offload
from club3090.fit.speed import SpeedEstimate, estimate_speed
from club3090.model.architecture import Architecture, parse_config
from club3090.model.param_estimate import estimate_weights
from club3090.pipeline.engines import for_format
from club3090.units import GiB

if TYPE_CHECKING:  # pragma: no cover - typing only
    from club3090.catalog.model import Catalog
    from club3090.catalog.open_index import GgufQuant, OpenIndex, OpenModel, OpenVariant
    from club3090.engines import Engine
    from club3090.pipeline.provider import Provider
    from club3090.rig.gpus import GpuSet

__all__ = ["DEFAULT_MAX_QUANT_LOSS", "OpenFitsReport", "OpenFitsRequest", "OpenRow", "admitted_quants",
           "answer_curated", "open_fits", "open_rank_key", "open_report", "with_host_memory"]

SAFETENSORS, GGUF = for_format("safetensors"), for_format("gguf")   # the engines that read each format
DEFAULT_MAX_QUANT_LOSS = Decimal("0.7")    # +ppl @ Llama-3-8B: Q3_K_M (0.66) and better
DEFAULT_CONTEXT = 4096                      # a row runs when it holds this many tokens (else --min-context)
VLLM_QUALITY = ("bf16", "fp8", "autoround", "awq", "gptq", "w4a16", "nvfp4")
FP4_MIN_SM = Decimal("10.0")                # NVFP4 kernels: Blackwell
OVERHEAD_BYTES = 2 * GiB                    # activations, CUDA context: the closed-form pre-check's margin


@dataclass(frozen=True, slots=True)
class OpenFitsRequest:
    engine: "Engine | None" = None           # only this engine's rows (None: the best engine per model)
    min_context: int | None = None
    task: str | None = None
    max_quant_loss: Decimal | None = None    # llama.cpp: the largest +ppl a quant may cost
    ram_bytes: int | None = None             # usable host memory for llama.cpp offload (None: none)
    ram_bandwidth_gb_s: float | None = None


@dataclass(frozen=True, slots=True)
class OpenRow:
    model: str                               # index id
    repo: str
    engine: str                              # vllm | llama.cpp
    variant: str                             # variant id, or the GGUF quant label
    weights_bytes: int
    fits: bool                               # runs at the target context (on GPUs, or with planned offload)
    context: int = 0
    tasks: tuple[str, ...] = ()
    params: int = 0
    tp: int = 1
    fit: FitResult | None = None
    plan: OffloadPlan | None = None
    speed: SpeedEstimate | None = None
    gguf_repo: str | None = None
    reason: str | None = None                # why it does not run (a value, never "cannot be answered")
    geometry: str = "config"
    confidence: str = "estimated"

    @property
    def offloaded(self) -> bool:
        return self.plan is not None and self.plan.offloaded

    def serve(self, rig: str = "") -> str | None:
        """The ``club3090 up`` command that serves this row as priced (``rig``: the ``--gpus`` flags as
        given); for llama.cpp it asks for the planned quant and context, and ``up``'s memory model
        puts the same layers and experts on the host (``fit.offload.fit_quant`` finds its layout)."""
        if not self.fits:
            return None
        if self.plan is None:                      # a safetensors row: up derives its vLLM shape
            return f"club3090 up {self.repo}{rig} --dir run/"
        return f"club3090 up {self.gguf_repo} --quant {self.variant} --ctx-size {self.context}{rig} --dir run/"

    def llama_server(self) -> str | None:
        """The plain ``llama-server`` line of the planned layout."""
        if not self.fits or self.plan is None:
            return None
        return f"llama-server -hf {self.gguf_repo}:{self.variant} " + " ".join(self.plan.to_json()["flags"])

    def to_json(self) -> dict[str, Any]:
        return {"model": self.model, "repo": self.repo, "engine": self.engine, "variant": self.variant,
                "confidence": self.confidence, "geometry": self.geometry, "fits": self.fits,
                "offloaded": self.offloaded, "context": self.context, "tasks": list(self.tasks),
                "params": self.params or None, "weights_bytes": self.weights_bytes,
                "tensor_parallel_size": self.tp, "reason": self.reason,
                "offload": self.plan.to_json() if self.plan is not None else None,
                "speed": self.speed.to_json() if self.speed is not None else None,
                "llama_server": self.llama_server()}


def open_rank_key(row: OpenRow) -> tuple[int, int, int]:
    tier = 0 if row.fits and not row.offloaded else 1 if row.fits else 2
    return (tier, -row.params, -row.context)


# ---------------------------------------------------------------------------------------------
# weights of a variant


def _params(model: "OpenModel", arch: Architecture) -> int:
    return model.params or estimate_weights(arch).params


def variant_bytes(variant: "OpenVariant", arch: Architecture, params: int) -> int:
    """Weight bytes of a safetensors variant: its real size, else its bits per weight, else the
    quantized-checkpoint estimate (``model.param_estimate``)."""
    if variant.size_bytes:
        return int(variant.size_bytes)
    if variant.bits_per_weight is not None:
        return int(params * variant.bits_per_weight / 8)
    quant = dict(variant.quantization or {})
    return estimate_weights(replace(arch, quantization_config=quant)).bytes


def admitted_quants(quants: "Sequence[GgufQuant]", max_loss: Decimal | None) -> list["GgufQuant"]:
    """Quants within ``max_loss`` (+ppl), best quality first (the smallest published loss; a quant
    without a figure ranks with the figured quant nearest its bits per weight). A quant with no
    figure is admitted when it stores at least as many bits as the leanest admitted figured quant."""
    limit = DEFAULT_MAX_QUANT_LOSS if max_loss is None else max_loss
    figured = [q for q in quants if q.ppl_delta is not None]
    admitted = [q for q in figured if q.ppl_delta is not None and q.ppl_delta <= limit]
    floor = min((q.bits_per_weight for q in admitted), default=Decimal(16))
    keep = admitted + [q for q in quants if q.ppl_delta is None and q.bits_per_weight >= floor]

    def loss(q: "GgufQuant") -> Decimal:
        if q.ppl_delta is not None:
            return q.ppl_delta
        near = min(figured, key=lambda f: abs(f.bits_per_weight - q.bits_per_weight), default=None)
        return Decimal(0) if near is None or q.bits_per_weight >= 16 else near.ppl_delta or Decimal(0)

    return sorted(keep, key=lambda q: (loss(q), -q.bits_per_weight))


# ---------------------------------------------------------------------------------------------
# vLLM


def _tp_for(arch: Architecture, weights: int, mems: Sequence[int]) -> int:
    """One GPU when the weights leave room on it, else the most GPUs (a power of two) that split
    the attention heads."""
    if weights + OVERHEAD_BYTES < mems[0] * 0.9 or len(mems) == 1:
        return 1
    tp = 1
    while tp * 2 <= len(mems) and arch.num_attention_heads % (tp * 2) == 0:
        tp *= 2
    return tp


def _vllm_row(model: "OpenModel", arch: Architecture, params: int, rig: "GpuSet", target: int) -> OpenRow | None:
    """The best-quality safetensors variant that fits, else the leanest one priced (None: no variant)."""
    mems = list(rig.memory_bytes)
    usable = [v for v in model.variants if v.format == "safetensors"
              and (v.id != "nvfp4" or (rig.sm is not None and rig.sm >= FP4_MIN_SM))]
    usable.sort(key=lambda v: VLLM_QUALITY.index(v.id))
    last: OpenRow | None = None
    for variant in usable:
        weights = variant_bytes(variant, arch, params)
        base = OpenRow(model=model.id, repo=variant.repo or model.repo, engine=SAFETENSORS.name, variant=variant.id,
                       weights_bytes=weights, fits=False, tasks=model.tasks, params=params, geometry=model.geometry)
        if weights + OVERHEAD_BYTES > sum(mems) * 0.9:       # cannot fit: no pricing needed
            last = replace(base, reason=f"{weights / GiB:.1f} GiB of weights exceed the GPUs' memory")
            continue
        tp = _tp_for(arch, weights, mems)
        arch_q = arch if variant.quantization is None else replace(arch, quantization_config=dict(variant.quantization))
        fit = predict(arch_q, weights_bytes=weights, gpu_memory_bytes=mems[:tp],
                      shape=ServeShape(tp=tp, max_num_seqs=1, compute_capability=str(rig.sm) if rig.sm else None))
        if isinstance(fit, Unpriceable):
            return replace(base, reason=f"vLLM's memory model cannot price it: {fit.reason}")
        context = min(fit.max_model_len_fit, arch.max_position_embeddings or fit.max_model_len_fit)
        row = replace(base, tp=tp, fit=fit, context=context, fits=context >= target)
        if row.fits:
            speed = estimate_speed(arch, weights, ServeShape(tp=tp), rig)
            return replace(row, speed=speed)
        last = replace(row, reason=f"holds {context:,} tokens, under the {target:,} asked")
    return last


# ---------------------------------------------------------------------------------------------
# llama.cpp


def _gguf_row(model: "OpenModel", arch: Architecture, params: int, rig: "GpuSet", index: "OpenIndex",
              request: OpenFitsRequest, target: int) -> OpenRow | None:
    variant = next((v for v in model.variants if v.format == "gguf"), None)
    if variant is None:
        return None
    quants = admitted_quants(list(index.gguf_quants.values()), request.max_quant_loss)
    vram, ram = sum(rig.memory_bytes), request.ram_bytes or 0
    sized = [(q, int((variant.quants or {}).get(q.label) or params * q.bits_per_weight / 8)) for q in quants]
    on_gpu = [qs for qs in sized if qs[1] + OVERHEAD_BYTES <= vram]
    with_host = [qs for qs in sized if qs[1] + OVERHEAD_BYTES <= vram + ram and qs not in on_gpu]
    base = OpenRow(model=model.id, repo=model.repo, engine=GGUF.name, variant="", weights_bytes=0, fits=False,
                   tasks=model.tasks, params=params, gguf_repo=variant.repos[0], geometry=model.geometry)
    # on the GPUs: the best quality that fits; with offload a MoE keeps its best quality (only the
    # experts a token picks are read from the host), a dense model its leanest quant (every host
    # layer is read whole per token)
    offload = with_host[:1] + with_host[-1:] if arch.is_moe else with_host[-1:]
    tries = on_gpu[:2] + offload
    last = replace(base, reason="no admitted quant fits the GPUs and host memory together"
                   + ("" if ram else " (no host memory given: --ram GiB)"))
    for quant, weights in dict.fromkeys(tries):
        row = _plan_row(base, arch, quant.label, weights, rig, request, target)
        if row.fits:
            return row
        last = row
    return last


def _plan_row(base: OpenRow, arch: Architecture, label: str, weights: int, rig: "GpuSet",
              request: OpenFitsRequest, target: int) -> OpenRow:
    row = replace(base, variant=label, weights_bytes=weights)
    model = gguf_from_arch(arch, weights, label=label)
    if isinstance(model, Unpriceable):
        return replace(row, reason=f"llama.cpp's memory model cannot price it: {model.reason}")
    card = next((g for g in rig.gpus if g is not None), None)
    if card is None or card.memory_bandwidth_gb_s is None:
        return replace(row, reason="the GPUs' memory bandwidth is unknown (name the card: --gpus 1x3090)")
    plan = plan_offload(model, list(rig.memory_bytes), request.ram_bytes or 0, ctx=target,
                        gpu_bandwidth_gb_s=float(card.memory_bandwidth_gb_s),
                        gpu_tflops=float(card.bf16_tflops) if card.bf16_tflops is not None else None,
                        ram_bandwidth_gb_s=request.ram_bandwidth_gb_s or DEFAULT_RAM_BANDWIDTH_GB_S)
    if isinstance(plan, Unpriceable):
        return replace(row, reason=plan.reason)
    return replace(row, plan=plan, fits=plan.fit.runs, context=plan.fit.context, speed=plan.speed)


# ---------------------------------------------------------------------------------------------
# the ranking


def model_row(model: "OpenModel", index: "OpenIndex", rig: "GpuSet", request: OpenFitsRequest) -> OpenRow | None:
    """``model`` under the engine that serves it best on ``rig`` (see the module docstring); None
    when ``request.engine`` reads none of its variants (no GGUF repository for llama.cpp)."""
    arch = parse_config(model.config_dict())
    params = _params(model, arch)
    target = request.min_context or DEFAULT_CONTEXT
    vllm = _vllm_row(model, arch, params, rig, target) if request.engine in (None, SAFETENSORS) else None
    if vllm is not None and vllm.fits:
        return vllm
    gguf = _gguf_row(model, arch, params, rig, index, request, target) if request.engine in (None, GGUF) \
        else None
    if gguf is not None and (gguf.fits or vllm is None):
        return gguf
    return vllm


def open_fits(index: "OpenIndex", rig: "GpuSet", request: OpenFitsRequest) -> tuple[OpenRow, ...]:
    """Every index model (of ``request.task``) on ``rig``, ranked by :func:`open_rank_key`."""
    models = [m for m in index.models.values() if request.task is None or request.task in m.tasks]
    rows = [row for row in (model_row(m, index, rig, request) for m in models) if row is not None]
    rows.sort(key=open_rank_key)
    return tuple(rows)


# ---------------------------------------------------------------------------------------------
# curated rows nothing answered, and the report


@dataclass(frozen=True, slots=True)
class OpenFitsReport:
    rows: tuple[OpenRow, ...]
    ram_bytes: int | None                    # usable host memory planned with
    ram_source: str                          # "--ram", "detected" or "none"
    index_version: str


def _curated_gguf_row(row: Any, catalog: "Catalog", rig: "GpuSet", request: OpenFitsRequest) -> Any:
    """A curated model whose default weights are a GGUF, priced offline for llama.cpp from its
    catalog config and recorded size (the listing ``fits REPO`` would read from the Hub, estimated)."""
    from club3090.edges.gguf_remote import list_quants
    from club3090.edges.hub import RepoInfo
    from club3090.engines.llamacpp.fits import GgufListing, QuantRow
    from club3090.fit.llamacpp import LlamaCppArgs
    from club3090.model.spec import RepoFile

    model = catalog.models[row.model]
    variant = model.weights[model.default_weight_variant]
    if not variant.size_bytes or not variant.hf_repos:
        return row
    arch = parse_config(dict(model.hf_config))
    files = tuple(f for f in variant.files if not f.split("/")[-1].startswith("mtp-")) or variant.files
    share = variant.size_bytes // max(len(files), 1)
    info = RepoInfo(repo_id=variant.hf_repos[0], revision=None, commit=None,
                    files=tuple(RepoFile(name=f, size_bytes=share) for f in files))
    found = next(iter(list_quants(info)), None)
    label = found.label if found is not None else variant.id
    target = request.min_context or DEFAULT_CONTEXT
    gguf = gguf_from_arch(arch, variant.size_bytes, label=label)
    if isinstance(gguf, Unpriceable):
        return replace(row, stop=f"no-fit-model: llama.cpp's memory model cannot price it: {gguf.reason}")
    args = LlamaCppArgs(ctx_size=target)
    fit = fit_quant(gguf, args, list(rig.memory_bytes), request.ram_bytes or 0)
    if isinstance(fit, Unpriceable):
        return replace(row, stop=f"no-fit-model: {fit.reason}")
    planned = _plan_row(OpenRow(model=row.model, repo=variant.hf_repos[0], engine=GGUF.name, variant="",
                                weights_bytes=0, fits=False), arch, label, variant.size_bytes, rig, request, target)
    quant = QuantRow(label=label, files=files, size_bytes=variant.size_bytes, model=gguf, fit=fit)
    listing = GgufListing(repo=variant.hf_repos[0], commit=None, args=args, rows=(quant,), header_bytes_read=0,
                          confidence="estimated")
    return replace(row, repo=variant.hf_repos[0], fits=fit.runs, confidence="estimated", shape_source="gguf",
                   gguf=listing, stop=None, speed=planned.speed)


def _one_gpu_row(row: Any, catalog: "Catalog", rig: "GpuSet") -> Any:
    """A row the shape search found no parallel size for (the weights exceed one GPU): priced at
    TP 1, so it reads as what it is, a model that does not fit."""
    from club3090.pipeline.auto_profile import weights_of

    facts = row.facts
    if facts is None:
        return row
    fit = predict(facts.arch, weights_bytes=int(weights_of(facts, catalog) or 0),
                  gpu_memory_bytes=list(rig.memory_bytes[:1]), shape=ServeShape(tp=1),
                  confidence=facts.confidence)
    if isinstance(fit, Unpriceable):
        return row
    return replace(row, fit=fit, fits=False, tp=1, stop=None, kv_cache_dtype=fit.settings.kv_cache_dtype)


def answer_curated(rows: Sequence[Any], catalog: "Catalog", rig: "GpuSet", request: OpenFitsRequest) -> list[Any]:
    """Curated rows the vLLM path could not answer, answered: GGUF defaults under llama.cpp, and
    a model too large for any parallel size priced as not fitting."""
    out = []
    for row in rows:
        stop = row.stop or ""
        if row.fit is None and row.gguf is None and row.model in catalog.models:
            variant = catalog.models[row.model].weights[catalog.models[row.model].default_weight_variant]
            if stop.startswith("unsupported-format") and variant.format == "gguf":
                row = _curated_gguf_row(row, catalog, rig, request)
            elif "no valid parallel size" in stop:
                row = _one_gpu_row(row, catalog, rig)
        out.append(row)
    return out


def with_host_memory(provider: "Provider", request: OpenFitsRequest,
                     ram_gib: float | None = None) -> tuple[OpenFitsRequest, str]:
    """``request`` with the usable host memory ``--ram`` names (GiB), else the detected one, and
    where it came from (``--ram``, ``detected`` or ``none``)."""
    from club3090.fit.offload import usable_ram

    total: int | None
    if ram_gib is not None:
        total, source = int(ram_gib * GiB), "--ram"
    else:
        total = provider.system_memory_bytes()
        source = "detected" if total is not None else "none"
    return replace(request, ram_bytes=usable_ram(total)), source


def open_report(provider: "Provider", rig: "GpuSet", request: OpenFitsRequest,
                ram_gib: float | None = None) -> tuple[OpenFitsReport, OpenFitsRequest]:
    """The index ranked on ``rig`` with the host memory ``--ram`` names (GiB), else the detected one."""
    request, source = with_host_memory(provider, request, ram_gib)
    index = provider.open_index()
    rows = open_fits(index, rig, request)
    return OpenFitsReport(rows=rows, ram_bytes=request.ram_bytes, ram_source=source,
                          index_version=index.version), request
