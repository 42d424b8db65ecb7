"""Free space for the ``[C2a]`` disk gate (SYSTEM.md section 7), with statvfs as the seam."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

HEADROOM_NUM, HEADROOM_DEN = 6, 5  # required = footprint x 1.2, in exact integer arithmetic


def free_bytes_at(path: Path, *, statvfs: Callable[[str], Any] = os.statvfs) -> int | None:
    """Bytes available to an unprivileged user on the file system that would hold ``path``.

    ``path`` need not exist yet (a fresh HF_HOME): the nearest existing ancestor is measured.
    ``f_bavail * f_frsize``; any failure returns None, which the gate treats as disk-short.
    """
    try:
        probe = Path(os.path.abspath(os.fspath(path)))
        while not os.path.exists(probe) and probe != probe.parent:  # unreadable counts as absent
            probe = probe.parent
        st = statvfs(str(probe))
        frsize = int(st.f_frsize) or int(st.f_bsize)
        free = int(st.f_bavail) * frsize
    except (OSError, ValueError, TypeError, AttributeError):
        return None
    return free if free >= 0 else None


def required_bytes(footprint_bytes: int) -> int:
    """``ceil(footprint_bytes * 1.2)``, computed on integers (no float rounding at TB sizes).
    The one owner of the disk margin: the gate's ``[C2a]`` (``gates.c2a_disk``) calls it."""
    if footprint_bytes < 0:
        raise ValueError(f"footprint_bytes must be >= 0, got {footprint_bytes}")
    return -(-footprint_bytes * HEADROOM_NUM // HEADROOM_DEN)
