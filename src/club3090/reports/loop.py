"""The Loop's trust pipeline: raw -> candidate -> validated -> tier1, by consensus.

Bundles: each is read and validated (``read_bundle``), its ``submission_fingerprint`` re-derived
from the manifest on disk; a bundle whose fingerprint matches and whose smoke has at least one
green capability and none red is a *candidate*. Only green capabilities graduate. Candidates
sharing the 9-tuple consensus key form a group; a group is *validated* when its topology class
is sane (``NxMMiB``, N > 0, 0 < MiB <= 1 TiB) and two distinct bundles agree, or a maintainer
promoted it. A validated group of a curated model is *tier1* and emits a calibration row with
``status: candidate-tier1``; a derived one stops at ``derived-tier1-deferred``.

Receipts: each is validated; receipts with the same serving shape and the same measured terms
(to the log's rounding) are one observation; two distinct logs make the shape *validated*.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from club3090.errors import InputError
from club3090.reports.capture import (
    CONSENSUS_FIELDS,
    MANIFEST_FILE,
    RECEIPT_FILE,
    Bundle,
    consensus_key,
    read_bundle,
    submission_fingerprint,
)
from club3090.reports.receipt import MEASURED_TERMS, RECEIPT_KIND, shape_key, validate_receipt

RAW, CANDIDATE, VALIDATED, TIER1 = "raw", "candidate", "validated", "tier1"
DERIVED_DEFERRED = "derived-tier1-deferred"
_TOPOLOGY = re.compile(r"(\d+)x(\d+)MiB\Z")
MAX_MIB = 1024 * 1024      # 1 TiB
WALK_DEPTH = 4
WALK_LIMIT = 10_000


@dataclass(frozen=True, slots=True)
class BundleRecord:
    path: str
    state: str                              # raw | candidate | rejected
    reason: str                             # why it stopped where it did
    consensus_key: tuple[str, ...] = ()
    fingerprint: str = ""
    green: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Group:
    kind: str                               # "bundles" | "receipts"
    key: tuple[str, ...]
    state: str                              # candidate | validated | tier1
    members: tuple[str, ...]                # distinct fingerprints / log digests
    capabilities: tuple[str, ...] = ()      # green in every member (bundles)
    note: str = ""
    calibration_row: Mapping[str, Any] | None = None
    shape: Mapping[str, Any] = field(default_factory=dict)
    measured: Mapping[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> str:
        import hashlib
        return hashlib.sha256("\x1f".join(self.key).encode("utf-8")).hexdigest()[:12]

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "key": list(self.key), "state": self.state,
                "members": list(self.members), "capabilities": list(self.capabilities), "note": self.note,
                "calibration_row": dict(self.calibration_row) if self.calibration_row else None,
                "shape": dict(self.shape), "measured": dict(self.measured)}


@dataclass(frozen=True, slots=True)
class LoopState:
    bundles: tuple[BundleRecord, ...]
    groups: tuple[Group, ...]
    rejected: tuple[tuple[str, str], ...]   # (path, reason) for inputs that failed validation

    def to_json(self) -> dict[str, Any]:
        return {"bundles": [vars_(b) for b in self.bundles], "groups": [g.to_json() for g in self.groups],
                "rejected": [{"path": p, "reason": r} for p, r in self.rejected]}


def vars_(record: BundleRecord) -> dict[str, Any]:
    return {"path": record.path, "state": record.state, "reason": record.reason,
            "consensus_key": list(record.consensus_key), "fingerprint": record.fingerprint,
            "green": list(record.green)}


def topology_ok(topology: object) -> bool:
    m = _TOPOLOGY.match(str(topology or ""))
    return m is not None and int(m.group(1)) > 0 and 0 < int(m.group(2)) <= MAX_MIB


def assess_bundle(bundle: Bundle) -> BundleRecord:
    """raw or candidate, with the reason; the fingerprint is re-derived, never trusted."""
    manifest = bundle.manifest
    path = str(bundle.path)
    claimed = str(manifest.get("submission_fingerprint") or "")
    derived = submission_fingerprint(manifest)
    key = consensus_key(manifest)
    if claimed != derived:
        return BundleRecord(path, "rejected", "submission_fingerprint does not match the manifest", key, claimed)
    if bundle.is_gate_only:
        return BundleRecord(path, RAW, "gate-only bundle: nothing served", key, derived)
    results = ((bundle.points.get("smoke") or {}).get("results") or {})
    if not isinstance(results, Mapping):
        results = {}
    green = tuple(sorted(c for c, v in results.items() if v == "green"))
    red = sorted(c for c, v in results.items() if v == "red")
    if red:
        return BundleRecord(path, RAW, f"red capabilities: {', '.join(red)}", key, derived, green)
    if not green:
        return BundleRecord(path, RAW, "no green capability", key, derived)
    return BundleRecord(path, CANDIDATE, "fingerprint re-derived; smoke green", key, derived, green)


def find_inputs(paths: Iterable[Path]) -> tuple[list[Path], list[Path]]:
    """(bundle folders, receipt files) under the given paths, depth- and count-bounded."""
    bundles: list[Path] = []
    receipts: list[Path] = []
    seen = 0

    def walk(path: Path, depth: int) -> None:
        nonlocal seen
        seen += 1
        if seen > WALK_LIMIT:
            raise InputError(str(path), f"more than {WALK_LIMIT} entries; point at a smaller folder")
        if path.is_symlink():
            return
        if path.is_file():
            if path.suffix == ".json" and path.name != MANIFEST_FILE and not path.name.startswith("pt"):
                receipts.append(path)
            return
        if not path.is_dir():
            return
        if (path / MANIFEST_FILE).is_file():
            bundles.append(path)
            if (path / RECEIPT_FILE).is_file():
                receipts.append(path / RECEIPT_FILE)
            return
        if depth >= WALK_DEPTH:
            return
        for child in sorted(path.iterdir()):
            if child.name.startswith("_") or child.name.startswith("."):
                continue   # the review and dedup queues, .last
            walk(child, depth + 1)

    for p in paths:
        walk(Path(p), 0)
    return bundles, receipts


def _receipts_in(data: object) -> list[Any]:
    if isinstance(data, Mapping) and data.get("kind") == RECEIPT_KIND:
        return [data]
    if isinstance(data, Mapping) and isinstance(data.get("receipts"), list):
        return list(data["receipts"])
    return []


def _measured_signature(measured: Mapping[str, Any]) -> tuple[Any, ...]:
    return tuple(measured.get(t) for t in MEASURED_TERMS)


def consensus(records: Sequence[BundleRecord], receipts: Sequence[Mapping[str, Any]], *,
              curated_models: frozenset[str] = frozenset(),
              promoted_keys: frozenset[tuple[str, ...]] = frozenset()) -> list[Group]:
    """Groups by the 9-tuple (bundles) and by serving shape (receipts), each with its state."""
    groups: list[Group] = []
    by_key: dict[tuple[str, ...], list[BundleRecord]] = {}
    for rec in records:
        if rec.state == CANDIDATE:
            by_key.setdefault(rec.consensus_key, []).append(rec)
    for key, members in sorted(by_key.items()):
        prints = tuple(sorted({m.fingerprint for m in members}))
        caps = tuple(sorted(set.intersection(*(set(m.green) for m in members))))
        manifest_view = dict(zip(CONSENSUS_FIELDS, key, strict=True))
        topology = manifest_view.get("topology_class")
        promoted = key in promoted_keys
        if not topology_ok(topology):
            groups.append(Group("bundles", key, CANDIDATE, prints, caps, f"topology {topology!r} is not NxMMiB"))
            continue
        if len(prints) < 2 and not promoted:
            groups.append(Group("bundles", key, CANDIDATE, prints, caps, "needs a second matching bundle"))
            continue
        why = "maintainer promotion" if promoted and len(prints) < 2 else f"{len(prints)} matching bundles"
        if manifest_view.get("model") in curated_models:
            row = {"status": "candidate-tier1", "model": manifest_view["model"],
                   "quant_label": manifest_view["quant_label"], "topology_class": topology,
                   "engine_pin": manifest_view["engine_pin"], "ctx": _int(manifest_view["selected_ctx"]),
                   "kv_format": manifest_view["kv_format"], "kv_calc_version": manifest_view["kv_calc_version"],
                   "capabilities": list(caps), "bundles": list(prints)}
            groups.append(Group("bundles", key, TIER1, prints, caps, why, row))
        else:
            groups.append(Group("bundles", key, VALIDATED, prints, caps, f"{why}; {DERIVED_DEFERRED}"))

    by_shape: dict[tuple[str, ...], dict[str, Mapping[str, Any]]] = {}
    for r in receipts:
        digest = str((r.get("source") or {}).get("sha256") or "")
        by_shape.setdefault(shape_key(r), {})[digest] = r
    for shape, members_by_digest in sorted(by_shape.items()):
        receipt_list = list(members_by_digest.values())
        signatures = {_measured_signature(r.get("measured") or {}) for r in receipt_list}
        digests = tuple(sorted(members_by_digest))
        first = receipt_list[0]
        measured = {t: (first.get("measured") or {}).get(t) for t in MEASURED_TERMS}
        promoted = shape in promoted_keys
        if len(signatures) > 1:
            state, note = CANDIDATE, "receipts of this shape disagree"
        elif len(digests) >= 2 or promoted:
            state, note = VALIDATED, ("maintainer promotion" if len(digests) < 2 else f"{len(digests)} equal receipts")
        else:
            state, note = CANDIDATE, "needs a second equal receipt"
        groups.append(Group("receipts", shape, state, digests, (), note, None, dict(first.get("shape") or {}),
                            measured))
    return groups


def _int(value: str) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def ingest(paths: Iterable[Path], *, curated_models: frozenset[str] = frozenset(),
           promoted_keys: frozenset[tuple[str, ...]] = frozenset(),
           extra_receipts: Sequence[Mapping[str, Any]] = ()) -> LoopState:
    """Read every bundle and receipt under ``paths`` and run the trust pipeline over them."""
    from club3090.edges.files import read_json_capped

    bundle_dirs, receipt_files = find_inputs(paths)
    records: list[BundleRecord] = []
    rejected: list[tuple[str, str]] = []
    for folder in bundle_dirs:
        try:
            record = assess_bundle(read_bundle(folder))
        except InputError as exc:
            rejected.append((str(folder), exc.message))
            continue
        if record.state == "rejected":
            rejected.append((record.path, record.reason))
        records.append(record)
    receipts: list[Mapping[str, Any]] = list(extra_receipts)
    for path in receipt_files:
        try:
            data = read_json_capped(path, limit=16 * 1024 * 1024)
        except InputError as exc:
            rejected.append((str(path), exc.message))
            continue
        for i, r in enumerate(_receipts_in(data)):
            problems = validate_receipt(r, f"{path}[{i}]")
            if problems:
                rejected.append((str(path), "; ".join(problems)))
            else:
                receipts.append(r)
    groups = consensus(records, receipts, curated_models=curated_models, promoted_keys=promoted_keys)
    return LoopState(tuple(records), tuple(groups), tuple(rejected))
