"""`club3090 pull SLUG|DIR --profile-like KEY`: the gate, its verdict, and (Path A) the compose;
for an accepted non-curated repo, Pull-Emit-Derived ``[E]``: compose, download, boot, smoke.

Exit codes (``club3090.cli.exit_codes``): 0 ok; 2 a stratum 1-6 stop, hard-block, or a failed
``[E]`` stage; 3 a terminal that needs ``--yes`` / ``--force-download``; 64 usage (a bad ``--out``
or ``--gpus``, or ``--submit-last`` / ``--submit DIR`` with no bundle to submit). Tool failures go
through ``club3090.cli``'s error table (69 Hub unreachable, 70 internal error, 78 invalid
catalog); a submission ``gh`` could not file exits 69.
"""

from __future__ import annotations

import argparse
import json
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

from club3090.cli.commands._types import (
    add_gpus_flag,
    add_rig_flags,
    add_shape_flags,
    add_xet_flag,
    gpu_set,
    shape_request,
)
from club3090.cli.exit_codes import UNAVAILABLE, exit_code, with_exit_code
from club3090.cli.render import concurrency_text, confidence_text, gpus_text, safe
from club3090.outcome import Outcome
from club3090.units import gib_text


def parse_sm(text: str) -> Decimal:
    """``--hardware SM``: :func:`club3090.rig.gpus.parse_sm` (``8.6``, ``sm_86``, ``86``) as an argparse type."""
    from club3090.rig.gpus import parse_sm as parse  # the one SM parser; loaded only when the flag is given

    try:
        return parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


