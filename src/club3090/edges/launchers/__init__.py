"""The launcher registry: every way ``up`` runs a bundle, one entry each (docs/DESIGN.md, "Launchers").

=========  ============================================================  =========================
name       what it does                                                  module
=========  ============================================================  =========================
docker     ``docker compose up -d`` of DIR/compose.yml                   ``launchers.docker``
native     the engine's server on this host, detached, logs in DIR/logs  ``launchers.native``
ray        head/worker scripts for several nodes: written only           ``launchers.ray``
k8s        LeaderWorkerSet manifests for several nodes: written only     ``launchers.k8s``
=========  ============================================================  =========================

``up``, ``swap``, ``status``, ``down`` and ``logs`` ask :func:`get` for the launcher a folder names
and call its :class:`~club3090.edges.launchers.base.Launcher` methods; nothing outside a launcher's
module and this registry compares a launcher's name (``tests/test_launcher_registry.py``).
A new launcher is one module with a ``LAUNCHER`` and one line in ``_ENTRIES``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from club3090.edges.boot import Runner
from club3090.edges.launchers import docker, k8s, native, ray
from club3090.edges.launchers.base import (
    LOG_NAME,
    PID_NAME,
    READY_DEADLINE_S,
    Job,
    Launcher,
    Preflighted,
    Ready,
    ServerCommand,
    Started,
    Status,
    Stopped,
    Which,
    log_tail,
    models_ready,
    run_process,
    served_ids,
    wait_ready,
)
from club3090.edges.launchers.native import find_llama_server, find_vllm, llama_server, split_command, vllm_server
from club3090.edges.launchers.process import alive, identity, port_holder, read_pid
from club3090.errors import UsageError

_ENTRIES: tuple[Launcher, ...] = (docker.LAUNCHER, native.LAUNCHER, ray.LAUNCHER, k8s.LAUNCHER)
REGISTRY: Mapping[str, Launcher] = MappingProxyType({entry.name: entry for entry in _ENTRIES})
DEFAULT = docker.NAME


def names(*, multi_node: bool | None = None) -> tuple[str, ...]:
    """The launchers' names (``multi_node``: only those that launch across nodes, or only those that do not)."""
    return tuple(n for n, e in REGISTRY.items() if multi_node is None or e.multi_node == multi_node)


def get(name: str, *, run: Runner | None = None, which: Which | None = None) -> Launcher:
    """The launcher ``name``, its tools run through ``run`` and found with ``which`` when given."""
    entry = REGISTRY.get(name)
    if entry is None:
        raise UsageError(f"--launcher must be one of {', '.join(REGISTRY)}")
    changes: dict[str, Any] = {k: v for k, v in (("run", run), ("which", which)) if v is not None
                               and hasattr(entry, k)}
    return replace(entry, **changes) if changes else entry   # type: ignore[type-var]


def of_state(state: Mapping[str, Any], **kwargs: Any) -> Launcher:
    """The launcher a bundle folder's state file names (an old folder without one: the default)."""
    return get(str(state.get("launcher") or DEFAULT), **kwargs)


def stop_native(directory: Path) -> bool:
    """Stop a native server DIR's state names (the test suite's cleanup): ``down`` without a terminal."""
    import json

    try:
        state = json.loads((directory / "state.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        state = {}
    return native.LAUNCHER.stop(directory, state if isinstance(state, dict) else {}).stopped


__all__ = ["DEFAULT", "LOG_NAME", "PID_NAME", "READY_DEADLINE_S", "REGISTRY", "Job", "Launcher", "Preflighted",
           "Ready", "ServerCommand", "Started", "Status", "Stopped", "alive", "find_llama_server", "find_vllm", "get",
           "identity", "llama_server", "log_tail", "models_ready", "names", "of_state", "port_holder", "read_pid",
           "run_process", "served_ids", "split_command", "stop_native", "vllm_server", "wait_ready"]
