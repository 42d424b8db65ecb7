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
import re
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


def _innermost_default(token: str) -> str | None:
    """'${A:-${B:-4096}}' -> '4096'; a literal -> itself; an unset variable -> None."""
    match = None
    for match in re.finditer(r":-([^${}]*)\}", token):
        pass
    if match is not None:
        return match.group(1)
    return None if "${" in token else token


def shipped_flag(profile: Any, flag: str) -> str | None:
    """The value a profile's shipped compose passes for ``flag`` (its ${VAR:-default} resolved), if any."""
    runtime = getattr(profile, "runtime", None)
    service = getattr(runtime, "service", None) or {}
    command = service.get("command") if isinstance(service, Mapping) else None
    if not isinstance(command, (list, tuple)):
        return None
    args = [str(a) for a in command]
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            return _innermost_default(args[i + 1])
        if arg.startswith(flag + "="):
            return _innermost_default(arg.split("=", 1)[1])
    return None


def profile_batched_tokens(profile: Any) -> int | None:
    """--max-num-batched-tokens of the shipped compose (it sizes the activation peak and the tokens a
    sliding-window layer holds in flight); None when the profile does not record it (vLLM default)."""
    value = shipped_flag(profile, "--max-num-batched-tokens") if profile is not None else None
    try:
        return int(value) if value else None
    except ValueError:
        return None


def drafter_terms(drafter: Any) -> tuple[int, int]:
    """(speculative tokens, drafter weight bytes) a profile's drafter adds.

    Drafter KV: built-in MTP heads add their layers through the config (``num_nextn_predict_layers``).
    The Gemma 4 external MTP "assistant" (``mtp_assistant``) has no k/v projections: all its layers
    are KV-sharing layers (num_kv_shared_layers == num_hidden_layers) that read the target's cache, so
    it allocates no KV of its own; only its weights count (VLLM_MEMORY.md §5.9, docs/ACCURACY.md).
    """
    if drafter is None:
        return 0, 0
    spec = int(drafter.n_default or 0) if drafter.method in ("mtp", "mtp_assistant", "dflash", "eagle3") else 0
    return spec, int(drafter.vram_footprint_bytes or 0)


def _attach_profile(src: Source, catalog: Any, profile: Any) -> None:
    src.profile = profile
    model = catalog.models.get(profile.model)
    if model is not None and src.config is None:
        _attach_model(src, model, model.weights.get(profile.weights_variant))
    if profile.drafter:
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
    from club3090.architecture import parse_config
    from club3090.memory import ServeShape, predict

    arch = src.arch if src.arch is not None else parse_config(src.config or {})
    prof = src.profile
    tp = args.tp or (prof.tp if prof else 1)
    pp = args.pp or (prof.pp if prof else 1)
    mems, device, gpu_spec = _gpu_memory(args, src, tp * pp)
    version = args.vllm_version
    if version is None and prof is not None:
        catalog = _load_catalog_quiet()
        engine = catalog.engines.get(prof.engine) if catalog is not None else None
        version = engine.vllm_version if engine is not None else None
    kv = args.kv_cache_dtype or (prof.kv_format if prof else "auto")
    shape = ServeShape(
        tp=tp, pp=pp,
        mem_util=args.mem_util if args.mem_util is not None else (prof.mem_util if prof else None),
        max_model_len=args.max_model_len or (prof.max_ctx if prof else None),
        max_num_seqs=args.max_num_seqs or (prof.max_num_seqs if prof else None),
        max_num_batched_tokens=args.max_num_batched_tokens or profile_batched_tokens(prof),
        block_size=args.block_size, kv_cache_dtype=kv, enforce_eager=bool(args.enforce_eager),
        vllm_version=version,
        num_speculative_tokens=args.num_speculative_tokens if args.num_speculative_tokens is not None else src.num_spec,
        extra_weights_bytes=src.extra_weights_bytes, dtype=args.dtype, device_name=device)
    per_rank = int(args.weights_gib * GIB) if args.weights_gib is not None else None
    if per_rank is None and src.weights_bytes is None:
        raise _usage(f"{src.label}: weights unknown; pass --weights-gib (weights per GPU rank)")
    kwargs = dict(weights_bytes=int(src.weights_bytes or 0), gpu_memory_bytes=mems,
                  weights_bytes_per_rank=per_rank, confidence=src.confidence)
    result = predict(arch, shape=shape, **kwargs)
    if args.solve_max_ctx and result.max_model_len_fit > 0 and result.max_model_len_fit != result.max_model_len:
        from dataclasses import replace

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
    profile: str
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


