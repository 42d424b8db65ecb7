"""The shipped catalog loads, cross-references resolve, and broken copies fail loudly."""

from __future__ import annotations

import json
import re
import shutil
from decimal import Decimal
from importlib import resources
from pathlib import Path

import pytest
import yaml

from club3090.catalog import load_catalog, loader
from club3090.compose.generate import PARAM_SLOTS
from club3090.errors import CatalogError
from tests.fixtures_path import fixture_path

SEED_VLLM_PROFILES = (
    "vllm/default", "vllm/long-text", "vllm/long-text-no-mtp", "vllm/long-vision",
    "vllm/bounded-thinking", "vllm/tools-text", "vllm/minimal", "vllm/dual", "vllm/dual-turbo",
    "vllm/dual-dflash", "vllm/dual-dflash-noviz", "vllm/dual-bf16", "vllm/dual-int8",
    "vllm/dual-tq3-mtp", "vllm/dual-tq3-mtp-genesis", "vllm/dual-tq3-nomtp",
    "vllm/dual-carnice-bf16mtp", "vllm/dual-qwopus-bf16mtp", "vllm/dual4", "vllm/dual4-dflash",
    "vllm/gemma-mtp-tp1", "vllm/gemma-bf16-mtp", "vllm/gemma-int8-mtp", "vllm/gemma-26ba4b-single",
    "vllm/gemma-26ba4b-dual", "vllm/qwen-a3b-preview-single", "vllm/qwen-35b-a3b-dual",
)
GIB = 2 ** 30
MIB = 2 ** 20


@pytest.fixture(scope="module")
def cat():
    return load_catalog()


@pytest.fixture(scope="module")
def seed():
    """The seed-era catalog (tests/fixtures/catalog_seed): facts the seed documents state."""
    return load_catalog(fixture_path("catalog_seed"))


def data_dir() -> Path:
    return Path(str(resources.files("club3090.catalog").joinpath("data")))


# ----------------------------------------------------------------------------- shipped data

def test_shipped_catalog_loads_and_is_cached(cat):
    assert re.fullmatch(r"[0-9a-f]{12}", cat.version)
    assert cat.schema_version == 2
    assert load_catalog() is cat


def test_every_data_file_has_schema_version():
    for name in loader.FILES:
        doc = yaml.safe_load((data_dir() / name).read_text(encoding="utf-8"))
        assert doc["schema_version"] == 2, name
    assert sorted(p.name for p in data_dir().glob("*.yaml")) == sorted(loader.FILES)


@pytest.mark.parametrize("which", ["seed", "cat"])
def test_seed_profiles_present_with_fields(which, request):
    """The 27 seed vLLM profiles: in the seed-era catalog as the seed shipped them, and still present
    (archived ones marked) in the synced catalog."""
    cat = request.getfixturevalue(which)
    assert len(SEED_VLLM_PROFILES) == 27
    for key in (*SEED_VLLM_PROFILES, "llamacpp/default"):
        p = cat.profiles[key]
        assert p.key == key
        assert p.model in cat.models and p.weights_variant in cat.models[p.model].weights
        assert p.engine in cat.engines and p.kv_format in cat.kv_formats
        assert p.tp >= 1 and p.pp >= 1 and p.max_model_len > 0 and p.max_num_seqs >= 1 and p.port > 0
        assert p.reference_gpu == "rtx-3090"
        assert p.compose_path.startswith("models/")
    for key in SEED_VLLM_PROFILES:
        p = cat.profiles[key]
        assert cat.engines[p.engine].type == "vllm"
        assert 0 < p.mem_util <= 1
        rt = p.runtime
        assert rt is not None, key
        assert rt.service["image"]
        assert isinstance(rt.service["command"], list)
        assert set(rt.insertion_points) == {k for k in ("volumes", "entrypoint") if k in rt.service}
        # the slots replay fills (compose.generate.PARAM_SLOTS) are present in every shipped service
        args = [str(a).split("=", 1)[0] for a in rt.service["command"]]
        for flag, _field in PARAM_SLOTS:
            if flag != "--kv-cache-dtype":     # bf16 composes omit it
                assert flag in args, (key, flag)
        if which == "seed":
            # newer composes build --speculative-config in the entrypoint (SPEC_N), not the command
            assert ("--speculative-config" in args) is (p.drafter is not None), key
        assert rt.service["ports"], key
    llama = cat.profiles["llamacpp/default"]
    assert cat.engines[llama.engine].type == "llama.cpp"
    # the seed never captured a llama.cpp compose; the synced catalog captures every one
    assert (llama.runtime is None) is (which == "seed"), which


