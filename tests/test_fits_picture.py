"""`fits`' picture: each candidate's weights / KV cache / runtime on the rig's memory, as a compact
terminal bar under each row and as bars on one self-contained page (`fits --html FILE`). The page is
parsed back: every bar's length is its bytes on one scale, the numbers are the fit's, and
repository text is escaped."""

from __future__ import annotations

import json
from html.parser import HTMLParser

import pytest

from club3090.cli import main
from club3090.cli.fits_picture import FILL, OVER, compact_bar, ranking_page, row_bars
from club3090.cli.html_report import BAR_W, GpuBar
from club3090.fit.curve import Segment
from club3090.units import GiB


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.sections: list[list[tuple[str, dict[str, str]]]] = []

    def handle_starttag(self, tag, attrs):
        entry = (tag, {k: v or "" for k, v in attrs})
        self.tags.append(entry)
        if tag == "section":
            self.sections.append([])
        if self.sections:
            self.sections[-1].append(entry)


def _parse(text: str) -> _Page:
    page = _Page()
    page.feed(text)
    page.close()
    return page


@pytest.fixture
def offline(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-hf"))
    monkeypatch.setenv("COLUMNS", "100")


def _bars_of(section: list[tuple[str, dict[str, str]]]) -> list[dict[str, object]]:
    bars: list[dict[str, object]] = []
    for tag, attrs in section:
        if tag == "g" and "gpu" in attrs.get("class", ""):
            bars.append({"title": attrs["data-gpu"], "total": int(attrs["data-total-bytes"]), "segments": []})
        elif tag == "rect" and "segment" in attrs.get("class", "").split():
            bars[-1]["segments"].append((attrs["data-key"], int(attrs["data-bytes"]), float(attrs["width"])))
    return bars


def test_html_page_draws_every_row_to_one_scale(offline, tmp_path, capsys):
    out = tmp_path / "fits.html"
    assert main(["fits", "--gpus", "1x3090", "--ram", "64", "--json", "--html", str(out)]) == 0
    doc = json.loads(capsys.readouterr().out)                  # --json: the JSON alone, no bar text
    assert "memory:" not in json.dumps(doc)
    page = _parse(out.read_text(encoding="utf-8"))
    assert len(page.sections) == len(doc["models"]) + len(doc["index_models"]) >= 150
    bars = [bar for section in page.sections for bar in _bars_of(section)]
    scale = max(max(b["total"], sum(s[1] for s in b["segments"])) for b in bars)
    for bar in bars:
        for _key, size, width in bar["segments"]:
            assert width == pytest.approx(size / scale * BAR_W, abs=0.01)      # length = bytes, one scale
    gpu_totals = {b["total"] for b in bars if b["title"] == "GPUs"}
    assert gpu_totals == {doc["gpus"]["memory_bytes"][0]}                       # the rig's memory
    assert {b["total"] for b in bars if b["title"] == "RAM"} == {doc["index"]["ram"]["usable_bytes"]}
    # an offloaded index row: its RAM bar holds the weights the plan puts on the host
    offloaded = [m for m in doc["index_models"] if m["offloaded"]]
    names = [s[0][1]["data-name"] for s in page.sections]
    drawn = [m for m in offloaded if m["model"] in names]
    assert drawn
    for m in drawn:
        ram = next(b for b in _bars_of(page.sections[names.index(m["model"])]) if b["title"] == "RAM")
        assert dict((k, n) for k, n, _ in ram["segments"])["weights"] == m["offload"]["host_weights_bytes"]


def test_html_refuses_an_existing_file_before_any_work(offline, tmp_path, capsys):
    out = tmp_path / "fits.html"
    out.write_text("mine", encoding="utf-8")
    assert main(["fits", "--gpus", "1x3090", "--html", str(out)]) == 64
    assert out.read_text(encoding="utf-8") == "mine"
    assert main(["fits", "--gpus", "1x3090", "--no-index", "--html", str(out), "--force"]) == 0
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


def test_repository_text_is_escaped_on_the_page():
    hostile = '<script>alert(1)</script>"&\x1b[2J'
    bar = GpuBar("GPUs", 24 * GiB, (Segment("weights", "weights", 10 * GiB), Segment("free", "free", 14 * GiB)))
    page = ranking_page(f"fits on {hostile}", f"rig {hostile}", [(hostile, f"detail {hostile}", True, (bar,))])
    lowered = page.lower()
    for bad in ("<script", "src=", "href=", "http://", "https://", "url("):
        assert bad not in lowered, bad
    assert "&lt;script&gt;" in page and "&quot;&amp;" in page
    parsed = _parse(page)
    assert parsed.sections[0][0][1]["data-name"] == hostile        # the attribute round-trips as data


def test_terminal_bar_cells_follow_the_bytes():
    bar = GpuBar("GPUs", 24 * GiB, (Segment("weights", "w", 12 * GiB), Segment("kv_pool", "kv", 6 * GiB),
                                    Segment("non_torch", "rt", 2 * GiB), Segment("free", "free", 4 * GiB)))
    line = compact_bar((bar,), 24 + len("GPUs [] ") + len(" 999.9/99.9 GiB"))
    cells = line[line.index("[") + 1:line.index("]")]
    assert len(cells) == 24
    assert [cells.count(FILL[k]) for k in ("weights", "kv_pool", "non_torch", "free")] == [12, 6, 2, 4]
    assert line.endswith("20.0/24.0 GiB")


def test_terminal_bar_marks_more_than_the_memory_holds():
    over = GpuBar("GPUs", 24 * GiB, (Segment("weights", "w", 36 * GiB),))
    line = compact_bar((over,), 60)
    assert line[line.index("]") - 1] == OVER and "36.0/24.0 GiB" in line


@pytest.mark.parametrize("width", [30, 60, 70, 100, 200])
def test_terminal_bars_fit_the_width_and_keep_one_length(width):
    gpus = GpuBar("GPUs", 48 * GiB, (Segment("weights", "w", 30 * GiB), Segment("free", "free", 18 * GiB)))
    ram = GpuBar("RAM", 60 * GiB, (Segment("weights", "w", 10 * GiB), Segment("free", "free", 50 * GiB)))
    both, alone = compact_bar((gpus, ram), width, slots=2), compact_bar((gpus,), width, slots=2)
    if width >= 2 * (10 + len("GPUs [] ") + len(" 999.9/99.9 GiB")) + 2:     # two bars at their shortest
        assert len(both) <= width
    assert both.index("]") == alone.index("]")                     # the GPUs bar as long with or without RAM


def test_text_ranking_prints_a_bar_per_row_and_the_legend(offline, capsys):
    assert main(["fits", "--gpus", "1x3090", "--ram", "64", "--limit", "25"]) == 0
    out = capsys.readouterr().out.splitlines()
    bars = [line for line in out if line.strip().startswith("memory: GPUs [")]
    assert len(bars) >= 20 and all(len(line) <= 100 for line in bars)
    assert any("RAM [" in line for line in bars)                    # an offloaded row shows its host share
    assert out[-1].startswith("memory bars:")


def test_row_bars_sum_the_fit_over_every_rank():
    from club3090.catalog import load_catalog
    from club3090.catalog.open_index import load_open_index
    from club3090.pipeline.open_fits import OpenFitsRequest, open_fits
    from club3090.rig.gpus import parse_gpus

    rig = parse_gpus("2x3090", load_catalog())
    rows = open_fits(load_open_index(), rig, OpenFitsRequest(ram_bytes=60 * GiB))
    row = next(r for r in rows if r.fit is not None and r.tp == 2 and r.fits)
    (bar,) = row_bars(row, sum(rig.memory_bytes), 60 * GiB)
    sizes = {s.key: s.bytes for s in bar.segments}
    assert sizes["weights"] == sum(r.weights_bytes for r in row.fit.ranks)
    assert sizes["kv_pool"] == sum(r.kv_pool_bytes for r in row.fit.ranks)
    assert sum(sizes.values()) == bar.total_bytes == 48 * GiB


def test_ascii_bars_for_a_non_utf8_locale(offline, capsys, monkeypatch):
    from club3090.cli.fits_picture import FILL_ASCII, legend

    bar = GpuBar("GPUs", 24 * GiB, (Segment("weights", "w", 12 * GiB), Segment("kv_pool", "kv", 6 * GiB),
                                    Segment("free", "free", 6 * GiB)))
    line = compact_bar((bar,), 60, ascii_only=True)
    assert line.isascii() and FILL_ASCII["weights"] in line and FILL_ASCII["kv_pool"] in line
    assert legend(ascii_only=True).isascii() and not legend().isascii()
    monkeypatch.setenv("LC_ALL", "C")
    assert main(["fits", "--gpus", "1x3090", "--no-index", "--limit", "5"]) == 0
    out = capsys.readouterr().out.splitlines()
    bars = [line for line in out if line.strip().startswith("memory: ")]
    assert bars and all(line.isascii() for line in bars) and out[-1].isascii()


def test_the_locale_rule():
    from club3090.settings import unicode_terminal

    assert unicode_terminal({}) and unicode_terminal({"LANG": "en_US.UTF-8"})
    assert unicode_terminal({"LC_ALL": "C.utf8", "LANG": "C"})
    assert not unicode_terminal({"LC_ALL": "C", "LANG": "en_US.UTF-8"})         # LC_ALL decides first
    assert not unicode_terminal({"LANG": "POSIX"})
