"""The free terms of vLLM's start-up profile, per GPU rank: non-torch memory, the activation peak
of the profile run (forward pass, sampler and speculative rejection sampler, multimodal encoder)
and the CUDA-graph pool.

Each term is a small physical formula; its coefficient is fitted to public start-up logs with
grouped cross-validation (``benchmarks/refit.py``: leave one source, GPU class or release line out;
docs/ACCURACY.md). Module constants, no per-model values.

What the profile run does (``v1/worker/gpu_model_runner.py::profile_run``): encoder profiling for
multimodal models (a dummy batch of ``encoder budget // tokens per item`` maximal images, the
outputs kept in the encoder cache), then one forward of ``max_num_batched_tokens`` tokens over
``min(max_num_seqs, tokens)`` requests, then on the last PP stage the sampler on those requests'
logits and, with speculative decoding, the rejection sampler (``_dummy_sampler_run``). Its dummy
batch is one draft token per request whatever ``num_speculative_tokens`` is
(``draft_token_ids = [[0] for _ in range(num_reqs)]``): target logits for draft and bonus positions
(2 x requests rows) and, with probabilistic draft sampling, the draft probabilities, so its cost is
the same at 1 and at 5 speculative tokens. The measured transient peak is the largest of these.
V0 (``worker/model_runner.py::profile_run``) samples ``max_num_seqs`` requests.

Pure: no I/O.
"""

from __future__ import annotations

from club3090.model.architecture import Architecture
from club3090.units import GiB

__all__ = [
    "ACT_FORWARD_COEF",
    "ACT_FORWARD_COEF_GRAPHS",
    "ACT_FORWARD_COEF_V0",
    "CUDAGRAPH_BASE_TOKENS",
    "CUDAGRAPH_PER_GRAPH_TOKENS",
    "ENCODER_COEF",
    "SAMPLER_COEF",
    "SAMPLER_FLASHINFER_COEF",
    "SAMPLER_NATIVE_COEF",
    "SPEC_SAMPLER_COEF",
    "Activation",
    "GiB",
    "activation",
    "activation_width",
    "cudagraph_bytes",
    "encoder_items",
    "non_torch_bytes",
    "nvls_capable",
]


# non-torch memory allocated after the start-up snapshot
NON_TORCH_TP1 = int(0.25 * GiB)            # cuBLAS/attention workspaces that appear during profiling
NON_TORCH_MULTI = int(0.30 * GiB)          # + NCCL / custom all-reduce buffers at TP > 1 (V1)
NON_TORCH_MULTI_V0 = int(0.30 * GiB)       # the same on the V0 engine, fitted apart
NON_TORCH_NVSWITCH = int(1.45 * GiB)       # + NCCL NVLS (NVSwitch multicast) buffers, TP > 1 on SXM parts
# activation peak: max(forward, sampler, encoder)
ACT_FORWARD_COEF = 1.3                     # x the per-token activation width (bytes) x tokens, V1 up to 0.20
ACT_FORWARD_COEF_V0 = 1.5                  # the same on the V0 engine (no piecewise compilation; its profile
                                           # batch is the whole context without chunked prefill): fitted apart
ACT_FORWARD_COEF_GRAPHS = 1.3              # the same from 0.21, where the graph estimate is separate
SAMPLER_COEF = 3.75                        # x fp32 logits (num_reqs x vocab x 4 B): the Triton top-k/top-p
SAMPLER_FLASHINFER_COEF = 3.75             # the same with FlashInfer's rejection sampler (fitted apart;
                                           # shipped at the Triton value until it is)
SAMPLER_NATIVE_COEF = 9.5                  # the same with PyTorch's full sort (values, int64 indices,
                                           # workspace, probabilities): vllm_rules.sampler_path
SPEC_SAMPLER_COEF = 7.0                    # x fp32 logits rows per request with speculative decoding
                                           # (any depth): the rejection sampler's dummy batch of one
                                           # draft + one bonus position, draft probabilities, softmax
ENCODER_COEF = 1.9                         # x patches x the vision tower's per-patch width (bytes)
# CUDA-graph pool (subtracted from v0.21.0 unless --enforce-eager). Piecewise graphs keep
# per-layer buffers, so the pool scales with layers x hidden / TP on the rank: the first capture
# costs about CUDAGRAPH_BASE_TOKENS tokens' worth of hidden states per layer, and vLLM extrapolates
# each further capture size linearly (CUDAGRAPH_PER_GRAPH_TOKENS per graph).
CUDAGRAPH_BASE_TOKENS = 2048
CUDAGRAPH_PER_GRAPH_TOKENS = 36


