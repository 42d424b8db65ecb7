"""Curated replay ``[D]``: reproduce a profile's shipped service definition (docs/DESIGN.md §11).

Replay flags problems; it never repairs. Its checks run in table order (scope, arch, pin, shape,
trust-remote-code, patches) and each failure is a stratum-6 refusal token. Only the param slots
change (port, TP, max-model-len, memory utilisation, KV dtype, max-num-seqs, speculative config,
NVLink env), the governed ``--trust-remote-code`` slot is always stripped, and load-bearing patches
are wired at the insertion points. Pure: results are ``ComposeOutcome`` values.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from club3090.argv import drop_flags, flag_index
from club3090.compose.launch import Launch, plain_data, render
from club3090.compose.outcome import (
    DEGRADED_DRIFT,
    FOUNDATIONAL_DRIFT,
    OTHER,
    PIN_MISMATCH,
    SCOPE,
    TP_OR_KV,
    TRC,
    ComposeOutcome,
    PatchReport,
    ReplayError,
    refuse,
)
from club3090.compose.param_slots import (
    NVLINK_REQUIRED,
    PARAM_SLOTS,
    set_host_port,
    set_slot,
    slot_value,
    speculative_config,
    with_default,
)
from club3090.compose.patch_wiring import (
    GuardRunner,
    guard_pass,
    has_relative_mounts,
    repo_prefix,
    unwire_patch,
    wire_patch,
)
from club3090.compose.provenance import curated_header
from club3090.outcome import Notice, NoticeCode, Outcome

if TYPE_CHECKING:
    from club3090.catalog.model import ArchRow, Catalog, Engine, Patch, Profile, ProfileRuntime

def dry_run(profile_key: str, catalog: "Catalog", *, guard_runner: GuardRunner | None = None,
            accept_degraded: bool = False) -> ComposeOutcome:
    """Stratum-6 check for the pull gate: the emitted compose text or the refusal token.

    Nothing is written. ``text`` is the compose file (run line with placeholders) when ``ok``.
    """
    return generate(profile_key, catalog, guard_runner=guard_runner,
                    accept_degraded=accept_degraded)


def generate(profile_key: str, catalog: "Catalog", *, guard_runner: GuardRunner | None = None,
             accept_degraded: bool = False, out_name: str | None = None,
             fmt: str = "compose") -> ComposeOutcome:
    """Curated replay of ``profile_key``. Pure; the caller writes ``outcome.text``.

    ``out_name`` only feeds the header's run line (``<out>`` when None). A capability-degraded
    drift without ``accept_degraded`` returns ``degraded-drift`` (exit 3) and no text.
    """
    guard = guard_runner or guard_pass
    profile_key = catalog.profile_key(profile_key) or profile_key      # an old (renamed) slug
    profile = catalog.profiles.get(profile_key)
    if profile is None:
        return refuse(profile_key, OTHER, f"unknown profile {profile_key!r}")
    from club3090.compose import llamacpp

    if llamacpp.is_llamacpp(catalog, profile_key):     # the llama.cpp family replays its own way
        return llamacpp.replay(profile_key, catalog, out_name=out_name,
                               fmt="llama-server" if fmt == "vllm-serve" else fmt)
    checked = _checks(profile_key, profile, catalog)
    if isinstance(checked, ComposeOutcome):
        return checked
    # 6-8 patches
    patches = _guarded_patches(profile_key, profile, catalog, checked.row, guard)
    if isinstance(patches, ComposeOutcome):
        return patches
    report, wired, omitted, degraded = patches
    if degraded and not accept_degraded:
        return ComposeOutcome(ok=False, outcome=Outcome.NEEDS_ACK, profile=profile_key,
                              refusal=DEGRADED_DRIFT, degraded=True, patches=report,
                              failed_patches=tuple(p for p, _c in degraded),
                              detail="capability-degraded drift: "
                                     + ", ".join(f"{p} ({c})" for p, c in degraded),
                              trust_remote_code=checked.trc_note)
    # 9 build the service
    runtime = checked.runtime
    try:
        service = _replay_service(runtime.service, profile, catalog, runtime.insertion_points,
                                  wired, omitted, repo_prefix(profile.compose_path))
    except ReplayError as exc:
        return refuse(profile_key, OTHER, str(exc), patches=report)
    return _render(profile_key, profile, catalog, checked, service, report, degraded, out_name, fmt)


@dataclass(frozen=True, slots=True)
class _Checked:
    """What checks 1-5 found: the engine, the captured runtime, the arch row, the trust-remote-code note."""

    engine: "Engine"
    runtime: "ProfileRuntime"
    row: "ArchRow"
    trc_note: str


def _checks(profile_key: str, profile: "Profile", catalog: "Catalog") -> _Checked | ComposeOutcome:
    """Checks 1-5 in table order (scope, arch, pin, shape, trust-remote-code): the first failure refuses."""
    # 1 scope (Catalog.emittable owns the rule)
    emittable, why = catalog.emittable(profile_key)
    if not emittable:
        return refuse(profile_key, SCOPE, f"{why or 'not emittable'}: {catalog.static_route(profile_key)}")
    engine = catalog.engines[profile.engine]
    runtime = profile.runtime           # emittable: captured, not Genesis-equipped
    if runtime is None:
        return refuse(profile_key, SCOPE, "no-runtime-capture")
    kv = catalog.kv_formats.get(profile.kv_format)

    # 2 arch
    row = catalog.arch_row_for_model(profile.model)
    if row is None:
        return refuse(profile_key, OTHER, f"no arch row names model {profile.model!r}")

    # 3 pin
    pin = row.pin_for(engine.pin)
    if pin is None or not pin.loads:
        reason = (pin.reason if pin is not None and pin.reason else
                  f"{engine.pin} is marked loads:false for {row.arch}" if pin is not None else
                  f"{engine.pin} is not a validated pin for {row.arch}")
        if engine.withdrawn and profile.replaced_by:
            reason += f"; upstream withdrew the {engine.id} image: use {profile.replaced_by}"
        return refuse(profile_key, PIN_MISMATCH, reason)

    # 4 shape
    if profile.tp not in row.tp_divisors:
        return refuse(profile_key, TP_OR_KV,
                       f"tp {profile.tp} not in {row.arch} tp divisors {list(row.tp_divisors)}")
    if kv is None or profile.kv_format not in engine.supported_kv_formats or not kv.on_vllm:
        return refuse(profile_key, TP_OR_KV,
                       f"kv format {profile.kv_format} not supported by engine {engine.id}")

    # 5 trust-remote-code: the slot is always stripped; refuse unless evidence says "false"
    evidence = (row.trust_remote_code_evidence or "").strip()
    if row.trust_remote_code != "false" or evidence.lower() in ("", "none", "null"):
        return refuse(profile_key, TRC,
                       f"{row.arch} trust_remote_code is {row.trust_remote_code!r} "
                       f"without cited evidence for 'false'")
    return _Checked(engine=engine, runtime=runtime, row=row, trc_note="not emitted (arch evidence: false)")


_Guarded = tuple[PatchReport, list["Patch"], list["Patch"], list[tuple[str, str]]]


def _guarded_patches(profile_key: str, profile: "Profile", catalog: "Catalog", row: "ArchRow",
                     guard: GuardRunner) -> _Guarded | ComposeOutcome:
    """(the patch report, the wired patches, the omitted ones, the degraded (id, capability) pairs),
    or the refusal of a foundational drift."""
    selected: list[Patch] = []
    excluded: list[tuple[str, str]] = []
    undelivered: list[tuple[str, str]] = []
    relevant = set(row.required_patches)
    for pid in sorted(catalog.patches):
        patch = catalog.patches[pid]
        if profile_key in patch.load_bearing_composes:
            if patch.deprecated:
                excluded.append((pid, "deprecated"))
            else:
                selected.append(patch)
        elif (pid in relevant or profile.model in patch.models) and not patch.deprecated:
            excluded.append((pid, "not load-bearing here"))
    wired: list[Patch] = []
    degraded: list[tuple[str, str]] = []
    omitted: list[Patch] = []
    for patch in selected:
        gap = next((g for g in patch.delivery_gaps if profile_key in g.profiles), None)
        if gap is not None:
            undelivered.append((patch.id, gap.issue))
            continue
        if guard(patch, profile):
            wired.append(patch)
            continue
        if patch.foundational or patch.on_fail in ("hard-refuse", "boot-refused"):
            return refuse(profile_key, FOUNDATIONAL_DRIFT,
                           f"drift guard failed for {patch.id} ({patch.on_fail})",
                           failed_patches=(patch.id,),
                           patches=PatchReport(tuple(p.id for p in wired), tuple(undelivered),
                                               tuple(excluded)))
        degraded.append((patch.id, patch.capability or "unknown capability"))
        omitted.append(patch)
    report = PatchReport(tuple(p.id for p in wired), tuple(undelivered), tuple(excluded), tuple(degraded))
    return report, wired, omitted, degraded


def _render(profile_key: str, profile: "Profile", catalog: "Catalog", checked: _Checked, service: dict[str, Any],
            report: PatchReport, degraded: list[tuple[str, str]], out_name: str | None,
            fmt: str) -> ComposeOutcome:
    """The launch description, rendered, with its notices (project folder, degraded patches)."""
    notices: list[Notice] = []
    project_dir = f"<club-3090 checkout>/{posixpath.dirname(profile.compose_path)}"
    if has_relative_mounts(service):
        notices.append(Notice(NoticeCode.PROJECT_DIRECTORY,
                              f"relative mounts resolve from the shipped compose's folder: run with "
                              f"--project-directory {project_dir}", {"project_directory": project_dir}))
    if degraded:
        notices.append(Notice(NoticeCode.DEGRADED, "DEGRADED: drift guard failed, patch omitted: "
                              + ", ".join(f"{p} ({c})" for p, c in degraded),
                              {"patches": tuple({"id": p, "capability": c} for p, c in degraded)}))
    header = curated_header(profile, catalog, checked.engine.pin, checked.row.arch, checked.trc_note, report,
                            project_dir, out_name or "<out>")
    runtime = checked.runtime
    launch = Launch(kind="curated", service_name=runtime.service_name, service=service,
                    header=header, top_level=runtime.top_level, profile=profile_key, project_dir=project_dir)
    text = render(launch, fmt)
    if "--trust-remote-code" in text:  # fail closed: the governed slot never leaks
        return refuse(profile_key, TRC, "trust-remote-code survived stripping", patches=report)
    return ComposeOutcome(ok=True, outcome=Outcome.OK, profile=profile_key, degraded=bool(degraded),
                          text=text, format=fmt, launch=launch, patches=report,
                          notices=tuple(notices), failed_patches=tuple(p for p, _c in degraded),
                          trust_remote_code=checked.trc_note)


def _replay_service(shipped: Mapping[str, Any], profile: "Profile", catalog: "Catalog",
                    insertion_points: Sequence[str], wired: Sequence["Patch"],
                    omitted: Sequence["Patch"], repo_prefix: str) -> dict[str, Any]:
    service: dict[str, Any] = plain_data(shipped)
    # ports <- default_port
    ports = service.get("ports")
    if isinstance(ports, list) and ports and isinstance(ports[0], str):
        ports[0] = set_host_port(ports[0], str(profile.port))

    command = service.get("command")
    if isinstance(command, str):
        raise ReplayError("string-form command is not replayable")
    args: list[Any] = list(command or [])
    for flag, name in PARAM_SLOTS:
        value = slot_value(profile, catalog, name)
        if value is not None:
            set_slot(args, flag, value)
    i = flag_index(args, "--speculative-config")
    if profile.drafter is None:
        args = drop_flags(args, "--speculative-config")
    elif i is not None:
        drafter = catalog.drafters.get(profile.drafter)
        if drafter is None:
            raise ReplayError(f"unknown drafter {profile.drafter!r}")
        if args[i] == "--speculative-config" and i + 1 < len(args):
            args[i + 1] = speculative_config(str(args[i + 1]), drafter)
        elif args[i] != "--speculative-config":
            args[i] = "--speculative-config=" + speculative_config(str(args[i]).split("=", 1)[1], drafter)
    # governed slot: always stripped
    args = drop_flags(args, "--trust-remote-code", takes_value=False)
    args = [a for a in args if not (isinstance(a, str) and a.startswith("--trust-remote-code"))]

    # NVLink env <- requires_nvlink: the shipped NVLINK_MODE entry keeps its override chain,
    # its default becomes "required" when the profile needs NVLink (else left as shipped)
    if profile.requires_nvlink and isinstance(service.get("environment"), list):
        service["environment"] = [
            (f"NVLINK_MODE={with_default(str(e).split('=', 1)[1], NVLINK_REQUIRED)}"
             if str(e).startswith("NVLINK_MODE=") else e)
            for e in service["environment"]]

    entrypoint = service.get("entrypoint")
    if isinstance(entrypoint, list):
        service["entrypoint"] = [re.sub(r"[ \t]*--trust-remote-code(=\S+)?", "", e)
                                 if isinstance(e, str) else e for e in entrypoint]

    # patches: omit degraded ones, wire the rest at the insertion points
    for patch in omitted:
        unwire_patch(service, args, patch)
    for patch in wired:
        wire_patch(service, args, patch, insertion_points, repo_prefix)

    if command is not None or args:
        service["command"] = args
    return service

