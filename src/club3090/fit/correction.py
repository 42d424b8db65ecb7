"""How a measurement on this machine corrects a prediction (docs/DESIGN.md, the Loop).

:class:`Calibration` is what a fit carries when a local measurement priced it: ``exact (measured
here)`` (the same shape was measured and promoted) or ``calibrated (measured here, near shape)``
(a near shape was measured; the prediction is corrected by the measured residual).

:func:`near_correction` is the arithmetic of the near case. Each receipt ``i`` gives a residual
``r_i = predicted_i - measured_i`` of the KV pool at its own shape, predicted with the same inputs
as the shape being priced. The central estimate of the priced shape's pool is ``predicted - mean(r)``;
its band is the receipts' spread (never below the log's rounding) plus how much the shape-dependent
overheads (activation peak, CUDA graphs, non-torch) move between the measured and the priced shape.

Direction: a KV pool priced too large is the dangerous error (the verdict says it fits; vLLM then
finds fewer blocks). A correction that lowers the pool applies in full. One that raises it applies
only as far as the band's lower edge (``-mean(r) - band``, never below zero): the pool is never
priced above what the measurements guarantee.

Pure: numbers in, numbers out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from club3090.units import GiB

__all__ = ["CURATED_MEASURED", "EXACT_HERE", "NEAR_HERE", "ROUNDING_BYTES", "Calibration", "NearCorrection",
           "near_correction", "token_rounding"]

EXACT_HERE = "exact (measured here)"
NEAR_HERE = "calibrated (measured here, near shape)"
CURATED_MEASURED = "calibrated (catalog measurement)"
ROUNDING_BYTES = int(0.01 * GiB)       # vLLM prints the KV pool in GiB with two decimals


@dataclass(frozen=True, slots=True)
class Calibration:
    """The local evidence a fit was priced from, and how it moved the prediction."""

    label: str                          # EXACT_HERE | NEAR_HERE | CURATED_MEASURED
    band_bytes: int                     # the stated error band of the priced KV pool
    predicted_kv_pool_bytes: int        # the engine's prediction before the measurement
    priced_kv_pool_bytes: int           # the pool the verdict, blocks and tokens follow
    evidence: tuple[str, ...]           # promoted entry or receipt ids
    residual_bytes: int | None = None   # near: mean predicted - measured over the receipts
    central_kv_pool_bytes: int | None = None  # near: predicted - residual
    capped: bool = False                # near: a raising correction held at the band's lower edge

    def to_json(self) -> dict[str, Any]:
        gib = float(GiB)
        return {"label": self.label, "band_gib": round(self.band_bytes / gib, 4),
                "predicted_kv_pool_gib": round(self.predicted_kv_pool_bytes / gib, 4),
                "priced_kv_pool_gib": round(self.priced_kv_pool_bytes / gib, 4),
                "residual_gib": None if self.residual_bytes is None else round(self.residual_bytes / gib, 4),
                "central_kv_pool_gib": None if self.central_kv_pool_bytes is None
                else round(self.central_kv_pool_bytes / gib, 4),
                "capped": self.capped, "evidence": list(self.evidence)}

    def describe(self) -> str:
        """One line for the text output."""
        gib = float(GiB)
        line = f"{self.label}: KV pool {self.priced_kv_pool_bytes / gib:.2f} GiB ±{self.band_bytes / gib:.2f} GiB"
        if self.residual_bytes is not None:
            what = "catalog anchor(s)" if self.label == CURATED_MEASURED else "receipt(s)"
            line += (f" (predicted {self.predicted_kv_pool_bytes / gib:.2f} GiB, measured residual "
                     f"{self.residual_bytes / gib:+.2f} GiB over {len(self.evidence)} {what})")
        if self.capped:
            line += "; a raising correction is priced at its band's lower edge"
        return line


@dataclass(frozen=True, slots=True)
class NearCorrection:
    residual_bytes: int                 # mean predicted - measured
    band_bytes: int
    central_bytes: int                  # predicted - residual
    priced_bytes: int                   # the pool to price with (see the module docstring)
    capped: bool


def near_correction(predicted_bytes: int, residuals: Sequence[int], transfer_bytes: int,
                    rounding_bytes: int = ROUNDING_BYTES) -> NearCorrection:
    """The corrected KV pool of a shape predicted at ``predicted_bytes``, from the residuals of
    near-shape measurements and the overheads' movement between the shapes (``transfer_bytes`` >= 0).
    ``rounding_bytes``: how precisely the measurements state the pool (the band's floor)."""
    if not residuals:
        raise ValueError("near_correction needs at least one residual")
    mean = sum(residuals) / len(residuals)
    spread = max(abs(r - mean) for r in residuals)
    band = int(max(spread, rounding_bytes, ROUNDING_BYTES) + max(0, transfer_bytes))
    central = int(predicted_bytes - mean)
    if mean >= 0:            # the engine over-predicted: lower the pool in full
        priced, capped = central, False
    else:                    # it under-predicted: raise only as far as the band guarantees
        raise_by = max(0, int(-mean) - band)
        priced, capped = predicted_bytes + raise_by, True
    return NearCorrection(round(mean), band, max(0, central), max(0, priced), capped)


def token_rounding(tokens: int) -> int:
    """Half the unit a stated token count is rounded to (``310000`` -> 5,000; ``806821`` -> 0): a
    figure copied from a compose header ("~310K") is only that precise."""
    zeros = 0
    while tokens and tokens % 10 == 0 and zeros < 5:
        tokens //= 10
        zeros += 1
    return 5 * 10 ** (zeros - 1) if zeros else 0
