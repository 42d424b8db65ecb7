"""The pull gate's stages over frozen values: each takes what the gate has established so far
(``Gate``) and returns a new ``Gate``, or a ``Stop``. :func:`decide` runs them in the gate's order
(docs/DESIGN.md, the gate order) and returns the ``Verdict``.

The decisions themselves live in the pure packages (``gate.profile_match``,
``gate.engine_support``, ``gate.disk``, ``gate.eligibility``, ``gate.terminal``,
``rig.hardware``, ``fit``); what they need from outside comes from the ``Provider``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from club3090.compose.outcome import SCOPE
from club3090.fit.memory import FitResult, Unpriceable, predict
from club3090.fit.runtime import RuntimeShape
from club3090.fit.shape import profile_shape
from club3090.gate.closest_fit import closest_fit
from club3090.gate.disk import check_disk
from club3090.gate.eligibility import eligibility
from club3090.gate.engine_support import (
    EngineFinding,
    EngineInputs,
    EngineState,
    engine_findings,
    engine_support,
    find_arch_row,
    no_code_evidence,
)
from club3090.gate.flags import BYPASS_EXPERIMENTAL_ARCH
from club3090.gate.profile_match import check_profile
from club3090.gate.terminal import Terminal, terminal_for
from club3090.model.context import model_max_len
from club3090.outcome import Notice, NoticeCode, Outcome, Reason, Stop, Stratum, bypassed
from club3090.pipeline.stages import calibrated
from club3090.rig.hardware import HardwareFacts, resolve_hardware

if TYPE_CHECKING:  # pragma: no cover - typing only
    from club3090.catalog.model import Catalog, Engine, Profile, WeightVariant
    from club3090.compose.generate import ComposeOutcome
    from club3090.fit.auto_shape import ShapeChoice
    from club3090.fit.memory import ServeShape
    from club3090.model.spec import ModelSpec
    from club3090.pipeline.provider import Provider
    from club3090.pipeline.pull import PullRequest
    from club3090.rig.gpus import GpuSet

PathName = Literal["A", "B"]
ComposeStep = Callable[[str, "Catalog", "str | None"], "ComposeOutcome"]
"""Stratum 6: (profile key, catalog, --out name) -> the compose generator's outcome (pure)."""

# mem_util for a profile that sets none (the loader allows that only for llama.cpp profiles)
UNSET_MEM_UTIL_DEFAULT = 0.95
EFFECTIVE_CAP_NOTICE = (
    "known effective cap: on this hardware vLLM will serve fewer full-length requests at once than "
    "the profile asks for; the compose is emitted exactly as the profile ships it, "
    "no compose value rewritten")


@dataclass(frozen=True, slots=True)
class Gate:
    """What the gate has established so far; each stage returns a new one."""

    request: "PullRequest"
    slug: str
    spec: "ModelSpec | None" = None
    path: PathName | None = None
    profile: "Profile | None" = None
    engine: "Engine | None" = None
    variant: "WeightVariant | None" = None
    hardware: HardwareFacts | None = None
    finding: EngineFinding | None = None
    shape: "ServeShape | None" = None
    fit: FitResult | None = None
    terminal: str | None = None
    notices: tuple[Notice, ...] = ()
    suggestions: tuple[str, ...] = ()
    trust_remote_code: bool = False          # [C0] needed the ack and --trust-remote-code gave it
    choice: "ShapeChoice | None" = None      # the automatic shape, when no --profile-like was given
    shape_source: str = "profile-like"       # profile-like | curated-default | derived
    runtime: RuntimeShape | None = None      # what is launched: the profile's, or the derived shape's

    def noting(self, *notices: Notice) -> "Gate":
        return replace(self, notices=self.notices + notices)


