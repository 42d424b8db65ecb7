"""Grouped cross-validation of the fit engine's fitted constants: every constant refitted without
the held-out group, the group predicted with those values.

    python benchmarks/refit.py [--json] [--no-anchors]

Cases: every public start-up of ``tests/fixtures/calibration/vllm_startup_cases*.json`` whose log
gives the pool and the card's memory, plus the catalog's anchors (curated RTX 3090 boots: each one
started, so a "won't fit" is an error; a measured pool gives a KV error implied by the token error).
Three groupings, each left out one group at a time: the case's *source* (the repository or thread
its log came from), its *GPU class* and its vLLM *release line* (``0.19``; ``unstated``).

Speed: each case is priced once by ``memory.predict`` while the profile terms' inputs are recorded
(:func:`probe`); a refit then re-evaluates only the fitted terms (non-torch, activation, CUDA
graphs) for each candidate value, the page layout and block size staying the case's own. At the
module's constants the surrogate reproduces ``predict`` (checked: ``surrogate_check``).

Fitting: coordinate descent over each constant's grid, two passes. The loss counts an
over-predicted pool twice (the direction of a false "fits"), an under-predicted one at most
:data:`UNDER_CAP_GIB`, a false fit ten times, a false refusal twice. Each source's weight is capped so that no source holds more than
:data:`SOURCE_CAP` of the weight of the cases that fit a constant (:func:`source_weights`). A
constant whose cases come from fewer than ``1 / SOURCE_CAP`` sources cannot meet the cap: it is not
fitted and keeps the module's value (printed as "held").
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import accuracy  # noqa: E402

from club3090.fit import profiling  # noqa: E402
from club3090.fit.memory import FitResult, logged_rank, predict  # noqa: E402
from club3090.fit.vllm_rules import GRAPH_ESTIMATE_FROM, parse_version  # noqa: E402
from club3090.model.architecture import parse_config  # noqa: E402
from club3090.units import GiB  # noqa: E402

SOURCE_CAP = 0.15
MIN_SOURCES = 7            # the fewest sources among which no one holds more than 15 %

FORWARD_LINE = ">=0.21"


def _line(case: Case) -> str:
    return FORWARD_LINE if case.graphs_in_budget else "<=0.20"


def _graph_data(case: Case) -> bool:
    """The pool's graph term matters (subtracted from 0.21), or the log measured the graph pool."""
    return _line(case) == FORWARD_LINE or "cudagraph_gib" in case.terms


def _nvswitch(case: Case) -> bool:
    """The case's ranks pay the NVSwitch (NVLS) term: TP > 1 on a card priced with it."""
    args = case.stage_calls[0]["non_torch_bytes"][0] if case.stage_calls else ()
    return case.tp > 1 and len(args) > 2 and bool(args[2])


# constant -> (grid, the cases it is fitted on: a predicate over a case)
TERMS: dict[str, tuple[list[float], Callable[[Case], bool]]] = {
    "ACT_FORWARD_COEF": ([0.5 + 0.1 * i for i in range(16)], lambda c: _line(c) == "<=0.20" and c.sampler != "v0"),
    "ACT_FORWARD_COEF_V0": ([0.5 + 0.1 * i for i in range(16)], lambda c: c.sampler == "v0"),
    "ACT_FORWARD_COEF_GRAPHS": ([0.5 + 0.1 * i for i in range(11)], lambda c: _line(c) == FORWARD_LINE),
    "CUDAGRAPH_BASE_TOKENS": ([512.0 * i for i in range(13)], lambda c: _graph_data(c)),
    "CUDAGRAPH_PER_GRAPH_TOKENS": ([6.0 * i for i in range(9)], lambda c: _graph_data(c)),
    "SAMPLER_COEF": ([2.0 + 0.25 * i for i in range(13)], lambda c: c.sampler == "kernel"),
    "SAMPLER_FLASHINFER_COEF": ([1.5 + 0.25 * i for i in range(13)], lambda c: c.sampler == "flashinfer"),
    "SAMPLER_NATIVE_COEF": ([6.0 + 0.5 * i for i in range(13)], lambda c: c.sampler in ("native", "v0")),
    "NON_TORCH_TP1": ([0.05 * i for i in range(13)], lambda c: True),
    "NON_TORCH_MULTI": ([0.1 * i for i in range(11)], lambda c: c.tp > 1 and c.sampler != "v0"),
    "NON_TORCH_MULTI_V0": ([0.1 * i for i in range(16)], lambda c: c.tp > 1 and c.sampler == "v0"),
    "NON_TORCH_NVSWITCH": ([0.25 * i for i in range(9)], _nvswitch),
}
GIB_TERMS = ("NON_TORCH_TP1", "NON_TORCH_MULTI", "NON_TORCH_MULTI_V0", "NON_TORCH_NVSWITCH")     # grids in GiB, constants in bytes
INT_TERMS = ("CUDAGRAPH_BASE_TOKENS", "CUDAGRAPH_PER_GRAPH_TOKENS", *GIB_TERMS)


