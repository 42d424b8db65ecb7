"""Against a hostile loopback Hub every Hub-reading command ends, with its documented exit code.

Each case runs the real ``club3090`` command in a child process with small deadlines
(``CLUB3090_HUB_DEADLINE`` / ``CLUB3090_HUB_COMMAND_DEADLINE`` / ``CLUB3090_DOWNLOAD_STALL``), so
a regression shows as a child killed by a generous outer timeout, never as a hung test run. No
timing is asserted beyond "it ended": the machine is noisy.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakehub import FIXTURES
from tests.hostilehub import HostileHub, serve

REPO = "acme/small"
RIG = ["--profile-like", "vllm/minimal", "--gpus", "1x3090"]
OUTER_TIMEOUT_S = 120     # far above the 1 s / 3 s deadlines below: only a hang reaches it
MAIN = "import sys; from club3090.cli import main; sys.exit(main(sys.argv[1:]))"
SRC = Path(__file__).resolve().parents[1] / "src"


@pytest.fixture
def hostile_hub() -> Iterator[HostileHub]:
    yield from serve()


def _env(hub: HostileHub, tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env.update({"HF_ENDPOINT": hub.url, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_DISABLE_XET": "1",
                "HF_HUB_DISABLE_TELEMETRY": "1", "NO_COLOR": "1", "CLUB3090_NO_GPU_DETECT": "1",
                "CLUB3090_HUB_DEADLINE": "1", "CLUB3090_HUB_COMMAND_DEADLINE": "3",
                "CLUB3090_DOWNLOAD_STALL": "1", "PYTHONPATH": str(SRC), **extra})
    return env


def club3090(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", MAIN, *argv], env=env, cwd=cwd, text=True,
                          capture_output=True, timeout=OUTER_TIMEOUT_S, check=False)


def _small(hub: HostileHub) -> None:
    hub.add_fixture("Qwen--Qwen3-0.6B", repo_id=REPO)


# (kind, path match) -> where the Hub misbehaves during a metadata read
METADATA_FAULTS = [
    ("trickle", "/api/models/"),               # model info, from the status line on
    ("trickle-body", "/api/models/"),          # model info body
    ("trickle-body", "config.json"),
    ("trickle-body", "/cdn/"),                 # the safetensors header range
    ("trickle", "/cdn/"),
    ("redirect-loop", "/api/models/"),
    ("redirect-loop", "config.json"),
    ("html", "/api/models/"),                  # a captive portal's login page
    ("huge-headers", "/api/models/"),
]


@pytest.mark.parametrize("kind,match", METADATA_FAULTS)
def test_inspect_ends_with_69(hostile_hub: HostileHub, tmp_path: Path, kind: str, match: str) -> None:
    _small(hostile_hub)
    hostile_hub.misbehave(kind, match)
    done = club3090(["inspect", REPO, "--json"], _env(hostile_hub, tmp_path), tmp_path)
    assert done.returncode == 69, done.stderr[-2000:]
    assert json.loads(done.stdout)["exit_code"] == 69 and "Traceback" not in done.stderr


@pytest.mark.parametrize("command", [["kv-calc", REPO, "--json"], ["pull", REPO, *RIG, "--dry-run", "--json"]])
@pytest.mark.parametrize("kind,match", [("trickle", "/api/models/"), ("trickle-body", "/cdn/"),
                                        ("redirect-loop", "/api/models/"), ("html", "/api/models/")])
def test_kv_calc_and_pull_end_with_69(hostile_hub: HostileHub, tmp_path: Path, command: list[str],
                                      kind: str, match: str) -> None:
    _small(hostile_hub)
    hostile_hub.misbehave(kind, match)
    done = club3090(command, _env(hostile_hub, tmp_path), tmp_path)
    assert done.returncode == 69, done.stderr[-2000:]
    assert "Traceback" not in done.stderr


def test_a_trickled_download_body_fails_the_download_stage(hostile_hub: HostileHub, tmp_path: Path) -> None:
    _small(hostile_hub)
    hostile_hub.misbehave("trickle-body", "/cdn/", method="GET", whole_only=True)
    done = club3090(["pull", REPO, *RIG, "--yes", "--no-boot", "--json"], _env(hostile_hub, tmp_path),
                    tmp_path)
    assert done.returncode == 2, done.stderr[-2000:]
    doc = json.loads(done.stdout)
    text = json.dumps(doc)
    assert "fallback-failed" in text and "Traceback" not in done.stderr
    assert hostile_hub.requests("GET", "/cdn/")       # it did try the body


def test_credentials_in_hf_endpoint_never_reach_a_message(hostile_hub: HostileHub, tmp_path: Path) -> None:
    _small(hostile_hub)
    hostile_hub.misbehave("redirect-loop", "/api/models/")
    endpoint = hostile_hub.url.replace("http://", "http://alice:s3cretPassw0rd@")
    done = club3090(["inspect", REPO, "--json"], _env(hostile_hub, tmp_path, HF_ENDPOINT=endpoint), tmp_path)
    assert done.returncode == 69
    assert "s3cretPassw0rd" not in done.stdout + done.stderr and "alice" not in done.stdout + done.stderr


def test_fixture_repo_is_served_normally(hostile_hub: HostileHub, tmp_path: Path) -> None:
    """The control case: without a misbehaviour the same command succeeds."""
    _small(hostile_hub)
    assert (FIXTURES / "Qwen--Qwen3-0.6B").is_dir()
    done = club3090(["inspect", REPO, "--json"], _env(hostile_hub, tmp_path), tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
