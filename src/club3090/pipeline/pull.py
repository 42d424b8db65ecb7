"""``pull``: the staged pipeline for one request (docs/DESIGN.md).

model facts -> rig (``--gpus``, detection) -> serving shape -> fit -> gate decision (strata 1-6
and the [C1] terminal, :mod:`club3090.pipeline.pull_gate`) -> emission (Path A's ``--out``, or
Pull-Emit-Derived ``[E]``) -> the capture bundle of a hard stop. Every stage returns a frozen
value; every side effect goes through the ``Provider``. The result is built once, at the end.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from club3090.compose.derived import PUBLISH_HOST
from club3090.fit.shape import ShapeRequest
from club3090.gate.flags import given_flags
from club3090.outcome import STRATUM_NAMES, Notice, NoticeCode, Outcome, Stratum
from club3090.pipeline.pull_gate import EFFECTIVE_CAP_NOTICE, ComposeStep, Gate, PathName, Verdict, decide, select_path
from club3090.pipeline.pull_records import Emission, emit, record

if TYPE_CHECKING:  # pragma: no cover - typing only
    from club3090.catalog.model import Catalog
    from club3090.fit.auto_shape import ShapeChoice
    from club3090.fit.memory import FitResult
    from club3090.fit.runtime import RuntimeShape
    from club3090.gate.cliffs import Cliff
    from club3090.gate.engine_support import EngineFinding
    from club3090.pipeline.emit_derived import EReport, EStages
    from club3090.pipeline.provider import Provider
    from club3090.rig.gpus import GpuSet
    from club3090.rig.hardware import HardwareFacts

# Our wording of the upstream design's boot-fit caveat.
CAVEAT = ("This verdict is about start-up only: the model is predicted to load and serve at the "
          "configured context, which says nothing about staying stable under long-running or "
          "ever-growing conversations: fitting at boot is necessary, not sufficient (the accumulated-context "
          "and prefill cliffs show up later, in long agent sessions). Run `club3090 soak --mode continuous` "
          "before you rely on it.")


@dataclass(frozen=True, slots=True)
class PullRequest:
    source: str                              # HF repo id, local folder, or catalog name
    profile_like: str | None = None          # None: the automatic shape (pipeline.auto_profile)
    dry_run: bool = False
    yes: bool = False
    force_download: bool = False
    experimental_arch: bool = False
    trust_remote_code: bool = False
    out: Path | None = None
    force: bool = False                      # overwrite an existing --out file
    hardware_sm: Decimal | None = None       # --hardware
    gpus: "GpuSet | None" = None             # --gpus, parsed once by the CLI (nodes and link included)
    downloads_here: bool = True              # False: `up --launcher ray|k8s` (each node downloads)
    path: PathName | None = None             # explicit path (library callers and tests)
    shape_request: ShapeRequest = field(default_factory=ShapeRequest)   # vLLM flags pinning the shape
    host: str = PUBLISH_HOST                 # --host: where a derived compose publishes its port

    @property
    def given(self) -> frozenset[str]:
        return given_flags(yes=self.yes, force_download=self.force_download,
                           experimental_arch=self.experimental_arch, trust_remote_code=self.trust_remote_code)


@dataclass(frozen=True, slots=True)
class PullResult:
    outcome: Outcome
    ok: bool
    path: PathName | None
    stratum: Stratum
    reason: str | None                       # abort token, "hard-block", or "<terminal>:needs <flag>"
    slug: str
    profile_like: str | None
    detail: str = ""
    sub_reason: str | None = None            # a stratum-1 stop's case (gguf-only, not-found, ...)
    c0: "EngineFinding | None" = None        # the [C0] finding
    confidence: str | None = None
    raw_verdict: str | None = None
    terminal: str | None = None
    fit: "FitResult | None" = None
    out: Path | None = None                  # the compose written
    compose_text: str | None = None
    emitted: bool = False
    notices: tuple[Notice, ...] = ()
    caveat: str | None = None
    hardware: "HardwareFacts | None" = None
    bundle: Path | None = None
    suggestions: tuple[str, ...] = ()
    e: "EReport | None" = None               # Pull-Emit-Derived [E], when it ran or was skipped
    shape_source: str = "profile-like"       # profile-like | curated-default | derived
    choice: "ShapeChoice | None" = None      # the derived shape, with its reason and runner-ups
    runtime: "RuntimeShape | None" = None    # what `up` launches: the profile's or the derived shape's
    dry_run: bool = False
    advisories: tuple[Notice, ...] = ()      # stratum-5 advice (gate.advisories); never changes the decision
    cliffs: "tuple[Cliff, ...]" = ()         # known failure modes from the catalog (gate.cliffs), shown first

    @property
    def stratum_name(self) -> str:
        return STRATUM_NAMES[self.stratum]

    @property
    def notice_codes(self) -> tuple[str, ...]:
        return tuple(n.code for n in self.notices)

    @property
    def bypassed(self) -> list[dict[str, Any]]:
        """Every [C0] stop a flag cleared: ``{"token", "flags"}`` (flags sorted)."""
        return [{"token": str(n.data["token"]), "flags": sorted(n.data["flags"])}
                for n in self.notices if n.code == NoticeCode.BYPASSED.value]

    @property
    def detection_notes(self) -> tuple[str, ...]:
        return self.hardware.detection_notes if self.hardware is not None else ()

    @property
    def summary(self) -> str:
        """FITS / FITS-but-not-yet-accepted / DOES NOT FIT (a fit verdict only) / STOPPED (any
        other stop: no verdict about the fit was reached, or a later stage refused)."""
        fits = self.raw_verdict in ("fits-clean", "fits-constrained")
        if self.ok and fits:
            return "FITS"
        if fits and not self.ok and int(self.stratum) == 0:
            return "FITS-but-not-yet-accepted"
        if self.raw_verdict == "wont-fit":
            return "DOES NOT FIT"
        return "STOPPED"

    def to_json(self) -> dict[str, Any]:
        e = self.e
        return {
            # ok: the question was answered yes (a dry run asks "does it fit?"), the same as outcome ok
            "ok": self.outcome is Outcome.OK, "outcome": self.outcome.value, "path": self.path,
            "stratum": int(self.stratum), "stratum_name": self.stratum_name, "reason": self.reason,
            "sub_reason": self.sub_reason, "detail": self.detail, "slug": self.slug,
            "profile_like": self.profile_like, "c0": self.c0.to_json() if self.c0 is not None else None,
            "confidence": self.confidence, "raw_verdict": self.raw_verdict, "terminal": self.terminal,
            "summary": self.summary, "fit": self.fit.to_json() if self.fit is not None else None,
            "out": str(self.out) if self.out is not None else None, "emitted": self.emitted,
            "notices": [n.text for n in self.notices], "notice_codes": [n.code for n in self.notices],
            "bypassed": self.bypassed, "suggestions": list(self.suggestions), "caveat": self.caveat,
            "hardware": hardware_json(self.hardware), "detection_notes": list(self.detection_notes),
            "bundle": str(self.bundle) if self.bundle is not None else None,
            "e": e.to_json() if e is not None else None,
            "download_ok": e.download_ok if e is not None else None,
            "boot_ok": e.boot_ok if e is not None else None,
            "smoke": dict(e.smoke.results) if e is not None and e.smoke is not None else None,
            "capture_paths": [str(e.bundle)] if e is not None and e.bundle is not None else [],
            "shape_source": self.shape_source,
            "shape": self.choice.to_json() if self.choice is not None else None,
            "advisories": [n.to_json() for n in self.advisories],
            "cliffs": [c.to_json() for c in self.cliffs],
        }


def hardware_json(hw: "HardwareFacts | None") -> dict[str, Any] | None:
    if hw is None:
        return None
    return {"sm": str(hw.sm) if hw.sm is not None else None, "sm_source": hw.sm_source,
            "gpu_count": hw.count, "memory_bytes": list(hw.memory_bytes),
            "memory_source": hw.memory_source, "names": list(hw.names)}


def evaluate(request: PullRequest, provider: "Provider", *, stages: "EStages | None" = None,
             captures_root: Path | None = None, catalog: "Catalog | None" = None,
             compose: ComposeStep | None = None, facts: Any = None) -> PullResult:
    """Run the gate for one request and return the decision as a value.

    Tool failures (the Hub unreachable, an invalid catalog) raise; every verdict,
    refusals included, is a PullResult. ``stages`` turns on ``[E]`` for a non-curated repo whose
    Path-B terminal is satisfied (the CLI passes them; without them ``--out`` only gets the derived
    compose). A hard stop writes a redacted gate bundle under ``captures_root`` when one is given.
    ``compose`` replaces the stratum-6 compose step (pure; default: the curated replay with the
    Provider's drift guard). ``facts``: the source already resolved (``provider.resolve``), so a
    caller that looked at it first does not read the Hub twice.
    """
    catalog = catalog if catalog is not None else provider.catalog()
    gpus = request.gpus
    facts = facts if facts is not None else provider.resolve(request.source, catalog)
    verdict = decide(request, facts, catalog, gpus, provider, compose=compose or _curated_compose(provider),
                     e_enabled=stages is not None)
    across = multi_node_notice(verdict, gpus)
    # pull writes and boots one machine's compose: a shape spanning nodes is priced, then launched by `up`
    emission = Emission(notices=(across,)) if across is not None else emit(verdict, catalog, provider, stages,
                                                                               captures_root)
    bundle = record(verdict, emission, provider, captures_root)
    return replace(assemble(verdict, emission, bundle), advisories=advisories(verdict, catalog),
                   cliffs=cliffs_of(verdict.gate, catalog))


def cliffs_of(at: Gate, catalog: "Catalog") -> "tuple[Cliff, ...]":
    """The known cliffs of the model and profile the gate judged (``gate.cliffs``), on the shape it
    launches (its runtime shape: the profile's, or the derived one)."""
    from club3090.gate.cliffs import known_cliffs, served_by_profile, weight_format_of

    spec, rt = at.spec, at.runtime
    served = served_by_profile(catalog, at.profile, tp=rt.tp if rt else None, pp=rt.pp if rt else None,
                               kv_format=rt.kv_format if rt else None, weight_format=weight_format_of(spec),
                               engine=at.engine.type if at.engine else None,
                               sm=at.hardware.sm if at.hardware else None)
    return known_cliffs(catalog, profile=at.profile, served=served,
                        curated_model=spec.curated.model_id if spec is not None and spec.curated else None,
                        architecture=spec.arch.architecture if spec is not None else "")


def advisories(verdict: Verdict, catalog: "Catalog") -> tuple[Notice, ...]:
    """The stratum-5 advisories for a model whose facts were read (docs/DESIGN.md)."""
    from club3090.gate.advisories import advise

    at = verdict.gate
    if at.spec is None or at.spec.source == "local":
        return ()
    hw = at.hardware
    memory = hw.selected_memory(hw.count) if hw is not None and hw.memory_bytes else ()
    return advise(at.spec, catalog, fit=at.fit, memory=memory,
                  device_name=hw.names[0] if hw is not None and hw.names else None,
                  gpu_count=hw.count if hw is not None and hw.count else None)


def multi_node_notice(verdict: Verdict, gpus: "GpuSet | None") -> Notice | None:
    """When the decided shape spans several nodes: what pull did (priced only) and the next step."""
    runtime = verdict.gate.runtime
    if gpus is None or gpus.nodes <= 1 or runtime is None:
        return None
    world = int(runtime.tp) * int(runtime.pp)
    nodes = -(-world // gpus.gpus_per_node)
    if nodes <= 1:
        return None
    return Notice(NoticeCode.MULTI_NODE_SHAPE,
                  f"TP {runtime.tp} x PP {runtime.pp} spans {nodes} nodes of {gpus.gpus_per_node} GPU(s) "
                  f"({gpus.interconnect}): pull priced it and wrote, downloaded and started nothing (its compose "
                  "is one machine's); launch it with `club3090 up ... --launcher ray` or `--launcher k8s`",
                  {"nodes": nodes, "gpus_per_node": gpus.gpus_per_node, "tp": int(runtime.tp),
                   "pp": int(runtime.pp), "interconnect": gpus.interconnect})


def _curated_compose(provider: "Provider") -> ComposeStep:
    from club3090.compose.generate import generate

    return lambda key, catalog, out_name: generate(key, catalog, guard_runner=provider.drift_guard,
                                                   out_name=out_name)


def assemble(verdict: Verdict, emission: Emission, bundle: tuple[Path | None, tuple[Notice, ...]]) -> PullResult:
    """The one place a PullResult is built."""
    at = verdict.gate
    outcome = Outcome.REFUSED if emission.failed else verdict.outcome
    fit = at.fit
    return PullResult(
        outcome=outcome, ok=verdict.ok, path=at.path, stratum=verdict.stratum, reason=verdict.reason,
        slug=at.slug, profile_like=at.request.profile_like, detail=verdict.detail, sub_reason=verdict.sub_reason,
        c0=at.finding, confidence=at.spec.confidence if at.spec is not None else None,
        raw_verdict=fit.raw_verdict if fit is not None else None, terminal=at.terminal, fit=fit,
        out=emission.out, compose_text=emission.compose_text or verdict.compose_text,
        emitted=emission.emitted, notices=tuple(dict.fromkeys((*at.notices, *emission.notices, *bundle[1]))),
        caveat=CAVEAT if verdict.caveat else None, hardware=at.hardware, bundle=bundle[0],
        suggestions=at.suggestions, e=emission.e, shape_source=at.shape_source, choice=at.choice,
        runtime=at.runtime,
        dry_run=at.request.dry_run)


__all__ = ["CAVEAT", "EFFECTIVE_CAP_NOTICE", "PullRequest", "PullResult", "evaluate", "select_path"]
