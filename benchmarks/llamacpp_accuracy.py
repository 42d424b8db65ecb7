#!/usr/bin/env python3
"""Score club3090's llama.cpp memory model against llama.cpp's own start-up buffers.

    python benchmarks/llamacpp_accuracy.py [--cases FILE] [--json]

Cases (default ``tests/fixtures/llamacpp_memory/cases.json``, sources in its ``SOURCE.md``) give a
model's geometry, the flags of one start and the buffers that start printed. Each is priced with
``club3090.fit.llamacpp.predict`` on a model built from that geometry (weights do not enter these
buffers, except a host matrix copied for op offload), on one GPU for ``CUDA`` cases and on the CPU
alone for ``CPU`` cases. Per case: the KV buffer (exact by construction: the error must be 0), the
compute buffer of the GPU (or of the CPU build) and the host's ``CUDA_Host`` compute buffer, as
predicted - logged, with the error of the rule used before this calibration (the sum of the
attention, FFN and logits terms) beside it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from types import MappingProxyType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from club3090.fit.llamacpp import LlamaCppArgs, LlamaCppBreakdown, predict  # noqa: E402
from club3090.model.gguf_model import GgufModel  # noqa: E402

DEFAULT_CASES = ROOT / "tests" / "fixtures" / "llamacpp_memory" / "cases.json"
MiB = 1 << 20
GPU_BYTES = 80 << 30          # room enough: the buffers, not the verdict, are scored


def model_of(geo: dict[str, Any]) -> GgufModel:
    """A GgufModel with the case's geometry and no weights (one host expert matrix when logged)."""
    n = int(geo["n_layer"])
    host_matrix = int(float(geo.get("host_expert_matrix_mib", 0)) * MiB)
    tensors = (("blk.0.ffn_up_exps.weight", host_matrix),) if host_matrix else ()
    return GgufModel(
        files=(), arch=geo["arch"], name=None, quant=None, n_layer=n, n_embd=geo["n_embd"], n_vocab=geo["n_vocab"],
        ctx_train=None, n_head=(geo["n_head"],) * n, n_head_kv=(geo["n_head_kv"],) * n,
        head_dim_k=geo["head_dim"], head_dim_v=geo["head_dim"], n_ff=geo["n_ff"],
        n_expert=geo.get("n_expert", 0), n_expert_used=geo.get("n_expert_used", 0), n_ff_exp=geo.get("n_ff_exp", 0),
        swa_window=None, swa_layers=(False,) * n, recurrent_layers=(False,) * n, state_bytes=0,
        weights_bytes=host_matrix, embd_bytes=0, output_bytes=0, tied_output=False, layer_bytes=(0,) * n,
        expert_bytes=(host_matrix,) + (0,) * (n - 1), other_bytes=0, type_bytes=MappingProxyType({}),
        tensors=tensors)


def args_of(flags: dict[str, Any]) -> LlamaCppArgs:
    return LlamaCppArgs(ctx_size=flags["ctx_size"], batch_size=flags["batch_size"], ubatch_size=flags["ubatch_size"],
                        flash_attn=flags["flash_attn"], cache_type_k=flags.get("cache_type_k", "f16"),
                        cache_type_v=flags.get("cache_type_v", "f16"),
                        override_tensors=tuple(tuple(r) for r in flags.get("override_tensors", ())))  # type: ignore[misc]


