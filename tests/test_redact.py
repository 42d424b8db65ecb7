"""Redaction fails closed, and hides relative paths and the local folders a run was pointed at."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from club3090.errors import RedactionError
from club3090.reports import redact as redact_mod
from club3090.reports.capture import write_gate_bundle
from club3090.reports.redact import Redactor, redact
from tests.test_capture import IDENTITY, MANIFEST_FIELDS, NOW, planted_gate


@pytest.mark.parametrize("target, attr", [
    ("getpass", "getuser"), ("socket", "gethostname"),
])
def test_unreadable_identity_stops_the_bundle_write(tmp_path, monkeypatch, target, attr):
    def boom():
        raise OSError("no passwd entry for uid 4242")
    monkeypatch.setattr(getattr(redact_mod, target), attr, boom)
    root = tmp_path / "caps"
    with pytest.raises(RedactionError, match="nothing was written"):
        write_gate_bundle(root, slug="acme/x", gate=planted_gate(), manifest_fields=MANIFEST_FIELDS, now=NOW,
                          home="/home/alice")
    assert not root.exists() or not any(root.rglob("*.json"))


def test_unreadable_home_names_the_next_step(monkeypatch):
    def boom(cls):
        raise RuntimeError("Could not determine home directory.")
    monkeypatch.setattr(redact_mod.Path, "home", classmethod(boom))
    with pytest.raises(RedactionError, match="Set HOME"):
        Redactor(user="alice", host="gpubox-7")


def test_empty_identity_from_the_machine_is_a_failure(monkeypatch):
    monkeypatch.setattr(redact_mod.socket, "gethostname", lambda: "")
    with pytest.raises(RedactionError, match="host name is empty"):
        Redactor(home="/home/alice", user="alice")


def test_a_value_that_cannot_be_scrubbed_fails_closed():
    with pytest.raises(RedactionError):
        redact({"x": object()}, **IDENTITY)
    deep: list = []
    for _ in range(200):
        deep = [deep]
    with pytest.raises(RedactionError, match="nested"):
        redact(deep, **IDENTITY)


@pytest.mark.parametrize("text, expected", [
    ("pull ./my-secret-project/models/x", "pull <PATH>"),
    ("'../client-acme/weights' missing", "'<PATH>' missing"),
    ("see https://example.com/./x", "see https://example.com/./x"),   # not a local relative path
    ("v0.8.3 and 1.5./ stay", "v0.8.3 and 1.5./ stay"),
])
def test_relative_paths_are_redacted(text, expected):
    assert redact(text, **IDENTITY) == expected


def test_a_local_folder_is_hidden_in_every_spelling(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    folder = Path("client-acme") / "secret-proj"
    folder.mkdir(parents=True)
    red = Redactor(**IDENTITY, local_paths=[str(folder)])
    for spelling in (str(folder), f"./{folder}", str(tmp_path / folder), "client-acme-secret-proj",
                     "secret-proj"):
        out = red.text(f"model={spelling} failed")
        assert "secret-proj" not in out and "client-acme" not in out, (spelling, out)


def test_a_bundle_for_a_local_model_folder_leaks_no_folder_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("client-acme/secret-proj").mkdir(parents=True)
    slug = "client-acme/secret-proj"
    gate = planted_gate()
    gate["detail"]["served"] = "client-acme-secret-proj"
    bundle = write_gate_bundle(tmp_path / "caps", slug=slug, gate=gate,
                               manifest_fields={**MANIFEST_FIELDS, "model_id": slug}, now=NOW, **IDENTITY)
    texts = [p.read_text() for p in bundle.iterdir()] + [str(bundle.relative_to(tmp_path)),
                                                         (tmp_path / "caps" / ".last").read_text()]
    for text in texts:
        for planted in ("secret-proj", "client-acme", "alice", "gpubox-7", "hf_aB3d"):
            assert planted not in text, (planted, text[:200])
    assert json.loads((bundle / "manifest.json").read_text())["slug"] == "<PATH>"


def test_a_hub_repo_id_is_not_a_local_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    bundle = write_gate_bundle(tmp_path / "caps", slug="acme/Widget-7B", gate=planted_gate(),
                               manifest_fields=MANIFEST_FIELDS, now=NOW, **IDENTITY)
    assert json.loads((bundle / "manifest.json").read_text())["slug"] == "acme/Widget-7B"
    assert os.path.basename(bundle.parent) == "acme-widget-7b"


def test_the_cli_renders_a_redaction_failure_with_the_next_step(monkeypatch, capsys):
    from club3090 import cli
    from club3090.cli import exit_codes
    from tests.fixtures_path import fixture_path

    def boom():
        raise KeyError("getpwuid(): uid not found: 4242")
    monkeypatch.setattr(redact_mod.getpass, "getuser", boom)
    code = cli.main(["calibrate", str(fixture_path("logs", "startup_v05_weights.log"))])
    out, err = capsys.readouterr()
    assert code == exit_codes.SOFTWARE and "Set USER" in err and "Traceback" not in err and out == ""


# --- hardening round 3, SEC-5: every spelling of a key a log can carry ------------------------
PLANTED = "sk-PlantedSecret0123456789"


@pytest.mark.parametrize("line", [
    f"INFO 05-01 args: {{'model': 'm', 'api_key': ['{PLANTED}'], 'port': 8000}}",          # vLLM's own dict
    f"Namespace(model='m', api_key=['{PLANTED}', '{PLANTED}2'], port=8000)",                # argparse repr
    f"$ vllm serve m --api-key {PLANTED} --port 8000",
    f"$ vllm serve m --api-key={PLANTED} --port 8000",
    f"llama-server -m x.gguf --api-key '{PLANTED}'",
    f"HF_ENDPOINT=https://alice:{PLANTED}@mirror.example/hub",
    f"fetching http://bob:{PLANTED}@10.0.0.1:8080/x failed",
])
def test_planted_keys_never_survive(line: str) -> None:
    from club3090.reports.redact import Redactor

    out = Redactor(home="/home/zed", user="zed", host="box").text(line)
    assert PLANTED not in out and "Planted" not in out, out
    assert "alice" not in out and "bob:" not in out


def test_url_user_info_redaction_is_linear() -> None:
    import time

    from club3090.reports.redact import Redactor

    started = time.monotonic()
    Redactor(home="/home/zed", user="zed", host="box").text("a" * 2_000_000 + "://" + "b" * 2_000_000)
    assert time.monotonic() - started < 10
