"""resolve(): specs from the fake Hub, local folders and the HF cache; every stratum-1 reason."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest

from club3090.cli.model_json import spec_to_json, stop_to_json
from club3090.edges import derive as D
from club3090.edges import hub as H
from club3090.edges.resolve import resolve
from club3090.errors import HubUnreachable, InputError
from club3090.model.architecture import parse_config
from club3090.model.quantization import resolve_quantization
from club3090.model.spec import ModelSpec, RepoFile
from club3090.outcome import Reason, Stop, Stratum
from tests.fakehub import (
    FIXTURES,
    FakeHub,
    header_sum,
    safetensors_file,
    synth_table,
    table_from_index,
)


def _config(folder: str) -> dict[str, Any]:
    return json.loads((FIXTURES / folder / "config.json").read_text())


def _spec(result: ModelSpec | Stop) -> ModelSpec:
    assert isinstance(result, ModelSpec), result
    return result


def _stop(result: ModelSpec | Stop, reason: Reason) -> Stop:
    assert isinstance(result, Stop), result
    assert result.stratum is Stratum.DERIVER
    assert result.reason is reason, result
    return result


def _only_header_reads(hub: FakeHub) -> None:
    weights = [r for r in hub.log if r.path.endswith(".safetensors") or r.path.startswith("/cdn/")]
    assert weights, "no safetensors request at all"
    for r in weights:
        assert r.method == "GET"
        assert r.headers.get("range", "").startswith("bytes="), r
    for r in hub.requests(path_contains="/cdn/"):
        assert "authorization" not in r.headers  # another origin: the client drops the token


# ---------------------------------------------------------------------------------------------
# the seven families


def test_dense_llama_with_index_reads_headers_only(fake_hub: FakeHub) -> None:
    fake_hub.add_fixture("meta-llama--Llama-3.1-8B")
    spec = _spec(resolve("meta-llama/Llama-3.1-8B", fake_hub.settings()))
    index = json.loads((FIXTURES / "meta-llama--Llama-3.1-8B" / "model.safetensors.index.json").read_text())
    # the synthesised shapes reproduce the real checkpoint: header byte ranges == index total_size
    assert spec.weights_bytes == index["metadata"]["total_size"] == 16_060_522_496
    assert spec.dtype_bytes == {"BF16": spec.weights_bytes}
    a = spec.arch
    assert (a.architecture, a.model_type, a.num_hidden_layers, a.num_key_value_heads, a.head_dim) == (
        "LlamaForCausalLM", "llama", 32, 8, 128)
    assert spec.source == "hub" and spec.confidence == "estimated-lower-bound" and spec.curated is None
    assert spec.commit and len(spec.commit) == 40
    assert [f.name for f in spec.weight_files] == [f"model-0000{i}-of-00004.safetensors" for i in range(1, 5)]
    names = [f.name for f in spec.download_files]
    assert "model.safetensors.index.json" in names and "config.json" in names and "tokenizer.json" in names
    assert "README.md" not in names
    assert spec.footprint_bytes == sum(f.size_bytes for f in spec.download_files) > spec.weights_bytes
    assert spec.quantization is None and spec.compute_dtype == "bfloat16"
    assert not spec.requires_trust_remote_code and not spec.has_mtp_head and not spec.has_vision
    assert spec.max_ctx_supported == 131072 and spec.provenance["weights_bytes"] == "header"
    _only_header_reads(fake_hub)
    assert fake_hub.bytes_sent() < 2_000_000  # a 16 GB repo


def test_moe_mixtral_19_shards(fake_hub: FakeHub) -> None:
    folder = "mistralai--Mixtral-8x7B-Instruct-v0.1"
    fake_hub.add_fixture(folder)
    progress: list[tuple[int, int]] = []
    spec = _spec(resolve("mistralai/Mixtral-8x7B-Instruct-v0.1", fake_hub.settings(),
                          progress=lambda d, t: progress.append((d, t))))
    index = json.loads((FIXTURES / folder / "model.safetensors.index.json").read_text())
    tables = table_from_index(index, _config(folder))
    assert spec.weights_bytes == sum(header_sum(t) for t in tables.values()) == index["metadata"]["total_size"]
    assert spec.arch.num_experts == 8 and spec.arch.num_experts_per_tok == 2
    assert len(spec.weight_files) == 19
    assert progress[0] == (0, 19) and progress[-1] == (19, 19)
    _only_header_reads(fake_hub)


def test_mla_deepseek_v2_lite(fake_hub: FakeHub) -> None:
    folder = "deepseek-ai--DeepSeek-V2-Lite"
    table = synth_table(_config(folder))
    fake_hub.add_fixture(folder, tensors=table, shards=4)
    spec = _spec(resolve("deepseek-ai/DeepSeek-V2-Lite", fake_hub.settings()))
    assert spec.weights_bytes == header_sum(table)
    assert spec.arch.kv_lora_rank == 512 and spec.arch.qk_rope_head_dim == 64
    assert "mla" in spec.arch.layer_kinds
    assert spec.arch.num_experts == 64
    assert spec.requires_trust_remote_code  # auto_map
    assert len(spec.weight_files) == 4


def test_sliding_window_gemma2(fake_hub: FakeHub) -> None:
    folder = "google--gemma-2-2b-it"
    table = synth_table(_config(folder))
    fake_hub.add_fixture(folder, tensors=table)
    spec = _spec(resolve("google/gemma-2-2b-it", fake_hub.settings()))
    assert spec.weights_bytes == header_sum(table)
    assert spec.arch.sliding_window == 4096
    assert "sliding" in spec.arch.layer_kinds and "full" in spec.arch.layer_kinds
    assert [f.name for f in spec.weight_files] == ["model.safetensors"]


def test_hybrid_linear_attention_qwen36_with_mtp(fake_hub: FakeHub) -> None:
    folder = "Qwen--Qwen3.6-35B-A3B"
    table = synth_table(_config(folder), prefix="model.language_model.", fused_experts=True, mtp_layers=1)
    fake_hub.add_fixture(folder, tensors=table, shards=3)
    spec = _spec(resolve("Qwen/Qwen3.6-35B-A3B", fake_hub.settings()))
    assert spec.weights_bytes == header_sum(table)
    assert "gdn" in spec.arch.layer_kinds and "full" in spec.arch.layer_kinds
    assert spec.arch.num_experts == 256
    assert spec.has_mtp_head  # declared (mtp_num_hidden_layers) and mtp.* tensors present
    assert spec.has_vision
    assert spec.compute_dtype == "bfloat16"  # text_config.dtype


def test_mtp_declared_but_absent_is_no_mtp_head(fake_hub: FakeHub) -> None:
    folder = "Qwen--Qwen3.6-35B-A3B"
    fake_hub.add_fixture(folder, tensors=synth_table(_config(folder), prefix="model.language_model.",
                                                     fused_experts=True))
    assert not _spec(resolve("Qwen/Qwen3.6-35B-A3B", fake_hub.settings())).has_mtp_head


def test_multimodal_qwen25_vl(fake_hub: FakeHub) -> None:
    folder = "Qwen--Qwen2.5-VL-7B-Instruct"
    fake_hub.add_fixture(folder)
    spec = _spec(resolve("Qwen/Qwen2.5-VL-7B-Instruct", fake_hub.settings()))
    index = json.loads((FIXTURES / folder / "model.safetensors.index.json").read_text())
    assert spec.weights_bytes == sum(header_sum(t) for t in table_from_index(index, _config(folder)).values())
    assert spec.has_vision and spec.arch.architecture == "Qwen2_5_VLForConditionalGeneration"
    assert spec.arch.num_hidden_layers == 28 and spec.arch.num_key_value_heads == 4
    assert len(spec.weight_files) == 5


def _fp8_table(config: dict[str, Any]) -> dict[str, tuple[str, list[int]]]:
    out: dict[str, tuple[str, list[int]]] = {}
    for name, (_, shape) in synth_table(config).items():
        if name.endswith("proj.weight") and len(shape) == 2:
            out[name] = ("F8_E4M3", shape)
            out[name + "_scale_inv"] = ("BF16", [math.ceil(shape[0] / 128), math.ceil(shape[1] / 128)])
        else:
            out[name] = ("BF16", shape)
    return out


def test_quantized_fp8_block(fake_hub: FakeHub) -> None:
    folder = "Qwen--Qwen3-8B-FP8"
    table = _fp8_table(_config(folder))
    fake_hub.add_fixture(folder, tensors=table, shards=2)
    spec = _spec(resolve("Qwen/Qwen3-8B-FP8", fake_hub.settings()))
    assert spec.weights_bytes == header_sum(table)
    assert spec.quantization is not None
    assert (spec.quantization.method, spec.quantization.bits) == ("fp8", 8)
    assert set(spec.dtype_bytes) == {"F8_E4M3", "BF16"}
    assert spec.dtype_bytes["F8_E4M3"] > spec.dtype_bytes["BF16"]
    assert spec.provenance["quantization"] == "config"


def _gptq_table(config: dict[str, Any]) -> dict[str, tuple[str, list[int]]]:
    out: dict[str, tuple[str, list[int]]] = {}
    for name, (dtype, shape) in synth_table(config, dtype="F16").items():
        if name.endswith("proj.weight"):
            rows, cols = shape  # [out, in]
            base = name.removesuffix(".weight")
            out[f"{base}.qweight"] = ("I32", [cols // 8, rows])
            out[f"{base}.qzeros"] = ("I32", [1, rows // 8])
            out[f"{base}.scales"] = ("F16", [1, rows])
            out[f"{base}.g_idx"] = ("I32", [cols])
        else:
            out[name] = (dtype, shape)
    return out


def test_quantized_gptq_single_file_16gb(fake_hub: FakeHub) -> None:
    folder = "TheBloke--Wizard-Vicuna-30B-Uncensored-GPTQ"
    table = _gptq_table(_config(folder))
    fake_hub.add_fixture(folder, tensors=table)
    spec = _spec(resolve("TheBloke/Wizard-Vicuna-30B-Uncensored-GPTQ", fake_hub.settings()))
    assert spec.weights_bytes == header_sum(table) > 15 * 2**30  # int4 packed, ~16.9 GB like the real one
    assert (spec.quantization.method, spec.quantization.bits) == ("gptq", 4)
    assert "quantize_config.json" in [f.name for f in spec.download_files]
    _only_header_reads(fake_hub)
    assert fake_hub.bytes_sent() < 2_000_000


def test_quantized_modelopt_nvfp4_with_kv_scheme(fake_hub: FakeHub) -> None:
    folder = "nvidia--Qwen3.6-35B-A3B-NVFP4"
    table = {"model.language_model.layers.0.mlp.experts.gate_up_proj": ("U8", [256, 1024, 1024]),
             "model.language_model.layers.0.mlp.experts.gate_up_proj_scale": ("F8_E4M3", [256, 1024, 128]),
             "model.language_model.layers.0.self_attn.q_proj.weight": ("F8_E4M3", [8192, 2048]),
             "model.language_model.embed_tokens.weight": ("BF16", [248320, 2048])}
    fake_hub.add_fixture(folder, tensors=table)
    spec = _spec(resolve("nvidia/Qwen3.6-35B-A3B-NVFP4", fake_hub.settings()))
    q = spec.quantization
    assert q is not None and q.method == "modelopt" and q.scheme == "MIXED_PRECISION"
    assert q.bits == 8  # widest config group (FP8 attention); experts are NVFP4
    assert q.kv_cache_scheme == "fp8"  # hf_quant_config.json kv_cache_quant_algo
    assert spec.dtype_bytes["U8"] == 256 * 1024 * 1024
    assert "hf_quant_config.json" in [f.name for f in spec.download_files]


# ---------------------------------------------------------------------------------------------
# stratum-1 reasons


def test_repo_not_found(fake_hub: FakeHub) -> None:
    stop = _stop(resolve("nobody/nothing-here", fake_hub.settings()), Reason.REPO_NOT_FOUND)
    assert stop.sub_reason == "not-found" and stop.detail["token_hint"] is True  # no token: it may be private
    fake_hub.accept_token("hf_acme")
    stop = _stop(resolve("nobody/nothing-here", fake_hub.settings(token="hf_acme")), Reason.REPO_NOT_FOUND)
    assert stop.sub_reason == "not-found" and stop.detail["token_hint"] is False


def test_private_repo_without_token_is_not_found(fake_hub: FakeHub) -> None:
    fake_hub.add_fixture("meta-llama--Llama-3.2-3B-Instruct", repo_id="acme/private-llama", private=True)
    _stop(resolve("acme/private-llama", fake_hub.settings()), Reason.REPO_NOT_FOUND)
    fake_hub.accept_token("hf_acme")
    _spec(resolve("acme/private-llama", fake_hub.settings(token="hf_acme")))


def test_revision_not_found(fake_hub: FakeHub) -> None:
    fake_hub.add_fixture("google--gemma-2b-it")
    stop = _stop(resolve("google/gemma-2b-it@no-such-branch", fake_hub.settings()), Reason.REPO_NOT_FOUND)
    assert stop.sub_reason == "revision-not-found"


def test_revision_is_resolved(fake_hub: FakeHub) -> None:
    repo = fake_hub.add_fixture("google--gemma-2b-it", revisions={"refs/pr/1": "a" * 40})
    spec = _spec(resolve("google/gemma-2b-it@refs/pr/1", fake_hub.settings()))
    assert spec.revision == "refs/pr/1" and spec.commit == "a" * 40 != repo.commit
    assert fake_hub.requests(path_contains="/revision/refs/pr/1")


def test_gated_without_token(fake_hub: FakeHub) -> None:
    fake_hub.add_fixture("meta-llama--Llama-3.1-8B", gated=True)
    stop = _stop(resolve("meta-llama/Llama-3.1-8B", fake_hub.settings()), Reason.GATED_NO_TOKEN)
    assert (stop.sub_reason, stop_to_json(stop)["reason"]) == ("gated", "gated-no-token")


def test_gated_with_a_token_not_granted_is_not_found(fake_hub: FakeHub) -> None:
    fake_hub.add_fixture("meta-llama--Llama-3.1-8B", gated=True)
    _stop(resolve("meta-llama/Llama-3.1-8B", fake_hub.settings(token="hf_not_granted")), Reason.REPO_NOT_FOUND)
    fake_hub.accept_token("hf_granted")
    assert _spec(resolve("meta-llama/Llama-3.1-8B", fake_hub.settings(token="hf_granted"))).weights_bytes


def test_gguf_only_repo(fake_hub: FakeHub) -> None:
    fake_hub.add_repo("TheBloke/Llama-2-7B-GGUF", {
        "README.md": b"# gguf\n", "llama-2-7b.Q4_K_M.gguf": b"GGUF" + bytes(60),
        "llama-2-7b.Q8_0.gguf": b"GGUF" + bytes(60)})
    stop = _stop(resolve("TheBloke/Llama-2-7B-GGUF", fake_hub.settings()), Reason.UNSUPPORTED_FORMAT)
    assert stop.sub_reason == "gguf-only"
    assert stop.detail["gguf_files"] == ["llama-2-7b.Q4_K_M.gguf", "llama-2-7b.Q8_0.gguf"]
    assert "llama.cpp" in stop.detail["hint"]


def test_gguf_with_config_but_no_safetensors(fake_hub: FakeHub) -> None:
    fake_hub.add_fixture("Qwen--Qwen3-0.6B", tensors={"x": ("BF16", [4])},
                         extra_files={"qwen3-0.6b-q8_0.gguf": b"GGUF0000"}, drop_files=("model.safetensors",))
    stop = _stop(resolve("Qwen/Qwen3-0.6B", fake_hub.settings()), Reason.UNSUPPORTED_FORMAT)
    assert stop.sub_reason == "gguf-only" and stop.detail["gguf_files"] == ["qwen3-0.6b-q8_0.gguf"]


def test_missing_config_json(fake_hub: FakeHub) -> None:
    fake_hub.add_fixture("Qwen--Qwen3-0.6B", tensors={"x": ("BF16", [4])}, drop_files=("config.json",))
    stop = _stop(resolve("Qwen/Qwen3-0.6B", fake_hub.settings()), Reason.UNSUPPORTED_FORMAT)
    assert stop.sub_reason == "no-config-json"


def test_adapter_only_repo_is_unsupported(fake_hub: FakeHub) -> None:
    fake_hub.add_fixture("Qwen--Qwen3-0.6B", tensors={"x": ("BF16", [4])}, drop_files=("model.safetensors",),
                         extra_files={"adapter_model.safetensors": safetensors_file("a", {"x": ("BF16", [4])})})
    stop = _stop(resolve("Qwen/Qwen3-0.6B", fake_hub.settings()), Reason.UNSUPPORTED_FORMAT)
    assert stop.sub_reason == "no-safetensors"


def test_ambiguous_two_files_without_index(fake_hub: FakeHub) -> None:
    # a Mistral repo that kept consolidated.safetensors next to an un-indexed model.safetensors
    fake_hub.add_fixture("mistralai--Mistral-7B-v0.1", tensors={"x": ("BF16", [4])},
                         extra_files={"consolidated.safetensors": safetensors_file("c", {"x": ("BF16", [4])})})
    stop = _stop(resolve("mistralai/Mistral-7B-v0.1", fake_hub.settings()), Reason.AMBIGUOUS_WEIGHT_SET)
    assert stop.detail["files"] == ["consolidated.safetensors", "model.safetensors"]


def test_ambiguous_two_indexes(fake_hub: FakeHub) -> None:
    fake_hub.add_fixture("mistralai--Mistral-7B-Instruct-v0.3", extra_files={
        "consolidated.safetensors.index.json": b'{"weight_map": {"x": "consolidated.safetensors"}}'})
    _stop(resolve("mistralai/Mistral-7B-Instruct-v0.3", fake_hub.settings()), Reason.AMBIGUOUS_WEIGHT_SET)


def test_index_plus_consolidated_selects_the_indexed_shards(fake_hub: FakeHub) -> None:
    fake_hub.add_fixture("mistralai--Mistral-7B-Instruct-v0.3", extra_files={
        "consolidated.safetensors": safetensors_file("c", {"x": ("BF16", [4096, 4096])})})
    spec = _spec(resolve("mistralai/Mistral-7B-Instruct-v0.3", fake_hub.settings()))
    assert "consolidated.safetensors" not in [f.name for f in spec.weight_files]
    assert len(spec.weight_files) == 3


def test_malformed_config_is_quant_dtype_unknown(fake_hub: FakeHub) -> None:
    fake_hub.add_fixture("Qwen--Qwen3-0.6B", tensors={"x": ("BF16", [4])},
                         extra_files={"config.json": b'{"architectures": ["Qwen3ForCausalLM"], '})
    stop = _stop(resolve("Qwen/Qwen3-0.6B", fake_hub.settings()), Reason.QUANT_DTYPE_UNKNOWN)
    assert stop.sub_reason == "malformed-config" and stop.detail["file"] == "Qwen/Qwen3-0.6B/config.json"


def test_known_quant_method_without_bits(fake_hub: FakeHub) -> None:
    config = _config("Qwen--Qwen3-0.6B")
    config["quantization_config"] = {"quant_method": "compressed-tensors", "format": "pack-quantized"}
    fake_hub.add_fixture("Qwen--Qwen3-0.6B", tensors={"x": ("I32", [4])},
                         extra_files={"config.json": json.dumps(config).encode()})
    stop = _stop(resolve("Qwen/Qwen3-0.6B", fake_hub.settings()), Reason.QUANT_DTYPE_UNKNOWN)
    assert stop.sub_reason == "unknown-bits"


def test_no_dtype_anywhere(fake_hub: FakeHub) -> None:
    config = {k: v for k, v in _config("Qwen--Qwen3-0.6B").items() if k != "torch_dtype"}
    fake_hub.add_fixture("Qwen--Qwen3-0.6B", tensors={"x": ("I32", [4])},
                         extra_files={"config.json": json.dumps(config).encode()})
    stop = _stop(resolve("Qwen/Qwen3-0.6B", fake_hub.settings()), Reason.QUANT_DTYPE_UNKNOWN)
    assert stop.sub_reason == "no-dtype"


def test_dtype_from_header_when_config_has_none(fake_hub: FakeHub) -> None:
    config = {k: v for k, v in _config("Qwen--Qwen3-0.6B").items() if k != "torch_dtype"}
    fake_hub.add_fixture("Qwen--Qwen3-0.6B", tensors={"x": ("F16", [4]), "y": ("BF16", [2])},
                         extra_files={"config.json": json.dumps(config).encode()})
    spec = _spec(resolve("Qwen/Qwen3-0.6B", fake_hub.settings()))
    assert spec.compute_dtype == "float16" and spec.provenance["compute_dtype"] == "header"


# ---------------------------------------------------------------------------------------------
# local folders and the HF cache: the same spec


TINY = {"model.embed_tokens.weight": ("BF16", [1000, 64]), "model.layers.0.self_attn.q_proj.weight": ("BF16", [64, 64]),
        "model.layers.0.mlp.down_proj.weight": ("BF16", [64, 192]), "model.norm.weight": ("BF16", [64]),
        "lm_head.weight": ("BF16", [1000, 64])}


def _comparable(spec: ModelSpec) -> dict[str, Any]:
    data = spec_to_json(spec)
    for key in ("source", "ref", "revision", "commit", "local_path", "provenance"):
        data.pop(key)
    return data


def _materialise(hub: FakeHub, repo_id: str, folder: Path) -> Path:
    folder.mkdir(parents=True)
    for f in hub.repos[repo_id].files.values():
        (folder / f.name).write_bytes(b"".join(f.chunks(0, f.size - 1)))
    return folder


def test_same_spec_from_hub_local_folder_and_cache(fake_hub: FakeHub, tmp_path: Path) -> None:
    from huggingface_hub import snapshot_download

    fake_hub.add_fixture("Qwen--Qwen3-0.6B", tensors=TINY, shards=2)
    settings = fake_hub.settings()
    from_hub = _spec(resolve("Qwen/Qwen3-0.6B", settings))

    local = _materialise(fake_hub, "Qwen/Qwen3-0.6B", tmp_path / "snap")
    from_local = _spec(resolve(str(local), settings))
    assert from_local.source == "local" and from_local.local_path == local

    snapshot_download("Qwen/Qwen3-0.6B", cache_dir=str(settings.hub_cache), endpoint=fake_hub.url, token=False)
    fake_hub.clear_log()
    offline = fake_hub.settings(offline=True)
    from_cache = _spec(resolve("Qwen/Qwen3-0.6B", offline))
    assert from_cache.source == "cache" and from_cache.commit == from_hub.commit
    assert fake_hub.log == []  # offline: no request at all

    assert _comparable(from_hub) == _comparable(from_local) == _comparable(from_cache)
    assert from_hub.weights_bytes == header_sum(TINY)


def test_offline_cache_miss_is_unreachable(fake_hub: FakeHub) -> None:
    with pytest.raises(HubUnreachable) as info:
        resolve("Qwen/Qwen3-0.6B", fake_hub.settings(offline=True))
    assert info.value.repo_id == "Qwen/Qwen3-0.6B"
    assert fake_hub.log == []  # offline: the miss is not a Hub request


def test_local_folder_stops(tmp_path: Path, fake_hub: FakeHub) -> None:
    settings = fake_hub.settings()
    _stop(resolve(str(tmp_path / "missing"), settings), Reason.REPO_NOT_FOUND)
    (tmp_path / "empty").mkdir()
    assert _stop(resolve(str(tmp_path / "empty"), settings),
                 Reason.UNSUPPORTED_FORMAT).sub_reason == "no-config-json"
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text("{nope")
    _stop(resolve(str(bad), settings), Reason.QUANT_DTYPE_UNKNOWN)
    assert fake_hub.log == []


def test_local_folder_malformed_header_names_the_file(tmp_path: Path, fake_hub: FakeHub) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(_config("Qwen--Qwen3-0.6B")))
    (folder / "model.safetensors").write_bytes((12).to_bytes(8, "little") + b"{not json!!}")
    with pytest.raises(InputError) as info:
        resolve(str(folder), fake_hub.settings())
    assert info.value.file == str(folder / "model.safetensors")


def test_tensor_stored_in_two_shards_is_refused(tmp_path: Path, fake_hub: FakeHub) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(_config("Qwen--Qwen3-0.6B")))
    shards = {"model-00001-of-00002.safetensors": {"a": ("BF16", [8]), "w": ("BF16", [8])},
              "model-00002-of-00002.safetensors": {"w": ("BF16", [8])}}
    weight_map = {}
    for name, table in shards.items():
        f = safetensors_file(name, table)
        (folder / name).write_bytes(f.prefix + bytes(f.size - len(f.prefix)))
        weight_map.update({t: name for t in table})
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    with pytest.raises(InputError) as info:
        resolve(str(folder), fake_hub.settings())
    assert info.value.file == str(folder / "model-00002-of-00002.safetensors")


# ---------------------------------------------------------------------------------------------
# Tier-1 (curated) hits resolve with no network


def _catalog(fmt: str = "awq", kind: str = "main") -> Any:
    variant = SimpleNamespace(id="awq-int4", hf_repos=("Acme/Model-AWQ",), format=fmt, quantization="awq",
                              size_bytes=19_000_000_000, status="ok", kind=kind, revision=None,
                              files=("model-Q4_K_M.gguf",) if fmt == "gguf" else ())
    model = SimpleNamespace(id="acme-model", hf_config=_config("Qwen--Qwen3-32B"), max_ctx_supported=40960,
                            weights={"awq-int4": variant})

    class Cat:
        profiles: ClassVar[dict[str, Any]] = {}
        models: ClassVar[dict[str, Any]] = {model.id: model}

        def find_variant(self, repo_id: str) -> Any:
            bare = repo_id.partition("@")[0].lower()
            return (model, variant) if bare in {r.lower() for r in variant.hf_repos} else None

    return Cat()


def test_curated_hit_needs_no_network(fake_hub: FakeHub) -> None:
    spec = _spec(resolve("acme/model-awq", fake_hub.settings(), _catalog()))
    assert spec.confidence == "exact" and spec.source == "catalog"
    assert spec.curated is not None and spec.curated.variant_id == "awq-int4"
    assert spec.weights_bytes == spec.footprint_bytes == 19_000_000_000
    assert spec.quantization.method == "awq" and spec.quantization.bits == 4
    assert spec.arch.architecture == "Qwen3ForCausalLM" and spec.max_ctx_supported == 40960
    assert fake_hub.log == []


def test_curated_gguf_variant_is_unsupported(fake_hub: FakeHub) -> None:
    stop = _stop(resolve("Acme/Model-AWQ", fake_hub.settings(), _catalog(fmt="gguf", kind="gguf")),
                 Reason.UNSUPPORTED_FORMAT)
    assert stop.sub_reason == "gguf-only"


def test_non_curated_falls_through_to_the_hub(fake_hub: FakeHub) -> None:
    stop = _stop(resolve("acme/other", fake_hub.settings(), _catalog()), Reason.REPO_NOT_FOUND)
    assert fake_hub.requests(path_contains="/api/models/acme/other"), (stop, fake_hub.log)


# ---------------------------------------------------------------------------------------------
# the client seam


class FakeSource:
    """What another engineer's test can pass as ``client=`` instead of a server."""

    def __init__(self, config: dict[str, Any], table: dict[str, tuple[str, list[int]]]) -> None:
        self.file = safetensors_file("model.safetensors", table)
        self.config = config

    def repo_info(self, repo_id: str, revision: str | None) -> H.RepoInfo:
        from club3090.model.spec import RepoFile

        return H.RepoInfo(repo_id=repo_id, revision=revision, commit="c" * 40, files=(
            RepoFile("config.json", 100), RepoFile("model.safetensors", self.file.size)))

    def fetch_json(self, repo_id: str, filename: str, revision: str | None) -> Any:
        assert filename == "config.json"
        return self.config

    def read_headers(self, repo_id: str, files: Any, revision: str | None, progress: Any = None, *,
                     index: Any = None) -> Any:
        from tests.safetensors_fixtures import parse_file_bytes

        return {f.name: parse_file_bytes(self.file.prefix, file=f.name) for f in files}


