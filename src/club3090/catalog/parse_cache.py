"""Parsed catalog YAML remembered by content, so a command does not re-parse 1 MB of YAML each run.

``cached_parse(name, blob, parse) -> doc``: ``parse(blob)`` returns ``(doc, clean)``; a clean parse
(valid YAML, no duplicate keys) is stored as JSON in ``<state dir>/yaml-cache`` under the SHA-256
of the YAML's bytes and of :data:`FORMAT` (the parser's semantics).
A later run reads the document back only when both hashes match and the stored payload's
own SHA-256 checks out; anything else (no file, another version, a torn or altered file, a
read-only home) parses the YAML again. The cache is never stale: a changed file has another key.
Every schema check still runs on the document: only the YAML parse is skipped.

JSON holds exactly YAML's safe types (dict with string keys, list, str, int, float, bool, None)
and its reader builds nothing else (``marshal`` or ``pickle`` would be faster to read and are not
safe against a crafted file); a document holding anything else (a date, a number as a key) is not
stored, and one read back holding anything else is not used.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from club3090.settings import state_dir

__all__ = ["FORMAT", "cache_path", "cached_parse"]

# bump when the strict parse changes what a document holds (the loader's duplicate-key rule, types)
FORMAT = "club3090-yaml-1 json"
_PLAIN = (dict, list, str, int, float, bool, type(None))


def cache_path(blob: bytes, root: Path | None = None) -> Path:
    key = hashlib.sha256(FORMAT.encode() + b"\0" + blob).hexdigest()
    return (root if root is not None else state_dir() / "yaml-cache") / f"{key}.json"


def _read(path: Path) -> tuple[Any] | None:
    """``(document,)`` when the stored payload checks out, else None (a document may itself be None)."""
    try:
        stored = path.read_bytes()
    except OSError:
        return None
    digest, payload = stored[:32], stored[32:]
    if hashlib.sha256(payload).digest() != digest:
        return None
    try:
        doc = json.loads(payload, parse_constant=_refuse)
    except (ValueError, RecursionError):
        return None
    return (doc,) if _plain(doc) else None


def _refuse(name: str) -> Any:
    raise ValueError(f"{name} is not a YAML document's value")


def _plain(doc: Any) -> bool:
    todo = [doc]
    while todo:
        item = todo.pop()
        if type(item) not in _PLAIN:
            return False
        if isinstance(item, dict):
            if not all(type(k) is str for k in item):
                return False
            todo.extend(item.values())
        elif isinstance(item, list):
            todo.extend(item)
    return True


def _write(path: Path, doc: Any) -> None:
    try:
        payload = json.dumps(doc, ensure_ascii=False, allow_nan=False).encode("utf-8")
    except ValueError:                      # .nan / .inf: not JSON; parsed again next time
        return
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with contextlib.suppress(OSError):      # a cache: a read-only or full disk only costs the next parse
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(hashlib.sha256(payload).digest() + payload)
        os.replace(tmp, path)
    with contextlib.suppress(OSError):
        tmp.unlink(missing_ok=True)


def cached_parse(blob: bytes, parse: Callable[[bytes], tuple[Any, bool]], root: Path | None = None) -> Any:
    """The document in ``blob``: remembered, else ``parse(blob)`` (stored when clean)."""
    path = cache_path(blob, root)
    hit = _read(path)
    if hit is not None:
        return hit[0]
    doc, clean = parse(blob)
    if clean and _plain(doc):
        _write(path, doc)
    return doc
