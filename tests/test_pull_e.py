"""Pull-Emit-Derived [E]: emit, download (fake Hub), boot (fake docker), smoke (loopback fake
OpenAI server), bundles. Real docker never runs (tests/conftest.py makes it an error)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from decimal import Decimal
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from club3090 import cli
from club3090.catalog import load_catalog
from club3090.cli import exit_codes
from club3090.cli.exit_codes import exit_code
from club3090.edges import boot, download
from club3090.model.spec import RepoFile
from club3090.pipeline.emit_derived import EStages
from club3090.pipeline.pull import PullRequest, evaluate
from club3090.reports.capture import latest_bundle, read_bundle
from tests import fakeopenai
from tests.fakehub import FakeHub
from tests.fixtures_path import fixture_path
from tests.providers import offline_rig, plenty_of_disk, rig

REPO = "club3090-tests/tiny-qwen"
SLUG = "club3090-tests-tiny-qwen"
TENSORS = {"model.embed_tokens.weight": ("BF16", [256, 64]), "lm_head.weight": ("BF16", [256, 64]),
           "model.norm.weight": ("BF16", [64])}
PLANTED = "hf_" + "a1B2c3D4e5" * 4


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


@pytest.fixture
def hub(fake_hub: FakeHub) -> FakeHub:
    fake_hub.add_fixture("Qwen--Qwen2.5-0.5B", repo_id=REPO, tensors=TENSORS, shards=2)
    return fake_hub


# --------------------------------------------------------------------------------------------
# a loopback OpenAI-compatible server and a fake docker
# --------------------------------------------------------------------------------------------

@pytest.fixture
def openai() -> Iterator[ThreadingHTTPServer]:
    """The shared fake (tests/fakeopenai.py), serving the derived compose's model name."""
    server = fakeopenai.start()
    server.mode["model"] = SLUG  # type: ignore[attr-defined]
    worker = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    worker.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        worker.join(timeout=5)


def _http_to(server: ThreadingHTTPServer):
    """The real urllib client, with the container's 127.0.0.1:<profile port> re-pointed at the test server."""
    port = server.server_address[1]

    def http(method: str, url: str, body: Any, timeout: float, **kw: Any) -> boot.HttpResponse:
        parts = urlsplit(url)
        return boot.urllib_http(method, urlunsplit(parts._replace(netloc=f"127.0.0.1:{port}")), body, timeout, **kw)
    return http


class FakeDocker:
    def __init__(self, *, up_rc: int = 0, logs: str = "INFO vLLM ready\n") -> None:
        self.calls: list[list[str]] = []
        self.preflight: list[list[str]] = []
        self.up_rc, self.log_text = up_rc, logs

    def __call__(self, argv: Any, timeout: float) -> boot.RunResult:
        argv = list(argv)
        if argv[:2] == ["docker", "info"]:                 # the preflight: engine up, NVIDIA runtime registered
            self.preflight.append(argv)
            return boot.RunResult(0, '{"nvidia":{},"runc":{}}', "")
        if argv[:3] == ["docker", "compose", "version"]:
            self.preflight.append(argv)
            return boot.RunResult(0, "Docker Compose version v2.29.1", "")
        self.calls.append(argv)
        if argv[-2:] == ["up", "-d"]:
            return boot.RunResult(self.up_rc, "", "" if self.up_rc == 0 else "Error response from daemon: boom")
        if "logs" in argv:
            return boot.RunResult(0, self.log_text, "")
        return boot.RunResult(0, "", "")

    def verbs(self) -> list[str]:
        return [next(a for a in call[6:] if not a.startswith("-")) for call in self.calls]


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds


def _stages(**kw: Any) -> EStages:
    clock = kw.pop("clock", None) or Clock()
    return EStages(clock=clock, sleep=clock.sleep, which=lambda _n: "/usr/bin/docker", **kw)


def _pull(catalog, hub: FakeHub, tmp_path: Path, stages: EStages | None, *, profile: str = "vllm/minimal",
          gpus: str | None = "1x3090", **req: Any):
    request = PullRequest(REPO, profile, gpus=rig(gpus), **{"yes": True, **req})
    return evaluate(request, offline_rig(hub.settings(hf_home=tmp_path / "hf")), catalog=catalog,
                    captures_root=tmp_path / ".pull-captures", stages=stages)


def _bundle(result) -> dict[str, dict]:
    folder = result.e.bundle
    return {p.name: json.loads(p.read_text(encoding="utf-8")) for p in sorted(folder.iterdir())}


def _dest(tmp_path: Path, hub: FakeHub) -> Path:
    """The HF cache snapshot [E] downloads into (the commit the gate saw)."""
    from club3090.edges.hf_cache import snapshot_dir

    return snapshot_dir(tmp_path / "hf" / "hub", REPO, hub.repos[REPO].commit)


def _lock(tmp_path: Path) -> Path:
    return tmp_path / "hf" / "hub" / ".locks" / "club3090" / (REPO.replace("/", "--") + ".flock")


SHARDS = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")


def _fetched(hub: FakeHub) -> list[str]:
    """The weight bodies downloaded (whole, or resumed from an offset), not the gate's header reads."""
    return [q.path for q in hub.requests("GET", "/cdn/") if not q.headers.get("range", "-").split("-")[-1]]


# --------------------------------------------------------------------------------------------
# download: into the standard HF cache, up's one path
# --------------------------------------------------------------------------------------------

