"""`club3090 kv-calc MODEL`: vLLM's start-up memory accounting for one model, GPU set and shape.

MODEL is a local folder (config.json + safetensors headers), a config.json path, a curated
profile key or model id from the catalog, or a Hub repo id (through the deriver). Flags override
the profile's settings. ``--calibration`` scores the catalog's curated profiles against the
upstream RTX 3090 anchors (criterion in docs/ACCURACY.md).

Exit codes: 0 fits (clean or constrained), 2 won't fit / cannot be priced, 64 usage.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

GIB = 1 << 30
DEFAULT_GPU = "rtx-3090"
CONTEXT_RESERVE_BYTES = int(0.5 * GIB)     # CUDA context + NCCL/cuBLAS handles outside the budget


def add_parser(sub) -> None:
    p = sub.add_parser("kv-calc", help="predict vLLM's KV cache, verdict and max context for a model",
                       description="Predict vLLM's start-up memory split per GPU: weights, non-torch, "
                                   "activation, CUDA graphs and the KV pool, with the verdict and the "
                                   "largest context that fits.")
    p.add_argument("model", nargs="?", help="local folder, config.json path, profile key, model id, or org/name")
    p.add_argument("--profile", help="curated profile key whose settings to use")
    p.add_argument("--gpus", help="GPU set: 1x3090, 2xrtx-4090, 2x24GiB, MiB:NAME,...")
    p.add_argument("--tp", type=int, help="tensor-parallel size")
    p.add_argument("--pp", type=int, help="pipeline-parallel size")
    p.add_argument("--mem-util", type=float, help="--gpu-memory-utilization (fraction of total memory)")
    p.add_argument("--max-model-len", type=int, help="context length per request")
    p.add_argument("--max-num-seqs", type=int, help="concurrent sequences (sampler, graphs, verdict)")
    p.add_argument("--max-num-batched-tokens", type=int, help="tokens per scheduler step")
    p.add_argument("--block-size", type=int, help="KV block size in tokens")
    p.add_argument("--kv-cache-dtype", help="auto, bf16, fp16, fp32, fp8, fp8_e4m3, fp8_e5m2, int8_per_token_head, "
                                            "fp8_per_token_head, nvfp4, turboquant_3bit_nc, turboquant_k8v4, "
                                            "q8_0, q4_0, q5_0, k8v4")
    p.add_argument("--dtype", help="model dtype (auto, bfloat16, float16, float32)")
    p.add_argument("--weights-gib", type=float, help="weights loaded per GPU rank, as vLLM's 'Model loading took X GiB'")
    p.add_argument("--vllm-version", help="vLLM version whose defaults and logs to follow (default: the "
                                          "profile's engine pin, else the newest known)")
    p.add_argument("--num-speculative-tokens", type=int, help="speculative tokens (MTP/draft)")
    p.add_argument("--enforce-eager", action="store_true", help="no CUDA graphs")
    p.add_argument("--solve-max-ctx", action="store_true", help="answer for the largest context that fits")
    p.add_argument("--calibration", action="store_true", help="score the curated profiles against the anchors")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(run=run)


# ---------------------------------------------------------------------------------------------
# model resolution


@dataclass
class Source:
    label: str
    config: Mapping[str, Any] | None = None
    arch: Any = None
    weights_bytes: int | None = None
    weights_note: str = ""
    profile: Any = None
    model: Any = None
    variant: Any = None
    confidence: str = "estimated-lower-bound"
    extra_weights_bytes: int = 0
    num_spec: int = 0
    notes: list[str] = field(default_factory=list)


def _usage(message: str):
    from club3090.errors import UsageError

    return UsageError(message)


def _folder_weights(folder: Path) -> tuple[int | None, str]:
    from club3090.derive import read_local_header, select_weight_set
    from club3090.fsutil import read_json_capped
    from club3090.outcome import Stop

    names = [p.name for p in folder.iterdir() if p.is_file()]
    if not any(n.endswith(".safetensors") for n in names):
        return None, "no safetensors in the folder"
    chosen = select_weight_set(names, lambda n: read_json_capped(folder / n), where=f"{folder}: ")
    if isinstance(chosen, Stop):
        return None, getattr(chosen, "message", None) or str(getattr(chosen, "detail", "ambiguous weight set"))
    total = 0
    for name in chosen.files:
        total += read_local_header(folder / name).data_bytes
    return total, f"{len(chosen.files)} safetensors header(s)"


def _load_catalog_quiet():
    try:
        from club3090.catalog import load_catalog
    except ImportError:
        return None
    return load_catalog()


def resolve_source(model: str | None, args: argparse.Namespace, settings: Any) -> Source:
    from club3090.fsutil import read_json_capped

    if not model and not args.profile:
        raise _usage("kv-calc needs MODEL or --profile")
    catalog = None
    if args.profile:
        catalog = _load_catalog_quiet()
        if catalog is None or args.profile not in catalog.profiles:
            raise _usage(f"unknown profile {args.profile!r}")
    path = Path(model).expanduser() if model else None
    if path is not None and path.exists():
        if path.is_dir():
            cfg_path = path / "config.json"
            if not cfg_path.is_file():
                raise _usage(f"{path}: no config.json")
            folder = path
        else:
            cfg_path, folder = path, path.parent
        config = read_json_capped(cfg_path)
        if not isinstance(config, Mapping):
            from club3090.errors import InputError

            raise InputError(str(cfg_path), "config.json is not a JSON object")
        src = Source(label=str(path), config=config)
        if args.weights_gib is None:
            weights, note = _folder_weights(folder)
            if weights is None:
                raise _usage(f"{path}: {note}; pass --weights-gib (weights per GPU rank)")
            src.weights_bytes, src.weights_note = weights, note
        if args.profile:
            _attach_profile(src, catalog, catalog.profiles[args.profile])
        return src

    catalog = catalog or _load_catalog_quiet()
    key = model or args.profile
    if catalog is not None:
        profile = catalog.profiles.get(args.profile or "") or catalog.profiles.get(key)
        if profile is not None:
            src = Source(label=profile.key)
            _attach_profile(src, catalog, profile)
            return src
        if key in catalog.models:
            m = catalog.models[key]
            src = Source(label=m.id)
            _attach_model(src, m, m.weights.get(m.default_weight_variant))
            return src
        hit = catalog.find_variant(key)
        if hit is not None:
            src = Source(label=key)
            _attach_model(src, *hit)
            return src
    return _from_deriver(key, settings, catalog)


def _attach_model(src: Source, model: Any, variant: Any) -> None:
    src.model, src.variant = model, variant
    src.config = model.hf_config
    if variant is not None and variant.size_bytes:
        src.weights_bytes = int(variant.size_bytes)
        src.weights_note = f"catalog weight variant {variant.id} ({variant.size_bytes / 1e9:.1f} GB on disk)"


def _attach_profile(src: Source, catalog: Any, profile: Any) -> None:
    src.profile = profile
    model = catalog.models.get(profile.model)
    if model is not None and src.config is None:
        _attach_model(src, model, model.weights.get(profile.weights_variant))
    if profile.drafter:
        from club3090.serving import drafter_terms

        src.num_spec, src.extra_weights_bytes = drafter_terms(catalog.drafters.get(profile.drafter))
    if any(a.profile == profile.key for a in catalog.anchors):
        src.confidence = "exact"


def _from_deriver(key: str, settings: Any, catalog: Any) -> Source:
    try:
        from club3090.derive import derive
    except ImportError:
        raise _usage(f"{key!r} is not a local folder, config.json or curated key; "
                     "Hub sources need the inspect/deriver module") from None
    from club3090.outcome import Stop

    spec = derive(key, settings, catalog)
    if isinstance(spec, Stop):
        raise _usage(f"{key}: {getattr(spec, 'message', None) or spec.reason}")
    src = Source(label=key, arch=spec.arch, weights_bytes=int(spec.weights_bytes),
                 weights_note="safetensors headers (Hub)")
    return src


# ---------------------------------------------------------------------------------------------
# computation


def _gpu_memory(args: argparse.Namespace, src: Source, world: int) -> tuple[list[int], str | None, str]:
    spec = args.gpus
    if spec is None:
        ref = src.profile.reference_gpu if src.profile is not None else DEFAULT_GPU
        spec = f"{world}x{ref}"
    try:
        from club3090.gpus import parse_gpus
    except ImportError:
        parse_gpus = None
    catalog = _load_catalog_quiet() if parse_gpus is not None else None
    if parse_gpus is None or catalog is None:
        raise _usage("--gpus needs the catalog")
    gpus = parse_gpus(spec, catalog)
    if gpus.count < world:
        raise _usage(f"TP {world} needs {world} GPUs; --gpus gives {gpus.count}")
    mems = list(gpus.memory_bytes[:world])
    name = gpus.gpus[0].display_name if gpus.gpus and gpus.gpus[0] is not None else None
    return mems, name, spec


def compute(args: argparse.Namespace, src: Source) -> tuple[Any, dict[str, Any]]:
    from dataclasses import replace

    from club3090.architecture import parse_config
    from club3090.memory import predict
    from club3090.serving import profile_shape

    arch = src.arch if src.arch is not None else parse_config(src.config or {})
    prof = src.profile
    catalog = _load_catalog_quiet() if prof is not None else None
    # the profile's serving shape (drafter included), the CLI flags on top; without a profile,
    # vLLM's defaults plus the flags (a source's own drafter terms, if any, as for a profile)
    shape = profile_shape(
        prof, catalog, drafter=True,
        tp=args.tp or None, pp=args.pp or None, mem_util=args.mem_util,
        max_model_len=args.max_model_len or None, max_num_seqs=args.max_num_seqs or None,
        max_num_batched_tokens=args.max_num_batched_tokens or None, block_size=args.block_size,
        kv_cache_dtype=args.kv_cache_dtype or None, enforce_eager=True if args.enforce_eager else None,
        vllm_version=args.vllm_version, dtype=args.dtype,
        num_speculative_tokens=args.num_speculative_tokens if args.num_speculative_tokens is not None
        else (None if prof is not None else src.num_spec),
        extra_weights_bytes=None if prof is not None else src.extra_weights_bytes)
    tp, pp = shape.tp, shape.pp
    mems, device, gpu_spec = _gpu_memory(args, src, tp * pp)
    shape = replace(shape, device_name=device)
    per_rank = int(args.weights_gib * GIB) if args.weights_gib is not None else None
    if per_rank is None and src.weights_bytes is None:
        raise _usage(f"{src.label}: weights unknown; pass --weights-gib (weights per GPU rank)")
    kwargs = dict(weights_bytes=int(src.weights_bytes or 0), gpu_memory_bytes=mems,
                  weights_bytes_per_rank=per_rank, confidence=src.confidence)
    result = predict(arch, shape=shape, **kwargs)
    if args.solve_max_ctx and result.max_model_len_fit > 0 and result.max_model_len_fit != result.max_model_len:
        result = predict(arch, shape=replace(shape, max_model_len=result.max_model_len_fit), **kwargs)
    context = {"model": src.label, "architecture": arch.architecture, "gpus": gpu_spec, "tp": tp, "pp": pp,
               "weights_source": "--weights-gib (per rank)" if per_rank is not None else src.weights_note,
               "profile": prof.key if prof else None}
    return result, context


# ---------------------------------------------------------------------------------------------
# output


def _gib(value: int) -> str:
    return f"{value / GIB:.2f} GiB"


def render_human(result: Any, context: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(highlight=False)
    s = result.settings
    head = (f"{context['model']} ({context['architecture'] or 'unknown architecture'}) on {context['gpus']}, "
            f"TP {context['tp']} PP {context['pp']}, vLLM {s.vllm_version}")
    console.print(head)
    console.print(f"util {s.mem_util:.2f}  max_model_len {s.max_model_len:,}  max_num_seqs {s.max_num_seqs}  "
                  f"max_num_batched_tokens {s.max_num_batched_tokens:,}  kv {s.kv_cache_dtype} "
                  f"(model {s.model_dtype})  weights: {context['weights_source']}")
    table = Table(title="per GPU (limiting rank)", show_header=True)
    table.add_column("term")
    table.add_column("GiB", justify="right")
    g = result.per_gpu
    rows = [("budget (total x util)", g.budget_bytes), ("weights", g.weights_bytes),
            ("non-torch", g.non_torch_bytes), ("activation peak", g.activation_bytes),
            ("CUDA graphs" + ("" if s.cudagraphs_subtracted else " (outside budget)"), g.cudagraph_bytes),
            ("KV pool", g.kv_pool_bytes)]
    for name, value in rows:
        table.add_row(name, f"{value / GIB:.2f}")
    console.print(table)
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
    console.print(f"verdict: {result.raw_verdict}   confidence: {result.confidence}   "
                  f"error band: ±{_gib(result.error_band_bytes)}")
    for note in result.notes:
        console.print(f"note: {note}")


def _payload(result: Any, context: dict[str, Any]) -> dict[str, Any]:
    out = result.to_json()
    out.update({"ok": True, "model": context["model"], "architecture": context["architecture"],
                "gpus": context["gpus"], "tp": context["tp"], "pp": context["pp"], "profile": context["profile"],
                "weights_source": context["weights_source"]})
    return out


# ---------------------------------------------------------------------------------------------
# calibration against the upstream anchors


UPSTREAM_SETS = (("kvcalc-22of22-historical", 22), ("kvcalc-current-8of8", 8))


@dataclass
class AnchorScore:
    anchor: str
    set: str
    profile: str                # linked profile key, "-" when the anchor has none
    card_bytes: int | None
    predicted_peak_bytes: int | None
    measured_peak_bytes: int | None
    predicted_kv_tokens: int | None
    measured_kv_tokens: int | None
    verdict: str | None
    upstream_ok: bool           # upstream's criterion: not wont-fit, predicted footprint fits the card
    upstream_why: str
    strict_ok: bool             # ours: also KV tokens within tolerance and footprint not under-stated
    strict_why: str

    @property
    def passed(self) -> bool:
        return self.strict_ok


PEAK_TOLERANCE_BYTES = int(1.0 * GIB)     # strict: predicted footprint may under-state a measured peak by this
KV_TOKEN_TOLERANCE = 0.15                 # strict: |predicted - measured| / measured KV tokens


def anchor_set(anchor: Any) -> str:
    """The anchor's source set, as the catalog converter encodes it in the id (profile:set[:n])."""
    parts = str(anchor.id).split(":")
    return parts[1] if len(parts) > 1 else ""


