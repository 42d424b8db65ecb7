"""The engine seam: one registry (``pipeline/engines.py``) and one package per engine.

Dispatch happens in the layers that orchestrate and render (``pipeline/``, ``edges/``, ``cli/``,
``reports/``, ``validate/``): none of them compares an engine's name as a string; they ask the
registry. The pricing and launch cores (``fit/``, ``gate/``, ``compose/``) are the engines' own
stages and the catalog (``catalog/``) defines the engine types, so they are outside this check.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from club3090.catalog import load_catalog
from club3090.outcome import Reason, Stop, Stratum
from club3090.pipeline import engines

SRC = Path(__file__).resolve().parents[1] / "src" / "club3090"
DISPATCH = ("pipeline", "edges", "cli", "reports", "validate")
ALLOWED = ("pipeline/engines.py",)          # the registry; engines/** is outside DISPATCH
ENGINE_NAMES = frozenset({"vllm", "llama.cpp", "llamacpp", "llama-cpp", "ik_llama.cpp", "beellama", "sglang"})


def _names(node: ast.expr) -> set[str]:
    """The engine names a comparison operand spells: a string, or a collection made only of them."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value} & ENGINE_NAMES
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and node.elts:
        values = [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        if len(values) == len(node.elts) and set(values) <= ENGINE_NAMES:
            return set(values)
    return set()


def name_comparisons(root: Path = SRC) -> list[str]:
    found = []
    for package in DISPATCH:
        for path in sorted((root / package).rglob("*.py")):
            rel = str(path.relative_to(root))
            if rel in ALLOWED:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Compare):
                    spelled = set().union(*(_names(x) for x in (node.left, *node.comparators)))
                    if spelled:
                        found.append(f"{rel}:{node.lineno}: compares {sorted(spelled)}")
    return found


def test_no_engine_name_is_compared_outside_the_registry() -> None:
    assert name_comparisons() == []


@pytest.mark.parametrize("statement", [
    'def f(e):\n    return e.type == "llama.cpp"\n',
    'def f(s):\n    return s.get("engine") != "vllm"\n',
    'def f(t):\n    return t in ("vllm", "llama.cpp")\n',
])
def test_the_check_catches_a_name_comparison(tmp_path: Path, statement: str) -> None:
    for package in DISPATCH:
        (tmp_path / package).mkdir()
    (tmp_path / "pipeline" / "dispatch.py").write_text(statement)
    assert len(name_comparisons(tmp_path)) == 1


def test_the_check_ignores_argv_words_and_values() -> None:
    tree = ast.parse('x = entry[:2] == ["vllm", "serve"]\nstate = {"engine": "llama.cpp"}\n')
    compares = [n for n in ast.walk(tree) if isinstance(n, ast.Compare)]
    assert all(not _names(x) for n in compares for x in (n.left, *n.comparators))


def test_every_catalog_engine_type_is_registered_and_every_engine_is_a_package() -> None:
    catalog = load_catalog()
    assert {e.type for e in catalog.engines.values()} <= {e.name for e in engines.ENGINES}
    for engine in engines.ENGINES:
        module = type(engine).__module__
        assert module.startswith("club3090.engines.") and module.count(".") == 2, module


def test_the_registry_routes_profiles_files_and_stops() -> None:
    catalog = load_catalog()
    by_engine = {engines.for_profile(catalog, key) for key in catalog.profiles}
    assert by_engine == set(engines.ENGINES)
    some_llama = next(k for k in catalog.profiles if engines.for_profile(catalog, k) is not engines.DEFAULT)
    assert engines.for_request(catalog, None, some_llama) is engines.for_profile(catalog, some_llama)
    assert engines.for_request(catalog, "org/some-repo") is engines.DEFAULT
    assert engines.before_gate(catalog, "vllm/minimal") is None
    gguf_only = Stop(Stratum.DERIVER, Reason.UNSUPPORTED_FORMAT, sub_reason="gguf-only")
    assert engines.for_stop(gguf_only) is engines.for_format("gguf") is not engines.DEFAULT
    assert engines.for_stop(Stop(Stratum.DERIVER, Reason.REPO_NOT_FOUND)) is None


def test_swap_asks_the_registry_before_pricing(capsys) -> None:
    from club3090.cli import main

    catalog = load_catalog()
    other = next(k for k in catalog.profiles if engines.for_profile(catalog, k) is not engines.DEFAULT)
    assert main(["swap", "someone/fine-tune", "--profile-like", other, "--gpus", "1x3090", "--dir", "run/"]) == 64
    assert "not a vLLM service" in capsys.readouterr().err
