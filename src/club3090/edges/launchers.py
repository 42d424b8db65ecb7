"""Launchers for a bundle folder: Docker (``docker compose``) and native (``vllm serve`` on the host).

Each has a preflight that raises :class:`club3090.errors.LauncherUnavailable` naming the fix
(exit 69) before anything is written; a start; a stop; and both share ``wait_ready``: poll
``/v1/models`` with a spinner showing the elapsed time and the last log line, stop early when the
process died. The native server is started detached (its own session), logs to ``DIR/logs/``,
its PID in ``DIR/server.pid``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from club3090.edges.boot import Runner, RunResult
from club3090.edges.openai_client import Http, urllib_http
from club3090.errors import LauncherUnavailable

LOG_NAME = "server.log"
PID_NAME = "server.pid"
READY_DEADLINE_S = 900.0
POLL_S = 0.5
STOP_GRACE_S = 20.0
SPINNER = "|/-\\"
_STARTED: list[subprocess.Popen[bytes]] = []
_SECRET_ENV = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "OPENAI_API_KEY")

FIX_DOCKER = "install Docker Engine (https://docs.docker.com/engine/install/), or use --launcher native"
FIX_ENGINE = "start it (`sudo systemctl start docker`) and let your user use it (`sudo usermod -aG docker $USER`)"
FIX_COMPOSE = "install the compose plugin (`sudo apt-get install docker-compose-plugin`)"
FIX_NVIDIA = ("install the NVIDIA Container Toolkit and run `sudo nvidia-ctk runtime configure --runtime=docker "
              "&& sudo systemctl restart docker`")
FIX_VLLM = "install it (`pip install vllm`), pass --vllm PATH, or use --launcher docker"
FIX_LLAMA = ("install llama.cpp's `llama-server` (https://github.com/ggml-org/llama.cpp) or "
             "`pip install 'llama-cpp-python[server]'`, pass --llama-server-bin PATH, or use --launcher docker")


def run_process(argv: Sequence[str], timeout: float) -> RunResult:
    """Run a launcher tool (docker, vllm --version): no shell, output captured, a timeout is rc 124,
    a missing executable rc 127."""
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False,
                              errors="replace", stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return RunResult(124, "", f"timed out after {timeout:.0f}s")
    except OSError as exc:
        return RunResult(127, "", str(exc))
    return RunResult(done.returncode, done.stdout or "", done.stderr or "")


def _first_line(text: str) -> str:
    return next((ln.strip() for ln in text.splitlines() if ln.strip()), "")[:200]


# --------------------------------------------------------------------------------------------
# preflight
# --------------------------------------------------------------------------------------------

def preflight_docker(*, run: Runner = run_process,
                     which: Callable[[str], str | None] | None = None) -> None:
    """Docker engine reachable, compose plugin present, NVIDIA runtime registered."""
    import shutil

    if (which or shutil.which)("docker") is None:
        raise LauncherUnavailable(f"docker is not on PATH: {FIX_DOCKER}")
    info = run(["docker", "info", "--format", "{{json .Runtimes}}"], 30)
    if info.returncode != 0:
        why = _first_line(info.stderr) or _first_line(info.stdout) or f"exit {info.returncode}"
        raise LauncherUnavailable(f"the Docker engine is not reachable ({why}): {FIX_ENGINE}")
    compose = run(["docker", "compose", "version"], 30)
    if compose.returncode != 0:
        raise LauncherUnavailable(f"the docker compose plugin is missing: {FIX_COMPOSE}")
    if "nvidia" not in info.stdout.lower():
        raise LauncherUnavailable(f"the NVIDIA container runtime is not registered with Docker: {FIX_NVIDIA}")


@dataclass(frozen=True, slots=True)
class NativeEngine:
    executable: str
    version: str | None
    pin_note: str | None       # the version differs from the engine pin, else None


def _version_of(exe: str, *, flag: str, fix: str, timeout_s: int, run: Runner) -> RunResult:
    """``EXE --version`` of a native server binary, or LauncherUnavailable naming ``flag`` and ``fix``."""
    if not os.access(exe, os.X_OK) or not Path(exe).is_file():
        raise LauncherUnavailable(f"{flag} {exe} is not an executable file: {fix}")
    done = run([exe, "--version"], timeout_s)
    if done.returncode != 0:
        raise LauncherUnavailable(f"`{exe} --version` failed ({_first_line(done.stderr) or done.returncode}): "
                                  f"{fix}")
    return done


def preflight_native(vllm: str | None, pin: str | None, *, run: Runner = run_process,
                     which: Callable[[str], str | None] | None = None) -> NativeEngine:
    """``--vllm PATH`` or ``vllm`` on PATH; ``vllm --version`` compared with the engine pin."""
    import shutil

    exe = str(Path(vllm).absolute()) if vllm else (which or shutil.which)("vllm")
    if exe is None:
        raise LauncherUnavailable(f"vllm is not on PATH: {FIX_VLLM}")
    done = _version_of(exe, flag="--vllm", fix=FIX_VLLM, timeout_s=120, run=run)
    version = (done.stdout.strip().splitlines() or [""])[-1].strip().lstrip("v") or None
    wanted = (pin or "").split("@", 1)[-1].lstrip("v") or None
    note = None
    if version and wanted and version != wanted:
        note = f"vllm {version} is installed; the profile was validated on {wanted}"
    return NativeEngine(exe, version, note)


@dataclass(frozen=True, slots=True)
class LlamaServerBin:
    """The native llama.cpp server: its command prefix and the flag dialect it speaks."""

    argv: tuple[str, ...]
    dialect: str               # "llama-server" or "llama-cpp-python"
    version: str | None


def preflight_llama_server(binary: str | None, *, run: Runner = run_process,
                           which: Callable[[str], str | None] | None = None,
                           has_module: Callable[[str], bool] | None = None) -> LlamaServerBin:
    """``--llama-server-bin PATH``, else ``llama-server`` on PATH, else llama-cpp-python's server
    (``python -m llama_cpp.server``) when that package is installed."""
    import importlib.util
    import shutil
    import sys

    exe = str(Path(binary).absolute()) if binary else (which or shutil.which)("llama-server")
    if exe is None:
        found = (has_module or (lambda m: importlib.util.find_spec(m) is not None))("llama_cpp.server")
        if found:
            return LlamaServerBin((sys.executable, "-m", "llama_cpp.server"), "llama-cpp-python", None)
        raise LauncherUnavailable(f"no llama-server on PATH and no llama-cpp-python server: {FIX_LLAMA}")
    done = _version_of(exe, flag="--llama-server-bin", fix=FIX_LLAMA, timeout_s=60, run=run)
    return LlamaServerBin((exe,), "llama-server", _first_line(done.stdout + "\n" + done.stderr) or None)


# --------------------------------------------------------------------------------------------
# native start / stop
# --------------------------------------------------------------------------------------------

def start_native(argv: Sequence[str], env: Mapping[str, str], directory: Path, logs: Path) -> int:
    """Start ``argv`` detached (its own session), stdout+stderr to ``logs/server.log``; write the PID file."""
    logs.mkdir(parents=True, exist_ok=True)
    child_env = {k: v for k, v in os.environ.items() if k not in _SECRET_ENV and not k.upper().endswith("_PROXY")}
    child_env.update(env)
    with open(logs / LOG_NAME, "ab") as log:
        proc = subprocess.Popen(list(argv), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                cwd=str(directory), env=child_env, start_new_session=True)
    from club3090.edges.files import atomic_write_text

    atomic_write_text(directory / PID_NAME, f"{proc.pid}\n")
    _STARTED.append(proc)   # outlives this call by design; `alive` reaps it once it exits
    return proc.pid


def read_pid(directory: Path) -> int | None:
    try:
        text = (directory / PID_NAME).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if text.isdigit() else None


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


def stop_native(directory: Path, *, grace_s: float = STOP_GRACE_S, clock: Callable[[], float] = time.monotonic,
                sleep: Callable[[float], None] = time.sleep) -> bool:
    """SIGTERM the server's process group, SIGKILL after ``grace_s``; remove the PID file. True if it ran."""
    pid = read_pid(directory)
    if pid is None or not alive(pid):
        (directory / PID_NAME).unlink(missing_ok=True)
        return False
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
    (directory / PID_NAME).unlink(missing_ok=True)
    return True


