"""club3090 verify against the loopback fake OpenAI server (tests/fakeopenai.py)."""

from __future__ import annotations

import json
import re

import pytest

from club3090 import cli
from club3090.cli.exit_codes import exit_code
from club3090.edges.openai_client import OpenAIClient, api_base
from club3090.validate.verify import repeated_window, verify
from tests.fakeopenai import closed_port_url

KEY = "sk-test-" + "Zq9" * 10


def _statuses(report) -> dict[str, str]:
    return {c.name: c.status for c in report.checks}


def test_all_green(fake_openai):
    report = verify(OpenAIClient(fake_openai.url))
    assert exit_code(report.outcome) == 0 and report.model == "fake-model"
    assert _statuses(report) == {"models": "pass", "completion": "pass", "streaming": "pass", "tool-call": "pass"}
    posts = fake_openai.posts()
    assert [p.get("stream", False) for p in posts] == [False, True, False]
    assert posts[2]["tool_choice"] == "auto" and posts[2]["tools"][0]["function"]["name"] == "get_weather"
    assert posts[1]["stream_options"] == {"include_usage": True}


def test_full_green_and_skip_tools(fake_openai):
    report = verify(OpenAIClient(fake_openai.url), full=True, skip_tools=True)
    s = _statuses(report)
    assert exit_code(report.outcome) == 0 and s["thinking"] == "pass" and s["long-output"] == "pass"
    assert s["tool-call"] == s["streaming-tool-call"] == "skip"
    assert not any(p.get("tools") for p in fake_openai.posts())


def test_full_streaming_tool_call_merges_deltas(fake_openai):
    report = verify(OpenAIClient(fake_openai.url), full=True)
    assert _statuses(report)["streaming-tool-call"] == "pass"
    assert "Paris" in next(c.detail for c in report.checks if c.name == "streaming-tool-call")


@pytest.mark.parametrize("switch, red", [
    ("wrong_answer", "completion"), ("no_tool_call", "tool-call"), ("bad_tool_args", "tool-call"),
    ("broken_stream", "streaming"), ("garbage_stream", "streaming"), ("empty", "completion"),
])
def test_red_checks(fake_openai, switch, red):
    fake_openai.mode[switch] = True
    report = verify(OpenAIClient(fake_openai.url))
    assert exit_code(report.outcome) == 1 and _statuses(report)[red] == "fail"


@pytest.mark.parametrize("switch, red", [("degenerate", "long-output"), ("tool_call_text", "long-output")])
def test_full_red_checks(fake_openai, switch, red):
    fake_openai.mode[switch] = True
    report = verify(OpenAIClient(fake_openai.url), full=True)
    assert exit_code(report.outcome) == 1 and _statuses(report)[red] == "fail"


def test_thinking_skipped_when_server_never_reasons(fake_openai):
    fake_openai.mode["no_reasoning"] = True
    assert _statuses(verify(OpenAIClient(fake_openai.url), full=True))["thinking"] == "skip"


def test_http_500_is_red_not_a_crash(fake_openai):
    fake_openai.mode["status"] = 500
    report = verify(OpenAIClient(fake_openai.url))
    assert exit_code(report.outcome) == 1 and _statuses(report)["models"] == "pass"
    assert all(c.status == "fail" for c in report.checks[1:])
    assert "HTTP 500" in report.checks[1].detail


def test_unknown_model_is_red(fake_openai):
    report = verify(OpenAIClient(fake_openai.url), model="other")
    assert exit_code(report.outcome) == 1 and _statuses(report)["models"] == "fail"


def test_unreachable_exit_2():
    report = verify(OpenAIClient(closed_port_url(), timeout=2))
    assert report.unreachable and exit_code(report.outcome) == 2 and len(report.checks) == 1


def test_repeated_window():
    assert repeated_window("abcdefghij" * 40) is not None
    assert repeated_window(" ".join(f"sentence {i} is unique here {i * 7}." for i in range(80))) is None
    assert repeated_window("short") is None


def test_api_base():
    assert api_base("http://h:8020") == api_base("http://h:8020/") == api_base("http://h:8020/v1/") == "http://h:8020/v1"


# --------------------------------------------------------------------------------------------
# the CLI
# --------------------------------------------------------------------------------------------

def test_cli_json_and_key_from_env(fake_openai, monkeypatch, capsys):
    fake_openai.mode["require_key"] = KEY
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    assert cli.main(["verify", "--url", fake_openai.url, "--json"]) == 0
    out, err = capsys.readouterr()
    data = json.loads(out)
    assert data["tool"] == "verify" and data["ok"] is True and data["exit_code"] == 0
    assert [c["name"] for c in data["checks"]] == ["models", "completion", "streaming", "tool-call"]
    assert set(data["checks"][0]) == {"name", "status", "detail", "seconds"}
    assert all(h.get("authorization") == f"Bearer {KEY}" for h in fake_openai.headers)
    assert KEY not in out + err


