"""`club3090 profiles` through the real CLI entry point."""

from __future__ import annotations

import json

import pytest

from club3090.cli import main
from tests.test_catalog import SEED_VLLM_PROFILES

FIELDS = ("key", "model", "weights_variant", "engine", "kv_format", "tp", "max_model_len", "mem_util",
          "status", "emittable", "not_emittable_reason")


def _json(capsys, *argv):
    code = main(["profiles", "--json", *argv])
    out = capsys.readouterr().out
    return code, json.loads(out)


def test_json_lists_every_profile_with_fields(capsys):
    code, doc = _json(capsys)
    assert code == 0
    rows = {r["key"]: r for r in doc["profiles"]}
    for key in (*SEED_VLLM_PROFILES, "llamacpp/default"):
        assert key in rows
        for field in FIELDS:
            assert field in rows[key], (key, field)
    from club3090.catalog import load_catalog

    cat = load_catalog()
    assert set(rows) == set(cat.profiles) and doc["upstream_commit"] == cat.upstream_commit
    assert rows["vllm/minimal"]["emittable"] is True
    assert rows["vllm/dual-turbo"]["emittable"] is False
    assert rows["vllm/dual-turbo"]["not_emittable_reason"] == "genesis-equipped"
    # a llama.cpp-family capture replays (compose/llamacpp.py); one it cannot turn into words is refused
    assert rows["llamacpp/default"]["emittable"] is True and rows["llamacpp/default"]["not_emittable_reason"] is None
    assert rows["llamacpp/qwen38-27b-single-iq4xs"]["not_emittable_reason"] == "d-refused:scope"
    assert "rig" not in rows["vllm/minimal"]
    # every renamed slug resolves to a listed profile
    assert doc["aliases"] and all(new in rows and old in rows[new]["aliases"] for old, new in doc["aliases"].items())


def test_json_with_gpus_checks_count_and_sm(capsys):
    code, doc = _json(capsys, "--gpus", "1x3090")
    assert code == 0
    rows = {r["key"]: r for r in doc["profiles"]}
    assert rows["vllm/minimal"]["rig"]["ok"] is True
    assert rows["vllm/dual"]["rig"]["enough_gpus"] is False
    assert rows["vllm/dual"]["rig"]["ok"] is False
    assert rows["vllm/gemma-mtp-tp1"]["rig"]["sm_ok"] is False  # fp8 KV profile needs SM 9.0
    assert doc["gpus"]["count"] == 1


def test_gemma_fp8_profile_passes_on_h100(capsys):
    _, doc = _json(capsys, "--gpus", "1xh100")
    rows = {r["key"]: r for r in doc["profiles"]}
    assert rows["vllm/gemma-mtp-tp1"]["rig"]["ok"] is True


def test_size_only_rig_has_unknown_sm(capsys):
    _, doc = _json(capsys, "--gpus", "2x24GiB")
    rows = {r["key"]: r for r in doc["profiles"]}
    assert rows["vllm/dual"]["rig"]["enough_gpus"] is True
    assert rows["vllm/dual"]["rig"]["sm_ok"] is None


def test_bad_gpus_exits_64(capsys):
    code = main(["profiles", "--gpus", "1xrtx-3099"])
    err = capsys.readouterr().err
    assert code == 64
    assert "rtx-3090" in err


def test_human_table(capsys):
    _, doc = _json(capsys, "--gpus", "2x3090")
    assert main(["profiles", "--gpus", "2x3090"]) == 0
    out = capsys.readouterr().out
    assert "vllm/minimal" in out and "llamacpp/default" in out
    assert all(row["key"] in out for row in doc["profiles"])       # one row per profile --json lists
    assert str(len(doc["profiles"])) in out.split()
    summary = doc["emittability"]
    assert f"{summary['emittable']} of {summary['vllm_profiles']} vLLM profiles emittable" in out


