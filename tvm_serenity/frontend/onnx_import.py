"""Import an int8 ONNX model in QDQ form as Relax integer kernels computing onnxruntime's
arithmetic (or TFLite's).

onnxruntime's ``quantize_static(..., quant_format=QDQ, activation_type=QInt8,
weight_type=QInt8, per_channel=True)`` writes every operator as
``QuantizeLinear(op(DequantizeLinear(x), DequantizeLinear(W)))``. TVM's ONNX frontend
(``tvm.relax.frontend.onnx.from_onnx``, parameters kept as constants) imports that as NCHW float
operators between ``R.quantize`` / ``R.dequantize``: OIHW weights dequantized per output channel
(axis 0), a bias as a dequantized int32 vector reshaped to ``(1, C, 1, 1)`` and added,
GlobalAveragePool as ``mean(axis=[2, 3], keepdims=True)``, Flatten as a ``reshape``, Gemm as
``matmul`` (of transposed weights) plus a bias.

tf2onnx writes an int8 ``.tflite`` the same way, with the graph's int8 inputs and outputs kept
(an int8 input moved to NCHW by a Transpose, or a Reshape for one channel, before its first
DequantizeLinear; the last QuantizeLinear's result the output), ``MatMul`` + ``Add`` for a dense
layer, ``Relu`` between the operator and its QuantizeLinear, and a symbolic batch dimension.

:func:`from_onnx` fixes each graph input's shape (an unknown or symbolic *first* dimension, the
batch, is 1; any other symbolic dimension is refused naming the input and dimension), imports
the model with TVM's frontend and then

1. **moves the graph to NHWC** (:class:`_ToNHWC`, one pass over the bindings in order): every
   4-D value of a layout-aware operator (conv2d, pools, mean, concat, elementwise ops, quantize /
   dequantize) is computed in NHWC, with OIHW weight constants transposed to HWIO (their
   per-channel axis moved with them), channel-bias reshapes dropped (the 1-D vector broadcasts
   over NHWC), reduction / concat axes and quantization axes mapped. Where a value must be seen
   in NCHW (a graph input or output, a flatten of a non-1x1 tensor, any other operator) the
   *int8* tensor under its ``dequantize`` is permuted, so no float layout change is added; a
   permute of an int8 tensor that was itself reshaped or permuted (tf2onnx's input Transpose)
   merges with that move, so an input moved to NCHW and back reads the input itself.
   Two forms are made explicit for TFLite's kernels: ``quantize(reshape(dequantize(q)))`` with
   one quantization becomes an int8 ``reshape(q)``, and a Concat whose inputs are quantized
   differently from its output gets its inputs requantized first, as onnxruntime's
   QLinearConcat does (with TFLite's arithmetic a Softmax quantized to other than TFLite's
   1/256 gets its output requantized too);
2. runs :class:`~tvm_serenity.passes.fakequant.LowerFakeQuant`, which replaces each
   ``dequantize -> op -> quantize`` by an integer kernel. With ``arithmetic="onnxruntime"``
   (the default) :mod:`~tvm_serenity.passes.ort_fakequant` first decides, on the imported
   graph, what onnxruntime 1.32 runs on x86 for each node (the int8 / uint8 type of every
   quantized tensor after its QDQS8ToU8Transformer, then whether the node fuses into a
   QLinear kernel or runs in float between DequantizeLinear and QuantizeLinear), and each
   kernel's description carries ``"arithmetic": "onnxruntime"`` and that kernel
   (:mod:`.ort_arithmetic`, the specification, says what is reproduced exactly: everything
   but a float Conv and a several-row float Gemm, whose MLAS summation order is not, within
   1 LSB); with ``"tflite"`` the kernels compute TFLite's fixed point;
3. **checks** that nothing is left in float: ``main`` may only call kernels, move int8 data
   (``reshape`` / ``permute_dims``) and dequantize its outputs. Anything else raises
   :class:`ONNXError` naming the ONNX node and operator.

Outputs are compared with onnxruntime in int8 LSBs: :func:`onnx_reference_int8` runs
onnxruntime (default session options) and returns the int8 tensors feeding the final
DequantizeLinear nodes (an int8 output as it is), :func:`quantize_outputs` turns the Relax
module's float outputs back into those int8 tensors (an exact inverse of the final
``dequantize``) and :func:`compare_int8` measures the difference. The Relax expressions of the
kernels (what ``--target llvm`` legalizes) still compute TFLite's fixed point except for the
lookup tables; the reference interpreter and the MCU kernels compute onnxruntime's.
"""

