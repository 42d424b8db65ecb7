"""The section builders: one file's checked records turned into the catalog's frozen records.

Each builder takes the collector and a section body, checks every record against its spec
(and the nested records the spec leaves raw: overlays, weight variants, engine pins, delivery
gaps, runtime captures), applies the rules that span one record's fields, and returns the
records that passed. ``BUILDERS`` maps each file to its catalog attribute and builder.
"""

from __future__ import annotations

from collections.abc import Callable
from types import MappingProxyType
from typing import Any

from . import model as m
from .collector import Collector
from .schema import (
    ANCHOR_SPEC,
    APPLIES_SPEC,
    ARCH_NESTED,
    ARCH_SPEC,
    CONSTRAINT_NESTED,
    CONSTRAINT_SPEC,
    DRAFTER_SPEC,
    ENGINE_NESTED,
    ENGINE_SPEC,
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
    RUNTIME_SPEC,
    UPSTREAM_FILE_SPEC,
    UPSTREAM_SPEC,
    VARIANT_SPEC,
    describe,
    engine_pin_tag,
    engine_release,
)

# ----------------------------------------------------------------------------- builders

# (collector, record key, its path, the raw record, the checked fields, whether they passed) ->
# the frozen record, or None when a rule spanning its fields failed
Finish = Callable[[Collector, str, str, Any, dict[str, Any], bool], Any]


def _section(section: str, spec: Any, finish: Finish, nested: Any = None) -> Callable[[Collector, dict[str, Any]], dict[str, Any]]:
    """A builder: every record of ``section`` checked against ``spec``, then ``finish`` applies the
    rules that span its fields (and builds the nested records ``nested`` leaves raw)."""
    def build(c: Collector, body: dict[str, Any]) -> dict[str, Any]:
        out = {}
        for key, path, raw in c.entries(body, section):
            rec = c.record(raw, path, spec, nested=nested)
            if not rec:
                continue
            ok = rec.pop("__ok__")
            value = finish(c, key, path, raw, rec, ok)
            if value is not None:
                out[key] = value
        return out
    return build


def _plain(cls: type) -> Finish:
    """Records that need no checks beyond their spec (gpus, kv_formats, upstream files)."""
    return lambda _c, key, _path, _raw, rec, ok: cls(id=key, **rec) if ok else None


def _records(c: Collector, items: Any, path: str, spec: Any, make: Callable[..., Any],
             check: Callable[[dict[str, Any], str], bool] | None = None) -> tuple[tuple[Any, ...], bool]:
    """The nested records of a list (overlays, engine pins, delivery gaps): (the built ones, all passed)."""
    built, ok = [], True
    for i, item in enumerate(items):
        rec = c.record(item, f"{path}[{i}]", spec)
        if rec and rec.pop("__ok__") and (check is None or check(rec, f"{path}[{i}]")):
            built.append(make(**rec))
        else:
            ok = False
    return tuple(built), ok


def _engine(c: Collector, eid: str, path: str, _raw: Any, rec: dict[str, Any], ok: bool) -> m.Engine | None:
    raw_overlays = rec.pop("vendored_overlays") or []
    if not isinstance(raw_overlays, list):
        c.add(f"{path}.vendored_overlays", "expected a list")
        ok = False
        raw_overlays = []
    overlays, ok_overlays = _records(c, raw_overlays, f"{path}.vendored_overlays", OVERLAY_SPEC, m.VendoredOverlay)
    if not (ok and ok_overlays):
        return None
    pin = f"{eid}@{engine_pin_tag(rec['install_method'], rec['image'])}"
    release = engine_release(rec["type"], rec["install_method"], rec["image"])
    return m.Engine(id=eid, vendored_overlays=overlays, pin=pin, vllm_version=release, **rec)


def _drafter(c: Collector, did: str, path: str, _raw: Any, rec: dict[str, Any], ok: bool) -> m.Drafter | None:
    if ok and rec["n_default"] > rec["n_max"]:
        c.add(f"{path}.n_default", f"n_default {rec['n_default']} exceeds n_max {rec['n_max']}")
        ok = False
    template = rec["speculative_config_template"]
    if ok and template is not None and "{N}" not in template:
        c.add(f"{path}.speculative_config_template", "expected a '{N}' placeholder")
        ok = False
    return m.Drafter(id=did, **rec) if ok else None


def _model(c: Collector, mid: str, path: str, _raw: Any, rec: dict[str, Any], ok: bool) -> m.Model | None:
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
    rec["engine_defaults"] = MappingProxyType({fam: MappingProxyType(dict(rows)) for fam, rows in
                                               (rec.get("engine_defaults") or {}).items()})
    if ok and derived is not None:
        return m.Model(id=mid, weights=MappingProxyType(weights), **derived, **rec)
    return None


def _config_facts(c: Collector, cfg: Any, path: str) -> dict[str, Any] | None:
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


def _pin_named(c: Collector) -> Callable[[dict[str, Any], str], bool]:
    def check(p: dict[str, Any], path: str) -> bool:
        if "@" not in p["pin"]:
            c.add(f"{path}.pin", f"expected '<engine-id>@<tag-or-sha>', got {describe(p['pin'])}")
            return False
        return True
    return check


