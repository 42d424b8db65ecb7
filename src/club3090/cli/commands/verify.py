"""`club3090 verify`: functional checks against a running OpenAI-compatible server (``club3090.validate.verify``).

Exit codes: 0 every check passed (or was skipped), 1 a check failed, 2 the server was
unreachable, 64 usage.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from club3090.cli.commands._server import add_common, make_client, stderr_progress


def add_parser(sub) -> None:
    p = sub.add_parser("verify", help="check a running server: models, Paris, streaming, a tool call",
                       description="Functional checks against a running OpenAI-compatible server (vLLM): "
                                   "/v1/models, a one-word completion, SSE streaming, one tool call; --full "
                                   "adds thinking on/off, a 2K-token output scan and streamed tool calls. "
                                   "Exit 0 all green, 1 any red, 2 server unreachable.")
    add_common(p, timeout=120.0)
    p.add_argument("--full", action="store_true", help="also thinking on/off, long output, streaming tool calls")
    p.add_argument("--skip-tools", action="store_true", help="skip the tool-call checks (no tool parser served)")
    p.set_defaults(run=run)


def render(report: Any) -> str:
    lines = [f"[verify] {report.url} model {report.model or '?'}"]
    for c in report.checks:
        lines.append(f"[verify] {c.status.upper():4s} {c.name:20s} {c.detail}")
    verdict = "UNREACHABLE" if report.unreachable else ("PASS" if report.ok else "FAIL")
    counts = report.to_json()
    lines.append(f"[verify] {verdict}: {counts['passed']} passed, {counts['failed']} failed, "
                 f"{counts['skipped']} skipped")
    return "\n".join(lines)


def run(args: argparse.Namespace, provider: Any, *, http: Any = None, clock: Callable[[], float] | None = None,
        env: Any = None) -> int:
    from club3090.validate.verify import verify

    client, model = make_client(args, env=env, http=http, clock=clock)
    report = verify(client, model=model, full=args.full, skip_tools=args.skip_tools,
                    progress=(lambda _s: None) if args.json else stderr_progress(args))
    print(json.dumps(report.to_json(), indent=1) if args.json else render(report))
    return report.exit_code
