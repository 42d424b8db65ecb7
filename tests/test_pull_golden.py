"""Golden cases g0-g15 (tests/cases/pull_golden.yaml), through the library and through the CLI.

The same table drives both: ``evaluate`` with injected seams (free disk space, compose
dry-run, no GPU detection), and ``club3090.cli.main(["pull", ..., "--json"])`` black-box with
the same seams patched at the module edge. Derived repos come from the loopback fake Hub.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from club3090 import cli
from club3090.catalog import load_catalog
from club3090.cli.commands import pull as pull_cmd
from club3090.compose.generate import ComposeOutcome
from club3090.edges.gpu_probe import DetectedGpus
from club3090.pipeline import pull as pull_mod
from club3090.pipeline.pull import PullRequest, evaluate
from club3090.settings import Settings
from tests.fakehub import FIXTURES, FakeHub, safetensors_file

GIB = 2**30
CASES = yaml.safe_load((Path(__file__).parent / "cases" / "pull_golden.yaml").read_text(encoding="utf-8"))["cases"]
RUNS = [pytest.param(case, i, id=f"{case['id']}-{i}") for case in CASES for i in range(len(case["runs"]))]
DEFAULT_FREE_GIB = 100_000


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


def _refuser(token: str):
    def dry_run(profile_key: str, catalog: Any, **_: Any) -> ComposeOutcome:
        return ComposeOutcome(ok=False, exit_code=2, profile=profile_key, refusal=token,
                              detail="injected drift-guard failure")
    return dry_run


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
    catalog = load_catalog()
    settings = hub.settings() if hub is not None else Settings.from_env()
    gpu_set = None
    if args.gpus:
        from club3090.rig.gpus import parse_gpus
        gpu_set = parse_gpus(args.gpus, catalog)
    request = PullRequest(source=args.source, profile_like=args.profile_like, dry_run=args.dry_run, yes=args.yes,
                          force_download=args.force_download, experimental_arch=args.experimental_arch,
                          trust_remote_code=args.trust_remote_code, out=args.out, force=args.force,
                          hardware_sm=args.hardware, gpus=args.gpus)
    free = run.get("free_gib", DEFAULT_FREE_GIB) * GIB
    result = evaluate(request, catalog=catalog, settings=settings, gpu_set=gpu_set,
                      detect=lambda: DetectedGpus((), "none"), free_bytes=lambda _p: free,
                      dry_run_compose=_refuser(run["refuse"]) if run.get("refuse") else None,
                      captures_root=tmp_path / ".pull-captures")
    _check(json.loads(json.dumps(result.to_json(), default=str)), run["expect"], out, tmp_path)


@pytest.mark.parametrize("case,index", RUNS)
def test_golden_cli(case: dict[str, Any], index: int, tmp_path: Path, hub_for, monkeypatch: pytest.MonkeyPatch,
                    capsys: pytest.CaptureFixture[str]) -> None:
    run = case["runs"][index]
    hub = hub_for(case)
    if hub is not None:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.chdir(tmp_path)
    free = run.get("free_gib", DEFAULT_FREE_GIB) * GIB
    monkeypatch.setattr(pull_mod, "_default_free_bytes", lambda _p: free)
    # the gate's goldens: [E] (download, boot, smoke) is covered by tests/test_pull_e.py
    monkeypatch.setattr(pull_cmd, "_e_stages", lambda _args: None)
    if run.get("refuse"):
        monkeypatch.setattr(pull_mod, "_default_dry_run", _refuser(run["refuse"]))
    out = tmp_path / "compose.yml"
    code = cli.main(["pull", *_argv(run, out), "--json"])
    got = json.loads(capsys.readouterr().out)
    assert code == got["exit_code"]
    _check(got, run["expect"], out, tmp_path)
    if got.get("bundle"):
        assert Path(got["bundle"]).is_relative_to(tmp_path / ".pull-captures")
        assert (tmp_path / ".pull-captures" / ".last").exists()
