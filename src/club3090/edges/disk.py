"""Free space for the ``[C2a]`` disk gate (docs/DESIGN.md §7), with statvfs as the seam."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any


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
