"""``[C1]``: confidence x raw verdict -> one of four terminals, and which flag accepts it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from club3090.fit.memory import VERDICTS
from club3090.gate.flags import FLAG_FORCE_DOWNLOAD, FLAG_YES
from club3090.outcome import Token


class Terminal(Token):
    """The four [C1] terminals. Frozen: nothing else exists."""

    PROCEED = "proceed"
    CONFIRM_PROCEED = "confirm→proceed"
    HARD_BLOCK = "hard-block"
    OVERRIDE_ACCEPTED = "override-accepted"


LOCKED_TERMINALS = frozenset(t.value for t in Terminal)
RAW_VERDICTS = VERDICTS            # memory owns the raw verdict tokens, spec the confidences


@dataclass(frozen=True, slots=True)
class TerminalCell:
    terminal: Terminal
    needs: str | None          # the flag that satisfies the cell; None: silent or blocked
    note: str


_T = Terminal
TERMINAL_TABLE: Mapping[tuple[str, str], TerminalCell] = MappingProxyType({
    ("exact", "fits-clean"): TerminalCell(_T.PROCEED, None, "silent pass"),
    ("exact", "fits-constrained"): TerminalCell(_T.CONFIRM_PROCEED, FLAG_YES,
                                          "the fit is trusted but constrained; accept the constraint"),
    ("exact", "wont-fit"): TerminalCell(_T.HARD_BLOCK, None, "the fit is trusted and it does not fit; no flag clears it"),
    ("derived", "fits-clean"): TerminalCell(_T.CONFIRM_PROCEED, FLAG_YES, "best effort; validate after boot"),
    ("derived", "fits-constrained"): TerminalCell(_T.CONFIRM_PROCEED, FLAG_YES,
                                            "best effort, and constrained; validate after boot"),
    ("derived", "wont-fit"): TerminalCell(_T.OVERRIDE_ACCEPTED, FLAG_FORCE_DOWNLOAD,
                                    "advisory: predicted not to fit; forcing it is a calibration signal, not a fit"),
    ("estimated-lower-bound", "fits-clean"): TerminalCell(_T.CONFIRM_PROCEED, FLAG_YES,
                                                    "the memory figure is a floor; likely under-modelled"),
    ("estimated-lower-bound", "fits-constrained"): TerminalCell(_T.CONFIRM_PROCEED, FLAG_YES,
                                                          "the memory figure is a floor, and constrained"),
    ("estimated-lower-bound", "wont-fit"): TerminalCell(_T.OVERRIDE_ACCEPTED, FLAG_FORCE_DOWNLOAD,
                                                  "advisory: predicted not to fit; forcing it is a "
                                                  "calibration signal, not a fit"),
})


@dataclass(frozen=True, slots=True)
class TerminalOutcome:
    terminal: Terminal
    satisfied: bool
    needs: str | None          # the flag still missing (None when satisfied or hard-blocked)
    note: str

    @property
    def reason(self) -> str | None:
        """``None`` when satisfied; ``hard-block``; or ``<terminal>:needs <flag>``."""
        if self.satisfied:
            return None
        if self.terminal is Terminal.HARD_BLOCK:
            return Terminal.HARD_BLOCK.value
        return f"{self.terminal.value}:needs {self.needs}"


def terminal_for(confidence: str, raw_verdict: str, given: frozenset[str] | set[str]) -> TerminalOutcome:
    """Look the cell up and apply the flags: ``--yes`` satisfies confirm->proceed,
    ``--force-download`` satisfies override-accepted, nothing clears hard-block."""
    cell = TERMINAL_TABLE[(confidence, raw_verdict)]
    if cell.terminal is Terminal.HARD_BLOCK:
        return TerminalOutcome(cell.terminal, False, None, cell.note)
    if cell.needs is None or cell.needs in given:
        return TerminalOutcome(cell.terminal, True, None, cell.note)
    return TerminalOutcome(cell.terminal, False, cell.needs, cell.note)

