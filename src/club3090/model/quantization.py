"""Quantization and compute dtype from config.json, the quantization side files and the
safetensors dtype totals (pure): ``resolve_quantization`` and the method/bit tables behind it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from club3090.model.architecture import Architecture
from club3090.model.spec import Quantization
from club3090.outcome import Reason, Stop, deriver_stop

_METHOD_ALIASES = {"intel/auto-round": "auto-round", "auto_round": "auto-round", "autoround": "auto-round",
                   "compressed_tensors": "compressed-tensors", "bnb": "bitsandbytes",
                   "modelopt_fp4": "modelopt", "modelopt_fp8": "modelopt"}
_FOUR_BIT = {"awq", "gptq", "auto-round", "int4", "4bit", "mxfp4", "nvfp4", "gptq_marlin", "awq_marlin",
             "autoround-int4", "w4a16", "marlin", "hqq"}
_EIGHT_BIT = {"fp8", "fbgemm_fp8", "8bit", "int8", "w8a8", "experts_int8", "ptpc_fp8", "fp8-dynamic"}
_KNOWN_METHODS = _FOUR_BIT | _EIGHT_BIT | {"compressed-tensors", "modelopt", "bitsandbytes", "gguf"}
_ALGO_BITS = (("NVFP4", 4), ("MXFP4", 4), ("W4A", 4), ("INT4", 4), ("AWQ", 4), ("FP8", 8), ("INT8", 8),
              ("W8A", 8))
_TORCH_BITS = {"bfloat16": 16, "float16": 16, "half": 16, "float32": 32, "float": 32, "float64": 64,
               "float8_e4m3fn": 8, "float8_e5m2": 8, "float8": 8, "int8": 8, "uint8": 8, "int4": 4}
_HEADER_DTYPES = {"BF16": "bfloat16", "F16": "float16", "F32": "float32", "F64": "float64",
                  "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}


def normalize_method(method: str) -> str:
    low = method.strip().lower()
    return _METHOD_ALIASES.get(low, low)


def default_bits(method: str) -> int | None:
    low = normalize_method(method)
    if low in _FOUR_BIT or "int4" in low or "4bit" in low:
        return 4
    if low in _EIGHT_BIT or "fp8" in low or "int8" in low:
        return 8
    return None


def _algo_bits(algo: Any) -> int | None:
    if not isinstance(algo, str):
        return None
    up = algo.upper()
    return next((bits for mark, bits in _ALGO_BITS if mark in up), None)


def _int_value(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _kv_scheme(qc: Mapping[str, Any]) -> str | None:
    kv = qc.get("kv_cache_scheme")
    if isinstance(kv, Mapping):
        bits = _int_value(kv.get("num_bits"))
        kind = str(kv.get("type") or "").lower()
        if bits == 8:
            return "fp8" if kind in ("float", "") else "int8"
        return f"{kind or 'int'}{bits}" if bits else None
    algo = qc.get("kv_cache_quant_algo")
    if isinstance(algo, str) and algo:
        return algo.lower()
    if isinstance(kv, str) and kv:
        return kv.lower()
    return None


def _widest_group_bits(qc: Mapping[str, Any]) -> int | None:
    groups = qc.get("config_groups")
    if not isinstance(groups, Mapping):
        return None
    declared = [_int_value(g.get("weights", {}).get("num_bits")) for g in groups.values()
                if isinstance(g, Mapping) and isinstance(g.get("weights"), Mapping)]
    bits = [b for b in declared if b]
    return max(bits) if bits else None


def _group_size(qc: Mapping[str, Any]) -> int | None:
    """The declared weight group size: ``group_size`` / ``q_group_size``, else the widest group's."""
    for key in ("group_size", "q_group_size"):
        value = qc.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and (value > 0 or value == -1):
            return value
    groups = qc.get("config_groups")
    if isinstance(groups, Mapping):
        for g in groups.values():
            weights = g.get("weights") if isinstance(g, Mapping) else None
            value = weights.get("group_size") if isinstance(weights, Mapping) else None
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return None


