"""Stage functions shared by ``pull``, ``kv-calc`` and ``inspect``.

``calibrated`` re-prices a fit from measurements, for ``pull``, ``kv-calc`` and ``fits`` alike: a
promoted measurement of the same shape on this machine (``measured_here``, confidence ``exact``),
else the residual of this machine's receipts of a near shape (``near_here``, docs/DESIGN.md, the
Loop), else, for a curated profile, the residual of the catalog's measured start-ups of that
profile (``curated_measured``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from club3090.outcome import Notice, NoticeCode
from club3090.units import GiB

if TYPE_CHECKING:  # pragma: no cover - typing only
    from club3090.catalog.model import Catalog
    from club3090.fit.memory import FitResult, ServeShape
    from club3090.model.spec import ModelSpec


def calibrated(fit: "FitResult", spec: "ModelSpec", shape: "ServeShape", memory: "Sequence[int]",
               catalog: "Catalog", measured: "Sequence[Mapping[str, Any]]",
               receipts: "Sequence[Mapping[str, Any]]" = (), profile: str | None = None,
               ) -> "tuple[FitResult, ModelSpec, Notice] | None":
    """The fit priced from measurements: this machine's of the exact shape first, else of a near
    one, else (for a curated ``profile``) the catalog's own measured start-ups of that profile."""
    here = measured_here(fit, spec, shape, memory, catalog, measured)
    if here is not None:
        return here
    near = near_here(fit, spec, shape, memory, receipts)
    if near is None and profile is not None:
        near = curated_measured(fit, spec, shape, memory, catalog, profile)
    return (near[0], spec, near[1]) if near is not None else None


def _correctable(fit: "FitResult", shape: "ServeShape", memory: "Sequence[int]") -> bool:
    # PP: a log states one worker's pool and stages differ; a pool the user set is not a prediction
    return bool(memory) and fit.calibration is None and shape.pp == 1 and shape.kv_cache_memory_bytes is None


def _overheads(f: "FitResult") -> int:
    g = f.per_gpu
    return g.non_torch_bytes + g.activation_bytes + g.cudagraph_bytes


def _corrected(fit: "FitResult", shape: "ServeShape", price: "Callable[[ServeShape], FitResult | None]",
               rows: "Sequence[tuple[str, int, FitResult]]", *, label: str, code: NoticeCode,
               rounding_bytes: int | None = None, keep_lowering: bool = False) -> "tuple[FitResult, Notice] | None":
    """``fit`` corrected by measured residuals: ``rows`` are (evidence id, predicted - measured pool
    at its shape, the prediction at that shape). The corrected pool is priced through
    ``--kv-cache-memory-bytes`` so blocks, tokens, concurrency and the verdict follow the one rule
    (``fit.correction`` has the arithmetic and the direction rule). None when the correction's band
    is no narrower than the prediction's own, unless it lowers the pool and ``keep_lowering``."""
    from club3090.fit.correction import ROUNDING_BYTES, Calibration, near_correction

    if not rows:
        return None
    transfer = max(abs(_overheads(at) - _overheads(fit)) for _, _, at in rows)
    c = near_correction(fit.per_gpu.kv_pool_bytes, [r for _, r, _ in rows], transfer,
                        rounding_bytes=ROUNDING_BYTES if rounding_bytes is None else rounding_bytes)
    if c.band_bytes >= fit.error_band_bytes and not (keep_lowering and c.residual_bytes > 0):
        return None
    corrected = price(replace(shape, kv_cache_memory_bytes=c.priced_bytes))
    if corrected is None:
        return None
    ids = tuple(i for i, _, _ in rows)
    calibration = Calibration(label, c.band_bytes, fit.per_gpu.kv_pool_bytes, corrected.per_gpu.kv_pool_bytes,
                              ids, residual_bytes=c.residual_bytes, central_kv_pool_bytes=c.central_bytes,
                              capped=c.capped)
    result = replace(corrected, notes=(*fit.notes, calibration.describe()), error_band_bytes=c.band_bytes,
                     calibration=calibration)
    evidence = "anchors" if code is NoticeCode.MEASURED_CURATED else "receipts"
    notice = Notice(code, calibration.describe(),
                    {evidence: ids, "residual_gib": round(c.residual_bytes / GiB, 4),
                     "band_gib": round(c.band_bytes / GiB, 4), "capped": c.capped})
    return result, notice


def _pricer(fit: "FitResult", spec: "ModelSpec", shape: "ServeShape",
            memory: "Sequence[int]") -> "Callable[[ServeShape], FitResult | None]":
    """Prices another shape with this fit's inputs: the same per-rank weights, the same GPUs."""
    from club3090.fit.memory import FitResult, predict

    per_rank = fit.per_gpu.weights_bytes - int(shape.extra_weights_bytes or 0) // shape.tp

    def price(at: "ServeShape") -> "FitResult | None":
        got = predict(spec.arch, weights_bytes=0, weights_bytes_per_rank=per_rank, gpu_memory_bytes=list(memory),
                      shape=at, confidence=fit.confidence)
        return got if isinstance(got, FitResult) else None

    return price


