"""The one resolver: a name a user typed -> the model's facts (``ModelSpec``) or a stratum-1 ``Stop``.

``pull``, ``kv-calc`` and ``inspect`` all resolve through :func:`resolve`, so the same name means
the same model everywhere. Precedence, first match wins:

1. ``org/name@`` with nothing after ``@``: a stop (most likely an unset ``$REV``);
2. an existing local folder (``config.json`` + safetensors); a file, or a name written as a path
   that does not exist, stops with ``folder-missing`` (a caller pricing geometry alone,
   ``weights_optional``, may name a folder's ``config.json``);
3. the catalog, with no network: a profile key (its model and weight variant), a model id (its
   default weight variant), or any ``hf_repos`` alias of a weight variant (case-insensitive);
4. a name that is not a repo id stops with ``not-a-repo-id``;
5. offline (``HF_HUB_OFFLINE``): the repo's snapshot in the HF cache; a miss raises
   ``HubUnreachable``;
6. the Hub, through the ``HubSource`` the Provider gives.

``HubUnreachable`` propagates (exit 69): an outage is not a verdict about the model.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

from club3090.edges.derive import LLAMA_CPP_HINT, derive_folder, derive_hub
from club3090.edges.files import path_exists
from club3090.errors import HubOffline
from club3090.model.architecture import parse_config
from club3090.model.quantization import default_bits, normalize_method
from club3090.model.repo_id import repo_id_problem, revision_problem, source_problem
from club3090.model.spec import CuratedHit, ModelSpec, Quantization
from club3090.outcome import Reason, Stop, deriver_stop

if TYPE_CHECKING:
    from club3090.catalog.model import Catalog, Model, WeightVariant
    from club3090.edges.hub import HubSource
    from club3090.settings import Settings

Progress = Callable[[int, int], None]

_UNQUANTIZED = ("bf16", "fp16", "f16", "fp32", "bfloat16", "float16")


def resolve(source: str, settings: "Settings", catalog: "Catalog | None" = None, *,
            hub: "HubSource | None" = None, hub_factory: "Callable[[], HubSource] | None" = None,
            progress: Progress | None = None, weights_optional: bool = False) -> ModelSpec | Stop:
    """Resolve ``source`` in the precedence of the module docstring.

    ``catalog`` None skips step 3. ``hub`` is the Hub seam, or ``hub_factory`` makes one when step 6
    is reached (default ``hub.HubClient(settings)``). ``progress(done, total)`` is
    called while shard headers are read. ``weights_optional``: a local folder whose weights cannot
    be counted still gives its geometry (``weights_bytes`` None; ``kv-calc --weights-gib``).
    Raises ``HubUnreachable`` on network failure or an offline cache miss, ``InputError`` on a
    malformed safetensors header or index.
    """
    if (problem := source_problem(source)) is not None:
        return deriver_stop(Reason.REPO_NOT_FOUND, "not-a-repo-id", problem)
    source = source.strip()
    repo_id, revision = split_source(source)
    if revision is not None and (problem := revision_problem(revision)) is not None:
        return deriver_stop(Reason.REPO_NOT_FOUND, "not-a-repo-id", problem)
    if source.endswith("@") and is_repo_id(repo_id) and not path_exists(Path(source)):
        return deriver_stop(Reason.REPO_NOT_FOUND, "not-a-repo-id",
                            f"{source!r}: nothing after '@'; give org/name or org/name@REVISION")

    try:
        path = Path(source).expanduser()
    except RuntimeError:  # "~user/..." for an unknown user: no such folder
        return deriver_stop(Reason.REPO_NOT_FOUND, "folder-missing", f"{source}: no such folder")
    exists = path_exists(path)
    if exists and (path.is_dir() or (weights_optional and path.is_file() and path.name == "config.json")):
        folder = path if path.is_dir() else path.parent
        return derive_folder(folder, kind="local", ref=source, weights_optional=weights_optional)
    if exists or _looks_like_path(source):
        return deriver_stop(Reason.REPO_NOT_FOUND, "folder-missing", f"{source}: no such folder")

    if catalog is not None:
        hit = _catalog_entry(source, catalog)
        if hit is not None:
            return from_catalog(source if source in catalog.profiles or source in catalog.models else repo_id,
                                revision, *hit)

    if not is_repo_id(repo_id):
        return deriver_stop(Reason.REPO_NOT_FOUND, "not-a-repo-id",
                            f"{source!r} is neither an existing folder nor a Hugging Face repo id (org/name)")

    if settings.offline:
        from club3090.edges.hub import cached_snapshot

        snapshot = cached_snapshot(repo_id, revision, settings.hub_cache)
        if snapshot is None:
            raise HubOffline(repo_id, "HF_HUB_OFFLINE is set and the repo is not in the HF cache "
                                          f"({settings.hub_cache})")
        return derive_folder(snapshot, kind="cache", ref=repo_id, revision=revision, commit=snapshot.name)

    if hub is None and hub_factory is not None:
        hub = hub_factory()
    if hub is None:
        from club3090.edges.hub import HubClient

        hub = HubClient(settings)
    return derive_hub(hub, repo_id, revision, has_token=bool(settings.token), progress=progress)


def split_source(source: str) -> tuple[str, str | None]:
    """``org/name@rev`` -> (``org/name``, ``rev``); anything else -> (source, None)."""
    if "@" in source and not _looks_like_path(source):
        repo_id, _, revision = source.partition("@")
        return repo_id, (revision or None)
    return source, None


def is_repo_id(text: str) -> bool:
    return repo_id_problem(text) is None


def _looks_like_path(source: str) -> bool:
    return source.startswith(("/", "./", "../", "~", ".\\")) or "\\" in source or source in (".", "..")


def _catalog_entry(source: str, catalog: "Catalog") -> "tuple[Model, WeightVariant | None] | None":
    """Step 3: a profile key, a model id, or a weight variant's ``hf_repos`` alias."""
    profile = catalog.profiles.get(source)
    if profile is not None:
        own = catalog.models[profile.model]
        return own, own.weights.get(profile.weights_variant)
    model = catalog.models.get(source)
    if model is not None:
        return model, model.weights.get(model.default_weight_variant)
    repo_id, _ = split_source(source)
    return catalog.find_variant(source) if is_repo_id(repo_id) else None


