"""The Kubernetes launcher (``--launcher k8s``): LeaderWorkerSet manifests, a Service, a ConfigMap
with the Ray scripts, the model cache volume and a runbook; written, never applied here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from club3090.edges.launchers.written import ClusterFiles, WrittenOnly, preflight_lines

NAME = "k8s"


@dataclass(frozen=True)
class K8sLauncher(WrittenOnly):
    name: str = NAME
    help: str = "k8s (LeaderWorkerSet manifests for several nodes: written only)"

    def cluster_files(self, cl: Any, facts: Any, *, options: Any, port: int, cache_size_gib: int) -> ClusterFiles:
        from dataclasses import replace

        from club3090.compose import cluster as cluster_mod
        from club3090.compose import k8s as k8s_mod
        from club3090.compose.runbook import k8s_runbook
        from club3090.edges import cluster_probe

        checks = tuple(cluster_probe.k8s_checks(**self.probe_kwargs()))
        texts = k8s_mod.k8s_files(cl, cache=options.model_cache, cache_size_gib=cache_size_gib)
        texts["RUNBOOK.md"] = k8s_runbook(cl, replace(facts, preflight=preflight_lines(checks)))
        ignored = tuple(flag for flag, given in (("--head-ip", options.head_ip),
                                                 ("--ray-port", options.ray_port != cluster_mod.DEFAULT_RAY_PORT))
                        if given)
        return ClusterFiles(checks, texts, ignored, options.model_cache)


LAUNCHER = K8sLauncher()

__all__ = ["LAUNCHER", "NAME", "K8sLauncher"]
