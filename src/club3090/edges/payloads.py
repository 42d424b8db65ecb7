"""Patch payloads: files of the upstream club-3090 project a curated compose mounts, fetched at the
commit the catalog pins (``upstream_files.yaml``), checked against its size and sha256, and cached
under ``HF_HOME/club3090/upstream/<commit>/``.

Every read has a deadline and a byte cap (the pinned size + 1); a mismatch raises
:class:`club3090.errors.IntegrityError` (exit 65) before anything is written into the bundle. The
base URL is ``Settings.upstream_url`` (``CLUB3090_UPSTREAM_URL``; tests point it at a loopback
file server); the file's URL is ``<base>/<commit>/<path>``.
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from club3090.errors import IntegrityError, UpstreamUnreachable, UsageError
from club3090.settings import redact_url_credentials

if TYPE_CHECKING:
    from club3090.catalog.model import Catalog, UpstreamFile
    from club3090.settings import Settings

Payloads = Callable[[str], Mapping[str, bytes]]   # upstream path (file or folder) -> {file path: bytes}


def _loopback(url: str) -> bool:
    host = urllib.parse.urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _get(url: str, limit: int, timeout: float) -> bytes:
    handlers = [urllib.request.ProxyHandler({})] if _loopback(url) else []
    opener = urllib.request.build_opener(*handlers)
    try:
        with opener.open(url, timeout=timeout) as resp:
            return bytes(resp.read(limit))
    except urllib.error.HTTPError as exc:
        raise IntegrityError(url, f"the upstream server answered HTTP {exc.code}") from None
    except (OSError, ValueError) as exc:
        raise UpstreamUnreachable(redact_url_credentials(url), redact_url_credentials(str(exc))) from None


def _check(f: "UpstreamFile", data: bytes) -> str | None:
    if len(data) != f.size:
        return f"{len(data)} bytes, the catalog pins {f.size}"
    got = hashlib.sha256(data).hexdigest()
    if got != f.sha256:
        return f"sha256 {got}, the catalog pins {f.sha256}"
    return None


def fetch_file(f: "UpstreamFile", *, base: str, cache: Path, timeout: float) -> bytes:
    """One pinned file: from the cache when it still verifies, else fetched, verified, cached."""
    from club3090.edges.files import atomic_write_bytes

    cached = cache / f.commit / f.id
    try:
        data = cached.read_bytes()
        if _check(f, data) is None:
            return data
    except OSError:
        pass
    url = f"{base.rstrip('/')}/{f.commit}/{urllib.parse.quote(f.id)}"
    data = _get(url, f.size + 1, timeout)
    problem = _check(f, data)
    if problem is not None:
        raise IntegrityError(f.id, f"{problem}; refused, nothing was started")
    with contextlib.suppress(OSError):   # the cache is an optimisation; the verified bytes are returned either way
        atomic_write_bytes(cached, data)
    return data


def catalog_payloads(settings: "Settings", catalog: "Catalog", *, timeout: float | None = None) -> Payloads:
    """The payload source ``up`` uses: every mount names a pinned file, or a folder of pinned files."""
    base = settings.upstream_url
    cache = Path(settings.hf_home) / "club3090" / "upstream"
    seconds = timeout if timeout is not None else settings.hub_deadline_s

    def payloads(path: str) -> Mapping[str, bytes]:
        pinned = catalog.upstream_files
        if path in pinned:
            names = [path]
        else:
            names = sorted(n for n in pinned if n.startswith(path.rstrip("/") + "/"))
        if not names:
            raise UsageError(f"{path} is mounted but the catalog pins no such upstream file; "
                             "the catalog needs its size and sha256 (upstream_files.yaml)")
        return {n: fetch_file(pinned[n], base=base, cache=cache, timeout=seconds) for n in names}
    return payloads


__all__ = ["Payloads", "catalog_payloads", "fetch_file"]
