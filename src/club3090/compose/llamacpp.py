"""Launches for the llama.cpp family (llama.cpp, ik_llama.cpp, beellama): ``llama-server`` flags.

Two sources, one shape (a :class:`club3090.compose.launch.Launch` whose ``command`` is the list of
``llama-server`` flags; the image's entrypoint is ``llama-server``):

- curated replay (``replay``): a llama.cpp-family profile's shipped compose service, with only
  the param slots changed (the host port, ``-c`` <- ``max_model_len``, ``-np`` <- ``max_num_seqs``;
  each keeps its ``${VAR:-default}`` chain). The shipped ``--cache-type-k/-v`` pair stays: it is
  finer than the profile's one-word ``kv_format`` (asymmetric K/V, beellama's ``kvarn4``);
- derived (``derived_launch``): a GGUF file priced by :mod:`club3090.fit.llamacpp` on a rig
  (``serving_args`` picks the largest context that fits with every layer on the GPUs, else the
  fewest layers / expert tensors left on the host) rendered as ``llama-server`` flags.

``python_server_argv`` translates ``llama-server`` flags into llama-cpp-python's server
(``python -m llama_cpp.server``), the native stand-in when no ``llama-server`` binary exists.

Pure: values in, values out.
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from club3090.argv import flag_index, flag_value, set_flag
from club3090.catalog.model import LLAMACPP
from club3090.compose.launch import Launch, plain_data, render_compose
from club3090.compose.outcome import OTHER, SCOPE, ComposeOutcome, refuse
from club3090.compose.param_slots import set_host_port, with_default
from club3090.fit.llamacpp import (
    LlamaCppArgs,
    LlamaCppBreakdown,
    fewest_offloaded,
    largest_context,
    predict,
)
from club3090.fit.memory import Unpriceable
from club3090.interpolate import interpolate_tree
from club3090.model.gguf import TYPES
from club3090.outcome import Notice, NoticeCode, Outcome
from club3090.units import GiB
from club3090.version import __version__

if TYPE_CHECKING:
    from club3090.catalog.model import Catalog
    from club3090.model.gguf_model import GgufModel

__all__ = [
    "CONTAINER_PORT",
    "DEFAULT_IMAGE",
    "ENGINE_TYPE",
    "FALLBACK_CTX",
    "FORMATS",
    "ServingChoice",
    "command_words",
    "derived_launch",
    "is_llamacpp",
    "python_server_argv",
    "render_llama_server",
    "replay",
    "server_args",
    "serving_args",
]

ENGINE_TYPE = LLAMACPP                  # the catalog's spelling, for the records this family writes
CONTAINER_PORT = 8080                   # llama-server's default port, as the shipped composes publish it
DEFAULT_IMAGE = "ghcr.io/ggml-org/llama.cpp:server-cuda"
FALLBACK_CTX = 4096                     # the context tried with layers on the host when nothing fits on the GPUs
FORMATS = ("compose", "llama-server", "json")

# llama-server flag spellings that name the same setting (first: the form a derived launch writes)
MODEL = ("-m", "--model")
CTX = ("-c", "--ctx-size")
NGL = ("-ngl", "--n-gpu-layers", "--gpu-layers")
SPLIT = ("-ts", "--tensor-split")
SPLIT_MODE = ("-sm", "--split-mode")
MAIN_GPU = ("-mg", "--main-gpu")
FLASH = ("-fa", "--flash-attn")
CTK = ("-ctk", "--cache-type-k")
CTV = ("-ctv", "--cache-type-v")
BATCH = ("-b", "--batch-size")
UBATCH = ("-ub", "--ubatch-size")
PARALLEL = ("-np", "--parallel")
CPU_MOE = ("--n-cpu-moe", "-ncmoe")
ALIAS = ("-a", "--alias")
HOST = ("--host",)
PORT = ("--port",)
THREADS = ("-t", "--threads")
# flags that take no value (everything else starting with "-" takes the next word when it is not a flag)
SWITCHES = frozenset({
    "--jinja", "--no-jinja", "--kv-unified", "--no-kv-unified", "--swa-full", "--no-kv-offload", "-nkvo",
    "--no-mmap", "--mlock", "--cont-batching", "-cb", "--no-cont-batching", "-nocb", "--metrics", "--slots",
    "--no-slots", "--no-webui", "--embedding", "--embeddings", "--verbose", "-v", "--log-disable",
    "--no-host", "--cpu-moe", "-cmoe", "--no-warmup", "--check-tensors", "--no-mmproj-offload",
    "--context-shift", "--no-context-shift", "--no-perf", "--flash-attn-auto",
})
_SPLIT_MODE_IDS = {"none": "0", "layer": "1", "row": "2"}   # llama_split_mode


def is_llamacpp(catalog: "Catalog", profile_key: str) -> bool:
    profile = catalog.profiles.get(profile_key)
    engine = catalog.engines.get(profile.engine) if profile is not None else None
    return engine is not None and engine.is_llamacpp


# --------------------------------------------------------------------------------------------
# flag lists
# --------------------------------------------------------------------------------------------

def command_words(command: Any) -> list[str]:
    """A compose ``command`` (a folded string or a list) as a list of words, ``${...}`` kept."""
    if command is None:
        return []
    if isinstance(command, str):
        return shlex.split(command)
    return [str(a) for a in command]


def _takes_value(words: Sequence[str], i: int) -> bool:
    return (words[i] not in SWITCHES and i + 1 < len(words)
            and not (words[i + 1].startswith("-") and not _number(words[i + 1])))


def _number(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True


def _keep_chain(words: list[str], names: Sequence[str], value: str) -> list[str]:
    """A param slot: the shipped ``${VAR:-default}`` keeps its override, its default becomes ``value``."""
    current = flag_value(words, names)
    return set_flag(words, names, with_default(current, value) if current is not None else value)


# --------------------------------------------------------------------------------------------
# pricing -> flags
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ServingChoice:
    """The flags a launch uses and what llama.cpp's memory model says about them."""

    args: LlamaCppArgs
    breakdown: LlamaCppBreakdown
    note: str                           # how the context / offload was chosen


