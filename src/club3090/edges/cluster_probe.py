"""What a multi-node launch can check on this machine before its files are written.

Nothing here reaches another host: an address is "this machine's" when a socket can bind to it,
a port is free when a socket can bind to it, an interface exists when the kernel lists it, a tool
is installed when it is on PATH. Each check returns one line for the runbook and the terminal.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Check:
    ok: bool
    line: str


def is_local_address(host: str) -> bool:
    """Whether ``host`` is an address of this machine (a socket binds to it)."""
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST)
    except (OSError, UnicodeError):
        return False
    for family, kind, proto, _name, addr in infos:
        with contextlib.suppress(OSError), socket.socket(family, kind, proto) as s:
            s.bind((addr[0], 0))
            return True
    return False


def port_free(host: str, port: int) -> bool:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST)
    except (OSError, UnicodeError):
        return False
    for family, kind, proto, _name, addr in infos:
        with socket.socket(family, kind, proto) as s:
            try:
                s.bind(addr)
            except OSError:
                return False
            return True
    return False


def interfaces() -> tuple[str, ...]:
    with contextlib.suppress(OSError):
        return tuple(name for _i, name in socket.if_nameindex())
    return ()


def ray_checks(*, head_ip: str, ray_port: int, serve_port: int, ifname: str,
               which: Callable[[str], str | None] = shutil.which) -> list[Check]:
    """The head's address, its ports, the interface and the tools, as far as this machine can tell."""
    out: list[Check] = []
    head_here = bool(head_ip) and is_local_address(head_ip)
    if not head_ip:
        out.append(Check(False, "HEAD_IP is not set (--head-ip): the scripts refuse to start until cluster.env "
                                "names the head's address"))
    elif not head_here:
        out.append(Check(True, f"{head_ip} is not an address of this machine: run head.sh on the machine that "
                               "has it"))
    else:
        out.append(Check(True, f"{head_ip} is an address of this machine: it can be the head"))
        for label, port in (("Ray's port", ray_port), ("the serving port", serve_port)):
            free = port_free(head_ip, port)
            out.append(Check(free, f"{label} {port} on {head_ip} is " + ("free" if free else "IN USE: pick another "
                                                                          "(--ray-port / --port)")))
    if ifname:
        known = interfaces()
        if ifname in known:
            out.append(Check(True, f"network interface {ifname} exists on this machine"))
        else:
            out.append(Check(False, f"network interface {ifname} is not on this machine (it has "
                                    f"{', '.join(known) or 'none listed'}): fine if only the other nodes have it"))
    else:
        out.append(Check(False, "no --network-interface: NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME are left unset "
                                "(set them in cluster.env on machines with several interfaces)"))
    for tool, why in (("ray", "head.sh / worker.sh on this host"), ("docker", "compose.head.yml / "
                                                                             "compose.worker.yml")):
        path = which(tool)
        out.append(Check(path is not None, f"{tool}: {path}" if path else f"{tool} is not on PATH here "
                                                                          f"(needed for {why})"))
    return out


def k8s_checks(which: Callable[[str], str | None] = shutil.which) -> list[Check]:
    path = which("kubectl")
    return [Check(path is not None, f"kubectl: {path}" if path else "kubectl is not on PATH here (needed to "
                                                                      "apply the manifests)")]


__all__ = ["Check", "interfaces", "is_local_address", "k8s_checks", "port_free", "ray_checks"]
