"""club3090 against a real vLLM: the CPU build of vLLM serving a tiny Llama trained to answer the verify
prompts (tests/vllm_tiny_model.py), from the loopback fake Hub through `up --launcher native`.

One vLLM start serves the module: `up` (gate, bundle, weights into the HF cache, start, verify, SERVING),
then `status`, `logs`, `verify` (basic and --full), `verify-stress`, `bench`, `soak`, `calibrate` on the
real start-up log, and `down` (every process of the server's session gone). A second, failing start
(a `--max-model-len` over the model's limit) is captured and classified by the Loop.
"""

from __future__ import annotations

import contextlib
import io
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from club3090 import cli
from club3090.edges import launchers
from tests import real_vllm
from tests.fakehub import FakeHub
from tests.llama_server import free_port

REPO = "club3090-tests/tiny-llama-trained"
PROFILE = "vllm/minimal"


def club(*argv: str) -> tuple[int, str, str]:
    """Run the CLI in-process; (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(list(argv))
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def vllm_python() -> str:
    return real_vllm.vllm_python()


@pytest.fixture(scope="module")
def model(vllm_python: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    return real_vllm.trained_model(vllm_python, tmp_path_factory.mktemp("train"))


@pytest.fixture(scope="module")
def hub(model: tuple[Path, dict[str, Any]]) -> Iterator[FakeHub]:
    fake = FakeHub().start()
    fake.add_repo(REPO, real_vllm.repo_files(model[0]))
    try:
        yield fake
    finally:
        fake.stop()


@contextlib.contextmanager
def user_env(tmp: Path, hub: FakeHub) -> Iterator[None]:
    """The environment of a user of the CPU build: the HF cache, the Hub, the CPU KV pool's size."""
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp)
        mp.setenv("HF_HOME", str(tmp / "hf"))
        mp.setenv("HF_HUB_CACHE", str(tmp / "hf" / "hub"))
        mp.setenv("HF_ENDPOINT", hub.url)
        mp.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
        mp.setenv("CLUB3090_STATE_DIR", str(tmp / "state"))
        mp.setenv("DO_NOT_TRACK", "1")
        yield


def up(tmp: Path, hub: FakeHub, run: Path, vllm: Path, port: int) -> tuple[int, str, str, float]:
    with user_env(tmp, hub):
        t0 = time.monotonic()
        code, out, err = club("up", REPO, "--gpus", "1x3090", "--profile-like", PROFILE, "--yes", "--dir", str(run),
                              "--launcher", "native", "--vllm", str(vllm), "--port", str(port))
        return code, out, err, time.monotonic() - t0


