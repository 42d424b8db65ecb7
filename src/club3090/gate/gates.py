"""The pull gate's pure decisions: stratum 2, [C0] (stratum 3), [C2a] (stratum 4), stratum-5
eligibility and the [C1] table. SYSTEM.md sections 5-9 are the contract.

Everything here takes values and returns values: no environment, network, clock, printing or
file system. ``club3090.pipeline.pull`` gathers the facts (derivation, detected GPUs, free disk space)
and runs these functions in stratum order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from enum import Enum
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from club3090.catalog.model import NOT_EMITTABLE_TEXT
from club3090.fit.memory import VERDICTS, GiB, tp_geometry_problem
from club3090.gate.disk import required_bytes
from club3090.gate.outcome import Notice, NoticeCode, Reason, Stop, Stratum
from club3090.model.spec import CONFIDENCES
from club3090.rig.gpus import NON_NVIDIA_SM

if TYPE_CHECKING:  # pragma: no cover - typing only
    from club3090.catalog.model import ArchRow, Catalog, Engine, Gpu, Profile

BYPASS_EXPERIMENTAL_ARCH = "--experimental-arch"
BYPASS_TRUST_REMOTE_CODE = "--trust-remote-code"
FLAG_YES = "--yes"
FLAG_FORCE_DOWNLOAD = "--force-download"
NVIDIA = "nvidia"


def _frozen(mapping: Mapping[str, Any] | None = None) -> Mapping[str, Any]:
    return MappingProxyType(dict(mapping or {}))


# --------------------------------------------------------------------------------------------
# Stratum 2: --profile-like validity
# --------------------------------------------------------------------------------------------

def stratum2_profile_like(key: str, catalog: "Catalog", *, path: str,
                          curated_model: str | None = None,
                          curated_variant: str | None = None) -> Stop | None:
    """Stratum 2: ``unknown-profile-like``, ``unsupported-runtime-engine`` (both paths),
    ``profile-not-emittable`` and ``profile-mismatch`` (Path A only)."""
    profile = catalog.profiles.get(key)
    if profile is None:
        return Stop(Stratum.PROFILE_LIKE, Reason.UNKNOWN_PROFILE_LIKE,
                    detail=_frozen({"profile_like": key,
                                    "message": f"{key!r} is not a registry profile; "
                                               "list them with `club3090 profiles`"}))
    engine = catalog.engines.get(profile.engine)
    if engine is None or engine.type != "vllm":
        hint = f"`club3090 kv-calc {key}` prices it with llama.cpp's memory model" \
            if engine is not None and engine.type == "llama.cpp" else None
        return Stop(Stratum.PROFILE_LIKE, Reason.UNSUPPORTED_RUNTIME_ENGINE,
                    detail=_frozen({"profile_like": key, "engine": profile.engine,
                                    "engine_type": engine.type if engine else None,
                                    "message": f"profile {key!r} runs on {profile.engine!r}"
                                               f" ({engine.type if engine else 'unknown'}); only vLLM "
                                               "profiles give a runtime shape the gate can price"
                                               + (f"; {hint}" if hint else ""),
                                    **({"hint": hint} if hint else {})}))
    if path == "A":
        ok, why = catalog.emittable(key)
        if not ok:
            return Stop(Stratum.PROFILE_LIKE, Reason.PROFILE_NOT_EMITTABLE,
                        detail=_frozen({"profile_like": key, "not_emittable_reason": why,
                                        "message": NOT_EMITTABLE_TEXT[why or ""][0]}))
        if curated_model is None:
            return Stop(Stratum.PROFILE_LIKE, Reason.PROFILE_MISMATCH,
                        detail=_frozen({"profile_like": key,
                                        "message": "Path A needs a curated repo to match the profile against"}))
        if profile.model != curated_model or profile.weights_variant != curated_variant:
            return Stop(Stratum.PROFILE_LIKE, Reason.PROFILE_MISMATCH,
                        detail=_frozen({"profile_like": key,
                                        "profile_model": profile.model,
                                        "profile_variant": profile.weights_variant,
                                        "curated_model": curated_model,
                                        "curated_variant": curated_variant,
                                        "message": f"{key!r} serves {profile.model}/{profile.weights_variant}, "
                                                   f"but the repo is {curated_model}/{curated_variant}"}))
    return None


# --------------------------------------------------------------------------------------------
# Hardware facts (who supplies SM and per-GPU memory)
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class HardwareFacts:
    """What the gate knows about the GPUs the profile will use.

    ``memory_bytes`` lists every known GPU in index order (the fit takes the first ``tp``);
    it is empty when no source gives per-GPU memory (then [C0] fails closed).
    """

    sm: Decimal | None
    sm_source: str                          # hardware-flag | gpus-flag | detected | probe | none
    memory_bytes: tuple[int, ...]
    memory_source: str                      # gpus-flag | detected | reference-gpu | none
    names: tuple[str, ...] = ()
    sms: tuple[Decimal, ...] = ()           # per GPU, when known (mixed-arch notice)
    notices: tuple[Notice, ...] = ()

    @property
    def count(self) -> int:
        return len(self.memory_bytes)

    def selected_memory(self, tp: int) -> tuple[int, ...]:
        return self.memory_bytes[:max(tp, 1)]


def resolve_hardware(*, tp: int, hardware_sm: Decimal | None = None, gpu_set: Any = None,
                     detected: Any = None, reference_gpu: "Gpu | None" = None) -> HardwareFacts:
    """Pick the SM and per-GPU memory sources in SYSTEM.md section 6's order.

    SM: ``--hardware`` > ``--gpus`` > the minimum SM of detected NVIDIA GPUs 0..tp-1 > a
    non-NVIDIA probe (8.0, SM gate only) > unknown. Memory: ``--gpus`` > detected NVIDIA GPUs
    > the profile's reference card when only ``--hardware`` was given > unknown. A non-NVIDIA
    GPU never feeds the fit.
    """
    notices: list[Notice] = []
    tp = max(int(tp or 1), 1)
    visible = tuple(detected.gpus) if detected is not None else ()
    # Memory the fit may use: detected GPUs in index order, up to the first one that is not
    # NVIDIA or whose memory the driver did not report.
    fit_gpus: list[Any] = []
    for g in visible:
        if not _is_nvidia(g) or g.memory_bytes is None:
            break
        fit_gpus.append(g)

    memory: tuple[int, ...] = ()
    names: tuple[str, ...] = ()
    sms: tuple[Decimal, ...] = ()
    memory_source = "none"
    if gpu_set is not None:
        memory = tuple(int(m) for m in gpu_set.memory_bytes)
        names = tuple(str(n) for n in gpu_set.names)
        cards = tuple(gpu_set.gpus)
        if cards and all(c is not None for c in cards):
            sms = tuple(Decimal(c.sm) for c in cards)
        elif gpu_set.sm is not None:
            sms = tuple(Decimal(gpu_set.sm) for _ in memory)
        memory_source = "gpus-flag"
    elif fit_gpus:
        memory = tuple(int(g.memory_bytes) for g in fit_gpus)
        names = tuple(str(g.name) for g in fit_gpus)
        sms = tuple(Decimal(g.sm) for g in fit_gpus if g.sm is not None)
        memory_source = "detected"
    elif hardware_sm is not None and reference_gpu is not None and not visible:
        memory = tuple(int(reference_gpu.memory_bytes) for _ in range(tp))
        names = tuple(reference_gpu.display_name for _ in range(tp))
        memory_source = "reference-gpu"
        notices.append(Notice(
            NoticeCode.REFERENCE_GPU_PRICED,
            f"no GPU detected and no --gpus given: priced on the profile's reference card, "
            f"{tp} x {reference_gpu.display_name} ({_gib(reference_gpu.memory_bytes)} GiB each); "
            f"pass --gpus to price your own cards",
            {"gpu": reference_gpu.id, "count": tp, "memory_bytes": int(reference_gpu.memory_bytes)}))

    sm: Decimal | None = None
    sm_source = "none"
    in_use = visible[:tp]
    if hardware_sm is not None:
        sm, sm_source = Decimal(hardware_sm), "hardware-flag"
    elif gpu_set is not None and sms:
        sm, sm_source = min(sms[:tp]), "gpus-flag"
    elif in_use and all(g.sm is not None or not _is_nvidia(g) for g in in_use):
        caps = [Decimal(g.sm) if _is_nvidia(g) else NON_NVIDIA_SM for g in in_use]
        sm = min(caps)
        sm_source = "detected" if all(_is_nvidia(g) for g in in_use) else "probe"
        if len(set(caps)) > 1:
            notices.append(Notice(NoticeCode.MIXED_GPU_ARCH,
                                  "mixed GPU architectures among the GPUs in use "
                                  f"({', '.join(str(c) for c in caps)}); the lowest SM gates the runtime",
                                  {"sms": tuple(str(c) for c in caps)}))
    if any(not _is_nvidia(g) for g in in_use) and gpu_set is None:
        other = next(g for g in in_use if not _is_nvidia(g))
        notices.append(Notice(NoticeCode.NON_NVIDIA_GPU,
                              f"non-NVIDIA GPU detected ({other.name}); SM {NON_NVIDIA_SM} is assumed for "
                              "the SM gate only and its memory is not used for the fit",
                              {"name": str(other.name), "assumed_sm": str(NON_NVIDIA_SM)}))
    return HardwareFacts(sm=sm, sm_source=sm_source, memory_bytes=memory, memory_source=memory_source,
                         names=names, sms=sms, notices=tuple(notices))


def _is_nvidia(gpu: Any) -> bool:
    """Fail closed: only a GPU whose vendor says NVIDIA is one (an unknown vendor is not)."""
    return str(gpu.vendor or "").lower() == NVIDIA


def _gib(n: int) -> str:
    return f"{n / GiB:.2f}"


# --------------------------------------------------------------------------------------------
# Stratum 3: [C0]
# --------------------------------------------------------------------------------------------

class C0State(str, Enum):
    """[C0]'s three top-level states; nothing else is ever emitted. The tokens are
    ``outcome.Reason``'s (their one definition)."""

    ENGINE_SUPPORTED = Reason.ENGINE_SUPPORTED.value
    ENGINE_SUPPORT_UNKNOWN = Reason.ENGINE_SUPPORT_UNKNOWN.value
    NEEDS_TRC_ACK = Reason.NEEDS_TRC_ACK.value

    def __str__(self) -> str:
        return self.value