def test_download_verifies_hashes_into_the_hf_cache(catalog, hub, tmp_path):
    from huggingface_hub import try_to_load_from_cache

    r = _pull(catalog, hub, tmp_path, _stages(no_boot=True))
    assert (r.ok, exit_code(r.outcome), r.terminal) == (True, 0, "confirm→proceed")
    dest = _dest(tmp_path, hub)
    dl = r.e.download
    assert dl.ok and dl.sha_verified and dl.dest == dest
    repo = hub.repos[REPO]
    blobs = dest.parent.parent / "blobs"
    for name in SHARDS:
        assert (dest / name).is_symlink() and (dest / name).resolve() == blobs / repo.files[name].sha256
        assert download._sha256(dest / name) == repo.files[name].sha256
        # huggingface_hub (vLLM, `hf`) finds the file where it looks for it
        assert try_to_load_from_cache(REPO, name, cache_dir=str(tmp_path / "hf" / "hub"),
                                      revision=repo.commit) == str(dest / name)
    assert (dest / "config.json").is_file() and (dest / "model.safetensors.index.json").is_file()
    assert {"config.json", "model.safetensors.index.json", *SHARDS} <= set(dl.files)
    assert not list(blobs.glob("*.club3090-partial")) and not list(blobs.glob("*.incomplete"))
    assert not (tmp_path / "hf" / "club3090" / "pulls" / download.pull_dir(tmp_path, REPO).name).exists()
    assert download.SlugLock(_lock(tmp_path)).acquire()                # lock released
    assert hub.requests("GET", "/cdn/")                                # LFS through the CDN redirect
    # the compose mounts the repo folder read-only (the links resolve inside it), at the fit's context
    text = r.e.compose_path.read_text(encoding="utf-8")
    pulls = download.pull_dir(tmp_path / "hf", REPO)
    assert r.e.compose_path == pulls.parent / f"{pulls.name}.compose.yml"
    assert f"source: {dest.parent.parent}\n" in text and f"/snapshots/{repo.commit}\n" in text
    assert "--max-model-len" in text and r.e.boot_skipped == "--no-boot" and r.e.outcome == "partial"
    assert "127.0.0.1:" in text
    assert r.to_json()["e"]["capture_outcome"] == "partial" and "outcome" not in r.to_json()["e"]
    files = _bundle(r)
    assert set(files) == {"pt1-gate.json", "pt2-download.json", "manifest.json"}
    assert files["pt2-download.json"]["sha_verified"] is True and files["pt2-download.json"]["failure"] is None
    manifest = files["manifest.json"]
    assert manifest["schema"] == 1 and manifest["capture_points"] == ["gate", "download"]
    assert manifest["kv_calc_version"].startswith("club3090-memory+") and manifest["outcome"] == "partial"
    assert files["pt1-gate.json"]["schema"] == 1 and "is_gate_only" not in files["pt1-gate.json"]


def test_a_second_pull_reuses_the_cache_and_up_finds_it(catalog, hub, tmp_path):
    assert _pull(catalog, hub, tmp_path, _stages(no_boot=True)).e.download.ok
    hub.clear_log()
    seen: list[str] = []
    r = _pull(catalog, hub, tmp_path, _stages(no_boot=True, progress=seen.append))
    assert r.e.download.ok and not _fetched(hub)                        # nothing downloaded again
    assert any(m.startswith("[pull] download ") and SHARDS[0] in m and "in the HF cache, checked" in m for m in seen)


def test_an_interrupted_download_resumes_with_a_range(catalog, hub, tmp_path):
    """The Hub drops the connection half-way through a shard: the partial blob stays, and the next
    pull asks only for the rest (a ranged GET from where it stopped) and lands it in the HF cache."""
    from club3090.edges.hf_cache import fetch_into_cache

    shard = hub.repos[REPO].files[SHARDS[1]]

    def dropping(*args: Any, **kw: Any) -> download.DownloadReport:
        hub.fault("truncate", match=shard.sha256, times=None)          # half the bytes, then the line drops
        return fetch_into_cache(hub.settings(hf_home=tmp_path / "hf"), *args, **kw)
    r = _pull(catalog, hub, tmp_path, _stages(no_boot=True, fetch=dropping))
    assert (exit_code(r.outcome), r.e.stage, r.e.failure) == (2, "download", "fallback-failed")
    assert "re-run to resume" in r.e.detail
    blobs = _dest(tmp_path, hub).parent.parent / "blobs"
    partial = blobs / (shard.sha256 + ".club3090-partial")
    assert 0 < partial.stat().st_size < shard.size
    assert not (blobs / shard.sha256).exists() and not (_dest(tmp_path, hub) / shard.name).exists()
    hub.faults.clear()
    hub.clear_log()
    r = _pull(catalog, hub, tmp_path, _stages(no_boot=True))
    assert r.e.download.ok and r.e.download.sha_verified, r.e
    bodies = [q for q in hub.requests("GET") if (shard.sha256 in q.path or q.path.endswith(".safetensors"))
              and not q.headers.get("range", "-").split("-")[-1]]    # not the gate's header reads (bytes=0-N)
    assert bodies and all(SHARDS[0] not in q.path for q in bodies)    # the verified first shard stays
    assert all(q.headers.get("range", "").startswith("bytes=") for q in bodies), [q.headers for q in bodies]
    starts = [int(q.headers["range"][6:].split("-")[0]) for q in bodies]
    assert min(starts) > 0                                             # resumed, not restarted
    final = _dest(tmp_path, hub) / shard.name
    assert final.is_symlink() and final.resolve() == blobs / shard.sha256 and not partial.exists()
    assert download._sha256(final) == shard.sha256


