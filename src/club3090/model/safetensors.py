"""Pure parser of safetensors headers: the 8-byte little-endian length, then a JSON object.

Weight bytes are the sum of each tensor's ``data_offsets`` byte range, never parameters x nominal
width: that is what makes packed int4, NVFP4 and MXFP4 checkpoints come out right. Untrusted
input is bounded (header length cap, JSON nesting and digit limits, 64-bit dimensions) and anything
malformed raises ``errors.InputError`` naming the file. No I/O here; ``hub`` and ``derive`` fetch
the bytes.

Validation follows the reference loader (``Metadata::validate`` in huggingface/safetensors): known
dtypes only, no duplicate keys, and the byte ranges, sorted, must tile the data section exactly
(start at 0, no gap, no overlap, end at the end of the file when its size is known), so the sum of
the ranges never counts a byte twice. A range must match shape x dtype width for whole-byte dtypes;
sub-byte dtypes (F4, F6_*) only need room for their packed bits, since writers may pad rows.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from club3090.errors import InputError
from club3090.model.budgets import MAX_JSON_DEPTH, json_depth, parse_json_capped

PREFIX_BYTES = 8
MAX_HEADER_BYTES = 100_000_000  # the safetensors spec allows up to 100 MB of JSON header
MAX_U64 = 2**64 - 1             # the reference parser holds shapes, offsets and sizes in 64 bits

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
        return sum(t.end - t.begin for t in self.tensors.values())

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
            out[info.dtype] = out.get(info.dtype, 0) + info.end - info.begin
        return out


def header_length(prefix: bytes, *, file: str, limit: int = MAX_HEADER_BYTES) -> int:
    """Decode the 8-byte prefix; refuse short files and headers over ``limit`` bytes."""
    if len(prefix) < PREFIX_BYTES:
        raise InputError(file, f"not a safetensors file: {len(prefix)} bytes, need at least 8")
    n = int.from_bytes(prefix[:PREFIX_BYTES], "little")
    if n > limit:
        raise InputError(file, f"safetensors header of {n} bytes is over the {limit}-byte limit")
    if n < 2:
        raise InputError(file, f"safetensors header length {n} is too small to hold a JSON object")
    return n


class _DuplicateKey(Exception):
    """Raised from inside ``json.loads`` (not a ValueError, so the JSON wrapper lets it through)."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)                     # a many-shard MoE has ~10^5 objects: build in C, then compare
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _value in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return out


