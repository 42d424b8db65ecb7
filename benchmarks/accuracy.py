#!/usr/bin/env python3
"""Score club3090's vLLM memory model against real start-up logs.

    python benchmarks/accuracy.py [--cases FILE] [--configs FILE] [--json] [--no-refit]

The headline is grouped cross-validation (``benchmarks/refit.py``): leave one source out, leave one
GPU class out, leave one release line out, every fitted constant refitted without the held-out
group, each next to the in-sample figure. ``--no-refit`` skips it (seconds instead of minutes).

Cases: every ``tests/fixtures/calibration/vllm_startup_cases*.json`` (configs from every
``vllm_startup_configs*.json``), or one ``--cases`` file. Each case is priced the way `kv-calc` prices its flags: `serving.profile_shape` without a profile
(given settings on top of vLLM's defaults for the version and device) and `memory.predict`.

A cases file follows the schema in `tests/fixtures/calibration/README.md`: one object per vLLM
start with its settings and what the log printed. Configs come from the sibling
`vllm_startup_configs.json`, keyed by `hf_repo`. When the case measured "Model loading took X GiB"
that figure is used as the per-rank weights (as `kv-calc --weights-gib` would); otherwise a
measurement of the same repo from another case is split by TP, and failing that the case is
skipped for the memory metrics.

Per case it prints the error of the available KV memory (GiB, predicted − measured), of the KV
tokens (%), and whether the verdict agrees (false "fits" = we said it starts, vLLM refused;
false "won't fit" = the reverse). A second token figure, `page-math`, feeds the *measured* KV pool
through the page layout to isolate the exact part of the model from the fitted overheads.

"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from club3090.fit import profiling  # noqa: E402
from club3090.fit.estimate import weights_per_rank_bytes  # noqa: E402
from club3090.fit.memory import ServeShape, Unpriceable, logged_rank, predict  # noqa: E402
from club3090.fit.shape import profile_shape  # noqa: E402
from club3090.model.architecture import parse_config  # noqa: E402
from club3090.units import GiB  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "calibration"
DEFAULT_CASES = FIXTURES / "vllm_startup_cases.json"
CASES_GLOB, CONFIGS_GLOB = "vllm_startup_cases*.json", "vllm_startup_configs*.json"


def load_all(folder: Path = FIXTURES) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Every cases file of the folder (the first holder of an id wins) and every configs file."""
    cases: list[dict[str, Any]] = []
    seen: set[str] = set()
    for path in sorted(folder.glob(CASES_GLOB)):
        for case in json.loads(path.read_text(encoding="utf-8")):
            if case.get("id") not in seen:
                seen.add(case.get("id"))
                cases.append(case)
    configs: dict[str, Any] = {}
    for path in sorted(folder.glob(CONFIGS_GLOB)):
        for repo, config in json.loads(path.read_text(encoding="utf-8")).items():
            configs.setdefault(repo, config)
    return cases, configs

# total memory as torch/the driver report it, for logs that name the GPU but not its memory
GPU_TOTAL_GIB = {
    "nvidia l4": 22.49,              # 23034 MiB per nvidia-smi
    "nvidia geforce rtx 3090": 23.69,
    "nvidia geforce rtx 4090": 23.65,
    "nvidia l40s": 44.99,
    "nvidia l40": 44.99,             # 46068 MiB, the same board memory as the L40S
    "nvidia h100 80gb hbm3": 79.19,
    "nvidia a100-sxm4-80gb": 79.15,
    "nvidia a100-sxm4-40gb": 39.39,  # "total_gpu_memory (39.39GiB)" in public A100 40 GB logs
}

OK_OUTCOMES = {"ok"}


def _version_for(case: dict[str, Any]) -> str | None:
    version = case.get("vllm_version")
    if version:
        return str(version)
    if case.get("engine") == "v0":
        return "0.3.0"
    return None


