"""`club3090 kv-calc`: local folders, config.json paths, curated keys, --json keys, --calibration."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from club3090.cli import main
from tests.fixtures_path import fixture_path

HUB = fixture_path("hub")
QWEN_CONFIG = HUB / "Qwen--Qwen2.5-0.5B" / "config.json"

JSON_KEYS = {"per_gpu", "kv_bytes_per_token", "block_size", "num_blocks", "kv_cache_tokens", "max_concurrency",
             "raw_verdict", "max_model_len_fit", "confidence"}
PER_GPU_KEYS = {"budget_bytes", "weights_bytes", "non_torch_bytes", "activation_bytes", "cudagraph_bytes",
                "kv_pool_bytes"}


def write_safetensors(path: Path, tensors: dict[str, tuple[str, list[int], int]]) -> None:
    header, offset = {}, 0
    for name, (dtype, shape, nbytes) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * offset)


def model_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_bytes(QWEN_CONFIG.read_bytes())
    write_safetensors(folder / "model.safetensors", {"a": ("BF16", [1024, 512], 1024 * 512 * 2),
                                                     "b": ("BF16", [256], 512)})
    return folder


def run_json(capsys, *argv: str) -> tuple[int, dict]:
    code = main(["kv-calc", *argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_local_folder_reads_safetensors_headers(tmp_path, capsys):
    code, out = run_json(capsys, str(model_folder(tmp_path)), "--max-model-len", "4096", "--gpus", "1x3090")
    assert code == 0
    assert set(out) >= JSON_KEYS and set(out["per_gpu"]) == PER_GPU_KEYS
    assert all(isinstance(v, int) for v in out["per_gpu"].values())
    assert out["per_gpu"]["weights_bytes"] == 1024 * 512 * 2 + 512
    assert out["kv_bytes_per_token"] == 24 * 2 * 128 * 2       # 24 layers x 2 KV heads x (64+64) x 2 B
    assert out["raw_verdict"] == "fits-clean" and out["confidence"] == "estimated-lower-bound"


def test_config_only_folder_estimates_weights(tmp_path, capsys):
    folder = tmp_path / "cfg"
    folder.mkdir()
    (folder / "config.json").write_bytes(QWEN_CONFIG.read_bytes())
    code, out = run_json(capsys, str(folder), "--max-model-len", "4096", "--gpus", "1x24GiB")
    # Qwen2.5-0.5B: 494 M parameters (tied embeddings) in bf16 = 0.99 GB; the estimate says so
    assert code == 0 and "estimated from config.json" in out["weights_source"]
    assert "+/- 10 %" in out["weights_source"]
    assert abs(out["per_gpu"]["weights_bytes"] - 988_000_000) / 988_000_000 < 0.05
    assert out["confidence"] == "estimated-lower-bound"
    assert main(["kv-calc", str(folder), "--max-model-len", "4096", "--gpus", "1x3090"]) == 0
    assert "estimated from config.json" in " ".join(capsys.readouterr().out.split())   # rich wraps lines
    code, out = run_json(capsys, str(folder), "--weights-gib", "1.0", "--gpus", "1x24GiB")
    assert code == 0 and out["per_gpu"]["weights_bytes"] == 1 << 30


def test_config_json_path_and_flags(capsys):
    code, out = run_json(capsys, str(HUB / "Qwen--Qwen2.5-7B" / "config.json"), "--weights-gib", "14.25",
                         "--max-model-len", "32768", "--kv-cache-dtype", "fp8", "--vllm-version", "0.19.0",
                         "--mem-util", "0.9", "--max-num-seqs", "4", "--max-num-batched-tokens", "4096",
                         "--gpus", "1x3090")
    assert code == 0
    assert out["kv_bytes_per_token"] == 28_672
    assert out["settings"]["mem_util"] == 0.9 and out["settings"]["max_num_batched_tokens"] == 4096
    assert out["per_gpu"]["cudagraph_bytes"] == 0                # v0.19 captures outside the budget


def test_wont_fit_exit_code_and_solve_max_ctx(capsys):
    cfg = str(HUB / "Qwen--Qwen2.5-7B" / "config.json")
    code, out = run_json(capsys, cfg, "--weights-gib", "14.25", "--max-model-len", "131072", "--gpus", "1x3090")
    assert code == 2 and out["raw_verdict"] == "wont-fit" and 0 < out["max_model_len_fit"] < 131072
    code, solved = run_json(capsys, cfg, "--weights-gib", "14.25", "--max-model-len", "131072", "--solve-max-ctx",
                             "--gpus", "1x3090")
    assert code == 0 and solved["max_model_len"] == out["max_model_len_fit"]


def test_unpriceable_model_is_a_refusal(capsys):
    code, out = run_json(capsys, str(HUB / "RedHatAI--DeepSeek-V4-Flash-NVFP4-FP8"), "--weights-gib", "10",
                         "--gpus", "1x3090")
    assert code == 2 and out["ok"] is False and out["reason"] == "no-fit-model"


def test_human_output(tmp_path, capsys):
    argv = [str(model_folder(tmp_path)), "--max-model-len", "4096", "--tp", "2", "--gpus", "2x3090"]
    code, data = run_json(capsys, *argv)
    assert main(["kv-calc", *argv]) == 0 == code
    text = capsys.readouterr().out
    # the human tables carry the same numbers as --json: the KV pool, the KV tokens, the verdict
    assert f"{data['per_gpu']['kv_pool_bytes'] / 2**30:.2f}" in text
    assert f"{data['kv_cache_tokens']:,}" in text and data["kv_cache_tokens"] > 0
    assert data["raw_verdict"] == "fits-clean" and data["raw_verdict"] in text.split()


def test_curated_profile_key(capsys):
    from club3090.catalog import load_catalog

    catalog = load_catalog()
    key = next(k for k, p in catalog.profiles.items()
               if catalog.engines[p.engine].type == "vllm" and any(a.profile == k for a in catalog.anchors))
    code, out = run_json(capsys, key)
    assert code in (0, 2) and out["profile"] == key and out["confidence"] == "exact"


def test_calibration_prints_n_of_n(capsys):
    code = main(["kv-calc", "--calibration"])
    out = capsys.readouterr().out
    heads = {line.split(":")[0]: line.split(":")[1].split()[0] for line in out.splitlines()
             if line.startswith(("kvcalc-22of22-historical:", "kvcalc-current-8of8:"))}
    assert set(heads) == {"kvcalc-22of22-historical", "kvcalc-current-8of8"}
    for frac in heads.values():          # upstream's criterion: every scored upstream row passes
        passed, total = frac.split("/")
        assert passed == total and int(total) > 0
    assert code == 0
    label, _, frac = out.strip().splitlines()[-1].partition(": ")   # the last line: "strict: N/M"
    passed, total = (int(n) for n in frac.split("/"))
    assert label == "strict" and 0 <= passed <= total and total > int(heads["kvcalc-22of22-historical"].split("/")[1])


def test_calibration_json_and_gemma_anchors(capsys):
    code = main(["kv-calc", "--calibration", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["upstream_all_pass"]
    assert data["upstream"]["kvcalc-22of22-historical"]["expected_rows"] == 22
    # anchors carry their own inputs: every upstream row is scored (archived composes included)
    for name, rows_expected in (("kvcalc-22of22-historical", 22), ("kvcalc-current-8of8", 8)):
        assert data["upstream"][name]["total"] == rows_expected == data["upstream"][name]["passed"]
    rows = {a["anchor"]: a for a in data["anchors"]}
    assert all(a["verdict"] != "wont-fit" for a in data["anchors"])   # every anchor booted
    # Gemma 4 31B measured pools (compose headers): within 15 %
    for key, measured in (("vllm/gemma-bf16-mtp:compose/doc", 196_527), ("vllm/gemma-int8-mtp:compose/doc", 447_000),
                          ("vllm/gemma-12b-dual-bf16-mtp:compose/doc", 496_000)):
        assert rows[key]["measured_kv_tokens"] == measured
        assert abs(rows[key]["predicted_kv_tokens"] - measured) / measured < 0.15, key


def test_without_heavy_imports(tmp_path):
    """A local folder is priced without torch, transformers, vLLM or the Hub client (how fast that is,
    is the benchmarks' business: a timed assertion flaps on a shared machine)."""
    folder = model_folder(tmp_path)
    script = ("import sys; from club3090.cli import main; "
              f"code = main(['kv-calc', {str(folder)!r}, '--gpus', '1x3090', '--json']); "
              "heavy = [m for m in ('torch', 'transformers', 'vllm', 'huggingface_hub') if m in sys.modules]; "
              "print('HEAVY', heavy, file=sys.stderr); sys.exit(code)")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stderr.splitlines() if x.startswith("HEAVY"))
    assert line.startswith("HEAVY []")


