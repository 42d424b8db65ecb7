"""A launch across several nodes: the one launch description, turned into a Ray cluster's files.

vLLM's multi-node recipe (docs/DESIGN.md, "More than one machine"): every node runs a Ray node
(``ray start --head`` on one, ``ray start --address HEAD:PORT`` on the others) with the same image
and the same weights; the head then runs ``vllm serve`` with ``--tensor-parallel-size`` (GPUs per
node) × ``--pipeline-parallel-size`` (nodes) and ``--distributed-executor-backend ray``.

:func:`cluster_launch` takes the single-node :class:`~club3090.compose.launch.Launch` (the bundle's,
in-container form: the model by repo id at ``--revision``) and the cluster's shape; :func:`ray_files`
renders ``head.sh`` / ``worker.sh`` (the one script each node runs, natively or inside its
container), ``cluster.env`` (the settings every node shares; a variable already in the environment
wins over the file), and ``compose.head.yml`` / ``compose.worker.yml`` (the same scripts inside the
image, host network). ``compose/k8s.py`` renders the same scripts into Kubernetes manifests.

Pure: no environment reads, no file writes.
"""

from __future__ import annotations

import ipaddress
import re
import shlex
from dataclasses import dataclass
from typing import Any

from club3090.argv import drop_flags
from club3090.compose.launch import Launch, escape_dollars, plain_data, volume_target

