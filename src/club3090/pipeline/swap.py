"""``club3090 swap REPO --profile-like KEY --dir DIR``: a fine-tune on a curated service (docs/DESIGN.md).

REPO's facts (the one resolver: config.json, quantization config, safetensors headers) ->
the swap check against the curated profile (``gate.swap_match``: architecture row, quantization
method / bits / group size, measured-on geometry, no remote code) -> the fit re-priced with REPO's
own weight bytes at the profile's shape on this rig (confidence ``derived-from-curated``) -> the
disk margin -> ``up``'s deployment with the curated service cloned and only the model (repo id at
its commit) and the served name re-pointed -> download, start, verify (``--emit-only``: the
bundle only). Every refusal happens before anything is written.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from club3090.errors import Club3090Error, UsageError
from club3090.fit.memory import FitResult, Unpriceable, predict
from club3090.fit.runtime import RuntimeShape
from club3090.fit.shape import profile_shape
from club3090.gate.advisories import variants_advice
from club3090.gate.swap_match import Mismatch, SwapToken, check_swap
from club3090.model.slug import sanitize_slug
from club3090.outcome import Notice, Outcome, Stop
from club3090.pipeline import up_facts as facts
from club3090.pipeline.up import UpRequest, check_request, curated_launch, deploy
from club3090.pipeline.up_facts import FactLog, UpResult

if TYPE_CHECKING:  # pragma: no cover - typing only
    from club3090.catalog.model import Catalog, Profile
    from club3090.model.spec import ModelSpec, Quantization
    from club3090.pipeline.provider import Provider
    from club3090.rig.hardware import HardwareFacts

CONFIDENCE = "derived-from-curated"   # the curated profile's shape, priced with the fine-tune's weights


@dataclass(frozen=True)
class SwapRequest:
    """A swap: the ``up`` that serves the fine-tune (its repo, directory, curated profile and launch
    options, as ``up`` takes them) and swap's own two choices."""

    up: UpRequest
    emit_only: bool = False
    served_model_name: str | None = None

    @property
    def source(self) -> str:
        return self.up.source

    @property
    def profile_like(self) -> str:
        return self.up.profile_like or ""


@dataclass(frozen=True)
class SwapResult:
    outcome: Outcome
    repo: str
    profile_like: str
    facts: tuple[facts.Fact, ...] = ()        # the swap's own, then up's (the CLI renders them)
    refusal: str | None = None                      # a SwapToken value
    mismatches: tuple[Mismatch, ...] = ()
    fit: FitResult | None = None
    weights_bytes: int | None = None
    curated_weights_bytes: int | None = None
    served_model: str | None = None
    hardware: "HardwareFacts | None" = None
    memory: tuple[int, ...] = ()
    advisories: tuple[Notice, ...] = ()
    up: UpResult | None = None

    @property
    def ok(self) -> bool:
        return self.outcome is Outcome.OK

    def to_json(self) -> dict[str, Any]:
        fit = self.fit
        return {"ok": self.ok, "outcome": self.outcome.value, "repo": self.repo, "swap_of": self.profile_like,
                "refusal": self.refusal, "mismatches": [m.to_json() for m in self.mismatches],
                "confidence": CONFIDENCE, "weights_bytes": self.weights_bytes,
                "curated_weights_bytes": self.curated_weights_bytes, "served_model": self.served_model,
                "gpu_memory_bytes": list(self.memory),
                "raw_verdict": fit.raw_verdict if fit is not None else None,
                "fit": fit.to_json() if fit is not None else None,
                "advisories": [n.to_json() for n in self.advisories],
                "up": self.up.to_json() if self.up is not None else None}


def served_name(repo: str) -> str:
    """The served model name of a swap: the repo's name, as a safe slug."""
    return sanitize_slug(repo.rsplit("/", 1)[-1])


def _refused(result: SwapResult, log: FactLog, token: SwapToken | str, details: list[str],
             mismatches: tuple[Mismatch, ...] = ()) -> SwapResult:
    log.add(facts.SwapRefused(str(token), tuple(details), mismatches))
    return replace(result, outcome=Outcome.REFUSED, refusal=str(token), mismatches=mismatches,
                   facts=tuple(log.facts))


