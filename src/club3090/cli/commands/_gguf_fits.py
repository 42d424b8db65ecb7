"""`fits` on GGUF repos: the llama.cpp flags it takes and how a repo's quants are shown."""

from __future__ import annotations

import argparse
from typing import Any

from club3090.cli.commands._types import positive_int
from club3090.units import GiB


def add_arguments(p: argparse.ArgumentParser) -> None:
    from club3090.cli.commands._llamacpp import cache_type

    g = p.add_argument_group("GGUF repos (llama.cpp's memory model; llama.cpp's flag names)")
    g.add_argument("--ctx-size", "-c", type=positive_int, metavar="N",
                   help="the context each quant must hold (default: --min-context, else 4096)")
    g.add_argument("--cache-type-k", "-ctk", type=cache_type, metavar="TYPE",
                   help="K cache type (f16, q8_0, q4_0, ...; default f16)")
    g.add_argument("--cache-type-v", "-ctv", type=cache_type, metavar="TYPE",
                   help="V cache type (f16, q8_0, q4_0, ...; default f16)")
    g.add_argument("--quant", metavar="QUANT", help="price only this quant of a GGUF repo (Q4_K_M, ...)")
    g.add_argument("--gguf", action="store_true",
                   help="price the repo's GGUF files with llama.cpp even when it also has safetensors")


def k(n: int) -> str:
    return f"{n // 1024}K" if n >= 1024 and n % 1024 == 0 else f"{n:,}"


def _size(row: Any) -> str:
    n = row.size_bytes if row.size_bytes is not None else (row.model.weights_bytes if row.model else None)
    return f"{n / GiB:6.2f} GiB" if n is not None else "     ? GiB"


def quant_text(row: Any) -> str:
    """One quant's answer: fully on the GPUs with its largest context, the offload it needs, or why not."""
    fit, m = row.fit, row.model
    if fit is None or m is None:
        return row.stop or "not priced"
    layers = m.n_layer + 1
    if fit.fits_fully:
        top = " (the model's maximum)" if m.ctx_train and fit.context >= m.ctx_train else ""
        return f"fully on GPU: {k(fit.context)} context{top}"
    if fit.offloaded:
        host = f"{fit.host_weights_bytes / GiB:.1f} GiB of weights in host RAM"
        if fit.n_cpu_moe and fit.n_gpu_layers >= layers:
            return (f"offload: --n-cpu-moe {fit.n_cpu_moe} (the experts of {fit.n_cpu_moe} of {m.n_layer} layers "
                    f"on the CPU, {host}): {k(fit.context)} context")
        on_cpu = layers - fit.n_gpu_layers
        return f"offload: -ngl {fit.n_gpu_layers} of {layers} layers ({on_cpu} on the CPU, {host}): {k(fit.context)} context"
    most = fit.full_gpu_context
    return ("does not fit, even with layers on the CPU" +
            (f" (fully on GPU at most {k(most)} context)" if most else ""))


def sentence(row: Any, rig: str, *, short: bool = False) -> str:
    listing = row.gguf
    where = "" if short else f" on {rig}"
    n = len(listing.rows)
    best = listing.best
    kv = f"{listing.args.cache_type_k}/{listing.args.cache_type_v} KV"
    if best is None or best.fit is None:
        return (f"{row.model}: no GGUF quant fits{where} at {k(listing.args.ctx_size)} context "
                f"(llama.cpp, {kv}, {n} quant{'s' if n != 1 else ''}) - estimated")
    how = "fits" if best.fit.fits_fully else "needs offload"
    speed = f", {row.speed.decode_text()}" if getattr(row, "speed", None) is not None else ""
    return (f"{row.model}: {best.label} {how}{where} (llama.cpp, {kv}): {quant_text(best)}{speed} - {n} "
            f"quant{'s' if n != 1 else ''}, estimated")


def detail_lines(row: Any) -> list[str]:
    from club3090.engines.llamacpp.fits import llama_server_command

    listing = row.gguf
    width = max((len(r.label) for r in listing.rows), default=4)
    lines = [f"quants, best first (llama.cpp's memory model, -ctk {listing.args.cache_type_k} "
             f"-ctv {listing.args.cache_type_v}, at least {k(listing.args.ctx_size)} context):"]
    for i, r in enumerate(listing.rows, 1):
        split = f" ({len(r.files)} files)" if len(r.files) > 1 else ""
        lines.append(f"{i:>3}. {r.label:<{width}} {_size(r)}  {quant_text(r)}{split}")
    best = listing.best
    if best is not None:
        lines.append(f"serve: {llama_server_command(listing, best)}")
    return lines


def mixed_note(row: Any) -> str | None:
    if not row.gguf_files or row.gguf is not None:
        return None
    n = len(row.gguf_files)
    return (f"the repo also holds {n} GGUF file{'s' if n != 1 else ''} for llama.cpp: "
            f"`club3090 fits {row.model} --gguf` prices them")
