"""Bring up the emitted Ray launch scripts as a two-node cluster on loopback (one machine, CPU only).

Both nodes are real ``ray start`` processes with their own temp folders; the head's ``vllm serve``
is replaced by a stand-in (``VLLM=...``) that joins the cluster with ``ray.init()`` and records the
nodes and GPUs it sees. GPUs are declared (``--num-gpus`` in the scripts), which Ray accepts
without a GPU. Clean-up: the processes the scripts started (their sessions, a marker variable in their
environment, and their descendants) and only those are stopped by PID at the end; ``ray stop``
is not used because it stops every Ray process of the user on the machine.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.llama_server import free_port

MARKER = "CLUB3090_TEST_RAY_CLUSTER"
RAY_BIN = Path(sys.executable).parent / "ray"

STANDIN = '''#!{python}
"""A stand-in for `vllm serve` on a Ray cluster: join it, record what it sees, exit 0."""
import json, os, sys
import ray
args = sys.argv[1:]
ray.init(logging_level="ERROR", log_to_driver=False)
nodes = [n for n in ray.nodes() if n["Alive"]]
report = {{"argv": args, "ray_address": os.environ.get("RAY_ADDRESS"),
          "vllm_host_ip": os.environ.get("VLLM_HOST_IP"),
          "nodes": len(nodes), "node_ids": sorted(n["NodeID"] for n in nodes),
          "gpus_per_node": sorted(n["Resources"].get("GPU", 0) for n in nodes),
          "node_addresses": sorted(n["NodeManagerAddress"] for n in nodes),
          "gpus": ray.cluster_resources().get("GPU", 0),
          "env": {{k: os.environ.get(k) for k in ("HF_HUB_OFFLINE", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")}}}}
ray.shutdown()
with open({report!r}, "w") as fh:
    json.dump(report, fh)
'''


def standin(folder: Path, report: Path) -> Path:
    path = folder / "vllm-standin"
    path.write_text(STANDIN.format(python=sys.executable, report=str(report)), encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@dataclass
class Cluster:
    root: Path
    marker: str = field(default_factory=lambda: uuid.uuid4().hex)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    temps: list[Path] = field(default_factory=list)

    def env(self, name: str, **extra: str) -> dict[str, str]:
        tmp = Path("/tmp") / f"c3r-{self.marker[:8]}-{name}"   # Ray's socket paths must stay short
        self.temps.append(tmp)
        args = (f"--num-cpus 1 --temp-dir {tmp} --object-store-memory 80000000 "
                f"--dashboard-agent-listen-port {free_port()} --metrics-export-port {free_port()} "
                f"--runtime-env-agent-port {free_port()}")
        if name == "head":          # the dashboard's head process binds its port even with the dashboard off
            args += f" --dashboard-port {free_port()}"
        env = {k: v for k, v in os.environ.items() if not k.upper().endswith("_PROXY")}
        env.update({MARKER: self.marker, "RAY": str(RAY_BIN), "PYTHON": sys.executable, "RAY_START_ARGS": args,
                    "RAY_USAGE_STATS_ENABLED": "0", "PYTHONUNBUFFERED": "1"})
        env.update(extra)
        return env

    def start(self, script: Path, name: str, **extra: str) -> subprocess.Popen[bytes]:
        log = open(self.root / f"{name}.log", "wb")     # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(["/bin/sh", str(script)], stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=self.env(name, **extra), start_new_session=True)
        log.close()
        self.procs.append(proc)
        return proc

    def log(self, name: str) -> str:
        with contextlib.suppress(OSError):
            return (self.root / f"{name}.log").read_text(encoding="utf-8", errors="replace")[-6000:]
        return ""

    def marked(self) -> list[int]:
        """PIDs of this user's processes the scripts started: in the sessions of the scripts (Ray's
        daemons stay there), carrying the marker in their environment, or descended from either
        (Ray's worker processes start their own sessions; ``setproctitle`` may clobber their environ)."""
        needle = f"{MARKER}={self.marker}".encode()
        sessions = {p.pid for p in self.procs}
        table: dict[int, tuple[int, int]] = {}
        found: set[int] = set()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            with contextlib.suppress(OSError, ValueError, IndexError):
                if entry.stat().st_uid != os.getuid():
                    continue
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                if fields[0] == "Z":
                    continue
                pid, ppid, sid = int(entry.name), int(fields[1]), int(fields[3])
                table[pid] = (ppid, sid)
                if sid in sessions or needle in (entry / "environ").read_bytes().split(b"\0"):
                    found.add(pid)
        grew = True
        while grew:
            children = {pid for pid, (ppid, _sid) in table.items() if ppid in found} - found
            grew = bool(children)
            found |= children
        return sorted(found)

    def stop(self, grace_s: float = 15.0) -> list[int]:
        """SIGTERM every marked process, SIGKILL what is left after ``grace_s``; returns survivors."""
        for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
            pids = self.marked()
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)
            deadline = time.monotonic() + wait
            while self.marked() and time.monotonic() < deadline:
                for proc in self.procs:
                    proc.poll()
                time.sleep(0.2)
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        survivors = self.marked()
        if not survivors:
            for tmp in self.temps:
                shutil.rmtree(tmp, ignore_errors=True)
        return survivors


@contextlib.contextmanager
def loopback_cluster(root: Path) -> Iterator[Cluster]:
    cluster = Cluster(root)
    try:
        yield cluster
    finally:
        survivors = cluster.stop()
        assert not survivors, f"Ray processes left running: {survivors}"
