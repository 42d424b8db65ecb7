"""Stratum 5: what the fit engine cannot model stops here; no flag bypasses it."""

from __future__ import annotations

from club3090.outcome import Reason, Stop, Stratum


def eligibility(unpriceable_reason: str | None) -> Stop | None:
    """Stratum 5: only what the fit engine cannot model stops here; no flag bypasses it."""
    if not unpriceable_reason:
        return None
    return Stop(Stratum.ELIGIBILITY, Reason.NO_FIT_MODEL,
                detail={"message": f"the fit engine cannot price this model: {unpriceable_reason}"})
