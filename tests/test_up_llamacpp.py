"""`club3090 up` and `compose` for the llama.cpp family, with real parts: the loopback fake Hub (real
huggingface_hub) serving a tiny GGUF written by the tests, llama.cpp's real server (llama-cpp-python's
``python -m llama_cpp.server``, the native stand-in when no ``llama-server`` is on PATH), the verify
checks against it, ``down``; compose files checked with compose-spec."""

from __future__ import annotations

import dataclasses
import json
import stat
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from club3090 import cli
from club3090.catalog import load_catalog
from club3090.catalog.model import ProfileRuntime, WeightVariant
from club3090.compose import llamacpp as lc
from club3090.edges import launchers
from club3090.edges.provider import LiveProvider
from club3090.fit.llamacpp import LlamaCppArgs
from tests import test_up as up_tests
from tests.fakehub import FakeHub
from tests.llama_server import N_CTX, free_port, write_model
from tests.test_compose import validate_compose

stopper = up_tests.stopper     # the fixture that stops every native server a test started
REPO = "club3090-tests/tiny-llama-GGUF"
FILE = "tiny-llama-F32.gguf"
PROFILE = "llamacpp/default"
FIXTURE = Path(__file__).parent / "fixtures" / "llamacpp" / "shipped_service.yaml"

STANDIN = '''#!{python}
"""A stand-in for `llama-server`: takes llama.cpp's flags, execs llama-cpp-python's server."""
import os, sys
args = sys.argv[1:]
if args[:1] == ["--version"]:
    print("version: 9999 (stand-in)", file=sys.stderr)
    sys.exit(0)
def flag(*names, default=None):
    for n in names:
        if n in args:
            return args[args.index(n) + 1]
    return default
print("stand-in llama-server:", " ".join(args), flush=True)
os.execv(sys.executable, [sys.executable, "-m", "llama_cpp.server", "--model", flag("-m", "--model"),
         "--model_alias", flag("--alias", "-a", default="model"), "--host", flag("--host"),
         "--port", flag("--port"), "--n_ctx", flag("-c", "--ctx-size"), "--n_threads", "1",
         "--n_threads_batch", "1", "--verbose", "False", "--interrupt_requests", "False"])
'''


@pytest.fixture(scope="module")
def gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_model(tmp_path_factory.mktemp("gguf") / FILE)


def shipped_service() -> dict[str, Any]:
    doc = yaml.safe_load(FIXTURE.read_text(encoding="utf-8"))
    assert isinstance(doc, dict)
    return doc


def catalog_with_capture(repo: str = REPO, files: tuple[str, ...] = (FILE,)) -> Any:
    """The packaged catalog with ``llamacpp/default`` captured (tests/fixtures/llamacpp) and its weight
    variant pointing at the tiny repo."""
    base = load_catalog()
    profile = base.profiles[PROFILE]
    doc = shipped_service()
    runtime = ProfileRuntime(genesis_equipped=False, service_name=doc["service_name"], service=doc["service"],
                             insertion_points=(), top_level={})
    model = base.models[profile.model]
    variant = model.weights[profile.weights_variant]
    fields = {f.name for f in dataclasses.fields(WeightVariant)}
    changes: dict[str, Any] = {"hf_repos": (repo,), "files": files}
    if "revision" in fields:
        changes["revision"] = None
    if "hf_repo" in fields:
        changes["hf_repo"] = repo
    weights = {**model.weights, profile.weights_variant: dataclasses.replace(variant, **changes)}
    models = {**base.models, profile.model: dataclasses.replace(model, weights=weights)}
    profiles = {**base.profiles, PROFILE: dataclasses.replace(profile, runtime=runtime, max_model_len=N_CTX,
                                                                   status="production")}
    return dataclasses.replace(base, profiles=profiles, models=models)


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_hub: FakeHub, gguf: Path) -> dict[str, Any]:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_ENDPOINT", fake_hub.url)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    bin_dir = tmp_path / "bin"                 # no llama-server on PATH: the llama-cpp-python fallback
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    fake_hub.add_repo(REPO, {FILE: gguf.read_bytes(), "README.md": b"tiny\n"})
    catalog = catalog_with_capture()

    def provider(settings: Any) -> LiveProvider:
        return LiveProvider(settings, free_disk=lambda _p: 10**15, load=lambda: catalog)
    return {"provider": provider, "hub": fake_hub, "tmp": tmp_path, "catalog": catalog, "bin": bin_dir}


def run_cli(env: dict[str, Any], *argv: str) -> int:
    return cli.main(list(argv), provider=env["provider"])



