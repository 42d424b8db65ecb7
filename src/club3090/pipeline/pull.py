"""The pull gate's orchestration (SYSTEM.md sections 1-10): paths A and B, strata 1-6 in order,
the fit verdict, the [C1] terminal, the Path-A compose dry-run and emit.

``evaluate`` is the one entry point. Every side effect is a parameter: derivation (Hub or
folder), GPU detection, free disk space, the compose dry-run, the clock and the capture-bundle
root. The decisions themselves live in ``club3090.gate.gates`` and ``club3090.fit.memory``.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from club3090.edges.files import write_output_text
from club3090.fit.memory import ServeShape, UnpriceableModel
from club3090.fit.shape import profile_shape
from club3090.gate import gates
from club3090.gate.gates import (
    BYPASS_EXPERIMENTAL_ARCH,
    C0Result,
    HardwareFacts,
    Terminal,
)
from club3090.gate.outcome import (
    STRATUM_NAMES,
    Notice,
    NoticeCode,
    Reason,
    Stop,
    Stratum,
    bypassed,
)
from club3090.reports import capture

if TYPE_CHECKING:  # pragma: no cover
    from club3090.catalog.model import Catalog, Engine, Profile
    from club3090.model.spec import ModelSpec
    from club3090.pipeline.emit_derived import EStages
    from club3090.settings import Settings

EXIT_OK, EXIT_STOP, EXIT_NEEDS_FLAG = 0, 2, 3
# SYSTEM.md section 9's mem_util for a profile that sets none (the loader allows that only for
# llama.cpp profiles); the catalog requires every other shape field of a profile.
UNSET_MEM_UTIL_DEFAULT = 0.95

# Our wording of the upstream design's boot-fit caveat (SYSTEM.md section 9).
CAVEAT = ("This verdict is about start-up only: the model is predicted to load and serve at the "
          "configured context, which says nothing about staying stable under long-running or "
          "ever-growing conversations. Run a continuous soak test before you rely on it.")
EFFECTIVE_CAP_NOTICE = (
    "known effective cap: on this hardware vLLM will serve fewer full-length requests at once than "
    "the profile asks for; the compose is emitted exactly as the profile ships it, "
    "no compose value rewritten")

PathName = str  # "A" | "B"


@dataclass(frozen=True, slots=True)
class PullRequest:
    source: str                              # HF repo id or local folder
    profile_like: str
    dry_run: bool = False
    yes: bool = False
    force_download: bool = False
    experimental_arch: bool = False
    trust_remote_code: bool = False
    out: Path | None = None
    force: bool = False                      # overwrite an existing --out file
    hardware_sm: Decimal | None = None       # --hardware
    gpus: str | None = None                  # --gpus SPEC
    path: PathName | None = None             # explicit path (library callers and tests)

    @property
    def given(self) -> frozenset[str]:
        return gates.given_flags(yes=self.yes, force_download=self.force_download,
                                 experimental_arch=self.experimental_arch,
                                 trust_remote_code=self.trust_remote_code)


@dataclass(frozen=True, slots=True)
class PullResult:
    ok: bool
    exit_code: int
    path: PathName | None
    stratum: Stratum
    reason: str | None                       # abort token, "hard-block", or "<terminal>:needs <flag>"
    slug: str
    profile_like: str
    detail: str = ""
    sub_reason: str | None = None            # a stratum-1 stop's case (gguf-only, not-found, ...)
    c0: C0Result | None = None
    confidence: str | None = None
    raw_verdict: str | None = None
    terminal: str | None = None
    fit: Any = None                          # memory.FitResult
    out: Path | None = None                  # the compose written (Path A)
    compose_text: str | None = None
    emitted: bool = False
    notices: tuple[Notice, ...] = ()
    caveat: str | None = None
    hardware: HardwareFacts | None = None
    bundle: Path | None = None
    suggestions: tuple[str, ...] = ()
    e: Any = None                            # emit.EReport when Pull-Emit-Derived [E] ran or was skipped

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
    def summary(self) -> str:
        """FITS / FITS-but-not-yet-accepted / DOES NOT FIT."""
        fits = self.raw_verdict in ("fits-clean", "fits-constrained")
        if self.ok and fits:
            return "FITS"
        if self.exit_code == EXIT_NEEDS_FLAG and fits:
            return "FITS-but-not-yet-accepted"
        return "DOES NOT FIT"

    def to_json(self) -> dict[str, Any]:
        fit = self.fit.to_json() if self.fit is not None else None
        return {
            "ok": self.ok,
            "exit_code": self.exit_code,
            "path": self.path,
            "stratum": int(self.stratum),
            "stratum_name": self.stratum_name,
            "reason": self.reason,
            "sub_reason": self.sub_reason,
            "detail": self.detail,
            "slug": self.slug,
            "profile_like": self.profile_like,
            "c0": self.c0.to_json() if self.c0 is not None else None,
            "confidence": self.confidence,
            "raw_verdict": self.raw_verdict,
            "terminal": self.terminal,
            "summary": self.summary,
            "fit": fit,
            "out": str(self.out) if self.out is not None else None,
            "emitted": self.emitted,
            "notices": [n.text for n in self.notices],
            "notice_codes": [n.code for n in self.notices],
            "bypassed": self.bypassed,
            "suggestions": list(self.suggestions),
            "caveat": self.caveat,
            "hardware": _hardware_json(self.hardware),
            "bundle": str(self.bundle) if self.bundle is not None else None,
            "e": self.e.to_json() if self.e is not None else None,
            "download_ok": self.e.download_ok if self.e is not None else None,
            "boot_ok": self.e.boot_ok if self.e is not None else None,
            "smoke": (dict(self.e.smoke.results) if self.e is not None and self.e.smoke is not None else None),
            "capture_paths": ([str(self.e.bundle)] if self.e is not None and self.e.bundle is not None else []),
        }


def _hardware_json(hw: HardwareFacts | None) -> dict[str, Any] | None:
    if hw is None:
        return None
    return {"sm": str(hw.sm) if hw.sm is not None else None, "sm_source": hw.sm_source,
            "gpu_count": hw.count, "memory_bytes": list(hw.memory_bytes),
            "memory_source": hw.memory_source, "names": list(hw.names)}


def select_path(request: PullRequest, curated: bool) -> PathName:
    """Explicit path -> --dry-run forces B -> curated hit with --out is A -> B."""
    if request.path in ("A", "B"):
        return request.path
    if request.dry_run:
        return "B"
    if curated and request.out is not None:
        return "A"
    return "B"


def exit_code_for(ok: bool, reason: str | None) -> int:
    if ok:
        return EXIT_OK
    if reason and (reason.startswith(Terminal.CONFIRM_PROCEED.value)
                   or reason.startswith(Terminal.OVERRIDE_ACCEPTED.value)):
        return EXIT_NEEDS_FLAG
    return EXIT_STOP


# --------------------------------------------------------------------------------------------
# The evaluation
# --------------------------------------------------------------------------------------------

@dataclass
class _Run:
    """Mutable scratch state of one evaluation; frozen into a PullResult at the end."""

    request: PullRequest
    path: PathName | None = None
    confidence: str | None = None
    c0: C0Result | None = None
    hardware: HardwareFacts | None = None
    raw_verdict: str | None = None
    terminal: str | None = None
    fit: Any = None
    notices: list[Notice] = field(default_factory=list)
    suggestions: list[str] = field(default_factory=list)
    slug: str = ""
    spec: Any = None
    profile: Any = None
    engine: Any = None
    trust_remote_code: bool = False          # [C0] needed the ack and --trust-remote-code gave it


def evaluate(request: PullRequest, *, catalog: "Catalog", settings: "Settings",
             derive: Callable[..., Any] | None = None,
             detect: Callable[[], Any] | None = None,
             free_bytes: Callable[[Path], int | None] | None = None,
             dry_run_compose: Callable[..., Any] | None = None,
             clock: Callable[[], datetime] | None = None,
             captures_root: Path | None = None,
             predict: Callable[..., Any] | None = None,
             gpu_set: Any = None, stages: "EStages | None" = None) -> PullResult:
    """Run the gate for one request and return the decision as a value.

    Tool failures (Hub unreachable, an invalid catalog) propagate as exceptions; every verdict,
    including every refusal, is a PullResult. On every hard stop a redacted gate bundle is
    written under ``captures_root`` when one is given.

    ``stages`` turns on Pull-Emit-Derived ``[E]`` (SYSTEM.md section 12) for a non-curated repo
    whose Path-B terminal is satisfied (the CLI always passes them; ``None``, the library default,
    only writes the derived compose when ``--out`` is given). ``[E]`` never changes ``ok``, the
    stratum or the terminal; a failed ``[E]`` makes the exit code 2 and its bundle replaces the
    gate-only one.
    """
    run = _Run(request=request, slug=request.source)
    clock = clock or _utcnow
    result = _evaluate(run, catalog=catalog, settings=settings, derive=derive, detect=detect,
                       free_bytes=free_bytes, dry_run_compose=dry_run_compose, predict=predict,
                       gpu_set=gpu_set, e_enabled=stages is not None)
    if stages is not None and _e_entry(result, run):
        result = _run_e(result, run, catalog=catalog, settings=settings, stages=stages,
                        captures_root=captures_root, clock=clock)
    elif stages is None and request.out is not None and _e_entry(result, run):
        result = _emit_only(result, run, catalog=catalog, settings=settings, clock=clock)
    if captures_root is not None and result.exit_code == EXIT_STOP and (result.e is None or not result.e.ran):
        bundle = _write_bundle(result, run, captures_root, clock, settings)
        result = replace(result, bundle=bundle, notices=tuple(dict.fromkeys(run.notices)))
    return result


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


def _finish(run: _Run, *, stratum: Stratum, ok: bool, reason: str | None, detail: str = "",
            out: Path | None = None, compose_text: str | None = None, emitted: bool = False,
            caveat: bool = False, sub_reason: str | None = None) -> PullResult:
    return PullResult(
        ok=ok, exit_code=exit_code_for(ok, reason), path=run.path, stratum=stratum, reason=reason,
        slug=run.slug, profile_like=run.request.profile_like, detail=detail, sub_reason=sub_reason, c0=run.c0,
        confidence=run.confidence, raw_verdict=run.raw_verdict, terminal=run.terminal, fit=run.fit,
        out=out, compose_text=compose_text, emitted=emitted, notices=tuple(dict.fromkeys(run.notices)),
        caveat=CAVEAT if caveat else None, hardware=run.hardware, suggestions=tuple(run.suggestions))


def _stop(run: _Run, stop: Stop) -> PullResult:
    """A stop as a result: ``reason`` is the printed token; a stratum-1 stop's case, which its
    token leaves out, is ``sub_reason``."""
    return _finish(run, stratum=stop.stratum, ok=False, reason=stop.token,
                   detail=str(stop.detail.get("message", "")),
                   sub_reason=stop.sub_reason if stop.stratum is Stratum.DERIVER else None)


def _evaluate(run: _Run, *, catalog: "Catalog", settings: "Settings", derive, detect, free_bytes,
              dry_run_compose, predict, gpu_set, e_enabled: bool = False) -> PullResult:
    request = run.request
    # Stratum 1: derivation (a Hub outage raises; it is not a verdict)
    derive = derive or _default_derive
    derived = derive(request.source, settings, catalog)
    if isinstance(derived, Stop):
        return _stop(run, derived)
    spec: "ModelSpec" = derived
    run.spec = spec
    run.slug = spec.ref or request.source
    curated = spec.curated
    run.confidence = spec.confidence
    run.path = select_path(request, curated is not None)
    if request.dry_run and request.out is not None:
        run.notices.append(Notice(NoticeCode.DRY_RUN_IGNORES_OUT,
                                  "--dry-run: nothing is written, downloaded or started; --out is ignored"))

    # Stratum 2: --profile-like
    stop = gates.stratum2_profile_like(
        request.profile_like, catalog, path=run.path,
        curated_model=curated.model_id if curated else None,
        curated_variant=curated.variant_id if curated else None)
    if stop is not None:
        return _stop(run, stop)
    profile: "Profile" = catalog.profiles[request.profile_like]
    engine: "Engine" = catalog.engines[profile.engine]
    run.profile, run.engine = profile, engine
    if not profile.launchable:
        run.notices.append(Notice(NoticeCode.PROFILE_NOT_LAUNCHABLE,
                                  f"profile {profile.key} has status {profile.status!r}"
                                  + (f" ({profile.status_note})" if profile.status_note else "")
                                  + "; upstream does not launch it by default",
                                  {"profile": profile.key, "status": profile.status}))

    # Stratum 3: [C0]
    if gpu_set is None and request.gpus:
        gpu_set = _parse_gpus(request.gpus, catalog)
    detected = None
    if gpu_set is None or (gpu_set.sm is None and request.hardware_sm is None):
        detected = detect() if detect is not None else _default_detect(settings)
    reference = catalog.gpus.get(profile.reference_gpu) if profile.reference_gpu else None
    hw = gates.resolve_hardware(tp=profile.tp, hardware_sm=request.hardware_sm, gpu_set=gpu_set,
                                detected=detected, reference_gpu=reference)
    run.hardware = hw
    run.notices.extend(hw.notices)
    arch = spec.arch
    variant = _curated_variant(catalog, curated)
    weight_format = variant.format if variant is not None else ("gguf" if spec.gguf_files and
                                                                not spec.weight_files else None)
    inputs = gates.C0Inputs(profile=profile, engine=engine, architecture=arch.architecture,
                            auto_map=bool(arch.auto_map or spec.requires_trust_remote_code),
                            curated_model=curated.model_id if curated else None, hardware=hw,
                            num_attention_heads=arch.num_attention_heads or None,
                            num_key_value_heads=arch.num_key_value_heads or None,
                            weight_format=weight_format)
    findings = gates.c0_findings(inputs, catalog)
    given = request.given
    if run.path == "A":
        given = given - {BYPASS_EXPERIMENTAL_ARCH}   # --experimental-arch is Path B only
        if request.experimental_arch:
            run.notices.append(Notice(NoticeCode.PATH_A_IGNORES_EXPERIMENTAL_ARCH,
                                      "--experimental-arch applies to Path B only; ignored on Path A"))
    for finding in findings:
        stop = finding.stop()
        if bypassed(stop, given):
            flags = sorted(finding.bypassable_by)
            run.notices.append(Notice(NoticeCode.BYPASSED,
                                      f"[C0] {finding.token} bypassed by {' '.join(flags)}: "
                                      "an unvalidated runtime; the verdict below still needs acceptance",
                                      {"token": finding.token, "flags": tuple(flags)}))
            continue
        run.c0 = finding
        return _stop(run, stop)
    run.c0 = findings[0] if findings else gates.c0_engine_support(inputs, catalog)

    # Stratum 4: [C2a] disk
    local = spec.source == "local"
    footprint = variant.size_bytes if variant is not None and variant.size_bytes else spec.footprint_bytes
    free = None if local else (free_bytes or _default_free_bytes)(Path(settings.hf_home))
    disk = gates.c2a_disk(footprint_bytes=footprint, free_bytes=free, local=local,
                          where=str(settings.hf_home))
    stop = disk.stop()
    if stop is not None:
        return _stop(run, stop)

    # Stratum 5: eligibility (what the fit engine cannot model)
    stop = gates.eligibility(arch.unpriceable_reason)
    if stop is not None:
        return _stop(run, stop)

    # [B]: the fit on the GPUs in use
    predict = predict or _default_predict
    shape = _shape(run, profile, catalog, arch, path_a=run.path == "A")
    weights = variant.size_bytes if variant is not None and variant.size_bytes else spec.weights_bytes
    selected = hw.selected_memory(shape.tp)
    try:
        fit = predict(arch, weights_bytes=int(weights), gpu_memory_bytes=selected, shape=shape,
                      confidence=run.confidence)
    except UnpriceableModel as exc:  # only the fit engine's refusal is a verdict
        return _stop(run, Stop(Stratum.ELIGIBILITY, Reason.NO_FIT_MODEL,
                               detail={"message": f"the fit engine cannot price this model: {exc}"}))
    run.fit = fit
    run.raw_verdict = fit.raw_verdict
    if fit.raw_verdict == "wont-fit":
        run.suggestions.extend(_closest_fit(run, fit, predict, arch, int(weights), shape, catalog))

    # [C1]
    c1 = gates.c1_terminal(run.confidence, fit.raw_verdict, request.given)
    run.terminal = c1.terminal.value
    if c1.terminal is Terminal.HARD_BLOCK:
        return _finish(run, stratum=Stratum.DECIDED, ok=False, reason=c1.reason,
                       detail=f"[C1] {run.confidence} x {fit.raw_verdict}: {c1.note}")
    if not c1.satisfied:
        return _finish(run, stratum=Stratum.DECIDED, ok=False, reason=c1.reason,
                       detail=f"[C1] {run.confidence} x {fit.raw_verdict}: {c1.note}; "
                              f"re-run with {c1.needs} to accept")
    if c1.terminal is Terminal.OVERRIDE_ACCEPTED:
        run.notices.append(Notice(NoticeCode.OVERRIDE_ACCEPTED,
                                  "override accepted: the model is predicted NOT to fit; going ahead is a "
                                  "calibration signal, not a validated fit"))
    detail = f"[C1] {run.confidence} x {fit.raw_verdict} -> {c1.terminal.value} ({c1.note})"

    run.trust_remote_code = request.trust_remote_code and any(
        f.state is gates.C0State.NEEDS_TRC_ACK for f in findings)
    if run.path == "B":
        if curated is None and not request.dry_run:
            if not e_enabled and request.out is None:
                run.notices.append(Notice(NoticeCode.NO_DOWNLOAD_YET,
                                          "add --out FILE to write a patchless compose for this repo; this "
                                          "call does not download or boot it"))
        elif curated is not None and request.out is None and not request.dry_run:
            run.notices.append(Notice(NoticeCode.CURATED_NEEDS_OUT,
                                      f"curated repo: add --out FILE to write its compose ({profile.key})",
                                      {"profile": profile.key}))
        return _finish(run, stratum=Stratum.DECIDED, ok=True, reason=None, detail=detail, caveat=True)

    # Path A: stratum 6 dry-run, then write --out
    if fit.raw_verdict == "fits-constrained":
        run.notices.append(Notice(NoticeCode.EFFECTIVE_CAP, EFFECTIVE_CAP_NOTICE,
                                  {"profile": profile.key, "max_num_seqs": profile.max_num_seqs,
                                   "max_concurrency": fit.max_concurrency, "rewritten": ()}))
        fitted = fit.max_model_len_fit
        if fitted:
            run.notices.append(Notice(NoticeCode.RIG_FITTED_OVERRIDE,
                                      f"rig-fitted override, if you want full-length requests to fit: "
                                      f"MAX_MODEL_LEN={fitted}", {"max_model_len": int(fitted)}))
    out = Path(request.out) if request.out is not None else None
    if dry_run_compose is not None:
        outcome = dry_run_compose(profile.key, catalog)
    else:
        outcome = _default_dry_run(profile.key, catalog, out_name=str(out) if out is not None else None)
    if outcome.refusal is not None:
        why = f": {outcome.detail}" if outcome.detail else ""
        return _stop(run, Stop(Stratum.COMPOSE_DRY_RUN, Reason.D_REFUSED, sub_reason=outcome.refusal,
                               detail={"message": f"the compose generator refused ({outcome.refusal}){why}"}))
    if not outcome.text:
        raise RuntimeError("the compose dry-run returned neither text nor a refusal")
    text = outcome.text
    # pull words its own project-directory notice below, naming the --out file
    run.notices.extend(n for n in outcome.notices if n.code != NoticeCode.PROJECT_DIRECTORY.value)
    if out is None:  # explicit path="A" without --out: decided, nothing to write
        return _finish(run, stratum=Stratum.DECIDED, ok=True, reason=None, detail=detail,
                       compose_text=text, caveat=True)
    write_output_text(out, text, force=request.force)
    project_dir = f"<club-3090 checkout>/{posixpath.dirname(profile.compose_path)}"
    run.notices.append(Notice(NoticeCode.PROJECT_DIRECTORY,
                              f"compose written; its relative mounts resolve from the shipped compose's folder, "
                              f"so start it with: docker compose --project-directory {project_dir} -f {out} up -d",
                              {"project_directory": project_dir, "out": str(out)}))
    return _finish(run, stratum=Stratum.DECIDED, ok=True, reason=None, detail=detail, out=out,
                   compose_text=text, emitted=True, caveat=True)


# --------------------------------------------------------------------------------------------
# Pull-Emit-Derived [E]
# --------------------------------------------------------------------------------------------

def _e_entry(result: PullResult, run: _Run) -> bool:
    """SYSTEM.md section 12's entry: non-curated, no --dry-run, Path B, terminal satisfied."""
    return (result.ok and result.path == "B" and result.stratum == Stratum.DECIDED and result.fit is not None
            and run.spec is not None and run.spec.curated is None and not run.request.dry_run)


