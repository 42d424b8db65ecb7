"""Pure parser of safetensors headers: the 8-byte little-endian length, then a JSON object.

Weight bytes are the sum of each tensor's ``data_offsets`` byte range, never parameters x nominal
width: that is what makes packed int4, NVFP4 and MXFP4 checkpoints come out right. Untrusted
input is bounded (header length cap) and anything malformed raises ``errors.InputError`` naming
the file. No I/O here; ``hub`` and ``derive`` fetch the bytes.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

from club3090.errors import InputError

PREFIX_BYTES = 8
MAX_HEADER_BYTES = 100_000_000  # the safetensors spec allows up to 100 MB of JSON header

# Bits per element. Byte ranges stay authoritative; widths only validate the declared shapes.
DTYPE_BITS: Mapping[str, int] = MappingProxyType({
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E4M3": 8, "F8_E5M2": 8, "F8_E8M0": 8, "F8_E4M3FNUZ": 8,
    "F8_E5M2FNUZ": 8, "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32,
    "F32": 32, "I64": 64, "U64": 64, "F64": 64, "C64": 64, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
})


@dataclass(frozen=True, slots=True)
class TensorInfo:
    dtype: str
    shape: tuple[int, ...]
    begin: int  # offsets relative to the start of the data section
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.begin


@dataclass(frozen=True, slots=True)
class SafetensorsHeader:
    file: str
    header_len: int                       # JSON length declared by the 8-byte prefix
    tensors: Mapping[str, TensorInfo]
    metadata: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def data_bytes(self) -> int:
        """Sum of the tensors' byte ranges (what the weights occupy)."""
        return sum(t.nbytes for t in self.tensors.values())

    @property
    def data_end(self) -> int:
        """End of the furthest tensor, relative to the data section."""
        return max((t.end for t in self.tensors.values()), default=0)

    @property
    def file_min_size(self) -> int:
        """The smallest file size consistent with this header."""
        return PREFIX_BYTES + self.header_len + self.data_end

    @property
    def dtype_bytes(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for info in self.tensors.values():
            out[info.dtype] = out.get(info.dtype, 0) + info.nbytes
        return out


def header_length(prefix: bytes, *, file: str, limit: int = MAX_HEADER_BYTES) -> int:
    """Decode the 8-byte prefix; refuse short files and headers over ``limit`` bytes."""
    if len(prefix) < PREFIX_BYTES:
        raise InputError(file, f"not a safetensors file: {len(prefix)} bytes, need at least 8")
    (n,) = struct.unpack("<Q", prefix[:PREFIX_BYTES])
    if n > limit:
        raise InputError(file, f"safetensors header of {n} bytes is over the {limit}-byte limit")
    if n < 2:
        raise InputError(file, f"safetensors header length {n} is too small to hold a JSON object")
    return n


def parse_header(raw: bytes, *, file: str, file_size: int | None = None) -> SafetensorsHeader:
    """Parse the JSON header bytes (without the 8-byte prefix).

    ``file_size``, when known, must cover every declared byte range (a shorter file is truncated).
    """
    if len(raw) > MAX_HEADER_BYTES:
        raise InputError(file, f"safetensors header of {len(raw)} bytes is over the {MAX_HEADER_BYTES}-byte limit")
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(file, f"safetensors header is not valid JSON ({exc})") from exc
    if not isinstance(doc, dict):
        raise InputError(file, "safetensors header is not a JSON object")
    metadata: dict[str, str] = {}
    tensors: dict[str, TensorInfo] = {}
    for name, entry in doc.items():
        if name == "__metadata__":
            if entry is not None and not isinstance(entry, dict):
                raise InputError(file, "__metadata__ is not an object")
            metadata = {str(k): str(v) for k, v in (entry or {}).items()}
            continue
        tensors[name] = _tensor(entry, name=name, file=file)
    header = SafetensorsHeader(file=file, header_len=len(raw), tensors=MappingProxyType(tensors),
                               metadata=MappingProxyType(metadata))
    if file_size is not None and header.file_min_size > file_size:
        raise InputError(file, f"truncated: the header declares {header.file_min_size} bytes, "
                               f"the file has {file_size}")
    return header


def parse_file_bytes(data: bytes, *, file: str, file_size: int | None = None) -> SafetensorsHeader:
    """Parse a buffer that starts at byte 0 of the file and holds at least the whole header."""
    n = header_length(data[:PREFIX_BYTES], file=file)
    if len(data) < PREFIX_BYTES + n:
        raise InputError(file, f"truncated header: need {PREFIX_BYTES + n} bytes, got {len(data)}")
    return parse_header(data[PREFIX_BYTES:PREFIX_BYTES + n], file=file, file_size=file_size)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _tensor(entry: Any, *, name: str, file: str) -> TensorInfo:
    where = f"tensor {name!r}"
    if not isinstance(entry, dict):
        raise InputError(file, f"{where}: entry is not an object")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if not isinstance(dtype, str) or not dtype:
        raise InputError(file, f"{where}: missing dtype")
    if not isinstance(shape, list) or not all(_is_int(d) and d >= 0 for d in shape):
        raise InputError(file, f"{where}: shape must be a list of non-negative integers")
    if (not isinstance(offsets, list) or len(offsets) != 2
            or not all(_is_int(o) and o >= 0 for o in offsets) or offsets[0] > offsets[1]):
        raise InputError(file, f"{where}: data_offsets must be [begin, end] with 0 <= begin <= end")
    bits = DTYPE_BITS.get(dtype)
    if bits is not None:
        expected_bits = math.prod(shape) * bits
        if expected_bits % 8 == 0 and offsets[1] - offsets[0] != expected_bits // 8:
            raise InputError(file, f"{where}: {dtype}{shape} needs {expected_bits // 8} bytes, "
                                   f"data_offsets span {offsets[1] - offsets[0]}")
    return TensorInfo(dtype=dtype, shape=tuple(shape), begin=offsets[0], end=offsets[1])


def build(tensors: Mapping[str, tuple[str, tuple[int, ...] | list[int]]] | list[tuple[str, str, Any]],
          metadata: Mapping[str, str] | None = None) -> tuple[bytes, int]:
    """Serialise a header for ``tensors`` (name -> (dtype, shape)), packed in order.

    Returns (prefix + JSON header padded with spaces to a multiple of 8, data-section length).
    Used by tests and the fake Hub to synthesise files; the layout matches the safetensors writer.
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