C0_STATES = frozenset(s.value for s in C0State)


class C0SubReason(str, Enum):
    NO_ARCH_ROW = "no-arch-row"
    RUNTIME_INCOMPATIBLE = "runtime-incompatible"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class C0Result:
    """One [C0] finding. ``reason`` is the public token a stop carries: the state itself, or
    the fail-closed ``hardware-sm-undetermined`` / ``hardware-vram-undetermined``."""

    state: C0State
    sub_reason: C0SubReason | None = None
    bypassable_by: frozenset[str] = frozenset()
    detail: str = ""
    arch: str | None = None
    reason: Reason | None = None
    need_sm: Decimal | None = None

    @property
    def supported(self) -> bool:
        return self.state is C0State.ENGINE_SUPPORTED

    @property
    def token(self) -> str:
        return self.stop().token if not self.supported else self.state.value

    def stop(self) -> Stop:
        reason = self.reason or Reason(self.state.value)
        return Stop(Stratum.ENGINE_SUPPORT, reason,
                    sub_reason=self.sub_reason.value if self.sub_reason else None,
                    bypassable_by=self.bypassable_by,
                    detail=_frozen({"message": self.detail, "arch": self.arch,
                                    "need_sm": str(self.need_sm) if self.need_sm is not None else None}))

    def to_json(self) -> dict[str, Any]:
        return {"state": self.state.value,
                "sub_reason": self.sub_reason.value if self.sub_reason else None,
                "bypassable_by": sorted(self.bypassable_by)}