def test_cli_wrong_key_is_red_and_never_echoed(fake_openai, monkeypatch, capsys):
    fake_openai.mode["require_key"] = "the-right-one"
    assert cli.main(["verify", "--url", fake_openai.url, "--api-key", KEY]) == 1
    out, err = capsys.readouterr()
    assert "HTTP 401" in out and KEY not in out + err and "<REDACTED>" in out


def test_cli_env_url_and_model(fake_openai, monkeypatch, capsys):
    monkeypatch.setenv("URL", fake_openai.url.removesuffix("/v1"))
    monkeypatch.setenv("MODEL", "fake-model")
    assert cli.main(["verify"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    # "[verify] <STATUS> <check> ..." per check, then "[verify] <VERDICT>: <passed>, <failed>, <skipped>"
    assert [line.split()[1:3] for line in lines[1:-1]] == [["PASS", name] for name in
                                                           ("models", "completion", "streaming", "tool-call")]
    verdict, _, counts = lines[-1].partition(":")
    assert verdict == "[verify] PASS" and re.findall(r"\d+", counts) == ["4", "0", "0"]


def test_cli_unreachable(capsys):
    assert cli.main(["verify", "--url", closed_port_url(), "--timeout", "2", "--json"]) == 2
    data = json.loads(capsys.readouterr().out)
    assert data["unreachable"] is True and data["exit_code"] == 2


def test_cli_bad_timeout_is_usage(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["verify", "--timeout", "0", "--json"])
    assert exc.value.code == 64
    assert json.loads(capsys.readouterr().out)["exit_code"] == 64


# --------------------------------------------------------------------------------------------
# checks that mean something (a never-stopping answer, an early stop)
# --------------------------------------------------------------------------------------------

def test_never_stopping_answer_fails_completion(fake_openai):
    fake_openai.mode["never_stop"] = True          # "Paris Paris Paris ..." until max_tokens, finish_reason length
    report = verify(OpenAIClient(fake_openai.url))
    check = next(c for c in report.checks if c.name == "completion")
    assert check.status == "fail" and "finish_reason length" in check.detail and exit_code(report.outcome) == 1


def test_early_stop_fails_long_output(fake_openai):
    fake_openai.mode["stop_early"] = True          # 15 tokens of a 2048-token request, finish_reason stop
    report = verify(OpenAIClient(fake_openai.url), full=True)
    check = next(c for c in report.checks if c.name == "long-output")
    assert check.status == "fail" and check.detail.startswith("stopped early: 15 tokens of 2048")


def test_long_output_without_usage_estimates_from_characters(fake_openai):
    fake_openai.mode["no_usage"] = True
    report = verify(OpenAIClient(fake_openai.url), full=True)
    check = next(c for c in report.checks if c.name == "long-output")
    assert check.status == "pass" and "estimated from characters" in check.detail


# --------------------------------------------------------------------------------------------
# launch checks (patches from the log, speculative acceptance from /metrics) and capabilities
# --------------------------------------------------------------------------------------------

METRICS = """# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{{engine="0",model_name="m"}} {drafts}
vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="m"}} {accepted}
"""


def _full(fake, capsys, *extra):
    code = cli.main(["verify", "--url", fake.url, "--full", "--json", *extra])
    data = json.loads(capsys.readouterr().out)
    return code, {c["name"]: c for c in data["checks"]}, data


def test_launch_checks_not_applicable_for_a_plain_profile(fake_openai, capsys):
    code, checks, _ = _full(fake_openai, capsys, "--profile", "vllm/dual-tq3-nomtp")
    assert code == 0
    assert checks["patches-applied"]["status"] == checks["spec-acceptance"]["status"] == "not-applicable"


def test_launch_checks_skip_without_profile_never_pass(fake_openai, capsys):
    code, checks, _data = _full(fake_openai, capsys)
    assert code == 0 and checks["patches-applied"]["status"] == checks["spec-acceptance"]["status"] == "skip"
    assert "--profile" in checks["patches-applied"]["detail"]


@pytest.mark.parametrize("drafts, accepted, status", [(100, 180, "pass"), (100, 60, "fail")])
def test_spec_acceptance_from_metrics(fake_openai, capsys, drafts, accepted, status):
    fake_openai.mode["metrics"] = METRICS.format(drafts=drafts, accepted=accepted)
    _code, checks, _ = _full(fake_openai, capsys, "--profile", "vllm/dual")
    check = checks["spec-acceptance"]
    assert check["status"] == status and f"{1 + accepted / drafts:.2f}" in check["detail"]
    assert ("GET", "/metrics", None) in fake_openai.log


def test_spec_acceptance_fails_without_counters(fake_openai, capsys):
    code, checks, _ = _full(fake_openai, capsys, "--profile", "vllm/dual")
    assert code == 1 and checks["spec-acceptance"]["status"] == "fail"


def test_patches_applied_from_the_launch_log(fake_openai, tmp_path, capsys):
    fake_openai.mode["metrics"] = METRICS.format(drafts=10, accepted=20)
    from club3090.catalog import load_catalog

    log = tmp_path / "launch.log"
    needed = sorted(pid for pid, p in load_catalog().patches.items()
                    if "vllm/dual" in p.load_bearing_composes and not p.deprecated)
    missing = "qwen-qwen3coder-tool-parser-deferred-commit"
    assert missing in needed and len(needed) > 1
    forms = ("[patch] {} applied", "INFO patch {}: ok", "installed chat_template.jinja ({})")
    applied = [forms[i % len(forms)].format(pid) for i, pid in enumerate(p for p in needed if p != missing)]
    log.write_text("\n".join([*applied, "ERROR qwen-qwen3coder-tool-parser-deferred-commit failed to apply"]))
    code, checks, _ = _full(fake_openai, capsys, "--profile", "vllm/dual", "--log", str(log))
    assert code == 1 and checks["patches-applied"]["status"] == "fail"
    assert checks["patches-applied"]["detail"].endswith("qwen-qwen3coder-tool-parser-deferred-commit")
    log.write_text("\n".join([*applied, "qwen-qwen3coder-tool-parser-deferred-commit applied"]))
    code, checks, _ = _full(fake_openai, capsys, "--profile", "vllm/dual", "--log", str(log))
    assert code == 0 and checks["patches-applied"]["status"] == "pass"


def test_bad_log_and_profile_are_usage_errors(fake_openai, tmp_path, capsys):
    assert cli.main(["verify", "--url", fake_openai.url, "--log", str(tmp_path / "missing.log")]) == 64
    assert cli.main(["verify", "--url", fake_openai.url, "--profile", "no/such-profile"]) == 64
    assert not fake_openai.log


def test_capabilities_are_probed(fake_openai, capsys):
    fake_openai.mode.update(no_vision=True, max_model_len=8192)
    code, checks, data = _full(fake_openai, capsys)
    assert code == 0                                     # capabilities are reported, not verdicts
    assert data["capabilities"] == {"tool-calls": "supported", "reasoning": "supported", "vision": "unsupported",
                                    "long-context": "supported"}
    assert checks["long-context"]["status"] == "pass" and "of 8192" in checks["long-context"]["detail"]
    fake_openai.mode.update(no_vision=False, no_reasoning=True, no_tool_call=True, max_model_len=None)
    _code, checks, data = _full(fake_openai, capsys)
    assert data["capabilities"] == {"tool-calls": "unsupported", "reasoning": "unsupported",
                                    "vision": "answered-unverified", "long-context": "not-probed"}


# --------------------------------------------------------------------------------------------
# against a real llama.cpp server (tests/llama_server.py)
# --------------------------------------------------------------------------------------------

def test_real_server_full_green_without_tools(llama_server, capsys):
    code, checks, _data = _full(llama_server, capsys, "--skip-tools", "--context", str(llama_server.n_ctx))
    assert code == 0, checks
    assert {n: c["status"] for n, c in checks.items()} == {
        "models": "pass", "completion": "pass", "streaming": "pass", "tool-call": "skip", "thinking": "skip",
        "long-output": "pass", "streaming-tool-call": "skip", "patches-applied": "skip", "spec-acceptance": "skip",
        "long-context": "pass"}
    assert "finish_reason stop" in checks["completion"]["detail"]


def test_real_server_reports_what_it_cannot_do(llama_server, capsys):
    """llama.cpp's server with a plain chat template answers tool_choice=auto in text: the tool checks
    are red, and the capabilities say so rather than assuming."""
    code, checks, data = _full(llama_server, capsys)
    assert code == 1 and checks["tool-call"]["status"] == "fail"
    assert data["capabilities"]["tool-calls"] == "unsupported"
    assert data["capabilities"]["reasoning"] == "unsupported"
    assert data["capabilities"]["long-context"] == "not-probed"      # /v1/models has no max_model_len
