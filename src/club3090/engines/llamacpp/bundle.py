"""The self-contained bundle of a llama.cpp-family launch (docs/DESIGN.md, "The llama.cpp family").

Same files as the vLLM bundle (:mod:`club3090.pipeline.bundle`): ``compose.yml`` serving the GGUF
from the HF cache (mounted read-only at ``/root/.cache/huggingface/hub``; ``-m`` names the file in
the pinned snapshot), ``.env``, ``serve.sh`` (the same server without Docker) and ``launch.json``.
The shipped model mount (``${MODEL_DIR}:/models``) is replaced; any other path under it (a
drafter GGUF, a projector) is reported as unresolved, since ``up`` fetches only the served GGUF.

``plan`` is pure: values in, a :class:`club3090.pipeline.bundle.Bundle` out.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from club3090.argv import drop_flags, flag_value, set_flag
from club3090.compose import llamacpp as lc
from club3090.compose.launch import Launch, plain_data, render_compose, volume_parts
from club3090.interpolate import interpolate
from club3090.pipeline.bundle import _HF_TOKEN_VARS, CONTAINER_HUB, Bundle, _bundle_source, bundled_launch

__all__ = ["DIALECTS", "container_model_path", "plan"]

DIALECTS = ("llama-server", "llama-cpp-python")
_MODEL_TARGETS = ("/models", CONTAINER_HUB, "/root/.cache/huggingface")


def container_model_path(repo_id: str, commit: str, filename: str) -> str:
    return f"{CONTAINER_HUB}/models--{repo_id.replace('/', '--')}/snapshots/{commit}/{filename}"


def _model_mount(source: str, target: str) -> bool:
    return target.rstrip("/") in _MODEL_TARGETS or "MODEL_DIR" in source


def plan(launch: Launch, *, directory: Path, repo_id: str, commit: str, model_file: str, hub_cache: Path,
         port: int, served: str, server: Sequence[str], dialect: str, upstream_base: str = "",
         prediction: Mapping[str, Any] | None = None) -> Bundle:
    """Rewrite ``launch`` into a bundle serving ``model_file`` of ``repo_id@commit`` from the HF cache.

    ``server`` is the native executable (``["llama-server"]``, ``["python", "-m", "llama_cpp.server"]``)
    and ``dialect`` the flag language it speaks (one of :data:`DIALECTS`).
    """
    directory = Path(directory).absolute()
    svc: dict[str, Any] = plain_data(launch.service)
    volumes: list[str] = []
    upstream: dict[str, str] = {}
    model_roots: list[str] = []
    for entry in svc.get("volumes") or []:
        source, target, mode = volume_parts(entry)
        if _model_mount(source, target):
            model_roots.append(target.rstrip("/"))
            continue
        inside, up = _bundle_source(source, upstream_base)
        if up is not None:
            upstream[inside[2:]] = up
        volumes.append(f"{inside}:{target}" + (f":{mode}" if mode else ""))
    volumes.insert(0, f"${{HF_HUB_CACHE_HOST:-{hub_cache}}}:{CONTAINER_HUB}:ro")
    svc["volumes"] = volumes

    model_in = container_model_path(repo_id, commit, model_file)
    words = set_flag(lc.command_words(svc.get("command")), lc.MODEL, model_in)
    if flag_value(words, lc.ALIAS) is None:
        words = set_flag(words, lc.ALIAS, served)
    served = interpolate(flag_value(words, lc.ALIAS) or served, {})
    container_port = interpolate(flag_value(words, lc.PORT) or str(lc.CONTAINER_PORT), {})
    if flag_value(words, lc.PORT) is None:
        words = set_flag(words, lc.PORT, container_port)
    if flag_value(words, lc.HOST) is None:
        words = set_flag(words, lc.HOST, "0.0.0.0")
    svc["command"] = words
    svc["ports"] = [f"127.0.0.1:${{PORT:-{port}}}:{container_port}"]
    svc["environment"] = [e for e in (svc.get("environment") or [])
                          if str(e).split("=", 1)[0] not in _HF_TOKEN_VARS]
    if not svc["environment"]:
        del svc["environment"]
    bundled = bundled_launch(launch, svc, directory)
    container = str(svc["container_name"])

    resolved = [interpolate(w, {}) for w in words]
    unresolved = sorted({w for w in resolved if w != model_in and any(
        w == root or w.startswith(root + "/") for root in model_roots)})
    argv, not_applied = _native(resolved, model_in, hub_cache, port, server, dialect)
    env = _native_env(svc)
    description = {"kind": bundled.kind, "profile": bundled.profile, "engine": lc.ENGINE_TYPE,
                   "service_name": bundled.service_name, "header": list(bundled.header),
                   "compose": bundled.compose_document(),
                   "native": {"argv": argv, "env": dict(env), "dialect": dialect, "not_applied": not_applied},
                   "up": {"repo_id": repo_id, "commit": commit, "model_file": model_file, "port": port,
                          "served_model": served, "hub_cache": str(hub_cache), "upstream_files": upstream},
                   "prediction": dict(prediction or {})}
    files = {
        "compose.yml": render_compose(bundled),
        ".env": f"PORT={port}\nHF_HUB_CACHE_HOST={hub_cache}\n",
        "serve.sh": _serve_sh(argv, env, not_applied, server, bundled.header),
        "launch.json": json.dumps(description, indent=2, ensure_ascii=False) + "\n",
    }
    notes = [f"{dialect} has no equivalent of {flag}" for flag in not_applied]
    if svc.get("entrypoint"):
        notes.append("the shipped entrypoint wrapper (drafter toggle) runs only inside the container")
    return Bundle(directory, files, {}, tuple(argv), dict(env), served, port, container,
                  container_only=tuple(notes), unresolved=tuple(unresolved), upstream_files=upstream)


def _native(words: list[str], model_in: str, hub_cache: Path, port: int, server: Sequence[str],
            dialect: str) -> tuple[list[str], list[str]]:
    """The host command line: the model from the snapshot folder, listening on 127.0.0.1:port."""
    host_model = str(Path(hub_cache) / model_in[len(CONTAINER_HUB) + 1:])
    args = set_flag(words, lc.MODEL, host_model)
    for names in (lc.HOST, lc.PORT):
        args = drop_flags(args, names)
    args += ["--host", "127.0.0.1", "--port", str(port)]
    if dialect == "llama-cpp-python":
        args, dropped = lc.python_server_argv(args)
        return [*server, *args], dropped
    return [*server, *args], []


def _native_env(svc: Mapping[str, Any]) -> list[tuple[str, str]]:
    env: list[tuple[str, str]] = []
    for raw in svc.get("environment") or []:
        name, _, value = interpolate(str(raw), {}).partition("=")
        if value and name not in (*_HF_TOKEN_VARS, "NVIDIA_VISIBLE_DEVICES"):
            env.append((name, value))
    devices = (((svc.get("deploy") or {}).get("resources") or {}).get("reservations") or {}).get("devices") or []
    ids = [interpolate(str(i), {}) for d in devices if isinstance(d, Mapping) for i in d.get("device_ids") or []]
    if ids and all(i.replace(",", "").isdigit() for i in ids):
        env.append(("CUDA_VISIBLE_DEVICES", ",".join(ids)))
    return env


def _serve_sh(argv: list[str], env: list[tuple[str, str]], not_applied: list[str], server: Sequence[str],
              header: tuple[str, ...]) -> str:
    lines = ["#!/bin/sh", "# The same server as compose.yml, without Docker (host paths only).",
             "# Start it with `club3090 up --launcher native` (detached, logs in logs/), or run this file.",
             *(f"# {h}" for h in header[:2])]
    lines += [f"# not applied natively: {c}" for c in not_applied]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in env]
    n = len(server)
    lines.append(f'LLAMA_SERVER="${{LLAMA_SERVER:-{" ".join(shlex.quote(s) for s in server)}}}"')
    lines.append('exec $LLAMA_SERVER ' + " ".join(shlex.quote(a) for a in argv[n:]) + ' "$@"')
    return "\n".join(lines) + "\n"
