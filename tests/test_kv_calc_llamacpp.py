"""`club3090 kv-calc` on GGUF models: llama.cpp's memory model, never vLLM's, labelled `estimated`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from club3090.cli import main
from club3090.cli.exit_codes import UNAVAILABLE
from tests.fakehub import FakeFile
from tests.gguf_fixtures import Q, Spec, header_only, write

# Qwen3.6-27B's geometry as llama.cpp's qwen35 GGUFs write it (hybrid: 1 attention layer in 4)
N_LAYER, HIDDEN, VOCAB, FF = 64, 5120, 248320, 17408
QWEN35 = {
    "qwen35.block_count": N_LAYER, "qwen35.context_length": 262144, "qwen35.embedding_length": HIDDEN,
    "qwen35.feed_forward_length": FF, "qwen35.attention.head_count": 24, "qwen35.attention.head_count_kv": 4,
    "qwen35.attention.key_length": 256, "qwen35.attention.value_length": 256, "qwen35.ssm.conv_kernel": 4,
    "qwen35.ssm.state_size": 128, "qwen35.ssm.group_count": 16, "qwen35.ssm.time_step_rank": 48,
    "qwen35.ssm.inner_size": 6144, "qwen35.full_attention_interval": 4, "general.file_type": 15,
}


def _qwen35_tensors() -> list[tuple[str, tuple[int, ...], Q]]:
    out: list[tuple[str, tuple[int, ...], Q]] = [("token_embd.weight", (HIDDEN, VOCAB), Q.Q4_K),
                                                   ("output_norm.weight", (HIDDEN,), Q.F32),
                                                   ("output.weight", (HIDDEN, VOCAB), Q.Q6_K)]
    for i in range(N_LAYER):
        b = f"blk.{i}"
        if (i + 1) % 4 == 0:
            out += [(f"{b}.attn_q.weight", (HIDDEN, 12288), Q.Q4_K), (f"{b}.attn_k.weight", (HIDDEN, 1024), Q.Q4_K),
                    (f"{b}.attn_v.weight", (HIDDEN, 1024), Q.Q6_K), (f"{b}.attn_output.weight", (6144, HIDDEN), Q.Q4_K)]
        else:
            out += [(f"{b}.attn_qkv.weight", (HIDDEN, 10240), Q.Q4_K), (f"{b}.attn_gate.weight", (HIDDEN, 6144), Q.Q4_K),
                    (f"{b}.ssm_out.weight", (6144, HIDDEN), Q.Q4_K), (f"{b}.ssm_conv1d.weight", (4, 10240), Q.F32)]
        out += [(f"{b}.attn_norm.weight", (HIDDEN,), Q.F32), (f"{b}.ffn_gate.weight", (HIDDEN, FF), Q.Q4_K),
                (f"{b}.ffn_up.weight", (HIDDEN, FF), Q.Q4_K), (f"{b}.ffn_down.weight", (FF, HIDDEN), Q.Q6_K)]
    return out


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict]:
    code = main(["kv-calc", *argv, "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out)


def test_local_gguf_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (path,) = write(tmp_path, "m", Spec(n_layer=3, n_head_kv=2, weight_type=Q.Q4_K))
    code, doc = _run(capsys, str(path), "-c", "8000", "-ctk", "q8_0", "-ctv", "q4_0", "--gpus", "1x3090")
    assert code == 0 and doc["engine"] == "llama.cpp" and doc["confidence"] == "estimated"
    kv = doc["kv"]
    assert kv["cells"] == 8192
    assert kv["k_bytes"] == 3 * (128 // 32 * 34) * 8192 and kv["v_bytes"] == 3 * (128 // 32 * 18) * 8192
    gpu, host = doc["devices"]
    assert gpu["name"] == "CUDA0" and gpu["kv_bytes"] == kv["total_bytes"] and host["name"] == "CPU"
    assert gpu["weights_bytes"] + host["weights_bytes"] == doc["weights_bytes"]


@pytest.fixture
def qwen_gguf_hub(fake_hub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    header, size = header_only("qwen35", QWEN35, _qwen35_tensors(), tmp_path / "h.gguf")
    fake_hub.add_repo("unsloth/Qwen3.6-27B-MTP-GGUF",
                      {"Qwen3.6-27B-Q4_K_M.gguf": FakeFile(name="", prefix=header, size=size, lfs=True)})
    monkeypatch.setenv("HF_ENDPOINT", fake_hub.url)
    return fake_hub, size


def test_llamacpp_profile_uses_llamacpp_model(qwen_gguf_hub, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    hub, size = qwen_gguf_hub
    code, doc = _run(capsys, "llamacpp/default")
    assert doc["engine"] == "llama.cpp" and doc["confidence"] == "estimated" and doc["profile"] == "llamacpp/default"
    assert doc["source"] == "Hub headers" and doc["quant"] == "Q4_K_M"
    kv = doc["kv"]
    # the profile: -c 200000 with a q4_0 cache; 16 attention layers of 4 KV heads x 256
    assert kv["cells"] == 200192 and kv["layers"] == 16
    assert kv["k_bytes"] == kv["v_bytes"] == 16 * (1024 // 32 * 18) * 200192
    state = (3 * (6144 + 2 * 16 * 128) + 128 * 6144) * 4
    assert kv["state_bytes"] == 48 * state
    assert doc["weights_bytes"] < size and doc["weights_bytes"] > 0.99 * size
    assert doc["verdict"] in ("fits-clean", "wont-fit") and code == (0 if doc["verdict"] == "fits-clean" else 2)
    assert all(r.headers.get("range") for r in hub.requests("GET") if "/cdn/" in r.path or r.path.endswith(".gguf"))
    assert hub.bytes_sent() < 10_000_000


def test_wont_fit_names_the_offload_that_fits(qwen_gguf_hub, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    code, doc = _run(capsys, "llamacpp/default", "--gpus", "1x12GiB", "-c", "8192")
    assert code == 2 and doc["verdict"] == "wont-fit"
    assert doc["fits_with"] is not None and 0 <= doc["fits_with"]["n_gpu_layers"] < N_LAYER
    assert doc["max_ctx_fit"] is None


def test_human_output(qwen_gguf_hub, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    code = main(["kv-calc", "llamacpp/default", "-c", "65536", "--gpus", "1x3090"])
    out = capsys.readouterr().out
    assert code == 0
    assert "llama.cpp" in out and "confidence: estimated" in out and "recurrent state" in out and "CUDA0" in out


def test_gguf_repo_with_several_quants(fake_hub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    files = {}
    for qtype in (Q.Q4_K, Q.Q8_0):
        label = "Q4_K_M" if qtype == Q.Q4_K else "Q8_0"
        (p,) = write(tmp_path, f"Tiny-{label}", Spec(weight_type=qtype))
        files[p.name] = p.read_bytes()
    fake_hub.add_repo("org/Tiny-GGUF", files)
    monkeypatch.setenv("HF_ENDPOINT", fake_hub.url)
    assert main(["kv-calc", "org/Tiny-GGUF", "--json"]) == 64
    assert "Q4_K_M" in capsys.readouterr().out
    code, doc = _run(capsys, "org/Tiny-GGUF", "--quant", "q8_0", "-c", "2048", "--gpus", "1x3090")
    assert code == 0 and doc["quant"] == "Q8_0" and doc["engine"] == "llama.cpp"


def test_override_tensor_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (path,) = write(tmp_path, "moe", Spec(n_expert=4, n_expert_used=2, weight_type=Q.Q4_K))
    _, base = _run(capsys, str(path), "--gpus", "1x3090")
    _, moved = _run(capsys, str(path), "--gpus", "1x3090", "-ot", r"blk\.0\.ffn_.*_exps=CPU", "-ot", r"blk\.1\.ffn_up_exps=CPU")
    _, flag = _run(capsys, str(path), "--gpus", "1x3090", "--n-cpu-moe", "1")
    assert moved["devices"][1]["weights_bytes"] > flag["devices"][1]["weights_bytes"] > base["devices"][1]["weights_bytes"]
    assert moved["args"]["override_tensors"][0] == [r"blk\.0\.ffn_.*_exps", "CPU"]


def test_shared_flags_mean_the_same_and_vllm_flags_are_refused(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    (path,) = write(tmp_path, "m", Spec())
    _, doc = _run(capsys, str(path), "--max-model-len", "5000", "--max-num-seqs", "2", "--kv-cache-dtype", "k8v4",
                  "--tp", "2", "--gpus", "2x3090")
    assert (doc["args"]["ctx_size"], doc["args"]["parallel"]) == (5000, 2)
    assert (doc["args"]["cache_type_k"], doc["args"]["cache_type_v"]) == ("q8_0", "q4_0")
    assert [d["name"] for d in doc["devices"]] == ["CUDA0", "CUDA1", "CPU"]
    assert main(["kv-calc", str(path), "--mem-util", "0.9"]) == 64
    assert "--mem-util" in capsys.readouterr().err


def test_bad_llamacpp_flags_are_usage_errors(tmp_path: Path) -> None:
    (path,) = write(tmp_path, "m", Spec())
    for bad in (["-ctk", "q9_9"], ["-ts", "a,b"], ["-ts", "0,0"], ["-fa", "maybe"], ["-ot", "nobuffer"]):
        with pytest.raises(SystemExit) as exc:
            main(["kv-calc", str(path), *bad])
        assert exc.value.code == 64, bad


def _gguf_catalog_model(name: str):  # type: ignore[no-untyped-def]
    from club3090.catalog import load_catalog

    model = load_catalog().models[name]
    variant = model.weights[model.default_weight_variant]
    assert variant.format == "gguf" and variant.hf_repos
    return variant


def test_a_catalog_model_whose_default_weights_are_a_gguf_is_priced_by_llamacpp(
        fake_hub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    variant = _gguf_catalog_model("qwen3.8-27b")
    header, size = header_only("qwen35", QWEN35, _qwen35_tensors(), tmp_path / "h.gguf")
    (file,) = variant.files
    fake_hub.add_repo(variant.hf_repos[0], {file: FakeFile(name="", prefix=header, size=size, lfs=True),
                                            "Other-Q8_0.gguf": FakeFile(name="", prefix=header, size=size, lfs=True)})
    monkeypatch.setenv("HF_ENDPOINT", fake_hub.url)
    code, doc = _run(capsys, "qwen3.8-27b", "-c", "32768", "--gpus", "1x3090")
    assert doc["engine"] == "llama.cpp" and doc["model"] == "qwen3.8-27b" and doc["source"] == "Hub headers"
    assert doc["confidence"] == "estimated" and doc["kv"]["cells"] == 32768 and doc["kv"]["layers"] == 16
    assert code == (0 if doc["verdict"] == "fits-clean" else 2)
    # --quant: another quant of the same repo
    code, doc = _run(capsys, "qwen3.8-27b", "--quant", "Q8_0", "--gpus", "1x3090")
    assert doc["quant"] == "Q8_0" and doc["model"] == "qwen3.8-27b"


def test_a_gguf_catalog_model_offline_says_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    variant = _gguf_catalog_model("deepseek-v4-flash-0731")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code = main(["kv-calc", "deepseek-v4-flash-0731", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == UNAVAILABLE and doc["ok"] is False and "Traceback" not in doc["error"]
    assert f"hf download {variant.hf_repos[0]} {variant.files[0]}" in doc["error"]
    assert main(["kv-calc", "deepseek-v4-flash-0731"]) == UNAVAILABLE
    err = capsys.readouterr().err
    assert "not a Hugging Face repo id" not in err and "hf download" in err and "Traceback" not in err