def previous_rule(model: GgufModel, r: LlamaCppBreakdown, *, host: bool) -> int:
    """The compute estimate before this calibration: every term summed (host: 2 rows of n_embd)."""
    n_ub, a = r.kv.n_ubatch, r.args
    if host:
        return 4 * n_ub * model.n_embd * 2
    ffn = max(2 * model.n_ff, 3 * model.n_ff_exp * model.n_expert_used)
    out = 4 * n_ub * (ffn + 3 * model.n_embd)
    out += r.kv.cells * -(-n_ub // 64) * 64 * 2 if a.flash_attn else r.kv.cells * n_ub * 4 * (model.n_head[0] + 1)
    return out + 4 * n_ub * model.n_vocab


def _err(pred: float, logged: float) -> dict[str, float]:
    return {"predicted_mib": round(pred, 2), "logged_mib": logged, "error_mib": round(pred - logged, 2),
            "error_pct": round(100 * (pred - logged) / logged, 1)}


def run(cases_path: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    doc = json.loads(cases_path.read_text(encoding="utf-8"))
    rows = []
    for case in doc["cases"]:
        model, args = model_of(case["model"]), args_of(case["flags"])
        cuda = case["backend"] == "CUDA"
        r = predict(model, args, [GPU_BYTES] if cuda else [])
        assert isinstance(r, LlamaCppBreakdown), r
        logged = case["logged_mib"]
        device = r.devices[0]
        row: dict[str, Any] = {"id": case["id"], "backend": case["backend"], "source": case["source"],
                               "compute": _err(device.compute_bytes / MiB, logged["compute"]),
                               "previous_compute": _err(previous_rule(model, r, host=False) / MiB, logged["compute"])}
        if "kv" in logged:
            row["kv"] = _err(r.kv.total_bytes / MiB, logged["kv"])
        if cuda and "host_compute" in logged:
            row["host_compute"] = _err(r.host.compute_bytes / MiB, logged["host_compute"])
            row["previous_host_compute"] = _err(previous_rule(model, r, host=True) / MiB, logged["host_compute"])
        rows.append(row)
    return rows, summarize(rows)


def _stats(values: list[float]) -> dict[str, float]:
    if not values:
        return {"n": 0}
    absolute = [abs(v) for v in values]
    return {"n": len(values), "median_abs_pct": round(statistics.median(absolute), 1),
            "max_abs_pct": round(max(absolute), 1), "mean_pct": round(statistics.fmean(values), 1)}


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for backend in ("CUDA", "CPU"):
        part = [r for r in rows if r["backend"] == backend]
        out[backend] = {"compute": _stats([r["compute"]["error_pct"] for r in part]),
                        "previous_compute": _stats([r["previous_compute"]["error_pct"] for r in part])}
        hosts = [r for r in part if "host_compute" in r]
        if hosts:
            out[backend]["host_compute"] = _stats([r["host_compute"]["error_pct"] for r in hosts])
            out[backend]["previous_host_compute"] = _stats([r["previous_host_compute"]["error_pct"] for r in hosts])
    kv = [r["kv"] for r in rows if "kv" in r]
    out["kv_exact"] = sum(1 for k in kv if k["error_mib"] == 0)
    out["kv_cases"] = len(kv)
    return out


def render(rows: list[dict[str, Any]], summary: dict[str, Any]) -> str:
    lines = ["| case | src | KV MiB (logged / err) | compute MiB logged | predicted | error | previous rule | "
             "host MiB logged | predicted | error |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        kv = f"{r['kv']['logged_mib']:.2f} / {r['kv']['error_mib']:+.2f}" if "kv" in r else "-"
        c, p = r["compute"], r["previous_compute"]
        h = r.get("host_compute")
        host = f"{h['logged_mib']:.2f} | {h['predicted_mib']:.2f} | {h['error_pct']:+.1f}%" if h else "- | - | -"
        lines.append(f"| {r['id']} ({r['backend']}) | {r['source']} | {kv} | {c['logged_mib']:.2f} | "
                     f"{c['predicted_mib']:.2f} | {c['error_pct']:+.1f}% | {p['error_pct']:+.1f}% | {host} |")
    lines.append("")
    for backend in ("CUDA", "CPU"):
        s = summary[backend]
        lines.append(f"{backend}: compute n={s['compute']['n']} median |err| {s['compute'].get('median_abs_pct')}%, "
                     f"max {s['compute'].get('max_abs_pct')}% (previous rule: median "
                     f"{s['previous_compute'].get('median_abs_pct')}%, max {s['previous_compute'].get('max_abs_pct')}%)")
        if "host_compute" in s:
            lines.append(f"{backend}: host compute median |err| {s['host_compute']['median_abs_pct']}%, max "
                         f"{s['host_compute']['max_abs_pct']}% (previous rule: median "
                         f"{s['previous_host_compute']['median_abs_pct']}%)")
    lines.append(f"KV buffers equal to the MiB printed: {summary['kv_exact']} of {summary['kv_cases']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[1].strip())
    p.add_argument("--cases", type=Path, default=DEFAULT_CASES)
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    rows, summary = run(a.cases)
    print(json.dumps({"cases": rows, "summary": summary}, indent=1) if a.json else render(rows, summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
