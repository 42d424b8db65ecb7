"""club3090 verify-stress: against the real llama.cpp server (positive paths) and the loopback fake
(negative paths)."""

from __future__ import annotations

import json

from club3090 import cli
from club3090.edges.openai_client import OpenAIClient
from club3090.validate.stress import stress
from tests.fakeopenai import closed_port_url
from tests.llama_server import free_port, start_server, write_model


def _run(url, capsys, *extra):
    code = cli.main(["verify-stress", "--url", url, "--json", *extra])
    data = json.loads(capsys.readouterr().out)
    return code, {c["name"]: c for c in data["checks"]}, data


def test_real_server_green(llama_server, capsys):
    n_ctx = llama_server.n_ctx
    code, checks, data = _run(llama_server.url, capsys, "--streams", "3", "--context", str(n_ctx), "--rounds", "2")
    assert code == 0, checks
    assert data["tool"] == "verify-stress" and list(checks) == ["models", "concurrent-streams", "long-prompt",
                                                                "tool-round-trip-1", "tool-round-trip-2"]
    assert checks["concurrent-streams"]["detail"].startswith("3/3 concurrent streams complete")
    prompt = int(checks["long-prompt"]["detail"].split("-token")[0])
    assert 0.8 * (0.9 * n_ctx - 32) <= prompt <= n_ctx
    assert "get_weather" in checks["tool-round-trip-1"]["detail"]


def test_real_server_that_cuts_streams_fails(tmp_path, capsys):
    """llama-cpp-python's default (interrupt_requests) ends a running stream when another request
    arrives: concurrent streams must catch it."""
    server = start_server(write_model(tmp_path / "m.gguf"), free_port(), interrupt_requests=True)
    try:
        code, checks, _ = _run(server.url, capsys, "--streams", "3", "--rounds", "0")
    finally:
        server.stop()
    assert code == 1 and checks["concurrent-streams"]["status"] == "fail"
    assert checks["long-prompt"]["status"] == "skip"          # no --context, no max_model_len


def test_context_from_models_listing(fake_openai, capsys):
    fake_openai.mode["max_model_len"] = 6000
    code, checks, _ = _run(fake_openai.url, capsys, "--rounds", "1")
    assert code == 0 and "of 6000" in checks["long-prompt"]["detail"]
    probes = [p for p in fake_openai.posts() if p["max_tokens"] == 32]
    assert len(probes) == 2 and len(probes[1]["messages"][0]["content"]) > 10 * len(probes[0]["messages"][0]["content"])


def test_broken_streams_fail(fake_openai, capsys):
    fake_openai.mode["broken_stream"] = True
    code, checks, _ = _run(fake_openai.url, capsys, "--rounds", "0")
    assert code == 1 and "did not end with [DONE]" in checks["concurrent-streams"]["detail"]


def test_no_tool_call_fails_the_round_trip(fake_openai, capsys):
    fake_openai.mode["no_tool_call"] = True
    code, checks, _ = _run(fake_openai.url, capsys, "--rounds", "1")
    assert code == 1 and checks["tool-round-trip-1"]["status"] == "fail"
    named = [p for p in fake_openai.posts() if isinstance(p.get("tool_choice"), dict)]
    assert named and named[0]["tool_choice"]["function"]["name"] == "get_weather"


def test_round_trip_sends_the_tool_result_back(fake_openai, capsys):
    code, _checks, _ = _run(fake_openai.url, capsys, "--rounds", "1", "--streams", "1")
    assert code == 0
    last = fake_openai.posts()[-1]
    assert last["tool_choice"] == "none" and [m["role"] for m in last["messages"]] == ["user", "assistant", "tool"]
    assert json.loads(last["messages"][2]["content"])["city"] == "Paris"


def test_every_request_names_the_served_model(fake_openai, capsys):
    """The checks ask for the model /v1/models lists, never for a check's name (vLLM answers 404 to that)."""
    fake_openai.mode["max_model_len"] = 6000
    code, _checks, _ = _run(fake_openai.url, capsys, "--rounds", "2", "--streams", "2")
    assert code == 0
    assert {p["model"] for p in fake_openai.posts()} == {"fake-model"}


def test_deadline_bounds_the_run(fake_openai):
    ticks = [0.0]

    def clock():
        ticks[0] += 1.0
        return ticks[0]
    report = stress(OpenAIClient(fake_openai.url, clock=clock, deadline_s=4), rounds=5)
    assert report.deadline_hit and report.exit_code == 1
    assert sum(c.detail.startswith("not run: run deadline reached") for c in report.checks) >= 4


def test_unreachable(capsys):
    code, _checks, data = _run(closed_port_url(), capsys, "--timeout", "2")
    assert code == 2 and data["unreachable"] is True