def serving_args(model: "GgufModel", base: LlamaCppArgs, gpu_bytes: Sequence[int], *,
                 ctx_size: int | None = None) -> ServingChoice | Unpriceable:
    """The launch flags for ``model`` on GPUs of ``gpu_bytes``.

    ``ctx_size`` given: that context, every layer on the GPUs when it fits, else the fewest layers
    (or MoE expert tensors) on the host. Not given: the largest context (up to the trained one)
    with every layer on the GPUs; when not even 256 cells fit, ``FALLBACK_CTX`` with the fewest
    layers on the host. Unpriceable when no offload fits either (or the flags cannot be priced).
    """
    limit = model.ctx_train or FALLBACK_CTX
    if ctx_size is None:
        best = largest_context(model, replace(base, n_gpu_layers=-1, n_cpu_moe=0), gpu_bytes, limit=limit)
        if best:
            args = replace(base, ctx_size=best, n_gpu_layers=-1, n_cpu_moe=0)
            priced = predict(model, args, gpu_bytes)
            if isinstance(priced, Unpriceable):
                return priced
            how = "the trained context" if best >= limit else "the largest context that fits"
            return ServingChoice(args, priced, f"-c {best}: {how}, every layer on the GPUs")
        ctx_size = min(limit, FALLBACK_CTX)
    args = replace(base, ctx_size=ctx_size)
    priced = predict(model, args, gpu_bytes)
    if isinstance(priced, Unpriceable):
        return priced
    if priced.fits:
        return ServingChoice(args, priced, f"-c {ctx_size}: as asked, every layer on the GPUs")
    rescue = fewest_offloaded(model, args, gpu_bytes)
    if rescue is None:
        need = sum(d.total_bytes for d in priced.devices[:-1]) / GiB
        return Unpriceable(f"-c {ctx_size} does not fit even with every layer on the host "
                           f"({need:.1f} GiB asked of the GPUs with all layers on them)")
    moved = (f"--n-cpu-moe {rescue.args.n_cpu_moe}" if rescue.args.n_cpu_moe
             else f"-ngl {rescue.args.n_gpu_layers} of {model.n_layer + 1}")
    return ServingChoice(rescue.args, rescue, f"-c {ctx_size} with {moved} (the rest on the host)")


