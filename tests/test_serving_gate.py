"""Design rule 5 (issue 28 item 2): `up` ends SERVING only when verify --full is green, and with
--stress only when verify-stress is green too; anything less is said as what it is. Real parts: the
fake Hub, a tiny GGUF and llama.cpp's real server (tests/test_up_llamacpp.py's fixtures)."""

from __future__ import annotations

import json
from typing import Any

from club3090.cli.commands._up_render import serving_line
from tests import test_up as up_tests
from tests import test_up_llamacpp as llama
from tests.llama_server import free_port

env, gguf, stopper = llama.env, llama.gguf, up_tests.stopper


def _up(env: dict[str, Any], stopper: list, *flags: str) -> tuple[int, dict[str, Any]]:
    run = env["tmp"] / "run"
    stopper.append(run)
    code = llama.run_cli(env, "up", llama.REPO, "--gpus", "1x3090", "--dir", str(run), "--launcher", "native",
                         "--port", str(free_port()), *flags)
    return code, json.loads((run / "state.json").read_text(encoding="utf-8"))


def test_serving_only_after_verify_full(env, stopper, capsys):
    code, state = _up(env, stopper)
    out = capsys.readouterr().out
    assert code == 0, out
    assert out.rstrip().splitlines()[-1] == "[up] SERVING: verified (verify --full)"
    for check in ("thinking", "long-output", "streaming-tool-call"):     # the --full checks ran
        assert f" {check}" in out, check
    assert state["verified"] is True and state["verified_stress"] is None


def test_stress_that_fails_is_reported_as_serving_not_verified_under_stress(env, stopper, capsys):
    # the tiny model has random weights: it cannot find a needle, so verify-stress is red
    code, state = _up(env, stopper, "--stress")
    out = capsys.readouterr().out
    assert code != 0, out
    assert "[up] verify-stress " in out
    assert out.rstrip().splitlines()[-1] == "[up] serving, not verified under stress: verify-stress failed (see above)"
    assert "SERVING: verified" not in out
    assert state["verified"] is True and state["verified_stress"] is False


def test_the_wording_of_every_outcome():
    assert serving_line(True, False) == "[up] SERVING: verified (verify --full)"
    assert serving_line(True, True, True) == "[up] SERVING: verified (verify --full, verify-stress)"
    assert serving_line(True, True, False).startswith("[up] serving, not verified under stress")
    assert serving_line(False, True, True).startswith("[up] serving, not verified: verify --full failed")
