"""The self-contained launch bundle ``club3090 up`` writes into DIR (docs/DESIGN.md).

From one :class:`club3090.compose.launch.Launch` (curated replay or derived) it builds:

- ``compose.yml``: the service with every bind-mount source inside DIR (``./files/...``,
  ``./cache/...``) or the HF cache (mounted at ``/root/.cache/huggingface/hub``); the model is
  served by repo id at the evaluated commit, offline, so ``docker compose -f DIR/compose.yml up -d``
  works from any working directory;
- ``.env``: the host port and the HF cache path the compose reads;
- ``serve.sh``: the same server without Docker, host paths only (the snapshot folder, DIR's files);
- ``launch.json``: the launch description (``compose.launch.launch_json``) plus what ``up`` decided;
- ``files/``: every file the service mounts (chat templates, patch overlays, sidecar scripts).

``plan`` is pure (values in, a ``Bundle`` out); ``write`` puts it on disk atomically.
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any, Protocol

from club3090.argv import drop_flags, flag_value, set_flag
from club3090.compose.generate import PULLS_MOUNT_ROOT
from club3090.compose.launch import (
    HF_TOKEN_VARS,
    Launch,
    launch_json,
    plain_data,
    render_compose,
    split_volume,
    volume_parts,
)

CONTAINER_HUB = "/root/.cache/huggingface/hub"
CONTAINER_HF = "/root/.cache/huggingface"
FILES = "files"
CACHE = "cache"
LOGS = "logs"
STATE = "state.json"
PID = "server.pid"
BUNDLE_FILES = ("compose.yml", ".env", "serve.sh", "launch.json")
_MODEL_REF = re.compile(r"/root/\.cache/huggingface/[^\s\"',]+")
_CONTAINER_ROOTS = ("/root/", "/etc/", "/usr/", "/opt/", "/app/", "/workspace/")
_HF_TOKEN_VARS = HF_TOKEN_VARS


@dataclass(frozen=True)
class Bundle:
    """Everything ``write`` puts into DIR, as text (and payload bytes), plus the facts ``up`` needs."""

    directory: Path
    files: Mapping[str, str]                 # relative name -> text
    payloads: Mapping[str, bytes]            # relative name (under files/) -> bytes
    native_argv: tuple[str, ...]
    native_env: Mapping[str, str]
    served_model: str
    port: int
    container_name: str
    container_only: tuple[str, ...] = ()     # steps serve.sh cannot do (overlays into the image)
    unresolved: tuple[str, ...] = ()         # container model paths the bundle cannot serve (a drafter's weights)
    folders: tuple[str, ...] = ()            # writable cache folders the service mounts (created empty)
    upstream_files: Mapping[str, str] = field(default_factory=dict)  # bundle path -> upstream path
    launch: Launch | None = None             # the rewritten launch compose.yml renders (multi-node files use it)


def _is_model_mount(target: str) -> bool:
    return target.rstrip("/") in (CONTAINER_HF, CONTAINER_HUB) or target.startswith(PULLS_MOUNT_ROOT + "/")


def _bundle_source(source: str, upstream_base: str) -> tuple[str, str | None]:
    """A relative/absolute mount source -> (path inside DIR, upstream path of the file or None for a cache)."""
    norm = posixpath.normpath(posixpath.join(upstream_base, source)) if upstream_base else posixpath.normpath(source)
    parts = PurePosixPath(norm).parts
    if "cache" in parts:                        # torch_compile / triton caches: empty folders of our own
        return f"./{CACHE}/" + "/".join(parts[parts.index("cache") + 1:]), None
    return f"./{FILES}/" + norm.lstrip("./"), norm


def plan(launch: Launch, *, directory: Path, repo_id: str, commit: str, snapshot: Path, hub_cache: Path,
         port: int, upstream_base: str = "", served_model: str | None = None) -> Bundle:
    """Rewrite ``launch`` into a self-contained bundle (see the module docstring).

    ``upstream_base`` is the shipped compose's folder in the upstream checkout (curated profiles):
    relative mount sources resolve from it to the upstream file each mount needs.
    ``served_model`` replaces the service's ``--served-model-name`` (``swap``: the fine-tune's name).
    """
    directory = Path(directory).absolute()
    svc: dict[str, Any] = plain_data(launch.service)
    volumes: list[Any] = []
    upstream: dict[str, str] = {}
    folders: list[str] = []
    model_target = CONTAINER_HUB
    for entry in svc.get("volumes") or []:
        source, target, mode = volume_parts(entry)
        if _is_model_mount(target) or "MODEL_DIR" in source:
            model_target = target
            continue
        inside, up = _bundle_source(source, upstream_base)
        if up is not None:
            upstream[inside[2:]] = up
        else:
            folders.append(inside[2:])
        volumes.append(f"{inside}:{target}" + (f":{mode}" if mode else ""))
    volumes.insert(0, f"${{HF_HUB_CACHE_HOST:-{hub_cache}}}:{CONTAINER_HUB}")
    svc["volumes"] = volumes

    command = [str(a) for a in svc.get("command") or []]
    command = _swap_model(command, model_target, repo_id)
    command = [*drop_flags(command, ("--revision",)), "--revision", commit]
    if served_model is not None:
        command = set_flag(command, "--served-model-name", served_model)
    served = flag_value(command, "--served-model-name") or repo_id
    container_port = _container_port(svc, command)
    svc["command"] = command
    svc["ports"] = [f"127.0.0.1:${{PORT:-{port}}}:{container_port}"]
    env = [e for e in (svc.get("environment") or []) if str(e).split("=", 1)[0] not in
           (*_HF_TOKEN_VARS, "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")]
    svc["environment"] = [*env, "HF_HUB_OFFLINE=1", "TRANSFORMERS_OFFLINE=1"]
    bundled = bundled_launch(launch, svc, directory)
    container = str(svc["container_name"])

    argv, env_pairs, container_only = _native(bundled, directory, snapshot, port)
    description = launch_json(bundled)
    description["up"] = {"repo_id": repo_id, "commit": commit, "snapshot": str(snapshot), "port": port,
                         "served_model": served, "hub_cache": str(hub_cache), "upstream_files": upstream}
    files = {
        "compose.yml": render_compose(bundled),
        ".env": f"PORT={port}\nHF_HUB_CACHE_HOST={hub_cache}\n",
        "serve.sh": _serve_sh(argv, env_pairs, container_only, launch.header),
        "launch.json": json.dumps(description, indent=2, ensure_ascii=False) + "\n",
    }
    unresolved = tuple(sorted({m.group(0) for a in argv for m in _MODEL_REF.finditer(a)}))
    return Bundle(directory, files, {}, tuple(argv), dict(env_pairs), served, port, container,
                  container_only=tuple(container_only), upstream_files=upstream, unresolved=unresolved,
                  folders=tuple(folders), launch=bundled)


def bundled_launch(launch: Launch, svc: dict[str, Any], directory: Path) -> Launch:
    """``launch`` with the bundle's service ``svc``: started once (no restart policy), under a fixed
    container name, its header saying how to run the bundle's own compose file."""
    svc["restart"] = "no"
    svc["container_name"] = str(svc.get("container_name") or f"club3090-{launch.service_name}")
    return Launch(kind=launch.kind, service_name=launch.service_name, service=svc,
                  header=(*launch.header[:-1], f"run: docker compose -f {directory / 'compose.yml'} up -d"),
                  top_level=launch.top_level, profile=launch.profile)


