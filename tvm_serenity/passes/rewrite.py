"""``IdentityGraphRewrite``: channel- and kernel-wise partitioning of concat -> conv in Relax.

What it changes, in every dataflow block of every Relax function: where
:func:`tvm_serenity.rewrite.rewrite_graph` (the graph-IR rewrite, judged by the exact
scheduler) says the optimal peak drops, a pattern ``y = conv(u_m(..u_1(c)))`` with
``c = concat(x_1, ..., x_n)`` along the channels is replaced by its partitioned form. Run it
before legalization, on kernels of :mod:`tvm_serenity.frontend.relax_import` (one ``Primitive``
function per operator; :class:`~.foldpad.FoldPad` first, so folded padding is seen)::

    # channel-wise (conv, one group): partial int32 sums, one requantize
    y_part0 = R.call_tir(<k>_part0, (x_1, w[:, :, C_1, :]), R.Tensor(y.shape, "int32"))
    y_part1 = R.call_tir_inplace(<k>_acc1, (x_2, w[:, :, C_2, :], y_part0), [2], ...)
    ...
    y       = <k>_requantize(y_part<n-1>, <y's bias and requantization constants>)

    # kernel-wise (depthwise): each slice writes its channels of y in place
    y_part0 = R.call_tir(<k>_slice0, (x_1, w_1, bias_1, multiplier_1, shift_1), y's type)
    y_part1 = R.call_tir_inplace(<k>_slice1, (x_2, ..., y_part0), [5], y's type)
    y       = R.call_tir_inplace(<k>_slice<n-1>, (x_n, ..., y_part<n-2>), [5], y's type)

so the concat never exists and each ``x_i`` can die as soon as its partial ran. A unary chain
``u`` between the concat and the convolution (int8 lookup tables: RELU, RELU6, HARD_SWISH,
LOGISTIC as the importer writes them) is applied to every ``x_i`` instead. The partial and slice
kernels are :mod:`tvm_serenity.codegen.partial`; the requantize is the original kernel's own
epilogue (bias, TFLite's requantization, clamp), cut off after its ``conv2d``. Everything is
integer arithmetic in the same order of operations per element, so the outputs are
bit-identical (proof: :mod:`tvm_serenity.rewrite.patterns`). ``y`` keeps its variable, so
nothing after it changes; the concat, the unary chain and kernels nobody calls any more are
removed when dead.

How it decides: the block is read as a graph (:mod:`.convert`), its kernels are named in the
rewrite's vocabulary (``concatenation``, ``conv2d``/``depthwise_conv2d`` from
:func:`~.rip.conv_kernel_spec`, ``lookup_table``) and the graph is handed to
:func:`~tvm_serenity.rewrite.rewrite_graph` with ``requantize_inplace=False``: on the host the
requantize writes a fresh int8 tensor (a Relax in-place call cannot change the dtype), so the
decision prices exactly what this pass emits, under the same memory model that
:class:`~.schedule.MemoryAwareSchedule` and :class:`~.arena.ArenaPlan` use afterwards (the
outputs of ``R.call_tir_inplace`` are views there). Blocks without a candidate cost nothing.

Not changed: convolutions whose kernel :func:`~.rip.conv_kernel_spec` cannot read (e.g. some
:class:`~.fakequant.LowerFakeQuant` forms, depth multipliers > 1), concats of constants or of
the same tensor twice, blocks with symbolic shapes. Those are listed (with the reason) in the
report, never half-rewritten.

What it decided is kept on the instance as ``.report`` (:class:`RewriteReport`) and as JSON in
the module attribute ``"serenity.rewrite"``.
"""

from __future__ import annotations

import json
import re
import warnings
from dataclasses import asdict, dataclass, field, replace

import numpy as np
import tvm
from tvm import relax

from ..codegen.partial import conv2d_partial_prim_func, depthwise_slice_prim_func
from ..frontend.relax_import import kernel_function, lookup_table
from ..graph import INPUT_OP, Graph
from ..rewrite import CHANNEL, KERNEL, UNARY, find_candidates, rewrite_graph

#: The rewrite kinds this pass replays. Expand-depthwise fusion (``rewrite.FUSE``) is not one:
#: it needs a fused kernel in Relax, so the graph search is never offered it here.
KINDS = (CHANNEL, KERNEL)
from ..schedule import METHODS
from .convert import (ConversionError, PassError, block_graph, is_op, relax_functions,
                      with_blocks)
