"""Pricing a rig of several nodes: vLLM's PP layer split, per-rank weights, the pool as the minimum
over ranks, one node first, and a published two-node start-up log (tests/fixtures/multinode)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from club3090.cli import main
from club3090.fit.memory import ServeShape, Unpriceable, pp_layer_counts, predict
from club3090.fit.speed import estimate_speed
from club3090.fit.vllm_rules import choose_engine
from club3090.model.architecture import parse_config
from club3090.units import GiB
from tests.fakehub import FIXTURES, add_deepseek_v3_layout, fp8_block_table, header_sum, synth_table
from tests.fixtures_path import fixture_path

FIGURES = json.loads((fixture_path("multinode") / "startup_figures.json").read_text())


def _deepseek(name: str = "deepseek-ai--DeepSeek-R1"):
    config = json.loads((FIXTURES / name / "config.json").read_bytes())
    table = fp8_block_table(synth_table(config, layers=int(config["num_hidden_layers"]) + 1))
    return parse_config(config), header_sum(table)


# --- vLLM's get_pp_indices --------------------------------------------------------------------

@pytest.mark.parametrize("layers, pp, parts", [
    # the goldens of vLLM's tests/distributed/test_pipeline_partition.py
    (2, 2, [1, 1]), (3, 2, [2, 1]), (3, 3, [1, 1, 1]), (4, 3, [1, 2, 1]), (5, 3, [2, 2, 1]),
    (61, 2, [31, 30]), (61, 4, [15, 15, 16, 15]), (64, 4, [16, 16, 16, 16]),
])
def test_even_split_as_vllm(layers, pp, parts):
    assert pp_layer_counts(layers, pp) == parts and sum(parts) == layers


@pytest.mark.parametrize("partition, layers, pp", [((4, 6, 6, 4), 20, 4), ((5, 6, 5, 6), 22, 4)])
def test_vllm_pp_layer_partition(partition, layers, pp):
    assert pp_layer_counts(layers, pp, partition) == list(partition)


@pytest.mark.parametrize("partition, says", [((5, 5, 5), "3 stages for PP 4"), ((5, 5, 5, 6), "sums to 21"),
                                             ((-1, 7, 7, 7), "sums to 20")])
def test_bad_partition_cannot_be_priced(partition, says):
    a, w = _deepseek()
    a20 = replace(a, num_hidden_layers=20, layers=a.layers[:20])
    got = predict(a20, weights_bytes=w, gpu_memory_bytes=[80 * GiB] * 4,
                  shape=ServeShape(pp=4, pp_layer_partition=partition, max_model_len=4096))
    assert isinstance(got, Unpriceable) and says in got.reason


def test_partition_moves_layers_and_their_kv():
    a, w = _deepseek()
    shape = ServeShape(tp=8, pp=2, max_model_len=8192)
    even = predict(a, weights_bytes=w, gpu_memory_bytes=[80 * GiB] * 16, shape=shape)
    moved = predict(a, weights_bytes=w, gpu_memory_bytes=[80 * GiB] * 16,
                    shape=ServeShape(tp=8, pp=2, max_model_len=8192, pp_layer_partition=(28, 33)))
    assert [even.ranks[i].num_layers for i in (0, 8)] == [31, 30]
    assert [moved.ranks[i].num_layers for i in (0, 8)] == [28, 33]
    assert moved.ranks[0].weights_bytes < even.ranks[0].weights_bytes
    assert moved.ranks[8].weights_bytes > even.ranks[8].weights_bytes
    assert moved.ranks[8].kv_bytes_per_token * 30 == even.ranks[8].kv_bytes_per_token * 33


# --- per-rank weights and the pool -------------------------------------------------------------

def test_dense_first_layers_weigh_less_than_expert_layers():
    a, w = _deepseek()
    r = predict(a, weights_bytes=w, gpu_memory_bytes=[80 * GiB] * 16, shape=ServeShape(tp=8, pp=2, max_model_len=8192))
    assert a.num_dense_layers == 3
    by_count = (w - 2 * a.vocab_size * a.hidden_size * 2) * 31 // 61 // 8
    first_body = r.ranks[0].weights_bytes - a.vocab_size * a.hidden_size * 2 // 8
    assert first_body < by_count                          # three of stage 0's 31 layers are dense
    one = predict(a, weights_bytes=w, gpu_memory_bytes=[141 * GiB] * 8, shape=ServeShape(tp=8, max_model_len=8192))
    assert one.per_gpu.weights_bytes == w // 8            # one stage: the whole checkpoint, as before


def test_pool_is_the_minimum_over_ranks_and_reported_for_that_rank():
    a, w = _deepseek()
    r = predict(a, weights_bytes=w, gpu_memory_bytes=[80 * GiB] * 16, shape=ServeShape(tp=8, pp=2, max_model_len=8192))
    assert r.num_blocks == min(x.num_blocks for x in r.ranks) == r.per_gpu.num_blocks
    assert len({x.num_blocks for x in r.ranks[:8]}) == 1 and len({x.num_blocks for x in r.ranks[8:]}) == 1


def test_ray_keeps_v1_for_pipeline_parallel_on_0_8():
    kw = dict(requested=None, pp=2, kv_cache_dtype="auto", has_state_layers=False, spec_method=None)
    assert choose_engine((0, 8, 5), **kw).engine == "v0"
    assert choose_engine((0, 8, 5), ray=True, **kw).engine == "v1"


# --- a published two-node start-up log ---------------------------------------------------------

@pytest.mark.parametrize("figure", FIGURES, ids=[f["id"] for f in FIGURES])
def test_published_two_node_startup(figure):
    a, w = _deepseek(figure["config_fixture"])
    tp, pp = figure["tensor_parallel_size"], figure["pipeline_parallel_size"]
    total = int(figure["gpu_total_memory_gib"] * GiB)
    shape = ServeShape(tp=tp, pp=pp, mem_util=figure["gpu_memory_utilization"], max_model_len=16384,
                       vllm_version=figure["vllm_version_priced"],
                       distributed_executor_backend=figure["distributed_executor_backend"])
    r = predict(a, weights_bytes=w, gpu_memory_bytes=[total] * (tp * pp), shape=shape)
    rank = r.ranks[figure["logged_stage"] * tp]
    assert abs(rank.weights_bytes / GiB - figure["weights_gib"]) <= 0.02 * figure["weights_gib"]
    assert min(abs(rank.non_torch_bytes / GiB - x) for x in figure["non_torch_gib"]) <= 1.0
    # the activation peak depends on a max_model_len the log does not show: take the logged one
    pool = rank.budget_bytes - rank.weights_bytes - rank.non_torch_bytes - int(figure["activation_gib"] * GiB)
    assert abs(pool - figure["kv_cache_gib"] * GiB) <= r.error_band_bytes


# --- the automatic shape on several nodes (the done-when) ------------------------------

@pytest.fixture
def hub(fake_hub, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", fake_hub.url)
    fake_hub.add_fixture("microsoft--phi-4")
    return fake_hub


def _fits(capsys, *argv):
    code = main(["fits", *argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_deepseek_v3_on_two_h100_nodes_is_tp8_pp2(hub, capsys):
    add_deepseek_v3_layout(hub)
    code, doc = _fits(capsys, "deepseek-ai/DeepSeek-V3", "--gpus", "2x(8xH100)")
    row = doc["models"][0]
    assert code == 0 and doc["summary"] == "FITS"
    # the rig as values, never a command-line fragment (issue 27 item 2)
    gpus = doc["gpus"]
    assert (gpus["spec"], gpus["nodes"], gpus["gpus_per_node"], gpus["interconnect"]) == \
        ("2x(8xH100)", 2, 8, "ethernet-10g") and gpus["interconnect_assumed"] is True
    assert not any(isinstance(v, str) and "--" in v for v in gpus.values()), gpus
    assert (row["tensor_parallel_size"], row["pipeline_parallel_size"]) == (8, 2)
    assert row["shape"]["nodes"] == 2 and row["shape"]["gpus_per_node"] == 8
    assert row["shape"]["reason"].startswith("one node of 8 GPU(s) does not fit")
    worst = row["worst_rank"]
    assert worst["node"] in (1, 2) and worst["stages"] == 2 and worst["layers"] in (30, 31)
    # 1-based in JSON as in the text: the rank sits on its node and in its stage
    assert 1 <= worst["rank"] <= 16 and worst["node"] == (worst["rank"] - 1) // 8 + 1
    assert worst["stage"] == (worst["rank"] - 1) // 8 + 1
    assert 0 < worst["kv_pool_bytes"] < worst["budget_bytes"] <= worst["gpu_memory_bytes"]
    assert row["max_model_len"] > 0 and row["max_concurrency"] >= 1
    assert "PP 2 crosses 1 node boundary over ethernet-10g" in row["shape"]["advisories"][0]
    # the layout's config declares auto_map (as DeepSeek-V3's does): `up` needs the ack, so the hint has it
    assert row["serve"] == ("club3090 up deepseek-ai/DeepSeek-V3 --gpus '2x(8xH100)' --launcher ray "
                            "--trust-remote-code --dir run/")
    assert any("2 nodes over ethernet-10g (assumed" in a for a in row["speed"]["assumptions"])
    assert main(["fits", "deepseek-ai/DeepSeek-V3", "--nodes", "2", "--gpus", "8xH100",
                 "--interconnect", "infiniband"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("deepseek-ai/DeepSeek-V3: fits on 2 nodes of 8x H100 80GB HBM3, infiniband (TP 8 x PP 2")
    assert any(line.startswith("per GPU: worst rank ") and ("+ LM head" in line or "+ embeddings" in line)
               for line in out)
    assert any(line.startswith("note: PP 2 crosses 1 node boundary over infiniband") for line in out)


def test_one_node_first(hub, capsys):
    code, doc = _fits(capsys, "microsoft/phi-4", "--gpus", "2x(2x3090)")
    row = doc["models"][0]
    assert code == 0 and row["tensor_parallel_size"] * row["pipeline_parallel_size"] <= 2
    assert row["shape"]["nodes"] == 1 and row["shape"]["advisories"] == []
    assert row["serve"] == "club3090 up microsoft/phi-4 --gpus 2x3090 --dir run/"     # one machine's command
    main(["fits", "microsoft/phi-4", "--nodes", "2", "--gpus", "2x3090", "--interconnect", "infiniband"])
    out = capsys.readouterr().out
    assert "serve: club3090 up microsoft/phi-4 --gpus 2x3090 --dir run/" in out and "per GPU:" not in out


def test_kv_calc_across_nodes_states_the_link(hub, capsys):
    assert main(["kv-calc", "microsoft/phi-4", "--gpus", "2x(2x3090)", "-tp", "2", "-pp", "2", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["tp"], doc["pp"], doc["nodes"], doc["gpus_per_node"]) == (2, 2, 2, 2)
    assert any("PP 2 crosses 1 node boundary over ethernet-10g" in n for n in doc["notes"])
    assert main(["kv-calc", "microsoft/phi-4", "--gpus", "2x(1x3090)", "-tp", "2", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert any(n.startswith("TP 2 spans nodes over ethernet-10g: discouraged") for n in doc["notes"])


def test_pull_prices_a_multi_node_shape_and_writes_nothing(hub, capsys, tmp_path):
    out = tmp_path / "compose.yml"
    code = main(["pull", "microsoft/phi-4", "--gpus", "2x(1x3090)", "-tp", "1", "-pp", "2", "--out", str(out),
                 "--yes", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert "multi-node-shape" in doc["notice_codes"] and not out.exists()
    assert code == 0 and doc["raw_verdict"] != "wont-fit" and doc["emitted"] is False
    one = main(["pull", "microsoft/phi-4", "--gpus", "2x(1x3090)", "-tp", "1", "--dry-run", "--json"])
    doc = json.loads(capsys.readouterr().out)
    # a dry run's no-fit exits 2, as `fits` does (docs/DESIGN.md §16)
    assert one == 2 and doc["raw_verdict"] == "wont-fit" and "multi-node-shape" not in doc["notice_codes"]


def test_speed_pays_the_node_hop():
    from club3090.catalog import load_catalog
    from club3090.rig.gpus import parse_gpus

    a, w = _deepseek()
    cat = load_catalog()
    shape = ServeShape(tp=8, pp=2)
    box = estimate_speed(a, w, shape, parse_gpus("16xH100", cat))
    slow = estimate_speed(a, w, shape, parse_gpus("2x(8xH100)", cat))
    fast = estimate_speed(a, w, shape, parse_gpus("2x(8xH100)", cat, interconnect="infiniband"))
    assert box is not None and slow is not None and fast is not None
    assert slow.decode_tps < fast.decode_tps < box.decode_tps
    assert slow.band_low < slow.decode_tps < slow.band_high
