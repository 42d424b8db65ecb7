"""A mixed-generation ``--gpus`` rig (3090 + 4090): ``requires_homogeneous_arch`` is enforced by [C0],
every other profile only carries the ``mixed-gpu-arch`` notice (docs/HARDWARE.md, issue 28)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from club3090 import cli
from club3090.catalog import load_catalog
from club3090.rig.gpus import parse_gpus
from club3090.rig.hardware import mixed_generations, resolve_hardware
from tests.providers import offline_here, plenty_of_disk

CURATED = "Lorbus/Qwen3.6-27B-int4-AutoRound"
MIXED = "1x3090,1x4090"


@pytest.fixture(autouse=True)
def _offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    offline_here(tmp_path, monkeypatch)


def _pull(capsys, profile: str, gpus: str) -> tuple[int, dict]:
    code = cli.main(["pull", CURATED, "--profile-like", profile, "--gpus", gpus, "--json"], provider=plenty_of_disk)
    return code, json.loads(capsys.readouterr().out)


def _homogeneous_profile() -> str:
    cat = load_catalog()
    keys = sorted(k for k, p in cat.profiles.items() if p.requires_homogeneous_arch and p.model == "qwen3.6-27b")
    assert keys, "the shipped catalog has a qwen3.6-27b profile marked requires_homogeneous_arch"
    return keys[0]


def test_mixed_generations_names_each_generation_once():
    cat = load_catalog()
    hw = resolve_hardware(tp=2, gpu_set=parse_gpus(MIXED, cat))
    assert mixed_generations(hw.names, hw.sms) == "rtx-3090 (SM 8.6), rtx-4090 (SM 8.9)"
    same = resolve_hardware(tp=2, gpu_set=parse_gpus("2x3090", cat))
    assert mixed_generations(same.names, same.sms) is None and same.notices == ()
    # one GPU in use of a mixed rig is not a mixed rig for that profile
    assert resolve_hardware(tp=1, gpu_set=parse_gpus(MIXED, cat)).notices == ()


def test_homogeneous_profile_is_refused_on_a_mixed_rig(capsys):
    key = _homogeneous_profile()
    code, doc = _pull(capsys, key, MIXED)
    assert code == 2 and doc["outcome"] == "refused"
    assert doc["reason"] == "engine-support-unknown/runtime-incompatible"
    assert doc["c0"]["sub_reason"] == "runtime-incompatible"
    assert "requires_homogeneous_arch" in doc["detail"]
    assert "rtx-3090 (SM 8.6)" in doc["detail"] and "rtx-4090 (SM 8.9)" in doc["detail"]


def test_homogeneous_profile_passes_c0_on_one_generation(capsys):
    _code, doc = _pull(capsys, _homogeneous_profile(), "2x4090")
    assert "requires_homogeneous_arch" not in str(doc.get("detail"))
    assert doc["reason"] != "engine-support-unknown/runtime-incompatible"


def test_other_profile_only_gets_the_notice(capsys):
    code, doc = _pull(capsys, "vllm/dual", MIXED)
    assert code == 0 and doc["outcome"] == "ok"
    assert "mixed-gpu-arch" in doc["notice_codes"]
    notice = next(n for n in doc["notices"] if "mixed GPU generations" in n)
    assert "rtx-3090 (SM 8.6)" in notice and "rtx-4090 (SM 8.9)" in notice
    code, doc = _pull(capsys, "vllm/dual", "2x3090")
    assert code == 0 and "mixed-gpu-arch" not in doc["notice_codes"]
