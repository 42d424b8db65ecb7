"""The automatic serving shape: what to serve a model with on a rig when nobody named a profile.

``choose_shape(spec, rig, catalog, ...) -> ShapeChoice`` (docs/DESIGN.md section 16):

- engine: the model's arch row (its first vLLM pin that loads, a release first), else the
  catalog's stable vLLM release (:func:`pick_engine`);
- tensor parallel: the fewest GPUs that fit (sizes the heads divide and the arch row admits);
  pipeline parallel only when no tensor-parallel size fits;
- a rig of several nodes (``gpus_per_node``): one node first, priced as above; more nodes only
  when one does not fit, then the vLLM multi-node layout: tensor parallel inside a node (the
  largest size that divides the node), pipeline parallel across the nodes, the fewest nodes that fit;
- KV format: the model's own dtype when the target context fits with it, else the most compact
  format the engine serves and the GPUs' SM supports;
- ``max_model_len``: the model's maximum when it fits, else the largest that fits at the target
  concurrency, rounded down to a KV block;
- ``max_num_seqs`` / batched tokens: vLLM's defaults for the engine's version.

Every flag given (``fit.shape.ShapeRequest``, vLLM's names) pins its dimension. The choice carries the
reason and the runner-up shapes, each with what it changes ("fp8_e4m3 KV -> 2.0x the context").

Pure: takes values, returns values; no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from club3090.fit.kv_formats import canonical_dtype
from club3090.fit.memory import FitResult, ServeShape, Unpriceable, parse_version, predict, tp_geometry_problem
from club3090.fit.shape import NO_SHAPE_REQUEST, ShapeRequest
from club3090.fit.vllm_rules import engine_release
from club3090.model.context import model_max_len
from club3090.rig.interconnect import advisories

if TYPE_CHECKING:  # pragma: no cover - typing only
    from club3090.catalog.model import ArchRow, Catalog, Engine
    from club3090.model.spec import ModelSpec

__all__ = ["COMPACT_KV", "DEFAULT_ENGINE", "MIN_USEFUL_CONTEXT", "Candidate", "ShapeChoice",
           "choose_shape", "pick_engine", "round_to_block", "valid_tp_sizes"]

DEFAULT_ENGINE = "vllm-stable"
# KV formats tried after the model's own dtype, most compact first among equals (1 byte/element)
COMPACT_KV = ("fp8_e4m3", "fp8_e5m2")
# a shape whose context cannot reach this is not offered as "fits" when the model's own maximum
# does not fit either (a few hundred tokens of context serves nobody)
MIN_USEFUL_CONTEXT = 4096
OWN_KV = ("auto", "bf16", "fp16")          # the model's own dtype, no KV quantization
LEN_ROUNDING = 16                           # vLLM's default KV block size




@dataclass(frozen=True, slots=True)
class Candidate:
    """One priced shape."""

    shape: ServeShape
    fit: FitResult

    @property
    def context(self) -> int:
        return self.fit.max_model_len

    @property
    def gpus(self) -> int:
        return self.shape.tp * self.shape.pp

    @property
    def fits(self) -> bool:
        return self.fit.raw_verdict != "wont-fit"

    def label(self) -> str:
        pp = f" PP {self.shape.pp}" if self.shape.pp > 1 else ""
        return f"TP {self.shape.tp}{pp}, {kv_label(self.shape.kv_cache_dtype)} KV, {self.context:,} context"

    def to_json(self) -> dict[str, Any]:
        return {"tensor_parallel_size": self.shape.tp, "pipeline_parallel_size": self.shape.pp,
                "kv_cache_dtype": self.shape.kv_cache_dtype, "max_model_len": self.context,
                "max_num_seqs": self.fit.settings.max_num_seqs,
                "gpu_memory_utilization": self.fit.settings.mem_util,
                "raw_verdict": self.fit.raw_verdict, "max_concurrency": round(self.fit.max_concurrency, 2),
                "max_model_len_fit": self.fit.max_model_len_fit}


@dataclass(frozen=True, slots=True)
class ShapeChoice:
    """The chosen shape (``chosen`` None: nothing fits, ``best`` is the closest), why, and the
    runner-ups with what each would change."""

    engine: str
    chosen: Candidate | None
    best: Candidate | None                   # chosen, else the shape with the most context
    reason: str
    runner_ups: tuple[tuple[Candidate, str], ...] = ()
    unpriceable: str | None = None           # why no shape could be priced at all
    gpus_per_node: int | None = None         # a rig of several nodes: GPUs in each (None: one machine)
    interconnect: str | None = None          # the link between nodes (rig/interconnect.py)

    @property
    def fits(self) -> bool:
        return self.chosen is not None

    @property
    def nodes_used(self) -> int:
        """Nodes the chosen (else best) shape spans; 1 on one machine."""
        pick = self.chosen or self.best
        if pick is None or not self.gpus_per_node:
            return 1
        return -(-pick.gpus // self.gpus_per_node)

    @property
    def advisories(self) -> tuple[str, ...]:
        """What the shape's layout costs over the link between nodes (none within one node)."""
        pick = self.chosen or self.best
        if pick is None or not self.gpus_per_node:
            return ()
        return advisories(pick.shape.tp, pick.shape.pp, self.gpus_per_node, self.nodes_used, self.interconnect)

    def to_json(self) -> dict[str, Any]:
        doc = {"engine": self.engine, "fits": self.fits, "reason": self.reason,
               "chosen": self.chosen.to_json() if self.chosen else None,
               "best": self.best.to_json() if self.best else None,
               "runner_ups": [{**c.to_json(), "why": why} for c, why in self.runner_ups],
               "unpriceable": self.unpriceable}
        if self.gpus_per_node:
            doc.update({"nodes": self.nodes_used, "gpus_per_node": self.gpus_per_node,
                        "interconnect": self.interconnect, "advisories": list(self.advisories)})
        return doc


