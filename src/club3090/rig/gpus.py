"""``--gpus SPEC`` parsing, resolved through the catalog's GPU table.

Accepted forms (items may be joined with commas for mixed rigs):

    1x3090   2xrtx-4090   4xH100-80GB        COUNT x NAME (name or alias from the catalog)
    3090     rtx-4090                         a bare name means one GPU
    2x24GiB  1x23.58GiB   1x80GB   1x24576MiB COUNT x SIZE (GiB = 2^30, GB = 1e9, MiB = 2^20)
    24576:NVIDIA GeForce RTX 3090,24576:...   MiB:NAME per GPU (nvidia-smi style)
    2x(2x3090)   2x(8xH100)                   NODES x (ONE NODE): a rig of identical nodes

``parse_gpus(spec, catalog, nodes=N)`` reads ``spec`` as one node of N (``--nodes N --gpus 2x3090``).
The GPUs of a rig of several nodes are listed node by node (GPU ``i`` sits on node
``i // gpus_per_node``), the order vLLM's ranks take: TP inside a node, PP across nodes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from club3090.catalog.model import Catalog, Gpu
from club3090.errors import UsageError
from club3090.rig.interconnect import DEFAULT_INTERCONNECT, INTERCONNECTS

MAX_GPUS = 64            # the one bound on a GPU count (--gpus, detection): more is a broken answer
# docs/DESIGN.md: a non-NVIDIA GPU (AMD / ROCm / Apple / Metal / MPS) is assumed SM 8.0 for
# the SM gate only; its memory never feeds the fit. The one definition (gates, hardware).
NON_NVIDIA_SM = Decimal("8.0")
MAX_GPU_BYTES = 2 ** 40  # 1 TiB per GPU: the bound on a believable topology
_UNITS = {"gib": 2 ** 30, "gb": 10 ** 9, "mib": 2 ** 20, "mb": 10 ** 6, "tib": 2 ** 40, "tb": 10 ** 12}
_COUNT_RE = re.compile(r"^\s*(\d{1,9})\s*[x×*]\s*(\S.*?)\s*$", re.IGNORECASE | re.ASCII)
_SIZE_RE = re.compile(r"^\s*(\d{1,15}(?:\.\d{1,15})?)\s*(gib|gb|mib|mb|tib|tb)\s*$", re.IGNORECASE | re.ASCII)
_MIB_NAME_RE = re.compile(r"^\s*(\d{1,9})\s*:\s*(\S.*?)\s*$", re.ASCII)
_NODES_RE = re.compile(r"^\s*(\d{1,9})\s*[x×*]\s*\((.*)\)\s*$", re.IGNORECASE | re.ASCII)
MAX_NODES = 16           # the bound on --nodes / NODESx(...)

FORMS = "COUNTxNAME (1x3090, 4xH100-80GB), COUNTxSIZE (2x24GiB, 1x80GB) or MiB:NAME,MiB:NAME"


_SM_TEXT_RE = re.compile(r"^(\d{1,2})(?:\.(\d))?$", re.ASCII)


def parse_sm(value: str | int | float) -> Decimal:
    """A CUDA compute capability -> ``Decimal("8.6")``; the one SM parser (the catalog loader,
    ``pull --hardware`` and GPU detection use it). Raises ``ValueError``.

    Accepts ``8.6``, ``9``, ``sm_86``, ``sm86`` and ``86`` (two or more bare digits: the compact
    major+minor form). The minor version is one digit: ``8.65`` is rejected, never rounded.
    """
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"not a compute capability: {value!r}")
    text = (repr(value) if isinstance(value, float) else str(value)).strip().lower()
    compact = text.startswith("sm")
    text = text.removeprefix("sm_").removeprefix("sm")
    if text.isdigit() and (compact or len(text) >= 2) and not isinstance(value, int):
        text = f"{text[:-1]}.{text[-1]}"
    match = _SM_TEXT_RE.match(text)
    if not match:
        raise ValueError(f"not a compute capability: {value!r} (e.g. 8.6 or sm_86)")
    sm = Decimal(f"{match.group(1)}.{match.group(2) or 0}")
    if sm < 1:
        raise ValueError(f"not a compute capability: {value!r} (e.g. 8.6 or sm_86)")
    return sm


@dataclass(frozen=True, slots=True)
class GpuSet:
    count: int
    memory_bytes: tuple[int, ...]          # per GPU, in order
    names: tuple[str, ...]                 # per GPU: catalog id, the given name, or the size text
    sm: Decimal | None                     # minimum over the GPUs; None when any is unknown
    gpu: Gpu | None                        # the catalog card when every GPU is that same card
    gpus: tuple[Gpu | None, ...] = ()      # per GPU catalog card (None when not in the catalog)
    spec: str = ""
    nodes: int = 1                         # machines; the GPUs are listed node by node
    interconnect: str | None = None        # the link between nodes (rig/interconnect.py); None: one node
    interconnect_assumed: bool = False     # True: --interconnect not given, the default is priced
    one_node_spec: str = ""                # one node's GPUs as given (``8xH100`` of ``2x(8xH100)``)

    @property
    def gpus_per_node(self) -> int:
        return self.count // max(self.nodes, 1)

    @property
    def multi_node(self) -> bool:
        return self.nodes > 1

    def node_of(self, index: int) -> int:
        """The node GPU ``index`` sits on (node-major order)."""
        return index // max(self.gpus_per_node, 1)

    @property
    def min_memory_bytes(self) -> int:
        return min(self.memory_bytes)

    @property
    def homogeneous(self) -> bool:
        return len(set(self.names)) == 1 and len(set(self.memory_bytes)) == 1

    @property
    def nvlink(self) -> bool | None:
        """Whether every card is NVLink-capable (None when a card is not in the catalog)."""
        if any(g is None for g in self.gpus):
            return None
        return all(g.nvlink for g in self.gpus if g is not None)

    @property
    def mixed_note(self) -> str | None:
        """For a rig of unequal cards: vLLM gives every rank the same KV pool, so the smallest card
        prices the whole rig. None when all cards are alike."""
        if self.homogeneous:
            return None
        smallest = self.memory_bytes.index(self.min_memory_bytes)
        return (f"mixed rig: priced at the smallest card, {self.names[smallest]} "
                f"({self.min_memory_bytes / 2 ** 30:.2f} GiB); every rank gets the same KV pool")

    @property
    def unified_note(self) -> str | None:
        """For unified-memory cards: the share of memory the GPU may use, stated."""
        for card in self.gpus:
            if card is not None and card.usable_memory_fraction is not None:
                return (f"{card.display_name}: unified memory, {card.usable_memory_fraction:.0%} of "
                        f"{card.memory_bytes / 2 ** 30:.0f} GiB usable by the GPU "
                        f"({card.usable_memory_bytes / 2 ** 30:.1f} GiB priced)")
        return None

    def subset(self, n: int) -> "GpuSet":
        """The first ``n`` GPUs (the ones a TP=n profile uses)."""
        n = max(1, min(n, self.count))
        gpus = self.gpus[:n]
        sms = [g.sm if g is not None else None for g in gpus]
        sm = None if any(s is None for s in sms) else min(sms)  # type: ignore[type-var]
        same = gpus[0] if gpus and gpus[0] is not None and all(g == gpus[0] for g in gpus) else None
        if self.nodes > 1 and n > self.gpus_per_node and n % self.gpus_per_node == 0:
            nodes, link, assumed = n // self.gpus_per_node, self.interconnect, self.interconnect_assumed
        else:
            nodes, link, assumed = 1, None, False
        return GpuSet(count=n, memory_bytes=self.memory_bytes[:n], names=self.names[:n], sm=sm,
                      gpu=same, gpus=gpus, spec=self.spec, nodes=nodes, interconnect=link,
                      one_node_spec=self.one_node_spec,
                      interconnect_assumed=assumed)

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"count": self.count, "memory_bytes": list(self.memory_bytes),
                               "names": list(self.names), "sm": str(self.sm) if self.sm is not None else None,
                               "gpu": self.gpu.id if self.gpu is not None else None}
        if self.nodes > 1:
            doc.update({"nodes": self.nodes, "gpus_per_node": self.gpus_per_node,
                        "interconnect": self.interconnect})
        return doc


def card_set(memory_bytes: "tuple[int, ...]", names: "tuple[str, ...]", cards: "tuple[Gpu | None, ...]",
             sm: Decimal | None, spec: str) -> GpuSet:
    """A ``GpuSet`` for GPUs known some other way than ``--gpus`` (detected here, or a profile's
    reference card); ``spec`` says where they came from."""
    same = cards[0] if cards and cards[0] is not None and all(c == cards[0] for c in cards) else None
    return GpuSet(count=len(memory_bytes), memory_bytes=memory_bytes, names=names, sm=sm, gpu=same, gpus=cards,
                  spec=spec, one_node_spec=spec)


def _size_bytes(number: str, unit: str) -> int:
    try:
        value = Decimal(number) * _UNITS[unit.lower()]
    except InvalidOperation:  # pragma: no cover - the regex admits only decimals
        raise UsageError(f"--gpus: bad size {number}{unit}") from None
    if value < 2 ** 20:
        raise UsageError(f"--gpus: GPU memory {number}{unit} is too small")
    if value > MAX_GPU_BYTES:
        raise UsageError(f"--gpus: GPU memory {number}{unit} is over 1 TiB per GPU")
    return int(value)


_BARE_NUMBER_RE = re.compile(r"^\d{1,15}(?:\.\d{1,15})?$", re.ASCII)


_SIZE_SUFFIX_RE = re.compile(r"^\d{1,4}gb?$", re.ASCII)
_BRANDS = ("nvidia", "geforce", "rtx")


def _compact(name: str) -> str:
    """``RTX 4070 Ti Super`` / ``rtx-4070-ti-super`` / ``4070tisuper`` -> one spelling-free key."""
    return re.sub(r"[^a-z0-9]", "", name.lower())


def _unbranded(key: str) -> str:
    for brand in _BRANDS:
        key = key.removeprefix(brand)
    return key


def resolve_card(name: str, catalog: Catalog) -> Gpu | tuple[str, ...]:
    """A GPU name as people type it: the catalog's names and aliases, else the same letters with
    separators and the brand words dropped (``4070tisuper``, ``rtx6000ada``); a name that is
    several cards of different memory (``A100``: 40 and 80 GB) returns their ids, never a guess."""
    gpu = catalog.gpu(name)
    if gpu is not None:
        return gpu
    index: dict[str, set[str]] = {}
    for gid, card in catalog.gpus.items():
        for alias in (gid, card.display_name, *card.aliases):
            index.setdefault(_compact(alias), set()).add(gid)
            index.setdefault(_unbranded(_compact(alias)), set()).add(gid)
    want = _compact(name)
    for key in (want, _unbranded(want)):
        ids = index.get(key, set())
        if len(ids) == 1:
            return catalog.gpus[next(iter(ids))]
    want = _unbranded(want)
    sized = {gid for key, ids in index.items() if want and key.startswith(want)
             and _SIZE_SUFFIX_RE.match(key[len(want):]) for gid in ids}
    return tuple(sorted(sized))


def _lookup(name: str, catalog: Catalog, spec: str, count: int = 1) -> Gpu:
    found = resolve_card(name, catalog)
    if isinstance(found, tuple) and len(found) > 1:
        raise UsageError(f"--gpus {spec!r}: {name!r} names {len(found)} cards of different memory: "
                         f"{', '.join(found)}; name one, e.g. {count}x{found[-1]}")
    gpu = found if not isinstance(found, tuple) else None
    if gpu is None and _BARE_NUMBER_RE.match(name.strip()):
        # a size without its unit ("2x24"): the user meant memory, not a card name
        raise UsageError(f"--gpus {spec!r}: {name!r} has no unit; did you mean {count}x{name.strip()}GiB? "
                         f"(sizes take GiB, GB or MiB; or name the card, e.g. {count}x3090)")
    if gpu is None:
        close = catalog.gpu_suggestions(name)
        hint = (f"; closest known: {', '.join(close)}" if close
                else f"; known: {', '.join(sorted(catalog.gpus))}")
        raise UsageError(f"--gpus {spec!r}: unknown GPU {name!r}{hint} "
                         f"(or give the memory size, e.g. 1x24GiB)")
    return gpu


def _count(text: str, spec: str) -> int:
    count = int(text)
    if not 1 <= count <= MAX_GPUS:
        raise UsageError(f"--gpus {spec!r}: GPU count must be 1..{MAX_GPUS}, got {count}")
    return count


def node_spec(spec: str) -> str:
    """One node's part of a ``--gpus`` value: ``2x(8xH100)`` -> ``8xH100``; any other spec as given."""
    grouped = _NODES_RE.match(spec)
    return grouped.group(2).strip() if grouped else spec.strip()


