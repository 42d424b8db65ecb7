"""--gpus SPEC parsing through the catalog GPU table."""

from __future__ import annotations

from decimal import Decimal

import pytest

from club3090.catalog import load_catalog
from club3090.errors import UsageError
from club3090.rig.gpus import parse_gpus

GIB, MIB = 2 ** 30, 2 ** 20


@pytest.fixture(scope="module")
def cat():
    return load_catalog()


@pytest.mark.parametrize("spec, count, each, gpu, sm", [
    ("1x3090", 1, 24576 * MIB, "rtx-3090", "8.6"),
    ("3090", 1, 24576 * MIB, "rtx-3090", "8.6"),
    ("2xrtx-4090", 2, 24564 * MIB, "rtx-4090", "8.9"),
    ("4xH100-80GB", 4, 81559 * MIB, "h100-80gb", "9.0"),
    ("2 x RTX 3090", 2, 24576 * MIB, "rtx-3090", "8.6"),
    ("1xa100-80gb", 1, 81920 * MIB, "a100-80gb", "8.0"),
    ("8xh200", 8, 143771 * MIB, "h200", "9.0"),
    ("1xrtx-pro-6000", 1, 97887 * MIB, "rtx-6000-pro-blackwell", "12.0"),
    ("2x24GiB", 2, 24 * GIB, None, None),
    ("1x23.58GiB", 1, int(23.58 * GIB), None, None),
    ("1x80GB", 1, 80 * 10 ** 9, None, None),
    ("1x24576MiB", 1, 24576 * MIB, None, None),
    ("64x3090", 64, 24576 * MIB, "rtx-3090", "8.6"),
])
def test_parse_table(cat, spec, count, each, gpu, sm):
    g = parse_gpus(spec, cat)
    assert g.count == count
    assert g.memory_bytes == (each,) * count
    assert len(g.names) == count
    assert (g.gpu.id if g.gpu else None) == gpu
    assert g.sm == (Decimal(sm) if sm else None)


def test_upstream_mib_name_form(cat):
    g = parse_gpus("24576:NVIDIA GeForce RTX 3090,24564:NVIDIA GeForce RTX 4090", cat)
    assert g.count == 2
    assert g.memory_bytes == (24576 * MIB, 24564 * MIB)
    assert g.names == ("rtx-3090", "rtx-4090")
    assert g.sm == Decimal("8.6") and g.gpu is None
    assert g.subset(1).gpu.id == "rtx-3090"


def test_unknown_card_in_mib_form_keeps_memory(cat):
    g = parse_gpus("16384:Some Future GPU", cat)
    assert g.memory_bytes == (16384 * MIB,) and g.sm is None and g.gpu is None


def test_mixed_rig_takes_min_sm(cat):
    g = parse_gpus("1x4090,1x3090", cat)
    assert g.count == 2 and g.sm == Decimal("8.6") and g.gpu is None
    assert g.subset(1).sm == Decimal("8.9")


@pytest.mark.parametrize("spec, name, known", [("1xrtx-3080", "rtx-3080", "1xrtx-3090"),
                                               ("2xfoo", "foo", "2x3090"), ("rtx3080", "rtx3080", "rtx3090")])
def test_unknown_name_suggests(cat, spec, name, known):
    # the same spec with a known name parses, and the name is not in the catalog: the name is refused
    assert parse_gpus(known, cat).count >= 1 and cat.gpu(name) is None
    with pytest.raises(UsageError):
        parse_gpus(spec, cat)


def test_suggestions_name_close_cards(cat):
    with pytest.raises(UsageError) as info:
        parse_gpus("1xrtx-3080", cat)
    assert "rtx-3090" in str(info.value)


@pytest.mark.parametrize("spec", ["0x3090", "65x3090", "", "  ", "1x3090,", "40x3090,40x3090", "1x0.0001GiB"])
def test_bad_counts_and_syntax(cat, spec):
    with pytest.raises(UsageError):
        parse_gpus(spec, cat)
