"""``PatchExecution``: run the first layers of a microcontroller build patch by patch.

What it changes: no function. On ``main``'s graph (:func:`.mcu_graph.main_graph`, in the order
``MemoryAwareSchedule(memory_model="mcu")`` left) it searches a patch plan where that lowers the
peak (:func:`tvm_serenity.rewrite.patch.plan_patches`: segments of patches with their halos
recomputed, or of row strips with the rows the next strip reads cached, judged by the same
scheduler, at most ``max_overhead`` extra MACs, the input resident or streamed), or makes the
plan ``layers`` and ``grids`` force (:func:`~tvm_serenity.rewrite.patch.plan_for`). A plan
becomes the module's MCU graph (:mod:`.mcu_graph`: the patched graph and its schedule), which
``ArenaPlan(memory_model="mcu")`` plans and the Relax-to-C emitter writes; only the layers the
C emitter runs on a region are patched (:data:`~tvm_serenity.codegen.graph_c.PATCH_OPS`).

What it decided is ``.plan`` (a :class:`~tvm_serenity.rewrite.patch.PatchPlan`, None when no
plan lowers the peak) and ``.refusal`` (why no layer can be patched at all, or "").
"""

from __future__ import annotations

import tvm

from ..codegen.graph_c import PATCH_OPS
from ..rewrite.patch import PatchPlan, plan_for, plan_patches, why_no_plan, without_inplace
from ..schedule import METHODS, Deadline
from .convert import PassError
from .mcu_graph import McuGraph, main_graph, with_mcu_graph

__all__ = ["PatchExecution"]


@tvm.transform.module_pass(opt_level=0, name="serenity.PatchExecution")
class PatchExecution:
    """Patch-based execution of ``main``'s first layers (module docstring).

    Parameters
    ----------
    max_overhead : extra MACs a searched plan may cost, a fraction of the network's.
    layers, grids : force a plan instead of the search: the number of layers and the grid of
        each segment, from the input (:func:`~tvm_serenity.rewrite.patch.plan_for`).
    stream_input : the plan minimises the peak with the input read patch by patch (no arena
        tensor) instead of resident.
    method : the scheduling method judging the plans (a key of
        :data:`tvm_serenity.schedule.METHODS`).
    inplace : in-place execution (Right-in-Place, aliases) in the memory model, as the build
        runs it; without it only the patches' output chain is in place.
    time_limit : seconds (or a :class:`~tvm_serenity.schedule.Deadline`) for the search.
    """

    def __init__(self, max_overhead: float = 0.2, *, layers: list[int] | None = None,
                 grids: list | None = None, stream_input: bool = False,
                 method: str = "serenity", inplace: bool = True,
                 time_limit: Deadline | float | None = None):
        if method not in METHODS:
            raise PassError(f"PatchExecution: unknown method '{method}' "
                            f"(choose from {', '.join(sorted(METHODS))})")
        if (layers is None) != (grids is None):
            raise PassError("PatchExecution: layers and grids force a plan together")
        self.max_overhead, self.layers, self.grids = max_overhead, layers, grids
        self.stream_input, self.method, self.inplace = stream_input, method, inplace
        self.time_limit = time_limit
        self.plan: PatchPlan | None = None
        self.refusal = ""

    def transform_module(self, mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        graph = main_graph(mod, "PatchExecution")
        self.refusal = why_no_plan(graph, PATCH_OPS)
        options = dict(method=self.method, inplace=self.inplace, ops=PATCH_OPS,
                       stream_input=self.stream_input, time_limit=self.time_limit)
        if self.layers is not None:
            self.plan = plan_for(graph, self.layers, self.grids, **options)
        else:
            self.plan = plan_patches(graph, max_overhead=self.max_overhead, **options)
        if self.plan is None:
            return mod
        patched = self.plan.graph(graph if self.inplace else without_inplace(graph))
        return with_mcu_graph(mod, McuGraph(patched, tuple(self.plan.schedule.order), graph,
                                            "PatchExecution"))
