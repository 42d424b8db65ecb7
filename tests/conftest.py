"""Test isolation: no real HF cache, token, network or GPU leaks into any test."""

from __future__ import annotations

import ipaddress
import socket

import pytest


def _is_loopback(host: object) -> bool:
    if not isinstance(host, str):
        return True  # AF_UNIX paths and the like
    if host in {"localhost", ""}:
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False


@pytest.fixture(autouse=True)
def _hermetic(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    home = tmp_path_factory.mktemp("hf_home")
    monkeypatch.setenv("HF_HOME", str(home))
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_ENDPOINT",
                 "HF_TOKEN_PATH", "MODEL_DIR", "XDG_CACHE_HOME", "XDG_STATE_HOME", "CLUB3090_DEBUG"):
        monkeypatch.delenv(name, raising=False)
    # the local overlay (promoted measurements, receipts) of each test is its own
    monkeypatch.setenv("CLUB3090_STATE_DIR", str(home / "club3090-state"))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("CLUB3090_NO_GPU_DETECT", "1")
    # capture bundles: the seed's ./.pull-captures under each test's working folder, never ~/.local/state
    monkeypatch.setenv("CLUB3090_CAPTURES", ".pull-captures")
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    # huggingface_hub reads HF_HUB_OFFLINE once, at its first import: a test that set the variable
    # then would leave the process offline for helpers that call the client directly (our hub.py
    # follows Settings.offline and needs no such reset).
    from huggingface_hub import constants as hf_constants

    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)
    # the [C2a] disk gate reads statvfs through the provider: a test that does not inject its own
    # free-space figure must not pass or fail with whatever this machine's disk holds today
    from club3090.edges import disk

    monkeypatch.setattr(disk, "free_bytes_at", lambda _path, **_kw: 10**15)

    real_connect = socket.socket.connect

    def guarded_connect(self: socket.socket, address: object) -> object:
        host = address[0] if isinstance(address, tuple) else address
        if not _is_loopback(host):
            raise RuntimeError(f"test tried to reach a non-loopback address: {address!r}")
        return real_connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", guarded_connect)

    # [E] boot: tests inject a fake docker runner; the real one must never run here
    import club3090.edges.boot

    def no_docker(argv: object, timeout: float) -> object:
        raise AssertionError(f"a test tried to run real docker: {argv!r}")

    monkeypatch.setattr(club3090.edges.boot, "subprocess_runner", no_docker)


# the loopback fakes: the Hub (`fake_hub`), an OpenAI-compatible server (`fake_openai`); a real llama.cpp
# server on a tiny generated model (`llama_server`, session-scoped)
pytest_plugins = ["tests.fakehub", "tests.fakeopenai", "tests.llama_server"]
