"""The serving shape when no ``--profile-like`` is given (``pull``, ``kv-calc``, ``fits``, ``up``).

A curated model gets its curated profile for the rig's GPU count (``Model.serving_defaults``,
upstream's registry ``defaults``); any other repo gets the shape
:func:`club3090.fit.auto_shape.choose_shape` derives, which the gate prices as chosen and
launches as one :class:`~club3090.fit.runtime.RuntimeShape` (``derived_runtime``; named ``auto``),
never as a catalog profile.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from club3090.fit.auto_shape import Candidate, ShapeChoice, choose_shape, pick_engine
from club3090.fit.runtime import RuntimeShape
from club3090.fit.shape import NO_SHAPE_REQUEST, ShapeRequest
from club3090.gate.engine_support import find_arch_row
from club3090.gate.routing import count_class

if TYPE_CHECKING:  # pragma: no cover - typing only
    from club3090.catalog.model import Catalog
    from club3090.model.spec import ModelSpec
    from club3090.rig.hardware import HardwareFacts

AUTO_KEY = "auto"
DERIVED_PORT = 8000          # vLLM's own default port

__all__ = ["AUTO_KEY", "AutoShape", "automatic_shape", "count_class", "curated_default", "derive_choice",
           "derived_runtime"]


# a curated profile's shape was sized on its reference card: it is the default on a card of about
# that memory (a 24 GB profile on any 24 GB card), not on an 80 GB card it would leave mostly idle
REFERENCE_MEMORY_TOLERANCE = 0.15


def curated_default(catalog: "Catalog", spec: "ModelSpec", gpu_count: int,
                    memory_bytes: "tuple[int, ...]" = ()) -> str | None:
    """The curated profile upstream serves this curated model with on ``gpu_count`` GPUs, if any,
    and only on cards of its reference card's memory (``memory_bytes``: the rig's; empty: any)."""
    if spec.curated is None:
        return None
    model = catalog.models.get(spec.curated.model_id)
    if model is None:
        return None
    key = model.serving_defaults.get(count_class(gpu_count))
    if key is None or key not in catalog.profiles:
        return None
    profile = catalog.profiles[key]
    if profile.weights_variant != spec.curated.variant_id:
        return None
    card = catalog.gpus.get(profile.reference_gpu) if profile.reference_gpu else None
    if card is not None and memory_bytes:
        ref = card.usable_memory_bytes
        if abs(min(memory_bytes) - ref) > ref * REFERENCE_MEMORY_TOLERANCE:
            return None
    return key


@dataclass(frozen=True, slots=True)
class AutoShape:
    """The automatic shape: a curated profile for this rig (``profile``), else the derived shape."""

    profile: str | None = None
    choice: ShapeChoice | None = None


def automatic_shape(spec: "ModelSpec", hw: "HardwareFacts", catalog: "Catalog",
                    overrides: ShapeRequest = NO_SHAPE_REQUEST, *, min_context: int | None = None,
                    curated: bool = True) -> AutoShape:
    """The one shape stage ``pull``, ``fits`` and ``kv-calc`` share when no profile is named: the
    curated profile upstream serves this model with on a rig of this GPU count and card memory
    (only with no shape flag given), else the shape derived from the model and the rig. A curated
    profile is one machine's: on a rig of several nodes it is the default for one node."""
    per_node = hw.gpus_per_node if hw.nodes > 1 else hw.count
    key = curated_default(catalog, spec, per_node, hw.memory_bytes) \
        if curated and overrides == NO_SHAPE_REQUEST else None
    if key is not None:
        return AutoShape(profile=key)
    return AutoShape(choice=derive_choice(spec, hw, catalog, overrides=overrides, min_context=min_context))


def weights_of(spec: "ModelSpec", catalog: "Catalog") -> int | None:
    if spec.curated is not None:
        model = catalog.models.get(spec.curated.model_id)
        variant = model.weights.get(spec.curated.variant_id) if model is not None else None
        if variant is not None and variant.size_bytes:
            return int(variant.size_bytes)
    return spec.weights_bytes


def derive_choice(spec: "ModelSpec", hw: "HardwareFacts", catalog: "Catalog", *,
                  overrides: ShapeRequest = NO_SHAPE_REQUEST, target_concurrency: int = 1,
                  min_context: int | None = None) -> ShapeChoice:
    """The derived shape for ``spec`` on the rig ``hw`` (all its GPUs are candidates; on a rig of
    several nodes one node first, more only when one does not fit)."""
    row = find_arch_row(catalog, curated_model=spec.curated.model_id if spec.curated else None,
                        architecture=spec.arch.architecture)
    return choose_shape(spec, hw.memory_bytes, catalog, sm=hw.sm, weights_bytes=weights_of(spec, catalog),
                        overrides=overrides, target_concurrency=target_concurrency, min_context=min_context,
                        device_name=hw.names[0] if hw.names else None, row=row,
                        engine=pick_engine(catalog, row),
                        gpus_per_node=hw.gpus_per_node if hw.nodes > 1 else None, interconnect=hw.interconnect)


def derived_runtime(choice: ShapeChoice, candidate: Candidate) -> RuntimeShape:
    """The derived shape as the runtime it launches (key ``auto``; no drafter, no profile SM term, no
    curated model: ``up`` launches it as a derived compose, whatever the repo)."""
    shape, fit = candidate.shape, candidate.fit
    return RuntimeShape(key=AUTO_KEY, engine=choice.engine, kv_format=shape.kv_cache_dtype, tp=shape.tp,
                        pp=shape.pp, max_model_len=fit.max_model_len, max_num_seqs=fit.settings.max_num_seqs,
                        mem_util=fit.settings.mem_util, port=DERIVED_PORT)
