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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

MAX_LINES = 200_000
MAX_LINE = 64 * 1024
_GIB_PER = {"gib": 1.0, "gb": 1.0, "mib": 1 / 1024, "mb": 1 / 1024, "kib": 1 / 1024**2, "kb": 1 / 1024**2,
            "bytes": 1 / 1024**3}

# Every pattern is linear on a bounded line: each quantifier is bounded (a number has at most
# 24 digits, a name 128 characters) or runs to the line's end once, so a hostile line costs
# O(length), never O(length^2) (issue 29, BUG-2).
_NUM = r"(\d[\d,]{0,24}(?:\.\d{1,12})?)"
_SNUM = r"(-?\d[\d,]{0,24}(?:\.\d{1,12})?)"     # a signed figure: vLLM prints negative non-torch growth
_UNIT = r" ?(GiB|GB)"
# a figure that precedes its label ("1.46 GiB for peak activation"): it must start a number
_LEAD = r"(?<![\d.,])" + _SNUM + _UNIT
_VERSION_LINE = re.compile(r"Initializing an? (?:(V0|V1) )?LLM engine \(v([^)\s]{1,64})\) with config: (.*)")
_SERVER_VERSION = re.compile(r"vLLM API server version (\S{1,64})")
_MODEL_LOADING = re.compile(r"Model loading took " + _NUM + _UNIT + r"(?: memory)?(?: and " + _NUM + r" ?s)?", re.I)
_WEIGHTS_TOOK = re.compile(r"Loading model weights took " + _NUM + _UNIT, re.I)
_LOADING_SECONDS = re.compile(r"Loading weights took " + _NUM + r" ?seconds", re.I)
_TOTAL = re.compile(r"total_gpu_memory \(" + _NUM + _UNIT + r"\) x gpu_memory_utilization \(" + _NUM
                    + r"\) = " + _NUM + _UNIT)
_TERMS = re.compile(r"model weights take " + _NUM + _UNIT + r"; non_torch_memory takes " + _SNUM + _UNIT
                    + r"; PyTorch activation peak memory takes " + _NUM + _UNIT + r"; the rest of the "
                    r"memory reserved for KV Cache is " + _SNUM + _UNIT)
_PROFILE_RESULTS = re.compile(r"Memory profiling results: (.*)")
_PROFILE_ITEM = re.compile(r"(?<!\w)(\w{1,64})=(-?[\d.]{1,32})(?:GiB|GB)?")
_AVAILABLE = re.compile(r"Available KV cache memory: (-?)" + _NUM + _UNIT)   # negative: the shortfall
_KV_SIZE = re.compile(r"GPU KV cache size: " + _NUM + r" tokens")
_CPU_KV_SIZE = re.compile(r"CPU KV cache size: " + _NUM + r" tokens")
_GPU_BLOCKS = re.compile(r"# (?:GPU|cuda|CUDA) blocks: " + _NUM)
_CONCURRENCY = re.compile(r"Maximum concurrency for " + _NUM + r" tokens per request: " + _NUM + r"x")
_GRAPHS = re.compile(r"Graph capturing finished in " + _NUM + r" secs?, took " + _SNUM + r" ?(GiB|GB|MiB)")
_CAPTURE_SIZES = re.compile(r"""["']?cudagraph_capture_sizes["']?\s{0,8}[:=]\s{0,8}\[([\d,\s]{0,8192})\]""")
_MAX_LEN_ERROR = re.compile(r"max seq len \(" + _NUM + r"\) is larger than the maximum number of tokens that can be "
                            r"stored in KV cache \(" + _NUM + r"\)")
_NEEDED_ERROR = re.compile(r"max seq len \(" + _NUM + r"\), \(" + _NUM + _UNIT + r" KV cache is needed, which is "
                           r"larger than the available KV cache memory \(" + _NUM + _UNIT + r"\)")
_OOM = re.compile(r"OutOfMemoryError: CUDA out of memory\. Tried to allocate " + _NUM + r" ?(GiB|MiB|KiB|GB|MB)"
                  r"(?:\. GPU \d{1,3} has a total capac[a-z]{1,16} of " + _NUM + _UNIT + r")?")
_CUDA_OOM = re.compile(r"CUDA error: out of memory")
_NO_KV_MEMORY = re.compile(r"No available memory for the cache blocks")
_ESTIMATED_LEN = re.compile(r"the estimated maximum model length is " + _NUM)
_CONFIG_ITEM = re.compile(r"(?<!\w)(\w{1,128})=('(?:[^'\\]|\\.){0,4096}'|\"(?:[^\"\\]|\\.){0,4096}\"|[^,\s]{1,4096})")
_LITERAL_ITEM = re.compile(r"'(\w{1,128})': ('(?:[^'\\]|\\.){0,4096}'|\[[^\]]{0,4096}\]|[\w.+-]{1,256})")

