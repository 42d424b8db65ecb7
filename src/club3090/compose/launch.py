"""One launch description, rendered three ways: a Compose file, a ``vllm serve`` line, JSON.

``Launch`` holds a single Compose service in Compose syntax (``${VAR:-default}`` tokens kept
as shipped; every ``$`` in a value we derived ourselves is written ``$$``) plus the provenance
header. The ``vllm serve`` rendering is computed *from that same service* by resolving Compose
interpolation with an empty environment (the defaults), so the two renderings cannot drift.

Pure: no environment reads, no file writes, no clock.
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from club3090.argv import set_flag
from club3090.interpolate import interpolate_tree

FORMATS = ("compose", "vllm-serve", "json")
# the user's Hub token: a launch line never assigns it (an empty default would blank the user's own)
HF_TOKEN_VARS = ("HUGGING_FACE_HUB_TOKEN", "HF_TOKEN")

_CONTROL = re.compile(r"[\x00-\x1f\x7f\x85\u2028\u2029]")


def has_control_chars(text: str) -> bool:
    return bool(_CONTROL.search(text))


def escape_dollars(text: str) -> str:
    """A literal value for a Compose file: ``$`` -> ``$$`` so nothing is interpolated."""
    return text.replace("$", "$$")


def plain_data(value: Any) -> Any:
    """Deep copy into plain dicts/lists (MappingProxy, tuples) so yaml.safe_dump accepts it.
    The one deep-copy-to-plain-data helper (``compose`` uses it too)."""
    if isinstance(value, Mapping):
        return {str(k): plain_data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_data(v) for v in value]
    return value


@dataclass(frozen=True, slots=True)
class Launch:
    """The launch, as one Compose service plus where it came from."""

    kind: str                                   # "curated" | "derived"
    service_name: str
    service: Mapping[str, Any]                  # Compose syntax, fixed key order
    header: tuple[str, ...]                     # provenance lines, without the leading "# "
    top_level: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    profile: str = ""
    project_dir: str = ""                       # where relative mount sources resolve from (the shipped folder)

    # ---- Compose -------------------------------------------------------------------------
    def compose_document(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"services": {self.service_name: plain_data(self.service)}}
        for key, value in self.top_level.items():
            if key not in ("services", "version"):
                doc[key] = plain_data(value)
        return doc

    # ---- vllm serve ----------------------------------------------------------------------
    def resolved_service(self) -> dict[str, Any]:
        """The service with Compose interpolation resolved against an empty environment."""
        resolved = interpolate_tree(plain_data(self.service), {})
        assert isinstance(resolved, dict)
        return resolved

    def host_words(self, words: Sequence[str]) -> list[str]:
        """``words`` (a resolved command) with each container path replaced by its host source."""
        mounts = bind_mounts(self.resolved_service().get("volumes"), self.project_dir)
        return [host_path(w, mounts) for w in words]

    def serve_invocation(self) -> tuple[tuple[tuple[str, str], ...], tuple[str, ...], tuple[str, ...]]:
        """(env assignments, argv, container-only steps) equivalent to the service."""
        svc = self.resolved_service()
        env = _env_pairs(svc.get("environment"))
        mounts = bind_mounts(svc.get("volumes"), self.project_dir)
        entrypoint = _as_list(svc.get("entrypoint"))
        command = [str(a) for a in _as_list(svc.get("command"))]
        container_only: list[str] = []
        if entrypoint and [str(e) for e in entrypoint[:2]] == ["vllm", "serve"]:
            prefix = [str(e) for e in entrypoint]
        else:
            prefix = ["vllm", "serve"]
            if entrypoint:
                container_only.append("entrypoint script (patch installs, NVLink detection) runs "
                                      "only inside the container")
        args = [host_path(a, mounts) for a in command]
        host_port = _host_port(svc.get("ports"))
        if host_port is not None:
            args = set_flag(args, "--port", host_port, append=False)
        host_ip = _host_ip(svc.get("ports"))
        if host_ip is not None:      # published on one address: on the host, listen only there
            args = set_flag(args, "--host", host_ip, append=False)
        out_env: list[tuple[str, str]] = []
        for name, value in env:
            if name in HF_TOKEN_VARS:
                continue
            value = host_path(value, mounts)
            if name == "NVIDIA_VISIBLE_DEVICES":
                if value and value not in ("all", "none", "void"):
                    out_env.append(("CUDA_VISIBLE_DEVICES", value))
                continue
            out_env.append((name, value))
        return tuple(out_env), tuple(prefix + args), tuple(container_only)


def render(launch: Launch, fmt: str) -> str:
    if fmt == "compose":
        return render_compose(launch)
    if fmt == "vllm-serve":
        return render_vllm_serve(launch)
    if fmt == "json":
        return render_json(launch)
    raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")


def _comment(lines: Sequence[str]) -> str:
    return "".join(f"# {_CONTROL.sub(' ', line)}\n" for line in lines)


def render_compose(launch: Launch) -> str:
    import yaml

    body = yaml.safe_dump(launch.compose_document(), sort_keys=False, default_flow_style=False,
                          allow_unicode=True, width=4096)
    return _comment(launch.header) + body


def render_vllm_serve(launch: Launch) -> str:
    env, argv, container_only = launch.serve_invocation()
    lines = list(launch.header)
    lines.extend(f"note: {c}" for c in container_only)
    # one line per env assignment and per flag (with its values), joined by backslash-newlines
    groups: list[list[str]] = [[f"{name}={shlex.quote(value)}"] for name, value in env]
    groups.append([shlex.quote(a) for a in argv[:2]])
    for word in argv[2:]:
        if word.startswith("--") or len(groups) == len(env) + 1:
            groups.append([shlex.quote(word)])
        else:
            groups[-1].append(shlex.quote(word))
    return _comment(lines) + " \\\n  ".join(" ".join(g) for g in groups) + "\n"


def launch_json(launch: Launch) -> dict[str, Any]:
    env, argv, container_only = launch.serve_invocation()
    return {
        "kind": launch.kind,
        "profile": launch.profile,
        "service_name": launch.service_name,
        "header": list(launch.header),
        "compose": launch.compose_document(),
        "vllm_serve": {"env": dict(env), "argv": list(argv), "container_only": list(container_only)},
    }


def render_json(launch: Launch) -> str:
    return json.dumps(launch_json(launch), indent=2, ensure_ascii=False) + "\n"


# ---- helpers over resolved (interpolated) service data ---------------------------------------

def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, str):
        return shlex.split(value)
    return list(value)


def _env_pairs(environment: Any) -> list[tuple[str, str]]:
    pairs: list[tuple[str, str]] = []
    if isinstance(environment, Mapping):
        for k, v in environment.items():
            pairs.append((str(k), "" if v is None else str(v)))
    elif isinstance(environment, list):
        for item in environment:
            name, sep, value = str(item).partition("=")
            if sep:
                pairs.append((name, value))
    return pairs


def split_volume(spec: str) -> tuple[str, str, str]:
    """``src:dst[:mode]`` -> parts, not splitting inside ``${...}``."""
    parts: list[str] = []
    depth = 0
    cur: list[str] = []
    for ch in spec:
        if ch == "{" and cur and cur[-1] == "$":
            depth += 1
        elif ch == "}" and depth:
            depth -= 1
        if ch == ":" and depth == 0:
            parts.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    parts.append("".join(cur))
    if len(parts) == 1:
        return "", parts[0], ""
    if len(parts) == 2:
        return parts[0], parts[1], ""
    return parts[0], parts[1], ":".join(parts[2:])


def volume_parts(entry: Any) -> tuple[str, str, str]:
    """(source, target, mode) of a volume in either compose syntax (long-form mapping or ``src:dst[:mode]``)."""
    if isinstance(entry, Mapping):
        return str(entry.get("source", "")), str(entry.get("target", "")), "ro" if entry.get("read_only") else ""
    return split_volume(str(entry))


def volume_target(entry: Any) -> str:
    if isinstance(entry, Mapping):
        return str(entry.get("target", ""))
    return split_volume(str(entry))[1]


def volume_source(entry: Any) -> str:
    if isinstance(entry, Mapping):
        return str(entry.get("source", ""))
    return split_volume(str(entry))[0]


def bind_mounts(volumes: Any, project_dir: str = "") -> list[tuple[str, str]]:
    """(host source, container target) of each bind mount, longest target first; a relative source
    resolves from ``project_dir`` (as ``docker compose --project-directory`` does)."""
    out = []
    for entry in volumes or []:
        src, dst = volume_source(entry), volume_target(entry)
        if project_dir and src.startswith(("./", "../")):
            src = posixpath.normpath(posixpath.join(project_dir, src))
        elif not src.startswith("/"):
            continue            # a named volume, or no source this line can name
        if dst.startswith("/"):
            out.append((src, dst))
    return sorted(out, key=lambda m: -len(m[1]))


def host_path(arg: str, mounts: list[tuple[str, str]]) -> str:
    """``arg`` with a container path (a mount's target or below it) replaced by the host source."""
    for src, dst in mounts:
        if arg == dst:
            return src
        if arg.startswith(dst.rstrip("/") + "/"):
            return src.rstrip("/") + arg[len(dst.rstrip("/")):]
    return arg


def _host_ip(ports: Any) -> str | None:
    """The address the first port is published on (``HOST:PUBLISHED:TARGET``, IPv6 in brackets, or
    the long form's ``host_ip``), or None when it is published on every interface."""
    for entry in ports or []:
        if isinstance(entry, Mapping):
            ip = entry.get("host_ip")
            return str(ip) if ip else None
        text = str(entry)
        if text.startswith("["):
            return text[1:text.index("]")] if "]" in text else None
        parts = text.split(":")
        return parts[0] if len(parts) == 3 and parts[0] else None
    return None


def _host_port(ports: Any) -> str | None:
    for entry in ports or []:
        if isinstance(entry, Mapping):
            published = entry.get("published")
            return str(published) if published is not None else None
        parts = str(entry).split(":")
        if len(parts) >= 2 and parts[-2].isdigit():
            return parts[-2]
        return None
    return None