def _run_e(result: PullResult, run: _Run, *, catalog: "Catalog", settings: "Settings", stages: "EStages",
           captures_root: Path | None, clock: Callable[[], datetime]) -> PullResult:
    from club3090.pipeline import emit_derived as emit

    gate, manifest = _bundle_fields(result, run)
    gate.pop("abort_reason", None)
    report = emit.run(spec=run.spec, profile=run.profile, catalog=catalog, settings=settings,
                      hardware=run.hardware, fit=run.fit, terminal=run.terminal,
                      trust_remote_code=run.trust_remote_code, out=run.request.out, force=run.request.force,
                      stages=stages, gate=gate, manifest_fields=manifest, captures_root=captures_root, now=clock)
    notices = tuple(dict.fromkeys((*result.notices, *report.notices)))
    if not report.ran:
        return replace(result, e=report, notices=notices)
    return replace(result, e=report, notices=notices, exit_code=EXIT_OK if report.ok else EXIT_STOP,
                   out=run.request.out if report.wrote_out else None, compose_text=report.compose_text,
                   emitted=report.compose_text is not None)


def _emit_only(result: PullResult, run: _Run, *, catalog: "Catalog", settings: "Settings",
               clock: Callable[[], datetime]) -> PullResult:
    """Library callers without [E] stages and with ``--out``: ``emit.run`` writes the derived
    compose and stops there (no download, boot or bundle). A refusal is a notice, not a verdict."""
    from club3090.pipeline import emit_derived as emit

    gate, manifest = _bundle_fields(result, run)
    gate.pop("abort_reason", None)
    report = emit.run(spec=run.spec, profile=run.profile, catalog=catalog, settings=settings,
                      hardware=run.hardware, fit=run.fit, terminal=run.terminal,
                      trust_remote_code=run.trust_remote_code, out=run.request.out, force=run.request.force,
                      stages=emit.EStages(emit_only=True), gate=gate, manifest_fields=manifest,
                      captures_root=None, now=clock)
    notices = [*result.notices, *report.notices]
    if report.ran and report.ok:
        notices.append(Notice(NoticeCode.EMIT_ONLY,
                              "derived compose written; this call does not download the weights it mounts "
                              "(the CLI's [E] stages do)", {"out": str(run.request.out)}))
        return replace(result, notices=tuple(dict.fromkeys(notices)), out=run.request.out,
                       compose_text=report.compose_text, emitted=True)
    if report.ran:
        notices.append(Notice(NoticeCode.EMIT_REFUSED,
                              f"no compose written: {report.failure}"
                              + (f" ({report.detail})" if report.detail else ""),
                              {"failure": report.failure, "detail": report.detail}))
    return replace(result, notices=tuple(dict.fromkeys(notices)))


