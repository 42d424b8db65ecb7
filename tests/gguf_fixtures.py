"""Tiny GGUF models written by the tests with the ``gguf`` package (test helper, not product code).

Each file is a complete, loadable model: real metadata, a small SentencePiece-style vocabulary and
zero-filled tensors of the requested GGML types (zero blocks are valid blocks of every type, so
llama.cpp loads them). ``Spec`` describes the shape; ``write`` returns the file(s) written, several
for a split model (``name-00001-of-0000N.gguf``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from gguf import GGUFWriter
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

Q = GGMLQuantizationType


@dataclass(frozen=True)
class Spec:
    arch: str = "llama"
    n_layer: int = 2
    n_embd: int = 256
    n_head: int = 4
    n_head_kv: int = 2
    head_dim: int | None = None          # written as key_length/value_length when set
    n_ff: int = 512
    n_vocab: int = 256
    ctx_train: int = 4096
    weight_type: GGMLQuantizationType = Q.F16
    embd_type: GGMLQuantizationType | None = None   # token_embd; weight_type when None
    output: bool = True                  # False: tied embeddings (no output.weight)
    n_expert: int = 0
    n_expert_used: int = 0
    n_ff_exp: int | None = None
    sliding_window: int | None = None    # written for SWA architectures (gemma2/gemma3)
    split_max_tensors: int = 0
    extra: dict[str, int] = field(default_factory=dict)

    @property
    def head_k(self) -> int:
        return self.head_dim or self.n_embd // self.n_head


def _zeros(qtype: GGMLQuantizationType, ne: tuple[int, ...]) -> np.ndarray:
    """Zero bytes for a tensor of ``ne`` (innermost first) in ``qtype``; numpy shape is reversed."""
    block, size = GGML_QUANT_SIZES[qtype]
    assert ne[0] % block == 0, (qtype.name, ne)
    if qtype == Q.F32:
        return np.zeros(tuple(reversed(ne)), dtype=np.float32)
    if qtype == Q.F16:
        return np.zeros(tuple(reversed(ne)), dtype=np.float16)
    row = ne[0] // block * size
    return np.zeros((*reversed(ne[1:]), row), dtype=np.uint8)


def _add(writer: GGUFWriter, name: str, qtype: GGMLQuantizationType, ne: tuple[int, ...]) -> None:
    data = _zeros(qtype, ne)
    raw = None if qtype in (Q.F32, Q.F16) else qtype
    writer.add_tensor(name, data, raw_dtype=raw)


def _vocab(writer: GGUFWriter, n_vocab: int) -> None:
    tokens = ["<unk>", "<s>", "</s>"] + [f"t{i}" for i in range(n_vocab - 3)]
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores([0.0] * n_vocab)
    writer.add_token_types([2, 3, 3] + [1] * (n_vocab - 3))
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)


def write(folder: Path, name: str, spec: Spec) -> list[Path]:
    """Write the model; return its file(s) in shard order."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.gguf"
    writer = GGUFWriter(path, spec.arch, split_max_tensors=spec.split_max_tensors)
    a = spec.arch
    writer.add_name(name)
    writer.add_uint32(f"{a}.context_length", spec.ctx_train)
    writer.add_uint32(f"{a}.embedding_length", spec.n_embd)
    writer.add_uint32(f"{a}.block_count", spec.n_layer)
    writer.add_uint32(f"{a}.feed_forward_length", spec.n_ff)
    writer.add_uint32(f"{a}.attention.head_count", spec.n_head)
    writer.add_uint32(f"{a}.attention.head_count_kv", spec.n_head_kv)
    writer.add_float32(f"{a}.attention.layer_norm_rms_epsilon", 1e-6)
    writer.add_uint32(f"{a}.vocab_size", spec.n_vocab)
    if spec.head_dim is not None:
        writer.add_uint32(f"{a}.attention.key_length", spec.head_dim)
        writer.add_uint32(f"{a}.attention.value_length", spec.head_dim)
    if spec.n_expert:
        writer.add_uint32(f"{a}.expert_count", spec.n_expert)
        writer.add_uint32(f"{a}.expert_used_count", spec.n_expert_used)
        if spec.n_ff_exp is not None:
            writer.add_uint32(f"{a}.expert_feed_forward_length", spec.n_ff_exp)
    if spec.sliding_window is not None:
        writer.add_uint32(f"{a}.attention.sliding_window", spec.sliding_window)
    for key, value in spec.extra.items():
        writer.add_uint32(key, value)
    _vocab(writer, spec.n_vocab)

    wt, et = spec.weight_type, spec.embd_type or spec.weight_type
    e, hk = spec.n_embd, spec.head_k
    _add(writer, "token_embd.weight", et, (e, spec.n_vocab))
    _add(writer, "output_norm.weight", Q.F32, (e,))
    if spec.output:
        _add(writer, "output.weight", wt, (e, spec.n_vocab))
    for i in range(spec.n_layer):
        b = f"blk.{i}"
        _add(writer, f"{b}.attn_norm.weight", Q.F32, (e,))
        _add(writer, f"{b}.attn_q.weight", wt, (e, hk * spec.n_head))
        _add(writer, f"{b}.attn_k.weight", wt, (e, hk * spec.n_head_kv))
        _add(writer, f"{b}.attn_v.weight", wt, (e, hk * spec.n_head_kv))
        _add(writer, f"{b}.attn_output.weight", wt, (hk * spec.n_head, e))
        _add(writer, f"{b}.ffn_norm.weight", Q.F32, (e,))
        if spec.arch in ("gemma2", "gemma3"):
            _add(writer, f"{b}.post_attention_norm.weight", Q.F32, (e,))
            _add(writer, f"{b}.post_ffw_norm.weight", Q.F32, (e,))
        if spec.arch == "gemma3":
            _add(writer, f"{b}.attn_q_norm.weight", Q.F32, (hk,))
            _add(writer, f"{b}.attn_k_norm.weight", Q.F32, (hk,))
        if spec.n_expert:
            ff = spec.n_ff_exp or spec.n_ff
            _add(writer, f"{b}.ffn_gate_inp.weight", Q.F32, (e, spec.n_expert))
            _add(writer, f"{b}.ffn_gate_exps.weight", wt, (e, ff, spec.n_expert))
            _add(writer, f"{b}.ffn_up_exps.weight", wt, (e, ff, spec.n_expert))
            _add(writer, f"{b}.ffn_down_exps.weight", wt, (ff, e, spec.n_expert))
        else:
            _add(writer, f"{b}.ffn_gate.weight", wt, (e, spec.n_ff))
            _add(writer, f"{b}.ffn_up.weight", wt, (e, spec.n_ff))
            _add(writer, f"{b}.ffn_down.weight", wt, (spec.n_ff, e))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    if spec.split_max_tensors:
        return sorted(folder.glob(f"{name}-*-of-*.gguf"))
    return [path]


def header_only(arch: str, meta: dict[str, int], tensors: list[tuple[str, tuple[int, ...], GGMLQuantizationType]],
                path: Path) -> tuple[bytes, int]:
    """A GGUF header describing big tensors without their data: (header bytes, the full file size).

    Served by the fake Hub as a virtual file (header, then zeros), it stands for a real multi-GB
    quant whose header is all a memory model reads.
    """
    writer = GGUFWriter(path, arch)
    for key, value in meta.items():
        writer.add_uint32(key, value)
    for name, ne, qtype in tensors:
        block, size = GGML_QUANT_SIZES[qtype]
        nbytes = ne[0] // block * size
        for d in ne[1:]:
            nbytes *= d
        writer.add_tensor_info(name, tuple(reversed(ne)), np.dtype(np.float32), nbytes, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    header = path.read_bytes()
    offset = -(-len(header) // 32) * 32
    data = 0
    for tensor_set in writer.tensors:
        for info in tensor_set.values():
            data = -(-data // 32) * 32 + info.nbytes
    return header, offset + data