# flag validation: a bad value is a usage error (exit 64), never accepted (0) or a crash (70)

BAD_FLAGS = [
    ("--mem-util", "0"), ("--mem-util", "-0.5"), ("--mem-util", "1.5"), ("--mem-util", "nan"),
    ("--mem-util", "inf"), ("--mem-util", "x"),
    ("--weights-gib", "0"), ("--weights-gib", "-1"), ("--weights-gib", "nan"), ("--weights-gib", "inf"),
    ("--tp", "0"), ("--tp", "-2"), ("--tp", "1.5"), ("--pp", "0"), ("--pp", "-1"),
    ("--max-num-seqs", "0"), ("--max-num-seqs", "-3"), ("--max-model-len", "0"), ("--max-model-len", "-5"),
    ("--max-num-batched-tokens", "0"), ("--max-num-batched-tokens", "x"),
    ("--block-size", "0"), ("--block-size", "-16"), ("--block-size", "5000"),
    ("--num-speculative-tokens", "-1"), ("--num-speculative-tokens", "two"),
    ("--kv-cache-dtype", "zzz"), ("--kv-cache-dtype", ""),
    ("--vllm-version", "banana"), ("--vllm-version", ""), ("--vllm-version", "latest"),
    ("--dtype", "int3"), ("--dtype", "bfloat"), ("--dtype", ""),
    ("--speculative-config", '{"method": "eagle3"}'), ("--speculative-config", "[1, 2]"),
    ("--speculative-config", '{"num_speculative_tokens": 0}'), ("--speculative-config", "not json"),
    ("--speculative-config", '{"num_speculative_tokens": 2, "method": "medusa-x"}'),
]


