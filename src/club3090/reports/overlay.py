"""The user's local layer: receipts measured on this machine and entries the Loop promoted.

Lives in ``$CLUB3090_STATE_DIR``, else ``$XDG_STATE_HOME/club3090``, else
``~/.local/state/club3090``::

    receipts/<sha256 of the log, 16 hex>.json     one calibration receipt each (redacted)
    promoted/<entry id>.json                      validated derived entries (``loop promote``)
    loop-state.json                               the trust pipeline's last ingest

Every file has a strict schema; a malformed one is an ``InputError`` naming the file, never a
silent skip. Writes are atomic.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from club3090.edges.files import atomic_write_text, read_json_capped
from club3090.errors import InputError
from club3090.settings import state_dir

RECEIPTS = "receipts"
PROMOTED = "promoted"
LOOP_STATE = "loop-state.json"
FILE_LIMIT = 4 * 1024 * 1024
PROMOTED_SCHEMA = 1
PROMOTED_KEYS = frozenset({"schema", "kind", "id", "status", "consensus_key", "shape", "measured", "receipts",
                           "capabilities", "promoted_by", "calibration_row"})
_ID = re.compile(r"[a-z0-9][a-z0-9._-]{0,127}\Z")


def overlay_root(env: Mapping[str, str] | None = None) -> Path:
    """The state folder (``settings.state_dir``: one rule for the overlay and the capture bundles)."""
    return state_dir(env)


def save_receipt(root: Path, receipt: Mapping[str, Any]) -> Path:
    from club3090.reports.capture import dump_json
    from club3090.reports.receipt import validate_receipt

    problems = validate_receipt(receipt, "receipt")
    if problems:
        raise InputError("receipt", "; ".join(problems))
    digest = str((receipt.get("source") or {}).get("sha256") or "")[:16]
    if not re.fullmatch(r"[0-9a-f]{16}", digest):
        raise InputError("receipt", "source.sha256 missing")
    path = Path(root) / RECEIPTS / f"{digest}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, dump_json(dict(receipt)))
    return path


def load_receipts(root: Path) -> list[tuple[Path, dict[str, Any]]]:
    folder = Path(root) / RECEIPTS
    out: list[tuple[Path, dict[str, Any]]] = []
    if not folder.is_dir():
        return out
    from club3090.reports.receipt import validate_receipt  # the log parser it needs loads only here

    for path in sorted(folder.glob("*.json")):
        data = read_json_capped(path, limit=FILE_LIMIT)
        problems = validate_receipt(data, str(path))
        if problems:
            raise InputError(str(path), "; ".join(p.split(": ", 1)[-1] for p in problems))
        out.append((path, data))
    return out


def validate_promoted(data: object, where: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise InputError(where, "expected a JSON object")
    unknown = sorted(set(data) - PROMOTED_KEYS)
    if unknown:
        raise InputError(where, f"unknown keys {unknown}")
    if data.get("schema") != PROMOTED_SCHEMA or data.get("kind") != "promoted-entry":
        raise InputError(where, f"not a schema-{PROMOTED_SCHEMA} promoted-entry")
    if not isinstance(data.get("id"), str) or not _ID.match(data["id"]):
        raise InputError(where, "id must be lower-case [a-z0-9._-]")
    if data.get("status") not in ("validated", "tier1"):
        raise InputError(where, "status must be validated or tier1")
    if not isinstance(data.get("consensus_key"), list) or not isinstance(data.get("shape"), dict):
        raise InputError(where, "consensus_key (list) and shape (object) are required")
    return data


def save_promoted(root: Path, entry: Mapping[str, Any]) -> Path:
    from club3090.reports.capture import dump_json

    data = validate_promoted(dict(entry), "promoted entry")
    path = Path(root) / PROMOTED / f"{data['id']}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, dump_json(data))
    return path


def load_promoted(root: Path) -> list[dict[str, Any]]:
    folder = Path(root) / PROMOTED
    if not folder.is_dir():
        return []
    return [validate_promoted(read_json_capped(p, limit=FILE_LIMIT), str(p)) for p in sorted(folder.glob("*.json"))]
