"""Read an upstream club-3090 checkout or snapshot and map its data into the catalog's records.

Used by ``tools/sync_upstream.py``. Every upstream key is checked against :data:`KNOWN_KEYS`;
an unknown one is refused (:class:`Refused`, naming the file and key) rather than guessed at.
The mapping functions return catalog records (the YAML shapes of ``src/club3090/catalog/data``)
holding the fields upstream owns; the fields only the catalog has (corrections, anchors,
evidence, measured sizes) are never produced here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from club3090.errors import InterpolationError
from club3090.interpolate import interpolate

_SAFE = getattr(yaml, "CSafeLoader", yaml.SafeLoader)       # both are the safe loader
# A YAML document expands its aliases when anything walks it (a copy, a dump): nine anchors of ten
# aliases each are a billion nodes ("billion laughs"). Upstream's files are a few thousand nodes.
MAX_YAML_NODES = 1_000_000
MAX_YAML_BYTES = 16 * 1024 * 1024
GB = 10 ** 9
REFERENCE_GPU = "rtx-3090"
SUPPORTED_UPSTREAM_SCHEMA = (1,)
UPSTREAM_NAME = "club-3090"
UPSTREAM_REPO = "noonghunna/club-3090"

# Every key upstream's files may carry (both reference snapshots), per kind.
KNOWN_KEYS: Mapping[str, frozenset[str]] = {
    "registry_top": frozenset({"schema", "entries", "defaults", "engine_preference",
                               "recommended_default_models"}),
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
    "arches": frozenset({"arch", "family", "engine_pin", "required_patches", "valid_tp",
                         "requires_trust_remote_code", "requires_trust_remote_code_evidence",
                         "kernel_constraints", "confidence", "status", "notes"}),
}

# Upstream model files record a family, not the config.json facts every family shares: the class
# its checkpoints declare, the vocabulary and whether the output head shares the embedding. From
# the model files' own notes (Qwen3.8 "5120/248320", Inkling "vocab 201,024"), the catalog's Qwen
# 3.6 configs, and the base models' published configs (Qwen2.5-Coder-3B for the `dense` VibeThinker,
# Nemotron-H, DeepSeek-V3's tokenizer for V4).
FAMILY_FACTS: Mapping[str, tuple[str, int, bool]] = {
    "qwen3-next-hybrid": ("Qwen3_5ForConditionalGeneration", 248320, False),
    "qwen35-dense": ("Qwen3_5ForConditionalGeneration", 248320, False),
    "qwen3-next-moe": ("Qwen3_5MoeForConditionalGeneration", 248320, False),
    "nemotron-h-puzzle-moe": ("NemotronHPuzzleForCausalLM", 131072, False),
    "deepseek4-moe": ("DeepseekV4ForCausalLM", 129280, False),
    "inkling-moe": ("InklingForCausalLM", 201024, False),
    "dense": ("Qwen2ForCausalLM", 151936, True),
}
# vLLM ``quantization`` of each upstream weight format (None: unquantized)
QUANTIZATION: Mapping[str, str | None] = {"autoround": "auto-round", "safetensors": None, "bf16": None,
                                          "fp16": None}
GENESIS_RE = re.compile(r"_genesis|GENESIS_PIN|GENESIS_ENABLE")
# credentials a shipped compose must only reference (``${HF_TOKEN:-}``), never hold
_SECRET_NAME = re.compile(r"(?i)(^|_)(TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|ACCESS_KEY)$")
_SECRET_FLAGS = ("--api-key", "--hf-token", "--api-key-file")
_HF_TOKEN = re.compile(r"(?<![A-Za-z0-9])hf_[A-Za-z0-9]{30,}")
# registry fields the catalog stores under its own name (vLLM's flag names)
DEFAULTS_NEW_PROFILE_FIELDS: Mapping[str, Any] = {
    "act_format": "16bit", "act8_capable": False, "offload": None, "moe_cache": False,
    "host_ram_gb": None, "chat_template": "native", "requires_homogeneous_arch": False,
    "weights_companions": [], "gateway": False, "serve_aliases": [], "sampler_profiles": {},
    "default_arch_allow": [], "category": None, "gpu_assignment_mode": "contiguous",
    "recommended_engine_features": [],
}
DEFAULTS_NEW_GPU_FIELDS: Mapping[str, Any] = {
    "mem_util_safe": None, "kv_format_default": {}, "power_cap_w_max": None,
    "power_cap_w_optimal": None, "power_cap_w_prefill": None, "driver_min": None, "cudagraph": None,
}


class Refused(Exception):
    """The upstream data cannot be read as this tool understands it."""

    def __init__(self, file: str, key: str, message: str) -> None:
        super().__init__(f"{file}: {key}: {message}")


# --------------------------------------------------------------------------- small conversions

def sm(value: Any) -> str | None:
    return None if value is None else f"{float(value):.1f}"


def gb_to_bytes(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return round(value * GB)


def _plain(value: Any) -> Any:
    """YAML dates and other non-JSON scalars as strings, so records compare and dump stably."""
    return json.loads(json.dumps(value, default=str))


# --------------------------------------------------------------------------- record mappers

def map_profile(e: Mapping[str, Any]) -> dict[str, Any]:
    out = {
        "model": e["model"], "weights_variant": e["weights_variant"], "workload": e["workload"],
        "engine": e["engine"], "drafter": e.get("drafter"), "kv_format": e["kv_format"],
        "tp": e["tp"], "pp": e.get("pp", 1), "max_model_len": e["max_ctx"],
        "max_num_seqs": e["max_num_seqs"], "mem_util": e.get("mem_util"), "port": e["default_port"],
        "status": e["status"], "required_sm": sm(e.get("required_sm")),
        "fallback_sm": sm(e.get("fallback_sm")), "requires_nvlink": bool(e.get("requires_nvlink")),
        "required_engine_features": list(e.get("required_engine_features") or []),
        "compose_path": e["compose_path"],
    }
    for key, default in DEFAULTS_NEW_PROFILE_FIELDS.items():
        value = e.get(key)
        out[key] = _plain(default if value is None and default is not None else value)
    out["default_arch_allow"] = [sm(v) for v in out["default_arch_allow"] or []]
    return out


def map_engine(e: Mapping[str, Any]) -> dict[str, Any]:
    method, spec = e["install"]["method"], e["install"]["spec"]
    return {
        "display_name": e["display_name"], "type": e["type"], "install_method": method, "image": spec,
        "min_sm": sm(e["min_sm"]), "supported_kv_formats": list(e.get("supported_kv_formats") or []),
        "supported_weight_formats": list(e.get("supported_weight_formats") or []),
        "required_genesis": bool(e.get("required_genesis")),
        "vendored_overlays": [{"id": o["id"], "pr_url": o.get("pr_url")}
                              for o in e.get("vendored_overlays") or []],
        "stability": e.get("stability") or "stable",
    }


def map_drafter(d: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "display_name": d["display_name"], "method": d["spec_method"], "n_default": d["n_default"],
        "n_max": d["n_max"], "vram_footprint_bytes": gb_to_bytes(d.get("vram_footprint_gb")),
        "speculative_config_template": d.get("speculative_config_template"),
        "local_model_path": d.get("local_model_path"), "model_compat": list(d.get("model_compat") or []),
        "status": d.get("status", "experimental"),
        "requires_engine_min": d.get("requires_engine_min"),
    }


def map_variant(v: Mapping[str, Any]) -> dict[str, Any]:
    fmt = v.get("format") or "safetensors"
    repos = list(v.get("hf_repos") or ([v["hf_repo"]] if v.get("hf_repo") else []))
    return {
        "hf_repos": repos, "format": fmt, "quantization": QUANTIZATION.get(fmt, fmt),
        "size_bytes": gb_to_bytes(v.get("size_gb")), "status": v.get("status") or "experimental",
        "kind": v.get("kind") or "main", "engine": v.get("engine"), "files": list(v.get("files") or []),
        "revision": v.get("revision"),
    }


def construct_hf_config(mo: Mapping[str, Any]) -> dict[str, Any]:
    """A config.json-shaped record from upstream's architecture facts (no config.json upstream)."""
    arch, vocab, tied = FAMILY_FACTS.get(mo.get("family") or "", ("", 0, False))
    text: dict[str, Any] = {"architectures": [arch], "vocab_size": vocab, "tie_word_embeddings": tied}
    pairs = (("hidden_size", "hidden_size"), ("num_hidden_layers", "num_hidden_layers"),
             ("num_attention_heads", "num_attn_heads"), ("num_key_value_heads", "num_kv_heads"),
             ("head_dim", "head_dim_attn"), ("intermediate_size", "intermediate_size"),
             ("max_position_embeddings", "max_ctx_supported"), ("num_experts", "num_experts"),
             ("num_experts_per_tok", "num_experts_per_tok"), ("moe_intermediate_size", "moe_intermediate_size"),
             ("shared_expert_intermediate_size", "shared_expert_intermediate_size"),
             ("linear_num_key_heads", "linear_num_k_heads"), ("linear_num_value_heads", "linear_num_v_heads"),
             ("linear_key_head_dim", "linear_k_head_dim"), ("linear_value_head_dim", "linear_v_head_dim"),
             ("linear_conv_kernel_dim", "linear_conv_kernel_dim"), ("sliding_window", "swa_window"),
             ("mtp_num_hidden_layers", "mtp_num_hidden_layers"), ("n_shared_experts", "num_shared_experts"))
    for ours, theirs in pairs:
        if isinstance(mo.get(theirs), int) and not isinstance(mo.get(theirs), bool):
            text[ours] = mo[theirs]
    full, linear = mo.get("num_attn_layers"), mo.get("num_gdn_layers")
    if isinstance(full, int) and isinstance(linear, int) and full + linear == mo.get("num_hidden_layers"):
        every = (full + linear) // full
        text["layer_types"] = ["full_attention" if (i + 1) % every == 0 else "linear_attention"
                               for i in range(full + linear)]
        text["full_attention_interval"] = every
    text["dtype"] = "bfloat16"
    return text


