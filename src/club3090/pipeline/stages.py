"""Stage functions shared by ``pull``, ``kv-calc`` and ``inspect``.

``measured_here`` re-prices a fit from this machine's promoted measurement of the same shape
(``club3090 loop promote``), for ``pull`` and ``kv-calc`` alike.

``gpu_set`` is the only caller of :func:`club3090.rig.gpus.parse_gpus`: a ``--gpus`` value is
parsed here, once, whichever command received it (a test checks there is no other call site).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from club3090.gate.outcome import Notice, NoticeCode
from club3090.rig.gpus import GpuSet, parse_gpus

if TYPE_CHECKING:  # pragma: no cover - typing only
    from club3090.catalog.model import Catalog
    from club3090.fit.memory import FitResult, ServeShape
    from club3090.model.spec import ModelSpec


def gpu_set(spec: str | None, catalog: "Catalog", *, nodes: int | None = None,
            interconnect: str | None = None) -> GpuSet | None:
    """The GPUs a ``--gpus SPEC`` names (None when not given), with ``--nodes`` / ``--interconnect``
    for a rig of several machines. Raises ``UsageError`` on a bad spec (or those flags without --gpus)."""
    if spec is None:
        if nodes is not None or interconnect is not None:
            from club3090.errors import UsageError
            raise UsageError("--nodes and --interconnect describe the GPUs of --gpus: give --gpus ONE NODE too, "
                             "e.g. --nodes 2 --gpus 2x3090")
        return None
    return parse_gpus(spec, catalog, nodes=nodes, interconnect=interconnect)


def measured_here(fit: "FitResult", spec: "ModelSpec", shape: "ServeShape", memory: "Sequence[int]",
                  catalog: "Catalog", measured: "Sequence[Mapping[str, Any]]",
                  ) -> "tuple[FitResult, ModelSpec, Notice] | None":
    """The fit re-priced from a promoted measurement of exactly this shape on this kind of GPU.

    The facts' confidence becomes ``exact``: the pool was measured, not predicted."""
    if not measured or not memory:
        return None
    from club3090.reports.measured import EXACT_HERE, apply_measured, find_measured

    # the values the fit resolved (a default left unset is still a definite value to match on)
    used = fit.settings
    kv = catalog.kv_formats.get(used.kv_cache_dtype)
    kv_arg = (kv.vllm_arg if kv is not None else used.kv_cache_dtype) or "auto"
    match = find_measured(measured, repo_id=spec.ref, gpu_memory_gib=min(memory) / 2**30,
                          tensor_parallel_size=shape.tp, pipeline_parallel_size=shape.pp,
                          max_model_len=used.max_model_len, gpu_memory_utilization=used.mem_util,
                          kv_cache_dtype=kv_arg)
    if match is None:
        return None
    notice = Notice(NoticeCode.MEASURED_HERE, f"{EXACT_HERE}: priced from this machine's promoted measurement "
                    f"{match.entry_id} (band ±{match.band_gib:.2f} GiB)",
                    {"entry": match.entry_id, "band_gib": match.band_gib})
    return apply_measured(fit, match), replace(spec, confidence="exact"), notice


__all__ = ["gpu_set", "measured_here"]
