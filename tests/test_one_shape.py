"""Issue 27: one shape, one answer. ``kv-calc``, ``fits`` and ``pull --dry-run`` price the same
shape (or kv-calc says first why it does not); the headline concurrency is what the server serves,
with the KV room said apart; no command assumes a card it was not told about."""

from __future__ import annotations

import json
import re

import pytest

from club3090.catalog import load_catalog
from club3090.cli import main

REPO = "Qwen/Qwen3-8B"


@pytest.fixture
def hub(fake_hub, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", fake_hub.url)
    fake_hub.add_fixture("Qwen--Qwen3-8B")
    return fake_hub


def _json(capsys, *argv):
    code = main([*argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_kv_calc_fits_and_pull_agree_on_qwen3_8b(hub, capsys):
    _, kv = _json(capsys, "kv-calc", REPO, "--gpus", "1x3090")
    _, fits = _json(capsys, "fits", REPO, "--gpus", "1x3090")
    _, pull = _json(capsys, "pull", REPO, "--gpus", "1x3090", "--dry-run")
    row = fits["models"][0]
    assert kv["shape_note"] is None                       # the automatic shape, nothing to explain
    assert kv["max_model_len"] == row["max_model_len"] == pull["fit"]["max_model_len"]
    assert kv["raw_verdict"] == row["raw_verdict"] == pull["raw_verdict"]
    assert kv["settings"]["kv_cache_dtype"] == row["kv_cache_dtype"]
    assert kv["tp"] == row["tensor_parallel_size"]
    main(["kv-calc", REPO, "--gpus", "1x3090"])
    first = capsys.readouterr().out.splitlines()[0]
    main(["fits", REPO, "--gpus", "1x3090"])
    fits_first = capsys.readouterr().out.splitlines()[0]
    said = [re.search(r"(\S+) context", line).group(1) for line in (first, fits_first)]  # type: ignore[union-attr]
    assert first.startswith("Fits on ") and said[0] == said[1] == "40K"


def test_kv_calc_says_first_when_it_prices_another_shape(hub, capsys):
    main(["kv-calc", REPO, "--gpus", "1x3090", "--block-size", "32"])
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("shape: vLLM's defaults") and "--block-size" in first and "fits" in first


def test_concurrency_is_what_the_profile_serves_with_the_kv_room_apart(capsys):
    argv = ["pull", "Lorbus/Qwen3.6-27B-int4-AutoRound", "--profile-like", "vllm/minimal", "--gpus", "1x3090",
            "--dry-run"]
    assert load_catalog().profiles["vllm/minimal"].max_num_seqs == 1
    main(argv)
    first = capsys.readouterr().out.splitlines()[0]
    assert "1 concurrent full-length request" in first and "this profile serves 1 at a time" in first
    assert "KV room for " in first
    room = int(first.split("KV room for ", 1)[1].split(";")[0])
    assert room >= 1
    _, doc = _json(capsys, *argv)
    assert int(doc["fit"]["max_concurrency"]) == room       # the pool's room, named apart from what is served
    _, kv = _json(capsys, "kv-calc", "Lorbus/Qwen3.6-27B-int4-AutoRound", "--profile", "vllm/minimal",
                  "--gpus", "1x3090")
    assert kv["concurrent_requests"] == 1 and int(kv["max_concurrency"]) >= 1


def test_no_gpus_asks_in_kv_calc_as_in_fits_and_pull(hub, capsys):
    code, kv = _json(capsys, "kv-calc", REPO)
    assert code == 2 and kv["reason"] == "hardware-vram-undetermined" and "--gpus" in kv["message"]
    code, fits = _json(capsys, "fits", REPO)
    assert code == 2 and "--gpus" in fits["detail"]


def test_a_profile_without_gpus_names_its_reference_card(capsys):
    code, kv = _json(capsys, "kv-calc", "vllm/minimal")
    assert code == 0 and "reference card" in kv["rig_note"] and "--gpus" in kv["rig_note"]


def test_the_curated_profile_is_the_default_only_on_cards_of_its_memory(capsys):
    _, small = _json(capsys, "fits", "qwen3.6-27b", "--gpus", "1x3090")
    _, big = _json(capsys, "fits", "qwen3.6-27b", "--gpus", "1xH100-80GB")
    assert small["models"][0]["shape_source"] == "curated-default"
    assert big["models"][0]["shape_source"] == "derived"
    assert big["models"][0]["max_model_len"] > small["models"][0]["max_model_len"]


def test_one_model_maximum_rule_for_rope_scaled_models():
    """vLLM's rule (``_get_and_verify_max_len``): yarn scales ``original_max_position_embeddings``
    by its factor. The automatic shape, vLLM's settings and the gate's cap all ask model_max_len."""
    from pathlib import Path

    from club3090.model.architecture import parse_config
    from club3090.model.context import model_max_len

    cfg = json.loads((Path(__file__).parent / "fixtures" / "hub" / "Qwen--Qwen3-8B" / "config.json").read_text())
    cfg["rope_scaling"] = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
    arch = parse_config(cfg)
    assert arch.max_position_embeddings == 40960 and model_max_len(arch) == 131072
    src = Path(__file__).resolve().parents[1] / "src" / "club3090"
    rule = re.compile(r"derived_max_model_len or \S*max_position_embeddings")
    rules = sorted(str(p.relative_to(src)) for p in src.rglob("*.py") if rule.search(p.read_text(encoding="utf-8")))
    assert rules == ["model/context.py"]
    users = {str(p.relative_to(src)) for p in src.rglob("*.py") if "model_max_len(" in p.read_text(encoding="utf-8")}
    assert {"fit/auto_shape.py", "fit/serve_settings.py", "pipeline/pull_gate.py"} <= users
