"""`--allow-xet` (issue 28 item 5): huggingface_hub's Xet transfer rung is off unless asked for, and
HF_HUB_DISABLE_XET set by the person keeps it off; pull and up carry the flag into Settings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from huggingface_hub import constants
from huggingface_hub.utils._runtime import is_xet_available

from club3090 import cli
from club3090.edges.hub import xet_rung
from tests.providers import offline_here, plenty_of_disk


@pytest.mark.parametrize("env_disabled, allow, inside", [(False, False, True), (False, True, False),
                                                          (True, True, True), (True, False, True)])
def test_the_rung_is_scoped_and_restored(monkeypatch, env_disabled, allow, inside):
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", env_disabled)
    with xet_rung(allow):
        assert constants.HF_HUB_DISABLE_XET is inside
        if inside:
            assert not is_xet_available()          # what hf_hub_download asks before using Xet
    assert constants.HF_HUB_DISABLE_XET is env_disabled


@pytest.mark.parametrize("flag, expected", [((), False), (("--allow-xet",), True)])
def test_pull_carries_the_flag_into_settings(tmp_path: Path, monkeypatch, flag, expected):
    offline_here(tmp_path, monkeypatch)
    seen: list[Any] = []

    def provider(settings: Any) -> Any:
        seen.append(settings)
        return plenty_of_disk(settings)
    cli.main(["pull", "Lorbus/Qwen3.6-27B-int4-AutoRound", "--gpus", "1x3090", "--json", *flag], provider=provider)
    assert [s.allow_xet for s in seen] == [expected]


def test_up_declares_the_flag(capsys):
    with pytest.raises(SystemExit):
        cli.main(["up", "--help"])
    assert "--allow-xet" in capsys.readouterr().out
