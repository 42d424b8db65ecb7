"""What a drafter gains at one request: acceptance length by method and task, and the step it costs.

``speculative_gain(method, task, n, *, base_step_s, token_compute_s, draft_step_s) -> SpecGain``

One speculative step drafts ``n`` tokens, then the target verifies them in one forward pass and
keeps the accepted prefix plus one token of its own. With a per-position acceptance rate ``a``
(each drafted token accepted given the ones before were), the tokens a step yields are
``(1 - a**(n+1)) / (1 - a)`` (Leviathan et al. 2023, "Fast Inference from Transformers via
Speculative Decoding", eq. 1). The step costs the target's plain decode step (reading the weights
once) plus the compute of ``n`` more tokens in that pass, plus the drafting:

- ``mtp`` / ``mtp_gguf`` / ``mtp_assistant`` / ``eagle``: a one-layer head and the LM head per
  drafted token (``n`` passes);
- ``dflash`` / ``dspark`` (block drafters): one drafter pass for the whole block, then the LM head;
- ``draft_model``: the draft model's weights per drafted token;
- ``ngram``: no model at all (prompt lookup).

The speed-up is tokens per step x the plain step / the speculative step. The acceptance rates per
method and task (:data:`ACCEPTANCE`) are published acceptance figures, not fitted to the decode
speeds ``benchmarks/speed.py`` scores; the draft costs follow from bytes and FLOPs the caller
computes (``fit/speed.py``). Prose accepts far less than code: the prose gain is often near zero
(upstream's n-sweeps: "prose is break-even at every n; the win is code/structured output").

Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ACCEPTANCE", "DRAFT_KIND", "QUANTIZED_HEAD_ACCEPTANCE", "TASKS", "TOKEN_OVERHEAD_S", "SpecGain", "accepted_per_step", "speculative_gain"]

TASKS = ("narrative", "code")
# the engine's own time per drafted token beyond the bytes and FLOPs (the proposer's launches, its
# sampling, rejection and scheduling): fitted on upstream's drafter rows over a grid
# (benchmarks/speed.py refits it leaving each rig out: 1 ms on each of the five rigs)
TOKEN_OVERHEAD_S = 1e-3

# how a method drafts: per-token head passes, one block pass, a whole draft model per token, nothing
DRAFT_KIND = {"mtp": "head", "mtp_gguf": "head", "mtp_assistant": "head", "eagle": "head", "eagle3": "head",
              "dflash": "block", "dspark": "block", "draft_model": "model", "ngram": "none", "suffix": "none"}

# per-position acceptance rate by (method, task), with where the figure comes from
ACCEPTANCE: dict[tuple[str, str], tuple[float, str]] = {
    # vLLM's built-in MTP heads kept in 16 bits (FP8 / NVFP4 exports keep the head unquantized)
    ("mtp", "narrative"): (0.80, "club-3090 #133 (vllm/qwen-27b-dual-max): ~83 % MTP accept at n=3, bf16 head"),
    ("mtp", "code"): (0.92, "club-3090 registry tess-mtp-builtin: accept length 5.0 at n=5 on code, bf16 head"),
    # club-3090 registry, carnice / pi-reasoning GGUF heads on beellama/mainline: ~73-94 % accept at n=1-2
    ("mtp_gguf", "narrative"): (0.73, "club-3090 registry pi-reasoning-q4km: 73 % MTP accept (matched-power A/B)"),
    ("mtp_gguf", "code"): (0.81, "club-3090 registry carnice-v2 dual q8_0: MTP accept ~81 %"),
    # Gemma 4 assistant drafters: the MTP-head rule (no separate published split; the Qwen head's figures)
    ("mtp_assistant", "narrative"): (0.80, "as mtp (no published per-task split for the Gemma 4 assistant)"),
    ("mtp_assistant", "code"): (0.92, "as mtp (no published per-task split for the Gemma 4 assistant)"),
    # EAGLE-3 (Li et al. 2025, "EAGLE-3"): accept length ~6 at 7-8 drafted tokens on MT-bench / HumanEval
    ("eagle", "narrative"): (0.80, "EAGLE-3 paper: accept length ~5.6-6.0 on MT-bench (chain of 7)"),
    ("eagle", "code"): (0.85, "EAGLE-3 paper: accept length ~6.5 on HumanEval (chain of 7)"),
    ("eagle3", "narrative"): (0.80, "EAGLE-3 paper: accept length ~5.6-6.0 on MT-bench (chain of 7)"),
    ("eagle3", "code"): (0.85, "EAGLE-3 paper: accept length ~6.5 on HumanEval (chain of 7)"),
    # block drafters: club-3090 registry notes (DFlash prose +27 % vs no-spec; DFlash2 code ~2x the MTP tier)
    ("dflash", "narrative"): (0.55, "club-3090 registry beellama/dflash: prose +27 % vs no-spec"),
    ("dflash", "code"): (0.85, "club-3090 registry qwen38 ultrafast: DFlash2 code 227 vs MTP 106 tok/s"),
    ("dspark", "narrative"): (0.55, "as dflash (block drafter; no published DSpark split)"),
    ("dspark", "code"): (0.85, "as dflash (block drafter; no published DSpark split)"),
    # a small model of the same family (Leviathan et al. 2023, table 3: a ~ 0.6-0.8)
    ("draft_model", "narrative"): (0.65, "Leviathan et al. 2023 table 3: same-family drafters a = 0.6-0.8"),
    ("draft_model", "code"): (0.75, "Leviathan et al. 2023 table 3: same-family drafters a = 0.6-0.8"),
    # prompt lookup: copies from the context; code and edits repeat, prose rarely
    ("ngram", "narrative"): (0.20, "vLLM ngram / prompt lookup: prose rarely repeats the prompt"),
    ("ngram", "code"): (0.45, "vLLM ngram / prompt lookup: code edits copy spans of the prompt"),
    ("suffix", "narrative"): (0.20, "as ngram (suffix decoding also copies from earlier text)"),
    ("suffix", "code"): (0.45, "as ngram (suffix decoding also copies from earlier text)"),
}


# a built-in head quantized with the rest of a 4-bit checkpoint accepts less (club-3090: "the NVFP4
# export 4-bit'd mtp.fc" accepted 0 %; the int4 exports lose most of the prose acceptance). A
# separate drafter (the Gemma 4 assistant) keeps its own precision.
QUANTIZED_HEAD_ACCEPTANCE: dict[tuple[str, str], tuple[float, str]] = {
    ("mtp", "narrative"): (0.50, "club-3090 registry tess-mtp-builtin: prose tail acceptance ~0.2 by position 5"),
    ("mtp", "code"): (0.87, "club-3090 registry qwen38-27b-dual-fast (quantized head): accept length 3.90 at n=4"),
}


@dataclass(frozen=True, slots=True)
class SpecGain:
    method: str
    task: str
    num_speculative_tokens: int
    acceptance: float               # per drafted position
    accept_length: float            # tokens a step yields (accepted + the target's own)
    speedup: float                  # decode with the drafter / without it
    source: str

    def note(self) -> str:
        return (f"speculative decoding ({self.method}, n={self.num_speculative_tokens}, {self.task}): "
                f"~{self.accept_length:.2f} tokens per step at {self.acceptance:.0%} acceptance, "
                f"x{self.speedup:.2f} modelled ({self.source})")


def accepted_per_step(acceptance: float, n: int) -> float:
    """Expected tokens per speculative step: ``(1 - a**(n+1)) / (1 - a)`` (n + 1 when a = 1)."""
    a = min(max(acceptance, 0.0), 1.0)
    if a >= 1.0:
        return float(n + 1)
    return (1 - a ** (n + 1)) / (1 - a)


def speculative_gain(method: str, task: str, n: int, *, base_step_s: float, token_compute_s: float,
                     head_step_s: float, block_step_s: float, model_step_s: float = 0.0,
                     token_overhead_s: float = TOKEN_OVERHEAD_S, quantized_head: bool = False) -> SpecGain | None:
    """The modelled gain, or None for a method or task without a published acceptance rate.

    ``base_step_s``: one plain decode step; ``token_compute_s``: the compute of one more token in the
    verifying pass; ``head_step_s``: one head pass (a layer and the LM head); ``block_step_s``: one
    block-drafter pass; ``model_step_s``: one draft-model token; ``token_overhead_s``: the engine's
    own time per drafted token (:data:`TOKEN_OVERHEAD_S`, fitted by ``benchmarks/speed.py``);
    ``quantized_head``: the target's 4-bit checkpoint quantized its built-in head too
    (:data:`QUANTIZED_HEAD_ACCEPTANCE`)."""
    known = (quantized_head and QUANTIZED_HEAD_ACCEPTANCE.get((method, task))) or ACCEPTANCE.get((method, task))
    if known is None or n < 1 or base_step_s <= 0:
        return None
    acceptance, source = known
    kind = DRAFT_KIND[method]
    draft = {"head": n * head_step_s, "block": block_step_s, "model": n * model_step_s, "none": 0.0}[kind]
    step = base_step_s + n * (token_compute_s + token_overhead_s) + draft
    length = accepted_per_step(acceptance, n)
    return SpecGain(method=method, task=task, num_speculative_tokens=n, acceptance=acceptance,
                    accept_length=length, speedup=length * base_step_s / step, source=source)
