"""The lines ``up`` and ``swap`` print, rendered from their facts (``pipeline/up_facts.py``): the
plan first, then each step in the order it happened, one verify table."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from functools import singledispatch
from typing import Any

from club3090.edges.boot import WarmUp
from club3090.edges.launchers.process import PortHolder
from club3090.gate.cliffs import Cliff
from club3090.pipeline import up_facts as f
from club3090.pipeline.boot_receipt import BootReceipt
from club3090.pipeline.pull import PullResult
from club3090.units import GiB, MiB

__all__ = ["lines", "serving_line"]


def serving_line(full_ok: bool, stress: bool, stress_ok: bool = False, warm: bool = True) -> str:
    """Design rule 5: ``SERVING`` only when verify --full (and, with ``--stress``, verify-stress) is
    green; anything less is said as what it is."""
    if not warm:
        return "[up] serving, not verified: still failing at the end of the warm-up window, verify --full did not run"
    if not full_ok:
        return "[up] serving, not verified: verify --full failed (see above)"
    if stress and not stress_ok:
        return "[up] serving, not verified under stress: verify-stress failed (see above)"
    return "[up] SERVING: verified (verify --full" + (", verify-stress)" if stress else ")")


# the facts said in lines that only fill in their own fields (``str.format`` templates, registered
# below like the rest); the others have a renderer of their own
_SAID: dict[type, tuple[str, ...]] = {
    f.EngineNoFit: ("[up] {repo_id} does not fit on {rig} ({engine}, estimated): {why}",
                    "[up] try a smaller --quant, a smaller --ctx-size, or q8_0/q4_0 cache types "
                    "(--cache-type-k/-v); `club3090 kv-calc {repo_id} --quant QUANT` shows the breakdown"),
    f.EmitOnly: ("[up] weights not downloaded, nothing started (--emit-only): {files} files of "
                 "{repo_id}@{commit:.12} would go into {hub_cache}",),
    f.NotStarted: ("[up] not started (--no-start); start it with `club3090 up` again, "
                   "`docker compose -f {directory}/compose.yml up -d`, or {directory}/serve.sh",),
    f.Ready: ("[up] ready after {seconds:.0f}s at {url}",),
    f.ReceiptSkipped: ("[up] no receipt: llama.cpp start-up logs are not parsed into receipts yet; launch.json "
                       "holds the prediction",),
    f.PricedOnReference: ("[swap] note: no GPU named or detected for {ranks} rank(s): priced on the profile's "
                          "reference GPU ({gpu} x {ranks}); pass --gpus to price your rig",),
}


def lines(fact: f.Fact) -> list[str]:
    """The terminal lines of one fact."""
    return _render(fact)


@singledispatch
def _render(fact: object) -> list[str]:
    raise TypeError(f"no rendering for {type(fact).__name__}")


def _filled(templates: tuple[str, ...]) -> Callable[[Any], list[str]]:
    """The renderer of a fact said by ``templates``, each filled in with the fact's own fields."""
    def render(fact: Any) -> list[str]:
        values = {field.name: getattr(fact, field.name) for field in fields(fact)}
        return [template.format(**values) for template in templates]
    return render


for _kind, _templates in _SAID.items():
    _render.register(_kind, _filled(_templates))


@_render.register
def _(gate: PullResult) -> list[str]:
    from club3090.cli.commands.pull import render as render_gate

    return [render_gate(gate)]


@_render.register
def _(cliff: Cliff) -> list[str]:
    return [cliff.line()]


@_render.register
def _(fact: f.EnginePlanned) -> list[str]:
    k, v = fact.cache_types
    return [f"[up] {fact.repo_id} {fact.quant} ({fact.arch}, {fact.weights_bytes / GiB:.2f} GiB) on {fact.rig}, "
            f"{fact.engine}: {fact.note}; KV {fact.kv_bytes / MiB:,.1f} MiB ({k}/{v}), estimated"]


@_render.register
def _(fact: f.DerivedLaunch) -> list[str]:
    return [f"[up] note: a derived llama-server launch at {fact.profile}'s shape, not its shipped compose"
            + ("" if fact.captured else " (the catalog holds no capture of it)")]


@_render.register
def _(fact: f.BundleWritten) -> list[str]:
    mounted = f", {fact.mounted} mounted files" if fact.mounted else ""
    return [f"[up] bundle written to {fact.directory} (compose.yml, .env, serve.sh, launch.json{mounted})",
            *(f"[up] note: {fact.native_note} {note}" for note in fact.container_only)]


@_render.register
def _(fact: f.WeightsFetched) -> list[str]:
    verified = ", sha256 verified" if fact.sha_verified else ""
    size = f"{fact.bytes / GiB:.2f} GiB in the HF cache{verified}"
    if fact.what == "drafter":
        return [f"[up] drafter: {fact.repo_id}, {fact.files} files, {size}"]
    return [f"[up] weights: {fact.files} files, {size}" if fact.files is not None else f"[up] weights: {size}"]


