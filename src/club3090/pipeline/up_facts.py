"""What ``up``, ``swap`` and the cluster path found and did, as frozen facts (issue 23 item 3).

A run appends facts to a local :class:`FactLog` as it goes (the CLI may show each one as it lands)
and builds its frozen result once, at the end; only ``cli/`` turns facts into lines
(``cli/commands/_up_render.py``). Each fact names what happened, with the values a renderer or a
test needs, never a printed line.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from club3090.outcome import Outcome

if TYPE_CHECKING:
    from typing import TypeAlias

    from club3090.edges.boot import WarmUp
    from club3090.edges.launchers.process import PortHolder
    from club3090.gate.cliffs import Cliff
    from club3090.gate.swap_match import Mismatch
    from club3090.pipeline.boot_receipt import BootReceipt
    from club3090.pipeline.pull import PullResult
    from club3090.validate.verify import VerifyReport


__all__ = [
    "BundleWritten",
    "ClusterWritten",
    "DerivedLaunch",
    "EmitOnly",
    "EngineNoFit",
    "EnginePlanned",
    "FactLog",
    "NotStarted",
    "PricedOnReference",
    "Ready",
    "ReceiptSkipped",
    "Serving",
    "Smoke",
    "StartFailed",
    "SwapFits",
    "SwapPriced",
    "SwapRefused",
    "ToolsSkipped",
    "UpResult",
    "Verified",
    "WeightsFetched",
]


@dataclass(frozen=True)
class EnginePlanned:
    """An engine's own plan past the gate (a GGUF: the quant and the flags that fit the rig)."""

    engine: str                      # the engine's display name
    repo_id: str
    quant: str
    arch: str
    weights_bytes: int
    rig: str
    note: str                        # the engine's summary of the flags it chose
    kv_bytes: int
    cache_types: tuple[str, str]


@dataclass(frozen=True)
class EngineNoFit:
    """No file of the repo fits the rig under the engine's memory model, with its reason."""

    engine: str
    repo_id: str
    rig: str
    why: str


@dataclass(frozen=True)
class DerivedLaunch:
    """A llama.cpp profile served by a derived launch at its shape, not its shipped compose."""

    profile: str
    captured: bool                   # the catalog holds a capture of the shipped compose


@dataclass(frozen=True)
class BundleWritten:
    directory: Path
    mounted: int | None              # mounted payload files (None: not counted)
    container_only: tuple[str, ...]  # what serve.sh (the native start) cannot apply
    native_note: str                 # how a container-only note is introduced


@dataclass(frozen=True)
class WeightsFetched:
    what: str                        # "weights" or "drafter"
    repo_id: str
    files: int | None                # None: one file (a GGUF), not counted
    bytes: int
    sha_verified: bool


@dataclass(frozen=True)
class EmitOnly:
    files: int
    repo_id: str
    commit: str
    hub_cache: str


@dataclass(frozen=True)
class NotStarted:
    """``--no-start``: the bundle in ``directory`` is written and was left for the user to start."""

    directory: Path


@dataclass(frozen=True)
class Ready:
    seconds: float
    url: str


@dataclass(frozen=True)
class ReceiptSkipped:
    """No receipt for this engine's start-up log (llama.cpp's are not parsed into receipts yet)."""


@dataclass(frozen=True)
class Smoke:
    results: tuple[tuple[str, Any], ...]
    problems: tuple[tuple[str, str], ...] = ()      # (capability, why) of a red or declared-but-unprobed one


@dataclass(frozen=True)
class ToolsSkipped:
    """The tool-call check was not run, and the real reason: the user's ``--skip-tools``, or the
    launch lacks its engine's tool flag (``--jinja``, ``--enable-auto-tool-choice``)."""

    by_user: bool
    missing_flag: str | None


@dataclass(frozen=True)
class Verified:
    """``verify --full``'s table (``stress``: verify-stress's, run after it with ``up --stress``)."""

    report: Any                      # validate.verify.VerifyReport, or validate.stress's report
    stress: bool = False


