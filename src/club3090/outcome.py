"""Stops as values: strata, stable reason tokens, and the Stop record every gate returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum, IntEnum
from types import MappingProxyType
from typing import Mapping


class Stratum(IntEnum):
    DECIDED = 0
    DERIVER = 1
    PROFILE_LIKE = 2
    ENGINE_SUPPORT = 3
    DISK = 4
    ELIGIBILITY = 5
    COMPOSE_DRY_RUN = 6


STRATUM_NAMES: Mapping[Stratum, str] = MappingProxyType({
    Stratum.DECIDED: "DECIDED",
    Stratum.DERIVER: "DERIVER",
    Stratum.PROFILE_LIKE: "PROFILE_LIKE",
    Stratum.ENGINE_SUPPORT: "C0_ENGINE_SUPPORT",
    Stratum.DISK: "C2A_DISK",
    Stratum.ELIGIBILITY: "ELIGIBILITY",
    Stratum.COMPOSE_DRY_RUN: "D_DRY_RUN",
})


class Reason(str, Enum):
    """Public reason tokens (SYSTEM.md section 4). Values are stable; wording lives in the CLI."""

    # stratum 1
    REPO_NOT_FOUND = "repo-not-found"
    GATED_NO_TOKEN = "gated-no-token"
    UNSUPPORTED_FORMAT = "unsupported-format"
    AMBIGUOUS_WEIGHT_SET = "ambiguous-weight-set"
    QUANT_DTYPE_UNKNOWN = "quant-dtype-unknown"
    # stratum 2
    UNKNOWN_PROFILE_LIKE = "unknown-profile-like"
    UNSUPPORTED_RUNTIME_ENGINE = "unsupported-runtime-engine"
    PROFILE_NOT_EMITTABLE = "profile-not-emittable"
    PROFILE_MISMATCH = "profile-mismatch"
    # stratum 3 ([C0] top-level states and fail-closed hardware reasons)
    ENGINE_SUPPORTED = "engine-supported"
    ENGINE_SUPPORT_UNKNOWN = "engine-support-unknown"
    NEEDS_TRC_ACK = "needs-trust-remote-code-ack"
    HARDWARE_SM_UNDETERMINED = "hardware-sm-undetermined"
    HARDWARE_VRAM_UNDETERMINED = "hardware-vram-undetermined"
    # stratum 4
    DISK_OK = "disk-ok"
    DISK_SHORT = "disk-short"
    # stratum 5
    NO_FIT_MODEL = "no-fit-model"
    # stratum 6 (rendered "d-refused:<token>")
    D_REFUSED = "d-refused"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class Stop:
    """A gate's refusal. ``sub_reason`` carries [C0]'s side field, the d-refused token, or a
    stratum-1 stop's case (``gguf-only``, ``not-found``, ...)."""

    stratum: Stratum
    reason: Reason
    sub_reason: str | None = None
    bypassable_by: frozenset[str] = frozenset()
    detail: Mapping[str, object] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def token(self) -> str:
        """The abort reason as printed (SYSTEM.md section 4): ``d-refused:<token>`` at stratum 6,
        ``<state>/<sub-reason>`` for a [C0] finding (``engine-support-unknown/no-arch-row``), else
        the bare reason: a stratum-1 stop prints the seed token, its case stays in ``sub_reason``."""
        if self.reason is Reason.D_REFUSED:
            return f"d-refused:{self.sub_reason}"
        if self.stratum is Stratum.ENGINE_SUPPORT and self.sub_reason:
            return f"{self.reason.value}/{self.sub_reason}"
        return self.reason.value


def bypassed(stop: Stop, given: frozenset[str]) -> bool:
    """The subset rule: a stop is cleared only when every tag it names was given."""
    return bool(stop.bypassable_by) and stop.bypassable_by <= given
