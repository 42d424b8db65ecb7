"""``club3090 profiles MODEL``: a per-model quick start generated from the catalog (issue 28 item 8):
the model's launchable profiles for 1, 2 and 4 GPUs, which one routing picks for each (``gate/routing``),
and the ``pull`` / ``up`` lines to run. Pure: the catalog in, a JSON-able dict out."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from club3090.gate.routing import count_class, route

if TYPE_CHECKING:  # pragma: no cover - typing only
    from club3090.catalog.model import Catalog

__all__ = ["GPU_COUNTS", "quick_start", "render_quick_start"]

GPU_COUNTS = (1, 2, 4)


def _chosen(catalog: "Catalog", model_id: str, count: int, user_default: str | None) -> tuple[str | None, str]:
    """(profile, why) for ``count`` GPUs: the person's default when its TP fits, else routing, else
    upstream's ``serving_defaults``."""
    mine = catalog.profiles.get(user_default or "")
    if mine is not None and mine.tp * mine.pp <= count:
        return mine.key, "your default (`club3090 profiles --set-default`)"
    routed = route(catalog, model_id, count)
    if routed is not None:
        return routed.profile, routed.why
    key = catalog.models[model_id].serving_defaults.get(count_class(count))
    return (key, "upstream's serving default") if key in catalog.profiles else (None, "no curated default")


def quick_start(catalog: "Catalog", model_id: str, user_default: str | None = None) -> dict[str, Any]:
    model = catalog.models[model_id]
    mine = [p for p in catalog.profiles.values() if p.model == model_id]
    rigs = []
    for count in GPU_COUNTS:
        key, why = _chosen(catalog, model_id, count, user_default)
        others = sorted(p.key for p in mine if p.launchable and p.tp * p.pp == count and p.key != key)
        profile = catalog.profiles.get(key or "")
        gpus = f"{count}x{profile.reference_gpu if profile is not None and profile.reference_gpu else 'rtx-3090'}"
        vllm = profile is None or catalog.engines[profile.engine].type == "vllm"
        # pull's gate prices vLLM profiles only; another engine's profile is priced by kv-calc
        ask = (f"club3090 pull {model_id} --gpus {gpus}" + (f" --profile-like {key}" if key else "") if vllm
               else f"club3090 kv-calc {key} --gpus {gpus}")
        rigs.append({"gpus": count, "profile": key, "why": why, "others": others, "pull": ask,
                     "up": f"club3090 up {model_id} --gpus {gpus} --dir ./{model_id}"
                           + (f" --profile-like {key}" if key else "")})
    return {"model": model_id, "display_name": model.display_name,
            "weights": {v: list(w.hf_repos) for v, w in sorted(model.weights.items())},
            "default_weight_variant": model.default_weight_variant, "user_default": user_default,
            "deprecated": sorted(p.key for p in mine if p.status == "deprecated"), "rigs": rigs}


def render_quick_start(doc: dict[str, Any]) -> list[str]:
    """The quick start as lines of text (the caller escapes them for the terminal)."""
    default = doc["default_weight_variant"]
    lines = [f"{doc['display_name']} ({doc['model']}): quick start",
             f"weights: {default} ({', '.join(doc['weights'].get(default, [])) or 'no repo'}); "
             f"{len(doc['weights']) - 1} other variant(s) in --json"]
    if doc["user_default"]:
        lines.append(f"your default profile: {doc['user_default']}")
    for rig in doc["rigs"]:
        n = rig["gpus"]
        lines.append(f"{n} GPU{'s' if n > 1 else ''}: " + (f"{rig['profile']} ({rig['why']})" if rig["profile"]
                                                          else "no curated default: the derived shape"))
        if rig["others"]:
            lines.append(f"  also: {', '.join(rig['others'])}")
        lines += [f"  {rig['pull']}", f"  {rig['up']}"]
    if doc["deprecated"]:
        lines.append(f"deprecated (refused by `up` without --allow-deprecated): {', '.join(doc['deprecated'])}")
    return lines
