"""The open-model index: models beyond the curated catalog, with the facts the fit needs.

``data/open_models.yaml`` is ``{schema_version, gguf_quants, models}``: each model carries the
repository, its task tags, the part of its ``config.json`` the fit reads (``config``, or the
geometry a public list records when no config was found: ``geometry: llmfit-geometry``), where
each fact came from, what could not be sourced (``missing``), and its weight variants (the base
safetensors, quantized repositories, GGUF repositories) with a real size where one is known and
bits per weight where not. ``gguf_quants`` is the shared table of llama.cpp quant types: bits per
weight and the perplexity cost llama.cpp's ``llama-quantize`` prints for each.

The loader is strict like the curated catalog's (``catalog.loader``): unknown keys (with a
closest-key hint), missing keys, types and enumerations are checked, every problem is collected
and one ``CatalogError`` lists them with file and key path. Index rows are always ``estimated``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

from club3090.errors import CatalogError

from .checks import Spec, enum, list_of, opt, req, t_decimal, t_id, t_mapping, t_pos_int, t_str, t_text
from .collector import Collector

__all__ = ["INDEX_FILE", "INDEX_SCHEMA_VERSIONS", "INDEX_SPECS", "TASKS", "GgufQuant", "OpenIndex", "OpenModel",
           "OpenVariant", "load_open_index", "parse_open_index", "trim_config"]

INDEX_FILE = "open_models.yaml"
INDEX_SCHEMA_VERSIONS = (1,)
TASKS = ("chat", "code", "reasoning", "embedding", "vision")
VARIANT_IDS = ("bf16", "fp8", "awq", "gptq", "w4a16", "autoround", "nvfp4", "gguf")
GEOMETRY = ("config", "llmfit-geometry")

QUANT_SPEC: Spec = {
    "bits_per_weight": req(t_decimal, "Bits per weight of the whole file (llama.cpp's size table over the "
                           "parameters of the model it quotes, or llama-quantize's own bpw figure)."),
    "ppl_delta": opt(t_decimal, "Perplexity increase llama-quantize quotes for this type (the quality cost; "
                     "absent: none published)."),
    "source": req(t_str, "Where the figures come from."),
}
VARIANT_SPEC: Spec = {
    "id": req(enum(*VARIANT_IDS), "The variant's kind: `bf16` (the base safetensors), a quantized repository "
              "(`fp8`, `awq`, `gptq`, `w4a16`, `autoround`, `nvfp4`) or `gguf` (llama.cpp quants)."),
    "format": req(enum("safetensors", "gguf"), "The file format the engine loads."),
    "repo": opt(t_str, "The Hugging Face repository of a safetensors variant."),
    "repos": opt(list_of(t_str, unique=True), "GGUF repositories holding this model's quants.", ()),
    "size_bytes": opt(t_pos_int, "Real weight bytes (safetensors index `total_size`, or the file sizes the "
                      "refresh tool read); absent: priced from `bits_per_weight` or the quantization."),
    "size_source": opt(t_str, "Where `size_bytes` comes from."),
    "bits_per_weight": opt(t_decimal, "Bits per parameter of an unquantized variant (16 for bf16)."),
    "quantization": opt(t_mapping, "The `quantization_config` keys the weight estimate reads (method, bits, "
                        "group size)."),
    "quants": opt(t_mapping, "GGUF: quant label -> real bytes of its files (the refresh tool writes these)."),
    "source": opt(t_str, "Where the variant's repository was found."),
}
MODEL_SPEC: Spec = {
    "repo": req(t_str, "The model's Hugging Face repository."),
    "tasks": req(list_of(enum(*TASKS), unique=True), "Task tags `fits --task` filters on."),
    "geometry": req(enum(*GEOMETRY), "`config`: `config` is the model's own config.json (trimmed to the keys "
                    "the fit reads); `llmfit-geometry`: only the layer/head/width numbers a public model list "
                    "records (sliding windows and hybrid layers unknown: every layer priced as full attention)."),
    "config_source": req(t_str, "Where `config` came from (repository, commit and path)."),
    "config": req(t_mapping, "The config.json keys the architecture parser reads."),
    "params": opt(t_pos_int, "Parameter count (from the Hub's safetensors metadata via the cited list)."),
    "params_source": opt(t_str, "Where `params` came from."),
    "released": opt(t_text, "Release date as the cited list records it."),
    "license": opt(t_str, "License id."),
    "variants": req(list_of(t_mapping), "Weight variants, best quality first (see the variant fields)."),
    "notes": opt(list_of(t_str), "Caveats a reader should know.", ()),
    "missing": opt(list_of(t_str), "Facts that could not be sourced and are therefore absent.", ()),
}
INDEX_SPECS = {"gguf_quants": QUANT_SPEC, "models": MODEL_SPEC, "variants": VARIANT_SPEC}


@dataclass(frozen=True, slots=True)
class GgufQuant:
    label: str
    bits_per_weight: Decimal
    ppl_delta: Decimal | None
    source: str


@dataclass(frozen=True, slots=True)
class OpenVariant:
    id: str
    format: str
    repo: str | None
    repos: tuple[str, ...] = ()
    size_bytes: int | None = None
    size_source: str | None = None
    bits_per_weight: Decimal | None = None
    quantization: Any = None                  # read-only mapping
    quants: Any = None                        # read-only mapping label -> bytes
    source: str | None = None


@dataclass(frozen=True, slots=True)
class OpenModel:
    id: str
    repo: str
    tasks: tuple[str, ...]
    geometry: str
    config_source: str
    config: Any                               # read-only mapping
    variants: tuple[OpenVariant, ...]
    params: int | None = None
    params_source: str | None = None
    released: str | None = None
    license: str | None = None
    notes: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()

    def config_dict(self) -> dict[str, Any]:
        """``config`` as plain dicts and lists (a fresh copy), the shape ``parse_config`` reads."""
        thawed = _thawed(self.config)
        assert isinstance(thawed, dict)
        return thawed


@dataclass(frozen=True, slots=True)
class OpenIndex:
    version: str
    models: Any                               # read-only mapping id -> OpenModel
    gguf_quants: Any = field(default_factory=lambda: MappingProxyType({}))   # label -> GgufQuant


def _frozen(value: Any) -> Any:
    if isinstance(value, dict):
        return MappingProxyType({k: _frozen(v) for k, v in value.items()})
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    return value


def trim_config(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` less every key (top level, or one level into ``text_config`` / ``vision_config`` /
    ``llm_config``) the architecture parser does not need: the parse of the result equals the parse
    of the whole config, key by key checked."""
    import copy

    from club3090.model.architecture import parse_config

    want = parse_config(config)
    out = copy.deepcopy(config)
    paths = [(k,) for k in config] + [(t, k) for t in ("text_config", "vision_config", "llm_config")
                                      if isinstance(config.get(t), dict) for k in config[t]]
    for path in paths:
        trial = copy.deepcopy(out)
        node = trial if len(path) == 1 else trial.get(path[0])
        if not isinstance(node, dict) or path[-1] not in node:
            continue
        del node[path[-1]]
        if parse_config(trial) == want:
            out = trial
    return out


