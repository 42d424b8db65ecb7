"""The launcher seam, enforced: a launcher is one module plus one registry line.

No module outside ``edges/launchers/`` compares a value with a launcher's name (``== "docker"``,
``in ("ray", "k8s")``); they ask the registry (``launchers.get(name).multi_node``, ``.starts``).
vLLM's own executor backend is also called "ray": a comparison whose other side is that backend
is vLLM's vocabulary, not a launcher's, and is not counted.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from club3090.edges import launchers
from tests import name_checks as checks

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "club3090"
OWNERS = PACKAGE / "edges" / "launchers"
NOT_LAUNCHERS = ("backend",)      # distributed_executor_backend == "ray" is vLLM's flag value


def string_comparisons(root: Path = PACKAGE, names: tuple[str, ...] = tuple(launchers.REGISTRY)) -> list[str]:
    return checks.name_comparisons(root, names, owned=lambda rel: rel.startswith("edges/launchers/"),
                                   beside=NOT_LAUNCHERS)


def test_no_launcher_name_is_compared_outside_its_module() -> None:
    assert string_comparisons() == []


@pytest.mark.parametrize("statement", [
    "def f(req):\n    return req.launcher == 'docker'\n",
    "def f(state):\n    return state.get('launcher') in ('ray', 'k8s')\n",
    "def f(x):\n    if 'native' != x:\n        return 1\n",
])
def test_the_check_catches_a_name_comparison(tmp_path: Path, statement: str) -> None:
    (tmp_path / "pipeline").mkdir()
    (tmp_path / "pipeline" / "bad.py").write_text(statement)
    assert len(string_comparisons(tmp_path)) == 1


def test_the_check_leaves_vllm_s_backend_alone(tmp_path: Path) -> None:
    (tmp_path / "fit").mkdir()
    (tmp_path / "fit" / "ok.py").write_text("def f(shape):\n    return shape.distributed_executor_backend == 'ray'\n")
    assert string_comparisons(tmp_path) == []


def test_every_entry_is_its_own_module_with_its_name() -> None:
    import importlib

    for name, entry in launchers.REGISTRY.items():
        module = importlib.import_module(f"club3090.edges.launchers.{name}")
        assert module.NAME == name == entry.name and module.LAUNCHER is entry
        assert (OWNERS / f"{name}.py").is_file()
    assert launchers.names(multi_node=True) == ("ray", "k8s")
    assert launchers.names(multi_node=False) == ("docker", "native")
    assert all(launchers.get(n).starts for n in launchers.names(multi_node=False))


def test_the_cli_offers_the_registry() -> None:
    from club3090 import cli

    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    up = sub.choices["up"]
    swap = sub.choices["swap"]
    choice = {p: next(a for a in sp._actions if "--launcher" in a.option_strings).choices
              for p, sp in (("up", up), ("swap", swap))}
    assert tuple(choice["up"]) == launchers.names()
    assert tuple(choice["swap"]) == launchers.names(multi_node=False)


def test_an_unknown_launcher_is_a_usage_error() -> None:
    from club3090.errors import UsageError

    with pytest.raises(UsageError, match="--launcher must be one of docker, native, ray, k8s"):
        launchers.get("podman")


def test_one_subprocess_runner_serves_the_launchers_and_the_boot():
    """No shell, no stdin (a tool that reads it sees end of file at once), rc 124 on a timeout with
    what was printed so far, rc 127 for a missing executable; the launchers use this same runner."""
    import sys

    from club3090.edges import boot
    from club3090.edges.launchers import base

    run = base.run_process
    assert run is boot.run_tool       # [E]'s default, boot.subprocess_runner, is the same function outside the tests
    read = run([sys.executable, "-c", "import sys; print(repr(sys.stdin.read()))"], 30)
    assert read.returncode == 0 and read.stdout.strip() == "''"
    slow = run([sys.executable, "-u", "-c", "import time; print('started', flush=True); time.sleep(30)"], 2)
    assert slow.returncode == 124 and "started" in slow.stdout and "timed out" in slow.stderr
    assert run(["/nonexistent/club3090-tool"], 5).returncode == 127
