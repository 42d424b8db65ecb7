"""The capabilities smoke (issue 28 item 6): the optional capabilities a launch positively declares
(tool calls, reasoning streaming, structured output, vision, long context) are probed with small,
bounded requests and reported green / red / skipped, each with its reason, instead of `unsmoked`.
Real parts: llama.cpp's real server on the tiny GGUF (directly, and behind `up`), the loopback fake
OpenAI server for the paths the tiny model cannot take."""

from __future__ import annotations

import json
from typing import Any

import pytest

from club3090.edges.openai_client import OpenAIClient, urllib_http
from club3090.validate import capabilities as caps
from tests import test_serving_gate as serving
from tests.llama_server import MODEL_ID

env, gguf, stopper = serving.env, serving.gguf, serving.stopper
EVERY = ["--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--reasoning-parser", "qwen3",
         "--structured-outputs-config", '{"backend": "xgrammar"}', "--limit-mm-per-prompt", '{"image": 1}',
         "--max-model-len", "131072"]


@pytest.mark.parametrize(("argv", "want"), [
    (["serve", "m", "--max-model-len", "8192"], {}),
    (EVERY, {"tool-call": "--enable-auto-tool-choice", "reasoning-streaming": "--reasoning-parser",
             "structured-output": "--structured-outputs-config", "vision": "--limit-mm-per-prompt",
             "long-context": "--max-model-len 131072"}),
    (["--jinja", "--reasoning-format", "deepseek", "--mmproj", "/m/mmproj.gguf", "-c", "200000"],
     {"tool-call": "--jinja", "reasoning-streaming": "--reasoning-format", "vision": "--mmproj",
      "long-context": "-c 200000"}),
    (["--jinja", "--reasoning", "off", "--reasoning-format", "deepseek"], {"tool-call": "--jinja"}),
    (["--reasoning-format", "none", "--ctx-size=65536"], {"long-context": "--ctx-size 65536"}),
    (["--limit-mm-per-prompt", '{"image": 0}', "--limit-mm-per-prompt=image=0"], {}),
    (["--guided-decoding-backend=outlines"], {"structured-output": "--guided-decoding-backend"}),
])
def test_what_a_launch_declares(argv: list[str], want: dict[str, str]):
    assert caps.declared(argv) == want


def _by_cap(found: dict[str, dict[str, Any]]) -> dict[str, str]:
    return {cap: v["status"] for cap, v in found.items()}


def test_every_declared_capability_green_on_a_server_that_has_them(fake_openai):
    fake_openai.mode["sees_images"] = True
    client = OpenAIClient(fake_openai.url, timeout=30)
    found = caps.smoke_capabilities(client, "fake-model", EVERY)
    assert _by_cap(found) == dict.fromkeys(caps.OPTIONAL, "green"), found
    assert found["long-context"]["declared_by"] == "--max-model-len 131072"
    posts = [body for method, _p, body in fake_openai.log if method == "POST"]
    assert all(int(b.get("max_tokens") or 0) <= 512 for b in posts)              # small, bounded requests
    assert max(len(json.dumps(b)) for b in posts) < 4 * caps.LONG_SMOKE_TOKENS * 2


@pytest.mark.parametrize(("switch", "cap", "why"), [
    ("no_tool_call", "tool-call", "no tool_calls"),
    ("no_reasoning", "reasoning-streaming", "no reasoning_content"),
    ("no_structured", "structured-output", "not JSON"),
    ("no_vision", "vision", "refused"),
])
def test_a_declared_capability_that_is_broken_is_red_with_why(fake_openai, switch, cap, why):
    fake_openai.mode.update({"sees_images": True, switch: True})
    found = caps.smoke_capabilities(OpenAIClient(fake_openai.url, timeout=30), "fake-model", EVERY)
    assert found[cap]["status"] == "red" and why in found[cap]["error"], found[cap]
    assert found[cap]["error"].endswith(f"(declared by {found[cap]['declared_by']})")
    assert [c for c, s in _by_cap(found).items() if s != "green"] == [cap]


def test_nothing_declared_is_skipped_with_the_reason_and_nothing_is_sent(fake_openai):
    found = caps.smoke_capabilities(OpenAIClient(fake_openai.url, timeout=30), "fake-model", ["--max-model-len", "4096"])
    assert all(v == {"status": "skipped", "error": "not declared by the launch", "declared_by": None}
               for v in found.values())
    assert not [p for p in fake_openai.log if p[0] == "POST"]


def test_the_smoke_is_partial_only_when_a_declared_capability_was_not_probed(fake_openai):
    fake_openai.mode["no_usage"] = True          # the long-context probe cannot size its prompt: skipped
    report = caps.smoke(fake_openai.url.removesuffix("/v1"), "fake-model", ["--max-model-len", "65536"],
                        http=urllib_http)
    assert report.floor_green and report.results["long-context"] == "skipped" and report.partial
    assert report.problems == (("long-context", report.detail["long-context"]["error"]),)
    assert "usage.prompt_tokens" in report.problems[0][1]
    fake_openai.mode["status"] = 500             # a red floor: nothing beyond it is probed
    red = caps.smoke(fake_openai.url.removesuffix("/v1"), "fake-model", EVERY, http=urllib_http)
    assert not red.floor_green and red.results["tool-call"] == "skipped"
    assert red.detail["tool-call"]["error"] == "not probed: the floor is red"


def test_against_llama_cpp_long_context_is_green_and_an_absent_skill_is_red(llama_server):
    client = OpenAIClient(llama_server.url, timeout=120)
    found = caps.smoke_capabilities(client, MODEL_ID, ["--mmproj", "x.gguf", "--reasoning-format", "deepseek",
                                                       "-c", "32768"], context=llama_server.n_ctx)
    assert found["long-context"]["status"] == "green", found["long-context"]
    assert "-token prompt" in found["long-context"]["detail"]
    # the tiny text model takes the image part but cannot name its colour; it has no reasoning
    assert found["vision"]["status"] == "red" and "not described" in found["vision"]["error"]
    assert found["reasoning-streaming"]["status"] == "red"
    assert found["tool-call"]["status"] == found["structured-output"]["status"] == "skipped"


def test_up_reports_each_capability_its_server_does_not_declare_as_skipped(env, stopper, capsys):
    # no llama-server binary here: llama-cpp-python's server runs, and its translated flags declare none
    # of the optional capabilities (llama-server's --jinja has no equivalent there, its context is small)
    code, state = serving._up(env, stopper)
    out = capsys.readouterr().out
    assert code == 0, out
    assert "llama_cpp.server" in state["argv"] and caps.declared(state["argv"]) == {}
    assert state["smoke"] == {"plain-chat": "green", "streaming": "green", **dict.fromkeys(caps.OPTIONAL, "skipped")}
    smoke = next(line for line in out.splitlines() if line.startswith("[up] smoke "))
    assert "tool-call=skipped" in smoke and "unsmoked" not in out
