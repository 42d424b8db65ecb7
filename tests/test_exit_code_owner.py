"""Exit codes belong to the CLI: results carry an ``Outcome``, exceptions carry a class, and only
``club3090/cli/`` turns either into a process status (``cli/exit_codes.py``, ``cli.ERRORS``).

Checked on the syntax tree of every module outside ``cli/``:
- nothing imports ``club3090.cli.exit_codes`` (at the top, inside a function, or for typing);
- nothing defines or reads a field, property, variable or JSON key named ``exit_code``;
- the exception tree (``errors.py``) holds no integers at all.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "club3090"
TABLE = "club3090.cli.exit_codes"
FIELD = "exit_code"


def _imports_table(node: ast.AST) -> bool:
    if isinstance(node, ast.Import):
        return any(a.name == TABLE or a.name.startswith(TABLE + ".") for a in node.names)
    if isinstance(node, ast.ImportFrom):
        module = node.module or ""
        return module == TABLE or (module == "club3090.cli" and any(a.name == "exit_codes" for a in node.names))
    return False


def _holds_field(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant) and node.value == FIELD:
        return True                                          # a JSON key
    if isinstance(node, ast.Attribute) and node.attr == FIELD:
        return True
    if isinstance(node, ast.Name) and node.id == FIELD:
        return True
    return isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == FIELD


def violations(root: Path = PACKAGE) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if rel.parts[0] == "cli":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if _imports_table(node):
                found.append(f"{rel}:{node.lineno}: imports {TABLE}")
            elif _holds_field(node):
                found.append(f"{rel}:{getattr(node, 'lineno', 0)}: holds {FIELD!r}")
            elif rel.as_posix() == "errors.py" and isinstance(node, ast.Constant) and type(node.value) is int:
                found.append(f"{rel}:{node.lineno}: the exception tree holds the number {node.value}")
    return found


def test_only_the_cli_holds_exit_codes() -> None:
    assert violations() == []


@pytest.mark.parametrize(("where", "statement"), [
    ("validate/x.py", "from club3090.cli.exit_codes import exit_code\n"),
    ("pipeline/x.py", "def f():\n    from club3090.cli import exit_codes\n"),
    ("pipeline/x.py", "class R:\n    exit_code: int = 0\n"),
    ("validate/x.py", "def to_json(self):\n    return {'exit_code': 1}\n"),
    ("errors.py", "class UsageError(Exception):\n    code = 64\n"),
])
def test_the_check_catches_an_exit_number_below_the_cli(tmp_path: Path, where: str, statement: str) -> None:
    (tmp_path / where).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / where).write_text(statement)
    (tmp_path / "cli").mkdir()
    (tmp_path / "cli" / "ok.py").write_text("from club3090.cli.exit_codes import exit_code\nexit_code = 1\n")
    assert len(set(violations(tmp_path))) == 1