# --------------------------------------------------------------------------------------------
# end to end: a GGUF repo -> the real llama.cpp server -> verify -> down
# --------------------------------------------------------------------------------------------

def test_up_serves_a_gguf_repo_with_the_real_llama_server(env, stopper, capsys):
    run = env["tmp"] / "run"
    stopper.append(run)
    port = free_port()
    code = run_cli(env, "up", REPO, "--gpus", "1x3090", "--dir", str(run), "--launcher", "native",
                   "--port", str(port))
    printed = capsys.readouterr()
    out = printed.out
    assert code == 0, out
    assert f"-c {N_CTX}: the trained context, every layer on the GPUs" in out
    assert "[up] SERVING: verified" in out
    # in order: the plan first, one verify table, the real skip reason, llama.cpp's own flag names
    lines = out.splitlines()
    plan = next(i for i, ln in enumerate(lines) if ln.startswith(f"[up] {REPO} F32"))
    table = [ln for ln in lines if ln.startswith("[up] verify ")]
    assert plan == 0 and plan < lines.index(table[0]), out
    assert table and len(table) == len(set(table)) and "[verify]" not in printed.err, (table, printed.err)
    assert any(ln.split()[2:4] == ["SKIP", "tool-call"] and ln.endswith("no --jinja") for ln in table), table
    assert "--skip-tools" not in out and "--enable-auto-tool-choice" not in out and "--reasoning-parser" not in out
    state = json.loads((run / "state.json").read_text(encoding="utf-8"))
    assert state["engine"] == "llama.cpp" and state["state"] == "running" and state["verified"] is True
    assert state["served_model"] == f"{REPO}:F32"
    assert state["argv"][1:3] == ["-m", "llama_cpp.server"]
    snapshot = Path(env["tmp"] / "hf" / "hub" / f"models--{REPO.replace('/', '--')}" / "snapshots" / state["commit"])
    assert (snapshot / FILE).is_file()
    assert str(snapshot / FILE) in state["argv"]
    assert ["--n_ctx", str(N_CTX)] == state["argv"][state["argv"].index("--n_ctx"):][:2]
    launch = json.loads((run / "launch.json").read_text(encoding="utf-8"))
    assert launch["prediction"]["ctx_size"] == N_CTX and launch["prediction"]["confidence"] == "estimated"
    compose = (run / "compose.yml").read_text(encoding="utf-8")
    validate_compose(compose)   # compose-spec
    service = next(iter(yaml.safe_load(compose)["services"].values()))
    assert service["command"][:2] == ["-m", f"/root/.cache/huggingface/hub/models--club3090-tests--tiny-llama-GGUF"
                                             f"/snapshots/{state['commit']}/{FILE}"]
    assert service["volumes"][0].endswith(":/root/.cache/huggingface/hub:ro")

    assert run_cli(env, "status", str(run), "--json") == 0
    assert json.loads(capsys.readouterr().out)["answering"] is True
    assert run_cli(env, "down", str(run)) == 0
    assert "stopped PID" in capsys.readouterr().out
    assert run_cli(env, "status", str(run)) == 1
    assert "PID None" not in capsys.readouterr().out


def test_profile_replay_serves_natively_through_a_llama_server_binary(env, stopper, capsys):
    """`up llamacpp/default`: the shipped compose replayed into a bundle; `--llama-server-bin` runs its flags."""
    standin = env["bin"] / "llama-server-standin"
    standin.write_text(STANDIN.format(python=sys.executable), encoding="utf-8")
    standin.chmod(standin.stat().st_mode | stat.S_IXUSR)
    run = env["tmp"] / "run"
    stopper.append(run)
    port = free_port()
    code = run_cli(env, "up", PROFILE, "--gpus", "1x3090", "--dir", str(run), "--launcher", "native",
                   "--llama-server-bin", str(standin), "--port", str(port), "--skip-tools")
    out = capsys.readouterr().out
    assert code == 0, out
    assert "llamacpp/default's shape" not in out                                   # the shipped compose, replayed
    state = json.loads((run / "state.json").read_text(encoding="utf-8"))
    assert state["served_model"] == PROFILE and state["argv"][0] == str(standin)
    log = (run / "logs" / "server.log").read_text(encoding="utf-8")
    assert "stand-in llama-server:" in log and "--cache-type-k q4_0" in log and "--jinja" in log
    compose = (run / "compose.yml").read_text(encoding="utf-8")
    validate_compose(compose)   # compose-spec
    service = yaml.safe_load(compose)["services"][shipped_service()["service_name"]]
    assert "/models" not in json.dumps(service["volumes"])
    assert service["entrypoint"] == shipped_service()["service"]["entrypoint"]    # the shipped wrapper kept
    assert "[up] SERVING: verified" in out
    assert run_cli(env, "down", str(run)) == 0


