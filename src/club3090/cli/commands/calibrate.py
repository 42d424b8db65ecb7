"""``club3090 calibrate LOG|DIR|- [--config FILE] [--gpus SPEC] [--out FILE] [--save] [--json]``.

Reads vLLM start-up logs (a file, every ``*.log``/``*.txt`` in a folder, or stdin) into
calibration receipts: the serving shape, the measured memory terms, and, given the model's
``config.json``, the fit engine's prediction for the same shape with the per-term error.
``--arg KEY=VALUE`` (vLLM's names: ``gpu_memory_utilization=0.95``, ``tensor_parallel_size=2``,
``vllm_version=0.19.0``, ...) states a setting the log does not print. ``--save`` keeps the receipts in the local overlay (``club3090 loop list`` shows them). A log
with no start-up lines is bad input (exit 65).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from club3090.cli.commands._types import add_command, add_gpus_flag, gpu_set
from club3090.cli.exit_codes import exit_code
from club3090.cli.render import emit, safe
from club3090.outcome import Outcome
from club3090.units import GiB

LOG_LIMIT = 64 * 1024 * 1024
LOG_SUFFIXES = (".log", ".txt")


def add_parser(sub: Any) -> None:
    p = add_command(sub, "calibrate", __doc__, help="turn vLLM start-up logs into calibration receipts")
    p.add_argument("log", metavar="LOG|DIR|-", help="a vLLM log file, a folder of them, or - for stdin")
    p.add_argument("--config", type=Path, metavar="FILE",
                   help="the model's config.json, to price the same shape and show the per-term error")
    add_gpus_flag(p)   # the GPU set the log ran on (name and memory)
    p.add_argument("--arg", action="append", default=[], metavar="KEY=VALUE",
                   help="a setting the log does not print, in vLLM's names (repeatable)")
    p.add_argument("--out", type=Path, metavar="FILE", help='write {"receipts": [...]} as JSON to FILE')
    p.add_argument("--save", action="store_true", help="keep the receipts in the local overlay")
    p.add_argument("--json", action="store_true", help='print {"receipts": [...]} as JSON')
    p.set_defaults(run=run)


def _read_logs(target: str) -> list[tuple[str, bytes]]:
    from club3090.edges.files import read_bytes_capped
    from club3090.errors import InputError, UsageError

    if target == "-":
        raw = sys.stdin.buffer.read(LOG_LIMIT + 1)
        if len(raw) > LOG_LIMIT:
            raise InputError("<stdin>", f"over {LOG_LIMIT // 2**20} MiB")
        return [("<stdin>", raw)]
    path = Path(target)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() in LOG_SUFFIXES)
        if not files:
            raise UsageError(f"{target}: no *.log or *.txt files in this folder")
        return [(p.name, read_bytes_capped(p, limit=LOG_LIMIT)) for p in files]
    if not path.exists():
        raise UsageError(f"{target}: no such file or folder")
    return [(path.name, read_bytes_capped(path, limit=LOG_LIMIT))]


def _given(pairs: list[str]) -> dict[str, Any]:
    import ast

    from club3090.errors import UsageError
    from club3090.reports.vllm_log import FILLABLE_KEYS

    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        key = key.strip().lstrip("-").replace("-", "_")
        if not sep or key not in FILLABLE_KEYS:
            raise UsageError(f"--arg {pair!r}: expected KEY=VALUE with KEY one of {', '.join(FILLABLE_KEYS)}")
        try:
            value: Any = ast.literal_eval(text.strip())
        except (ValueError, SyntaxError):
            value = text.strip()
        if key == "vllm_version":
            value = text.strip()
        out[key] = value
    return out


def run(args: argparse.Namespace, provider: Any) -> int:
    from club3090.edges.files import atomic_write_text, read_json_capped
    from club3090.errors import InputError
    from club3090.reports.capture import club3090_commit, dump_json
    from club3090.reports.receipt import build_receipt, read_startup
    from club3090.reports.redact import Redactor
    from club3090.reports.vllm_log import fill_missing

    config = None
    if args.config is not None:
        config = read_json_capped(args.config)
        if not isinstance(config, dict):
            raise InputError(str(args.config), "expected a config.json object")
    gpu_name = gpu_memory_gib = gpu_count = None
    if args.gpus is not None:
        gpus = gpu_set(args, provider.catalog())
        assert gpus is not None
        gpu_name = gpus.gpu.display_name if gpus.gpu is not None else gpus.names[0]
        gpu_memory_gib = gpus.min_memory_bytes / GiB
        gpu_count = gpus.count

    given = _given(args.arg)
    logs = _read_logs(args.log)
    redactor = Redactor(secrets=provider.settings.redaction_secrets)
    commit = club3090_commit()
    receipts, skipped = [], []
    for name, raw in logs:
        parsed = read_startup(raw.decode("utf-8", "replace"), name)
        if not parsed.found:
            skipped.append(name)
            continue
        filled = fill_missing(parsed, given)
        receipts.append(build_receipt(parsed, log_bytes=raw, source_name=name, redactor=redactor, gpu_name=gpu_name,
                                      gpu_memory_gib=gpu_memory_gib, gpu_count=gpu_count, config=config,
                                      club3090_commit=commit, given_keys=tuple(filled)))
    if not receipts:
        raise InputError(args.log, "no vLLM start-up lines found (Model loading took, Available KV cache memory, "
                                   "GPU KV cache size, # GPU blocks, engine config, ...)")
    saved = []
    if args.save:
        from club3090.reports.overlay import overlay_root, save_receipt
        saved = [str(save_receipt(overlay_root(), r)) for r in receipts]
    doc = {"receipts": receipts, "skipped": [redactor.text(s) for s in skipped], "saved": saved}
    if args.out is not None:
        atomic_write_text(args.out, dump_json({"receipts": receipts}))
    if args.json:
        sys.stdout.write(safe(json.dumps(doc, indent=2, ensure_ascii=False), multiline=True) + "\n")
        return exit_code(Outcome.OK)
    for receipt in receipts:
        _render(receipt)
    for name in skipped:
        emit(f"[calibrate] {redactor.text(name)}: no start-up lines; skipped")
    for path in saved:
        emit(f"[calibrate] saved {redactor.text(path)}")
    return exit_code(Outcome.OK)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _render(receipt: dict[str, Any]) -> None:
    shape = {k: v for k, v in receipt["shape"].items() if v is not None}
    emit(f"[calibrate] {receipt['source']['name']}: vLLM {shape.pop('vllm_version', '?')} "
          f"({receipt.get('engine') or 'engine ?'}), outcome {receipt.get('startup_outcome') or 'unknown'}")
    emit("  shape: " + (", ".join(f"{k}={_fmt(v)}" for k, v in shape.items()) or "(not stated in the log)"))
    measured = receipt["measured"]
    predicted = receipt.get("predicted") or {}
    errors = receipt.get("term_error") or {}
    for term, value in measured.items():
        if term == "error":
            continue
        line = f"  {term}: {_fmt(value)}"
        if term in predicted:
            line += f"   predicted {_fmt(predicted[term])}   error {errors.get(term, 0):+.4g}"
        emit(line)
    if isinstance(measured.get("error"), dict):
        emit("  error: " + ", ".join(f"{k}={_fmt(v)}" for k, v in measured["error"].items()))
    if receipt.get("prediction_note"):
        emit(f"  no prediction: {receipt['prediction_note']}")
