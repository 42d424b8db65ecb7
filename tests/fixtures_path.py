"""The data the tests read: copied into ``tests/fixtures/`` so a lone clone runs the whole suite.

``hub/`` holds real ``config.json`` files (and index files) of public models, each with a
``SOURCE.md``; ``calibration/`` holds public vLLM start-up records. Both are data, not code.
"""

from __future__ import annotations

from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def fixture_path(*parts: str) -> Path:
    """``tests/fixtures/<parts>``; raises (failing collection) when it is not there."""
    path = FIXTURES.joinpath(*parts)
    if not path.exists():
        raise FileNotFoundError(f"test fixture missing: {path}")
    return path
