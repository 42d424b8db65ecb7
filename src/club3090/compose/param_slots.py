"""The param slots curated replay sets in a shipped ``vllm serve`` command (docs/DESIGN.md §11).

``PARAM_SLOTS`` is the one owner of which flag takes which profile field; the helpers here set a
slot's value while keeping its ``${VAR:-...}`` override chain, drop flags, and fill the host port
and the speculative config.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from club3090.argv import flag_index
from club3090.compose.launch import split_volume
from club3090.compose.outcome import ReplayError
from club3090.interpolate import interpolate

if TYPE_CHECKING:
    from club3090.catalog.model import Catalog, Drafter, Profile

NVLINK_REQUIRED = "required"


# The `vllm serve` flags replay sets, and the profile field each takes its value from. The one
# owner of this mapping: which slots a profile has is read from its shipped service, never stored.
# (Also set: the host port <- ``port``, `--speculative-config` <- ``drafter``, NVLINK_MODE <-
# ``requires_nvlink``; see ``compose.replay``.)
PARAM_SLOTS: tuple[tuple[str, str], ...] = (
    ("--tensor-parallel-size", "tp"),
    ("--max-model-len", "max_model_len"),
    ("--gpu-memory-utilization", "mem_util"),
    ("--kv-cache-dtype", "kv_format"),
    ("--max-num-seqs", "max_num_seqs"),
)

_EXPR = re.compile(r"^\$\{[A-Za-z_][A-Za-z0-9_]*(?::?-.*)?\}$", re.S)
_INNER_DEFAULT = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*):?-([^${}]*)\}")


def with_default(token: str, value: str) -> str:
    """Set a slot's value, keeping its ``${VAR:-...}`` override chain when it has one.

    ``"${TP:-1}"`` -> ``"${TP:-2}"``; ``"${MAX_MODEL_LEN:-${CTX:-8}}"`` -> innermost default;
    ``"${TP}"`` -> ``"${TP:-2}"``; a literal (``"1"``) -> the value.
    """
    if _EXPR.match(token):
        matches = list(_INNER_DEFAULT.finditer(token))
        if matches:
            m = matches[-1]
            return token[:m.start(2)] + value + token[m.end(2):]
        return token[:-1] + ":-" + value + "}"
    return value


def format_number(value: float | int) -> str:
    """0.92 -> "0.92", 1.0 -> "1", 2 -> "2" (shortest round-trip form, as the shipped files write)."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return repr(value) if isinstance(value, float) else str(value)


def set_slot(args: list[Any], flag: str, value: str) -> None:
    i = flag_index(args, flag)
    if i is None:
        return
    if args[i] == flag:
        if i + 1 < len(args):
            args[i + 1] = with_default(str(args[i + 1]), value)
    else:
        args[i] = f"{flag}={with_default(str(args[i]).split('=', 1)[1], value)}"


def speculative_config(shipped: str, drafter: "Drafter") -> str:
    n = str(drafter.n_default)
    m = re.search(r"\$\{SPEC_N[A-Z_]*:?-\d+\}", shipped)
    if m:  # keep the shipped env override, with the drafter's default
        n = with_default(m.group(0), n)
    template = drafter.speculative_config_template
    if not template:
        raise ReplayError(f"drafter {drafter.id} has no speculative-config template")
    local = drafter.local_model_path
    if "{LOCAL_MODEL_PATH}" in template and not local:
        try:
            local = json.loads(interpolate(shipped)).get("model")
        except (ValueError, AttributeError):
            local = None
        if not local:
            raise ReplayError(f"drafter {drafter.id} needs a local model path")
    return template.replace("{LOCAL_MODEL_PATH}", local or "").replace("{N}", n)



def slot_value(profile: "Profile", catalog: "Catalog", name: str) -> str | None:
    """The text a ``PARAM_SLOTS`` flag takes for ``profile`` (None: leave the shipped value)."""
    if name == "kv_format":
        kv_arg = catalog.kv_formats[profile.kv_format].vllm_arg
        return kv_arg if kv_arg is not None else "auto"
    value = getattr(profile, name)
    if value is None:
        return None
    return format_number(value) if isinstance(value, float) else str(value)


def set_host_port(entry: str, port: str) -> str:
    matches = list(re.finditer(r"\$\{PORT:?-(\d+)\}", entry))
    m = matches[-1] if matches else None
    if m is not None:
        return entry[:m.start(1)] + port + entry[m.end(1):]
    parts = split_volume(entry)  # same ${}-aware colon split
    if parts[2]:  # host:published:container
        return f"{parts[0]}:{with_default(parts[1], port)}:{parts[2]}"
    if parts[0]:
        return f"{with_default(parts[0], port)}:{parts[1]}"
    return entry

