"""The open-model index: the shipped file loads strictly, covers the families people ask about,
records where its facts came from, and agrees with the real configs it was seeded from."""

from __future__ import annotations

import json
import re

import pytest

from club3090.catalog.open_index import TASKS, load_open_index, parse_open_index
from club3090.errors import CatalogError
from club3090.model.architecture import parse_config
from tests.fixtures_path import FIXTURES

FAMILIES = {
    "Llama 3.x": r"^meta-llama/(Meta-)?Llama-3", "Llama 4": r"^meta-llama/Llama-4", "Qwen 2.5": r"^Qwen/Qwen2\.5",
    "Qwen 3": r"^Qwen/Qwen3-", "Qwen 3.5": r"^Qwen/Qwen3\.5", "Qwen 3.6": r"^Qwen/Qwen3\.6", "Gemma 2": r"gemma-2",
    "Gemma 3": r"gemma-3", "Gemma 4": r"gemma-4", "Mistral": r"^mistralai/Mistral", "Mixtral": r"Mixtral",
    "Phi 3": r"Phi-3", "Phi 4": r"(?i)phi-4", "DeepSeek V2": r"DeepSeek-V2", "DeepSeek V3": r"DeepSeek-V3",
    "DeepSeek R1": r"DeepSeek-R1$", "R1 distills": r"R1-Distill", "gpt-oss": r"gpt-oss", "GLM": r"(?i)glm",
    "Kimi": r"Kimi", "MiniMax": r"MiniMax", "Granite": r"granite", "Nemotron": r"Nemotron", "OLMo": r"(?i)olmo",
    "SmolLM": r"SmolLM",
}


@pytest.fixture(scope="module")
def index():
    return load_open_index()


def test_shipped_index_holds_150_models_with_sources(index):
    assert len(index.models) >= 150
    for model in index.models.values():
        assert model.config_source and model.tasks and set(model.tasks) <= set(TASKS)
        assert model.params is None or model.params_source
        for v in model.variants:
            assert v.size_bytes or v.bits_per_weight or v.quantization or v.format == "gguf", (model.id, v.id)
            assert v.size_bytes is None or v.size_source
            assert v.format != "gguf" or v.repos


def test_the_families_people_ask_about_are_covered(index):
    repos = [m.repo for m in index.models.values()]
    missing = [family for family, pattern in FAMILIES.items() if not any(re.search(pattern, r) for r in repos)]
    assert missing == []
    tasks = {t for m in index.models.values() for t in m.tasks}
    assert tasks == set(TASKS)
    kinds = {v.id for m in index.models.values() for v in m.variants}
    assert {"bf16", "fp8", "awq", "gptq", "nvfp4", "autoround", "gguf"} <= kinds


def test_every_config_parses_to_layers_or_says_why(index):
    for model in index.models.values():
        arch = parse_config(model.config_dict())
        assert arch.layers or arch.unpriceable_reason, model.id
        if model.geometry == "llmfit-geometry":
            assert any("full attention" in m for m in model.missing)


def test_trimmed_configs_parse_like_the_real_fixture_configs(index):
    """Rows seeded from tests/fixtures/hub keep every key the parser reads."""
    checked = 0
    for model in index.models.values():
        match = re.fullmatch(r"tests/fixtures/hub/(.+)/config\.json \(see its SOURCE\.md\)", model.config_source)
        if match is None:
            continue
        real = json.loads((FIXTURES / "hub" / match[1] / "config.json").read_text())
        assert parse_config(model.config_dict()) == parse_config(real), model.id
        checked += 1
    assert checked >= 20


def test_gguf_quant_table_is_ordered_by_size_and_cites_llama_cpp(index):
    q = index.gguf_quants
    assert q["Q2_K"].bits_per_weight < q["Q4_K_M"].bits_per_weight < q["Q8_0"].bits_per_weight < 9
    assert q["Q8_0"].ppl_delta < q["Q4_K_M"].ppl_delta < q["Q2_K"].ppl_delta
    assert all("quantize.cpp" in x.source for x in q.values())


GOOD = b"""schema_version: 1
gguf_quants:
  Q4_K_M: {bits_per_weight: 4.89, ppl_delta: 0.1754, source: test}
models:
  tiny:
    repo: org/tiny
    tasks: [chat]
    geometry: config
    config_source: test
    config: {model_type: llama, num_hidden_layers: 2, hidden_size: 64, num_attention_heads: 4}
    variants:
    - {id: bf16, format: safetensors, repo: org/tiny, bits_per_weight: 16}
"""


def test_loader_reads_a_minimal_file():
    index = parse_open_index(GOOD)
    assert list(index.models) == ["tiny"] and index.models["tiny"].variants[0].bits_per_weight == 16


def test_loader_collects_every_problem_with_its_path():
    bad = (GOOD.replace(b"schema_version: 1", b"schema_version: 9")
           .replace(b"tasks: [chat]", b"tasks: [chat, dancing]\n    licence: mit")
           .replace(b"bits_per_weight: 16}", b"bits_per_weight: 16}\n    - {id: gguf, format: gguf}")
           .replace(b"    geometry: config\n", b""))
    with pytest.raises(CatalogError) as exc:
        parse_open_index(bad)
    text = "\n".join(map(str, exc.value.problems))
    assert "schema_version" in text
    assert "models['tiny'].tasks" in text
    assert "licence: unknown key; did you mean 'license'?" in text
    assert "models['tiny'].geometry: missing required key" in text
    assert len(exc.value.problems) >= 4


def test_loader_refuses_two_rows_for_one_repository_and_duplicate_keys():
    twice = GOOD + GOOD.split(b"models:\n")[1].replace(b"  tiny:", b"  tiny2:")
    for blob, text in ((twice, "already model 'tiny'"), (GOOD + GOOD.split(b"models:\n")[1], "duplicate key")):
        with pytest.raises(CatalogError) as exc:
            parse_open_index(blob)
        assert any(text in str(p) for p in exc.value.problems)


def test_a_gguf_variant_needs_a_repository_and_a_safetensors_one_a_size():
    no_size = GOOD.replace(b", bits_per_weight: 16}", b"}")
    no_repo = GOOD.replace(b"bits_per_weight: 16}", b"bits_per_weight: 16}\n    - {id: gguf, format: gguf}")
    for blob, text in ((no_size, "cannot be priced"), (no_repo, "needs at least one repository")):
        with pytest.raises(CatalogError) as exc:
            parse_open_index(blob)
        assert any(text in str(p) for p in exc.value.problems)
