"""The engine registry: every engine club3090 prices and launches, one line each.

``kv-calc``, ``fits``, ``pull``, ``up`` and ``swap`` ask this module which engine serves a request;
nothing else compares an engine's name. A profile is served by the engine its catalog record
names (``engines.yaml`` ``type``); a source no profile names is claimed by the first engine that
knows its file (a ``.gguf``) before any network, else by the default; after the resolver, a stop
that says the weights are another engine's format (``gguf-only``) hands the request to that engine.
docs/DESIGN.md §1 walks what a new engine adds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from club3090.engines import Engine
from club3090.engines.llamacpp import LLAMACPP
from club3090.engines.vllm import VLLM

if TYPE_CHECKING:  # pragma: no cover - typing only
    from club3090.catalog.model import Catalog, Profile
    from club3090.outcome import Stop

__all__ = ["DEFAULT", "ENGINES", "before_gate", "by_type", "for_format", "for_profile", "for_request", "for_stop", "profile_of"]

ENGINES: tuple[Engine, ...] = (VLLM, LLAMACPP)
DEFAULT: Engine = VLLM


def by_type(engine_type: str) -> Engine | None:
    """The engine of a catalog engine ``type`` (``vllm``, ``llama.cpp``); None: not one we run."""
    return next((e for e in ENGINES if e.name == engine_type), None)


def for_profile(catalog: "Catalog", key: str | None) -> Engine | None:
    """The engine that serves profile ``key`` (None: not a profile, or its engine is not registered)."""
    profile = catalog.profiles.get(key or "")
    engine = catalog.engines.get(profile.engine) if profile is not None else None
    return by_type(engine.type) if engine is not None else None


def profile_of(catalog: "Catalog", engine: Engine, *keys: str | None) -> "Profile | None":
    """The first of ``keys`` that is a profile ``engine`` serves."""
    for key in keys:
        if key and for_profile(catalog, key) is engine:
            return catalog.profiles[key]
    return None


def before_gate(catalog: "Catalog", *keys: str | None) -> "tuple[Engine, Profile] | None":
    """``up``: the engine (and its profile) that takes the request before the pull gate, whose
    strata are the default engine's: the first of ``keys`` that is another engine's profile."""
    for key in keys:
        engine = for_profile(catalog, key)
        if engine is not None and engine is not DEFAULT:
            return engine, catalog.profiles[key or ""]
    return None


def for_request(catalog: "Catalog", source: str | None, profile: str | None = None) -> Engine:
    """Before any network: the engine of ``profile`` (or of ``source`` when it is a profile key),
    else the engine that claims ``source`` as its file, else the default."""
    for key in (profile, source):
        engine = for_profile(catalog, key)
        if engine is not None:
            return engine
    return next((e for e in ENGINES if e.claims(source)), DEFAULT)


def for_format(weight_format: str) -> Engine:
    """The engine that reads weights in ``weight_format`` (``gguf``, ``safetensors``), else the default."""
    return next((e for e in ENGINES if weight_format in e.formats), DEFAULT)


def for_stop(stop: "Stop") -> Engine | None:
    """After the resolver: the engine whose format the stop names (a GGUF-only repo), if any."""
    return next((e for e in ENGINES if e.claims_stop(stop)), None)
