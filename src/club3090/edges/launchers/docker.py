"""The Docker launcher: ``docker compose -f DIR/compose.yml up -d``; the running containers' ids go
into the state file and ``down`` stops only when they are still the ones it started."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from club3090.edges.boot import Runner, RunResult
from club3090.edges.launchers import base
from club3090.errors import LauncherUnavailable

NAME = "docker"
FIX_DOCKER = "install Docker Engine (https://docs.docker.com/engine/install/), or use --launcher native"
FIX_ENGINE = "start it (`sudo systemctl start docker`) and let your user use it (`sudo usermod -aG docker $USER`)"
FIX_COMPOSE = "install the compose plugin (`sudo apt-get install docker-compose-plugin`)"
FIX_NVIDIA = ("install the NVIDIA Container Toolkit and run `sudo nvidia-ctk runtime configure --runtime=docker "
              "&& sudo systemctl restart docker`")


def compose_argv(compose: Path, *args: str) -> list[str]:
    return ["docker", "compose", "-f", str(compose), *args]


def preflight_docker(*, run: Runner = base.run_process, which: base.Which | None = None) -> None:
    """Docker engine reachable, compose plugin present, NVIDIA runtime registered."""
    import shutil

    if (which or shutil.which)("docker") is None:
        raise LauncherUnavailable(f"docker is not on PATH: {FIX_DOCKER}")
    info = run(["docker", "info", "--format", "{{json .Runtimes}}"], 30)
    if info.returncode != 0:
        why = base.first_line(info.stderr) or base.first_line(info.stdout) or f"exit {info.returncode}"
        raise LauncherUnavailable(f"the Docker engine is not reachable ({why}): {FIX_ENGINE}")
    compose = run(["docker", "compose", "version"], 30)
    if compose.returncode != 0:
        raise LauncherUnavailable(f"the docker compose plugin is missing: {FIX_COMPOSE}")
    if "nvidia" not in info.stdout.lower():
        raise LauncherUnavailable(f"the NVIDIA container runtime is not registered with Docker: {FIX_NVIDIA}")


@dataclass(frozen=True)
class DockerLauncher(base.OnThisHost):
    """``--launcher docker`` (the default)."""

    name: str = NAME
    help: str = "docker (docker compose, default)"

    def _compose(self, directory: Path, *args: str, timeout: float = 60) -> RunResult:
        return self.run(compose_argv(directory / base.COMPOSE_NAME, *args), timeout)

    def containers(self, directory: Path) -> tuple[str, ...]:
        """The ids of the bundle's running containers."""
        ps = self._compose(directory, "ps", "--status", "running", "-q", timeout=30)
        return tuple(sorted(ln.strip() for ln in ps.stdout.splitlines() if ln.strip())) if ps.returncode == 0 else ()

    def preflight(self, server: base.ServerFinder | None, *, starting: bool = True) -> base.Preflighted:
        if starting:
            preflight_docker(run=self.run, which=self.which)
        return base.Preflighted()

    def start(self, job: base.Job) -> base.Started:
        done = self._compose(job.directory, "up", "-d", timeout=900)
        if done.returncode != 0:
            return base.Started(error="docker compose up failed", detail=done.stderr or done.stdout)
        return base.Started({"containers": list(self.containers(job.directory))})

    def running(self, directory: Path, state: Mapping[str, Any]) -> bool:
        return bool(self.containers(directory))

    def settled(self, directory: Path, state: Mapping[str, Any]) -> Mapping[str, Any]:
        return {"containers": list(self.containers(directory))}

    def status(self, directory: Path, state: Mapping[str, Any], *, tail: int) -> base.Status:
        ids = self.containers(directory)
        return base.Status(bool(ids), f"container {state.get('container')}",
                           self.logs(directory, state, lines=tail) if ids else "", {"containers": list(ids)})

    def stop(self, directory: Path, state: Mapping[str, Any]) -> base.Stopped:
        ids = self.containers(directory)
        recorded = tuple(sorted(str(i) for i in state.get("containers") or ()))
        if ids and recorded and ids != recorded:
            return base.Stopped(False, "", f"the running containers ({', '.join(i[:12] for i in ids)}) are not the ones "
                                           f"`up` started ({', '.join(i[:12] for i in recorded)})")
        done = self._compose(directory, "down", timeout=300)
        if done.returncode != 0:
            return base.Stopped(False, f"docker compose down failed: {base.first_line(done.stderr)}")
        return base.Stopped(bool(ids), "docker compose down: ok")

    def logs(self, directory: Path, state: Mapping[str, Any], *, lines: int) -> str:
        done = self._compose(directory, "logs", "--no-color", "--tail", str(lines))
        return done.stdout + done.stderr

    def follow(self, directory: Path, state: Mapping[str, Any], emit: Callable[[str], None]) -> int:
        return subprocess.run(compose_argv(directory / base.COMPOSE_NAME, "logs", "-f", "--no-color"),
                              check=False).returncode

    def writes(self, directory: Path) -> tuple[Path, ...]:
        return ()


LAUNCHER = DockerLauncher()

__all__ = ["FIX_COMPOSE", "FIX_DOCKER", "FIX_ENGINE", "FIX_NVIDIA", "LAUNCHER", "NAME", "DockerLauncher",
           "compose_argv", "preflight_docker"]
