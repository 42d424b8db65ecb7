"""The ``Provider``: every piece of I/O the pipeline needs, behind one protocol.

The stages (model facts, rig, serving shape, fit, gate decision, emission) take values and return
values; what they need from the outside world comes from a Provider. The live one is
:class:`club3090.edges.provider.LiveProvider`; tests pass a live one with pieces swapped, or any
object with these methods.

=================  ================================================================================
method             what it reads
=================  ================================================================================
``settings``       the frozen ``Settings`` (HF home, endpoint, token, offline, debug)
``catalog()``      the packaged catalog (``load_catalog``)
``resolve()``      a name -> ``ModelSpec`` or a stratum-1 ``Stop``: local folder, catalog, HF cache,
                   Hub, in the one precedence of :mod:`club3090.edges.resolve`
``hub()``          the Hub client (repo listing, JSON files, safetensors headers)
``detect_gpus()``  the visible GPUs, with a note for every probe that found nothing
``free_bytes()``   free disk space at a path (None when unknown: the disk gate fails closed)
``now()``          the clock (capture bundles)
``monotonic()``    seconds on a monotonic clock, and ``sleep()`` to wait (the warm-up window)
``measured()``     this machine's promoted measurements (``club3090 loop promote``), newest last
``receipts()``     this machine's calibration receipts (``calibrate --save``, ``up``)
``drift_guard()``  whether a patch's drift guard passes for a profile (compose replay)
``derived_stages`` the I/O behind Pull-Emit-Derived [E] (downloads, docker, loopback HTTP) on this
                   Provider's own runner, lookup, HTTP and clock, or None to run no [E]
``cached_files()`` offline: (commit, files) of a repo's snapshot in the HF cache, or None
``cached_bytes()`` bytes of some files already complete in the HF cache (the disk check)
``fetch_weights``  files of a repo at a commit into the HF cache, sha256-verified, resumable (a
                   report); ``up``, ``swap`` and ``pull``'s [E] download through it
``payloads()``     an upstream path -> its pinned, verified files (a bundle's mounted payloads)
``launcher()``     the launcher a name names (``edges.launchers`` registry), with this run's tools
``http()``         the HTTP client for loopback calls to a started server
``write_file()``   an atomic write (parents created; ``mode`` set after): every file ``up`` writes
``make_dir()``     an empty folder (the bundle's logs/ and cache folders)
=================  ================================================================================
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # pragma: no cover - typing only
    from club3090.catalog.model import Catalog, Patch, Profile
    from club3090.catalog.open_index import OpenIndex
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


class Provider(Protocol):
    """All I/O of one pipeline run. Every method may be called more than once."""

    @property
    def settings(self) -> "Settings": ...

    def catalog(self) -> "Catalog": ...

    def resolve(self, source: str, catalog: "Catalog", *, weights_optional: bool = False,
                progress: "Callable[[int, int], None] | None" = None) -> "ModelSpec | Stop": ...

    def resolve_gguf(self, source: str | None, catalog: "Catalog", *, profile: "Profile | None" = None,
                     quant: str | None = None) -> "GgufSource": ...

    def hub(self) -> "HubSource": ...

    def detect_gpus(self) -> "DetectedGpus": ...

    def free_bytes(self, path: Path) -> int | None: ...

    def system_memory_bytes(self) -> int | None: ...

    def open_index(self) -> "OpenIndex": ...

    def now(self) -> datetime: ...

    def monotonic(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...

    def measured(self) -> "Sequence[Mapping[str, Any]]": ...

    def receipts(self) -> "Sequence[Mapping[str, Any]]": ...

    def drift_guard(self, patch: "Patch", profile: "Profile") -> bool: ...

    def derived_stages(self, *, no_boot: bool,
                       progress: "Callable[[str], None] | None") -> "EStages | None": ...

    def cached_files(self, repo_id: str, commit: str | None) -> "tuple[str, tuple[RepoFile, ...]] | None": ...

    def cached_bytes(self, repo_id: str, commit: str | None, files: "Sequence[RepoFile]") -> int: ...

    def fetch_weights(self, repo_id: str, commit: str, files: "Sequence[RepoFile]", *,
                      progress: "Callable[[str], None] | None", bar: bool,
                      adopt: "Sequence[Path]" = ()) -> "DownloadReport": ...

    def payloads(self, upstream: str) -> Mapping[str, bytes]: ...

    def launcher(self, name: str) -> "Launcher": ...

    def http(self) -> "Http": ...

    def write_file(self, path: Path, data: str | bytes, *, mode: int | None = None) -> None: ...

    def make_dir(self, path: Path) -> None: ...


__all__ = ["Provider"]
