"""The pure safetensors header parser: byte ranges, dtype widths, caps, malformed input."""

from __future__ import annotations

import json
import struct

import pytest

from club3090.errors import InputError
from club3090.model.safetensors import (
    DTYPE_BITS,
    MAX_HEADER_BYTES,
    header_length,
    parse_header,
)
from tests.safetensors_fixtures import build, parse_file_bytes


def _raw(doc: dict) -> bytes:
    return json.dumps(doc).encode()


@pytest.mark.parametrize("dtype,bits", [
    ("F8_E4M3", 8), ("F8_E5M2", 8), ("F4", 4), ("U8", 8), ("I8", 8), ("BF16", 16), ("F16", 16),
    ("F32", 32), ("F64", 64), ("I32", 32), ("I64", 64), ("BOOL", 8),
])
def test_dtype_widths_and_roundtrip(dtype: str, bits: int) -> None:
    assert DTYPE_BITS[dtype] == bits
    blob, data_len = build({"w": (dtype, [4, 32])})
    assert data_len == 4 * 32 * bits // 8
    header = parse_file_bytes(blob, file="x.safetensors")
    assert header.data_bytes == data_len
    assert header.dtype_bytes == {dtype: data_len}
    assert header.tensors["w"].shape == (4, 32)
    assert len(blob) % 8 == 0  # padded like the safetensors writer


def test_weight_bytes_are_byte_ranges_not_params_times_width() -> None:
    # NVFP4-style packing: U8 holds two 4-bit values; scales are F8; a global scale is F32.
    tensors = {"w": ("U8", [4096, 2048]), "w_scale": ("F8_E4M3", [4096, 256]), "w_scale_2": ("F32", [])}
    blob, _ = build(tensors)
    header = parse_file_bytes(blob, file="nvfp4.safetensors")
    assert header.data_bytes == 4096 * 2048 + 4096 * 256 + 4
    assert header.dtype_bytes == {"U8": 4096 * 2048, "F8_E4M3": 4096 * 256, "F32": 4}
    assert header.metadata == {"format": "pt"}


def test_unknown_dtype_is_rejected() -> None:
    # The reference loader refuses dtypes outside its enum; so do we (no guessing at a width).
    raw = _raw({"a": {"dtype": "Q4_WEIRD", "shape": [10], "data_offsets": [0, 7]}})
    with pytest.raises(InputError) as info:
        parse_header(raw, file="f")
    assert info.value.file == "f"


def test_header_length_cap_names_the_file() -> None:
    assert header_length(struct.pack("<Q", MAX_HEADER_BYTES), file="org/x/model-1.safetensors") == MAX_HEADER_BYTES
    with pytest.raises(InputError) as info:
        header_length(struct.pack("<Q", MAX_HEADER_BYTES + 1), file="org/x/model-1.safetensors")
    assert info.value.file == "org/x/model-1.safetensors"


_GOOD = {"a": {"dtype": "BF16", "shape": [1], "data_offsets": [0, 2]}}


# Each bad header differs from _GOOD (which parses) by the one defect, or is not an object at all.
@pytest.mark.parametrize("raw", [
    b"\xff\xfe not json",
    b"[1, 2]",
    _raw({"a": {"shape": [1], "data_offsets": [0, 2]}}),
    _raw({"a": {"dtype": "BF16", "shape": [-1], "data_offsets": [0, 2]}}),
    _raw({"a": {"dtype": "BF16", "shape": [1], "data_offsets": [4, 2]}}),
    _raw({"a": {"dtype": "BF16", "shape": [1], "data_offsets": [0]}}),
    _raw({"a": {"dtype": "BF16", "shape": [3], "data_offsets": [0, 2]}}),
    _raw({"a": "nope"}),
    _raw({"__metadata__": [1], **_GOOD}),
], ids=["not-json", "not-object", "no-dtype", "negative-dim", "reversed-offsets", "one-offset",
        "too-few-bytes", "entry-not-object", "metadata-not-object"])
def test_malformed_headers_are_rejected_naming_the_file(raw: bytes) -> None:
    assert parse_header(_raw(_GOOD), file="good.safetensors").data_bytes == 2
    with pytest.raises(InputError) as info:
        parse_header(raw, file="bad.safetensors")
    assert info.value.file == "bad.safetensors"


def test_short_prefix_and_truncated_file() -> None:
    with pytest.raises(InputError) as info:
        header_length(b"\x01\x02", file="tiny")
    assert info.value.file == "tiny"
    blob, data_len = build({"w": ("BF16", [8])})
    assert parse_file_bytes(blob, file="ok").data_end == data_len
    with pytest.raises(InputError) as info:
        parse_file_bytes(blob[:-3], file="cut")
    assert info.value.file == "cut"
    with pytest.raises(InputError) as info:
        parse_file_bytes(blob, file="cut2", file_size=len(blob) + data_len - 1)
    assert info.value.file == "cut2"
    assert parse_file_bytes(blob, file="ok", file_size=len(blob) + data_len).data_end == data_len


def _t(dtype: str, shape: list[int], begin: int, end: int) -> dict:
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


def _nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