def _arch(c: Collector, arch: str, path: str, _raw: Any, rec: dict[str, Any], ok: bool) -> m.ArchRow | None:
    raw_pins = rec.pop("engine_pins")
    if isinstance(raw_pins, list):
        engine_pins, ok_pins = _records(c, raw_pins, f"{path}.engine_pins", PIN_SPEC, m.EnginePin, _pin_named(c))
    else:
        c.add(f"{path}.engine_pins", "expected a list")
        engine_pins, ok_pins = (), False
    constraints, ok_constraints = _constraints(c, rec.pop("kernel_constraints"), f"{path}.kernel_constraints")
    if rec["trust_remote_code"] == "false" and not rec["trust_remote_code_evidence"]:
        c.add(f"{path}.trust_remote_code_evidence", "trust_remote_code 'false' needs evidence")
        ok = False
    return (m.ArchRow(arch=arch, engine_pins=engine_pins, kernel_constraints=constraints, **rec)
            if ok and ok_pins and ok_constraints else None)


def _constraints(c: Collector, raw: Any, path: str) -> tuple[tuple[m.KernelConstraint, ...], bool]:
    """An arch row's kernel constraints: each ``{text, kind, applies_when}`` (schema 2)."""
    if raw is None:
        return (), True
    if not isinstance(raw, list):
        c.add(path, "expected a list")
        return (), False
    built, ok = [], True
    for i, item in enumerate(raw):
        where = f"{path}[{i}]"
        if isinstance(item, str):
            c.add(where, "expected a mapping {text, kind, applies_when}; a prose string is schema 1")
            ok = False
            continue
        rec = c.record(item, where, CONSTRAINT_SPEC, nested=CONSTRAINT_NESTED)
        when = c.record(rec.pop("applies_when") or {}, f"{where}.applies_when", APPLIES_SPEC) if rec else None
        if not (rec and rec.pop("__ok__") and when and when.pop("__ok__")):
            ok = False
            continue
        built.append(m.KernelConstraint(applies_when=m.AppliesWhen(**when), **rec))
    return tuple(built), ok


def _patch(c: Collector, pid: str, path: str, _raw: Any, rec: dict[str, Any], ok: bool) -> m.Patch | None:
    raw_gaps = rec.pop("delivery_gaps")
    if raw_gaps is None:
        c.add(f"{path}.delivery_gaps", "missing required key")
        raw_gaps, ok = [], False
    if not isinstance(raw_gaps, list):
        c.add(f"{path}.delivery_gaps", "expected a list")
        raw_gaps, ok = [], False
    gaps, ok_gaps = _records(c, raw_gaps, f"{path}.delivery_gaps", GAP_SPEC, m.DeliveryGap)
    return m.Patch(id=pid, delivery_gaps=gaps, **rec) if ok and ok_gaps else None


def _build_runtime(c: Collector, raw: Any, path: str) -> m.ProfileRuntime | None:
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


def _profile(c: Collector, key: str, path: str, raw: Any, rec: dict[str, Any], ok: bool) -> m.Profile | None:
    raw_runtime = rec.pop("runtime")
    runtime = None
    if raw_runtime is not None:
        runtime = _build_runtime(c, raw_runtime, f"{path}.runtime")
        ok = ok and runtime is not None
    elif isinstance(raw, dict) and "runtime" not in raw:
        c.add(f"{path}.runtime", "missing required key (use null when no runtime is captured)")
        ok = False
    return m.Profile(key=key, runtime=runtime, **rec) if ok else None


_build_gpus = _section("gpus", GPU_SPEC, _plain(m.Gpu))
_build_kv = _section("kv_formats", KV_SPEC, _plain(m.KvFormat))
_build_upstream_files = _section("upstream_files", UPSTREAM_FILE_SPEC, _plain(m.UpstreamFile))
_build_upstream = _section("upstream", UPSTREAM_SPEC, _plain(m.Upstream))
_build_engines = _section("engines", ENGINE_SPEC, _engine, ENGINE_NESTED)
_build_drafters = _section("drafters", DRAFTER_SPEC, _drafter)
_build_models = _section("models", MODEL_SPEC, _model, MODEL_NESTED)
_build_arches = _section("arches", ARCH_SPEC, _arch, ARCH_NESTED)
_build_patches = _section("patches", PATCH_SPEC, _patch, PATCH_NESTED)
_build_profiles = _section("profiles", PROFILE_SPEC, _profile, PROFILE_NESTED)


def _build_anchors(c: Collector, body: list[Any]) -> list[m.Anchor]:
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


# file -> (catalog attribute, builder), in load order
BUILDERS: dict[str, tuple[str, Callable[[Collector, Any], Any]]] = {
    "gpus.yaml": ("gpus", _build_gpus), "kv_formats.yaml": ("kv_formats", _build_kv),
    "engines.yaml": ("engines", _build_engines), "drafters.yaml": ("drafters", _build_drafters),
    "models.yaml": ("models", _build_models), "arches.yaml": ("arches", _build_arches),
    "patches.yaml": ("patches", _build_patches), "profiles.yaml": ("profiles", _build_profiles),
    "anchors.yaml": ("anchors", _build_anchors),
    "upstream_files.yaml": ("upstream_files", _build_upstream_files),
    "upstream.yaml": ("upstream", _build_upstream),
}
