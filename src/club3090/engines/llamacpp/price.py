"""``kv-calc`` for the llama.cpp family: a GGUF model (local file, llama.cpp profile, GGUF repo)
priced with llama.cpp's memory model (``club3090.fit.llamacpp``) in llama.cpp's own flag names.

The request's facts come through ``Provider.resolve_gguf``; the rig is ``--gpus``, else the GPUs
detected here, else the profile's reference card (said so); with none of them the answer is a
stop that asks for ``--gpus``, never a guessed card. The result is a frozen value; ``cli/`` renders.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from club3090.compose.llamacpp import ENGINE_TYPE
from club3090.errors import UsageError
from club3090.fit.estimate import NoFit
from club3090.fit.llamacpp import LlamaCppArgs, cache_types, fewest_offloaded, largest_context, predict
from club3090.fit.memory import Unpriceable
from club3090.outcome import Reason, Stop, Stratum

if TYPE_CHECKING:  # pragma: no cover - typing only
    from club3090.catalog.model import Profile
    from club3090.edges.gguf_source import GgufSource
    from club3090.fit.llamacpp import LlamaCppBreakdown
    from club3090.pipeline.kv_calc import PriceRequest
    from club3090.pipeline.provider import Provider

__all__ = ["LlamaFlags", "LlamaPrice", "price"]

# vLLM-only kv-calc settings (``PriceSettings`` and ``ShapeRequest`` fields): a GGUF model refuses them
VLLM_ONLY = ("max_num_batched_tokens", "block_size", "dtype", "weights_gib", "vllm_version", "num_speculative_tokens")
VLLM_ONLY_SHAPE = {"pipeline_parallel_size": "pipeline_parallel_size (--pp)",
                   "gpu_memory_utilization": "gpu_memory_utilization (--mem-util)"}


@dataclass(frozen=True, slots=True)
class LlamaFlags:
    """kv-calc's llama.cpp flags (llama.cpp's names); None: not given (the profile's, else llama.cpp's)."""

    ctx_size: int | None = None
    cache_type_k: str | None = None
    cache_type_v: str | None = None
    n_gpu_layers: int | None = None
    tensor_split: tuple[float, ...] | None = None
    split_mode: str | None = None
    main_gpu: int | None = None
    n_cpu_moe: int | None = None
    parallel: int | None = None
    batch_size: int | None = None
    ubatch_size: int | None = None
    flash_attn: str | None = None            # on | off | auto
    override_tensors: tuple[tuple[str, str], ...] = ()
    swa_full: bool = False
    no_kv_offload: bool = False
    quant: str | None = None                 # which quant of a GGUF repo


@dataclass(frozen=True, slots=True)
class LlamaPrice:
    """A GGUF model priced for llama.cpp: the verdict, the largest context, the offload that fits."""

    source: "GgufSource"
    gpus: str                                # the rig as priced (a --gpus value, or named by where it came from)
    result: "LlamaCppBreakdown"
    best: int | None                         # the largest context with this layout
    rescue: "LlamaCppBreakdown | None"      # the fewest layers or experts on the host that fit
    notes: tuple[str, ...] = field(default=())

    @property
    def fits(self) -> bool:
        return bool(self.result.fits)

    @property
    def verdict(self) -> str:
        return "fits-clean" if self.fits else "wont-fit"

    def to_json(self) -> dict[str, Any]:
        src, result, m = self.source, self.result, self.source.model
        rescue = self.rescue
        return {
            "ok": True, "engine": ENGINE_TYPE, "model": src.label, "architecture": m.arch, "quant": src.quant,
            "source": src.where, "gpus": self.gpus, "profile": src.profile.key if src.profile is not None else None,
            "confidence": result.confidence, "verdict": self.verdict, "weights_bytes": m.weights_bytes,
            "args": asdict(result.args), "kv": {**asdict(result.kv), "total_bytes": result.kv.total_bytes},
            "devices": [{**asdict(d), "total_bytes": d.total_bytes, "fits": d.fits} for d in result.devices],
            "max_ctx_fit": self.best, "notes": list(self.notes),
            "fits_with": None if rescue is None else {"n_gpu_layers": rescue.args.n_gpu_layers,
                                                      "n_cpu_moe": rescue.args.n_cpu_moe},
        }


def check_request(request: "PriceRequest") -> None:
    """A GGUF model is priced on one machine with llama.cpp's flags: vLLM-only settings and a rig
    of several nodes are usage errors, not a silently different answer."""
    o = request.overrides
    given = [name for name in VLLM_ONLY if getattr(o, name, None) is not None]
    given += [said for name, said in VLLM_ONLY_SHAPE.items() if getattr(o.shape, name) is not None]
    if o.enforce_eager:
        given.append("enforce_eager")
    if given:
        flags = ", ".join("--" + g.replace("_", "-") for g in given)
        raise UsageError(f"{flags}: vLLM settings; a GGUF model is priced with llama.cpp's flags "
                         "(--ctx-size, --cache-type-k/-v, --n-gpu-layers, ...)")
    if request.gpus is not None and request.gpus.nodes > 1:
        raise UsageError("llama.cpp models are priced on one machine: drop --nodes / --interconnect and give "
                         "one node's GPUs (--gpus 2x3090)")


def llama_args(request: "PriceRequest", profile: "Profile | None") -> LlamaCppArgs | Unpriceable:
    """The profile's llama.cpp settings, the shared kv-calc flags in llama.cpp's terms, then the
    llama.cpp flags as given."""
    o, f = request.overrides.shape, request.llamacpp
    base = LlamaCppArgs(ctx_size=4096)
    if profile is not None:
        pair = cache_types(profile.kv_format)
        if isinstance(pair, Unpriceable):
            return pair
        base = replace(base, ctx_size=profile.max_model_len, parallel=profile.max_num_seqs,
                       cache_type_k=pair[0], cache_type_v=pair[1])
    if o.length is not None:
        base = replace(base, ctx_size=o.length)
    if o.max_num_seqs is not None:
        base = replace(base, parallel=o.max_num_seqs)
    if o.kv_cache_dtype is not None:
        pair = cache_types(o.kv_cache_dtype)
        if isinstance(pair, Unpriceable):
            return pair
        base = replace(base, cache_type_k=pair[0], cache_type_v=pair[1])
    given: dict[str, Any] = {"ctx_size": f.ctx_size, "cache_type_k": f.cache_type_k, "cache_type_v": f.cache_type_v,
             "n_gpu_layers": f.n_gpu_layers, "tensor_split": f.tensor_split, "split_mode": f.split_mode,
             "main_gpu": f.main_gpu, "n_cpu_moe": f.n_cpu_moe, "parallel": f.parallel,
             "batch_size": f.batch_size, "ubatch_size": f.ubatch_size}
    out = replace(base, **{k: v for k, v in given.items() if v is not None})
    if f.flash_attn is not None:
        out = replace(out, flash_attn=f.flash_attn != "off")
    if f.override_tensors:
        out = replace(out, override_tensors=f.override_tensors)
    return replace(out, swa_full=out.swa_full or f.swa_full, kv_offload=out.kv_offload and not f.no_kv_offload)


def rig(request: "PriceRequest", provider: "Provider", profile: "Profile | None") -> tuple[list[int], str, str | None]:
    """(memory per GPU, the rig as shown, a note on where it came from): ``--gpus``, else the GPUs
    detected here, else the profile's reference card; a ``UsageError`` asks for ``--gpus`` when none."""
    if request.gpus is not None:
        return list(request.gpus.memory_bytes), request.gpus.spec, None
    detected = provider.detect_gpus()
    memory = [g.memory_bytes for g in detected.gpus if g.memory_bytes and g.vendor == "nvidia"]
    if memory:
        names = sorted({g.name for g in detected.gpus})
        return memory, f"{len(memory)}x {', '.join(names)} (detected)", None
    catalog = provider.catalog()
    card = catalog.gpus.get(profile.reference_gpu) if profile is not None and profile.reference_gpu else None
    if card is not None and profile is not None:
        count = request.overrides.shape.tensor_parallel_size or profile.tp
        return ([card.usable_memory_bytes] * count, f"{count}x{card.id}",
                f"no GPU detected and no --gpus given: priced on {profile.key}'s reference card "
                f"({card.display_name} x {count}); pass --gpus to price your own")
    return [], "", None


