"""The serving shape when no ``--profile-like`` is given (``pull``, ``kv-calc``, ``fits``, ``up``).

A curated model gets its curated profile for the rig's GPU count (``Model.serving_defaults``,
upstream's registry ``defaults``); any other repo gets the shape
:func:`club3090.fit.auto_shape.choose_shape` derives, expressed as a ``Profile`` (key ``auto``) in
a copy of the catalog, so the gate's stages run on it unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import TYPE_CHECKING

from club3090.fit.auto_shape import Candidate, ShapeChoice, choose_shape, pick_engine
from club3090.fit.shape import NO_SHAPE_REQUEST, ShapeRequest
from club3090.gate.engine_support import find_arch_row
from club3090.gate.routing import count_class

if TYPE_CHECKING:  # pragma: no cover - typing only
    from club3090.catalog.model import Catalog, Profile
    from club3090.model.spec import ModelSpec
    from club3090.rig.hardware import HardwareFacts

AUTO_KEY = "auto"

__all__ = ["AUTO_KEY", "AutoShape", "auto_profile", "automatic_shape", "catalog_with", "count_class", "curated_default",
           "derive_choice"]


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


def auto_profile(choice: ShapeChoice, candidate: Candidate, spec: "ModelSpec", catalog: "Catalog",
                 reference_gpu: str | None) -> "Profile":
    """The derived shape as a catalog ``Profile`` (key ``auto``; no compose capture, no drafter)."""
    from club3090.catalog.model import Profile

    shape, fit = candidate.shape, candidate.fit
    reference = reference_gpu if reference_gpu is not None and reference_gpu in catalog.gpus \
        else next(iter(catalog.gpus), "rtx-3090")
    return Profile(
        key=AUTO_KEY, model=spec.curated.model_id if spec.curated else "",
        weights_variant=spec.curated.variant_id if spec.curated else "", workload="fast-chat",
        engine=choice.engine, drafter=None, kv_format=shape.kv_cache_dtype, tp=shape.tp, pp=shape.pp,
        max_model_len=fit.max_model_len, max_num_seqs=fit.settings.max_num_seqs,
        mem_util=fit.settings.mem_util, port=8000, status="production", required_sm=None, fallback_sm=None,
        requires_nvlink=False, required_engine_features=(), compose_path="", reference_gpu=reference,
        runtime=None, status_note="derived from the model and the rig")


def catalog_with(catalog: "Catalog", profile: "Profile") -> "Catalog":
    """A copy of the catalog that also knows ``profile`` (so the gate's lookups by key work)."""
    return replace(catalog, profiles=MappingProxyType({**catalog.profiles, profile.key: profile}))
