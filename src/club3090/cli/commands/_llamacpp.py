"""kv-calc for the llama.cpp family: a GGUF model (local file, llama.cpp profile, GGUF repo) priced
with llama.cpp's memory model (``club3090.fit.llamacpp``), llama.cpp's own flag names.

Exit codes as kv-calc's: 0 fits, 2 won't fit or cannot be priced, 64 usage.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, replace
from typing import Any

from club3090.cli.commands._types import non_negative_int, positive_int

DEFAULT_GPU = "rtx-3090"


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


def wants_llamacpp(args: argparse.Namespace, catalog: Any) -> bool:
    from club3090.edges.gguf_source import is_gguf_path, llamacpp_profile  # light: the readers load lazily

    return is_gguf_path(args.model) or llamacpp_profile(catalog, args.profile or args.model) is not None


# vLLM-only kv-calc flags: a GGUF model refuses them rather than ignoring them
VLLM_ONLY = ("pp", "mem_util", "max_num_batched_tokens", "block_size", "dtype", "weights_gib", "vllm_version",
             "num_speculative_tokens")


def _check_flags(args: argparse.Namespace) -> None:
    from club3090.errors import UsageError

    given = [name for name in VLLM_ONLY if getattr(args, name, None) is not None]
    if getattr(args, "enforce_eager", False):
        given.append("enforce_eager")
    if given:
        flags = ", ".join("--" + g.replace("_", "-") for g in given)
        raise UsageError(f"{flags}: vLLM settings; a GGUF model is priced with llama.cpp's flags "
                         "(--ctx-size, --cache-type-k/-v, --n-gpu-layers, ...)")


def _llama_args(args: argparse.Namespace, profile: Any) -> Any:
    from club3090.fit.llamacpp import LlamaCppArgs, cache_types
    from club3090.fit.memory import Unpriceable

    base = LlamaCppArgs(ctx_size=4096)
    if profile is not None:
        pair = cache_types(profile.kv_format)
        if isinstance(pair, Unpriceable):
            return pair
        base = replace(base, ctx_size=profile.max_model_len, parallel=profile.max_num_seqs,
                       cache_type_k=pair[0], cache_type_v=pair[1])
    # the shared kv-calc flags, in llama.cpp's terms
    if args.max_model_len is not None:
        base = replace(base, ctx_size=args.max_model_len)
    if args.max_num_seqs is not None:
        base = replace(base, parallel=args.max_num_seqs)
    if args.kv_cache_dtype is not None:
        pair = cache_types(args.kv_cache_dtype)
        if isinstance(pair, Unpriceable):
            return pair
        base = replace(base, cache_type_k=pair[0], cache_type_v=pair[1])
    given = {"ctx_size": args.ctx_size, "cache_type_k": args.cache_type_k, "cache_type_v": args.cache_type_v,
             "n_gpu_layers": args.n_gpu_layers, "tensor_split": args.tensor_split, "split_mode": args.split_mode,
             "main_gpu": args.main_gpu, "n_cpu_moe": args.n_cpu_moe, "parallel": args.parallel,
             "batch_size": args.batch_size, "ubatch_size": args.ubatch_size}
    out = replace(base, **{k: v for k, v in given.items() if v is not None})
    if args.flash_attn is not None:
        out = replace(out, flash_attn=args.flash_attn != "off")
    if args.override_tensor:
        out = replace(out, override_tensors=tuple(r for group in args.override_tensor for r in group))
    if args.swa_full:
        out = replace(out, swa_full=True)
    if args.no_kv_offload:
        out = replace(out, kv_offload=False)
    return out


def _mib(n: int) -> str:
    return f"{n / (1 << 20):,.0f}"


def run(args: argparse.Namespace, settings: Any, catalog: Any) -> int:
    from club3090.cli.exit_codes import exit_code
    from club3090.cli.render import safe
    from club3090.edges.gguf_source import resolve_gguf
    from club3090.fit.llamacpp import fewest_offloaded, largest_context, predict
    from club3090.fit.memory import Unpriceable
    from club3090.outcome import Outcome
    from club3090.pipeline.stages import gpu_set

    _check_flags(args)
    src = resolve_gguf(args.model, catalog, settings, profile_key=args.profile, quant=args.quant)
    prof = src.profile
    count = args.tp or (prof.tp if prof is not None else 1)
    spec = args.gpus or f"{count}x{prof.reference_gpu if prof is not None else DEFAULT_GPU}"
    gpus = gpu_set(spec, catalog)
    gpu_bytes = list(gpus.memory_bytes) if gpus is not None else []
    largs = _llama_args(args, prof)
    result = largs if isinstance(largs, Unpriceable) else predict(src.model, largs, gpu_bytes)
    if isinstance(result, Unpriceable):      # a verdict about the model or flags (no-fit-model), not a crash
        payload = {"ok": False, "reason": "no-fit-model", "error": result.reason, "model": src.label}
        if args.json:
            print(json.dumps(payload))
        else:
            print(safe(f"no-fit-model: {src.label}: {result.reason}"), file=sys.stderr)
        return exit_code(Outcome.REFUSED)
    best = largest_context(src.model, largs, gpu_bytes, limit=max(src.model.ctx_train or 0, largs.ctx_size))
    if args.solve_max_ctx and best:
        solved = predict(src.model, replace(largs, ctx_size=best), gpu_bytes)
        result = solved if not isinstance(solved, Unpriceable) else result
    rescue = None if result.fits else fewest_offloaded(src.model, largs, gpu_bytes)
    verdict = "fits-clean" if result.fits else "wont-fit"
    if args.json:
        print(json.dumps(_to_json(src, spec, result, verdict, best, rescue), indent=1))
    else:
        _render(src, spec, result, verdict, best, rescue)
    return exit_code(Outcome.OK if result.fits else Outcome.REFUSED)


def _to_json(src: Any, spec: str, result: Any, verdict: str, best: int | None, rescue: Any) -> dict[str, Any]:
    m = src.model
    return {
        "ok": True, "engine": "llama.cpp", "model": src.label, "architecture": m.arch, "quant": src.quant,
        "source": src.where, "gpus": spec, "profile": src.profile.key if src.profile is not None else None,
        "confidence": result.confidence, "verdict": verdict, "weights_bytes": m.weights_bytes,
        "args": asdict(result.args), "kv": {**asdict(result.kv), "total_bytes": result.kv.total_bytes},
        "devices": [{**asdict(d), "total_bytes": d.total_bytes, "fits": d.fits} for d in result.devices],
        "max_ctx_fit": best,
        "fits_with": None if rescue is None else {"n_gpu_layers": rescue.args.n_gpu_layers,
                                                  "n_cpu_moe": rescue.args.n_cpu_moe},
    }


def _render(src: Any, spec: str, result: Any, verdict: str, best: int | None, rescue: Any) -> None:
    from rich.table import Table

    from club3090.cli.render import terminal_console

    m, a, kv = src.model, result.args, result.kv
    console = terminal_console()
    console.print(f"{src.label} ({m.arch}, {src.quant or 'GGUF'}, {m.weights_bytes / (1 << 30):.2f} GiB of "
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
    console.print(f"verdict: {verdict}   confidence: {result.confidence}")
