"""Strict loader for the shipped catalog YAML.

Every file is ``{schema_version: 1, <section>: ..., corrections: [...]}``; the schema (files,
records, fields, checks, descriptions) is ``club3090.catalog.schema``. The loader checks keys
(unknown keys get a closest-key hint), required keys, types, enumerations and every
cross-reference, collects all problems and raises one ``CatalogError`` listing them with file and
key path.
"""

from __future__ import annotations

import difflib
import hashlib
import re
from collections.abc import Callable, Mapping
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

from club3090.errors import CatalogError, Problem

from . import model as m
from .schema import (
    ANCHOR_SELF_DESCRIBING,
    ANCHOR_SPEC,
    ARCH_NESTED,
    ARCH_SPEC,
    CORRECTION_SPEC,
    DRAFTER_SPEC,
    ENGINE_NESTED,
    ENGINE_SPEC,
    FILES,
    GAP_SPEC,
    GPU_SPEC,
    KV_SPEC,
    MODEL_NESTED,
    MODEL_SPEC,
    OVERLAY_SPEC,
    PATCH_NESTED,
    PATCH_SPEC,
    PIN_SPEC,
    PROFILE_NESTED,
    PROFILE_SPEC,
    RETIRED_KEYS,
    RUNTIME_SPEC,
    SCHEMA_BY_FILE,
    SUPPORTED_SCHEMA_VERSIONS,
    UPSTREAM_FILE_SPEC,
    VARIANT_SPEC,
    Bad,
    Nested,
    Spec,
    describe,
    engine_pin_tag,
    engine_release,
    t_id,
)

SECTION = {name: name.rsplit(".", 1)[0] for name in FILES}
ENVELOPE_KEYS = ("schema_version", "corrections")


# ----------------------------------------------------------------------------- collector

class _Collector:
    def __init__(self) -> None:
        self.problems: list[Problem] = []
        self.file = ""

    def add(self, path: str, message: str, file: str | None = None) -> None:
        self.problems.append(Problem(file or self.file, path, message))

    def record(self, data: Any, path: str, spec: Spec,
               nested: Mapping[str, Nested] | None = None) -> dict[str, Any] | None:
        """Check one mapping against ``spec``; keys in ``nested`` are passed through raw (the
        builder checks them)."""
        nested = nested or {}
        if not isinstance(data, dict):
            self.add(path, f"expected a mapping, got {describe(data)}")
            return None
        out: dict[str, Any] = {}
        ok = True
        known = list(spec) + list(nested)
        for key in data:
            if key not in known:
                close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.6)
                hint = (f"; no longer a catalog field: {RETIRED_KEYS[key]}" if key in RETIRED_KEYS
                        else f"; did you mean '{close[0]}'?" if close else f"; allowed: {', '.join(known)}")
                self.add(f"{path}.{key}", "unknown key" + hint)
                ok = False
        for key, f in spec.items():
            if key not in data:
                if f.required:
                    self.add(f"{path}.{key}", "missing required key")
                    ok = False
                out[key] = f.default
                continue
            try:
                out[key] = f.check(data[key])
            except Bad as exc:
                self.add(f"{path}.{key}", str(exc))
                out[key] = f.default
                ok = False
        for key in nested:
            out[key] = data.get(key)
        out["__ok__"] = ok
        return out

    def section(self, doc: Any, name: str, kind: type = dict[str, Any]) -> Any:
        """Check the file envelope; return the section body (a dict or list) or an empty one."""
        section = SECTION[name]
        if not isinstance(doc, dict):
            self.add("<file>", "expected a mapping with schema_version and " + section)
            return kind()
        for key in doc:
            if key not in (*ENVELOPE_KEYS, section):
                close = difflib.get_close_matches(str(key), [*ENVELOPE_KEYS, section], n=1)
                hint = f"; did you mean '{close[0]}'?" if close else ""
                self.add(str(key), "unknown key" + hint)
        version = doc.get("schema_version")
        if version not in SUPPORTED_SCHEMA_VERSIONS:
            self.add("schema_version", f"unsupported schema version {describe(version)}; "
                                       f"this club3090 reads {SUPPORTED_SCHEMA_VERSIONS}")
        body = doc.get(section)
        if body is None:
            self.add(section, "missing required key")
            return kind()
        if not isinstance(body, kind):
            self.add(section, f"expected a {'mapping' if kind is dict else 'list'}")
            return kind()
        return body

    def entries(self, body: dict[str, Any], section: str) -> list[tuple[str, str, Any]]:
        out = []
        for key, value in body.items():
            path = f"{section}[{key!r}]"
            try:
                t_id(key)
            except Bad as exc:
                self.add(path, f"bad id: {exc}")
                continue
            out.append((key, path, value))
        return out