@dataclass(frozen=True, slots=True)
class Verdict:
    """The gate's decision: a stop (``stop``), an unsatisfied terminal, or accepted."""

    gate: Gate
    stratum: Stratum
    ok: bool
    reason: str | None                       # abort token, "hard-block", or "<terminal>:needs <flag>"
    detail: str = ""
    sub_reason: str | None = None
    caveat: bool = False
    compose_text: str | None = None          # Path A: the compose the dry-run produced

    @property
    def outcome(self) -> Outcome:
        """Accepted -> OK; a terminal a flag would accept -> NEEDS_ACK; anything else -> REFUSED."""
        if self.ok:
            return Outcome.OK
        if self.gate.request.dry_run and self.reason and self.reason.startswith(Terminal.CONFIRM_PROCEED.value):
            return Outcome.OK      # --dry-run asks only the question: a fit is the answer, nothing to confirm
        if self.gate.request.dry_run and self.reason and self.reason.startswith(Terminal.OVERRIDE_ACCEPTED.value):
            return Outcome.REFUSED  # a no-fit answers the question "no", as `fits` does (exit 2, not 3)
        if self.reason and self.reason.startswith((Terminal.CONFIRM_PROCEED.value,
                                                   Terminal.OVERRIDE_ACCEPTED.value)):
            return Outcome.NEEDS_ACK
        return Outcome.REFUSED


def decide(request: "PullRequest", facts: "ModelSpec | Stop", catalog: "Catalog", gpu_set: "GpuSet | None",
           provider: "Provider", *, compose: ComposeStep, e_enabled: bool) -> Verdict:
    """The gate, stratum by stratum: each line is one entry of the gate's table of contents."""
    if request.profile_like is not None:                                    # an old (renamed) slug
        resolved = catalog.profile_key(request.profile_like)
        if resolved is not None and resolved != request.profile_like:
            request = replace(request, profile_like=resolved)
    at = Gate(request=request, slug=request.source)
    if isinstance(facts, Stop):                                            # 1 model facts
        return stopped(at, facts)
    at = route(at, facts, catalog)
    if request.profile_like is None:                                        # the automatic shape
        auto = with_auto_shape(at, catalog, gpu_set, provider)
        if isinstance(auto, Stop):
            return stopped(at, auto)
        at = auto
        request = at.request
    if at.shape_source != "derived":
        assert request.profile_like is not None
        stop = check_profile(request.profile_like, catalog, path=at.path or "B",    # 2 --profile-like
                             curated_model=facts.curated.model_id if facts.curated else None,
                             curated_variant=facts.curated.variant_id if facts.curated else None)
        if stop is not None:
            return stopped(at, stop)
        at = with_profile(at, catalog)
        at = with_hardware(at, catalog, gpu_set, provider)                  # the rig
    at, stop = check_engine(at, catalog)                                    # 3 [C0]
    disk_after_fit = request.dry_run            # a dry run answers the fit question before the disk
    if stop is None and request.downloads_here and not disk_after_fit:
        stop = disk_stop(at, provider)                                      # 4 [C2a]
    if stop is None:
        stop = eligibility(facts.arch.unpriceable_reason)                   # 5 eligibility
    if stop is not None:
        return stopped(at, stop)
    at = with_shape(at, catalog)                                            # serving shape
    priced = with_fit(at, catalog, provider.measured(), provider.receipts())  # [B] the fit
    if isinstance(priced, Stop):
        return stopped(at, priced)
    if disk_after_fit and request.downloads_here and priced.fit is not None and priced.fit.raw_verdict != "wont-fit":
        stop = disk_stop(priced, provider)                                  # 4 [C2a], after the fit
        if stop is not None:
            return stopped(priced, stop)
    return accept(priced, catalog, compose=compose, e_enabled=e_enabled)    # [C1], then 6 on Path A


def stopped(at: Gate, stop: Stop) -> Verdict:
    """A stop as a verdict: ``reason`` is the printed token; a stratum-1 stop's case is ``sub_reason``."""
    return Verdict(gate=at, stratum=stop.stratum, ok=False, reason=stop.token,
                   detail=str(stop.detail.get("message", "")),
                   sub_reason=stop.sub_reason if stop.stratum is Stratum.DERIVER else None)


def select_path(request: "PullRequest", curated: bool) -> PathName:
    """Explicit path -> --dry-run forces B -> curated hit with --out is A -> B."""
    if request.path in ("A", "B"):
        return request.path
    if request.dry_run:
        return "B"
    if curated and request.out is not None:
        return "A"
    return "B"