def test_genesis_rule_recomputed_from_service(cat):
    for key, p in cat.profiles.items():
        if p.runtime is None:
            continue
        text = json.dumps(p.runtime.service)
        expected = bool(re.search(r"_genesis|GENESIS_PIN|GENESIS_ENABLE", text)) or \
            p.kv_format.startswith("turboquant")
        assert p.runtime.genesis_equipped is expected, key
    assert cat.profiles["vllm/dual-turbo"].runtime.genesis_equipped
    assert not cat.profiles["vllm/minimal"].runtime.genesis_equipped


def test_emittability(seed, cat):
    assert seed.emittable("vllm/minimal") == (True, None)
    assert seed.emittable("vllm/dual-turbo") == (False, "genesis-equipped")
    assert seed.emittable("llamacpp/default") == (False, "engine-not-vllm")
    assert seed.emittable("vllm/qwen-27b-dual-fast") == (False, "no-runtime-capture")
    # synced: every vLLM entry of upstream's registry has its shipped compose captured
    assert cat.emittable("vllm/qwen-27b-dual-fast") == (True, None)
    for key, p in cat.profiles.items():
        if cat.engines[p.engine].type == "vllm" and not p.archived:
            assert p.runtime is not None, key


def test_cross_references_resolve(cat):
    for key, p in cat.profiles.items():
        model = cat.models[p.model]
        assert p.weights_variant in model.weights, key
        assert p.engine in cat.engines, key
        assert p.drafter is None or p.drafter in cat.drafters, key
        assert p.kv_format in cat.kv_formats, key
        assert p.reference_gpu in cat.gpus
    for arch, row in cat.arches.items():
        assert row.engine_pins, arch
        for pin in row.engine_pins:
            assert pin.engine in cat.engines, (arch, pin.pin)
        for pid in row.required_patches:
            assert pid in cat.patches
        for slug in row.model_slugs:
            assert slug in cat.models
    for pid, patch in cat.patches.items():
        for key in patch.load_bearing_composes:
            assert key in cat.profiles, pid
        for gap in patch.delivery_gaps:
            assert set(gap.profiles) <= set(cat.profiles)
    for a in cat.anchors:
        assert (a.profile is None or a.profile in cat.profiles) and a.gpu in cat.gpus
        assert a.profile is not None or a.model in cat.models      # self-describing without a profile
        assert a.measured_peak_bytes or a.measured_kv_tokens
        if a.weights_variant is not None:
            assert a.weights_variant in cat.models[a.model].weights
        assert a.drafter in (None, "none") or a.drafter in cat.drafters
    for e in cat.engines.values():
        assert set(e.supported_kv_formats) <= set(cat.kv_formats)
        assert e.pin.startswith(e.id + "@")
    for m in cat.models.values():
        assert m.default_weight_variant in m.weights
    for d in cat.drafters.values():
        assert set(d.model_compat) <= set(cat.models)


def test_models_carry_config_and_variants(cat):
    for mid, m in cat.models.items():
        cfg = m.hf_config          # the one record of the model's geometry
        assert cfg["architectures"][0] == m.architecture, mid
        text = cfg.get("text_config", cfg)
        assert text["max_position_embeddings"] == m.max_ctx_supported, mid
        assert text["hidden_size"] > 0 and text["num_attention_heads"] > 0, mid
    q = cat.models["qwen3.6-27b"].weights["autoround-int4"]
    assert q.hf_repos == ("Lorbus/Qwen3.6-27B-int4-AutoRound", "Intel/Qwen3.6-27B-int4-AutoRound")
    assert q.size_bytes == 17_500_000_000 and q.kind == "main" and q.format == "autoround"
    assert "fixture" in cat.models["qwen3.6-35b-a3b"].hf_config_source


def test_find_variant_is_case_insensitive_over_aliases(cat):
    hit = cat.find_variant("intel/QWEN3.6-27B-INT4-AUTOROUND")
    assert hit is not None
    model, variant = hit
    assert (model.id, variant.id) == ("qwen3.6-27b", "autoround-int4")
    assert cat.find_variant("Lorbus/Qwen3.6-27B-int4-AutoRound@abc123")[1].id == "autoround-int4"
    assert cat.find_variant("meta-llama/Llama-3.1-8B") is None