def _quant_from(qc: Mapping[str, Any], default_method: str | None) -> Quantization | None:
    """One quantization_config-like mapping -> Quantization (bits None when unresolved)."""
    inner = qc.get("quantization") if isinstance(qc.get("quantization"), Mapping) else None  # hf_quant_config
    if inner is not None:
        producer = qc.get("producer")
        method = str(producer.get("name")) if isinstance(producer, Mapping) and producer.get("name") else "modelopt"
        qc = {**inner, "quant_method": method}
    method_raw = qc.get("quant_method") or qc.get("method") or default_method
    if not isinstance(method_raw, str) or not method_raw:
        if any(k in qc for k in ("load_in_4bit", "_load_in_4bit", "load_in_8bit", "_load_in_8bit")):
            method_raw = "bitsandbytes"
        else:
            return None
    method = normalize_method(method_raw)
    bits = (_int_value(qc.get("bits")) or _int_value(qc.get("w_bit")) or _int_value(qc.get("weight_bits"))
            or _widest_group_bits(qc))
    scheme = None
    if method == "bitsandbytes":
        if qc.get("load_in_4bit") or qc.get("_load_in_4bit"):
            bits, scheme = bits or 4, qc.get("bnb_4bit_quant_type") or "fp4"
        elif qc.get("load_in_8bit") or qc.get("_load_in_8bit"):
            bits, scheme = bits or 8, "int8"
    algo = qc.get("quant_algo")
    if isinstance(algo, str) and algo:
        scheme = algo
        if bits is None:
            if algo.upper() == "MIXED_PRECISION" and isinstance(qc.get("quantized_layers"), Mapping):
                per_layer = [_algo_bits(v.get("quant_algo")) for v in qc["quantized_layers"].values()
                             if isinstance(v, Mapping)]
                found = [b for b in per_layer if b]
                bits = max(found) if found else None
            else:
                bits = _algo_bits(algo)
    if scheme is None:
        fmt = qc.get("format") or qc.get("fmt")
        scheme = str(fmt) if isinstance(fmt, str) and fmt else None
    if bits is None:
        bits = default_bits(method)
    return Quantization(method=method, bits=bits, kv_cache_scheme=_kv_scheme(qc), scheme=scheme,
                        group_size=_group_size(qc))


def _torch_dtype(arch: Architecture) -> str | None:
    """The checkpoint's compute dtype as a torch name (``bfloat16``), from ``Architecture``."""
    if not arch.torch_dtype:
        return None
    name = arch.torch_dtype.removeprefix("torch.").lower()
    return name if name in _TORCH_BITS else None


def resolve_quantization(arch: Architecture, quant_files: Mapping[str, Any],
                         dtype_bytes: Mapping[str, int]) -> tuple[Quantization | None, str | None, dict[str, str]] | Stop:
    """(quantization, compute dtype, provenance) or a ``quant-dtype-unknown`` stop.

    ``quantization_config`` and ``torch_dtype`` come from ``Architecture`` (which owns the
    config.json reading, ``text_config`` wrappers included)."""
    provenance: dict[str, str] = {}
    candidates: list[tuple[Mapping[str, Any], str | None, str]] = []
    if arch.quantization_config:
        candidates.append((arch.quantization_config, None, "config"))
    if isinstance(quant_files.get("quantize_config.json"), Mapping):
        candidates.append((quant_files["quantize_config.json"], "gptq", "config"))
    if isinstance(quant_files.get("hf_quant_config.json"), Mapping):
        candidates.append((quant_files["hf_quant_config.json"], "modelopt", "config"))

    quant: Quantization | None = None
    for qc, default, source in candidates:
        found = _quant_from(qc, default)
        if found is None:
            continue
        if quant is None:
            quant, provenance["quantization"] = found, source
        elif quant.kv_cache_scheme is None and found.kv_cache_scheme:  # e.g. hf_quant_config's KV algo
            quant = Quantization(quant.method, quant.bits, found.kv_cache_scheme, quant.scheme, quant.group_size)
    if quant is not None and quant.bits is None and quant.method in _KNOWN_METHODS:
        return deriver_stop(Reason.QUANT_DTYPE_UNKNOWN, "unknown-bits",
                     f"quantization method {quant.method!r} declares no weight bit width")

    compute = _torch_dtype(arch)
    if compute is not None:
        provenance["compute_dtype"] = "config"
    else:
        floats = {k: v for k, v in dtype_bytes.items() if k in _HEADER_DTYPES}
        if floats:
            compute = _HEADER_DTYPES[max(floats, key=floats.__getitem__)]
            provenance["compute_dtype"] = "header"
    if quant is None and compute is None:
        return deriver_stop(Reason.QUANT_DTYPE_UNKNOWN, "no-dtype",
                     "neither quantization_config, torch_dtype nor the safetensors headers give a weight dtype")
    return quant, compute, provenance
