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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from club3090.edges import launchers
from club3090.errors import InputError, UsageError
from club3090.pipeline import bundle as bundle_mod
from club3090.pipeline.bundle_start import not_started, read_state, start_bundle, write_state

if TYPE_CHECKING:
    from club3090.catalog.model import Catalog
    from club3090.model.spec import ModelSpec, RepoFile
    from club3090.pipeline.provider import Provider

LAUNCHERS = ("docker", "native", "ray", "k8s")   # ray / k8s: multi-node files, written only (cluster_up)
# failure tokens of a start
START_FAILED = "start-failed"
VERIFY_FAILED = "verify-failed"


@dataclass(frozen=True)
class UpRequest:
    source: str
    directory: Path
    profile_like: str | None = None          # None: the gate's automatic shape
    launcher: str = "docker"
    gpus: str | None = None
    port: int | None = None
    no_start: bool = False
    vllm: str | None = None
    yes: bool = False
    force_download: bool = False
    trust_remote_code: bool = False
    force: bool = False
    skip_tools: bool = False
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


@dataclass
class UpSeams:
    """The I/O of ``up`` beyond the Provider; ``None`` means the real thing."""

    run: Any = None                                     # boot.Runner for docker / vllm --version
    which: Callable[[str], str | None] | None = None
    payload: Callable[[str], Mapping[str, bytes]] | None = None   # upstream path -> {file: verified bytes}
    http: Any = None
    say: Callable[[str], None] = lambda _m: None        # progress lines (stderr)
    spin: Callable[[str], None] | None = None           # the spinner line (stderr, rewritten in place)
    ready_deadline_s: float = launchers.READY_DEADLINE_S
    bar: bool = True
    captures: Path | None = None                        # where a failed start's capture bundle goes


@dataclass
class UpResult:
    code: int
    lines: list[str] = field(default_factory=list)
    gate: Any = None
    state: dict[str, Any] = field(default_factory=dict)
    verify: Any = None
    receipt: Any = None                                 # boot_receipt.BootReceipt once started

    def to_json(self) -> dict[str, Any]:
        return {"exit_code": self.code, "ok": self.code == 0, "state": self.state,
                "gate": self.gate.to_json() if self.gate is not None else None,
                "receipt": self.receipt.to_json() if self.receipt is not None else None,
                "verify": self.verify.to_json() if self.verify is not None else None}


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
    from club3090.model.spec import RepoFile

    settings = provider.settings
    if settings.offline:
        from club3090.edges.hf_cache import cached_snapshot

        snap = cached_snapshot(settings.hub_cache, repo_id, commit)
        if snap is None:
            raise UsageError(f"{repo_id} is not in the HF cache and HF_HUB_OFFLINE is set; run once online")
        files = []
        for p in sorted(snap.iterdir()):
            blob = p.resolve().name
            sha = blob if len(blob) == 64 and p.name.endswith(".safetensors") else None
            files.append(RepoFile(p.name, p.stat().st_size, sha))
        return snap.name, serving_files(files)
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


def _drafter_weights(catalog: "Catalog", profile: Any, provider: "Provider") -> DrafterWeights | None:
    repo = drafter_repo(catalog, profile.drafter)
    if repo is None:
        return None
    drafter = catalog.drafters[profile.drafter]
    revision = next((v.revision for model_id in drafter.model_compat if model_id in catalog.models
                     for v in catalog.models[model_id].weights.values() if repo in v.hf_repos and v.revision), None)
    commit, files = _repo_files(repo, revision, revision, provider)
    return DrafterWeights(repo, commit, files, str(drafter.local_model_path))


