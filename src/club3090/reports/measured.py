"""Pricing from this machine's own measurements: promoted receipt groups in the local overlay.

``find_measured`` answers "has this exact serving shape been measured on this kind of GPU here?"
from the entries ``club3090 loop promote`` wrote: the measured KV pool, tokens, blocks and
concurrency then replace the prediction, with confidence ``exact (measured here)``.
``near_receipts`` answers the near case: this machine's receipts of the same model on the same
kind of GPU, TP/PP, vLLM version, eager mode, quantization and dtype at another context,
utilisation, concurrency, batch, block size or KV format (docs/DESIGN.md, the Loop, defines "near").
The pipeline re-predicts each at its own shape and corrects the prediction by the residual
(``fit.correction``). ``residual_for`` summarises the residuals the receipts recorded when they
were written.

Pure: the caller passes the entries (``overlay.load_promoted``) and the shape being priced.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from club3090.fit.correction import EXACT_HERE, Calibration
from club3090.model.slug import sanitize_slug

ROUNDING_GIB = 0.01          # vLLM prints GiB with two decimals
_MEMORY_TOLERANCE_GIB = 0.5  # the same card model reports the same total within this


@dataclass(frozen=True, slots=True)
class MeasuredHere:
    entry_id: str
    available_kv_cache_gib: float | None
    gpu_kv_cache_tokens: int | None
    num_gpu_blocks: int | None
    max_concurrency: float | None
    confidence: str = EXACT_HERE
    band_gib: float = ROUNDING_GIB


def model_token(model: object) -> str:
    """A served model's identity across spellings: ``Org/Name``, ``/models/.../org-name``, a path."""
    text = str(model or "").rstrip("/")
    return sanitize_slug(text.rsplit("/", 1)[-1]) if text else ""


def _same_model(shape_model: object, repo_id: str) -> bool:
    token = model_token(shape_model)
    return bool(token) and token in {model_token(repo_id), sanitize_slug(repo_id)}


