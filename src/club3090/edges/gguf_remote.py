"""GGUF headers from the Hub (HTTP range reads), a local file, or the HF cache.

Only the header is read: a first range of :data:`FIRST_READ_BYTES`, then, while the parser says
the tensor-info table goes on (``NeedMoreBytes``), the missing bytes, growing geometrically and
never past ``model.gguf.MAX_HEADER_BYTES``. For the other quants of a repo, ``read_sibling`` reads
the first bytes and the tensor table only, skipping the tokenizer they share with the first
(``gguf.parse_sibling`` checks the guess). Requests go through ``hub.HubClient`` (its session,
deadline, retries and error translation). A repository's ``*.gguf`` files are grouped into quant
files: the shards of a split model (``-00001-of-0000N``) form one entry, projector files
(``mmproj``) are set apart.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from club3090.edges.hub import HubClient, RepoInfo
from club3090.errors import EntryNotFound, InputError
from club3090.model.gguf import (
    MAX_HEADER_BYTES,
    GgufFile,
    NeedMoreBytes,
    parse_header,
    parse_sibling,
    sibling_table_start,
    split_name,
    table_start,
)
from club3090.model.gguf_model import GgufModel, from_files

if TYPE_CHECKING:  # pragma: no cover - typing only
    from club3090.settings import Settings

__all__ = ["FIRST_READ_BYTES", "REPO_HEADER_BUDGET", "QuantFile", "QuantHeaders", "list_quants", "load_local", "ranged_client",
           "read_cached", "read_quants", "read_remote", "read_sibling"]


def ranged_client(hub: "Callable[[], object] | None", settings: "Settings") -> HubClient:
    """The Provider's Hub client when it is the real one (GGUF headers need its ranged reads), else
    a new one on the same settings: every GGUF read goes through the Provider's settings."""
    client = hub() if hub is not None else None
    return client if isinstance(client, HubClient) else HubClient(settings)


