"""Leave-one-group-out refit of the fit engine's free terms, per vLLM release line.

    python benchmarks/refit.py [--cases FILE] [--json]

Cases: the public start-ups (``vllm_startup_cases.json``: logged "Available KV cache memory") and
the catalog's anchors (curated RTX 3090 boots: each one started, so a "won't fit" is an error; where
the pool was measured its error is implied by the token error, tokens being proportional to
blocks). A *group* is one base model
(the config's architecture, width and depth): every case of a model is held out together, so a
model never helps predict itself.

Release lines: ``<=0.20`` (CUDA graphs captured outside the budget: only the activation term
matters) and ``>=0.21`` (the graph estimate is subtracted: activation and graph terms). For each
held-out group the terms are refitted by grid search on the other groups of its line (falling
back to all other groups when its line has no other group) and the held-out cases are predicted
with those values: the out-of-sample errors. The objective counts an over-predicted pool twice
(the direction that produces a false "fits"). Never tuned on the test fold.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import statistics
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import accuracy  # noqa: E402

from club3090.fit import profiling  # noqa: E402
from club3090.fit.memory import Unpriceable, predict  # noqa: E402
from club3090.units import GiB  # noqa: E402
from club3090.fit.vllm_rules import GRAPH_ESTIMATE_FROM, parse_version  # noqa: E402
from club3090.model.architecture import parse_config  # noqa: E402

GRID: dict[str, list[float]] = {
    "ACT_FORWARD_COEF": [0.5 + 0.1 * i for i in range(16)],            # 0.5 .. 2.0
    "ACT_FORWARD_COEF_GRAPHS": [0.5 + 0.1 * i for i in range(11)],     # 0.5 .. 1.5
    "CUDAGRAPH_BASE_TOKENS": [1024.0 * i for i in range(7)],            # 0 .. 6144
    "CUDAGRAPH_PER_GRAPH_TOKENS": [12.0 * i for i in range(4)],         # 0 .. 36
}
LINE_TERMS = {"<=0.20": ("ACT_FORWARD_COEF",),
              ">=0.21": ("ACT_FORWARD_COEF_GRAPHS", "CUDAGRAPH_BASE_TOKENS", "CUDAGRAPH_PER_GRAPH_TOKENS")}
INT_TERMS = ("CUDAGRAPH_BASE_TOKENS", "CUDAGRAPH_PER_GRAPH_TOKENS")


@contextlib.contextmanager
def coefficients(values: dict[str, float]) -> Iterator[None]:
    """The profiling module's constants set to ``values`` for the duration (benchmark only)."""
    saved = {name: getattr(profiling, name) for name in values}
    try:
        for name, value in values.items():
            setattr(profiling, name, int(value) if name in INT_TERMS else value)
        yield
    finally:
        for name, value in saved.items():
            setattr(profiling, name, value)


def line_of(version: str | None) -> str:
    return ">=0.21" if parse_version(version) >= GRAPH_ESTIMATE_FROM else "<=0.20"


def attention_kind(arch: Any) -> str:
    kinds = set(arch.layer_kinds)
    if kinds & {"gdn", "mamba2"}:
        return "hybrid-state"
    if "mla" in kinds:
        return "mla"
    if kinds & {"sliding", "chunked"}:
        return "sliding"
    return "full"


def _group(arch: Any) -> str:
    return f"{arch.architecture}/{arch.hidden_size}x{arch.num_hidden_layers}"


# ---------------------------------------------------------------------------------------------
# cases: a callable per case that returns (predicted pool GiB, predicted tokens, verdict)


