"""The settings vLLM runs a model with: the shape the user asked for (:class:`ServeShape`) and,
per release line, the defaults it fills in (:func:`resolve_defaults` -> :class:`Resolved`).

The release-line rules themselves (engine, batch defaults, MLA, auto-fit, graph capture sizes)
live in ``fit/vllm_rules.py``; this module applies them to one model and one shape.

Pure: no I/O, no environment, no clock, no printing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from club3090.fit.kv_formats import canonical_dtype
from club3090.fit.vllm_rules import (
    AUTO_FIT_UNSET_FROM,
    GRAPH_ESTIMATE_FROM,
    KV_TOKENS_BY_CONCURRENCY_FROM,
    NEWEST_KNOWN_VLLM,
    UTIL_092_FROM,
    batch_defaults,
    capture_sizes,
    choose_engine,
    mamba_cache_mode,
    mla_rule,
    parse_version,
    v0_batched_tokens,
)
from club3090.model.architecture import Architecture
from club3090.model.context import model_max_len
from club3090.units import GiB

__all__ = ["Resolved", "ServeShape", "quant_method", "resolve_defaults"]


@dataclass(frozen=True, slots=True)
class ServeShape:
    """Serving settings. ``None`` means vLLM's default for the chosen version and device."""

    tp: int = 1
    pp: int = 1
    mem_util: float | None = None
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    block_size: int | None = None
    kv_cache_dtype: str = "auto"
    enforce_eager: bool = False
    vllm_version: str | None = None
    num_speculative_tokens: int = 0
    extra_weights_bytes: int = 0
    # additions beyond the DESIGN.md minimum
    dtype: str | None = None                 # --dtype; None/"auto" = the config's dtype (fp32 -> bf16)
    entrypoint: str = "api_server"           # "api_server" | "llm" (batch defaults differ)
    device_name: str | None = None           # e.g. "NVIDIA A100-SXM4-80GB" (batch defaults exclude A100/GB10)
    nvswitch: bool | None = None             # None: assumed for >= 70 GiB data-centre parts at TP > 1
    kv_cache_memory_bytes: int | None = None  # --kv-cache-memory-bytes (per GPU)
    disable_hybrid_kv_cache_manager: bool = False
    mamba_ssm_cache_dtype: str | None = None  # None: config's value, else the model dtype
    enable_prefix_caching: bool | None = None
    # vLLM's release-line rules (fit/vllm_rules.py); None = that version's default
    engine: str | None = None                # "v0" | "v1" (VLLM_USE_V1) on the 0.8-0.10 lines
    enable_chunked_prefill: bool | None = None   # V0 only; V1 always chunks
    mla_disabled: bool = False               # VLLM_MLA_DISABLE=1
    quantization: str | None = None          # --quantization; None = the config's quant_method
    speculative_method: str | None = None    # "mtp" | "eagle" | "eagle3" | "dflash" | "ngram" | "draft_model"
    mm_encoder_profiling: bool = True        # False: no encoder dummy batch (language-only / images 0)
    pp_layer_partition: tuple[int, ...] | None = None   # VLLM_PP_LAYER_PARTITION; None = vLLM's even split
    distributed_executor_backend: str | None = None     # "ray" (multi-node) | "mp"; None = vLLM's choice
    compute_capability: str | None = None    # e.g. "8.6"; FP8 weights run as Marlin W8A16 below 8.9
    sampler: str | None = None               # the top-k / top-p path a log names ("FlashInfer", "Triton",
                                             # "PyTorch-native"); None = the release line's default
                                             # (vllm_rules.sampler_path)


@dataclass(frozen=True, slots=True)
class Resolved:
    vllm_version: str
    mem_util: float
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    kv_cache_dtype: str
    model_dtype: str
    cudagraphs_subtracted: bool
    capture_sizes: int
    kv_tokens_formula: str          # "blocks" (<= 0.20.0) | "concurrency"
    engine: str = "v1"              # "v0" | "v1"
    chunked_prefill: bool = True
    use_mla: bool = True
    max_model_len_auto: bool = False   # vLLM fits max_model_len itself (-1 / auto, or unset from 0.26)
    mamba_cache_mode: str = "none"     # "align": state layers keep 2 pages per request (prefix caching)


