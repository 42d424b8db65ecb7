"""Which profile a command serves when the person names a curated model (issue 28 item 3).

In order: the profile named (an old, renamed slug through the catalog's aliases; ``up`` refuses a
deprecated one unless ``--allow-deprecated``); else the person's own default for that model
(``club3090 profiles --set-default``, read by the caller from the state folder); else, for ``up``,
the catalog's routing (``gate/routing.route``) when it hands the model to another engine than the
default one. Otherwise the gate's automatic shape decides, as before. Values in, values out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from club3090.gate.routing import deprecated_refusal, route

if TYPE_CHECKING:  # pragma: no cover - typing only
    from club3090.catalog.model import Catalog

__all__ = ["Choice", "choose_profile", "curated_model"]


@dataclass(frozen=True, slots=True)
class Choice:
    profile_like: str | None          # None: the gate's automatic shape
    notes: tuple[str, ...] = ()        # one line each, for stderr


def curated_model(catalog: "Catalog", source: str) -> tuple[str, str | None] | None:
    """(model id, weights variant) a source names in the catalog without any network: a model id
    (variant None: any of its weights) or one of a variant's ``hf_repos``; None otherwise."""
    if source in catalog.models:
        return source, None
    if source.count("/") != 1:
        return None
    hit = catalog.find_variant(source)
    return (hit[0].id, hit[1].id) if hit is not None else None


def choose_profile(catalog: "Catalog", source: str, profile_like: str | None, *,
                   user_defaults: Mapping[str, str] | None = None,
                   gpu_count: Callable[[], int] | None = None, gpus_given: int | None = None,
                   allow_deprecated: bool | None = None) -> Choice:
    """``gpu_count`` given (``up``): route between engines; ``gpus_given`` (``--gpus``): a default
    needing more GPUs is ignored; ``allow_deprecated`` given (``up``): a deprecated profile raises
    UsageError naming its replacement unless it is True."""
    key, notes = profile_like, list[str]()
    if key is None:
        key, notes = _defaulted(catalog, source, user_defaults, gpu_count, gpus_given)
    key = catalog.profile_key(key) or key if key is not None else None
    named = key if key is not None else catalog.profile_key(source)     # `up PROFILE` names one too
    if allow_deprecated is not None and named is not None and named in catalog.profiles:
        refusal = deprecated_refusal(catalog.profiles[named], allow_deprecated)
        if refusal is not None:
            raise refusal
    return Choice(key, tuple(notes))


def _defaulted(catalog: "Catalog", source: str, user_defaults: Mapping[str, str] | None,
               gpu_count: Callable[[], int] | None, gpus_given: int | None) -> tuple[str | None, list[str]]:
    from club3090.pipeline import engines

    curated = curated_model(catalog, source)
    if curated is None:
        return None, []
    model_id, variant = curated
    mine = (user_defaults or {}).get(model_id)
    if mine is not None:
        key = catalog.profile_key(mine)
        needs = catalog.profiles[key].tp * catalog.profiles[key].pp if key is not None else 0
        if key is not None and gpus_given is not None and needs > gpus_given:
            return None, [f"note: {model_id}: your default profile {key} needs {needs} GPUs, the rig has "
                          f"{gpus_given}: not used"]
        if key is not None:
            return key, [f"note: {model_id}: your default profile {key} (`club3090 profiles --set-default`; "
                         "--profile-like overrides it)"]
        return None, [f"note: {model_id}: your default profile {mine} is not in this catalog; ignored"]
    if gpu_count is None:
        return None, []
    routed = route(catalog, model_id, gpu_count(), variant)
    if routed is None or engines.for_profile(catalog, routed.profile) is engines.DEFAULT:
        return None, []
    return routed.profile, [f"note: routing {model_id}: {routed.why}"]
