"""`pull` keeps refusing llama.cpp work (the seed's gate) and names the command that handles it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from club3090 import cli
from tests.gguf_fixtures import Spec, write
from tests.providers import plenty_of_disk

CURATED = "Lorbus/Qwen3.6-27B-int4-AutoRound"


def main(argv: list[str]) -> int:
    return cli.main(argv, provider=plenty_of_disk)


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def test_llamacpp_profile_like_names_kv_calc(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["pull", CURATED, "--profile-like", "llamacpp/default", "--gpus", "1x3090", "--json"]) == 2
    doc = json.loads(capsys.readouterr().out)
    assert doc["reason"] == "unsupported-runtime-engine"
    assert "club3090 kv-calc llamacpp/default" in json.dumps(doc)
    assert "club3090 up llamacpp/default --dir DIR" in json.dumps(doc)


def test_gguf_only_repo_names_kv_calc(fake_hub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
                                      capsys: pytest.CaptureFixture[str]) -> None:
    (p,) = write(tmp_path / "m", "Tiny-Q8_0", Spec())
    fake_hub.add_repo("org/Tiny-GGUF", {p.name: p.read_bytes(), "config.json": b"{}"})
    monkeypatch.setenv("HF_ENDPOINT", fake_hub.url)
    assert main(["pull", "org/Tiny-GGUF", "--profile-like", "vllm/minimal", "--gpus", "1x3090", "--verbose"]) == 2
    out = capsys.readouterr().out
    assert "reason=unsupported-format" in out
    assert "club3090 kv-calc org/Tiny-GGUF --quant QUANT" in out
    assert "club3090 up org/Tiny-GGUF --quant QUANT --dir DIR" in out
