"""``kv-calc``: the same stages as ``pull`` up to the fit, and no gate: model facts (the one
resolver) -> serving shape (``--profile`` + overrides) -> rig (``--gpus``, else the profile's
reference card) -> fit."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from club3090.errors import UsageError
from club3090.fit.auto_shape import choose_shape
from club3090.fit.estimate import Estimate, NoFit, Overrides, default_gpus, estimate, serving_shape
from club3090.gate.engine_support import find_arch_row
from club3090.model.param_estimate import estimate_weights
from club3090.outcome import Outcome, Stop
from club3090.pipeline.auto_profile import curated_default, weights_of
from club3090.pipeline.stages import calibrated, gpu_set

if TYPE_CHECKING:  # pragma: no cover - typing only
    from club3090.catalog.model import Catalog
    from club3090.model.architecture import Architecture
    from club3090.pipeline.provider import Provider


@dataclass(frozen=True, slots=True)
class PriceRequest:
    """``kv-calc MODEL [--profile KEY] [--gpus SPEC] [overrides]``; MODEL or profile is required."""

    model: str | None = None
    profile: str | None = None
    gpus: str | None = None
    overrides: Overrides = field(default_factory=Overrides)
    nodes: int | None = None                 # --nodes: --gpus is one node of that many
    interconnect: str | None = None          # --interconnect: the link between nodes
    drafter: str | None = None               # --speculative-config's model: the draft checkpoint


def price(request: PriceRequest, provider: "Provider") -> Estimate | NoFit | Stop:
    """Price MODEL at the requested shape. MODEL names what is priced; ``--profile`` gives only the
    serving shape (a profile key given as MODEL is its own shape). A name the resolver cannot turn
    into facts is its stratum-1 ``Stop``; an unpriceable model is ``NoFit``. Raises ``UsageError``
    (nothing to price, unknown profile, weights unknown, a bad ``--gpus``)."""
    catalog = provider.catalog()
    if not request.model and not request.profile:
        raise UsageError("kv-calc needs MODEL or --profile")
    if request.profile and request.profile not in catalog.profiles:
        raise UsageError(f"unknown profile {request.profile!r}{did_you_mean(request.profile, catalog)}; "
                         "list them with `club3090 profiles`")
    name = request.model or request.profile or ""
    if not request.profile and looks_like_profile_typo(name, catalog):   # never a Hub round trip
        raise UsageError(f"{name!r} is not a profile{did_you_mean(name, catalog)}; "
                         "list them with `club3090 profiles`")
    gpus = gpu_set(request.gpus, catalog, nodes=request.nodes,   # a bad --gpus fails before any network
                   interconnect=request.interconnect)
    shape_profile = catalog.profiles[request.profile] if request.profile else catalog.profiles.get(name)
    facts = provider.resolve(name, catalog, weights_optional=True)
    if isinstance(facts, Stop):
        return facts
    o = request.overrides
    auto = shape_profile is None and gpus is not None and o.tp is None and o.pp is None
    if auto and gpus is not None and facts.curated is not None and o == Overrides(solve_max_ctx=o.solve_max_ctx,
                                                             weights_gib=o.weights_gib):
        key = curated_default(catalog, facts, gpus.gpus_per_node if gpus.nodes > 1 else gpus.count)
        shape_profile = catalog.profiles[key] if key is not None else None
        auto = shape_profile is None
    shape = serving_shape(facts, shape_profile, o, catalog)
    choice = None
    if auto and gpus is not None and gpus.count > 1 and (facts.weights_bytes is not None or o.weights_gib):
        choice = choose_shape(facts, gpus.memory_bytes, catalog, sm=gpus.sm, vary_kv=False, solve_length=False,
                              base=shape, weights_bytes=weights_of(facts, catalog),
                              gpus_per_node=gpus.gpus_per_node if gpus.nodes > 1 else None,
                              interconnect=gpus.interconnect,
                              row=find_arch_row(catalog, curated_model=facts.curated.model_id if facts.curated
                                                else None, architecture=facts.arch.architecture))
        pick = choice.chosen or choice.best
        if pick is not None:
            shape = replace(shape, tp=pick.shape.tp, pp=pick.shape.pp)
    spec = request.gpus if request.gpus is not None else default_gpus(shape, shape_profile)
    gpus = gpus if gpus is not None else gpu_set(spec, catalog)
    assert gpus is not None
    drafter = None
    if request.drafter:
        drafter, draft_bytes = _drafter(request.drafter, provider, catalog)
        shape = replace(shape, extra_weights_bytes=draft_bytes)
    result = estimate(facts, shape, gpus, request.overrides, label=name, gpus_spec=spec, profile=shape_profile,
                      catalog=catalog, drafter=drafter)
    if isinstance(result, Estimate) and choice is not None:
        result = replace(result, choice=choice)
    if isinstance(result, Estimate):
        device = gpus.gpus[0].display_name if gpus.gpus and gpus.gpus[0] is not None else None
        priced = replace(shape, tp=result.tp, pp=result.pp, device_name=device,
                         max_model_len=result.result.max_model_len if o.solve_max_ctx else shape.max_model_len)
        here = calibrated(result.result, facts, priced, gpus.memory_bytes[:result.tp * result.pp], catalog,
                          provider.measured(), provider.receipts(),
                          profile=shape_profile.key if shape_profile is not None else None)
        if here is not None:
            result = replace(result, result=here[0])
    return result


def _drafter(name: str, provider: "Provider", catalog: "Catalog") -> tuple["Architecture", int]:
    """The draft checkpoint named in ``--speculative-config``: its config and weight bytes (from its
    safetensors headers, else a parameter-count estimate), through the same resolver as MODEL."""
    facts = provider.resolve(name, catalog, weights_optional=True)
    if isinstance(facts, Stop):
        raise UsageError(f"--speculative-config model {name!r}: {facts.token}; give the drafter's folder, "
                         "config.json or org/name")
    weights = facts.weights_bytes
    if weights is None:
        weights = estimate_weights(facts.arch).bytes
    return facts.arch, int(weights)


def did_you_mean(name: str, catalog: "Catalog") -> str:
    """``; did you mean 'vllm/minimal'?`` for a near miss of a profile key, else ''."""
    import difflib

    close = difflib.get_close_matches(name, list(catalog.profiles), n=3, cutoff=0.75)
    return f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""


def looks_like_profile_typo(name: str, catalog: "Catalog") -> bool:
    """A name in a profile namespace (``vllm/``, ``llamacpp/``, ...) that is not a profile but is
    close to one: a typo, not a Hub repo to look up."""
    if name in catalog.profiles or "/" not in name:
        return False
    spaces = {key.split("/", 1)[0] for key in catalog.profiles}
    return name.split("/", 1)[0] in spaces and bool(did_you_mean(name, catalog))


def price_outcome(result: Estimate | NoFit | Stop) -> Outcome:
    """OK when it fits (clean or constrained); REFUSED for wont-fit, unpriceable, or a stop."""
    if isinstance(result, Estimate) and result.result.raw_verdict != "wont-fit":
        return Outcome.OK
    return Outcome.REFUSED


__all__ = ["PriceRequest", "price", "price_outcome"]
