"""Published decode measurements (tests/fixtures/speed/published.yaml) and the leave-one-source-out
grade benchmarks/speed.py prints: at least 60 measurements with their rig, engine, version, quant,
context, concurrency and source; the grade's median |error| within 25 %."""

from __future__ import annotations

import sys

import yaml

from club3090.catalog import load_catalog
from club3090.catalog.open_index import load_open_index
from tests.fixtures_path import FIXTURES

sys.path.insert(0, str(FIXTURES.parent.parent / "benchmarks"))

import speed
import speed_loso


def test_every_published_row_names_its_rig_engine_quant_and_source():
    rows = yaml.safe_load((FIXTURES / "speed" / "published.yaml").read_text(encoding="utf-8"))["rows"]
    index, catalog = load_open_index(), load_catalog()
    assert len(rows) >= 60 and len({r["source"] for r in rows}) >= 5
    for r in rows:
        assert {"source", "source_url", "gpu", "gpu_count", "engine", "engine_version", "quant", "context",
                "concurrency", "decode_tps"} <= set(r)
        assert r["model"] in index.models and r["gpu"] in catalog.gpus and r["quant"] in index.gguf_quants
        assert r["concurrency"] == 1 and r["decode_tps"] > 0 and "AlexsJones/llmfit@" in r["source_url"]


def test_leave_one_source_out_grade():
    rows = yaml.safe_load(speed.DEFAULT_ROWS.read_text(encoding="utf-8"))["rows"]
    graded = speed.out_of_sample(speed.score(rows), rows)
    decode, spec, prefill = graded["decode"], graded["speculative"], graded["prefill"]
    assert decode["priced"] >= 60 and decode["sources"] >= 6
    assert decode["median_abs_error"] <= 0.25
    assert decode["p90_abs_error"] >= decode["median_abs_error"]
    # the drafter rows (narrative and code) are graded apart, the per-token overhead refitted per rig
    assert spec["priced"] >= 16 and spec["sources"] >= 4 and spec["median_abs_error"] <= 0.25
    assert set(spec["token_overhead_s_fitted"]) == {e["source"] for e in spec["errors"]}
    assert prefill["priced"] >= 10 and prefill["sources"] >= 5 and prefill["median_abs_error"] <= 0.40


def test_every_prefill_row_is_cited_and_priceable():
    rows = yaml.safe_load((FIXTURES / "speed" / "prefill.yaml").read_text(encoding="utf-8"))["rows"]
    index, catalog = load_open_index(), load_catalog()
    assert len(rows) >= 10 and len({r["source"] for r in rows}) >= 5
    for r in rows:
        assert {"source", "source_url", "quote", "engine", "engine_version", "gpu", "gpu_count", "tp",
                "prompt_tokens", "depth", "prefill_tps"} <= set(r)
        assert r["source_url"].startswith(("https://github.com/", "github.com/")) and r["quote"]
        assert r["gpu"] in catalog.gpus and r["prefill_tps"] > 0
        if "quant" in r:
            assert r["model"] in index.models and r["quant"] in index.gguf_quants
        else:
            assert catalog.models[r["model"]].weights[r["weights_variant"]].size_bytes
    assert all(e["estimated_tps"] for e in speed_loso.prefill_estimates())


def test_the_grade_uses_only_other_sources():
    rows = [{"source": "a", "engine": "x", "estimated_tps": 10.0, "measured_tps": 20.0},
            {"source": "b", "engine": "x", "estimated_tps": 10.0, "measured_tps": 20.0},
            {"source": "c", "engine": "y", "estimated_tps": 10.0, "measured_tps": 10.0}]
    graded = speed_loso.loso(rows)
    # a and b each fit k = 2 on the other and predict exactly; c has no other y source: k = 1, exact too
    assert graded["median_abs_error"] == 0 and graded["sources"] == 3
    rows[1]["measured_tps"] = 40.0
    assert speed_loso.loso(rows)["median_abs_error"] > 0
