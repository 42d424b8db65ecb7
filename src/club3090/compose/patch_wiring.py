"""Patch wiring for curated replay: the drift-guard hook and wiring at the insertion points.

Load-bearing patches are wired at the ``volumes`` / ``entrypoint`` insertion points (mounts
rebased onto the club-3090 checkout, ``vllm serve`` args, entrypoint lines); a patch whose drift
guard failed with a degraded capability is unwired instead (docs/DESIGN.md §11).
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

from club3090.compose.launch import split_volume, volume_source, volume_target
from club3090.compose.outcome import ReplayError
from club3090.interpolate import interpolate

if TYPE_CHECKING:
    from club3090.catalog.model import Patch, Profile

GuardRunner = Callable[["Patch", "Profile"], bool]
"""Runs a patch's drift guard for a profile; True = the guard passed. Default: always passes."""


def guard_pass(patch: "Patch", profile: "Profile") -> bool:
    return True


def repo_prefix(compose_path: str) -> str:
    """From the shipped compose's folder back to the club-3090 checkout root (``../`` * depth)."""
    depth = len(PurePosixPath(compose_path).parent.parts)
    return "../" * depth


def has_relative_mounts(service: Mapping[str, Any]) -> bool:
    for entry in service.get("volumes") or []:
        try:
            src = interpolate(volume_source(entry))
        except ValueError:
            continue
        if src.startswith(".") or (src and not src.startswith("/") and "/" in src):
            return True
    return False


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


def wire_patch(service: dict[str, Any], args: list[Any], patch: "Patch",
          insertion_points: Sequence[str], repo_prefix: str) -> None:
    if patch.mounts:
        if "volumes" not in insertion_points and "volumes" not in service:
            raise ReplayError(f"{patch.id}: no volumes insertion point")
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
    for line, words in _invocations(patch):
        if words is not None:
            if not _contains_run(args, words):
                args.extend(words)
            continue
        script_at = _entry_script(service)
        if script_at is None:
            raise ReplayError(f"{patch.id}: no entrypoint script to insert its invocation into")
        entrypoint, idx = script_at
        script = str(entrypoint[idx])
        if any(existing.strip() == line.strip() for existing in script.splitlines()):
            continue
        entrypoint[idx] = f"{line}\n{script}"


def unwire_patch(service: dict[str, Any], args: list[Any], patch: "Patch") -> None:
    targets = {split_volume(m)[1] for m in patch.mounts}
    if service.get("volumes"):
        service["volumes"] = [v for v in service["volumes"] if volume_target(v) not in targets]
    for line, words in _invocations(patch):
        if words is not None:
            start = _find_run(args, words)
            if start is not None:
                del args[start:start + len(words)]
            continue
        script_at = _entry_script(service)
        if script_at is not None:
            entrypoint, idx = script_at
            kept = [existing for existing in str(entrypoint[idx]).splitlines(keepends=True)
                    if existing.strip() != line.strip()]
            entrypoint[idx] = "".join(kept)


def _invocations(patch: "Patch") -> Iterator[tuple[str, list[str] | None]]:
    """Each invocation that is not prose: (its line, its words when it is an argument run, else None)."""
    for line in patch.invocations:
        kind = invocation_kind(line)
        if kind != "prose":
            yield line, shlex.split(line) if kind == "arg" else None


def _entry_script(service: dict[str, Any]) -> tuple[list[Any], int] | None:
    """(the entrypoint list, the index of its ``bash -c`` script), when there is one."""
    entrypoint = service.get("entrypoint")
    idx = _script_index(entrypoint) if isinstance(entrypoint, list) else None
    return (entrypoint, idx) if idx is not None and isinstance(entrypoint, list) else None


def _find_run(args: list[Any], words: list[str]) -> int | None:
    for i in range(len(args) - len(words) + 1):
        if args[i:i + len(words)] == words:
            return i
    return None


def _contains_run(args: list[Any], words: list[str]) -> bool:
    return _find_run(args, words) is not None
