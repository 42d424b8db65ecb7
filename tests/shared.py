"""The shared fixtures beside the clone (``../shared``): required, never skipped.

CI checks them out next to the repository; a missing tree is a hard failure that says so, not a
silent skip of the estimator's and the architecture parser's tests.
"""

from __future__ import annotations

from pathlib import Path

SHARED = Path(__file__).resolve().parents[2] / "shared"


def shared_path(*parts: str) -> Path:
    """``../shared/<parts>``; raises (failing collection) when it is not there."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        raise FileNotFoundError(f"the shared fixtures are required: {path} is missing "
                                "(check out the shared tree beside this clone, as CI does)")
    return path
