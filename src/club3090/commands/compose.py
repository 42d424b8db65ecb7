"""`club3090 compose` (placeholder until its issue lands; replace this whole module)."""

from __future__ import annotations


def add_parser(sub) -> None:
    p = sub.add_parser("compose", help="(not yet implemented)")
    p.set_defaults(run=run)


def run(args, settings) -> int:
    raise NotImplementedError("club3090 compose is not implemented yet")
