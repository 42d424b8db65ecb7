"""The automatic serving shape (issue 11): pull and kv-calc without --profile-like / --profile,
vLLM's flag names, trust-remote-code from the repo's own evidence, and readable answers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from club3090.cli import main


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("CLUB3090_CAPTURES", raising=False)


@pytest.fixture
def hub(fake_hub, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", fake_hub.url)
    return fake_hub


def _json(capsys, *argv):
    code = main([*argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_pull_phi4_on_two_3090s_chooses_tp2_and_fits(hub, capsys):
    hub.add_fixture("microsoft--phi-4")
    code, out = _json(capsys, "pull", "microsoft/phi-4", "--gpus", "2x3090", "--dry-run")
    assert code == 0, out
    assert out["shape_source"] == "derived"
    chosen = out["shape"]["chosen"]
    assert chosen["tensor_parallel_size"] == 2 and chosen["pipeline_parallel_size"] == 1
    assert out["raw_verdict"] in ("fits-clean", "fits-constrained")
    assert out["summary"] != "DOES NOT FIT"
    assert "fewest GPUs" in out["shape"]["reason"]
    code = main(["pull", "microsoft/phi-4", "--gpus", "2x3090", "--dry-run"])
    text = capsys.readouterr().out
    assert code == 0
    first = text.splitlines()[0]
    assert first.startswith("Fits") and "TP 2" in first and "ABORT" not in text


def test_pull_phi4_on_one_3090_does_not_fit(hub, capsys):
    hub.add_fixture("microsoft--phi-4")
    code, out = _json(capsys, "pull", "microsoft/phi-4", "--gpus", "1x3090", "--dry-run")
    assert out["raw_verdict"] == "wont-fit" and out["summary"] == "DOES NOT FIT"
    assert code == 3
    main(["pull", "microsoft/phi-4", "--gpus", "1x3090", "--dry-run"])
    text = capsys.readouterr().out
    assert text.splitlines()[0].startswith("Does not fit")
    assert "terminal=override-accepted" not in text


def test_pull_tp_flag_pins_the_shape(hub, capsys):
    hub.add_fixture("microsoft--phi-4")
    code, out = _json(capsys, "pull", "microsoft/phi-4", "--gpus", "4x3090", "--dry-run")
    assert out["shape"]["chosen"]["tensor_parallel_size"] == 2 and code == 0      # the fewest that fit
    code, out = _json(capsys, "pull", "microsoft/phi-4", "--gpus", "4x3090", "--dry-run", "--tensor-parallel-size",
                      "2", "--gpu-memory-utilization", "0.9", "--max-model-len", "8192", "--kv-cache-dtype", "fp8")
    chosen = out["shape"]["chosen"]
    assert (chosen["tensor_parallel_size"], chosen["max_model_len"], chosen["kv_cache_dtype"]) == (2, 8192, "fp8_e4m3")
    assert chosen["gpu_memory_utilization"] == pytest.approx(0.9) and code == 0
    code, out = _json(capsys, "pull", "microsoft/phi-4", "--gpus", "4x3090", "--dry-run", "-tp", "4")
    assert code == 2 and "10 KV heads" in out["detail"]          # phi-4's 10 KV heads do not split 4 ways


def test_pull_without_gpus_says_how_to_name_them(hub, capsys):
    hub.add_fixture("microsoft--phi-4")
    code, out = _json(capsys, "pull", "microsoft/phi-4", "--dry-run")
    assert code == 2 and out["reason"] == "hardware-sm-undetermined"
    assert out["summary"] != "DOES NOT FIT"
    assert "--gpus" in out["detail"]
    main(["pull", "microsoft/phi-4", "--dry-run"])
    text = capsys.readouterr().out
    assert text.startswith("Cannot tell which GPUs to price") and "--submit-last" not in text


def test_kv_calc_prices_tp2_on_two_4090s(hub, capsys):
    hub.add_fixture("microsoft--phi-4")
    code, out = _json(capsys, "kv-calc", "microsoft/phi-4", "--gpus", "2x4090")
    assert out["tp"] == 2 and code == 0
    assert out["raw_verdict"] != "wont-fit"


def test_kv_calc_takes_vllm_flag_names(hub, capsys):
    hub.add_fixture("microsoft--phi-4")
    code, out = _json(capsys, "kv-calc", "microsoft/phi-4", "--gpus", "2x4090", "-tp", "2",
                      "--gpu-memory-utilization", "0.9")
    assert code == 0 and out["tp"] == 2
    assert out["settings"]["mem_util"] == pytest.approx(0.9)
    code, out = _json(capsys, "kv-calc", "microsoft/phi-4", "--gpus", "2x4090", "--tensor-parallel-size", "2",
                      "--max-model-len", "auto")
    assert code == 0 and out["max_model_len"] == out["max_model_len_fit"]


def test_kv_calc_profile_typo_gets_did_you_mean_without_the_hub(hub, capsys):
    assert main(["kv-calc", "vllm/minimla"]) == 64
    err = capsys.readouterr().err
    assert "did you mean 'vllm/minimal'" in err
    assert not hub.requests()


def test_pull_unknown_profile_like_gets_did_you_mean_and_no_report_offer(capsys):
    code = main(["pull", "Lorbus/Qwen3.6-27B-int4-AutoRound", "--profile-like", "vllm/minimla", "--gpus", "1x3090"])
    text = capsys.readouterr().out
    assert code == 2
    assert "did you mean 'vllm/minimal'" in text
    assert "DOES NOT FIT" not in text and "--submit-last" not in text


def test_curated_repo_gets_its_curated_profile(capsys):
    code, out = _json(capsys, "pull", "Lorbus/Qwen3.6-27B-int4-AutoRound", "--gpus", "2x3090", "--dry-run")
    assert out["profile_like"] == "vllm/dual" and out["shape_source"] == "curated-default"
    code, out = _json(capsys, "pull", "Lorbus/Qwen3.6-27B-int4-AutoRound", "--gpus", "1x3090", "--dry-run")
    assert out["profile_like"] == "vllm/minimal" and code == 0


def test_llama_without_code_needs_no_trust_remote_code(hub, capsys):
    hub.add_fixture("meta-llama--Llama-3.1-8B")
    code, out = _json(capsys, "pull", "meta-llama/Llama-3.1-8B", "--profile-like", "vllm/minimal",
                      "--gpus", "1x3090")
    assert out["stratum"] != 3, out["reason"]
    assert code == 3 and out["reason"] == "confirm→proceed:needs --yes"     # on to [C1], no ack needed
    assert out["c0"]["state"] == "engine-supported"
    assert "trust-remote-code-not-needed" in out["notice_codes"]
    note = next(n for n in out["notices"] if "auto_map" in n)
    assert ".py" in note


def test_llama_with_auto_map_still_needs_the_ack(hub, capsys):
    cfg = json.loads((Path(__file__).parent / "fixtures/hub/meta-llama--Llama-3.1-8B/config.json").read_text())
    cfg["auto_map"] = {"AutoModelForCausalLM": "modeling_x.LlamaX"}
    hub.add_fixture("meta-llama--Llama-3.1-8B", extra_files={"config.json": json.dumps(cfg).encode()})
    code, out = _json(capsys, "pull", "meta-llama/Llama-3.1-8B", "--profile-like", "vllm/minimal",
                      "--gpus", "1x3090")
    assert code == 2 and out["reason"] == "needs-trust-remote-code-ack"


def test_capture_bundles_go_to_the_state_folder(capsys, tmp_path, monkeypatch):
    argv = ["pull", "Lorbus/Qwen3.6-27B-int4-AutoRound", "--profile-like", "vllm/minimal", "--gpus", "1x16GiB",
            "--hardware", "8.6"]
    monkeypatch.setenv("CLUB3090_STATE_DIR", str(tmp_path / "own-state"))   # the one state folder rule
    code, out = _json(capsys, *argv)
    assert code == 2 and out["reason"] == "hard-block"
    assert Path(out["bundle"]).is_relative_to(tmp_path / "own-state" / "pull-captures")
    monkeypatch.delenv("CLUB3090_STATE_DIR")
    code, out = _json(capsys, *argv)
    assert Path(out["bundle"]).is_relative_to(tmp_path / "state" / "club3090" / "pull-captures")
    assert not (tmp_path / ".pull-captures").exists()
    monkeypatch.setenv("CLUB3090_CAPTURES", str(tmp_path / "elsewhere"))
    code, out = _json(capsys, *argv)
    assert Path(out["bundle"]).is_relative_to(tmp_path / "elsewhere")
    code, out = _json(capsys, *argv, "--captures-dir", ".pull-captures")
    assert Path(out["bundle"]).is_relative_to(tmp_path / ".pull-captures")
    manifest = next(Path(out["bundle"]).iterdir())
    assert manifest.stat().st_mode & 0o044      # the umask's mode, not 0600
