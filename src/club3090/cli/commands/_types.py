"""argparse ``type=`` functions shared by the commands: a bad value is a usage error (exit 64, and
the CLI's JSON error document under ``--json``), never a traceback or a silently odd run."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from club3090.settings import WARMUP_WINDOW_S


def described(doc: str | None) -> str | None:
    """A command module's docstring below its title line: the command's ``--help`` description
    (one text for the module's reader and the command's user)."""
    return doc.split("\n\n", 1)[1] if doc and "\n\n" in doc else None


def add_command(sub: Any, name: str, doc: str | None, *, help: str, **kwargs: Any) -> argparse.ArgumentParser:
    """The subcommand ``name``: its ``--help`` description is its module's docstring below the title
    line, laid out as written."""
    parser: argparse.ArgumentParser = sub.add_parser(name, help=help, description=described(doc),
                                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                                     **kwargs)
    return parser


def bounded(kind: type, *, low: float | None = None, high: float | None = None,
            low_open: bool = False, what: str | None = None) -> Callable[[str], float]:
    """A parser for a finite ``kind`` (int or float) in [low, high] (``(low, high]`` with low_open)."""
    noun = what or ("an integer" if kind is int else "a number")
    if low is not None and high is not None:
        rng = f"in {'(' if low_open else '['}{low:g}, {high:g}]"
    elif low is not None:
        rng = f"{'>' if low_open else '>='} {low:g}"
    else:
        rng = f"<= {high:g}" if high is not None else ""

    def parse(text: str) -> float:
        try:
            value: float = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {noun}, got {text!r}") from None
        too_low = low is not None and (value <= low if low_open else value < low)
        if not math.isfinite(value) or too_low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"expected {noun} {rng}, got {text!r}".replace("  ", " "))
        return value

    parse.__name__ = what or kind.__name__
    return parse


positive_int = bounded(int, low=1)
non_negative_int = bounded(int, low=0)
positive_number = bounded(float, low=0, low_open=True)
non_negative_number = bounded(float, low=0)
fraction = bounded(float, low=0, high=1, low_open=True, what="a fraction")
seconds = bounded(float, low=0, low_open=True, what="a number of seconds")
token_count = bounded(int, low=1, high=2_000_000, what="a token count")


def context_length(text: str) -> int | str:
    """``--max-model-len``: a positive token count, or vLLM's ``auto`` / ``-1`` (the largest that fits)."""
    if text.strip().lower() in ("auto", "-1"):
        return "auto"
    return int(token_count(text))


def add_shape_flags(p: argparse.ArgumentParser, *, aliases: bool = False) -> None:
    """The serving-shape overrides under vLLM's own flag names (``aliases``: kv-calc's older
    short spellings too). Each pins one dimension of the automatic shape."""
    from club3090.fit.kv_formats import KV_FORMATS, kv_format

    def kv_dtype(text: str) -> str:
        if kv_format(text) is None:
            raise argparse.ArgumentTypeError(f"unknown KV cache dtype {text!r}; known: {', '.join(KV_FORMATS)}")
        return text

    p.add_argument("--tensor-parallel-size", "-tp", *(("--tp",) if aliases else ()), dest="tp",
                   type=positive_int, metavar="N", help="tensor-parallel size (default: the fewest GPUs that fit)")
    p.add_argument("--pipeline-parallel-size", "-pp", *(("--pp",) if aliases else ()), dest="pp",
                   type=positive_int, metavar="N", help="pipeline-parallel size (default: only when TP cannot fit)")
    p.add_argument("--gpu-memory-utilization", *(("--mem-util",) if aliases else ()), dest="mem_util",
                   type=fraction, metavar="F", help="fraction of each GPU's memory vLLM may use, (0, 1]")
    p.add_argument("--max-model-len", type=context_length, metavar="N|auto",
                   help="context length per request; auto = the largest that fits (default: the model's "
                        "maximum when it fits)")
    p.add_argument("--kv-cache-dtype", type=kv_dtype, metavar="FORMAT",
                   help="KV cache element format (default: the model's dtype, else the most compact the GPU "
                        "supports): " + ", ".join(KV_FORMATS))
    p.add_argument("--max-num-seqs", type=positive_int, metavar="N",
                   help="concurrent sequences (default: vLLM's for the version)")
    p.add_argument("--vllm-version", type=vllm_version, metavar="X.Y.Z",
                   help="the vLLM release to price (`vllm --version`; default: the profile's or catalog's "
                        "engine pin, else the tightest of the release lines in use, named in the answer)")


def vllm_version(text: str) -> str:
    from club3090.fit.vllm_rules import VERSION_RE

    if not VERSION_RE.match(text):
        raise argparse.ArgumentTypeError(f"expected a vLLM version such as 0.22.0, got {text!r}")
    return text


