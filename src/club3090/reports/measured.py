"""Pricing from this machine's own measurements: promoted receipt groups in the local overlay.

``find_measured`` answers "has this exact serving shape been measured on this kind of GPU here?"
from the entries ``club3090 loop promote`` wrote: the measured KV pool, tokens, blocks and
concurrency then replace the prediction, with confidence ``exact (measured here)``.
``residual_for`` answers the near case (same model and GPU, another context or utilisation):
the mean per-term error of the matching receipts, to subtract from a prediction, with a band
of the largest deviation seen (never below the receipts' rounding).

Pure: the caller passes the entries (``overlay.load_promoted``) and the shape being priced.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from club3090.model.slug import sanitize_slug

EXACT_HERE = "exact (measured here)"
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
    changes: dict[str, Any] = {
        "per_gpu": per_gpu, "confidence": "exact", "error_band_bytes": int(match.band_gib * gib),
        "notes": (*fit.notes, f"{EXACT_HERE}: {match.entry_id}"),
    }
    if match.gpu_kv_cache_tokens is not None:
        changes["kv_cache_tokens"] = match.gpu_kv_cache_tokens
    if match.num_gpu_blocks is not None:
        changes["num_blocks"] = match.num_gpu_blocks
    if match.max_concurrency is not None:
        changes["max_concurrency"] = match.max_concurrency
    return replace(fit, **changes)
