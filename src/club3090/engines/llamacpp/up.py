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
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from club3090.compose.llamacpp import ENGINE_TYPE
from club3090.edges import launchers
from club3090.errors import InputError, UsageError
from club3090.outcome import Outcome
from club3090.pipeline import bundle as bundle_mod
from club3090.pipeline import up_facts as facts

if TYPE_CHECKING:
    from club3090.catalog.model import Catalog, Profile
    from club3090.compose.llamacpp import ServingChoice
    from club3090.edges.gguf_remote import QuantFile
    from club3090.edges.hub import RepoInfo
    from club3090.fit.llamacpp import LlamaCppArgs
    from club3090.model.gguf_model import GgufModel
    from club3090.pipeline.provider import Provider
    from club3090.pipeline.up import UpRequest
    from club3090.pipeline.up_facts import FactLog, UpResult

__all__ = ["LlamaPlan", "NoLlamaPlan", "launch_llamacpp", "plan_llamacpp", "up_llamacpp"]

WONT_FIT = "wont-fit"
DISPLAY = "llama.cpp"


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
    from club3090.rig.hardware import resolve_hardware

    given = req.gpus
    detected = provider.detect_gpus() if given is None else None
    count = given.count if given is not None else len(detected.gpus) if detected is not None else 0
    hw = resolve_hardware(tp=max(count, 1), gpu_set=given, detected=detected)
    if not hw.memory_bytes:
        raise UsageError("no GPU detected and no --gpus given: name your GPUs, e.g. --gpus 1x3090")
    label = given.spec if given is not None else f"{len(hw.memory_bytes)}x {', '.join(sorted(set(hw.names)))} (detected)"
    return list(hw.memory_bytes), label


@dataclass(frozen=True)
class LlamaPlan:
    """What ``up`` serves and how it was priced: the repo at its commit, the quant, its facts, the
    llama.cpp flags that fit (``choice``) and the rig they were priced on."""

    repo_id: str
    commit: str                      # the pinned commit every download and launch uses
    info: "RepoInfo"
    quant: "QuantFile"
    model: "GgufModel"
    choice: "ServingChoice"
    gpu_bytes: tuple[int, ...]
    rig: str

    def fact(self) -> facts.EnginePlanned:
        args, model = self.choice.args, self.model
        return facts.EnginePlanned(DISPLAY, self.repo_id, self.quant.label, model.arch, model.weights_bytes, self.rig,
                                   self.choice.note, self.choice.breakdown.kv.total_bytes,
                                   (args.cache_type_k, args.cache_type_v))


@dataclass(frozen=True)
class NoLlamaPlan:
    """No quant of the repo fits the rig, with llama.cpp's reason for the first one tried."""

    repo_id: str
    rig: str
    why: str


def up_llamacpp(req: "UpRequest", provider: "Provider", *, catalog: "Catalog",
                profile: "Profile | None") -> "UpResult":
    """``up`` for a GGUF: the plan (what to serve, priced on the rig), then the launch."""
    if not provider.launcher(req.launcher).starts:
        raise UsageError(f"--launcher {req.launcher}: a llama.cpp launch runs on this machine "
                         f"({' or '.join(launchers.names(multi_node=False))})")
    from club3090.gate.cliffs import known_cliffs

    log = req.progress.log()
    cliffs = known_cliffs(catalog, profile=profile) if profile is not None else ()
    for cliff in cliffs:             # known cliffs first
        log.add(cliff)
    if provider.settings.offline:
        raise UsageError("`up` for a GGUF reads its headers from the Hub; unset HF_HUB_OFFLINE")
    planned = plan_llamacpp(req, provider, catalog, profile)
    if isinstance(planned, NoLlamaPlan):
        log.add(facts.EngineNoFit(DISPLAY, planned.repo_id, planned.rig, planned.why))
        return log.result(Outcome.REFUSED, {"engine": ENGINE_TYPE, "verdict": WONT_FIT, "reason": planned.why})
    log.add(planned.fact())
    return launch_llamacpp(planned, req, provider, catalog=catalog, profile=profile, log=log)


