"""A multimodal config's vision tower, as vLLM's encoder profiling sizes it.

vLLM's profile run (``v1/worker/gpu_model_runner.py::profile_run``) encodes a dummy batch of the
largest images the processor accepts: ``encoder budget = max(max_num_batched_tokens, tokens per
item)`` (``v1/core/encoder_cache_manager.py::compute_encoder_budget``) and ``budget // tokens per
item`` items at once. What that costs depends on the tower's width and on how many patches one
item is, which the config states only partly: the processor's pixel limits are family facts
(:data:`TOKENS_PER_ITEM`).

``vision_spec(config) -> VisionSpec | None``. Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from club3090.model.config_reading import MAX_DIMENSION, _int, int_or_zero

__all__ = ["TOKENS_PER_ITEM", "VISION_SIZE_KEYS", "VisionSpec", "vision_problems", "vision_spec"]

# Every size the tower is read from (``vision_config`` keys; the last three may sit at the top
# level): under the same "non-negative and below 2^31" rule as the text model's dimensions.
VISION_SIZE_KEYS = ("embed_dim", "hidden_size", "width", "intermediate_size", "depth", "num_hidden_layers",
                    "layers", "spatial_merge_size", "pooling_kernel_size", "image_size", "patch_size",
                    "default_output_length")
TOP_LEVEL_KEYS = ("vision_soft_tokens_per_image", "mm_tokens_per_image")
MAX_MLP_RATIO = 1024.0

# The largest image a family's processor admits, in LM tokens (after patch merging):
# Qwen2-VL / Qwen2.5-VL max_pixels 12,845,056 at 28 x 28 pixels per token; Qwen3-VL / Qwen3.5
# longest_edge 16,777,216 at 32 x 32 -> 16,384 tokens either way.
TOKENS_PER_ITEM: Mapping[str, int] = {"qwen": 16_384}


@dataclass(frozen=True, slots=True)
class VisionSpec:
    hidden_size: int
    intermediate_size: int
    num_layers: int
    tokens_per_item: int          # LM tokens one maximal image becomes
    patches_per_token: int        # encoder patches behind one LM token (spatial merge / pooling)


def vision_problems(config: Mapping[str, Any]) -> list[str]:
    """Why the vision tower's sizes make the config unpriceable: a size negative or past 2^31, a
    ``mlp_ratio`` that is not a finite number in (0, 1024]. Empty when they are sane."""
    vc = config.get("vision_config")
    if not isinstance(vc, Mapping):
        return []
    problems = []
    for where, key in [*(("vision_config", k) for k in VISION_SIZE_KEYS), *(("", k) for k in TOP_LEVEL_KEYS)]:
        raw = (vc if where else config).get(key)
        if _out_of_bounds(raw):
            problems.append(f"{where + '.' if where else ''}{key} {_shown(raw)} is outside 0..{MAX_DIMENSION}")
    ratio = vc.get("mlp_ratio")
    if ratio is not None and not (isinstance(ratio, (int, float)) and not isinstance(ratio, bool)
                                  and math.isfinite(ratio) and 0 < ratio <= MAX_MLP_RATIO):
        problems.append(f"vision_config.mlp_ratio {_shown(ratio)} is not a number in (0, {MAX_MLP_RATIO:g}]")
    return problems


def _out_of_bounds(value: Any) -> bool:
    """A size outside 0..MAX_DIMENSION, read as ``int_or_zero`` reads it; a float that is not a
    finite integer-sized number (1e308, inf) is out of bounds too."""
    if isinstance(value, float):
        return not (math.isfinite(value) and 0 <= value <= MAX_DIMENSION)
    number = _int(value)
    return number is not None and not 0 <= number <= MAX_DIMENSION


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def vision_spec(config: Mapping[str, Any]) -> VisionSpec | None:
    """The vision tower of a multimodal config, or None (text-only, too little to size it, or
    sizes ``vision_problems`` refuses)."""
    vc = config.get("vision_config")
    if not isinstance(vc, Mapping) or vision_problems(config):
        return None
    model_type = str(vc.get("model_type") or config.get("model_type") or "").lower()
    width = int_or_zero(vc.get("embed_dim")) or int_or_zero(vc.get("hidden_size")) or int_or_zero(vc.get("width"))
    inter = int_or_zero(vc.get("intermediate_size"))
    if not inter and width:
        inter = int(float(vc.get("mlp_ratio") or 4) * width)
    layers = int_or_zero(vc.get("depth")) or int_or_zero(vc.get("num_hidden_layers")) or int_or_zero(vc.get("layers"))
    if not (width and inter and layers):
        return None
    merge = int_or_zero(vc.get("spatial_merge_size"))
    if merge:                                          # Qwen-VL family: merge x merge patches per token
        tokens = TOKENS_PER_ITEM["qwen"] if "qwen" in model_type else 0
        per_token = merge * merge
    else:
        tokens = (int_or_zero(config.get("vision_soft_tokens_per_image")) or int_or_zero(vc.get("default_output_length"))
                  or int_or_zero(config.get("mm_tokens_per_image")))
        pool = int_or_zero(vc.get("pooling_kernel_size")) or 0
        image, patch = int_or_zero(vc.get("image_size")), int_or_zero(vc.get("patch_size"))
        if pool:
            per_token = pool * pool
        elif tokens and image and patch:
            per_token = max(1, (image // patch) ** 2 // tokens)
        else:
            per_token = 1
        if not tokens and image and patch:
            tokens = (image // patch) ** 2
    if tokens <= 0:
        return None
    return VisionSpec(hidden_size=width, intermediate_size=inter, num_layers=layers,
                      tokens_per_item=tokens, patches_per_token=per_token)