class _OutPath(argparse.Action):
    """``--out`` as a Path, remembering whether it was written with a trailing ``/`` (a bundle folder)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        setattr(namespace, self.dest, Path(values))
        namespace.out_bundle = str(values).endswith("/")


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "pull", help="gate a model for this rig: fit verdict, a compose, and for other repos download + boot",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
               "  club3090 pull microsoft/phi-4 --gpus 2x3090 --dry-run\n"
               "  club3090 pull Qwen/Qwen2.5-7B -tp 1 --max-model-len 16384 --yes --out compose.yml\n"
               "  club3090 pull Lorbus/Qwen3.6-27B-int4-AutoRound --profile-like vllm/minimal --out compose.yml",
        description="Run the pull gate for one Hugging Face repo (or local folder): derive its facts, "
                    "check the --profile-like runtime, engine support, disk and the fit, then map the "
                    "verdict to a terminal. A curated repo with --out gets its compose written. Any other "
                    "repo whose verdict is accepted gets a patchless compose (its port published on "
                    "127.0.0.1 unless --host), its files downloaded into the standard HF cache (resumable, "
                    "SHA-256-checked, where `up` and `hf` find them), and a boot + smoke test in Docker "
                    "(--no-boot: compose and download only).")
    p.add_argument("source", nargs="?", metavar="SLUG|DIR", help="Hugging Face repo id or a local model folder")
    p.add_argument("--profile-like", metavar="KEY",
                   help="registry profile giving the runtime shape (default: the curated profile for a "
                        "curated repo, else a shape derived from the model and the GPUs)")
    add_rig_flags(p)
    add_shape_flags(p)
    p.add_argument("--dry-run", action="store_true",
                   help="evaluate only (Path B): never write a compose, download or boot; a hard stop "
                        "still records its gate bundle (see --captures-dir)")
    p.add_argument("--captures-dir", type=Path, metavar="DIR",
                   help="where capture bundles go (default: $CLUB3090_CAPTURES, else "
                        "$XDG_STATE_HOME/club3090/pull-captures, else ~/.local/state/club3090/pull-captures)")
    p.add_argument("--verbose", "-v", action="store_true", help="also print the gate's tokens and strata")
    p.add_argument("--yes", "-y", action="store_true", help="accept a confirm→proceed terminal")
    add_xet_flag(p)
    p.add_argument("--force-download", action="store_true",
                   help="accept a low-confidence wont-fit (override-accepted; a calibration signal, not a fit)")
    p.add_argument("--experimental-arch", action="store_true",
                   help="bypass only [C0] no-arch-row (Path B)")
    p.add_argument("--trust-remote-code", action="store_true",
                   help="acknowledge that the model needs custom modelling code")
    p.add_argument("--hf-home", type=Path, metavar="DIR",
                   help="HF_HOME (default: $HF_HOME, $MODEL_DIR/.cache/huggingface, "
                        "$XDG_CACHE_HOME/huggingface, ~/.cache/huggingface)")
    p.add_argument("--out", action=_OutPath, metavar="FILE|DIR/",
                   help="write the compose here (selects Path A for a curated repo); a folder path ending in / "
                        "gets `up --no-start`'s self-contained launch bundle")
    p.add_argument("--force", action="store_true", help="overwrite an existing --out file")
    p.add_argument("--no-boot", action="store_true",
                   help="non-curated repos: write the compose and download, but do not start Docker")
    p.add_argument("--verify-in-place", action="store_true",
                   help="non-curated repos: take files already on disk from an earlier pull "
                        "(HF_HOME/club3090/pulls/<slug>-<hash>/) into the HF cache when their SHA-256 matches "
                        "the Hub's, instead of downloading them again; a mismatch is downloaded")
    p.add_argument("--host", metavar="IP",
                   help="the address the derived compose publishes its port on (default 127.0.0.1, this "
                        "machine only; 0.0.0.0 for every interface). vLLM inside the container still "
                        "listens on 0.0.0.0")
    p.add_argument("--hardware", type=parse_sm, metavar="SM", help="override the compute capability, e.g. 8.6")
    add_gpus_flag(p)
    # upstream's spelling, accepted; hidden from --help
    p.add_argument("--hardware-gpus", dest="gpus", metavar="SPEC", help=argparse.SUPPRESS)
    p.add_argument("--recommend", action="store_true", help="append a plain-language recommendation")
    p.add_argument("--json", action="store_true", help="print the whole decision as one JSON object")
    p.add_argument("--submit-last", action="store_true",
                   help="submit the newest capture bundle (asks first); none -> exit 64")
    p.add_argument("--submit", type=Path, metavar="DIR",
                   help="submit this capture bundle (asks first); not a bundle folder -> exit 64")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, provider: Any) -> int:
    from club3090.errors import UsageError

    if args.submit_last or args.submit is not None:
        if args.submit_last and args.submit is not None:
            raise UsageError("give either --submit-last or --submit DIR, not both")
        if args.json:
            raise UsageError("--submit-last / --submit show the payload and ask first; --json does not apply")
        return _submit(args, provider.settings)
    if not args.source:
        raise UsageError("pull needs SLUG|DIR (or --submit-last / --submit DIR)")
    if args.profile_like is not None and not args.profile_like.strip():
        raise UsageError("--profile-like needs a KEY (see `club3090 profiles`), or leave it out for the "
                         "automatic shape")
    from club3090.fit.shape import NO_SHAPE_REQUEST

    if args.profile_like and shape_request(args) != NO_SHAPE_REQUEST:
        raise UsageError("--profile-like gives the whole serving shape; drop it to choose the shape "
                         "with vLLM flags (-tp, --max-model-len, ...)")
    if args.profile_like is None and shape_request(args) == NO_SHAPE_REQUEST:   # the person's own default
        from club3090.cli.commands._routing import routed_profile

        args.profile_like = routed_profile(args, provider)
    if args.out is not None and not args.dry_run and getattr(args, "out_bundle", False):
        return _bundle(args, provider)
    if args.out is not None and not args.dry_run:  # fail fast, before the gate runs (exit 64)
        from club3090.edges.files import check_output_path
        check_output_path(args.out, force=args.force)

    from club3090.pipeline.pull import evaluate

    result = evaluate(request_of(args, provider.catalog()), provider, captures_root=captures_root(args),
                      stages=_e_stages(args, provider))
    if provider.settings.debug:
        for note in result.detection_notes:
            print(safe(f"[pull] debug: GPU probe {note}"), file=sys.stderr)
    if args.json:
        payload = with_exit_code(result.to_json(), result.outcome)
        if args.recommend:
            payload["recommend"] = recommend_line(result)
        print(safe(json.dumps(payload, ensure_ascii=False, indent=2, default=str), multiline=True))
    else:
        print(render(result, recommend=args.recommend, verbose=args.verbose))
    return exit_code(result.outcome)


def _bundle(args: argparse.Namespace, provider: Any) -> int:
    """``--out DIR``: the same gate, then ``up``'s self-contained launch bundle in DIR (nothing started;
    the weights go into the HF cache only with a folder, as ``up --no-start`` does)."""
    from club3090.cli.commands.up import run_request
    from club3090.edges import launchers

    return run_request(args, provider, directory=Path(args.out), no_start=True, launcher=launchers.DEFAULT,
                       port=None, vllm=None, skip_tools=False)


def captures_root(args: argparse.Namespace) -> Path:
    """--captures-dir, else $CLUB3090_CAPTURES, else the state folder (``settings.captures_dir``)."""
    from club3090.settings import captures_dir

    return captures_dir(getattr(args, "captures_dir", None))


def request_of(args: argparse.Namespace, catalog: Any) -> Any:
    from club3090.pipeline.pull import PullRequest

    return PullRequest(source=args.source, profile_like=args.profile_like, dry_run=args.dry_run, yes=args.yes,
                       force_download=args.force_download, experimental_arch=args.experimental_arch,
                       trust_remote_code=args.trust_remote_code, out=args.out, force=args.force,
                       hardware_sm=args.hardware, gpus=gpu_set(args, catalog),
                       shape_request=shape_request(args), host=_host(args))


def _host(args: argparse.Namespace) -> str:
    """``--host`` checked and canonical, else the default (127.0.0.1)."""
    from club3090.compose.derived import PUBLISH_HOST, publish_host

    given = getattr(args, "host", None)
    return publish_host(given) if given else PUBLISH_HOST


def _e_stages(args: argparse.Namespace, provider: Any) -> Any:
    """[E]'s I/O (the Hub, docker, loopback HTTP) from the provider; progress goes to stderr."""
    if args.dry_run:
        return None

    from dataclasses import replace

    def progress(message: str) -> None:
        print(safe(message), file=sys.stderr, flush=True)
    stages = provider.derived_stages(no_boot=args.no_boot, progress=progress)
    return replace(stages, verify_in_place=True) if stages is not None and args.verify_in_place else stages