# ----------------------------------------------------------------------------- builders

def _build_plain(section: str, spec: Any, cls: type) -> Callable[[_Collector, dict[str, Any]], dict[str, Any]]:
    """A builder for sections whose records need no checks beyond their spec (gpus, kv_formats)."""
    def build(c: _Collector, body: dict[str, Any]) -> dict[str, Any]:
        out = {}
        for rid, path, raw in c.entries(body, section):
            rec = c.record(raw, path, spec)
            if rec and rec.pop("__ok__"):
                out[rid] = cls(id=rid, **rec)
        return out
    return build


_build_gpus = _build_plain("gpus", GPU_SPEC, m.Gpu)
_build_kv = _build_plain("kv_formats", KV_SPEC, m.KvFormat)
_build_upstream_files = _build_plain("upstream_files", UPSTREAM_FILE_SPEC, m.UpstreamFile)


def _build_engines(c: _Collector, body: dict[str, Any]) -> dict[str, m.Engine]:
    out = {}
    for eid, path, raw in c.entries(body, "engines"):
        rec = c.record(raw, path, ENGINE_SPEC, nested=ENGINE_NESTED)
        if not rec:
            continue
        ok = rec.pop("__ok__")
        overlays = []
        raw_overlays = rec.pop("vendored_overlays") or []
        if not isinstance(raw_overlays, list):
            c.add(f"{path}.vendored_overlays", "expected a list")
            ok = False
            raw_overlays = []
        for i, item in enumerate(raw_overlays):
            o = c.record(item, f"{path}.vendored_overlays[{i}]", OVERLAY_SPEC)
            if o and o.pop("__ok__"):
                overlays.append(m.VendoredOverlay(**o))
            else:
                ok = False
        if ok:
            pin = f"{eid}@{engine_pin_tag(rec['install_method'], rec['image'])}"
            release = engine_release(rec["type"], rec["install_method"], rec["image"])
            out[eid] = m.Engine(id=eid, vendored_overlays=tuple(overlays), pin=pin,
                                vllm_version=release, **rec)
    return out


def _build_drafters(c: _Collector, body: dict[str, Any]) -> dict[str, m.Drafter]:
    out = {}
    for did, path, raw in c.entries(body, "drafters"):
        rec = c.record(raw, path, DRAFTER_SPEC)
        if not rec:
            continue
        ok = rec.pop("__ok__")
        if ok and rec["n_default"] > rec["n_max"]:
            c.add(f"{path}.n_default", f"n_default {rec['n_default']} exceeds n_max {rec['n_max']}")
            ok = False
        template = rec["speculative_config_template"]
        if ok and template is not None and "{N}" not in template:
            c.add(f"{path}.speculative_config_template", "expected a '{N}' placeholder")
            ok = False
        if ok:
            out[did] = m.Drafter(id=did, **rec)
    return out