def _weights_per_rank(case: dict[str, Any], cases: list[dict[str, Any]]) -> tuple[float | None, str]:
    measured = (case.get("measured") or {}).get("model_loading_gib")
    if measured is not None:
        return float(measured), "measured"
    tp, pp = case.get("tensor_parallel_size") or 1, case.get("pipeline_parallel_size") or 1
    consumed = {**(case.get("measured") or {}), **_quoted(case).measured}.get("weights_plus_non_torch_gib")
    if isinstance(consumed, (int, float)) and tp * pp == 1:
        # the log's breakdown measured weights + non-torch on this card; one GPU's non-torch is the
        # TP 1 term (another case's load of the same repo may have run other kernels or another build)
        return float(consumed) - profiling.NON_TORCH_TP1 / GiB, "breakdown's consumed memory - non-torch"
    for other in cases:
        if other is case or other.get("hf_repo") != case.get("hf_repo"):
            continue
        value = (other.get("measured") or {}).get("model_loading_gib")
        if value is None:
            continue
        other_split = (other.get("tensor_parallel_size") or 1) * (other.get("pipeline_parallel_size") or 1)
        return float(value) * other_split / (tp * pp), f"from {other['id']} / {tp * pp}"
    return None, "no weights measurement"


def _gpu_gib(case: dict[str, Any]) -> float | None:
    """The card's memory: the case's, else what its quoted log lines state (the profiling
    summary's total, "Free memory on device (F/T GiB)"), else the table for the named GPU."""
    if case.get("gpu_total_memory_gib"):
        return float(case["gpu_total_memory_gib"])
    logged = _quoted(case).gpu_total_memory_gib
    if logged:
        return float(logged)
    name = (case.get("gpu_model") or "").strip().lower()
    return GPU_TOTAL_GIB.get(name)


def _shape(case: dict[str, Any], pool_bytes: int | None = None) -> ServeShape:
    """The case's recorded settings as kv-calc flags (None = not stated: vLLM's default)."""
    util = case.get("gpu_memory_utilization")
    if case.get("gpu_memory_utilization_defaulted"):
        util = None      # vLLM's version default applies; the recorded value is the case author's assumption
    logged = _quoted(case).args.get("gpu_memory_utilization")
    if isinstance(logged, (int, float)) and not isinstance(logged, bool):
        util = float(logged)         # what the log's profiling line printed wins over any record
    kv = case.get("kv_cache_dtype") or "auto"
    return profile_shape(
        None, None,
        tp=case.get("tensor_parallel_size") or 1,
        pp=case.get("pipeline_parallel_size") or 1,
        mem_util=util,
        max_model_len=case.get("max_model_len"),
        max_num_seqs=case.get("max_num_seqs"),
        max_num_batched_tokens=case.get("max_num_batched_tokens"),
        block_size=case.get("block_size") if case.get("block_size") != 16 else None,
        kv_cache_dtype=kv,
        enforce_eager=bool(case.get("enforce_eager")),
        vllm_version=_version_for(case),
        dtype=(case.get("other_flags") or {}).get("dtype_flag") or case.get("dtype"),
        device_name=case.get("gpu_model"),
        kv_cache_memory_bytes=pool_bytes,
        enable_prefix_caching=case.get("enable_prefix_caching"),
        sampler=_quoted(case).sampler,
        **_speculation(case),
    )


def _quoted(case: dict[str, Any]) -> Any:
    """The case's quoted log lines, read by ``calibrate``'s parser."""
    from club3090.reports.vllm_log import parse_startup

    return parse_startup("\n".join(str(q) for q in case.get("quote") or ()))


def _unpriced_drafter(case: dict[str, Any]) -> bool:
    spec = (case.get("other_flags") or {}).get("speculative_config")
    return isinstance(spec, dict) and bool(spec.get("model"))


def _speculation(case: dict[str, Any]) -> dict[str, Any]:
    """The case's --speculative-config as ServeShape fields (built-in MTP only: a separate drafter's
    checkpoint is not in the configs file, so those cases price the target alone)."""
    spec = (case.get("other_flags") or {}).get("speculative_config")
    if not isinstance(spec, dict):
        return {}
    method = str(spec.get("method") or "")
    n = spec.get("num_speculative_tokens")
    if "mtp" not in method or not isinstance(n, int) or n < 1:
        return {}
    return {"num_speculative_tokens": n, "speculative_method": "mtp"}


