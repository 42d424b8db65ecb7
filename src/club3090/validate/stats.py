"""Small summary statistics for bench and soak (pure)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence


def summary(values: Sequence[float]) -> dict[str, float | int | None]:
    """n, mean, sample std, CV (std / mean, a fraction), min, max; None where undefined."""
    n = len(values)
    if not n:
        return {"n": 0, "mean": None, "std": None, "cv": None, "min": None, "max": None}
    mean = statistics.fmean(values)
    std = statistics.stdev(values) if n > 1 else 0.0
    cv = std / mean if mean and math.isfinite(mean) else None
    return {"n": n, "mean": mean, "std": std, "cv": cv, "min": min(values), "max": max(values)}


def median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def relative_mad(values: Sequence[float]) -> float:
    """Median absolute deviation over the median (a robust relative spread); 0 for < 2 values."""
    if len(values) < 2:
        return 0.0
    mid = statistics.median(values)
    if not mid:
        return 0.0
    return statistics.median(abs(v - mid) for v in values) / abs(mid)
