"""A stratum-1 stop and a model's facts as the ``--json`` objects `inspect` and `kv-calc` print."""

from __future__ import annotations

from typing import Any

from club3090.model.spec import ModelSpec
from club3090.outcome import Stop


def stop_to_json(stop: Stop) -> dict[str, Any]:
    """``{"stratum": 1, "reason": <bare seed token>, "detail": <sub-reason>, "message": ..., ...}``."""
    detail = dict(stop.detail)
    out: dict[str, Any] = {"stratum": int(stop.stratum), "reason": stop.reason.value,
                           "detail": stop.sub_reason or "", "message": detail.pop("message", "")}
    out.update(detail)
    return out


def spec_to_json(spec: ModelSpec) -> dict[str, Any]:
    """The flat ``inspect --json`` object (stable keys; bytes are integers)."""
    a = spec.arch
    q = spec.quantization
    return {
        "source": spec.source, "ref": spec.ref, "revision": spec.revision, "commit": spec.commit,
        "confidence": spec.confidence,
        "curated": None if spec.curated is None else {"model": spec.curated.model_id,
                                                     "variant": spec.curated.variant_id,
                                                     "format": spec.curated.format},
        "architecture": a.architecture, "model_type": a.model_type,
        "config_architectures": list(a.config_architectures),
        "num_hidden_layers": a.num_hidden_layers, "hidden_size": a.hidden_size,
        "num_attention_heads": a.num_attention_heads, "num_key_value_heads": a.num_key_value_heads,
        "head_dim": a.head_dim, "intermediate_size": a.intermediate_size, "vocab_size": a.vocab_size,
        "max_position_embeddings": a.max_position_embeddings, "max_ctx_supported": spec.max_ctx_supported,
        "tie_word_embeddings": a.tie_word_embeddings, "layer_kinds": list(a.layer_kinds),
        "sliding_window": a.sliding_window, "num_experts": a.num_experts,
        "num_experts_per_tok": a.num_experts_per_tok, "moe_intermediate_size": a.moe_intermediate_size,
        "shared_expert_intermediate_size": a.shared_expert_intermediate_size,
        "kv_lora_rank": a.kv_lora_rank, "qk_rope_head_dim": a.qk_rope_head_dim, "mtp_layers": a.mtp_layers,
        "weights_bytes": spec.weights_bytes, "dtype_bytes": dict(spec.dtype_bytes),
        "quantization": q.method if q else None, "quantization_bits": q.bits if q else None,
        "quantization_scheme": q.scheme if q else None, "kv_cache_scheme": q.kv_cache_scheme if q else None,
        "compute_dtype": spec.compute_dtype,
        "requires_trust_remote_code": spec.requires_trust_remote_code, "has_mtp_head": spec.has_mtp_head,
        "has_vision": spec.has_vision, "footprint_bytes": spec.footprint_bytes,
        "weight_files": [f.name for f in spec.weight_files],
        "download_files": [{"name": f.name, "size_bytes": f.size_bytes} for f in spec.download_files],
        "gguf_files": list(spec.gguf_files),
        "local_path": str(spec.local_path) if spec.local_path else None,
        "unpriceable_reason": a.unpriceable_reason, "provenance": dict(spec.provenance),
    }
