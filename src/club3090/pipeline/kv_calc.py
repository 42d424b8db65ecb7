"""``kv-calc``: the same stages as ``pull`` up to the fit, and no gate: model facts (the one
resolver) -> serving shape (``--profile`` + overrides) -> rig (``--gpus``, else the profile's
reference card) -> fit."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from club3090.errors import UsageError
from club3090.fit.estimate import Estimate, NoFit, Overrides, default_gpus, estimate, serving_shape
from club3090.gate.outcome import Outcome, Stop
from club3090.pipeline.stages import gpu_set, measured_here

if TYPE_CHECKING:  # pragma: no cover - typing only
    from club3090.pipeline.provider import Provider


@dataclass(frozen=True, slots=True)
class PriceRequest:
    """``kv-calc MODEL [--profile KEY] [--gpus SPEC] [overrides]``; MODEL or profile is required."""

    model: str | None = None
    profile: str | None = None
    gpus: str | None = None
    overrides: Overrides = field(default_factory=Overrides)


def price(request: PriceRequest, provider: "Provider") -> Estimate | NoFit | Stop:
    """Price MODEL at the requested shape. MODEL names what is priced; ``--profile`` gives only the
    serving shape (a profile key given as MODEL is its own shape). A name the resolver cannot turn
    into facts is its stratum-1 ``Stop``; an unpriceable model is ``NoFit``. Raises ``UsageError``
    (nothing to price, unknown profile, weights unknown, a bad ``--gpus``)."""
    catalog = provider.catalog()
    if not request.model and not request.profile:
        raise UsageError("kv-calc needs MODEL or --profile")
    if request.profile and request.profile not in catalog.profiles:
        raise UsageError(f"unknown profile {request.profile!r}")
    name = request.model or request.profile or ""
    shape_profile = catalog.profiles[request.profile] if request.profile else catalog.profiles.get(name)
    facts = provider.resolve(name, catalog, weights_optional=True)
    if isinstance(facts, Stop):
        return facts
    shape = serving_shape(facts, shape_profile, request.overrides, catalog)
    spec = request.gpus if request.gpus is not None else default_gpus(shape, shape_profile)
    gpus = gpu_set(spec, catalog)
    assert gpus is not None
    result = estimate(facts, shape, gpus, request.overrides, label=name, gpus_spec=spec, profile=shape_profile,
                      catalog=catalog)
    if isinstance(result, Estimate):
        priced = replace(shape, tp=result.tp, pp=result.pp)
        here = measured_here(result.result, facts, priced, gpus.memory_bytes[:result.tp * result.pp], catalog,
                             provider.measured())
        if here is not None:
            result = replace(result, result=here[0])
    return result


def price_outcome(result: Estimate | NoFit | Stop) -> Outcome:
    """OK when it fits (clean or constrained); REFUSED for wont-fit, unpriceable, or a stop."""
    if isinstance(result, Estimate) and result.result.raw_verdict != "wont-fit":
        return Outcome.OK
    return Outcome.REFUSED


__all__ = ["PriceRequest", "price", "price_outcome"]