# --------------------------------------------------------------------------------------------
# compose replay, the Docker path, refusals
# --------------------------------------------------------------------------------------------

def test_compose_replays_a_llamacpp_profile(env, capsys):
    out = env["tmp"] / "llama.yml"
    assert run_cli(env, "compose", "--profile", PROFILE, "--out", str(out)) == 0
    text = out.read_text(encoding="utf-8")
    validate_compose(text)      # compose-spec
    service = yaml.safe_load(text)["services"][shipped_service()["service_name"]]
    words = service["command"]
    assert words[words.index("-c") + 1] == f"${{CTX_SIZE:-{N_CTX}}}"           # the slot keeps its override
    assert words[words.index("--cache-type-k") + 1] == "${KV_TYPE:-q4_0}"
    assert service["ports"] == ["${BIND_HOST:-0.0.0.0}:${ESTATE_PORT:-${PORT:-8020}}:8080"]
    assert "MODEL_DIR" in capsys.readouterr().err
    assert run_cli(env, "compose", "--profile", PROFILE, "--format", "llama-server") == 0
    line = capsys.readouterr().out.splitlines()[-1]
    # the GGUF by its mount's host source (the shipped compose's folder), never the container's /models
    assert line.startswith("llama-server --host 0.0.0.0 --port 8080 -m '<club-3090 checkout>/models-cache/")
    assert f"-c {N_CTX}" in line and " /models/" not in line