def test_arch_lookup(cat):
    assert cat.arch_row("Qwen3_5ForConditionalGeneration").arch == "Qwen3NextForCausalLM"
    assert cat.arch_row_for_model("gemma-4-26b-a4b").arch == "Gemma4ForConditionalGenerationMoE"
    assert cat.arch_row_for_model("qwen3.6-27b").arch == "Qwen3NextForCausalLM"
    assert cat.arch_row("NoSuchForCausalLM") is None
    llama = cat.arch_row("LlamaForCausalLM")
    assert llama.trust_remote_code == "unverified"
    for native in ("Qwen2ForCausalLM", "MistralForCausalLM", "Qwen3MoeForCausalLM", "GptOssForCausalLM",
                   "DeepseekV3ForCausalLM", "GPT2LMHeadModel", "NemotronHForCausalLM"):
        row = cat.arch_row(native)
        assert row.trust_remote_code == "false" and row.trust_remote_code_evidence
        assert row.pin_for("vllm-stable@v0.22.0").loads
    nightly = cat.arch_row("Qwen3NextForCausalLM").pin_for(
        "vllm-nightly-clean@bf610c2f56764e1b30bc6065f4ceace3d6e59036")
    assert nightly is not None and nightly.loads is False


def test_engines_and_kv_formats(seed, cat):
    stable = seed.engines["vllm-stable"]
    assert stable.pin == "vllm-stable@v0.22.0" and stable.vllm_version == "0.22.0"
    synced = cat.engines["vllm-stable"]
    assert synced.pin == "vllm-stable@v" + str(synced.vllm_version) and synced.image.endswith(":v0.27.1")
    assert cat.engines["vllm-nightly-clean"].withdrawn and not synced.withdrawn
    assert stable.min_sm == Decimal("7.5") and stable.vendored_overlays == ()
    assert cat.engines["vllm-nightly-clean"].vllm_version is None
    assert cat.engines["vllm-pip-baseline"].vllm_version == "0.20.2"
    kv = cat.kv_formats
    assert kv["fp8_e4m3"].min_sm == Decimal("8.6")
    assert kv["turboquant_3bit_nc"].min_sm == Decimal("8.0")          # corrected: upstream said 9.0
    assert kv["nvfp4"].min_sm == Decimal("10.0")
    assert {k: cat.kv_arg(k) for k in ("bf16", "fp16", "fp8_e5m2", "fp8_e4m3", "int8_per_token_head",
                                       "q4_0", "k8v4")} == {
        "bf16": None, "fp16": None, "fp8_e5m2": "fp8_e5m2", "fp8_e4m3": "fp8",
        "int8_per_token_head": "int8_per_token_head", "q4_0": "q4_0", "k8v4": "k8v4"}
    assert kv["turboquant_3bit_nc"].emittable is False
    for name in ("auto", "bf16", "fp16", "fp32", "fp8", "fp8_e4m3", "fp8_e5m2", "int8_per_token_head",
                 "fp8_per_token_head", "nvfp4", "turboquant_3bit_nc", "turboquant_k8v4", "q8_0",
                 "q4_0", "q5_0", "k8v4"):
        assert name in kv


def test_gemma_fp8_profile_requires_sm90(seed, cat):
    p = seed.profiles["vllm/gemma-mtp-tp1"]
    assert p.kv_format == "fp8_e4m3" and p.required_sm == Decimal("9.0")
    assert seed.need_sm("vllm/gemma-mtp-tp1") == Decimal("9.0")
    assert seed.need_sm("vllm/minimal") == Decimal("7.5")
    # synced: vllm/minimal moved to fp8_e4m3 KV, whose floor (8.6) now sets the profile's SM
    assert cat.profiles["vllm/minimal"].kv_format == "fp8_e4m3"
    assert cat.need_sm("vllm/minimal") == cat.kv_formats["fp8_e4m3"].min_sm == Decimal("8.6")


def test_gpu_table(cat):
    assert cat.gpu("3090").memory_bytes == 24576 * MIB == 25769803776
    assert cat.gpu("rtx3090") is cat.gpu("RTX-3090") is cat.gpu("NVIDIA GeForce RTX 3090")
    assert cat.gpu("h100").memory_bytes == 81559 * MIB and cat.gpu("h100").sm == Decimal("9.0")
    for name in ("h100-80gb", "4090", "a100-80gb", "a100-40gb", "h200", "l4", "l40s", "rtx-5090",
                 "rtx-pro-6000", "a6000", "t4", "3090-ti", "3060", "a5000"):
        assert cat.gpu(name) is not None, name
    assert "rtx-3090" in cat.gpu_suggestions("rtx-3099")
    assert cat.gpu("rtx-3099") is None


