"""The README is the user's reference: every flag the parser accepts and every public token must be in it."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from club3090.cli import build_parser
from club3090.gate.swap_match import SwapToken
from club3090.outcome import NoticeCode, Reason

README = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
# argparse's own help flag, and aliases kept only for upstream command lines
UNDOCUMENTED_OK = {"-h", "--help"}


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    for action in parser._actions:  # argparse exposes subparsers only through this private list
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("no subcommands registered")


def _flags() -> list[tuple[str, str]]:
    out = []
    for name, sub in _subcommands().items():
        for action in sub._actions:
            if action.help == argparse.SUPPRESS:
                continue
            for flag in action.option_strings:
                if flag not in UNDOCUMENTED_OK:
                    out.append((name, flag))
    return out


@pytest.mark.parametrize("command, flag", _flags())
def test_every_flag_is_documented(command, flag):
    assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", README), f"{command} {flag}"


def test_every_subcommand_is_documented():
    for name in _subcommands():
        assert f"club3090 {name}" in README, name


@pytest.mark.parametrize("token", [r.value for r in Reason if r is not Reason.D_REFUSED])
def test_every_reason_token_is_documented(token):
    assert token in README


@pytest.mark.parametrize("token", ["pin-mismatch", "tp-or-kv", "trc", "foundational-drift", "degraded-drift",
                                   "scope", "proceed", "confirm→proceed", "hard-block", "override-accepted"])
def test_compose_refusals_and_terminals_are_documented(token):
    assert token in README


def test_every_exit_code_is_documented():
    import club3090.cli as cli

    codes = {int(c) for c in re.findall(r"\b(\d{1,3})\b", cli.__doc__.split("Exit codes:", 1)[1])}
    table = set(int(c) for c in re.findall(r"^\| (\d+) \|", README, flags=re.M))
    assert codes <= table, sorted(codes - table)


@pytest.mark.parametrize("code", [c.value for c in NoticeCode])
def test_every_notice_code_is_documented(code):
    assert re.search(rf"^\| `{re.escape(code)}` \|", README, flags=re.M), code


@pytest.mark.parametrize("token", [t.value for t in SwapToken])
def test_every_swap_token_is_documented(token):
    assert re.search(rf"^\| `{re.escape(token)}` \|", README, flags=re.M), token
