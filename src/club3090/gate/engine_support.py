"""Stratum 3, ``[C0]``: can the runtime's engine load this architecture on these GPUs?

Three top-level states (``engine-supported``, ``engine-support-unknown``,
``needs-trust-remote-code-ack``) plus the fail-closed hardware reasons. Findings come in decision
order; the caller applies the bypass subset rule and moves on to the next finding.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from club3090.fit.memory import tp_geometry_problem
from club3090.fit.runtime import RuntimeShape
from club3090.gate.flags import BYPASS_EXPERIMENTAL_ARCH, BYPASS_TRUST_REMOTE_CODE
from club3090.outcome import Reason, Stop, Stratum, Token
from club3090.rig.hardware import HardwareFacts, mixed_generations

if TYPE_CHECKING:  # pragma: no cover - typing only
    from club3090.catalog.model import ArchRow, Catalog, Engine


class EngineState(Token):
    """[C0]'s three top-level states; nothing else is ever emitted. The tokens are
    ``outcome.Reason``'s (their one definition)."""

    ENGINE_SUPPORTED = Reason.ENGINE_SUPPORTED.value
    ENGINE_SUPPORT_UNKNOWN = Reason.ENGINE_SUPPORT_UNKNOWN.value
    NEEDS_TRC_ACK = Reason.NEEDS_TRC_ACK.value


ENGINE_STATES = frozenset(s.value for s in EngineState)


class EngineSubReason(Token):
    NO_ARCH_ROW = "no-arch-row"
    RUNTIME_INCOMPATIBLE = "runtime-incompatible"


@dataclass(frozen=True, slots=True)
class EngineFinding:
    """One [C0] finding. ``reason`` is the public token a stop carries: the state itself, or
    the fail-closed ``hardware-sm-undetermined`` / ``hardware-vram-undetermined``."""

    state: EngineState
    sub_reason: EngineSubReason | None = None
    bypassable_by: frozenset[str] = frozenset()
    detail: str = ""
    arch: str | None = None
    reason: Reason | None = None
    need_sm: Decimal | None = None

    @property
    def supported(self) -> bool:
        return self.state is EngineState.ENGINE_SUPPORTED

    @property
    def token(self) -> str:
        return self.stop().token if not self.supported else self.state.value

    def stop(self) -> Stop:
        reason = self.reason or Reason(self.state.value)
        return Stop(Stratum.ENGINE_SUPPORT, reason,
                    sub_reason=self.sub_reason.value if self.sub_reason else None,
                    bypassable_by=self.bypassable_by,
                    detail={"message": self.detail, "arch": self.arch,
                            "need_sm": str(self.need_sm) if self.need_sm is not None else None})

    def to_json(self) -> dict[str, Any]:
        return {"state": self.state.value,
                "sub_reason": self.sub_reason.value if self.sub_reason else None,
                "bypassable_by": sorted(self.bypassable_by)}


@dataclass(frozen=True, slots=True)
class EngineInputs:
    """The facts [C0] needs, gathered by the caller."""

    runtime: RuntimeShape                   # the profile's, or the automatic shape's
    engine: "Engine"
    architecture: str                       # architectures[0] of the config ("" if absent)
    auto_map: bool
    curated_model: str | None               # curated model id (registry model_slugs join)
    hardware: HardwareFacts
    num_attention_heads: int | None = None
    num_key_value_heads: int | None = None
    weight_format: str | None = None        # "gguf" refuses on a vLLM engine
    kv_format: str | None = None            # defaults to the runtime's
    tp: int | None = None                   # defaults to the runtime's
    python_files: tuple[str, ...] | None = None   # *.py in the repo listing; None: not read


def no_code_evidence(inputs: EngineInputs) -> str | None:
    """The repo's own evidence that it needs no custom code: no ``auto_map`` anywhere in its
    config (nested configs included) and no Python file in its listing. None when it ships code,
    declares ``auto_map`` or its listing could not be read (then an ``unverified`` row fails closed)."""
    if inputs.auto_map or inputs.python_files is None or inputs.python_files:
        return None
    return ("config.json declares no auto_map (nested configs included) and the repo listing has no .py "
            "files: vLLM's built-in implementation serves it")


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


