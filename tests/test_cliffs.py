"""Known cliffs at the top (issue 28 item 4): an arch row's kernel_constraints and a profile's known
failure mode print right under the headline of pull, up and fits, and in --json as `cliffs`
([{source, text}]); scope notes are not cliffs; the start-up-only caveat names the soak command."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from club3090.catalog import load_catalog
from club3090.gate.cliffs import known_cliffs
from club3090.pipeline.pull import CAVEAT
from tests import test_up as up_tests

env, upstream = up_tests.env, up_tests.upstream           # fake Hub + payload server, seed-era catalog
CLIFF = "TEST-CLIFF: this kernel falls over past 64K on Ampere"
NOTE = "TEST-NOTE: dies after 2 hours of agent traffic"


def with_cliff(env: dict[str, Any]) -> dict[str, Any]:
    """``env`` whose catalog gives the curated model's arch row one kernel constraint (plus a scope
    note) and marks its profile ``caveats`` with a known failure mode."""
    base = env["catalog"]
    model = base.profiles[up_tests.CURATED_PROFILE].model
    row = base.arch_row_for_model(model)
    assert row is not None
    arches = {**base.arches, row.arch: dataclasses.replace(
        row, kernel_constraints=(CLIFF, "Quantization is checked per repo, not by this row."))}
    profiles = {**base.profiles, up_tests.CURATED_PROFILE: dataclasses.replace(
        base.profiles[up_tests.CURATED_PROFILE], status="caveats", status_note=NOTE)}
    catalog = dataclasses.replace(base, arches=arches, profiles=profiles)
    return {**env, "catalog": catalog,
            "provider": lambda settings: up_tests.LiveProvider(settings, free_disk=lambda _p: 10**15,
                                                               load=lambda: catalog)}


def test_shipped_rows_give_their_constraints_and_drop_scope_notes():
    cat = load_catalog()
    rows = [r for r in cat.arches.values() if r.kernel_constraints]
    assert any("not by this row" in t for r in rows for t in r.kernel_constraints)
    for row in rows:
        texts = [c.text for c in known_cliffs(cat, architecture=row.arch)]
        assert texts == [t for t in row.kernel_constraints if "not by this row" not in t], row.arch


def test_the_caveat_names_the_soak_command_and_the_boot_fit_cliff():
    assert "club3090 soak --mode continuous" in CAVEAT
    assert "necessary, not sufficient" in CAVEAT


def test_pull_prints_the_cliffs_right_under_the_headline(env, capsys):
    env = with_cliff(env)
    argv = ["pull", up_tests.CURATED, "--gpus", "1x3090", "--profile-like", up_tests.CURATED_PROFILE]
    assert up_tests.cli.main(argv, provider=env["provider"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1] == f"known cliff (arch:{env['catalog'].arch_row_for_model('qwen3.6-27b').arch}): {CLIFF}"
    assert out[2] == f"known cliff (profile:{up_tests.CURATED_PROFILE}): caveats: {NOTE}"
    assert not any("not by this row" in line for line in out)
    assert up_tests.cli.main([*argv, "--json"], provider=env["provider"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [c["text"] for c in doc["cliffs"]] == [CLIFF, f"caveats: {NOTE}"]
    assert doc["cliffs"][1]["source"] == f"profile:{up_tests.CURATED_PROFILE}"


def test_up_prints_the_cliffs_right_under_the_headline(env, capsys):
    env = with_cliff(env)
    run = env["tmp"] / "run"
    assert up_tests.up(env, up_tests.CURATED, "--gpus", "1x3090", "--profile-like", up_tests.CURATED_PROFILE,
                       "--dir", str(run), "--no-start") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("Fits on 1x RTX 3090") and out[1].endswith(CLIFF) and out[2].endswith(NOTE)


def test_fits_prints_and_reports_the_cliffs(env, capsys):
    env = with_cliff(env)
    argv = ["fits", up_tests.CURATED, "--gpus", "1x3090"]
    up_tests.cli.main(argv, provider=env["provider"])
    out = capsys.readouterr().out.splitlines()
    assert out[1].endswith(CLIFF)
    up_tests.cli.main([*argv, "--json"], provider=env["provider"])
    doc = json.loads(capsys.readouterr().out)
    rows = doc.get("rows") or doc.get("models") or [doc]
    assert CLIFF in json.dumps(rows)
