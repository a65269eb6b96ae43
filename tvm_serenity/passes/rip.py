"""``RiPLowering``: run int8 convolutions Right-in-Place (docs/rip.md) in the order chosen.

What it changes, in every Relax function (``main``): a binding ``y = k(x, w, ...)`` that calls
an *integer convolution kernel* of :mod:`tvm_serenity.frontend.relax_import` (recognised by its
body, see :func:`conv_kernel_spec`: NHWC int8 ``conv2d`` with ``groups == 1``, or depthwise with
depth multiplier 1, of ``int16(x) - z_in``, optional bias, TFLite's requantization) -- either as
the Relax ``Primitive`` function or, after ``FuseTIR``, as ``R.call_tir`` of the PrimFunc that
replaced it -- is rewritten when ``y`` is the **last consumer** of ``x`` in the binding order
the block has now (nothing later in the block, after it or in the result reads ``x``) and ``x``
is not a function parameter (the rule of :mod:`tvm_serenity.memory`)::

    y_ws   = R.call_tir(<k>_rip_place, (x,), R.Tensor((S,), "int8"))   # x right-aligned at S-N_in
    y_out  = R.call_tir_inplace(<k>_rip, (y_ws, weight, bias, multiplier, shift),
                                inplace_indices=[0, -1],
                                out_ty=[R.Tensor((S,), "int8"), R.Tensor((scratch,), "int32")])
    y_rip  = y_out[0]
    y      = R.call_tir(<k>_rip_take, (y_rip,), R.Tensor(<y's shape>, "int8"))  # first N_out B

``<k>_rip`` is :func:`tvm_serenity.codegen.kernels.make_prim_func` of the layer's
:class:`~tvm_serenity.codegen.spec.LayerSpec` in the ``"rip"`` layout (one workspace of ``S``
bytes, input right-aligned, output left-aligned at 0, written over the input), its per-channel
tables new constants in the kernel ABI (packed int32 conv weights, int32 bias, multiplier,
shift); the int32 scratch is a fresh output of the call. ``S = N_in + ceil((S* - N_in) / a) *
a`` with ``a`` the ``alignment`` (64, the host arena's): the smallest workspace at least ``S*``
(a larger gap only leaves the output more room) whose input offset ``S - N_in`` is an offset
distance the arena can give. A layer with ``S >= N_in + N_out`` saves nothing in place and is
left alone (the memory model's rule). Results are bit-identical to the kernel it replaces (both
are TFLite's per-channel int8 reference arithmetic). ``y`` keeps its variable, so nothing after
it changes; kernels no longer called are removed. The three PrimFuncs carry the attribute
``"serenity.rip_role"`` (``place``, ``kernel``, ``take``).

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
  where the peak is a convolution's input plus output (the test chain: 2,048 -> 1,536 B; the
  test cell, whose peak is an ADD, stays at 2,112 B).
* Only kernels whose spec it can read *before* legalization are lowered: the pipeline runs
  :class:`RiPAnnotate` in ``BEFORE_LEGALIZE`` (after ``FoldPad``, so folded padding is seen),
  which records each kernel's spec in the module attribute ``"serenity.rip_kernels"``
  (``FuseTIR`` keeps kernel names but drops function attributes). Run alone on an unlegalized
  module, ``RiPLowering`` reads the Relax kernels itself. Grouped convolutions, depth
  multipliers > 1, kernels of :class:`~.fakequant.LowerFakeQuant` that do not have this exact
  form, pooling, ADD and everything else are left alone.
* It does not reorder anything (run it after ``MemoryAwareSchedule``; a later reorder could
  invalidate the last-consumer decision, but correctness does not depend on it: ``ArenaPlan``
  lets the kernel overwrite ``x`` only where it is ``x``'s last reader in the order planned).

The lowered bindings are kept on the instance as ``.lowered`` (``function:variable``) and the
skipped kernel calls with the reason as ``.skipped``.
"""

from __future__ import annotations

import json
from functools import partial

import numpy as np
import tvm
from tvm import relax, te, tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T

from ..codegen.kernels import make_prim_func
from ..codegen.spec import CodegenError, LayerSpec, kernel_params, pack_conv2d_weight
from .arena import HOST_ALIGNMENT, RIP_ROLE_ATTR
from .convert import is_op, relax_functions, vars_used_after, with_blocks
from .kernel_spec import conv_kernel_constants, conv_kernel_spec
from .pipeline import AFTER_SCHEDULE, BEFORE_LEGALIZE

__all__ = ["RiPLowering", "RiPAnnotate", "conv_kernel_spec", "conv_kernel_constants",
           "SPECS_ATTR", "RIP_SPEC_ATTR", "dual_func", "shift_func"]

