"""Stops as values: strata, stable reason tokens, the Stop record every gate returns, and the
coded notices (`Notice`) attached to a decision."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum, IntEnum
from types import MappingProxyType
from typing import Any


class Token(str, Enum):
    """A stable token: ``str()`` and formatting give its value (the base of every token enum)."""

    def __str__(self) -> str:
        return str(self.value)


class Outcome(Token):
    """What a command's answer amounts to; ``club3090.cli.exit_codes`` maps each to its exit code."""

    OK = "ok"                        # fits / accepted / emitted
    REFUSED = "refused"              # a stop, hard-block, does not fit, a failed [E] stage
    NEEDS_ACK = "needs-ack"          # a terminal an acknowledgement flag would accept
    LISTING_ONLY = "listing-only"    # compose's tuple form: nothing generated
    FAILED = "failed"                # verify / bench / soak: a check, run or criterion failed
    INCONCLUSIVE = "inconclusive"    # verify / bench: server unreachable; soak: inconclusive


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


class Reason(Token):
    """Public reason tokens (docs/DESIGN.md). Values are stable; wording lives in the CLI."""

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


@dataclass(frozen=True, slots=True)
class Stop:
    """A gate's refusal. ``sub_reason`` carries [C0]'s side field, the d-refused token, or a
    stratum-1 stop's case (``gguf-only``, ``not-found``, ...)."""

    stratum: Stratum
    reason: Reason
    sub_reason: str | None = None
    bypassable_by: frozenset[str] = frozenset()
    detail: Mapping[str, object] = field(default_factory=dict)          # frozen in __post_init__

    def __post_init__(self) -> None:
        object.__setattr__(self, "detail", MappingProxyType(dict(self.detail)))   # read-only, whoever built it

    @property
    def token(self) -> str:
        """The abort reason as printed (docs/DESIGN.md): ``d-refused:<token>`` at stratum 6,
        ``<state>/<sub-reason>`` for a [C0] finding (``engine-support-unknown/no-arch-row``), else
        the bare reason: a stratum-1 stop prints the seed token, its case stays in ``sub_reason``."""
        if self.reason is Reason.D_REFUSED:
            return f"d-refused:{self.sub_reason}"
        if self.stratum is Stratum.ENGINE_SUPPORT and self.sub_reason:
            return f"{self.reason.value}/{self.sub_reason}"
        return str(self.reason.value)


def deriver_stop(reason: Reason, sub_reason: str, message: str, **extra: object) -> Stop:
    """A stratum-1 stop. The public reason stays the bare token; ``sub_reason`` (``gguf-only``,
    ``not-found``, ...) says which case it was, ``detail`` keeps the data (``message``, ``file``, ...)."""
    return Stop(stratum=Stratum.DERIVER, reason=reason, sub_reason=sub_reason,
                detail={"message": message, **extra})


def bypassed(stop: Stop, given: frozenset[str]) -> bool:
    """The subset rule: a stop is cleared only when every tag it names was given."""
    return bool(stop.bypassable_by) and stop.bypassable_by <= given


class NoticeCode(str, Enum):
    """Stable codes of the notes ``pull`` (and the compose generator it drives) attaches to a
    decision. Values are public (``--json``'s ``notice_codes``); wording is not."""

    # gate (club3090.pipeline.pull)
    DRY_RUN_IGNORES_OUT = "dry-run-ignores-out"
    AUTO_SHAPE = "auto-shape"                                  # data: source, reason, runner_ups
    MULTI_NODE_SHAPE = "multi-node-shape"                      # data: nodes, gpus_per_node, tp, pp, interconnect
    TRC_NOT_NEEDED = "trust-remote-code-not-needed"            # data: evidence
    PROFILE_NOT_LAUNCHABLE = "profile-not-launchable"          # data: profile, status
    PATH_A_IGNORES_EXPERIMENTAL_ARCH = "path-a-ignores-experimental-arch"
    BYPASSED = "bypassed"                                      # data: token, flags
    CONTEXT_CAPPED_TO_MODEL = "context-capped-to-model"        # data: profile, max_model_len, model_max
    OVERRIDE_ACCEPTED = "override-accepted"
    NO_DOWNLOAD_YET = "no-download-yet"                        # Path B, non-curated, no --out, no [E]
    CURATED_NEEDS_OUT = "curated-needs-out"                    # data: profile
    EFFECTIVE_CAP = "effective-cap"                            # data: profile, max_num_seqs, rewritten
    RIG_FITTED_OVERRIDE = "rig-fitted-override"                # data: max_model_len
    PROJECT_DIRECTORY = "project-directory"                    # data: project_directory (+ out)
    EMIT_ONLY = "emit-only"                                    # derived compose written, nothing downloaded
    EMIT_REFUSED = "emit-refused"                              # data: failure, detail
    BUNDLE_WRITE_FAILED = "bundle-write-failed"                # data: error
    MEASURED_HERE = "measured-here"                            # data: entry, band_gib
    MEASURED_NEAR = "measured-near"                            # data: receipts, residual_gib, band_gib, capped
    MEASURED_CURATED = "measured-curated"                      # data: anchors, residual_gib, band_gib, capped
    # stratum-5 advisories (club3090.gate.advisories): PullResult.advisories / fits' rows, never notices
    VARIANTS_FIT = "variants-fit"                              # data: variants [...], int4_estimate_bytes
    SWAP_SERVES_IT = "swap-serves-it"                          # data: profile, profiles, model, command
    # hardware resolution (club3090.rig.hardware.resolve_hardware)
    REFERENCE_GPU_PRICED = "reference-gpu-priced"              # data: gpu, count, memory_bytes
    MIXED_GPU_ARCH = "mixed-gpu-arch"                          # data: sms
    NON_NVIDIA_GPU = "non-nvidia-gpu"                          # data: name, assumed_sm
    # Pull-Emit-Derived [E] (club3090.pipeline.emit_derived)
    GPU_TOPOLOGY_UNDETERMINED = "gpu-topology-undetermined"
    CONTEXT_FITTED = "context-fitted"                          # data: profile_ctx, max_model_len
    CLASS_DEFAULTS = "class-defaults"                          # data: keys (text_config keys from class defaults)
    LOCAL_FOLDER = "local-folder"                              # data: snapshot
    BOOT_SKIPPED = "boot-skipped"                              # data: why, compose
    # compose generator (club3090.compose.generate)
    DEGRADED = "degraded"                                      # data: patches [{id, capability}]
    SNAPSHOT_OUTSIDE_HF_HOME = "snapshot-outside-hf-home"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class Notice:
    """A note on a decision: ``code`` (a NoticeCode value) is what callers and tests rely on,
    ``text`` the sentence printed after ``note:``, ``data`` its structured fields. Equality and
    hashing use code and text only, so notices de-duplicate like the strings they replaced."""

    code: str
    text: str
    data: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}), compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "code", NoticeCode(self.code).value)
        object.__setattr__(self, "data", MappingProxyType(dict(self.data)))

    def __str__(self) -> str:
        return self.text

    def to_json(self) -> dict[str, Any]:
        return {"code": self.code, "text": self.text, "data": jsonable(self.data)}


def jsonable(value: Any) -> Any:
    """``value`` with mappings as dicts, sequences and sets as lists, anything else odd as str."""
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (frozenset, set)):
        return [jsonable(v) for v in sorted(value, key=str)]
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)
