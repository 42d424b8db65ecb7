"""The OpenAI client's HTTP policy against a hostile loopback server (tests/fakeopenai.py): a
deadline per request, a stall detector, bounded redirects that never carry the API key to another
origin, a JSON nesting budget, and documented exit codes for verify / bench / soak."""

from __future__ import annotations

import json
import time

import pytest

from club3090 import cli
from club3090.cli.exit_codes import exit_code
from club3090.edges.openai_client import OpenAIClient, http_request, loads

KEY = "sk-planted-" + "Vw3" * 10


def _argv(command: str, url: str, tmp_path, *extra: str) -> list[str]:
    argv = {"verify": ["verify"], "bench": ["bench", "--runs", "1"],
            "soak": ["soak", "--mode", "quick", "--probes", "3", "--out-dir", str(tmp_path / "soak")]}[command]
    return [*argv, "--url", url, *extra]


def _wait_for_trickle(fake, bound_s: float = 60.0) -> bool | None:
    """The hostile server's own verdict: did it reach the end of its trickle (the client never hung up)?"""
    end = time.monotonic() + bound_s
    while fake.trickle_done is None and time.monotonic() < end:
        time.sleep(0.05)
    return fake.trickle_done


# --------------------------------------------------------------------------------------------
# JSON nesting budget
# --------------------------------------------------------------------------------------------

def test_loads_refuses_deep_nesting_without_recursion_error():
    with pytest.raises(ValueError, match="nested"):
        loads("[" * 200_000 + "]" * 200_000)
    deep = loads("[" * 64 + "]" * 64)
    for _ in range(63):
        deep = deep[0]
    assert deep == []
    # brackets inside strings (and escaped quotes) do not count
    assert loads(json.dumps({"a": "[[[[{{{{\\\"" * 100, "b": [1, [2]]}), max_depth=3)["b"] == [1, [2]]
    with pytest.raises(ValueError):
        loads('{"a": [[[1]]]}', max_depth=3)


def test_bench_survives_a_deeply_nested_event(fake_openai, capsys):
    """Was RecursionError -> exit 70; now the event is a malformed chunk and the run fails (exit 1)."""
    fake_openai.mode["nested"] = True
    assert cli.main(["bench", "--url", fake_openai.url, "--runs", "1", "--json"]) == 1
    out, err = capsys.readouterr()
    data = json.loads(out)
    assert all(not r["ok"] and "not a chat completion chunk" in r["error"] for r in data["runs"])
    assert "Traceback" not in err


# --------------------------------------------------------------------------------------------
# redirects
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("command", ["verify", "bench", "soak"])
def test_cross_origin_redirect_never_carries_the_key(fake_openai, tmp_path, capsys, command):
    port = fake_openai.url.split(":")[2].split("/")[0]
    fake_openai.mode["redirect"] = f"http://localhost:{port}"        # same server, another origin
    cli.main(_argv(command, fake_openai.url, tmp_path, "--api-key", KEY, "--timeout", "10"))
    out, err = capsys.readouterr()
    first = [h for h in fake_openai.headers if h.get("host", "").startswith("127.0.0.1")]
    moved = [h for h in fake_openai.headers if h.get("host", "").startswith("localhost")]
    assert first and all(h.get("authorization") == f"Bearer {KEY}" for h in first)
    assert moved, "the redirect was followed"
    assert not any("authorization" in h for h in moved)
    assert KEY not in out + err


def test_same_origin_redirect_keeps_the_key(fake_openai, capsys):
    fake_openai.mode["redirect"] = fake_openai.url.removesuffix("/v1")
    fake_openai.mode["require_key"] = KEY
    assert cli.main(["verify", "--url", fake_openai.url, "--api-key", KEY]) == 0
    assert any(path.startswith("/redirected") for _m, path, _b in fake_openai.log)
    assert len(fake_openai.headers) >= 8 and all(h.get("authorization") == f"Bearer {KEY}"
                                                 for h in fake_openai.headers)