def kv_label(kv: str) -> str:
    return "model-dtype" if kv == "auto" else kv.replace("_e4m3", "").replace("_e5m2", " (e5m2)")


def round_to_block(length: int, block: int = LEN_ROUNDING) -> int:
    return length - length % block if length >= block else length


def pick_engine(catalog: "Catalog", row: "ArchRow | None") -> "Engine | None":
    """The vLLM engine the arch row validates (a release before a nightly), else the stable one."""
    engines = catalog.engines
    if row is not None:
        loads = [engines[p.engine] for p in row.engine_pins
                 if p.loads and p.engine in engines and engines[p.engine].is_vllm]
        releases = [e for e in loads if e.vllm_version]
        if releases or loads:
            return (releases or loads)[0]
    if DEFAULT_ENGINE in engines:
        return engines[DEFAULT_ENGINE]
    vllm = sorted((e for e in engines.values() if e.is_vllm and e.vllm_version),
                  key=lambda e: parse_version(e.vllm_version), reverse=True)
    return vllm[0] if vllm else None


def valid_tp_sizes(spec: "ModelSpec", row: "ArchRow | None", gpu_count: int) -> list[int]:
    """Tensor-parallel sizes up to ``gpu_count`` the heads (and the arch row) admit, ascending."""
    arch = spec.arch
    out = []
    for tp in range(1, max(gpu_count, 1) + 1):
        if row is not None and row.tp_divisors and tp not in row.tp_divisors:
            continue
        if tp_geometry_problem(tp, arch.num_attention_heads or None, arch.num_key_value_heads or None):
            continue
        out.append(tp)
    return out


def model_kv(spec: "ModelSpec") -> str:
    """The catalog KV id of the model's own dtype (vLLM's ``auto``): bf16, or fp16 for a float16 model."""
    return "fp16" if canonical_dtype(spec.arch.torch_dtype) == "float16" else "bf16"


