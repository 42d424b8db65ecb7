"""Estimated single-stream decode speed and time to first token, from the GPU's datasheet figures.

``estimate_speed(arch, weights_bytes, shape, gpus, *, interconnect=None, context_tokens=None,
prompt_tokens=PROMPT_TOKENS, speculative_speedup=None) -> SpeedEstimate``

Decode is memory-bound at one request: every token reads the weights a token touches (all of them
for a dense model; the shared part plus ``num_experts_per_tok`` experts for a MoE; the LM head
always), the KV cache up to the context and the recurrent state of linear-attention/Mamba layers,
each rank its 1/TP share, at the card's bandwidth times :data:`BANDWIDTH_EFFICIENCY`. On top come a
fixed cost per layer (kernels, norms, sampling) and, at TP > 1, two all-reduces per layer whose
latency depends on the link (PCIe or NVLink). Pipeline stages run one after the other for one
request, so PP does not speed decode up. On a rig of several nodes (``gpus.nodes``) every stage
boundary that crosses a node pays the inter-node link's latency plus the activation hand-off
(hidden size x 2 bytes per token) at its line rate, and a TP group that spans nodes pays it on
every all-reduce (``rig/interconnect.py``; the link is an assumption the result states). Prefill is compute-bound: 2 FLOPs per active parameter per
prompt token plus the causal attention term, at the card's dense bf16 rate times
:data:`COMPUTE_EFFICIENCY`.

Speculative decoding: a ``Speculation`` (method, drafted tokens, task, drafter bytes) is modelled
by ``fit/speculative.py`` (acceptance length by method and task; the head, block or draft-model
passes and the extra verified tokens priced with the same bandwidth and compute as the target), or
a measured multiplier the caller passes (``speculative_speedup``); without either the estimate is
for plain decoding and says so. ``prefill_tps`` is the prompt's tokens over the prefill time, at
``prefill_depth`` tokens already in the cache (the causal attention term grows with it). Every result is an estimate, never a measurement: its
``label`` is ``"estimated"``. The constants are fitted to upstream's measured decode figures
(``benchmarks/speed.py``; the median error is in docs/ACCURACY.md).

Pure: no I/O. Reads only the values it is given.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from club3090.fit.kv_formats import dtype_bytes, kv_format
from club3090.fit.kv_layout import CannotPrice, _attn_token_bytes, _state_bytes
from club3090.fit.memory import ServeShape
from club3090.fit.speculative import SpecGain, speculative_gain
from club3090.model.architecture import Architecture
from club3090.rig.interconnect import DEFAULT_INTERCONNECT, Interconnect, crossings
from club3090.rig.interconnect import INTERCONNECTS as NODE_LINKS

__all__ = [
    "BAND",
    "INTERCONNECTS",
    "PREFILL_BAND",
    "PROMPT_TOKENS",
    "Speculation",
    "SpeedEstimate",
    "active_weight_bytes",
    "default_interconnect",
    "estimate_speed",
    "speculation_of",
]

LABEL = "estimated"
PROMPT_TOKENS = 2048               # TTFT is quoted for a prompt this long unless the caller says otherwise
DECODE_CONTEXT = 2048              # KV read per token when no context is given (a short chat turn)
BANDWIDTH_EFFICIENCY = 0.80        # share of datasheet bandwidth a batch-1 GEMV stream reaches
COMPUTE_EFFICIENCY = 0.45          # share of dense bf16 peak a quantized prefill reaches
LAYER_OVERHEAD_S = 20e-6           # per layer per token: launches, norms, rotary, router, sampling
MOE_LAYER_OVERHEAD_S = 30e-6       # extra per MoE layer per token: routing and the grouped expert kernel
# two all-reduces per layer per token at TP > 1; small messages, so latency-bound
ALLREDUCE_LATENCY_S = {"pcie": 22e-6, "nvlink": 8e-6, "unified": 0.0}
LINK_BYTES_PER_S = {"pcie": 12e9, "nvlink": 100e9, "unified": 1e12}
INTERCONNECTS = tuple(ALLREDUCE_LATENCY_S)
BAND = (0.75, 1.25)                # stated band around the estimate (docs/ACCURACY.md: the fitted spread)
PREFILL_BAND = (0.6, 1.5)          # prefill: kernels vary more (benchmarks/speed.py's prefill p90)
STEP_FIXED_S = 0.015               # prefill: scheduler, sampling and the first decode step
EXPERT_GEMM_HALF_M = 512          # tokens per expert GEMM at which it runs at half its peak (tile occupancy)
DRAFT_BLOCK_LAYERS = 5             # launches of one block-drafter or draft-model pass (a few layers)


@dataclass(frozen=True, slots=True)
class Speculation:
    """A drafter to model: its method (``fit/speculative.DRAFT_KIND``), tokens drafted per step, the
    task the acceptance is read for, and the drafter's own weights (block and draft-model methods)."""

    method: str
    num_speculative_tokens: int
    task: str = "narrative"
    drafter_bytes: int = 0
    token_overhead_s: float | None = None     # None: fit/speculative.TOKEN_OVERHEAD_S
    quantized_head: bool = False              # a 4-bit checkpoint that quantized its built-in head


