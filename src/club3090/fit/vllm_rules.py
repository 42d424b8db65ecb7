"""vLLM's start-up rules by release line: which engine runs, what it profiles with, what it logs.

Each rule names the vLLM code it follows (paths relative to the ``vllm/`` package, at the release
line where it applies). A missing version is priced over :data:`RELEASES_IN_USE` and the tightest
line answers (``memory.predict``); an unparseable one as :data:`NEWEST_KNOWN_VLLM`; the answer says
which (:func:`version_note`).

- Engine (``engine/arg_utils.py::_is_v1_supported_oracle``, ``envs.py`` ``VLLM_USE_V1``): V0 before
  0.8.0; V1 by default from 0.8.0, falling back to V0 for what that line's V1 lacked; V1 only from
  0.11.0 (the V0 engine was removed).
- V0 chunked prefill (``engine/arg_utils.py::_set_default_args_v0``, 0.7-0.10; the same rule in
  ``create_engine_config`` before): on by default only for ``max_model_len`` > 32K on CUDA without a
  sliding window, speculative decoding, multimodal inputs or MLA (from 0.6.0; off before). Without it the scheduler's token
  budget is ``max(max_model_len, 2048)`` (5,120 at least for multimodal models;
  ``config.py::SchedulerConfig``) and ``worker/model_runner.py::profile_run`` runs a batch of that
  many tokens: the activation peak grows with the context. V1 always chunks.
- MLA (``config.py::ModelConfig.use_mla`` / ``get_head_size``): absent before 0.7.1 (DeepSeek's
  192-wide heads were padded to 256 for FlashAttention, K and V per head); in 0.7.x disabled for
  quantizations other than fp8 / compressed-tensors, leaving full K and V of 192 per head;
  ``VLLM_MLA_DISABLE=1`` does the same in any version.
- FP8 weights on GPUs without FP8 (compute capability below 8.9) run as Marlin W8A16
  (``model_executor/layers/quantization/utils/marlin_utils_fp8.py::prepare_fp8_layer_for_marlin``):
  block-wise scales are expanded to one 16-bit scale per ``block_k`` weights of every output
  column, 2 / ``block_k`` bytes per FP8 weight byte (1/64 at the usual 128 x 128 blocks).
- Top-k / top-p sampler of V1's profiling run (``v1/sample/ops/topk_topp_sampler.py``): the
  PyTorch-native path sorts the whole logits tensor (sorted values, int64 indices, the sort's
  workspace, probabilities), a kernel path (FlashInfer, later Triton) does not. FlashInfer was not a
  default dependency before 0.11 and was switched off by default in PR #26859 (October 2025); the
  native sort stayed the default until the 0.17 line (a Triton kernel, then FlashInfer again by
  default in PR #40376). Observed: Qwen3-14B on an H100 at 1,024 sequences profiles a 5.64 GiB peak
  on 0.15 and 0.16 and 2.23 GiB on 0.17 and 0.18 (llm-d-planner's version sweep). Where a kernel
  path was in fact installed the native price over-states the peak: the safe direction.
- Prefix caching of hybrid state models (``v1/kv_cache_interface.py::MambaSpec``): with prefix
  caching on, a Mamba / linear-attention layer runs in ``align`` mode (PR #30877, merged January
  2026; the first release line carrying it is taken as 0.15) and keeps 2 state pages per request
  plus one per speculative token instead of 1 + speculative. Hybrid models leave prefix caching
  off unless asked (``--enable-prefix-caching``) until PR #50991 turned it on by default (August
  2026; taken as the 0.28 line). A short context shows it most: Qwen3.6-27B at 4,096 tokens,
  41.03 GiB of KV, logs 71.42x concurrency, which only ``align`` reproduces.
- ``max_model_len`` auto-fit (``v1/core/kv_cache_utils.py::_auto_fit_max_model_len``, vLLM PR #29431):
  ``-1`` / ``auto`` from 0.12.0; an unset length is auto-fitted when the model's maximum does not
  fit from 0.26.0 (observed in a public 0.26 start-up; earlier lines refuse).

Pure: no I/O, no environment, no clock.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

Version = tuple[int, int, int]

# vLLM's ``--speculative-config`` methods: what kv-calc accepts, and which catalog drafters price
# speculative tokens under vLLM (``mtp_gguf`` and ``dspark`` are llama.cpp drafters, not here)
SPECULATIVE_METHODS = ("mtp", "eagle", "eagle3", "dflash", "draft_model", "ngram", "suffix", "mtp_assistant")
NEWEST_KNOWN_VLLM = "0.33.0"
# the release lines a version-less answer is priced over (the tightest wins): the first V1-only
# line, the last with the full-sort sampler, the last with CUDA graphs outside the budget, the
# first that subtracts their estimate, and today's
RELEASES_IN_USE: tuple[str, ...] = ("0.11.0", "0.16.0", "0.20.0", "0.21.0", NEWEST_KNOWN_VLLM)
V1_DEFAULT_FROM: Version = (0, 8, 0)
V0_REMOVED_FROM: Version = (0, 11, 0)
PP_MP_ON_V1_FROM: Version = (0, 9, 0)      # 0.8.x V1 ran PP only with the Ray executor
FP8_KV_ON_V1_FROM: Version = (0, 9, 0)     # 0.8.x V1 needed FlashAttention 3 (Hopper) for fp8 KV
STATE_MODELS_ON_V1_FROM: Version = (0, 10, 0)
SPEC_ON_V1_FROM: Version = (0, 9, 0)       # 0.8.x V1 fell back for EAGLE / ngram / draft models
DRAFT_MODEL_ON_V1_FROM: Version = (0, 11, 0)
MLA_FROM: Version = (0, 7, 1)
MLA_ANY_QUANT_FROM: Version = (0, 8, 0)
V0_CHUNKED_DEFAULT_2048_FROM: Version = (0, 6, 4)
V0_CHUNKED_AUTO_FROM: Version = (0, 6, 0)  # chunked prefill on by default for contexts > 32K
BATCH_DEFAULTS_BY_DEVICE_FROM: Version = (0, 10, 2)
GRAPH_ESTIMATE_FROM: Version = (0, 21, 0)  # VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS on by default
UTIL_092_FROM: Version = (0, 21, 0)
KV_TOKENS_BY_CONCURRENCY_FROM: Version = (0, 20, 1)  # 0.20.0 still logs blocks // groups x block size
AUTO_FIT_FLAG_FROM: Version = (0, 12, 0)
AUTO_FIT_UNSET_FROM: Version = (0, 26, 0)
KERNEL_SAMPLER_FROM: Version = (0, 17, 0)
MAMBA_ALIGN_FROM: Version = (0, 15, 0)     # prefix caching of state layers in align mode
HYBRID_PREFIX_CACHING_DEFAULT_FROM: Version = (0, 28, 0)  # top-k / top-p without a full sort (Triton, then FlashInfer)
V0_LONG_CONTEXT = 32_768
V0_MIN_BATCHED_TOKENS = 2_048
V0_MULTIMODAL_MIN_BATCHED_TOKENS = 5_120
MLA_QUANTS_07 = ("fp8", "compressed-tensors", "compressed_tensors")
FP8_NATIVE_FROM_SM = (8, 9)                 # Ada / Hopper and later run FP8 GEMMs natively
FP8_DEFAULT_BLOCK_K = 128                   # the block size of vLLM-served block-FP8 checkpoints

VERSION_RE = re.compile(r"\s*v?(\d+)\.(\d+)(?:\.(\d+))?")   # '0.22', 'v0.19.1', '0.8.3.dev172+g2b93162f'


def parse_version(version: str | None) -> Version:
    """'0.8.3.dev172+g2b93162f' -> (0, 8, 3); None/unparseable -> the newest known version."""
    match = VERSION_RE.match(str(version)) if version else None
    if not match:
        match = VERSION_RE.match(NEWEST_KNOWN_VLLM)
        assert match is not None
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)


def engine_release(engine: Any) -> str | None:
    """The release a catalog engine runs: its tag's version; a vLLM nightly is today's line (it
    is not a version-less answer: the build is known to be at least the newest release)."""
    if engine is None:
        return None
    return engine.vllm_version or (NEWEST_KNOWN_VLLM if engine.is_vllm else None)


def version_note(version: str | None) -> str | None:
    """What the output says when the version is not one we can read."""
    if version and VERSION_RE.match(str(version)):
        return None
    said = f"vLLM version {version!r} unreadable" if version else "vLLM version not given"
    return f"{said}: priced with today's release line ({NEWEST_KNOWN_VLLM})"


@dataclass(frozen=True, slots=True)
class EngineChoice:
    engine: str                 # "v0" | "v1"
    reason: str | None          # why V1 fell back to V0 (None when it did not)


def choose_engine(ver: Version, *, requested: str | None, pp: int, kv_cache_dtype: str,
                  has_state_layers: bool, spec_method: str | None, ray: bool = False) -> EngineChoice:
    """V0 or V1 for this release line and feature set (``_is_v1_supported_oracle``); ``ray``: the
    Ray executor (``--distributed-executor-backend ray``, every multi-node launch)."""
    if ver < V1_DEFAULT_FROM:
        return EngineChoice("v0", None)
    if ver >= V0_REMOVED_FROM:
        return EngineChoice("v1", None)
    if requested in ("v0", "v1"):
        return EngineChoice(requested, "VLLM_USE_V1 set explicitly" if requested == "v0" else None)
    if pp > 1 and ver < PP_MP_ON_V1_FROM and not ray:
        return EngineChoice("v0", "pipeline parallelism without Ray falls back to V0")
    if kv_cache_dtype.startswith("fp8") and ver < FP8_KV_ON_V1_FROM:
        return EngineChoice("v0", "--kv-cache-dtype fp8 falls back to V0 (FlashAttention 3 only)")
    if has_state_layers and ver < STATE_MODELS_ON_V1_FROM:
        return EngineChoice("v0", "Mamba / linear-attention models fall back to V0")
    if spec_method == "draft_model" and ver < DRAFT_MODEL_ON_V1_FROM:
        return EngineChoice("v0", "speculative decoding with a draft model falls back to V0")
    if spec_method in ("eagle", "eagle3", "ngram") and ver < SPEC_ON_V1_FROM:
        return EngineChoice("v0", f"speculative method {spec_method} falls back to V0")
    return EngineChoice("v1", None)


def mamba_cache_mode(ver: Version, engine: str, *, prefix_caching: bool | None, has_state_layers: bool) -> str:
    """``align`` or ``none``: how many state pages a request of a hybrid model holds."""
    if not has_state_layers or engine != "v1" or ver < MAMBA_ALIGN_FROM:
        return "none"
    on = prefix_caching if prefix_caching is not None else ver >= HYBRID_PREFIX_CACHING_DEFAULT_FROM
    return "align" if on else "none"


def native_sampler(ver: Version, engine: str) -> bool:
    """Whether the profiling run's sampler sorts the full logits (V1 before the 0.17 line)."""
    return engine == "v1" and ver < KERNEL_SAMPLER_FROM


