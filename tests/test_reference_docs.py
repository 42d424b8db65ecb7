"""The reference pages users reach for exist, the README links them, and docs/HARDWARE.md is the
catalog's GPU table as it ships (rendered by tools/hardware_doc.py, never edited by hand)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _hardware_doc():
    spec = importlib.util.spec_from_file_location("hardware_doc", ROOT / "tools" / "hardware_doc.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("page", ["ENGINES.md", "HARDWARE.md", "TROUBLESHOOTING.md"])
def test_the_readme_links_each_reference_page(page):
    assert (ROOT / "docs" / page).is_file()
    assert f"(docs/{page})" in (ROOT / "README.md").read_text(encoding="utf-8")


def test_hardware_page_is_the_shipped_gpu_table():
    doc = _hardware_doc()
    current = (ROOT / "docs" / "HARDWARE.md").read_text(encoding="utf-8")
    assert current == doc.render(), f"docs/HARDWARE.md is stale: regenerate with `{doc.COMMAND}`"


def test_hardware_page_lists_every_gpu_and_both_a100_sizes():
    from club3090.catalog import load_catalog
    text = (ROOT / "docs" / "HARDWARE.md").read_text(encoding="utf-8")
    for gid in load_catalog().gpus:
        assert f"| `{gid}` |" in text, gid
    assert "`a100-40gb`" in text and "`a100-80gb`" in text


def test_troubleshooting_covers_every_gate_token():
    from club3090.outcome import Reason
    text = (ROOT / "docs" / "TROUBLESHOOTING.md").read_text(encoding="utf-8")
    stops = [r.value for r in Reason if r.value not in {"engine-supported", "disk-ok", "d-refused"}]
    missing = [token for token in stops if token not in text]
    assert missing == []
