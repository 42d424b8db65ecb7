"""The ``[C2a]`` disk margin: what must be free before a download starts."""

from __future__ import annotations

HEADROOM_NUM, HEADROOM_DEN = 6, 5  # required = footprint x 1.2, in exact integer arithmetic


def required_bytes(footprint_bytes: int) -> int:
    """``ceil(footprint_bytes * 1.2)``, computed on integers (no float rounding at TB sizes).
    The one owner of the disk margin: the gate's ``[C2a]`` (``gates.c2a_disk``) calls it."""
    if footprint_bytes < 0:
        raise ValueError(f"footprint_bytes must be >= 0, got {footprint_bytes}")
    return -(-footprint_bytes * HEADROOM_NUM // HEADROOM_DEN)
