#!/usr/bin/env python3
"""Compare upstream club-3090's data with the catalog and propose a reviewable change.

    python tools/sync_upstream.py --from <club-3090 checkout or snapshot> \
        [--catalog src/club3090/catalog/data] [--diff FILE] [--write] [--json]

Reads upstream's registry (entries and its defaults, engine preference and recommended models),
its engine, drafter, model, hardware, patch and architecture files, the shipped compose of every
entry and the patch-file index, maps them into the catalog's schema (``tools/upstream_catalog.py``)
and reports what differs: added entries, entries only the catalog has (kept; profiles are marked
``archived``), renamed slugs, changed fields, engine pin changes and profile status changes.
``--diff FILE`` writes a unified diff of the catalog YAML (apply it with ``git apply`` after
review); ``--write`` applies the proposed change to the catalog folder. A value a file's
``corrections:`` names is kept and reported as protected. An upstream file with a key this tool
does not know is refused (exit 2), naming the file and key, rather than guessed at.

Runs from a plain clone: it puts the checkout's own ``src`` first on the path, so the schema it
reads is the one of the catalog it compares (an installed ``club3090`` is not needed).

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
if (ROOT / "src" / "club3090").is_dir():
    # the checkout's own schema, installed or not (a plain clone runs as is)
    sys.path.insert(0, str(ROOT / "src"))

import upstream_catalog as uc  # noqa: E402
from upstream_catalog import REFERENCE_GPU, Refused  # noqa: E402

from club3090.catalog.schema import engine_pin_tag, engine_release  # noqa: E402

__all__ = ["DEFAULT_CATALOG", "EXIT_CHANGED", "EXIT_REFUSED", "EXIT_SAME", "EXIT_USAGE", "Refused",
           "Report", "Sync", "main", "run"]

DEFAULT_CATALOG = ROOT / "src" / "club3090" / "catalog" / "data"
EXIT_SAME, EXIT_CHANGED, EXIT_REFUSED, EXIT_USAGE = 0, 1, 2, 64
FILE_OF = {"profiles": "profiles.yaml", "engines": "engines.yaml", "drafters": "drafters.yaml",
           "models": "models.yaml", "patches": "patches.yaml", "gpus": "gpus.yaml",
           "arches": "arches.yaml", "upstream_files": "upstream_files.yaml", "upstream": "upstream.yaml"}
SECTIONS = ("engines", "drafters", "models", "patches", "profiles", "gpus", "arches", "upstream_files",
            "upstream")
# sections whose upstream-only records the tool adds (the rest need hand curation: a GPU card
# needs bandwidth and throughput figures upstream does not record)
ADDABLE = ("engines", "drafters", "models", "patches", "profiles", "arches", "upstream_files")
# the value a field has when the catalog record leaves it out (the schema's default)
ABSENT: dict[str, dict[str, Any]] = {
    "profiles": {**uc.DEFAULTS_NEW_PROFILE_FIELDS, "pp": 1, "required_sm": None, "fallback_sm": None,
                 "requires_nvlink": False, "required_engine_features": [], "archived": False,
                 "replaced_by": None, "aliases": [], "runtime": None},
    "engines": {"stability": "stable"},
    "drafters": {"requires_engine_min": None, "local_model_path": None, "status": "experimental"},
    "models": {"description": "", "family": None, "serving_defaults": {}, "engine_defaults": {},
               "vram_sizing": {}, "offload_residency": {}},
    "patches": {"deprecated_on": None, "files": []},
    "gpus": dict(uc.DEFAULTS_NEW_GPU_FIELDS),
    "variants": {"engine": None, "files": [], "revision": None},
}
STATUS_RANK = ("production", "caveats", "experimental", "incubating", "preview", "upstream-gated")
# Slugs upstream renamed, from its history (the calibration records and the registry's rename
# commits): the old slug resolves to the new one.
RENAMED: dict[str, str] = {
    "vllm/gemma-int8": "vllm/gemma-int8-mtp",
    "vllm/gemma-mtp": "vllm/gemma-bf16-mtp",
    "vllm/gemma-int8-262k": "vllm/gemma-int8-mtp",
    "vllm/qwen-a3b-preview": "vllm/qwen-35b-a3b-dual",
    "llamacpp/qwen38-27b-single-iq4nl": "llamacpp/qwen38-27b-single-iq4xs",
}


# --------------------------------------------------------------------------- the two views

def _norm(section: str, key: str, value: Any) -> Any:
    if key in ("min_sm", "required_sm", "fallback_sm") and value is not None:
        return uc.sm(value)
    if key == "default_arch_allow":
        return [uc.sm(v) for v in value or []]
    if section == "upstream_files" and key == "commit":
        return str(value)
    return json.loads(json.dumps(value, default=str))


def _flat(section: str, record: dict[str, Any]) -> dict[str, Any]:
    """A record as comparable fields: a model's variants become ``weights['id'].field``."""
    out = {}
    for k, v in record.items():
        if section == "models" and k == "weights":
            for vid, var in (v or {}).items():
                for vk, vv in var.items():
                    if vk != "note":
                        out[f"weights[{vid!r}].{vk}"] = _norm("variants", vk, vv)
        else:
            out[k] = _norm(section, k, v)
    return out


