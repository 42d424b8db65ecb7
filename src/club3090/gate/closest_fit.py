"""On a wont-fit verdict, what would fit: the largest context, another KV format, more GPUs."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from club3090.fit.memory import FitResult, ServeShape, predict, tp_geometry_problem
from club3090.gate.engine_support import find_arch_row

if TYPE_CHECKING:  # pragma: no cover - typing only
    from club3090.catalog.model import Catalog, Engine
    from club3090.model.spec import ModelSpec
    from club3090.rig.hardware import HardwareFacts


def closest_fit(fit: FitResult, spec: "ModelSpec", weights_bytes: int, shape: ServeShape,
                hw: "HardwareFacts", engine: "Engine", catalog: "Catalog") -> tuple[str, ...]:
    """Suggestions, most direct first: the largest context that fits, the first other emittable
    vLLM KV format this SM can run that fits, the smallest larger TP the head geometry allows."""
    out: list[str] = []
    fitted = fit.max_model_len_fit
    if fitted:
        out.append(f"largest context that fits this rig: {fitted} tokens (MAX_MODEL_LEN={fitted})")
    elif fitted == 0:
        out.append("no context length fits: weights and runtime overheads leave no room for the KV cache")
    if hw.sm is None:
        return tuple(out)
    sm = hw.sm
    arch = spec.arch

    def try_shape(memory: tuple[int, ...] | None = None, **changes: Any) -> FitResult | None:
        alt = replace(shape, **changes)
        priced = predict(arch, weights_bytes=weights_bytes, gpu_memory_bytes=memory or hw.selected_memory(alt.tp * alt.pp),
                         shape=alt, confidence=spec.confidence)
        return priced if isinstance(priced, FitResult) else None

    for kv_id in engine.supported_kv_formats:
        kv = catalog.kv_formats.get(kv_id)
        if kv_id == shape.kv_cache_dtype or kv is None or not kv.emittable or not kv.on_vllm:
            continue
        floor, ceiling = catalog.kv_sm_window(kv_id)
        if (floor is not None and sm < floor) or (ceiling is not None and sm > ceiling):
            continue
        alt = try_shape(kv_cache_dtype=kv_id)
        if alt is not None and alt.raw_verdict != "wont-fit":
            out.append(f"KV format {kv_id} would fit ({alt.raw_verdict}, "
                       f"{alt.kv_cache_tokens} KV tokens); choose a profile with it")
            break
    row = find_arch_row(catalog, curated_model=spec.curated.model_id if spec.curated else None,
                        architecture=arch.architecture)
    divisors = row.tp_divisors if row is not None and row.tp_divisors else (1, 2, 4, 8)
    for tp in sorted(d for d in divisors if d > shape.tp):
        if tp_geometry_problem(tp, arch.num_attention_heads, arch.num_key_value_heads):
            continue
        more = tp > hw.count
        alt = try_shape(memory=(min(hw.memory_bytes),) * tp if more else None, tp=tp)
        if alt is not None and alt.raw_verdict != "wont-fit":
            where = f"{tp} GPUs like yours (you have {hw.count})" if more else f"{tp} of your GPUs"
            out.append(f"tp={tp} would fit on {where} ({alt.raw_verdict}); choose a tp={tp} profile")
            break
    return tuple(out)
