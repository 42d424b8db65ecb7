"""One GGUF quant on a rig: the largest context with every layer on the GPUs, else the offload it needs.

``quant_fit(model, args, gpu_bytes)`` answers at ``args.ctx_size`` (the *target* context: ``-c``,
else ``--min-context``, else :data:`DEFAULT_TARGET_CONTEXT`):

- **fully on GPU**: the largest ``-c`` (a multiple of 256, at most the trained context or the
  target if larger) that fits with ``-ngl`` all and no ``--n-cpu-moe``; the quant *fits fully*
  when that is at least the target;
- **offload**: otherwise the fit at the target that keeps the most on the GPUs
  (``llamacpp.fewest_offloaded``: MoE experts of the fewest layers on the host first, else the
  fewest layers on the host), with the largest context that offload leaves room for.

``rank_key`` orders the quants of a repo: those that fit fully first, largest first (the best
quality that fits); then those that need offload, least on the host first; then those that run
nowhere; then those that could not be priced.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from club3090.fit.llamacpp import LlamaCppArgs, LlamaCppBreakdown, fewest_offloaded, largest_context, predict
from club3090.fit.memory import Unpriceable
from club3090.model.gguf_model import GgufModel

__all__ = ["DEFAULT_TARGET_CONTEXT", "QuantFit", "quant_fit", "rank_key"]

DEFAULT_TARGET_CONTEXT = 4096          # llama-server's long-standing default -c


@dataclass(frozen=True, slots=True)
class QuantFit:
    target_context: int
    full_gpu_context: int | None           # largest -c with every layer on the GPUs; None: not even 256
    at_target: LlamaCppBreakdown           # the layout at the target: every layer on the GPUs, or the offload
    offload_context: int | None = None     # largest -c with the offload (None when fully on GPU or none fits)

    @property
    def fits_fully(self) -> bool:
        return self.full_gpu_context is not None and self.full_gpu_context >= self.target_context

    @property
    def runs(self) -> bool:
        """Fits at the target, on the GPUs alone or with part of the model on the host."""
        return self.fits_fully or self.offload_context is not None

    @property
    def offloaded(self) -> bool:
        return not self.fits_fully and self.offload_context is not None

    @property
    def context(self) -> int:
        """The largest context of the layout this quant would run with (0: it does not run)."""
        if self.fits_fully:
            return self.full_gpu_context or 0
        return self.offload_context or 0

    @property
    def n_gpu_layers(self) -> int:
        """Layers on the GPUs as llama.cpp counts them (the output head is layer ``n_layer``)."""
        return self.at_target.gpu_layers

    @property
    def n_cpu_moe(self) -> int:
        return self.at_target.args.n_cpu_moe

    @property
    def host_weights_bytes(self) -> int:
        return self.at_target.host.weights_bytes


def quant_fit(model: GgufModel, args: LlamaCppArgs, gpu_bytes: Sequence[int],
              host_bytes: int | None = None) -> QuantFit | Unpriceable:
    """The quant at ``args.ctx_size`` on GPUs of ``gpu_bytes`` usable bytes each (see module doc)."""
    full = replace(args, n_gpu_layers=-1, n_cpu_moe=0)
    priced = predict(model, full, gpu_bytes, host_bytes)
    if isinstance(priced, Unpriceable):
        return priced
    limit = max(model.ctx_train or 0, args.ctx_size)
    best = largest_context(model, full, gpu_bytes, host_bytes, limit=limit)
    if best is not None and best >= args.ctx_size:
        return QuantFit(target_context=args.ctx_size, full_gpu_context=best, at_target=priced)
    rescue = fewest_offloaded(model, args, gpu_bytes, host_bytes)
    if rescue is None:
        return QuantFit(target_context=args.ctx_size, full_gpu_context=best, at_target=priced)
    most = largest_context(model, rescue.args, gpu_bytes, host_bytes, limit=limit)
    return QuantFit(target_context=args.ctx_size, full_gpu_context=best, at_target=rescue, offload_context=most)


def rank_key(fit: QuantFit | None, weights_bytes: int) -> tuple[int, int, int]:
    """Sort key of one quant (``fit`` None: not priced). Smaller sorts first."""
    if fit is None:
        return (3, weights_bytes, 0)
    if fit.fits_fully:
        return (0, -weights_bytes, -fit.context)
    if fit.offloaded:
        return (1, fit.host_weights_bytes, -weights_bytes)
    return (2, weights_bytes, 0)
