"""llama.cpp's memory model (pure): placement by -ngl / -ts / -sm / --n-cpu-moe, KV sizing, solvers."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from club3090.fit.llamacpp import (
    CUDA_CONTEXT_BYTES,
    LlamaCppArgs,
    fewest_offloaded,
    kv_cache,
    largest_context,
    predict,
)
from club3090.fit.memory import Unpriceable
from club3090.model.gguf import parse_header
from club3090.model.gguf_model import GgufModel, from_files
from tests.gguf_fixtures import Q, Spec, write

GiB, MiB = 1 << 30, 1 << 20
MODEL_FOR_TYPES = GgufModel(
    files=("x",), arch="llama", name=None, quant=None, n_layer=1, n_embd=256, n_vocab=256, ctx_train=4096,
    n_head=(4,), n_head_kv=(1,), head_dim_k=64, head_dim_v=64, n_ff=512, n_expert=0, n_expert_used=0, n_ff_exp=0,
    swa_window=None, swa_layers=(False,), recurrent_layers=(False,), state_bytes=0, weights_bytes=0, embd_bytes=0,
    output_bytes=0, tied_output=True, layer_bytes=(0,), expert_bytes=(0,), other_bytes=0, type_bytes={})


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, GgufModel]:
    folder = tmp_path_factory.mktemp("gguf")
    specs = {
        "dense": Spec(n_layer=4, weight_type=Q.Q8_0),
        "tied": Spec(n_layer=4, output=False),
        "moe": Spec(n_layer=4, n_expert=8, n_expert_used=2, weight_type=Q.Q4_K),
        "swa": Spec(arch="gemma3", n_layer=12, head_dim=64, sliding_window=1024, output=False),
    }
    out = {}
    for name, spec in specs.items():
        (path,) = write(folder, name, spec)
        out[name] = from_files([parse_header(path.read_bytes(), file=path.name)])
    return out


def test_all_layers_on_one_gpu(models: dict[str, GgufModel]) -> None:
    m = models["dense"]
    r = predict(m, LlamaCppArgs(ctx_size=4096), [24 * GiB])
    gpu, host = r.devices
    assert r.gpu_layers == m.n_layer + 1 and gpu.layers == m.n_layer + 1
    assert gpu.weights_bytes == sum(m.layer_bytes) + m.output_bytes
    assert host.weights_bytes == m.embd_bytes + m.other_bytes     # the input embeddings stay on the host
    assert gpu.kv_bytes == r.kv.total_bytes and host.kv_bytes == 0
    assert gpu.overhead_bytes == CUDA_CONTEXT_BYTES and r.confidence == "estimated" and r.fits


def test_ngl_offloads_the_last_layers(models: dict[str, GgufModel]) -> None:
    m = models["dense"]
    r = predict(m, LlamaCppArgs(ctx_size=4096, n_gpu_layers=2), [24 * GiB])
    gpu, host = r.devices
    assert gpu.weights_bytes == sum(m.layer_bytes[2:])            # layers 2, 3; the output head stays home
    assert host.weights_bytes == sum(m.layer_bytes[:2]) + m.embd_bytes + m.output_bytes + m.other_bytes
    assert gpu.kv_bytes == host.kv_bytes == r.kv.total_bytes // 2
    assert host.compute_bytes > gpu.compute_bytes                  # the logits are computed on the host


def test_tied_output_is_copied_to_the_gpu(models: dict[str, GgufModel]) -> None:
    m = models["tied"]
    gpu, host = predict(m, LlamaCppArgs(ctx_size=512), [24 * GiB]).devices
    assert m.tied_output and gpu.weights_bytes == sum(m.layer_bytes) + m.output_bytes + m.embd_bytes
    assert host.weights_bytes == m.embd_bytes + m.other_bytes


def test_tensor_split_and_modes(models: dict[str, GgufModel]) -> None:
    m = models["dense"]
    even = predict(m, LlamaCppArgs(ctx_size=4096), [24 * GiB, 24 * GiB]).devices
    assert (even[0].layers, even[1].layers) == (3, 2)             # 5 offloaded "layers" incl. the output head
    skew = predict(m, LlamaCppArgs(ctx_size=4096, tensor_split=(1, 3)), [24 * GiB, 24 * GiB]).devices
    assert (skew[0].layers, skew[1].layers) == (2, 3)
    none = predict(m, LlamaCppArgs(ctx_size=4096, split_mode="none", main_gpu=1), [24 * GiB, 24 * GiB]).devices
    assert none[0].weights_bytes == 0 and none[1].layers == m.n_layer + 1
    row = predict(m, LlamaCppArgs(ctx_size=4096, split_mode="row"), [24 * GiB, 24 * GiB]).devices
    assert abs(row[0].weights_bytes - row[1].weights_bytes) <= m.output_bytes + 4
    assert isinstance(predict(m, LlamaCppArgs(ctx_size=4096, tensor_split=(1,)), [24 * GiB, 24 * GiB]), Unpriceable)


def test_n_cpu_moe_keeps_experts_on_the_host(models: dict[str, GgufModel]) -> None:
    m = models["moe"]
    base = predict(m, LlamaCppArgs(ctx_size=4096), [24 * GiB])
    two = predict(m, LlamaCppArgs(ctx_size=4096, n_cpu_moe=2), [24 * GiB])
    moved = sum(m.expert_bytes[:2])
    assert moved > 0
    assert two.devices[0].weights_bytes == base.devices[0].weights_bytes - moved
    assert two.host.weights_bytes == base.host.weights_bytes + moved
    assert two.devices[0].kv_bytes == base.devices[0].kv_bytes   # attention stays on the GPU


def test_no_kv_offload(models: dict[str, GgufModel]) -> None:
    gpu, host = predict(models["dense"], LlamaCppArgs(ctx_size=4096, kv_offload=False), [24 * GiB]).devices
    assert gpu.kv_bytes == 0 and host.kv_bytes > 0


def test_kv_scales_with_context_and_type(models: dict[str, GgufModel]) -> None:
    m = models["dense"]
    f16 = kv_cache(m, LlamaCppArgs(ctx_size=8192))
    q8 = kv_cache(m, LlamaCppArgs(ctx_size=8192, cache_type_k="q8_0", cache_type_v="q8_0"))
    q4 = kv_cache(m, LlamaCppArgs(ctx_size=8192, cache_type_k="q4_0", cache_type_v="q4_0"))
    assert f16.total_bytes * 34 == q8.total_bytes * 64 and f16.total_bytes * 18 == q4.total_bytes * 64
    assert kv_cache(m, LlamaCppArgs(ctx_size=8000)).total_bytes == f16.total_bytes   # 256-cell padding


def test_swa_layers_at_their_window(models: dict[str, GgufModel]) -> None:
    m = models["swa"]
    small = kv_cache(m, LlamaCppArgs(ctx_size=65536))
    assert (small.layers, small.swa_layers) == (2, 10)
    assert small.swa_cells == 1024 + 512 and small.cells == 65536
    full = kv_cache(m, LlamaCppArgs(ctx_size=65536, swa_full=True))
    assert full.swa_cells == 65536 and full.total_bytes > 5 * small.total_bytes


def test_unknown_or_misfit_cache_type(models: dict[str, GgufModel]) -> None:
    unknown = kv_cache(models["dense"], LlamaCppArgs(ctx_size=512, cache_type_k="q3_zz"))
    assert isinstance(unknown, Unpriceable) and "unknown" in unknown.reason
    odd = replace(models["dense"], head_dim_k=48, head_dim_v=48)
    misfit = kv_cache(odd, LlamaCppArgs(ctx_size=512, cache_type_k="q4_k"))
    assert isinstance(misfit, Unpriceable) and "multiple of 256" in misfit.reason


def test_recurrent_state_per_sequence(models: dict[str, GgufModel]) -> None:
    m = replace(models["dense"], recurrent_layers=(True, True, True, False), state_bytes=10 * MiB)
    one = kv_cache(m, LlamaCppArgs(ctx_size=4096))
    four = kv_cache(m, LlamaCppArgs(ctx_size=4096, parallel=4))
    assert one.layers == 1 and one.state_bytes == 30 * MiB and four.state_bytes == 120 * MiB


def test_largest_context(models: dict[str, GgufModel]) -> None:
    m = replace(models["dense"], ctx_train=1 << 20)
    budget = [CUDA_CONTEXT_BYTES + 40 * MiB]
    best = largest_context(m, LlamaCppArgs(ctx_size=256), budget)
    assert best is not None and best % 256 == 0
    assert predict(m, LlamaCppArgs(ctx_size=best), budget).fits
    assert not predict(m, LlamaCppArgs(ctx_size=best + 256), budget).fits
    assert largest_context(m, LlamaCppArgs(ctx_size=256), [MiB]) is None
    assert largest_context(m, LlamaCppArgs(ctx_size=256), [24 * GiB], limit=4096) == 4096


def test_fewest_offloaded_prefers_moving_experts(models: dict[str, GgufModel]) -> None:
    m = models["moe"]
    args = LlamaCppArgs(ctx_size=4096)
    full = predict(m, args, [24 * GiB]).devices[0].total_bytes
    tight = [full - m.expert_bytes[0] // 2]
    r = fewest_offloaded(m, args, tight)
    assert r is not None and r.args.n_cpu_moe == 1 and r.gpu_layers == m.n_layer + 1
    dense = models["dense"]
    small = replace(args, ubatch_size=16, batch_size=16)   # below op offload: a head on the host frees its bytes
    d_full = predict(dense, small, [24 * GiB]).devices[0].total_bytes
    r2 = fewest_offloaded(dense, small, [d_full - dense.output_bytes // 2])
    assert r2 is not None and r2.args.n_gpu_layers == dense.n_layer


def test_host_weights_are_copied_to_the_gpu_for_a_large_micro_batch(models: dict[str, GgufModel]) -> None:
    """ggml's op offload: from 32 tokens a host matrix is multiplied on the GPU, its copy in the
    main GPU's compute buffer (here the output head, left on the host by -ngl n_layer)."""
    dense = models["dense"]
    head = dict(dense.tensors)["output.weight"]
    for ub, copied in ((512, head), (16, 0)):
        a = LlamaCppArgs(ctx_size=4096, ubatch_size=ub, batch_size=ub, n_gpu_layers=dense.n_layer)
        gpu = predict(dense, a, [24 * GiB]).devices[0]
        masks = 4096 * max(ub, 64) * 2                     # f16 mask, rows padded to 64
        phases = max(masks + 4 * ub * 3 * dense.n_embd, 4 * ub * 4 * dense.n_ff)   # attention / FFN, no logits
        assert gpu.compute_bytes == phases + copied


