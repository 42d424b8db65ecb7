#!/usr/bin/env python3
"""How long `club3090 fits` takes with the open-model index (offline, no GPU).

    PYTHONPATH=src python benchmarks/open_fits_speed.py [--repeat 3]

Prints, wall and CPU seconds: loading the index, ranking it on 2x3090 (every engine) and on 1x3090
with 64 GiB for llama.cpp (offload planned), and whole `club3090 fits --gpus 2x3090 --json`
processes with `HF_HUB_OFFLINE=1` and an empty HF cache: the first with an empty state folder (every
catalog YAML parsed), the rest reading the parsed documents back (``catalog/parse_cache``). Run it
with byte-compiled modules (``PYTHONDONTWRITEBYTECODE`` unset), as an installed package runs. A
benchmark, not a test: on a shared machine the wall time follows the load, the CPU time much less
(``tests/test_fits_cost.py`` guards the cost by counts).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def timed(label: str, fn):  # type: ignore[no-untyped-def]
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    print(f"{label}: {time.perf_counter() - wall:.3f} s wall, {time.process_time() - cpu:.3f} s CPU")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    from club3090.catalog import load_catalog
    from club3090.catalog.open_index import load_open_index
    from club3090.pipeline.open_fits import GGUF, OpenFitsRequest, open_fits
    from club3090.rig.gpus import parse_gpus
    from club3090.units import GiB

    catalog = load_catalog()
    index = timed("index load", load_open_index)
    two, one = parse_gpus("2x3090", catalog), parse_gpus("1x3090", catalog)
    rows = timed(f"rank {len(index.models)} models on 2x3090",
                 lambda: open_fits(index, two, OpenFitsRequest(ram_bytes=60 * GiB)))
    print(f"  {sum(r.fits for r in rows)} run, {sum(r.engine == 'llama.cpp' and r.fits for r in rows)} under llama.cpp")
    rows = timed("rank on 1x3090 + 64 GiB, llama.cpp",
                 lambda: open_fits(index, one, OpenFitsRequest(engine=GGUF, ram_bytes=60 * GiB)))
    print(f"  {sum(r.offloaded for r in rows)} with offload")
    with tempfile.TemporaryDirectory() as empty, tempfile.TemporaryDirectory() as state:
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": empty, "CLUB3090_STATE_DIR": state,
               "PYTHONPATH": str(ROOT / "src")}
        walls = []
        for i in range(args.repeat + 1):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            subprocess.run([sys.executable, "-m", "club3090", "fits", "--gpus", "2x3090", "--json"], check=False,
                           stdout=subprocess.DEVNULL, env=env)
            wall = time.perf_counter() - start
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            what = "first run, YAML parsed" if i == 0 else "parsed YAML read back"
            print(f"process {i + 1} (`club3090 fits --gpus 2x3090 --json`, offline, empty HF cache, {what}): "
                  f"{wall:.3f} s wall, {cpu:.3f} s CPU")
            walls.append(wall)
        print(f"median wall {sorted(walls[1:])[len(walls[1:]) // 2]:.3f} s (first run {walls[0]:.3f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