# --------------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------------



def fit_lines(fit: Any) -> list[str]:
    """The fit breakdown (``memory.FitResult``) in GiB."""
    if fit is None:
        return []
    rank = fit.per_gpu
    parts = [f"{label} {gib_text(getattr(rank, name), unit=True)}"
             for label, name in (("budget", "budget_bytes"), ("weights", "weights_bytes"),
                                 ("non-torch", "non_torch_bytes"), ("activation", "activation_bytes"),
                                 ("cuda-graphs", "cudagraph_bytes"), ("KV pool", "kv_pool_bytes"))]
    lines = ["[pull] fit per GPU: " + ", ".join(parts)]
    facts = [f"KV tokens {fit.kv_cache_tokens}",
             f"max concurrency at full length {fit.max_concurrency:.2f}",
             f"max_model_len {fit.max_model_len}", f"largest length that fits {fit.max_model_len_fit}"]
    if fit.error_band_bytes:
        facts.append(f"error band ±{gib_text(fit.error_band_bytes, unit=True)}")
    lines.append("[pull] fit: " + ", ".join(facts))
    return lines


def e_lines(e: Any) -> list[str]:
    """What Pull-Emit-Derived [E] did, stage by stage, and the failing stage's token."""
    from club3090.pipeline.emit_derived import DOCKER_UNAVAILABLE

    if e is None or not e.ran:
        return []
    lines = []
    if e.compose_path is not None:
        lines.append(f"[pull] e: compose {e.compose_path} (max-model-len {e.max_model_len})")
    dl = e.download
    if dl is not None and dl.ok:
        lines.append(f"[pull] e: downloaded {len(dl.files)} files ({gib_text(dl.bytes, unit=True)}) into the HF cache: {dl.dest}"
                     + (", sha256 verified" if dl.sha_verified else ""))
    if e.boot is not None and e.boot.ok:
        lines.append(f"[pull] e: booted in {e.boot.seconds:.0f}s")
    if e.smoke is not None:
        lines.append("[pull] e: smoke " + " ".join(f"{c}={v}" for c, v in e.smoke.results.items())
                     + (" (partial)" if e.smoke.partial else ""))
        lines += [f"[pull] e: smoke {c}: {why}" for c, why in e.smoke.problems]
    if e.boot_skipped:
        lines.append(f"[pull] e: boot and smoke skipped ({e.boot_skipped})")
    if not e.ok:
        lines.append(f"[pull] e-stage={e.stage} failure={e.failure}")
        if e.detail:
            lines.append(f"[pull] e-detail: {e.detail}")
        if e.boot is not None and e.boot.log_excerpt:
            tail = [ln for ln in e.boot.log_excerpt.splitlines() if ln.strip()][-5:]
            lines.extend(f"[pull] e-log: {ln}" for ln in tail)
    if e.bundle is not None:
        lines.append(f"[pull] capture bundle: {e.bundle} (outcome {e.outcome})")
        if e.failure != DOCKER_UNAVAILABLE:   # this machine's Docker: nothing to report upstream
            lines.append("[pull] to report it: club3090 pull --submit-last (shows the payload and asks first)")
    return lines


