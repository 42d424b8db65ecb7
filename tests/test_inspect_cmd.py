"""`club3090 inspect` end to end: JSON keys, exit codes, stderr progress, no token leaks."""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path
from typing import Any

import pytest

from club3090 import cli
from club3090.edges import hub as H
from tests.fakehub import FakeHub, safetensors_file

REQUIRED_KEYS = {"architecture", "model_type", "num_hidden_layers", "num_key_value_heads", "head_dim",
                 "weights_bytes", "dtype_bytes", "quantization", "requires_trust_remote_code",
                 "footprint_bytes", "source", "confidence"}


@pytest.fixture(autouse=True)
def _endpoint(fake_hub: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_ENDPOINT", fake_hub.url)
    monkeypatch.setattr(H, "DEFAULT_BACKOFF_S", 0.0)


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(["inspect", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_json_for_a_dense_repo(fake_hub: FakeHub, capsys: pytest.CaptureFixture[str]) -> None:
    fake_hub.add_fixture("meta-llama--Llama-3.1-8B")
    code, out, err = _run(capsys, "meta-llama/Llama-3.1-8B", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert set(data) >= REQUIRED_KEYS
    assert data["architecture"] == "LlamaForCausalLM" and data["num_key_value_heads"] == 8
    assert data["weights_bytes"] == 16_060_522_496 and data["source"] == "hub"
    assert data["confidence"] == "estimated-lower-bound" and data["quantization"] is None
    # progress goes to stderr only: stdout is the one JSON line; stderr reports the 4 headers read
    assert len(out.strip().splitlines()) == 1 and len(data["weight_files"]) == 4
    assert err.strip() and "4" in err.split()


def test_human_summary(fake_hub: FakeHub, capsys: pytest.CaptureFixture[str]) -> None:
    fake_hub.add_fixture("mistralai--Mistral-7B-v0.1", tensors={"model.norm.weight": ("BF16", [4096])})
    code, out, _ = _run(capsys, "mistralai/Mistral-7B-v0.1", "--json")
    data = json.loads(out)
    code, out, _ = _run(capsys, "mistralai/Mistral-7B-v0.1")
    assert code == 0
    rows = dict(re.split(r"\s{2,}", line.strip(), maxsplit=1) for line in out.splitlines() if line.strip())
    assert rows["architecture"].split()[0] == data["architecture"] == "MistralForCausalLM"
    assert rows["sliding window"] == str(data["sliding_window"]) == "4096"
    assert rows["download footprint"] == f"{data['footprint_bytes'] / 2**30:.2f} GiB"


def _gguf(hub: FakeHub) -> str:
    hub.add_repo("TheBloke/Llama-2-7B-GGUF", {"llama-2-7b.Q4_K_M.gguf": b"GGUF" + bytes(28)})
    return "TheBloke/Llama-2-7B-GGUF"


def _gated(hub: FakeHub) -> str:
    hub.add_fixture("meta-llama--Llama-3.1-8B", gated=True)
    return "meta-llama/Llama-3.1-8B"


def _ambiguous(hub: FakeHub) -> str:
    hub.add_fixture("mistralai--Mistral-7B-v0.1", tensors={"x": ("BF16", [4])},
                    extra_files={"consolidated.safetensors": safetensors_file("c", {"x": ("BF16", [4])})})
    return "mistralai/Mistral-7B-v0.1"


def _malformed(hub: FakeHub) -> str:
    hub.add_fixture("Qwen--Qwen3-0.6B", tensors={"x": ("BF16", [4])}, extra_files={"config.json": b"{]"})
    return "Qwen/Qwen3-0.6B"


@pytest.mark.parametrize("make,reason", [
    (lambda hub: "nobody/nothing", "repo-not-found"),
    (_gated, "gated-no-token"),
    (_gguf, "unsupported-format"),
    (_ambiguous, "ambiguous-weight-set"),
    (_malformed, "quant-dtype-unknown"),
])
def test_stratum_one_exits_2_with_the_token(fake_hub: FakeHub, capsys: pytest.CaptureFixture[str],
                                            make: Any, reason: str) -> None:
    source = make(fake_hub)
    code, out, err = _run(capsys, source, "--json")
    assert code == 2, err
    data = json.loads(out)
    assert data["stratum"] == 1 and data["reason"] == reason and data["detail"]
    code, out, _ = _run(capsys, source)
    assert code == 2 and reason in out


def test_gguf_stop_names_files_and_llama_cpp(fake_hub: FakeHub, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, _gguf(fake_hub), "--json")
    data = json.loads(out)
    assert (code, data["detail"], data["gguf_files"]) == (2, "gguf-only", ["llama-2-7b.Q4_K_M.gguf"])
    assert "llama.cpp" in data["hint"]


def test_unreachable_hub_exits_69_without_traceback(fake_hub: FakeHub, capsys: pytest.CaptureFixture[str]) -> None:
    fake_hub.fault("500", "/api/models/", times=None)
    code, out, err = _run(capsys, "acme/anything", "--json")
    assert code == 69
    data = json.loads(out)
    assert data["ok"] is False and data["exit_code"] == 69 and data["error"]
    assert "Traceback" not in err + out
    assert len(fake_hub.requests(path_contains="/api/models/")) >= 4  # retried before giving up


def test_malformed_header_exits_65_naming_the_file(fake_hub: FakeHub, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.fakehub import FakeFile

    raw = b"{broken"
    bad = FakeFile("model.safetensors", len(raw).to_bytes(8, "little") + raw, size=64, lfs=True)
    fake_hub.add_fixture("Qwen--Qwen3-0.6B", tensors={"x": ("BF16", [4])}, extra_files={"model.safetensors": bad})
    code, _out, err = _run(capsys, "Qwen/Qwen3-0.6B")
    assert code == 65 and "Qwen/Qwen3-0.6B/model.safetensors" in err and "Traceback" not in err


def test_curated_hit_from_the_shipped_catalog(fake_hub: FakeHub, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "NVIDIA/qwen3.6-35b-a3b-nvfp4", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["confidence"] == "exact" and data["source"] == "catalog" and data["curated"]
    assert fake_hub.log == []


def test_offline_cache_with_hf_home_flag(fake_hub: FakeHub, capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from huggingface_hub import snapshot_download

    fake_hub.add_fixture("Qwen--Qwen3-0.6B", tensors={"model.norm.weight": ("BF16", [1024])})
    home = tmp_path / "elsewhere"
    snapshot_download("Qwen/Qwen3-0.6B", cache_dir=str(home / "hub"), endpoint=fake_hub.url, token=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, out, err = _run(capsys, "Qwen/Qwen3-0.6B", "--json", "--hf-home", str(home))
    assert code == 0, err
    assert json.loads(out)["source"] == "cache"
    sent = len(fake_hub.log)
    code, out, err = _run(capsys, "Qwen/Qwen3-0.6B", "--json")  # default HF_HOME: not cached
    assert code == 69 and json.loads(out)["exit_code"] == 69
    assert len(fake_hub.log) == sent  # offline: the miss sent nothing to the Hub


def test_local_folder(fake_hub: FakeHub, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    repo = fake_hub.add_fixture("google--gemma-2-2b-it", tensors={"model.norm.weight": ("BF16", [2304])})
    for f in repo.files.values():
        (tmp_path / f.name).write_bytes(b"".join(f.chunks(0, f.size - 1)))
    code, out, err = _run(capsys, str(tmp_path), "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["source"] == "local" and data["sliding_window"] == 4096 and data["weights_bytes"] == 2304 * 2
    assert fake_hub.log == []


def test_hf_token_never_appears_anywhere(fake_hub: FakeHub, capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
                                         tmp_path: Path) -> None:
    token = "hf_PlantedSecret_9f8e7d6c5b4a"
    monkeypatch.setenv("HF_TOKEN", token)
    caplog.set_level(logging.DEBUG)
    fake_hub.add_fixture("meta-llama--Llama-3.1-8B", gated=True)
    fake_hub.accept_token(token)
    outputs = []
    for argv in (["meta-llama/Llama-3.1-8B", "--json"], ["meta-llama/Llama-3.1-8B"],
                 ["nobody/nothing", "--json"], ["--debug", "meta-llama/Llama-3.1-8B", "--json"]):
        if argv[0] == "--debug":
            code = cli.main(["--debug", "inspect", *argv[1:]])
            out, err = capsys.readouterr()
        else:
            code, out, err = _run(capsys, *argv)
        assert code in (0, 2)
        outputs += [out, err]
    fake_hub.fault("500", "/api/models/", times=None)
    code, out, err = _run(capsys, "meta-llama/Llama-3.1-8B", "--json")
    assert code == 69
    outputs += [out, err, caplog.text]
    # the token was really used (the gated repo resolved), yet shows up nowhere
    assert any(r.headers.get("authorization") == f"Bearer {token}" for r in fake_hub.log)
    assert all(token not in text for text in outputs)
    for root in {Path(os.environ["HF_HOME"]), tmp_path}:
        for path in root.rglob("*"):
            if path.is_file():
                assert token.encode() not in path.read_bytes(), path
