"""Start a written bundle and keep its state file: native or Docker start, wait for
``/v1/models``, the boot receipt, smoke + ``verify``; a failed start prints the log tail and
writes a capture bundle. ``up``, ``swap`` and the llama.cpp path share it; ``down`` and
``status`` read the state it writes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from club3090.edges import launchers
from club3090.edges.openai_client import urllib_http
from club3090.errors import InputError, UsageError
from club3090.pipeline import bundle as bundle_mod

if TYPE_CHECKING:
    from club3090.pipeline.up import UpRequest, UpResult, UpSeams

__all__ = ["not_started", "read_state", "result_dir", "start_bundle", "state_path", "write_state"]


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


def write_state(directory: Path, state: dict[str, Any]) -> None:
    from club3090.edges.files import atomic_write_text

    atomic_write_text(state_path(directory), json.dumps(state, indent=2) + "\n")



def not_started(directory: Path, state: dict[str, Any], result: UpResult) -> UpResult:
    """``--no-start``: the state as written, and the three ways to start the bundle later."""
    write_state(directory, state)
    result.lines.append(f"[up] not started (--no-start); start it with `club3090 up` again, "
                        f"`docker compose -f {directory / 'compose.yml'} up -d`, or {directory / 'serve.sh'}")
    result.code = 0
    return result


def start_bundle(req: UpRequest, plan: bundle_mod.Bundle, state: dict[str, Any], result: UpResult,
                 native: launchers.NativeEngine | None, run: Any, seams: UpSeams, *, snapshot: Path | None = None,
                 secrets: tuple[str, ...] = (), receipt: bool = True) -> UpResult:
    """Start a written bundle (native or Docker), wait for ``/v1/models``, receipt, smoke + verify."""
    directory = plan.directory
    logs = directory / bundle_mod.LOGS
    compose = directory / "compose.yml"
    url = state["url"]
    if native is not None:
        argv = [native.executable, *plan.native_argv[1:]]
        pid = launchers.start_native(argv, plan.native_env, directory, logs)
        state.update(pid=pid, state="starting")

        def running() -> bool:
            return launchers.alive(pid)

        def last() -> str:
            return (launchers.log_tail(logs / launchers.LOG_NAME, 1) or "").strip()
    else:
        done = launchers.docker_up(compose, run)
        state.update(state="starting")
        if done.returncode != 0:
            return _failed(result, state, directory, done.stderr or done.stdout, "docker compose up failed",
                           seams.captures)

        def running() -> bool:
            ps = run(launchers.compose_argv(compose, "ps", "--status", "running", "-q"), 30)
            return ps.returncode == 0 and bool(ps.stdout.strip())

        def last() -> str:
            return (launchers.docker_logs(compose, run, 1) or "").strip()
    write_state(directory, state)
    ready = launchers.wait_ready(url, running=running, last_line=last, show=seams.spin,
                                 http=seams.http or urllib_http, deadline_s=seams.ready_deadline_s)
    if not ready.ok:
        tail = (launchers.log_tail(logs / launchers.LOG_NAME, 40) if native is not None
                else launchers.docker_logs(compose, run, 40))
        return _failed(result, state, directory, tail,
                       "the server exited" if ready.why == "exited" else f"not ready after {ready.seconds:.0f}s",
                       seams.captures)
    state.update(state="running", ready_s=round(ready.seconds, 1))
    write_state(directory, state)
    result.lines.append(f"[up] ready after {ready.seconds:.0f}s at {url}")
    if receipt:
        _receipt(result, state, plan, snapshot, secrets,
                 lambda: _read_log(logs / launchers.LOG_NAME) if native is not None
                 else launchers.docker_logs(compose, run, 100_000))
    else:
        result.lines.append("[up] no receipt: llama.cpp start-up logs are not parsed into receipts yet; "
                            "launch.json holds the prediction")
    return _verify(result, state, seams)


def _read_log(path: Path) -> str:
    from club3090.edges.files import read_bytes_capped
    from club3090.pipeline.boot_receipt import LOG_LIMIT

    return read_bytes_capped(path, limit=LOG_LIMIT).decode("utf-8", "replace")


def _receipt(result: UpResult, state: dict[str, Any], plan: bundle_mod.Bundle, snapshot: Path | None,
             secrets: tuple[str, ...], log_text: Callable[[], str]) -> None:
    """Every boot leaves a calibration receipt (docs/DESIGN.md §13); a log without one says why."""
    from club3090.pipeline.boot_receipt import BootReceipt, write_boot_receipt

    try:
        done = write_boot_receipt(plan.directory, log_text(), argv=plan.native_argv, repo_id=state["repo_id"],
                                  hardware=getattr(result.gate, "hardware", None), snapshot=snapshot,
                                  secrets=secrets, swap_of=state.get("swap_of"))
    except (OSError, ValueError, InputError) as exc:
        done = BootReceipt(note=f"no receipt: {exc}")
    result.receipt = done
    if done.path is not None:
        result.lines.append(f"[up] receipt: {done.path} (saved to the local overlay: {done.saved})")
    else:
        result.lines.append(f"[up] {done.note}")


def _verify(result: UpResult, state: dict[str, Any], seams: UpSeams) -> UpResult:
    from club3090.edges import boot
    from club3090.edges.openai_client import OpenAIClient, urllib_http
    from club3090.validate.verify import verify

    http = seams.http or urllib_http
    url, model = state["url"], state["served_model"]
    smoke = boot.smoke(url, model, http=http)
    result.lines.append("[up] smoke " + " ".join(f"{c}={v}" for c, v in smoke.results.items()))
    client = OpenAIClient(f"{url}/v1", timeout=300.0, http=http, deadline_s=900.0)
    # a launch without its engine's tool flag serves no tool calls: probing them would fail by construction
    from club3090.pipeline import engines

    tools_flag = (engines.by_type(str(state.get("engine", ""))) or engines.DEFAULT).tools_flag
    skip_tools = state.get("skip_tools", False) or tools_flag not in state.get("argv", [])
    report = verify(client, model=model, skip_tools=skip_tools, progress=seams.say)
    if skip_tools and not state.get("skip_tools"):
        result.lines.append(f"[up] tool calls not verified: the launch has no {tools_flag}")
    result.verify = report
    for c in report.checks:
        result.lines.append(f"[up] verify {c.status.upper():4s} {c.name:16s} {c.detail}")
    ok = smoke.floor_green and report.ok
    state.update(verified=ok)
    if state.get("directory"):
        write_state(Path(state["directory"]), state)
    result.lines += [f"[up] URL: {url}/v1", f"[up] served model: {model}",
                     f"[up] try: curl -s {url}/v1/chat/completions -H 'Content-Type: application/json' "
                     f"-d '{{\"model\": \"{model}\", \"messages\": [{{\"role\": \"user\", \"content\": \"Hello\"}}]}}'",
                     f"[up] stop it with: club3090 down {result_dir(state)}"]
    result.lines.append("[up] SERVING: verified" if ok else "[up] SERVING, but verification FAILED (see above)")
    result.code = 0 if ok else 1
    return result


def result_dir(state: dict[str, Any]) -> str:
    return str(state.get("directory", "DIR"))


def _failed(result: UpResult, state: dict[str, Any], directory: Path, tail: str, why: str,
            captures: Path | None) -> UpResult:
    from club3090.reports.capture import CAPTURES_DIRNAME

    state.update(state="failed", failure=why)
    write_state(directory, state)
    result.lines.append(f"[up] FAILED to start: {why}")
    result.lines += [f"[up] log: {ln}" for ln in tail.splitlines()[-20:]]
    try:
        bundle = _capture(result, state, tail, captures or Path.cwd() / CAPTURES_DIRNAME)
        result.lines.append(f"[up] capture bundle: {bundle}")
    except (OSError, ValueError, TypeError, KeyError) as exc:
        result.lines.append(f"[up] could not write the capture bundle: {exc}")
    result.lines.append(f"[up] logs: {directory / bundle_mod.LOGS}; clean up with `club3090 down {directory}`")
    result.code = 1
    return result


def _capture(result: UpResult, state: dict[str, Any], tail: str, root: Path) -> Path:
    from club3090.reports import capture

    gate = result.gate
    payload = gate.to_json() if gate is not None else {}
    keys = getattr(capture, "GATE_KEYS", ())
    gate_fields = {k: payload.get(k) for k in keys} if keys else payload
    return capture.write_e_bundle(root, slug=str(state.get("repo_id", "up")), gate=gate_fields,
                                  points={}, manifest_fields={"model": state.get("repo_id"),
                                                              **({"swap_of": state["swap_of"]}
                                                                 if state.get("swap_of") else {})},
                                  outcome="failed", now=datetime.now(timezone.utc), boot_log=tail or None)
