"""Start a written bundle and keep its state file: native or Docker start, wait for
``/v1/models``, the boot receipt, smoke + ``verify``; a failed start prints the log tail and
writes a capture bundle. ``up``, ``swap`` and the llama.cpp path share it; ``down`` and
``status`` read the state it writes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from club3090.edges import boot as boot_edge
from club3090.edges import launchers
from club3090.errors import InputError, UsageError
from club3090.outcome import Outcome
from club3090.pipeline import bundle as bundle_mod
from club3090.pipeline import up_facts as facts

if TYPE_CHECKING:
    from club3090.edges.launchers.process import PortHolder
    from club3090.pipeline.provider import Provider
    from club3090.pipeline.up import UpRequest
    from club3090.pipeline.up_facts import FactLog, UpResult

__all__ = ["NOT_WARM", "PORT_IN_USE", "START_FAILED", "VERIFY_FAILED", "not_started", "read_state", "refuse_port",
           "result_dir", "start_bundle", "state_path", "write_state"]

# the failure tokens of a start (``UpResult.failure``)
PORT_IN_USE = "port-in-use"
START_FAILED = "start-failed"
VERIFY_FAILED = "verify-failed"
NOT_WARM = "not-warm"          # no completion succeeded within the warm-up window: verify never ran


def state_path(directory: Path) -> Path:
    return Path(directory) / bundle_mod.STATE


def read_state(directory: Path) -> dict[str, Any]:
    path = state_path(directory)
    try:
        with open(path, "rb") as fh:
            data = json.loads(fh.read(1 << 20))
    except FileNotFoundError:
        raise UsageError(f"{directory} has no {bundle_mod.STATE}: not a folder written by `club3090 up`") from None
    except (OSError, ValueError) as exc:
        raise InputError(str(path), f"unreadable: {exc}") from None
    if not isinstance(data, dict):
        raise InputError(str(path), "not a JSON object")
    return data


def write_state(directory: Path, state: Mapping[str, Any], write: Callable[[Path, str], None] | None = None) -> None:
    """The state file, written atomically (``write``: the Provider's ``write_file`` on the pipeline's path)."""
    from club3090.edges.files import atomic_write_text

    (write or atomic_write_text)(state_path(directory), json.dumps(state, indent=2) + "\n")



def not_started(directory: Path, state: dict[str, Any], log: FactLog, provider: Provider) -> UpResult:
    """``--no-start``: the state as written, and the three ways to start the bundle later."""
    write_state(directory, state, provider.write_file)
    log.add(facts.NotStarted(directory))
    return log.result(Outcome.OK, state)


def refuse_port(log: FactLog, state: dict[str, Any], holder: PortHolder, provider: Provider) -> UpResult:
    """The ``port-in-use`` stop: nothing started; the state says so; the holder is the fact."""
    state.update(state="not-started", failure=PORT_IN_USE, pid=None)
    if state.get("directory"):
        write_state(Path(state["directory"]), state, provider.write_file)
    log.add(holder)
    return log.result(Outcome.REFUSED, state if state.get("directory") else {}, PORT_IN_USE)


def start_bundle(req: UpRequest, plan: bundle_mod.Bundle, state: dict[str, Any], log: FactLog,
                 launcher: launchers.Launcher, pre: launchers.Preflighted, provider: Provider, *,
                 snapshot: Path | None = None, secrets: tuple[str, ...] = (), receipt: bool = True) -> UpResult:
    """Start a written bundle, wait until THIS server lists THIS model, receipt, smoke + verify."""
    directory = plan.directory
    url = state["url"]
    holder = launchers.port_holder(plan.port)
    if holder is not None:
        return refuse_port(log, state, holder, provider)
    job = launchers.Job(directory, plan.native_argv, plan.native_env, url, plan.served_model, plan.port, pre.server)
    state.update(state="starting")
    started = launcher.start(job)
    state.update(started.handle)
    if started.error is not None:
        return _failed(req, log, state, started.detail, started.error, launcher, provider,
                       failure=START_FAILED)
    write_state(directory, state, provider.write_file)
    ready = launchers.wait_ready(url, model=plan.served_model, running=lambda: launcher.running(directory, state),
                                 last_line=lambda: launcher.logs(directory, state, lines=1).strip(),
                                 show=req.progress.spin, http=provider.http(), deadline_s=req.ready_deadline_s)
    if not ready.ok:
        exited = ready.why == "exited"
        return _failed(req, log, state, launcher.logs(directory, state, lines=40),
                       "the server exited" if exited else
                       f"{plan.served_model} not listed at {url}/v1/models after {ready.seconds:.0f}s",
                       launcher, provider, failure=boot_edge.PROCESS_EXITED if exited else boot_edge.BOOT_TIMEOUT,
                       seconds=ready.seconds)
    settled = getattr(launcher, "settled", None)
    state.update(settled(directory, state) if callable(settled) else {})
    state.update(state="running", ready_s=round(ready.seconds, 1))
    write_state(directory, state, provider.write_file)
    log.add(facts.Ready(ready.seconds, url))
    if receipt:
        _receipt(log, state, plan, snapshot, secrets, lambda: launcher.logs(directory, state, lines=100_000))
    else:
        log.add(facts.ReceiptSkipped())
    return _verify(req, log, state, provider, alive=lambda: launcher.running(directory, state))


def _receipt(log: FactLog, state: dict[str, Any], plan: bundle_mod.Bundle, snapshot: Path | None,
             secrets: tuple[str, ...], log_text: Callable[[], str]) -> None:
    """Every boot leaves a calibration receipt (docs/DESIGN.md §13); a log without one says why."""
    from club3090.pipeline.boot_receipt import BootReceipt, write_boot_receipt

    try:
        done = write_boot_receipt(plan.directory, log_text(), argv=plan.native_argv, repo_id=state["repo_id"],
                                  hardware=getattr(log.gate, "hardware", None), snapshot=snapshot,
                                  secrets=secrets, swap_of=state.get("swap_of"))
    except (OSError, ValueError, InputError) as exc:
        done = BootReceipt(note=f"no receipt: {exc}")
    log.add(done)


def _verify(req: UpRequest, log: FactLog, state: dict[str, Any], provider: Provider, *,
            alive: Callable[[], bool] = lambda: True) -> UpResult:
    from club3090.edges import boot
    from club3090.edges.openai_client import OpenAIClient
    from club3090.validate import capabilities
    from club3090.validate.verify import verify

    http = provider.http()
    url, model = state["url"], state["served_model"]
    warm = boot.warm_up(url, model, http=http, clock=provider.monotonic, sleep=provider.sleep,
                        window_s=req.warmup_s, alive=alive)
    log.add(warm)
    if not warm.ok:
        return _not_warm(log, state, provider, exited=warm.exited)
    from club3090.pipeline import engines

    engine = engines.by_type(str(state.get("engine", ""))) or engines.DEFAULT
    smoke = capabilities.smoke(url, model, state.get("argv") or (), http=http, hints=engine.verify_hints)
    log.add(facts.Smoke(tuple(smoke.results.items()), smoke.problems))
    client = OpenAIClient(f"{url}/v1", timeout=300.0, http=http, deadline_s=900.0)
    # a launch without its engine's tool flag serves no tool calls: probing them would fail by construction
    by_user = bool(state.get("skip_tools", False))
    missing = None if engine.tools_flag in state.get("argv", []) else engine.tools_flag
    skipped = facts.ToolsSkipped(by_user, missing) if by_user or missing else None
    why = "--skip-tools" if by_user else f"no {missing}"
    report = verify(client, model=model, full=True, skip_tools=skipped is not None, skip_tools_why=why,
                    hints=engine.verify_hints, progress=_spinner(req))
    if skipped is not None:
        log.add(skipped)
    log.add(facts.Verified(report))
    stressed = _stress(req, client, model, skipped is not None) if req.stress and smoke.floor_green and report.ok \
        else None
    if stressed is not None:
        log.add(facts.Verified(stressed, stress=True))
    full_ok = smoke.floor_green and report.ok
    ok = full_ok and (not req.stress or (stressed is not None and stressed.ok))
    state.update(verified=full_ok, verified_stress=stressed.ok if stressed is not None else None,
                 smoke=dict(smoke.results))
    if state.get("directory"):
        write_state(Path(state["directory"]), state, provider.write_file)
    log.add(facts.Serving(url, model, result_dir(state), full_ok, req.stress, stressed is not None and stressed.ok))
    return log.result(Outcome.OK if ok else Outcome.FAILED, state, None if ok else VERIFY_FAILED)


def _not_warm(log: FactLog, state: dict[str, Any], provider: Provider, *, exited: bool) -> UpResult:
    """Still cold at the end of the warm-up window: the server keeps running, unverified; or it
    exited during the warm-up (``process-exited``: nothing serves)."""
    failure = boot_edge.PROCESS_EXITED if exited else NOT_WARM
    state.update(verified=False, verified_stress=None, failure=failure, **({"state": "exited", "pid": None}
                                                                           if exited else {}))
    if state.get("directory"):
        write_state(Path(state["directory"]), state, provider.write_file)
    if not exited:
        log.add(facts.Serving(state["url"], state["served_model"], result_dir(state), False, warm=False))
    return log.result(Outcome.FAILED, state, failure)


def _spinner(req: UpRequest) -> Callable[[str], None]:
    """Each verify check on the spinner line while it runs (the table is printed once, from the facts)."""
    spin = req.progress.spin
    return spin if spin is not None else (lambda _line: None)


def _stress(req: UpRequest, client: Any, model: str, skip_tools: bool) -> Any:
    """``up --stress``: verify-stress (the needle ladder, the tool-result prefill, the probes)."""
    from club3090.validate.stress import stress

    return stress(client, model=model, skip_tools=skip_tools, progress=_spinner(req))


def result_dir(state: dict[str, Any]) -> str:
    return str(state.get("directory", "DIR"))


def _failed(req: UpRequest, log: FactLog, state: dict[str, Any], tail: str, why: str,
            launcher: launchers.Launcher, provider: Provider, *, failure: str, seconds: float = 0.0) -> UpResult:
    """A start that did not become ready: whatever it left running is stopped (its pid file goes),
    the state says "failed", the log tail is shown and a capture bundle written."""
    from club3090.reports.capture import CAPTURES_DIRNAME

    directory = Path(req.directory).absolute()
    stopped = launcher.stop(directory, state)
    state.update(state="failed", failure=why, pid=None)
    write_state(directory, state, provider.write_file)
    bundle: Path | None = None
    error: str | None = None
    try:
        boot = boot_edge.BootReport(ok=False, seconds=seconds, failure=failure, detail=why, log_excerpt=tail)
        bundle = _capture(log, state, tail, req.captures or Path.cwd() / CAPTURES_DIRNAME, provider.now(),
                          boot.to_point())
    except (OSError, ValueError, TypeError, KeyError) as exc:
        error = str(exc)
    log.add(facts.StartFailed(why, stopped.refused or None, tuple(tail.splitlines()[-20:]), bundle, error,
                              directory / bundle_mod.LOGS))
    return log.result(Outcome.FAILED, state, START_FAILED)


def _capture(log: FactLog, state: dict[str, Any], tail: str, root: Path, now: datetime,
             boot: dict[str, Any]) -> Path:
    """The failed start as an [E] bundle: the gate and the boot (its log tail), so the Loop can classify it."""
    from club3090.reports import capture

    gate = log.gate
    payload = gate.to_json() if gate is not None else {}
    keys = getattr(capture, "GATE_KEYS", ())
    gate_fields = {k: payload.get(k) for k in keys} if keys else payload
    return capture.write_e_bundle(root, slug=str(state.get("repo_id", "up")), gate=gate_fields,
                                  points={"boot": boot}, manifest_fields={"model": state.get("repo_id"),
                                                              **({"swap_of": state["swap_of"]}
                                                                 if state.get("swap_of") else {})},
                                  outcome="failed", now=now, boot_log=tail or None)
