"""Settings: one module reads the environment, and one rule names the user's state folder."""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

import pytest

from club3090.cli.commands.pull import captures_root
from club3090.reports.overlay import overlay_root
from club3090.settings import Settings, captures_dir, no_color, state_dir

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "club3090"
# modules that read the environment for something other than a setting
ENV_READERS = {
    "settings.py": "the settings",
    "edges/launchers/process.py": "forwards the environment (secrets removed) to the server it starts",
    "cli/commands/_server.py": "the OpenAI client's URL, key and model (a later change moves them here)",
}


@pytest.mark.parametrize(("env", "expected"), [
    ({"CLUB3090_STATE_DIR": "/s", "XDG_STATE_HOME": "/x"}, Path("/s")),
    ({"XDG_STATE_HOME": "/x"}, Path("/x/club3090")),
    ({}, Path("~/.local/state/club3090").expanduser()),
    ({"CLUB3090_STATE_DIR": "", "XDG_STATE_HOME": ""}, Path("~/.local/state/club3090").expanduser()),
])
def test_one_state_folder_for_the_overlay_and_the_captures(env: dict[str, str], expected: Path) -> None:
    assert state_dir(env) == overlay_root(env) == expected
    assert captures_dir(env=env) == expected / "pull-captures"


def test_captures_take_the_flag_then_the_variable_relative_to_the_working_folder(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    env = {"CLUB3090_CAPTURES": "caps", "CLUB3090_STATE_DIR": "/s"}
    assert captures_dir("flag", env) == tmp_path / "flag"
    assert captures_dir(None, env) == tmp_path / "caps"
    monkeypatch.setenv("CLUB3090_CAPTURES", "")
    monkeypatch.setenv("CLUB3090_STATE_DIR", str(tmp_path / "state"))
    assert captures_root(argparse.Namespace(captures_dir=None)) == tmp_path / "state" / "pull-captures"
    assert captures_root(argparse.Namespace(captures_dir="x")) == tmp_path / "x"


def test_no_color_is_any_non_empty_value() -> None:
    assert no_color({"NO_COLOR": "1"}) and no_color({"NO_COLOR": "0"})
    assert not no_color({"NO_COLOR": ""}) and not no_color({})


def _reads_environment(path: Path) -> list[int]:
    def reads(node: ast.AST) -> bool:
        if isinstance(node, ast.Attribute):
            return node.attr in ("environ", "getenv", "environb")
        return isinstance(node, ast.ImportFrom) and node.module == "os" and \
            any(a.name in ("environ", "getenv") for a in node.names)

    return [node.lineno for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))) if reads(node)]


def test_only_the_settings_module_reads_the_environment() -> None:
    found = {path.relative_to(PACKAGE).as_posix(): lines for path in sorted(PACKAGE.rglob("*.py"))
             if (lines := _reads_environment(path))}
    assert sorted(set(found) - set(ENV_READERS)) == []
    assert sorted(set(ENV_READERS) - set(found)) == []   # an entry no longer needed leaves the list


def test_hf_hub_cache_moves_the_cache_as_huggingface_hub_does(tmp_path):
    env = {"HF_HOME": str(tmp_path / "home"), "HF_HUB_CACHE": str(tmp_path / "elsewhere")}
    assert Settings.from_env(env).hub_cache == tmp_path / "elsewhere"
    assert Settings.from_env({"HF_HOME": str(tmp_path / "home")}).hub_cache == tmp_path / "home" / "hub"
    legacy = Settings.from_env({"HF_HOME": str(tmp_path / "home"), "HUGGINGFACE_HUB_CACHE": str(tmp_path / "old")})
    assert legacy.hub_cache == tmp_path / "old"
    # an explicit --hf-home is the later word: its own hub/ folder
    assert Settings.from_env(env, hf_home_flag=tmp_path / "flag").hub_cache == tmp_path / "flag" / "hub"