def batch_defaults(ver: Version, engine: str, *, device_gib: float, device_name: str,
                   api_server: bool) -> tuple[int, int]:
    """(max_num_seqs, max_num_batched_tokens) when the user sets neither, for V1 with chunked
    prefill (``engine/arg_utils.py::get_batch_defaults`` / ``_set_default_args_v1``). V0's token
    budget depends on chunked prefill: :func:`v0_batched_tokens`."""
    if engine == "v0":
        return 256, 0
    name = device_name.lower()
    if ver >= BATCH_DEFAULTS_BY_DEVICE_FROM and device_gib >= 160:
        return 1024, 16384
    if ver >= BATCH_DEFAULTS_BY_DEVICE_FROM and device_gib >= 70 and "a100" not in name and "gb10" not in name:
        return 1024, (8192 if api_server else 16384)
    return 256, (2048 if api_server else 8192)


def v0_batched_tokens(ver: Version, *, max_model_len: int, chunked: bool | None, sliding_window: bool,
                      speculative: bool, multimodal: bool, mla: bool) -> tuple[bool, int]:
    """(chunked prefill on, scheduler token budget) of the V0 engine when the user leaves both unset
    (``chunked`` None) or sets only chunked prefill."""
    if chunked is None:
        chunked = (ver >= V0_CHUNKED_AUTO_FROM and max_model_len > V0_LONG_CONTEXT and not sliding_window and not speculative
                   and not multimodal and not mla)
    if chunked:
        return True, (V0_MIN_BATCHED_TOKENS if ver >= V0_CHUNKED_DEFAULT_2048_FROM else 512)
    tokens = max(max_model_len, V0_MIN_BATCHED_TOKENS)
    if multimodal:
        tokens = max(tokens, V0_MULTIMODAL_MIN_BATCHED_TOKENS)
    return False, tokens


