#!/usr/bin/env python3
"""Score club3090's speed estimate (``fit/speed.py``) against published measurements.

    python benchmarks/speed.py [--rows FILE] [--json]

Each row of ``tests/fixtures/speed/decode_baselines.yaml`` is a registry slug measured on a rig
(narrative- and code-prompt decode tokens/s, one request, warm). The model's architecture and the
weight variant's size come from the catalog; the shape is the row's TP and KV format. A row with a
drafter is estimated with the drafter's gain modelled (``fit/speculative.py``: acceptance length by
method and task, the drafting and verification priced like the target): the narrative figure with
the prose acceptance, the code figure with the code acceptance.

Prints per row the estimate, the measurement and the error (estimate / measured - 1), then three
leave-one-source-out grades (``benchmarks/speed_loso.py``; one efficiency factor per engine fitted
on the other sources): plain decode (upstream's rows without a drafter and the published llama.cpp
measurements of index models), speculative decode (upstream's rows with a drafter, narrative and
code) and prefill (``tests/fixtures/speed/prefill.yaml``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from club3090.catalog import load_catalog  # noqa: E402
from club3090.fit.memory import ServeShape  # noqa: E402
from club3090.fit.speed import estimate_speed  # noqa: E402
from club3090.model.architecture import parse_config  # noqa: E402
from club3090.rig.gpus import parse_gpus  # noqa: E402

DEFAULT_ROWS = ROOT / "tests" / "fixtures" / "speed" / "decode_baselines.yaml"


OVERHEADS = (0.0, 0.5e-3, 1e-3, 1.5e-3, 2e-3, 3e-3, 4e-3)   # the per-drafted-token overhead grid (s)


def _speculation(catalog: Any, drafter_id: str | None, task: str, weights_format: str,
                 overhead: float | None = None) -> Any:
    from club3090.fit.speed import QUANTIZED_HEAD_FORMATS, Speculation

    if not drafter_id:
        return None
    drafter = catalog.drafters[drafter_id]
    return Speculation(method=drafter.method, num_speculative_tokens=int(drafter.n_default or 1), task=task,
                       drafter_bytes=int(drafter.vram_footprint_bytes or 0), token_overhead_s=overhead,
                       quantized_head=weights_format in QUANTIZED_HEAD_FORMATS)


def score(rows: list[dict[str, Any]], overhead: float | None = None) -> list[dict[str, Any]]:
    """Each upstream row's narrative figure (and, with a drafter, its code figure) against the estimate."""
    catalog = load_catalog()
    out = []
    for row in rows:
        model = catalog.models[row["model"]]
        variant = model.weights[row["weights_variant"]]
        arch = parse_config(model.hf_config)
        shape = ServeShape(tp=int(row["tp"]), kv_cache_dtype=row["kv_format"])
        gpus = parse_gpus(f"{row['gpu_count']}x{row['gpu']}", catalog)
        tasks = [("narrative", "narr_tps")] + ([("code", "code_tps")] if row.get("drafter") else [])
        for task, field in tasks:
            est = estimate_speed(arch, int(variant.size_bytes), shape, gpus, interconnect=row["interconnect"],
                                 speculation=_speculation(catalog, row.get("drafter"), task, variant.format, overhead))
            assert est is not None
            measured = float(row[field])
            out.append({"slug": row["slug"], "rig": row["rig"], "engine": row["engine"], "task": task,
                        "drafter": row.get("drafter"), "estimated_tps": round(est.decode_tps, 1),
                        "speedup": round(est.speculation.speedup, 3) if est.speculation else None,
                        "measured_tps": measured, "error": round(est.decode_tps / measured - 1, 4),
                        "within_band": est.band_low <= measured <= est.band_high})
    return out


