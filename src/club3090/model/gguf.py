"""Pure parser of GGUF headers: metadata key/values and the tensor-info table, over bytes.

A GGUF file starts with ``GGUF``, a version (2 or 3), the tensor count and the key/value count
(both u64), then the key/values, then one info record per tensor (name, dimensions, GGML type,
offset), then the tensor data at the next ``general.alignment`` boundary. Everything a memory
model needs sits before the data, so a caller reads a prefix of the file: :func:`parse_header`
raises :class:`NeedMoreBytes` (naming how many bytes would do) when the prefix ends before the
tensor-info table does, and the edge reads more, up to :data:`MAX_HEADER_BYTES`.

Untrusted input is bounded: counts are checked against the bytes left before anything is
allocated, nested arrays are limited in depth, strings in length, and anything malformed raises
``errors.InputError`` naming the file. Large arrays (a tokenizer's 150k tokens) are kept as an
:class:`ArraySummary` (type and count), small numeric ones (per-layer head counts, SWA patterns)
as tuples.

Tensor bytes are computed from GGML's own block layout (``TYPES``): ``ne0 / block x type_size x
rows``, which is how llama.cpp sizes every buffer.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from club3090.errors import InputError

__all__ = [
    "MAX_HEADER_BYTES",
    "TYPES",
    "ArraySummary",
    "GgmlType",
    "GgufFile",
    "GgufTensor",
    "NeedMoreBytes",
    "file_type_name",
    "parse_header",
    "parse_sibling",
    "sibling_table_start",
    "split_name",
    "table_start",
]

MAGIC = b"GGUF"
MAX_HEADER_BYTES = 128 * 1024 * 1024   # metadata of the largest public GGUFs is tens of MiB (tokenizers)
MAX_STRING_BYTES = 16 * 1024 * 1024
MAX_TENSORS = 1_000_000
MAX_KEYS = 1_000_000
MAX_DIMS = 4                           # GGML_MAX_DIMS
MAX_ARRAY_DEPTH = 4
KEEP_ARRAY_ITEMS = 65_536              # numeric arrays up to this long are kept (per-layer values)
DEFAULT_ALIGNMENT = 32
MAX_U64 = 2**64 - 1


@dataclass(frozen=True, slots=True)
class GgmlType:
    name: str
    block: int       # elements per block
    size: int        # bytes per block

    def row_bytes(self, elements: int) -> int:
        """ggml_row_size: bytes for ``elements`` values along the innermost dimension."""
        return elements // self.block * self.size


# GGML type id -> block layout, as in ggml's type traits (ids 4, 5, 31-33, 36-38 were removed).
TYPES: Mapping[int, GgmlType] = MappingProxyType({
    0: GgmlType("F32", 1, 4), 1: GgmlType("F16", 1, 2),
    2: GgmlType("Q4_0", 32, 18), 3: GgmlType("Q4_1", 32, 20),
    6: GgmlType("Q5_0", 32, 22), 7: GgmlType("Q5_1", 32, 24),
    8: GgmlType("Q8_0", 32, 34), 9: GgmlType("Q8_1", 32, 36),
    10: GgmlType("Q2_K", 256, 84), 11: GgmlType("Q3_K", 256, 110), 12: GgmlType("Q4_K", 256, 144),
    13: GgmlType("Q5_K", 256, 176), 14: GgmlType("Q6_K", 256, 210), 15: GgmlType("Q8_K", 256, 292),
    16: GgmlType("IQ2_XXS", 256, 66), 17: GgmlType("IQ2_XS", 256, 74), 18: GgmlType("IQ3_XXS", 256, 98),
    19: GgmlType("IQ1_S", 256, 50), 20: GgmlType("IQ4_NL", 32, 18), 21: GgmlType("IQ3_S", 256, 110),
    22: GgmlType("IQ2_S", 256, 82), 23: GgmlType("IQ4_XS", 256, 136),
    24: GgmlType("I8", 1, 1), 25: GgmlType("I16", 1, 2), 26: GgmlType("I32", 1, 4),
    27: GgmlType("I64", 1, 8), 28: GgmlType("F64", 1, 8), 29: GgmlType("IQ1_M", 256, 56),
    30: GgmlType("BF16", 1, 2), 34: GgmlType("TQ1_0", 256, 54), 35: GgmlType("TQ2_0", 256, 66),
    39: GgmlType("MXFP4", 32, 17), 40: GgmlType("NVFP4", 64, 36), 41: GgmlType("Q1_0", 128, 18),
    42: GgmlType("Q2_0", 64, 18),
})
TYPE_BY_NAME: Mapping[str, GgmlType] = MappingProxyType({t.name.lower(): t for t in TYPES.values()})

# llama_ftype (general.file_type) -> the quant label users know.
FILE_TYPES: Mapping[int, str] = MappingProxyType({
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K",
    11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M",
    18: "Q6_K", 19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S",
    25: "IQ4_NL", 26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M",
    32: "BF16", 36: "TQ1_0", 37: "TQ2_0", 38: "MXFP4_MOE",
})

SPLIT_RE = re.compile(r"^(?P<stem>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")


def file_type_name(value: object) -> str | None:
    return FILE_TYPES.get(value) if isinstance(value, int) and not isinstance(value, bool) else None


def split_name(filename: str) -> tuple[str, int, int] | None:
    """``model-00002-of-00003.gguf`` -> (``model``, 2, 3); None for a file that is not a shard."""
    m = SPLIT_RE.match(filename.rsplit("/", 1)[-1])
    if m is None:
        return None
    no, count = int(m["no"]), int(m["count"])
    if not 1 <= no <= count:
        return None
    prefix = filename.rsplit("/", 1)[0] + "/" if "/" in filename else ""
    return prefix + m["stem"], no, count


class NeedMoreBytes(InputError):
    """The prefix ended inside the header; ``need`` bytes (at least) would let parsing go on."""

    def __init__(self, file: str, have: int, need: int) -> None:
        super().__init__(file, f"GGUF header continues past the {have} bytes read")
        self.need = need


@dataclass(frozen=True, slots=True)
class ArraySummary:
    """A metadata array too long (or of strings) to keep: its element type and length."""

    item_type: str
    count: int


Value = int | float | bool | str | ArraySummary | tuple[object, ...]


@dataclass(frozen=True, slots=True)
class GgufTensor:
    name: str
    type_id: int
    dims: tuple[int, ...]      # ne0 (innermost) first, as GGML stores it
    offset: int                # relative to the data section
    nbytes: int

    @property
    def type_name(self) -> str:
        return TYPES[self.type_id].name


@dataclass(frozen=True, slots=True)
class GgufFile:
    file: str
    version: int
    metadata: Mapping[str, Value]
    tensors: tuple[GgufTensor, ...]
    header_bytes: int          # where the tensor-info table ends
    data_offset: int           # start of tensor data (aligned)

    @property
    def data_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors)

    @property
    def file_min_size(self) -> int:
        return self.data_offset + max((t.offset + t.nbytes for t in self.tensors), default=0)


_SCALARS: Mapping[int, tuple[str, str]] = MappingProxyType({
    0: ("<B", "u8"), 1: ("<b", "i8"), 2: ("<H", "u16"), 3: ("<h", "i16"), 4: ("<I", "u32"),
    5: ("<i", "i32"), 6: ("<f", "f32"), 7: ("<?", "bool"), 10: ("<Q", "u64"), 11: ("<q", "i64"),
    12: ("<d", "f64"),
})
_STRING, _ARRAY = 8, 9


class _Reader:
    def __init__(self, data: bytes, file: str, total: int | None) -> None:
        self.data, self.file, self.pos = data, file, 0
        self.total = total     # the file's full size, when known: a short read past it is corruption

    def need(self, n: int) -> None:
        end = self.pos + n
        if end <= len(self.data):
            return
        if self.total is not None and end > self.total:
            raise InputError(self.file, f"GGUF header runs past the end of the file ({self.total} bytes)")
        if end > MAX_HEADER_BYTES:
            raise InputError(self.file, f"GGUF header is over the {MAX_HEADER_BYTES}-byte limit")
        raise NeedMoreBytes(self.file, len(self.data), end)

    def take(self, n: int) -> bytes:
        self.need(n)
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def scalar(self, fmt: str) -> int | float | bool:
        size = struct.calcsize(fmt)
        (value,) = struct.unpack(fmt, self.take(size))
        return value  # type: ignore[no-any-return]

    def u32(self) -> int:
        return int(self.scalar("<I"))

    def u64(self) -> int:
        return int(self.scalar("<Q"))

    def string(self, what: str) -> str:
        n = self.u64()
        if n > MAX_STRING_BYTES:
            raise InputError(self.file, f"{what}: string of {n} bytes is over the {MAX_STRING_BYTES}-byte limit")
        raw = self.take(n)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise InputError(self.file, f"{what}: string is not UTF-8") from None


def _value(r: _Reader, vtype: int, key: str, depth: int) -> Value:
    if vtype in _SCALARS:
        value = r.scalar(_SCALARS[vtype][0])
        if vtype == 7 and r.data[r.pos - 1] > 1:
            raise InputError(r.file, f"{key!r}: bool byte {r.data[r.pos - 1]} is neither 0 nor 1")
        return value
    if vtype == _STRING:
        return r.string(repr(key))
    if vtype == _ARRAY:
        if depth >= MAX_ARRAY_DEPTH:
            raise InputError(r.file, f"{key!r}: arrays nested over {MAX_ARRAY_DEPTH} deep")
        item_type, count = r.u32(), r.u64()
        if item_type not in _SCALARS and item_type not in (_STRING, _ARRAY):
            raise InputError(r.file, f"{key!r}: unknown array element type {item_type}")
        if item_type in _SCALARS:   # fixed width: skip or keep without a per-item loop when large
            width = struct.calcsize(_SCALARS[item_type][0])
            if count > MAX_HEADER_BYTES:
                raise InputError(r.file, f"{key!r}: array of {count} items is over the header limit")
            if count > KEEP_ARRAY_ITEMS:
                r.take(count * width)
                return ArraySummary(_SCALARS[item_type][1], count)
            raw = r.take(count * width)
            fmt = "<" + _SCALARS[item_type][0][1] * count
            items = struct.unpack(fmt, raw)
            if item_type == 7 and any(b > 1 for b in raw):
                raise InputError(r.file, f"{key!r}: bool array holds a byte other than 0 or 1")
            return tuple(items)
        # strings / nested arrays: each item costs at least 8 bytes; refuse counts the budget cannot hold
        if count > MAX_HEADER_BYTES // 8:
            raise InputError(r.file, f"{key!r}: array of {count} items is over the header limit")
        kept: list[object] = []
        for _ in range(count):
            item = _value(r, item_type, key, depth + 1)
            if len(kept) < KEEP_ARRAY_ITEMS and item_type == _ARRAY:
                kept.append(item)
        if item_type == _STRING:
            return ArraySummary("str", count)
        return tuple(kept) if count <= KEEP_ARRAY_ITEMS else ArraySummary("array", count)
    raise InputError(r.file, f"{key!r}: unknown value type {vtype}")


def _tensor(r: _Reader, index: int) -> GgufTensor:
    name = r.string(f"tensor #{index} name")
    n_dims = r.u32()
    if not 1 <= n_dims <= MAX_DIMS:
        raise InputError(r.file, f"tensor {name[:80]!r}: {n_dims} dimensions (1..{MAX_DIMS} allowed)")
    dims = tuple(r.u64() for _ in range(n_dims))
    type_id, offset = r.u32(), r.u64()
    kind = TYPES.get(type_id)
    if kind is None:
        raise InputError(r.file, f"tensor {name[:80]!r}: unknown GGML type {type_id}")
    if dims[0] % kind.block:
        raise InputError(r.file, f"tensor {name[:80]!r}: {kind.name} needs ne0 to be a multiple of "
                                 f"{kind.block}, got {dims[0]}")
    nbytes = kind.row_bytes(dims[0])
    for d in dims[1:]:
        nbytes *= d
        if nbytes > MAX_U64:
            raise InputError(r.file, f"tensor {name[:80]!r}: size overflows 64 bits")
    return GgufTensor(name=name, type_id=type_id, dims=dims, offset=offset, nbytes=nbytes)


def parse_header(data: bytes, *, file: str, file_size: int | None = None) -> GgufFile:
    """Parse the header in ``data`` (a prefix of the file, or all of it).

    Raises :class:`NeedMoreBytes` when ``data`` ends before the tensor-info table does (and the
    file is known to be longer), ``InputError`` for anything malformed.
    """
    r = _Reader(data, file, file_size)
    if r.take(4) != MAGIC:
        raise InputError(file, "not a GGUF file (no GGUF magic)")
    version = r.u32()
    if version not in (2, 3):
        if version in (0x02000000, 0x03000000):
            raise InputError(file, "big-endian GGUF files are not supported")
        raise InputError(file, f"unsupported GGUF version {version} (2 and 3 are read)")
    n_tensors, n_kv = r.u64(), r.u64()
    if n_tensors > MAX_TENSORS or n_kv > MAX_KEYS:
        raise InputError(file, f"implausible GGUF counts: {n_tensors} tensors, {n_kv} keys")
    metadata: dict[str, Value] = {}
    for i in range(n_kv):
        key = r.string(f"key #{i}")
        if key in metadata:
            raise InputError(file, f"GGUF metadata repeats the key {key[:80]!r}")
        metadata[key] = _value(r, r.u32(), key, 0)
    tensors: list[GgufTensor] = []
    names: set[str] = set()
    for i in range(n_tensors):
        t = _tensor(r, i)
        if t.name in names:
            raise InputError(file, f"GGUF tensor table repeats {t.name[:80]!r}")
        names.add(t.name)
        tensors.append(t)
    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or isinstance(alignment, bool) or alignment <= 0 \
            or alignment & (alignment - 1):
        raise InputError(file, f"general.alignment must be a power of two, got {alignment!r}")
    header = r.pos
    data_offset = -(-header // alignment) * alignment
    _check_offsets(tensors, alignment, file)
    out = GgufFile(file=file, version=version, metadata=MappingProxyType(metadata), tensors=tuple(tensors),
                   header_bytes=header, data_offset=data_offset)
    if file_size is not None and out.file_min_size > file_size:
        raise InputError(file, f"truncated: the tensors end at byte {out.file_min_size}, the file has {file_size}")
    return out


def _check_offsets(tensors: Sequence[GgufTensor], alignment: int, file: str) -> None:
    """Offsets are aligned and the tensors do not overlap (llama.cpp's loader checks the same)."""
    cursor = 0
    for t in sorted(tensors, key=lambda t: t.offset):
        if t.offset % alignment:
            raise InputError(file, f"tensor {t.name[:80]!r}: offset {t.offset} is not {alignment}-aligned")
        if t.offset < cursor:
            raise InputError(file, f"tensor {t.name[:80]!r}: data overlaps the previous tensor")
        cursor = t.offset + t.nbytes


def table_start(header: GgufFile) -> int:
    """Where ``header``'s tensor-info table starts (its key/value section ends)."""
    table = sum(8 + len(t.name.encode("utf-8")) + 4 + 8 * len(t.dims) + 4 + 8 for t in header.tensors)
    return header.header_bytes - table


def _leading_keys(prefix: bytes, file: str, file_size: int) -> tuple[int, int, int, list[tuple[str, Value, int]]]:
    """(version, tensor count, key count, [(key, value, end position)]) as far as ``prefix`` goes."""
    r = _Reader(prefix, file, file_size)
    if r.take(4) != MAGIC:
        raise InputError(file, "not a GGUF file (no GGUF magic)")
    version, n_tensors, n_kv = r.u32(), r.u64(), r.u64()
    keys: list[tuple[str, Value, int]] = []
    try:
        for _ in range(min(n_kv, MAX_KEYS)):
            key = r.string("key")
            keys.append((key, _value(r, r.u32(), key, 0), r.pos))
    except NeedMoreBytes:
        pass
    return version, n_tensors, n_kv, keys


def parse_sibling(prefix: bytes, table: bytes, *, file: str, file_size: int, reference: GgufFile,
                  reference_prefix: bytes, table_at: int) -> GgufFile | None:
    """Another quant of ``reference``'s model from two ranges: the start of the file (``prefix``)
    and the bytes from ``table_at``, where its tensor-info table starts if it differs from the
    reference only in the leading key/values both prefixes show (``sibling_table_start``): a repo's
    quants share their tokenizer, the bulk of the section.

    The guess is checked, not trusted: the tensor table must parse there with the same tensor names
    and shapes as the reference's, and the data section it implies must end where the file does. The
    metadata is the file's own as far as ``prefix`` reaches (the hyperparameters come first), the
    reference's beyond (the tokenizer). None when any check fails: the caller reads the header whole.
    """
    try:
        version, n_tensors, n_kv, keys = _leading_keys(prefix, file, file_size)
    except InputError:
        return None
    if version != reference.version or n_tensors != len(reference.tensors) or n_kv != len(reference.metadata):
        return None
    if sibling_table_start(prefix, reference_prefix, reference, file=file, file_size=file_size) != table_at:
        return None
    t = _Reader(table, file, file_size - table_at)
    try:
        tensors = [_tensor(t, i) for i in range(n_tensors)]
    except InputError:            # NeedMoreBytes included: the table is not where the guess put it
        return None
    if [(x.name, x.dims) for x in tensors] != [(x.name, x.dims) for x in reference.tensors]:
        return None
    metadata = {**reference.metadata, **{k: v for k, v, _ in keys}}
    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or isinstance(alignment, bool) or alignment <= 0 \
            or alignment & (alignment - 1):
        return None
    header = table_at + t.pos
    data_offset = -(-header // alignment) * alignment
    try:
        _check_offsets(tensors, alignment, file)
    except InputError:
        return None
    out = GgufFile(file=file, version=reference.version, metadata=MappingProxyType(metadata),
                   tensors=tuple(tensors), header_bytes=header, data_offset=data_offset)
    if not out.file_min_size <= file_size < out.file_min_size + alignment:
        return None
    return out


def sibling_table_start(prefix: bytes, reference_prefix: bytes, reference: GgufFile, *, file: str,
                        file_size: int) -> int | None:
    """Where a sibling quant's tensor-info table would start: the reference's, shifted by how much
    longer the sibling's leading key/values are (same keys in the same order as far as both prefixes
    show, e.g. a longer ``general.name``); None when the keys differ."""
    try:
        _, _, _, mine = _leading_keys(prefix, file, file_size)
        _, _, _, theirs = _leading_keys(reference_prefix, reference.file, reference.header_bytes)
    except InputError:
        return None
    common = min(len(mine), len(theirs))
    if common == 0 or [k for k, _, _ in mine[:common]] != [k for k, _, _ in theirs[:common]]:
        return None
    return table_start(reference) + mine[common - 1][2] - theirs[common - 1][2]
