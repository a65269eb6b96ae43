"""One statement of each operator's integer kernel: which kernel a TFLite operator runs and
with which arguments, for both back ends.

:func:`kernel_call` maps an :class:`~tvm_serenity.frontend.tflite_model.Operator` of a
:class:`~tvm_serenity.frontend.tflite_model.TFLiteModel` (with its node of the graph IR,
``tflite_to_graph(model, fold_pad=True)``, whose window attributes include folded padding) to a
:class:`KernelCall`:

* the kernel: a :class:`~.spec.LayerSpec` and layout for the window and same-shape ADD kernels
  of :mod:`.kernels` (the PrimFunc is :func:`.kernels.make_prim_func` of it), or the
  ``<op>_prim_func`` / ``<op>_kernel`` pair of :mod:`.layout_ops` and :mod:`.elementwise_ops`
  (one PrimFunc, and the same PrimFunc printed as C), or a C-only kernel of :mod:`.ops` (the
  float32 SOFTMAX / LOG_SOFTMAX and ARG_MAX: no PrimFunc);
* the arguments in the kernel's ABI order, as symbolic entries: :class:`Operand` (operator
  input ``i``, an activation), :class:`Result` (the operator's output), :class:`Table` (a
  constant array the caller provides: weights, biases, requantization, lookup tables, a
  constant MUL/ADD operand) and :class:`Scratch` (int16 / int32 work memory of a number of
  elements).

:mod:`.graph_c` renders a call as C (arena pointers, ``static const`` arrays, the shared
``scratch16`` / ``scratch32``; its in-place and identity-rewrite variants stay its own);
:meth:`KernelCall.relax_func` gives the same PrimFunc in the form ``R.call_tir`` calls, which
:func:`tvm_serenity.frontend.relax_import.operator_call` emits for every operator of a Relax
module (so the llvm build runs these kernels too). ``in_place`` picks the RiP layout of the
graph emitter's in-place steps (the workspace is the node's ``inplace`` bytes). A node of a
patch plan (:mod:`tvm_serenity.rewrite.patch`) describes its region: an elementwise kernel's
element count is the node's shape, a window kernel's input shape and padding are the node's
and its row pitches those of ``attrs["patch"]``. A grouped CONV_2D, and a DEPTHWISE_CONV_2D
with a depth multiplier, run as the dense convolution (zero weights outside each group).

An operator whose options ask for onnxruntime's arithmetic (``"arithmetic": "onnxruntime"``,
an ONNX QDQ model's; :mod:`tvm_serenity.frontend.ort_arithmetic` is the specification) runs the
same kernels with that arithmetic's options, decided from its ``ort_kernel``: conv2d /
depthwise_conv2d with ``LayerSpec.arithmetic`` (onnxruntime's requantization), avg_pool2d with
``LayerSpec.ort_pool`` (float32 sums), MEAN and FULLY_CONNECTED with ``arithmetic`` (and
:class:`.layout_ops.FloatMean` / :class:`.layout_ops.FloatGemm` for the float kernels), ADD /
MUL as :func:`.elementwise_ops.ort_binary_kernel`, SOFTMAX as
:func:`.elementwise_ops.ort_softmax_kernel`, RELU / RELU6 / LOGISTIC / HARD_SWISH / an int8
QUANTIZE as 256-entry tables of the specification, a float QUANTIZE as ``QuantizeLinear``.

Refusals are :class:`~tvm_serenity.frontend.tflite_model.UnsupportedOperatorError` naming the
operator (``<model>: operator #k (OP)``) or a kernel generator's
:class:`~.spec.CodegenError`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Callable

import numpy as np

from ..frontend import ort_arithmetic as ort
from ..frontend import reference as ref
from ..frontend.reference import (activation_range, add_params, conv_params, conv_requant,
                                  quantize_multiplier, relu6_int8, strided_slice_params)
from ..frontend.tflite_model import Operator, Tensor, TFLiteModel, UnsupportedOperatorError
from . import elementwise_ops as ew
from . import layout_ops as lo
from .kernels import make_prim_func, relax_abi
from .ops import FLOAT_MATH, OpKernel, log_softmax_float_kernel, softmax_float_kernel
from .spec import AddRescale, CodegenError, LayerSpec, OrtPool, pack_conv2d_weight

__all__ = ["Operand", "Result", "Table", "Scratch", "KernelCall", "kernel_call", "KERNEL_OPS"]


@dataclass(frozen=True)
class Operand:
    """Operator input ``index`` (an activation tensor)."""

    index: int


@dataclass(frozen=True)
class Result:
    """The operator's output."""


@dataclass(frozen=True)
class Table:
    """A constant array argument ``name`` (the C array is ``<node>_<name>``), flat;
    ``operand``: the operator input it is, for a constant operand passed as data (MUL/ADD)."""

    name: str
    dtype: str
    values: np.ndarray = field(compare=False)
    operand: int | None = None