from .pipeline import BEFORE_LEGALIZE
from .kernel_spec import conv_kernel_constants, conv_kernel_spec

__all__ = ["IdentityGraphRewrite", "RewriteReport", "BlockRewrite", "REPORT_ATTR", "KINDS"]

REPORT_ATTR = "serenity.rewrite"


@dataclass(frozen=True)
class BlockRewrite:
    """The decision for one dataflow block (peaks: bytes, the scheduler's optimum)."""

    function: str
    block: int
    candidates: int
    applied: tuple[dict, ...] = ()   # {"pattern", "nodes"} per kept rewrite, in kept order
    peak_before: int = 0
    peak_after: int = 0
    optimal: bool = False
    seconds: float = 0.0
    skipped: str | None = None


@dataclass
class RewriteReport:
    """Everything one run of :class:`IdentityGraphRewrite` decided."""

    method: str
    time_limit: float | None
    blocks: list[BlockRewrite] = field(default_factory=list)
    not_matched: dict[str, str] = field(default_factory=dict)   # binding -> why not a candidate

    def to_json(self) -> dict:
        return {"method": self.method, "time_limit": self.time_limit,
                "applied": sum(len(b.applied) for b in self.blocks),
                "blocks": [{**asdict(b), "applied": list(b.applied)} for b in self.blocks],
                "not_matched": self.not_matched}


# ------------------------------------------------------------------ reading the kernels
def _kernel_call(mod: tvm.IRModule, value):
    """(kernel name, kernel function, arguments) if ``value`` calls a Primitive function."""
    if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.GlobalVar):
        func = mod[value.op]
        if isinstance(func, relax.Function) and func.attrs is not None \
                and "Primitive" in func.attrs and len(func.body.blocks) == 1:
            return value.op.name_hint, func, list(value.args)
    return None


def _single_binding(func: relax.Function):
    bindings = func.body.blocks[0].bindings
    if len(bindings) == 1 and bindings[0].var.same_as(func.body.body):
        return bindings[0].value
    return None


def _concat_axis(func: relax.Function) -> int | None:
    """The axis of a kernel that is exactly ``R.concat(its parameters in order)``."""
    value = _single_binding(func)
    if not is_op(value, "relax.concat") or not isinstance(value.args[0], relax.Tuple):
        return None
    fields = list(value.args[0].fields)
    if len(fields) != len(func.params) or not all(f.same_as(p)
                                                  for f, p in zip(fields, func.params)):
        return None
    ndim = func.ret_ty.ndim
    return int(value.attrs.axis) % ndim if ndim > 0 else None


def _table(func: relax.Function, args) -> np.ndarray | None:
    """The 256 int8 values of a :func:`~.relax_import.lookup_table` kernel
    (``take(table, astype(x, int32) + 128)``) called with constant ``table``."""
    bindings = func.body.blocks[0].bindings
    if len(bindings) != 3 or not bindings[2].var.same_as(func.body.body):
        return None
    widen, shift, take = (b.value for b in bindings)
    x = func.params[0]
    if not (is_op(widen, "relax.astype") and widen.args[0].same_as(x)
            and widen.attrs.dtype == "int32" and x.ty.dtype == "int8"
            and is_op(shift, "relax.add") and shift.args[0].same_as(bindings[0].var)
            and isinstance(shift.args[1], tvm.ir.Constant)
            and int(shift.args[1].value.numpy()) == 128
            and is_op(take, "relax.take") and take.args[1].same_as(bindings[1].var)
            and int(take.attrs.axis) == 0 and take.args[0] in list(func.params)):
        return None
    table = args[list(func.params).index(take.args[0])]
    if not isinstance(table, tvm.ir.Constant) or tuple(table.value.shape) != (256,):
        return None
    return table.value.numpy().astype(np.int8)


@dataclass
class _Kernels:
    """What the rewrite needs to know about the kernels called in one block."""

    calls: dict[str, tuple] = field(default_factory=dict)       # node -> (kname, func, args)
    # node -> (spec, constants, (epilogue function, its parameters' indices) for a conv2d)
    convs: dict[str, tuple[dict, dict, tuple | None]] = field(default_factory=dict)
    tables: dict[str, np.ndarray] = field(default_factory=dict)


