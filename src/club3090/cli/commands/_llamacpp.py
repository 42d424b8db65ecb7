"""kv-calc's llama.cpp flags (llama.cpp's own names) and the rendering of its answer; the pricing
is the llama.cpp engine's (``club3090.engines.llamacpp.price``), reached through the registry.

Exit codes as kv-calc's: 0 fits, 2 won't fit or cannot be priced, 64 usage.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from club3090.cli.commands._types import non_negative_int, positive_int
from club3090.units import GiB


def tensor_split(text: str) -> tuple[float, ...]:
    try:
        parts = tuple(float(x) for x in text.replace("/", ",").split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers such as 3,1, got {text!r}") from None
    if not parts or any(not p >= 0 or p == float("inf") for p in parts) or sum(parts) <= 0:
        raise argparse.ArgumentTypeError(f"expected non-negative proportions, not all zero, got {text!r}")
    return parts


def cache_type(text: str) -> str:
    from club3090.fit.llamacpp import KV_CACHE_TYPES

    if text.lower() not in KV_CACHE_TYPES:
        raise argparse.ArgumentTypeError(f"unknown cache type {text!r}; known: {', '.join(KV_CACHE_TYPES)}")
    return text.lower()


def override(text: str) -> tuple[tuple[str, str], ...]:
    """``PATTERN=BUFFER[,PATTERN=BUFFER...]`` as llama.cpp's ``-ot`` takes it."""
    rules = []
    for item in text.split(","):
        pattern, sep, buffer = item.partition("=")
        if not sep or not pattern or not buffer:
            raise argparse.ArgumentTypeError(f"expected PATTERN=BUFFER (e.g. exps=CPU), got {item!r}")
        rules.append((pattern, buffer))
    return tuple(rules)


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("GGUF models (llama.cpp's memory model; llama.cpp's flag names)")
    g.add_argument("--quant", help="which quant of a GGUF repo to price (Q4_K_M, ...)")
    g.add_argument("--ctx-size", "-c", type=positive_int, help="llama.cpp context size (-c)")
    g.add_argument("--cache-type-k", "-ctk", type=cache_type, help="K cache type (f16, q8_0, q4_0, ...)")
    g.add_argument("--cache-type-v", "-ctv", type=cache_type, help="V cache type (f16, q8_0, q4_0, ...)")
    g.add_argument("--n-gpu-layers", "-ngl", type=int, help="layers to offload (-1: all)")
    g.add_argument("--tensor-split", "-ts", type=tensor_split, help="proportions per GPU, e.g. 3,1")
    g.add_argument("--split-mode", "-sm", choices=("layer", "row", "none"), help="how to split across GPUs")
    g.add_argument("--main-gpu", "-mg", type=non_negative_int, help="GPU for --split-mode none/row")
    g.add_argument("--n-cpu-moe", type=non_negative_int, help="keep the MoE experts of the first N layers on the CPU")
    g.add_argument("--override-tensor", "-ot", type=override, action="append",
                   help="PATTERN=BUFFER: tensors whose name matches go to BUFFER (CPU, CUDA0, ...)")
    g.add_argument("--parallel", "-np", type=positive_int, help="server slots")
    g.add_argument("--batch-size", "-b", type=positive_int, help="logical batch")
    g.add_argument("--ubatch-size", "-ub", type=positive_int, help="physical batch")
    g.add_argument("--flash-attn", "-fa", choices=("on", "off", "auto"), help="flash attention (auto = on)")
    g.add_argument("--swa-full", action="store_true", help="full-size cache for sliding-window layers")
    g.add_argument("--no-kv-offload", action="store_true", help="keep the KV cache in host memory")


