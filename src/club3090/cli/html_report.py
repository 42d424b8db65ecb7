"""One self-contained HTML page for a fit: the memory split per GPU and the context-vs-concurrency
curve, as inline SVG (no scripts, no external assets). ``kv-calc --html FILE`` writes it; ``fits``
can pass several candidate shapes.

``candidate_from_fit(name, result, notes=()) -> Candidate`` and
``render_page(title, candidates, headline="", notes=()) -> str``. Every number drawn is also in the
element's ``data-*`` attributes and its ``<title>`` tooltip, so the page can be checked by parsing.
All text is HTML-escaped: model names and repo ids come from strangers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape
from typing import Any

from club3090.fit.curve import Segment, concurrency_curve, memory_segments
from club3090.units import gib_text

__all__ = ["Candidate", "GpuBar", "bars_svg", "candidate_from_fit", "render_document", "render_page"]

COLOURS = {"weights": "#3b6fd4", "non_torch": "#a24bc8", "activation": "#d9a21b", "cudagraphs": "#2bb3c0",
           "kv_pool": "#3fa34d", "reserved": "#b8b8b8", "free": "#ececec"}
BAR_W, BAR_H, BAR_GAP, LABEL_W = 640, 28, 14, 70
PLOT_W, PLOT_H, PAD_L, PAD_B, PAD_T, PAD_R = 640, 300, 60, 44, 16, 20


@dataclass(frozen=True, slots=True)
class GpuBar:
    title: str
    total_bytes: int
    segments: tuple[Segment, ...]


@dataclass(frozen=True, slots=True)
class Candidate:
    name: str
    gpus: tuple[GpuBar, ...]
    curve: tuple[tuple[int, float], ...]
    max_model_len: int
    notes: tuple[str, ...] = field(default=())


def candidate_from_fit(name: str, result: Any, notes: Sequence[str] = ()) -> Candidate:
    """A candidate shape from a ``fit.memory.FitResult``: every rank's split and the curve."""
    bars = tuple(GpuBar(f"GPU {r.rank}", r.gpu_memory_bytes,
                        memory_segments(r, result.cudagraph_outside_budget_bytes)) for r in result.ranks)
    return Candidate(name=name, gpus=bars, curve=concurrency_curve(result), max_model_len=result.max_model_len,
                     notes=tuple(notes))




def bars_svg(gpus: Sequence[GpuBar], *, scale_bytes: int | None = None) -> str:
    """One bar per entry, lengths proportional to bytes; ``scale_bytes`` is the full width (default:
    the largest total here), so bars drawn apart compare."""
    height = len(gpus) * (BAR_H + BAR_GAP) + 24
    top = scale_bytes or max((g.total_bytes for g in gpus), default=1) or 1
    out = [f'<svg class="memory" width="{LABEL_W + BAR_W + 90}" height="{height}" role="img" '
           f'aria-label="memory per GPU">']
    for i, gpu in enumerate(gpus):
        y = i * (BAR_H + BAR_GAP) + 4
        out.append(f'<g class="gpu" data-gpu="{escape(gpu.title)}" data-total-bytes="{gpu.total_bytes}">')
        out.append(f'<text x="0" y="{y + BAR_H * 0.7:.1f}" class="label">{escape(gpu.title)}</text>')
        x = float(LABEL_W)
        for seg in gpu.segments:
            w = seg.bytes / top * BAR_W
            colour = COLOURS.get(seg.key, "#777")
            out.append(f'<rect class="segment" data-key="{seg.key}" data-bytes="{seg.bytes}" '
                       f'data-gib="{gib_text(seg.bytes)}" x="{x:.2f}" y="{y}" width="{max(w, 0):.2f}" '
                       f'height="{BAR_H}" fill="{colour}"><title>{escape(seg.label)}: {gib_text(seg.bytes)} GiB'
                       f'</title></rect>')
            if w > 46:
                out.append(f'<text class="value" x="{x + w / 2:.2f}" y="{y + BAR_H * 0.68:.1f}" '
                           f'text-anchor="middle">{gib_text(seg.bytes)}</text>')
            x += w
        out.append(f'<text x="{x + 6:.2f}" y="{y + BAR_H * 0.7:.1f}" class="total">'
                   f'{gib_text(gpu.total_bytes)} GiB</text></g>')
    legend_y = len(gpus) * (BAR_H + BAR_GAP) + 14
    x = 0
    seen: list[Segment] = []
    for gpu in gpus:
        seen.extend(s for s in gpu.segments if s.key not in {k.key for k in seen})
    for seg in seen:
        out.append(f'<rect x="{x}" y="{legend_y - 10}" width="12" height="12" fill="{COLOURS.get(seg.key, "#777")}"/>'
                   f'<text x="{x + 16}" y="{legend_y}" class="legend">{escape(seg.label)}</text>')
        x += 24 + 7 * len(seg.label)
    out.append("</svg>")
    return "".join(out)


