"""Pull-Emit-Derived ``[E]`` (docs/DESIGN.md): after a satisfied Path-B terminal for a
non-curated repo, emit the derived compose, download the repo, boot it, smoke it, capture it.

``run`` is called by ``pull.evaluate`` only; every side effect is a seam of ``EStages`` (the
Hub fetcher, the docker runner, the HTTP client, ``which``, the clocks, progress). A stage's
failure or exception is recorded in the ``EReport`` (stage + token), never raised, and never
changes the gate's result: ``pull`` only turns a failed ``[E]`` into exit 2.

Stages and their failure tokens:

- ``emit``: ``derived-runtime-unsupported:<clause>`` (``compose.derived_compose``),
  ``write-failed``; without a known GPU topology ``[E]`` is skipped (``gpu-topology-undetermined``).
- ``download``: into the standard HF cache through ``up``'s one download path (the Provider's
  ``fetch_weights``: resumable, sha256-checked; ``--verify-in-place`` adopts matching files from the
  pre-cache pulls folder); ``download.TOKENS`` (``no-etag``, ``sha-mismatch``, ``gated-401``,
  ``disk``, ``in-progress``, ``fallback-failed``, ``unsafe-name``, ``offline-not-cached``).
- ``boot``: ``docker-unavailable`` (``up``'s docker preflight: engine reachable, compose plugin,
  NVIDIA runtime; the message names the fix), ``compose-up-failed``, ``boot-timeout``; skipped with
  a notice under ``--no-boot`` or when ``docker`` is not on PATH.
- ``smoke``: ``floor-red`` (plain chat or streaming failed).
- any stage: ``stage-error`` (an unexpected exception, recorded with its message).
"""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from club3090.argv import flag_value
from club3090.compose.derived import local_url
from club3090.compose.generate import derived_compose
from club3090.edges import boot as boot_mod
from club3090.edges import download, hf_cache
from club3090.edges.files import atomic_write_text, write_output_text
from club3090.edges.openai_client import Http
from club3090.errors import Club3090Error
from club3090.outcome import Notice, NoticeCode
from club3090.reports import capture
from club3090.units import MiB

if TYPE_CHECKING:
    from collections.abc import Sequence

    from club3090.catalog.model import Catalog
    from club3090.fit.runtime import RuntimeShape
    from club3090.model.spec import ModelSpec, RepoFile
    from club3090.rig.hardware import HardwareFacts
    from club3090.settings import Settings

STAGES = ("emit", "download", "boot", "smoke")
GPU_TOPOLOGY_UNDETERMINED = "gpu-topology-undetermined"
WRITE_FAILED = "write-failed"
STAGE_ERROR = "stage-error"
DOCKER_UNAVAILABLE = "docker-unavailable"
PREDICTOR_ID = "club3090-memory"
_TOPOLOGY_SOURCES = ("gpus-flag", "detected")


class WeightsFetch(Protocol):
    """The Provider's ``fetch_weights``: files of a repo at a commit into the HF cache, checked."""

    def __call__(self, repo_id: str, commit: str, files: "Sequence[RepoFile]", *,
                 progress: Callable[[str], None] | None, bar: bool,
                 adopt: "Sequence[Path]" = ()) -> download.DownloadReport: ...


@dataclass(frozen=True)
class EStages:
    """The seams of ``[E]``. ``None`` means the real thing."""

    fetch: WeightsFetch | None = None                   # None: hf_cache.fetch_into_cache(settings, ...)
    runner: boot_mod.Runner | None = None               # docker; None: subprocess
    http: Http | None = None                   # None: urllib (loopback, no proxy)
    which: Callable[[str], str | None] = shutil.which
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    progress: Callable[[str], None] | None = None       # the CLI prints to stderr
    no_boot: bool = False                               # --no-boot: download + compose only
    emit_only: bool = False                             # library callers: write the compose, nothing else
    bar: bool = False                                   # huggingface_hub-style progress bars on stderr
    verify_in_place: bool = False                       # --verify-in-place: adopt matching files on disk
    boot_deadline_s: float = boot_mod.BOOT_DEADLINE_S
    poll_interval_s: float = boot_mod.POLL_INTERVAL_S