def _swap_model(command: list[str], model_target: str, repo_id: str) -> list[str]:
    """``--model <container path>`` (or the positional model) -> the repo id."""
    out = list(command)
    if "--model" in out:
        i = out.index("--model")
        if i + 1 < len(out):
            out[i + 1] = repo_id
        return out
    if out and not out[0].startswith("-"):
        out[0] = repo_id
        return out
    return ["--model", repo_id, *out]


def _path_pattern(path: str) -> re.Pattern[str]:
    """``path`` as a whole path inside any text: not preceded by a path character, followed by
    nothing, ``/``, a quote, a space, a comma or a closing brace."""
    return re.compile(r"(?<![\w./-])" + re.escape(path.rstrip("/")) + r"(?=$|[/\"'\s,}])")


def relocate(launch: Launch, old: str, new: str) -> Launch:
    """``launch`` with the container path ``old`` (a whole path: followed by nothing, ``/``, a quote
    or a space) replaced by ``new`` in its command, entrypoint and environment."""
    pattern = _path_pattern(old)

    def swap(value: Any) -> Any:
        if isinstance(value, str):
            return pattern.sub(new, value)
        if isinstance(value, (list, tuple)):
            return [swap(v) for v in value]
        if isinstance(value, Mapping):
            return {k: swap(v) for k, v in value.items()}
        return value
    svc: dict[str, Any] = plain_data(launch.service)
    for key in ("command", "entrypoint", "environment"):
        if key in svc:
            svc[key] = swap(svc[key])
    return replace(launch, service=svc)




def _container_port(svc: Mapping[str, Any], command: list[str]) -> str:
    value = flag_value(command, "--port")
    if value and value.isdigit():
        return value
    for entry in svc.get("ports") or []:
        last = str(entry).rsplit(":", 1)[-1].split("/")[0]
        if last.isdigit():
            return last
    return "8000"