@pytest.fixture(scope="module")
def served(vllm_python: str, hub: FakeHub, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("realvllm")
    run, port = tmp / "run", free_port()
    vllm = real_vllm.launcher(tmp, vllm_python)
    try:
        code, out, err, seconds = up(tmp, hub, run, vllm, port)
        yield {"code": code, "out": out, "err": err, "seconds": seconds, "run": run, "tmp": tmp,
               "url": f"http://127.0.0.1:{port}/v1", "port": port}
    finally:
        launchers.stop_native(run)


def server_log(run: Path) -> str:
    return (run / "logs" / launchers.LOG_NAME).read_text(encoding="utf-8", errors="replace")


def test_model_is_trained(model):
    _, report = model
    assert report["final_loss"] < 6.0 and report["steps"] >= 100


def test_up_serves_a_verified_real_vllm(served, capsys):
    with capsys.disabled():
        print(f"\n[real vLLM] up took {served['seconds']:.0f} s")
    detail = served["out"] + served["err"] + launchers.log_tail(served["run"] / "logs" / launchers.LOG_NAME, 60)
    assert served["code"] == 0, detail
    out = served["out"]
    assert f"[up] URL: {served['url']}" in out and "[up] SERVING: verified" in out, detail
    state = json.loads((served["run"] / "state.json").read_text(encoding="utf-8"))
    assert state["state"] == "running" and launchers.alive(state["pid"])
    # the weights came from the fake Hub into the HF cache and vLLM served that snapshot
    snaps = list((served["tmp"] / "hf" / "hub").glob("models--club3090-tests--tiny-llama-trained/snapshots/*"))
    assert len(snaps) == 1 and (snaps[0] / "model.safetensors").is_file()
    log = server_log(served["run"])
    assert str(snaps[0]) in log and "CPU KV cache size:" in log
    # the boot's receipt holds the CPU pool, apart from any GPU
    receipt = json.loads((served["run"] / "receipt.json").read_text(encoding="utf-8"))
    assert receipt["measured"]["cpu_kv_cache_tokens"] > 0 and receipt["shape"]["device"] == "cpu"
    assert receipt["predicted"] is None


def test_status_and_logs(served):
    code, out, _ = club("status", str(served["run"]))
    assert code == 0 and out.startswith(f"[status] running: {served['url']}"), out
    code, out, _ = club("logs", str(served["run"]))
    assert code == 0 and "CPU KV cache size:" in out


def test_verify_basic_is_green(served):
    code, out, err = club("verify", "--url", served["url"], "--json")
    report = json.loads(out)
    status = {c["name"]: c["status"] for c in report["checks"]}
    assert code == 0, out + err
    assert status["completion"] == status["streaming"] == status["tool-call"] == "pass", status


def test_verify_full(served):
    code, out, err = club("verify", "--url", served["url"], "--full", "--json")
    report = json.loads(out)
    checks = {c["name"]: c for c in report["checks"]}
    assert code == 0, out + err
    for name in ("long-output", "streaming-tool-call", "long-context"):
        assert checks[name]["status"] == "pass", checks[name]
    assert report["capabilities"]["tool-calls"] == "supported"


def test_verify_stress_bounded(served):
    # no needle ladder: finding a passphrase in a haystack is beyond a model this small
    code, out, err = club("verify-stress", "--url", served["url"], "--streams", "3", "--rounds", "1", "--no-ladder",
                          "--json")
    report = json.loads(out)
    status = {c["name"]: c["status"] for c in report["checks"]}
    assert code == 0, out + err
    for name in ("concurrent-streams", "long-prompt", "tool-round-trip-1", "tool-prefill", "agent", "coding",
                 "reasoning"):
        assert status[name] == "pass", (name, report["checks"])


def test_bench(served):
    code, out, err = club("bench", "--url", served["url"], "--runs", "1", "--json")
    report = json.loads(out)
    assert code == 0, out + err
    runs = report["runs"]
    assert {r["kind"] for r in runs} == {"narrative", "code"}
    assert all(r["ok"] and r["tokens"] and r["decode_tps"] > 0 for r in runs), runs


def test_soak_quick(served):
    out_dir = served["tmp"] / "soak-out"
    code, out, err = club("soak", "--url", served["url"], "--mode", "quick", "--probes", "3",
                          "--out-dir", str(out_dir), "--json")
    report = json.loads(out)
    # a shared CPU is noisy: a retention the noise cannot decide is inconclusive (2), never an error
    assert code in (0, 2), out + err
    assert report["errors"] == 0 and report["silent_empty"] == 0, report
    assert (out_dir / "turn-log.csv").is_file()


def test_calibrate_reads_the_cpu_pool(served):
    code, out, err = club("calibrate", str(served["run"] / "logs" / launchers.LOG_NAME), "--json")
    assert code == 0, out + err
    (receipt,) = json.loads(out)["receipts"]
    measured = receipt["measured"]
    assert measured["cpu_kv_cache_tokens"] > 0 and "gpu_kv_cache_tokens" not in measured
    assert receipt["shape"]["device"] == "cpu" and receipt["predicted"] is None
    assert "CPU build" in receipt["prediction_note"]
    assert receipt["startup_outcome"] == "ok"


def test_down_leaves_no_process(served):
    state = json.loads((served["run"] / "state.json").read_text(encoding="utf-8"))
    pid = state["pid"]
    sid = real_vllm.session_of(pid)
    assert sid == pid                   # the server leads its own session
    family = real_vllm.processes_in_session(sid)
    assert pid in family and len(family) >= 2     # the API server and vLLM's engine core
    code, out, _ = club("down", str(served["run"]))
    assert code == 0 and "stopped PID" in out
    assert real_vllm.wait_gone(family) == []
    assert real_vllm.processes_in_session(sid) == []
    code, out, _ = club("status", str(served["run"]))
    assert code == 1 and out.startswith("[status] stopped")


def test_loop_classifies_a_real_vllm_failure(vllm_python, hub, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("realvllm-fail")
    run = tmp / "run"
    # the user's launcher asks for more context than the model has (max_position_embeddings)
    vllm = real_vllm.launcher(tmp, vllm_python, (*real_vllm.TOOL_FLAGS, "--max-model-len", "100000"))
    try:
        code, out, err, _ = up(tmp, hub, run, vllm, free_port())
    finally:
        launchers.stop_native(run)
    assert code == 1 and "SERVING" not in out, out + err
    assert "max_model_len" in out + err
    captures = tmp / ".pull-captures"
    assert captures.is_dir(), out + err
    with user_env(tmp, hub):
        code, out, err = club("loop", "classify", str(captures), "--json")
    assert code == 0, out + err
    (got,) = json.loads(out)["bundles"]
    assert (got["environment"], got["route"], got["tier"]) == ("max-model-len-over-model-limit", "local",
                                                              "environment"), got
    assert got["error_text"] and got["error_source"] == "pt3.failure_log_excerpt"
    assert "--max-model-len" in got["next_step"]
