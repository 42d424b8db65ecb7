"""Capture bundles: gate-only bundles on hard stops, redaction, fingerprints, the ``.last`` marker.

Layout (docs/DESIGN.md, the Loop), under a captures root (by default ``./.pull-captures``)::

    <root>/<sanitized-slug>/<UTC %Y%m%dT%H%M%SZ>[-N]/pt1-gate.json
                                                    [pt2-download.json pt3-boot.json
                                                     pt4-smoke.json pt5-override-capture.json]
                                                    manifest.json
    <root>/.last            one line: the newest bundle, relative to <root>

Everything written is key-sorted, indented JSON that went through ``redact`` first; writes
go through ``fsutil`` (temp file + rename) and an existing bundle folder is never reused.
Reading (``read_bundle``) validates schema 1 ([E]) and schema 2 (gate-only) bundles and
raises ``InputError`` naming the offending file.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, is_dataclass
from datetime import datetime, timezone
from decimal import Decimal
from enum import Enum
from pathlib import Path, PurePath
from types import MappingProxyType
from typing import Any

from club3090.edges.files import atomic_write_text, inside, read_bytes_capped, read_json_capped
from club3090.errors import InputError, UnsafePath
from club3090.model.slug import sanitize_slug
from club3090.reports.redact import Redactor
from club3090.version import __version__

CAPTURES_DIRNAME = ".pull-captures"   # under the working directory; the CLI's default root
LAST_FILE = ".last"
MANIFEST_FILE = "manifest.json"
RECEIPT_FILE = "receipt.json"          # an [E] boot's calibration receipt, next to the points
TS_FORMAT = "%Y%m%dT%H%M%SZ"
BUNDLE_JSON_LIMIT = 4 * 1024 * 1024   # pt3 log excerpts are <= 64 KiB; anything near this is junk
SEP = "\x1f"
LAST_FILE_LIMIT = 4096                 # one relative path

POINT_FILES: Mapping[str, str] = MappingProxyType({
    "gate": "pt1-gate.json",
    "download": "pt2-download.json",
    "boot": "pt3-boot.json",
    "smoke": "pt4-smoke.json",
    "override_capture": "pt5-override-capture.json",
})

# first-class manifest keys; the consensus and dedup keys are drawn from them
MANIFEST_KEYS: tuple[str, ...] = (
    "model", "quant_label", "arch_family", "topology_class", "engine_pin", "engine_version",
    "kv_calc_version", "selected_ctx", "kv_format", "smoke_capability_set",
    "topology_summary_canonical", "model_id",
    # ours, beyond upstream: the curated profile a `club3090 swap` cloned (None otherwise)
    "swap_of",
)
BOOKKEEPING_KEYS: tuple[str, ...] = (
    "submission_fingerprint", "failure_class", "club3090_commit", "outcome", "capture_points",
)
# what the gate point of a bundle records; the caller's ``gate`` mapping may set exactly these
GATE_KEYS: tuple[str, ...] = (
    "abort_reason", "detail", "confidence", "raw_verdict", "terminal", "profile_like",
    "hardware_sm", "predicted_b_breakdown",
    # ours, beyond upstream: where the stop happened, so a maintainer need not re-run the gate
    "stratum", "stratum_name", "c0", "path", "notices",
)
OUTCOMES = frozenset({"ok", "partial", "failed", "hard-block"})

CONSENSUS_FIELDS: tuple[str, ...] = (
    "model", "quant_label", "arch_family", "topology_class", "engine_pin", "kv_calc_version",
    "selected_ctx", "kv_format", "smoke_capability_set",
)
DEDUP_FIELDS: tuple[str, ...] = (
    "model_id", "quant_label", "arch_family", "kv_calc_version", "engine_version",
    "failure_class", "topology_class",
)
FINGERPRINT_FIELDS: tuple[str, ...] = (
    "model", "club3090_commit", "topology_summary_canonical", "quant_label", "kv_calc_version",
    "engine_version", "utc_ts", "outcome",
)


# --- JSON -------------------------------------------------------------------------------------

def to_jsonable(obj: Any) -> Any:
    """Plain JSON values from what the gate hands us (enums, Decimals, dataclasses, paths...)."""
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, Enum):
        return to_jsonable(obj.value)
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        if not math.isfinite(obj):
            raise TypeError(f"cannot store non-finite number {obj!r} in a bundle")
        return obj
    if isinstance(obj, Decimal):
        as_float = float(obj)
        return as_float if math.isfinite(as_float) and Decimal(repr(as_float)) == obj else str(obj)
    if isinstance(obj, PurePath):
        return str(obj)
    if isinstance(obj, Mapping):
        return {str(to_jsonable(k)): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (frozenset, set)):
        return sorted((to_jsonable(v) for v in obj), key=lambda v: json.dumps(v, sort_keys=True))
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    to_json = getattr(obj, "to_json", None)
    if callable(to_json):
        return to_jsonable(to_json())
    if is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in fields(obj)}
    raise TypeError(f"cannot store {type(obj).__name__} in a bundle")


def dump_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


# --- fingerprints and keys --------------------------------------------------------------------

def _part(value: Any) -> str:
    """One element of a joined key: None -> "", lists -> sorted comma-joined, else str()."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple, set, frozenset)):
        return ",".join(sorted(_part(v) for v in value))
    return str(value)


