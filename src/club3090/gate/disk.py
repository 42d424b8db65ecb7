"""The ``[C2a]`` disk margin: what must be free before a download starts."""

from __future__ import annotations

from dataclasses import dataclass

from club3090.outcome import Reason, Stop, Stratum
from club3090.units import gib_text

HEADROOM_NUM, HEADROOM_DEN = 6, 5  # required = footprint x 1.2, in exact integer arithmetic


def required_bytes(footprint_bytes: int) -> int:
    """``ceil(footprint_bytes * 1.2)``, computed on integers (no float rounding at TB sizes).
    The one owner of the disk margin: the gate's ``[C2a]`` (:func:`check_disk`) calls it."""
    if footprint_bytes < 0:
        raise ValueError(f"footprint_bytes must be >= 0, got {footprint_bytes}")
    return -(-footprint_bytes * HEADROOM_NUM // HEADROOM_DEN)


@dataclass(frozen=True, slots=True)
class DiskResult:
    ok: bool
    required_bytes: int | None
    free_bytes: int | None
    detail: str

    @property
    def state(self) -> str:
        return Reason.DISK_OK.value if self.ok else Reason.DISK_SHORT.value

    def stop(self) -> Stop | None:
        if self.ok:
            return None
        return Stop(Stratum.DISK, Reason.DISK_SHORT,
                    detail={"message": self.detail, "required_bytes": self.required_bytes,
                            "free_bytes": self.free_bytes})


def check_disk(*, footprint_bytes: int | None, free_bytes: int | None, local: bool = False,
             where: str = "") -> DiskResult:
    """Stratum 4. A local folder downloads nothing and passes; an unknown footprint or free
    space fails closed."""
    if local:
        return DiskResult(True, 0, free_bytes, "local folder: nothing to download")
    if footprint_bytes is None:
        return DiskResult(False, None, free_bytes, "download size unknown; refusing to guess disk space")
    required = required_bytes(int(footprint_bytes))
    at = f" at {where}" if where else ""
    if free_bytes is None:
        return DiskResult(False, required, None, f"cannot read free space{at}")
    if free_bytes < required:
        return DiskResult(False, required, free_bytes,
                          f"needs {gib_text(required)} GiB (download {gib_text(footprint_bytes)} GiB x 1.2) "
                          f"but only {gib_text(free_bytes)} GiB is free{at}")
    return DiskResult(True, required, free_bytes, f"{gib_text(free_bytes)} GiB free >= {gib_text(required)} GiB{at}")
