"""Strict loader for the shipped catalog YAML: the entry point ``load_catalog``.

Every file is ``{schema_version: 2, <section>: ..., corrections: [...]}``; the schema (files,
records, fields, checks, descriptions) is ``club3090.catalog.schema``. The loader checks keys
(unknown keys get a closest-key hint), required keys, types, enumerations and every
cross-reference, collects all problems and raises one ``CatalogError`` listing them with file and
key path.

This module owns reading and parsing the files (duplicate YAML keys are problems), the order of
the passes and the assembled ``Catalog`` with its indexes; the passes are ``catalog.collector``
(envelope and record checks), ``catalog.builders`` (section builders), ``catalog.corrections``
and ``catalog.crossref``.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

from club3090.errors import CatalogError, Problem

from . import model as m
from .builders import BUILDERS
from .collector import Collector
from .corrections import build_corrections
from .crossref import cross_check
from .schema import FILES, SUPPORTED_SCHEMA_VERSIONS

__all__ = ["FILES", "load_catalog"]

# ----------------------------------------------------------------------------- entry points

def _read_files(root: Path | None) -> dict[str, bytes]:
    if root is not None:
        base = Path(root)
        out = {}
        for name in FILES:
            try:
                out[name] = (base / name).read_bytes()
            except OSError as exc:
                raise CatalogError([Problem(name, "<file>", f"cannot read: {exc.strerror or exc}")]) from None
        return out
    from importlib import resources
    data = resources.files("club3090.catalog").joinpath("data")
    return {name: data.joinpath(name).read_bytes() for name in FILES}


def _strict_loader(yaml: Any, duplicates: list[tuple[str, int]]) -> type:
    """The safe loader, recording every duplicated mapping key (PyYAML keeps the last silently)."""
    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)   # both are the safe loader

    class StrictLoader(base):  # type: ignore[misc, valid-type]
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen: set[Any] = set()
            for key_node, _value in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    if key in seen:
                        duplicates.append((str(key), key_node.start_mark.line + 1))
                    seen.add(key)
                except TypeError:           # unhashable key: the base constructor reports it
                    pass
            return super().construct_mapping(node, deep=deep)

    return StrictLoader


def _parse(name: str, blob: bytes, c: Collector) -> Any:
    """The YAML document in ``blob`` (a clean parse is remembered by content: ``parse_cache``);
    invalid YAML and duplicate keys are problems."""
    from .parse_cache import cached_parse

    problems: list[tuple[str, str]] = []

    def parse(data: bytes) -> tuple[Any, bool]:
        doc, found = _yaml_load(data)
        problems.extend(found)
        return doc, not found

    doc = cached_parse(blob, parse)
    for where, message in problems:
        c.add(where, message, file=name)
    return doc


def _yaml_load(blob: bytes) -> tuple[Any, list[tuple[str, str]]]:
    """The document (None when invalid) and the problems as (where, message)."""
    import yaml
    duplicates: list[tuple[str, int]] = []
    try:
        doc = yaml.load(blob.decode("utf-8"), Loader=_strict_loader(yaml, duplicates))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "<file>"
        return None, [(where, f"not valid YAML: {getattr(exc, 'problem', None) or exc}")]
    return doc, [(f"line {line}", f"duplicate key {key!r}: a later entry would silently replace an earlier one")
                 for key, line in duplicates]


def _load(root: Path | None) -> m.Catalog:
    blobs = _read_files(root)
    c = Collector()
    docs = {name: _parse(name, blob, c) for name, blob in blobs.items()}
    bodies: dict[str, Any] = {}
    for name in FILES:
        c.file = name
        doc = docs[name]
        if doc is None and any(p.file == name for p in c.problems):
            bodies[name] = [] if name == "anchors.yaml" else {}
            continue
        bodies[name] = c.section(doc, name, list if name == "anchors.yaml" else dict)
    built: dict[str, Any] = {}
    for name, (attr, build) in BUILDERS.items():
        c.file = name
        built[attr] = build(c, bodies[name])
    corrections = []
    for name in FILES:
        c.file = name
        corrections += build_corrections(c, name, docs[name], bodies[name])
    cross_check(c, bodies, built)
    if c.problems:
        raise CatalogError(c.problems)

    digest = hashlib.sha256()
    for name in FILES:
        digest.update(name.encode() + b"\0" + blobs[name] + b"\0")
    built["corrections"] = tuple(corrections)
    return _assemble(digest.hexdigest()[:12], built)


def _assemble(version: str, built: dict[str, Any]) -> m.Catalog:
    repo_index: dict[str, tuple[str, str]] = {}
    rank = {"main": 0, "gguf": 1, "draft": 2, "mmproj": 3}
    for mid, mod in built["models"].items():
        for vid, var in mod.weights.items():
            for repo in var.hf_repos:
                key = m.normalize_repo_id(repo)
                have = repo_index.get(key)
                if have is None or rank[var.kind] < rank[built["models"][have[0]].weights[have[1]].kind]:
                    repo_index[key] = (mid, vid)
    gpu_index: dict[str, str] = {}
    for gid, g in built["gpus"].items():
        for name in (gid, *g.aliases, g.display_name):
            gpu_index.setdefault(m.normalize_gpu_name(name), gid)
    arch_alias = {alias: arch for arch, row in built["arches"].items()
                  for alias in row.config_architectures}
    frozen = {k: MappingProxyType(v) for k, v in built.items() if k not in ("anchors", "corrections")}
    return m.Catalog(version=version, schema_version=SUPPORTED_SCHEMA_VERSIONS[-1],
                     anchors=tuple(built["anchors"]), corrections=built["corrections"], _repo_index=MappingProxyType(repo_index),
                     _gpu_index=MappingProxyType(gpu_index), _arch_alias=MappingProxyType(arch_alias),
                     **frozen)


@lru_cache(maxsize=1)
def _load_shipped() -> m.Catalog:
    return _load(None)


def load_catalog(root: Path | None = None) -> m.Catalog:
    """The shipped catalog (cached per process), or an uncached one read from ``root``."""
    if root is None:
        return _load_shipped()
    return _load(Path(root))
