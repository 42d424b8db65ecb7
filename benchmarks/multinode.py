#!/usr/bin/env python3
"""The multi-node fit against published two-node start-up figures (tests/fixtures/multinode).

    PYTHONPATH=src:. python benchmarks/multinode.py

For each record: the predicted per-rank terms of the logged PP stage beside the logged ones, the
limiting rank, and the decode estimate of the same shape over each inter-node link beside the one
published two-node single-stream figure (another engine, so quoted, never scored). No network.
"""

from __future__ import annotations

import json

from club3090.catalog import load_catalog
from club3090.fit.memory import ServeShape, Unpriceable, predict
from club3090.fit.speed import estimate_speed
from club3090.model.architecture import parse_config
from club3090.rig.gpus import parse_gpus
from club3090.rig.interconnect import INTERCONNECTS
from club3090.units import GiB
from tests.fakehub import FIXTURES, fp8_block_table, header_sum, synth_table
from tests.fixtures_path import fixture_path

PUBLISHED_DECODE = ("SGLang, DeepSeek-R1-0528, 16x H100 over InfiniBand, concurrency 1 "
                    "(tenstorrent/tt-inference-server#356)", 1000 / 23.1)


def main() -> int:
    figures = json.loads((fixture_path("multinode") / "startup_figures.json").read_text())
    catalog = load_catalog()
    for f in figures:
        config = json.loads((FIXTURES / f["config_fixture"] / "config.json").read_bytes())
        weights = header_sum(fp8_block_table(synth_table(config, layers=int(config["num_hidden_layers"]) + 1)))
        arch = parse_config(config)
        tp, pp = f["tensor_parallel_size"], f["pipeline_parallel_size"]
        shape = ServeShape(tp=tp, pp=pp, mem_util=f["gpu_memory_utilization"], max_model_len=16384,
                           vllm_version=f["vllm_version_priced"],
                           distributed_executor_backend=f["distributed_executor_backend"])
        fit = predict(arch, weights_bytes=weights, gpu_memory_bytes=[int(f["gpu_total_memory_gib"] * GiB)] * (tp * pp),
                      shape=shape)
        if isinstance(fit, Unpriceable):
            print(f"{f['id']}: cannot be priced: {fit.reason}")
            continue
        rank = fit.ranks[f["logged_stage"] * tp]
        pool = rank.budget_bytes - rank.weights_bytes - rank.non_torch_bytes - int(f["activation_gib"] * GiB)
        print(f"{f['id']}  ({f['url']})")
        print(f"  TP {tp} x PP {pp} on {f['nodes']}x{f['gpus_per_node']} {f['gpu_model']}, stage {f['logged_stage']}")
        rows = [("weights", rank.weights_bytes / GiB, f["weights_gib"]),
                ("non-torch", rank.non_torch_bytes / GiB, min(f["non_torch_gib"])),
                ("KV pool (logged activation)", pool / GiB, f["kv_cache_gib"])]
        for name, got, logged in rows:
            print(f"  {name:<28} predicted {got:7.2f} GiB  logged {logged:7.2f} GiB  error {got - logged:+.2f} GiB "
                  f"({(got - logged) / logged:+.1%})")
        print(f"  limiting rank {fit.per_gpu.rank} (stage {fit.per_gpu.rank // tp}), band ±{fit.error_band_bytes / GiB:.2f} GiB")
    print("decode, DeepSeek-V3 TP 8 x PP 2 on 2x(8xH100):")
    config = json.loads((FIXTURES / "deepseek-ai--DeepSeek-V3" / "config.json").read_bytes())
    arch = parse_config(config)
    weights = header_sum(fp8_block_table(synth_table(config, layers=int(config["num_hidden_layers"]) + 1)))
    for link in INTERCONNECTS:
        est = estimate_speed(arch, weights, ServeShape(tp=8, pp=2), parse_gpus("2x(8xH100)", catalog, interconnect=link))
        if est is not None:
            print(f"  {link:<14} ~{est.decode_tps:.0f} tok/s (band {est.band_low:.0f}-{est.band_high:.0f}, estimated)")
    print(f"  published: {PUBLISHED_DECODE[0]}: {PUBLISHED_DECODE[1]:.0f} tok/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
