"""Stage functions shared by ``pull``, ``kv-calc`` and ``inspect``.

``calibrated`` re-prices a fit from this machine's own measurements, for ``pull``, ``kv-calc``
and ``fits`` alike: a promoted measurement of the same shape (``measured_here``, confidence
``exact``), else the residual of receipts of a near shape (``near_here``, docs/DESIGN.md, the Loop).

``gpu_set`` is the only caller of :func:`club3090.rig.gpus.parse_gpus`: a ``--gpus`` value is
parsed here, once, whichever command received it (a test checks there is no other call site).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from club3090.gate.outcome import Notice, NoticeCode
from club3090.rig.gpus import GpuSet, parse_gpus

if TYPE_CHECKING:  # pragma: no cover - typing only
    from club3090.catalog.model import Catalog
    from club3090.fit.memory import FitResult, ServeShape
    from club3090.model.spec import ModelSpec


def gpu_set(spec: str | None, catalog: "Catalog", *, nodes: int | None = None,
            interconnect: str | None = None) -> GpuSet | None:
    """The GPUs a ``--gpus SPEC`` names (None when not given), with ``--nodes`` / ``--interconnect``
    for a rig of several machines. Raises ``UsageError`` on a bad spec (or those flags without --gpus)."""
    if spec is None:
        if nodes is not None or interconnect is not None:
            from club3090.errors import UsageError
            raise UsageError("--nodes and --interconnect describe the GPUs of --gpus: give --gpus ONE NODE too, "
                             "e.g. --nodes 2 --gpus 2x3090")
        return None
    return parse_gpus(spec, catalog, nodes=nodes, interconnect=interconnect)


def calibrated(fit: "FitResult", spec: "ModelSpec", shape: "ServeShape", memory: "Sequence[int]",
               catalog: "Catalog", measured: "Sequence[Mapping[str, Any]]",
               receipts: "Sequence[Mapping[str, Any]]" = ()) -> "tuple[FitResult, ModelSpec, Notice] | None":
    """The fit priced from this machine's measurements: the exact shape first, else a near one."""
    here = measured_here(fit, spec, shape, memory, catalog, measured)
    if here is not None:
        return here
    near = near_here(fit, spec, shape, memory, receipts)
    return (near[0], spec, near[1]) if near is not None else None


def near_here(fit: "FitResult", spec: "ModelSpec", shape: "ServeShape", memory: "Sequence[int]",
              receipts: "Sequence[Mapping[str, Any]]") -> "tuple[FitResult, Notice] | None":
    """The fit corrected by the measured residual of this machine's receipts of a near shape.

    Each receipt's shape is predicted with the inputs of this fit (the same per-rank weights, the
    same GPUs); its residual (predicted - measured KV pool) corrects this prediction, and the
    corrected pool is priced through ``--kv-cache-memory-bytes`` so blocks, tokens, concurrency and
    the verdict follow the one rule (``fit.correction`` has the arithmetic and the direction rule).
    None when no receipt is near, under pipeline parallelism (the log states one worker's pool,
    stages differ), for a pool set by ``--kv-cache-memory-bytes``, or when the receipts' band is no
    narrower than the prediction's own."""
    if not receipts or not memory or fit.calibration is not None or shape.pp != 1 \
            or shape.kv_cache_memory_bytes is not None:      # a pool the user set is not a prediction
        return None
    from club3090.fit.correction import NEAR_HERE, Calibration, near_correction
    from club3090.fit.memory import FitResult, predict
    from club3090.reports.measured import near_receipts

    gib = 2**30
    near = near_receipts(receipts, repo_id=spec.ref, gpu_memory_gib=min(memory) / gib, tensor_parallel_size=shape.tp,
                         pipeline_parallel_size=shape.pp, vllm_version=fit.settings.vllm_version,
                         enforce_eager=shape.enforce_eager, quantization=shape.quantization, dtype=shape.dtype)
    if not near:
        return None
    per_rank = fit.per_gpu.weights_bytes - int(shape.extra_weights_bytes or 0) // shape.tp

    def price(at: "ServeShape") -> "FitResult | None":
        got = predict(spec.arch, weights_bytes=0, weights_bytes_per_rank=per_rank, gpu_memory_bytes=list(memory),
                      shape=at, confidence=fit.confidence)
        return got if isinstance(got, FitResult) else None

    def overheads(f: "FitResult") -> int:
        g = f.per_gpu
        return g.non_torch_bytes + g.activation_bytes + g.cudagraph_bytes

    base = replace(shape, kv_cache_memory_bytes=None)
    residuals: list[int] = []
    ids: list[str] = []
    transfer = 0
    for receipt in near:
        at = price(replace(base, **receipt.settings))
        if at is None:
            continue
        residuals.append(at.per_gpu.kv_pool_bytes - round(receipt.measured_kv_gib * gib))
        transfer = max(transfer, abs(overheads(at) - overheads(fit)))
        ids.append(receipt.id)
    if not residuals:
        return None
    c = near_correction(fit.per_gpu.kv_pool_bytes, residuals, transfer)
    if c.band_bytes >= fit.error_band_bytes:
        return None
    corrected = price(replace(shape, kv_cache_memory_bytes=c.priced_bytes))
    if corrected is None:
        return None
    calibration = Calibration(NEAR_HERE, c.band_bytes, fit.per_gpu.kv_pool_bytes, corrected.per_gpu.kv_pool_bytes,
                              tuple(ids), residual_bytes=c.residual_bytes, central_kv_pool_bytes=c.central_bytes,
                              capped=c.capped)
    result = replace(corrected, notes=(*fit.notes, calibration.describe()), error_band_bytes=c.band_bytes,
                     calibration=calibration)
    notice = Notice(NoticeCode.MEASURED_NEAR, calibration.describe(),
                    {"receipts": tuple(ids), "residual_gib": round(c.residual_bytes / gib, 4),
                     "band_gib": round(c.band_bytes / gib, 4), "capped": c.capped})
    return result, notice


def measured_here(fit: "FitResult", spec: "ModelSpec", shape: "ServeShape", memory: "Sequence[int]",
                  catalog: "Catalog", measured: "Sequence[Mapping[str, Any]]",
                  ) -> "tuple[FitResult, ModelSpec, Notice] | None":
    """The fit re-priced from a promoted measurement of exactly this shape on this kind of GPU.

    The facts' confidence becomes ``exact``: the pool was measured, not predicted."""
    if not measured or not memory:
        return None
    from club3090.fit.correction import EXACT_HERE
    from club3090.reports.measured import apply_measured, find_measured

    # the values the fit resolved (a default left unset is still a definite value to match on)
    used = fit.settings
    kv = catalog.kv_formats.get(used.kv_cache_dtype)
    kv_arg = (kv.vllm_arg if kv is not None else used.kv_cache_dtype) or "auto"
    match = find_measured(measured, repo_id=spec.ref, gpu_memory_gib=min(memory) / 2**30,
                          tensor_parallel_size=shape.tp, pipeline_parallel_size=shape.pp,
                          max_model_len=used.max_model_len, gpu_memory_utilization=used.mem_util,
                          kv_cache_dtype=kv_arg)
    if match is None:
        return None
    notice = Notice(NoticeCode.MEASURED_HERE, f"{EXACT_HERE}: priced from this machine's promoted measurement "
                    f"{match.entry_id} (band ±{match.band_gib:.2f} GiB)",
                    {"entry": match.entry_id, "band_gib": match.band_gib})
    return apply_measured(fit, match), replace(spec, confidence="exact"), notice


__all__ = ["calibrated", "gpu_set", "measured_here", "near_here"]
