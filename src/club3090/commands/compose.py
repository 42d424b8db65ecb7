"""`club3090 compose --profile KEY`: replay a curated profile's shipped compose (SYSTEM.md section 11).

Exit codes: 0 emitted, 2 refused (stratum-6 token), 3 degraded without --accept-degraded,
64 usage (unknown profile, existing --out without --force).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from club3090.errors import UsageError

FORMAT_CHOICES = ("compose", "vllm-serve", "json")


def add_parser(sub) -> None:
    p = sub.add_parser(
        "compose", help="emit the compose file of a curated profile (reproduce and flag, never repair)",
        description="Replay a curated profile's shipped docker compose service: only the param slots "
                    "change, --trust-remote-code is never emitted, load-bearing patches are wired.")
    p.add_argument("--profile", required=True, metavar="KEY", help="registry key, e.g. vllm/minimal")
    p.add_argument("--out", type=Path, metavar="FILE",
                   help="write here (atomically) instead of printing to stdout")
    p.add_argument("--force", action="store_true", help="overwrite an existing --out file")
    p.add_argument("--accept-degraded", action="store_true",
                   help="emit even when a capability-degraded patch had to be omitted (else exit 3)")
    p.add_argument("--format", dest="format", choices=FORMAT_CHOICES, default="compose",
                   help="compose file (default), the equivalent `vllm serve` command line, or JSON")
    p.add_argument("--json", action="store_true",
                   help="print a JSON summary on stdout (ok, exit_code, refusal, patches, ...)")
    p.set_defaults(run=run)


def run(args, settings) -> int:
    from club3090.catalog import load_catalog
    from club3090.compose import generate
    from club3090.fsutil import check_output_path, write_output_text

    catalog = load_catalog()
    if args.profile not in catalog.profiles:
        raise UsageError(f"unknown profile {args.profile!r} (see `club3090 profiles`)")
    out: Path | None = args.out
    if out is not None:
        check_output_path(out, force=args.force)

    outcome = generate(args.profile, catalog, accept_degraded=args.accept_degraded,
                       out_name=str(out) if out is not None else None, fmt=args.format)
    for notice in outcome.notices:
        print(f"[compose] {notice}", file=sys.stderr)
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
        if outcome.exit_code == 3:
            print("[compose] re-run with --accept-degraded to emit the degraded compose", file=sys.stderr)
    if args.json:
        payload = outcome.to_json(out=written)
        payload["format"] = args.format
        if outcome.ok and out is None:
            payload["text"] = outcome.text
        print(json.dumps(payload, ensure_ascii=False))
    return outcome.exit_code
