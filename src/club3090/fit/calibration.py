"""The catalog's anchors (measured upstream starts) scored against the memory model (pure).

Each anchor is priced from its own recorded inputs (:func:`anchor_inputs`); the linked curated
profile supplies only what the anchor does not record. Two criteria (docs/ACCURACY.md):

- upstream's (club-3090 ``kv-calc --calibration``): the verdict is not ``wont-fit`` and the predicted
  per-card footprint (budget + CUDA graphs outside it + :data:`CONTEXT_RESERVE_BYTES`) fits the card;
- ours, stricter: also KV tokens within :data:`KV_TOKEN_TOLERANCE` of a measured pool and the
  footprint not under-stated by more than :data:`PEAK_TOLERANCE_BYTES`.

``calibrate(catalog) -> CalibrationReport``. No I/O, no printing: ``kv-calc --calibration`` renders.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from club3090.catalog.model import NO_DRAFTER
from club3090.fit.memory import FitResult, ServeShape, Unpriceable, predict
from club3090.fit.shape import drafter_terms, profile_shape
from club3090.fit.vllm_rules import engine_release
from club3090.model.architecture import parse_config
from club3090.units import GiB

__all__ = [
    "CONTEXT_RESERVE_BYTES",
    "KV_TOKEN_TOLERANCE",
    "PEAK_TOLERANCE_BYTES",
    "UPSTREAM_SETS",
    "AnchorInputs",
    "AnchorScore",
    "CalibrationReport",
    "SetTally",
    "anchor_inputs",
    "anchor_prediction",
    "anchor_set",
    "calibrate",
    "score_anchors",
    "upstream_tally",
]

# upstream's two kv-calc calibration sets and their row counts
UPSTREAM_SETS = (("kvcalc-22of22-historical", 22), ("kvcalc-current-8of8", 8))
CONTEXT_RESERVE_BYTES = int(0.5 * GiB)     # CUDA context + NCCL/cuBLAS handles outside the budget
PEAK_TOLERANCE_BYTES = int(1.0 * GiB)      # strict: predicted footprint may under-state a measured peak by this
KV_TOKEN_TOLERANCE = 0.15                  # strict: |predicted - measured| / measured KV tokens


@dataclass(frozen=True, slots=True)
class AnchorInputs:
    """What one anchor is priced with: its own recorded inputs, the linked profile for the rest."""

    profile: Any
    model: Any
    weights_bytes: int | None
    weights_note: str
    engine: Any
    gpu: Any
    world: int
    shape: ServeShape


@dataclass(frozen=True, slots=True)
class AnchorScore:
    anchor: str
    set: str
    profile: str                # linked profile key, "-" when the anchor has none
    card_bytes: int | None
    predicted_peak_bytes: int | None
    measured_peak_bytes: int | None
    predicted_kv_tokens: int | None
    measured_kv_tokens: int | None
    verdict: str | None
    upstream_ok: bool           # upstream's criterion: not wont-fit, predicted footprint fits the card
    upstream_why: str
    strict_ok: bool             # ours: also KV tokens within tolerance and footprint not under-stated
    strict_why: str

    @property
    def passed(self) -> bool:
        return self.strict_ok

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class SetTally:
    name: str
    passed: int                 # rows passing upstream's criterion
    scored: int                 # rows of this set among the catalog's anchors
    expected: int               # upstream's row count


@dataclass(frozen=True, slots=True)
class CalibrationReport:
    scores: tuple[AnchorScore, ...]
    upstream: tuple[SetTally, ...]

    @property
    def upstream_all_pass(self) -> bool:
        """Every upstream set has scored rows and every one of them passes."""
        return all(t.passed == t.scored > 0 for t in self.upstream)

    @property
    def strict_passed(self) -> int:
        return sum(1 for s in self.scores if s.strict_ok)

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": True,
            "upstream": {t.name: {"passed": t.passed, "total": t.scored, "expected_rows": t.expected}
                         for t in self.upstream},
            "upstream_all_pass": self.upstream_all_pass,
            "strict": {"passed": self.strict_passed, "total": len(self.scores),
                       "kv_token_tolerance": KV_TOKEN_TOLERANCE, "peak_tolerance_bytes": PEAK_TOLERANCE_BYTES},
            "anchors": [s.to_json() for s in self.scores]}


def anchor_set(anchor: Any) -> str:
    """The anchor's measurement set (``Anchor.set``)."""
    return str(anchor.set)


