"""What a llama.cpp price is computed from: MODEL resolved to a GGUF model's header facts.

MODEL is a local ``.gguf`` file (a shard brings in its siblings), a catalog profile whose engine is
llama.cpp or a catalog model whose default weights are a GGUF (the weight variant's repo and files:
the HF cache first, else ranged reads of the headers), or a Hub repo with GGUF files (``--quant`` picks one when it holds several). Only headers
are read; nothing is downloaded.

``resolve_gguf(model, catalog, settings, *, profile_key=None, quant=None) -> GgufSource``. Raises
``UsageError`` (a repo with several quants and no ``--quant``, an unknown quant, no GGUF in the
repo), ``InputError`` (a malformed header) and the Hub errors of ``hub``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from club3090.errors import HubUnreachable, UsageError

if TYPE_CHECKING:   # the readers load lazily: kv-calc on a safetensors folder never pays for them
    from club3090.edges.gguf_remote import QuantFile
    from club3090.model.gguf_model import GgufModel

__all__ = ["GgufSource", "is_gguf_path", "resolve_gguf"]


@dataclass(frozen=True, slots=True)
class GgufSource:
    label: str
    model: GgufModel
    where: str                         # "local file", "HF cache", "Hub headers"
    quant: str | None
    profile: Any = None                # catalog Profile whose shape applies, if any
    quants: tuple[QuantFile, ...] = ()  # every quant of the repo, when MODEL is a repo


def is_gguf_path(model: str | None) -> bool:
    return bool(model) and str(model).lower().endswith(".gguf") and Path(str(model)).expanduser().is_file()


def _pick(quants: list["QuantFile"], quant: str | None, repo_id: str) -> QuantFile:
    if not quants:
        raise UsageError(f"{repo_id}: no GGUF model files in the repository")
    if quant is None:
        if len(quants) == 1:
            return quants[0]
        raise UsageError(f"{repo_id} holds {len(quants)} GGUF quants; pick one with --quant: "
                         + ", ".join(q.label for q in quants))
    hits = [q for q in quants if q.label.lower() == quant.lower()]
    if len(hits) != 1:
        raise UsageError(f"{repo_id}: no single quant {quant!r}; available: " + ", ".join(q.label for q in quants))
    return hits[0]


def _from_repo(repo_id: str, files: tuple[str, ...], revision: str | None, settings: Any,
               quant: str | None, hub: "Callable[[], Any] | None" = None,
               ) -> tuple["GgufModel", str, str | None, tuple["QuantFile", ...]]:
    from club3090.edges.gguf_remote import QuantFile, list_quants, load_remote, ranged_client, read_cached

    if files:
        cached = read_cached(repo_id, files, revision, settings.hub_cache)
        if cached is not None:
            return cached, "HF cache", cached.quant, ()
    client = ranged_client(hub, settings)
    info = client.repo_info(repo_id, revision)
    quants = list_quants(info)
    if files:
        chosen = next((q for q in quants if q.files == files), None) or QuantFile(
            label=files[0], files=files, size_bytes=None)
    else:
        chosen = _pick(quants, quant, repo_id)
    return load_remote(client, info, chosen), "Hub headers", chosen.label, tuple(quants)


def resolve_gguf(model: str | None, catalog: Any, settings: Any, *, profile: Any = None,
                 quant: str | None = None, hub: "Callable[[], Any] | None" = None) -> GgufSource:
    """MODEL's GGUF facts; reached through ``Provider.resolve_gguf`` (``profile``: the llama.cpp
    profile whose shape applies, the registry's pick; ``hub``: the Provider's Hub client)."""
    from club3090.edges.gguf_remote import load_local

    if model and is_gguf_path(model):
        facts = load_local(Path(model).expanduser())
        return GgufSource(label=model, model=facts, where="local file", quant=facts.quant, profile=profile)
    if profile is not None and (not model or model == profile.key):
        variant = catalog.models[profile.model].weights.get(profile.weights_variant)
        if variant is None or not variant.hf_repos:
            raise UsageError(f"{profile.key}: its weight variant names no Hub repository to read")
        facts, where, label, _ = _from_repo(variant.hf_repos[0], tuple(variant.files), variant.revision,
                                            settings, quant, hub)
        return GgufSource(label=profile.key, model=facts, where=where, quant=label, profile=profile)
    if not model:
        raise UsageError("kv-calc needs MODEL or --profile")
    curated = catalog.models.get(model)
    if curated is not None:
        # a catalog model whose default weights are a GGUF: that variant's file (``--quant``: another
        # quant of the same repo), as ``fits`` reads it
        variant = curated.weights.get(curated.default_weight_variant)
        if variant is None or variant.format != "gguf" or not variant.hf_repos:
            raise UsageError(f"{model}: its default weights are not a GGUF with a Hub repository to read")
        files = () if quant else tuple(variant.files)
        repo = variant.hf_repos[0]
        try:
            facts, where, label, quants = _from_repo(repo, files, variant.revision, settings, quant, hub)
        except HubUnreachable as exc:
            if not files:
                raise
            raise type(exc)(repo, f"{exc.detail}; {model}'s GGUF headers are read from the HF cache "
                                       f"when there, so `hf download {repo} {' '.join(files)}` lets "
                                       "kv-calc price it offline") from None
        return GgufSource(label=model, model=facts, where=where, quant=label, profile=profile, quants=quants)
    facts, where, label, quants = _from_repo(model, (), None, settings, quant, hub)
    return GgufSource(label=model, model=facts, where=where, quant=label, profile=profile, quants=quants)