def summary(scored: list[dict[str, Any]]) -> dict[str, Any]:
    errors = [r["error"] for r in scored]
    return {"rows": len(scored), "median_error": round(statistics.median(errors), 4),
            "median_abs_error": round(statistics.median(abs(e) for e in errors), 4),
            "within_20pct": sum(1 for e in errors if abs(e) <= 0.20),
            "within_band": sum(1 for r in scored if r["within_band"])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=Path, default=DEFAULT_ROWS)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = yaml.safe_load(args.rows.read_text(encoding="utf-8"))["rows"]
    scored = score(rows)
    total = summary(scored)
    graded = out_of_sample(scored, rows)
    if args.json:
        print(json.dumps({"rows": scored, "summary": total, "leave_one_source_out": graded}, indent=1))
        return 0
    print(f"{'slug':38s} {'rig':12s} {'engine':9s} {'task':9s} {'estimated':>9s} {'measured':>8s} {'error':>7s}"
          "  drafter (modelled gain)")
    for r in scored:
        gain = f" (x{r['speedup']:.2f})" if r["speedup"] else ""
        print(f"{r['slug']:38s} {r['rig']:12s} {r['engine']:9s} {r['task']:9s} {r['estimated_tps']:9.1f} "
              f"{r['measured_tps']:8.1f} {r['error']:+7.1%}  {r['drafter'] or '-'}{gain}")
    print(f"upstream rows {total['rows']}  median error {total['median_error']:+.1%}  "
          f"median |error| {total['median_abs_error']:.1%}  within ±20%: {total['within_20pct']}/{total['rows']}  "
          f"within the stated band: {total['within_band']}/{total['rows']}")
    for key, what in (("decode", "decode (no drafter)"), ("speculative", "speculative decode (drafter modelled)"),
                      ("prefill", "prefill")):
        g = graded[key]
        print(f"leave-one-source-out, {what}: {g['priced']} published measurements from {g['sources']} sources: "
              f"median |error| {g['median_abs_error']:.1%}, p90 |error| {g['p90_abs_error']:.1%}, "
              f"within ±25%: {g['within_25pct']}/{g['priced']}")
    return 0


def _loso_rows(scored: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # each rig of upstream's baselines file is its own submission (the maintainer's 2x3090, community rigs)
    return [{"source": f"club-3090 baselines.yml {r['rig']}", "engine": r["engine"],
             "label": f"{r['slug']} {r['task']}", "rig": r["rig"], "estimated_tps": r["estimated_tps"],
             "measured_tps": r["measured_tps"], "speculative": bool(r["drafter"])} for r in scored]


def speculative_grade(rows: list[dict[str, Any]], plain: list[dict[str, Any]]) -> dict[str, Any]:
    """Upstream's drafter rows, leaving each rig out: the per-token overhead
    (``fit/speculative.TOKEN_OVERHEAD_S``) refitted on the other rigs' drafter rows over
    :data:`OVERHEADS`, the engine factor as ``loso``."""
    import speed_loso

    by_share = {share: [r for r in _loso_rows(score(rows, share)) if r["speculative"]] for share in OVERHEADS}
    graded = {share: speed_loso.loso(spec, train=plain + spec)["errors"] for share, spec in by_share.items()}
    errors, sources, fitted = [], [], {}
    for held in sorted({r["source"] for r in by_share[OVERHEADS[0]]}):
        def train_error(share: float, held: str = held) -> float:
            others = [abs(e["error"]) for e in graded[share] if e["source"] != held]
            return statistics.median(others) if others else 0.0

        fitted[held] = min(OVERHEADS, key=train_error)
        mine = [e["error"] for e in graded[fitted[held]] if e["source"] == held]
        errors += mine
        sources += [held] * len(mine)
    out = speed_loso.grade(errors, sources, len(by_share[OVERHEADS[0]]))
    out["token_overhead_s_fitted"] = fitted
    return out


def out_of_sample(scored: list[dict[str, Any]], rows: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Three grades: plain decode (upstream's rows without a drafter and the published index
    measurements), speculative decode (upstream's rows with a drafter: :func:`speculative_grade`,
    when ``rows``, the raw upstream rows, are given) and prefill."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import speed_loso

    upstream = _loso_rows(scored)
    plain = [r for r in upstream if not r["speculative"]] + speed_loso.published_estimates()
    spec = [r for r in upstream if r["speculative"]]
    return {"decode": speed_loso.loso(plain),
            "speculative": speculative_grade(rows, plain) if rows is not None else
            speed_loso.loso(spec, train=plain + spec),
            "prefill": speed_loso.loso(speed_loso.prefill_estimates())}


if __name__ == "__main__":
    raise SystemExit(main())
