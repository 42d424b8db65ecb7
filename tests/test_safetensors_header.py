"""The pure safetensors header parser: byte ranges, dtype widths, caps, malformed input."""

from __future__ import annotations

import json
import struct

import pytest

from club3090.errors import InputError
from club3090.safetensors_header import (DTYPE_BITS, MAX_HEADER_BYTES, build, header_length,
                                         parse_file_bytes, parse_header)


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


def test_unknown_dtype_counts_its_range() -> None:
    raw = _raw({"a": {"dtype": "Q4_WEIRD", "shape": [10], "data_offsets": [0, 7]}})
    assert parse_header(raw, file="f").dtype_bytes == {"Q4_WEIRD": 7}


def test_header_length_cap_names_the_file() -> None:
    with pytest.raises(InputError) as info:
        header_length(struct.pack("<Q", MAX_HEADER_BYTES + 1), file="org/x/model-1.safetensors")
    assert "org/x/model-1.safetensors" in str(info.value)
    assert "limit" in str(info.value)


@pytest.mark.parametrize("raw,needle", [
    (b"\xff\xfe not json", "JSON"),
    (b"[1, 2]", "not a JSON object"),
    (_raw({"a": {"shape": [1], "data_offsets": [0, 2]}}), "dtype"),
    (_raw({"a": {"dtype": "BF16", "shape": [-1], "data_offsets": [0, 2]}}), "shape"),
    (_raw({"a": {"dtype": "BF16", "shape": [1], "data_offsets": [4, 2]}}), "data_offsets"),
    (_raw({"a": {"dtype": "BF16", "shape": [1], "data_offsets": [0]}}), "data_offsets"),
    (_raw({"a": {"dtype": "BF16", "shape": [3], "data_offsets": [0, 2]}}), "needs 6 bytes"),
    (_raw({"a": "nope"}), "not an object"),
    (_raw({"__metadata__": [1]}), "__metadata__"),
])
def test_malformed_headers_are_rejected_naming_the_file(raw: bytes, needle: str) -> None:
    with pytest.raises(InputError) as info:
        parse_header(raw, file="bad.safetensors")
    assert info.value.file == "bad.safetensors"
    assert needle in str(info.value)


def test_short_prefix_and_truncated_file() -> None:
    with pytest.raises(InputError, match="at least 8"):
        header_length(b"\x01\x02", file="tiny")
    blob, data_len = build({"w": ("BF16", [8])})
    with pytest.raises(InputError, match="truncated"):
        parse_file_bytes(blob[:-3], file="cut")
    with pytest.raises(InputError, match="truncated"):
        parse_file_bytes(blob, file="cut", file_size=len(blob) + data_len - 1)
    assert parse_file_bytes(blob, file="ok", file_size=len(blob) + data_len).data_end == data_len
