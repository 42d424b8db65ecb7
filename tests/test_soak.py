"""club3090 soak against the loopback fake OpenAI server, timed by a ticking fake clock."""

from __future__ import annotations

import csv
import json

import pytest

from club3090 import cli
from club3090.cli.commands import soak as soak_cmd
from club3090.edges.openai_client import OpenAIClient
from club3090.validate.soak import SoakOptions, soak, write_files
from tests.fakeopenai import TickClock, closed_port_url

MIB = 1 << 20


def _client(fake, step: float = 0.01) -> OpenAIClient:
    return OpenAIClient(fake.url, clock=TickClock(step))


def test_quick_pass_without_gpu(fake_openai):
    report = soak(_client(fake_openai), SoakOptions(mode="quick"))
    assert report.verdict() == ("pass", []) and report.exit_code == 0
    assert len(report.turns) == 40 and report.retention == pytest.approx(1.0) and not report.gpu_sampled
    data = report.to_json()
    assert data["gpu"]["note"].startswith("not sampled") and data["turns_done"] == data["turns_planned"] == 40
    # fresh sessions: every session restarts from the system prompt; turns within one accumulate
    posts = fake_openai.posts()
    assert [len(p["messages"]) for p in posts[:6]] == [2, 4, 6, 8, 10, 2]


def test_slowdown_fails_retention(fake_openai):
    fake_openai.mode["slowdown"] = 1
    report = soak(_client(fake_openai), SoakOptions(mode="quick"))
    verdict, why = report.verdict()
    assert verdict == "fail" and report.exit_code == 1 and report.retention < 0.98
    assert any("retention" in w for w in why)


def test_empty_turns_fail(fake_openai):
    fake_openai.mode["empty"] = True
    report = soak(_client(fake_openai), SoakOptions(mode="quick", sessions=2, turns=5))
    assert report.exit_code == 1 and report.empties == 10 and "10 silent-empty turn(s)" in report.verdict()[1]


def test_500s_fail(fake_openai):
    fake_openai.mode["status"] = 500
    report = soak(_client(fake_openai), SoakOptions(mode="quick", sessions=2, turns=5))
    assert report.exit_code == 1 and report.errors == 10 and "HTTP 500" in report.turns[0].error


def test_vram_growth(fake_openai):
    used = iter(range(0, 10**12, 30 * MIB))
    report = soak(_client(fake_openai), SoakOptions(mode="quick", sessions=2, turns=5),
                  gpu_sampler=lambda: (next(used), 1000 * MIB))
    assert report.gpu_sampled and len(report.gpu) == 11 and report.growth_mib == 300
    assert report.exit_code == 1 and any("VRAM growth" in w for w in report.verdict()[1])
    flat = soak(_client(fake_openai), SoakOptions(mode="quick", sessions=2, turns=5),
                gpu_sampler=lambda: (5000 * MIB,))
    assert flat.exit_code == 0 and flat.growth_mib == 0


def test_deadline_bounds_the_run(fake_openai):
    clock = TickClock(0.5)
    report = soak(OpenAIClient(fake_openai.url, clock=clock), SoakOptions(mode="fresh", deadline_s=60))
    assert report.deadline_hit and 0 < len(report.turns) < 100 and report.exit_code == 2
    assert report.verdict()[0] == "inconclusive"
    assert len(fake_openai.posts()) == len(report.turns)


def test_too_few_turns_is_inconclusive(fake_openai):
    report = soak(_client(fake_openai), SoakOptions(mode="quick", sessions=1, turns=4))
    assert report.exit_code == 2 and "retention needs 10" in report.verdict()[1][0]


def test_continuous_ramps_context(fake_openai):
    report = soak(_client(fake_openai), SoakOptions(mode="continuous", target_tokens=8000))
    assert report.exit_code == 0 and len(report.turns) == 25
    prompts = [t.prompt_tokens for t in report.turns]
    assert prompts == sorted(prompts) and 7600 <= prompts[-1] <= 8400
    posts = fake_openai.posts()
    assert len(posts[-1]["messages"]) == 1 + 2 * 24 + 1         # one conversation across the sessions