from __future__ import annotations

import os
import warnings
from typing import Sequence

import numpy as np
import onnx
import tvm
from google.protobuf.message import DecodeError
from tvm import relax
from tvm.relax.frontend.onnx import from_onnx as tvm_from_onnx

from ..errors import SerenityError
from ..passes.convert import is_op
from .relax_import import OperatorDescription, kernel_callee
from ..passes.fakequant import LowerFakeQuant, layout_change
from ..passes.ort_fakequant import OrtPatterns, int8_types
from .ort_arithmetic import ONNXRUNTIME

__all__ = ["ONNXError", "from_onnx", "onnx_reference_int8", "quantize_outputs",
           "compare_int8"]

_TO_NHWC, _TO_NCHW = (0, 2, 3, 1), (0, 3, 1, 2)   # permute_dims axes
_NHWC_AXIS = _TO_NCHW                              # NCHW axis a -> its NHWC position
_ELEMENTWISE_BINARY = ("relax.add", "relax.multiply", "relax.subtract", "relax.divide",
                       "relax.maximum", "relax.minimum")
_ELEMENTWISE_UNARY = ("relax.nn.relu", "relax.clip", "relax.sigmoid", "relax.tanh",
                      "relax.nn.leakyrelu", "relax.sin", "relax.cos", "relax.exp",
                      "relax.abs", "relax.negative")
_POOLS = ("relax.nn.avg_pool2d", "relax.nn.max_pool2d")
#: Relax operator -> the :class:`_ToNHWC` method that rewrites it.
_RULES = {"relax.quantize": "_quantize", "relax.dequantize": "_dequantize",
          "relax.nn.conv2d": "_conv2d", "relax.mean": "_mean", "relax.reshape": "_reshape",
          "relax.concat": "_concat", "relax.nn.softmax": "_softmax",
          **dict.fromkeys(_POOLS, "_pool"), **dict.fromkeys(_ELEMENTWISE_BINARY, "_binary"),
          **dict.fromkeys(_ELEMENTWISE_UNARY, "_unary")}
_DATA_MOVES = ("relax.reshape", "relax.permute_dims")
_SOFTMAX_SCALE, _SOFTMAX_ZERO_POINT = 1.0 / 256, -128      # TFLite's int8 SOFTMAX output

#: The ONNX operator types a Relax operator may come from (besides the one named like it).
_ONNX_OPS = {"conv2d": ("Conv",), "matmul": ("MatMul", "Gemm"), "avg_pool2d": ("AveragePool",),
             "max_pool2d": ("MaxPool",), "mean": ("GlobalAveragePool", "ReduceMean"),
             "concat": ("Concat",), "reshape": ("Flatten", "Reshape"), "clip": ("Clip",),
             "permute_dims": ("Transpose",), "maximum": ("Clip", "Max"),
             "minimum": ("Clip", "Min")}


class ONNXError(SerenityError):
    """An ONNX model that cannot be read or imported with integer semantics."""


# ================================================================================ loading
def _load(model: str | os.PathLike | onnx.ModelProto) -> tuple[onnx.ModelProto, str]:
    """(the validated model, how errors name it)."""
    if isinstance(model, onnx.ModelProto):
        where = f"ONNX model '{model.graph.name or '<unnamed>'}'"
    else:
        where = f"ONNX file '{os.fspath(model)}'"
        try:
            model = onnx.load(os.fspath(model))
        except OSError as e:
            raise ONNXError(f"cannot read {where}: {e.strerror}") from None
        except DecodeError:
            raise ONNXError(f"{where}: not an ONNX model (the protobuf does not parse)") from None
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as e:
        raise ONNXError(f"{where}: not a valid ONNX model: {str(e).splitlines()[0]}") from None
    return model, where


