"""A person's default profile per curated model (``club3090 profiles --set-default MODEL KEY``),
kept as ``profile-defaults.json`` in the state folder (``settings.state_dir``); written atomically."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from club3090.edges.files import atomic_write_text, path_exists, read_json_capped
from club3090.errors import InputError
from club3090.settings import state_dir

__all__ = ["FILENAME", "defaults_path", "read_defaults", "write_default"]

FILENAME = "profile-defaults.json"
_LIMIT = 1 << 20         # a map of model ids to profile keys: far under a megabyte


def defaults_path(env: Mapping[str, str] | None = None) -> Path:
    return state_dir(env) / FILENAME


def read_defaults(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """{model id: profile key}; an absent file is no defaults, a malformed one an InputError (65)."""
    path = defaults_path(env)
    if not path_exists(path):
        return {}
    doc = read_json_capped(path, limit=_LIMIT)
    defaults = doc.get("defaults") if isinstance(doc, dict) else None
    if not isinstance(defaults, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                  for k, v in defaults.items()):
        raise InputError(str(path), 'not {"defaults": {MODEL: PROFILE, ...}}; fix or delete it')
    return dict(defaults)


def write_default(model_id: str, key: str | None, env: Mapping[str, str] | None = None) -> Path:
    """Store (``key`` None: forget) the default profile of ``model_id``; returns the file written."""
    defaults = read_defaults(env)
    if key is None:
        defaults.pop(model_id, None)
    else:
        defaults[model_id] = key
    path = defaults_path(env)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps({"defaults": dict(sorted(defaults.items()))}, indent=2) + "\n")
    return path
