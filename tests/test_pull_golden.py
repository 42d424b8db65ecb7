"""Golden cases g0-g15 (tests/cases/pull_golden.yaml), through the library and through the CLI.

The same table drives both: ``evaluate`` and ``club3090.cli.main(["pull", ..., "--json"])``
black-box, each with the same Provider (free disk space, no GPU detection, a failing drift guard
for ``refuse``; the CLI's Provider runs no [E], which tests/test_pull_e.py covers). Derived repos
come from the loopback fake Hub.

The cases run against a frozen copy of the seed-era catalog (``tests/fixtures/catalog_seed``, read by
the same loader), so syncing the shipped catalog with newer upstream data never moves them
(docs/DESIGN.md §16).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
import yaml

from club3090 import cli
from club3090.catalog import load_catalog
from club3090.catalog.model import Catalog
from club3090.cli.commands.pull import request_of
from club3090.cli.exit_codes import with_exit_code
from club3090.pipeline.pull import evaluate
from club3090.settings import Settings
from tests.fakehub import FIXTURES, FakeHub, safetensors_file
from tests.fixtures_path import fixture_path
from tests.providers import offline_rig

GIB = 2**30
CASES = yaml.safe_load((Path(__file__).parent / "cases" / "pull_golden.yaml").read_text(encoding="utf-8"))["cases"]
RUNS = [pytest.param(case, i, id=f"{case['id']}-{i}") for case in CASES for i in range(len(case["runs"]))]
DEFAULT_FREE_GIB = 100_000
SEED_CATALOG = fixture_path("catalog_seed")


def seed_catalog() -> Catalog:
    """The seed-era catalog the golden cases were written against (loaded once per process)."""
    global _SEED
    if _SEED is None:
        _SEED = load_catalog(SEED_CATALOG)
    return _SEED


_SEED: Catalog | None = None


def test_table_covers_every_golden_case() -> None:
    ids = [c["id"] for c in CASES]
    assert ids == ["g0", "g1", "g2", "g3", "g3b", "g4", "g5", "g6a", "g6b", "g7", "g8", "g9", "g10", "g11",
                   "g12", "g13", "g14", "g15"]
    assert all(c.get("why") for c in CASES)


# --------------------------------------------------------------------------------------------
# fake Hub repos for the derived cases
# --------------------------------------------------------------------------------------------

def _install(hub: FakeHub, spec: dict[str, Any]) -> None:
    folder = spec["fixture"]
    config = json.loads((FIXTURES / folder / "config.json").read_text(encoding="utf-8"))
    config.update(spec.get("config_patch", {}))
    if "layer_types" in spec:
        config["layer_types"] = [spec["layer_types"]] * int(config["num_hidden_layers"])
    kwargs: dict[str, Any] = {"repo_id": spec.get("repo_id"), "extra_files": {"config.json": json.dumps(config).encode()}}
    if "huge_gib" in spec:
        rows = spec["huge_gib"] * GIB // (2 * 1024)
        kwargs["tensors"] = {"model.embed_tokens.weight": ("BF16", [rows, 1024])}
    if spec.get("bin_only"):
        kwargs["drop_files"] = ("model.safetensors",)
        kwargs["extra_files"]["pytorch_model.bin"] = b"\0" * 64
    if spec.get("code_file"):
        kwargs["extra_files"][spec["code_file"]] = b"# custom modelling code shipped by the repo\n"
    if spec.get("second_set"):
        kwargs["extra_files"]["consolidated.safetensors"] = safetensors_file(
            "consolidated.safetensors", {"tok_embeddings.weight": ("BF16", [8, 8])})
    hub.add_fixture(folder, **kwargs)


@pytest.fixture
def hub_for(request: pytest.FixtureRequest):
    def setup(case: dict[str, Any]) -> FakeHub | None:
        if not case.get("hub"):
            return None
        hub: FakeHub = request.getfixturevalue("fake_hub")
        for spec in case["hub"]:
            _install(hub, spec)
        return hub
    return setup


# --------------------------------------------------------------------------------------------
# seams and assertions
# --------------------------------------------------------------------------------------------

def _argv(run: dict[str, Any], out: Path) -> list[str]:
    return [str(a).replace("{out}", str(out)) for a in run["argv"]]


def _drifting(catalog: Catalog) -> Catalog:
    """Every patch foundational, so a failing drift guard refuses the compose (foundational-drift)."""
    patches = {pid: replace(p, foundational=True) for pid, p in catalog.patches.items()}
    return replace(catalog, patches=MappingProxyType(patches))


def _provider(run: dict[str, Any], settings: Settings):
    """No GPUs, the run's free space, no [E]; ``refuse: foundational-drift`` fails every drift guard."""
    free = run.get("free_gib", DEFAULT_FREE_GIB) * GIB
    seed = seed_catalog()
    pieces: dict[str, Any] = {"derived": lambda **_: None, "load": lambda: seed}
    if run.get("refuse"):
        assert run["refuse"] == "foundational-drift", "only a drift-guard failure can be injected"
        drifting = _drifting(seed)
        pieces.update(guard=lambda _patch, _profile: False, load=lambda: drifting)
    return offline_rig(settings, free=free, **pieces)


