"""GPU detection through injected probes: canned NVML, nvidia-smi, amd-smi, rocm-smi, Apple."""

from __future__ import annotations

import json
import subprocess
from decimal import Decimal
from types import SimpleNamespace

import pytest

from club3090.edges import gpu_probe as hardware
from club3090.edges.gpu_probe import DetectedGpu, DetectedGpus, detect

MIB = 2**20


class FakeNvml:
    """A pynvml stand-in; ``gpus`` are (name, total_bytes, (major, minor)) per device."""

    class NVMLError(Exception):
        pass

    def __init__(self, gpus=(), *, init_error=False, cc_error=False, name_bytes=False):
        self.gpus = list(gpus)
        self.init_error = init_error
        self.cc_error = cc_error
        self.name_bytes = name_bytes
        self.calls: list[str] = []

    def nvmlInit(self):
        self.calls.append("init")
        if self.init_error:
            raise self.NVMLError("NVML Shared Library Not Found")

    def nvmlShutdown(self):
        self.calls.append("shutdown")

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetName(self, handle):
        name = self.gpus[handle][0]
        return name.encode() if self.name_bytes else name

    def nvmlDeviceGetMemoryInfo(self, handle):
        return SimpleNamespace(total=self.gpus[handle][1], free=0, used=0)

    def nvmlDeviceGetCudaComputeCapability(self, handle):
        if self.cc_error:
            raise self.NVMLError("Function Not Found")
        return self.gpus[handle][2]


class FakeRun:
    """subprocess.run stand-in: answers by argv[0] (and the query for nvidia-smi)."""

    def __init__(self, answers=None):
        self.answers = answers or {}
        self.calls: list[list[str]] = []

    def __call__(self, argv, **kwargs):
        self.calls.append(list(argv))
        assert kwargs.get("timeout"), "every probe must be bounded"
        key = argv[0] if argv[0] != "nvidia-smi" else argv[1]
        answer = self.answers.get(key)
        if answer is None:
            raise FileNotFoundError(2, "No such file or directory", argv[0])
        if isinstance(answer, BaseException):
            raise answer
        rc, out = answer
        return subprocess.CompletedProcess(argv, rc, out.encode() if isinstance(out, str) else out, b"")


NO_NVML = FakeNvml(init_error=True)
SMI_Q = "--query-gpu=index,name,memory.total,compute_cap"
SMI_Q_OLD = "--query-gpu=index,name,memory.total"

RTX3090 = ("NVIDIA GeForce RTX 3090", 24576 * MIB, (8, 6))
RTX4090 = ("NVIDIA GeForce RTX 4090", 24564 * MIB, (8, 9))
H100 = ("NVIDIA H100 80GB HBM3", 81559 * MIB, (9, 0))


def test_disabled_by_env_touches_nothing():
    nvml, run = FakeNvml([RTX3090]), FakeRun()
    result = detect(nvml=nvml, run=run, enabled=False)
    assert result.count == 0 and result.source == "disabled"
    assert nvml.calls == [] and run.calls == []


def test_conftest_disables_detection_by_default():
    from club3090.settings import Settings

    settings = Settings.from_env()
    assert settings.gpu_detect is False
    assert detect(enabled=settings.gpu_detect, nvml=FakeNvml([RTX3090]), run=FakeRun()).source == "disabled"


@pytest.mark.parametrize("value,enabled", [("", True), ("0", True), ("1", False), ("yes", False)])
def test_the_no_detect_switch_is_read_into_settings(tmp_path, value, enabled):
    from club3090.settings import Settings

    env = {"HF_HOME": str(tmp_path), "CLUB3090_NO_GPU_DETECT": value}
    assert Settings.from_env(env).gpu_detect is enabled


