"""Compose generator [D]: curated replay, derived compose, renderers, injection safety, goldens.

Regenerate golden files with ``CLUB3090_UPDATE_GOLDENS=1 pytest tests/test_compose.py`` and
review the diff.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
from pathlib import Path
from types import MappingProxyType

import pytest
import yaml

from club3090.catalog import load_catalog
from club3090.cli.exit_codes import exit_code
from club3090.compose.generate import (
    DEGRADED_DRIFT,
    FOUNDATIONAL_DRIFT,
    MAX_SLUG,
    PIN_MISMATCH,
    REFUSAL_TOKENS,
    SCOPE,
    TP_OR_KV,
    TRC,
    derived_compose,
    dry_run,
    generate,
    with_default,
)
from club3090.errors import InputError
from club3090.fit.runtime import RuntimeShape
from club3090.interpolate import interpolate, interpolate_tree
from club3090.model.architecture import parse_config
from club3090.model.slug import sanitize_slug
from club3090.model.spec import ModelSpec, Quantization
from tests.fixtures_path import fixture_path
from tests.test_catalog import SEED_VLLM_PROFILES

GOLDEN = Path(__file__).parent / "golden" / "compose"
UPDATE = os.environ.get("CLUB3090_UPDATE_GOLDENS", "") not in ("", "0")

# The seed's 27 vLLM profiles with a captured runtime template (profile_runtime.yml `profiles:`).
SEED_PROFILES = SEED_VLLM_PROFILES
GENESIS = ("vllm/default", "vllm/long-text", "vllm/long-text-no-mtp", "vllm/long-vision",
           "vllm/bounded-thinking", "vllm/tools-text", "vllm/dual-turbo", "vllm/dual-tq3-mtp",
           "vllm/dual-tq3-mtp-genesis", "vllm/dual-tq3-nomtp")
# What the catalog data gives today: 9 of the 17 non-Genesis profiles emit (vllm/gemma-26ba4b-single
# runs on vllm-gemma-stable@v0.22.0, a loads:true pin of the Gemma 4 MoE row). The other 8 run on
# purged nightlies whose arch-row pins are loads:false (or absent), so step 3 refuses them with
# pin-mismatch.
EMITTING = ("vllm/minimal", "vllm/dual", "vllm/gemma-mtp-tp1", "vllm/gemma-bf16-mtp",
            "vllm/gemma-int8-mtp", "vllm/gemma-26ba4b-single", "vllm/gemma-26ba4b-dual",
            "vllm/qwen-a3b-preview-single", "vllm/qwen-35b-a3b-dual")
# Patches the shipped Qwen 3.6 27B composes dropped on stable vLLM: recorded as delivery gaps, so
# they are reported undelivered and never wired (their drift guards are not run).
DROPPED = {"vllm/minimal": ("qwen-vllm-pr35936-required-fallback",),
           "vllm/dual": ("qwen-vllm-marlin-pad", "qwen-vllm-pr35936-required-fallback")}


_SEED: list = []


def seed_catalog():
    """The seed-era catalog the replay goldens were written against (tests/fixtures/catalog_seed):
    syncing the shipped catalog with upstream never moves them (docs/DESIGN.md §16)."""
    if not _SEED:
        _SEED.append(load_catalog(fixture_path("catalog_seed")))
    return _SEED[0]


@pytest.fixture(scope="module")
def catalog():
    return seed_catalog()


def golden_name(key: str, suffix: str) -> Path:
    return GOLDEN / (key.replace("/", "__") + suffix)


def check_golden(path: Path, text: str) -> None:
    # the catalog hash changes with any data edit; goldens pin everything else byte for byte
    text = text.replace(f"catalog: {seed_catalog().version} ", "catalog: <catalog-version> ")
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return
    assert path.exists(), f"missing golden {path}; run with CLUB3090_UPDATE_GOLDENS=1"
    assert text == path.read_text(encoding="utf-8"), f"{path.name} differs from the golden file"


def validate_compose(text: str) -> dict:
    """Parse as YAML, resolve interpolation like docker compose (empty env), validate the schema."""
    import compose_spec

    doc = yaml.safe_load(text)
    resolved = interpolate_tree(doc, {})
    project = compose_spec.PyCompose.from_yaml(yaml.safe_dump(resolved, sort_keys=False))
    project.validate()
    project.to_spec()
    return resolved


# ---- curated replay ---------------------------------------------------------------------------

def test_seed_profiles_are_in_the_catalog(catalog):
    for key in SEED_PROFILES:
        assert key in catalog.profiles and catalog.profiles[key].runtime is not None, key


@pytest.mark.parametrize("key", SEED_PROFILES)
def test_every_seed_profile_emits_valid_compose_or_refuses_with_a_seed_token(catalog, key):
    outcome = generate(key, catalog, accept_degraded=True, out_name="out.yml")
    if outcome.ok:
        assert exit_code(outcome.outcome) == 0 and outcome.text
        assert "--trust-remote-code" not in outcome.text
        validate_compose(outcome.text)
    else:
        assert exit_code(outcome.outcome) == 2 and outcome.text is None
        assert outcome.refusal in REFUSAL_TOKENS
        assert outcome.token == f"d-refused:{outcome.refusal}"
    if key in GENESIS:
        assert outcome.refusal == SCOPE
    elif key not in EMITTING:
        assert outcome.refusal == PIN_MISMATCH
        assert outcome.detail


def test_emitting_set(catalog):
    emitted = {k for k in SEED_PROFILES if k not in GENESIS and generate(k, catalog).ok}
    assert emitted == set(EMITTING)
    assert len(SEED_PROFILES) - len(GENESIS) == 17 and len(EMITTING) == 9


def test_the_golden_triples_are_the_seed_s_and_each_replays_to_its_golden_file(catalog):
    # profile_runtime.yml's arch_model_xref: golden_triple_profiles per arch, carried on the arch rows
    triples = {arch: row.golden_triple_profiles for arch, row in catalog.arches.items() if row.golden_triple_profiles}
    assert triples == {"Qwen3NextForCausalLM": ("vllm/minimal", "vllm/dual"),
                       "Gemma4ForConditionalGeneration": ("vllm/gemma-bf16-mtp", "vllm/gemma-int8-mtp",
                                                          "vllm/gemma-mtp-tp1")}
    assert triples == {arch: row.golden_triple_profiles for arch, row in load_catalog().arches.items()
                       if row.golden_triple_profiles}                   # the shipped catalog keeps them
    for keys in triples.values():
        for key in keys:
            outcome = generate(key, catalog, out_name=key.split("/")[1] + ".yml")
            assert outcome.ok, (key, outcome.refusal)
            assert golden_name(key, ".yml").exists(), key   # test_curated_golden compares it byte for byte
            assert key in EMITTING


@pytest.mark.parametrize("key", EMITTING)
def test_curated_golden(catalog, key):
    outcome = generate(key, catalog, out_name=key.split("/")[1] + ".yml")
    assert outcome.ok
    check_golden(golden_name(key, ".yml"), outcome.text)
    assert generate(key, catalog, out_name=key.split("/")[1] + ".yml").text == outcome.text


@pytest.mark.parametrize("key", ("vllm/minimal", "vllm/gemma-int8-mtp"))
def test_curated_vllm_serve_golden(catalog, key):
    outcome = generate(key, catalog, fmt="vllm-serve")
    assert outcome.ok and "--trust-remote-code" not in outcome.text
    check_golden(golden_name(key, ".vllm-serve.sh"), outcome.text)


def test_replay_keeps_shipped_service_and_changes_only_slots(catalog):
    profile = catalog.profiles["vllm/qwen-35b-a3b-dual"]
    outcome = generate(profile.key, catalog)
    service = yaml.safe_load(outcome.text)["services"][profile.runtime.service_name]
    shipped = dict(profile.runtime.service)
    shipped_cmd = [c for c in shipped["command"] if c != "--trust-remote-code"]
    assert service["command"] == shipped_cmd  # slots already equal the profile's values
    for key in shipped:
        if key != "command":
            assert yaml.safe_load(json.dumps(service[key])) == yaml.safe_load(json.dumps(shipped[key]))


def test_param_slots_follow_the_profile(catalog):
    key = "vllm/qwen-35b-a3b-dual"
    p = catalog.profiles[key]
    changed = dataclasses.replace(p, tp=1, max_model_len=1000, mem_util=0.5, max_num_seqs=7, port=9999)
    cat = dataclasses.replace(catalog, profiles={**catalog.profiles, key: changed})
    text = generate(key, cat).text
    cmd = yaml.safe_load(text)["services"][p.runtime.service_name]["command"]
    after = {cmd[i]: cmd[i + 1] for i in range(len(cmd) - 1) if str(cmd[i]).startswith("--")}
    assert after["--tensor-parallel-size"] == "${TP:-1}"
    assert after["--max-model-len"] == "${MAX_MODEL_LEN:-1000}"
    assert after["--gpu-memory-utilization"] == "${GPU_MEMORY_UTILIZATION:-0.5}"
    assert after["--max-num-seqs"] == "${MAX_NUM_SEQS:-7}"
    assert "${PORT:-9999}" in yaml.safe_load(text)["services"][p.runtime.service_name]["ports"][0]


def test_kv_and_speculative_slots(catalog):
    text = generate("vllm/gemma-mtp-tp1", catalog).text
    cmd = yaml.safe_load(text)["services"][catalog.profiles["vllm/gemma-mtp-tp1"].runtime.service_name]["command"]
    assert cmd[cmd.index("--kv-cache-dtype") + 1] == catalog.kv_arg("fp8_e4m3")
    spec = json.loads(cmd[cmd.index("--speculative-config") + 1])
    drafter = catalog.drafters[catalog.profiles["vllm/gemma-mtp-tp1"].drafter]
    assert spec["num_speculative_tokens"] == drafter.n_default
    # no drafter -> the flag is dropped
    p = catalog.profiles["vllm/gemma-mtp-tp1"]
    cat = dataclasses.replace(catalog, profiles={**catalog.profiles, p.key: dataclasses.replace(p, drafter=None)})
    assert "--speculative-config" not in generate(p.key, cat).text


@pytest.mark.parametrize("key", ("vllm/gemma-int8-mtp", "vllm/gemma-26ba4b-single"))
def test_int8_per_token_head_kv_arg(catalog, key):
    # the shipped composes pass the format's own name (upstream's table said auto+PTH)
    assert catalog.profiles[key].kv_format == "int8_per_token_head"
    assert catalog.kv_arg("int8_per_token_head") == "int8_per_token_head"
    text = generate(key, catalog).text
    cmd = yaml.safe_load(text)["services"][catalog.profiles[key].runtime.service_name]["command"]
    assert cmd[cmd.index("--kv-cache-dtype") + 1] == "${KV_DTYPE:-int8_per_token_head}"
    assert "--kv-cache-dtype int8_per_token_head \\\n" in generate(key, catalog, fmt="vllm-serve").text
    assert "PTH" not in text


def test_header_is_provenance_without_timestamps(catalog):
    text = generate("vllm/dual", catalog, out_name="dual.yml").text
    header = [ln for ln in text.splitlines() if ln.startswith("#")]
    joined = "\n".join(header)
    assert f"catalog: {catalog.version}" in joined
    assert "engine pin: vllm-stable@v0.22.0" in joined
    assert "trust-remote-code: not emitted" in joined
    assert "# patches wired: qwen-froggeric-chat-template\n" in joined
    undelivered = next(ln for ln in header if ln.startswith("# patches undelivered: "))
    assert undelivered.startswith("# patches undelivered: qwen-qwen3coder-tool-parser-deferred-commit (")
    assert "qwen-vllm-marlin-pad (removed from the shipped compose" in undelivered
    assert "qwen-vllm-pr35936-required-fallback (removed from the shipped compose" in undelivered
    assert "docker compose --project-directory" in joined and "-f dual.yml up -d" in joined
    import re
    assert not re.search(r"\d{4}-\d{2}-\d{2}|\d{8}T\d{6}|\d{2}:\d{2}:\d{2}", text)


def _targets(svc):
    return [v.split(":")[-2] if v.endswith(":ro") else v.split(":")[-1] for v in svc["volumes"]]


def test_patches_wired_at_insertion_points(catalog):
    # the shipped file already mounts and runs the wired PR #40391 install: reused, not added twice
    key = "vllm/gemma-26ba4b-single"
    outcome = generate(key, catalog)
    assert outcome.patches.wired == ("gemma-a4b-vllm-pr40391-rebased",)
    svc = yaml.safe_load(outcome.text)["services"][catalog.profiles[key].runtime.service_name]
    assert _targets(svc).count("/etc/club3090/pr40391") == 1
    assert svc["entrypoint"][2].count("bash /etc/club3090/pr40391/install.sh\n") == 1
    assert [n.code for n in outcome.notices] == ["project-directory"]
    assert outcome.notices[0].data["project_directory"].startswith("<club-3090 checkout>/")
    assert outcome.to_json()["notice_codes"] == ["project-directory"]
    # vllm/dual: the chat template's mount and --chat-template are the shipped wiring, reused
    dual = generate("vllm/dual", catalog)
    assert dual.patches.wired == ("qwen-froggeric-chat-template",)
    svc = yaml.safe_load(dual.text)["services"]["vllm-qwen36-27b-dual"]
    assert _targets(svc).count("/etc/qwen-froggeric-chat-template.jinja") == 1
    assert svc["command"].count("--chat-template") == 1


def test_patch_missing_from_the_shipped_file_is_inserted(catalog):
    # No emitting profile wires a patch its shipped file lacks, so lift vllm/minimal's delivery gap
    # on the PR #35936 install (mount + entrypoint line) to exercise the insertion itself.
    pid = "qwen-vllm-pr35936-required-fallback"
    lifted = dataclasses.replace(catalog.patches[pid], delivery_gaps=())
    cat = dataclasses.replace(catalog, patches={**catalog.patches, pid: lifted})
    outcome = generate("vllm/minimal", cat)
    assert outcome.ok and pid in outcome.patches.wired
    svc = yaml.safe_load(outcome.text)["services"]["vllm-qwen36-27b-minimal"]
    volumes = [v for v in svc["volumes"] if v.split(":")[-2] == "/etc/club3090/install-pr35936.sh"]
    assert volumes == ["../../../../../../models/qwen3.6-27b/vllm/patches/"
                       "vllm-pr35936-required-fallback/install.sh:/etc/club3090/install-pr35936.sh:ro"]
    assert svc["entrypoint"][2].startswith("bash /etc/club3090/install-pr35936.sh\n")
    validate_compose(outcome.text)


@pytest.mark.parametrize("key", sorted(DROPPED))
def test_dropped_patches_are_undelivered_and_not_mounted(catalog, key):
    seen = []

    def guard(patch, profile):  # fails exactly the dropped patches: refusal/exit 3 if consulted
        seen.append(patch.id)
        return patch.id not in DROPPED[key]

    outcome = generate(key, catalog, guard_runner=guard)
    assert outcome.ok and exit_code(outcome.outcome) == 0 and not outcome.degraded
    assert seen and not set(DROPPED[key]) & set(seen)
    undelivered = dict(outcome.patches.undelivered)
    for pid in DROPPED[key]:
        assert key in catalog.patches[pid].load_bearing_composes
        assert pid not in outcome.patches.wired
        assert undelivered[pid].startswith("removed from the shipped compose when it moved to stable vLLM")
    svc = yaml.safe_load(outcome.text)["services"][catalog.profiles[key].runtime.service_name]
    for pid in DROPPED[key]:
        for mount in catalog.patches[pid].mounts:
            src, dst = mount.split(":")[:2]
            assert dst not in _targets(svc)
            assert src[2:] not in outcome.text
        for line in catalog.patches[pid].invocations:
            assert line not in svc["entrypoint"][2]


def test_foundational_drift_refuses(catalog):
    def guard(patch, profile):
        return patch.id != "gemma-vllm-pr40391-rebased"

    assert catalog.patches["gemma-vllm-pr40391-rebased"].foundational
    outcome = dry_run("vllm/gemma-int8-mtp", catalog, guard_runner=guard)
    assert not outcome.ok and exit_code(outcome.outcome) == 2 and outcome.refusal == FOUNDATIONAL_DRIFT
    assert outcome.text is None and "gemma-vllm-pr40391-rebased" not in outcome.patches.wired
    assert outcome.failed_patches == ("gemma-vllm-pr40391-rebased",)
    assert outcome.stop().detail["failed_patches"] == ("gemma-vllm-pr40391-rebased",)
    assert outcome.to_json()["failed_patches"] == ["gemma-vllm-pr40391-rebased"]
    assert outcome.stop().token == "d-refused:foundational-drift"
    assert dry_run("vllm/gemma-int8-mtp", catalog, guard_runner=guard, accept_degraded=True).refusal == \
        FOUNDATIONAL_DRIFT  # acknowledgement does not cover foundational drift


def test_capability_degraded_needs_acknowledgement(catalog):
    pid = "gemma-vllm-gemma4-tool-parser-fixes"

    def guard(patch, profile):
        return patch.id != pid

    refused = generate("vllm/gemma-int8-mtp", catalog, guard_runner=guard)
    assert exit_code(refused.outcome) == 3 and refused.refusal == DEGRADED_DRIFT and refused.degraded
    assert refused.text is None and refused.failed_patches == (pid,)
    accepted = generate("vllm/gemma-int8-mtp", catalog, guard_runner=guard, accept_degraded=True)
    assert accepted.ok and accepted.degraded and exit_code(accepted.outcome) == 0
    assert accepted.patches.degraded == ((pid, "tool-call-stream"),)
    assert accepted.patches.wired == ("gemma-vllm-pr40391-rebased",)
    header = accepted.text.split("services:")[0]
    assert f"# DEGRADED: patches omitted after drift: {pid} (tool-call-stream)" in header
    assert "# patches wired: gemma-vllm-pr40391-rebased\n" in header
    degraded = [n for n in accepted.notices if n.code == "degraded"]
    assert [p["id"] for n in degraded for p in n.data["patches"]] == [pid]
    assert accepted.failed_patches == (pid,)


def test_degraded_patch_is_unwired(catalog):
    # the omitted patch's shipped mount and --chat-template leave the service
    def guard(patch, profile):
        return patch.id != "qwen-froggeric-chat-template"

    outcome = generate("vllm/minimal", catalog, guard_runner=guard, accept_degraded=True)
    assert outcome.ok and outcome.patches.degraded[0][0] == "qwen-froggeric-chat-template"
    svc = yaml.safe_load(outcome.text)["services"]["vllm-qwen36-27b-minimal"]
    assert "/etc/qwen-froggeric-chat-template.jinja" not in _targets(svc)
    assert "/etc/qwen-froggeric-chat-template.jinja" not in svc["command"]
    assert "/etc/qwen-froggeric-chat-template.jinja" in \
        yaml.safe_load(generate("vllm/minimal", catalog).text)["services"]["vllm-qwen36-27b-minimal"]["command"]


def test_delivery_gap_skips_guard(catalog):
    seen = []

    def guard(patch, profile):
        seen.append(patch.id)
        return True

    generate("vllm/minimal", catalog, guard_runner=guard)
    assert "qwen-qwen3coder-tool-parser-deferred-commit" not in seen
    assert "qwen-froggeric-chat-template" in seen  # wired patches are still guarded


def _with_arch(catalog, arch, **changes):
    row = dataclasses.replace(catalog.arches[arch], **changes)
    return dataclasses.replace(catalog, arches={**catalog.arches, arch: row})


def test_trc_refusal_when_not_evidence_cited_false(catalog):
    arch = catalog.arch_row_for_model("qwen3.6-35b-a3b").arch
    for changes in ({"trust_remote_code": "unverified"}, {"trust_remote_code_evidence": "none"},
                    {"trust_remote_code": "true"}):
        cat = _with_arch(catalog, arch, **changes)
        assert generate("vllm/qwen-35b-a3b-dual", cat).refusal == TRC


def test_tp_or_kv(catalog):
    p = catalog.profiles["vllm/qwen-35b-a3b-dual"]
    cat = dataclasses.replace(catalog, profiles={**catalog.profiles, p.key: dataclasses.replace(p, tp=3)})
    assert generate(p.key, cat).refusal == TP_OR_KV
    cat = dataclasses.replace(catalog, profiles={**catalog.profiles,
                                                 p.key: dataclasses.replace(p, kv_format="q4_0")})
    assert generate(p.key, cat).refusal == TP_OR_KV


def test_pin_mismatch_carries_row_reason(catalog):
    profile = catalog.profiles["vllm/dual-dflash"]
    pin = catalog.arch_row_for_model(profile.model).pin_for(catalog.engines[profile.engine].pin)
    assert pin is not None and not pin.loads and pin.reason
    outcome = dry_run(profile.key, catalog)
    assert outcome.refusal == PIN_MISMATCH and exit_code(outcome.outcome) == 2 and outcome.detail == pin.reason
    assert outcome.detail.startswith("Engine deprecated")


@pytest.mark.parametrize("key,detail", [
    ("vllm/dual-bf16", "vllm-nightly-clean@bf610c2f56764e1b30bc6065f4ceace3d6e59036 is marked "
                       "loads:false for Qwen3NextForCausalLM"),
    ("vllm/dual-int8", "vllm-nightly-full@e47c98ef7a38792996e452ef53914e21e41928e9 is not a "
                       "validated pin for Qwen3NextForCausalLM"),
])
def test_pin_mismatch_without_row_reason(catalog, key, detail):
    outcome = dry_run(key, catalog)
    assert outcome.refusal == PIN_MISMATCH and outcome.detail == detail and outcome.text is None


def test_dry_run_writes_nothing(catalog, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    outcome = dry_run("vllm/minimal", catalog)
    assert outcome.ok and outcome.text and list(tmp_path.iterdir()) == []


def test_with_default():
    assert with_default("${TP:-1}", "2") == "${TP:-2}"
    assert with_default("${MAX_MODEL_LEN:-${CTX:-262144}}", "8") == "${MAX_MODEL_LEN:-${CTX:-8}}"
    assert with_default("${TP}", "2") == "${TP:-2}"
    assert with_default("1", "4") == "4"


def test_interpolate():
    env = {"A": "x", "E": ""}
    assert interpolate("$$A ${A} ${B:-d} ${E:-e} ${E-e} ${A:+y} $A \"$@\"", env) == '$A x d e  y x "$@"'
    assert interpolate("${B:-${C:-z}}", env) == "z"


# ---- derived compose --------------------------------------------------------------------------

QWEN25_7B = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 3584,
             "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
             "intermediate_size": 18944, "vocab_size": 152064, "max_position_embeddings": 32768,
             "torch_dtype": "bfloat16", "tie_word_embeddings": False}


def make_spec(ref="Qwen/Qwen2.5-7B-Instruct", *, config=QWEN25_7B, quant=None, compute="bfloat16"):
    return ModelSpec(source="hub", ref=ref, revision=None, commit="0123456789abcdef0123456789abcdef01234567",
                     arch=parse_config(config), weights_bytes=15_231_233_024,
                     dtype_bytes=MappingProxyType({"BF16": 15_231_233_024}), weight_files=(),
                     download_files=(), footprint_bytes=15_242_000_000, quantization=quant,
                     compute_dtype=compute, requires_trust_remote_code=False, has_mtp_head=False,
                     has_vision=False, confidence="estimated-lower-bound")


def derive(catalog, spec, profile="vllm/minimal", **kw):
    args = dict(snapshot_dir=Path("/data/hf/club3090/pulls/qwen-qwen2.5-7b-instruct"),
                hf_home=Path("/data/hf"), max_model_len=16384, trust_remote_code=False,
                gpu_indices=(0, 1))
    args.update(kw)
    return derived_compose(spec, RuntimeShape.of(catalog.profiles[profile]), catalog, **args)


@pytest.mark.parametrize("name,spec_kw", [
    ("qwen2.5-7b-bf16", {}),
    ("qwen2.5-7b-gptq", {"ref": "Qwen/Qwen2.5-7B-Instruct-GPTQ-Int4",
                         "quant": Quantization("gptq", 4), "compute": "float16"}),
    ("qwen2.5-7b-fp8", {"ref": "neuralmagic/Qwen2.5-7B-Instruct-FP8",
                        "quant": Quantization("fp8", 8), "compute": "bfloat16"}),
])
def test_derived_goldens(catalog, name, spec_kw):
    spec = make_spec(**spec_kw)
    compose = derive(catalog, spec, out_name=f"{name}.yml")
    assert compose.ok, compose.refusal
    resolved = validate_compose(compose.text)
    check_golden(GOLDEN / f"derived__{name}.yml", compose.text)
    serve = derive(catalog, spec, fmt="vllm-serve", out_name=f"{name}.yml")
    check_golden(GOLDEN / f"derived__{name}.vllm-serve.sh", serve.text)
    # the two renderings come from one description: same argv after the entrypoint
    svc = next(iter(resolved["services"].values()))
    env, argv, _ = compose.launch.serve_invocation()
    host_model = str(Path("/data/hf/club3090/pulls/qwen-qwen2.5-7b-instruct"))
    # the container listens everywhere (a published port needs it); on the host only where it is published
    host_side = {svc["command"][0]: host_model, "0.0.0.0": "127.0.0.1"}
    assert list(argv) == ["vllm", "serve"] + [host_side.get(a, a) for a in svc["command"]]
    assert svc["ports"] == ["127.0.0.1:8020:8020"]
    assert dict(env)["CUDA_VISIBLE_DEVICES"] == "0"
    assert "--trust-remote-code" not in compose.text


@pytest.mark.parametrize("host,ports,listens", [
    ("0.0.0.0", "0.0.0.0:8020:8020", "0.0.0.0"),
    ("192.168.1.20", "192.168.1.20:8020:8020", "192.168.1.20"),
    ("::1", "[::1]:8020:8020", "::1"),
    ("[::]", "[::]:8020:8020", "::"),
])
def test_derived_host_widens_the_published_address_only(catalog, host, ports, listens):
    compose = derive(catalog, make_spec(), host=host)
    svc = next(iter(validate_compose(compose.text)["services"].values()))
    assert svc["ports"] == [ports]
    command = svc["command"]
    assert command[command.index("--host") + 1] == "0.0.0.0"          # inside the container: unchanged
    _env, argv, _ = compose.launch.serve_invocation()
    assert argv[argv.index("--host") + 1] == listens                   # the host line listens where it publishes


@pytest.mark.parametrize("host", ["localhost", "0.0.0.0:80", "", "1.2.3", "a b"])
def test_derived_host_must_be_an_ip_address(catalog, host):
    from club3090.errors import UsageError

    with pytest.raises(UsageError, match="--host must be an IP address"):
        derive(catalog, make_spec(), host=host)


def test_derived_compose_serves_an_hf_cache_snapshot_through_its_repo_folder(catalog, tmp_path):
    """The snapshot's files are relative links into ../../blobs: the mount is the repo folder."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "models--Qwen--Qwen2.5-7B-Instruct"
    (repo / "blobs").mkdir(parents=True)
    (repo / "blobs" / "abc").write_text("{}", encoding="utf-8")
    (repo / "snapshots" / commit).mkdir(parents=True)
    (repo / "snapshots" / commit / "config.json").symlink_to(Path("../../blobs/abc"))
    compose = derive(catalog, make_spec(), snapshot_dir=repo / "snapshots" / commit, hf_home=tmp_path)
    svc = next(iter(validate_compose(compose.text)["services"].values()))
    volume = svc["volumes"][0]
    assert volume["source"] == str(repo) and volume["read_only"] is True
    model = svc["command"][0]
    assert model == f"{volume['target']}/snapshots/{commit}"
    inside = Path(str(repo) + model[len(volume["target"]):]) / "config.json"     # the link as the container sees it
    assert inside.read_text(encoding="utf-8") == "{}"
    _env, argv, _ = compose.launch.serve_invocation()
    assert argv[2] == str(repo / "snapshots" / commit)


