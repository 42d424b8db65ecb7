"""tools/sync_upstream.py against the upstream extracts in tests/fixtures/upstream and the frozen seed-era
catalog in tests/fixtures/catalog_seed: the newest snapshot maps onto the shipped catalog with no change;
applied to the seed-era catalog it proposes exactly the documented differences and produces the shipped
catalog; the seed-era snapshot against the shipped catalog reports them the other way round. The proposed
change loads, is idempotent, keeps corrections and writes nothing unless asked."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest
import yaml

from club3090.catalog import load_catalog

ROOT = Path(__file__).resolve().parents[1]
UPSTREAM = ROOT / "tests" / "fixtures" / "upstream"
SEED, HEAD = UPSTREAM / "seed", UPSTREAM / "head"
SEED_CATALOG = ROOT / "tests" / "fixtures" / "catalog_seed"
SHIPPED = Path(str(resources.files("club3090.catalog").joinpath("data")))
HEAD_COMMIT = json.loads((HEAD / "patch_files.json").read_text(encoding="utf-8"))["_commit"]
# files the tool writes; kv_formats.yaml and anchors.yaml are curated by hand only
SYNCED = ("engines.yaml", "drafters.yaml", "models.yaml", "patches.yaml", "profiles.yaml", "gpus.yaml",
          "arches.yaml", "upstream_files.yaml", "upstream.yaml")


def _tool():
    spec = importlib.util.spec_from_file_location("sync_upstream", ROOT / "tools" / "sync_upstream.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("sync_upstream", module)
    spec.loader.exec_module(module)
    return module


sync = _tool()


def _registry(folder: Path) -> dict:
    for name in ("registry_expanded.json", "registry.json"):
        if (folder / name).is_file():
            return json.loads((folder / name).read_text(encoding="utf-8"))
    raise AssertionError(folder)


@pytest.fixture()
def catalog_copy(tmp_path: Path) -> Path:
    dest = tmp_path / "data"
    shutil.copytree(SHIPPED, dest)
    return dest


@pytest.fixture()
def seed_copy(tmp_path: Path) -> Path:
    """The seed-era catalog plus today's hand curation the tool never writes: the KV formats and each
    file's corrections."""
    dest = tmp_path / "seed"
    shutil.copytree(SEED_CATALOG, dest)
    shutil.copy(SHIPPED / "kv_formats.yaml", dest / "kv_formats.yaml")
    for name in SYNCED:
        doc = yaml.safe_load((dest / name).read_text(encoding="utf-8"))
        shipped = yaml.safe_load((SHIPPED / name).read_text(encoding="utf-8"))
        if doc.get("corrections") != shipped.get("corrections"):
            doc["corrections"] = shipped.get("corrections")
            (dest / name).write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return dest


def _snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (the open-model index lives in a subfolder), by relative path."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _changes(report, section, key):
    return {rid: (ours, theirs) for s, rid, k, ours, theirs in report.changed if (s, k) == (section, key)}


def test_newest_snapshot_on_the_synced_catalog_reports_no_change(capsys):
    result = sync.run(HEAD, sync.DEFAULT_CATALOG)
    report = result.report
    assert report.empty and report.changed == [] and report.pending == [] and result.diff == ""
    assert report.commit == HEAD_COMMIT
    assert not any(report.added.values())
    # the seed profiles upstream archived stay, marked archived, as "only in the catalog"
    assert report.removed["profiles"] == sorted(set(_registry(SEED)) - set(_registry(HEAD)))
    assert report.removed["models"] == []
    assert sync.main(["--from", str(HEAD)]) == sync.EXIT_SAME
    assert f"upstream commit: {HEAD_COMMIT}" in capsys.readouterr().out


