"""The corrections check: each file's ``corrections`` must name records and fields that exist.

A correction records where the catalog deviates from upstream's data and why; it names the
corrected values by the same key paths problems use, so evidence cannot silently outlive the data
it explains.
"""

from __future__ import annotations

import difflib
import re
from typing import Any

from . import model as m
from .collector import Collector
from .schema import CORRECTION_SPEC, SCHEMA_BY_FILE, describe

_PATH_RE = re.compile(r"^(?P<section>[a-z_]+)\[(?P<q>['\"])(?P<id>.+?)(?P=q)\](?P<rest>.*)$")


def build_corrections(c: Collector, name: str, doc: Any, body: Any) -> list[m.Correction]:
    """The file's ``corrections``: each names existing records (and a field of their spec) by the
    same key paths problems use, so evidence cannot silently outlive the data it explains."""
    raw = doc.get("corrections") if isinstance(doc, dict) else None
    if raw is None:
        return []
    if not isinstance(raw, list):
        c.add("corrections", "expected a list")
        return []
    schema = SCHEMA_BY_FILE[name]
    ids = ({str(a.get("id")) for a in body if isinstance(a, dict)} if isinstance(body, list)
           else set(body))
    fields = [*schema.spec, *schema.nested]
    out = []
    for i, item in enumerate(raw):
        rec = c.record(item, f"corrections[{i}]", CORRECTION_SPEC)
        if not rec or not rec.pop("__ok__"):
            continue
        ok = True
        for j, path in enumerate(rec["paths"]):
            where = f"corrections[{i}].paths[{j}]"
            match = _PATH_RE.match(path)
            if match is None or match["section"] != schema.section:
                c.add(where, f"expected {schema.section}['<id>'] or {schema.section}['<id>'].<field>..., "
                             f"got {describe(path)}")
                ok = False
                continue
            if match["id"] not in ids:
                close = difflib.get_close_matches(match["id"], sorted(ids), n=1, cutoff=0.6)
                hint = f"; did you mean '{close[0]}'?" if close else ""
                c.add(where, f"names no record of {name}: {match['id']!r}{hint}")
                ok = False
            head = re.match(r"^\.([A-Za-z_]+)", match["rest"])
            if match["rest"] and (head is None or head.group(1) not in fields):
                close = difflib.get_close_matches(head.group(1) if head else match["rest"], fields, n=1)
                hint = f"; did you mean '{close[0]}'?" if close else ""
                c.add(where, f"names no field of a {schema.section} record: {describe(match['rest'])}{hint}")
                ok = False
        if ok:
            out.append(m.Correction(file=name, **rec))
    return out
