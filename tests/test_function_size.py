"""Small functions: none under src/ is longer than 80 lines, except tables of data.

A function's length runs from its ``def`` line (decorators excluded) to its last line, its
docstring included. ``ALLOWED`` names the few functions another change is splitting; the lead
removes each entry once that change is merged, and an entry that is no longer needed fails.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "club3090"
LIMIT = 80
# (path under src/club3090, function name) -> why it may be longer for now
ALLOWED: dict[tuple[str, str], str] = {}


def _is_data_table(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A function whose body is one ``return`` of a literal (a table of data)."""
    body = [n for n in node.body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
    return len(body) == 1 and isinstance(body[0], ast.Return) and \
        isinstance(body[0].value, (ast.Dict, ast.List, ast.Tuple, ast.Set))


def long_functions(root: Path = SRC, limit: int = LIMIT) -> dict[tuple[str, str], int]:
    found = {}
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not _is_data_table(node):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > limit:
                    found[(path.relative_to(root).as_posix(), node.name)] = length
    return found


def test_no_function_is_over_80_lines() -> None:
    over = long_functions()
    assert {k: v for k, v in over.items() if k not in ALLOWED} == {}


def test_every_allowed_long_function_is_still_long() -> None:
    assert sorted(set(ALLOWED) - set(long_functions())) == []


@pytest.mark.parametrize(("lines", "table", "caught"), [(LIMIT, False, False), (LIMIT + 1, False, True),
                                                        (LIMIT + 10, True, False)])
def test_the_check_counts_lines(tmp_path: Path, lines: int, table: bool, caught: bool) -> None:
    if table:
        body = "    return {\n" + "".join(f"        'k{i}': {i},\n" for i in range(lines - 3)) + "    }\n"
    else:
        body = "".join(f"    x{i} = {i}\n" for i in range(lines - 2)) + "    return None\n"
    (tmp_path / "m.py").write_text(f"def f():\n{body}")
    assert (("m.py", "f") in long_functions(tmp_path)) is caught