@dataclass(frozen=True, slots=True)
class C0Inputs:
    """The facts [C0] needs, gathered by the caller."""

    profile: "Profile"
    engine: "Engine"
    architecture: str                       # architectures[0] of the config ("" if absent)
    auto_map: bool
    curated_model: str | None               # curated model id (registry model_slugs join)
    hardware: HardwareFacts
    num_attention_heads: int | None = None
    num_key_value_heads: int | None = None
    weight_format: str | None = None        # "gguf" refuses on a vLLM engine
    kv_format: str | None = None            # defaults to the profile's
    tp: int | None = None                   # defaults to the profile's


def find_arch_row(catalog: "Catalog", *, curated_model: str | None, architecture: str,
                  config_architectures: Iterable[str] = ()) -> "ArchRow | None":
    """Registry ``model_slugs`` join (curated) -> ``architectures[0]`` -> aliases."""
    if curated_model:
        row = catalog.arch_row_for_model(curated_model)
        if row is not None:
            return row
    for name in (architecture, *config_architectures):
        if name:
            row = catalog.arch_row(name)
            if row is not None:
                return row
    return None


def required_sm(profile: "Profile", engine: "Engine", catalog: "Catalog",
                kv_format: str | None = None) -> Decimal:
    """need_sm for a profile (``Catalog.need_sm`` owns the rule; ``engine`` is the profile's)."""
    return catalog.need_sm(profile.key, kv_format)


