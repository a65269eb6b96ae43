"""The QDQ patterns of an ONNX model lowered with onnxruntime's arithmetic: which onnxruntime
kernel runs each ``DequantizeLinear -> op -> QuantizeLinear`` on x86, and its description.

onnxruntime does not run a QDQ model as written (docs/onnxruntime_arithmetic.md section 0).
On x86 (``QDQIsInt8Allowed()`` is false there) its level-2 rewrites first turn a
``QuantizeLinear -> DequantizeLinear`` pair from int8 into uint8 when the Q has exactly one
consumer, a DQ, that DQ has one consumer (``EnsureUniqueDQForNodeUnit`` gives every consumer a
DQ of its own) and neither is a graph output (``QDQS8ToU8Transformer``); every other int8
tensor stays int8 (a tensor with fan-out, a graph output, an int8 graph input and what moves
it). Then each ``DQ -> op -> Q`` whose element types agree becomes an integer kernel
(``QDQSelectorActionTransformer``): Conv and MatMul in uint8 only (``int8_allowed`` is false),
Gemm when its input has the output's type, Add / Mul when both inputs have it,
AveragePool, GlobalAveragePool, Softmax, Sigmoid and Concat when all inputs have it; a Relu or
Clip before the Q that the Q's range makes redundant is dropped. Everything else runs as the
float operator between its DQs and its Q. :func:`int8_types` states the first step on the NCHW
Relax function TVM's ONNX frontend imports (one binding per ONNX node), :func:`fused` the
second.

:class:`OrtPatterns` is the ``patterns`` hook of :class:`~.fakequant.LowerFakeQuant` for an
ONNX import: it matches what the TFLite-arithmetic matcher matches (and the patterns only
onnxruntime has: softmax, sigmoid and average pools of any output quantization, average pools
counting their padding, clips between two quantizations) and describes each kernel as the
TFLite builtin it resembles with the options of :mod:`tvm_serenity.frontend.ort_arithmetic`
(``arithmetic``, ``ort_kernel``, ``ort_dtype``), the specification the reference interpreter
follows; :func:`~tvm_serenity.codegen.kernel_call.kernel_call` gives each such operator the
kernel family's onnxruntime variant, which llvm and the microcontroller C run alike.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np
from tvm import relax

from ..frontend import ort_arithmetic as ort
from ..frontend import reference as ref
from ..frontend import relax_import as ri
from .convert import is_op
from .fakequant import _FULL_RANGE, Kernel, _entry, _Matcher, _number, _Root, _shape

__all__ = ["int8_types", "fused", "OrtPatterns"]

_DATA_MOVES = ("relax.reshape", "relax.permute_dims")
UINT8, INT8 = "uint8", "int8"


# ============================================================================ graph types
def int8_types(func: relax.Function) -> dict[relax.Var, str]:
    """The element type onnxruntime (x86) gives each int8 activation of ``func``, the main
    function TVM's ONNX frontend imports: ``"uint8"`` for a ``quantize`` read by exactly one
    ``dequantize`` (of the same zero point) that has exactly one reader, neither returned;
    ``"int8"`` for any other ``quantize``, an int8 parameter and the int8 ``reshape`` /
    ``permute_dims`` of one (it keeps its source's type)."""
    var2val = relax.analysis.get_var2val(func)
    uses: dict[relax.Var, int] = {}          # readers, the result counting as one
    bindings = [b for block in func.body.blocks for b in block.bindings]
    for b in bindings:
        for v in relax.analysis.free_vars(b.value):
            uses[v] = uses.get(v, 0) + 1
    for v in relax.analysis.free_vars(func.body.body):     # the result (a tuple is bound)
        uses[v] = uses.get(v, 0) + 1
    readers: dict[relax.Var, list[relax.Var]] = {}
    for b in bindings:
        for v in relax.analysis.free_vars(b.value):
            readers.setdefault(v, []).append(b.var)
    types = {p: INT8 for p in func.params if _dtype(p) == "int8"}
    for b in bindings:
        value = b.value
        if is_op(value, "relax.quantize") and value.attrs.out_dtype == "int8":
            reader = readers.get(b.var, [])
            dq = var2val.get(reader[0]) if len(reader) == 1 and uses.get(b.var) == 1 else None
            converted = is_op(dq, "relax.dequantize") \
                and _number(dq.args[2]) == _number(value.args[2]) \
                and uses.get(reader[0]) == 1
            types[b.var] = UINT8 if converted else INT8
        elif is_op(value, *_DATA_MOVES) and value.args[0] in types:
            types[b.var] = types[value.args[0]]
    return types


def _dtype(var) -> str | None:
    ty = var.ty
    return str(ty.dtype.dtype) if isinstance(ty, relax.TensorType) else None


#: TFLite-named kernel kinds of LowerFakeQuant -> (onnxruntime's integer kernel, its float
#: operator, whether the integer kernel needs uint8).
_KERNELS = {"conv2d": ("QLinearConv", "Conv", True),
            "fully_connected": ("QGemm", "Gemm", False),
            "matmul": ("QLinearMatMul", "MatMul", True),
            "add": ("QLinearAdd", "Add", False), "mul": ("QLinearMul", "Mul", False),
            "average_pool2d": ("QLinearAveragePool", "AveragePool", False),
            "mean": ("QLinearGlobalAveragePool", "GlobalAveragePool", False),
            "softmax": ("QLinearSoftmax", "Softmax", False),
            "logistic": ("QLinearSigmoid", "Sigmoid", False),
            "max_pool2d": ("MaxPool", "MaxPool", False)}


def fused(kind: str, input_types: list[str | None], output_type: str | None) -> bool:
    """Whether onnxruntime's selectors fuse a ``DQ -> op -> Q`` of LowerFakeQuant kind
    ``kind`` whose activation inputs and output have these element types (module
    docstring): all equal, and uint8 where the integer kernel needs it."""
    if kind not in _KERNELS or output_type is None \
            or any(t != output_type for t in input_types):
        return False
    return output_type == UINT8 or not _KERNELS[kind][2]


# ============================================================================== patterns
Describe = Callable[[relax.Var], "ri.OperatorDescription | None"]


def _with_options(describe: Describe | None, options: dict,
                  bias_scales: np.ndarray | None = None) -> Describe | None:
    """``describe`` with onnxruntime's options added to the operator's and, for a fully
    connected operator, its bias quantized as the model's DequantizeLinear says (a float Gemm
    adds the dequantized bias)."""
    if describe is None:
        return None

    def ort_describe(var: relax.Var) -> ri.OperatorDescription | None:
        desc = describe(var)
        if desc is None:
            return None
        inputs = list(desc.inputs)
        if bias_scales is not None and len(inputs) > 2 and inputs[2] is not None:
            inputs[2] = {**inputs[2], "quant": ri.quant_description(bias_scales)}
        return dataclasses.replace(desc, inputs=tuple(inputs), options={
            **desc.options, ort.ARITHMETIC: ort.ONNXRUNTIME, **options})
    return ort_describe


def _bias_scales(matcher: _Matcher, x) -> np.ndarray | None:
    """The scales of the dequantized int32 bias added in ``x`` (``matmul + bias``)."""
    if not is_op(x, "relax.add"):
        return None
    for arg in x.args:
        dq = matcher.value(arg)
        if is_op(dq, "relax.dequantize") and matcher.bias(arg) is not None:
            scales = matcher.integers(dq.args[1])
            return None if scales is None else np.asarray(scales, np.float32).reshape(-1)
    return None


class OrtPatterns:
    """The ``patterns`` hook of :class:`~.fakequant.LowerFakeQuant` for an ONNX import
    (module docstring); ``types`` maps the int8 variables of ``main`` to their onnxruntime
    element type (:func:`int8_types`, carried through the import's layout change)."""

    def __init__(self, types: dict[relax.Var, str]):
        self.types = types

    def dtype(self, matcher: _Matcher, var) -> str | None:
        """The onnxruntime type of an int8 value, looking through int8 data movement."""
        while var not in self.types:
            value = matcher.value(var)
            if not is_op(value, *_DATA_MOVES):
                return None
            var = value.args[0]
        return self.types[var]

    def __call__(self, matcher: _Matcher, root: _Root, var: relax.Var) -> Kernel | None:
        if root.clamp != _FULL_RANGE or root.scale is None:
            return None          # an int8 clip after the quantize: not an ONNX form
        x = matcher.value(root.float_input)
        kernel = self._own(matcher, x, root) or matcher.kernel(root)
        if kernel is None:
            return None
        kind, inputs, describe = kernel
        if kind == "concatenation":
            return kernel                          # data movement (tables before it)
        options = self._options(matcher, kind, inputs, var, x, root)
        if options is None:
            return None
        return kind, inputs, _with_options(describe, options, _bias_scales(matcher, x)
                                           if kind == "fully_connected" else None)

    def _options(self, matcher: _Matcher, kind: str, inputs, var, x, root: _Root
                 ) -> dict | None:
        """The onnxruntime options of a matched kernel (None: not an onnxruntime form)."""
        if kind in ("quantize", "quantize_int8", "relu", "relu6", "relu_n1_to_1",
                    "hard_swish"):
            return {ort.KERNEL: "QuantizeLinear" if kind == "quantize" else "Lookup"}
        if kind == "fully_connected" and not is_op(x, "relax.add"):
            kind = "matmul"                       # no bias: an ONNX MatMul, not a Gemm
        if kind == "mean" and (len(_shape(x)) != 4 or not bool(x.attrs.keepdims) or sorted(
                int(a) % 4 for a in x.attrs.axis) not in ([1, 2], [2, 3])):
            return None                           # onnxruntime's is a GlobalAveragePool
        if kind not in _KERNELS:
            return None
        out_type = self.dtype(matcher, var)
        in_types = [self.dtype(matcher, v) for v in inputs]
        redundant = root.activation is None or ort.activation_bounds(
            root.activation, root.scale, root.zero_point) == _FULL_RANGE
        integer, floating, _ = _KERNELS[kind]
        options = {ort.KERNEL: integer if redundant and fused(kind, in_types, out_type)
                   else floating}
        if options[ort.KERNEL] in ("QLinearAdd", "QLinearSoftmax", "QLinearAveragePool"):
            options[ort.DTYPE] = out_type
        if kind == "average_pool2d":
            options["count_include_pad"] = bool(x.attrs.count_include_pad)
        return options

    # -------------------------------------------------- patterns only onnxruntime computes
    def _own(self, matcher: _Matcher, x, root: _Root) -> Kernel | None:
        """Softmax, Sigmoid and average pools of any output quantization, average pools
        counting padding, Relu / Clip / QuantizeLinear between two quantizations (tables)."""
        for match in (self._softmax, self._logistic, self._average_pool, self._table):
            kernel = match(matcher, x, root)
            if kernel is not None:
                return kernel
        return None

    def _softmax(self, matcher: _Matcher, x, root: _Root) -> Kernel | None:
        q = matcher.dequantized(x.args[0]) if is_op(x, "relax.nn.softmax") else None
        shape = _shape(x) if q is not None else None
        if q is None or root.activation is not None \
                or int(x.attrs.axis) % len(shape) != len(shape) - 1 or shape[-1] >= 1 << 12:
            return None
        try:
            ref.softmax_params(1.0, q.scale)
        except ref.ReferenceError:
            return None
        return "softmax", [q.value], self._describe(
            "SOFTMAX", {"beta": 1.0}, [_entry(q.value, q.scale, q.zero_point, arg=0)], root)

    def _logistic(self, matcher: _Matcher, x, root: _Root) -> Kernel | None:
        q = matcher.dequantized(x.args[0]) if is_op(x, "relax.sigmoid") else None
        if q is None or root.activation is not None:
            return None
        return "logistic", [q.value], self._describe(
            "LOGISTIC", {}, [_entry(q.value, q.scale, q.zero_point, arg=0)], root)

    def _average_pool(self, matcher: _Matcher, x, root: _Root) -> Kernel | None:
        q = matcher.dequantized(x.args[0]) if is_op(x, "relax.nn.avg_pool2d") else None
        if q is None:
            return None
        a = x.attrs
        if a.layout != "NHWC" or a.out_layout != "NHWC" or bool(a.ceil_mode) \
                or any(int(d) != 1 for d in a.dilation):
            return None
        top, left, bottom, right = (int(p) for p in a.padding)
        params = ref.PoolParams(tuple(int(k) for k in a.pool_size),
                                tuple(int(s) for s in a.strides), (top, bottom, left, right))
        padding = None
        for name in ("VALID", "SAME"):
            if params.padding == ref.same_padding(name, _shape(q.value)[1:3], params.kernel,
                                                  params.stride):
                padding = name
        if padding is None or root.activation is not None:
            return None
        options = {"padding": padding, "stride_h": params.stride[0],
                   "stride_w": params.stride[1], "filter_height": params.kernel[0],
                   "filter_width": params.kernel[1], "fused_activation_function": "NONE"}
        return "average_pool2d", [q.value], self._describe(
            "AVERAGE_POOL_2D", options, [_entry(q.value, q.scale, q.zero_point, arg=0)], root)

    def _table(self, matcher: _Matcher, x, root: _Root) -> Kernel | None:
        """A dequantized tensor, possibly through a float Relu / Clip(0, 6) / Clip(-1, 1)
        (``root.activation``), quantized again: one lookup table."""
        q = matcher.dequantized(x)
        if q is None:
            return None
        op = root.activation or "QUANTIZE"
        kind = "quantize_int8" if op == "QUANTIZE" else op.lower()
        return kind, [q.value], self._describe(
            op, {}, [_entry(q.value, q.scale, q.zero_point, arg=0)],
            dataclasses.replace(root, activation=None))

    @staticmethod
    def _describe(op: str, options: dict, inputs: list, root: _Root) -> Describe:
        """An operator of these inputs whose output is quantized as ``root`` says (a float
        activation before the quantize, if any, as the fused activation)."""
        if root.activation is not None:
            options = {**options, "fused_activation_function": root.activation}

        def describe(var: relax.Var) -> ri.OperatorDescription:
            out = _entry(var, root.scale, root.zero_point)
            return ri.OperatorDescription(op, options, tuple(inputs), (out,))
        return describe
