"""The native launcher: the engine's server on this host, detached (its own session), stdout and
stderr in ``DIR/logs/server.log``, its PID in ``DIR/server.pid`` and its identity in the state file.

The server command is the engine's (:func:`vllm_server`, :func:`llama_server`): ``--vllm`` takes a
path or a command line (``"python -m vllm.entrypoints.openai.api_server"``, split like a shell
would, never run by one); the version comes from ``--version``, else from the module with that
interpreter (``python -c 'import vllm; print(vllm.__version__)'``): the CPU build's console script
cannot report its own.
"""

from __future__ import annotations

import os
import shlex
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from club3090.edges.boot import Runner, RunResult
from club3090.edges.launchers import base, process
from club3090.errors import LauncherUnavailable, UsageError

NAME = "native"
FIX_VLLM = ("install it (`pip install vllm`), pass --vllm PATH or --vllm \"python -m "
            "vllm.entrypoints.openai.api_server\", or use --launcher docker")
FIX_LLAMA = ("install llama.cpp's `llama-server` (https://github.com/ggml-org/llama.cpp) or "
             "`pip install 'llama-cpp-python[server]'`, pass --llama-server-bin PATH, or use --launcher docker")
API_SERVER = "vllm.entrypoints.openai.api_server"   # takes --model, not `serve MODEL`
VERSION_CODE = "import vllm; print(vllm.__version__)"


def _which(which: base.Which | None) -> base.Which:
    import shutil

    return which or shutil.which


def split_command(given: str, which: base.Which | None = None) -> tuple[str, ...]:
    """``--vllm``'s value as argv: an existing file is one path (spaces and all); anything else is
    split like a shell would (no shell runs it) and its first word found on PATH."""
    if Path(given).is_file():
        return (str(Path(given).absolute()),)
    try:
        words = shlex.split(given)
    except ValueError as exc:
        raise UsageError(f"--vllm {given!r}: {exc}") from None
    if not words:
        raise UsageError("--vllm is empty")
    head = words[0]
    if "/" not in head:
        head = _which(which)(head) or head
    return (str(Path(head).absolute()) if "/" in head else head, *words[1:])


def _executable(exe: str, flag: str, fix: str) -> None:
    if not os.access(exe, os.X_OK) or not Path(exe).is_file():
        raise LauncherUnavailable(f"{flag} {exe} is not an executable file: {fix}")


def _interpreter(argv: tuple[str, ...]) -> str | None:
    """The Python that runs ``argv``: the head of ``python -m ...``, else a script's ``#!`` line."""
    if len(argv) > 2 and argv[1] == "-m":
        return argv[0]
    try:
        with open(argv[0], "rb") as fh:
            first = fh.readline(512).decode("utf-8", "replace").strip()
    except OSError:
        return None
    if not first.startswith("#!"):
        return None
    words = first[2:].split()
    if words and words[0].endswith("/env") and len(words) > 1:
        words = words[1:]
    return words[0] if words and "python" in Path(words[0]).name else None


def _vllm_version(argv: tuple[str, ...], run: Runner) -> tuple[str | None, RunResult]:
    """(version, the run that gave it): ``ARGV --version``, else the module through its interpreter."""
    done = run([*argv, "--version"], 120) if not (len(argv) > 2 and argv[1] == "-m") else RunResult(1)
    if done.returncode == 0 and done.stdout.strip():
        return (done.stdout.strip().splitlines() or [""])[-1].strip().lstrip("v") or None, done
    python = _interpreter(argv)
    if python is None:
        return None, done
    by_module = run([python, "-c", VERSION_CODE], 120)
    if by_module.returncode != 0:
        return None, by_module if done.returncode == 1 and not done.stderr else done
    return (by_module.stdout.strip().splitlines() or [""])[-1].strip().lstrip("v") or None, by_module


def find_vllm(given: str | None, pin: str | None, *, run: Runner = base.run_process,
              which: base.Which | None = None) -> base.ServerCommand:
    """``--vllm PATH|COMMAND`` or ``vllm`` on PATH; its version compared with the engine pin."""
    if given:
        argv = split_command(given, which)
    else:
        found = _which(which)("vllm")
        if found is None:
            raise LauncherUnavailable(f"vllm is not on PATH: {FIX_VLLM}")
        argv = (found,)
    _executable(argv[0], "--vllm", FIX_VLLM)
    version, done = _vllm_version(argv, run)
    if version is None:
        why = base.first_line(done.stderr) or base.first_line(done.stdout) or f"exit {done.returncode}"
        raise LauncherUnavailable(f"`{' '.join(argv)} --version` failed ({why}) and the vllm module does not "
                                  f"report one: {FIX_VLLM}")
    wanted = (pin or "").split("@", 1)[-1].lstrip("v") or None
    note = None
    if wanted and version != wanted:
        note = f"vllm {version} is installed; the profile was validated on {wanted}"
    return base.ServerCommand(argv, version, note, model_flag="--model" if argv[-1] == API_SERVER else None)


def vllm_server(given: str | None, pin: str | None) -> base.ServerFinder:
    return lambda run, which: find_vllm(given, pin, run=run, which=which)


