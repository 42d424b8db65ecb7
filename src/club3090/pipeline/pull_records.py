"""What ``pull`` writes after the gate has decided: the emission (Path A's ``--out``, the derived
compose of ``[E]`` or emit-only) and, on a hard stop, the redacted gate bundle."""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from club3090.edges.files import write_output_text
from club3090.outcome import STRATUM_NAMES, Notice, NoticeCode, Outcome, Stratum
from club3090.reports import capture

if TYPE_CHECKING:  # pragma: no cover - typing only
    from club3090.catalog.model import Catalog
    from club3090.pipeline.emit_derived import EReport, EStages
    from club3090.pipeline.provider import Provider
    from club3090.pipeline.pull_gate import Verdict


@dataclass(frozen=True, slots=True)
class Emission:
    out: Path | None = None
    compose_text: str | None = None
    emitted: bool = False
    notices: tuple[Notice, ...] = ()
    e: "EReport | None" = None
    failed: bool = False                 # [E] ran and a stage failed: the outcome becomes refused


def emit(verdict: "Verdict", catalog: "Catalog", provider: "Provider", stages: "EStages | None",
         captures_root: Path | None) -> Emission:
    """Path A writes the curated compose to ``--out``; an accepted non-curated Path-B verdict runs
    ``[E]`` (CLI) or writes only the derived compose (library callers with ``--out``)."""
    request = verdict.gate.request
    if verdict.ok and verdict.gate.path == "A":
        return _write_curated(verdict)
    if not _e_entry(verdict):
        return Emission()
    if stages is not None:
        return _run_e(verdict, catalog, provider, stages, captures_root)
    if request.out is not None:
        return _emit_only(verdict, catalog, provider)
    return Emission()


def _write_curated(verdict: "Verdict") -> Emission:
    at = verdict.gate
    out = at.request.out
    if out is None:  # explicit path="A" without --out: decided, nothing to write
        return Emission()
    assert verdict.compose_text is not None and at.profile is not None
    write_output_text(out, verdict.compose_text, force=at.request.force)
    project_dir = f"<club-3090 checkout>/{posixpath.dirname(at.profile.compose_path)}"
    return Emission(out=out, emitted=True, notices=(Notice(
        NoticeCode.PROJECT_DIRECTORY,
        f"compose written; its relative mounts resolve from the shipped compose's folder, "
        f"so start it with: docker compose --project-directory {project_dir} -f {out} up -d",
        {"project_directory": project_dir, "out": str(out)}),))


def _e_entry(verdict: "Verdict") -> bool:
    """[E]'s entry: non-curated, no --dry-run, Path B, terminal satisfied."""
    at = verdict.gate
    return (verdict.ok and at.path == "B" and verdict.stratum == Stratum.DECIDED and at.fit is not None
            and at.spec is not None and at.spec.curated is None and not at.request.dry_run)


def _derived(verdict: "Verdict", catalog: "Catalog", provider: "Provider", stages: "EStages",
             captures_root: Path | None) -> "EReport":
    from club3090.pipeline import emit_derived

    at = verdict.gate
    assert at.spec is not None and at.runtime is not None
    gate, manifest = bundle_fields(verdict)
    gate.pop("abort_reason", None)
    job = emit_derived.EInput(spec=at.spec, runtime=at.runtime, catalog=catalog, settings=provider.settings,
                              hardware=at.hardware, fit=at.fit, terminal=at.terminal,
                              trust_remote_code=at.trust_remote_code, out=at.request.out, host=at.request.host,
                              force=at.request.force,
                              gate=gate, manifest_fields=manifest, captures_root=captures_root)
    return emit_derived.run(job, stages, provider.now)


def _run_e(verdict: "Verdict", catalog: "Catalog", provider: "Provider", stages: "EStages",
           captures_root: Path | None) -> Emission:
    report = _derived(verdict, catalog, provider, stages, captures_root)
    if not report.ran:
        return Emission(e=report, notices=report.notices)
    return Emission(out=verdict.gate.request.out if report.wrote_out else None, compose_text=report.compose_text,
                    emitted=report.compose_text is not None, notices=report.notices, e=report,
                    failed=not report.ok)


