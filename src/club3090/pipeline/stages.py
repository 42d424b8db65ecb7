"""Stage functions shared by ``pull``, ``kv-calc`` and ``inspect``.

``gpu_set`` is the only caller of :func:`club3090.rig.gpus.parse_gpus`: a ``--gpus`` value is
parsed here, once, whichever command received it (a test checks there is no other call site).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from club3090.rig.gpus import GpuSet, parse_gpus

if TYPE_CHECKING:  # pragma: no cover - typing only
    from club3090.catalog.model import Catalog


def gpu_set(spec: str | None, catalog: "Catalog") -> GpuSet | None:
    """The GPUs a ``--gpus SPEC`` names (None when not given). Raises ``UsageError`` on a bad spec."""
    return parse_gpus(spec, catalog) if spec is not None else None


__all__ = ["gpu_set"]
