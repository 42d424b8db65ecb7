"""The two stratum-5 advisories (docs/DESIGN.md): extra advice beside a verdict, never a change to it.

- ``variants-fit``: the model is too large for the rig (the fit says wont-fit, or the weights alone
  exceed the GPUs' summed memory) -> the catalog variants of its family that would fit (each priced
  at a curated profile's shape on this rig when one serves it, else by weights alone, labelled), the
  family's GGUF files, the repo's own GGUF files, or, with no curated family, the size a 4-bit
  quantization would have.
- ``swap-serves-it``: a non-curated repo whose architecture and geometry are a curated model's (a
  fine-tune) -> the ``club3090 swap`` command that serves it on the curated, measured service.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from club3090.fit.memory import FitResult, predict
from club3090.fit.shape import profile_shape
from club3090.gate.swap_match import family_models, swap_profiles
from club3090.model.architecture import parse_config
from club3090.outcome import Notice, NoticeCode
from club3090.units import GiB

if TYPE_CHECKING:  # pragma: no cover - typing only
    from club3090.catalog.model import Catalog, Model, WeightVariant
    from club3090.model.spec import ModelSpec

# Weights alone may take this share of the GPUs' memory for a variant priced without a profile
# (the rest: activations, CUDA graphs, a minimal KV cache).
WEIGHTS_ONLY_SHARE = 0.85


def too_large(fit: FitResult | None, weights_bytes: int | None, memory: Sequence[int]) -> bool:
    """The fit says wont-fit, or the weights alone exceed the GPUs' summed memory."""
    if fit is not None and fit.raw_verdict == "wont-fit":
        return True
    return bool(weights_bytes and memory and weights_bytes > sum(memory))


def _variant_fit(model: "Model", variant: "WeightVariant", catalog: "Catalog", memory: Sequence[int],
                 device_name: str | None) -> dict[str, Any] | None:
    """How ``variant`` fits this rig: at the smallest curated vLLM profile serving it that fits,
    else by weights alone; None when it does not fit."""
    size = int(variant.size_bytes or 0)
    if not size or not memory:
        return None
    arch = None
    profiles = sorted((p for p in catalog.profiles.values()
                       if p.model == model.id and p.weights_variant == variant.id and p.tp * p.pp <= len(memory)
                       and catalog.engines.get(p.engine) is not None and catalog.engines[p.engine].is_vllm),
                      key=lambda p: (p.tp * p.pp, p.key not in model.serving_defaults.values(), p.key))
    for profile in profiles:
        arch = arch or parse_config(model.hf_config)
        fit = predict(arch, weights_bytes=size, gpu_memory_bytes=tuple(memory[:profile.tp * profile.pp]),
                      shape=profile_shape(profile, catalog, device_name=device_name), confidence="exact")
        if isinstance(fit, FitResult) and fit.raw_verdict != "wont-fit":
            return {"profile": profile.key, "basis": "profile", "max_model_len": fit.max_model_len}
    if not profiles and size <= WEIGHTS_ONLY_SHARE * sum(memory):
        return {"profile": None, "basis": "weights-only", "max_model_len": None}
    return None


def variants_that_fit(spec: "ModelSpec", catalog: "Catalog", memory: Sequence[int],
                      device_name: str | None = None) -> list[dict[str, Any]]:
    """The family's weight variants (vLLM and GGUF) that would fit ``memory``, smallest GPU count
    first, then largest weights (best quality that fits)."""
    own = spec.curated.variant_id if spec.curated is not None else None
    out: list[dict[str, Any]] = []
    for model in family_models(spec, catalog):
        for variant in model.weights.values():
            if variant.kind not in ("main", "gguf") or (model.id == getattr(spec.curated, "model_id", None)
                                                        and variant.id == own):
                continue
            how = _variant_fit(model, variant, catalog, memory, device_name)
            if how is None:
                continue
            out.append({"model": model.id, "variant": variant.id, "repo": variant.hf_repo,
                        "format": variant.format, "size_bytes": int(variant.size_bytes or 0),
                        "files": list(variant.files), **how})
    out.sort(key=lambda v: (0 if v["profile"] else 1, -v["size_bytes"]))
    return out