def c0_findings(inputs: C0Inputs, catalog: "Catalog") -> tuple[C0Result, ...]:
    """Every [C0] finding in decision order (empty tuple: engine-supported).

    The first finding is what [C0] emits. A caller that bypasses a finding (subset rule) moves
    on to the next one, so a bypassed trust-remote-code ack never hides a runtime problem.
    """
    p, eng, hw = inputs.profile, inputs.engine, inputs.hardware
    kv_format = inputs.kv_format or p.kv_format
    tp = int(inputs.tp or p.tp or 1)
    row = find_arch_row(catalog, curated_model=inputs.curated_model, architecture=inputs.architecture)
    arch_name = row.arch if row is not None else (inputs.architecture or None)
    found: list[C0Result] = []

    # 1. trust-remote-code, fail closed
    trc_why = []
    if row is not None and row.trust_remote_code in ("true", "unverified"):
        trc_why.append(f"arch row {row.arch} says trust_remote_code={row.trust_remote_code}")
    if inputs.auto_map:
        trc_why.append("config.json declares auto_map (custom modelling code)")
    if trc_why:
        tags = {BYPASS_TRUST_REMOTE_CODE}
        if row is None:
            tags.add(BYPASS_EXPERIMENTAL_ARCH)
            trc_why.append(f"no arch row for {inputs.architecture or 'this model'}")
        found.append(C0Result(C0State.NEEDS_TRC_ACK, None, frozenset(tags), "; ".join(trc_why), arch_name,
                              Reason.NEEDS_TRC_ACK))

    # 2. no arch row (already covered by a trc finding that carries both tags)
    if row is None and not trc_why:
        found.append(C0Result(C0State.ENGINE_SUPPORT_UNKNOWN, C0SubReason.NO_ARCH_ROW,
                              frozenset({BYPASS_EXPERIMENTAL_ARCH}),
                              f"no arch row for {inputs.architecture or '(config has no architectures)'}; "
                              "nobody has validated that this engine loads it", arch_name,
                              Reason.ENGINE_SUPPORT_UNKNOWN))

    # 3. runtime / hardware
    need = required_sm(p, eng, catalog, kv_format)

    def incompatible(why: str) -> C0Result:
        return C0Result(C0State.ENGINE_SUPPORT_UNKNOWN, C0SubReason.RUNTIME_INCOMPATIBLE, frozenset(), why,
                        arch_name, Reason.ENGINE_SUPPORT_UNKNOWN, need)

    runtime: list[C0Result] = []
    if row is not None:
        pin = row.pin_for(eng.pin)
        if pin is None:
            runtime.append(incompatible(f"engine pin {eng.pin} is not validated for {row.arch}"))
        elif not pin.loads:
            runtime.append(incompatible(f"engine pin {eng.pin} does not load {row.arch}"
                                        + (f": {pin.reason}" if pin.reason else "")))
        if row.tp_divisors and tp not in row.tp_divisors:
            runtime.append(incompatible(f"tp={tp} is not among {row.arch}'s valid TP sizes "
                                        f"{list(row.tp_divisors)}"))
    geometry = tp_geometry_problem(tp, inputs.num_attention_heads, inputs.num_key_value_heads)
    if geometry:
        runtime.append(incompatible(geometry))
    if kv_format not in eng.supported_kv_formats:
        runtime.append(incompatible(f"KV format {kv_format} is not supported by engine {eng.id} "
                                    f"({', '.join(eng.supported_kv_formats)})"))
    if (inputs.weight_format or "").lower() == "gguf" and "gguf" not in eng.supported_weight_formats:
        runtime.append(incompatible(f"GGUF weights cannot be served by {eng.id}; use a safetensors variant"))
    if runtime:
        found.append(runtime[0])
        return tuple(found)

    if hw.sm is None:
        why = ("no GPU detected and --gpus gives memory sizes, not a known card; add --hardware SM "
               "(e.g. 8.6)" if hw.memory_source == "gpus-flag" else "no GPU detected and neither --hardware nor --gpus given")
        found.append(C0Result(C0State.ENGINE_SUPPORT_UNKNOWN, None, frozenset(),
                              f"{why}; refusing to judge the runtime blind", arch_name,
                              Reason.HARDWARE_SM_UNDETERMINED, need))
        return tuple(found)
    kv_floor, kv_ceiling = catalog.kv_sm_window(kv_format)
    if kv_ceiling is not None and hw.sm > kv_ceiling:
        found.append(incompatible(f"{kv_format} KV is only built for SM {kv_floor or 0} to {kv_ceiling}; "
                                  f"this rig is SM {hw.sm}"))
        return tuple(found)
    if hw.sm < need:
        found.append(incompatible(
            f"SM {hw.sm} ({hw.sm_source}) is below the {need} this runtime needs "
            f"(engine {eng.min_sm}, profile {p.fallback_sm or p.required_sm or 0}, "
            f"KV {kv_format} {kv_floor or 0})"))
        return tuple(found)
    if not hw.memory_bytes:
        found.append(C0Result(C0State.ENGINE_SUPPORT_UNKNOWN, None, frozenset(),
                              "per-GPU memory unknown: no NVIDIA GPU detected and no --gpus given",
                              arch_name, Reason.HARDWARE_VRAM_UNDETERMINED, need))
        return tuple(found)
    if hw.count < tp:
        found.append(incompatible(f"the profile needs tp={tp} GPUs but only {hw.count} are available"))
    return tuple(found)