def quant_method(arch: Architecture, shape: ServeShape) -> str | None:
    if shape.quantization:
        return shape.quantization
    qc = arch.quantization_config or {}
    method = qc.get("quant_method")
    return str(method) if method else None


def resolve_defaults(arch: Architecture, shape: ServeShape, gpu_memory_bytes: Sequence[int]) -> Resolved:
    """The settings vLLM would run with: the shape's, else the release line's defaults."""
    version = shape.vllm_version or NEWEST_KNOWN_VLLM
    ver = parse_version(shape.vllm_version)
    num_spec = int(shape.num_speculative_tokens or 0)
    spec_method = shape.speculative_method or ("mtp" if num_spec and arch.mtp_layers else None)
    choice = choose_engine(ver, requested=shape.engine, pp=int(shape.pp),
                           kv_cache_dtype=str(shape.kv_cache_dtype or "auto"),
                           has_state_layers=bool(arch.state_layers), spec_method=spec_method,
                           ray=shape.distributed_executor_backend == "ray")
    util = shape.mem_util if shape.mem_util is not None else (0.92 if ver >= UTIL_092_FROM else 0.90)
    device_gib = min(gpu_memory_bytes) / GiB if gpu_memory_bytes else 0.0
    mns, mnbt = batch_defaults(ver, choice.engine, device_gib=device_gib, device_name=shape.device_name or "",
                               api_server=shape.entrypoint != "llm")
    max_num_seqs = shape.max_num_seqs or mns
    auto = shape.max_model_len is not None and shape.max_model_len < 0
    model_len = model_max_len(arch) or 0
    max_len = model_len if auto or not shape.max_model_len else shape.max_model_len
    auto = auto or (shape.max_model_len is None and choice.engine == "v1" and ver >= AUTO_FIT_UNSET_FROM)
    use_mla = any(layer.kind == "mla" for layer in arch.layers)
    if use_mla:
        use_mla = mla_rule(ver, quant_method=quant_method(arch, shape), disabled=shape.mla_disabled,
                           quant_config=arch.quantization_config)[0]
    chunked = True
    if choice.engine == "v0":
        chunked, mnbt = v0_batched_tokens(
            ver, max_model_len=max_len, chunked=shape.enable_chunked_prefill,
            sliding_window=any(layer.kind == "sliding" for layer in arch.layers), speculative=num_spec > 0,
            multimodal=arch.has_vision, mla=use_mla)
    if shape.max_num_batched_tokens:
        mnbt = shape.max_num_batched_tokens
    elif choice.engine == "v1":
        mnbt = max(mnbt, max_num_seqs, 1)
    model_dtype = canonical_dtype(shape.dtype) if shape.dtype and shape.dtype != "auto" else None
    if model_dtype is None:
        cfg = canonical_dtype(arch.torch_dtype)
        model_dtype = "bfloat16" if cfg in (None, "float32") else cfg
    graphs = choice.engine == "v1" and ver >= GRAPH_ESTIMATE_FROM and not shape.enforce_eager
    if shape.enforce_eager:
        n_sizes = 0
    elif choice.engine == "v0":     # worker/model_runner.py: _BATCH_SIZES_TO_CAPTURE cut at max_num_seqs
        n_sizes = len([s for s in [1, 2, 4, *range(8, 257, 8)] if s <= max_num_seqs])
    else:
        n_sizes = len(capture_sizes(max_num_seqs, num_spec))
    return Resolved(vllm_version=version, mem_util=float(util), max_model_len=int(max_len),
                    max_num_seqs=int(max_num_seqs), max_num_batched_tokens=int(max(mnbt, 1)),
                    kv_cache_dtype=shape.kv_cache_dtype or "auto", model_dtype=model_dtype,
                    cudagraphs_subtracted=graphs, capture_sizes=n_sizes,
                    kv_tokens_formula="concurrency" if ver >= KV_TOKENS_BY_CONCURRENCY_FROM else "blocks",
                    engine=choice.engine, chunked_prefill=chunked, use_mla=use_mla, max_model_len_auto=auto,
                    mamba_cache_mode=mamba_cache_mode(ver, choice.engine, prefix_caching=shape.enable_prefix_caching,
                                                      has_state_layers=bool(arch.state_layers)))
