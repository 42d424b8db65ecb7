"""RUNBOOK.md for a multi-node launch: what to put on every node, how to start, check and stop it.

Pure: the values ``up`` decided in, Markdown text out.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from club3090.compose.cluster import ClusterLaunch
from club3090.compose.k8s import HOSTPATH_CACHE, TOKEN_SECRET
from club3090.version import __version__


@dataclass(frozen=True, slots=True)
class RunbookFacts:
    repo_id: str
    commit: str
    served_model: str
    weights_gib: float | None = None
    preflight: tuple[str, ...] = ()        # what was checked on this machine, one line each
    cache: str = "pvc"                     # k8s only
    cache_size_gib: int = 0


def _shape(cl: ClusterLaunch) -> str:
    s = cl.shape
    return (f"TP {s.tp} inside each node × PP {s.pp} across nodes = {s.tp * s.pp} GPUs on {s.nodes} node(s) "
            f"of {s.gpus_per_node} GPU(s); vLLM's executor: Ray (`--distributed-executor-backend ray`)")


def _weights(facts: RunbookFacts) -> str:
    size = f" ({facts.weights_gib:.1f} GiB)" if facts.weights_gib else ""
    return (f"`hf download {facts.repo_id} --revision {facts.commit}`{size}: the same revision on every node, in "
            "the Hugging Face cache vLLM reads (`HF_HOME`, default `~/.cache/huggingface`); the launch runs "
            "offline (`HF_HUB_OFFLINE=1`) and serves exactly that commit")


def _preflight(lines: Sequence[str]) -> list[str]:
    return ["## Checked on this machine", "", *(f"- {line}" for line in lines or ("nothing (no check applied)",)), ""]


def ray_runbook(cl: ClusterLaunch, facts: RunbookFacts) -> str:
    n = cl.shape.nodes
    head = cl.net.head_ip or "<HEAD_IP>"
    serve = " ".join(shlex.quote(a) for a in cl.serve_argv())
    iface = (f"`NCCL_SOCKET_IFNAME` / `GLOO_SOCKET_IFNAME` are set to `{cl.net.ifname}` in `cluster.env`: it must "
             "be the interface that carries HEAD_IP on every node (edit it per node if the names differ)"
             if cl.net.ifname else
             "set `NCCL_SOCKET_IFNAME` and `GLOO_SOCKET_IFNAME` in `cluster.env` to the interface that carries "
             "HEAD_IP (e.g. `eth0`; `ip -br addr` lists them): without them NCCL and Gloo pick one themselves, "
             "which hangs or fails on machines with several interfaces")
    lines = [
        f"# Runbook: {facts.repo_id} on {n} nodes with Ray",
        "",
        f"Written by club3090 {__version__}. {_shape(cl)}. Served as `{facts.served_model}`.",
        "",
        "`club3090 up --launcher ray` writes these files and starts nothing: a cluster is started node by node.",
        "",
        "| file | what |",
        "|---|---|",
        "| `cluster.env` | the settings every node shares: HEAD_IP, RAY_PORT, CLUSTER_NODES, the network "
        "interface, the serving host and port (a variable already set in the environment wins) |",
        "| `head.sh` | the head node: `ray start --head`, waits for every node, then `vllm serve` |",
        "| `worker.sh` | every other node: `ray start --address HEAD_IP:RAY_PORT --block` |",
        "| `compose.head.yml`, `compose.worker.yml` | the same scripts inside the image, host network, all the "
        "node's GPUs |",
        "| `launch.json` | the launch description and what `up` decided |",
        "",
        "## On every node, before the start",
        "",
        f"1. This folder, copied to the same place on each of the {n} nodes.",
        f"2. The same engine: `docker pull {cl.image}` (compose), or on the host the vLLM version that image "
        "carries and the same Ray version everywhere (native).",
        f"3. The weights: {_weights(facts)}.",
        f"4. The network: every node reaches `{head}:{cl.net.ray_port}` (Ray's head) and every other node on "
        f"any port (Ray and NCCL open their own); {iface}.",
        f"5. {cl.shape.gpus_per_node} GPU(s) free on each node (`nvidia-smi`).",
        "",
        "## Start",
        "",
        "Workers first or last, either works: the head waits up to `JOIN_TIMEOUT_S` seconds for "
        f"`CLUSTER_NODES={n}` nodes, a worker retries joining for as long.",
        "",
        "```",
        "# on each worker node (its own address on the cluster network):",
        "NODE_IP=<this node's address> ./worker.sh",
        "#   or: NODE_IP=<this node's address> docker compose -f compose.worker.yml up -d",
        "# on the head node" + (f" ({head})" if cl.net.head_ip else " (set HEAD_IP in cluster.env first)") + ":",
        "./head.sh",
        "#   or: docker compose -f compose.head.yml up",
        "```",
        "",
        "The head then runs (TP and PP replace the single-node launch's, Ray is the executor):",
        "",
        "```",
        serve + f" --host $SERVE_HOST --port {cl.net.serve_port}",
        "```",
        "",
        "`SERVE_HOST` is `127.0.0.1` in `cluster.env`: set it to `0.0.0.0` (or the head's address) to serve "
        "other machines.",
        "",
        "## Check",
        "",
        "```",
        "ray status                                   # on the head: every node and GPU listed",
        f"curl -s http://127.0.0.1:{cl.net.serve_port}/health",
        f"club3090 verify --url http://127.0.0.1:{cl.net.serve_port}/v1",
        "```",
        "",
        "## Stop",
        "",
        "Ctrl-C stops `vllm serve` on the head; then `ray stop` on every node (or `docker compose -f "
        "compose.<role>.yml down`).",
        "",
        *_preflight(facts.preflight),
    ]
    return "\n".join(lines)


def k8s_runbook(cl: ClusterLaunch, facts: RunbookFacts) -> str:
    n = cl.shape.nodes
    cache = (f"a PersistentVolumeClaim `{cl.name}-model-cache` of {facts.cache_size_gib} GiB, `ReadWriteMany` "
             "(every pod of a group mounts it; the cluster's default StorageClass must offer RWX, or pass "
             "`--model-cache hostpath`)" if facts.cache == "pvc" else
             f"a hostPath `{HOSTPATH_CACHE}` on every Kubernetes node (`DirectoryOrCreate`): each node keeps "
             "its own copy of the weights")
    lines = [
        f"# Runbook: {facts.repo_id} on Kubernetes (LeaderWorkerSet, {n} pods per replica)",
        "",
        f"Written by club3090 {__version__}. {_shape(cl)}. Served as `{facts.served_model}`.",
        "",
        "`club3090 up --launcher k8s` writes these manifests and applies nothing.",
        "",
        "| file | what |",
        "|---|---|",
        f"| `k8s/configmap.yaml` | `{cl.name}-launch`: `head.sh`, `worker.sh`, `cluster.env` (the Ray launcher's "
        "own scripts) |",
        *([f"| `k8s/model-cache-pvc.yaml` | the model cache: {cache} |"] if facts.cache == "pvc" else []),
        f"| `k8s/leaderworkerset.yaml` | LeaderWorkerSet `{cl.name}`: per replica one leader (Ray head + `vllm "
        f"serve`, readiness on `/health`) and {n - 1} worker pod(s) joining it; `nvidia.com/gpu: "
        f"{cl.shape.gpus_per_node}` per pod, `/dev/shm` in memory |",
        f"| `k8s/service.yaml` | Service `{cl.name}` (ClusterIP) on the leader's port {cl.net.serve_port} |",
        "",
        "## The cluster needs",
        "",
        "- the LeaderWorkerSet controller (https://github.com/kubernetes-sigs/lws, API "
        "`leaderworkerset.x-k8s.io/v1`);",
        "- the NVIDIA device plugin (the `nvidia.com/gpu` resource) and nodes with "
        f"{cl.shape.gpus_per_node} free GPU(s) each;",
        f"- the model cache: {cache}. The pods download `{facts.repo_id}` at revision `{facts.commit}` into it "
        "on their first start;",
        f"- for a gated model, a Secret you create yourself: `kubectl create secret generic {TOKEN_SECRET} "
        "--from-literal=token=...` (optional; club3090 never writes a token).",
        "",
        "## Apply, watch, reach",
        "",
        "```",
        "kubectl apply -f k8s/",
        f"kubectl get lws {cl.name}; kubectl get pods -l {'app.kubernetes.io/name'}={cl.name}",
        f"kubectl logs -f {cl.name}-0                  # the leader of replica 0",
        f"kubectl port-forward svc/{cl.name} {cl.net.serve_port}:{cl.net.serve_port}",
        f"club3090 verify --url http://127.0.0.1:{cl.net.serve_port}/v1",
        f"kubectl scale lws/{cl.name} --replicas 2    # one more group of {n} pods",
        "kubectl delete -f k8s/                       # the PVC and its weights go too; keep it by deleting the others",
        "```",
        "",
        *_preflight(facts.preflight),
    ]
    return "\n".join(lines)


__all__ = ["RunbookFacts", "k8s_runbook", "ray_runbook"]
