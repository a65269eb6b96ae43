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
    y       = R.call_tir(<k>_requantize, (y_part<n-1>, bias, multiplier, shift), y's type)

    # kernel-wise (depthwise): each slice writes its channels of y in place
    y_part0 = R.call_tir(<k>_slice0, (x_1, w_1, bias_1, multiplier_1, shift_1), y's type)
    y_part1 = R.call_tir_inplace(<k>_slice1, (x_2, ..., y_part0), [5], y's type)
    y       = R.call_tir_inplace(<k>_slice<n-1>, (x_n, ..., y_part<n-2>), [5], y's type)

so the concat never exists and each ``x_i`` can die as soon as its partial ran. A unary chain
``u`` between the concat and the convolution (RELU, RELU6, HARD_SWISH, LOGISTIC, int8
QUANTIZE) is applied to every ``x_i`` instead (the same operator's kernel on ``x_i``). The
partial, slice and requantize kernels are :mod:`tvm_serenity.codegen.partial`'s, the ones the
microcontroller's rewritten graph runs (bias, TFLite's requantization and clamp of the original
convolution). Everything is integer arithmetic in the same order of operations per element,
so the outputs are bit-identical (proof: :mod:`tvm_serenity.rewrite.patterns`). ``y`` keeps its variable, so
nothing after it changes; the concat, the unary chain and kernels nobody calls any more are
removed when dead.

How it decides: the block is read as a graph (:mod:`.convert`), its kernels are named in the
rewrite's vocabulary from their descriptions (``concatenation``, ``conv2d`` /
``depthwise_conv2d``, ``lookup_table`` for the unary ones) and the graph is handed to
:func:`~tvm_serenity.rewrite.rewrite_graph` with ``requantize_inplace=False``: on the host the
requantize writes a fresh int8 tensor (a Relax in-place call cannot change the dtype), so the
decision prices exactly what this pass emits, under the same memory model that
:class:`~.schedule.MemoryAwareSchedule` and :class:`~.arena.ArenaPlan` use afterwards (the
outputs of ``R.call_tir_inplace`` are views there). Blocks without a candidate cost nothing.

Not changed: grouped convolutions, kernels without a (valid) description, concats of constants
or of the same tensor twice, blocks with symbolic shapes. Those are listed (with the reason) in
the report, never half-rewritten.

What it decided is kept on the instance as ``.report`` (:class:`RewriteReport`) and as JSON in
the module attribute ``"serenity.rewrite"``.

With ``memory_model="mcu"`` the pass rewrites the graph a microcontroller build compiles
instead, and changes no function: ``main``'s graph (:func:`.mcu_graph.main_graph`) is handed to
:func:`~tvm_serenity.rewrite.rewrite_graph` with every pattern the C emitter runs (expand-
depthwise fusion too, the int32 requantization in place), judged with the build's in-place
model; a concat that is no pure copy in the model (its inputs' quantization differs from its
output's, :func:`~tvm_serenity.codegen.graph_c.concat_is_copy`) is kept out of every pattern.
The rewritten graph and the scheduler's order for it become the module's MCU graph
(:mod:`.mcu_graph`), which ``ArenaPlan(memory_model="mcu")`` plans and the Relax-to-C emitter
writes (so ``MemoryAwareSchedule`` need not run: the order is the rewrite's); the search's
result is ``.result`` (a :class:`~tvm_serenity.rewrite.RewriteResult`).
"""

from __future__ import annotations

import json
import re
import warnings
from dataclasses import asdict, dataclass, field, replace

import numpy as np
import tvm
from tvm import relax

from ..codegen.partial import (accumulator_requantize_prim_func, conv2d_partial_prim_func,
                               depthwise_slice_prim_func)
from ..frontend import reference as ref
from ..frontend.relax_import import operator_call, operator_model, spatial_pad
from ..frontend.to_graph import operator_node
from ..graph import INPUT_OP, Graph
from ..rewrite import CHANNEL, KERNEL, UNARY, RewriteResult, find_candidates, rewrite_graph

#: The rewrite kinds this pass replays. Expand-depthwise fusion (``rewrite.FUSE``) is not one:
#: it needs a fused kernel in Relax, so the graph search is never offered it here.
KINDS = (CHANNEL, KERNEL)
from ..schedule import METHODS
from ..codegen.graph_c import concat_is_copy
from ..frontend.relax_lift import operators_of
from .convert import ConversionError, PassError, block_graph, relax_functions, with_blocks
from .mcu_graph import McuGraph, main_graph, with_mcu_graph
from .described import DescribedCall, described_call
from .pipeline import BEFORE_LEGALIZE

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
#: Described one-input elementwise operators the rewrite pushes through a concat.
_UNARY = ("RELU", "RELU6", "HARD_SWISH", "LOGISTIC", "QUANTIZE")
_CONVS = ("CONV_2D", "DEPTHWISE_CONV_2D")


@dataclass(frozen=True)
class _Conv:
    """A convolution as the partial / slice / requantize kernels take it."""

    op: str                      # conv2d / depthwise_conv2d
    weight: np.ndarray           # HWIO (depthwise: KH x KW x 1 x C*M)
    bias: np.ndarray             # int32, per output channel
    multiplier: np.ndarray
    shift: np.ndarray
    stride: tuple
    dilation: tuple
    padding: tuple               # top, bottom, left, right (a folded PAD included)
    input_zero_point: int
    output_zero_point: int
    act_min: int
    act_max: int


def _conv(call: DescribedCall) -> _Conv | str:
    """The convolution ``call`` computes, or why the rewrite cannot replay it."""
    model, op = call.model()
    node = operator_node(model, op, spatial_pad(call.description))
    a = node.attrs
    if op.op == "CONV_2D" and a["groups"] != 1:
        return f"a grouped convolution ({a['groups']} groups)"
    params = ref.conv_params(model, op)
    weights = model.tensors[op.inputs[1]].data
    hwio = weights.transpose(1, 2, 3, 0) if op.op == "CONV_2D" else weights.transpose(1, 2, 0, 3)
    channels = hwio.shape[3]
    bias = model.tensors[op.inputs[2]].data if len(op.inputs) > 2 and op.inputs[2] >= 0 \
        else np.zeros(channels, np.int32)
    rq = params.requant
    return _Conv(node.op, np.ascontiguousarray(hwio),
                 *(np.ascontiguousarray(np.broadcast_to(v, (channels,)), np.int32)
                   for v in (bias, rq.multiplier, rq.shift)),
                 tuple(a["stride"]), tuple(a["dilation"]), tuple(a["padding"]),
                 params.input_zero_point, rq.output_zero_point,
                 max(int(rq.act_min), -128), min(int(rq.act_max), 127))


@dataclass
class _Kernels:
    """What the rewrite needs to know about the kernels called in one block."""

    calls: dict[str, DescribedCall] = field(default_factory=dict)     # node -> its call
    convs: dict[str, _Conv] = field(default_factory=dict)


def _annotated(graph: Graph, bg, mod, report: RewriteReport, where: str
               ) -> tuple[Graph, _Kernels]:
    """``graph`` with the kernels the rewrite can replay named in its vocabulary. A concat or
    a convolution it cannot replay is recorded in ``report.not_matched`` when it stands where
    a candidate would (a concat feeding a convolution through unary operators, or the
    reverse)."""
    kernels = _Kernels()
    name_of = {var: name for name, var in bg.vars.items()}
    nodes = []
    problems: dict[str, str] = {}        # concat or conv node -> why it cannot be replayed
    concats: set[str] = set()
    convs: dict[str, str | None] = {}   # conv node -> the node of its first argument
    for node in graph.nodes.values():
        binding = bg.bindings.get(node.name)
        call = described_call(mod, binding.value) if binding is not None else None
        if call is None:
            nodes.append(node)
            continue
        kernels.calls[node.name] = call
        kname = call.kernel.name_hint
        if call.op == "CONCATENATION":
            concats.add(node.name)
            sources = [name_of[a] for a in call.args if isinstance(a, relax.Var) and a in name_of]
            rank = len(call.description.outputs[0]["shape"])
            if len(sources) == len(call.args) and len(set(sources)) == len(sources):
                node = replace(node, op="concatenation", inputs=tuple(sources),
                               attrs={**node.attrs, "axis": int(
                                   call.description.options.get("axis", 0)) % rank})
            else:
                problems[node.name] = f"concat '{kname}' reads a constant or one tensor twice"
        elif call.op in _CONVS:
            x = call.arg(0)
            convs[node.name] = name_of.get(x) if isinstance(x, relax.Var) else None
            conv = _conv(call)
            if isinstance(conv, _Conv):
                kernels.convs[node.name] = conv
                node = replace(node, op=conv.op, attrs={**node.attrs, "groups": 1}
                               if conv.op == "conv2d" else dict(node.attrs))
            else:
                problems[node.name] = f"convolution '{kname}': {conv}"
        elif call.op in _UNARY and call.description.inputs[0]["dtype"] == "int8":
            node = replace(node, op="lookup_table")
        nodes.append(node)
    annotated = Graph(nodes, graph.outputs, graph.name)
    for name, src in convs.items():      # a conv reading a concat through unary operators
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


def _const(values: np.ndarray) -> relax.Constant:
    return relax.const(np.ascontiguousarray(values))


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
        """The unary operator's kernel on one concat input alone."""
        call = self.kernels.calls[origin["of"]]
        x = self.var[node.inputs[0]]
        shape = [int(d) for d in x.ty.shape.values]
        d = call.description
        alone = replace(d, inputs=({**d.inputs[0], "shape": shape}, *d.inputs[1:]),
                        outputs=({**d.outputs[0], "shape": shape},), index=None)
        model, op = operator_model(alone)
        value = operator_call(self.bb, model, op, {op.inputs[0]: x}, index=None,
                              name=f"{call.kernel.name_hint}_{_identifier(origin['input'])}")
        return relax.VarBinding(self.new_var(node, self._ty(node)), value)

    def channel(self, node, origin) -> relax.Binding:
        call = self.kernels.calls[origin["of"]]
        kname, conv = call.kernel.name_hint, self.kernels.convs[origin["of"]]
        ty = self._ty(node)
        if origin["role"] == "requantize":
            prim = accumulator_requantize_prim_func(
                "requantize", node.shape, conv.output_zero_point, conv.act_min, conv.act_max)
            gvar = self.bb.add_func(prim.without_attr("global_symbol"), f"{kname}_requantize")
            value = relax.op.call_tir(gvar, relax.Tuple([
                self.var[node.inputs[0]], *map(_const, (conv.bias, conv.multiplier,
                                                        conv.shift))]), ty)
            return relax.VarBinding(self.new_var(node, ty), value)
        lo, hi = origin["channels"]
        weight = _const(conv.weight[:, :, lo:hi, :])
        x = self.var[node.inputs[-1]]
        accumulate = origin["role"] == "accumulate"
        prim = conv2d_partial_prim_func(
            "partial", [int(d) for d in x.ty.shape.values], weight.value.shape, node.shape,
            conv.stride, conv.dilation, conv.padding, conv.input_zero_point,
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
        call = self.kernels.calls[origin["of"]]
        kname, conv = call.kernel.name_hint, self.kernels.convs[origin["of"]]
        ty = self._ty(node)
        lo, hi = origin["out_channels"]
        tables = [_const(conv.weight[:, :, :, lo:hi]),
                  *(_const(v[lo:hi]) for v in (conv.bias, conv.multiplier, conv.shift))]
        x = self.var[node.inputs[-1]]
        prim = depthwise_slice_prim_func(
            "slice", [int(d) for d in x.ty.shape.values], tables[0].value.shape, node.shape,
            lo, conv.stride, conv.dilation, conv.padding, conv.input_zero_point,
            conv.output_zero_point, conv.act_min, conv.act_max).without_attr("global_symbol")
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
    time_limit : seconds per scheduler call (None: none); with ``memory_model="mcu"`` for the
        whole search (seconds or a :class:`~tvm_serenity.schedule.Deadline`).
    enabled : ``False`` does nothing (how ``serenity_pipeline(rewrite=False)`` leaves it out).
    memory_model : ``"relax"`` (the Relax blocks, above) or ``"mcu"`` (the graph of a
        microcontroller build: module docstring).
    inplace : ``"mcu"`` only: judge with in-place execution (the RiP build) or without.
    """

    def __init__(self, method: str = "serenity", time_limit: float | None = None,
                 enabled: bool = True, memory_model: str = "relax", inplace: bool = True):
        if method not in METHODS:
            raise PassError(f"IdentityGraphRewrite: unknown method '{method}' "
                            f"(choose from {', '.join(sorted(METHODS))})")
        if memory_model not in ("relax", "mcu"):
            raise PassError(f"IdentityGraphRewrite: memory_model must be 'relax' or 'mcu', "
                            f"got {memory_model!r}")
        self.method, self.time_limit, self.enabled = method, time_limit, enabled
        self.memory_model, self.inplace = memory_model, inplace
        self.report = RewriteReport(method, time_limit)
        self.result: RewriteResult | None = None     # memory_model="mcu": the search's result

    def transform_module(self, mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        report = RewriteReport(self.method, self.time_limit)
        self.report = report
        if not self.enabled:
            return mod
        if self.memory_model == "mcu":
            return self._rewrite_main(mod)
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

    def _rewrite_main(self, mod: tvm.IRModule) -> tvm.IRModule:
        """``memory_model="mcu"`` (module docstring)."""
        where = "IdentityGraphRewrite(memory_model='mcu')"
        graph = main_graph(mod, where)
        model = operators_of(mod, "main", where)
        hidden = {n.name for n in graph.nodes.values() if n.op == "concatenation"
                  and not concat_is_copy(model, model.operator(int(n.attrs["tflite_index"])))}

        def renamed(g: Graph, names, op: str) -> Graph:
            return Graph([replace(n, op=op) if n.name in names else n
                          for n in g.nodes.values()], g.outputs, g.name)

        result = rewrite_graph(renamed(graph, hidden, "concatenation_requantized"),
                               inplace=self.inplace, time_limit=self.time_limit,
                               method=self.method)
        if hidden:
            result.graph = renamed(result.graph, hidden, "concatenation")
        self.result = result
        return with_mcu_graph(mod, McuGraph(result.graph, tuple(result.schedule.order), graph,
                                            "IdentityGraphRewrite"))

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
