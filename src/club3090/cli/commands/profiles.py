"""``club3090 profiles [--gpus SPEC] [--json]``: list every curated profile.

Shows model, weights variant, engine, KV format, TP, max context, memory utilisation, status and
whether ``club3090 compose`` can replay it (and why not). With ``--gpus`` each row also says
whether the rig has enough GPUs for the profile's TP and a high enough SM; memory fit is
``club3090 pull``'s job.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from club3090.cli.exit_codes import exit_code
from club3090.gate.outcome import Outcome


def add_parser(sub) -> None:
    p = sub.add_parser("profiles", help="list the curated serving profiles",
                       description=__doc__.splitlines()[0].split(": ", 1)[1],
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog="--gpus forms: 1x3090, 2xrtx-4090, 4xH100-80GB, 2x24GiB, 1x80GB, "
                              "24576:NVIDIA GeForce RTX 3090,24576:NVIDIA GeForce RTX 3090")
    p.add_argument("--gpus", metavar="SPEC",
                   help="rig to check each profile against (GPU count and SM only)")
    p.add_argument("--json", action="store_true", help='print {"profiles": [...]} as JSON')
    p.set_defaults(run=run)


def run(args: argparse.Namespace, provider: Any) -> int:
    from club3090.catalog.listing import profile_rows
    from club3090.pipeline.stages import gpu_set

    catalog = provider.catalog()
    gpus = gpu_set(args.gpus, catalog)
    rows = profile_rows(catalog, gpus)
    if args.json:
        doc = {"catalog": catalog.version, "schema_version": catalog.schema_version,
               "gpus": gpus.to_json() if gpus is not None else None, "profiles": rows}
        sys.stdout.write(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
        return exit_code(Outcome.OK)
    _render(rows, catalog.version, gpus)
    return exit_code(Outcome.OK)


def _render(rows: list[dict], version: str, gpus) -> None:
    from rich.console import Console
    from rich.table import Table

    from club3090.catalog.model import NOT_EMITTABLE_TEXT

    console = Console(file=sys.stdout, width=None if sys.stdout.isatty() else 320, soft_wrap=False)
    title = f"club3090 profiles (catalog {version})"
    if gpus is not None:
        title += f" on {gpus.spec}"
    table = Table(title=title, title_justify="left", box=None, pad_edge=False)
    for name, justify in (("profile", "left"), ("model", "left"), ("variant", "left"),
                          ("engine", "left"), ("kv", "left"), ("tp", "right"), ("max_model_len", "right"),
                          ("mem", "right"), ("status", "left"), ("emit", "left")):
        table.add_column(name, justify=justify, no_wrap=True)
    if gpus is not None:
        table.add_column("rig", no_wrap=True)
    for r in rows:
        emit = "yes" if r["emittable"] else f"no ({NOT_EMITTABLE_TEXT[r['not_emittable_reason']][1]})"
        cells = [r["key"], r["model"], r["weights_variant"], r["engine"], r["kv_format"], str(r["tp"]),
                 str(r["max_model_len"]), "-" if r["mem_util"] is None else f"{r['mem_util']:.2f}",
                 r["status"], emit]
        if gpus is not None:
            rig = r["rig"]
            if rig["ok"]:
                cells.append("ok")
            else:
                cells.append(("no: " if rig["ok"] is False else "unknown: ") + (rig["why_not"] or ""))
        table.add_row(*cells)
    console.print(table)
    emittable = sum(1 for r in rows if r["emittable"])
    console.print(f"{len(rows)} profiles, {emittable} emittable by `club3090 compose`.")