@pytest.mark.parametrize("raw", [
    _nested(100_000),
    b'{"w": {"dtype": "BF16", "shape": [' + b"9" * 5000 + b'], "data_offsets": [0, 4]}}',
    b'{"w": ' + b'{"x": ' * 50_000 + b"1" + b"}" * 50_000 + b"}",
], ids=["deep-list", "5000-digit-dim", "deep-object"])
def test_hostile_json_is_input_error(raw: bytes) -> None:
    with pytest.raises(InputError) as info:
        parse_header(raw, file="org/x/model.safetensors")
    assert info.value.file == "org/x/model.safetensors"


@pytest.mark.parametrize("raw", [
    b'{"w": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]},'
    b' "w": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]}}',                   # same tensor twice
    b'{"a": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]},'
    b' "a": {"dtype": "BF16", "shape": [2], "data_offsets": [4, 8]}}',                   # would hide 4 bytes
    b'{"w": {"dtype": "BF16", "dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}',  # inside an entry
    b'{"__metadata__": {"format": "pt"}, "__metadata__": {"format": "pt"}}',
], ids=["same", "different-ranges", "field", "metadata"])
def test_duplicate_keys_are_rejected(raw: bytes) -> None:
    with pytest.raises(InputError) as info:
        parse_header(raw, file="dup.safetensors")
    assert info.value.file == "dup.safetensors"


@pytest.mark.parametrize("tensors", [
    {"a": _t("BF16", [2], 0, 4), "b": _t("BF16", [2], 2, 6)},          # overlap
    {"a": _t("BF16", [2], 0, 4), "b": _t("BF16", [2], 0, 4)},          # the same range twice
    {"a": _t("BF16", [4], 0, 8), "b": _t("BF16", [2], 2, 6)},          # one range inside another
    {"a": _t("BF16", [2], 0, 4), "b": _t("BF16", [2], 8, 12)},         # gap
    {"a": _t("BF16", [2], 4, 8)},                                       # does not start at 0
    {"a": _t("BF16", [0], 0, 0), "b": _t("BF16", [2], 2, 6)},          # empty tensor, then a gap
])
def test_ranges_must_tile_the_data_section(tensors: dict) -> None:
    with pytest.raises(InputError) as info:
        parse_header(_raw(tensors), file="tile.safetensors")
    assert info.value.file == "tile.safetensors"


def test_tiling_ignores_key_order_and_allows_empty_tensors() -> None:
    tensors = {"z": _t("F32", [1], 0, 4), "a": _t("BF16", [3], 6, 12), "e": _t("U8", [0], 4, 4),
               "m": _t("U8", [2], 4, 6), "e2": _t("BF16", [0, 7], 12, 12)}
    header = parse_header(_raw(tensors), file="f", file_size=8 + len(_raw(tensors)) + 12)
    assert header.data_bytes == header.data_end == 12  # tiled: the sum of ranges is the data section


def test_file_size_must_equal_the_end_of_the_last_range() -> None:
    blob, data_len = build({"w": ("BF16", [8]), "b": ("F32", [3])})
    assert parse_file_bytes(blob, file="ok", file_size=len(blob) + data_len).data_bytes == data_len
    with pytest.raises(InputError) as info:
        parse_file_bytes(blob, file="extra", file_size=len(blob) + data_len + 1)  # bytes no tensor owns
    assert info.value.file == "extra"


@pytest.mark.parametrize("shape", [[2**64], [2**40, 2**40], [2**32] * 3, [-1]])
def test_dimensions_beyond_64_bits_are_rejected(shape: list[int]) -> None:
    with pytest.raises(InputError):
        parse_header(_raw({"w": _t("BF16", shape, 0, 4)}), file="f")


@pytest.mark.parametrize("offsets", [[0, 2**64], [2**64, 2**64 + 2]])
def test_offsets_beyond_64_bits_are_rejected(offsets: list[int]) -> None:
    with pytest.raises(InputError):
        parse_header(_raw({"w": {"dtype": "U8", "shape": [2], "data_offsets": offsets}}), file="f")


@pytest.mark.parametrize("dtype,shape,span,ok", [
    ("U8", [4096, 1024], 4096 * 1024, True),     # int4 packed two per U8: the U8 shape is what counts
    ("I32", [512, 128], 512 * 128 * 4, True),    # GPTQ qweight: eight int4 per I32
    ("U8", [4096, 1024], 4096 * 2048 // 2 + 1, False),
    ("F4", [4, 32], 64, True),                   # sub-byte: exact when whole bytes
    ("F4", [3, 3], 5, True),                     # 36 bits packed into 5 bytes
    ("F4", [3, 3], 6, True),                     # rows padded to whole bytes: 3 x 2 bytes
    ("F4", [3, 3], 4, False),                    # too small to hold 36 bits
    ("F6_E2M3", [4], 3, True),
    ("F6_E2M3", [4], 2, False),
])
def test_range_versus_shape_width(dtype: str, shape: list[int], span: int, ok: bool) -> None:
    raw = _raw({"w": _t(dtype, shape, 0, span)})
    if ok:
        assert parse_header(raw, file="f").dtype_bytes == {dtype: span}
    else:
        with pytest.raises(InputError):
            parse_header(raw, file="f")
