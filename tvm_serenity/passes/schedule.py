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

What it decided is kept twice: on the pass instance as ``.report`` (a :class:`ScheduleReport`)
and in the module attribute ``"serenity.schedule"`` as JSON (:func:`read_report`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

import tvm
from tvm import relax

from ..memory import simulate
from ..schedule import METHODS, schedule
from .convert import (ConversionError, PassError, graph_of_bindings, relax_functions,
                      vars_used_after, with_blocks, with_report)

__all__ = ["MemoryAwareSchedule", "ScheduleReport", "BlockSchedule", "REPORT_ATTR",
           "read_report"]

REPORT_ATTR = "serenity.schedule"


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
        ``R.call_tir_inplace`` are read as views, which is exact), so today it only matters to
        graphs a later in-place lowering marks.
    """

    def __init__(self, method: str = "serenity", time_limit: float | None = None,
                 inplace: bool = True):
        if method not in METHODS:
            raise PassError(f"MemoryAwareSchedule: unknown method '{method}' "
                            f"(choose from {', '.join(sorted(METHODS))})")
        self.method = method
        self.time_limit = time_limit
        self.inplace = inplace
        self.report = ScheduleReport(method, inplace, time_limit)

    def transform_module(self, mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        report = ScheduleReport(self.method, self.inplace, self.time_limit)
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