def test_a_killed_pull_resumes_where_it_stopped(catalog, hub, tmp_path):
    """`club3090 pull` killed (SIGKILL, no cleanup) half-way through a shard: the next pull asks for
    the rest with a Range from the partial blob's size, and the file lands checked in the HF cache."""
    import os
    import time

    from club3090.edges.hf_cache import PARTIAL

    shard = max((hub.repos[REPO].files[n] for n in SHARDS), key=lambda f: f.size)
    hub.fault("stall", match=shard.sha256, times=None, delay=30.0)    # half the body, then the line hangs
    env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_HOME": str(tmp_path / "hf"),
           "HF_HUB_CACHE": str(tmp_path / "hf" / "hub"), "CLUB3090_CAPTURES": str(tmp_path / ".pull-captures")}
    argv = [sys.executable, "-m", "club3090", "pull", REPO, "--profile-like", "vllm/minimal", "--gpus", "1x3090",
            "--yes", "--no-boot"]
    partial = _dest(tmp_path, hub).parent.parent / "blobs" / (shard.sha256 + PARTIAL)
    with subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) as proc:
        try:
            deadline = time.monotonic() + 60
            while not (partial.is_file() and partial.stat().st_size > 0):
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else proc.returncode
                assert time.monotonic() < deadline, "the pull never reached the stalled shard"
                time.sleep(0.05)
        finally:
            proc.kill()                                                # mid-file: nothing of it runs on
    kept = partial.stat().st_size
    assert 0 < kept < shard.size and not (_dest(tmp_path, hub) / shard.name).exists()
    hub.faults.clear()
    hub.clear_log()
    r = _pull(catalog, hub, tmp_path, _stages(no_boot=True))
    assert r.e.download.ok and r.e.download.sha_verified, r.e
    ranges = [q.headers.get("range") for q in hub.requests("GET") if shard.sha256 in q.path
              and not q.headers.get("range", "-").split("-")[-1]]
    assert ranges == [f"bytes={kept}-"]                                # exactly the rest, once
    final = _dest(tmp_path, hub) / shard.name
    assert final.is_symlink() and download._sha256(final) == shard.sha256 and not partial.exists()


def test_a_corrupted_file_is_a_sha_mismatch_and_never_lands(catalog, hub, tmp_path):
    shard = hub.repos[REPO].files[SHARDS[1]]
    real = shard.sha256
    shard._sha256 = "0" * 64                     # the Hub's LFS sha256 no longer matches the bytes
    r = _pull(catalog, hub, tmp_path, _stages(no_boot=True))
    assert r.ok and exit_code(r.outcome) == 2 and r.terminal == "confirm→proceed"   # [E] never changes the gate
    assert (r.e.stage, r.e.failure, r.e.download.failed_file) == ("download", "sha-mismatch", shard.name)
    dest = _dest(tmp_path, hub)
    blobs = dest.parent.parent / "blobs"
    assert not (dest / shard.name).exists() and not (blobs / shard._sha256).exists() and not (blobs / real).exists()
    assert not list(blobs.glob("*.club3090-partial"))
    assert r.e.boot is None and r.e.smoke is None
    files = _bundle(r)
    assert files["pt2-download.json"]["failure"] == "sha-mismatch" and files["manifest.json"]["outcome"] == "failed"


def test_missing_lfs_hash_is_no_etag_before_any_download(catalog, hub, tmp_path):
    hub.repos[REPO].files[SHARDS[0]].lfs = False
    r = _pull(catalog, hub, tmp_path, _stages(no_boot=True))
    assert (exit_code(r.outcome), r.e.stage, r.e.failure) == (2, "download", "no-etag")
    whole = [q for q in hub.requests("GET") if "range" not in q.headers
             and (q.path.startswith("/cdn/") or q.path.endswith(".safetensors"))]
    assert not whole and not _dest(tmp_path, hub).exists()        # only the gate's header reads happened


def test_a_held_lock_is_in_progress_and_released_with_its_holder(catalog, hub, tmp_path):
    argv = [sys.executable, "-c", HOLD_LOCK, str(_lock(tmp_path))]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stdin=subprocess.PIPE, text=True) as holder:
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
            r = _pull(catalog, hub, tmp_path, _stages(no_boot=True))
            assert (exit_code(r.outcome), r.e.stage, r.e.failure) == (2, "download", "in-progress")
        finally:
            holder.kill()          # a holder that dies releases the lock with its process
    r = _pull(catalog, hub, tmp_path, _stages(no_boot=True))
    assert r.e.download.ok


HOLD_LOCK = ("import os, sys, filelock; os.makedirs(os.path.dirname(sys.argv[1]), exist_ok=True); "
             "lock = filelock.FileLock(sys.argv[1]); lock.acquire(); "
             "print('held', flush=True); sys.stdin.read()")


def test_exactly_one_of_many_concurrent_takers_holds_the_lock(tmp_path):
    path = tmp_path / ".locks" / "x.flock"
    for _trial in range(20):
        barrier = threading.Barrier(8)
        locks = [download.SlugLock(path) for _ in range(8)]
        won: list[bool] = []

        def take(lock: download.SlugLock, barrier: threading.Barrier, won: list[bool]) -> None:
            barrier.wait()
            won.append(lock.acquire())
        threads = [threading.Thread(target=take, args=(lock, barrier, won)) for lock in locks]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(won) == [False] * 7 + [True]
        for lock in locks:
            lock.release()
    assert download.SlugLock(path).acquire()


def test_a_small_file_already_in_the_cache_is_checked_by_hash_not_size(catalog, hub, tmp_path):
    assert _pull(catalog, hub, tmp_path, _stages(no_boot=True)).e.download.ok
    config = _dest(tmp_path, hub) / "config.json"
    real = config.read_bytes()
    config.write_bytes(b"{" + b" " * (len(real) - 2) + b"}")     # same size, other bytes (the blob itself)
    r = _pull(catalog, hub, tmp_path, _stages(no_boot=True))
    assert r.e.download.ok and config.read_bytes() == real


