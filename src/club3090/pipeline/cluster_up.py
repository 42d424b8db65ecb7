"""``club3090 up --launcher ray|k8s``: a launch across several nodes, written, not started.

After the gate and the launch (the same ``Launch`` and bundle rewrite single-node ``up`` uses),
this builds the cluster's shape (TP inside a node × PP across nodes), checks what this machine can
tell (docs/DESIGN.md, "More than one machine"), and writes DIR atomically: the Ray files
(``compose/cluster.py``) or the Kubernetes manifests (``compose/k8s.py``), ``RUNBOOK.md``,
``launch.json`` and ``state.json``. Usage errors (a bad address, a shape that leaves a node idle,
a launch that mounts files other nodes would not have) stop before anything is written.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from club3090.compose import cluster as cluster_mod
from club3090.compose import k8s as k8s_mod
from club3090.compose.launch import launch_json
from club3090.compose.runbook import RunbookFacts
from club3090.edges import launchers
from club3090.errors import UsageError
from club3090.pipeline.up_facts import ClusterWritten
from club3090.units import GiB

if TYPE_CHECKING:
    from club3090.fit.runtime import RuntimeShape
    from club3090.model.spec import RepoFile
    from club3090.pipeline.bundle import Bundle, Writer

CLUSTER_LAUNCHERS = launchers.names(multi_node=True)
MODEL_CACHES = k8s_mod.CACHE_MODES


@dataclass(frozen=True)
class ClusterOptions:
    nodes: int | None = None               # --nodes (None: the rig's, else 1)
    head_ip: str = ""
    network_interface: str = ""
    ray_port: int = cluster_mod.DEFAULT_RAY_PORT
    model_cache: str = "pvc"


def cluster_shape(runtime: "RuntimeShape", hardware: Any, nodes_flag: int | None) -> cluster_mod.ClusterShape:
    """TP from the runtime (inside a node); PP the runtime's, or one stage per node (vLLM's guide)."""
    nodes = int(nodes_flag or getattr(hardware, "nodes", 1) or 1)
    count = int(getattr(hardware, "count", 0) or 0)
    per_node = int(getattr(hardware, "gpus_per_node", 0) or 0) if int(getattr(hardware, "nodes", 1) or 1) > 1 else 0
    if not per_node:
        per_node = count or runtime.tp       # --gpus names one node when --nodes is given
    pp = runtime.pp if runtime.pp > 1 else nodes
    shape = cluster_mod.ClusterShape(nodes=nodes, gpus_per_node=per_node, tp=runtime.tp, pp=pp)
    problems = shape.problems()
    if problems:
        raise UsageError(f"the shape cannot be launched on this rig: {problems[0]}; pass --nodes / --gpus "
                         "for the rig you have, or --profile-like a profile with another TP")
    return shape


def emit(*, launcher: "launchers.Launcher", directory: Path, options: ClusterOptions, plan: "Bundle",
         runtime: "RuntimeShape", hardware: Any, repo_id: str, commit: str, files: Sequence["RepoFile"], hub_cache: Path,
         port: int, writer: "Writer", now: datetime) -> tuple[ClusterWritten, dict[str, Any]]:
    """Write the multi-node launch into ``directory`` (through ``writer``, the Provider); return
    (the fact the CLI renders, state)."""
    cluster_files = getattr(launcher, "cluster_files", None)
    if not launcher.multi_node or cluster_files is None:
        raise UsageError(f"--launcher {launcher.name} is not a multi-node launcher")
    if options.model_cache not in MODEL_CACHES:
        raise UsageError(f"--model-cache must be one of {', '.join(MODEL_CACHES)}")
    bundled = plan.launch
    if bundled is None:
        raise UsageError("no launch description to write a multi-node launch from")
    extra = cluster_mod.extra_mounts(bundled)
    if extra:
        raise UsageError(f"{runtime.key} mounts {len(extra)} file(s) into the container ({', '.join(extra[:3])}); "
                         "multi-node launch files carry only the model cache to the other nodes: use a patchless "
                         "profile (the automatic shape of a non-curated model is one)")
    shape = cluster_shape(runtime, hardware, options.nodes)
    net = cluster_mod.ClusterNet(head_ip=options.head_ip, ifname=options.network_interface,
                                 ray_port=options.ray_port, serve_port=port)
    problems = cluster_mod.net_problems(net)
    if problems:
        raise UsageError(problems[0])
    cl = cluster_mod.cluster_launch(bundled, shape, net, name=cluster_mod.dns_label(plan.served_model),
                                    hub_cache=str(hub_cache))
    weights = sum(int(f.size_bytes or 0) for f in files)
    weights_gib = weights / GiB if weights else None
    cache_gib = max(math.ceil((weights_gib or 80.0) * 1.25) + 10, 20)
    facts = RunbookFacts(repo_id=repo_id, commit=commit, served_model=plan.served_model, weights_gib=weights_gib,
                         cache=options.model_cache, cache_size_gib=cache_gib)
    made = cluster_files(cl, facts, options=options, port=port, cache_size_gib=cache_gib)
    texts = dict(made.texts)
    description = launch_json(bundled)
    description["cluster"] = {**cluster_mod.cluster_json(cl), "launcher": launcher.name,
                              "model_cache": made.model_cache}
    description["up"] = {"repo_id": repo_id, "commit": commit, "served_model": plan.served_model,
                         "hub_cache": str(hub_cache), "port": port}
    texts["launch.json"] = json.dumps(description, indent=2, ensure_ascii=False) + "\n"
    writer.make_dir(directory)
    for rel in sorted(texts):
        writer.write_file(directory / rel, texts[rel], mode=0o755 if rel.endswith(".sh") else None)
    written_at = now.isoformat(timespec="seconds")
    state: dict[str, Any] = {"launcher": launcher.name, "url": f"http://{net.head_ip or '127.0.0.1'}:{port}",
                             "served_model": plan.served_model, "repo_id": repo_id, "commit": commit,
                             "profile_like": runtime.key, "argv": list(cl.serve_argv()), "state": "written",
                             "nodes": shape.nodes, "tp": shape.tp, "pp": shape.pp, "pid": None, "container": None,
                             "files": sorted(texts), "preflight": [{"ok": c.ok, "line": c.line} for c in made.checks],
                             "directory": str(directory), "written_at": written_at}
    written = ClusterWritten(launcher.name, shape.nodes, shape.tp, shape.pp, shape.gpus_per_node, directory,
                             tuple(sorted(texts)), tuple((c.ok, c.line) for c in made.checks), tuple(made.ignored))
    return written, state


__all__ = ["CLUSTER_LAUNCHERS", "MODEL_CACHES", "ClusterOptions", "cluster_shape", "emit"]