def route(at: Gate, spec: "ModelSpec", catalog: "Catalog") -> Gate:
    curated = spec.curated
    model = catalog.models.get(curated.model_id) if curated is not None else None
    at = replace(at, spec=spec, slug=spec.ref or at.request.source, path=select_path(at.request, curated is not None),
                 variant=model.weights.get(curated.variant_id) if model is not None and curated else None)
    if at.request.dry_run and at.request.out is not None:
        at = at.noting(Notice(NoticeCode.DRY_RUN_IGNORES_OUT,
                              "--dry-run: nothing is written, downloaded or started; --out is ignored"))
    return at


def with_auto_shape(at: Gate, catalog: "Catalog", gpu_set: "GpuSet | None", provider: "Provider") -> Gate | Stop:
    """No --profile-like: the rig first (every GPU is a candidate), then the curated default for
    its GPU count, else the shape derived from the model and the rig (``pipeline.auto_profile``),
    set directly as the gate's runtime and priced shape (no catalog profile stands in for it)."""
    from club3090.pipeline.auto_profile import automatic_shape, derived_runtime

    request, spec = at.request, at.spec
    assert spec is not None
    detected = None
    if gpu_set is None or (gpu_set.sm is None and request.hardware_sm is None):
        detected = provider.detect_gpus()
    count = gpu_set.count if gpu_set is not None else len(detected.gpus) if detected is not None else 0
    hw = resolve_hardware(tp=max(count, 1), hardware_sm=request.hardware_sm, gpu_set=gpu_set, detected=detected)
    if hw.sm is None or not hw.memory_bytes:
        return hardware_stop(hw)
    auto = automatic_shape(spec, hw, catalog, request.shape_request)     # the one shape stage (fits, kv-calc)
    key = auto.profile
    if key is not None:
        at = replace(at, request=replace(request, profile_like=key), shape_source="curated-default")
        return at.noting(Notice(NoticeCode.AUTO_SHAPE,
                                f"shape: the curated profile {key} for {hw.count} GPU(s) (upstream's default); "
                                "pass --profile-like to choose another",
                                {"source": "curated-default", "profile": key}))
    choice = auto.choice
    assert choice is not None
    candidate = choice.chosen or choice.best
    if candidate is None:
        return Stop(Stratum.ELIGIBILITY, Reason.NO_FIT_MODEL,
                    detail={"message": f"the fit engine cannot price this model: {choice.unpriceable or choice.reason}"})
    runtime = derived_runtime(choice, candidate)
    ups = "; ".join(why for _c, why in choice.runner_ups)
    at = replace(at, request=replace(request, profile_like=runtime.key), runtime=runtime,
                 engine=catalog.engines[runtime.engine], hardware=hw, choice=choice,
                 shape_source="derived").noting(*hw.notices)
    return at.noting(Notice(NoticeCode.AUTO_SHAPE,
                            f"shape: {candidate.label()} on {choice.engine} - {choice.reason}"
                            + (f"; runner-ups: {ups}" if ups else ""),
                            {"source": "derived", "reason": choice.reason,
                             "runner_ups": tuple(why for _c, why in choice.runner_ups)}))


def hardware_stop(hw: HardwareFacts) -> Stop:
    """No GPU named or detected (or a size-only --gpus): the seed's fail-closed [C0] stop, saying
    how to name the GPUs."""
    if hw.memory_source == "gpus-flag" and hw.sm is None:
        why = "--gpus gives memory sizes, not a known card: add --hardware SM (e.g. 8.6) or name the card (2x3090)"
    elif hw.sm is not None:
        why = "the GPUs' memory is unknown: add --gpus, e.g. --gpus 2x3090"
        return Stop(Stratum.ENGINE_SUPPORT, Reason.HARDWARE_VRAM_UNDETERMINED, detail={"message": why})
    else:
        why = ("no GPU detected and no --gpus given: name your GPUs, e.g. --gpus 1x3090, --gpus 2x4090 or "
               "--gpus 4xH100-80GB")
    return Stop(Stratum.ENGINE_SUPPORT, Reason.HARDWARE_SM_UNDETERMINED, detail={"message": why})