def _build_models(c: _Collector, body: dict[str, Any]) -> dict[str, m.Model]:
    out = {}
    for mid, path, raw in c.entries(body, "models"):
        rec = c.record(raw, path, MODEL_SPEC, nested=MODEL_NESTED)
        if not rec:
            continue
        ok = rec.pop("__ok__")
        weights: dict[str, m.WeightVariant] = {}
        raw_weights = rec.pop("weights")
        if not isinstance(raw_weights, dict) or not raw_weights:
            c.add(f"{path}.weights", "expected a non-empty mapping of weight variants")
            raw_weights, ok = {}, False
        for vid, vpath, vraw in c.entries(raw_weights, f"{path}.weights"):
            v = c.record(vraw, vpath, VARIANT_SPEC)
            if v and v.pop("__ok__"):
                weights[vid] = m.WeightVariant(id=vid, **v)
            else:
                ok = False
        if rec["default_weight_variant"] and raw_weights and rec["default_weight_variant"] not in raw_weights:
            c.add(f"{path}.default_weight_variant",
                  f"names no weight variant of this model ({describe(rec['default_weight_variant'])})")
            ok = False
        derived = _config_facts(c, rec["hf_config"], f"{path}.hf_config")
        rec["serving_defaults"] = MappingProxyType(dict(rec.get("serving_defaults") or {}))
        if ok and derived is not None:
            out[mid] = m.Model(id=mid, weights=MappingProxyType(weights), **derived, **rec)
    return out


def _config_facts(c: _Collector, cfg: Any, path: str) -> dict[str, Any] | None:
    """The two facts every reader wants from a model's config.json: ``architectures[0]`` and
    ``max_position_embeddings`` (top level, else ``text_config``). The config is their only
    record; a model without them is an error."""
    if not isinstance(cfg, dict):
        return None
    archs = cfg.get("architectures")
    arch = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else ""
    if not arch:
        c.add(f"{path}.architectures", "expected a non-empty list whose first item names the class")
    raw_text = cfg.get("text_config")
    text: dict[str, Any] = raw_text if isinstance(raw_text, dict) else {}
    ctx = cfg.get("max_position_embeddings", text.get("max_position_embeddings"))
    if isinstance(ctx, bool) or not isinstance(ctx, int) or ctx < 1:
        c.add(f"{path}.max_position_embeddings", f"expected an integer >= 1 (top level or in "
                                                 f"text_config), got {describe(ctx)}")
        return None
    return {"architecture": arch, "max_ctx_supported": ctx} if arch else None


def _pins(c: _Collector, raw: Any, path: str) -> tuple[tuple[m.EnginePin, ...], bool]:
    if not isinstance(raw, list):
        c.add(path, "expected a list")
        return (), False
    pins, ok = [], True
    for i, item in enumerate(raw):
        p = c.record(item, f"{path}[{i}]", PIN_SPEC)
        if p and p.pop("__ok__"):
            if "@" not in p["pin"]:
                c.add(f"{path}[{i}].pin", f"expected '<engine-id>@<tag-or-sha>', got {describe(p['pin'])}")
                ok = False
                continue
            pins.append(m.EnginePin(**p))
        else:
            ok = False
    return tuple(pins), ok


def _build_arches(c: _Collector, body: dict[str, Any]) -> dict[str, m.ArchRow]:
    out = {}
    for arch, path, raw in c.entries(body, "arches"):
        rec = c.record(raw, path, ARCH_SPEC, nested=ARCH_NESTED)
        if not rec:
            continue
        ok = rec.pop("__ok__")
        engine_pins, ok1 = _pins(c, rec.pop("engine_pins"), f"{path}.engine_pins")
        if rec["trust_remote_code"] == "false" and not rec["trust_remote_code_evidence"]:
            c.add(f"{path}.trust_remote_code_evidence", "trust_remote_code 'false' needs evidence")
            ok = False
        if ok and ok1:
            out[arch] = m.ArchRow(arch=arch, engine_pins=engine_pins, **rec)
    return out


