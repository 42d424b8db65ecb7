"""The Loop's trust pipeline: raw -> candidate -> validated -> tier1, consensus, promotion, the overlay."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from club3090 import cli
from club3090.cli import exit_codes
from club3090.reports.capture import write_e_bundle, write_gate_bundle
from club3090.reports.loop import CANDIDATE, RAW, TIER1, VALIDATED, ingest, topology_ok
from tests.fixtures_path import fixture_path
from tests.test_capture import IDENTITY, MANIFEST_FIELDS, NOW, planted_gate

GREEN = {"plain-chat": "green", "streaming": "green", "tool-call": "unsmoked"}


def smoke(results):
    return {"smoke_capability_set": list(results), "results": results, "partial": "unsmoked" in results.values(),
            "results_detail": {c: {"status": v, "error": None} for c, v in results.items()}}


def e_bundle(root: Path, *, minutes: int = 0, results=None, model="acme/Widget-7B", **fields) -> Path:
    points = {"download": {"ok": True, "files": 3, "bytes": 10, "sha_verified": True, "failure": None},
              "boot": {"ok": True, "seconds": 50.0, "failure": None},
              "smoke": smoke(results or GREEN)}
    manifest = {**MANIFEST_FIELDS, "model": model, "kv_calc_version": "club3090-memory+abc", "selected_ctx": 8192,
                "smoke_capability_set": ["plain-chat", "streaming"], **fields}
    return write_e_bundle(root, slug="acme/Widget-7B", gate={"raw_verdict": "fits"}, points=points,
                          manifest_fields=manifest, outcome="partial", now=NOW + timedelta(minutes=minutes),
                          **IDENTITY)


def test_topology_sanity():
    assert topology_ok("2x24576MiB") and topology_ok("1x1048576MiB")
    for bad in ("0x24576MiB", "2x0MiB", "2x1048577MiB", "2x24GiB", None, ""):
        assert not topology_ok(bad)


def test_one_green_bundle_is_a_candidate_and_two_make_a_derived_shape_validated(tmp_path):
    e_bundle(tmp_path)
    state = ingest([tmp_path])
    (record,) = state.bundles
    assert record.state == CANDIDATE and record.green == ("plain-chat", "streaming")   # only green graduates
    (group,) = state.groups
    assert group.state == CANDIDATE and "second" in group.note
    e_bundle(tmp_path, minutes=5)
    (group,) = ingest([tmp_path]).groups
    assert group.state == VALIDATED and len(group.members) == 2 and "derived-tier1-deferred" in group.note
    assert group.capabilities == ("plain-chat", "streaming") and group.calibration_row is None


def test_a_curated_model_reaches_tier1_with_a_candidate_calibration_row(tmp_path):
    e_bundle(tmp_path)
    e_bundle(tmp_path, minutes=5)
    (group,) = ingest([tmp_path], curated_models=frozenset({"acme/Widget-7B"})).groups
    assert group.state == TIER1
    row = group.calibration_row
    assert row["status"] == "candidate-tier1" and row["ctx"] == 8192 and row["topology_class"] == "2x24576MiB"
    assert row["capabilities"] == ["plain-chat", "streaming"] and len(row["bundles"]) == 2


def test_red_gate_only_and_tampered_bundles_do_not_graduate(tmp_path):
    red = e_bundle(tmp_path / "a", results={"plain-chat": "green", "streaming": "red"})
    write_gate_bundle(tmp_path / "b", slug="acme/x", gate=planted_gate(), manifest_fields=MANIFEST_FIELDS, now=NOW,
                      **IDENTITY)
    tampered = e_bundle(tmp_path / "c")
    manifest = json.loads((tampered / "manifest.json").read_text())
    manifest["outcome"] = "ok"                       # the claim no longer matches what is on disk
    (tampered / "manifest.json").write_text(json.dumps(manifest))
    state = ingest([tmp_path])
    by_path = {Path(b.path).parents[1].name: b for b in state.bundles}
    assert by_path["a"].state == RAW and "streaming" in by_path["a"].reason
    assert by_path["b"].state == RAW and "gate-only" in by_path["b"].reason
    assert by_path["c"].state == "rejected"
    assert state.groups == () and any("fingerprint" in reason for _, reason in state.rejected)
    assert str(red) in {b.path for b in state.bundles}


def test_a_promoted_key_validates_a_single_bundle(tmp_path):
    e_bundle(tmp_path)
    key = ingest([tmp_path]).bundles[0].consensus_key
    (group,) = ingest([tmp_path], promoted_keys=frozenset({key})).groups
    assert group.state == VALIDATED and group.note.startswith("maintainer promotion")


def receipt_log(tmp_path: Path, name: str, extra: str = "") -> Path:
    text = fixture_path("logs", "startup_v064_profiling.log").read_text() + extra
    path = tmp_path / name
    path.write_text(text)
    return path


def run(argv, capsys):
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_two_equal_receipts_validate_a_shape_and_promotion_writes_the_overlay(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("CLUB3090_STATE_DIR", str(tmp_path / "state"))
    logs = tmp_path / "logs"
    logs.mkdir()
    receipt_log(logs, "a.log")
    assert run(["calibrate", str(logs / "a.log"), "--save"], capsys)[0] == 0
    code, out, _ = run(["loop", "ingest", str(tmp_path / "empty-not-there")], capsys)
    assert code == exit_codes.USAGE
    (tmp_path / "caps").mkdir()
    code, out, _ = run(["loop", "ingest", str(tmp_path / "caps"), "--json"], capsys)
    (group,) = json.loads(out)["groups"]
    assert code == 0 and group["kind"] == "receipts" and group["state"] == CANDIDATE
    # a second log of the same start-up shape with the same numbers (another boot): validated
    receipt_log(logs, "b.log", extra="INFO 12-20 20:25:50 [x.py:1] second boot\n")
    assert run(["calibrate", str(logs / "b.log"), "--save"], capsys)[0] == 0
    code, out, _ = run(["loop", "ingest", str(tmp_path / "caps"), "--json"], capsys)
    (group,) = json.loads(out)["groups"]
    assert group["state"] == VALIDATED and len(group["members"]) == 2
    code, out, _ = run(["loop", "list"], capsys)
    assert code == 0 and group["id"] in out and "validated" in out
    code, out, _ = run(["loop", "promote", group["id"], "--json"], capsys)
    entry = json.loads(out)["entry"]
    assert code == 0 and entry["status"] == "validated" and entry["measured"]["num_gpu_blocks"] == 3852
    assert (tmp_path / "state" / "promoted" / f"receipts-{group['id']}.json").is_file()
    assert run(["loop", "promote", "nope"], capsys)[0] == exit_codes.USAGE


def test_disagreeing_receipts_stay_candidates_and_cannot_be_promoted(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("CLUB3090_STATE_DIR", str(tmp_path / "state"))
    receipt_log(tmp_path, "a.log")
    other = (fixture_path("logs", "startup_v064_profiling.log").read_text()
             .replace("# GPU blocks: 3852", "# GPU blocks: 3800"))
    (tmp_path / "b.log").write_text(other)
    for name in ("a.log", "b.log"):
        assert run(["calibrate", str(tmp_path / name), "--save"], capsys)[0] == 0
    code, out, _ = run(["loop", "ingest", str(tmp_path / "state"), "--json"], capsys)
    groups = json.loads(out)["groups"]
    assert len(groups) == 1 and groups[0]["state"] == CANDIDATE and "disagree" in groups[0]["note"]
    code, _, err = run(["loop", "promote", groups[0]["id"]], capsys)
    assert code == 2 and "refused" in err


def test_a_malformed_receipt_file_is_rejected_by_ingest(tmp_path):
    (tmp_path / "r.json").write_text(json.dumps({"schema": 1, "kind": "vllm-startup-receipt", "shape": {},
                                                 "source": {}, "measured": {"gpu_kv_cache_tokens": -5}}))
    state = ingest([tmp_path])
    assert state.groups == () and "non-negative" in state.rejected[0][1]


@pytest.mark.parametrize("argv", [["loop"], ["loop", "frobnicate"]])
def test_loop_needs_an_action(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        raise SystemExit(cli.main(argv))
    assert exc.value.code == exit_codes.USAGE


def test_classify_shows_class_route_and_the_fingerprint_line(tmp_path, capsys):
    from tests.test_submit import e_bundle as failed_e_bundle
    from tests.test_submit import failed_boot
    failed_e_bundle(tmp_path, failed_boot(fixture_path("logs", "undefined_symbol.log").read_text()))
    code, out, _ = run(["loop", "classify", str(tmp_path), "--as", "kernel-unsupported"], capsys)
    assert code == 0 and "overlay-arch-drift -> file" in out and "undefined symbol" in out
    (line,) = [ln for ln in out.splitlines() if "exact_fingerprints line" in ln]
    code, out, _ = run(["loop", "classify", str(tmp_path), "--json"], capsys)
    (row,) = json.loads(out)["bundles"]
    assert line.endswith(f"{row['fingerprint']}: kernel-unsupported") and len(row["fingerprint"]) == 12
