"""Flags shared by ``verify``, ``verify-stress``, ``bench`` and ``soak`` (clients of a running
OpenAI-compatible server).

``--url`` (env ``URL``, default ``http://localhost:8020/v1``; ``/v1`` is appended when missing),
``--model`` (env ``MODEL``; default the first id of ``/v1/models``), ``--api-key`` (env
``OPENAI_API_KEY``; sent only as ``Authorization: Bearer``, never printed or written, never sent
to another origin after a redirect), ``--timeout`` (seconds per request: connect, first byte and
whole body), ``--stall`` (longest silence inside a streamed answer), ``--deadline`` (seconds for
the whole run) and ``--json``. The environment is read in ``run``, never at import.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping
from typing import Any

from club3090.cli.commands._types import add_command, seconds

DEFAULT_URL = "http://localhost:8020/v1"


STALL_S = 120.0


def server_command(sub: Any, name: str, doc: str | None, *, help: str, timeout: float,
                   deadline: float) -> argparse.ArgumentParser:
    """A command against a running server (``verify``, ``bench``, ``soak``): its description is
    its module docstring, its flags the ones every such command takes."""
    p = add_command(sub, name, doc, help=help)
    add_common(p, timeout=timeout, deadline=deadline)
    return p


def add_common(p: argparse.ArgumentParser, *, timeout: float, deadline: float) -> None:
    p.add_argument("--url", help=f"server base URL (env URL; default {DEFAULT_URL})")
    p.add_argument("--model", help="served model id (env MODEL; default: the first id from /v1/models)")
    p.add_argument("--api-key", help="bearer token (env OPENAI_API_KEY, preferred: flags show in `ps`)")
    p.add_argument("--timeout", type=seconds, default=timeout,
                   help=f"seconds per request: connect, first byte and whole body (default {timeout:g})")
    p.add_argument("--stall", type=seconds, default=STALL_S,
                   help=f"longest silence in seconds inside a streamed answer (default {STALL_S:g})")
    p.add_argument("--deadline", type=seconds, default=deadline,
                   help=f"seconds for the whole run (default {deadline:g})")
    p.add_argument("--json", action="store_true", help="machine-readable output on stdout")


def make_client(args: argparse.Namespace, *, env: Mapping[str, str] | None = None, http: Any = None,
                clock: Callable[[], float] | None = None) -> tuple[Any, str | None]:
    """(OpenAIClient, model or None) from the flags, then the environment."""
    from club3090.edges.openai_client import OpenAIClient, urllib_http

    env = os.environ if env is None else env
    url = args.url or env.get("URL") or DEFAULT_URL
    key = args.api_key or env.get("OPENAI_API_KEY") or None
    model = args.model or env.get("MODEL") or None
    kwargs: dict[str, Any] = {"api_key": key, "timeout": args.timeout, "http": http or urllib_http,
                              "stall_s": args.stall, "deadline_s": args.deadline}
    if clock is not None:
        kwargs["clock"] = clock
    return OpenAIClient(url, **kwargs), model


def stderr_progress(args: argparse.Namespace) -> Callable[[str], None]:
    import sys

    def emit(line: str) -> None:
        print(line, file=sys.stderr, flush=True)
    return emit