# --------------------------------------------------------------------------------------------
# Fit helpers
# --------------------------------------------------------------------------------------------

def _shape(run: _Run, profile: "Profile", catalog: "Catalog", arch: Any, *, path_a: bool) -> ServeShape:
    """The ServeShape the gate prices: ``serving.profile_shape`` (the one owner of that rule, so
    ``pull`` and ``kv-calc --profile`` agree), the drafter on Path A only, SYSTEM.md section 9's
    mem_util default where the profile sets none, and on Path B the context capped at the
    model's own maximum."""
    model_max = arch.max_position_embeddings
    max_ctx = profile.max_model_len
    if not path_a and run.spec.curated is None and model_max and max_ctx > model_max:
        run.notices.append(Notice(NoticeCode.CONTEXT_CAPPED_TO_MODEL,
                                  f"{profile.key} asks for {max_ctx} tokens of context but the model supports "
                                  f"{model_max}; priced at {model_max}",
                                  {"profile": profile.key, "max_ctx": max_ctx, "model_max": int(model_max)}))
        max_ctx = model_max
    hw = run.hardware
    return profile_shape(
        profile, catalog, drafter=path_a,
        mem_util=UNSET_MEM_UTIL_DEFAULT if profile.mem_util is None else None,
        max_model_len=max_ctx if max_ctx != profile.max_model_len else None,
        device_name=hw.names[0] if hw is not None and hw.names else None)