# the per-term breakdowns vLLM prints after profiling, one pattern per clause so a wrapped line
# (or a release that rewords the rest of the sentence) still yields each term
# V1 0.8-0.10 (``v1/worker/gpu_worker.py``): "Memory profiling takes S seconds. Total non KV cache
# memory: N GiB; torch peak memory increase: P GiB; non-torch forward increase memory: T GiB;
# weights memory: W GiB."
# V1 from 0.11 (``gpu_worker.py::compile_or_warm_up_model``): "Free memory on device (F/T GiB) on
# startup. Desired GPU memory utilization is (U, B GiB). Actual usage is W GiB for weight, P GiB for
# peak activation, N GiB for non-torch memory, and C GiB for CUDAGraph memory." -- later releases:
# "Actual usage is A GiB for consumed memory (weights + non-torch), P GiB for peak activation, and
# C GiB for CUDAGraph memory." Then "Current kv cache memory in use is X GiB" (or "N bytes").
# The one-figure readings, each (label, measured key): the figure after its label (0.8-0.10, and
# 0.21's "Estimated CUDA graph memory: N GiB") or before it (from 0.11).
_GIB_AFTER_LABEL = (
    ("Total non KV cache memory: ", "non_kv_gib"),
    ("torch peak memory increase: ", "activation_peak_gib"),
    ("non-torch forward increase memory: ", "non_torch_gib"),
    ("weights memory: ", "profile_weights_gib"),
    ("Estimated CUDA graph memory: ", "cudagraph_estimate_gib"),
)
_GIB_BEFORE_LABEL = (
    (" for weight", "profile_weights_gib"),
    (" for consumed memory", "weights_plus_non_torch_gib"),
    (" for peak activation", "activation_peak_gib"),
    (" for non-torch memory", "non_torch_gib"),
    (" for CUDAGraph memory", "cudagraph_gib"),
)
_FREE_ON_DEVICE = re.compile(r"Free memory on device \(" + _NUM + r"/" + _NUM + _UNIT + r"\) on startup")
_DESIRED = re.compile(r"Desired GPU memory utilization is \(" + _NUM + r", " + _NUM + _UNIT + r"\)")
_KV_IN_USE = re.compile(r"Current kv cache memory in use is " + _NUM + r" ?(GiB|GB|bytes)")
# the profiling sampler's top-k / top-p path (``v1/sample/ops/topk_topp_sampler.py``): "Using FlashInfer
# for top-p & top-k sampling." (or Triton), else "... Falling back to the PyTorch-native implementation
# of top-p & top-k sampling" (a full sort of the logits)
_SAMPLER = re.compile(r"Using (FlashInfer|Triton) for top-p & top-k sampling|(PyTorch-native) implementation of top-p")
# the CUDA graph pool actually captured, beside the estimate subtracted from 0.21
_GRAPH_POOL = re.compile(r"CUDA graph pool memory: " + _SNUM + _UNIT + r" \(actual\), " + _SNUM + _UNIT
                         + r" \(estimated\)")


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
    sampler: str | None = None                # "FlashInfer" | "Triton" | "PyTorch-native": top-k / top-p path
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
        if self.measured.get("num_gpu_blocks") == 0:    # V0 then raises "No available memory for the cache blocks"
            return "kv_error_no_available_memory"
        if any(k in self.measured for k in ("gpu_kv_cache_tokens", "cpu_kv_cache_tokens", "max_concurrency",
                                            "num_gpu_blocks",
                                            "kv_cache_in_use_gib")):   # printed once the cache is allocated
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
    for m in _LITERAL_ITEM.finditer(text):
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


Handler = Callable[[StartupLog, "re.Match[str]"], None]


def _version(log: StartupLog, m: re.Match[str]) -> None:
    log.engine = (m.group(1) or "").lower() or None
    log.vllm_version = m.group(2)
    config = _config_items(m.group(3))
    if "max_seq_len" in config:
        config.setdefault("max_model_len", config["max_seq_len"])
    for key, value in config.items():
        log.args.setdefault(key, value)


def _server_version(log: StartupLog, m: re.Match[str]) -> None:
    if log.vllm_version is None:
        log.vllm_version = m.group(1)


def _model_loading(log: StartupLog, m: re.Match[str]) -> None:
    log.measured["model_loading_gib"] = _gib(m.group(1), m.group(2))
    if m.group(3):
        log.measured["model_loading_seconds"] = _f(m.group(3))


def _weights_took(log: StartupLog, m: re.Match[str]) -> None:
    log.measured.setdefault("model_loading_gib", _gib(m.group(1), m.group(2)))


