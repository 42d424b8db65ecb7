"""`club3090 inspect SOURCE [--json] [--hf-home DIR]`: print the derived model spec.

SOURCE is a Hugging Face repo id (``org/name[@revision]``), a local folder (config.json +
safetensors), a catalog name or, with ``HF_HUB_OFFLINE=1``, a repo in the HF cache (the one
resolver, ``club3090.edges.resolve``). Only config files and
safetensors headers are read. Exit 0 with the spec; exit 2 on a stratum-1 stop (``--json``:
``{"stratum": 1, "reason": "<token>", "detail": "..."}``); 69 when the Hub cannot be reached.
Progress goes to stderr, results to stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from club3090.cli.render import safe, terminal_console
from club3090.units import gib_text


def add_parser(sub: Any) -> None:
    p = sub.add_parser("inspect", help="derive a model's spec from its config and safetensors headers",
                       description="Derive a model spec (geometry, weight bytes from safetensors headers, "
                                   "quantization, download footprint) from a Hub repo, a local folder or the "
                                   "HF cache. Reads headers only; never downloads weights.")
    p.add_argument("source", metavar="SOURCE",
                   help="org/name[@revision], or a folder holding config.json and *.safetensors")
    p.add_argument("--json", action="store_true", help="print one flat JSON object on stdout")
    p.add_argument("--hf-home", type=Path, default=None, metavar="DIR",
                   help="Hugging Face home (cache and token); default $HF_HOME or ~/.cache/huggingface")
    p.set_defaults(run=run)


def _progress(stream: TextIO) -> Callable[[int, int], None]:
    tty = bool(getattr(stream, "isatty", lambda: False)())

    def report(done: int, total: int) -> None:
        if total < 2:
            return
        if tty:
            end = "\n" if done == total else ""
            print(f"\rreading safetensors headers {done}/{total}", end=end, file=stream, flush=True)
        elif done == total:
            print(f"read {total} safetensors headers", file=stream, flush=True)

    return report


def _size(n: int | None) -> str:
    return "unknown" if n is None else gib_text(n, unit=True)


def run(args: argparse.Namespace, provider: Any) -> int:
    from club3090.cli.exit_codes import exit_code
    from club3090.cli.model_json import spec_to_json, stop_to_json
    from club3090.outcome import Stop
    from club3090.pipeline.inspect import inspect_model, inspect_outcome

    result = inspect_model(args.source, provider, progress=_progress(sys.stderr))
    if isinstance(result, Stop):
        payload = stop_to_json(result)
        if args.json:
            print(safe(json.dumps(payload, ensure_ascii=False)))
        else:
            print(safe(f"[inspect] stratum 1 stop: {payload['reason']} ({payload['detail']})"))
            if payload.get("message"):
                print(safe(f"[inspect] {payload['message']}"))
    elif args.json:
        print(safe(json.dumps(spec_to_json(result), ensure_ascii=False)))
    else:
        _render(spec_to_json(result))
    return exit_code(inspect_outcome(result))


def _render(d: dict[str, Any]) -> None:
    from rich.table import Table

    rows: list[tuple[str, str]] = [
        ("source", f"{d['source']}: {d['ref']}" + (f"@{d['revision']}" if d["revision"] else "")),
        ("commit", d["commit"] or "-"),
        ("confidence", d["confidence"] + (f" (curated {d['curated']['model']}/{d['curated']['variant']})"
                                          if d["curated"] else "")),
        ("architecture", f"{d['architecture']} ({d['model_type']})"),
        ("layers", f"{d['num_hidden_layers']} ({', '.join(d['layer_kinds']) or '-'})"),
        ("hidden / heads / kv heads / head_dim",
         f"{d['hidden_size']} / {d['num_attention_heads']} / {d['num_key_value_heads']} / {d['head_dim']}"),
        ("max context", f"{d['max_ctx_supported']}" + ("" if d["max_position_embeddings"] else " (fallback)")),
    ]
    if d["sliding_window"]:
        rows.append(("sliding window", str(d["sliding_window"])))
    if d["num_experts"]:
        rows.append(("experts", f"{d['num_experts']} (top-{d['num_experts_per_tok']})"))
    if d["kv_lora_rank"]:
        rows.append(("MLA kv_lora_rank", str(d["kv_lora_rank"])))
    quant = "none"
    if d["quantization"]:
        quant = f"{d['quantization']} {d['quantization_bits'] or '?'}-bit"
        if d["quantization_scheme"]:
            quant += f" ({d['quantization_scheme']})"
        if d["kv_cache_scheme"]:
            quant += f", KV cache {d['kv_cache_scheme']}"
    rows += [
        ("weights", f"{_size(d['weights_bytes'])} in {len(d['weight_files']) or '-'} file(s)"),
        ("bytes per dtype", ", ".join(f"{k} {_size(v)}" for k, v in d["dtype_bytes"].items()) or "-"),
        ("quantization", quant),
        ("compute dtype", d["compute_dtype"] or "-"),
        ("download footprint", _size(d["footprint_bytes"])),
        ("trust-remote-code", "required (auto_map)" if d["requires_trust_remote_code"] else "no"),
        ("MTP head", "yes" if d["has_mtp_head"] else "no"),
        ("vision tower", "yes" if d["has_vision"] else "no"),
    ]
    if d["gguf_files"]:
        rows.append(("GGUF files (ignored)", ", ".join(d["gguf_files"])))
    if d["unpriceable_reason"]:
        rows.append(("cannot price", d["unpriceable_reason"]))
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    for key, value in rows:
        table.add_row(key, value)
    terminal_console(file=sys.stdout, soft_wrap=True).print(table)
