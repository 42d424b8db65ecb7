"""llama.cpp offload planning on real geometries: the synthetic GGUF facts, the layout search
(checked against llama.cpp's own accounting in ``fit.llamacpp_fits``), the flags and the speed."""

from __future__ import annotations

import json

import pytest

from club3090.fit.llamacpp import LlamaCppArgs
from club3090.fit.llamacpp_fits import quant_fit
from club3090.fit.memory import Unpriceable
from club3090.fit.offload import (
    DEFAULT_RAM_BANDWIDTH_GB_S,
    RAM_RESERVE_BYTES,
    fit_quant,
    gguf_from_arch,
    launch_flags,
    plan_offload,
    usable_ram,
)
from club3090.model.architecture import parse_config
from club3090.model.param_estimate import estimate_weights
from club3090.units import GiB
from tests.fixtures_path import fixture_path

RTX3090 = 24 * GiB
BW_3090 = 936.0


def arch_of(folder: str):
    return parse_config(json.loads(fixture_path("hub", folder, "config.json").read_text()))


def quant(folder: str, bpw: float):
    arch = arch_of(folder)
    return arch, gguf_from_arch(arch, int(estimate_weights(arch).params * bpw / 8), label=f"{bpw}bpw")


def test_synthetic_gguf_keeps_the_bytes_and_the_geometry():
    arch, model = quant("Qwen--Qwen3-30B-A3B", 4.9)
    total = sum(model.layer_bytes) + sum(model.expert_bytes) + model.embd_bytes + model.output_bytes
    assert abs(total - model.weights_bytes) <= arch.num_hidden_layers * 4 + 4
    assert model.is_moe and model.n_expert == 128 and model.n_expert_used == 8
    assert sum(model.expert_bytes) > 0.8 * model.weights_bytes          # a 30B-A3B is mostly experts
    kv = model.kv_layers[0]
    assert kv.k_elems == arch.num_key_value_heads * arch.head_dim == kv.v_elems


def test_sliding_and_linear_layers_carry_over():
    _, gemma = quant("google--gemma-3-27b-it", 4.9)
    assert gemma.swa_window and any(gemma.swa_layers) and not all(gemma.swa_layers)
    _, qwen35 = quant("Qwen--Qwen3.5-27B", 4.9)
    assert any(qwen35.recurrent_layers) and qwen35.state_bytes > 0


@pytest.mark.parametrize("folder,bpw,gpus,ram", [
    ("openai--gpt-oss-120b", 4.9, [RTX3090], 60 * GiB),
    ("Qwen--Qwen3-30B-A3B", 8.5, [RTX3090], 32 * GiB),
    ("meta-llama--Llama-3.1-70B-Instruct", 4.9, [RTX3090], 60 * GiB),
    ("Qwen--Qwen3-8B", 8.5, [RTX3090], None),
    ("Qwen--Qwen3-235B-A22B", 3.9, [RTX3090, RTX3090], 96 * GiB),
])
def test_the_fast_search_agrees_with_llama_cpp_accounting(folder, bpw, gpus, ram):
    _, model = quant(folder, bpw)
    args = LlamaCppArgs(ctx_size=8192)
    ref, fast = quant_fit(model, args, gpus, ram), fit_quant(model, args, gpus, ram)
    assert not isinstance(ref, Unpriceable) and not isinstance(fast, Unpriceable)
    assert (fast.fits_fully, fast.runs, fast.n_gpu_layers, fast.n_cpu_moe) == \
        (ref.fits_fully, ref.runs, ref.n_gpu_layers, ref.n_cpu_moe)
    assert fast.context <= ref.context and fast.context >= 0.9 * ref.context


def test_a_moe_too_big_for_the_gpu_plans_expert_offload_within_ram():
    _, model = quant("openai--gpt-oss-120b", 4.9)
    plan = plan_offload(model, [RTX3090], 60 * GiB, ctx=16384, gpu_bandwidth_gb_s=BW_3090)
    assert not isinstance(plan, Unpriceable)
    assert plan.offloaded and plan.fit.n_cpu_moe > 0 and plan.fit.context >= 16384
    assert plan.breakdown.host.total_bytes <= 60 * GiB
    flags = launch_flags(plan.fit)
    assert flags[flags.index("--n-cpu-moe") + 1] == str(plan.fit.n_cpu_moe)
    assert plan.host_read_bytes > 0 and 1 < plan.speed.decode_tps < 100
    assert plan.speed.band_low < plan.speed.decode_tps < plan.speed.band_high


def test_too_little_ram_is_a_reason_not_a_plan():
    _, model = quant("openai--gpt-oss-120b", 4.9)
    plan = plan_offload(model, [RTX3090], 16 * GiB, ctx=16384, gpu_bandwidth_gb_s=BW_3090)
    assert isinstance(plan, Unpriceable) and "host memory" in plan.reason


