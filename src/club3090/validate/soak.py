"""``soak``: does the server stay fast and sane over many turns? (docs/DESIGN.md, validation tools.)

Modes: ``fresh`` (20 sessions x 5 turns; every session a new conversation), ``continuous``
(5 x 5, one conversation whose context ramps toward ``target_tokens``: each turn adds filler so
that the last turn's prompt is about the target; characters per token are measured from each
turn's ``usage.prompt_tokens``), ``quick`` (8 x 5, fresh). Each turn is one
streamed chat; recorded: latency, TTFT, tokens, decode TPS, silent-empty (HTTP 200, no text),
errors. GPU memory in use is sampled before the first turn and after each turn through
``club3090.edges.gpu_probe.memory_used_bytes`` when NVML is available, else "not sampled".

Retention compares like with like: ``probes`` identical requests (a fresh conversation, the same
short prompt, so the same context length) before the first turn and after the last; retention =
median decode TPS of the end probes / median of the start probes (a probe answered in fewer than
``MIN_DECODE_TOKENS`` tokens has no decode to time and counts as no measurement). Noise-aware: the floor is
``min_retention - max(tolerance, NOISE_K x noise)``, where noise is the larger relative median
absolute deviation of the two probe groups; with noise above ``MAX_NOISE`` a retention under
``min_retention - tolerance`` is inconclusive rather than a coin toss.

Verdict: ``fail`` (exit 1) on any error or silent-empty turn, retention under its floor, or VRAM
growth (largest per-GPU increase, last sample minus first) over ``max_growth_mib`` (only when
sampled); ``inconclusive`` (exit 2) when the server is unreachable, the deadline stopped the run,
a probe group has fewer than 3 decode TPS values, or the probes are too noisy; else ``pass``
(exit 0). The whole run stops at ``deadline_s``; each request gets at most the smaller of
``request_timeout_s`` and the time left.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from club3090.edges.openai_client import OpenAIClient
from club3090.outcome import Outcome
from club3090.validate.stats import median, relative_mad

MODES: Mapping[str, tuple[int, int]] = {"fresh": (20, 5), "continuous": (5, 5), "quick": (8, 5)}
TARGET_TOKENS = 24000
MIN_RETENTION = 0.98
TOLERANCE = 0.05
NOISE_K = 2.0
MAX_NOISE = 0.25
PROBES = 5
MIN_PROBES = 3
# a decode rate needs a decode to time: an answer of a few tokens arrives in one or two chunks and its
# "rate" (tokens over a near-zero window) is noise, not a measurement
MIN_DECODE_TOKENS = 8
PROBE_PROMPT = "Write a short paragraph about the history of the bicycle."
MAX_GROWTH_MIB = 200.0
DEADLINE_S = 1800.0
REQUEST_TIMEOUT_S = 600.0
MAX_TOKENS = 256
CHARS_PER_TOKEN = 4.0
MIB = 1 << 20

SYSTEM_PROMPT = "You are a concise, helpful assistant."
QUESTIONS = (
    "Explain in a short paragraph what a hash table is.",
    "Give three practical tips for writing readable Python code.",
    "Summarise the difference between TCP and UDP.",
    "What does a CPU cache do, briefly?",
    "Describe how a binary search works in a few sentences.",
    "Why do databases use indexes? Answer briefly.",
    "Explain recursion to a new programmer in a short paragraph.",
)
FILLER = ("Reference notes, turn {turn}: the archive lists ledger entry {n} for the northern depot, "
          "with crate {m} moved to bay {b} and a checksum of {c}. ")

GpuSampler = Callable[[], "tuple[int, ...] | None"]


@dataclass(frozen=True, slots=True)
class SoakOptions:
    mode: str = "fresh"
    target_tokens: int = TARGET_TOKENS
    min_retention: float = MIN_RETENTION
    tolerance: float = TOLERANCE
    probes: int = PROBES
    max_growth_mib: float = MAX_GROWTH_MIB
    deadline_s: float = DEADLINE_S
    request_timeout_s: float = REQUEST_TIMEOUT_S
    max_tokens: int = MAX_TOKENS
    pause_s: float = 0.0                       # between sessions
    sessions: int | None = None                # None: the mode's
    turns: int | None = None

    @property
    def plan(self) -> tuple[int, int]:
        sessions, turns = MODES[self.mode]
        return (self.sessions or sessions, self.turns or turns)

    def to_json(self) -> dict[str, Any]:
        sessions, turns = self.plan
        return {"mode": self.mode, "sessions": sessions, "turns_per_session": turns,
                "target_tokens": self.target_tokens if self.mode == "continuous" else None,
                "min_retention": self.min_retention, "tolerance": self.tolerance, "probes": self.probes,
                "max_growth_mib": self.max_growth_mib,
                "deadline_s": self.deadline_s, "request_timeout_s": self.request_timeout_s,
                "max_tokens": self.max_tokens, "pause_s": self.pause_s}


@dataclass(frozen=True, slots=True)
class Turn:
    phase: str                     # "probe-start" | "turn" | "probe-end"
    session: int
    turn: int
    t_s: float                     # start, seconds since the soak began
    latency_s: float
    ttft_s: float | None
    tokens: int | None
    tokens_source: str
    prompt_tokens: int | None
    decode_tps: float | None
    empty: bool
    error: str | None

    FIELDS = ("phase", "session", "turn", "t_s", "latency_s", "ttft_s", "tokens", "tokens_source", "prompt_tokens",
              "decode_tps", "empty", "error")

    def row(self) -> list[Any]:
        return [self.phase, self.session, self.turn, f"{self.t_s:.3f}", f"{self.latency_s:.3f}",
                "" if self.ttft_s is None else f"{self.ttft_s:.3f}", "" if self.tokens is None else self.tokens,
                self.tokens_source, "" if self.prompt_tokens is None else self.prompt_tokens,
                "" if self.decode_tps is None else f"{self.decode_tps:.3f}", int(self.empty), self.error or ""]


@dataclass(frozen=True, slots=True)
class GpuSample:
    t_s: float
    after_turn: int                # 0 = before the first turn
    used_bytes: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class SoakReport:
    url: str
    model: str | None
    options: SoakOptions
    turns: tuple[Turn, ...]
    gpu: tuple[GpuSample, ...] = ()
    probes: tuple[Turn, ...] = ()
    gpu_sampled: bool = False
    deadline_hit: bool = False
    unreachable: bool = False
    error: str | None = None
    elapsed_s: float = 0.0

    @property
    def planned(self) -> int:
        sessions, turns = self.options.plan
        return sessions * turns

    def _all(self) -> tuple[Turn, ...]:
        return self.turns + self.probes

    @property
    def errors(self) -> int:
        return sum(t.error is not None for t in self._all())

    @property
    def empties(self) -> int:
        return sum(t.empty for t in self._all())

    def _probe_tps(self, phase: str) -> list[float]:
        return [t.decode_tps for t in self.probes if t.phase == phase and t.decode_tps is not None]

    def retention_stats(self) -> dict[str, float | None]:
        """first, last (median probe decode TPS), retention, noise (larger relative MAD), floor."""
        first, last = self._probe_tps("probe-start"), self._probe_tps("probe-end")
        out: dict[str, float | None] = {"first": None, "last": None, "retention": None, "noise": None,
                                        "floor": None}
        if len(first) < MIN_PROBES or len(last) < MIN_PROBES:
            return out
        m1, m2 = median(first), median(last)
        if not m1 or m2 is None:
            return out
        noise = max(relative_mad(first), relative_mad(last))
        out.update(first=m1, last=m2, retention=m2 / m1, noise=noise,
                   floor=self.options.min_retention - max(self.options.tolerance, NOISE_K * noise))
        return out

    @property
    def retention(self) -> float | None:
        return self.retention_stats()["retention"]

    @property
    def growth_mib(self) -> float | None:
        if len(self.gpu) < 2:
            return None
        first, last = self.gpu[0].used_bytes, self.gpu[-1].used_bytes
        return max((b - a) / MIB for a, b in zip(first, last, strict=False)) if first and last else None

    def verdict(self) -> tuple[str, list[str]]:
        """("pass" | "fail" | "inconclusive", why)."""
        if self.unreachable:
            return "inconclusive", [f"server unreachable: {self.error}"]
        fail: list[str] = []
        if self.error:
            fail.append(self.error)
        if self.errors:
            fail.append(f"{self.errors} turn(s) failed")
        if self.empties:
            fail.append(f"{self.empties} silent-empty turn(s)")
        stats, growth = self.retention_stats(), self.growth_mib
        retention, floor, noise = stats["retention"], stats["floor"], stats["noise"]
        noisy = noise is not None and noise > MAX_NOISE
        if retention is not None and floor is not None and retention < floor and not noisy:
            fail.append(f"decode-TPS retention {retention:.1%} < {floor:.1%} (--min-retention "
                        f"{self.options.min_retention:.0%} less the larger of --tolerance and {NOISE_K:g} x noise "
                        f"{noise:.1%})")
        if growth is not None and growth > self.options.max_growth_mib:
            fail.append(f"VRAM growth {growth:.0f} MiB > {self.options.max_growth_mib:.0f} MiB")
        if fail:
            return "fail", fail
        unsure: list[str] = []
        if self.deadline_hit:
            unsure.append(f"deadline {self.options.deadline_s:.0f}s hit after {len(self.turns)} of "
                          f"{self.planned} turns")
        if retention is None:
            unsure.append(f"retention needs >= {MIN_PROBES} probes with a decode TPS at each end; got "
                          f"{len(self._probe_tps('probe-start'))} and {len(self._probe_tps('probe-end'))}")
        elif noisy and retention < self.options.min_retention - self.options.tolerance:
            unsure.append(f"probe decode TPS too noisy to judge retention {retention:.1%} (noise {noise:.1%} > "
                          f"{MAX_NOISE:.0%})")
        if unsure:
            return "inconclusive", unsure
        return "pass", []

    @property
    def outcome(self) -> Outcome:
        return {"pass": Outcome.OK, "fail": Outcome.FAILED}.get(self.verdict()[0], Outcome.INCONCLUSIVE)

    def to_json(self) -> dict[str, Any]:
        verdict, why = self.verdict()
        stats = self.retention_stats()
        return {"tool": "soak", "ok": verdict == "pass", "verdict": verdict, "outcome": self.outcome.value,
                "reasons": why, "url": self.url, "model": self.model, "options": self.options.to_json(),
                "turns_planned": self.planned, "turns_done": len(self.turns), "errors": self.errors,
                "silent_empty": self.empties, "deadline_hit": self.deadline_hit, "elapsed_s": round(self.elapsed_s, 3),
                "decode_tps_first": stats["first"], "decode_tps_last": stats["last"],
                "retention": stats["retention"], "retention_floor": stats["floor"], "probe_noise": stats["noise"],
                "gpu": {"sampled": self.gpu_sampled, "samples": len(self.gpu), "growth_mib": self.growth_mib,
                        "note": None if self.gpu_sampled else "not sampled (no NVML)"},
                "max_prompt_tokens": max((t.prompt_tokens or 0 for t in self.turns), default=0)}

    def turn_csv(self) -> str:
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(Turn.FIELDS)
        for t in sorted(self._all(), key=lambda t: t.t_s):
            writer.writerow(t.row())
        return out.getvalue()

    def gpu_csv(self) -> str:
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(("t_s", "after_turn", "gpu", "used_mib"))
        for s in self.gpu:
            for index, used in enumerate(s.used_bytes):
                writer.writerow((f"{s.t_s:.3f}", s.after_turn, index, f"{used / MIB:.1f}"))
        return out.getvalue()


def write_files(report: SoakReport, out_dir: Path) -> tuple[Path, ...]:
    """``baseline.json``, ``turn-log.csv``, ``gpu-log.csv`` (header only when not sampled), atomically."""
    from club3090.edges.files import atomic_write_text

    paths = (out_dir / "baseline.json", out_dir / "turn-log.csv", out_dir / "gpu-log.csv")
    atomic_write_text(paths[0], json.dumps(report.to_json(), indent=1) + "\n")
    atomic_write_text(paths[1], report.turn_csv())
    atomic_write_text(paths[2], report.gpu_csv())
    return paths


def _filler(turn: int, chars: int) -> str:
    parts: list[str] = []
    size, n = 0, 0
    while size < chars:
        part = FILLER.format(turn=turn, n=turn * 1000 + n, m=(n * 37) % 1009, b=n % 41,
                             c=(turn * 7919 + n * 104729) % 65521)
        parts.append(part)
        size += len(part)
        n += 1
    return "".join(parts)


def soak(client: OpenAIClient, options: SoakOptions, *, model: str | None = None,
         gpu_sampler: GpuSampler = lambda: None, sleep: Callable[[float], None] = lambda _s: None,
         progress: Callable[[str], None] = lambda _s: None) -> SoakReport:
    t0 = client.clock()
    listed = client.models(timeout=min(options.request_timeout_s, 30.0))
    if listed.unreachable:
        return SoakReport(client.base, model, options, (), unreachable=True, error=listed.error)
    if model is None:
        if not listed.ids:
            return SoakReport(client.base, None, options, (), error=listed.error or "/v1/models lists no model")
        model = listed.ids[0]
    run = _Run(client, options, model, t0, gpu_sampler, progress)
    run.sample(0)
    deadline_hit = not run.probe("probe-start")
    if not deadline_hit:
        deadline_hit = run.sessions(sleep)
    if not deadline_hit:
        deadline_hit = not run.probe("probe-end")
    return SoakReport(client.base, model, options, tuple(run.turns), tuple(run.gpu), tuple(run.probes),
                      bool(run.gpu), deadline_hit, elapsed_s=run.elapsed())


class _Run:
    """One soak's clock, requests and records: probes, the sessions' turns and the GPU samples."""

    def __init__(self, client: OpenAIClient, options: SoakOptions, model: str, t0: float,
                 gpu_sampler: GpuSampler, progress: Callable[[str], None]) -> None:
        self.client, self.options, self.model, self.t0 = client, options, model, t0
        self.gpu_sampler, self.progress = gpu_sampler, progress
        self.gpu: list[GpuSample] = []
        self.turns: list[Turn] = []
        self.probes: list[Turn] = []

    def elapsed(self) -> float:
        return self.client.clock() - self.t0

    def left(self) -> float:
        return self.options.deadline_s - self.elapsed()

    def sample(self, after: int) -> None:
        try:
            used = self.gpu_sampler()
        except Exception:  # noqa: BLE001 - sampling is optional; a failure leaves a gap, not a crash
            used = None
        if used:
            self.gpu.append(GpuSample(self.elapsed(), after, tuple(used)))

    def ask(self, phase: str, session: int, k: int, messages: list[dict[str, str]]) -> tuple[Turn | None, str]:
        """One streamed chat turn and its reply; None when the run's deadline cut it."""
        options = self.options
        start = self.elapsed()
        try:
            r = self.client.chat({"model": self.model, "messages": list(messages), "max_tokens": options.max_tokens},
                                 stream=True, timeout=min(options.request_timeout_s, self.left()))
        except Exception as exc:  # noqa: BLE001 - one broken turn is a recorded error
            return Turn(phase, session, k, start, self.elapsed() - start, None, None, "none", None, None, False,
                        self.client.scrub(f"{type(exc).__name__}: {exc}")), ""
        tps = None
        tokens = r.completion_tokens or 0
        if r.error is None and not r.empty and tokens >= MIN_DECODE_TOKENS and r.ttft_s is not None and \
                r.wall_s > r.ttft_s:
            tps = tokens / (r.wall_s - r.ttft_s)
        if r.error is not None and self.left() <= 0:
            return None, ""         # cut by the run's deadline: not a server error, not a measurement
        turn = Turn(phase, session, k, start, r.wall_s, r.ttft_s, r.completion_tokens, r.tokens_source,
                    r.prompt_tokens, tps, r.empty, r.error)
        return turn, (r.content if r.error is None else "")

    def probe(self, phase: str) -> bool:
        """The short probe turns; False when the deadline stopped them."""
        for i in range(self.options.probes):
            if self.left() <= 0:
                return False
            turn, _ = self.ask(phase, 0, i + 1, [{"role": "system", "content": SYSTEM_PROMPT},
                                                 {"role": "user", "content": PROBE_PROMPT}])
            if turn is None:
                return False
            self.probes.append(turn)
            self.progress(f"[soak] {phase} {i + 1}/{self.options.probes}: " + _state(turn))
        return True

    def sessions(self, sleep: Callable[[float], None]) -> bool:
        """Every session's turns; True when the deadline cut them short."""
        options = self.options
        sessions, per_session = options.plan
        total = sessions * per_session
        continuous = options.mode == "continuous"
        chars_per_token = CHARS_PER_TOKEN      # first guess; then measured from usage.prompt_tokens
        messages: list[dict[str, str]] = []
        index = 0
        for s in range(sessions):
            if s and options.pause_s:
                sleep(max(0.0, min(options.pause_s, self.left())))
            if not continuous or not messages:
                messages = [{"role": "system", "content": SYSTEM_PROMPT}]
            for k in range(per_session):
                if self.left() <= 0:
                    return True
                index += 1
                question = QUESTIONS[(index - 1) % len(QUESTIONS)]
                if continuous:      # top the context up to its share of the target: the last turn is at the target
                    have = sum(len(m["content"]) for m in messages) + len(question)
                    want = options.target_tokens * chars_per_token * index / total
                    question = f"{_filler(index, int(want - have))}\n\n{question}"
                messages.append({"role": "user", "content": question})
                turn, reply = self.ask("turn", s + 1, k + 1, messages)
                if turn is None:
                    return True
                self.turns.append(turn)
                if continuous and turn.prompt_tokens:   # the server's tokenizer, not a guess, sizes the next turn
                    sent = sum(len(m["content"]) for m in messages)
                    chars_per_token = max(0.5, min(16.0, sent / turn.prompt_tokens))
                messages.append({"role": "assistant", "content": reply or "(no answer)"})
                self.sample(index)
                self.progress(f"[soak] session {s + 1}/{sessions} turn {k + 1}/{per_session}: " + _state(turn))
        return False


def _state(turn: Turn) -> str:
    if turn.error:
        return f"error {turn.error}"
    return "EMPTY" if turn.empty else f"{turn.tokens} tokens in {turn.latency_s:.2f}s"


__all__ = ["MODES", "GpuSample", "SoakOptions", "SoakReport", "Turn", "soak", "write_files"]
