"""The architecture, enforced: the pure packages never reach an I/O edge.

``model``, ``rig``, ``fit``, ``gate`` and ``compose`` take values and return values. They may import
each other, the error tree, the version and the catalog's record types; never ``edges``, the
pipeline, reports, the CLI, validation clients, or a standard-library module that does I/O.
Every import counts, also one inside a function or under ``TYPE_CHECKING``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "club3090"
PURE = ("model", "rig", "fit", "gate", "compose")
ALLOWED_INTERNAL = (*(f"club3090.{p}" for p in PURE), "club3090.errors", "club3090.version", "club3090.catalog.model",
                    "club3090.outcome", "club3090.units", "club3090.interpolate")
IO_MODULES = {"os", "io", "subprocess", "socket", "shutil", "tempfile", "urllib", "http", "select",
              "signal", "threading", "multiprocessing", "ssl", "glob", "huggingface_hub", "pynvml",
              "requests", "httpx", "sqlite3", "importlib"}


def imports_of(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module name) for every import statement in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                raise AssertionError(f"{path}:{node.lineno}: relative import; use club3090.<package>")
            base = node.module or ""
            if base == "club3090":  # `from club3090 import x` names submodules or the public API
                out.extend((node.lineno, f"club3090.{alias.name}") for alias in node.names)
            else:
                out.append((node.lineno, base))
    return out


def violations(root: Path = PACKAGE) -> list[str]:
    found = []
    for package in PURE:
        for path in sorted((root / package).rglob("*.py")):
            for line, name in imports_of(path):
                top = name.split(".")[0]
                if top == "club3090":
                    if not name.startswith(ALLOWED_INTERNAL) or name == "club3090":
                        found.append(f"{path.relative_to(root)}:{line}: imports {name}")
                elif top in IO_MODULES:
                    found.append(f"{path.relative_to(root)}:{line}: imports the I/O module {name}")
    return found


def test_pure_packages_import_no_edge() -> None:
    assert violations() == []


@pytest.mark.parametrize("statement", [
    "from club3090.edges.hub import HubClient\n",
    "import subprocess\n",
    "def f():\n    from club3090.pipeline import pull\n",
    "from club3090 import cli\n",
])
def test_the_check_catches_an_edge_import(tmp_path: Path, statement: str) -> None:
    for package in PURE:
        (tmp_path / package).mkdir()
    (tmp_path / "fit" / "bad.py").write_text(statement)
    assert len(violations(tmp_path)) == 1