def map_model(mo: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """Upstream-owned fields of a model; ``hf_config`` is constructed (a curated model keeps its
    own, read from the real config.json)."""
    serving = dict((defaults.get(mo["id"]) or {}).get("vllm") or {})
    return {
        "display_name": mo["display_name"], "description": mo.get("description") or "",
        "default_weight_variant": mo["default_weight_variant"],
        "family": mo.get("family"),
        "weights": {vid: map_variant(v) for vid, v in (mo.get("weights") or {}).items()},
        "serving_defaults": {k: serving[k] for k in sorted(serving)},
        "engine_defaults": {fam: dict(rows) for fam, rows in sorted((defaults.get(mo["id"]) or {}).items())},
        "vram_sizing": _plain(mo.get("vram_sizing") or {}),
        "offload_residency": _plain(mo.get("offload_residency") or {}),
    }


def map_hardware(h: Mapping[str, Any]) -> dict[str, Any]:
    driver = h.get("driver_pin_recommended") or {}
    return {
        "mem_util_safe": h.get("mem_util_safe"),
        "kv_format_default": dict(h.get("kv_format_default") or {}),
        "power_cap_w_max": h.get("power_cap_w_max"), "power_cap_w_optimal": h.get("power_cap_w_optimal"),
        "power_cap_w_prefill": h.get("power_cap_w_prefill"),
        "driver_min": str(driver["min"]) if driver.get("min") is not None else None,
        "cudagraph": h.get("cudagraph"),
    }


def patch_files_of(p: Mapping[str, Any]) -> list[str]:
    spec = p.get("delivery_spec") or {}
    files = [str(f) for f in p.get("files") or []]
    for key in ("script", "jinja", "sidecar"):
        if spec.get(key):
            files.append(str(spec[key]))
    files += [str(o["src"]) for o in spec.get("overlay_files") or [] if isinstance(o, dict) and o.get("src")]
    return sorted(set(files))


def map_patch(p: Mapping[str, Any]) -> dict[str, Any]:
    guard = p.get("drift_guard") or {}
    return {
        "models": list(p.get("model") or []),
        "load_bearing_composes": sorted({c for lb in p.get("load_bearing_when") or []
                                         for c in lb.get("composes") or []}),
        "on_fail": guard.get("on_fail") or "capability-degraded", "capability": p.get("capability"),
        "foundational": bool(p.get("foundational")),
        "deprecated_on": str(p["deprecated_on"]) if p.get("deprecated_on") else None,
        "files": patch_files_of(p),
    }


def patch_wiring(p: Mapping[str, Any]) -> dict[str, Any]:
    """How a patch new to the catalog is wired: volume strings and command arguments from its
    delivery spec (prose in ``invoke`` is never carried over), and its delivery gaps."""
    spec = p.get("delivery_spec") or {}
    mode = spec.get("mount_mode", "ro")
    mounts = [f"./{o['src']}:{o['dest']}:{mode}" for o in spec.get("overlay_files") or []]
    src = spec.get("script") or spec.get("jinja") or spec.get("sidecar")
    if src and spec.get("mounted_at"):
        folder = str(Path(src).parent) if spec.get("script") and not str(spec["mounted_at"]).endswith(
            Path(src).suffix) else src
        mounts.append(f"./{folder}:{spec['mounted_at']}:{mode}")
    invoke = spec.get("invoke")
    invocations = [invoke] if isinstance(invoke, str) and invoke.startswith(
        ("bash ", "sh ", "python", "source ", "--")) else []
    gaps = [{"profiles": list(g.get("composes") or []), "issue": str(g.get("issue") or "")}
            for g in p.get("delivery_gaps") or []]
    return {"mounts": mounts, "invocations": invocations, "delivery_gaps": gaps}


def _secret_at(value: Any, where: str) -> str | None:
    """Where a literal credential sits in a compose value (None when there is none): an ``hf_``
    token anywhere, a secret-named variable or flag whose value is not only ``${...}`` references
    resolving to nothing. The value itself is never named."""
    if isinstance(value, dict):
        for k, v in value.items():
            found = _secret_at(v, f"{where}.{k}")
            if found is None and where.endswith(".environment") and _SECRET_NAME.search(str(k)) \
                    and _literal(v):
                found = f"{where}.{k}"
            if found is not None:
                return found
        return None
    if isinstance(value, list):
        words = [str(v) for v in value]
        for i, v in enumerate(value):
            found = _secret_at(v, f"{where}[{i}]")
            if found is None and isinstance(v, str):
                name, eq, assigned = v.partition("=")
                env_secret = bool(eq) and where.endswith(".environment") and bool(_SECRET_NAME.search(name))
                flag_secret = name in _SECRET_FLAGS and (
                    _literal(assigned) if eq else i + 1 < len(words) and _literal(words[i + 1]))
                if (env_secret and _literal(assigned)) or flag_secret:
                    found = f"{where}[{i}]"
            if found is not None:
                return found
        return None
    if isinstance(value, str):
        if _HF_TOKEN.search(value):
            return where
        words = value.split()
        for i, w in enumerate(words):
            flag, eq, assigned = w.partition("=")
            if flag in _SECRET_FLAGS and (_literal(assigned) if eq else i + 1 < len(words) and _literal(words[i + 1])):
                return where
    return None


def _literal(value: Any) -> bool:
    """A value that is more than ``${...}`` references to the environment (resolved with an empty
    environment it still says something)."""
    if value is None or isinstance(value, bool):
        return False
    try:
        return bool(interpolate(str(value), {}).strip())
    except InterpolationError:
        return True


def capture_runtime(key: str, kv_format: str, text: str, label: str) -> dict[str, Any]:
    """The catalog's capture of a shipped compose: its one service verbatim, the other top-level
    keys, the insertion points, and whether it needs the Genesis patch set. The text is parsed as
    data (safe loader; nothing in it runs); a service holding a literal credential is refused, so
    no secret reaches the catalog."""
    doc = load_yaml(text, label)
    services = doc.get("services") if isinstance(doc, dict) else None
    if not isinstance(services, dict) or len(services) != 1:
        raise Refused(label, "services", f"{key}: expected exactly one service")
    name, service = next(iter(services.items()))
    secret = _secret_at({k: v for k, v in doc.items() if k != "services"}, "") or \
        _secret_at(service, f"services.{name}")
    if secret is not None:
        raise Refused(label, secret.lstrip("."), f"{key}: a literal credential (token, key or password); "
                                                 "the catalog stores only ${VAR} references to one")
    genesis = bool(GENESIS_RE.search(text)) or kv_format.startswith("turboquant")
    if GENESIS_RE.search(text):
        evidence = "the shipped compose names the Genesis patch set (_genesis / GENESIS_* token)"
    elif genesis:
        evidence = f"kv_format {kv_format} is a TurboQuant format (Genesis only)"
    else:
        evidence = "no Genesis token in the shipped compose and the KV format is not TurboQuant"
    return _plain({
        "genesis_equipped": genesis, "genesis_evidence": evidence, "service_name": name,
        "insertion_points": [p for p in ("volumes", "entrypoint") if p in service],
        "top_level": {k: v for k, v in doc.items() if k not in ("services", "version")},
        "service": service,
    })


# --------------------------------------------------------------------------- reading upstream

def _expanded_nodes(root: Any) -> int:
    """The node count of a composed document with every alias expanded, counted without expanding
    it (each shared node's size is computed once); stops counting past ``MAX_YAML_NODES``."""
    sizes: dict[int, int] = {}
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if id(node) in sizes:
            continue
        value = node.value if isinstance(node, yaml.CollectionNode) else ()
        children = [c for pair in value for c in pair] if isinstance(node, yaml.MappingNode) else list(value)
        if not done:
            stack.append((node, True))
            stack.extend((c, False) for c in children if id(c) not in sizes)
            continue
        sizes[id(node)] = min(MAX_YAML_NODES + 1, 1 + sum(sizes.get(id(c), 1) for c in children))
    return sizes.get(id(root), 0)


def load_yaml(text: str, label: str) -> Any:
    """Safe-load one YAML document with budgets: at most ``MAX_YAML_BYTES`` and ``MAX_YAML_NODES``
    nodes once its aliases are expanded (else ``Refused``, before anything walks it)."""
    if len(text) > MAX_YAML_BYTES:
        raise Refused(label, "<file>", f"{len(text)} characters is over the {MAX_YAML_BYTES}-character limit")
    try:
        node = yaml.compose(text, Loader=_SAFE)
    except yaml.YAMLError as exc:
        raise Refused(label, "<file>", f"not valid YAML: {exc}") from None
    if node is not None and _expanded_nodes(node) > MAX_YAML_NODES:
        raise Refused(label, "<file>", f"its aliases expand past {MAX_YAML_NODES} nodes (a YAML alias bomb)")
    try:
        return yaml.load(text, Loader=_SAFE)
    except yaml.YAMLError as exc:
        raise Refused(label, "<file>", f"not valid YAML: {exc}") from None


def load_file(path: Path, label: str) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise Refused(label, "<file>", f"cannot read: {exc.strerror or exc}") from None
    if path.suffix != ".json":
        return load_yaml(text, label)
    try:
        return json.loads(text)
    except ValueError as exc:
        raise Refused(label, "<file>", f"not valid JSON: {exc}") from None


def check_keys(kind: str, label: str, record: Any, where: str) -> None:
    if not isinstance(record, dict):
        raise Refused(label, where or "<file>", "expected a mapping")
    for key in record:
        if key not in KNOWN_KEYS[kind]:
            raise Refused(label, f"{where}.{key}" if where else str(key),
                          "unknown upstream key; extend tools/upstream_catalog.py before syncing")
    version = record.get("schema_version", 1)
    if version not in SUPPORTED_UPSTREAM_SCHEMA:
        raise Refused(label, f"{where}.schema_version" if where else "schema_version",
                      f"unsupported upstream schema version {version!r}")


@dataclass
class Upstream:
    """One upstream snapshot, mapped: ``sections`` holds catalog records per catalog section."""

    root: Path
    commit: str | None
    sections: dict[str, dict[str, Any]]
    raw_models: dict[str, Any] = field(default_factory=dict)
    raw_patches: dict[str, Any] = field(default_factory=dict)
    arch_pins: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    files: dict[str, dict[str, Any]] = field(default_factory=dict)
    registry_meta: dict[str, Any] = field(default_factory=dict)
    composes: dict[str, str] = field(default_factory=dict)       # compose_path -> text (found ones)


def _profiles_dir(root: Path) -> Path:
    for candidate in (root / "profiles", root / "scripts" / "lib" / "profiles"):
        if candidate.is_dir():
            return candidate
    raise Refused(str(root), "<folder>", "no profiles/ or scripts/lib/profiles/ folder: not a club-3090 "
                                         "checkout or snapshot")


def _registry(root: Path, profiles: Path) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """(label, entries, top-level sections). A flat expanded map wins for the entries; the
    sections come from the structured registry when there is one."""
    entries: dict[str, Any] | None = None
    label = ""
    meta: dict[str, Any] = {}
    for path in (root / "registry_expanded.json", root / "registry.json", root / "registry.yaml",
                 profiles / "registry.yaml"):
        if not path.is_file():
            continue
        here = str(path.relative_to(root))
        doc = _load_registry(path, here)
        if "entries" in doc:
            if not meta:
                meta = {k: doc.get(k) for k in ("defaults", "engine_preference", "recommended_default_models")}
            body = doc["entries"]
        else:
            body = doc
        if entries is None:
            label, entries = here, body
    if entries is None:
        raise Refused(str(root), "<folder>", "no registry_expanded.json, registry.json or registry.yaml")
    return label, entries, meta


def _load_registry(path: Path, label: str) -> dict[str, Any]:
    doc = load_file(path, label)
    if not isinstance(doc, dict):
        raise Refused(label, "<file>", "expected a mapping")
    if "entries" in doc:
        check_keys("registry_top", label, {k: v for k, v in doc.items()}, "")
        if doc.get("schema") not in SUPPORTED_UPSTREAM_SCHEMA:
            raise Refused(label, "schema", f"unsupported upstream schema version {doc.get('schema')!r}")
        if not isinstance(doc["entries"], dict):
            raise Refused(label, "entries", "expected a mapping of slug to entry")
    return doc


def _commit(root: Path) -> str | None:
    """The upstream commit: a snapshot's ``patch_files.json`` ``_commit``, else a checkout's HEAD."""
    index = root / "patch_files.json"
    if index.is_file():
        doc = load_file(index, "patch_files.json")
        if isinstance(doc, dict) and isinstance(doc.get("_commit"), str):
            return doc["_commit"]
    head = root / ".git" / "HEAD"
    if head.is_file():
        ref = head.read_text(encoding="utf-8").strip()
        if not ref.startswith("ref: "):
            return ref
        name = ref[5:]
        loose = root / ".git" / name
        if loose.is_file():
            return loose.read_text(encoding="utf-8").strip()
        packed = root / ".git" / "packed-refs"
        if packed.is_file():
            for line in packed.read_text(encoding="utf-8").splitlines():
                sha, _, rname = line.partition(" ")
                if rname == name:
                    return sha
    return None


def _compose_text(root: Path, compose_path: Any, label: str) -> str | None:
    """A registry entry's compose file, joined with ``files.inside`` (the one check that a name
    from outside stays in its root): ``../`` or an absolute path is refused, never followed."""
    from club3090.edges.files import inside
    from club3090.errors import UnsafePath

    for base in (root / "composes", root):
        try:
            path = inside(base, compose_path) if isinstance(compose_path, str) else None
        except UnsafePath as exc:
            raise Refused(label, "compose_path", f"{exc.message}: outside the upstream tree") from None
        if path is not None and path.resolve().is_relative_to(root.resolve()) and path.is_file():
            return path.read_text(encoding="utf-8")
    return None


def _patch_file_index(root: Path) -> dict[str, dict[str, Any]]:
    index = root / "patch_files.json"
    if not index.is_file():
        return {}
    doc = load_file(index, "patch_files.json")
    out = {}
    for path, rec in doc.items():
        if path == "_commit":
            continue
        if not isinstance(rec, dict) or not {"sha256", "size"} <= set(rec):
            raise Refused("patch_files.json", path, "expected sha256 and size")
        out[path] = {"size": rec["size"], "sha256": rec["sha256"], "executable": bool(rec.get("executable"))}
    return out


def read_upstream(root: Path) -> Upstream:
    """Upstream's data mapped into catalog records, per section."""
    profiles_dir = _profiles_dir(root)
    sections: dict[str, dict[str, Any]] = {s: {} for s in ("engines", "drafters", "models", "patches",
                                                         "profiles", "gpus")}
    label, entries, meta = _registry(root, profiles_dir)
    up = Upstream(root=root, commit=_commit(root), sections=sections, registry_meta=meta)
    for slug, entry in entries.items():
        check_keys("registry", label, entry, f"entries[{slug!r}]")
        try:
            sections["profiles"][slug] = map_profile(entry)
        except KeyError as exc:
            raise Refused(label, f"entries[{slug!r}].{exc.args[0]}", "missing required key") from None
        text = _compose_text(root, entry["compose_path"], f"{label}: entries[{slug!r}]")
        if text is not None:
            up.composes[entry["compose_path"]] = text
    defaults = meta.get("defaults") or {}
    folders = (("engines", "engines"), ("drafters", "drafters"), ("models", "models"), ("hardware", "gpus"))
    for folder, section in folders:
        for path in sorted((profiles_dir / folder).glob("*.yml")):
            here = str(path.relative_to(root))
            doc = load_file(path, here)
            check_keys(folder, here, doc, "")
            rid = doc.get("id")
            if not isinstance(rid, str):
                raise Refused(here, "id", "missing required key")
            try:
                if folder == "engines":
                    sections[section][rid] = map_engine(doc)
                elif folder == "drafters":
                    sections[section][rid] = map_drafter(doc)
                elif folder == "models":
                    sections[section][rid] = map_model(doc, defaults)
                    up.raw_models[rid] = doc
                else:
                    sections[section][rid] = map_hardware(doc)
            except (KeyError, TypeError) as exc:
                raise Refused(here, str(exc.args[0]) if exc.args else "<record>",
                              "missing or malformed required key") from None
    patches = profiles_dir / "patches.yml"
    if patches.is_file():
        here = str(patches.relative_to(root))
        doc = load_file(patches, here)
        if not isinstance(doc, dict) or not isinstance(doc.get("patches"), list):
            raise Refused(here, "patches", "expected a list of patches")
        for i, p in enumerate(doc["patches"]):
            check_keys("patches", here, p, f"patches[{i}]")
            sections["patches"][p["id"]] = map_patch(p)
            up.raw_patches[p["id"]] = p
    arches = profiles_dir / "arch_patches.yml"
    if arches.is_file():
        here = str(arches.relative_to(root))
        doc = load_file(arches, here)
        for i, row in enumerate((doc or {}).get("arches") or []):
            check_keys("arches", here, row, f"arches[{i}]")
            up.arch_pins[row["arch"]] = [_plain({k: v for k, v in pin.items() if k in ("pin", "loads", "reason")})
                                         for pin in row.get("engine_pin") or []]
    up.files = _patch_file_index(root)
    return up