def _normalized(manifest: Mapping[str, Any], name: str) -> str:
    value = _part(manifest.get(name))
    return value.lower() if name == "quant_label" else value


def consensus_key(manifest: Mapping[str, Any]) -> tuple[str, ...]:
    """The 9-tuple two bundles must share to count as the same observation (the Loop's consensus)."""
    return tuple(_normalized(manifest, name) for name in CONSENSUS_FIELDS)


def dedup_key(manifest: Mapping[str, Any], failure_class: str | None = None) -> tuple[str, ...]:
    """The 7-tuple that decides "same issue" (the Loop's dedup); ``failure_class`` overrides the
    manifest's (gate-only bundles carry ``null`` and are classified at submit time)."""
    values = dict(manifest)
    if failure_class is not None:
        values["failure_class"] = failure_class
    return tuple(_normalized(values, name) for name in DEDUP_FIELDS)


def dedup_hash(key: Sequence[str]) -> str:
    """First 12 hex of sha256 over the ``\\x1f``-joined dedup tuple."""
    return hashlib.sha256(SEP.join(_part(v) for v in key).encode("utf-8")).hexdigest()[:12]


def submission_fingerprint(manifest: Mapping[str, Any]) -> str:
    """sha256 hex of ``\\x1f``-joined [model, club3090_commit, topology_summary_canonical,
    quant_label, kv_calc_version, engine_version, utc_ts, outcome] (None -> empty)."""
    joined = SEP.join(_part(manifest.get(name)) for name in FINGERPRINT_FIELDS)
    return hashlib.sha256(joined.encode("utf-8")).hexdigest()


def kv_calc_version(predictor_id: str, estimator_sources: Sequence[Path],
                    calibration_files: Sequence[Path]) -> str:
    """``<predictor-id>+<12 hex>`` over the estimator sources (in the order given), then each
    calibration file sorted by name as (name, bytes), all ``\\x1f``-joined; the bare id if
    any file is unreadable."""
    parts: list[bytes] = []
    try:
        for path in estimator_sources:
            parts.append(_read_small(Path(path)))
        for path in sorted((Path(p) for p in calibration_files), key=lambda p: (p.name, str(p))):
            parts.append(path.name.encode("utf-8"))
            parts.append(_read_small(path))
    except (OSError, InputError):
        return predictor_id
    return f"{predictor_id}+{hashlib.sha256(SEP.encode().join(parts)).hexdigest()[:12]}"


def _read_small(path: Path, limit: int = 16 * 1024 * 1024) -> bytes:
    return read_bytes_capped(path, limit=limit)