def _input_shapes(model: onnx.ModelProto, where: str) -> dict[str, list[int]]:
    """The static shape of each graph input: an unknown or symbolic first (batch) dimension
    is fixed to 1; any other one, or an input without a shape, raises :class:`ONNXError`."""
    weights = {t.name for t in model.graph.initializer}
    shapes = {}
    for value in model.graph.input:
        if value.name in weights:
            continue
        tensor = value.type.tensor_type
        if not tensor.HasField("shape"):
            raise ONNXError(f"{where}: input '{value.name}' has no shape (unknown rank): only "
                            "static shapes are supported")
        shape = []
        for k, dim in enumerate(tensor.shape.dim):
            if dim.HasField("dim_value") and dim.dim_value > 0:
                shape.append(dim.dim_value)
            elif k == 0:
                shape.append(1)                     # the batch: one sample per run
            else:
                raise ONNXError(f"{where}: input '{value.name}' dimension {k} is "
                                f"{repr(dim.dim_param) if dim.dim_param else 'unknown'}: only "
                                "the batch (first) dimension may be symbolic (it is fixed "
                                "to 1)")
        shapes[value.name] = shape
    return shapes


def _number(expr) -> float | None:
    if isinstance(expr, tvm.ir.Constant) and expr.value.numpy().size == 1:
        return float(expr.value.numpy().reshape(()))
    return None


def _shape(expr) -> list[int] | None:
    """The static shape of ``expr`` (None if it is not a tensor of known, constant shape)."""
    ty = expr.ty
    if not isinstance(ty, relax.TensorType) or not isinstance(ty.shape, relax.ShapeExpr) \
            or not all(isinstance(d, tvm.tirx.IntImm) for d in ty.shape.values):
        return None
    return [int(d) for d in ty.shape.values]


def _quantization(call) -> tuple[float, float, str] | None:
    """(scale, zero point, int dtype) of a per-tensor quantize / dequantize call."""
    scale, zero_point = _number(call.args[1]), _number(call.args[2])
    if scale is None or zero_point is None:
        return None
    dtype = call.attrs.out_dtype if is_op(call, "relax.quantize") else call.args[0].ty.dtype
    return scale, zero_point, dtype


