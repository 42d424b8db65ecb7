"""`club3090 pull` as a user runs it: flags, exit codes, human and JSON output, submission."""

from __future__ import annotations

import argparse
import json
import socket
from decimal import Decimal
from pathlib import Path

import pytest

from club3090 import cli
from club3090.cli.commands.pull import parse_sm
from club3090.edges.provider import LiveProvider
from tests.providers import plenty_of_disk

CURATED = "Lorbus/Qwen3.6-27B-int4-AutoRound"
README_ARGS = ["pull", CURATED, "--profile-like", "vllm/minimal", "--gpus", "1x3090", "--out", "compose.yml"]



def main(argv, **kw):
    """``cli.main`` with the live provider and plenty of free disk."""
    return cli.main(argv, provider=kw.pop("provider", plenty_of_disk), **kw)


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def _json(capsys) -> dict:
    return json.loads(capsys.readouterr().out)


def test_readme_main_job_works_offline_on_a_fresh_machine(tmp_path, monkeypatch, capsys):
    """The README command: a curated repo, no network (any socket refused), an empty HF_HOME."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "fresh-hf-home"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    def no_network(*_a, **_k):
        raise AssertionError("the README command must not open a socket")
    monkeypatch.setattr(socket.socket, "connect", no_network)
    assert cli.main(README_ARGS) == 0            # the live provider, real free space
    out = capsys.readouterr().out
    assert out.startswith("Fits on 1x RTX 3090 (vllm/minimal, TP 1): ")
    assert "[pull] OK path=" not in out and "caveat:" in out      # gate tokens only with --verbose
    text = (tmp_path / "compose.yml").read_text(encoding="utf-8")
    from club3090.catalog import load_catalog

    cat = load_catalog()
    pin = cat.engines[cat.profiles["vllm/minimal"].engine].pin
    assert "services:" in text and pin in text and "--trust-remote-code" not in text
    # re-running refuses to clobber without --force
    assert main(README_ARGS) == 64
    assert main([*README_ARGS, "--force"]) == 0


def test_human_output_lines(capsys):
    assert main(["pull", CURATED, "--profile-like", "vllm/minimal", "--gpus", "1x16GiB", "--hardware", "8.6",
                 "--verbose"]) == 2
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("Does not fit on 1x 16GiB at 32K context - exact (curated)")
    cliffs = [line for line in out if line.startswith("known cliff (arch:")]   # right under the headline
    assert cliffs and out[1:1 + len(cliffs)] == cliffs
    out = [out[0], *out[1 + len(cliffs):]]
    assert out[1] == f"[pull] ABORT path=B stratum=DECIDED slug={CURATED} profile-like=vllm/minimal"
    assert out[2] == "[pull] confidence=exact raw_verdict=wont-fit terminal=hard-block"
    assert "[pull] reason=hard-block" in out
    assert any(line.startswith("[pull] fit per GPU: budget ") and "GiB" in line for line in out)
    assert any(line.startswith("closest fit: ") for line in out)
    assert any(line.startswith("[pull] gate bundle: ") for line in out)
    assert out[-1].startswith("[pull] DOES NOT FIT")


def test_recommend_never_changes_the_decision(capsys):
    base = ["pull", CURATED, "--profile-like", "vllm/dual", "--gpus", "2x18GiB", "--hardware", "8.6"]
    assert main([*base, "--json"]) == 3
    plain = _json(capsys)
    assert main([*base, "--json", "--recommend"]) == 3
    rec = _json(capsys)
    assert rec.pop("recommend").startswith("FITS-but-not-yet-accepted")
    assert {k: v for k, v in rec.items() if k != "bundle"} == {k: v for k, v in plain.items() if k != "bundle"}
    assert main([*base, "--recommend", "--verbose"]) == 3
    assert capsys.readouterr().out.splitlines()[-1].startswith("recommend: FITS-but-not-yet-accepted")
    assert main([*base, "--yes", "--recommend", "--verbose"]) == 0
    assert "recommend: FITS (deciding stratum: 0 DECIDED)" in capsys.readouterr().out


def test_json_object(capsys):
    assert main(["pull", CURATED, "--profile-like", "vllm/minimal", "--gpus", "1x3090", "--json"]) == 0
    data = _json(capsys)
    assert data["ok"] is True and data["exit_code"] == 0 and data["path"] == "B" and data["stratum"] == 0
    assert data["c0"]["state"] == "engine-supported" and data["fit"]["kv_cache_tokens"] > 0
    assert data["caveat"] and data["out"] is None and isinstance(data["notices"], list)


@pytest.mark.parametrize("argv", [
    ["pull"],                                                     # no slug
    ["pull", CURATED, "--profile-like", "vllm/minimal", "--hardware", "fast"],
    ["pull", CURATED, "--profile-like", "vllm/minimal", "--gpus", "2xWarpDrive"],
    ["pull", CURATED, "--profile-like", "vllm/minimal", "--no-such-flag"],
    ["pull", "--submit-last", "--submit", "x"],
])
def test_usage_errors_exit_64(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        code = main(argv)
        raise SystemExit(code)
    assert exc.value.code == 64


def test_json_usage_error_is_still_json(capsys):
    assert main(["pull", "--json"]) == 64                      # no SLUG
    data = _json(capsys)
    assert data["ok"] is False and data["exit_code"] == 64


def test_upstream_gpu_form_is_accepted(capsys):
    assert main(["pull", CURATED, "--profile-like", "vllm/dual", "--gpus",
                     "24576:NVIDIA GeForce RTX 3090,24576:NVIDIA GeForce RTX 3090", "--json"]) == 0
    data = _json(capsys)
    assert data["hardware"]["gpu_count"] == 2 and data["hardware"]["sm"] == "8.6"
    assert main(["pull", CURATED, "--profile-like", "vllm/dual", "--hardware-gpus",
                     "24576:RTX 3090,24576:RTX 3090", "--json"]) == 0


@pytest.mark.parametrize("text,value", [("8.6", "8.6"), ("sm_86", "8.6"), ("sm90", "9.0"), ("86", "8.6"),
                                        ("10.0", "10.0"), ("sm_120", "12.0")])
def test_parse_sm(text, value):
    assert parse_sm(text) == Decimal(value)


def test_hub_unreachable_exits_69(fake_hub, monkeypatch, capsys):
    monkeypatch.setenv("HF_ENDPOINT", fake_hub.url)
    fake_hub.add_fixture("Qwen--Qwen2.5-7B")
    fake_hub.fault("drop", match="/api/models/", times=None)
    assert main(["pull", "Qwen/Qwen2.5-7B", "--profile-like", "vllm/minimal", "--gpus", "1x3090", "--json"]) == 69
    assert _json(capsys)["exit_code"] == 69


def test_internal_error_exits_70(capsys):
    def boom():
        raise RuntimeError("bug")
    provider = lambda settings: LiveProvider(settings, detect=boom)  # noqa: E731
    assert main(["pull", CURATED, "--profile-like", "vllm/minimal"], provider=provider) == 70
    assert "internal error" in capsys.readouterr().err


def test_submit_last_asks_and_declines_on_eof(monkeypatch, capsys, tmp_path):
    assert main(["pull", CURATED, "--profile-like", "vllm/dual-turbo", "--gpus", "2x3090",
                     "--out", str(tmp_path / "x.yml")]) == 2
    capsys.readouterr()
    monkeypatch.setattr("builtins.input", lambda: (_ for _ in ()).throw(EOFError()))
    monkeypatch.setattr("shutil.which", lambda _name: None)
    assert main(["pull", "--submit-last"]) == 0
    captured = capsys.readouterr()
    assert "lorbus-qwen3.6-27b-int4-autoround" in captured.out
    assert "profile-not-emittable" in captured.out


def test_submit_last_without_bundles(capsys):
    # no bundle to submit is a usage error, the same exit as --submit with a missing folder
    assert main(["pull", "--submit-last"]) == 64


def test_submit_dir_must_exist(capsys, tmp_path):
    assert main(["pull", "--submit", str(tmp_path / "missing")]) == 64


def test_local_wrapper_with_auto_map_only_in_text_config_needs_the_ack(tmp_path, capsys):
    from tests.test_architecture import write_wrapper_folder

    folder = str(write_wrapper_folder(tmp_path / "wrapper"))
    base = ["pull", folder, "--profile-like", "vllm/minimal", "--gpus", "1x3090", "--hardware", "8.6",
            "--dry-run", "--json"]
    assert main(base) == 2
    data = _json(capsys)
    assert (data["stratum"], data["reason"], data["sub_reason"]) == (3, "needs-trust-remote-code-ack", None)
    assert data["c0"]["bypassable_by"] == ["--trust-remote-code"]
    assert main([*base, "--trust-remote-code"]) == 0      # acknowledged: on to the fit; --dry-run asks nothing more
    assert _json(capsys)["stratum"] == 0


@pytest.mark.parametrize("text", ["8.65", "sm_", "0.5", "abc", "nan"])
def test_bad_hardware_sm_is_a_usage_error(text):
    with pytest.raises(argparse.ArgumentTypeError):
        parse_sm(text)
    with pytest.raises(SystemExit) as exc:      # argparse's usage error: exit 64
        main(["pull", CURATED, "--profile-like", "vllm/minimal", "--hardware", text])
    assert exc.value.code == 64


def test_wont_fit_suggests_a_larger_tp_for_a_builtin_moe(tmp_path, capsys):
    import json as _json
    import struct

    from tests.fixtures_path import fixture_path

    folder = tmp_path / "moe"
    folder.mkdir()
    (folder / "config.json").write_bytes(fixture_path("hub", "Qwen--Qwen3-30B-A3B", "config.json").read_bytes())
    data = 61_000_000_000  # bf16 weights of a 30B MoE: far over two 24 GiB cards
    header = _json.dumps({"w": {"dtype": "BF16", "shape": [data // 2], "data_offsets": [0, data]}}).encode()
    header += b" " * (-len(header) % 8)
    with open(folder / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header)
        f.truncate(8 + len(header) + data)  # sparse: only the header is ever read
    code = main(["pull", str(folder), "--profile-like", "vllm/dual", "--gpus", "2x3090", "--json"])
    out = _json.loads(capsys.readouterr().out)
    assert (code, out["raw_verdict"], out["terminal"]) == (3, "wont-fit", "override-accepted")
    assert any("tp=4" in s for s in out["suggestions"])