def test_distinct_repo_ids_never_share_a_pull_folder(tmp_path):
    ids = ["coll/a-b", "coll-a/b", "Coll/A-B", "coll/a.b", "coll/a_b"]
    folders = {download.pull_dir(tmp_path, i) for i in ids}
    assert len(folders) == len(ids)
    assert all(f.parent == download.pulls_root(tmp_path) and len(f.name) <= 200 for f in folders)


def test_size_mismatch_on_a_metadata_file(hub, tmp_path):
    from club3090.edges.hf_cache import fetch_into_cache

    listed = RepoFile("config.json", 10)                          # the Hub serves other bytes than it listed
    report = fetch_into_cache(hub.settings(hf_home=tmp_path / "hf"), REPO, hub.repos[REPO].commit, [listed],
                              bar=False)
    assert (report.ok, report.failure) == (False, "fallback-failed") and not (_dest(tmp_path, hub) / "config.json").exists()


def test_gated_download_is_gated_401(catalog, hub, tmp_path):
    from club3090.edges.hf_cache import fetch_into_cache

    def fetch(*args: Any, **kw: Any) -> download.DownloadReport:
        hub.repos[REPO].gated = True           # access revoked between the gate and the download
        return fetch_into_cache(hub.settings(hf_home=tmp_path / "hf"), *args, **kw)
    r = _pull(catalog, hub, tmp_path, _stages(no_boot=True, fetch=fetch))
    assert (r.e.stage, r.e.failure) == ("download", "gated-401")


@pytest.mark.parametrize("allow,rung_two_fails,via_hf", [(False, False, False), (True, False, True),
                                                          (True, True, True)])
def test_the_xet_rung_is_taken_only_with_allow_xet_and_falls_back(hub, tmp_path, monkeypatch, allow,
                                                                  rung_two_fails, via_hf):
    """Rung 2 (huggingface_hub's own download, which uses Xet where the Hub offers it) only with
    --allow-xet; any non-decisive failure there falls back to the resumable GET (rung 3)."""
    import dataclasses

    import huggingface_hub

    from club3090.edges.hf_cache import fetch_into_cache

    real = huggingface_hub.hf_hub_download
    weights_asked: list[str] = []

    def spy(repo_id: str, filename: str, **kw: Any) -> str:
        if filename.endswith(".safetensors"):
            weights_asked.append(filename)
            if rung_two_fails:
                raise OSError("the Xet transfer broke")
        return real(repo_id, filename, **kw)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", spy)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_DISABLE_XET", False)   # the person did not disable it
    settings = dataclasses.replace(hub.settings(hf_home=tmp_path / "hf"), allow_xet=allow)
    repo = hub.repos[REPO]
    files = [RepoFile(n, repo.files[n].size, repo.files[n].sha256) for n in SHARDS]
    report = fetch_into_cache(settings, REPO, repo.commit, files, bar=False)
    assert report.ok and report.sha_verified, report
    assert bool(weights_asked) is via_hf
    blobs = _dest(tmp_path, hub).parent.parent / "blobs"
    assert sorted(p.name for p in blobs.iterdir()) == sorted(repo.files[n].sha256 for n in SHARDS)  # no staging left
    assert all(download._sha256(_dest(tmp_path, hub) / n) == repo.files[n].sha256 for n in SHARDS)
    assert len(_fetched(hub)) == 2                                     # each shard downloaded once, by one rung


# --------------------------------------------------------------------------------------------
# --verify-in-place: files already on disk from an earlier pull
# --------------------------------------------------------------------------------------------

def _earlier_pull(hub: FakeHub, tmp_path: Path, *, corrupt: str | None = None) -> Path:
    """The pre-cache pulls folder an earlier club3090 filled (``corrupt``: one file with other bytes)."""
    folder = download.pull_dir(tmp_path / "hf", REPO)
    folder.mkdir(parents=True)
    for f in hub.repos[REPO].files.values():
        data = b"".join(f.chunks(0, f.size - 1))
        if f.name == corrupt:
            data = data[:-1] + bytes([data[-1] ^ 1])
        (folder / f.name).write_bytes(data)
    return folder


def test_verify_in_place_adopts_matching_files_and_downloads_a_mismatch(catalog, hub, tmp_path):
    folder = _earlier_pull(hub, tmp_path, corrupt=SHARDS[1])
    seen: list[str] = []
    r = _pull(catalog, hub, tmp_path, _stages(no_boot=True, verify_in_place=True, progress=seen.append))
    assert r.e.download.ok and r.e.download.sha_verified, r.e
    repo = hub.repos[REPO]
    assert _fetched(hub) == [f"/cdn/{repo.files[SHARDS[1]].sha256}"]   # only the mismatch was downloaded
    dest = _dest(tmp_path, hub)
    adopted = dest / SHARDS[0]
    assert adopted.is_symlink() and adopted.resolve().name == repo.files[SHARDS[0]].sha256
    assert adopted.stat().st_ino == (folder / SHARDS[0]).stat().st_ino     # a hard link: no second copy
    assert download._sha256(dest / SHARDS[1]) == repo.files[SHARDS[1]].sha256
    assert any(f"{SHARDS[0]}: adopted from {folder}" in m for m in seen)
    assert any(f"{SHARDS[1]}: not adopted from {folder}: sha256 " in m for m in seen)


def test_without_verify_in_place_the_earlier_folder_is_not_read(catalog, hub, tmp_path):
    _earlier_pull(hub, tmp_path)
    r = _pull(catalog, hub, tmp_path, _stages(no_boot=True))
    assert r.e.download.ok and len(_fetched(hub)) == 2