def test_patches_and_anchors(seed, cat):
    assert cat.patches["qwen-vllm-marlin-pad"].deprecated_on == "2026-07-02"    # upstream retired it
    cat = seed
    marlin = cat.patches["qwen-vllm-marlin-pad"]
    assert marlin.foundational and marlin.on_fail == "hard-refuse"
    assert marlin.load_bearing_composes == ("vllm/dual",)
    assert all(mount.endswith(":ro") for mount in marlin.mounts) and len(marlin.mounts) == 2
    sidecar = cat.patches["qwen-qwen3coder-tool-parser-deferred-commit"]
    assert set(sidecar.delivery_gaps[0].profiles) == {"vllm/minimal", "vllm/dual"}
    assert cat.patches["genesis-p4"].deprecated
    assert any(a.profile == "vllm/minimal" for a in cat.anchors)


# ----------------------------------------------------------------------------- broken copies

def _copy(tmp_path: Path) -> Path:
    dest = tmp_path / "data"
    shutil.copytree(data_dir(), dest)
    return dest


def _edit(root: Path, name: str, fn) -> None:
    doc = yaml.load((root / name).read_text(encoding="utf-8"), Loader=yaml.CSafeLoader)
    fn(doc)
    (root / name).write_text(yaml.dump(doc, Dumper=yaml.CSafeDumper, sort_keys=False), encoding="utf-8")


def _problems(root: Path) -> set[tuple[str, str]]:
    with pytest.raises(CatalogError) as info:
        load_catalog(root)
    return {(p.file, p.path) for p in info.value.problems}


def test_copy_of_shipped_data_loads(tmp_path):
    assert load_catalog(_copy(tmp_path)).version == load_catalog().version


def test_unknown_key_named_with_hint(tmp_path):
    root = _copy(tmp_path)
    _edit(root, "profiles.yaml", lambda d: d["profiles"]["vllm/minimal"].update(mem_utill=0.9))
    with pytest.raises(CatalogError) as info:
        load_catalog(root)
    [problem] = info.value.problems
    assert (problem.file, problem.path) == ("profiles.yaml", "profiles['vllm/minimal'].mem_utill")
    assert "mem_util" in problem.message


def test_wrong_type_named(tmp_path):
    root = _copy(tmp_path)
    _edit(root, "profiles.yaml", lambda d: d["profiles"]["vllm/minimal"].update(mem_util="0.92x"))
    assert ("profiles.yaml", "profiles['vllm/minimal'].mem_util") in _problems(root)


def test_wrong_enum_and_missing_key(tmp_path):
    root = _copy(tmp_path)

    def edit(d):
        d["arches"]["LlamaForCausalLM"]["trust_remote_code"] = "no"
        del d["arches"]["Qwen2ForCausalLM"]["tp_divisors"]
    _edit(root, "arches.yaml", edit)
    assert _problems(root) >= {("arches.yaml", "arches['LlamaForCausalLM'].trust_remote_code"),
                               ("arches.yaml", "arches['Qwen2ForCausalLM'].tp_divisors")}


@pytest.mark.parametrize("name, edit, where", [
    ("profiles.yaml", lambda d: d["profiles"]["vllm/minimal"].update(engine="vllm-nope"),
     "profiles['vllm/minimal'].engine"),
    ("profiles.yaml", lambda d: d["profiles"]["vllm/minimal"].update(weights_variant="nope"),
     "profiles['vllm/minimal'].weights_variant"),
    ("profiles.yaml", lambda d: d["profiles"]["vllm/minimal"].update(drafter="nope"),
     "profiles['vllm/minimal'].drafter"),
    ("profiles.yaml", lambda d: d["profiles"]["vllm/minimal"].update(model="nope"),
     "profiles['vllm/minimal'].model"),
    ("arches.yaml", lambda d: d["arches"]["LlamaForCausalLM"]["engine_pins"][0].update(pin="ghost@v1"),
     "arches['LlamaForCausalLM'].engine_pins[0].pin"),
    ("patches.yaml", lambda d: d["patches"]["qwen-vllm-marlin-pad"].update(load_bearing_composes=["vllm/nope"]),
     "patches['qwen-vllm-marlin-pad'].load_bearing_composes[0]"),
    ("anchors.yaml", lambda d: d["anchors"][0].update(profile="vllm/nope"), "anchors[0].profile"),
    ("anchors.yaml", lambda d: d["anchors"][0].update(model="nope"), "anchors[0].model"),
    ("anchors.yaml", lambda d: d["anchors"][0].update(weights_variant="nope"), "anchors[0].weights_variant"),
    ("anchors.yaml", lambda d: d["anchors"][0].update(drafter="nope"), "anchors[0].drafter"),
    ("anchors.yaml", lambda d: d["anchors"][0].update(engine="nope"), "anchors[0].engine"),
    ("anchors.yaml", lambda d: d["anchors"][0].update(kv_format="nope"), "anchors[0].kv_format"),
    ("anchors.yaml", lambda d: d["anchors"][0].update(gpu="nope"), "anchors[0].gpu"),
])
def test_dangling_reference_named(tmp_path, name, edit, where):
    root = _copy(tmp_path)
    _edit(root, name, edit)
    assert (name, where) in _problems(root)