def parse_header(raw: bytes, *, file: str, file_size: int | None = None) -> SafetensorsHeader:
    """Parse the JSON header bytes (without the 8-byte prefix).

    ``file_size``, when known, must equal prefix + header + the end of the last byte range (shorter
    is truncated, longer has bytes no tensor owns).
    """
    if len(raw) > MAX_HEADER_BYTES:
        raise InputError(file, f"safetensors header of {len(raw)} bytes is over the {MAX_HEADER_BYTES}-byte limit")
    try:
        # the depth walk is limited to what the tensor checks do not pin down (metadata, extra
        # keys): walking every entry of a many-shard MoE's headers cost more than parsing them
        doc = parse_json_capped(raw, name=file, limit=MAX_HEADER_BYTES, object_pairs_hook=_no_duplicates,
                                depth_limit=None)
    except _DuplicateKey as exc:
        raise InputError(file, f"safetensors header repeats the key {exc.key!r}") from None
    if not isinstance(doc, dict):
        raise InputError(file, "safetensors header is not a JSON object")
    metadata: dict[str, str] = {}
    tensors: dict[str, TensorInfo] = {}
    for name, entry in doc.items():
        if (not isinstance(entry, dict) or len(entry) != len(_ENTRY_KEYS) or not _ENTRY_KEYS.issuperset(entry)) \
                and json_depth(entry) >= MAX_JSON_DEPTH:
            raise InputError(file, f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
        if name == "__metadata__":
            if entry is not None and not isinstance(entry, dict):
                raise InputError(file, "__metadata__ is not an object")
            metadata = {str(k): str(v) for k, v in (entry or {}).items()}
            continue
        tensors[name] = _tensor(entry, name=name, file=file)
    _check_tiling(tensors, file=file)
    header = SafetensorsHeader(file=file, header_len=len(raw), tensors=MappingProxyType(tensors),
                               metadata=MappingProxyType(metadata))
    if file_size is not None and header.file_min_size > file_size:
        raise InputError(file, f"truncated: the header declares {header.file_min_size} bytes, "
                               f"the file has {file_size}")
    if file_size is not None and header.file_min_size < file_size:
        raise InputError(file, f"the tensors end at byte {header.file_min_size}, the file has {file_size} "
                               f"bytes: {file_size - header.file_min_size} bytes belong to no tensor")
    return header


def _check_tiling(tensors: Mapping[str, TensorInfo], *, file: str) -> None:
    """Sorted by offsets, each range must start where the previous one ended (the first at 0)."""
    cursor = 0
    for begin, end, name in sorted([(t.begin, t.end, n) for n, t in tensors.items()]):   # a C tuple sort
        if begin != cursor:
            kind = "overlaps the previous tensor" if begin < cursor else "leaves a gap before it"
            raise InputError(file, f"tensor {name!r}: data_offsets [{begin}, {end}] {kind} "
                                   f"(expected to start at {cursor})")
        cursor = end


_ENTRY_KEYS = frozenset({"dtype", "shape", "data_offsets"})


def _tensor(entry: Any, *, name: str, file: str) -> TensorInfo:
    # one pass per check, no generators: a 163-shard MoE has ~92,000 entries (benchmarks/remote_inspect.py)
    if not isinstance(entry, dict):
        raise InputError(file, f"tensor {name!r}: entry is not an object")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if not isinstance(dtype, str) or not dtype:
        raise InputError(file, f"tensor {name!r}: missing dtype")
    bits = DTYPE_BITS.get(dtype)
    if bits is None:
        raise InputError(file, f"tensor {name!r}: unknown dtype {dtype[:40]!r}")
    if type(shape) is not list:
        raise InputError(file, f"tensor {name!r}: shape must be a list of non-negative 64-bit integers")
    elements = 1
    for dim in shape:  # checked product: a header of huge dimensions must not cost a bignum
        if type(dim) is not int or dim < 0 or dim > MAX_U64:   # json gives int or bool; bool is no dimension
            raise InputError(file, f"tensor {name!r}: shape must be a list of non-negative 64-bit integers")
        elements *= dim
        if elements > MAX_U64:
            raise InputError(file, f"tensor {name!r}: shape {shape[:8]} overflows 64 bits")
    if type(offsets) is not list or len(offsets) != 2:
        raise InputError(file, f"tensor {name!r}: data_offsets must be [begin, end] with 0 <= begin <= end")
    begin, end = offsets
    if type(begin) is not int or type(end) is not int or not 0 <= begin <= end <= MAX_U64:
        raise InputError(file, f"tensor {name!r}: data_offsets must be [begin, end] with 0 <= begin <= end")
    span = end - begin
    expected_bits = elements * bits
    if bits % 8 == 0:
        if span != expected_bits // 8:
            raise InputError(file, f"tensor {name!r}: {dtype}{shape} needs {expected_bits // 8} bytes, "
                                   f"data_offsets span {span}")
    elif span < -(-expected_bits // 8):
        raise InputError(file, f"tensor {name!r}: {dtype}{shape} packs into at least {-(-expected_bits // 8)} "
                               f"bytes, data_offsets span {span}")
    return TensorInfo(dtype, tuple(shape), begin, end)


def unique_data_bytes(headers: Mapping[str, SafetensorsHeader], *,
                      label: Callable[[str], str] = lambda name: name) -> int:
    """Weight bytes of a weight set: the sum over its files, refusing a tensor stored in two of
    them (it would be counted twice). ``label(name)`` is the ``InputError.file`` of the offender."""
    owner: dict[str, str] = {}
    total = 0
    for name, header in headers.items():
        for tensor in header.tensors:
            first = owner.setdefault(tensor, name)
            if first != name:
                raise InputError(label(name), f"tensor {tensor!r} is also stored in {first}")
        total += header.data_bytes
    return total


# One tensor's entry beside its quoted name: ``:{"dtype":"F8_E4M3","shape":[..],"data_offsets":[..,..]},``
# with room for a 4-D shape and two 12-digit offsets.
ENTRY_OVERHEAD_BYTES = 112
METADATA_ALLOWANCE_BYTES = 1024


def estimate_header_bytes(weight_map: Mapping[str, Any]) -> dict[str, int]:
    """Expected JSON header length of each shard an index ``weight_map`` names (tensor -> file).

    A guess used only to size the first ranged read, so the whole header usually arrives in one
    round trip; the 8-byte length prefix stays authoritative. Non-string entries are ignored."""
    out: dict[str, int] = {}
    for name, shard in weight_map.items():
        if isinstance(name, str) and isinstance(shard, str):
            out[shard] = out.get(shard, METADATA_ALLOWANCE_BYTES) + len(name) + 2 + ENTRY_OVERHEAD_BYTES
    return out
