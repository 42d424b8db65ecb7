"""The catalog schema: every file and record, with its fields' checks and meanings.

The loader validates against these specs, and ``club3090.catalog.schema_doc`` renders them as
``docs/CATALOG.md``, so the documentation cannot drift from what the loader accepts. A field's
``doc`` is its one description. Fields marked ``documentary`` are evidence for human reviewers
(why a value deviates from upstream, where a record came from); no code decides on them.

This module owns the per-file record specs, ``FILE_SCHEMAS``, the retired keys and the facts
derived from an engine's install spec; the generic checks and ``Field`` / ``Nested`` machinery
live in ``catalog.checks`` and are re-exported here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from . import model as m
from .checks import (
    Bad,
    Check,
    Field,
    Nested,
    Spec,
    describe,
    enum,
    evidence,
    label,
    list_of,
    map_of,
    nullable,
    opt,
    req,
    t_any,
    t_bool,
    t_commit,
    t_commit_prefix,
    t_decimal,
    t_fraction,
    t_id,
    t_int,
    t_mapping,
    t_nonneg_int,
    t_pos_int,
    t_sha256,
    t_sm,
    t_str,
    t_text,
    t_version,
)

# the checks' names stay importable from here, where the schema's readers look for them
__all__ = [
    "ANCHOR_SELF_DESCRIBING", "ANCHOR_SPEC", "APPLIES_SPEC", "ARCH_NESTED", "ARCH_SPEC", "CONSTRAINT_NESTED",
    "CONSTRAINT_SPEC", "CORRECTION_SPEC",
    "DRAFTER_SPEC", "ENGINE_NESTED", "ENGINE_SPEC", "FILES", "FILE_SCHEMAS", "GAP_SPEC", "GPU_SPEC",
    "KV_SPEC", "MODEL_NESTED", "MODEL_SPEC", "OVERLAY_SPEC", "PATCH_NESTED", "PATCH_SPEC",
    "PIN_SPEC", "PROFILE_NESTED", "PROFILE_SPEC", "RETIRED_KEYS", "RUNTIME_SPEC", "SCHEMA_BY_FILE",
    "SUPPORTED_SCHEMA_VERSIONS", "UPSTREAM_FILE_SPEC", "UPSTREAM_SPEC", "VARIANT_SPEC", "Bad", "Check", "Field",
    "Nested", "Spec", "describe", "engine_pin_tag", "engine_release", "enum", "evidence", "label",
    "list_of", "map_of", "nullable", "opt", "req", "t_any", "t_bool", "t_commit", "t_commit_prefix", "t_decimal",
    "t_fraction", "t_id", "t_int", "t_mapping", "t_nonneg_int", "t_pos_int", "t_sha256", "t_sm",
    "t_str", "t_text", "t_version",
]

# 2: an arch row's kernel_constraints are records ({text, kind, applies_when}), no longer prose strings
SUPPORTED_SCHEMA_VERSIONS = (2,)


# ----------------------------------------------------------------------------- derived facts

def engine_pin_tag(install_method: str, image: str) -> str:
    """The tag an engine is pinned at, read from its install spec: a digest (``sha256:...``), a
    nightly's commit (``nightly-<sha>`` -> ``<sha>``), an image tag, or a pip version spec."""
    if install_method == "pip":
        return image[len("vllm=="):] if image.startswith("vllm==") else image[len("vllm"):]
    if "@sha256:" in image:
        return image.split("@", 1)[1]
    tag = image.rsplit(":", 1)[1] if ":" in image.rsplit("/", 1)[-1] else "latest"
    return tag[len("nightly-"):] if tag.startswith("nightly-") else tag


def engine_release(engine_type: str, install_method: str, image: str) -> str | None:
    """The vLLM release an install spec pins (``0.22.0``), or None (nightly, range, llama.cpp)."""
    if engine_type != "vllm":
        return None
    found = (re.fullmatch(r"vllm==(\d+\.\d+\.\d+)", image) if install_method == "pip"
             else re.search(r":v(\d+\.\d+\.\d+)$", image))
    return found.group(1) if found else None


# ----------------------------------------------------------------------------- field specs

