"""--gpus SPEC parsing through the catalog GPU table."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest

from club3090.catalog import load_catalog
from club3090.errors import UsageError
from club3090.rig.gpus import parse_gpus

GIB, MIB = 2 ** 30, 2 ** 20
MAX_BYTES = 2 ** 40


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


@pytest.mark.parametrize("spec, name, known", [("1xrtx-3099", "rtx-3099", "1xrtx-3090"),
                                               ("2xfoo", "foo", "2x3090"), ("rtx3099", "rtx3099", "rtx3090")])
def test_unknown_name_suggests(cat, spec, name, known):
    # the same spec with a known name parses, and the name is not in the catalog: the name is refused
    assert parse_gpus(known, cat).count >= 1 and cat.gpu(name) is None
    with pytest.raises(UsageError):
        parse_gpus(spec, cat)


def test_suggestions_name_close_cards(cat):
    with pytest.raises(UsageError) as info:
        parse_gpus("1xrtx-3099", cat)
    assert "rtx-3090" in str(info.value)


@pytest.mark.parametrize("spec", ["0x3090", "65x3090", "", "  ", "1x3090,", "40x3090,40x3090", "1x0.0001GiB"])
def test_bad_counts_and_syntax(cat, spec):
    with pytest.raises(UsageError):
        parse_gpus(spec, cat)


# ----------------------------------------------------------------------------- the GPU table

@pytest.mark.parametrize("spec, gpu, mib, sm", [
    ("1x3080", "rtx-3080", 10240, "8.6"),
    ("1x3080-12gb", "rtx-3080-12gb", 12288, "8.6"),
    ("2x3080ti", "rtx-3080-ti", 12288, "8.6"),
    ("1x4070ti", "rtx-4070-ti", 12282, "8.9"),
    ("1x4080", "rtx-4080", 16376, "8.9"),
    ("1x4060ti-16gb", "rtx-4060-ti-16gb", 16380, "8.9"),
    ("1x4060ti", "rtx-4060-ti", 8188, "8.9"),          # a bare name of a two-size card: the smaller
    ("1x5080", "rtx-5080", 16303, "12.0"),
    ("4xa10g", "a10g", 23028, "8.6"),
    ("1xa10", "a10", 23028, "8.6"),
    ("2xa40", "a40", 46068, "8.6"),
    ("1xl40", "l40", 46068, "8.9"),
    ("8xl40s", "l40s", 46068, "8.9"),
    ("4xv100", "v100-16gb", 16160, "7.0"),
    ("1xv100-32gb", "v100-32gb", 32510, "7.0"),
    ("2x2080ti", "rtx-2080-ti", 11264, "7.5"),
    ("8xa100-80gb", "a100-80gb", 81920, "8.0"),
    ("8xh100-pcie", "h100-pcie", 81559, "9.0"),
    ("8xh200-nvl", "h200-nvl", 143771, "9.0"),
    ("8xb200", "b200", 183359, "10.0"),
    ("1xrtx-pro-6000", "rtx-6000-pro-blackwell", 97887, "12.0"),
    ("24576:NVIDIA GeForce RTX 3090", "rtx-3090", 24576, "8.6"),
    ("16376:NVIDIA GeForce RTX 4080", "rtx-4080", 16376, "8.9"),
])
def test_table_covers_current_nvidia_cards(cat, spec, gpu, mib, sm):
    g = parse_gpus(spec, cat)
    assert g.gpu is not None and g.gpu.id == gpu
    assert set(g.memory_bytes) == {mib * MIB}
    assert g.sm == Decimal(sm)
    assert g.gpu.memory_bandwidth_gb_s > 0 and g.gpu.bf16_tflops > 0


@pytest.mark.parametrize("spec, gpu, vendor, gib", [
    ("8xmi300x", "mi300x", "amd", 192), ("1xmi210", "mi210", "amd", 64), ("8xmi355x", "mi355x", "amd", 288),
    ("8xmi325x", "mi325x", "amd", 256), ("2x7900xtx", "rx-7900-xtx", "amd", 24),
    ("1xw7900", "radeon-pro-w7900", "amd", 48),
])
def test_table_covers_amd(cat, spec, gpu, vendor, gib):
    g = parse_gpus(spec, cat)
    assert g.gpu.id == gpu and g.gpu.vendor == vendor
    assert set(g.memory_bytes) == {gib * GIB}
    assert g.unified_note is None


@pytest.mark.parametrize("spec, total_gib, fraction", [
    ("1xm3-ultra-512gb", 512, 0.75), ("1xm4-max-128gb", 128, 0.75), ("1xm2-ultra-192gb", 192, 0.75),
    ("1xm4-pro-24gb", 24, 0.67), ("1xdgx-spark", 128, 0.93), ("1xgb10", 128, 0.93),
])
def test_unified_memory_prices_the_usable_share(cat, spec, total_gib, fraction):
    g = parse_gpus(spec, cat)
    assert g.gpu.memory_bytes == total_gib * GIB
    assert g.gpu.usable_memory_fraction == fraction
    assert g.memory_bytes == (int(total_gib * GIB * fraction),)
    assert f"{fraction:.0%}" in g.unified_note and "usable" in g.unified_note


def test_every_row_has_speed_figures_and_a_plausible_size(cat):
    assert len(cat.gpus) >= 80
    for gid, gpu in cat.gpus.items():
        assert 8 * 10 ** 9 * 0.95 <= gpu.memory_bytes <= MAX_BYTES, gid
        assert 100 <= gpu.memory_bandwidth_gb_s <= 10_000, gid
        assert 5 <= gpu.bf16_tflops <= 5_000, gid
        if gpu.vendor != "nvidia":
            assert gpu.sm == Decimal("8.0"), gid        # the SM gate's assumption, not a capability


@pytest.mark.parametrize("spec, suggestion", [("2x24", "2x24GiB"), ("1x80", "1x80GiB"), ("4x23.5", "4x23.5GiB"),
                                               ("48", "1x48GiB")])
def test_size_without_unit_suggests_the_size(cat, spec, suggestion):
    with pytest.raises(UsageError) as info:
        parse_gpus(spec, cat)
    text = str(info.value)
    assert suggestion in text
    assert "t4" not in text and "l4" not in text
    assert parse_gpus(suggestion, cat).count == int(suggestion.split("x")[0])


def test_mixed_rig_prices_the_smallest_card_and_says_so(cat):
    g = parse_gpus("1x4090,1x3060", cat)
    assert g.min_memory_bytes == 12288 * MIB
    assert "rtx-3060-12gb" in g.mixed_note and "smallest" in g.mixed_note and "12.00 GiB" in g.mixed_note
    assert parse_gpus("2x3090", cat).mixed_note is None
    sized = parse_gpus("1x24GiB,1x16GiB", cat)
    assert "16GiB" in sized.mixed_note


def test_named_non_nvidia_card_is_priced_with_a_notice(cat):
    from club3090.outcome import NoticeCode
    from club3090.rig.hardware import resolve_hardware

    hw = resolve_hardware(tp=2, gpu_set=parse_gpus("2xmi300x", cat))
    assert hw.memory_bytes == (192 * GIB, 192 * GIB) and hw.sm == Decimal("8.0")
    notice = next(n for n in hw.notices if n.code == NoticeCode.NON_NVIDIA_GPU)
    assert "AMD Instinct MI300X" in notice.text and "size check" in notice.text
    nvidia = resolve_hardware(tp=2, gpu_set=parse_gpus("2x3090", cat))
    assert not any(n.code == NoticeCode.NON_NVIDIA_GPU for n in nvidia.notices)


# ---------------------------------------------------------------------------------------------
# rigs of several nodes


@pytest.mark.parametrize("spec, nodes, per_node", [
    ("2x(2x3090)", None, 2), ("2 x (8xH100)", None, 8), ("2x3090", 2, 2), ("8xH100", 3, 8),
    ("2x(2x3090)", 2, 2), ("2x(1x24GiB,1x3090)", None, 2),
])
def test_nodes_forms(cat, spec, nodes, per_node):
    g = parse_gpus(spec, cat, nodes=nodes)
    n = nodes or int(spec.split("x")[0])
    assert (g.nodes, g.gpus_per_node, g.count) == (n, per_node, n * per_node)
    assert g.multi_node and g.interconnect == "ethernet-10g"
    assert [g.node_of(i) for i in range(g.count)] == [i // per_node for i in range(g.count)]
    one = parse_gpus(spec.split("(", 1)[1].rstrip(")") if "(" in spec else spec, cat)
    assert g.memory_bytes == one.memory_bytes * n and g.names == one.names * n and g.sm == one.sm
    doc = g.to_json()
    assert (doc["nodes"], doc["gpus_per_node"], doc["interconnect"]) == (n, per_node, "ethernet-10g")


def test_one_node_is_the_single_box_value(cat):
    g = parse_gpus("2x3090", cat)
    assert (g.nodes, g.interconnect, g.gpus_per_node, g.multi_node) == (1, None, 2, False)
    assert "nodes" not in g.to_json()
    assert parse_gpus("2x3090", cat, nodes=1) == g
    assert parse_gpus("1x(2x3090)", cat).nodes == 1


@pytest.mark.parametrize("link", ["ethernet-10g", "ethernet-100g", "infiniband"])
def test_interconnect_is_kept(cat, link):
    assert parse_gpus("2x(8xH100)", cat, interconnect=link).interconnect == link


@pytest.mark.parametrize("spec, kwargs, says", [
    ("2x(2x3090)", {"nodes": 3}, "--nodes says 3"),
    ("2x(2x(2x3090))", {}, "NODESx(ONE NODE)"),
    ("2x(2x3090),1x(4x4090)", {}, "NODESx(ONE NODE)"),
    ("2x()", {}, "a node needs GPUs"),
    ("2x3090", {"nodes": 0}, "1..16 nodes"),
    ("2x3090", {"nodes": 17}, "1..16 nodes"),
    ("16x(8xH100)", {}, "over 64 GPUs"),
    ("2x(2x3090)", {"interconnect": "carrier-pigeon"}, "ethernet-10g, ethernet-100g, infiniband"),
    ("2x3090", {"interconnect": "infiniband"}, "link between nodes"),
    ("2x(2xnope)", {}, "unknown GPU"),
])
def test_nodes_refusals(cat, spec, kwargs, says):
    with pytest.raises(UsageError, match=re.escape(says)):
        parse_gpus(spec, cat, **kwargs)


def test_subset_keeps_whole_nodes(cat):
    g = parse_gpus("2x(8xH100)", cat, interconnect="infiniband")
    assert (g.subset(16).nodes, g.subset(16).interconnect) == (2, "infiniband")
    assert (g.subset(8).nodes, g.subset(8).interconnect) == (1, None)


@pytest.mark.parametrize("spec, node", [("2x(8xH100)", "8xH100"), (" 2 x ( 1x3090,1x24GiB ) ", "1x3090,1x24GiB"),
                                        ("2x3090", "2x3090")])
def test_node_spec(spec, node):
    from club3090.rig.gpus import node_spec

    assert node_spec(spec) == node


@pytest.mark.parametrize("spec, gpu", [("1x4070tisuper", "rtx-4070-ti-super"), ("1xrtx6000ada", "rtx-6000-ada"),
                                       ("1x6000ada", "rtx-6000-ada"), ("1xRTX4070TiSuper", "rtx-4070-ti-super"),
                                       ("1xa100-80gb", "a100-80gb")])
def test_names_as_people_type_them(cat, spec, gpu):
    assert parse_gpus(spec, cat).names == (gpu,)


@pytest.mark.parametrize("spec", ["1xA100", "1xa100", "2xA100"])
def test_a_name_of_two_sizes_suggests_both(cat, spec):
    with pytest.raises(UsageError) as err:
        parse_gpus(spec, cat)
    assert "a100-40gb" in str(err.value) and "a100-80gb" in str(err.value)
    assert "a10," not in str(err.value)
