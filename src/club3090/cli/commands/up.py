"""`club3090 up MODEL --dir DIR`: gate a model, write a self-contained launch bundle, download, start, verify.

Run the pull gate for MODEL; when it FITS, write compose.yml, .env, serve.sh, launch.json and every
mounted file into DIR, put the weights into the HF cache (sha256-verified, resumable), start the
server (Docker or native vLLM), wait for /v1/models, run the smoke and verify, and print the URL.
--launcher ray|k8s (several nodes) writes the cluster's launch files and a runbook and starts
nothing (docs/DESIGN.md, "More than one machine").

Exit codes: 0 serving and verified (or written: --no-start, ray, k8s); 1 the start or the
verification failed (log tail printed, capture bundle written); 2 / 3 the gate's refusal or
acknowledgement, or port-in-use (another process holds the port: nothing started); 64 usage; 65 a
patch payload or weight file failed its sha256 (nothing started); 69 the launcher is missing
(docker, the compose plugin, the NVIDIA runtime, vllm) or the Hub is unreachable.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from club3090.cli.commands._llamacpp import cache_type
from club3090.cli.commands._types import (
    add_bundle_flags,
    add_command,
    add_gpus_flag,
    add_rig_flags,
    add_xet_flag,
    gpu_set,
    positive_int,
)
from club3090.cli.exit_codes import exit_code, with_exit_code
from club3090.cli.render import safe
from club3090.edges import launchers


def add_parser(sub: Any) -> None:
    p = add_command(sub, "up", __doc__,
                    help="gate a model, write a self-contained launch bundle, download, start, verify")
    p.add_argument("source", metavar="MODEL", help="Hugging Face repo id (or a local folder)")
    add_bundle_flags(p)
    p.add_argument("--profile-like", metavar="KEY",
                   help="registry profile giving the runtime shape (default: the gate's automatic shape)")
    add_gpus_flag(p)
    add_launcher_flag(p, launchers.names())
    add_rig_flags(p)
    p.add_argument("--head-ip", metavar="ADDR", default="",
                   help="ray: the head node's address on the cluster network (cluster.env HEAD_IP)")
    p.add_argument("--network-interface", metavar="IF", default="",
                   help="ray / k8s: the interface NCCL and Gloo use between nodes (NCCL_SOCKET_IFNAME, "
                        "GLOO_SOCKET_IFNAME)")
    p.add_argument("--ray-port", type=int, metavar="N", default=6379, help="ray: the head's Ray port (default 6379)")
    p.add_argument("--model-cache", choices=("pvc", "hostpath"), default="pvc",
                   help="k8s: the model cache volume, a ReadWriteMany PVC (default) or a hostPath on every node")
    p.add_argument("--yes", "-y", action="store_true", help="accept a confirm→proceed terminal")
    add_xet_flag(p)
    p.add_argument("--force-download", action="store_true", help="accept a low-confidence wont-fit")
    p.add_argument("--trust-remote-code", action="store_true", help="acknowledge custom modelling code")
    p.add_argument("--stress", action="store_true",
                   help="after verify --full, also run verify-stress (needle ladder, ~25K tool-result prefill, "
                        "probes); SERVING only when both are green")
    p.add_argument("--allow-deprecated", action="store_true",
                   help="launch a profile upstream deprecated (default: stop and name its replacement)")
    g = p.add_argument_group("GGUF / llama.cpp family (a GGUF repo or a llama.cpp-family profile)")
    g.add_argument("--quant", metavar="QUANT", help="which quant of a GGUF repo to serve (default: the largest "
                                                    "that fits with every layer on the GPUs)")
    g.add_argument("--ctx-size", type=positive_int, metavar="N",
                   help="llama.cpp context (-c; default: the largest that fits, up to the trained context)")
    g.add_argument("--cache-type-k", type=cache_type, metavar="TYPE", help="llama.cpp K cache type (f16, q8_0, ...)")
    g.add_argument("--cache-type-v", type=cache_type, metavar="TYPE", help="llama.cpp V cache type (f16, q8_0, ...)")
    g.add_argument("--llama-server-bin", metavar="PATH",
                   help="the llama-server executable for --launcher native (default: llama-server on PATH, "
                        "else llama-cpp-python's server)")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    p.set_defaults(run=run)


def progress(args: argparse.Namespace) -> Any:
    """``up``'s progress on stderr: lines, the spinner (on a terminal), the download bar (not with --json)."""
    from club3090.pipeline.up import Progress

    def say(message: str) -> None:
        print(safe(message), file=sys.stderr, flush=True)

    tty = sys.stderr.isatty()

    def spin(line: str) -> None:
        if tty:
            print("\r" + safe(line)[:160].ljust(160), end="", file=sys.stderr, flush=True)
    if args.json:
        return Progress(say=say, spin=spin, bar=False)
    return Progress(say=say, spin=spin, bar=True, fact=show_fact)   # the plan first, then the steps in order


