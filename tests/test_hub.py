"""hub.py against the loopback fake Hub: error translation, retries, ranged header reads."""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
from collections import Counter
from typing import Any

import pytest

from club3090.cli.model_json import spec_to_json
from club3090.edges import hub as H
from club3090.edges.resolve import resolve
from club3090.errors import (
    EntryNotFound,
    GatedRepo,
    HubUnreachable,
    InputError,
    RepoNotFound,
    RevisionNotFound,
)
from club3090.model.spec import ModelSpec, RepoFile
from tests.fakehub import FakeFile, FakeHub, header_sum, safetensors_file


@pytest.fixture(autouse=True)
def _fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(H, "DEFAULT_BACKOFF_S", 0.0)
    monkeypatch.setattr(H, "DEFAULT_TIMEOUT_S", 2.0)


def _client(hub: FakeHub, token: str | None = None, **kw: Any) -> H.HubClient:
    return H.HubClient(hub.settings(token=token), **kw)


TABLE = {f"model.layers.{i}.mlp.up_proj.weight": ("BF16", [1024, 1024]) for i in range(8)}


def _small_repo(hub: FakeHub, repo_id: str = "acme/small", **kw: Any) -> None:
    hub.add_fixture("Qwen--Qwen3-0.6B", repo_id=repo_id, tensors=TABLE, shards=2, **kw)


def _derive(hub: FakeHub, repo_id: str = "acme/small", **kw: Any) -> ModelSpec:
    spec = resolve(repo_id, hub.settings(), hub=_client(hub, **kw))
    assert isinstance(spec, ModelSpec), spec
    assert spec.weights_bytes == header_sum(TABLE)
    return spec


# ---------------------------------------------------------------------------------------------
# translation


def test_translate_through_the_real_client(fake_hub: FakeHub) -> None:
    _small_repo(fake_hub)
    _small_repo(fake_hub, "acme/gated", gated=True)
    anon = _client(fake_hub)
    with pytest.raises(RepoNotFound) as info:
        anon.repo_info("acme/missing", None)
    assert not isinstance(info.value, GatedRepo)
    with pytest.raises(RevisionNotFound):
        anon.repo_info("acme/small", "nope")
    with pytest.raises(EntryNotFound):
        anon.fetch_json("acme/small", "absent.json", None)
    with pytest.raises(GatedRepo):
        anon.fetch_json("acme/gated", "config.json", None)
    with pytest.raises(RepoNotFound) as info:  # a token that was not granted: not found, not gated
        _client(fake_hub, token="hf_nope").fetch_json("acme/gated", "config.json", None)
    assert not isinstance(info.value, GatedRepo)


def test_translate_ignores_foreign_exceptions() -> None:
    assert H.translate(ValueError("x"), "a/b", False) is None
    assert isinstance(H.translate(ConnectionRefusedError(), "a/b", False), HubUnreachable)
    assert isinstance(H.translate(TimeoutError(), "a/b", False), HubUnreachable)


def test_missing_repo_without_error_code(fake_hub: FakeHub) -> None:
    fake_hub.quirks.no_error_code = True
    with pytest.raises(RepoNotFound):
        _client(fake_hub).repo_info("acme/missing", None)


# ---------------------------------------------------------------------------------------------
# header reads


def test_long_header_takes_a_second_range(fake_hub: FakeHub) -> None:
    table = {f"model.layers.{i}.block.{j}.weight": ("BF16", [8, 8]) for i in range(60) for j in range(40)}
    fake_hub.add_fixture("Qwen--Qwen3-0.6B", repo_id="acme/long", tensors=table)
    spec = resolve("acme/long", fake_hub.settings(), hub=_client(fake_hub))
    assert isinstance(spec, ModelSpec) and spec.weights_bytes == header_sum(table)
    ranges = [r.headers["range"] for r in fake_hub.requests(path_contains="/cdn/")]
    n = struct.unpack("<Q", fake_hub.repos["acme/long"].files["model.safetensors"].prefix[:8])[0]
    assert n > H.FIRST_READ_BYTES
    assert ranges == [f"bytes=0-{H.FIRST_READ_BYTES - 1}", f"bytes={H.FIRST_READ_BYTES}-{n + 7}"]  # the tail only


def test_server_ignoring_range_costs_only_a_header(fake_hub: FakeHub) -> None:
    fake_hub.quirks.ignore_range = True
    _small_repo(fake_hub)
    _derive(fake_hub)
    # the client stops reading after the header; only socket buffers beyond it may have left
    assert fake_hub.bytes_sent(".safetensors") + fake_hub.bytes_sent("/cdn/") < 16 * 2**20


def test_without_lfs_redirect_and_with_quirky_headers(fake_hub: FakeHub) -> None:
    fake_hub.quirks.lfs_redirect = False
    fake_hub.quirks.no_commit = True
    fake_hub.quirks.no_etag = True
    _small_repo(fake_hub)
    _derive(fake_hub)
    assert not fake_hub.requests(path_contains="/cdn/")


