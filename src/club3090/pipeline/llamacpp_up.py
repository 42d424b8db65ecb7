"""``club3090 up`` for the llama.cpp family: a GGUF repo or a llama.cpp-family profile -> a running,
verified ``llama-server`` (docs/DESIGN.md, "The llama.cpp family").

source -> the GGUF (the profile's weight variant, or the repo's quant: ``--quant``, else the largest
that fits with every layer on the GPUs) -> its headers by ranged reads -> llama.cpp's memory model
on the rig (``--ctx-size`` / ``--cache-type-k/-v`` or the largest context that fits) -> launcher
preflight (nothing written before it passes) -> the launch (the profile's shipped compose replayed,
or a derived ``llama-server`` service) -> the bundle -> the GGUF into the HF cache (sha256-verified)
-> start, wait for ``/v1/models``, smoke + verify, the state file (``up``'s own steps).
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from club3090.edges import launchers
from club3090.errors import InputError, UsageError
from club3090.outcome import Outcome
from club3090.pipeline import bundle as bundle_mod

if TYPE_CHECKING:
    from club3090.catalog.model import Catalog, Profile
    from club3090.edges.gguf_remote import QuantFile
    from club3090.edges.hub import RepoInfo
    from club3090.pipeline.provider import Provider
    from club3090.pipeline.up import UpRequest, UpResult

__all__ = ["llamacpp_profile", "up_llamacpp"]

WONT_FIT = "wont-fit"


def llamacpp_profile(catalog: "Catalog", req: "UpRequest") -> "Profile | None":
    """The llama.cpp-family profile ``up`` serves: ``--profile-like KEY``, or SOURCE naming one."""
    from club3090.edges.gguf_source import llamacpp_profile as family_profile

    found: Profile | None = family_profile(catalog, req.profile_like) or family_profile(catalog, req.source)
    return found


def _pick_quant(quants: list["QuantFile"], quant: str | None, repo_id: str) -> list["QuantFile"]:
    """The candidates in the order ``up`` tries them: the one asked for, else the largest first."""
    if not quants:
        raise UsageError(f"{repo_id}: no GGUF model files in the repository")
    if quant is not None:
        hits = [q for q in quants if q.label.lower() == quant.lower()]
        if len(hits) != 1:
            raise UsageError(f"{repo_id}: no single quant {quant!r}; available: "
                             + ", ".join(q.label for q in quants))
        return hits
    return sorted(quants, key=lambda q: -(q.size_bytes or 0))


def _gpu_bytes(req: "UpRequest", provider: "Provider", catalog: "Catalog",
               profile: "Profile | None") -> tuple[list[int], str]:
    from club3090.pipeline.stages import gpu_set
    from club3090.rig.hardware import resolve_hardware

    spec = req.gpus
    given = gpu_set(spec, catalog)
    detected = provider.detect_gpus() if given is None else None
    count = given.count if given is not None else len(detected.gpus) if detected is not None else 0
    hw = resolve_hardware(tp=max(count, 1), gpu_set=given, detected=detected)
    if not hw.memory_bytes:
        raise UsageError("no GPU detected and no --gpus given: name your GPUs, e.g. --gpus 1x3090")
    label = spec or f"{len(hw.memory_bytes)}x {', '.join(sorted(set(hw.names)))} (detected)"
    return list(hw.memory_bytes), label


def up_llamacpp(req: "UpRequest", provider: "Provider", *, catalog: "Catalog",
                profile: "Profile | None", gate_lines: list[str] | None = None) -> "UpResult":
    from club3090.compose import llamacpp as lc
    from club3090.edges.gguf_remote import list_quants, load_remote
    from club3090.edges.hub import HubClient
    from club3090.fit.llamacpp import LlamaCppArgs, cache_types
    from club3090.fit.memory import Unpriceable
    from club3090.pipeline.bundle_start import not_started
    from club3090.pipeline.llamacpp_bundle import container_model_path, plan
    from club3090.pipeline.up import UpResult, fetch_verified

    launcher = provider.launcher(req.launcher)
    if not launcher.starts:
        raise UsageError(f"--launcher {req.launcher}: a llama.cpp launch runs on this machine "
                         f"({' or '.join(launchers.names(multi_node=False))})")
    say = req.progress.say
    directory = Path(req.directory).absolute()
    result = UpResult(Outcome.REFUSED, list(gate_lines or []))
    if provider.settings.offline:
        raise UsageError("`up` for a GGUF reads its headers from the Hub; unset HF_HUB_OFFLINE")

    # what to serve
    repo_id, revision = req.source, None
    files: tuple[str, ...] = ()
    if profile is not None:
        variant = catalog.models[profile.model].weights.get(profile.weights_variant)
        if variant is None or not variant.hf_repos:
            raise UsageError(f"{profile.key}: its weight variant names no Hub repository")
        if req.source in (profile.key, *variant.hf_repos):
            repo_id, files, revision = variant.hf_repos[0], tuple(variant.files), variant.revision
    client = HubClient(provider.settings)
    info: RepoInfo = client.repo_info(repo_id, revision)
    if not info.commit:
        raise InputError(repo_id, "the Hub named no commit for this repo; refusing an unpinned download")
    quants = list_quants(info)
    if files:
        candidates = [q for q in quants if q.files == files] or _pick_quant(quants, files[0], repo_id)
    else:
        candidates = _pick_quant(quants, req.quant, repo_id)

    # the price: llama.cpp's memory model on this rig
    gpu_bytes, rig = _gpu_bytes(req, provider, catalog, profile)
    base = LlamaCppArgs(ctx_size=4096)
    if profile is not None:
        pair = cache_types(profile.kv_format)
        if not isinstance(pair, Unpriceable):
            base = replace(base, cache_type_k=pair[0], cache_type_v=pair[1])
        base = replace(base, parallel=profile.max_num_seqs)
    if req.cache_type_k:
        base = replace(base, cache_type_k=req.cache_type_k)
    if req.cache_type_v:
        base = replace(base, cache_type_v=req.cache_type_v)
    ctx = req.ctx_size or (profile.max_model_len if profile is not None else None)
    chosen, choice, why = None, None, ""
    for quant in candidates:
        model = load_remote(client, info, quant)
        priced = lc.serving_args(model, base, gpu_bytes, ctx_size=ctx)
        if isinstance(priced, Unpriceable):
            why = why or f"{quant.label}: {priced.reason}"
            continue
        if chosen is None or priced.args.n_gpu_layers < 0 <= choice.args.n_gpu_layers:   # type: ignore[union-attr]
            chosen, choice = (quant, model), priced
        if priced.args.n_gpu_layers < 0 and priced.args.n_cpu_moe == 0:
            break
    if chosen is None or choice is None:
        result.lines.append(f"[up] {repo_id} does not fit on {rig} (llama.cpp, estimated): {why}")
        result.lines.append("[up] try a smaller --quant, a smaller --ctx-size, or q8_0/q4_0 cache types "
                            "(--cache-type-k/-v); `club3090 kv-calc " + repo_id + " --quant QUANT` shows the "
                            "breakdown")
        result.state = {"engine": "llama.cpp", "verdict": WONT_FIT, "reason": why}
        return result
    (quant, model), args = chosen, choice.args
    kv_mib = choice.breakdown.kv.total_bytes / 2**20
    result.lines.append(f"[up] {repo_id} {quant.label} ({model.arch}, {model.weights_bytes / 2**30:.2f} GiB) on "
                        f"{rig}, llama.cpp: {choice.note}; KV {kv_mib:,.1f} MiB "
                        f"({args.cache_type_k}/{args.cache_type_v}), estimated")

    # preflight: nothing is written before the launcher is known to work
    pre = launcher.preflight(launchers.llama_server(req.llama_server_bin), starting=not req.no_start)
    server, dialect = (pre.server.argv, pre.server.dialect) if pre.server is not None else (("llama-server",),
                                                                                         "llama-server")
    for note in pre.notes:
        say(f"[up] note: {note}")

    engine = catalog.engines.get(profile.engine) if profile is not None else None
    port = req.port or (profile.port if profile is not None else 8080)
    served = f"{repo_id}:{quant.label}" if profile is None else profile.key
    on_gpus = args.n_gpu_layers < 0 and args.n_cpu_moe == 0
    outcome = lc.replay(profile.key, catalog) if profile is not None and profile.runtime is not None and \
        on_gpus and not req.ctx_size and repo_id in _variant_repos(catalog, profile) else None
    if profile is not None and outcome is None:
        result.lines.append(f"[up] note: a derived llama-server launch at {profile.key}'s shape, not its shipped "
                            "compose" + ("" if profile.runtime is not None else " (the catalog holds no capture of it)"))
    if outcome is not None and not outcome.ok:
        raise UsageError(f"no launch for {profile.key}: {outcome.refusal or ''} {outcome.detail or ''}".strip())  # type: ignore[union-attr]
    if outcome is not None and outcome.launch is not None:
        launch, base_dir = outcome.launch, os.path.dirname(profile.compose_path)  # type: ignore[union-attr]
    else:
        name = (profile.key if profile is not None else repo_id).replace("/", "-").replace(":", "-").lower()
        image = engine.image if engine is not None and engine.image else lc.DEFAULT_IMAGE
        launch = lc.derived_launch(model_path=container_model_path(repo_id, info.commit, quant.files[0]), args=args, alias=served, port=port, image=image,
                                   service_name=f"llamacpp-{name}"[:63], note=choice.note,
                                   gpu_indices=tuple(range(len(gpu_bytes))),
                                   profile=profile.key if profile is not None else "")
        base_dir = ""
    prediction = {"confidence": choice.breakdown.confidence, "note": choice.note, "kv_bytes": choice.breakdown.kv.total_bytes,
                  "ctx_size": args.ctx_size, "n_gpu_layers": args.n_gpu_layers, "n_cpu_moe": args.n_cpu_moe,
                  "devices": [{"name": d.name, "total_bytes": d.total_bytes, "weights_bytes": d.weights_bytes,
                               "kv_bytes": d.kv_bytes, "compute_bytes": d.compute_bytes}
                              for d in choice.breakdown.devices]}
    hub_cache = Path(provider.settings.hub_cache).absolute()
    bundle = plan(launch, directory=directory, repo_id=repo_id, commit=info.commit, model_file=quant.files[0],
                  hub_cache=hub_cache, port=port, served=served, server=server, dialect=dialect,
                  upstream_base=base_dir, prediction=prediction)
    if bundle.unresolved:
        raise UsageError(f"{profile.key if profile else repo_id} also loads {', '.join(bundle.unresolved)} "
                         "(a drafter or projector GGUF); `up` fetches only the served GGUF: use a profile "
                         "without one, or `club3090 compose` and place it yourself")
    payloads: dict[str, bytes] = {}
    for _inside, upstream in bundle.upstream_files.items():
        for name, data in provider.payloads(upstream).items():
            payloads[f"{bundle_mod.FILES}/{name}"] = data
    bundle = replace(bundle, payloads=payloads)
    bundle_mod.write(bundle, provider)
    result.lines.append(f"[up] bundle written to {directory} (compose.yml, .env, serve.sh, launch.json)")
    for note in bundle.container_only:
        result.lines.append(f"[up] note: natively, {note}")

    wanted = [f for f in info.files if f.name in quant.files]
    report = fetch_verified(provider, req.progress, repo_id, info.commit, wanted)
    result.lines.append(f"[up] weights: {report.bytes / 2**30:.2f} GiB in the HF cache"
                        + (", sha256 verified" if report.sha_verified else ""))
    state: dict[str, Any] = {"launcher": req.launcher, "engine": "llama.cpp", "url": f"http://127.0.0.1:{port}",
                             "served_model": bundle.served_model, "repo_id": repo_id, "commit": info.commit,
                             "quant": quant.label, "profile_like": profile.key if profile is not None else None,
                             "argv": list(bundle.native_argv), "skip_tools": req.skip_tools,
                             "container": bundle.container_name, "pid": None, "state": "written",
                             "directory": str(directory), "prediction": prediction,
                             "written_at": provider.now().isoformat(timespec="seconds")}
    result.state = state
    if req.no_start:
        return not_started(directory, state, result, provider)
    from club3090.pipeline.bundle_start import start_bundle

    command = launchers.Preflighted(launchers.ServerCommand(bundle.native_argv[:1]))
    return start_bundle(req, bundle, state, result, launcher, command, provider, receipt=False)


def _variant_repos(catalog: "Catalog", profile: "Profile") -> tuple[str, ...]:
    variant = catalog.models[profile.model].weights.get(profile.weights_variant)
    return tuple(variant.hf_repos) if variant is not None else ()
