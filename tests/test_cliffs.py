"""Known cliffs at the top (issue 28 item 4): an arch row's kernel_constraints and a profile's known
failure mode print right under the headline of pull, up and fits, and in --json as `cliffs`
([{source, text}]); scope notes are not cliffs; the start-up-only caveat names the soak command."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from decimal import Decimal
from typing import Any

from club3090.catalog import load_catalog
from club3090.catalog.model import AppliesWhen, KernelConstraint
from club3090.gate.cliffs import Served, applies, known_cliffs
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
        row, kernel_constraints=(KernelConstraint(CLIFF),
                                 KernelConstraint("Quantization is checked per repo, not by this row.", "scope")))}
    profiles = {**base.profiles, up_tests.CURATED_PROFILE: dataclasses.replace(
        base.profiles[up_tests.CURATED_PROFILE], status="caveats", status_note=NOTE)}
    catalog = dataclasses.replace(base, arches=arches, profiles=profiles)
    return {**env, "catalog": catalog,
            "provider": lambda settings: up_tests.LiveProvider(settings, free_disk=lambda _p: 10**15,
                                                               load=lambda: catalog)}


def test_shipped_rows_give_their_constraints_and_drop_scope_notes():
    cat = load_catalog()
    rows = [r for r in cat.arches.values() if r.kernel_constraints]
    assert any(kc.kind == "scope" and "not by this row" in kc.text for r in rows for kc in r.kernel_constraints)
    assert all(kc.kind == "scope" for r in rows for kc in r.kernel_constraints if "not by this row" in kc.text)
    for row in rows:      # with nothing known of the shape, every cliff may apply: all are shown
        texts = [c.text for c in known_cliffs(cat, architecture=row.arch)]
        assert texts == [kc.text for kc in row.kernel_constraints if kc.kind == "cliff"], row.arch


TP_ONLY = "AutoRound INT4 under tensor parallelism needs the Marlin sub-tile padding overlay"


def test_every_condition_must_hold_and_an_unknown_fact_holds():
    when = AppliesWhen(tp_min=2, weight_formats=("autoround",), sm_max=load_catalog().gpus["rtx-3090"].sm)
    assert applies(when, Served(tp=2, weight_format="auto-round"))          # the quant method's spelling
    assert not applies(when, Served(tp=1, weight_format="autoround"))
    assert not applies(when, Served(tp=2, weight_format="awq"))
    assert not applies(when, Served(tp=4, weight_format="autoround", sm=Decimal("9.0")))   # Hopper: not Ampere
    assert applies(when, Served())
    assert applies(AppliesWhen(), Served(tp=1))
    assert not applies(AppliesWhen(kv_formats=("turboquant_3bit_nc",)), Served(kv_format="fp8_e5m2"))
    assert not applies(AppliesWhen(tp_max=1, engines=("vllm",)), Served(tp=1, engine="llama.cpp"))


def test_a_tp_only_constraint_is_absent_at_tp1_and_present_at_tp2_in_pull(env, capsys):
    arch = env["catalog"].arch_row_for_model("qwen3.6-27b").arch
    assert any(kc.text.startswith(TP_ONLY) and kc.applies_when.tp_min == 2
               for kc in env["catalog"].arches[arch].kernel_constraints)
    for gpus, profile, shown in (("1x3090", "vllm/minimal", False), ("2x3090", "vllm/dual", True)):
        argv = ["pull", up_tests.CURATED, "--gpus", gpus, "--profile-like", profile]
        assert up_tests.cli.main(argv, provider=env["provider"]) == 0
        out = capsys.readouterr().out
        assert (f"known cliff (arch:{arch}): {TP_ONLY}" in out) is shown, (profile, out)
        up_tests.cli.main([*argv, "--json"], provider=env["provider"])
        doc = json.loads(capsys.readouterr().out)
        assert any(c["text"].startswith(TP_ONLY) for c in doc["cliffs"]) is shown, profile


def with_payload(env: dict[str, Any], path: str, data: bytes) -> dict[str, Any]:
    """``env`` whose catalog pins one more upstream file (``path``), served by the payload server."""
    env["upstream"].files[f"/{up_tests.COMMIT}/{path}"] = data
    pinned = {**env["catalog"].upstream_files,
              path: up_tests.UpstreamFile(path, up_tests.COMMIT, len(data), hashlib.sha256(data).hexdigest(), False)}
    catalog = dataclasses.replace(env["catalog"], upstream_files=pinned)
    return {**env, "catalog": catalog,
            "provider": lambda settings: up_tests.LiveProvider(settings, free_disk=lambda _p: 10**15,
                                                               load=lambda: catalog)}


def test_a_tp_only_constraint_is_absent_at_tp1_and_present_at_tp2_in_up(env, capsys):
    env = with_payload(env, "scripts/detect_nvlink.sh", b"#!/bin/sh\necho 0\n")      # vllm/dual mounts it
    arch = env["catalog"].arch_row_for_model("qwen3.6-27b").arch
    for gpus, profile, shown in (("1x3090", "vllm/minimal", False), ("2x3090", "vllm/dual", True)):
        code = up_tests.up(env, up_tests.CURATED, "--gpus", gpus, "--profile-like", profile,
                           "--dir", str(env["tmp"] / profile.replace("/", "-")), "--no-start")
        out = capsys.readouterr().out.splitlines()
        assert code == 0 and out[0].startswith(f"Fits on {gpus[0]}x RTX 3090"), out[:3]
        cliffs = [line for line in out if line.startswith("known cliff")]
        assert (f"known cliff (arch:{arch}): {TP_ONLY}" in " ".join(cliffs)) is shown, (profile, out[:6])
        if shown:
            assert out.index(next(c for c in cliffs if TP_ONLY in c)) <= len(cliffs)   # at the top


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
