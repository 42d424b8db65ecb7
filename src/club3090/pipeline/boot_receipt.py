"""The receipt of a server ``club3090 up`` started (docs/DESIGN.md §13, the Loop).

The start-up log is parsed by the same code ``club3090 calibrate`` uses; the launch states the
shape the log may not print (the repo id and the vLLM flags ``up`` passed), the gate's hardware the
GPUs, the snapshot's ``config.json`` the model for the fit engine's prediction.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from club3090.argv import flag_value as _flag_value
from club3090.compose.param_slots import PARAM_SLOTS
from club3090.units import GiB

RECEIPT_NAME = "receipt.json"
LOG_LIMIT = 64 * 1024 * 1024


@dataclass(frozen=True)
class BootReceipt:
    path: Path | None = None          # DIR/receipt.json, when written
    saved: Path | None = None         # the overlay copy
    note: str | None = None           # why no receipt

    def to_json(self) -> dict[str, Any]:
        return {"path": str(self.path) if self.path else None, "saved": str(self.saved) if self.saved else None,
                "note": self.note}


def launch_settings(argv: Sequence[str], repo_id: str) -> dict[str, Any]:
    """The shape the launch states, in the parser's (vLLM's) names."""
    out: dict[str, Any] = {"model": repo_id}
    for flag, _field in PARAM_SLOTS:
        text = _flag_value(list(argv), flag)
        if text is None:
            continue
        try:
            value: Any = ast.literal_eval(text)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            value = text
        out[flag[2:].replace("-", "_")] = value
    return out


def write_boot_receipt(directory: Path, log_text: str, *, argv: Sequence[str], repo_id: str, hardware: Any,
                       snapshot: Path | None, secrets: Sequence[str] = (),
                       env: Mapping[str, str] | None = None, swap_of: str | None = None) -> BootReceipt:
    """Parse the start-up log into DIR/receipt.json and the local overlay; a note when it holds none.
    ``swap_of``: the curated profile a ``swap`` cloned (the receipt says whose service it measured)."""
    from club3090.edges.files import atomic_write_text, read_json_capped
    from club3090.errors import InputError
    from club3090.reports.capture import club3090_commit, dump_json
    from club3090.reports.overlay import overlay_root, save_receipt
    from club3090.reports.receipt import receipt_for_log
    from club3090.reports.redact import Redactor

    config = None
    if snapshot is not None and (snapshot / "config.json").is_file():
        try:
            loaded = read_json_capped(snapshot / "config.json")
            config = loaded if isinstance(loaded, dict) else None
        except InputError:
            config = None
    memory = tuple(getattr(hardware, "memory_bytes", ()) or ())
    names = set(getattr(hardware, "names", ()) or ())
    receipt = receipt_for_log(log_text, launch_settings(argv, repo_id), Redactor(secrets=tuple(secrets)),
                              source_name="up-boot", gpu_name=names.pop() if len(names) == 1 else None,
                              gpu_memory_gib=min(memory) / GiB if memory else None,
                              gpu_count=len(memory) or None, config=config, club3090_commit=club3090_commit())
    if receipt is None:
        return BootReceipt(note="no receipt: the server log has no vLLM start-up lines (KV cache size, GPU blocks)")
    if swap_of is not None:
        receipt["swap_of"] = swap_of
    path = directory / RECEIPT_NAME
    atomic_write_text(path, dump_json(receipt))
    return BootReceipt(path=path, saved=save_receipt(overlay_root(env), receipt))


__all__ = ["RECEIPT_NAME", "BootReceipt", "launch_settings", "write_boot_receipt"]
