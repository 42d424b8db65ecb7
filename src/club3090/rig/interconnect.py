"""The link between the nodes of a multi-node rig: a stated assumption, never measured here.

``--interconnect`` names one of :data:`INTERCONNECTS`; a rig of several nodes without it is priced
on :data:`DEFAULT_INTERCONNECT` and the output says so. The figures are nominal line rates and
typical small-message latencies (docs/DESIGN.md, "More than one machine"); they feed the speed
estimate's inter-node hop and the advisories, never the memory fit.

``advisories(tp, pp, gpus_per_node, nodes, interconnect)`` says what a shape's parallel layout
costs over that link: vLLM's multi-node guide runs tensor parallel inside a node and pipeline
parallel across nodes.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT_INTERCONNECT", "INTERCONNECTS", "Interconnect", "advisories", "crossings"]


@dataclass(frozen=True, slots=True)
class Interconnect:
    name: str
    bytes_per_s: float          # nominal line rate
    latency_s: float            # one small message, one way, through the NCCL transport it gets
    transport: str              # what NCCL runs over


INTERCONNECTS: dict[str, Interconnect] = {
    "ethernet-10g": Interconnect("ethernet-10g", 10e9 / 8, 50e-6, "TCP sockets"),
    "ethernet-100g": Interconnect("ethernet-100g", 100e9 / 8, 30e-6, "TCP sockets (RoCE if configured)"),
    "infiniband": Interconnect("infiniband", 200e9 / 8, 10e-6, "InfiniBand verbs (HDR 200 Gb/s)"),
}
# the home rig this project started from: two boxes on a 10 GbE switch (the slowest stated link)
DEFAULT_INTERCONNECT = "ethernet-10g"


def crossings(tp: int, pp: int, gpus_per_node: int) -> tuple[bool, int]:
    """(TP group spans nodes, number of PP stage boundaries that cross a node boundary) for ranks
    laid out node by node, TP innermost (rank = stage * tp + tp_rank)."""
    per_node = max(gpus_per_node, 1)
    tp_spans = tp > per_node
    hops = sum(1 for stage in range(1, pp) if (stage * tp) // per_node != (stage * tp - 1) // per_node)
    return tp_spans, hops


def advisories(tp: int, pp: int, gpus_per_node: int, nodes: int, interconnect: str | None) -> tuple[str, ...]:
    """What this layout costs over the link between nodes; empty on one node or within one node."""
    if nodes <= 1 or tp * pp <= gpus_per_node:
        return ()
    link = INTERCONNECTS.get(interconnect or DEFAULT_INTERCONNECT, INTERCONNECTS[DEFAULT_INTERCONNECT])
    tp_spans, hops = crossings(tp, pp, gpus_per_node)
    out = []
    if tp_spans:
        severity = ("discouraged: every layer's two all-reduces cross the network"
                    if link.name.startswith("ethernet") else "workable, but every layer's all-reduces cross the network")
        out.append(f"TP {tp} spans nodes over {link.name}: {severity}; vLLM's multi-node guide: tensor parallel "
                   f"inside a node ({gpus_per_node} GPUs), pipeline parallel across nodes")
    if hops:
        out.append(f"PP {pp} crosses {hops} node boundar{'y' if hops == 1 else 'ies'} over {link.name} "
                   f"({link.transport}): one activation hand-off per boundary per step, ~{link.latency_s * 1e6:.0f} µs "
                   "each; little bandwidth, so pipeline parallel suits a slower link")
    return tuple(out)