def with_profile(at: Gate, catalog: "Catalog") -> Gate:
    assert at.request.profile_like is not None
    profile = catalog.profiles[at.request.profile_like]
    at = replace(at, profile=profile, runtime=RuntimeShape.of(profile), engine=catalog.engines[profile.engine])
    if profile.launchable:
        return at
    return at.noting(Notice(NoticeCode.PROFILE_NOT_LAUNCHABLE,
                            f"profile {profile.key} has status {profile.status!r}"
                            + (f" ({profile.status_note})" if profile.status_note else "")
                            + "; upstream does not launch it by default",
                            {"profile": profile.key, "status": profile.status}))


def with_hardware(at: Gate, catalog: "Catalog", gpu_set: "GpuSet | None", provider: "Provider") -> Gate:
    """The rig: --hardware, --gpus, detection (only when those leave the SM or memory open)."""
    profile, request = at.profile, at.request
    assert profile is not None
    detected = None
    if gpu_set is None or (gpu_set.sm is None and request.hardware_sm is None):
        detected = provider.detect_gpus()
    reference = catalog.gpus.get(profile.reference_gpu) if profile.reference_gpu else None
    hw = resolve_hardware(tp=profile.tp, hardware_sm=request.hardware_sm, gpu_set=gpu_set,
                          detected=detected, reference_gpu=reference)
    return replace(at, hardware=hw).noting(*hw.notices)


def check_engine(at: Gate, catalog: "Catalog") -> tuple[Gate, Stop | None]:
    """[C0]: the first finding no flag clears stops; each cleared one is a ``bypassed`` notice."""
    spec, runtime, engine, hw, request = at.spec, at.runtime, at.engine, at.hardware, at.request
    assert spec is not None and runtime is not None and engine is not None and hw is not None
    arch, curated, variant = spec.arch, spec.curated, at.variant
    weight_format = variant.format if variant is not None else (
        "gguf" if spec.gguf_files and not spec.weight_files else None)
    inputs = EngineInputs(runtime=runtime, engine=engine, architecture=arch.architecture,
                          auto_map=bool(arch.auto_map or spec.requires_trust_remote_code),
                          curated_model=curated.model_id if curated else None, hardware=hw,
                          num_attention_heads=arch.num_attention_heads or None,
                          num_key_value_heads=arch.num_key_value_heads or None, weight_format=weight_format,
                          python_files=spec.python_files)
    findings = engine_findings(inputs, catalog)
    row = find_arch_row(catalog, curated_model=inputs.curated_model, architecture=inputs.architecture)
    evidence = no_code_evidence(inputs)
    if row is not None and row.trust_remote_code == "unverified" and evidence is not None:
        at = at.noting(Notice(NoticeCode.TRC_NOT_NEEDED,
                              f"trust-remote-code not needed: arch row {row.arch} says unverified, and {evidence}",
                              {"evidence": evidence, "arch": row.arch}))
    if arch.class_defaults:
        at = at.noting(Notice(NoticeCode.CLASS_DEFAULTS, next(n for n in arch.notes if "class defaults" in n),
                              {"keys": arch.class_defaults}))
    given = request.given
    if at.path == "A":
        given = given - {BYPASS_EXPERIMENTAL_ARCH}   # --experimental-arch is Path B only
        if request.experimental_arch:
            at = at.noting(Notice(NoticeCode.PATH_A_IGNORES_EXPERIMENTAL_ARCH,
                                  "--experimental-arch applies to Path B only; ignored on Path A"))
    for finding in findings:
        stop = finding.stop()
        if not bypassed(stop, given):
            return replace(at, finding=finding), stop
        flags = sorted(finding.bypassable_by)
        at = at.noting(Notice(NoticeCode.BYPASSED,
                              f"[C0] {finding.token} bypassed by {' '.join(flags)}: "
                              "an unvalidated runtime; the verdict below still needs acceptance",
                              {"token": finding.token, "flags": tuple(flags)}))
    trc = request.trust_remote_code and any(f.state is EngineState.NEEDS_TRC_ACK for f in findings)
    return replace(at, finding=findings[0] if findings else engine_support(inputs, catalog),
                   trust_remote_code=trc), None


