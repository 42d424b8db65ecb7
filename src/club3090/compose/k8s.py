"""Kubernetes manifests for a multi-node launch: one LeaderWorkerSet (leaderworkerset.x-k8s.io/v1).

Each replica of the LeaderWorkerSet is one group of ``nodes`` pods, as vLLM's and LWS's own
deployment examples run it: the leader pod runs Ray's head and ``vllm serve`` (``head.sh``), every
worker pod joins the leader's Ray cluster (``worker.sh``, at ``LWS_LEADER_ADDRESS``, which the LWS
controller injects). The scripts are the very ones the Ray launcher writes, shipped in a ConfigMap,
so the image, the arguments and the environment come from the same launch description.

Per pod: ``nvidia.com/gpu`` = GPUs per node (requests = limits), ``/dev/shm`` as a memory-backed
emptyDir, the model cache at ``/root/.cache/huggingface`` (a ReadWriteMany PVC, or a hostPath on
every node), the leader's readiness probe on ``/health``, and a ClusterIP Service on the leader.

Pure: values in, YAML text out.
"""

from __future__ import annotations

import re
from typing import Any

from club3090.compose.cluster import SCRIPT_DIR, ClusterLaunch, cluster_env, head_script, worker_script

CACHE_MODES = ("pvc", "hostpath")
HOSTPATH_CACHE = "/var/lib/club3090/huggingface"
CONTAINER_HF = "/root/.cache/huggingface"
LWS_API = "leaderworkerset.x-k8s.io/v1"
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
TOKEN_SECRET = "hf-token"                 # optional: a Secret the user creates; never written by us


