"""Compose generator ``[D]``: the entry points and names other packages import (docs/DESIGN.md §11-§12).

Curated replay (``generate``, ``dry_run``) lives in ``compose.replay``; derived compose
(``derived_compose``) in ``compose.derived``; results and refusal tokens in ``compose.outcome``;
param slots in ``compose.param_slots``; patch wiring and the drift-guard hook in
``compose.patch_wiring``; the provenance header in ``compose.provenance``. This module re-exports
their public names so callers keep one import path.
"""

from __future__ import annotations

from club3090.compose.derived import (
    AUTOROUND_METHODS,
    DERIVED_COMPUTE_DTYPES,
    DERIVED_KV_FORMATS,
    DERIVED_QUANT_METHODS,
    MAX_SERVED_NAME,
    MAX_SLUG,
    PULLS_MOUNT_ROOT,
    derived_compose,
)
from club3090.compose.outcome import (
    DEGRADED_DRIFT,
    DERIVED_PREFIX,
    FOUNDATIONAL_DRIFT,
    OTHER,
    PIN_MISMATCH,
    REFUSAL_TOKENS,
    SCOPE,
    TP_OR_KV,
    TRC,
    ComposeOutcome,
    PatchReport,
)
from club3090.compose.param_slots import NVLINK_REQUIRED, PARAM_SLOTS, with_default
from club3090.compose.patch_wiring import GuardRunner, invocation_kind
from club3090.compose.replay import dry_run, generate

__all__ = [
    "AUTOROUND_METHODS",
    "DEGRADED_DRIFT",
    "DERIVED_COMPUTE_DTYPES",
    "DERIVED_KV_FORMATS",
    "DERIVED_PREFIX",
    "DERIVED_QUANT_METHODS",
    "FOUNDATIONAL_DRIFT",
    "MAX_SERVED_NAME",
    "MAX_SLUG",
    "NVLINK_REQUIRED",
    "OTHER",
    "PARAM_SLOTS",
    "PIN_MISMATCH",
    "PULLS_MOUNT_ROOT",
    "REFUSAL_TOKENS",
    "SCOPE",
    "TP_OR_KV",
    "TRC",
    "ComposeOutcome",
    "GuardRunner",
    "PatchReport",
    "derived_compose",
    "dry_run",
    "generate",
    "invocation_kind",
    "with_default",
]