def disk_stop(at: Gate, provider: "Provider") -> Stop | None:
    """[C2a]: the download (x 1.2) must fit where the HF cache is; a local folder downloads nothing."""
    spec, variant = at.spec, at.variant
    assert spec is not None
    local = spec.source == "local"
    hf_home, cache = Path(provider.settings.hf_home), Path(provider.settings.hub_cache)
    # named as HF_HOME unless $HF_HUB_CACHE moved the cache elsewhere
    where = hf_home if hf_home in (cache, *cache.parents) else cache
    footprint = variant.size_bytes if variant is not None and variant.size_bytes else spec.footprint_bytes
    free = None if local else provider.free_bytes(cache)
    if footprint and not local and spec.source != "catalog":
        # files already complete in the HF cache at this commit are not downloaded again
        footprint = max(0, int(footprint) - provider.cached_bytes(spec.ref, spec.commit, spec.download_files))
    return check_disk(footprint_bytes=footprint, free_bytes=free, local=local, where=str(where)).stop()


def with_shape(at: Gate, catalog: "Catalog") -> Gate:
    """The ServeShape the gate prices: the automatic shape's own ``ServeShape`` when it was derived
    (``fits`` and ``kv-calc`` price the same value), else ``fit.shape.profile_shape`` (so ``pull``
    and ``kv-calc --profile`` agree), the drafter on Path A only, the mem_util default where the profile sets
    none, and on Path B (non-curated) the context capped at the model's own maximum."""
    spec, profile, hw = at.spec, at.profile, at.hardware
    assert spec is not None
    pick = (at.choice.chosen or at.choice.best) if at.choice is not None and at.shape_source == "derived" else None
    if pick is not None:        # the automatic shape is priced as chosen
        return replace(at, shape=replace(pick.shape, device_name=hw.names[0] if hw is not None and hw.names
                                         else pick.shape.device_name))
    assert profile is not None
    model_max = model_max_len(spec.arch)
    max_model_len = profile.max_model_len
    if at.path != "A" and spec.curated is None and model_max and max_model_len > model_max:
        at = at.noting(Notice(NoticeCode.CONTEXT_CAPPED_TO_MODEL,
                              f"{profile.key} asks for {max_model_len} tokens of context but the model supports "
                              f"{model_max}; priced at {model_max}",
                              {"profile": profile.key, "max_model_len": max_model_len, "model_max": int(model_max)}))
        max_model_len = model_max
    shape = profile_shape(profile, catalog, drafter=at.path == "A",
                          mem_util=UNSET_MEM_UTIL_DEFAULT if profile.mem_util is None else None,
                          max_model_len=max_model_len if max_model_len != profile.max_model_len else None,
                          device_name=hw.names[0] if hw is not None and hw.names else None)
    return replace(at, shape=shape)


def with_fit(at: Gate, catalog: "Catalog", measured: "Sequence[Mapping[str, Any]]" = (),
             receipts: "Sequence[Mapping[str, Any]]" = ()) -> Gate | Stop:
    """[B]: the fit on the GPUs in use; an unpriceable shape is a stratum-5 stop. A shape this
    machine has measured (``measured``: promoted receipts) is priced from the measurement, with
    confidence ``exact``; a near shape (``receipts``) is corrected by their measured residual, the
    gate's confidence unchanged (``stages.calibrated``). On wont-fit, the closest fits (a shorter context, another KV format, more
    GPUs) become suggestions."""
    spec, variant, shape, hw = at.spec, at.variant, at.shape, at.hardware
    assert spec is not None and shape is not None and hw is not None
    weights = int(variant.size_bytes if variant is not None and variant.size_bytes else spec.weights_bytes or 0)
    fit = predict(spec.arch, weights_bytes=weights, gpu_memory_bytes=hw.selected_memory(shape.tp * shape.pp), shape=shape,
                  confidence=spec.confidence)
    if isinstance(fit, Unpriceable):
        return Stop(Stratum.ELIGIBILITY, Reason.NO_FIT_MODEL,
                    detail={"message": f"the fit engine cannot price this model: {fit.reason}"})
    here = calibrated(fit, spec, shape, hw.selected_memory(shape.tp * shape.pp), catalog, measured, receipts,
                      profile=at.profile.key if at.profile is not None else None)
    if here is not None:
        fit, spec, notice = here
        at = replace(at, spec=spec).noting(notice)
    at = replace(at, fit=fit)
    if fit.raw_verdict != "wont-fit":
        return at
    engine = at.engine
    assert engine is not None
    return replace(at, suggestions=closest_fit(fit, spec, weights, shape, hw, engine, catalog))


