"""The pull gate's orchestration (SYSTEM.md sections 1-10): paths A and B, strata 1-6 in order,
the fit verdict, the [C1] terminal, the Path-A compose dry-run and emit.

``evaluate`` is the one entry point. Every side effect is a parameter: derivation (Hub or
folder), GPU detection, free disk space, the compose dry-run, the clock and the capture-bundle
root. The decisions themselves live in ``club3090.gates`` and ``club3090.memory``.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from club3090 import gates
from club3090.gates import (BYPASS_EXPERIMENTAL_ARCH, C0Result, HardwareFacts, Terminal)
from club3090.outcome import STRATUM_NAMES, Reason, Stop, Stratum, bypassed

if TYPE_CHECKING:  # pragma: no cover
    from club3090.catalog.model import Catalog, Engine, Profile
    from club3090.settings import Settings
    from club3090.spec import ModelSpec

EXIT_OK, EXIT_STOP, EXIT_NEEDS_FLAG = 0, 2, 3
DEFAULT_KV_FORMAT = "fp8_e5m2"
DEFAULT_MAX_CTX = 131072
DEFAULT_MEM_UTIL = 0.95

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
    c0: C0Result | None = None
    confidence: str | None = None
    raw_verdict: str | None = None
    terminal: str | None = None
    fit: Any = None                          # memory.FitResult
    out: Path | None = None                  # the compose written (Path A)
    compose_text: str | None = None
    emitted: bool = False
    notices: tuple[str, ...] = ()
    caveat: str | None = None
    hardware: HardwareFacts | None = None
    bundle: Path | None = None
    suggestions: tuple[str, ...] = ()

    @property
    def stratum_name(self) -> str:
        return STRATUM_NAMES[self.stratum]

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
        fit = self.fit.to_json() if self.fit is not None and hasattr(self.fit, "to_json") else None
        return {
            "ok": self.ok,
            "exit_code": self.exit_code,
            "path": self.path,
            "stratum": int(self.stratum),
            "stratum_name": self.stratum_name,
            "reason": self.reason,
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
            "notices": list(self.notices),
            "suggestions": list(self.suggestions),
            "caveat": self.caveat,
            "hardware": _hardware_json(self.hardware),
            "bundle": str(self.bundle) if self.bundle is not None else None,
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
    notices: list[str] = field(default_factory=list)
    suggestions: list[str] = field(default_factory=list)
    slug: str = ""
    spec: Any = None
    profile: Any = None
    engine: Any = None


def evaluate(request: PullRequest, *, catalog: "Catalog", settings: "Settings",
             derive: Callable[..., Any] | None = None,
             detect: Callable[[], Any] | None = None,
             free_bytes: Callable[[Path], int | None] | None = None,
             dry_run_compose: Callable[..., Any] | None = None,
             clock: Callable[[], datetime] | None = None,
             captures_root: Path | None = None,
             predict: Callable[..., Any] | None = None,
             gpu_set: Any = None) -> PullResult:
    """Run the gate for one request and return the decision as a value.

    Tool failures (Hub unreachable, an invalid catalog) propagate as exceptions; every verdict,
    including every refusal, is a PullResult. On every hard stop a redacted gate bundle is
    written under ``captures_root`` when one is given.
    """
    run = _Run(request=request, slug=request.source)
    result = _evaluate(run, catalog=catalog, settings=settings, derive=derive, detect=detect,
                       free_bytes=free_bytes, dry_run_compose=dry_run_compose, predict=predict,
                       gpu_set=gpu_set)
    if captures_root is not None and result.exit_code == EXIT_STOP:
        bundle = _write_bundle(result, run, captures_root, clock or _utcnow, catalog)
        result = replace(result, bundle=bundle, notices=tuple(dict.fromkeys(run.notices)))
    return result


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


def _finish(run: _Run, *, stratum: Stratum, ok: bool, reason: str | None, detail: str = "",
            out: Path | None = None, compose_text: str | None = None, emitted: bool = False,
            caveat: bool = False) -> PullResult:
    return PullResult(
        ok=ok, exit_code=exit_code_for(ok, reason), path=run.path, stratum=stratum, reason=reason,
        slug=run.slug, profile_like=run.request.profile_like, detail=detail, c0=run.c0,
        confidence=run.confidence, raw_verdict=run.raw_verdict, terminal=run.terminal, fit=run.fit,
        out=out, compose_text=compose_text, emitted=emitted, notices=tuple(dict.fromkeys(run.notices)),
        caveat=CAVEAT if caveat else None, hardware=run.hardware, suggestions=tuple(run.suggestions))


def _stop(run: _Run, stop: Stop) -> PullResult:
    message = str(stop.detail.get("message", "")) if stop.detail else ""
    return _finish(run, stratum=stop.stratum, ok=False, reason=stop.token, detail=message)


def _evaluate(run: _Run, *, catalog: "Catalog", settings: "Settings", derive, detect, free_bytes,
              dry_run_compose, predict, gpu_set) -> PullResult:
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
        run.notices.append("--dry-run: nothing is written, downloaded or started; --out is ignored")

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
        run.notices.append(f"profile {profile.key} has status {profile.status!r}"
                           + (f" ({profile.status_note})" if profile.status_note else "")
                           + "; upstream does not launch it by default")

    # Stratum 3: [C0]
    if gpu_set is None and request.gpus:
        gpu_set = _parse_gpus(request.gpus, catalog)
    detected = None
    if gpu_set is None or (getattr(gpu_set, "sm", None) is None and request.hardware_sm is None):
        detected = (detect or _default_detect)()
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
            run.notices.append("--experimental-arch applies to Path B only; ignored on Path A")
    for finding in findings:
        stop = finding.stop()
        if bypassed(stop, given):
            run.notices.append(f"[C0] {finding.token} bypassed by {' '.join(sorted(finding.bypassable_by))}: "
                               "an unvalidated runtime; the verdict below still needs acceptance")
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
    shape_args = _shape(run, profile, engine, catalog, arch, path_a=run.path == "A")
    weights = variant.size_bytes if variant is not None and variant.size_bytes else spec.weights_bytes
    selected = hw.selected_memory(profile.tp)
    try:
        fit = predict(arch, weights_bytes=int(weights), gpu_memory_bytes=selected,
                      shape=_serve_shape(**shape_args), confidence=run.confidence)
    except Exception as exc:  # noqa: BLE001 - only the fit engine's refusal is a verdict
        if not _is_unpriceable(exc):
            raise
        return _stop(run, Stop(Stratum.ELIGIBILITY, Reason.NO_FIT_MODEL,
                               detail={"message": f"the fit engine cannot price this model: {exc}"}))
    run.fit = fit
    run.raw_verdict = fit.raw_verdict
    if fit.raw_verdict == "wont-fit":
        run.suggestions.extend(_closest_fit(run, fit, predict, arch, int(weights), shape_args, catalog))

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
        run.notices.append("override accepted: the model is predicted NOT to fit; going ahead is a "
                           "calibration signal, not a validated fit")
    detail = f"[C1] {run.confidence} x {fit.raw_verdict} -> {c1.terminal.value} ({c1.note})"

    if run.path == "B":
        if curated is None and not request.dry_run:
            if request.out is not None:
                written = _derived_emit(run, settings, catalog, findings)
                if written is not None:
                    return _finish(run, stratum=Stratum.DECIDED, ok=True, reason=None, detail=detail,
                                   out=written[0], compose_text=written[1], emitted=True, caveat=True)
            else:
                run.notices.append("add --out FILE to write a patchless compose for this repo; pull does not "
                                   "download or boot non-curated repos yet")
        elif curated is not None and request.out is None and not request.dry_run:
            run.notices.append(f"curated repo: add --out FILE to write its compose ({profile.key})")
        return _finish(run, stratum=Stratum.DECIDED, ok=True, reason=None, detail=detail, caveat=True)

    # Path A: stratum 6 dry-run, then write --out
    if fit.raw_verdict == "fits-constrained":
        run.notices.append(EFFECTIVE_CAP_NOTICE)
        fitted = getattr(fit, "max_model_len_fit", None)
        if fitted:
            run.notices.append(f"rig-fitted override, if you want full-length requests to fit: "
                               f"MAX_MODEL_LEN={fitted}")
    out = Path(request.out) if request.out is not None else None
    if dry_run_compose is not None:
        outcome = dry_run_compose(profile.key, catalog)
    else:
        outcome = _default_dry_run(profile.key, catalog, out_name=str(out) if out is not None else None)
    refusal = _refusal_token(outcome)
    if refusal is not None:
        return _stop(run, Stop(Stratum.COMPOSE_DRY_RUN, Reason.D_REFUSED, sub_reason=refusal,
                               detail={"message": _refusal_message(outcome, refusal)}))
    text = _compose_text(outcome)
    run.notices.extend(str(n) for n in (getattr(outcome, "notices", None) or ())
                       if "--project-directory" not in str(n))
    if out is None:  # explicit path="A" without --out: decided, nothing to write
        return _finish(run, stratum=Stratum.DECIDED, ok=True, reason=None, detail=detail,
                       compose_text=text, caveat=True)
    from club3090.fsutil import write_output_text
    write_output_text(out, text, force=request.force)
    project_dir = f"<club-3090 checkout>/{posixpath.dirname(profile.compose_path)}"
    run.notices.append(f"compose written; its relative mounts resolve from the shipped compose's folder, "
                       f"so start it with: docker compose --project-directory {project_dir} -f {out} up -d")
    return _finish(run, stratum=Stratum.DECIDED, ok=True, reason=None, detail=detail, out=out,
                   compose_text=text, emitted=True, caveat=True)


def _derived_emit(run: _Run, settings: "Settings", catalog: "Catalog",
                  findings: tuple[C0Result, ...]) -> tuple[Path, str] | None:
    """Path B, non-curated, satisfied: write the patchless derived compose to --out.

    This never changes the gate result; a refusal becomes a notice. The weights are not
    downloaded here: the notice says where the compose expects them.
    """
    try:
        from club3090.compose import derived_compose
    except ImportError:  # pragma: no cover - the generator ships with the package
        return None
    request, spec, hw = run.request, run.spec, run.hardware
    if hw is None or not hw.count:
        run.notices.append("gpu-topology-undetermined: no compose written")
        return None
    out = Path(request.out)
    hf_home = Path(settings.hf_home).expanduser().absolute()
    snapshot = hf_home / "club3090" / "pulls" / spec.ref
    trc_acked = any(f.state is gates.C0State.NEEDS_TRC_ACK for f in findings)
    outcome = derived_compose(spec, run.profile.key, catalog, snapshot_dir=snapshot, hf_home=hf_home,
                              max_model_len=getattr(run.fit, "max_model_len", None),
                              trust_remote_code=trc_acked and request.trust_remote_code,
                              gpu_indices=tuple(range(hw.count)), out_name=str(out))
    if not getattr(outcome, "ok", False) or not getattr(outcome, "text", None):
        run.notices.append(f"no compose written: {outcome.refusal}"
                           + (f" ({outcome.detail})" if outcome.detail else ""))
        return None
    from club3090.fsutil import write_output_text
    write_output_text(out, outcome.text, force=request.force)
    run.notices.extend(str(n) for n in getattr(outcome, "notices", ()) or ())
    run.notices.append(f"derived compose written; it serves the weights from {snapshot}, which pull does "
                       "not download yet: fetch the repo there first")
    return out, outcome.text


# --------------------------------------------------------------------------------------------
# Fit helpers
# --------------------------------------------------------------------------------------------

def _shape(run: _Run, profile: "Profile", engine: "Engine", catalog: "Catalog", arch: Any, *,
           path_a: bool) -> dict[str, Any]:
    """ServeShape arguments from the profile (Path B: shape only, no drafter)."""
    max_ctx = profile.max_ctx or arch.max_position_embeddings or DEFAULT_MAX_CTX
    model_max = arch.max_position_embeddings
    if not path_a and run.spec.curated is None and model_max and max_ctx > model_max:
        run.notices.append(f"{profile.key} asks for {max_ctx} tokens of context but the model supports "
                           f"{model_max}; priced at {model_max}")
        max_ctx = model_max
    args: dict[str, Any] = dict(tp=int(profile.tp or 1), pp=int(profile.pp or 1),
                                mem_util=profile.mem_util if profile.mem_util is not None else DEFAULT_MEM_UTIL,
                                max_model_len=int(max_ctx), max_num_seqs=int(profile.max_num_seqs or 1),
                                kv_cache_dtype=profile.kv_format or DEFAULT_KV_FORMAT,
                                vllm_version=engine.vllm_version)
    if path_a and profile.drafter:
        drafter = catalog.drafters.get(profile.drafter)
        if drafter is not None:
            args["num_speculative_tokens"] = int(drafter.n_default)
            if drafter.vram_footprint_bytes:
                args["extra_weights_bytes"] = int(drafter.vram_footprint_bytes)
    return args


def _serve_shape(**kwargs: Any) -> Any:
    from club3090.memory import ServeShape
    return ServeShape(**kwargs)


def _is_unpriceable(exc: BaseException) -> bool:
    try:
        from club3090.memory import UnpriceableModel
    except ImportError:  # pragma: no cover
        return False
    return isinstance(exc, UnpriceableModel)


def _closest_fit(run: _Run, fit: Any, predict, arch: Any, weights: int, shape_args: dict[str, Any],
                 catalog: "Catalog") -> list[str]:
    """On wont-fit: the largest context that fits, and whether another KV format or TP would."""
    out: list[str] = []
    fitted = getattr(fit, "max_model_len_fit", None)
    if fitted:
        out.append(f"largest context that fits this rig: {fitted} tokens (MAX_MODEL_LEN={fitted})")
    elif fitted == 0:
        out.append("no context length fits: weights and runtime overheads leave no room for the KV cache")
    hw = run.hardware
    profile, engine = run.profile, run.engine
    if hw is None or hw.sm is None:
        return out

    def try_shape(memory: tuple[int, ...] | None = None, **changes: Any) -> Any:
        args = {**shape_args, **changes}
        try:
            return predict(arch, weights_bytes=weights,
                           gpu_memory_bytes=memory or hw.selected_memory(args["tp"]),
                           shape=_serve_shape(**args), confidence=run.confidence)
        except Exception as exc:  # noqa: BLE001
            if _is_unpriceable(exc):
                return None
            raise

    for kv_id in engine.supported_kv_formats:
        kv = catalog.kv_formats.get(kv_id)
        if kv_id == shape_args["kv_cache_dtype"] or kv is None or not kv.emittable or "vllm" not in kv.engines:
            continue
        if kv.min_sm is not None and hw.sm < kv.min_sm:
            continue
        if kv.max_sm is not None and hw.sm > kv.max_sm:
            continue
        if kv_id.startswith("nvfp4") and hw.sm not in gates.NVFP4_KV_SMS:
            continue
        alt = try_shape(kv_cache_dtype=kv_id)
        if alt is not None and alt.raw_verdict != "wont-fit":
            out.append(f"KV format {kv_id} would fit ({alt.raw_verdict}, "
                       f"{getattr(alt, 'kv_cache_tokens', '?')} KV tokens); choose a profile with it")
            break
    row = gates.find_arch_row(catalog, curated_model=run.spec.curated.model_id if run.spec.curated else None,
                              architecture=arch.architecture)
    divisors = row.tp_divisors if row is not None and row.tp_divisors else (1, 2, 4, 8)
    for tp in sorted(d for d in divisors if d > shape_args["tp"]):
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
# Compose dry-run adapters
# --------------------------------------------------------------------------------------------

_REFUSAL_TOKENS = ("pin-mismatch", "tp-or-kv", "trc", "foundational-drift", "degraded-drift", "scope", "other")


def _refusal_token(outcome: Any) -> str | None:
    token = getattr(outcome, "refusal", None)
    if token is None and isinstance(outcome, Mapping):
        token = outcome.get("refusal")
    if token is None:
        return None
    token = str(getattr(token, "value", token))
    return token if token in _REFUSAL_TOKENS else "other"


def _refusal_message(outcome: Any, token: str) -> str:
    for name in ("detail", "message", "reason_detail"):
        value = getattr(outcome, name, None)
        if value:
            return f"the compose generator refused ({token}): {value}"
    return f"the compose generator refused ({token})"


def _compose_text(outcome: Any) -> str:
    if isinstance(outcome, str):
        return outcome
    text = getattr(outcome, "text", None)
    if text is None and isinstance(outcome, Mapping):
        text = outcome.get("text")
    if not text:
        raise RuntimeError("the compose dry-run returned neither text nor a refusal")
    return str(text)


# --------------------------------------------------------------------------------------------
# Defaults for the injected edges
# --------------------------------------------------------------------------------------------

def _default_derive(source: str, settings: "Settings", catalog: "Catalog") -> Any:
    from club3090.derive import derive
    return derive(source, settings, catalog)


def _default_detect() -> Any:
    from club3090.hardware import detect
    return detect()


def _default_free_bytes(path: Path) -> int | None:
    from club3090.disk import free_bytes_at
    return free_bytes_at(path)


def _default_dry_run(profile_key: str, catalog: "Catalog", *, out_name: str | None = None) -> Any:
    # compose.dry_run is generate() without the output name; generate() lets the header's run
    # line name the real --out file. Neither writes anything.
    from club3090.compose import generate
    return generate(profile_key, catalog, out_name=out_name)


def _default_predict(*args: Any, **kwargs: Any) -> Any:
    from club3090.memory import predict
    return predict(*args, **kwargs)


def _parse_gpus(spec: str, catalog: "Catalog") -> Any:
    from club3090.gpus import parse_gpus
    return parse_gpus(spec, catalog)


def _curated_variant(catalog: "Catalog", curated: Any) -> Any:
    if curated is None:
        return None
    model = catalog.models.get(curated.model_id)
    return model.weights.get(curated.variant_id) if model is not None else None


# --------------------------------------------------------------------------------------------
# Capture bundle on hard stops
# --------------------------------------------------------------------------------------------

def _write_bundle(result: PullResult, run: _Run, root: Path, clock: Callable[[], datetime],
                  catalog: "Catalog") -> Path | None:
    try:
        from club3090 import capture
    except ImportError:  # pragma: no cover - capture lands separately
        return None
    profile, engine, spec = run.profile, run.engine, run.spec
    hw = result.hardware
    fit_json = result.fit.to_json() if result.fit is not None and hasattr(result.fit, "to_json") else None
    gate = {
        "abort_reason": result.reason,
        "detail": {"message": result.detail},
        "stratum": int(result.stratum),
        "stratum_name": result.stratum_name,
        "path": result.path,
        "c0": result.c0.to_json() if result.c0 is not None else None,
        "notices": list(result.notices),
        "confidence": result.confidence,
        "raw_verdict": result.raw_verdict,
        "terminal": result.terminal,
        "profile_like": result.profile_like,
        "hardware_sm": str(hw.sm) if hw is not None and hw.sm is not None else None,
        "predicted_b_breakdown": fit_json,
    }
    curated = getattr(spec, "curated", None)
    arch = getattr(spec, "arch", None)
    quant = getattr(spec, "quantization", None)
    past_c0 = result.stratum == Stratum.DECIDED or result.stratum > Stratum.ENGINE_SUPPORT
    in_use = (list(zip(hw.names, hw.selected_memory(profile.tp if profile is not None else 1)))
              if hw is not None and len(hw.names) == len(hw.memory_bytes) else [])
    manifest = {
        "model": curated.model_id if curated else result.slug,
        "model_id": result.slug,
        "quant_label": (curated.variant_id if curated else
                        (f"{quant.method}-{quant.bits}" if quant else getattr(spec, "compute_dtype", None))),
        "arch_family": getattr(arch, "architecture", None) or None,
        "engine_pin": engine.pin if engine is not None and past_c0 else None,
        "engine_version": engine.vllm_version if engine is not None and past_c0 else None,
        "kv_format": profile.kv_format if profile is not None and past_c0 else None,
        "selected_ctx": profile.max_ctx if profile is not None and past_c0 else None,
        **(capture.topology_fields(in_use) if past_c0 else {}),
    }
    try:
        return capture.write_gate_bundle(root, slug=result.slug, gate=gate, manifest_fields=manifest,
                                         now=clock())
    except OSError as exc:
        run.notices.append(f"could not write the gate bundle: {exc}")
        return None


__all__ = ["CAVEAT", "EFFECTIVE_CAP_NOTICE", "PullRequest", "PullResult", "evaluate", "exit_code_for",
           "select_path"]