def _ours(section: str, record: dict[str, Any], keys: list[str]) -> dict[str, Any]:
    flat = _flat(section, record)
    absent = ABSENT.get(section, {})
    out = {}
    for k in keys:
        if k in flat:
            out[k] = flat[k]
        elif k.startswith("weights["):
            base = k.rsplit(".", 1)[1]
            prefix = k.rsplit(".", 1)[0]
            has_variant = any(f.startswith(prefix + ".") for f in flat)
            out[k] = _norm("variants", base, ABSENT["variants"].get(base)) if has_variant else None
        else:
            out[k] = _norm(section, k, absent.get(k))
    return out


def _family(engine_type: str | None) -> str:
    return "vllm" if engine_type == "vllm" else "llamacpp"


def _topology(tp: int) -> str:
    return "single" if tp == 1 else "dual" if tp == 2 else "multi"


def _successor(key: str, p: dict[str, Any], profiles: dict[str, Any], engines: dict[str, Any],
               defaults: dict[str, Any]) -> str | None:
    """The current profile that replaces a withdrawn one: upstream's default for the model, engine
    family and GPU count, else the best-status live profile of the same model, family and TP."""
    def live(k: str) -> bool:
        q = profiles.get(k)
        return (q is not None and k != key and not q.get("archived") and q["status"] != "deprecated"
                and engines.get(q["engine"], {}).get("stability") != "deprecated")
    fam = _family(engines.get(p["engine"], {}).get("type"))
    pick = ((defaults.get(p["model"]) or {}).get(fam) or {}).get(_topology(p["tp"]))
    if pick and live(pick) and profiles[pick]["model"] == p["model"]:
        return str(pick)
    same = [k for k, q in profiles.items() if live(k) and q["model"] == p["model"] and q["tp"] == p["tp"]
            and _family(engines.get(q["engine"], {}).get("type")) == fam]
    same.sort(key=lambda k: (STATUS_RANK.index(profiles[k]["status"]) if profiles[k]["status"] in STATUS_RANK
                             else len(STATUS_RANK), k))
    return same[0] if same else None


SHIPPED_STATUSES = ("production", "caveats", "experimental")