def test_reason_wording_has_one_table(capsys):
    """profiles --json and the rendered table read one table (catalog.model.NOT_EMITTABLE_TEXT)."""
    from club3090.catalog.model import NOT_EMITTABLE_REASONS, NOT_EMITTABLE_TEXT

    assert set(NOT_EMITTABLE_TEXT) == set(NOT_EMITTABLE_REASONS)
    assert main(["profiles", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["profiles"]
    for row in rows:
        reason = row["not_emittable_reason"]
        assert (reason is None) == row["emittable"]
        if reason is None or reason in NOT_EMITTABLE_TEXT:
            assert row["not_emittable_text"] == (NOT_EMITTABLE_TEXT[reason][0] if reason else None)
        else:                                   # in scope, but compose's replay refuses it: its token
            assert reason.startswith("d-refused:") and row["not_emittable_text"].startswith("compose refuses: ")


def test_curated_3090_profiles_pass_on_their_reference_card(capsys):
    _, doc = _json(capsys, "--gpus", "2x3090")
    rows = {r["key"]: r for r in doc["profiles"]}
    for key in ("vllm/default", "vllm/bounded-thinking", "vllm/long-text", "vllm/long-text-no-mtp",
                "vllm/long-vision", "vllm/dual-turbo"):
        assert rows[key]["reference_gpu"] == "rtx-3090" and rows[key]["kv_format"] == "turboquant_3bit_nc"
        assert rows[key]["rig"]["sm_ok"] is True, (key, rows[key]["rig"]["why_not"])
    # a profile with no registry SM term passes on its own reference card, whatever its KV format
    for key, row in rows.items():
        if row["reference_gpu"] == "rtx-3090" and row["required_sm"] is None:
            assert row["rig"]["sm_ok"] is True, (key, row["rig"]["why_not"])



def test_emittable_means_compose_writes_it(capsys):
    """`profiles` says emittable exactly when `club3090 compose --profile KEY` writes the file."""
    _, doc = _json(capsys)
    emittable = 0
    for row in doc["profiles"]:
        code = main(["compose", "--profile", row["key"], "--json"])
        capsys.readouterr()
        assert (code == 0) == row["emittable"], (row["key"], code, row["not_emittable_reason"])
        emittable += row["emittable"]
    summary = doc["emittability"]
    assert 0 < sum(r["emittable"] for r in doc["profiles"] if r["engine_type"] == "vllm") == summary["emittable"]
    llama = [r for r in doc["profiles"] if r["engine_type"] == "llama.cpp"]
    # every llama.cpp-family capture replays but the two whose command cannot become a word list
    assert sum(r["emittable"] for r in llama) == len(llama) - 2 and emittable > summary["emittable"]
    vllm = [r for r in doc["profiles"] if r["engine_type"] == "vllm"]
    assert summary["vllm_profiles"] == len(vllm)
    assert set(summary["refused"]) == {r["key"] for r in vllm if not r["emittable"]}
    assert sum(summary["refusals_by_reason"].values()) == len(summary["refused"])
    assert all(r["reason"] for r in summary["refused"].values())


def test_profiles_on_withdrawn_engines_name_their_replacement(capsys):
    """A profile whose engine image upstream withdrew says which current profile replaces it, in the
    listing and in compose's refusal."""
    _, doc = _json(capsys)
    rows = {r["key"]: r for r in doc["profiles"]}
    withdrawn = [r for r in rows.values() if r["engine_withdrawn"] and r["engine_type"] == "vllm"]
    assert withdrawn
    for row in withdrawn:
        assert not row["emittable"] and row["replaced_by"] in rows, row["key"]
        succ = rows[row["replaced_by"]]
        assert not succ["engine_withdrawn"] and not succ["archived"] and succ["model"] == row["model"]
        refused = doc["emittability"]["refused"][row["key"]]
        assert refused["replaced_by"] == row["replaced_by"]
        if str(row["not_emittable_reason"]).endswith("pin-mismatch"):
            assert f"use {row['replaced_by']}" in row["not_emittable_text"]


def _rows(gpus: str | None):
    from club3090.catalog import load_catalog
    from club3090.catalog.listing import profile_rows
    from club3090.rig.gpus import parse_gpus

    cat = load_catalog()
    rig = parse_gpus(gpus, cat) if gpus else None
    return cat, rig, profile_rows(cat, rig)


@pytest.mark.parametrize("gpus", [None, "1x3090", "2x3090"])
@pytest.mark.parametrize("width", [40, 60, 80, 100])
def test_narrow_terminal_keeps_whole_keys(gpus, width):
    from club3090.cli.commands.profiles import render

    cat, rig, rows = _rows(gpus)
    text = render(rows, cat.version, rig, width)
    lines = text.splitlines()
    # only a key longer than the terminal may overflow it: keys are never cut
    longest = max(len(r["key"]) for r in rows)
    assert all(len(line) <= max(width, longest) for line in lines), max(lines, key=len)
    assert all(len(line) <= width for line in lines if line.split("  ", 1)[0] not in
               {r["key"] for r in rows if len(r["key"]) > width}), max(lines, key=len)
    starts = {line.split("  ", 1)[0] for line in lines}
    for row in rows:
        assert row["key"] in starts, row["key"]                 # the key column, whole, never cut
    assert all(line == line.rstrip() for line in lines)
    if width == 80 and lines[1].startswith("profile "):       # the table form (not one block per key)
        assert "hidden at" in text                              # says what it left out


def test_piped_output_has_every_column_and_no_padding(capsys):
    assert main(["profiles", "--gpus", "2x3090"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert all(line == line.rstrip() for line in lines)
    header = lines[1].split()
    assert header == ["profile", "model", "variant", "engine", "kv", "tp", "max_model_len", "mem", "status",
                      "emit", "rig"]
    assert "hidden at" not in out


def test_an_old_slug_resolves_in_compose_and_pull(capsys):
    """Renamed upstream slugs stay usable: compose and pull treat the alias as the profile it names."""
    _, doc = _json(capsys)
    old, new = next(iter(doc["aliases"].items()))
    code_old = main(["compose", "--profile", old, "--json"])
    via_old = json.loads(capsys.readouterr().out)
    code_new = main(["compose", "--profile", new, "--json"])
    via_new = json.loads(capsys.readouterr().out)
    assert code_old == code_new and via_old["profile"] == via_new["profile"] == new
    assert main(["compose", "--profile", "vllm/no-such-slug", "--json"]) == 64


def test_golden_triple_profiles_are_marked(capsys):
    _code, doc = _json(capsys)
    golden = sorted(r["key"] for r in doc["profiles"] if r["golden"])
    assert golden == ["vllm/dual", "vllm/gemma-bf16-mtp", "vllm/gemma-int8-mtp", "vllm/gemma-mtp-tp1", "vllm/minimal"]
    assert main(["profiles"]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("vllm/gemma-mtp-tp1 "))
    assert " golden" in line
