"""Compose generator ``[D]``: curated replay, derived compose, dry-run (docs/DESIGN.md §11-§12).

Curated replay reproduces a profile's shipped service definition and flags problems; it never
repairs. Only the param slots change (port, TP, max-model-len, memory utilisation, KV dtype,
max-num-seqs, speculative config, NVLink env), the governed ``--trust-remote-code`` slot is always
stripped, and load-bearing patches are wired at the ``volumes`` / ``entrypoint`` insertion points.
Derived compose builds a patchless vLLM service for a non-curated model that passed the gate.

Everything here is pure: results are ``ComposeOutcome`` values; nothing is written or printed.
Refusals are stable tokens (stratum 6 ``d-refused:<token>``; ``derived-runtime-unsupported:<token>``).
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from club3090.compose.launch import (
    Launch,
    escape_dollars,
    has_control_chars,
    interpolate,
    plain_data,
    render,
    split_volume,
    volume_source,
    volume_target,
)
from club3090.errors import InputError, UsageError
from club3090.fit.kv_formats import canonical_dtype
from club3090.gate.outcome import Notice, NoticeCode, Outcome, Reason, Stop, Stratum
from club3090.model.slug import sanitize_slug
from club3090.version import __version__

if TYPE_CHECKING:
    from club3090.catalog.model import Catalog, Drafter, Patch, Profile
    from club3090.model.spec import ModelSpec

# Stratum-6 refusal tokens, in table order (docs/DESIGN.md §11).
SCOPE = "scope"
OTHER = "other"
PIN_MISMATCH = "pin-mismatch"
TP_OR_KV = "tp-or-kv"
TRC = "trc"
FOUNDATIONAL_DRIFT = "foundational-drift"
DEGRADED_DRIFT = "degraded-drift"
REFUSAL_TOKENS = (PIN_MISMATCH, TP_OR_KV, TRC, FOUNDATIONAL_DRIFT, DEGRADED_DRIFT, SCOPE, OTHER)

# derived_emittable refusals (docs/DESIGN.md §12): "derived-runtime-unsupported:<clause>".
DERIVED_PREFIX = "derived-runtime-unsupported"
DERIVED_KV_FORMATS = ("bf16", "fp16", "fp8_e5m2", "fp8_e4m3")
DERIVED_QUANT_METHODS = ("awq", "gptq", "compressed-tensors", "fp8")
AUTOROUND_METHODS = ("auto-round", "autoround", "auto_round", "intel/auto-round")
DERIVED_COMPUTE_DTYPES = ("bfloat16", "float16")   # canonical names (kvformats.canonical_dtype)


PULLS_MOUNT_ROOT = "/models/club3090/pulls"
MAX_SERVED_NAME = 256
MAX_SLUG = 200
NVLINK_REQUIRED = "required"

GuardRunner = Callable[["Patch", "Profile"], bool]
"""Runs a patch's drift guard for a profile; True = the guard passed. Default: always passes."""


def _guard_pass(patch: "Patch", profile: "Profile") -> bool:
    return True


@dataclass(frozen=True, slots=True)
class PatchReport:
    wired: tuple[str, ...] = ()
    undelivered: tuple[tuple[str, str], ...] = ()     # (patch id, issue)
    excluded: tuple[tuple[str, str], ...] = ()        # (patch id, why)
    degraded: tuple[tuple[str, str], ...] = ()        # (patch id, capability lost)

    def to_json(self) -> dict[str, Any]:
        return {
            "wired": list(self.wired),
            "undelivered": [{"id": p, "issue": i} for p, i in self.undelivered],
            "excluded": [{"id": p, "why": w} for p, w in self.excluded],
            "degraded": [{"id": p, "capability": c} for p, c in self.degraded],
        }


