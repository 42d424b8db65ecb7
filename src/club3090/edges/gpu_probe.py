"""GPU detection at the edge: NVML, then ``nvidia-smi``, then an optional non-NVIDIA probe.

``detect()`` never raises and never blocks for long: every probe is bounded (timeouts, output
caps) and any failure yields an empty result, so the gate fails closed
(``hardware-sm-undetermined`` / ``hardware-vram-undetermined``) instead of guessing. Why each
probe found nothing is kept in ``DetectedGpus.notes`` (``--debug`` prints them; ``--json`` carries
them as ``detection_notes``).

NVIDIA GPUs carry their real compute capability and memory. AMD (``amd-smi`` / ``rocm-smi``)
and Apple (``sysctl`` / ``system_profiler``) GPUs are reported with ``vendor != "nvidia"`` and
SM ``8.0`` (docs/DESIGN.md): that number feeds the SM gate only. Their memory is never
offered to the fit: ``DetectedGpus.memory_bytes`` and ``min_memory_bytes`` return ``None`` as
soon as a selected GPU is not NVIDIA.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, TypeVar

from club3090.rig.gpus import MAX_GPUS, NON_NVIDIA_SM, parse_sm

NVIDIA = "nvidia"
AMD = "amd"
APPLE = "apple"

PROBE_TIMEOUT_S = 10.0           # per external command and for the whole NVML session
MAX_OUTPUT_BYTES = 1024 * 1024   # more than this from a probe is garbage, not a GPU list

Runner = Callable[..., Any]      # subprocess.run-compatible

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class DetectedGpu:
    index: int                   # the driver's device index (what NVIDIA_VISIBLE_DEVICES takes)
    name: str
    memory_bytes: int | None     # total as the driver reports it; None when unknown
    sm: Decimal | None           # compute capability, e.g. Decimal("8.6"); None when unknown
    vendor: str                  # "nvidia" | "amd" | "apple"


@dataclass(frozen=True, slots=True)
class DetectedGpus:
    gpus: tuple[DetectedGpu, ...]
    source: str                  # "nvml" | "nvidia-smi" | "amd-smi" | "rocm-smi" | "sysctl" |
                                 # "system_profiler" | "none" | "disabled"
    # "<probe>: <why it found nothing>", in probe order; diagnostics, so not part of equality
    notes: tuple[str, ...] = field(default=(), compare=False)

    @property
    def count(self) -> int:
        return len(self.gpus)

    @property
    def all_nvidia(self) -> bool:
        """True when at least one GPU was found and every one is NVIDIA (fit-eligible)."""
        return bool(self.gpus) and all(g.vendor == NVIDIA for g in self.gpus)

    def select(self, indices: Iterable[int] | None = None) -> tuple[DetectedGpu, ...] | None:
        """The GPUs with these driver indices, in the order asked; None if any index is absent.

        ``indices=None`` selects every GPU. An empty result (no GPUs, or ``indices`` empty) is
        returned as None too, so callers fail closed on it.
        """
        if indices is None:
            chosen = self.gpus
        else:
            by_index = {g.index: g for g in self.gpus}
            try:
                chosen = tuple(by_index[i] for i in indices)
            except KeyError:
                return None
        return chosen or None

    def min_sm(self, indices: Iterable[int] | None = None) -> Decimal | None:
        """Minimum compute capability of the selected GPUs (only the GPUs in use gate the SM).

        None when a selected index is missing, nothing is selected, or any selected GPU's SM is
        unknown. Non-NVIDIA GPUs report 8.0 here by design (SM gate only).
        """
        chosen = self.select(indices)
        if chosen is None or any(g.sm is None for g in chosen):
            return None
        return min(g.sm for g in chosen)  # type: ignore[type-var]

    def memory_bytes(self, indices: Iterable[int] | None = None) -> tuple[int, ...] | None:
        """Per-GPU memory of the selected GPUs for the fit; None unless all are NVIDIA and known."""
        chosen = self.select(indices)
        if chosen is None or any(g.vendor != NVIDIA or not g.memory_bytes for g in chosen):
            return None
        return tuple(g.memory_bytes for g in chosen)  # type: ignore[misc]

    def min_memory_bytes(self, indices: Iterable[int] | None = None) -> int | None:
        per_gpu = self.memory_bytes(indices)
        return min(per_gpu) if per_gpu else None


NO_GPUS = DetectedGpus((), "none")


def detect(*, enabled: bool = True, nvml: Any = None, run: Runner = subprocess.run,
           platform: str = sys.platform, timeout_s: float = PROBE_TIMEOUT_S) -> DetectedGpus:
    """Detect the visible GPUs. Never raises; an empty ``DetectedGpus`` means "no source".

    ``enabled=False`` (``Settings.gpu_detect``, off under ``CLUB3090_NO_GPU_DETECT``) probes
    nothing; ``nvml`` is a pynvml-like module (default: ``import pynvml`` from nvidia-ml-py);
    ``run`` is a ``subprocess.run`` stand-in.
    """
    if not enabled:
        return DetectedGpus((), "disabled", (f"detection switched off ({NO_DETECT_HINT})",))
    notes: list[str] = []
    probes: list[tuple[str, Callable[[list[str]], tuple[DetectedGpu, ...]]]] = [
        ("nvml", lambda why: _probe_nvml(nvml, timeout_s, why)),
        ("nvidia-smi", lambda why: _probe_nvidia_smi(run, timeout_s, why)),
        ("amd-smi", lambda why: _probe_amd_smi(run, timeout_s, why)),
        ("rocm-smi", lambda why: _probe_rocm_smi(run, timeout_s, why)),
    ]
    if platform == "darwin":
        probes.append(("sysctl", lambda why: _probe_sysctl(run, timeout_s, why)))
        probes.append(("system_profiler", lambda why: _probe_system_profiler(run, timeout_s, why)))
    for source, probe in probes:
        why: list[str] = []
        try:
            gpus = probe(why)
        except Exception as exc:  # noqa: BLE001 - a probe must never take detection down; the next one gets a turn
            notes.append(f"{source}: {_describe(exc)}")
            continue
        if gpus:
            return DetectedGpus(gpus, source, tuple(notes))
        notes.append(f"{source}: {'; '.join(why) or 'no GPUs reported'}")
    return DetectedGpus((), "none", tuple(notes))


NO_DETECT_HINT = "CLUB3090_NO_GPU_DETECT"


def _describe(exc: BaseException) -> str:
    text = " ".join(str(exc).split())[:200]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# --- NVIDIA ---------------------------------------------------------------------------------

def _probe_nvml(nvml: Any, timeout_s: float, why: list[str]) -> tuple[DetectedGpu, ...]:
    if nvml is None:
        try:
            import pynvml  # nvidia-ml-py; imported here so importing us never loads it
        except Exception as exc:  # noqa: BLE001 - a broken install is "no NVML", recorded
            why.append(f"pynvml unavailable ({_describe(exc)})")
            return ()
        nvml = pynvml
    return _bounded(lambda: _read_nvml(nvml), timeout_s, why) or ()


def _read_nvml(nvml: Any) -> tuple[DetectedGpu, ...]:
    nvml.nvmlInit()
    try:
        count = int(nvml.nvmlDeviceGetCount())
        if not 0 < count <= MAX_GPUS:
            return ()
        gpus = []
        for index in range(count):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            name = nvml.nvmlDeviceGetName(handle)
            if isinstance(name, bytes):
                name = name.decode("utf-8", "replace")
            total = int(nvml.nvmlDeviceGetMemoryInfo(handle).total)
            try:
                major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
                sm = _sm(f"{int(major)}.{int(minor)}")
            except Exception:  # noqa: BLE001 - an old driver without the call: SM unknown, fail closed later
                sm = None
            gpus.append(DetectedGpu(index, _clean_name(name), total if total > 0 else None, sm, NVIDIA))
        return tuple(gpus)
    finally:
        with contextlib.suppress(Exception):  # shutting NVML down is best effort
            nvml.nvmlShutdown()


def memory_used_bytes(*, enabled: bool = True, nvml: Any = None,
                      timeout_s: float = PROBE_TIMEOUT_S) -> tuple[int, ...] | None:
    """Memory in use on each NVIDIA GPU (NVML, by device index), for soak sampling; None when
    NVML is unavailable, detection is disabled (``enabled=False``, as for :func:`detect`) or the
    read fails."""
    if not enabled:
        return None
    if nvml is None:
        try:
            import pynvml  # nvidia-ml-py; imported here so importing us never loads it
        except Exception:  # noqa: BLE001 - a broken install is "no NVML", like a missing one
            return None
        nvml = pynvml

    def read() -> tuple[int, ...]:
        nvml.nvmlInit()
        try:
            count = int(nvml.nvmlDeviceGetCount())
            if not 0 < count <= MAX_GPUS:
                return ()
            return tuple(int(nvml.nvmlDeviceGetMemoryInfo(nvml.nvmlDeviceGetHandleByIndex(i)).used)
                         for i in range(count))
        finally:
            with contextlib.suppress(Exception):  # shutting NVML down is best effort
                nvml.nvmlShutdown()
    return _bounded(read, timeout_s, []) or None


NVIDIA_SMI_QUERY = ("nvidia-smi", "--query-gpu=index,name,memory.total,compute_cap",
                    "--format=csv,noheader,nounits")
NVIDIA_SMI_QUERY_NO_CC = ("nvidia-smi", "--query-gpu=index,name,memory.total",
                          "--format=csv,noheader,nounits")   # drivers before compute_cap (< 510)


def _probe_nvidia_smi(run: Runner, timeout_s: float, why: list[str]) -> tuple[DetectedGpu, ...]:
    text = _run_capped(run, NVIDIA_SMI_QUERY, timeout_s, why)
    if text is not None:
        return _parsed(parse_nvidia_smi(text, with_compute_cap=True), why)
    text = _run_capped(run, NVIDIA_SMI_QUERY_NO_CC, timeout_s, why)
    return _parsed(parse_nvidia_smi(text, with_compute_cap=False), why) if text is not None else ()


def parse_nvidia_smi(text: str, *, with_compute_cap: bool = True) -> tuple[DetectedGpu, ...]:
    """Parse ``--format=csv,noheader,nounits`` rows; any malformed row voids the whole answer."""
    gpus = []
    fields = 4 if with_compute_cap else 3
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < fields:
            return ()
        # a name could hold a comma: index first, memory and compute_cap last
        index_s, tail = parts[0], parts[-(fields - 2):]
        name = ", ".join(parts[1:len(parts) - (fields - 2)]).strip()
        try:
            index = int(index_s)
            mib = int(tail[0])
        except ValueError:
            return ()
        if index < 0 or mib <= 0 or not name:
            return ()
        sm = _sm(tail[1]) if with_compute_cap else None
        gpus.append(DetectedGpu(index, _clean_name(name), mib * 2**20, sm, NVIDIA))
    if len(gpus) > MAX_GPUS or len({g.index for g in gpus}) != len(gpus):
        return ()
    return tuple(gpus)


# --- AMD --------------------------------------------------------------------------------------

def _probe_amd_smi(run: Runner, timeout_s: float, why: list[str]) -> tuple[DetectedGpu, ...]:
    text = _run_capped(run, ("amd-smi", "static", "--asic", "--vram", "--json"), timeout_s, why)
    return _parsed(parse_amd_smi(text), why) if text is not None else ()


def parse_amd_smi(text: str) -> tuple[DetectedGpu, ...]:
    """``amd-smi static --asic --vram --json``: a list (or ``{"gpu_data": [...]}``) of GPUs.

    Tolerates the layouts seen across ROCm releases: ``vram.size`` as ``{"value", "unit"}``
    or a number of MB, or ``vram.vram_size_mb``.
    """
    data = json.loads(text)
    if isinstance(data, Mapping):
        data = data.get("gpu_data", data.get("gpus"))
    if not isinstance(data, list) or not 0 < len(data) <= MAX_GPUS:
        return ()
    gpus = []
    for position, item in enumerate(data):
        if not isinstance(item, Mapping):
            return ()
        index = item.get("gpu", position)
        if not isinstance(index, int) or isinstance(index, bool):
            index = position
        asic_raw = item.get("asic")
        asic: Mapping[str, Any] = asic_raw if isinstance(asic_raw, Mapping) else {}
        name = asic.get("market_name") or asic.get("device_name") or "AMD GPU"
        gpus.append(DetectedGpu(index, _clean_name(str(name)), _amd_vram_bytes(item.get("vram")),
                                NON_NVIDIA_SM, AMD))
    return tuple(gpus)


def _amd_vram_bytes(vram: Any) -> int | None:
    if not isinstance(vram, Mapping):
        return None
    size = vram.get("size", vram.get("vram_size_mb", vram.get("vram_size")))
    unit = "MB"
    if isinstance(size, Mapping):
        unit = str(size.get("unit", "MB"))
        size = size.get("value")
    try:
        value = int(str(size).split()[0])
    except (ValueError, IndexError):
        return None
    scale = {"B": 1, "KB": 2**10, "MB": 2**20, "GB": 2**30}.get(unit.upper())
    return value * scale if scale and value > 0 else None


def _probe_rocm_smi(run: Runner, timeout_s: float, why: list[str]) -> tuple[DetectedGpu, ...]:
    text = _run_capped(run, ("rocm-smi", "--showproductname", "--showmeminfo", "vram", "--json"),
                       timeout_s, why)
    return _parsed(parse_rocm_smi(text), why) if text is not None else ()


def parse_rocm_smi(text: str) -> tuple[DetectedGpu, ...]:
    """``rocm-smi --showproductname --showmeminfo vram --json``: ``{"card0": {...}, ...}``."""
    data = json.loads(text)
    if not isinstance(data, Mapping):
        return ()
    gpus = []
    for key, card in data.items():
        if not (isinstance(key, str) and key.startswith("card") and key[4:].isdigit()):
            continue  # "system" and other non-card sections
        if not isinstance(card, Mapping):
            return ()
        fields = {str(k).lower(): v for k, v in card.items()}
        name = (fields.get("card series") or fields.get("card model") or fields.get("device name")
                or "AMD GPU")
        try:
            total = int(str(fields.get("vram total memory (b)", "")).strip())
        except ValueError:
            total = 0
        gpus.append(DetectedGpu(int(key[4:]), _clean_name(str(name)), total if total > 0 else None,
                                NON_NVIDIA_SM, AMD))
    if len(gpus) > MAX_GPUS:
        return ()
    return tuple(sorted(gpus, key=lambda g: g.index))


# --- Apple ------------------------------------------------------------------------------------

def _probe_sysctl(run: Runner, timeout_s: float, why: list[str]) -> tuple[DetectedGpu, ...]:
    text = _run_capped(run, ("sysctl", "-n", "machdep.cpu.brand_string"), timeout_s, why)
    if text is None:
        return ()
    brand = text.strip()
    if not brand.startswith("Apple"):
        why.append(f"not Apple silicon ({_clean_name(brand)[:60]})")
        return ()  # an Intel Mac: its discrete GPU, if any, comes from system_profiler
    # unified memory is not VRAM: leave memory unknown, the fit never uses Apple GPUs anyway
    return (DetectedGpu(0, _clean_name(brand), None, NON_NVIDIA_SM, APPLE),)


def _probe_system_profiler(run: Runner, timeout_s: float, why: list[str]) -> tuple[DetectedGpu, ...]:
    text = _run_capped(run, ("system_profiler", "SPDisplaysDataType", "-json"), timeout_s, why)
    return _parsed(parse_system_profiler(text), why) if text is not None else ()


def parse_system_profiler(text: str) -> tuple[DetectedGpu, ...]:
    data = json.loads(text)
    entries = data.get("SPDisplaysDataType") if isinstance(data, Mapping) else None
    if not isinstance(entries, list):
        return ()
    gpus: list[DetectedGpu] = []
    for entry in entries[:MAX_GPUS]:
        if isinstance(entry, Mapping) and entry.get("sppci_model"):
            gpus.append(DetectedGpu(len(gpus), _clean_name(str(entry["sppci_model"])), None,
                                    NON_NVIDIA_SM, APPLE))
    return tuple(gpus)


# --- helpers ----------------------------------------------------------------------------------

def _run_capped(run: Runner, argv: Sequence[str], timeout_s: float, why: list[str]) -> str | None:
    """Run a probe; its stdout as text, or None on a missing binary, timeout, error or flood
    (the reason appended to ``why``)."""
    try:
        proc = run(list(argv), capture_output=True, timeout=timeout_s, check=False,
                   stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        why.append(f"{argv[0]} timed out after {timeout_s:g}s")
        return None
    except FileNotFoundError:
        why.append(f"{argv[0]} not found")
        return None
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        why.append(f"{argv[0]} failed to run ({_describe(exc)})")
        return None
    code = getattr(proc, "returncode", 1)
    if code != 0:
        why.append(f"{argv[0]} exited {code}")
        return None
    out = getattr(proc, "stdout", None)
    if isinstance(out, str):
        out = out.encode("utf-8", "replace")
    if not isinstance(out, bytes) or len(out) > MAX_OUTPUT_BYTES:
        why.append(f"{argv[0]} output unreadable or over {MAX_OUTPUT_BYTES} bytes")
        return None
    return out.decode("utf-8", "replace")


def _parsed(gpus: tuple[DetectedGpu, ...], why: list[str]) -> tuple[DetectedGpu, ...]:
    if not gpus:
        why.append("output not understood or listed no GPUs")
    return gpus


def _bounded(fn: Callable[[], _T], timeout_s: float, why: list[str]) -> _T | None:
    """Run ``fn`` on a daemon thread; None if it raises or has not finished within the timeout
    (the reason appended to ``why``).

    NVML calls cannot be interrupted; a wedged driver must not hang the CLI, so the thread is
    abandoned (daemon) and detection moves on to the next probe.
    """
    result: list[_T] = []
    failure: list[str] = []

    def target() -> None:
        try:
            result.append(fn())
        except Exception as exc:  # noqa: BLE001 - a driver fault is "no answer", recorded
            failure.append(_describe(exc))

    worker = threading.Thread(target=target, name="club3090-nvml", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if result:
        return result[0]
    why.append(failure[0] if failure else f"no answer within {timeout_s:g}s")
    return None


def _sm(text: str) -> Decimal | None:
    """A driver's compute capability; None for "[N/A]", "" or garbage (the gate fails closed)."""
    try:
        return parse_sm(text)
    except ValueError:
        return None


def _clean_name(name: str) -> str:
    return " ".join(name.replace("\x00", "").split())[:128]