def test_pause_uses_the_sleep_seam(fake_openai):
    clock = TickClock()
    soak(OpenAIClient(fake_openai.url, clock=clock), SoakOptions(mode="quick", sessions=3, turns=1, pause_s=2.0),
         sleep=clock.sleep)
    assert clock.slept == [2.0, 2.0]


def test_unreachable():
    report = soak(OpenAIClient(closed_port_url(), timeout=2), SoakOptions(mode="quick"))
    assert report.unreachable and report.exit_code == 2 and not report.turns


def test_files(fake_openai, tmp_path):
    report = soak(_client(fake_openai), SoakOptions(mode="quick", sessions=2, turns=5),
                  gpu_sampler=lambda: (100 * MIB, 200 * MIB))
    paths = write_files(report, tmp_path / "out")
    assert [p.name for p in paths] == ["baseline.json", "turn-log.csv", "gpu-log.csv"]
    base = json.loads(paths[0].read_text())
    assert base["tool"] == "soak" and base["verdict"] == "pass" and base["turns_done"] == 10
    rows = list(csv.DictReader(paths[1].read_text().splitlines()))
    assert len(rows) == 10 and rows[0]["session"] == "1" and float(rows[0]["decode_tps"]) > 0
    gpu = list(csv.DictReader(paths[2].read_text().splitlines()))
    assert len(gpu) == 11 * 2 and gpu[1] == {**gpu[1], "gpu": "1", "used_mib": "200.0"}


def test_cli_quick_json_files_and_key(fake_openai, tmp_path, monkeypatch, capsys):
    key = "sk-soak-" + "Kq" * 12
    fake_openai.mode["require_key"] = key
    monkeypatch.setenv("OPENAI_API_KEY", key)
    out = tmp_path / "soak"
    args = cli.build_parser().parse_args(["soak", "--url", fake_openai.url, "--mode", "quick", "--json",
                                          "--out-dir", str(out)])
    clock = TickClock()
    assert soak_cmd.run(args, None, clock=clock, sleep=clock.sleep, gpu_sampler=lambda: None) == 0
    printed, err = capsys.readouterr()
    data = json.loads(printed)
    assert data["verdict"] == "pass" and data["files"] == [str(out / n) for n in
                                                          ("baseline.json", "turn-log.csv", "gpu-log.csv")]
    assert (out / "gpu-log.csv").read_text() == "t_s,after_turn,gpu,used_mib\n"
    blob = printed + err + "".join((out / n).read_text() for n in ("baseline.json", "turn-log.csv", "gpu-log.csv"))
    assert key not in blob


def test_cli_500_exit_1_and_unreachable_exit_2(fake_openai, tmp_path, capsys):
    fake_openai.mode["status"] = 500
    assert cli.main(["soak", "--url", fake_openai.url, "--mode", "quick", "--out-dir", str(tmp_path / "a")]) == 1
    assert "[soak] FAIL" in capsys.readouterr().out
    assert cli.main(["soak", "--url", closed_port_url(), "--timeout", "2", "--out-dir", str(tmp_path / "b")]) == 2
    assert "INCONCLUSIVE" in capsys.readouterr().out and (tmp_path / "b" / "baseline.json").is_file()


@pytest.mark.parametrize("gpu_detect", [True, False])
def test_cli_samples_gpus_only_when_settings_allow(fake_openai, tmp_path, monkeypatch, capsys, gpu_detect):
    from club3090.edges import gpu_probe as hardware
    from club3090.edges.provider import LiveProvider
    from club3090.settings import Settings

    seen: list[bool] = []

    def fake_used(*, enabled=True, **_k):
        seen.append(enabled)
        return (100 * MIB,) if enabled else None
    monkeypatch.setattr(hardware, "memory_used_bytes", fake_used)
    args = cli.build_parser().parse_args(["soak", "--url", fake_openai.url, "--mode", "quick", "--json",
                                          "--out-dir", str(tmp_path / "soak")])
    clock = TickClock()
    settings = Settings(hf_home=tmp_path / "hf", gpu_detect=gpu_detect)
    assert soak_cmd.run(args, LiveProvider(settings), clock=clock, sleep=clock.sleep) == 0
    assert seen and set(seen) == {gpu_detect}
    assert json.loads(capsys.readouterr().out)["gpu"]["sampled"] is gpu_detect