def _thawed(value: Any) -> Any:
    if isinstance(value, MappingProxyType):
        return {k: _thawed(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [_thawed(v) for v in value]
    return value


def _variant(c: Collector, data: Any, path: str) -> OpenVariant | None:
    rec = c.record(data, path, VARIANT_SPEC)
    if rec is None or not rec.pop("__ok__"):
        return None
    if rec["format"] == "gguf" and not rec["repos"]:
        c.add(f"{path}.repos", "a gguf variant needs at least one repository")
        return None
    if rec["format"] == "safetensors" and rec["repo"] is None:
        c.add(f"{path}.repo", "a safetensors variant needs its repository")
        return None
    if rec["format"] == "safetensors" and not (rec["size_bytes"] or rec["bits_per_weight"] or rec["quantization"]):
        c.add(path, "give size_bytes, bits_per_weight or quantization: the weights cannot be priced otherwise")
        return None
    quants = rec["quants"]
    if quants is not None and not all(isinstance(v, int) and not isinstance(v, bool) and v > 0
                                      for v in quants.values()):
        c.add(f"{path}.quants", "expected quant label -> positive byte count")
        return None
    return OpenVariant(id=rec["id"], format=rec["format"], repo=rec["repo"], repos=tuple(rec["repos"]),
                       size_bytes=rec["size_bytes"], size_source=rec["size_source"],
                       bits_per_weight=rec["bits_per_weight"], quantization=_frozen(rec["quantization"]),
                       quants=_frozen(quants), source=rec["source"])


def _model(c: Collector, key: str, data: Any, path: str) -> OpenModel | None:
    rec = c.record(data, path, MODEL_SPEC)
    if rec is None or not rec.pop("__ok__"):
        return None
    variants = [_variant(c, v, f"{path}.variants[{i}]") for i, v in enumerate(rec["variants"])]
    if any(v is None for v in variants):
        return None
    if not variants:
        c.add(f"{path}.variants", "at least one variant is required")
        return None
    return OpenModel(id=key, repo=rec["repo"], tasks=tuple(rec["tasks"]), geometry=rec["geometry"],
                     config_source=rec["config_source"], config=_frozen(rec["config"]),
                     variants=tuple(v for v in variants if v is not None), params=rec["params"],
                     params_source=rec["params_source"], released=rec["released"], license=rec["license"],
                     notes=tuple(rec["notes"]), missing=tuple(rec["missing"]))


def _envelope(c: Collector, doc: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    if not isinstance(doc, dict):
        c.add("<file>", "expected a mapping with schema_version, gguf_quants and models")
        return {}, {}
    for key in doc:
        if key not in ("schema_version", "gguf_quants", "models"):
            c.add(str(key), "unknown key; allowed: schema_version, gguf_quants, models")
    if doc.get("schema_version") not in INDEX_SCHEMA_VERSIONS:
        c.add("schema_version", f"unsupported schema version {doc.get('schema_version')!r}; "
                                f"this club3090 reads {INDEX_SCHEMA_VERSIONS}")
    out = []
    for section in ("gguf_quants", "models"):
        body = doc.get(section)
        if not isinstance(body, dict):
            c.add(section, "missing required key" if body is None else "expected a mapping")
            body = {}
        out.append(body)
    return out[0], out[1]


def parse_open_index(blob: bytes, name: str = INDEX_FILE) -> OpenIndex:
    """The index in ``blob`` (YAML), or one ``CatalogError`` listing every problem."""
    import hashlib

    from .loader import _parse

    c = Collector()
    c.file = name
    doc = _parse(name, blob, c)
    quants_body, models_body = _envelope(c, doc)
    quants: dict[str, GgufQuant] = {}
    for key, path, value in c.entries(quants_body, "gguf_quants"):
        rec = c.record(value, path, QUANT_SPEC)
        if rec is not None and rec.pop("__ok__"):
            quants[key] = GgufQuant(label=key, bits_per_weight=rec["bits_per_weight"], ppl_delta=rec["ppl_delta"],
                                    source=rec["source"])
    models: dict[str, OpenModel] = {}
    repos: dict[str, str] = {}
    for key, path, value in c.entries(models_body, "models"):
        t_id(key)
        built = _model(c, key, value, path)
        if built is None:
            continue
        first = repos.setdefault(built.repo.lower(), key)
        if first != key:
            c.add(f"{path}.repo", f"repository {built.repo} is already model {first!r}")
        models[key] = built
    if c.problems:
        raise CatalogError(c.problems)
    return OpenIndex(version=hashlib.sha256(blob).hexdigest()[:12], models=MappingProxyType(models),
                     gguf_quants=MappingProxyType(quants))


@lru_cache(maxsize=1)
def _shipped() -> OpenIndex:
    from importlib import resources

    return parse_open_index(resources.files("club3090.catalog").joinpath("data").joinpath("index").joinpath(INDEX_FILE).read_bytes())


def load_open_index(path: Path | None = None) -> OpenIndex:
    """The shipped index (cached per process), or an uncached one read from ``path``."""
    if path is None:
        return _shipped()
    return parse_open_index(Path(path).read_bytes(), Path(path).name)
