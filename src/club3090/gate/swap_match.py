"""Can a curated profile serve this repo as a fine-tune of its model? (``club3090 swap``, docs/DESIGN.md)

A swap keeps everything the curated service was measured and patched with (image, patches,
flags, drafter, chat template) and re-points only the weights. That is sound only when the repo
is the same network as the curated model: the same architecture row, the same quantization
method, bits and group size (the patches and kernels are chosen for them), the same geometry the
profile's memory was measured on, and no remote modelling code. Each differing fact is one
:class:`Mismatch` with a stable token, the expected and the found value.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from club3090.gate.engine_support import find_arch_row
from club3090.model.architecture import Architecture, parse_config
from club3090.model.quantization import default_bits, normalize_method
from club3090.outcome import Token

if TYPE_CHECKING:  # pragma: no cover - typing only
    from club3090.catalog.model import Catalog, Model, Profile, WeightVariant
    from club3090.model.spec import ModelSpec, Quantization

# A fine-tune may add a few tokens (chat or tool markers) or pad the embedding: the vocabulary may
# differ by this share of the curated one; the weights are re-priced from the repo's own bytes.
VOCAB_TOLERANCE = 0.01
_UNQUANTIZED = ("bf16", "fp16", "f16", "fp32", "bfloat16", "float16")
# geometry the profile's memory was measured on: (fact, Architecture attribute)
GEOMETRY_FACTS: tuple[tuple[str, str], ...] = (
    ("num_hidden_layers", "num_hidden_layers"), ("hidden_size", "hidden_size"),
    ("num_attention_heads", "num_attention_heads"), ("num_key_value_heads", "num_key_value_heads"),
    ("head_dim", "head_dim"), ("intermediate_size", "intermediate_size"), ("num_experts", "num_experts"),
    ("num_experts_per_tok", "num_experts_per_tok"), ("moe_intermediate_size", "moe_intermediate_size"),
    ("kv_lora_rank", "kv_lora_rank"), ("sliding_window", "sliding_window"),
)


class SwapToken(Token):
    """Stable refusal tokens of ``club3090 swap`` (documented in README.md)."""

    PROFILE_NOT_SERVABLE = "swap-profile-not-servable"   # not a compose-replayable vLLM profile
    FACTS_UNAVAILABLE = "swap-facts-unavailable"         # the repo's facts could not be read
    ARCH_MISMATCH = "swap-arch-mismatch"
    QUANT_MISMATCH = "swap-quant-mismatch"
    GEOMETRY_MISMATCH = "swap-geometry-mismatch"
    REMOTE_CODE = "swap-remote-code"
    WONT_FIT = "swap-wont-fit"                           # re-priced with the repo's own weight bytes


@dataclass(frozen=True, slots=True)
class Mismatch:
    token: SwapToken
    fact: str
    expected: str
    found: str

    @property
    def text(self) -> str:
        return f"{self.token.value}: {self.fact} expected {self.expected}, found {self.found}"

    def to_json(self) -> dict[str, str]:
        return {"token": self.token.value, "fact": self.fact, "expected": self.expected, "found": self.found}


def curated_quantization(variant: "WeightVariant | None") -> tuple[str | None, int | None]:
    """(method, bits) the curated variant is packed with; (None, None) for unquantized weights."""
    if variant is None or (not variant.quantization and variant.format in _UNQUANTIZED):
        return None, None
    method = normalize_method(variant.quantization or variant.format)
    return method, default_bits(method) or default_bits(variant.format)


def arch_mismatch(spec: "ModelSpec", model: "Model", catalog: "Catalog") -> Mismatch | None:
    want = catalog.arch_row_for_model(model.id)
    got = find_arch_row(catalog, curated_model=None, architecture=spec.arch.architecture,
                        config_architectures=spec.arch.config_architectures)
    if want is not None and got is not None and got.arch == want.arch:
        return None
    expected = want.arch if want is not None else model.architecture
    aliases = [a for a in (want.config_architectures if want is not None else ()) if a != expected]
    found = spec.arch.architecture or "(none)"
    return Mismatch(SwapToken.ARCH_MISMATCH, "architecture",
                    expected + (f" (config name {', '.join(aliases)})" if aliases else ""),
                    f"{found} (no architecture row)" if got is None else f"{found} (row {got.arch})")


def quant_mismatches(found: "Quantization | None", variant: "WeightVariant | None",
                     curated: "Quantization | None" = None) -> list[Mismatch]:
    """Method and bits against the curated variant; group size when both sides declare one
    (``curated``: the curated repo's own quantization_config, when it could be read)."""
    method, bits = curated_quantization(variant)
    if curated is not None and curated.bits:
        bits = curated.bits
    got_method = found.method if found is not None else None
    if method is None and got_method is None:
        return []
    if method != got_method:
        return [Mismatch(SwapToken.QUANT_MISMATCH, "quantization method", method or "unquantized",
                         got_method or "unquantized")]
    out: list[Mismatch] = []
    got_bits = found.bits if found is not None else None
    if bits is not None and got_bits != bits:
        out.append(Mismatch(SwapToken.QUANT_MISMATCH, "weight bits", str(bits), str(got_bits)))
    want_group = curated.group_size if curated is not None else None
    got_group = found.group_size if found is not None else None
    if want_group is not None and got_group is not None and want_group != got_group:
        out.append(Mismatch(SwapToken.QUANT_MISMATCH, "group size", str(want_group), str(got_group)))
    return out


def geometry_mismatches(found: Architecture, reference: Architecture) -> list[Mismatch]:
    """Every measured-on geometry fact that differs (vocab within :data:`VOCAB_TOLERANCE`)."""
    out: list[Mismatch] = []
    for fact, attr in GEOMETRY_FACTS:
        want, got = getattr(reference, attr), getattr(found, attr)
        if want != got:
            out.append(Mismatch(SwapToken.GEOMETRY_MISMATCH, fact, str(want), str(got)))
    if abs(found.vocab_size - reference.vocab_size) > VOCAB_TOLERANCE * reference.vocab_size:
        out.append(Mismatch(SwapToken.GEOMETRY_MISMATCH, "vocab_size",
                            f"{reference.vocab_size} (+/- {VOCAB_TOLERANCE:.0%})", str(found.vocab_size)))
    if not out and found.layers != reference.layers:   # same sizes, another layer pattern (hybrids)
        i = next((i for i, (a, b) in enumerate(zip(found.layers, reference.layers, strict=False)) if a != b),
                 min(len(found.layers), len(reference.layers)))
        want_kind = reference.layers[i].kind if i < len(reference.layers) else "(none)"
        got_kind = found.layers[i].kind if i < len(found.layers) else "(none)"
        out.append(Mismatch(SwapToken.GEOMETRY_MISMATCH, f"layer {i} cache geometry", want_kind, got_kind))
    return out


def check_swap(spec: "ModelSpec", profile: "Profile", catalog: "Catalog", *,
               curated_quant: "Quantization | None" = None) -> tuple[Mismatch, ...]:
    """Every reason ``profile``'s service cannot serve ``spec``; empty: it can."""
    ok, why = catalog.emittable(profile.key)
    if not ok:
        return (Mismatch(SwapToken.PROFILE_NOT_SERVABLE, "profile", "a curated vLLM profile `compose` replays",
                         f"{profile.key} ({why})"),)
    model = catalog.models[profile.model]
    out: list[Mismatch] = []
    arch = arch_mismatch(spec, model, catalog)
    if arch is not None:
        out.append(arch)
    if spec.requires_trust_remote_code:
        out.append(Mismatch(SwapToken.REMOTE_CODE, "auto_map (remote modelling code)", "absent", "present"))
    out += quant_mismatches(spec.quantization, model.weights.get(profile.weights_variant), curated_quant)
    if arch is None:
        out += geometry_mismatches(spec.arch, parse_config(model.hf_config))
        drafter = catalog.drafters.get(profile.drafter) if profile.drafter else None
        if drafter is not None and drafter.method.startswith("mtp") and not spec.has_mtp_head:
            out.append(Mismatch(SwapToken.GEOMETRY_MISMATCH, f"MTP head (the {drafter.id} drafter needs it)",
                                "present", "absent"))
    return tuple(out)


def swap_profiles(spec: "ModelSpec", catalog: "Catalog", gpu_count: int) -> list[str]:
    """Curated profiles whose service can serve ``spec`` as a fine-tune, the rig's serving default
    first (upstream's ``defaults`` for ``gpu_count`` GPUs), then by key."""
    if spec.curated is not None:
        return []
    row = find_arch_row(catalog, curated_model=None, architecture=spec.arch.architecture,
                        config_architectures=spec.arch.config_architectures)
    if row is None:
        return []
    models = [m for m in catalog.models.values() if (r := catalog.arch_row_for_model(m.id)) is not None
              and r.arch == row.arch]
    count = "single" if gpu_count <= 1 else "dual" if gpu_count == 2 else "multi"
    preferred = [m.serving_defaults.get(count) for m in models]
    keys = [*(k for k in preferred if k), *sorted(k for k, p in catalog.profiles.items()
                                                  if any(p.model == m.id for m in models))]
    out: list[str] = []
    for key in dict.fromkeys(keys):
        profile = catalog.profiles.get(key)
        if profile is None or not profile.launchable or profile.tp * profile.pp > max(gpu_count, 1):
            continue
        if not check_swap(spec, profile, catalog):
            out.append(key)
    return out


def family_models(spec: "ModelSpec", catalog: "Catalog") -> list["Model"]:
    """The curated model(s) ``spec`` is a variant or fine-tune of: its own, else every curated model
    of its architecture row with the same geometry."""
    if spec.curated is not None:
        own = catalog.models.get(spec.curated.model_id)
        return [own] if own is not None else []
    row = find_arch_row(catalog, curated_model=None, architecture=spec.arch.architecture,
                        config_architectures=spec.arch.config_architectures)
    if row is None:
        return []
    return [m for m in catalog.models.values() if (r := catalog.arch_row_for_model(m.id)) is not None
            and r.arch == row.arch and not geometry_mismatches(spec.arch, parse_config(m.hf_config))]


def texts(mismatches: Iterable[Mismatch]) -> list[str]:
    return [m.text for m in mismatches]


__all__ = ["GEOMETRY_FACTS", "VOCAB_TOLERANCE", "Mismatch", "SwapToken", "check_swap", "curated_quantization",
           "family_models", "geometry_mismatches", "quant_mismatches", "swap_profiles", "texts"]
