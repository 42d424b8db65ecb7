"""``bench``: decode throughput and time to first token (docs/DESIGN.md, validation tools).

Three warm-up requests, then ``runs`` streamed runs of each prompt (narrative: an 800-word essay
on transformer attention, ``max_tokens`` 1000; code: a commented quicksort, ``max_tokens`` 800).
Per run: wall, TTFT (first content/reasoning/tool text), completion tokens (``usage`` through
``stream_options.include_usage``; else counted chunks, marked ``chunks``), ``wall_tps =
tokens / wall`` and ``decode_tps = tokens / (wall - ttft)``; per prompt mean, std and CV.
``prefill`` probes: for each target N, ``prefill_runs`` requests of ~N prompt tokens (a haystack
opened by a fresh salt, so no prefix-cache hit) and ``max_tokens`` 1; prefill rate =
prompt tokens / TTFT. The haystack is rescaled after each answer from the server's reported
``prompt_tokens``.

Exit code: 0 every run answered, 1 a run failed or ``--deadline`` stopped the run, 2 the server
was unreachable.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from club3090.edges.openai_client import ChatResult, OpenAIClient
from club3090.outcome import Outcome
from club3090.validate.stats import summary

WARMUPS = 3
RUNS = 5
PREFILL_RUNS = 3
CHARS_PER_TOKEN = 4.0          # first guess for the haystack; corrected from usage.prompt_tokens

PROMPTS: tuple[tuple[str, str, int], ...] = (
    ("narrative", "Write an 800-word essay explaining how attention works in transformer models: queries, keys "
                  "and values, scaled dot-product attention, multi-head attention, and why it replaced "
                  "recurrence.", 1000),
    ("code", "Write a Python implementation of quicksort. Comment every step thoroughly, explaining the choice "
             "of pivot, the partition scheme and the recursion.", 800),
)
HAYSTACK_WORDS = ("amber", "basalt", "cobalt", "delta", "ember", "fjord", "granite", "harbor", "indigo", "juniper",
                  "kelp", "lagoon", "meadow", "nectar", "obsidian", "prairie", "quartz", "river", "sierra", "tundra")


@dataclass(frozen=True, slots=True)
class Run:
    kind: str                     # "narrative" | "code" | "prefill-<N>"
    index: int
    ok: bool
    wall_s: float
    ttft_s: float | None
    tokens: int | None
    tokens_source: str            # "usage" | "chunks" | "none"
    prompt_tokens: int | None
    error: str | None = None

    @property
    def wall_tps(self) -> float | None:
        return self.tokens / self.wall_s if self.ok and self.tokens and self.wall_s > 0 else None

    @property
    def decode_tps(self) -> float | None:
        if not self.ok or not self.tokens or self.ttft_s is None or self.wall_s - self.ttft_s <= 0:
            return None
        return self.tokens / (self.wall_s - self.ttft_s)

    @property
    def prefill_tps(self) -> float | None:
        if not self.ok or not self.prompt_tokens or not self.ttft_s:
            return None
        return self.prompt_tokens / self.ttft_s

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "index": self.index, "ok": self.ok, "wall_s": self.wall_s, "ttft_s": self.ttft_s,
                "tokens": self.tokens, "tokens_source": self.tokens_source, "prompt_tokens": self.prompt_tokens,
                "wall_tps": self.wall_tps, "decode_tps": self.decode_tps, "prefill_tps": self.prefill_tps,
                "error": self.error}


@dataclass(frozen=True, slots=True)
class BenchReport:
    url: str
    model: str | None
    runs: tuple[Run, ...]
    warmups: tuple[Run, ...] = ()
    prefill_targets: tuple[int, ...] = ()
    unreachable: bool = False
    error: str | None = None

    @property
    def outcome(self) -> Outcome:
        if self.unreachable:
            return Outcome.INCONCLUSIVE
        return Outcome.FAILED if self.error or any(not r.ok for r in self.runs) else Outcome.OK

    def kinds(self) -> list[str]:
        seen: list[str] = []
        for r in self.runs:
            if r.kind not in seen:
                seen.append(r.kind)
        return seen

    def summaries(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for kind in self.kinds():
            rows = [r for r in self.runs if r.kind == kind]
            good = [r for r in rows if r.ok]

            def col(get: Callable[[Run], float | None], good: list[Run] = good) -> list[float]:
                return [v for v in map(get, good) if v is not None]
            entry = {"runs": len(rows), "ok": len(good),
                     "tokens_source": sorted({r.tokens_source for r in good}) or ["none"],
                     "wall_s": summary(col(lambda r: r.wall_s)), "ttft_s": summary(col(lambda r: r.ttft_s)),
                     "tokens": summary(col(lambda r: r.tokens)), "wall_tps": summary(col(lambda r: r.wall_tps)),
                     "decode_tps": summary(col(lambda r: r.decode_tps))}
            if kind.startswith("prefill-"):
                entry["prompt_tokens"] = summary(col(lambda r: r.prompt_tokens))
                entry["prefill_tps"] = summary(col(lambda r: r.prefill_tps))
            out[kind] = entry
        return out

    def to_json(self) -> dict[str, Any]:
        return {"tool": "bench", "ok": self.outcome is Outcome.OK, "outcome": self.outcome.value, "url": self.url,
                "model": self.model, "unreachable": self.unreachable, "error": self.error,
                "warmups": [r.to_json() for r in self.warmups], "runs": [r.to_json() for r in self.runs],
                "prefill_targets": list(self.prefill_targets), "summary": self.summaries()}


def _run(kind: str, index: int, r: ChatResult) -> Run:
    ok = r.error is None and bool(r.completion_tokens)
    error = r.error if r.error is not None else (None if ok else "empty answer (0 tokens)")
    return Run(kind, index, ok, r.wall_s, r.ttft_s, r.completion_tokens, r.tokens_source, r.prompt_tokens, error)


def haystack(salt: str, chars: int) -> str:
    """About ``chars`` characters of filler opened by ``salt`` (defeats prefix caching)."""
    words: list[str] = [f"[salt {salt}]"]
    size = len(words[0])
    i = 0
    while size < chars:
        word = f"{HAYSTACK_WORDS[i % len(HAYSTACK_WORDS)]}{i % 97}"
        words.append(word)
        size += len(word) + 1
        i += 1
    return " ".join(words)


def bench(client: OpenAIClient, *, model: str | None = None, runs: int = RUNS, warmups: int = WARMUPS,
          prefill: Sequence[int] = (), prefill_runs: int = PREFILL_RUNS,
          salt: Callable[[], str] = lambda: uuid.uuid4().hex,
          progress: Callable[[str], None] = lambda _s: None) -> BenchReport:
    listed = client.models()
    if listed.unreachable:
        return BenchReport(client.base, model, (), unreachable=True, error=listed.error)
    if model is None:
        if not listed.ids:
            return BenchReport(client.base, None, (), error=listed.error or "/v1/models lists no model")
        model = listed.ids[0]

    def ask(prompt: str, max_tokens: int) -> ChatResult:
        return client.chat({"model": model, "messages": [{"role": "user", "content": prompt}],
                            "max_tokens": max_tokens}, stream=True)

    warm: list[Run] = []
    done: list[Run] = []
    stopped: list[str] = []

    def spent() -> bool:
        """True once --deadline is spent: the runs so far are reported, the rest are not made."""
        if client.expired and not stopped:
            stopped.append(client.deadline_message())
        return bool(stopped)

    for i in range(warmups):
        if spent():
            break
        name, prompt, max_tokens = PROMPTS[i % len(PROMPTS)]
        warm.append(_run(f"warmup-{name}", i, ask(prompt, max_tokens)))
        progress(f"[bench] warm-up {i + 1}/{warmups}")
    for name, prompt, max_tokens in PROMPTS:
        for i in range(runs):
            if spent():
                break
            run = _run(name, i, ask(prompt, max_tokens))
            done.append(run)
            progress(f"[bench] {name} {i + 1}/{runs}: " + (_brief(run) if run.ok else f"error {run.error}"))
    ratio = CHARS_PER_TOKEN
    for target in prefill:
        for i in range(prefill_runs):
            if spent():
                break
            text = haystack(salt(), int(target * ratio))
            prompt = f"{text}\n\nReply with the single word OK."
            run = _run(f"prefill-{target}", i, ask(prompt, 1))
            if run.ok and run.prompt_tokens:
                ratio = max(0.5, min(16.0, ratio * target / run.prompt_tokens))
            done.append(run)
            progress(f"[bench] prefill {target} {i + 1}/{prefill_runs}: "
                     + (f"{run.prompt_tokens} tokens, TTFT {run.ttft_s:.3f}s" if run.ok and run.ttft_s is not None
                        else f"error {run.error}"))
    return BenchReport(client.base, model, tuple(done), tuple(warm), tuple(prefill),
                       error=stopped[0] if stopped else None)


def _brief(run: Run) -> str:
    dec = f"{run.decode_tps:.1f}" if run.decode_tps is not None else "-"
    ttft = f"{run.ttft_s:.3f}s" if run.ttft_s is not None else "-"
    return f"{run.tokens} tokens ({run.tokens_source}) in {run.wall_s:.2f}s, TTFT {ttft}, decode {dec} tok/s"


__all__ = ["PROMPTS", "BenchReport", "Run", "bench", "haystack"]
