"""Routing policy (issue 28 item 3): which curated profile serves a curated model when no profile
is named, and whether a named profile may still be launched.

The catalog's ``upstream.engine_preference`` orders engine families per GPU-count class
(``single`` / ``dual`` / ``multi``); a model's ``engine_defaults`` names each family's profile for
a class. The first family in that order with a default for the rig's class wins. A person's own
default (``club3090 profiles --set-default``) is applied before this, by the caller.

Pure: values in, values out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from club3090.errors import UsageError

if TYPE_CHECKING:  # pragma: no cover - typing only
    from club3090.catalog.model import Catalog, Profile

__all__ = ["DEPRECATED", "Route", "count_class", "deprecated_refusal", "route"]

DEPRECATED = "deprecated"


def count_class(gpu_count: int) -> str:
    """Upstream's GPU-count class: ``single`` (one), ``dual`` (two), ``multi`` (more)."""
    return "single" if gpu_count <= 1 else "dual" if gpu_count == 2 else "multi"


@dataclass(frozen=True, slots=True)
class Route:
    """The profile routing chose, the engine family it came from and why (one line, for a note)."""

    profile: str
    family: str
    why: str


def route(catalog: "Catalog", model_id: str, gpu_count: int, variant: str | None = None) -> Route | None:
    """The curated profile ``engine_preference`` x ``engine_defaults`` picks for ``model_id`` on
    ``gpu_count`` GPUs (``variant``: only profiles of those weights, when the person named a repo);
    None when the catalog names none (then the gate's automatic shape decides)."""
    model = catalog.models.get(model_id)
    if model is None or not model.engine_defaults:
        return None
    klass = count_class(gpu_count)
    upstream = catalog.upstream.get("club-3090")
    order = tuple(upstream.engine_preference.get(klass, ())) if upstream is not None else ()
    families = (*order, *sorted(f for f in model.engine_defaults if f not in order))
    for family in families:
        key = model.engine_defaults.get(family, {}).get(klass)
        profile = catalog.profiles.get(key or "")
        if profile is None or profile.model != model_id or profile.status == DEPRECATED:
            continue
        if variant is not None and profile.weights_variant != variant:
            continue
        return Route(profile.key, family, f"engine_preference[{klass}] = {list(order)}; {family} is the first "
                                          f"with a {klass} default for {model_id}: {profile.key}")
    return None


def deprecated_refusal(profile: "Profile", allow: bool) -> UsageError | None:
    """``up`` of a deprecated profile stops naming its replacement unless ``--allow-deprecated``."""
    if profile.status != DEPRECATED or allow:
        return None
    instead = (f"use --profile-like {profile.replaced_by}" if profile.replaced_by
               else "`club3090 profiles` lists the current ones")
    note = f" ({profile.status_note})" if profile.status_note else ""
    return UsageError(f"profile {profile.key} is deprecated upstream{note}; {instead}, "
                      "or pass --allow-deprecated to launch it anyway")
