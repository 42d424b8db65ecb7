"""Reading a model's facts out of a folder (or HF cache snapshot) or a Hub repo: the weight set,
the safetensors headers, the quantization side files, assembled into a ``ModelSpec``.

:mod:`club3090.edges.resolve` decides which source a name means (the one precedence); these
functions read that source. Only ``config.json`` (plus quantization configs and the safetensors
index) and the safetensors *headers* are read; nothing from the repo is ever executed. Weight
bytes are the sum of the header byte ranges of the selected weight set.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from club3090.edges.files import read_json_capped
from club3090.errors import (
    EntryNotFound,
    GatedRepo,
    InputError,
    RepoNotFound,
    RevisionNotFound,
)
from club3090.model.architecture import parse_config
from club3090.model.quantization import resolve_quantization
from club3090.model.safetensors import (
    PREFIX_BYTES,
    SafetensorsHeader,
    header_length,
    parse_header,
)
from club3090.model.spec import ModelSpec, RepoFile
from club3090.outcome import Reason, Stop, deriver_stop

if TYPE_CHECKING:
    from club3090.edges.hub import HubSource

Progress = Callable[[int, int], None]

DEFAULT_MAX_CTX = 131072
LLAMA_CPP_HINT = ("GGUF checkpoints run under llama.cpp: `club3090 fits REPO --gpus SPEC` lists every quant with "
                  "its largest context and offload need; `club3090 kv-calc REPO --quant QUANT` prices one with "
                  "llama.cpp's memory model; `club3090 profiles` lists the llama.cpp profiles")

# Metadata files counted in the download set when the repo has them (docs/DESIGN.md, plus the
# quantization/processor configs vLLM reads at load time).
METADATA_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                  "tokenizer.model", "special_tokens_map.json", "vocab.json", "merges.txt",
                  "quantize_config.json", "hf_quant_config.json", "preprocessor_config.json",
                  "processor_config.json", "chat_template.json")
QUANT_FILES = ("quantize_config.json", "hf_quant_config.json")

_ADAPTER_MARKS = ("adapter_model", "adapter-model", "lora", "/adapter")
_LAYER_INDEX = re.compile(r"(?:^|\.)layers\.(\d+)\.")


# ---------------------------------------------------------------------------------------------
# weight-set selection (docs/DESIGN.md)


@dataclass(frozen=True, slots=True)
class WeightSet:
    files: tuple[str, ...]          # selected safetensors, in order
    index: str | None               # the index file, if the set is sharded
    gguf_files: tuple[str, ...]


def is_adapter(name: str) -> bool:
    low = name.lower()
    return any(mark in low for mark in _ADAPTER_MARKS)


def is_mtp_file(name: str) -> bool:
    low = name.lower()
    return "mtp" in low or "nextn" in low


def select_weight_set(names: Iterable[str], read_index: Callable[[str], Any], *,
                      where: str = "", file_label: Callable[[str], str] | None = None) -> WeightSet | Stop:
    """Pick the safetensors to count. ``read_index(name)`` returns the parsed index JSON.
    ``where`` prefixes stop messages; ``file_label(name)`` is the ``InputError.file`` of a bad
    index (``repo/file`` for the Hub, the path for a folder; the bare name by default)."""
    label = file_label or (lambda n: n)
    names = sorted(set(names))
    top = [n for n in names if "/" not in n]
    gguf = tuple(n for n in names if n.lower().endswith(".gguf"))
    st = [n for n in top if n.endswith(".safetensors") and not is_adapter(n)]
    if not st:
        if gguf:
            return deriver_stop(Reason.UNSUPPORTED_FORMAT, "gguf-only",
                         f"{where}no top-level safetensors; GGUF files: {', '.join(gguf)}. {LLAMA_CPP_HINT}",
                         gguf_files=list(gguf), hint=LLAMA_CPP_HINT)
        return deriver_stop(Reason.UNSUPPORTED_FORMAT, "no-safetensors",
                     f"{where}no top-level *.safetensors weights (vLLM needs safetensors)")
    extras = [n for n in st if is_mtp_file(n)]
    indexes = [n for n in top if n.endswith(".safetensors.index.json") and not is_adapter(n)]
    if len(indexes) > 1:
        return deriver_stop(Reason.AMBIGUOUS_WEIGHT_SET, "several-indexes",
                     f"{where}several safetensors indexes: {', '.join(indexes)}", files=indexes)
    if indexes:
        index = read_index(indexes[0])
        weight_map = index.get("weight_map") if isinstance(index, Mapping) else None
        if not isinstance(weight_map, Mapping) or not weight_map or not all(
                isinstance(v, str) for v in weight_map.values()):
            raise InputError(label(indexes[0]), "weight_map is missing or not a {tensor: file} object")
        shards = sorted(set(weight_map.values()))
        missing = [s for s in shards if s not in st]
        if missing:
            return deriver_stop(Reason.UNSUPPORTED_FORMAT, "index-missing-shards",
                         f"{where}{indexes[0]} names shards the repo does not have: {', '.join(missing[:5])}",
                         files=missing)
        selected = shards + [e for e in extras if e not in shards]
        return WeightSet(files=tuple(selected), index=indexes[0], gguf_files=gguf)
    main = [n for n in st if not is_mtp_file(n)]
    if len(main) != 1:
        return deriver_stop(Reason.AMBIGUOUS_WEIGHT_SET, "several-files",
                     f"{where}{len(main)} safetensors files and no index: {', '.join(main[:8])}", files=main)
    return WeightSet(files=tuple(main + extras), index=None, gguf_files=gguf)


def download_set(names: Iterable[str], weights: WeightSet, *, trust_remote_code: bool) -> tuple[str, ...]:
    """Weights + index + metadata files present + top-level ``*.jinja`` (+ ``*.py`` for auto_map)."""
    present = set(names)
    out = list(weights.files)
    if weights.index:
        out.append(weights.index)
    out += [n for n in METADATA_FILES if n in present]
    out += sorted(n for n in present if "/" not in n and n.endswith(".jinja"))
    if trust_remote_code:
        out += sorted(n for n in present if "/" not in n and n.endswith(".py"))
    return tuple(dict.fromkeys(out))  # first occurrence wins, order kept


# ---------------------------------------------------------------------------------------------
# assembling the spec


def _mtp_present(files: Sequence[str], headers: Mapping[str, SafetensorsHeader], layers: int) -> bool:
    if any(is_mtp_file(f) for f in files):
        return True
    for header in headers.values():
        for name in header.tensors:
            low = name.lower()
            if "mtp." in low or "nextn" in low:
                return True
            m = _LAYER_INDEX.search(low)
            if m and layers and int(m.group(1)) >= layers and "vision" not in low and "visual" not in low:
                return True
    return False


def file_label(ref: str, local_path: Path | None = None) -> Callable[[str], str]:
    """How an ``InputError`` names a file of a source: its path for a folder, ``repo/file`` for the Hub."""
    if local_path is not None:
        return lambda name: str(Path(local_path) / name)
    return lambda name: f"{ref}/{name}"


def _check_unique_tensors(names: Sequence[str], headers: Mapping[str, SafetensorsHeader],
                          label: Callable[[str], str]) -> None:
    """A tensor stored in two shards would be counted twice: refuse the weight set instead."""
    owner: dict[str, str] = {}
    for name in names:
        for tensor in headers[name].tensors:
            first = owner.setdefault(tensor, name)
            if first != name:
                raise InputError(label(name), f"tensor {tensor!r} is also stored in {first}")


def build_spec(*, kind: str, ref: str, revision: str | None, commit: str | None, config: Mapping[str, Any],
               files: Mapping[str, RepoFile], weights: WeightSet, headers: Mapping[str, SafetensorsHeader],
               quant_files: Mapping[str, Any], size_provenance: str,
               local_path: Path | None = None) -> ModelSpec | Stop:
    arch = parse_config(config)
    _check_unique_tensors(weights.files, headers, file_label(ref, local_path))
    dtype_bytes: dict[str, int] = {}
    for name in weights.files:
        for dtype, n in headers[name].dtype_bytes.items():
            dtype_bytes[dtype] = dtype_bytes.get(dtype, 0) + n
    resolved = resolve_quantization(arch, quant_files, dtype_bytes)
    if isinstance(resolved, Stop):
        return resolved
    quant, compute, provenance = resolved
    trc = arch.auto_map
    names = download_set(files, weights, trust_remote_code=trc)
    download = tuple(files[n] for n in names)
    max_ctx = arch.max_position_embeddings
    provenance.update({
        "architecture": "config", "geometry": "config", "weights_bytes": "header", "dtype_bytes": "header",
        "footprint_bytes": size_provenance, "requires_trust_remote_code": "config",
        "has_mtp_head": "config", "has_vision": "config",
        "max_ctx_supported": "config" if max_ctx else "fallback",
    })
    return ModelSpec(
        source=kind,  # type: ignore[arg-type]
        ref=ref, revision=revision, commit=commit, arch=arch,
        weights_bytes=sum(headers[n].data_bytes for n in weights.files),
        dtype_bytes=MappingProxyType(dict(sorted(dtype_bytes.items()))),
        weight_files=tuple(files[n] for n in weights.files),
        download_files=download,
        footprint_bytes=sum(f.size_bytes or 0 for f in download),
        quantization=quant, compute_dtype=compute, requires_trust_remote_code=trc,
        has_mtp_head=arch.mtp_layers > 0 and _mtp_present(weights.files, headers, arch.num_hidden_layers),
        has_vision=bool(arch.has_vision), confidence="estimated-lower-bound", curated=None,
        local_path=local_path, gguf_files=weights.gguf_files,
        provenance=MappingProxyType(dict(sorted(provenance.items()))),
        max_ctx_supported=max_ctx or DEFAULT_MAX_CTX,
        python_files=tuple(sorted(n for n in files if n.endswith(".py"))))


def config_only_spec(config: Mapping[str, Any], *, kind: str, ref: str,
                     local_path: Path | None = None) -> ModelSpec:
    """Geometry without weights: ``weights_bytes`` None (the caller supplies per-rank weights)."""
    arch = parse_config(config)
    resolved = resolve_quantization(arch, {}, {})
    quant, compute = (None, None) if isinstance(resolved, Stop) else resolved[:2]
    max_ctx = arch.max_position_embeddings
    return ModelSpec(
        source=kind,  # type: ignore[arg-type]
        ref=ref, revision=None, commit=None, arch=arch, weights_bytes=None,
        dtype_bytes=MappingProxyType({}), weight_files=(), download_files=(), footprint_bytes=0,
        quantization=quant, compute_dtype=compute, requires_trust_remote_code=arch.auto_map,
        has_mtp_head=arch.mtp_layers > 0, has_vision=bool(arch.has_vision),
        confidence="estimated-lower-bound", local_path=local_path,
        provenance=MappingProxyType({"architecture": "config", "geometry": "config"}),
        max_ctx_supported=max_ctx or DEFAULT_MAX_CTX)


def _config_or_stop(load: Callable[[], Any], name: str) -> Mapping[str, Any] | Stop:
    try:
        config = load()
    except InputError as exc:
        return deriver_stop(Reason.QUANT_DTYPE_UNKNOWN, "malformed-config", f"{name}: {exc.message}", file=name)
    if not isinstance(config, Mapping):
        return deriver_stop(Reason.QUANT_DTYPE_UNKNOWN, "malformed-config", f"{name}: not a JSON object", file=name)
    return config


# ---------------------------------------------------------------------------------------------
# local folders and the HF cache


def read_local_header(path: Path, *, name: str | None = None) -> SafetensorsHeader:
    """Read only the header of a safetensors file on disk."""
    label = name or str(path)
    try:
        size = path.stat().st_size
        with path.open("rb") as handle:
            n = header_length(handle.read(PREFIX_BYTES), file=label)
            raw = handle.read(n)
    except OSError as exc:
        raise InputError(label, f"cannot read: {exc.strerror or exc}") from exc
    if len(raw) < n:
        raise InputError(label, f"truncated: header declares {n} bytes, the file holds {len(raw)}")
    return parse_header(raw, file=label, file_size=size)


def _cached_lfs_sha256(entry: Path) -> str | None:
    """In the HF cache a file links to ``blobs/<etag>``; an LFS file's etag is its sha256."""
    if not entry.is_symlink():
        return None
    name = entry.resolve().name
    return name if re.fullmatch(r"[0-9a-f]{64}", name) else None


