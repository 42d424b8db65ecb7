"""Known cliffs at the top (issue 28 item 4, design rule 2): what the catalog already knows goes
wrong for this model on this engine, printed before the verdict of ``pull`` / ``fits`` / ``up``.

Two sources, both catalog records: the arch row's ``kernel_constraints`` (the model's architecture on
the engines we pin), each printed only where its ``applies_when`` holds for the chosen shape (a
TP-only constraint is not a cliff at TP 1), and the profile's own known failure mode (``status_note``
of a profile whose status is not plain ``production``). A constraint of kind ``scope`` (what the row
does not assert) is never a cliff. A fact the shape leaves unknown (no GPU reported an SM) cannot
rule a constraint out, so it is shown. Pure: records in, values out.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from club3090.gate.engine_support import find_arch_row

if TYPE_CHECKING:  # pragma: no cover - typing only
    from club3090.catalog.model import AppliesWhen, Catalog, Profile

__all__ = ["Cliff", "Served", "applies", "known_cliffs", "served_by_profile", "weight_format_of"]


@dataclass(frozen=True, slots=True)
class Served:
    """The chosen shape, as far as it is known (None: not known): what ``applies_when`` is matched to."""

    tp: int | None = None
    pp: int | None = None
    kv_format: str | None = None           # an id in kv_formats.yaml
    weight_format: str | None = None       # a weight variant's ``format``, or the checkpoint's quant method
    engine: str | None = None              # an engine type (vllm, llama.cpp)
    sm: Decimal | None = None


def served_by_profile(catalog: "Catalog", profile: "Profile | None", **known: Any) -> Served:
    """The shape of ``profile`` (its TP, PP, KV format, weights and engine), ``known`` facts winning."""
    if profile is None:
        return Served(**known)
    model = catalog.models.get(profile.model)
    variant = model.weights.get(profile.weights_variant) if model is not None else None
    engine = catalog.engines.get(profile.engine)
    base = {"tp": profile.tp, "pp": profile.pp, "kv_format": profile.kv_format,
            "weight_format": variant.format if variant is not None else None,
            "engine": engine.type if engine is not None else None}
    return Served(**{**base, **{k: v for k, v in known.items() if v is not None}})


def weight_format_of(spec: Any) -> str | None:
    """A model's weight format as constraints name it: the curated variant's ``format``, else the
    checkpoint's quantization method (None: unquantized or unknown)."""
    if spec is None:
        return None
    if spec.curated is not None:
        return str(spec.curated.format)
    return str(spec.quantization.method) if spec.quantization is not None else None


def _norm(name: str) -> str:
    return name.lower().replace("-", "").replace("_", "")


def _within(limit: Any, have: Any, ok: Callable[[Any, Any], bool]) -> bool:
    return limit is None or have is None or ok(have, limit)


def _one_of(allowed: tuple[str, ...], have: str | None) -> bool:
    return not allowed or have is None or _norm(have) in {_norm(a) for a in allowed}


def applies(when: "AppliesWhen", served: Served) -> bool:
    """Every condition of ``when`` holds for ``served`` (an unknown fact holds)."""
    return (_within(when.tp_min, served.tp, operator.ge) and _within(when.tp_max, served.tp, operator.le)
            and _within(when.pp_min, served.pp, operator.ge) and _within(when.sm_max, served.sm, operator.le)
            and _one_of(when.kv_formats, served.kv_format) and _one_of(when.weight_formats, served.weight_format)
            and _one_of(when.engines, served.engine))


@dataclass(frozen=True, slots=True)
class Cliff:
    """One known failure mode. ``source``: ``arch:<ArchName>`` or ``profile:<key>``."""

    source: str
    text: str

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "text": self.text}

    def line(self) -> str:
        return f"known cliff ({self.source}): {self.text}"


def known_cliffs(catalog: "Catalog", *, profile: "Profile | None" = None, curated_model: str | None = None,
                 architecture: str = "", served: Served | None = None) -> tuple[Cliff, ...]:
    """The cliffs that apply to this model (its arch row) on this shape (``served``; default: the
    profile's), and this profile's known failure mode, in that order."""
    model = curated_model or (profile.model if profile is not None else None)
    row = find_arch_row(catalog, curated_model=model, architecture=architecture)
    shape = served if served is not None else served_by_profile(catalog, profile)
    cliffs = [Cliff(f"arch:{row.arch}", kc.text) for kc in row.kernel_constraints
              if kc.kind == "cliff" and applies(kc.applies_when, shape)] if row is not None else []
    if profile is not None and profile.status != "production" and profile.status_note:
        cliffs.append(Cliff(f"profile:{profile.key}", f"{profile.status}: {profile.status_note}"))
    return tuple(cliffs)