def activation_width(arch: Architecture, tp: int) -> int:
    """Bytes per batched token of the largest transient in one decoder layer (bf16 activations)."""
    h = arch.hidden_size
    q = arch.num_attention_heads * arch.head_dim
    kv = 2 * arch.num_key_value_heads * arch.head_dim
    attn = (q + kv + q) // tp
    dense = 3 * arch.intermediate_size // tp if arch.intermediate_size else 0
    moe = 0
    if arch.num_experts:
        inter = arch.moe_intermediate_size or arch.intermediate_size
        moe = arch.num_experts_per_tok * (3 * inter // tp + h)
        if arch.shared_expert_intermediate_size:
            moe += 3 * arch.shared_expert_intermediate_size // tp
    return 2 * (max(attn, dense, moe) + 2 * h)


def encoder_items(arch: Architecture, batched_tokens: int) -> int:
    """Maximal images in the encoder's dummy batch (``compute_encoder_budget``: the budget is
    ``max(max_num_batched_tokens, tokens per item)``)."""
    vision = arch.vision
    if vision is None:
        return 0
    budget = max(batched_tokens, vision.tokens_per_item)
    return max(1, budget // vision.tokens_per_item)


def _encoder_bytes(arch: Architecture, batched_tokens: int) -> tuple[int, int]:
    """(encoder transient peak, encoder-cache bytes kept during the text forward)."""
    vision = arch.vision
    if vision is None:
        return 0, 0
    items = encoder_items(arch, batched_tokens)
    tokens = items * vision.tokens_per_item
    patches = tokens * vision.patches_per_token
    hv = vision.hidden_size
    # not divided by TP: the measured cost is the same at TP 1, 2 and 4 (docs/ACCURACY.md) -- the
    # patch embedding, residual stream and merger run whole on every rank
    width = 2 * (max(3 * hv, vision.intermediate_size) + 2 * hv)
    return int(ENCODER_COEF * patches * width), tokens * arch.hidden_size * 2


class Activation:
    """The activation peak and its parts (bytes)."""

    __slots__ = ("encoder", "forward", "sampler", "total")

    def __init__(self, forward: int, sampler: int, encoder: int) -> None:
        self.forward, self.sampler, self.encoder = forward, sampler, encoder
        self.total = max(forward, sampler, encoder)


def activation(arch: Architecture, *, tp: int, tokens: int, num_seqs: int, last_stage: bool,
               num_spec: int = 0, engine: str = "v1", encoder: bool = True,
               graphs_in_budget: bool = False, sampler: str = "kernel") -> Activation:
    """The profile run's transient peak on one rank of a stage (``graphs_in_budget``: the release
    line subtracts a CUDA-graph estimate, 0.21 on; its forward coefficient is fitted separately;
    ``sampler``: the top-k / top-p path, ``vllm_rules.sampler_path``)."""
    enc_peak, enc_cache = _encoder_bytes(arch, tokens) if encoder else (0, 0)
    coef = ACT_FORWARD_COEF_GRAPHS if graphs_in_budget else ACT_FORWARD_COEF_V0 if engine == "v0" \
        else ACT_FORWARD_COEF
    forward = int(coef * tokens * activation_width(arch, tp)) + enc_cache
    sampled = 0
    if last_stage:
        reqs = num_seqs if engine == "v0" else min(num_seqs, tokens)
        rows = {"sort": SAMPLER_NATIVE_COEF, "flashinfer": SAMPLER_FLASHINFER_COEF}.get(sampler, SAMPLER_COEF) \
            + (SPEC_SAMPLER_COEF if num_spec > 0 else 0.0)
        sampled = int(rows * reqs * arch.vocab_size * 4)
    return Activation(forward, sampled, enc_peak)


# NCCL's NVLS (NVLink SHARP multicast) buffers need Hopper-generation NVSwitch (sm 9.0+): an A100
# SXM board has NVSwitch but no multicast, so its TP ranks do not pay them
_NO_NVLS_NAMES = ("a100", "a800", "v100", "a40", "a30", "a10", "a6000", "l40", "l4", "l20")


def nvls_capable(device_name: str | None, compute_capability: str | None) -> bool:
    """Whether NCCL allocates NVLS buffers on this GPU (unknown: assumed, the safe side)."""
    if compute_capability:
        try:
            return int(str(compute_capability).split(".")[0]) >= 9
        except ValueError:
            return True
    name = (device_name or "").lower()
    return not any(part in name for part in _NO_NVLS_NAMES)


def non_torch_bytes(tp: int, pp: int, nvswitch: bool, engine: str = "v1") -> int:
    value = NON_TORCH_TP1
    if tp > 1:      # the TP group's all-reduce buffers; a pipeline hop is a small point-to-point send
        value += NON_TORCH_MULTI_V0 if engine == "v0" else NON_TORCH_MULTI
    if tp > 1 and nvswitch:
        value += NON_TORCH_NVSWITCH
    return value


def cudagraph_bytes(arch: Architecture, n_sizes: int, layers_here: int, tp: int) -> int:
    if n_sizes <= 0:
        return 0
    unit = layers_here * arch.hidden_size * 2 // tp
    return unit * (CUDAGRAPH_BASE_TOKENS + CUDAGRAPH_PER_GRAPH_TOKENS * n_sizes)
