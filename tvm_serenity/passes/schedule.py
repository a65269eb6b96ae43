"""``MemoryAwareSchedule``: reorder the bindings of every dataflow block for minimum peak memory.

What it changes: the order of the bindings inside each ``DataflowBlock`` of every Relax
function, in its body or in ``If`` branches (nothing else: no binding, variable or name is
added, removed or renamed). The Relax VM executes bindings in program order, so the new order
is the execution order. A block is
read as a graph (:mod:`.convert`), ordered by a :mod:`tvm_serenity.schedule` method, and
rewritten only when the new order has a strictly lower peak under the memory model than the
stored one; blocks whose tensors have symbolic shapes are left alone.

Run it after fusion (``FuseOps``/``FuseTIR`` move a fused group to its first member and rename
bindings) and before ``ToNonDataflow``. Functions marked ``Primitive`` (fused groups not yet
turned into TIR) or offloaded to an external ``Codegen`` are not touched.

With ``memory_model="mcu"`` the pass decides the order of a microcontroller build: ``main``
(one dataflow block of integer kernels, as :func:`~tvm_serenity.frontend.from_tflite` writes
it) is read back as operators (:func:`~tvm_serenity.frontend.relax_lift.read_main`) and
scheduled on the graph the MCU back end compiles (:func:`~tvm_serenity.frontend.tflite_to_graph`:
PADs folded into the convolutions reading them, Right-in-Place workspaces and exact aliases);
its bindings are rebuilt in the order the method returns (a folded PAD right before its reader),
which the back end then compiles as it stands. The method's order is taken as it is (it may
tie the stored peak: the arena planner works on it), and the :class:`ScheduleResult` is kept as
``.result``.

What it decided is kept twice: on the pass instance as ``.report`` (a :class:`ScheduleReport`)
and in the module attribute ``"serenity.schedule"`` as JSON (:func:`read_report`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

import tvm
from tvm import relax

from ..frontend.relax_lift import LiftError, read_main
from ..frontend.to_graph import tflite_to_graph
from ..memory import simulate
from ..schedule import METHODS, Deadline, ScheduleResult, schedule
from .convert import (ConversionError, PassError, graph_of_bindings, relax_functions,
                      vars_used_after, with_blocks, with_report)

__all__ = ["MemoryAwareSchedule", "ScheduleReport", "BlockSchedule", "REPORT_ATTR",
           "read_report"]

REPORT_ATTR = "serenity.schedule"
MEMORY_MODELS = ("relax", "mcu")


@dataclass(frozen=True)
class BlockSchedule:
    """The decision for one dataflow block. Peaks and bound are bytes under the memory model of
    the block's graph, where the values it reads from outside (parameters too) are inputs."""

    function: str
    block: str                    # index in the function body, "i/v.then/j" inside an If
    bindings: int
    peak_before: int = 0          # stored order
    peak_after: int = 0           # the order the block has now
    lower_bound: int = 0          # over all orders
    optimal: bool = False         # peak_after is proven minimal
    changed: bool = False
    seconds: float = 0.0
    order: tuple[str, ...] = ()   # node names (= variable names, made unique) now
    skipped: str | None = None    # why the block was left alone
    graph: dict = field(default_factory=dict, compare=False)   # the graph read (JSON), in
                                                               # stored order: for reports


@dataclass
class ScheduleReport:
    """Everything one run of :class:`MemoryAwareSchedule` decided."""

    method: str
    inplace: bool
    time_limit: float | None
    blocks: list[BlockSchedule] = field(default_factory=list)

    def functions(self) -> dict[str, dict]:
        """Per function: the largest block peak before and after, the largest block lower
        bound, whether every block is proven optimal, whether anything changed."""
        out: dict[str, dict] = {}
        for b in self.blocks:
            if b.skipped:
                continue
            f = out.setdefault(b.function, {"peak_before": 0, "peak_after": 0,
                                            "lower_bound": 0, "optimal": True,
                                            "changed": False})
            f["peak_before"] = max(f["peak_before"], b.peak_before)
            f["peak_after"] = max(f["peak_after"], b.peak_after)
            f["lower_bound"] = max(f["lower_bound"], b.lower_bound)
            f["optimal"] = f["optimal"] and b.optimal
            f["changed"] = f["changed"] or b.changed
        return out

    def to_json(self) -> dict:
        return {"method": self.method, "inplace": self.inplace, "time_limit": self.time_limit,
                "functions": self.functions(),
                "blocks": [{**asdict(b), "order": list(b.order)} for b in self.blocks]}


