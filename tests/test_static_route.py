"""Issue 28 item 7: a profile `compose` cannot replay (Genesis-equipped, no capture, archived) is
refused with the shipped compose file named and its archive status, in compose and in pull's gate."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from club3090 import cli
from club3090.catalog import load_catalog
from tests.providers import offline_here, plenty_of_disk

CURATED = "Lorbus/Qwen3.6-27B-int4-AutoRound"


@pytest.fixture(autouse=True)
def _offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    offline_here(tmp_path, monkeypatch)


@pytest.mark.parametrize("archived, status", [(True, "archived: not in upstream's registry"),
                                              (False, "in upstream's registry")])
def test_static_route_names_the_file_and_its_archive_status(archived, status):
    base = load_catalog()
    key = next(k for k, p in sorted(base.profiles.items()) if base.emittable(k) == (False, "genesis-equipped"))
    # every shipped Genesis profile is archived today: the other case is the same record, not archived
    cat = dataclasses.replace(base, profiles={**base.profiles, key: dataclasses.replace(
        base.profiles[key], archived=archived)})
    text = cat.static_route(key)
    assert cat.profiles[key].compose_path in text and status in text
    assert f"status {cat.profiles[key].status}" in text
    assert ("archived" in text) is archived


def test_compose_refusal_names_the_shipped_file(capsys):
    cat = load_catalog()
    key = next(k for k, p in sorted(cat.profiles.items()) if cat.emittable(k) == (False, "genesis-equipped")
               and p.archived)
    assert cli.main(["compose", "--profile", key, "--json"]) == 2
    doc = json.loads(capsys.readouterr().out)
    assert doc["refusal"] == "scope" and doc["detail"].startswith("genesis-equipped: ")
    assert cat.profiles[key].compose_path in doc["detail"] and "archived" in doc["detail"]


def test_pull_path_a_refusal_names_the_shipped_file(capsys):
    cat = load_catalog()
    key = next(k for k, p in sorted(cat.profiles.items()) if cat.emittable(k) == (False, "genesis-equipped")
               and p.model == "qwen3.6-27b" and p.weights_variant == "autoround-int4" and p.tp == 2)
    code = cli.main(["pull", CURATED, "--profile-like", key, "--gpus", "2x3090", "--out", "c.yml", "--json"],
                    provider=plenty_of_disk)
    doc = json.loads(capsys.readouterr().out)
    assert code == 2 and doc["reason"] == "profile-not-emittable", doc["reason"]
    assert cat.profiles[key].compose_path in doc["detail"] and "upstream's registry" in doc["detail"]
