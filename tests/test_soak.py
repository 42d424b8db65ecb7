"""club3090 soak against the loopback fake OpenAI server, timed by a ticking fake clock."""

from __future__ import annotations

import csv
import json

import pytest

from club3090 import cli
from club3090.cli.commands import soak as soak_cmd
from club3090.cli.exit_codes import exit_code
from club3090.edges.openai_client import OpenAIClient
from club3090.validate.soak import SoakOptions, soak, write_files
from tests.fakeopenai import TickClock, closed_port_url

MIB = 1 << 20


def _client(fake, step: float = 0.01) -> OpenAIClient:
    return OpenAIClient(fake.url, clock=TickClock(step))


def test_quick_pass_without_gpu(fake_openai):
    report = soak(_client(fake_openai), SoakOptions(mode="quick"))
    assert report.verdict() == ("pass", []) and exit_code(report.outcome) == 0
    assert len(report.turns) == 40 and report.retention == pytest.approx(1.0) and not report.gpu_sampled
    data = report.to_json()
    assert data["gpu"]["note"].startswith("not sampled") and data["turns_done"] == data["turns_planned"] == 40
    # 5 identical probes, then fresh sessions (each restarts from the system prompt), then 5 probes
    posts = fake_openai.posts()
    assert len(posts) == 5 + 40 + 5
    assert all(p["messages"] == posts[0]["messages"] for p in posts[:5] + posts[-5:])
    assert [len(p["messages"]) for p in posts[5:11]] == [2, 4, 6, 8, 10, 2]


def test_slowdown_fails_retention(fake_openai):
    fake_openai.mode["slowdown"] = 1
    report = soak(_client(fake_openai), SoakOptions(mode="quick"))
    verdict, why = report.verdict()
    assert verdict == "fail" and exit_code(report.outcome) == 1 and report.retention < 0.93
    assert any("retention" in w for w in why)


def test_retention_compares_probes_of_the_same_context(fake_openai):
    """Continuous mode grows the context 40x; the probes do not, so normal slowdown with context is
    not read as lost retention (the old first-5 vs last-5 turns rule called this 24.7 %)."""
    report = soak(_client(fake_openai), SoakOptions(mode="continuous", target_tokens=8000))
    starts = [t.prompt_tokens for t in report.probes]
    assert len(set(starts)) == 1 and starts[0] < 50
    assert report.turns[-1].prompt_tokens > 100 * starts[0]
    assert report.retention == pytest.approx(1.0) and exit_code(report.outcome) == 0


def _report(first, last, **opts):
    from club3090.validate.soak import SoakReport, Turn

    def probes(phase, values):
        return tuple(Turn(phase, 0, i, 0.0, 1.0, 0.1, 10, "usage", 20, v, False, None) for i, v in enumerate(values))
    return SoakReport("u", "m", SoakOptions(**opts), (), probes=probes("probe-start", first) + probes("probe-end", last))


def test_noise_aware_floor_does_not_flap():
    # 96.1 % then 104 %: run-to-run noise around a 98 % rule; both are passes under the tolerance
    for last in ([96.1] * 5, [104.0] * 5):
        assert _report([100.0] * 5, last).verdict()[0] == "pass"
    # a real loss still fails, and the stated floor is in the reason
    verdict, why = _report([100.0] * 5, [80.0] * 5).verdict()
    assert verdict == "fail" and "93.0%" in why[0]
    # noisy probes widen the floor by 2 x their relative MAD ...
    wide = _report([100, 90, 110, 95, 105], [90, 85, 95, 88, 92])
    assert wide.retention_stats()["noise"] == pytest.approx(0.05)
    assert wide.retention_stats()["floor"] == pytest.approx(0.88) and exit_code(wide.outcome) == 0
    assert exit_code(_report([100] * 5, [90, 85, 95, 88, 92]).outcome) == 1         # the same drop, quiet probes
    # ... and past MAX_NOISE a low retention is inconclusive, not a coin toss
    wild = _report([100, 50, 150, 100, 60], [40, 20, 70, 40, 25])
    assert wild.verdict()[0] == "inconclusive" and "noisy" in wild.verdict()[1][0]


def test_empty_turns_fail(fake_openai):
    fake_openai.mode["empty"] = True
    report = soak(_client(fake_openai), SoakOptions(mode="quick", sessions=2, turns=5))
    assert exit_code(report.outcome) == 1 and report.empties == 20 and "20 silent-empty turn(s)" in report.verdict()[1]


def test_500s_fail(fake_openai):
    fake_openai.mode["status"] = 500
    report = soak(_client(fake_openai), SoakOptions(mode="quick", sessions=2, turns=5))
    assert exit_code(report.outcome) == 1 and report.errors == 20 and "HTTP 500" in report.turns[0].error


