"""Leave-one-source-out scoring of the speed estimate on published measurements (``benchmarks/speed.py``).

Two fixtures: upstream club-3090's measured decode rows (``tests/fixtures/speed/decode_baselines.yaml``,
vLLM and llama.cpp, priced by ``fit/speed.py``) and the llmfit community submissions of index models
(``tests/fixtures/speed/published.yaml``, llama.cpp, priced by ``fit/offload.py``: the quant's bytes
from the index, the card's memory and, when a model does not fit, the submitter's RAM). A source is
one submission file (or the upstream baselines file). For each source held out, one efficiency
factor per engine (the median of measured / estimated over the other sources; 1 where no other
source has that engine) scales its estimates; the error is estimate / measured - 1.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import yaml

from club3090.catalog import load_catalog
from club3090.catalog.open_index import load_open_index
from club3090.fit.memory import Unpriceable
from club3090.fit.offload import gguf_from_arch, plan_offload, usable_ram
from club3090.model.architecture import parse_config
from club3090.model.param_estimate import estimate_weights
from club3090.units import GiB

PUBLISHED = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "speed" / "published.yaml"
PREFILL = PUBLISHED.with_name("prefill.yaml")


def published_estimates(path: Path = PUBLISHED) -> list[dict[str, Any]]:
    """Each published llama.cpp row with club3090's raw estimate (None: not priceable on that card)."""
    catalog, index = load_catalog(), load_open_index()
    out = []
    for row in yaml.safe_load(path.read_text(encoding="utf-8"))["rows"]:
        model = index.models[row["model"]]
        arch = parse_config(model.config_dict())
        params = model.params or estimate_weights(arch).params
        quant = index.gguf_quants.get(row["quant"])
        card = catalog.gpus[row["gpu"]]
        estimate = None
        if quant is not None:
            gguf = gguf_from_arch(arch, int(params * quant.bits_per_weight / 8), label=row["quant"])
            memory = int(card.memory_bytes * (card.usable_memory_fraction or 1))
            ram = usable_ram(int(row["host_ram_gb"] * GiB)) if row.get("host_ram_gb") else None
            plan = plan_offload(gguf, [memory], ram, ctx=4096, gpu_bandwidth_gb_s=float(card.memory_bandwidth_gb_s)) \
                if not isinstance(gguf, Unpriceable) else gguf
            estimate = None if isinstance(plan, Unpriceable) else plan.speed.decode_tps
        out.append({"source": row["source"], "engine": row["engine"], "label": f"{row['model']} {row['quant']}",
                    "rig": f"1x{row['gpu']}", "estimated_tps": estimate, "measured_tps": float(row["decode_tps"])})
    return out


def _group(row: dict[str, Any]) -> tuple[str, bool]:
    """Rows share an efficiency factor by engine and by whether a drafter ran."""
    return row["engine"], bool(row.get("speculative"))


def prefill_estimates(path: Path = PREFILL) -> list[dict[str, Any]]:
    """Each published prefill row with club3090's raw estimate of prompt tokens/s (``fit/speed.py``)."""
    from club3090.fit.memory import ServeShape
    from club3090.fit.speed import estimate_speed
    from club3090.rig.gpus import parse_gpus

    catalog, index = load_catalog(), load_open_index()
    out = []
    for row in yaml.safe_load(path.read_text(encoding="utf-8"))["rows"]:
        if "quant" in row:
            model = index.models[row["model"]]
            arch = parse_config(model.config_dict())
            params = model.params or estimate_weights(arch).params
            weights = int(params * index.gguf_quants[row["quant"]].bits_per_weight / 8)
        else:
            entry = catalog.models[row["model"]]
            arch, weights = parse_config(entry.hf_config), int(entry.weights[row["weights_variant"]].size_bytes)
        gpus = parse_gpus(f"{row['gpu_count']}x{row['gpu']}", catalog)
        est = estimate_speed(arch, weights, ServeShape(tp=int(row["tp"]), max_num_batched_tokens=8192), gpus,
                             prompt_tokens=int(row["prompt_tokens"]), prefill_depth=int(row["depth"]))
        out.append({"source": row["source"], "engine": row["engine"],
                    "label": f"{row['model']} {row.get('quant') or row.get('weights_variant')} "
                             f"pp{row['prompt_tokens']}@{row['depth']}",
                    "rig": f"{row['gpu_count']}x{row['gpu']}", "estimated_tps": est.prefill_tps if est else None,
                    "measured_tps": float(row["prefill_tps"])})
    return out


def loso(rows: list[dict[str, Any]], train: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Leave-one-source-out errors (see the module docstring); ``train``: the rows the engine
    factors are fitted on (default: ``rows`` themselves), never from the held-out source."""
    priced = [r for r in rows if r["estimated_tps"]]
    pool = [r for r in (train if train is not None else priced) if r["estimated_tps"]]
    errors: list[float] = []
    held: list[str] = []
    for source in sorted({r["source"] for r in priced}):
        fitted = [r for r in pool if r["source"] != source]
        for r in (x for x in priced if x["source"] == source):
            ratios = [t["measured_tps"] / t["estimated_tps"] for t in fitted if _group(t) == _group(r)] or \
                [t["measured_tps"] / t["estimated_tps"] for t in fitted if t["engine"] == r["engine"]]
            k = statistics.median(ratios) if ratios else 1.0
            errors.append(r["estimated_tps"] * k / r["measured_tps"] - 1)
            held.append(source)
    return grade(errors, held, len(rows))


def grade(errors: list[float], sources: list[str], measurements: int) -> dict[str, Any]:
    """Median and p90 |error| of ``errors`` (one per priced row, from ``sources``)."""
    absolute = sorted(abs(e) for e in errors)
    p90 = absolute[min(len(absolute) - 1, int(0.9 * len(absolute)))] if absolute else 0.0
    return {"measurements": measurements, "priced": len(errors), "sources": len(set(sources)),
            "median_abs_error": statistics.median(absolute) if absolute else 0.0, "p90_abs_error": p90,
            "within_25pct": sum(1 for e in absolute if e <= 0.25),
            "errors": [{"source": src, "error": e} for src, e in zip(sources, errors, strict=True)]}
