"""KV-cache element formats (docs/DESIGN.md §17): bytes per stored K / V element and per-head scales.

The one table of KV storage sizes: the catalog's ``kv_formats.yaml`` names formats (SM window,
``--kv-cache-dtype`` value, emittability) and every id there must be priced here
(``tests/test_catalog.py``). Also the one owner of the torch dtype aliases (:data:`DTYPE_ALIASES`,
:func:`canonical_dtype`), which ``compose`` and ``derive`` use too.

Sizes are exact fractions so that a page (block_size tokens of one layer) is computed exactly and
rounded once. ``None`` element sizes mean "the model's dtype" (``auto``).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

__all__ = [
    "DTYPE_ALIASES",
    "KV_FORMATS",
    "MODEL_DTYPES",
    "KvStorage",
    "canonical_dtype",
    "dtype_bytes",
    "kv_format",
]


@dataclass(frozen=True, slots=True)
class KvStorage:
    """How a KV cache dtype stores K and V (the estimator's side of a KV format; the catalog's record
    of the format, ``catalog.model.KvFormat``, says who may use it)."""

    name: str
    k_bytes: Fraction | None          # per K element; None = model dtype
    v_bytes: Fraction | None          # per V element; None = model dtype
    scale_bytes_per_head: int = 0     # per token and KV head (K scale + V scale)
    engine: str = "vllm"              # "vllm" | "llama.cpp" | "both"
    mla_bytes_per_token: int | None = None   # MLA-specific packed layouts (fp8_ds_mla)

    def element_bytes(self, model_bytes: int) -> tuple[Fraction, Fraction]:
        k = self.k_bytes if self.k_bytes is not None else Fraction(model_bytes)
        v = self.v_bytes if self.v_bytes is not None else Fraction(model_bytes)
        return k, v


def _f(num: int, den: int = 1) -> Fraction:
    return Fraction(num, den)


_TWO, _ONE, _FOUR = _f(2), _f(1), _f(4)

KV_FORMATS: dict[str, KvStorage] = {
    fmt.name: fmt for fmt in (
        KvStorage("auto", None, None, engine="both"),
        KvStorage("bf16", _TWO, _TWO, engine="both"),
        KvStorage("bfloat16", _TWO, _TWO),
        KvStorage("fp16", _TWO, _TWO, engine="both"),
        KvStorage("float16", _TWO, _TWO),
        KvStorage("half", _TWO, _TWO),
        KvStorage("f16", _TWO, _TWO, engine="llama.cpp"),
        KvStorage("fp32", _FOUR, _FOUR, engine="both"),
        KvStorage("float32", _FOUR, _FOUR),
        KvStorage("float", _FOUR, _FOUR),
        KvStorage("f32", _FOUR, _FOUR, engine="llama.cpp"),
        KvStorage("fp8", _ONE, _ONE),
        KvStorage("fp8_e4m3", _ONE, _ONE),
        KvStorage("fp8_e5m2", _ONE, _ONE),
        KvStorage("fp8_inc", _ONE, _ONE),
        # one byte per element + an fp32 scale for K and one for V per token and head
        KvStorage("int8_per_token_head", _ONE, _ONE, scale_bytes_per_head=8),
        KvStorage("fp8_per_token_head", _ONE, _ONE, scale_bytes_per_head=8),
        KvStorage("int4_per_token_head", _f(1, 2), _f(1, 2), scale_bytes_per_head=8),
        # 4-bit values + one 8-bit scale per 16 elements
        KvStorage("nvfp4", _f(9, 16), _f(9, 16)),
        KvStorage("nvfp4_4over6", _f(9, 16), _f(9, 16)),
        # club-3090 estimator's slot sizes (3 bits + 0.05 B/element codebook/norm overhead; K 8-bit, V 4-bit)
        KvStorage("turboquant_3bit_nc", _f(17, 40), _f(17, 40)),
        KvStorage("turboquant_4bit_nc", _f(11, 20), _f(11, 20)),
        KvStorage("turboquant_k3v4_nc", _f(17, 40), _f(11, 20)),
        KvStorage("turboquant_k8v4", _ONE, _f(1, 2)),
        KvStorage("fp8_ds_mla", _ONE, _ONE, mla_bytes_per_token=656),
        # llama.cpp block formats: q8_0 = 34 B / 32, q4_0 = 18 B / 32, q5_0 = 22 B / 32, ...
        KvStorage("q8_0", _f(34, 32), _f(34, 32), engine="llama.cpp"),
        KvStorage("q4_0", _f(18, 32), _f(18, 32), engine="llama.cpp"),
        KvStorage("q4_1", _f(20, 32), _f(20, 32), engine="llama.cpp"),
        KvStorage("q5_0", _f(22, 32), _f(22, 32), engine="llama.cpp"),
        KvStorage("q5_1", _f(24, 32), _f(24, 32), engine="llama.cpp"),
        KvStorage("iq4_nl", _f(18, 32), _f(18, 32), engine="llama.cpp"),
        # beellama.cpp's KVarN 4-bit compression: priced with q4_0's blocks until measured
        KvStorage("kvarn4", _f(18, 32), _f(18, 32), engine="llama.cpp"),
        # K 8-bit, V 4-bit: 0.75 B/element on average (docs/DESIGN.md §17, club-3090's estimator),
        # the same slots as turboquant_k8v4; served by vLLM nightlies and llama.cpp
        KvStorage("k8v4", _ONE, _f(1, 2), engine="both"),
    )
}

DTYPE_ALIASES = {
    "bfloat16": "bfloat16", "bf16": "bfloat16", "torch.bfloat16": "bfloat16",
    "float16": "float16", "fp16": "float16", "half": "float16", "torch.float16": "float16",
    "float32": "float32", "fp32": "float32", "float": "float32", "torch.float32": "float32",
}


MODEL_DTYPES = ("auto", "bfloat16", "float16", "float32")   # kv-calc --dtype: "auto" + canonical names


def canonical_dtype(name: str | None) -> str | None:
    if name is None:
        return None
    return DTYPE_ALIASES.get(str(name).strip().lower())


def dtype_bytes(name: str | None) -> int:
    """Bytes of a torch dtype name; unknown/None -> 2 (vLLM's half-precision default)."""
    return 4 if canonical_dtype(name) == "float32" else 2


def kv_format(name: str | None) -> KvStorage | None:
    if name is None:
        return KV_FORMATS["auto"]
    return KV_FORMATS.get(str(name).strip().lower())
