"""GGUF headers parsed from files the tests write with the ``gguf`` package; malformed input refused."""

from __future__ import annotations

import contextlib
import ctypes
import random
import struct
from pathlib import Path

import llama_cpp
import pytest

from club3090.errors import InputError
from club3090.model.gguf import (
    TYPES,
    ArraySummary,
    NeedMoreBytes,
    file_type_name,
    parse_header,
    split_name,
)
from club3090.model.gguf_model import from_files
from tests.gguf_fixtures import Q, Spec, write


def _parse(path: Path):
    data = path.read_bytes()
    return parse_header(data, file=path.name, file_size=len(data))


def _ggml() -> ctypes.CDLL:
    lib = ctypes.CDLL(str(Path(llama_cpp.__file__).parent / "lib" / "libggml-base.so"))
    lib.ggml_type_size.restype = ctypes.c_size_t
    lib.ggml_blck_size.restype = ctypes.c_int64
    lib.ggml_type_name.restype = ctypes.c_char_p
    return lib


def test_type_table_matches_ggml_itself() -> None:
    """Every block layout equals the one in the ggml library llama.cpp runs on; gaps are removed ids."""
    lib = _ggml()
    for type_id in range(max(TYPES) + 1):
        if type_id in TYPES:
            t = TYPES[type_id]
            assert (lib.ggml_blck_size(type_id), lib.ggml_type_size(type_id)) == (t.block, t.size), t.name
            assert lib.ggml_type_name(type_id).decode().lower() == t.name.lower()
        else:
            assert lib.ggml_blck_size(type_id) == 0, type_id


@pytest.mark.parametrize("qtype", [Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q5_1, Q.Q4_K, Q.Q6_K, Q.IQ4_XS,
                                   Q.IQ2_XXS, Q.TQ2_0, Q.MXFP4])
def test_tensor_bytes_tile_the_file(tmp_path: Path, qtype: Q) -> None:
    (path,) = write(tmp_path, "m", Spec(weight_type=qtype, embd_type=Q.Q8_0))
    f = _parse(path)
    assert f.file_min_size == path.stat().st_size   # the last tensor ends where the file does
    model = from_files([f])
    assert model.type_bytes[qtype.name] > 0
    attn_q = next(t for t in f.tensors if t.name == "blk.0.attn_q.weight")
    assert attn_q.type_name == qtype.name


def test_llama_facts(tmp_path: Path) -> None:
    (path,) = write(tmp_path, "m", Spec(n_layer=3, n_embd=256, n_head=8, n_head_kv=2, n_ff=768, n_vocab=300,
                                         ctx_train=8192, output=False))
    m = from_files([_parse(path)])
    assert (m.arch, m.n_layer, m.n_embd, m.n_vocab, m.ctx_train, m.n_ff) == ("llama", 3, 256, 300, 8192, 768)
    assert m.n_head == (8, 8, 8) and m.n_head_kv == (2, 2, 2) and m.head_dim_k == 32
    assert m.tied_output and m.output_bytes == 256 * 4   # only output_norm
    assert m.embd_bytes == 256 * 300 * 2
    assert sum(m.layer_bytes) + m.embd_bytes + m.output_bytes + m.other_bytes == m.weights_bytes
    assert all(kv.k_elems == 64 and kv.window is None for kv in m.kv_layers)


def test_moe_experts_counted_apart(tmp_path: Path) -> None:
    (path,) = write(tmp_path, "moe", Spec(n_expert=4, n_expert_used=2, n_ff_exp=256, weight_type=Q.Q4_K))
    m = from_files([_parse(path)])
    assert m.is_moe and (m.n_expert, m.n_expert_used) == (4, 2)
    per_expert_matrix = 256 // 256 * 144 * 256     # Q4_K rows of 256 values, 256 rows
    assert m.expert_bytes == (3 * 4 * per_expert_matrix,) * 2


def test_swa_pattern_from_the_architecture(tmp_path: Path) -> None:
    (path,) = write(tmp_path, "g", Spec(arch="gemma3", n_layer=7, head_dim=64, sliding_window=512, output=False))
    m = from_files([_parse(path)])
    assert m.swa_window == 512
    assert m.swa_layers == (True, True, True, True, True, False, True)


def test_split_model_is_one_model(tmp_path: Path) -> None:
    paths = write(tmp_path, "big", Spec(n_layer=4, split_max_tensors=10))
    assert len(paths) > 2
    assert split_name(paths[1].name) == ("big", 2, len(paths))
    (single,) = write(tmp_path / "one", "big", Spec(n_layer=4))
    whole = from_files([_parse(p) for p in paths])
    ref = from_files([_parse(single)])
    assert whole.weights_bytes == ref.weights_bytes and whole.layer_bytes == ref.layer_bytes
    with pytest.raises(InputError, match="shards"):
        from_files([_parse(p) for p in paths[:-1]])
    with pytest.raises(InputError, match=r"split\.no"):
        from_files([_parse(p) for p in reversed(paths)])


def test_split_name() -> None:
    assert split_name("a/b-Q4_K_M-00001-of-00003.gguf") == ("a/b-Q4_K_M", 1, 3)
    assert split_name("model.gguf") is None
    assert split_name("m-00004-of-00003.gguf") is None


