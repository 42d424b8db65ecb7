"""`fits` over the open-model index: every model under the engine that serves it best on the rig,
llama.cpp rows with planned offload, curated rows all answered; the CLI end to end, offline."""

from __future__ import annotations

import json
import time
from decimal import Decimal

import pytest

from club3090 import cli
from club3090.catalog import load_catalog
from club3090.catalog.open_index import load_open_index
from club3090.edges.provider import LiveProvider
from club3090.pipeline.open_fits import (
    DEFAULT_CONTEXT,
    GGUF,
    OpenFitsRequest,
    admitted_quants,
    open_fits,
    open_rank_key,
)
from club3090.rig.gpus import parse_gpus
from club3090.units import GiB


@pytest.fixture(scope="module")
def index():
    return load_open_index()


def rig(spec: str):
    return parse_gpus(spec, load_catalog())


def test_two_3090s_rank_every_index_model_with_a_value(index):
    rows = open_fits(index, rig("2x3090"), OpenFitsRequest(ram_bytes=60 * GiB))
    assert len(rows) == len(index.models) >= 150
    assert list(rows) == sorted(rows, key=open_rank_key)
    assert sum(r.fits for r in rows) >= 100
    for r in rows:
        assert r.fits or r.reason, r.model
        assert r.confidence == "estimated"
        if r.fits:
            assert r.context >= DEFAULT_CONTEXT and r.speed is not None and r.serve(" --gpus 2x3090")
    engines = {r.engine for r in rows if r.fits}
    assert engines == {"vllm", "llama.cpp"}
    assert any(r.fits and r.engine == "vllm" and r.tp == 2 for r in rows)


def test_one_3090_with_64_gib_offloads_moe_experts(index):
    rows = open_fits(index, rig("1x3090"), OpenFitsRequest(engine=GGUF, ram_bytes=60 * GiB))
    assert rows and all(r.engine == "llama.cpp" for r in rows) and len(rows) < len(index.models)  # GGUF repos only
    moe = [r for r in rows if r.offloaded and r.plan.fit.n_cpu_moe > 0]
    assert moe, "no MoE row needs expert offload"
    row = next(r for r in moe if r.model == "gpt-oss-120b")
    assert row.fits and row.context >= DEFAULT_CONTEXT
    assert row.plan.breakdown.host.total_bytes <= 60 * GiB
    assert f"--n-cpu-moe {row.plan.fit.n_cpu_moe}" in row.llama_server()
    assert f"--quant {row.variant} --ctx-size {row.context}" in row.serve(" --gpus 1x3090")
    assert 1 < row.speed.decode_tps < 100 and row.speed.label == "estimated"
    # without host memory the same model does not run, and says why
    bare = {r.model: r for r in open_fits(index, rig("1x3090"), OpenFitsRequest(engine=GGUF))}
    assert not bare["gpt-oss-120b"].fits and "--ram" in bare["gpt-oss-120b"].reason


def test_quant_quality_order_and_the_loss_limit(index):
    quants = list(index.gguf_quants.values())
    default = [q.label for q in admitted_quants(quants, None)]
    assert default[0] == "BF16" and default.index("Q8_0") < default.index("Q6_K") < default.index("Q4_K_M")
    assert "Q2_K" not in default and "Q3_K_S" not in default and "IQ4_XS" in default
    strict = [q.label for q in admitted_quants(quants, Decimal("0.06"))]
    assert set(strict) >= {"BF16", "Q8_0", "Q6_K", "Q5_K_M"} and "Q4_K_M" not in strict
    rows = open_fits(index, rig("1x3090"), OpenFitsRequest(engine=GGUF, max_quant_loss=Decimal("0.06"),
                                                           ram_bytes=60 * GiB))
    assert all(r.variant in strict for r in rows if r.fits)