@dataclass(frozen=True)
class EReport:
    ran: bool
    stage: str | None = None                  # the failed stage, None when nothing failed
    failure: str | None = None                # its token
    detail: str = ""
    compose_path: Path | None = None
    compose_text: str | None = None
    wrote_out: bool = False                   # the compose went to --out
    max_model_len: int | None = None
    download: download.DownloadReport | None = None
    boot: boot_mod.BootReport | None = None
    smoke: boot_mod.SmokeReport | None = None
    boot_skipped: str | None = None           # why boot/smoke did not run
    bundle: Path | None = None
    notices: tuple[Notice, ...] = ()

    @property
    def ok(self) -> bool:
        return self.stage is None

    @property
    def download_ok(self) -> bool | None:
        return None if self.download is None else self.download.ok

    @property
    def boot_ok(self) -> bool | None:
        return None if self.boot is None else self.boot.ok

    @property
    def outcome(self) -> str:
        if not self.ok:
            return "failed"
        if self.boot_skipped or self.smoke is None or self.smoke.partial:
            return "partial"
        return "ok"

    def to_json(self) -> dict[str, Any]:
        return {
            "ran": self.ran, "ok": self.ok, "stage": self.stage, "failure": self.failure, "detail": self.detail,
            "compose": str(self.compose_path) if self.compose_path is not None else None,
            "max_model_len": self.max_model_len,
            "download": ({**self.download.to_point(), "dest": str(self.download.dest)}
                         if self.download is not None else None),
            "boot": self.boot.to_point() if self.boot is not None else None,
            "boot_skipped": self.boot_skipped,
            "smoke": self.smoke.to_point() if self.smoke is not None else None,
            # the capture bundle's outcome (ok | partial | failed), not the command's `outcome`
            "capture_outcome": self.outcome if self.ran else None,
            "bundle": str(self.bundle) if self.bundle is not None else None,
        }


@dataclass(frozen=True)
class _State:
    """Where ``[E]`` stands: the notices so far and the first failed stage. A frozen value each stage
    returns anew (never mutated)."""

    notices: tuple[Notice, ...] = ()
    stage: str | None = None
    failure: str | None = None
    detail: str = ""

    def fail(self, stage: str, token: str, detail: str) -> _State:
        """The first failure wins; a later one leaves the state as it is."""
        return self if self.stage is not None else replace(self, stage=stage, failure=token, detail=detail)

    def notice(self, *notices: Notice) -> _State:
        return replace(self, notices=(*self.notices, *notices))


# every source the fit engine's numbers depend on (docs/DESIGN.md, kv_calc_version)
ESTIMATOR_SOURCES = ("model/architecture.py", "model/config_reading.py", "model/families.py",
                     "model/layer_layout.py", "fit/memory.py", "fit/kv_formats.py", "fit/shape.py")


def kv_calc_version() -> str:
    """``club3090-memory+<12 hex>`` over the estimator sources and the calibration anchors."""
    here = Path(__file__).resolve().parents[1]  # the club3090 package
    return capture.kv_calc_version(PREDICTOR_ID, [here / name for name in ESTIMATOR_SOURCES],
                                   [here / "catalog" / "data" / "anchors.yaml"])


def served_name(command: "Sequence[str]") -> str:
    """The ``--served-model-name`` the derived compose's command carries (compose owns the rule)."""
    return flag_value(command, "--served-model-name") or ""


def chosen_context(fit: Any) -> tuple[int, Notice | None]:
    """The profile's context, or the fit engine's largest fitting one when the profile's is too large
    (with a ``context-fitted`` notice)."""
    ctx = int(fit.max_model_len)
    fitted = int(fit.max_model_len_fit or 0)
    if 0 < fitted < ctx:
        return fitted, Notice(NoticeCode.CONTEXT_FITTED,
                              f"[E] the profile's context {ctx} does not fit this rig; the derived compose uses "
                              f"the largest that fits, {fitted}", {"profile_ctx": ctx, "max_model_len": fitted})
    return ctx, None


@dataclass(frozen=True)
class EInput:
    """What ``[E]`` runs on: the satisfied Path-B verdict's facts and where its files go."""

    spec: "ModelSpec"
    runtime: "RuntimeShape"
    catalog: "Catalog"
    settings: "Settings"
    hardware: "HardwareFacts | None"
    fit: Any
    terminal: str | None
    trust_remote_code: bool
    out: Path | None                          # --out: the compose goes there (not our pulls folder)
    host: str                                 # --host: the address the compose publishes the port on
    force: bool
    gate: Mapping[str, Any]                   # the capture bundle's gate and manifest fields
    manifest_fields: Mapping[str, Any]
    captures_root: Path | None                # None: no capture bundle