# ====================================================================== NCHW -> NHWC
class _ToNHWC:
    """Rewrites one function (see step 1 of the module docstring). ``new`` maps each original
    variable to its new value; those in ``nhwc`` hold the NHWC form of an original NCHW value."""

    def __init__(self, func: relax.Function, where: str, tflite_softmax: bool = True):
        self.func, self.where = func, where
        self.tflite_softmax = tflite_softmax   # requantize a Softmax to TFLite's 1/256
        self.bindings = [b for block in func.body.blocks for b in block.bindings]
        self.orig = relax.analysis.get_var2val(func)
        self.users: dict[relax.Var, list[relax.Expr]] = {}
        for b in self.bindings:
            for v in relax.analysis.free_vars(b.value):
                self.users.setdefault(v, []).append(b.value)
        self.new: dict[relax.Expr, relax.Expr] = {p: p for p in func.params}
        self.nhwc: set[relax.Expr] = set()
        self.vectors: dict[relax.Var, relax.Expr] = {}     # (1, C, 1, 1) bias -> its (C,)
        self.values: dict[relax.Var, relax.Expr] = {}      # new variable -> its value
        self.cache: dict[tuple, relax.Expr] = {}
        self.bb = relax.BlockBuilder()

    def run(self) -> relax.Function:
        for b in self.bindings:
            if not isinstance(b, relax.VarBinding) \
                    or (isinstance(b.var.ty, relax.TensorType) and _shape(b.var) is None):
                raise ONNXError(f"{self.where}: '{b.var.name_hint}' has a dynamic shape: only "
                                "static shapes are supported (of the inputs' dimensions only "
                                "a symbolic batch, fixed to 1)")
        attrs = dict(self.func.attrs.items()) if self.func.attrs is not None else None
        with self.bb.function("main", list(self.func.params), attrs):
            with self.bb.dataflow():
                for b in self.bindings:
                    self.new[b.var], is_nhwc = self._convert(b.var, b.value)
                    if is_nhwc:
                        self.nhwc.add(b.var)
                out = self.bb.emit_output(self.as_nchw(self.func.body.body))
            self.bb.emit_func_output(out)
        return relax.analysis.remove_all_unused(self.bb.get()["main"])

    # ----------------------------------------------------------------------- helpers
    def emit(self, value: relax.Expr) -> relax.Expr:
        var = self.bb.emit(value)
        self.values[var] = value
        return var

    def _relayout(self, expr: relax.Expr, axes) -> relax.Expr:
        """The new value of ``expr`` permuted by ``axes``: the int8 tensor under a dequantize
        is moved (then dequantized again), a float value only if it has no such source."""
        key = (expr, axes)
        if key not in self.cache:
            new = self.new[expr]
            dq = self.values.get(new)
            if is_op(dq, "relax.dequantize") and _quantization(dq) is not None:
                moved = self._permuted_int8(dq.args[0], axes)
                self.cache[key] = self.emit(relax.op.dequantize(
                    moved, dq.args[1], dq.args[2], axis=-1, out_dtype=dq.attrs.out_dtype))
            else:
                self.cache[key] = self.emit(relax.op.permute_dims(new, axes))
        return self.cache[key]

    def _permuted_int8(self, q: relax.Expr, axes) -> relax.Expr:
        """int8 ``q`` permuted by ``axes``, merged with the int8 reshape / permute that made
        ``q`` (a graph input's Transpose or channel Reshape to NCHW, undone for NHWC): nothing
        if the two cancel, one reshape if they keep the order of the elements, one permute if
        both are permutes."""
        inner = self.values.get(q)
        shape = None if not is_op(inner, *_DATA_MOVES) else _shape(inner.args[0])
        if shape is None:
            return self.emit(relax.op.permute_dims(q, axes))
        source = inner.args[0]
        probe = np.transpose(layout_change(inner)(np.arange(int(np.prod(shape)))
                                                  .reshape(shape)), axes)
        if np.array_equal(probe.ravel(), np.arange(probe.size)):
            return source if list(probe.shape) == shape \
                else self.emit(relax.op.reshape(source, probe.shape))
        if is_op(inner, "relax.permute_dims"):
            first = [int(a) for a in inner.attrs.axes]
            return self.emit(relax.op.permute_dims(source, [first[a] for a in axes]))
        return self.emit(relax.op.permute_dims(q, axes))

    def as_nchw(self, expr: relax.Expr) -> relax.Expr:
        """``expr``'s new value in its original layout (tuples field by field)."""
        if isinstance(expr, relax.Tuple):
            return relax.Tuple([self.as_nchw(f) for f in expr.fields])
        if isinstance(expr, relax.TupleGetItem):
            return relax.TupleGetItem(self.as_nchw(expr.tuple_value), expr.index)
        if not isinstance(expr, relax.Var):
            return expr
        return self._relayout(expr, _TO_NCHW) if expr in self.nhwc else self.new[expr]

    def as_nhwc(self, expr: relax.Expr) -> relax.Expr:
        """The NHWC new value of an original 4-D NCHW tensor ``expr``."""
        if expr in self.nhwc:
            return self.new[expr]
        if isinstance(expr, relax.Var):
            return self._relayout(expr, _TO_NHWC)
        return relax.op.permute_dims(expr, _TO_NHWC)

    @staticmethod
    def _4d(expr) -> bool:
        shape = _shape(expr)
        return shape is not None and len(shape) == 4

    def _requantized(self, dq: relax.Expr, quant: tuple[float, float, str]) -> relax.Expr:
        """``dequantize(quantize(dq))`` at ``quant`` (a TFLite QUANTIZE int8 -> int8)."""
        scale, zero_point, dtype = (relax.const(quant[0], "float32"),
                                    relax.const(int(quant[1]), quant[2]), quant[2])
        q = self.emit(relax.op.quantize(dq, scale, zero_point, axis=-1, out_dtype=dtype))
        return self.emit(relax.op.dequantize(q, scale, zero_point, axis=-1))

    def _sole_quantize(self, var) -> tuple[float, float, str] | None:
        """The quantization of the only reader of ``var`` if it is a quantize, else None."""
        users = self.users.get(var, [])
        if len(users) == 1 and is_op(users[0], "relax.quantize"):
            return _quantization(users[0])
        return None

    # ----------------------------------------------------------------------- operators
    def _convert(self, var, value) -> tuple[relax.Expr, bool]:
        """(new value of binding ``var = value``, whether it is NHWC): the operator's rule, or
        ``value`` on its arguments' original layouts when it has none or the rule declines."""
        if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op):
            rule = _RULES.get(value.op.name)
            result = None if rule is None else getattr(self, rule)(var, value)
            if result is not None:
                return result
            return self.emit(relax.Call(value.op, [self.as_nchw(a) for a in value.args],
                                        value.attrs, value.ty_args)), False
        return self.emit(self.as_nchw(value)), False

    def _same_op(self, call, args) -> relax.Expr:
        return self.emit(relax.Call(call.op, args, call.attrs, call.ty_args))

    def _quantize(self, var, call):
        x = call.args[0]
        moved = self.values.get(self.new.get(x))
        if is_op(moved, *_DATA_MOVES):
            dq = self.values.get(moved.args[0])
            if is_op(dq, "relax.dequantize") and _quantization(dq) is not None \
                    and _quantization(dq) == _quantization(call):   # an int8 reshape
                return self.emit(relax.Call(moved.op, [dq.args[0], *moved.args[1:]],
                                            moved.attrs, moved.ty_args)), x in self.nhwc
        return self._quantization_op(call, x)

    def _dequantize(self, var, call):
        data, scale, zero_point = call.args
        if isinstance(data, tvm.ir.Constant) and data.ty.dtype == "int32" \
                and isinstance(zero_point, tvm.ir.Constant) \
                and not np.any(zero_point.value.numpy()):      # a bias: one zero point 0
            return self.emit(relax.op.dequantize(data, scale, relax.const(0, "int32"),
                                                 axis=int(call.attrs.axis),
                                                 out_dtype=call.attrs.out_dtype)), False
        return self._quantization_op(call, data)

    def _quantization_op(self, call, x):
        if x not in self.nhwc:
            return None
        make = relax.op.quantize if is_op(call, "relax.quantize") else relax.op.dequantize
        axis = _NHWC_AXIS[int(call.attrs.axis) % 4]
        return self.emit(make(self.new[x], *call.args[1:], axis=axis,
                              out_dtype=call.attrs.out_dtype)), True

    def _conv2d(self, var, call):
        a = call.attrs
        w = self.orig.get(call.args[1])
        if a.data_layout != "NCHW" or a.kernel_layout != "OIHW" or a.out_layout != "NCHW" \
                or not is_op(w, "relax.dequantize") \
                or not all(isinstance(v, tvm.ir.Constant) for v in w.args):
            return None
        q = w.args[0].value.numpy()
        oihw_to_hwio = (2, 3, 1, 0)
        hwio = relax.const(np.ascontiguousarray(q.transpose(oihw_to_hwio)), str(q.dtype))
        weights = self.emit(relax.op.dequantize(
            hwio, w.args[1], w.args[2], axis=oihw_to_hwio.index(int(w.attrs.axis) % 4),
            out_dtype=w.attrs.out_dtype))
        return self.emit(relax.op.nn.conv2d(
            self.as_nhwc(call.args[0]), weights, strides=a.strides, padding=a.padding,
            dilation=a.dilation, groups=a.groups, data_layout="NHWC", kernel_layout="HWIO",
            out_layout="NHWC")), True

    def _pool(self, var, call):
        if call.attrs.layout != "NCHW" or call.attrs.out_layout != "NCHW":
            return None
        a = call.attrs
        make = relax.op.nn.avg_pool2d if is_op(call, "relax.nn.avg_pool2d") \
            else relax.op.nn.max_pool2d
        return self.emit(make(self.as_nhwc(call.args[0]), a.pool_size, a.strides, a.padding,
                              a.dilation, a.ceil_mode, a.count_include_pad, layout="NHWC",
                              out_layout="NHWC")), True

    def _mean(self, var, call):
        x = call.args[0]
        if x not in self.nhwc or call.attrs.axis is None:
            return None
        axes = sorted({int(v) % 4 for v in call.attrs.axis})
        keep = bool(call.attrs.keepdims)
        if not keep and not {2, 3} <= set(axes):      # the kept axes would change order
            return None
        new = self.emit(relax.op.mean(self.new[x], [_NHWC_AXIS[v] for v in axes], keep))
        return new, keep

    def _reshape(self, var, call):
        x, shape_in, shape_out = call.args[0], _shape(call.args[0]), _shape(call)
        if shape_in is not None and len(shape_in) == 1 and shape_out is not None \
                and len(shape_out) == 4 and shape_out[1] == shape_in[0] \
                and int(np.prod(shape_out)) == shape_in[0]:
            self.vectors[var] = self.new[x]            # a per-channel vector, e.g. a bias
            return None
        if x in self.nhwc and shape_in[2:] == [1, 1]:  # NHWC and NCHW orders agree
            return self.emit(relax.Call(call.op, [self.new[x], *call.args[1:]], call.attrs,
                                        call.ty_args)), False
        return None

    def _binary(self, var, call):
        args = call.args
        if not any(a in self.nhwc for a in args):
            return None
        new = []
        for a in args:
            shape = _shape(a)
            if a in self.vectors:
                new.append(self.vectors[a])
            elif shape is not None and len(shape) == 4:
                new.append(self.as_nhwc(a))
            elif shape is not None and int(np.prod(shape, dtype=np.int64)) == 1:
                new.append(self.as_nchw(a))
            else:
                return None
        return self._same_op(call, new), True

    def _unary(self, var, call):
        x = call.args[0]
        if x not in self.nhwc:
            return None
        return self._same_op(call, [self.new[x], *call.args[1:]]), True

    def _concat(self, var, call):
        fields = self.orig.get(call.args[0], call.args[0])
        if not isinstance(fields, relax.Tuple):
            return None
        nhwc = any(f in self.nhwc for f in fields.fields) \
            and all(self._4d(f) for f in fields.fields)
        news = [self.as_nhwc(f) if nhwc else self.as_nchw(f) for f in fields.fields]
        out = self._sole_quantize(var)
        if out is not None:
            news = [self._match_quantization(f, out) for f in news]
        axis = int(call.attrs.axis)
        axis = _NHWC_AXIS[axis % 4] if nhwc else axis
        return self.emit(relax.op.concat(news, axis=axis)), nhwc

    def _match_quantization(self, new: relax.Expr, out) -> relax.Expr:
        """``new`` requantized to ``out`` if it is a dequantize at another quantization."""
        dq = self.values.get(new)
        if is_op(dq, "relax.dequantize") and _quantization(dq) not in (None, out):
            return self._requantized(new, out)
        return new

    def _softmax(self, var, call):
        out = self._sole_quantize(var)
        if not self.tflite_softmax or out is None or out[2] != "int8" \
                or (np.float32(out[0]), out[1]) == (np.float32(_SOFTMAX_SCALE),
                                                    _SOFTMAX_ZERO_POINT):
            return None
        softmax = self.emit(relax.Call(call.op, [self.as_nchw(call.args[0])], call.attrs))
        return self._requantized(softmax, (_SOFTMAX_SCALE, _SOFTMAX_ZERO_POINT, "int8")), False


