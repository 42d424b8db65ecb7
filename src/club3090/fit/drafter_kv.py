"""The KV-cache layers a speculative drafter adds, by drafter kind, as vLLM allocates them.

vLLM registers every attention layer of a separate draft model in the same forward context as the
target's, so the cache specs it plans (``v1/core/kv_cache_utils.py::get_kv_cache_configs``) hold
both: the drafter's pages join the KV groups with its own geometry (KV heads, head size), page
sizes are unified across both and the drafter's layers count in every request's blocks.

- ``eagle`` / ``eagle3``: the draft head's decoder layer(s) attend over every earlier token
  (``v1/spec_decode/eagle.py``): full-context KV layers.
- ``dflash``: each draft layer stores the K/V it projects from the target's hidden states for every
  context position (``v1/spec_decode/dflash.py``, ``precompute_and_store_context_kv``): full-context
  KV layers.
- ``draft_model``: a whole separate model: all of its cache layers (attention and state).
- ``mtp``: built-in MTP layers belong to the target's config (``num_nextn_predict_layers``) and are
  priced from it, not here.
- ``mtp_assistant`` (Gemma 4 assistant): every draft layer is a KV-sharing layer that reads the
  target's cache (``v1/spec_decode/gemma4.py``, ``_setup_gemma4_kv_sharing``): nothing added.
- ``ngram`` / ``suffix``: no model, nothing added.

Pure: no I/O.
"""

from __future__ import annotations

from club3090.model.architecture import Architecture, LayerSpec

__all__ = ["KV_SHARING_METHODS", "OWN_KV_METHODS", "drafter_kv_layers", "drafter_method"]

OWN_KV_METHODS = ("eagle", "eagle3", "dflash", "draft_model")
KV_SHARING_METHODS = ("mtp_assistant",)


def drafter_method(drafter: Architecture) -> str:
    """The speculative method a draft checkpoint's architecture name implies (vLLM's
    ``SpeculativeConfig`` does the same from ``architectures``)."""
    name = (drafter.architecture or "").lower()
    if "dflash" in name:
        return "dflash"
    if "eagle3" in name:
        return "eagle3"
    if "eagle" in name:
        return "eagle"
    if "assistant" in name or "gemma4mtp" in name:
        return "mtp_assistant"
    return "draft_model"


def drafter_kv_layers(method: str | None, drafter: Architecture | None) -> tuple[LayerSpec, ...]:
    """Cache layers ``drafter`` adds to the target's KV groups when speculating with ``method``
    (the method a draft config implies when None)."""
    if drafter is None:
        return ()
    kind = (method or drafter_method(drafter)).lower()
    if kind not in OWN_KV_METHODS:
        return ()
    if kind == "draft_model":
        return tuple(layer for layer in drafter.layers if layer.is_attention or layer.is_state)
    return tuple(layer for layer in drafter.layers if layer.is_attention)