def derive_folder(folder: Path, *, kind: str, ref: str, revision: str | None = None,
                  commit: str | None = None, progress: Progress | None = None,
                  weights_optional: bool = False) -> ModelSpec | Stop:
    """The spec of a folder. ``weights_optional``: a folder whose weights cannot be counted (no
    safetensors, or an ambiguous set) still gives its geometry, with ``weights_bytes`` None."""
    folder = Path(folder)
    files: dict[str, RepoFile] = {}
    for entry in sorted(folder.iterdir()):
        if entry.is_file():  # follows the HF cache's symlinks into blobs/
            files[entry.name] = RepoFile(name=entry.name, size_bytes=entry.stat().st_size,
                                         sha256=_cached_lfs_sha256(entry) if kind == "cache" else None)
    where = f"{ref}: "
    if "config.json" not in files:
        gguf = sorted(n for n in files if n.lower().endswith(".gguf"))
        return deriver_stop(Reason.UNSUPPORTED_FORMAT, "gguf-only" if gguf else "no-config-json",
                     f"{where}no config.json" + (f"; GGUF files: {', '.join(gguf)}. {LLAMA_CPP_HINT}" if gguf else ""),
                     **({"gguf_files": gguf, "hint": LLAMA_CPP_HINT} if gguf else {}))
    config = _config_or_stop(lambda: read_json_capped(folder / "config.json"), str(folder / "config.json"))
    if isinstance(config, Stop):
        return config
    weights = select_weight_set(files, lambda n: read_json_capped(folder / n), where=where,
                                file_label=file_label(ref, folder))
    if isinstance(weights, Stop):
        return config_only_spec(config, kind=kind, ref=ref, local_path=folder) if weights_optional else weights
    quant_files: dict[str, Any] = {}
    for name in QUANT_FILES:
        if name in files:
            loaded = _config_or_stop(partial(read_json_capped, folder / name), str(folder / name))
            if isinstance(loaded, Stop):
                return loaded
            quant_files[name] = loaded
    headers: dict[str, SafetensorsHeader] = {}
    for i, name in enumerate(weights.files):
        headers[name] = read_local_header(folder / name, name=str(folder / name))
        if progress is not None:
            progress(i + 1, len(weights.files))
    return build_spec(kind=kind, ref=ref, revision=revision, commit=commit, config=config, files=files,
                      weights=weights, headers=headers, quant_files=quant_files,
                      size_provenance="filesystem", local_path=folder)


