"""`club3090 fits [MODEL...] [--gpus SPEC] [--min-context N] [--json]`: the plain question.

With one MODEL: does it fit this rig (exit 0) or not (exit 2), in one sentence, then the shape.
Without MODEL (or with several): every catalog model (and the repos given) ranked for the rig,
each with its best shape, largest context, concurrency at that context, confidence and the one
command to serve it. A GGUF repo lists each quant file with the largest context that fits fully
on the GPUs, or the offload it needs (llama.cpp's memory model, ``_gguf_fits``). Stages: ``club3090.pipeline.fits``. Exit codes through
``club3090.cli.exit_codes``: 0 fits (a ranking: something fits), 2 does not fit / no GPU named or
detected (``hardware-sm-undetermined``), 64 usage.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from club3090.cli.commands import _gguf_fits as gguf_flags
from club3090.cli.commands import _open_fits as open_flags
from club3090.cli.commands._types import (
    add_gpus_flag,
    add_rig_flags,
    add_shape_flags,
    gpu_set,
    positive_int,
    shape_request,
)
from club3090.cli.render import concurrency_text, confidence_text, safe
from club3090.units import GiB


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "fits", help="will MODEL fit this rig (exit 0/2); without MODEL, every catalog model ranked",
        description="Price one model on this rig (the GPUs detected, or --gpus) with its best shape, or "
                    "rank every catalog model: shape, largest context, concurrency, confidence and the "
                    "command to serve it. Header-only reads; a catalog model needs no network.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
               "  club3090 fits --gpus 1x3090\n"
               "  club3090 fits microsoft/phi-4 --gpus 2x3090\n"
               "  club3090 fits Qwen/Qwen2.5-7B --gpus 1x4090 --min-context 32768 --json\n"
               "  club3090 fits unsloth/Qwen3-8B-GGUF --gpus 1x3090 -c 32768 -ctk q8_0 -ctv q8_0")
    p.add_argument("models", nargs="*", metavar="MODEL", help="Hub repo id, local folder or catalog model id")
    add_gpus_flag(p)
    p.add_argument("--min-context", type=positive_int, metavar="N",
                   help="a model fits only if this many tokens of context fit")
    add_rig_flags(p)
    add_shape_flags(p)
    gguf_flags.add_arguments(p)
    open_flags.add_arguments(p)
    p.add_argument("--html", type=Path, metavar="FILE",
                   help="also write one self-contained HTML page: the rig's memory and each candidate's "
                        "weights, KV cache (context) and runtime as bars")
    p.add_argument("--force", action="store_true", help="overwrite an existing --html file")
    p.add_argument("--verbose", "-v", action="store_true", help="also print each shape's reason and runner-ups")
    p.add_argument("--json", action="store_true", help="print the answer as one JSON object")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, provider: Any) -> int:
    from club3090.cli.commands._routing import default_notes, user_defaults
    from club3090.cli.exit_codes import exit_code
    from club3090.pipeline.fits import FitsRequest, fits

    if args.html is not None:
        from club3090.edges.files import check_output_path

        check_output_path(args.html, force=args.force, flag="--html")
    mine, gpus = user_defaults(), gpu_set(args, provider.catalog())
    default_notes(provider.catalog(), args.models, mine, gpus.count if gpus is not None else None)
    report = fits(FitsRequest(models=tuple(args.models), gpus=gpus,
                              min_context=args.min_context, shape=shape_request(args), ctx_size=args.ctx_size,
                              cache_type_k=args.cache_type_k, cache_type_v=args.cache_type_v,
                              gguf=args.gguf, quant=args.quant, user_defaults=mine), provider)
    extended = open_flags.extend(report, args, provider)
    report = extended.report
    code = exit_code(report.outcome)
    single = len(args.models) == 1
    if args.html is not None and report.stop is None:
        write_html(args.html, report, extended, args)
    if args.json:
        doc = to_json(report, code, single)
        open_flags.add_json(doc, extended, args.limit, rig_args(report.gpus))
        print(safe(json.dumps(doc, ensure_ascii=False, indent=1), multiline=True))
        return code
    if report.stop is not None:
        print(safe(f"Cannot tell which GPUs to price: {report.stop.detail.get('message', '')}"))
        return code
    rig = rig_text(report)
    bar = memory_bar(report, extended)
    if single:
        row = report.rows[0]
        print(safe(sentence(row, rig)))
        for line in [c.line() for c in row.cliffs] + detail_lines(row, rig, report.gpus, verbose=True) + bar(row, 0):
            print(safe(line))
        return code
    print(safe(f"On {rig}: {sum(r.fits for r in report.rows)} of {len(report.rows)} models fit "
               "(estimates from the memory model, not measurements)"))
    for i, row in enumerate(report.rows[:args.limit], 1):
        print(safe(f"{i:>2}. {sentence(row, rig, short=True)}"))
        cliffs = [c.line() for c in row.cliffs] if args.verbose else []
        for line in cliffs + detail_lines(row, rig, report.gpus, verbose=args.verbose) + bar(row, 4):
            print(safe(f"    {line}"))
    open_flags.print_rows(extended, len(report.rows) + 1, args.limit, rig_args(report.gpus), bar)
    from club3090.cli.fits_picture import legend
    from club3090.settings import unicode_terminal

    print(legend(ascii_only=not unicode_terminal()))
    return code


def _memory(report: Any, extended: Any) -> tuple[int, int]:
    """The rig's GPU bytes (all cards) and the host bytes llama.cpp may offload to."""
    index = extended.index
    return sum(report.hardware.memory_bytes), int(index.ram_bytes or 0) if index is not None else 0


