"""Small file-system edges shared by every writer and reader: atomic writes and capped reads."""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

from club3090.errors import InputError, UnsafePath, UsageError
from club3090.model.budgets import MAX_JSON_BYTES, parse_json_capped
from club3090.model.repo_id import file_name_problem


def atomic_write_bytes(path: Path, data: bytes, *, overwrite: bool = True) -> None:
    """Write ``data`` to ``path`` via a temp file in the same folder and a rename.

    Either the old file or the complete new one exists at every instant; on any failure the
    temp file is removed. With ``overwrite=False`` an existing target raises FileExistsError.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with contextlib.suppress(OSError, AttributeError):   # mkstemp's 0600 -> what open() would give
            os.fchmod(fd, 0o666 & ~_umask())
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
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write_text(path: Path, text: str, *, overwrite: bool = True) -> None:
    atomic_write_bytes(path, text.encode("utf-8"), overwrite=overwrite)


def check_output_path(path: Path, *, force: bool, flag: str = "--out") -> Path:
    """The file a ``--out`` path will write (symlinks followed), or a UsageError saying why not.

    Cheap enough to call before doing the work, so a bad ``--out`` fails fast.
    """
    path = Path(path)
    if path.is_symlink() and not force:  # dangling or not: writing through a link needs a yes
        raise UsageError(f"{flag} {path} is a symbolic link; pass --force to write to its target")
    target = path.resolve() if path.is_symlink() else path
    if target.is_dir():
        raise UsageError(f"{flag} {path} is a folder; give a file path"
                         + (" (or end it with / for a launch bundle)" if flag == "--out" else ""))
    if target.exists() and not target.is_file():
        raise UsageError(f"{flag} {path} is not a regular file")
    if target.exists() and not force:
        raise UsageError(f"{path} exists; pass --force to overwrite it")
    parent = next((p for p in target.parents if p.exists()), None)
    if parent is not None and not parent.is_dir():
        raise UsageError(f"{flag} {path}: {parent} is not a folder")
    return target


def write_output_text(path: Path, text: str, *, force: bool, flag: str = "--out") -> Path:
    """Write a user-named output file (``--out``) atomically; every way it can fail is a UsageError.

    ``check_output_path`` refuses folders and special files (devices, FIFOs: an atomic rename
    would replace the node), an existing file without ``force`` and a parent that is not a
    folder; a symlink (dangling or not) is written through to its target only with ``force``. OS failures (read-only folder, disk
    full) name the path and the reason.
    """
    target = check_output_path(path, force=force, flag=flag)
    try:
        atomic_write_text(target, text, overwrite=force)
    except FileExistsError:
        raise UsageError(f"{path} exists; pass --force to overwrite it") from None
    except OSError as exc:
        raise UsageError(f"{flag} {path}: cannot write ({exc.strerror or exc})") from None
    return target


def path_exists(path: Path) -> bool:
    """``Path.exists`` that answers False, not OSError, for a name too long or otherwise unusable."""
    try:
        return Path(path).exists()
    except (OSError, ValueError):
        return False


def read_bytes_capped(path: Path, *, limit: int) -> bytes:
    """The bytes of a regular file no larger than ``limit``; anything else -> InputError.

    The file is opened once and checked on the open descriptor: devices, FIFOs and sockets are
    refused (their reported size is 0, and a read could be endless or block forever), and at
    most ``limit + 1`` bytes are ever read.
    """
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise InputError(str(path), f"cannot read: {exc.strerror or exc}") from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InputError(str(path), "not a regular file")
        if info.st_size > limit:
            raise InputError(str(path), f"{info.st_size} bytes is over the {limit}-byte limit")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb") as handle:
            fd = -1
            raw = handle.read(limit + 1)
    except OSError as exc:
        raise InputError(str(path), f"cannot read: {exc.strerror or exc}") from exc
    finally:
        if fd >= 0:
            os.close(fd)
    if len(raw) > limit:
        raise InputError(str(path), f"over the {limit}-byte limit")
    return raw


def read_json_capped(path: Path, *, limit: int = MAX_JSON_BYTES) -> Any:
    """Parse a JSON file no larger than ``limit`` bytes; malformed, oversized or not a regular
    file -> InputError."""
    raw = read_bytes_capped(path, limit=limit)
    return parse_json_capped(raw, name=str(path), limit=limit)


def inside(root: Path, *names: str) -> Path:
    """``root / name / ...`` for names from outside (a Hub listing, a bundle, a compose file): each
    must be a plain relative POSIX path (``repo_id.file_name_problem``) and the joined path's
    folder, symlinks already on disk resolved, must stay under ``root``; else :class:`UnsafePath`.
    The last part itself may be a link (an HF cache snapshot entry links to its blob). The one
    check before an outside value names a file."""
    for name in names:
        problem = file_name_problem(name)
        if problem is not None:
            raise UnsafePath(str(root), problem)
    path = Path(root).joinpath(*names)
    base = Path(root).resolve()
    if not path.parent.resolve().is_relative_to(base):
        raise UnsafePath(str(root), f"{'/'.join(names)!a} resolves outside {base}")
    return path
