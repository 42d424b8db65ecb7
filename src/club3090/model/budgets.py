"""Budgets for untrusted bytes: JSON parsed from a repo or a bundle never exceeds a size cap."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from club3090.errors import InputError

MAX_JSON_BYTES = 16 * 1024 * 1024  # config.json / index files are kilobytes; refuse megabyte bombs
MAX_JSON_DEPTH = 64                # real configs nest 3-4 levels; deeper is hostile
# Safetensors headers of one repo, all shards together: a 16 GB checkpoint's are ~0.3 MB and a
# 100k-tensor MoE's ~15 MB, so a base allowance plus a per-shard share, under a hard ceiling.
HEADER_BYTES_BASE = 8 * 1024 * 1024
HEADER_BYTES_PER_SHARD = 2 * 1024 * 1024
HEADER_BYTES_CEILING = 64 * 1024 * 1024


def header_bytes_budget(shards: int) -> int:
    """Total safetensors header bytes one repo of ``shards`` files may cost."""
    return min(HEADER_BYTES_CEILING, HEADER_BYTES_BASE + HEADER_BYTES_PER_SHARD * max(0, shards))


def json_depth(doc: Any) -> int:
    """Nesting depth of a parsed JSON value (scalars 0), without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(doc, 0)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            children: Any = value.values()
        elif isinstance(value, list):
            children = value
        else:
            continue
        depth += 1
        deepest = max(deepest, depth)
        stack.extend((child, depth) for child in children if isinstance(child, (dict, list)))
    return deepest


def parse_json_capped(raw: bytes, *, name: str, limit: int = MAX_JSON_BYTES,
                      object_pairs_hook: Callable[[list[tuple[str, Any]]], Any] | None = None,
                      depth_limit: int | None = MAX_JSON_DEPTH) -> Any:
    """Parse ``raw`` within ``limit`` bytes and ``depth_limit`` levels (None: the caller checks
    the depth of the parts it keeps, as ``safetensors.parse_header`` does)."""
    if len(raw) > limit:
        raise InputError(name, f"{len(raw)} bytes is over the {limit}-byte limit for JSON files")
    try:
        doc = json.loads(raw.decode("utf-8"), object_pairs_hook=object_pairs_hook)
    except RecursionError:
        raise InputError(name, "not valid JSON (nested too deeply)") from None
    except ValueError as exc:  # bad UTF-8, bad JSON, an integer over Python's digit limit
        raise InputError(name, f"not valid JSON ({exc})") from exc
    if depth_limit is not None and json_depth(doc) > depth_limit:
        raise InputError(name, f"JSON nested deeper than {depth_limit} levels")
    return doc