SPECS_ATTR = "serenity.rip_kernels"
RIP_SPEC_ATTR = "serenity.rip_spec"     # on each RiP kernel: its spec, to build the dual kernel


def _layer_spec(spec: dict, alignment: int) -> LayerSpec:
    """The layer in the RiP layout with the gap ``S* - N_in`` rounded up to ``alignment``."""
    from ..alloc.plan import padded     # the alloc package imports the solver: only when used
    quant = {k: spec[k] for k in ("input_zero_point", "output_zero_point", "act_min",
                                  "act_max")}
    quant["act_min"] = max(quant["act_min"], -128)
    quant["act_max"] = min(quant["act_max"], 127)
    if spec["op"] == "conv2d":
        make = partial(LayerSpec.conv2d, spec["in_hwc"], spec["out_channels"], spec["kernel"],
                       spec["stride"], spec["dilation"], spec["padding"], **quant)
    else:
        make = partial(LayerSpec.depthwise_conv2d, spec["in_hwc"], spec["kernel"],
                       spec["stride"], spec["dilation"], spec["padding"], **quant)
    layer = make()
    gap = padded(layer.rip_input_offset, alignment)
    return make(workspace_bytes=layer.input_bytes + gap)


def _module_specs(mod: tvm.IRModule) -> dict[str, dict]:
    specs = {}
    if mod.attrs is not None and SPECS_ATTR in mod.attrs:
        specs.update(json.loads(str(mod.attrs[SPECS_ATTR])))
    for gvar, func in mod.functions.items():
        spec = conv_kernel_spec(func)
        if spec is not None:
            specs[gvar.name_hint] = spec
    return specs


