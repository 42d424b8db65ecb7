"""`club3090.fit.shape`: what a curated profile asks vLLM to do, as a ServeShape."""

from __future__ import annotations

from typing import ClassVar

import pytest

from club3090.catalog import load_catalog
from club3090.fit.memory import ServeShape
from club3090.fit.shape import (
    drafter_terms,
    profile_batched_tokens,
    profile_shape,
    shipped_flag,
)


@pytest.fixture(scope="module")
def cat():
    return load_catalog()


def test_shape_from_profile(cat):
    p = cat.profiles["vllm/gemma-int8-mtp"]
    shape = profile_shape(p, cat)
    assert isinstance(shape, ServeShape)
    assert (shape.tp, shape.pp, shape.mem_util, shape.max_model_len, shape.max_num_seqs) == \
        (p.tp, p.pp, p.mem_util, p.max_model_len, p.max_num_seqs)
    assert shape.kv_cache_dtype == p.kv_format == "int8_per_token_head"
    assert shape.max_num_batched_tokens == 4096 == profile_batched_tokens(p)   # from the shipped compose
    assert shape.vllm_version == cat.engines[p.engine].vllm_version
    drafter = cat.drafters[p.drafter]
    assert (shape.num_speculative_tokens, shape.extra_weights_bytes) == (drafter.n_default,
                                                                          drafter.vram_footprint_bytes)


def test_drafter_off(cat):
    shape = profile_shape(cat.profiles["vllm/gemma-int8-mtp"], cat, drafter=False)
    assert (shape.num_speculative_tokens, shape.extra_weights_bytes) == (0, 0)


def test_overrides_and_none_means_not_given(cat):
    p = cat.profiles["vllm/dual"]
    shape = profile_shape(p, cat, tp=4, mem_util=0.9, max_model_len=None, kv_cache_dtype=None,
                          num_speculative_tokens=1, device_name="NVIDIA GeForce RTX 3090")
    assert (shape.tp, shape.mem_util, shape.num_speculative_tokens) == (4, 0.9, 1)
    assert shape.max_model_len == p.max_model_len and shape.kv_cache_dtype == p.kv_format
    assert shape.device_name == "NVIDIA GeForce RTX 3090"
    assert profile_shape(p, cat).max_model_len == p.max_model_len  # every other argument has a default
    with pytest.raises(TypeError):                               # so only an unknown keyword can fail
        profile_shape(p, cat, max_ctx=1)


def test_without_profile_is_vllm_defaults_plus_overrides():
    assert profile_shape(None, None) == ServeShape()
    assert profile_shape(None, None, tp=2, max_model_len=8192) == ServeShape(tp=2, max_model_len=8192)


def test_profile_without_compose_leaves_batch_to_vllm(cat):
    p = next(p for p in cat.profiles.values()                # a vLLM profile with no runtime capture
             if p.runtime is None and cat.engines[p.engine].type == "vllm")
    assert profile_shape(p, cat).max_num_batched_tokens is None


def test_shipped_flag_resolves_defaults():
    class Runtime:
        service: ClassVar[dict[str, list[str]]] = {"command": ["--max-num-batched-tokens", "${MNBT:-${X:-4096}}", "--max-model-len=${L:-8192}",
                               "--kv-cache-dtype", "${KV}"]}

    class Profile:
        runtime = Runtime()

    assert shipped_flag(Profile, "--max-num-batched-tokens") == "4096"
    assert shipped_flag(Profile, "--max-model-len") == "8192"
    assert shipped_flag(Profile, "--kv-cache-dtype") is None          # unset variable, no default
    assert shipped_flag(Profile, "--tensor-parallel-size") is None
    assert profile_batched_tokens(Profile) == 4096 and profile_batched_tokens(None) is None


def test_drafter_terms(cat):
    assert drafter_terms(None) == (0, 0)
    assert drafter_terms(cat.drafters["qwen-mtp-builtin"]) == (3, 0)
    assert drafter_terms(cat.drafters["gemma-it-assistant"]) == (4, 970_000_000)
    assert drafter_terms(cat.drafters["unsloth-mtp-gguf"])[0] == 0     # llama.cpp drafter: no vLLM tokens


def test_every_vllm_profile_has_a_shape(cat):
    for key, p in cat.profiles.items():
        if cat.engines[p.engine].type == "vllm":
            shape = profile_shape(p, cat)
            assert shape.tp == p.tp and shape.max_model_len == p.max_model_len, key


def test_shipped_values_resolve_through_launch_interpolate(cat):
    """launch.interpolate owns ${VAR:-d}: a shipped value resolves as Compose does with no env."""
    from dataclasses import replace

    from club3090.interpolate import interpolate

    p = cat.profiles["vllm/minimal"]
    service = dict(p.runtime.service)
    service["command"] = ["--max-num-batched-tokens", "${A:-${B:-4096}}", "--max-model-len=${CTX}"]
    q = replace(p, runtime=replace(p.runtime, service=service))
    assert shipped_flag(q, "--max-num-batched-tokens") == interpolate("${A:-${B:-4096}}") == "4096"
    assert shipped_flag(q, "--max-model-len") is None
    assert profile_batched_tokens(q) == 4096


def test_bad_shipped_batched_tokens_is_a_catalog_error(cat):
    from dataclasses import replace

    from club3090.errors import CatalogError

    p = cat.profiles["vllm/minimal"]
    service = dict(p.runtime.service, command=["--max-num-batched-tokens", "${X:-lots}"])
    with pytest.raises(CatalogError):
        profile_batched_tokens(replace(p, runtime=replace(p.runtime, service=service)))
