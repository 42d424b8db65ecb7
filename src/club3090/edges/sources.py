"""What ``kv-calc MODEL [--profile KEY]`` prices: MODEL resolved to a config, weights and a profile.

I/O at the edge. MODEL, first match wins:

1. an existing local folder (``config.json`` + safetensors) or a ``config.json`` path: the config,
   and weights from the safetensors headers next to it (the weight-set selection and header
   reader of :mod:`club3090.edges.derive`), unless the caller gives per-rank weights itself; with
   no safetensors, a parameter-count estimate from the config (:mod:`club3090.model.param_estimate`),
   said so in the weights note with its band;
2. a curated profile key, a catalog model id, or any ``hf_repos`` alias of a catalog weight variant;
3. anything else goes to :func:`club3090.edges.derive.derive` (the Hub, or the HF cache offline); its
   stratum-1 stop is returned as is (kv-calc exits 2 with its token, as ``inspect`` does).

``--profile KEY`` supplies the serving shape only (TP, PP, util, context, sequences, KV format,
the shipped ``--max-num-batched-tokens``, the engine's vLLM version, the reference GPU). MODEL
always names what is priced: the profile's own model and weights are used only when MODEL is
omitted (or is the profile key). The profile's drafter (speculative tokens, drafter weights) comes
with the shape unless MODEL is a catalog model the drafter does not serve (``model_compat``).
Without ``--profile``, a profile key given as MODEL is its own shape.

Confidence: ``exact`` for a catalog model (as ``derive`` says for a curated hit), the deriver's
for a Hub repo, ``estimated-lower-bound`` for a local folder.

``resolve_source(model, catalog, settings, *, profile_key=None, weights_given=False) -> ModelSource | Stop``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from club3090.edges.files import read_json_capped
from club3090.errors import InputError, UsageError
from club3090.gate.outcome import Stop
from club3090.model.spec import ModelSource

__all__ = ["ModelSource", "folder_weights", "resolve_source"]


def folder_weights(folder: Path) -> tuple[int | None, str]:
    """(weight bytes from the selected safetensors' headers, a note); (None, why) when there are none."""
    from club3090.edges.derive import read_local_header, select_weight_set

    names = [p.name for p in folder.iterdir() if p.is_file()]
    if not any(n.endswith(".safetensors") for n in names):
        return None, "no safetensors in the folder"
    chosen = select_weight_set(names, lambda n: read_json_capped(folder / n), where=f"{folder}: ",
                               file_label=lambda n: str(folder / n))
    if isinstance(chosen, Stop):
        return None, str(chosen.detail.get("message") or chosen.token)
    total = sum(read_local_header(folder / name).data_bytes for name in chosen.files)
    return total, f"{len(chosen.files)} safetensors header(s)"


def _existing_path(model: str | None) -> Path | None:
    if not model:
        return None
    try:
        path = Path(model).expanduser()
    except RuntimeError:        # "~user/..." for an unknown user: no such path
        return None
    return path if path.exists() else None


def resolve_source(model: str | None, catalog: Any, settings: Any, *, profile_key: str | None = None,
                   weights_given: bool = False) -> ModelSource | Stop:
    """Resolve MODEL (and ``--profile``). ``weights_given``: the caller prices per-rank weights itself.

    Returns the deriver's stratum-1 ``Stop`` for a Hub repo it cannot derive. Raises ``UsageError``
    (nothing to price, unknown profile, no config.json, weights unknown) and ``InputError``
    (config.json not a JSON object).
    """
    if not model and not profile_key:
        raise UsageError("kv-calc needs MODEL or --profile")
    if profile_key and profile_key not in catalog.profiles:
        raise UsageError(f"unknown profile {profile_key!r}")
    shape_profile = catalog.profiles[profile_key] if profile_key else catalog.profiles.get(model or "")
    path = _existing_path(model)
    if path is not None:
        source = _from_path(path, weights_given)
    elif not model or model in catalog.profiles:
        own = catalog.profiles[model or profile_key or ""]
        m = catalog.models[own.model]
        source = ModelSource(label=own.key if not model or model == profile_key else model,
                             **_model_fields(m, m.weights.get(own.weights_variant)))
    elif model in catalog.models:
        m = catalog.models[model]
        source = ModelSource(label=m.id, **_model_fields(m, m.weights.get(m.default_weight_variant)))
    elif (hit := catalog.find_variant(model)) is not None:
        source = ModelSource(label=model, **_model_fields(*hit))
    else:
        derived = _from_deriver(model, settings, catalog)
        if isinstance(derived, Stop):
            return derived
        source = derived
    if shape_profile is None:
        return source
    return _with_profile(source, catalog, shape_profile)


def _from_path(path: Path, weights_given: bool) -> ModelSource:
    if path.is_dir():
        cfg_path = path / "config.json"
        if not cfg_path.is_file():
            raise UsageError(f"{path}: no config.json")
        folder = path
    else:
        cfg_path, folder = path, path.parent
    config = read_json_capped(cfg_path)
    if not isinstance(config, Mapping):
        raise InputError(str(cfg_path), "config.json is not a JSON object")
    fields: dict[str, Any] = {}
    if not weights_given:
        weights, note = folder_weights(folder)
        if weights is None:
            # config only: a parameter-count estimate, flagged with its band
            from club3090.model.architecture import parse_config
            from club3090.model.param_estimate import estimate_weights

            arch = parse_config(config)
            if arch.unpriceable_reason or arch.hidden_size <= 0:
                raise UsageError(f"{path}: {note}; pass --weights-gib (weights per GPU rank)")
            estimate = estimate_weights(arch)
            weights, note = estimate.bytes, f"{note}; {estimate.note}"
        fields.update(weights_bytes=weights, weights_note=note)
    return ModelSource(label=str(path), config=config, **fields)


def _model_fields(model: Any, variant: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {"model": model, "variant": variant, "config": model.hf_config,
                              "confidence": "exact"}
    if variant is not None and variant.size_bytes:
        fields["weights_bytes"] = int(variant.size_bytes)
        fields["weights_note"] = f"catalog weight variant {variant.id} ({variant.size_bytes / 1e9:.1f} GB on disk)"
    return fields


def _with_profile(source: ModelSource, catalog: Any, profile: Any) -> ModelSource:
    """The profile's serving shape on ``source``; its drafter unless ``source`` is a catalog model
    that drafter does not serve."""
    from club3090.fit.shape import drafter_terms

    fields: dict[str, Any] = {"profile": profile}
    drafter = catalog.drafters[profile.drafter] if profile.drafter else None
    if drafter is not None and (source.model is None or source.model.id == profile.model
                                or source.model.id in drafter.model_compat):
        fields["num_spec"], fields["extra_weights_bytes"] = drafter_terms(drafter)
    return replace(source, **fields)


def _from_deriver(key: str, settings: Any, catalog: Any) -> ModelSource | Stop:
    from club3090.edges.derive import derive

    spec = derive(key, settings, catalog)
    if isinstance(spec, Stop):
        return spec
    return ModelSource(label=key, arch=spec.arch, weights_bytes=int(spec.weights_bytes),
                       weights_note="safetensors headers (Hub)", confidence=spec.confidence)