def public_cases(cases_path: Path) -> list[dict[str, Any]]:
    cases = json.loads(cases_path.read_text(encoding="utf-8"))
    configs = json.loads(cases_path.with_name("vllm_startup_configs.json").read_text(encoding="utf-8"))
    out = []
    for case in cases:
        config = configs.get(case.get("hf_repo") or "")
        measured = case.get("measured") or {}
        if not config or not config.get("architectures") or measured.get("available_kv_cache_gib") is None:
            continue
        gpu = accuracy._gpu_gib(case)
        weights, _ = accuracy._weights_per_rank(case, cases)
        if gpu is None or weights is None:
            continue
        arch = parse_config({k: v for k, v in config.items() if not k.startswith("config_")})
        shape = accuracy._shape(case)

        def run(arch: Any = arch, shape: Any = shape, gpu: float = gpu, weights: float = weights) -> Any:
            return predict(arch, weights_bytes=0, weights_bytes_per_rank=int(weights * GiB),
                           gpu_memory_bytes=[int(gpu * GiB)], shape=shape)

        out.append({"id": case["id"], "source": "public", "group": _group(arch), "kind": attention_kind(arch),
                    "line": line_of(shape.vllm_version), "run": run,
                    "measured_kv_gib": float(measured["available_kv_cache_gib"]),
                    "measured_tokens": measured.get("gpu_kv_cache_tokens"),
                    "outcome": measured.get("startup_outcome")})
    return out


def anchor_cases() -> list[dict[str, Any]]:
    from club3090.catalog.loader import load_catalog
    from club3090.fit.calibration import anchor_inputs

    catalog = load_catalog()
    out = []
    for anchor in catalog.anchors:      # every anchor booted; some measured their pool
        inputs = anchor_inputs(anchor, catalog)
        if inputs.model is None or not inputs.weights_bytes or inputs.gpu is None:
            continue
        arch = parse_config(inputs.model.hf_config)

        def run(arch: Any = arch, inputs: Any = inputs) -> Any:
            return predict(arch, weights_bytes=int(inputs.weights_bytes),
                           gpu_memory_bytes=[inputs.gpu.memory_bytes] * inputs.world, shape=inputs.shape)

        out.append({"id": anchor.id, "source": "anchor", "group": _group(arch), "kind": attention_kind(arch),
                    "line": line_of(inputs.shape.vllm_version), "run": run, "measured_kv_gib": None,
                    "measured_tokens": anchor.measured_kv_tokens, "outcome": "ok"})
    return out


def evaluate(case: dict[str, Any]) -> dict[str, Any] | None:
    result = case["run"]()
    if isinstance(result, Unpriceable):
        return None
    pool = result.per_gpu.kv_pool_bytes / GiB
    row: dict[str, Any] = {"id": case["id"], "group": case["group"], "kind": case["kind"], "line": case["line"],
                           "source": case["source"], "predicted_kv_gib": pool, "verdict": result.raw_verdict}
    tokens = case["measured_tokens"]
    if case["measured_kv_gib"] is not None:
        row["kv_error_gib"] = pool - case["measured_kv_gib"]
    elif tokens and result.kv_cache_tokens:
        row["kv_error_gib"] = pool - pool * tokens / result.kv_cache_tokens      # implied measured pool
    if tokens and case["outcome"] == "ok":
        row["token_error_pct"] = 100.0 * (result.kv_cache_tokens - tokens) / tokens
    started = case["outcome"] == "ok"
    fits = result.raw_verdict != "wont-fit"
    row["false_fit"] = fits and not started
    row["false_wont_fit"] = started and not fits
    return row


def _loss(rows: list[dict[str, Any]]) -> float:
    errors = [r["kv_error_gib"] for r in rows if "kv_error_gib" in r]
    return (sum(2 * e if e > 0 else -e for e in errors) + 10.0 * sum(r["false_fit"] for r in rows)
            + 2.0 * sum(r["false_wont_fit"] for r in rows))


def fit(cases: list[dict[str, Any]], terms: tuple[str, ...]) -> dict[str, float]:
    """The grid point of ``terms`` with the least loss over ``cases``."""
    best: tuple[float, dict[str, float]] | None = None
    for point in itertools.product(*(GRID[t] for t in terms)):
        values = dict(zip(terms, point, strict=True))
        with coefficients(values):
            rows = [r for r in (evaluate(c) for c in cases) if r is not None]
        loss = _loss(rows)
        if best is None or loss < best[0] - 1e-9:
            best = (loss, values)
    return best[1] if best else {}