def from_catalog(ref: str, revision: str | None, model: "Model",
                 variant: "WeightVariant | None") -> ModelSpec | Stop:
    """A curated hit: the spec comes from the catalog entry, with no network. A GGUF variant is a
    stop (vLLM needs safetensors); a model with no such variant has unknown weights."""
    if variant is not None and (variant.format == "gguf" or variant.kind in ("gguf", "mmproj")):
        return deriver_stop(Reason.UNSUPPORTED_FORMAT, "gguf-only",
                            f"{ref} is the curated GGUF variant {model.id}/{variant.id}; {LLAMA_CPP_HINT}",
                            gguf_files=list(variant.files), hint=LLAMA_CPP_HINT)
    arch = parse_config(model.hf_config)
    size = int(variant.size_bytes) if variant is not None and variant.size_bytes else None
    quant = None
    if variant is not None and (variant.quantization or variant.format not in _UNQUANTIZED):
        method = normalize_method(variant.quantization or variant.format)
        quant = Quantization(method=method, bits=default_bits(method) or default_bits(variant.format))
    provenance = {k: "catalog" for k in ("architecture", "geometry", "weights_bytes", "footprint_bytes",
                                         "quantization", "compute_dtype", "max_ctx_supported")}
    return ModelSpec(
        source="catalog", ref=ref, revision=revision or (variant.revision if variant else None), commit=None,
        arch=arch, weights_bytes=size, dtype_bytes=MappingProxyType({}), weight_files=(), download_files=(),
        footprint_bytes=size or 0, quantization=quant, compute_dtype=arch.torch_dtype,
        requires_trust_remote_code=bool(arch.auto_map), has_mtp_head=arch.mtp_layers > 0,
        has_vision=arch.has_vision, confidence="exact",
        curated=CuratedHit(model_id=model.id, variant_id=variant.id if variant else "",
                           format=variant.format if variant else ""),
        provenance=MappingProxyType(provenance), max_ctx_supported=model.max_ctx_supported)


__all__ = ["from_catalog", "is_repo_id", "resolve", "split_source"]
