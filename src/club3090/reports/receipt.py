"""Calibration receipts: one vLLM start-up, its serving shape, what it measured, what we predicted.

A receipt is the Loop's unit of evidence for the fit engine (docs/DESIGN.md, the Loop): the shape
in vLLM's flag names, the measured terms (named as in the calibration cases), and, when the
model's ``config.json`` and the GPU memory are known, the fit engine's prediction for the same
shape with the per-term error (predicted - measured). Receipts are redacted like bundles.
"""

from __future__ import annotations

import ast
import hashlib
import math
import re
from collections.abc import Mapping
from typing import Any

from club3090.errors import InputError
from club3090.reports.redact import Redactor
from club3090.reports.vllm_log import (
    StartupLog,
    fill_missing,
    inferred_keys,
    local_model_path,
    parse_startup,
    serving_shape,
)
from club3090.units import GiB

RECEIPT_SCHEMA = 1
CPU_NOTE = "vLLM's CPU build: its KV pool (CPU KV cache size) is host memory, never compared with a GPU prediction"
RECEIPT_KIND = "vllm-startup-receipt"
MEASURED_TERMS: tuple[str, ...] = (
    "model_loading_gib", "available_kv_cache_gib", "gpu_kv_cache_tokens", "num_gpu_blocks", "max_concurrency",
    "max_concurrency_for_len",
)
# vLLM logs the KV reserve signed: a negative one is the shortfall of a start with no room for a block
# (V0 worker: budget - non-KV memory, printed before blocks are clamped at 0)
SIGNED_TERMS: frozenset[str] = frozenset({"available_kv_cache_gib"})
# the terms the fit engine predicts, compared with the measured ones
PREDICTED_TERMS: tuple[str, ...] = ("available_kv_cache_gib", "gpu_kv_cache_tokens", "num_gpu_blocks",
                                    "max_concurrency", "non_torch_gib", "activation_peak_gib", "cudagraph_gib")


def predict_terms(log: StartupLog, config: Mapping[str, Any], *, gpu_memory_gib: float | None,
                  gpu_name: str | None) -> tuple[dict[str, Any] | None, str | None]:
    """The fit engine's terms for the log's shape, or (None, why not)."""
    from club3090.fit import memory as fit_memory
    from club3090.fit.estimate import weights_per_rank_bytes
    from club3090.fit.shape import profile_shape
    from club3090.model.architecture import parse_config

    weights = log.measured.get("model_loading_gib", log.measured.get("profile_weights_gib"))
    if weights is None:
        return None, "the log has no weights measurement (Model loading took ...)"
    memory = gpu_memory_gib if gpu_memory_gib is not None else log.gpu_total_memory_gib
    if memory is None:
        return None, "GPU memory unknown: the log does not state it; give --gpus"
    shape = serving_shape(log)
    try:
        serve = profile_shape(
            None, None,
            tp=int(shape.get("tensor_parallel_size") or 1), pp=int(shape.get("pipeline_parallel_size") or 1),
            mem_util=shape.get("gpu_memory_utilization"), max_model_len=shape.get("max_model_len"),
            max_num_seqs=shape.get("max_num_seqs"), max_num_batched_tokens=shape.get("max_num_batched_tokens"),
            block_size=shape.get("block_size"), kv_cache_dtype=str(shape.get("kv_cache_dtype") or "auto"),
            enforce_eager=bool(shape.get("enforce_eager")), vllm_version=log.vllm_version,
            dtype=shape.get("dtype") if shape.get("dtype") not in (None, "auto") else None,
            device_name=gpu_name,
            sampler_sorts=None if log.sampler is None else log.sampler == "PyTorch-native")
        result = fit_memory.predict(parse_config(dict(config)), weights_bytes=0,
                                    weights_bytes_per_rank=weights_per_rank_bytes(float(weights)),
                                    gpu_memory_bytes=[int(memory * GiB)], shape=serve)
    except (ValueError, TypeError) as exc:   # an unpriceable shape, raised or (below) returned
        return None, f"the fit engine cannot price this shape: {exc}"
    if not isinstance(result, fit_memory.FitResult):
        return None, f"the fit engine cannot price this shape: {result}"
    return {
        "available_kv_cache_gib": round(result.per_gpu.kv_pool_bytes / GiB, 4),
        "gpu_kv_cache_tokens": result.kv_cache_tokens,
        "num_gpu_blocks": result.num_blocks,
        "max_concurrency": round(result.max_concurrency, 2),
        # the separate terms the log's breakdown measures (per rank)
        "non_torch_gib": round(result.per_gpu.non_torch_bytes / GiB, 4),
        "activation_peak_gib": round(result.per_gpu.activation_bytes / GiB, 4),
        "cudagraph_gib": round((result.per_gpu.cudagraph_bytes or result.cudagraph_outside_budget_bytes) / GiB, 4),
        "raw_verdict": result.raw_verdict,
        "confidence": result.confidence,
        "breakdown_gib": {k: round(v / GiB, 4) for k, v in result.per_gpu.to_json().items()},
    }, None


