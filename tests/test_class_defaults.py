"""A multimodal wrapper whose text_config leans on transformers' class defaults is priced (issue 24, item 6)."""

from __future__ import annotations

import json

from club3090.cli import main
from club3090.fit.memory import FitResult, ServeShape, predict
from club3090.model.architecture import parse_config
from club3090.model.class_defaults import complete_text_config
from club3090.units import GiB

# llava-hf/llava-v1.6-mistral-7b-hf's config.json (its sizing keys): the text model states only
# what differs from MistralConfig, so hidden_size, heads and layers are the class's
LLAVA_16_MISTRAL = {
    "architectures": ["LlavaNextForConditionalGeneration"],
    "model_type": "llava_next",
    "image_token_index": 32000,
    "torch_dtype": "float16",
    "vocab_size": 32064,
    "text_config": {
        "_name_or_path": "mistralai/Mistral-7B-Instruct-v0.2",
        "architectures": ["MistralForCausalLM"],
        "intermediate_size": 14336,
        "max_position_embeddings": 32768,
        "model_type": "mistral",
        "num_key_value_heads": 8,
        "rms_norm_eps": 1e-05,
        "rope_theta": 1000000.0,
        "sliding_window": None,
        "torch_dtype": "bfloat16",
        "vocab_size": 32064,
    },
    "vision_config": {"hidden_size": 1024, "image_size": 336, "intermediate_size": 4096,
                      "model_type": "clip_vision_model", "num_attention_heads": 16, "num_hidden_layers": 24,
                      "patch_size": 14, "projection_dim": 768, "vocab_size": 32000},
}


def test_the_llava_16_text_config_is_completed_and_the_filled_keys_are_said():
    arch = parse_config(LLAVA_16_MISTRAL)
    assert arch.unpriceable_reason is None
    assert (arch.hidden_size, arch.num_hidden_layers, arch.num_attention_heads, arch.num_key_value_heads,
            arch.head_dim, arch.vocab_size) == (4096, 32, 32, 8, 128, 32064)
    assert arch.sliding_window is None                 # stated null: the class's 4096 does not apply
    note = next(n for n in arch.notes if "class defaults" in n)
    assert "hidden_size" in note and "num_hidden_layers" in note and "num_attention_heads" in note
    assert "vocab_size" not in note and "intermediate_size" not in note
    assert arch.class_defaults == ("hidden_size", "num_attention_heads", "num_hidden_layers")


def test_the_llava_16_config_is_priced():
    arch = parse_config(LLAVA_16_MISTRAL)
    result = predict(arch, weights_bytes=int(15.1 * GiB), gpu_memory_bytes=[80 * GiB],
                     shape=ServeShape(vllm_version="0.19.0", max_model_len=32768))
    assert isinstance(result, FitResult) and result.raw_verdict != "wont-fit"
    # 32 layers x 8 KV heads x (128 + 128) x 2 B
    assert result.kv_bytes_per_token == 32 * 8 * 256 * 2
    assert any("class defaults" in n for n in result.notes)


def test_a_complete_or_unknown_text_config_is_left_alone():
    full = dict(LLAVA_16_MISTRAL, text_config=dict(LLAVA_16_MISTRAL["text_config"], hidden_size=4096,
                                                   num_hidden_layers=32, num_attention_heads=32))
    assert complete_text_config(full) == (full, (), None)
    odd = dict(LLAVA_16_MISTRAL, text_config={"model_type": "not-a-class"})
    assert complete_text_config(odd) == (odd, (), None)
    plain = {"model_type": "mistral", "architectures": ["MistralForCausalLM"]}
    assert complete_text_config(plain) == (plain, (), None)
    # a LLaVA-1.5 wrapper whose text_config names no type builds LlamaConfig
    bare = {"model_type": "llava", "architectures": ["LlavaForConditionalGeneration"], "text_config": {}}
    arch = parse_config(bare)
    assert (arch.hidden_size, arch.num_hidden_layers, arch.intermediate_size, arch.vocab_size) == (4096, 32, 11008,
                                                                                                   32000)


def test_pull_names_the_filled_keys_in_a_notice(fake_hub, monkeypatch, capsys):
    from tests.fakehub import safetensors_file, synth_table

    monkeypatch.setenv("HF_ENDPOINT", fake_hub.url)
    tensors = synth_table(complete_text_config(LLAVA_16_MISTRAL)[0])
    fake_hub.add_repo("llava-hf/llava-v1.6-mistral-7b-hf", {
        "config.json": json.dumps(LLAVA_16_MISTRAL).encode(),
        "model.safetensors": safetensors_file("model.safetensors", tensors)})
    main(["pull", "llava-hf/llava-v1.6-mistral-7b-hf", "--gpus", "1xH100-80GB", "--json", "--dry-run"])
    out = json.loads(capsys.readouterr().out)
    assert "class-defaults" in out["notice_codes"]
    assert any("hidden_size" in str(n) and "class defaults" in str(n) for n in out["notices"])


def test_kv_calc_prices_the_llava_folder(tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps(LLAVA_16_MISTRAL))
    code = main(["kv-calc", str(tmp_path), "--gpus", "1xH100-80GB", "--vllm-version", "0.19.0",
                 "--max-model-len", "32768", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["raw_verdict"] != "wont-fit"
    assert any("class defaults" in n for n in out["notes"])
