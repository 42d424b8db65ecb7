"""``club3090 up``: from a verdict to a running, verified server (docs/DESIGN.md).

gate (``pull.evaluate``, no ``[E]``) -> launcher preflight (nothing written before it passes)
-> the launch (curated replay or derived compose) -> the bundle in DIR with its patch payloads
(fetched, verified) -> the weights into the HF cache (verified) -> start (native or Docker) ->
wait for ``/v1/models`` -> smoke + ``verify`` -> the state file (the start, the verification and
the state file: ``pipeline/bundle_start.py``). Every refusal before the start leaves nothing
running; a failed start prints the log tail and writes a capture bundle. The gate's verdict is
``UpResult.gate``; the CLI renders it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from club3090.edges import launchers
from club3090.errors import InputError, UsageError
from club3090.outcome import Outcome
from club3090.pipeline import bundle as bundle_mod
from club3090.pipeline import up_facts
from club3090.pipeline.bundle_start import (
    START_FAILED,
    VERIFY_FAILED,
    not_started,
    read_state,
    refuse_port,
    start_bundle,
    write_state,
)
from club3090.pipeline.up_facts import FactLog, UpResult
from club3090.settings import WARMUP_WINDOW_S

if TYPE_CHECKING:
    from collections.abc import Sequence

    from club3090.catalog.model import Catalog
    from club3090.edges.download import DownloadReport
    from club3090.fit.runtime import RuntimeShape
    from club3090.model.spec import ModelSpec, RepoFile
    from club3090.pipeline.provider import Provider
    from club3090.rig.gpus import GpuSet

LAUNCHERS = launchers.names()                   # ray / k8s: multi-node files, written only (cluster_up)


def _silent(_message: str) -> None:
    return None


def _unseen(_fact: up_facts.Fact) -> None:
    return None


@dataclass(frozen=True)
class Progress:
    """How ``up`` shows its progress while it runs (the CLI's callbacks; silent by default). Every
    other piece of I/O is the Provider's."""

    say: Callable[[str], None] = _silent                # progress lines (stderr)
    spin: Callable[[str], None] | None = None           # the spinner line (stderr, rewritten in place)
    bar: bool = False                                   # huggingface_hub's download bar
    fact: Callable[[up_facts.Fact], None] = _unseen        # each fact as it lands (the CLI prints it, in order)

    def log(self, gate: Any = None) -> FactLog:
        """A fresh fact log for one run, shown through ``fact``."""
        return FactLog(self.fact, gate)


@dataclass(frozen=True)
class UpRequest:
    source: str
    directory: Path
    profile_like: str | None = None          # None: the gate's automatic shape
    launcher: str = launchers.DEFAULT
    gpus: "GpuSet | None" = None           # --gpus, parsed once by the CLI
    port: int | None = None
    no_start: bool = False
    vllm: str | None = None                    # a path or a command line ("python -m vllm.entrypoints...")
    yes: bool = False
    force_download: bool = False
    trust_remote_code: bool = False
    force: bool = False
    skip_tools: bool = False
    stress: bool = False                       # --stress: SERVING also needs verify-stress green
    # the llama.cpp family (GGUF repos, llama.cpp-family profiles); `pull --out` keeps the seed's refusals
    llamacpp: bool = True
    quant: str | None = None
    ctx_size: int | None = None
    cache_type_k: str | None = None
    cache_type_v: str | None = None
    llama_server_bin: str | None = None
    nodes: int | None = None                  # --nodes: machines (``--gpus`` then names one of them)
    interconnect: str | None = None
    cluster: Any = None                       # cluster_up.ClusterOptions for --launcher ray / k8s
    progress: Progress = field(default_factory=Progress)
    captures: Path | None = None              # where a failed start's capture bundle goes (default ./.pull-captures)
    ready_deadline_s: float = launchers.READY_DEADLINE_S
    warmup_s: float = WARMUP_WINDOW_S         # --warmup-s: how long a listed server may answer errors


def _served_files(spec: "ModelSpec", provider: "Provider") -> tuple[str, tuple["RepoFile", ...]]:
    """(commit, files) to put into the HF cache: the gate's own when it saw the Hub, else the Hub's
    listing (a curated repo priced from the catalog), else the cached snapshot (offline)."""
    from club3090.edges.hf_cache import serving_files

    if spec.commit and spec.download_files:
        return spec.commit, serving_files(spec.download_files)
    return _repo_files(spec.ref, spec.commit, spec.revision, provider)


def _repo_files(repo_id: str, commit: str | None, revision: str | None,
                provider: "Provider") -> tuple[str, tuple["RepoFile", ...]]:
    """(commit, serving files) of a repo: the Hub's listing, or offline the cached snapshot."""
    from club3090.edges.hf_cache import serving_files

    if provider.settings.offline:
        cached = provider.cached_files(repo_id, commit)
        if cached is None:
            raise UsageError(f"{repo_id} is not in the HF cache and HF_HUB_OFFLINE is set; run once online")
        return cached[0], serving_files(cached[1])
    info = provider.hub().repo_info(repo_id, revision)
    if not info.commit:
        raise InputError(repo_id, "the Hub named no commit for this repo; refusing an unpinned download")
    return info.commit, serving_files(info.files)


@dataclass(frozen=True)
class DrafterWeights:
    """A profile's drafter served from its own Hub repo: where the compose expects it, where it goes."""

    repo_id: str
    commit: str
    files: tuple["RepoFile", ...]
    container_path: str                 # the path the shipped compose passes (``local_model_path``)


def drafter_repo(catalog: "Catalog", drafter_id: str | None) -> str | None:
    """The Hub repo of a drafter the compose loads from a folder: the ``draft`` weight variant of a
    model it serves whose repo name is the folder's name (upstream names the folder after the repo)."""
    drafter = catalog.drafters.get(drafter_id) if drafter_id else None
    if drafter is None or not drafter.local_model_path:
        return None
    folder = drafter.local_model_path.rstrip("/").rsplit("/", 1)[-1].lower()
    repos = {repo for model_id in drafter.model_compat if model_id in catalog.models
             for variant in catalog.models[model_id].weights.values() if variant.kind == "draft"
             for repo in variant.hf_repos[:1] if repo.rsplit("/", 1)[-1].lower() == folder}
    return repos.pop() if len(repos) == 1 else None


def _drafter_weights(catalog: "Catalog", runtime: "RuntimeShape", provider: "Provider") -> DrafterWeights | None:
    repo = drafter_repo(catalog, runtime.drafter)
    if repo is None or runtime.drafter is None:
        return None
    drafter = catalog.drafters[runtime.drafter]
    revision = next((v.revision for model_id in drafter.model_compat if model_id in catalog.models
                     for v in catalog.models[model_id].weights.values() if repo in v.hf_repos and v.revision), None)
    commit, files = _repo_files(repo, revision, revision, provider)
    return DrafterWeights(repo, commit, files, str(drafter.local_model_path))


def _launch(req: UpRequest, spec: "ModelSpec", catalog: "Catalog", runtime: "RuntimeShape", provider: "Provider",
            gate: Any, snapshot: Path) -> tuple[Any, str]:
    """(Launch, upstream base) for the gate's path: the curated replay, or the derived compose."""
    from club3090.compose import generate as gen

    if spec.curated is not None and spec.curated.model_id == runtime.model:
        return curated_launch(runtime.key, catalog, provider)
    from club3090.pipeline.emit_derived import chosen_context

    ctx, _note = chosen_context(gate.fit)
    hw = gate.hardware
    count = hw.count if hw is not None and hw.count else runtime.tp
    outcome = gen.derived_compose(spec, runtime, catalog, snapshot_dir=snapshot.absolute(),
                                  hf_home=Path(provider.settings.hf_home).absolute(), max_model_len=ctx,
                                  trust_remote_code=req.trust_remote_code, gpu_indices=tuple(range(count)))
    if outcome.launch is None or not outcome.ok:
        raise UsageError(f"no launch for {req.profile_like}: {outcome.refusal or ''} {outcome.detail or ''}".strip())
    return outcome.launch, ""


def curated_launch(key: str, catalog: "Catalog", provider: "Provider") -> tuple[Any, str]:
    """(Launch, upstream base) of a curated profile: the shipped service replayed whole."""
    from club3090.compose import generate as gen

    outcome = gen.generate(key, catalog, guard_runner=provider.drift_guard)
    if outcome.launch is None or not outcome.ok:
        raise UsageError(f"no launch for {key}: {outcome.refusal or ''} {outcome.detail or ''}".strip())
    return outcome.launch, os.path.dirname(catalog.profiles[key].compose_path)


def _executable(catalog: "Catalog", path: str) -> bool:
    f = catalog.upstream_files.get(path)
    return bool(f is not None and f.executable)


def _multi_node_hint(nodes: int) -> str:
    across = " or ".join(f"--launcher {n}" for n in launchers.names(multi_node=True))
    return f"a rig of {nodes} nodes launches with {across} (files for every node; nothing is started)"


def check_request(req: UpRequest) -> None:
    """The launcher is one ``up`` knows, several nodes have a cluster launcher, and DIR is not
    serving (unless ``--force``)."""
    launcher = launchers.get(req.launcher)
    if (req.nodes or 1) > 1 and not launcher.multi_node:
        raise UsageError(_multi_node_hint(req.nodes or 1))
    directory = Path(req.directory).absolute()
    if (directory / bundle_mod.STATE).exists() and not req.force:
        prior = read_state(directory)
        owner = launchers.of_state(prior)
        now = owner.status(directory, prior, tail=0) if owner.starts else None
        if now is not None and now.running:      # the recorded process itself, not a reused PID
            raise UsageError(f"{directory} is serving ({now.who}); `club3090 down {directory}` first")


def up(req: UpRequest, provider: "Provider") -> UpResult:
    from club3090.outcome import NoticeCode
    from club3090.pipeline.pull import PullRequest, evaluate
    from club3090.reports.capture import CAPTURES_DIRNAME

    check_request(req)
    catalog = provider.catalog()
    if req.profile_like is not None and catalog.profile_key(req.profile_like) is not None:
        req = replace(req, profile_like=catalog.profile_key(req.profile_like))   # an old (renamed) slug
    if req.profile_like is not None and req.profile_like not in catalog.profiles:
        raise UsageError(f"unknown --profile-like {req.profile_like!r}; `club3090 profiles` lists them")
    if req.llamacpp:
        from club3090.pipeline import engines

        handed = engines.before_gate(catalog, req.profile_like, req.source)
        if handed is not None:
            return handed[0].up(req, provider, catalog=catalog, profile=handed[1])
    elif req.llama_server_bin or req.quant or req.ctx_size or req.cache_type_k or req.cache_type_v:
        raise UsageError("--quant, --ctx-size, --cache-type-k/-v and --llama-server-bin are `up`'s GGUF flags")
    captures = req.captures if req.captures is not None else Path.cwd() / CAPTURES_DIRNAME
    facts = None
    if req.llamacpp:                 # another engine's weights (a GGUF-only repo): no gate refusal (nor its capture)
        from club3090.outcome import Stop
        from club3090.pipeline import engines

        facts = provider.resolve(req.source, catalog)
        other = engines.for_stop(facts) if isinstance(facts, Stop) else None
        if other is not None:
            return other.up(req, provider, catalog=catalog, profile=None)
    gate = evaluate(PullRequest(source=req.source, profile_like=req.profile_like, yes=req.yes,
                                force_download=req.force_download, trust_remote_code=req.trust_remote_code,
                                gpus=req.gpus,
                                downloads_here=not launchers.get(req.launcher).multi_node), provider,
                    captures_root=captures, facts=facts)
    # `pull`'s hints about --out do not apply: `up` writes and downloads everything itself
    hints = {NoticeCode.NO_DOWNLOAD_YET.value, NoticeCode.CURATED_NEEDS_OUT.value}
    gate = replace(gate, notices=tuple(n for n in gate.notices if str(getattr(n.code, "value", n.code)) not in hints))
    log = req.progress.log(gate)
    log.add(gate)
    if not gate.ok or gate.summary != "FITS":
        return log.result(gate.outcome)

    spec = facts if facts is not None else provider.resolve(req.source, catalog)
    if not hasattr(spec, "ref"):
        raise UsageError(f"{req.source}: the gate passed but the model cannot be resolved again")
    runtime = gate.runtime           # the gate's: a profile's, or the automatic shape it derived
    if runtime is None:
        raise UsageError(f"the gate chose no shape `up` can launch for {req.source}; pass --profile-like KEY")
    req = replace(req, profile_like=runtime.key)

    rig_nodes = int(getattr(gate.hardware, "nodes", 1) or 1)
    if rig_nodes > 1 and not launchers.get(req.launcher).multi_node:
        raise UsageError(_multi_node_hint(rig_nodes))
    return deploy(req, spec, catalog, runtime, provider, log,  # type: ignore[arg-type]
                  lambda snapshot: _launch(req, spec, catalog, runtime, provider, gate, snapshot),  # type: ignore[arg-type]
                  hardware=gate.hardware)


def deploy(req: UpRequest, spec: "ModelSpec", catalog: "Catalog", runtime: "RuntimeShape", provider: "Provider",
           log: FactLog,
           make_launch: Callable[[Path], tuple[Any, str]], *, served_model: str | None = None,
           emit_only: bool = False, swap_of: str | None = None, hardware: Any = None) -> UpResult:
    """From a decided launch to a serving bundle: launcher preflight -> the bundle in DIR with its
    verified payloads -> the weights into the HF cache -> start -> verify (a multi-node launcher:
    the files for every node, nothing started). ``up`` and ``swap`` share it. ``make_launch(snapshot)``
    gives (Launch, upstream base); ``served_model`` re-points the served name; ``emit_only`` stops
    after the bundle (no download, no start); ``swap_of`` (the curated profile a swap cloned) is
    recorded in the state, the receipt and a failure's capture."""
    from club3090.edges.hf_cache import snapshot_dir

    directory = Path(req.directory).absolute()
    launcher = provider.launcher(req.launcher)
    port = req.port or runtime.port
    starts = not req.no_start and launcher.starts and not emit_only
    pre = _preflight(req, launcher, catalog, runtime) if starts else launchers.Preflighted()
    busy = launchers.port_holder(port) if starts else None
    if busy is not None:      # nothing is written before the launcher works and the port is free
        return refuse_port(log, {}, busy, provider)
    commit, files = _served_files(spec, provider)
    hub_cache = Path(provider.settings.hub_cache).absolute()
    snapshot = snapshot_dir(hub_cache, spec.ref, commit)
    launch, base = make_launch(snapshot)
    drafter = _drafter_weights(catalog, runtime, provider)
    if drafter is not None:   # the drafter's folder -> its snapshot in the HF cache the bundle mounts
        inside = f"{bundle_mod.CONTAINER_HUB}/{snapshot_dir(Path('.'), drafter.repo_id, drafter.commit).as_posix()}"
        launch = bundle_mod.relocate(launch, drafter.container_path, inside)
    plan = bundle_mod.plan(launch, directory=directory, repo_id=spec.ref, commit=commit, snapshot=snapshot,
                           hub_cache=hub_cache, port=port, upstream_base=base, served_model=served_model)
    if plan.unresolved:
        raise UsageError(f"{req.profile_like} also serves {', '.join(plan.unresolved)}, which no catalog repo "
                         "provides: use a profile without it, or `club3090 compose` and place it yourself")
    if launcher.multi_node:
        return _cluster(req, launcher, plan, runtime, hardware, spec.ref, commit, files, provider, log, swap_of)
    plan = _write_bundle(plan, req, catalog, provider, log)
    state = _state(req, plan, spec.ref, commit, drafter, provider, swap_of)
    if emit_only:
        write_state(directory, state, provider.write_file)
        log.add(up_facts.EmitOnly(len(files), spec.ref, commit, str(hub_cache)))
        return log.result(Outcome.OK, state)
    report = fetch_verified(provider, req.progress, spec.ref, commit, files)
    log.add(up_facts.WeightsFetched("weights", spec.ref, len(report.files), report.bytes, report.sha_verified))
    if drafter is not None:
        extra = fetch_verified(provider, req.progress, drafter.repo_id, drafter.commit, drafter.files, "drafter")
        log.add(up_facts.WeightsFetched("drafter", drafter.repo_id, len(extra.files), extra.bytes, extra.sha_verified))
    if req.no_start:
        return not_started(directory, state, log, provider)
    return start_bundle(req, plan, state, log, launcher, pre, provider, snapshot=snapshot,
                        secrets=provider.settings.redaction_secrets)


def _preflight(req: UpRequest, launcher: "launchers.Launcher", catalog: "Catalog", runtime: "RuntimeShape"
               ) -> "launchers.Preflighted":
    """The launcher's preflight with the engine's vLLM server (``--vllm``, compared with the pin)."""
    engine = catalog.engines.get(runtime.engine)
    pre = launcher.preflight(launchers.vllm_server(req.vllm, engine.pin if engine is not None else None))
    for note in pre.notes:
        req.progress.say(f"[up] note: {note}")
    return pre


def _write_bundle(plan: bundle_mod.Bundle, req: UpRequest, catalog: "Catalog", provider: "Provider",
                  log: FactLog) -> bundle_mod.Bundle:
    """The bundle with its mounted payloads (each verified before anything is written) into DIR."""
    payloads: dict[str, bytes] = {}
    for _inside, upstream in plan.upstream_files.items():
        for name, data in provider.payloads(upstream).items():   # IntegrityError: nothing written yet
            payloads[f"{bundle_mod.FILES}/{name}"] = data
    plan = replace(plan, payloads=payloads)
    bundle_mod.write(plan, provider, lambda upstream: _executable(catalog, upstream))
    log.add(up_facts.BundleWritten(plan.directory, len(payloads), tuple(plan.container_only), "serve.sh cannot apply:"))
    return plan


def _state(req: UpRequest, plan: bundle_mod.Bundle, repo_id: str, commit: str, drafter: DrafterWeights | None,
           provider: "Provider", swap_of: str | None) -> dict[str, Any]:
    """The state file of a written bundle (``start_bundle`` adds the handle and the state it reaches)."""
    state: dict[str, Any] = {
        "launcher": req.launcher, "url": f"http://127.0.0.1:{plan.port}", "served_model": plan.served_model,
        "repo_id": repo_id, "commit": commit, "profile_like": req.profile_like, "argv": list(plan.native_argv),
        "skip_tools": req.skip_tools,
        "drafter": {"repo_id": drafter.repo_id, "commit": drafter.commit} if drafter else None,
        "container": plan.container_name, "pid": None, "state": "written", "directory": str(plan.directory),
        "written_at": provider.now().isoformat(timespec="seconds")}
    if swap_of is not None:
        state["swap_of"] = swap_of
    return state


def _cluster(req: UpRequest, launcher: "launchers.Launcher", plan: bundle_mod.Bundle, runtime: "RuntimeShape", hardware: Any,
             repo_id: str, commit: str, files: tuple["RepoFile", ...], provider: "Provider", log: FactLog,
             swap_of: str | None) -> UpResult:
    """A multi-node launcher: its files for every node, written; nothing started."""
    from club3090.pipeline import cluster_up

    fact, written = cluster_up.emit(launcher=launcher, directory=plan.directory,
                                     options=req.cluster or cluster_up.ClusterOptions(nodes=req.nodes), plan=plan,
                                     runtime=runtime, hardware=hardware, repo_id=repo_id, commit=commit, files=files,
                                     hub_cache=Path(provider.settings.hub_cache).absolute(), port=plan.port,
                                     writer=provider, now=provider.now())
    if swap_of is not None:
        written["swap_of"] = swap_of
    write_state(plan.directory, written, provider.write_file)
    log.add(fact)
    return log.result(Outcome.OK, written)


def fetch_verified(provider: "Provider", progress: Progress, repo_id: str, commit: str,
                   files: "Sequence[RepoFile]", what: str = "weights") -> "DownloadReport":
    """``files`` of ``repo_id@commit`` into the HF cache, sha256-verified; a failed download ends ``up``
    with its own headline (``download.raise_for``): nothing is started either way."""
    from club3090.edges.download import raise_for

    progress.say(f"[up] {what}: {len(files)} files of {repo_id}@{commit[:12]} into {provider.settings.hub_cache}")
    report = provider.fetch_weights(repo_id, commit, files, progress=lambda m: progress.say(f"[up] {what} {m}"),
                                    bar=progress.bar)
    raise_for(report, repo_id, "download" if what == "weights" else f"{what} download")
    return report


__all__ = ["LAUNCHERS", "START_FAILED", "VERIFY_FAILED", "DrafterWeights", "Progress", "UpRequest", "UpResult",
           "check_request", "curated_launch", "deploy", "drafter_repo", "fetch_verified", "not_started", "read_state",
           "start_bundle", "up", "write_state"]