FIRST_READ_BYTES = 2 * 1024 * 1024      # a 150k-token vocabulary fits in a few MiB
SHARD_FIRST_READ_BYTES = 256 * 1024     # shards after the first carry no tokenizer: a small header
SIBLING_PREFIX_BYTES = 16 * 1024        # a sibling quant's own hyperparameters, before its tokenizer
SIBLING_TABLE_SLACK_BYTES = 4096        # its tensor table has the reference's names: the same length
HEADER_SLACK_BYTES = 64 * 1024          # a sibling quant's header differs from the first's by a few names
REPO_HEADER_BUDGET = 96 * 1024 * 1024   # every quant header of one repo together (``fits``)
QUANT_WORKERS = 4                       # quant headers in flight
_QUANT_RE = re.compile(
    r"(?:^|[-_.])((?:UD-)?(?:I?Q\d_[A-Z0-9]+(?:_[A-Z0-9]+)?|TQ\d_\d|MXFP4(?:_MOE)?|BF16|F16|F32))(?=[-_.])",
    re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class QuantFile:
    """One loadable model in a repo: a single ``.gguf`` or the shards of a split one."""

    label: str                   # quant as the file name says it (Q4_K_M, UD-IQ2_XXS, ...), else the stem
    files: tuple[str, ...]       # shard order
    size_bytes: int | None       # sum of the files' sizes, when the Hub reports them all


def _shown(text: str) -> str:
    """A repo's file name as it may appear in a message: control characters escaped (it is data)."""
    return text if text.isprintable() else ascii(text)[1:-1]


def _label(stem: str) -> str:
    m = _QUANT_RE.findall(stem.rsplit("/", 1)[-1] + ".")
    return m[-1].upper() if m else _shown(stem.rsplit("/", 1)[-1])


def list_quants(info: RepoInfo) -> list[QuantFile]:
    """The repo's GGUF models, split shards grouped, projectors (``mmproj``) left out."""
    groups: dict[str, dict[int, str]] = {}
    counts: dict[str, int] = {}
    sizes = {f.name: f.size_bytes for f in info.files}
    for name in sorted(info.names):
        if not name.lower().endswith(".gguf") or "mmproj" in name.lower():
            continue
        split = split_name(name)
        stem, no, count = split if split else (name[:-5], 1, 1)
        groups.setdefault(stem, {})[no] = name
        counts[stem] = count
    out = []
    for stem, shards in sorted(groups.items()):
        if sorted(shards) != list(range(1, counts[stem] + 1)):
            continue    # an incomplete split: not loadable
        names = tuple(shards[i] for i in sorted(shards))
        known = [sizes.get(n) for n in names]
        total = sum(s for s in known if s is not None) if all(s is not None for s in known) else None
        out.append(QuantFile(label=_label(stem), files=names, size_bytes=total))
    return out


def _read_growing(read: Callable[[int, int], bytes], name: str, size: int | None,
                  first: int | None = None) -> GgufFile:
    """Read a prefix (``first`` bytes, default :data:`FIRST_READ_BYTES`), then more while the parser
    needs it, within the header budget."""
    first = first or FIRST_READ_BYTES
    want = first if size is None else max(1, min(first, size))
    data = read(0, want)
    while True:
        try:
            return parse_header(data, file=name, file_size=size)
        except NeedMoreBytes as more:
            if len(data) < want:       # the source ended before the header did
                raise InputError(name, f"truncated: the file ends inside its GGUF header ({len(data)} bytes)") \
                    from None
            want = min(max(more.need, 2 * len(data)), MAX_HEADER_BYTES)
            if size is not None:
                want = min(want, size)
            data += read(len(data), want - len(data))


def read_remote(client: HubClient, repo_id: str, filename: str, revision: str | None,
                size: int | None, *, first: int | None = None,
                allowance: "_Allowance | None" = None, keep: list[bytes] | None = None) -> GgufFile:
    """One file's GGUF header by ranged GETs (``size`` from the repo listing, when known); every
    byte asked for is taken from ``allowance`` first, when given; ``keep`` receives the first range."""
    url = client._url(repo_id, filename, revision)
    label = _shown(f"{repo_id}/{filename}")

    def read(start: int, length: int) -> bytes:
        if allowance is not None:
            allowance.take(length)
        got = client._get(url, start=start, length=length, ranged=True)
        if keep is not None and start == 0:
            keep[:] = [got]
        return got

    return client._call(repo_id, lambda: _read_growing(read, label, size, first))  # type: ignore[no-any-return]


def load_remote(client: HubClient, info: RepoInfo, quant: QuantFile) -> GgufModel:
    """The model behind one quant file of ``info``'s repo (every shard's header)."""
    sizes = {f.name: f.size_bytes for f in info.files}
    headers = [read_remote(client, info.repo_id, name, info.commit or info.revision, sizes.get(name))
               for name in quant.files]
    return from_files(headers)


class _BudgetSpent(Exception):
    """The repo's header byte budget would be exceeded by the next read."""


class _Allowance:
    """Header bytes one repo may still cost; thread-safe."""

    def __init__(self, limit: int) -> None:
        self.limit, self.used = limit, 0
        self._lock = threading.Lock()

    def take(self, nbytes: int) -> None:
        with self._lock:
            if self.used + nbytes > self.limit:
                raise _BudgetSpent
            self.used += nbytes


@dataclass(frozen=True, slots=True)
class QuantHeaders:
    """One quant file of a repo and what its headers gave: the model, or why it was not read."""

    quant: QuantFile
    model: GgufModel | None
    problem: str | None = None      # "header budget spent" or the header's defect
    first: GgufFile | None = field(default=None, repr=False, compare=False)   # its first shard's header
    prefix: bytes = field(default=b"", repr=False, compare=False)              # that shard's first bytes


@dataclass(frozen=True, slots=True)
class _Reference:
    header: GgufFile
    prefix: bytes


def read_sibling(client: HubClient, repo_id: str, filename: str, revision: str | None, size: int | None,
                 reference: _Reference, allowance: "_Allowance | None" = None) -> GgufFile | None:
    """Another quant of the reference's model in two small ranges, skipping the tokenizer they share
    (``gguf.parse_sibling``: checked against the reference's tensor shapes and the file's size);
    None when that does not hold and the header must be read whole."""
    if size is None or not reference.prefix:
        return None
    url = client._url(repo_id, filename, revision)
    label = _shown(f"{repo_id}/{filename}")

    def read(begin: int, length: int) -> bytes:
        if allowance is not None:
            allowance.take(length)
        return client._get(url, start=begin, length=length, ranged=True)

    def attempt() -> GgufFile | None:
        prefix = read(0, min(SIBLING_PREFIX_BYTES, size))
        at = sibling_table_start(prefix, reference.prefix, reference.header, file=label, file_size=size)
        if at is None or not 0 < at < size:
            return None
        table_len = reference.header.header_bytes - table_start(reference.header) + SIBLING_TABLE_SLACK_BYTES
        table = read(at, min(table_len, size - at))
        return parse_sibling(prefix, table, file=label, file_size=size, reference=reference.header,
                             reference_prefix=reference.prefix, table_at=at)

    return client._call(repo_id, attempt)  # type: ignore[no-any-return]


def read_quants(client: HubClient, info: RepoInfo, quants: Sequence[QuantFile], *,
                budget: int | None = None, workers: int = QUANT_WORKERS) -> tuple[list[QuantHeaders], int]:
    """Every quant's headers (all shards), ``workers`` quants at a time, within ``budget`` bytes for
    the repo; returns them in ``quants`` order and the bytes read. The smallest quant is read first,
    alone and whole; the others' first shards are read around the tokenizer the quants share
    (``read_sibling``), else whole in one range sized by the first's header."""
    sizes = {f.name: f.size_bytes for f in info.files}
    budget = REPO_HEADER_BUDGET if budget is None else budget
    allowance = _Allowance(budget)
    revision = info.commit or info.revision

    def load(quant: QuantFile, reference: _Reference | None) -> QuantHeaders:
        try:
            headers, keep = [], [b""]
            for i, name in enumerate(quant.files):
                size = sizes.get(name)
                got = read_sibling(client, info.repo_id, name, revision, size, reference, allowance) \
                    if i == 0 and reference is not None else None
                if got is None:
                    first = SHARD_FIRST_READ_BYTES if i else (min(reference.header.header_bytes + HEADER_SLACK_BYTES,
                                                                  MAX_HEADER_BYTES) if reference else None)
                    got = read_remote(client, info.repo_id, name, revision, size, first=first, allowance=allowance,
                                      keep=keep if i == 0 else None)
                headers.append(got)
            return QuantHeaders(quant=quant, model=from_files(headers), first=headers[0], prefix=keep[0])
        except _BudgetSpent:
            return QuantHeaders(quant=quant, model=None, problem=f"not read: the repo's {budget >> 20} MiB "
                                                                 "header budget is spent")
        except (InputError, EntryNotFound) as exc:
            return QuantHeaders(quant=quant, model=None, problem=_shown(str(exc))[:300])

    if not quants:
        return [], 0
    order = sorted(range(len(quants)), key=lambda i: quants[i].size_bytes or 0)
    out: dict[int, QuantHeaders] = {order[0]: load(quants[order[0]], None)}
    head = out[order[0]]
    reference = _Reference(header=head.first, prefix=head.prefix) if head.first is not None else None
    rest = order[1:]
    if rest:
        with ThreadPoolExecutor(max_workers=max(1, min(workers, len(rest))),
                                thread_name_prefix="club3090-gguf") as pool:
            for i, done in zip(rest, pool.map(lambda j: load(quants[j], reference), rest), strict=True):
                out[i] = done
    return [out[i] for i in range(len(quants))], allowance.used


def _read_file(path: Path) -> GgufFile:
    try:
        size = path.stat().st_size
        with path.open("rb") as fh:
            def read(start: int, length: int) -> bytes:
                fh.seek(start)
                return fh.read(length)

            return _read_growing(read, _shown(path.name), size)
    except OSError as exc:
        raise InputError(_shown(str(path)), f"cannot read: {exc.strerror or exc}") from None


def load_local(path: Path) -> GgufModel:
    """A local ``.gguf``; a shard name brings in its sibling shards from the same folder."""
    split = split_name(path.name)
    if split is None:
        return from_files([_read_file(path)])
    stem, _, count = split
    shards = [path.with_name(f"{stem}-{i:05d}-of-{count:05d}.gguf") for i in range(1, count + 1)]
    missing = [p.name for p in shards if not p.is_file()]
    if missing:
        raise InputError(str(path), f"split GGUF is missing {', '.join(missing)}")
    return from_files([_read_file(p) for p in shards])


def read_cached(repo_id: str, files: Sequence[str], revision: str | None, cache_dir: Path) -> GgufModel | None:
    """The model from the HF cache when every file of it is there, else None."""
    from huggingface_hub import try_to_load_from_cache

    paths = []
    for name in files:
        found = try_to_load_from_cache(repo_id, name, cache_dir=str(cache_dir), revision=revision or "main")
        if not isinstance(found, str):
            return None
        paths.append(Path(found))
    return from_files([_read_file(p) for p in paths])