def test_injectable_client(tmp_path: Path) -> None:
    from club3090.settings import Settings

    source = FakeSource(_config("Qwen--Qwen3-0.6B"), TINY)
    spec = _spec(resolve("any/repo", Settings(hf_home=tmp_path), hub=source))
    assert spec.weights_bytes == header_sum(TINY) and spec.footprint_bytes == 100 + source.file.size


# ---------------------------------------------------------------------------------------------
# quantization resolution on the real fixture configs (pure)


def _quant_files(folder: str) -> dict[str, Any]:
    out = {}
    for name in ("quantize_config.json", "hf_quant_config.json"):
        if (FIXTURES / folder / name).exists():
            out[name] = json.loads((FIXTURES / folder / name).read_text())
    return out


@pytest.mark.parametrize("folder,method,bits,scheme,kv", [
    ("TheBloke--Llama-2-13B-chat-GPTQ", "gptq", 4, None, None),
    ("TheBloke--Wizard-Vicuna-30B-Uncensored-GPTQ", "gptq", 4, None, None),
    ("Qwen--Qwen3-8B-FP8", "fp8", 8, "e4m3", None),
    ("meta-llama--Llama-3.1-405B-Instruct-FP8", "fbgemm_fp8", 8, None, None),
    ("nvidia--Llama-3.1-70B-Instruct-FP8", "modelopt", 8, "FP8", "fp8"),
    ("nvidia--Qwen3.6-35B-A3B-NVFP4", "modelopt", 8, "MIXED_PRECISION", "fp8"),
    ("RedHatAI--DeepSeek-V4-Flash-NVFP4-FP8", "compressed-tensors", 8, "mixed-precision", None),
    ("reubzdubz--Molmo7B_D_NF4Quant", "bitsandbytes", 4, "nf4", None),
    ("openai--gpt-oss-20b", "mxfp4", 4, None, None),
    ("deepseek-ai--DeepSeek-V3", "fp8", 8, "e4m3", None),
])
def test_quantization_of_fixture_configs(folder: str, method: str, bits: int, scheme: str | None,
                                         kv: str | None) -> None:
    result = resolve_quantization(parse_config(_config(folder)), _quant_files(folder), {})
    assert not isinstance(result, Stop), result
    quant, _, provenance = result
    assert quant is not None
    assert (quant.method, quant.bits, quant.scheme, quant.kv_cache_scheme) == (method, bits, scheme, kv)
    assert provenance["quantization"] == "config"


