"""Terminal-safe text: what a repo, a header or the Hub says is data, never terminal control.

Architecture names, model types, file names, tensor names and repo ids come from strangers. An
escape sequence in one could clear the screen or paint a fake ``FITS`` line; rich markup
(``[link=…]``, ``[/]``) could become a live hyperlink or crash the renderer. Every command prints
such text through this module:

- ``safe(text)``: control and format characters (C0, DEL, C1, bidi overrides, line separators)
  become visible ``\\uXXXX`` escapes. The escape is valid inside a JSON string, so JSON text can
  go through ``safe(..., multiline=True)`` as well. ``multiline`` keeps ``\\n`` and ``\\t``, for a
  block whose lines were each built by the program.
- ``safe_markup(text)``: ``safe`` plus rich markup escaping, for text placed inside markup.
- ``terminal_console(...)``: a rich ``Console`` with markup, emoji codes and highlighting off
  that passes every string it renders (``print`` arguments, table cells) through ``safe``.
- Credentials written into a URL (``https://user:pass@host``) are masked by ``safe`` too.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from typing import Any

from club3090.settings import redact_url_credentials
from club3090.units import GiB

_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"})



def _visible(ch: str) -> str:
    code = ord(ch)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def safe(value: object, *, multiline: bool = False) -> str:
    """``value`` as text that cannot drive a terminal (see the module docstring)."""
    text = redact_url_credentials(str(value))
    if text.isascii() and text.isprintable():
        return text
    # printable ASCII is always safe: only the other characters are looked at (a long JSON
    # document is mostly ASCII, and a per-character loop over it is slow)
    return (_OTHER_MULTILINE if multiline else _OTHER).sub(_escaped, text)


_OTHER = re.compile(r"[^\x20-\x7e]")
_OTHER_MULTILINE = re.compile(r"[^\x20-\x7e\n\t]")


def _escaped(match: re.Match[str]) -> str:
    ch = match.group()
    return _visible(ch) if unicodedata.category(ch) in _UNSAFE_CATEGORIES else ch


def emit(*parts: object, **kwargs: Any) -> None:
    """``print``, with what bundles and logs say made terminal-safe."""
    print(*(safe(part) for part in parts), **kwargs)


def safe_markup(value: object) -> str:
    """``safe`` text with rich markup escaped, for interpolation into a markup string."""
    from rich.markup import escape

    return escape(safe(value))


def terminal_console(**kwargs: Any) -> Any:
    """A rich ``Console`` whose every rendered string went through ``safe`` (markup off)."""
    from rich.console import Console

    class _SafeConsole(Console):
        def render_str(self, text: str, **options: Any) -> Any:
            options["markup"] = False
            options["emoji"] = False
            return super().render_str(safe(text), **options)

    kwargs.setdefault("highlight", False)
    return _SafeConsole(markup=False, emoji=False, **kwargs)


CONFIDENCE_WORDS = {"exact": "exact (curated)", "derived": "derived", "estimated-lower-bound": "estimated"}


def confidence_text(confidence: str | None, fit: Any = None) -> str:
    """The confidence a person reads: the gate's word, or the local measurement that priced the fit
    (``exact (measured here)``; ``estimated, calibrated (measured here, near shape) ±0.05 GiB``)."""
    calibration = getattr(fit, "calibration", None)
    word = CONFIDENCE_WORDS.get(confidence or "", confidence or "")
    if calibration is None:
        return word
    if confidence == "exact" and calibration.label.startswith("exact"):
        return str(calibration.label)
    return f"{word}, {calibration.label} ±{calibration.band_bytes / GiB:.2f} GiB"


def concurrency_text(fit: Any) -> str:
    """What the server does at once: ``min(max_num_seqs, KV capacity)`` full-length requests, and the
    KV room said apart when the profile serves fewer than the pool holds ("1 concurrent full-length
    request (KV room for 46; this profile serves 1 at a time)")."""
    from club3090.fit.estimate import served_concurrency

    room, seqs, served = int(fit.max_concurrency), int(fit.settings.max_num_seqs), served_concurrency(fit)
    text = f"{served} concurrent full-length request{'s' if served != 1 else ''}"
    if seqs < room:
        text += f" (KV room for {room}; this profile serves {seqs} at a time)"
    return text


def gpus_text(names: Sequence[str]) -> str:
    """GPU ids or names as the headline says them: ``2x RTX 3090`` when alike, else a list, each by
    its catalog display name without the vendor prefix."""
    from club3090.catalog import load_catalog

    gpus = load_catalog().gpus
    shown = [(gpus[n].display_name if n in gpus else n).removeprefix("NVIDIA ").removeprefix("GeForce ")
             for n in names] or ["GPU"]
    return f"{len(shown)}x {shown[0]}" if len(set(shown)) == 1 else ", ".join(shown)
