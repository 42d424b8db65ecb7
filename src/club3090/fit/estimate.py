"""kv-calc's pricing step (pure): a resolved :class:`sources.ModelSource`, the user's overrides and
a GPU set -> :class:`memory.FitResult` and the context it was priced in.

The serving shape is the source's profile (:func:`serving.profile_shape`) with the overrides on
top, else vLLM's defaults plus the overrides; the drafter terms are the source's (``sources``
decides whether the profile's drafter applies to MODEL). GPUs default to the profile's reference card (else RTX 3090) x TP x PP.

``estimate(source, overrides, catalog) -> Estimate | NoFit`` (``NoFit``: the model or shape cannot
be priced, a verdict). Raises ``UsageError`` (weights unknown, fewer GPUs than TP x PP, a bad
``--gpus``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from club3090.errors import UsageError
from club3090.fit.memory import FitResult, GiB, UnpriceableModel, predict
from club3090.fit.shape import profile_shape
from club3090.model.architecture import parse_config
from club3090.rig.gpus import parse_gpus

if TYPE_CHECKING:
    from club3090.model.spec import ModelSource

__all__ = ["DEFAULT_GPU", "Estimate", "NoFit", "Overrides", "estimate", "weights_per_rank_bytes"]

DEFAULT_GPU = "rtx-3090"


@dataclass(frozen=True, slots=True)
class Overrides:
    """kv-calc's flags. ``None`` = not given (the profile's setting, else vLLM's default)."""

    tp: int | None = None
    pp: int | None = None
    mem_util: float | None = None
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    block_size: int | None = None
    kv_cache_dtype: str | None = None
    dtype: str | None = None
    vllm_version: str | None = None
    num_speculative_tokens: int | None = None
    enforce_eager: bool = False
    weights_gib: float | None = None        # weights per GPU rank, as vLLM's "Model loading took X GiB"
    gpus: str | None = None                 # a --gpus SPEC
    solve_max_ctx: bool = False             # answer for the largest context that fits


@dataclass(frozen=True, slots=True)
class Estimate:
    result: FitResult
    model: str
    architecture: str
    gpus: str
    tp: int
    pp: int
    weights_source: str
    profile: str | None

    def to_json(self) -> dict[str, Any]:
        out = self.result.to_json()
        out.update({"ok": True, "model": self.model, "architecture": self.architecture, "gpus": self.gpus,
                    "tp": self.tp, "pp": self.pp, "profile": self.profile, "weights_source": self.weights_source})
        return out


@dataclass(frozen=True, slots=True)
class NoFit:
    """``no-fit-model``: the architecture or the shape cannot be priced (why in ``error``)."""

    model: str
    error: str

    def to_json(self) -> dict[str, Any]:
        return {"ok": False, "reason": "no-fit-model", "error": self.error, "model": self.model}


def weights_per_rank_bytes(weights_gib: float | None) -> int | None:
    """``--weights-gib`` (GiB per rank, as vLLM logs it) in bytes."""
    return int(weights_gib * GiB) if weights_gib is not None else None


def estimate(source: "ModelSource", overrides: Overrides, catalog: Any) -> Estimate | NoFit:
    try:
        return _estimate(source, overrides, catalog)
    except UnpriceableModel as exc:
        return NoFit(model=source.label, error=str(exc))


def _estimate(source: "ModelSource", overrides: Overrides, catalog: Any) -> Estimate:
    o = overrides
    arch = source.arch if source.arch is not None else parse_config(source.config or {})
    prof = source.profile
    # the drafter terms are the source's (sources decides whether the profile's drafter applies)
    shape = profile_shape(
        prof, catalog if prof is not None else None, drafter=False,
        tp=o.tp, pp=o.pp, mem_util=o.mem_util, max_model_len=o.max_model_len, max_num_seqs=o.max_num_seqs,
        max_num_batched_tokens=o.max_num_batched_tokens, block_size=o.block_size,
        kv_cache_dtype=o.kv_cache_dtype, enforce_eager=True if o.enforce_eager else None,
        vllm_version=o.vllm_version, dtype=o.dtype,
        num_speculative_tokens=o.num_speculative_tokens if o.num_speculative_tokens is not None
        else source.num_spec,
        extra_weights_bytes=source.extra_weights_bytes)
    world = shape.tp * shape.pp
    spec = o.gpus if o.gpus is not None else f"{world}x{prof.reference_gpu if prof is not None else DEFAULT_GPU}"
    gpus = parse_gpus(spec, catalog)
    if gpus.count < world:
        raise UsageError(f"TP {world} needs {world} GPUs; --gpus gives {gpus.count}")
    device = gpus.gpus[0].display_name if gpus.gpus and gpus.gpus[0] is not None else None
    shape = replace(shape, device_name=device)
    per_rank = weights_per_rank_bytes(o.weights_gib)
    if per_rank is None and source.weights_bytes is None:
        raise UsageError(f"{source.label}: weights unknown; pass --weights-gib (weights per GPU rank)")
    kwargs: dict[str, Any] = dict(weights_bytes=int(source.weights_bytes or 0),
                                  gpu_memory_bytes=list(gpus.memory_bytes[:world]),
                                  weights_bytes_per_rank=per_rank, confidence=source.confidence)
    result = predict(arch, shape=shape, **kwargs)
    if o.solve_max_ctx and result.max_model_len_fit > 0 and result.max_model_len_fit != result.max_model_len:
        result = predict(arch, shape=replace(shape, max_model_len=result.max_model_len_fit), **kwargs)
    return Estimate(result=result, model=source.label, architecture=arch.architecture, gpus=spec, tp=shape.tp,
                    pp=shape.pp, weights_source="--weights-gib (per rank)" if per_rank is not None
                    else source.weights_note, profile=prof.key if prof else None)