@dataclass
class AnchorInputs:
    """What one anchor is priced with: its own recorded inputs, the linked profile for the rest."""
    profile: Any
    model: Any
    weights_bytes: int | None
    weights_note: str
    engine: Any
    gpu: Any
    world: int
    shape: Any


def anchor_inputs(anchor: Any, catalog: Any) -> AnchorInputs:
    """The serving shape, weights and card an anchor's measurement ran with.

    Recorded on the anchor (not None) wins: model, weights variant (else the recorded checkpoint
    size), TP, util, context, KV format, sequences, drafter (``none`` = without one), engine and
    release version, GPU. The linked profile (if any) supplies only the rest, chiefly the shipped
    compose's ``--max-num-batched-tokens`` and PP; without a profile those are vLLM's defaults.
    """
    from club3090.catalog.model import NO_DRAFTER
    from club3090.serving import drafter_terms, profile_shape

    profile = catalog.profiles.get(anchor.profile) if anchor.profile else None
    model = catalog.models.get(anchor.model or (profile.model if profile is not None else ""))
    weights, note = anchor.weights_bytes, "recorded checkpoint size"
    if weights is None and model is not None:
        vid = anchor.weights_variant or (profile.weights_variant if profile is not None else None)
        variant = model.weights.get(vid) if vid else None
        weights = int(variant.size_bytes) if variant is not None and variant.size_bytes else None
        note = f"catalog weight variant {vid}"
    engine = catalog.engines.get(anchor.engine or (profile.engine if profile is not None else ""))
    gpu = catalog.gpu(anchor.gpu) or (catalog.gpu(profile.reference_gpu) if profile is not None else None)
    pp = profile.pp if profile is not None else 1
    if anchor.tp:
        tp, pp = anchor.tp, max(1, anchor.gpu_count // anchor.tp)
    else:
        tp = max(1, (anchor.gpu_count or profile.tp * pp) // max(pp, 1))
    overrides: dict[str, Any] = {}
    if anchor.drafter is not None:       # recorded: its own drafter (or none), not the profile's
        drafter = None if anchor.drafter == NO_DRAFTER else catalog.drafters.get(anchor.drafter)
        overrides["num_speculative_tokens"], overrides["extra_weights_bytes"] = drafter_terms(drafter)
    version = anchor.vllm_version or (engine.vllm_version if engine is not None else None)
    shape = profile_shape(
        profile, catalog, drafter=anchor.drafter is None, tp=tp, pp=pp, mem_util=anchor.mem_util,
        max_model_len=anchor.ctx, max_num_seqs=anchor.max_num_seqs, kv_cache_dtype=anchor.kv_format,
        vllm_version=version, device_name=gpu.display_name if gpu is not None else None, **overrides)
    return AnchorInputs(profile, model, weights, note, engine, gpu, tp * pp, shape)


def score_anchors(catalog: Any) -> list[AnchorScore]:
    from club3090.architecture import parse_config
    from club3090.memory import UnpriceableModel, predict

    scores: list[AnchorScore] = []
    for anchor in catalog.anchors:
        inputs = anchor_inputs(anchor, catalog)
        if inputs.engine is None or inputs.engine.type != "vllm":
            continue
        kind = anchor_set(anchor)
        card = int(inputs.gpu.memory_bytes) if inputs.gpu is not None else None
        label = anchor.profile or "-"

        def failed(why: str) -> AnchorScore:
            return AnchorScore(anchor.id, kind, label, card, None, anchor.measured_peak_bytes, None,
                               anchor.measured_kv_tokens, None, False, why, False, why)

        if inputs.model is None or not inputs.weights_bytes or inputs.gpu is None:
            scores.append(failed("model/weights/GPU missing in catalog"))
            continue
        try:
            result = predict(parse_config(inputs.model.hf_config), weights_bytes=int(inputs.weights_bytes),
                             gpu_memory_bytes=[inputs.gpu.memory_bytes] * inputs.world, shape=inputs.shape,
                             confidence="exact")
        except UnpriceableModel as exc:
            scores.append(failed(f"unpriceable: {exc}"))
            continue
        peak = result.per_gpu.budget_bytes + result.cudagraph_outside_budget_bytes + CONTEXT_RESERVE_BYTES
        measured_peak = anchor.measured_peak_bytes
        up: list[str] = []
        if result.raw_verdict == "wont-fit":
            up.append("predicted wont-fit but the run booted")
        if peak > card:
            up.append("predicted footprint exceeds the card")
        strict = list(up)
        if measured_peak is not None and peak < measured_peak - PEAK_TOLERANCE_BYTES:
            strict.append(f"footprint under-stated by {(measured_peak - peak) / GIB:.2f} GiB")
        if anchor.measured_kv_tokens:
            err = (result.kv_cache_tokens - anchor.measured_kv_tokens) / anchor.measured_kv_tokens
            if abs(err) > KV_TOKEN_TOLERANCE:
                strict.append(f"KV tokens off by {err:+.0%}")
        scores.append(AnchorScore(anchor.id, kind, label, card, peak, measured_peak,
                                  result.kv_cache_tokens, anchor.measured_kv_tokens, result.raw_verdict,
                                  not up, "; ".join(up) or "ok", not strict, "; ".join(strict) or "ok"))
    return scores


def upstream_tally(scores: list[AnchorScore]) -> list[tuple[str, int, int, int]]:
    """(set, passed, scored, upstream's row count) for upstream's two kv-calc sets."""
    out = []
    for name, expected in UPSTREAM_SETS:
        rows = [s for s in scores if s.set == name]
        out.append((name, sum(1 for s in rows if s.upstream_ok), len(rows), expected))
    return out


def run_calibration(args: argparse.Namespace) -> int:
    catalog = _load_catalog_quiet()
    if catalog is None:
        raise _usage("--calibration needs the catalog")
    scores = score_anchors(catalog)
    tally = upstream_tally(scores)
    # exit 0 when every upstream row passes (a row the catalog cannot price is counted in the note,
    # not scored; since anchors carry their own inputs every upstream row is scored)
    upstream_ok = all(passed == scored > 0 for _name, passed, scored, _expected in tally)
    strict_passed = sum(1 for s in scores if s.strict_ok)
    if args.json:
        print(json.dumps({
            "ok": True,
            "upstream": {name: {"passed": passed, "total": scored, "expected_rows": expected}
                         for name, passed, scored, expected in tally},
            "upstream_all_pass": upstream_ok,
            "strict": {"passed": strict_passed, "total": len(scores),
                       "kv_token_tolerance": KV_TOKEN_TOLERANCE, "peak_tolerance_bytes": PEAK_TOLERANCE_BYTES},
            "anchors": [s.__dict__ for s in scores]}, indent=1))
        return 0 if upstream_ok else 2

    def row(s: AnchorScore, ok: bool, why: str) -> str:
        peak = f"{s.predicted_peak_bytes / GIB:6.2f}" if s.predicted_peak_bytes else "     -"
        meas = f"{s.measured_peak_bytes / GIB:6.2f}" if s.measured_peak_bytes else "     -"
        card = f"{s.card_bytes / GIB:5.2f}" if s.card_bytes else "    -"
        toks = f"{s.predicted_kv_tokens:>9,}" if s.predicted_kv_tokens is not None else "        -"
        mtok = f"{s.measured_kv_tokens:>9,}" if s.measured_kv_tokens else "        -"
        return (f"{'PASS' if ok else 'FAIL'}  {s.anchor[:58]:58s} peak {peak}/{meas} of {card} GiB  "
                f"KV {toks}/{mtok}  {s.verdict or '-':16s} {why}")

    print("Upstream criterion (club-3090 kv-calc --calibration): verdict not wont-fit and the predicted")
    print("per-card footprint (budget + CUDA graphs outside it + 0.5 GiB context) fits the card.")
    for name, _passed, _scored, _expected in tally:
        for s in scores:
            if s.set == name:
                print(row(s, s.upstream_ok, s.upstream_why))
    for name, passed, scored, expected in tally:
        note = "" if scored == expected else \
            f"  ({expected - scored} of upstream's {expected} rows not scored: not in the catalog's anchors)"
        print(f"{name}: {passed}/{scored}{note}")
    print()
    print(f"Stricter club3090 report (every anchor; also KV tokens within {KV_TOKEN_TOLERANCE:.0%} of the "
          f"measured pool and the footprint not under-stated by more than {PEAK_TOLERANCE_BYTES / GIB:.0f} GiB):")
    for s in scores:
        print(row(s, s.strict_ok, s.strict_why))
    print(f"strict: {strict_passed}/{len(scores)}")
    return 0 if upstream_ok else 2


# ---------------------------------------------------------------------------------------------


def run(args: argparse.Namespace, settings: Any) -> int:
    from club3090.memory import UnpriceableModel

    if args.calibration:
        return run_calibration(args)
    src = resolve_source(args.model, args, settings)
    try:
        result, context = compute(args, src)
    except UnpriceableModel as exc:
        message = f"no-fit-model: {src.label}: {exc}"
        if args.json:
            print(json.dumps({"ok": False, "reason": "no-fit-model", "error": str(exc), "model": src.label}))
        else:
            print(message, file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(_payload(result, context), indent=1))
    else:
        render_human(result, context)
    return 2 if result.raw_verdict == "wont-fit" else 0