def _emit_only(verdict: "Verdict", catalog: "Catalog", provider: "Provider") -> Emission:
    """Without [E] stages: write the derived compose and stop there (no download, boot or
    bundle). A refusal is a notice, not a verdict."""
    from club3090.pipeline.emit_derived import EStages

    out = verdict.gate.request.out
    report = _derived(verdict, catalog, provider, EStages(emit_only=True), None)
    if report.ran and report.ok:
        return Emission(out=out, compose_text=report.compose_text, emitted=True, notices=(*report.notices, Notice(
            NoticeCode.EMIT_ONLY, "derived compose written; this call does not download the weights it mounts "
                                  "(the CLI's [E] stages do)", {"out": str(out)})))
    if report.ran:
        return Emission(notices=(*report.notices, Notice(
            NoticeCode.EMIT_REFUSED,
            f"no compose written: {report.failure}" + (f" ({report.detail})" if report.detail else ""),
            {"failure": report.failure, "detail": report.detail})))
    return Emission(notices=report.notices)


def record(verdict: "Verdict", emission: Emission, provider: "Provider",
           captures_root: Path | None) -> tuple[Path | None, tuple[Notice, ...]]:
    """A hard stop's redacted gate bundle: (its folder, or None and a bundle-write-failed notice)."""
    if captures_root is None or verdict.outcome is not Outcome.REFUSED or (emission.e is not None and emission.e.ran):
        return None, ()
    gate, manifest = bundle_fields(verdict)
    try:
        return capture.write_gate_bundle(captures_root, slug=verdict.gate.slug, gate=gate, manifest_fields=manifest,
                                         now=provider.now(), secrets=provider.settings.redaction_secrets), ()
    except OSError as exc:
        return None, (Notice(NoticeCode.BUNDLE_WRITE_FAILED, f"could not write the gate bundle: {exc}",
                             {"error": str(exc)}),)


def bundle_fields(verdict: "Verdict") -> tuple[dict[str, Any], dict[str, Any]]:
    """The gate point and the manifest fields a bundle records for this verdict."""
    from club3090.pipeline import emit_derived

    at = verdict.gate
    runtime, engine, spec, hw, fit = at.runtime, at.engine, at.spec, at.hardware, at.fit
    gate = {
        "abort_reason": verdict.reason,
        "detail": {"message": verdict.detail, **({"sub_reason": verdict.sub_reason} if verdict.sub_reason else {})},
        "stratum": int(verdict.stratum),
        "stratum_name": STRATUM_NAMES[verdict.stratum],
        "path": at.path,
        "c0": at.finding.to_json() if at.finding is not None else None,
        "notices": [n.text for n in at.notices],
        "confidence": spec.confidence if spec is not None else None,
        "raw_verdict": fit.raw_verdict if fit is not None else None,
        "terminal": at.terminal,
        "profile_like": at.request.profile_like,
        "hardware_sm": str(hw.sm) if hw is not None and hw.sm is not None else None,
        "predicted_b_breakdown": fit.to_json() if fit is not None else None,
    }
    curated = spec.curated if spec is not None else None
    arch = spec.arch if spec is not None else None
    quant = spec.quantization if spec is not None else None
    past_c0 = verdict.stratum == Stratum.DECIDED or verdict.stratum > Stratum.ENGINE_SUPPORT
    in_use = (list(zip(hw.names, hw.selected_memory(runtime.tp if runtime is not None else 1), strict=False))
              if hw is not None and len(hw.names) == len(hw.memory_bytes) else [])
    manifest = {
        "model": curated.model_id if curated else at.slug,
        "model_id": at.slug,
        "quant_label": (curated.variant_id if curated else
                        (f"{quant.method}-{quant.bits}" if quant else (spec.compute_dtype if spec else None))),
        "arch_family": (arch.architecture if arch is not None else None) or None,
        "engine_pin": engine.pin if engine is not None and past_c0 else None,
        "engine_version": engine.vllm_version if engine is not None and past_c0 else None,
        "kv_format": runtime.kv_format if runtime is not None and past_c0 else None,
        "selected_ctx": runtime.max_model_len if runtime is not None and past_c0 else None,
        # the fit engine's version is known whatever stopped the gate: the Loop's dedup key needs it
        "kv_calc_version": emit_derived.kv_calc_version(),
        **(capture.topology_fields(in_use) if past_c0 else {}),
    }
    return gate, manifest
