"""ModelSpec: everything derived about one model, whatever its source (Hub, folder, cache, catalog).

Built by ``derive`` (the deriver), consumed by the fit engine (``memory``), the gates and the
compose generator. Geometry lives in ``architecture.Architecture`` (parsed from config.json by
``architecture.parse_config``); this record adds weights, quantization, files and provenance.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Literal, get_args

if TYPE_CHECKING:
    from club3090.model.architecture import Architecture

Confidence = Literal["exact", "derived", "estimated-lower-bound"]
CONFIDENCES: tuple[str, ...] = get_args(Confidence)   # the one list of confidence tokens, best first
SourceKind = Literal["hub", "local", "cache", "catalog"]
Provenance = Literal["config", "header", "catalog", "fallback", "index", "hub-api", "filesystem"]


@dataclass(frozen=True, slots=True)
class RepoFile:
    name: str
    size_bytes: int | None
    sha256: str | None = None  # LFS sha256 when the Hub reports it


@dataclass(frozen=True, slots=True)
class Quantization:
    method: str                        # awq, gptq, compressed-tensors, fp8, bitsandbytes, auto-round, mxfp4, nvfp4, modelopt, ...
    bits: int | None
    kv_cache_scheme: str | None = None  # a KV format the checkpoint declares (e.g. "fp8"), if any
    scheme: str | None = None           # finer scheme when declared: quant_algo (NVFP4, MIXED_PRECISION), nf4, e4m3, ...
    group_size: int | None = None       # weight group size when declared (128; -1 = per channel)


@dataclass(frozen=True, slots=True)
class CuratedHit:
    model_id: str
    variant_id: str
    format: str


@dataclass(frozen=True, slots=True)
class ModelSpec:
    source: SourceKind
    ref: str                                  # repo id, or the folder path as given
    revision: str | None
    commit: str | None
    arch: "Architecture"
    weights_bytes: int | None                 # sum of header byte ranges of the selected weight set;
                                              # None: unknown (a config-only folder, a variant without a size)
    dtype_bytes: Mapping[str, int]            # safetensors dtype -> bytes
    weight_files: tuple[RepoFile, ...]
    download_files: tuple[RepoFile, ...]      # weights + index + metadata files the disk gate counts
    footprint_bytes: int
    quantization: Quantization | None
    compute_dtype: str | None                 # torch_dtype / dtype of the checkpoint (bfloat16, float16, ...)
    requires_trust_remote_code: bool          # config.json carries auto_map
    has_mtp_head: bool
    has_vision: bool
    confidence: Confidence
    curated: CuratedHit | None = None
    local_path: Path | None = None
    gguf_files: tuple[str, ...] = ()
    provenance: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    max_ctx_supported: int | None = None      # max_position_embeddings, else 131072 (provenance "fallback")
    python_files: tuple[str, ...] | None = None   # *.py in the repo listing; None: the listing was not read