def _source(req: "UpRequest", catalog: "Catalog", profile: "Profile | None",
            ) -> tuple[str, str | None, tuple[str, ...]]:
    """(repo, revision, files): the profile's weight variant when SOURCE names it (or its model), else SOURCE."""
    if profile is not None:
        variant = catalog.models[profile.model].weights.get(profile.weights_variant)
        if variant is None or not variant.hf_repos:
            raise UsageError(f"{profile.key}: its weight variant names no Hub repository")
        if req.source in (profile.key, profile.model, *variant.hf_repos):   # the model id: routing chose it
            return variant.hf_repos[0], variant.revision, tuple(variant.files)
    return req.source, None, ()


def _base_args(req: "UpRequest", profile: "Profile | None") -> "LlamaCppArgs":
    """The profile's cache types and slots, then ``--cache-type-k/-v`` as given."""
    from club3090.fit.llamacpp import LlamaCppArgs, cache_types
    from club3090.fit.memory import Unpriceable

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
    return base


def plan_llamacpp(req: "UpRequest", provider: "Provider", catalog: "Catalog",
                  profile: "Profile | None") -> LlamaPlan | NoLlamaPlan:
    """What to serve (the repo, its commit, the quant) priced with llama.cpp's memory model on the
    rig: the first candidate quant with every layer on the GPUs, else the one that offloads least."""
    from club3090.compose import llamacpp as lc
    from club3090.edges.gguf_remote import list_quants, load_remote, ranged_client
    from club3090.fit.memory import Unpriceable

    repo_id, revision, files = _source(req, catalog, profile)
    client = ranged_client(provider.hub, provider.settings)
    info: RepoInfo = client.repo_info(repo_id, revision)
    if not info.commit:
        raise InputError(repo_id, "the Hub named no commit for this repo; refusing an unpinned download")
    quants = list_quants(info)
    if files:
        candidates = [q for q in quants if q.files == files] or _pick_quant(quants, files[0], repo_id)
    else:
        candidates = _pick_quant(quants, req.quant, repo_id)
    gpu_bytes, rig = _gpu_bytes(req, provider, catalog, profile)
    base = _base_args(req, profile)
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
        return NoLlamaPlan(repo_id, rig, why)
    return LlamaPlan(repo_id=repo_id, commit=info.commit, info=info, quant=chosen[0], model=chosen[1], choice=choice,
                     gpu_bytes=tuple(gpu_bytes), rig=rig)


def _preflight(req: "UpRequest", launcher: Any) -> tuple[tuple[str, ...], str]:
    """The launcher works before anything is written: (the server argv, its flag dialect)."""
    pre = launcher.preflight(launchers.llama_server(req.llama_server_bin), starting=not req.no_start)
    for note in pre.notes:
        req.progress.say(f"[up] note: {note}")
    if pre.server is not None:
        return pre.server.argv, pre.server.dialect
    return ("llama-server",), "llama-server"


def _launch(planned: LlamaPlan, req: "UpRequest", catalog: "Catalog", profile: "Profile | None",
            log: "FactLog", port: int, served: str) -> tuple[Any, str]:
    """(the launch description, the upstream folder its mounts are relative to): the profile's
    shipped compose replayed when it serves this file as shipped, else a derived ``llama-server``."""
    from club3090.compose import llamacpp as lc
    from club3090.engines.llamacpp.bundle import container_model_path

    args, repo_id = planned.choice.args, planned.repo_id
    on_gpus = args.n_gpu_layers < 0 and args.n_cpu_moe == 0
    outcome = lc.replay(profile.key, catalog) if profile is not None and profile.runtime is not None and \
        on_gpus and not req.ctx_size and repo_id in _variant_repos(catalog, profile) else None
    if profile is not None and outcome is None:
        log.add(facts.DerivedLaunch(profile.key, profile.runtime is not None))
    if outcome is not None and not outcome.ok:
        raise UsageError(f"no launch for {profile.key}: {outcome.refusal or ''} {outcome.detail or ''}".strip())  # type: ignore[union-attr]
    if outcome is not None and outcome.launch is not None:
        return outcome.launch, os.path.dirname(profile.compose_path)  # type: ignore[union-attr]
    engine = catalog.engines.get(profile.engine) if profile is not None else None
    name = (profile.key if profile is not None else repo_id).replace("/", "-").replace(":", "-").lower()
    image = engine.image if engine is not None and engine.image else lc.DEFAULT_IMAGE
    launch = lc.derived_launch(model_path=container_model_path(repo_id, planned.commit, planned.quant.files[0]),
                               args=args, alias=served, port=port, image=image,
                               service_name=f"llamacpp-{name}"[:63], note=planned.choice.note,
                               gpu_indices=tuple(range(len(planned.gpu_bytes))),
                               profile=profile.key if profile is not None else "")
    return launch, ""


