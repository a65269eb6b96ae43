"""The Relax-to-C emitter of the microcontroller build: a planned ``main`` as ``model.c``.

What TVM's removed AOT executor did for a planned module, for the modules the MCU route builds
(:func:`~tvm_serenity.frontend.relax_import.from_tflite`, then the passes ``FoldPad``,
``MemoryAwareSchedule(memory_model="mcu")`` and ``ArenaPlan(memory_model="mcu")``):

* ``main``'s bindings are walked in their order; each is the call of one kernel of the family
  and is read back as the operator its PrimFunc describes
  (:func:`~tvm_serenity.frontend.relax_lift.operators_of`). The C function it calls is that
  kernel generated from the same description (:mod:`.kernel_call`: the PrimFunc's body in the
  flat C ABI, printed by :mod:`.plain_c`), with the RiP layout where the plan overlaps the
  call's input and output. Where ``IdentityGraphRewrite(memory_model="mcu")`` or
  ``PatchExecution`` left a graph of ``main`` in the module (:mod:`tvm_serenity.passes.mcu_graph`:
  int32 partial sums, patches), its steps are walked instead, in its order;
* the arena plan is the module attribute ``"serenity.arena"`` that ``ArenaPlan`` left
  (:func:`~tvm_serenity.passes.arena.read_main_arena`). It is checked before anything is
  emitted: its order must be the module's, and :func:`~tvm_serenity.alloc.verify_plan` must
  accept it for that graph (every tensor placed inside the arena, no two live tensors
  overlapping except in-place pairs laid out by the rule). A plan made for another module, or
  edited, is refused naming what is wrong;
* the calls, the arena, the constants and the I/O functions are written by
  :func:`.graph_c.emit_model` at the plan's offsets.
"""

from __future__ import annotations

from typing import NamedTuple

import tvm

from ..alloc import ArenaPlan, PlanError, verify_plan
from ..frontend.relax_lift import operators_of
from ..graph import Graph
from ..memory import liveness
from ..passes.arena import read_main_arena
from ..passes.mcu_graph import mcu_graph
from ..rip.choice import with_rip_workspaces
from .graph_c import EmittedModel, IntegerCore, emit_model
from .spec import CodegenError

__all__ = ["emit_main", "EmittedMain"]


class EmittedMain(NamedTuple):
    """What :func:`emit_main` wrote and from what."""

    emitted: EmittedModel           # model.c / model.h (``emitted.write(directory)``)
    graph: Graph                    # the graph planned and emitted
    plan: ArenaPlan                 # its arena plan, verified
    source_graph: Graph | None      # main's graph a pass rewrote or patched into ``graph``
    core: IntegerCore               # what model_run computes: main's operators


def emit_main(mod: tvm.IRModule, core: IntegerCore | None = None, *,
              opt_level: str | None = "O2", name: str | None = None
              ) -> EmittedMain:
    """``model.c`` / ``model.h`` of ``mod``'s planned ``main`` (module docstring), with the
    graph it was planned on, the plan, the graph of ``main`` a pass rewrote or patched into
    that graph (None when it is main's own) and the integer core of main's operators. ``core`` is the :class:`~.graph_c.IntegerCore` the
    module was imported from, if any (its source model, stripped edges and name; its operators
    are replaced by main's); ``name`` names the model (default: the source model's, or
    ``"model"``)."""
    arena = read_main_arena(mod)
    if arena is None:
        raise CodegenError("the module has no microcontroller arena plan: run "
                           "ArenaPlan(memory_model='mcu') on it first")
    model = operators_of(mod, core.model.name, core.model.source) if core else operators_of(mod)
    core = IntegerCore(model, core.source if core else model, core.stripped if core else ())
    name = name or core.source.name
    decided = mcu_graph(mod, "emit_main")
    plan = arena.plan
    if plan.order != decided.order:
        raise CodegenError(f"the arena plan is for another order than the module's (step "
                           f"{_first_difference(plan.order, decided.order)}): run "
                           f"ArenaPlan(memory_model='mcu') after the last pass that reorders")
    try:
        graph = with_rip_workspaces(decided.graph, arena.relaxed_channel_layers)
        verify_plan(graph, liveness(graph, list(plan.order), arena.inplace), plan)
    except (ValueError, PlanError) as e:
        raise CodegenError(f"the arena plan does not fit main: {e}") from None
    graph = Graph(graph.nodes.values(), graph.outputs, name)
    source = Graph(decided.source.nodes.values(), decided.source.outputs, name) \
        if decided.source is not None else None
    emitted = emit_model(core, graph, plan, opt_level=opt_level, name=name,
                         source_graph=source if decided.rewritten else None)
    return EmittedMain(emitted, graph, plan, source, core)


def _first_difference(a, b) -> str:
    k = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return f"{k}: '{a[k] if k < len(a) else '(end)'}' planned, the module runs " \
           f"'{b[k] if k < len(b) else '(end)'}'"
