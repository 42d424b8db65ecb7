"""What a curated profile asks vLLM to do, as a :class:`memory.ServeShape`.

One owner for the settings a catalog profile serves with: its shipped compose's flags
(:func:`shipped_flag`, :func:`profile_batched_tokens`), its drafter's cost (:func:`drafter_terms`)
and the whole serving shape (:func:`profile_shape`). ``kv-calc`` (profiles and ``--calibration``)
uses it; ``pull`` can too.

Pure: no I/O, no environment, no printing. Reads only the catalog records it is given.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Final

from club3090.argv import flag_value
from club3090.errors import CatalogError, InterpolationError, Problem
from club3090.fit.memory import ServeShape
from club3090.fit.vllm_rules import SPECULATIVE_METHODS, engine_release
from club3090.interpolate import interpolate

if TYPE_CHECKING:  # pragma: no cover - typing only
    from club3090.catalog.model import Catalog, Drafter, Profile

__all__ = ["AUTO", "NO_SHAPE_REQUEST", "SHAPE_FIELDS", "ShapeRequest", "drafter_terms", "profile_batched_tokens", "profile_encoder_profiling",
           "profile_prefix_caching", "profile_shape", "shipped_flag"]

SHAPE_FIELDS = tuple(f.name for f in fields(ServeShape))


class _Auto:
    """vLLM's ``--max-model-len auto`` (-1 on its command line): the largest length that fits."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "AUTO"


AUTO: Final = _Auto()
VLLM_AUTO_LEN = -1                 # how vLLM spells AUTO in its own settings (``ServeShape``)


@dataclass(frozen=True, slots=True)
class ShapeRequest:
    """The serving-shape flags a person gave, in vLLM's names; ``None``: not given (the profile's
    setting, else the automatic shape's, else vLLM's default). ``max_model_len=AUTO``: the largest
    length that fits, said explicitly (never a magic number)."""

    tensor_parallel_size: int | None = None
    pipeline_parallel_size: int | None = None
    gpu_memory_utilization: float | None = None
    max_model_len: int | _Auto | None = None
    kv_cache_dtype: str | None = None
    max_num_seqs: int | None = None
    vllm_version: str | None = None           # ``--vllm-version``: the release to price instead of the pin

    @property
    def length(self) -> int | None:
        """The context pinned to a number (None: not given, or AUTO)."""
        return self.max_model_len if isinstance(self.max_model_len, int) else None

    def serve_fields(self) -> dict[str, Any]:
        """The given flags as :class:`ServeShape` fields (AUTO as vLLM's -1), for ``profile_shape``."""
        length = VLLM_AUTO_LEN if self.max_model_len is AUTO else self.max_model_len
        return {"tp": self.tensor_parallel_size, "pp": self.pipeline_parallel_size,
                "mem_util": self.gpu_memory_utilization, "max_model_len": length,
                "kv_cache_dtype": self.kv_cache_dtype, "max_num_seqs": self.max_num_seqs,
                "vllm_version": self.vllm_version}


NO_SHAPE_REQUEST = ShapeRequest()


def _shipped_value(token: str) -> str | None:
    """A shipped value as Compose resolves it with no environment (``launch.interpolate`` owns
    the rule): '${A:-${B:-4096}}' -> '4096'; a literal -> itself; unset or malformed -> None."""
    try:
        return interpolate(token, {}) or None
    except InterpolationError:
        return None


def _shipped_args(profile: "Profile") -> list[str]:
    """The shipped compose's command as words (none without a runtime or a command list)."""
    if profile is None or profile.runtime is None:
        return []
    command = profile.runtime.service.get("command")
    return [str(a) for a in command] if isinstance(command, (list, tuple)) else []


def shipped_flag(profile: "Profile", flag: str) -> str | None:
    """The value a profile's shipped compose passes for ``flag`` (its ${VAR:-default} resolved), if any."""
    value = flag_value(_shipped_args(profile), flag)
    return None if value is None else _shipped_value(value)


def profile_batched_tokens(profile: "Profile") -> int | None:
    """--max-num-batched-tokens of the shipped compose (it sizes the activation peak and the tokens a
    sliding-window layer holds in flight); None when the profile does not record it (vLLM default)."""
    value = shipped_flag(profile, "--max-num-batched-tokens") if profile is not None else None
    if value is None:
        return None
    if not value.isdigit() or int(value) < 1:
        raise CatalogError([Problem("profiles.yaml", f"profiles[{profile.key!r}].runtime.service.command",
                                    f"--max-num-batched-tokens {value!r} is not a positive integer")])
    return int(value)


