"""`club3090 down DIR`, `club3090 status DIR`, `club3090 logs DIR [-f]`: a bundle folder written by `up`.

Exit codes: 0 ok (``status``: running and answering); 1 ``status``: not running, or the server
does not answer; 64 DIR is not a bundle folder.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from club3090.cli.render import safe


def add_parser(sub: Any) -> None:
    down = sub.add_parser("down", help="stop the server of a bundle folder written by `up`",
                          description="Stop the server `club3090 up` started from DIR (native: SIGTERM "
                                      "to its process group, then SIGKILL; Docker: docker compose down).")
    down.add_argument("directory", type=Path, metavar="DIR")
    down.add_argument("--json", action="store_true", help="print the result as one JSON object")
    down.set_defaults(run=run_down)
    status = sub.add_parser("status", help="state, URL, PID or container, and the log tail of a bundle folder",
                            description="Show whether the server of DIR runs and answers /v1/models.")
    status.add_argument("directory", type=Path, metavar="DIR")
    status.add_argument("--json", action="store_true", help="print the status as one JSON object")
    status.set_defaults(run=run_status)
    logs = sub.add_parser("logs", help="the server log of a bundle folder",
                          description="Print DIR's server log (native: DIR/logs/server.log; Docker: "
                                      "docker compose logs); -f follows it.")
    logs.add_argument("directory", type=Path, metavar="DIR")
    logs.add_argument("-f", "--follow", action="store_true", help="keep printing new lines until Ctrl-C")
    logs.add_argument("--json", action="store_true", help="print the log tail as one JSON object")
    logs.set_defaults(run=run_logs)


def _single_node(directory: Path, state: dict[str, Any], command: str) -> None:
    """status / down / logs follow launches on this machine; a multi-node folder has its runbook."""
    from club3090.errors import UsageError

    if state.get("launcher") in ("ray", "k8s"):
        raise UsageError(f"{directory} holds {state.get('launcher')} launch files for several nodes (written, not "
                         f"started by club3090): `club3090 {command}` follows single-node launches; see "
                         f"{directory / 'RUNBOOK.md'}")


def _status(directory: Path) -> dict[str, Any]:
    from club3090.edges import launchers
    from club3090.pipeline.bundle_start import read_state

    state = read_state(directory)
    _single_node(directory, state, "status")
    out = dict(state)
    if state.get("launcher") == "native":
        pid = launchers.read_pid(directory)
        running = pid is not None and launchers.alive(pid)
        out["pid"] = pid
        out["tail"] = launchers.log_tail(directory / "logs" / launchers.LOG_NAME, 10)
    else:
        compose = directory / "compose.yml"
        ps = launchers.run_process(launchers.compose_argv(compose, "ps", "--status", "running", "-q"), 30)
        running = ps.returncode == 0 and bool(ps.stdout.strip())
        out["tail"] = launchers.docker_logs(compose, tail=10) if running else ""
    answering = bool(running and state.get("url") and launchers.models_ready(str(state["url"])))
    out["state"] = "running" if answering else ("starting" if running else "stopped")
    out["running"], out["answering"] = running, answering
    return out


def run_status(args: argparse.Namespace, provider: Any) -> int:
    st = _status(args.directory.absolute())
    if args.json:
        print(safe(json.dumps(st, indent=2, default=str), multiline=True))
    else:
        who = f"PID {st.get('pid')}" if st.get("launcher") == "native" else f"container {st.get('container')}"
        print(safe(f"[status] {st['state']}: {st.get('url')}/v1 model {st.get('served_model')} ({who}, "
                   f"{st.get('launcher')})"))
        for line in (st.get("tail") or "").splitlines():
            print(safe(f"[status] log: {line}"))
    return 0 if st["answering"] else 1


def run_down(args: argparse.Namespace, provider: Any) -> int:
    from club3090.edges import launchers
    from club3090.pipeline.bundle_start import read_state, write_state

    directory = args.directory.absolute()
    state = read_state(directory)
    _single_node(directory, state, "down")
    if state.get("launcher") == "native":
        stopped = launchers.stop_native(directory)
        message = f"stopped PID {state.get('pid')}" if stopped else "was not running"
    else:
        done = launchers.docker_down(directory / "compose.yml")
        stopped = done.returncode == 0
        message = "docker compose down: ok" if stopped else f"docker compose down failed: {done.stderr.strip()}"
    state.update(state="stopped", pid=None)
    write_state(directory, state)
    if args.json:
        print(json.dumps({"directory": str(directory), "stopped": stopped, "message": message}))
    else:
        print(safe(f"[down] {directory}: {message}"))
    return 0


def run_logs(args: argparse.Namespace, provider: Any) -> int:
    from club3090.edges import launchers
    from club3090.pipeline.bundle_start import read_state

    directory = args.directory.absolute()
    state = read_state(directory)
    _single_node(directory, state, "logs")
    if state.get("launcher") != "native":
        text = launchers.docker_logs(directory / "compose.yml", tail=200)
        print(json.dumps({"log": text}) if args.json else safe(text, multiline=True))
        if args.follow and not args.json:
            import subprocess
            subprocess.run(launchers.compose_argv(directory / "compose.yml", "logs", "-f", "--no-color"), check=False)
        return 0
    path = directory / "logs" / launchers.LOG_NAME
    text = launchers.log_tail(path, 200)
    if args.json:
        print(json.dumps({"log": text}))
        return 0
    if text:
        print(safe(text, multiline=True))
    if args.follow:
        try:
            with open(path, "rb") as fh:
                fh.seek(0, 2)
                while True:
                    line = fh.readline()
                    if line:
                        print(safe(line.decode("utf-8", "replace").rstrip("\n")), flush=True)
                    else:
                        time.sleep(0.5)
        except OSError as exc:
            print(f"cannot read {path}: {exc}", file=sys.stderr)
            return 1
    return 0