def score_anchors(catalog: Any) -> list[AnchorScore]:
    from club3090.architecture import parse_config
    from club3090.memory import ServeShape, UnpriceableModel, predict

    scores: list[AnchorScore] = []
    for anchor in catalog.anchors:
        profile = catalog.profiles.get(anchor.profile)
        engine = catalog.engines.get(profile.engine) if profile else None
        if profile is None or engine is None or engine.type != "vllm":
            continue
        kind = anchor_set(anchor)
        model = catalog.models.get(profile.model)
        variant = model.weights.get(profile.weights_variant) if model else None
        gpu = catalog.gpu(anchor.gpu) or catalog.gpu(profile.reference_gpu)
        card = int(gpu.memory_bytes) if gpu is not None else None

        def failed(why: str) -> AnchorScore:
            return AnchorScore(anchor.id, kind, profile.key, card, None, anchor.measured_peak_bytes, None,
                               anchor.measured_kv_tokens, None, False, why, False, why)

        if model is None or variant is None or not variant.size_bytes or gpu is None:
            scores.append(failed("model/weights/GPU missing in catalog"))
            continue
        world = anchor.gpu_count or profile.tp * profile.pp
        tp = max(1, world // max(profile.pp, 1))
        drafter = catalog.drafters.get(profile.drafter) if profile.drafter else None
        spec_tokens, drafter_bytes = drafter_terms(drafter)
        shape = ServeShape(
            tp=tp, pp=profile.pp, mem_util=anchor.mem_util or profile.mem_util,
            max_model_len=anchor.ctx or profile.max_ctx, max_num_seqs=profile.max_num_seqs,
            max_num_batched_tokens=profile_batched_tokens(profile),
            kv_cache_dtype=anchor.kv_format or profile.kv_format, vllm_version=engine.vllm_version,
            num_speculative_tokens=spec_tokens, extra_weights_bytes=drafter_bytes,
            device_name=gpu.display_name)
        try:
            result = predict(parse_config(model.hf_config), weights_bytes=int(variant.size_bytes),
                             gpu_memory_bytes=[gpu.memory_bytes] * world, shape=shape, confidence="exact")
        except UnpriceableModel as exc:
            scores.append(failed(f"unpriceable: {exc}"))
            continue
        peak = result.per_gpu.budget_bytes + result.cudagraph_outside_budget_bytes + CONTEXT_RESERVE_BYTES
        measured_peak = anchor.measured_peak_bytes
        up: list[str] = []
        if result.raw_verdict == "wont-fit":
            up.append("predicted wont-fit but the profile booted")
        if peak > card:
            up.append("predicted footprint exceeds the card")
        strict = list(up)
        if measured_peak is not None and peak < measured_peak - PEAK_TOLERANCE_BYTES:
            strict.append(f"footprint under-stated by {(measured_peak - peak) / GIB:.2f} GiB")
        if anchor.measured_kv_tokens:
            err = (result.kv_cache_tokens - anchor.measured_kv_tokens) / anchor.measured_kv_tokens
            if abs(err) > KV_TOKEN_TOLERANCE:
                strict.append(f"KV tokens off by {err:+.0%}")
        scores.append(AnchorScore(anchor.id, kind, profile.key, card, peak, measured_peak,
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
    # exit 0 when every upstream row the catalog can score passes (rows whose profile, weights or drafter
    # the catalog lacks are counted in the note, not scored; docs/ACCURACY.md lists them)
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
            f"  ({expected - scored} of upstream's {expected} rows not scored: no catalog profile for them)"
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
