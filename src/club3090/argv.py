"""The one reader and writer of flags in an argument vector (a compose ``command``, a serve line).

A flag is written ``--flag value`` or ``--flag=value`` (the ``=`` form only for long flags). A
flag may have several spellings (``names``: ``"--port"`` or ``("-c", "--ctx-size")``); the first
one is the spelling appended. Words that are not strings (a compose command may hold numbers)
are compared as they are. Pure: nothing is changed in place; each writer returns a new list.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["drop_flags", "flag_index", "flag_value", "set_flag"]

Names = str | Sequence[str]


def _spellings(names: Names) -> tuple[str, ...]:
    return (names,) if isinstance(names, str) else tuple(names)


def _inline(word: Any, names: tuple[str, ...]) -> str | None:
    """The spelling ``word`` starts as ``--flag=``, if any."""
    if not isinstance(word, str):
        return None
    return next((n for n in names if n.startswith("--") and word.startswith(n + "=")), None)


def flag_index(args: Sequence[Any], names: Names) -> int | None:
    """Where the flag first appears (``--flag`` or ``--flag=value``)."""
    spelled = _spellings(names)
    for i, word in enumerate(args):
        if word in spelled or _inline(word, spelled) is not None:
            return i
    return None


def flag_value(args: Sequence[Any], names: Names) -> str | None:
    """The value of the flag's first appearance; None when it is absent or ends the vector bare."""
    i = flag_index(args, names)
    if i is None:
        return None
    word = args[i]
    if _inline(word, _spellings(names)) is not None:
        return str(word).split("=", 1)[1]
    return str(args[i + 1]) if i + 1 < len(args) else None


def set_flag(args: Sequence[Any], names: Names, value: str, *, append: bool = True) -> list[Any]:
    """``value`` for every appearance of the flag, each kept where it stands (a bare flag at the end
    gets the value after it); absent, ``names[0] value`` is appended unless ``append`` is False."""
    spelled = _spellings(names)
    out = list(args)
    found = False
    i = 0
    while i < len(out):
        word = out[i]
        inline = _inline(word, spelled)
        if word in spelled:
            found = True
            if i + 1 < len(out):
                out[i + 1] = value
            else:
                out.append(value)
            i += 1
        elif inline is not None:
            found = True
            out[i] = f"{inline}={value}"
        i += 1
    if not found and append:
        out += [spelled[0], value]
    return out


def drop_flags(args: Sequence[Any], names: Names, *, takes_value: bool = True) -> list[Any]:
    """``args`` without the flag's appearances: ``--flag=value``, and ``--flag`` with the word after
    it when ``takes_value`` (a switch such as ``--trust-remote-code`` takes none)."""
    spelled = _spellings(names)
    out: list[Any] = []
    skip = False
    for word in args:
        if skip:
            skip = False
            continue
        if word in spelled:
            skip = takes_value
            continue
        if _inline(word, spelled) is None:
            out.append(word)
    return out