@tvm.transform.module_pass(opt_level=0, name="serenity.RiPAnnotate")
class RiPAnnotate:
    """Record :func:`conv_kernel_spec` of every Relax integer convolution kernel in the module
    attribute ``"serenity.rip_kernels"`` (JSON, by kernel name), so that :class:`RiPLowering`
    can lower their calls after ``FuseTIR`` has turned the kernels into PrimFuncs. Changes
    nothing else. Run it last before legalization (after ``FoldPad``). ``enabled=False``: does
    nothing (how the pipeline includes it with ``rip=False``)."""

    def __init__(self, enabled: bool = True):
        self.enabled = enabled

    def transform_module(self, mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        if not self.enabled:
            return mod
        specs = _module_specs(mod)
        return mod.with_attr(SPECS_ATTR, json.dumps(specs, sort_keys=True)) if specs else mod


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
    """The dual-layout kernel of a RiP kernel this pass made (its ``"serenity.rip_spec"``):
    ``(input, output, <the same tables>, scratch)``, flat, the same loops on two buffers
    (:func:`~tvm_serenity.codegen.kernels.make_prim_func`). What :class:`~.arena.ArenaPlan`
    runs for a group its plan lays out apart."""
    stated = json.loads(str(kernel.attrs[RIP_SPEC_ATTR]))
    layer = _layer_spec(stated["spec"], stated["alignment"])
    return make_prim_func(layer, "dual", "dual").without_attr("global_symbol")


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


def _tables(spec: dict, layer: LayerSpec, args) -> list[np.ndarray] | None:
    """weight, bias, multiplier, shift in the kernel ABI, from the call's constant args."""
    consts = conv_kernel_constants(spec, args)
    if consts is None:
        return None
    weight = consts["weight"]
    if spec["op"] == "conv2d":
        weight = pack_conv2d_weight(np.ascontiguousarray(weight.transpose(3, 0, 1, 2)))
    else:
        weight = np.ascontiguousarray(weight.reshape(-1))
    out = [weight, consts["bias"], consts["multiplier"], consts["shift"]]
    params = kernel_params(layer, "rip")[1:5]
    if any(t.size != p.elements or str(t.dtype) != p.dtype for t, p in zip(out, params)):
        return None
    return out


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
        specs = _module_specs(mod)
        if not specs:
            return mod
        bb = relax.BlockBuilder(mod)
        updates = {}
        for gvar, func in relax_functions(mod):
            blocks = [self._lower_block(bb, func, i, specs, gvar.name_hint)
                      for i in range(len(func.body.blocks))]
            if any(new is not old for new, old in zip(blocks, func.body.blocks)):
                updates[gvar] = with_blocks(func, blocks)
        if not updates:
            return mod
        for gvar, func in updates.items():
            bb.update_func(gvar, func)
        return relax.transform.DeadCodeElimination()(bb.get())

    def _kernel_call(self, value, specs):
        """(spec, kernel name, the kernel's arguments) if ``value`` calls a known kernel."""
        if is_op(value, "relax.call_tir") and isinstance(value.args[0], tvm.ir.GlobalVar) \
                and isinstance(value.args[1], relax.Tuple):
            gvar, args = value.args[0], list(value.args[1].fields)
            if len(value.args) > 2:         # call_tir with symbolic (tir_vars) arguments
                return None
        elif isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.GlobalVar):
            gvar, args = value.op, list(value.args)
        else:
            return None
        spec = specs.get(gvar.name_hint)
        if spec is None or len(args) != spec["params"]:
            return None
        return spec, gvar.name_hint, args

    def _lower_block(self, bb, func, index, specs, fname):
        block = func.body.blocks[index]
        if not isinstance(block, relax.DataflowBlock):
            return block
        after = set(vars_used_after(func, index))
        params = set(func.params)
        bindings = list(block.bindings)
        new_bindings = []
        changed = False
        for pos, b in enumerate(bindings):
            found = self._kernel_call(b.value, specs) \
                if isinstance(b, relax.VarBinding) else None
            if found is None:
                new_bindings.append(b)
                continue
            spec, kname, args = found
            where = f"{fname}:{b.var.name}"
            x = args[0]
            reason = None
            if not isinstance(x, relax.Var) or x in params:
                reason = "input is a function parameter"
            elif any(x in relax.analysis.free_vars(later.value) for later in bindings[pos + 1:]):
                reason = "input is read by a later binding"
            elif x in after:
                reason = "input is needed after the block (e.g. a function output)"
            lowered = reason or self._lower(bb, spec, kname, args, b)
            if isinstance(lowered, str):
                self.skipped[where] = lowered
                new_bindings.append(b)
                continue
            new_bindings.extend(lowered)
            self.lowered.append(where)
            changed = True
        return relax.DataflowBlock(new_bindings) if changed else block

    def _lower(self, bb, spec, kname, args, binding):
        """The bindings replacing ``binding``, or why it is not lowered."""
        unfit = "kernel not expressible in the RiP ABI"
        try:
            layer = _layer_spec(spec, self.alignment)
        except CodegenError:
            return unfit
        out_ty = binding.var.ty
        g = layer.geometry
        if not (isinstance(out_ty, relax.TensorType) and out_ty.dtype == "int8"
                and [int(d) for d in out_ty.shape.values] == [1, g.out_height, g.out_width,
                                                              g.out_channels]):
            return unfit
        size = layer.rip_workspace_bytes
        if size >= layer.input_bytes + layer.output_bytes:
            return (f"workspace {size} B (gap aligned to {self.alignment} B) is no smaller "
                    f"than input and output apart")
        tables = _tables(spec, layer, args)
        if tables is None:
            return unfit
        in_shape = [int(d) for d in args[0].ty.shape.values]
        out_shape = [int(d) for d in out_ty.shape.values]
        kernel = make_prim_func(layer, "rip", f"{kname}_rip").without_attr("global_symbol")
        kernel = kernel.with_attr(RIP_ROLE_ATTR, "kernel").with_attr(
            RIP_SPEC_ATTR, json.dumps({"spec": spec, "alignment": self.alignment},
                                      sort_keys=True))
        k_gv = bb.add_func(kernel, f"{kname}_rip")
        place_gv = bb.add_func(_place_func(in_shape, size).with_attr(RIP_ROLE_ATTR, "place"),
                               f"{kname}_rip_place")
        take_gv = bb.add_func(_take_func(size, out_shape).with_attr(RIP_ROLE_ATTR, "take"),
                              f"{kname}_rip_take")
        ws_ty = relax.TensorType((size,), "int8")
        scratch_ty = relax.TensorType((max(layer.scratch_elements, 1),), "int32")
        name = binding.var.name
        ws = relax.DataflowVar(f"{name}_ws", ws_ty)
        res = relax.DataflowVar(f"{name}_rip_out", relax.TupleType([ws_ty, scratch_ty]))
        done = relax.DataflowVar(f"{name}_rip", ws_ty)
        consts = [relax.const(t) for t in tables]
        return [
            relax.VarBinding(ws, relax.op.call_tir(place_gv, relax.Tuple([args[0]]), ws_ty)),
            relax.VarBinding(res, relax.op.call_tir_inplace(
                k_gv, relax.Tuple([ws, *consts]), [0, -1], [ws_ty, scratch_ty])),
            relax.VarBinding(done, relax.TupleGetItem(res, 0)),
            relax.VarBinding(binding.var, relax.op.call_tir(take_gv, relax.Tuple([done]),
                                                            out_ty)),
        ]


BEFORE_LEGALIZE.append(lambda rip=False, **_: RiPAnnotate(enabled=rip))
AFTER_SCHEDULE.append(lambda rip=False, alignment=HOST_ALIGNMENT, **_:
                      RiPLowering(enabled=rip, alignment=alignment))
