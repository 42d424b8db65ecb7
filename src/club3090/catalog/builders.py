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
    ARCH_NESTED,
    ARCH_SPEC,
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

def _build_plain(section: str, spec: Any, cls: type) -> Callable[[Collector, dict[str, Any]], dict[str, Any]]:
    """A builder for sections whose records need no checks beyond their spec (gpus, kv_formats)."""
    def build(c: Collector, body: dict[str, Any]) -> dict[str, Any]:
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
_build_upstream = _build_plain("upstream", UPSTREAM_SPEC, m.Upstream)


def _build_engines(c: Collector, body: dict[str, Any]) -> dict[str, m.Engine]:
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


def _build_drafters(c: Collector, body: dict[str, Any]) -> dict[str, m.Drafter]:
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


def _build_models(c: Collector, body: dict[str, Any]) -> dict[str, m.Model]:
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
        rec["engine_defaults"] = MappingProxyType({fam: MappingProxyType(dict(rows)) for fam, rows in
                                                   (rec.get("engine_defaults") or {}).items()})
        if ok and derived is not None:
            out[mid] = m.Model(id=mid, weights=MappingProxyType(weights), **derived, **rec)
    return out


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


def _pins(c: Collector, raw: Any, path: str) -> tuple[tuple[m.EnginePin, ...], bool]:
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


def _build_arches(c: Collector, body: dict[str, Any]) -> dict[str, m.ArchRow]:
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


def _build_patches(c: Collector, body: dict[str, Any]) -> dict[str, m.Patch]:
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


def _build_profiles(c: Collector, body: dict[str, Any]) -> dict[str, m.Profile]:
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
