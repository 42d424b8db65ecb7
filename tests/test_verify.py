"""club3090 verify against the loopback fake OpenAI server (tests/fakeopenai.py)."""

from __future__ import annotations

import json
import re

import pytest

from club3090 import cli
from club3090.edges.openai_client import OpenAIClient, api_base
from club3090.validate.verify import repeated_window, verify
from tests.fakeopenai import closed_port_url

KEY = "sk-test-" + "Zq9" * 10


def _statuses(report) -> dict[str, str]:
    return {c.name: c.status for c in report.checks}


def test_all_green(fake_openai):
    report = verify(OpenAIClient(fake_openai.url))
    assert report.exit_code == 0 and report.model == "fake-model"
    assert _statuses(report) == {"models": "pass", "completion": "pass", "streaming": "pass", "tool-call": "pass"}
    posts = fake_openai.posts()
    assert [p.get("stream", False) for p in posts] == [False, True, False]
    assert posts[2]["tool_choice"] == "auto" and posts[2]["tools"][0]["function"]["name"] == "get_weather"
    assert posts[1]["stream_options"] == {"include_usage": True}


def test_full_green_and_skip_tools(fake_openai):
    report = verify(OpenAIClient(fake_openai.url), full=True, skip_tools=True)
    s = _statuses(report)
    assert report.exit_code == 0 and s["thinking"] == "pass" and s["long-output"] == "pass"
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
    assert report.exit_code == 1 and _statuses(report)[red] == "fail"


@pytest.mark.parametrize("switch, red", [("degenerate", "long-output"), ("tool_call_text", "long-output")])
def test_full_red_checks(fake_openai, switch, red):
    fake_openai.mode[switch] = True
    report = verify(OpenAIClient(fake_openai.url), full=True)
    assert report.exit_code == 1 and _statuses(report)[red] == "fail"


def test_thinking_skipped_when_server_never_reasons(fake_openai):
    fake_openai.mode["no_reasoning"] = True
    assert _statuses(verify(OpenAIClient(fake_openai.url), full=True))["thinking"] == "skip"


def test_http_500_is_red_not_a_crash(fake_openai):
    fake_openai.mode["status"] = 500
    report = verify(OpenAIClient(fake_openai.url))
    assert report.exit_code == 1 and _statuses(report)["models"] == "pass"
    assert all(c.status == "fail" for c in report.checks[1:])
    assert "HTTP 500" in report.checks[1].detail


def test_unknown_model_is_red(fake_openai):
    report = verify(OpenAIClient(fake_openai.url), model="other")
    assert report.exit_code == 1 and _statuses(report)["models"] == "fail"


def test_unreachable_exit_2():
    report = verify(OpenAIClient(closed_port_url(), timeout=2))
    assert report.unreachable and report.exit_code == 2 and len(report.checks) == 1


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
