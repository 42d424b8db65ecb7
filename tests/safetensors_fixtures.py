"""Test-only helpers for safetensors headers: synthesise one, parse a whole-file buffer."""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Mapping
from typing import Any

from club3090.errors import InputError
from club3090.model.safetensors import (
    DTYPE_BITS,
    PREFIX_BYTES,
    SafetensorsHeader,
    header_length,
    parse_header,
)


def parse_file_bytes(data: bytes, *, file: str, file_size: int | None = None) -> SafetensorsHeader:
    """Parse a buffer that starts at byte 0 of the file and holds at least the whole header."""
    n = header_length(data[:PREFIX_BYTES], file=file)
    if len(data) < PREFIX_BYTES + n:
        raise InputError(file, f"truncated header: need {PREFIX_BYTES + n} bytes, got {len(data)}")
    return parse_header(data[PREFIX_BYTES:PREFIX_BYTES + n], file=file, file_size=file_size)


def build(tensors: Mapping[str, tuple[str, tuple[int, ...] | list[int]]] | list[tuple[str, str, Any]],
          metadata: Mapping[str, str] | None = None) -> tuple[bytes, int]:
    """Serialise a header for ``tensors`` (name -> (dtype, shape)), packed in order.

    Returns (prefix + JSON header padded with spaces to a multiple of 8, data-section length).
    Used by the tests and the fake Hub to synthesise files; the layout matches the safetensors writer.
    """
    items = tensors.items() if isinstance(tensors, Mapping) else [(n, (d, s)) for n, d, s in tensors]
    doc: dict[str, Any] = {"__metadata__": dict(metadata or {"format": "pt"})}
    offset = 0
    for name, (dtype, shape) in items:
        bits = DTYPE_BITS[dtype]
        nbytes = -(-math.prod(shape) * bits // 8)
        doc[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(doc, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw, offset
