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


def loso(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Leave-one-source-out errors (see the module docstring)."""
    priced = [r for r in rows if r["estimated_tps"]]
    errors = []
    for source in sorted({r["source"] for r in priced}):
        train = [r for r in priced if r["source"] != source]
        for r in (x for x in priced if x["source"] == source):
            ratios = [t["measured_tps"] / t["estimated_tps"] for t in train if t["engine"] == r["engine"]]
            k = statistics.median(ratios) if ratios else 1.0
            errors.append(r["estimated_tps"] * k / r["measured_tps"] - 1)
    absolute = sorted(abs(e) for e in errors)
    p90 = absolute[min(len(absolute) - 1, int(0.9 * len(absolute)))] if absolute else 0.0
    return {"measurements": len(rows), "priced": len(priced), "sources": len({r["source"] for r in priced}),
            "median_abs_error": statistics.median(absolute) if absolute else 0.0, "p90_abs_error": p90,
            "within_25pct": sum(1 for e in absolute if e <= 0.25)}
