"""`club3090 bench`: TTFT and decode throughput of a running server (``club3090.validate.bench``).

3 warm-ups, then N streamed runs each of a narrative and a code prompt: wall, TTFT, tokens, wall
and decode tokens/s with mean, std and CV. --prefill N probes prompt processing at N tokens. Exit 0
all runs answered, 1 a run failed, 2 server unreachable, 64 usage.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from club3090.cli.commands._server import make_client, server_command, stderr_progress
from club3090.cli.commands._types import bounded, token_count
from club3090.cli.exit_codes import exit_code, with_exit_code

_runs = bounded(int, low=1, high=1000, what="a run count")


def add_parser(sub: Any) -> None:
    p = server_command(sub, "bench", __doc__, help="measure TTFT and decode tokens/s of a running server",
                       timeout=600.0, deadline=3600.0)
    p.add_argument("--runs", type=_runs, default=5, help="measured runs per prompt (default 5)")
    p.add_argument("--prefill", type=token_count, action="append", default=[], metavar="N",
                   help="probe prefill at about N prompt tokens, 3 runs (repeatable)")
    p.add_argument("--out", help="also write the JSON report to this file (atomically)")
    p.set_defaults(run=run)


def _f(value: Any, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


def render(report: Any) -> str:
    lines = [f"[bench] {report.url} model {report.model or '?'}"]
    if report.unreachable or report.error:
        lines.append(f"[bench] {'UNREACHABLE' if report.unreachable else 'ERROR'}: {report.error}")
        return "\n".join(lines)
    lines.append(f"{'prompt':16s} {'ok':>5s} {'tokens':>8s} {'wall s':>8s} {'TTFT s':>8s} {'wall t/s':>9s} "
                 f"{'decode t/s':>11s} {'± std':>7s} {'CV':>6s}")
    for kind, s in report.summaries().items():
        dec = s["decode_tps"]
        mark = "" if s["tokens_source"] == ["usage"] else " *"
        lines.append(f"{kind:16s} {s['ok']:>2d}/{s['runs']:<2d} {_f(s['tokens']['mean'], '.0f'):>8s} "
                     f"{_f(s['wall_s']['mean'], '.2f'):>8s} {_f(s['ttft_s']['mean'], '.3f'):>8s} "
                     f"{_f(s['wall_tps']['mean']):>9s} {_f(dec['mean']):>11s} {_f(dec['std']):>7s} "
                     f"{_f(None if dec['cv'] is None else dec['cv'] * 100, '.1f') + '%':>6s}{mark}")
        if "prefill_tps" in s:
            lines.append(f"{'':16s} prompt {_f(s['prompt_tokens']['mean'], '.0f')} tokens, prefill "
                         f"{_f(s['prefill_tps']['mean'], '.0f')} tok/s (CV "
                         f"{_f(None if s['prefill_tps']['cv'] is None else s['prefill_tps']['cv'] * 100)}%)")
    if any(s["tokens_source"] != ["usage"] for s in report.summaries().values()):
        lines.append("* tokens counted from stream chunks (no usage in the stream): a floor with speculative decoding")
    for r in report.runs:
        if not r.ok:
            lines.append(f"[bench] {r.kind} run {r.index + 1} failed: {r.error}")
    return "\n".join(lines)


def run(args: argparse.Namespace, provider: Any, *, http: Any = None, clock: Callable[[], float] | None = None,
        env: Any = None, salt: Callable[[], str] | None = None) -> int:
    from pathlib import Path

    from club3090.edges.files import atomic_write_text
    from club3090.validate.bench import bench

    client, model = make_client(args, env=env, http=http, clock=clock)
    extra: dict[str, Any] = {"salt": salt} if salt is not None else {}
    report = bench(client, model=model, runs=args.runs, prefill=tuple(args.prefill),
                   progress=(lambda _s: None) if args.json else stderr_progress(args), **extra)
    data = with_exit_code(report.to_json(), report.outcome)
    if args.out:
        atomic_write_text(Path(args.out), json.dumps(data, indent=1) + "\n")
    print(json.dumps(data, indent=1) if args.json else render(report))
    return exit_code(report.outcome)
