"""``soak``: does the server stay fast and sane over many turns? (SYSTEM.md section 14 ``soak``.)

Modes: ``fresh`` (20 sessions x 5 turns; every session a new conversation), ``continuous``
(5 x 5, one conversation whose context ramps toward ``target_tokens``: each turn adds filler so
that the last turn's prompt is about the target), ``quick`` (8 x 5, fresh). Each turn is one
streamed chat; recorded: latency, TTFT, tokens, decode TPS, silent-empty (HTTP 200, no text),
errors. GPU memory in use is sampled before the first turn and after each turn through
``club3090.edges.gpu_probe.memory_used_bytes`` when NVML is available, else "not sampled".

Verdict: ``fail`` (exit 1) on any error or silent-empty turn, decode-TPS retention (median of
the first 5 vs the last 5 good turns) under ``min_retention``, or VRAM growth (largest per-GPU
increase, last sample minus first) over ``max_growth_mib`` (only when sampled);
``inconclusive`` (exit 2) when the server is unreachable, the deadline stopped the run, or
fewer than 10 turns gave a decode TPS; else ``pass`` (exit 0). The whole run stops at
``deadline_s``; each request gets at most the smaller of ``request_timeout_s`` and the time left.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from club3090.cli.exit_codes import exit_code
from club3090.edges.openai_client import OpenAIClient
from club3090.gate.outcome import Outcome
from club3090.validate.stats import median

MODES: Mapping[str, tuple[int, int]] = {"fresh": (20, 5), "continuous": (5, 5), "quick": (8, 5)}
TARGET_TOKENS = 24000
MIN_RETENTION = 0.98
MAX_GROWTH_MIB = 200.0
DEADLINE_S = 1800.0
REQUEST_TIMEOUT_S = 600.0
MAX_TOKENS = 256
WINDOW = 5                        # turns at each end compared for retention
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
                "min_retention": self.min_retention, "max_growth_mib": self.max_growth_mib,
                "deadline_s": self.deadline_s, "request_timeout_s": self.request_timeout_s,
                "max_tokens": self.max_tokens, "pause_s": self.pause_s}


@dataclass(frozen=True, slots=True)
class Turn:
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

    FIELDS = ("session", "turn", "t_s", "latency_s", "ttft_s", "tokens", "tokens_source", "prompt_tokens",
              "decode_tps", "empty", "error")

    def row(self) -> list[Any]:
        return [self.session, self.turn, f"{self.t_s:.3f}", f"{self.latency_s:.3f}",
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
    gpu_sampled: bool = False
    deadline_hit: bool = False
    unreachable: bool = False
    error: str | None = None
    elapsed_s: float = 0.0

    @property
    def planned(self) -> int:
        sessions, turns = self.options.plan
        return sessions * turns

    @property
    def errors(self) -> int:
        return sum(t.error is not None for t in self.turns)

    @property
    def empties(self) -> int:
        return sum(t.empty for t in self.turns)

    def _tps(self) -> list[float]:
        return [t.decode_tps for t in self.turns if t.decode_tps is not None]

    @property
    def retention(self) -> float | None:
        tps = self._tps()
        if len(tps) < 2 * WINDOW:
            return None
        first, last = median(tps[:WINDOW]), median(tps[-WINDOW:])
        return last / first if first else None

    @property
    def growth_mib(self) -> float | None:
        if len(self.gpu) < 2:
            return None
        first, last = self.gpu[0].used_bytes, self.gpu[-1].used_bytes
        return max((b - a) / MIB for a, b in zip(first, last)) if first and last else None

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
        retention, growth = self.retention, self.growth_mib
        if retention is not None and retention < self.options.min_retention:
            fail.append(f"decode-TPS retention {retention:.1%} < {self.options.min_retention:.0%}")
        if growth is not None and growth > self.options.max_growth_mib:
            fail.append(f"VRAM growth {growth:.0f} MiB > {self.options.max_growth_mib:.0f} MiB")
        if fail:
            return "fail", fail
        unsure: list[str] = []
        if self.deadline_hit:
            unsure.append(f"deadline {self.options.deadline_s:.0f}s hit after {len(self.turns)} of "
                          f"{self.planned} turns")
        if retention is None:
            unsure.append(f"only {len(self._tps())} turns with a decode TPS; retention needs {2 * WINDOW}")
        if unsure:
            return "inconclusive", unsure
        return "pass", []

    @property
    def outcome(self) -> Outcome:
        return {"pass": Outcome.OK, "fail": Outcome.FAILED}.get(self.verdict()[0], Outcome.INCONCLUSIVE)

    @property
    def exit_code(self) -> int:
        return exit_code(self.outcome)

    def to_json(self) -> dict[str, Any]:
        verdict, why = self.verdict()
        tps = self._tps()
        return {"tool": "soak", "ok": verdict == "pass", "verdict": verdict, "exit_code": self.exit_code,
                "reasons": why, "url": self.url, "model": self.model, "options": self.options.to_json(),
                "turns_planned": self.planned, "turns_done": len(self.turns), "errors": self.errors,
                "silent_empty": self.empties, "deadline_hit": self.deadline_hit, "elapsed_s": round(self.elapsed_s, 3),
                "decode_tps_first": median(tps[:WINDOW]) if len(tps) >= 2 * WINDOW else None,
                "decode_tps_last": median(tps[-WINDOW:]) if len(tps) >= 2 * WINDOW else None,
                "retention": self.retention,
                "gpu": {"sampled": self.gpu_sampled, "samples": len(self.gpu), "growth_mib": self.growth_mib,
                        "note": None if self.gpu_sampled else "not sampled (no NVML)"},
                "max_prompt_tokens": max((t.prompt_tokens or 0 for t in self.turns), default=0)}

    def turn_csv(self) -> str:
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(Turn.FIELDS)
        for t in self.turns:
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
    clock = client.clock
    t0 = clock()
    listed = client.models(timeout=min(options.request_timeout_s, 30.0))
    if listed.unreachable:
        return SoakReport(client.base, model, options, (), unreachable=True, error=listed.error)
    if model is None:
        if not listed.ids:
            return SoakReport(client.base, None, options, (), error=listed.error or "/v1/models lists no model")
        model = listed.ids[0]
    sessions, per_session = options.plan
    total = sessions * per_session
    continuous = options.mode == "continuous"
    target_chars = options.target_tokens * CHARS_PER_TOKEN if continuous else 0.0

    gpu: list[GpuSample] = []

    def sample(after: int) -> None:
        try:
            used = gpu_sampler()
        except Exception:  # noqa: BLE001 - sampling is optional; a failure leaves a gap, not a crash
            used = None
        if used:
            gpu.append(GpuSample(clock() - t0, after, tuple(used)))

    sample(0)
    turns: list[Turn] = []
    deadline_hit = False
    messages: list[dict[str, str]] = []
    index = 0
    for s in range(sessions):
        if s and options.pause_s:
            sleep(options.pause_s)
        if not continuous or not messages:
            messages = [{"role": "system", "content": SYSTEM_PROMPT}]
        for k in range(per_session):
            left = options.deadline_s - (clock() - t0)
            if left <= 0:
                deadline_hit = True
                break
            index += 1
            question = QUESTIONS[(index - 1) % len(QUESTIONS)]
            if continuous:      # top the context up to its share of the target: the last turn is at the target
                have = sum(len(m["content"]) for m in messages) + len(question)
                content = f"{_filler(index, int(target_chars * index / total - have))}\n\n{question}"
            else:
                content = question
            messages.append({"role": "user", "content": content})
            start = clock() - t0
            try:
                r = client.chat({"model": model, "messages": list(messages), "max_tokens": options.max_tokens},
                                stream=True, timeout=min(options.request_timeout_s, left))
                error = r.error
                turn = Turn(s + 1, k + 1, start, r.wall_s, r.ttft_s, r.completion_tokens, r.tokens_source,
                            r.prompt_tokens, None, r.empty, error)
            except Exception as exc:  # noqa: BLE001 - one broken turn is a recorded error
                r = None
                turn = Turn(s + 1, k + 1, start, clock() - t0 - start, None, None, "none", None, None, False,
                            client.scrub(f"{type(exc).__name__}: {exc}"))
            if r is not None and turn.error is None and not turn.empty and r.completion_tokens and \
                    r.ttft_s is not None and r.wall_s > r.ttft_s:
                turn = Turn(**{**{f: getattr(turn, f) for f in Turn.FIELDS},
                               "decode_tps": r.completion_tokens / (r.wall_s - r.ttft_s)})
            turns.append(turn)
            reply = r.content if r is not None and turn.error is None else ""
            messages.append({"role": "assistant", "content": reply or "(no answer)"})
            sample(index)
            state = f"error {turn.error}" if turn.error else ("EMPTY" if turn.empty else
                                                               f"{turn.tokens} tokens in {turn.latency_s:.2f}s")
            progress(f"[soak] session {s + 1}/{sessions} turn {k + 1}/{per_session}: {state}")
        if deadline_hit:
            break
    return SoakReport(client.base, model, options, tuple(turns), tuple(gpu), bool(gpu), deadline_hit,
                      elapsed_s=clock() - t0)


__all__ = ["MODES", "GpuSample", "SoakOptions", "SoakReport", "Turn", "soak", "write_files"]