def test_task_and_min_context_filter(index):
    rows = open_fits(index, rig("1x3090"), OpenFitsRequest(task="embedding"))
    assert rows and all("embedding" in r.tasks for r in rows)
    long = open_fits(index, rig("2x3090"), OpenFitsRequest(min_context=131072, ram_bytes=60 * GiB))
    assert all(r.context >= 131072 for r in long if r.fits)
    assert sum(r.fits for r in long) < sum(r.fits for r in open_fits(index, rig("2x3090"), OpenFitsRequest()))


# ---------------------------------------------------------------------------------------------
# the CLI, offline with an empty cache


@pytest.fixture
def offline(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-hf"))
    monkeypatch.setenv("CLUB3090_HOME", str(tmp_path / "home"))


def run_json(capsys, *argv, provider=None):
    code = cli.main(["fits", *argv, "--json"], provider=provider)
    return code, json.loads(capsys.readouterr().out)


def test_cli_ranks_150_models_offline_and_answers_every_curated_one(offline, capsys):
    started = time.perf_counter()
    code, doc = run_json(capsys, "--gpus", "2x3090", "--ram", "64")
    elapsed = time.perf_counter() - started
    assert code == 0
    assert doc["index"]["ranked"] >= 150 and len(doc["index_models"]) == doc["index"]["ranked"]
    assert doc["index"]["ram"] == {"usable_bytes": 60 * GiB, "source": "--ram"}
    assert any(m["engine"] == "llama.cpp" and m["fits"] for m in doc["index_models"])
    for m in doc["models"]:
        assert m["stop"] is None or not m["stop"].startswith("unsupported-format"), m["model"]
        assert "no valid parallel size" not in (m["stop"] or ""), m["model"]
    assert elapsed < 30      # measured: docs/CATALOG.md gives the figure on an idle machine


def test_cli_one_3090_llamacpp_offers_expert_offload(offline, capsys):
    code, doc = run_json(capsys, "--gpus", "1x3090", "--ram", "64", "--engine", "llamacpp")
    assert code == 0
    assert all(m["gguf"] is not None for m in doc["models"])           # curated rows: llama.cpp only
    offloaded = [m for m in doc["index_models"] if m["offloaded"] and m["offload"]["n_cpu_moe"]]
    assert offloaded
    first = offloaded[0]
    assert "--n-cpu-moe" in first["offload"]["flags"] and first["speed"]["decode_tps"] > 0
    assert first["serve"].startswith("club3090 up ") and "--quant" in first["serve"]


def test_cli_text_never_says_cannot_be_answered(offline, capsys):
    assert cli.main(["fits", "--gpus", "1x3090", "--ram", "64", "--limit", "30"]) == 0
    out = capsys.readouterr().out
    assert "cannot be answered" not in out
    assert "Open-model index:" in out and "30. " in out and "31. " not in out


def test_detected_ram_comes_through_the_provider(offline, capsys):
    def provider(settings):
        return LiveProvider(settings, ram=lambda: 32 * GiB)

    _, doc = run_json(capsys, "--gpus", "1x3090", "--task", "code", provider=provider)
    assert doc["index"]["ram"] == {"usable_bytes": 28 * GiB, "source": "detected"}
    assert all("code" in m["tasks"] for m in doc["index_models"])
    assert doc["models"] == []                          # curated models carry no code tag


def test_no_index_still_plans_curated_gguf_offload_with_ram(offline, capsys):
    """`--no-index` drops the index rows, not the host memory: a curated GGUF model that needs
    offload still runs with `--ram`, and without any RAM it does not."""
    def offloaded(doc):
        return [m["model"] for m in doc["models"] if m["gguf"] is not None and m["fits"]
                and any(q["runs"] and not q["fits_fully"] for q in m["gguf"]["quants"])]

    code, with_ram = run_json(capsys, "--gpus", "1x3090", "--ram", "64", "--no-index")
    assert code == 0 and "index" not in with_ram
    assert offloaded(with_ram)
    _, without = run_json(capsys, "--gpus", "1x3090", "--ram", "0.5", "--no-index")
    assert not offloaded(without)