def _build_patches(c: _Collector, body: dict[str, Any]) -> dict[str, m.Patch]:
    out = {}
    for pid, path, raw in c.entries(body, "patches"):
        rec = c.record(raw, path, PATCH_SPEC, nested=PATCH_NESTED)
        if not rec:
            continue
        ok = rec.pop("__ok__")
        gaps = []
        raw_gaps = rec.pop("delivery_gaps")
        if raw_gaps is None:
            c.add(f"{path}.delivery_gaps", "missing required key")
            raw_gaps, ok = [], False
        if not isinstance(raw_gaps, list):
            c.add(f"{path}.delivery_gaps", "expected a list")
            raw_gaps, ok = [], False
        for i, item in enumerate(raw_gaps):
            g = c.record(item, f"{path}.delivery_gaps[{i}]", GAP_SPEC)
            if g and g.pop("__ok__"):
                gaps.append(m.DeliveryGap(**g))
            else:
                ok = False
        if ok:
            out[pid] = m.Patch(id=pid, delivery_gaps=tuple(gaps), **rec)
    return out


def _build_runtime(c: _Collector, raw: Any, path: str) -> m.ProfileRuntime | None:
    rec = c.record(raw, path, RUNTIME_SPEC)
    if not rec:
        return None
    ok = rec.pop("__ok__")
    service = rec["service"]
    if isinstance(service, dict):
        if "image" not in service:
            c.add(f"{path}.service.image", "missing required key")
            ok = False
        present = tuple(p for p in ("volumes", "entrypoint") if p in service)
        if tuple(rec["insertion_points"] or ()) != present:
            c.add(f"{path}.insertion_points",
                  f"expected {list(present)} (the insertion points present in the service)")
            ok = False
    if not ok:
        return None
    return m.ProfileRuntime(**rec)


def _build_profiles(c: _Collector, body: dict[str, Any]) -> dict[str, m.Profile]:
    out = {}
    for key, path, raw in c.entries(body, "profiles"):
        rec = c.record(raw, path, PROFILE_SPEC, nested=PROFILE_NESTED)
        if not rec:
            continue
        ok = rec.pop("__ok__")
        raw_runtime = rec.pop("runtime")
        runtime = None
        if raw_runtime is not None:
            runtime = _build_runtime(c, raw_runtime, f"{path}.runtime")
            ok = ok and runtime is not None
        elif isinstance(raw, dict) and "runtime" not in raw:
            c.add(f"{path}.runtime", "missing required key (use null when no runtime is captured)")
            ok = False
        if ok:
            out[key] = m.Profile(key=key, runtime=runtime, **rec)
    return out


def _build_anchors(c: _Collector, body: list[Any]) -> list[m.Anchor]:
    out, seen = [], set()
    for i, raw in enumerate(body):
        rec = c.record(raw, f"anchors[{i}]", ANCHOR_SPEC)
        if not rec or not rec.pop("__ok__"):
            continue
        if rec["id"] in seen:
            c.add(f"anchors[{i}].id", f"duplicate anchor id {rec['id']!r}")
            continue
        seen.add(rec["id"])
        out.append(m.Anchor(**rec))
    return out


_PATH_RE = re.compile(r"^(?P<section>[a-z_]+)\[(?P<q>['\"])(?P<id>.+?)(?P=q)\](?P<rest>.*)$")


def _build_corrections(c: _Collector, name: str, doc: Any, body: Any) -> list[m.Correction]:
    """The file's ``corrections``: each names existing records (and a field of their spec) by the
    same key paths problems use, so evidence cannot silently outlive the data it explains."""
    raw = doc.get("corrections") if isinstance(doc, dict) else None
    if raw is None:
        return []
    if not isinstance(raw, list):
        c.add("corrections", "expected a list")
        return []
    schema = SCHEMA_BY_FILE[name]
    ids = ({str(a.get("id")) for a in body if isinstance(a, dict)} if isinstance(body, list)
           else set(body))
    fields = [*schema.spec, *schema.nested]
    out = []
    for i, item in enumerate(raw):
        rec = c.record(item, f"corrections[{i}]", CORRECTION_SPEC)
        if not rec or not rec.pop("__ok__"):
            continue
        ok = True
        for j, path in enumerate(rec["paths"]):
            where = f"corrections[{i}].paths[{j}]"
            match = _PATH_RE.match(path)
            if match is None or match["section"] != schema.section:
                c.add(where, f"expected {schema.section}['<id>'] or {schema.section}['<id>'].<field>..., "
                             f"got {describe(path)}")
                ok = False
                continue
            if match["id"] not in ids:
                close = difflib.get_close_matches(match["id"], sorted(ids), n=1, cutoff=0.6)
                hint = f"; did you mean '{close[0]}'?" if close else ""
                c.add(where, f"names no record of {name}: {match['id']!r}{hint}")
                ok = False
            head = re.match(r"^\.([A-Za-z_]+)", match["rest"])
            if match["rest"] and (head is None or head.group(1) not in fields):
                close = difflib.get_close_matches(head.group(1) if head else match["rest"], fields, n=1)
                hint = f"; did you mean '{close[0]}'?" if close else ""
                c.add(where, f"names no field of a {schema.section} record: {describe(match['rest'])}{hint}")
                ok = False
        if ok:
            out.append(m.Correction(file=name, **rec))
    return out