def test_every_problem_reported_at_once(tmp_path):
    root = _copy(tmp_path)
    _edit(root, "profiles.yaml", lambda d: d["profiles"]["vllm/dual"].update(tp="two"))
    _edit(root, "gpus.yaml", lambda d: d["gpus"]["rtx-3090"].update(vram=24))
    _edit(root, "engines.yaml", lambda d: d["engines"]["vllm-stable"].update(min_sm="fast"))
    _edit(root, "drafters.yaml", lambda d: d["drafters"]["qwen-mtp-builtin"].update(n_default=[]))
    found = _problems(root)
    assert found >= {("profiles.yaml", "profiles['vllm/dual'].tp"),
                     ("gpus.yaml", "gpus['rtx-3090'].vram"),
                     ("engines.yaml", "engines['vllm-stable'].min_sm"),
                     ("drafters.yaml", "drafters['qwen-mtp-builtin'].n_default")}


def test_schema_version_and_bad_yaml(tmp_path):
    root = _copy(tmp_path)
    _edit(root, "kv_formats.yaml", lambda d: d.update(schema_version=99))
    (root / "gpus.yaml").write_text("schema_version: 1\ngpus: [unclosed\n", encoding="utf-8")
    found = _problems(root)
    assert ("kv_formats.yaml", "schema_version") in found
    assert any(f == "gpus.yaml" for f, _ in found)


def test_schema_1_prose_constraints_and_bad_conditions_are_refused(tmp_path):
    root = _copy(tmp_path)

    def schema_1(doc):
        doc["schema_version"] = 1
        doc["arches"]["Qwen3NextForCausalLM"]["kernel_constraints"] = ["TurboQuant KV needs the Genesis patch set."]
        doc["arches"]["Qwen3_5MoeForConditionalGeneration"]["kernel_constraints"] = [
            {"text": "x", "applies_when": {"tp_min": 0, "kv_formats": ["no-such-kv"], "when": 1}}]
    _edit(root, "arches.yaml", schema_1)
    with pytest.raises(CatalogError) as info:
        load_catalog(root)
    found = {(p.file, p.path): p.message for p in info.value.problems}
    assert "unsupported schema version 1" in found[("arches.yaml", "schema_version")]
    assert "a prose string is schema 1" in found[("arches.yaml", "arches['Qwen3NextForCausalLM'].kernel_constraints[0]")]
    where = "arches['Qwen3_5MoeForConditionalGeneration'].kernel_constraints[0].applies_when"
    assert ("arches.yaml", f"{where}.tp_min") in found
    assert ("arches.yaml", f"{where}.when") in found


def test_constraint_conditions_cross_reference_kv_formats(tmp_path):
    root = _copy(tmp_path)
    _edit(root, "arches.yaml", lambda d: d["arches"]["Qwen3NextForCausalLM"]["kernel_constraints"].append(
        {"text": "x", "applies_when": {"kv_formats": ["no-such-kv"]}}))
    found = _problems(root)
    assert any(f == "arches.yaml" and p.endswith(".applies_when.kv_formats[0]") for f, p in found)


def test_a_golden_triple_names_profiles_of_the_row_s_own_models(tmp_path):
    root = _copy(tmp_path)
    _edit(root, "arches.yaml", lambda d: d["arches"]["Qwen3NextForCausalLM"].update(
        golden_triple_profiles=["vllm/minimal", "vllm/gemma-mtp-tp1", "no/such-profile"]))
    with pytest.raises(CatalogError) as info:
        load_catalog(root)
    found = {p.path: p.message for p in info.value.problems if p.file == "arches.yaml"}
    base = "arches['Qwen3NextForCausalLM'].golden_triple_profiles"
    assert "not a model of this row" in found[f"{base}[1]"]
    assert f"{base}[2]" in found and f"{base}[0]" not in found


