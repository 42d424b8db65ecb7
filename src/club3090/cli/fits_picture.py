"""The `fits` ranking as a picture: each candidate's weights, KV cache (its context) and the rest on
the rig's memory, as a compact terminal bar under each row and as bars on one HTML page
(``fits --html FILE``), so a person sees at a glance why one model fits and another does not.

``row_bars(row, vram, ram) -> tuple[GpuBar, ...]``: the GPUs' memory (all of them, summed) and, for
a llama.cpp row with offload, the host memory, each split into weights / KV cache / other (runtime:
activations, CUDA graphs, compute buffers) / free. Works on both row kinds: the curated
``pipeline.fits.FitsRow`` (vLLM's ``FitResult`` or a GGUF listing) and the index's ``OpenRow``
(a ``FitResult`` or an offload plan); a row the memory model did not price shows its weights alone.
``compact_bar(bars, width)`` is the terminal line; ``ranking_page(...)`` the HTML
(``cli.html_report``'s bars, CSS and escaping).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from club3090.cli.html_report import GpuBar
from club3090.fit.curve import Segment
from club3090.units import GiB

__all__ = ["compact_bar", "legend", "ranking_page", "row_bars"]

# segment key -> terminal fill (weights, KV, other, free), Unicode and ASCII; the HTML uses
# html_report.COLOURS
FILL = {"weights": "█", "kv_pool": "▓", "non_torch": "▒", "free": "·"}
FILL_ASCII = {"weights": "#", "kv_pool": "=", "non_torch": "+", "free": "."}
OVER = "!"
BAR_MIN, BAR_MAX = 10, 40
TAIL = len(" 999.9/99.9 GiB")          # room kept for a bar's figures


def _bar(title: str, capacity: int, weights: int, kv: int, other: int) -> GpuBar:
    used = [Segment("weights", "weights", max(weights, 0)), Segment("kv_pool", "KV cache (context)", max(kv, 0)),
            Segment("non_torch", "runtime (activations, graphs, buffers)", max(other, 0))]
    free = capacity - sum(s.bytes for s in used)
    return GpuBar(title, capacity, tuple(s for s in used if s.bytes > 0) + ((Segment("free", "free", free),)
                                                                           if free > 0 else ()))


def _from_fit(fit: Any, vram: int) -> GpuBar:
    ranks = fit.ranks
    return _bar("GPUs", vram, sum(r.weights_bytes for r in ranks), sum(max(r.kv_pool_bytes, 0) for r in ranks),
                sum(r.non_torch_bytes + r.activation_bytes + r.cudagraph_bytes for r in ranks)
                + fit.cudagraph_outside_budget_bytes * len(ranks))


def _from_quant_fit(fit: Any, vram: int, ram: int) -> tuple[GpuBar, ...]:
    """The layout at the target context; host memory drawn when layers or experts go there (a quant
    fully on the GPUs keeps only llama.cpp's small host buffers in RAM)."""
    breakdown = fit.at_target
    gpus, host = breakdown.devices[:-1], breakdown.host
    bars = [_bar("GPUs", vram, sum(d.weights_bytes for d in gpus), sum(d.kv_bytes for d in gpus),
                 sum(d.compute_bytes + d.overhead_bytes for d in gpus))]
    if not fit.fits_fully:
        bars.append(_bar("RAM", ram, host.weights_bytes, host.kv_bytes, host.compute_bytes + host.overhead_bytes))
    return tuple(bars)


def _quant_fit_of(row: Any) -> Any | None:
    plan = getattr(row, "plan", None)
    if plan is not None:
        return plan.fit
    listing = getattr(row, "gguf", None)
    if listing is None:
        return None
    best = listing.best or next((q for q in listing.rows if q.fit is not None), None)
    return best.fit if best is not None else None


def row_bars(row: Any, vram: int, ram: int) -> tuple[GpuBar, ...]:
    """The row's memory on the rig (``vram``: every GPU's bytes summed; ``ram``: usable host bytes)."""
    quant_fit = _quant_fit_of(row)
    if quant_fit is not None:
        return _from_quant_fit(quant_fit, vram, ram)
    if getattr(row, "fit", None) is not None:
        return (_from_fit(row.fit, vram),)
    weights = int(getattr(row, "weights_bytes", 0) or 0)
    return (_bar("GPUs", vram, weights, 0, 0),) if weights else ()


def _fill(bar: GpuBar, width: int, fills: dict[str, str]) -> str:
    from club3090.cli.memory_bar import bar_cells

    used = sum(s.bytes for s in bar.segments if s.key != "free")
    total = max(bar.total_bytes, used)
    body = "".join(fills.get(s.key, "?") * n for s, n in zip(bar.segments, bar_cells(bar.segments, total, width),
                                                             strict=True))
    over = used > bar.total_bytes
    return (body[:-1] + OVER) if over and body else body


def compact_bar(bars: Sequence[GpuBar], width: int, slots: int = 1, *, ascii_only: bool = False) -> str:
    """``GPUs [███▓▓▓▒····] 30.1/48.0 GiB  RAM [██··] 20.3/60.0 GiB`` in ``width`` columns, each bar
    as long as ``slots`` bars side by side allow (the same for every row, so lengths compare down
    the ranking; a ``!`` at the end: more than the memory holds; ``ascii_only``: ``#=+.`` fills).
    Legend: :func:`legend`."""
    if not bars:
        return ""
    slots = max(slots, len(bars))
    room = width - slots * (len("GPUs [] ") + TAIL) - 2 * (slots - 1)
    cells = max(BAR_MIN, min(BAR_MAX, room // slots))
    out = []
    for b in bars:
        used = sum(s.bytes for s in b.segments if s.key != "free")
        out.append(f"{b.title} [{_fill(b, cells, FILL_ASCII if ascii_only else FILL)}] "
                   f"{used / GiB:.1f}/{b.total_bytes / GiB:.1f} GiB")
    return "  ".join(out)


def legend(*, ascii_only: bool = False) -> str:
    f = FILL_ASCII if ascii_only else FILL
    return (f"memory bars: {f['weights']} weights  {f['kv_pool']} KV cache (context)  {f['non_torch']} runtime  "
            f"{f['free']} free  {OVER} over capacity")


def _row_html(rank: int, title: str, detail: str, fits: bool, bars: Sequence[GpuBar], scale: int) -> str:
    from html import escape

    from club3090.cli.html_report import bars_svg

    verdict = "fits" if fits else "does not fit"
    return (f'<section class="candidate {"fits" if fits else "no-fit"}" data-name="{escape(title)}" '
            f'data-rank="{rank}"><h2>{rank}. {escape(title)} <span class="verdict">{verdict}</span></h2>'
            f'<p class="detail">{escape(detail)}</p>{bars_svg(bars, scale_bytes=scale) if bars else ""}</section>')


def ranking_page(title: str, headline: str, rows: Sequence[tuple[str, str, bool, tuple[GpuBar, ...]]]) -> str:
    """One page: the rig in the headline, then per row (name, detail, fits, bars) its bars, all on
    one scale (the largest memory drawn), so lengths compare down the page."""
    from club3090.cli.html_report import render_document

    scale = max((max(b.total_bytes, sum(s.bytes for s in b.segments)) for r in rows for b in r[3]), default=1)
    body = [_row_html(i, name, detail, fits, bars, scale) for i, (name, detail, fits, bars) in enumerate(rows, 1)]
    return render_document(title, headline, body, notes=("Bars: weights, KV cache (the context), runtime "
                                                         "(activations, CUDA graphs, buffers) and free memory, "
                                                         "to one scale.",),
                           footer="Figures are estimates (club3090 fits), not measurements.")
