"""Providers for tests: the live one with pieces replaced, and one whose resolver gives fixed facts."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from club3090.edges.gpu_probe import DetectedGpus
from club3090.edges.provider import LiveProvider
from club3090.settings import Settings

NO_GPU = DetectedGpus((), "none")
FIXED_NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)


@dataclass(frozen=True)
class FixedFacts(LiveProvider):
    """A live provider whose resolver answers with ``facts`` (a ModelSpec, a Stop, or an exception
    to raise); ``None`` falls through to the real resolver."""

    facts: Any = None

    def resolve(self, source: str, catalog: Any, **kwargs: Any) -> Any:
        if isinstance(self.facts, BaseException):
            raise self.facts
        if self.facts is not None:
            return self.facts
        return super().resolve(source, catalog, **kwargs)


def offline_rig(settings: Settings | None = None, *, free: int | None = 10**15, detected: DetectedGpus = NO_GPU,
                facts: Any = None, **pieces: Any) -> FixedFacts:
    """No GPUs visible, ``free`` bytes free at HF_HOME, a fixed clock; the rest live."""
    return FixedFacts(settings or Settings(hf_home=Path("/nonexistent/hf")), facts=facts,
                      detect=lambda: detected, free_disk=lambda _p: free, clock=lambda: FIXED_NOW, **pieces)


def factory(**kwargs: Any):
    """For ``cli.main(argv, provider=factory(...))``: the settings come from the CLI."""
    return lambda settings: offline_rig(settings, **kwargs)


def plenty_of_disk(settings: Settings) -> LiveProvider:
    """The live provider with 1 PB free at HF_HOME (curated checkpoints outgrow a CI disk)."""
    return LiveProvider(settings, free_disk=lambda _p: 10**15)


def rig(spec: str | None, **flags: Any) -> Any:
    """``--gpus SPEC`` as the CLI parses it (requests carry the parsed value), None for None."""
    if spec is None:
        return None
    from club3090.catalog import load_catalog
    from club3090.rig.gpus import parse_gpus

    return parse_gpus(spec, load_catalog(), **flags)


def offline_here(tmp_path: Any, monkeypatch: Any) -> None:
    """Work in ``tmp_path`` with an empty HF_HOME there and no Hub (curated repos answer offline)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