@dataclass(frozen=True)
class Scratch:
    """Work memory of ``elements`` ``dtype`` values (``int16`` or ``int32``)."""

    dtype: str
    elements: int


@dataclass(frozen=True)
class KernelCall:
    """How operator ``op`` runs (module docstring). Exactly one of ``spec`` (a kernel of
    :mod:`.kernels` in ``layout``) and ``c_kernel`` (an :class:`~.ops.OpKernel` factory) is
    set, unless the operator is a RESHAPE (``reshape``: no kernel, a copy or nothing).
    ``prim_func`` builds the PrimFunc of the ``c_kernel`` family (None: C only);
    ``float_math``: the generated libm functions the C uses."""

    op: Operator
    layout: str                       # "dual" or "rip"
    args: tuple = ()
    spec: LayerSpec | None = None
    c_kernel: Callable[[], OpKernel] | None = None
    prim_func: Callable[[], object] | None = None
    float_math: tuple[str, ...] = ()
    reshape: bool = False

    def make_prim_func(self):
        """The TIR PrimFunc of this call, its buffers in the order of :attr:`args`; None for a
        C-only kernel or a RESHAPE."""
        if self.spec is not None:
            return make_prim_func(self.spec, self.layout)
        return None if self.prim_func is None else self.prim_func()

    def relax_func(self, operand_types, result_type):
        """The PrimFunc of this call in the form ``R.call_tir`` calls
        (:func:`.kernels.relax_abi`: the same body), and the call's arguments in its parameter
        order (:class:`Operand` and :class:`Table` entries). ``operand_types[i]`` is the
        ``(shape, dtype)`` of operator input ``i``, ``result_type`` the output's; a kernel in
        the RiP layout keeps its flat workspace, the buffer of ``R.call_tir_inplace``. The
        scratch is the function's own."""
        func = self.make_prim_func()
        if func is None:
            raise CodegenError(f"operator #{self.op.index} ({self.op.op}): no TIR kernel")
        in_place = self.layout == "rip" and self.spec is not None
        roles, views, inputs = [], [], []
        for a in self.args:
            if isinstance(a, Scratch):
                roles.append("scratch")
                views.append(None)
            elif isinstance(a, Result):
                roles.append("inout" if in_place else "out")
                views.append(None if in_place else result_type)
            else:
                roles.append("in")
                views.append(operand_types[a.index] if isinstance(a, Operand) else None)
                inputs.append(a)
        return relax_abi(func, roles, views), inputs


def _dense(weights: np.ndarray, groups: int) -> np.ndarray:
    """The OHWI weights of a grouped convolution (a depthwise one with a depth multiplier:
    one input channel per group) as a dense one's: each output channel's weights at its
    group's input channels, zero elsewhere (the same sums: the products added are those of the
    grouped convolution, plus zeros)."""
    cout, kh, kw, cin_g = weights.shape
    dense = np.zeros((cout, kh, kw, cin_g * groups), np.int8)
    per_group = cout // groups
    for o in range(cout):
        g = o // per_group
        dense[o, :, :, g * cin_g:(g + 1) * cin_g] = weights[o]
    return dense


def _scale_zp(t: Tensor) -> tuple[float, int]:
    return t.quant.scalar_scale, t.quant.scalar_zero_point


