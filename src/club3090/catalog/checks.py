"""The generic field-spec machinery of the catalog schema: value checks and their labels.

Owns ``Bad`` (a failed check), the value checks (``t_str``, ``t_id``, ...) and combinators
(``nullable``, ``enum``, ``list_of``, ``map_of``), the label each check renders as in
``docs/CATALOG.md``, and ``Field`` / ``Nested`` / ``Spec`` with their constructors ``req``,
``opt`` and ``evidence``. The per-file record specs built from them are ``catalog.schema``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any, TypeVar

_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+/-]*$")
_VERSION_RE = re.compile(r"^\d+\.\d+\.\d+$")


class Bad(Exception):
    """A value failed its check; the message says what was expected."""


Check = Callable[[Any], Any]
_LABELS: dict[Check, str] = {}


def label(check: Check) -> str:
    """The human-readable type of a check, for the generated documentation."""
    return _LABELS.get(check, getattr(check, "__name__", "value"))


_C = TypeVar("_C", bound=Check)


def _labelled(text: str) -> Callable[[_C], _C]:
    def wrap(check: _C) -> _C:
        _LABELS[check] = text
        return check
    return wrap


def describe(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# ----------------------------------------------------------------------------- value checks

def _check(text: str, passes: Callable[[Any], bool], expected: str) -> Check:
    """A labelled check that returns the value when ``passes`` holds, else raises ``Bad``."""
    @_labelled(text)
    def check(value: Any) -> Any:
        if not passes(value):
            raise Bad(f"expected {expected}, got {describe(value)}")
        return value
    return check


t_str = _check("string", lambda v: isinstance(v, str) and bool(v.strip()), "a non-empty string")
t_text = _check("text (may be empty)", lambda v: isinstance(v, str), "a string")
t_id = _check("id (letters, digits, `. _ + / -`)", lambda v: isinstance(v, str) and bool(_ID_RE.match(v)),
              "an identifier (letters, digits, . _ + / -)")
t_bool = _check("boolean", lambda v: isinstance(v, bool), "true or false")
t_int = _check("integer", lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer")


def _int_from(low: int) -> Check:
    @_labelled(f"integer >= {low}")
    def check(value: Any) -> int:
        number: int = t_int(value)
        if number < low:
            raise Bad(f"expected an integer >= {low}, got {number}")
        return number
    return check


t_pos_int = _int_from(1)
t_nonneg_int = _int_from(0)


def _hex(n: int) -> Check:
    pattern = re.compile(rf"^[0-9a-f]{{{n}}}$")
    return _check(f"{n} lower-case hex digits", lambda v: isinstance(v, str) and bool(pattern.match(v)),
                  f"{n} lower-case hex digits")


t_sha256 = _hex(64)
t_commit = _hex(40)


@_labelled("hex commit SHA (7-40 digits)")
def t_commit_prefix(value: Any) -> str:
    if not isinstance(value, str) or not 7 <= len(value) <= 40 or any(c not in "0123456789abcdef" for c in value):
        raise Bad(f"expected a lowercase hex commit SHA of 7 to 40 digits, got {describe(value)}")
    return value


@_labelled("number in (0, 1]")
def t_fraction(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise Bad(f"expected a number in (0, 1], got {describe(value)}")
    return float(value)


@_labelled("compute capability (`'8.6'`)")
def t_sm(value: Any) -> Decimal:
    """Compute capability written "8.6" (numbers are accepted too); ``gpus.parse_sm`` owns the
    rule, so 8.65 is rejected, never rounded."""
    from club3090.rig.gpus import parse_sm

    try:
        return parse_sm(value)
    except ValueError:
        raise Bad(f"expected a compute capability such as '8.6', got {describe(value)}") from None


@_labelled("positive decimal number")
def t_decimal(value: Any) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise Bad(f"expected a decimal number, got {describe(value)}")
    try:
        out = Decimal(str(value))
    except InvalidOperation:
        raise Bad(f"expected a decimal number, got {describe(value)}") from None
    if not out.is_finite() or out <= 0:
        raise Bad(f"expected a positive decimal number, got {describe(value)}")
    return out


@_labelled("mapping (string keys)")
def t_mapping(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise Bad(f"expected a mapping with string keys, got {describe(value)}")
    return value


@_labelled("vLLM release version (`'0.22.0'`)")
def t_version(value: Any) -> str:
    # every vLLM release so far is 0.x: a patch-set pin such as Genesis v7.72.2 is not a vLLM version
    if not isinstance(value, str) or not _VERSION_RE.match(value) or not value.startswith("0."):
        raise Bad(f"expected a vLLM release version such as '0.22.0' (a patch-set pin is not one), "
                  f"got {describe(value)}")
    return value


@_labelled("any YAML value")
def t_any(value: Any) -> Any:
    return value


def nullable(check: Check) -> Check:
    def run(value: Any) -> Any:
        return None if value is None else check(value)
    _LABELS[run] = f"{label(check)} or null"
    return run


def enum(*allowed: str) -> Check:
    def run(value: Any) -> str:
        if value not in allowed:
            raise Bad(f"unknown value {describe(value)}; allowed: {', '.join(allowed)}")
        return str(value)
    _LABELS[run] = "one of " + ", ".join(f"`{a}`" for a in allowed)
    return run


def list_of(check: Check, unique: bool = False) -> Check:
    def run(value: Any) -> tuple[Any, ...]:
        if not isinstance(value, list):
            raise Bad(f"expected a list, got {describe(value)}")
        out = []
        for i, item in enumerate(value):
            try:
                out.append(check(item))
            except Bad as exc:
                raise Bad(f"item {i}: {exc}") from None
        if unique and len(set(out)) != len(out):
            raise Bad("expected unique items")
        return tuple(out)
    _LABELS[run] = f"list of {label(check)}" + (", unique" if unique else "")
    return run


def map_of(check: Check) -> Check:
    def run(value: Any) -> dict[str, Any]:
        value = t_mapping(value)
        out = {}
        for key, item in value.items():
            try:
                out[key] = check(item)
            except Bad as exc:
                raise Bad(f"[{key!r}]: {exc}") from None
        return out
    _LABELS[run] = f"mapping of string to {label(check)}"
    return run


# ----------------------------------------------------------------------------- field specs

@dataclass(frozen=True, slots=True)
class Field:
    check: Check
    required: bool
    default: Any
    doc: str
    documentary: bool = False         # evidence for reviewers; no code decides on it


@dataclass(frozen=True, slots=True)
class Nested:
    """A field holding records of its own: ``list`` of records, ``mapping`` id -> record, or
    one ``record`` (``nullable``: null allowed, but the key must be present)."""

    spec: Mapping[str, Field]
    kind: str
    required: bool
    doc: str
    nullable: bool = False
    nested: Mapping[str, Nested] = field(default_factory=dict)


Spec = Mapping[str, Field]


def req(check: Check, doc: str) -> Field:
    return Field(check, True, None, doc)


def opt(check: Check, doc: str, default: Any = None) -> Field:
    return Field(check, False, default, doc)


def evidence(check: Check, doc: str, default: Any = None) -> Field:
    return Field(check, False, default, doc, documentary=True)
