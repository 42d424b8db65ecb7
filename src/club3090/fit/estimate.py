"""kv-calc's pricing steps (pure): the serving shape a request asks for, and the fit of the model's
facts (``ModelSpec``) on a GPU set at that shape.

The serving shape is the ``--profile``'s (:func:`fit.shape.profile_shape`) with the overrides on
top, else vLLM's defaults plus the overrides; the profile's drafter comes with it unless the model
is a catalog model that drafter does not serve (``model_compat``). The GPUs are the pipeline's
(``--gpus``, detected, or a profile's reference card, said so); nothing here assumes a card.

``estimate(...) -> Estimate | NoFit`` (``NoFit``: the model or shape cannot be priced, a verdict).
Raises ``UsageError`` (fewer GPUs than TP x PP; weights unknown with no config to estimate them
from). A folder with only ``config.json`` is priced with :func:`model.param_estimate.estimate_weights`,
named as an estimate with its band in ``weights_source``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from club3090.errors import UsageError
from club3090.fit.memory import FitResult, ServeShape, Unpriceable, predict
from club3090.fit.shape import NO_SHAPE_REQUEST, ShapeRequest, drafter_terms, profile_shape
from club3090.model.param_estimate import estimate_weights
from club3090.rig.interconnect import advisories
from club3090.units import GiB

if TYPE_CHECKING:
    from club3090.catalog.model import Catalog, Profile
    from club3090.fit.auto_shape import ShapeChoice
    from club3090.model.architecture import Architecture
    from club3090.model.spec import ModelSpec
    from club3090.rig.gpus import GpuSet

__all__ = ["Estimate", "NoFit", "PriceSettings", "estimate", "served_concurrency", "serving_shape", "weights_note",
           "weights_per_rank_bytes"]


@dataclass(frozen=True, slots=True)
class PriceSettings:
    """kv-calc's flags: the serving shape (``ShapeRequest``, the one ``pull`` and ``fits`` take) and
    the engine settings only kv-calc exposes. ``None`` = not given (the profile's, else vLLM's)."""

    shape: ShapeRequest = NO_SHAPE_REQUEST
    max_num_batched_tokens: int | None = None
    block_size: int | None = None
    dtype: str | None = None
    num_speculative_tokens: int | None = None
    speculative_method: str | None = None   # --speculative-config's method
    enforce_eager: bool = False
    enable_prefix_caching: bool | None = None   # --[no-]enable-prefix-caching; None = the profile's, else vLLM's
    weights_gib: float | None = None        # weights per GPU rank, as vLLM's "Model loading took X GiB"
    solve_max_ctx: bool = False             # answer for the largest context that fits


@dataclass(frozen=True, slots=True)
class Estimate:
    result: FitResult
    model: str
    architecture: str
    gpus: str
    tp: int
    pp: int
    weights_source: str
    profile: str | None
    choice: "ShapeChoice | None" = None      # how TP/PP were chosen, when nobody gave them
    nodes: int = 1                           # nodes the shape spans (a rig of several nodes)
    gpus_per_node: int = 0                   # 0: one machine
    interconnect: str | None = None          # the link between nodes, as given or assumed
    shape_note: str | None = None            # the shape is not the one `fits` and `pull` choose, and why
    rig_note: str | None = None              # the GPUs were not named: where they came from

    def to_json(self) -> dict[str, Any]:
        out = self.result.to_json()
        out.update({"ok": True, "model": self.model, "architecture": self.architecture, "gpus": self.gpus,
                    "tp": self.tp, "pp": self.pp, "profile": self.profile, "weights_source": self.weights_source,
                    "shape": self.choice.to_json() if self.choice is not None else None,
                    "shape_note": self.shape_note, "rig_note": self.rig_note,
                    "concurrent_requests": served_concurrency(self.result)})
        if self.gpus_per_node:
            out.update({"nodes": self.nodes, "gpus_per_node": self.gpus_per_node, "interconnect": self.interconnect})
        return out


@dataclass(frozen=True, slots=True)
class NoFit:
    """``no-fit-model``: the architecture or the shape cannot be priced (why in ``error``)."""

    model: str
    error: str

    def to_json(self) -> dict[str, Any]:
        return {"ok": False, "reason": "no-fit-model", "error": self.error, "model": self.model}


def served_concurrency(fit: FitResult) -> int:
    """Full-length requests the server serves at once: ``min(max_num_seqs, KV room)`` (the room,
    ``max_concurrency``, is what the pool could hold; the scheduler admits ``max_num_seqs``)."""
    return min(int(fit.settings.max_num_seqs), int(fit.max_concurrency))


def weights_per_rank_bytes(weights_gib: float | None) -> int | None:
    """``--weights-gib`` (GiB per rank, as vLLM logs it) in bytes."""
    return int(weights_gib * GiB) if weights_gib is not None else None


def serving_shape(spec: "ModelSpec", profile: "Profile | None", overrides: PriceSettings,
                  catalog: "Catalog | None") -> ServeShape:
    """The shape kv-calc prices: the profile's (its drafter only if it serves this model), the
    overrides on top."""
    o = overrides
    num_spec, extra = 0, 0
    if profile is not None and profile.drafter and catalog is not None:
        drafter = catalog.drafters[profile.drafter]
        curated = spec.curated
        if curated is None or curated.model_id == profile.model or curated.model_id in drafter.model_compat:
            num_spec, extra = drafter_terms(drafter)
    return profile_shape(
        profile, catalog if profile is not None else None, drafter=False, **o.shape.serve_fields(),
        max_num_batched_tokens=o.max_num_batched_tokens, block_size=o.block_size,
        enforce_eager=True if o.enforce_eager else None,
        dtype=o.dtype,
        num_speculative_tokens=o.num_speculative_tokens if o.num_speculative_tokens is not None else num_spec,
        speculative_method=o.speculative_method, extra_weights_bytes=extra,
        enable_prefix_caching=o.enable_prefix_caching)


def weights_note(spec: "ModelSpec", catalog: "Catalog | None") -> str:
    """Where the weight bytes came from, for the report."""
    if spec.source == "catalog" and spec.curated is not None and spec.weights_bytes is not None:
        return f"catalog weight variant {spec.curated.variant_id} ({spec.weights_bytes / 1e9:.1f} GB on disk)"
    if spec.source == "hub":
        return "safetensors headers (Hub)"
    return f"{len(spec.weight_files)} safetensors header(s)"


def estimate(spec: "ModelSpec", shape: ServeShape, gpus: "GpuSet", overrides: PriceSettings, *, label: str,
             gpus_spec: str, profile: "Profile | None" = None, catalog: "Catalog | None" = None,
             drafter: "Architecture | None" = None) -> Estimate | NoFit:
    """The fit of ``spec`` on ``gpus`` at ``shape`` (and, with ``solve_max_ctx``, at the largest
    context that fits); ``drafter``: a separate draft model's config (its KV layers join the groups)."""
    world = shape.tp * shape.pp
    if gpus.count < world:
        raise UsageError(f"TP {world} needs {world} GPUs; --gpus gives {gpus.count}")
    device = gpus.gpus[0].display_name if gpus.gpus and gpus.gpus[0] is not None else None
    shape = replace(shape, device_name=device,
                    compute_capability=shape.compute_capability or (str(gpus.sm) if gpus.sm is not None else None))
    per_node = gpus.gpus_per_node if gpus.nodes > 1 else 0
    nodes = -(-world // per_node) if per_node else 1
    if nodes > 1 and shape.distributed_executor_backend is None:
        shape = replace(shape, distributed_executor_backend="ray")     # every multi-node launch runs on Ray
    per_rank = weights_per_rank_bytes(overrides.weights_gib)
    weights_bytes, estimated = spec.weights_bytes, None
    if per_rank is None and weights_bytes is None:
        # a folder with only config.json: a parameter-count estimate, said so with its band
        if spec.arch.unpriceable_reason or spec.arch.hidden_size <= 0:
            raise UsageError(f"{label}: weights unknown; pass --weights-gib (weights per GPU rank)")
        estimated = estimate_weights(spec.arch, dtype=overrides.dtype)
        weights_bytes = estimated.bytes
    kwargs: dict[str, Any] = dict(weights_bytes=int(weights_bytes or 0),
                                  gpu_memory_bytes=list(gpus.memory_bytes[:world]),
                                  weights_bytes_per_rank=per_rank, confidence=spec.confidence, drafter=drafter)
    result = predict(spec.arch, shape=shape, **kwargs)
    if isinstance(result, Unpriceable):
        return NoFit(model=label, error=result.reason)
    if overrides.solve_max_ctx and 0 < result.max_model_len_fit != result.max_model_len:
        solved = predict(spec.arch, shape=replace(shape, max_model_len=result.max_model_len_fit), **kwargs)
        if isinstance(solved, Unpriceable):
            return NoFit(model=label, error=solved.reason)
        result = solved
    if nodes > 1:
        result = replace(result, notes=(*result.notes, *advisories(shape.tp, shape.pp, per_node, nodes,
                                                                    gpus.interconnect)))
    return Estimate(result=result, model=label, architecture=spec.arch.architecture, gpus=gpus_spec, tp=shape.tp,
                    pp=shape.pp, weights_source="--weights-gib (per rank)" if per_rank is not None
                    else estimated.note if estimated is not None else weights_note(spec, catalog),
                    profile=profile.key if profile is not None else None, nodes=nodes, gpus_per_node=per_node,
                    interconnect=gpus.interconnect)
