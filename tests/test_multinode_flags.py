"""--nodes / --interconnect reach the rig the same way on every command, and refuse clearly."""

from __future__ import annotations

import json

import pytest

from club3090.catalog import load_catalog
from club3090.cli import main
from club3090.cli.commands._types import gpu_set


def test_gpu_set_takes_nodes_and_interconnect():
    import argparse

    args = argparse.Namespace(gpus="2x3090", nodes=2, interconnect="infiniband")
    rig = gpu_set(args, load_catalog())
    assert rig is not None and (rig.nodes, rig.gpus_per_node, rig.interconnect) == (2, 2, "infiniband")


@pytest.mark.parametrize("argv", [
    ["fits", "--nodes", "2"],
    ["fits", "--interconnect", "infiniband"],
    ["fits", "--gpus", "2x3090", "--interconnect", "infiniband"],
    ["fits", "--gpus", "2x(2x3090)", "--nodes", "3"],
    ["kv-calc", "qwen3.6-27b", "--gpus", "2x3090", "--interconnect", "ethernet-100g"],
    ["fits", "--gpus", "2x3090", "--nodes", "17"],
])
def test_bad_rig_flags_are_usage_errors(argv, capsys):
    try:
        code = main([*argv, "--json"])
    except SystemExit as exc:           # argparse's own refusals leave through SystemExit
        code = exc.code
    assert code == 64
    out = capsys.readouterr()
    assert "Traceback" not in out.err + out.out


def test_fits_json_names_the_nodes(capsys):
    main(["fits", "--gpus", "2x(2x3090)", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert doc["gpus"]["nodes"] == 2 and doc["gpus"]["gpus_per_node"] == 2
    assert doc["gpus"]["interconnect"] == "ethernet-10g" and doc["gpus"]["interconnect_assumed"] is True