def _launch(req: UpRequest, spec: "ModelSpec", catalog: "Catalog", provider: "Provider", gate: Any,
            snapshot: Path) -> tuple[Any, str]:
    """(Launch, upstream base) for the gate's path: the curated replay, or the derived compose."""
    from club3090.compose import generate as gen

    key = req.profile_like or ""
    profile = catalog.profiles[key]
    if spec.curated is not None and spec.curated.model_id == profile.model:
        return curated_launch(key, catalog, provider)
    from club3090.pipeline.emit_derived import chosen_context

    ctx, _note = chosen_context(gate.fit)
    hw = gate.hardware
    count = hw.count if hw is not None and hw.count else profile.tp
    outcome = gen.derived_compose(spec, key, catalog, snapshot_dir=snapshot.absolute(),
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


def check_request(req: UpRequest) -> None:
    """The launcher is one ``up`` knows, several nodes have a cluster launcher, and DIR is not
    serving (unless ``--force``)."""
    from club3090.pipeline.cluster_up import CLUSTER_LAUNCHERS

    if req.launcher not in LAUNCHERS:
        raise UsageError(f"--launcher must be one of {', '.join(LAUNCHERS)}")
    if (req.nodes or 1) > 1 and req.launcher not in CLUSTER_LAUNCHERS:
        raise UsageError(f"a rig of {req.nodes} nodes launches with --launcher ray or --launcher k8s "
                         "(files for every node; nothing is started)")
    directory = Path(req.directory).absolute()
    if (directory / bundle_mod.STATE).exists() and not req.force:
        prior = read_state(directory)
        if prior.get("launcher") == "native" and launchers.read_pid(directory) is not None:
            pid = launchers.read_pid(directory)
            if pid is not None and launchers.alive(pid):
                raise UsageError(f"{directory} is serving (PID {pid}); `club3090 down {directory}` first")


def up(req: UpRequest, provider: "Provider", seams: UpSeams) -> UpResult:
    from club3090.outcome import NoticeCode
    from club3090.pipeline.cluster_up import CLUSTER_LAUNCHERS
    from club3090.pipeline.pull import PullRequest, evaluate
    from club3090.reports.capture import CAPTURES_DIRNAME

    check_request(req)
    catalog = provider.catalog()
    if req.profile_like is not None and catalog.profile_key(req.profile_like) is not None:
        req = replace(req, profile_like=catalog.profile_key(req.profile_like))   # an old (renamed) slug
    if req.profile_like is not None and req.profile_like not in catalog.profiles:
        raise UsageError(f"unknown --profile-like {req.profile_like!r}; `club3090 profiles` lists them")
    if req.llamacpp:
        from club3090.pipeline.llamacpp_up import llamacpp_profile, up_llamacpp

        family = llamacpp_profile(catalog, req)
        if family is not None:
            return up_llamacpp(req, provider, seams, catalog=catalog, profile=family)
    elif req.llama_server_bin or req.quant or req.ctx_size or req.cache_type_k or req.cache_type_v:
        raise UsageError("--quant, --ctx-size, --cache-type-k/-v and --llama-server-bin are `up`'s GGUF flags")
    captures = seams.captures if seams.captures is not None else Path.cwd() / CAPTURES_DIRNAME
    facts = None
    if req.llamacpp:                 # a GGUF-only repo is llama.cpp's: no gate refusal (nor its capture)
        from club3090.outcome import Stop
        from club3090.pipeline.stages import gpu_set

        gpu_set(req.gpus, catalog, nodes=req.nodes, interconnect=req.interconnect)   # before any network
        facts = provider.resolve(req.source, catalog)
        if isinstance(facts, Stop) and facts.sub_reason == "gguf-only":
            from club3090.pipeline.llamacpp_up import up_llamacpp

            return up_llamacpp(req, provider, seams, catalog=catalog, profile=None)
    gate = evaluate(PullRequest(source=req.source, profile_like=req.profile_like, yes=req.yes,
                                force_download=req.force_download, trust_remote_code=req.trust_remote_code,
                                gpus=req.gpus, nodes=req.nodes, interconnect=req.interconnect,
                                downloads_here=req.launcher not in CLUSTER_LAUNCHERS), provider,
                    captures_root=captures, facts=facts)
    # `pull`'s hints about --out do not apply: `up` writes and downloads everything itself
    hints = {NoticeCode.NO_DOWNLOAD_YET.value, NoticeCode.CURATED_NEEDS_OUT.value}
    gate = replace(gate, notices=tuple(n for n in gate.notices if str(getattr(n.code, "value", n.code)) not in hints))
    result = UpResult(gate.exit_code, [], gate)
    if not gate.ok or gate.summary != "FITS":
        return result

    spec = facts if facts is not None else provider.resolve(req.source, catalog)
    if not hasattr(spec, "ref"):
        raise UsageError(f"{req.source}: the gate passed but the model cannot be resolved again")
    key = req.profile_like or gate.profile_like or ""
    if key not in catalog.profiles and gate.choice is not None:   # the automatic, derived shape
        from club3090.pipeline.auto_profile import auto_profile, catalog_with

        candidate = gate.choice.chosen or gate.choice.best
        catalog = catalog_with(catalog, auto_profile(gate.choice, candidate, spec, catalog, None))  # type: ignore[arg-type]
    if key not in catalog.profiles:
        raise UsageError(f"the gate chose the shape {key!r}, which `up` cannot launch; pass --profile-like KEY")
    req = replace(req, profile_like=key)

    rig_nodes = int(getattr(gate.hardware, "nodes", 1) or 1)
    if rig_nodes > 1 and req.launcher not in CLUSTER_LAUNCHERS:
        raise UsageError(f"a rig of {rig_nodes} nodes launches with --launcher ray or --launcher k8s "
                         "(files for every node; nothing is started)")
    return deploy(req, spec, catalog, provider, seams, result,  # type: ignore[arg-type]
                  lambda snapshot: _launch(req, spec, catalog, provider, gate, snapshot),  # type: ignore[arg-type]
                  hardware=gate.hardware)


def deploy(req: UpRequest, spec: "ModelSpec", catalog: "Catalog", provider: "Provider", seams: UpSeams,
           result: UpResult, make_launch: Callable[[Path], tuple[Any, str]], *, served_model: str | None = None,
           emit_only: bool = False, swap_of: str | None = None, hardware: Any = None) -> UpResult:
    """From a decided launch to a serving bundle: launcher preflight -> the bundle in DIR with its
    verified payloads -> the weights into the HF cache -> start -> verify (``--launcher ray|k8s``:
    the files for every node, nothing started). ``up`` and ``swap`` share it. ``make_launch(snapshot)``
    gives (Launch, upstream base); ``served_model`` re-points the served name; ``emit_only`` stops
    after the bundle (no download, no start); ``swap_of`` (the curated profile a swap cloned) is
    recorded in the state, the receipt and a failure's capture."""
    from club3090.edges.download import raise_for
    from club3090.edges.files import atomic_write_bytes, atomic_write_text
    from club3090.edges.hf_cache import fetch_into_cache, snapshot_dir
    from club3090.pipeline.cluster_up import CLUSTER_LAUNCHERS, ClusterOptions

    say = seams.say
    run = seams.run or launchers.run_process
    directory = Path(req.directory).absolute()
    multi = req.launcher in CLUSTER_LAUNCHERS
    key = req.profile_like or ""
    # preflight: nothing is written before the launcher is known to work
    profile = catalog.profiles[key]
    engine = catalog.engines.get(profile.engine)
    native = None
    if not req.no_start and not multi and not emit_only:
        if req.launcher == "docker":
            launchers.preflight_docker(run=run, which=seams.which)
        else:
            native = launchers.preflight_native(req.vllm, engine.pin if engine is not None else None,
                                                run=run, which=seams.which)
            if native.pin_note:
                say(f"[up] note: {native.pin_note}")

    commit, files = _served_files(spec, provider)
    hub_cache = Path(provider.settings.hub_cache).absolute()
    snapshot = snapshot_dir(hub_cache, spec.ref, commit)
    launch, base = make_launch(snapshot)
    drafter = _drafter_weights(catalog, profile, provider)
    if drafter is not None:   # the drafter's folder -> its snapshot in the HF cache the bundle mounts
        inside = f"{bundle_mod.CONTAINER_HUB}/{snapshot_dir(Path('.'), drafter.repo_id, drafter.commit).as_posix()}"
        launch = bundle_mod.relocate(launch, drafter.container_path, inside)
    port = req.port or profile.port
    plan = bundle_mod.plan(launch, directory=directory, repo_id=spec.ref, commit=commit, snapshot=snapshot,
                           hub_cache=hub_cache, port=port, upstream_base=base, served_model=served_model)
    if plan.unresolved:
        raise UsageError(f"{req.profile_like} also serves {', '.join(plan.unresolved)}, which no catalog repo "
                         "provides: use a profile without it, or `club3090 compose` and place it yourself")
    if multi:
        from club3090.pipeline import cluster_up

        lines, written = cluster_up.emit(launcher=req.launcher, directory=directory,
                                       options=req.cluster or ClusterOptions(nodes=req.nodes), plan=plan,
                                       profile=profile, hardware=hardware, repo_id=spec.ref, commit=commit,
                                       files=files, hub_cache=hub_cache, port=port, which=seams.which)
        if swap_of is not None:
            written["swap_of"] = swap_of
        write_state(directory, written)
        result.lines += lines
        result.state = written
        result.code = 0
        return result
    payloads: dict[str, bytes] = {}
    for _inside, upstream in plan.upstream_files.items():
        if seams.payload is None:
            raise UsageError(f"{upstream} is mounted by {req.profile_like} but no payload source is configured")
        for name, data in seams.payload(upstream).items():   # IntegrityError (65): nothing written yet
            payloads[f"{bundle_mod.FILES}/{name}"] = data
    plan = replace(plan, payloads=payloads)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / bundle_mod.LOGS).mkdir(exist_ok=True)
    bundle_mod.write(plan, atomic_write_text, atomic_write_bytes, lambda p, m: os.chmod(p, m))
    for name in payloads:
        if name.endswith(".sh") or _executable(catalog, name[len(bundle_mod.FILES) + 1:]):
            os.chmod(directory / name, 0o755)
    result.lines.append(f"[up] bundle written to {directory} (compose.yml, .env, serve.sh, launch.json"
                        + (f", {len(payloads)} mounted files" if payloads else "") + ")")
    for note in plan.container_only:
        result.lines.append(f"[up] note: serve.sh cannot apply: {note}")
    url = f"http://127.0.0.1:{port}"
    state: dict[str, Any] = {"launcher": req.launcher, "url": url, "served_model": plan.served_model,
                             "repo_id": spec.ref, "commit": commit, "profile_like": req.profile_like,
                             "argv": list(plan.native_argv), "skip_tools": req.skip_tools,
                             "drafter": {"repo_id": drafter.repo_id, "commit": drafter.commit} if drafter else None,
                             "container": plan.container_name, "pid": None, "state": "written", "directory": str(directory),
                             "written_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    if swap_of is not None:
        state["swap_of"] = swap_of
    result.state = state
    if emit_only:
        write_state(directory, state)
        result.lines.append(f"[up] weights not downloaded, nothing started (--emit-only): {len(files)} files of "
                            f"{spec.ref}@{commit[:12]} would go into {hub_cache}")
        result.code = 0
        return result

    say(f"[up] weights: {len(files)} files of {spec.ref}@{commit[:12]} into {hub_cache}")
    report = fetch_into_cache(provider.settings, spec.ref, commit, files, progress=say, bar=seams.bar)
    raise_for(report, spec.ref)
    result.lines.append(f"[up] weights: {len(report.files)} files, {report.bytes / 2**30:.2f} GiB in the HF cache"
                        + (", sha256 verified" if report.sha_verified else ""))
    if drafter is not None:
        say(f"[up] drafter: {len(drafter.files)} files of {drafter.repo_id}@{drafter.commit[:12]} into {hub_cache}")
        extra = fetch_into_cache(provider.settings, drafter.repo_id, drafter.commit, drafter.files, progress=say,
                                 bar=seams.bar)
        raise_for(extra, drafter.repo_id, "drafter download")
        result.lines.append(f"[up] drafter: {drafter.repo_id}, {len(extra.files)} files, "
                            f"{extra.bytes / 2**30:.2f} GiB in the HF cache"
                            + (", sha256 verified" if extra.sha_verified else ""))
    if req.no_start:
        return not_started(directory, state, result)
    return start_bundle(req, plan, state, result, native, run, seams, snapshot=snapshot,
                        secrets=provider.settings.redaction_secrets)


__all__ = ["LAUNCHERS", "DrafterWeights", "UpRequest", "UpResult", "UpSeams", "check_request", "curated_launch",
           "deploy", "drafter_repo", "not_started", "read_state", "start_bundle", "up", "write_state"]
