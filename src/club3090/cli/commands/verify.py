"""`club3090 verify`: functional checks against a running OpenAI-compatible server (``club3090.validate.verify``).

Functional checks against a running OpenAI-compatible server (vLLM): /v1/models, a one-word
completion that stops by itself, SSE streaming, one tool call; --full adds thinking on/off, a
2K-token output that must reach half its length, streamed tool calls, patches applied (--log),
speculative acceptance (/metrics) and a probe of optional capabilities. Exit 0 all green, 1 any
red (or --deadline stopped the run), 2 server unreachable, 64 usage.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from club3090.cli.commands._server import make_client, server_command, stderr_progress
from club3090.cli.commands._types import bounded, token_count
from club3090.cli.exit_codes import exit_code, with_exit_code

_acceptance = bounded(float, low=1, high=64, what="an acceptance length")


def add_parser(sub: Any) -> None:
    p = server_command(sub, "verify", __doc__, help="check a running server: models, Paris, streaming, a tool call",
                       timeout=120.0, deadline=900.0)
    p.add_argument("--full", action="store_true",
                   help="also thinking, long output, streaming tool calls, launch checks, capabilities")
    p.add_argument("--skip-tools", action="store_true", help="skip the tool-call checks (no tool parser served)")
    p.add_argument("--profile", metavar="KEY", help="the curated profile served (its patches and drafter)")
    p.add_argument("--log", metavar="FILE", help="the server's launch log, for the patches-applied check")
    p.add_argument("--context", type=token_count, metavar="N",
                   help="serving context in tokens when /v1/models does not say (max_model_len)")
    p.add_argument("--mtp-min", type=_acceptance, default=2.0,
                   help="lowest mean speculative acceptance length (default 2.0)")
    p.set_defaults(run=run)


def render(report: Any, tool: str = "verify") -> str:
    lines = [f"[{tool}] {report.url} model {report.model or '?'}"]
    for c in report.checks:
        lines.append(f"[{tool}] {c.status.upper():4s} {c.name:20s} {c.detail}")
    if report.full and report.capabilities:
        lines.append(f"[{tool}] capabilities: " + ", ".join(f"{k} {v}" for k, v in report.capabilities.items()))
    verdict = "UNREACHABLE" if report.unreachable else ("PASS" if report.ok else "FAIL")
    counts = report.to_json()
    tail = f", {counts['not_applicable']} not applicable" if counts["not_applicable"] else ""
    lines.append(f"[{tool}] {verdict}: {counts['passed']} passed, {counts['failed']} failed, "
                 f"{counts['skipped']} skipped{tail}" + (" (--deadline reached)" if report.deadline_hit else ""))
    return "\n".join(lines)


def launch_facts(args: argparse.Namespace, provider: Any = None) -> Any:
    """``LaunchFacts`` from ``--profile`` (the provider's catalog) and ``--log`` (a file)."""
    from pathlib import Path

    from club3090.errors import UsageError
    from club3090.validate.launch_checks import LaunchFacts, PatchRef

    log_text = None
    if args.log:
        try:
            with Path(args.log).open("rb") as fh:
                log_text = fh.read(16 * 1024 * 1024).decode("utf-8", "replace")
        except OSError as exc:
            raise UsageError(f"cannot read --log {args.log}: {exc.strerror or exc}") from None
    if not args.profile:
        return LaunchFacts(log_text=log_text, min_acceptance=args.mtp_min)
    if provider is not None:
        catalog = provider.catalog()
    else:
        from club3090.catalog import load_catalog

        catalog = load_catalog()
    profile = catalog.profiles.get(args.profile)
    if profile is None:
        raise UsageError(f"unknown --profile {args.profile!r}; `club3090 profiles` lists them")
    patches = tuple(PatchRef(p.id, _payload_files(p)) for p in catalog.patches.values()
                    if args.profile in p.load_bearing_composes and not p.deprecated)
    return LaunchFacts(args.profile, patches, profile.drafter, log_text, args.mtp_min)


def _payload_files(patch: Any) -> tuple[str, ...]:
    """A patch's payload file names: its ``files`` when the catalog lists them, and its mounts' sources."""
    files = [str(f) for f in getattr(patch, "files", ()) or ()]
    files += [str(m).split(":", 1)[0] for m in getattr(patch, "mounts", ()) or ()]
    return tuple(f for f in files if f.strip("./"))


def run(args: argparse.Namespace, provider: Any, *, http: Any = None, clock: Callable[[], float] | None = None,
        env: Any = None) -> int:
    from club3090.validate.verify import verify

    facts = launch_facts(args, provider)
    client, model = make_client(args, env=env, http=http, clock=clock)
    report = verify(client, model=model, full=args.full, skip_tools=args.skip_tools, launch=facts,
                    context=args.context, progress=(lambda _s: None) if args.json else stderr_progress(args))
    print(json.dumps(with_exit_code(report.to_json(), report.outcome), indent=1) if args.json else render(report))
    return exit_code(report.outcome)
