"""tools/refresh_index.py against the loopback fake Hub (real huggingface_hub client): configs and
real file sizes per variant come back with their source; a missing repository is reported, not fatal."""

from __future__ import annotations

import importlib.util
import json

import yaml

from club3090.catalog.open_index import load_open_index
from club3090.model.architecture import parse_config
from tests.fakehub import FakeFile
from tests.fixtures_path import FIXTURES

ROOT = FIXTURES.parent.parent


def tool():
    spec = importlib.util.spec_from_file_location("refresh_index", ROOT / "tools" / "refresh_index.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


INDEX = {
    "schema_version": 1,
    "gguf_quants": {"Q4_K_M": {"bits_per_weight": 4.89, "ppl_delta": 0.1754, "source": "test"}},
    "models": {
        "qwen3-8b": {
            "repo": "Qwen/Qwen3-8B", "tasks": ["chat"], "geometry": "llmfit-geometry", "config_source": "test",
            "config": {"model_type": "qwen3", "num_hidden_layers": 36, "hidden_size": 4096},
            "missing": ["license", "sliding-window and hybrid-layer layout (every layer priced as full attention)"],
            "variants": [
                {"id": "bf16", "format": "safetensors", "repo": "Qwen/Qwen3-8B", "bits_per_weight": 16},
                {"id": "fp8", "format": "safetensors", "repo": "Qwen/Qwen3-8B-FP8",
                 "quantization": {"quant_method": "fp8"}},
                {"id": "gguf", "format": "gguf", "repos": ["someone/Qwen3-8B-GGUF"]},
            ]},
        "gone": {
            "repo": "nobody/gone", "tasks": ["chat"], "geometry": "config", "config_source": "test",
            "config": {"model_type": "llama"},
            "variants": [{"id": "bf16", "format": "safetensors", "repo": "nobody/gone", "bits_per_weight": 16}]},
    },
}


def test_refresh_reads_configs_and_real_sizes_from_the_hub(fake_hub, monkeypatch, tmp_path, capsys):
    fake_hub.add_fixture("Qwen--Qwen3-8B")
    fake_hub.add_fixture("Qwen--Qwen3-8B-FP8")
    gguf = {"Qwen3-8B-Q4_K_M.gguf": 5_027_783_488, "Qwen3-8B-Q8_0.gguf": 8_709_518_624}
    fake_hub.add_repo("someone/Qwen3-8B-GGUF", {
        name: FakeFile(name=name, prefix=b"GGUF", size=size, lfs=True) for name, size in gguf.items()})
    monkeypatch.setenv("HF_ENDPOINT", fake_hub.url)
    path = tmp_path / "open_models.yaml"
    path.write_text(yaml.safe_dump(INDEX, sort_keys=False))

    assert tool().main(["--index", str(path), "--write", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert set(report["changed"]) == {"qwen3-8b"} and "gone" in report["failed"]

    index = load_open_index(path)                                   # the strict loader accepts it
    row = index.models["qwen3-8b"]
    real = json.loads((FIXTURES / "hub" / "Qwen--Qwen3-8B" / "config.json").read_text())
    assert row.geometry == "config" and row.config_source.startswith("hf:Qwen/Qwen3-8B@")
    assert parse_config(row.config_dict()) == parse_config(real)
    assert not any("full attention" in m for m in row.missing)
    bf16, fp8, gg = row.variants
    assert bf16.size_bytes and bf16.bits_per_weight is None and bf16.size_source.startswith("hf:Qwen/Qwen3-8B@")
    assert fp8.size_bytes and fp8.size_source.startswith("hf:Qwen/Qwen3-8B-FP8@")
    assert dict(gg.quants) == {"Q4_K_M": gguf["Qwen3-8B-Q4_K_M.gguf"], "Q8_0": gguf["Qwen3-8B-Q8_0.gguf"]}
    assert index.models["gone"].variants[0].bits_per_weight == 16  # kept as it was
    assert not fake_hub.requests(path_contains=".gguf")             # sizes from the listing, nothing read


def test_refresh_without_write_leaves_the_file_and_only_picks_rows(fake_hub, monkeypatch, tmp_path, capsys):
    fake_hub.add_fixture("Qwen--Qwen3-8B")
    monkeypatch.setenv("HF_ENDPOINT", fake_hub.url)
    path = tmp_path / "open_models.yaml"
    path.write_text(yaml.safe_dump(INDEX, sort_keys=False))
    before = path.read_text()
    assert tool().main(["--index", str(path), "--only", "gone"]) == 0
    assert "failed gone" in capsys.readouterr().out and path.read_text() == before
    assert tool().main(["--index", str(path), "--only", "nope"]) == 64