# --------------------------------------------------------------------------------------------
# docker start / stop
# --------------------------------------------------------------------------------------------

def compose_argv(compose: Path, *args: str) -> list[str]:
    return ["docker", "compose", "-f", str(compose), *args]


def docker_up(compose: Path, run: Runner = run_process) -> RunResult:
    return run(compose_argv(compose, "up", "-d"), 900)


def docker_down(compose: Path, run: Runner = run_process) -> RunResult:
    return run(compose_argv(compose, "down"), 300)


def docker_logs(compose: Path, run: Runner = run_process, tail: int = 200) -> str:
    done = run(compose_argv(compose, "logs", "--no-color", "--tail", str(tail)), 60)
    return done.stdout + done.stderr


# --------------------------------------------------------------------------------------------
# readiness
# --------------------------------------------------------------------------------------------

def log_tail(path: Path, lines: int = 20, limit: int = 64 * 1024) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - limit))
            data = fh.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(data.splitlines()[-lines:])


@dataclass(frozen=True, slots=True)
class Ready:
    ok: bool
    seconds: float
    why: str = ""              # "exited", "timeout"


def models_ready(url: str, http: Http = urllib_http) -> bool:
    resp = http("GET", f"{url}/v1/models", None, 5.0)
    return resp.error is None and resp.status == 200


def wait_ready(url: str, *, running: Callable[[], bool], last_line: Callable[[], str],
               show: Callable[[str], None] | None = None, http: Http = urllib_http,
               deadline_s: float = READY_DEADLINE_S, clock: Callable[[], float] = time.monotonic,
               sleep: Callable[[float], None] = time.sleep) -> Ready:
    """Poll ``url/v1/models`` until 200, the process exits, or ``deadline_s``; ``show`` gets the spinner."""
    t0 = clock()
    i = 0
    while True:
        elapsed = clock() - t0
        if models_ready(url, http):
            return Ready(True, elapsed)
        if not running():
            return Ready(False, elapsed, "exited")
        if elapsed > deadline_s:
            return Ready(False, elapsed, "timeout")
        if show is not None:
            show(f"{SPINNER[i % len(SPINNER)]} waiting for {url}/v1/models  {elapsed:4.0f}s  {last_line()[:100]}")
        i += 1
        sleep(POLL_S)


__all__ = [
    "LOG_NAME",
    "PID_NAME",
    "LlamaServerBin",
    "NativeEngine",
    "Ready",
    "alive",
    "compose_argv",
    "docker_down",
    "docker_logs",
    "docker_up",
    "log_tail",
    "models_ready",
    "preflight_docker",
    "preflight_llama_server",
    "preflight_native",
    "read_pid",
    "run_process",
    "start_native",
    "stop_native",
    "wait_ready",
]