def _convolves(func: relax.Function, args) -> bool:
    """Whether the kernel has a ``conv2d`` with real weights (not the all-ones window sum of
    the importer's average pooling)."""
    params = list(func.params)
    for b in func.body.blocks[0].bindings:
        if is_op(b.value, "relax.nn.conv2d"):
            w = b.value.args[1]
            if w in params and isinstance(args[params.index(w)], tvm.ir.Constant):
                w = args[params.index(w)]
            if not (isinstance(w, tvm.ir.Constant) and np.all(w.value.numpy() == 1)):
                return True
    return False


def _conv_reason(spec, consts, epilogue) -> str | None:
    """Why a kernel containing a ``conv2d`` cannot be partitioned (None: it can)."""
    if spec is None:
        return "not an integer convolution kernel this pass can read"
    if consts is None:
        return "its constants are not constants or are out of range"
    if spec["op"] == "conv2d" and epilogue is None:
        return "it does not end in a separable requantization"
    return None


def _annotated(graph: Graph, bg, mod, report: RewriteReport, where: str
               ) -> tuple[Graph, _Kernels]:
    """``graph`` with the kernels the rewrite can replay named in its vocabulary. A concat or
    a convolution it cannot replay is recorded in ``report.not_matched`` when it stands where
    a candidate would (a concat feeding a convolution through lookup tables, or the reverse)."""
    kernels = _Kernels()
    name_of = {var: name for name, var in bg.vars.items()}
    nodes = []
    problems: dict[str, str] = {}        # concat or conv node -> why it cannot be replayed
    concats: set[str] = set()
    convs: dict[str, str | None] = {}   # conv node -> the node of its first argument
    for node in graph.nodes.values():
        binding = bg.bindings.get(node.name)
        call = _kernel_call(mod, binding.value) if binding is not None else None
        if call is None:
            nodes.append(node)
            continue
        kname, func, args = call
        kernels.calls[node.name] = call
        if (axis := _concat_axis(func)) is not None:
            concats.add(node.name)
            sources = [name_of[a] for a in args if isinstance(a, relax.Var) and a in name_of]
            if len(sources) == len(args) and len(set(sources)) == len(sources):
                node = replace(node, op="concatenation", inputs=tuple(sources),
                               attrs={**node.attrs, "axis": axis})
            else:
                problems[node.name] = f"concat '{kname}' reads a constant or one tensor twice"
        elif _convolves(func, args):
            convs[node.name] = name_of.get(args[0]) if isinstance(args[0], relax.Var) else None
            spec = conv_kernel_spec(func)
            consts = conv_kernel_constants(spec, args) if spec is not None else None
            epilogue = _epilogue(func) if spec is not None and spec["op"] == "conv2d" else None
            reason = _conv_reason(spec, consts, epilogue)
            if reason is None:
                kernels.convs[node.name] = (spec, consts, epilogue)
                node = replace(node, op=spec["op"], attrs={**node.attrs, "groups": 1}
                               if spec["op"] == "conv2d" else dict(node.attrs))
            else:
                problems[node.name] = f"convolution '{kname}': {reason}"
        elif (table := _table(func, args)) is not None:
            kernels.tables[node.name] = table
            node = replace(node, op="lookup_table")
        nodes.append(node)
    annotated = Graph(nodes, graph.outputs, graph.name)
    for name, src in convs.items():      # a conv reading a concat through lookup tables
        while src is not None and annotated[src].op == "lookup_table":
            src = annotated[src].inputs[0]
        if src in concats:
            for culprit in (name, src):
                if culprit in problems:
                    report.not_matched[f"{where}:{culprit}"] = problems[culprit]
    return annotated, kernels


# ------------------------------------------------------------------ writing the rewrite
def _identifier(name: str) -> str:
    return re.sub(r"[^0-9A-Za-z_]+", "_", name).strip("_") or "v"


