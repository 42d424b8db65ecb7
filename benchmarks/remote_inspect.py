#!/usr/bin/env python3
"""Time `club3090 inspect` against a loopback Hub with a simulated network round trip.

    python benchmarks/remote_inspect.py [--latency-ms 80] [--shards 163] [--json]

The loopback Hub is the test suite's fake (`tests/fakehub.py`), run in its own process so its
work does not share the measured interpreter; the real `huggingface_hub` client talks to it as it talks to huggingface.co (with `--lfs-redirect`, LFS files answer with a
redirect to another origin as the real Hub's do; by default it serves them itself). Two repos:
the DeepSeek-V3 layout (61 layers + MTP, per-expert FP8 weights with block scales, `--shards`
files with an index) and Qwen3-8B (one file). Every answer waits `--latency-ms` first.

For each repo it prints the wall time of one in-process `club3090 inspect --json` run, the
number of HTTP requests the Hub received (a redirect and the request it leads to count as two)
and the body bytes it sent. A peer tool installed beside club3090 (`hf-mem`) is run against
the same Hub when present; otherwise it is reported as not installed.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from tests.fakehub import FakeHub, add_deepseek_v3_layout  # noqa: E402

REPOS = ("deepseek-ai/DeepSeek-V3", "Qwen/Qwen3-8B")


def run_ours(hub: "RemoteHub", repo_id: str) -> dict[str, Any]:
    from huggingface_hub.utils import close_session

    from club3090 import cli

    close_session()  # a cold client: connections are opened inside the timed span, as for a user
    hub.clear_log()
    out, err = io.StringIO(), io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["inspect", repo_id, "--json"])
    wall = time.perf_counter() - start
    result: dict[str, Any] = {"tool": "club3090", "repo": repo_id, "exit": code, "wall_s": round(wall, 3),
                              **hub.stats()}
    if code == 0:
        facts = json.loads(out.getvalue())
        result["weights_bytes"] = facts.get("weights_bytes")
    return result


def run_hf_mem(hub: "RemoteHub", repo_id: str) -> dict[str, Any]:
    exe = shutil.which("hf-mem")
    if exe is None and importlib.util.find_spec("hf_mem") is None:
        return {"tool": "hf-mem", "repo": repo_id, "status": "not installed"}
    cmd = [exe] if exe else [sys.executable, "-m", "hf_mem"]
    hub.clear_log()
    start = time.perf_counter()
    proc = subprocess.run([*cmd, "--model-id", repo_id], capture_output=True, timeout=600,
                          env={**os.environ, "HF_ENDPOINT": hub.url}, check=False)
    wall = time.perf_counter() - start
    return {"tool": "hf-mem", "repo": repo_id, "exit": proc.returncode, "wall_s": round(wall, 3),
            **hub.stats()}


def serve(args: argparse.Namespace) -> int:
    """The Hub's own process (so its work does not share the client's interpreter): prints its
    URL, then answers ``clear`` / ``stats`` lines on stdin until ``stop`` or end of input."""
    hub = FakeHub().start()
    try:
        add_deepseek_v3_layout(hub, shards=args.shards)
        hub.add_fixture("Qwen--Qwen3-8B")
        hub.quirks.lfs_redirect = args.lfs_redirect
        hub.latency_s = args.latency_ms / 1000.0
        print(hub.url, flush=True)
        for line in sys.stdin:
            command = line.strip()
            if command == "clear":
                hub.clear_log()
                print("{}", flush=True)
            elif command == "stats":
                print(json.dumps({"requests": len(hub.log), "bytes": hub.bytes_sent()}), flush=True)
            else:
                break
    finally:
        hub.stop()
    return 0


class RemoteHub:
    """The client side of ``serve``: the URL and the request log's totals."""

    def __init__(self, args: argparse.Namespace) -> None:
        cmd = [sys.executable, __file__, "--serve", "--latency-ms", str(args.latency_ms),
               "--shards", str(args.shards)] + (["--lfs-redirect"] if args.lfs_redirect else [])
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None and self.proc.stdin is not None
        self.url = self.proc.stdout.readline().strip()
        if not self.url.startswith("http://127.0.0.1:"):
            raise SystemExit("the loopback Hub did not start")

    def _ask(self, command: str) -> dict[str, int]:
        assert self.proc.stdout is not None and self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        answer: dict[str, int] = json.loads(self.proc.stdout.readline())
        return answer

    def clear_log(self) -> None:
        self._ask("clear")

    def stats(self) -> dict[str, int]:
        return self._ask("stats")

    def stop(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1].strip())
    parser.add_argument("--latency-ms", type=float, default=80.0, help="added before every answer")
    parser.add_argument("--shards", type=int, default=163, help="files of the DeepSeek-V3 layout")
    parser.add_argument("--lfs-redirect", action="store_true",
                        help="LFS files answer 302 to another origin, as huggingface.co does (one more "
                             "request per shard read); by default the Hub serves them itself")
    parser.add_argument("--repeat", type=int, default=1, help="runs per repo; the fastest is kept")
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        return serve(args)

    with tempfile.TemporaryDirectory(prefix="club3090-bench-") as home:
        os.environ.update(HF_HOME=home, HF_HUB_DISABLE_TELEMETRY="1")
        os.environ.pop("HF_HUB_OFFLINE", None)
        os.environ.pop("HF_TOKEN", None)
        hub = RemoteHub(args)
        try:
            os.environ["HF_ENDPOINT"] = hub.url
            rows = []
            for repo_id in REPOS:
                runs = [run_ours(hub, repo_id) for _ in range(max(1, args.repeat))]
                rows.append(min(runs, key=lambda r: r["wall_s"]))
                rows.append(run_hf_mem(hub, repo_id))
        finally:
            hub.stop()
    for row in rows:
        if args.json:
            print(json.dumps(row, sort_keys=True))
        elif "status" in row:
            print(f"{row['tool']:<9} {row['repo']:<26} {row['status']}")
        else:
            print(f"{row['tool']:<9} {row['repo']:<26} exit {row['exit']}  {row['wall_s']:6.2f} s  "
                  f"{row['requests']:4d} requests  {row['bytes'] / 1e6:7.2f} MB")
    print(f"(loopback Hub, {args.latency_ms:g} ms added per request, LFS redirects "
          f"{'on' if args.lfs_redirect else 'off'})", file=sys.stderr)
    return 0 if all(r.get("exit", 0) == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