def test_nvml_two_3090s():
    nvml = FakeNvml([RTX3090, RTX3090])
    result = detect(nvml=nvml, run=FakeRun())
    assert result.source == "nvml" and result.count == 2
    assert result.gpus[0] == DetectedGpu(0, "NVIDIA GeForce RTX 3090", 24576 * MIB, Decimal("8.6"), "nvidia")
    assert result.min_sm() == Decimal("8.6")
    assert result.min_memory_bytes([0, 1]) == 24576 * MIB
    assert result.all_nvidia
    assert nvml.calls == ["init", "shutdown"]


def test_nvml_mixed_3090_4090_minimum_over_selected_only():
    result = detect(nvml=FakeNvml([RTX4090, RTX3090], name_bytes=True), run=FakeRun())
    assert [g.name for g in result.gpus] == ["NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 3090"]
    assert result.min_sm() == Decimal("8.6")
    assert result.min_sm([0]) == Decimal("8.9")          # W14: only the GPUs the profile uses
    assert result.min_memory_bytes() == 24564 * MIB
    assert result.memory_bytes([1, 0]) == (24576 * MIB, 24564 * MIB)
    assert result.min_sm([0, 5]) is None                  # an index that is not there
    assert result.min_sm([]) is None


def test_nvml_h100():
    result = detect(nvml=FakeNvml([H100]), run=FakeRun())
    assert result.min_sm([0]) == Decimal("9.0")
    assert result.min_memory_bytes([0]) == 81559 * MIB


def test_nvml_without_compute_capability_call_means_unknown_sm_and_shutdown():
    nvml = FakeNvml([RTX3090], cc_error=True)
    result = detect(nvml=nvml, run=FakeRun())
    assert result.gpus[0].sm is None and result.min_sm() is None
    assert result.min_memory_bytes() == 24576 * MIB
    assert nvml.calls == ["init", "shutdown"]


def test_nvml_failure_midway_still_shuts_down_and_falls_back():
    class Broken(FakeNvml):
        def nvmlDeviceGetMemoryInfo(self, handle):
            raise self.NVMLError("GPU is lost")

    nvml = Broken([RTX3090])
    run = FakeRun({SMI_Q: (0, "0, NVIDIA GeForce RTX 3090, 24576, 8.6\n")})
    result = detect(nvml=nvml, run=run)
    assert nvml.calls == ["init", "shutdown"]
    assert result.source == "nvidia-smi" and result.min_sm() == Decimal("8.6")


def test_nvml_hang_is_bounded():
    import threading

    release = threading.Event()

    class Hanging(FakeNvml):
        def nvmlInit(self):
            release.wait(5)

    try:
        result = detect(nvml=Hanging([RTX3090]), run=FakeRun(), timeout_s=0.05)
    finally:
        release.set()
    assert result.count == 0 and result.source == "none"


