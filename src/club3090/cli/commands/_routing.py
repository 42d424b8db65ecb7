"""The profile ``pull`` / ``up`` / ``fits`` serve when a curated model is named without one: the
person's own default (state folder), and for ``up`` the catalog's engine routing and the
deprecation refusal (``pipeline/routing.py``). Notes go to stderr; ``--json`` output is unchanged."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from club3090.cli.render import safe

__all__ = ["default_notes", "routed_profile", "user_defaults"]


def user_defaults() -> dict[str, str]:
    from club3090.edges.user_defaults import read_defaults

    return read_defaults()


def routed_profile(args: argparse.Namespace, provider: Any, *, up: bool = False) -> str | None:
    """``args.profile_like`` after routing (see the module docstring); prints its notes."""
    from club3090.cli.commands._types import gpu_set
    from club3090.pipeline.routing import choose_profile

    catalog = provider.catalog()
    given = gpu_set(args, catalog)

    def count() -> int:
        return given.count if given is not None else max(len(provider.detect_gpus().gpus), 1)

    choice = choose_profile(catalog, args.source, args.profile_like, user_defaults=user_defaults(),
                            gpu_count=count if up else None, gpus_given=given.count if given else None,
                            allow_deprecated=bool(getattr(args, "allow_deprecated", False)) if up else None)
    for note in choice.notes:
        print(safe(note), file=sys.stderr)
    return choice.profile_like


def default_notes(catalog: Any, sources: Any, defaults: dict[str, str], gpus: int | None) -> None:
    """``fits``: one stderr note per named curated model the person's default applies to."""
    from club3090.pipeline.routing import choose_profile

    for source in sources:
        for note in choose_profile(catalog, source, None, user_defaults=defaults, gpus_given=gpus).notes:
            print(safe(note), file=sys.stderr)