def _closest_fit(run: _Run, fit: Any, predict, arch: Any, weights: int, shape: ServeShape,
                 catalog: "Catalog") -> list[str]:
    """On wont-fit: the largest context that fits, and whether another KV format or TP would."""
    out: list[str] = []
    fitted = fit.max_model_len_fit
    if fitted:
        out.append(f"largest context that fits this rig: {fitted} tokens (MAX_MODEL_LEN={fitted})")
    elif fitted == 0:
        out.append("no context length fits: weights and runtime overheads leave no room for the KV cache")
    hw = run.hardware
    engine = run.engine
    if hw is None or hw.sm is None:
        return out

    def try_shape(memory: tuple[int, ...] | None = None, **changes: Any) -> Any:
        alt = replace(shape, **changes)
        try:
            return predict(arch, weights_bytes=weights, gpu_memory_bytes=memory or hw.selected_memory(alt.tp),
                           shape=alt, confidence=run.confidence)
        except UnpriceableModel:
            return None

    for kv_id in engine.supported_kv_formats:
        kv = catalog.kv_formats.get(kv_id)
        if kv_id == shape.kv_cache_dtype or kv is None or not kv.emittable or "vllm" not in kv.engines:
            continue
        floor, ceiling = catalog.kv_sm_window(kv_id)
        if (floor is not None and hw.sm < floor) or (ceiling is not None and hw.sm > ceiling):
            continue
        alt = try_shape(kv_cache_dtype=kv_id)
        if alt is not None and alt.raw_verdict != "wont-fit":
            out.append(f"KV format {kv_id} would fit ({alt.raw_verdict}, "
                       f"{alt.kv_cache_tokens} KV tokens); choose a profile with it")
            break
    row = gates.find_arch_row(catalog, curated_model=run.spec.curated.model_id if run.spec.curated else None,
                              architecture=arch.architecture)
    divisors = row.tp_divisors if row is not None and row.tp_divisors else (1, 2, 4, 8)
    for tp in sorted(d for d in divisors if d > shape.tp):
        if gates.tp_geometry_problem(tp, arch.num_attention_heads, arch.num_key_value_heads):
            continue
        more = tp > hw.count
        alt = try_shape(memory=(min(hw.memory_bytes),) * tp if more else None, tp=tp)
        if alt is not None and alt.raw_verdict != "wont-fit":
            where = (f"{tp} GPUs like yours (you have {hw.count})" if more
                     else f"{tp} of your GPUs")
            out.append(f"tp={tp} would fit on {where} ({alt.raw_verdict}); choose a tp={tp} profile")
            break
    return out