def _curve_svg(curve: Sequence[tuple[int, float]], max_model_len: int) -> str:
    if not curve:
        return '<p class="empty">No context fits: no curve.</p>'
    xs = [math.log2(max(n, 1)) for n, _ in curve]
    x_lo, x_hi = min(xs), max(xs)
    y_hi = max(c for _, c in curve) or 1.0
    y_hi = max(1.0, y_hi) * 1.1
    span_x = (x_hi - x_lo) or 1.0

    def px(n: int) -> float:
        return PAD_L + (math.log2(max(n, 1)) - x_lo) / span_x * (PLOT_W - PAD_L - PAD_R)

    def py(c: float) -> float:
        return PAD_T + (1 - c / y_hi) * (PLOT_H - PAD_T - PAD_B)

    out = [f'<svg class="curve" width="{PLOT_W}" height="{PLOT_H}" role="img" '
           f'aria-label="concurrent requests per context length">',
           f'<line x1="{PAD_L}" y1="{PLOT_H - PAD_B}" x2="{PLOT_W - PAD_R}" y2="{PLOT_H - PAD_B}" class="axis"/>',
           f'<line x1="{PAD_L}" y1="{PAD_T}" x2="{PAD_L}" y2="{PLOT_H - PAD_B}" class="axis"/>']
    for frac in (0.0, 0.5, 1.0):
        value = y_hi / 1.1 * frac
        out.append(f'<text class="tick" x="{PAD_L - 6}" y="{py(value) + 4:.1f}" text-anchor="end">{value:.1f}</text>')
    points = " ".join(f"{px(n):.2f},{py(c):.2f}" for n, c in curve)
    out.append(f'<polyline points="{points}" fill="none" stroke="#3fa34d" stroke-width="2"/>')
    for n, c in curve:
        mark = " priced" if n == max_model_len else ""
        out.append(f'<circle class="point{mark}" data-context="{n}" data-concurrency="{c:.2f}" cx="{px(n):.2f}" '
                   f'cy="{py(c):.2f}" r="{5 if mark else 3}"><title>{n:,} tokens: {c:.2f} concurrent requests'
                   f'</title></circle>')
    first, last = curve[0][0], curve[-1][0]
    for n in sorted({first, last, max_model_len} & {p[0] for p in curve}):
        out.append(f'<text class="tick" x="{px(n):.2f}" y="{PLOT_H - PAD_B + 16}" text-anchor="middle">'
                   f'{_k(n)}</text>')
    out.append(f'<text class="axis-label" x="{(PLOT_W + PAD_L) / 2:.0f}" y="{PLOT_H - 6}" text-anchor="middle">'
               f'context per request (tokens, log scale)</text>')
    out.append(f'<text class="axis-label" x="14" y="{PLOT_H / 2:.0f}" transform="rotate(-90 14 {PLOT_H / 2:.0f})" '
               f'text-anchor="middle">concurrent full-length requests</text>')
    out.append("</svg>")
    return "".join(out)


def _k(n: int) -> str:
    return f"{n // 1024}K" if n >= 1024 and n % 1024 == 0 else f"{n:,}"


CSS = """body{font-family:system-ui,sans-serif;margin:24px;color:#222;background:#fff;max-width:820px}
h1{font-size:20px}h2{font-size:16px;margin-top:28px}p.headline{font-size:16px;font-weight:600}
svg text{font-size:12px;fill:#222}svg text.value{fill:#fff;font-weight:600}.axis{stroke:#444}
.point.priced{fill:#d9532b}.point{fill:#3fa34d}ul.notes{font-size:13px;color:#444}
table{border-collapse:collapse;font-size:13px}td,th{padding:2px 10px;text-align:right;border-bottom:1px solid #ddd}
td:first-child,th:first-child{text-align:left}"""


def render_page(title: str, candidates: Sequence[Candidate], headline: str = "", notes: Sequence[str] = ()) -> str:
    """The whole page as one string (UTF-8 HTML, inline SVG and CSS, nothing fetched)."""
    parts = []
    for cand in candidates:
        parts.append(f'<section class="candidate" data-name="{escape(cand.name)}">')
        parts.append(f"<h2>{escape(cand.name)}</h2>")
        parts.append("<h3>Memory per GPU (GiB)</h3>")
        parts.append(bars_svg(cand.gpus))
        parts.append("<h3>Context vs concurrency</h3>")
        parts.append(_curve_svg(cand.curve, cand.max_model_len))
        rows = "".join(f"<tr><td>{n:,}</td><td>{c:.2f}</td></tr>" for n, c in cand.curve)
        parts.append(f'<table class="curve-table"><tr><th>context (tokens)</th><th>concurrent requests</th></tr>'
                     f"{rows}</table>")
        if cand.notes:
            parts.append('<ul class="notes">' + "".join(f"<li>{escape(n)}</li>" for n in cand.notes) + "</ul>")
        parts.append("</section>")
    return render_document(title, headline, parts, notes=notes)


def render_document(title: str, headline: str, body: Sequence[str], *, notes: Sequence[str] = (),
                    footer: str = "Figures are estimates (club3090 kv-calc), not measurements.") -> str:
    """The page shell around ``body`` (already-escaped HTML parts): title, headline, notes, footer."""
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>{escape(title)}</title><style>{CSS}</style></head><body>",
             f"<h1>{escape(title)}</h1>"]
    if headline:
        parts.append(f'<p class="headline">{escape(headline)}</p>')
    parts.extend(body)
    if notes:
        parts.append('<ul class="notes">' + "".join(f"<li>{escape(n)}</li>" for n in notes) + "</ul>")
    parts.append(f'<p class="footer">{escape(footer)}</p>')
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
