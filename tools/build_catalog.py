#!/usr/bin/env python3
"""One-off converter: upstream club-3090 facts -> club3090's own catalog YAML.

Reads the upstream reference tree, the calibration facts and the Hub fixtures (default
locations under ../shared) and writes ``src/club3090/catalog/data/*.yaml``. The shipped YAML is
the source of truth afterwards; the package never reads ../shared at run time. Re-running is
deterministic. Only numbers and identifiers carry over; every comment and description in the
output is ours.

    python tools/build_catalog.py [--shared ../shared] [--out src/club3090/catalog/data]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
MIB = 1024 * 1024
GB = 10 ** 9
SCHEMA = 1
REFERENCE_GPU = "rtx-3090"

HEADER = ("# club3090 catalog data ({name}). Generated once from the upstream club-3090 facts by\n"
          "# tools/build_catalog.py, then maintained by hand. Schema: README.md, section 'Catalog layout'.\n")


# --------------------------------------------------------------------------- helpers

def load_yaml(path: Path) -> Any:
    with open(path, encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def num(value: Any) -> Any:
    """Upstream sizes: a number, or the word 'variable' (= not recorded)."""
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def gb_to_bytes(value: Any) -> int | None:
    value = num(value)
    return None if value is None else int(round(value * GB))


def sm(value: Any) -> str:
    return f"{float(value):.1f}"


def innermost_default(token: str) -> str | None:
    """'${A:-${B:-8032}}:8000' -> '8032'; '${TP:-2}' -> '2'; a literal -> itself."""
    match = None
    for match in re.finditer(r":-([^${}]*)\}", token):
        pass
    if match is not None:
        return match.group(1)
    return None if "${" in token else token


# Our wording for upstream's constraint / reason / guard sentences, keyed by the start of the
# upstream sentence. The converter fails on a sentence it has no wording for.
REWORDED = {
    "A reasoning-disabled APEX launch": "With reasoning disabled, APEX output has no empty think stubs and tool/chat output stays coherent with the template mounted; compare runs only with a symmetric restart, settle and at least three runs per arm.",
    "AutoRound INT4 MoE intermediate 704": "AutoRound INT4 weights fail Marlin K alignment on Ampere (MoE intermediate 704); use the AWQ compressed-tensors weights on 24 GB Ampere cards.",
    "AutoRound INT4 TP paths may need": "AutoRound INT4 under tensor parallelism needs the Marlin sub-tile padding overlay until vllm#40361 is merged.",
    "Boot-fit does not imply": "Starting up does not prove long-context stability; single-card vLLM can still fail as context accumulates.",
    "Built-in MTP measured slower": "The built-in MTP head was measured slower at TP=2 here; the default runs without it.",
    "Carnice JSON tool-call smoke": "Carnice JSON tool calls (hermes parser) and reasoning delimiters keep working with the template mounted; compare runs only with a symmetric restart, settle and at least three runs per arm.",
    "Engine DEPRECATED 2026-06-05 (#254)": "Engine deprecated 2026-06-05: the nightly image was withdrawn and the Genesis path is on hold.",
    "Engine DEPRECATED 2026-06-05 (#327)": "Engine deprecated 2026-06-05: the nightly image was withdrawn and DFlash does not work on Qwen3-Next.",
    "Engine DEPRECATED 2026-06-06 (#326)": "Engine deprecated 2026-06-06: the nightly image was withdrawn; the AWQ MoE weights serve on vllm-stable v0.22.0.",
    "Gemma 3 hybrid-SWA KV specifics": "Gemma 3 sliding-window KV details are priced per layer, not asserted by this row.",
    "Gemma 4 26B-A4B AWQ compressed-tensors MoE": "Gemma 4 26B-A4B AWQ MoE expert keys remap and the weights load.",
    "Gemma 4 26B-A4B INT8 per-token-head": "Gemma 4 26B-A4B int8 per-token-head KV pages unify on the pinned v0.22.0 image (padded KV shape helper present).",
    "Gemma 4 INT8 per-token-head KV": "Gemma 4 int8 per-token-head KV pages unify on the pinned v0.22.0 image (padded KV shape helper present).",
    "Gemma 4 streamed multi-tool": "A streamed Gemma 4 response with several tool calls keeps the arguments of every call on the pinned v0.22.0 image.",
    "Gemma4UnifiedVisionEmbedder loads": "The unified Gemma 4 vision embedder loads unquantized with the default soft-token count, so the W4A16 checkpoint serves unmodified.",
    "Global attention KV head count caps": "The global-attention KV head count limits the shipped TP to 2.",
    "Hybrid SWA has heterogeneous": "Sliding and global layers use different head sizes; TurboQuant KV for Gemma 4 on Ampere does not work on the current pins.",
    "Known current coverage boundary": "These composes do not run the local sidecar yet, so the fix is not delivered there.",
    "MoE expert-tile / quant-kernel": "MoE expert tiling and quantized-kernel alignment are checked per repo, not by this row.",
    "On the pinned :gemma image": "On the pinned :gemma image the fp8 Marlin GEMM handles K=352/1056 on sm_86 and DiffusionGemma answers coherently at TP=2.",
    "Preview path is Genesis-free": "The preview path runs without Genesis and without TurboQuant KV until Genesis supports a newer nightly.",
    "Production Genesis path waits": "The Genesis path waits for support on a nightly after vllm#42521.",
    "Quant/dtype + vision-tower": "Quantization, dtype and vision-tower support are checked per repo, not by this row.",
    "Quant/dtype compatibility must": "Quantization and dtype support are checked per repo, not by this row.",
    "Quantization and dtype support are checked": "Quantization and dtype support are checked per repo, not by this row.",
    "Qwen3-Coder streaming SSE not silenced": "Qwen3-Coder streaming keeps emitting events when the prose contains a literal <tool_call> token.",
    "Streaming tool-call (XML <tool_call>)": "Streaming XML tool calls and reasoning delimiters keep working with the template mounted; compare runs only with a symmetric restart, settle and at least three runs per arm.",
    "Text-only wrapper shares": "The text-only class has the same sliding-window KV constraints as the multimodal one.",
    "TurboQuant KV is Genesis-gated": "TurboQuant KV needs the Genesis patch set.",
    "Use int8_per_token_head for long-context": "On Ampere use int8_per_token_head KV for long context; fp8_e4m3 KV does not run on sm_86.",
    "Vision wrapper shares the Gemma 3": "The vision class has the same Gemma 3 sliding-window KV constraints, checked per layer.",
    "agent client sending truncate_prompt_tokens": "A client that sends truncate_prompt_tokens gets no HTTP 400.",
    "tool_choice=required returns": "tool_choice=required returns a non-empty tool_calls list with the fallback overlay applied.",
    "vLLM AutoRound W4A16 TP shard loads": "AutoRound W4A16 shards load under TP without the Marlin sub-tile assertion (overlay targets exist in the image).",
}


def reword(text: str | None) -> str | None:
    if text is None:
        return None
    for start, ours in REWORDED.items():
        if text.startswith(start):
            return ours
    raise SystemExit(f"no wording for upstream sentence: {text[:80]!r}")


# --------------------------------------------------------------------------- GPUs

# nvidia-smi "Total" memory in MiB (what the driver reports), SM, bandwidth GB/s, NVLink.
GPUS: list[dict[str, Any]] = [
    dict(id="rtx-3090", display_name="NVIDIA GeForce RTX 3090", mib=24576, sm="8.6", bw=936,
         nvlink=True, arch="ampere", aliases=["3090", "rtx3090", "rtx-3090", "geforce-rtx-3090"]),
    dict(id="rtx-3090-ti", display_name="NVIDIA GeForce RTX 3090 Ti", mib=24564, sm="8.6", bw=1008,
         nvlink=True, arch="ampere", aliases=["3090ti", "3090-ti", "rtx3090ti", "rtx-3090ti",
                                              "geforce-rtx-3090-ti"]),
    dict(id="rtx-3060-12gb", display_name="NVIDIA GeForce RTX 3060 12GB", mib=12288, sm="8.6", bw=360,
         nvlink=False, arch="ampere", aliases=["3060", "rtx3060", "rtx-3060", "3060-12gb",
                                               "rtx-3060-12gb", "geforce-rtx-3060"]),
    dict(id="rtx-a5000", display_name="NVIDIA RTX A5000", mib=24564, sm="8.6", bw=768,
         nvlink=True, arch="ampere", aliases=["a5000", "rtxa5000"]),
    dict(id="rtx-a6000", display_name="NVIDIA RTX A6000", mib=49140, sm="8.6", bw=768,
         nvlink=True, arch="ampere", aliases=["a6000", "rtxa6000"]),
    dict(id="a100-40gb", display_name="NVIDIA A100 40GB", mib=40960, sm="8.0", bw=1555,
         nvlink=True, arch="ampere", aliases=["a100-40g", "a100-sxm4-40gb", "a100-pcie-40gb",
                                              "a100-40gb-pcie"]),
    dict(id="a100-80gb", display_name="NVIDIA A100 80GB", mib=81920, sm="8.0", bw=2039,
         nvlink=True, arch="ampere", aliases=["a100-80g", "a100-sxm4-80gb", "a100-80gb-pcie",
                                              "a100-pcie-80gb"]),
    dict(id="l4", display_name="NVIDIA L4", mib=23034, sm="8.9", bw=300,
         nvlink=False, arch="ada", aliases=["nvidia-l4"]),
    dict(id="l40s", display_name="NVIDIA L40S", mib=46068, sm="8.9", bw=864,
         nvlink=False, arch="ada", aliases=["nvidia-l40s"]),
    dict(id="rtx-4090", display_name="NVIDIA GeForce RTX 4090", mib=24564, sm="8.9", bw=1008,
         nvlink=False, arch="ada", aliases=["4090", "rtx4090", "geforce-rtx-4090"]),
    dict(id="h100-80gb", display_name="NVIDIA H100 80GB HBM3", mib=81559, sm="9.0", bw=3350,
         nvlink=True, arch="hopper", aliases=["h100", "h100-sxm", "h100-sxm5", "h100-80gb-hbm3",
                                              "h100-sxm5-80gb", "h100-pcie", "h100-80g"]),
    dict(id="h200", display_name="NVIDIA H200", mib=143771, sm="9.0", bw=4800,
         nvlink=True, arch="hopper", aliases=["h200-141gb", "h200-sxm", "h200-nvl"]),
    dict(id="rtx-5090", display_name="NVIDIA GeForce RTX 5090", mib=32607, sm="12.0", bw=1792,
         nvlink=False, arch="blackwell", aliases=["5090", "rtx5090", "geforce-rtx-5090"]),
    dict(id="rtx-6000-pro-blackwell", display_name="NVIDIA RTX PRO 6000 Blackwell", mib=97887,
         sm="12.0", bw=1792, nvlink=False, arch="blackwell",
         aliases=["rtx-pro-6000", "rtxpro6000", "pro6000", "rtx-pro-6000-blackwell",
                  "rtx-pro-6000-blackwell-workstation-edition", "rtx-6000-pro"]),
    dict(id="t4", display_name="NVIDIA Tesla T4", mib=15360, sm="7.5", bw=320,
         nvlink=False, arch="turing", aliases=["tesla-t4", "nvidia-t4"]),
]


def build_gpus(ref: Path) -> dict[str, Any]:
    upstream = {load_yaml(Path(f))["id"] for f in glob.glob(str(ref / "profiles/hardware/*.yml"))}
    ours = {g["id"] for g in GPUS}
    missing = upstream - ours
    if missing:
        raise SystemExit(f"upstream hardware cards missing from the GPU table: {sorted(missing)}")
    out = {}
    for g in GPUS:
        out[g["id"]] = {
            "display_name": g["display_name"],
            "aliases": g["aliases"],
            "memory_bytes": g["mib"] * MIB,
            "sm": g["sm"],
            "bandwidth_gbps": g["bw"],
            "nvlink": g["nvlink"],
            "arch": g["arch"],
        }
    return {"schema_version": SCHEMA, "gpus": out}


# --------------------------------------------------------------------------- KV formats

def build_kv_formats() -> dict[str, Any]:
    # Storage sizes are not catalog data: club3090.fit.kv_formats prices every format listed here.
    def kv(vllm_arg, engines, min_sm=None, emittable=True, max_sm=None, note=""):
        row: dict[str, Any] = {"min_sm": min_sm, "vllm_arg": vllm_arg, "engines": engines,
                               "emittable": emittable}
        if max_sm is not None:
            row["max_sm"] = max_sm
        if note:
            row["note"] = note
        return row

    v, l, both = ["vllm"], ["llama.cpp"], ["vllm", "llama.cpp"]
    formats = {
        "auto": kv(None, v, note="KV stored in the model dtype; the flag is omitted."),
        "bf16": kv(None, v, min_sm="8.0", note="Equals the model dtype on bf16 models; flag omitted."),
        "fp16": kv(None, v, note="Equals the model dtype on fp16 models; flag omitted."),
        "fp32": kv(None, v, note="Only as the model dtype of a float32 model; flag omitted."),
        "fp8": kv("fp8", v, min_sm="8.6", note="Same storage as fp8_e4m3."),
        "fp8_e4m3": kv("fp8", v, min_sm="8.6",
                       note="Floor 8.6 at the current upstream pins (it was 9.0 earlier)."),
        "fp8_e5m2": kv("fp8_e5m2", v),
        "int8_per_token_head": kv("int8_per_token_head", v,
                                  note="Needs the per-token-head KV overlay on v0.22.0; the shipped "
                                       "composes pass int8_per_token_head (upstream's table said auto+PTH)."),
        "fp8_per_token_head": kv("fp8_per_token_head", v, min_sm="8.9"),
        "nvfp4": kv("nvfp4", v, min_sm="10.0", max_sm="10.3",
                    note="4-bit values plus an 8-bit scale per 16 elements; datacenter Blackwell only."),
        "turboquant_3bit_nc": kv("turboquant_3bit_nc", v, min_sm="9.0", emittable=False,
                                 note="Genesis patch set only; never written into a generated compose."),
        # SYSTEM.md section 5: a turboquant* KV format makes a profile Genesis-equipped
        "turboquant_k8v4": kv("turboquant_k8v4", v, emittable=False,
                              note="Genesis patch set only; never written into a generated compose."),
        "q8_0": kv("q8_0", l),
        "q5_0": kv("q5_0", l),
        "q4_1": kv("q4_1", l),
        "q4_0": kv("q4_0", both),
        "k8v4": kv("k8v4", both),
    }
    return {"schema_version": SCHEMA, "kv_formats": formats}


# --------------------------------------------------------------------------- engines

def parse_pin_tag(method: str, spec: str) -> str:
    if method == "pip":
        return spec[len("vllm=="):] if spec.startswith("vllm==") else spec[len("vllm"):]
    if "@sha256:" in spec:
        return spec.split("@", 1)[1]
    tag = spec.rsplit(":", 1)[1] if ":" in spec.rsplit("/", 1)[-1] else "latest"
    return tag[len("nightly-"):] if tag.startswith("nightly-") else tag


def vllm_version(engine_type: str, method: str, spec: str) -> str | None:
    if engine_type != "vllm":
        return None
    if method == "pip":
        m = re.fullmatch(r"vllm==(\d+\.\d+\.\d+)", spec)
        return m.group(1) if m else None
    m = re.search(r":v(\d+\.\d+\.\d+)$", spec)
    return m.group(1) if m else None


def build_engines(ref: Path) -> dict[str, Any]:
    out = {}
    for f in sorted(glob.glob(str(ref / "profiles/engines/*.yml"))):
        e = load_yaml(Path(f))
        method, spec = e["install"]["method"], e["install"]["spec"]
        overlays = []
        for o in e.get("vendored_overlays") or []:
            overlays.append({
                "id": o["id"],
                "pr_url": o.get("pr_url"),
                "upstream_status": o.get("upstream_status") or "unknown",
                "merged_in_version": o.get("upstream_merged_in_version"),
                "local_status": o.get("local_status") or "vendored",
                "delivery": o.get("delivery"),
            })
        out[e["id"]] = {
            "display_name": e["display_name"],
            "type": e["type"],
            "stability": e.get("stability", "stable"),
            "install_method": method,
            "image": spec,
            "pin": f"{e['id']}@{parse_pin_tag(method, spec)}",
            "vllm_version": vllm_version(e["type"], method, spec),
            "min_sm": sm(e["min_sm"]),
            "supported_kv_formats": list(e.get("supported_kv_formats") or []),
            "supported_weight_formats": list(e.get("supported_weight_formats") or []),
            "supported_model_families": list(e.get("supported_model_families") or []),
            "supported_drafter_methods": list(e.get("supported_drafters") or []),
            "features": {k: bool(v) for k, v in (e.get("features") or {}).items()},
            "vendored_overlays": overlays,
            "required_genesis": bool(e.get("required_genesis")),
            "genesis_pin": e.get("genesis_pin"),
        }
    return {"schema_version": SCHEMA, "engines": out}


# --------------------------------------------------------------------------- drafters

def build_drafters(ref: Path) -> dict[str, Any]:
    out = {}
    for f in sorted(glob.glob(str(ref / "profiles/drafters/*.yml"))):
        d = load_yaml(Path(f))
        download = d.get("download") or {}
        out[d["id"]] = {
            "display_name": d["display_name"],
            "method": d["spec_method"],
            "n_default": d["n_default"],
            "n_max": d["n_max"],
            "vram_footprint_bytes": gb_to_bytes(d.get("vram_footprint_gb")),
            "speculative_config_template": d.get("speculative_config_template"),
            "local_model_path": d.get("local_model_path"),
            "model_compat": list(d.get("model_compat") or []),
            "hf_repo": download.get("hf_repo") if isinstance(download, dict) else None,
            "status": d.get("status", "experimental"),
            "engine_type": (d.get("engine_compat") or {}).get("engine_type"),
        }
    return {"schema_version": SCHEMA, "drafters": out}


# --------------------------------------------------------------------------- models

QUANT_METHOD = {"autoround": "auto-round", "awq": "awq", "gptq": "gptq", "fp8": "fp8",
                "compressed-tensors": "compressed-tensors", "modelopt": "modelopt", "gguf": "gguf"}

# curated model -> (Hub fixture folder providing config.json, note)
HF_CONFIG_FIXTURES = {
    "qwen3.6-35b-a3b": "Qwen--Qwen3.6-35B-A3B",
    "qwen3.6-27b": "Qwen--Qwen3.5-27B",
    "gemma-4-31b": "google--gemma-4-31B-it",
    "gemma-4-26b-a4b": "google--gemma-4-26B-A4B",
}

# curated model -> config.json architectures[0]
MODEL_ARCH = {
    "qwen3.6-27b": "Qwen3_5ForConditionalGeneration",
    "qwen3.6-35b-a3b": "Qwen3_5MoeForConditionalGeneration",
    "gemma-4-31b": "Gemma4ForConditionalGeneration",
    "gemma-4-26b-a4b": "Gemma4ForConditionalGeneration",
    "gemma-4-12b": "Gemma4ForConditionalGeneration",
    # upstream profiles/models/diffusiongemma-26b-a4b.yml: "Arch class DiffusionGemmaForBlockDiffusion"
    "diffusiongemma-26b-a4b": "DiffusionGemmaForBlockDiffusion",
    "qwen3.6-40b-deckard": "Qwen3_5ForCausalLM",
}


# Config keys the model facts do not record, for models with no fixture config. Each value comes
# from the model's real config.json and is cross-checked against a measured boot.
#   gemma-4-12b: google/gemma-4-12B-it (Gemma4UnifiedForConditionalGeneration, transformers 5.10)
#     text_config has num_global_key_value_heads 1 (global_head_dim 512, 8 global of 48 layers,
#     num_kv_shared_layers 0), as quoted verbatim by public config-decoding tests. Cross-check:
#     with one global KV head (replicated at TP2) the upstream 12B boot log (TP2, bf16, 131,072,
#     util 0.90, --max-num-batched-tokens 4096: 8.16 GiB, 384,019 tokens, 2.93x) is reproduced
#     to 0.1 %; the facts' "measured_kv_growing_bpt_tp1 45,632 B" is that same boot's pool / tokens.
CONSTRUCTED_CONFIG_EXTRA: dict[str, dict[str, Any]] = {
    "gemma-4-12b": {"num_global_key_value_heads": 1, "num_kv_shared_layers": 0},
}


# On-disk weight sizes where upstream's model file disagrees with its own shipped composes. The
# composes state the downloaded size; the model file's figure is a rounded estimate.
#   gemma-4-31b autoround-int4: model file 18.0 GB; every compose shipping it says "target:
#   Intel/gemma-4-31B-it-int4-AutoRound (21.2 GB, vision preserved)" (dual/autoround-int4/*.yml).
#   21.2 GB reproduces the measured pools (bf16-mtp 196,527 tokens, int8-mtp 447K) within 5 %;
#   18.0 GB over-predicts them by ~18 % (docs/ACCURACY.md).
WEIGHT_SIZE_GB: dict[tuple[str, str], float] = {
    ("gemma-4-31b", "autoround-int4"): 21.2,
}


def construct_hf_config(mid: str, a: dict[str, Any]) -> dict[str, Any]:
    """config.json-shaped dict from the recorded architecture facts (no fixture available)."""
    arch = MODEL_ARCH[mid]
    text: dict[str, Any] = {
        "hidden_size": a["hidden_size"],
        "num_hidden_layers": a["num_hidden_layers"],
        "num_attention_heads": a["num_attn_heads"],
        "num_key_value_heads": a["num_kv_heads"],
        "max_position_embeddings": a["max_ctx_supported"],
        "dtype": "bfloat16",
    }
    if a.get("intermediate_size"):
        text["intermediate_size"] = a["intermediate_size"]
    family = a["family"]
    if family.startswith("gemma4") or family == "diffusion-gemma":
        n = a["num_hidden_layers"]
        full = a["num_full_attn_layers"]
        every = n // full
        text.update({
            "model_type": "gemma4_text",
            "head_dim": a["head_dim_sliding"],
            "global_head_dim": a["global_head_dim"],
            "sliding_window": a["sliding_window"],
            "attention_k_eq_v": bool(a.get("attention_k_eq_v")),
            "layer_types": ["full_attention" if (i + 1) % every == 0 else "sliding_attention"
                            for i in range(n)],
            "tie_word_embeddings": True,
            "vocab_size": 262144,
        })
        if a.get("num_global_kv_heads"):
            text["num_global_key_value_heads"] = a["num_global_kv_heads"]
        for key, value in CONSTRUCTED_CONFIG_EXTRA.get(mid, {}).items():
            text.setdefault(key, value)
        if a.get("num_experts"):
            text.update({"enable_moe_block": True, "num_experts": a["num_experts"],
                         "top_k_experts": a["num_experts_per_tok"],
                         "moe_intermediate_size": a["moe_intermediate_size"]})
        return {"architectures": [arch], "model_type": "gemma4", "text_config": text}
    # qwen35-dense (Deckard): plain GQA decoder
    text.update({"model_type": "qwen3_5_text", "head_dim": a["head_dim_attn"], "vocab_size": 248320,
                 "tie_word_embeddings": False})
    return {"architectures": [arch], **text}


def check_dims(mid: str, cfg: dict[str, Any], a: dict[str, Any]) -> list[str]:
    t = cfg.get("text_config", cfg)
    pairs = [("hidden_size", "hidden_size"), ("num_hidden_layers", "num_hidden_layers"),
             ("num_attention_heads", "num_attn_heads"), ("num_key_value_heads", "num_kv_heads")]
    if "head_dim_attn" in a:
        pairs.append(("head_dim", "head_dim_attn"))
    if "head_dim_sliding" in a:
        pairs.append(("head_dim", "head_dim_sliding"))
    if "global_head_dim" in a:
        pairs.append(("global_head_dim", "global_head_dim"))
    if "num_experts" in a:
        pairs.append(("num_experts", "num_experts"))
    out = []
    for ck, fk in pairs:
        if t.get(ck) != a.get(fk):
            out.append(f"{mid}: config {ck}={t.get(ck)!r} vs facts {fk}={a.get(fk)!r}")
    return out


FACT_KEYS = ("num_gdn_layers", "num_attn_layers", "num_full_attn_layers", "num_sliding_attn_layers",
             "head_dim_attn", "head_dim_sliding", "global_head_dim", "sliding_window",
             "num_global_kv_heads", "linear_num_v_heads", "linear_num_k_heads", "linear_v_head_dim",
             "linear_k_head_dim", "linear_conv_kernel_dim", "num_experts", "num_experts_per_tok",
             "moe_intermediate_size", "shared_expert_intermediate_size", "active_params_b",
             "mtp_num_hidden_layers", "attn_output_gate", "vision_capable", "kv_calc_supported",
             "decode_granularity", "canvas_tokens", "hidden_size", "num_hidden_layers",
             "num_attn_heads", "num_kv_heads", "intermediate_size")


def build_models(ref: Path, shared: Path, registry: dict[str, Any]) -> dict[str, Any]:
    facts = json.loads((shared / "calibration/club3090_model_facts.json").read_text())["models"]
    fixtures = shared / "fixtures/hub"
    out = {}
    warnings: list[str] = []
    for f in sorted(glob.glob(str(ref / "profiles/models/*.yml"))):
        m = load_yaml(Path(f))
        mid = m["id"]
        fact = facts.get(mid, {})
        arch_facts = dict(fact.get("architecture") or {})
        for k in FACT_KEYS:  # the upstream model file wins where both record a value
            if k in m:
                arch_facts[k] = m[k]
        if mid in HF_CONFIG_FIXTURES:
            folder = HF_CONFIG_FIXTURES[mid]
            cfg = json.loads((fixtures / folder / "config.json").read_text())
            source = f"fixture {folder.replace('--', '/')} config.json"
            if mid == "qwen3.6-27b":
                source += " (Qwen3.5-27B: same geometry as Qwen3.6-27B per the model facts)"
        else:
            cfg = construct_hf_config(mid, arch_facts)
            source = "constructed from the recorded architecture facts"
            if mid in CONSTRUCTED_CONFIG_EXTRA:
                source += (" plus " + ", ".join(sorted(CONSTRUCTED_CONFIG_EXTRA[mid]))
                           + " from the real config.json (tools/build_catalog.py)")
        warnings += check_dims(mid, cfg, arch_facts)

        fact_variants = fact.get("weights_variants") or {}
        weights = {}
        upstream_variants = dict(m.get("weights") or {})
        for vid, fv in fact_variants.items():  # variants recorded only in the later facts snapshot
            if vid not in upstream_variants and fv.get("format"):
                upstream_variants[vid] = fv
        for vid, w in upstream_variants.items():
            fv = fact_variants.get(vid, {})
            repos: list[str] = []
            for r in [w.get("hf_repo"), *(w.get("hf_repos") or []), fv.get("hf_repo"),
                      *(fv.get("hf_repos") or [])]:
                if r and r not in repos:
                    repos.append(r)
            fmt = w["format"]
            weights[vid] = {
                "hf_repos": repos,
                "format": fmt,
                "quantization": QUANT_METHOD.get(fmt),
                "size_bytes": gb_to_bytes(WEIGHT_SIZE_GB.get((mid, vid), w.get("size_gb"))),
                "status": w.get("status", "experimental"),
                "kind": w.get("kind", "main"),
                "engine": w.get("engine"),
                "files": list(w.get("files") or []),
                "local_subdir": w.get("local_subdir"),
                "revision": w.get("revision"),
            }
        out[mid] = {
            "display_name": m["display_name"],
            "family": m["family"],
            "architecture": MODEL_ARCH[mid],
            "max_ctx_supported": m["max_ctx_supported"],
            "attention_k_eq_v": bool(m.get("attention_k_eq_v")),
            "requires_genesis": bool(m.get("requires_genesis")),
            "default_weight_variant": m["default_weight_variant"],
            "compatible_drafters": list(m.get("compatible_drafters") or []),
            "valid_tp": list(m.get("valid_tp") or [1]),
            "facts": {k: arch_facts[k] for k in FACT_KEYS if k in arch_facts},
            "hf_config_source": source,
            "hf_config": cfg,
            "weights": weights,
        }
    for w in warnings:
        print("dimension check:", w, file=sys.stderr)
    return {"schema_version": SCHEMA, "models": out}


# --------------------------------------------------------------------------- profiles

GENESIS_RE = re.compile(r"_genesis|GENESIS_PIN|GENESIS_ENABLE")
SLOT_FLAGS = {
    "tensor_parallel_size": ("--tensor-parallel-size", "tp"),
    "max_model_len": ("--max-model-len", "max_ctx"),
    "gpu_memory_utilization": ("--gpu-memory-utilization", "mem_util"),
    "kv_cache_dtype": ("--kv-cache-dtype", "kv_format"),
    "max_num_seqs": ("--max-num-seqs", "max_num_seqs"),
    "speculative_config": ("--speculative-config", "drafter"),
}


def runtime_for(key: str, entry: dict[str, Any], text: str, captured: dict[str, Any]) -> dict[str, Any]:
    doc = yaml.safe_load(text)
    services = doc["services"]
    if len(services) != 1:
        raise SystemExit(f"{key}: expected one service, found {len(services)}")
    name, service = next(iter(services.items()))
    genesis = bool(GENESIS_RE.search(text)) or entry["kv_format"].startswith("turboquant")
    if genesis != bool(captured["genesis_equipped"]):
        raise SystemExit(f"{key}: genesis_equipped disagrees with the upstream capture")
    if GENESIS_RE.search(text):
        evidence = "the shipped compose names the Genesis patch set (_genesis / GENESIS_* token)"
    elif genesis:
        evidence = f"kv_format {entry['kv_format']} is a TurboQuant format (Genesis only)"
    else:
        evidence = "no Genesis token in the shipped compose and the KV format is not TurboQuant"
    command = service.get("command") or []
    if isinstance(command, str):
        command = command.split()
    slots: dict[str, Any] = {}
    ports = service.get("ports") or []
    if ports:
        slots["ports"] = {"shipped": ports[0], "source": "port", "default": innermost_default(str(ports[0]).rsplit(":", 1)[0])}
    for slot, (flag, source) in SLOT_FLAGS.items():
        if flag in command:
            i = command.index(flag)
            value = str(command[i + 1])
            slots[slot] = {"flag": flag, "shipped": value, "source": source,
                           "default": None if slot == "speculative_config" else innermost_default(value)}
    for item in service.get("environment") or []:
        if isinstance(item, str) and item.startswith("NVLINK_MODE="):
            slots["nvlink_env"] = {"env": "NVLINK_MODE", "shipped": item, "source": "requires_nvlink",
                                   "default": innermost_default(item.split("=", 1)[1])}
    entry_text = service.get("entrypoint") or []
    entry_text = entry_text if isinstance(entry_text, list) else [entry_text]
    trc = "--trust-remote-code" in [str(c) for c in command] or any(
        "--trust-remote-code" in str(e) for e in entry_text)
    insertion = [p for p in ("volumes", "entrypoint") if p in service]
    top = {k: v for k, v in doc.items() if k not in ("services", "version")}
    return {
        "genesis_equipped": genesis,
        "genesis_evidence": evidence,
        "service_name": name,
        "trust_remote_code_in_shipped": trc,
        "insertion_points": insertion,
        "param_slots": slots,
        "top_level": top,
        "service": service,
    }


def build_profiles(ref: Path, registry: dict[str, Any]) -> dict[str, Any]:
    captured = load_yaml(ref / "profiles/profile_runtime.yml")["profiles"]
    out = {}
    for key in sorted(registry):
        e = registry[key]
        row: dict[str, Any] = {
            "model": e["model"],
            "weights_variant": e["weights_variant"],
            "workload": e["workload"],
            "engine": e["engine"],
            "drafter": e["drafter"],
            "kv_format": e["kv_format"],
            "tp": e["tp"],
            "pp": e.get("pp", 1),
            "max_ctx": e["max_ctx"],
            "max_num_seqs": e["max_num_seqs"],
            "mem_util": e["mem_util"],
            "port": e["default_port"],
            "status": e["status"],
            "status_note": None,  # upstream notes are prose; ours are added by hand
            "required_sm": sm(e["required_sm"]) if e.get("required_sm") is not None else None,
            "fallback_sm": sm(e["fallback_sm"]) if e.get("fallback_sm") is not None else None,
            "requires_nvlink": bool(e.get("requires_nvlink")),
            "required_engine_features": list(e.get("required_engine_features") or []),
            "recommended_engine_features": list(e.get("recommended_engine_features") or []),
            "kvcalc_key": None if e.get("kvcalc_key") in (None, "SKIP") else e["kvcalc_key"],
            "category": e.get("category"),
            "compose_path": e["compose_path"],
            "reference_gpu": REFERENCE_GPU,
        }
        if key in captured:
            path = ref / "composes" / e["compose_path"]
            if captured[key]["compose_path"] != e["compose_path"]:
                raise SystemExit(f"{key}: compose path differs between registry and capture")
            row["runtime"] = runtime_for(key, e, path.read_text(encoding="utf-8"), captured[key])
        else:
            row["runtime"] = None
        out[key] = row
    return {"schema_version": SCHEMA, "profiles": out}


# --------------------------------------------------------------------------- arches

NATIVE_EVIDENCE = ("built into vLLM's model registry: a repo that declares this architecture and "
                   "ships no auto_map is served by vLLM's own implementation, so no remote code runs "
                   "(a repo with auto_map still needs the acknowledgement)")
NATIVE_CONSTRAINTS = ["Quantization and dtype support are checked per repo, not by this row."]
# Native vLLM architectures curated to trust_remote_code "false". LlamaForCausalLM stays
# "unverified" as upstream has it.
NATIVE_ROWS = {
    "MistralForCausalLM": ("dense", "dense"),
    "Qwen2ForCausalLM": ("dense", "dense"),
    "Qwen3ForCausalLM": ("dense", "dense"),
    "Qwen3MoeForCausalLM": ("moe", "moe"),
    "Qwen2MoeForCausalLM": ("moe", "moe"),
    "Gemma2ForCausalLM": ("dense", "dense"),
    "Gemma3ForCausalLM": ("dense", "dense"),
    "Gemma3ForConditionalGeneration": ("dense", "dense"),
    "Phi3ForCausalLM": ("dense", "dense"),
    "MixtralForCausalLM": ("moe", "moe"),
    "DeepseekV2ForCausalLM": ("mla-moe", "moe"),
    "DeepseekV3ForCausalLM": ("mla-moe", "moe"),
    "GptOssForCausalLM": ("moe", "moe"),
    "Qwen2VLForConditionalGeneration": ("dense", "dense"),
    "Qwen2_5_VLForConditionalGeneration": ("dense", "dense"),
    "Qwen3VLForConditionalGeneration": ("dense", "dense"),
    "NemotronHForCausalLM": ("hybrid-mamba", "dense"),
    "GPT2LMHeadModel": ("dense", "dense"),
    "Llama4ForConditionalGeneration": ("moe", "moe"),
    "PhiMoEForCausalLM": ("moe", "moe"),
    "GraniteMoeForCausalLM": ("moe", "moe"),
    "Glm4MoeForCausalLM": ("moe", "moe"),
}
CONFIG_ALIASES = {"Qwen3NextForCausalLM": ["Qwen3_5ForConditionalGeneration"]}
STABLE_PIN = "vllm-stable@v0.22.0"


def clean_evidence(text: Any) -> str | None:
    if text in (None, "none", ""):
        return None
    return str(text)


NATIVE_TP = (1, 2, 4, 8, 16)


def build_arches(ref: Path) -> dict[str, Any]:
    rows = load_yaml(ref / "profiles/arch_patches.yml")["arches"]
    xref = load_yaml(ref / "profiles/profile_runtime.yml")["arch_model_xref"]
    out: dict[str, Any] = {}
    for r in rows:
        pins, overlay_pins = [], []
        for p in r["engine_pin"]:
            item = {"pin": p["pin"], "loads": bool(p["loads"])}
            if p.get("reason"):
                item["reason"] = reword(p["reason"])
            if p.get("enables"):
                item["enables"] = list(p["enables"])
            (overlay_pins if p["pin"].startswith("genesis@") else pins).append(item)
        x = xref.get(r["arch"], {})
        trc = str(r["requires_trust_remote_code"]).lower()
        evidence = clean_evidence(r.get("requires_trust_remote_code_evidence"))
        if trc == "false" and evidence and "built-in" in evidence and not x.get("model_slugs"):
            evidence = NATIVE_EVIDENCE
        elif trc == "false" and x.get("model_slugs"):
            evidence = (f"config.json of the curated {', '.join(x['model_slugs'])} weights has no "
                        "auto_map and the repos ship no modeling code, so vLLM's built-in class "
                        "loads them")
        out[r["arch"]] = {
            "family": r["family"],
            "engine_pins": pins,
            "overlay_pins": overlay_pins,
            "required_patches": list(r.get("required_patches") or []),
            "tp_divisors": list(r["valid_tp"]["tp_divisors"]),
            "marlin_alignment_required": bool(r["valid_tp"].get("marlin_alignment_required")),
            "moe_layout": r["valid_tp"].get("moe_layout", "dense"),
            "trust_remote_code": trc,
            "trust_remote_code_evidence": evidence,
            "kernel_constraints": [reword(k) for k in r.get("kernel_constraints") or []],
            "confidence": r["confidence"],
            "status": r["status"],
            "config_architectures": CONFIG_ALIASES.get(r["arch"], []),
            "model_slugs": list(x.get("model_slugs") or []),
        }
    # Upstream moved vllm/gemma-26ba4b-single onto vllm-gemma-stable (the per-token-head KV overlay)
    # and live-validated it on one RTX 3090, but did not add that pin to the MoE row.
    moe = out.get("Gemma4ForConditionalGenerationMoE")
    if moe is not None and not any(p["pin"] == "vllm-gemma-stable@v0.22.0" for p in moe["engine_pins"]):
        moe["engine_pins"].append({"pin": "vllm-gemma-stable@v0.22.0", "loads": True,
                                   "enables": ["int8-per-token-head"]})
    for arch, (family, layout) in NATIVE_ROWS.items():
        row = out.get(arch)
        if row is None:
            row = out[arch] = {
                "family": family, "engine_pins": [], "overlay_pins": [], "required_patches": [],
                "tp_divisors": list(NATIVE_TP), "marlin_alignment_required": False, "moe_layout": layout,
                "trust_remote_code": "false", "trust_remote_code_evidence": NATIVE_EVIDENCE,
                "kernel_constraints": list(NATIVE_CONSTRAINTS), "confidence": "estimated-lower-bound",
                "status": "unverified", "config_architectures": [], "model_slugs": [],
            }
        row["trust_remote_code"] = "false"
        row["trust_remote_code_evidence"] = NATIVE_EVIDENCE
        if not any(p["pin"] == STABLE_PIN for p in row["engine_pins"]):
            row["engine_pins"].insert(0, {"pin": STABLE_PIN, "loads": True})
    for row in out.values():
        if not row["model_slugs"]:
            # upstream's divisors for rows with no curated model record the 1-2 GPU rigs it measured,
            # not a vLLM limit ("registry gap, not an engine limitation"); head geometry still gates TP
            row["tp_divisors"] = sorted(set(row["tp_divisors"]) | set(NATIVE_TP))
    return {"schema_version": SCHEMA, "arches": dict(sorted(out.items()))}


# --------------------------------------------------------------------------- patches

# Patches the data calls load-bearing but whose shipped composes say they were removed on the
# stable v0.21/v0.22 images (comments in composes/.../minimal.yml and dual/.../fp8-mtp.yml). They are
# reported as undelivered rather than wired back into a compose the maintainers validated without them.
_DROPPED_ISSUE = ("removed from the shipped compose when it moved to stable vLLM: confirmed unnecessary "
                  "there, and the overlay breaks on v0.22.0")
DROPPED_FROM_SHIPPED: dict[str, list[dict[str, Any]]] = {
    "qwen-vllm-marlin-pad": [{"profiles": ["vllm/dual"], "issue": _DROPPED_ISSUE}],
    "qwen-vllm-pr35936-required-fallback": [{"profiles": ["vllm/minimal", "vllm/dual"], "issue": _DROPPED_ISSUE}],
}


def build_patches(ref: Path) -> dict[str, Any]:
    rows = load_yaml(ref / "profiles/patches.yml")["patches"]
    out = {}
    for p in rows:
        spec = p.get("delivery_spec") or {}
        mech = p.get("delivery_mechanism") or "none"
        mode = spec.get("mount_mode", "ro")
        mounts: list[str] = []
        invocations: list[str] = []
        for o in spec.get("overlay_files") or []:
            mounts.append(f"./{o['src']}:{o['dest']}:{mode}")
        src = spec.get("script") or spec.get("jinja") or spec.get("sidecar")
        if src and spec.get("mounted_at"):
            mounts.append(f"./{src}:{spec['mounted_at']}:{mode}")
        invoke = spec.get("invoke")
        if invoke and invoke.startswith(("bash ", "sh ", "python", "source ", "--")):
            invocations.append(invoke)  # upstream also has prose here; only commands carry over
        wired = spec.get("wired_at") or []
        wired = [wired] if isinstance(wired, str) else list(wired)
        guard = p.get("drift_guard") or {}
        upstream = p.get("upstream") or {}
        out[p["id"]] = {
            "models": list(p.get("model") or []),
            "files": list(p.get("files") or []),
            "status": p.get("status", ""),
            "load_bearing_composes": sorted({c for lb in (p.get("load_bearing_when") or [])
                                             for c in (lb.get("composes") or [])}),
            "delivery_gaps": [{"profiles": list(g.get("composes") or []), "issue": reword(g.get("issue"))}
                              for g in (p.get("delivery_gaps") or [])] + DROPPED_FROM_SHIPPED.get(p["id"], []),
            "delivery_mechanism": mech,
            "wired_at": wired,
            "mounts": mounts,
            "invocations": invocations,
            "drift_guard_kind": guard.get("kind") or "none",
            "drift_guard_check": reword(guard.get("check")),
            "on_fail": guard.get("on_fail") or "capability-degraded",
            "capability": p.get("capability"),
            "foundational": bool(p.get("foundational")),
            "deprecated": bool(p.get("deprecated_on")),
            "deprecated_on": str(p["deprecated_on"]) if p.get("deprecated_on") else None,
            "upstream_ref": upstream.get("ref"),
            "upstream_status": upstream.get("status") or "unknown",
        }
    return {"schema_version": SCHEMA, "patches": out}


# --------------------------------------------------------------------------- anchors

RENAMED = {
    "vllm/gemma-int8": "vllm/gemma-int8-mtp", "vllm/gemma-mtp": "vllm/gemma-bf16-mtp",
    # the same compose file at that commit (models/gemma-4-31b/vllm/compose/dual/int8.yml) run at
    # 262K with max-num-seqs 1; scored with the profile's max_num_seqs 4 (a larger CUDA-graph and
    # sampler term, so the score is conservative)
    "vllm/gemma-int8-262k": "vllm/gemma-int8-mtp",
    # dual/preview.yml became dual/autoround-int4/fp8.yml: same repo (Intel Qwen3.6-35B-A3B
    # int4-mixed AutoRound), TP2, util 0.92, max-num-seqs 1, no drafter; the anchor carries its
    # context and KV format
    "vllm/qwen-a3b-preview": "vllm/qwen-35b-a3b-dual",
}


def anchor_profile(row: dict[str, Any], registry: dict[str, Any]) -> str | None:
    slug = row.get("compose_slug")
    slug = RENAMED.get(slug, slug)
    if slug in registry:
        return slug
    blob = " ".join(str(row.get(k) or "") for k in ("source_file", "measurement_source",
                                                      "compose_path_at_commit"))
    for key, e in registry.items():
        path = e["compose_path"]
        if path in blob or path.rsplit(".", 1)[0] in blob:
            if e["model"] == row.get("model"):
                return key
    m = re.search(r"\s([\w.-]+)\.yml\s", " " + str(row.get("measurement_source") or "") + " ")
    if m:
        guess = f"vllm/{m.group(1)}"
        if guess in registry and registry[guess]["model"] == row.get("model"):
            return guess
    return None


def gpu_of(text: str) -> tuple[int, str]:
    m = re.match(r"\s*(\d+)\s*x\s*(.+)", text)
    count, name = (int(m.group(1)), m.group(2)) if m else (1, text)
    lowered = name.lower()
    for g in GPUS:
        if g["display_name"].lower().replace("nvidia ", "").replace("geforce ", "") in lowered:
            return count, g["id"]
    if "5090" in lowered:
        return count, "rtx-5090"
    return count, REFERENCE_GPU


# Unit of `measured_peak_gb_per_card`, per source set. Upstream's kv-calc rows say "GB" (and its
# `_meta.units` says 1e9), but the numbers are nvidia-smi MiB / 1024 readings, i.e. GiB:
#  - the 22/22 rows repeat the seed anchors' MiB readings of the same benches divided by 1024:
#    vllm/dual 23.6 = 24,166 MiB, dual4 23.5 = 24,064, gemma-int8 22.2 = 22,733,
#    gemma-a4b-awq 23.45 = 24,013, gemma-a4b-awq-mtp 23.5 = 24,064 (calibration_seed rows);
#  - both kv-calc sets state vram_gb_per_card 24 for the RTX 3090, a 24 GiB (24,576 MiB) card;
#  - the 8/8 set's gemma-12b row is "0.90 x 24 = 21.6" (its calibration file), util x 24 GiB,
#    and its vllm/dual and vllm/minimal rows are the 22/22 rows' 23.6 / 22.4 from the same benches.
# A set not listed here fails the build rather than guess.
PEAK_UNIT_BYTES = {
    "kvcalc-22of22-historical": 1 << 30,
    "kvcalc-current-8of8": 1 << 30,
}


# Models the catalog does not carry, priced with a catalog model of the same geometry. Upstream's
# model facts: Qwen-AgentWorld-35B-A3B is a fine-tune of Qwen3.5-35B-A3B-Base with "the same
# calibrated MoE-hybrid geometry" as qwen3.6-35b-a3b (40 layers: 30 GDN + 10 full attention, 2 KV
# heads x 256, 256 experts top-8); its MTP declaration is normalized to 0 and the run had no drafter,
# so the twin's MTP layers never count. Its checkpoint size is the anchor's recorded weights_bytes.
GEOMETRY_TWINS = {
    "qwen-agentworld-35b-a3b": (
        "qwen3.6-35b-a3b",
        "Qwen-AgentWorld-35B-A3B (cyankiwi AWQ INT4) is not in the catalog; priced with the "
        "qwen3.6-35b-a3b geometry (same MoE-hybrid layers per upstream's model facts) and the "
        "recorded checkpoint size"),
}
# the sets whose rows are upstream kv-calc runs: every input is recorded, a null drafter is "none"
KVCALC_SETS = ("kvcalc-22of22-historical", "kvcalc-current-8of8")


def _first_token(value: Any) -> str | None:
    text = str(value or "").strip()
    return text.split(" ", 1)[0] or None if text else None


def anchor_variant(row: dict[str, Any], model: dict[str, Any]) -> str | None:
    """The catalog variant the row ran: by its Hub repo, else by id (upstream spells some with '_')."""
    repo = str(row.get("hf_repo") or "").lower()
    weights = model.get("weights") or {}
    for vid, v in weights.items():
        if v.get("kind") == "main" and repo and repo in [r.lower() for r in v.get("hf_repos") or []]:
            return vid
    for vid in (row.get("weights_variant"), str(row.get("weights_variant") or "").replace("_", "-")):
        if vid in weights and weights[vid].get("kind") == "main":
            return vid
    return None


def anchor_version(row: dict[str, Any]) -> str | None:
    """Release version of the run's engine (pin 'vllm-v0.21.0', or 'vllm-stable (v0.24.0)'); None for
    nightlies (a dev build's feature set is not a release's)."""
    for text in (row.get("engine_pin"), row.get("engine")):
        m = re.search(r"(?:^|[\s(-])v(\d+\.\d+\.\d+)(?![\w.])", str(text or ""))
        if m:
            return m.group(1)
    return None


def build_anchors(shared: Path, registry: dict[str, Any], models: dict[str, Any],
                  drafters: dict[str, Any], engines: dict[str, Any], kv_formats: dict[str, Any]) -> dict[str, Any]:
    """Anchors with the inputs each measurement recorded (model, weights, TP, KV format, util, context,
    sequences, drafter, engine). ``profile`` links the curated profile that ran, if the catalog has
    it; kv-calc falls back to it only for what the row does not record. Upstream kv-calc rows are
    kept without a profile (archived composes); other sets need one."""
    rows = json.loads((shared / "calibration/club3090_anchors.json").read_text())["anchors"]
    out = []
    seen: dict[str, int] = {}
    for row in rows:
        profile = anchor_profile(row, registry)
        kind = row["set"].split(" ", 1)[0].split("(", 1)[0]
        kvcalc = kind in KVCALC_SETS
        if profile is None and not kvcalc:
            continue
        count, gpu = gpu_of(row["gpus"])
        if row.get("measured_peak_gb_per_card") is not None:
            if kind not in PEAK_UNIT_BYTES:
                raise SystemExit(f"anchors: no recorded unit for measured_peak_gb_per_card in set {kind!r}")
            peak = int(round(float(row["measured_peak_gb_per_card"]) * PEAK_UNIT_BYTES[kind]))
        elif row.get("measured_vram_mib_per_card") is not None:
            peak = int(row["measured_vram_mib_per_card"]) * MIB
        else:
            peak = None
        tokens = row.get("measured_kv_pool_tokens")
        if peak is None and tokens is None:
            continue
        base_id = profile or row.get("compose_slug")
        base = f"{base_id}:{kind}"
        seen[base] = seen.get(base, 0) + 1
        kv = _first_token(row.get("kv_format"))
        entry: dict[str, Any] = {
            "id": base if seen[base] == 1 else f"{base}:{seen[base]}",
            "set": kind,
            "profile": profile,
            "gpu": gpu,
            "gpu_count": count,
            "measured_peak_bytes": peak,
            "measured_kv_tokens": int(tokens) if tokens is not None else None,
            "ctx": row.get("ctx_override") or row.get("max_model_len"),
            "mem_util": row.get("mem_util"),
            "kv_format": kv if kv in kv_formats else None,
            "source": row.get("measurement_source") or row.get("source_file"),
        }
        # the run's own inputs (absent = not recorded; kv-calc then uses the profile's)
        mid, note = row.get("model"), None
        if mid not in models and mid in GEOMETRY_TWINS:
            mid, note = GEOMETRY_TWINS[mid]
        if mid not in models:
            if profile is None:
                print(f"anchors: {entry['id']}: model {row.get('model')!r} not in the catalog; skipped",
                      file=sys.stderr)
                seen[base] -= 1
                continue
            mid = None
        if mid is not None:
            entry["model"] = mid
            variant = anchor_variant(row, models[mid]) if note is None else None
            if variant is not None:
                entry["weights_variant"] = variant
            elif num(row.get("weights_size_gb_recorded")) is not None:
                entry["weights_bytes"] = gb_to_bytes(row["weights_size_gb_recorded"])
        if isinstance(row.get("tp"), int) and row["tp"] >= 1:
            entry["tp"] = row["tp"]
        if isinstance(row.get("max_num_seqs"), int) and row["max_num_seqs"] >= 1:
            entry["max_num_seqs"] = row["max_num_seqs"]
        drafter = _first_token(row.get("drafter"))
        if drafter in drafters:
            entry["drafter"] = drafter
        elif kvcalc and "drafter" in row and row["drafter"] is None and not row.get("mtp_flag"):
            entry["drafter"] = "none"
        engine = _first_token(row.get("engine"))
        if engine in engines and engines[engine].get("type") == "vllm":
            entry["engine"] = engine
        version = anchor_version(row)
        if version is not None:
            entry["vllm_version"] = version
        if note is not None:
            entry["note"] = note
        out.append(entry)
    return {"schema_version": SCHEMA, "anchors": out}


# --------------------------------------------------------------------------- main

def dump(path: Path, name: str, data: dict[str, Any]) -> None:
    text = HEADER.format(name=name) + yaml.safe_dump(data, sort_keys=False, allow_unicode=True,
                                                     width=100, default_flow_style=False)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shared", type=Path, default=ROOT.parent / "shared")
    ap.add_argument("--out", type=Path, default=ROOT / "src/club3090/catalog/data")
    args = ap.parse_args(argv)
    ref = args.shared / "reference/club-3090"
    registry = json.loads((ref / "registry.json").read_text())
    args.out.mkdir(parents=True, exist_ok=True)
    files: dict[str, Any] = {
        "gpus.yaml": build_gpus(ref),
        "kv_formats.yaml": build_kv_formats(),
        "engines.yaml": build_engines(ref),
        "drafters.yaml": build_drafters(ref),
        "models.yaml": build_models(ref, args.shared, registry),
        "arches.yaml": build_arches(ref),
        "patches.yaml": build_patches(ref),
        "profiles.yaml": build_profiles(ref, registry),
    }
    files["anchors.yaml"] = build_anchors(
        args.shared, registry, files["models.yaml"]["models"], files["drafters.yaml"]["drafters"],
        files["engines.yaml"]["engines"], files["kv_formats.yaml"]["kv_formats"])
    for name, data in files.items():
        dump(args.out / name, name.split(".")[0], data)
    print(f"wrote {len(files)} files to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