GPU_SPEC: Spec = {
    "display_name": req(t_str, "Marketing name as the driver reports it (`nvidia-smi --query-gpu=name`)."),
    "aliases": opt(list_of(t_str, unique=True), "Other spellings accepted by `--gpus` and matched "
                   "against detected names (case, spaces and `nvidia`/`geforce` prefixes ignored).", ()),
    "memory_bytes": req(t_pos_int, "Total memory in bytes as the driver reports it (nvidia-smi "
                        "\"Total\"); what the fit engine prices when the card is named, not detected."),
    "sm": req(t_sm, "CUDA compute capability; gates engine, profile and KV-format SM floors."),
    "nvlink": req(t_bool, "Whether the card has an NVLink bridge connector (rigs of such cards may "
                  "report NVLink)."),
    "arch": req(t_str, "GPU generation (volta, turing, ampere, ada, hopper, blackwell, cdna3, rdna3, "
                "apple-m3, ...); shown in rig notes."),
    "vendor": opt(enum("nvidia", "amd", "apple"), "GPU vendor; non-NVIDIA cards are refused by the vLLM "
                  "gate (their `sm` is the assumed 8.0 of the SM gate, never a CUDA capability).", "nvidia"),
    "memory_bandwidth_gb_s": req(t_decimal, "Peak memory bandwidth in GB/s (10^9 bytes/s) from the vendor's "
                                 "specification; the speed estimate's decode rate is priced from it."),
    "bf16_tflops": req(t_decimal, "Dense (no sparsity) bf16 tensor throughput in TFLOP/s with fp32 "
                       "accumulation, from the vendor's specification (GeForce parts run it at half their "
                       "fp16-accumulate rate); the speed estimate's prefill rate is priced from it."),
    "usable_memory_fraction": opt(nullable(t_fraction), "Unified-memory machines (Apple silicon, DGX Spark, "
                                  "MI300A): the fraction of `memory_bytes` the GPU may allocate (Apple's "
                                  "default wired-memory limit, the OS and CPU share); `--gpus NAME` prices "
                                  "`memory_bytes` times it. Null for discrete cards.", None),
    "mem_util_safe": evidence(nullable(t_fraction), "Highest `--gpu-memory-utilization` upstream runs this card "
                         "at without desktop or driver reservations failing it (null: not recorded).", None),
    "kv_format_default": evidence(map_of(t_id), "Upstream's preferred KV format (id in kv_formats.yaml) on this "
                             "card by intent: `long_context`, `multi_stream`, `balanced`.", {}),
    "power_cap_w_max": evidence(nullable(t_pos_int), "Board power limit in watts (the card's maximum).", None),
    "power_cap_w_optimal": evidence(nullable(t_pos_int), "Power cap in watts upstream measured as the best "
                               "tokens per watt for decode.", None),
    "power_cap_w_prefill": evidence(nullable(t_pos_int), "Power cap in watts upstream recommends for "
                               "prefill-heavy work.", None),
    "driver_min": evidence(nullable(t_str), "Lowest NVIDIA driver release upstream's images need on this card "
                      "(`580.0`); null: not recorded.", None),
    "cudagraph": evidence(nullable(t_str), "CUDA-graph mode upstream serves the card with (`full`, "
                     "`piecewise`); null: not recorded.", None),
}
KV_SPEC: Spec = {
    "min_sm": req(nullable(t_sm), "Lowest compute capability the format runs on (null: no floor)."),
    "max_sm": opt(nullable(t_sm), "Highest compute capability, for family-specific formats (null: no "
                  "ceiling)."),
    "vllm_arg": req(nullable(t_str), "Value written as `--kv-cache-dtype` (null: the flag is omitted and "
                    "the KV cache takes the model dtype)."),
    "engines": req(list_of(enum(*m.ENGINE_TYPES), unique=True), "Engine types that implement the format."),
    "emittable": opt(t_bool, "False for formats that only exist with the Genesis patch set; a profile "
                     "using one is Genesis-equipped and never replayed.", True),
    "note": evidence(t_text, "Why the row is as it is (reviewers' note).", ""),
}
OVERLAY_SPEC: Spec = {
    "id": req(t_id, "Overlay id (the vendored vLLM pull request it carries)."),
    "pr_url": evidence(nullable(t_str), "Upstream pull request the overlay vendors."),
}
ENGINE_SPEC: Spec = {
    "display_name": req(t_str, "Human name shown in listings and notes."),
    "type": req(enum(*m.ENGINE_TYPES), "Serving engine family: `vllm` profiles are priced by the vLLM "
                "memory model, `llama.cpp` ones by llama.cpp's; `compose` replays both its own way."),
    "install_method": req(enum("docker_image", "pip"), "How the engine is installed; derived composes "
                          "need `docker_image`."),
    "image": req(t_str, "Install spec: the Docker image reference (or pip requirement). The "
                 "engine's pin `<engine-id>@<tag>` (matched against arch rows' `engine_pins`) and its "
                 "vLLM release (the memory model's version defaults) are read from it: a `:vX.Y.Z` "
                 "tag or `vllm==X.Y.Z` is a release; nightlies and llama.cpp have none."),
    "min_sm": req(t_sm, "Lowest compute capability the engine build supports."),
    "supported_kv_formats": req(list_of(t_id, unique=True), "KV formats (ids in kv_formats.yaml) the "
                                "engine serves."),
    "supported_weight_formats": req(list_of(t_str, unique=True), "Weight formats (`awq`, `gptq`, "
                                    "`fp8`, ...) the engine loads; checked by the engine-support gate."),
    "required_genesis": req(t_bool, "The engine only runs with the Genesis patch set; derived composes "
                            "refuse it."),
    "stability": opt(enum(*m.ENGINE_STABILITY), "Upstream's maturity mark. `deprecated` means upstream "
                     "withdrew the engine (its image is gone): its profiles name a `replaced_by`.", "stable"),
}
ENGINE_NESTED: Mapping[str, Nested] = {
    "vendored_overlays": Nested(OVERLAY_SPEC, "list", False, "Unmerged vLLM pull requests the engine "
                                "image carries; an engine with any is not usable as a derived base."),
}
DRAFTER_SPEC: Spec = {
    "display_name": req(t_str, "Human name."),
    "method": req(enum("mtp", "mtp_assistant", "dflash", "mtp_gguf", "eagle3", "dspark"),
                  "Speculative-decoding method; decides how the drafter's memory is priced."),
    "n_default": req(t_pos_int, "Speculative tokens per step written into `--speculative-config`."),
    "n_max": req(t_pos_int, "Most speculative tokens the drafter supports (`n_default` may not "
                 "exceed it)."),
    "vram_footprint_bytes": req(nullable(t_nonneg_int), "Drafter weights in bytes, added to the "
                                "memory estimate (null: depends on the GGUF chosen)."),
    "speculative_config_template": req(nullable(t_str), "JSON text for `--speculative-config` with "
                                       "`{N}` (and `{LOCAL_MODEL_PATH}`) placeholders; null for "
                                       "llama.cpp-only drafters."),
    "local_model_path": opt(nullable(t_str), "Container path substituted for `{LOCAL_MODEL_PATH}`."),
    "model_compat": req(list_of(t_id, unique=True), "Models (ids in models.yaml) the drafter serves; "
                        "the one owner of model-drafter compatibility."),
    "status": opt(t_str, "Maturity as upstream records it (`production`, `experimental`, ...); shown "
                  "in listings.", "experimental"),
    "requires_engine_min": evidence(nullable(t_str), "Oldest engine build (image tag) that serves the drafter; "
                               "null: any.", None),
}
VARIANT_SPEC: Spec = {
    "hf_repos": req(list_of(t_str, unique=True), "Hub repos holding these weights; the first is "
                    "primary, all resolve to this variant (case-insensitive)."),
    "format": req(t_str, "Weight format (`autoround`, `awq`, `gptq`, `fp8`, `bf16`, `gguf`, ...)."),
    "quantization": req(nullable(t_str), "vLLM `quantization` method of a quantized checkpoint; null "
                        "when unquantized."),
    "size_bytes": req(nullable(t_pos_int), "Checkpoint size in bytes (decimal GB x 1e9 as recorded); "
                      "null when not recorded."),
    "status": req(t_str, "Maturity of the variant as upstream records it; shown in listings."),
    "kind": req(enum(*m.WEIGHT_KINDS), "Role: `main` weights, a `draft` head, `gguf` files or a "
                "vision `mmproj`; the main kind wins when several variants list one repo."),
    "engine": opt(nullable(t_str), "Serving family the variant is packed for (vllm, llama-cpp)."),
    "files": opt(list_of(t_str), "Named files to fetch for file-level (GGUF) variants.", ()),
    "revision": opt(nullable(t_str), "Hub revision the variant is pinned to (null: the default "
                    "branch)."),
    "note": evidence(nullable(t_str), "Reviewers' note on the variant."),
}
MODEL_SPEC: Spec = {
    "display_name": req(t_str, "Human name."),
    "description": evidence(t_text, "One-line description for readers of the catalog.", ""),
    "default_weight_variant": req(t_id, "Variant used when the model is named without one."),
    "hf_config": req(t_mapping, "The model's `config.json` (the only record of its geometry): "
                     "`architectures[0]` is the architecture and `max_position_embeddings` the "
                     "longest supported context."),
    "hf_config_source": evidence(t_text, "Where `hf_config` came from (a Hub repo's config.json, or "
                                 "constructed, with the evidence for each constructed key).", ""),
    "serving_defaults": opt(map_of(t_id), "The profile (id in profiles.yaml, serving this model) a "
                            "rig of one GPU (`single`), two (`dual`) or more (`multi`) gets when no "
                            "`--profile-like` is given; upstream's registry `defaults` for vLLM. A "
                            "GPU count with no entry gets a shape derived from the model and the rig.",
                            {}),
    "family": evidence(nullable(t_str), "Upstream's architecture family tag (`qwen3-next-hybrid`, "
                  "`gemma4-swa-moe`, ...); engines list the families they load.", None),
    "engine_defaults": evidence(map_of(map_of(t_id)), "Upstream's registry `defaults` for this model: engine "
                           "family (`vllm`, `llamacpp`) to GPU-count class to profile; "
                           "`serving_defaults` is its vLLM row.", {}),
    "vram_sizing": evidence(t_mapping, "Upstream's per-tier memory notes for the model (weights per card, "
                       "offload budgets), kept as recorded for llama.cpp offload planning.", {}),
    "offload_residency": evidence(t_mapping, "Upstream's record of which tensors stay on the GPU when "
                             "experts are offloaded to host memory (llama.cpp `--n-cpu-moe`).", {}),
}
MODEL_NESTED: Mapping[str, Nested] = {
    "weights": Nested(VARIANT_SPEC, "mapping", True, "Weight variants by id (at least one)."),
}
PIN_SPEC: Spec = {
    "pin": req(t_str, "`<engine-id>@<tag-or-sha>` this row was tested with."),
    "loads": req(t_bool, "Whether the architecture loads on that pin; `compose` refuses "
                 "`pin-mismatch` unless true."),
    "reason": opt(nullable(t_str), "Why it does not load (shown with the refusal)."),
}
ARCH_SPEC: Spec = {
    "required_patches": req(list_of(t_id, unique=True), "Patches (ids in patches.yaml) this "
                            "architecture relies on; listed as excluded when not load-bearing."),
    "tp_divisors": req(list_of(t_pos_int, unique=True), "Tensor-parallel sizes the architecture "
                       "admits (head geometry still gates each size)."),
    "trust_remote_code": req(enum(*m.TRC_VALUES), "Whether serving needs `--trust-remote-code`; the "
                             "gate and `compose` fail closed unless `false`."),
    "trust_remote_code_evidence": req(nullable(t_str), "Evidence for the `trust_remote_code` value; "
                                      "required for `false`."),
    "confidence": req(enum(*m.ARCH_CONFIDENCE), "How exact the row's memory pricing is; reported "
                      "with estimates."),
    "status": req(enum(*m.ARCH_STATUS), "Whether the row was verified on hardware."),
    "config_architectures": req(list_of(t_str, unique=True), "Other `architectures[0]` names that "
                                "resolve to this row."),
    "model_slugs": req(list_of(t_id, unique=True), "Curated models (ids in models.yaml) this row "
                       "covers."),
    "golden_triple_profiles": opt(list_of(t_id, unique=True), "Upstream's golden triple of the "
                                  "architecture: profiles (of the models in `model_slugs`) whose registry "
                                  "entry, captured runtime and shipped compose agree, so `compose` must replay "
                                  "each byte for byte; `tests/test_compose.py` holds a golden file per profile "
                                  "and `club3090 profiles` marks them `golden`.", ()),
}
APPLIES_SPEC: Spec = {
    "tp_min": opt(nullable(t_pos_int), "Applies at a tensor-parallel size of at least N (2: only under TP).", None),
    "tp_max": opt(nullable(t_pos_int), "Applies at a tensor-parallel size of at most N (1: one card).", None),
    "pp_min": opt(nullable(t_pos_int), "Applies at a pipeline-parallel size of at least N.", None),
    "kv_formats": opt(list_of(t_id, unique=True), "Applies with one of these KV formats (ids in "
                      "kv_formats.yaml).", ()),
    "weight_formats": opt(list_of(t_str, unique=True), "Applies to weights in one of these formats "
                          "(`autoround`, `awq`, ... as in a weight variant's `format`).", ()),
    "engines": opt(list_of(enum(*m.ENGINE_TYPES), unique=True), "Applies on these engine types.", ()),
    "sm_max": opt(nullable(t_sm), "Applies on GPUs of at most this compute capability (`'8.7'`: Ampere "
                  "and older).", None),
}
CONSTRAINT_SPEC: Spec = {
    "text": req(t_str, "The constraint in prose, printed as a `known cliff` line at the top of `pull`, "
                "`fits` and `up` wherever `applies_when` holds."),
    "kind": opt(enum(*m.CONSTRAINT_KINDS), "`cliff`: a known failure mode, printed where it applies; "
                "`scope`: what the row does not assert (checked elsewhere), never printed.", "cliff"),
}
CONSTRAINT_NESTED: Mapping[str, Nested] = {
    "applies_when": Nested(APPLIES_SPEC, "record", False, "The shapes the constraint applies to; every "
                           "condition given must hold, and one the shape leaves unknown (an SM no GPU "
                           "reported) holds. Absent: every shape."),
}
ARCH_NESTED: Mapping[str, Nested] = {
    "engine_pins": Nested(PIN_SPEC, "list", True, "Engine pins this architecture was tested on."),
    "kernel_constraints": Nested(CONSTRAINT_SPEC, "list", False, "Known kernel limits of the architecture "
                                 "on the engines we pin, each with the shapes it applies to.",
                                 nested=CONSTRAINT_NESTED),
}
GAP_SPEC: Spec = {
    "profiles": req(list_of(t_id, unique=True), "Profiles whose shipped compose does not deliver "
                    "the patch."),
    "issue": req(t_str, "Why, as printed in the compose header."),
}
PATCH_SPEC: Spec = {
    "models": req(list_of(t_id, unique=True), "Models (ids in models.yaml) the patch concerns; a "
                  "non-load-bearing patch of the profile's model is listed as excluded."),
    "load_bearing_composes": req(list_of(t_id, unique=True), "Profiles whose replay must wire the "
                                 "patch."),
    "mounts": req(list_of(t_str), "Compose volume strings the patch adds (sources relative to the "
                  "club-3090 checkout)."),
    "invocations": req(list_of(t_str), "`vllm serve` arguments or entrypoint lines the patch adds; "
                       "other text is prose and never inserted."),
    "on_fail": req(enum(*m.ON_FAIL), "What a failed drift guard means: `capability-degraded` omits "
                   "the patch (exit 3 without `--accept-degraded`); the others refuse."),
    "capability": req(nullable(t_str), "The capability lost when the patch is omitted."),
    "foundational": req(t_bool, "A failed drift guard refuses the compose whatever `on_fail` says."),
    "deprecated_on": opt(nullable(t_str), "Date the patch was retired (null: live); a deprecated "
                         "patch is never wired."),
    "files": evidence(list_of(t_str, unique=True), "Upstream repository paths the patch ships (files or "
                 "folders); the files' digests are in upstream_files.yaml.", ()),
}
PATCH_NESTED: Mapping[str, Nested] = {
    "delivery_gaps": Nested(GAP_SPEC, "list", True, "Profiles where the patch is load-bearing but "
                            "the shipped compose does not deliver it (reported `undelivered`)."),
}
PROFILE_SPEC: Spec = {
    "model": req(t_id, "Model (id in models.yaml)."),
    "weights_variant": req(t_id, "Weight variant of the model."),
    "workload": req(enum(*m.WORKLOADS), "What the profile is tuned for; shown in listings."),
    "engine": req(t_id, "Engine (id in engines.yaml)."),
    "drafter": req(nullable(t_id), "Drafter (id in drafters.yaml), or null."),
    "kv_format": req(t_id, "KV format (id in kv_formats.yaml)."),
    "tp": req(t_pos_int, "Tensor-parallel size."),
    "pp": opt(t_pos_int, "Pipeline-parallel size.", 1),
    "max_model_len": req(t_pos_int, "Context length the profile serves (vLLM `--max-model-len`)."),
    "max_num_seqs": req(t_pos_int, "Concurrent sequences (vLLM `--max-num-seqs`)."),
    "mem_util": req(nullable(t_fraction), "vLLM `--gpu-memory-utilization`; required for vLLM "
                    "profiles, null for llama.cpp."),
    "port": req(t_pos_int, "Host port the service publishes."),
    "status": req(enum(*m.PROFILE_STATUSES), "Maturity; only `production` and `caveats` launch "
                  "without `--force`."),
    "status_note": opt(nullable(t_text), "Caveat printed with the status."),
    "required_sm": opt(nullable(t_sm), "Compute capability the profile needs."),
    "fallback_sm": opt(nullable(t_sm), "Lower compute capability the profile falls back to "
                       "(replaces `required_sm` in the SM gate)."),
    "requires_nvlink": opt(t_bool, "The replayed compose sets `NVLINK_MODE` to `required`.", False),
    "required_engine_features": opt(list_of(t_str, unique=True), "Engine overlay features the "
                                    "profile needs; a derived compose refuses such profiles.", ()),
    "compose_path": req(t_str, "Path of the shipped compose in the club-3090 checkout."),
    "reference_gpu": req(t_id, "GPU (id in gpus.yaml) the profile was validated on; prices a rig "
                         "given by count only."),
    "archived": opt(t_bool, "Not in upstream's registry at the synced commit (upstream archived or "
                    "deregistered it); kept with the values it had, and `replaced_by` names its "
                    "successor. Written by `tools/sync_upstream.py`.", False),
    "replaced_by": opt(nullable(t_id), "For an archived or deprecated profile, or one whose engine "
                       "upstream withdrew: the current profile (id in profiles.yaml) that replaces it, "
                       "upstream's default for the model, engine family and GPU count, else the "
                       "best-status live profile of the same model, engine family and TP. Written by "
                       "`tools/sync_upstream.py`.", None),
    "aliases": opt(list_of(t_id, unique=True), "Old slugs upstream renamed to this profile; "
                   "`--profile-like OLD` and `profiles` resolve them here.", ()),
    "act_format": opt(enum("16bit", "int8"), "Activation format the shipped compose runs with "
                      "(`int8`: W4A8 on int4 weights).", "16bit"),
    "act8_capable": opt(t_bool, "The weights can serve with int8 activations (W4A8).", False),
    "offload": opt(nullable(t_str), "Host-memory offload mode (`n-cpu-moe`: MoE experts on the CPU); "
                   "null: everything on the GPUs.", None),
    "moe_cache": opt(t_bool, "The engine caches hot MoE experts on the GPU while the rest live in host "
                     "memory.", False),
    "host_ram_gb": opt(nullable(t_pos_int), "Host memory in GB the offloaded profile needs.", None),
    "chat_template": opt(t_str, "Chat template the compose serves with (`native`: the checkpoint's own; "
                         "else a vendored one such as `froggeric` or `gemma-canonical`).", "native"),
    "requires_homogeneous_arch": opt(t_bool, "Every GPU must be of one generation.", False),
    "weights_companions": opt(list_of(t_id, unique=True), "Other weight variants (ids of the model's "
                              "variants, or drafters) downloaded with the main weights.", ()),
    "gateway": opt(t_bool, "Upstream serves the profile behind its API gateway (extra served names).",
                   False),
    "serve_aliases": opt(list_of(t_str, unique=True), "Extra `--served-model-name` values.", ()),
    "sampler_profiles": opt(t_mapping, "Recommended sampling settings by mode (`instruct`, "
                            "`thinking`): temperature, top_p, top_k, min_p, penalties.", {}),
    "default_arch_allow": opt(list_of(t_sm), "Compute capabilities the profile is offered on by "
                              "default (empty: any that passes the SM gate).", ()),
    "category": opt(nullable(t_str), "Upstream's listing category (`frontier`, `uncensored`).", None),
    "gpu_assignment_mode": opt(t_str, "How GPUs are assigned to the service (`contiguous`).",
                               "contiguous"),
    "recommended_engine_features": opt(list_of(t_str, unique=True), "Engine overlay features that help "
                                       "but are not required.", ()),
}
RUNTIME_SPEC: Spec = {
    "genesis_equipped": req(t_bool, "The shipped compose needs the Genesis patch set; such profiles "
                            "are not replayed."),
    "genesis_evidence": evidence(t_str, "What in the shipped compose decided `genesis_equipped`.", ""),
    "service_name": req(t_str, "Service key in the shipped compose."),
    "insertion_points": req(list_of(enum("volumes", "entrypoint"), unique=True), "Sections of the "
                            "service where patches may be wired (those present in the service)."),
    "top_level": opt(t_mapping, "Top-level keys of the shipped file other than `services`.", {}),
    "service": req(t_mapping, "The shipped service definition, `${VAR:-default}` tokens verbatim; "
                   "replay changes only the parameter slots and insertion points."),
}
PROFILE_NESTED: Mapping[str, Nested] = {
    "runtime": Nested(RUNTIME_SPEC, "record", True, "Capture of the shipped compose (null when none "
                      "is captured; the profile then cannot be replayed).", nullable=True),
}
ANCHOR_SPEC: Spec = {
    "id": req(t_str, "Unique anchor id (`<profile-or-slug>:<set>[:n]`)."),
    "set": req(t_id, "Measurement set the run belongs to (`kvcalc-current-8of8`, ...)."),
    "profile": opt(nullable(t_id), "Curated profile whose shipped compose ran, if the catalog has it; "
                   "supplies only what the anchor does not record."),
    "gpu": req(t_id, "GPU (id in gpus.yaml) of the run."),
    "gpu_count": opt(t_pos_int, "GPUs used (tp x pp).", 1),
    "measured_peak_bytes": req(nullable(t_pos_int), "Measured peak memory per card in bytes."),
    "measured_kv_tokens": req(nullable(t_pos_int), "KV-cache tokens vLLM reported."),
    "ctx": req(nullable(t_pos_int), "`--max-model-len` of the run."),
    "mem_util": opt(nullable(t_fraction), "`--gpu-memory-utilization` of the run."),
    "kv_format": opt(nullable(t_id), "KV format of the run."),
    "source": req(t_str, "Where the measurement was published."),
    "model": opt(nullable(t_id), "Catalog model whose geometry prices the run."),
    "weights_variant": opt(nullable(t_id), "Weight variant of `model` that ran."),
    "weights_bytes": opt(nullable(t_pos_int), "Recorded checkpoint size when the variant is not in "
                         "the catalog."),
    "tp": opt(nullable(t_pos_int), "Tensor-parallel size of the run."),
    "max_num_seqs": opt(nullable(t_pos_int), "`--max-num-seqs` of the run."),
    "max_num_batched_tokens": opt(nullable(t_pos_int), "`--max-num-batched-tokens` of the run (null: "
                                  "the linked profile's shipped compose, else vLLM's default)."),
    "drafter": opt(nullable(t_id), f"Drafter of the run, or `{m.NO_DRAFTER}` (null: not recorded)."),
    "engine": opt(nullable(t_id), "Engine (id in engines.yaml) of the run."),
    "vllm_version": opt(nullable(t_version), "vLLM release of the run (null: a nightly)."),
    "note": evidence(nullable(t_str), "Reviewers' note (e.g. which catalog model stands in for an "
                     "uncatalogued one, and why)."),
}
UPSTREAM_FILE_SPEC: Spec = {
    "commit": req(t_commit, "The upstream club-3090 commit the file is fetched at."),
    "size": req(t_nonneg_int, "Size in bytes; a fetched file of another size is refused."),
    "sha256": req(t_sha256, "SHA-256 of the file's bytes; a fetched file with another digest is refused "
                  "(exit 65) and nothing starts."),
    "executable": req(t_bool, "Whether the file is written executable into the bundle (scripts)."),
}
UPSTREAM_SPEC: Spec = {
    "repo": req(t_str, "The upstream GitHub repository (`owner/name`)."),
    "commit": opt(nullable(t_commit_prefix), "The upstream commit the catalog was synced from (a full "
                  "SHA; an abbreviated one for an older snapshot); `club3090 --version` and every "
                  "emitted file's header show it.", None),
    "engine_preference": evidence(map_of(list_of(t_str)), "Upstream's engine-family order per GPU-count "
                             "class (`single`, `dual`, `multi`): which family it offers first.", {}),
    "recommended_default_models": evidence(list_of(t_id, unique=True), "Models (ids in models.yaml) "
                                      "upstream recommends first.", ()),
}
# what an anchor without a profile must record itself (nothing to fall back to)
ANCHOR_SELF_DESCRIBING = ("model", "ctx", "mem_util", "kv_format", "max_num_seqs", "drafter", "engine")