def summary_line(result: Any) -> str:
    why = result.reason or (result.terminal or "")
    head = result.summary
    if head == "FITS":
        return f"{head}: {result.terminal} ({result.confidence}, {result.raw_verdict})"
    if head == "FITS-but-not-yet-accepted":
        flag = result.reason.split("needs ", 1)[-1] if result.reason else ""
        return f"{head}: {result.raw_verdict} at {result.confidence} confidence; re-run with {flag} to accept"
    if result.raw_verdict == "wont-fit":
        return f"{head}: predicted wont-fit at {result.confidence} confidence ({why})"
    return f"{head}: stopped at stratum {int(result.stratum)} {result.stratum_name}: {why}"


def recommend_line(result: Any) -> str:
    line = f"{result.summary} (deciding stratum: {int(result.stratum)} {result.stratum_name}"
    line += f", reason {result.reason})" if result.reason else ")"
    if result.caveat:
        line += f". {result.caveat}"
    return line


# stops about the input or the environment: nothing about the model was learned, so no report offer
INPUT_STOPS = frozenset({"unknown-profile-like", "unsupported-runtime-engine", "profile-not-emittable",
                         "profile-mismatch", "hardware-sm-undetermined", "hardware-vram-undetermined",
                         "disk-short"})
STOP_WORDS = {
    "unknown-profile-like": ("Unknown profile", "run `club3090 profiles` for the list, or drop --profile-like"),
    "unsupported-runtime-engine": ("That profile is not a vLLM profile", "pick a vllm/... profile"),
    "profile-not-emittable": ("That profile cannot be written as a compose", "pick another profile"),
    "profile-mismatch": ("That profile serves another model", "drop --profile-like to get this repo's own"),
    "hardware-sm-undetermined": ("Cannot tell which GPUs to price", ""),
    "hardware-vram-undetermined": ("Cannot tell how much memory the GPUs have", ""),
    "disk-short": ("Not enough free disk space for the download", "free space, or point HF_HOME at a larger disk"),
    "needs-trust-remote-code-ack": ("The model needs its own Python code",
                                    "read the repo's code, then re-run with --trust-remote-code"),
    "engine-support-unknown": ("vLLM support for this model is not established", ""),
    "no-fit-model": ("The fit engine cannot price this model", ""),
    "unsupported-format": ("The repo has no weights vLLM can load here", ""),
    "repo-not-found": ("The repo cannot be read", "check the name; a private or gated repo needs HF_TOKEN"),
}