def server_args(model: str, args: LlamaCppArgs, *, alias: str, host: str, port: int) -> list[str]:
    """``llama-server`` flags for ``args`` (llama.cpp's own flag names)."""
    out = ["-m", model, "--alias", alias, "--ctx-size", str(args.ctx_size),
           "--n-gpu-layers", "999" if args.n_gpu_layers < 0 else str(args.n_gpu_layers),
           "--flash-attn", "on" if args.flash_attn else "off",
           "--cache-type-k", args.cache_type_k, "--cache-type-v", args.cache_type_v,
           "--batch-size", str(args.batch_size), "--ubatch-size", str(args.ubatch_size),
           "--parallel", str(args.parallel)]
    if args.tensor_split:
        out += ["--tensor-split", ",".join(f"{x:g}" for x in args.tensor_split)]
    if args.split_mode != "layer":
        out += ["--split-mode", args.split_mode]
    if args.n_cpu_moe:
        out += ["--n-cpu-moe", str(args.n_cpu_moe)]
    if args.swa_full:
        out.append("--swa-full")
    if not args.kv_offload:
        out.append("--no-kv-offload")
    return [*out, "--host", host, "--port", str(port)]


def _type_id(name: str) -> str | None:
    return next((str(i) for i, t in TYPES.items() if t.name.lower() == name.lower()), None)


def python_server_argv(words: Sequence[str]) -> tuple[list[str], list[str]]:
    """llama-server flags -> llama-cpp-python's server flags, and the flags it has no equivalent for."""
    simple: Mapping[str, str] = {
        **dict.fromkeys(MODEL, "--model"), **dict.fromkeys(ALIAS, "--model_alias"),
        **dict.fromkeys(CTX, "--n_ctx"), **dict.fromkeys(MAIN_GPU, "--main_gpu"),
        **dict.fromkeys(BATCH, "--n_batch"), **dict.fromkeys(UBATCH, "--n_ubatch"),
        **dict.fromkeys(THREADS, "--n_threads"), "--host": "--host", "--port": "--port"}
    out: list[str] = []
    dropped: list[str] = []
    i = 0
    while i < len(words):
        raw = words[i]
        flag, eq, inline = raw.partition("=") if raw.startswith("--") else (raw, "", "")
        has_value = bool(eq) or _takes_value(words, i)
        value = inline if eq else (words[i + 1] if has_value else "")
        i += 1 if eq or not has_value else 2
        if flag in simple:
            out += [simple[flag], value]
        elif flag in NGL:
            out += ["--n_gpu_layers", "-1" if value in ("all", "auto") or int(value or 0) >= 999 else value]
        elif flag in SPLIT:
            out += ["--tensor_split", *value.replace("/", ",").split(",")]
        elif flag in SPLIT_MODE and value in _SPLIT_MODE_IDS:
            out += ["--split_mode", _SPLIT_MODE_IDS[value]]
        elif flag in FLASH:
            out += ["--flash_attn", "False" if value == "off" else "True"]
        elif flag in CTK + CTV and _type_id(value) is not None:
            out += ["--type_k" if flag in CTK else "--type_v", str(_type_id(value))]
        elif flag in PARALLEL and value == "1":
            continue                               # one slot is all that server has
        else:
            dropped.append(f"{flag} {value}".strip() if has_value else flag)
    # llama-cpp-python's own default (True) cuts a running stream when another request arrives;
    # llama-server queues concurrent requests, and so must its stand-in
    return [*out, "--interrupt_requests", "False"], dropped


# --------------------------------------------------------------------------------------------
# launches
# --------------------------------------------------------------------------------------------

def derived_launch(*, model_path: str, args: LlamaCppArgs, alias: str, port: int, image: str = DEFAULT_IMAGE,
                   service_name: str, gpu_indices: Sequence[int] = (0,), note: str = "",
                   profile: str = "") -> Launch:
    """One ``llama-server`` service for a GGUF at ``model_path`` (a path inside the container)."""
    service: dict[str, Any] = {
        "image": image,
        "container_name": f"club3090-{service_name}",
        "restart": "no",
        "ports": [f"127.0.0.1:${{PORT:-{port}}}:{CONTAINER_PORT}"],
        "volumes": [],
        "command": server_args(model_path, args, alias=alias, host="0.0.0.0", port=CONTAINER_PORT),
        "deploy": {"resources": {"reservations": {"devices": [
            {"driver": "nvidia", "device_ids": [str(i) for i in gpu_indices], "capabilities": ["gpu"]}]}}},
    }
    header = (f"generated by club3090 {__version__}: a derived llama.cpp launch (llama.cpp's memory model, "
              "estimated)", f"model: {alias}   image: {image}",
              *([f"sizing: {note}"] if note else ()), "run: docker compose -f <out> up -d")
    return Launch(kind="derived", service_name=service_name, service=service, header=header, profile=profile)