def read_report(mod: tvm.IRModule, attr: str = REPORT_ATTR) -> dict | None:
    """The JSON report a serenity pass left in module attribute ``attr``, parsed, or None."""
    if mod.attrs is None or attr not in mod.attrs:
        return None
    return json.loads(str(mod.attrs[attr]))


@tvm.transform.module_pass(opt_level=0, name="serenity.MemoryAwareSchedule")
class MemoryAwareSchedule:
    """Reorder every dataflow block of every Relax function with a scheduling method.

    Parameters
    ----------
    method : a key of :data:`tvm_serenity.schedule.METHODS` (``"serenity"``: exact where
        it can, divide and conquer, soft budgeting).
    time_limit : seconds per block given to the method (None: the method's default).
    inplace : handed to the scheduler and the memory model: nodes marked in-place capable run
        in place when they may. Blocks read from Relax carry no such marks yet (the outputs of
        ``R.call_tir_inplace`` are read as views, which is exact), so it matters to the
        ``"mcu"`` memory model and to graphs a later in-place lowering marks.
    memory_model : ``"relax"`` (every block as :mod:`.convert` reads it) or ``"mcu"`` (``main``
        as the microcontroller back end compiles it; module docstring).
    """

    def __init__(self, method: str = "serenity", time_limit: Deadline | float | None = None,
                 inplace: bool = True, memory_model: str = "relax"):
        if method not in METHODS:
            raise PassError(f"MemoryAwareSchedule: unknown method '{method}' "
                            f"(choose from {', '.join(sorted(METHODS))})")
        if memory_model not in MEMORY_MODELS:
            raise PassError(f"MemoryAwareSchedule: unknown memory model '{memory_model}' "
                            f"(choose from {', '.join(MEMORY_MODELS)})")
        self.method = method
        self.time_limit = time_limit
        self.inplace = inplace
        self.memory_model = memory_model
        self.report = ScheduleReport(method, inplace, self._seconds())
        self.result: ScheduleResult | None = None     # memory_model="mcu": the method's answer

    def _seconds(self) -> float | None:
        t = self.time_limit
        return round(t.remaining(), 3) if isinstance(t, Deadline) else t

    def transform_module(self, mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        report = ScheduleReport(self.method, self.inplace, self._seconds())
        if self.memory_model == "mcu":
            return self._schedule_operators(mod, report)
        updates = {}
        for gvar, func in relax_functions(mod):
            body = self._schedule_seq(func.body, gvar.name_hint, "", report)
            if body is not func.body:
                updates[gvar] = with_blocks(func, body.blocks)
        self.report = report
        return with_report(mod, updates, REPORT_ATTR, report.to_json())

    def _schedule_seq(self, seq: relax.SeqExpr, fname: str, path: str,
                      report: ScheduleReport) -> relax.SeqExpr:
        """``seq`` with its dataflow blocks (and those nested in ``If`` branches) reordered;
        ``seq`` itself when nothing changed."""
        blocks = []
        for i, block in enumerate(seq.blocks):
            where = f"{path}{i}"
            bindings = [self._schedule_branches(b, fname, f"{where}/", report)
                        for b in block.bindings]
            if any(new is not old for new, old in zip(bindings, block.bindings)):
                block = type(block)(bindings)
            if isinstance(block, relax.DataflowBlock) and len(block.bindings) > 1:
                decision, block = self._schedule_block(fname, where, block,
                                                       vars_used_after(seq, i))
                report.blocks.append(decision)
            blocks.append(block)
        if all(new is old for new, old in zip(blocks, seq.blocks)):
            return seq
        return relax.SeqExpr(blocks, seq.body)

    def _schedule_branches(self, binding: relax.Binding, fname: str, path: str,
                           report: ScheduleReport) -> relax.Binding:
        value = binding.value
        if not isinstance(value, relax.If):
            return binding
        where = f"{path}{binding.var.name}"
        then = self._schedule_seq(value.true_branch, fname, f"{where}.then/", report)
        other = self._schedule_seq(value.false_branch, fname, f"{where}.else/", report)
        if then is value.true_branch and other is value.false_branch:
            return binding
        return relax.VarBinding(binding.var, relax.If(value.cond, then, other))

    def _schedule_block(self, fname: str, where: str, block: relax.DataflowBlock, used_after):
        try:
            bg = graph_of_bindings(block.bindings, used_after, name=f"{fname}:{where}")
        except ConversionError as e:
            return BlockSchedule(fname, where, len(block.bindings), skipped=str(e)), block
        stored = bg.graph.op_names
        before = simulate(bg.graph, stored, self.inplace).peak_bytes
        res = schedule(bg.graph, self.method, inplace=self.inplace, time_limit=self.time_limit)
        better = res.peak_bytes < before
        order = res.order if better else stored
        changed = better and list(order) != list(stored)
        decision = BlockSchedule(
            function=fname, block=where, bindings=len(block.bindings), peak_before=before,
            peak_after=min(before, res.peak_bytes), lower_bound=res.lower_bound_bytes,
            optimal=res.optimal or before <= res.lower_bound_bytes, changed=changed,
            seconds=res.seconds, order=tuple(order), graph=bg.graph.to_json())
        return decision, (bg.rebuild(block, order) if changed else block)

    def _schedule_operators(self, mod: tvm.IRModule, report: ScheduleReport) -> tvm.IRModule:
        """``memory_model="mcu"`` (module docstring)."""
        where = "MemoryAwareSchedule(memory_model='mcu')"
        main = mod["main"] if any(g.name_hint == "main" for g in mod.functions) else None
        if not isinstance(main, relax.Function) or len(main.body.blocks) != 1 \
                or not isinstance(main.body.blocks[0], relax.DataflowBlock):
            raise PassError(f"{where}: main must be one dataflow block of integer kernels")
        try:
            model, bindings = read_main(mod)
        except LiftError as e:
            raise PassError(f"{where}: {e}") from None
        graph = tflite_to_graph(model, fold_pad=True, name="main")
        stored = graph.op_names
        before = simulate(graph, stored, self.inplace).peak_bytes
        res = schedule(graph, self.method, inplace=self.inplace, time_limit=self.time_limit)
        of_index = {op.index: (op, b) for op, b in zip(model.operators, bindings)}
        producer = {op.outputs[0]: op.index for op in model.operators}
        placed: dict[int, relax.Binding] = {}

        def place(index: int) -> None:
            if index in placed:
                return
            op, binding = of_index[index]
            for t in op.inputs:          # a folded PAD is no node: it runs right before
                if t in producer:        # its reader
                    place(producer[t])
            placed[index] = binding

        for name in res.order:
            place(int(graph.nodes[name].attrs["tflite_index"]))
        for op in model.operators:
            place(op.index)
        block = main.body.blocks[0]
        ordered: list[relax.Binding] = []          # a padding kernel is two operators
        for b in placed.values():
            if not any(b.same_as(o) for o in ordered):
                ordered.append(b)
        rest = [b for b in block.bindings if all(not b.same_as(o) for o in ordered)]
        self.result = res
        report.blocks.append(BlockSchedule(
            function="main", block="0", bindings=len(block.bindings), peak_before=before,
            peak_after=res.peak_bytes, lower_bound=res.lower_bound_bytes, optimal=res.optimal,
            changed=list(res.order) != list(stored), seconds=res.seconds,
            order=tuple(res.order), graph=graph.to_json()))
        self.report = report
        new = with_blocks(main, [relax.DataflowBlock(ordered + rest)])
        return with_report(mod, {mod.get_global_var("main"): new}, REPORT_ATTR,
                           report.to_json())
