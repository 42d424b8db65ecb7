"""The one rule that turns a repo id or path into a safe name (folder, served model name)."""

from __future__ import annotations

import re

DEFAULT_MAX = 128


def sanitize_slug(text: str, *, max_len: int = DEFAULT_MAX) -> str:
    """``Org/Model`` -> ``org-model``: safe as a folder name and as a served model name.

    Lowercase; runs outside ``[a-z0-9._-]`` become ``-``; repeated ``-`` and ``.`` collapse (so
    ``..`` never survives); ``-._`` stripped at both ends; at most ``max_len`` characters;
    empty -> ``model``.
    """
    out = re.sub(r"[^a-z0-9._-]+", "-", str(text).lower())
    out = re.sub(r"-{2,}", "-", out)
    out = re.sub(r"\.{2,}", ".", out)
    out = out.strip("-._")[:max_len].strip("-._")
    return out or "model"