def test_compose_without_a_capture_refuses(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    base = load_catalog()
    bare = dataclasses.replace(base, profiles={**base.profiles, PROFILE: dataclasses.replace(
        base.profiles[PROFILE], runtime=None)})

    def provider(settings: Any) -> LiveProvider:
        return LiveProvider(settings, free_disk=lambda _p: 10**15, load=lambda: bare)
    assert cli.main(["compose", "--profile", PROFILE, "--json"], provider=provider) == 2
    doc = json.loads(capsys.readouterr().out)
    assert doc["refusal"] == "scope" and "no-runtime-capture" in doc["detail"]


def fake_docker(bin_dir: Path, runtimes: str = '{"nvidia":{},"runc":{}}') -> None:
    script = bin_dir / "docker"
    script.write_text(f'''#!/bin/sh
case "$1" in
  info) echo '{runtimes}'; exit 0;;
  compose) if [ "$2" = version ]; then exit 0; fi; touch "$(dirname "$0")/compose-ran"; exit 0;;
esac
exit 0
''', encoding="utf-8")
    script.chmod(0o755)


def test_docker_no_start_writes_a_valid_bundle(env, capsys):
    fake_docker(env["bin"])
    run = env["tmp"] / "run"
    assert run_cli(env, "up", REPO, "--gpus", "2x3090", "--dir", str(run), "--no-start", "--ctx-size", "2048",
                   "--cache-type-k", "q8_0", "--cache-type-v", "q8_0") == 0
    out = capsys.readouterr().out
    assert "-c 2048: as asked, every layer on the GPUs" in out
    compose = (run / "compose.yml").read_text(encoding="utf-8")
    validate_compose(compose)   # compose-spec
    service = next(iter(yaml.safe_load(compose)["services"].values()))
    words = service["command"]
    assert words[words.index("--cache-type-k") + 1] == "q8_0" and words[words.index("--ctx-size") + 1] == "2048"
    assert service["image"] == lc.DEFAULT_IMAGE
    assert service["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"] == ["0", "1"]
    assert (run / "serve.sh").stat().st_mode & stat.S_IXUSR
    assert not (env["bin"] / "compose-ran").exists()
    assert not (env["tmp"] / ".pull-captures").exists()        # the gate's GGUF refusal is no failure here


def test_docker_preflight_refuses_before_writing(env, capsys):
    fake_docker(env["bin"], runtimes='{"runc":{}}')
    run = env["tmp"] / "run"
    assert run_cli(env, "up", REPO, "--gpus", "1x3090", "--dir", str(run)) == 69
    assert "nvidia-ctk runtime configure" in capsys.readouterr().err
    assert not run.exists()


def test_native_without_any_llama_server_exits_69(env, monkeypatch, capsys):
    real = launchers.find_llama_server

    def no_server(binary: str | None, **_kw: Any) -> Any:
        return real(binary, which=lambda _n: None, has_module=lambda _m: False)
    monkeypatch.setattr(launchers.native, "find_llama_server", no_server)
    run = env["tmp"] / "run"
    assert run_cli(env, "up", REPO, "--gpus", "1x3090", "--dir", str(run), "--launcher", "native") == 69
    assert "--llama-server-bin PATH" in capsys.readouterr().err and not run.exists()


def test_a_rig_too_small_for_every_layer_gets_layers_on_the_host(env, capsys):
    run = env["tmp"] / "run"
    assert run_cli(env, "up", REPO, "--gpus", "1x300MiB", "--dir", str(run), "--no-start") == 0
    out = capsys.readouterr().out
    assert f"-c {lc.FALLBACK_CTX} with -ngl 0 of 2 (the rest on the host)" in out
    words = next(iter(yaml.safe_load((run / "compose.yml").read_text(encoding="utf-8"))["services"].values()))[
        "command"]
    assert words[words.index("--n-gpu-layers") + 1] == "0"


def test_pull_keeps_the_seed_refusal_for_llamacpp_profiles(env, capsys):
    assert run_cli(env, "pull", REPO, "--profile-like", PROFILE, "--gpus", "1x3090", "--json",
                   "--out", str(env["tmp"] / "out")) == 2
    assert json.loads(capsys.readouterr().out)["exit_code"] == 2
    assert not (env["tmp"] / "out" / "compose.yml").exists()


# --------------------------------------------------------------------------------------------
# pure pieces
# --------------------------------------------------------------------------------------------

def test_python_server_translation():
    words = lc.server_args("/m.gguf", LlamaCppArgs(ctx_size=4096, cache_type_k="q8_0", tensor_split=(3, 1)),
                           alias="a", host="127.0.0.1", port=9)
    argv, dropped = lc.python_server_argv([*words, "--jinja", "--reasoning", "off"])
    assert argv[argv.index("--n_ctx") + 1] == "4096" and argv[argv.index("--type_k") + 1] == "8"
    assert argv[argv.index("--n_gpu_layers") + 1] == "-1" and argv[argv.index("--model_alias") + 1] == "a"
    assert argv[argv.index("--tensor_split") + 1:argv.index("--tensor_split") + 3] == ["3", "1"]
    assert dropped == ["--jinja", "--reasoning off"]
    # concurrent streams queue instead of cutting one another short (llama-cpp-python defaults to True)
    assert argv[argv.index("--interrupt_requests") + 1] == "False"


def test_a_repo_of_several_quants_serves_the_largest_that_fits_and_split_files_whole(env, tmp_path, capsys):
    from tests.gguf_fixtures import Q, Spec, write

    shards = write(tmp_path / "q8", "Tiny-Q8_0", Spec(weight_type=Q.Q8_0, split_max_tensors=6))
    (small,) = write(tmp_path / "q4", "Tiny-Q4_0", Spec(weight_type=Q.Q4_0))
    assert len(shards) > 1
    env["hub"].add_repo("org/Tiny-GGUF", {**{p.name: p.read_bytes() for p in shards}, small.name: small.read_bytes()})
    run = env["tmp"] / "run"
    assert run_cli(env, "up", "org/Tiny-GGUF", "--gpus", "1x3090", "--dir", str(run), "--no-start") == 0
    assert "org/Tiny-GGUF Q8_0" in capsys.readouterr().out
    state = json.loads((run / "state.json").read_text(encoding="utf-8"))
    snapshot = env["tmp"] / "hf" / "hub" / "models--org--Tiny-GGUF" / "snapshots" / state["commit"]
    assert sorted(p.name for p in snapshot.iterdir()) == sorted(p.name for p in shards)   # every shard, nothing else
    words = next(iter(yaml.safe_load((run / "compose.yml").read_text(encoding="utf-8"))["services"].values()))[
        "command"]
    assert words[words.index("-m") + 1].endswith("/" + shards[0].name)
    run2 = env["tmp"] / "run2"
    assert run_cli(env, "up", "org/Tiny-GGUF", "--quant", "q4_0", "--gpus", "1x3090", "--dir", str(run2),
                   "--no-start", "--json") == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["exit_code"] == 0 and doc["state"]["quant"] == "Q4_0" and doc["state"]["engine"] == "llama.cpp"
    assert run_cli(env, "up", "org/Tiny-GGUF", "--quant", "Q2_K", "--gpus", "1x3090", "--dir", str(run2),
                   "--no-start", "--force") == 64
    assert "available: Q4_0, Q8_0" in capsys.readouterr().err