@pytest.mark.parametrize("command, code", [("verify", 2), ("bench", 2), ("soak", 2)])
def test_redirect_loop_is_unreachable_not_internal_error(fake_openai, tmp_path, capsys, command, code):
    fake_openai.mode["redirect_loop"] = True
    assert cli.main(_argv(command, fake_openai.url, tmp_path, "--json")) == code
    out = capsys.readouterr().out
    assert "too many redirects" in out
    assert len(fake_openai.log) == 6             # the first request and 5 redirects, then stop


def test_post_redirect_303_becomes_get():
    # direct: a 303 answer to POST is followed with GET and no body (RFC 9110 15.4.4)
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    seen: list[tuple[str, str]] = []

    class H(BaseHTTPRequestHandler):
        def log_message(self, *_a):
            return

        def do_POST(self):
            seen.append(("POST", self.path))
            self.rfile.read(int(self.headers.get("content-length") or 0))
            self.send_response(303)
            self.send_header("Location", "/done")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_GET(self):
            seen.append(("GET", self.path))
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

    server = ThreadingHTTPServer(("127.0.0.1", 0), H)
    worker = threading.Thread(target=server.serve_forever, daemon=True)
    worker.start()
    try:
        r = http_request("POST", f"http://127.0.0.1:{server.server_address[1]}/x", {"a": 1}, 10)
    finally:
        server.shutdown()
        server.server_close()
    assert r.status == 200 and seen == [("POST", "/x"), ("GET", "/done")]


# --------------------------------------------------------------------------------------------
# deadlines: per request, per stream silence, per run
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("command", ["verify", "bench"])
def test_timeout_is_per_request_against_a_slow_loris(fake_openai, tmp_path, capsys, command):
    """A server that sends a byte every 50 ms for 20 s: --timeout 0.5 must end each request, so the
    server sees the client hang up long before its trickle ends (was: read to the end)."""
    fake_openai.mode["trickle"] = 20
    assert cli.main(_argv(command, fake_openai.url, tmp_path, "--timeout", "0.5", "--json")) == 1
    out = capsys.readouterr().out
    assert "deadline: no complete answer within 0.5s" in out
    assert _wait_for_trickle(fake_openai) is False


def test_soak_honours_deadline(fake_openai, tmp_path, capsys):
    """Was: --deadline ignored while a request trickled (200-330 s runs with --timeout 10)."""
    fake_openai.mode["trickle"] = 20
    assert cli.main(_argv("soak", fake_openai.url, tmp_path, "--timeout", "600", "--deadline", "2", "--json")) == 2
    data = json.loads(capsys.readouterr().out)
    assert data["deadline_hit"] is True and data["verdict"] == "inconclusive"
    assert _wait_for_trickle(fake_openai) is False


def test_stall_detector_ends_a_silent_stream(fake_openai):
    fake_openai.mode["stall"] = 20
    client = OpenAIClient(fake_openai.url, timeout=60, stall_s=0.5)
    r = client.chat({"model": "m", "messages": [{"role": "user", "content": "hi"}]}, stream=True)
    assert r.error is not None and r.error.startswith("stalled: no data for 0.5s")


def test_run_deadline_stops_verify_and_marks_it(fake_openai, capsys):
    clock_value = [0.0]

    def clock():
        clock_value[0] += 1.0        # each reading is a second later
        return clock_value[0]
    client = OpenAIClient(fake_openai.url, clock=clock, deadline_s=6)
    from club3090.validate.verify import verify

    report = verify(client)
    assert report.deadline_hit and exit_code(report.outcome) == 1
    assert any(c.detail.startswith("not run: run deadline reached") for c in report.checks)


# --------------------------------------------------------------------------------------------
# non-JSON answers
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("command", ["verify", "bench", "soak"])
def test_non_json_bodies_are_a_red_result_not_a_crash(fake_openai, tmp_path, capsys, command):
    fake_openai.mode["non_json"] = True
    assert cli.main(_argv(command, fake_openai.url, tmp_path, "--json")) == 1
    out, err = capsys.readouterr()
    assert "not an OpenAI model list" in out and "Traceback" not in err