def _curated_quant(provider: "Provider", catalog: "Catalog", profile: "Profile",
                   found: "Quantization | None") -> tuple["Quantization | None", str | None]:
    """The curated repo's own quantization_config (for the group size the catalog does not record),
    and why the group size cannot be compared when it cannot be read."""
    from club3090.model.architecture import parse_config
    from club3090.model.quantization import resolve_quantization

    if found is None or found.group_size is None:
        return None, None
    variant = catalog.models[profile.model].weights.get(profile.weights_variant)
    repo = variant.hf_repo if variant is not None else None
    why = "the catalog names no repo for the curated variant"
    if repo is not None and not provider.settings.offline:
        try:
            config = provider.hub().fetch_json(repo, "config.json", variant.revision if variant else None)
            got = resolve_quantization(parse_config(config if isinstance(config, dict) else {}), {}, {})
            if not isinstance(got, Stop) and got[0] is not None:
                return got[0], None
            why = f"{repo} declares no quantization_config"
        except Club3090Error as exc:
            why = f"{repo}'s config.json could not be read ({type(exc).__name__})"
    elif repo is not None:
        why = "offline"
    return None, why


def _rig(req: SwapRequest, profile: "Profile", catalog: "Catalog", provider: "Provider"
         ) -> tuple["HardwareFacts", tuple[int, ...], str | None, facts.PricedOnReference | None]:
    """(hardware, the memory of the GPUs the profile uses, device name, the reference GPU it falls
    back on): --gpus, else detected, else the profile's reference GPU (stated)."""
    from club3090.rig.hardware import resolve_hardware

    given = req.up.gpus
    detected = provider.detect_gpus() if given is None or given.sm is None else None
    ranks = profile.tp * profile.pp
    hw = resolve_hardware(tp=ranks, gpu_set=given, detected=detected)
    memory = tuple(hw.memory_bytes[:ranks])
    device = hw.names[0] if hw.names else None
    reference = catalog.gpus.get(profile.reference_gpu)
    if len(memory) < ranks and reference is not None:
        memory = (reference.usable_memory_bytes,) * ranks
        device = reference.id
        return hw, memory, device, facts.PricedOnReference(reference.display_name, ranks)
    return hw, memory, device, None


def swap(req: SwapRequest, provider: "Provider") -> SwapResult:
    from club3090.pipeline.pull import PullRequest
    from club3090.pipeline.pull_gate import Gate, disk_stop

    check_request(req.up)
    catalog = provider.catalog()
    profile = catalog.profiles.get(req.profile_like)
    if profile is None:
        raise UsageError(f"unknown --profile-like {req.profile_like!r}; `club3090 profiles` lists them")
    from club3090.pipeline import engines

    if engines.for_profile(catalog, profile.key) is not engines.DEFAULT:    # swap re-prices the gate engine's fit
        raise UsageError(f"{profile.key} is not a vLLM service; `swap` re-points a vLLM profile (serve a GGUF with "
                         f"`club3090 up REPO --quant QUANT`)")
    result = SwapResult(outcome=Outcome.OK, repo=req.source, profile_like=profile.key)
    log = req.up.progress.log()
    spec = provider.resolve(req.source, catalog)
    if isinstance(spec, Stop):
        return _refused(result, log, SwapToken.FACTS_UNAVAILABLE,
                        [f"[swap] {spec.token}: {spec.detail.get('message', '')}".rstrip(": ")])
    result = replace(result, repo=spec.ref)
    if spec.source not in ("hub", "cache"):
        raise UsageError(f"{req.source} is not a Hugging Face repo outside the catalog; `swap` serves a fine-tune "
                         f"by repo id (a curated repo: `club3090 up {req.source} --profile-like {profile.key}`)")
    curated_quant, group_size_unchecked = _curated_quant(provider, catalog, profile, spec.quantization)
    mismatches = check_swap(spec, profile, catalog, curated_quant=curated_quant)
    if mismatches:
        return _refused(result, log, mismatches[0].token,
                        [f"[swap] {m.text}" for m in mismatches]
                        + [f"[swap] {profile.key}'s service cannot serve {spec.ref}: `club3090 pull {spec.ref}` "
                           "prices it on a derived shape"], mismatches)
    model = catalog.models[profile.model]
    variant = model.weights.get(profile.weights_variant)
    log.add(facts.SwapFits(spec.ref, profile.key, spec.arch.architecture, _quant_text(spec.quantization),
                           model.display_name, group_size_unchecked))
    return _priced(req, spec, profile, catalog, provider, result, log,
                   int(variant.size_bytes) if variant is not None and variant.size_bytes else None,
                   disk=lambda: disk_stop(Gate(request=PullRequest(source=req.source), slug=spec.ref, spec=spec),
                                          provider))


