"""BUG-1 (hardening round 3): the vision tower's sizes are under the same "< 2^31" rule as the
text model's. A tower of 10^30 (which hung ``kv-calc``) or 1e308 (exit 70 in ``kv-calc``,
``pull``, ``fits``) is a clean refusal: the model is unpriceable, the problem named."""

from __future__ import annotations

import json
import time

import pytest

from club3090 import cli
from club3090.edges import hub as H
from club3090.model.architecture import parse_config
from club3090.model.vision import vision_problems, vision_spec
from tests.fakehub import FakeFile, FakeHub
from tests.fixtures_path import FIXTURES

REPO = "acme/vl"
BASE = json.loads((FIXTURES / "hub" / "Qwen--Qwen2.5-VL-7B-Instruct" / "config.json").read_text())
HUGE = [10**30, 1e30, 1e308, float("inf"), -1, 2**31]
FIELDS = ["depth", "hidden_size", "intermediate_size", "spatial_merge_size", "patch_size", "image_size",
          "pooling_kernel_size"]


def _config(key: str, value: object) -> dict:  # type: ignore[type-arg]
    config = json.loads(json.dumps(BASE))
    config["vision_config"][key] = value
    return config


@pytest.mark.parametrize("key", FIELDS)
@pytest.mark.parametrize("value", HUGE)
def test_a_huge_vision_size_makes_the_model_unpriceable(key: str, value: object) -> None:
    config = _config(key, value)
    assert vision_problems(config) and vision_spec(config) is None
    arch = parse_config(config)
    assert arch.unpriceable_reason and f"vision_config.{key}" in arch.unpriceable_reason


def test_a_non_finite_mlp_ratio_is_refused() -> None:
    config = _config("mlp_ratio", 1e308)
    del config["vision_config"]["intermediate_size"]
    assert vision_spec(config) is None and "mlp_ratio" in (parse_config(config).unpriceable_reason or "")


def test_the_real_tower_still_prices() -> None:
    assert not vision_problems(BASE) and vision_spec(BASE) is not None


@pytest.mark.parametrize("value", ["1e30", "1e308"])
@pytest.mark.parametrize("command", [["kv-calc", REPO, "--gpus", "1x3090"],
                                     ["fits", REPO, "--gpus", "1x3090"],
                                     ["pull", REPO, "--profile-like", "vllm/minimal", "--gpus", "1x3090", "--dry-run"]])
def test_commands_refuse_cleanly(fake_hub: FakeHub, monkeypatch: pytest.MonkeyPatch,
                                 capsys: pytest.CaptureFixture[str], command: list[str], value: str) -> None:
    monkeypatch.setenv("HF_ENDPOINT", fake_hub.url)
    monkeypatch.setattr(H, "DEFAULT_BACKOFF_S", 0.0)
    repo = fake_hub.add_fixture("Qwen--Qwen2.5-VL-7B-Instruct", repo_id=REPO)
    raw = json.dumps(_config("hidden_size", json.loads(value))).encode()
    repo.files["config.json"] = FakeFile(name="config.json", prefix=raw, size=len(raw))
    started = time.monotonic()
    code = cli.main([*command, "--json"])
    out, err = capsys.readouterr()
    assert time.monotonic() - started < 60
    assert code not in (0, 70) and code < 64, err
    assert "Traceback" not in err and "vision_config.hidden_size" in out + err
