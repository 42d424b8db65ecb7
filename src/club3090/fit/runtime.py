"""The shape being served, as the engine-support check ([C0]), the derived compose and ``up``'s
launch read it: one value whether a catalog profile set it (:meth:`RuntimeShape.of`) or the model
and the rig did (``pipeline.auto_profile.derived_runtime``, built once by the gate), so no stage
looks the automatic shape up in the catalog by a made-up profile key.

Pure: a value and its constructor from a catalog record.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover - typing only
    from club3090.catalog.model import Profile

__all__ = ["RuntimeShape"]


@dataclass(frozen=True, slots=True)
class RuntimeShape:
    """What is launched: the engine, its parallelism, KV format, context, batch, utilisation and
    port, and what the engine-support check asks of the profile (its SM term, one GPU generation,
    engine features). ``key`` is how outputs name the shape: a profile key, ``auto`` when derived."""

    key: str
    engine: str                              # catalog engine id
    kv_format: str                           # catalog KV format
    tp: int
    pp: int
    max_model_len: int
    max_num_seqs: int
    mem_util: float | None
    port: int
    model: str = ""                          # the curated model a profile serves; "" when derived
    profile_sm: Decimal | None = None        # the profile's fallback_sm, else its required_sm
    drafter: str | None = None
    required_engine_features: tuple[str, ...] = ()
    requires_homogeneous_arch: bool = False

    @classmethod
    def of(cls, profile: "Profile") -> "RuntimeShape":
        """A catalog profile's runtime (``Catalog.need_sm`` reads the same SM term)."""
        return cls(key=profile.key, engine=profile.engine, kv_format=profile.kv_format, tp=profile.tp,
                   pp=profile.pp, max_model_len=profile.max_model_len, max_num_seqs=profile.max_num_seqs,
                   mem_util=profile.mem_util, port=profile.port, model=profile.model,
                   profile_sm=profile.fallback_sm if profile.fallback_sm is not None else profile.required_sm,
                   drafter=profile.drafter, required_engine_features=tuple(profile.required_engine_features),
                   requires_homogeneous_arch=profile.requires_homogeneous_arch)
