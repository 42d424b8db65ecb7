"""Serving engines, one package each, behind one protocol; the registry is ``pipeline/engines.py``.

An engine is the chain facts -> shape -> fit -> launch description -> preflight -> log parser
(docs/DESIGN.md §1, "Engines"). The pipeline never asks which engine by name: it asks the
registry which engine claims a request (before any network: a file or a profile only that engine
serves) or a resolver stop (after it: weights in that engine's format), then calls the engine.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # pragma: no cover - typing only
    from club3090.catalog.model import Catalog, Profile
    from club3090.outcome import Stop
    from club3090.pipeline.fits import FitsRequest, FitsRow
    from club3090.pipeline.kv_calc import PriceRequest
    from club3090.pipeline.provider import Provider
    from club3090.pipeline.up import UpRequest, UpResult
    from club3090.rig.hardware import HardwareFacts
    from club3090.validate.hints import ServerHints

__all__ = ["Engine", "Facts", "Launch", "LogReader", "Pricing"]


class Facts(Protocol):
    """Stage 1, facts: which requests are this engine's. Its facts themselves come through the
    Provider (``resolve`` for config.json and safetensors, ``resolve_gguf`` for GGUF headers)."""

    name: str                        # the catalog's engine ``type`` (``engines.yaml``)
    formats: tuple[str, ...]         # the weight formats it reads (a ``WeightVariant.format``)

    def claims(self, source: str | None) -> bool:
        """Before any network: ``source`` is a file only this engine reads (a profile is claimed by
        the engine its catalog record names, in the registry)."""
        ...

    def claims_stop(self, stop: "Stop") -> bool:
        """After the resolver: the stop says the weights are in this engine's format."""
        ...


class Pricing(Protocol):
    """Stages 2 and 3, shape and fit: the engine's shape for a rig, priced by its memory model;
    one entry per question the CLI asks (the stages inside are the engine's own modules)."""

    def price(self, request: "PriceRequest", provider: "Provider") -> Any:
        """``kv-calc``: facts -> shape -> fit, as a frozen value the CLI renders."""
        ...

    def fits_row(self, name: str, provider: "Provider", hw: "HardwareFacts", request: "FitsRequest", *,
                 label: str | None = None, only: tuple[str, ...] = ()) -> "FitsRow":
        """``fits``: the model's best shape on the rig (``only``: these files of the repo)."""
        ...


class Launch(Protocol):
    """Stages 4 and 5, launch description and preflight, then start and verify through the launcher
    registry (``edges/launchers``); the flags verify needs, in this server's names."""

    tools_flag: str                  # the launch flag without which the server answers no tool calls
    verify_hints: "ServerHints"      # the flags a failed verify check points at

    def up(self, req: "UpRequest", provider: "Provider", *, catalog: "Catalog",
           profile: "Profile | None") -> "UpResult":
        """``up`` past the gate: launch description -> preflight -> bundle -> start -> verify."""
        ...


class LogReader(Protocol):
    """Stage 6, the log parser: what a start-up log measured, for receipts and calibration."""

    @property
    def log_parser(self) -> "Callable[[str], Any] | None":
        """The start-up log -> the measured terms a receipt records (None: no receipts yet)."""
        ...


class Engine(Facts, Pricing, Launch, LogReader, Protocol):
    """One serving engine: the six stages as one object (``pipeline/engines.py`` lists them). A
    caller that needs one stage types its argument with that stage's protocol."""
