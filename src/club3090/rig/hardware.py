"""Who supplies the SM and the per-GPU memory the gate judges: ``--hardware``, ``--gpus``,
detected GPUs, or the profile's reference card (docs/DESIGN.md, the rig stage)."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from club3090.outcome import Notice, NoticeCode
from club3090.rig.gpus import NON_NVIDIA_SM
from club3090.units import gib_text

if TYPE_CHECKING:  # pragma: no cover - typing only
    from club3090.catalog.model import Gpu

NVIDIA = "nvidia"


@dataclass(frozen=True, slots=True)
class HardwareFacts:
    """What the gate knows about the GPUs the profile will use.

    ``memory_bytes`` lists every known GPU in index order (the fit takes the first ``tp``);
    it is empty when no source gives per-GPU memory (then [C0] fails closed).
    """

    sm: Decimal | None
    sm_source: str                          # hardware-flag | gpus-flag | detected | probe | none
    memory_bytes: tuple[int, ...]
    memory_source: str                      # gpus-flag | detected | reference-gpu | none
    names: tuple[str, ...] = ()
    sms: tuple[Decimal, ...] = ()           # per GPU, when known (mixed-arch notice)
    notices: tuple[Notice, ...] = ()
    detection_notes: tuple[str, ...] = ()   # why each GPU probe that ran found nothing
    nodes: int = 1                          # machines (``--gpus NODESx(...)`` / ``--nodes``), node-major GPUs
    interconnect: str | None = None         # the link between nodes; None on one node

    @property
    def gpus_per_node(self) -> int:
        return self.count // max(self.nodes, 1) if self.count else 0

    @property
    def count(self) -> int:
        return len(self.memory_bytes)

    def selected_memory(self, tp: int) -> tuple[int, ...]:
        return self.memory_bytes[:max(tp, 1)]


def resolve_hardware(*, tp: int, hardware_sm: Decimal | None = None, gpu_set: Any = None,
                     detected: Any = None, reference_gpu: "Gpu | None" = None) -> HardwareFacts:
    """Pick the SM and per-GPU memory sources in the order of docs/DESIGN.md.

    SM: ``--hardware`` > ``--gpus`` > the minimum SM of detected NVIDIA GPUs 0..tp-1 > a
    non-NVIDIA probe (8.0, SM gate only) > unknown. Memory: ``--gpus`` > detected NVIDIA GPUs
    > the profile's reference card when only ``--hardware`` was given > unknown. A non-NVIDIA
    GPU never feeds the fit.
    """
    notices: list[Notice] = []
    tp = max(int(tp or 1), 1)
    visible = tuple(detected.gpus) if detected is not None else ()
    memory, names, sms, memory_source = _memory(tp, hardware_sm, gpu_set, visible, reference_gpu, notices)
    sm, sm_source = _sm(tp, hardware_sm, gpu_set, visible, sms, notices)
    notices.extend(_non_nvidia_notices(tp, gpu_set, visible))
    nodes = int(getattr(gpu_set, "nodes", 1) or 1) if gpu_set is not None else 1
    return HardwareFacts(sm=sm, sm_source=sm_source, memory_bytes=memory, memory_source=memory_source,
                         names=names, sms=sms, notices=tuple(notices),
                         detection_notes=tuple(getattr(detected, "notes", ())), nodes=nodes,
                         interconnect=getattr(gpu_set, "interconnect", None) if nodes > 1 else None)


def _memory(tp: int, hardware_sm: Decimal | None, gpu_set: Any, visible: tuple[Any, ...], reference_gpu: "Gpu | None",
            notices: list[Notice]) -> tuple[tuple[int, ...], tuple[str, ...], tuple[Decimal, ...], str]:
    """(per-GPU memory, names, SMs, the memory source): ``--gpus`` > detected > the reference card."""
    # Memory the fit may use: detected GPUs in index order, up to the first one that is not
    # NVIDIA or whose memory the driver did not report.
    fit_gpus: list[Any] = []
    for g in visible:
        if not _is_nvidia(g) or g.memory_bytes is None:
            break
        fit_gpus.append(g)
    if gpu_set is not None:
        memory = tuple(int(m) for m in gpu_set.memory_bytes)
        cards = tuple(gpu_set.gpus)
        sms: tuple[Decimal, ...] = ()
        if cards and all(c is not None for c in cards):
            sms = tuple(Decimal(c.sm) for c in cards)
        elif gpu_set.sm is not None:
            sms = tuple(Decimal(gpu_set.sm) for _ in memory)
        return memory, tuple(str(n) for n in gpu_set.names), sms, "gpus-flag"
    if fit_gpus:
        return (tuple(int(g.memory_bytes) for g in fit_gpus), tuple(str(g.name) for g in fit_gpus),
                tuple(Decimal(g.sm) for g in fit_gpus if g.sm is not None), "detected")
    if hardware_sm is not None and reference_gpu is not None and not visible:
        notices.append(Notice(
            NoticeCode.REFERENCE_GPU_PRICED,
            f"no GPU detected and no --gpus given: priced on the profile's reference card, "
            f"{tp} x {reference_gpu.display_name} ({gib_text(reference_gpu.memory_bytes)} GiB each); "
            f"pass --gpus to price your own cards",
            {"gpu": reference_gpu.id, "count": tp, "memory_bytes": int(reference_gpu.memory_bytes)}))
        return (tuple(int(reference_gpu.memory_bytes) for _ in range(tp)),
                tuple(reference_gpu.display_name for _ in range(tp)), (), "reference-gpu")
    return (), (), (), "none"


def _sm(tp: int, hardware_sm: Decimal | None, gpu_set: Any, visible: tuple[Any, ...], sms: tuple[Decimal, ...],
        notices: list[Notice]) -> tuple[Decimal | None, str]:
    """(the SM that gates the runtime, its source): ``--hardware`` > ``--gpus`` > detected > a probe."""
    in_use = visible[:tp]
    if hardware_sm is not None:
        return Decimal(hardware_sm), "hardware-flag"
    if gpu_set is not None and sms:
        mixed = mixed_generations(tuple(str(n) for n in gpu_set.names)[:tp], sms[:tp])
        if mixed:
            notices.append(Notice(NoticeCode.MIXED_GPU_ARCH,
                                  f"mixed GPU generations among the GPUs in use ({mixed}); the lowest SM "
                                  "gates the runtime", {"sms": tuple(str(c) for c in sms[:tp])}))
        return min(sms[:tp]), "gpus-flag"
    if in_use and all(g.sm is not None or not _is_nvidia(g) for g in in_use):
        caps = [Decimal(g.sm) if _is_nvidia(g) else NON_NVIDIA_SM for g in in_use]
        if len(set(caps)) > 1:
            notices.append(Notice(NoticeCode.MIXED_GPU_ARCH,
                                  "mixed GPU architectures among the GPUs in use "
                                  f"({', '.join(str(c) for c in caps)}); the lowest SM gates the runtime",
                                  {"sms": tuple(str(c) for c in caps)}))
        return min(caps), "detected" if all(_is_nvidia(g) for g in in_use) else "probe"
    return None, "none"


def mixed_generations(names: tuple[str, ...], sms: tuple[Decimal, ...]) -> str | None:
    """``"3090 (SM 8.6), 4090 (SM 8.9)"`` when the GPUs are of more than one generation (SM), else None.
    The one test of a mixed-generation rig (the notice and ``requires_homogeneous_arch``)."""
    if len(set(sms)) < 2:
        return None
    seen: dict[Decimal, str] = {}
    for i, sm in enumerate(sms):
        seen.setdefault(sm, names[i] if i < len(names) else f"GPU {i}")
    return ", ".join(f"{name} (SM {sm})" for sm, name in seen.items())


def _non_nvidia_notices(tp: int, gpu_set: Any, visible: tuple[Any, ...]) -> list[Notice]:
    notices = []
    in_use = visible[:tp]
    if any(not _is_nvidia(g) for g in in_use) and gpu_set is None:
        other = next(g for g in in_use if not _is_nvidia(g))
        notices.append(Notice(NoticeCode.NON_NVIDIA_GPU,
                              f"non-NVIDIA GPU detected ({other.name}); SM {NON_NVIDIA_SM} is assumed for "
                              "the SM gate only and its memory is not used for the fit",
                              {"name": str(other.name), "assumed_sm": str(NON_NVIDIA_SM)}))
    named = [c for c in tuple(gpu_set.gpus)[:tp] if c is not None] if gpu_set is not None else []
    other_card = next((c for c in named if str(c.vendor).lower() != NVIDIA), None)
    if other_card is not None:
        notices.append(Notice(NoticeCode.NON_NVIDIA_GPU,
                              f"--gpus names a non-NVIDIA GPU ({other_card.display_name}); its memory is priced "
                              f"as vLLM's CUDA build would use it and SM {NON_NVIDIA_SM} is assumed for the SM "
                              "gate: treat the answer as a size check, not a tested configuration",
                              {"name": other_card.display_name, "assumed_sm": str(NON_NVIDIA_SM)}))
    return notices


def _is_nvidia(gpu: Any) -> bool:
    """Fail closed: only a GPU whose vendor says NVIDIA is one (an unknown vendor is not)."""
    return str(gpu.vendor or "").lower() == NVIDIA
