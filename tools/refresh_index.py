#!/usr/bin/env python3
"""Refresh the open-model index from the Hugging Face Hub: configs and real file sizes per variant.

    python tools/refresh_index.py [--index PATH] [--only ID ...] [--write] [--json]

For every model of the index (``src/club3090/catalog/data/open_models.yaml`` by default; ``--only``
picks some): the model repository's ``config.json`` (trimmed to the keys the fit reads:
``catalog.open_index.trim_config``; the row becomes ``geometry: config``), the weight bytes of each
safetensors variant (the index file's ``total_size``, else the sum of its ``*.safetensors`` files)
and, for the first GGUF repository of a row, every quant the repository holds with the real bytes
of its files (``quants``). Each refreshed fact names its source (``hf:REPO@COMMIT``). A repository
the Hub does not answer for (missing, gated, unreachable) is reported and its row kept as it was.

Reads through club3090's own Hub client (``HF_ENDPOINT``, ``HF_TOKEN``, its deadlines and byte
budgets); nothing is downloaded beyond JSON files. Without ``--write`` it reports what would
change; with it the index is validated by the strict loader and replaced atomically.

Exit codes: 0 nothing changed, 1 changes found (written with --write), 2 the result failed
validation, 64 usage.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
if (ROOT / "src" / "club3090").is_dir():
    sys.path.insert(0, str(ROOT / "src"))

from club3090.catalog.open_index import INDEX_FILE, parse_open_index, trim_config  # noqa: E402
from club3090.errors import CatalogError, Club3090Error  # noqa: E402

INDEX = ROOT / "src" / "club3090" / "catalog" / "data" / "index" / INDEX_FILE
HEADER = ("# The open-model index: see docs/CATALOG.md (\"The open-model index\"). Seeded from the public\n"
          "# sources each row names; refreshed from the Hub by tools/refresh_index.py. Every row is estimated.\n")


def weights_bytes(client: Any, repo: str) -> tuple[int | None, str]:
    """(bytes of the repo's safetensors weights, source) from its index file or its file sizes."""
    info = client.repo_info(repo, None)
    source = f"hf:{repo}@{(info.commit or 'unknown')[:12]}"
    if "model.safetensors.index.json" in info.names:
        total = (client.fetch_json(repo, "model.safetensors.index.json", None).get("metadata") or {}).get("total_size")
        if isinstance(total, int) and total > 0:
            return total, f"{source} model.safetensors.index.json metadata.total_size"
    sizes = [f.size_bytes for f in info.files if f.name.endswith(".safetensors") and "/" not in f.name]
    if sizes and all(isinstance(s, int) for s in sizes):
        return sum(sizes), f"{source} sum of *.safetensors file sizes"
    return None, source


def gguf_quants(client: Any, repo: str) -> dict[str, int]:
    from club3090.edges.gguf_remote import list_quants

    return {q.label: q.size_bytes for q in list_quants(client.repo_info(repo, None)) if q.size_bytes}


def refresh_model(client: Any, row: dict[str, Any]) -> list[str]:
    """Refresh one row in place; the list says what changed."""
    changes = []
    info = client.repo_info(row["repo"], None)
    config = trim_config(client.fetch_json(row["repo"], "config.json", None))
    if config != row.get("config"):
        changes.append("config")
    row.update(config=config, geometry="config",
               config_source=f"hf:{row['repo']}@{(info.commit or 'unknown')[:12]}:config.json")
    row["missing"] = [m for m in row.get("missing", []) if "full attention" not in m]
    for variant in row["variants"]:
        if variant["format"] == "safetensors":
            size, source = weights_bytes(client, variant["repo"])
            if size is not None and size != variant.get("size_bytes"):
                variant.update(size_bytes=size, size_source=source)
                variant.pop("bits_per_weight", None)
                changes.append(f"{variant['id']} size")
        else:
            quants = gguf_quants(client, variant["repos"][0])
            if quants and quants != variant.get("quants"):
                variant["quants"] = quants
                changes.append(f"gguf quants ({len(quants)})")
    return changes


def refresh(doc: dict[str, Any], only: list[str], client: Any) -> dict[str, Any]:
    report: dict[str, Any] = {"changed": {}, "failed": {}}
    for key, row in doc["models"].items():
        if only and key not in only:
            continue
        try:
            changes = refresh_model(client, row)
        except Club3090Error as exc:
            report["failed"][key] = f"{type(exc).__name__}: {exc}"
            continue
        if changes:
            report["changed"][key] = changes
    return report


def write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--index", type=Path, default=INDEX)
    parser.add_argument("--only", nargs="*", default=[], metavar="ID")
    parser.add_argument("--write", action="store_true")
    parser.add_argument("--json", action="store_true")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return 64 if exc.code else 0
    from club3090.edges.hub import HubClient
    from club3090.settings import Settings

    doc = yaml.safe_load(args.index.read_text(encoding="utf-8"))
    unknown = [k for k in args.only if k not in doc["models"]]
    if unknown:
        print(f"not in the index: {', '.join(unknown)}", file=sys.stderr)
        return 64
    report = refresh(doc, args.only, HubClient(Settings.from_env()))
    text = HEADER + yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=110)
    try:
        parse_open_index(text.encode("utf-8"), args.index.name)
    except CatalogError as exc:
        print("\n".join(["the refreshed index is invalid:", *map(str, exc.problems)]), file=sys.stderr)
        return 2
    if args.write and report["changed"]:
        write_atomic(args.index, text)
    print(json.dumps(report, indent=1) if args.json else
          "\n".join([*(f"changed {k}: {', '.join(v)}" for k, v in report["changed"].items()),
                     *(f"failed {k}: {v}" for k, v in report["failed"].items())]) or "no change")
    return 1 if report["changed"] else 0


if __name__ == "__main__":
    sys.exit(main())
