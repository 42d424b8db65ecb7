"""Render ``docs/CATALOG.md`` from the loader's schema and the shipped corrections.

    python -m club3090.catalog.schema_doc > docs/CATALOG.md

The output is deterministic; ``tests/test_catalog_schema.py`` fails when the committed file differs.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from .schema import (
    CORRECTION_SPEC,
    FILE_SCHEMAS,
    RETIRED_KEYS,
    SUPPORTED_SCHEMA_VERSIONS,
    Field,
    FileSchema,
    Nested,
    Spec,
    label,
)

COMMAND = "python -m club3090.catalog.schema_doc > docs/CATALOG.md"

INTRO = f"""\
# The club3090 catalog

> Generated from the loader's schema (`src/club3090/catalog/schema.py`) and the shipped data's
> corrections; do not edit by hand. After changing either, regenerate from the repository root:
>
>     {COMMAND}
>
> `tests/test_catalog_schema.py` fails while this file is stale.

The catalog is the YAML under `src/club3090/catalog/data/`. It is canonical and edited by hand:
nothing generates it, and the package reads it once per process (`club3090.catalog.load_catalog()`;
`load_catalog(folder)` reads a copy, e.g. to check an edit). A clean parse of each file is
remembered in the state folder (`yaml-cache/`, `catalog/parse_cache.py`) under the SHA-256 of the
file's bytes and read back only when that hash and the stored payload's own hash match, so an
edited file is always parsed again; every check below still runs on every load. This page lists
every file, every field, its type, whether it is required, and what it means.

Rules the loader enforces (all problems are collected and reported together, each with its file
and key path, e.g. `profiles.yaml: profiles['vllm/minimal'].mem_util: expected a number in (0, 1]`):

- Every file is a mapping with `schema_version` (this club3090 reads
  {", ".join(str(v) for v in SUPPORTED_SCHEMA_VERSIONS)}), its section, and an optional
  `corrections` list. Only `yaml.safe_load` constructs are read; duplicate keys are errors.
  The version moves when a field changes shape: 2 made an arch row's `kernel_constraints`
  records (`text`, `kind`, `applies_when`) instead of prose strings, so a cliff is printed only for
  the shapes it applies to. A file of another version is refused, naming the versions read.
- Unknown keys are errors with a did-you-mean hint; missing required keys, wrong types and values
  outside an enumeration are errors. Optional fields take the default shown.
- Ids are letters, digits and `. _ + / -`. Cross-references (model, engine, drafter, KV format,
  GPU, patch and profile ids) must resolve.
- Each fact is stored once. A model's geometry is its `hf_config` (its config.json) only; the
  model's architecture and longest context are read from it. Which compose flags replay sets is
  the generator's table (`club3090.compose.generate.PARAM_SLOTS`) applied to the captured service.
- Fields marked *evidence* are for reviewers (why a value is what it is); no code decides on them.

Sizes are integer bytes; compute capabilities are strings such as `'8.6'`.

## Syncing with upstream club-3090