def quantity(size: str) -> str:
    """A Compose size (``16gb``, ``10.24g``, ``512m``) as a Kubernetes quantity (``16Gi``)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*", size.lower())
    if not match:
        return "16Gi"
    number, unit = float(match.group(1)), match.group(2)
    mib = number * {"": 1 / 2**20, "k": 1 / 1024, "m": 1, "g": 1024, "t": 1024**2}[unit]
    return f"{int(mib // 1024)}Gi" if mib >= 1024 and mib % 1024 == 0 else f"{max(int(mib), 1)}Mi"


def _labels(cl: ClusterLaunch) -> dict[str, str]:
    return {"app.kubernetes.io/name": cl.name, "app.kubernetes.io/managed-by": "club3090"}


def _env(cl: ClusterLaunch, role: str) -> list[dict[str, Any]]:
    pod_ip = {"valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
    env: list[dict[str, Any]] = [{"name": "NODE_IP", **pod_ip}]
    if role == "leader":
        env += [{"name": "HEAD_IP", **pod_ip}, {"name": "SERVE_HOST", "value": "0.0.0.0"}]
    env += [{"name": "CLUSTER_ENV", "value": f"{SCRIPT_DIR}/cluster.env"},
            # the pods fetch the pinned revision into the cache volume themselves
            {"name": "HF_HUB_OFFLINE", "value": "0"}, {"name": "TRANSFORMERS_OFFLINE", "value": "0"},
            {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": TOKEN_SECRET, "key": "token",
                                                                "optional": True}}}]
    return env


def _container(cl: ClusterLaunch, role: str) -> dict[str, Any]:
    gpus = str(cl.shape.gpus_per_node)
    script = "head.sh" if role == "leader" else "worker.sh"
    container: dict[str, Any] = {
        "name": f"vllm-{role}",
        "image": cl.image,
        "command": ["/bin/sh", f"{SCRIPT_DIR}/{script}"],
        "env": _env(cl, role),
        "resources": {"limits": {"nvidia.com/gpu": gpus}, "requests": {"nvidia.com/gpu": gpus}},
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"},
                         {"name": "model-cache", "mountPath": CONTAINER_HF},
                         {"name": "launch", "mountPath": SCRIPT_DIR, "readOnly": True}],
    }
    if role == "leader":
        container["ports"] = [{"name": "http", "containerPort": cl.net.serve_port, "protocol": "TCP"}]
        container["readinessProbe"] = {"httpGet": {"path": "/health", "port": "http"},
                                       "initialDelaySeconds": 30, "periodSeconds": 10, "failureThreshold": 3}
    return container


def _volumes(cl: ClusterLaunch, cache: str) -> list[dict[str, Any]]:
    model: dict[str, Any] = ({"persistentVolumeClaim": {"claimName": f"{cl.name}-model-cache"}} if cache == "pvc"
                             else {"hostPath": {"path": HOSTPATH_CACHE, "type": "DirectoryOrCreate"}})
    return [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": quantity(cl.shm_size)}},
            {"name": "model-cache", **model},
            {"name": "launch", "configMap": {"name": f"{cl.name}-launch", "defaultMode": 0o555}}]


def _pod_template(cl: ClusterLaunch, role: str, cache: str) -> dict[str, Any]:
    return {"metadata": {"labels": {**_labels(cl), "role": role}},
            "spec": {"containers": [_container(cl, role)], "volumes": _volumes(cl, cache)}}


def leader_worker_set(cl: ClusterLaunch, cache: str = "pvc", replicas: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": LWS_API, "kind": "LeaderWorkerSet",
        "metadata": {"name": cl.name, "labels": _labels(cl)},
        "spec": {
            "replicas": replicas,
            "leaderWorkerTemplate": {
                "size": cl.shape.nodes,
                # one pod of a group failing breaks the Ray cluster: restart the whole group
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": _pod_template(cl, "leader", cache),
                "workerTemplate": _pod_template(cl, "worker", cache),
            },
        },
    }


def service(cl: ClusterLaunch) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": cl.name, "labels": _labels(cl)},
            "spec": {"type": "ClusterIP", "selector": {LWS_NAME_LABEL: cl.name, "role": "leader"},
                     "ports": [{"name": "http", "port": cl.net.serve_port, "targetPort": "http",
                                "protocol": "TCP"}]}}


def config_map(cl: ClusterLaunch) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": f"{cl.name}-launch", "labels": _labels(cl)},
            "data": {"head.sh": head_script(cl), "worker.sh": worker_script(cl), "cluster.env": cluster_env(cl)}}


def model_cache_claim(cl: ClusterLaunch, size_gib: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": f"{cl.name}-model-cache", "labels": _labels(cl)},
            "spec": {"accessModes": ["ReadWriteMany"],
                     "resources": {"requests": {"storage": f"{max(int(size_gib), 1)}Gi"}}}}


def manifests(cl: ClusterLaunch, *, cache: str = "pvc", cache_size_gib: int = 100) -> dict[str, dict[str, Any]]:
    """File name (under ``k8s/``) -> object, in the order ``kubectl apply`` should create them."""
    if cache not in CACHE_MODES:
        raise ValueError(f"cache must be one of {', '.join(CACHE_MODES)}")
    out = {"configmap.yaml": config_map(cl)}
    if cache == "pvc":
        out["model-cache-pvc.yaml"] = model_cache_claim(cl, cache_size_gib)
    out["leaderworkerset.yaml"] = leader_worker_set(cl, cache)
    out["service.yaml"] = service(cl)
    return out


def render(obj: dict[str, Any], header: tuple[str, ...]) -> str:
    import yaml

    body = yaml.safe_dump(obj, sort_keys=False, default_flow_style=False, width=4096)
    return "".join(f"# {line}\n" for line in header) + body


def k8s_files(cl: ClusterLaunch, *, cache: str = "pvc", cache_size_gib: int = 100) -> dict[str, str]:
    header = (*cl.header, "apply: kubectl apply -f k8s/   (needs the LeaderWorkerSet controller; see RUNBOOK.md)")
    return {f"k8s/{name}": render(obj, header)
            for name, obj in manifests(cl, cache=cache, cache_size_gib=cache_size_gib).items()}


__all__ = ["CACHE_MODES", "HOSTPATH_CACHE", "k8s_files", "leader_worker_set", "manifests", "quantity", "service"]
