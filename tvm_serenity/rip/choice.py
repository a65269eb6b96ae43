"""In-place kind per layer for a fixed order: the channel-wise kind only where it pays.

:func:`~.workspace.choose_inplace` gives every depthwise layer the channel-wise kind wherever
RiP would need a gap: no gap in the arena, for the layer's padded input plane as a one-channel
buffer in the kernel scratch, which the C emitter sizes by its largest user. Which layers need
the zero gap depends on the order: only steps at the arena's peak do. So once the order is
fixed, :func:`relax_channel_kinds` walks the channel-wise layers, largest plane first, and gives
each RiP's workspace ``S*`` back wherever the order's liveness peak (the one memory model,
:func:`tvm_serenity.memory.simulate`) does not rise; the scratch then shrinks to the largest
plane still needed, and the arena keeps its bound. Greedy, ``O(layers x nodes)``.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

from ..graph import Graph, Node
from ..memory import simulate
from .workspace import ConvGeometry, choose_inplace

__all__ = ["relax_channel_kinds", "with_rip_workspaces", "window_geometry"]


def window_geometry(graph: Graph, node: Node) -> ConvGeometry:
    """The window geometry of a convolution, depthwise or pooling ``node`` of ``graph``, read
    off its attrs (``in_shape``, when a PAD was folded into it, is the unpadded input; else
    the input node's shape; pooling: one window per channel)."""
    a = node.attrs
    _, h, w, c = a.get("in_shape", graph.nodes[node.inputs[0]].shape)
    return ConvGeometry((h, w, c), node.shape[3], tuple(a["kernel"]), tuple(a["stride"]),
                        tuple(a.get("dilation", (1, 1))), tuple(a["padding"]),
                        a.get("groups", c))


def _channel_layer(graph: Graph, name: str):
    """``(RiP's S*, plane bytes)`` of a depthwise node that runs channel-wise, else None."""
    node = graph[name]
    if node.op != "depthwise_conv2d" or not isinstance(node.inplace, int):
        return None
    geometry = window_geometry(graph, node)
    elem_bytes = node.bytes // geometry.output_elements
    choice = choose_inplace(node.op, geometry, elem_bytes)
    if choice.kind != "channel" or node.inplace != choice.workspace_bytes:
        return None
    return choice.rip.workspace_bytes, choice.channel_buffer_bytes


def relax_channel_kinds(graph: Graph, order: Sequence[str]) -> tuple[Graph, tuple[str, ...]]:
    """``graph`` with RiP's workspace for every channel-wise depthwise layer that the liveness
    peak of ``order`` does not need at zero gap (module docstring), and the names of those
    layers. ``graph`` itself is returned when there are none."""
    peak = simulate(graph, order).peak_bytes
    layers = [(name, found) for name in order if (found := _channel_layer(graph, name))]
    relaxed: list[str] = []
    for name, _ in sorted(layers, key=lambda item: -item[1][1]):
        trial = with_rip_workspaces(graph, [name])
        if simulate(trial, order).peak_bytes <= peak:
            graph = trial
            relaxed.append(name)
    return graph, tuple(relaxed)


def with_rip_workspaces(graph: Graph, layers: Sequence[str]) -> Graph:
    """``graph`` with RiP's workspace ``S*`` for each channel-wise depthwise layer named in
    ``layers`` (what :func:`relax_channel_kinds` decided); a name that is no such layer raises
    ``ValueError``."""
    workspace = {}
    for name in layers:
        found = _channel_layer(graph, name) if name in graph.nodes else None
        if found is None:
            raise ValueError(f"'{name}' is no channel-wise depthwise layer of "
                             f"'{graph.name}'")
        workspace[name] = found[0]
    return Graph([dataclasses.replace(n, inplace=workspace[n.name]) if n.name in workspace
                  else n for n in graph.nodes.values()], graph.outputs, graph.name)
