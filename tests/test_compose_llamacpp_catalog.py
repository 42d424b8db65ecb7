"""`club3090 compose` on every llama.cpp-family profile of the packaged catalog: the captured shipped
service (tools/sync_upstream.py) replays, compose-spec valid, equal to the shipped compose in
tests/fixtures/upstream/head/composes except the documented param slots (the host port, ``-c`` and
``-np`` defaults, each keeping its ``${VAR:-...}`` override; the shipped ``--cache-type-k/-v`` pair
stays), or is refused with a stated reason."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from club3090 import cli
from club3090.catalog import load_catalog
from club3090.compose.llamacpp import ENGINE_TYPE, command_words
from club3090.compose.replay import generate
from club3090.interpolate import interpolate
from tests.test_compose import validate_compose

HEAD = Path(__file__).parent / "fixtures" / "upstream" / "head"
CATALOG = load_catalog()
LLAMA = sorted(k for k, p in CATALOG.profiles.items() if CATALOG.engines[p.engine].type == ENGINE_TYPE)
SLOTS = {"-c": "ctx", "--ctx-size": "ctx", "-np": "np", "--parallel": "np"}
VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)")


def _shipped(key: str) -> tuple[str, dict[str, Any]]:
    doc = yaml.safe_load((HEAD / "composes" / CATALOG.profiles[key].compose_path).read_text(encoding="utf-8"))
    (name, service), = doc["services"].items()
    return name, service


def _same_override(replayed: str, shipped: str) -> bool:
    """Both words resolve alike once every variable they name is set (the override chain is kept)."""
    env = {v: f"<{v}>" for v in VAR.findall(shipped) + VAR.findall(replayed)}
    return interpolate(replayed, env) == interpolate(shipped, env)


def test_the_catalog_captures_every_llamacpp_family_profile():
    assert len(LLAMA) == 45
    registry = json.loads((HEAD / "registry_expanded.json").read_text(encoding="utf-8"))
    for key in LLAMA:
        p = CATALOG.profiles[key]
        assert key in registry and p.runtime is not None, key
        name, service = _shipped(key)
        assert (p.runtime.service_name, dict(p.runtime.service)) == (name, service), key
        assert not re.search(r"hf_[A-Za-z0-9]{30,}", json.dumps(dict(p.runtime.service))), key


@pytest.mark.parametrize("key", LLAMA)
def test_llamacpp_profile_replays_the_shipped_service_or_is_refused(key: str):
    profile = CATALOG.profiles[key]
    outcome = generate(key, CATALOG)
    if not outcome.ok:
        assert outcome.refusal and outcome.detail, key          # a stated reason
        assert outcome.text is None or outcome.text == ""
        return
    resolved = validate_compose(outcome.text)                   # compose-spec
    name, shipped = _shipped(key)
    service = yaml.safe_load(outcome.text)["services"][name]
    assert set(service) == set(shipped)
    for field in set(shipped) - {"ports", "command"}:
        assert service[field] == shipped[field], (key, field)
    # ports: only the first entry's host-port default moves, to the profile's port
    assert service["ports"][1:] == shipped["ports"][1:]
    assert _same_override(service["ports"][0], shipped["ports"][0])
    assert f":{profile.port}:" in resolved["services"][name]["ports"][0] or \
        resolved["services"][name]["ports"][0].startswith(f"{profile.port}:")
    # command: the shipped words; a slot's value keeps its override and defaults to the profile's value
    want = {"ctx": str(profile.max_model_len), "np": str(profile.max_num_seqs)}
    words, replayed = command_words(shipped["command"]), service["command"]
    assert len(replayed) == len(words), key
    for i, (ours, theirs) in enumerate(zip(replayed, words, strict=True)):
        slot = SLOTS.get(words[i - 1]) if i else None
        if slot is None:
            assert ours == theirs, (key, i, theirs)
            continue
        if "${" in theirs:
            assert _same_override(ours, theirs), (key, theirs, ours)
        assert interpolate(ours, {}) == want[slot], (key, words[i - 1], ours)


def test_replay_count():
    """How many replay (the rest are refused with a reason, above)."""
    ok = [k for k in LLAMA if generate(k, CATALOG).ok]
    refused = {k: generate(k, CATALOG).detail for k in LLAMA if k not in ok}
    assert len(ok) + len(refused) == 45 and len(ok) >= 40, refused
    for detail in refused.values():
        assert detail and detail.startswith("command-not-replayable")


def test_compose_cli_replays_a_catalog_llamacpp_profile(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    key = "llamacpp/gemma-12b-single-q8kxl"
    assert cli.main(["compose", "--profile", key, "--out", str(tmp_path / "c.yml")]) == 0
    validate_compose((tmp_path / "c.yml").read_text(encoding="utf-8"))
    assert "MODEL_DIR" in capsys.readouterr().err
