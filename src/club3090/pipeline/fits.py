"""``fits``: will a model fit this rig, or which catalog models do, ranked.

The rig (``--gpus``, else the detected GPUs) -> for each model: its facts (the one resolver; a
catalog model needs no network) -> its shape (the curated profile for the GPU count, else the
derived shape, ``pipeline.auto_profile``) -> the fit. No gate, no download: the plain question.
A Hub repo holding only GGUF files is priced quant by quant with llama.cpp's memory model
(``engines.llamacpp.fits``); a repo with safetensors and GGUF files is priced on its safetensors and
says the GGUF files are there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from club3090.fit.auto_shape import ShapeChoice
from club3090.fit.estimate import served_concurrency
from club3090.fit.memory import FitResult, Unpriceable, predict
from club3090.fit.shape import ShapeRequest, profile_shape
from club3090.fit.speed import SpeedEstimate, estimate_speed, speculation_of
from club3090.gate.advisories import advise
from club3090.outcome import Notice, Outcome, Reason, Stop, Stratum
from club3090.pipeline import engines
from club3090.pipeline.auto_profile import AutoShape, automatic_shape, weights_of
from club3090.pipeline.stages import calibrated
from club3090.rig.gpus import GpuSet, card_set
from club3090.rig.hardware import HardwareFacts, resolve_hardware

if TYPE_CHECKING:  # pragma: no cover - typing only
    from club3090.catalog.model import Catalog
    from club3090.engines.llamacpp.fits import GgufListing
    from club3090.fit.memory import ServeShape
    from club3090.gate.cliffs import Cliff
    from club3090.model.spec import ModelSpec
    from club3090.pipeline.provider import Provider

__all__ = ["FitsReport", "FitsRequest", "FitsRow", "fits", "rank_key"]


@dataclass(frozen=True, slots=True)
class FitsRequest:
    models: tuple[str, ...] = ()             # none: every catalog model
    gpus: GpuSet | None = None               # --gpus, parsed once by the CLI (None: detect)
    min_context: int | None = None
    shape: ShapeRequest = field(default_factory=ShapeRequest)   # the shape flags (vLLM's names)
    # GGUF repos, in llama.cpp's terms: -c (else --min-context, else 4096) and the cache types
    ctx_size: int | None = None
    cache_type_k: str | None = None
    cache_type_v: str | None = None
    gguf: bool = False                       # price a repo's GGUF files even when it has safetensors
    quant: str | None = None                 # --quant: only this quant of a GGUF repo
    user_defaults: Mapping[str, str] = field(default_factory=dict)   # model id -> the person's default profile


@dataclass(frozen=True, slots=True)
class FitsRow:
    model: str                               # what was asked (catalog id or repo id)
    repo: str | None                         # the repo `up` would serve
    fits: bool
    confidence: str | None = None
    shape_source: str | None = None          # curated-default | derived
    profile: str | None = None
    choice: ShapeChoice | None = None
    fit: FitResult | None = None
    tp: int = 1
    pp: int = 1
    kv_cache_dtype: str | None = None
    stop: str | None = None                  # why it could not be answered (a stop's token and text)
    speed: SpeedEstimate | None = None       # decode / TTFT estimate (None: no bandwidth known)
    gpus_per_node: int = 0                   # a rig of several nodes: GPUs in each (0: one machine)
    advisories: tuple[Notice, ...] = ()      # stratum-5 advice (gate.advisories): variants that fit, swap
    facts: "ModelSpec | None" = field(default=None, compare=False, repr=False)
    shape: "ServeShape | None" = field(default=None, compare=False, repr=False)
    gguf: "GgufListing | None" = None        # a GGUF repo: every quant priced for llama.cpp
    gguf_files: tuple[str, ...] = ()         # a safetensors repo that also holds GGUF files
    cliffs: "tuple[Cliff, ...]" = ()         # known failure modes from the catalog (gate.cliffs), shown first

    @property
    def context(self) -> int:
        if self.gguf is not None:
            best = self.gguf.best
            return best.fit.context if best is not None and best.fit is not None else 0
        return self.fit.max_model_len if self.fit is not None else 0

    @property
    def concurrency(self) -> float:
        return self.fit.max_concurrency if self.fit is not None else 0.0

    def to_json(self) -> dict[str, Any]:
        fit = self.fit
        return {"model": self.model, "repo": self.repo, "fits": self.fits, "confidence": self.confidence,
                "shape_source": self.shape_source, "profile": self.profile,
                "tensor_parallel_size": self.tp, "pipeline_parallel_size": self.pp,
                "kv_cache_dtype": self.kv_cache_dtype,
                "max_model_len": fit.max_model_len if fit else None,
                "max_model_len_fit": fit.max_model_len_fit if fit else None,
                "max_concurrency": round(fit.max_concurrency, 2) if fit else None,
                "concurrent_requests": served_concurrency(fit) if fit else None,
                "raw_verdict": fit.raw_verdict if fit else None,
                "calibration": fit.calibration.to_json() if fit is not None and fit.calibration else None,
                "shape": self.choice.to_json() if self.choice is not None else None, "stop": self.stop,
                "speed": self.speed.to_json() if self.speed is not None else None,
                "gguf": self.gguf.to_json() if self.gguf is not None else None,
                "gguf_files": list(self.gguf_files),
                "advisories": [n.to_json() for n in self.advisories],
                "cliffs": [c.to_json() for c in self.cliffs],
                "worst_rank": worst_rank(fit, self.tp, self.gpus_per_node) if fit else None}


@dataclass(frozen=True, slots=True)
class FitsReport:
    hardware: HardwareFacts | None
    rows: tuple[FitsRow, ...] = ()
    stop: Stop | None = None                 # no rig to price (no GPU named or detected)
    gpus: GpuSet | None = None               # the --gpus asked about (None: detected)
    notes: tuple[str, ...] = field(default=())

    @property
    def outcome(self) -> Outcome:
        """Asked about one model: OK when it fits. A ranking: OK when something fits."""
        if self.stop is not None or not any(r.fits for r in self.rows):
            return Outcome.REFUSED
        return Outcome.OK


def worst_rank(fit: FitResult, tp: int, gpus_per_node: int = 0) -> dict[str, Any]:
    """The rank that limits the KV pool (vLLM takes the fewest blocks over all workers): where it
    sits and how its memory splits. The context and concurrency of the whole server are its.
    ``rank``, ``stage`` and ``node`` count from 1, in JSON as in the text (the first GPU is rank 1)."""
    r = fit.per_gpu
    stage = r.rank // max(tp, 1)
    stages = len(fit.ranks) // max(tp, 1)
    doc: dict[str, Any] = {**r.to_json(), "rank": r.rank + 1, "stage": stage + 1, "stages": stages,
                           "layers": r.num_layers, "embeddings": stage == 0, "lm_head": stage == stages - 1,
                           "gpu_memory_bytes": r.gpu_memory_bytes, "num_blocks": r.num_blocks}
    if gpus_per_node:
        doc["node"] = r.rank // gpus_per_node + 1
    return doc


def rank_key(row: FitsRow) -> tuple[int, int, int, float]:
    """Fits first; then the most context, the fewest GPUs, the most concurrency."""
    return (0 if row.fits else 1, -row.context, row.tp * row.pp, -row.concurrency)


def fits(request: FitsRequest, provider: "Provider") -> FitsReport:
    catalog = provider.catalog()
    given = request.gpus
    detected = provider.detect_gpus() if given is None else None
    count = given.count if given is not None else len(detected.gpus) if detected is not None else 0
    hw = resolve_hardware(tp=max(count, 1), gpu_set=given, detected=detected)
    if hw.sm is None or not hw.memory_bytes:
        why = ("--gpus gives memory sizes, not a known card: name the card (2x3090) so its SM is known"
               if given is not None else "no GPU detected and no --gpus given: name your GPUs, e.g. "
               "--gpus 1x3090, --gpus 2x4090 or --gpus 4xH100-80GB")
        return FitsReport(hardware=hw, stop=Stop(Stratum.ENGINE_SUPPORT, Reason.HARDWARE_SM_UNDETERMINED,
                                                 detail={"message": why}))
    names = list(request.models) if request.models else []
    if len(names) != 1:
        names = [*catalog.models, *(n for n in names if n not in catalog.models)]
    cards = given if given is not None else card_set(hw.memory_bytes, hw.names,
                                                     tuple(catalog.gpu(n) for n in hw.names), hw.sm, "detected")
    local = (provider.measured(), provider.receipts())
    rows = [with_advice(with_speed(with_local(row_for(name, provider, catalog, hw, request), catalog, hw, local,
                                              request.min_context), catalog, cards), catalog, hw)
            for name in names]
    if hw.nodes > 1:
        rows = [replace(r, gpus_per_node=hw.gpus_per_node) for r in rows]
    if len(names) > 1:
        rows.sort(key=rank_key)
    return FitsReport(hardware=hw, rows=tuple(rows), gpus=request.gpus)


def row_for(name: str, provider: "Provider", catalog: "Catalog", hw: HardwareFacts,
            request: FitsRequest) -> FitsRow:
    """One model's row, from the engine the registry names: ``--gguf`` asks for the GGUF files'
    engine by their format; otherwise the resolver decides (a GGUF-only repo is llama.cpp's)."""
    if request.gguf and name not in catalog.models and _is_hub_repo(name):
        return engines.for_format("gguf").fits_row(name, provider, hw, request)
    facts = provider.resolve(name, catalog)
    other = engines.for_stop(facts) if isinstance(facts, Stop) else None
    if other is not None:
        if name not in catalog.models and _is_hub_repo(name):
            return other.fits_row(name, provider, hw, request)
        model = catalog.models.get(name)
        variant = model.weights.get(model.default_weight_variant) if model is not None else None
        if len(request.models) == 1 and variant is not None and variant.hf_repos:
            # one catalog model asked about whose weights are another engine's: its repo (network)
            return other.fits_row(variant.hf_repos[0], provider, hw, request, label=name, only=tuple(variant.files))
    if isinstance(facts, Stop):
        return FitsRow(model=name, repo=None, fits=False,
                       stop=f"{facts.token}: {facts.detail.get('message', '')}".rstrip(": "))
    return vllm_row(name, provider, hw, request, facts=facts)


def vllm_row(name: str, provider: "Provider", hw: HardwareFacts, request: FitsRequest, *,
             facts: "ModelSpec | None" = None) -> FitsRow:
    """A model's row under vLLM: the automatic shape (``pipeline.auto_profile.automatic_shape``,
    the one ``pull`` and ``kv-calc`` use) priced on the rig."""
    catalog = provider.catalog()
    if facts is None:
        resolved = provider.resolve(name, catalog)
        if isinstance(resolved, Stop):
            return FitsRow(model=name, repo=None, fits=False,
                           stop=f"{resolved.token}: {resolved.detail.get('message', '')}".rstrip(": "))
        facts = resolved
    repo = repo_of(facts, catalog)
    mine = _own_default(facts, catalog, request, hw.count)
    auto = AutoShape(profile=mine) if mine is not None else \
        automatic_shape(facts, hw, catalog, request.shape, min_context=request.min_context)
    if auto.profile is not None:
        curated = _curated_row(name, repo, facts, catalog, hw, auto.profile, request.min_context)
        if curated.fits or hw.nodes == 1:
            return curated
        auto = automatic_shape(facts, hw, catalog, request.shape, min_context=request.min_context,
                               curated=False)
    choice = auto.choice
    assert choice is not None
    pick = choice.chosen or choice.best
    if pick is None:
        return FitsRow(model=name, repo=repo, fits=False, confidence=facts.confidence, shape_source="derived",
                       choice=choice, stop=f"no-fit-model: {choice.unpriceable or choice.reason}", facts=facts)
    return FitsRow(model=name, repo=repo, fits=choice.fits, confidence=facts.confidence, shape_source="derived",
                   choice=choice, fit=pick.fit, tp=pick.shape.tp, pp=pick.shape.pp,
                   kv_cache_dtype=pick.shape.kv_cache_dtype, facts=facts, shape=pick.shape,
                   gguf_files=facts.gguf_files)


def _own_default(facts: "ModelSpec", catalog: "Catalog", request: FitsRequest, gpus: int) -> str | None:
    """The person's default profile for this curated model (``profiles --set-default``), when it is a
    vLLM profile of these weights for at most ``gpus`` GPUs and no shape flag was given."""
    if facts.curated is None or request.shape != ShapeRequest():
        return None
    key = catalog.profile_key(request.user_defaults.get(facts.curated.model_id) or "")
    if key is None or engines.for_profile(catalog, key) is not engines.DEFAULT:
        return None
    p = catalog.profiles[key]
    return key if p.weights_variant == facts.curated.variant_id and p.tp * p.pp <= gpus else None


def _is_hub_repo(name: str) -> bool:
    from club3090.edges.resolve import is_repo_id, split_source

    return is_repo_id(split_source(name)[0])


def _curated_row(name: str, repo: str | None, facts: "ModelSpec", catalog: "Catalog", hw: HardwareFacts,
                 key: str, min_context: int | None) -> FitsRow:
    profile = catalog.profiles[key]
    shape = profile_shape(profile, catalog, device_name=hw.names[0] if hw.names else None)
    fit = predict(facts.arch, weights_bytes=int(weights_of(facts, catalog) or 0),
                  gpu_memory_bytes=hw.memory_bytes[:profile.tp * profile.pp], shape=shape,
                  confidence=facts.confidence)
    if isinstance(fit, Unpriceable):
        return FitsRow(model=name, repo=repo, fits=False, confidence=facts.confidence, profile=key,
                       shape_source="curated-default", stop=f"no-fit-model: {fit.reason}")
    ok = fit.raw_verdict != "wont-fit" and fit.max_model_len >= (min_context or 0)
    return FitsRow(model=name, repo=repo, fits=ok, confidence=facts.confidence, shape_source="curated-default",
                   profile=key, fit=fit, tp=profile.tp, pp=profile.pp, kv_cache_dtype=profile.kv_format,
                   facts=facts, shape=shape)


def with_local(row: FitsRow, catalog: "Catalog", hw: HardwareFacts,
               local: "tuple[Sequence[Mapping[str, Any]], Sequence[Mapping[str, Any]]]",
               min_context: int | None = None) -> FitsRow:
    """The row priced from this machine's measurements of its shape or a near one (``calibrated``)."""
    if row.fit is None or row.facts is None or row.shape is None:
        return row
    shape = replace(row.shape, tp=row.tp, pp=row.pp)
    here = calibrated(row.fit, row.facts, shape, hw.memory_bytes[:row.tp * row.pp], catalog, *local,
                      profile=row.profile)
    if here is None:
        return row
    fit, facts, _notice = here
    ok = fit.raw_verdict != "wont-fit" and fit.max_model_len >= (min_context or 0)
    return replace(row, fit=fit, fits=ok, confidence=facts.confidence)


def with_speed(row: FitsRow, catalog: "Catalog", cards: GpuSet) -> FitsRow:
    """The row with its decode / TTFT estimate at the shape it was priced at (fits only)."""
    if not row.fits or row.fit is None or row.facts is None:
        return row
    shape = replace(row.shape, tp=row.tp, pp=row.pp) if row.shape is not None else None
    if shape is None:
        return row
    curated = row.facts.curated
    model = catalog.models.get(curated.model_id) if curated is not None else None
    variant = model.weights.get(curated.variant_id) if model is not None and curated is not None else None
    speculation = speculation_of(shape, _drafter_method(row.profile, catalog),
                                 weights_format=variant.format if variant is not None else None)
    speed = estimate_speed(row.facts.arch, int(weights_of(row.facts, catalog) or 0), shape, cards,
                           speculation=speculation)
    return replace(row, speed=speed)


def _drafter_method(profile: str | None, catalog: "Catalog") -> str | None:
    """The speculative method of a curated profile's drafter (None: no profile or no drafter)."""
    entry = catalog.profiles.get(profile) if profile else None
    drafter = catalog.drafters.get(entry.drafter) if entry is not None and entry.drafter else None
    return drafter.method if drafter is not None else None


def with_advice(row: FitsRow, catalog: "Catalog", hw: HardwareFacts) -> FitsRow:
    """The row with the known cliffs and the stratum-5 advisories that apply to it (no advisory for a
    curated model that fits)."""
    row = with_cliffs(row, catalog, hw)
    if row.facts is None or row.facts.source == "local" or (row.fits and row.facts.curated is not None):
        return row
    notes = advise(row.facts, catalog, fit=row.fit, memory=hw.memory_bytes,
                   device_name=hw.names[0] if hw.names else None, gpu_count=hw.count)
    return replace(row, advisories=notes) if notes else row


def with_cliffs(row: FitsRow, catalog: "Catalog", hw: HardwareFacts) -> FitsRow:
    from club3090.gate.cliffs import known_cliffs, served_by_profile, weight_format_of

    facts = row.facts
    if facts is None:
        return row
    profile = catalog.profiles.get(row.profile or "")
    served = served_by_profile(catalog, profile, tp=row.tp, pp=row.pp, weight_format=weight_format_of(facts),
                               engine=engines.for_format("gguf" if row.gguf is not None else "safetensors").name,
                               sm=hw.sm)
    cliffs = known_cliffs(catalog, profile=profile, served=served,
                          curated_model=facts.curated.model_id if facts.curated else None,
                          architecture=facts.arch.architecture)
    return replace(row, cliffs=cliffs) if cliffs else row


def repo_of(facts: "ModelSpec", catalog: "Catalog") -> str | None:
    if facts.curated is not None:
        model = catalog.models.get(facts.curated.model_id)
        variant = model.weights.get(facts.curated.variant_id) if model is not None else None
        if variant is not None and variant.hf_repo:
            return variant.hf_repo
    return facts.ref if facts.source == "hub" else facts.ref or None
