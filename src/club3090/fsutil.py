"""Small file-system edges shared by every writer and reader: atomic writes and capped reads."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from club3090.errors import InputError

MAX_JSON_BYTES = 16 * 1024 * 1024  # config.json / index files are kilobytes; refuse megabyte bombs


def atomic_write_bytes(path: Path, data: bytes, *, overwrite: bool = True) -> None:
    """Write ``data`` to ``path`` via a temp file in the same folder and a rename.

    Either the old file or the complete new one exists at every instant; on any failure the
    temp file is removed. With ``overwrite=False`` an existing target raises FileExistsError.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if overwrite:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)  # fails with FileExistsError instead of clobbering
            os.unlink(tmp)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def atomic_write_text(path: Path, text: str, *, overwrite: bool = True) -> None:
    atomic_write_bytes(path, text.encode("utf-8"), overwrite=overwrite)


def read_json_capped(path: Path, *, limit: int = MAX_JSON_BYTES) -> Any:
    """Parse a JSON file no larger than ``limit`` bytes; malformed or oversized -> InputError."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > limit:
            raise InputError(str(path), f"{size} bytes is over the {limit}-byte limit for JSON files")
        raw = path.read_bytes()
    except OSError as exc:
        raise InputError(str(path), f"cannot read: {exc.strerror or exc}") from exc
    return parse_json_capped(raw, name=str(path), limit=limit)


def parse_json_capped(raw: bytes, *, name: str, limit: int = MAX_JSON_BYTES) -> Any:
    if len(raw) > limit:
        raise InputError(name, f"{len(raw)} bytes is over the {limit}-byte limit for JSON files")
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(name, f"not valid JSON ({exc})") from exc
