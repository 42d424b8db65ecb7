"""The one exit-code table: verdict codes (what the answer was) and tool-failure codes (sysexits).

Results carry an :class:`club3090.outcome.Outcome`; :func:`exit_code` turns it into the
process status. Tool failures are exceptions mapped by ``club3090.cli.ERRORS``.

====  =========================================================================================
code  meaning
====  =========================================================================================
0     ok: fits, accepted, emitted
1     failed: a ``verify`` check, ``bench`` run or ``soak`` criterion failed
2     refused: a stop, hard-block, does not fit, cannot be priced, a failed [E] stage; for
      ``verify`` / ``bench`` / ``soak``: the server is unreachable or the soak inconclusive
3     needs an acknowledgement flag (``--yes``, ``--force-download``)
4     listing only (``compose --list``)
64    usage error (EX_USAGE)
65    malformed input file (EX_DATAERR)
69    a service is unavailable: the Hub, or ``gh`` for a submission (EX_UNAVAILABLE)
70    internal error (EX_SOFTWARE)
78    invalid catalog (EX_CONFIG)
130   interrupted (Ctrl-C)
141   stdout closed early by its reader (``| head``; 128 + SIGPIPE)
====  =========================================================================================
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from club3090.outcome import Outcome

VERDICT_CODES: Mapping[Outcome, int] = MappingProxyType({
    Outcome.OK: 0,
    Outcome.REFUSED: 2,
    Outcome.NEEDS_ACK: 3,
    Outcome.LISTING_ONLY: 4,
    Outcome.FAILED: 1,
    Outcome.INCONCLUSIVE: 2,
})

USAGE = 64
DATAERR = 65
UNAVAILABLE = 69
SOFTWARE = 70
CONFIG = 78
INTERRUPTED = 130
PIPE = 141

TOOL_FAILURE_CODES = (USAGE, DATAERR, UNAVAILABLE, SOFTWARE, CONFIG, INTERRUPTED, PIPE)


def exit_code(outcome: Outcome) -> int:
    """The process status for a verdict."""
    return VERDICT_CODES[Outcome(outcome)]


def with_exit_code(doc: Mapping[str, Any], outcome: Outcome) -> dict[str, Any]:
    """A result's JSON with the process status it gives (results carry outcomes, never numbers)."""
    return {"exit_code": exit_code(outcome), **doc}


__all__ = ["CONFIG", "DATAERR", "INTERRUPTED", "PIPE", "SOFTWARE", "TOOL_FAILURE_CODES", "UNAVAILABLE", "USAGE",
           "VERDICT_CODES", "exit_code", "with_exit_code"]
