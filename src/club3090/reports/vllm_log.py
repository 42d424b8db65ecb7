"""Reading a vLLM start-up log (pure): the serving shape it states and the memory it measured.

Formats read (vLLM 0.5 to 0.2x, V0 and V1 engines, with or without docker compose / Ray /
worker prefixes): the engine-config line (``Initializing a V1 LLM engine (v0.8.3) with config:
model=..., dtype=..., max_seq_len=..., tensor_parallel_size=...``), the ``non-default args: {...}``
line, ``Model loading took N GiB [memory and S seconds]`` / ``Loading model weights took N GB``,
``Loading weights took S seconds``, the memory-profiling lines (``total_gpu_memory (X) x
gpu_memory_utilization (U) = B``, ``model weights take ...; non_torch_memory takes ...; PyTorch
activation peak memory takes ...; the rest of the memory reserved for KV Cache is ...``, and the
0.6.3 ``Memory profiling results: key=value`` form), ``Available KV cache memory``, ``GPU KV cache
size: N tokens``, ``# GPU blocks: N``, ``Maximum concurrency for L tokens per request: Cx``,
``Graph capturing finished ... took X GiB``, ``cudagraph_capture_sizes``, and the KV-too-small
and CUDA out-of-memory errors. Field names follow the calibration cases' ``measured`` schema.
Parsing has budgets: at most ``MAX_LINES`` lines of at most ``MAX_LINE`` characters are read.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

MAX_LINES = 200_000
MAX_LINE = 64 * 1024
_GIB_PER = {"gib": 1.0, "gb": 1.0, "mib": 1 / 1024, "mb": 1 / 1024, "kib": 1 / 1024**2, "kb": 1 / 1024**2}

_NUM = r"(\d[\d,]*(?:\.\d+)?)"
_VERSION_LINE = re.compile(r"Initializing an? (?:(V0|V1) )?LLM engine \(v([^)\s]+)\) with config: (.*)")
_SERVER_VERSION = re.compile(r"vLLM API server version (\S+)")
_NON_DEFAULT = re.compile(r"non-default args: (\{.*\})\s*$")
_MODEL_LOADING = re.compile(r"Model loading took " + _NUM + r" ?(GiB|GB)(?: memory)?(?: and " + _NUM + r" ?s)?", re.I)
_WEIGHTS_TOOK = re.compile(r"Loading model weights took " + _NUM + r" ?(GiB|GB)", re.I)
_LOADING_SECONDS = re.compile(r"Loading weights took " + _NUM + r" ?seconds", re.I)
_TOTAL = re.compile(r"total_gpu_memory \(" + _NUM + r" ?(GiB|GB)\) x gpu_memory_utilization \(" + _NUM
                    + r"\) = " + _NUM + r" ?(GiB|GB)")
_TERMS = re.compile(r"model weights take " + _NUM + r" ?(GiB|GB); non_torch_memory takes " + _NUM
                    + r" ?(GiB|GB); PyTorch activation peak memory takes " + _NUM + r" ?(GiB|GB); the rest of the "
                    r"memory reserved for KV Cache is " + _NUM + r" ?(GiB|GB)")
_PROFILE_RESULTS = re.compile(r"Memory profiling results: (.*)")
_AVAILABLE = re.compile(r"Available KV cache memory: (-?)" + _NUM + r" ?(GiB|GB)")   # negative: the shortfall
_KV_SIZE = re.compile(r"GPU KV cache size: " + _NUM + r" tokens")
_CPU_KV_SIZE = re.compile(r"CPU KV cache size: " + _NUM + r" tokens")
_GPU_BLOCKS = re.compile(r"# (?:GPU|cuda|CUDA) blocks: " + _NUM)
_CONCURRENCY = re.compile(r"Maximum concurrency for " + _NUM + r" tokens per request: " + _NUM + r"x")
_GRAPHS = re.compile(r"Graph capturing finished in " + _NUM + r" secs?, took " + _NUM + r" ?(GiB|GB|MiB)")
_CAPTURE_SIZES = re.compile(r"""["']?cudagraph_capture_sizes["']?\s*[:=]\s*\[([\d,\s]*)\]""")
_MAX_LEN_ERROR = re.compile(r"max seq len \(" + _NUM + r"\) is larger than the maximum number of tokens that can be "
                            r"stored in KV cache \(" + _NUM + r"\)")
_NEEDED_ERROR = re.compile(r"max seq len \(" + _NUM + r"\), \(" + _NUM + r" ?(GiB|GB) KV cache is needed, which is "
                           r"larger than the available KV cache memory \(" + _NUM + r" ?(GiB|GB)\)")
_OOM = re.compile(r"OutOfMemoryError: CUDA out of memory\. Tried to allocate " + _NUM + r" ?(GiB|MiB|KiB|GB|MB)"
                  r"(?:\. GPU \d+ has a total capac[a-z]+ of " + _NUM + r" ?(GiB|GB))?")
_CUDA_OOM = re.compile(r"CUDA error: out of memory")
_NO_KV_MEMORY = re.compile(r"No available memory for the cache blocks")
_ESTIMATED_LEN = re.compile(r"the estimated maximum model length is " + _NUM)
_CONFIG_ITEM = re.compile(r"(\w+)=('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|[^,\s]+)")


def _f(text: str) -> float:
    return float(text.replace(",", ""))


def _i(text: str) -> int:
    value = _f(text)   # saturates at 2^63 (a 400-digit count is inf): receipts then refuse it as out of range
    return int(value) if value < 2**63 else 2**63


def _gib(value: str, unit: str) -> float:
    return _f(value) * _GIB_PER[unit.lower()]


@dataclass
class StartupLog:
    """What one vLLM start-up log states; ``None`` = the log did not say."""

    vllm_version: str | None = None
    engine: str | None = None                 # "v0" | "v1"
    args: dict[str, Any] = field(default_factory=dict)   # engine config / non-default args, vLLM's names
    measured: dict[str, Any] = field(default_factory=dict)
    gpu_total_memory_gib: float | None = None
    local_model: str | None = None            # a local folder the log served, replaced by a given model
    device: str | None = None                 # "cpu": vLLM's CPU build (its KV pool is host memory)

    @property
    def found(self) -> bool:
        return bool(self.measured) or self.vllm_version is not None or bool(self.args)

    @property
    def startup_outcome(self) -> str | None:
        error = self.measured.get("error")
        if isinstance(error, Mapping):
            return {"max_seq_len_larger_than_kv_tokens": "kv_error_max_len_too_large",
                    "kv_needed_gt_available": "kv_error_needed_gt_available",
                    "no_available_kv_memory": "kv_error_no_available_memory"}.get(str(error.get("type")), "oom")
        if any(k in self.measured for k in ("gpu_kv_cache_tokens", "cpu_kv_cache_tokens", "max_concurrency",
                                            "num_gpu_blocks")):
            return "ok"
        return None


def _literal_dict(text: str) -> dict[str, Any]:
    """A ``{...}`` printed by Python; values that are not literals are kept as their text."""
    try:
        value = ast.literal_eval(text)
        return dict(value) if isinstance(value, dict) else {}
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        pass
    out: dict[str, Any] = {}
    for m in re.finditer(r"'(\w+)': ('(?:[^'\\]|\\.)*'|\[[^\]]*\]|[\w.+-]+)", text):
        try:
            out[m.group(1)] = ast.literal_eval(m.group(2))
        except (ValueError, SyntaxError):
            out[m.group(1)] = m.group(2)
    return out


def _config_items(text: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for m in _CONFIG_ITEM.finditer(text):
        key, raw = m.group(1), m.group(2)
        if key in out:
            continue
        if raw[:1] in ("'", '"'):
            value: Any = raw[1:-1]
        elif raw in ("None", "True", "False"):
            value = {"None": None, "True": True, "False": False}[raw]
        else:
            try:
                value = int(raw)
            except ValueError:
                try:
                    value = float(raw)
                except ValueError:
                    value = raw.rstrip(",")
        out[key] = value
    return out


def cpu_kv_cache_tokens(line: str) -> int | None:
    """The KV pool of vLLM's CPU build, ``CPU KV cache size: N tokens``: host memory sized by
    ``VLLM_CPU_KVCACHE_SPACE``, never a GPU pool, so it is kept apart from ``gpu_kv_cache_tokens``."""
    m = _CPU_KV_SIZE.search(line)
    return _i(m.group(1)) if m is not None else None


def parse_startup(text: str) -> StartupLog:
    """Parse a start-up log. Later lines win (a log may hold several attempts: the last counts)."""
    log = StartupLog()
    m_: dict[str, Any] = log.measured
    for n, raw in enumerate(text.splitlines()):
        if n >= MAX_LINES:
            break
        line = raw[:MAX_LINE]
        if (m := _VERSION_LINE.search(line)) is not None:
            log.engine = (m.group(1) or "").lower() or None
            log.vllm_version = m.group(2)
            config = _config_items(m.group(3))
            if "max_seq_len" in config:
                config.setdefault("max_model_len", config["max_seq_len"])
            for key, value in config.items():
                log.args.setdefault(key, value)
        elif (m := _SERVER_VERSION.search(line)) is not None and log.vllm_version is None:
            log.vllm_version = m.group(1)
        if (m := _NON_DEFAULT.search(line)) is not None:
            log.args.update(_literal_dict(m.group(1)))
        if (m := _MODEL_LOADING.search(line)) is not None:
            m_["model_loading_gib"] = _gib(m.group(1), m.group(2))
            if m.group(3):
                m_["model_loading_seconds"] = _f(m.group(3))
        elif (m := _WEIGHTS_TOOK.search(line)) is not None:
            m_["model_loading_gib"] = _gib(m.group(1), m.group(2))
        if (m := _LOADING_SECONDS.search(line)) is not None:
            m_["weights_loading_seconds"] = _f(m.group(1))
        if (m := _TOTAL.search(line)) is not None:
            log.gpu_total_memory_gib = _gib(m.group(1), m.group(2))
            log.args.setdefault("gpu_memory_utilization", _f(m.group(3)))
            m_["memory_budget_gib"] = _gib(m.group(4), m.group(5))
        if (m := _TERMS.search(line)) is not None:
            m_["profile_weights_gib"] = _gib(m.group(1), m.group(2))
            m_["non_torch_gib"] = _gib(m.group(3), m.group(4))
            m_["activation_peak_gib"] = _gib(m.group(5), m.group(6))
            m_["available_kv_cache_gib"] = _gib(m.group(7), m.group(8))
        if (m := _PROFILE_RESULTS.search(line)) is not None:
            items = {k: v for k, v in re.findall(r"(\w+)=([\d.]+)(?:GiB|GB)?", m.group(1))}
            if "total_gpu_memory" in items:
                log.gpu_total_memory_gib = float(items["total_gpu_memory"])
            if "non_torch_memory" in items:
                m_["non_torch_gib"] = float(items["non_torch_memory"])
            if "kv_cache_size" in items:
                m_["available_kv_cache_gib"] = float(items["kv_cache_size"])
            if "gpu_memory_utilization" in items:
                log.args.setdefault("gpu_memory_utilization", float(items["gpu_memory_utilization"]))
        if (m := _AVAILABLE.search(line)) is not None:
            m_["available_kv_cache_gib"] = (-1 if m.group(1) else 1) * _gib(m.group(2), m.group(3))
        if (m := _KV_SIZE.search(line)) is not None:
            m_["gpu_kv_cache_tokens"] = _i(m.group(1))
        if (cpu_tokens := cpu_kv_cache_tokens(line)) is not None:
            m_["cpu_kv_cache_tokens"], log.device = cpu_tokens, "cpu"
        if (m := _GPU_BLOCKS.search(line)) is not None:
            m_["num_gpu_blocks"] = _i(m.group(1))
        if (m := _CONCURRENCY.search(line)) is not None:
            m_["max_concurrency_for_len"] = _i(m.group(1))
            m_["max_concurrency"] = _f(m.group(2))
        if (m := _GRAPHS.search(line)) is not None:
            m_["cudagraph_gib"] = _gib(m.group(2), m.group(3))
        if (m := _CAPTURE_SIZES.search(line)) is not None:
            sizes = [int(s) for s in re.findall(r"\d+", m.group(1))]
            if sizes:
                m_["cudagraph_capture_sizes"] = len(sizes)
        if (m := _MAX_LEN_ERROR.search(line)) is not None:
            m_["gpu_kv_cache_tokens"] = _i(m.group(2))
            m_["error"] = {"type": "max_seq_len_larger_than_kv_tokens", "max_seq_len": _i(m.group(1)),
                           "kv_cache_tokens": _i(m.group(2))}
        if (m := _NEEDED_ERROR.search(line)) is not None:
            m_["available_kv_cache_gib"] = _gib(m.group(4), m.group(5))
            m_["error"] = {"type": "kv_needed_gt_available", "max_seq_len": _i(m.group(1)),
                           "needed_gib": _gib(m.group(2), m.group(3)), "available_gib": _gib(m.group(4), m.group(5))}
            if (e := _ESTIMATED_LEN.search(line)) is not None:    # vLLM's own suggestion
                m_["error"]["estimated_max_model_len"] = _i(e.group(1))
        if (m := _OOM.search(line)) is not None:
            m_["error"] = {"type": "cuda_oom", "attempted_alloc_gib": round(_gib(m.group(1), m.group(2)), 4)}
            if m.group(3):
                log.gpu_total_memory_gib = log.gpu_total_memory_gib or _gib(m.group(3), m.group(4))
        elif _CUDA_OOM.search(line) and "error" not in m_:
            m_["error"] = {"type": "cuda_oom", "attempted_alloc_gib": None}
        if _NO_KV_MEMORY.search(line) and "error" not in m_:
            m_["error"] = {"type": "no_available_kv_memory"}
    return log


# the serving shape, in vLLM's flag names, from what the log printed
SHAPE_KEYS: tuple[str, ...] = (
    "model", "quantization", "dtype", "tensor_parallel_size", "pipeline_parallel_size", "gpu_memory_utilization",
    "max_model_len", "kv_cache_dtype", "block_size", "max_num_seqs", "max_num_batched_tokens", "enforce_eager",
)


def inferred_keys(log: StartupLog) -> list[str]:
    """Shape keys read from a measurement line rather than from the config or args lines."""
    if "max_model_len" not in log.args and log.measured.get("max_concurrency_for_len") is not None:
        return ["max_model_len"]
    return []


def serving_shape(log: StartupLog) -> dict[str, Any]:
    """The shape the log states; absent keys stay absent (vLLM's default applied). vLLM prints
    ``Maximum concurrency for <max_model_len> tokens per request``, so that line fills
    ``max_model_len`` when no config line states it."""
    args = dict(log.args)
    if "max_model_len" in inferred_keys(log):
        args["max_model_len"] = log.measured["max_concurrency_for_len"]
    shape: dict[str, Any] = {}
    for key in SHAPE_KEYS:
        value = args.get(key)
        if key == "model" and value is None:
            value = args.get("model_tag")
        if key == "model" and hub_repo_of(value) is not None:
            value = hub_repo_of(value)
        if value is None:
            continue
        if key == "dtype" and isinstance(value, str) and value.startswith("torch."):
            value = value[len("torch."):]
        shape[key] = value
    return shape


FILLABLE_KEYS: tuple[str, ...] = (*SHAPE_KEYS, "vllm_version")


_HF_SNAPSHOT = re.compile(r"(?:^|/)models--([^/]+?)--([^/]+)/snapshots/[^/]+/?$")


def hub_repo_of(model: object) -> str | None:
    """``.../hub/models--org--name/snapshots/<commit>`` (what ``vllm serve <snapshot>`` prints) ->
    ``org/name``; None for anything else."""
    m = _HF_SNAPSHOT.search(str(model or ""))
    return f"{m.group(1)}/{m.group(2)}" if m else None


def local_model_path(model: object) -> str | None:
    """The model argument when it is a folder on some machine (not a repo id, not an HF cache
    snapshot): the name of a local folder, to be redacted, never an identity."""
    text = str(model or "")
    if hub_repo_of(text) is not None or not text.startswith(("/", "./", "../", "~")):
        return None
    return text


def fill_missing(log: StartupLog, given: dict[str, Any]) -> list[str]:
    """Add settings the log does not state (``--arg KEY=VALUE``); the log's own values win, except
    a model given for a log that names only a local folder. Returns the keys filled."""
    filled = []
    for key, value in given.items():
        if key not in FILLABLE_KEYS:
            raise ValueError(f"unknown setting {key!r}; known: {', '.join(FILLABLE_KEYS)}")
        if key == "vllm_version":
            if log.vllm_version is None:
                log.vllm_version = str(value)
                filled.append(key)
        elif key == "model" and local_model_path(log.args.get("model") or log.args.get("model_tag")):
            log.local_model = str(log.args.get("model") or log.args.get("model_tag"))
            log.args["model"] = value
            log.args.pop("model_tag", None)
            filled.append(key)
        elif key not in log.args:
            log.args[key] = value
            filled.append(key)
    return filled