# ====================================================================== the check
def _float_ops(mod: tvm.IRModule, func: relax.Function) -> list[str]:
    """The Relax operators of ``func`` other than described integer kernel calls, int8 data
    movement, tuples and the dequantize of an output."""
    var2val = relax.analysis.get_var2val(func)

    def source(expr):                       # through ``y = x`` aliases
        while isinstance(var2val.get(expr), relax.Var):
            expr = var2val[expr]
        return expr

    result = source(func.body.body)
    fields = var2val.get(result)
    outputs = {source(f) for f in (fields.fields if isinstance(fields, relax.Tuple)
                                   else [result])}
    left = []
    for block in func.body.blocks:
        for b in block.bindings:
            v = b.value
            kernel = kernel_callee(v)[0]
            if isinstance(v, (relax.Tuple, relax.TupleGetItem, relax.Var)) or (
                    kernel is not None and OperatorDescription.of(mod[kernel]) is not None):
                continue
            if is_op(v, *_DATA_MOVES) and v.args[0].ty.dtype == "int8":
                continue
            if is_op(v, "relax.dequantize") and b.var in outputs:
                continue
            left.append(_op_name(v))
    return left


def _op_name(value) -> str:
    """How errors name a Relax operator (a ``call_tir`` by its callee, e.g. TVM's Clip)."""
    if is_op(value, "relax.call_tir"):
        return f"call_tir {value.args[0].name_hint}"
    return value.op.name.removeprefix("relax.") if isinstance(value, relax.Call) \
        else type(value).__name__


