"""The one argv helper: read, set and drop a flag in an argument vector, one behaviour everywhere."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from club3090.argv import drop_flags, flag_index, flag_value, set_flag

SRC = Path(__file__).resolve().parents[1] / "src" / "club3090"
# modules that still carry their own flag helpers; the lead removes an entry once its change lands
OWN_HELPERS: dict[str, str] = {}      # module -> why it keeps its own flag helper (none does)


@pytest.mark.parametrize(("args", "names", "expected"), [
    (["m", "--port", "8000"], "--port", "8000"),
    (["m", "--port=8000"], "--port", "8000"),
    (["--port"], "--port", None),
    (["m"], "--port", None),
    (["-c", "4096"], ("-c", "--ctx-size"), "4096"),
    (["--ctx-size=4096"], ("-c", "--ctx-size"), "4096"),
    (["-c=4096"], ("-c", "--ctx-size"), None),               # the = form is for long flags only
    (["--port", "1", "--port", "2"], "--port", "1"),         # the first appearance
    (["--portal", "1"], "--port", None),
    (["--tp", 2], "--tp", "2"),                               # compose commands may hold numbers
])
def test_flag_value(args: list[object], names: str | tuple[str, ...], expected: str | None) -> None:
    assert flag_value(args, names) == expected


def test_flag_index_finds_either_form() -> None:
    assert flag_index(["a", "--x=1"], "--x") == 1
    assert flag_index(["a", "--x", "1"], "--x") == 1
    assert flag_index(["a"], "--x") is None


@pytest.mark.parametrize(("args", "append", "expected"), [
    (["m", "--port", "1"], True, ["m", "--port", "9"]),
    (["m", "--port=1"], True, ["m", "--port=9"]),
    (["m"], True, ["m", "--port", "9"]),
    (["m"], False, ["m"]),
    (["m", "--port"], True, ["m", "--port", "9"]),
    (["--port", "1", "x", "--port=2"], True, ["--port", "9", "x", "--port=9"]),   # every appearance
])
def test_set_flag(args: list[str], append: bool, expected: list[str]) -> None:
    before = list(args)
    assert set_flag(args, "--port", "9", append=append) == expected
    assert args == before                                     # a new list, the input untouched


@pytest.mark.parametrize(("args", "takes_value", "expected"), [
    (["m", "--revision", "abc", "--x"], True, ["m", "--x"]),
    (["m", "--revision=abc", "--x"], True, ["m", "--x"]),
    (["m", "--trust-remote-code", "--x"], False, ["m", "--x"]),
    (["m", "--trust-remote-code=true", "--x"], False, ["m", "--x"]),
    (["m", "--revision"], True, ["m"]),
])
def test_drop_flags(args: list[str], takes_value: bool, expected: list[str]) -> None:
    names = ("--revision",) if takes_value else "--trust-remote-code"
    assert drop_flags(args, names, takes_value=takes_value) == expected


def test_drop_flags_takes_several_flags() -> None:
    assert drop_flags(["m", "--host", "h", "--port=1", "--tp", "2"], ("--host", "--port")) == ["m", "--tp", "2"]


def test_no_other_module_defines_a_flag_helper() -> None:
    helper = {"flag_value", "set_flag", "drop_flag", "drop_flags", "flag_index", "_flag_value", "_set_flag",
              "_drop_flag", "_drop_flags", "_flag_index"}
    found = set()
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel == "argv.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if any(isinstance(n, ast.FunctionDef) and n.name in helper for n in ast.walk(tree)):
            found.add(rel)
    assert sorted(found - set(OWN_HELPERS)) == []
    assert sorted(set(OWN_HELPERS) - found) == []
