"""Budgets for untrusted bytes: JSON parsed from a repo or a bundle never exceeds a size cap."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from club3090.errors import InputError

MAX_JSON_BYTES = 16 * 1024 * 1024  # config.json / index files are kilobytes; refuse megabyte bombs


def parse_json_capped(raw: bytes, *, name: str, limit: int = MAX_JSON_BYTES,
                      object_pairs_hook: Callable[[list[tuple[str, Any]]], Any] | None = None) -> Any:
    if len(raw) > limit:
        raise InputError(name, f"{len(raw)} bytes is over the {limit}-byte limit for JSON files")
    try:
        return json.loads(raw.decode("utf-8"), object_pairs_hook=object_pairs_hook)
    except RecursionError:
        raise InputError(name, "not valid JSON (nested too deeply)") from None
    except ValueError as exc:  # bad UTF-8, bad JSON, an integer over Python's digit limit
        raise InputError(name, f"not valid JSON ({exc})") from exc
