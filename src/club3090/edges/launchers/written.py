"""What the write-only launchers (ray, k8s) share: they write files for other machines and start,
stop or follow nothing here; ``status``, ``down`` and ``logs`` point at the runbook."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from club3090.edges.launchers.base import Job, Preflighted, ServerFinder, Started, Status, Stopped, Which
from club3090.errors import UsageError


@dataclass(frozen=True, slots=True)
class ClusterFiles:
    """What a multi-node launcher contributes to ``cluster_up``: its checks, files and ignored flags."""

    checks: tuple[Any, ...]            # cluster_probe.Check
    texts: Mapping[str, str]
    ignored: tuple[str, ...]
    model_cache: str | None


@dataclass(frozen=True)
class WrittenOnly:
    """The part of a multi-node launcher that refuses to run anything on this machine."""

    name: str = ""
    help: str = ""
    starts: bool = False
    multi_node: bool = True
    which: Which | None = None

    def _refuse(self, directory: Path, command: str) -> UsageError:
        return UsageError(f"{directory} holds {self.name} launch files for several nodes (written, not started by "
                          f"club3090): `club3090 {command}` follows single-node launches; see "
                          f"{directory / 'RUNBOOK.md'}")

    def preflight(self, server: ServerFinder | None, *, starting: bool = True) -> Preflighted:
        return Preflighted()

    def start(self, job: Job) -> Started:
        raise self._refuse(job.directory, "up")

    def running(self, directory: Path, state: Mapping[str, Any]) -> bool:
        return False

    def status(self, directory: Path, state: Mapping[str, Any], *, tail: int) -> Status:
        raise self._refuse(directory, "status")

    def stop(self, directory: Path, state: Mapping[str, Any]) -> Stopped:
        raise self._refuse(directory, "down")

    def logs(self, directory: Path, state: Mapping[str, Any], *, lines: int) -> str:
        raise self._refuse(directory, "logs")

    def follow(self, directory: Path, state: Mapping[str, Any], emit: Callable[[str], None]) -> int:
        raise self._refuse(directory, "logs")

    def writes(self, directory: Path) -> tuple[Path, ...]:
        return (directory / "RUNBOOK.md", directory / "launch.json")

    def probe_kwargs(self) -> dict[str, Any]:
        return {} if self.which is None else {"which": self.which}

    def cluster_files(self, cl: Any, facts: Any, *, options: Any, port: int, cache_size_gib: int) -> ClusterFiles:
        """This launcher's checks, its files with the runbook (its preflight lines in it), the flags
        it ignores and the model cache it mounts; each launcher says its own part below."""
        from dataclasses import replace

        checks = self.checks(cl, port)
        texts = dict(self.texts(cl, options, cache_size_gib))
        texts["RUNBOOK.md"] = self.runbook(cl, replace(facts, preflight=preflight_lines(checks)))
        return ClusterFiles(checks, texts, self.ignored(options), self.model_cache(options))

    def checks(self, cl: Any, port: int) -> tuple[Any, ...]:
        raise NotImplementedError

    def texts(self, cl: Any, options: Any, cache_size_gib: int) -> Mapping[str, str]:
        raise NotImplementedError

    def runbook(self, cl: Any, facts: Any) -> str:
        raise NotImplementedError

    def ignored(self, options: Any) -> tuple[str, ...]:
        return ()

    def model_cache(self, options: Any) -> str | None:
        return None


def preflight_lines(checks: tuple[Any, ...]) -> tuple[str, ...]:
    """The cluster checks as the runbook's preflight lines (``ok:`` / ``note:``)."""
    return tuple(("ok: " if c.ok else "note: ") + c.line for c in checks)


__all__ = ["ClusterFiles", "WrittenOnly", "preflight_lines"]