CONTAINER_HUB = "/root/.cache/huggingface/hub"
SCRIPT_DIR = "/club3090"                  # where the scripts are mounted inside a container
DEFAULT_RAY_PORT = 6379
JOIN_TIMEOUT_S = 600                       # how long the head waits for its workers, a worker for the head
_IFNAME = re.compile(r"[A-Za-z0-9_.:-]{1,15}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ENV_VALUE = re.compile(r"[A-Za-z0-9_.,:/=+@-]*")
_HOST = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?")
# flags the cluster sets itself (the single-node launch's values are replaced)
_PARALLEL_FLAGS = ("--tensor-parallel-size", "-tp", "--pipeline-parallel-size", "-pp",
                   "--distributed-executor-backend", "--host", "--port")
# environment the cluster files set from cluster.env or per node instead of the launch's
_NODE_ENV = ("NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")


@dataclass(frozen=True, slots=True)
class ClusterShape:
    """How the model is split: ``tp`` GPUs per pipeline stage inside a node, ``pp`` stages across nodes."""

    nodes: int
    gpus_per_node: int
    tp: int
    pp: int

    def problems(self) -> tuple[str, ...]:
        out = []
        if min(self.nodes, self.gpus_per_node, self.tp, self.pp) < 1:
            out.append("nodes, GPUs per node, TP and PP must each be at least 1")
        elif self.tp * self.pp > self.nodes * self.gpus_per_node:
            out.append(f"TP {self.tp} × PP {self.pp} needs {self.tp * self.pp} GPUs; the rig has "
                       f"{self.nodes} × {self.gpus_per_node}")
        elif self.tp * self.pp < (self.nodes - 1) * self.gpus_per_node + 1:
            out.append(f"TP {self.tp} × PP {self.pp} = {self.tp * self.pp} GPUs leaves a node without work "
                       f"on {self.nodes} nodes of {self.gpus_per_node}")
        return tuple(out)


@dataclass(frozen=True, slots=True)
class ClusterNet:
    """Where the cluster talks: stated by the user (``--head-ip``, ``--network-interface``, ``--ray-port``)."""

    head_ip: str = ""                      # "" -> the scripts refuse to start until HEAD_IP is set
    ifname: str = ""                       # NCCL / Gloo socket interface; "" -> left to NCCL, said in the runbook
    ray_port: int = DEFAULT_RAY_PORT
    serve_port: int = 8000


def net_problems(net: ClusterNet) -> tuple[str, ...]:
    """Values that would be unsafe or wrong in a shell script, an env file or a manifest."""
    out = []
    if net.head_ip and not _is_host(net.head_ip):
        out.append(f"--head-ip {net.head_ip!r} is not an IP address or host name")
    if net.ifname and not _IFNAME.fullmatch(net.ifname):
        out.append(f"--network-interface {net.ifname!r} is not an interface name (e.g. eth0, ens5, ib0)")
    for label, port in (("--ray-port", net.ray_port), ("--port", net.serve_port)):
        if not 0 < port < 65536:
            out.append(f"{label} must be 1-65535")
    return tuple(out)


def _is_host(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        return bool(_HOST.fullmatch(text))


@dataclass(frozen=True, slots=True)
class ClusterLaunch:
    """The launch as every node runs it: image, shared environment, the head's ``vllm serve`` arguments."""

    name: str                              # DNS-1123 label for containers, pods and the Service
    image: str
    serve_args: tuple[str, ...]            # after ``vllm serve``; no --host/--port (the scripts add them)
    env: tuple[tuple[str, str], ...]       # the launch's environment, shared by every node
    shape: ClusterShape
    net: ClusterNet
    header: tuple[str, ...]
    shm_size: str = "16gb"
    hub_cache: str = ""                    # this machine's HF cache (the compose files' default mount)

    def serve_argv(self) -> tuple[str, ...]:
        return ("vllm", "serve", *self.serve_args)


def cluster_launch(launch: Launch, shape: ClusterShape, net: ClusterNet, *, name: str, hub_cache: str = ""
                   ) -> ClusterLaunch:
    """The single-node launch (resolved) with the cluster's parallel layout and Ray as its executor."""
    svc = launch.resolved_service()
    entry = [str(e) for e in svc.get("entrypoint") or []]
    command = [str(a) for a in svc.get("command") or []]
    if entry[:2] == ["vllm", "serve"]:
        command = entry[2:] + command
    args = drop_flags(command, _PARALLEL_FLAGS)
    args += ["--tensor-parallel-size", str(shape.tp), "--pipeline-parallel-size", str(shape.pp),
             "--distributed-executor-backend", "ray"]
    env = []
    for raw in svc.get("environment") or []:
        key, sep, value = str(raw).partition("=")
        if sep and key not in _NODE_ENV:
            env.append((key, value))
    return ClusterLaunch(name=name, image=str(svc.get("image", "")), serve_args=tuple(args), env=tuple(env),
                         shape=shape, net=net, header=launch.header[:-1], shm_size=str(svc.get("shm_size") or "16gb"),
                         hub_cache=hub_cache)


def extra_mounts(launch: Launch) -> tuple[str, ...]:
    """Mount targets besides the model cache: files a multi-node launch cannot carry to other nodes yet."""
    targets = [volume_target(v) for v in launch.service.get("volumes") or []]
    return tuple(t for t in targets if t.rstrip("/") not in (CONTAINER_HUB, "/root/.cache/huggingface"))




def dns_label(text: str, limit: int = 40) -> str:
    """A Kubernetes / container name from a model name: lower-case letters, digits and dashes."""
    label = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    if not label[:1].isalpha():                # a Service name (DNS-1035) starts with a letter
        label = f"m-{label}"
    return label[:limit].strip("-") or "vllm"


# ---- the shared settings and the two scripts ---------------------------------------------------

def cluster_env(cl: ClusterLaunch) -> str:
    """``cluster.env``: KEY=VALUE lines an ``sh`` and a compose ``env_file`` both read (no quoting needed)."""
    lines = ["# club3090 cluster settings: every node reads this file (head.sh, worker.sh, compose env_file).",
             "# A variable already set in the environment wins over this file.",
             f"HEAD_IP={cl.net.head_ip}",
             f"RAY_PORT={cl.net.ray_port}",
             f"CLUSTER_NODES={cl.shape.nodes}",
             f"GPUS_PER_NODE={cl.shape.gpus_per_node}",
             "SERVE_HOST=127.0.0.1",
             f"SERVE_PORT={cl.net.serve_port}",
             f"JOIN_TIMEOUT_S={JOIN_TIMEOUT_S}"]
    if cl.net.ifname:
        lines += [f"NCCL_SOCKET_IFNAME={cl.net.ifname}", f"GLOO_SOCKET_IFNAME={cl.net.ifname}"]
    else:
        lines += ["# NCCL_SOCKET_IFNAME=<the interface that carries HEAD_IP, e.g. eth0>",
                  "# GLOO_SOCKET_IFNAME=<the same interface>"]
    lines += ["RAY_USAGE_STATS_ENABLED=0"]
    for key, value in cl.env:
        if _ENV_NAME.fullmatch(key) and _ENV_VALUE.fullmatch(value):
            lines.append(f"{key}={value}")
        else:
            lines.append(f"# not carried (needs quoting): {key if _ENV_NAME.fullmatch(key) else '?'}")
    return "\n".join(lines) + "\n"


_LOAD_ENV = r'''HERE=$(cd "$(dirname "$0")" && pwd)
CLUSTER_ENV="${CLUSTER_ENV:-$HERE/cluster.env}"
# cluster.env fills what the environment does not already set
while IFS= read -r line || [ -n "$line" ]; do
  case "$line" in ''|'#'*) continue ;; esac
  key=${line%%=*}
  case "$key" in *[!A-Za-z0-9_]*|'') continue ;; esac
  eval "isset=\${$key+x}"
  [ -n "$isset" ] || export "$key=${line#*=}"
done < "$CLUSTER_ENV"
RAY="${RAY:-ray}"
PYTHON="${PYTHON:-python3}"
RAY_PORT="${RAY_PORT:-6379}"
JOIN_TIMEOUT_S="${JOIN_TIMEOUT_S:-600}"
export RAY_USAGE_STATS_ENABLED="${RAY_USAGE_STATS_ENABLED:-0}"'''

# counts the live nodes of the cluster at RAY_ADDRESS (vLLM's multi-node example waits the same way)
_COUNT_NODES = "import ray; ray.init(logging_level='ERROR', log_to_driver=False); " \
               "print(sum(1 for n in ray.nodes() if n['Alive']))"


def head_script(cl: ClusterLaunch) -> str:
    g = cl.shape.gpus_per_node
    serve = " ".join(shlex.quote(a) for a in cl.serve_args)
    return "\n".join([
        "#!/bin/sh",
        *(f"# {line}" for line in cl.header),
        f"# The HEAD node: starts Ray's head, waits for all {cl.shape.nodes} nodes, then serves",
        f"# TP {cl.shape.tp} x PP {cl.shape.pp} over Ray. Run it on the machine at HEAD_IP (see RUNBOOK.md).",
        "# Overrides: RAY, PYTHON, VLLM (executables), NODE_IP, RAY_START_ARGS (extra `ray start` words).",
        "set -eu",
        _LOAD_ENV,
        'VLLM="${VLLM:-vllm}"',
        'HEAD_IP="${HEAD_IP:-${NODE_IP:-}}"',
        ': "${HEAD_IP:?set HEAD_IP (cluster.env) to the address of this head node on the cluster network}"',
        'NODE_IP="${NODE_IP:-$HEAD_IP}"',
        'export VLLM_HOST_IP="$NODE_IP" RAY_ADDRESS="$HEAD_IP:$RAY_PORT"',
        f'echo "[head] ray start --head on $NODE_IP:$RAY_PORT ({g} GPU(s) on this node)"',
        f'"$RAY" start --head --node-ip-address "$NODE_IP" --port "$RAY_PORT" --num-gpus {g} '
        '--include-dashboard=false --disable-usage-stats ${RAY_START_ARGS:-}',
        'waited=0',
        'while :; do',
        f'  alive=$("$PYTHON" -c "{_COUNT_NODES}" 2>/dev/null | tail -n 1 || true)',
        '  [ "${alive:-0}" -ge "${CLUSTER_NODES:-1}" ] 2>/dev/null && break',
        '  if [ "$waited" -ge "$JOIN_TIMEOUT_S" ]; then',
        '    echo "[head] only ${alive:-0} of ${CLUSTER_NODES:-1} nodes joined after ${waited}s: is worker.sh running '
        'on every worker, and can it reach $HEAD_IP:$RAY_PORT?" >&2',
        '    exit 1',
        '  fi',
        '  echo "[head] ${alive:-0}/${CLUSTER_NODES:-1} nodes joined; waiting"',
        '  sleep 5; waited=$((waited + 5))',
        'done',
        'echo "[head] ${alive} nodes joined; starting vllm serve"',
        f'exec "$VLLM" serve {serve} --host "${{SERVE_HOST:-127.0.0.1}}" --port "${{SERVE_PORT:-{cl.net.serve_port}}}" "$@"',
        "",
    ])


def worker_script(cl: ClusterLaunch) -> str:
    g = cl.shape.gpus_per_node
    return "\n".join([
        "#!/bin/sh",
        *(f"# {line}" for line in cl.header),
        "# A WORKER node: joins the head's Ray cluster and stays in the foreground (Ctrl-C leaves).",
        "# Set NODE_IP to this node's address on the cluster network (see RUNBOOK.md).",
        "# Overrides: RAY, PYTHON, RAY_START_ARGS (extra `ray start` words).",
        "set -eu",
        _LOAD_ENV,
        'HEAD_IP="${HEAD_IP:-${LWS_LEADER_ADDRESS:-}}"',
        ': "${HEAD_IP:?set HEAD_IP (cluster.env) to the address of the head node}"',
        ': "${NODE_IP:?set NODE_IP to the address of this worker on the cluster network}"',
        'export VLLM_HOST_IP="$NODE_IP"',
        'waited=0',
        'while :; do',
        f'  echo "[worker] ray start --address $HEAD_IP:$RAY_PORT from $NODE_IP ({g} GPU(s) on this node)"',
        f'  if "$RAY" start --address "$HEAD_IP:$RAY_PORT" --node-ip-address "$NODE_IP" --num-gpus {g} '
        '--disable-usage-stats --block ${RAY_START_ARGS:-}; then exit 0; fi',
        '  if [ "$waited" -ge "$JOIN_TIMEOUT_S" ]; then',
        '    echo "[worker] could not join $HEAD_IP:$RAY_PORT after ${waited}s" >&2',
        '    exit 1',
        '  fi',
        '  sleep 5; waited=$((waited + 5))',
        'done',
        "",
    ])


# ---- one compose file per node ------------------------------------------------------------------

def node_compose(cl: ClusterLaunch, role: str) -> dict[str, Any]:
    """The node's service: the image running ``role``'s script, host network (NCCL and Ray need the
    node's own address), all of the node's GPUs, the HF cache mounted where the image's vLLM looks."""
    script = f"{role}.sh"
    hub = escape_dollars(cl.hub_cache) if cl.hub_cache else "/root/.cache/huggingface/hub"
    service: dict[str, Any] = {
        "image": escape_dollars(cl.image),
        "container_name": f"club3090-{cl.name}-ray-{role}"[:128],
        "restart": "no",
        "network_mode": "host",
        "ipc": "host",
        "shm_size": cl.shm_size,
        "env_file": ["cluster.env"],
        "environment": ["NODE_IP=${NODE_IP:-}", "RAY=ray", "PYTHON=python3", "VLLM=vllm",
                        "CLUSTER_ENV=" + f"{SCRIPT_DIR}/cluster.env"],
        "volumes": [f"${{HF_HUB_CACHE_HOST:-{hub}}}:{CONTAINER_HUB}",
                    f"./{script}:{SCRIPT_DIR}/{script}:ro", f"./cluster.env:{SCRIPT_DIR}/cluster.env:ro"],
        "deploy": {"resources": {"reservations": {"devices": [
            {"driver": "nvidia", "count": cl.shape.gpus_per_node, "capabilities": ["gpu"]}]}}},
        "entrypoint": ["/bin/sh", f"{SCRIPT_DIR}/{script}"],
    }
    return {"services": {f"ray-{role}": service}}


def render_node_compose(cl: ClusterLaunch, role: str) -> str:
    import yaml

    header = [*cl.header, f"run on the {role} node: NODE_IP=<this node's address> docker compose -f "
                          f"compose.{role}.yml up" + (" -d" if role == "head" else "")]
    body = yaml.safe_dump(plain_data(node_compose(cl, role)), sort_keys=False, default_flow_style=False, width=4096)
    return "".join(f"# {line}\n" for line in header) + body


def ray_files(cl: ClusterLaunch) -> dict[str, str]:
    """Relative name -> text of every file the Ray launcher writes (RUNBOOK.md comes from ``runbook``)."""
    return {
        "cluster.env": cluster_env(cl),
        "head.sh": head_script(cl),
        "worker.sh": worker_script(cl),
        "compose.head.yml": render_node_compose(cl, "head"),
        "compose.worker.yml": render_node_compose(cl, "worker"),
    }


def cluster_json(cl: ClusterLaunch) -> dict[str, Any]:
    return {"name": cl.name, "image": cl.image, "serve_argv": list(cl.serve_argv()), "env": dict(cl.env),
            "nodes": cl.shape.nodes, "gpus_per_node": cl.shape.gpus_per_node, "tp": cl.shape.tp,
            "pp": cl.shape.pp, "head_ip": cl.net.head_ip or None, "network_interface": cl.net.ifname or None,
            "ray_port": cl.net.ray_port, "serve_port": cl.net.serve_port}


__all__ = ["ClusterLaunch", "ClusterNet", "ClusterShape", "cluster_env", "cluster_json", "cluster_launch",
           "dns_label", "extra_mounts", "head_script", "net_problems", "node_compose", "ray_files",
           "worker_script"]
