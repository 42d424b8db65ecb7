"""The Loop's failure classifier (pure): one capture bundle's points in, one ``Classification`` out.

Order (docs/DESIGN.md, the Loop):

0. the user's own environment (no Docker, no compose plugin, no NVIDIA runtime, port in use,
   disk full) or launch settings vLLM refuses (a ``--max-model-len`` over the model's limit, an
   unknown ``--tool-call-parser``): a local verdict with the next step; never routed upstream;
1. Tier 1, the OOM fast path: a CUDA out-of-memory or KV-cache-too-small error -> ``genuine-oom``;
   ``route_as_kv_calc_bug`` only when the gate's predicted breakdown, the attempted allocation and
   the worker's reported memory all exist and the actual use exceeded the prediction;
2. Tier 2, the exact table: ``sha256(error_substring + arch_family + engine_version)[:12]`` -> class;
3. the condition matchers (Appendix A rows 1-9), first match wins;
4. otherwise ``unknown``.

The error text is taken from pt3's log excerpt, else pt3's failure, else the first red pt4
error; log prefixes (level, timestamp, process) are stripped and it is cut to 240 characters.
Exactly six classes exist; anything else read from data is coerced to ``unknown``.
"""

from __future__ import annotations

import fnmatch
import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

FAILURE_CLASSES: tuple[str, ...] = (
    "genuine-oom", "overlay-arch-drift", "kernel-unsupported", "quant-unsupported",
    "benign-cold-start", "unknown",
)
ERROR_TEXT_LIMIT = 240
MATCHER_KINDS = frozenset({"structural", "pt4_results", "log_substring", "log_substring_all",
                           "gate_abort_reason"})
PREDICATES = frozenset({"pt3_timeout_but_pt4_green", "results_detail_http_404"})

# routes
ROUTE_LOCAL = "local"               # the user's environment: fix it here, nothing is filed
ROUTE_SUPPRESSED = "suppressed"     # benign-cold-start: nothing to report
ROUTE_REVIEW = "review-queue"       # unknown: the local review queue, never a public issue
ROUTE_FILE = "file"                 # filed with consent (gh) or spooled to the dedup queue


def coerce_class(value: object) -> str:
    """One of the six classes; anything else is ``unknown``."""
    return value if isinstance(value, str) and value in FAILURE_CLASSES else "unknown"


def route_for(failure_class: str, environment: str | None = None) -> str:
    if environment:
        return ROUTE_LOCAL
    failure_class = coerce_class(failure_class)
    if failure_class == "benign-cold-start":
        return ROUTE_SUPPRESSED
    if failure_class == "unknown":
        return ROUTE_REVIEW
    return ROUTE_FILE


def error_fingerprint(error_substring: str, arch_family: str | None, engine_version: str | None) -> str:
    """``sha256(error_substring + arch_family + engine_version)[:12]`` (None -> empty)."""
    joined = f"{error_substring}{arch_family or ''}{engine_version or ''}"
    return hashlib.sha256(joined.encode("utf-8")).hexdigest()[:12]


# --- the table ---------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Matcher:
    id: str
    kind: str
    failure_class: str
    row: int | None = None
    any: tuple[str, ...] = ()
    all: tuple[str, ...] = ()
    predicate: str | None = None
    capability: str | None = None
    value: str | None = None
    require_boot_green: bool = False


@dataclass(frozen=True, slots=True)
class FingerprintTable:
    exact: Mapping[str, str] = field(default_factory=dict)     # 12 hex -> class
    matchers: tuple[Matcher, ...] = ()


# --- environment failures ------------------------------------------------------------------------

# (token, substrings (lower case), the next step for the user)
ENVIRONMENT_RULES: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("docker-missing", ("no such file or directory: 'docker'", "docker: command not found",
                        "docker: not found"),
     "install Docker Engine, then run the command again"),
    ("compose-plugin-missing", ("'compose' is not a docker command", "unknown command: docker compose",
                                "unknown shorthand flag: 'f' in -f", "the docker compose plugin is missing"),
     "install the Docker Compose plugin (package docker-compose-plugin), then run the command again"),
    ("docker-daemon-unreachable", ("cannot connect to the docker daemon",
                                   "permission denied while trying to connect to the docker daemon",
                                   "the docker engine is not reachable"),
     "start the Docker daemon and make sure your user may use it (the docker group)"),
    ("nvidia-runtime-missing", ("could not select device driver", "unknown or invalid runtime name: nvidia",
                                "nvidia-container-cli: initialization error",
                                "the nvidia container runtime is not registered"),
     "install the NVIDIA Container Toolkit and restart Docker"),
    ("port-in-use", ("port is already allocated", "address already in use"),
     "stop whatever listens on that port, or choose another with --port"),
    ("disk-full", ("no space left on device",),
     "free disk space where Docker and the Hugging Face cache live"),
    # the user's launch settings, refused by vLLM before it loads anything
    ("max-model-len-over-model-limit", ("user-specified max_model_len",),
     "lower --max-model-len to the model's limit (max_position_embeddings in its config.json)"),
    ("tool-call-parser-unknown", ("invalid tool call parser",),
     "choose a --tool-call-parser that this vLLM lists (its error names the valid ones)"),
)