# --------------------------------------------------------------------------------------------
# Defaults for the injected edges
# --------------------------------------------------------------------------------------------

def _default_derive(source: str, settings: "Settings", catalog: "Catalog") -> Any:
    from club3090.edges.derive import derive
    return derive(source, settings, catalog)


def _default_detect(settings: "Settings") -> Any:
    from club3090.edges.gpu_probe import detect
    return detect(enabled=settings.gpu_detect)


def _default_free_bytes(path: Path) -> int | None:
    from club3090.edges.disk import free_bytes_at
    return free_bytes_at(path)


def _default_dry_run(profile_key: str, catalog: "Catalog", *, out_name: str | None = None) -> Any:
    # compose.dry_run is generate() without the output name; generate() lets the header's run
    # line name the real --out file. Neither writes anything.
    from club3090.compose.generate import generate
    return generate(profile_key, catalog, out_name=out_name)


def _default_predict(*args: Any, **kwargs: Any) -> Any:
    from club3090.fit.memory import predict
    return predict(*args, **kwargs)


def _parse_gpus(spec: str, catalog: "Catalog") -> Any:
    from club3090.rig.gpus import parse_gpus
    return parse_gpus(spec, catalog)


def _curated_variant(catalog: "Catalog", curated: Any) -> Any:
    if curated is None:
        return None
    model = catalog.models.get(curated.model_id)
    return model.weights.get(curated.variant_id) if model is not None else None