def _to_module(name: str, value: float) -> float | int:
    if name in GIB_TERMS:
        return round(value * GiB)
    return int(value) if name in INT_TERMS else value


def _from_module(name: str) -> float:
    value = getattr(profiling, name)
    return value / GiB if name in GIB_TERMS else float(value)


@contextlib.contextmanager
def coefficients(values: dict[str, float]) -> Iterator[None]:
    """The profiling module's constants set to ``values`` for the duration (benchmark only)."""
    saved = {name: getattr(profiling, name) for name in values}
    try:
        for name, value in values.items():
            setattr(profiling, name, _to_module(name, value))
        yield
    finally:
        for name, value in saved.items():
            setattr(profiling, name, value)


# ---------------------------------------------------------------------------------------------
# one case, probed once


@dataclass
class Case:
    id: str
    source: str
    gpu_class: str
    release: str
    kind: str
    tp: int
    world: int
    graphs_in_budget: bool
    sampler: str                   # "kernel" | "flashinfer" | "native" (V1 before 0.17: a full sort) | "v0"
    measured_kv_gib: float | None
    measured_tokens: int | None
    outcome: str | None
    result: FitResult
    terms: dict[str, float] = field(default_factory=dict)    # the log's breakdown: MEASURED_TERMS
    stage_calls: list[dict[str, tuple[tuple[Any, ...], dict[str, Any]]]] = field(default_factory=list)


_RECORDED = ("non_torch_bytes", "activation", "cudagraph_bytes")


@contextlib.contextmanager
def _recording(calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]]) -> Iterator[None]:
    saved = {name: getattr(profiling, name) for name in _RECORDED}

    def wrap(name: str) -> Callable[..., Any]:
        real = saved[name]

        def recorded(*args: Any, **kwargs: Any) -> Any:
            calls.append((name, args, kwargs))
            return real(*args, **kwargs)
        return recorded
    try:
        for name in _RECORDED:
            setattr(profiling, name, wrap(name))
        yield
    finally:
        for name, fn in saved.items():
            setattr(profiling, name, fn)


def probe(run: Callable[[], Any]) -> tuple[FitResult | None, list[dict[str, Any]]]:
    """The case priced once, with the inputs of each stage's profile terms."""
    calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
    with _recording(calls):
        result = run()
    if not isinstance(result, FitResult):
        return None, []
    # each term is priced once per PP stage: its k-th call belongs to stage k, whatever the order
    per_term: dict[str, list[tuple[tuple[Any, ...], dict[str, Any]]]] = {name: [] for name in _RECORDED}
    for name, args, kwargs in calls:
        per_term[name].append((args, kwargs))
    count = min(len(v) for v in per_term.values())
    return result, [{name: per_term[name][k] for name in _RECORDED} for k in range(count)]