CORRECTION_SPEC: Spec = {
    "paths": req(list_of(t_str, unique=True), "Key paths of the corrected values, as the loader "
                 "reports problems (`arches['X'].tp_divisors`); each must name a record of this file."),
    "upstream": req(t_any, "What upstream's data says."),
    "evidence": Field(t_str, True, None, "Why the catalog deviates, with the evidence.", documentary=True),
}


# Keys earlier catalogs carried, and where the fact lives now: an old copy gets this instead of a
# bare "unknown key".
RETIRED_KEYS: Mapping[str, str] = {
    "max_ctx": "renamed to 'max_model_len'",
    "pin": "read from 'image' (<engine-id>@<tag>)",
    "vllm_version": "read from 'image'",
    "architecture": "read from hf_config.architectures[0]",
    "max_ctx_supported": "read from hf_config max_position_embeddings",
    "attention_k_eq_v": "read from hf_config",
    "facts": "the model's geometry is its hf_config only",
    "compatible_drafters": "list the model in a drafter's 'model_compat'",
    "param_slots": "compose's PARAM_SLOTS table applies to the captured service",
    "trust_remote_code_in_shipped": "read from the captured service",
    "deprecated": "set 'deprecated_on' to the retirement date",
}


@dataclass(frozen=True, slots=True)
class FileSchema:
    name: str                          # "gpus.yaml"
    section: str                       # "gpus"
    kind: str                          # "mapping" (id -> record) or "list"
    spec: Spec
    doc: str
    nested: Mapping[str, Nested] = field(default_factory=dict)