def test_verify_in_place_offline_refuses_a_mismatch_by_name(catalog, hub, tmp_path):
    from club3090.edges.hf_cache import fetch_into_cache

    folder = _earlier_pull(hub, tmp_path, corrupt=SHARDS[0])
    repo = hub.repos[REPO]
    f = repo.files[SHARDS[0]]
    report = fetch_into_cache(hub.settings(hf_home=tmp_path / "hf", offline=True), REPO, repo.commit,
                              [RepoFile(f.name, f.size, f.sha256)], bar=False, adopt=(folder,))
    assert (report.ok, report.failure) == (False, "offline-not-cached")
    assert f"the copy in {folder} does not match: sha256 " in report.detail and hub.log == []


def test_verify_in_place_is_a_pull_flag(hub, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    _earlier_pull(hub, tmp_path)
    argv = ["pull", REPO, "--profile-like", "vllm/minimal", "--gpus", "1x3090", "--yes", "--no-boot",
            "--verify-in-place"]
    assert cli.main(argv, provider=plenty_of_disk) == 0
    err = capsys.readouterr().err
    assert err.count("(sha256 matches the Hub)") == 2 and not _fetched(hub)


# --------------------------------------------------------------------------------------------
# boot and smoke
# --------------------------------------------------------------------------------------------

def test_boot_and_smoke_green(catalog, hub, tmp_path, openai):
    docker = FakeDocker()
    r = _pull(catalog, hub, tmp_path, _stages(runner=docker, http=_http_to(openai)))
    assert (r.ok, exit_code(r.outcome), r.e.ok, r.e.boot_ok, r.e.download_ok) == (True, 0, True, True, True)
    assert docker.verbs() == ["up", "logs", "down"]              # logs for the receipt; teardown always, last
    assert [c[:3] for c in docker.preflight] == [["docker", "info", "--format"], ["docker", "compose", "version"]]
    up = docker.calls[0]
    assert up[:4] == ["docker", "compose", "--project-directory", str(r.e.compose_path.parent)]
    assert up[4:6] == ["-f", str(r.e.compose_path)]
    assert r.e.smoke.results["plain-chat"] == "green" and r.e.smoke.results["streaming"] == "green"
    # the derived compose declares no tool, reasoning, structured-output or vision flag: those are skipped
    # with the reason; its --max-model-len 32768 declares long context, probed with a bounded prompt
    assert r.e.smoke.results["tool-call"] == "skipped"
    assert r.e.smoke.detail["tool-call"]["error"] == "not declared by the launch"
    assert r.e.smoke.results["long-context"] == "green" and not r.e.smoke.partial
    assert r.e.smoke.detail["long-context"]["declared_by"] == "--max-model-len 32768"
    posts = [body for method, _p, body in openai.log if method == "POST"]
    assert [b.get("stream", False) for b in posts[:2]] == [False, True]
    assert all(b["messages"] == [{"role": "user", "content": "ping"}] and b["max_tokens"] == 8 and
               b["model"] == SLUG for b in posts[:2])
    assert len(posts) == 4 and all(len(b["messages"][0]["content"]) < 4 * 8192 * 2 for b in posts[2:])
    files = _bundle(r)
    assert files["pt3-boot.json"]["ok"] is True and "failure_log_excerpt" not in files["pt3-boot.json"]
    assert files["pt4-smoke.json"]["results"]["streaming"] == "green" and files["pt4-smoke.json"]["partial"] is False
    assert files["manifest.json"]["smoke_capability_set"] == ["plain-chat", "streaming", "long-context"]
    assert files["manifest.json"]["capture_points"] == ["gate", "download", "boot", "smoke"]
    assert "pt5-override-capture.json" not in files
    assert "receipt.json" not in files                            # "INFO vLLM ready" holds no start-up lines


def test_a_green_boot_leaves_its_calibration_receipt_in_the_bundle(catalog, hub, tmp_path, openai):
    log = fixture_path("logs", "startup_v064_profiling.log").read_text()
    docker = FakeDocker(logs=log)
    r = _pull(catalog, hub, tmp_path, _stages(runner=docker, http=_http_to(openai)))
    assert r.e.boot_ok and docker.verbs() == ["up", "logs", "down"]
    receipt = _bundle(r)["receipt.json"]
    assert receipt["kind"] == "vllm-startup-receipt" and receipt["measured"]["num_gpu_blocks"] == 3852
    assert receipt["shape"]["gpu_count"] >= 1 and receipt["shape"]["gpu_memory_gib"] > 0
    data = json.loads(json.dumps(r.to_json(), default=str))
    assert data["download_ok"] is True and data["boot_ok"] is True and data["smoke"]["plain-chat"] == "green"
    assert data["capture_paths"] == [str(r.e.bundle)]


def test_boot_timeout_keeps_logs_redacted_and_tears_down(catalog, hub, tmp_path, openai):
    openai.mode["ready"] = False
    home = str(Path.home())
    log = ("x" * 200 + "\n") * 600 + (f"HF_TOKEN={PLANTED} loading {home}/models\n"
                                      "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    docker = FakeDocker(logs=log)
    clock = Clock()
    r = _pull(catalog, hub, tmp_path, _stages(runner=docker, http=_http_to(openai), clock=clock))
    assert (r.ok, exit_code(r.outcome), r.e.stage, r.e.failure) == (True, 2, "boot", "boot-timeout")
    assert clock.t == 600                                 # polled every 3 s up to the 600 s deadline
    gets = [p for m, p, _b in openai.log if m == "GET"]
    assert gets and set(gets) == {"/v1/models"} and len(gets) == 201
    assert docker.verbs() == ["up", "logs", "down"]
    assert "--tail=400" in docker.calls[1] and "--no-color" in docker.calls[1]
    assert len(r.e.boot.log_excerpt.encode()) <= 64 * 1024
    assert r.e.smoke is None
    files = _bundle(r)
    pt3 = files["pt3-boot.json"]
    assert pt3["ok"] is False and pt3["actual"] == {"attempted_alloc_mib": 2048.0, "gpu_worker_reported_mib": None}
    blob = json.dumps(files)
    assert PLANTED not in blob and "<REDACTED>" in pt3["failure_log_excerpt"]
    assert home not in pt3["failure_log_excerpt"] and "~/models" in pt3["failure_log_excerpt"]
    assert files["manifest.json"]["outcome"] == "failed"


def test_compose_up_failure(catalog, hub, tmp_path, openai):
    docker = FakeDocker(up_rc=1)
    r = _pull(catalog, hub, tmp_path, _stages(runner=docker, http=_http_to(openai)))
    assert (exit_code(r.outcome), r.e.stage, r.e.failure) == (2, "boot", "compose-up-failed")
    assert docker.verbs() == ["up", "logs", "down"] and not openai.log


def test_smoke_red_when_streaming_is_broken(catalog, hub, tmp_path, openai, capsys):
    openai.mode["broken_stream"] = True
    r = _pull(catalog, hub, tmp_path, _stages(runner=FakeDocker(), http=_http_to(openai)))
    assert (r.ok, exit_code(r.outcome), r.e.stage, r.e.failure) == (True, 2, "smoke", "floor-red")
    assert r.e.smoke.results == {**r.e.smoke.results, "plain-chat": "green", "streaming": "red"}
    assert "[DONE]" in r.e.detail
    from club3090.cli.commands.pull import render
    assert "[pull] e-stage=smoke failure=floor-red" in render(r).splitlines()


def test_no_docker_on_path_skips_boot_cleanly(catalog, hub, tmp_path):
    stages = EStages(which=lambda _n: None)
    r = _pull(catalog, hub, tmp_path, stages)
    assert (exit_code(r.outcome), r.e.ok, r.e.boot_skipped, r.e.boot) == (0, True, "docker-not-on-path", None)
    skipped = next(n for n in r.notices if n.code == "boot-skipped")
    assert skipped.data["why"] == "docker-not-on-path" and skipped.data["compose"] == str(r.e.compose_path)


def test_no_gpu_topology_skips_e(catalog, hub, tmp_path):
    r = _pull(catalog, hub, tmp_path, _stages(no_boot=True), gpus=None, hardware_sm=Decimal("8.6"))
    assert r.ok and exit_code(r.outcome) == 0 and r.e is not None and not r.e.ran
    assert "gpu-topology-undetermined" in r.notice_codes
    assert not _dest(tmp_path, hub).exists()


def test_emit_refusal_is_recorded(catalog, hub, tmp_path):
    r = _pull(catalog, hub, tmp_path, _stages(no_boot=True), profile="vllm/dual", gpus="2x3090")
    assert (r.ok, exit_code(r.outcome), r.e.stage, r.e.failure) == (True, 2, "emit", "derived-runtime-unsupported:drafter")
    assert r.e.download is None and not _dest(tmp_path, hub).exists()
    assert _bundle(r)["manifest.json"]["capture_points"] == ["gate"]


def test_dry_run_never_enters_e(catalog, hub, tmp_path):
    r = _pull(catalog, hub, tmp_path, _stages(no_boot=True), dry_run=True)
    assert r.ok and r.e is None and not (tmp_path / "hf" / "club3090").exists()


def test_override_path_writes_pt5_and_uses_the_fitted_context(catalog, hub, tmp_path, openai):
    docker = FakeDocker(logs="Memory profiling: peak torch memory 812.5 MiB\nAvailable KV cache memory: 0.10 GiB\n")
    r = _pull(catalog, hub, tmp_path, _stages(runner=docker, http=_http_to(openai)), gpus="1x512MiB",
              hardware_sm=Decimal("8.6"), force_download=True)
    assert r.terminal == "override-accepted" and r.raw_verdict == "wont-fit", r.reason
    assert r.e.ran and r.e.ok, (r.e.stage, r.e.detail)
    files = _bundle(r)
    pt5 = files["pt5-override-capture.json"]
    assert pt5["calibration_signal_not_validated"] is True and pt5["point"] == "override_capture"
    assert pt5["actual"] == {"boot_peak_mib": 812.5, "gpu_worker_reported_mib": 812.5}
    assert isinstance(pt5["predicted_vs_actual_delta_mib"], float) and pt5["exit_error_summary"] is None
    assert pt5["predicted_b_breakdown"]["raw_verdict"] == "wont-fit"
    assert "override_capture" in files["manifest.json"]["capture_points"]
    fitted = r.fit.max_model_len_fit
    expected = fitted if 0 < fitted < r.fit.max_model_len else r.fit.max_model_len
    assert r.e.max_model_len == expected and str(expected) in r.e.compose_text


# --------------------------------------------------------------------------------------------
# the CLI
# --------------------------------------------------------------------------------------------

def test_cli_no_boot_downloads_and_reports(hub, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    argv = ["pull", REPO, "--profile-like", "vllm/minimal", "--gpus", "1x3090", "--yes", "--no-boot"]
    assert cli.main(argv, provider=plenty_of_disk) == 0
    captured = capsys.readouterr()
    bundle = latest_bundle(tmp_path / ".pull-captures")
    assert bundle is not None
    download_point = read_bundle(bundle).points["download"]
    assert download_point["ok"] is True and download_point["sha_verified"] is True
    out_lines = captured.out.splitlines()
    # docs/DESIGN.md §10: every report line is "[pull] ..."; the [E] lines name the download folder and the bundle
    assert any(line.startswith("[pull] e: ") and str(_dest(tmp_path, hub)) in line for line in out_lines)
    assert any(line.startswith("[pull] ") and str(bundle) in line for line in out_lines)
    assert any(line.startswith("[pull] download 1/") for line in captured.err.splitlines())   # progress on stderr
    assert "[pull] download" not in captured.out
    hub.repos[REPO].files["model-00001-of-00002.safetensors"]._sha256 = "f" * 64
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf2"))
    assert cli.main([*argv, "--json"], provider=plenty_of_disk) == 2
    data = json.loads(capsys.readouterr().out)
    # the gate accepted, but the pull failed: `ok` answers the command's question (issue 27 item 2)
    assert data["ok"] is False and data["exit_code"] == 2 and data["e"]["failure"] == "sha-mismatch"


@pytest.mark.parametrize("flag,published", [((), "127.0.0.1:"), (("--host", "0.0.0.0"), "0.0.0.0:")])
def test_cli_publishes_on_127_0_0_1_unless_host_widens_it(hub, tmp_path, monkeypatch, capsys, flag, published):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    out = tmp_path / "derived.yml"
    argv = ["pull", REPO, "--profile-like", "vllm/minimal", "--gpus", "1x3090", "--yes", "--no-boot",
            "--out", str(out), *flag]
    assert cli.main(argv, provider=plenty_of_disk) == 0, capsys.readouterr()
    import yaml

    svc = next(iter(yaml.safe_load(out.read_text(encoding="utf-8"))["services"].values()))
    port = svc["command"][svc["command"].index("--port") + 1]
    assert svc["ports"] == [f"{published}{port}:{port}"]
    assert svc["command"][svc["command"].index("--host") + 1] == "0.0.0.0"     # inside the container


def test_cli_host_must_be_an_ip_address(hub, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    code = cli.main(["pull", REPO, "--profile-like", "vllm/minimal", "--gpus", "1x3090", "--host", "example.org"])
    assert code == exit_codes.USAGE and "--host must be an IP address" in capsys.readouterr().err
    assert hub.log == []                                                # refused before any request


def test_no_boot_flag_is_in_help():
    parser = cli.build_parser()
    text = parser._subparsers._group_actions[0].choices["pull"].format_help()
    assert "--no-boot" in text


# --------------------------------------------------------------------------------------------
# review regressions: trust-remote-code, where the compose goes, verification, offline
# --------------------------------------------------------------------------------------------

REMOTE = "club3090-tests/remote-code"


def _remote_code_repo(hub: FakeHub) -> None:
    from tests.fakehub import FIXTURES

    config = json.loads((FIXTURES / "Qwen--Qwen2.5-0.5B" / "config.json").read_text(encoding="utf-8"))
    config["auto_map"] = {"AutoModelForCausalLM": "modeling_x.M"}
    hub.add_fixture("Qwen--Qwen2.5-0.5B", repo_id=REMOTE, tensors=TENSORS, shards=2,
                    extra_files={"config.json": json.dumps(config).encode(), "modeling_x.py": b"class M: pass\n"})


def _evaluate(catalog, hub: FakeHub, tmp_path: Path, source: str, stages: EStages | None, settings=None, **req):
    request = PullRequest(source, "vllm/minimal", gpus=rig("1x3090"), **{"yes": True, **req})
    return evaluate(request, offline_rig(settings or hub.settings(hf_home=tmp_path / "hf")), catalog=catalog,
                    captures_root=tmp_path / ".pull-captures", stages=stages)


@pytest.mark.parametrize("source,flag,emitted", [
    (REMOTE, True, True),        # auto_map: the gate needed the ack and the flag gave it
    (REPO, True, False),         # the flag alone never emits it: the gate did not ask for it
])
def test_e_emits_trust_remote_code_only_when_the_gate_permitted_it(catalog, hub, tmp_path, source, flag, emitted):
    _remote_code_repo(hub)
    r = _evaluate(catalog, hub, tmp_path, source, _stages(no_boot=True), trust_remote_code=flag)
    assert exit_code(r.outcome) == 0 and r.e.ok, (r.reason, r.e)
    text = r.e.compose_path.read_text(encoding="utf-8")
    assert ("--trust-remote-code" in text) is emitted
    if emitted:  # the modelling code it will run was downloaded and checked
        assert "modeling_x.py" in r.e.download.files


def test_e_without_the_flag_stops_before_any_compose(catalog, hub, tmp_path):
    _remote_code_repo(hub)
    r = _evaluate(catalog, hub, tmp_path, REMOTE, _stages(no_boot=True))
    assert (exit_code(r.outcome), int(r.stratum), r.reason) == (2, 3, "needs-trust-remote-code-ack")
    assert r.e is None and not (tmp_path / "hf" / "club3090" / "pulls").exists()


def _local_copy(hub: FakeHub, folder: Path) -> Path:
    folder.mkdir(parents=True)
    for f in hub.repos[REPO].files.values():
        (folder / f.name).write_bytes(b"".join(f.chunks(0, f.size - 1)))
    return folder


def test_e_never_writes_next_to_a_users_folder(catalog, hub, tmp_path):
    folder = _local_copy(hub, tmp_path / "user" / "mymodel")
    mine = tmp_path / "user" / "mymodel.compose.yml"
    mine.write_text("mine\n", encoding="utf-8")
    r = _evaluate(catalog, hub, tmp_path, str(folder), _stages(no_boot=True))
    assert r.e.ok and mine.read_text(encoding="utf-8") == "mine\n"
    assert r.e.compose_path.parent == download.pulls_root(tmp_path / "hf")


def test_library_emit_is_emit_run_and_mounts_the_local_folder(catalog, hub, tmp_path):
    folder = _local_copy(hub, tmp_path / "user" / "mymodel")
    out = tmp_path / "out.yml"
    r = _evaluate(catalog, hub, tmp_path, str(folder), None, out=out)
    assert r.ok and r.emitted and r.out == out and r.e is None
    assert f"source: {folder.absolute()}" in out.read_text(encoding="utf-8")


def test_out_is_checked_before_the_gate_runs(hub, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "exists.yml"
    out.write_text("keep\n", encoding="utf-8")
    code = cli.main(["pull", REPO, "--profile-like", "vllm/minimal", "--gpus", "1x3090", "--out", str(out)])
    assert code == exit_codes.USAGE and hub.log == [] and out.read_text(encoding="utf-8") == "keep\n"
    assert not (tmp_path / ".pull-captures").exists()


def test_a_non_weight_file_is_checked_against_its_git_blob_id(catalog, hub, tmp_path, monkeypatch):
    monkeypatch.setattr(download, "git_blob_id", lambda _path: "0" * 40)
    r = _pull(catalog, hub, tmp_path, _stages(no_boot=True))
    assert (exit_code(r.outcome), r.e.stage, r.e.failure) == (2, "download", download.SHA_MISMATCH)
    assert not r.e.download.failed_file or not r.e.download.failed_file.endswith(".safetensors")


def test_a_body_longer_than_listed_is_refused(hub, tmp_path):
    from club3090.edges.hf_cache import fetch_into_cache

    shard = hub.repos[REPO].files[SHARDS[0]]
    listed = RepoFile(shard.name, None, shard.sha256)       # no listed size: the sha256 still decides
    settings = hub.settings(hf_home=tmp_path / "hf")
    ok = fetch_into_cache(settings, REPO, hub.repos[REPO].commit, [listed], bar=False)
    assert ok.ok
    short = RepoFile(SHARDS[1], 3, hub.repos[REPO].files[SHARDS[1]].sha256)
    report = fetch_into_cache(settings, REPO, hub.repos[REPO].commit, [short], bar=False)
    assert (report.ok, report.failure) == (False, "fallback-failed") and "longer than" in report.detail


def test_offline_nothing_is_requested(hub, tmp_path):
    from club3090.edges.hf_cache import fetch_into_cache

    report = fetch_into_cache(hub.settings(hf_home=tmp_path / "hf", offline=True), REPO, hub.repos[REPO].commit,
                              [RepoFile("config.json", 10)], bar=False)
    assert (report.ok, report.failure) == (False, "offline-not-cached") and hub.log == []


def test_offline_a_cached_repo_is_served_from_the_cache_in_place(catalog, hub, tmp_path):
    from huggingface_hub import snapshot_download

    settings = hub.settings(hf_home=tmp_path / "hf", offline=True)
    snapshot_download(REPO, cache_dir=str(settings.hub_cache), endpoint=hub.url, token=False)
    hub.clear_log()
    r = _evaluate(catalog, hub, tmp_path, REPO, _stages(no_boot=True), settings=settings)
    assert r.e.ok and r.e.download.ok and r.e.download.sha_verified, r.e
    assert hub.log == [] and r.e.download.dest == _dest(tmp_path, hub)
    assert not (tmp_path / "hf" / "club3090" / "pulls" / download.pull_dir(tmp_path, REPO).name).exists()


# --------------------------------------------------------------------------------------------
# the docker preflight before `docker compose` (up's, reused): fake executables on PATH
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("kind", "fix", "environment"), [
    ("engine", "systemctl start docker", "docker-daemon-unreachable"),
    ("compose", "docker-compose-plugin", "compose-plugin-missing"),
    ("nvidia", "nvidia-ctk runtime configure", "nvidia-runtime-missing"),
])
def test_boot_runs_up_s_docker_preflight_first(catalog, hub, tmp_path, monkeypatch, kind, fix, environment):
    import shutil

    from club3090.cli.commands.pull import render
    from club3090.edges.launchers.base import run_process
    from club3090.reports.classify import ROUTE_LOCAL, classify_points
    from club3090.reports.fingerprints import load_table
    from tests.test_up import fake_docker

    bin_dir = tmp_path / "bin"
    fake_docker(bin_dir, info_rc=1 if kind == "engine" else 0, compose_rc=1 if kind == "compose" else 0,
                runtimes='{"runc":{}}' if kind == "nvidia" else '{"nvidia":{},"runc":{}}')
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    r = _pull(catalog, hub, tmp_path, EStages(runner=run_process, which=shutil.which))
    assert (r.ok, exit_code(r.outcome), r.e.stage, r.e.failure) == (True, 2, "boot", "docker-unavailable")
    assert fix in r.e.detail and r.e.download.ok and r.e.boot_ok is False and r.e.smoke is None
    assert not (bin_dir / "compose-ran").exists()                 # no `docker compose ... up` ran
    lines = render(r).splitlines()
    assert "[pull] e-stage=boot failure=docker-unavailable" in lines
    assert any(line.startswith("[pull] e-detail: ") and fix in line for line in lines)
    assert not any("--submit-last" in line for line in lines)          # nothing to report upstream
    files = _bundle(r)
    assert files["manifest.json"]["outcome"] == "failed"
    assert files["pt3-boot.json"]["failure"] == "docker-unavailable" and fix in files["pt3-boot.json"]["detail"]
    # the Loop reads it as this machine's problem, with the next step: never "unknown", never filed
    got = classify_points(read_bundle(r.e.bundle).points, arch_family=None, engine_version=None, gate_only=False,
                          table=load_table())
    assert (got.route, got.environment) == (ROUTE_LOCAL, environment)


def test_kv_calc_version_covers_every_estimator_source():
    from club3090.pipeline import emit_derived as emit

    here = Path(emit.__file__).parents[1]
    assert set(emit.ESTIMATOR_SOURCES) >= {"model/architecture.py", "fit/memory.py", "fit/kv_formats.py", "fit/shape.py"}
    assert all((here / name).is_file() for name in emit.ESTIMATOR_SOURCES)
    assert "+" in emit.kv_calc_version()