def _num(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _same_gpu(shape: Mapping[str, Any], gpu_memory_gib: float | None) -> bool:
    have = _num(shape.get("gpu_memory_gib"))
    return have is not None and gpu_memory_gib is not None and abs(have - gpu_memory_gib) <= _MEMORY_TOLERANCE_GIB


def _matches(shape: Mapping[str, Any], want: Mapping[str, Any]) -> bool:
    for key, value in want.items():
        have = shape.get(key)
        if value is None:
            continue
        if key == "gpu_memory_utilization":
            have_num = _num(have)
            if have_num is None or abs(have_num - float(value)) > 1e-6:
                return False
        elif str(have if have is not None else _DEFAULTS.get(key, "")).lower() != str(value).lower():
            return False
    return True


# what vLLM assumes when a log does not state a setting
_DEFAULTS = {"tensor_parallel_size": 1, "pipeline_parallel_size": 1, "kv_cache_dtype": "auto"}


def find_measured(entries: Sequence[Mapping[str, Any]], *, repo_id: str, gpu_memory_gib: float | None,
                  tensor_parallel_size: int = 1, pipeline_parallel_size: int = 1,
                  max_model_len: int | None = None, gpu_memory_utilization: float | None = None,
                  kv_cache_dtype: str = "auto") -> MeasuredHere | None:
    """The promoted receipt group measuring exactly this shape on this kind of GPU, if any."""
    want = {"tensor_parallel_size": tensor_parallel_size, "pipeline_parallel_size": pipeline_parallel_size,
            "max_model_len": max_model_len, "gpu_memory_utilization": gpu_memory_utilization,
            "kv_cache_dtype": kv_cache_dtype}
    for entry in entries:
        shape = entry.get("shape") or {}
        measured = entry.get("measured") or {}
        if entry.get("status") not in ("validated", "tier1") or not isinstance(shape, Mapping):
            continue
        if not (_same_model(shape.get("model"), repo_id) and _same_gpu(shape, gpu_memory_gib)
                and _matches(shape, want)):
            continue
        tokens, blocks = measured.get("gpu_kv_cache_tokens"), measured.get("num_gpu_blocks")
        return MeasuredHere(str(entry.get("id")), _num(measured.get("available_kv_cache_gib")),
                            int(tokens) if isinstance(tokens, int) else None,
                            int(blocks) if isinstance(blocks, int) else None,
                            _num(measured.get("max_concurrency")))
    return None


def residual_for(receipts: Sequence[Mapping[str, Any]], *, repo_id: str,
                 gpu_memory_gib: float | None) -> tuple[float, float] | None:
    """(mean predicted - measured KV pool GiB, band GiB) over this model's receipts on this GPU
    that carry a prediction; None when there are none."""
    errors = []
    for r in receipts:
        shape = r.get("shape") or {}
        err = _num((r.get("term_error") or {}).get("available_kv_cache_gib"))
        if isinstance(shape, Mapping) and _same_model(shape.get("model"), repo_id) and _same_gpu(shape, gpu_memory_gib) \
                and err is not None:
            errors.append(err)
    if not errors:
        return None
    mean = sum(errors) / len(errors)
    band = max(max(abs(e - mean) for e in errors), ROUNDING_GIB)
    return round(mean, 4), round(band, 4)


# the settings a near shape may change, receipt (vLLM) name -> ServeShape name
NEAR_VARIES: Mapping[str, str] = {
    "max_model_len": "max_model_len", "gpu_memory_utilization": "mem_util", "max_num_seqs": "max_num_seqs",
    "max_num_batched_tokens": "max_num_batched_tokens", "block_size": "block_size", "kv_cache_dtype": "kv_cache_dtype",
}
_VERSION = re.compile(r"v?(\d+)\.(\d+)(?:\.(\d+))?")


@dataclass(frozen=True, slots=True)
class NearReceipt:
    """One receipt of a near shape: its id, the KV pool it measured, its settings in
    ``ServeShape`` names (None: vLLM's default, as in the launch it measured)."""

    id: str
    measured_kv_gib: float
    settings: Mapping[str, Any]


def release(version: object) -> tuple[int, int, int] | None:
    """'0.6.4.post1' -> (0, 6, 4); None when the text is no version."""
    m = _VERSION.match(str(version or "").strip())
    return (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)) if m else None


def _int_or_none(value: object) -> bool:
    return value is None or (isinstance(value, int) and not isinstance(value, bool) and value > 0)


def _near_settings(shape: Mapping[str, Any]) -> dict[str, Any] | None:
    out: dict[str, Any] = {}
    for name, field_name in NEAR_VARIES.items():
        value = shape.get(name)
        if name == "gpu_memory_utilization":
            util = _num(value)
            if value is not None and (util is None or not 0 < util <= 1):
                return None
            value = util
        elif name == "kv_cache_dtype":
            value = str(value).lower() if value is not None else "auto"
        elif not _int_or_none(value):
            return None
        out[field_name] = value
    return out


def _equal_when_stated(have: object, want: object) -> bool:
    return have is None or want is None or str(have).lower() == str(want).lower()