def test_derived_dispatch(catalog):
    cmd = lambda o: next(iter(yaml.safe_load(o.text)["services"].values()))["command"]  # noqa: E731
    bf16 = cmd(derive(catalog, make_spec()))
    assert "--dtype" in bf16 and "--quantization" not in bf16
    assert bf16[bf16.index("--max-model-len") + 1] == "16384"
    assert bf16[bf16.index("--kv-cache-dtype") + 1] == "fp8_e5m2"
    awq = cmd(derive(catalog, make_spec(quant=Quantization("awq", 4), compute="float16")))
    assert awq[awq.index("--quantization") + 1] == "awq" and awq[awq.index("--dtype") + 1] == "float16"
    trc = cmd(derive(catalog, make_spec(), trust_remote_code=True))
    assert "--trust-remote-code" in trc
    default_ctx = cmd(derive(catalog, make_spec(), max_model_len=None))
    assert default_ctx[default_ctx.index("--max-model-len") + 1] == str(catalog.profiles["vllm/minimal"].max_model_len)


def test_derived_gpu_selection(catalog):
    out = derive(catalog, make_spec(), profile="vllm/qwen-35b-a3b-dual", gpu_indices=(3, 1, 2))
    svc = next(iter(yaml.safe_load(out.text)["services"].values()))
    assert "NVIDIA_VISIBLE_DEVICES=3,1" in svc["environment"]
    assert svc["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"] == ["3", "1"]
    refused = derive(catalog, make_spec(), profile="vllm/qwen-35b-a3b-dual", gpu_indices=(0,))
    assert refused.refusal == "derived-runtime-unsupported:gpu-count" and exit_code(refused.outcome) == 2


