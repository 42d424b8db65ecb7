"""`club3090 kv-calc MODEL`: vLLM's start-up memory accounting for one model, GPU set and shape.

MODEL is a local folder (config.json + safetensors headers), a config.json path, a curated
profile key or model id from the catalog, or a Hub repo id: the one resolver
(``club3090.edges.resolve``). Flags override the profile's settings; the stages are
``club3090.pipeline.kv_calc``.
``--calibration`` scores the catalog's curated profiles against the upstream RTX 3090 anchors
(``club3090.fit.calibration``; criterion in docs/ACCURACY.md).

This module parses, makes one library call and renders. Exit codes: 0 fits (clean or
constrained), 2 won't fit / cannot be priced / a stratum-1 stop deriving a Hub MODEL (its token on
stderr, or ``{"stratum": 1, "reason": ...}`` with ``--json``, as ``inspect`` prints it), 64 usage
(bad flag values included).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from club3090.cli.commands import _llamacpp
from club3090.cli.commands._types import (
    add_gpus_flag,
    add_rig_flags,
    add_shape_flags,
    bounded,
    gpu_set,
    non_negative_int,
    positive_int,
    positive_number,
    shape_request,
)
from club3090.cli.render import concurrency_text, confidence_text, safe, terminal_console
from club3090.fit.kv_formats import KV_FORMATS, MODEL_DTYPES, canonical_dtype, kv_format
from club3090.fit.vllm_rules import SPECULATIVE_METHODS
from club3090.units import GiB, gib_text

MAX_BLOCK_SIZE = 4096       # vLLM's CLI offers 1..256; hybrid models raise it past that, not to powers of two


# ---------------------------------------------------------------------------------------------
# flag values (argparse ``type=``: a bad value is a usage error, exit 64, JSON with --json)


block_size = bounded(int, low=1, high=MAX_BLOCK_SIZE, what="a block size")


def kv_cache_dtype(text: str) -> str:
    """A KV format the estimator prices: the catalog's ids and vLLM's own spellings (kvformats)."""
    if kv_format(text) is None:
        raise argparse.ArgumentTypeError(f"unknown KV cache dtype {text!r}; known: {', '.join(KV_FORMATS)}")
    return text


def model_dtype(text: str) -> str:
    """``auto`` or a torch dtype name kvformats knows (bfloat16, bf16, float16, fp16, half, float32, ...)."""
    if text.strip().lower() != "auto" and canonical_dtype(text) is None:
        raise argparse.ArgumentTypeError(f"unknown dtype {text!r}; known: {', '.join(MODEL_DTYPES)}")
    return text


def max_model_len(text: str) -> int:
    """A positive context length, or ``auto`` / ``-1``: vLLM fits the length itself (-1)."""
    if text.strip().lower() in ("auto", "-1"):
        return -1
    return int(positive_int(text))


MAX_SPECULATIVE_CONFIG_CHARS = 4096


def speculative_config(text: str) -> dict[str, Any]:
    """vLLM's ``--speculative-config`` JSON: ``num_speculative_tokens`` (>= 1), optional ``method``
    and ``model`` (a local folder, config.json or Hub id of the drafter)."""
    if len(text) > MAX_SPECULATIVE_CONFIG_CHARS:
        raise argparse.ArgumentTypeError("--speculative-config is too long")
    try:
        value = json.loads(text)
    except ValueError:
        raise argparse.ArgumentTypeError("--speculative-config must be a JSON object") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("--speculative-config must be a JSON object")
    n = value.get("num_speculative_tokens")
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise argparse.ArgumentTypeError("--speculative-config needs num_speculative_tokens >= 1")
    method = value.get("method")
    if method is not None and (not isinstance(method, str) or method.lower() not in SPECULATIVE_METHODS):
        raise argparse.ArgumentTypeError(f"--speculative-config method must be one of {', '.join(SPECULATIVE_METHODS)}")
    model = value.get("model")
    if model is not None and (not isinstance(model, str) or not model.strip()):
        raise argparse.ArgumentTypeError("--speculative-config model must be a folder, config.json or org/name")
    return {"num_speculative_tokens": n, "method": method.lower() if method else None, "model": model}


def add_parser(sub: Any) -> None:
    p = sub.add_parser("kv-calc", help="predict vLLM's (or, for GGUF models, llama.cpp's) memory, verdict and max context",
                       description="Predict vLLM's start-up memory split per GPU: weights, non-torch, "
                                   "activation, CUDA graphs and the KV pool, with the verdict and the "
                                   "largest context that fits.")
    p.add_argument("model", nargs="?", help="local folder, config.json path, profile key, model id, or org/name")
    p.add_argument("--profile", help="curated profile key whose settings to use")
    add_gpus_flag(p)
    add_rig_flags(p)
    add_shape_flags(p, aliases=True)
    p.add_argument("--max-num-batched-tokens", type=positive_int, help="tokens per scheduler step")
    p.add_argument("--block-size", type=block_size, help=f"KV block size in tokens (1..{MAX_BLOCK_SIZE})")
    p.add_argument("--dtype", type=model_dtype, help=f"model dtype ({', '.join(MODEL_DTYPES)})")
    p.add_argument("--weights-gib", type=positive_number,
                   help="weights loaded per GPU rank, as vLLM's 'Model loading took X GiB'")
    p.add_argument("--num-speculative-tokens", type=non_negative_int, help="speculative tokens (MTP/draft)")
    p.add_argument("--speculative-config", type=speculative_config, metavar="JSON",
                   help='vLLM\'s speculative config: {"method": ..., "model": DRAFTER, "num_speculative_tokens": N}; '
                        "the drafter's weights and KV layers are priced")
    p.add_argument("--enforce-eager", action="store_true", help="no CUDA graphs")
    p.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=None,
                   help="prefix caching (hybrid Mamba / linear-attention models keep 2 state pages per request "
                        "with it, vLLM >= 0.15); default: the profile's, else vLLM's (on for hybrids from 0.28)")
    p.add_argument("--solve-max-ctx", action="store_true", help="answer for the largest context that fits")
    p.add_argument("--calibration", action="store_true", help="score the curated profiles against the anchors")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--html", type=Path, metavar="FILE",
                   help="also write one self-contained HTML page (inline SVG): memory per GPU and "
                        "context vs concurrency")
    p.add_argument("--force", action="store_true", help="overwrite an existing --html file")
    _llamacpp.add_arguments(p)
    p.set_defaults(run=run)


# ---------------------------------------------------------------------------------------------
# output






def headline(est: Any) -> str:
    """One sentence first: fits (context, concurrency) or not, and by how much, with the next step."""
    r = est.result
    conf = confidence_text(r.confidence, r)
    where = f"{est.gpus} (TP {est.tp}" + (f" x PP {est.pp})" if est.pp > 1 else ")")
    ctx = f"{r.max_model_len // 1024}K" if r.max_model_len % 1024 == 0 else f"{r.max_model_len:,}"
    if r.raw_verdict != "wont-fit":
        return f"Fits on {where}: {ctx} context, {concurrency_text(r)} - {conf}"
    g = r.per_gpu
    used = g.weights_bytes + g.non_torch_bytes + g.activation_bytes + g.cudagraph_bytes
    if used >= g.budget_bytes:
        short = (used - g.budget_bytes) / GiB
        return (f"Does not fit on {where} - {conf}: weights and overheads need {used / GiB:.2f} GiB per GPU, "
                f"{short:.2f} GiB more than the {g.budget_bytes / GiB:.2f} GiB budget; next: more GPUs "
                "(--tensor-parallel-size), a smaller quantization, or a higher --gpu-memory-utilization")
    most = r.max_model_len_fit
    return (f"Does not fit on {where} at {ctx} context - {conf}: the largest context that fits is {most:,}; "
            f"next: --max-model-len {most} (or auto), a compact --kv-cache-dtype, or more GPUs")


def render_human(est: Any) -> None:
    from rich.table import Table

    from club3090.cli.memory_bar import print_memory_bars
    from club3090.fit.curve import memory_segments

    console = terminal_console()
    result, s = est.result, est.result.settings
    for note in (est.shape_note, est.rig_note):      # the shape or the GPUs differ from what was asked: first
        if note:
            console.print(note, markup=False, highlight=False, soft_wrap=True)
    console.print(headline(est), markup=False, highlight=False, soft_wrap=True)
    if est.choice is not None:
        console.print(f"shape: {est.choice.reason}", markup=False, highlight=False, soft_wrap=True)
        for cand, why in est.choice.runner_ups:
            console.print(f"runner-up: {cand.label()} ({why})", markup=False, highlight=False, soft_wrap=True)
    head = (f"{est.model} ({est.architecture or 'unknown architecture'}) on {est.gpus}, "
            f"TP {est.tp} PP {est.pp}, vLLM {s.vllm_version}")
    console.print(head)
    console.print(f"util {s.mem_util:.2f}  max_model_len {s.max_model_len:,}  max_num_seqs {s.max_num_seqs}  "
                  f"max_num_batched_tokens {s.max_num_batched_tokens:,}  kv {s.kv_cache_dtype} "
                  f"(model {s.model_dtype})  weights: {est.weights_source}")
    table = Table(title="per GPU (limiting rank)", show_header=True)
    table.add_column("term")
    table.add_column("GiB", justify="right")
    g = result.per_gpu
    rows = [("budget (total x util)", g.budget_bytes), ("weights", g.weights_bytes),
            ("non-torch", g.non_torch_bytes), ("activation peak", g.activation_bytes),
            ("CUDA graphs" + ("" if s.cudagraphs_subtracted else " (outside budget)"), g.cudagraph_bytes),
            ("KV pool", g.kv_pool_bytes)]
    for name, value in rows:
        table.add_row(name, f"{value / GiB:.2f}")
    console.print(table)
    print_memory_bars(console, result.ranks,
                      lambda rank: memory_segments(rank, result.cudagraph_outside_budget_bytes))
    kv = Table(title="KV cache", show_header=False)
    kv.add_column("k")
    kv.add_column("v", justify="right")
    kv.add_row("KV bytes per token (per GPU)", f"{result.kv_bytes_per_token:,}")
    if result.state_bytes_per_request:
        kv.add_row("state bytes per request (per GPU)", f"{result.state_bytes_per_request:,}")
    kv.add_row("block size", str(result.block_size))
    kv.add_row("groups", str(len(result.groups)))
    kv.add_row("bytes per block", f"{result.bytes_per_block:,}")
    kv.add_row("num blocks", f"{result.num_blocks:,}")
    kv.add_row("GPU KV cache size", f"{result.kv_cache_tokens:,} tokens")
    kv.add_row(f"max concurrency at {result.max_model_len:,}", f"{result.max_concurrency:.2f}x")
    kv.add_row("largest context that fits", f"{result.max_model_len_fit:,}")
    console.print(kv)
    console.print(f"verdict: {result.raw_verdict}   confidence: {confidence_text(result.confidence, result)}   "
                  f"error band: ±{gib_text(result.error_band_bytes, unit=True)}")
    for note in result.notes:
        console.print(f"note: {note}")


def write_html(path: Path, est: Any, *, force: bool) -> None:
    """``--html FILE``: the fit as one self-contained page (``cli.html_report``), written atomically."""
    from club3090.cli.html_report import candidate_from_fit, render_page
    from club3090.edges.files import write_output_text

    result, s = est.result, est.result.settings
    name = (f"TP {est.tp} PP {est.pp}, {s.kv_cache_dtype} KV, max_model_len {s.max_model_len:,}, "
            f"util {s.mem_util:.2f}")
    headline = (f"{result.raw_verdict}: {result.max_concurrency:.2f} concurrent requests at "
                f"{s.max_model_len:,} tokens; largest context {result.max_model_len_fit:,} — estimated")
    page = render_page(f"{est.model} on {est.gpus}", [candidate_from_fit(name, result, result.notes)],
                       headline=headline)
    write_output_text(path, page, force=force, flag="--html")


def run_calibration(args: argparse.Namespace, catalog: Any, receipts: Any = ()) -> int:
    from club3090.cli.exit_codes import exit_code
    from club3090.fit.calibration import (
        KV_TOKEN_TOLERANCE,
        PEAK_TOLERANCE_BYTES,
        AnchorScore,
        calibrate,
    )
    from club3090.outcome import Outcome
    from club3090.reports.measured import score_receipts

    report = calibrate(catalog)
    local = score_receipts(receipts)
    code = exit_code(Outcome.OK if report.upstream_all_pass else Outcome.REFUSED)
    if args.json:
        print(json.dumps({**report.to_json(), "local_receipts": [r.to_json() for r in local]}, indent=1))
        return code

    def row(s: AnchorScore, ok: bool, why: str) -> str:
        peak = f"{s.predicted_peak_bytes / GiB:6.2f}" if s.predicted_peak_bytes else "     -"
        meas = f"{s.measured_peak_bytes / GiB:6.2f}" if s.measured_peak_bytes else "     -"
        card = f"{s.card_bytes / GiB:5.2f}" if s.card_bytes else "    -"
        toks = f"{s.predicted_kv_tokens:>9,}" if s.predicted_kv_tokens is not None else "        -"
        mtok = f"{s.measured_kv_tokens:>9,}" if s.measured_kv_tokens else "        -"
        return (f"{'PASS' if ok else 'FAIL'}  {s.anchor[:58]:58s} peak {peak}/{meas} of {card} GiB  "
                f"KV {toks}/{mtok}  {s.verdict or '-':16s} {why}")

    print("Upstream criterion (club-3090 kv-calc --calibration): verdict not wont-fit and the predicted")
    print("per-card footprint (budget + CUDA graphs outside it + 0.5 GiB context) fits the card.")
    for tally in report.upstream:
        for s in report.scores:
            if s.set == tally.name:
                print(row(s, s.upstream_ok, s.upstream_why))
    for t in report.upstream:
        note = "" if t.scored == t.expected else \
            f"  ({t.expected - t.scored} of upstream's {t.expected} rows not scored: not in the catalog's anchors)"
        print(f"{t.name}: {t.passed}/{t.scored}{note}")
    print()
    print(f"This machine's receipts (club3090 calibrate --save, up): {len(local)}")
    for r in local:
        err = f"{r.kv_error_gib:+.2f} GiB" if r.kv_error_gib is not None else "not predicted (no config given)"
        meas = f"{r.measured_kv_gib:.2f}" if r.measured_kv_gib is not None else "-"
        print(f"  {safe(r.model)[:40]:40s} {safe(r.source)[:28]:28s} KV measured {meas} GiB, error {err}")
    print()
    print(f"Stricter club3090 report (every anchor; also KV tokens within {KV_TOKEN_TOLERANCE:.0%} of the "
          f"measured pool and the footprint not under-stated by more than {PEAK_TOLERANCE_BYTES / GiB:.0f} GiB):")
    for s in report.scores:
        print(row(s, s.strict_ok, s.strict_why))
    print(f"strict: {report.strict_passed}/{len(report.scores)}")
    return code


# ---------------------------------------------------------------------------------------------


def request_of(args: argparse.Namespace, catalog: Any) -> Any:
    from club3090.fit.estimate import PriceSettings
    from club3090.pipeline.kv_calc import PriceRequest

    spec = getattr(args, "speculative_config", None)
    return PriceRequest(model=args.model, profile=args.profile, gpus=gpu_set(args, catalog),
                        llamacpp=_llamacpp.flags_of(args), overrides=PriceSettings(
        shape=shape_request(args), max_num_batched_tokens=args.max_num_batched_tokens,
        block_size=args.block_size, dtype=args.dtype,
        num_speculative_tokens=spec["num_speculative_tokens"] if spec else args.num_speculative_tokens,
        speculative_method=spec["method"] if spec else None,
        enforce_eager=args.enforce_eager, enable_prefix_caching=args.enable_prefix_caching,
        weights_gib=args.weights_gib,
        solve_max_ctx=args.solve_max_ctx), drafter=spec["model"] if spec else None)


def run(args: argparse.Namespace, provider: Any) -> int:
    from club3090.cli.exit_codes import exit_code
    from club3090.cli.model_json import stop_to_json
    from club3090.errors import UsageError
    from club3090.fit.estimate import Estimate, NoFit
    from club3090.outcome import Stop
    from club3090.pipeline.kv_calc import price, price_outcome

    if args.calibration:
        return run_calibration(args, provider.catalog(), provider.receipts())
    catalog = provider.catalog()
    html = getattr(args, "html", None)
    if html is not None:
        from club3090.edges.files import check_output_path

        check_output_path(html, force=args.force, flag="--html")
    result = price(request_of(args, catalog), provider)
    if html is not None and isinstance(result, Estimate):
        write_html(html, result, force=args.force)
    elif html is not None and not isinstance(result, (Stop, NoFit)):
        raise UsageError("--html draws vLLM's memory split; llama.cpp pricing has no page yet (drop --html)")
    if isinstance(result, Stop):        # a stop (the resolver's, or no GPUs to price): a verdict
        payload = stop_to_json(result)
        if args.json:
            print(safe(json.dumps(payload, ensure_ascii=False)))
        else:
            print(safe(f"[kv-calc] stratum {payload['stratum']} stop: {payload['reason']} ({payload['detail']})"),
                  file=sys.stderr)
            if payload["message"]:
                print(safe(f"[kv-calc] {payload['message']}"), file=sys.stderr)
    elif isinstance(result, NoFit):     # a verdict about the model, not a tool failure
        if args.json:
            print(json.dumps(result.to_json()))
        else:
            print(safe(f"no-fit-model: {result.model}: {result.error}"), file=sys.stderr)
    elif not isinstance(result, Estimate):      # another engine's answer
        _llamacpp.render(result, as_json=args.json)
    elif args.json:
        print(json.dumps(result.to_json(), indent=1))
    else:
        render_human(result)
    return exit_code(price_outcome(result))
