"""The catalog schema is the one description of the data: docs/CATALOG.md is rendered from it,
every field it accepts is documented and read, and recorded corrections name real records."""

from __future__ import annotations

import dataclasses
import re
import shutil
from importlib import resources
from pathlib import Path

import pytest
import yaml

from club3090.catalog import load_catalog, schema, schema_doc
from club3090.catalog import model as m
from club3090.errors import CatalogError
from tests.fixtures_path import fixture_path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "club3090"

# record class of each spec, and the attributes the loader fills from elsewhere (the record's id,
# nested records, facts read from hf_config)
RECORDS = (
    (schema.GPU_SPEC, {}, m.Gpu, {"id"}),
    (schema.KV_SPEC, {}, m.KvFormat, {"id"}),
    (schema.ENGINE_SPEC, schema.ENGINE_NESTED, m.Engine, {"id", "pin", "vllm_version"}),
    (schema.OVERLAY_SPEC, {}, m.VendoredOverlay, set()),
    (schema.DRAFTER_SPEC, {}, m.Drafter, {"id"}),
    (schema.MODEL_SPEC, schema.MODEL_NESTED, m.Model, {"id", "architecture", "max_ctx_supported"}),
    (schema.VARIANT_SPEC, {}, m.WeightVariant, {"id"}),
    (schema.ARCH_SPEC, schema.ARCH_NESTED, m.ArchRow, {"arch"}),
    (schema.PIN_SPEC, {}, m.EnginePin, set()),
    (schema.PATCH_SPEC, schema.PATCH_NESTED, m.Patch, {"id"}),
    (schema.GAP_SPEC, {}, m.DeliveryGap, set()),
    (schema.PROFILE_SPEC, schema.PROFILE_NESTED, m.Profile, {"key"}),
    (schema.RUNTIME_SPEC, {}, m.ProfileRuntime, set()),
    (schema.ANCHOR_SPEC, {}, m.Anchor, set()),
    (schema.UPSTREAM_FILE_SPEC, {}, m.UpstreamFile, {"id"}),
    (schema.CORRECTION_SPEC, {}, m.Correction, {"file"}),
)


def test_catalog_md_is_current():
    expected = schema_doc.render()
    current = (ROOT / "docs" / "CATALOG.md").read_text(encoding="utf-8")
    assert current == expected, f"docs/CATALOG.md is stale: regenerate with `{schema_doc.COMMAND}`"


def test_catalog_md_names_every_file_and_field():
    text = schema_doc.render()
    assert schema_doc.COMMAND in text.split("\n## ", 1)[0]     # how to regenerate, at the top
    for fs in schema.FILE_SCHEMAS:
        assert f"\n## {fs.name}\n" in text
        for key in (*fs.spec, *fs.nested):
            assert f"| `{key}` |" in text, (fs.name, key)
    for c in load_catalog().corrections:
        assert c.evidence in text


def test_every_field_has_one_description():
    for spec, nested, cls, _derived in RECORDS:
        for key, f in spec.items():
            assert f.doc.strip() and f.doc.rstrip().endswith((".", ")")), (cls.__name__, key)
        for key, n in nested.items():
            assert n.doc.strip(), (cls.__name__, key)


def test_records_hold_exactly_the_schema_fields():
    """No record attribute that the YAML cannot set (or the loader does not derive), and no YAML
    key without an attribute."""
    for spec, nested, cls, derived in RECORDS:
        attrs = {f.name for f in dataclasses.fields(cls)}
        assert attrs == set(spec) | set(nested) | derived, cls.__name__


def _code_outside_schema() -> str:
    skip = {SRC / "catalog" / "schema.py", SRC / "catalog" / "schema_doc.py"}
    return "\n".join(p.read_text(encoding="utf-8") for p in sorted(SRC.rglob("*.py")) if p not in skip)