def memory_bar(report: Any, extended: Any) -> Any:
    """``bar(row, indent) -> [line]``: the row's compact memory bar sized to the terminal."""
    import shutil

    from club3090.cli.fits_picture import compact_bar, row_bars
    from club3090.settings import unicode_terminal

    vram, ram = _memory(report, extended)
    width, plain = shutil.get_terminal_size((100, 24)).columns, not unicode_terminal()

    def bar(row: Any, indent: int) -> list[str]:
        line = compact_bar(row_bars(row, vram, ram), width - indent - len("memory: "), slots=2 if ram else 1,
                           ascii_only=plain)
        return [f"memory: {line}"] if line else []

    return bar


def write_html(path: Path, report: Any, extended: Any, args: argparse.Namespace) -> None:
    """``--html FILE``: every ranked row (to ``--limit``) as bars on one page, written atomically."""
    from club3090.cli.fits_picture import ranking_page, row_bars
    from club3090.edges.files import write_output_text

    vram, ram = _memory(report, extended)
    rig = rig_text(report)
    rows = [(r.model, sentence(r, rig, short=True), r.fits, row_bars(r, vram, ram)) for r in report.rows]
    if extended.index is not None:
        rows += [(r.model, open_flags.row_text(r), r.fits, row_bars(r, vram, ram)) for r in extended.index.rows]
    rows = rows[:args.limit] if args.limit else rows
    ram_text = f", {ram / GiB:.1f} GiB of RAM for offload" if ram else ""
    headline = (f"{rig}: {vram / GiB:.1f} GiB of GPU memory{ram_text}. "
                f"{sum(r[2] for r in rows)} of {len(rows)} candidates fit (estimates, not measurements).")
    write_output_text(path, ranking_page(f"What fits on {rig}", headline, rows), force=args.force, flag="--html")




def k(n: int) -> str:
    return f"{n // 1024}K" if n >= 1024 and n % 1024 == 0 else f"{n:,}"


def rig_args(gpus: Any, *, one_node: bool = False) -> str:
    """The rig flags of a serve command, from the parsed ``--gpus`` (None: detected, no flag); with
    ``one_node`` only one node's GPUs (a shape that fits one machine is served on one)."""
    import shlex

    if gpus is None:
        return ""
    if one_node or gpus.nodes == 1:
        return f" --gpus {shlex.quote(gpus.one_node_spec)}"
    grouped = gpus.spec != gpus.one_node_spec          # written NODESx(ONE NODE), not with --nodes
    out = f" --gpus {shlex.quote(gpus.spec)}" if grouped else f" --gpus {shlex.quote(gpus.spec)} --nodes {gpus.nodes}"
    return out + ("" if gpus.interconnect_assumed else f" --interconnect {gpus.interconnect}")


def rig_text(report: Any) -> str:
    from club3090.cli.render import gpus_text

    hw = report.hardware
    per_node = hw.gpus_per_node if hw.nodes > 1 else len(hw.names)
    one = gpus_text(hw.names[:per_node])
    if hw.nodes <= 1:
        return one
    assumed = " assumed" if report.gpus is None or report.gpus.interconnect_assumed else ""
    return f"{hw.nodes} nodes of {one}, {hw.interconnect}{assumed}"


def shape_text(row: Any) -> str:
    pp = f" x PP {row.pp}" if row.pp > 1 else ""
    kv = f", {row.kv_cache_dtype} KV" if row.kv_cache_dtype else ""
    via = f" ({row.profile})" if row.profile else ""
    return f"TP {row.tp}{pp}{kv}{via}"


def sentence(row: Any, rig: str, *, short: bool = False) -> str:
    name = row.model
    conf = confidence_text(row.confidence, row.fit)
    if row.stop is not None and row.fit is None:
        return f"{name}: cannot be answered: {row.stop}"
    if row.gguf is not None:
        return gguf_flags.sentence(row, rig, short=short)
    fit = row.fit
    where = "" if short else f" on {rig}"
    if row.fits:
        speed = (f", {row.speed.decode_text()} and {row.speed.ttft_text()}{row.speed.drafter_text()} "
                 f"({row.speed.label})" if row.speed is not None else "")
        return (f"{name}: fits{where} ({shape_text(row)}): {k(fit.max_model_len)} context, "
                f"{concurrency_text(fit)}{speed} - {conf}")
    most = fit.max_model_len_fit
    tail = f"the largest context that fits is {k(most)}" if most else "the weights leave no room for a KV cache"
    return f"{name}: does not fit{where} ({shape_text(row)}) - {conf}: {tail}"


