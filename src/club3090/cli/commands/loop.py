"""``club3090 loop ingest DIR... | list | promote ID | classify DIR...``: the Loop on this machine.

``ingest`` reads capture bundles and calibration receipts (and the receipts kept with
``calibrate --save``), re-derives each bundle's fingerprint, graduates green capabilities only,
counts consensus by the 9-tuple (bundles) or the serving shape (receipts), and records each
group as candidate, validated or tier1 in the local overlay. ``list`` shows the last ingest.
``promote ID`` is the maintainer's promotion: it writes the group as a validated entry into the
local overlay (a refusal, exit 2, when the group's evidence disagrees or its topology is not sane).
``classify`` shows how each bundle is classified and routed; with ``--as CLASS`` it prints the
``exact_fingerprints`` line a maintainer adds to the shipped table to pin that error text.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from club3090.cli.commands._types import add_command
from club3090.cli.exit_codes import exit_code
from club3090.cli.render import emit, safe
from club3090.outcome import Outcome


def add_parser(sub: Any) -> None:
    p = add_command(sub, "loop", __doc__, help="trust pipeline: ingest bundles and receipts, list, promote")
    actions = p.add_subparsers(dest="loop_action", metavar="ACTION", required=True)
    ingest = actions.add_parser("ingest", help="validate bundles and receipts and count consensus")
    ingest.add_argument("dirs", nargs="+", type=Path, metavar="DIR", help="capture folders, bundles or receipt files")
    ingest.add_argument("--json", action="store_true", help="print the state as JSON")
    listing = actions.add_parser("list", help="show the last ingest")
    listing.add_argument("--json", action="store_true", help="print the state as JSON")
    promote = actions.add_parser("promote", help="promote a group into the local overlay")
    promote.add_argument("group", metavar="ID", help="a group id from `club3090 loop list`")
    promote.add_argument("--by", metavar="NAME", default="maintainer", help="who promotes (recorded)")
    promote.add_argument("--json", action="store_true", help="print the written entry as JSON")
    classify = actions.add_parser("classify", help="show each bundle's class, route and error fingerprint")
    classify.add_argument("dirs", nargs="+", type=Path, metavar="DIR", help="bundles or capture folders")
    classify.add_argument("--as", dest="as_class", metavar="CLASS",
                          help="print the exact_fingerprints line that pins these errors to CLASS")
    classify.add_argument("--json", action="store_true", help="print the classifications as JSON")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, provider: Any) -> int:
    action = {"ingest": _ingest, "list": _list, "promote": _promote, "classify": _classify}[args.loop_action]
    return action(args)


def _state_path() -> Path:
    from club3090.reports.overlay import LOOP_STATE, overlay_root
    return overlay_root() / LOOP_STATE


def _ingest(args: argparse.Namespace) -> int:
    from club3090.catalog import load_catalog
    from club3090.edges.files import atomic_write_text
    from club3090.errors import UsageError
    from club3090.reports.capture import dump_json
    from club3090.reports.loop import ingest
    from club3090.reports.overlay import load_promoted, load_receipts, overlay_root

    for d in args.dirs:
        if not d.exists():
            raise UsageError(f"{d}: no such file or folder")
    root = overlay_root()
    promoted = frozenset(tuple(e["consensus_key"]) for e in load_promoted(root))
    curated = frozenset(load_catalog().models)
    state = ingest(args.dirs, curated_models=curated, promoted_keys=promoted,
                   extra_receipts=[r for _, r in load_receipts(root)])
    doc = state.to_json()
    path = _state_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, dump_json(doc))
    return _show(doc, args.json)


def _load_state() -> dict[str, Any] | None:
    from club3090.edges.files import read_json_capped
    from club3090.errors import InputError

    path = _state_path()
    if not path.is_file():
        return None
    doc = read_json_capped(path, limit=64 * 1024 * 1024)
    if not isinstance(doc, dict) or not isinstance(doc.get("groups"), list):
        raise InputError(str(path), "not a loop state; run `club3090 loop ingest DIR` again")
    return doc


def _list(args: argparse.Namespace) -> int:
    doc = _load_state()
    if doc is None:
        doc = {"bundles": [], "groups": [], "rejected": []}
        if not args.json:
            emit("[loop] nothing ingested yet: club3090 loop ingest DIR")
            return exit_code(Outcome.OK)
    return _show(doc, args.json)


def _show(doc: dict[str, Any], as_json: bool) -> int:
    if as_json:
        sys.stdout.write(safe(json.dumps(doc, indent=2, ensure_ascii=False), multiline=True) + "\n")
        return exit_code(Outcome.OK)
    bundles = doc.get("bundles") or []
    counts: dict[str, int] = {}
    for b in bundles:
        counts[b["state"]] = counts.get(b["state"], 0) + 1
    emit(f"[loop] bundles: {len(bundles)} (" + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) + ")")
    for g in doc.get("groups") or []:
        what = g["shape"].get("model") if g["kind"] == "receipts" else (g["key"][0] if g["key"] else "?")
        emit(f"  {g['id']}  {g['kind']:<8} {g['state']:<10} {len(g['members'])} evidence  {what}  ({g['note']})")
        if g.get("calibration_row"):
            emit(f"      calibration row: {json.dumps(g['calibration_row'], ensure_ascii=False)}")
    for r in doc.get("rejected") or []:
        emit(f"  rejected: {r['path']}: {r['reason']}")
    return exit_code(Outcome.OK)


def _promote(args: argparse.Namespace) -> int:
    from club3090.errors import UsageError
    from club3090.reports.overlay import overlay_root, save_promoted

    doc = _load_state()
    if doc is None:
        raise UsageError("nothing ingested yet: run `club3090 loop ingest DIR` first")
    group = next((g for g in doc["groups"] if g.get("id") == args.group), None)
    if group is None:
        raise UsageError(f"no group {args.group!r}; see `club3090 loop list`")
    if "disagree" in str(group.get("note")) or "topology" in str(group.get("note")):
        emit(f"[loop] promote refused: {group['note']}", file=sys.stderr)
        return exit_code(Outcome.REFUSED)
    status = "tier1" if group["state"] == "tier1" else "validated"
    entry = {"schema": 1, "kind": "promoted-entry", "id": f"{group['kind']}-{group['id']}", "status": status,
             "consensus_key": group["key"], "shape": group.get("shape") or {}, "measured": group.get("measured") or {},
             "receipts": group["members"] if group["kind"] == "receipts" else [],
             "capabilities": group.get("capabilities") or [], "promoted_by": args.by,
             "calibration_row": group.get("calibration_row")}
    path = save_promoted(overlay_root(), entry)
    if args.json:
        sys.stdout.write(safe(json.dumps({"path": str(path), "entry": entry}, indent=2, ensure_ascii=False), multiline=True) + "\n")
    else:
        emit(f"[loop] promoted {group['id']} as {status}: {path}")
    return exit_code(Outcome.OK)


def _classify(args: argparse.Namespace) -> int:
    from club3090.errors import UsageError
    from club3090.reports.capture import read_bundle
    from club3090.reports.classify import FAILURE_CLASSES
    from club3090.reports.loop import find_inputs
    from club3090.reports.redact import Redactor
    from club3090.reports.submit import classify

    if args.as_class is not None and args.as_class not in FAILURE_CLASSES:
        raise UsageError(f"--as {args.as_class!r}: one of {', '.join(FAILURE_CLASSES)}")
    for d in args.dirs:
        if not d.exists():
            raise UsageError(f"{d}: no such file or folder")
    folders, _ = find_inputs(args.dirs)
    redactor = Redactor()
    rows = []
    for folder in folders:
        verdict = classify(read_bundle(folder))
        rows.append({"bundle": redactor.text(str(folder)), **redactor.value(verdict.to_json())})
    if args.json:
        sys.stdout.write(safe(json.dumps({"bundles": rows}, indent=2, ensure_ascii=False), multiline=True) + "\n")
        return exit_code(Outcome.OK)
    for row in rows:
        emit(f"{row['bundle']}: {row['failure_class']} -> {row['route']} ({row['tier']}"
              + (f", {row['rule']}" if row["rule"] else "") + ")")
        if row["error_text"]:
            emit(f"  error ({row['error_source']}): {row['error_text']}")
        if row["environment"]:
            emit(f"  fix: {row['next_step']}")
        if args.as_class is not None and row["fingerprint"]:
            emit(f"  exact_fingerprints line:  {row['fingerprint']}: {args.as_class}")
    if not rows:
        emit("[loop] no capture bundles found")
    return exit_code(Outcome.OK)
