"""The one AST check behind both seam tests (``test_engine_seam``, ``test_launcher_registry``): which
comparisons spell a registered name as a string (``x == "vllm"``, ``t in ("ray", "k8s")``).

A collection counts only when every element is a name (``argv[:2] == ["vllm", "serve"]`` is an
argv, not a dispatch); a comparison whose other side mentions a word of ``beside`` is another
vocabulary that happens to share the name (vLLM's ``distributed_executor_backend == "ray"``).
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Collection, Iterable
from pathlib import Path


def spelled(node: ast.AST, names: Collection[str]) -> set[str]:
    """The names an operand spells: a string constant, or a collection made only of them."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value} & set(names)
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and node.elts:
        values = [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        if len(values) == len(node.elts) and set(values) <= set(names):
            return set(values)
    return set()


def name_comparisons(root: Path, names: Collection[str], *, packages: Iterable[str] = (".",),
                     owned: Callable[[str], bool] = lambda rel: False, beside: tuple[str, ...] = ()) -> list[str]:
    """``rel:line: compares [...]`` for each comparison under ``root/packages`` that spells a name,
    outside the files ``owned`` accepts (relative paths, ``/``-separated)."""
    found = []
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if owned(rel):
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
                if not isinstance(node, ast.Compare):
                    continue
                sides = [node.left, *node.comparators]
                hits = set().union(*(spelled(s, names) for s in sides))
                context = " ".join(ast.unparse(s) for s in sides if not spelled(s, names))
                if hits and not any(word in context for word in beside):
                    found.append(f"{rel}:{node.lineno}: compares {sorted(hits)}")
    return found