@pytest.mark.parametrize("qc,method,bits", [
    ({"quant_method": "awq", "bits": 4, "group_size": 128}, "awq", 4),
    ({"quant_method": "awq", "w_bit": 4}, "awq", 4),
    ({"quant_method": "intel/auto-round", "bits": 4}, "auto-round", 4),
    ({"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {"num_bits": 4}}},
      "kv_cache_scheme": {"num_bits": 8, "type": "float"}}, "compressed-tensors", 4),
    ({"load_in_8bit": True, "quant_method": "bitsandbytes"}, "bitsandbytes", 8),
    ({"quant_method": "modelopt", "quant_algo": "NVFP4"}, "modelopt", 4),
])
def test_quantization_variants(qc: dict[str, Any], method: str, bits: int) -> None:
    result = resolve_quantization(parse_config({"torch_dtype": "bfloat16", "quantization_config": qc}), {}, {})
    assert not isinstance(result, Stop)
    assert (result[0].method, result[0].bits) == (method, bits)
    assert result[1] == "bfloat16"


def test_unknown_method_without_bits_falls_back_to_dtype() -> None:
    result = resolve_quantization(parse_config({"torch_dtype": "float16", "quantization_config": {"quant_method": "zzz"}}), {}, {})
    assert not isinstance(result, Stop)
    assert result[0].method == "zzz" and result[0].bits is None and result[1] == "float16"


