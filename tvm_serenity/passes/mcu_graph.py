"""The graph IR a microcontroller build compiles, as the MCU passes leave it in the module.

``main``'s own graph is :func:`main_graph`: its operators read back
(:func:`~tvm_serenity.frontend.relax_lift.operators_of`) as the graph the MCU back end compiles
(:func:`~tvm_serenity.frontend.tflite_to_graph`: PADs folded into the convolutions reading them,
Right-in-Place workspaces and exact aliases), in binding order. Two passes transform that graph
beyond what ``main``'s operators can say: ``IdentityGraphRewrite(memory_model="mcu")`` (int32
partial convolutions accumulated in place, depthwise slices) and :class:`~.patch.PatchExecution`
(the first layers run patch by patch). They leave ``main`` as it is and put what they decided,
the graph that runs, its order and the graph of ``main`` it was made from, in the module
attribute ``"serenity.mcu_graph"`` (an :class:`McuGraph`, :func:`with_mcu_graph`).

``ArenaPlan(memory_model="mcu")`` plans, and the Relax-to-C emitter
(:func:`tvm_serenity.codegen.relax_c.emit_main`) writes, :func:`mcu_graph` of a module: that
graph when a pass left one (refused unless it was made from the graph ``main`` has now: a
module changed after the pass does not silently run the old graph), else ``main``'s graph in
binding order.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import tvm

from ..frontend.relax_lift import LiftError, operators_of
from ..frontend.to_graph import tflite_to_graph
from ..graph import Graph, GraphError
from .convert import PassError

__all__ = ["GRAPH_ATTR", "McuGraph", "main_graph", "mcu_graph", "with_mcu_graph"]

GRAPH_ATTR = "serenity.mcu_graph"
BY = ("main", "IdentityGraphRewrite", "PatchExecution")


@dataclass(frozen=True)
class McuGraph:
    """The graph a microcontroller build runs and its order; ``source`` is the graph of ``main``
    it was made from (None when it is ``main``'s own); ``by`` names what made it."""

    graph: Graph
    order: tuple[str, ...]
    source: Graph | None = None
    by: str = "main"

    @property
    def patched(self) -> bool:
        """Patch-based: the patches' output chain runs in place (aliases) even without RiP."""
        return self.by == "PatchExecution"

    @property
    def rewritten(self) -> bool:
        return self.by == "IdentityGraphRewrite"

    def to_json(self) -> dict:
        return {"by": self.by, "order": list(self.order), "graph": self.graph.to_json(),
                "source": self.source.to_json()}


def main_graph(mod: tvm.IRModule, where: str) -> Graph:
    """The graph of ``main``'s operators in binding order (module docstring); ``where`` names
    the caller in the :class:`~.convert.PassError` a module that is not one dataflow block of
    integer kernels gets."""
    try:
        return tflite_to_graph(operators_of(mod, "main", f"{where}: main"), fold_pad=True,
                               name="main")
    except LiftError as e:
        raise PassError(str(e)) from None


def with_mcu_graph(mod: tvm.IRModule, decided: McuGraph) -> tvm.IRModule:
    """``mod`` with ``decided`` (made from ``main``'s graph) as its MCU graph."""
    if decided.source is None or decided.by not in BY[1:]:
        raise PassError("an MCU graph in the module is made by IdentityGraphRewrite or "
                        "PatchExecution from main's graph")
    return mod.with_attr(GRAPH_ATTR, json.dumps(decided.to_json()))


def mcu_graph(mod: tvm.IRModule, where: str) -> McuGraph:
    """What a microcontroller build of ``mod`` runs (module docstring)."""
    graph = main_graph(mod, where)
    if mod.attrs is None or GRAPH_ATTR not in mod.attrs:
        return McuGraph(graph, tuple(graph.op_names))
    what = f"{where}: module attribute '{GRAPH_ATTR}'"
    try:
        data = json.loads(str(mod.attrs[GRAPH_ATTR]))
        decided = McuGraph(Graph.from_json(data["graph"]), tuple(data["order"]),
                           Graph.from_json(data["source"]), data["by"])
    except (ValueError, KeyError, TypeError, GraphError) as e:
        raise PassError(f"{what} is corrupt: {e}") from None
    if decided.by not in BY[1:] or not all(isinstance(n, str) for n in decided.order):
        raise PassError(f"{what} is corrupt: made by {decided.by!r}")
    if _text(decided.source) != _text(graph):
        raise PassError(f"{what}: the graph {decided.by} decided was made from another main "
                        f"(main changed after it ran): run it again")
    return decided


def _text(graph: Graph) -> str:
    """The graph's nodes as canonical JSON text (tuples and lists alike)."""
    return json.dumps(graph.to_json()["nodes"], sort_keys=True)
