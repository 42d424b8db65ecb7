"""Cross-reference resolution: every id one catalog file names must exist in the file it names.

Runs after the section builders over the built records (and the raw bodies, so a reference to a
record that failed its own checks is not reported twice): engines' KV formats, drafters' models,
arch rows' pins, patches and slugs, config-architecture aliases, patches' models and profiles,
serving defaults, profiles' references and SM floors, anchors, and GPU name collisions.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from . import model as m
from .collector import Collector
from .schema import ANCHOR_SELF_DESCRIBING

# ----------------------------------------------------------------------------- cross-references

def _ref(c: Collector, file: str, path: str, value: Any, known: Mapping[str, Any], what: str) -> None:
    if value is None or value in known:
        return
    close = difflib.get_close_matches(str(value), list(known), n=1, cutoff=0.6)
    hint = f"; did you mean '{close[0]}'?" if close else ""
    c.add(path, f"unknown {what} {value!r}{hint}", file=file)


def _check_anchor(c: Collector, raw: dict[str, Any], cat: dict[str, Any], i: int, a: m.Anchor) -> None:
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


def _check_arch_refs(c: Collector, raw: dict[str, Any], cat: dict[str, Any]) -> None:
    """An arch row's engine pins, patches, models and its constraints' KV formats exist."""
    for arch, row in cat["arches"].items():
        base = f"arches[{arch!r}]"
        for i, pin in enumerate(row.engine_pins):
            _ref(c, "arches.yaml", f"{base}.engine_pins[{i}].pin", pin.engine, raw["engines.yaml"], "engine")
        for i, pid in enumerate(row.required_patches):
            _ref(c, "arches.yaml", f"{base}.required_patches[{i}]", pid, raw["patches.yaml"], "patch")
        for i, slug in enumerate(row.model_slugs):
            _ref(c, "arches.yaml", f"{base}.model_slugs[{i}]", slug, raw["models.yaml"], "model")
        for i, key in enumerate(row.golden_triple_profiles):
            where = f"{base}.golden_triple_profiles[{i}]"
            _ref(c, "arches.yaml", where, key, raw["profiles.yaml"], "profile")
            model = cat["profiles"][key].model if key in cat["profiles"] else None
            if model is not None and model not in row.model_slugs:
                c.add(where, f"profile {key!r} serves {model!r}, not a model of this row", file="arches.yaml")
        for i, kc in enumerate(row.kernel_constraints):
            for j, kv in enumerate(kc.applies_when.kv_formats):
                _ref(c, "arches.yaml", f"{base}.kernel_constraints[{i}].applies_when.kv_formats[{j}]", kv,
                     raw["kv_formats.yaml"], "KV format")


def _check_model_arches(c: Collector, cat: dict[str, Any], aliases: Mapping[str, str]) -> None:
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


def _check_successors(c: Collector, raw: dict[str, Any], cat: dict[str, Any]) -> None:
    """``replaced_by`` names a live profile; an alias names no profile and only one."""
    owners: dict[str, str] = {}
    for key, p in cat["profiles"].items():
        base = f"profiles[{key!r}]"
        if p.replaced_by is not None:
            _ref(c, "profiles.yaml", f"{base}.replaced_by", p.replaced_by, raw["profiles.yaml"], "profile")
            succ = cat["profiles"].get(p.replaced_by)
            if succ is not None and (succ.archived or p.replaced_by == key):
                c.add(f"{base}.replaced_by", f"{p.replaced_by!r} is not a current profile", file="profiles.yaml")
        for alias in p.aliases:
            if alias in raw["profiles.yaml"] or alias in owners:
                c.add(f"{base}.aliases", f"alias {alias!r} is also "
                      f"{'a profile' if alias in raw['profiles.yaml'] else 'an alias of ' + owners[alias]}",
                      file="profiles.yaml")
            owners[alias] = key
    for name, up in cat["upstream"].items():
        for i, mid in enumerate(up.recommended_default_models):
            _ref(c, "upstream.yaml", f"upstream[{name!r}].recommended_default_models[{i}]", mid,
                 cat["models"], "model")
    for gid, g in cat["gpus"].items():
        for intent, kv in g.kv_format_default.items():
            _ref(c, "gpus.yaml", f"gpus[{gid!r}].kv_format_default[{intent!r}]", kv, cat["kv_formats"],
                 "KV format")


def cross_check(c: Collector, raw: dict[str, Any], cat: dict[str, Any]) -> None:
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
    _check_arch_refs(c, raw, cat)
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
        if engine is not None and engine.type == "vllm" and p.mem_util is None:
            c.add(f"{base}.mem_util", "a vllm profile needs mem_util", file=f)
    _check_successors(c, raw, cat)
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
