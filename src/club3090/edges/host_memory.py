"""System memory for llama.cpp offload planning: ``MemTotal`` of ``/proc/meminfo``.

``total_ram_bytes(meminfo=Path("/proc/meminfo"))`` -> bytes, or None where the file is absent or
unreadable (macOS, a locked-down container): the caller then plans without host memory unless
``--ram GiB`` names it. Reads at most 64 KiB.
"""

from __future__ import annotations

from pathlib import Path

MEMINFO = Path("/proc/meminfo")
READ_LIMIT = 64 * 1024


def total_ram_bytes(meminfo: Path = MEMINFO) -> int | None:
    try:
        with open(meminfo, "rb") as f:
            text = f.read(READ_LIMIT).decode("ascii", "replace")
    except OSError:
        return None
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        if name.strip() == "MemTotal":
            parts = rest.split()
            if len(parts) == 2 and parts[0].isdigit() and parts[1] == "kB":
                return int(parts[0]) * 1024
            return None
    return None


__all__ = ["total_ram_bytes"]
