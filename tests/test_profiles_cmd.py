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
    assert len(rows) == 67
    assert rows["vllm/minimal"]["emittable"] is True
    assert rows["vllm/dual-turbo"]["emittable"] is False
    assert rows["vllm/dual-turbo"]["not_emittable_reason"] == "genesis-equipped"
    assert rows["llamacpp/default"]["not_emittable_reason"] == "engine-not-vllm"
    assert rows["vllm/qwen-27b-dual-fast"]["not_emittable_reason"] == "no-runtime-capture"
    assert "rig" not in rows["vllm/minimal"]


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
    assert str(len(doc["profiles"])) in out.split() and len(doc["profiles"]) == 67


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
    assert 0 < emittable < 17                   # 17 were counted before compose's own refusals


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
    assert all(len(line) <= width for line in lines), max(lines, key=len)
    starts = {line.split("  ", 1)[0] for line in lines}
    for row in rows:
        assert row["key"] in starts, row["key"]                 # the key column, whole, never cut
    assert all(line == line.rstrip() for line in lines)
    if width == 80:
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
