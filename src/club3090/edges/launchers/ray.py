"""The Ray launcher (``--launcher ray``): head and worker scripts, per-node compose files and a
runbook for a launch across several nodes; written, never started here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from club3090.edges.launchers.written import ClusterFiles, WrittenOnly, preflight_lines

NAME = "ray"


@dataclass(frozen=True)
class RayLauncher(WrittenOnly):
    name: str = NAME
    help: str = "ray (head/worker scripts and compose files for several nodes: written only)"

    def cluster_files(self, cl: Any, facts: Any, *, options: Any, port: int, cache_size_gib: int) -> ClusterFiles:
        from dataclasses import replace

        from club3090.compose import cluster as cluster_mod
        from club3090.compose.runbook import ray_runbook
        from club3090.edges import cluster_probe

        checks = tuple(cluster_probe.ray_checks(head_ip=cl.net.head_ip, ray_port=cl.net.ray_port, serve_port=port,
                                                ifname=cl.net.ifname, **self.probe_kwargs()))
        texts = cluster_mod.ray_files(cl)
        texts["RUNBOOK.md"] = ray_runbook(cl, replace(facts, preflight=preflight_lines(checks)))
        ignored = (f"--model-cache {options.model_cache}",) if options.model_cache != "pvc" else ()
        return ClusterFiles(checks, texts, ignored, None)


LAUNCHER = RayLauncher()

__all__ = ["LAUNCHER", "NAME", "RayLauncher"]