def _check(got: dict[str, Any], expect: dict[str, Any], out: Path, tmp: Path) -> None:
    simple = {"exit": "exit_code", "ok": "ok", "path": "path", "stratum": "stratum", "reason": "reason",
              "confidence": "confidence", "raw_verdict": "raw_verdict", "terminal": "terminal",
              "emitted": "emitted", "c0": "c0"}
    for key, field in simple.items():
        if key in expect:
            assert got[field] == expect[key], f"{field}: {got[field]!r} != {expect[key]!r}\n{got}"
    if "stratum_not" in expect:
        assert got["stratum"] != expect["stratum_not"], got
    if "c0_state" in expect:
        assert got["c0"] is not None and got["c0"]["state"] == expect["c0_state"], got["c0"]
    if "c0_sub_reason" in expect:
        assert got["c0"]["sub_reason"] == expect["c0_sub_reason"], got["c0"]
    if "bypassable_by" in expect:
        assert got["c0"]["bypassable_by"] == sorted(expect["bypassable_by"]), got["c0"]
    if "out_written" in expect:
        assert out.exists() is expect["out_written"]
        assert (got["out"] is not None) is expect["out_written"]
    if "caveat" in expect:
        assert bool(got["caveat"]) is expect["caveat"], got["caveat"]
    if "fit" in expect:
        assert (got["fit"] is not None) is expect["fit"], got["fit"]
        if expect["fit"]:
            assert got["fit"]["per_gpu"]["budget_bytes"] > 0 and got["fit"]["kv_cache_tokens"] >= 0
    if "suggestions" in expect:
        assert bool(got["suggestions"]) is expect["suggestions"]
    if "bundle" in expect:
        assert (got["bundle"] is not None) is expect["bundle"], got["bundle"]
        if got["bundle"]:
            bundle = Path(got["bundle"])
            assert (bundle / "pt1-gate.json").exists() and (bundle / "manifest.json").exists()
            gate = json.loads((bundle / "pt1-gate.json").read_text(encoding="utf-8"))
            assert gate["abort_reason"] == got["reason"] and gate["is_gate_only"] is True
    assert len(got["notice_codes"]) == len(got["notices"]), got["notices"]
    if "notice_codes" in expect:
        assert got["notice_codes"] == expect["notice_codes"], got["notices"]
    if "bypassed" in expect:
        assert got["bypassed"] == expect["bypassed"], got["bypassed"]
    else:
        assert got["bypassed"] == [], got["bypassed"]
    if got["exit_code"] == 0:
        assert got["caveat"], "every download-eligible terminal and Path-B verdict carries the caveat"
    if got["stratum"] in (1, 2):
        assert got["raw_verdict"] is None and got["fit"] is None


# --------------------------------------------------------------------------------------------
# the two drivers
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("case,index", RUNS)
def test_golden_api(case: dict[str, Any], index: int, tmp_path: Path, hub_for) -> None:
    run = case["runs"][index]
    hub = hub_for(case)
    out = tmp_path / "compose.yml"
    argv = _argv(run, out)
    args = cli.build_parser().parse_args(["pull", *argv])
    settings = hub.settings() if hub is not None else Settings.from_env()
    provider = _provider(run, settings)
    result = evaluate(request_of(args, provider.catalog()), provider, captures_root=tmp_path / ".pull-captures")
    # results carry an outcome; the exit status is the CLI's mapping of it (club3090.cli.exit_codes)
    doc = with_exit_code(result.to_json(), result.outcome)
    _check(json.loads(json.dumps(doc, default=str)), run["expect"], out, tmp_path)


@pytest.mark.parametrize("case,index", RUNS)
def test_golden_cli(case: dict[str, Any], index: int, tmp_path: Path, hub_for, monkeypatch: pytest.MonkeyPatch,
                    capsys: pytest.CaptureFixture[str]) -> None:
    run = case["runs"][index]
    hub = hub_for(case)
    if hub is not None:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "compose.yml"
    code = cli.main(["pull", *_argv(run, out), "--json"], provider=lambda settings: _provider(run, settings))
    got = json.loads(capsys.readouterr().out)
    assert code == got["exit_code"]
    _check(got, run["expect"], out, tmp_path)
    if got.get("bundle"):
        assert Path(got["bundle"]).is_relative_to(tmp_path / ".pull-captures")
        assert (tmp_path / ".pull-captures" / ".last").exists()
