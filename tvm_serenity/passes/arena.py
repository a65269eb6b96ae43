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

**RiP groups** (:class:`~.rip.RiPLowering`'s convolutions, found by the ``"serenity.rip_role"``
of their PrimFuncs): after ``CallTIRRewrite`` one reads ``ws = alloc (S)``, ``place(x, ws)``,
``kernel(ws, tables)``, then ``y = alloc``, ``take(ws, y)`` (or
``y = R.reshape(ws)``, which ``RewriteDataflowReshape`` makes of a take of all ``S`` bytes and
the VM runs as a view: it is read as one here). When x's root and the workspace are plannable,
the graph planned has the kernel as an **in-place node** (``inplace = S``, first input x) whose
tensor is y (``N_out`` bytes, live to y's last use); the workspace and y's allocation (when
plannable) are 0-byte names of it, placed at its offset ``o``. ``plan_arena(..., inplace=True)``
then lays each pair out in place (x at ``o + S - N_in``: the place call goes, and the take
call when y is planned), with a right shift (x at ``o``, memmoved right by ``S - N_in`` before
the kernel: the place call becomes ``rip_shift(ws)``), or apart. A group laid out apart (or at
a distance the kernel does not read, an alignment above RiPLowering's) is planned again, until
every remaining group is laid out as its kernel needs, in two ways, of which the smaller arena is
kept (the first on a tie): run by its **dual-layout kernel** (:func:`~.rip.dual_func`, the same
loops on x and a new y buffer: no workspace, no copy) or **with its copies**, as ordinary
tensors. The kernel is an in-place node only where it is x's last reader, so x is never
overwritten early. RiPLowering's PrimFuncs no call uses any more are removed.

With ``memory_model="mcu"`` the pass plans the arena of a microcontroller build instead and
changes no function: it plans the graph the build compiles (:func:`.mcu_graph.mcu_graph`:
``main``'s operators read back as the MCU graph IR in binding order, PADs folded,
Right-in-Place workspaces and exact aliases, or the rewritten or patched graph and its order
that ``IdentityGraphRewrite(memory_model="mcu")`` or ``PatchExecution`` left), in place or not
(``inplace=False``: the dual-buffer build; a patched graph's output chain is in place either
way), with alignment 1, by :func:`mcu_arena` (which also gives a channel-wise depthwise layer
RiP's workspace back where the order's peak allows). The decision, a :class:`MainArena` (the plan's offsets, in-place pairs
and right shifts, and the relaxed layers), is ``.report`` and the module attribute
``"serenity.arena"`` (:func:`read_main_arena`); the Relax-to-C emitter
(:func:`tvm_serenity.codegen.relax_c.emit_main`) verifies it against ``main`` and writes the
calls at its offsets.

The pass records, per function, its arena next to TVM's ``StaticPlanBlockMemory`` total for the
same module (:func:`static_plan_bytes`), the liveness peak and lower bound of the same order and
the RiP kernels run in the arena (``in_place``; ``moved``: those after a right shift;
``dual``: the dual kernels run for groups laid out apart): on the pass instance as
``.report`` (:class:`ArenaReport`) and as JSON in the module attribute
``"serenity.arena"``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING

import tvm
from tvm import relax

from ..graph import Graph
from ..rip.choice import relax_channel_kinds
from ..schedule import Deadline
from .convert import (BlockGraph, ConversionError, PassError, graph_of_bindings, is_op,
                      is_view, relax_functions, type_bytes, with_blocks, with_report)
from .mcu_graph import mcu_graph

if TYPE_CHECKING:
    from .. import alloc

__all__ = ["ArenaPlan", "ArenaReport", "FunctionArena", "MainArena", "REPORT_ATTR",
           "HOST_ALIGNMENT", "RIP_ROLE_ATTR", "static_plan_bytes", "mcu_arena",
           "read_main_arena"]

REPORT_ATTR = "serenity.arena"
RIP_ROLE_ATTR = "serenity.rip_role"     # on RiPLowering's PrimFuncs: place, kernel or take
HOST_ALIGNMENT = 64
ARENA_VAR = "serenity_arena"
APART = ("best", "dual", "copies")


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
    in_place: list[str] = field(default_factory=list)   # RiP kernels run in the arena
    moved: list[str] = field(default_factory=list)      # of those, input memmoved right first
    dual: list[str] = field(default_factory=list)       # calls of RiP kernels laid out apart,
                                                        # run on two buffers (dual layout)
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


@dataclass(frozen=True)
class MainArena:
    """What ``ArenaPlan(memory_model="mcu")`` decided: the plan (an
    :class:`tvm_serenity.alloc.ArenaPlan`, alignment 1) of the graph the MCU back end compiles
    (:func:`.mcu_graph.mcu_graph`, in its order), with in-place pairs (``inplace``) or without,
    and the channel-wise depthwise layers given RiP's workspace back (their graph nodes'
    ``inplace``)."""

    plan: alloc.ArenaPlan
    inplace: bool
    relaxed_channel_layers: tuple[str, ...]

    def to_json(self) -> dict:
        return {"memory_model": "mcu", "inplace": self.inplace,
                "relaxed_channel_layers": list(self.relaxed_channel_layers),
                "plan": self.plan.to_json()}

    @classmethod
    def from_json(cls, data: dict, where: str) -> "MainArena":
        from .. import alloc
        if not isinstance(data, dict) or data.get("memory_model") != "mcu" \
                or not isinstance(data.get("inplace"), bool) \
                or not isinstance(data.get("relaxed_channel_layers"), list) \
                or not all(isinstance(n, str) for n in data["relaxed_channel_layers"]):
            raise PassError(f"{where}: not an arena plan of ArenaPlan(memory_model='mcu') "
                            f"(memory_model, inplace, relaxed_channel_layers)")
        return cls(alloc.ArenaPlan.from_json(data.get("plan"), f"{where}: plan"),
                   data["inplace"], tuple(data["relaxed_channel_layers"]))


def read_main_arena(mod: tvm.IRModule) -> MainArena | None:
    """The :class:`MainArena` ``ArenaPlan(memory_model="mcu")`` left in ``mod``, or None when
    it did not run (the attribute is absent or holds a host plan)."""
    if mod.attrs is None or REPORT_ATTR not in mod.attrs:
        return None
    where = f"module attribute '{REPORT_ATTR}'"
    try:
        data = json.loads(str(mod.attrs[REPORT_ATTR]))
    except ValueError as e:
        raise PassError(f"{where} is no JSON: {e}") from None
    if not isinstance(data, dict) or data.get("memory_model") != "mcu":
        return None
    return MainArena.from_json(data, where)


def mcu_arena(graph: Graph, order, planner: str, *, rip: bool, inplace: bool,
              time_limit: Deadline | float | None):
    """``(graph planned, relaxed layers, plan)``: the microcontroller arena of ``order`` on
    ``graph`` (:func:`tvm_serenity.alloc.plan_arena`, alignment 1, in-place pairs with
    ``inplace``). With ``rip``, a channel-wise depthwise layer keeps its zero-gap kind (its
    channel buffer is kernel scratch) only where the order's peak needs it
    (:func:`~tvm_serenity.rip.relax_channel_kinds`), unless the planner fragments the relaxed
    graph more than ``graph`` as it is. Each planning gets 90% of the time ``time_limit``
    has left."""
    from ..alloc import DEFAULT_TIME_LIMIT, plan_arena
    deadline = Deadline.of(time_limit, DEFAULT_TIME_LIMIT)
    relaxed_graph, relaxed = relax_channel_kinds(graph, order) if rip else (graph, ())
    plan = plan_arena(relaxed_graph, order, planner, 1, inplace, deadline.share(0.9))
    if relaxed and plan.arena_bytes > plan.liveness_peak_bytes:
        chosen = plan_arena(graph, order, planner, 1, inplace, deadline.share(0.9))
        if chosen.arena_bytes < plan.arena_bytes:
            return graph, (), chosen
    return relaxed_graph, relaxed, plan


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
    time_limit : seconds for the optimal planner per function (None: its default), or a
        :class:`~tvm_serenity.schedule.Deadline` shared with other phases.
    apart : how RiP groups the plan lays out apart run: ``"dual"`` (their dual-layout kernel),
        ``"copies"`` (their copies and workspace) or ``"best"`` (both planned, the smaller
        arena kept; the module docstring).
    memory_model : ``"relax"`` (the host path above) or ``"mcu"`` (``main`` planned for the
        microcontroller back end: module docstring; the alignment is then 1).
    inplace : ``"mcu"`` only: in-place pairs (Right-in-Place, exact aliases) or none (the
        dual-buffer build).
    """

    def __init__(self, planner: str = "optimal", alignment: int | None = None,
                 time_limit: Deadline | float | None = None, apart: str = "best",
                 memory_model: str = "relax", inplace: bool = True):
        from ..alloc import PLANNERS   # imports the solver: only once a pass is made
        if planner not in PLANNERS:
            raise PassError(f"ArenaPlan: unknown planner '{planner}' "
                            f"(choose from {', '.join(PLANNERS)})")
        if memory_model not in ("relax", "mcu"):
            raise PassError(f"ArenaPlan: memory_model must be 'relax' or 'mcu', got "
                            f"{memory_model!r}")
        if memory_model == "mcu":
            if alignment not in (None, 1):
                raise PassError(f"ArenaPlan: the MCU arena has alignment 1 (the C emitter's), "
                                f"got {alignment!r}")
            alignment = 1
        elif alignment is None:
            alignment = HOST_ALIGNMENT
        elif isinstance(alignment, bool) or not isinstance(alignment, int) or alignment <= 0 \
                or alignment % HOST_ALIGNMENT:
            raise PassError(f"ArenaPlan: alignment must be a positive multiple of "
                            f"{HOST_ALIGNMENT} on the TVM host path, got {alignment!r}")
        if apart not in APART:
            raise PassError(f"ArenaPlan: apart must be one of {', '.join(APART)}, got "
                            f"{apart!r}")
        if not isinstance(inplace, bool):
            raise PassError(f"ArenaPlan: inplace must be True or False, got {inplace!r}")
        self.planner = planner
        self.apart = apart
        self.alignment = alignment
        self.time_limit = time_limit
        self.memory_model = memory_model
        self.inplace = inplace
        self.report: ArenaReport | MainArena | None = \
            ArenaReport(planner, alignment) if memory_model == "relax" else None
        self.graph: Graph | None = None     # memory_model="mcu": the graph planned

    def transform_module(self, mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        if self.memory_model == "mcu":
            return self._plan_main(mod)
        report = ArenaReport(self.planner, self.alignment)
        updates = {}
        static = _static_plan_by_function(mod)
        bb = relax.BlockBuilder(mod)        # adds the PrimFuncs of planned right shifts
        for gvar, func in relax_functions(mod):
            planned = self._plan_function(bb, mod, gvar.name_hint, func, static)
            if planned is not None:
                entry, updates[gvar] = planned
                report.functions.append(entry)
        self.report = report
        if any(f.moved or f.dual for f in report.functions):
            mod = bb.get()
        return _without_idle_rip_funcs(with_report(mod, updates, REPORT_ATTR, report.to_json()))

    def _plan_main(self, mod: tvm.IRModule) -> tvm.IRModule:
        """``memory_model="mcu"`` (module docstring)."""
        decided = mcu_graph(mod, "ArenaPlan(memory_model='mcu')")
        inplace = self.inplace or decided.patched
        self.graph, relaxed, plan = mcu_arena(decided.graph, decided.order, self.planner,
                                              rip=self.inplace, inplace=inplace,
                                              time_limit=self.time_limit)
        self.report = MainArena(plan, inplace, relaxed)
        return mod.with_attr(REPORT_ATTR, json.dumps(self.report.to_json()))

    def _plan_function(self, bb: relax.BlockBuilder, mod: tvm.IRModule, fname: str,
                       func: relax.Function, static: dict[str, int]):
        """(report entry, rewritten function), or None when nothing can be planned."""
        ways = {"best": (True, False), "dual": (True,), "copies": (False,)}[self.apart]
        rounds = [r for dual in ways
                  if (r := self._rounds(bb, mod, fname, func, dual)) is not None]
        if not rounds:
            return None
        # min keeps the first on a tie: the dual kernels (no copies to run)
        mod, func, bindings, layout, plan, realized = min(
            rounds, key=lambda r: r[4].arena_bytes)
        bg = layout.bg
        offsets = {n: plan.offsets[layout.alias.get(n, n)] for n in layout.planned}
        # moved: the place call becomes the right shift; in place: it goes (x is there
        # already); the take call goes when y's allocation is a name of the kernel tensor
        moved = [g for g in layout.groups if realized[g.kernel] == "moved"]
        replaced = {bg.vars[g.place]: _shift_call(bb, bg.bindings[g.place].value)
                    for g in moved}
        drop = {bg.vars[g.place] for g in layout.groups if g not in moved}
        drop |= {bg.vars[g.take] for g in layout.groups if g.y in layout.alias}
        entry = FunctionArena(
            function=fname, tensors=len(offsets), arena_bytes=plan.arena_bytes,
            static_plan_bytes=static.get(fname, 0),
            liveness_peak_bytes=plan.liveness_peak_bytes,
            lower_bound_bytes=plan.lower_bound_bytes, planner=plan.planner,
            status=plan.status, optimal=plan.optimal, seconds=plan.seconds, offsets=offsets,
            in_place=[bg.graph[g.kernel].attrs["callee"] for g in layout.groups],
            moved=[bg.graph[g.kernel].attrs["callee"] for g in moved],
            dual=[str(b.value.op.name_hint) for b in bindings
                  if _rip_role(mod, b.value) == "dual"],
            graph=layout.graph.to_json())
        at = {bg.vars[n]: off for n, off in offsets.items()}
        return entry, _place_in_arena(func, at, plan.arena_bytes, drop, replaced)

    def _rounds(self, bb: relax.BlockBuilder, mod: tvm.IRModule, fname: str,
                func: relax.Function, dual: bool):
        """Plan ``func`` until every RiP group left is laid out as its kernel needs: each
        round runs the groups the plan laid out apart on two buffers (``dual``,
        :func:`_run_apart`) or keeps their copies (planned as ordinary tensors). Returns
        (module, function, its bindings, layout, plan, group -> how realized), or None."""
        from ..alloc import plan_arena
        options = {} if self.time_limit is None else {"time_limit": self.time_limit}
        views: set[relax.Var] = set()       # reshapes of the groups run with the dual kernel
        allowed = None                      # groups that may run in place (None: all)
        while True:
            sizes = {b.var: n for block in func.body.blocks
                     if not isinstance(block, relax.DataflowBlock)
                     for b in block.bindings if (n := _alloc_bytes(b))}
            if not sizes:
                return None
            bindings = [b for block in func.body.blocks for b in block.bindings]
            used = relax.analysis.free_vars(func.body.body)
            layout = _layout(mod, fname, bindings, used, sizes, views, allowed)
            if layout is None:
                return None
            plan = plan_arena(layout.graph, layout.graph.op_names, planner=self.planner,
                              alignment=self.alignment, inplace=True, **options)
            realized = {g.kernel: how for g in layout.groups
                        if (how := _realized(plan, g, layout.alias))}
            if len(realized) == len(layout.groups):
                return mod, func, bindings, layout, plan, realized
            if dual:
                apart = [g for g in layout.groups if g.kernel not in realized]
                func = _run_apart(bb, mod, func, layout.bg, apart, views)
                mod = bb.get()
            else:
                allowed = set(realized)


def _without_idle_rip_funcs(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` without the PrimFuncs of RiPLowering no function calls any more (the place,
    kernel and take functions of groups run in place or on two buffers)."""
    called = set()
    for _, func in mod.functions.items():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(
                func.body, lambda e: called.add(e) if isinstance(e, tvm.ir.GlobalVar) else None)
    idle = [g for g, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc)
            and f.attrs is not None and RIP_ROLE_ATTR in f.attrs and g not in called]
    if idle:
        mod = mod.clone()           # never the caller's module
        for gvar in idle:
            del mod[gvar]
    return mod


# ------------------------------------------------------------------ RiP groups
@dataclass(frozen=True)
class _RipGroup:
    """One convolution :class:`~.rip.RiPLowering` lowered, after ``CallTIRRewrite`` (node names
    of the graph :func:`_layout` reads)."""

    place: str               # the call copying x into the workspace
    kernel: str              # the in-place kernel call
    take: str | None         # the call copying y out (None: y is an R.reshape of the workspace)
    view: relax.Var | None   # that R.reshape's variable
    x: str                   # the tensor x refers to
    ws: str                  # the workspace's allocation
    y: str | None            # y's allocation (None with the R.reshape)
    gap: int                 # where x starts in the workspace: S - N_in
    workspace_bytes: int
    out_bytes: int


@dataclass(frozen=True)
class _Layout:
    """What one planning round reads: the graph (RiP groups as in-place nodes), the
    allocations to place, the groups and which allocations are a group's kernel tensor."""

    bg: BlockGraph
    graph: Graph
    planned: list[str]
    groups: list[_RipGroup]
    alias: dict[str, str]


def _rip_role(mod: tvm.IRModule, value) -> str | None:
    """``"place"``, ``"kernel"`` or ``"take"`` for a call of a PrimFunc RiPLowering made."""
    if not _is_prim_call(mod, value):
        return None
    attrs = mod[value.op].attrs
    return str(attrs[RIP_ROLE_ATTR]) if attrs is not None and RIP_ROLE_ATTR in attrs else None


def _rip_groups(mod: tvm.IRModule, bg: BlockGraph) -> list[_RipGroup]:
    """Every RiP group of ``bg``'s bindings: a place call, then the first kernel call and the
    first take call (or R.reshape) on the same workspace."""
    names = {v: n for n, v in bg.vars.items()}

    def root(expr):
        refs = bg.refs.get(names.get(expr), frozenset()) if isinstance(expr, relax.Var) \
            else frozenset()
        return next(iter(refs)) if len(refs) == 1 else None

    order = list(bg.bindings)
    groups = []
    for i, name in enumerate(order):
        if _rip_role(mod, bg.bindings[name].value) != "place":
            continue
        x_arg, ws_arg = bg.bindings[name].value.args
        x, ws = root(x_arg), root(ws_arg)
        on_ws = [n for n in order[i + 1:] if isinstance(bg.bindings[n].value, relax.Call)
                 and bg.bindings[n].value.args and root(bg.bindings[n].value.args[0]) == ws]
        kernel = next((n for n in on_ws if _rip_role(mod, bg.bindings[n].value) == "kernel"),
                      None)
        out = next((n for n in on_ws if _rip_role(mod, bg.bindings[n].value) == "take"
                    or is_op(bg.bindings[n].value, "relax.reshape")), None)
        if None in (x, ws, kernel, out):
            continue
        value = bg.bindings[out].value
        take = out if _rip_role(mod, value) == "take" else None
        y_var = value.args[1] if take else bg.vars[out]
        size = type_bytes(bg.vars[ws].ty)
        groups.append(_RipGroup(
            place=name, kernel=kernel, take=take, view=None if take else bg.vars[out], x=x,
            ws=ws, y=root(y_var) if take else None,
            gap=size - type_bytes(x_arg.ty), workspace_bytes=size,
            out_bytes=type_bytes(y_var.ty)))
    return groups


def _layout(mod: tvm.IRModule, fname: str, bindings, used, sizes: dict,
            dual_views: set[relax.Var], allowed: set[str] | None) -> _Layout | None:
    """The bindings as the graph to plan; ``dual_views``: the reshapes :func:`_run_apart`
    bound (views, as the groups' own reshapes of their workspace); ``allowed``: the RiP
    kernels that may run in place (None: all; the others keep their copies)."""
    def read(views=()):
        return graph_of_bindings(bindings, used, name=fname,
                                 size_of=lambda var: sizes.get(var, 0), views=views)

    bg = read(dual_views)
    views = [*dual_views, *(g.view for g in _rip_groups(mod, bg) if g.view is not None
                            and (allowed is None or g.kernel in allowed))]
    bg = read(views)
    graph = bg.graph
    # What reaches the result, or is used other than by a PrimFunc call or a view,
    # escapes the arena: it keeps its own allocation (0 bytes in the plan).
    escaped = set(graph.outputs)
    for name, b in bg.bindings.items():
        if not (is_view(b.value) or b.var in views or _is_prim_call(mod, b.value)):
            escaped.update(graph[name].inputs)
    planned = [n for n in graph.op_names if graph[n].bytes and n not in escaped]
    if not planned:
        return None
    groups = [g for g in _rip_groups(mod, bg)
              if (allowed is None or g.kernel in allowed) and g.x in planned
              and g.ws in planned and (g.take is not None or g.view in views)]
    keep = set(planned)
    nodes = {n: node if n in keep else replace(node, bytes=0)
             for n, node in graph.nodes.items()}
    alias = _in_place_groups(nodes, groups, keep)
    return _Layout(bg, Graph(nodes.values(), graph.outputs, graph.name), planned, groups,
                   alias)


def _in_place_groups(nodes: dict, groups: list[_RipGroup], planned: set[str]) -> dict:
    """Rewrite ``nodes`` (name -> Node, stored order) so that each group's kernel is an
    in-place node over x whose tensor is y (its workspace and planned y allocation become 0-byte
    names of it); returns allocation -> kernel for those names."""
    order = list(nodes)
    alias: dict[str, str] = {}
    for g in groups:
        own = [g.ws] + ([g.y] if g.y in planned else [])
        x = alias.get(g.x, g.x)
        k = nodes[g.kernel]
        inputs = (x, *(i for i in k.inputs if i not in (x, *own)))
        nodes[g.kernel] = replace(k, inputs=inputs, bytes=g.out_bytes,
                                  inplace=g.workspace_bytes)
        for n in own:
            nodes[n] = replace(nodes[n], bytes=0)
            alias[n] = g.kernel
        for n in order[order.index(g.kernel) + 1:]:
            node = nodes[n]
            if any(i in own for i in node.inputs):
                nodes[n] = replace(node, inputs=tuple(dict.fromkeys(
                    g.kernel if i in own else i for i in node.inputs)))
    return alias


def _realized(plan, g: _RipGroup, alias: dict[str, str]) -> str | None:
    """How ``plan`` laid group ``g`` out as its kernel needs: ``"in place"`` (x at the kernel
    tensor's offset + gap), ``"moved"`` (x at the kernel tensor's offset, memmoved right by the
    gap before the kernel), or None (x and y apart: the kernel cannot run there)."""
    x = alias.get(g.x, g.x)
    if not any(p.output == g.kernel and p.input == x for p in plan.inplace):
        return None
    o = plan.offsets[g.kernel]
    move = next((m for m in plan.moves if m.output == g.kernel), None)
    if move is None:
        return "in place" if plan.offsets[x] == o + g.gap else None
    return "moved" if (move.tensor, move.src, move.dst) == (x, o, o + g.gap) else None


def _run_apart(bb: relax.BlockBuilder, mod: tvm.IRModule, func: relax.Function,
               bg: BlockGraph, groups: list[_RipGroup], views: set[relax.Var]
               ) -> relax.Function:
    """``func`` with each of ``groups`` run by its dual-layout kernel (:func:`~.rip.dual_func`:
    the same loops on two buffers) instead of its copies and workspace::

        x_flat = R.reshape(x, [N_in]);  y_flat = alloc (N_out)      (before the kernel call)
        dual(x_flat, <tables>, y_flat)                              (was kernel(ws, ...))
        y = R.reshape(y_flat, <y's shape>)                          (was take, or y's view)

    The place and take calls, the workspace and its aliases go. The new reshapes are added to
    ``views`` (the VM runs them as views)."""
    from .rip import dual_func      # rip imports this module
    before, values, drop = {}, {}, set()
    for g in groups:
        place, call = bg.bindings[g.place].value, bg.bindings[g.kernel].value
        x = place.args[0]
        in_bytes = type_bytes(x.ty)
        x_flat = relax.Var(f"{g.kernel}_x", relax.TensorType((in_bytes,), "int8"))
        y_ty = relax.TensorType((g.out_bytes,), "int8")
        y_flat = relax.Var(f"{g.kernel}_y", y_ty)
        dual = bb.add_func(dual_func(mod[call.op]).with_attr(RIP_ROLE_ATTR, "dual"),
                           f"{call.op.name_hint}_dual")
        kernel_var = bg.vars[g.kernel]
        before[kernel_var] = [
            relax.VarBinding(x_flat, relax.op.reshape(x, relax.ShapeExpr([in_bytes]))),
            relax.VarBinding(y_flat, relax.op.builtin.alloc_tensor(
                relax.ShapeExpr([g.out_bytes]), "int8", 0, "global"))]
        values[kernel_var] = relax.Call(dual, [x_flat, *call.args[1:], y_flat], call.attrs,
                                        call.ty_args)
        if g.take is not None:      # y's allocation becomes the view; the take call goes
            take = bg.bindings[g.take].value
            y_var, y_shape = take.args[1], take.args[1].ty.shape
            drop.add(bg.vars[g.take])
        else:
            y_var, y_shape = g.view, g.view.ty.shape
        values[y_var] = relax.op.reshape(y_flat, y_shape)
        views.update((x_flat, y_var))
        drop.add(bg.vars[g.place])
    blocks = []
    for block in func.body.blocks:
        bindings = []
        for b in block.bindings:
            if b.var in drop:
                continue
            bindings.extend(before.get(b.var, ()))
            bindings.append(relax.VarBinding(b.var, values[b.var]) if b.var in values else b)
        blocks.append(type(block)(bindings))
    return _without_unused(with_blocks(func, blocks))


def _without_unused(func: relax.Function) -> relax.Function:
    """``func`` without the bindings of unused variables whose value is an allocation or a
    view (the workspaces :func:`_run_apart` no longer uses and their aliases)."""
    blocks = list(func.body.blocks)
    while True:
        used = set(relax.analysis.free_vars(func.body.body))
        for block in blocks:
            for b in block.bindings:
                used.update(relax.analysis.free_vars(b.value))
        dead = {b.var for block in blocks for b in block.bindings
                if b.var not in used and (is_view(b.value)
                                          or is_op(b.value, "relax.builtin.alloc_tensor"))}
        if not dead:
            return with_blocks(func, blocks)
        blocks = [type(block)([b for b in block.bindings if b.var not in dead])
                  for block in blocks]
        func = with_blocks(func, blocks)


def _shift_call(bb: relax.BlockBuilder, place: relax.Call) -> relax.Call:
    """The right shift replacing a place call ``place(x, ws)``: ``shift(ws)`` (x at ws's
    start)."""
    from .rip import shift_func      # rip imports this module
    x, ws = place.args
    prim = shift_func(type_bytes(x.ty), type_bytes(ws.ty))
    return relax.Call(bb.add_func(prim, "rip_shift"), [ws], place.attrs, place.ty_args)


def _place_in_arena(func: relax.Function, offsets: dict, arena_bytes: int, drop: set,
                    replaced: dict) -> relax.Function:
    """``func`` with the allocation of every variable in ``offsets`` taken from one arena, the
    bindings of the variables in ``drop`` removed and those in ``replaced`` given its value."""
    arena = relax.Var(ARENA_VAR, relax.ObjectType())
    storage = relax.op.memory.alloc_storage(relax.ShapeExpr([arena_bytes]), 0, "global", "uint8")
    blocks, bound = [], False
    for block in func.body.blocks:
        bindings = []
        for b in block.bindings:
            if b.var in drop:
                continue
            if b.var in replaced:
                bindings.append(relax.VarBinding(b.var, replaced[b.var]))
                continue
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
