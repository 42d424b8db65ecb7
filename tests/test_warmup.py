"""The warm-up window (issue 28 item 2): once /v1/models answers, `up` gives the server up to
--warmup-s (default 180 s, upstream's allowance before verify-full) to answer a small completion
before verify --full runs. Real parts: llama.cpp's real server behind `up` (tests/test_up_llamacpp.py's
fixtures); a cold server is that real server behind a gate that answers 503 until the Provider's clock
has moved past a point. The clock is the Provider's: nothing here really waits the window."""

from __future__ import annotations

import json
from typing import Any

import pytest

from club3090.edges import boot
from club3090.edges.openai_client import HttpResponse, urllib_http
from club3090.edges.provider import LiveProvider
from tests import test_up as up_tests
from tests import test_up_llamacpp as llama
from tests.fakeopenai import fake_openai  # noqa: F401 - the fixture
from tests.llama_server import free_port

env, gguf, stopper = llama.env, llama.gguf, up_tests.stopper

LOADING = b'{"error": {"message": "Loading model", "code": 503}}'


class Clock:
    """The Provider's monotonic clock and sleep: sleeping moves the clock, nothing waits."""

    def __init__(self) -> None:
        self.t = 1000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.t += seconds


class Cold:
    """The real server's HTTP, except that a chat completion answers 503 until ``warm_at``."""

    def __init__(self, clock: Clock, warm_at: float) -> None:
        self.clock, self.warm_at, self.cold_answers, self.served = clock, warm_at, 0, 0

    def __call__(self, method: str, url: str, body: Any, timeout: float, **kw: Any) -> HttpResponse:
        if url.endswith("/chat/completions") and self.clock() < self.warm_at:
            self.cold_answers += 1
            return HttpResponse(503, LOADING)
        self.served += url.endswith("/chat/completions")
        return urllib_http(method, url, body, timeout, **kw)


def _up(env: dict[str, Any], stopper: list, clock: Clock, cold: Cold, *flags: str) -> tuple[int, dict[str, Any]]:
    def provider(settings: Any) -> LiveProvider:
        return LiveProvider(settings, free_disk=lambda _p: 10**15, load=lambda: env["catalog"], http_client=cold,
                            ticker=clock, sleeper=clock.sleep)
    run = env["tmp"] / "run"
    stopper.append(run)
    from club3090 import cli

    code = cli.main(["up", llama.REPO, "--gpus", "1x3090", "--dir", str(run), "--launcher", "native",
                     "--port", str(free_port()), *flags], provider=provider)
    return code, json.loads((run / "state.json").read_text(encoding="utf-8"))


def test_a_server_that_warms_up_within_the_window_is_verified_and_serving(env, stopper, capsys):
    clock = Clock()
    cold = Cold(clock, warm_at=clock.t + 40)          # 40 s of 503s after /v1/models answers
    code, state = _up(env, stopper, clock, cold)
    out = capsys.readouterr().out
    assert code == 0, out
    assert cold.cold_answers >= 2
    assert "[up] warmed up: the first completion succeeded after " in out
    assert out.rstrip().splitlines()[-1] == "[up] SERVING: verified (verify --full)"
    assert state["verified"] is True
    assert sum(clock.slept) >= 40


def test_a_server_that_never_warms_up_names_the_window_and_is_not_verified(env, stopper, capsys):
    clock = Clock()
    cold = Cold(clock, warm_at=float("inf"))
    code, state = _up(env, stopper, clock, cold, "--warmup-s", "30", "--json")
    out = capsys.readouterr().out
    doc = json.loads(out)
    assert code != 0
    assert doc["outcome"] == "failed" and state["failure"] == "not-warm" and state["verified"] is False
    assert state["state"] == "running"               # the server keeps running, unverified
    assert sum(clock.slept) <= 30
    assert cold.served == 0                           # neither the smoke nor verify --full ran


def test_the_never_warm_lines_name_the_window_and_the_flag(env, stopper, capsys):
    clock = Clock()
    code, _state = _up(env, stopper, clock, Cold(clock, warm_at=float("inf")))
    out = capsys.readouterr().out
    assert code != 0
    assert "[up] not warm: no completion succeeded within the 180 s warm-up window" in out
    assert "HTTP 503" in out and "--warmup-s SECONDS" in out
    assert "[up] verify " not in out                  # verify --full did not run
    assert out.rstrip().splitlines()[-1].startswith("[up] serving, not verified: still failing at the end of the "
                                                    "warm-up window")


def test_warm_up_retries_until_the_window_then_reports_the_last_error(fake_openai):  # noqa: F811
    clock = Clock()
    fake_openai.mode["status"] = 500
    endpoint = fake_openai.url.removesuffix("/v1")
    warm = boot.warm_up(endpoint, "fake-model", http=urllib_http, clock=clock, sleep=clock.sleep, window_s=20,
                        interval_s=5)
    assert not warm.ok and warm.window_s == 20 and warm.attempts == 5   # at 0, 5, 10, 15 and 20 s
    assert warm.last_error is not None and "HTTP 500" in warm.last_error
    fake_openai.mode["status"] = 0
    warm = boot.warm_up(endpoint, "fake-model", http=urllib_http, clock=clock, sleep=clock.sleep, window_s=20)
    assert warm.ok and warm.attempts == 1 and warm.seconds == 0


def test_warmup_s_rejects_a_negative_window(env, capsys):
    with pytest.raises(SystemExit) as exited:
        llama.run_cli(env, "up", llama.REPO, "--dir", str(env["tmp"] / "x"), "--warmup-s", "-1")
    assert exited.value.code == 64
    assert "--warmup-s" in capsys.readouterr().err


def test_warm_up_stops_when_the_server_exits(fake_openai):  # noqa: F811
    clock = Clock()
    fake_openai.mode["status"] = 503
    checks = iter([True, False])
    warm = boot.warm_up(fake_openai.url.removesuffix("/v1"), "fake-model", http=urllib_http, clock=clock,
                        sleep=clock.sleep, alive=lambda: next(checks))
    assert not warm.ok and warm.exited and warm.attempts == 2 and sum(clock.slept) == 5
    assert warm.last_error is not None and warm.last_error.endswith("then the server exited")


def test_a_server_that_exits_during_the_warm_up_is_reported_at_once(env, stopper, capsys):
    from club3090.edges import launchers

    clock = Clock()
    run = env["tmp"] / "run"

    class Dies(Cold):
        def __call__(self, method: str, url: str, body: Any, timeout: float, **kw: Any) -> HttpResponse:
            if url.endswith("/chat/completions") and not self.cold_answers:
                launchers.stop_native(run)           # the server dies right after it listed its model
            return super().__call__(method, url, body, timeout, **kw)
    code, state = _up(env, stopper, clock, Dies(clock, warm_at=float("inf")))
    out = capsys.readouterr().out
    assert code != 0
    assert state["failure"] == "process-exited" and state["state"] == "exited" and state["verified"] is False
    assert "[up] not warm: the server exited during the warm-up" in out
    assert sum(clock.slept) < 180 and "serving" not in out.rstrip().splitlines()[-1].lower()