def _fp8_everywhere(quant_config: Mapping[str, Any] | None) -> bool:
    """compressed-tensors with fp8 weights and fp8 input activations in every config group."""
    groups = (quant_config or {}).get("config_groups")
    if not isinstance(groups, Mapping) or not groups:
        return False
    for group in groups.values():
        if not isinstance(group, Mapping):
            return False
        for key in ("weights", "input_activations"):
            spec = group.get(key)
            if not isinstance(spec, Mapping):
                return False
            if str(spec.get("type", "")).lower() != "float" or int(spec.get("num_bits") or 0) != 8:
                return False
    return True


def mla_rule(ver: Version, *, quant_method: str | None, disabled: bool,
             quant_config: Mapping[str, Any] | None = None) -> tuple[bool, int | None, str | None]:
    """(MLA used, padded head size when not, why not) for a DeepSeek-style MLA model.

    0.7.x (``config.py::ModelConfig.use_mla``) kept MLA only for fp8 and for compressed-tensors
    checkpoints whose every group has fp8 weights and activations; anything else fell back to
    full K and V per head."""
    if disabled:
        return False, None, "VLLM_MLA_DISABLE: full K and V per head"
    if ver < MLA_FROM:
        return False, 256, f"vLLM {'.'.join(map(str, ver))} predates MLA (0.7.1): full K and V, heads padded to 256"
    if ver < MLA_ANY_QUANT_FROM and quant_method:
        method = quant_method.lower()
        if method not in MLA_QUANTS_07:
            return False, None, f"vLLM 0.7 disables MLA with {quant_method} quantization: full K and V per head"
        if method != "fp8" and quant_config is not None and not _fp8_everywhere(quant_config):
            return False, None, ("vLLM 0.7 disables MLA for compressed-tensors without fp8 weights and "
                                 "activations: full K and V per head")
    return True, None, None