def test_host_capacity_is_checked(models: dict[str, GgufModel]) -> None:
    r = predict(models["dense"], LlamaCppArgs(ctx_size=4096, n_gpu_layers=0), [24 * GiB], host_bytes=MiB)
    assert not r.fits and not r.host.fits


def test_cpu_only(models: dict[str, GgufModel], tmp_path: Path) -> None:
    r = predict(models["dense"], LlamaCppArgs(ctx_size=4096), [])
    assert r.gpu_layers == 0 and len(r.devices) == 1 and r.host.weights_bytes == models["dense"].weights_bytes


def test_override_tensors_move_matching_tensors(models: dict[str, GgufModel]) -> None:
    m = models["moe"]
    args = LlamaCppArgs(ctx_size=4096)
    base = predict(m, args, [24 * GiB])
    ot = predict(m, replace(args, override_tensors=((r"blk\.[01]\.ffn_.*_exps", "CPU"),)), [24 * GiB])
    via_flag = predict(m, replace(args, n_cpu_moe=2), [24 * GiB])
    assert ot.devices[0].weights_bytes == via_flag.devices[0].weights_bytes < base.devices[0].weights_bytes
    assert ot.host.weights_bytes == via_flag.host.weights_bytes
    first_wins = predict(m, replace(args, override_tensors=(("attn_q", "CUDA0"), ("attn", "CPU"))), [24 * GiB])
    moved = sum(n for name, n in m.tensors if "attn" in name and "attn_q." not in name)
    assert first_wins.host.weights_bytes == base.host.weights_bytes + moved
    assert isinstance(predict(m, replace(args, override_tensors=(("x", "CUDA3"),)), [24 * GiB]), Unpriceable)
    assert isinstance(predict(m, replace(args, override_tensors=(("(", "CPU"),)), [24 * GiB]), Unpriceable)


def test_catalog_llamacpp_engines_kv_formats_are_priced() -> None:
    """llama.cpp and its forks (beellama, ...): every KV format the catalog lets them use prices."""
    from club3090.catalog import load_catalog
    from club3090.fit.llamacpp import cache_types

    catalog = load_catalog()
    engines = [e for e in catalog.engines.values() if e.type == "llama.cpp"]
    assert len(engines) >= 2
    for engine in engines:
        for fmt in engine.supported_kv_formats:
            pair = cache_types(fmt)
            assert isinstance(pair, tuple), fmt
            k, v = pair
            cache = kv_cache(replace(MODEL_FOR_TYPES, head_dim_k=256, head_dim_v=256),
                             LlamaCppArgs(ctx_size=512, cache_type_k=k, cache_type_v=v))
            assert not isinstance(cache, Unpriceable) and cache.total_bytes > 0
    for profile in catalog.profiles.values():
        if catalog.engines[profile.engine].type == "llama.cpp":
            pair = cache_types(profile.kv_format)
            assert isinstance(pair, tuple) and pair[0] in ("q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "f16")
    assert cache_types("k8v4") == ("q8_0", "q4_0")
    assert isinstance(cache_types("fp8_e5m2"), Unpriceable)