def profile_encoder_profiling(profile: "Profile | None") -> bool:
    """Whether vLLM profiles the vision encoder for this compose: ``--language-model-only`` and a
    ``--limit-mm-per-prompt`` of zero for every modality skip the dummy image batch
    (``profile_run`` runs encoder profiling only when some modality is allowed)."""
    if profile is None or profile.runtime is None:
        return True
    if "--language-model-only" in _shipped_args(profile):
        return False
    limits = shipped_flag(profile, "--limit-mm-per-prompt")
    if limits:
        try:
            parsed = json.loads(limits)
        except ValueError:
            return True
        if isinstance(parsed, dict) and parsed and all(
                (isinstance(v, int) and v == 0) or (isinstance(v, dict) and v.get("count") == 0)
                for v in parsed.values()):
            return False
    return True


def profile_prefix_caching(profile: "Profile") -> bool | None:
    """``--enable-prefix-caching`` (True) or ``--no-enable-prefix-caching`` (False) in the shipped
    compose; None when it passes neither (vLLM's default for the model). A hybrid model's state
    layers keep two pages per request with it on (``vllm_rules.mamba_cache_mode``)."""
    args = _shipped_args(profile)
    if "--no-enable-prefix-caching" in args:
        return False
    return True if "--enable-prefix-caching" in args else None


def drafter_terms(drafter: "Drafter | None") -> tuple[int, int]:
    """(speculative tokens, drafter weight bytes) a profile's drafter adds.

    Drafter KV: built-in MTP heads add their layers through the config (``num_nextn_predict_layers``).
    The Gemma 4 external MTP "assistant" (``mtp_assistant``) has no k/v projections: all its layers
    are KV-sharing layers (num_kv_shared_layers == num_hidden_layers) that read the target's cache, so
    it allocates no KV of its own; only its weights count (docs/DESIGN.md §17, docs/ACCURACY.md).
    """
    if drafter is None:
        return 0, 0
    spec = int(drafter.n_default or 0) if drafter.method in SPECULATIVE_METHODS else 0
    return spec, int(drafter.vram_footprint_bytes or 0)


def profile_shape(profile: "Profile | None", catalog: "Catalog | None", *, drafter: bool = True,
                  **overrides: Any) -> ServeShape:
    """The :class:`memory.ServeShape` a catalog profile serves with, plus explicit overrides.

    ``profile_shape(profile, catalog, *, drafter=True, **overrides) -> ServeShape``

    From the profile: ``tp``, ``pp``, ``mem_util``, ``max_model_len``, ``max_num_seqs``,
    ``kv_cache_dtype`` (``kv_format``), ``max_num_batched_tokens`` (the shipped compose's
    ``--max-num-batched-tokens``; None = vLLM's default) and ``vllm_version`` (the profile's engine;
    None for nightlies = the newest known). With ``drafter=True`` the profile's drafter adds its
    speculative tokens and weights (:func:`drafter_terms`); ``drafter=False`` prices the profile
    without speculation.

    ``overrides`` are :class:`ServeShape` field names (``tp=4``, ``mem_util=0.9``,
    ``max_model_len=...``, ``kv_cache_dtype=...``, ``num_speculative_tokens=...``,
    ``extra_weights_bytes=...``, ``device_name=...``, ...). A value of ``None`` means "not given" and
    keeps the profile's setting, so CLI flags can be passed straight through. An unknown name raises
    ``TypeError``. ``profile=None`` gives vLLM's defaults plus the overrides (``catalog`` may then be
    None too).
    """
    unknown = sorted(set(overrides) - set(SHAPE_FIELDS))
    if unknown:
        raise TypeError(f"profile_shape: unknown ServeShape field(s): {', '.join(unknown)}")
    base: dict[str, Any] = {}
    if profile is not None:
        assert catalog is not None, "a profile is priced with its catalog (engines, drafters)"
        engine = catalog.engines[profile.engine]
        base = {
            "tp": int(profile.tp), "pp": int(profile.pp), "mem_util": profile.mem_util,
            "max_model_len": profile.max_model_len, "max_num_seqs": profile.max_num_seqs,
            "max_num_batched_tokens": profile_batched_tokens(profile),
            "kv_cache_dtype": profile.kv_format or "auto",
            "vllm_version": engine_release(engine),
            "mm_encoder_profiling": profile_encoder_profiling(profile),
            "enable_prefix_caching": profile_prefix_caching(profile),
        }
        if drafter and profile.drafter:
            spec, extra = drafter_terms(catalog.drafters[profile.drafter])
            base["num_speculative_tokens"], base["extra_weights_bytes"] = spec, extra
    base.update({k: v for k, v in overrides.items() if v is not None})
    return ServeShape(**base)