def test_missing_file_is_a_catalog_error(tmp_path):
    root = _copy(tmp_path)
    (root / "anchors.yaml").unlink()
    assert ("anchors.yaml", "<file>") in _problems(root)


def test_package_data_never_points_at_shared():
    src = Path(loader.__file__).parent
    for path in src.rglob("*.py"):
        assert "/shared" not in path.read_text(encoding="utf-8"), path


def test_anchor_peaks_are_gib_readings(cat):
    # upstream kv-calc rows say "GB" but record nvidia-smi MiB / 1024 (vllm/dual 23.6 = 24,166 MiB)
    dual = next(a for a in cat.anchors if a.id == "vllm/dual:kvcalc-22of22-historical")
    seed = next(a for a in cat.anchors if a.id == "vllm/dual:calibration_seed")
    assert dual.measured_peak_bytes == round(23.6 * (1 << 30))
    assert seed.measured_peak_bytes == 24_166 * (1 << 20)
    assert abs(dual.measured_peak_bytes - seed.measured_peak_bytes) < 2 * (1 << 20)


def test_gemma4_configs_carry_global_layer_geometry(cat):
    from club3090.model.architecture import parse_config

    for mid, heads in (("gemma-4-12b", 1), ("gemma-4-31b", 4), ("gemma-4-26b-a4b", 2)):
        a = parse_config(cat.models[mid].hf_config)
        full = [layer for layer in a.layers if layer.kind == "full"]
        assert full and all((layer.num_kv_heads, layer.head_dim, layer.k_eq_v) == (heads, 512, True)
                            for layer in full), mid
    assert cat.models["gemma-4-31b"].weights["autoround-int4"].size_bytes == 21_200_000_000


def _anchor(d, anchor_id):
    return next(a for a in d["anchors"] if a["id"] == anchor_id)


@pytest.mark.parametrize("edit, where", [
    # a profile-less anchor must carry its inputs itself
    (lambda a: a.pop("engine"), "anchors[{i}].engine"),
    (lambda a: a.pop("max_num_seqs"), "anchors[{i}].max_num_seqs"),
    (lambda a: a.pop("drafter"), "anchors[{i}].drafter"),
    (lambda a: a.pop("model"), "anchors[{i}].model"),
    (lambda a: a.pop("weights_variant"), "anchors[{i}].weights_variant"),
    # types, enums, consistency
    (lambda a: a.update(tp="two"), "anchors[{i}].tp"),
    (lambda a: a.update(tp=4), "anchors[{i}].tp"),                   # does not divide gpu_count 2
    (lambda a: a.update(vllm_version="nightly"), "anchors[{i}].vllm_version"),
    (lambda a: a.update(weights_bytes=17_000_000_000), "anchors[{i}].weights_bytes"),   # and a variant
    (lambda a: a.update(engine="llama-cpp-local"), "anchors[{i}].engine"),             # not vLLM
    (lambda a: a.update(weights_bytes=-1, weights_variant=None), "anchors[{i}].weights_bytes"),
])
def test_self_describing_anchor_checked(tmp_path, edit, where):
    root = _copy(tmp_path)
    key = "vllm/gemma-dflash:kvcalc-22of22-historical"
    index = {}

    def change(d):
        index["i"] = next(i for i, a in enumerate(d["anchors"]) if a["id"] == key)
        edit(d["anchors"][index["i"]])

    _edit(root, "anchors.yaml", change)
    assert ("anchors.yaml", where.format(i=index["i"])) in _problems(root)


def test_anchor_model_must_match_its_profile(tmp_path):
    root = _copy(tmp_path)
    _edit(root, "anchors.yaml", lambda d: _anchor(d, "vllm/dual:kvcalc-22of22-historical").update(
        model="gemma-4-31b", weights_variant="awq"))
    found = _problems(root)
    i = next(i for i, a in enumerate(yaml.safe_load((root / "anchors.yaml").read_text())["anchors"])
             if a["id"] == "vllm/dual:kvcalc-22of22-historical")
    assert ("anchors.yaml", f"anchors[{i}].model") in found