def test_weight_set_selection_rules() -> None:
    def no_index(name: str) -> Any:
        raise AssertionError(name)

    ws = D.select_weight_set(["model.safetensors", "mtp.safetensors", "lora/adapter.safetensors",
                              "adapter_model.safetensors", "sub/model.safetensors"], no_index)
    assert isinstance(ws, D.WeightSet) and ws.files == ("model.safetensors", "mtp.safetensors")
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    ws = D.select_weight_set(["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                              "model.safetensors.index.json", "model-nextn.safetensors"], lambda n: index)
    assert ws.files == ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                        "model-nextn.safetensors")
    stop = D.select_weight_set(["model-00001-of-00002.safetensors", "model.safetensors.index.json"], lambda n: index)
    assert isinstance(stop, Stop) and stop.sub_reason == "index-missing-shards"


# ---------------------------------------------------------------------------------------------
# a listed file the Hub does not serve: the sub-reason names its kind, the reason stays bare


class _MissingSource(FakeSource):
    def __init__(self, config: dict[str, Any], table: dict[str, tuple[str, list[int]]], missing: str) -> None:
        super().__init__(config, table)
        self.missing = missing

    def fetch_json(self, repo_id: str, filename: str, revision: str | None) -> Any:
        from club3090.errors import EntryNotFound

        if filename == self.missing:
            raise EntryNotFound(repo_id, "file not found", file=filename)
        return self.config

    def read_headers(self, repo_id: str, files: Any, revision: str | None, progress: Any = None, *,
                     index: Any = None) -> Any:
        from club3090.errors import EntryNotFound

        if any(f.name == self.missing for f in files):
            raise EntryNotFound(repo_id, "file not found", file=self.missing)
        return super().read_headers(repo_id, files, revision, progress, index=index)


@pytest.mark.parametrize("missing,sub_reason", [
    ("config.json", "no-config-json"),
    ("quantize_config.json", "missing-quant-config"),
    ("model.safetensors", "missing-shard"),
])
def test_a_listed_file_the_hub_does_not_serve_is_named(tmp_path: Path, missing: str, sub_reason: str) -> None:
    from club3090.settings import Settings

    source = _MissingSource(_config("Qwen--Qwen3-0.6B"), TINY, missing)
    info = source.repo_info
    source.repo_info = lambda repo_id, revision: H.RepoInfo(  # type: ignore[method-assign]
        repo_id=repo_id, revision=revision, commit="c" * 40,
        files=(*info(repo_id, revision).files, *((RepoFile(missing, 10),) if missing.endswith("config.json")
                                                 and missing != "config.json" else ())))
    stop = _stop(resolve("any/repo", Settings(hf_home=tmp_path), hub=source), Reason.UNSUPPORTED_FORMAT)
    assert (stop.sub_reason, stop.detail["file"]) == (sub_reason, missing)
    assert stop_to_json(stop)["reason"] == "unsupported-format"


def test_a_missing_index_is_not_reported_as_a_missing_config(fake_hub: FakeHub) -> None:
    from club3090.edges.hub import HubClient
    from club3090.errors import EntryNotFound

    fake_hub.add_fixture("Qwen--Qwen3-0.6B", tensors=TINY, shards=2)
    client = HubClient(fake_hub.settings())
    real = client.fetch_json

    def fetch_json(repo_id: str, filename: str, revision: str | None, **kw: Any) -> Any:
        if filename == "model.safetensors.index.json":
            raise EntryNotFound(repo_id, "file not found", file=filename)
        return real(repo_id, filename, revision, **kw)

    client.fetch_json = fetch_json  # type: ignore[method-assign]
    stop = _stop(resolve("Qwen/Qwen3-0.6B", fake_hub.settings(), hub=client), Reason.UNSUPPORTED_FORMAT)
    assert (stop.sub_reason, stop.detail["file"]) == ("missing-index", "model.safetensors.index.json")


def test_derive_reads_dtype_auto_map_and_mtp_through_the_architecture(tmp_path: Path) -> None:
    """One reader of config.json: what Architecture says is what the spec says."""
    from club3090.settings import Settings

    config = {**_config("Qwen--Qwen3-0.6B"), "auto_map": {"AutoModel": "m.M"}, "torch_dtype": "torch.float16"}
    spec = _spec(resolve("any/repo", Settings(hf_home=tmp_path), hub=FakeSource(config, TINY)))
    assert spec.requires_trust_remote_code is spec.arch.auto_map is True
    assert spec.compute_dtype == "float16"
    assert spec.has_mtp_head is False and spec.arch.mtp_layers == 0