@dataclass(frozen=True, slots=True)
class ComposeOutcome:
    """Result of one generator call. ``text`` is set exactly when something may be written."""

    ok: bool
    outcome: Outcome                      # OK emitted, REFUSED, NEEDS_ACK degraded without acknowledgement
    profile: str
    refusal: str | None = None            # seed token ("pin-mismatch"), or "derived-runtime-unsupported:kv"
    detail: str | None = None             # why, for humans (the arch row's reason, ...)
    degraded: bool = False
    text: str | None = None               # rendered in ``format``
    format: str = "compose"
    launch: Launch | None = None
    patches: PatchReport = field(default_factory=PatchReport)
    notices: tuple[Notice, ...] = ()
    failed_patches: tuple[str, ...] = ()  # patch ids whose drift guard failed (refusal or degraded)
    trust_remote_code: str = ""           # the decision, as written in the header

    @property
    def token(self) -> str | None:
        """The abort reason as ``pull`` prints it: ``d-refused:<token>`` (curated), or the derived token."""
        if self.refusal is None:
            return None
        if self.refusal.startswith(DERIVED_PREFIX):
            return self.refusal
        return f"d-refused:{self.refusal}"

    def stop(self) -> Stop | None:
        """The stratum-6 Stop for a curated refusal (None when emitted or for derived refusals)."""
        if self.refusal is None or self.refusal.startswith(DERIVED_PREFIX):
            return None
        detail: dict[str, object] = {"detail": self.detail} if self.detail else {}
        if self.failed_patches:
            detail["failed_patches"] = self.failed_patches
        return Stop(Stratum.COMPOSE_DRY_RUN, Reason.D_REFUSED, sub_reason=self.refusal, detail=detail)

    def to_json(self, out: str | None = None) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "outcome": self.outcome.value,
            "profile": self.profile,
            "refusal": self.refusal,
            "detail": self.detail,
            "degraded": self.degraded,
            "patches": self.patches.to_json(),
            "out": out,
            "notices": [n.text for n in self.notices],
            "notice_codes": [n.code for n in self.notices],
            "failed_patches": list(self.failed_patches),
        }


def _refuse(profile: str, token: str, detail: str, **kw: Any) -> ComposeOutcome:
    return ComposeOutcome(ok=False, outcome=Outcome.REFUSED, profile=profile, refusal=token,
                          detail=detail, **kw)


# =============================================================================================
# Curated replay
# =============================================================================================

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
    guard = guard_runner or _guard_pass
    profile = catalog.profiles.get(profile_key)
    if profile is None:
        return _refuse(profile_key, OTHER, f"unknown profile {profile_key!r}")

    # 1 scope (Catalog.emittable owns the rule)
    emittable, why = catalog.emittable(profile_key)
    if not emittable:
        return _refuse(profile_key, SCOPE, why or "not emittable")
    engine = catalog.engines[profile.engine]
    runtime = profile.runtime           # emittable: captured, not Genesis-equipped
    if runtime is None:
        return _refuse(profile_key, SCOPE, "no-runtime-capture")
    kv = catalog.kv_formats.get(profile.kv_format)

    # 2 arch
    row = catalog.arch_row_for_model(profile.model)
    if row is None:
        return _refuse(profile_key, OTHER, f"no arch row names model {profile.model!r}")

    # 3 pin
    pin = row.pin_for(engine.pin)
    if pin is None or not pin.loads:
        reason = (pin.reason if pin is not None and pin.reason else
                  f"{engine.pin} is marked loads:false for {row.arch}" if pin is not None else
                  f"{engine.pin} is not a validated pin for {row.arch}")
        return _refuse(profile_key, PIN_MISMATCH, reason)

    # 4 shape
    if profile.tp not in row.tp_divisors:
        return _refuse(profile_key, TP_OR_KV,
                       f"tp {profile.tp} not in {row.arch} tp divisors {list(row.tp_divisors)}")
    if kv is None or profile.kv_format not in engine.supported_kv_formats or "vllm" not in kv.engines:
        return _refuse(profile_key, TP_OR_KV,
                       f"kv format {profile.kv_format} not supported by engine {engine.id}")

    # 5 trust-remote-code: the slot is always stripped; refuse unless evidence says "false"
    evidence = (row.trust_remote_code_evidence or "").strip()
    if row.trust_remote_code != "false" or evidence.lower() in ("", "none", "null"):
        return _refuse(profile_key, TRC,
                       f"{row.arch} trust_remote_code is {row.trust_remote_code!r} "
                       f"without cited evidence for 'false'")
    trc_note = "not emitted (arch evidence: false)"

    # 6-8 patches
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
            return _refuse(profile_key, FOUNDATIONAL_DRIFT,
                           f"drift guard failed for {patch.id} ({patch.on_fail})",
                           failed_patches=(patch.id,),
                           patches=PatchReport(tuple(p.id for p in wired), tuple(undelivered),
                                               tuple(excluded)))
        degraded.append((patch.id, patch.capability or "unknown capability"))
        omitted.append(patch)
    report = PatchReport(tuple(p.id for p in wired), tuple(undelivered), tuple(excluded),
                         tuple(degraded))
    if degraded and not accept_degraded:
        return ComposeOutcome(ok=False, outcome=Outcome.NEEDS_ACK, profile=profile_key,
                              refusal=DEGRADED_DRIFT, degraded=True, patches=report,
                              failed_patches=tuple(p for p, _c in degraded),
                              detail="capability-degraded drift: "
                                     + ", ".join(f"{p} ({c})" for p, c in degraded),
                              trust_remote_code=trc_note)

    # 9 build the service
    try:
        service = _replay_service(runtime.service, profile, catalog, runtime.insertion_points,
                                  wired, omitted, _repo_prefix(profile.compose_path))
    except _ReplayError as exc:
        return _refuse(profile_key, OTHER, str(exc), patches=report)

    notices: list[Notice] = []
    project_dir = f"<club-3090 checkout>/{posixpath.dirname(profile.compose_path)}"
    if _has_relative_mounts(service):
        notices.append(Notice(NoticeCode.PROJECT_DIRECTORY,
                              f"relative mounts resolve from the shipped compose's folder: run with "
                              f"--project-directory {project_dir}", {"project_directory": project_dir}))
    if degraded:
        notices.append(Notice(NoticeCode.DEGRADED, "DEGRADED: drift guard failed, patch omitted: "
                              + ", ".join(f"{p} ({c})" for p, c in degraded),
                              {"patches": tuple({"id": p, "capability": c} for p, c in degraded)}))
    header = _curated_header(profile, catalog, engine.pin, row.arch, trc_note, report,
                             project_dir, out_name or "<out>")
    launch = Launch(kind="curated", service_name=runtime.service_name, service=service,
                    header=header, top_level=runtime.top_level, profile=profile_key)
    text = render(launch, fmt)
    if "--trust-remote-code" in text:  # fail closed: the governed slot never leaks
        return _refuse(profile_key, TRC, "trust-remote-code survived stripping", patches=report)
    return ComposeOutcome(ok=True, outcome=Outcome.OK, profile=profile_key, degraded=bool(degraded),
                          text=text, format=fmt, launch=launch, patches=report,
                          notices=tuple(notices), failed_patches=tuple(p for p, _c in degraded),
                          trust_remote_code=trc_note)


