"""Known cliffs at the top (issue 28 item 4, design rule 2): what the catalog already knows goes
wrong for this model on this engine, printed before the verdict of ``pull`` / ``fits`` / ``up``.

Two sources, both catalog records: the arch row's ``kernel_constraints`` (the model's architecture on
the engines we pin) and the profile's own known failure mode (``status_note`` of a profile whose
status is not plain ``production``). A constraint that only says what the row does *not* assert
(``... checked per repo, not by this row``) is a scope note, not a cliff, and is left out.
Pure: records in, values out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from club3090.gate.engine_support import find_arch_row

if TYPE_CHECKING:  # pragma: no cover - typing only
    from club3090.catalog.model import Catalog, Profile

__all__ = ["Cliff", "known_cliffs"]

_SCOPE_NOTE = "not by this row"


@dataclass(frozen=True, slots=True)
class Cliff:
    """One known failure mode. ``source``: ``arch:<ArchName>`` or ``profile:<key>``."""

    source: str
    text: str

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "text": self.text}

    def line(self) -> str:
        return f"known cliff ({self.source}): {self.text}"


def known_cliffs(catalog: "Catalog", *, profile: "Profile | None" = None, curated_model: str | None = None,
                 architecture: str = "") -> tuple[Cliff, ...]:
    """The cliffs that apply to this model (its arch row) and this profile, in that order."""
    model = curated_model or (profile.model if profile is not None else None)
    row = find_arch_row(catalog, curated_model=model, architecture=architecture)
    cliffs = [Cliff(f"arch:{row.arch}", text) for text in row.kernel_constraints
              if _SCOPE_NOTE not in text] if row is not None else []
    if profile is not None and profile.status != "production" and profile.status_note:
        cliffs.append(Cliff(f"profile:{profile.key}", f"{profile.status}: {profile.status_note}"))
    return tuple(cliffs)
