"""Processes and ports on this machine: a detached start, the identity ``down`` checks before it
signals (the PID, the process's start time and its command line), the group stop, and who holds
a TCP port.

A PID alone names whatever process has it now: ``down`` signals only the process whose start time
(``/proc/PID/stat`` field 22, or ``ps -o lstart=``) and session (``up`` starts the server as its
own session leader) are the recorded ones, and, once the server answered, its recorded command line.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from club3090.edges.launchers.base import PID_NAME, STOP_GRACE_S

_STARTED: list[subprocess.Popen[bytes]] = []
_SECRET_ENV = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "OPENAI_API_KEY")
PROC = Path("/proc")


@dataclass(frozen=True, slots=True)
class Identity:
    pid: int
    start_time: str                    # opaque: equal means the same process
    session: int | None                # the session id (None: unknown on this OS)
    cmdline: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"pid": self.pid, "start_time": self.start_time, "session": self.session,
                "cmdline": list(self.cmdline)}


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(start time in clock ticks since boot, session id) from ``/proc/PID/stat``."""
    try:
        text = (PROC / str(pid) / "stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    fields = text[text.rfind(")") + 2:].split()        # after "pid (comm) ": field 3 onwards
    if len(fields) < 20:
        return None
    return fields[19], int(fields[3])


def _proc_cmdline(pid: int) -> tuple[str, ...]:
    try:
        raw = (PROC / str(pid) / "cmdline").read_bytes()[: 1 << 16]
    except OSError:
        return ()
    return tuple(p.decode("utf-8", "replace") for p in raw.split(b"\0") if p)


def _ps(pid: int, column: str) -> str:
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        done = subprocess.run(["ps", "-o", f"{column}=", "-p", str(pid)], capture_output=True, text=True,
                              timeout=10, check=False, errors="replace")
        return done.stdout.strip() if done.returncode == 0 else ""
    return ""


def identity(pid: int) -> Identity | None:
    """The identity of the running process ``pid``, or None when none runs."""
    if not alive(pid):
        return None
    stat = _proc_stat(pid)
    if stat is not None:
        return Identity(pid, stat[0], stat[1], _proc_cmdline(pid))
    start = _ps(pid, "lstart")
    if not start:
        return None
    with contextlib.suppress(OSError):
        return Identity(pid, start, os.getsid(pid), tuple(_ps(pid, "command").split()))
    return Identity(pid, start, None, tuple(_ps(pid, "command").split()))


def mismatch(recorded: Mapping[str, Any], live: Identity) -> str | None:
    """Why ``live`` is not the recorded process (None: it is)."""
    if str(recorded.get("start_time")) != live.start_time:
        return (f"PID {live.pid} started at {live.start_time}, the server `up` started at "
                f"{recorded.get('start_time')}: the PID now names another process")
    if live.session is not None and live.session != live.pid:
        return f"PID {live.pid} does not lead its own session (session {live.session}): not the server `up` started"
    cmdline = tuple(str(a) for a in recorded.get("cmdline") or ())
    if cmdline and live.cmdline and cmdline != live.cmdline:
        return f"PID {live.pid} runs `{' '.join(live.cmdline)[:160]}`, not `{' '.join(cmdline)[:160]}`"
    return None


def start_detached(argv: Sequence[str], env: Mapping[str, str], directory: Path, log: Path) -> Identity:
    """Start ``argv`` as its own session, stdout+stderr appended to ``log``; write the PID file."""
    from club3090.edges.files import atomic_write_text

    log.parent.mkdir(parents=True, exist_ok=True)
    child_env = {k: v for k, v in os.environ.items() if k not in _SECRET_ENV and not k.upper().endswith("_PROXY")}
    child_env.update(env)
    with open(log, "ab") as out:
        proc = subprocess.Popen(list(argv), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                cwd=str(directory), env=child_env, start_new_session=True)
    _STARTED.append(proc)   # outlives this call by design; `alive` reaps it once it exits
    stat = _proc_stat(proc.pid)
    start = stat[0] if stat is not None else _ps(proc.pid, "lstart")
    atomic_write_text(directory / PID_NAME, f"{proc.pid}\n")
    return Identity(proc.pid, start, proc.pid, ())   # the command line is recorded once it answers (after exec)


def read_pid(directory: Path) -> int | None:
    try:
        text = (directory / PID_NAME).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if text.isdigit() and 0 < int(text) < 2**31 else None


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie child of this process is reaped and counts as gone)."""
    with contextlib.suppress(ChildProcessError, OSError):
        done, _status = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_group(pid: int, *, grace_s: float = STOP_GRACE_S, clock: Callable[[], float] = time.monotonic,
               sleep: Callable[[float], None] = time.sleep) -> None:
    """SIGTERM the process group ``pid`` leads, SIGKILL after ``grace_s``."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGTERM)
    t0 = clock()
    while alive(pid) and clock() - t0 < grace_s:
        sleep(0.2)
    if alive(pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        t1 = clock()
        while alive(pid) and clock() - t1 < 5:
            sleep(0.1)


# --------------------------------------------------------------------------------------------
# ports
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class PortHolder:
    port: int
    pid: int | None = None
    command: str = ""

    def text(self) -> str:
        if self.pid is None:
            return f"port {self.port} is in use (the OS does not say by which process)"
        return f"port {self.port} is in use by PID {self.pid} ({self.command[:120] or '?'})"


def _listening(port: int) -> bool:
    """Whether something accepts on ``port``: a bind as a server would do it, then a loopback connect."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return True
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as c:
        c.settimeout(0.5)
        return c.connect_ex(("127.0.0.1", port)) == 0


def _listen_inodes(port: int) -> set[str]:
    found: set[str] = set()
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(OSError):
            for line in (PROC / "net" / table).read_text(encoding="ascii", errors="replace").splitlines()[1:5000]:
                cols = line.split()
                if len(cols) > 9 and cols[3] == "0A" and cols[1].rsplit(":", 1)[-1] == f"{port:04X}":
                    found.add(cols[9])
    return found


def _owner(inodes: set[str]) -> tuple[int, str] | None:
    """(pid, command line) of the process holding one of the socket ``inodes`` (our own user's only)."""
    wanted = {f"socket:[{i}]" for i in inodes}
    with contextlib.suppress(OSError):
        for entry in sorted(PROC.iterdir(), key=lambda p: p.name)[:100_000]:
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError):
                for fd in (entry / "fd").iterdir():
                    with contextlib.suppress(OSError):
                        if os.readlink(fd) in wanted:
                            return int(entry.name), " ".join(_proc_cmdline(int(entry.name)))
    return None


def port_holder(port: int) -> PortHolder | None:
    """Who holds ``port`` (None: it is free); the PID when the OS says."""
    if not _listening(port):
        return None
    inodes = _listen_inodes(port)
    owner = _owner(inodes) if inodes else None
    return PortHolder(port, *owner) if owner is not None else PortHolder(port)


__all__ = ["Identity", "PortHolder", "alive", "identity", "mismatch", "port_holder", "read_pid", "start_detached",
           "stop_group"]
