"""club3090 bench against the loopback fake OpenAI server, timed by a ticking fake clock."""

from __future__ import annotations

import json

import pytest

from club3090 import cli
from club3090.cli.commands import bench as bench_cmd
from club3090.cli.exit_codes import exit_code
from club3090.edges.openai_client import OpenAIClient
from club3090.validate.bench import bench, haystack
from tests.fakeopenai import TickClock, closed_port_url


def test_runs_timing_and_summary(fake_openai):
    report = bench(OpenAIClient(fake_openai.url, clock=TickClock(0.01)), runs=2)
    assert exit_code(report.outcome) == 0 and report.model == "fake-model"
    posts = fake_openai.posts()
    assert len(posts) == 3 + 2 * 2 and len(report.warmups) == 3
    assert [p["max_tokens"] for p in posts[3:]] == [1000, 1000, 800, 800]
    assert all(p["stream"] and p["stream_options"] == {"include_usage": True} for p in posts)
    for run in report.runs:
        assert run.ok and run.tokens_source == "usage" and run.tokens == (24 if run.kind == "code" else 1000)
        assert 0 < run.ttft_s < run.wall_s
        assert run.wall_tps == pytest.approx(run.tokens / run.wall_s)
        assert run.decode_tps == pytest.approx(run.tokens / (run.wall_s - run.ttft_s))
    s = report.summaries()
    assert set(s) == {"narrative", "code"}
    assert s["narrative"]["decode_tps"]["n"] == 2 and s["narrative"]["decode_tps"]["cv"] == pytest.approx(0, abs=1e-9)


def test_tokens_counted_from_chunks_without_usage(fake_openai):
    fake_openai.mode["no_usage"] = True
    report = bench(OpenAIClient(fake_openai.url, clock=TickClock()), runs=1, warmups=0)
    assert [(r.tokens_source, r.tokens) for r in report.runs] == [("chunks", 1000), ("chunks", 24)]
    assert report.summaries()["code"]["tokens_source"] == ["chunks"]


def test_prefill_probe_is_salted_and_rescaled(fake_openai):
    salts = iter(f"s{i:02d}" for i in range(100))
    report = bench(OpenAIClient(fake_openai.url, clock=TickClock()), runs=1, warmups=0, prefill=(2000,),
                   salt=lambda: next(salts))
    probes = [p for p in fake_openai.posts() if p["max_tokens"] == 1]
    assert len(probes) == 3
    texts = [p["messages"][0]["content"] for p in probes]
    assert [t[:11] for t in texts] == ["[salt s00] ", "[salt s01] ", "[salt s02] "]
    runs = [r for r in report.runs if r.kind == "prefill-2000"]
    assert all(r.ok and r.prefill_tps and abs(r.prompt_tokens - 2000) < 100 for r in runs)
    assert "prefill_tps" in report.summaries()["prefill-2000"]


def test_haystack_size():
    text = haystack("abc", 4000)
    assert text.startswith("[salt abc]") and 4000 <= len(text) < 4100


def test_500_is_exit_1(fake_openai):
    fake_openai.mode["status"] = 500
    report = bench(OpenAIClient(fake_openai.url, clock=TickClock()), runs=1, warmups=1)
    assert exit_code(report.outcome) == 1 and all(not r.ok and "HTTP 500" in r.error for r in report.runs)
    assert report.summaries()["narrative"]["decode_tps"]["mean"] is None


def test_empty_answers_are_failed_runs(fake_openai):
    fake_openai.mode["empty"] = True
    report = bench(OpenAIClient(fake_openai.url, clock=TickClock()), runs=1, warmups=0)
    assert exit_code(report.outcome) == 1 and all(r.error for r in report.runs)


def test_unreachable():
    report = bench(OpenAIClient(closed_port_url(), timeout=2))
    assert report.unreachable and exit_code(report.outcome) == 2 and not report.runs


def test_cli_json_out_file_and_key(fake_openai, tmp_path, monkeypatch, capsys):
    key = "sk-bench-" + "x7" * 12
    fake_openai.mode["require_key"] = key
    monkeypatch.setenv("OPENAI_API_KEY", key)
    out = tmp_path / "res" / "bench.json"
    args = cli.build_parser().parse_args(["bench", "--url", fake_openai.url, "--runs", "1", "--prefill", "500",
                                          "--json", "--out", str(out)])
    assert bench_cmd.run(args, None, clock=TickClock()) == 0
    printed, err = capsys.readouterr()
    data = json.loads(printed)
    assert json.loads(out.read_text()) == data
    assert set(data) >= {"tool", "ok", "exit_code", "url", "model", "runs", "warmups", "summary", "prefill_targets"}
    assert set(data["summary"]) == {"narrative", "code", "prefill-500"}
    assert set(data["runs"][0]) == {"kind", "index", "ok", "wall_s", "ttft_s", "tokens", "tokens_source",
                                    "prompt_tokens", "wall_tps", "decode_tps", "prefill_tps", "error"}
    assert key not in printed + err + out.read_text()
    assert not list(out.parent.glob(".*tmp"))


def test_cli_table(fake_openai, capsys):
    assert cli.main(["bench", "--url", fake_openai.url, "--runs", "1"]) == 0
    out = capsys.readouterr().out
    assert "decode t/s" in out and "narrative" in out and "code" in out


def test_cli_unreachable(capsys):
    assert cli.main(["bench", "--url", closed_port_url(), "--timeout", "2"]) == 2
    assert "UNREACHABLE" in capsys.readouterr().out


def test_real_server(llama_server, capsys):
    """llama.cpp's server streams no usage: tokens are counted from chunks (and marked so)."""
    assert cli.main(["bench", "--url", llama_server.url, "--runs", "2", "--prefill", "300", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["model"] == llama_server.model and len(data["warmups"]) == 3
    runs = [r for r in data["runs"] if r["kind"] in ("narrative", "code")]
    assert len(runs) == 4 and all(r["ok"] and r["tokens"] > 1 and r["decode_tps"] > 0 for r in runs)
    assert {r["tokens_source"] for r in runs} == {"chunks"}
    prefill = [r for r in data["runs"] if r["kind"] == "prefill-300"]
    assert len(prefill) == 3 and all(r["ok"] and r["ttft_s"] > 0 for r in prefill)


def test_deadline_stops_the_runs(fake_openai):
    ticks = [0.0]

    def clock():
        ticks[0] += 0.01
        return ticks[0]
    report = bench(OpenAIClient(fake_openai.url, clock=clock, deadline_s=60), runs=50)
    assert exit_code(report.outcome) == 1 and report.error.startswith("run deadline reached")
    assert 0 < len(report.runs) < 100 and len(fake_openai.posts()) == len(report.runs) + len(report.warmups)