@dataclass(frozen=True)
class _Paths:
    hf_home: Path
    local: bool                               # a local folder: nothing to download
    snapshot: Path                            # what the compose serves: the HF cache snapshot, or the folder
    compose: Path
    legacy: Path                              # the pre-cache pulls folder (--verify-in-place adopts from it)


def run(job: EInput, stages: EStages, now: Callable[[], datetime]) -> EReport:
    """Run ``[E]`` for one satisfied Path-B verdict; see the module docstring."""
    hw = job.hardware
    if hw is None or hw.memory_source not in _TOPOLOGY_SOURCES or not hw.count:
        return EReport(ran=False, notices=(Notice(NoticeCode.GPU_TOPOLOGY_UNDETERMINED,
                                                  f"{GPU_TOPOLOGY_UNDETERMINED}: [E] skipped (name the GPUs "
                                                  "with --gpus, or run where they are visible)"),))
    say = stages.progress or (lambda _m: None)
    ctx, ctx_note = chosen_context(job.fit)
    st = _State(notices=(ctx_note,) if ctx_note else ())
    paths = _paths(job)
    text, command, st = _emit(job, paths, ctx, hw.count, st, say)
    written = EReport(ran=True, compose_path=paths.compose if text is not None else None, compose_text=text,
                      wrote_out=text is not None and job.out is not None, max_model_len=ctx)
    if stages.emit_only:
        return replace(written, stage=st.stage, failure=st.failure, detail=st.detail, boot_skipped="emit-only",
                       notices=tuple(st.notices))
    dl, st = _download(job, paths, stages, st, say)
    skipped, st = _boot_skipped(paths, stages, st) if st.stage is None else (None, st)
    refused, st = _preflight(stages, st) if st.stage is None and skipped is None else (None, st)
    runner = _compose_boot(job, paths, stages) if st.stage is None and skipped is None else None
    try:
        booted, smoked = refused, None
        log = ""
        if runner is not None:
            booted, smoked, log, st = _boot_and_smoke(runner, paths.compose, command, stages, st, say)
        report = replace(written, stage=st.stage, failure=st.failure, detail=st.detail, download=dl, boot=booted,
                         smoke=smoked, boot_skipped=skipped, notices=tuple(st.notices))
        return _with_bundle(report, job, log, now) if job.captures_root is not None else report
    finally:
        if runner is not None:
            with contextlib.suppress(Exception):  # teardown is best effort, after capture
                down = runner.teardown()
                if down is not None and down.returncode != 0:
                    say(f"[pull] e: docker compose down exited {down.returncode}")


def _paths(job: EInput) -> _Paths:
    spec = job.spec
    hf_home = Path(job.settings.hf_home).expanduser().absolute()
    local = spec.source == "local" and spec.local_path is not None
    pull_dir = download.pull_dir(hf_home, spec.ref)
    hub_cache = Path(job.settings.hub_cache).expanduser().absolute()
    snapshot = (Path(spec.local_path).absolute() if local and spec.local_path is not None
                else hf_cache.snapshot_dir(hub_cache, spec.ref, spec.commit or spec.revision or "main"))
    # without --out the compose lives in our own pulls folder, never next to a user's folder
    compose = job.out if job.out is not None else pull_dir.parent / f"{pull_dir.name}.compose.yml"
    return _Paths(hf_home=hf_home, local=local, snapshot=snapshot, compose=compose, legacy=pull_dir)


def _emit(job: EInput, paths: _Paths, ctx: int, gpu_count: int, st: _State,
          say: Callable[[str], None]) -> tuple[str | None, tuple[str, ...], _State]:
    """The derived compose, written: (its text, its server's command line, the state), or (None, (), the
    failed state)."""
    try:
        outcome = derived_compose(job.spec, job.runtime, job.catalog, snapshot_dir=paths.snapshot,
                                  hf_home=paths.hf_home, max_model_len=ctx, trust_remote_code=job.trust_remote_code,
                                  gpu_indices=tuple(range(gpu_count)), out_name=str(paths.compose),
                                  host=job.host)
        if outcome.refusal is not None or not outcome.text or outcome.launch is None:
            return None, (), st.fail("emit", outcome.refusal or STAGE_ERROR, outcome.detail or "")
        text = outcome.text
        command = tuple(str(word) for word in outcome.launch.service["command"])
        if job.out is not None:
            write_output_text(paths.compose, text, force=job.force)
        else:
            atomic_write_text(paths.compose, text)
        say(f"[pull] e: compose written to {paths.compose}")
        return text, command, st.notice(*outcome.notices)
    except (Club3090Error, OSError) as exc:
        return None, (), st.fail("emit", WRITE_FAILED, str(exc))
    except Exception as exc:  # noqa: BLE001 - recorded, never raised
        return None, (), st.fail("emit", STAGE_ERROR, f"{type(exc).__name__}: {exc}")


