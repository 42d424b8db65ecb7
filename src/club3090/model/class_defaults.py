"""transformers' class defaults for the text model of a multimodal wrapper.

``save_pretrained`` writes a nested ``text_config`` as its difference from the class defaults, so
a LLaVA config's text model names only what differs from ``LlamaConfig`` / ``MistralConfig``
(llava-hf/llava-v1.6-mistral-7b-hf states no ``hidden_size``, heads or layers). vLLM builds the
text model with the class, so those keys are the class defaults: :func:`complete_text_config`
fills them from :data:`TEXT_CLASS_DEFAULTS` and says which.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

__all__ = ["TEXT_CLASS_DEFAULTS", "WRAPPER_TEXT_TYPES", "complete_text_config"]

# the fields of each text class that size the model (``transformers/models/<type>/configuration_<type>.py``)
TEXT_CLASS_DEFAULTS: Mapping[str, Mapping[str, Any]] = MappingProxyType({
    "llama": MappingProxyType({"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008,
                               "num_hidden_layers": 32, "num_attention_heads": 32, "max_position_embeddings": 2048}),
    "mistral": MappingProxyType({"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 14336,
                                 "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
                                 "max_position_embeddings": 131072, "sliding_window": 4096}),
    "qwen2": MappingProxyType({"vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 22016,
                               "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
                               "max_position_embeddings": 32768}),
})
# the text class a wrapper builds when its text_config names no model_type
WRAPPER_TEXT_TYPES: Mapping[str, str] = MappingProxyType({
    "llava": "llama", "llava_next": "llama", "llava_next_video": "llama", "vipllava": "llama",
    "video_llava": "llama", "llava_onevision": "qwen2",
})
_TEXT_KEY = "text_config"


def complete_text_config(config: Mapping[str, Any]) -> tuple[Mapping[str, Any], tuple[str, ...], str | None]:
    """``config`` with its wrapper's text_config completed from the text class's defaults, the
    keys filled and a note naming them (none filled: ``config`` unchanged, no note)."""
    wrapper = str(config.get("model_type") or "")
    inner = config.get(_TEXT_KEY)
    if wrapper not in WRAPPER_TEXT_TYPES or (inner is not None and not isinstance(inner, Mapping)):
        return config, (), None
    text: Mapping[str, Any] = inner or {}
    text_type = str(text.get("model_type") or WRAPPER_TEXT_TYPES[wrapper])
    defaults = TEXT_CLASS_DEFAULTS.get(text_type)
    if defaults is None:
        return config, (), None
    # a stated null is a value (sliding_window: null), and a key the wrapper states at its top
    # level (vocab_size) is not missing
    filled = {k: v for k, v in defaults.items() if k not in text and k not in config}
    if not filled:
        return config, (), None
    note = (f"{_TEXT_KEY} leaves {', '.join(sorted(filled))} to transformers' {text_type} class defaults: "
            "filled from them (" + ", ".join(f"{k}={v}" for k, v in sorted(filled.items())) + ")")
    return {**config, _TEXT_KEY: {**text, "model_type": text_type, **filled}}, tuple(sorted(filled)), note