# ---------------------------------------------------------------------------------------------
# the Hub


def derive_hub(client: "HubSource", repo_id: str, revision: str | None, *, has_token: bool,
               progress: Progress | None = None) -> ModelSpec | Stop:
    token_hint = "" if has_token else " (private repos need HF_TOKEN)"
    try:
        info = client.repo_info(repo_id, revision)
    except GatedRepo:
        return deriver_stop(Reason.GATED_NO_TOKEN, "gated", f"{repo_id} is gated; accept its terms and set HF_TOKEN")
    except RevisionNotFound:
        return deriver_stop(Reason.REPO_NOT_FOUND, "revision-not-found", f"{repo_id}: revision {revision!r} not found")
    except RepoNotFound:
        return deriver_stop(Reason.REPO_NOT_FOUND, "not-found", f"{repo_id}: repository not found{token_hint}",
                     token_hint=not has_token)
    rev = info.commit or revision
    files = {f.name: f for f in info.files}
    where = f"{repo_id}: "

    indexes = [n for n in files if "/" not in n and n.endswith(".safetensors.index.json") and not is_adapter(n)]
    wanted = ["config.json", *indexes[:1], *(n for n in QUANT_FILES if n in files)] if "config.json" in files else []
    fetched = prefetch_json(lambda name: client.fetch_json(repo_id, name, rev), wanted)

    def fetch(name: str) -> Any:
        if name not in fetched:
            fetched[name] = client.fetch_json(repo_id, name, rev)
        found = fetched[name]
        if isinstance(found, BaseException):
            raise found
        return found

    def gate(exc: Exception) -> Stop:
        if isinstance(exc, GatedRepo):
            return deriver_stop(Reason.GATED_NO_TOKEN, "gated", f"{repo_id} is gated; accept its terms and set HF_TOKEN")
        if isinstance(exc, EntryNotFound):
            return _missing_file(exc.file, where)
        return deriver_stop(Reason.REPO_NOT_FOUND, "not-found", f"{repo_id}: repository not found{token_hint}",
                     token_hint=not has_token)

    if "config.json" not in files:
        gguf = sorted(n for n in files if n.lower().endswith(".gguf"))
        return deriver_stop(Reason.UNSUPPORTED_FORMAT, "gguf-only" if gguf else "no-config-json",
                     f"{where}no config.json" + (f"; GGUF files: {', '.join(gguf)}. {LLAMA_CPP_HINT}" if gguf else ""),
                     **({"gguf_files": gguf, "hint": LLAMA_CPP_HINT} if gguf else {}))
    try:
        config = _config_or_stop(lambda: fetch("config.json"), f"{repo_id}/config.json")
        if isinstance(config, Stop):
            return config
        weights = select_weight_set(files, fetch, where=where, file_label=file_label(repo_id))
        if isinstance(weights, Stop):
            return weights
        quant_files: dict[str, Any] = {}
        for name in QUANT_FILES:
            if name in files:
                loaded = _config_or_stop(partial(fetch, name), f"{repo_id}/{name}")
                if isinstance(loaded, Stop):
                    return loaded
                quant_files[name] = loaded
        index = fetched.get(weights.index) if weights.index is not None else None
        index = None if isinstance(index, BaseException) else index
        headers = client.read_headers(repo_id, [files[n] for n in weights.files], rev, progress, index=index)
    except (RepoNotFound, EntryNotFound, RevisionNotFound) as exc:
        return gate(exc)
    return build_spec(kind="hub", ref=repo_id, revision=revision, commit=info.commit, config=config,
                      files=files, weights=weights, headers=headers, quant_files=quant_files,
                      size_provenance="hub-api")