def test_synced_catalog_holds_every_newest_entry_and_every_seed_profile():
    cat = load_catalog()
    head, seed = _registry(HEAD), _registry(SEED)
    assert set(head) <= set(cat.profiles) and set(seed) <= set(cat.profiles)
    assert {k for k, p in cat.profiles.items() if p.archived} == set(seed) - set(head)
    for key in set(head):
        assert not cat.profiles[key].archived
    assert cat.upstream_commit == HEAD_COMMIT
    assert cat.engines["vllm-stable"].vllm_version == "0.27.1"
    assert {p.stem for p in (HEAD / "profiles" / "models").glob("*.yml")} <= set(cat.models)
    files = json.loads((HEAD / "patch_files.json").read_text(encoding="utf-8"))
    for path, rec in files.items():
        if path != "_commit":
            mine = cat.upstream_files[path]
            assert (mine.size, mine.sha256, mine.commit) == (rec["size"], rec["sha256"], HEAD_COMMIT)


def test_seed_era_catalog_synced_to_the_newest_snapshot_is_the_shipped_catalog(seed_copy: Path):
    first = sync.run(HEAD, seed_copy)
    report = first.report
    head, seed = _registry(HEAD), _registry(SEED)
    added = {s: len(ids) for s, ids in report.added.items() if ids}
    # the documented counts (tests/fixtures/upstream/SOURCE.md), and the same sets read from the data
    assert added == {"engines": 3, "drafters": 8, "models": 11, "patches": 5, "profiles": 55, "arches": 2}
    assert report.added["profiles"] == sorted(set(head) - set(seed))
    assert report.added["engines"] == ["llamacpp-club3090", "llamacpp-club3090-v1.1", "vllm-lmcache"]
    archived = {rid for s, rid, k, _o, t in report.changed if (s, k, t) == ("profiles", "archived", True)}
    assert archived == set(seed) - set(head) and len(archived) == 22
    pins = _changes(report, "engines", "image")
    assert set(pins) == {"vllm-stable", "llama-cpp-local", "beellama-local", "vllm-diffusion-gemma"}
    assert pins["vllm-stable"] == ("vllm/vllm-openai:v0.22.0", "vllm/vllm-openai:v0.27.1")
    statuses = _changes(report, "profiles", "status")
    assert len(statuses) == 34 and sum(t == "deprecated" for _o, t in statuses.values()) == 29
    assert {k for k, (_o, t) in statuses.items() if t == "caveats"} == {
        "vllm/dual", "vllm/qwen-27b-dual-fast", "vllm/qwen-27b-dual-max", "vllm/qwen-27b-multi-fast",
        "vllm/qwen-27b-multi-max"}
    kv = _changes(report, "profiles", "kv_format")
    assert {k: t for k, (_o, t) in kv.items()} == dict.fromkeys(
        ("vllm/minimal", "vllm/dual", "vllm/qwen-27b-dual-fast", "vllm/qwen-27b-multi-fast",
         "vllm/qwen-a3b-preview-single", "vllm/qwen-35b-a3b-dual", "vllm/qwen-27b-dual-max",
         "vllm/qwen-27b-multi-max"), "fp8_e4m3")
    assert _changes(report, "profiles", "drafter") == {
        "vllm/gemma-12b-dual-bf16-mtp": ("gemma-12b-it-assistant", None),
        "vllm/gemma-26ba4b-dual": ("gemma-26b-it-assistant", None)}
    assert _changes(report, "profiles", "engine") == {"vllm/gemma-12b-dual-bf16-mtp": ("vllm-gemma4-unified", "vllm-stable")}
    assert _changes(report, "patches", "deprecated_on") == {
        "qwen-vllm-marlin-pad": (None, "2026-07-02"),
        "qwen-vllm-pr41800-truncate-prompt-tokens": (None, "2026-08-16")}
    assert _changes(report, "upstream", "commit") == {"club-3090": ("7248ccb6", HEAD_COMMIT)}
    # no compose_path, TP, context or port of a shared entry moved
    for key in ("compose_path", "tp", "max_model_len", "port"):
        assert _changes(report, "profiles", key) == {}
    assert report.pending == []
    for name, text in first.after.items():
        (seed_copy / name).write_text(text, encoding="utf-8")
    for name in SYNCED:
        assert yaml.safe_load((seed_copy / name).read_text(encoding="utf-8")) == \
            yaml.safe_load((SHIPPED / name).read_text(encoding="utf-8")), name
    second = sync.run(HEAD, seed_copy)
    assert second.diff == "" and second.report.empty