def test_oversized_header_is_rejected_naming_the_file(fake_hub: FakeHub) -> None:
    huge = FakeFile("model.safetensors", struct.pack("<Q", 200_000_000) + b"{", size=10 * 2**30, lfs=True)
    fake_hub.add_fixture("Qwen--Qwen3-0.6B", repo_id="acme/huge", tensors=TABLE,
                         extra_files={"model.safetensors": huge})
    with pytest.raises(InputError) as info:
        resolve("acme/huge", fake_hub.settings(), hub=_client(fake_hub))
    assert info.value.file == "acme/huge/model.safetensors"
    assert fake_hub.bytes_sent() < 200_000


def test_malformed_header_is_rejected_naming_the_file(fake_hub: FakeHub) -> None:
    raw = b'{"w": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 99]}}'
    bad = FakeFile("model.safetensors", struct.pack("<Q", len(raw)) + raw, size=4096, lfs=True)
    fake_hub.add_fixture("Qwen--Qwen3-0.6B", repo_id="acme/bad", tensors=TABLE,
                         extra_files={"model.safetensors": bad})
    with pytest.raises(InputError) as info:
        resolve("acme/bad", fake_hub.settings(), hub=_client(fake_hub))
    assert info.value.file == "acme/bad/model.safetensors"


def test_malformed_index_is_rejected_naming_the_file(fake_hub: FakeHub) -> None:
    _small_repo(fake_hub, extra_files={"model.safetensors.index.json": b'{"weight_map": [1, 2]}'})
    with pytest.raises(InputError) as info:
        resolve("acme/small", fake_hub.settings(), hub=_client(fake_hub))
    assert info.value.file == "acme/small/model.safetensors.index.json"


def test_oversized_json_is_capped(fake_hub: FakeHub) -> None:
    _small_repo(fake_hub, extra_files={"config.json": b'{"a": "' + b"x" * 3000 + b'"}'})
    size = len(b'{"a": "' + b"x" * 3000 + b'"}')
    assert _client(fake_hub).fetch_json("acme/small", "config.json", None, limit=size) == {"a": "x" * 3000}
    with pytest.raises(InputError) as info:
        _client(fake_hub).fetch_json("acme/small", "config.json", None, limit=size - 1)
    assert info.value.file == "acme/small/config.json"


# ---------------------------------------------------------------------------------------------
# faults: bounded retries, then a clear HubUnreachable


@pytest.mark.parametrize("kind,match", [
    ("500", "/api/models/"), ("503", "/resolve/"), ("drop", "/api/models/"), ("drop", "/cdn/"),
    ("truncate", "/cdn/"), ("short", "/cdn/"), ("truncate", "config.json"),
])
def test_transient_faults_are_retried(fake_hub: FakeHub, kind: str, match: str) -> None:
    _small_repo(fake_hub)
    fault = fake_hub.fault(kind, match, times=2)
    _derive(fake_hub)
    assert fault.times == 0  # both faults were hit and survived


def test_slow_answers_time_out_and_are_retried(fake_hub: FakeHub) -> None:
    _small_repo(fake_hub)
    fault = fake_hub.fault("slow", "/cdn/", times=1, delay=1.0)
    _derive(fake_hub, timeout=0.3)
    assert fault.times == 0


@pytest.mark.parametrize("kind,match", [("500", "/api/models/"), ("drop", "/cdn/"), ("truncate", "/cdn/"),
                                        ("short", "/cdn/")])
def test_persistent_faults_become_hub_unreachable(fake_hub: FakeHub, kind: str, match: str) -> None:
    _small_repo(fake_hub)
    fake_hub.fault(kind, match, times=None)
    sleeps: list[float] = []
    with pytest.raises(HubUnreachable) as info:
        resolve("acme/small", fake_hub.settings(), hub=_client(fake_hub, sleep=sleeps.append, backoff=1.0))
    assert info.value.repo_id == "acme/small"
    assert len(fake_hub.requests(path_contains=match)) >= H.DEFAULT_RETRIES + 1 == 4
    # every failing call backed off exactly DEFAULT_RETRIES times (1x, 2x, 4x) before giving up
    backoffs = Counter(sleeps)
    schedule = [1.0 * 2 ** i for i in range(H.DEFAULT_RETRIES)]
    assert set(backoffs) == set(schedule) and len({backoffs[b] for b in schedule}) == 1


def test_persistent_slowness_becomes_hub_unreachable(fake_hub: FakeHub) -> None:
    _small_repo(fake_hub)
    fake_hub.fault("slow", "/api/models/", times=None, delay=0.6)
    with pytest.raises(HubUnreachable):
        resolve("acme/small", fake_hub.settings(), hub=_client(fake_hub, timeout=0.2, retries=1))