QUANTIZED_HEAD_FORMATS = ("autoround", "awq", "gptq", "compressed-tensors", "gguf")   # 4-bit exports


def speculation_of(shape: ServeShape, method: str | None = None, task: str = "narrative",
                   weights_format: str | None = None) -> Speculation | None:
    """The drafter a vLLM shape runs (``--speculative-config``; ``method`` when the shape does not
    name it, e.g. the curated drafter's), to model; None without one. ``weights_format``: the
    target's checkpoint format (a 4-bit export quantizes its built-in head)."""
    n = int(shape.num_speculative_tokens or 0)
    method = shape.speculative_method or method
    if n < 1 or not method:
        return None
    return Speculation(method=str(method), num_speculative_tokens=n, task=task,
                       drafter_bytes=int(shape.extra_weights_bytes or 0),
                       quantized_head=weights_format in QUANTIZED_HEAD_FORMATS)


@dataclass(frozen=True, slots=True)
class SpeedEstimate:
    decode_tps: float               # tokens per second for one request (speculation applied if given)
    ttft_s: float                   # seconds to the first token of a ``prompt_tokens`` prompt
    band_low: float                 # decode_tps * BAND[0]
    band_high: float                # decode_tps * BAND[1]
    assumptions: tuple[str, ...]
    prompt_tokens: int = PROMPT_TOKENS
    context_tokens: int = DECODE_CONTEXT
    speculative_speedup: float | None = None
    bytes_per_token: int = 0        # per rank, read for one decoded token
    label: str = LABEL              # always "estimated": never present this as a measurement
    prefill_tps: float = 0.0        # prompt tokens per second (``prompt_tokens`` over the prefill time)
    speculation: SpecGain | None = None     # the modelled drafter gain, when a drafter was given

    @property
    def ttft_band(self) -> tuple[float, float]:
        return self.ttft_s / PREFILL_BAND[1], self.ttft_s / PREFILL_BAND[0]

    @property
    def prefill_band(self) -> tuple[float, float]:
        return self.prefill_tps * PREFILL_BAND[0], self.prefill_tps * PREFILL_BAND[1]

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, "decode_tps": round(self.decode_tps, 1), "ttft_s": round(self.ttft_s, 3),
                "decode_band_tps": [round(self.band_low, 1), round(self.band_high, 1)],
                "ttft_band_s": [round(t, 3) for t in self.ttft_band],
                "prefill_tps": round(self.prefill_tps, 1),
                "prefill_band_tps": [round(t, 1) for t in self.prefill_band],
                "prompt_tokens": self.prompt_tokens, "context_tokens": self.context_tokens,
                "speculative_speedup": self.speculative_speedup, "bytes_per_token": self.bytes_per_token,
                "speculation": None if self.speculation is None else {
                    "method": self.speculation.method, "task": self.speculation.task,
                    "num_speculative_tokens": self.speculation.num_speculative_tokens,
                    "acceptance": self.speculation.acceptance,
                    "accept_length": round(self.speculation.accept_length, 2),
                    "speedup": round(self.speculation.speedup, 3), "source": self.speculation.source},
                "assumptions": list(self.assumptions)}

    def decode_text(self) -> str:
        """``~38 tok/s decode (29-48)``: the figure with its band, the one way a speed is printed."""
        return f"~{self.decode_tps:.0f} tok/s decode ({self.band_low:.0f}-{self.band_high:.0f})"

    def ttft_text(self) -> str:
        low, high = self.ttft_band
        return f"~{self.ttft_s:.1f} s to first token ({low:.1f}-{high:.1f})"

    def drafter_text(self) -> str:
        """``, MTP n=3 modelled x1.20 on prose`` (empty without a drafter)."""
        gain = self.speculation
        if gain is None:
            return ""
        return (f", {gain.method.upper()} n={gain.num_speculative_tokens} modelled x{gain.speedup:.2f} "
                f"on {'prose' if gain.task == 'narrative' else gain.task}")

    def headline(self) -> str:
        """``~38 tok/s decode (29-48), ~0.9 s to first token (0.7-1.3) — estimated``."""
        return f"{self.decode_text()}, {self.ttft_text()} — {self.label}"