@pytest.mark.parametrize("flag,value", BAD_FLAGS)
def test_bad_flag_values_are_usage_errors(flag, value, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["kv-calc", "vllm/minimal", f"{flag}={value}"])
    assert exc.value.code == 64
    with pytest.raises(SystemExit) as exc:
        main(["kv-calc", "vllm/minimal", f"{flag}={value}", "--json"])
    assert exc.value.code == 64
    assert json.loads(capsys.readouterr().out)["exit_code"] == 64


GOOD_FLAGS = [("--mem-util", "1"), ("--mem-util", "0.05"), ("--weights-gib", "0.5"), ("--block-size", "1"),
              ("--block-size", "544"), ("--num-speculative-tokens", "0"), ("--kv-cache-dtype", "FP8"),
              ("--kv-cache-dtype", "bfloat16"), ("--vllm-version", "v0.19.1"),
              ("--vllm-version", "0.8.3.dev172+g2b93162f"), ("--vllm-version", "0.22")]


@pytest.mark.parametrize("flag,value", GOOD_FLAGS)
def test_good_flag_values_are_accepted(flag, value, capsys):
    assert main(["kv-calc", "vllm/minimal", f"{flag}={value}"]) in (0, 2)


def test_every_catalog_kv_format_is_accepted(capsys):
    from club3090.catalog import load_catalog

    for fmt in load_catalog().kv_formats:
        assert main(["kv-calc", "vllm/minimal", "--kv-cache-dtype", fmt, "--json"]) in (0, 2), fmt
        capsys.readouterr()


