"""What ``kv-calc MODEL [--profile KEY]`` prices: MODEL resolved to a config, weights and a profile.

I/O at the edge. MODEL, first match wins:

1. an existing local folder (``config.json`` + safetensors) or a ``config.json`` path: the config,
   and weights from the safetensors headers next to it (the weight-set selection and header
   reader of :mod:`club3090.derive`), unless the caller gives per-rank weights itself;
2. a curated profile key (``--profile`` wins), a catalog model id, or any ``hf_repos`` alias of a
   catalog weight variant;
3. anything else goes to :func:`club3090.derive.derive` (the Hub, or the HF cache offline); its
   stratum-1 stops are usage errors here.

``resolve_source(model, catalog, settings, *, profile_key=None, weights_given=False) -> ModelSource``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from club3090.errors import InputError, UsageError
from club3090.fsutil import read_json_capped

__all__ = ["ModelSource", "resolve_source", "folder_weights"]


@dataclass(frozen=True, slots=True)
class ModelSource:
    label: str
    config: Mapping[str, Any] | None = None     # config.json (or the catalog's hf_config)
    arch: Any = None                            # an Architecture already derived (Hub sources)
    weights_bytes: int | None = None
    weights_note: str = ""
    profile: Any = None
    model: Any = None
    variant: Any = None
    confidence: str = "estimated-lower-bound"
    extra_weights_bytes: int = 0                # the profile's drafter weights
    num_spec: int = 0                           # the profile's drafter speculative tokens


def folder_weights(folder: Path) -> tuple[int | None, str]:
    """(weight bytes from the selected safetensors' headers, a note); (None, why) when there are none."""
    from club3090.derive import read_local_header, select_weight_set
    from club3090.outcome import Stop

    names = [p.name for p in folder.iterdir() if p.is_file()]
    if not any(n.endswith(".safetensors") for n in names):
        return None, "no safetensors in the folder"
    chosen = select_weight_set(names, lambda n: read_json_capped(folder / n), where=f"{folder}: ")
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
                   weights_given: bool = False) -> ModelSource:
    """Resolve MODEL (and ``--profile``). ``weights_given``: the caller prices per-rank weights itself.

    Raises ``UsageError`` (nothing to price, unknown profile, no config.json, weights unknown, a
    deriver stop) and ``InputError`` (config.json not a JSON object).
    """
    if not model and not profile_key:
        raise UsageError("kv-calc needs MODEL or --profile")
    if profile_key and profile_key not in catalog.profiles:
        raise UsageError(f"unknown profile {profile_key!r}")
    path = _existing_path(model)
    if path is not None:
        return _from_path(path, catalog, profile_key, weights_given)
    key = model or profile_key
    profile = catalog.profiles.get(profile_key or "") or catalog.profiles.get(key)
    if profile is not None:
        return ModelSource(label=profile.key, **_profile_fields(catalog, profile, with_model=True))
    if key in catalog.models:
        m = catalog.models[key]
        return ModelSource(label=m.id, **_model_fields(m, m.weights.get(m.default_weight_variant)))
    hit = catalog.find_variant(key)
    if hit is not None:
        return ModelSource(label=key, **_model_fields(*hit))
    return _from_deriver(key, settings, catalog)


def _from_path(path: Path, catalog: Any, profile_key: str | None, weights_given: bool) -> ModelSource:
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
            raise UsageError(f"{path}: {note}; pass --weights-gib (weights per GPU rank)")
        fields.update(weights_bytes=weights, weights_note=note)
    if profile_key:
        fields.update(_profile_fields(catalog, catalog.profiles[profile_key], with_model=False))
    return ModelSource(label=str(path), config=config, **fields)


def _model_fields(model: Any, variant: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {"model": model, "variant": variant, "config": model.hf_config}
    if variant is not None and variant.size_bytes:
        fields["weights_bytes"] = int(variant.size_bytes)
        fields["weights_note"] = f"catalog weight variant {variant.id} ({variant.size_bytes / 1e9:.1f} GB on disk)"
    return fields


def _profile_fields(catalog: Any, profile: Any, *, with_model: bool) -> dict[str, Any]:
    """The profile, its model and weights (unless the source brought its own config), its drafter."""
    from club3090.serving import drafter_terms

    fields: dict[str, Any] = {"profile": profile}
    model = catalog.models.get(profile.model)
    if model is not None and with_model:
        fields.update(_model_fields(model, model.weights.get(profile.weights_variant)))
    if profile.drafter:
        fields["num_spec"], fields["extra_weights_bytes"] = drafter_terms(catalog.drafters.get(profile.drafter))
    if any(a.profile == profile.key for a in catalog.anchors):
        fields["confidence"] = "exact"
    return fields


def _from_deriver(key: str, settings: Any, catalog: Any) -> ModelSource:
    from club3090.derive import derive
    from club3090.outcome import Stop

    spec = derive(key, settings, catalog)
    if isinstance(spec, Stop):
        raise UsageError(f"{key}: {spec.reason}")
    return ModelSource(label=key, arch=spec.arch, weights_bytes=int(spec.weights_bytes),
                       weights_note="safetensors headers (Hub)")
