"""Derivation ``[A]`` (SYSTEM.md section 3): a source -> ``ModelSpec`` or a stratum-1 ``Stop``.

Sources, first match wins:
1. a curated Tier-1 hit (any alias of a catalog variant's ``hf_repos``, case-insensitive): no network;
2. an existing local folder (a downloaded snapshot or any folder with config.json + safetensors);
3. with ``HF_HUB_OFFLINE`` set, the repo's snapshot in the HF cache (``Settings.hub_cache``);
4. the Hub, through ``hub.HubClient`` (or any ``hub.HubSource`` passed as ``client``).

Only ``config.json`` (plus quantization configs and the safetensors index) and the safetensors
*headers* are read; nothing from the repo is ever executed. Weight bytes are the sum of the
header byte ranges of the selected weight set. ``HubUnreachable`` propagates (exit 69): an outage
is not a verdict about the model.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from club3090.edges.files import path_exists, read_json_capped
from club3090.errors import (
    EntryNotFound,
    GatedRepo,
    HubUnreachable,
    InputError,
    RepoNotFound,
    RevisionNotFound,
)
from club3090.gate.outcome import Reason, Stop, Stratum
from club3090.model.architecture import Architecture, parse_config
from club3090.model.repo_id import repo_id_problem, revision_problem, source_problem
from club3090.model.safetensors import (
    PREFIX_BYTES,
    SafetensorsHeader,
    header_length,
    parse_header,
)
from club3090.model.spec import CuratedHit, ModelSpec, Quantization, RepoFile

if TYPE_CHECKING:
    from club3090.edges.hub import HubSource
    from club3090.settings import Settings

Progress = Callable[[int, int], None]

DEFAULT_MAX_CTX = 131072
LLAMA_CPP_HINT = "GGUF checkpoints run under llama.cpp: see `club3090 profiles` for the llama.cpp profiles"

# Metadata files counted in the download set when the repo has them (SYSTEM.md 3.5, plus the
# quantization/processor configs vLLM reads at load time).
METADATA_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                  "tokenizer.model", "special_tokens_map.json", "vocab.json", "merges.txt",
                  "quantize_config.json", "hf_quant_config.json", "preprocessor_config.json",
                  "processor_config.json", "chat_template.json")
QUANT_FILES = ("quantize_config.json", "hf_quant_config.json")

_ADAPTER_MARKS = ("adapter_model", "adapter-model", "lora", "/adapter")
_LAYER_INDEX = re.compile(r"(?:^|\.)layers\.(\d+)\.")


# ---------------------------------------------------------------------------------------------
# entry point


def derive(source: str, settings: "Settings", catalog: Any = None, *, client: "HubSource | None" = None,
           progress: Progress | None = None) -> ModelSpec | Stop:
    """Derive the spec of ``source`` (``org/name[@revision]`` or a folder path).

    ``catalog`` (a ``catalog.Catalog``) enables the Tier-1 lookup; None skips it. ``client`` is
    the Hub seam (default: ``hub.HubClient(settings)``). ``progress(done, total)`` is called while
    shard headers are read. Raises ``HubUnreachable`` on network failure or offline cache miss,
    ``InputError`` on a malformed safetensors header or index.
    """
    if (problem := source_problem(source)) is not None:
        return _stop(Reason.REPO_NOT_FOUND, "not-a-repo-id", problem)
    source = source.strip()
    repo_id, revision = split_source(source)
    if revision is not None and (problem := revision_problem(revision)) is not None:
        return _stop(Reason.REPO_NOT_FOUND, "not-a-repo-id", problem)

    if source.endswith("@") and is_repo_id(repo_id) and not Path(source).exists():
        # most likely `org/name@$REV` with REV unset: do not silently answer for the default branch
        return _stop(Reason.REPO_NOT_FOUND, "not-a-repo-id",
                     f"{source!r}: nothing after '@'; give org/name or org/name@REVISION")

    if catalog is not None and is_repo_id(repo_id):
        hit = catalog.find_variant(source)
        if hit is not None:
            return from_catalog(repo_id, revision, *hit)

    try:
        path = Path(source).expanduser()
    except RuntimeError:  # "~user/..." for an unknown user: no such folder
        return _stop(Reason.REPO_NOT_FOUND, "folder-missing", f"{source}: no such folder")
    if _looks_like_path(source) or path_exists(path):
        if path_exists(path) and path.is_dir():
            return derive_folder(path, kind="local", ref=source)
        return _stop(Reason.REPO_NOT_FOUND, "folder-missing", f"{source}: no such folder")

    if not is_repo_id(repo_id):
        return _stop(Reason.REPO_NOT_FOUND, "not-a-repo-id",
                     f"{source!r} is neither an existing folder nor a Hugging Face repo id (org/name)")

    if settings.offline:
        from club3090.edges.hub import cached_snapshot

        folder = cached_snapshot(repo_id, revision, settings.hub_cache)
        if folder is None:
            raise HubUnreachable(repo_id, "HF_HUB_OFFLINE is set and the repo is not in the HF cache "
                                          f"({settings.hub_cache})")
        return derive_folder(folder, kind="cache", ref=repo_id, revision=revision, commit=folder.name)

    if client is None:
        from club3090.edges.hub import HubClient

        client = HubClient(settings)
    return derive_hub(client, repo_id, revision, has_token=bool(settings.token), progress=progress)


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


def _stop(reason: Reason, sub_reason: str, message: str, **extra: object) -> Stop:
    """A stratum-1 stop. The public reason stays the seed's bare token (SYSTEM.md section 4);
    ``sub_reason`` (``gguf-only``, ``not-found``, ...) says which case it was, ``detail`` keeps
    the data (``message``, ``gguf_files``, ``file``, ...)."""
    return Stop(stratum=Stratum.DERIVER, reason=reason, sub_reason=sub_reason,
                detail=MappingProxyType({"message": message, **extra}))


# ---------------------------------------------------------------------------------------------
# Tier-1


def from_catalog(repo_id: str, revision: str | None, model: Any, variant: Any) -> ModelSpec | Stop:
    """A curated hit: the spec comes from the catalog entry, with no network."""
    if variant.format == "gguf" or variant.kind in ("gguf", "mmproj"):
        return _stop(Reason.UNSUPPORTED_FORMAT, "gguf-only",
                     f"{repo_id} is the curated GGUF variant {model.id}/{variant.id}; {LLAMA_CPP_HINT}",
                     gguf_files=list(variant.files), hint=LLAMA_CPP_HINT)
    arch = parse_config(model.hf_config)
    size = int(variant.size_bytes or 0)
    quant = None
    if variant.quantization or variant.format not in ("bf16", "fp16", "f16", "fp32", "bfloat16", "float16"):
        method = _normalize_method(variant.quantization or variant.format)
        quant = Quantization(method=method, bits=_default_bits(method) or _default_bits(variant.format))
    provenance = {k: "catalog" for k in ("architecture", "geometry", "weights_bytes", "footprint_bytes",
                                         "quantization", "compute_dtype", "max_ctx_supported")}
    return ModelSpec(
        source="catalog", ref=repo_id, revision=revision or variant.revision, commit=None, arch=arch,
        weights_bytes=size, dtype_bytes=MappingProxyType({}), weight_files=(), download_files=(),
        footprint_bytes=size, quantization=quant, compute_dtype=arch.torch_dtype,
        requires_trust_remote_code=bool(arch.auto_map), has_mtp_head=arch.mtp_layers > 0,
        has_vision=arch.has_vision, confidence="exact",
        curated=CuratedHit(model_id=model.id, variant_id=variant.id, format=variant.format),
        provenance=MappingProxyType(provenance), max_ctx_supported=model.max_ctx_supported)


# ---------------------------------------------------------------------------------------------
# weight-set selection (SYSTEM.md 3.3)


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
            return _stop(Reason.UNSUPPORTED_FORMAT, "gguf-only",
                         f"{where}no top-level safetensors; GGUF files: {', '.join(gguf)}. {LLAMA_CPP_HINT}",
                         gguf_files=list(gguf), hint=LLAMA_CPP_HINT)
        return _stop(Reason.UNSUPPORTED_FORMAT, "no-safetensors",
                     f"{where}no top-level *.safetensors weights (vLLM needs safetensors)")
    extras = [n for n in st if is_mtp_file(n)]
    indexes = [n for n in top if n.endswith(".safetensors.index.json") and not is_adapter(n)]
    if len(indexes) > 1:
        return _stop(Reason.AMBIGUOUS_WEIGHT_SET, "several-indexes",
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
            return _stop(Reason.UNSUPPORTED_FORMAT, "index-missing-shards",
                         f"{where}{indexes[0]} names shards the repo does not have: {', '.join(missing[:5])}",
                         files=missing)
        selected = shards + [e for e in extras if e not in shards]
        return WeightSet(files=tuple(selected), index=indexes[0], gguf_files=gguf)
    main = [n for n in st if not is_mtp_file(n)]
    if len(main) != 1:
        return _stop(Reason.AMBIGUOUS_WEIGHT_SET, "several-files",
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
    seen: set[str] = set()
    return tuple(n for n in out if not (n in seen or seen.add(n)))


# ---------------------------------------------------------------------------------------------
# quantization / dtype (SYSTEM.md 3.4)

_METHOD_ALIASES = {"intel/auto-round": "auto-round", "auto_round": "auto-round", "autoround": "auto-round",
                   "compressed_tensors": "compressed-tensors", "bnb": "bitsandbytes",
                   "modelopt_fp4": "modelopt", "modelopt_fp8": "modelopt"}
_FOUR_BIT = {"awq", "gptq", "auto-round", "int4", "4bit", "mxfp4", "nvfp4", "gptq_marlin", "awq_marlin",
             "autoround-int4", "w4a16", "marlin", "hqq"}
_EIGHT_BIT = {"fp8", "fbgemm_fp8", "8bit", "int8", "w8a8", "experts_int8", "ptpc_fp8", "fp8-dynamic"}
_KNOWN_METHODS = _FOUR_BIT | _EIGHT_BIT | {"compressed-tensors", "modelopt", "bitsandbytes", "gguf"}
_ALGO_BITS = (("NVFP4", 4), ("MXFP4", 4), ("W4A", 4), ("INT4", 4), ("AWQ", 4), ("FP8", 8), ("INT8", 8),
              ("W8A", 8))
_TORCH_BITS = {"bfloat16": 16, "float16": 16, "half": 16, "float32": 32, "float": 32, "float64": 64,
               "float8_e4m3fn": 8, "float8_e5m2": 8, "float8": 8, "int8": 8, "uint8": 8, "int4": 4}
_HEADER_DTYPES = {"BF16": "bfloat16", "F16": "float16", "F32": "float32", "F64": "float64",
                  "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}


def _normalize_method(method: str) -> str:
    low = method.strip().lower()
    return _METHOD_ALIASES.get(low, low)


def _default_bits(method: str) -> int | None:
    low = _normalize_method(method)
    if low in _FOUR_BIT or "int4" in low or "4bit" in low:
        return 4
    if low in _EIGHT_BIT or "fp8" in low or "int8" in low:
        return 8
    return None


def _algo_bits(algo: Any) -> int | None:
    if not isinstance(algo, str):
        return None
    up = algo.upper()
    return next((bits for mark, bits in _ALGO_BITS if mark in up), None)


def _int_value(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _kv_scheme(qc: Mapping[str, Any]) -> str | None:
    kv = qc.get("kv_cache_scheme")
    if isinstance(kv, Mapping):
        bits = _int_value(kv.get("num_bits"))
        kind = str(kv.get("type") or "").lower()
        if bits == 8:
            return "fp8" if kind in ("float", "") else "int8"
        return f"{kind or 'int'}{bits}" if bits else None
    algo = qc.get("kv_cache_quant_algo")
    if isinstance(algo, str) and algo:
        return algo.lower()
    if isinstance(kv, str) and kv:
        return kv.lower()
    return None


def _widest_group_bits(qc: Mapping[str, Any]) -> int | None:
    groups = qc.get("config_groups")
    if not isinstance(groups, Mapping):
        return None
    bits = [_int_value(g.get("weights", {}).get("num_bits")) for g in groups.values()
            if isinstance(g, Mapping) and isinstance(g.get("weights"), Mapping)]
    bits = [b for b in bits if b]
    return max(bits) if bits else None


def _quant_from(qc: Mapping[str, Any], default_method: str | None) -> Quantization | None:
    """One quantization_config-like mapping -> Quantization (bits None when unresolved)."""
    inner = qc.get("quantization") if isinstance(qc.get("quantization"), Mapping) else None  # hf_quant_config
    if inner is not None:
        producer = qc.get("producer")
        method = str(producer.get("name")) if isinstance(producer, Mapping) and producer.get("name") else "modelopt"
        qc = {**inner, "quant_method": method}
    method_raw = qc.get("quant_method") or qc.get("method") or default_method
    if not isinstance(method_raw, str) or not method_raw:
        if any(k in qc for k in ("load_in_4bit", "_load_in_4bit", "load_in_8bit", "_load_in_8bit")):
            method_raw = "bitsandbytes"
        else:
            return None
    method = _normalize_method(method_raw)
    bits = (_int_value(qc.get("bits")) or _int_value(qc.get("w_bit")) or _int_value(qc.get("weight_bits"))
            or _widest_group_bits(qc))
    scheme = None
    if method == "bitsandbytes":
        if qc.get("load_in_4bit") or qc.get("_load_in_4bit"):
            bits, scheme = bits or 4, qc.get("bnb_4bit_quant_type") or "fp4"
        elif qc.get("load_in_8bit") or qc.get("_load_in_8bit"):
            bits, scheme = bits or 8, "int8"
    algo = qc.get("quant_algo")
    if isinstance(algo, str) and algo:
        scheme = algo
        if bits is None:
            if algo.upper() == "MIXED_PRECISION" and isinstance(qc.get("quantized_layers"), Mapping):
                found = [_algo_bits(v.get("quant_algo")) for v in qc["quantized_layers"].values()
                         if isinstance(v, Mapping)]
                found = [b for b in found if b]
                bits = max(found) if found else None
            else:
                bits = _algo_bits(algo)
    if scheme is None:
        fmt = qc.get("format") or qc.get("fmt")
        scheme = str(fmt) if isinstance(fmt, str) and fmt else None
    if bits is None:
        bits = _default_bits(method)
    return Quantization(method=method, bits=bits, kv_cache_scheme=_kv_scheme(qc), scheme=scheme)


def _torch_dtype(arch: Architecture) -> str | None:
    """The checkpoint's compute dtype as a torch name (``bfloat16``), from ``Architecture``."""
    if not arch.torch_dtype:
        return None
    name = arch.torch_dtype.removeprefix("torch.").lower()
    return name if name in _TORCH_BITS else None