def prefetch_json(fetch: Callable[[str], Any], names: Sequence[str]) -> dict[str, Any]:
    """``fetch`` every name at once (config, index and quantization files are independent: one
    round trip for all of them, not one each). A failure is kept as the value and raised by the
    caller when it asks for that file, so errors surface in the order derivation reads them."""
    if len(names) < 2:
        return {}

    def one(name: str) -> Any:
        try:
            return fetch(name)
        except Exception as exc:  # noqa: BLE001 - replayed to the caller, in its order
            return exc
    with ThreadPoolExecutor(max_workers=len(names), thread_name_prefix="club3090-json") as pool:
        return dict(zip(names, pool.map(one, names), strict=True))


# A file the listing named but the Hub did not serve: the sub-reason says which kind.
MISSING_FILE_SUB_REASONS: Mapping[str, str] = MappingProxyType({
    "config.json": "no-config-json",
    **{name: "missing-quant-config" for name in QUANT_FILES},
})


def _missing_file(name: str | None, where: str) -> Stop:
    """``unsupported-format`` for a listed file the Hub answered 404 for, naming the file."""
    if name is not None and name in MISSING_FILE_SUB_REASONS:
        sub = MISSING_FILE_SUB_REASONS[name]
    elif name is not None and name.endswith(".safetensors.index.json"):
        sub = "missing-index"
    elif name is not None and name.endswith(".safetensors"):
        sub = "missing-shard"
    else:
        sub = "missing-file"
    return deriver_stop(Reason.UNSUPPORTED_FORMAT, sub, f"{where}{name or 'a listed file'} is listed but not served",
                 file=name)