def _native(launch: Launch, directory: Path, snapshot: Path, port: int
            ) -> tuple[list[str], list[tuple[str, str]], list[str]]:
    """The host command line: mount targets -> DIR's files, the model -> the snapshot folder."""
    svc = launch.resolved_service()
    mounts: list[tuple[str, str]] = []
    container_only: list[str] = []
    hub_host: str | None = None
    for entry in svc.get("volumes") or []:
        source, target, _mode = split_volume(str(entry))
        host = str(directory / source[2:]) if source.startswith("./") else source
        if target == CONTAINER_HUB:      # the HF cache: a drafter's snapshot is read from it
            hub_host = host
            continue
        if target.startswith(("/usr/", "/opt/", "/app/")) or "site-packages" in target or "dist-packages" in target:
            container_only.append(f"overlay {target} (mounted into the image; not applied to a host install)")
        mounts.append((host, target))
    mounts.sort(key=lambda m: -len(m[1]))
    command = [str(a) for a in svc.get("command") or []]
    command = drop_flags(command, ("--revision", "--host", "--port"))
    i = command.index("--model") if "--model" in command else -1

    def to_host(a: str) -> str:
        for host, target in mounts:
            if a == target or a.startswith(target.rstrip("/") + "/"):
                return host + a[len(target.rstrip("/")):]
        return a
    args = [to_host(a) for a in command]
    if hub_host is not None:         # also inside a value (--speculative-config '{"model": "<path>"}')
        args = [_path_pattern(CONTAINER_HUB).sub(hub_host, a) for a in args]
    if i >= 0:                       # `vllm serve MODEL`: the positional form, for every vLLM release
        del args[i:i + 2]
    elif args and not args[0].startswith("-"):
        args.pop(0)
    argv = ["vllm", "serve", str(snapshot), *args, "--host", "127.0.0.1", "--port", str(port)]
    env: list[tuple[str, str]] = [("HF_HUB_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "1")]
    for raw in svc.get("environment") or []:
        name, _, value = str(raw).partition("=")
        if name in (*_HF_TOKEN_VARS, "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
            continue
        if name == "NVIDIA_VISIBLE_DEVICES":
            if value and value not in ("all", "none", "void"):
                env.append(("CUDA_VISIBLE_DEVICES", value))
            continue
        # a path list (PYTHONPATH=/etc/x:) maps element by element
        value = ":".join(to_host(part) for part in value.split(":")) if value.startswith("/") else to_host(value)
        if value.startswith(_CONTAINER_ROOTS):
            container_only.append(f"{name}={value} (a path inside the image)")
            continue
        env.append((name, value))
    entry = [str(e) for e in svc.get("entrypoint") or []]
    if entry and entry[:2] != ["vllm", "serve"] and any("source" in e or ".sh" in e for e in entry):
        container_only.append("entrypoint script (patch installs) runs only inside the container")
    return argv, env, container_only


def _serve_sh(argv: list[str], env: list[tuple[str, str]], container_only: list[str],
              header: tuple[str, ...]) -> str:
    lines = ["#!/bin/sh", "# The same server as compose.yml, without Docker (host paths only).",
             "# Start it with `club3090 up --launcher native` (detached, logs in logs/), or run this file.",
             *(f"# {h}" for h in header[:2])]
    lines += [f"# not applied natively: {c}" for c in container_only]
    lines.append('VLLM="${VLLM:-vllm}"')
    lines += [f"export {k}={shlex.quote(v)}" for k, v in env]
    lines.append('exec "$VLLM" ' + " ".join(shlex.quote(a) for a in argv[1:]) + ' "$@"')
    return "\n".join(lines) + "\n"


class Writer(Protocol):
    """Where a bundle is written: the Provider's atomic file writes."""

    def write_file(self, path: Path, data: str | bytes, *, mode: int | None = None) -> None: ...

    def make_dir(self, path: Path) -> None: ...


def write(bundle: Bundle, writer: Writer, executable: Callable[[str], bool] = lambda _name: False) -> None:
    """Put the bundle into its folder: its logs/ and cache folders, the payloads (``executable`` ones,
    by their name under files/, and shell scripts get mode 755), the files, serve.sh runnable."""
    d = bundle.directory
    for folder in (LOGS, *bundle.folders):
        writer.make_dir(d / folder)
    for name, data in bundle.payloads.items():
        runnable = name.endswith(".sh") or executable(name[len(FILES) + 1:])
        writer.write_file(d / name, data, mode=0o755 if runnable else None)
    for name, text in bundle.files.items():
        writer.write_file(d / name, text, mode=0o755 if name == "serve.sh" else None)


def mount_sources(compose_text: str, env: Mapping[str, str]) -> list[str]:
    """Every bind-mount source of a written compose.yml, interpolated with ``env``."""
    import yaml

    from club3090.interpolate import interpolate_tree

    doc = interpolate_tree(yaml.safe_load(compose_text), dict(env))
    out: list[str] = []
    for svc in (doc.get("services") or {}).values():
        for entry in svc.get("volumes") or []:
            out.append(str(entry.get("source")) if isinstance(entry, Mapping) else split_volume(str(entry))[0])
    return out


__all__ = ["BUNDLE_FILES", "CONTAINER_HUB", "LOGS", "PID", "STATE", "Bundle", "bundled_launch", "mount_sources", "plan", "relocate", "write"]