def _culprits(model: onnx.ModelProto, op: str) -> list[str]:
    """The ONNX nodes a Relax operator ``op`` (e.g. "nn.leakyrelu") may come from."""
    short = op.split()[-1].split(".")[-1]
    types = {t.lower() for t in _ONNX_OPS.get(short, ())} | {short.replace("_", "").lower()}
    return [f"'{n.name or n.output[0]}' ({n.op_type})" for n in model.graph.node
            if n.op_type.lower() in types]


def _check(model: onnx.ModelProto, where: str, mod: tvm.IRModule, lower: LowerFakeQuant):
    """Raise the error of the first operator no kernel computes (LowerFakeQuant's
    ``refused``: the reason, naming its binding), else :class:`ONNXError` for the first
    operator of ``mod``'s ``main`` left in float, preferring one LowerFakeQuant found no kernel
    for, then any but a (de)quantize (which only follow)."""
    for error in lower.refused.values():
        raise error
    left = _float_ops(mod, mod["main"])
    if not left:
        return
    op = next((o for o in left if o.split()[0] in lower.unlowered),
              next((o for o in left if o not in ("quantize", "dequantize")), left[0]))
    nodes = _culprits(model, op)
    node = f"node {nodes[0]}" if len(nodes) == 1 else \
        f"one of the nodes {', '.join(nodes)}" if 1 < len(nodes) <= 4 else "a node"
    why = ("no integer kernel matches its quantized form" if op.split()[0] in lower.unlowered
           else "it is not between a DequantizeLinear and a QuantizeLinear")
    raise ONNXError(f"{where}: {node} would stay in float (Relax '{op}'): {why}; "
                    "nothing is silently left in float")