# ---------------------------------------------------------------------------------------------
# parameters a token touches


def _attention_params(arch: Architecture) -> int:
    h, hd = arch.hidden_size, arch.head_dim
    return h * arch.num_attention_heads * hd * 2 + h * arch.num_key_value_heads * hd * 2


def _body_params(arch: Architecture) -> tuple[int, int]:
    """(all, active) parameters of the transformer layers: attention/mixer, dense MLPs, experts."""
    h, layers = arch.hidden_size, arch.num_hidden_layers
    attn = _attention_params(arch) * layers
    if not arch.is_moe:
        mlp = 3 * h * arch.intermediate_size * layers
        return attn + mlp, attn + mlp
    dense_layers = min(arch.num_dense_layers, layers)
    moe_layers = layers - dense_layers
    expert = 3 * h * (arch.moe_intermediate_size or arch.intermediate_size)
    shared = 3 * h * (arch.shared_expert_intermediate_size or 0) + h * arch.num_experts
    dense = 3 * h * arch.intermediate_size * dense_layers
    total = attn + dense + moe_layers * (shared + expert * arch.num_experts)
    active = attn + dense + moe_layers * (shared + expert * max(arch.num_experts_per_tok, 1))
    return total, active


def active_weight_bytes(arch: Architecture, weights_bytes: int) -> tuple[int, int]:
    """(body bytes one token reads, LM-head bytes) out of a checkpoint of ``weights_bytes``.

    The embedding table and the LM head are kept in the model dtype by the usual quantizers; the
    embedding is read one row per token, the head whole. The rest of the checkpoint is scaled by the
    share of layer parameters a token touches (1 for dense models)."""
    model_bytes = dtype_bytes(arch.torch_dtype)
    head = arch.vocab_size * arch.hidden_size * model_bytes
    tables = head if arch.tie_word_embeddings else 2 * head
    body = weights_bytes - tables
    if body <= 0:                   # tiny or odd checkpoints: no separate tables
        body, head = weights_bytes, 0
    total, active = _body_params(arch)
    share = active / total if total > 0 else 1.0
    return int(body * share), head


