"""Reading the Loop's failure table (the shipped one, plus exact fingerprints from the user overlay).

The shipped table is ``club3090/reports/data/failure_fingerprints.yaml``; its schema is strict
(unknown keys, kinds, predicates or classes are refused with ``InputError`` naming the file), so
a maintainer's edit that would silently change classification fails loudly instead.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from club3090.edges.files import read_bytes_capped
from club3090.errors import InputError
from club3090.reports.classify import (
    FAILURE_CLASSES,
    MATCHER_KINDS,
    PREDICATES,
    FingerprintTable,
    Matcher,
)

SHIPPED = Path(__file__).resolve().parent / "data" / "failure_fingerprints.yaml"
TABLE_LIMIT = 1024 * 1024
_HEX12 = re.compile(r"[0-9a-f]{12}\Z")
_MATCHER_KEYS = frozenset({"id", "row", "kind", "class", "any", "all", "predicate", "capability", "value",
                           "require_boot_green", "origin", "note"})


def _load_yaml(path: Path) -> Any:
    raw = read_bytes_capped(path, limit=TABLE_LIMIT)
    try:
        return yaml.safe_load(raw.decode("utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise InputError(str(path), f"not valid YAML ({exc})") from exc


def parse_exact(data: object, where: str) -> dict[str, str]:
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise InputError(where, "exact_fingerprints must be a mapping of 12 hex -> class")
    out: dict[str, str] = {}
    for key, cls in data.items():
        if not isinstance(key, str) or not _HEX12.match(key):
            raise InputError(where, f"exact_fingerprints key {key!r} is not 12 lower-case hex digits")
        if cls not in FAILURE_CLASSES:
            raise InputError(where, f"exact_fingerprints[{key}] = {cls!r}; classes are {', '.join(FAILURE_CLASSES)}")
        out[key] = cls
    return out


def _strings(value: object, where: str, name: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise InputError(where, f"{name} must be a list of non-empty strings")
    return tuple(value)


def parse_matcher(entry: object, where: str) -> Matcher:
    if not isinstance(entry, Mapping):
        raise InputError(where, "each condition matcher is a mapping")
    unknown = sorted(set(map(str, entry)) - _MATCHER_KEYS)
    if unknown:
        raise InputError(where, f"matcher {entry.get('id')!r}: unknown keys {unknown}")
    mid, kind, cls = entry.get("id"), entry.get("kind"), entry.get("class")
    if not isinstance(mid, str) or not mid:
        raise InputError(where, "a matcher needs an id")
    if kind not in MATCHER_KINDS:
        raise InputError(where, f"matcher {mid}: kind {kind!r} not in {sorted(MATCHER_KINDS)}")
    if cls not in FAILURE_CLASSES:
        raise InputError(where, f"matcher {mid}: class {cls!r}; classes are {', '.join(FAILURE_CLASSES)}")
    predicate = entry.get("predicate")
    if kind == "structural" and predicate not in PREDICATES:
        raise InputError(where, f"matcher {mid}: predicate {predicate!r} not in {sorted(PREDICATES)}")
    any_ = _strings(entry.get("any"), where, f"matcher {mid}: any")
    all_ = _strings(entry.get("all"), where, f"matcher {mid}: all")
    if kind in ("log_substring", "gate_abort_reason") and not any_:
        raise InputError(where, f"matcher {mid}: kind {kind} needs a non-empty any list")
    if kind == "log_substring_all" and not all_:
        raise InputError(where, f"matcher {mid}: kind log_substring_all needs a non-empty all list")
    if kind == "pt4_results" and not (isinstance(entry.get("capability"), str) and isinstance(entry.get("value"), str)):
        raise InputError(where, f"matcher {mid}: pt4_results needs capability and value")
    row = entry.get("row")
    return Matcher(id=mid, kind=str(kind), failure_class=str(cls), row=row if isinstance(row, int) else None,
                   any=any_, all=all_, predicate=predicate if isinstance(predicate, str) else None,
                   capability=entry.get("capability"), value=entry.get("value"),
                   require_boot_green=bool(entry.get("require_boot_green", False)))


def load_table(path: Path = SHIPPED, *, extra_exact: Mapping[str, str] | None = None) -> FingerprintTable:
    """The failure table at ``path``; ``extra_exact`` (the user overlay's fingerprints) is added,
    the shipped entries winning on a clash."""
    where = str(path)
    data = _load_yaml(Path(path))
    if not isinstance(data, Mapping) or data.get("schema") != 1:
        raise InputError(where, "expected a mapping with schema: 1")
    unknown = sorted(set(map(str, data)) - {"schema", "exact_fingerprints", "condition_matchers"})
    if unknown:
        raise InputError(where, f"unknown top-level keys {unknown}")
    exact = dict(parse_exact(extra_exact, "overlay") if extra_exact else {})
    exact.update(parse_exact(data.get("exact_fingerprints"), where))
    matchers = data.get("condition_matchers") or []
    if not isinstance(matchers, list):
        raise InputError(where, "condition_matchers must be a list")
    parsed = tuple(parse_matcher(m, where) for m in matchers)
    ids = [m.id for m in parsed]
    if len(set(ids)) != len(ids):
        raise InputError(where, "matcher ids must be unique")
    return FingerprintTable(exact=exact, matchers=parsed)
