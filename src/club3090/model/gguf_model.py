"""A GGUF model (one file or the shards of a split one) -> the facts llama.cpp's memory needs.

Reads the ``{arch}.*`` hyperparameters the way llama.cpp's loader does (a key may hold one value
or one per layer), groups tensor bytes by where llama.cpp places them (token embeddings, each
block's dense and expert tensors, the output head) and derives the per-layer KV geometry,
sliding-window layers included. What an architecture hard-codes in llama.cpp rather than writing
to the file (its SWA layer pattern) is a row of :data:`SWA_PATTERNS`, not a branch.

Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from club3090.errors import InputError
from club3090.model.gguf import ArraySummary, GgufFile, GgufTensor, Value, file_type_name

__all__ = ["SWA_PATTERNS", "GgufModel", "LayerKv", "from_files"]

MAX_LAYERS = 10_000

# llama.cpp's set_swa_pattern(n): layer il slides when il % n < n - 1 (the n-th layer is global).
SWA_PATTERNS: Mapping[str, int] = MappingProxyType({
    "gemma2": 2, "gemma3": 6, "gemma3n": 5, "gemma-embedding": 6, "cohere2": 4, "gpt-oss": 2,
    "exaone4": 4,
})

_BLOCK_RE = re.compile(r"^blk\.(\d+)\.")
_EXPERT_MARK = "_exps"   # ffn_{gate,up,down}_exps: the tensors --n-cpu-moe / -ot keep on the host


@dataclass(frozen=True, slots=True)
class LayerKv:
    k_elems: int            # K values per token (n_head_kv x head_dim_k); 0 = no KV in this layer
    v_elems: int
    window: int | None      # sliding window, None = full attention


@dataclass(frozen=True, slots=True)
class GgufModel:
    files: tuple[str, ...]
    arch: str
    name: str | None
    quant: str | None                   # general.file_type as its label (Q4_K_M, ...)
    n_layer: int
    n_embd: int
    n_vocab: int
    ctx_train: int | None
    n_head: tuple[int, ...]             # per layer
    n_head_kv: tuple[int, ...]
    head_dim_k: int
    head_dim_v: int
    n_ff: int                           # largest dense FFN width (0 if none)
    n_expert: int
    n_expert_used: int
    n_ff_exp: int                       # one expert's FFN width (0 without experts)
    swa_window: int | None
    swa_layers: tuple[bool, ...]
    recurrent_layers: tuple[bool, ...]  # layers with SSM / linear-attention state instead of a KV cache
    state_bytes: int                    # one sequence's recurrent state (conv + ssm, f32) per such layer
    weights_bytes: int
    embd_bytes: int                     # token_embd (+ per-layer embeddings that stay on the host)
    output_bytes: int                   # output head + final norm (0 when tied to token_embd)
    tied_output: bool
    layer_bytes: tuple[int, ...]        # dense tensors per block
    expert_bytes: tuple[int, ...]       # expert tensors per block
    other_bytes: int
    type_bytes: Mapping[str, int]
    tensors: tuple[tuple[str, int], ...] = ()   # (name, bytes) of every tensor, for -ot overrides

    @property
    def is_moe(self) -> bool:
        return self.n_expert > 1

    @property
    def kv_layers(self) -> tuple[LayerKv, ...]:
        return tuple(
            LayerKv(k_elems=0, v_elems=0, window=None) if self.recurrent_layers[i] else
            LayerKv(k_elems=kv * self.head_dim_k, v_elems=kv * self.head_dim_v,
                    window=self.swa_window if self.swa_layers[i] else None)
            for i, kv in enumerate(self.n_head_kv))


def _int(v: Value | None) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def _per_layer(meta: Mapping[str, Value], key: str, n_layer: int, file: str, default: int | None) -> tuple[int, ...]:
    """A hyperparameter that is one number or one per layer (llama.cpp's get_key_or_arr)."""
    v = meta.get(key)
    if v is None:
        if default is None:
            raise InputError(file, f"GGUF metadata lacks {key!r}")
        return (default,) * n_layer
    if isinstance(v, tuple):
        if len(v) != n_layer or not all(_int(x) is not None for x in v):  # type: ignore[arg-type]
            raise InputError(file, f"{key!r}: expected {n_layer} non-negative integers, one per layer")
        return tuple(int(x) for x in v)  # type: ignore[call-overload]
    n = _int(v)
    if n is None:
        raise InputError(file, f"{key!r}: expected a non-negative integer, got {v!r:.60}")
    return (n,) * n_layer


def _required(meta: Mapping[str, Value], key: str, file: str) -> int:
    n = _int(meta.get(key))
    if n is None:
        raise InputError(file, f"GGUF metadata lacks an integer {key!r}")
    return n


def _swa_layers(meta: Mapping[str, Value], arch: str, n_layer: int, window: int | None, file: str) -> tuple[bool, ...]:
    if not window:
        return (False,) * n_layer
    pattern = meta.get(f"{arch}.attention.sliding_window_pattern")
    if isinstance(pattern, tuple):
        if len(pattern) != n_layer:
            raise InputError(file, f"{arch}.attention.sliding_window_pattern: expected {n_layer} entries")
        return tuple(bool(x) for x in pattern)
    n = _int(pattern) if pattern is not None else SWA_PATTERNS.get(arch)
    if n is None:   # an architecture llama.cpp runs without SWA: every layer attends to the full context
        return (False,) * n_layer
    return tuple(n == 0 or i % n < n - 1 for i in range(n_layer))


def _recurrent(meta: Mapping[str, Value], arch: str, n_layer: int,
               n_head_kv: tuple[int, ...]) -> tuple[tuple[bool, ...], int]:
    """Which layers keep SSM / gated-delta-net state, and one sequence's state bytes per layer.

    llama.cpp's hparams: r = (d_conv - 1) x (d_inner + 2 x n_group x d_state), s = d_state x
    d_inner, both f32. Hybrids mark their recurrent layers with a zero KV-head count, or (Qwen3-Next
    family) with ``full_attention_interval``: layer il attends when (il + 1) % interval == 0.
    """
    d_conv = _int(meta.get(f"{arch}.ssm.conv_kernel")) or 0
    d_inner = _int(meta.get(f"{arch}.ssm.inner_size")) or 0
    d_state = _int(meta.get(f"{arch}.ssm.state_size")) or 0
    n_group = _int(meta.get(f"{arch}.ssm.group_count")) or 0
    if not (d_inner and d_state):
        return (False,) * n_layer, 0
    state = (max(d_conv - 1, 0) * (d_inner + 2 * n_group * d_state) + d_state * d_inner) * 4
    interval = _int(meta.get(f"{arch}.full_attention_interval"))
    if interval:
        return tuple((i + 1) % interval != 0 for i in range(n_layer)), state
    if any(kv == 0 for kv in n_head_kv):
        return tuple(kv == 0 for kv in n_head_kv), state
    return (True,) * n_layer, state


def _check_split(files: Sequence[GgufFile]) -> None:
    count = _int(files[0].metadata.get("split.count"))
    if len(files) == 1 and count in (None, 0, 1):
        return
    if count != len(files):
        raise InputError(files[0].file, f"split GGUF declares {count} shards, {len(files)} were given")
    for i, f in enumerate(files):
        if _int(f.metadata.get("split.no")) != i:
            raise InputError(f.file, f"shard {i + 1} of {count} carries split.no {f.metadata.get('split.no')!r}")
    declared = _int(files[0].metadata.get("split.tensors.count"))
    total = sum(len(f.tensors) for f in files)
    if declared is not None and declared != total:
        raise InputError(files[0].file, f"split GGUF declares {declared} tensors, its shards hold {total}")


def from_files(files: Sequence[GgufFile]) -> GgufModel:
    """Facts of one model from its file(s), shards in order (``split.no`` 0 first)."""
    if not files:
        raise InputError("<none>", "no GGUF file given")
    _check_split(files)
    first = files[0]
    meta, file = first.metadata, first.file
    arch = meta.get("general.architecture")
    if not isinstance(arch, str) or not arch:
        raise InputError(file, "GGUF metadata lacks general.architecture")
    n_layer = _required(meta, f"{arch}.block_count", file)
    if n_layer > MAX_LAYERS:
        raise InputError(file, f"{arch}.block_count {n_layer} is over {MAX_LAYERS}")
    n_embd = _required(meta, f"{arch}.embedding_length", file)
    n_head = _per_layer(meta, f"{arch}.attention.head_count", n_layer, file, None)
    n_head_kv = _per_layer(meta, f"{arch}.attention.head_count_kv", n_layer, file, None) \
        if f"{arch}.attention.head_count_kv" in meta else n_head
    head0 = next((h for h in n_head if h), 0)
    default_dim = n_embd // head0 if head0 else 0
    head_k = _int(meta.get(f"{arch}.attention.key_length")) or default_dim
    head_v = _int(meta.get(f"{arch}.attention.value_length")) or default_dim
    n_ff_raw = meta.get(f"{arch}.feed_forward_length", 0)
    n_ff = max(_per_layer({"k": n_ff_raw}, "k", n_layer, file, 0), default=0)
    window = _int(meta.get(f"{arch}.attention.sliding_window")) or None

    tensors: dict[str, GgufTensor] = {}
    for f in files:
        for t in f.tensors:
            if t.name in tensors:
                raise InputError(f.file, f"tensor {t.name[:80]!r} appears in two shards")
            tensors[t.name] = t
    embd = tensors.get("token_embd.weight")
    n_vocab = _int(meta.get(f"{arch}.vocab_size"))
    if n_vocab is None:
        tokens = meta.get("tokenizer.ggml.tokens")
        n_vocab = tokens.count if isinstance(tokens, ArraySummary) else (
            len(tokens) if isinstance(tokens, tuple) else (embd.dims[1] if embd and len(embd.dims) > 1 else 0))

    layer_bytes, expert_bytes = [0] * n_layer, [0] * n_layer
    embd_bytes = output_bytes = other_bytes = 0
    type_bytes: dict[str, int] = {}
    for t in tensors.values():
        type_bytes[t.type_name] = type_bytes.get(t.type_name, 0) + t.nbytes
        m = _BLOCK_RE.match(t.name)
        if m and int(m[1]) < n_layer:
            target = expert_bytes if _EXPERT_MARK in t.name else layer_bytes
            target[int(m[1])] += t.nbytes
        elif t.name.startswith(("token_embd", "per_layer_token_embd")):
            embd_bytes += t.nbytes
        elif t.name.startswith(("output.", "output_norm.")):
            output_bytes += t.nbytes
        else:
            other_bytes += t.nbytes
    recurrent_layers, state_bytes = _recurrent(meta, arch, n_layer, n_head_kv)
    if not any(recurrent_layers) and not (any(n_head) and any(n_head_kv)):
        raise InputError(file, f"{arch}.attention.head_count(_kv) is 0 in every layer and no layer is recurrent: "
                               "no attention heads, so no KV cache to price")
    name = meta.get("general.name")
    return GgufModel(
        files=tuple(f.file for f in files), arch=arch, name=name if isinstance(name, str) else None,
        quant=file_type_name(meta.get("general.file_type")), n_layer=n_layer, n_embd=n_embd,
        n_vocab=n_vocab, ctx_train=_int(meta.get(f"{arch}.context_length")), n_head=n_head,
        n_head_kv=n_head_kv, head_dim_k=head_k, head_dim_v=head_v, n_ff=n_ff,
        n_expert=_int(meta.get(f"{arch}.expert_count")) or 0,
        n_expert_used=_int(meta.get(f"{arch}.expert_used_count")) or 0,
        n_ff_exp=(_int(meta.get(f"{arch}.expert_feed_forward_length")) or n_ff) if f"{arch}.expert_count" in meta else 0,
        swa_window=window, swa_layers=_swa_layers(meta, arch, n_layer, window, file),
        recurrent_layers=recurrent_layers, state_bytes=state_bytes,
        weights_bytes=sum(t.nbytes for t in tensors.values()), embd_bytes=embd_bytes,
        output_bytes=output_bytes, tied_output="output.weight" not in tensors,
        layer_bytes=tuple(layer_bytes), expert_bytes=tuple(expert_bytes), other_bytes=other_bytes,
        type_bytes=MappingProxyType(type_bytes), tensors=tuple((t.name, t.nbytes) for t in tensors.values()))