def score_case(case: dict[str, Any], configs: dict[str, Any], cases: list[dict[str, Any]]) -> dict[str, Any]:
    row: dict[str, Any] = {"id": case["id"], "hf_repo": case.get("hf_repo")}
    config = configs.get(case.get("hf_repo") or "")
    if not config or config.get("config_relation") == "not_obtained" or not config.get("architectures"):
        row["skipped"] = "config not obtained"
        return row
    if _unpriced_drafter(case):
        row["skipped"] = "separate drafter checkpoint (its config is not in the configs file)"
        return row
    arch = parse_config({k: v for k, v in config.items() if not k.startswith("config_")})
    measured = case.get("measured") or {}
    outcome = measured.get("startup_outcome")
    row["measured_outcome"] = outcome
    measured_kv = measured.get("available_kv_cache_gib")
    measured_tokens = measured.get("gpu_kv_cache_tokens")
    row["measured_kv_gib"] = measured_kv
    row["measured_tokens"] = measured_tokens

    # exact part: the measured pool through the page layout
    if measured_kv is not None:
        exact = predict(arch, weights_bytes=0, weights_bytes_per_rank=0, gpu_memory_bytes=[80 * GiB],
                        shape=_shape(case, int(measured_kv * GiB)))
        if isinstance(exact, Unpriceable):
            row["skipped"] = f"unpriceable: {exact.reason}"
            return row
        row["page_math_tokens"] = exact.kv_cache_tokens
        row["page_math_verdict"] = exact.raw_verdict
        if measured_tokens:
            row["page_math_token_error_pct"] = 100.0 * (exact.kv_cache_tokens - measured_tokens) / measured_tokens

    gpu = _gpu_gib(case)
    weights, source = _weights_per_rank(case, cases)
    row["weights_source"] = source
    if gpu is None:
        row["skipped"] = "GPU memory unknown (memory metrics skipped)"
        return row
    if weights is None:
        row["skipped"] = "no weights measurement (memory metrics skipped)"
        return row
    result = predict(arch, weights_bytes=0, weights_bytes_per_rank=weights_per_rank_bytes(weights),
                     gpu_memory_bytes=[int(gpu * GiB)], shape=_shape(case))
    if isinstance(result, Unpriceable):
        row["skipped"] = f"unpriceable: {result.reason}"
        return row
    row["predicted_kv_gib"] = logged_rank(result).kv_pool_bytes / GiB
    row["predicted_tokens"] = result.kv_cache_tokens
    row["predicted_verdict"] = result.raw_verdict
    row["settings"] = {"util": result.settings.mem_util, "mnbt": result.settings.max_num_batched_tokens,
                       "mns": result.settings.max_num_seqs, "graphs": result.settings.cudagraphs_subtracted}
    row["breakdown_gib"] = {k: round(v / GiB, 3) for k, v in logged_rank(result).to_json().items()}
    if measured_kv is not None:
        row["kv_error_gib"] = row["predicted_kv_gib"] - measured_kv
    if measured_tokens and outcome in OK_OUTCOMES:
        row["token_error_pct"] = 100.0 * (result.kv_cache_tokens - measured_tokens) / measured_tokens
    if outcome:
        fits = result.raw_verdict != "wont-fit"
        started = outcome in OK_OUTCOMES
        row["false_fit"] = fits and not started and outcome.startswith("kv_error")
        row["false_wont_fit"] = (not fits) and started
        # vLLM sized the cache, then ran out of memory (e.g. the sampler warm-up after graphs
        # captured outside the budget): a failure the KV verdict does not predict, counted apart
        row["oom_after_kv"] = fits and outcome.startswith("oom")
    return row


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    kv = [abs(r["kv_error_gib"]) for r in rows if "kv_error_gib" in r]
    tok = [abs(r["token_error_pct"]) for r in rows if "token_error_pct" in r]
    page = [abs(r["page_math_token_error_pct"]) for r in rows if "page_math_token_error_pct" in r]
    scored = [r for r in rows if "false_fit" in r]
    return {
        "cases": len(rows),
        "scored_memory": len(kv),
        "kv_abs_error_gib_median": statistics.median(kv) if kv else None,
        "kv_abs_error_gib_p90": _pct(kv, 0.9) if kv else None,
        "kv_error_gib_mean_signed": statistics.mean(r["kv_error_gib"] for r in rows if "kv_error_gib" in r) if kv else None,
        "token_abs_error_pct_median": statistics.median(tok) if tok else None,
        "token_abs_error_pct_p90": _pct(tok, 0.9) if tok else None,
        "page_math_token_error_pct_max": max(page) if page else None,
        "page_math_scored": len(page),
        "verdicts_scored": len(scored),
        "false_fits": sum(1 for r in scored if r["false_fit"]),
        "false_wont_fits": sum(1 for r in scored if r["false_wont_fit"]),
        "oom_after_kv_check": sum(1 for r in scored if r.get("oom_after_kv")),
        "skipped": {r["id"]: r["skipped"] for r in rows if "skipped" in r},
    }


