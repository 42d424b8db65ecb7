"""Pictures: the terminal memory bar and the self-contained HTML page (kv-calc --html), rendered in
headless Chromium and parsed back to check the SVG carries the fit's numbers."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
from html.parser import HTMLParser

import pytest

from club3090.catalog import load_catalog
from club3090.cli import main
from club3090.cli.html_report import candidate_from_fit, render_page
from club3090.cli.memory_bar import bar_lines
from club3090.fit.curve import concurrency_at, concurrency_curve, memory_segments
from club3090.fit.memory import ServeShape, predict
from club3090.model.architecture import parse_config
from club3090.units import GiB

CHROMIUM = next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")) if p), None)


class _Svg(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str]]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, {k: v or "" for k, v in attrs}))

    def of(self, tag: str, cls: str | None = None) -> list[dict[str, str]]:
        return [a for t, a in self.tags if t == tag and (cls is None or cls in a.get("class", "").split())]


def _parse(text: str) -> _Svg:
    p = _Svg()
    p.feed(text)
    return p


@pytest.fixture(scope="module")
def fit():
    cat = load_catalog()
    model = cat.models["qwen3.6-27b"]
    arch = parse_config(model.hf_config)
    result = predict(arch, weights_bytes=int(model.weights["autoround-int4"].size_bytes),
                     gpu_memory_bytes=[24 * GiB, 24 * GiB],
                     shape=ServeShape(tp=2, kv_cache_dtype="fp8_e4m3", max_model_len=65536, max_num_seqs=4))
    assert not hasattr(result, "reason"), result
    return result


def test_curve_matches_the_fit(fit):
    assert concurrency_at(fit, fit.max_model_len) == pytest.approx(fit.max_concurrency)
    curve = concurrency_curve(fit)
    lengths = [n for n, _ in curve]
    assert lengths == sorted(lengths) and lengths[-1] == fit.max_model_len_fit and fit.max_model_len in lengths
    concurrency = [c for _, c in curve]
    assert all(a >= b for a, b in itertools.pairwise(concurrency))          # longer context, fewer requests


def test_segments_sum_to_the_card(fit):
    rank = fit.ranks[0]
    segs = memory_segments(rank, fit.cudagraph_outside_budget_bytes)
    assert sum(s.bytes for s in segs) == rank.gpu_memory_bytes
    assert {s.key for s in segs} >= {"weights", "kv_pool", "reserved"}
    assert next(s for s in segs if s.key == "kv_pool").bytes == rank.kv_pool_bytes


@pytest.mark.parametrize("width", [40, 80, 200])
def test_terminal_bar_fits_the_width_without_colour(fit, width):
    segs = memory_segments(fit.ranks[0])
    bar, *legend = bar_lines(segs, fit.ranks[0].gpu_memory_bytes, width, color=False, title="GPU 0")
    text = bar.plain
    assert len(text) <= max(width, 10 + len("GPU 0 [] 24.0 GiB"))
    assert "\x1b" not in text and "#" in text and "=" in text                # weights and KV pool fills
    assert f"{fit.ranks[0].weights_bytes / GiB:.2f}" in legend[0].plain
    assert all(len(line.plain) <= max(width, 40) for line in legend)
    assert not bar.spans                                                     # no styles without colour


def test_kv_calc_prints_the_bar_and_honours_no_color(capsys, monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["kv-calc", "vllm/minimal", "--gpus", "1x3090"]) == 0
    out = capsys.readouterr().out
    assert "\x1b[" not in out
    bar = next(line for line in out.splitlines() if line.startswith("GPU 0"))
    assert "[" in bar and "#" in bar and len(bar) <= 80


def test_page_is_self_contained_and_carries_the_numbers(fit):
    page = render_page("qwen3.6-27b on 2x3090 <script>", [candidate_from_fit("TP 2 <b>", fit, ["note & more"])],
                       headline="fits — estimated")
    lowered = page.lower()
    for bad in ("<script", "src=", "href=", "url(", "@import", "http://", "https://"):
        assert bad not in lowered, bad
    assert "&lt;script&gt;" in page and "&lt;b&gt;" in page and "note &amp; more" in page
    svg = _parse(page)
    segments = svg.of("rect", "segment")
    by_key = {}
    for s in segments:
        by_key.setdefault(s["data-key"], []).append(int(s["data-bytes"]))
    assert by_key["weights"] == [r.weights_bytes for r in fit.ranks]
    assert by_key["kv_pool"] == [r.kv_pool_bytes for r in fit.ranks]
    gpus = svg.of("g", "gpu")
    assert [int(g["data-total-bytes"]) for g in gpus] == [r.gpu_memory_bytes for r in fit.ranks]
    points = svg.of("circle", "point")
    assert [int(p["data-context"]) for p in points] == [n for n, _ in concurrency_curve(fit)]
    priced = svg.of("circle", "priced")
    assert len(priced) == 1 and float(priced[0]["data-concurrency"]) == pytest.approx(fit.max_concurrency, abs=0.01)


def test_kv_calc_html_writes_the_page(tmp_path, capsys):
    out = tmp_path / "fit.html"
    assert main(["kv-calc", "vllm/minimal", "--gpus", "1x3090", "--json", "--html", str(out)]) == 0
    doc = json.loads(capsys.readouterr().out)
    page = out.read_text(encoding="utf-8")
    svg = _parse(page)
    weights = [int(s["data-bytes"]) for s in svg.of("rect", "segment") if s["data-key"] == "weights"]
    assert weights == [doc["per_gpu"]["weights_bytes"]]
    priced = svg.of("circle", "priced")
    assert int(priced[0]["data-context"]) == doc["max_model_len"]
    assert float(priced[0]["data-concurrency"]) == pytest.approx(doc["max_concurrency"], abs=0.01)


def test_kv_calc_html_refuses_an_existing_file(tmp_path, capsys):
    out = tmp_path / "fit.html"
    out.write_text("mine", encoding="utf-8")
    assert main(["kv-calc", "vllm/minimal", "--gpus", "1x3090", "--html", str(out)]) == 64
    assert out.read_text(encoding="utf-8") == "mine"


def test_page_renders_in_headless_chromium(tmp_path, fit):
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("CI needs chromium for this test (.ci/run installs it)")
        pytest.skip("no chromium binary (Debian: apt-get install chromium)")
    page = tmp_path / "page.html"
    page.write_text(render_page("render check", [candidate_from_fit("TP 2", fit)]), encoding="utf-8")
    shot = tmp_path / "shot.png"
    proc = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                           f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}",
                           "--window-size=900,1400", page.as_uri()],
                          capture_output=True, text=True, timeout=180, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (900, 1400)


def test_bar_with_colour_uses_styles(fit):
    segs = memory_segments(fit.ranks[0])
    bar, *_legend = bar_lines(segs, fit.ranks[0].gpu_memory_bytes, 100, color=True)
    assert bar.spans and "█" in bar.plain


def test_mixed_rig_bars_scale_and_say_which_card_limits(capsys, monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "100")
    assert main(["kv-calc", "vllm/minimal", "--gpus", "1x3090,1x3060", "--tp", "2"]) in (0, 2)
    out = capsys.readouterr().out
    bars = [line for line in out.splitlines() if line.startswith("GPU ")]
    assert len(bars) == 2 and len(bars[1]) < len(bars[0])
    assert "mixed rig" in out and "12.00 GiB" in out