def topology_fields(gpus: Sequence[tuple[str, int]]) -> dict[str, str | None]:
    """``topology_class`` (``"{N}x{min MiB}MiB"``) and ``topology_summary_canonical``
    (sorted ``[(name, mib), ...]``) from (name, memory_bytes) pairs of the GPUs in use."""
    pairs = sorted((str(name), int(memory) // 2**20) for name, memory in gpus)
    if not pairs:
        return {"topology_class": None, "topology_summary_canonical": None}
    return {"topology_class": f"{len(pairs)}x{min(m for _, m in pairs)}MiB",
            "topology_summary_canonical": repr(pairs)}


def club3090_commit() -> str:
    """The git commit of the club3090 source tree we run from, else the package version."""
    try:
        sha = _git_head(Path(__file__).resolve().parent)
    except (OSError, ValueError, UnicodeDecodeError):
        sha = None
    return sha or __version__


def _git_head(package_dir: Path) -> str | None:
    root = package_dir.parent.parent   # <root>/src/club3090
    if package_dir.parent.name != "src" or not (root / ".git").exists():
        return None  # an installed copy: whatever git repo surrounds it is not ours
    gitdir = root / ".git"
    if gitdir.is_file():  # a worktree: "gitdir: <path>"
        gitdir = (root / gitdir.read_text("utf-8")[:4096].split(":", 1)[1].strip()).resolve()
    common = gitdir
    if (gitdir / "commondir").is_file():
        common = (gitdir / (gitdir / "commondir").read_text("utf-8")[:4096].strip()).resolve()
    head = (gitdir / "HEAD").read_text("utf-8")[:4096].strip()
    sha = head
    if head.startswith("ref: "):
        ref = head[5:].strip()
        sha = ""
        for base in (gitdir, common):
            if (base / ref).is_file():
                sha = (base / ref).read_text("utf-8")[:4096].strip()
                break
        else:
            packed = common / "packed-refs"
            if packed.is_file():
                for line in packed.read_text("utf-8")[:1 << 20].splitlines():
                    if line.endswith(" " + ref):
                        sha = line.split(" ", 1)[0]
                        break
    return sha if re.fullmatch(r"[0-9a-f]{40}", sha) else None


# --- writing ----------------------------------------------------------------------------------

def write_gate_bundle(root: Path, *, slug: str, gate: Mapping[str, Any],
                      manifest_fields: Mapping[str, Any], now: datetime,
                      home: str | os.PathLike[str] | None = None, user: str | None = None,
                      host: str | None = None, secrets: Iterable[str] = (),
                      local_paths: Iterable[str] = ()) -> Path:
    """Write a gate-only bundle (schema 2) for a hard stop and point ``<root>/.last`` at it.

    ``root`` is the captures folder (``./.pull-captures`` by default, the caller decides).
    ``gate`` must hold ``abort_reason`` (the printed token, e.g.
    ``engine-support-unknown/no-arch-row`` or ``hard-block``) and may hold any of
    ``GATE_KEYS``; ``manifest_fields`` any of ``MANIFEST_KEYS`` plus ``club3090_commit``
    (keys the gate never reached stay ``null``). ``now`` must be timezone-aware; ``secrets``
    are literal strings to redact (``Settings.redaction_secrets``).
    Returns the bundle folder. Raises ValueError/TypeError for caller mistakes and OSError
    for file-system failures; it never changes the gate decision, so callers should report
    an OSError as a notice, not abort.
    """
    abort_reason = to_jsonable(gate.get("abort_reason"))
    if not isinstance(abort_reason, str) or not abort_reason:
        raise ValueError("a gate bundle needs a non-empty abort_reason")
    return _write_bundle(root, schema=2, slug=slug, gate=gate, points={}, manifest_fields=manifest_fields,
                         outcome="hard-block", now=now,
                         redactor=Redactor(home=home, user=user, host=host, secrets=secrets,
                                           local_paths=[*local_paths, *local_folder(slug)]))


POINT_KEYS: Mapping[str, tuple[str, ...]] = MappingProxyType({
    "download": ("ok", "files", "bytes", "sha_verified", "failure"),
    "boot": ("ok", "seconds", "failure"),
    "smoke": ("smoke_capability_set", "results", "partial", "results_detail"),
    "override_capture": ("predicted_b_breakdown", "actual", "predicted_vs_actual_delta_mib",
                         "exit_error_summary"),
})


def write_e_bundle(root: Path, *, slug: str, gate: Mapping[str, Any], points: Mapping[str, Mapping[str, Any]],
                   manifest_fields: Mapping[str, Any], outcome: str, now: datetime,
                   home: str | os.PathLike[str] | None = None, user: str | None = None,
                   host: str | None = None, secrets: Iterable[str] = (),
                   local_paths: Iterable[str] = (), boot_log: str | None = None) -> Path:
    """Write a schema-1 bundle for a run that entered Pull-Emit-Derived ``[E]`` and point
    ``<root>/.last`` at it.

    ``gate`` holds ``GATE_KEYS`` (pt1, schema 1, no abort); ``points`` maps ``download`` /
    ``boot`` / ``smoke`` / ``override_capture`` to their keys (``POINT_KEYS`` are required, a
    ``detail`` and other extras are kept); only the stages that ran are given. ``outcome`` is
    ``ok``, ``partial`` or ``failed``. Same redaction, atomic writes and errors as
    ``write_gate_bundle``. ``boot_log`` (vLLM's start-up output) adds ``receipt.json``, the
    boot's calibration receipt, when it holds start-up lines.
    """
    for name, point in points.items():
        if name not in POINT_KEYS:
            raise ValueError(f"unknown capture point {name!r}; allowed: {list(POINT_KEYS)}")
        missing = [k for k in POINT_KEYS[name] if k not in point]
        if missing:
            raise ValueError(f"capture point {name!r} lacks {missing}")
    if outcome not in ("ok", "partial", "failed"):
        raise ValueError(f"an [E] bundle's outcome is ok, partial or failed, not {outcome!r}")
    redactor = Redactor(home=home, user=user, host=host, secrets=secrets,
                        local_paths=[*local_paths, *local_folder(slug)])
    bundle = _write_bundle(root, schema=1, slug=slug, gate=gate, points=points, manifest_fields=manifest_fields,
                           outcome=outcome, now=now, redactor=redactor)
    if boot_log:
        from club3090.reports.receipt import receipt_for_boot
        receipt = receipt_for_boot(boot_log, manifest_fields, redactor, club3090_commit=club3090_commit())
        if receipt is not None:
            atomic_write_text(bundle / RECEIPT_FILE, dump_json(receipt), overwrite=False)
    return bundle


def local_folder(source: str) -> list[str]:
    """``[source]`` when it names a folder on this machine (a model given as ``DIR``), else ``[]``:
    such a name is local to this machine and is redacted like a path."""
    if not source:
        return []
    try:
        path = Path(source).expanduser()
    except RuntimeError:   # "~someone/x" for a user this machine does not know: not a folder here
        path = Path(source)
    try:
        return [source] if path.is_dir() else []
    except (OSError, ValueError):
        return [source]


def _write_bundle(root: Path, *, schema: int, slug: str, gate: Mapping[str, Any],
                  points: Mapping[str, Mapping[str, Any]], manifest_fields: Mapping[str, Any],
                  outcome: str, now: datetime, redactor: Redactor) -> Path:
    """The one bundle writer: validate, fill, redact, fingerprint, write atomically, move ``.last``.

    Schema 2 (gate-only) marks the gate point ``is_gate_only``; schema 1 flags pt5 as a
    calibration signal that is not validated.
    """
    unknown = sorted(set(gate) - set(GATE_KEYS))
    if unknown:
        raise ValueError(f"unknown gate keys for a bundle: {unknown}; allowed: {list(GATE_KEYS)}")
    unknown = sorted(set(manifest_fields) - set(MANIFEST_KEYS) - {"club3090_commit"})
    if unknown:
        raise ValueError(f"unknown manifest keys for a bundle: {unknown}; allowed: {list(MANIFEST_KEYS)}")
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError("now must be timezone-aware (inject datetime.now(timezone.utc))")
    utc_ts = now.astimezone(timezone.utc).strftime(TS_FORMAT)

    gate_point: dict[str, Any] = {name: None for name in GATE_KEYS}
    gate_point.update(detail={}, notices=[])
    gate_point.update(gate)
    gate_point.update(schema=schema, point="gate", slug=slug)
    if schema == 2:
        gate_point.update(is_gate_only=True)
    files: dict[str, dict[str, Any]] = {"gate": gate_point}
    for name in POINT_KEYS:  # fixed order
        if name in points:
            body = dict(points[name])
            body.update(point=name)
            if name == "override_capture":
                body["calibration_signal_not_validated"] = True
            files[name] = body

    manifest: dict[str, Any] = {name: None for name in MANIFEST_KEYS}
    manifest.update(model=slug, model_id=slug)
    manifest.update(manifest_fields)
    manifest.update(schema=schema, slug=slug, utc_ts=utc_ts, outcome=outcome, failure_class=None,
                    capture_points=list(files))
    if not manifest.get("club3090_commit"):
        manifest["club3090_commit"] = club3090_commit()

    files = {name: redactor.value(to_jsonable(body)) for name, body in files.items()}
    manifest = redactor.value(to_jsonable(manifest))
    # fingerprint what is on disk, so the Loop can re-derive it from the redacted manifest
    manifest["submission_fingerprint"] = submission_fingerprint(manifest)

    root = Path(root)
    bundle = _fresh_dir(root / sanitize_slug(redactor.text(slug)), utc_ts)   # no secret in a folder name
    for name, body in files.items():
        atomic_write_text(bundle / POINT_FILES[name], dump_json(body), overwrite=False)
    atomic_write_text(bundle / MANIFEST_FILE, dump_json(manifest), overwrite=False)
    atomic_write_text(root / LAST_FILE, bundle.relative_to(root).as_posix() + "\n")
    return bundle


def _fresh_dir(parent: Path, name: str) -> Path:
    parent.mkdir(parents=True, exist_ok=True)
    for attempt in range(1, 1000):
        candidate = parent / (name if attempt == 1 else f"{name}-{attempt}")
        try:
            candidate.mkdir()
        except FileExistsError:
            continue
        return candidate
    raise FileExistsError(f"{parent}: too many bundles named {name}")


# --- reading ----------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Bundle:
    path: Path
    schema: int                                   # 1 ([E] bundle) or 2 (gate-only)
    manifest: Mapping[str, Any]
    points: Mapping[str, Mapping[str, Any]]       # by point name: "gate", "boot", ...

    @property
    def is_gate_only(self) -> bool:
        return self.schema == 2

    @property
    def gate(self) -> Mapping[str, Any] | None:
        return self.points.get("gate")


def read_bundle(directory: Path) -> Bundle:
    """Read and validate one bundle folder; malformed -> InputError naming the file."""
    directory = Path(directory)
    if not directory.is_dir():
        raise InputError(str(directory), "not a capture bundle folder")
    manifest_path = directory / MANIFEST_FILE
    if not manifest_path.is_file():
        raise InputError(str(manifest_path), "missing; not a capture bundle")
    manifest = _read_object(manifest_path)
    schema = manifest.get("schema")
    if schema not in (1, 2) or isinstance(schema, bool):
        raise InputError(str(manifest_path), f"unsupported schema {schema!r} (this reader knows 1 and 2)")
    missing = [k for k in (*MANIFEST_KEYS, *BOOKKEEPING_KEYS, "slug", "utc_ts") if k not in manifest]
    if missing:
        raise InputError(str(manifest_path), f"missing keys: {', '.join(missing)}")
    if manifest["failure_class"] is not None:
        raise InputError(str(manifest_path), "failure_class must be null in a captured bundle")
    if manifest["outcome"] not in OUTCOMES:
        raise InputError(str(manifest_path), f"unknown outcome {manifest['outcome']!r}")
    points_listed = manifest["capture_points"]
    if not isinstance(points_listed, list) or not all(p in POINT_FILES for p in points_listed):
        raise InputError(str(manifest_path), f"capture_points must list points from {list(POINT_FILES)}")

    points: dict[str, Mapping[str, Any]] = {}
    for name, filename in POINT_FILES.items():
        path = directory / filename
        if not path.is_file():
            if name in points_listed:
                raise InputError(str(path), "listed in capture_points but missing")
            continue
        point = _read_object(path)
        if point.get("point") != name:
            raise InputError(str(path), f"point is {point.get('point')!r}, expected {name!r}")
        points[name] = MappingProxyType(point)

    if schema == 2:
        gate_path = directory / POINT_FILES["gate"]
        gate = points.get("gate")
        if gate is None:
            raise InputError(str(gate_path), "a gate-only bundle needs its gate point")
        if manifest["outcome"] != "hard-block":
            raise InputError(str(manifest_path), "a gate-only bundle has outcome 'hard-block'")
        if gate.get("schema") != 2 or gate.get("is_gate_only") is not True:
            raise InputError(str(gate_path), "expected schema 2 with is_gate_only true")
        if not isinstance(gate.get("abort_reason"), str) or not gate["abort_reason"]:
            raise InputError(str(gate_path), "abort_reason missing or empty")
    return Bundle(directory, int(schema), MappingProxyType(manifest), MappingProxyType(points))


def _read_object(path: Path) -> dict[str, Any]:
    data = read_json_capped(path, limit=BUNDLE_JSON_LIMIT)
    if not isinstance(data, dict):
        raise InputError(str(path), "expected a JSON object")
    return data


def latest_bundle(root: Path) -> Path | None:
    """The bundle ``<root>/.last`` names, if it still exists inside ``root``; else None."""
    root = Path(root)
    try:
        raw = read_bytes_capped(root / LAST_FILE, limit=LAST_FILE_LIMIT).decode("utf-8")
    except (InputError, UnicodeDecodeError):
        return None
    line = raw.strip().splitlines()[0].strip() if raw.strip() else ""
    try:
        candidate = inside(root, line.rstrip("/"))
    except UnsafePath:
        return None
    return candidate if candidate.is_dir() else None
