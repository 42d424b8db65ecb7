"""The per-GPU memory split as a bar in the terminal (``kv-calc``; ``fits`` can reuse it).

``bar_lines(segments, total_bytes, width, color=...) -> list[Text]``: one bar line sized to the
terminal and a legend line. With colour each segment is a coloured block; without (``NO_COLOR``,
a pipe, ``--no-color`` terminals) each segment has its own fill character, so the bar still reads.
Narrow terminals get a shorter bar, never a wrapped one; the legend wraps at word boundaries.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from club3090.settings import no_color
from club3090.units import GiB

MIN_BAR = 10
MAX_BAR = 72
# segment key -> (colour style, fill character without colour)
STYLE = {
    "weights": ("bold blue", "#"),
    "non_torch": ("magenta", "n"),
    "activation": ("yellow", "a"),
    "cudagraphs": ("cyan", "g"),
    "kv_pool": ("green", "="),
    "reserved": ("bright_black", "."),
}


def colour_wanted(console: Any) -> bool:
    """Colour only on a colour terminal and without ``NO_COLOR`` (https://no-color.org)."""
    if no_color():
        return False
    return bool(getattr(console, "is_terminal", False)) and getattr(console, "color_system", None) is not None


def bar_cells(segments: Sequence[Any], total: int, width: int) -> list[int]:
    """Cells per segment, largest-remainder rounding; a non-empty segment gets at least one."""
    if total <= 0:
        return [0 for _ in segments]
    raw = [s.bytes * width / total for s in segments]
    cells = [int(r) for r in raw]
    for i, s in enumerate(segments):
        if s.bytes > 0 and cells[i] == 0:
            cells[i] = 1
    while sum(cells) > width:
        i = max(range(len(cells)), key=lambda k: cells[k])
        cells[i] -= 1
    order = sorted(range(len(raw)), key=lambda k: raw[k] - int(raw[k]), reverse=True)
    for i in order:
        if sum(cells) >= width:
            break
        cells[i] += 1
    return cells


def legend_lines(segments: Sequence[Any], width: int, *, color: bool) -> list[Any]:
    """``█ weights 8.15  = KV pool 12.60 ...`` wrapped between items, never inside one."""
    from rich.text import Text

    lines: list[Any] = []
    line = Text()
    for seg in segments:
        style, fill = STYLE.get(seg.key, ("white", "?"))
        item = Text()
        item.append("█" if color else fill, style=style if color else None)
        item.append(f" {seg.label} {seg.bytes / GiB:.2f}")
        if line.plain and len(line.plain) + 2 + len(item.plain) > width:
            lines.append(line)
            line = Text()
        if line.plain:
            line.append("  ")
        line.append_text(item)
    if line.plain:
        lines.append(line)
    return lines


def bar_lines(segments: Sequence[Any], total_bytes: int, width: int, *, color: bool, title: str = "",
              scale: float = 1.0) -> list[Any]:
    """The bar and its legend as rich ``Text`` lines fitting ``width`` columns. ``scale`` (0, 1]
    shortens the bar of a smaller card on a mixed rig, so lengths compare across GPUs."""
    from rich.text import Text

    prefix = f"{title} " if title else ""
    total_label = f" {total_bytes / GiB:.1f} GiB"
    room = width - len(prefix) - len(total_label) - 2
    full = max(MIN_BAR, min(MAX_BAR, room))
    bar_width = max(MIN_BAR // 2, round(full * min(max(scale, 0.0), 1.0)))
    bar = Text(prefix + "[")
    for seg, n in zip(segments, bar_cells(segments, total_bytes, bar_width), strict=True):
        style, fill = STYLE.get(seg.key, ("white", "?"))
        if n:
            bar.append("█" * n if color else fill * n, style=style if color else None)
    bar.append("]" + total_label)
    return [bar, *legend_lines(segments, width, color=color)]


def print_memory_bars(console: Any, ranks: Sequence[Any], segments_of: Any) -> None:
    """One bar per GPU rank (``segments_of(rank) -> segments``), sized to ``console.width``; the
    legend once when every rank is split alike, else under each bar. A mixed rig says which card
    limits the KV pool."""
    color = colour_wanted(console)
    width = int(getattr(console, "width", 80) or 80)
    label_width = len(f"GPU {max(r.rank for r in ranks)}") if ranks else 5
    largest = max((r.gpu_memory_bytes for r in ranks), default=1) or 1
    splits = [tuple(segments_of(r)) for r in ranks]
    alike = len({tuple((s.key, s.bytes) for s in split) for split in splits}) <= 1
    for i, (rank, segments) in enumerate(zip(ranks, splits, strict=True)):
        lines = bar_lines(segments, rank.gpu_memory_bytes, width, color=color,
                          title=f"GPU {rank.rank}".ljust(label_width), scale=rank.gpu_memory_bytes / largest)
        console.print(lines[0], no_wrap=True, overflow="crop", soft_wrap=False)
        if not alike or i == len(ranks) - 1:
            for line in lines[1:]:
                console.print(line, no_wrap=True, overflow="crop", soft_wrap=False)
    sizes = {r.gpu_memory_bytes for r in ranks}
    if len(sizes) > 1:
        console.print(f"mixed rig: vLLM gives every rank the same KV pool, so the smallest card "
                      f"({min(sizes) / GiB:.2f} GiB) limits it")