class _ReplayError(Exception):
    pass


def _curated_header(profile: "Profile", catalog: "Catalog", pin: str, arch: str, trc: str,
                    report: PatchReport, project_dir: str, out_name: str) -> tuple[str, ...]:
    def listing(items: Sequence[str]) -> str:
        return ", ".join(items) if items else "none"

    lines = [
        f"generated by club3090 {__version__} - do not edit; regenerate with "
        f"`club3090 compose --profile {profile.key}`",
        f"catalog: {catalog.version} (schema {catalog.schema_version})   profile: {profile.key}"
        f"   shipped: {profile.compose_path}",
        f"engine pin: {pin} (validated loads:true for {arch})",
        f"trust-remote-code: {trc}",
        f"patches wired: {listing(report.wired)}",
        f"patches undelivered: {listing([f'{p} ({i})' for p, i in report.undelivered])}",
        f"patches excluded: {listing([f'{p} ({w})' for p, w in report.excluded])}",
    ]
    if report.degraded:
        lines.append("DEGRADED: patches omitted after drift: "
                     + listing([f"{p} ({c})" for p, c in report.degraded]))
    lines.append(f"run: docker compose --project-directory {project_dir} -f {out_name} up -d")
    return tuple(lines)


def _repo_prefix(compose_path: str) -> str:
    """From the shipped compose's folder back to the club-3090 checkout root (``../`` * depth)."""
    depth = len(PurePosixPath(compose_path).parent.parts)
    return "../" * depth


def _has_relative_mounts(service: Mapping[str, Any]) -> bool:
    for entry in service.get("volumes") or []:
        try:
            src = interpolate(volume_source(entry))
        except ValueError:
            continue
        if src.startswith(".") or (src and not src.startswith("/") and "/" in src):
            return True
    return False


# ---- param slots -----------------------------------------------------------------------------