def _prediction(planned: LlamaPlan) -> dict[str, Any]:
    choice, args = planned.choice, planned.choice.args
    return {"confidence": choice.breakdown.confidence, "note": choice.note, "kv_bytes": choice.breakdown.kv.total_bytes,
            "ctx_size": args.ctx_size, "n_gpu_layers": args.n_gpu_layers, "n_cpu_moe": args.n_cpu_moe,
            "devices": [{"name": d.name, "total_bytes": d.total_bytes, "weights_bytes": d.weights_bytes,
                         "kv_bytes": d.kv_bytes, "compute_bytes": d.compute_bytes}
                        for d in choice.breakdown.devices]}


def _write_bundle(bundle: Any, provider: "Provider", what: str) -> Any:
    """The bundle with its mounted upstream files, written atomically into DIR (through the Provider)."""
    if bundle.unresolved:
        raise UsageError(f"{what} also loads {', '.join(bundle.unresolved)} "
                         "(a drafter or projector GGUF); `up` fetches only the served GGUF: use a profile "
                         "without one, or `club3090 compose` and place it yourself")
    payloads: dict[str, bytes] = {}
    for _inside, upstream in bundle.upstream_files.items():
        for name, data in provider.payloads(upstream).items():
            payloads[f"{bundle_mod.FILES}/{name}"] = data
    bundle = replace(bundle, payloads=payloads)
    bundle_mod.write(bundle, provider)
    return bundle


def launch_llamacpp(planned: LlamaPlan, req: "UpRequest", provider: "Provider", *,
                    catalog: "Catalog", profile: "Profile | None", log: "FactLog") -> "UpResult":
    """The plan launched: launcher preflight (nothing written before it passes) -> the launch
    description -> the bundle -> the weights -> start, readiness, verify (``up``'s own steps)."""
    from club3090.engines.llamacpp.bundle import plan
    from club3090.pipeline.bundle_start import not_started, start_bundle
    from club3090.pipeline.up import fetch_verified

    launcher = provider.launcher(req.launcher)
    directory = Path(req.directory).absolute()
    server, dialect = _preflight(req, launcher)
    port = req.port or (profile.port if profile is not None else 8080)
    served = f"{planned.repo_id}:{planned.quant.label}" if profile is None else profile.key
    launch, base_dir = _launch(planned, req, catalog, profile, log, port, served)
    prediction = _prediction(planned)
    hub_cache = Path(provider.settings.hub_cache).absolute()
    bundle = plan(launch, directory=directory, repo_id=planned.repo_id, commit=planned.commit,
                  model_file=planned.quant.files[0], hub_cache=hub_cache, port=port, served=served, server=server,
                  dialect=dialect, upstream_base=base_dir, prediction=prediction)
    bundle = _write_bundle(bundle, provider, profile.key if profile else planned.repo_id)
    log.add(facts.BundleWritten(directory, None, tuple(bundle.container_only), "natively,"))
    wanted = [f for f in planned.info.files if f.name in planned.quant.files]
    report = fetch_verified(provider, req.progress, planned.repo_id, planned.commit, wanted)
    log.add(facts.WeightsFetched("weights", planned.repo_id, None, report.bytes, report.sha_verified))
    state: dict[str, Any] = {"launcher": req.launcher, "engine": ENGINE_TYPE,
                             "url": f"http://127.0.0.1:{port}", "served_model": bundle.served_model,
                             "repo_id": planned.repo_id, "commit": planned.commit, "quant": planned.quant.label,
                             "profile_like": profile.key if profile is not None else None,
                             "argv": list(bundle.native_argv), "skip_tools": req.skip_tools,
                             "container": bundle.container_name, "pid": None, "state": "written",
                             "directory": str(directory), "prediction": prediction,
                             "written_at": provider.now().isoformat(timespec="seconds")}
    if req.no_start:
        return not_started(directory, state, log, provider)
    command = launchers.Preflighted(launchers.ServerCommand(bundle.native_argv[:1]))
    return start_bundle(req, bundle, state, log, launcher, command, provider, receipt=False)


def _variant_repos(catalog: "Catalog", profile: "Profile") -> tuple[str, ...]:
    variant = catalog.models[profile.model].weights.get(profile.weights_variant)
    return tuple(variant.hf_repos) if variant is not None else ()