@pytest.mark.parametrize("spec_kw,token", [
    ({"quant": Quantization("auto-round", 4)}, "unsupported-quant-for-derived:autoround"),
    ({"quant": Quantization("bitsandbytes", 4)}, "unsupported-quant-for-derived"),
    ({"quant": Quantization("gptq", 4), "compute": None,
      "config": {k: v for k, v in QWEN25_7B.items() if k != "torch_dtype"}},
     "unsupported-quant-for-derived:missing-torch-dtype"),
    ({"compute": None, "config": {k: v for k, v in QWEN25_7B.items() if k != "torch_dtype"}},
     "unsupported-quant-for-derived:missing-torch-dtype"),
    ({"compute": "float32", "config": {**QWEN25_7B, "torch_dtype": "float32"}},
     "unsupported-quant-for-derived"),
])
def test_derived_quant_refusals(catalog, spec_kw, token):
    assert derive(catalog, make_spec(**spec_kw)).refusal == f"derived-runtime-unsupported:{token}"


def test_derived_emittable_clauses_in_order(catalog):
    assert derive(catalog, make_spec(), profile="vllm/gemma-int8-mtp").refusal == \
        "derived-runtime-unsupported:engine-install-method"
    assert derive(catalog, make_spec(), profile="vllm/dual").refusal == "derived-runtime-unsupported:drafter"
    p = catalog.profiles["vllm/minimal"]
    for changes, token in (({"required_engine_features": ("int8_per_token_head",)}, "overlay-feature"),
                           ({"kv_format": "int8_per_token_head"}, "kv")):
        cat = dataclasses.replace(catalog, profiles={**catalog.profiles,
                                                     p.key: dataclasses.replace(p, **changes)})
        assert derive(cat, make_spec()).refusal == f"derived-runtime-unsupported:{token}"


