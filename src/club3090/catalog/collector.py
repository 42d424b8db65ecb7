"""The catalog's problem collector: checks one file's envelope and records against their specs.

``Collector`` gathers every problem (file, key path, message) instead of stopping at the first;
it checks a mapping against a ``Spec`` (unknown keys get a closest-key or retired-key hint,
required keys, value checks), a file's ``{schema_version, <section>, corrections}`` envelope, and
record ids. The section builders, the corrections check and the cross-reference checks report
through it.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from club3090.errors import Problem

from .schema import FILES, RETIRED_KEYS, SUPPORTED_SCHEMA_VERSIONS, Bad, Nested, Spec, describe, t_id

SECTION = {name: name.rsplit(".", 1)[0] for name in FILES}
ENVELOPE_KEYS = ("schema_version", "corrections")

# ----------------------------------------------------------------------------- collector

class Collector:
    def __init__(self) -> None:
        self.problems: list[Problem] = []
        self.file = ""

    def add(self, path: str, message: str, file: str | None = None) -> None:
        self.problems.append(Problem(file or self.file, path, message))

    def record(self, data: Any, path: str, spec: Spec,
               nested: Mapping[str, Nested] | None = None) -> dict[str, Any] | None:
        """Check one mapping against ``spec``; keys in ``nested`` are passed through raw (the
        builder checks them)."""
        nested = nested or {}
        if not isinstance(data, dict):
            self.add(path, f"expected a mapping, got {describe(data)}")
            return None
        out: dict[str, Any] = {}
        ok = True
        known = list(spec) + list(nested)
        for key in data:
            if key not in known:
                close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.6)
                hint = (f"; no longer a catalog field: {RETIRED_KEYS[key]}" if key in RETIRED_KEYS
                        else f"; did you mean '{close[0]}'?" if close else f"; allowed: {', '.join(known)}")
                self.add(f"{path}.{key}", "unknown key" + hint)
                ok = False
        for key, f in spec.items():
            if key not in data:
                if f.required:
                    self.add(f"{path}.{key}", "missing required key")
                    ok = False
                out[key] = f.default
                continue
            try:
                out[key] = f.check(data[key])
            except Bad as exc:
                self.add(f"{path}.{key}", str(exc))
                out[key] = f.default
                ok = False
        for key in nested:
            out[key] = data.get(key)
        out["__ok__"] = ok
        return out

    def section(self, doc: Any, name: str, kind: type = dict[str, Any]) -> Any:
        """Check the file envelope; return the section body (a dict or list) or an empty one."""
        section = SECTION[name]
        if not isinstance(doc, dict):
            self.add("<file>", "expected a mapping with schema_version and " + section)
            return kind()
        for key in doc:
            if key not in (*ENVELOPE_KEYS, section):
                close = difflib.get_close_matches(str(key), [*ENVELOPE_KEYS, section], n=1)
                hint = f"; did you mean '{close[0]}'?" if close else ""
                self.add(str(key), "unknown key" + hint)
        version = doc.get("schema_version")
        if version not in SUPPORTED_SCHEMA_VERSIONS:
            self.add("schema_version", f"unsupported schema version {describe(version)}; "
                                       f"this club3090 reads {SUPPORTED_SCHEMA_VERSIONS}")
        body = doc.get(section)
        if body is None:
            self.add(section, "missing required key")
            return kind()
        if not isinstance(body, kind):
            self.add(section, f"expected a {'mapping' if kind is dict else 'list'}")
            return kind()
        return body

    def entries(self, body: dict[str, Any], section: str) -> list[tuple[str, str, Any]]:
        out = []
        for key, value in body.items():
            path = f"{section}[{key!r}]"
            try:
                t_id(key)
            except Bad as exc:
                self.add(path, f"bad id: {exc}")
                continue
            out.append((key, path, value))
        return out
