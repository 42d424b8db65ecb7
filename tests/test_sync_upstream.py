"""tools/sync_upstream.py against the two upstream extracts in tests/fixtures/upstream: the seed era
maps onto the shipped catalog with no change; the newest snapshot reports exactly the documented
differences; the proposed change loads, is idempotent, keeps corrections and writes nothing itself."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from importlib import resources
from pathlib import Path

import pytest
import yaml

from club3090.catalog import load_catalog

ROOT = Path(__file__).resolve().parents[1]
UPSTREAM = ROOT / "tests" / "fixtures" / "upstream"
SEED, HEAD = UPSTREAM / "seed", UPSTREAM / "head"


def _tool():
    spec = importlib.util.spec_from_file_location("sync_upstream", ROOT / "tools" / "sync_upstream.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("sync_upstream", module)
    spec.loader.exec_module(module)
    return module


sync = _tool()


@pytest.fixture()
def catalog_copy(tmp_path: Path) -> Path:
    dest = tmp_path / "data"
    shutil.copytree(Path(str(resources.files("club3090.catalog").joinpath("data"))), dest)
    return dest


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_seed_era_maps_onto_the_shipped_catalog_without_change():
    report = sync.run(SEED, sync.DEFAULT_CATALOG).report
    assert report.empty and report.changed == [] and report.pending == []
    assert not any(report.added.values())
    # the catalog keeps what it curates beyond upstream (more GPU cards), as "kept"
    upstream_cards = {p.stem for p in (SEED / "profiles" / "hardware").glob("*.yml")}
    assert "rtx-3090" in upstream_cards
    assert report.removed == {"engines": [], "drafters": [], "models": [], "patches": [], "profiles": [],
                              "gpus": sorted(set(load_catalog().gpus) - upstream_cards)}


def test_newest_snapshot_reports_the_documented_differences():
    report = sync.run(HEAD, sync.DEFAULT_CATALOG).report
    added = {s: len(ids) for s, ids in report.added.items()}
    # dgx-spark, upstream's one new card, is already in the catalog's GPU table
    assert added == {"engines": 3, "drafters": 8, "models": 11, "patches": 5, "profiles": 55, "gpus": 0}
    assert report.added["engines"] == ["llamacpp-club3090", "llamacpp-club3090-v1.1", "vllm-lmcache"]
    assert "dgx-spark" in load_catalog().gpus and "dgx-spark" not in report.removed["gpus"]
    assert len(report.removed["profiles"]) == 22 and "vllm/dual4" in report.removed["profiles"]

    def changes(section, key):
        return {rid: (ours, theirs) for s, rid, k, ours, theirs in report.changed if (s, k) == (section, key)}

    pins = changes("engines", "pin")
    assert set(pins) == {"vllm-stable", "llama-cpp-local", "beellama-local", "vllm-diffusion-gemma"}
    assert pins["vllm-stable"] == ("vllm-stable@v0.22.0", "vllm-stable@v0.27.1")
    assert pins["llama-cpp-local"][1] == "llama-cpp-local@server-cuda-b10236"
    statuses = changes("profiles", "status")
    assert len(statuses) == 34
    assert sum(theirs == "deprecated" for _o, theirs in statuses.values()) == 29
    assert {k for k, (_o, t) in statuses.items() if t == "caveats"} == {
        "vllm/dual", "vllm/qwen-27b-dual-fast", "vllm/qwen-27b-dual-max", "vllm/qwen-27b-multi-fast",
        "vllm/qwen-27b-multi-max"}
    kv = changes("profiles", "kv_format")
    assert {k: t for k, (_o, t) in kv.items()} == dict.fromkeys(
        ("vllm/minimal", "vllm/dual", "vllm/qwen-27b-dual-fast", "vllm/qwen-27b-multi-fast",
         "vllm/qwen-a3b-preview-single", "vllm/qwen-35b-a3b-dual", "vllm/qwen-27b-dual-max",
         "vllm/qwen-27b-multi-max"), "fp8_e4m3")
    assert changes("profiles", "drafter") == {
        "vllm/gemma-12b-dual-bf16-mtp": ("gemma-12b-it-assistant", None),
        "vllm/gemma-26ba4b-dual": ("gemma-26b-it-assistant", None)}
    assert changes("profiles", "engine") == {"vllm/gemma-12b-dual-bf16-mtp": ("vllm-gemma4-unified", "vllm-stable")}
    assert changes("patches", "deprecated_on") == {
        "qwen-vllm-marlin-pad": (None, "2026-07-02"),
        "qwen-vllm-pr41800-truncate-prompt-tokens": (None, "2026-08-16")}
    # nothing else in the shared profile fields moved (no compose_path, tp, max_model_len or port change)
    assert {k for _s, _r, k, _o, _t in report.changed if _s == "profiles"} == {"status", "kv_format",
                                                                                "drafter", "engine"}


def test_proposed_change_loads_and_a_second_sync_finds_nothing_more(catalog_copy: Path):
    first = sync.run(HEAD, catalog_copy)
    assert first.diff.startswith("--- a/src/club3090/catalog/data/")
    assert "+    image: vllm/vllm-openai:v0.27.1\n" in first.diff
    for name, text in first.after.items():
        (catalog_copy / name).write_text(text, encoding="utf-8")
    applied = load_catalog(catalog_copy)
    assert applied.engines["vllm-stable"].pin == "vllm-stable@v0.27.1"
    assert applied.profiles["vllm/minimal"].kv_format == "fp8_e4m3"
    assert "vllm-lmcache" in applied.engines
    assert applied.profiles["vllm/minimal"].runtime is not None          # captures are ours, kept
    second = sync.run(HEAD, catalog_copy)
    assert second.diff == ""
    assert second.report.pending == first.report.pending                   # what waits for curation
    assert all(why for _s, _r, why in second.report.pending)


def test_corrections_are_kept_and_reported(catalog_copy: Path):
    path = catalog_copy / "profiles.yaml"
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    doc["corrections"] = [{"paths": ["profiles['vllm/minimal'].kv_format"], "upstream": "fp8_e4m3",
                           "evidence": "measured here"}]
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    result = sync.run(HEAD, catalog_copy)
    assert ("profiles", "vllm/minimal", "kv_format", "fp8_e5m2", "fp8_e4m3") in result.report.protected
    assert not any(r[:3] == ("profiles", "vllm/minimal", "kv_format") for r in result.report.changed)
    after = yaml.safe_load(result.after["profiles.yaml"])
    assert after["profiles"]["vllm/minimal"]["kv_format"] == "fp8_e5m2"
    assert after["profiles"]["vllm/dual"]["kv_format"] == "fp8_e4m3"


def test_cli_reports_writes_only_the_diff_and_never_the_catalog(catalog_copy: Path, tmp_path: Path, capsys):
    hand_edit = catalog_copy / "profiles.yaml"
    hand_edit.write_text(hand_edit.read_text(encoding="utf-8").replace("port: 8020", "port: 8021", 1),
                         encoding="utf-8")
    before = _snapshot(catalog_copy)
    assert sync.main(["--from", str(SEED), "--catalog", str(catalog_copy)]) == sync.EXIT_CHANGED
    out = capsys.readouterr().out
    assert "port: 8021 -> 8020" in out                     # the hand edit is shown, not overwritten
    diff_file = tmp_path / "sync.diff"
    assert sync.main(["--from", str(HEAD), "--catalog", str(catalog_copy), "--diff", str(diff_file),
                      "--json"]) == sync.EXIT_CHANGED
    report = json.loads(capsys.readouterr().out)
    assert report["changed"] is True and len(report["added"]["profiles"]) == 55
    assert "vllm/vllm-openai:v0.27.1" in diff_file.read_text(encoding="utf-8")
    assert _snapshot(catalog_copy) == before
    assert sync.main(["--from", str(SEED)]) == sync.EXIT_SAME
    assert "pin changes: 0" in capsys.readouterr().out


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


def test_not_an_upstream_folder_is_refused(tmp_path: Path, capsys):
    assert sync.main(["--from", str(tmp_path)]) == sync.EXIT_REFUSED
    assert "not a club-3090 checkout or snapshot" in capsys.readouterr().err
    assert sync.main([]) == sync.EXIT_USAGE
