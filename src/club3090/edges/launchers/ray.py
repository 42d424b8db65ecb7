"""The Ray launcher (``--launcher ray``): head and worker scripts, per-node compose files and a
runbook for a launch across several nodes; written, never started here."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from club3090.edges.launchers.written import WrittenOnly

NAME = "ray"


@dataclass(frozen=True)
class RayLauncher(WrittenOnly):
    name: str = NAME
    help: str = "ray (head/worker scripts and compose files for several nodes: written only)"

    def checks(self, cl: Any, port: int) -> tuple[Any, ...]:
        from club3090.edges import cluster_probe

        return tuple(cluster_probe.ray_checks(head_ip=cl.net.head_ip, ray_port=cl.net.ray_port, serve_port=port,
                                              ifname=cl.net.ifname, **self.probe_kwargs()))

    def texts(self, cl: Any, options: Any, cache_size_gib: int) -> Mapping[str, str]:
        from club3090.compose import cluster as cluster_mod

        return cluster_mod.ray_files(cl)

    def runbook(self, cl: Any, facts: Any) -> str:
        from club3090.compose.runbook import ray_runbook

        return ray_runbook(cl, facts)

    def ignored(self, options: Any) -> tuple[str, ...]:
        return (f"--model-cache {options.model_cache}",) if options.model_cache != "pvc" else ()


LAUNCHER = RayLauncher()

__all__ = ["LAUNCHER", "NAME", "RayLauncher"]