def run(cases_path: Path | None, configs_path: Path | None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Score one cases file (its sibling configs file unless ``configs_path``), or all (None)."""
    if cases_path is None:
        cases, configs = load_all()
    else:
        cases = json.loads(cases_path.read_text(encoding="utf-8"))
        configs_path = configs_path or cases_path.with_name("vllm_startup_configs.json")
        configs = json.loads(configs_path.read_text(encoding="utf-8")) if configs_path.exists() else {}
    rows = [score_case(case, configs, cases) for case in cases]
    return rows, summarize(rows)


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=Path, default=None, help=f"one cases file (default: every {CASES_GLOB})")
    parser.add_argument("--configs", type=Path, default=None)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--no-refit", action="store_true", help="skip the grouped cross-validation")
    args = parser.parse_args(argv)
    rows, summary = run(args.cases, args.configs)
    refit_report: dict[str, Any] | None = None
    if not args.no_refit:
        sys.path.insert(0, str(ROOT / "benchmarks"))
        import refit

        refit_report = refit.run()
    if args.json:
        doc: dict[str, Any] = {"cases": rows, "summary": summary}
        if refit_report is not None:
            doc["grouped_cross_validation"] = refit_report
        print(json.dumps(doc, indent=1, default=str))
        return 0
    if refit_report is not None:
        refit.print_headline(refit_report)
        print()
    print(f"{'case':44s} {'meas KV':>8s} {'pred KV':>8s} {'err GiB':>8s} {'tok err%':>8s} "
          f"{'page%':>7s} {'verdict':>18s}  note")
    for r in rows:
        verdict = r.get("predicted_verdict") or r.get("page_math_verdict") or "-"
        flag = (" FALSE-FIT" if r.get("false_fit") else " FALSE-WONT" if r.get("false_wont_fit")
                else " OOM-AFTER-KV" if r.get("oom_after_kv") else "")
        print(f"{r['id'][:44]:44s} {_fmt(r.get('measured_kv_gib'), '8.2f')} {_fmt(r.get('predicted_kv_gib'), '8.2f')} "
              f"{_fmt(r.get('kv_error_gib'), '+8.2f')} {_fmt(r.get('token_error_pct'), '+8.2f')} "
              f"{_fmt(r.get('page_math_token_error_pct'), '+7.2f')} {verdict:>18s}{flag}  {r.get('skipped', '')}")
    s = summary
    print()
    print(f"memory-scored cases: {s['scored_memory']} of {s['cases']}")
    print(f"|KV error| GiB: median {_fmt(s['kv_abs_error_gib_median'], '.3f')}, p90 {_fmt(s['kv_abs_error_gib_p90'], '.3f')}, "
          f"mean signed {_fmt(s['kv_error_gib_mean_signed'], '+.3f')}")
    print(f"|KV-token error| %: median {_fmt(s['token_abs_error_pct_median'], '.2f')}, p90 {_fmt(s['token_abs_error_pct_p90'], '.2f')}")
    print(f"page math (measured pool -> tokens): max |error| {_fmt(s['page_math_token_error_pct_max'], '.3f')} % "
          f"over {s['page_math_scored']} cases")
    print(f"verdicts: {s['verdicts_scored']} scored, {s['false_fits']} false 'fits', {s['false_wont_fits']} false 'won't fit'"
          f"; {s['oom_after_kv_check']} start(s) that passed the KV check and then ran out of memory")
    for case_id, why in s["skipped"].items():
        print(f"skipped {case_id}: {why}")
    if refit_report is not None:
        refit.print_groups(refit_report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