def _kv_read_bytes(arch: Architecture, shape: ServeShape, context: int) -> int:
    """Per rank: attention KV read for one token at ``context`` plus recurrent state read and written."""
    fmt = kv_format(shape.kv_cache_dtype) or kv_format("auto")
    assert fmt is not None
    model_bytes = dtype_bytes(shape.dtype or arch.torch_dtype)
    tp = max(int(shape.tp), 1)
    total = 0.0
    for layer, n in Counter(arch.layers).items():       # a few layer shapes, many layers
        if layer.is_attention:
            tokens = min(context, layer.window) if layer.window else context
            total += float(_attn_token_bytes(layer, tp, fmt, model_bytes)) * tokens * n
        elif layer.is_state:
            ssm = 4 if (arch.mamba_ssm_cache_dtype or "").lower() in ("float32", "fp32") else model_bytes
            try:
                total += 2 * _state_bytes(layer, tp, 0, model_bytes, ssm) * n
            except CannotPrice:     # a state the memory model cannot size: it is small next to weights
                continue
    return int(total)


def default_interconnect(gpus: Any) -> str:
    """PCIe unless every card is NVLink-capable and data-centre sized (>= 70 GiB, SXM-class: the
    same assumption the memory model makes for NVSwitch); unified-memory machines have no link."""
    cards = [g for g in getattr(gpus, "gpus", ()) if g is not None]
    if cards and all(g.usable_memory_fraction is not None for g in cards):
        return "unified"
    if cards and len(cards) == len(gpus.gpus) and all(g.nvlink and g.memory_bytes >= 70 * 2 ** 30 for g in cards):
        return "nvlink"
    return "pcie"


def _slowest(gpus: Any, used: int) -> Any:
    cards = [g for g in tuple(getattr(gpus, "gpus", ()))[:used]]
    if not cards or any(g is None or g.memory_bandwidth_gb_s is None or g.bf16_tflops is None for g in cards):
        return None
    return min(cards, key=lambda g: (Decimal(g.memory_bandwidth_gb_s), Decimal(g.bf16_tflops)))


# ---------------------------------------------------------------------------------------------
# the estimate