def _total(log: StartupLog, m: re.Match[str]) -> None:
    log.gpu_total_memory_gib = _gib(m.group(1), m.group(2))
    log.args.setdefault("gpu_memory_utilization", _f(m.group(3)))
    log.measured["memory_budget_gib"] = _gib(m.group(4), m.group(5))


def _terms(log: StartupLog, m: re.Match[str]) -> None:
    for n, key in enumerate(("profile_weights_gib", "non_torch_gib", "activation_peak_gib", "available_kv_cache_gib")):
        log.measured[key] = _gib(m.group(2 * n + 1), m.group(2 * n + 2))


def _profile_results(log: StartupLog, m: re.Match[str]) -> None:
    """V0 0.6.3: ``Memory profiling results: total_gpu_memory=...GiB ... kv_cache_size=...GiB``."""
    items = {k: v for k, v in _PROFILE_ITEM.findall(m.group(1))}
    try:
        if "total_gpu_memory" in items:
            log.gpu_total_memory_gib = float(items["total_gpu_memory"])
        for key, name in (("non_torch_memory", "non_torch_gib"), ("kv_cache_size", "available_kv_cache_gib")):
            if key in items:
                log.measured[name] = float(items[key])
        if "gpu_memory_utilization" in items:
            log.args.setdefault("gpu_memory_utilization", float(items["gpu_memory_utilization"]))
    except ValueError:
        return


def _available(log: StartupLog, m: re.Match[str]) -> None:
    log.measured["available_kv_cache_gib"] = (-1 if m.group(1) else 1) * _gib(m.group(2), m.group(3))


def _concurrency(log: StartupLog, m: re.Match[str]) -> None:
    log.measured["max_concurrency_for_len"] = _i(m.group(1))
    log.measured["max_concurrency"] = _f(m.group(2))


def _capture_sizes(log: StartupLog, m: re.Match[str]) -> None:
    sizes = [s for s in m.group(1).replace(",", " ").split() if s.isdigit()]
    if sizes:
        log.measured["cudagraph_capture_sizes"] = len(sizes)


def _max_len_error(log: StartupLog, m: re.Match[str]) -> None:
    log.measured["gpu_kv_cache_tokens"] = _i(m.group(2))
    log.measured["error"] = {"type": "max_seq_len_larger_than_kv_tokens", "max_seq_len": _i(m.group(1)),
                             "kv_cache_tokens": _i(m.group(2))}


def _needed_error(log: StartupLog, m: re.Match[str]) -> None:
    log.measured["available_kv_cache_gib"] = _gib(m.group(4), m.group(5))
    error = {"type": "kv_needed_gt_available", "max_seq_len": _i(m.group(1)),
             "needed_gib": _gib(m.group(2), m.group(3)), "available_gib": _gib(m.group(4), m.group(5))}
    if (e := _ESTIMATED_LEN.search(m.string)) is not None:    # vLLM's own suggestion
        error["estimated_max_model_len"] = _i(e.group(1))
    log.measured["error"] = error


def _oom(log: StartupLog, m: re.Match[str]) -> None:
    log.measured["error"] = {"type": "cuda_oom", "attempted_alloc_gib": round(_gib(m.group(1), m.group(2)), 4)}
    if m.group(3):
        log.gpu_total_memory_gib = log.gpu_total_memory_gib or _gib(m.group(3), m.group(4))


def _error_once(kind: dict[str, Any]) -> Handler:
    def handler(log: StartupLog, m: re.Match[str]) -> None:
        log.measured.setdefault("error", dict(kind))
    return handler


def _free_on_device(log: StartupLog, m: re.Match[str]) -> None:
    log.measured["free_memory_at_start_gib"] = _gib(m.group(1), m.group(3))
    log.gpu_total_memory_gib = _gib(m.group(2), m.group(3))


def _desired(log: StartupLog, m: re.Match[str]) -> None:
    log.args.setdefault("gpu_memory_utilization", _f(m.group(1)))
    log.measured["memory_budget_gib"] = _gib(m.group(2), m.group(3))


def _graph_pool(log: StartupLog, m: re.Match[str]) -> None:
    log.measured["cudagraph_gib"] = _gib(m.group(1), m.group(2))
    log.measured["cudagraph_estimate_gib"] = _gib(m.group(3), m.group(4))


def _set(key: str, number: Callable[[str], float | int] = _f, unit: bool = False) -> Handler:
    """A handler storing group 1 under ``key`` (as GiB when ``unit``: group 2 names it)."""
    def handler(log: StartupLog, m: re.Match[str]) -> None:
        log.measured[key] = _gib(m.group(1), m.group(2)) if unit else number(m.group(1))
    return handler


