#!/usr/bin/env python3
"""How long `club3090 fits` takes to rank the whole catalog against a rig (no network, no GPU).

    PYTHONPATH=src python benchmarks/fits_speed.py [--gpus 1x3090] [--repeat 5]

Prints the wall time of each run of the pipeline (`club3090.pipeline.fits.fits`) and of one whole
CLI process (import included). A benchmark, not a test: the machine's load decides the numbers.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", default="1x3090")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    os.environ.setdefault("CLUB3090_NO_GPU_DETECT", "1")
    from club3090.edges.provider import LiveProvider
    from club3090.pipeline.fits import FitsRequest, fits
    from club3090.rig.gpus import parse_gpus
    from club3090.settings import Settings

    provider = LiveProvider(Settings.from_env())
    gpus = parse_gpus(args.gpus, provider.catalog())   # the catalog loads once per process; time the ranking
    for i in range(args.repeat):
        start = time.perf_counter()
        report = fits(FitsRequest(gpus=gpus), provider)
        took = time.perf_counter() - start
        print(f"run {i + 1}: {len(report.rows)} models ranked on {args.gpus} in {took * 1000:.0f} ms "
              f"({sum(r.fits for r in report.rows)} fit)")
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "club3090", "fits", "--gpus", args.gpus], check=False,
                   stdout=subprocess.DEVNULL, env={**os.environ})
    print(f"whole process (`club3090 fits --gpus {args.gpus}`, imports included): "
          f"{(time.perf_counter() - start) * 1000:.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