def term_errors(predicted: Mapping[str, Any] | None, measured: Mapping[str, Any]) -> dict[str, float] | None:
    """predicted - measured, per term both have."""
    if predicted is None:
        return None
    out: dict[str, float] = {}
    for term in PREDICTED_TERMS:
        p, m = predicted.get(term), measured.get(term)
        if isinstance(p, (int, float)) and isinstance(m, (int, float)) and not isinstance(m, bool):
            out[term] = round(float(p) - float(m), 4)
    return out


MAX_NUMBER = 2**53          # above any byte, token or block count a log states; floats stay exact below it


def number_problem(value: object) -> str | None:
    """None for a finite number in [-2^53, 2^53] (booleans and non-numbers pass: not numbers),
    else why not; ``math.isfinite`` alone would raise on a 400-digit integer."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value!r} is not a finite number"
    if abs(value) > MAX_NUMBER:
        return f"{str(value)[:24]}... is beyond 2^53" if len(str(value)) > 24 else f"{value} is beyond 2^53"
    return None


def _finite(value: Any, depth: int = 0) -> Any:
    """``value`` with every number ``number_problem`` refuses read as not stated (None)."""
    if number_problem(value) is not None:
        return None
    if depth < 8 and isinstance(value, Mapping):
        return {k: _finite(v, depth + 1) for k, v in value.items()}
    if depth < 8 and isinstance(value, list):
        return [_finite(v, depth + 1) for v in value]
    return value


def finite_log(log: StartupLog) -> StartupLog:
    """The log with huge or non-finite numbers (``1e999``, a 400-digit count, ``NaN``) read as not
    stated: no receipt, prediction or printout ever carries Infinity, and nothing overflows."""
    from dataclasses import replace

    return replace(log, args=_finite(dict(log.args)), measured=_finite(dict(log.measured)),
                   gpu_total_memory_gib=_finite(log.gpu_total_memory_gib))


def read_startup(log_text: str, name: str) -> StartupLog:
    """``parse_startup`` with its numbers bounded (``finite_log``); a number too large to convert
    (a 400-digit token count) is an ``InputError`` naming the log, never an OverflowError."""
    try:
        return finite_log(parse_startup(log_text))
    except OverflowError:
        raise InputError(name, "a number in the log is too large to be a measurement (over 2^53)") from None


def build_receipt(log: StartupLog, *, log_bytes: bytes, source_name: str, redactor: Redactor,
                  gpu_name: str | None = None, gpu_memory_gib: float | None = None, gpu_count: int | None = None,
                  config: Mapping[str, Any] | None = None, club3090_commit: str | None = None,
                  given_keys: tuple[str, ...] = ()) -> dict[str, Any]:
    """A redacted receipt (JSON-shaped) for one parsed start-up."""
    log = finite_log(log)
    shape: dict[str, Any] = dict(serving_shape(log))
    shape["vllm_version"] = log.vllm_version
    shape["gpu_name"] = gpu_name
    memory = gpu_memory_gib if gpu_memory_gib is not None else log.gpu_total_memory_gib
    shape["gpu_memory_gib"] = round(memory, 2) if memory is not None else None
    shape["gpu_count"] = gpu_count
    measured = {k: v for k, v in log.measured.items()}
    # a local folder the log served is a name on this machine, never part of a receipt
    folders = [p for p in (log.local_model, local_model_path(log.args.get("model") or log.args.get("model_tag")))
               if p]
    if folders:
        redactor = redactor.with_local(folders)
    predicted: dict[str, Any] | None
    note: str | None
    if log.device == "cpu":     # a host-memory pool: no GPU prediction is comparable, its shape is apart
        shape["device"] = "cpu"
        predicted, note = None, CPU_NOTE
    else:
        predicted, note = (None, "no model config given (--config)") if config is None else \
            predict_terms(log, config, gpu_memory_gib=memory, gpu_name=gpu_name)
    receipt = {
        "schema": RECEIPT_SCHEMA,
        "kind": RECEIPT_KIND,
        "source": {"name": source_name, "sha256": hashlib.sha256(log_bytes).hexdigest()},
        "engine": log.engine,
        "shape": shape,
        "shape_inferred": inferred_keys(log),
        "shape_given": list(given_keys),
        "measured": measured,
        "startup_outcome": log.startup_outcome,
        "predicted": predicted,
        "term_error": term_errors(predicted, measured),
        "prediction_note": note,
        "club3090_commit": club3090_commit,
    }
    redacted: dict[str, Any] = redactor.value(receipt)
    return redacted


SHAPE_KEY_FIELDS: tuple[str, ...] = (
    "model", "quantization", "dtype", "tensor_parallel_size", "pipeline_parallel_size", "gpu_memory_utilization",
    "max_model_len", "kv_cache_dtype", "block_size", "vllm_version", "gpu_name", "gpu_memory_gib", "device",
)


def shape_key(receipt: Mapping[str, Any]) -> tuple[str, ...]:
    """Two receipts with equal keys measured the same serving shape on the same kind of GPU."""
    shape = receipt.get("shape") or {}
    return tuple("" if shape.get(k) is None else str(shape.get(k)).lower() for k in SHAPE_KEY_FIELDS)


def validate_receipt(data: object, where: str) -> list[str]:
    """Problems with a receipt read from disk (empty list: valid)."""
    problems: list[str] = []
    if not isinstance(data, Mapping):
        return [f"{where}: not a JSON object"]
    if data.get("schema") != RECEIPT_SCHEMA or data.get("kind") != RECEIPT_KIND:
        problems.append(f"{where}: not a schema-{RECEIPT_SCHEMA} {RECEIPT_KIND}")
    for key, kind in (("shape", Mapping), ("measured", Mapping), ("source", Mapping)):
        if not isinstance(data.get(key), kind):
            problems.append(f"{where}: {key} missing or not an object")
    raw = data.get("measured")
    measured: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    for term in MEASURED_TERMS:
        value = measured.get(term)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or number_problem(value) is not None or (value < 0 and term not in SIGNED_TERMS)):
            expected = "a finite number" if term in SIGNED_TERMS else "a non-negative finite number"
            problems.append(f"{where}: measured.{term} must be {expected} below 2^53")
    return problems


_TOPOLOGY_CLASS = re.compile(r"(\d+)x(\d+)MiB\Z")


def receipt_for_boot(log_text: str, manifest: Mapping[str, Any], redactor: Redactor, *,
                     club3090_commit: str | None = None) -> dict[str, Any] | None:
    """The receipt of an ``[E]`` boot: its log, with the GPUs from the bundle's manifest."""
    try:
        if not read_startup(log_text, "pt3-boot").found:
            return None
    except InputError:
        return None
    gpu_name = gpu_memory_gib = gpu_count = None
    m = _TOPOLOGY_CLASS.match(str(manifest.get("topology_class") or ""))
    if m is not None:
        gpu_count, gpu_memory_gib = int(m.group(1)), int(m.group(2)) / 1024
    try:
        pairs = ast.literal_eval(str(manifest.get("topology_summary_canonical") or "[]"))
        names = {str(p[0]) for p in pairs if isinstance(p, (list, tuple)) and p}
        gpu_name = names.pop() if len(names) == 1 else None
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        gpu_name = None
    given = {k: v for k, v in (("model", manifest.get("model_id")), ("max_model_len", manifest.get("selected_ctx")),
                               ("vllm_version", manifest.get("engine_version"))) if v is not None}
    return receipt_for_log(log_text, given, redactor, source_name="pt3-boot", gpu_name=gpu_name,
                           gpu_memory_gib=gpu_memory_gib, gpu_count=gpu_count, club3090_commit=club3090_commit)


def receipt_for_log(log_text: str, given: Mapping[str, Any], redactor: Redactor, *, source_name: str,
                    gpu_name: str | None = None, gpu_memory_gib: float | None = None, gpu_count: int | None = None,
                    config: Mapping[str, Any] | None = None, club3090_commit: str | None = None
                    ) -> dict[str, Any] | None:
    """The receipt of one start-up log, with the settings its launch states (the log's own values
    win); None when the log has no vLLM start-up lines."""
    try:
        log = read_startup(log_text, source_name)
    except InputError:
        return None
    if not log.found:
        return None
    filled = fill_missing(log, {k: v for k, v in given.items() if v is not None})
    return build_receipt(log, log_bytes=log_text.encode("utf-8"), source_name=source_name, redactor=redactor,
                         gpu_name=gpu_name, gpu_memory_gib=gpu_memory_gib, gpu_count=gpu_count, config=config,
                         club3090_commit=club3090_commit, given_keys=tuple(filled))
