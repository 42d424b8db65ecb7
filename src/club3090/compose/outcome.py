"""Compose results: the stratum-6 refusal tokens, ``PatchReport`` and ``ComposeOutcome``.

Refusals are stable tokens (stratum 6 ``d-refused:<token>``; ``derived-runtime-unsupported:<token>``),
returned as ``ComposeOutcome`` values (docs/DESIGN.md §11-§12). ``ReplayError`` is internal to the
generator: a shipped service that cannot be replayed, turned into an ``other`` refusal.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from club3090.compose.launch import Launch
from club3090.outcome import Notice, Outcome, Reason, Stop, Stratum

# Stratum-6 refusal tokens, in table order (docs/DESIGN.md §11).
SCOPE = "scope"
OTHER = "other"
PIN_MISMATCH = "pin-mismatch"
TP_OR_KV = "tp-or-kv"
TRC = "trc"
FOUNDATIONAL_DRIFT = "foundational-drift"
DEGRADED_DRIFT = "degraded-drift"
REFUSAL_TOKENS = (PIN_MISMATCH, TP_OR_KV, TRC, FOUNDATIONAL_DRIFT, DEGRADED_DRIFT, SCOPE, OTHER)

# derived_emittable refusals (docs/DESIGN.md §12): "derived-runtime-unsupported:<clause>".
DERIVED_PREFIX = "derived-runtime-unsupported"


@dataclass(frozen=True, slots=True)
class PatchReport:
    wired: tuple[str, ...] = ()
    undelivered: tuple[tuple[str, str], ...] = ()     # (patch id, issue)
    excluded: tuple[tuple[str, str], ...] = ()        # (patch id, why)
    degraded: tuple[tuple[str, str], ...] = ()        # (patch id, capability lost)

    def to_json(self) -> dict[str, Any]:
        return {
            "wired": list(self.wired),
            "undelivered": [{"id": p, "issue": i} for p, i in self.undelivered],
            "excluded": [{"id": p, "why": w} for p, w in self.excluded],
            "degraded": [{"id": p, "capability": c} for p, c in self.degraded],
        }


@dataclass(frozen=True, slots=True)
class ComposeOutcome:
    """Result of one generator call. ``text`` is set exactly when something may be written."""

    ok: bool
    outcome: Outcome                      # OK emitted, REFUSED, NEEDS_ACK degraded without acknowledgement
    profile: str
    refusal: str | None = None            # seed token ("pin-mismatch"), or "derived-runtime-unsupported:kv"
    detail: str | None = None             # why, for humans (the arch row's reason, ...)
    degraded: bool = False
    text: str | None = None               # rendered in ``format``
    format: str = "compose"
    launch: Launch | None = None
    patches: PatchReport = field(default_factory=PatchReport)
    notices: tuple[Notice, ...] = ()
    failed_patches: tuple[str, ...] = ()  # patch ids whose drift guard failed (refusal or degraded)
    trust_remote_code: str = ""           # the decision, as written in the header

    @property
    def token(self) -> str | None:
        """The abort reason as ``pull`` prints it: ``d-refused:<token>`` (curated), or the derived token."""
        if self.refusal is None:
            return None
        if self.refusal.startswith(DERIVED_PREFIX):
            return self.refusal
        return f"d-refused:{self.refusal}"

    def stop(self) -> Stop | None:
        """The stratum-6 Stop for a curated refusal (None when emitted or for derived refusals)."""
        if self.refusal is None or self.refusal.startswith(DERIVED_PREFIX):
            return None
        detail: dict[str, object] = {"detail": self.detail} if self.detail else {}
        if self.failed_patches:
            detail["failed_patches"] = self.failed_patches
        return Stop(Stratum.COMPOSE_DRY_RUN, Reason.D_REFUSED, sub_reason=self.refusal, detail=detail)

    def to_json(self, out: str | None = None) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "outcome": self.outcome.value,
            "profile": self.profile,
            "refusal": self.refusal,
            "detail": self.detail,
            "degraded": self.degraded,
            "patches": self.patches.to_json(),
            "out": out,
            "notices": [n.text for n in self.notices],
            "notice_codes": [n.code for n in self.notices],
            "failed_patches": list(self.failed_patches),
        }


def refuse(profile: str, token: str, detail: str, **kw: Any) -> ComposeOutcome:
    return ComposeOutcome(ok=False, outcome=Outcome.REFUSED, profile=profile, refusal=token,
                          detail=detail, **kw)


class ReplayError(Exception):
    pass