def test_seed_snapshot_on_the_synced_catalog_reports_the_documented_differences():
    report = sync.run(SEED, sync.DEFAULT_CATALOG).report
    head, seed = _registry(HEAD), _registry(SEED)
    assert not any(report.added.values())
    assert report.removed["profiles"] == sorted(set(head) - set(seed)) and len(report.removed["profiles"]) == 55
    assert len(report.removed["models"]) == 11 and len(report.removed["engines"]) == 3
    statuses = _changes(report, "profiles", "status")
    assert len(statuses) == 34 and sum(o == "deprecated" for o, _t in statuses.values()) == 29
    pins = _changes(report, "engines", "image")
    assert pins["vllm-stable"] == ("vllm/vllm-openai:v0.27.1", "vllm/vllm-openai:v0.22.0") and len(pins) == 4
    assert len(_changes(report, "profiles", "kv_format")) == 8
    # the seed snapshot records no commit: the catalog keeps its own
    assert report.commit is None and _changes(report, "upstream", "commit") == {}


def test_withdrawn_profiles_name_their_replacement():
    cat = load_catalog()
    for key, p in cat.profiles.items():
        withdrawn = p.archived or p.status == "deprecated" or cat.engines[p.engine].withdrawn
        if p.replaced_by is not None:
            assert withdrawn, key
            succ = cat.profiles[p.replaced_by]
            assert succ.model == p.model and not succ.archived and succ.status != "deprecated"
            assert not cat.engines[succ.engine].withdrawn
    on_withdrawn = [k for k, p in cat.profiles.items() if cat.engines[p.engine].withdrawn]
    assert on_withdrawn and all(cat.profiles[k].replaced_by for k in on_withdrawn
                                if cat.engines[cat.profiles[k].engine].type == "vllm")


def test_renamed_slugs_resolve():
    cat = load_catalog()
    for old, new in sync.RENAMED.items():
        assert old not in cat.profiles and cat.profile_key(old) == new
        assert old in cat.profiles[new].aliases
    assert cat.profile_key("vllm/no-such-profile") is None


def test_captured_services_replay_the_shipped_composes():
    """Every runtime capture is the one service of the shipped compose it names, byte for byte as data."""
    cat = load_catalog()
    head = _registry(HEAD)
    checked = 0
    for key, p in cat.profiles.items():
        if p.runtime is None or key not in head:
            continue
        doc = yaml.safe_load((HEAD / "composes" / p.compose_path).read_text(encoding="utf-8"))
        (name, service), = doc["services"].items()
        assert p.runtime.service_name == name and dict(p.runtime.service) == service, key
        assert dict(p.runtime.top_level) == {k: v for k, v in doc.items() if k not in ("services", "version")}
        checked += 1
    # every entry, vLLM and llama.cpp family alike
    assert checked == len(head) and any(cat.engines[cat.profiles[k].engine].type == "llama.cpp" for k in head)


def test_corrections_are_kept_and_reported(seed_copy: Path):
    path = seed_copy / "profiles.yaml"
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    doc["corrections"] = [{"paths": ["profiles['vllm/minimal'].kv_format"], "upstream": "fp8_e4m3",
                           "evidence": "measured here"}]
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    result = sync.run(HEAD, seed_copy)
    assert ("profiles", "vllm/minimal", "kv_format", "fp8_e5m2", "fp8_e4m3") in result.report.protected
    assert not any(r[:3] == ("profiles", "vllm/minimal", "kv_format") for r in result.report.changed)
    after = yaml.safe_load(result.after["profiles.yaml"])
    assert after["profiles"]["vllm/minimal"]["kv_format"] == "fp8_e5m2"
    assert after["profiles"]["vllm/dual"]["kv_format"] == "fp8_e4m3"


