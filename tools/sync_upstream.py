#!/usr/bin/env python3
"""Compare upstream club-3090's data with the catalog and propose a reviewable change.

    python tools/sync_upstream.py --from <club-3090 checkout or snapshot> \
        [--catalog src/club3090/catalog/data] [--diff FILE] [--json]

Reads upstream's registry and its engine, drafter, model, hardware and patch files, maps the
fields the catalog shares with upstream into the catalog's schema, and reports what differs:
added, removed and changed entries, engine pin changes and profile status changes. With
``--diff FILE`` it writes a unified diff of the catalog YAML (apply it with ``git apply`` after
review); it never writes the catalog itself. The diff updates shared fields of existing entries
and adds upstream engines, drafters and profiles whose references all resolve; entries upstream
removed are reported, never deleted. A value a file's ``corrections:`` names is kept and reported
as protected. An upstream file with a key this tool does not know is refused (exit 2), naming the
file and key, rather than guessed at.

Exit codes: 0 no change, 1 changes found, 2 refused (unreadable or unknown upstream schema),
64 usage.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from club3090.catalog.schema import engine_pin_tag, engine_release

ROOT = Path(__file__).resolve().parents[1]
_SAFE = getattr(yaml, "CSafeLoader", yaml.SafeLoader)       # both are the safe loader
DEFAULT_CATALOG = ROOT / "src" / "club3090" / "catalog" / "data"
GB = 10 ** 9
REFERENCE_GPU = "rtx-3090"
EXIT_SAME, EXIT_CHANGED, EXIT_REFUSED, EXIT_USAGE = 0, 1, 2, 64

# Every key upstream's files may carry (both reference snapshots), per kind. Anything else is a
# schema this tool does not understand.
KNOWN_KEYS: Mapping[str, frozenset[str]] = {
    "registry": frozenset({
        "act8_capable", "act_format", "category", "chat_template", "compose_path", "default_arch_allow",
        "default_port", "drafter", "engine", "fallback_sm", "gateway", "gpu_assignment_mode",
        "host_ram_gb", "kv_format", "kvcalc_key", "max_ctx", "max_num_seqs", "mem_util", "model",
        "moe_cache", "offload", "pp", "recommended_engine_features", "required_engine_features",
        "required_sm", "requires_homogeneous_arch", "requires_nvlink", "sampler_profiles",
        "serve_aliases", "status", "status_note", "tp", "weights_companions", "weights_variant",
        "workload"}),
    "engines": frozenset({
        "display_name", "feature_provenance", "features", "genesis_pin", "id", "install", "min_sm",
        "notes", "required_genesis", "required_overlays", "schema_version", "stability",
        "supported_drafters", "supported_kv_formats", "supported_model_families",
        "supported_weight_formats", "type", "vendored_overlays"}),
    "drafters": frozenset({
        "display_name", "download", "engine_compat", "id", "local_model_path", "model_compat",
        "n_default", "n_max", "requires_engine_min", "schema_version", "spec_method",
        "speculative_config_template", "status", "vram_footprint_gb"}),
    "hardware": frozenset({
        "arch", "cudagraph", "display_name", "driver_pin_recommended", "id", "kv_format_default",
        "mem_util_safe", "notes", "nvlink_capable", "power_cap_w_max", "power_cap_w_optimal",
        "power_cap_w_prefill", "schema_version", "sm", "supported_kv_formats", "vram_gb"}),
    "models": frozenset({
        "active_params_b", "attention_k_eq_v", "attn_full_layers", "attn_output_gate",
        "attn_swa_layers", "canvas_tokens", "compatible_drafters", "decode_granularity",
        "default_weight_variant", "description", "display_name", "family", "global_head_dim",
        "head_dim_attn", "head_dim_sliding", "hidden_size", "id", "intermediate_size",
        "kv_calc_supported", "linear_conv_kernel_dim", "linear_k_head_dim", "linear_num_k_heads",
        "linear_num_v_heads", "linear_v_head_dim", "max_ctx_supported", "moe_intermediate_size",
        "moe_layers", "mtp_num_hidden_layers", "num_attn_heads", "num_attn_layers", "num_experts",
        "num_experts_per_tok", "num_full_attn_layers", "num_gdn_layers", "num_global_kv_heads",
        "num_hidden_layers", "num_kv_heads", "num_shared_experts", "num_sliding_attn_layers",
        "offload_residency", "requires_genesis", "schema_version", "setup",
        "shared_expert_intermediate_size", "sliding_window", "swa_window", "valid_tp",
        "vision_capable", "vram_sizing", "weights"}),
    "patches": frozenset({
        "capability", "delivery", "delivery_gaps", "delivery_mechanism", "delivery_spec",
        "deprecated_on", "deprecation_reason", "drift_guard", "files", "foundational", "genesis_env",
        "id", "load_bearing_when", "model", "status", "upstream"}),
}
SUPPORTED_UPSTREAM_SCHEMA = (1,)

# The catalog fields each section shares with upstream (the rest is ours: captures, evidence).
SHARED: Mapping[str, tuple[str, ...]] = {
    "profiles": ("model", "weights_variant", "workload", "engine", "drafter", "kv_format", "tp", "pp",
                 "max_model_len", "max_num_seqs", "mem_util", "port", "status", "required_sm", "fallback_sm",
                 "requires_nvlink", "required_engine_features", "compose_path"),
    "engines": ("display_name", "type", "install_method", "image", "pin", "vllm_version", "min_sm",
                "supported_kv_formats", "supported_weight_formats", "required_genesis"),
    "drafters": ("display_name", "method", "n_default", "n_max", "vram_footprint_bytes",
                 "speculative_config_template", "local_model_path", "model_compat", "status"),
    "models": ("display_name", "default_weight_variant", "weights"),
    "patches": ("models", "load_bearing_composes", "on_fail", "capability", "foundational",
                "deprecated_on"),
}
# Compared and reported, but never written: the loader reads them from other fields.
DERIVED: Mapping[str, tuple[str, ...]] = {"engines": ("pin", "vllm_version")}
FILE_OF = {"profiles": "profiles.yaml", "engines": "engines.yaml", "drafters": "drafters.yaml",
           "models": "models.yaml", "patches": "patches.yaml", "gpus": "gpus.yaml"}
SECTIONS = ("engines", "drafters", "models", "patches", "profiles", "gpus")


class Refused(Exception):
    """The upstream data cannot be read as this tool understands it."""

    def __init__(self, file: str, key: str, message: str) -> None:
        super().__init__(f"{file}: {key}: {message}")


# --------------------------------------------------------------------------- upstream -> our schema

def sm(value: Any) -> str | None:
    return None if value is None else f"{float(value):.1f}"


def gb_to_bytes(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return round(value * GB)


def map_profile(e: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "model": e["model"], "weights_variant": e["weights_variant"], "workload": e["workload"],
        "engine": e["engine"], "drafter": e.get("drafter"), "kv_format": e["kv_format"],
        "tp": e["tp"], "pp": e.get("pp", 1), "max_model_len": e["max_ctx"],
        "max_num_seqs": e["max_num_seqs"], "mem_util": e.get("mem_util"), "port": e["default_port"],
        "status": e["status"], "required_sm": sm(e.get("required_sm")),
        "fallback_sm": sm(e.get("fallback_sm")), "requires_nvlink": bool(e.get("requires_nvlink")),
        "required_engine_features": list(e.get("required_engine_features") or []),
        "compose_path": e["compose_path"],
    }


def map_engine(e: Mapping[str, Any]) -> dict[str, Any]:
    method, spec = e["install"]["method"], e["install"]["spec"]
    return {
        "display_name": e["display_name"], "type": e["type"], "install_method": method, "image": spec,
        "pin": f"{e['id']}@{engine_pin_tag(method, spec)}",
        "vllm_version": engine_release(e["type"], method, spec),
        "min_sm": sm(e["min_sm"]), "supported_kv_formats": list(e.get("supported_kv_formats") or []),
        "supported_weight_formats": list(e.get("supported_weight_formats") or []),
        "required_genesis": bool(e.get("required_genesis")),
        "vendored_overlays": [{"id": o["id"], "pr_url": o.get("pr_url")}
                              for o in e.get("vendored_overlays") or []],
    }


def map_drafter(d: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "display_name": d["display_name"], "method": d["spec_method"], "n_default": d["n_default"],
        "n_max": d["n_max"], "vram_footprint_bytes": gb_to_bytes(d.get("vram_footprint_gb")),
        "speculative_config_template": d.get("speculative_config_template"),
        "local_model_path": d.get("local_model_path"), "model_compat": list(d.get("model_compat") or []),
        "status": d.get("status", "experimental"),
    }


def map_model(mo: Mapping[str, Any]) -> dict[str, Any]:
    return {"display_name": mo["display_name"], "default_weight_variant": mo["default_weight_variant"],
            "weights": sorted(mo.get("weights") or {})}


def map_patch(p: Mapping[str, Any]) -> dict[str, Any]:
    guard = p.get("drift_guard") or {}
    return {
        "models": list(p.get("model") or []),
        "load_bearing_composes": sorted({c for lb in p.get("load_bearing_when") or []
                                         for c in lb.get("composes") or []}),
        "on_fail": guard.get("on_fail") or "capability-degraded", "capability": p.get("capability"),
        "foundational": bool(p.get("foundational")),
        "deprecated_on": str(p["deprecated_on"]) if p.get("deprecated_on") else None,
    }


# --------------------------------------------------------------------------- reading upstream

def _load(path: Path, label: str) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise Refused(label, "<file>", f"cannot read: {exc.strerror or exc}") from None
    try:
        return json.loads(text) if path.suffix == ".json" else yaml.load(text, Loader=_SAFE)
    except (ValueError, yaml.YAMLError) as exc:
        raise Refused(label, "<file>", f"not valid {path.suffix[1:].upper()}: {exc}") from None


def _check_keys(kind: str, label: str, record: Any, where: str) -> None:
    if not isinstance(record, dict):
        raise Refused(label, where, "expected a mapping")
    for key in record:
        if key not in KNOWN_KEYS[kind]:
            raise Refused(label, f"{where}.{key}" if where else str(key),
                          "unknown upstream key; extend tools/sync_upstream.py before syncing")
    version = record.get("schema_version", 1)
    if version not in SUPPORTED_UPSTREAM_SCHEMA:
        raise Refused(label, f"{where}.schema_version" if where else "schema_version",
                      f"unsupported upstream schema version {version!r}")


def _profiles_dir(root: Path) -> Path:
    for candidate in (root / "profiles", root / "scripts" / "lib" / "profiles"):
        if candidate.is_dir():
            return candidate
    raise Refused(str(root), "<folder>", "no profiles/ or scripts/lib/profiles/ folder: not a club-3090 "
                                         "checkout or snapshot")


def _registry(root: Path, profiles: Path) -> tuple[str, dict[str, Any]]:
    for path in (root / "registry_expanded.json", root / "registry.json", root / "registry.yaml",
                 profiles / "registry.yaml"):
        if path.is_file():
            label = str(path.relative_to(root))
            doc = _load(path, label)
            entries = doc.get("entries", doc) if isinstance(doc, dict) else None
            if isinstance(doc, dict) and "entries" in doc and doc.get("schema") not in SUPPORTED_UPSTREAM_SCHEMA:
                raise Refused(label, "schema", f"unsupported upstream schema version {doc.get('schema')!r}")
            if not isinstance(entries, dict):
                raise Refused(label, "entries", "expected a mapping of slug to entry")
            return label, entries
    raise Refused(str(root), "<folder>", "no registry_expanded.json, registry.json or registry.yaml")


def read_upstream(root: Path) -> dict[str, dict[str, Any]]:
    """Upstream's data mapped into the catalog's shared fields, per section."""
    profiles_dir = _profiles_dir(root)
    out: dict[str, dict[str, Any]] = {s: {} for s in SECTIONS}
    label, entries = _registry(root, profiles_dir)
    for slug, entry in entries.items():
        _check_keys("registry", label, entry, f"entries[{slug!r}]")
        try:
            out["profiles"][slug] = map_profile(entry)
        except KeyError as exc:
            raise Refused(label, f"entries[{slug!r}].{exc.args[0]}", "missing required key") from None
    folders = (("engines", "engines", map_engine), ("drafters", "drafters", map_drafter),
               ("models", "models", map_model), ("hardware", "gpus", None))
    for folder, section, mapper in folders:
        for path in sorted((profiles_dir / folder).glob("*.yml")):
            label = str(path.relative_to(root))
            doc = _load(path, label)
            _check_keys(folder, label, doc, "")
            rid = doc.get("id")
            if not isinstance(rid, str):
                raise Refused(label, "id", "missing required key")
            try:
                out[section][rid] = mapper(doc) if mapper else {}
            except (KeyError, TypeError) as exc:
                raise Refused(label, str(exc.args[0]) if exc.args else "<record>",
                              "missing or malformed required key") from None
    patches = profiles_dir / "patches.yml"
    if patches.is_file():
        label = str(patches.relative_to(root))
        doc = _load(patches, label)
        if not isinstance(doc, dict) or not isinstance(doc.get("patches"), list):
            raise Refused(label, "patches", "expected a list of patches")
        for i, p in enumerate(doc["patches"]):
            _check_keys("patches", label, p, f"patches[{i}]")
            out["patches"][p["id"]] = map_patch(p)
    return out


# --------------------------------------------------------------------------- comparing

@dataclass
class Report:
    added: dict[str, list[str]] = field(default_factory=dict)
    removed: dict[str, list[str]] = field(default_factory=dict)
    changed: list[tuple[str, str, str, Any, Any]] = field(default_factory=list)   # section, id, field, ours, theirs
    protected: list[tuple[str, str, str, Any, Any]] = field(default_factory=list)
    pending: list[tuple[str, str, str]] = field(default_factory=list)              # section, id, why not in the diff

    @property
    def empty(self) -> bool:
        """Nothing to take from upstream (entries only the catalog has are kept, not changes)."""
        return not (any(self.added.values()) or self.changed)

    def to_json(self) -> dict[str, Any]:
        def rows(items: list[tuple[str, str, str, Any, Any]]) -> list[dict[str, Any]]:
            return [{"section": s, "id": i, "field": f, "catalog": o, "upstream": t} for s, i, f, o, t in items]
        return {"changed": not self.empty, "added": self.added, "removed": self.removed,
                "changes": rows(self.changed), "protected": rows(self.protected),
                "pending": [{"section": s, "id": i, "why": w} for s, i, w in self.pending]}


def read_catalog(data: Path) -> tuple[dict[str, Any], dict[str, str]]:
    docs, texts = {}, {}
    for section in SECTIONS:
        name = FILE_OF[section]
        texts[name] = (data / name).read_text(encoding="utf-8")
        docs[name] = yaml.load(texts[name], Loader=_SAFE)
    return docs, texts


def _protected_paths(doc: Mapping[str, Any]) -> set[str]:
    return {p for c in doc.get("corrections") or [] for p in c.get("paths") or []}


def _ours(section: str, rid: str, record: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: record.get(k) for k in SHARED.get(section, ())}
    if section == "engines":
        method, image = record.get("install_method", ""), record.get("image", "")
        out["pin"] = f"{rid}@{engine_pin_tag(method, image)}"
        out["vllm_version"] = engine_release(record.get("type", ""), method, image)
    if section == "models":
        out["weights"] = sorted(record.get("weights") or {})
    for k, v in out.items():
        if k in ("min_sm", "required_sm", "fallback_sm") and v is not None:
            out[k] = sm(v)
    if section == "patches":
        out["load_bearing_composes"] = sorted(out["load_bearing_composes"] or [])
    return out


def compare(upstream: Mapping[str, Mapping[str, Any]], docs: Mapping[str, Any]) -> Report:
    report = Report()
    for section in SECTIONS:
        doc = docs[FILE_OF[section]]
        ours = doc[section]
        protected = _protected_paths(doc)
        theirs = upstream[section]
        report.added[section] = sorted(set(theirs) - set(ours))
        report.removed[section] = sorted(set(ours) - set(theirs))
        for rid in sorted(set(theirs) & set(ours)):
            mine = _ours(section, rid, ours[rid])
            for key in SHARED.get(section, ()):
                upstream_value = theirs[rid][key]
                if key == "weights":          # the catalog may curate more variants than upstream
                    upstream_value = sorted(set(upstream_value) - set(mine[key]))
                    if not upstream_value:
                        continue
                    mine[key] = []
                elif mine[key] == upstream_value:
                    continue
                row = (section, rid, key, mine[key], upstream_value)
                path = f"{section}[{rid!r}].{key}"
                (report.protected if path in protected else report.changed).append(row)
    return report


# --------------------------------------------------------------------------- the proposed change

def _unknown_refs(section: str, record: Mapping[str, Any], new: Mapping[str, Any],
                  kv_formats: set[str]) -> list[str]:
    """Ids ``record`` names that the (proposed) catalog lacks; such a change waits for curation."""
    models = new["models.yaml"]["models"]
    engines = new["engines.yaml"]["engines"]
    refs: list[tuple[str, Any, Any]] = []          # (what, id, known ids)
    if section == "engines":
        refs += [("KV format", k, kv_formats) for k in record["supported_kv_formats"]]
    elif section == "drafters":
        refs += [("model", m, models) for m in record["model_compat"]]
    elif section == "patches":
        refs += [("model", m, models) for m in record["models"]]
        refs += [("profile", k, new["profiles.yaml"]["profiles"]) for k in record["load_bearing_composes"]]
    elif section == "profiles":
        model = models.get(record["model"]) or {}
        refs += [("model", record["model"], models), ("engine", record["engine"], engines),
                 ("KV format", record["kv_format"], kv_formats),
                 (f"weight variant of {record['model']}", record["weights_variant"], model.get("weights") or {})]
        if record["drafter"] is not None:
            refs.append(("drafter", record["drafter"], new["drafters.yaml"]["drafters"]))
    missing = [f"{what} {rid}" for what, rid, known in refs if rid not in known]
    if section == "profiles" and not missing and record["mem_util"] is None \
            and engines[record["engine"]].get("type") == "vllm":
        missing.append("mem_util (a vLLM profile needs one)")
    return missing


def propose(upstream: Mapping[str, Mapping[str, Any]], docs: Mapping[str, Any], report: Report,
            kv_formats: set[str]) -> dict[str, Any]:
    """The catalog documents with the report's changes applied where every id they name resolves
    (a deep copy; ``docs`` untouched). The rest goes to ``report.pending`` with the reason."""
    new: dict[str, Any] = json.loads(json.dumps(docs))

    def take(section: str, rid: str, record: dict[str, Any], what: str) -> bool:
        missing = _unknown_refs(section, record, new, kv_formats)
        if missing:
            report.pending.append((section, rid, f"{what}: not in the catalog: {', '.join(missing)}"))
            return False
        derived = DERIVED.get(section, ())
        new[FILE_OF[section]][section][rid] = {k: v for k, v in record.items() if k not in derived}
        return True

    for section in ("engines", "drafters"):
        for rid in report.added[section]:
            take(section, rid, dict(upstream[section][rid]), "added upstream")
    for rid in report.added["profiles"]:
        p = {**upstream["profiles"][rid], "status_note": None, "reference_gpu": REFERENCE_GPU, "runtime": None}
        take("profiles", rid, p, "added upstream")
    for section, rid, key, _ours_value, theirs in report.changed:
        if key in DERIVED.get(section, ()):
            continue                            # follows from the fields it is read from
        if section == "models":
            detail = (f"variants {', '.join(theirs)} added upstream" if key == "weights"
                      else f"{key} differs")
            report.pending.append((section, rid, f"{detail}; models are curated by hand"))
            continue
        record = {**new[FILE_OF[section]][section][rid], key: theirs}
        take(section, rid, record, f"{key} changed")
    for section in ("models", "patches", "gpus"):
        for rid in report.added[section]:
            report.pending.append((section, rid, "added upstream; curate by hand"))
    return new


def _dump(text: str, doc: Any) -> str:
    header = "".join(line for line in text.splitlines(keepends=True) if line.startswith("#"))
    return header + yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=100,
                                   default_flow_style=False)


def unified_diff(before: Mapping[str, str], after: Mapping[str, str]) -> str:
    out: list[str] = []
    for name in sorted(before):
        path = f"src/club3090/catalog/data/{name}"
        out += difflib.unified_diff(before[name].splitlines(keepends=True),
                                    after[name].splitlines(keepends=True), f"a/{path}", f"b/{path}")
    return "".join(out)


def summary(report: Report) -> str:
    lines = []
    for section in SECTIONS:
        added, removed = report.added[section], report.removed[section]
        changes = [r for r in report.changed if r[0] == section]
        lines.append(f"{section}: {len(added)} added, {len(removed)} only in the catalog (kept), "
                     f"{len(changes)} field changes")
        for rid in added:
            lines.append(f"  + {rid}")
        for rid in removed:
            lines.append(f"  = {rid} (not upstream; kept)")
    pins = [r for r in report.changed if r[0] == "engines" and r[2] == "pin"]
    statuses = [r for r in report.changed if r[0] == "profiles" and r[2] == "status"]
    lines.append(f"pin changes: {len(pins)}")
    lines += [f"  {rid}: {ours} -> {theirs}" for _s, rid, _f, ours, theirs in pins]
    lines.append(f"status changes: {len(statuses)}")
    lines += [f"  {rid}: {ours} -> {theirs}" for _s, rid, _f, ours, theirs in statuses]
    other = [r for r in report.changed if r not in pins and r not in statuses]
    lines.append(f"other field changes: {len(other)}")
    lines += [f"  {s}[{rid}].{f}: {json.dumps(o)} -> {json.dumps(t)}" for s, rid, f, o, t in other]
    lines.append(f"kept by corrections: {len(report.protected)}")
    lines += [f"  {s}[{rid}].{f}: catalog {json.dumps(o)}, upstream {json.dumps(t)}"
              for s, rid, f, o, t in report.protected]
    lines.append(f"not in the diff (curate by hand): {len(report.pending)}")
    lines += [f"  {s}[{rid}]: {why}" for s, rid, why in report.pending]
    return "\n".join(lines) + "\n"


def _atomic_write(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)


@dataclass
class Sync:
    report: Report
    before: dict[str, str]             # catalog file name -> current text
    after: dict[str, str]              # the same files with the proposed change

    @property
    def diff(self) -> str:
        return unified_diff(self.before, self.after)


def run(source: Path, catalog: Path) -> Sync:
    """Compare ``catalog`` (a data folder) with the upstream data at ``source``; writes nothing."""
    upstream = read_upstream(source)
    docs, texts = read_catalog(catalog)
    kv = set(yaml.load((catalog / "kv_formats.yaml").read_text(encoding="utf-8"), Loader=_SAFE)["kv_formats"])
    report = compare(upstream, docs)
    new = propose(upstream, docs, report, kv)
    after = {name: _dump(texts[name], new[name]) if new[name] != docs[name] else texts[name]
             for name in texts}
    return Sync(report, texts, after)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--from", dest="source", type=Path, required=True,
                    help="club-3090 checkout or reference snapshot folder")
    ap.add_argument("--catalog", type=Path, default=DEFAULT_CATALOG, help="catalog data folder")
    ap.add_argument("--diff", type=Path, help="write the proposed change as a unified diff here")
    ap.add_argument("--json", action="store_true", help="print the report as JSON")
    try:
        args = ap.parse_args(argv)
    except SystemExit as exc:
        return EXIT_USAGE if exc.code else EXIT_SAME
    try:
        sync = run(args.source, args.catalog)
    except Refused as exc:
        print(f"sync refused: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    report = sync.report
    if args.diff is not None:
        _atomic_write(args.diff, sync.diff)
    if args.json:
        print(json.dumps(report.to_json(), indent=2, sort_keys=True, default=str))
    else:
        sys.stdout.write(summary(report))
    return EXIT_SAME if report.empty else EXIT_CHANGED


if __name__ == "__main__":
    sys.exit(main())
