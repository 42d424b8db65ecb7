"""llama.cpp's logged start-up buffers as a regression gate for `fit/llamacpp.py`, via
benchmarks/llamacpp_accuracy.py (the table of docs/ACCURACY.md)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from tests.fixtures_path import fixture_path

ROOT = Path(__file__).resolve().parents[1]
CASES = fixture_path("llamacpp_memory", "cases.json")


def _run():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("llamacpp_accuracy", ROOT / "benchmarks" / "llamacpp_accuracy.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.run(CASES)


def test_kv_buffers_equal_the_logged_mib() -> None:
    _rows, summary = _run()
    assert summary["kv_cases"] >= 6 and summary["kv_exact"] == summary["kv_cases"]


def test_compute_buffers_within_targets() -> None:
    rows, summary = _run()
    cuda, cpu = summary["CUDA"], summary["CPU"]
    assert cuda["compute"]["n"] >= 6 and cpu["compute"]["n"] >= 18
    assert cuda["compute"]["median_abs_pct"] <= 5 and cuda["compute"]["max_abs_pct"] <= 12
    assert cuda["host_compute"]["max_abs_pct"] <= 1
    assert cpu["compute"]["median_abs_pct"] <= 2 and cpu["compute"]["max_abs_pct"] <= 6
    # the calibration is an improvement on the rule it replaced, case by case on the GPU logs
    for row in rows:
        if row["backend"] == "CUDA":
            assert abs(row["compute"]["error_pct"]) < abs(row["previous_compute"]["error_pct"]), row["id"]