def test_speed_falls_with_the_bytes_read_from_ram():
    _, model = quant("openai--gpt-oss-120b", 4.9)
    fast = plan_offload(model, [RTX3090, RTX3090, RTX3090], 60 * GiB, ctx=8192, gpu_bandwidth_gb_s=BW_3090)
    slow = plan_offload(model, [RTX3090], 60 * GiB, ctx=8192, gpu_bandwidth_gb_s=BW_3090)
    slower = plan_offload(model, [RTX3090], 60 * GiB, ctx=8192, gpu_bandwidth_gb_s=BW_3090,
                          ram_bandwidth_gb_s=DEFAULT_RAM_BANDWIDTH_GB_S / 2)
    assert not any(isinstance(p, Unpriceable) for p in (fast, slow, slower))
    assert fast.host_read_bytes < slow.host_read_bytes
    assert fast.speed.decode_tps > slow.speed.decode_tps > slower.speed.decode_tps


def test_a_dense_model_offloads_whole_layers_and_is_slow():
    _, model = quant("meta-llama--Llama-3.1-70B-Instruct", 4.9)
    plan = plan_offload(model, [RTX3090], 60 * GiB, ctx=4096, gpu_bandwidth_gb_s=BW_3090)
    assert not isinstance(plan, Unpriceable)
    assert plan.fit.n_cpu_moe == 0 and plan.fit.n_gpu_layers < model.n_layer
    assert plan.speed.decode_tps < 5


def test_usable_ram_keeps_a_reserve():
    assert usable_ram(None) is None
    assert usable_ram(64 * GiB) == 64 * GiB - RAM_RESERVE_BYTES
    assert usable_ram(RAM_RESERVE_BYTES // 2) == 0


def test_an_unpriceable_config_says_why():
    arch = parse_config({"model_type": "llama"})
    assert isinstance(gguf_from_arch(arch, GiB), Unpriceable)


def test_ram_probe_reads_memtotal(tmp_path):
    from club3090.edges.host_memory import total_ram_bytes

    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       65792512 kB\nMemFree:         1000 kB\n")
    assert total_ram_bytes(meminfo) == 65792512 * 1024
    meminfo.write_text("MemFree: 1 kB\n")
    assert total_ram_bytes(meminfo) is None
    assert total_ram_bytes(tmp_path / "absent") is None
    assert total_ram_bytes() is None or total_ram_bytes() > 0      # this machine's own file, if any


def test_up_writes_the_planned_expert_offload(tmp_path, monkeypatch, fake_hub, capsys):
    """The flags `fits` plans for a MoE that needs expert offload are the ones `up --quant Q
    --ctx-size N` writes into the launch (up's own llama.cpp memory model, same layout order)."""
    import yaml

    from club3090 import cli
    from club3090.edges.provider import LiveProvider
    from club3090.fit.llamacpp import predict
    from club3090.model.gguf import parse_header
    from club3090.model.gguf_model import from_files
    from tests import gguf_fixtures as gf
    from tests.test_up_llamacpp import fake_docker

    path = gf.write(tmp_path / "gguf", "tiny-moe-F16", gf.Spec(n_layer=4, n_embd=256, n_head=4, n_head_kv=2,
                                                               n_ff=512, n_expert=8, n_expert_used=2,
                                                               n_ff_exp=1024, ctx_train=4096))[0]
    blob = path.read_bytes()
    model = from_files([parse_header(blob, file=path.name, file_size=len(blob))])
    ctx = 2048
    full = predict(model, LlamaCppArgs(ctx_size=ctx), [1 << 40])
    need = full.devices[0].total_bytes
    mib = (need - sum(model.expert_bytes) // 2) // (1 << 20)            # room for about half the experts
    planned = fit_quant(model, LlamaCppArgs(ctx_size=ctx), [mib << 20], None)
    assert planned.offloaded and planned.n_cpu_moe > 0

    repo = "club3090-tests/tiny-moe-GGUF"
    fake_hub.add_repo(repo, {path.name: blob, "README.md": b"tiny\n"})
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_ENDPOINT", fake_hub.url)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_docker(bin_dir)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    run = tmp_path / "run"
    code = cli.main(["up", repo, "--quant", "F16", "--ctx-size", str(ctx), "--gpus", f"1x{mib}MiB",
                     "--dir", str(run), "--no-start"],
                    provider=lambda s: LiveProvider(s, free_disk=lambda _p: 10**15))
    assert code == 0, capsys.readouterr()
    service = next(iter(yaml.safe_load((run / "compose.yml").read_text(encoding="utf-8"))["services"].values()))
    words = service["command"]
    assert words[words.index("--n-cpu-moe") + 1] == str(planned.n_cpu_moe)
    assert words[words.index("--ctx-size") + 1] == str(ctx)
