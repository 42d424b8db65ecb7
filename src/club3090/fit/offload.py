"""llama.cpp offload planning from the rig: which quant, how many layers and experts on the host, what it costs.

``plan_offload(model, gpu_bytes, ram_bytes, *, ctx, ...) -> OffloadPlan | Unpriceable`` places one
GGUF model on GPUs of ``gpu_bytes`` and a host of ``ram_bytes`` usable memory with llama.cpp's own
accounting (``fit.llamacpp_fits.quant_fit``: every layer on the GPUs if it fits, else the experts of
the fewest layers on the host with ``--n-cpu-moe``, else the fewest layers on the host with
``-ngl``), and prices decode speed for the layout:

- decode is memory-bound: each token reads the weights it touches (dense tensors whole, a MoE
  layer's ``n_expert_used / n_expert`` share of its experts, the output head) plus the KV cache up
  to the context; what lives on a GPU is read at the card's bandwidth, what lives on the host at
  the host's (``ram_bandwidth_gb_s``, default :data:`DEFAULT_RAM_BANDWIDTH_GB_S`), each times
  ``fit.speed.BANDWIDTH_EFFICIENCY``; plus ``fit.speed``'s per-layer overhead;
- prefill runs on the GPUs (llama.cpp offloads host-weight matrix products to the GPU from a
  micro-batch of 32 tokens), so every ``-ub`` micro-batch copies the host weights over PCIe.

``gguf_from_arch(arch, weights_bytes)`` builds the GGUF facts llama.cpp's accounting needs from a
config's geometry when no GGUF header was read (an index row): per-layer dense and expert
parameters from ``model.param_estimate``, scaled so they sum to the quant's bytes. Answers are
``estimated``.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

from club3090.fit.llamacpp import CELL_PAD, LlamaCppArgs, LlamaCppBreakdown, predict
from club3090.fit.llamacpp_fits import QuantFit
from club3090.fit.memory import Unpriceable
from club3090.fit.speed import BAND, BANDWIDTH_EFFICIENCY, LAYER_OVERHEAD_S, MOE_LAYER_OVERHEAD_S, SpeedEstimate
from club3090.model.architecture import Architecture
from club3090.model.gguf_model import GgufModel
from club3090.model.layer_layout import LayerSpec
from club3090.model.param_estimate import _attention_params, _mlp_params
from club3090.units import GiB

__all__ = ["DEFAULT_RAM_BANDWIDTH_GB_S", "PCIE_BYTES_PER_S", "RAM_RESERVE_BYTES", "OffloadPlan",
           "fit_quant", "gguf_from_arch", "launch_flags", "offload_speed", "plan_offload", "usable_ram"]

# Dual-channel DDR4-3200 peaks at 51.2 GB/s (2 channels x 8 bytes x 3200 MT/s), the common desktop
# a 3090 sits in; --ram-bandwidth names another host.
DEFAULT_RAM_BANDWIDTH_GB_S = 51.2
RAM_RESERVE_BYTES = 4 * GiB            # the OS, the desktop and llama-server itself
PCIE_BYTES_PER_S = 25e9                # PCIe 4.0 x16 as reached by host-to-device copies
PROMPT_TOKENS = 2048


@dataclass(frozen=True, slots=True)
class OffloadPlan:
    fit: QuantFit
    speed: SpeedEstimate
    gpu_read_bytes: int                 # per decoded token, read from GPU memory
    host_read_bytes: int                # per decoded token, read from host memory

    @property
    def breakdown(self) -> LlamaCppBreakdown:
        return self.fit.at_target

    @property
    def offloaded(self) -> bool:
        return self.fit.offloaded

    def to_json(self) -> dict[str, Any]:
        b = self.breakdown
        return {"fits_fully": self.fit.fits_fully, "offloaded": self.fit.offloaded, "context": self.fit.context,
                "n_gpu_layers": b.gpu_layers, "n_cpu_moe": b.args.n_cpu_moe,
                "gpu_bytes": [d.total_bytes for d in b.devices[:-1]], "host_bytes": b.host.total_bytes,
                "host_weights_bytes": b.host.weights_bytes, "gpu_read_bytes_per_token": self.gpu_read_bytes,
                "host_read_bytes_per_token": self.host_read_bytes, "flags": launch_flags(self.fit),
                "speed": self.speed.to_json()}


def usable_ram(total_bytes: int | None) -> int | None:
    """Host memory llama.cpp may use: the total less :data:`RAM_RESERVE_BYTES` (None: unknown)."""
    if total_bytes is None:
        return None
    return max(total_bytes - RAM_RESERVE_BYTES, 0)


def launch_flags(fit: QuantFit) -> tuple[str, ...]:
    """The llama-server flags of the planned layout (``-c``, ``-ngl``, ``--n-cpu-moe``)."""
    flags = ["-c", str(fit.context), "-ngl", "999" if fit.fits_fully else str(fit.n_gpu_layers)]
    if fit.offloaded and fit.n_cpu_moe:
        flags += ["--n-cpu-moe", str(fit.n_cpu_moe)]
    return tuple(flags)


# ---------------------------------------------------------------------------------------------
# a GGUF model from a config's geometry


def _state_bytes(layer: LayerSpec) -> int:
    """One sequence's f32 recurrent state (llama.cpp: conv (d_conv - 1) x channels + ssm state)."""
    conv = max(layer.conv_kernel - 1, 0)
    if layer.kind == "gdn":
        keys = layer.linear_num_key_heads * layer.linear_key_head_dim
        values = layer.linear_num_value_heads * layer.linear_value_head_dim
        return 4 * (conv * (2 * keys + values) + layer.linear_num_value_heads * layer.linear_key_head_dim
                    * layer.linear_value_head_dim)
    inner, groups = layer.mamba_intermediate, layer.n_groups * layer.ssm_state_size
    return 4 * (conv * (inner + 2 * groups) + layer.ssm_state_size * inner)