def required_sm(runtime: RuntimeShape, catalog: "Catalog", kv_format: str | None = None) -> Decimal:
    """need_sm for the runtime (``Catalog.runtime_sm`` owns the rule)."""
    return catalog.runtime_sm(runtime.engine, runtime.profile_sm, kv_format or runtime.kv_format)


def engine_findings(inputs: EngineInputs, catalog: "Catalog") -> tuple[EngineFinding, ...]:
    """Every [C0] finding in decision order (empty tuple: engine-supported).

    The first finding is what [C0] emits. A caller that bypasses a finding (subset rule) moves
    on to the next one, so a bypassed trust-remote-code ack never hides a runtime problem.
    """
    p = inputs.runtime
    kv_format = inputs.kv_format or p.kv_format
    tp = int(inputs.tp or p.tp or 1)
    row = find_arch_row(catalog, curated_model=inputs.curated_model, architecture=inputs.architecture)
    arch_name = row.arch if row is not None else (inputs.architecture or None)
    found: list[EngineFinding] = []
    # 1. trust-remote-code, fail closed
    trc = _trust_remote_code_finding(inputs, row, arch_name)
    if trc is not None:
        found.append(trc)
    # 2. no arch row (already covered by a trc finding that carries both tags)
    elif row is None:
        found.append(EngineFinding(EngineState.ENGINE_SUPPORT_UNKNOWN, EngineSubReason.NO_ARCH_ROW,
                              frozenset({BYPASS_EXPERIMENTAL_ARCH}),
                              f"no arch row for {inputs.architecture or '(config has no architectures)'}; "
                              "nobody has validated that this engine loads it", arch_name,
                              Reason.ENGINE_SUPPORT_UNKNOWN))
    # 3. runtime / hardware
    need = required_sm(p, catalog, kv_format)

    def incompatible(why: str) -> EngineFinding:
        return EngineFinding(EngineState.ENGINE_SUPPORT_UNKNOWN, EngineSubReason.RUNTIME_INCOMPATIBLE, frozenset(), why,
                        arch_name, Reason.ENGINE_SUPPORT_UNKNOWN, need)

    runtime = _runtime_problems(inputs, row, kv_format, tp)
    if runtime:
        return (*found, incompatible(runtime[0]))
    hardware = _hardware_finding(inputs, catalog, kv_format, tp, need, arch_name, incompatible)
    return (*found, hardware) if hardware is not None else tuple(found)


def _trust_remote_code_finding(inputs: EngineInputs, row: "ArchRow | None",
                               arch_name: str | None) -> EngineFinding | None:
    trc_why = []
    row_trc = row.trust_remote_code if row is not None else None
    if row_trc == "unverified" and no_code_evidence(inputs) is not None:
        row_trc = "false"          # the repo's own evidence decides what the row left open
    if row is not None and row_trc in ("true", "unverified"):
        trc_why.append(f"arch row {row.arch} says trust_remote_code={row.trust_remote_code}")
    if inputs.auto_map:
        trc_why.append("config.json declares auto_map (custom modelling code)")
    if not trc_why:
        return None
    tags = {BYPASS_TRUST_REMOTE_CODE}
    if row is None:
        tags.add(BYPASS_EXPERIMENTAL_ARCH)
        trc_why.append(f"no arch row for {inputs.architecture or 'this model'}")
    return EngineFinding(EngineState.NEEDS_TRC_ACK, None, frozenset(tags), "; ".join(trc_why), arch_name,
                         Reason.NEEDS_TRC_ACK)