@pytest.mark.parametrize("text, expected_sms, expected_mib", [
    ("0, NVIDIA GeForce RTX 3090, 24576, 8.6\n1, NVIDIA GeForce RTX 3090, 24576, 8.6\n",
     ["8.6", "8.6"], [24576, 24576]),
    ("0, NVIDIA GeForce RTX 3090, 24576, 8.6\n1, NVIDIA GeForce RTX 4090, 24564, 8.9\n",
     ["8.6", "8.9"], [24576, 24564]),
    ("0, NVIDIA H100 80GB HBM3, 81559, 9.0\n", ["9.0"], [81559]),
    ("0, Weird, Name, With Commas, 1024, 7.5\n", ["7.5"], [1024]),
])
def test_nvidia_smi_fallback(text, expected_sms, expected_mib):
    run = FakeRun({SMI_Q: (0, text)})
    result = detect(nvml=NO_NVML, run=run)
    assert result.source == "nvidia-smi"
    assert [str(g.sm) for g in result.gpus] == expected_sms
    assert [g.memory_bytes // MIB for g in result.gpus] == expected_mib
    assert all(g.vendor == "nvidia" for g in result.gpus)
    assert run.calls[0] == ["nvidia-smi", SMI_Q, "--format=csv,noheader,nounits"]


def test_nvidia_smi_name_with_commas_kept_whole():
    result = detect(nvml=NO_NVML, run=FakeRun({SMI_Q: (0, "0, Weird, Name, 1024, 7.5\n")}))
    assert result.gpus[0].name == "Weird, Name"


def test_nvidia_smi_old_driver_without_compute_cap():
    run = FakeRun({SMI_Q: (6, "Field \"compute_cap\" is not a valid field to query."),
                   SMI_Q_OLD: (0, "0, NVIDIA GeForce RTX 3090, 24576\n")})
    result = detect(nvml=NO_NVML, run=run)
    assert result.count == 1 and result.gpus[0].sm is None
    assert result.min_sm() is None and result.min_memory_bytes() == 24576 * MIB


def test_nvidia_smi_compute_cap_not_available():
    result = detect(nvml=NO_NVML, run=FakeRun({SMI_Q: (0, "0, NVIDIA GeForce RTX 3090, 24576, [N/A]\n")}),)
    assert result.count == 1 and result.min_sm() is None


@pytest.mark.parametrize("answer", [
    (0, "garbage output\n"),
    (0, "0, NVIDIA GeForce RTX 3090, lots, 8.6\n"),
    (0, "x, NVIDIA GeForce RTX 3090, 24576, 8.6\n"),
    (0, "0, NVIDIA GeForce RTX 3090, 24576, 8.6\n0, NVIDIA GeForce RTX 3090, 24576, 8.6\n"),
    (0, ""),
    (9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."),
    (0, b"\xff\xfe" * (hardware.MAX_OUTPUT_BYTES)),
    subprocess.TimeoutExpired(["nvidia-smi"], 10),
    PermissionError(13, "Permission denied"),
])
def test_nvidia_smi_failures_give_an_empty_result(answer):
    run = FakeRun({SMI_Q: answer, SMI_Q_OLD: answer})
    result = detect(nvml=NO_NVML, run=run)
    assert result == DetectedGpus((), "none")
    assert result.min_sm() is None and result.min_memory_bytes() is None


def test_missing_binaries_everywhere_give_an_empty_result():
    result = detect(nvml=NO_NVML, run=FakeRun(), platform="linux")
    assert result.count == 0 and result.source == "none"


def test_missing_pynvml_falls_back(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_pynvml(name, *args, **kwargs):
        if name == "pynvml":
            raise ImportError("no pynvml")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pynvml)
    run = FakeRun({SMI_Q: (0, "0, NVIDIA GeForce RTX 3090, 24576, 8.6\n")})
    assert detect(run=run).source == "nvidia-smi"


AMD_SMI_NEW = json.dumps([
    {"gpu": 0, "asic": {"market_name": "AMD Instinct MI210", "target_graphics_version": "gfx90a"},
     "vram": {"type": "HBM2E", "size": {"value": 65520, "unit": "MB"}}},
    {"gpu": 1, "asic": {"market_name": "AMD Instinct MI210"},
     "vram": {"size": {"value": 65520, "unit": "MB"}}},
])
AMD_SMI_OLD = json.dumps({"gpu_data": [{"gpu": 0, "asic": {"market_name": "Radeon RX 7900 XTX"},
                                        "vram": {"vram_size_mb": 24560}}]})
ROCM_SMI = json.dumps({
    "card0": {"Card Series": "Radeon RX 7900 XTX", "VRAM Total Memory (B)": "25753026560"},
    "system": {"Driver version": "6.3.6"},
})


@pytest.mark.parametrize("answers, source, names, mib", [
    ({"amd-smi": (0, AMD_SMI_NEW)}, "amd-smi", ["AMD Instinct MI210"] * 2, [65520, 65520]),
    ({"amd-smi": (0, AMD_SMI_OLD)}, "amd-smi", ["Radeon RX 7900 XTX"], [24560]),
    ({"amd-smi": (0, "not json"), "rocm-smi": (0, ROCM_SMI)}, "rocm-smi", ["Radeon RX 7900 XTX"],
     [25753026560 // MIB]),
])
def test_amd_probe_feeds_the_sm_gate_only(answers, source, names, mib):
    result = detect(nvml=NO_NVML, run=FakeRun(answers))
    assert result.source == source
    assert [g.name for g in result.gpus] == names
    assert [g.memory_bytes // MIB for g in result.gpus] == mib
    assert all(g.vendor == "amd" and g.sm == Decimal("8.0") for g in result.gpus)
    assert result.min_sm() == Decimal("8.0")
    assert not result.all_nvidia
    assert result.memory_bytes() is None and result.min_memory_bytes() is None  # never to the fit


def test_apple_silicon_via_sysctl_only_on_darwin():
    run = FakeRun({"sysctl": (0, "Apple M2 Max\n")})
    result = detect(nvml=NO_NVML, run=run, platform="darwin")
    assert result.source == "sysctl"
    assert result.gpus == (DetectedGpu(0, "Apple M2 Max", None, Decimal("8.0"), "apple"),)
    assert result.min_sm() == Decimal("8.0") and result.min_memory_bytes() is None
    assert detect(nvml=NO_NVML, run=run, platform="linux").count == 0


def test_intel_mac_via_system_profiler():
    profiler = json.dumps({"SPDisplaysDataType": [{"sppci_model": "AMD Radeon Pro 5500M"},
                                                  {"sppci_model": "Intel UHD Graphics 630"}]})
    run = FakeRun({"sysctl": (0, "Intel(R) Core(TM) i9-9980HK CPU @ 2.40GHz\n"),
                   "system_profiler": (0, profiler)})
    result = detect(nvml=NO_NVML, run=run, platform="darwin")
    assert result.source == "system_profiler" and result.count == 2
    assert all(g.vendor == "apple" for g in result.gpus)


def test_nvidia_wins_over_amd():
    run = FakeRun({"amd-smi": (0, AMD_SMI_NEW)})
    result = detect(nvml=FakeNvml([RTX3090]), run=run)
    assert result.source == "nvml" and run.calls == []


def test_helpers_on_empty_result():
    empty = DetectedGpus((), "none")
    assert empty.count == 0 and not empty.all_nvidia
    assert empty.min_sm() is None and empty.min_memory_bytes() is None and empty.select() is None


def test_shared_gpu_constants_have_one_definition():
    from club3090.rig import gpus
    from club3090.rig import hardware as rig_hardware

    assert hardware.MAX_GPUS is gpus.MAX_GPUS and hardware.NON_NVIDIA_SM is gpus.NON_NVIDIA_SM
    assert rig_hardware.NON_NVIDIA_SM is gpus.NON_NVIDIA_SM and Decimal("8.0") == gpus.NON_NVIDIA_SM


@pytest.mark.parametrize("cap, sm", [("8.6", Decimal("8.6")), ("12.0", Decimal("12.0")), ("[N/A]", None),
                                     ("", None), ("8.65", None), ("0.5", None)])
def test_nvidia_smi_compute_cap_goes_through_the_one_sm_parser(cap, sm):
    (gpu,) = hardware.parse_nvidia_smi(f"0, NVIDIA GeForce RTX 3090, 24576, {cap}")
    assert gpu.sm == sm


def test_memory_used_bytes_follows_enabled_not_the_environment(monkeypatch):
    monkeypatch.setenv("CLUB3090_NO_GPU_DETECT", "1")   # ignored: the caller passes Settings.gpu_detect
    nvml = FakeNvml([RTX3090, RTX3090])
    assert hardware.memory_used_bytes(enabled=True, nvml=nvml) == (0, 0)
    monkeypatch.delenv("CLUB3090_NO_GPU_DETECT")
    off = FakeNvml([RTX3090])
    assert hardware.memory_used_bytes(enabled=False, nvml=off) is None and off.calls == []
    assert hardware.memory_used_bytes(enabled=True, nvml=NO_NVML) is None
