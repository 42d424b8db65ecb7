"""Parsers with budgets in the Loop (hardening round 3): the error extraction is linear, so
``loop classify`` on a 4 MiB bundle line ends in seconds (BUG-3), and ``loop ingest`` refuses
huge or non-finite numbers instead of crashing or printing ``Infinity`` (BUG-6)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from club3090.reports.classify import error_lines
from club3090.reports.loop import ingest
from tests.test_submit import e_bundle, failed_boot

ROOT = Path(__file__).resolve().parents[1]
LINE = 4 * 1024 * 1024 - 64

# each was quadratic (or worse) somewhere in the old extraction
HOSTILE_LINES = {
    "dotted-names": "a." * (LINE // 2),
    "ansi-runs": "\x1b[1" * (LINE // 4),
    "underscores": "_." * (LINE // 2),
    "spaces-after-error": "xError" + " " * (LINE - 6),
    "parentheses": "(" * LINE,
}


@pytest.mark.parametrize("name", sorted(HOSTILE_LINES))
def test_error_extraction_is_linear_on_a_4_mib_line(name: str) -> None:
    started = time.monotonic()
    error_lines(HOSTILE_LINES[name] + "\nValueError: the real one")
    assert time.monotonic() - started < 5


CHILD = """
import sys, time
from club3090 import cli
started = time.monotonic()
code = cli.main(["loop", "classify", sys.argv[1], "--json"])
print("ELAPSED", time.monotonic() - started, code, file=sys.stderr)
"""


def test_loop_classify_on_a_4_mib_bundle_line_is_under_5_s(tmp_path: Path) -> None:
    excerpt = "a." * ((LINE - 64 * 1024) // 2) + "\nValueError: boom"   # the bundle file stays under its cap
    e_bundle(tmp_path, failed_boot("") | {"failure_log_excerpt": excerpt})
    done = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path)], capture_output=True, text=True,
                          timeout=120, check=False, env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin",
                                                         "HOME": str(tmp_path)})
    elapsed = [ln for ln in done.stderr.splitlines() if ln.startswith("ELAPSED")]
    assert elapsed, done.stderr[-2000:]
    seconds, code = float(elapsed[0].split()[1]), int(elapsed[0].split()[2])
    assert code == 0 and seconds < 5
    assert "ValueError: boom" in done.stdout


# --- BUG-6: numbers in a receipt are finite and bounded -----------------------------------------
def _receipt(tmp_path: Path, measured: dict) -> Path:  # type: ignore[type-arg]
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"schema": 1, "kind": "vllm-startup-receipt", "shape": {}, "source": {},
                                "measured": measured}, allow_nan=True))
    return path


@pytest.mark.parametrize("value", ["1e999", "NaN", "Infinity", "-Infinity", "1" + "0" * 400, "1e300"])
def test_ingest_refuses_huge_and_non_finite_numbers(tmp_path: Path, value: str) -> None:
    path = tmp_path / "r.json"
    path.write_text('{"schema": 1, "kind": "vllm-startup-receipt", "shape": {}, "source": {}, '
                    f'"measured": {{"gpu_kv_cache_tokens": {value}}}}}')
    state = ingest([tmp_path])
    assert state.groups == () and state.rejected
    assert "Infinity" not in json.dumps([str(r) for r in state.rejected], allow_nan=False)


HUGE_LOG = ("(APIServer pid=1) INFO 06-01 09:20:16 [utils.py:278] non-default args: {'model': 'acme/m', "
            "'max_model_len': 1e999, 'tensor_parallel_size': " + "9" * 400 + ", 'gpu_memory_utilization': 1e308}\n"
            "(EngineCore pid=120) INFO 06-01 09:22:30 [kv_cache_utils.py:1733] GPU KV cache size: "
            + "1" * 400 + " tokens\n"
            "(EngineCore pid=120) INFO 06-01 09:22:30 [kv_cache_utils.py:1734] Maximum concurrency for "
            "262,144 tokens per request: " + "9" * 400 + ".5x\n")


def test_calibrate_never_prints_infinity_or_crashes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from club3090 import cli

    log = tmp_path / "startup.log"
    log.write_text(HUGE_LOG)
    config = tmp_path / "config.json"
    config.write_text((Path(__file__).parent / "fixtures" / "hub" / "Qwen--Qwen3-0.6B" / "config.json").read_text())
    for extra in ([], ["--json"], ["--config", str(config), "--gpus", "1x3090", "--json"]):
        code = cli.main(["calibrate", str(log), "--arg", "max_num_seqs=1e999", *extra])
        out, err = capsys.readouterr()
        assert code in (0, 65), err
        assert "Infinity" not in out and "inf" not in out.replace("info", "").replace("_inf", "") \
            and "Traceback" not in err, out