def _runtime_problems(inputs: EngineInputs, row: "ArchRow | None", kv_format: str, tp: int) -> list[str]:
    """Why the engine pin cannot run this model at this TP and KV format (the first one is reported)."""
    eng = inputs.engine
    problems: list[str] = []
    if row is not None:
        pin = row.pin_for(eng.pin)
        if pin is None:
            problems.append(f"engine pin {eng.pin} is not validated for {row.arch}")
        elif not pin.loads:
            problems.append(f"engine pin {eng.pin} does not load {row.arch}" + (f": {pin.reason}" if pin.reason else ""))
        if row.tp_divisors and tp not in row.tp_divisors:
            problems.append(f"tp={tp} is not among {row.arch}'s valid TP sizes {list(row.tp_divisors)}")
    geometry = tp_geometry_problem(tp, inputs.num_attention_heads, inputs.num_key_value_heads)
    if geometry:
        problems.append(geometry)
    if kv_format not in eng.supported_kv_formats:
        problems.append(f"KV format {kv_format} is not supported by engine {eng.id} "
                        f"({', '.join(eng.supported_kv_formats)})")
    if (inputs.weight_format or "").lower() == "gguf" and "gguf" not in eng.supported_weight_formats:
        problems.append(f"GGUF weights cannot be served by {eng.id}; use a safetensors variant")
    return problems


def _hardware_finding(inputs: EngineInputs, catalog: "Catalog", kv_format: str, tp: int, need: Decimal,
                      arch_name: str | None,
                      incompatible: Callable[[str], EngineFinding]) -> EngineFinding | None:
    """The rig against the runtime: a known SM inside the KV window and above the need, memory, GPU count."""
    p, eng, hw = inputs.runtime, inputs.engine, inputs.hardware
    if hw.sm is None:
        why = ("no GPU detected and --gpus gives memory sizes, not a known card; add --hardware SM "
               "(e.g. 8.6)" if hw.memory_source == "gpus-flag" else "no GPU detected and neither --hardware nor --gpus given")
        return EngineFinding(EngineState.ENGINE_SUPPORT_UNKNOWN, None, frozenset(),
                             f"{why}; refusing to judge the runtime blind", arch_name,
                             Reason.HARDWARE_SM_UNDETERMINED, need)
    mixed = mixed_generations(hw.names[:tp], hw.sms[:tp])
    if p.requires_homogeneous_arch and mixed:
        return incompatible(f"profile {p.key} requires every GPU of one generation (requires_homogeneous_arch: "
                            f"its kernels are built for one SM); this rig mixes {mixed}")
    kv_floor, kv_ceiling = catalog.kv_sm_window(kv_format)
    if kv_ceiling is not None and hw.sm > kv_ceiling:
        return incompatible(f"{kv_format} KV is only built for SM {kv_floor or 0} to {kv_ceiling}; "
                            f"this rig is SM {hw.sm}")
    if hw.sm < need:
        return incompatible(
            f"SM {hw.sm} ({hw.sm_source}) is below the {need} this runtime needs "
            f"(engine {eng.min_sm}, profile {p.profile_sm or 0}, "
            f"KV {kv_format} {kv_floor or 0})")
    if not hw.memory_bytes:
        return EngineFinding(EngineState.ENGINE_SUPPORT_UNKNOWN, None, frozenset(),
                             "per-GPU memory unknown: no NVIDIA GPU detected and no --gpus given",
                             arch_name, Reason.HARDWARE_VRAM_UNDETERMINED, need)
    if hw.count < tp:
        return incompatible(f"the profile needs tp={tp} GPUs but only {hw.count} are available")
    return None


def engine_support(inputs: EngineInputs, catalog: "Catalog") -> EngineFinding:
    """The single [C0] verdict: the first finding, else ``engine-supported``."""
    found = engine_findings(inputs, catalog)
    if found:
        return found[0]
    row = find_arch_row(catalog, curated_model=inputs.curated_model, architecture=inputs.architecture)
    return EngineFinding(EngineState.ENGINE_SUPPORTED, arch=row.arch if row else inputs.architecture or None,
                    reason=Reason.ENGINE_SUPPORTED,
                    need_sm=required_sm(inputs.runtime, catalog, inputs.kv_format))