def _download(job: EInput, paths: _Paths, stages: EStages, st: _State,
              say: Callable[[str], None]) -> tuple[download.DownloadReport | None, _State]:
    if st.stage is not None:
        return None, st
    if paths.local:
        return None, st.notice(Notice(NoticeCode.LOCAL_FOLDER,
                                      f"[E] local folder: nothing to download; the compose mounts {paths.snapshot}",
                                      {"snapshot": str(paths.snapshot)}))
    spec = job.spec
    try:
        if not spec.commit:
            dl = download.DownloadReport(False, paths.snapshot, failure=download.NO_ETAG,
                                         detail="the Hub named no commit for this repo; refusing an unpinned download")
        else:
            fetch = stages.fetch or partial(hf_cache.fetch_into_cache, job.settings)
            if stages.verify_in_place:
                say(f"[pull] download: --verify-in-place: files on disk are taken from {paths.legacy}"
                    + ("" if paths.legacy.is_dir() else " (there is no such folder: nothing to adopt)"))
            say(f"[pull] download: {len(spec.download_files)} files of {spec.ref}@{spec.commit[:12]} into the HF "
                f"cache {paths.snapshot}")
            dl = fetch(spec.ref, spec.commit, spec.download_files, progress=lambda m: say(f"[pull] download {m}"),
                       bar=stages.bar, adopt=(paths.legacy,) if stages.verify_in_place else ())
    except Exception as exc:  # noqa: BLE001
        dl = download.DownloadReport(False, paths.snapshot, failure=STAGE_ERROR, detail=f"{type(exc).__name__}: {exc}")
    return dl, st if dl.ok else st.fail("download", dl.failure or STAGE_ERROR, dl.detail)


def _boot_skipped(paths: _Paths, stages: EStages, st: _State) -> tuple[str | None, _State]:
    """Why boot and smoke do not run (``--no-boot``, no docker), with the notice to start it by hand."""
    skipped = None
    if stages.no_boot:
        skipped = "--no-boot"
    elif stages.runner is None and stages.which("docker") is None:
        skipped = "docker-not-on-path"
    if not skipped:
        return None, st
    compose = paths.compose
    return skipped, st.notice(Notice(
        NoticeCode.BOOT_SKIPPED,
        f"[E] boot and smoke skipped ({skipped}); start it yourself with: docker compose "
        f"--project-directory {compose.parent} -f {compose} up -d",
        {"why": skipped, "compose": str(compose), "project_directory": str(compose.parent)}))


def _preflight(stages: EStages, st: _State) -> tuple[boot_mod.BootReport | None, _State]:
    """``up``'s docker preflight before any ``docker compose``: the engine reachable, the compose plugin
    present, the NVIDIA runtime registered. A miss fails the boot stage with the fix named, and is the
    boot point the capture bundle records (the Loop classifies it as this machine's problem)."""
    from club3090.edges.launchers.docker import preflight_docker
    from club3090.errors import LauncherUnavailable

    try:
        preflight_docker(run=stages.runner or boot_mod.subprocess_runner, which=stages.which)
    except LauncherUnavailable as exc:
        return boot_mod.BootReport(False, 0.0, DOCKER_UNAVAILABLE, str(exc)), st.fail("boot", DOCKER_UNAVAILABLE,
                                                                                     str(exc))
    return None, st


def _compose_boot(job: EInput, paths: _Paths, stages: EStages) -> boot_mod.ComposeBoot:
    return boot_mod.ComposeBoot(
        paths.compose, paths.compose.parent, local_url(job.host, job.runtime.port),
        runner=stages.runner or boot_mod.subprocess_runner, http=stages.http or boot_mod.urllib_http,
        clock=stages.clock, sleep=stages.sleep, deadline_s=stages.boot_deadline_s,
        interval_s=stages.poll_interval_s)