def catalog_kv_id(catalog: "Catalog", engine: "Engine | None", name: str, own: str) -> str:
    """A --kv-cache-dtype as vLLM spells it (``fp8``, ``auto``) -> the catalog id this engine lists."""
    wanted = name.strip().lower()
    if engine is None or wanted in engine.supported_kv_formats:
        return wanted
    if wanted == "auto":
        return own
    for kv in engine.supported_kv_formats:
        fmt = catalog.kv_formats.get(kv)
        if fmt is not None and fmt.vllm_arg == wanted:
            return kv
    return wanted


def kv_choices(catalog: "Catalog", engine: "Engine", sm: Decimal | None, own: str = "bf16") -> list[str]:
    """The model's dtype, then the compact formats this engine serves on this SM."""
    out = [own if own in engine.supported_kv_formats else "auto"]
    for kv in COMPACT_KV:
        if kv not in engine.supported_kv_formats:
            continue
        floor, ceiling = catalog.kv_sm_window(kv)
        if sm is None or (floor is not None and sm < floor) or (ceiling is not None and sm > ceiling):
            continue
        out.append(kv)
    return out


def choose_shape(spec: "ModelSpec", gpu_memory_bytes: Sequence[int], catalog: "Catalog", *,
                 sm: Decimal | None, weights_bytes: int | None = None,
                 overrides: ShapeRequest = NO_SHAPE_REQUEST, target_concurrency: int = 1,
                 min_context: int | None = None, device_name: str | None = None,
                 row: "ArchRow | None" = None, engine: "Engine | None" = None,
                 vary_kv: bool = True, solve_length: bool = True,
                 base: ServeShape | None = None, gpus_per_node: int | None = None,
                 interconnect: str | None = None) -> ShapeChoice:
    """Choose the serving shape for ``spec`` on GPUs of ``gpu_memory_bytes`` (one entry per GPU).

    ``vary_kv=False`` / ``solve_length=False`` keep the KV format and context of ``base`` (or
    vLLM's defaults) and choose only the parallel sizes (``kv-calc`` with a shape given).
    ``min_context`` raises the context a shape must reach to count as fitting.
    ``gpus_per_node``: the GPUs are several nodes of this many, listed node by node; one node is
    tried first and more nodes only when it does not fit (``interconnect`` names the link, for
    the advisories).
    """
    mems = list(gpu_memory_bytes)
    per_node = gpus_per_node if gpus_per_node and 0 < gpus_per_node < len(mems) else None
    ask = _Ask(sm, weights_bytes, overrides, target_concurrency, min_context, device_name, row, engine,
               vary_kv, solve_length, base)
    if per_node is None:
        return _choose(spec, mems, catalog, ask)
    on_ray = replace(ask, base=replace(base or ServeShape(), distributed_executor_backend="ray"))
    pinned = overrides.tensor_parallel_size is not None or overrides.pipeline_parallel_size is not None
    if pinned:
        world = (overrides.tensor_parallel_size or 1) * (overrides.pipeline_parallel_size or 1)
        got = _choose(spec, mems, catalog, on_ray if world > per_node else ask)   # past one node: on Ray
        return replace(got, gpus_per_node=per_node, interconnect=interconnect)
    nodes = len(mems) // per_node
    one = _choose(spec, mems[:per_node], catalog, ask)
    tried: list[ShapeChoice] = [one]
    for n in range(2, nodes + 1):
        if tried[-1].fits or tried[-1].unpriceable:
            break
        tried.append(_choose(spec, mems[:n * per_node], catalog, on_ray, _node_layouts(spec, row, per_node, n)))
    last = tried[-1]
    if last.fits or len(tried) == 1:
        reason = last.reason if len(tried) == 1 else _nodes_reason(last, tried[0], per_node)
        return replace(last, reason=reason, gpus_per_node=per_node, interconnect=interconnect)
    best = max((c.best for c in tried if c.best is not None),
               key=lambda c: (c.fit.max_model_len_fit, -c.gpus), default=None)
    reason = (f"no shape on {nodes} node(s) of {per_node} GPU(s) reaches the context floor "
              f"(the most is {best.fit.max_model_len_fit:,}, at {best.label()})" if best is not None
              else last.reason)
    return replace(last, best=best, reason=reason, gpus_per_node=per_node, interconnect=interconnect)


