"""`club3090 up` end to end with real parts: the loopback fake Hub (real huggingface_hub), a loopback
file server for the pinned patch payloads, and a stand-in `vllm` executable that accepts vLLM's
flags and execs llama.cpp's server on a tiny generated GGUF model, so the real native launcher
(detached start, PID file, log capture, readiness wait, verify, down) runs against a real server."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import stat
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from club3090 import cli
from club3090.catalog import load_catalog
from club3090.catalog.model import UpstreamFile
from club3090.edges import launchers
from club3090.edges.provider import LiveProvider
from tests.fakehub import FakeHub
from tests.fixtures_path import fixture_path
from tests.llama_server import free_port, write_model

CURATED = "Lorbus/Qwen3.6-27B-int4-AutoRound"
CURATED_PROFILE = "vllm/minimal"
DERIVED = "club3090-tests/tiny-qwen"
TEMPLATE_PATH = "models/qwen3.6-27b/vllm/patches/froggeric-chat-template/chat_template.jinja"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
TEMPLATE = b"{% for m in messages %}{{ m['content'] }}{% endfor %}\n"
TENSORS = {"model.embed_tokens.weight": ("BF16", [256, 64]), "lm_head.weight": ("BF16", [256, 64]),
           "model.norm.weight": ("BF16", [64])}

STANDIN = '''#!{python}
"""A stand-in for `vllm`: takes vLLM's flags, checks the model folder, execs llama.cpp's server."""
import os, sys
args = sys.argv[1:]
if args[:1] == ["--version"]:
    print("{version}")
    sys.exit(0)
assert args[0] == "serve", args
model = args[1]
def flag(name, default=None):
    return args[args.index(name) + 1] if name in args else default
print("stand-in vllm: serving", model, "as", flag("--served-model-name"), flush=True)
if not os.path.isfile(os.path.join(model, "config.json")):
    print("stand-in vllm: no config.json in", model, flush=True)
    sys.exit(3)
for arg in args:
    if arg.startswith("/root/") or arg.startswith("/etc/"):
        print("stand-in vllm: container-only path", arg, flush=True)
        sys.exit(4)
sys.stdout.write({startup!r})
sys.stdout.flush()
os.execv(sys.executable, [sys.executable, "-m", "llama_cpp.server", "--model", {gguf!r},
         "--model_alias", flag("--served-model-name", "model"), "--host", flag("--host", "127.0.0.1"),
         "--port", flag("--port"), "--n_ctx", "8192", "--n_threads", "1", "--n_threads_batch", "1",
         "--verbose", "False", "--interrupt_requests", "False"])
'''


@pytest.fixture(scope="module")
def gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_model(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


STARTUP_LOG = Path(__file__).parent / "fixtures" / "logs" / "startup_v064_profiling.log"


def standin(folder: Path, gguf: Path, version: str = "0.22.0", startup: str = "") -> Path:
    """``startup``: vLLM start-up lines the stand-in prints before it execs llama.cpp's server."""
    path = folder / "vllm-standin"
    path.write_text(STANDIN.format(python=sys.executable, gguf=str(gguf), version=version, startup=startup),
                    encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


class _Files(BaseHTTPRequestHandler):
    files: ClassVar[dict[str, bytes]] = {}
    hits: ClassVar[list[str]] = []

    def log_message(self, *_a: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.hits.append(self.path)
        body = self.files.get(self.path)
        self.send_response(200 if body is not None else 404)
        self.send_header("Content-Length", str(len(body or b"")))
        self.end_headers()
        self.wfile.write(body or b"")


@pytest.fixture
def upstream() -> Iterator[type[_Files]]:
    handler = type("Files", (_Files,), {"files": {}, "hits": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    worker = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    worker.start()
    handler.url = f"http://127.0.0.1:{server.server_address[1]}"  # type: ignore[attr-defined]
    try:
        yield handler
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_hub: FakeHub, upstream: Any) -> dict[str, Any]:
    """An empty HF cache, the fake Hub, the payload server; a catalog copy pinning our payload."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_ENDPOINT", fake_hub.url)
    monkeypatch.setenv("CLUB3090_UPSTREAM_URL", upstream.url)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    fake_hub.add_fixture("Qwen--Qwen2.5-0.5B", repo_id=CURATED, tensors=TENSORS, shards=2)
    fake_hub.add_fixture("Qwen--Qwen2.5-0.5B", repo_id=DERIVED, tensors=TENSORS, shards=1)
    upstream.files[f"/{COMMIT}/{TEMPLATE_PATH}"] = TEMPLATE
    base = load_catalog(fixture_path("catalog_seed"))    # the seed-era vllm/minimal: one mounted payload
    pinned = dict(base.upstream_files)
    pinned[TEMPLATE_PATH] = UpstreamFile(TEMPLATE_PATH, COMMIT, len(TEMPLATE), hashlib.sha256(TEMPLATE).hexdigest(),
                                         False)
    catalog = dataclasses.replace(base, upstream_files=pinned)

    def provider(settings: Any) -> LiveProvider:
        return LiveProvider(settings, free_disk=lambda _p: 10**15, load=lambda: catalog)
    return {"provider": provider, "hub": fake_hub, "upstream": upstream, "tmp": tmp_path, "catalog": catalog}


def up(env: dict[str, Any], *argv: str) -> int:
    return cli.main(["up", *argv], provider=env["provider"])


@pytest.fixture
def stopper() -> Iterator[list[Path]]:
    dirs: list[Path] = []
    yield dirs
    for d in dirs:
        launchers.stop_native(d)


def test_curated_native_end_to_end(env, gguf, stopper, capsys):
    run = env["tmp"] / "run"
    stopper.append(run)
    vllm = standin(env["tmp"], gguf, startup=STARTUP_LOG.read_text(encoding="utf-8"))
    port = free_port()
    code = up(env, CURATED, "--gpus", "1x3090", "--profile-like", CURATED_PROFILE, "--dir", str(run),
              "--launcher", "native", "--vllm", str(vllm), "--port", str(port), "--skip-tools")
    cap = capsys.readouterr()
    out = cap.out
    assert code == 0, out + cap.err + launchers.log_tail(run / "logs" / "server.log")
    assert out.startswith("Fits on 1x RTX 3090 (vllm/minimal, TP 1)")      # pull's headline
    assert f"[up] URL: http://127.0.0.1:{port}/v1" in out and "[up] SERVING: verified" in out
    assert "curl -s" in out
    # the user's --skip-tools is the reason the table gives; each check once, on stdout only
    table = [ln for ln in out.splitlines() if ln.startswith("[up] verify ")]
    assert any(ln.split()[2:4] == ["SKIP", "tool-call"] and ln.endswith("--skip-tools") for ln in table), table
    assert len(table) == len(set(table)) and "[verify]" not in cap.err and "tool calls not verified" not in out
    # the bundle: self-contained, the template fetched and verified, served from the HF cache snapshot
    for name in ("compose.yml", ".env", "serve.sh", "launch.json"):
        assert (run / name).is_file(), name
    assert (run / "files" / TEMPLATE_PATH).read_bytes() == TEMPLATE
    assert (run / "cache" / "triton").is_dir() and "add --out" not in out
    serve = (run / "serve.sh").read_text(encoding="utf-8")
    assert "/root/" not in serve and "/etc/" not in serve
    assert str(run / "files" / TEMPLATE_PATH) in serve
    snap = next((env["tmp"] / "hf" / "hub" / "models--Lorbus--Qwen3.6-27B-int4-AutoRound" / "snapshots").iterdir())
    assert (snap / "config.json").is_file() and str(snap) in serve
    assert sorted(p.name for p in snap.glob("*.safetensors")) == ["model-00001-of-00002.safetensors",
                                                                 "model-00002-of-00002.safetensors"]
    state = json.loads((run / "state.json").read_text(encoding="utf-8"))
    pid = state["pid"]
    assert launchers.alive(pid) and (run / "server.pid").read_text().strip() == str(pid)
    assert "stand-in vllm: serving" in (run / "logs" / "server.log").read_text(encoding="utf-8")
    # every boot leaves a receipt: the log's measured terms, the launch's shape, a copy in the overlay
    receipt = json.loads((run / "receipt.json").read_text(encoding="utf-8"))
    assert receipt["measured"]["num_gpu_blocks"] == 3852
    assert receipt["measured"]["available_kv_cache_gib"] == 3.76
    assert receipt["shape"]["model"] == CURATED and receipt["shape"]["gpu_count"] == 1
    assert "max_model_len" in receipt["shape_given"]
    saved = list((Path(os.environ["CLUB3090_STATE_DIR"]) / "receipts").glob("*.json"))
    assert [json.loads(p.read_text(encoding="utf-8")) for p in saved] == [receipt]
    assert f"[up] receipt: {run / 'receipt.json'}" in out

    assert cli.main(["status", str(run)]) == 0
    status = capsys.readouterr().out
    assert status.startswith(f"[status] running: http://127.0.0.1:{port}/v1") and f"PID {pid}" in status
    assert cli.main(["logs", str(run)]) == 0
    assert "stand-in vllm" in capsys.readouterr().out
    assert cli.main(["down", str(run)]) == 0
    assert "stopped PID" in capsys.readouterr().out
    assert not launchers.alive(pid) and not (run / "server.pid").exists()
    assert cli.main(["status", str(run)]) == 1
    assert capsys.readouterr().out.startswith("[status] stopped")


def test_derived_native_end_to_end(env, gguf, stopper, capsys):
    run = env["tmp"] / "run"
    stopper.append(run)
    vllm = standin(env["tmp"], gguf)
    port = free_port()
    code = up(env, DERIVED, "--gpus", "1x3090", "--profile-like", "vllm/minimal", "--yes", "--dir", str(run),
              "--launcher", "native", "--vllm", str(vllm), "--port", str(port))
    cap = capsys.readouterr()
    out = cap.out
    assert code == 0, out + cap.err + launchers.log_tail(run / "logs" / "server.log")
    assert "[up] SERVING: verified" in out and "the launch has no --enable-auto-tool-choice" in out
    assert out.startswith("Fits on 1x RTX 3090"), out                          # the plan first
    table = [ln for ln in out.splitlines() if ln.startswith("[up] verify ")]
    assert any(ln.split()[2:4] == ["SKIP", "tool-call"] and ln.endswith("no --enable-auto-tool-choice")
               for ln in table), table
    assert len(table) == len(set(table)) and "--skip-tools" not in out
    assert "[up] no receipt: the server log has no vLLM start-up lines" in out
    # llama.cpp's log is no vLLM start-up: no receipt anywhere
    assert not (run / "receipt.json").exists()
    assert not (Path(os.environ["CLUB3090_STATE_DIR"]) / "receipts").exists()
    compose = (run / "compose.yml").read_text(encoding="utf-8")
    assert DERIVED in compose and "--revision" in compose
    assert cli.main(["down", str(run)]) == 0


# --------------------------------------------------------------------------------------------
# refusals before anything starts
# --------------------------------------------------------------------------------------------

MARKER_STANDIN = '''#!/bin/sh
if [ "$1" = "--version" ]; then echo 0.22.0; exit 0; fi
touch "$(dirname "$0")/started"
exit 1
'''


def marker_standin(folder: Path) -> Path:
    path = folder / "vllm-marker"
    path.write_text(MARKER_STANDIN, encoding="utf-8")
    path.chmod(0o755)
    return path


def test_a_corrupted_payload_is_refused_and_nothing_starts(env, capsys):
    env["upstream"].files[f"/{COMMIT}/{TEMPLATE_PATH}"] = TEMPLATE.replace(b"m in", b"x in")   # same size
    vllm = marker_standin(env["tmp"])
    run = env["tmp"] / "run"
    code = up(env, CURATED, "--gpus", "1x3090", "--profile-like", CURATED_PROFILE, "--dir", str(run),
              "--launcher", "native", "--vllm", str(vllm))
    err = capsys.readouterr().err
    assert code == 65 and TEMPLATE_PATH in err and "sha256" in err
    assert not run.exists() and not (env["tmp"] / "started").exists()


def test_a_corrupted_weight_file_is_refused_and_nothing_starts(env, capsys):
    shard = env["hub"].repos[DERIVED].files["model.safetensors"]
    shard._sha256 = "0" * 64                           # the Hub's LFS sha256 no longer matches the bytes
    vllm = marker_standin(env["tmp"])
    run = env["tmp"] / "run"
    code = up(env, DERIVED, "--gpus", "1x3090", "--profile-like", "vllm/minimal", "--yes", "--dir", str(run),
              "--launcher", "native", "--vllm", str(vllm))
    err = capsys.readouterr().err
    assert code == 65 and "sha256" in err and "model.safetensors" in err, err
    assert not (env["tmp"] / "started").exists() and not (run / "state.json").exists()
    snapshots = env["tmp"] / "hf" / "hub" / "models--club3090-tests--tiny-qwen" / "snapshots"
    assert not list(snapshots.glob("*/model.safetensors"))          # the bad file was deleted


def test_an_interrupted_download_resumes(env, capsys):
    hub = env["hub"]
    shard = hub.repos[CURATED].files["model-00002-of-00002.safetensors"]
    hub.fault("truncate", match=shard.sha256, times=None)          # half the bytes, then the line drops
    run = env["tmp"] / "run"
    argv = [CURATED, "--gpus", "1x3090", "--profile-like", CURATED_PROFILE, "--dir", str(run), "--no-start"]
    assert up(env, *argv) != 0                                       # the second shard cannot be completed
    first = capsys.readouterr()
    partial = list((env["tmp"] / "hf" / "hub").rglob("*.club3090-partial"))
    assert partial, first.err + str(list((env["tmp"] / "hf").rglob("*")))
    assert 0 < partial[0].stat().st_size < shard.size
    hub.faults.clear()
    hub.clear_log()
    assert up(env, *argv) == 0
    assert "not started (--no-start)" in capsys.readouterr().out
    gets = [r for r in hub.log if r.method == "GET" and (".safetensors" in r.path or shard.sha256 in r.path)]
    assert gets and all("model-00001" not in r.path for r in gets)   # the verified first shard is not fetched again
    ranged = [r.headers.get("range", "") for r in gets if shard.sha256 in r.path]
    assert any(h.startswith("bytes=") and not h.startswith("bytes=0-") for h in ranged), ranged   # resumed
    assert (run / "state.json").is_file() and not (run / "server.pid").exists()


# --------------------------------------------------------------------------------------------
# Docker preflight: fake `docker` executables on PATH
# --------------------------------------------------------------------------------------------

def fake_docker(folder: Path, *, info_rc: int = 0, runtimes: str = '{"nvidia":{},"runc":{}}',
                compose_rc: int = 0) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "docker"
    script.write_text(f'''#!/bin/sh
case "$1" in
  info) [ {info_rc} -eq 0 ] || {{ echo "Cannot connect to the Docker daemon" >&2; exit {info_rc}; }}
        echo '{runtimes}'; exit 0;;
  compose) if [ "$2" = version ]; then exit {compose_rc}; fi; touch "$(dirname "$0")/compose-ran"; exit 0;;
esac
exit 0
''', encoding="utf-8")
    script.chmod(0o755)


@pytest.mark.parametrize(("kind", "fix"), [
    ("missing", "install Docker Engine"),
    ("engine", "systemctl start docker"),
    ("compose", "docker-compose-plugin"),
    ("nvidia", "nvidia-ctk runtime configure"),
])
def test_docker_preflight_names_the_fix(env, monkeypatch, capsys, kind, fix):
    bin_dir = env["tmp"] / "bin"
    bin_dir.mkdir()
    if kind != "missing":
        fake_docker(bin_dir, info_rc=1 if kind == "engine" else 0, compose_rc=1 if kind == "compose" else 0,
                    runtimes='{"runc":{}}' if kind == "nvidia" else '{"nvidia":{},"runc":{}}')
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    if kind == "missing":
        monkeypatch.setenv("PATH", str(bin_dir))
    run = env["tmp"] / "run"
    code = up(env, CURATED, "--gpus", "1x3090", "--profile-like", CURATED_PROFILE, "--dir", str(run))
    err = capsys.readouterr().err
    assert code == 69 and fix in err
    assert not run.exists() and not (bin_dir / "compose-ran").exists()


def test_offline_serves_from_the_cache_without_a_network_call(env, monkeypatch, capsys):
    run = env["tmp"] / "run"
    argv = [CURATED, "--gpus", "1x3090", "--profile-like", CURATED_PROFILE, "--dir", str(run), "--no-start"]
    assert up(env, *argv) == 0
    capsys.readouterr()
    env["hub"].clear_log()
    env["upstream"].hits.clear()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert up(env, *argv, "--force") == 0
    cap = capsys.readouterr()
    assert "in the HF cache, checked" in cap.err and "sha256 verified" in cap.out
    assert env["hub"].log == [] and env["upstream"].hits == []     # the Hub and upstream were not asked


def test_a_failed_docker_start_prints_the_log_tail_and_writes_a_capture(env, monkeypatch, capsys):
    """The container exits during start-up: the log tail is shown, a capture bundle is written, exit 1."""
    bin_dir = env["tmp"] / "bin"
    bin_dir.mkdir()
    script = bin_dir / "docker"
    script.write_text('''#!/bin/sh
case "$1" in
  info) echo '{"nvidia":{},"runc":{}}'; exit 0;;
  compose) [ "$2" = version ] && exit 0
    shift 3
    case "$1" in
      up) touch "$(dirname "$0")/compose-up"; exit 0;;
      ps) exit 0;;
      logs) echo "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"; exit 0;;
    esac;;
esac
exit 0
''', encoding="utf-8")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    run = env["tmp"] / "run"
    code = up(env, CURATED, "--gpus", "1x3090", "--profile-like", CURATED_PROFILE, "--dir", str(run),
              "--port", str(free_port()))
    out = capsys.readouterr().out.splitlines()
    assert code == 1 and (bin_dir / "compose-up").exists()
    assert "[up] FAILED to start: the server exited" in out
    assert any("CUDA out of memory" in line for line in out)
    assert any(line.startswith("[up] capture bundle: ") for line in out)
    assert not out[-1].startswith("[pull] FITS") and "SERVING" not in "\n".join(out)
    assert json.loads((run / "state.json").read_text(encoding="utf-8"))["state"] == "failed"


def test_pull_out_folder_writes_the_same_bundle(env, capsys):
    run = env["tmp"] / "bundle"
    run.mkdir()
    code = cli.main(["pull", CURATED, "--profile-like", CURATED_PROFILE, "--gpus", "1x3090", "--out", f"{run}/"],
                    provider=env["provider"])
    out = capsys.readouterr().out
    assert code == 0 and "Fits on 1x RTX 3090" in out and "not started (--no-start)" in out
    for name in ("compose.yml", ".env", "serve.sh", "launch.json", f"files/{TEMPLATE_PATH}"):
        assert (run / name).is_file(), name
    assert not (run / "server.pid").exists()


def test_native_preflight(tmp_path, monkeypatch):
    from club3090.errors import LauncherUnavailable

    monkeypatch.setenv("PATH", str(tmp_path))                   # no vllm on PATH
    with pytest.raises(LauncherUnavailable, match="vllm is not on PATH"):
        launchers.find_vllm(None, "vllm-stable@v0.22.0")
    with pytest.raises(LauncherUnavailable, match="not an executable file"):
        launchers.find_vllm(str(tmp_path / "nope"), "vllm-stable@v0.22.0")
    exe = marker_standin(tmp_path)
    same = launchers.find_vllm(str(exe), "vllm-stable@v0.22.0")
    assert (same.version, same.note) == ("0.22.0", None)
    other = launchers.find_vllm(str(exe), "vllm-stable@v0.23.1")
    assert other.note == "vllm 0.22.0 is installed; the profile was validated on 0.23.1"
    assert not (tmp_path / "started").exists()                   # --version only


def test_native_missing_vllm_exits_69_and_writes_nothing(env, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(env["tmp"]))
    run = env["tmp"] / "run"
    code = up(env, CURATED, "--gpus", "1x3090", "--profile-like", CURATED_PROFILE, "--dir", str(run),
              "--launcher", "native")
    assert code == 69 and "--vllm PATH" in capsys.readouterr().err and not run.exists()


def test_without_profile_like_the_gate_chooses_the_shape(env, capsys):
    run = env["tmp"] / "run"
    code = up(env, DERIVED, "--gpus", "1x3090", "--yes", "--dir", str(run), "--no-start")
    out = capsys.readouterr().out
    assert code == 0, out
    state = json.loads((run / "state.json").read_text(encoding="utf-8"))
    assert state["profile_like"] and (run / "compose.yml").is_file() and DERIVED in (run / "compose.yml").read_text()
    # `up` launches the shape `pull` derives and prices for the same rig (one value, built once)
    assert cli.main(["pull", DERIVED, "--gpus", "1x3090", "--dry-run", "--json"], provider=env["provider"]) == 0
    chosen = json.loads(capsys.readouterr().out)["shape"]["chosen"]
    compose = (run / "compose.yml").read_text(encoding="utf-8")
    for flag, key in (("--tensor-parallel-size", "tensor_parallel_size"), ("--max-num-seqs", "max_num_seqs")):
        assert f"- {flag}\n" in compose and f"- '{chosen[key]}'" in compose.split(f"- {flag}\n", 1)[1][:40], compose


def test_the_json_output_carries_the_receipt_or_why_not(tmp_path):
    from club3090.outcome import Outcome
    from club3090.pipeline.boot_receipt import write_boot_receipt
    from club3090.pipeline.up import UpResult

    plain = write_boot_receipt(tmp_path, "llama.cpp says hello\n", argv=["vllm", "serve", "x"], repo_id="a/b",
                               hardware=None, snapshot=None)
    doc = UpResult(Outcome.OK, (plain,)).to_json()["receipt"]
    assert doc["path"] is None and "no vLLM start-up lines" in doc["note"]
    assert not (tmp_path / "receipt.json").exists()
    measured = write_boot_receipt(tmp_path, STARTUP_LOG.read_text(encoding="utf-8"),
                                  argv=["vllm", "serve", "x", "--max-model-len", "40000", "--kv-cache-dtype", "fp8"],
                                  repo_id="a/b", hardware=None, snapshot=None)
    doc = UpResult(Outcome.OK, (measured,)).to_json()["receipt"]
    assert doc["path"] == str(tmp_path / "receipt.json") and doc["note"] is None
    receipt = json.loads((tmp_path / "receipt.json").read_text(encoding="utf-8"))
    assert receipt["shape"]["kv_cache_dtype"] == "fp8" and receipt["shape"]["model"] == "a/b"
    assert json.loads(Path(doc["saved"]).read_text(encoding="utf-8")) == receipt


GEMMA = "cyankiwi/gemma-4-26B-A4B-it-AWQ-4bit"
GEMMA_PROFILE = "vllm/gemma-26ba4b-single"
ASSISTANT = "google/gemma-4-26B-A4B-it-assistant"
ASSISTANT_FOLDER = "/root/.cache/huggingface/gemma-4-26b-a4b-it-assistant"


def pin_upstream(env: dict[str, Any], prefix: str) -> None:
    """Serve (and pin in the catalog copy) a stand-in for every upstream file under ``prefix``."""
    base = env["catalog"]
    pinned = dict(base.upstream_files)
    for path, f in base.upstream_files.items():
        if path.startswith(prefix):
            body = f"stand-in for {path}\n".encode()
            pinned[path] = UpstreamFile(path, COMMIT, len(body), hashlib.sha256(body).hexdigest(), f.executable)
            env["upstream"].files[f"/{COMMIT}/{path}"] = body
    catalog = dataclasses.replace(base, upstream_files=pinned)
    env["provider"] = lambda settings: LiveProvider(settings, free_disk=lambda _p: 10**15, load=lambda: catalog)


def test_every_drafter_folder_names_a_catalog_repo():
    from club3090.pipeline.up import drafter_repo

    catalog = load_catalog()
    folders = {d.id: d.local_model_path for d in catalog.drafters.values() if d.local_model_path}
    assert folders
    for drafter_id, folder in folders.items():
        repo = drafter_repo(catalog, drafter_id)
        assert repo is not None and repo.rsplit("/", 1)[-1].lower() == folder.rsplit("/", 1)[-1], drafter_id
    assert drafter_repo(catalog, "qwen-mtp-builtin") is None and drafter_repo(catalog, None) is None


def test_a_drafter_profile_downloads_the_drafter_into_the_hf_cache(env, capsys):
    from club3090.pipeline.bundle import STATE

    env["hub"].add_fixture("Qwen--Qwen2.5-0.5B", repo_id=GEMMA, tensors=TENSORS, shards=1)
    env["hub"].add_fixture("Qwen--Qwen2.5-0.5B", repo_id=ASSISTANT, tensors=TENSORS, shards=2)
    pin_upstream(env, "models/gemma-4-26b-a4b/")
    run = env["tmp"] / "run"
    code = up(env, GEMMA, "--gpus", "1x3090", "--profile-like", GEMMA_PROFILE, "--yes", "--dir", str(run),
              "--no-start")
    out = capsys.readouterr().out
    assert code == 0, out
    state = json.loads((run / STATE).read_text())
    commit = state["drafter"]["commit"]
    assert state["drafter"]["repo_id"] == ASSISTANT and len(commit) == 40
    snap = Path(os.environ["HF_HOME"]) / "hub" / f"models--{ASSISTANT.replace('/', '--')}" / "snapshots" / commit
    assert (snap / "config.json").is_file() and len(list(snap.glob("*.safetensors"))) == 2
    assert f"[up] drafter: {ASSISTANT}" in out and "sha256 verified" in out
    inside = f"/root/.cache/huggingface/hub/models--{ASSISTANT.replace('/', '--')}/snapshots/{commit}"
    compose, serve = (run / "compose.yml").read_text(), (run / "serve.sh").read_text()
    assert inside in compose and ASSISTANT_FOLDER not in compose
    assert str(snap) in serve and "/root/.cache/huggingface" not in serve


def test_a_drafter_that_fails_its_hash_starts_nothing(env, capsys):
    env["hub"].add_fixture("Qwen--Qwen2.5-0.5B", repo_id=GEMMA, tensors=TENSORS, shards=1)
    env["hub"].add_fixture("Qwen--Qwen2.5-0.5B", repo_id=ASSISTANT, tensors=TENSORS, shards=1)
    env["hub"].repos[ASSISTANT].files["model.safetensors"]._sha256 = "0" * 64
    pin_upstream(env, "models/gemma-4-26b-a4b/")
    run = env["tmp"] / "run"
    code = up(env, GEMMA, "--gpus", "1x3090", "--profile-like", GEMMA_PROFILE, "--yes", "--dir", str(run),
              "--no-start")
    err = capsys.readouterr().err
    assert code == 65 and "sha256" in err and "model.safetensors" in err, err
    assert not (run / "state.json").exists()
    snapshots = env["tmp"] / "hf" / "hub" / f"models--{ASSISTANT.replace('/', '--')}" / "snapshots"
    assert not list(snapshots.glob("*/model.safetensors"))          # the bad file was deleted