def environment_verdict(texts: Iterable[str]) -> tuple[str, str] | None:
    """(token, next step) when any text shows a failure of the user's own machine."""
    lowered = [t.lower() for t in texts if t]
    for token, needles, hint in ENVIRONMENT_RULES:
        if any(n in t for t in lowered for n in needles):
            return token, hint
    return None


# --- error text extraction -----------------------------------------------------------------------

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_PREFIXES = (
    re.compile(r"^[\w.-]{1,80}\s+\|\s?"),                            # docker compose: "vllm-1  | "
    re.compile(r"^\([^()]{1,80}\)\s*"),                               # "(VllmWorker rank=3 pid=1090) "
    re.compile(r"^\[rank\d+\]:\s*"),
    re.compile(r"^(?:INFO|WARNING|WARN|ERROR|DEBUG|CRITICAL)\s+\d\d-\d\d\s+\d\d:\d\d:\d\d(?:\.\d+)?\s*"
               r"(?:\[[^\]]{1,80}\]\s*|[\w./-]{1,80}:\d+\]\s*)?"),   # "ERROR 06-05 06:18:13 [x.py:470] "
)
# Linear on any line (a bundle line may be 4 MiB): the name before "Error" is one character of
# context, not ``[\w.]*`` (which is quadratic on "a.a.a.a..."); no repeat follows a repeat.
_ERROR_LINE = re.compile(
    r"(?:[\w.](?:Error|Exception)\b\s*:|\berror\s*:|error response from daemon"
    r"|no space left on device|is not a docker command|out of memory)", re.IGNORECASE)
_GENERIC = (
    "engine core initialization failed", "see root cause above", "traceback (most recent call last)",
    "the above exception was the direct cause", "error executing method", "workerproc hit an exception",
    "cuda kernel errors might be asynchronously reported", "for debugging consider passing",
    "compile with `torch_use_cuda_dsa`", "worker failed with error", "error in inspecting model architecture",
    "failed core proc", "encountered errors while bringing up the project",
)
_OOM = re.compile(
    r"torch\.(?:cuda\.)?OutOfMemoryError|CUDA out of memory|CUDA error: out of memory|\bout of memory\b"
    r"|KV cache is needed, which is larger than the available KV cache memory"
    r"|is larger than the maximum number of tokens that can be stored in KV cache", re.IGNORECASE)
_LINE_LIMIT = 4000          # lines looked at, from the end of the excerpt


def _strip_prefixes(line: str) -> str:
    line = _ANSI.sub("", line).strip()
    for _ in range(4):
        before = line
        for prefix in _PREFIXES:
            line = prefix.sub("", line, count=1).strip()
        if line == before:
            break
    return line


def _bounded(text: str) -> str:
    return " ".join(text.split())[:ERROR_TEXT_LIMIT]


_NOT_AN_ERROR = re.compile(r"(?:^|[\s)|\]])(?:INFO|DEBUG|WARNING|WARN)\s+\d\d-\d\d\s+\d\d:\d\d:\d\d")


def error_lines(log: str) -> list[str]:
    """The error lines of a log, oldest first, prefixes stripped, generic wrappers dropped.

    Lines logged at INFO / DEBUG / WARNING are advice, not errors (vLLM prints "If you are
    running out of memory, consider ..." on every boot that captures CUDA graphs)."""
    lines = (log or "").splitlines()[-_LINE_LIMIT:]
    out = []
    for raw in lines:
        if _NOT_AN_ERROR.search(raw[:300]):
            continue
        line = _strip_prefixes(raw)
        if not line or line.startswith('File "') or not _ERROR_LINE.search(line):
            continue
        if any(g in line.lower() for g in _GENERIC):
            continue
        out.append(_bounded(line))
    return out


