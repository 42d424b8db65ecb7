"""The link between nodes: which boundaries a layout crosses, and what the output says about it."""

from __future__ import annotations

import pytest

from club3090.rig.interconnect import DEFAULT_INTERCONNECT, INTERCONNECTS, advisories, crossings


@pytest.mark.parametrize("tp, pp, per_node, expected", [
    (8, 2, 8, (False, 1)),      # the guide's layout: one hop between the two nodes
    (2, 2, 2, (False, 1)),
    (2, 4, 2, (False, 3)),
    (2, 4, 4, (False, 1)),      # two stages per node: only the middle boundary crosses
    (16, 1, 8, (True, 0)),      # TP across nodes
    (1, 4, 4, (False, 0)),      # everything on one node
])
def test_crossings(tp, pp, per_node, expected):
    assert crossings(tp, pp, per_node) == expected


def test_one_node_has_no_advice():
    assert advisories(8, 1, 8, 2, "ethernet-10g") == ()
    assert advisories(2, 2, 2, 1, None) == ()


def test_pp_across_nodes_names_the_link_and_its_hops():
    (text,) = advisories(8, 2, 8, 2, "infiniband")
    assert "PP 2 crosses 1 node boundary over infiniband" in text


@pytest.mark.parametrize("link, word", [("ethernet-10g", "discouraged"), ("ethernet-100g", "discouraged"),
                                        ("infiniband", "workable")])
def test_tp_across_nodes_is_discouraged_over_ethernet(link, word):
    first = advisories(16, 1, 8, 2, link)[0]
    assert first.startswith(f"TP 16 spans nodes over {link}: {word}")
    assert "tensor parallel inside a node (8 GPUs), pipeline parallel across nodes" in first


def test_default_is_a_known_link_and_is_the_slowest():
    assert DEFAULT_INTERCONNECT in INTERCONNECTS
    assert INTERCONNECTS[DEFAULT_INTERCONNECT].bytes_per_s == min(i.bytes_per_s for i in INTERCONNECTS.values())
    assert "ethernet-10g" in advisories(2, 2, 2, 2, None)[0]