# The `vllm serve` flags replay sets, and the profile field each takes its value from. The one
# owner of this mapping: which slots a profile has is read from its shipped service, never stored.
# (Also set: the host port <- ``port``, `--speculative-config` <- ``drafter``, NVLINK_MODE <-
# ``requires_nvlink``; see ``_replay_service``.)
PARAM_SLOTS: tuple[tuple[str, str], ...] = (
    ("--tensor-parallel-size", "tp"),
    ("--max-model-len", "max_model_len"),
    ("--gpu-memory-utilization", "mem_util"),
    ("--kv-cache-dtype", "kv_format"),
    ("--max-num-seqs", "max_num_seqs"),
)

_EXPR = re.compile(r"^\$\{[A-Za-z_][A-Za-z0-9_]*(?::?-.*)?\}$", re.S)
_INNER_DEFAULT = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*):?-([^${}]*)\}")


def with_default(token: str, value: str) -> str:
    """Set a slot's value, keeping its ``${VAR:-...}`` override chain when it has one.

    ``"${TP:-1}"`` -> ``"${TP:-2}"``; ``"${MAX_MODEL_LEN:-${CTX:-8}}"`` -> innermost default;
    ``"${TP}"`` -> ``"${TP:-2}"``; a literal (``"1"``) -> the value.
    """
    if _EXPR.match(token):
        matches = list(_INNER_DEFAULT.finditer(token))
        if matches:
            m = matches[-1]
            return token[:m.start(2)] + value + token[m.end(2):]
        return token[:-1] + ":-" + value + "}"
    return value