def accept(at: Gate, catalog: "Catalog", *, compose: ComposeStep, e_enabled: bool) -> Verdict:
    """[C1] the terminal, then on Path A stratum 6, the compose dry-run."""
    spec, runtime, fit, request = at.spec, at.runtime, at.fit, at.request
    assert spec is not None and runtime is not None and fit is not None
    confidence = spec.confidence
    c1 = terminal_for(confidence, fit.raw_verdict, request.given)
    at = replace(at, terminal=c1.terminal.value)
    cell = f"[C1] {confidence} x {fit.raw_verdict}"
    if c1.terminal is Terminal.HARD_BLOCK:
        return Verdict(at, Stratum.DECIDED, ok=False, reason=c1.reason, detail=f"{cell}: {c1.note}")
    if not c1.satisfied:
        return Verdict(at, Stratum.DECIDED, ok=False, reason=c1.reason,
                       detail=f"{cell}: {c1.note}; re-run with {c1.needs} to accept")
    if c1.terminal is Terminal.OVERRIDE_ACCEPTED:
        at = at.noting(Notice(NoticeCode.OVERRIDE_ACCEPTED,
                              "override accepted: the model is predicted NOT to fit; going ahead is a "
                              "calibration signal, not a validated fit"))
    detail = f"{cell} -> {c1.terminal.value} ({c1.note})"
    if at.path == "B":
        return Verdict(path_b_notices(at, e_enabled), Stratum.DECIDED, ok=True, reason=None, detail=detail,
                       caveat=True)
    if fit.raw_verdict == "fits-constrained":
        at = at.noting(Notice(NoticeCode.EFFECTIVE_CAP, EFFECTIVE_CAP_NOTICE,
                              {"profile": runtime.key, "max_num_seqs": runtime.max_num_seqs,
                               "max_concurrency": fit.max_concurrency, "rewritten": ()}))
        if fit.max_model_len_fit:
            at = at.noting(Notice(NoticeCode.RIG_FITTED_OVERRIDE,
                                  f"rig-fitted override, if you want full-length requests to fit: "
                                  f"MAX_MODEL_LEN={fit.max_model_len_fit}",
                                  {"max_model_len": int(fit.max_model_len_fit)}))
    if at.profile is None:      # the derived shape: no shipped compose to replay
        return stopped(at, Stop(Stratum.COMPOSE_DRY_RUN, Reason.D_REFUSED, sub_reason=SCOPE,
                                detail={"message": f"the compose generator refused ({SCOPE}): no curated profile "
                                        f"of this model is sized for this rig and the derived shape has no shipped "
                                        "compose to replay; pass --profile-like KEY (`club3090 profiles`) to write "
                                        "a curated one"}))
    outcome = compose(runtime.key, catalog, str(request.out) if request.out is not None else None)
    if outcome.refusal is not None:
        why = f": {outcome.detail}" if outcome.detail else ""
        return stopped(at, Stop(Stratum.COMPOSE_DRY_RUN, Reason.D_REFUSED, sub_reason=outcome.refusal,
                                detail={"message": f"the compose generator refused ({outcome.refusal}){why}"}))
    if not outcome.text:
        raise RuntimeError("the compose dry-run returned neither text nor a refusal")
    # pull words its own project-directory notice, naming the --out file
    at = at.noting(*(n for n in outcome.notices if n.code != NoticeCode.PROJECT_DIRECTORY.value))
    return Verdict(at, Stratum.DECIDED, ok=True, reason=None, detail=detail, caveat=True,
                   compose_text=outcome.text)


def path_b_notices(at: Gate, e_enabled: bool) -> Gate:
    request, spec, runtime = at.request, at.spec, at.runtime
    assert spec is not None and runtime is not None
    if request.dry_run or request.out is not None:
        return at
    if spec.curated is None:
        if e_enabled:
            return at
        return at.noting(Notice(NoticeCode.NO_DOWNLOAD_YET,
                                "add --out FILE to write a patchless compose for this repo; this "
                                "call does not download or boot it"))
    return at.noting(Notice(NoticeCode.CURATED_NEEDS_OUT,
                            f"curated repo: add --out FILE to write its compose ({runtime.key})",
                            {"profile": runtime.key}))