def anchor_inputs(anchor: Any, catalog: Any) -> AnchorInputs:
    """The serving shape, weights and card an anchor's measurement ran with.

    Recorded on the anchor (not None) wins: model, weights variant (else the recorded checkpoint
    size), TP, util, context, KV format, sequences, batched tokens, drafter (``none`` = without
    one), engine and release version, GPU (its compute capability, and the variant's
    ``--quantization``, decide kernel repacking such as Marlin FP8). The linked profile (if any) supplies only the rest, chiefly the shipped
    compose's ``--max-num-batched-tokens`` and PP; without a profile those are vLLM's defaults.
    """
    profile = catalog.profiles.get(anchor.profile) if anchor.profile else None
    model = catalog.models.get(anchor.model or (profile.model if profile is not None else ""))
    weights, note = anchor.weights_bytes, "recorded checkpoint size"
    vid = anchor.weights_variant or (profile.weights_variant if profile is not None else None)
    variant = model.weights.get(vid) if model is not None and vid else None
    if weights is None and model is not None:
        weights = int(variant.size_bytes) if variant is not None and variant.size_bytes else None
        note = f"catalog weight variant {vid}"
    engine = catalog.engines.get(anchor.engine or (profile.engine if profile is not None else ""))
    gpu = catalog.gpu(anchor.gpu) or (catalog.gpu(profile.reference_gpu) if profile is not None else None)
    pp = profile.pp if profile is not None else 1
    if anchor.tp:
        tp, pp = anchor.tp, max(1, anchor.gpu_count // anchor.tp)
    else:
        count = anchor.gpu_count or (profile.tp * pp if profile is not None else 1)
        tp = max(1, count // max(pp, 1))
    overrides: dict[str, Any] = {}
    if anchor.drafter is not None:       # recorded: its own drafter (or none), not the profile's
        drafter = None if anchor.drafter == NO_DRAFTER else catalog.drafters.get(anchor.drafter)
        overrides["num_speculative_tokens"], overrides["extra_weights_bytes"] = drafter_terms(drafter)
    version = anchor.vllm_version or (engine.vllm_version if engine is not None else None)
    if version is None and profile is None:    # a nightly without a profile's release: today's line
        version = engine_release(engine)
    shape = profile_shape(
        profile, catalog, drafter=anchor.drafter is None, tp=tp, pp=pp, mem_util=anchor.mem_util,
        max_model_len=anchor.ctx, max_num_seqs=anchor.max_num_seqs,
        max_num_batched_tokens=anchor.max_num_batched_tokens, kv_cache_dtype=anchor.kv_format,
        vllm_version=version, device_name=gpu.display_name if gpu is not None else None,
        compute_capability=str(gpu.sm) if gpu is not None else None,
        quantization=variant.quantization if variant is not None else None, **overrides)
    return AnchorInputs(profile, model, weights, note, engine, gpu, tp * pp, shape)


def anchor_prediction(inputs: AnchorInputs) -> FitResult | Unpriceable | None:
    """The engine's prediction of an anchor's run from its own inputs; None when the catalog lacks
    the model, the weights or the GPU to price it."""
    if inputs.model is None or not inputs.weights_bytes or inputs.gpu is None:
        return None
    return predict(parse_config(inputs.model.hf_config), weights_bytes=int(inputs.weights_bytes),
                   gpu_memory_bytes=[inputs.gpu.memory_bytes] * inputs.world, shape=inputs.shape,
                   confidence="exact")


def _score(anchor: Any, inputs: AnchorInputs) -> AnchorScore:
    kind = anchor_set(anchor)
    card = int(inputs.gpu.memory_bytes) if inputs.gpu is not None else None
    label = anchor.profile or "-"

    def failed(why: str) -> AnchorScore:
        return AnchorScore(anchor.id, kind, label, card, None, anchor.measured_peak_bytes, None,
                           anchor.measured_kv_tokens, None, False, why, False, why)

    result = anchor_prediction(inputs)
    if result is None:
        return failed("model/weights/GPU missing in catalog")
    if isinstance(result, Unpriceable):
        return failed(f"unpriceable: {result.reason}")
    peak = result.per_gpu.budget_bytes + result.cudagraph_outside_budget_bytes + CONTEXT_RESERVE_BYTES
    measured_peak = anchor.measured_peak_bytes
    up: list[str] = []
    if result.raw_verdict == "wont-fit":
        up.append("predicted wont-fit but the run booted")
    if card is not None and peak > card:
        up.append("predicted footprint exceeds the card")
    strict = list(up)
    if measured_peak is not None and peak < measured_peak - PEAK_TOLERANCE_BYTES:
        strict.append(f"footprint under-stated by {(measured_peak - peak) / GiB:.2f} GiB")
    if anchor.measured_kv_tokens:
        err = (result.kv_cache_tokens - anchor.measured_kv_tokens) / anchor.measured_kv_tokens
        if abs(err) > KV_TOKEN_TOLERANCE:
            strict.append(f"KV tokens off by {err:+.0%}")
    return AnchorScore(anchor.id, kind, label, card, peak, measured_peak, result.kv_cache_tokens,
                       anchor.measured_kv_tokens, result.raw_verdict,
                       not up, "; ".join(up) or "ok", not strict, "; ".join(strict) or "ok")


def score_anchors(catalog: Any) -> list[AnchorScore]:
    """One score per anchor, in catalog order (the loader admits only vLLM anchors)."""
    return [_score(anchor, anchor_inputs(anchor, catalog)) for anchor in catalog.anchors]


def upstream_tally(scores: list[AnchorScore] | tuple[AnchorScore, ...]) -> tuple[SetTally, ...]:
    """Upstream's criterion per upstream set (a row the catalog lacks is not scored)."""
    out = []
    for name, expected in UPSTREAM_SETS:
        rows = [s for s in scores if s.set == name]
        out.append(SetTally(name, sum(1 for s in rows if s.upstream_ok), len(rows), expected))
    return tuple(out)


def calibrate(catalog: Any) -> CalibrationReport:
    scores = tuple(score_anchors(catalog))
    return CalibrationReport(scores=scores, upstream=upstream_tally(scores))
