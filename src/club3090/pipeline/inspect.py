"""``inspect``: the model-facts stage alone, through the one resolver."""

from __future__ import annotations

from typing import TYPE_CHECKING

from club3090.outcome import Outcome, Stop

if TYPE_CHECKING:  # pragma: no cover - typing only
    from collections.abc import Callable

    from club3090.model.spec import ModelSpec
    from club3090.pipeline.provider import Provider


def inspect_model(source: str, provider: "Provider", *,
                  progress: "Callable[[int, int], None] | None" = None) -> "ModelSpec | Stop":
    """The facts of ``source`` (repo id, folder, HF cache, catalog name) or its stratum-1 stop;
    ``progress(done, total)`` while safetensors headers are read."""
    return provider.resolve(source, provider.catalog(), progress=progress)


def inspect_outcome(result: "ModelSpec | Stop") -> Outcome:
    return Outcome.REFUSED if isinstance(result, Stop) else Outcome.OK


__all__ = ["inspect_model", "inspect_outcome"]