@_render.register
def _(holder: PortHolder) -> list[str]:
    from club3090.pipeline.bundle_start import PORT_IN_USE

    return [f"[up] {PORT_IN_USE}: {holder.text()}: stop it, or pass --port N for another port", "[up] nothing started"]


@_render.register
def _(w: WarmUp) -> list[str]:
    if w.ok:
        return [] if w.attempts == 1 else [f"[up] warmed up: the first completion succeeded after {w.seconds:.0f}s "
                                           f"({w.attempts} tries)"]
    if w.exited:
        return [f"[up] not warm: the server exited during the warm-up after {w.attempts} tries (last: {w.last_error})",
                "[up] read its log: club3090 status DIR"]
    return [f"[up] not warm: no completion succeeded within the {w.window_s:.0f} s warm-up window "
            f"({w.attempts} tries; last: {w.last_error})",
            "[up] give it longer with --warmup-s SECONDS, or read the server log (club3090 status DIR)"]


@_render.register
def _(done: BootReceipt) -> list[str]:
    if done.path is not None:
        return [f"[up] receipt: {done.path} (saved to the local overlay: {done.saved})"]
    return [f"[up] {done.note}"]


@_render.register
def _(fact: f.Smoke) -> list[str]:
    return ["[up] smoke " + " ".join(f"{c}={v}" for c, v in fact.results),
            *(f"[up] smoke {c}: {why}" for c, why in fact.problems)]


@_render.register
def _(fact: f.ToolsSkipped) -> list[str]:
    if fact.by_user:
        return []            # the user's own --skip-tools: the verify table says so
    return [f"[up] tool calls not verified: the launch has no {fact.missing_flag}"]


@_render.register
def _(fact: f.Verified) -> list[str]:
    tool = "verify-stress" if fact.stress else "verify"
    return [f"[up] {tool} {c.status.upper():4s} {c.name:16s} {c.detail}" for c in fact.report.checks]


@_render.register
def _(fact: f.Serving) -> list[str]:
    url, model = fact.url, fact.model
    body = f'{{"model": "{model}", "messages": [{{"role": "user", "content": "Hello"}}]}}'
    return [f"[up] URL: {url}/v1", f"[up] served model: {model}",
            f"[up] try: curl -s {url}/v1/chat/completions -H 'Content-Type: application/json' -d '{body}'",
            f"[up] stop it with: club3090 down {fact.directory}",
            serving_line(fact.ok, fact.stress, fact.stress_ok, fact.warm)]


@_render.register
def _(fact: f.StartFailed) -> list[str]:
    out = [f"[up] FAILED to start: {fact.why}"]
    if fact.left_running:
        out.append(f"[up] left running: {fact.left_running}")
    out += [f"[up] log: {ln}" for ln in fact.log_tail]
    out.append(f"[up] capture bundle: {fact.capture}" if fact.capture is not None
               else f"[up] could not write the capture bundle: {fact.capture_error}")
    out.append(f"[up] logs: {fact.logs}")
    return out


@_render.register
def _(fact: f.ClusterWritten) -> list[str]:
    return [f"[up] {fact.nodes}-node launch ({fact.launcher}): TP {fact.tp} × PP {fact.pp}, "
            f"{fact.gpus_per_node} GPU(s) per node, --distributed-executor-backend ray",
            f"[up] written to {fact.directory}: {', '.join(fact.files)}",
            *(f"[up] preflight {'ok' if ok else 'note'}: {line}" for ok, line in fact.checks),
            *(f"[up] note: {flag} does not apply to --launcher {fact.launcher}" for flag in fact.ignored),
            f"[up] nothing started: a {fact.launcher} launch is written only; follow "
            f"{fact.directory / 'RUNBOOK.md'}"]


@_render.register
def _(fact: f.SwapFits) -> list[str]:
    return [f"[swap] {fact.repo} is a fine-tune {fact.profile} can serve: {fact.architecture}, {fact.quant}, "
            f"the geometry of {fact.display_name}",
            *([f"[swap] note: group size not compared ({fact.group_size_unchecked})"] if fact.group_size_unchecked
              else [])]


@_render.register
def _(fact: f.SwapPriced) -> list[str]:
    from club3090.pipeline.swap import CONFIDENCE

    was = f" (the curated weights: {fact.curated_bytes / GiB:.2f} GiB)" if fact.curated_bytes else ""
    out = [f"[swap] re-priced with {fact.repo}'s own weights, {fact.weights_bytes / GiB:.2f} GiB{was}, "
           f"at {fact.profile}'s shape on {len(fact.memory)} x {fact.memory[0] / GiB:.1f} GiB: {fact.verdict}, "
           f"{fact.max_model_len:,} tokens of context, {fact.concurrency:.2f} full-length request(s) "
           f"- confidence {CONFIDENCE}"]
    if fact.constrained_seqs is not None:
        out.append(f"[swap] warning: fits-constrained: vLLM starts, but fewer than {fact.constrained_seqs} "
                   "full-length request(s) fit at once")
    return out


@_render.register
def _(fact: f.SwapRefused) -> list[str]:
    return [f"[swap] REFUSED {fact.token}", *fact.details]