def _shipped_pins(up: uc.Upstream, ours: dict[str, Any], view: dict[str, Any],
                  engines: dict[str, Any]) -> dict[str, list[str]]:
    """Architecture row -> the engine pins upstream ships a production, caveats or experimental
    vLLM profile of it on (what upstream launches; ``incubating`` and ``preview`` are not counted)."""
    rows = ours["arches"]
    aliases = {a: arch for arch, row in rows.items() for a in row.get("config_architectures") or []}
    out: dict[str, list[str]] = {}
    for p in up.sections["profiles"].values():
        engine = engines.get(p["engine"]) or {}
        if engine.get("type") != "vllm" or p["status"] not in SHIPPED_STATUSES \
                or engine.get("stability") == "deprecated":
            continue
        arch = next((a for a, row in rows.items() if p["model"] in (row.get("model_slugs") or [])), None)
        if arch is None:
            model = view["models"].get(p["model"]) or {}
            cfg = model.get("hf_config") or (ours["models"].get(p["model"]) or {}).get("hf_config") or {}
            name = (cfg.get("architectures") or [""])[0]
            arch = name if name in rows else aliases.get(name)
        if arch is None:
            continue
        pin = f"{p['engine']}@{engine_pin_tag(engine['install_method'], engine['image'])}"
        if pin not in out.setdefault(arch, []):
            out[arch].append(pin)
    return out