def near_receipts(receipts: Sequence[Mapping[str, Any]], *, repo_id: str, gpu_memory_gib: float | None,
                  tensor_parallel_size: int = 1, pipeline_parallel_size: int = 1,
                  vllm_version: str | None = None, enforce_eager: bool = False, quantization: str | None = None,
                  dtype: str | None = None) -> tuple[NearReceipt, ...]:
    """This machine's receipts of a near shape (see the module docstring): each measured a KV pool
    and states the vLLM release it ran."""
    want_release = release(vllm_version)
    out = []
    for r in receipts:
        shape, measured = r.get("shape"), r.get("measured")
        if not isinstance(shape, Mapping) or not isinstance(measured, Mapping) or want_release is None:
            continue
        pool = _num(measured.get("available_kv_cache_gib"))
        settings = _near_settings(shape)
        if pool is None or pool <= 0 or settings is None or release(shape.get("vllm_version")) != want_release:
            continue
        if not (_same_model(shape.get("model"), repo_id) and _same_gpu(shape, gpu_memory_gib)):
            continue
        if (shape.get("tensor_parallel_size") or 1) != tensor_parallel_size \
                or (shape.get("pipeline_parallel_size") or 1) != pipeline_parallel_size \
                or bool(shape.get("enforce_eager")) != bool(enforce_eager):
            continue
        if not (_equal_when_stated(shape.get("quantization"), quantization)
                and _equal_when_stated(shape.get("dtype"), dtype)):
            continue
        digest = str((r.get("source") or {}).get("sha256") or "")[:16] or "receipt"
        out.append(NearReceipt(digest, pool, settings))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class ReceiptScore:
    """One local receipt as a calibration row: what the boot measured against what was predicted."""

    source: str
    model: str
    gpu_memory_gib: float | None
    max_model_len: int | None
    measured_kv_gib: float | None
    predicted_kv_gib: float | None
    kv_error_gib: float | None          # predicted - measured; None without a prediction

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "model": self.model, "gpu_memory_gib": self.gpu_memory_gib,
                "max_model_len": self.max_model_len, "measured_kv_cache_gib": self.measured_kv_gib,
                "predicted_kv_cache_gib": self.predicted_kv_gib, "kv_error_gib": self.kv_error_gib}


def score_receipts(receipts: Sequence[Mapping[str, Any]]) -> tuple[ReceiptScore, ...]:
    """This machine's receipts (``club3090 calibrate --save``, ``up``) as calibration rows."""
    rows = []
    for r in receipts:
        shape = r.get("shape") or {}
        measured = r.get("measured") or {}
        predicted = r.get("predicted") or {}
        error = (r.get("term_error") or {}).get("available_kv_cache_gib")
        length = shape.get("max_model_len") if isinstance(shape, Mapping) else None
        rows.append(ReceiptScore(
            source=str((r.get("source") or {}).get("name", "")), model=str(shape.get("model") or "?"),
            gpu_memory_gib=_num(shape.get("gpu_memory_gib")), max_model_len=length if isinstance(length, int) else None,
            measured_kv_gib=_num(measured.get("available_kv_cache_gib")),
            predicted_kv_gib=_num(predicted.get("available_kv_cache_gib")) if isinstance(predicted, Mapping) else None,
            kv_error_gib=_num(error)))
    return tuple(rows)


def apply_measured(fit: Any, match: MeasuredHere) -> Any:
    """A ``fit.memory.FitResult`` with the measured KV pool, tokens, blocks and concurrency in
    place of the predicted ones, confidence ``exact`` and a note naming the evidence; the error
    band shrinks to the receipts' rounding. Terms the receipts did not measure stay predicted."""
    from dataclasses import replace

    gib = 2**30
    per_gpu = fit.per_gpu
    if match.available_kv_cache_gib is not None:
        per_gpu = replace(per_gpu, kv_pool_bytes=int(match.available_kv_cache_gib * gib))
    band = int(match.band_gib * gib)
    changes: dict[str, Any] = {
        "per_gpu": per_gpu, "confidence": "exact", "error_band_bytes": band,
        "notes": (*fit.notes, f"{EXACT_HERE}: {match.entry_id}"),
        "calibration": Calibration(EXACT_HERE, band, fit.per_gpu.kv_pool_bytes, per_gpu.kv_pool_bytes,
                                   (match.entry_id,)),
    }
    if match.gpu_kv_cache_tokens is not None:
        changes["kv_cache_tokens"] = match.gpu_kv_cache_tokens
    if match.num_gpu_blocks is not None:
        changes["num_blocks"] = match.num_gpu_blocks
    if match.max_concurrency is not None:
        changes["max_concurrency"] = match.max_concurrency
    return replace(fit, **changes)
