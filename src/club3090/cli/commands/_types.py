"""argparse ``type=`` functions shared by the commands: a bad value is a usage error (exit 64, and
the CLI's JSON error document under ``--json``), never a traceback or a silently odd run."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


def bounded(kind: type, *, low: float | None = None, high: float | None = None,
            low_open: bool = False, what: str | None = None) -> Callable[[str], float]:
    """A parser for a finite ``kind`` (int or float) in [low, high] (``(low, high]`` with low_open)."""
    noun = what or ("an integer" if kind is int else "a number")
    if low is not None and high is not None:
        rng = f"in {'(' if low_open else '['}{low:g}, {high:g}]"
    elif low is not None:
        rng = f"{'>' if low_open else '>='} {low:g}"
    else:
        rng = f"<= {high:g}" if high is not None else ""

    def parse(text: str) -> float:
        try:
            value: float = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {noun}, got {text!r}") from None
        too_low = low is not None and (value <= low if low_open else value < low)
        if not math.isfinite(value) or too_low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"expected {noun} {rng}, got {text!r}".replace("  ", " "))
        return value

    parse.__name__ = what or kind.__name__
    return parse


positive_int = bounded(int, low=1)
non_negative_int = bounded(int, low=0)
positive_number = bounded(float, low=0, low_open=True)
non_negative_number = bounded(float, low=0)
fraction = bounded(float, low=0, high=1, low_open=True, what="a fraction")
seconds = bounded(float, low=0, low_open=True, what="a number of seconds")
token_count = bounded(int, low=1, high=2_000_000, what="a token count")