def _int4_estimate(spec: "ModelSpec") -> int | None:
    bits = spec.quantization.bits if spec.quantization is not None else 16
    if not spec.weights_bytes or not bits or bits <= 4:
        return None
    return int(spec.weights_bytes * 4 / bits)


def variants_advice(spec: "ModelSpec", catalog: "Catalog", memory: Sequence[int],
                    device_name: str | None = None) -> Notice | None:
    """``variants-fit``: what would fit instead (call it when :func:`too_large` holds)."""
    found = variants_that_fit(spec, catalog, memory, device_name)
    rig = f"{len(memory)} GPU(s) with {sum(memory) / GiB:.0f} GiB"
    own_gguf = tuple(spec.gguf_files)
    if own_gguf and not found:   # the repo's own quant files: llama.cpp can offload what does not fit
        n = len(own_gguf)
        return Notice(NoticeCode.VARIANTS_FIT,
                      f"too large for {rig}; this repo also holds {n} GGUF file{'s' if n != 1 else ''} for "
                      f"llama.cpp ({', '.join(own_gguf[:3])}{', ...' if n > 3 else ''}): "
                      f"`club3090 fits {spec.ref} --gguf` prices each quant",
                      {"variants": (), "repo_gguf_files": own_gguf})
    if found:
        parts = []
        for v in found[:4]:
            what = f"{v['repo']} ({v['format']}, {v['size_bytes'] / 1e9:.1f} GB"
            if v["profile"]:
                what += f"; `club3090 up {v['repo']} --profile-like {v['profile']} --dir DIR`)"
            elif v["files"]:
                what += f"; GGUF file {v['files'][0]}, weights alone fit)"
            else:
                what += "; weights alone fit)"
            parts.append(what)
        return Notice(NoticeCode.VARIANTS_FIT, f"too large for {rig}; these variants would fit: " + "; ".join(parts),
                      {"variants": tuple(found), "repo_gguf_files": own_gguf})
    estimate = _int4_estimate(spec)
    if estimate is not None and estimate <= WEIGHTS_ONLY_SHARE * sum(memory):
        return Notice(NoticeCode.VARIANTS_FIT,
                      f"too large for {rig}; a 4-bit quantization of this model (AWQ, GPTQ, AutoRound, or a "
                      f"GGUF Q4_K_M for llama.cpp) would have about {estimate / GiB:.1f} GiB of weights and "
                      "could fit: look for one on the Hub and ask `club3090 fits` about it",
                      {"variants": (), "int4_estimate_bytes": estimate})
    return None


def swap_advice(spec: "ModelSpec", catalog: "Catalog", gpu_count: int) -> Notice | None:
    """``swap-serves-it``: the curated profile whose service would serve this fine-tune."""
    keys = swap_profiles(spec, catalog, gpu_count)
    if not keys:
        return None
    profile = catalog.profiles[keys[0]]
    model = catalog.models[profile.model]
    command = f"club3090 swap {spec.ref} --profile-like {profile.key} --dir DIR"
    return Notice(NoticeCode.SWAP_SERVES_IT,
                  f"{spec.arch.architecture} with {model.display_name}'s geometry and quantization maps to the "
                  f"curated family {model.id}: `{command}` serves it on the curated, measured service "
                  "(patches, flags and drafter kept)",
                  {"profile": profile.key, "profiles": tuple(keys), "model": model.id, "command": command})


def advise(spec: "ModelSpec", catalog: "Catalog", *, fit: FitResult | None, memory: Sequence[int],
           device_name: str | None = None, gpu_count: int | None = None) -> tuple[Notice, ...]:
    """Both advisories that apply (none for a model that fits and is curated)."""
    out: list[Notice] = []
    if memory and too_large(fit, spec.weights_bytes, memory):
        variants = variants_advice(spec, catalog, memory, device_name)
        if variants is not None:
            out.append(variants)
    swap = swap_advice(spec, catalog, gpu_count if gpu_count is not None else max(len(memory), 1))
    if swap is not None:
        out.append(swap)
    return tuple(out)


__all__ = ["WEIGHTS_ONLY_SHARE", "advise", "swap_advice", "too_large", "variants_advice", "variants_that_fit"]
