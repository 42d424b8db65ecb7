"""Weights of a checkpoint we only have the config of: a parameter count by layer type and the
bytes per parameter its dtype / quantization stores.

For a folder with ``config.json`` and no safetensors. Quantized checkpoints keep the embeddings,
the LM head and any vision tower in 16-bit (AWQ, GPTQ, AutoRound, compressed-tensors and FP8
recipes leave them unquantized); group-wise formats add one 16-bit scale (and a packed zero point)
per group. The result is an estimate with a band (:data:`BAND`), never a measurement.

``estimate_weights(arch) -> WeightsEstimate``. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from club3090.model.architecture import Architecture, LayerSpec
from club3090.model.config_reading import int_or_zero

__all__ = ["BAND", "WeightsEstimate", "bytes_per_parameter", "estimate_weights"]

BAND = Fraction(10, 100)        # +/- on the estimate: unlisted biases, norms, padding, odd layers


@dataclass(frozen=True, slots=True)
class WeightsEstimate:
    bytes: int
    low_bytes: int
    high_bytes: int
    params: int                 # all parameters
    quantized_params: int       # the part stored at the quantized width
    bytes_per_param: float      # of the quantized part
    scheme: str                 # what was assumed, for the output

    @property
    def note(self) -> str:
        return (f"estimated from config.json: {self.params / 1e9:.2f} B parameters, {self.scheme}; "
                f"{self.low_bytes / 1e9:.1f}-{self.high_bytes / 1e9:.1f} GB (+/- {int(BAND * 100)} %)")


def _loaded_width(dtype: str | None) -> int:
    """vLLM loads an unquantized checkpoint in 16 bits (an fp32 config becomes bf16) unless
    ``--dtype float32`` says otherwise."""
    return 4 if str(dtype or "").lower() in ("float32", "fp32", "float", "torch.float32") else 2


def bytes_per_parameter(quantization: Mapping[str, Any] | None, dtype: str | None = None) -> tuple[Fraction, str]:
    """Bytes one quantized-layer parameter occupies as loaded, and the scheme in words (``dtype``:
    ``--dtype``, for unquantized checkpoints)."""
    if not quantization:
        width = _loaded_width(dtype)
        return Fraction(width), f"{8 * width}-bit (unquantized)"
    method = str(quantization.get("quant_method") or quantization.get("quant_algo") or "").lower()
    bits = int_or_zero(quantization.get("bits")) or int_or_zero(quantization.get("w_bit")) or int_or_zero(quantization.get("num_bits"))
    group = int_or_zero(quantization.get("group_size")) or int_or_zero(quantization.get("q_group_size"))
    groups = quantization.get("config_groups")
    if isinstance(groups, Mapping):                      # compressed-tensors: the first group's weights
        for spec in groups.values():
            weights = spec.get("weights") if isinstance(spec, Mapping) else None
            if isinstance(weights, Mapping):
                bits = bits or int_or_zero(weights.get("num_bits"))
                group = group or int_or_zero(weights.get("group_size"))
                break
    if "mxfp4" in method:
        return Fraction(17, 32), "MXFP4 (4 bits + an 8-bit scale per 32)"
    if "nvfp4" in method or "fp4" in method:
        return Fraction(9, 16), "NVFP4 (4 bits + an 8-bit scale per 16)"
    if "fp8" in method and not bits:
        return Fraction(1), "FP8 (8-bit)"
    if "bitsandbytes" in method:
        four = quantization.get("load_in_4bit") is True
        return (Fraction(9, 16), "bitsandbytes 4-bit") if four else (Fraction(1), "bitsandbytes 8-bit")
    if bits:
        per = Fraction(bits, 8)
        if group > 0:
            per += Fraction(2, group) + Fraction(bits, 8 * group)    # fp16 scale + packed zero per group
        return per, f"{method or 'quantized'} {bits}-bit" + (f", group {group}" if group > 0 else "")
    return Fraction(1), f"{method or 'unknown quantization'} (assumed 8-bit)"


def _attention_params(layer: LayerSpec, arch: Architecture) -> int:
    h = arch.hidden_size
    if layer.kind == "mla":
        heads = arch.num_attention_heads
        rank, rope = arch.kv_lora_rank or 0, arch.qk_rope_head_dim or 0
        v_dim = arch.v_head_dim or arch.head_dim
        return (h * heads * arch.head_dim + h * (rank + rope) + rank * heads * (arch.head_dim - rope + v_dim)
                + heads * v_dim * h)
    if layer.kind in ("full", "sliding", "chunked"):
        q = arch.num_attention_heads * layer.head_dim
        kv = layer.num_kv_heads * (layer.head_dim + (layer.v_head_dim or layer.head_dim))
        return h * (q + kv) + q * h
    if layer.kind == "gdn":
        keys = layer.linear_num_key_heads * layer.linear_key_head_dim
        values = layer.linear_num_value_heads * layer.linear_value_head_dim
        conv = (2 * keys + values) * layer.conv_kernel
        return h * (2 * keys + 2 * values + 2 * layer.linear_num_value_heads) + conv + values * h
    if layer.kind == "mamba2":
        inner = layer.mamba_intermediate
        in_proj = h * (2 * inner + 2 * layer.n_groups * layer.ssm_state_size + layer.mamba_num_heads)
        return in_proj + (inner + 2 * layer.n_groups * layer.ssm_state_size) * layer.conv_kernel + inner * h
    return 0


def _mlp_params(arch: Architecture, index: int) -> int:
    h = arch.hidden_size
    if arch.num_experts and index >= arch.num_dense_layers:
        inter = arch.moe_intermediate_size or arch.intermediate_size
        shared = arch.shared_expert_intermediate_size or 0
        return arch.num_experts * 3 * h * inter + 3 * h * shared + h * arch.num_experts
    return 3 * h * arch.intermediate_size


def estimate_weights(arch: Architecture, dtype: str | None = None) -> WeightsEstimate:
    """The weights vLLM would load, from the config alone (see the module docstring); ``dtype`` is
    ``--dtype`` (None/"auto": 16-bit)."""
    h = arch.hidden_size
    per, scheme = bytes_per_parameter(arch.quantization_config, dtype)
    quantized = arch.quantization_config is not None
    full_width = Fraction(_loaded_width(None if quantized else dtype))
    body = sum(_attention_params(layer, arch) + _mlp_params(arch, i) for i, layer in enumerate(arch.layers))
    if arch.mtp_layers and arch.mtp_layer is not None:      # checkpoints ship their MTP layers
        body += arch.mtp_layers * (_attention_params(arch.mtp_layer, arch) + _mlp_params(arch, arch.num_hidden_layers)
                                   + 2 * h * h)
    embed = arch.vocab_size * h * (1 if arch.tie_word_embeddings else 2)
    vision = 0
    if arch.vision is not None:
        v = arch.vision
        vision = v.num_layers * (4 * v.hidden_size * v.hidden_size + 2 * v.hidden_size * v.intermediate_size)
    unquantized = embed + vision
    total = int(body * (per if quantized else full_width) + unquantized * full_width)
    if not quantized:
        per = full_width
    return WeightsEstimate(bytes=total, low_bytes=int(total * (1 - BAND)), high_bytes=int(total * (1 + BAND)),
                           params=body + unquantized, quantized_params=body if quantized else 0,
                           bytes_per_param=float(per),
                           scheme=scheme + ("; embeddings, LM head and vision tower 16-bit" if quantized else ""))
