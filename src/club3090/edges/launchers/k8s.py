"""The Kubernetes launcher (``--launcher k8s``): LeaderWorkerSet manifests, a Service, a ConfigMap
with the Ray scripts, the model cache volume and a runbook; written, never applied here."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from club3090.edges.launchers.written import WrittenOnly

NAME = "k8s"


@dataclass(frozen=True)
class K8sLauncher(WrittenOnly):
    name: str = NAME
    help: str = "k8s (LeaderWorkerSet manifests for several nodes: written only)"

    def checks(self, cl: Any, port: int) -> tuple[Any, ...]:
        from club3090.edges import cluster_probe

        return tuple(cluster_probe.k8s_checks(**self.probe_kwargs()))

    def texts(self, cl: Any, options: Any, cache_size_gib: int) -> Mapping[str, str]:
        from club3090.compose import k8s as k8s_mod

        return k8s_mod.k8s_files(cl, cache=options.model_cache, cache_size_gib=cache_size_gib)

    def runbook(self, cl: Any, facts: Any) -> str:
        from club3090.compose.runbook import k8s_runbook

        return k8s_runbook(cl, facts)

    def ignored(self, options: Any) -> tuple[str, ...]:
        from club3090.compose.cluster import DEFAULT_RAY_PORT

        return tuple(flag for flag, given in (("--head-ip", options.head_ip),
                                              ("--ray-port", options.ray_port != DEFAULT_RAY_PORT))
                     if given)

    def model_cache(self, options: Any) -> str | None:
        return options.model_cache  # type: ignore[no-any-return]


LAUNCHER = K8sLauncher()

__all__ = ["LAUNCHER", "NAME", "K8sLauncher"]