def test_connection_refused_is_unreachable(fake_hub: FakeHub) -> None:
    from club3090.settings import Settings

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    settings = Settings(hf_home=fake_hub.settings().hf_home, endpoint=f"http://127.0.0.1:{port}")
    with pytest.raises(HubUnreachable):
        resolve("acme/small", settings)


def test_token_is_sent_to_the_api_not_to_the_cdn_and_never_shown(fake_hub: FakeHub) -> None:
    token = "hf_PlantedSecretToken0123456789"
    _small_repo(fake_hub, gated=True)
    fake_hub.accept_token(token)
    client = _client(fake_hub, token=token)
    assert token not in repr(client)
    spec = resolve("acme/small", fake_hub.settings(token=token), hub=client)
    assert isinstance(spec, ModelSpec)
    api = fake_hub.requests(path_contains="/api/models/")
    assert api and all(r.headers.get("authorization") == f"Bearer {token}" for r in api)
    assert all("authorization" not in r.headers for r in fake_hub.requests(path_contains="/cdn/"))
    assert token not in repr(spec) and token not in json.dumps(spec_to_json(spec))
    fake_hub.fault("500", "/api/models/", times=None)
    with pytest.raises(HubUnreachable) as info:
        resolve("acme/small", fake_hub.settings(token=token), hub=client)
    assert token not in str(info.value)


def test_read_all_cancels_on_first_error() -> None:
    calls: list[str] = []

    def read(f: Any) -> Any:
        calls.append(f.name)
        raise InputError(f.name, "boom")

    from club3090.model.spec import RepoFile

    with pytest.raises(InputError):
        H.read_all(read, [RepoFile(f"f{i}", 1) for i in range(3)], None, max_workers=1)
    assert len(calls) >= 1


def test_safetensors_file_helper_matches_header_sum() -> None:
    f = safetensors_file("m.safetensors", TABLE)
    assert f.size == len(f.prefix) + header_sum(TABLE)


# ---------------------------------------------------------------------------------------------
# offline-ness comes from Settings, never from huggingface_hub's import-time constant


def test_online_derive_works_when_the_client_was_imported_offline(fake_hub: FakeHub,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # what `import huggingface_hub` under HF_HUB_OFFLINE=1 leaves behind, for the whole process
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    _small_repo(fake_hub)
    _derive(fake_hub)  # sharded: parallel header reads share the lift
    assert fake_hub.requests()
    assert constants.HF_HUB_OFFLINE is True  # restored for code outside our calls
    with pytest.raises(RepoNotFound):  # restored after a failing call too
        _client(fake_hub).repo_info("acme/missing", None)
    assert constants.HF_HUB_OFFLINE is True


def test_offline_settings_make_no_request_whatever_the_constant(fake_hub: FakeHub,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import constants

    _small_repo(fake_hub)
    for constant in (False, True):
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", constant)
        client = H.HubClient(fake_hub.settings(offline=True))
        with pytest.raises(HubUnreachable):
            client.repo_info("acme/small", None)
        with pytest.raises(HubUnreachable):
            client.fetch_json("acme/small", "config.json", None)
        with pytest.raises(HubUnreachable):
            client.read_headers("acme/small", [RepoFile(name="model.safetensors", size_bytes=1024)], None)
    assert fake_hub.requests() == []


_SUBPROCESS = """
import json, sys
import huggingface_hub  # imported with HF_HUB_OFFLINE=1 in the environment
from huggingface_hub import constants
assert constants.HF_HUB_OFFLINE is True
from pathlib import Path
from club3090.cli.model_json import spec_to_json
from club3090.edges.resolve import resolve
from club3090.settings import Settings
from club3090.model.spec import ModelSpec
settings = Settings(hf_home=Path(sys.argv[2]), endpoint=sys.argv[1], offline=False)
spec = resolve("acme/small", settings)
print(json.dumps({"ok": isinstance(spec, ModelSpec), "weights_bytes": getattr(spec, "weights_bytes", None)}))
"""


def test_import_order_does_not_matter_in_a_fresh_process(fake_hub: FakeHub, tmp_path) -> None:
    _small_repo(fake_hub)
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", _SUBPROCESS, fake_hub.url, str(tmp_path / "hf")],
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"ok": True, "weights_bytes": header_sum(TABLE)}


@pytest.mark.parametrize("env, offline", [
    ({}, False), ({"HF_HUB_OFFLINE": "1"}, True), ({"HF_HUB_OFFLINE": "0"}, False),
    ({"TRANSFORMERS_OFFLINE": "1"}, True), ({"HF_HUB_OFFLINE": "0", "TRANSFORMERS_OFFLINE": "1"}, False),
    ({"HF_HUB_OFFLINE": "yes"}, True),
])
def test_settings_offline_follows_the_client_rule(env, offline, tmp_path) -> None:
    # the same rule huggingface_hub applies at import, now evaluated per Settings
    from club3090.settings import Settings

    assert Settings.from_env({"HF_HOME": str(tmp_path), **env}).offline is offline