def test_every_decision_field_is_read_by_code():
    """A field no code reads is dead data: remove it, or mark it evidence. Matches attribute reads
    (``p.tp``) and record-dict reads (``rec["n_max"]``) anywhere in the package but the schema."""
    code = _code_outside_schema()
    unread = []
    for spec, nested, cls, _derived in RECORDS:
        for key, f in (*spec.items(), *((k, None) for k in nested)):
            if f is not None and f.documentary:
                continue
            if not re.search(rf"\.{key}\b|\[[\"']{key}[\"']\]", code):
                unread.append(f"{cls.__name__}.{key}")
    assert unread == []


def test_dead_and_duplicate_fields_stay_gone():
    text = "\n".join(p.read_text(encoding="utf-8")
                     for p in Path(str(resources.files("club3090.catalog").joinpath("data"))).glob("*.yaml"))
    for key in ("param_slots", "trust_remote_code_in_shipped", "facts", "compatible_drafters",
                "valid_tp", "max_ctx_supported", "max_ctx", "kvcalc_key", "bandwidth_gbps", "pin"):
        assert not re.search(rf"^\s*{key}:", text, re.M), key
    assert not re.search(r"^    architecture:", text, re.M)     # read from hf_config


# ----------------------------------------------------------------------------- corrections

def _copy(tmp_path: Path) -> Path:
    dest = tmp_path / "data"
    shutil.copytree(Path(str(resources.files("club3090.catalog").joinpath("data"))), dest)
    return dest


def _edit(root: Path, name: str, fn) -> None:
    doc = yaml.load((root / name).read_text(encoding="utf-8"), Loader=yaml.CSafeLoader)
    fn(doc)
    (root / name).write_text(yaml.dump(doc, Dumper=yaml.CSafeDumper, sort_keys=False), encoding="utf-8")


def test_shipped_corrections_name_real_records():
    cat = load_catalog()
    files = {c.file for c in cat.corrections}
    assert {"kv_formats.yaml", "models.yaml", "arches.yaml", "patches.yaml", "anchors.yaml"} <= files
    kv = next(c for c in cat.corrections if c.file == "kv_formats.yaml")
    assert kv.paths == ("kv_formats['int8_per_token_head'].vllm_arg",) and kv.upstream == "auto+PTH"
    assert cat.kv_formats["int8_per_token_head"].vllm_arg == "int8_per_token_head"


def test_correction_naming_a_missing_record_or_field_is_a_problem(tmp_path):
    root = _copy(tmp_path)

    def stale(doc):
        doc["corrections"] = [
            {"paths": ["kv_formats['int8_per_token_heads'].vllm_arg"], "upstream": "x", "evidence": "e"},
            {"paths": ["kv_formats['fp8'].vllm_args"], "upstream": "x", "evidence": "e"},
            {"paths": ["profiles['vllm/minimal'].tp"], "upstream": "x", "evidence": "e"},
            {"paths": ["kv_formats['fp8']"], "upstream": "x"},
        ]

    _edit(root, "kv_formats.yaml", stale)
    with pytest.raises(CatalogError) as info:
        load_catalog(root)
    text = "\n".join(map(str, info.value.problems))
    assert ("kv_formats.yaml: corrections[0].paths[0]: names no record of kv_formats.yaml: "
            "'int8_per_token_heads'; did you mean 'int8_per_token_head'?") in text
    assert "corrections[1].paths[0]: names no field of a kv_formats record: '.vllm_args'; " \
           "did you mean 'vllm_arg'?" in text
    assert "corrections[2].paths[0]: expected kv_formats['<id>']" in text
    assert "kv_formats.yaml: corrections[3].evidence: missing required key" in text


def test_unknown_envelope_key_gets_a_hint(tmp_path):
    root = _copy(tmp_path)
    _edit(root, "gpus.yaml", lambda d: d.update(corection=[]))
    with pytest.raises(CatalogError) as info:
        load_catalog(root)
    assert "gpus.yaml: corection: unknown key; did you mean 'corrections'?" in map(str, info.value.problems)