`python tools/sync_upstream.py --from <club-3090 checkout or snapshot> [--diff FILE] [--write] [--json]`
reads upstream's registry (entries, `defaults`, `engine_preference`, `recommended_default_models`),
its engine, drafter, model, hardware, patch and architecture files, the shipped compose of every
entry and the patch-file index, maps them into this schema and prints what changed: added entries,
entries only the catalog has (kept; a profile upstream dropped is marked `archived` and names its
`replaced_by`), renamed slugs (kept as `aliases`), pin and status changes, other field changes,
values kept by `corrections`, and what needs curating by hand. Upstream owns the fields it records
(a profile's serving shape and its `runtime` capture, a model's variants, an engine's image, ...);
the catalog owns `hf_config` of a curated model, `status_note`, `reference_gpu`, KV formats,
anchors and corrections. `--diff FILE` writes the proposed change as a unified diff for review
(`git apply FILE`); `--write` applies it to the catalog folder. An upstream file with a key the tool
does not know is refused (exit 2), naming the file and key. Exit codes: 0 no change, 1 changes
found, 2 refused, 64 usage. The upstream commit the catalog was synced from is
`upstream.yaml`'s `commit`; `club3090 --version` and every emitted file's header show it.
"""


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _default(f: Field) -> str:
    if f.required:
        return ""
    value: Any = f.default
    if value is None:
        return "null"
    if value == ():
        return "[]"
    if value == {}:
        return "{}"
    if isinstance(value, bool):
        return "true" if value else "false"
    if value == "":
        return "''"
    return f"`{value}`"


def _table(spec: Spec, nested: Mapping[str, Nested]) -> list[str]:
    rows = ["| Field | Type | Required | Default | Meaning |", "|---|---|---|---|---|"]
    for key, f in spec.items():
        meaning = ("*evidence.* " if f.documentary else "") + f.doc
        rows.append(f"| `{key}` | {_cell(label(f.check))} | {'yes' if f.required else 'no'} "
                    f"| {_default(f)} | {_cell(meaning)} |")
    for key, n in nested.items():
        kind = {"list": "list of records", "mapping": "mapping of id to record",
                "record": "record" + (" or null" if n.nullable else "")}[n.kind]
        rows.append(f"| `{key}` | {kind} (below) | {'yes' if n.required else 'no'} "
                    f"| {'' if n.required else '[]' if n.kind == 'list' else '{}'} | {_cell(n.doc)} |")
    return rows


def _nested_sections(path: str, nested: Mapping[str, Nested], depth: int) -> list[str]:
    out: list[str] = []
    for key, n in nested.items():
        suffix = {"list": f".{key}[]", "mapping": f".{key}.<id>", "record": f".{key}"}[n.kind]
        sub = path + suffix
        out += ["", f"{'#' * depth} `{sub}`", "", n.doc, "", *_table(n.spec, n.nested)]
        out += _nested_sections(sub, n.nested, depth + 1)
    return out


def _file_section(fs: FileSchema) -> list[str]:
    record = f"{fs.section}.<id>" if fs.kind == "mapping" else f"{fs.section}[]"
    shape = ("a mapping of id to record" if fs.kind == "mapping" else "a list of records")
    out = ["", f"## {fs.name}", "", fs.doc, "",
           f"`{fs.section}` is {shape}. Each record (`{record}`):", "", *_table(fs.spec, fs.nested)]
    return out + _nested_sections(record, fs.nested, 3)


def _corrections_section(corrections: Any) -> list[str]:
    out = ["", "## Corrections", "",
           "Any file may carry `corrections:`, a list recording where the catalog deviates from "
           "upstream club-3090's data and why. The loader checks that every path names a record of "
           "the file (and a field of its schema), so evidence cannot outlive the data it explains. "
           "An upstream sync must keep these values.", "", *_table(CORRECTION_SPEC, {}), "",
           "### Corrections in the shipped data", ""]
    for c in corrections:
        paths = ", ".join(f"`{p}`" for p in c.paths)
        out += [f"- **{c.file}**: {paths}", f"  - upstream: {_cell(str(c.upstream))}",
                f"  - evidence: {_cell(c.evidence)}"]
    return out


INDEX_INTRO = """\
## The open-model index

`data/index/open_models.yaml` lists open models beyond the curated catalog, so `club3090 fits`
without MODEL can rank what runs on a rig from the whole open-model world (README, "`fits`"). It is
read by its own strict loader (`catalog/open_index.py`: unknown keys with a closest-key hint,
missing keys, types and enumerations checked, every problem collected into one `CatalogError`),
versioned by `schema_version` (this club3090 reads 1) and never merged into the curated records: an
index row is always `estimated`, it holds no profile and no measurement.

Each row keeps only the `config.json` keys the architecture parser reads (`trim_config`: a key is
dropped only when the parse without it is identical), where that config came from, and its weight
variants: the base safetensors, the quantized repositories (FP8, AWQ, GPTQ, W4A16, AutoRound,
NVFP4) and the GGUF repositories. A variant's bytes are real where known (`size_bytes`, with
`size_source`: a safetensors index `total_size`, or file sizes the refresh tool read) and otherwise
derived and marked so: `bits_per_weight` times the parameter count, the quantized-checkpoint
estimate of `model/param_estimate.py` from `quantization`, or, for a GGUF quant, the shared
`gguf_quants` table (bits per weight and perplexity cost from llama.cpp's `llama-quantize` table).
A fact that could not be sourced is absent and the row's `missing` says so (the license, for every
seeded row; a row whose geometry came from a public model list rather than its config is priced with
every layer as full attention, which overstates the KV cache of sliding-window and hybrid models).

Seeded from public sources, each row naming its own: configs from ai-dynamo/aiconfigurator's and
sgl-project/ome's model-config collections and this repository's `tests/fixtures/hub`; parameter
counts, GGUF repositories, release dates and the geometry of rows without a config from the
AlexsJones/llmfit model list (`llmfit-core/data/hf_models.json`; a count far from the config's
estimate is replaced by the estimate and the row notes it); quant sizes from llama.cpp's
`tools/quantize/quantize.cpp`. UD-* (unsloth dynamic) quants have no published size table: they
appear only where the refresh tool read their files.

Refresh (maintainers with network): `python tools/refresh_index.py [--index PATH] [--only ID ...]
[--write] [--json]` reads each row's `config.json`, the weight bytes of every safetensors variant
and every quant of the first GGUF repository through club3090's Hub client (`HF_ENDPOINT`,
`HF_TOKEN`, its deadlines and budgets; only JSON files and listings are read), validates the result
with the strict loader and replaces the file atomically with `--write`; a repository the Hub does
not answer for is reported and its row kept. Exit codes: 0 no change, 1 changes, 2 invalid result,
64 usage.
"""


def _index_section() -> list[str]:
    from .open_index import INDEX_SPECS

    out = ["", INDEX_INTRO.rstrip("\n")]
    for title, key in (("`models.<id>`", "models"), ("`models.<id>.variants[]`", "variants"),
                       ("`gguf_quants.<label>`", "gguf_quants")):
        out += ["", f"### {title}", "", *_table(INDEX_SPECS[key], {})]
    return out


def render(corrections: Any = None) -> str:
    """The whole of docs/CATALOG.md. ``corrections`` defaults to the shipped catalog's."""
    if corrections is None:
        from .loader import load_catalog
        corrections = load_catalog().corrections
    lines = [INTRO.rstrip("\n"), "", "## Files", "", "| File | Section | Holds |", "|---|---|---|"]
    for fs in FILE_SCHEMAS:
        lines.append(f"| [{fs.name}](#{fs.name.replace('.', '')}) | `{fs.section}` | {_cell(fs.doc)} |")
    for fs in FILE_SCHEMAS:
        lines += _file_section(fs)
    lines += _corrections_section(corrections)
    lines += _index_section()
    lines += ["", "## Retired keys", "",
              "Keys earlier catalogs carried; the loader rejects them and says where the fact lives now.",
              "", "| Key | Now |", "|---|---|"]
    lines += [f"| `{key}` | {_cell(now)} |" for key, now in sorted(RETIRED_KEYS.items())]
    return "\n".join(lines) + "\n"


def main() -> int:
    sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
