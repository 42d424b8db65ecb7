"""``LiveProvider``: the real I/O behind :class:`club3090.pipeline.provider.Provider`.

Each piece can be replaced by a keyword (tests inject a fixed GPU list, a free-space figure, a
clock, a Hub source); everything not given is the real thing, created on first use.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover - typing only
    from club3090.catalog.model import Catalog, Patch, Profile
    from club3090.catalog.open_index import OpenIndex
    from club3090.edges.boot import Runner
    from club3090.edges.download import DownloadReport
    from club3090.edges.gguf_source import GgufSource
    from club3090.edges.gpu_probe import DetectedGpus
    from club3090.edges.http_transport import Http
    from club3090.edges.hub import HubSource
    from club3090.edges.launchers import Launcher
    from club3090.model.spec import ModelSpec, RepoFile
    from club3090.outcome import Stop
    from club3090.pipeline.emit_derived import EStages
    from club3090.settings import Settings


@dataclass(frozen=True)
class LiveProvider:
    """The live Provider for ``settings``; keywords replace single pieces."""

    settings: "Settings"
    hub_source: "HubSource | None" = None                        # default: HubClient(settings)
    detect: "Callable[[], DetectedGpus] | None" = None           # default: gpu_probe.detect
    free_disk: Callable[[Path], int | None] | None = None        # default: statvfs
    clock: Callable[[], datetime] | None = None                  # default: UTC now
    guard: "Callable[[Patch, Profile], bool] | None" = None      # default: every guard passes
    progress: Callable[[int, int], None] | None = None           # header-read progress
    load: "Callable[[], Catalog] | None" = None                  # default: the packaged catalog
    derived: "Callable[..., EStages | None] | None" = None       # default: the real [E] seams
    promoted: "Callable[[], Sequence[Mapping[str, Any]]] | None" = None  # default: the local overlay
    run: "Runner | None" = None                                  # default: launcher tools run for real
    which: Callable[[str], str | None] | None = None             # default: shutil.which
    payload: Callable[[str], Mapping[str, bytes]] | None = None  # default: the catalog's pinned payloads
    http_client: "Http | None" = None                            # default: urllib
    ram: Callable[[], int | None] | None = None                  # default: /proc/meminfo MemTotal
    index: "Callable[[], OpenIndex] | None" = None               # default: the packaged open-model index
    ticker: Callable[[], float] | None = None                    # default: time.monotonic
    sleeper: Callable[[float], None] | None = None               # default: time.sleep

    def catalog(self) -> "Catalog":
        if self.load is not None:
            return self.load()
        from club3090.catalog import load_catalog

        return load_catalog()

    def resolve(self, source: str, catalog: "Catalog", *, weights_optional: bool = False,
                progress: Callable[[int, int], None] | None = None) -> "ModelSpec | Stop":
        from club3090.edges.resolve import resolve

        return resolve(source, self.settings, catalog, hub_factory=self.hub, progress=progress or self.progress,
                       weights_optional=weights_optional)

    def resolve_gguf(self, source: str | None, catalog: "Catalog", *, profile: "Profile | None" = None,
                     quant: str | None = None) -> "GgufSource":
        """llama.cpp's facts: a GGUF file, repo or llama.cpp-family profile (headers only)."""
        from club3090.edges.gguf_source import resolve_gguf

        return resolve_gguf(source, catalog, self.settings, profile=profile, quant=quant, hub=self.hub)

    def hub(self) -> "HubSource":
        if self.hub_source is not None:
            return self.hub_source
        from club3090.edges.hub import HubClient

        return HubClient(self.settings)

    def detect_gpus(self) -> "DetectedGpus":
        if self.detect is not None:
            return self.detect()
        from club3090.edges.gpu_probe import detect

        return detect(enabled=self.settings.gpu_detect)

    def free_bytes(self, path: Path) -> int | None:
        if self.free_disk is not None:
            return self.free_disk(path)
        from club3090.edges.disk import free_bytes_at

        return free_bytes_at(path)

    def system_memory_bytes(self) -> int | None:
        if self.ram is not None:
            return self.ram()
        from club3090.edges.host_memory import total_ram_bytes

        return total_ram_bytes()

    def open_index(self) -> "OpenIndex":
        if self.index is not None:
            return self.index()
        from club3090.catalog.open_index import load_open_index

        return load_open_index()

    def now(self) -> datetime:
        return self.clock() if self.clock is not None else datetime.now(timezone.utc)

    def monotonic(self) -> float:
        import time

        return self.ticker() if self.ticker is not None else time.monotonic()

    def sleep(self, seconds: float) -> None:
        import time

        (self.sleeper or time.sleep)(seconds)

    def measured(self) -> "Sequence[Mapping[str, Any]]":
        if self.promoted is not None:
            return self.promoted()
        from club3090.reports.overlay import load_promoted, overlay_root

        return load_promoted(overlay_root())

    def receipts(self) -> "Sequence[Mapping[str, Any]]":
        from club3090.reports.overlay import load_receipts, overlay_root

        return [receipt for _, receipt in load_receipts(overlay_root())]

    def drift_guard(self, patch: "Patch", profile: "Profile") -> bool:
        return self.guard(patch, profile) if self.guard is not None else True

    def derived_stages(self, *, no_boot: bool,
                       progress: Callable[[str], None] | None) -> "EStages | None":
        if self.derived is not None:
            return self.derived(no_boot=no_boot, progress=progress)
        import shutil

        from club3090.pipeline.emit_derived import EStages

        # [E] runs on this Provider's own seams: the launcher tools' runner and lookup, HTTP, the clock
        return EStages(fetch=self.fetch_weights, runner=self.run, http=self.http_client, which=self.which or shutil.which,
                       clock=self.monotonic, sleep=self.sleep, progress=progress, no_boot=no_boot,
                       bar=progress is not None)

    def cached_files(self, repo_id: str, commit: str | None) -> "tuple[str, tuple[RepoFile, ...]] | None":
        from club3090.edges.hf_cache import cached_listing

        return cached_listing(Path(self.settings.hub_cache), repo_id, commit)

    def cached_bytes(self, repo_id: str, commit: str | None, files: "Sequence[RepoFile]") -> int:
        from club3090.edges.hf_cache import cached_bytes

        return cached_bytes(Path(self.settings.hub_cache), repo_id, commit, files)

    def fetch_weights(self, repo_id: str, commit: str, files: "Sequence[RepoFile]", *,
                      progress: Callable[[str], None] | None, bar: bool,
                      adopt: Sequence[Path] = ()) -> "DownloadReport":
        from club3090.edges.hf_cache import fetch_into_cache

        return fetch_into_cache(self.settings, repo_id, commit, files, progress=progress, bar=bar, adopt=adopt)

    def payloads(self, upstream: str) -> Mapping[str, bytes]:
        if self.payload is not None:
            return self.payload(upstream)
        from club3090.edges.payloads import catalog_payloads

        return catalog_payloads(self.settings, self.catalog())(upstream)

    def launcher(self, name: str) -> "Launcher":
        from club3090.edges import launchers

        return launchers.get(name, run=self.run, which=self.which)

    def http(self) -> "Http":
        from club3090.edges.openai_client import urllib_http

        return self.http_client or urllib_http

    def write_file(self, path: Path, data: str | bytes, *, mode: int | None = None) -> None:
        import os

        from club3090.edges.files import atomic_write_bytes

        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, data.encode("utf-8") if isinstance(data, str) else data)
        if mode is not None:
            os.chmod(path, mode)

    def make_dir(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)


__all__ = ["LiveProvider"]