def test_model_geometry_is_read_from_its_config(tmp_path):
    root = _copy(tmp_path)

    def edit(doc):
        cfg = doc["models"]["qwen3.6-40b-deckard"]["hf_config"]
        cfg["max_position_embeddings"] = 4096
        doc["models"]["gemma-4-12b"]["hf_config"]["text_config"].pop("max_position_embeddings")
        doc["models"]["gemma-4-31b"]["hf_config"]["architectures"] = []

    _edit(root, "models.yaml", edit)
    with pytest.raises(CatalogError) as info:
        load_catalog(root)
    problems = {(p.file, p.path) for p in info.value.problems}
    assert ("models.yaml", "models['gemma-4-12b'].hf_config.max_position_embeddings") in problems
    assert ("models.yaml", "models['gemma-4-31b'].hf_config.architectures") in problems
    assert not any("deckard" in p for _f, p in problems)


def test_engine_pin_and_release_are_read_from_the_image():
    cat = load_catalog()
    stable = cat.engines["vllm-stable"]
    tag = stable.image.rsplit(":", 1)[1]
    assert (stable.pin, stable.vllm_version) == (f"vllm-stable@{tag}", tag[1:])
    assert cat.engines["vllm-nightly-clean"].pin == \
        "vllm-nightly-clean@bf610c2f56764e1b30bc6065f4ceace3d6e59036"
    assert cat.engines["vllm-nightly-clean"].vllm_version is None
    assert (cat.engines["vllm-pip-baseline"].pin, cat.engines["vllm-pip-baseline"].vllm_version) == \
        ("vllm-pip-baseline@0.20.2", "0.20.2")
    seed = load_catalog(fixture_path("catalog_seed"))
    assert seed.engines["vllm-diffusion-gemma"].pin.startswith("vllm-diffusion-gemma@sha256:")
    assert seed.engines["vllm-stable"].pin == "vllm-stable@v0.22.0"
    assert cat.engines["llama-cpp-local"].vllm_version is None
    assert schema.engine_pin_tag("docker_image", "registry:5000/vllm") == "latest"
    assert schema.engine_release("vllm", "docker_image", "vllm/vllm-openai:v0.27.1") == "0.27.1"
    assert schema.engine_release("vllm", "pip", "vllm>=0.21.0rc0,<0.21.0") is None


def test_retired_keys_say_where_the_fact_lives_now(tmp_path):
    root = _copy(tmp_path)

    def old_profile(doc):
        doc["profiles"]["vllm/minimal"]["max_ctx"] = doc["profiles"]["vllm/minimal"].pop("max_model_len")

    _edit(root, "profiles.yaml", old_profile)
    _edit(root, "engines.yaml", lambda d: d["engines"]["vllm-stable"].update(pin="vllm-stable@v0.22.0"))
    with pytest.raises(CatalogError) as info:
        load_catalog(root)
    problems = list(map(str, info.value.problems))
    assert "profiles.yaml: profiles['vllm/minimal'].max_ctx: unknown key; no longer a catalog field: " \
           "renamed to 'max_model_len'" in problems
    assert "profiles.yaml: profiles['vllm/minimal'].max_model_len: missing required key" in problems
    assert "engines.yaml: engines['vllm-stable'].pin: unknown key; no longer a catalog field: read from " \
           "'image' (<engine-id>@<tag>)" in problems


def test_kv_floor_above_the_reference_card_is_refused(tmp_path):
    """The KV-format floor and the profile's reference GPU cannot disagree: the 9.0 turboquant floor
    once made every curated 3090 turboquant profile refuse its own card."""
    root = _copy(tmp_path)
    _edit(root, "kv_formats.yaml", lambda d: d["kv_formats"]["turboquant_3bit_nc"].update(min_sm="9.0"))
    with pytest.raises(CatalogError) as info:
        load_catalog(root)
    text = "\n".join(map(str, info.value.problems))
    assert "profiles['vllm/default'].kv_format" in text and "needs SM 9.0" in text and "rtx-3090" in text