# ----------------------------------------------------------------------------- cross-references

def _ref(c: _Collector, file: str, path: str, value: Any, known: Mapping[str, Any], what: str) -> None:
    if value is None or value in known:
        return
    close = difflib.get_close_matches(str(value), list(known), n=1, cutoff=0.6)
    hint = f"; did you mean '{close[0]}'?" if close else ""
    c.add(path, f"unknown {what} {value!r}{hint}", file=file)


def _check_anchor(c: _Collector, raw: dict[str, Any], cat: dict[str, Any], i: int, a: m.Anchor) -> None:
    f, base = "anchors.yaml", f"anchors[{i}]"
    _ref(c, f, f"{base}.profile", a.profile, raw["profiles.yaml"], "profile")
    _ref(c, f, f"{base}.gpu", a.gpu, raw["gpus.yaml"], "GPU")
    _ref(c, f, f"{base}.kv_format", a.kv_format, raw["kv_formats.yaml"], "KV format")
    _ref(c, f, f"{base}.model", a.model, raw["models.yaml"], "model")
    _ref(c, f, f"{base}.engine", a.engine, raw["engines.yaml"], "engine")
    if a.drafter != m.NO_DRAFTER:
        _ref(c, f, f"{base}.drafter", a.drafter, raw["drafters.yaml"], f"drafter (or {m.NO_DRAFTER!r})")
    profile = cat["profiles"].get(a.profile) if a.profile else None
    if a.profile is None:
        for key in ANCHOR_SELF_DESCRIBING:
            if getattr(a, key) is None:
                c.add(f"{base}.{key}", "an anchor without a profile must record it", file=f)
        if a.weights_variant is None and a.weights_bytes is None:
            c.add(f"{base}.weights_variant", "an anchor without a profile needs weights_variant or "
                  "weights_bytes", file=f)
    elif a.model is not None and profile is not None and a.model != profile.model:
        c.add(f"{base}.model", f"model {a.model!r} differs from its profile's {profile.model!r}", file=f)
    if a.weights_variant is not None and a.weights_bytes is not None:
        c.add(f"{base}.weights_bytes", "give weights_variant or weights_bytes, not both", file=f)
    model_id = a.model or (profile.model if profile is not None else None)
    model = raw["models.yaml"].get(model_id) if model_id else None
    if a.weights_variant is not None:
        if a.model is None:
            c.add(f"{base}.weights_variant", "weights_variant needs the anchor's model", file=f)
        elif isinstance(model, dict) and isinstance(model.get("weights"), dict):
            _ref(c, f, f"{base}.weights_variant", a.weights_variant, model["weights"],
                 f"weight variant of {a.model}")
    if a.tp is not None and a.gpu_count % a.tp:
        c.add(f"{base}.tp", f"tp {a.tp} does not divide gpu_count {a.gpu_count}", file=f)
    engine_id = a.engine or (profile.engine if profile is not None else None)   # what it is priced with
    engine = cat["engines"].get(engine_id) if engine_id else None
    if engine is not None and engine.type != "vllm":
        c.add(f"{base}.engine", f"anchors price vLLM start-ups; {engine_id} is {engine.type}", file=f)


