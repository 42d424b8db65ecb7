"""Stratum 2: is ``--profile-like`` a registry profile that gives a vLLM runtime shape, and on
Path A does it serve the curated repo? (docs/DESIGN.md, the gate order)"""

from __future__ import annotations

from typing import TYPE_CHECKING

from club3090.catalog.model import NOT_EMITTABLE_TEXT
from club3090.outcome import Reason, Stop, Stratum

if TYPE_CHECKING:  # pragma: no cover - typing only
    from club3090.catalog.model import Catalog


def check_profile(key: str, catalog: "Catalog", *, path: str,
                          curated_model: str | None = None,
                          curated_variant: str | None = None) -> Stop | None:
    """Stratum 2: ``unknown-profile-like``, ``unsupported-runtime-engine`` (both paths),
    ``profile-not-emittable`` and ``profile-mismatch`` (Path A only)."""
    profile = catalog.profiles.get(key)
    if profile is None:
        import difflib

        close = difflib.get_close_matches(key, list(catalog.profiles), n=3, cutoff=0.75)
        near = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        return Stop(Stratum.PROFILE_LIKE, Reason.UNKNOWN_PROFILE_LIKE,
                    detail={"profile_like": key, "did_you_mean": tuple(close),
                            "message": f"{key!r} is not a registry profile{near} "
                                       "(list them with `club3090 profiles`)"})
    engine = catalog.engines.get(profile.engine)
    if engine is None or not engine.is_vllm:
        hint = f"`club3090 kv-calc {key}` prices it with llama.cpp's memory model; `club3090 up {key} " \
            "--dir DIR` serves it" \
            if engine is not None and engine.is_llamacpp else None
        return Stop(Stratum.PROFILE_LIKE, Reason.UNSUPPORTED_RUNTIME_ENGINE,
                    detail={"profile_like": key, "engine": profile.engine,
                            "engine_type": engine.type if engine else None,
                            "message": f"profile {key!r} runs on {profile.engine!r}"
                                       f" ({engine.type if engine else 'unknown'}); only vLLM "
                                       "profiles give a runtime shape the gate can price"
                                       + (f"; {hint}" if hint else ""),
                            **({"hint": hint} if hint else {})})
    if path == "A":
        ok, why = catalog.emittable(key)
        if not ok:
            return Stop(Stratum.PROFILE_LIKE, Reason.PROFILE_NOT_EMITTABLE,
                        detail={"profile_like": key, "not_emittable_reason": why,
                                "shipped_compose": profile.compose_path, "archived": profile.archived,
                                "message": f"{NOT_EMITTABLE_TEXT[why or ''][0]}; "
                                           f"{catalog.static_route(key)}"})
        if curated_model is None:
            return Stop(Stratum.PROFILE_LIKE, Reason.PROFILE_MISMATCH,
                        detail={"profile_like": key,
                                "message": "Path A needs a curated repo to match the profile against"})
        if profile.model != curated_model or profile.weights_variant != curated_variant:
            return Stop(Stratum.PROFILE_LIKE, Reason.PROFILE_MISMATCH,
                        detail={"profile_like": key,
                                "profile_model": profile.model,
                                "profile_variant": profile.weights_variant,
                                "curated_model": curated_model,
                                "curated_variant": curated_variant,
                                "message": f"{key!r} serves {profile.model}/{profile.weights_variant}, "
                                           f"but the repo is {curated_model}/{curated_variant}"})
    return None