# ---- injection --------------------------------------------------------------------------------

EVIL_REFS = [
    'evil/"quoted": ${HF_TOKEN} $HOME',
    "org/name: {a: b}\n",
    "a/b'; rm -rf / #",
    "${PWD}/x:y:z",
]


@pytest.mark.parametrize("ref", EVIL_REFS)
def test_injection_through_model_name(catalog, ref):
    if "\n" in ref:
        with pytest.raises(InputError):
            derive(catalog, make_spec(ref=ref))
        return
    out = derive(catalog, make_spec(ref=ref))
    resolved = validate_compose(out.text)
    (_name, svc), = resolved["services"].items()
    assert set(svc) == {"image", "container_name", "restart", "ports", "volumes", "environment",
                        "shm_size", "ipc", "deploy", "entrypoint", "command"}
    served = svc["command"][svc["command"].index("--served-model-name") + 1]
    assert served == sanitize_slug(ref, max_len=MAX_SLUG) and len(served) <= 256
    assert "$" not in served and ":" not in served


@pytest.mark.parametrize("path", ["/data/we:ird/${HOME}/$USER/it's \"q\"", "/data/a b/$$x"])
def test_injection_through_paths_is_escaped(catalog, path):
    out = derive(catalog, make_spec(), snapshot_dir=Path(path))
    doc = yaml.safe_load(out.text)
    (svc,) = doc["services"].values()
    assert svc["volumes"][0]["source"] == path.replace("$", "$$")
    resolved = validate_compose(out.text)
    (rsvc,) = resolved["services"].values()
    assert rsvc["volumes"][0]["source"] == path  # exactly the path after Compose interpolation
    _, argv, _ = out.launch.serve_invocation()
    line = derive(catalog, make_spec(), snapshot_dir=Path(path), fmt="vllm-serve").text
    assert shlex.quote(path) in line
    assert path in argv


@pytest.mark.parametrize("bad", ["/data/x\ny: 1", "/data/\x1b[31m", "/data/\u2028x"])
def test_control_characters_refused(catalog, bad):
    with pytest.raises(InputError):
        derive(catalog, make_spec(), snapshot_dir=Path(bad))
    with pytest.raises(InputError):
        derive(catalog, make_spec(ref="org/" + bad.split("/")[-1]))