def _red_smoke_errors(smoke: Mapping[str, Any] | None) -> list[str]:
    if not smoke:
        return []
    detail = smoke.get("results_detail") or {}
    errors = []
    if isinstance(detail, Mapping):
        for cap, entry in detail.items():
            if isinstance(entry, Mapping) and entry.get("status") == "red" and entry.get("error"):
                errors.append((str(cap), str(entry["error"])))
    return [f"{cap}: {err}" for cap, err in errors]


def error_candidates(points: Mapping[str, Mapping[str, Any]]) -> tuple[str, list[str]]:
    """(source, candidate error texts newest first) by precedence: pt3 excerpt, pt3 failure,
    first red pt4 error."""
    boot = points.get("boot") or {}
    excerpt = str(boot.get("failure_log_excerpt") or "")
    lines = error_lines(excerpt)
    if lines:
        return "pt3.failure_log_excerpt", list(reversed(lines))
    failure = boot.get("failure")
    if failure:
        detail = str(boot.get("detail") or "")
        return "pt3.failure", [_bounded(f"{failure}: {detail}" if detail else str(failure))]
    red = _red_smoke_errors(points.get("smoke"))
    if red:
        return "pt4.results_detail", [_bounded(red[0])]
    return "", []


# --- the classification --------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Classification:
    failure_class: str
    route: str
    tier: str                     # environment | tier1-oom | tier2-exact | matcher | none
    rule: str | None = None       # matcher id, environment token, or exact fingerprint
    error_text: str = ""
    error_source: str = ""
    fingerprint: str = ""
    route_as_kv_calc_bug: bool = False
    predicted_vs_actual_delta_mib: float | None = None
    environment: str | None = None
    next_step: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"failure_class": self.failure_class, "route": self.route, "tier": self.tier, "rule": self.rule,
                "error_text": self.error_text, "error_source": self.error_source,
                "fingerprint": self.fingerprint, "route_as_kv_calc_bug": self.route_as_kv_calc_bug,
                "predicted_vs_actual_delta_mib": self.predicted_vs_actual_delta_mib,
                "environment": self.environment, "next_step": self.next_step}


_MIB = 2**20
_PREDICTED_TERMS = ("weights_bytes", "non_torch_bytes", "activation_bytes", "cudagraph_bytes", "kv_pool_bytes")


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def kv_calc_evidence(points: Mapping[str, Mapping[str, Any]]) -> tuple[bool, float | None]:
    """(route_as_kv_calc_bug, predicted-vs-actual delta MiB) for a genuine OOM.

    Evidence: the gate's predicted breakdown, pt3's attempted allocation and the worker's reported
    memory all exist. Delta = (reported + attempted) - predicted use per GPU (pt5's own delta when
    it recorded one). A kv-calc bug only when evidence is complete, the gate did not already say
    ``wont-fit``, and the actual use exceeded the prediction.
    """
    gate = points.get("gate") or {}
    breakdown = gate.get("predicted_b_breakdown")
    actual = (points.get("boot") or {}).get("actual") or {}
    attempted = _number(actual.get("attempted_alloc_mib")) if isinstance(actual, Mapping) else None
    reported = _number(actual.get("gpu_worker_reported_mib")) if isinstance(actual, Mapping) else None
    per_gpu = breakdown.get("per_gpu") if isinstance(breakdown, Mapping) else None
    if not isinstance(per_gpu, Mapping) or attempted is None or reported is None:
        return False, None
    terms = [_number(per_gpu.get(k)) for k in _PREDICTED_TERMS]
    if any(t is None for t in terms):
        return False, None
    predicted_mib = sum(t for t in terms if t is not None) / _MIB
    override = points.get("override_capture") or {}
    delta = _number(override.get("predicted_vs_actual_delta_mib"))
    if delta is None:
        delta = round(reported + attempted - predicted_mib, 1)
    said_wont_fit = str(gate.get("raw_verdict") or "") == "wont-fit"
    return (delta > 0 and not said_wont_fit), delta


def _boot_green(points: Mapping[str, Mapping[str, Any]]) -> bool:
    boot = points.get("boot") or {}
    return boot.get("ok") is True


def _smoke_results(points: Mapping[str, Mapping[str, Any]]) -> Mapping[str, Any]:
    smoke = points.get("smoke") or {}
    results = smoke.get("results") or {}
    return results if isinstance(results, Mapping) else {}


def _predicate(name: str, points: Mapping[str, Mapping[str, Any]]) -> bool:
    if name == "pt3_timeout_but_pt4_green":
        boot = points.get("boot") or {}
        timed_out = bool(boot) and boot.get("ok") is False and "timeout" in str(boot.get("failure") or "")
        results = _smoke_results(points)
        floor = [results.get(c) for c in ("plain-chat", "streaming")]
        return timed_out and bool(results) and all(v == "green" for v in floor)
    if name == "results_detail_http_404":
        return any(re.match(r"\s*[\w-]*:?\s*HTTP 404\b", e) or '"code":404' in e.replace(" ", "")
                   for e in _red_smoke_errors(points.get("smoke")))
    return False