def fp8_marlin_scale_ratio(quant_method: str | None, weight_block_size: object,
                           compute_capability: str | None) -> Fraction:
    """Extra loaded bytes per FP8 weight byte when vLLM runs FP8 weights through Marlin.

    Below compute capability 8.9 (``is_fp8_marlin_supported`` path) every block-quantized linear
    gets ``(K / block_k) x N`` 16-bit scales, 2 / block_k of its FP8 weight bytes. A checkpoint
    without ``weight_block_size`` is taken as 128-wide blocks (its per-channel scales would cost
    nothing; the larger figure is the safe side). Unknown capability: no change (native FP8)."""
    if (quant_method or "").lower() != "fp8" or not compute_capability:
        return Fraction(0)
    match = re.match(r"\s*(\d+)\.(\d+)", str(compute_capability))
    if not match or (int(match.group(1)), int(match.group(2))) >= FP8_NATIVE_FROM_SM:
        return Fraction(0)
    block_k = FP8_DEFAULT_BLOCK_K
    if isinstance(weight_block_size, (list, tuple)) and len(weight_block_size) == 2:
        try:
            block_k = max(1, int(weight_block_size[1]))
        except (TypeError, ValueError):
            block_k = FP8_DEFAULT_BLOCK_K
    return Fraction(2, block_k)


MLA_FORCED_BLOCKS_FROM: Version = (0, 7, 3)     # FlashMLA (Hopper) lands; CUTLASS MLA on Blackwell later
MLA_FORCED_BLOCKS_UNTIL: Version = (0, 13, 0)   # 0.19 on an H100 logs 16-token MLA blocks (llm-d sweep)


def mla_block_size(ver: Version, compute_capability: str | None) -> int | None:
    """The KV block size vLLM forces for an MLA model when the user sets none, or None (16).

    ``platforms/cuda.py::check_and_update_config``: with the default backend, Hopper runs FlashMLA
    ("Forcing kv cache block size to 64 for FlashMLA backend", logged by 0.8.3 through the 0.12
    line) and data-centre Blackwell CUTLASS MLA (128). Other GPUs (Triton MLA) keep 16, and so
    do later lines, whose H100 logs show 16-token blocks again."""
    match = re.match(r"\s*(\d+)\.(\d+)", str(compute_capability or ""))
    if not match or not (MLA_FORCED_BLOCKS_FROM <= ver < MLA_FORCED_BLOCKS_UNTIL):
        return None
    major = int(match.group(1))
    if major == 9:
        return 64
    if major == 10:
        return 128
    return None


def capture_sizes(max_num_seqs: int, num_speculative_tokens: int = 0, limit: int = 512) -> list[int]:
    """V1's CUDA-graph capture sizes: [1, 2, 4] + 8..248 step 8 + 256.. step 16, cut at
    ``min(2 x max_num_seqs x (1 + speculative tokens), limit)`` (``config/vllm.py::_set_cudagraph_sizes``)."""
    top = min(2 * max_num_seqs * (1 + num_speculative_tokens), limit)
    sizes = [1, 2, 4, *range(8, 256, 8), *range(256, limit + 1, 16)]
    return [s for s in sizes if s <= top]
