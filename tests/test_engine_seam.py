"""The engine seam: one registry (``pipeline/engines.py``) and one package per engine.

No module outside an engine's package and the registry compares an engine's name as a string:
the layers that orchestrate and render (``pipeline/``, ``edges/``, ``cli/``, ``reports/``,
``validate/``) ask the registry; the pure core (``fit/``, ``gate/``, ``compose/``), which may not
import it, asks the catalog record (``Engine.is_vllm``, ``KvFormat.on_vllm``). The catalog
(``catalog/``) defines the engine types and is the one place that spells them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from club3090.catalog import load_catalog
from club3090.outcome import Reason, Stop, Stratum
from club3090.pipeline import engines
from tests import name_checks as checks

SRC = Path(__file__).resolve().parents[1] / "src" / "club3090"
# every layer that orchestrates, renders, prices, gates or writes; catalog/ defines the types
# (``catalog.model.ENGINE_TYPES``) and engines/<name>/ is each engine's own package
CHECKED = ("pipeline", "edges", "cli", "reports", "validate", "fit", "gate", "compose")
ALLOWED = ("pipeline/engines.py",)          # the registry
ENGINE_NAMES = frozenset({"vllm", "llama.cpp", "llamacpp", "llama-cpp", "ik_llama.cpp", "beellama", "sglang"})


def name_comparisons(root: Path = SRC) -> list[str]:
    return checks.name_comparisons(root, ENGINE_NAMES, packages=CHECKED, owned=lambda rel: rel in ALLOWED)


def test_no_engine_name_is_compared_outside_the_registry() -> None:
    assert name_comparisons() == []


@pytest.mark.parametrize("statement", [
    'def f(e):\n    return e.type == "llama.cpp"\n',
    'def f(s):\n    return s.get("engine") != "vllm"\n',
    'def f(t):\n    return t in ("vllm", "llama.cpp")\n',
])
def test_the_check_catches_a_name_comparison(tmp_path: Path, statement: str) -> None:
    for package in CHECKED:
        (tmp_path / package).mkdir()
    (tmp_path / "pipeline" / "dispatch.py").write_text(statement)
    assert len(name_comparisons(tmp_path)) == 1


@pytest.mark.parametrize("package", ["fit", "gate", "compose"])
def test_the_check_covers_the_pure_core(tmp_path: Path, package: str) -> None:
    for name in CHECKED:
        (tmp_path / name).mkdir()
    (tmp_path / package / "planted.py").write_text('def f(engine):\n    return engine.type != "vllm"\n')
    assert name_comparisons(tmp_path) == [f"{package}/planted.py:2: compares ['vllm']"]


def test_the_check_ignores_argv_words_and_values() -> None:
    tree = ast.parse('x = entry[:2] == ["vllm", "serve"]\nstate = {"engine": "llama.cpp"}\n')
    compares = [n for n in ast.walk(tree) if isinstance(n, ast.Compare)]
    assert all(not checks.spelled(x, ENGINE_NAMES) for n in compares for x in (n.left, *n.comparators))


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
