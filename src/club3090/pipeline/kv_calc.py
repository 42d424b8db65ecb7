"""``kv-calc``: the same stages as ``pull`` up to the fit, and no gate: model facts (the one
resolver) -> rig (``--gpus``, else the GPUs detected here, else a profile's reference card, said
so) -> serving shape -> fit. The engine comes from the registry (``pipeline.engines``).

The shape is the one ``fits`` and ``pull`` choose (``pipeline.auto_profile.automatic_shape``:
the curated profile for this rig, else the derived shape) unless ``--profile`` names one or a
flag only ``kv-calc`` has pins a setting the automatic shape does not choose (``--block-size``,
``--vllm-version``, ...): then vLLM's defaults plus the flags are priced and ``shape_note`` says
so first, so the two answers never differ silently.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING

from club3090.errors import UsageError
from club3090.fit.auto_shape import ShapeChoice
from club3090.fit.estimate import Estimate, NoFit, PriceSettings, estimate, serving_shape
from club3090.model.param_estimate import estimate_weights
from club3090.outcome import Outcome, Reason, Stop, Stratum
from club3090.pipeline import engines
from club3090.pipeline.auto_profile import automatic_shape
from club3090.pipeline.stages import calibrated
from club3090.rig.gpus import GpuSet, card_set
from club3090.rig.hardware import resolve_hardware

if TYPE_CHECKING:  # pragma: no cover - typing only
    from club3090.catalog.model import Catalog, Profile
    from club3090.engines.llamacpp.price import LlamaFlags
    from club3090.fit.memory import ServeShape
    from club3090.model.architecture import Architecture
    from club3090.model.spec import ModelSpec
    from club3090.pipeline.provider import Provider


def _no_llama_flags() -> "LlamaFlags":
    from club3090.engines.llamacpp.price import LlamaFlags

    return LlamaFlags()


@dataclass(frozen=True, slots=True)
class PriceRequest:
    """``kv-calc MODEL [--profile KEY] [--gpus SPEC] [overrides]``; MODEL or profile is required."""

    model: str | None = None
    profile: str | None = None
    gpus: GpuSet | None = None               # --gpus, parsed once by the CLI (None: detect)
    overrides: PriceSettings = field(default_factory=PriceSettings)
    drafter: str | None = None               # --speculative-config's model: the draft checkpoint
    llamacpp: "LlamaFlags" = field(default_factory=_no_llama_flags)   # llama.cpp's own flags (a GGUF model)


# besides the shape request: flags that ask a question of the shape, not pin a setting it does not choose
ASKS = ("shape", "solve_max_ctx")
# settings whose flag is not their field's name
FLAG_NAMES = {"speculative_method": "--speculative-config", "enable_prefix_caching": "--[no-]enable-prefix-caching"}


def price(request: PriceRequest, provider: "Provider") -> object:
    """MODEL priced by the engine that serves it: ``Estimate | NoFit | Stop`` for vLLM, the llama.cpp
    engine's values for a GGUF model. A resolver stop naming another engine's format (a GGUF-only
    repo) hands the request to that engine. Raises ``UsageError`` (nothing to price, an unknown
    profile, weights unknown)."""
    catalog = provider.catalog()
    if not request.model and not request.profile:
        raise UsageError("kv-calc needs MODEL or --profile")
    request = renamed(request, catalog)
    if request.profile and request.profile not in catalog.profiles:
        raise UsageError(f"unknown profile {request.profile!r}{did_you_mean(request.profile, catalog)}; "
                         "list them with `club3090 profiles`")
    name = request.model or request.profile or ""
    if not request.profile and looks_like_profile_typo(name, catalog):   # never a Hub round trip
        raise UsageError(f"{name!r} is not a profile{did_you_mean(name, catalog)}; "
                         "list them with `club3090 profiles`")
    result = engines.for_request(catalog, request.model, request.profile).price(request, provider)
    other = engines.for_stop(result) if isinstance(result, Stop) else None
    return other.price(request, provider) if other is not None else result


def price_vllm(request: PriceRequest, provider: "Provider") -> Estimate | NoFit | Stop:
    """vLLM's answer: the resolver's facts at the automatic shape (or the profile's, or vLLM's
    defaults with the flags), on the rig, corrected by measurements where there are some."""
    catalog = provider.catalog()
    name = request.model or request.profile or ""
    profile = catalog.profiles[request.profile] if request.profile else catalog.profiles.get(name)
    facts = provider.resolve(name, catalog, weights_optional=True)
    if isinstance(facts, Stop):
        return facts
    o = request.overrides
    rig = _rig(request, provider, catalog, profile, (o.shape.tensor_parallel_size or (profile.tp if profile else 1))
               * (o.shape.pipeline_parallel_size or (profile.pp if profile else 1)))
    if isinstance(rig, Stop):
        return rig
    gpus, rig_note = rig
    shape, profile, choice, note = _shape(facts, profile, gpus, o, catalog)
    if isinstance(shape, NoFit):
        return shape
    drafter = None
    if request.drafter:
        drafter, draft_bytes = _drafter(request.drafter, provider, catalog)
        shape = replace(shape, extra_weights_bytes=draft_bytes)
    result = estimate(facts, shape, gpus, o, label=name, gpus_spec=gpus.spec, profile=profile,
                      catalog=catalog, drafter=drafter)
    if not isinstance(result, Estimate):
        return result
    result = replace(result, choice=choice, shape_note=note, rig_note=rig_note)
    priced = replace(shape, tp=result.tp, pp=result.pp, device_name=_device(gpus),
                     max_model_len=result.result.max_model_len if o.solve_max_ctx else shape.max_model_len)
    here = calibrated(result.result, facts, priced, gpus.memory_bytes[:result.tp * result.pp], catalog,
                      provider.measured(), provider.receipts(), profile=profile.key if profile is not None else None)
    return replace(result, result=here[0]) if here is not None else result


def _device(gpus: GpuSet) -> str | None:
    return gpus.gpus[0].display_name if gpus.gpus and gpus.gpus[0] is not None else None


def pinned_flags(o: PriceSettings) -> tuple[str, ...]:
    """The kv-calc flags given that the automatic shape does not choose (vLLM's flag names)."""
    given = [f.name for f in fields(PriceSettings) if f.name not in ASKS and getattr(o, f.name) != f.default]
    return tuple(dict.fromkeys(FLAG_NAMES.get(name, "--" + name.replace("_", "-")) for name in given))


def _shape(facts: "ModelSpec", profile: "Profile | None", gpus: GpuSet, o: PriceSettings, catalog: "Catalog",
           ) -> "tuple[ServeShape | NoFit, Profile | None, ShapeChoice | None, str | None]":
    """(the shape, the profile it came from, the derived choice, what the first line says about it)."""
    if profile is not None:
        return serving_shape(facts, profile, o, catalog), profile, None, None
    pinned = pinned_flags(o)
    if pinned or (facts.weights_bytes is None and facts.curated is None):
        why = (f"{', '.join(pinned)} given" if pinned else "weights unknown (priced from --weights-gib or "
               "config.json)")
        return (serving_shape(facts, None, o, catalog), None, None,
                f"shape: vLLM's defaults with the flags given ({why}), not the automatic shape `fits` and `pull` "
                "choose")
    hw = resolve_hardware(tp=gpus.count, gpu_set=gpus)
    auto = automatic_shape(facts, hw, catalog, o.shape)
    if auto.profile is not None:
        chosen = catalog.profiles[auto.profile]
        return serving_shape(facts, chosen, o, catalog), chosen, None, \
            f"shape: the curated profile {chosen.key} for this rig (as `fits` and `pull` choose it)"
    assert auto.choice is not None
    pick = auto.choice.chosen or auto.choice.best
    if pick is None:
        return NoFit(model=facts.ref, error=auto.choice.unpriceable or auto.choice.reason), None, None, None
    return pick.shape, None, auto.choice, None


def _rig(request: PriceRequest, provider: "Provider", catalog: "Catalog", profile: "Profile | None",
         world: int) -> "tuple[GpuSet, str | None] | Stop":
    """The GPUs priced and a note when they were not named: ``--gpus``, else the NVIDIA GPUs
    detected here, else the profile's reference card x TP x PP; else a stop that asks."""
    if request.gpus is not None:
        return request.gpus, None
    hw = resolve_hardware(tp=1, detected=provider.detect_gpus())
    if hw.memory_bytes and hw.sm is not None:
        count = len(hw.memory_bytes)
        cards = tuple(catalog.gpu(n) for n in hw.names)
        names = sorted({c.id if c is not None else n for c, n in zip(cards, hw.names, strict=False)})
        return card_set(hw.memory_bytes, hw.names, cards, hw.sm, f"{count}x {', '.join(names)} (detected)"), None
    card = catalog.gpus.get(profile.reference_gpu) if profile is not None and profile.reference_gpu else None
    if card is not None and profile is not None:
        note = (f"no GPU detected and no --gpus given: priced on {profile.key}'s reference card "
                f"({card.display_name} x {world}); pass --gpus to price your own")
        return card_set((card.usable_memory_bytes,) * world, (card.id,) * world, (card,) * world, card.sm,
                        f"{world}x{card.id}"), note
    return Stop(Stratum.ENGINE_SUPPORT, Reason.HARDWARE_VRAM_UNDETERMINED,
                detail={"message": "no GPU detected and no --gpus given: name your GPUs, e.g. --gpus 1x3090, "
                                   "--gpus 2x4090 or --gpus 4xH100-80GB"})


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


def renamed(request: "PriceRequest", catalog: "Catalog") -> "PriceRequest":
    """An old (renamed) profile slug, as ``--profile`` or MODEL, read through the catalog's aliases
    (the seed's kv-calc alias fix): the request names the current profile."""
    from dataclasses import replace

    profile = catalog.profile_key(request.profile) if request.profile else None
    model = catalog.profile_key(request.model) if request.model and "/" in request.model else None
    return replace(request, profile=profile or request.profile,
                   model=model if model and model != request.model else request.model)


def looks_like_profile_typo(name: str, catalog: "Catalog") -> bool:
    """A name in a profile namespace (``vllm/``, ``llamacpp/``, ...) that is not a profile but is
    close to one: a typo, not a Hub repo to look up."""
    if name in catalog.profiles or "/" not in name:
        return False
    spaces = {key.split("/", 1)[0] for key in catalog.profiles}
    return name.split("/", 1)[0] in spaces and bool(did_you_mean(name, catalog))


def price_outcome(result: object) -> Outcome:
    """OK when it fits (clean or constrained); REFUSED for wont-fit, unpriceable, or a stop."""
    if isinstance(result, Estimate):
        return Outcome.OK if result.result.raw_verdict != "wont-fit" else Outcome.REFUSED
    return Outcome.OK if getattr(result, "fits", False) is True else Outcome.REFUSED


__all__ = ["PriceRequest", "pinned_flags", "price", "price_outcome", "price_vllm"]