_GIB_READINGS: tuple[tuple[str, re.Pattern[str], Handler], ...] = (
    *((label, re.compile(re.escape(label) + _SNUM + _UNIT), _set(key, unit=True)) for label, key in _GIB_AFTER_LABEL),
    *((label, re.compile(_LEAD + re.escape(label) + r"\b"), _set(key, unit=True)) for label, key in _GIB_BEFORE_LABEL),
)


# (literal the line must hold, pattern, handler), in order: a later handler on the same line may read
# an earlier one; the literal is a fast substring test that skips the pattern on most lines
_LINE_RULES: tuple[tuple[str, re.Pattern[str], Handler], ...] = (
    ('LLM engine (v', _VERSION_LINE, _version),
    ('API server version', _SERVER_VERSION, _server_version),
    ('oading model weights took', _WEIGHTS_TOOK, _weights_took),
    ('odel loading took', _MODEL_LOADING, _model_loading),
    ('oading weights took', _LOADING_SECONDS, _set("weights_loading_seconds")),
    ('total_gpu_memory (', _TOTAL, _total),
    ('model weights take', _TERMS, _terms),
    ('Memory profiling results:', _PROFILE_RESULTS, _profile_results),
    ('Free memory on device', _FREE_ON_DEVICE, _free_on_device),
    ('Desired GPU memory utilization', _DESIRED, _desired),
    *_GIB_READINGS,
    ('kv cache memory in use', _KV_IN_USE, _set("kv_cache_in_use_gib", unit=True)),
    ('CUDA graph pool memory', _GRAPH_POOL, _graph_pool),
    ('Available KV cache memory', _AVAILABLE, _available),
    ('KV cache size: ', _KV_SIZE, _set("gpu_kv_cache_tokens", _i)),
    ('CPU KV cache size: ', _CPU_KV_SIZE, lambda log, m: _cpu_pool(log, m.string)),
    (' blocks: ', _GPU_BLOCKS, _set("num_gpu_blocks", _i)),
    ('Maximum concurrency for', _CONCURRENCY, _concurrency),
    ('top-p & top-k sampling', _SAMPLER, lambda log, m: setattr(log, "sampler", m.group(1) or m.group(2))),
    ('Graph capturing finished', _GRAPHS, lambda log, m: log.measured.__setitem__("cudagraph_gib", _gib(m.group(2), m.group(3)))),
    ('cudagraph_capture_sizes', _CAPTURE_SIZES, _capture_sizes),
    ('max seq len (', _MAX_LEN_ERROR, _max_len_error),
    ('max seq len (', _NEEDED_ERROR, _needed_error),
    ('OutOfMemoryError', _OOM, _oom),
    ('CUDA error: out of memory', _CUDA_OOM, _error_once({"type": "cuda_oom", "attempted_alloc_gib": None})),
    ('No available memory for the cache blocks', _NO_KV_MEMORY, _error_once({"type": "no_available_kv_memory"})),
)
_NON_DEFAULT_MARK = "non-default args: "


def _non_default_args(log: StartupLog, line: str) -> None:
    """``non-default args: {...}`` to the line's end, found without a regular expression."""
    at = line.find(_NON_DEFAULT_MARK)
    if at < 0:
        return
    rest = line[at + len(_NON_DEFAULT_MARK):].rstrip()
    if rest.startswith("{") and rest.endswith("}"):
        log.args.update(_literal_dict(rest))


def _derived_terms(measured: dict[str, Any]) -> None:
    """The newest breakdown states weights + non-torch as one figure: split it with the weights line."""
    consumed, weights = measured.get("weights_plus_non_torch_gib"), measured.get("model_loading_gib")
    if consumed is not None and weights is not None and "non_torch_gib" not in measured:
        measured["non_torch_gib"] = round(consumed - weights, 4)


def _cpu_pool(log: StartupLog, line: str) -> None:
    if (tokens := cpu_kv_cache_tokens(line)) is not None:
        log.measured["cpu_kv_cache_tokens"], log.device = tokens, "cpu"


def cpu_kv_cache_tokens(line: str) -> int | None:
    """The KV pool of vLLM's CPU build, ``CPU KV cache size: N tokens``: host memory sized by
    ``VLLM_CPU_KVCACHE_SPACE``, never a GPU pool, so it is kept apart from ``gpu_kv_cache_tokens``."""
    m = _CPU_KV_SIZE.search(line)
    return _i(m.group(1)) if m is not None else None


def parse_startup(text: str) -> StartupLog:
    """Parse a start-up log. Later lines win (a log may hold several attempts: the last counts)."""
    log = StartupLog()
    for n, raw in enumerate(text.splitlines()):
        if n >= MAX_LINES:
            break
        line = raw[:MAX_LINE]
        for key, pattern, handler in _LINE_RULES:
            if key in line and (m := pattern.search(line)) is not None:
                handler(log, m)
        _non_default_args(log, line)
    _derived_terms(log.measured)
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