def resolve_quantization(arch: Architecture, quant_files: Mapping[str, Any],
                         dtype_bytes: Mapping[str, int]) -> tuple[Quantization | None, str | None, dict[str, str]] | Stop:
    """(quantization, compute dtype, provenance) or a ``quant-dtype-unknown`` stop.

    ``quantization_config`` and ``torch_dtype`` come from ``Architecture`` (which owns the
    config.json reading, ``text_config`` wrappers included)."""
    provenance: dict[str, str] = {}
    candidates: list[tuple[Mapping[str, Any], str | None, str]] = []
    if arch.quantization_config:
        candidates.append((arch.quantization_config, None, "config"))
    if isinstance(quant_files.get("quantize_config.json"), Mapping):
        candidates.append((quant_files["quantize_config.json"], "gptq", "config"))
    if isinstance(quant_files.get("hf_quant_config.json"), Mapping):
        candidates.append((quant_files["hf_quant_config.json"], "modelopt", "config"))

    quant: Quantization | None = None
    for qc, default, source in candidates:
        found = _quant_from(qc, default)
        if found is None:
            continue
        if quant is None:
            quant, provenance["quantization"] = found, source
        elif quant.kv_cache_scheme is None and found.kv_cache_scheme:  # e.g. hf_quant_config's KV algo
            quant = Quantization(quant.method, quant.bits, found.kv_cache_scheme, quant.scheme)
    if quant is not None and quant.bits is None and quant.method in _KNOWN_METHODS:
        return _stop(Reason.QUANT_DTYPE_UNKNOWN, "unknown-bits",
                     f"quantization method {quant.method!r} declares no weight bit width")

    compute = _torch_dtype(arch)
    if compute is not None:
        provenance["compute_dtype"] = "config"
    else:
        floats = {k: v for k, v in dtype_bytes.items() if k in _HEADER_DTYPES}
        if floats:
            compute = _HEADER_DTYPES[max(floats, key=floats.__getitem__)]
            provenance["compute_dtype"] = "header"
    if quant is None and compute is None:
        return _stop(Reason.QUANT_DTYPE_UNKNOWN, "no-dtype",
                     "neither quantization_config, torch_dtype nor the safetensors headers give a weight dtype")
    return quant, compute, provenance


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
        max_ctx_supported=max_ctx or DEFAULT_MAX_CTX)