def test_anchor_inheriting_a_llamacpp_profiles_engine_is_rejected(tmp_path):
    # the anchor records no engine of its own, so it is priced with its profile's: llama.cpp here
    root = _copy(tmp_path)
    index = {}

    def change(d):
        index["i"] = next(i for i, a in enumerate(d["anchors"]) if a["id"] == "vllm/dual:kvcalc-22of22-historical")
        anchor = d["anchors"][index["i"]]
        anchor.pop("engine", None)
        anchor.update(profile="llamacpp/default", model="qwen3.6-27b", weights_variant="unsloth-q4km")
    _edit(root, "anchors.yaml", change)
    with pytest.raises(CatalogError) as info:
        load_catalog(root)
    where = f"anchors[{index['i']}].engine"
    problems = [p for p in info.value.problems if (p.file, p.path) == ("anchors.yaml", where)]
    assert len(problems) == 1 and "llama-cpp-local" in problems[0].message, info.value.problems
    # the same anchor naming a vLLM engine itself is not refused for its engine
    _edit(root, "anchors.yaml", lambda d: d["anchors"][index["i"]].update(engine="vllm-stable"))
    try:
        load_catalog(root)
    except CatalogError as exc:
        assert ("anchors.yaml", where) not in {(p.file, p.path) for p in exc.problems}, exc.problems


def test_upstream_kvcalc_rows_all_present_and_self_describing(cat):
    sets = {"kvcalc-22of22-historical": 22, "kvcalc-current-8of8": 8}
    for name, count in sets.items():
        rows = [a for a in cat.anchors if a.id.split(":")[1] == name]
        assert len(rows) == count, name
        for a in rows:    # every upstream kv-calc input is recorded on the anchor
            assert a.model and a.tp and a.max_num_seqs and a.drafter and a.engine and a.kv_format, a.id
            assert a.mem_util and a.ctx and (a.weights_variant or a.weights_bytes), a.id
    profileless = {a.id for a in cat.anchors if a.profile is None}
    assert profileless == {"vllm/gemma-dflash:kvcalc-22of22-historical",
                           "vllm/gemma-dflash:kvcalc-22of22-historical:2",
                           "vllm/gemma-awq:kvcalc-22of22-historical",
                           "vllm/qwen-a3b-preview-mtp:kvcalc-22of22-historical",
                           "vllm/qwen-agentworld-35b-a3b-dual-awq-int4:kvcalc-current-8of8"}
    world = next(a for a in cat.anchors if a.id.startswith("vllm/qwen-agentworld"))
    # model not in the catalog: priced with a same-geometry twin and the recorded checkpoint size
    assert world.model == "qwen3.6-35b-a3b" and world.weights_bytes == 23_520_000_000
    assert world.weights_variant is None and world.note and world.vllm_version == "0.25.1"
    renamed = next(a for a in cat.anchors if a.id == "vllm/gemma-int8-mtp:kvcalc-22of22-historical:2")
    assert renamed.max_num_seqs == 1          # the 262K run's own sequences, not the profile's 4


# ----------------------------------------------------------------------------- duplicates, SM, arches, KV

def test_duplicate_keys_are_a_problem_each(tmp_path):
    """Bug 10: PyYAML keeps the last of a duplicated key; the loader reports every duplicate."""
    root = _copy(tmp_path)
    text = (root / "profiles.yaml").read_text()
    lines = text.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line.startswith("  ") and not line.startswith("   ")]
    first, second, third = starts[:3]
    block_a, block_b = "".join(lines[first:second]), "".join(lines[second:third])
    (root / "profiles.yaml").write_text(text + block_a + block_b)
    with pytest.raises(CatalogError) as exc:
        load_catalog(root)
    # one problem per repeated key, at the line of the repeat (the appended copies of blocks a and b)
    repeats = {f"line {len(lines) + 1}", f"line {len(lines) + 1 + (second - first)}"}
    assert [(p.file, p.path in repeats) for p in exc.value.problems] == [("profiles.yaml", True)] * 2
    assert {p.path for p in exc.value.problems} == repeats


def test_duplicate_nested_key_is_a_problem(tmp_path):
    root = _copy(tmp_path)
    _edit(root, "gpus.yaml", lambda d: d)       # round-trip keeps the data valid
    text = (root / "gpus.yaml").read_text().replace("    nvlink:", "    nvlink: false\n    nvlink:", 1)
    (root / "gpus.yaml").write_text(text)
    with pytest.raises(CatalogError) as exc:
        load_catalog(root)
    assert [p.file for p in exc.value.problems] == ["gpus.yaml"]


