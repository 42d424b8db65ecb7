"""``fits`` on a GGUF repo: every quant file priced with llama.cpp's memory model, ranked.

The repo listing -> its quant files (split shards as one, ``gguf_remote.list_quants``) -> each
quant's headers by range reads within the repo's byte budget (``gguf_remote.read_quants``) -> the
quant on the rig (``fit.llamacpp_fits.quant_fit``: the largest context with every layer on the
GPUs, else the offload it needs) -> ranked (``fit.llamacpp_fits.rank_key``). Nothing is downloaded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from club3090.compose.llamacpp import ENGINE_TYPE
from club3090.fit.llamacpp import LlamaCppArgs
from club3090.fit.llamacpp_fits import QuantFit, quant_fit, rank_key
from club3090.fit.memory import Unpriceable

if TYPE_CHECKING:  # pragma: no cover - typing only
    from club3090.edges.gguf_remote import QuantFile
    from club3090.edges.hub import HubClient
    from club3090.model.gguf_model import GgufModel
    from club3090.pipeline.fits import FitsRequest, FitsRow
    from club3090.pipeline.provider import Provider
    from club3090.rig.hardware import HardwareFacts

__all__ = ["GgufListing", "QuantRow", "gguf_args", "gguf_listing", "gguf_row", "llama_server_command"]


@dataclass(frozen=True, slots=True)
class QuantRow:
    label: str
    files: tuple[str, ...]
    size_bytes: int | None
    model: "GgufModel | None"
    fit: QuantFit | None
    stop: str | None = None                # not read / not priced, and why

    @property
    def weights_bytes(self) -> int:
        return self.model.weights_bytes if self.model is not None else self.size_bytes or 0

    def to_json(self) -> dict[str, Any]:
        fit, m = self.fit, self.model
        doc: dict[str, Any] = {
            "quant": self.label, "files": list(self.files), "size_bytes": self.size_bytes,
            "weights_bytes": m.weights_bytes if m is not None else None,
            "architecture": m.arch if m is not None else None, "layers": m.n_layer + 1 if m is not None else None,
            "ctx_train": m.ctx_train if m is not None else None, "stop": self.stop,
            "fits_fully": bool(fit and fit.fits_fully), "runs": bool(fit and fit.runs),
            "max_ctx_full_gpu": fit.full_gpu_context if fit else None, "offload": None, "devices": None,
        }
        if fit is not None and m is not None:
            doc["devices"] = [{**asdict(d), "total_bytes": d.total_bytes, "fits": d.fits}
                              for d in fit.at_target.devices]
            if fit.offloaded:
                doc["offload"] = {"n_gpu_layers": fit.n_gpu_layers, "cpu_layers": m.n_layer + 1 - fit.n_gpu_layers,
                                  "n_cpu_moe": fit.n_cpu_moe, "host_weights_bytes": fit.host_weights_bytes,
                                  "max_ctx": fit.offload_context}
        return doc


@dataclass(frozen=True, slots=True)
class GgufListing:
    repo: str
    commit: str | None
    args: LlamaCppArgs                     # the flags every quant was priced with (ctx_size = the target)
    rows: tuple[QuantRow, ...]             # ranked
    header_bytes_read: int
    confidence: str = "estimated"

    @property
    def best(self) -> QuantRow | None:
        """The first quant that runs (fully on the GPUs if any does)."""
        return next((r for r in self.rows if r.fit is not None and r.fit.runs), None)

    @property
    def fits(self) -> bool:
        return any(r.fit is not None and r.fit.fits_fully for r in self.rows)

    def to_json(self) -> dict[str, Any]:
        best = self.best
        return {"engine": ENGINE_TYPE, "repo": self.repo, "commit": self.commit, "confidence": self.confidence,
                "target_context": self.args.ctx_size, "cache_type_k": self.args.cache_type_k,
                "cache_type_v": self.args.cache_type_v, "header_bytes_read": self.header_bytes_read,
                "best": best.label if best is not None else None,
                "serve": llama_server_command(self, best) if best is not None else None,
                "quants": [r.to_json() for r in self.rows]}


def llama_server_command(listing: GgufListing, row: QuantRow) -> str | None:
    """The ``llama-server`` line that runs ``row`` as priced (llama.cpp fetches the quant itself)."""
    fit = row.fit
    if fit is None or not fit.runs:
        return None
    a = listing.args
    parts = [f"llama-server -hf {listing.repo}:{row.label}", f"-c {fit.context}"]
    parts.append("-ngl 999" if fit.fits_fully else f"-ngl {fit.n_gpu_layers}")
    if fit.offloaded and fit.n_cpu_moe:
        parts.append(f"--n-cpu-moe {fit.n_cpu_moe}")
    if (a.cache_type_k, a.cache_type_v) != ("f16", "f16"):
        parts.append(f"-ctk {a.cache_type_k} -ctv {a.cache_type_v}")
    return " ".join(parts)


def price_quants(quants: Sequence[tuple["QuantFile", "GgufModel | None", str | None]], args: LlamaCppArgs,
                 gpu_bytes: Sequence[int]) -> list[QuantRow]:
    """Price every (quant, model or None, why not read) and rank them."""
    rows = []
    for quant, model, problem in quants:
        if model is None:
            rows.append(QuantRow(label=quant.label, files=quant.files, size_bytes=quant.size_bytes, model=None,
                                 fit=None, stop=problem or "not read"))
            continue
        fit = quant_fit(model, args, gpu_bytes)
        stop = f"no-fit-model: {fit.reason}" if isinstance(fit, Unpriceable) else None
        rows.append(QuantRow(label=quant.label, files=quant.files, size_bytes=quant.size_bytes, model=model,
                             fit=None if isinstance(fit, Unpriceable) else fit, stop=stop))
    rows.sort(key=lambda r: rank_key(r.fit, r.weights_bytes))
    return rows


def gguf_listing(client: "HubClient", repo_id: str, revision: str | None, args: LlamaCppArgs,
                 gpu_bytes: Sequence[int], *, only: Sequence[str] = (), quant: str | None = None) -> GgufListing:
    """Read and price every quant of ``repo_id`` (``only``: just the quants made of these files,
    when the repo has any; ``quant``: just the quant of that label, case aside, none if absent;
    raises the Hub's errors for the repo itself)."""
    from club3090.edges.gguf_remote import list_quants, read_quants

    info = client.repo_info(repo_id, revision)
    quants = list_quants(info)
    picked = [q for q in quants if set(q.files) <= set(only)]
    quants = picked or quants
    if quant is not None:
        quants = [q for q in quants if q.label.lower() == quant.lower()]
    read, used = read_quants(client, info, quants)
    rows = price_quants([(q.quant, q.model, q.problem) for q in read], args, gpu_bytes)
    return GgufListing(repo=repo_id, commit=info.commit, args=args, rows=tuple(rows), header_bytes_read=used)


def gguf_args(request: "FitsRequest") -> LlamaCppArgs:
    """The llama.cpp flags a GGUF repo is priced with: the target context and the cache types."""
    from club3090.fit.llamacpp_fits import DEFAULT_TARGET_CONTEXT

    return LlamaCppArgs(ctx_size=request.ctx_size or request.min_context or DEFAULT_TARGET_CONTEXT,
                        cache_type_k=request.cache_type_k or "f16", cache_type_v=request.cache_type_v or "f16")


def gguf_row(name: str, provider: "Provider", hw: "HardwareFacts", request: "FitsRequest", *,
             label: str | None = None, only: tuple[str, ...] = ()) -> "FitsRow":
    """``fits``' row for ``name``'s GGUF quants priced for llama.cpp (``only``: the quants made of
    these files, when the repo has them; ``label``: what the user asked for, when not the repo)."""
    from club3090.edges.gguf_remote import ranged_client
    from club3090.edges.resolve import split_source
    from club3090.pipeline.fits import FitsRow

    client = ranged_client(provider.hub, provider.settings)
    repo, revision = split_source(name)
    listing = gguf_listing(client, repo, revision, gguf_args(request), list(hw.memory_bytes), only=only,
                           quant=request.quant)
    stop = None if listing.rows else (
        f"unsupported-format: no GGUF quant {request.quant!r} in the repository" if request.quant
        else "unsupported-format: the repository lists no loadable GGUF model file")
    return FitsRow(model=label or name, repo=repo, fits=listing.fits, confidence=listing.confidence,
                   shape_source="gguf", tp=1, gguf=listing, stop=stop)