def _quant_text(q: "Quantization | None") -> str:
    if q is None:
        return "unquantized"
    group = f", group size {q.group_size}" if q.group_size is not None else ""
    return f"{q.method} {q.bits}-bit{group}"


def _priced(req: SwapRequest, spec: "ModelSpec", profile: "Profile", catalog: "Catalog",
            provider: "Provider", result: SwapResult, log: FactLog, curated_bytes: int | None,
            disk: Any) -> SwapResult:
    """The fit re-priced with the fine-tune's own weight bytes, the disk margin, then ``up``'s deployment."""
    hw, memory, device, reference = _rig(req, profile, catalog, provider)
    result = replace(result, hardware=hw, memory=memory, curated_weights_bytes=curated_bytes,
                     weights_bytes=spec.weights_bytes)
    if reference is not None:
        log.add(reference)
    if not spec.weights_bytes:
        return _refused(result, log, SwapToken.FACTS_UNAVAILABLE,
                        [f"[swap] the weight bytes of {spec.ref} are unknown (no safetensors headers read)"])
    fit = predict(spec.arch, weights_bytes=int(spec.weights_bytes), gpu_memory_bytes=memory,
                  shape=profile_shape(profile, catalog, device_name=device), confidence="derived")
    if isinstance(fit, Unpriceable):
        return _refused(result, log, SwapToken.FACTS_UNAVAILABLE, [f"[swap] the fit engine cannot price it: {fit.reason}"])
    constrained = profile.max_num_seqs if fit.raw_verdict == "fits-constrained" else None
    log.add(facts.SwapPriced(spec.ref, profile.key, int(spec.weights_bytes), curated_bytes, memory, fit.raw_verdict,
                             fit.max_model_len, fit.max_concurrency, constrained))
    result = replace(result, fit=fit)
    if fit.raw_verdict == "wont-fit":
        advice = variants_advice(spec, catalog, memory, device)
        result = replace(result, advisories=(advice,) if advice is not None else ())
        largest = (f"; the largest context that fits is {fit.max_model_len_fit:,}" if fit.max_model_len_fit
                   else "; the weights leave no room for a KV cache")
        return _refused(result, log, SwapToken.WONT_FIT,
                        [f"[swap] {spec.ref} does not fit {profile.key}'s shape on these GPUs{largest}",
                         *(f"advice: {n.text}" for n in result.advisories)])
    if not req.emit_only:
        stop = disk()
        if stop is not None:
            return _refused(result, log, stop.token, [f"[swap] {stop.token}: {stop.detail.get('message', '')}"])
    served = req.served_model_name or served_name(spec.ref)
    done: UpResult = deploy(req.up, spec, catalog, RuntimeShape.of(profile), provider, FactLog(log.show),
                            lambda _snapshot: curated_launch(profile.key, catalog, provider),
                            served_model=served, emit_only=req.emit_only, swap_of=profile.key)
    return replace(result, served_model=served, up=done, outcome=done.outcome, facts=(*log.facts, *done.facts))


__all__ = ["CONFIDENCE", "SwapRequest", "SwapResult", "served_name", "swap"]