def _boot_and_smoke(runner: boot_mod.ComposeBoot, compose: Path, command: tuple[str, ...], stages: EStages,
                    st: _State, say: Callable[[str], None],
                    ) -> tuple[boot_mod.BootReport, boot_mod.SmokeReport | None, str, _State]:
    """(the boot, the smoke test or None, the start-up log lines the capture bundle keeps, the state).
    The smoke asks the compose's served model name and probes what its ``command`` declares."""
    say(f"[pull] e: booting {compose} (waiting up to {stages.boot_deadline_s:.0f}s for "
        f"{runner.endpoint}/v1/models)")
    try:
        booted = runner.start()
    except Exception as exc:  # noqa: BLE001
        booted = boot_mod.BootReport(False, 0.0, STAGE_ERROR, f"{type(exc).__name__}: {exc}")
    if not booted.ok:
        return booted, None, booted.log_excerpt or "", st.fail("boot", booted.failure or STAGE_ERROR, booted.detail)
    say(f"[pull] e: ready after {booted.seconds:.0f}s; smoke test")
    from club3090.validate import capabilities

    smoked = capabilities.smoke(runner.endpoint, served_name(command), command,
                                http=stages.http or boot_mod.urllib_http)
    if not smoked.floor_green:
        st = st.fail("smoke", boot_mod.FLOOR_RED, "; ".join(f"{c}: {smoked.detail[c]['error']}" for c in smoked.red))
    return booted, smoked, runner.logs(), st   # start-up lines: the boot's calibration receipt


def _with_bundle(report: EReport, job: EInput, log: str, now: Callable[[], datetime]) -> EReport:
    assert job.captures_root is not None
    try:
        bundle = _write(report, gate=job.gate, manifest_fields=job.manifest_fields, captures_root=job.captures_root,
                        fit=job.fit, terminal=job.terminal, log=log, slug=job.spec.ref, now=now,
                        secrets=job.settings.redaction_secrets)
        return replace(report, bundle=bundle)
    except (OSError, ValueError, TypeError) as exc:
        failed = Notice(NoticeCode.BUNDLE_WRITE_FAILED, f"could not write the capture bundle: {exc}",
                        {"error": str(exc)})
        return replace(report, notices=(*report.notices, failed))


def _write(report: EReport, *, gate: Mapping[str, Any], manifest_fields: Mapping[str, Any], captures_root: Path,
           fit: Any, terminal: str | None, log: str, slug: str, now: Callable[[], datetime],
           secrets: tuple[str, ...]) -> Path:
    points: dict[str, Mapping[str, Any]] = {}
    if report.download is not None:
        points["download"] = report.download.to_point()
    if report.boot is not None:
        points["boot"] = report.boot.to_point()
    if report.smoke is not None:
        points["smoke"] = report.smoke.to_point()
    if terminal == "override-accepted":
        points["override_capture"] = _override_point(report, fit, log)
    manifest = dict(manifest_fields)
    manifest.update(kv_calc_version=kv_calc_version(), selected_ctx=report.max_model_len,
                    smoke_capability_set=list(report.smoke.capability_set) if report.smoke is not None else [])
    return capture.write_e_bundle(captures_root, slug=slug, gate=gate, points=points, manifest_fields=manifest,
                                  outcome=report.outcome, now=now(), secrets=secrets, boot_log=log or None)


def _override_point(report: EReport, fit: Any, log: str) -> dict[str, Any]:
    breakdown = fit.to_json() if fit is not None else None
    actual = boot_mod.parse_actual(log) if log else {}
    peak = actual.get("gpu_worker_reported_mib")
    got = None if not actual or all(v is None for v in actual.values()) else {
        "boot_peak_mib": peak if peak is not None else actual.get("attempted_alloc_mib"),
        "gpu_worker_reported_mib": peak}
    delta = None
    if got is not None and got["boot_peak_mib"] is not None and breakdown is not None:
        per_gpu = breakdown["per_gpu"]
        predicted = sum(per_gpu[k] for k in ("weights_bytes", "non_torch_bytes", "activation_bytes",
                                             "cudagraph_bytes", "kv_pool_bytes"))
        delta = round(got["boot_peak_mib"] - predicted / MiB, 1)
    summary = None
    if report.stage is not None:
        summary = f"{report.stage}: {report.failure}" + (f": {report.detail}" if report.detail else "")
    return {"predicted_b_breakdown": breakdown, "actual": got, "predicted_vs_actual_delta_mib": delta,
            "exit_error_summary": summary}


__all__ = ["STAGES", "EReport", "EStages", "chosen_context", "kv_calc_version", "run", "served_name"]