def _gate_reason_matches(reason: str, patterns: Sequence[str]) -> bool:
    tail = reason.rsplit("/", 1)[-1]
    for pattern in patterns:
        ptail = pattern.rsplit("/", 1)[-1]
        if fnmatch.fnmatchcase(reason, pattern) or fnmatch.fnmatchcase(tail, ptail):
            return True
    return False


def _matches(m: Matcher, points: Mapping[str, Mapping[str, Any]], text: str, gate_only: bool) -> bool:
    low = text.lower()
    if m.kind == "structural":
        return not gate_only and m.predicate is not None and _predicate(m.predicate, points)
    if m.kind == "pt4_results":
        if gate_only or (m.require_boot_green and not _boot_green(points)):
            return False
        return m.capability is not None and _smoke_results(points).get(m.capability) == m.value
    if m.kind == "log_substring":
        return bool(low) and any(s.lower() in low for s in m.any)
    if m.kind == "log_substring_all":
        return bool(low) and bool(m.all) and all(s.lower() in low for s in m.all)
    if m.kind == "gate_abort_reason":
        reason = str((points.get("gate") or {}).get("abort_reason") or "")
        return gate_only and bool(reason) and _gate_reason_matches(reason, m.any)
    return False


def classify_points(points: Mapping[str, Mapping[str, Any]], *, arch_family: str | None,
                    engine_version: str | None, gate_only: bool,
                    table: FingerprintTable) -> Classification:
    """Classify one bundle's points (``gate``, ``download``, ``boot``, ``smoke``, ``override_capture``)."""
    boot = points.get("boot") or {}
    download = points.get("download") or {}
    env_texts = [str(boot.get(k) or "") for k in ("failure_log_excerpt", "failure", "detail")]
    env_texts += [str(download.get(k) or "") for k in ("failure", "detail")]
    if str(download.get("failure") or "") == "disk":
        env_texts.append("no space left on device")
    env = environment_verdict(env_texts) if not gate_only else None
    source, candidates = error_candidates(points) if not gate_only else ("", [])
    if env is not None:
        text = candidates[0] if candidates else ""
        return Classification("unknown", ROUTE_LOCAL, "environment", env[0], text, source,
                              error_fingerprint(text, arch_family, engine_version) if text else "",
                              environment=env[0], next_step=env[1])
    if gate_only:
        reason = str((points.get("gate") or {}).get("abort_reason") or "")
        for m in table.matchers:
            if m.kind == "gate_abort_reason" and _matches(m, points, "", True):
                cls = coerce_class(m.failure_class)
                return Classification(cls, route_for(cls), "matcher", m.id, reason, "gate.abort_reason")
        return Classification("unknown", ROUTE_REVIEW, "none", None, reason, "gate.abort_reason")

    # tier 1 and tier 2 look at each candidate error line, newest first
    for text in candidates:
        if _OOM.search(text):
            bug, delta = kv_calc_evidence(points)
            return Classification("genuine-oom", ROUTE_FILE, "tier1-oom", "oom", text, source,
                                   error_fingerprint(text, arch_family, engine_version), bug, delta)
    for text in candidates:
        digest = error_fingerprint(text, arch_family, engine_version)
        if digest in table.exact:
            cls = coerce_class(table.exact[digest])
            return Classification(cls, route_for(cls), "tier2-exact", digest, text, source, digest)
    structural = [m for m in table.matchers if m.kind in ("structural", "pt4_results")]
    textual = [m for m in table.matchers if m.kind in ("log_substring", "log_substring_all")]
    for m in structural:
        if _matches(m, points, "", False):
            cls = coerce_class(m.failure_class)
            text = candidates[0] if candidates else ""
            return Classification(cls, route_for(cls), "matcher", m.id, text, source,
                                  error_fingerprint(text, arch_family, engine_version) if text else "")
    for text in candidates:   # the newest error line that any matcher recognises
        for m in textual:
            if _matches(m, points, text, False):
                cls = coerce_class(m.failure_class)
                return Classification(cls, route_for(cls), "matcher", m.id, text, source,
                                      error_fingerprint(text, arch_family, engine_version))
    text = candidates[0] if candidates else ""
    return Classification("unknown", ROUTE_REVIEW, "none", None, text, source,
                          error_fingerprint(text, arch_family, engine_version) if text else "")
