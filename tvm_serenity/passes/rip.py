"""``RiPLowering``: run int8 convolutions Right-in-Place (docs/rip.md) in the order chosen.

What it changes, in every Relax function (``main``): a binding ``y = R.call_tir(k, (x,
tables...))`` of a described CONV_2D (one group) or DEPTHWISE_CONV_2D (depth multiplier 1)
kernel (:mod:`.described`) is rewritten when ``y`` is the **last consumer** of ``x`` in the
binding order the block has now (nothing later in the block, after it or in the result reads
``x``) and ``x`` is not a function parameter (the rule of :mod:`tvm_serenity.memory`)::

    y_ws   = R.call_tir(<k>_rip_place, (x,), R.Tensor((S,), "int8"))   # x right-aligned at S-N_in
    y_rip  = R.call_tir_inplace(<k>_rip, (y_ws, tables...), inplace_indices=[0],
                                out_ty=R.Tensor((S,), "int8"))
    y      = R.call_tir(<k>_rip_take, (y_rip,), R.Tensor(<y's shape>, "int8"))  # first N_out B

``<k>_rip`` is the same operator's kernel of :func:`~tvm_serenity.codegen.kernel_call.kernel_call`
in the ``"rip"`` layout (one workspace of ``S`` bytes, input right-aligned, output
left-aligned at 0, written over the input: what the microcontroller C runs in place), with the
same constant tables. ``S = N_in + ceil((S* - N_in) / a) * a`` with ``a`` the ``alignment``
(64, the host arena's): the smallest workspace at least ``S*`` (a larger gap only leaves the
output more room) whose input offset ``S - N_in`` is an offset distance the arena can give. A
layer with ``S >= N_in + N_out`` saves nothing in place and is left alone (the memory model's
rule). Results are bit-identical to the kernel it replaces (the same loops on other addresses).
``y`` keeps its variable, so nothing after it changes; kernels no longer called are removed.
The three PrimFuncs carry the attribute ``"serenity.rip_role"`` (``place``, ``kernel``,
``take``); the kernel also keeps the operator's description under the prefix ``serenity.rip``
(:meth:`~tvm_serenity.frontend.relax_import.OperatorDescription.describe`: not where the
microcontroller route reads descriptions, since its arguments are a workspace), from which
:func:`dual_func` states its dual-layout kernel.

The copies keep the module correct under any memory planner; :class:`~.arena.ArenaPlan` removes
them (module docstring there): it places x's allocation at ``o + S - N_in`` inside the
workspace ``[o, o + S)`` of its arena and y's at ``o``, so on llvm the kernel runs on the
arena slice with no copy and input and output share ``S`` bytes, as on the MCU C path
(:mod:`tvm_serenity.codegen.graph_c`).

What it does **not** change or achieve:

* In the ``"serenity"`` pipeline it is registered in ``AFTER_SCHEDULE`` (with the
  pipeline's ``alignment``) and runs with ``serenity_pipeline(rip=True)``, or in one of the two
  builds ``rip="auto"`` (the default) compares, which keeps the smaller arena. TVM's own
  ``StaticPlanBlockMemory`` figure grows with it (the copies); ``ArenaPlan``'s arena drops
  where the peak is a convolution's input plus output.
* Grouped convolutions, depth multipliers > 1, pooling, ADD and everything else are left alone
  (the reason is recorded), and so is a kernel whose description a pass invalidated.
* It does not reorder anything (run it after ``MemoryAwareSchedule``; a later reorder could
  invalidate the last-consumer decision, but correctness does not depend on it: ``ArenaPlan``
  lets the kernel overwrite ``x`` only where it is ``x``'s last reader in the order planned).

The lowered bindings are kept on the instance as ``.lowered`` (``function:variable``) and the
skipped kernel calls with the reason as ``.skipped``.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import tvm
from tvm import relax, te, tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T

from ..codegen.kernel_call import Table, kernel_call
from ..codegen.spec import CodegenError
from ..frontend.relax_import import OperatorDescription, operator_model, spatial_pad
from ..frontend.to_graph import operator_node
from ..frontend.tflite_model import UnsupportedOperatorError
from .arena import HOST_ALIGNMENT, RIP_ROLE_ATTR
from .convert import relax_functions, vars_used_after, with_blocks
from .described import described_call
from .pipeline import AFTER_SCHEDULE

__all__ = ["RiPLowering", "RIP_DESCRIPTION", "dual_func", "shift_func"]

RIP_DESCRIPTION = "serenity.rip"     # the description prefix of a RiP kernel
_CONVS = ("CONV_2D", "DEPTHWISE_CONV_2D")


def _conv_call(description: OperatorDescription, workspace: int | None = None):
    """The kernel call of the convolution ``description`` states: dual layout, or (with the
    ``workspace`` of ``S`` bytes) in place."""
    model, op = operator_model(description)
    node = operator_node(model, op, spatial_pad(description))
    if workspace is None:
        return kernel_call(model, op, node, name="kernel")
    return kernel_call(model, op, dataclasses.replace(node, inplace=workspace),
                       in_place=True, name="kernel")


# ------------------------------------------------------------------ the new PrimFuncs
def _place_func(in_shape, size: int) -> tirx.PrimFunc:
    """``ws[S - N_in + j] = x.flat[j]``; the gap ``ws[:S - N_in]`` is zeroed."""
    x = te.placeholder(in_shape, "int8", name="x")
    n = int(np.prod(in_shape))
    offset = size - n
    strides = [int(np.prod(in_shape[i + 1:])) for i in range(len(in_shape))]

    def element(i):
        j = tirx.max(i - offset, 0)          # no negative index, even where not selected
        index = []
        for s, d in zip(strides, in_shape):
            index.append(tirx.truncmod(tirx.truncdiv(j, s), d))
        return tirx.if_then_else(i >= offset, x[tuple(index)], tirx.const(0, "int8"))

    ws = te.compute((size,), element, name="ws")
    return te.create_prim_func([x, ws]).without_attr("global_symbol")


def dual_func(kernel: tirx.PrimFunc) -> tirx.PrimFunc:
    """The dual-layout kernel of a RiP kernel this pass made (its description): ``(input,
    <the same tables>, output)``, the input and output flat int8 buffers, the same loops on two
    buffers. What :class:`~.arena.ArenaPlan` runs for a group its plan lays out apart."""
    call = _conv_call(OperatorDescription.of(kernel, RIP_DESCRIPTION))
    func, _ = call.relax_func([((call.spec.input_bytes,), "int8")],
                              ((call.spec.output_bytes,), "int8"))
    return func.without_attr("global_symbol")


def shift_func(input_bytes: int, size: int) -> tirx.PrimFunc:
    """``ws[S - N_in + j] = ws[j]`` for ``j`` from ``N_in - 1`` down to 0: the input memmoved
    right, in place, to where the RiP kernel reads it (what :class:`~.arena.ArenaPlan` runs for
    a planned right shift, :class:`tvm_serenity.alloc.Move`)."""
    last = input_bytes - 1
    with IRBuilder() as builder:
        with T.prim_func():
            T.func_name("rip_shift")
            ws = T.arg("ws", T.Buffer((size,), "int8"))
            with T.serial(0, input_bytes) as j:
                T.buffer_store(ws, ws[last - j], [size - input_bytes + last - j])
    return builder.get()


def _take_func(size: int, out_shape) -> tirx.PrimFunc:
    """``y.flat[i] = ws[i]`` for ``i < N_out``."""
    ws = te.placeholder((size,), "int8", name="ws")
    strides = [int(np.prod(out_shape[i + 1:])) for i in range(len(out_shape))]
    y = te.compute(tuple(out_shape),
                   lambda *idx: ws[sum(i * s for i, s in zip(idx, strides))], name="y")
    return te.create_prim_func([ws, y]).without_attr("global_symbol")


# ------------------------------------------------------------------ the pass
@tvm.transform.module_pass(opt_level=0, name="serenity.RiPLowering")
class RiPLowering:
    """Lower every int8 convolution call that is its input's last consumer to a RiP in-place
    kernel call (see the module docstring for exactly what changes and what does not).
    ``enabled=False``: does nothing (how the pipeline includes it without RiP)."""

    def __init__(self, enabled: bool = True, alignment: int = HOST_ALIGNMENT):
        self.enabled = enabled
        self.alignment = alignment
        self.lowered: list[str] = []
        self.skipped: dict[str, str] = {}

    def transform_module(self, mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        self.lowered, self.skipped = [], {}
        if not self.enabled:
            return mod
        bb = relax.BlockBuilder(mod)
        updates = {}
        for gvar, func in relax_functions(mod):
            blocks = [self._lower_block(bb, mod, func, i, gvar.name_hint)
                      for i in range(len(func.body.blocks))]
            if any(new is not old for new, old in zip(blocks, func.body.blocks)):
                updates[gvar] = with_blocks(func, blocks)
        if not updates:
            return mod
        for gvar, func in updates.items():
            bb.update_func(gvar, func)
        return relax.transform.DeadCodeElimination()(bb.get())

    def _lower_block(self, bb, mod, func, index, fname):
        block = func.body.blocks[index]
        if not isinstance(block, relax.DataflowBlock):
            return block
        after = set(vars_used_after(func, index))
        params = set(func.params)
        bindings = list(block.bindings)
        new_bindings = []
        changed = False
        for pos, b in enumerate(bindings):
            call = described_call(mod, b.value) if isinstance(b, relax.VarBinding) else None
            if call is None or call.op not in _CONVS:
                new_bindings.append(b)
                continue
            where = f"{fname}:{b.var.name}"
            x = call.arg(0)
            reason = None
            if not isinstance(x, relax.Var) or x in params:
                reason = "input is a function parameter"
            elif any(x in relax.analysis.free_vars(later.value) for later in bindings[pos + 1:]):
                reason = "input is read by a later binding"
            elif x in after:
                reason = "input is needed after the block (e.g. a function output)"
            lowered = reason or self._lower(bb, call, b)
            if isinstance(lowered, str):
                self.skipped[where] = lowered
                new_bindings.append(b)
                continue
            new_bindings.extend(lowered)
            self.lowered.append(where)
            changed = True
        return relax.DataflowBlock(new_bindings) if changed else block

    def _lower(self, bb, call, binding):
        """The bindings replacing ``binding`` (a call of a described convolution), or why it
        is not lowered."""
        from ..alloc.plan import padded     # the alloc package imports the solver: only when used
        try:
            dual = _conv_call(call.description)
            layer = dual.spec
            size = layer.input_bytes + padded(layer.rip_input_offset, self.alignment)
            if size >= layer.input_bytes + layer.output_bytes:
                return (f"workspace {size} B (gap aligned to {self.alignment} B) is no "
                        f"smaller than input and output apart")
            rip = _conv_call(call.description, size)
            kernel, inputs = rip.relax_func([], None)
        except (CodegenError, UnsupportedOperatorError) as e:
            return f"kernel not expressible in the RiP layout ({e})"
        kname = call.kernel.name_hint
        x, out_ty = call.arg(0), binding.var.ty
        kernel = call.description.describe(kernel.without_attr("global_symbol"),
                                           RIP_DESCRIPTION).with_attr(RIP_ROLE_ATTR, "kernel")
        k_gv = bb.add_func(kernel, f"{kname}_rip")
        in_shape, out_shape = ([int(d) for d in v.ty.shape.values] for v in (x, binding.var))
        place_gv = bb.add_func(_place_func(in_shape, size).with_attr(
            RIP_ROLE_ATTR, "place"), f"{kname}_rip_place")
        take_gv = bb.add_func(_take_func(size, out_shape).with_attr(
            RIP_ROLE_ATTR, "take"), f"{kname}_rip_take")
        ws_ty = relax.TensorType((size,), "int8")
        name = binding.var.name
        ws = relax.DataflowVar(f"{name}_ws", ws_ty)
        done = relax.DataflowVar(f"{name}_rip", ws_ty)
        tables = [relax.const(np.ascontiguousarray(a.values, a.dtype).reshape(-1), a.dtype)
                  for a in inputs if isinstance(a, Table)]
        return [
            relax.VarBinding(ws, relax.op.call_tir(place_gv, relax.Tuple([x]), ws_ty)),
            relax.VarBinding(done, relax.op.call_tir_inplace(
                k_gv, relax.Tuple([ws, *tables]), [0], ws_ty)),
            relax.VarBinding(binding.var, relax.op.call_tir(take_gv, relax.Tuple([done]),
                                                            out_ty)),
        ]


AFTER_SCHEDULE.append(lambda rip=False, alignment=HOST_ALIGNMENT, **_:
                      RiPLowering(enabled=rip, alignment=alignment))
