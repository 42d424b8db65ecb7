"""``club3090 profiles [--gpus SPEC] [--json]``: list every curated profile.

Shows model, weights variant, engine, KV format, TP, max context, memory utilisation, status and
whether ``club3090 compose`` can replay it (and why not). With ``--gpus`` each row also says
whether the rig has enough GPUs for the profile's TP and a high enough SM; memory fit is
``club3090 pull``'s job.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import textwrap
from typing import Any

from club3090.cli.commands._types import add_gpus_flag, gpu_set
from club3090.cli.exit_codes import exit_code
from club3090.cli.render import safe
from club3090.outcome import Outcome


def add_parser(sub: Any) -> None:
    p = sub.add_parser("profiles", help="list the curated serving profiles",
                       description=__doc__.splitlines()[0].split(": ", 1)[1],
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog="with --gpus, each profile is checked against the rig (GPU count and SM only)")
    p.add_argument("model", nargs="?", metavar="MODEL",
                   help="a curated model (id, repo or profile key): print its quick start instead of the table")
    p.add_argument("--set-default", nargs=2, metavar=("MODEL", "KEY"),
                   help="store KEY as your default profile for MODEL (state folder); pull, up and fits of "
                        "MODEL then use it. KEY 'none' forgets it")
    add_gpus_flag(p)
    p.add_argument("--json", action="store_true", help='print {"profiles": [...]} as JSON')
    p.set_defaults(run=run)


def _model_id(catalog: Any, name: str) -> str:
    from club3090.errors import UsageError
    from club3090.pipeline.routing import curated_model

    profile = catalog.profiles.get(catalog.profile_key(name) or "")
    hit = curated_model(catalog, name)
    if profile is None and hit is None:
        raise UsageError(f"{name!r} is not a curated model, repo or profile; `club3090 profiles` lists them")
    return profile.model if profile is not None else hit[0]  # type: ignore[index]


def _set_default(args: argparse.Namespace, catalog: Any) -> int:
    from club3090.edges.user_defaults import write_default
    from club3090.errors import UsageError

    model_id, name = _model_id(catalog, args.set_default[0]), args.set_default[1]
    key = None if name.lower() == "none" else catalog.profile_key(name)
    if name.lower() != "none":
        if key is None:
            raise UsageError(f"unknown profile {name!r}; `club3090 profiles {model_id}` lists this model's")
        if catalog.profiles[key].model != model_id:
            raise UsageError(f"profile {key} serves {catalog.profiles[key].model}, not {model_id}")
    path = write_default(model_id, key)
    doc = {"model": model_id, "default": key, "file": str(path)}
    print(safe(json.dumps(doc) if args.json else
               f"{model_id}: default profile {key or '(none: the automatic choice)'} (stored in {path})"))
    return exit_code(Outcome.OK)


def _quick_start(args: argparse.Namespace, catalog: Any) -> int:
    from club3090.catalog.quick_start import quick_start, render_quick_start
    from club3090.edges.user_defaults import read_defaults

    model_id = _model_id(catalog, args.model)
    doc = quick_start(catalog, model_id, read_defaults().get(model_id))
    text = json.dumps(doc, indent=2, ensure_ascii=False) if args.json else "\n".join(render_quick_start(doc))
    print(safe(text, multiline=True))
    return exit_code(Outcome.OK)


def run(args: argparse.Namespace, provider: Any) -> int:
    from club3090.catalog.listing import emittability, profile_rows
    catalog = provider.catalog()
    if args.set_default:
        return _set_default(args, catalog)
    if args.model:
        return _quick_start(args, catalog)
    gpus = gpu_set(args, catalog)
    rows = profile_rows(catalog, gpus)
    _apply_compose_verdict(rows, catalog, provider)
    if args.json:
        aliases = {a: p.key for p in catalog.profiles.values() for a in p.aliases}
        doc = {"catalog": catalog.version, "schema_version": catalog.schema_version,
               "upstream_commit": catalog.upstream_commit,
               "gpus": gpus.to_json() if gpus is not None else None, "profiles": rows,
               "aliases": dict(sorted(aliases.items())), "emittability": emittability(catalog, rows)}
        sys.stdout.write(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
        return exit_code(Outcome.OK)
    width = shutil.get_terminal_size((80, 24)).columns if sys.stdout.isatty() else None
    sys.stdout.write(render(rows, catalog.version, gpus, width))
    return exit_code(Outcome.OK)


def _apply_compose_verdict(rows: list[dict[str, Any]], catalog: Any, provider: Any) -> None:
    """Emittable means ``club3090 compose --profile KEY`` writes it: a profile in scope whose replay
    ``compose`` refuses (a pin the arch row marks as not loading, a withdrawn engine) is not."""
    from club3090.compose.generate import dry_run

    for row in rows:
        # another engine's profile is out of the vLLM scope rule, but compose replays its captures
        llama = row["not_emittable_reason"] == "engine-not-vllm" and not _gate_engine(row)
        if not row["emittable"] and not llama:
            continue
        outcome = dry_run(row["key"], catalog, guard_runner=provider.drift_guard)
        if not outcome.ok:
            row.update(emittable=False, not_emittable_reason=outcome.token,
                       not_emittable_text=f"compose refuses: {outcome.detail or outcome.token}")
        elif llama:
            row.update(emittable=True, not_emittable_reason=None, not_emittable_text=None)



def _emit_cell(row: dict[str, Any]) -> str:
    from club3090.catalog.model import NOT_EMITTABLE_TEXT

    reason = row["not_emittable_reason"]
    if row["emittable"]:
        return "yes"
    if reason in NOT_EMITTABLE_TEXT:
        return f"no ({NOT_EMITTABLE_TEXT[reason][1]})"
    return f"no (compose: {str(reason).rsplit(':', 1)[-1]})"


def _rig_cell(row: dict[str, Any]) -> str:
    rig = row["rig"]
    if rig["ok"]:
        return "ok"
    return ("no: " if rig["ok"] is False else "unknown: ") + (rig["why_not"] or "")


# (header, cell, right-aligned); the order columns are dropped in when the terminal is narrow is
# DROP_ORDER: the key is never dropped nor cut
COLUMNS: tuple[tuple[str, Any, bool], ...] = (
    ("profile", lambda r: r["key"], False),
    ("model", lambda r: r["model"], False),
    ("variant", lambda r: r["weights_variant"], False),
    ("engine", lambda r: r["engine"], False),
    ("kv", lambda r: r["kv_format"], False),
    ("tp", lambda r: str(r["tp"]), True),
    ("max_model_len", lambda r: str(r["max_model_len"]), True),
    ("mem", lambda r: "-" if r["mem_util"] is None else f"{r['mem_util']:.2f}", True),
    ("status", lambda r: r["status"] + (" golden" if r.get("golden") else ""), False),
    ("emit", _emit_cell, False),
)
DROP_ORDER = ("variant", "mem", "engine", "max_model_len", "status", "model", "kv", "tp")
GAP = 2
WRAP_MIN = 24


def _gate_engine(row: dict[str, Any]) -> bool:
    """The row's engine is the registry's default (vLLM: the one `compose` and the gate replay)."""
    from club3090.pipeline import engines

    return engines.by_type(row["engine_type"]) is engines.DEFAULT


def render(rows: list[dict[str, Any]], version: str, gpus: Any, width: int | None) -> str:
    """The table as text: at ``width`` columns (a terminal) less important columns are dropped so
    the profile key stays whole, and the last column wraps if it must; ``width=None`` (a pipe)
    keeps every column. No line ends in padding."""
    from club3090.cli.render import safe

    columns = list(COLUMNS)
    if gpus is not None:
        columns.append(("rig", _rig_cell, False))
    cells = [[safe(fn(r)) for _h, fn, _right in columns] for r in rows]
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, (h, _fn, _r) in enumerate(columns)]
    hidden: list[str] = []
    if width is not None:
        for name in DROP_ORDER:
            # the last column may wrap: it needs only WRAP_MIN columns of its own
            if sum(widths[:-1]) + min(widths[-1], WRAP_MIN) + GAP * (len(widths) - 1) <= width:
                break
            i = [h for h, _fn, _r in columns].index(name)
            hidden.append(name)
            del columns[i], widths[i]
            for c in cells:
                del c[i]
    title = f"club3090 profiles (catalog {version})" + (f" on {safe(gpus.spec)}" if gpus is not None else "")
    emittable = sum(1 for r in rows if r["emittable"] and _gate_engine(r))
    vllm = sum(1 for r in rows if _gate_engine(r))
    llama = [r for r in rows if not _gate_engine(r)]
    summary = (f"{len(rows)} profiles, {emittable} of {vllm} vLLM profiles emittable by `club3090 compose`, "
               f"{sum(1 for r in llama if r['emittable'])} of {len(llama)} llama.cpp-family ones "
               f"(`--json` gives each refusal's reason).")
    if width is not None and sum(widths[:-1]) + GAP * (len(widths) - 1) + WRAP_MIN // 2 > width:
        # too narrow for any table: one block per profile, the key on its own line
        out = textwrap.wrap(title, width)
        names = [h for h, _fn, _r in columns]
        for c in cells:
            rest = "; ".join(f"{h} {v}" for h, v in zip(names[1:], c[1:], strict=True))
            out.append(c[0])
            out.extend(textwrap.wrap(rest, width, initial_indent="  ", subsequent_indent="    "))
        out.extend(textwrap.wrap(summary, width))
        return "\n".join(out) + "\n"
    last = len(columns) - 1
    room = None
    if width is not None and last > 0:
        room = max(WRAP_MIN // 2, width - sum(widths[:-1]) - GAP * last)

    def line(values: list[str]) -> list[str]:
        parts = []
        for i, (value, (_h, _fn, right)) in enumerate(zip(values, columns, strict=True)):
            if i == last:
                parts.append(value)
            else:
                parts.append(value.rjust(widths[i]) if right else value.ljust(widths[i]))
        text = (" " * GAP).join(parts)
        if room is None or len(values[-1]) <= room:
            return [text.rstrip()]
        indent = " " * (len(text) - len(values[-1]))
        pieces = textwrap.wrap(values[-1], room) or [""]
        return [(indent + piece).rstrip() if i else (text[:len(indent)] + piece).rstrip()
                for i, piece in enumerate(pieces)]

    out = [title, *line([h for h, _fn, _r in columns])]
    for c in cells:
        out.extend(line(c))
    out.extend(textwrap.wrap(summary, width) if width is not None else [summary])
    if hidden:
        note = f"(hidden at {width} columns: {', '.join(hidden)}; --json or a wider terminal shows them)"
        out.extend(textwrap.wrap(note, width or len(note)))
    return "\n".join(out) + "\n"
