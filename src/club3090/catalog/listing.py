"""Rows for ``club3090 profiles``: every profile, whether it is emittable, and (given a rig)
whether the rig has enough GPUs and a high enough SM. Memory fit is not judged here."""

from __future__ import annotations

from typing import Any

from .model import NOT_EMITTABLE_TEXT, Catalog


def _num(value: Any) -> Any:
    return str(value) if value is not None else None


def rig_check(catalog: Catalog, key: str, gpus: Any) -> dict[str, Any]:
    """GPU count and SM of the first tp*pp GPUs of ``gpus`` (a ``gpus.GpuSet``) against a profile."""
    profile = catalog.profiles[key]
    needed = profile.tp * profile.pp
    enough = gpus.count >= needed
    used = gpus.subset(needed)
    need_sm = catalog.need_sm(key)
    _kv_min, kv_max = catalog.kv_sm_window(profile.kv_format)
    if used.sm is None:
        sm_ok = None
    else:
        sm_ok = used.sm >= need_sm and (kv_max is None or used.sm <= kv_max)
    problems = []
    if not enough:
        problems.append(f"needs {needed} GPUs, rig has {gpus.count}")
    if sm_ok is False:
        problems.append(f"needs SM {need_sm}" + (f"..{kv_max}" if kv_max is not None else "")
                        + f", rig has {used.sm}")
    if sm_ok is None:
        problems.append("SM unknown (give a GPU name, not a size)")
    return {
        "gpus_needed": needed,
        "enough_gpus": enough,
        "need_sm": str(need_sm),
        "max_sm": _num(kv_max),
        "sm": _num(used.sm),
        "sm_ok": sm_ok,
        "ok": False if (not enough or sm_ok is False) else sm_ok,
        "why_not": "; ".join(problems) or None,
    }


def profile_rows(catalog: Catalog, gpus: Any = None) -> list[dict[str, Any]]:
    golden = {key for row in catalog.arches.values() for key in row.golden_triple_profiles}
    rows = []
    for key in sorted(catalog.profiles):
        p = catalog.profiles[key]
        engine = catalog.engines[p.engine]
        emittable, reason = catalog.emittable(key)
        row: dict[str, Any] = {
            "key": key,
            "model": p.model,
            "weights_variant": p.weights_variant,
            "variant": p.weights_variant,
            "workload": p.workload,
            "engine": p.engine,
            "engine_type": engine.type,
            "engine_pin": engine.pin,
            "drafter": p.drafter,
            "kv_format": p.kv_format,
            "tp": p.tp,
            "pp": p.pp,
            "max_model_len": p.max_model_len,
            "max_num_seqs": p.max_num_seqs,
            "mem_util": p.mem_util,
            "port": p.port,
            "status": p.status,
            "golden": key in golden,        # in its arch row's golden triple: replayed byte for byte
            "required_sm": _num(p.required_sm),
            "need_sm": str(catalog.need_sm(key)),
            "reference_gpu": p.reference_gpu,
            "emittable": emittable,
            "not_emittable_reason": reason,
            "not_emittable_text": NOT_EMITTABLE_TEXT[reason][0] if reason else None,
            "archived": p.archived,
            "engine_withdrawn": engine.withdrawn,
            "replaced_by": p.replaced_by,
            "aliases": list(p.aliases),
            "upstream": {   # how upstream serves it (registry fields the fit does not price)
                "act_format": p.act_format, "act8_capable": p.act8_capable, "offload": p.offload,
                "moe_cache": p.moe_cache, "host_ram_gb": p.host_ram_gb, "chat_template": p.chat_template,
                "requires_homogeneous_arch": p.requires_homogeneous_arch,
                "weights_companions": list(p.weights_companions), "gateway": p.gateway,
                "serve_aliases": list(p.serve_aliases), "sampler_profiles": dict(p.sampler_profiles),
                "default_arch_allow": [str(s) for s in p.default_arch_allow], "category": p.category,
                "gpu_assignment_mode": p.gpu_assignment_mode,
                "recommended_engine_features": list(p.recommended_engine_features),
            },
        }
        if gpus is not None:
            row["rig"] = rig_check(catalog, key, gpus)
        rows.append(row)
    return rows


def emittability(catalog: Catalog, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """How many vLLM profiles ``club3090 compose`` replays, and why each other one is refused
    (``rows`` as ``profile_rows`` gives them, with the compose verdict applied)."""
    vllm = [r for r in rows if r["engine_type"] == "vllm"]
    refused = {r["key"]: {"reason": r["not_emittable_reason"], "text": r["not_emittable_text"],
                          "replaced_by": r["replaced_by"]} for r in vllm if not r["emittable"]}
    counts: dict[str, int] = {}
    for r in refused.values():
        token = str(r["reason"])
        counts[token] = counts.get(token, 0) + 1
    return {"vllm_profiles": len(vllm), "emittable": len(vllm) - len(refused),
            "refusals_by_reason": dict(sorted(counts.items())), "refused": refused,
            "upstream_commit": catalog.upstream_commit}
