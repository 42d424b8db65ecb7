"""What `club3090 fits --gpus 2x3090 --json` costs, guarded by counts rather than seconds (a loaded
2-core machine makes wall time flaky): the heavy modules it never imports, the one command module
the parser loads, and the YAML it parses (each catalog file once, then not at all while the files
are unchanged: ``catalog/parse_cache``). ``benchmarks/open_fits_speed.py`` prints the seconds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from club3090.catalog import loader, open_index
from club3090.catalog import parse_cache as pc
from club3090.catalog.collector import Collector
from club3090.catalog.schema import FILES
from club3090.fit import kv_layout

SRC = Path(__file__).resolve().parents[1] / "src"

PROBE = """
import contextlib, io, json, sys
from club3090 import cli
with contextlib.redirect_stdout(io.StringIO()) as out:
    code = cli.main(["fits", "--gpus", "2x3090", "--json"])
doc = json.loads(out.getvalue())
print(json.dumps({"code": code, "ranked": doc["index"]["ranked"], "modules": sorted(sys.modules)}))
"""


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """No catalog or index in this process's memory, and an empty parse cache of this test's own."""
    monkeypatch.setenv("CLUB3090_STATE_DIR", str(tmp_path / "state"))
    for cached in (loader._load_shipped, open_index._shipped, kv_layout._layout):
        cached.cache_clear()
    yield tmp_path / "state" / "yaml-cache"
    for cached in (loader._load_shipped, open_index._shipped, kv_layout._layout):
        cached.cache_clear()


def test_fits_imports_no_heavy_module_and_one_command(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(SRC), "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"),
           "CLUB3090_STATE_DIR": str(tmp_path / "state")}
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["code"] == 0 and doc["ranked"] >= 150
    modules = set(doc["modules"])
    for heavy in ("huggingface_hub", "httpx", "rich", "requests", "jinja2",
                  "club3090.validate.verify", "club3090.edges.openai_client", "club3090.reports.capture",
                  "club3090.reports.vllm_log"):
        assert heavy not in modules, f"fits imported {heavy}"
    commands = {m for m in modules if m.startswith("club3090.cli.commands.") and not m.split(".")[-1].startswith("_")}
    assert commands == {"club3090.cli.commands.fits"}, "the parser built other commands"


def _counting(monkeypatch) -> list[int]:
    parses: list[int] = []
    real = loader._yaml_load

    def counted(blob: bytes):
        parses.append(len(blob))
        return real(blob)

    monkeypatch.setattr(loader, "_yaml_load", counted)
    return parses


def test_each_yaml_file_is_parsed_once_then_read_back(fresh, monkeypatch):
    parses = _counting(monkeypatch)
    first, index = loader.load_catalog(), open_index.load_open_index()
    assert len(parses) == len(FILES) + 1                      # the catalog files and the index, once each
    assert len(list(fresh.glob("*.json"))) == len(FILES) + 1
    for cached in (loader._load_shipped, open_index._shipped):
        cached.cache_clear()
    second, index2 = loader.load_catalog(), open_index.load_open_index()
    assert len(parses) == len(FILES) + 1                      # no parse: every document read back
    assert second.version == first.version and second.models == first.models and second.profiles == first.profiles
    assert index2.models == index.models and index2.version == index.version


def test_a_changed_file_is_parsed_again(fresh, monkeypatch):
    parses = _counting(monkeypatch)
    blob = b"schema_version: 1\nmodels: {}\n"
    assert loader._parse("x.yaml", blob, Collector()) == {"schema_version": 1, "models": {}}
    assert loader._parse("x.yaml", blob, Collector()) == {"schema_version": 1, "models": {}}
    assert len(parses) == 1
    assert loader._parse("x.yaml", blob + b"extra: 2\n", Collector())["extra"] == 2
    assert len(parses) == 2


def test_an_altered_or_torn_cache_file_is_never_trusted(fresh, monkeypatch):
    parses = _counting(monkeypatch)
    blob = b"a: 1\nb: [x, y]\n"
    loader._parse("x.yaml", blob, Collector())
    path = pc.cache_path(blob, fresh)
    stored = path.read_bytes()
    forged = stored[:32] + stored[32:].replace(b"x", b"z")    # payload changed, digest not
    path.write_bytes(forged)
    assert loader._parse("x.yaml", blob, Collector()) == {"a": 1, "b": ["x", "y"]}
    path.write_bytes(stored[: len(stored) // 2])
    assert loader._parse("x.yaml", blob, Collector()) == {"a": 1, "b": ["x", "y"]}
    assert len(parses) == 3


def test_a_stored_document_of_other_types_is_not_used(fresh, monkeypatch):
    import hashlib

    parses = _counting(monkeypatch)
    blob = b"a: 1\n"
    loader._parse("x.yaml", blob, Collector())
    for payload in (b"\x80 not json", b"NaN", b'{"a": [1, {"b": NaN}]}'):    # a valid digest over each
        pc.cache_path(blob, fresh).write_bytes(hashlib.sha256(payload).digest() + payload)
        assert loader._parse("x.yaml", blob, Collector()) == {"a": 1}
    assert len(parses) == 4


def test_a_document_with_a_number_as_a_key_is_not_cached(fresh, monkeypatch):
    parses = _counting(monkeypatch)
    for _ in range(2):
        assert loader._parse("x.yaml", b"8.6: ampere\n", Collector()) == {8.6: "ampere"}
        assert str(loader._parse("x.yaml", b"a: .nan\n", Collector())["a"]) == "nan"
    assert len(parses) == 4 and not list(fresh.glob("*.json"))


def test_problems_are_reported_on_every_load_and_never_cached(fresh, monkeypatch):
    parses = _counting(monkeypatch)
    blob = b"a: 1\na: 2\n"
    for _ in range(2):
        c = Collector()
        loader._parse("x.yaml", blob, c)
        assert any("duplicate key 'a'" in p.message for p in c.problems)
    assert len(parses) == 2 and not list(fresh.glob("*.json"))
    bad = Collector()
    assert loader._parse("x.yaml", b"a: [1, 2\n", bad) is None and bad.problems


def test_a_document_json_cannot_hold_exactly_is_not_cached(fresh, monkeypatch):
    parses = _counting(monkeypatch)
    blob = b"released: 2025-01-02\n"
    for _ in range(2):
        assert str(loader._parse("x.yaml", blob, Collector())["released"]) == "2025-01-02"
    assert len(parses) == 2


def test_a_read_only_state_folder_costs_only_the_parse(fresh, monkeypatch):
    fresh.parent.mkdir(parents=True)
    fresh.write_text("not a folder")                          # mkdir fails: OSError, swallowed
    parses = _counting(monkeypatch)
    for _ in range(2):
        assert loader._parse("x.yaml", b"a: 1\n", Collector()) == {"a": 1}
    assert len(parses) == 2