def _epilogue(func: relax.Function) -> tuple[relax.Function, list[int]] | None:
    """The kernel ``func`` after its ``conv2d``: ``(acc, constants...) -> int8``, i.e. bias,
    requantization and clamp applied to an int32 accumulator; and the indices of ``func``'s
    parameters it takes after ``acc``."""
    bindings = list(func.body.blocks[0].bindings)
    k = next(i for i, b in enumerate(bindings) if is_op(b.value, "relax.nn.conv2d"))
    conv_var = bindings[k].var
    tail = bindings[k + 1:]
    own = {b.var for b in tail} | {conv_var}
    used = [p for p in func.params
            if any(p in relax.analysis.free_vars(b.value) for b in tail)]
    for b in tail:
        if not set(relax.analysis.free_vars(b.value)) <= own | set(used):
            return None
    acc = relax.Var("acc", conv_var.ty)
    body = relax.SeqExpr([relax.DataflowBlock([relax.VarBinding(conv_var, acc), *tail])],
                         func.body.body)
    new = relax.Function([acc, *used], body, func.ret_ty, func.is_pure, func.attrs)
    new = relax.utils.copy_with_new_vars(relax.BlockBuilder().normalize(new))
    return new, [list(func.params).index(p) for p in used]


class _Replay:
    """Emit the bindings of a rewritten block graph."""

    def __init__(self, bb: relax.BlockBuilder, bg, kernels: _Kernels):
        self.bb, self.bg, self.kernels = bb, bg, kernels
        self.var: dict[str, relax.Var] = dict(bg.vars)

    def new_var(self, node, ty) -> relax.Var:
        if node.name in self.bg.vars:           # y keeps its variable
            return self.bg.vars[node.name]
        var = relax.DataflowVar(_identifier(node.name), ty)
        self.var[node.name] = var
        return var

    def bindings(self, graph: Graph) -> list[relax.Binding]:
        out = []
        for node in graph.nodes.values():
            origin = node.attrs.get("rewrite")
            if node.op == INPUT_OP:
                continue
            if origin is None:
                out.append(self.bg.bindings[node.name])
            elif origin["pattern"] == UNARY:
                out.append(self.unary(node, origin))
            elif origin["pattern"] == CHANNEL:
                out.append(self.channel(node, origin))
            else:
                out.append(self.kernel(node, origin))
        return out

    def _ty(self, node) -> relax.TensorType:
        return relax.TensorType(node.shape, node.dtype)

    def unary(self, node, origin) -> relax.Binding:
        kname = self.kernels.calls[origin["of"]][0]
        table = self.kernels.tables[origin["of"]]
        x = self.var[node.inputs[0]]
        func, args = kernel_function(f"{kname}_{_identifier(origin['input'])}", [x],
                                     lambda v: lookup_table(v, table))
        gvar = self.bb.add_func(func, f"{kname}_{_identifier(origin['input'])}")
        return relax.VarBinding(self.new_var(node, self._ty(node)), relax.Call(gvar, args))

    def _conv(self, origin):
        kname, _, args = self.kernels.calls[origin["of"]]
        return (kname, args, *self.kernels.convs[origin["of"]])

    def channel(self, node, origin) -> relax.Binding:
        kname, args, spec, consts, (epilogue, indices) = self._conv(origin)
        ty = self._ty(node)
        if origin["role"] == "requantize":
            gvar = self.bb.add_func(epilogue, f"{kname}_requantize")
            return relax.VarBinding(self.new_var(node, ty),
                                    relax.Call(gvar, [self.var[node.inputs[0]],
                                                      *(args[i] for i in indices)]))
        lo, hi = origin["channels"]
        weight = relax.const(np.ascontiguousarray(consts["weight"][:, :, lo:hi, :]))
        x = self.var[node.inputs[-1]]
        accumulate = origin["role"] == "accumulate"
        prim = conv2d_partial_prim_func(
            "partial", [int(d) for d in x.ty.shape.values], weight.value.shape, node.shape,
            spec["stride"], spec["dilation"], spec["padding"], spec["input_zero_point"],
            accumulate).without_attr("global_symbol")
        gvar = self.bb.add_func(prim, f"{kname}_{'acc' if accumulate else 'part'}"
                                      f"{origin['step']}")
        if not accumulate:
            value = relax.op.call_tir(gvar, relax.Tuple([x, weight]), ty)
        else:
            value = relax.op.call_tir_inplace(
                gvar, relax.Tuple([x, weight, self.var[node.inputs[0]]]), [2], ty)
        return relax.VarBinding(self.new_var(node, ty), value)

    def kernel(self, node, origin) -> relax.Binding:
        kname, _, spec, consts, _ = self._conv(origin)
        ty = self._ty(node)
        lo, hi = origin["out_channels"]
        tables = [relax.const(np.ascontiguousarray(consts["weight"][:, :, :, lo:hi])),
                  *(relax.const(np.ascontiguousarray(consts[k][lo:hi]))
                    for k in ("bias", "multiplier", "shift"))]
        x = self.var[node.inputs[-1]]
        prim = depthwise_slice_prim_func(
            "slice", [int(d) for d in x.ty.shape.values], tables[0].value.shape, node.shape,
            lo, spec["stride"], spec["dilation"], spec["padding"], spec["input_zero_point"],
            spec["output_zero_point"], max(spec["act_min"], -128), min(spec["act_max"], 127)
        ).without_attr("global_symbol")
        gvar = self.bb.add_func(prim, f"{kname}_slice{origin['step']}")
        if origin["role"] == "slice":
            value = relax.op.call_tir(gvar, relax.Tuple([x, *tables]), ty)
        else:
            value = relax.op.call_tir_inplace(
                gvar, relax.Tuple([x, *tables, self.var[node.inputs[0]]]), [5], ty)
        return relax.VarBinding(self.new_var(node, ty), value)


