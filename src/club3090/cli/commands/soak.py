"""`club3090 soak`: stability of a running server over many turns (``club3090.validate.soak``).

Many streamed chat turns against a running server. PASS = no errors, no silent-empty turns,
decode-TPS retention (median of identical probes at the end vs the start) >= --min-retention less
the tolerance, VRAM growth <= --max-growth-mib (when NVML can sample). Writes baseline.json,
turn-log.csv and gpu-log.csv into --out-dir. Exit 0 pass, 1 fail, 2 inconclusive (deadline hit,
too few turns, server unreachable), 64 usage.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from club3090.cli.commands._server import make_client, server_command, stderr_progress
from club3090.cli.commands._types import (
    bounded,
    fraction,
    non_negative_number,
    token_count,
)
from club3090.cli.exit_codes import exit_code, with_exit_code

_tolerance = bounded(float, low=0, high=0.5, what="a tolerance")
_probes = bounded(int, low=3, high=50, what="a probe count")


def add_parser(sub: Any) -> None:
    p = server_command(sub, "soak", __doc__,
                       help="multi-turn stability run: silent empties, TPS retention, VRAM growth",
                       timeout=600.0, deadline=1800.0)
    p.add_argument("--mode", choices=("fresh", "continuous", "quick"), default="fresh",
                   help="fresh: 20x5 new sessions (default); continuous: 5x5 growing context; quick: 8x5")
    p.add_argument("--target-tokens", type=token_count, default=24000,
                   help="continuous mode: prompt size the context ramps toward (default 24000)")
    p.add_argument("--min-retention", type=fraction, default=0.98,
                   help="decode-TPS retention of identical probes, end vs start (default 0.98)")
    p.add_argument("--tolerance", type=_tolerance, default=0.05,
                   help="retention may fall this far below --min-retention, or 2 x the probes' noise if "
                        "larger (default 0.05)")
    p.add_argument("--probes", type=_probes, default=5,
                   help="identical probe requests before the first and after the last turn (default 5)")
    p.add_argument("--max-growth-mib", type=non_negative_number, default=200.0,
                   help="largest allowed per-GPU memory growth in MiB (default 200; only when sampled)")
    p.add_argument("--pause", type=non_negative_number, default=0.0, help="seconds to wait between sessions (default 0)")
    p.add_argument("--out-dir", default="soak-out", help="folder for baseline.json, turn-log.csv, gpu-log.csv "
                                                         "(default ./soak-out)")
    p.set_defaults(run=run)


def render(report: Any, paths: Any) -> str:
    data = report.to_json()
    lines = [f"[soak] {report.url} model {report.model or '?'} mode {report.options.mode}: "
             f"{data['turns_done']}/{data['turns_planned']} turns in {data['elapsed_s']:.0f}s"]
    ret, floor, noise = data["retention"], data["retention_floor"], data["probe_noise"]
    lines.append(f"[soak] errors {data['errors']}  silent-empty {data['silent_empty']}  probe decode TPS "
                 f"{_f(data['decode_tps_first'])} -> {_f(data['decode_tps_last'])} (retention "
                 f"{'-' if ret is None else f'{ret:.1%}'}, floor {'-' if floor is None else f'{floor:.1%}'}, "
                 f"noise {'-' if noise is None else f'{noise:.1%}'})")
    gpu = data["gpu"]
    lines.append("[soak] VRAM: " + (f"growth {gpu['growth_mib']:.0f} MiB over {gpu['samples']} samples"
                                     if gpu["sampled"] and gpu["growth_mib"] is not None else "not sampled"))
    lines.append(f"[soak] {data['verdict'].upper()}" + (": " + "; ".join(data["reasons"]) if data["reasons"] else ""))
    for path in paths:
        lines.append(f"[soak] wrote {path}")
    return "\n".join(lines)


def _f(value: Any) -> str:
    return "-" if value is None else f"{value:.1f}"


def run(args: argparse.Namespace, provider: Any, *, http: Any = None, clock: Callable[[], float] | None = None,
        sleep: Callable[[float], None] | None = None, env: Any = None,
        gpu_sampler: Callable[[], Any] | None = None) -> int:
    import time
    from pathlib import Path

    from club3090.edges.gpu_probe import memory_used_bytes
    from club3090.validate.soak import SoakOptions, soak, write_files

    client, model = make_client(args, env=env, http=http, clock=clock)
    options = SoakOptions(mode=args.mode, target_tokens=args.target_tokens, min_retention=args.min_retention,
                          tolerance=args.tolerance, probes=args.probes,
                          max_growth_mib=args.max_growth_mib, deadline_s=args.deadline,
                          request_timeout_s=args.timeout, pause_s=args.pause)
    sampler = gpu_sampler or (lambda: memory_used_bytes(enabled=provider.settings.gpu_detect))
    report = soak(client, options, model=model, gpu_sampler=sampler,
                  sleep=sleep or time.sleep, progress=(lambda _s: None) if args.json else stderr_progress(args))
    paths = write_files(report, Path(args.out_dir))
    if args.json:
        data = with_exit_code(report.to_json(), report.outcome)
        data["files"] = [str(p) for p in paths]
        print(json.dumps(data, indent=1))
    else:
        print(render(report, paths))
    return exit_code(report.outcome)