def _check_model_arches(c: _Collector, cat: dict[str, Any], aliases: Mapping[str, str]) -> None:
    """``Model.architecture`` is the config's ``architectures[0]``; a model that ``compose`` can
    replay (an emittable vLLM profile) must resolve to an arch row, through ``model_slugs`` or the
    architecture name / ``config_architectures`` alias (``Catalog.arch_row_for_model``). A model
    only served otherwise may lack one: the gate then fails closed (``no-arch-row``)."""
    slugged = {slug for row in cat["arches"].values() for slug in row.model_slugs}
    for mid, mod in cat["models"].items():
        base = f"models[{mid!r}].hf_config.architectures"
        if mid in slugged or mod.architecture in cat["arches"] or mod.architecture in aliases:
            continue
        replayable = [key for key, p in cat["profiles"].items()
                      if p.model == mid and p.runtime is not None and not p.runtime.genesis_equipped
                      and getattr(cat["engines"].get(p.engine), "type", None) == "vllm"]
        if replayable:
            c.add(base, f"{mod.architecture!r} resolves to no arch row (no model_slugs entry, name or "
                        f"alias), but {', '.join(sorted(replayable))} can be replayed", file="models.yaml")


def _cross_check(c: _Collector, raw: dict[str, Any], cat: dict[str, Any]) -> None:
    models_raw = raw["models.yaml"]
    engines_raw = raw["engines.yaml"]
    kv_raw = raw["kv_formats.yaml"]
    profiles_raw = raw["profiles.yaml"]

    for eid, e in cat["engines"].items():
        for i, kv in enumerate(e.supported_kv_formats):
            _ref(c, "engines.yaml", f"engines[{eid!r}].supported_kv_formats[{i}]", kv, kv_raw, "KV format")
    for did, d in cat["drafters"].items():
        for i, mid in enumerate(d.model_compat):
            _ref(c, "drafters.yaml", f"drafters[{did!r}].model_compat[{i}]", mid, models_raw, "model")
    for arch, row in cat["arches"].items():
        base = f"arches[{arch!r}]"
        for i, pin in enumerate(row.engine_pins):
            _ref(c, "arches.yaml", f"{base}.engine_pins[{i}].pin", pin.engine, engines_raw, "engine")
        for i, pid in enumerate(row.required_patches):
            _ref(c, "arches.yaml", f"{base}.required_patches[{i}]", pid, raw["patches.yaml"], "patch")
        for i, slug in enumerate(row.model_slugs):
            _ref(c, "arches.yaml", f"{base}.model_slugs[{i}]", slug, models_raw, "model")
    aliases: dict[str, str] = {}
    for arch, row in cat["arches"].items():
        for alias in row.config_architectures:
            if alias in raw["arches.yaml"] or alias in aliases:
                c.add(f"arches[{arch!r}].config_architectures", f"alias {alias!r} is ambiguous",
                      file="arches.yaml")
            aliases[alias] = arch
    _check_model_arches(c, cat, aliases)
    for pid, p in cat["patches"].items():
        base = f"patches[{pid!r}]"
        for i, mid in enumerate(p.models):
            _ref(c, "patches.yaml", f"{base}.models[{i}]", mid, models_raw, "model")
        for i, key in enumerate(p.load_bearing_composes):
            _ref(c, "patches.yaml", f"{base}.load_bearing_composes[{i}]", key, profiles_raw, "profile")
        for i, gap in enumerate(p.delivery_gaps):
            for j, key in enumerate(gap.profiles):
                _ref(c, "patches.yaml", f"{base}.delivery_gaps[{i}].profiles[{j}]", key, profiles_raw,
                     "profile")
    for mid, model in cat["models"].items():
        for cls, key in model.serving_defaults.items():
            where = f"models[{mid!r}].serving_defaults[{cls!r}]"
            if cls not in m.GPU_COUNT_CLASSES:
                c.add(where, f"unknown GPU-count class; allowed: {', '.join(m.GPU_COUNT_CLASSES)}",
                      file="models.yaml")
                continue
            _ref(c, "models.yaml", where, key, profiles_raw, "profile")
            profile = cat["profiles"].get(key)
            if profile is not None and profile.model != mid:
                c.add(where, f"profile {key!r} serves {profile.model}, not {mid}", file="models.yaml")
    for key, p in cat["profiles"].items():
        base = f"profiles[{key!r}]"
        f = "profiles.yaml"
        _ref(c, f, f"{base}.model", p.model, models_raw, "model")
        model = models_raw.get(p.model)
        if isinstance(model, dict) and isinstance(model.get("weights"), dict):
            _ref(c, f, f"{base}.weights_variant", p.weights_variant, model["weights"],
                 f"weight variant of {p.model}")
        _ref(c, f, f"{base}.engine", p.engine, engines_raw, "engine")
        _ref(c, f, f"{base}.drafter", p.drafter, raw["drafters.yaml"], "drafter")
        _ref(c, f, f"{base}.kv_format", p.kv_format, kv_raw, "KV format")
        _ref(c, f, f"{base}.reference_gpu", p.reference_gpu, raw["gpus.yaml"], "GPU")
        kv, card = cat["kv_formats"].get(p.kv_format), cat["gpus"].get(p.reference_gpu or "")
        if kv is not None and card is not None and kv.min_sm is not None and kv.min_sm > card.sm:
            # a profile validated on a card its own KV format's floor refuses: one of the two is wrong
            c.add(f"{base}.kv_format", f"KV format {p.kv_format} needs SM {kv.min_sm}, above the SM "
                  f"{card.sm} of the profile's reference GPU {p.reference_gpu}", file=f)
        engine = cat["engines"].get(p.engine)
        if p.runtime is not None and engine is not None and engine.type != "vllm":
            c.add(f"{base}.runtime", f"a runtime capture needs a vllm engine, {p.engine} is {engine.type}",
                  file=f)
        if engine is not None and engine.type == "vllm" and p.mem_util is None:
            c.add(f"{base}.mem_util", "a vllm profile needs mem_util", file=f)
    for i, a in enumerate(cat["anchors"]):
        _check_anchor(c, raw, cat, i, a)
    names: dict[str, str] = {}
    for gid, g in cat["gpus"].items():
        for name in (gid, *g.aliases):
            norm = m.normalize_gpu_name(name)
            if names.get(norm, gid) != gid:
                c.add(f"gpus[{gid!r}].aliases", f"name {name!r} also belongs to {names[norm]!r}",
                      file="gpus.yaml")
            names[norm] = gid


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


