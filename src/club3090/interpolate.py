"""Compose-style ``${VAR:-default}`` interpolation: the one owner of that rule.

Shared vocabulary at the package root: the catalog's shipped flags (fit) and the compose
renderers (compose) both resolve values with it. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from club3090.errors import InterpolationError

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def interpolate(text: str, env: Mapping[str, str] | None = None) -> str:
    """Resolve Compose interpolation the way ``docker compose`` does for ``env``.

    The one owner of ``${VAR:-default}`` resolution: ``compose`` and ``serving`` (a shipped
    flag's value, resolved with an empty environment) call it.

    Supports ``$$``, ``$NAME``, ``${NAME}``, ``${NAME:-d}``, ``${NAME-d}``, ``${NAME:+a}``,
    ``${NAME+a}``, ``${NAME:?e}`` / ``${NAME?e}`` (unset -> error), nested defaults. A ``$``
    followed by anything else (``"$@"`` in an entrypoint script) is kept, as Compose keeps it.
    """
    env = {} if env is None else env
    out: list[str] = []
    i = 0
    n = len(text)
    while i < n:
        ch = text[i]
        if ch != "$":
            out.append(ch)
            i += 1
            continue
        if text.startswith("$$", i):
            out.append("$")
            i += 2
            continue
        if text.startswith("${", i):
            end = _matching_brace(text, i)
            out.append(_resolve(text[i + 2:end], env))
            i = end + 1
            continue
        match = _NAME.match(text, i + 1)
        if match:
            out.append(env.get(match.group(0), ""))
            i = match.end()
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def _matching_brace(text: str, start: int) -> int:
    depth = 0
    i = start
    while i < len(text):
        if text.startswith("$$", i):
            i += 2
            continue
        if text.startswith("${", i):
            depth += 1
            i += 2
            continue
        if text[i] == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    raise InterpolationError(f"unterminated ${{...}} in {text!r}")


def _resolve(body: str, env: Mapping[str, str]) -> str:
    match = _NAME.match(body)
    if not match:
        raise InterpolationError(f"invalid variable name in ${{{body}}}")
    name = match.group(0)
    rest = body[match.end():]
    value = env.get(name)
    if rest == "":
        return value or ""
    for op in (":-", "-", ":+", "+", ":?", "?"):
        if rest.startswith(op):
            arg = rest[len(op):]
            unset = value is None or (op.startswith(":") and value == "")
            if op.endswith("-"):
                return interpolate(arg, env) if unset else value  # type: ignore[return-value]
            if op.endswith("+"):
                return "" if unset else interpolate(arg, env)
            if unset:
                raise InterpolationError(f"required variable {name} is not set ({arg})")
            return value  # type: ignore[return-value]
    raise InterpolationError(f"invalid interpolation ${{{body}}}")


def interpolate_tree(value: Any, env: Mapping[str, str] | None = None) -> Any:
    """``interpolate`` applied to every string (not to mapping keys) of a plain data tree."""
    if isinstance(value, str):
        return interpolate(value, env)
    if isinstance(value, Mapping):
        return {k: interpolate_tree(v, env) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [interpolate_tree(v, env) for v in value]
    return value