def upstream_view(up: uc.Upstream, docs: dict[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per section, the upstream-owned fields of every record upstream has (a model's
    ``hf_config`` only for models new to the catalog: a curated model keeps its real config)."""
    view: dict[str, dict[str, dict[str, Any]]] = {s: {} for s in SECTIONS}
    ours = {s: docs[FILE_OF[s]][s] for s in SECTIONS}
    for section in ("engines", "drafters", "patches"):
        view[section] = {rid: dict(r) for rid, r in up.sections[section].items()}
    engines = {**{k: dict(v) for k, v in ours["engines"].items()}, **view["engines"]}
    served_ctx: dict[str, int] = {}
    for p in up.sections["profiles"].values():
        served_ctx[p["model"]] = max(served_ctx.get(p["model"], 0), p["max_model_len"])
    for mid, rec in up.sections["models"].items():
        rec = dict(rec)
        if mid not in ours["models"]:
            cfg = uc.construct_hf_config(up.raw_models[mid])
            if "max_position_embeddings" not in cfg and mid in served_ctx:
                # the GGUF-only families record no context: the longest their profiles serve
                cfg["max_position_embeddings"] = served_ctx[mid]
            rec["hf_config"] = cfg
            rec["hf_config_source"] = (f"constructed by tools/sync_upstream.py from upstream's architecture "
                                       f"facts (family {up.raw_models[mid].get('family')})")
        view["models"][mid] = rec
    for gid, rec in up.sections["gpus"].items():
        view["gpus"][gid] = dict(rec)
    # profiles: registry fields, the capture of the shipped compose, aliases, archive marks
    profiles = {k: dict(v) for k, v in ours["profiles"].items()}
    for key, rec in up.sections["profiles"].items():
        rec = dict(rec)
        rec["archived"] = False
        text = up.composes.get(rec["compose_path"])
        if text is not None:
            # every engine family: vLLM and llama.cpp composes are captured alike (replay differs)
            rec["runtime"] = uc.capture_runtime(key, rec["kv_format"], text, rec["compose_path"])
        elif engines.get(rec["engine"], {}).get("type") != "vllm":
            rec["runtime"] = None
        rec["aliases"] = sorted(old for old, new in RENAMED.items() if new == key)
        view["profiles"][key] = rec
        profiles[key] = {**profiles.get(key, {}), **rec}
    for key in ours["profiles"]:
        if key not in up.sections["profiles"]:
            view["profiles"][key] = {"archived": True}
    defaults = up.registry_meta.get("defaults") or {}
    for key, rec in view["profiles"].items():
        p = profiles[key]
        withdrawn = (p.get("archived") or rec.get("archived") or p["status"] == "deprecated"
                     or engines.get(p["engine"], {}).get("stability") == "deprecated")
        rec["replaced_by"] = _successor(key, {**p, **rec}, profiles, engines, defaults) if withdrawn else None
    # architecture rows: upstream's tested pins, plus the pin of every engine upstream ships a live
    # profile of the architecture on (its arch file lags its registry: Gemma 4 moved to vllm-stable
    # in the registry only); a row for a new model's unknown architecture
    shipped = _shipped_pins(up, ours, view, engines)
    for arch, row in ours["arches"].items():
        pins = [dict(pin) for pin in row.get("engine_pins") or []]
        have = {pin["pin"] for pin in pins}
        extra = [pin for pin in up.arch_pins.get(arch, []) if pin["pin"] not in have
                 and pin["pin"].split("@", 1)[0] in engines]
        have |= {pin["pin"] for pin in extra}
        extra += [{"pin": pin, "loads": True} for pin in shipped.get(arch, []) if pin not in have]
        have |= {pin["pin"] for pin in extra}
        # an architecture that loads on an overlay-free engine (stock vLLM, built-in classes) loads on
        # its current release too, unless upstream's row says otherwise
        for pin in list(pins):
            eid = pin["pin"].split("@", 1)[0]
            engine = engines.get(eid) or {}
            if not pin.get("loads") or engine.get("vendored_overlays") or engine.get("required_genesis") \
                    or engine.get("stability") == "deprecated" or "image" not in engine:
                continue
            current = f"{eid}@{engine_pin_tag(engine['install_method'], engine['image'])}"
            if current not in have:
                extra.append({"pin": current, "loads": True})
                have.add(current)
        if up.arch_pins:
            view["arches"][arch] = {"engine_pins": pins + extra}
    aliases = {a for row in ours["arches"].values() for a in row.get("config_architectures") or []}
    slugged = {slug for row in ours["arches"].values() for slug in row.get("model_slugs") or []}
    for mid, rec in view["models"].items():
        cfg = rec.get("hf_config") or (ours["models"].get(mid) or {}).get("hf_config") or {}
        arch = (cfg.get("architectures") or [""])[0]
        if not arch or arch in ours["arches"] or arch in aliases or mid in slugged:
            continue
        keys = [k for k, p in up.sections["profiles"].items() if p["model"] == mid
                and engines.get(p["engine"], {}).get("type") == "vllm"]
        if not keys:
            continue                      # served by llama.cpp only: no vLLM gate needs a row
        pins = sorted({f"{p['engine']}@{engine_pin_tag(engines[p['engine']]['install_method'], engines[p['engine']]['image'])}"
                       for k, p in up.sections["profiles"].items() if k in keys})
        tps = sorted({up.sections["profiles"][k]["tp"] for k in keys})
        view["arches"][arch] = {
            "engine_pins": [{"pin": pin, "loads": True} for pin in pins],
            "required_patches": [], "tp_divisors": tps, "trust_remote_code": "unverified",
            "trust_remote_code_evidence": None, "kernel_constraints": [],
            "confidence": "estimated-lower-bound", "status": "unverified", "config_architectures": [],
            "model_slugs": [mid],
        }
    if up.commit is not None:
        for path, rec in up.files.items():
            view["upstream_files"][path] = {"commit": up.commit, **rec}
    meta = up.registry_meta
    record: dict[str, Any] = {"repo": uc.UPSTREAM_REPO}
    if up.commit is not None:
        record["commit"] = up.commit
    if meta.get("engine_preference") is not None:
        record["engine_preference"] = {k: list(v) for k, v in meta["engine_preference"].items()}
    if meta.get("recommended_default_models") is not None:
        record["recommended_default_models"] = list(meta["recommended_default_models"])
    view["upstream"][uc.UPSTREAM_NAME] = record
    return view


# --------------------------------------------------------------------------- comparing

@dataclass
class Report:
    added: dict[str, list[str]] = field(default_factory=dict)
    removed: dict[str, list[str]] = field(default_factory=dict)
    changed: list[tuple[str, str, str, Any, Any]] = field(default_factory=list)   # section, id, field, ours, theirs
    protected: list[tuple[str, str, str, Any, Any]] = field(default_factory=list)
    pending: list[tuple[str, str, str]] = field(default_factory=list)              # section, id, why not in the diff
    renamed: dict[str, str] = field(default_factory=dict)                          # old slug -> new
    commit: str | None = None

    @property
    def empty(self) -> bool:
        """Nothing to take from upstream (entries only the catalog has are kept, not changes)."""
        return not (any(self.added.values()) or self.changed)

    def to_json(self) -> dict[str, Any]:
        def rows(items: list[tuple[str, str, str, Any, Any]]) -> list[dict[str, Any]]:
            return [{"section": s, "id": i, "field": f, "catalog": o, "upstream": t} for s, i, f, o, t in items]
        return {"changed": not self.empty, "upstream_commit": self.commit, "added": self.added,
                "removed": self.removed, "renamed": self.renamed, "changes": rows(self.changed),
                "protected": rows(self.protected),
                "pending": [{"section": s, "id": i, "why": w} for s, i, w in self.pending]}


def read_catalog(data: Path) -> tuple[dict[str, Any], dict[str, str]]:
    docs, texts = {}, {}
    for name in sorted(set(FILE_OF.values()) | {"kv_formats.yaml"}):
        texts[name] = (data / name).read_text(encoding="utf-8")
        docs[name] = uc.load_yaml(texts[name], name)
    return docs, texts


def _protected_paths(doc: dict[str, Any]) -> set[str]:
    return {p for c in doc.get("corrections") or [] for p in c.get("paths") or []}


def compare(view: dict[str, dict[str, dict[str, Any]]], docs: dict[str, Any]) -> Report:
    report = Report()
    for section in SECTIONS:
        doc = docs[FILE_OF[section]]
        ours = doc[section]
        protected = _protected_paths(doc)
        theirs = view[section]
        report.added[section] = sorted(set(theirs) - set(ours))
        upstream_ids = set(theirs) if section != "profiles" else {k for k, v in theirs.items() if v != {
            "archived": True, "replaced_by": v.get("replaced_by")}}
        report.removed[section] = (sorted(set(ours) - upstream_ids)
                                   if theirs or section not in ("arches", "upstream_files") else [])
        for rid in sorted(set(theirs) & set(ours)):
            flat = _flat(section, theirs[rid])
            mine = _ours(section, ours[rid], list(flat))
            for key, value in flat.items():
                if mine[key] == value:
                    continue
                row = (section, rid, key, mine[key], value)
                path = f"{section}[{rid!r}].{key}"
                (report.protected if path in protected else report.changed).append(row)
    report.renamed = {old: new for old, new in RENAMED.items() if new in view["profiles"]}
    return report


# --------------------------------------------------------------------------- the proposed change

def _new_record(section: str, rid: str, rec: dict[str, Any], up: uc.Upstream) -> dict[str, Any]:
    """A whole catalog record for an entry new to the catalog."""
    out = dict(rec)
    if section == "profiles":
        out.setdefault("runtime", None)
        out = {**out, "status_note": None, "reference_gpu": REFERENCE_GPU}
    elif section == "patches":
        out.update(uc.patch_wiring(up.raw_patches[rid]))
    return out


def _compact(section: str, record: dict[str, Any]) -> dict[str, Any]:
    """Leave out the newer optional fields at their default, so older records stay as they were."""
    optional = {"profiles": {*uc.DEFAULTS_NEW_PROFILE_FIELDS, "archived", "replaced_by", "aliases"},
                "models": {"family", "engine_defaults", "vram_sizing", "offload_residency"},
                "engines": {"stability"}, "drafters": {"requires_engine_min"}, "patches": {"files"},
                "gpus": set(uc.DEFAULTS_NEW_GPU_FIELDS)}.get(section, set())
    absent = ABSENT.get(section, {})
    return {k: v for k, v in record.items()
            if not (k in optional and _norm(section, k, v) == _norm(section, k, absent.get(k)))}


def _set(record: dict[str, Any], key: str, value: Any) -> None:
    if key.startswith("weights["):
        vid = key[len("weights['"):key.index("']")]
        record.setdefault("weights", {}).setdefault(vid, {})[key.rsplit(".", 1)[1]] = value
    else:
        record[key] = value


def _unknown_refs(section: str, record: dict[str, Any], new: dict[str, Any], kv_formats: set[str]) -> list[str]:
    """Ids ``record`` names that the proposed catalog lacks; such a change waits for curation."""
    models = new["models.yaml"]["models"]
    engines = new["engines.yaml"]["engines"]
    refs: list[tuple[str, Any, Any]] = []
    if section == "engines":
        refs += [("KV format", k, kv_formats) for k in record.get("supported_kv_formats") or []]
    elif section == "drafters":
        refs += [("model", m, models) for m in record.get("model_compat") or []]
    elif section == "patches":
        refs += [("model", m, models) for m in record.get("models") or []]
        refs += [("profile", k, new["profiles.yaml"]["profiles"]) for k in record.get("load_bearing_composes") or []]
    elif section == "profiles" and "model" in record:
        model = models.get(record["model"]) or {}
        refs += [("model", record["model"], models), ("engine", record["engine"], engines),
                 ("KV format", record["kv_format"], kv_formats),
                 (f"weight variant of {record['model']}", record["weights_variant"], model.get("weights") or {})]
        if record.get("drafter") is not None:
            refs.append(("drafter", record["drafter"], new["drafters.yaml"]["drafters"]))
    return [f"{what} {rid}" for what, rid, known in refs if rid not in known]


def propose(view: dict[str, dict[str, dict[str, Any]]], docs: dict[str, Any], report: Report,
            up: uc.Upstream, kv_formats: set[str]) -> dict[str, Any]:
    """The catalog documents with the report's changes applied where every id they name resolves
    (a deep copy; ``docs`` untouched). The rest goes to ``report.pending`` with the reason."""
    new: dict[str, Any] = json.loads(json.dumps(docs, default=str))
    for section in ADDABLE:
        for rid in report.added[section]:
            new[FILE_OF[section]][section][rid] = _new_record(section, rid, view[section][rid], up)
    for section, rid, key, _ours_value, theirs in report.changed:
        _set(new[FILE_OF[section]][section][rid], key, theirs)
    for section in ("gpus", "upstream"):
        for rid in report.added[section]:
            if section == "upstream":
                new[FILE_OF[section]][section][rid] = view[section][rid]
            else:
                report.pending.append((section, rid, "added upstream; curate by hand (bandwidth, throughput)"))
    # entries whose references do not resolve wait for curation, whole
    for section in ("engines", "drafters", "patches", "profiles"):
        body = new[FILE_OF[section]][section]
        for rid in sorted(body):
            missing = _unknown_refs(section, body[rid], new, kv_formats)
            if missing and (rid in report.added[section] or any(r[:2] == (section, rid) for r in report.changed)):
                report.pending.append((section, rid, f"not in the catalog: {', '.join(missing)}"))
                if rid in report.added[section]:
                    del body[rid]
                else:
                    body[rid] = json.loads(json.dumps(docs[FILE_OF[section]][section][rid], default=str))
    for section in SECTIONS:
        body = new[FILE_OF[section]][section]
        was = list(docs[FILE_OF[section]][section])
        # a sorted section stays sorted; a curated order (GPU cards) is kept, new records last
        order = sorted(body) if was == sorted(was) else was + [rid for rid in body if rid not in was]
        new[FILE_OF[section]][section] = {rid: _compact(section, body[rid]) for rid in order if rid in body}
    return new


def _dump(text: str, doc: Any) -> str:
    header = "".join(line for line in text.splitlines(keepends=True) if line.startswith("#"))
    lead = []
    for line in header.splitlines(keepends=True):
        lead.append(line)
    return "".join(lead) + yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=100,
                                          default_flow_style=False)


def unified_diff(before: dict[str, str], after: dict[str, str]) -> str:
    out: list[str] = []
    for name in sorted(before):
        path = f"src/club3090/catalog/data/{name}"
        out += difflib.unified_diff(before[name].splitlines(keepends=True),
                                    after[name].splitlines(keepends=True), f"a/{path}", f"b/{path}")
    return "".join(out)


def summary(report: Report) -> str:
    lines = [f"upstream commit: {report.commit or 'unknown (the catalog keeps its own)'}"]
    for section in SECTIONS:
        added, removed = report.added[section], report.removed[section]
        changes = [r for r in report.changed if r[0] == section]
        lines.append(f"{section}: {len(added)} added, {len(removed)} only in the catalog (kept), "
                     f"{len(changes)} field changes")
        lines += [f"  + {rid}" for rid in added]
        lines += [f"  = {rid} (not upstream; kept)" for rid in removed]
    lines.append(f"renamed slugs (aliases): {len(report.renamed)}")
    lines += [f"  {old} -> {new}" for old, new in sorted(report.renamed.items())]
    pins = [r for r in report.changed if r[0] == "engines" and r[2] == "image"]
    statuses = [r for r in report.changed if r[0] == "profiles" and r[2] == "status"]
    lines.append(f"pin changes: {len(pins)}")
    lines += [f"  {rid}: {engine_pin_tag('docker_image', str(o)) if o else o} -> "
              f"{engine_pin_tag('docker_image', str(t))}" for _s, rid, _f, o, t in pins]
    lines.append(f"status changes: {len(statuses)}")
    lines += [f"  {rid}: {ours} -> {theirs}" for _s, rid, _f, ours, theirs in statuses]
    other = [r for r in report.changed if r not in pins and r not in statuses]
    lines.append(f"other field changes: {len(other)}")
    for s, rid, f, o, t in other:
        if f in ("runtime", "hf_config", "vram_sizing", "offload_residency", "sampler_profiles"):
            lines.append(f"  {s}[{rid}].{f}: changed (see the diff)")
        else:
            lines.append(f"  {s}[{rid}].{f}: {json.dumps(o)} -> {json.dumps(t)}")
    lines.append(f"kept by corrections: {len(report.protected)}")
    lines += [f"  {s}[{rid}].{f}: catalog {json.dumps(o)[:80]}, upstream {json.dumps(t)[:80]}"
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
    up = uc.read_upstream(source)
    docs, texts = read_catalog(catalog)
    kv = set(docs["kv_formats.yaml"]["kv_formats"])
    view = upstream_view(up, docs)
    report = compare(view, docs)
    report.commit = up.commit
    new = propose(view, docs, report, up, kv)
    after = {}
    for name in texts:
        same = json.loads(json.dumps(docs[name], default=str)) == new.get(name, docs[name])
        after[name] = texts[name] if same or name not in new else _dump(texts[name], new[name])
    return Sync(report, texts, after)


def _engine_release_check() -> None:
    # the tool reads pins the way the loader does; a renamed helper must fail here, loudly
    assert engine_release("vllm", "docker_image", "vllm/vllm-openai:v0.1.0") == "0.1.0"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--from", dest="source", type=Path, required=True,
                    help="club-3090 checkout or reference snapshot folder")
    ap.add_argument("--catalog", type=Path, default=DEFAULT_CATALOG, help="catalog data folder")
    ap.add_argument("--diff", type=Path, help="write the proposed change as a unified diff here")
    ap.add_argument("--write", action="store_true", help="apply the proposed change to the catalog folder")
    ap.add_argument("--json", action="store_true", help="print the report as JSON")
    try:
        args = ap.parse_args(argv)
    except SystemExit as exc:
        return EXIT_USAGE if exc.code else EXIT_SAME
    _engine_release_check()
    try:
        sync = run(args.source, args.catalog)
    except Refused as exc:
        print(f"sync refused: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    report = sync.report
    if args.diff is not None:
        _atomic_write(args.diff, sync.diff)
    if args.write:
        for name, text in sync.after.items():
            if text != sync.before[name]:
                _atomic_write(args.catalog / name, text)
    if args.json:
        print(json.dumps(report.to_json(), indent=2, sort_keys=True, default=str))
    else:
        sys.stdout.write(summary(report))
    return EXIT_SAME if report.empty else EXIT_CHANGED


if __name__ == "__main__":
    sys.exit(main())