def test_vram_growth(fake_openai):
    used = iter(range(0, 10**12, 30 * MIB))
    report = soak(_client(fake_openai), SoakOptions(mode="quick", sessions=2, turns=5),
                  gpu_sampler=lambda: (next(used), 1000 * MIB))
    assert report.gpu_sampled and len(report.gpu) == 11 and report.growth_mib == 300
    assert exit_code(report.outcome) == 1 and any("VRAM growth" in w for w in report.verdict()[1])
    flat = soak(_client(fake_openai), SoakOptions(mode="quick", sessions=2, turns=5),
                gpu_sampler=lambda: (5000 * MIB,))
    assert exit_code(flat.outcome) == 0 and flat.growth_mib == 0


def test_deadline_bounds_the_run(fake_openai):
    clock = TickClock(0.05)
    report = soak(OpenAIClient(fake_openai.url, clock=clock), SoakOptions(mode="fresh", deadline_s=60))
    assert report.deadline_hit and 0 < len(report.turns) < 100 and exit_code(report.outcome) == 2
    assert report.verdict()[0] == "inconclusive"
    # a request the deadline cut is not a measurement (and not a server error)
    assert 0 <= len(fake_openai.posts()) - len(report.turns) - len(report.probes) <= 1


def test_too_few_probes_is_inconclusive(fake_openai):
    fake_openai.mode["no_usage"] = True
    fake_openai.mode["empty"] = False
    report = soak(_client(fake_openai), SoakOptions(mode="quick", sessions=1, turns=4, probes=2))
    assert exit_code(report.outcome) == 2 and "retention needs >= 3 probes" in report.verdict()[1][0]


def test_continuous_ramps_context(fake_openai):
    report = soak(_client(fake_openai), SoakOptions(mode="continuous", target_tokens=8000))
    assert exit_code(report.outcome) == 0 and len(report.turns) == 25
    prompts = [t.prompt_tokens for t in report.turns]
    assert prompts == sorted(prompts) and 7600 <= prompts[-1] <= 8400
    posts = fake_openai.posts()
    assert len(posts[-6]["messages"]) == 1 + 2 * 24 + 1         # one conversation across the sessions


def test_pause_uses_the_sleep_seam(fake_openai):
    clock = TickClock()
    soak(OpenAIClient(fake_openai.url, clock=clock), SoakOptions(mode="quick", sessions=3, turns=1, pause_s=2.0),
         sleep=clock.sleep)
    assert clock.slept == [2.0, 2.0]


def test_unreachable():
    report = soak(OpenAIClient(closed_port_url(), timeout=2), SoakOptions(mode="quick"))
    assert report.unreachable and exit_code(report.outcome) == 2 and not report.turns


def test_files(fake_openai, tmp_path):
    report = soak(_client(fake_openai), SoakOptions(mode="quick", sessions=2, turns=5),
                  gpu_sampler=lambda: (100 * MIB, 200 * MIB))
    paths = write_files(report, tmp_path / "out")
    assert [p.name for p in paths] == ["baseline.json", "turn-log.csv", "gpu-log.csv"]
    base = json.loads(paths[0].read_text())
    assert base["tool"] == "soak" and base["verdict"] == "pass" and base["turns_done"] == 10
    rows = list(csv.DictReader(paths[1].read_text().splitlines()))
    assert [r["phase"] for r in rows] == ["probe-start"] * 5 + ["turn"] * 10 + ["probe-end"] * 5
    assert rows[5]["session"] == "1" and float(rows[5]["decode_tps"]) > 0
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


def speed_only(code: int, data: dict) -> None:
    """On a real server the wire must be clean; only the speed-retention verdict may move with this
    shared machine's load, and then the exit code must still say which way it went (the criterion
    itself is tested against the fake server above)."""
    assert code == {"pass": 0, "fail": 1, "inconclusive": 2}[data["verdict"]]
    if data["verdict"] == "fail":
        assert data["retention"] < data["retention_floor"]


def test_real_server_quick(llama_server, tmp_path, capsys):
    """The tolerance is wide here on purpose: a shared CI machine's noise is not what this test is about
    (the criterion itself is tested above); the real wire is."""
    out = tmp_path / "soak"
    code = cli.main(["soak", "--url", llama_server.url, "--mode", "quick", "--tolerance", "0.5", "--json",
                     "--out-dir", str(out)])
    data = json.loads(capsys.readouterr().out)
    assert data["turns_done"] == 40 and data["errors"] == data["silent_empty"] == 0
    speed_only(code, data)
    assert data["retention"] > 0 and data["retention_floor"] <= 0.48 + 1e-9
    rows = list(csv.DictReader((out / "turn-log.csv").read_text().splitlines()))
    assert len(rows) == 50 and all(float(r["decode_tps"]) > 0 for r in rows)


def test_real_server_continuous_ramps(llama_server, tmp_path, capsys):
    """The context grows turn by turn toward --target-tokens; the probes stay short and identical."""
    code = cli.main(["soak", "--url", llama_server.url, "--mode", "continuous", "--target-tokens", "1500",
                     "--tolerance", "0.5", "--json", "--out-dir", str(tmp_path / "c")])
    data = json.loads(capsys.readouterr().out)
    assert data["turns_done"] == 25 and data["errors"] == 0
    speed_only(code, data)
    rows = list(csv.DictReader((tmp_path / "c" / "turn-log.csv").read_text().splitlines()))
    assert [r["phase"] for r in rows].count("turn") == 25