class _Calls:
    def __init__(self, model: TFLiteModel, op: Operator, node, in_place: bool, name: str):
        self.model, self.op, self.node, self.in_place, self.name = model, op, node, in_place, name
        self.layout = "rip" if in_place else "dual"
        self.ort = ort.is_onnxruntime(op.options)      # onnxruntime's arithmetic

    def unsupported(self, why: str) -> UnsupportedOperatorError:
        return UnsupportedOperatorError(f"{self.model.where(self.op)}: {why}", self.op.op,
                                        self.op.index)

    def tensor(self, i: int) -> Tensor:
        return self.model.tensors[self.op.inputs[i]]

    @property
    def out(self) -> Tensor:
        return self.model.tensors[self.op.outputs[0]]

    @property
    def elements(self) -> int:
        """Elements an elementwise kernel writes: the node's (a patch of a layer, a row of it,
        is a smaller node than the operator's output tensor)."""
        shape = self.node.shape
        return int(np.prod(shape)) if shape is not None else self.out.size

    def activation(self, i: int, dtype: str = "int8") -> Tensor:
        """Operand ``i``, a (quantized, for int8) ``dtype`` activation; constants refused."""
        t = self.tensor(i)
        if t.data is not None:
            raise self.unsupported(f"operand {i} ('{t.name}') is a constant; the emitter "
                                   "supports activation operands only")
        if t.dtype != dtype or (dtype == "int8" and t.quant is None):
            raise self.unsupported(f"operand '{t.name}' is {t.dtype}; only {dtype} "
                                   "activations are supported" + (
                                       f" by {self.op.op}" if dtype != "int8" else ""))
        return t

    def operand(self, i: int):
        """Operand ``i`` of MUL / ADD: an activation, or a constant int8 table."""
        t = self.tensor(i)
        if t.data is None:
            self.activation(i)
            return Operand(i)
        if t.dtype != "int8" or t.quant is None:
            raise self.unsupported(f"constant operand {i} ('{t.name}') is {t.dtype}; only int8 "
                                   "constants are supported")
        return Table(f"operand{i}", "int8", t.data, operand=i)

    def bias(self, units: int) -> np.ndarray:
        i = self.op.inputs[2] if len(self.op.inputs) > 2 else -1
        return self.model.tensors[i].data if i >= 0 else np.zeros(units, np.int32)

    def call(self, args, layout: str | None = None, **kernel) -> KernelCall:
        return KernelCall(self.op, layout or self.layout, tuple(args), **kernel)

    def prim(self, args, c_kernel, prim_func, layout: str | None = None, **extra) -> KernelCall:
        return self.call(args, layout, c_kernel=c_kernel, prim_func=prim_func, **extra)

    # ----------------------------------------------------------------------- operators
    def window(self) -> KernelCall:
        """CONV_2D, DEPTHWISE_CONV_2D, MAX_POOL_2D, AVERAGE_POOL_2D: kernels of :mod:`.kernels`."""
        op, a = self.op, self.node.attrs
        x = self.activation(0)
        out = self.out
        in_shape = a["in_shape"]
        if len(in_shape) != 4 or in_shape[0] != 1:
            raise self.unsupported(f"input shape {in_shape}: batch-1 NHWC only")
        in_hwc = tuple(in_shape[1:])
        patch = a.get("patch") or {}
        geometry = dict(kernel=tuple(a["kernel"]), stride=tuple(a["stride"]),
                        padding=tuple(a["padding"]),
                        input_row_pitch=(patch.get("in_row_pitches") or [None])[0],
                        output_row_pitch=patch.get("out_row_pitch"))
        workspace = {"workspace_bytes": self.node.inplace} if self.in_place else {}
        tables: list[Table] = []
        if op.op in ("CONV_2D", "DEPTHWISE_CONV_2D"):
            params = (ort.conv_params if self.ort else conv_params)(self.model, op)
            rq = params.requant
            quant = dict(input_zero_point=params.input_zero_point,
                         output_zero_point=rq.output_zero_point, act_min=rq.act_min,
                         act_max=rq.act_max, **workspace,
                         arithmetic="onnxruntime" if self.ort else "tflite",
                         right_shifts=not self.ort and bool(np.all(rq.shift <= 0)))
            w = self.tensor(1).data
            if op.op == "CONV_2D":
                if a["groups"] != 1:
                    w = _dense(w, a["groups"])
                spec = LayerSpec.conv2d(in_hwc, out.shape[3], dilation=tuple(a["dilation"]),
                                        **geometry, **quant)
                dense = True
            elif out.shape[3] != in_hwc[2]:     # a depth multiplier: as the dense convolution
                w, dense = _dense(np.transpose(w, (3, 1, 2, 0)), in_hwc[2]), True
                spec = LayerSpec.conv2d(in_hwc, out.shape[3], dilation=tuple(a["dilation"]),
                                        **geometry, **quant)
            else:
                dense = False
                spec = LayerSpec.depthwise_conv2d(in_hwc, dilation=tuple(a["dilation"]),
                                                  **geometry, **quant)
            tables = [Table("weight", "int32", pack_conv2d_weight(w)) if dense
                      else Table("weight", "int8", w),
                      Table("bias", "int32", self.bias(out.shape[3])),
                      Table("multiplier", "int32", rq.multiplier),
                      Table("shift", "int32", rq.shift)]
        elif self.ort and op.op == "AVERAGE_POOL_2D":
            p = ort.average_pool_params(self.model, op)
            pool = OrtPool(p.qlinear, p.order, p.include_pad, p.output_scale,
                           p.output_zero_point, p.offset)
            spec = LayerSpec.avg_pool2d(in_hwc, ort_pool=pool, **geometry, **workspace)
            tables = [Table("table", "int32", p.table.view(np.int32))]
        else:
            if _scale_zp(x) != _scale_zp(out):
                raise self.unsupported("input and output quantization differ")
            act_min, act_max = activation_range(
                op.options.get("fused_activation_function", "NONE"), *_scale_zp(out))
            make = LayerSpec.max_pool2d if op.op == "MAX_POOL_2D" else LayerSpec.avg_pool2d
            spec = make(in_hwc, act_min=act_min, act_max=act_max, **geometry, **workspace)
        buffers = [Result()] if self.in_place else [Operand(0), Result()]
        return self.call(buffers + tables + [Scratch("int32", spec.scratch_elements)],
                         spec=spec)

    def ort_binary(self) -> KernelCall:
        """ADD / MUL with onnxruntime's arithmetic (:func:`.elementwise_ops.ort_binary_kernel`
        over the node's elements: two activations of the output's shape; in place, input 1
        is overwritten element by element after it is read)."""
        p = ort.elementwise_params(self.model, self.op)       # two same-shape activations
        self.activation(0), self.activation(1)
        tables = {"QLinearAdd": [Table("table", "float32", p.table)], "QLinearMul": []}.get(
            p.kernel, [Table("table_a", "float32", p.table_a), Table("table", "float32",
                                                                     p.table)])
        shape = (self.elements,)            # elementwise: the node's elements (a patch's too)
        return self.prim([Operand(0), Operand(1), Result(), *tables],
                         partial(ew.ort_binary_kernel, self.name, shape, p),
                         partial(ew.ort_binary_prim_func, shape, p, symbol=self.name))

    def add(self) -> KernelCall:
        """Same-shape int8 ADD of two activations (:mod:`.kernels`); in place, input 1 is
        overwritten. Broadcasting or a constant operand: :meth:`binary`."""
        op = self.op
        a, b = self.tensor(0), self.tensor(1)
        out = self.out
        if self.ort:
            return self.ort_binary()
        if a.data is not None or b.data is not None or not a.shape == b.shape == out.shape:
            return self.binary()
        a, b = self.activation(0), self.activation(1)
        p = add_params(*_scale_zp(a), *_scale_zp(b), *_scale_zp(out),
                       op.options.get("fused_activation_function", "NONE"))
        rescale = AddRescale(p.input2_zero_point, p.input1_multiplier, p.input1_shift,
                             p.input2_multiplier, p.input2_shift, int(p.output.multiplier),
                             int(p.output.shift), p.left_shift)
        shape = self.node.shape or out.shape    # a patch of the ADD: the node's
        hwc = tuple(shape[1:]) if len(shape) == 4 else (1, 1, self.elements)
        spec = LayerSpec.elementwise_add(hwc, rescale, input_zero_point=p.input1_zero_point,
                                         output_zero_point=p.output.output_zero_point,
                                         act_min=p.output.act_min, act_max=p.output.act_max)
        args = [Result(), Operand(1)] if self.in_place else [Operand(0), Result(), Operand(1)]
        return self.call(args, spec=spec)

    def mean(self) -> KernelCall:
        x = self.activation(0)
        out = self.out
        rank = len(x.shape)
        axes = sorted({int(v) % rank for v in np.asarray(self.tensor(1).data).reshape(-1)})
        if axes != list(range(axes[0], axes[-1] + 1)):
            raise self.unsupported(f"MEAN over non-contiguous axes {axes}")
        outer = int(np.prod(x.shape[:axes[0]], dtype=np.int64))
        reduce = int(np.prod([x.shape[i] for i in axes], dtype=np.int64))
        inner = int(np.prod(x.shape[axes[-1] + 1:], dtype=np.int64))
        if self.in_place and outer != 1:
            raise CodegenError(f"{self.model.where(self.op)}: in place only as one reduction "
                               "block")
        (si, zi), (so, zo) = _scale_zp(x), _scale_zp(out)
        if self.ort:      # QLinearGlobalAveragePool, or the float GlobalAveragePool
            p = ort.global_mean(self.model, self.op)[1]
            floating = isinstance(p, ort.PoolParams)
            values = (self.name, outer, reduce, inner, zi,
                      *((0, 0) if floating else (int(p.multiplier[0]), int(p.shift[0]))), zo,
                      "onnxruntime",
                      lo.FloatMean(p.output_scale, p.output_zero_point) if floating else None)
            tables = [Table("table", "float32", p.table)] if floating else []
            return self.prim([Operand(0), Result(), Scratch("int32", inner), *tables],
                             partial(lo.mean_kernel, *values),
                             partial(lo.mean_prim_func, *values))
        multiplier, shift = quantize_multiplier(float(si) / float(so))
        # TFLM's QuantizedMeanOrSum folds 1/count into the multiplier (reference.mean_int8).
        s = min(reduce.bit_length() - 1, 32, 31 + shift)
        values = (self.name, outer, reduce, inner, zi, (multiplier << s) // reduce, shift - s,
                  zo)
        return self.prim([Operand(0), Result(), Scratch("int32", inner)],
                         partial(lo.mean_kernel, *values), partial(lo.mean_prim_func, *values))

    def fully_connected(self) -> KernelCall:
        x = self.activation(0)
        w = self.tensor(1)
        out = self.out
        if w.data is None or w.data.ndim != 2 or w.dtype != "int8":
            raise self.unsupported("weights must be a constant int8 matrix")
        units, depth = w.data.shape
        (si, zi), (so, zo) = _scale_zp(x), _scale_zp(out)
        activation = self.op.options.get("fused_activation_function", "NONE")
        if self.ort:
            return self.ort_fully_connected(units, depth, zi, zo)
        if w.quant.per_channel:
            rq = conv_requant(si, w.quant.scale, so, zo, activation)
            multiplier, shift = rq.multiplier, rq.shift
        else:   # TFLM: the input * filter scale product is taken in float32
            product = np.float32(si) * np.float32(w.quant.scale[0])
            m, s = quantize_multiplier(float(product) / float(so))
            multiplier, shift = np.full(units, m), np.full(units, s)
        act_min, act_max = activation_range(activation, so, zo)
        values = (self.name, x.size // depth, depth, units, zi, zo, act_min, act_max,
                  self.in_place)
        args = [Operand(0), Result(), Table("weight", "int8", w.data),
                Table("bias", "int32", self.bias(units)),
                Table("multiplier", "int32", multiplier), Table("shift", "int32", shift)]
        if self.in_place:
            args.append(Scratch("int16", depth))
        right = {"right_shifts": bool(np.all(np.asarray(shift) <= 0))}
        return self.prim(args, partial(lo.fully_connected_kernel, *values, **right),
                         partial(lo.fully_connected_prim_func, *values, **right))

    def ort_fully_connected(self, units: int, depth: int, zi: int, zo: int) -> KernelCall:
        """FULLY_CONNECTED run as onnxruntime's QGemm / QLinearMatMul (its requantization) or
        float Gemm / MatMul (:class:`.layout_ops.FloatGemm`)."""
        w = self.tensor(1)
        p = ort.fully_connected_params(self.model, self.op)
        x = self.activation(0)
        head = [Operand(0), Result(), Table("weight", "int8", w.data)]
        if isinstance(p, ort.FullyConnectedFloat):
            gemm = lo.FloatGemm(p.output_scale, p.output_zero_point)
            values = (self.name, x.size // depth, depth, units, zi, zo, *p.act, self.in_place,
                      "onnxruntime", gemm)
            bias = np.zeros(units, np.float32) if p.bias is None else p.bias
            args = head + [Table("table", "float32", p.table),
                           Table("wscale", "float32", p.weight_scales),
                           Table("bias", "float32", bias)]
        else:
            values = (self.name, x.size // depth, depth, units, zi, zo, p.act_min, p.act_max,
                      self.in_place, "onnxruntime")
            args = head + [Table("bias", "int32", self.bias(units)),
                           Table("multiplier", "int32", np.broadcast_to(p.multiplier, units)),
                           Table("shift", "int32", np.broadcast_to(p.shift, units))]
        if self.in_place:
            args.append(Scratch("int16", depth))
        return self.prim(args, partial(lo.fully_connected_kernel, *values),
                         partial(lo.fully_connected_prim_func, *values))

    def transpose(self) -> KernelCall:
        x = self.activation(0)
        values = (self.name, x.shape, np.asarray(self.tensor(1).data).reshape(-1))
        return self.prim([Operand(0), Result()], partial(lo.transpose_kernel, *values),
                         partial(lo.transpose_prim_func, *values), "dual")

    def concatenation(self) -> KernelCall:
        operands = [self.activation(i) for i in range(len(self.op.inputs))]
        if any(_scale_zp(t) != _scale_zp(self.out) for t in operands):
            raise self.unsupported("operands quantized differently from the output")
        if self.op.options.get("fused_activation_function", "NONE") != "NONE":
            raise self.unsupported("fused activation")
        values = (self.name, [t.shape for t in operands], int(self.op.options.get("axis", 0)))
        return self.prim([Operand(i) for i in range(len(operands))] + [Result()],
                         partial(lo.concatenation_kernel, *values),
                         partial(lo.concatenation_prim_func, *values), "dual")

    def pad(self) -> KernelCall:
        x = self.activation(0)
        value = _scale_zp(self.out)[1]
        if len(self.op.inputs) > 2 and self.op.inputs[2] >= 0:
            value = int(np.asarray(self.tensor(2).data).reshape(-1)[0])
        values = (self.name, x.shape, self.tensor(1).data, value)
        return self.prim([Operand(0), Result()], partial(lo.pad_kernel, *values),
                         partial(lo.pad_prim_func, *values), "dual")

    def strided_slice(self) -> KernelCall:
        x = self.activation(0)
        p = strided_slice_params(self.model, self.op)       # TFLM's semantics, validated
        values = (self.name, x.shape, p.start, p.stride, p.count)
        return self.prim([Operand(0), Result()], partial(lo.strided_slice_kernel, *values),
                         partial(lo.strided_slice_prim_func, *values), "dual")

    def quantize(self) -> KernelCall:
        """int8 -> int8 QUANTIZE (a requantization) and the float32 -> int8 edge (TFLM's
        ``AffineQuantize``)."""
        out = self.out
        arithmetic = "onnxruntime" if self.ort else "tflite"
        if self.tensor(0).dtype == "float32":
            scale, zp = _scale_zp(out)
            return self.prim([Operand(0), Result()],
                             partial(ew.float_quantize_kernel, self.name, self.elements,
                                     scale, zp, arithmetic),
                             partial(ew.float_quantize_prim_func, self.elements, scale, zp,
                                     symbol=self.name, arithmetic=arithmetic))
        if self.ort:
            return self.lookup()
        x = self.activation(0)
        (si, zi), (so, zo) = _scale_zp(x), _scale_zp(out)
        m, s = quantize_multiplier(float(si) / float(so))
        return self.prim([Operand(0), Result()],
                         partial(ew.requantize_kernel, self.name, self.elements, zi, m, s, zo),
                         partial(ew.requantize_prim_func, self.elements, zi, m, s, zo,
                                 symbol=self.name))

    def dequantize(self) -> KernelCall:
        """int8 -> float32 DEQUANTIZE (TFLM's ``Dequantize``)."""
        x = self.activation(0)
        values = (x.size, *_scale_zp(x))
        return self.prim([Operand(0), Result()],
                         partial(ew.dequantize_kernel, self.name, *values),
                         partial(ew.dequantize_prim_func, *values, symbol=self.name))

    def relu(self) -> KernelCall:
        """RELU (TFLM ``ReluQuantized``) and RELU6 (``Relu6Quantized``: a clamp) over the
        node's elements."""
        if self.ort:
            return self.lookup()
        (si, zi), (so, zo) = _scale_zp(self.unary_input()), _scale_zp(self.out)
        n = self.elements
        if self.op.op == "RELU6":
            low, high = (int(v) for v in relu6_int8(np.array([-128, 127]), si, zi))
            kernel = partial(ew.clamp_kernel, self.name, n, low, high)
            func = partial(ew.clamp_prim_func, n, low, high, symbol=self.name)
        else:
            m, s = quantize_multiplier(float(np.float32(si) / np.float32(so)))
            bounds = (max(-128, zo), 127)
            kernel = partial(ew.requantize_kernel, self.name, n, zi, m, s, zo, *bounds,
                             what="RELU int8")
            func = partial(ew.requantize_prim_func, n, zi, m, s, zo, *bounds, symbol=self.name)
        return self.prim([Operand(0), Result()], kernel, func)

    def unary_input(self) -> Tensor:
        """The input of a one-input operator, checked unless the graph emitter reads it
        elsewhere (a pushed-down copy: the node is a rewrite node)."""
        if "rewrite" in self.node.attrs:
            return self.tensor(0)
        return self.activation(0)

    def binary(self) -> KernelCall:
        """MUL, and ADD with broadcasting or a constant operand (``reference.mul_int8`` /
        ``add_int8``): the broadcasting kernel, or, when one operand is a constant of one
        repeated value and the other has the output's size, a 256-entry table of the
        reference kernel with that constant."""
        op, name = self.op, self.name
        a, b = self.tensor(0), self.tensor(1)
        if self.ort:
            return self.ort_binary()
        if a.data is not None and b.data is not None:
            raise self.unsupported("both operands are constants")
        out = self.out
        if max(len(a.shape), len(b.shape), len(out.shape)) > 4:
            raise self.unsupported(f"rank above 4 ({list(a.shape)}, {list(b.shape)})")
        for t in (a, b):
            if t.dtype != "int8" or t.quant is None:
                raise self.unsupported(f"operand '{t.name}' is {t.dtype}; only int8 "
                                       "operands are supported")
        activation = op.options.get("fused_activation_function", "NONE")
        (sa, za), (sb, zb), (so, zo) = _scale_zp(a), _scale_zp(b), _scale_zp(out)
        shapes = (a.shape, b.shape, out.shape)
        if op.op == "MUL":
            rq = ref.mul_requant(sa, sb, so, zo, activation)
            m, s = (int(np.asarray(v).reshape(-1)[0]) for v in (rq.multiplier, rq.shift))

            def reference(x, y):
                return ref.mul_int8(x, y, za, zb, rq)

            values = (*shapes, za, zb, m, s, zo, rq.act_min, rq.act_max)
            kernel = partial(ew.mul_kernel, name, *values)
            func = partial(ew.mul_prim_func, *values, symbol=name)
        else:
            p = add_params(sa, za, sb, zb, so, zo, activation)

            def reference(x, y):
                return ref.add_int8(x, y, p)

            values = (*shapes, za, zb, p.input1_multiplier, p.input1_shift,
                      p.input2_multiplier, p.input2_shift, int(p.output.multiplier),
                      int(p.output.shift), zo, p.output.act_min, p.output.act_max,
                      p.left_shift)
            kernel = partial(ew.add_kernel, name, *values)
            func = partial(ew.add_prim_func, *values, symbol=name)
        const, act, k = (b, a, 0) if b.data is not None else (a, b, 1)
        if (const.data is not None and act.size == out.size
                and np.all(const.data == const.data.reshape(-1)[0])):
            self.activation(k)
            c = np.full(256, const.data.reshape(-1)[0], dtype=np.int8)
            table = ref.table_of(lambda v: reference(v, c) if const is b else reference(c, v))
            what = f"{op.op} int8 by the constant {int(c[0])}"
            return self.prim([Operand(k), Result(), Table("table", "int8", table)],
                             partial(ew.lookup_kernel, name, self.elements, what),
                             partial(ew.lookup_prim_func, self.elements, symbol=name))
        if self.elements != out.size:
            raise self.unsupported(f"a part of {op.op} ({self.elements} of its {out.size} "
                                   "outputs) needs a constant operand of one value")
        return self.prim([self.operand(0), self.operand(1), Result()], kernel, func)

    def lookup(self) -> KernelCall:
        """HARD_SWISH and LOGISTIC (and every elementwise operator with onnxruntime's
        arithmetic): ``table[x + 128]`` over the node's elements, the table computed with the
        reference kernel for all 256 inputs."""
        (si, zi), (so, zo) = _scale_zp(self.unary_input()), _scale_zp(self.out)
        if self.ort:
            table = ort.unary_table(self.op.op, (si, zi), (so, zo))
        elif self.op.op == "HARD_SWISH":
            params = ref.hard_swish_params(si, zi, so, zo)
            table = ref.table_of(lambda v: ref.hard_swish_int8(v, params))
        else:
            if zo != ref.INT8_MIN:
                raise self.unsupported("int8 LOGISTIC needs output zero point -128")
            params = ref.logistic_params(si, zi)
            table = ref.table_of(lambda v: ref.logistic_int8(v, params))
        n = self.elements
        return self.prim([Operand(0), Result(), Table("table", "int8", table)],
                         partial(ew.lookup_kernel, self.name, n, f"{self.op.op} int8"),
                         partial(ew.lookup_prim_func, n, symbol=self.name))

    def softmax(self) -> KernelCall:
        """TFLM's int8 SOFTMAX over the last axis (``reference.softmax_int8``) with its
        exponential tables; a float32 SOFTMAX is :meth:`softmax_float`'s."""
        if self.tensor(0).dtype == "float32":
            return self.softmax_float()
        x = self.activation(0)
        if self.ort:
            return self.ort_softmax(x)
        if _scale_zp(self.out) != (np.float32(1.0 / 256), ref.INT8_MIN):
            raise self.unsupported("int8 SOFTMAX needs output scale 1/256 and zero point -128")
        depth = int(x.shape[-1]) if len(x.shape) else 1
        exps, terms, valid_from = ref.softmax_tables(
            ref.softmax_params(self.op.options.get("beta", 1.0), _scale_zp(x)[0]))
        values = (x.size // depth, depth, valid_from)

        def kernel():
            try:
                return ew.softmax_kernel(self.name, *values)
            except CodegenError as e:
                raise self.unsupported(str(e)) from None
        return self.prim([Operand(0), Result(), Table("exps", "int32", exps),
                          Table("terms", "int32", terms)], kernel,
                         partial(ew.softmax_prim_func, *values, symbol=self.name))

    def ort_softmax(self, x: Tensor) -> KernelCall:
        """SOFTMAX run as onnxruntime's QLinearSoftmax or float Softmax
        (:func:`.elementwise_ops.ort_softmax_kernel`)."""
        depth = int(x.shape[-1])
        p = ort.softmax_params(self.op.options.get(ort.KERNEL, ""), _scale_zp(x),
                               _scale_zp(self.out), depth,
                               self.op.options.get(ort.DTYPE, "uint8"))
        values = (x.size // depth, depth, p)
        return self.prim([Operand(0), Result(), Table("table", "float32", p.table)],
                         partial(ew.ort_softmax_kernel, self.name, *values),
                         partial(ew.ort_softmax_prim_func, *values, symbol=self.name))

    def softmax_float(self) -> KernelCall:
        """float32 SOFTMAX and LOG_SOFTMAX over the last axis (C kernels of :mod:`.ops`)."""
        x = self.activation(0, "float32")
        depth = int(x.shape[-1])
        if self.op.op == "SOFTMAX":
            kernel = partial(softmax_float_kernel, self.name, x.size // depth, depth,
                             self.op.options.get("beta", 1.0))
            math = ("expf",)
        else:
            kernel = partial(log_softmax_float_kernel, self.name, x.size // depth, depth)
            math = tuple(FLOAT_MATH)
        return self.prim([Operand(0), Result()], kernel, None, float_math=math)

    def arg_max(self) -> KernelCall:
        """ARG_MAX of an int8 or float32 tensor along its constant axis, int32 indices
        (:mod:`.layout_ops`)."""
        x = self.tensor(0)
        x = self.activation(0, "float32" if x.dtype == "float32" else "int8")
        shape = [int(d) for d in x.shape]
        axis = int(np.asarray(self.tensor(1).data).reshape(-1)[0]) % len(shape)
        outer, inner = (int(np.prod(part, dtype=np.int64)) for part in (shape[:axis],
                                                                         shape[axis + 1:]))
        values = (self.name, outer, shape[axis], inner, x.dtype)
        return self.prim([Operand(0), Result()], partial(lo.arg_max_kernel, *values),
                         partial(lo.arg_max_prim_func, *values))

    def resize_nearest(self) -> KernelCall:
        """RESIZE_NEAREST_NEIGHBOR: the reference's source rows and columns (read off by
        resizing the indices themselves) as offset tables, pixel copies."""
        x = self.activation(0)
        if len(x.shape) != 4:
            raise self.unsupported(f"input shape {list(x.shape)}: NHWC only")
        _, h, w, c = (int(d) for d in x.shape)
        oh, ow = (int(v) for v in np.asarray(self.tensor(1).data).reshape(-1))
        o = self.op.options
        corners, half = bool(o.get("align_corners")), bool(o.get("half_pixel_centers"))
        rows = ref.resize_nearest_neighbor(np.arange(h).reshape(1, h, 1, 1), (oh, 1),
                                           corners, half).reshape(-1)
        cols = ref.resize_nearest_neighbor(np.arange(w).reshape(1, 1, w, 1), (1, ow),
                                           corners, half).reshape(-1)
        values = (self.name, x.shape, (oh, ow))
        return self.prim([Operand(0), Result(),
                          Table("rows", "int32", rows.astype(np.int64) * (w * c)),
                          Table("cols", "int32", cols.astype(np.int64) * c)],
                         partial(lo.resize_nearest_kernel, *values),
                         partial(lo.resize_nearest_prim_func, *values), "dual")

    def reshape_(self) -> KernelCall:
        self.activation(0)
        return self.call([Operand(0), Result()], reshape=True)


_CALLS = {"CONV_2D": _Calls.window, "DEPTHWISE_CONV_2D": _Calls.window,
          "MAX_POOL_2D": _Calls.window, "AVERAGE_POOL_2D": _Calls.window,
          "ADD": _Calls.add, "MUL": _Calls.binary, "MEAN": _Calls.mean,
          "FULLY_CONNECTED": _Calls.fully_connected, "TRANSPOSE": _Calls.transpose,
          "CONCATENATION": _Calls.concatenation, "PAD": _Calls.pad, "PADV2": _Calls.pad,
          "STRIDED_SLICE": _Calls.strided_slice, "QUANTIZE": _Calls.quantize,
          "DEQUANTIZE": _Calls.dequantize, "RELU": _Calls.relu, "RELU6": _Calls.relu,
          "RESHAPE": _Calls.reshape_, "HARD_SWISH": _Calls.lookup, "LOGISTIC": _Calls.lookup,
          "SOFTMAX": _Calls.softmax, "LOG_SOFTMAX": _Calls.softmax_float,
          "ARG_MAX": _Calls.arg_max, "RESIZE_NEAREST_NEIGHBOR": _Calls.resize_nearest}
#: TFLite operators :func:`kernel_call` describes.
KERNEL_OPS = tuple(_CALLS)


def kernel_call(model: TFLiteModel, op: Operator, node, *, in_place: bool = False,
                name: str | None = None) -> KernelCall:
    """The kernel call of ``op`` (module docstring): ``node`` is its node of
    ``tflite_to_graph(model, fold_pad=True)`` (window attributes, element count, the in-place
    workspace); ``name`` the C name of its kernel (default: the node's). Raises
    :class:`~tvm_serenity.frontend.tflite_model.UnsupportedOperatorError` for an operator
    outside :data:`KERNEL_OPS`."""
    method = _CALLS.get(op.op)
    if method is None:
        raise UnsupportedOperatorError(f"{model.where(op)}: no integer kernel (supported: "
                                       f"{', '.join(KERNEL_OPS)})", op.op, op.index)
    return method(_Calls(model, op, node, in_place, name or node.name))
