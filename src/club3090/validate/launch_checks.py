"""verify-full's launch checks: patches applied (from the launch log) and speculative-decoding
acceptance (from the server's Prometheus ``/metrics``). Pure: text in, ``(status, detail)`` out.

Each answers ``not-applicable`` when it does not apply (the profile wires no patch, serves no
drafter), ``skip`` when it applies but the evidence is missing (no ``--profile``, no ``--log``),
and never passes silently.

Patches: a patch counts as applied when its id, or the file name of one of its payload files,
appears on a log line that does not also report a failure (``error``, ``fail``, ``skip``,
``not applied``). Acceptance: vLLM's counters ``spec_decode_num_accepted_tokens`` and
``spec_decode_num_drafts`` (any ``vllm:`` prefix, ``_total`` suffix, summed over labels); the
mean acceptance length is ``1 + accepted / drafts`` (tokens per step: the target's own token
plus the accepted draft tokens), compared with ``min_acceptance`` (upstream's ``MTP_ACCEPT_MIN``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

PASS, FAIL, SKIP, NOT_APPLICABLE = "pass", "fail", "skip", "not-applicable"
MIN_ACCEPTANCE = 2.0
MAX_LOG_CHARS = 16 * 1024 * 1024
_BAD = re.compile(r"error|fail|skip|not applied|traceback", re.I)
_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+([-+0-9.eE]+|NaN|[+-]Inf)\s*(\d+)?\s*$")


@dataclass(frozen=True, slots=True)
class PatchRef:
    id: str
    files: tuple[str, ...] = ()

    def names(self) -> tuple[str, ...]:
        base = tuple(f.rstrip("/").rsplit("/", 1)[-1] for f in self.files if f.strip("/"))
        return (self.id, *base)


@dataclass(frozen=True, slots=True)
class LaunchFacts:
    """What the serving profile promises: the patches it needs and its drafter (None: none)."""
    profile: str | None = None
    patches: tuple[PatchRef, ...] = ()
    drafter: str | None = None
    log_text: str | None = None           # the launch log, when given
    min_acceptance: float = MIN_ACCEPTANCE


def check_patches(facts: LaunchFacts) -> tuple[str, str]:
    if facts.profile is None:
        return SKIP, "no --profile: the patches a server needs come from its profile"
    if not facts.patches:
        return NOT_APPLICABLE, f"profile {facts.profile} wires no patch"
    if facts.log_text is None:
        return SKIP, f"{len(facts.patches)} patch(es) to confirm; pass the launch log with --log FILE"
    lines = facts.log_text[:MAX_LOG_CHARS].splitlines()
    missing: list[str] = []
    for patch in facts.patches:
        names = patch.names()
        if not any(any(n in line for n in names) and not _BAD.search(line) for line in lines):
            missing.append(patch.id)
    if missing:
        return FAIL, f"not reported applied in the launch log: {', '.join(missing)}"
    return PASS, f"{len(facts.patches)} patch(es) reported applied: {', '.join(p.id for p in facts.patches)}"


def counters(metrics_text: str, names: Sequence[str]) -> dict[str, float]:
    """Sum of each counter in ``names`` over its label sets (``vllm:`` prefix and ``_total`` suffix optional)."""
    out: dict[str, float] = {}
    for line in metrics_text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line.strip())
        if m is None:
            continue
        metric = m.group(1).split(":")[-1].removesuffix("_total")
        if metric in names:
            try:
                value = float(m.group(3))
            except ValueError:
                continue
            if value == value and abs(value) != float("inf"):
                out[metric] = out.get(metric, 0.0) + value
    return out


def check_acceptance(facts: LaunchFacts, metrics_text: str | None, metrics_error: str | None) -> tuple[str, str]:
    if facts.profile is None:
        return SKIP, "no --profile: whether the server drafts comes from its profile"
    if facts.drafter is None:
        return NOT_APPLICABLE, f"profile {facts.profile} serves no drafter"
    if metrics_text is None:
        return FAIL, f"drafter {facts.drafter}: /metrics unreadable ({metrics_error})"
    got = counters(metrics_text, ("spec_decode_num_accepted_tokens", "spec_decode_num_drafts"))
    drafts, accepted = got.get("spec_decode_num_drafts"), got.get("spec_decode_num_accepted_tokens")
    if drafts is None or accepted is None:
        return FAIL, f"drafter {facts.drafter}: no spec_decode counters in /metrics (is speculative decoding on?)"
    if drafts <= 0:
        return FAIL, f"drafter {facts.drafter}: 0 drafts counted after the checks' traffic"
    length = 1.0 + accepted / drafts
    verdict = PASS if length >= facts.min_acceptance else FAIL
    return verdict, f"drafter {facts.drafter}: mean acceptance length {length:.2f} " \
                    f"({'>=' if verdict == PASS else '<'} {facts.min_acceptance:g}) over {drafts:.0f} drafts"


__all__ = ["MIN_ACCEPTANCE", "LaunchFacts", "PatchRef", "check_acceptance", "check_patches", "counters"]