def _parse(name: str, blob: bytes, c: _Collector) -> Any:
    import yaml
    duplicates: list[tuple[str, int]] = []
    try:
        doc = yaml.load(blob.decode("utf-8"), Loader=_strict_loader(yaml, duplicates))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "<file>"
        c.add(where, f"not valid YAML: {getattr(exc, 'problem', None) or exc}", file=name)
        return None
    for key, line in duplicates:
        c.add(f"line {line}", f"duplicate key {key!r}: a later entry would silently replace an earlier one",
              file=name)
    return doc


def _load(root: Path | None) -> m.Catalog:
    blobs = _read_files(root)
    c = _Collector()
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
    builders: dict[str, tuple[str, Callable[[_Collector, Any], Any]]] = {
        "gpus.yaml": ("gpus", _build_gpus), "kv_formats.yaml": ("kv_formats", _build_kv),
        "engines.yaml": ("engines", _build_engines), "drafters.yaml": ("drafters", _build_drafters),
        "models.yaml": ("models", _build_models), "arches.yaml": ("arches", _build_arches),
        "patches.yaml": ("patches", _build_patches), "profiles.yaml": ("profiles", _build_profiles),
        "anchors.yaml": ("anchors", _build_anchors),
        "upstream_files.yaml": ("upstream_files", _build_upstream_files),
    }
    for name, (attr, build) in builders.items():
        c.file = name
        built[attr] = build(c, bodies[name])
    corrections = []
    for name in FILES:
        c.file = name
        corrections += _build_corrections(c, name, docs[name], bodies[name])
    _cross_check(c, bodies, built)
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
