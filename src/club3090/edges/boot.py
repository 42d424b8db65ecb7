"""[E] boot and smoke: start a derived compose, wait for vLLM, probe it, tear it down (docs/DESIGN.md §12).

Every side effect is a seam: the docker runner (argv, timeout) -> ``RunResult``, the HTTP client,
the clock and sleep. Tests pass fakes; nothing here runs at import. HTTP is
``club3090.edges.openai_client`` (stdlib ``urllib``, a loopback call to the container; no proxy).

- Boot: ``docker compose --project-directory D -f F up -d``, then ``GET {endpoint}/v1/models``
  every ``POLL_INTERVAL_S`` (``REQUEST_TIMEOUT_S`` per request) until a 200 or ``BOOT_DEADLINE_S``.
  On failure the last ``LOG_TAIL`` lines of ``docker compose logs --no-color`` (at most
  ``LOG_LIMIT_BYTES``) are kept. ``teardown`` (``down``) is the caller's, after smoke and capture.
- Warm-up: after ``/v1/models`` answers, one tiny chat completion every ``WARMUP_INTERVAL_S``
  until one succeeds or the warm-up window (upstream allows 180 s before verify-full) runs out:
  a server still compiling or capturing graphs answers its first requests with errors.
- Smoke: ``POST {endpoint}/v1/chat/completions`` with one user message ``"ping"``,
  ``max_tokens: 8``, plain and streaming (SSE): the floor. The optional capabilities the launch
  declares are probed above this layer (``validate.capabilities``) and added with
  ``SmokeReport.with_capabilities``; one declared but not probed makes the smoke ``partial``.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# the wire is club3090.edges.openai_client's (one owner); Http, HttpResponse and urllib_http are re-exported for [E]
from club3090.edges.openai_client import Http, HttpResponse, parse_sse_body, urllib_http
from club3090.settings import WARMUP_WINDOW_S

BOOT_DEADLINE_S = 600.0
POLL_INTERVAL_S = 3.0
REQUEST_TIMEOUT_S = 5.0
SMOKE_TIMEOUT_S = 30.0
LOG_TAIL = 400
LOG_LIMIT_BYTES = 64 * 1024
COMPOSE_TIMEOUT_S = 900.0     # `up -d` may pull a multi-GB image

WARMUP_INTERVAL_S = 5.0
WARMUP_REQUEST_S = 60.0

FLOOR = ("plain-chat", "streaming")
OPTIONAL = ("tool-call", "reasoning-streaming", "structured-output", "vision", "long-context")
CAPABILITIES = FLOOR + OPTIONAL
GREEN, RED, SKIPPED = "green", "red", "skipped"          # a capability's smoke result

# failure tokens
COMPOSE_UP_FAILED = "compose-up-failed"
BOOT_TIMEOUT = "boot-timeout"
PROCESS_EXITED = "process-exited"      # a native server that exited before it answered
FLOOR_RED = "floor-red"


@dataclass(frozen=True, slots=True)
class RunResult:
    returncode: int
    stdout: str = ""
    stderr: str = ""


Runner = Callable[[Sequence[str], float], RunResult]


def run_tool(argv: Sequence[str], timeout: float) -> RunResult:
    """The one real runner (docker, ``vllm --version``, the launchers' tools): no shell, no stdin,
    output captured; a timeout is rc 124 with what it printed so far, a missing executable rc 127."""
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False,
                              errors="replace", stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode("utf-8", "replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return RunResult(124, out, f"timed out after {timeout:.0f}s")
    except OSError as exc:
        return RunResult(127, "", str(exc))
    return RunResult(done.returncode, done.stdout or "", done.stderr or "")


# [E]'s default runner (``pull --out``'s docker boot), looked up when [E] runs: the name the test
# suite replaces to keep real docker out of [E]; the launchers take ``run_tool`` itself
subprocess_runner = run_tool


# --------------------------------------------------------------------------------------------
# boot
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class BootReport:
    ok: bool
    seconds: float
    failure: str | None = None
    detail: str = ""
    log_excerpt: str | None = None
    actual: Mapping[str, float | None] = field(default_factory=dict)

    def to_point(self) -> dict[str, Any]:
        point: dict[str, Any] = {"ok": self.ok, "seconds": round(self.seconds, 1), "failure": self.failure,
                                 "detail": self.detail}
        if not self.ok:
            point["failure_log_excerpt"] = self.log_excerpt or ""
            point["actual"] = {"attempted_alloc_mib": self.actual.get("attempted_alloc_mib"),
                               "gpu_worker_reported_mib": self.actual.get("gpu_worker_reported_mib")}
        return point


class ComposeBoot:
    """One compose project: ``start`` (up + wait), ``logs``, ``teardown``."""

    def __init__(self, compose_file: Path, project_dir: Path, endpoint: str, *, runner: Runner = subprocess_runner,
                 http: Http = urllib_http, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep, deadline_s: float = BOOT_DEADLINE_S,
                 interval_s: float = POLL_INTERVAL_S, request_timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        self.base = ["docker", "compose", "--project-directory", str(project_dir), "-f", str(compose_file)]
        self.endpoint = endpoint.rstrip("/")
        self.runner, self.http, self.clock, self.sleep = runner, http, clock, sleep
        self.deadline_s, self.interval_s, self.request_timeout_s = deadline_s, interval_s, request_timeout_s
        self.started = False

    def start(self) -> BootReport:
        t0 = self.clock()
        self.started = True
        up = self.runner([*self.base, "up", "-d"], COMPOSE_TIMEOUT_S)
        if up.returncode != 0:
            return self._failed(t0, COMPOSE_UP_FAILED, f"docker compose up -d exited {up.returncode}: "
                                                       f"{_tail_line(up.stderr or up.stdout)}")
        last = ""
        while True:
            resp = self.http("GET", f"{self.endpoint}/v1/models", None, self.request_timeout_s)
            if resp.status == 200:
                return BootReport(True, self.clock() - t0)
            last = resp.error or f"HTTP {resp.status}"
            if self.clock() - t0 + self.interval_s > self.deadline_s:
                return self._failed(t0, BOOT_TIMEOUT, f"{self.endpoint}/v1/models not ready after "
                                                      f"{self.deadline_s:.0f}s (last: {last})")
            self.sleep(self.interval_s)

    def _failed(self, t0: float, token: str, detail: str) -> BootReport:
        log = self.logs()
        return BootReport(False, self.clock() - t0, token, detail, log, parse_actual(log))

    def logs(self) -> str:
        got = self.runner([*self.base, "logs", "--no-color", f"--tail={LOG_TAIL}"], 60.0)
        return cap_log((got.stdout or "") + (got.stderr or ""))

    def teardown(self) -> RunResult | None:
        if not self.started:
            return None
        self.started = False
        return self.runner([*self.base, "down"], 300.0)


def cap_log(text: str, limit: int = LOG_LIMIT_BYTES) -> str:
    """The last ``limit`` bytes of ``text`` (UTF-8), cut at a line start when possible."""
    raw = text.encode("utf-8", "replace")
    if len(raw) <= limit:
        return text
    cut = raw[-limit:].decode("utf-8", "ignore")
    newline = cut.find("\n")
    return cut[newline + 1:] if 0 <= newline < len(cut) - 1 else cut


_CLI_HINT = re.compile(r"^\s*(?:See|Run) '?docker(?: compose)? --help'?", re.IGNORECASE)


def _tail_line(text: str) -> str:
    """The last line that says something: docker's "See 'docker --help'" follows the real error."""
    lines = [ln for ln in (text or "").strip().splitlines() if ln.strip() and not _CLI_HINT.match(ln)]
    return lines[-1][:300] if lines else "no output"


_UNITS = {"b": 1 / 2**20, "kib": 1 / 1024, "kb": 1 / 1024, "mib": 1.0, "mb": 1.0, "gib": 1024.0, "gb": 1024.0}
_ALLOC = re.compile(r"Tried to allocate ([\d.]+) ?([KMG]i?B|B)", re.I)
_PEAK = re.compile(r"peak[ _](?:torch[ _])?memory[^\d\n]{0,40}([\d.]+) ?([KMG]i?B)", re.I)
_KV_NEEDED = re.compile(r"([\d.]+) ?(GiB|GB) KV cache is needed", re.I)
_KV_AVAILABLE = re.compile(r"Available KV cache memory: ([\d.]+) ?(GiB|GB)", re.I)


def _mib(match: re.Match[str] | None) -> float | None:
    if match is None:
        return None
    return round(float(match.group(1)) * _UNITS[match.group(2).lower()], 1)


def parse_actual(log: str) -> dict[str, float | None]:
    """Memory facts from vLLM's log: the allocation that failed, the worker's peak-memory line,
    the KV cache it needed and the KV memory it had (MiB; None when absent)."""
    def last(pattern: re.Pattern[str]) -> re.Match[str] | None:
        found = None
        for found in pattern.finditer(log or ""):  # noqa: B007 - the last match is kept
            pass
        return found
    return {"attempted_alloc_mib": _mib(last(_ALLOC)), "gpu_worker_reported_mib": _mib(last(_PEAK)),
            "kv_needed_mib": _mib(last(_KV_NEEDED)), "kv_available_mib": _mib(last(_KV_AVAILABLE))}


# --------------------------------------------------------------------------------------------
# smoke
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class SmokeReport:
    capability_set: tuple[str, ...]                       # what was probed
    results: Mapping[str, str]                            # cap -> green | red | skipped
    detail: Mapping[str, Mapping[str, str | None]]        # cap -> {status, error (why red or skipped), ...}
    declared: tuple[str, ...] = ()                        # the optional capabilities the launch declares

    @property
    def floor_green(self) -> bool:
        return all(self.results.get(cap) == GREEN for cap in FLOOR)

    @property
    def partial(self) -> bool:
        """A capability the launch declares was not probed."""
        return any(self.results.get(cap) == SKIPPED for cap in self.declared)

    def with_capabilities(self, found: Mapping[str, Mapping[str, Any]]) -> "SmokeReport":
        """This floor smoke plus the optional capabilities' results (cap -> {status, error, declared_by})."""
        results = {**self.results, **{cap: str(v["status"]) for cap, v in found.items()}}
        probed = tuple(cap for cap, v in found.items() if v["status"] != SKIPPED)
        declared = tuple(cap for cap, v in found.items() if v.get("declared_by"))
        return SmokeReport(FLOOR + probed, results, {**self.detail, **{c: dict(v) for c, v in found.items()}},
                           declared)

    @property
    def problems(self) -> tuple[tuple[str, str], ...]:
        """(capability, why) for each red one and each declared one that was not probed."""
        return tuple((c, str(self.detail.get(c, {}).get("error") or "")) for c in CAPABILITIES
                     if self.results.get(c) == RED or (c in self.declared and self.results.get(c) == SKIPPED))

    @property
    def red(self) -> tuple[str, ...]:
        return tuple(c for c in CAPABILITIES if self.results.get(c) == RED)

    def to_point(self) -> dict[str, Any]:
        return {"smoke_capability_set": list(self.capability_set), "results": dict(self.results),
                "partial": self.partial, "results_detail": {k: dict(v) for k, v in self.detail.items()}}


def _chat_body(model: str, stream: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": "ping"}], "max_tokens": 8}
    if stream:
        body["stream"] = True
    return body


def _plain_ok(resp: HttpResponse) -> str | None:
    if resp.status != 200:
        return resp.error or f"HTTP {resp.status}: {resp.body[:200].decode('utf-8', 'replace')}"
    try:
        data = json.loads(resp.body.decode("utf-8"))
        message = data["choices"][0]["message"]
    except (ValueError, KeyError, IndexError, TypeError):
        return "not an OpenAI chat completion"
    content = message.get("content") if isinstance(message, Mapping) else None
    reasoning = message.get("reasoning_content") if isinstance(message, Mapping) else None
    if not (isinstance(content, str) and content) and not (isinstance(reasoning, str) and reasoning):
        return "empty completion"
    return None


def _stream_ok(resp: HttpResponse) -> str | None:
    if resp.status != 200:
        return resp.error or f"HTTP {resp.status}: {resp.body[:200].decode('utf-8', 'replace')}"
    sse = parse_sse_body(resp.body)
    if sse.malformed is not None:
        return "a stream chunk is not an OpenAI chat completion chunk"
    if not sse.chunks:
        return "no stream chunks"
    if not sse.done:
        return "the stream did not end with [DONE]"
    return None


@dataclass(frozen=True, slots=True)
class WarmUp:
    """The warm-up: whether a completion succeeded within ``window_s``, after how long, how many tries."""

    ok: bool
    seconds: float
    attempts: int
    window_s: float
    last_error: str | None = None
    exited: bool = False             # the server's process ended during the warm-up


def warm_up(endpoint: str, model: str, *, http: Http, clock: Callable[[], float], sleep: Callable[[float], None],
            window_s: float = WARMUP_WINDOW_S, interval_s: float = WARMUP_INTERVAL_S,
            alive: Callable[[], bool] = lambda: True) -> WarmUp:
    """Until one small chat completion succeeds, ``window_s`` has passed since the first try, or the
    server is no longer ``alive`` (its process exited: no point waiting out the window)."""
    url = f"{endpoint.rstrip('/')}/v1/chat/completions"
    t0 = clock()
    attempts = 0
    while True:
        attempts += 1
        budget = max(1.0, min(WARMUP_REQUEST_S, window_s - (clock() - t0)))
        try:
            error = _plain_ok(http("POST", url, _chat_body(model, False), budget))
        except Exception as exc:  # noqa: BLE001 - a cold server's failure is a retry, never a crash
            error = f"{type(exc).__name__}: {exc}"
        elapsed = clock() - t0
        if error is None:
            return WarmUp(True, elapsed, attempts, window_s)
        if elapsed + interval_s > window_s:
            return WarmUp(False, elapsed, attempts, window_s, error)
        if not alive():
            return WarmUp(False, elapsed, attempts, window_s, f"{error}; then the server exited", exited=True)
        sleep(interval_s)


def smoke(endpoint: str, model: str, *, http: Http = urllib_http, timeout: float = SMOKE_TIMEOUT_S) -> SmokeReport:
    """Probe the floor (plain chat, streaming). The capabilities beyond it are ``skipped`` here
    ("not probed"); ``with_capabilities`` adds what the launch declares, probed."""
    url = f"{endpoint.rstrip('/')}/v1/chat/completions"
    results: dict[str, str] = {}
    detail: dict[str, dict[str, str | None]] = {}
    for cap, stream, check in (("plain-chat", False, _plain_ok), ("streaming", True, _stream_ok)):
        try:
            error = check(http("POST", url, _chat_body(model, stream), timeout))
        except Exception as exc:  # noqa: BLE001 - a probe failure is a red result, never a crash
            error = f"{type(exc).__name__}: {exc}"
        results[cap] = GREEN if error is None else RED
        detail[cap] = {"status": results[cap], "error": error}
    for cap in OPTIONAL:
        results[cap] = SKIPPED
        detail[cap] = {"status": SKIPPED, "error": "not probed" + ("" if all(
            results[c] == GREEN for c in FLOOR) else ": the floor is red")}
    return SmokeReport(FLOOR, results, detail)


__all__ = ["GREEN", "OPTIONAL", "RED", "SKIPPED", "WARMUP_WINDOW_S", "BootReport", "ComposeBoot", "HttpResponse", "RunResult", "SmokeReport", "WarmUp",
           "cap_log", "parse_actual", "run_tool", "smoke", "subprocess_runner", "urllib_http", "warm_up"]