@dataclass(frozen=True)
class Serving:
    url: str
    model: str
    directory: str
    ok: bool                         # the smoke and every verify --full check green
    stress: bool = False             # up --stress: verify-stress gates SERVING too
    stress_ok: bool = False
    warm: bool = True                # False: no completion within the warm-up window, verify never ran


@dataclass(frozen=True)
class StartFailed:
    why: str
    left_running: str | None
    log_tail: tuple[str, ...]
    capture: Path | None
    capture_error: str | None
    logs: Path


@dataclass(frozen=True)
class ClusterWritten:
    launcher: str
    nodes: int
    tp: int
    pp: int
    gpus_per_node: int
    directory: Path
    files: tuple[str, ...]
    checks: tuple[tuple[bool, str], ...]
    ignored: tuple[str, ...]


@dataclass(frozen=True)
class SwapFits:
    repo: str
    profile: str
    architecture: str
    quant: str
    display_name: str
    group_size_unchecked: str | None = None    # why the group size was not compared (None: it was)


@dataclass(frozen=True)
class PricedOnReference:
    """No GPU was named or detected for the profile's ranks: the swap is priced on its reference GPU."""

    gpu: str                                    # the reference GPU's display name
    ranks: int


@dataclass(frozen=True)
class SwapPriced:
    repo: str
    profile: str
    weights_bytes: int
    curated_bytes: int | None
    memory: tuple[int, ...]
    verdict: str
    max_model_len: int
    concurrency: float
    constrained_seqs: int | None     # fits-constrained: the profile's max_num_seqs that do not all fit


@dataclass(frozen=True)
class SwapRefused:
    token: str
    details: tuple[str, ...]
    mismatches: tuple["Mismatch", ...] = ()




if TYPE_CHECKING:
    # a step's own frozen value is its fact where it has one: the gate's answer (shown first), a known
    # cliff, the port's holder (nothing started), the warm-up, the receipt
    Fact: TypeAlias = (PullResult | Cliff | EnginePlanned | EngineNoFit | DerivedLaunch | BundleWritten
                       | WeightsFetched | EmitOnly | NotStarted | PortHolder | Ready | WarmUp | BootReceipt
                       | ReceiptSkipped | Smoke | ToolsSkipped | Verified | Serving | StartFailed | ClusterWritten
                       | SwapFits | PricedOnReference | SwapPriced | SwapRefused)


def _quiet(_fact: Fact) -> None:
    return None


@dataclass(frozen=True)
class UpResult:
    """What ``up`` did, frozen: the outcome, the gate's answer, the facts in order and the state file."""

    outcome: Outcome
    facts: tuple[Fact, ...] = ()
    gate: "PullResult | None" = None
    state: Mapping[str, Any] = field(default_factory=dict)
    failure: str | None = None                          # PORT_IN_USE, START_FAILED, VERIFY_FAILED

    @property
    def ok(self) -> bool:
        return self.outcome is Outcome.OK

    @property
    def verify(self) -> "VerifyReport | None":
        return next((f.report for f in reversed(self.facts) if isinstance(f, Verified) and not f.stress), None)

    @property
    def receipt(self) -> "BootReceipt | None":
        from club3090.pipeline.boot_receipt import BootReceipt

        return next((f for f in reversed(self.facts) if isinstance(f, BootReceipt)), None)

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "outcome": self.outcome.value, "failure": self.failure, "state": dict(self.state),
                "gate": self.gate.to_json() if self.gate is not None else None,
                "receipt": self.receipt.to_json() if self.receipt is not None else None,
                "verify": self.verify.to_json() if self.verify is not None else None}


@dataclass
class FactLog:
    """The facts of one run so far, in order (a local of the run, never a result); ``show`` sees each
    as it lands (the CLI prints it); ``gate`` is the pull gate's answer the run started from."""

    show: Callable[[Fact], None] = _quiet
    gate: "PullResult | None" = None
    facts: list[Fact] = field(default_factory=list)

    def add(self, fact: Fact) -> None:
        self.facts.append(fact)
        self.show(fact)

    def result(self, outcome: Outcome, state: Mapping[str, Any] | None = None, failure: str | None = None) -> UpResult:
        """The run's frozen result, built once at its end."""
        return UpResult(outcome, tuple(self.facts), self.gate, dict(state or {}), failure)