def _node_layouts(spec: "ModelSpec", row: "ArchRow | None", per_node: int, nodes: int) -> list[tuple[int, int]]:
    """vLLM's multi-node layout on ``nodes`` whole nodes: TP inside a node (sizes that divide the
    node, largest first), PP across the nodes and over what is left of each node."""
    layers = spec.arch.num_hidden_layers or 0
    out = []
    for tp in sorted((t for t in valid_tp_sizes(spec, row, per_node) if per_node % t == 0), reverse=True):
        pp = nodes * per_node // tp
        if pp <= layers:
            out.append((tp, pp))
    return out


def _nodes_reason(choice: ShapeChoice, one: ShapeChoice, per_node: int) -> str:
    pick = choice.chosen
    assert pick is not None
    nodes = -(-pick.gpus // per_node)
    most = one.best.fit.max_model_len_fit if one.best is not None else 0
    why = [f"one node of {per_node} GPU(s) does not fit (the most context there is {most:,})",
           f"TP {pick.shape.tp} inside each node x PP {pick.shape.pp} across {nodes} nodes "
           "(vLLM's multi-node layout), the fewest nodes that fit"]
    rest = choice.reason.split("; ", 1)
    if len(rest) == 2:
        why.append(rest[1].replace("pipeline parallel because no tensor-parallel size fits; ", ""))
    return "; ".join(w for w in why if w)


@dataclass(frozen=True, slots=True)
class _Ask:
    """What ``choose_shape`` was asked, the same for every node count it tries."""

    sm: Decimal | None
    weights_bytes: int | None
    overrides: ShapeRequest
    target_concurrency: int
    min_context: int | None
    device_name: str | None
    row: "ArchRow | None"
    engine: "Engine | None"
    vary_kv: bool
    solve_length: bool
    base: ServeShape | None


def _choose(spec: "ModelSpec", gpu_memory_bytes: Sequence[int], catalog: "Catalog", ask: _Ask,
            layouts: list[tuple[int, int]] | None = None) -> ShapeChoice:
    o, row, base, solve_length = ask.overrides, ask.row, ask.base, ask.solve_length
    engine = ask.engine or pick_engine(catalog, row)
    engine_id = engine.id if engine is not None else DEFAULT_ENGINE
    mems = list(gpu_memory_bytes)
    if not mems:
        return ShapeChoice(engine_id, None, None, "no GPU memory known: name the GPUs with --gpus")
    weights = int(ask.weights_bytes if ask.weights_bytes is not None else spec.weights_bytes or 0)
    model_max = model_max_len(spec.arch, spec.max_ctx_supported) or 0
    wanted = o.length or (base.max_model_len if base is not None and not solve_length else None) or model_max
    need = max(ask.min_context or 0, 0)
    floor = max(need, min(MIN_USEFUL_CONTEXT, wanted or MIN_USEFUL_CONTEXT))
    if o.kv_cache_dtype:
        kvs = [catalog_kv_id(catalog, engine, o.kv_cache_dtype, model_kv(spec))]
    elif ask.vary_kv and engine is not None:
        kvs = kv_choices(catalog, engine, ask.sm, model_kv(spec))
    else:
        kvs = [base.kv_cache_dtype if base is not None else "auto"]
    if layouts is None:
        layouts = _parallel_layouts(spec, row, len(mems), o)
    start = base or ServeShape()
    start = replace(start, mem_util=o.gpu_memory_utilization if o.gpu_memory_utilization is not None
                    else start.mem_util,
                    max_num_seqs=o.max_num_seqs if o.max_num_seqs is not None else start.max_num_seqs,
                    vllm_version=o.vllm_version or start.vllm_version or engine_release(engine),
                    device_name=ask.device_name or start.device_name)
    priced: list[Candidate] = []
    unpriceable: str | None = None
    for tp, pp in layouts:
        for kv in kvs:
            shape = replace(start, tp=tp, pp=pp, kv_cache_dtype=kv, max_model_len=wanted or None)
            got = _solve(spec, weights, mems[:tp * pp], shape, ask.target_concurrency, floor,
                         solve=solve_length and o.length is None)
            if isinstance(got, Unpriceable):
                unpriceable = unpriceable or got.reason
                continue
            priced.append(got)
    if not priced:
        return ShapeChoice(engine_id, None, None, f"cannot be priced: {unpriceable or 'no valid parallel size'}",
                           unpriceable=unpriceable or "no valid parallel size")
    chosen = _pick(priced, wanted, floor, need)
    best = chosen or max(priced, key=lambda c: (c.fit.max_model_len_fit, -c.gpus))
    reason = _reason(chosen, best, priced, wanted, model_max, floor, len(mems), pinned_kv=bool(o.kv_cache_dtype))
    return ShapeChoice(engine_id, chosen, best, reason, _runner_ups(best, priced))


def _parallel_layouts(spec: "ModelSpec", row: "ArchRow | None", count: int,
                      o: ShapeRequest) -> list[tuple[int, int]]:
    if o.tensor_parallel_size or o.pipeline_parallel_size:
        return [(o.tensor_parallel_size or 1, o.pipeline_parallel_size or 1)]
    tps = valid_tp_sizes(spec, row, count)
    layouts = [(tp, 1) for tp in tps]
    layers = spec.arch.num_hidden_layers or 0
    for pp in range(2, count + 1):            # PP only beyond what TP offers (tried last)
        for tp in tps:
            if tp * pp <= count and pp <= layers:
                layouts.append((tp, pp))
    return layouts


def _solve(spec: "ModelSpec", weights: int, mems: list[int], shape: ServeShape, concurrency: int,
           floor: int, *, solve: bool) -> Candidate | Unpriceable:
    """The candidate at ``shape`` (its length solved when asked), priced at the ``max_num_seqs``
    its launch passes: vLLM's default when none was asked, so the verdict counts every sequence
    the server admits, exactly as ``pull`` prices the same shape."""
    got = _solve_length(spec, weights, mems, shape, concurrency, floor, solve=solve)
    if isinstance(got, Unpriceable) or got.shape.max_num_seqs is not None:
        return got
    served = replace(got.shape, max_num_seqs=got.fit.settings.max_num_seqs)
    fit = predict(spec.arch, weights_bytes=weights, gpu_memory_bytes=mems, shape=served, confidence=spec.confidence)
    return got if isinstance(fit, Unpriceable) else Candidate(served, fit)


def _solve_length(spec: "ModelSpec", weights: int, mems: list[int], shape: ServeShape, concurrency: int,
                  floor: int, *, solve: bool) -> Candidate | Unpriceable:
    fit = predict(spec.arch, weights_bytes=weights, gpu_memory_bytes=mems, shape=shape,
                  confidence=spec.confidence)
    if isinstance(fit, Unpriceable) or not solve:
        return fit if isinstance(fit, Unpriceable) else Candidate(shape, fit)
    if fit.raw_verdict != "wont-fit" and fit.max_concurrency >= concurrency:
        return Candidate(shape, fit)
    # the largest context that fits at the target concurrency, rounded down to a block
    lo, hi = 0, fit.max_model_len_fit
    best: Candidate | None = None
    while hi - lo > LEN_ROUNDING and hi >= floor:
        mid = round_to_block((lo + hi) // 2) or LEN_ROUNDING
        trial = predict(spec.arch, weights_bytes=weights, gpu_memory_bytes=mems,
                        shape=replace(shape, max_model_len=mid), confidence=spec.confidence)
        if isinstance(trial, Unpriceable):
            return trial
        if trial.raw_verdict != "wont-fit" and trial.max_concurrency >= concurrency:
            lo, best = mid, Candidate(replace(shape, max_model_len=mid), trial)
        else:
            hi = mid
    top = round_to_block(hi)
    if top > lo:
        trial = predict(spec.arch, weights_bytes=weights, gpu_memory_bytes=mems,
                        shape=replace(shape, max_model_len=top), confidence=spec.confidence)
        if not isinstance(trial, Unpriceable) and trial.raw_verdict != "wont-fit" \
                and trial.max_concurrency >= concurrency:
            best = Candidate(replace(shape, max_model_len=top), trial)
    return best or Candidate(shape, fit)


def _pick(priced: list[Candidate], wanted: int, floor: int, need: int = 0) -> Candidate | None:
    """Fewest GPUs first; at a GPU count, the full context in the model's dtype before a compact
    KV format; with no full context anywhere, the fewest GPUs reaching ``floor`` with the most context."""
    full = [c for c in priced if c.fits and c.context >= max(wanted, need)]
    if full:
        return min(full, key=lambda c: (c.gpus, c.shape.pp, 0 if c.shape.kv_cache_dtype in OWN_KV else 1))
    useful = [c for c in priced if c.fits and c.context >= floor]
    if not useful:
        return None
    fewest = min(c.gpus for c in useful)
    return max((c for c in useful if c.gpus == fewest), key=lambda c: (c.context, -c.shape.pp))


def _reason(chosen: Candidate | None, best: Candidate | None, priced: list[Candidate], wanted: int,
            model_max: int, floor: int, count: int, *, pinned_kv: bool = False) -> str:
    if chosen is None:
        most = best.fit.max_model_len_fit if best is not None else 0
        return (f"no shape on {count} GPU(s) reaches {floor:,} tokens of context "
                f"(the most is {most:,}, at {best.label() if best else '-'})")
    why = [f"{'TP ' + str(chosen.shape.tp) if chosen.shape.pp == 1 else f'TP {chosen.shape.tp} x PP {chosen.shape.pp}'}"
           f" is the fewest GPUs that fit"]
    if chosen.gpus > 1:
        fewer = [c for c in priced if c.gpus < chosen.gpus]
        if fewer and all(not c.fits or c.context < floor for c in fewer):
            why.append("fewer GPUs leave no room for the weights plus a usable KV cache")
    if chosen.shape.pp > 1:
        why.append("pipeline parallel because no tensor-parallel size fits")
    if chosen.context >= wanted:
        why.append(f"the model's full {wanted:,}-token context fits" if wanted == model_max
                   else f"the requested {wanted:,}-token context fits")
    else:
        why.append(f"the {wanted:,}-token maximum does not fit; {chosen.context:,} is the largest that does")
    if pinned_kv:
        why.append(f"{chosen.shape.kv_cache_dtype} KV as requested")
    elif chosen.shape.kv_cache_dtype not in OWN_KV:
        why.append(f"{chosen.shape.kv_cache_dtype} KV because the model's own dtype holds less")
    return "; ".join(why)


def _runner_ups(best: Candidate, priced: list[Candidate], limit: int = 3) -> tuple[tuple[Candidate, str], ...]:
    out: list[tuple[Candidate, str]] = []
    for c in priced:
        if c is best or not c.fits:
            continue
        effects = []
        if c.shape.kv_cache_dtype != best.shape.kv_cache_dtype:
            effects.append(f"{kv_label(c.shape.kv_cache_dtype)} KV")
        if (c.shape.tp, c.shape.pp) != (best.shape.tp, best.shape.pp):
            effects.append(f"TP {c.shape.tp}" + (f" PP {c.shape.pp}" if c.shape.pp > 1 else ""))
        if not effects:
            continue
        gains = []
        if best.fit.max_model_len_fit and c.fit.max_model_len_fit > best.fit.max_model_len_fit * 1.05:
            gains.append(f"{c.fit.max_model_len_fit / best.fit.max_model_len_fit:.1f}x the context")
        if best.fit.max_concurrency and c.context == best.context \
                and c.fit.max_concurrency > best.fit.max_concurrency * 1.05:
            gains.append(f"{c.fit.max_concurrency / best.fit.max_concurrency:.1f}x concurrency")
        if c.context > best.context:
            gains.append(f"{c.context:,}-token context")
        if not gains:
            continue
        out.append((c, f"{' + '.join(effects)} -> {', '.join(gains)}"))
    out.sort(key=lambda item: (item[0].gpus, item[0].shape.pp))
    return tuple(out[:limit])