def shape_request(args: argparse.Namespace) -> Any:
    """The shape flags as the one :class:`club3090.fit.shape.ShapeRequest` every command takes."""
    from club3090.fit.shape import AUTO, ShapeRequest

    length = getattr(args, "max_model_len", None)
    return ShapeRequest(tensor_parallel_size=getattr(args, "tp", None),
                        pipeline_parallel_size=getattr(args, "pp", None),
                        gpu_memory_utilization=getattr(args, "mem_util", None),
                        max_model_len=AUTO if length == "auto" else length,
                        kv_cache_dtype=getattr(args, "kv_cache_dtype", None),
                        max_num_seqs=getattr(args, "max_num_seqs", None),
                        vllm_version=getattr(args, "vllm_version", None))


def add_rig_flags(p: argparse.ArgumentParser) -> None:
    """``--nodes`` and ``--interconnect``: a rig of several identical machines (``--gpus`` is one node)."""
    from club3090.rig.interconnect import DEFAULT_INTERCONNECT, INTERCONNECTS

    p.add_argument("--nodes", type=bounded(int, low=1, high=16, what="a node count"), metavar="N",
                   help="machines in the rig, each with the --gpus GPUs (same as --gpus Nx(ONE NODE))")
    p.add_argument("--interconnect", choices=tuple(INTERCONNECTS), metavar="LINK",
                   help=f"the link between nodes, an assumption: {', '.join(INTERCONNECTS)} "
                        f"(default with several nodes: {DEFAULT_INTERCONNECT})")


GPUS_HELP = ("the GPUs: COUNTxNAME (1x3090, 2xrtx-4090, 4xH100-80GB), COUNTxSIZE (2x24GiB, 1x80GB), "
             "MiB:NAME,MiB:NAME, or NODESx(ONE NODE) (2x(8xH100)); default: the GPUs detected here")


def add_gpus_flag(p: argparse.ArgumentParser) -> None:
    """``--gpus SPEC``: the one declaration of the flag (every command reads it with :func:`gpu_set`)."""
    p.add_argument("--gpus", metavar="SPEC", help=GPUS_HELP)


def gpu_set(args: argparse.Namespace, catalog: Any) -> Any:
    """``--gpus`` (with ``--nodes`` / ``--interconnect`` where the command has them) as a
    :class:`club3090.rig.gpus.GpuSet`, None when not given: the one call of ``parse_gpus``, so a
    bad value is a usage error before any network, and every request carries the parsed value."""
    from club3090.errors import UsageError
    from club3090.rig.gpus import parse_gpus

    spec, rig = getattr(args, "gpus", None), rig_flags(args)
    if spec is None:
        if rig["nodes"] is not None or rig["interconnect"] is not None:
            raise UsageError("--nodes and --interconnect describe the GPUs of --gpus: give --gpus ONE NODE too, "
                             "e.g. --nodes 2 --gpus 2x3090")
        return None
    return parse_gpus(spec, catalog, **rig)


def rig_flags(args: argparse.Namespace) -> dict[str, Any]:
    """``nodes`` / ``interconnect`` as given (None when not)."""
    return {"nodes": getattr(args, "nodes", None), "interconnect": getattr(args, "interconnect", None)}


def add_bundle_flags(p: argparse.ArgumentParser) -> None:
    """The flags `up` and `swap` share for writing, starting and verifying a bundle."""
    p.add_argument("--dir", dest="directory", type=Path, required=True, metavar="DIR",
                   help="the bundle folder (created; everything the server needs lands here)")
    p.add_argument("--port", type=int, metavar="N", help="host port (default: the profile's)")
    p.add_argument("--no-start", action="store_true", help="write the bundle and download, do not start")
    p.add_argument("--vllm", metavar="PATH|COMMAND",
                   help="the vllm server for --launcher native: a path, or a command line such as "
                        "\"python -m vllm.entrypoints.openai.api_server\" (split like a shell would, never run by "
                        "one; default: vllm on PATH)")
    p.add_argument("--force", action="store_true", help="rewrite a bundle folder that is not serving")
    p.add_argument("--skip-tools", action="store_true",
                   help="verify without the tool-call checks (an engine without tool calling)")
    p.add_argument("--warmup-s", type=bounded(float, low=0, high=86_400, what="seconds"), metavar="SECONDS", default=WARMUP_WINDOW_S,
                   help="once /v1/models answers, how long the server may keep failing a small completion "
                        "(compiling, capturing graphs) before verify --full runs (default 180, upstream's)")


def add_xet_flag(p: Any) -> None:
    """``--allow-xet`` (pull, up): let huggingface_hub use its Xet transfer rung (off by default)."""
    p.add_argument("--allow-xet", action="store_true",
                   help="let huggingface_hub use its Xet transfer (hf_xet) for downloads; off by default, "
                        "and HF_HUB_DISABLE_XET=1 keeps it off")
