"""The architecture, enforced: one declared order of layers, and a pure core that does no I/O.

``ORDER`` lists the layers from the bottom up (docs/DESIGN.md §1 "Layers"). A module may import
its own layer and any layer below it, never one above: every import counts, also one inside a
function or under ``TYPE_CHECKING``. The layers up to ``compose`` are the pure core: they also
never import a standard-library module that does I/O.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "club3090"

# (layer, the modules under club3090 it holds), bottom first. A module belongs to the layer of its
# longest listed prefix: ``catalog.model`` (the records) sits far below ``catalog`` (the loader).
ORDER: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("vocabulary", ("errors", "outcome", "units", "interpolate", "argv", "version")),
    ("model", ("model",)),
    ("catalog records", ("catalog.model",)),
    ("rig", ("rig",)),
    ("fit", ("fit",)),
    ("gate", ("gate",)),
    ("compose", ("compose",)),
    ("settings", ("settings",)),
    ("catalog", ("catalog",)),
    ("edges", ("edges",)),
    ("reports", ("reports",)),
    ("validate", ("validate",)),
    ("pipeline", ("pipeline", "engines")),          # an engine package orchestrates its stages like pipeline/
    # the composition roots: the CLI, the library facade, and the LiveProvider that wires edges,
    # reports and pipeline pieces into one Provider
    ("cli", ("cli", "__main__", "__init__", "edges.provider")),
)
PURE = ("vocabulary", "model", "catalog records", "rig", "fit", "gate", "compose")
IO_MODULES = {"os", "io", "subprocess", "socket", "shutil", "tempfile", "urllib", "http", "select",
              "signal", "threading", "multiprocessing", "ssl", "glob", "huggingface_hub", "pynvml",
              "requests", "httpx", "sqlite3", "importlib"}
# Upward imports still allowed, as (importing module, imported module); empty since the exit codes
# moved into cli/ (issue 23 item 3; tests/test_exit_code_owner.py keeps them there).
KNOWN_UPWARD: frozenset[tuple[str, str]] = frozenset()
_RANK = {prefix: (rank, name) for rank, (name, prefixes) in enumerate(ORDER) for prefix in prefixes}


def layer_of(module: str) -> tuple[int, str]:
    """The (rank, name) of the layer that holds ``club3090.<...>`` module ``module``."""
    parts = module.split(".")[1:] or ["__init__"]
    for cut in range(len(parts), 0, -1):
        hit = _RANK.get(".".join(parts[:cut]))
        if hit is not None:
            return hit
    raise AssertionError(f"{module} is in no layer of ORDER: place it")


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(["club3090", *parts])


def imports_of(path: Path, root: Path) -> list[tuple[int, str]]:
    """(line, absolute module name) for every import statement in ``path``; relative ones resolved,
    ``from package import x`` names submodule ``x`` when there is one, else the package."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = ["club3090", *path.parent.relative_to(root).parts]
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package[:len(package) - node.level + 1], *([base] if base else [])])
            if base.split(".")[0] == "club3090":
                out.extend((node.lineno, _submodule_or_package(base, alias.name, root)) for alias in node.names)
            else:
                out.append((node.lineno, base))
    return out


def _submodule_or_package(base: str, name: str, root: Path) -> str:
    folder = root.joinpath(*base.split(".")[1:])
    return f"{base}.{name}" if (folder / f"{name}.py").exists() or (folder / name).is_dir() else base


def violations(root: Path = PACKAGE, known: frozenset[tuple[str, str]] = frozenset()) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        rank, layer = layer_of(module_name(path, root))
        for line, name in imports_of(path, root):
            top = name.split(".")[0]
            if top == "club3090":
                their_rank, theirs = layer_of(name)
                if their_rank > rank and (rel, name) not in known:
                    found.append(f"{rel}:{line}: {layer} imports {name} ({theirs}, a higher layer)")
            elif layer in PURE and top in IO_MODULES:
                found.append(f"{rel}:{line}: the pure layer {layer} imports the I/O module {name}")
    return found


def test_every_import_follows_the_declared_order() -> None:
    assert violations(known=KNOWN_UPWARD) == []


def test_every_known_upward_import_still_exists() -> None:
    """An entry of KNOWN_UPWARD whose import is gone must leave the list (the order tightens)."""
    found = set()
    for rel, name in KNOWN_UPWARD:
        path = PACKAGE / rel
        if path.exists() and any(imported == name for _, imported in imports_of(path, PACKAGE)):
            found.add((rel, name))
    assert sorted(KNOWN_UPWARD - found) == []


def _tree(tmp_path: Path) -> Path:
    """An empty package with every layer of ORDER."""
    root = tmp_path / "club3090"
    for package in ("model", "rig", "fit", "gate", "compose", "catalog", "edges", "reports", "validate",
                    "pipeline", "cli"):
        (root / package).mkdir(parents=True)
        (root / package / "__init__.py").write_text("")
    for module in ("__init__", "errors", "outcome", "units", "interpolate", "argv", "version", "settings",
                   "catalog/model", "edges/provider"):
        (root / f"{module}.py").write_text("")
    return root


@pytest.mark.parametrize(("where", "statement"), [
    ("model/bad.py", "from club3090.fit.memory import FitResult\n"),
    ("model/bad.py", "def f():\n    from club3090.fit import memory\n"),
    ("model/bad.py", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from club3090.rig.gpus import GpuSet\n"),
    ("catalog/model.py", "from club3090.rig.gpus import GpuSet\n"),
    ("fit/bad.py", "from club3090 import compose\n"),
    ("fit/bad.py", "import club3090.gate.flags\n"),
    ("rig/bad.py", "from club3090.catalog import load_catalog\n"),
    ("outcome.py", "from club3090.model import spec\n"),
    ("edges/bad.py", "from club3090.pipeline import pull\n"),
    ("reports/bad.py", "from club3090.cli.exit_codes import exit_code\n"),
    ("pipeline/bad.py", "from club3090 import LiveProvider\n"),
    ("compose/bad.py", "from club3090.edges.hub import HubClient\n"),
    ("fit/bad.py", "import subprocess\n"),
])
def test_the_check_catches_an_upward_import(tmp_path: Path, where: str, statement: str) -> None:
    root = _tree(tmp_path)
    assert violations(root) == []
    (root / where).write_text(statement)
    assert len(violations(root)) == 1, violations(root)


@pytest.mark.parametrize(("where", "statement"), [
    ("fit/ok.py", "from club3090.model.spec import ModelSpec\nfrom club3090.units import GiB\n"),
    ("catalog/loader.py", "from . import model as m\nfrom club3090.rig import gpus\n"),
    ("edges/provider.py", "from club3090.pipeline import pull\n"),
    ("cli/ok.py", "from club3090.edges.provider import LiveProvider\n"),
])
def test_the_check_allows_a_downward_import(tmp_path: Path, where: str, statement: str) -> None:
    root = _tree(tmp_path)
    (root / where).write_text(statement)
    assert violations(root) == []