def _config_or_stop(load: Callable[[], Any], name: str) -> Mapping[str, Any] | Stop:
    try:
        config = load()
    except InputError as exc:
        return _stop(Reason.QUANT_DTYPE_UNKNOWN, "malformed-config", f"{name}: {exc.message}", file=name)
    if not isinstance(config, Mapping):
        return _stop(Reason.QUANT_DTYPE_UNKNOWN, "malformed-config", f"{name}: not a JSON object", file=name)
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
                  commit: str | None = None, progress: Progress | None = None) -> ModelSpec | Stop:
    folder = Path(folder)
    files: dict[str, RepoFile] = {}
    for entry in sorted(folder.iterdir()):
        if entry.is_file():  # follows the HF cache's symlinks into blobs/
            files[entry.name] = RepoFile(name=entry.name, size_bytes=entry.stat().st_size,
                                         sha256=_cached_lfs_sha256(entry) if kind == "cache" else None)
    where = f"{ref}: "
    if "config.json" not in files:
        gguf = sorted(n for n in files if n.lower().endswith(".gguf"))
        return _stop(Reason.UNSUPPORTED_FORMAT, "gguf-only" if gguf else "no-config-json",
                     f"{where}no config.json" + (f"; GGUF files: {', '.join(gguf)}. {LLAMA_CPP_HINT}" if gguf else ""),
                     **({"gguf_files": gguf, "hint": LLAMA_CPP_HINT} if gguf else {}))
    config = _config_or_stop(lambda: read_json_capped(folder / "config.json"), str(folder / "config.json"))
    if isinstance(config, Stop):
        return config
    weights = select_weight_set(files, lambda n: read_json_capped(folder / n), where=where,
                                file_label=file_label(ref, folder))
    if isinstance(weights, Stop):
        return weights
    quant_files: dict[str, Any] = {}
    for name in QUANT_FILES:
        if name in files:
            loaded = _config_or_stop(lambda: read_json_capped(folder / name), str(folder / name))
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
        return _stop(Reason.GATED_NO_TOKEN, "gated", f"{repo_id} is gated; accept its terms and set HF_TOKEN")
    except RevisionNotFound:
        return _stop(Reason.REPO_NOT_FOUND, "revision-not-found", f"{repo_id}: revision {revision!r} not found")
    except RepoNotFound:
        return _stop(Reason.REPO_NOT_FOUND, "not-found", f"{repo_id}: repository not found{token_hint}",
                     token_hint=not has_token)
    rev = info.commit or revision
    files = {f.name: f for f in info.files}
    where = f"{repo_id}: "

    def fetch(name: str) -> Any:
        return client.fetch_json(repo_id, name, rev)

    def gate(exc: Exception) -> Stop:
        if isinstance(exc, GatedRepo):
            return _stop(Reason.GATED_NO_TOKEN, "gated", f"{repo_id} is gated; accept its terms and set HF_TOKEN")
        if isinstance(exc, EntryNotFound):
            return _missing_file(exc.file, where)
        return _stop(Reason.REPO_NOT_FOUND, "not-found", f"{repo_id}: repository not found{token_hint}",
                     token_hint=not has_token)

    if "config.json" not in files:
        gguf = sorted(n for n in files if n.lower().endswith(".gguf"))
        return _stop(Reason.UNSUPPORTED_FORMAT, "gguf-only" if gguf else "no-config-json",
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
                loaded = _config_or_stop(lambda: fetch(name), f"{repo_id}/{name}")
                if isinstance(loaded, Stop):
                    return loaded
                quant_files[name] = loaded
        headers = client.read_headers(repo_id, [files[n] for n in weights.files], rev, progress)
    except (RepoNotFound, EntryNotFound, RevisionNotFound) as exc:
        return gate(exc)
    return build_spec(kind="hub", ref=repo_id, revision=revision, commit=info.commit, config=config,
                      files=files, weights=weights, headers=headers, quant_files=quant_files,
                      size_provenance="hub-api")


# A file the listing named but the Hub did not serve: the sub-reason says which kind.
MISSING_FILE_SUB_REASONS: Mapping[str, str] = MappingProxyType({
    "config.json": "no-config-json",
    **{name: "missing-quant-config" for name in QUANT_FILES},
})


def _missing_file(name: str | None, where: str) -> Stop:
    """``unsupported-format`` for a listed file the Hub answered 404 for, naming the file."""
    if name in MISSING_FILE_SUB_REASONS:
        sub = MISSING_FILE_SUB_REASONS[name]
    elif name is not None and name.endswith(".safetensors.index.json"):
        sub = "missing-index"
    elif name is not None and name.endswith(".safetensors"):
        sub = "missing-shard"
    else:
        sub = "missing-file"
    return _stop(Reason.UNSUPPORTED_FORMAT, sub, f"{where}{name or 'a listed file'} is listed but not served",
                 file=name)


# ---------------------------------------------------------------------------------------------
# rendering helpers shared by commands


def stop_to_json(stop: Stop) -> dict[str, Any]:
    """``{"stratum": 1, "reason": <bare seed token>, "detail": <sub-reason>, "message": ..., ...}``."""
    detail = dict(stop.detail)
    out: dict[str, Any] = {"stratum": int(stop.stratum), "reason": stop.reason.value,
                           "detail": stop.sub_reason or "", "message": detail.pop("message", "")}
    out.update(detail)
    return out


def spec_to_json(spec: ModelSpec) -> dict[str, Any]:
    """The flat ``inspect --json`` object (stable keys; bytes are integers)."""
    a = spec.arch
    q = spec.quantization
    return {
        "source": spec.source, "ref": spec.ref, "revision": spec.revision, "commit": spec.commit,
        "confidence": spec.confidence,
        "curated": None if spec.curated is None else {"model": spec.curated.model_id,
                                                     "variant": spec.curated.variant_id,
                                                     "format": spec.curated.format},
        "architecture": a.architecture, "model_type": a.model_type,
        "config_architectures": list(a.config_architectures),
        "num_hidden_layers": a.num_hidden_layers, "hidden_size": a.hidden_size,
        "num_attention_heads": a.num_attention_heads, "num_key_value_heads": a.num_key_value_heads,
        "head_dim": a.head_dim, "intermediate_size": a.intermediate_size, "vocab_size": a.vocab_size,
        "max_position_embeddings": a.max_position_embeddings, "max_ctx_supported": spec.max_ctx_supported,
        "tie_word_embeddings": a.tie_word_embeddings, "layer_kinds": list(a.layer_kinds),
        "sliding_window": a.sliding_window, "num_experts": a.num_experts,
        "num_experts_per_tok": a.num_experts_per_tok, "moe_intermediate_size": a.moe_intermediate_size,
        "shared_expert_intermediate_size": a.shared_expert_intermediate_size,
        "kv_lora_rank": a.kv_lora_rank, "qk_rope_head_dim": a.qk_rope_head_dim, "mtp_layers": a.mtp_layers,
        "weights_bytes": spec.weights_bytes, "dtype_bytes": dict(spec.dtype_bytes),
        "quantization": q.method if q else None, "quantization_bits": q.bits if q else None,
        "quantization_scheme": q.scheme if q else None, "kv_cache_scheme": q.kv_cache_scheme if q else None,
        "compute_dtype": spec.compute_dtype,
        "requires_trust_remote_code": spec.requires_trust_remote_code, "has_mtp_head": spec.has_mtp_head,
        "has_vision": spec.has_vision, "footprint_bytes": spec.footprint_bytes,
        "weight_files": [f.name for f in spec.weight_files],
        "download_files": [{"name": f.name, "size_bytes": f.size_bytes} for f in spec.download_files],
        "gguf_files": list(spec.gguf_files),
        "local_path": str(spec.local_path) if spec.local_path else None,
        "unpriceable_reason": a.unpriceable_reason, "provenance": dict(spec.provenance),
    }