FILE_SCHEMAS: tuple[FileSchema, ...] = (
    FileSchema("gpus.yaml", "gpus", "mapping", GPU_SPEC,
               "GPU cards by id: memory, compute capability and the names `--gpus` accepts."),
    FileSchema("kv_formats.yaml", "kv_formats", "mapping", KV_SPEC,
               "KV-cache formats by id: SM window, the vLLM flag value and which engines serve them. "
               "Storage sizes are the estimator's (`club3090.fit.kv_formats`)."),
    FileSchema("engines.yaml", "engines", "mapping", ENGINE_SPEC,
               "Serving engines by id: image, pin, SM floor and what they serve.", ENGINE_NESTED),
    FileSchema("drafters.yaml", "drafters", "mapping", DRAFTER_SPEC,
               "Speculative-decoding drafters by id."),
    FileSchema("models.yaml", "models", "mapping", MODEL_SPEC,
               "Curated models by id: the model's config.json and its weight variants.", MODEL_NESTED),
    FileSchema("arches.yaml", "arches", "mapping", ARCH_SPEC,
               "Architecture rows by `architectures[0]` class name: tested engine pins, TP sizes, "
               "trust-remote-code evidence.", ARCH_NESTED),
    FileSchema("patches.yaml", "patches", "mapping", PATCH_SPEC,
               "Patches by id: where they are load-bearing, how they are wired, what a failed drift "
               "guard means.", PATCH_NESTED),
    FileSchema("profiles.yaml", "profiles", "mapping", PROFILE_SPEC,
               "Serving profiles by key (`vllm/minimal`): the serving shape and the captured shipped "
               "compose.", PROFILE_NESTED),
    FileSchema("anchors.yaml", "anchors", "list", ANCHOR_SPEC,
               "Measured vLLM start-ups with the inputs each run used; `kv-calc --calibration` "
               "scores the estimator against them."),
    FileSchema("upstream.yaml", "upstream", "mapping", UPSTREAM_SPEC,
               "The upstream project the catalog is synced from, by name (`club-3090`): its repository, "
               "the commit (the catalog's provenance) and the registry sections that are not per entry. "
               "Written by `tools/sync_upstream.py`."),
    FileSchema("upstream_files.yaml", "upstream_files", "mapping", UPSTREAM_FILE_SPEC,
               "Files of the upstream club-3090 project that curated composes mount (chat templates, "
               "patch overlays, sidecar scripts), by their path there: `club3090 up` fetches each at its "
               "commit into the bundle folder and checks its size and sha256."),
)
SCHEMA_BY_FILE: Mapping[str, FileSchema] = {s.name: s for s in FILE_SCHEMAS}
FILES = tuple(s.name for s in FILE_SCHEMAS)
