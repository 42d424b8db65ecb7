"""`club3090 fits`: the plain will-it-fit question (exit 0 / 2) and the catalog ranked for a rig."""

from __future__ import annotations

import json

import pytest

from club3090.catalog import load_catalog
from club3090.cli import main


def _json(capsys, *argv):
    code = main(["fits", *argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_ranking_lists_every_catalog_model_with_shape_context_and_command(capsys):
    code, doc = _json(capsys, "--gpus", "1x3090")
    rows = doc["models"]
    assert {r["model"] for r in rows} == set(load_catalog().models)
    fitting = [r for r in rows if r["fits"]]
    assert fitting and code == 0
    assert rows[:len(fitting)] == fitting                       # fits first
    contexts = [r["max_model_len"] or _gguf_context(r) for r in fitting]
    assert contexts == sorted(contexts, reverse=True)           # then the most context
    for r in fitting:
        if r["gguf"] is not None:                               # a GGUF default, priced for llama.cpp offline
            assert r["serve"].startswith("llama-server -hf ") and r["confidence"] == "estimated"
            continue
        assert r["serve"].startswith("club3090 up ") and "--gpus 1x3090" in r["serve"]
        assert r["tensor_parallel_size"] == 1 and r["max_concurrency"] >= 1 and r["confidence"]
    qwen = next(r for r in rows if r["model"] == "qwen3.6-27b")
    assert qwen["profile"] == "vllm/minimal" and qwen["shape_source"] == "curated-default"
    assert qwen["serve"] == "club3090 up Lorbus/Qwen3.6-27B-int4-AutoRound --profile-like vllm/minimal " \
                           "--gpus 1x3090 --dir run/"


def _gguf_context(row):
    best = next(q for q in row["gguf"]["quants"] if q["quant"] == row["gguf"]["best"])
    return best["max_ctx_full_gpu"] if best["fits_fully"] else best["offload"]["max_ctx"]


def test_ranking_human_output(capsys):
    assert main(["fits", "--gpus", "2x3090"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("On 2x RTX 3090: ") and "models fit" in out[0]
    assert out[1].startswith(" 1. ") and " fits " in out[1]
    assert any("fits (TP 2" in line for line in out)
    assert any(line.strip().startswith("serve: club3090 up ") for line in out)


def test_two_gpus_use_the_dual_profile(capsys):
    _, doc = _json(capsys, "--gpus", "2x3090")
    qwen = next(r for r in doc["models"] if r["model"] == "qwen3.6-27b")
    assert qwen["profile"] == "vllm/dual" and qwen["tensor_parallel_size"] == 2


@pytest.fixture
def hub(fake_hub, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", fake_hub.url)
    fake_hub.add_fixture("microsoft--phi-4")
    return fake_hub


def test_one_model_fits_exits_0(hub, capsys):
    code, doc = _json(capsys, "microsoft/phi-4", "--gpus", "2x3090")
    assert code == 0 and doc["summary"] == "FITS"
    row = doc["models"][0]
    assert row["tensor_parallel_size"] == 2
    assert row["serve"] == "club3090 up microsoft/phi-4 --gpus 2x3090 --dir run/"
    assert main(["fits", "microsoft/phi-4", "--gpus", "2x3090"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("microsoft/phi-4: fits on 2x RTX 3090 (TP 2") and "16K context" in first


def test_one_model_does_not_fit_exits_2(hub, capsys):
    code, doc = _json(capsys, "microsoft/phi-4", "--gpus", "1x3090")
    assert code == 2 and doc["summary"] == "DOES NOT FIT"
    assert main(["fits", "microsoft/phi-4", "--gpus", "1x3090"]) == 2
    assert "does not fit on 1x RTX 3090" in capsys.readouterr().out


def test_min_context_raises_the_bar(hub, capsys):
    code, doc = _json(capsys, "microsoft/phi-4", "--gpus", "2x3090", "--min-context", "100000")
    assert code == 2 and doc["models"][0]["fits"] is False


def test_no_gpu_named_or_detected_says_how_to_name_them(capsys):
    code, doc = _json(capsys)
    assert code == 2 and doc["reason"] == "hardware-sm-undetermined" and doc["summary"] == "STOPPED"
    assert main(["fits"]) == 2
    out = capsys.readouterr().out
    assert "--gpus" in out and "DOES NOT FIT" not in out


def test_every_fitting_row_carries_a_labelled_speed_estimate(capsys):
    code, doc = _json(capsys, "--gpus", "1x3090")
    fitting = [r for r in doc["models"] if r["fits"]]
    assert code == 0 and fitting
    for r in fitting:
        speed = r["speed"]
        assert speed["label"] == "estimated" and speed["decode_tps"] > 0 and speed["ttft_s"] > 0
        low, high = speed["decode_band_tps"]
        assert low < speed["decode_tps"] < high
    assert all(r["speed"] is None for r in doc["models"] if not r["fits"])
    main(["fits", "--gpus", "1x3090"])
    assert "tok/s decode" in capsys.readouterr().out


def test_a_size_only_rig_has_no_speed_to_estimate(capsys):
    _, doc = _json(capsys, "--gpus", "1x24GiB")
    assert all(r.get("speed") is None for r in doc.get("models", []))


def test_vllm_version_prices_the_release_the_user_names(hub, capsys):
    """``--vllm-version`` (the shared shape flag of kv-calc, fits and pull) replaces the catalog's pin."""
    _code, pinned = _json(capsys, "microsoft/phi-4", "--gpus", "2x3090")
    _code, named = _json(capsys, "microsoft/phi-4", "--gpus", "2x3090", "--vllm-version", "0.16.0")
    # 0.16 captures CUDA graphs outside the budget and defaults to util 0.90 (the pin: 0.21 on, 0.92)
    assert pinned["models"][0]["worst_rank"]["cudagraph_bytes"] > 0
    assert named["models"][0]["worst_rank"]["cudagraph_bytes"] == 0
    assert named["models"][0]["shape"]["chosen"]["gpu_memory_utilization"] == 0.9
    with pytest.raises(SystemExit) as exc:
        main(["fits", "microsoft/phi-4", "--gpus", "2x3090", "--vllm-version", "nightly"])
    assert exc.value.code == 64