def run(args: argparse.Namespace, provider: Any) -> int:
    from club3090.errors import UsageError

    if args.port is not None and not 0 < args.port < 65536:
        raise UsageError("--port must be 1-65535")
    return run_request(args, provider, directory=args.directory, no_start=args.no_start, launcher=args.launcher,
                       port=args.port, vllm=args.vllm, skip_tools=args.skip_tools)


def run_request(args: argparse.Namespace, provider: Any, *, directory: Path, no_start: bool, launcher: str,
                port: int | None, vllm: str | None, skip_tools: bool) -> int:
    """``up`` (and ``pull --out DIR``): build the request, run it, print the result."""
    from club3090.cli.commands.pull import captures_root
    from club3090.pipeline.cluster_up import ClusterOptions
    from club3090.pipeline.up import UpRequest, up
    from club3090.settings import WARMUP_WINDOW_S

    nodes = getattr(args, "nodes", None)
    cluster = ClusterOptions(nodes=nodes, head_ip=getattr(args, "head_ip", ""),
                             network_interface=getattr(args, "network_interface", ""),
                             ray_port=getattr(args, "ray_port", 6379), model_cache=getattr(args, "model_cache", "pvc"))
    from club3090.cli.commands._routing import routed_profile

    profile_like = routed_profile(args, provider, up=args.command == "up")
    req = UpRequest(source=args.source, directory=directory, profile_like=profile_like,
                    launcher=launcher, gpus=gpu_set(args, provider.catalog()), port=port, no_start=no_start,
                    vllm=vllm, yes=args.yes, force_download=args.force_download,
                    trust_remote_code=args.trust_remote_code, force=args.force, skip_tools=skip_tools,
                    stress=bool(getattr(args, "stress", False)),
                    llamacpp=args.command == "up", quant=getattr(args, "quant", None),
                    ctx_size=getattr(args, "ctx_size", None), cache_type_k=getattr(args, "cache_type_k", None),
                    cache_type_v=getattr(args, "cache_type_v", None),
                    llama_server_bin=getattr(args, "llama_server_bin", None),
                    nodes=nodes, interconnect=getattr(args, "interconnect", None), cluster=cluster,
                    progress=progress(args), captures=captures_root(args),
                    warmup_s=getattr(args, "warmup_s", WARMUP_WINDOW_S))
    result = up(req, provider)
    if sys.stderr.isatty():
        print(file=sys.stderr)
    if args.json:
        print(safe(json.dumps(with_exit_code(result.to_json(), result.outcome), indent=2, default=str), multiline=True))
    return exit_code(result.outcome)


def show_fact(fact: Any) -> None:
    """One fact of ``up`` or ``swap``, printed to stdout as it lands."""
    from club3090.cli.commands._up_render import lines

    for line in lines(fact):
        print(safe(line, multiline=True), flush=True)


def add_launcher_flag(p: argparse.ArgumentParser, names: tuple[str, ...]) -> None:
    """``--launcher`` with the registry's names and each one's own help."""
    from club3090.edges import launchers as registry

    p.add_argument("--launcher", choices=names, default=registry.DEFAULT,
                   help="; ".join(registry.get(n).help for n in names))