def c0_engine_support(inputs: C0Inputs, catalog: "Catalog") -> C0Result:
    """The single [C0] verdict: the first finding, else ``engine-supported``."""
    found = c0_findings(inputs, catalog)
    if found:
        return found[0]
    row = find_arch_row(catalog, curated_model=inputs.curated_model, architecture=inputs.architecture)
    return C0Result(C0State.ENGINE_SUPPORTED, arch=row.arch if row else inputs.architecture or None,
                    reason=Reason.ENGINE_SUPPORTED,
                    need_sm=required_sm(inputs.profile, inputs.engine, catalog, inputs.kv_format))


# --------------------------------------------------------------------------------------------
# Stratum 4: [C2a] disk
# --------------------------------------------------------------------------------------------

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
                    detail=_frozen({"message": self.detail, "required_bytes": self.required_bytes,
                                    "free_bytes": self.free_bytes}))


def c2a_disk(*, footprint_bytes: int | None, free_bytes: int | None, local: bool = False,
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
                          f"needs {_gib(required)} GiB (download {_gib(footprint_bytes)} GiB x 1.2) "
                          f"but only {_gib(free_bytes)} GiB is free{at}")
    return DiskResult(True, required, free_bytes, f"{_gib(free_bytes)} GiB free >= {_gib(required)} GiB{at}")


# --------------------------------------------------------------------------------------------
# Stratum 5: eligibility
# --------------------------------------------------------------------------------------------

def eligibility(unpriceable_reason: str | None) -> Stop | None:
    """Stratum 5: only what the fit engine cannot model stops here; no flag bypasses it."""
    if not unpriceable_reason:
        return None
    return Stop(Stratum.ELIGIBILITY, Reason.NO_FIT_MODEL,
                detail=_frozen({"message": f"the fit engine cannot price this model: {unpriceable_reason}"}))


# --------------------------------------------------------------------------------------------
# [C1]: confidence x raw verdict -> terminal
# --------------------------------------------------------------------------------------------

class Terminal(str, Enum):
    """The four [C1] terminals. Frozen: nothing else exists."""

    PROCEED = "proceed"
    CONFIRM_PROCEED = "confirm→proceed"
    HARD_BLOCK = "hard-block"
    OVERRIDE_ACCEPTED = "override-accepted"

    def __str__(self) -> str:
        return self.value


LOCKED_TERMINALS = frozenset(t.value for t in Terminal)
RAW_VERDICTS = VERDICTS            # memory owns the raw verdict tokens, spec the confidences


@dataclass(frozen=True, slots=True)
class C1Cell:
    terminal: Terminal
    needs: str | None          # the flag that satisfies the cell; None: silent or blocked
    note: str


