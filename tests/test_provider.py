"""The Provider seam, the one resolver's precedence, the one --gpus parser, probe notes, the library API."""

from __future__ import annotations

import ast
import json
import struct
import subprocess
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

import club3090
from club3090 import cli
from club3090.catalog import load_catalog
from club3090.edges.gpu_probe import DetectedGpu, DetectedGpus, detect
from club3090.edges.provider import LiveProvider
from club3090.edges.resolve import resolve
from club3090.model.spec import ModelSpec
from club3090.outcome import Outcome, Reason, Stop
from club3090.pipeline.kv_calc import PriceRequest, price
from club3090.pipeline.pull import PullRequest, evaluate
from club3090.settings import Settings
from tests.fakehub import FIXTURES, FakeHub
from tests.providers import NO_GPU, offline_rig, rig

SRC = Path(__file__).resolve().parents[1] / "src" / "club3090"
CURATED = "Lorbus/Qwen3.6-27B-int4-AutoRound"
GIB = 2**30


def _folder(root: Path, fixture: str = "Qwen--Qwen2.5-0.5B") -> Path:
    """config.json from the fixture and one tiny BF16 safetensors file (header + zero bytes)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_bytes((FIXTURES / fixture / "config.json").read_bytes())
    header = json.dumps({"model.embed_tokens.weight": {"dtype": "BF16", "shape": [64, 64],
                                                       "data_offsets": [0, 8192]}}).encode()
    (root / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + bytes(8192))
    return root


class SpyProvider(LiveProvider):
    """Counts what the pipeline asks the outside world for."""

    def __init__(self, settings: Settings, **pieces: Any) -> None:
        super().__init__(settings, **pieces)
        object.__setattr__(self, "calls", [])

    def detect_gpus(self) -> DetectedGpus:
        self.calls.append("detect_gpus")  # type: ignore[attr-defined]
        return super().detect_gpus()

    def free_bytes(self, path: Path) -> int | None:
        self.calls.append("free_bytes")  # type: ignore[attr-defined]
        return super().free_bytes(path)

    def resolve(self, source: str, catalog: Any, **kw: Any) -> ModelSpec | Stop:
        self.calls.append(f"resolve:{source}")  # type: ignore[attr-defined]
        return super().resolve(source, catalog, **kw)


# --------------------------------------------------------------------------------------------
# the Provider is the pipeline's only door to the outside
# --------------------------------------------------------------------------------------------

def test_pull_asks_the_provider_for_facts_gpus_and_disk(tmp_path: Path) -> None:
    h100 = DetectedGpus((DetectedGpu(0, "NVIDIA H100 80GB HBM3", 80 * GIB, Decimal("9.0"), "nvidia"),), "nvml")
    spy = SpyProvider(Settings(hf_home=tmp_path / "hf"), detect=lambda: h100, free_disk=lambda _p: 10**15)
    r = evaluate(PullRequest(CURATED, "vllm/minimal", hardware_sm=None), spy)
    assert spy.calls == [f"resolve:{CURATED}", "detect_gpus", "free_bytes"]  # type: ignore[attr-defined]
    assert r.hardware is not None and r.hardware.memory_source == "detected"


def test_gpus_flag_with_a_known_card_skips_detection(tmp_path: Path) -> None:
    spy = SpyProvider(Settings(hf_home=tmp_path / "hf"), detect=lambda: NO_GPU, free_disk=lambda _p: 10**15)
    evaluate(PullRequest(CURATED, "vllm/minimal", gpus=rig("1x3090")), spy)
    assert "detect_gpus" not in spy.calls  # type: ignore[attr-defined]


def test_injected_free_space_decides_the_disk_stratum(tmp_path: Path) -> None:
    short = evaluate(PullRequest(CURATED, "vllm/minimal", gpus=rig("1x3090")), offline_rig(free=GIB))
    plenty = evaluate(PullRequest(CURATED, "vllm/minimal", gpus=rig("1x3090")), offline_rig(free=10**15))
    assert (short.reason, short.outcome) == ("disk-short", Outcome.REFUSED)
    assert plenty.reason != "disk-short"


def test_cli_main_takes_a_provider_factory(capsys: pytest.CaptureFixture[str]) -> None:
    made: list[Settings] = []

    def factory(settings: Settings) -> LiveProvider:
        made.append(settings)
        return offline_rig(settings, free=GIB)
    code = cli.main(["pull", CURATED, "--profile-like", "vllm/minimal", "--gpus", "1x3090", "--json"],
                    provider=factory)
    doc = json.loads(capsys.readouterr().out)
    assert made and code == doc["exit_code"] == 2 and doc["reason"] == "disk-short" and doc["outcome"] == "refused"


# --------------------------------------------------------------------------------------------
# one resolver, one precedence
# --------------------------------------------------------------------------------------------

def test_a_local_folder_wins_over_the_catalog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    catalog = load_catalog()
    monkeypatch.chdir(tmp_path)
    org, name = CURATED.split("/")
    _folder(tmp_path / org / name)
    spec = resolve(CURATED, Settings(hf_home=tmp_path / "hf"), catalog)
    assert isinstance(spec, ModelSpec) and spec.source == "local"
    monkeypatch.chdir(tmp_path / org)
    assert resolve(CURATED, Settings(hf_home=tmp_path / "hf"), catalog).source == "catalog"  # type: ignore[union-attr]


def test_the_catalog_wins_over_the_hub_and_answers_every_catalog_name(fake_hub: FakeHub) -> None:
    catalog = load_catalog()
    profile = catalog.profiles["vllm/minimal"]
    for name in (CURATED, CURATED.lower(), "vllm/minimal", profile.model):
        spec = resolve(name, fake_hub.settings(), catalog)
        assert isinstance(spec, ModelSpec) and spec.source == "catalog", name
        assert spec.curated is not None and spec.curated.model_id == profile.model
    assert fake_hub.log == []


def test_offline_the_cache_answers_else_the_hub_is_unreachable(fake_hub: FakeHub, tmp_path: Path) -> None:
    from club3090.errors import HubUnreachable

    with pytest.raises(HubUnreachable):
        resolve("Qwen/Qwen3-0.6B", fake_hub.settings(offline=True), load_catalog())
    assert fake_hub.log == []


def test_kv_calc_and_pull_resolve_a_name_the_same_way(tmp_path: Path) -> None:
    """kv-calc prices what pull gates: the same facts for a folder, a repo alias, a profile key."""
    folder = _folder(tmp_path / "m")
    provider = offline_rig(Settings(hf_home=tmp_path / "hf"))
    catalog = provider.catalog()
    for name in (str(folder), CURATED, "vllm/minimal"):
        est = price(PriceRequest(model=name, gpus=rig("1x3090")), provider)
        facts = provider.resolve(name, catalog)
        assert isinstance(facts, ModelSpec) and not isinstance(est, Stop)
        assert est.architecture == facts.arch.architecture, name
        assert est.result.confidence == facts.confidence, name


def test_a_missing_folder_is_the_same_stop_everywhere(tmp_path: Path) -> None:
    provider = offline_rig(Settings(hf_home=tmp_path / "hf"))
    name = str(tmp_path / "nope")
    stop = price(PriceRequest(model=name), provider)
    assert isinstance(stop, Stop) and stop.reason is Reason.REPO_NOT_FOUND
    assert evaluate(PullRequest(name, "vllm/minimal"), provider).reason == stop.token


# --------------------------------------------------------------------------------------------
# --gpus is parsed in exactly one function
# --------------------------------------------------------------------------------------------

def _calls(name: str) -> list[str]:
    callers = []
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                func = node.func
                called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
                if called == name:
                    callers.append((str(path.relative_to(SRC)), node))
    return callers  # type: ignore[return-value]


def test_parse_gpus_has_exactly_one_caller() -> None:
    """--gpus is parsed once, in the CLI; every request carries the parsed GpuSet."""
    assert [path for path, _node in _calls("parse_gpus")] == ["cli/commands/_types.py"]


def test_the_gpus_flag_is_declared_once() -> None:
    """One declaration (``add_gpus_flag``), one help text, whichever command takes --gpus."""
    declared = [path for path, node in _calls("add_argument")
                if node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value == "--gpus"]
    assert declared == ["cli/commands/_types.py"]
    users = sorted({path for path, _node in _calls("add_gpus_flag")})
    assert {"cli/commands/pull.py", "cli/commands/kv_calc.py", "cli/commands/fits.py", "cli/commands/up.py",
            "cli/commands/swap.py"} <= set(users)


def test_no_request_carries_a_gpus_string() -> None:
    """Requests carry values: no ``gpus: str`` field is left to be parsed again downstream."""
    from dataclasses import fields

    from club3090.pipeline.fits import FitsRequest
    from club3090.pipeline.kv_calc import PriceRequest
    from club3090.pipeline.swap import SwapRequest
    from club3090.pipeline.up import UpRequest

    for kind in (PullRequest, PriceRequest, FitsRequest, UpRequest):
        gpus = next(f for f in fields(kind) if f.name == "gpus")
        assert "GpuSet" in str(gpus.type) and "str" not in str(gpus.type), kind
    # swap's launch options are up's own request, not a second copy of its fields
    assert [f.name for f in fields(SwapRequest)] == ["up", "emit_only", "served_model_name"]


def test_a_bad_gpus_spec_is_a_usage_error_before_any_network(fake_hub: FakeHub, monkeypatch) -> None:
    from club3090 import cli

    fake_hub.add_fixture("Qwen--Qwen2.5-7B")
    monkeypatch.setenv("HF_ENDPOINT", fake_hub.url)
    for command in (["pull", "Qwen/Qwen2.5-7B", "--profile-like", "vllm/minimal"], ["kv-calc", "Qwen/Qwen2.5-7B"],
                    ["fits", "Qwen/Qwen2.5-7B"]):
        assert cli.main([*command, "--gpus", "1xnosuchcard"]) == 64
    assert fake_hub.log == []


# --------------------------------------------------------------------------------------------
# probes say why they found nothing
# --------------------------------------------------------------------------------------------

class _Proc:
    def __init__(self, code: int, out: bytes = b"") -> None:
        self.returncode, self.stdout = code, out


def test_every_failed_probe_leaves_a_note() -> None:
    class NoNvml:
        def nvmlInit(self) -> None:
            raise OSError("libnvidia-ml.so.1: cannot open shared object file")

    def run(argv: list[str], **_k: Any) -> _Proc:
        if argv[0] == "nvidia-smi":
            return _Proc(9, b"NVIDIA-SMI has failed")
        raise FileNotFoundError(argv[0])

    result = detect(nvml=NoNvml(), run=run, platform="linux")
    assert result.source == "none" and result.count == 0
    assert [n.split(":")[0] for n in result.notes] == ["nvml", "nvidia-smi", "amd-smi", "rocm-smi"]
    assert "libnvidia-ml" in result.notes[0] and "exited 9" in result.notes[1]
    assert "not found" in result.notes[2]


def test_detection_notes_in_json_and_on_stderr_with_debug(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    found = DetectedGpus((), "none", ("nvml: pynvml unavailable", "nvidia-smi: nvidia-smi not found"))

    def factory(settings: Settings) -> LiveProvider:
        return offline_rig(settings, detected=found)
    argv = ["pull", CURATED, "--profile-like", "vllm/minimal", "--json"]
    cli.main(argv, provider=factory)
    doc = json.loads(capsys.readouterr().out)
    assert doc["detection_notes"] == list(found.notes)
    cli.main(["--debug", *argv], provider=factory)
    err = capsys.readouterr().err
    assert "nvidia-smi: nvidia-smi not found" in err
    cli.main(argv, provider=factory)
    assert "nvidia-smi not found" not in capsys.readouterr().err


# --------------------------------------------------------------------------------------------
# the library API
# --------------------------------------------------------------------------------------------

def test_public_api_is_documented_and_resolves() -> None:
    for name in club3090.__all__:
        value = getattr(club3090, name)
        assert name == "__version__" or value.__doc__, name
    assert club3090.evaluate_pull is evaluate and club3090.LiveProvider is LiveProvider


def test_importing_the_package_loads_no_pipeline() -> None:
    script = ("import sys, club3090; "
              "print(sorted(m for m in sys.modules if m.startswith('club3090.') or m in ('yaml', 'rich', "
              "'huggingface_hub')))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60,
                         env={"PYTHONPATH": str(SRC.parent), "PATH": "/usr/bin:/bin"}).stdout
    assert out.strip() == "['club3090.version']"


def test_every_outcome_has_one_exit_code() -> None:
    from club3090.cli.exit_codes import TOOL_FAILURE_CODES, VERDICT_CODES

    assert set(VERDICT_CODES) == set(Outcome)
    assert not set(VERDICT_CODES.values()) & set(TOOL_FAILURE_CODES)


def test_the_derived_stages_run_on_the_providers_own_seams(tmp_path: Path) -> None:
    """``pull --out``'s [E] (download, docker, boot) asks the same runner, lookup, HTTP and clock as
    ``up``: one set of seams, the Provider's."""
    from club3090.edges.boot import RunResult
    from club3090.edges.provider import LiveProvider
    from club3090.settings import Settings

    slept: list[float] = []

    def run(argv: Any, timeout: float) -> RunResult:
        return RunResult(0, "ran", "")

    def which(name: str) -> str | None:
        return f"/opt/{name}"

    def http(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("not called")

    provider = LiveProvider(Settings(hf_home=tmp_path), run=run, which=which, http_client=http,
                            ticker=lambda: 42.0, sleeper=slept.append)
    stages = provider.derived_stages(no_boot=True, progress=None)
    assert stages is not None and stages.no_boot and not stages.bar
    assert stages.runner is run and stages.which is which and stages.http is http
    assert stages.clock() == 42.0
    stages.sleep(3.0)
    assert slept == [3.0]