@pytest.mark.parametrize("value", ["8.65", 8.65, "x", "0.5"])
def test_sm_with_two_decimals_is_rejected_not_rounded(tmp_path, value):
    root = _copy(tmp_path)
    _edit(root, "gpus.yaml", lambda d: d["gpus"]["rtx-3090"].update(sm=value))
    assert ("gpus.yaml", "gpus['rtx-3090'].sm") in _problems(root)


def test_sm_forms_share_one_parser():
    from club3090.rig.gpus import parse_sm

    assert [parse_sm(v) for v in ("8.6", "sm_86", "sm86", "86", 9, 8.6, "12.0")] == \
        [Decimal("8.6")] * 4 + [Decimal("9.0"), Decimal("8.6"), Decimal("12.0")]


def test_every_model_architecture_is_its_config_architecture(cat):
    for mid, m in cat.models.items():
        assert m.hf_config["architectures"][0] == m.architecture, mid


def test_models_resolve_to_arch_rows_or_fail_closed(cat):
    """Bug 11: every curated model resolves to an arch row (model_slugs, name or alias), except the
    two no upstream row covers; those have no replayable profile and the gate says no-arch-row."""
    from club3090.gate.engine_support import find_arch_row

    missing = {mid for mid in cat.models if cat.arch_row_for_model(mid) is None}
    # the models upstream serves with llama.cpp only: no vLLM profile to replay
    assert missing <= {mid for mid in cat.models
                       if all(cat.engines[p.engine].type != "vllm" for p in cat.profiles.values()
                              if p.model == mid)}
    assert "qwen3.6-40b-deckard" in missing
    for key, p in cat.profiles.items():
        if p.model in missing:
            assert not cat.emittable(key)[0], key
    # an architecture a synced model brings without an upstream row gets one that fails closed
    row = cat.arch_row_for_model("diffusiongemma-26b-a4b")
    assert row is not None and row.trust_remote_code == "unverified" and row.status == "unverified"
    assert find_arch_row(cat, curated_model="qwen3.6-40b-deckard",
                         architecture=cat.models["qwen3.6-40b-deckard"].architecture) is None


def test_replayable_profile_without_arch_row_is_a_problem(tmp_path):
    root = _copy(tmp_path)

    def drop_slug(d):
        for row in d["arches"].values():
            row["model_slugs"] = [s for s in row["model_slugs"] if s != "qwen3.6-35b-a3b"]
        d["arches"].pop("Qwen3_5MoeForConditionalGeneration")
        for row in d["arches"].values():
            row["required_patches"] = row.get("required_patches") or []

    _edit(root, "arches.yaml", drop_slug)
    assert ("models.yaml", "models['qwen3.6-35b-a3b'].hf_config.architectures") in _problems(root)


def test_kv_formats_priced_by_the_one_table(cat):
    """kvformats.py is the only table of KV sizes: every catalog format is priced there; K 8-bit +
    V 4-bit formats average 0.75 B/element."""
    from fractions import Fraction

    from club3090.fit.kv_formats import kv_format

    for kid in cat.kv_formats:
        assert kv_format(kid) is not None, kid
    for kid in ("k8v4", "turboquant_k8v4"):
        k, v = kv_format(kid).element_bytes(2)
        assert (k + v) / 2 == Fraction(3, 4)


def test_turboquant_formats_are_never_emitted(cat):
    """docs/DESIGN.md §5: a turboquant* KV format makes a profile Genesis-equipped."""
    assert {k for k, kv in cat.kv_formats.items() if not kv.emittable} == \
        {k for k in cat.kv_formats if k.startswith("turboquant")}
    for key, p in cat.profiles.items():
        if p.kv_format.startswith("turboquant"):
            assert cat.emittable(key) == (False, "genesis-equipped")


def test_kv_sm_window_is_catalog_data(cat):
    assert cat.kv_sm_window("nvfp4") == (Decimal("10.0"), Decimal("10.3"))
    assert cat.kv_sm_window("bf16") == (Decimal("8.0"), None)
    assert cat.kv_sm_window("no-such-format") == (None, None)


def test_anchor_set_is_recorded(cat):
    assert {a.set for a in cat.anchors} >= {"kvcalc-22of22-historical", "kvcalc-current-8of8"}


def test_builtin_architectures_are_not_limited_to_the_upstream_rigs_tp():
    # rows with no curated model describe vLLM's built-in classes: TP is gated by head geometry,
    # not by the 1-2 GPU rigs upstream measured
    cat = load_catalog()
    for arch, row in cat.arches.items():
        if not row.model_slugs:
            assert {1, 2, 4, 8, 16} <= set(row.tp_divisors), arch