# --------------------------------------------------------------------------------------------
# Capture bundle on hard stops
# --------------------------------------------------------------------------------------------

def _bundle_fields(result: PullResult, run: _Run) -> tuple[dict[str, Any], dict[str, Any]]:
    """The gate point and the manifest fields a bundle records for this result."""
    profile, engine, spec = run.profile, run.engine, run.spec
    hw = result.hardware
    fit_json = result.fit.to_json() if result.fit is not None else None
    gate = {
        "abort_reason": result.reason,
        "detail": {"message": result.detail, **({"sub_reason": result.sub_reason} if result.sub_reason else {})},
        "stratum": int(result.stratum),
        "stratum_name": result.stratum_name,
        "path": result.path,
        "c0": result.c0.to_json() if result.c0 is not None else None,
        "notices": [n.text for n in result.notices],
        "confidence": result.confidence,
        "raw_verdict": result.raw_verdict,
        "terminal": result.terminal,
        "profile_like": result.profile_like,
        "hardware_sm": str(hw.sm) if hw is not None and hw.sm is not None else None,
        "predicted_b_breakdown": fit_json,
    }
    curated = spec.curated if spec is not None else None
    arch = spec.arch if spec is not None else None
    quant = spec.quantization if spec is not None else None
    past_c0 = result.stratum == Stratum.DECIDED or result.stratum > Stratum.ENGINE_SUPPORT
    in_use = (list(zip(hw.names, hw.selected_memory(profile.tp if profile is not None else 1)))
              if hw is not None and len(hw.names) == len(hw.memory_bytes) else [])
    manifest = {
        "model": curated.model_id if curated else result.slug,
        "model_id": result.slug,
        "quant_label": (curated.variant_id if curated else
                        (f"{quant.method}-{quant.bits}" if quant else (spec.compute_dtype if spec else None))),
        "arch_family": (arch.architecture if arch is not None else None) or None,
        "engine_pin": engine.pin if engine is not None and past_c0 else None,
        "engine_version": engine.vllm_version if engine is not None and past_c0 else None,
        "kv_format": profile.kv_format if profile is not None and past_c0 else None,
        "selected_ctx": profile.max_model_len if profile is not None and past_c0 else None,
        **(capture.topology_fields(in_use) if past_c0 else {}),
    }
    return gate, manifest


def _write_bundle(result: PullResult, run: _Run, root: Path, clock: Callable[[], datetime],
                  settings: "Settings") -> Path | None:
    gate, manifest = _bundle_fields(result, run)
    try:
        return capture.write_gate_bundle(root, slug=result.slug, gate=gate, manifest_fields=manifest,
                                         now=clock(), secrets=settings.redaction_secrets)
    except OSError as exc:
        run.notices.append(Notice(NoticeCode.BUNDLE_WRITE_FAILED, f"could not write the gate bundle: {exc}",
                                  {"error": str(exc)}))
        return None


__all__ = ["CAVEAT", "EFFECTIVE_CAP_NOTICE", "Notice", "NoticeCode", "PullRequest", "PullResult", "evaluate", "exit_code_for",
           "select_path"]