def near_here(fit: "FitResult", spec: "ModelSpec", shape: "ServeShape", memory: "Sequence[int]",
              receipts: "Sequence[Mapping[str, Any]]") -> "tuple[FitResult, Notice] | None":
    """The fit corrected by the measured residual of this machine's receipts of a near shape.

    Each receipt's shape is predicted with the inputs of this fit (the same per-rank weights, the
    same GPUs); its residual (predicted - measured KV pool) corrects this prediction (``_corrected``).
    None when no receipt is near, under pipeline parallelism, for a pool set by
    ``--kv-cache-memory-bytes``, or when the receipts' band is no narrower than the prediction's
    own."""
    if not receipts or not _correctable(fit, shape, memory):
        return None
    from club3090.fit.correction import NEAR_HERE
    from club3090.reports.measured import near_receipts
    near = near_receipts(receipts, repo_id=spec.ref, gpu_memory_gib=min(memory) / GiB, tensor_parallel_size=shape.tp,
                         pipeline_parallel_size=shape.pp, vllm_version=fit.settings.vllm_version,
                         enforce_eager=shape.enforce_eager, quantization=shape.quantization, dtype=shape.dtype)
    if not near:
        return None
    price = _pricer(fit, spec, shape, memory)
    base = replace(shape, kv_cache_memory_bytes=None)
    rows = []
    for receipt in near:
        at = price(replace(base, **receipt.settings))
        if at is not None:
            rows.append((receipt.id, at.per_gpu.kv_pool_bytes - round(receipt.measured_kv_gib * GiB), at))
    return _corrected(fit, shape, price, rows, label=NEAR_HERE, code=NoticeCode.MEASURED_NEAR)


def curated_measured(fit: "FitResult", spec: "ModelSpec", shape: "ServeShape", memory: "Sequence[int]",
                     catalog: "Catalog", profile: str) -> "tuple[FitResult, Notice] | None":
    """A curated profile's fit corrected by the catalog's measured start-ups of that profile.

    An anchor counts when it measured the KV pool (its "GPU KV cache size" in tokens) of this
    profile with the same TP and PP, on a card of the same memory, with a drafter exactly when
    this shape has one. Context, utilisation, batch, KV format and the vLLM release may differ:
    the anchor is priced from its own recorded inputs (as ``kv-calc --calibration`` prices it), its
    residual is the pool error its token error implies (tokens are proportional to blocks), and
    the overheads' movement between the two shapes widens the band. A correction that lowers the
    pool applies in full, however wide its band (the catalog's own measurement of this profile
    is below the prediction: a false "fits" removed); a raising one only to the band's lower edge
    (``fit.correction``), the
    band's floor being the rounding of the stated token count ("~310K"), and no narrower than the
    prediction's own band when the anchor ran another release."""
    chosen = catalog.profiles.get(profile)
    if chosen is None or spec.curated is None or spec.curated.model_id != chosen.model \
            or not _correctable(fit, shape, memory):
        return None
    from club3090.fit.calibration import anchor_inputs, anchor_prediction
    from club3090.fit.correction import CURATED_MEASURED, token_rounding
    from club3090.fit.memory import FitResult
    from club3090.fit.vllm_rules import parse_version

    def release(version: str | None) -> tuple[int, ...]:
        return parse_version(version)[:2]

    card = min(memory)
    rows: list[tuple[str, int, FitResult]] = []
    rounding = 0
    for anchor in catalog.anchors:
        if anchor.profile != profile or not anchor.measured_kv_tokens:
            continue
        inputs = anchor_inputs(anchor, catalog)
        at_shape = inputs.shape
        if inputs.gpu is None or (at_shape.tp, at_shape.pp) != (shape.tp, shape.pp) \
                or abs(inputs.gpu.memory_bytes - card) > card // 50 \
                or (at_shape.num_speculative_tokens > 0) != (shape.num_speculative_tokens > 0):
            continue
        at = anchor_prediction(inputs)
        if not isinstance(at, FitResult) or at.kv_cache_tokens <= 0:
            continue
        pool = at.per_gpu.kv_pool_bytes
        measured = anchor.measured_kv_tokens
        rows.append((anchor.id, round(pool * (at.kv_cache_tokens - measured) / at.kv_cache_tokens), at))
        rounding = max(rounding, round(pool * token_rounding(measured) / at.kv_cache_tokens))
        if release(at.settings.vllm_version) != release(fit.settings.vllm_version):
            # what changed between the releases beyond the modelled rules is unknown: no narrower
            # than the prediction's own band
            rounding = max(rounding, fit.error_band_bytes)
    return _corrected(fit, shape, _pricer(fit, spec, shape, memory), rows, label=CURATED_MEASURED,
                      code=NoticeCode.MEASURED_CURATED, rounding_bytes=rounding, keep_lowering=True)


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
    match = find_measured(measured, repo_id=spec.ref, gpu_memory_gib=min(memory) / GiB,
                          tensor_parallel_size=shape.tp, pipeline_parallel_size=shape.pp,
                          max_model_len=used.max_model_len, gpu_memory_utilization=used.mem_util,
                          kv_cache_dtype=kv_arg)
    if match is None:
        return None
    notice = Notice(NoticeCode.MEASURED_HERE, f"{EXACT_HERE}: priced from this machine's promoted measurement "
                    f"{match.entry_id} (band ±{match.band_gib:.2f} GiB)",
                    {"entry": match.entry_id, "band_gib": match.band_gib})
    return apply_measured(fit, match), replace(spec, confidence="exact"), notice


__all__ = ["calibrated", "curated_measured", "measured_here", "near_here"]