def _kv(layer: LayerSpec) -> tuple[int, int]:
    """(K, V) values per token llama.cpp caches for one layer (MLA: the latent plus its rope part as K;
    V is a view of it)."""
    if not layer.is_attention:
        return 0, 0
    if layer.kind == "mla":
        return layer.head_dim, 0
    k = layer.num_kv_heads * layer.head_dim
    return k, 0 if layer.k_eq_v else layer.num_kv_heads * (layer.v_head_dim or layer.head_dim)


def _kv_geometry(kv: Sequence[tuple[int, int]]) -> tuple[tuple[int, ...], int, int]:
    """Per-layer K/V widths as GgufModel holds them: (n_head_kv per layer, head_dim_k, head_dim_v).

    A common divisor is the head size, so every layer keeps its exact K width; V is priced at the
    same width as K unless no layer caches V (MLA)."""
    from math import gcd

    unit = 0
    for k, _v in kv:
        unit = gcd(unit, k)
    if unit == 0:
        return tuple(0 for _ in kv), 0, 0
    has_v = any(v for _k, v in kv)
    return tuple(k // unit for k, _v in kv), unit, unit if has_v else 0


def _layer_params(arch: Architecture) -> list[tuple[int, int]]:
    """(dense, expert) parameters per layer."""
    h = arch.hidden_size
    out = []
    for i, layer in enumerate(arch.layers):
        mlp = _mlp_params(arch, i)
        experts = 0
        if arch.num_experts and i >= arch.num_dense_layers:
            experts = arch.num_experts * 3 * h * (arch.moe_intermediate_size or arch.intermediate_size)
        out.append((_attention_params(layer, arch) + mlp - experts, experts))
    return out


def gguf_from_arch(arch: Architecture, weights_bytes: int, *, label: str | None = None) -> GgufModel | Unpriceable:
    """GGUF facts for ``arch`` at ``weights_bytes`` (a quant's size) when no GGUF header was read."""
    if arch.unpriceable_reason:
        return Unpriceable(arch.unpriceable_reason)
    if not arch.layers or arch.hidden_size <= 0 or weights_bytes <= 0:
        return Unpriceable("the config gives no layer geometry to place")
    per_layer = _layer_params(arch)
    table = arch.vocab_size * arch.hidden_size
    total = sum(d + e for d, e in per_layer) + table * (1 if arch.tie_word_embeddings else 2)
    scale = weights_bytes / total
    dense = tuple(int(d * scale) for d, _ in per_layer)
    experts = tuple(int(e * scale) for _, e in per_layer)
    embd = int(table * scale)
    output = 0 if arch.tie_word_embeddings else embd
    n_head_kv, head_k, head_v = _kv_geometry([_kv(layer) for layer in arch.layers])
    recurrent = tuple(layer.is_state for layer in arch.layers)
    states = [_state_bytes(layer) for layer in arch.layers if layer.is_state]
    tensors = [("token_embd.weight", embd), *((("output.weight", output),) if output else ())]
    for i, (d, e) in enumerate(zip(dense, experts, strict=True)):
        tensors.append((f"blk.{i}.attn_ffn.weight", d))
        if e:
            tensors += [(f"blk.{i}.ffn_{p}_exps.weight", e // 3) for p in ("gate", "up", "down")]
    heads = tuple(arch.num_attention_heads if layer.is_attention else 0 for layer in arch.layers)
    windows = [layer.window for layer in arch.layers if layer.window]
    return GgufModel(
        files=(), arch=arch.model_type or "unknown", name=None, quant=label, n_layer=len(arch.layers),
        n_embd=arch.hidden_size, n_vocab=arch.vocab_size, ctx_train=arch.max_position_embeddings,
        n_head=heads, n_head_kv=n_head_kv, head_dim_k=head_k, head_dim_v=head_v,
        n_ff=arch.intermediate_size, n_expert=arch.num_experts, n_expert_used=arch.num_experts_per_tok,
        n_ff_exp=arch.moe_intermediate_size or (arch.intermediate_size if arch.num_experts else 0),
        swa_window=min(windows) if windows else None, swa_layers=tuple(bool(layer.window) for layer in arch.layers),
        recurrent_layers=recurrent, state_bytes=max(states, default=0), weights_bytes=weights_bytes,
        embd_bytes=embd, output_bytes=output, tied_output=not output, layer_bytes=dense, expert_bytes=experts,
        other_bytes=0, type_bytes=MappingProxyType({label or "estimated": weights_bytes}), tensors=tuple(tensors))


# ---------------------------------------------------------------------------------------------
# the plan and its speed


def _read_bytes(model: GgufModel, b: LlamaCppBreakdown, context: int) -> tuple[int, int]:
    """(GPU, host) bytes one decoded token reads in layout ``b`` at ``context`` tokens."""
    n = model.n_layer
    start = max(n - b.gpu_layers, 0)                     # -ngl offloads the last layers
    share = model.n_expert_used / model.n_expert if model.is_moe and model.n_expert else 1.0
    kv_per_token = b.kv.total_bytes / max(b.kv.n_ctx, 1)
    gpu = host = 0.0
    for il in range(n):
        on_gpu = il >= start
        dense, experts = model.layer_bytes[il], model.expert_bytes[il] * share
        kv = kv_per_token / n * min(context, b.kv.n_ctx)
        if on_gpu:
            gpu += dense + kv
        else:
            host += dense + kv
        if on_gpu and il >= b.args.n_cpu_moe:
            gpu += experts
        else:
            host += experts
    head = model.output_bytes or model.embd_bytes
    if b.gpu_layers > n:
        gpu += head
    else:
        host += head
    return int(gpu), int(host)


def offload_speed(model: GgufModel, fit: QuantFit, gpu_bandwidth_gb_s: float, *,
                  ram_bandwidth_gb_s: float = DEFAULT_RAM_BANDWIDTH_GB_S, gpu_tflops: float | None = None,
                  context_tokens: int = 2048) -> tuple[SpeedEstimate, int, int]:
    """Decode tok/s and TTFT of ``fit``'s layout, with the bytes per token read from GPU and host."""
    b = fit.at_target
    gpu_read, host_read = _read_bytes(model, b, context_tokens)
    gpu_bw = gpu_bandwidth_gb_s * 1e9 * BANDWIDTH_EFFICIENCY
    ram_bw = ram_bandwidth_gb_s * 1e9 * BANDWIDTH_EFFICIENCY
    moe_layers = model.n_layer if model.is_moe else 0
    step = gpu_read / gpu_bw + host_read / ram_bw + model.n_layer * LAYER_OVERHEAD_S + moe_layers * MOE_LAYER_OVERHEAD_S
    decode = 1.0 / step
    ubatches = -(-PROMPT_TOKENS // max(b.args.ubatch_size, 1))
    active = (sum(model.layer_bytes) + sum(model.expert_bytes)) / max(model.weights_bytes, 1)
    compute = 0.0
    if gpu_tflops:
        compute = 2.0 * model.weights_bytes * active * 2 * PROMPT_TOKENS / (gpu_tflops * 1e12 * 0.45)
    ttft = max(compute, (gpu_read + host_read) / gpu_bw) + ubatches * b.host.weights_bytes / PCIE_BYTES_PER_S
    notes = [f"GPU reads {gpu_read / 1e9:.2f} GB per token at {gpu_bandwidth_gb_s:.0f} GB/s, host reads "
             f"{host_read / 1e9:.2f} GB at {ram_bandwidth_gb_s:.1f} GB/s (both at {BANDWIDTH_EFFICIENCY:.0%})",
             f"prefill copies {b.host.weights_bytes / 1e9:.1f} GB of host weights over PCIe per "
             f"{b.args.ubatch_size}-token micro-batch" if b.host.weights_bytes else "no weights on the host",
             "no speculative decoding applied"]
    speed = SpeedEstimate(decode_tps=decode, ttft_s=ttft, band_low=decode * BAND[0], band_high=decode * BAND[1],
                          assumptions=tuple(notes), context_tokens=context_tokens,
                          bytes_per_token=gpu_read + host_read)
    return speed, gpu_read, host_read


def _fits(model: GgufModel, args: LlamaCppArgs, gpu_bytes: list[int],
          host_bytes: int | None) -> LlamaCppBreakdown | None:
    priced = predict(model, args, gpu_bytes, host_bytes)
    return priced if isinstance(priced, LlamaCppBreakdown) and priced.fits else None


def _smallest(lo: int, hi: int, ok: "Callable[[int], bool]") -> int | None:
    """The smallest k in [lo, hi] with ok(k), for ok monotone in k (None: none)."""
    if not ok(hi):
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def _largest_context(model: GgufModel, args: LlamaCppArgs, gpu_bytes: list[int], host_bytes: int | None,
                     limit: int) -> int | None:
    """The largest ``-c`` (a multiple of 256, at most ``limit``) that fits: memory grows linearly with
    the context, so two pricings give the line and a few more confirm the cells under it."""
    cells = limit // CELL_PAD
    if cells == 0 or _fits(model, replace(args, ctx_size=CELL_PAD), gpu_bytes, host_bytes) is None:
        return None
    if _fits(model, replace(args, ctx_size=cells * CELL_PAD), gpu_bytes, host_bytes) is not None:
        return cells * CELL_PAD
    low = predict(model, replace(args, ctx_size=CELL_PAD), gpu_bytes, host_bytes)
    high = predict(model, replace(args, ctx_size=cells * CELL_PAD), gpu_bytes, host_bytes)
    assert isinstance(low, LlamaCppBreakdown) and isinstance(high, LlamaCppBreakdown)
    guess = cells
    for a, b in zip(low.devices, high.devices, strict=True):
        if b.capacity_bytes is None or b.total_bytes <= b.capacity_bytes:
            continue
        slope = (b.total_bytes - a.total_bytes) / max(cells - 1, 1)
        guess = min(guess, 1 + int((b.capacity_bytes - a.total_bytes) / slope) if slope > 0 else cells)
    guess = max(1, min(guess, cells))
    while guess > 1 and _fits(model, replace(args, ctx_size=guess * CELL_PAD), gpu_bytes, host_bytes) is None:
        guess = max(1, guess - max(guess // 64, 1))
    return guess * CELL_PAD


def _offload_layout(model: GgufModel, args: LlamaCppArgs, gpu_bytes: list[int],
                    host_bytes: int | None) -> LlamaCppBreakdown | None:
    """The layout that keeps the most on the GPUs at ``args.ctx_size`` (``llamacpp.fewest_offloaded``'s
    order: the experts of the fewest layers on the host, else the fewest layers on the host). GPU
    memory only falls as either count grows and host memory only rises, so the fewest that fit the
    GPUs are found by bisection and then checked against the host."""
    n = model.n_layer

    def experts(k: int) -> LlamaCppArgs:
        return replace(args, n_gpu_layers=-1, n_cpu_moe=k)

    def layers(j: int) -> LlamaCppArgs:
        return replace(args, n_gpu_layers=n + 1 - j, n_cpu_moe=0)

    layouts: list[tuple[int, int, Callable[[int], LlamaCppArgs]]] = [(1, n, experts)] if model.is_moe else []
    layouts.append((0, n + 1, layers))
    for lo, hi, layout in layouts:
        def on_gpus(k: int, layout: Callable[[int], LlamaCppArgs] = layout) -> bool:
            return _fits(model, layout(k), gpu_bytes, None) is not None

        k = _smallest(lo, hi, on_gpus)
        found = _fits(model, layout(k), gpu_bytes, host_bytes) if k is not None else None
        if found is not None:
            return found
    return None


def fit_quant(model: GgufModel, args: LlamaCppArgs, gpu_bytes: Sequence[int],
              host_bytes: int | None) -> QuantFit | Unpriceable:
    """``fit.llamacpp_fits.quant_fit``'s answer (the largest context on the GPUs alone, else the
    offload that keeps the most on them and its largest context), searched by bisection and the
    linear growth of memory with context so a ranking of hundreds of quants stays fast."""
    gpus = list(gpu_bytes)
    full = replace(args, n_gpu_layers=-1, n_cpu_moe=0)
    priced = predict(model, full, gpus, host_bytes)
    if isinstance(priced, Unpriceable):
        return priced
    limit = max(model.ctx_train or 0, args.ctx_size)
    best = _largest_context(model, full, gpus, host_bytes, limit)
    if best is not None and best >= args.ctx_size:
        return QuantFit(target_context=args.ctx_size, full_gpu_context=best, at_target=priced)
    rescue = _offload_layout(model, args, gpus, host_bytes)
    if rescue is None:
        return QuantFit(target_context=args.ctx_size, full_gpu_context=best, at_target=priced)
    most = _largest_context(model, rescue.args, gpus, host_bytes, limit)
    return QuantFit(target_context=args.ctx_size, full_gpu_context=best, at_target=rescue, offload_context=most)


def plan_offload(model: GgufModel, gpu_bytes: Sequence[int], ram_bytes: int | None, *, ctx: int,
                 gpu_bandwidth_gb_s: float, ram_bandwidth_gb_s: float = DEFAULT_RAM_BANDWIDTH_GB_S,
                 gpu_tflops: float | None = None, cache_type_k: str = "f16",
                 cache_type_v: str = "f16") -> OffloadPlan | Unpriceable:
    """The layout of ``model`` at ``ctx`` tokens on these GPUs and ``ram_bytes`` of usable host memory
    (None: unbounded), with its speed; Unpriceable when it runs nowhere."""
    args = LlamaCppArgs(ctx_size=ctx, cache_type_k=cache_type_k, cache_type_v=cache_type_v)
    fit = fit_quant(model, args, list(gpu_bytes), ram_bytes)
    if isinstance(fit, Unpriceable):
        return fit
    if not fit.runs:
        need = fit.at_target.host.total_bytes + sum(d.total_bytes for d in fit.at_target.devices[:-1])
        return Unpriceable(f"needs about {need / GiB:.1f} GiB at {ctx:,} tokens: more than the GPUs and the "
                           "host memory hold together")
    speed, gpu_read, host_read = offload_speed(model, fit, gpu_bandwidth_gb_s, ram_bandwidth_gb_s=ram_bandwidth_gb_s,
                                               gpu_tflops=gpu_tflops, context_tokens=min(ctx, 2048))
    return OffloadPlan(fit=fit, speed=speed, gpu_read_bytes=gpu_read, host_read_bytes=host_read)