def tokens_text(n: int) -> str:
    return f"{n // 1024}K" if n >= 1024 and n % 1024 == 0 else f"{n:,}"


def rig_text(result: Any) -> str:
    hw = result.hardware
    if hw is None or not hw.memory_bytes:
        return "this rig"
    tp = len(result.fit.ranks) if result.fit is not None else hw.count
    return gpus_text(hw.names[:tp])


def headline(result: Any) -> str:
    """One sentence a person can read: which way the verdict went, or what stopped it and the next step."""
    fit, conf = result.fit, confidence_text(result.confidence, result.fit)
    if fit is not None and result.raw_verdict in ("fits-clean", "fits-constrained"):
        chosen = (result.choice.chosen or result.choice.best) if result.choice is not None else None
        pp = chosen.shape.pp if chosen is not None and chosen.gpus == len(fit.ranks) else 1
        ranks = f"{len(fit.ranks) // pp} x PP {pp}" if pp > 1 else str(len(fit.ranks))
        kv = fit.settings.kv_cache_dtype
        shape = (f"TP {ranks}" + ("" if kv in ("auto", "bf16", "fp16") else f", {kv} KV")
                 if result.profile_like is None or result.shape_source == "derived"
                 else f"{result.profile_like}, TP {ranks}")
        body = (f"Fits on {rig_text(result)} ({shape}): {tokens_text(fit.max_model_len)} context, "
                f"{concurrency_text(fit)} - {conf}")
        if result.ok:
            return body
        if int(result.stratum) != 0:
            what, _ = STOP_WORDS.get(result.reason or "", ("Stopped after the fit", ""))
            return f"{body}; but {what.lower()}: {result.detail}"
        flag = result.reason.split("needs ", 1)[-1] if result.reason else "--yes"
        action = "download" if result.shape_source == "derived" or result.path == "B" else "write it"
        return f"{body}; re-run with {flag} to {action}"
    if result.raw_verdict == "wont-fit" and fit is not None:
        most = fit.max_model_len_fit
        tail = (f"the largest context that fits is {tokens_text(most)}" if most
                else "the weights leave no room for a KV cache")
        nxt = f"; try: {result.suggestions[0]}" if result.suggestions else ""
        return (f"Does not fit on {rig_text(result)} at {tokens_text(fit.max_model_len)} context - {conf}: "
                f"{tail}{nxt}")
    what, step = STOP_WORDS.get((result.reason or "").split("/", 1)[0], ("Stopped before a fit verdict", ""))
    detail = f": {result.detail}" if result.detail else f" ({result.reason})"
    bypass = ""
    if _c0_stop(result):
        bypass = f"; re-run with {' '.join(sorted(result.c0.bypassable_by))} to go ahead anyway"
    return f"{what}{detail}" + (f"; next: {step}" if step and not bypass else "") + bypass


def _c0_stop(result: Any) -> bool:
    """The stop is [C0]'s own, so its bypass flags are the next step (not when another stratum
    stopped after the flags cleared [C0])."""
    c0 = result.c0
    return bool(c0 is not None and c0.bypassable_by and not result.ok and result.reason == c0.token)


