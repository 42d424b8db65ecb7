"""`club3090 down DIR`, `club3090 status DIR`, `club3090 logs DIR [-f]`: a bundle folder written by `up`.

Exit codes: 0 ok (``status``: running and answering); 1 ``status``: not running, or the server
does not answer; 2 ``down`` refused: the process (or container) the folder names is not the one
`up` started, nothing was signalled; 64 DIR is not a bundle folder, or a multi-node folder.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from club3090.cli.exit_codes import exit_code
from club3090.cli.render import safe
from club3090.outcome import Outcome


def add_parser(sub: Any) -> None:
    down = sub.add_parser("down", help="stop the server of a bundle folder written by `up`",
                          description="Stop the server `club3090 up` started from DIR (native: SIGTERM "
                                      "to its process group, then SIGKILL; Docker: docker compose down). "
                                      "Only the process (or containers) `up` recorded: a PID that now names "
                                      "another process is refused, nothing is signalled.")
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


def _folder(directory: Path) -> tuple[dict[str, Any], Any]:
    """(state, launcher) of a bundle folder written by `up`."""
    from club3090.edges import launchers
    from club3090.pipeline.bundle_start import read_state

    state = read_state(directory)
    return state, launchers.of_state(state)


def _status(directory: Path) -> dict[str, Any]:
    """What runs now; a state file that still says running (or starting) for a server that is not is corrected."""
    from club3090.edges import launchers
    from club3090.pipeline.bundle_start import write_state

    state, launcher = _folder(directory)
    now = launcher.status(directory, state, tail=10)
    answering = bool(now.running and state.get("url")
                     and launchers.models_ready(str(state["url"]), model=state.get("served_model")))
    out = {**state, **now.handle, "tail": now.tail, "who": now.who}
    out["state"] = "running" if answering else ("starting" if now.running else "stopped")
    out["running"], out["answering"] = now.running, answering
    if not now.running and state.get("state") in ("running", "starting"):
        write_state(directory, {**state, "state": "stopped", "pid": None})
    return out


def run_status(args: argparse.Namespace, provider: Any) -> int:
    st = _status(args.directory.absolute())
    if args.json:
        print(safe(json.dumps(st, indent=2, default=str), multiline=True))
    else:
        print(safe(f"[status] {st['state']}: {st.get('url')}/v1 model {st.get('served_model')} ({st['who']}, "
                   f"{st.get('launcher')})"))
        for line in (st.get("tail") or "").splitlines():
            print(safe(f"[status] log: {line}"))
    return exit_code(Outcome.OK if st["answering"] else Outcome.FAILED)


def run_down(args: argparse.Namespace, provider: Any) -> int:
    """Stop only what `up` started: the launcher checks the recorded identity before it signals."""
    from club3090.pipeline.bundle_start import write_state

    directory = args.directory.absolute()
    state, launcher = _folder(directory)
    done = launcher.stop(directory, state)
    if done.refused is None:
        write_state(directory, {**state, "state": "stopped", "pid": None})
    message = f"refused: {done.refused}; nothing was signalled" if done.refused else done.message
    if args.json:
        print(json.dumps({"directory": str(directory), "stopped": done.stopped, "refused": done.refused,
                          "message": message}))
    else:
        print(safe(f"[down] {directory}: {message}"))
    return exit_code(Outcome.REFUSED if done.refused else Outcome.OK)


def run_logs(args: argparse.Namespace, provider: Any) -> int:
    directory = args.directory.absolute()
    state, launcher = _folder(directory)
    text = launcher.logs(directory, state, lines=200)
    if args.json:
        print(json.dumps({"log": text}))
        return 0
    if text:
        print(safe(text, multiline=True))
    if args.follow:
        return int(launcher.follow(directory, state, lambda line: print(safe(line), flush=True)))
    return 0
