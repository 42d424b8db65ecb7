#!/usr/bin/env python3
"""Score club3090's speed estimate (``fit/speed.py``) against upstream's measured decode figures.

    python benchmarks/speed.py [--rows FILE] [--json]

Each row of ``tests/fixtures/speed/decode_baselines.yaml`` is a registry slug measured on a rig
(narrative-class decode tokens/s, one request, warm). The model's architecture and the weight
variant's size come from the catalog; the shape is the row's TP and KV format. Rows whose drafter
has no measured speed-up are estimated without speculation (the rule the estimate follows), so
their measured figure includes whatever the drafter gained on prose.

Prints per row the estimate, the measurement and the error (estimate / measured - 1), then the
median and the median absolute error; then the leave-one-source-out grade over these rows and the
published llama.cpp measurements of index models (``benchmarks/speed_loso.py``): median and p90
absolute error with one efficiency factor per engine fitted on the other sources.
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


def score(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    catalog = load_catalog()
    out = []
    for row in rows:
        model = catalog.models[row["model"]]
        variant = model.weights[row["weights_variant"]]
        arch = parse_config(model.hf_config)
        shape = ServeShape(tp=int(row["tp"]), kv_cache_dtype=row["kv_format"])
        gpus = parse_gpus(f"{row['gpu_count']}x{row['gpu']}", catalog)
        est = estimate_speed(arch, int(variant.size_bytes), shape, gpus, interconnect=row["interconnect"])
        assert est is not None
        measured = float(row["narr_tps"])
        out.append({"slug": row["slug"], "rig": row["rig"], "engine": row["engine"],
                    "drafter": row.get("drafter"), "estimated_tps": round(est.decode_tps, 1),
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
    graded = out_of_sample(scored)
    if args.json:
        print(json.dumps({"rows": scored, "summary": total, "leave_one_source_out": graded}, indent=1))
        return 0
    print(f"{'slug':38s} {'rig':12s} {'engine':9s} {'estimated':>9s} {'measured':>8s} {'error':>7s}  drafter")
    for r in scored:
        print(f"{r['slug']:38s} {r['rig']:12s} {r['engine']:9s} {r['estimated_tps']:9.1f} {r['measured_tps']:8.1f} "
              f"{r['error']:+7.1%}  {r['drafter'] or '-'}")
    print(f"rows {total['rows']}  median error {total['median_error']:+.1%}  "
          f"median |error| {total['median_abs_error']:.1%}  within ±20%: {total['within_20pct']}/{total['rows']}  "
          f"within the stated band: {total['within_band']}/{total['rows']}")
    print(f"leave-one-source-out over {graded['priced']} published measurements from {graded['sources']} sources: "
          f"median |error| {graded['median_abs_error']:.1%}, p90 |error| {graded['p90_abs_error']:.1%}, "
          f"within ±25%: {graded['within_25pct']}/{graded['priced']}")
    return 0


def out_of_sample(scored: list[dict[str, Any]]) -> dict[str, Any]:
    """These rows (one source: upstream's baselines file) and the published index measurements,
    graded leave-one-source-out (``speed_loso.loso``)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import speed_loso

    upstream = [{"source": "club-3090 baselines.yml", "engine": r["engine"], "label": r["slug"], "rig": r["rig"],
                 "estimated_tps": r["estimated_tps"], "measured_tps": r["measured_tps"]} for r in scored]
    return speed_loso.loso(upstream + speed_loso.published_estimates())


if __name__ == "__main__":
    raise SystemExit(main())