def parse_gpus(spec: str, catalog: Catalog, *, nodes: int | None = None,
               interconnect: str | None = None) -> GpuSet:
    """Parse a ``--gpus`` value; unknown names raise ``UsageError`` naming the closest cards.

    ``NODESx(ONE NODE)`` or ``nodes`` (``--nodes``: ``spec`` is one node) gives a rig of identical
    nodes; ``interconnect`` (``--interconnect``) names the link between them, default
    :data:`~club3090.rig.interconnect.DEFAULT_INTERCONNECT` (an assumption the output states).
    """
    if not isinstance(spec, str) or not spec.strip():
        raise UsageError(f"--gpus needs a value: {FORMS}")
    grouped = _NODES_RE.match(spec)
    if grouped:
        in_spec = int(grouped.group(1))
        if nodes is not None and nodes != in_spec:
            raise UsageError(f"--gpus {spec!r} names {in_spec} nodes but --nodes says {nodes}; give one of them")
        nodes, node_spec = in_spec, grouped.group(2)
        if "(" in node_spec or ")" in node_spec:
            raise UsageError(f"--gpus {spec!r}: every node is alike here; write NODESx(ONE NODE), "
                             "e.g. 2x(2x3090)")
    else:
        node_spec = spec
    count = 1 if nodes is None else int(nodes)
    if not 1 <= count <= MAX_NODES:
        raise UsageError(f"--nodes: a rig has 1..{MAX_NODES} nodes, got {count}")
    if interconnect is not None and interconnect not in INTERCONNECTS:
        raise UsageError(f"--interconnect {interconnect!r}: one of {', '.join(INTERCONNECTS)}")
    if interconnect is not None and count == 1:
        raise UsageError("--interconnect is the link between nodes: give a rig of several nodes "
                         "(--nodes N, or --gpus NODESx(ONE NODE) such as 2x(2x3090))")
    node = _parse_node(node_spec, catalog, spec)
    if count == 1:
        return node
    if node.count * count > MAX_GPUS:
        raise UsageError(f"--gpus {spec!r}: {count} nodes x {node.count} GPUs is over {MAX_GPUS} GPUs")
    return GpuSet(count=node.count * count, memory_bytes=node.memory_bytes * count, names=node.names * count,
                  sm=node.sm, gpu=node.gpu, gpus=node.gpus * count, spec=spec.strip(), nodes=count,
                  interconnect=interconnect or DEFAULT_INTERCONNECT, interconnect_assumed=interconnect is None,
                  one_node_spec=node.one_node_spec)