_T = Terminal
C1_TABLE: Mapping[tuple[str, str], C1Cell] = MappingProxyType({
    ("exact", "fits-clean"): C1Cell(_T.PROCEED, None, "silent pass"),
    ("exact", "fits-constrained"): C1Cell(_T.CONFIRM_PROCEED, FLAG_YES,
                                          "the fit is trusted but constrained; accept the constraint"),
    ("exact", "wont-fit"): C1Cell(_T.HARD_BLOCK, None, "the fit is trusted and it does not fit; no flag clears it"),
    ("derived", "fits-clean"): C1Cell(_T.CONFIRM_PROCEED, FLAG_YES, "best effort; validate after boot"),
    ("derived", "fits-constrained"): C1Cell(_T.CONFIRM_PROCEED, FLAG_YES,
                                            "best effort, and constrained; validate after boot"),
    ("derived", "wont-fit"): C1Cell(_T.OVERRIDE_ACCEPTED, FLAG_FORCE_DOWNLOAD,
                                    "advisory: predicted not to fit; forcing it is a calibration signal, not a fit"),
    ("estimated-lower-bound", "fits-clean"): C1Cell(_T.CONFIRM_PROCEED, FLAG_YES,
                                                    "the memory figure is a floor; likely under-modelled"),
    ("estimated-lower-bound", "fits-constrained"): C1Cell(_T.CONFIRM_PROCEED, FLAG_YES,
                                                          "the memory figure is a floor, and constrained"),
    ("estimated-lower-bound", "wont-fit"): C1Cell(_T.OVERRIDE_ACCEPTED, FLAG_FORCE_DOWNLOAD,
                                                  "advisory: predicted not to fit; forcing it is a "
                                                  "calibration signal, not a fit"),
})


@dataclass(frozen=True, slots=True)
class C1Outcome:
    terminal: Terminal
    satisfied: bool
    needs: str | None          # the flag still missing (None when satisfied or hard-blocked)
    note: str

    @property
    def reason(self) -> str | None:
        """``None`` when satisfied; ``hard-block``; or ``<terminal>:needs <flag>``."""
        if self.satisfied:
            return None
        if self.terminal is Terminal.HARD_BLOCK:
            return Terminal.HARD_BLOCK.value
        return f"{self.terminal.value}:needs {self.needs}"


def c1_terminal(confidence: str, raw_verdict: str, given: frozenset[str] | set[str]) -> C1Outcome:
    """Look the cell up and apply the flags: ``--yes`` satisfies confirm->proceed,
    ``--force-download`` satisfies override-accepted, nothing clears hard-block."""
    cell = C1_TABLE[(confidence, raw_verdict)]
    if cell.terminal is Terminal.HARD_BLOCK:
        return C1Outcome(cell.terminal, False, None, cell.note)
    if cell.needs is None or cell.needs in given:
        return C1Outcome(cell.terminal, True, None, cell.note)
    return C1Outcome(cell.terminal, False, cell.needs, cell.note)


def given_flags(*, yes: bool = False, force_download: bool = False, experimental_arch: bool = False,
                trust_remote_code: bool = False) -> frozenset[str]:
    flags = {FLAG_YES: yes, FLAG_FORCE_DOWNLOAD: force_download,
             BYPASS_EXPERIMENTAL_ARCH: experimental_arch, BYPASS_TRUST_REMOTE_CODE: trust_remote_code}
    return frozenset(k for k, v in flags.items() if v)


__all__ = [
    "BYPASS_EXPERIMENTAL_ARCH",
    "BYPASS_TRUST_REMOTE_CODE",
    "C0_STATES",
    "C1_TABLE",
    "CONFIDENCES",
    "FLAG_FORCE_DOWNLOAD",
    "FLAG_YES",
    "LOCKED_TERMINALS",
    "RAW_VERDICTS",
    "C0Inputs",
    "C0Result",
    "C0State",
    "C0SubReason",
    "C1Cell",
    "C1Outcome",
    "DiskResult",
    "HardwareFacts",
    "Terminal",
    "c0_engine_support",
    "c0_findings",
    "c1_terminal",
    "c2a_disk",
    "eligibility",
    "find_arch_row",
    "given_flags",
    "required_sm",
    "resolve_hardware",
    "stratum2_profile_like",
    "tp_geometry_problem",
]