def test_cli_reports_writes_only_the_diff_and_never_the_catalog(catalog_copy: Path, tmp_path: Path, capsys):
    hand_edit = catalog_copy / "profiles.yaml"
    text = hand_edit.read_text(encoding="utf-8")
    hand_edit.write_text(text.replace("port: 8020", "port: 8021", 1), encoding="utf-8")
    before = _snapshot(catalog_copy)
    diff_file = tmp_path / "sync.diff"
    assert sync.main(["--from", str(HEAD), "--catalog", str(catalog_copy), "--diff", str(diff_file),
                      "--json"]) == sync.EXIT_CHANGED
    report = json.loads(capsys.readouterr().out)
    assert report["changed"] is True and report["upstream_commit"] == HEAD_COMMIT
    assert [c["field"] for c in report["changes"]] == ["port"]          # the hand edit is shown
    assert "-    port: 8021\n+    port: 8020\n" in diff_file.read_text(encoding="utf-8")
    assert _snapshot(catalog_copy) == before                           # and not overwritten
    assert sync.main(["--from", str(HEAD), "--catalog", str(catalog_copy), "--write"]) == sync.EXIT_CHANGED
    capsys.readouterr()
    assert sync.main(["--from", str(HEAD), "--catalog", str(catalog_copy)]) == sync.EXIT_SAME
    assert "pin changes: 0" in capsys.readouterr().out