def _parse_node(spec: str, catalog: Catalog, whole: str) -> GpuSet:
    """The GPUs of one machine (``whole``: the --gpus value as given, for messages)."""
    if not spec.strip():
        raise UsageError(f"--gpus {whole!r}: a node needs GPUs: {FORMS}")
    memory: list[int] = []
    names: list[str] = []
    cards: list[Gpu | None] = []
    for item in (part.strip() for part in spec.split(",")):
        if not item:
            raise UsageError(f"--gpus {spec!r}: empty item; expected {FORMS}")
        mib_name = _MIB_NAME_RE.match(item)
        if mib_name:
            mib = int(mib_name.group(1))
            if not 1 <= mib <= MAX_GPU_BYTES // 2 ** 20:
                raise UsageError(f"--gpus {spec!r}: memory must be 1..{MAX_GPU_BYTES // 2 ** 20} MiB")
            card = catalog.gpu(mib_name.group(2))
            memory.append(mib * 2 ** 20)
            names.append(card.id if card else mib_name.group(2))
            cards.append(card)
            continue
        counted = _COUNT_RE.match(item)
        count, what = (_count(counted.group(1), spec), counted.group(2)) if counted else (1, item)
        size = _SIZE_RE.match(what)
        if size:
            each = _size_bytes(size.group(1), size.group(2))
            memory += [each] * count
            names += [f"{size.group(1)}{size.group(2)}"] * count
            cards += [None] * count
        else:
            card = _lookup(what, catalog, spec, count)
            memory += [card.usable_memory_bytes] * count
            names += [card.id] * count
            cards += [card] * count
        if len(memory) > MAX_GPUS:
            break
    if not 1 <= len(memory) <= MAX_GPUS:
        raise UsageError(f"--gpus {spec!r}: GPU count must be 1..{MAX_GPUS}, got {len(memory)}")
    sms = [c.sm if c is not None else None for c in cards]
    sm = None if any(s is None for s in sms) else min(s for s in sms if s is not None)
    same = cards[0] if cards[0] is not None and all(c == cards[0] for c in cards) else None
    return GpuSet(count=len(memory), memory_bytes=tuple(memory), names=tuple(names), sm=sm, gpu=same,
                  gpus=tuple(cards), spec=whole.strip(), one_node_spec=spec.strip())
