"""Speculative drafters' KV layers as vLLM allocates them (fit/drafter_kv.py): EAGLE and DFlash
layers join the target's KV groups with their own geometry; Gemma 4's MTP assistant shares the
target's cache and adds none."""

from __future__ import annotations

import json

import pytest

from club3090.fit.drafter_kv import drafter_kv_layers, drafter_method
from club3090.fit.memory import ServeShape, predict
from club3090.model.architecture import parse_config
from club3090.units import GiB
from tests.fixtures_path import fixture_path

HUB = fixture_path("hub")


def target():
    return parse_config(json.loads((HUB / "Qwen--Qwen2.5-7B" / "config.json").read_text()))


def draft(architecture: str, layers: int, kv_heads: int = 4, head_dim: int = 128, hidden: int = 3584):
    """A draft checkpoint's config: ``layers`` decoder layers of the given KV geometry."""
    return parse_config({
        "architectures": [architecture], "model_type": "llama", "hidden_size": hidden,
        "num_hidden_layers": layers, "num_attention_heads": 28, "num_key_value_heads": kv_heads,
        "head_dim": head_dim, "intermediate_size": 18944, "vocab_size": 152064,
        "max_position_embeddings": 32768, "torch_dtype": "bfloat16"})


def run(drafter=None, spec: int = 3, method: str | None = None, tp: int = 1):
    return predict(target(), weights_bytes=0, weights_bytes_per_rank=15 * GiB, gpu_memory_bytes=[80 * GiB],
                   shape=ServeShape(tp=tp, max_model_len=32768, vllm_version="0.22.0",
                                    num_speculative_tokens=spec, speculative_method=method,
                                    kv_cache_memory_bytes=20 * GiB),
                   drafter=drafter)


def test_method_from_the_draft_architecture():
    assert drafter_method(draft("LlamaForCausalLMEagle3", 1)) == "eagle3"
    assert drafter_method(draft("EagleLlamaForCausalLM", 1)) == "eagle"
    assert drafter_method(draft("DFlashDraftModel", 5)) == "dflash"
    assert drafter_method(draft("LlamaForCausalLM", 4)) == "draft_model"


@pytest.mark.parametrize("method, layers", [("eagle3", 1), ("eagle", 2), ("dflash", 5), ("draft_model", 4)])
def test_own_kv_drafters_join_the_groups(method, layers):
    plain = run(spec=3)
    with_draft = run(draft("X", layers), spec=3, method=method)
    per_layer = 4 * 128 * 2 * 2                # KV heads x head size x (K, V) x bf16
    assert with_draft.kv_bytes_per_token - plain.kv_bytes_per_token == layers * per_layer
    # same page size as the target's layers: one uniform group, more layers in it
    assert {g.kind for g in with_draft.groups} == {"full"}
    assert sum(g.num_layers for g in with_draft.groups) == 28 + layers
    # the same pool holds proportionally fewer tokens
    assert with_draft.kv_cache_tokens == pytest.approx(plain.kv_cache_tokens * 28 / (28 + layers), rel=0.01)
    assert any(f"{layers} {method} drafter layer(s)" in n for n in with_draft.notes)


def test_drafter_with_other_geometry_is_priced_with_its_own_heads():
    wide = run(draft("X", 1, kv_heads=8, head_dim=128), spec=3, method="eagle3")
    plain = run(spec=3)
    assert wide.kv_bytes_per_token - plain.kv_bytes_per_token == 8 * 128 * 2 * 2
    # TP 2 splits the drafter's heads like the target's
    wide2 = run(draft("X", 1, kv_heads=8, head_dim=128), spec=3, method="eagle3", tp=2)
    plain2 = run(spec=3, tp=2)
    assert wide2.kv_bytes_per_token - plain2.kv_bytes_per_token == 4 * 128 * 2 * 2


@pytest.mark.parametrize("method", ["mtp_assistant", "ngram", "mtp"])
def test_drafters_without_own_kv_add_none(method):
    plain = run(spec=3)
    shared = run(draft("Gemma4AssistantForCausalLM", 4), spec=3, method=method)
    assert shared.kv_bytes_per_token == plain.kv_bytes_per_token
    assert shared.kv_cache_tokens == plain.kv_cache_tokens
    assert drafter_kv_layers(method, draft("X", 4)) == ()


def test_no_speculation_no_drafter_kv():
    assert run(draft("X", 1), spec=0, method="eagle3").kv_bytes_per_token == run(spec=0).kv_bytes_per_token
