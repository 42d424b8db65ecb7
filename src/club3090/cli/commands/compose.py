"""`club3090 compose --profile KEY`: replay a curated profile's shipped compose (docs/DESIGN.md); the
llama.cpp family (llama.cpp, ik_llama.cpp, beellama) replays through ``club3090.compose.llamacpp``.

Exit codes: 0 emitted, 2 refused (stratum-6 token), 3 degraded without --accept-degraded,
4 candidates listed (the tuple form: --model/--engine/--kv/--tp instead of --profile),
64 usage (unknown profile, existing --out without --force).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from club3090.cli.commands._types import positive_int
from club3090.cli.exit_codes import exit_code
from club3090.errors import UsageError
from club3090.outcome import Outcome

if TYPE_CHECKING:  # pragma: no cover - typing only
    from club3090.catalog.model import Catalog
    from club3090.pipeline.provider import Provider

FORMAT_CHOICES = ("compose", "vllm-serve", "llama-server", "json")
TUPLE_FLAGS = ("model", "engine", "kv", "tp")


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "compose", help="emit the compose file of a curated profile (reproduce and flag, never repair)",
        description="Replay a curated profile's shipped docker compose service: only the param slots "
                    "change, --trust-remote-code is never emitted, load-bearing patches are wired.")
    p.add_argument("key", nargs="?", metavar="KEY", help="registry key (the same as --profile KEY)")
    p.add_argument("--profile", metavar="KEY", help="registry key, e.g. vllm/minimal or llamacpp/default")
    tuple_form = p.add_argument_group(
        "tuple form", "instead of --profile: list the profiles matching these values (exit 4), emit nothing")
    tuple_form.add_argument("--model", metavar="ID", help="curated model id, e.g. qwen3.6-27b")
    tuple_form.add_argument("--engine", metavar="ID", help="engine id, e.g. vllm-stable")
    tuple_form.add_argument("--kv", metavar="FORMAT", help="KV format, e.g. fp8_e5m2")
    tuple_form.add_argument("--tp", type=positive_int, metavar="N", help="tensor-parallel size (>= 1)")
    p.add_argument("--out", type=Path, metavar="FILE",
                   help="write here (atomically) instead of printing to stdout")
    p.add_argument("--force", action="store_true", help="overwrite an existing --out file")
    p.add_argument("--accept-degraded", action="store_true",
                   help="emit even when a capability-degraded patch had to be omitted (else exit 3)")
    p.add_argument("--format", dest="format", choices=FORMAT_CHOICES, default="compose",
                   help="compose file (default), the equivalent `vllm serve` (vLLM profiles) or `llama-server` "
                        "(llama.cpp-family profiles) command line, or JSON")
    p.add_argument("--json", action="store_true",
                   help="print a JSON summary on stdout (ok, exit_code, refusal, patches, ...)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, provider: "Provider") -> int:
    from club3090.compose.generate import generate
    from club3090.edges.files import check_output_path, write_output_text

    catalog = provider.catalog()
    if args.key is not None:
        if args.profile is not None and args.profile != args.key:
            raise UsageError("give the profile once: KEY or --profile KEY")
        args.profile = args.key
    given = {name: getattr(args, name) for name in TUPLE_FLAGS if getattr(args, name) is not None}
    if args.profile is None:
        if not given:
            raise UsageError("give --profile KEY, or --model/--engine/--kv/--tp to list candidates")
        return _list_candidates(catalog, given, as_json=args.json, guard=provider.drift_guard)
    if given:
        raise UsageError("--profile and the tuple form (--model/--engine/--kv/--tp) are exclusive")
    if catalog.profile_key(args.profile) is None:
        raise UsageError(f"unknown profile {args.profile!r} (see `club3090 profiles`)")
    args.profile = catalog.profile_key(args.profile)                  # an old (renamed) slug
    from club3090.compose.llamacpp import is_llamacpp

    if args.format == "llama-server" and not is_llamacpp(catalog, args.profile):
        raise UsageError(f"--format llama-server: {args.profile} is not a llama.cpp-family profile (--format vllm-serve)")
    out: Path | None = args.out
    if out is not None:
        check_output_path(out, force=args.force)

    outcome = generate(args.profile, catalog, guard_runner=provider.drift_guard, accept_degraded=args.accept_degraded,
                       out_name=str(out) if out is not None else None, fmt=args.format)
    for notice in outcome.notices:
        print(f"[compose] {notice.text}", file=sys.stderr)
    written: str | None = None
    if outcome.ok and outcome.text is not None:
        if out is not None:
            write_output_text(out, outcome.text, force=args.force)
            written = str(out)
            print(f"[compose] wrote {out}", file=sys.stderr)
        elif not args.json:
            sys.stdout.write(outcome.text)
    else:
        print(f"[compose] refused: {outcome.token}" + (f" ({outcome.detail})" if outcome.detail else ""),
              file=sys.stderr)
        if outcome.outcome is Outcome.NEEDS_ACK:
            print("[compose] re-run with --accept-degraded to emit the degraded compose", file=sys.stderr)
    if args.json:
        payload = outcome.to_json(out=written)
        payload["exit_code"] = exit_code(outcome.outcome)
        payload["format"] = args.format
        if outcome.ok and out is None:
            payload["text"] = outcome.text
        print(json.dumps(payload, ensure_ascii=False))
    return exit_code(outcome.outcome)


def _list_candidates(catalog: "Catalog", given: dict[str, Any], *, as_json: bool, guard: Any) -> int:
    """The tuple form only lists: choosing a profile stays the user's decision."""
    from club3090.compose.generate import dry_run

    fields = {"model": "model", "engine": "engine", "kv": "kv_format", "tp": "tp"}
    rows = []
    for key, profile in sorted(catalog.profiles.items()):
        if all(getattr(profile, fields[name]) == value for name, value in given.items()):
            ok, why = catalog.emittable(key)
            if ok:
                outcome = dry_run(key, catalog, guard_runner=guard)
                ok, why = outcome.ok, (None if outcome.ok else outcome.token)
            rows.append({"profile": key, "emittable": ok, "not_emittable_reason": why})
    if as_json:
        print(json.dumps({"ok": False, "exit_code": exit_code(Outcome.LISTING_ONLY), "query": given, "candidates": rows},
                         ensure_ascii=False))
    else:
        for row in rows:
            note = "" if row["emittable"] else f"   (not emittable: {row['not_emittable_reason']})"
            print(f"{row['profile']}{note}")
        if not rows:
            print("[compose] no profile matches", file=sys.stderr)
        print("[compose] listing only: pick one and run `club3090 compose --profile KEY`", file=sys.stderr)
    return exit_code(Outcome.LISTING_ONLY)
