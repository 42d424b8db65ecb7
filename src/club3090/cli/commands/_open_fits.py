"""`fits` without MODEL: the open-model index beside the curated ranking, with llama.cpp offload.

Flags: ``--engine vllm|llamacpp``, ``--task chat|code|reasoning|embedding|vision``,
``--max-quant-loss PPL``, ``--limit N``, ``--ram GiB`` (else the detected memory), ``--ram-bandwidth
GB/s``. Curated rows the vLLM path could not answer are answered here (a GGUF default under
llama.cpp, a model larger than any parallel size as not fitting). Stages:
``club3090.pipeline.open_fits``.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace
from decimal import Decimal, InvalidOperation
from typing import Any

from club3090.cli.render import safe
from club3090.units import GiB

TASKS = ("chat", "code", "reasoning", "embedding", "vision")


def _decimal(text: str) -> Decimal:
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value.is_finite() or value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative number, got {text!r}")
    return value


def _positive(text: str) -> float:
    value = float(_decimal(text))
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def _count(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {text!r}")
    return int(text)


def _engine_flags() -> dict[str, Any]:
    """``--engine`` values -> the registry's engine (``llamacpp``: llama.cpp without the dot)."""
    from club3090.pipeline.engines import ENGINES

    return {e.name.replace(".", ""): e for e in ENGINES}


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("ranking (without MODEL): curated models and the open-model index")
    g.add_argument("--engine", choices=tuple(_engine_flags()), help="only rows this engine serves")
    g.add_argument("--task", choices=TASKS, help="only index models tagged with this task")
    g.add_argument("--max-quant-loss", type=_decimal, metavar="PPL",
                   help="llama.cpp: the largest perplexity cost a GGUF quant may have (llama-quantize's "
                        "+ppl @ Llama-3-8B; default 0.7: Q3_K_M and better)")
    g.add_argument("--limit", type=_count, metavar="N", help="print the first N rows")
    g.add_argument("--ram", type=_positive, metavar="GiB",
                   help="system memory llama.cpp may offload to (default: detected; 4 GiB kept for the OS)")
    g.add_argument("--ram-bandwidth", type=_positive, metavar="GB/s",
                   help="host memory bandwidth for offloaded speed (default 51.2: dual-channel DDR4-3200)")
    g.add_argument("--no-index", action="store_true", help="rank the curated models only")


@dataclass(frozen=True, slots=True)
class Extended:
    report: Any                   # the curated FitsReport, its unanswered rows answered
    index: Any | None             # OpenFitsReport (None: one model asked, or --no-index)


def _rig(report: Any, catalog: Any) -> Any:
    """The GPUs asked about (``--gpus``), else the detected ones as a GPU set."""
    from club3090.rig.gpus import card_set

    if report.gpus is not None:
        return report.gpus
    hw = report.hardware
    return card_set(tuple(hw.memory_bytes), tuple(hw.names), tuple(catalog.gpu(n) for n in hw.names), hw.sm,
                    "detected")


def _engine_of(row: Any) -> Any:
    from club3090.pipeline.engines import for_format

    return for_format("gguf" if getattr(row, "gguf", None) is not None else "safetensors")


def extend(report: Any, args: argparse.Namespace, provider: Any) -> Extended:
    """The ranking's curated rows answered and filtered, and the index ranked (one model asked: as is)."""
    from club3090.pipeline.fits import rank_key
    from club3090.pipeline.open_fits import OpenFitsRequest, answer_curated, open_report, with_host_memory

    if len(args.models) == 1 or report.stop is not None:
        return Extended(report=report, index=None)
    catalog = provider.catalog()
    rig = _rig(report, catalog)
    engine = _engine_flags()[args.engine] if args.engine else None
    request = OpenFitsRequest(engine=engine, min_context=args.min_context, task=args.task,
                              max_quant_loss=args.max_quant_loss, ram_bandwidth_gb_s=args.ram_bandwidth)
    if args.no_index:       # the curated GGUF rows still plan their offload with the host memory
        index, request = None, with_host_memory(provider, request, args.ram)[0]
    else:
        index, request = open_report(provider, rig, request, args.ram)
    rows = sorted(answer_curated(report.rows, catalog, rig, request), key=rank_key)
    if engine is not None:
        rows = [r for r in rows if _engine_of(r) is engine]
    if args.task not in (None, "chat", "reasoning"):      # curated models are chat/reasoning LLMs
        rows = []
    return Extended(report=replace(report, rows=tuple(rows)), index=index)


def add_json(doc: dict[str, Any], extended: Extended, limit: int | None, rig: str) -> None:
    index = extended.index
    if index is None:
        return
    rows = list(index.rows)[:limit] if limit else list(index.rows)
    doc["index"] = {"version": index.index_version, "confidence": "estimated", "ranked": len(index.rows),
                    "fit": sum(r.fits for r in index.rows), "offloaded": sum(r.offloaded for r in index.rows),
                    "ram": {"usable_bytes": index.ram_bytes, "source": index.ram_source}}
    doc["index_models"] = [{**r.to_json(), "serve": r.serve(rig)} for r in rows]


def _gb(n: int) -> str:
    return f"{n / GiB:.1f} GiB"


def row_text(row: Any) -> str:
    speed = (f", {row.speed.decode_text()} ({row.speed.label})" if row.speed is not None else "")
    if not row.fits:
        what = f"{row.engine} {row.variant}".strip()
        return f"{row.model}: does not fit ({what}) - estimated: {row.reason}"
    if row.plan is None:
        tp = f", TP {row.tp}" if row.tp > 1 else ""
        return f"{row.model}: fits (vLLM, {row.variant}{tp}): {row.context:,} context{speed} - estimated"
    plan = row.plan
    where = "on the GPUs" if not row.offloaded else (
        f"offload: {plan.breakdown.host.weights_bytes / GiB:.1f} GiB in RAM, -ngl {plan.fit.n_gpu_layers}"
        + (f" --n-cpu-moe {plan.fit.n_cpu_moe}" if plan.fit.n_cpu_moe else ""))
    return (f"{row.model}: {'fits' if not row.offloaded else 'runs with offload'} (llama.cpp, {row.variant}, "
            f"{_gb(row.weights_bytes)}, {where}): {row.context:,} context{speed} - estimated")


def print_rows(extended: Extended, start: int, limit: int | None, rig: str, bar: Any = None) -> None:
    index = extended.index
    if index is None:
        return
    shown = list(index.rows)[:max(limit - start + 1, 0)] if limit else list(index.rows)
    ram = (f"{_gb(index.ram_bytes)} of RAM usable ({index.ram_source})" if index.ram_bytes
           else "no RAM for offload (give --ram GiB)")
    print(safe(f"Open-model index: {sum(r.fits for r in index.rows)} of {len(index.rows)} models run "
               f"({sum(r.offloaded for r in index.rows)} with llama.cpp offload; {ram}); every row is estimated"))
    for i, row in enumerate(shown, start):
        print(safe(f"{i:>3}. {row_text(row)}"))
        serve = row.serve(rig)
        if serve:
            print(safe(f"     serve: {serve}"))
        if row.offloaded:
            print(safe(f"     llama-server: {row.llama_server()}"))
        for line in bar(row, 5) if bar is not None else ():
            print(safe(f"     {line}"))