def flags_of(args: argparse.Namespace) -> Any:
    """The llama.cpp flags as given, as the request's value (``LlamaFlags``)."""
    from club3090.engines.llamacpp.price import LlamaFlags

    rules = tuple(r for group in (getattr(args, "override_tensor", None) or ()) for r in group)
    return LlamaFlags(ctx_size=args.ctx_size, cache_type_k=args.cache_type_k, cache_type_v=args.cache_type_v,
                      n_gpu_layers=args.n_gpu_layers, tensor_split=args.tensor_split, split_mode=args.split_mode,
                      main_gpu=args.main_gpu, n_cpu_moe=args.n_cpu_moe, parallel=args.parallel,
                      batch_size=args.batch_size, ubatch_size=args.ubatch_size, flash_attn=args.flash_attn,
                      override_tensors=rules, swa_full=bool(args.swa_full), no_kv_offload=bool(args.no_kv_offload),
                      quant=args.quant)


def _mib(n: int) -> str:
    return f"{n / (1 << 20):,.0f}"


def render(price: Any, *, as_json: bool) -> None:
    """kv-calc's llama.cpp answer (``engines.llamacpp.price.LlamaPrice``): JSON, or the human tables
    (its ``NoFit`` is kv-calc's own, rendered there)."""
    if as_json:
        print(json.dumps(price.to_json(), indent=1))
    else:
        _render(price)


def _render(price: Any) -> None:
    from rich.table import Table

    from club3090.cli.render import terminal_console

    src, spec, result, best, rescue = price.source, price.gpus, price.result, price.best, price.rescue
    m, a, kv = src.model, result.args, result.kv
    console = terminal_console()
    for note in price.notes:
        console.print(f"note: {note}", markup=False, highlight=False, soft_wrap=True)
    console.print(f"{src.label} ({m.arch}, {src.quant or 'GGUF'}, {m.weights_bytes / GiB:.2f} GiB of "
                  f"weights from {src.where}) on {spec}, llama.cpp")
    console.print(f"-c {a.ctx_size:,}  -np {a.parallel}  -b {a.batch_size}  -ub {a.ubatch_size}  "
                  f"-ctk {a.cache_type_k}  -ctv {a.cache_type_v}  -fa {'on' if a.flash_attn else 'off'}  "
                  f"-ngl {'all' if a.n_gpu_layers < 0 else a.n_gpu_layers}  --n-cpu-moe {a.n_cpu_moe}")
    table = Table(title="per device (MiB)", show_header=True)
    for col in ("device", "layers", "weights", "KV", "compute", "CUDA context", "total", "capacity"):
        table.add_column(col, justify="left" if col == "device" else "right")
    for d in result.devices:
        table.add_row(d.name, str(d.layers), _mib(d.weights_bytes), _mib(d.kv_bytes), _mib(d.compute_bytes),
                      _mib(d.overhead_bytes), _mib(d.total_bytes),
                      "-" if d.capacity_bytes is None else _mib(d.capacity_bytes))
    console.print(table)
    console.print(f"KV cache: {kv.cells:,} cells x {kv.streams} stream(s), {kv.layers} layers: "
                  f"K ({a.cache_type_k}) {kv.k_bytes / (1 << 20):.2f} MiB, V ({a.cache_type_v}) "
                  f"{kv.v_bytes / (1 << 20):.2f} MiB")
    if kv.swa_layers:
        console.print(f"SWA cache: {kv.swa_cells:,} cells, {kv.swa_layers} layers: K "
                      f"{kv.swa_k_bytes / (1 << 20):.2f} MiB, V {kv.swa_v_bytes / (1 << 20):.2f} MiB")
    if kv.state_bytes:
        console.print(f"recurrent state: {kv.state_bytes / (1 << 20):.2f} MiB")
    console.print(f"largest context that fits: {f'{best:,}' if best else 'none'}")
    if rescue is not None:
        console.print(f"fits with: -ngl {'all' if rescue.args.n_gpu_layers < 0 else rescue.args.n_gpu_layers} "
                      f"--n-cpu-moe {rescue.args.n_cpu_moe}")
    console.print(f"verdict: {price.verdict}   confidence: {result.confidence}")