def estimate_speed(arch: Architecture, weights_bytes: int, shape: ServeShape, gpus: Any, *,
                   interconnect: str | None = None, context_tokens: int | None = None,
                   prompt_tokens: int = PROMPT_TOKENS, prefill_depth: int = 0,
                   speculative_speedup: float | None = None,
                   speculation: Speculation | None = None) -> SpeedEstimate | None:
    """Decode tokens/s and TTFT for one request of ``arch`` (``weights_bytes`` on disk) at ``shape``
    on ``gpus`` (a ``rig.gpus.GpuSet``). None when a GPU the shape uses has no catalog row (a
    size-only ``--gpus``: no bandwidth known). ``interconnect``: ``pcie``, ``nvlink`` or ``unified``
    (default :func:`default_interconnect`). ``context_tokens``: tokens already in the request when
    decoding (default :data:`DECODE_CONTEXT`)."""
    tp, pp = max(int(shape.tp), 1), max(int(shape.pp), 1)
    card = _slowest(gpus, tp * pp)
    if card is None:
        return None
    link = interconnect or default_interconnect(gpus)
    if link not in ALLREDUCE_LATENCY_S:
        raise ValueError(f"interconnect must be one of {', '.join(INTERCONNECTS)}, got {link!r}")
    context = max(int(context_tokens if context_tokens is not None else DECODE_CONTEXT), 1)
    prompt = max(int(prompt_tokens), 1)
    bandwidth = float(card.memory_bandwidth_gb_s) * 1e9 * BANDWIDTH_EFFICIENCY
    flops = float(card.bf16_tflops) * 1e12 * COMPUTE_EFFICIENCY
    layers = max(arch.num_hidden_layers, 1)
    moe_layers = (layers - min(arch.num_dense_layers, layers)) if arch.is_moe else 0

    body, head = active_weight_bytes(arch, int(weights_bytes))
    kv = _kv_read_bytes(arch, shape, context)
    per_rank = (body + head) // tp + kv
    nodes = int(getattr(gpus, "nodes", 1) or 1)
    per_node = int(gpus.gpus_per_node) if nodes > 1 else tp * pp
    node_link = NODE_LINKS[getattr(gpus, "interconnect", None) or DEFAULT_INTERCONNECT] if nodes > 1 else None
    tp_spans, node_hops = crossings(tp, pp, per_node) if node_link is not None else (False, 0)
    comm = _allreduce_s(arch, tp, layers, link, node_link if tp_spans else None)
    # pipeline stages run one after another for one request; each holds 1/pp of the layers
    step = per_rank / bandwidth + layers * LAYER_OVERHEAD_S + moe_layers * MOE_LAYER_OVERHEAD_S + comm
    hop = 0.0
    if pp > 1:
        step += (pp - 1 - node_hops) * ALLREDUCE_LATENCY_S[link]
        if node_link is not None and node_hops:
            hop = node_hops * (node_link.latency_s + arch.hidden_size * 2 / node_link.bytes_per_s)
            step += hop
    decode = 1.0 / step

    _total, active = _body_params(arch)
    prefill = _prefill_s(arch, active, prompt, max(int(prefill_depth), 0), flops * tp, (body + head) / tp / bandwidth)
    chunks = max(1, -(-prompt // max(int(shape.max_num_batched_tokens or 2048), 1)))
    prefill += chunks * (comm * 4 + layers * LAYER_OVERHEAD_S)
    ttft = prefill + STEP_FIXED_S
    notes = _notes(arch, card, gpus, tp=tp, pp=pp, link=link, layers=layers, context=context, prompt=prompt,
                   per_rank=per_rank)
    if node_link is not None and (node_hops or tp_spans):
        notes.append(_node_note(gpus, nodes, node_link, node_hops, tp_spans, hop, comm))
    gain = None
    if speculative_speedup is not None and speculative_speedup > 0:
        decode *= speculative_speedup
        notes.append(f"speculative decoding: x{speculative_speedup:.2f} (measured speed-up of the drafter)")
    elif speculation is not None and (gain := _speculate(speculation, step, 2.0 * active / (flops * tp),
                                                          body // layers // tp, head // tp, bandwidth,
                                                          LAYER_OVERHEAD_S + comm / layers)):
        decode *= gain.speedup
        speculative_speedup = None
        notes.append(gain.note())
    else:
        speculative_speedup = None
        notes.append("no speculative decoding applied (no drafter given)")
    return SpeedEstimate(decode_tps=decode, ttft_s=ttft, band_low=decode * BAND[0], band_high=decode * BAND[1],
                         assumptions=tuple(notes), prompt_tokens=prompt, context_tokens=context,
                         speculative_speedup=speculative_speedup, bytes_per_token=int(per_rank),
                         prefill_tps=prompt / prefill, speculation=gain)


def _prefill_s(arch: Architecture, active: int, prompt: int, depth: int, flops: float, read_s: float) -> float:
    """Prefill compute: 2 FLOPs per active parameter per token, plus causal attention over the prompt
    and the ``depth`` tokens already cached (4 x layers x width FLOPs per token pair); never faster
    than reading the weights once. A MoE's expert GEMMs each see only ``prompt x k / E`` tokens, and
    a GEMM that short runs below peak: efficiency ``M / (M + EXPERT_GEMM_HALF_M)``."""
    attn_width = arch.num_attention_heads * arch.head_dim
    attn_layers = sum(1 for layer in arch.layers if layer.is_attention) or max(arch.num_hidden_layers, 1)
    attention = 4.0 * attn_layers * attn_width * prompt * (depth + prompt / 2)
    experts = _expert_active_params(arch)
    per_expert = prompt * max(arch.num_experts_per_tok, 1) / max(arch.num_experts, 1)
    expert_efficiency = per_expert / (per_expert + EXPERT_GEMM_HALF_M) if experts else 1.0
    gemm = 2.0 * (active - experts) * prompt + 2.0 * experts * prompt / expert_efficiency
    return max((gemm + attention) / flops, read_s)


def _expert_active_params(arch: Architecture) -> int:
    """Routed-expert parameters one token uses (0 for a dense model)."""
    if not arch.is_moe:
        return 0
    moe_layers = arch.num_hidden_layers - min(arch.num_dense_layers, arch.num_hidden_layers)
    expert = 3 * arch.hidden_size * (arch.moe_intermediate_size or arch.intermediate_size)
    return moe_layers * expert * max(arch.num_experts_per_tok, 1)


def _speculate(spec: Speculation, step: float, token_compute: float, layer_bytes: int, head_bytes: int,
               bandwidth: float, layer_s: float) -> SpecGain | None:
    """The drafter's modelled gain (``fit/speculative.py``): a head pass reads one layer and the LM
    head; a block drafter its weights and the LM head once; a draft model its weights per token.
    ``layer_s``: one layer's fixed cost and TP all-reduces, paid per drafter layer too."""
    drafter = max(int(spec.drafter_bytes), 0)
    return speculative_gain(spec.method, spec.task, int(spec.num_speculative_tokens), base_step_s=step,
                            token_compute_s=token_compute,
                            head_step_s=(layer_bytes + head_bytes) / bandwidth + layer_s,
                            block_step_s=(drafter + head_bytes) / bandwidth + DRAFT_BLOCK_LAYERS * layer_s,
                            model_step_s=drafter / bandwidth + DRAFT_BLOCK_LAYERS * layer_s,
                            quantized_head=spec.quantized_head,
                            **({} if spec.token_overhead_s is None else {"token_overhead_s": spec.token_overhead_s}))


def _allreduce_s(arch: Architecture, tp: int, layers: int, link: str, node_link: Interconnect | None) -> float:
    """Seconds of TP all-reduces per decoded token: two per layer, over the node link when TP spans nodes."""
    if tp <= 1:
        return 0.0
    message = arch.hidden_size * 2 * 2 * (tp - 1) / tp
    if node_link is not None:
        return layers * 2 * (node_link.latency_s + message / node_link.bytes_per_s)
    # a ring all-reduce takes 2 (tp - 1) steps, each paying the link's latency: the constant is the
    # two-step (TP 2) figure, so TP 4 pays three times it
    return layers * 2 * (ALLREDUCE_LATENCY_S[link] * (tp - 1) + message / LINK_BYTES_PER_S[link])


def _notes(arch: Architecture, card: Any, gpus: Any, *, tp: int, pp: int, link: str, layers: int, context: int,
           prompt: int, per_rank: int) -> list[str]:
    notes = [
        f"{card.display_name}: {card.memory_bandwidth_gb_s} GB/s at {BANDWIDTH_EFFICIENCY:.0%} reached, "
        f"{card.bf16_tflops} dense bf16 TFLOP/s at {COMPUTE_EFFICIENCY:.0%}",
        f"one request, {context:,} tokens of context read per decoded token; TTFT for a {prompt:,}-token prompt",
        f"{per_rank / 1e9:.2f} GB read per token per GPU (weights"
        + (f", {arch.num_experts_per_tok} of {arch.num_experts} experts" if arch.is_moe else "")
        + ", LM head, KV and state)",
    ]
    if tp > 1:
        notes.append(f"TP {tp} over {link}: {layers * 2} all-reduces per token")
    if pp > 1:
        notes.append(f"PP {pp}: stages run in turn for one request (no decode speed-up)")
    return notes


def _node_note(gpus: Any, nodes: int, node_link: Interconnect, node_hops: int, tp_spans: bool, hop: float,
               comm: float) -> str:
    assumed = " (assumed: --interconnect not given)" if getattr(gpus, "interconnect_assumed", False) else ""
    return (f"{nodes} nodes over {node_link.name}{assumed}: "
            + (f"{node_hops} stage hand-off(s) across nodes, ~{hop * 1e6:.0f} µs per token" if node_hops else "")
            + ("; " if node_hops and tp_spans else "")
            + (f"TP all-reduces cross the network (~{comm * 1e3:.1f} ms per token)" if tp_spans else ""))
