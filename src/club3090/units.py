"""Units shared by every layer: bytes stay integers inside; GiB and MiB only when rendered."""

from __future__ import annotations

GiB = 1 << 30
MiB = 1 << 20


def gib_text(n: float, *, unit: bool = False) -> str:
    """``n`` bytes as GiB with two decimals: ``"16.30"``, or ``"16.30 GiB"`` with ``unit``."""
    return f"{n / GiB:.2f}" + (" GiB" if unit else "")
