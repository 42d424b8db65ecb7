"""The server flags a failed or skipped ``verify`` check points at, per engine (``engines.*.verify_hints``).

Its own small module so the engine registry, which every command loads, does not import the verify
probes and their HTTP client (``validate/verify.py`` uses these values).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["VLLM_HINTS", "ServerHints"]


@dataclass(frozen=True)
class ServerHints:
    """The server flags a failed or skipped check points at, in the engine's own names (each engine
    has one: ``engines.*.verify_hints``); the probes say vLLM's, ``verify`` puts the server's in."""

    tools: str = "is --enable-auto-tool-choice / --tool-call-parser set?"
    reasoning: str = "--reasoning-parser"


VLLM_HINTS = ServerHints()
