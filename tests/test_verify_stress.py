"""club3090 verify-stress: against the real llama.cpp server (positive paths) and the loopback fake
(negative paths)."""

from __future__ import annotations

import json

from club3090 import cli
from club3090.cli.exit_codes import exit_code
from club3090.edges.openai_client import OpenAIClient
from club3090.validate import ladder
from club3090.validate.stress import stress
from tests.fakeopenai import closed_port_url
from tests.llama_server import free_port, start_server, write_model


def _run(url, capsys, *extra):
    code = cli.main(["verify-stress", "--url", url, "--json", *extra])
    data = json.loads(capsys.readouterr().out)
    return code, {c["name"]: c for c in data["checks"]}, data


def test_real_server_green(llama_server, capsys):
    n_ctx = llama_server.n_ctx
    code, checks, data = _run(llama_server.url, capsys, "--streams", "3", "--context", str(n_ctx), "--rounds", "2",
                              "--no-ladder", "--no-probes")
    assert code == 0, checks
    assert data["tool"] == "verify-stress" and list(checks) == ["models", "concurrent-streams", "long-prompt",
                                                                "tool-round-trip-1", "tool-round-trip-2",
                                                                "tool-prefill"]
    assert checks["tool-prefill"]["status"] == "pass", checks["tool-prefill"]
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
    code, _checks, _ = _run(fake_openai.url, capsys, "--rounds", "1", "--streams", "1", "--no-probes")
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
    assert report.deadline_hit and exit_code(report.outcome) == 1
    assert sum(c.detail.startswith("not run: run deadline reached") for c in report.checks) >= 4


def test_unreachable(capsys):
    code, _checks, data = _run(closed_port_url(), capsys, "--timeout", "2")
    assert code == 2 and data["unreachable"] is True


def test_real_server_runs_the_needle_ladder_rung_by_rung(llama_server, capsys):
    """The tiny random GGUF cannot find a needle: every rung runs against the real server and is
    reported on its own, and the summary names the largest passing length."""
    n_ctx = llama_server.n_ctx
    code, checks, _ = _run(llama_server.url, capsys, "--streams", "1", "--rounds", "0", "--context", str(n_ctx),
                           "--tool-prefill-tokens", "600")
    rungs = [name for name in checks if name.startswith("needle-") and name != "needle-ladder"]
    assert rungs == [f"needle-{n}" for n in ladder.rungs(n_ctx)]
    for name in rungs:
        assert checks[name]["status"] in ("pass", "fail")
        assert "-token haystack" in checks[name]["detail"]
    assert checks["needle-ladder"]["detail"].startswith("largest passing length")
    assert checks["tool-prefill"]["status"] == "pass"
    assert {"agent", "coding", "reasoning"} <= set(checks)
    assert code == (0 if all(checks[n]["status"] == "pass" for n in checks if checks[n]["status"] != "skip") else 1)


def test_needle_ladder_reports_the_largest_passing_rung(fake_openai, capsys):
    fake_openai.mode["max_model_len"] = 40000
    fake_openai.mode["needle_limit"] = 20000
    code, checks, _ = _run(fake_openai.url, capsys, "--rounds", "0", "--streams", "1")
    assert code == 1
    assert [n for n in checks if n.startswith("needle-")][:-1] == ["needle-1024", "needle-4096", "needle-16384",
                                                                  "needle-32768", "needle-35952"]
    assert [checks[f"needle-{n}"]["status"] for n in (1024, 4096, 16384, 32768, 35952)] == \
        ["pass", "pass", "pass", "fail", "fail"]
    assert checks["needle-ladder"]["status"] == "fail"
    assert checks["needle-ladder"]["detail"].startswith("largest passing length 16384 tokens; 3/5 rungs green")
    needles = [p for p in fake_openai.posts() if "secret passphrase" in str(p["messages"][-1]["content"])]
    sizes = [len(p["messages"][-1]["content"]) // 4 for p in needles]
    assert all(0.9 * want <= got <= want for got, want in zip(sizes, [1024, 4096, 16384, 32768, 35952], strict=True))


def test_all_green_on_a_server_that_finds_every_needle(fake_openai, capsys):
    fake_openai.mode["max_model_len"] = 8192
    code, checks, _ = _run(fake_openai.url, capsys, "--rounds", "1", "--streams", "2")
    assert code == 0, {n: c["detail"] for n, c in checks.items() if c["status"] != "pass"}
    assert checks["needle-ladder"]["detail"].startswith("largest passing length 7324 tokens; 3/3 rungs green")
    for name in ("tool-prefill", "agent", "coding", "reasoning"):
        assert checks[name]["status"] == "pass", checks[name]


def test_tool_prefill_sends_a_25k_token_tool_result(fake_openai, capsys):
    fake_openai.mode["max_model_len"] = 65536
    code, checks, _ = _run(fake_openai.url, capsys, "--rounds", "0", "--streams", "1", "--no-ladder", "--no-probes")
    assert code == 0 and checks["tool-prefill"]["status"] == "pass"
    prefill = [p for p in fake_openai.posts() if [m["role"] for m in p["messages"]] == ["user", "assistant", "tool"]]
    assert len(prefill) == 1
    tokens = len(prefill[0]["messages"][2]["content"]) / 4
    assert 0.9 * 25000 <= tokens <= 25000


def test_probes_fail_on_wrong_answers_and_never_run_code(fake_openai, capsys):
    fake_openai.mode.update(bad_code=True, wrong_sum=True)
    code, checks, _ = _run(fake_openai.url, capsys, "--rounds", "0", "--streams", "1", "--no-ladder")
    assert code == 1
    assert checks["coding"]["status"] == "fail" and "not valid Python" in checks["coding"]["detail"]
    assert checks["reasoning"]["status"] == "fail" and "expected 42" in checks["reasoning"]["detail"]
    assert checks["agent"]["status"] == "pass"


def test_prompts_are_sized_by_our_bound_not_the_servers(fake_openai, capsys):
    fake_openai.mode["max_model_len"] = 10**9
    assert ladder.rungs(10**9)[-1] == ladder.MAX_PROBE_TOKENS
    _code, checks, _ = _run(fake_openai.url, capsys, "--rounds", "0", "--streams", "1", "--no-probes",
                            "--ladder-max", "5000", "--tool-prefill-tokens", "3000")
    assert [n for n in checks if n.startswith("needle-")] == ["needle-1024", "needle-4096", "needle-5000",
                                                             "needle-ladder"]
    assert max(len(str(p["messages"][-1]["content"])) for p in fake_openai.posts()) < 4 * 5000


def test_skip_tools_skips_the_tool_probes(fake_openai, capsys):
    fake_openai.mode["max_model_len"] = 8192
    _code, checks, _ = _run(fake_openai.url, capsys, "--rounds", "0", "--streams", "1", "--no-ladder", "--skip-tools")
    assert checks["tool-prefill"]["status"] == "skip" and checks["agent"]["status"] == "skip"