def detail_lines(row: Any, rig: str, gpus: Any, *, verbose: bool) -> list[str]:
    if row.gguf is not None:
        return gguf_flags.detail_lines(row)
    note = gguf_flags.mixed_note(row)
    lines = [f"note: {note}"] if note else []
    if row.fits and row.repo:
        lines.append(f"serve: {serve_command(row, gpus)}")
    if row.fit is not None and (row.pp > 1 or (row.gpus_per_node and row.tp * row.pp > row.gpus_per_node)):
        lines.append(f"per GPU: {rank_text(row)}")
    if row.choice is not None:
        lines.extend(f"note: {text}" for text in row.choice.advisories)
    if verbose and row.choice is not None:
        lines.append(f"why: {row.choice.reason}")
        lines.extend(f"runner-up: {c.label()} ({why})" for c, why in row.choice.runner_ups)
    if verbose and row.profile:
        lines.append(f"why: {row.profile} is upstream's curated profile for this GPU count")
    if verbose:
        lines.extend(f"advice: {n.text}" for n in row.advisories)
    return lines


def rank_text(row: Any) -> str:
    """The rank that sets the pool: where it sits, its memory split and the context it holds."""
    from club3090.pipeline.fits import worst_rank

    w = worst_rank(row.fit, row.tp, row.gpus_per_node)
    gib = 2 ** 30
    where = [f"node {w['node']}"] if "node" in w else []
    where.append(f"stage {w['stage']} of {w['stages']}: {w['layers']} layers"
                 + (" + embeddings" if w["embeddings"] else "") + (" + LM head" if w["lm_head"] else ""))
    n = int(row.fit.max_concurrency)
    return (f"worst rank {w['rank']} ({', '.join(where)}): {w['gpu_memory_bytes'] / gib:.1f} GiB, budget "
            f"{w['budget_bytes'] / gib:.1f} GiB = weights {w['weights_bytes'] / gib:.1f} + activation "
            f"{w['activation_bytes'] / gib:.1f} + non-torch {w['non_torch_bytes'] / gib:.1f} + CUDA graphs "
            f"{w['cudagraph_bytes'] / gib:.1f} + KV pool {w['kv_pool_bytes'] / gib:.1f} GiB; "
            f"{k(row.fit.max_model_len)} context, {n} full-length request{'s' if n != 1 else ''} (the pool is the "
            "smallest over all ranks)")


def serve_command(row: Any, gpus: Any) -> str:
    """The one command that serves this row's shape (``up`` takes the curated profile by name;
    ``gpus``: the parsed ``--gpus``). A shape spanning several nodes launches on Ray."""
    profile = f" --profile-like {row.profile}" if row.profile else ""
    across = row.gpus_per_node and row.tp * row.pp > row.gpus_per_node
    rig = rig_args(gpus, one_node=bool(row.gpus_per_node) and not across)   # fits one machine: served on one
    launcher = " --launcher ray" if across else ""
    # `up` stops at the same [C0] ack `pull` asks for; the hint carries it so the command runs as printed
    facts = getattr(row, "facts", None)
    trc = " --trust-remote-code" if facts is not None and facts.requires_trust_remote_code else ""
    return f"club3090 up {row.repo}{profile}" + (rig or "") + launcher + trc + " --dir run/"


def to_json(report: Any, code: int, single: bool) -> dict[str, Any]:
    hw, gpus = report.hardware, report.gpus
    doc: dict[str, Any] = {
        "ok": code == 0, "exit_code": code,
        "gpus": {"spec": gpus.spec if gpus is not None else None, "names": list(hw.names), "memory_bytes": list(hw.memory_bytes),
                 "sm": str(hw.sm) if hw.sm is not None else None} if hw is not None else None,
    }
    if hw is not None and hw.nodes > 1:
        doc["gpus"].update({"nodes": hw.nodes, "gpus_per_node": hw.gpus_per_node, "interconnect": hw.interconnect,
                            "interconnect_assumed": gpus is None or gpus.interconnect_assumed})
    if report.stop is not None:
        doc.update({"summary": "STOPPED", "reason": report.stop.token,
                    "detail": report.stop.detail.get("message", ""), "models": []})
        return doc
    rows = [{**r.to_json(), "serve": serve_command(r, gpus) if r.fits and r.repo and r.gguf is None else
             r.gguf.to_json()["serve"] if r.gguf is not None else None} for r in report.rows]
    doc["models"] = rows
    if single:
        row = report.rows[0]
        priced = row.fit is not None or (row.gguf is not None and bool(row.gguf.rows))
        doc["summary"] = "FITS" if row.fits else "DOES NOT FIT" if priced else "STOPPED"
    return doc