def test_runs_from_a_plain_clone_without_an_install(tmp_path: Path):
    clone = tmp_path / "clone"
    shutil.copytree(ROOT / "tools", clone / "tools", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "src", clone / "src", ignore=shutil.ignore_patterns("__pycache__"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, str(clone / "tools" / "sync_upstream.py"), "--from", str(HEAD)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert f"upstream commit: {HEAD_COMMIT}" in done.stdout


def test_unknown_upstream_key_is_refused_naming_file_and_key(tmp_path: Path, capsys):
    src = tmp_path / "upstream"
    shutil.copytree(SEED, src)
    engine = src / "profiles" / "engines" / "vllm-stable.yml"
    doc = yaml.safe_load(engine.read_text(encoding="utf-8"))
    doc["install_v2"] = {"method": "oci"}
    engine.write_text(yaml.safe_dump(doc), encoding="utf-8")
    assert sync.main(["--from", str(src)]) == sync.EXIT_REFUSED
    err = capsys.readouterr().err
    assert "sync refused: profiles/engines/vllm-stable.yml: install_v2: unknown upstream key" in err

    registry = json.loads((src / "registry.json").read_text(encoding="utf-8"))
    registry["vllm/minimal"]["kv_formatt"] = "bf16"
    (src / "registry.json").write_text(json.dumps(registry), encoding="utf-8")
    engine.write_text(yaml.safe_dump({k: v for k, v in doc.items() if k != "install_v2"}), encoding="utf-8")
    with pytest.raises(sync.Refused, match=r"registry.json: entries\['vllm/minimal'\].kv_formatt: unknown"):
        sync.run(src, sync.DEFAULT_CATALOG)


def test_unknown_registry_section_is_refused(tmp_path: Path):
    src = tmp_path / "upstream"
    shutil.copytree(HEAD, src)
    doc = json.loads((src / "registry.json").read_text(encoding="utf-8"))
    doc["profile_groups"] = {}
    (src / "registry.json").write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(sync.Refused, match=r"registry.json: profile_groups: unknown upstream key"):
        sync.run(src, sync.DEFAULT_CATALOG)


def test_not_an_upstream_folder_is_refused(tmp_path: Path, capsys):
    assert sync.main(["--from", str(tmp_path)]) == sync.EXIT_REFUSED
    assert "not a club-3090 checkout or snapshot" in capsys.readouterr().err
    assert sync.main([]) == sync.EXIT_USAGE


def _llama_compose(src: Path) -> Path:
    entry = json.loads((src / "registry_expanded.json").read_text(encoding="utf-8"))["llamacpp/default"]
    return src / "composes" / entry["compose_path"]


@pytest.mark.parametrize("secret", [
    ("environment", ["HUGGING_FACE_HUB_TOKEN=abc123notareference"]),
    ("environment", {"LLAMA_API_KEY": "${KEY:-literal-default}"}),
    ("command", "--host 0.0.0.0 --api-key sk-literal -m /models/x.gguf"),
    ("command", ["-m", "/models/x.gguf", "--api-key=sk-literal"]),
    ("labels", ["token=hf_" + "A1" * 20]),
])
def test_a_compose_holding_a_literal_credential_is_refused_and_never_shown(tmp_path: Path, capsys, secret):
    src = tmp_path / "upstream"
    shutil.copytree(HEAD, src)
    path = _llama_compose(src)
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    (service,) = doc["services"].values()
    service[secret[0]] = secret[1]
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    assert sync.main(["--from", str(src)]) == sync.EXIT_REFUSED
    err = capsys.readouterr().err
    assert "literal credential" in err and "llamacpp/default" in err
    assert "abc123" not in err and "sk-literal" not in err and "A1A1" not in err


def test_a_reference_to_a_credential_is_captured_and_the_compose_is_read_as_data(tmp_path: Path):
    src = tmp_path / "upstream"
    shutil.copytree(HEAD, src)
    path = _llama_compose(src)
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    (service,) = doc["services"].values()
    service["environment"] = ["HUGGING_FACE_HUB_TOKEN=${HF_TOKEN:-}", "NUM_SPEC_TOKENS=3"]
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    sync.run(src, sync.DEFAULT_CATALOG)                            # a reference is no secret
    marker = tmp_path / "ran"
    path.write_text(f"services:\n  x: !!python/object/apply:os.system ['touch {marker}']\n", encoding="utf-8")
    with pytest.raises(sync.Refused, match="not valid YAML"):
        sync.run(src, sync.DEFAULT_CATALOG)
    assert not marker.exists()


# --- hardening round 3: SEC-4 (compose paths stay in the tree), BUG-7 (YAML alias bombs) ------
@pytest.mark.parametrize("escape", ["../../outside.yml", "/ABS/outside.yml", "composes/../../../outside.yml"])
def test_a_compose_path_outside_the_upstream_tree_is_refused(tmp_path: Path, escape: str):
    src = tmp_path / "up" / "stream"
    shutil.copytree(HEAD, src)
    outside = tmp_path / "outside.yml"
    outside.write_text((_llama_compose(HEAD)).read_text(encoding="utf-8"), encoding="utf-8")
    registry = json.loads((src / "registry_expanded.json").read_text(encoding="utf-8"))
    registry["llamacpp/default"]["compose_path"] = escape.replace("/ABS", str(tmp_path))
    (src / "registry_expanded.json").write_text(json.dumps(registry), encoding="utf-8")
    with pytest.raises(sync.Refused, match=r"compose_path.*outside the upstream tree"):
        sync.run(src, sync.DEFAULT_CATALOG)


def test_a_compose_linked_outside_the_tree_is_not_read(tmp_path: Path):
    src = tmp_path / "upstream"
    shutil.copytree(HEAD, src)
    path = _llama_compose(src)
    secret = tmp_path / "secret.yml"
    secret.write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    path.unlink()
    path.symlink_to(secret)
    compose_path = _registry(src)["llamacpp/default"]["compose_path"]
    assert sync.uc._compose_text(src, compose_path, "registry") is None
    assert sync.uc._compose_text(HEAD, compose_path, "registry") is not None


def test_a_billion_laughs_document_is_refused_quickly(tmp_path: Path):
    import time

    src = tmp_path / "upstream"
    shutil.copytree(HEAD, src)
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 10)]
    engine = src / "profiles" / "engines" / "vllm-stable.yml"
    engine.write_text("\n".join(lines) + "\n", encoding="utf-8")
    started = time.monotonic()
    with pytest.raises(sync.Refused, match="alias"):
        sync.run(src, sync.DEFAULT_CATALOG)
    assert time.monotonic() - started < 30