def find_llama_server(binary: str | None, *, run: Runner = base.run_process, which: base.Which | None = None,
                      has_module: Callable[[str], bool] | None = None) -> base.ServerCommand:
    """``--llama-server-bin PATH``, else ``llama-server`` on PATH, else llama-cpp-python's server
    (``python -m llama_cpp.server``) when that package is installed."""
    import importlib.util
    import sys

    exe = str(Path(binary).absolute()) if binary else _which(which)("llama-server")
    if exe is None:
        found = (has_module or (lambda m: importlib.util.find_spec(m) is not None))("llama_cpp.server")
        if found:
            return base.ServerCommand((sys.executable, "-m", "llama_cpp.server"), None,
                                      "no llama-server found; serving with llama-cpp-python's server "
                                      "(python -m llama_cpp.server)", dialect="llama-cpp-python")
        raise LauncherUnavailable(f"no llama-server on PATH and no llama-cpp-python server: {FIX_LLAMA}")
    _executable(exe, "--llama-server-bin", FIX_LLAMA)
    done = run([exe, "--version"], 60)
    if done.returncode != 0:
        raise LauncherUnavailable(f"`{exe} --version` failed ({base.first_line(done.stderr) or done.returncode}): "
                                  f"{FIX_LLAMA}")
    return base.ServerCommand((exe,), base.first_line(done.stdout + "\n" + done.stderr) or None, dialect="llama-server")


def llama_server(binary: str | None) -> base.ServerFinder:
    return lambda run, which: find_llama_server(binary, run=run, which=which)


@dataclass(frozen=True)
class NativeLauncher(base.OnThisHost):
    """``--launcher native``."""

    name: str = NAME
    help: str = "native (the engine's server on this host)"
    grace_s: float | None = None

    def preflight(self, server: base.ServerFinder | None, *, starting: bool = True) -> base.Preflighted:
        if server is None:
            return base.Preflighted()
        found = server(self.run, self.which)
        return base.Preflighted(found, (found.note,) if found.note else ())

    def start(self, job: base.Job) -> base.Started:
        if job.server is None:
            raise UsageError("the native launcher starts a server found by its preflight")
        argv = job.server.command(job.argv)
        ident = process.start_detached(argv, job.env, job.directory, job.directory / base.LOGS_DIR / base.LOG_NAME)
        return base.Started({"pid": ident.pid, "process": ident.to_json()})

    def running(self, directory: Path, state: Mapping[str, Any]) -> bool:
        pid = state.get("pid")
        return isinstance(pid, int) and process.alive(pid)

    def settled(self, directory: Path, state: Mapping[str, Any]) -> Mapping[str, Any]:
        """The handle once the server answers: the command line it runs now (after any exec)."""
        pid = state.get("pid")
        live = process.identity(pid) if isinstance(pid, int) else None
        recorded = dict(state.get("process") or {})
        if live is not None and recorded and live.start_time == recorded.get("start_time"):
            recorded["cmdline"] = list(live.cmdline)
        return {"process": recorded} if recorded else {}

    def status(self, directory: Path, state: Mapping[str, Any], *, tail: int) -> base.Status:
        pid = process.read_pid(directory)
        live = process.identity(pid) if pid is not None else None
        recorded = state.get("process")
        ok = live is not None and (not recorded or process.mismatch(recorded, live) is None)
        return base.Status(ok, f"PID {pid}" if pid is not None else "no PID",
                           base.log_tail(directory / base.LOGS_DIR / base.LOG_NAME, tail), {"pid": pid})

    def stop(self, directory: Path, state: Mapping[str, Any]) -> base.Stopped:
        pid = process.read_pid(directory)
        if pid is None:
            return base.Stopped(False, "was not running (no server.pid)")
        if state.get("pid") not in (None, pid):
            return base.Stopped(False, "", f"server.pid names PID {pid}, the state file PID {state.get('pid')}: "
                                           "not the server `up` started")
        live = process.identity(pid)
        if live is None:
            (directory / base.PID_NAME).unlink(missing_ok=True)
            return base.Stopped(False, f"was not running (PID {pid} has exited)")
        recorded = state.get("process")
        if not isinstance(recorded, Mapping) or not recorded.get("start_time"):
            return base.Stopped(False, "", f"the state file records no identity for PID {pid} (a folder from an older "
                                           "club3090, or edited): stop it yourself if it is yours")
        why = process.mismatch(recorded, live)
        if why is not None:
            return base.Stopped(False, "", why)
        process.stop_group(pid, grace_s=base.STOP_GRACE_S if self.grace_s is None else self.grace_s)
        (directory / base.PID_NAME).unlink(missing_ok=True)
        return base.Stopped(True, f"stopped PID {pid}")

    def logs(self, directory: Path, state: Mapping[str, Any], *, lines: int) -> str:
        # a start-up log read whole for the receipt is capped like boot_receipt's (64 MiB)
        return base.log_tail(directory / base.LOGS_DIR / base.LOG_NAME, lines, limit=min(max(lines * 1024, 1 << 16), 1 << 26))

    def follow(self, directory: Path, state: Mapping[str, Any], emit: Callable[[str], None]) -> int:
        path = directory / base.LOGS_DIR / base.LOG_NAME
        try:
            with open(path, "rb") as fh:
                fh.seek(0, 2)
                while True:
                    line = fh.readline(1 << 16)
                    if line:
                        emit(line.decode("utf-8", "replace").rstrip("\n"))
                    else:
                        time.sleep(0.5)
        except OSError as exc:
            emit(f"cannot read {path}: {exc}")
            return 1

    def writes(self, directory: Path) -> tuple[Path, ...]:
        return (directory / base.PID_NAME, directory / base.LOGS_DIR / base.LOG_NAME)


LAUNCHER = NativeLauncher()

__all__ = ["FIX_LLAMA", "FIX_VLLM", "LAUNCHER", "NAME", "NativeLauncher", "find_llama_server", "find_vllm",
           "llama_server", "split_command", "vllm_server"]
