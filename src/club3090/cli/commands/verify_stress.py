"""`club3090 verify-stress`: concurrency, a prompt near the serving context, tool round trips, then
upstream's needle ladder, tool-result prefill and agent / coding / reasoning probes
(``club3090.validate.stress``, ``club3090.validate.ladder``).

Exit codes: 0 no check failed, 1 a check failed (or ``--deadline`` stopped the run), 2 the server
was unreachable, 64 usage.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from club3090.cli.commands._server import add_common, make_client, stderr_progress
from club3090.cli.commands._types import bounded, token_count
from club3090.cli.exit_codes import exit_code, with_exit_code

_streams = bounded(int, low=1, high=64, what="a stream count")
_rounds = bounded(int, low=0, high=20, what="a round count")
_fill = bounded(float, low=0.1, high=0.98, what="a fraction of the context")


def add_parser(sub: Any) -> None:
    p = sub.add_parser("verify-stress", help="load checks, the needle ladder, a ~25K tool-result prefill, "
                                             "agent / coding / reasoning probes",
                       description="N concurrent streamed chats that must all end with [DONE]; one prompt at "
                                   "--fill of the serving context that must be taken and answered; --rounds tool "
                                   "round trips (named tool_choice, tool result, answer). Then upstream's "
                                   "verify-stress checks: the needle-in-a-haystack ladder (1K, 4K, 16K, ... up to "
                                   "0.9 of the served context; pass/fail per rung and the largest passing length), "
                                   "the tool-prefill probe (a ~25K-token tool result, the request shape that runs a "
                                   "tight KV pool out of memory), and the agent (the model picks the tool), coding "
                                   "(a Python function, parsed, never run) and reasoning probes. Bounded by "
                                   "--deadline. Exit 0 all green, 1 any red, 2 server unreachable.")
    add_common(p, timeout=600.0, deadline=2700.0)
    p.add_argument("--streams", type=_streams, default=4, help="concurrent streams (default 4, at most 64)")
    p.add_argument("--context", type=token_count, metavar="N",
                   help="serving context in tokens when /v1/models does not say (max_model_len)")
    p.add_argument("--fill", type=_fill, default=0.9, help="long prompt size as a fraction of the context "
                                                           "(default 0.9)")
    p.add_argument("--rounds", type=_rounds, default=2, help="tool-call round trips (default 2, at most 20)")
    p.add_argument("--skip-tools", action="store_true", help="skip the tool round trips, the tool prefill and the "
                                                             "agent probe")
    p.add_argument("--ladder-max", type=token_count, metavar="N",
                   help="the needle ladder's top rung in tokens (default: 0.9 of the served context, at most 262144)")
    p.add_argument("--tool-prefill-tokens", type=token_count, default=25_000, metavar="N",
                   help="size of the tool result in the prefill probe (default 25000; capped by the context)")
    p.add_argument("--no-ladder", action="store_true", help="skip the needle ladder")
    p.add_argument("--no-probes", action="store_true", help="skip the agent, coding and reasoning probes")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, provider: Any, *, http: Any = None, clock: Callable[[], float] | None = None,
        env: Any = None) -> int:
    from club3090.cli.commands.verify import render
    from club3090.validate.stress import UpstreamChecks, stress

    client, model = make_client(args, env=env, http=http, clock=clock)
    report = stress(client, model=model, streams=args.streams, context=args.context, fill=args.fill,
                    rounds=args.rounds, skip_tools=args.skip_tools,
                    upstream=UpstreamChecks(ladder=not args.no_ladder, probes=not args.no_probes,
                                            ladder_max=args.ladder_max, tool_prefill_tokens=args.tool_prefill_tokens),
                    progress=(lambda _s: None) if args.json else stderr_progress(args))
    doc = with_exit_code(report.to_json(), report.outcome)
    print(json.dumps(doc, indent=1) if args.json else render(report, "verify-stress"))
    return exit_code(report.outcome)