def _fmt_number(value: float | int) -> str:
    """0.92 -> "0.92", 1.0 -> "1", 2 -> "2" (shortest round-trip form, as the shipped files write)."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return repr(value) if isinstance(value, float) else str(value)


def _flag_index(args: list[Any], flag: str) -> int | None:
    for i, a in enumerate(args):
        if a == flag or (isinstance(a, str) and a.startswith(flag + "=")):
            return i
    return None


def _set_slot(args: list[Any], flag: str, value: str) -> None:
    i = _flag_index(args, flag)
    if i is None:
        return
    if args[i] == flag:
        if i + 1 < len(args):
            args[i + 1] = with_default(str(args[i + 1]), value)
    else:
        args[i] = f"{flag}={with_default(str(args[i]).split('=', 1)[1], value)}"


def _drop_flag(args: list[Any], flag: str, *, takes_value: bool) -> None:
    while True:
        i = _flag_index(args, flag)
        if i is None:
            return
        count = 2 if takes_value and args[i] == flag and i + 1 < len(args) else 1
        del args[i:i + count]


def _spec_config(shipped: str, drafter: "Drafter") -> str:
    n = str(drafter.n_default)
    m = re.search(r"\$\{SPEC_N[A-Z_]*:?-\d+\}", shipped)
    if m:  # keep the shipped env override, with the drafter's default
        n = with_default(m.group(0), n)
    template = drafter.speculative_config_template
    if not template:
        raise _ReplayError(f"drafter {drafter.id} has no speculative-config template")
    local = drafter.local_model_path
    if "{LOCAL_MODEL_PATH}" in template and not local:
        try:
            local = json.loads(interpolate(shipped)).get("model")
        except (ValueError, AttributeError):
            local = None
        if not local:
            raise _ReplayError(f"drafter {drafter.id} needs a local model path")
    return template.replace("{LOCAL_MODEL_PATH}", local or "").replace("{N}", n)


def _replay_service(shipped: Mapping[str, Any], profile: "Profile", catalog: "Catalog",
                    insertion_points: Sequence[str], wired: Sequence["Patch"],
                    omitted: Sequence["Patch"], repo_prefix: str) -> dict[str, Any]:
    service: dict[str, Any] = plain_data(shipped)
    # ports <- default_port
    ports = service.get("ports")
    if isinstance(ports, list) and ports and isinstance(ports[0], str):
        ports[0] = _set_host_port(ports[0], str(profile.port))

    command = service.get("command")
    if isinstance(command, str):
        raise _ReplayError("string-form command is not replayable")
    args: list[Any] = list(command or [])
    for flag, name in PARAM_SLOTS:
        value = _slot_value(profile, catalog, name)
        if value is not None:
            _set_slot(args, flag, value)
    i = _flag_index(args, "--speculative-config")
    if profile.drafter is None:
        _drop_flag(args, "--speculative-config", takes_value=True)
    elif i is not None:
        drafter = catalog.drafters.get(profile.drafter)
        if drafter is None:
            raise _ReplayError(f"unknown drafter {profile.drafter!r}")
        if args[i] == "--speculative-config" and i + 1 < len(args):
            args[i + 1] = _spec_config(str(args[i + 1]), drafter)
        elif args[i] != "--speculative-config":
            args[i] = "--speculative-config=" + _spec_config(str(args[i]).split("=", 1)[1], drafter)
    # governed slot: always stripped
    _drop_flag(args, "--trust-remote-code", takes_value=False)
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
        _unwire(service, args, patch)
    for patch in wired:
        _wire(service, args, patch, insertion_points, repo_prefix)

    if command is not None or args:
        service["command"] = args
    return service


def _slot_value(profile: "Profile", catalog: "Catalog", name: str) -> str | None:
    """The text a ``PARAM_SLOTS`` flag takes for ``profile`` (None: leave the shipped value)."""
    if name == "kv_format":
        kv_arg = catalog.kv_formats[profile.kv_format].vllm_arg
        return kv_arg if kv_arg is not None else "auto"
    value = getattr(profile, name)
    if value is None:
        return None
    return _fmt_number(value) if isinstance(value, float) else str(value)


def _set_host_port(entry: str, port: str) -> str:
    matches = list(re.finditer(r"\$\{PORT:?-(\d+)\}", entry))
    m = matches[-1] if matches else None
    if m is not None:
        return entry[:m.start(1)] + port + entry[m.end(1):]
    parts = split_volume(entry)  # same ${}-aware colon split
    if parts[2]:  # host:published:container
        return f"{parts[0]}:{with_default(parts[1], port)}:{parts[2]}"
    if parts[0]:
        return f"{with_default(parts[0], port)}:{parts[1]}"
    return entry


_SHELL_STARTS = ("bash ", "sh ", "source ", ". ", "python ", "python3 ", "/", "export ")


def invocation_kind(line: str) -> str:
    """``arg`` (vllm serve flags), ``shell`` (an entrypoint line) or ``prose`` (a description
    the catalog records where the shipped file carries the real wiring; never inserted)."""
    text = line.strip()
    if text.startswith("--"):
        return "arg"
    if text.startswith(_SHELL_STARTS):
        return "shell"
    return "prose"


def _script_index(entrypoint: list[Any]) -> int | None:
    """Index of the ``bash -c`` script in an entrypoint list."""
    for i, e in enumerate(entrypoint):
        if e == "-c" and i + 1 < len(entrypoint):
            return i + 1
    return None


def _wire(service: dict[str, Any], args: list[Any], patch: "Patch",
          insertion_points: Sequence[str], repo_prefix: str) -> None:
    if patch.mounts:
        if "volumes" not in insertion_points and "volumes" not in service:
            raise _ReplayError(f"{patch.id}: no volumes insertion point")
        volumes = service.setdefault("volumes", [])
        targets = {volume_target(v) for v in volumes}
        for mount in patch.mounts:
            src, dst, mode = split_volume(mount)
            if dst in targets:
                continue  # the shipped file already wires it
            if src.startswith("./"):
                src = repo_prefix + src[2:]  # catalog mounts are relative to the club-3090 checkout
            elif src and not src.startswith(("/", ".", "$", "~")):
                src = repo_prefix + src
            volumes.append(f"{src}:{dst}" + (f":{mode}" if mode else ""))
            targets.add(dst)
    for line in patch.invocations:
        kind = invocation_kind(line)
        if kind == "prose":
            continue
        if kind == "arg":
            words = shlex.split(line)
            if not _contains_run(args, words):
                args.extend(words)
            continue
        entrypoint = service.get("entrypoint")
        idx = _script_index(entrypoint) if isinstance(entrypoint, list) else None
        if idx is None or not isinstance(entrypoint, list):
            raise _ReplayError(f"{patch.id}: no entrypoint script to insert its invocation into")
        script = str(entrypoint[idx])
        if any(existing.strip() == line.strip() for existing in script.splitlines()):
            continue
        entrypoint[idx] = f"{line}\n{script}"


def _unwire(service: dict[str, Any], args: list[Any], patch: "Patch") -> None:
    targets = {split_volume(m)[1] for m in patch.mounts}
    if service.get("volumes"):
        service["volumes"] = [v for v in service["volumes"] if volume_target(v) not in targets]
    for line in patch.invocations:
        kind = invocation_kind(line)
        if kind == "prose":
            continue
        if kind == "arg":
            words = shlex.split(line)
            start = _find_run(args, words)
            if start is not None:
                del args[start:start + len(words)]
            continue
        entrypoint = service.get("entrypoint")
        idx = _script_index(entrypoint) if isinstance(entrypoint, list) else None
        if idx is not None and isinstance(entrypoint, list):
            kept = [existing for existing in str(entrypoint[idx]).splitlines(keepends=True)
                    if existing.strip() != line.strip()]
            entrypoint[idx] = "".join(kept)


def _find_run(args: list[Any], words: list[str]) -> int | None:
    for i in range(len(args) - len(words) + 1):
        if args[i:i + len(words)] == words:
            return i
    return None


def _contains_run(args: list[Any], words: list[str]) -> bool:
    return _find_run(args, words) is not None


# =============================================================================================
# Derived compose (Pull-Emit-Derived)
# =============================================================================================

def _derived_refuse(profile: str, clause: str, detail: str) -> ComposeOutcome:
    return _refuse(profile, f"{DERIVED_PREFIX}:{clause}", detail)


def derived_compose(spec: "ModelSpec", profile_key: str, catalog: "Catalog", *, snapshot_dir: Path,
                    hf_home: Path, max_model_len: int | None, trust_remote_code: bool,
                    gpu_indices: Sequence[int], fmt: str = "compose",
                    out_name: str | None = None) -> ComposeOutcome:
    """A patchless vLLM service for a non-curated model that passed the gate.

    ``max_model_len`` overrides the profile's (the fit engine's largest fitting
    context); ``gpu_indices`` are the visible GPUs, of which the first ``tp`` are used.
    Raises ``InputError`` for names or paths carrying control characters, ``UsageError`` for an
    unknown profile.
    """
    profile = catalog.profiles.get(profile_key)
    if profile is None:
        raise UsageError(f"unknown profile {profile_key!r}")
    for label, value in (("model reference", spec.ref), ("snapshot path", str(snapshot_dir)),
                         ("HF_HOME", str(hf_home))):
        if has_control_chars(value):
            raise InputError(label, "contains control characters; refusing to write a compose")
    if not str(snapshot_dir).startswith("/"):
        raise InputError("snapshot path", f"{snapshot_dir} is not absolute; a relative bind mount "
                                          "would resolve from the compose file's folder")
    engine = catalog.engines.get(profile.engine)
    if (engine is None or engine.type != "vllm" or engine.install_method != "docker_image"
            or engine.required_genesis or engine.vendored_overlays):
        return _derived_refuse(profile_key, "engine-install-method",
                               f"engine {profile.engine} is not an overlay-free docker image")
    if profile.required_engine_features:
        return _derived_refuse(profile_key, "overlay-feature",
                               "profile requires " + ", ".join(profile.required_engine_features))
    if profile.kv_format not in DERIVED_KV_FORMATS:
        return _derived_refuse(profile_key, "kv", f"kv format {profile.kv_format}")
    if profile.drafter is not None:
        return _derived_refuse(profile_key, "drafter", f"profile uses drafter {profile.drafter}")
    tp = profile.tp
    if len(gpu_indices) < tp or tp < 1:
        return _derived_refuse(profile_key, "gpu-count",
                               f"{len(gpu_indices)} GPU(s) visible, tp {tp} needs {tp}")
    selected = [int(g) for g in list(gpu_indices)[:tp]]

    compute = canonical_dtype(spec.compute_dtype or spec.arch.torch_dtype or "")
    if compute not in DERIVED_COMPUTE_DTYPES:
        compute = None
    quant_args: list[str] = []
    method = (spec.quantization.method.lower() if spec.quantization is not None else None)
    if method is not None:
        if method in AUTOROUND_METHODS:
            return _derived_refuse(profile_key, "unsupported-quant-for-derived:autoround",
                                   "AutoRound checkpoints are not dispatched in derived composes")
        if method not in DERIVED_QUANT_METHODS:
            return _derived_refuse(profile_key, "unsupported-quant-for-derived",
                                   f"quantization {method}")
        if compute is None:
            return _derived_refuse(profile_key, "unsupported-quant-for-derived:missing-torch-dtype",
                                   f"no compute dtype for {method}")
        quant_args = ["--quantization", method, "--dtype", compute]
    else:
        raw = (spec.compute_dtype or spec.arch.torch_dtype or "")
        if not raw:
            return _derived_refuse(profile_key, "unsupported-quant-for-derived:missing-torch-dtype",
                                   "no torch_dtype in the checkpoint")
        if compute is None:
            return _derived_refuse(profile_key, "unsupported-quant-for-derived",
                                   f"dtype {raw}")
        quant_args = ["--dtype", compute]

    kv_arg = catalog.kv_formats[profile.kv_format].vllm_arg if profile.kv_format in catalog.kv_formats else None
    slug = sanitize_slug(spec.ref, max_len=MAX_SLUG)
    served = slug[:MAX_SERVED_NAME]
    model_path = f"{PULLS_MOUNT_ROOT}/{slug}"
    ctx = max_model_len if max_model_len is not None else profile.max_model_len
    port = str(profile.port)
    devices = ",".join(str(g) for g in selected)

    command = [model_path, "--served-model-name", served,
               "--tensor-parallel-size", str(tp),
               "--max-model-len", str(int(ctx))]
    if profile.mem_util is not None:
        command += ["--gpu-memory-utilization", _fmt_number(profile.mem_util)]
    command += ["--max-num-seqs", str(profile.max_num_seqs)]
    if kv_arg is not None:
        command += ["--kv-cache-dtype", kv_arg]
    command += quant_args
    if trust_remote_code:
        command.append("--trust-remote-code")
    command += ["--host", "0.0.0.0", "--port", port]

    service: dict[str, Any] = {
        "image": escape_dollars(engine.image),
        "container_name": f"club3090-{slug}"[:128],
        "restart": "no",
        "ports": [f"{port}:{port}"],
        "volumes": [{"type": "bind", "source": escape_dollars(str(snapshot_dir)),
                     "target": model_path, "read_only": True}],
        "environment": [f"NVIDIA_VISIBLE_DEVICES={devices}", "HF_HUB_OFFLINE=1",
                        "TRANSFORMERS_OFFLINE=1", "VLLM_NO_USAGE_STATS=1"],
        "shm_size": "16gb",
        "ipc": "host",
        "deploy": {"resources": {"reservations": {"devices": [
            {"driver": "nvidia", "device_ids": [str(g) for g in selected], "capabilities": ["gpu"]}]}}},
        "entrypoint": ["vllm", "serve"],
        "command": [escape_dollars(a) for a in command],
    }
    notices: list[Notice] = []
    snap = PurePosixPath(posixpath.normpath(str(snapshot_dir)))
    if PurePosixPath(posixpath.normpath(str(hf_home))) not in (snap, *snap.parents):
        notices.append(Notice(NoticeCode.SNAPSHOT_OUTSIDE_HF_HOME, "the snapshot folder is outside HF_HOME",
                              {"snapshot": str(snapshot_dir), "hf_home": str(hf_home)}))
    trc_note = "emitted (the gate permitted it)" if trust_remote_code else "not emitted"
    header = (
        f"generated by club3090 {__version__} - do not edit; derived compose (patchless)",
        f"catalog: {catalog.version} (schema {catalog.schema_version})   profile-like: {profile_key}",
        f"model: {_one_line(spec.ref)}" + (f"@{spec.commit}" if spec.commit else ""),
        f"engine pin: {engine.pin}   image: {engine.image}",
        f"trust-remote-code: {trc_note}",
        "patches wired: none (derived composes are patchless)",
        f"run: docker compose -f {out_name or '<out>'} up -d",
    )
    launch = Launch(kind="derived", service_name=f"vllm-{slug}"[:128], service=service,
                    header=header, profile=profile_key)
    return ComposeOutcome(ok=True, outcome=Outcome.OK, profile=profile_key,
                          text=render(launch, fmt), format=fmt, launch=launch,
                          notices=tuple(notices), trust_remote_code=trc_note)


def _one_line(text: str) -> str:
    return re.sub(r"[\x00-\x1f\x7f\x85\u2028\u2029]", " ", text)