def test_large_arrays_are_summarised(tmp_path: Path) -> None:
    (path,) = write(tmp_path, "m", Spec(n_vocab=70_000))
    f = _parse(path)
    assert f.metadata["tokenizer.ggml.tokens"] == ArraySummary("str", 70_000)
    assert isinstance(f.metadata["tokenizer.ggml.scores"], ArraySummary)
    assert from_files([f]).n_vocab == 70_000


def test_prefix_asks_for_more(tmp_path: Path) -> None:
    (path,) = write(tmp_path, "m", Spec())
    data = path.read_bytes()
    full = parse_header(data, file="m")
    with pytest.raises(NeedMoreBytes) as info:
        parse_header(data[:full.header_bytes - 1], file="m")
    assert full.header_bytes - 1 < info.value.need <= full.header_bytes
    assert parse_header(data[:full.header_bytes], file="m").tensors == full.tensors


def test_file_type_names() -> None:
    assert file_type_name(15) == "Q4_K_M" and file_type_name(True) is None and file_type_name(99) is None


def _header(version: int = 3, n_tensors: int = 0, kvs: bytes = b"", n_kv: int = 0) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", version, n_tensors, n_kv) + kvs


def _kv(key: str, vtype: int, payload: bytes) -> bytes:
    k = key.encode()
    return struct.pack("<Q", len(k)) + k + struct.pack("<I", vtype) + payload


@pytest.mark.parametrize(("data", "match"), [
    (b"GGML" + bytes(20), "magic"),
    (_header(version=1), "version"),
    (_header(version=0x03000000), "big-endian"),
    (_header(n_tensors=2**40), "implausible"),
    (_header(n_kv=1, kvs=_kv("a", 99, b"")), "unknown value type"),
    (_header(n_kv=1, kvs=_kv("a", 9, struct.pack("<IQ", 4, 2**62))), "over the header limit"),
    (_header(n_kv=1, kvs=_kv("a", 7, b"\x05")), "bool"),
    (_header(n_kv=2, kvs=_kv("a", 4, b"\0\0\0\0") * 2), "repeats"),
    (_header(n_kv=1, kvs=_kv("general.alignment", 4, struct.pack("<I", 3))), "power of two"),
    (_header(n_kv=1, kvs=struct.pack("<Q", 2**40)), "limit"),
    (_header(n_tensors=1, kvs=struct.pack("<Q", 1) + b"t" + struct.pack("<I", 9)), "dimensions"),
    (_header(n_tensors=1, kvs=struct.pack("<Q", 1) + b"t" + struct.pack("<IQIQ", 1, 64, 77, 0)), "unknown GGML"),
    (_header(n_tensors=1, kvs=struct.pack("<Q", 1) + b"t" + struct.pack("<IQIQ", 1, 33, 8, 0)), "multiple of 32"),
    (_header(n_tensors=1, kvs=struct.pack("<Q", 1) + b"t" + struct.pack("<IQIQ", 1, 32, 8, 5)), "aligned"),
])
def test_malformed_headers_are_input_errors(data: bytes, match: str) -> None:
    with pytest.raises(InputError, match=match):
        parse_header(data, file="x.gguf", file_size=len(data) + 10**6)


def test_truncated_file_of_known_size(tmp_path: Path) -> None:
    (path,) = write(tmp_path, "m", Spec())
    data = path.read_bytes()
    with pytest.raises(InputError, match="truncated"):
        parse_header(data, file="m", file_size=len(data) - 1)
    with pytest.raises(InputError, match="past the end"):
        parse_header(data[:40], file="m", file_size=40)


def test_mutated_bytes_never_crash(tmp_path: Path) -> None:
    """Random corruption of a real header gives a parse or an InputError, nothing else."""
    (path,) = write(tmp_path, "m", Spec(n_vocab=64))
    data = bytearray(path.read_bytes()[:parse_header(path.read_bytes(), file="m").header_bytes])
    rng = random.Random(17)
    for _ in range(400):
        mutated = bytearray(data)
        for _ in range(rng.randint(1, 6)):
            mutated[rng.randrange(len(mutated))] = rng.randrange(256)
        try:
            header = parse_header(bytes(mutated), file="m", file_size=len(mutated) + 10**7)
        except InputError:
            continue
        with contextlib.suppress(InputError):
            from_files([header])


@pytest.mark.parametrize("heads, kv_heads", [(0, 0), (4, 0)])
def test_zero_attention_heads_are_refused_not_priced_without_kv(tmp_path: Path, heads: int, kv_heads: int,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Hardening round 3, BUG-9: such a GGUF was "fits-clean" with no KV cache."""
    from club3090 import cli
    from club3090.errors import InputError

    (path,) = write(tmp_path, "m", Spec(n_head=heads, n_head_kv=kv_heads, head_dim=64))
    with pytest.raises(InputError, match="no attention heads"):
        from_files([_parse(path)])
    code = cli.main(["kv-calc", str(path), "--gpus", "1x3090", "--json"])
    assert code == 65 and "no attention heads" in capsys.readouterr().err