def replay(profile_key: str, catalog: "Catalog", *, out_name: str | None = None, fmt: str = "compose"
           ) -> ComposeOutcome:
    """Curated replay of a llama.cpp-family profile's shipped service (see the module docstring)."""
    profile = catalog.profiles.get(profile_key)
    if profile is None:
        return refuse(profile_key, OTHER, f"unknown profile {profile_key!r}")
    engine = catalog.engines.get(profile.engine)
    if engine is None or not engine.is_llamacpp:
        return refuse(profile_key, SCOPE, f"engine {profile.engine} is not of the llama.cpp family")
    if profile.runtime is None:
        return refuse(profile_key, SCOPE, "no-runtime-capture: the catalog holds no capture of "
                                          f"{profile.compose_path}")
    if fmt not in FORMATS:
        return refuse(profile_key, OTHER, f"format {fmt!r}: a llama.cpp launch renders as {', '.join(FORMATS)}")
    service: dict[str, Any] = plain_data(profile.runtime.service)
    ports = service.get("ports")
    if isinstance(ports, list) and ports and isinstance(ports[0], str):
        ports[0] = set_host_port(ports[0], str(profile.port))
    words = command_words(service.get("command"))
    split = next((w for w in words if w.count("{") != w.count("}")), None)
    if split is not None:
        # Compose resolves a string command before splitting it: a ${VAR:+...} spanning several
        # words cannot become a word list without changing what it runs
        return refuse(profile_key, SCOPE, "command-not-replayable: the shipped command has a ${...} expansion "
                                          f"spanning several words ({split!r}); run {profile.compose_path} "
                                          "from a club-3090 checkout")
    if flag_index(words, CTX) is not None:
        words = _keep_chain(words, CTX, str(profile.max_model_len))
    if flag_index(words, PARALLEL) is not None:
        words = _keep_chain(words, PARALLEL, str(profile.max_num_seqs))
    service["command"] = words
    header = (f"generated by club3090 {__version__} - do not edit; regenerate with "
              f"`club3090 compose --profile {profile.key}`",
              f"catalog: {catalog.version} (schema {catalog.schema_version})   profile: {profile.key}"
              f"   shipped: {profile.compose_path}",
              f"engine: {engine.id} ({engine.display_name}), image {engine.image or 'as shipped'}",
              "weights: the GGUF is mounted from ${MODEL_DIR}; `club3090 up " + profile.key
              + " --dir DIR` writes a self-contained bundle that serves it from the HF cache",
              f"run: MODEL_DIR=/your/models docker compose -f {out_name or '<out>'} up -d")
    launch = Launch(kind="curated", service_name=profile.runtime.service_name, service=service, header=header,
                    top_level=profile.runtime.top_level, profile=profile.key,
                    project_dir=f"<club-3090 checkout>/{posixpath.dirname(profile.compose_path)}")
    notices = (Notice(NoticeCode.PROJECT_DIRECTORY,
                      "the GGUF is mounted from ${MODEL_DIR}: set MODEL_DIR to the folder holding it, or run "
                      f"`club3090 up {profile.key} --dir DIR` for a self-contained bundle",
                      {"project_directory": "${MODEL_DIR}"}),)
    return ComposeOutcome(ok=True, outcome=Outcome.OK, profile=profile.key, text=render(launch, fmt), format=fmt,
                          launch=launch, notices=notices, trust_remote_code="not applicable (llama.cpp)")


def render_llama_server(launch: Launch) -> str:
    """The service as one ``llama-server`` command line (interpolated with the defaults)."""
    svc = interpolate_tree(plain_data(launch.service), {})
    words = launch.host_words(command_words(svc.get("command")))
    lines = "".join(f"# {h}\n" for h in launch.header)
    return lines + "llama-server " + " ".join(shlex.quote(w) for w in words) + "\n"


def render(launch: Launch, fmt: str) -> str:
    import json

    if fmt == "compose":
        return render_compose(launch)
    if fmt == "llama-server":
        return render_llama_server(launch)
    svc = interpolate_tree(plain_data(launch.service), {})
    return json.dumps({"kind": launch.kind, "profile": launch.profile, "service_name": launch.service_name,
                       "header": list(launch.header), "compose": launch.compose_document(),
                       "llama_server": {"argv": ["llama-server",
                                                 *launch.host_words(command_words(svc.get("command")))]}},
                      indent=2, ensure_ascii=False) + "\n"