def price(request: "PriceRequest", provider: "Provider") -> LlamaPrice | NoFit | Stop:
    """kv-calc's answer for a GGUF model (``request.llamacpp``: llama.cpp's flags)."""
    from club3090.engines.llamacpp import LLAMACPP
    from club3090.pipeline.engines import profile_of

    check_request(request)
    catalog = provider.catalog()
    profile = profile_of(catalog, LLAMACPP, request.profile, request.model)
    src = provider.resolve_gguf(request.model, catalog, profile=profile, quant=request.llamacpp.quant)
    gpu_bytes, shown, note = rig(request, provider, src.profile)
    if not gpu_bytes:
        return Stop(Stratum.ENGINE_SUPPORT, Reason.HARDWARE_VRAM_UNDETERMINED,
                    detail={"message": "no GPU detected and no --gpus given: name your GPUs, e.g. --gpus 1x3090"})
    largs = llama_args(request, src.profile)
    result = largs if isinstance(largs, Unpriceable) else predict(src.model, largs, gpu_bytes)
    if isinstance(result, Unpriceable):      # a verdict about the model or flags (no-fit-model), not a crash
        return NoFit(model=src.label, error=result.reason)
    assert isinstance(largs, LlamaCppArgs)
    best = largest_context(src.model, largs, gpu_bytes, limit=max(src.model.ctx_train or 0, largs.ctx_size))
    if request.overrides.solve_max_ctx and best:
        solved = predict(src.model, replace(largs, ctx_size=best), gpu_bytes)
        result = solved if not isinstance(solved, Unpriceable) else result
    rescue = None if result.fits else fewest_offloaded(src.model, largs, gpu_bytes)
    return LlamaPrice(source=src, gpus=shown, result=result, best=best, rescue=rescue,
                      notes=(note,) if note else ())