# ------------------------------------------------------------------ the pass
@tvm.transform.module_pass(opt_level=0, name="serenity.IdentityGraphRewrite")
class IdentityGraphRewrite:
    """Partition concat -> conv / depthwise patterns where the optimal peak drops (module
    docstring: what changes and what does not).

    Parameters
    ----------
    method : the exact scheduling method judging each trial (a key of
        :data:`tvm_serenity.schedule.METHODS`; ``"serenity"`` by default).
    time_limit : seconds per scheduler call (None: none).
    enabled : ``False`` does nothing (how ``serenity_pipeline(rewrite=False)`` leaves it out).
    """

    def __init__(self, method: str = "serenity", time_limit: float | None = None,
                 enabled: bool = True):
        if method not in METHODS:
            raise PassError(f"IdentityGraphRewrite: unknown method '{method}' "
                            f"(choose from {', '.join(sorted(METHODS))})")
        self.method, self.time_limit, self.enabled = method, time_limit, enabled
        self.report = RewriteReport(method, time_limit)

    def transform_module(self, mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        report = RewriteReport(self.method, self.time_limit)
        self.report = report
        if not self.enabled:
            return mod
        bb = relax.BlockBuilder(mod)
        updates = {}
        for gvar, func in relax_functions(mod):
            blocks = [self._block(bb, mod, func, i, gvar.name_hint, report)
                      for i in range(len(func.body.blocks))]
            if any(new is not old for new, old in zip(blocks, func.body.blocks)):
                updates[gvar] = with_blocks(func, blocks)
        if updates:
            for gvar, func in updates.items():
                bb.update_func(gvar, func)
            mod = relax.transform.DeadCodeElimination()(bb.get())
        if report.not_matched:
            warnings.warn("IdentityGraphRewrite: left as they are: " + "; ".join(
                f"{where} ({why})" for where, why in report.not_matched.items()))
        return mod.with_attr(REPORT_ATTR, json.dumps(report.to_json()))

    def _block(self, bb, mod, func, index, fname, report):
        block = func.body.blocks[index]
        if not isinstance(block, relax.DataflowBlock) or not block.bindings:
            return block
        try:
            bg = block_graph(func, index, name=f"{fname}/{index}")
        except ConversionError as err:
            report.blocks.append(BlockRewrite(fname, index, 0, skipped=str(err)))
            return block
        graph, kernels = _annotated(bg.graph, bg, mod, report, fname)
        candidates = find_candidates(graph, KINDS)
        if not candidates:
            return block
        result = rewrite_graph(graph, inplace=True, time_limit=self.time_limit,
                               method=self.method, requantize_inplace=False, kinds=KINDS)
        applied = tuple({"pattern": p, "nodes": list(nodes)} for p, nodes in result.applied)
        report.blocks.append(BlockRewrite(fname, index, len(candidates), applied,
                                          result.peak_before, result.peak_after,
                                          result.optimal, round(result.seconds, 6)))
        if not applied:
            return block
        return relax.DataflowBlock(_Replay(bb, bg, kernels).bindings(result.graph))


BEFORE_LEGALIZE.append(lambda method="serenity", time_limit=None, rewrite=True, **_:
                       IdentityGraphRewrite(method=method, time_limit=time_limit,
                                            enabled=rewrite))