@pytest.mark.parametrize("source", ["~nouser-club3090-test/x", "/nonexistent/club3090/model"])
def test_missing_paths_are_stratum1_stops_like_inspect(source, capsys):
    """The deriver's stop is a verdict (exit 2, its token), not a usage error; --json prints the
    same object inspect does."""
    assert main(["kv-calc", source]) == 2
    capsys.readouterr()
    assert main(["kv-calc", source, "--json"]) == 2
    kv = json.loads(capsys.readouterr().out)
    assert main(["inspect", source, "--json"]) == 2
    assert json.loads(capsys.readouterr().out) == kv
    assert kv["stratum"] == 1 and kv["reason"] == "repo-not-found"


def _kv_json(capsys, *argv):
    code = main(["kv-calc", *argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_model_with_profile_prices_model_at_profile_shape(capsys):
    """Bug 2: MODEL names what is priced; --profile supplies only the serving shape."""
    from club3090.catalog import load_catalog

    catalog = load_catalog()
    prof = catalog.profiles["vllm/minimal"]
    other = next(mid for mid in catalog.models if mid != prof.model
                 and catalog.models[mid].weights[catalog.models[mid].default_weight_variant].size_bytes)
    _, own = _kv_json(capsys, "vllm/minimal")
    _, alone = _kv_json(capsys, other, "--max-model-len", str(prof.max_model_len), "--tp", str(prof.tp),
                        "--gpus", f"{prof.tp}x{prof.reference_gpu}")
    _, paired = _kv_json(capsys, other, "--profile", "vllm/minimal")
    assert paired["profile"] == "vllm/minimal" and paired["model"] == other
    assert paired["architecture"] == alone["architecture"] != own["architecture"]
    assert paired["per_gpu"]["weights_bytes"] == alone["per_gpu"]["weights_bytes"]
    assert paired["per_gpu"]["weights_bytes"] != own["per_gpu"]["weights_bytes"]
    assert paired["max_model_len"] == prof.max_model_len and paired["tp"] == prof.tp
    assert paired["confidence"] == alone["confidence"] == "exact"


def test_catalog_model_confidence_is_exact_like_derive(capsys):
    """A catalog model is a curated hit: exact, whether or not an anchor names a profile."""
    from club3090.catalog import load_catalog

    catalog = load_catalog()
    for key, p in catalog.profiles.items():
        if catalog.engines[p.engine].type == "vllm" and not any(a.profile == key for a in catalog.anchors):
            _, out = _kv_json(capsys, key)
            assert out["confidence"] == "exact", key
            break


@pytest.mark.parametrize("dtype", ["auto", "bf16", "float16", "float32"])
def test_known_dtypes_are_accepted(dtype, capsys):
    assert main(["kv-calc", "vllm/minimal", "--dtype", dtype]) in (0, 2)


def test_kv_cache_dtype_help_lists_every_priced_format(capsys):
    from club3090.fit.kv_formats import KV_FORMATS

    with pytest.raises(SystemExit):
        main(["kv-calc", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert all(name in text for name in KV_FORMATS)


def test_max_model_len_auto_reports_the_length_vllm_would_choose(capsys):
    """vLLM's ``--max-model-len auto`` (-1): when the model's 131,072 positions do not fit, vLLM reduces
    the length to the largest that fits one request and starts; kv-calc reports that length."""
    config = str(HUB / "Qwen--Qwen2.5-7B" / "config.json")
    common = ("--weights-gib", "14.25", "--gpus", "1x24GiB", "--vllm-version", "0.22.0")
    code, full = run_json(capsys, config, *common, "--max-model-len", "131072")
    assert full["raw_verdict"] == "wont-fit"            # the model's maximum does not fit this card
    longest = full["max_model_len_fit"]
    assert 0 < longest < 131_072
    code, auto = run_json(capsys, config, *common, "--max-model-len", "auto")
    assert code == 0 and auto["raw_verdict"] != "wont-fit"
    assert auto["max_model_len"] == longest and auto["settings"]["max_model_len"] == longest
    assert any(f"reduced from 131072 to {longest}" in n for n in auto["notes"])
    assert auto["kv_cache_tokens"] >= longest           # one request of the chosen length fits
    # one token more would not fit: the same card refuses longest + 16 (a whole block more)
    _, over = run_json(capsys, config, *common, "--max-model-len", str(longest + 16))
    assert over["raw_verdict"] == "wont-fit"
    # before 0.12 vLLM has no auto: a usage problem, not a price
    assert main(["kv-calc", config, *common[:4], "--vllm-version", "0.11.0", "--max-model-len", "auto"]) != 0


def _drafter_folder(tmp_path: Path, architecture: str, layers: int) -> Path:
    folder = tmp_path / f"drafter-{layers}"
    folder.mkdir()
    config = json.loads((HUB / "Qwen--Qwen2.5-7B" / "config.json").read_text())
    config.update({"architectures": [architecture], "num_hidden_layers": layers})
    (folder / "config.json").write_text(json.dumps(config))
    write_safetensors(folder / "model.safetensors", {"w": ("BF16", [1024, 1024], 1024 * 1024 * 2)})
    return folder


def test_speculative_config_prices_the_drafters_kv_and_weights(tmp_path, capsys):
    """vLLM's --speculative-config: an EAGLE3 / DFlash drafter's layers join the KV groups with their
    own geometry and its weights count (split by TP); ``mtp`` without a model is the built-in head."""
    config = str(HUB / "Qwen--Qwen2.5-7B" / "config.json")   # 28 layers, 4 KV heads x 128
    common = ("--weights-gib", "14.25", "--gpus", "1x80GiB", "--max-model-len", "32768", "--vllm-version", "0.22.0")
    _, plain = run_json(capsys, config, *common, "--num-speculative-tokens", "3")
    eagle = _drafter_folder(tmp_path, "LlamaForCausalLMEagle3", 1)
    code, out = run_json(capsys, config, *common, "--speculative-config",
                         json.dumps({"method": "eagle3", "model": str(eagle), "num_speculative_tokens": 3}))
    assert code == 0
    per_layer = 4 * 128 * 2 * 2                                # KV heads x head size x (K, V) x bf16
    assert out["kv_bytes_per_token"] - plain["kv_bytes_per_token"] == per_layer
    assert out["per_gpu"]["weights_bytes"] - plain["per_gpu"]["weights_bytes"] == 1024 * 1024 * 2
    assert any("1 eagle3 drafter layer(s)" in n for n in out["notes"])
    dflash = _drafter_folder(tmp_path, "DFlashDraftModel", 5)  # method from the architecture name
    _, out5 = run_json(capsys, config, *common, "--speculative-config",
                       json.dumps({"model": str(dflash), "num_speculative_tokens": 7}))
    assert out5["kv_bytes_per_token"] - plain["kv_bytes_per_token"] == 5 * per_layer
    assert any("5 dflash drafter layer(s)" in n for n in out5["notes"])
    _, mtp = run_json(capsys, config, *common, "--speculative-config", '{"method": "mtp", "num_speculative_tokens": 3}')
    assert mtp["kv_bytes_per_token"] == plain["kv_bytes_per_token"]


def test_prefix_caching_flag_prices_the_state_pages_of_a_hybrid_model(capsys):
    """--enable-prefix-caching on a hybrid (GDN) model: two state pages per request (align mode),
    so the same pool serves fewer short requests; --no-enable-prefix-caching one page."""
    config = str(HUB / "Qwen--Qwen3.6-35B-A3B" / "config.json")
    base = [config, "--weights-gib", "12", "--gpus", "1x48GiB", "--max-model-len", "4096",
            "--vllm-version", "0.27.1"]
    code_on, on = run_json(capsys, *base, "--enable-prefix-caching")
    code_off, off = run_json(capsys, *base, "--no-enable-prefix-caching")
    code_default, default = run_json(capsys, *base)
    assert code_on == code_off == code_default == 0
    assert on["settings"]["mamba_cache_mode"] == "align" and off["settings"]["mamba_cache_mode"] == "none"
    assert default["settings"]["mamba_cache_mode"] == "none"          # opt-in on 0.27 for hybrids
    assert on["num_blocks"] == off["num_blocks"]
    assert on["blocks_per_request"] == off["blocks_per_request"] + 3   # one more page in each of 3 state groups
    assert on["max_concurrency"] < off["max_concurrency"]
    assert any("mamba_cache_mode align" in n for n in on["notes"])
