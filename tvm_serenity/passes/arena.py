"""``ArenaPlan``: one static arena per function at planned offsets, instead of TVM's
``StaticPlanBlockMemory``.

What it changes (run it after ``CallTIRRewrite`` and ``ToNonDataflow``, where TVM runs
``StaticPlanBlockMemory``): in every Relax function, each *plannable* intermediate
``v = R.builtin.alloc_tensor(shape, dtype, 0, "global")`` becomes::

    v_arena = R.memory.alloc_tensor(serenity_arena, offset, shape, dtype)
    v = R.memory.ensure_zero_offset(v_arena)

and one ``serenity_arena = R.memory.alloc_storage(R.shape([arena_bytes]), 0, "global",
"uint8")`` is bound in a new block before the first of them. Everything else is unchanged; the
allocations it does not plan are left to ``LowerAllocTensor`` as in TVM's own pipeline.

Which allocations are plannable follows ``StaticPlanBlockMemory``: static shape, ``global``
scope, device 0, bound in a non-dataflow block of the function body, and used (directly or
through aliases, tuples and tuple items) only as arguments of calls to the module's PrimFuncs.
So the function's result and whatever reaches it keep their own allocation, as TVM's planner
does (the returned tensor never aliases reused storage); parameters are never in the arena;
nothing handed to a packed function, another Relax function or an ``If`` is either, and
allocations inside ``If`` branches are left alone.

Offsets come from :func:`tvm_serenity.alloc.plan_arena` for the function's binding order (the
graph of :mod:`.convert` with every non-plannable tensor at 0 bytes). Generated PrimFuncs reject
tensors with a non-zero ``byte_offset`` and ``ensure_zero_offset`` turns an offset into a plain
pointer only when it is a multiple of 64 (it silently copies otherwise), so the alignment must be
a multiple of 64 on this host path.

The pass records, per function, its arena next to TVM's ``StaticPlanBlockMemory`` total for the
same module (:func:`static_plan_bytes`) and the liveness peak and lower bound of the same order:
on the pass instance as ``.report`` (:class:`ArenaReport`) and as JSON in the module attribute
``"serenity.arena"``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

import tvm
from tvm import relax

from ..graph import Graph
from .convert import (ConversionError, PassError, graph_of_bindings, is_op, is_view,
                      relax_functions, type_bytes, with_blocks, with_report)

__all__ = ["ArenaPlan", "ArenaReport", "FunctionArena", "REPORT_ATTR", "HOST_ALIGNMENT",
           "static_plan_bytes"]

REPORT_ATTR = "serenity.arena"
HOST_ALIGNMENT = 64
ARENA_VAR = "serenity_arena"


@dataclass(frozen=True)
class FunctionArena:
    """The arena of one function (bytes)."""

    function: str
    tensors: int                  # allocations placed in the arena
    arena_bytes: int
    static_plan_bytes: int        # TVM's StaticPlanBlockMemory on the same module
    liveness_peak_bytes: int      # of the arena's tensors, same order: no allocator does better
    lower_bound_bytes: int        # same order, with alignment padding
    planner: str
    status: str
    optimal: bool
    seconds: float
    offsets: dict[str, int] = field(default_factory=dict)
    graph: dict = field(default_factory=dict, compare=False)   # the graph planned (JSON, in
                                                               # binding order): for reports


@dataclass
class ArenaReport:
    """Everything one run of :class:`ArenaPlan` decided."""

    planner: str
    alignment: int
    functions: list[FunctionArena] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"planner": self.planner, "alignment": self.alignment,
                "functions": [asdict(f) for f in self.functions]}


def _static_plan_by_function(mod: tvm.IRModule) -> dict[str, int]:
    """Function name -> bytes of the storages ``StaticPlanBlockMemory`` allocates in it."""
    out = {}
    for gvar, func in relax.transform.StaticPlanBlockMemory()(mod).functions.items():
        if not isinstance(func, relax.Function):
            continue
        sizes = []

        def visit(expr, sizes=sizes):
            if is_op(expr, "relax.memory.alloc_storage"):
                sizes.append(int(expr.args[0].values[0]))

        relax.analysis.post_order_visit(func.body, visit)
        out[gvar.name_hint] = sum(sizes)
    return out


def static_plan_bytes(mod: tvm.IRModule, function: str | None = None) -> int:
    """Bytes TVM's ``StaticPlanBlockMemory`` reserves for ``mod`` (lowered past
    ``CallTIRRewrite``): the sum of its ``alloc_storage`` sizes over every Relax function, or
    over ``function`` only."""
    by_function = _static_plan_by_function(mod)
    return sum(by_function.values()) if function is None else by_function.get(function, 0)


def _alloc_bytes(binding: relax.Binding) -> int | None:
    """Bytes of a plannable ``R.builtin.alloc_tensor`` binding (static, global, device 0)."""
    value = binding.value
    if not (isinstance(binding, relax.VarBinding)
            and is_op(value, "relax.builtin.alloc_tensor")):
        return None
    _shape, _dtype, device, scope = value.args
    if not (isinstance(device, tvm.tirx.IntImm) and int(device.value) == 0
            and isinstance(scope, tvm.ir.StringImm) and scope.value == "global"):
        return None
    try:
        return type_bytes(binding.var.ty)
    except ConversionError:
        return None


def _is_prim_call(mod: tvm.IRModule, value) -> bool:
    return (isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.GlobalVar)
            and value.op in mod.functions and isinstance(mod[value.op], tvm.tirx.PrimFunc))


@tvm.transform.module_pass(opt_level=0, name="serenity.ArenaPlan")
class ArenaPlan:
    """Place the intermediate tensors of every Relax function in one arena at planned offsets.

    Parameters
    ----------
    planner : a key of :data:`tvm_serenity.alloc.PLANNERS` (``"optimal"``: CP-SAT).
    alignment : offset alignment in bytes, a multiple of 64 (see the module docstring).
    time_limit : seconds for the optimal planner per function (None: its default).
    """

    def __init__(self, planner: str = "optimal", alignment: int = HOST_ALIGNMENT,
                 time_limit: float | None = None):
        from ..alloc import PLANNERS   # imports the solver: only once a pass is made
        if planner not in PLANNERS:
            raise PassError(f"ArenaPlan: unknown planner '{planner}' "
                            f"(choose from {', '.join(PLANNERS)})")
        if isinstance(alignment, bool) or not isinstance(alignment, int) or alignment <= 0 \
                or alignment % HOST_ALIGNMENT:
            raise PassError(f"ArenaPlan: alignment must be a positive multiple of "
                            f"{HOST_ALIGNMENT} on the TVM host path, got {alignment!r}")
        self.planner = planner
        self.alignment = alignment
        self.time_limit = time_limit
        self.report = ArenaReport(planner, alignment)

    def transform_module(self, mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        report = ArenaReport(self.planner, self.alignment)
        updates = {}
        static = _static_plan_by_function(mod)
        for gvar, func in relax_functions(mod):
            planned = self._plan_function(mod, gvar.name_hint, func, static)
            if planned is not None:
                entry, updates[gvar] = planned
                report.functions.append(entry)
        self.report = report
        return with_report(mod, updates, REPORT_ATTR, report.to_json())

    def _plan_function(self, mod: tvm.IRModule, fname: str, func: relax.Function,
                       static: dict[str, int]):
        """(report entry, rewritten function), or None when nothing can be planned."""
        from ..alloc import plan_arena
        sizes = {b.var: n for block in func.body.blocks
                 if not isinstance(block, relax.DataflowBlock)
                 for b in block.bindings if (n := _alloc_bytes(b))}
        if not sizes:
            return None
        bindings = [b for block in func.body.blocks for b in block.bindings]
        bg = graph_of_bindings(bindings, relax.analysis.free_vars(func.body.body),
                               name=fname, size_of=lambda var: sizes.get(var, 0))
        graph = bg.graph
        # What reaches the result, or is used other than by a PrimFunc call or a view,
        # escapes the arena: it keeps its own allocation (0 bytes in the plan).
        escaped = set(graph.outputs)
        for name, b in bg.bindings.items():
            if not is_view(b.value) and not _is_prim_call(mod, b.value):
                escaped.update(graph[name].inputs)
        planned = [n for n in graph.op_names if graph[n].bytes and n not in escaped]
        if not planned:
            return None
        keep = set(planned)
        graph = Graph([node if node.name in keep else replace(node, bytes=0)
                       for node in graph.nodes.values()], graph.outputs, graph.name)
        options = {} if self.time_limit is None else {"time_limit": self.time_limit}
        plan = plan_arena(graph, graph.op_names, planner=self.planner,
                          alignment=self.alignment, inplace=False, **options)
        offsets = {n: plan.offsets[n] for n in planned}
        entry = FunctionArena(
            function=fname, tensors=len(offsets), arena_bytes=plan.arena_bytes,
            static_plan_bytes=static.get(fname, 0),
            liveness_peak_bytes=plan.liveness_peak_bytes,
            lower_bound_bytes=plan.lower_bound_bytes, planner=plan.planner,
            status=plan.status, optimal=plan.optimal, seconds=plan.seconds, offsets=offsets,
            graph=graph.to_json())
        at = {bg.vars[n]: off for n, off in offsets.items()}
        return entry, _place_in_arena(func, at, plan.arena_bytes)


def _place_in_arena(func: relax.Function, offsets: dict, arena_bytes: int) -> relax.Function:
    """``func`` with the allocation of every variable in ``offsets`` taken from one arena."""
    arena = relax.Var(ARENA_VAR, relax.ObjectType())
    storage = relax.op.memory.alloc_storage(relax.ShapeExpr([arena_bytes]), 0, "global", "uint8")
    blocks, bound = [], False
    for block in func.body.blocks:
        bindings = []
        for b in block.bindings:
            if b.var not in offsets:
                bindings.append(b)
                continue
            if not bound:       # bind the arena in a block of its own before its first use
                blocks.append(relax.BindingBlock([relax.VarBinding(arena, storage)]))
                bound = True
            shape, dtype = b.value.args[0], b.value.args[1]
            raw = relax.Var(f"{b.var.name}_arena", b.var.ty)
            bindings.append(relax.VarBinding(raw, relax.op.memory.alloc_tensor(
                arena, offsets[b.var], shape, dtype)))
            bindings.append(relax.VarBinding(b.var, relax.op.memory.ensure_zero_offset(raw)))
        blocks.append(type(block)(bindings))
    return with_blocks(func, blocks)