# ====================================================================== public API
ARITHMETICS = (ONNXRUNTIME, "tflite")


def from_onnx(model: str | os.PathLike | onnx.ModelProto,
              arithmetic: str = ONNXRUNTIME) -> tvm.IRModule:
    """Import an int8 QDQ ONNX model (a path or a ``ModelProto``) as a Relax module whose
    operators are integer kernels (see the module docstring) computing onnxruntime's
    arithmetic (``arithmetic="onnxruntime"``, :mod:`.ort_arithmetic`) or TFLite's
    (``"tflite"``). ``main`` takes and returns the model's tensors (float, or int8 where the
    graph's inputs / outputs are) in its layouts, a symbolic batch as 1. Raises
    :class:`ONNXError` for a file that is not a valid ONNX model, for a symbolic dimension
    other than an input's batch and for any operator that would stay in float."""
    if arithmetic not in ARITHMETICS:
        raise ValueError(f"arithmetic must be one of {ARITHMETICS}, got {arithmetic!r}")
    model, where = _load(model)
    if not any(n.op_type == "QuantizeLinear" for n in model.graph.node):
        raise ONNXError(f"{where}: no QuantizeLinear node, not a QDQ-quantized model")
    shapes = _input_shapes(model, where)
    try:
        mod = tvm_from_onnx(model, shape_dict=shapes, keep_params_in_input=False)
    except Exception as e:           # TVM's frontend raises assorted types; one line for users
        first = (str(e).strip().splitlines() or [""])[0]
        raise ONNXError(f"{where}: TVM's ONNX frontend cannot import it: "
                        f"{type(e).__name__}: {first}") from None
    converter = _ToNHWC(mod["main"], where, tflite_softmax=arithmetic != ONNXRUNTIME)
    types = int8_types(mod["main"])                 # onnxruntime's, on the imported graph
    mod["main"] = converter.run()
    lower = LowerFakeQuant() if arithmetic != ONNXRUNTIME else LowerFakeQuant(OrtPatterns(
        {converter.new[v]: t for v, t in types.items() if v in converter.new}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")             # what stays in float is an error below
        mod = lower(mod)
    _check(model, where, mod, lower)
    return mod


_INTEGER_TYPES = (onnx.TensorProto.INT8, onnx.TensorProto.UINT8)


def _output_sources(model: onnx.ModelProto, where: str
                    ) -> list[tuple[str, onnx.NodeProto | None]]:
    """Per graph output: (the int8 tensor behind it, the DequantizeLinear producing the output
    from it, or None for an int8 output, e.g. a tf2onnx model's QuantizeLinear result)."""
    producers = {o: n for n in model.graph.node for o in n.output}
    sources = []
    for out in model.graph.output:
        node = producers.get(out.name)
        if out.type.tensor_type.elem_type in _INTEGER_TYPES:
            sources.append((out.name, None))
        elif node is not None and node.op_type == "DequantizeLinear":
            sources.append((node.input[0], node))
        else:
            raise ONNXError(f"{where}: output '{out.name}' is neither int8 nor produced by a "
                            "DequantizeLinear node")
    return sources


def onnx_reference_int8(model: str | os.PathLike | onnx.ModelProto,
                        inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """onnxruntime's int8 outputs of a QDQ model: the tensors feeding the DequantizeLinear
    nodes that produce its outputs (an int8 output itself), for ``inputs`` in graph-input
    order. The model runs as it is and its float outputs are turned back into those tensors
    (:func:`quantize_outputs`, exact): making the int8 tensors graph outputs instead would
    change what onnxruntime runs (a Q->DQ pair whose tensor is a graph output is not fused, so
    the last operator would run in float32 between DequantizeLinear and QuantizeLinear)."""
    import onnxruntime as ort

    model, where = _load(model)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    if len(inputs) != len(session.get_inputs()):
        raise ValueError(f"{where}: {len(session.get_inputs())} inputs, {len(inputs)} given")
    feeds = {i.name: np.asarray(a) for i, a in zip(session.get_inputs(), inputs)}
    return quantize_outputs(model, session.run(None, feeds))


def quantize_outputs(model: str | os.PathLike | onnx.ModelProto,
                     outputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The int8 tensors behind ``outputs`` of the model: a float output's the exact inverse of
    its final DequantizeLinear (``round(y / scale) + zero_point``), an int8 output as it is."""
    model, where = _load(model)
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    result = []
    for (_, node), y in zip(_output_sources(model, where), outputs):
        if node is None:
            result.append(np.asarray(y))
            continue
        if not all(n in inits for n in node.input[1:3]):
            raise ONNXError(f"{where}: the scale / zero point of '{node.output[0]}' are not "
                            "initializers")
        scale, zero_point = (inits[n] for n in node.input[1:3])
        q = np.round(np.asarray(y, np.float64) / float(scale)) + int(zero_point)
        result.append(q.astype(zero_point.dtype))
    return result


def compare_int8(a, b) -> tuple[int, float]:
    """(largest difference in LSBs, fraction of values that differ) between two int8 tensors
    or two equally long sequences of them."""
    flat = [np.concatenate([np.ravel(np.asarray(t, np.int32)) for t in
                            ([x] if isinstance(x, np.ndarray) else x)]) for x in (a, b)]
    if flat[0].shape != flat[1].shape:
        raise ValueError(f"compare_int8: {flat[0].size} values against {flat[1].size}")
    diff = np.abs(flat[0] - flat[1])
    return int(diff.max(initial=0)), float(np.count_nonzero(diff)) / max(diff.size, 1)