def surrogate(case: Case) -> tuple[float, int, bool, dict[str, float]]:
    """(pool GiB, KV tokens, fits, the profile terms in GiB) at the module's current constants: the
    pool and the terms of the rank the log prints (``memory.logged_rank``), the tokens and the
    verdict of the limiting rank (fewest blocks), as vLLM logs them."""
    res = case.result
    tp = max(1, case.tp)
    printed = logged_rank(res).rank
    least: int | None = None
    logged: tuple[int, dict[str, float]] = (0, {})
    for rank in res.ranks:
        calls = case.stage_calls[rank.rank // tp]
        nt = profiling.non_torch_bytes(*calls["non_torch_bytes"][0], **calls["non_torch_bytes"][1])
        act = profiling.activation(*calls["activation"][0], **calls["activation"][1]).total
        graphs = profiling.cudagraph_bytes(*calls["cudagraph_bytes"][0], **calls["cudagraph_bytes"][1])
        subtracted = graphs if res.settings.cudagraphs_subtracted else 0
        pool = max(0, rank.budget_bytes - rank.weights_bytes - nt - act - subtracted)
        if rank.rank == printed:
            logged = (pool, {"non_torch_gib": nt / GiB, "activation_peak_gib": act / GiB, "cudagraph_gib": graphs / GiB})
        if rank.bytes_per_block:      # a stage without cache layers allocates no KV and limits nothing
            least = min(pool // rank.bytes_per_block, least if least is not None else pool // rank.bytes_per_block)
    blocks = least or 0
    tokens = round(res.kv_cache_tokens * blocks / res.num_blocks) if res.num_blocks else 0
    return logged[0] / GiB, tokens, blocks >= res.blocks_per_request and blocks > 0, logged[1]


# the terms a log's breakdown measures (``reports/vllm_log``), compared one by one
MEASURED_TERMS = ("non_torch_gib", "activation_peak_gib", "cudagraph_gib")


def evaluate(case: Case) -> dict[str, Any]:
    pool, tokens, fits, terms = surrogate(case)
    row: dict[str, Any] = {"id": case.id, "source": case.source, "gpu_class": case.gpu_class,
                           "release": case.release, "kind": case.kind, "predicted_kv_gib": pool}
    measured = case.measured_tokens
    if case.measured_kv_gib is not None:
        row["kv_error_gib"] = pool - case.measured_kv_gib
    elif measured and tokens:
        row["kv_error_gib"] = pool - pool * measured / tokens      # implied measured pool
    if measured and case.outcome == "ok" and tokens:
        row["token_error_pct"] = 100.0 * (tokens - measured) / measured
    for term in MEASURED_TERMS:
        if term in case.terms and term in terms:
            row[f"{term}_error"] = terms[term] - case.terms[term]
    started = case.outcome == "ok"
    row["false_fit"] = fits and not started and str(case.outcome).startswith("kv_error")
    row["false_wont_fit"] = started and not fits
    return row


# ---------------------------------------------------------------------------------------------
# the cases


def attention_kind(arch: Any) -> str:
    kinds = set(arch.layer_kinds)
    if kinds & {"gdn", "mamba2"}:
        return "hybrid-state"
    if "mla" in kinds:
        return "mla"
    if kinds & {"sliding", "chunked"}:
        return "sliding"
    return "full"


def source_of(case: dict[str, Any]) -> str:
    src = case.get("source")
    if isinstance(src, dict):
        return str(src.get("repo") or src.get("url") or case.get("source_group") or "unknown")
    return str(src or case.get("source_group") or "unknown")


GPU_CLASSES = (("h100", "H100"), ("h200", "H200"), ("gh200", "H200"), ("h20", "H20"), ("a100", "A100"),
               ("l40", "L40/L40S"), ("l4", "L4"), ("a10", "A10/A10G"), ("t4", "T4"), ("3090", "RTX 3090"),
               ("4090", "RTX 4090"), ("5090", "RTX 5090"), ("6000", "RTX 6000"), ("mi300", "MI300"),
               ("b200", "B200"), ("gb200", "B200"))


def gpu_class(name: str | None, memory_gib: float | None = None) -> str:
    text = (name or "").lower()
    for key, label in GPU_CLASSES:
        if key in text:
            if label == "A100" and memory_gib:
                return "A100-80" if memory_gib > 60 else "A100-40"
            return label
    return "other " + (name or "unknown").replace("NVIDIA ", "").replace("GeForce ", "") if name else "unknown"


def release_of(version: str | None, engine: str | None = None) -> str:
    if not version:
        return "unstated"
    major, minor, _ = parse_version(version)
    return f"{major}.{minor}"


def logged_terms(case: dict[str, Any]) -> dict[str, float]:
    """The case's breakdown terms, read from its quoted log lines by ``calibrate``'s parser."""
    from club3090.reports.vllm_log import parse_startup

    recorded = dict(case.get("measured") or {})
    if "peak_activation_gib" in recorded:                      # the fixture's spelling
        recorded.setdefault("activation_peak_gib", recorded["peak_activation_gib"])
    measured = {**recorded, **parse_startup("\n".join(str(q) for q in case.get("quote") or ())).measured}
    return {t: float(measured[t]) for t in MEASURED_TERMS
            if isinstance(measured.get(t), (int, float)) and not isinstance(measured.get(t), bool)}


def _case(run: Callable[[str | None], Any], **fields: Any) -> Case | None:
    """A version-less case is probed on the release line its answer assumed (the tightest)."""
    first = run(None)
    if not isinstance(first, FitResult):
        return None
    result, stages = probe(lambda: run(first.settings.vllm_version))
    if result is None or len(stages) * max(1, fields["tp"]) < len(result.ranks):
        return None
    ver = parse_version(result.settings.vllm_version)
    fields.pop("version")
    engine = result.settings.engine
    graphs = engine == "v1" and ver >= GRAPH_ESTIMATE_FROM
    # the path the case was priced with (a log that names its sampler overrides the line's default)
    path = stages[-1]["activation"][1].get("sampler", "kernel") if stages else "kernel"
    sampler = "v0" if engine == "v0" else "native" if path == "sort" else path
    return Case(result=result, stage_calls=stages, graphs_in_budget=graphs, sampler=sampler, **fields)


def public_cases() -> list[Case]:
    cases, configs = accuracy.load_all()
    out = []
    for case in cases:
        config = configs.get(case.get("hf_repo") or "")
        measured = case.get("measured") or {}
        if not config or not config.get("architectures") or measured.get("available_kv_cache_gib") is None:
            continue
        if accuracy._unpriced_drafter(case):
            continue
        gpu = accuracy._gpu_gib(case)
        weights, _ = accuracy._weights_per_rank(case, cases)
        if gpu is None or weights is None:
            continue
        arch = parse_config({k: v for k, v in config.items() if not k.startswith("config_")})
        shape = accuracy._shape(case)

        def run(version: str | None, arch: Any = arch, shape: Any = shape, gpu: float = gpu,
                weights: float = weights) -> Any:
            return predict(arch, weights_bytes=0, weights_bytes_per_rank=int(weights * GiB),
                           gpu_memory_bytes=[int(gpu * GiB)],
                           shape=replace(shape, vllm_version=version or shape.vllm_version))

        built = _case(run, id=case["id"], source=source_of(case), terms=logged_terms(case), gpu_class=gpu_class(case.get("gpu_model"), gpu),
                      release=release_of(case.get("vllm_version")), kind=attention_kind(arch),
                      tp=shape.tp, world=shape.tp * shape.pp, version=shape.vllm_version,
                      measured_kv_gib=float(measured["available_kv_cache_gib"]),
                      measured_tokens=measured.get("gpu_kv_cache_tokens"), outcome=measured.get("startup_outcome"))
        if built is not None:
            out.append(built)
    return out


def anchor_cases() -> list[Case]:
    from club3090.catalog.loader import load_catalog
    from club3090.fit.calibration import anchor_inputs

    catalog = load_catalog()
    out = []
    for anchor in catalog.anchors:      # every anchor booted; some measured their pool
        inputs = anchor_inputs(anchor, catalog)
        if inputs.model is None or not inputs.weights_bytes or inputs.gpu is None:
            continue
        arch = parse_config(inputs.model.hf_config)

        def run(version: str | None, arch: Any = arch, inputs: Any = inputs) -> Any:
            return predict(arch, weights_bytes=int(inputs.weights_bytes),
                           gpu_memory_bytes=[inputs.gpu.memory_bytes] * inputs.world,
                           shape=replace(inputs.shape, vllm_version=version or inputs.shape.vllm_version))

        built = _case(run, id=anchor.id, source="club3090 anchors (noonghunna/club-3090 composes)",
                      gpu_class="RTX 3090", release=release_of(inputs.shape.vllm_version), kind=attention_kind(arch),
                      tp=inputs.shape.tp, world=inputs.world, version=inputs.shape.vllm_version,
                      measured_kv_gib=None, measured_tokens=anchor.measured_kv_tokens, outcome="ok")
        if built is not None:
            out.append(built)
    return out


# ---------------------------------------------------------------------------------------------
# fitting


def source_weights(cases: list[Case], cap: float = SOURCE_CAP) -> tuple[dict[str, float], float]:
    """Per-case weight by source so that no source holds more than ``cap`` of the total weight
    (each source's weight is min(its cases, c), c the largest value that keeps every share under
    ``cap``); and the largest share reached (over ``cap`` only when fewer than 1 / cap sources)."""
    counts = Counter(c.source for c in cases)
    if not counts:
        return {}, 0.0
    lo, hi = 1e-9, float(max(counts.values()))
    for _ in range(60):
        mid = (lo + hi) / 2
        total = sum(min(n, mid) for n in counts.values())
        if mid <= cap * total:
            lo = mid
        else:
            hi = mid
    c = lo
    weights = {s: min(n, c) / n for s, n in counts.items()}
    total = sum(min(n, c) for n in counts.values())
    return weights, max(min(n, c) for n in counts.values()) / total


UNDER_CAP_GIB = 1.0     # the p90 target: an under-prediction further off no longer pulls a constant


def _error_loss(over: float) -> float:
    """The loss of one error (positive: the pool over-predicted, or a term under-stated: the
    direction of a false "fits", twice and never capped). An under-prediction counts at most
    :data:`UNDER_CAP_GIB`: a case that far under is off for a reason the terms do not model (an
    unnamed card, an unquoted setting) and must not drag a constant every other case shares
    towards over-predicting them."""
    return 2 * over if over > 0 else min(-over, UNDER_CAP_GIB)


def _loss(rows: list[dict[str, Any]], weight: dict[str, float]) -> float:
    loss = 0.0
    for r in rows:
        w = weight.get(r["source"], 1.0)
        e = r.get("kv_error_gib")
        if e is not None:
            loss += w * _error_loss(e)
        loss += w * (10.0 * r["false_fit"] + 2.0 * r["false_wont_fit"])
        for term in MEASURED_TERMS:
            t = r.get(f"{term}_error")
            if t is not None:      # a term under-stated leaves the pool too large
                loss += w * _error_loss(-t)
    return loss


def fit(cases: list[Case], passes: int = 2) -> tuple[dict[str, float], dict[str, float]]:
    """Each constant's value with the least loss on the cases that fit it (coordinate descent from
    the module's values); and each fitted constant's largest source share (held constants: absent)."""
    values = {name: _from_module(name) for name in TERMS}
    shares: dict[str, float] = {}
    for _ in range(passes):
        for name, (grid, uses) in TERMS.items():
            train = [c for c in cases if uses(c)]
            if len({c.source for c in train}) < MIN_SOURCES:
                continue                # the cap cannot hold: the module's value stays
            weight, shares[name] = source_weights(train)
            best: tuple[float, float] | None = None
            for value in grid:
                with coefficients({**values, name: value}):
                    loss = _loss([evaluate(c) for c in train], weight)
                if best is None or loss < best[0] - 1e-9:
                    best = (loss, value)
            assert best is not None
            values[name] = best[1]
    return values, shares


def in_sample(cases: list[Case]) -> tuple[list[dict[str, Any]], dict[str, float], dict[str, float]]:
    values, shares = fit(cases)
    with coefficients(values):
        rows = [evaluate(c) for c in cases]
    return rows, values, shares


def leave_one_out(cases: list[Case], key: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Rows of every group predicted by a fit without it; and one line per group."""
    rows: list[dict[str, Any]] = []
    groups: list[dict[str, Any]] = []
    for group in sorted({getattr(c, key) for c in cases}):
        held = [c for c in cases if getattr(c, key) == group]
        values, _ = fit([c for c in cases if getattr(c, key) != group])
        with coefficients(values):
            held_rows = [evaluate(c) for c in held]
        rows.extend(held_rows)
        groups.append({"group": group, **summary(held_rows), "fit": {k: round(v, 3) for k, v in values.items()}})
    return rows, groups


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    kv = [abs(r["kv_error_gib"]) for r in rows if "kv_error_gib" in r]
    tok = [abs(r["token_error_pct"]) for r in rows if "token_error_pct" in r]
    return {"cases": len(rows),
            "kv_median_gib": statistics.median(kv) if kv else None,
            "kv_p90_gib": accuracy._pct(kv, 0.9) if kv else None,
            "over_05_gib": sum(1 for r in rows if r.get("kv_error_gib", 0) > 0.5),
            "token_median_pct": statistics.median(tok) if tok else None,
            "false_fits": sum(r["false_fit"] for r in rows),
            "false_wont_fits": sum(r["false_wont_fit"] for r in rows),
            "terms": {t: {"cases": len(e), "median_abs_gib": statistics.median(abs(x) for x in e) if e else None,
                          "mean_signed_gib": statistics.mean(e) if e else None}
                      for t in MEASURED_TERMS for e in [[r[f"{t}_error"] for r in rows if f"{t}_error" in r]]}}


def surrogate_check(cases: list[Case]) -> float:
    """Largest |surrogate - predict| pool (GiB) at the module's constants (0 when exact)."""
    return max((abs(surrogate(c)[0] - logged_rank(c.result).kv_pool_bytes / GiB) for c in cases), default=0.0)


GROUPINGS = (("source", "leave one source out"), ("gpu_class", "leave one GPU class out"),
             ("release", "leave one release line out"))


def run(with_anchors: bool = True) -> dict[str, Any]:
    cases = public_cases() + (anchor_cases() if with_anchors else [])
    rows, values, shares = in_sample(cases)
    shipped = [evaluate(c) for c in cases]
    report: dict[str, Any] = {
        "shipped": summary(shipped), "shipped_rows": shipped,
        "cases": len(cases), "surrogate_max_error_gib": surrogate_check(cases),
        "source_counts": Counter(c.source for c in cases).most_common(),
        "in_sample": summary(rows), "in_sample_fit": values, "max_source_share": shares,
        "module": {name: _from_module(name) for name in TERMS},
        "in_sample_rows": rows, "grouped": {},
    }
    for key, _title in GROUPINGS:
        held_rows, groups = leave_one_out(cases, key)
        report["grouped"][key] = {"summary": summary(held_rows), "groups": groups, "rows": held_rows}
    return report


def _fmt(value: Any, spec: str) -> str:
    width = "".join(ch for ch in spec.split(".")[0] if ch.isdigit())
    return accuracy._fmt(value, spec).rjust(int(width or 0))


def _summary_line(label: str, s: dict[str, Any]) -> str:
    return (f"{label:34s} {s['cases']:5d} {_fmt(s['kv_median_gib'], '10.3f')} {_fmt(s['kv_p90_gib'], '8.3f')} "
            f"{_fmt(s['token_median_pct'], '9.2f')} {s['false_fits']:6d} {s['false_wont_fits']:6d} "
            f"{s['over_05_gib']:8d}")


HEADER = (f"{'':34s} {'cases':>5s} {'med |dKV|':>10s} {'p90 GiB':>8s} {'med tok%':>9s} {'false':>6s} "
          f"{'f.wont':>6s} {'over+0.5':>8s}")


def print_headline(report: dict[str, Any]) -> None:
    print(f"Grouped cross-validation ({report['cases']} cases; every fitted constant refitted without the "
          f"held-out group; surrogate vs predict max {report['surrogate_max_error_gib']:.4f} GiB):")
    print(HEADER)
    print(_summary_line("module constants (shipped)", report["shipped"]))
    print(_summary_line("in sample (all cases fit)", report["in_sample"]))
    for key, title in GROUPINGS:
        print(_summary_line(title, report["grouped"][key]["summary"]))
    shares = report["max_source_share"]
    held = [name for name in TERMS if name not in shares]
    print(f"largest source share of a fitted constant's weight: {max(shares.values(), default=0.0):.1%} "
          f"(cap {SOURCE_CAP:.0%}); held at the module's value (cases from < {MIN_SOURCES} sources): "
          + (", ".join(held) or "none"))
    print("cases per source: " + ", ".join(f"{s} {n}" for s, n in report["source_counts"]))
    terms = report["shipped"]["terms"]
    print("per-term error of the shipped constants, against the logs' breakdowns (predicted - measured): "
          + "; ".join(f"{t.removesuffix('_gib')} {v['cases']} case(s), median |err| "
                      f"{_fmt(v['median_abs_gib'], '.3f')}, mean {_fmt(v['mean_signed_gib'], '+.3f')} GiB"
                      for t, v in terms.items()))
    print("in-sample fit:", json.dumps({k: round(v, 3) for k, v in report["in_sample_fit"].items()}),
          " module:", json.dumps({k: round(v, 3) for k, v in report["module"].items()}))


def print_groups(report: dict[str, Any]) -> None:
    for key, title in GROUPINGS:
        print(f"\n{title} (held-out group: its cases predicted by a fit without it)")
        print(HEADER)
        for g in report["grouped"][key]["groups"]:
            print(_summary_line(str(g["group"])[:34], g))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--no-anchors", action="store_true", help="public start-ups only")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    report = run(with_anchors=not args.no_anchors)
    if args.json:
        print(json.dumps(report, indent=1, default=str))
        return 0
    print_headline(report)
    print_groups(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