def render(result: Any, *, recommend: bool = False, verbose: bool = False) -> str:
    lines = [headline(result), *(c.line() for c in result.cliffs)]   # known cliffs at the top (gate.cliffs)
    if verbose:
        status = "OK" if result.ok else "ABORT" if not result.dry_run or exit_code(result.outcome) else "DRY-RUN"
        lines.append(f"[pull] {status} path={result.path or '-'} stratum={result.stratum_name} "
                     f"slug={result.slug} profile-like={result.profile_like}")
        if result.confidence or result.raw_verdict or result.terminal:
            terminal = result.terminal or "-"
            if terminal == "override-accepted" and not result.ok:
                terminal += " (not accepted)"
            lines.append(f"[pull] confidence={result.confidence or '-'} raw_verdict={result.raw_verdict or '-'} "
                         f"terminal={terminal}")
        if result.reason:
            lines.append(f"[pull] reason={result.reason}")
        if _c0_stop(result):
            lines.append(f"[pull] bypassable_by={' + '.join(sorted(result.c0.bypassable_by))}")
    if result.detail and (verbose or result.raw_verdict is not None):
        lines.append(f"[pull] detail: {result.detail}")
    if result.sub_reason == "gguf-only":
        lines.append("[pull] hint: this repo ships GGUF files only; vLLM needs safetensors - look for a "
                     "safetensors variant of the same model, or price the GGUF for llama.cpp with "
                     f"`club3090 kv-calc {result.slug} --quant QUANT`, or serve it with llama.cpp: "
                     f"`club3090 up {result.slug} --quant QUANT --dir DIR`")
    lines.extend(fit_lines(result.fit))
    hw = result.hardware
    if hw is not None and hw.memory_bytes:
        lines.append(f"[pull] gpus: {hw.count} x " + ", ".join(sorted({gib_text(m, unit=True) for m in hw.memory_bytes}))
                     + f" ({hw.memory_source}), SM {hw.sm} ({hw.sm_source})")
    lines.extend(f"note: {n.text}" for n in result.notices)
    lines.extend(f"closest fit: {s}" for s in result.suggestions)
    lines.extend(f"advice: {n.text}" for n in result.advisories)
    lines.extend(e_lines(result.e))
    if result.out is not None:
        lines.append(f"[pull] wrote {result.out}")
    if result.caveat:
        lines.append(f"[pull] caveat: {result.caveat}")
    if result.bundle is not None:
        lines.append(f"[pull] gate bundle: {result.bundle}")
        if (result.reason or "").split("/", 1)[0] not in INPUT_STOPS and result.stratum_name != "DERIVER":
            lines.append("[pull] to report this stop: club3090 pull --submit-last (shows the payload and asks first)")
    if verbose:
        lines.append(f"[pull] {summary_line(result)}")
    if recommend:
        lines.append(f"recommend: {recommend_line(result)}")
    return "\n".join(safe(line) for line in lines)   # each line: a newline inside a value is shown, not obeyed


# --------------------------------------------------------------------------------------------
# Submission
# --------------------------------------------------------------------------------------------

def _ask(prompt: str) -> str:
    print(prompt, end="", file=sys.stderr, flush=True)
    try:
        return input()
    except EOFError:
        return ""


def _submit(args: argparse.Namespace, settings: Any) -> int:
    """Submit a bundle. No bundle to submit is a usage error (64) either way it was named."""
    from club3090.errors import UsageError
    from club3090.reports import capture

    if args.submit_last:
        root = captures_root(args)
        bundle = capture.latest_bundle(root)
        if bundle is None:
            raise UsageError(f"--submit-last: no capture bundle under {root}; nothing to submit")
    else:
        bundle = args.submit
        if not Path(bundle).is_dir():
            raise UsageError(f"--submit {bundle}: not a bundle folder")
    from club3090.reports.submit import submit
    outcome = submit(Path(bundle), ask=_ask, out=sys.stdout, secrets=settings.redaction_secrets)
    if outcome.action == "gh-failed":
        print(f"gh failed: {outcome.error}; nothing was sent", file=sys.stderr)
        return UNAVAILABLE
    return exit_code(Outcome.OK)
