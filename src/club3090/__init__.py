"""club3090: will this Hugging Face model run on my GPUs under vLLM, and how to launch it.

The library API, usable from a notebook without the CLI::

    from club3090 import LiveProvider, PullRequest, Settings, evaluate_pull, parse_gpus

    provider = LiveProvider(Settings.from_env())
    gpus = parse_gpus("1x3090", provider.catalog())
    result = evaluate_pull(PullRequest("Qwen/Qwen3-8B", "vllm/minimal", gpus=gpus), provider)
    result.outcome, result.raw_verdict, result.notices

Entry points (each runs the stages of docs/DESIGN.md and returns a value; refusals are values,
tool failures raise a ``Club3090Error``):

- ``evaluate_pull(PullRequest, provider) -> PullResult``: the pull gate and its emission;
- ``kv_calc(PriceRequest, provider) -> Estimate | NoFit | Stop``: the fit alone;
- ``inspect_model(source, provider) -> ModelSpec | Stop``: the model facts alone;
- ``load_catalog() -> Catalog``: the packaged catalog.

I/O goes through a ``Provider`` (the protocol); ``LiveProvider(settings)`` is the real one, with
keywords to replace single pieces (GPU detection, free disk, clock, Hub source).

Names are imported on first use (``__getattr__``), so ``import club3090`` and ``club3090 --help``
stay fast.
"""

from __future__ import annotations

import importlib
from typing import Any

from club3090.version import __version__

# public name -> (module, attribute)
_EXPORTS: dict[str, tuple[str, str]] = {
    # entry points
    "evaluate_pull": ("club3090.pipeline.pull", "evaluate"),
    "kv_calc": ("club3090.pipeline.kv_calc", "price"),
    "inspect_model": ("club3090.pipeline.inspect", "inspect_model"),
    "load_catalog": ("club3090.catalog", "load_catalog"),
    # request / result types
    "PullRequest": ("club3090.pipeline.pull", "PullRequest"),
    "PullResult": ("club3090.pipeline.pull", "PullResult"),
    "PriceRequest": ("club3090.pipeline.kv_calc", "PriceRequest"),
    "PriceSettings": ("club3090.fit.estimate", "PriceSettings"),
    "ShapeRequest": ("club3090.fit.shape", "ShapeRequest"),
    "AUTO": ("club3090.fit.shape", "AUTO"),
    "GpuSet": ("club3090.rig.gpus", "GpuSet"),
    "parse_gpus": ("club3090.rig.gpus", "parse_gpus"),
    "Estimate": ("club3090.fit.estimate", "Estimate"),
    "NoFit": ("club3090.fit.estimate", "NoFit"),
    "FitResult": ("club3090.fit.memory", "FitResult"),
    "Unpriceable": ("club3090.fit.memory", "Unpriceable"),
    "ModelSpec": ("club3090.model.spec", "ModelSpec"),
    "Stop": ("club3090.outcome", "Stop"),
    "Notice": ("club3090.outcome", "Notice"),
    "Outcome": ("club3090.outcome", "Outcome"),
    "Settings": ("club3090.settings", "Settings"),
    # I/O
    "Provider": ("club3090.pipeline.provider", "Provider"),
    "LiveProvider": ("club3090.edges.provider", "LiveProvider"),
    # errors
    "Club3090Error": ("club3090.errors", "Club3090Error"),
    "UsageError": ("club3090.errors", "UsageError"),
    "HubError": ("club3090.errors", "HubError"),
    "RepoNotFound": ("club3090.errors", "RepoNotFound"),
    "GatedRepo": ("club3090.errors", "GatedRepo"),
    "RevisionNotFound": ("club3090.errors", "RevisionNotFound"),
    "EntryNotFound": ("club3090.errors", "EntryNotFound"),
    "HubUnreachable": ("club3090.errors", "HubUnreachable"),
    "InputError": ("club3090.errors", "InputError"),
    "CatalogError": ("club3090.errors", "CatalogError"),
    "InterpolationError": ("club3090.errors", "InterpolationError"),
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    try:
        module, attr = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module 'club3090' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)

