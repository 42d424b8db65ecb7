"""The ``Launcher`` protocol and what every launcher shares: the values a launcher takes and
returns, the runner for its tools, the log tail, and the readiness wait.

A launcher starts a written bundle folder on this machine (docker, native) or writes the files
other machines start (ray, k8s). It never decides anything about the model: the pipeline hands it
a :class:`Job` (the bundle's argv, env, compose file, URL, served name) and reads back frozen
values (:class:`Started`, :class:`Stopped`, :class:`Status`). Readiness is the same for all:
*this* server is alive and ``GET /v1/models`` lists *this* served model name.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from club3090.edges.boot import Runner, run_tool
from club3090.edges.http_transport import Http, loads
from club3090.edges.openai_client import urllib_http

LOG_NAME = "server.log"
PID_NAME = "server.pid"
COMPOSE_NAME = "compose.yml"
LOGS_DIR = "logs"
READY_DEADLINE_S = 900.0
POLL_S = 0.5
PROBE_TIMEOUT_S = 1.5          # one /v1/models probe: short, so an exit is seen within 2 s
STOP_GRACE_S = 20.0
SPINNER = "|/-\\"

Which = Callable[[str], "str | None"]


run_process: Runner = run_tool                # a launcher runs its tools with the one runner


def first_line(text: str) -> str:
    return next((ln.strip() for ln in text.splitlines() if ln.strip()), "")[:200]


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


# --------------------------------------------------------------------------------------------
# the values a launcher takes and returns
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ServerCommand:
    """The native server's command prefix (``vllm``, ``python -m vllm.entrypoints.openai.api_server``,
    ``llama-server``), how it takes the model, and what the preflight learnt about it."""

    argv: tuple[str, ...]
    version: str | None = None
    note: str | None = None           # e.g. the version differs from the engine pin
    model_flag: str | None = None     # "--model" for the api_server module; None: keep the bundle's form
    dialect: str = ""                 # llama.cpp: "llama-server" or "llama-cpp-python"

    def command(self, bundle_argv: Sequence[str]) -> list[str]:
        """The bundle's ``vllm serve MODEL ...`` (or ``llama-server ...``) with this prefix."""
        rest = list(bundle_argv[1:])
        if self.model_flag and rest[:1] == ["serve"] and len(rest) > 1:
            rest = [self.model_flag, rest[1], *rest[2:]]
        return [*self.argv, *rest]


ServerFinder = Callable[[Runner, "Which | None"], ServerCommand]


@dataclass(frozen=True, slots=True)
class Preflighted:
    server: ServerCommand | None = None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Job:
    """What a launcher starts: a written bundle folder."""

    directory: Path
    argv: tuple[str, ...]              # the bundle's native argv (``vllm serve MODEL ...``)
    env: Mapping[str, str]
    url: str
    served_model: str
    port: int
    server: ServerCommand | None = None


@dataclass(frozen=True, slots=True)
class Started:
    """A start: the handle the state file records (PID + identity, or container ids), or why not."""

    handle: Mapping[str, Any] = field(default_factory=dict)
    error: str | None = None
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Stopped:
    stopped: bool
    message: str
    refused: str | None = None         # a mismatch: nothing was signalled


@dataclass(frozen=True, slots=True)
class Status:
    running: bool
    who: str                           # "PID 123" / "container abc"
    tail: str = ""
    handle: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Ready:
    ok: bool
    seconds: float
    why: str = ""              # "exited", "timeout"


class Launcher(Protocol):
    """One way to run a bundle. ``starts`` False: the launch is written for other machines only."""

    @property
    def name(self) -> str: ...

    @property
    def starts(self) -> bool: ...

    @property
    def multi_node(self) -> bool: ...

    @property
    def help(self) -> str: ...

    def preflight(self, server: ServerFinder | None, *, starting: bool = True) -> Preflighted:
        """What must be true before anything is written (LauncherUnavailable names the fix); the
        native server is found even when not ``starting``: the bundle's serve.sh names it."""

    def start(self, job: Job) -> Started: ...

    def running(self, directory: Path, state: Mapping[str, Any]) -> bool: ...

    def status(self, directory: Path, state: Mapping[str, Any], *, tail: int) -> Status: ...

    def stop(self, directory: Path, state: Mapping[str, Any]) -> Stopped: ...

    def logs(self, directory: Path, state: Mapping[str, Any], *, lines: int) -> str: ...

    def follow(self, directory: Path, state: Mapping[str, Any], emit: Callable[[str], None]) -> int: ...

    def writes(self, directory: Path) -> tuple[Path, ...]: ...


@dataclass(frozen=True)
class OnThisHost:
    """The fields of a launcher that starts a server on this machine (docker, native): its tools
    run through ``run`` and are found with ``which`` (tests pass their own)."""

    name: str = ""
    help: str = ""
    starts: bool = True
    multi_node: bool = False
    run: Runner = run_process
    which: Which | None = None


# --------------------------------------------------------------------------------------------
# readiness: THIS server lists THIS model
# --------------------------------------------------------------------------------------------

def served_ids(url: str, http: Http = urllib_http, timeout: float = PROBE_TIMEOUT_S) -> tuple[str, ...] | None:
    """The model ids ``url/v1/models`` lists; None when it does not answer 200 with a model list."""
    resp = http("GET", f"{url}/v1/models", None, timeout)
    if resp.error is not None or resp.status != 200:
        return None
    try:
        doc = loads(resp.body[: 1 << 20])
    except ValueError:
        return None
    data = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(data, list):
        return None
    return tuple(str(m.get("id")) for m in data[:1000] if isinstance(m, dict) and m.get("id") is not None)


def models_ready(url: str, http: Http = urllib_http, model: str | None = None) -> bool:
    """``url/v1/models`` answers (and lists ``model`` when one is named)."""
    ids = served_ids(url, http)
    return ids is not None and (model is None or model in ids)


def wait_ready(url: str, *, model: str | None, running: Callable[[], bool], last_line: Callable[[], str],
               show: Callable[[str], None] | None = None, http: Http = urllib_http,
               deadline_s: float = READY_DEADLINE_S, clock: Callable[[], float] = time.monotonic,
               sleep: Callable[[float], None] = time.sleep) -> Ready:
    """Until ``url/v1/models`` lists ``model``: the process is checked first on every turn, so an
    exit is reported within one poll plus one short probe; ``show`` gets the spinner."""
    t0 = clock()
    i = 0
    while True:
        elapsed = clock() - t0
        if not running():
            return Ready(False, elapsed, "exited")
        if models_ready(url, http, model):
            return Ready(True, clock() - t0)
        if elapsed > deadline_s:
            return Ready(False, elapsed, "timeout")
        if show is not None:
            show(f"{SPINNER[i % len(SPINNER)]} waiting for {url}/v1/models  {elapsed:4.0f}s  {last_line()[:100]}")
        i += 1
        sleep(POLL_S)


__all__ = ["COMPOSE_NAME", "LOGS_DIR", "LOG_NAME", "PID_NAME", "READY_DEADLINE_S", "Job", "Launcher", "OnThisHost", "Preflighted",
           "Ready", "ServerCommand", "ServerFinder", "Started", "Status", "Stopped", "Which", "first_line", "log_tail",
           "models_ready", "run_process", "served_ids", "wait_ready"]
