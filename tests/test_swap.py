"""`club3090 swap` against the loopback fake Hub: a fine-tune of Qwen3.6-27B (the curated model's
config.json under another repo id, with an AutoRound int4 quantization_config) served on the curated
vllm/minimal service; other architectures, quantizations, geometries and remote code refused with
the differing fact; a fine-tune too large for the rig refused with the variants that would fit.

The fine-tune's config is the fixture tests/fixtures/hub/Qwen--Qwen3.5-27B/config.json (the source
of the catalog's Qwen3.6-27B geometry) plus the quantization_config keys AutoRound writes
(quant_method, bits, group_size, sym, packing_format)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from club3090 import cli
from club3090.edges import launchers
from tests import test_up as up_tests
from tests.fakehub import FIXTURES, FakeHub
from tests.llama_server import free_port
from tests.test_up import CURATED, CURATED_PROFILE, STARTUP_LOG, TEMPLATE, TEMPLATE_PATH, standin

# `up`'s fixtures: the fake Hub, an empty HF cache, the payload server, a catalog pinning its payload
env, gguf, stopper, upstream = up_tests.env, up_tests.gguf, up_tests.stopper, up_tests.upstream

FINETUNE = "club3090-tests/Qwen3.6-27B-abliterated-int4-AutoRound"
AUTOROUND = {"quant_method": "auto-round", "bits": 4, "group_size": 128, "sym": True,
             "packing_format": "auto_round:auto_gptq"}
BASE = json.loads((FIXTURES / "Qwen--Qwen3.5-27B" / "config.json").read_text(encoding="utf-8"))
GB = 10**9
TINY = {"model.language_model.embed_tokens.weight": ("BF16", [256, 64]), "lm_head.weight": ("BF16", [256, 64])}


def config(**changes: Any) -> dict[str, Any]:
    """The curated model's config with an AutoRound int4 quantization_config; ``text_config`` keys
    in ``text``; ``quantization_config=None`` drops it."""
    out = json.loads(json.dumps(BASE))
    out["quantization_config"] = dict(AUTOROUND)
    for key, value in changes.items():
        if key == "text":
            out["text_config"].update(value)
        elif value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def weights(total_bytes: int) -> dict[str, tuple[str, list[int]]]:
    """A tensor table of about ``total_bytes`` (int4 packed as I32, embeddings in BF16)."""
    embed = 248320 * 5120 * 2
    rows = max(1, (total_bytes - 2 * embed) // (4 * 5120))
    return {"model.language_model.embed_tokens.weight": ("BF16", [248320, 5120]),
            "lm_head.weight": ("BF16", [248320, 5120]),
            "model.language_model.layers.0.mlp.down_proj.qweight": ("I32", [rows, 5120])}


def add(hub: FakeHub, repo: str, cfg: dict[str, Any], size: int = int(16.5 * GB), **kw: Any) -> None:
    hub.add_fixture("Qwen--Qwen3.5-27B", repo_id=repo, tensors=weights(size), shards=2,
                    extra_files={"config.json": json.dumps(cfg).encode(), **kw.pop("extra_files", {})}, **kw)


def swap(env: dict[str, Any], *argv: str) -> int:
    return cli.main(["swap", *argv], provider=env["provider"])


def services(path: Path) -> dict[str, Any]:
    doc = yaml.safe_load((path / "compose.yml").read_text(encoding="utf-8"))
    (name, svc), = doc["services"].items()
    return {"name": name, **svc}


def flags(command: list[str]) -> dict[str, str]:
    return {a: command[i + 1] for i, a in enumerate(command[:-1]) if a.startswith("--")}


def test_emit_only_clones_the_curated_service_and_repoints_only_the_model(env, capsys):
    add(env["hub"], FINETUNE, config())
    curated, swapped = env["tmp"] / "curated", env["tmp"] / "out"
    assert cli.main(["up", CURATED, "--gpus", "1x3090", "--profile-like", CURATED_PROFILE, "--dir", str(curated),
                     "--no-start"], provider=env["provider"]) == 0, capsys.readouterr()
    capsys.readouterr()
    code = swap(env, FINETUNE, "--profile-like", CURATED_PROFILE, "--dir", str(swapped), "--emit-only",
                "--gpus", "1x3090")
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"[swap] {FINETUNE} is a fine-tune vllm/minimal can serve" in out
    assert "auto-round 4-bit, group size 128" in out and "confidence derived-from-curated" in out
    assert "--emit-only" in out and not (env["tmp"] / "hf" / "hub" / f"models--{FINETUNE.replace('/', '--')}").exists()

    a, b = services(curated), services(swapped)
    ca, cb = a.pop("command"), b.pop("command")
    assert a == b                              # image, volumes, environment, entrypoint, ports: identical
    fa, fb = flags(ca), flags(cb)
    differing = {k for k in fa.keys() | fb.keys() if fa.get(k) != fb.get(k)}
    assert differing == {"--model", "--served-model-name", "--revision"}, differing
    assert fb["--model"] == FINETUNE and fa["--model"] == CURATED
    assert fb["--served-model-name"] == "qwen3.6-27b-abliterated-int4-autoround"
    assert fb["--revision"] == env["hub"].repos[FINETUNE].commit
    assert [x for x in ca if x not in (fa["--model"], fa["--served-model-name"], fa["--revision"])] == \
           [x for x in cb if x not in (fb["--model"], fb["--served-model-name"], fb["--revision"])]
    assert (swapped / "files" / TEMPLATE_PATH).read_bytes() == TEMPLATE   # the patch payloads travel too
    state = json.loads((swapped / "state.json").read_text(encoding="utf-8"))
    assert state["swap_of"] == CURATED_PROFILE and state["repo_id"] == FINETUNE


def test_json_states_the_repriced_fit_and_a_given_served_name(env, capsys):
    add(env["hub"], FINETUNE, config(), size=int(17.9 * GB))
    code = swap(env, FINETUNE, "--profile-like", CURATED_PROFILE, "--dir", str(env["tmp"] / "o"), "--emit-only",
                "--gpus", "1x3090", "--served-model-name", "my-tune", "--json")
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 == doc["exit_code"] and doc["swap_of"] == CURATED_PROFILE
    assert doc["confidence"] == "derived-from-curated" and doc["raw_verdict"] in ("fits-clean", "fits-constrained")
    assert doc["weights_bytes"] > 17.5 * GB and doc["curated_weights_bytes"] == 17_500_000_000
    assert doc["served_model"] == "my-tune" and doc["up"]["state"]["served_model"] == "my-tune"


@pytest.mark.parametrize("cfg, token, fact", [
    (config(architectures=["LlamaForCausalLM"], model_type="llama"), "swap-arch-mismatch", "architecture"),
    (config(quantization_config={"quant_method": "awq", "bits": 4, "group_size": 128}), "swap-quant-mismatch",
     "quantization method expected auto-round, found awq"),
    (config(quantization_config={**AUTOROUND, "bits": 8}), "swap-quant-mismatch", "weight bits expected 4, found 8"),
    (config(quantization_config=None), "swap-quant-mismatch", "found unquantized"),
    (config(text={"num_hidden_layers": 48, "layer_types": BASE["text_config"]["layer_types"][:48]}),
     "swap-geometry-mismatch", "num_hidden_layers expected 64, found 48"),
    (config(text={"num_key_value_heads": 8}), "swap-geometry-mismatch", "num_key_value_heads expected 4, found 8"),
    (config(text={"vocab_size": 260000}), "swap-geometry-mismatch", "vocab_size expected 248320 (+/- 1%)"),
    (config(auto_map={"AutoModelForCausalLM": "modeling_x.XForCausalLM"}), "swap-remote-code", "auto_map"),
])
def test_refusals_name_the_differing_fact(env, capsys, cfg, token, fact):
    add(env["hub"], FINETUNE, cfg)
    out_dir = env["tmp"] / "out"
    code = swap(env, FINETUNE, "--profile-like", CURATED_PROFILE, "--dir", str(out_dir), "--emit-only",
                "--gpus", "1x3090")
    out = capsys.readouterr().out
    assert code == 2, out
    assert f"[swap] REFUSED {token}" in out and fact in out, out
    assert not out_dir.exists()                # nothing written before the check passes


def test_a_vocab_within_tolerance_and_a_few_added_tokens_pass(env, capsys):
    add(env["hub"], FINETUNE, config(text={"vocab_size": 248320 + 1024}))
    assert swap(env, FINETUNE, "--profile-like", CURATED_PROFILE, "--dir", str(env["tmp"] / "o"), "--emit-only",
                "--gpus", "1x3090") == 0, capsys.readouterr().out


def test_group_size_is_compared_with_the_curated_repo(env, capsys):
    env["hub"].add_fixture("Qwen--Qwen3.5-27B", repo_id="Lorbus/Qwen3.6-27B-int4-AutoRound",
                           tensors=weights(GB), extra_files={"config.json": json.dumps(config()).encode()})
    add(env["hub"], FINETUNE, config(quantization_config={**AUTOROUND, "group_size": 32}))
    code = swap(env, FINETUNE, "--profile-like", CURATED_PROFILE, "--dir", str(env["tmp"] / "o"), "--emit-only",
                "--gpus", "1x3090", "--json")
    doc = json.loads(capsys.readouterr().out)
    assert code == 2 and doc["refusal"] == "swap-quant-mismatch"
    assert doc["mismatches"] == [{"token": "swap-quant-mismatch", "fact": "group size", "expected": "128",
                                  "found": "32"}]


def test_a_fine_tune_too_large_for_the_rig_names_the_variants_that_fit(env, capsys):
    add(env["hub"], FINETUNE, config(), size=30 * GB)
    code = swap(env, FINETUNE, "--profile-like", CURATED_PROFILE, "--dir", str(env["tmp"] / "o"), "--emit-only",
                "--gpus", "1x3090", "--json")
    doc = json.loads(capsys.readouterr().out)
    assert code == 2 and doc["refusal"] == "swap-wont-fit" and doc["raw_verdict"] == "wont-fit"
    (advice,) = doc["advisories"]
    assert advice["code"] == "variants-fit"
    repos = [v["repo"] for v in advice["data"]["variants"]]
    assert CURATED in repos and all(v["size_bytes"] < 30 * GB for v in advice["data"]["variants"])
    first = advice["data"]["variants"][0]
    assert first["repo"] == CURATED and first["profile"] == CURATED_PROFILE
    assert not (env["tmp"] / "o").exists()


def test_a_profile_compose_cannot_replay_is_refused(env, capsys):
    from club3090.catalog import load_catalog

    catalog = load_catalog()
    key = next(k for k, p in catalog.profiles.items() if p.model == "qwen3.6-27b" and not catalog.emittable(k)[0]
               and catalog.engines[p.engine].type == "vllm")
    add(env["hub"], FINETUNE, config())
    code = swap(env, FINETUNE, "--profile-like", key, "--dir", str(env["tmp"] / "o"), "--emit-only")
    out = capsys.readouterr().out
    assert code == 2 and "[swap] REFUSED swap-profile-not-servable" in out


def test_usage_errors(env, capsys):
    assert swap(env, FINETUNE, "--profile-like", "vllm/nope", "--dir", str(env["tmp"] / "o")) == 64
    assert "unknown --profile-like" in capsys.readouterr().err
    assert swap(env, CURATED, "--profile-like", CURATED_PROFILE, "--dir", str(env["tmp"] / "o"), "--emit-only") == 64
    assert "club3090 up" in capsys.readouterr().err


def test_native_swap_serves_verifies_and_records_the_swap(env, gguf, stopper, capsys):
    small = "club3090-tests/Qwen3.6-27B-tiny-int4-AutoRound"
    env["hub"].add_fixture("Qwen--Qwen3.5-27B", repo_id=small, tensors=TINY, shards=1,  # the download stays small
                           extra_files={"config.json": json.dumps(config()).encode()})
    run = env["tmp"] / "run"
    stopper.append(run)
    vllm = standin(env["tmp"], gguf, startup=STARTUP_LOG.read_text(encoding="utf-8"))
    port = free_port()
    code = swap(env, small, "--gpus", "1x3090", "--profile-like", CURATED_PROFILE, "--dir", str(run),
                "--launcher", "native", "--vllm", str(vllm), "--port", str(port), "--skip-tools")
    cap = capsys.readouterr()
    assert code == 0, cap.out + cap.err + launchers.log_tail(run / "logs" / "server.log")
    assert "[up] SERVING: verified" in cap.out
    assert "as qwen3.6-27b-tiny-int4-autoround" in (run / "logs" / "server.log").read_text(encoding="utf-8")
    receipt = json.loads((run / "receipt.json").read_text(encoding="utf-8"))
    assert receipt["swap_of"] == CURATED_PROFILE and receipt["shape"]["model"] == small
    assert json.loads((run / "state.json").read_text(encoding="utf-8"))["swap_of"] == CURATED_PROFILE


# --------------------------------------------------------------------------------------------
# the stratum-5 advisories in `pull` and `fits`
# --------------------------------------------------------------------------------------------

def test_pull_points_a_fine_tune_at_swap(env, capsys):
    add(env["hub"], FINETUNE, config())
    code = cli.main(["pull", FINETUNE, "--gpus", "1x3090", "--json"], provider=env["provider"])
    doc = json.loads(capsys.readouterr().out)
    advice = {a["code"]: a for a in doc["advisories"]}
    assert set(advice) == {"swap-serves-it"}, doc["advisories"]
    assert advice["swap-serves-it"]["data"]["profile"] == CURATED_PROFILE
    assert advice["swap-serves-it"]["data"]["command"] == f"club3090 swap {FINETUNE} --profile-like vllm/minimal --dir DIR"
    assert "swap-serves-it" not in doc["notice_codes"] and code == doc["exit_code"]
    cli.main(["pull", FINETUNE, "--gpus", "1x3090"], provider=env["provider"])
    assert "advice: Qwen3_5ForConditionalGeneration" in capsys.readouterr().out


def test_pull_says_nothing_about_swap_for_another_quantization(env, capsys):
    add(env["hub"], FINETUNE, config(quantization_config={"quant_method": "awq", "bits": 4, "group_size": 128}))
    cli.main(["pull", FINETUNE, "--gpus", "1x3090", "--json"], provider=env["provider"])
    assert json.loads(capsys.readouterr().out)["advisories"] == []


def test_pull_names_the_variants_that_fit_a_model_too_large(env, capsys):
    code = cli.main(["pull", "Qwen/Qwen3.6-27B-FP8", "--gpus", "1x3090", "--json"], provider=env["provider"])
    doc = json.loads(capsys.readouterr().out)
    assert code == doc["exit_code"] != 0 and doc["raw_verdict"] in ("wont-fit", None)
    (advice,) = [a for a in doc["advisories"] if a["code"] == "variants-fit"]
    variants = advice["data"]["variants"]
    assert variants[0]["repo"] == CURATED and variants[0]["profile"] == CURATED_PROFILE
    assert "Qwen/Qwen3.6-27B-FP8" not in [v["repo"] for v in variants]
    assert any(v["format"] == "gguf" and v["files"] for v in variants)     # the family's GGUF files
    assert all(v["size_bytes"] < 29 * GB for v in variants)


def test_pull_of_a_fitting_curated_model_has_no_advice(env, capsys):
    cli.main(["pull", CURATED, "--profile-like", CURATED_PROFILE, "--gpus", "1x3090", "--json"],
             provider=env["provider"])
    assert json.loads(capsys.readouterr().out)["advisories"] == []


def test_fits_names_the_variants_that_fit_and_the_swap(env, capsys):
    assert cli.main(["fits", "Qwen/Qwen3.6-27B-FP8", "--gpus", "1x3090"], provider=env["provider"]) == 2
    out = capsys.readouterr().out
    assert "advice: too large for 1 GPU(s) with 24 GiB; these variants would fit: " + CURATED in out
    add(env["hub"], FINETUNE, config(), size=30 * GB)
    cli.main(["fits", FINETUNE, "--gpus", "1x3090", "--json"], provider=env["provider"])
    row = json.loads(capsys.readouterr().out)["models"][0]
    codes = [a["code"] for a in row["advisories"]]
    assert not row["fits"] and codes == ["variants-fit", "swap-serves-it"], row


def test_an_mtp_drafter_profile_needs_the_fine_tune_to_keep_its_mtp_head(env, capsys):
    add(env["hub"], FINETUNE, config())                      # no mtp.* tensors: the merge dropped the head
    argv = ("--profile-like", "vllm/dual", "--gpus", "2x3090", "--emit-only", "--json")
    assert swap(env, FINETUNE, "--dir", str(env["tmp"] / "a"), *argv) == 2
    doc = json.loads(capsys.readouterr().out)
    assert [m["token"] for m in doc["mismatches"]] == ["swap-geometry-mismatch"]
    assert doc["mismatches"][0]["fact"].startswith("MTP head") and doc["mismatches"][0]["found"] == "absent"
    kept = "club3090-tests/Qwen3.6-27B-with-mtp-int4-AutoRound"
    table = {**weights(int(16.5 * GB)), "mtp.layers.0.input_layernorm.weight": ("BF16", [5120])}
    env["hub"].add_fixture("Qwen--Qwen3.5-27B", repo_id=kept, tensors=table, shards=2,
                           extra_files={"config.json": json.dumps(config()).encode()})
    from club3090.gate.swap_match import check_swap
    from club3090.settings import Settings

    provider = env["provider"](Settings.from_env())
    catalog = provider.catalog()
    spec = provider.resolve(kept, catalog)
    assert spec.has_mtp_head and check_swap(spec, catalog.profiles["vllm/dual"], catalog) == ()


def test_a_failed_start_writes_a_capture_that_names_the_swap(env, monkeypatch, capsys):
    bin_dir = env["tmp"] / "bin"
    bin_dir.mkdir()
    script = bin_dir / "docker"
    script.write_text('#!/bin/sh\ncase "$1" in\n  info) echo \'{"nvidia":{},"runc":{}}\'; exit 0;;\n'
                      '  compose) [ "$2" = version ] && exit 0\n    shift 3\n    case "$1" in\n'
                      '      logs) echo "torch.OutOfMemoryError: CUDA out of memory"; exit 0;;\n'
                      '    esac;;\nesac\nexit 0\n', encoding="utf-8")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    small = "club3090-tests/Qwen3.6-27B-tiny-int4-AutoRound"
    env["hub"].add_fixture("Qwen--Qwen3.5-27B", repo_id=small, tensors=TINY, shards=1,
                           extra_files={"config.json": json.dumps(config()).encode()})
    captures = env["tmp"] / "caps"
    monkeypatch.setenv("CLUB3090_CAPTURES", str(captures))
    code = swap(env, small, "--gpus", "1x3090", "--profile-like", CURATED_PROFILE, "--dir", str(env["tmp"] / "run"),
                "--port", str(free_port()))
    out = capsys.readouterr().out
    assert code == 1 and "[up] FAILED to start" in out, out
    (manifest,) = list(captures.rglob("manifest.json"))
    data = json.loads(manifest.read_text(encoding="utf-8"))
    assert data["swap_of"] == CURATED_PROFILE and data["model_id"] == small


def test_a_repo_too_large_names_its_own_gguf_files(env, capsys):
    from tests.fakehub import safetensors_file

    repo = "club3090-tests/Big-7B-with-GGUF"
    env["hub"].add_fixture("Qwen--Qwen2.5-7B", repo_id=repo, extra_files={
        "big-Q4_K_M.gguf": b"GGUF" + b"\0" * 60,
        "model.safetensors": safetensors_file("model.safetensors", {"model.embed_tokens.weight": ("BF16", [14 * 2**20, 1024])})})
    cli.main(["pull", repo, "--gpus", "1x3060", "--json"], provider=env["provider"])
    doc = json.loads(capsys.readouterr().out)
    (advice,) = [a for a in doc["advisories"] if a["code"] == "variants-fit"]
    assert advice["data"]["repo_gguf_files"] == ["big-Q4_K_M.gguf"]
    assert f"`club3090 fits {repo} --gguf`" in advice["text"]


def test_disk_short_and_unreadable_facts_refuse_before_anything_is_written(env, capsys):
    from club3090.edges.provider import LiveProvider

    add(env["hub"], FINETUNE, config())
    out_dir = env["tmp"] / "o"

    def small_disk(settings: Any) -> LiveProvider:
        return LiveProvider(settings, free_disk=lambda _p: 10**9, load=lambda: env["catalog"])
    code = cli.main(["swap", FINETUNE, "--profile-like", CURATED_PROFILE, "--gpus", "1x3090", "--dir", str(out_dir),
                     "--json"], provider=small_disk)
    doc = json.loads(capsys.readouterr().out)
    assert code == 2 and doc["refusal"] == "disk-short" and not out_dir.exists()
    code = swap(env, "club3090-tests/no-such-repo", "--profile-like", CURATED_PROFILE, "--dir", str(out_dir), "--json")
    doc = json.loads(capsys.readouterr().out)
    assert code == 2 and doc["refusal"] == "swap-facts-unavailable" and not out_dir.exists()
    assert any("repo-not-found" in line for line in doc["lines"]), doc["lines"]