def leave_one_group_out(cases: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Out-of-sample rows (each group predicted by a fit without it) and the full per-line fits."""
    rows: list[dict[str, Any]] = []
    for group in sorted({c["group"] for c in cases}):
        held = [c for c in cases if c["group"] == group]
        for line in sorted({c["line"] for c in held}):
            terms = LINE_TERMS[line]
            train = [c for c in cases if c["line"] == line and c["group"] != group]
            fallback = not train
            if fallback:
                train = [c for c in cases if c["group"] != group]
            values = fit(train, terms)
            with coefficients(values):
                for case in (c for c in held if c["line"] == line):
                    row = evaluate(case)
                    if row is not None:
                        row["fit"] = {k: round(v, 2) for k, v in values.items()}
                        row["fallback"] = fallback
                        rows.append(row)
    full = {line: fit([c for c in cases if c["line"] == line], LINE_TERMS[line])
            for line in sorted({c["line"] for c in cases})}
    return rows, full


def table(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Median / p90 |ΔKV| GiB, median |token error| %, false fits, by line x attention kind (+ all)."""
    keys = [*sorted({(r["line"], r["kind"]) for r in rows}), ("all", "all")]
    out = []
    for line, kind in keys:
        sel = [r for r in rows if (line == "all" or r["line"] == line) and (kind == "all" or r["kind"] == kind)]
        kv = [abs(r["kv_error_gib"]) for r in sel if "kv_error_gib" in r]
        tok = [abs(r["token_error_pct"]) for r in sel if "token_error_pct" in r]
        out.append({"line": line, "kind": kind, "cases": len(sel), "groups": len({r["group"] for r in sel}),
                    "kv_median_gib": statistics.median(kv) if kv else None,
                    "kv_p90_gib": accuracy._pct(kv, 0.9) if kv else None,
                    "token_median_pct": statistics.median(tok) if tok else None,
                    "false_fits": sum(r["false_fit"] for r in sel),
                    "false_wont_fits": sum(r["false_wont_fit"] for r in sel)})
    return out


def run(cases_path: Path, with_anchors: bool = True) -> dict[str, Any]:
    cases = public_cases(cases_path) + (anchor_cases() if with_anchors else [])
    rows, full = leave_one_group_out(cases)
    return {"rows": rows, "table": table(rows), "full_fit": full,
            "current": {t: getattr(profiling, t) for t in GRID}}


def print_table(report: dict[str, Any]) -> None:
    f = accuracy._fmt
    print("Out-of-sample (leave one model out, refit per release line):")
    print(f"{'line':7s} {'attention':13s} {'cases':>5s} {'groups':>6s} {'med |dKV| GiB':>13s} "
          f"{'p90 GiB':>8s} {'med tok %':>9s} {'false fits':>10s} {'false wont':>10s}")
    for t in report["table"]:
        print(f"{t['line']:7s} {t['kind']:13s} {t['cases']:5d} {t['groups']:6d} {f(t['kv_median_gib'], '13.3f')} "
              f"{f(t['kv_p90_gib'], '8.3f')} {f(t['token_median_pct'], '9.2f')} {t['false_fits']:10d} "
              f"{t['false_wont_fits']:10d}")
    print("full-data fit per line:", json.dumps(report["full_fit"]), " module constants:",
          json.dumps(report["current"]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=Path, default=accuracy.DEFAULT_CASES)
    parser.add_argument("--no-anchors", action="store_true", help="public start-ups only")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    report = run(args.cases, with_anchors=not args.no_anchors)
    if args.json:
        print(json.dumps({k: v for k, v in report.items()}, indent=1, default=str))
    else:
        for r in report["rows"]:
            print(f"{r['id'][:44]:44s} {r['line']:7s} {r['kind']:12s} err {accuracy._fmt(r.get('kv_error_gib'), '+.2f')} GiB"
                  f"  tok {accuracy._fmt(r.get('token_error_pct'), '+.1f')} %  fit {r['fit']}"
                  + ("  (fallback: no other group on this line)" if r["fallback"] else ""))
        print_table(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
