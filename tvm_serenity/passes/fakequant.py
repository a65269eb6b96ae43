"""``LowerFakeQuant``: rewrite fake-quantized operators into integer kernels with TFLite's
fixed-point arithmetic, so activations stay int8.

TVM's TFLite frontend (``relax.frontend.tflite.from_tflite``) imports an int8 model as float
arithmetic between ``R.dequantize`` and ``R.quantize``: each TFLite operator reads as
``quantize(op(dequantize(x), ...))``, a fused activation as ``nn.relu`` / ``clip`` before the
``quantize`` and/or an int8 ``clip`` after it. Its float rounding is not TFLite's (tvm.md: 74% of a
RandWire cell's outputs differ).

What it changes: in every Relax function (not inside kernels), each *quantized operator* — an
``R.quantize`` to int8 with one scale and zero point, together with the int8 ``R.clip`` reading it
when that is its only reader — whose float input has one of the forms below becomes the TFLite
operator it is, described (:class:`~tvm_serenity.frontend.relax_import.OperatorDescription`) and
called through :func:`~tvm_serenity.frontend.relax_import.operator_call`: the same integer
kernel the int8 importer and the microcontroller C use, bit-exact with TFLite Micro. The binding
keeps its variable; float bindings nobody reads any more are removed.

With ``x``, ``a``, ``b`` dequantized int8 tensors (one scale and zero point each), ``W`` a
dequantized int8 constant (per-channel scales, zero point 0, possibly reshaped or transposed) and
``B`` a dequantized int32 constant (zero point 0):

=====================================================  ===========================================
float input of the ``quantize``                        TFLite operator
=====================================================  ===========================================
``conv2d(x, W)`` [``+ B``]  (NHWC, HWIO or HWOI)       CONV_2D / DEPTHWISE_CONV_2D
``matmul(x, W)`` [``+ B``]                             FULLY_CONNECTED
``add(a, b)`` / ``multiply(a, b)``                     ADD / MUL
``nn.avg_pool2d(x)`` / ``nn.max_pool2d(x)`` (NHWC)     AVERAGE_POOL_2D / MAX_POOL_2D
``mean(x, axes)``                                      MEAN
``concat((a, b, ...))``                                CONCATENATION
``nn.softmax(x, axis=-1)``                             SOFTMAX
``sigmoid(x)``                                         LOGISTIC
``x * clip(x + 3, 0, 6) / 6``                          HARD_SWISH
``nn.relu(x)`` / ``x``                                 RELU / RELU6 / QUANTIZE (int8 -> int8)
a function parameter                                   QUANTIZE (float32 -> int8)
=====================================================  ===========================================

Padding that is neither SAME nor VALID is the description's PAD before a VALID window (a
PADV2 of -128 before a MAX_POOL_2D).
A ``nn.relu``, ``clip(0, 6)`` or ``clip(-1, 1)`` right before the ``quantize`` narrows the clamp as
TFLite's fused RELU / RELU6 / RELU_N1_TO_1 does, and so does the int8 ``clip`` after it; alone on
``x`` they are TFLite's RELU (which requantizes) and RELU6 / RELU_N1_TO_1 (which only clamp, so
the quantization must not change). Pools, concatenation, LOGISTIC and SOFTMAX take the
quantization TFLite requires; MEAN, SOFTMAX and concatenation no fused activation. The frontend
writes an int8 AVERAGE_POOL_2D as integer ops, ``astype(avg_pool2d(astype(x, int32)), int8)``,
whose division truncates where TFLite rounds: that form becomes ``average_pool_int8`` too (its
int8 MAX_POOL_2D is exact already and stays).

``LowerFakeQuant(patterns)`` lowers with another arithmetic instead: ``patterns(matcher,
operator, variable)`` gives each quantized operator's kernel (an ONNX import's,
:class:`~tvm_serenity.passes.ort_fakequant.OrtPatterns`, describes onnxruntime's arithmetic).

Anything else is never rewritten on a guess: an operator TFLite's operator set cannot state
(e.g. a clamp no fused activation gives, a pool with padding its kernel cannot apply) stays in
float, and so does any other float computation; its final ``quantize`` only gets TFLite's
rounding (a float32 QUANTIZE), and a ``warnings.warn`` names, per function, the operators left
as imported; so does an operator whose kernel cannot be built (e.g. onnxruntime's arithmetic
of a broadcasting ADD): the error saying why is kept. Run it before ``LegalizeOps`` (the
pipeline has it first in ``BEFORE_LEGALIZE``). What it did is kept on the instance:
``.lowered`` (kernel kind -> count), ``.unlowered`` (operator -> count) and ``.refused``
(binding -> the error), which a microcontroller build raises, naming the binding.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections import Counter
from typing import Callable

import numpy as np
import tvm
from tvm import relax

from ..errors import SerenityError
from ..frontend import reference as ref
from ..frontend import relax_import as ri
from ..frontend.relax_import import INHERIT
from .convert import is_op, relax_functions
from .pipeline import BEFORE_LEGALIZE

__all__ = ["LowerFakeQuant", "layout_change"]

# float activation before the quantize -> TFLite fused activation
_FLOAT_CLIPS = {(0.0, 6.0): "RELU6", (-1.0, 1.0): "RELU_N1_TO_1"}
_FULL_RANGE = (ref.INT8_MIN, ref.INT8_MAX)


def _number(expr) -> float | None:
    """The value of a scalar constant (a 0-d tensor or a prim value), else None."""
    if isinstance(expr, tvm.ir.Constant) and isinstance(expr.ty, relax.TensorType) \
            and expr.ty.ndim == 0:
        return float(expr.value.numpy())
    if isinstance(expr, (tvm.tirx.IntImm, tvm.tirx.FloatImm)):
        return float(expr.value)
    return None


def _shape(expr) -> list[int]:
    return [int(d) for d in expr.ty.shape.values]


@dataclasses.dataclass(frozen=True)
class _Quant:
    """A dequantized int8 tensor: the int8 value and its (per-tensor) quantization."""

    value: relax.Expr
    scale: float
    zero_point: int

    def same(self, other: _Quant | None) -> bool:
        """Whether ``other`` dequantizes the same int8 value the same way."""
        return other is not None and other.value.same_as(self.value) \
            and (other.scale, other.zero_point) == (self.scale, self.zero_point)


@dataclasses.dataclass(frozen=True)
class _Weights:
    """A dequantized constant: integer values, the float32 scale of each value, and whether the
    scales were given per channel (FULLY_CONNECTED's requantization depends on it)."""

    values: np.ndarray
    scales: np.ndarray
    per_channel: bool

    def channel_scales(self, axis: int) -> np.ndarray | None:
        """One scale per index of ``axis``, or None if they vary along another axis."""
        moved = np.moveaxis(self.scales, axis, -1).reshape(-1, self.scales.shape[axis])
        return moved[0] if np.all(moved == moved[0]) else None


@dataclasses.dataclass(frozen=True)
class _Root:
    """One quantized operator, ending in an int8 binding."""

    computed: relax.Expr         # what the int8 result is computed from: the quantize's input,
    #                              or the pool of an integer average pool
    float_input: relax.Expr      # ``computed`` without the float activation, if any
    scale: float | None          # the output quantization (None: integer average pool)
    zero_point: int | None
    clamp: tuple[int, int]       # the int8 clip after the quantize (full range if none)
    act: tuple[int, int]         # ``clamp`` narrowed by the float activation
    activation: str | None       # the float activation, as TFLite names it


@dataclasses.dataclass(frozen=True)
class _Window:
    """A convolution's geometry (padding: top, bottom, left, right)."""

    stride: tuple[int, int]
    dilation: tuple[int, int]
    padding: tuple[int, int, int, int]


# What a kernel computes as a TFLite operator: given its output variable, the description (or
# None when TFLite's operator set cannot say it, e.g. a clamp no fused activation gives).
Describe = Callable[[relax.Var], "ri.OperatorDescription | None"]
Kernel = tuple[str, list, Describe | None]     # (kind, inputs, how to describe it)
# Another arithmetic's kernel for a quantized operator: (matcher, operator, its variable) ->
# Kernel or None (:class:`tvm_serenity.passes.ort_fakequant.OrtPatterns`).
Patterns = Callable[["_Matcher", "_Root", relax.Var], "Kernel | None"]

_ACTIVATIONS = ("NONE", "RELU", "RELU6", "RELU_N1_TO_1")


def _entry(expr, scale, zero_point, axis: int = 0, **where) -> dict:
    """The description of tensor ``expr`` (a Relax expression, or a numpy constant) with its
    quantization (``scale`` None: none) and where its value is (``arg=k`` / ``constant=j``)."""
    if isinstance(expr, np.ndarray):
        shape, dtype, name = list(expr.shape), str(expr.dtype), "constant"
    else:
        shape, dtype = _shape(expr), str(expr.ty.dtype.dtype)
        name = expr.name if isinstance(expr, relax.Var) else "tensor"
    quant = None if scale is None else ri.quant_description(scale, zero_point, axis)
    return {"name": name, "shape": shape, "dtype": dtype, "quant": quant, **where}


def _describe(op: str, options: dict, inputs: list, root: _Root, constants=(),
              pad: dict | None = None) -> Describe | None:
    """The :data:`Describe` of an operator whose output is quantized as ``root`` says, with a
    fused activation when its options take one (None when no fused activation gives
    ``root.act``)."""
    if "fused_activation_function" in options:
        name = next((a for a in _ACTIVATIONS
                     if ref.activation_range(a, root.scale, root.zero_point) == root.act), None)
        if name is None:
            return None
        options = {**options, "fused_activation_function": name}
    elif root.act != _FULL_RANGE:
        return None

    def describe(var: relax.Var) -> ri.OperatorDescription:
        out = _entry(var, root.scale, root.zero_point)
        return ri.OperatorDescription(op, options, tuple(inputs), (out,), tuple(constants),
                                      pad=pad)
    return describe


def _window_padding(in_hw, kernel, stride, dilation, pads) -> str | None:
    """TFLite's name for explicit ``(top, bottom, left, right)`` padding, or None."""
    for name in ("VALID", "SAME"):
        if tuple(pads) == ref.same_padding(name, in_hw, kernel, stride, dilation):
            return name
    return None


def _quantize_float(root: _Root) -> Kernel:
    """TFLite's float -> int8 QUANTIZE of ``root.computed`` (then the int8 clip after it)."""
    x = root.computed
    describe = _describe("QUANTIZE", {}, [_entry(x, None, 0, arg=0)], root) \
        if root.clamp == _FULL_RANGE and str(x.ty.dtype.dtype) == "float32" else None
    return "quantize", [x], describe


def layout_change(call) -> Callable[[np.ndarray], np.ndarray] | None:
    """What a ``reshape`` / ``permute_dims`` call does to a numpy array (else None)."""
    if is_op(call, "relax.reshape"):
        shape = _shape(call)
        return lambda a: a.reshape(shape)
    if is_op(call, "relax.permute_dims"):
        axes = None if call.attrs.axes is None else [int(a) for a in call.attrs.axes]
        return lambda a: np.transpose(a, axes)
    return None


class _Matcher:
    """Reads the fake-quant forms of one function, looking through its bindings."""

    def __init__(self, func: relax.Function):
        self.var2val = relax.analysis.get_var2val(func)

    def value(self, expr):
        return self.var2val.get(expr, expr) if isinstance(expr, relax.Var) else expr

    def dequantized(self, expr) -> _Quant | None:
        call = self.value(expr)
        if not is_op(call, "relax.dequantize"):
            return None
        data, scale, zero_point = call.args
        s, z = _number(scale), _number(zero_point)
        if s is None or z is None or not isinstance(data.ty, relax.TensorType) \
                or data.ty.dtype != "int8":
            return None
        return _Quant(data, float(np.float32(s)), int(z))

    def integers(self, expr) -> np.ndarray | None:
        """An integer constant, possibly reshaped or transposed, as a numpy array."""
        call = self.value(expr)
        if isinstance(call, tvm.ir.Constant):
            return call.value.numpy()
        change = layout_change(call)
        inner = None if change is None else self.integers(call.args[0])
        return None if inner is None else change(inner)

    def weights(self, expr) -> _Weights | None:
        """A dequantized int8 constant with zero point 0, possibly reshaped or transposed
        after the dequantize."""
        call = self.value(expr)
        change = layout_change(call)
        if change is not None:
            inner = self.weights(call.args[0])
            return None if inner is None else _Weights(change(inner.values),
                                                       change(inner.scales), inner.per_channel)
        if not is_op(call, "relax.dequantize"):
            return None
        q = self.integers(call.args[0])
        scale, zero_point = (self.integers(a) for a in call.args[1:])
        if q is None or scale is None or zero_point is None or q.dtype != np.int8 \
                or np.any(zero_point != 0):
            return None
        scale = np.asarray(scale, dtype=np.float32).reshape(-1)
        if scale.size > 1:
            axis = int(call.attrs.axis) % q.ndim
            if q.shape[axis] != scale.size:
                return None
            shape = [1] * q.ndim
            shape[axis] = scale.size
            scale = scale.reshape(shape)
        return _Weights(q, np.broadcast_to(scale, q.shape), scale.size > 1)

    def bias(self, expr) -> np.ndarray | None:
        """The values of a dequantized int32 vector constant with zero point 0 (its scale is
        the product of the input and weight scales; TFLite's kernels assume it)."""
        call = self.value(expr)
        if not is_op(call, "relax.dequantize"):
            return None
        values, zero_point = self.integers(call.args[0]), _number(call.args[2])
        if values is None or values.dtype != np.int32 or values.ndim != 1 or zero_point != 0:
            return None
        return values

    def clipped(self, bindings, uses: Counter) -> set[relax.Var]:
        """The int8 results (of a quantize or a cast) read by nothing but one int8 ``clip``."""
        return {b.value.args[0] for b in bindings
                if is_op(b.value, "relax.clip") and b.var.ty.dtype == "int8"
                and isinstance(b.value.args[0], relax.Var) and uses[b.value.args[0]] == 1
                and is_op(self.value(b.value.args[0]), "relax.quantize", "relax.astype")}

    def root(self, binding: relax.Binding, clipped: set[relax.Var]) -> _Root | None:
        """The quantized operator ending at ``binding``: an int8 ``quantize`` (or the integer
        average pool the frontend writes, ``astype(avg_pool2d(astype(x, int32)), int8)``) not
        in ``clipped``, or the ``clip`` of one that is; else None."""
        value, clamp = binding.value, _FULL_RANGE
        if is_op(value, "relax.clip") and value.args[0] in clipped:
            lo, hi = _number(value.args[1]), _number(value.args[2])
            if lo is None or hi is None:
                return None
            clamp = (max(ref.INT8_MIN, int(lo)), min(ref.INT8_MAX, int(hi)))
            value = self.value(value.args[0])
        elif binding.var in clipped:
            return None
        if is_op(value, "relax.astype") and value.attrs.dtype == "int8":
            pool = self.value(value.args[0])
            if is_op(pool, "relax.nn.avg_pool2d") \
                    and self._int8_widened(pool.args[0]) is not None:
                return _Root(pool, pool, None, None, clamp, clamp, None)
            return None
        if not (is_op(value, "relax.quantize") and value.attrs.out_dtype == "int8"):
            return None
        scale, zero_point = _number(value.args[1]), _number(value.args[2])
        if scale is None or zero_point is None:
            return None
        scale, zero_point = float(np.float32(scale)), int(zero_point)
        computed = value.args[0]
        x = self.value(computed)
        activation = None
        if is_op(x, "relax.nn.relu"):
            activation = "RELU"
        elif is_op(x, "relax.clip"):
            activation = _FLOAT_CLIPS.get((_number(x.args[1]), _number(x.args[2])))
        if activation is None:
            return _Root(computed, computed, scale, zero_point, clamp, clamp, None)
        lo, hi = ref.activation_range(activation, scale, zero_point)
        return _Root(computed, x.args[0], scale, zero_point, clamp,
                     (max(clamp[0], lo), min(clamp[1], hi)), activation)

    def _int8_widened(self, expr) -> relax.Expr | None:
        """``x`` if ``expr`` is ``astype(x, "int32")`` of an int8 ``x``."""
        call = self.value(expr)
        if is_op(call, "relax.astype") and call.attrs.dtype == "int32" \
                and call.args[0].ty.dtype == "int8":
            return call.args[0]
        return None

    # ------------------------------------------------------------------------- operators
    def kernel(self, root: _Root) -> Kernel | None:
        """The integer kernel of a quantized operator, or None when its form is not known."""
        x = self.value(root.float_input)
        if not isinstance(x, relax.Call):          # QUANTIZE of a float input
            return _quantize_float(root)
        for match in (self._conv, self._matmul, self._binary, self._pool, self._mean,
                      self._concat, self._softmax, self._logistic, self._hard_swish,
                      self._table):
            kernel = match(x, root)
            if kernel is not None:
                return kernel
        return None

    def _anchor_and_bias(self, x, op: str):
        """(anchor call, bias values or None) for ``op(...)`` or ``op(...) + B``."""
        if is_op(x, op):
            return x, None
        if not is_op(x, "relax.add"):
            return None, None
        for anchor, bias in ((x.args[0], x.args[1]), (x.args[1], x.args[0])):
            anchor = self.value(anchor)
            b = self.bias(bias)
            if is_op(anchor, op) and b is not None:
                return anchor, b
        return None, None

    def _conv(self, x, root: _Root) -> Kernel | None:
        conv, bias = self._anchor_and_bias(x, "relax.nn.conv2d")
        if conv is None:
            return None
        a = conv.attrs
        q, w = self.dequantized(conv.args[0]), self.weights(conv.args[1])
        if q is None or w is None or a.data_layout != "NHWC" or a.out_layout != "NHWC" \
                or a.kernel_layout not in ("HWIO", "HWOI"):
            return None
        hwoi = a.kernel_layout == "HWOI"        # depthwise: (KH, KW, C, 1) -> (KH, KW, 1, C)
        values = np.swapaxes(w.values, 2, 3) if hwoi else w.values
        scales = w.channel_scales(2 if hwoi else 3)
        if scales is None:
            return None
        top, left, bottom, right = (int(p) for p in a.padding)
        window = _Window(tuple(int(s) for s in a.strides), tuple(int(d) for d in a.dilation),
                         (top, bottom, left, right))
        describe = self._describe_conv(q, values, scales, bias, window, int(a.groups), hwoi,
                                       root)
        return "conv2d", [q.value], describe

    def _describe_conv(self, q: _Quant, hwio: np.ndarray, scales, bias, params: _Window,
                       groups: int, hwoi: bool, root: _Root) -> Describe | None:
        """CONV_2D (OHWI filter) or, for one group per input channel (of several, or a
        depthwise HWOI filter), DEPTHWISE_CONV_2D (``1 x KH x KW x C`` filter): a one-channel
        input with one group is a CONV_2D, as TFLite writes it. Padding that is neither SAME
        nor VALID becomes a PAD with the input's zero point before a VALID window (what the
        zero-point-shifted taps of the kernel amount to)."""
        in_shape = _shape(q.value)
        kh, kw, cin_g, cout = hwio.shape
        depthwise = groups == in_shape[3] and cin_g == 1 and (groups > 1 or hwoi)
        options = {"stride_h": params.stride[0], "stride_w": params.stride[1],
                   "dilation_h_factor": params.dilation[0],
                   "dilation_w_factor": params.dilation[1], "fused_activation_function": "NONE"}
        pad = None
        padding = _window_padding(in_shape[1:3], (kh, kw), params.stride, params.dilation,
                                  params.padding)
        if padding is None:
            t, b, l, r = params.padding
            pad, padding = {"paddings": [[0, 0], [t, b], [l, r], [0, 0]],
                            "value": q.zero_point}, "VALID"
        options["padding"] = padding
        if depthwise:
            op, weight, axis = "DEPTHWISE_CONV_2D", np.transpose(hwio, (2, 0, 1, 3)), 3
            options["depth_multiplier"] = cout // in_shape[3]
        else:
            op, weight, axis = "CONV_2D", np.transpose(hwio, (3, 0, 1, 2)), 0
        w_scales = np.asarray(scales, np.float32)
        inputs = [_entry(q.value, q.scale, q.zero_point, arg=0),
                  _entry(weight, w_scales, 0, axis, constant=0)]
        constants = [np.ascontiguousarray(weight)]
        if bias is not None:
            inputs.append(_entry(bias, np.float32(q.scale) * w_scales, 0, constant=1))
            constants.append(np.asarray(bias, np.int32))
        else:
            inputs.append(None)
        return _describe(op, options, inputs, root, constants, pad)

    def _matmul(self, x, root: _Root) -> Kernel | None:
        mm, bias = self._anchor_and_bias(x, "relax.matmul")
        if mm is None:
            return None
        q, w = self.dequantized(mm.args[0]), self.weights(mm.args[1])
        if q is None or w is None or w.values.ndim != 2:
            return None
        scales = w.channel_scales(1)                   # weights are (depth, units)
        if scales is None:
            return None
        values = w.values
        shape = _shape(mm)
        weight = np.ascontiguousarray(values.T)                 # TFLite's (units, depth)
        w_scales = scales if w.per_channel else scales[:1]
        inputs = [_entry(q.value, q.scale, q.zero_point, arg=0),
                  _entry(weight, w_scales, 0, 0, constant=0)]
        constants = [weight]
        if bias is not None:
            inputs.append(_entry(bias, np.float32(q.scale) * np.asarray(w_scales, np.float32),
                                 0, constant=1))
            constants.append(np.asarray(bias, np.int32))
        else:
            inputs.append(None)
        describe = _describe("FULLY_CONNECTED", {
            "fused_activation_function": "NONE", "keep_num_dims": len(shape) > 2},
            inputs, root, constants) if len(_shape(q.value)) == len(shape) or len(shape) == 2 \
            else None
        return "fully_connected", [q.value], describe

    def _binary(self, x, root: _Root) -> Kernel | None:
        if not is_op(x, "relax.add", "relax.multiply"):
            return None
        a, b = (self.dequantized(v) for v in x.args)
        if a is None or b is None:
            return None
        op = "ADD" if is_op(x, "relax.add") else "MUL"
        return op.lower(), [a.value, b.value], self._describe_binary(op, a, b, root)

    @staticmethod
    def _describe_binary(op: str, a: _Quant, b: _Quant, root: _Root) -> Describe | None:
        return _describe(op, {"fused_activation_function": "NONE"},
                         [_entry(a.value, a.scale, a.zero_point, arg=0),
                          _entry(b.value, b.scale, b.zero_point, arg=1)], root)

    def _same_quant(self, q: _Quant | None, root: _Root) -> bool:
        return q is not None and (q.scale, q.zero_point) == (root.scale, root.zero_point)

    def _pool(self, x, root: _Root) -> Kernel | None:
        """A pool of a dequantized tensor keeping its quantization, or the frontend's integer
        average pool (TVM's integer division truncates; TFLite's rounds)."""
        if not is_op(x, "relax.nn.avg_pool2d", "relax.nn.max_pool2d"):
            return None
        a = x.attrs
        if root.scale is None:
            source = self._int8_widened(x.args[0])
        else:
            q = self.dequantized(x.args[0])
            source = q.value if self._same_quant(q, root) else None
        if source is None or a.layout != "NHWC" or a.out_layout != "NHWC" \
                or bool(a.ceil_mode) or any(int(d) != 1 for d in a.dilation) \
                or bool(a.count_include_pad):
            return None
        top, left, bottom, right = (int(p) for p in a.padding)
        params = ref.PoolParams(tuple(int(k) for k in a.pool_size),
                                tuple(int(s) for s in a.strides), (top, bottom, left, right),
                                *root.act)
        average = is_op(x, "relax.nn.avg_pool2d")
        describe = self._describe_pool("AVERAGE_POOL_2D" if average else "MAX_POOL_2D",
                                       source, params, root)
        if average:
            return "average_pool2d", [source], describe
        return "max_pool2d", [source], describe

    @staticmethod
    def _describe_pool(op: str, source, params: ref.PoolParams, root: _Root
                       ) -> Describe | None:
        """The pool with TFLite's padding; a MAX_POOL_2D with other padding reads a PADV2 of
        -128 first (the kernel's own pad value, so the maximum is the same)."""
        padding = _window_padding(_shape(source)[1:3], params.kernel, params.stride, (1, 1),
                                  params.padding)
        pad = None
        if padding is None and op == "MAX_POOL_2D":
            t, b, l, r = params.padding
            pad, padding = {"paddings": [[0, 0], [t, b], [l, r], [0, 0]],
                            "value": ref.INT8_MIN}, "VALID"
        if padding is None:
            return None
        options = {"padding": padding, "stride_h": params.stride[0],
                   "stride_w": params.stride[1], "filter_height": params.kernel[0],
                   "filter_width": params.kernel[1], "fused_activation_function": "NONE"}
        if root.scale is None:      # the frontend's integer pool: whatever x's quantization is
            if root.act != _FULL_RANGE:
                return None
            entry = {**_entry(source, None, 0, arg=0), "quant": INHERIT}

            def describe(var: relax.Var) -> ri.OperatorDescription:
                out = {**_entry(var, None, 0), "quant": INHERIT}
                return ri.OperatorDescription(op, options, (entry,), (out,), (), pad=pad)
            return describe
        return _describe(op, options, [_entry(source, root.scale, root.zero_point, arg=0)],
                         root, (), pad)

    def _mean(self, x, root: _Root) -> Kernel | None:
        q = self.dequantized(x.args[0]) if is_op(x, "relax.mean") else None
        if q is None or root.act != _FULL_RANGE or x.attrs.axis is None:
            return None
        axes, shape = [int(v) for v in x.attrs.axis], _shape(x)
        rank = len(_shape(q.value))
        axes_data = np.asarray([a % rank for a in axes], np.int32)
        describe = _describe("MEAN", {"keep_dims": len(shape) == rank},
                             [_entry(q.value, q.scale, q.zero_point, arg=0),
                              _entry(axes_data, None, 0, constant=0)], root, [axes_data])
        return "mean", [q.value], describe

    def _concat(self, x, root: _Root) -> Kernel | None:
        if not is_op(x, "relax.concat") or root.act != _FULL_RANGE:
            return None
        fields = self.value(x.args[0])
        qs = [self.dequantized(f) for f in getattr(fields, "fields", [])]
        if not qs or not all(self._same_quant(q, root) for q in qs):
            return None
        axis = int(x.attrs.axis)
        describe = _describe("CONCATENATION", {"axis": axis,
                                               "fused_activation_function": "NONE"},
                             [_entry(q.value, q.scale, q.zero_point, arg=k)
                              for k, q in enumerate(qs)], root)
        return "concatenation", [q.value for q in qs], describe

    def _softmax(self, x, root: _Root) -> Kernel | None:
        q = self.dequantized(x.args[0]) if is_op(x, "relax.nn.softmax") else None
        if q is None or root.act != _FULL_RANGE \
                or (root.scale, root.zero_point) != (1.0 / 256, ref.INT8_MIN) \
                or int(x.attrs.axis) % len(_shape(x)) != len(_shape(x)) - 1 \
                or _shape(x)[-1] >= 1 << 12:
            return None
        describe = _describe("SOFTMAX", {"beta": 1.0},
                             [_entry(q.value, q.scale, q.zero_point, arg=0)], root)
        return "softmax", [q.value], describe

    def _logistic(self, x, root: _Root) -> Kernel | None:
        q = self.dequantized(x.args[0]) if is_op(x, "relax.sigmoid") else None
        if q is None or root.act != _FULL_RANGE \
                or (root.scale, root.zero_point) != (1.0 / 256, ref.INT8_MIN):
            return None
        return "logistic", [q.value], _describe(
            "LOGISTIC", {}, [_entry(q.value, q.scale, q.zero_point, arg=0)], root)

    def _hard_swish(self, x, root: _Root) -> Kernel | None:
        """``x * relu6(x + 3) / 6`` (how the frontend writes HARD_SWISH): a lookup table."""
        if not (is_op(x, "relax.divide") and _number(x.args[1]) == 6.0
                and root.act == _FULL_RANGE):
            return None
        product = self.value(x.args[0])
        if not is_op(product, "relax.multiply"):
            return None
        for direct, gate in ((product.args[0], product.args[1]),
                             (product.args[1], product.args[0])):
            q, gate = self.dequantized(direct), self.value(gate)
            if q is None or not (is_op(gate, "relax.clip") and _number(gate.args[1]) == 0.0
                                 and _number(gate.args[2]) == 6.0):
                continue
            shifted = self.value(gate.args[0])
            if is_op(shifted, "relax.add") and _number(shifted.args[1]) == 3.0 \
                    and q.same(self.dequantized(shifted.args[0])):
                return "hard_swish", [q.value], _describe(
                    "HARD_SWISH", {}, [_entry(q.value, q.scale, q.zero_point, arg=0)], root)
        return None

    def _table(self, x, root: _Root) -> Kernel | None:
        """A lone dequantize: TFLite RELU (a peeled ``nn.relu``), RELU6 / RELU_N1_TO_1 (TFLM
        only clamps, so the quantization must not change) or QUANTIZE int8 -> int8."""
        q = self.dequantized(x)
        if q is None:
            return None
        source = [_entry(q.value, q.scale, q.zero_point, arg=0)]
        if root.activation == "RELU":
            relu_act = (max(ref.INT8_MIN, root.zero_point), ref.INT8_MAX)   # TFLM's clamp
            describe = _describe("RELU", {}, source, dataclasses.replace(root, act=_FULL_RANGE)) \
                if root.act == relu_act else None
            return "relu", [q.value], describe
        if root.activation is not None and not self._same_quant(q, root):
            return None
        kind = (root.activation or "quantize").lower()
        describe = None
        if root.activation is None:
            describe = _describe("QUANTIZE", {}, source, root)
        elif root.activation == "RELU6" and root.act == ref.activation_range(
                "RELU6", root.scale, root.zero_point):
            describe = _describe("RELU6", {}, source, dataclasses.replace(root, act=_FULL_RANGE))
        return kind, [q.value], describe


def _description(kernel: Kernel | None, var: relax.Var) -> ri.OperatorDescription | None:
    """The description of the operator ``kernel`` computes into ``var`` (None: none)."""
    if kernel is None or kernel[2] is None:
        return None
    return kernel[2](var)


def _kernel_call(bb: relax.BlockBuilder, description: ri.OperatorDescription, inputs: list,
                 name: str, where: str) -> relax.Expr:
    """The call of the integer kernel of ``description`` (its ``arg`` ``k`` is ``inputs[k]``):
    :func:`~tvm_serenity.frontend.relax_import.operator_call`, the importer's one way. An
    operator that computes in whatever quantization its input has (the frontend's integer
    average pool) is built with a stand-in quantization and keeps saying so. ``where`` names
    the binding in messages."""
    inherit = any(e is not None and e.get("quant") == INHERIT
                  for e in (*description.inputs, *description.outputs))
    if inherit:
        stand_in = ri.quant_description(1.0)
        description = dataclasses.replace(
            description,
            inputs=tuple(e if e is None or e.get("quant") != INHERIT else {**e, "quant": stand_in}
                         for e in description.inputs),
            outputs=tuple({**e, "quant": stand_in} if e.get("quant") == INHERIT else e
                          for e in description.outputs))
    model, op = ri.operator_model(description, inputs, where)
    values = {op.inputs[k]: inputs[e["arg"]] for k, e in enumerate(description.inputs)
              if e is not None and "arg" in e}
    return ri.operator_call(bb, model, op, values, name=name, index=None, inherit=inherit,
                            pre_pad=ri.spatial_pad(description))


@tvm.transform.module_pass(opt_level=0, name="serenity.LowerFakeQuant")
class LowerFakeQuant:
    """Rewrite ``dequantize -> float op -> quantize`` into integer kernels (module docstring)."""

    def __init__(self, patterns: Patterns | None = None):
        self.patterns = patterns               # another arithmetic's kernels (an ONNX import)
        self.lowered: Counter = Counter()      # kernel kind -> how many
        self.unlowered: Counter = Counter()    # operator left as imported -> how many
        self.refused: dict[str, SerenityError] = {}   # binding -> why no kernel computes it

    def transform_module(self, mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        self.lowered, self.unlowered, self.refused = Counter(), Counter(), {}
        bb = relax.BlockBuilder(mod)
        changed = False
        for gvar, func in relax_functions(mod):
            new, left = self._lower_function(bb, func)
            if new is not None:
                bb.update_func(gvar, new)
                changed = True
            if left:
                what = ", ".join(f"{op} x{n}" for op, n in sorted(left.items()))
                warnings.warn(f"LowerFakeQuant: in '{gvar.name_hint}', quantized operators are "
                              f"left as imported, without an integer lowering: {what} (a final "
                              "quantize still rounds like TFLite)", stacklevel=2)
            self.unlowered.update(left)
        return bb.get() if changed else mod

    def _lower_function(self, bb: relax.BlockBuilder, func: relax.Function):
        """(``func`` with its quantized operators lowered or None if none was, the operators
        left as imported)."""
        matcher = _Matcher(func)
        bindings = [b for block in func.body.blocks for b in block.bindings]
        uses: Counter = Counter(v for b in bindings for v in relax.analysis.free_vars(b.value))
        uses.update(relax.analysis.free_vars(func.body.body))
        clipped = matcher.clipped(bindings, uses)
        calls: dict[relax.Var, relax.Expr] = {}
        left: Counter = Counter()
        for b in bindings:
            root = matcher.root(b, clipped)
            if root is None:
                continue
            kernel = matcher.kernel(root) if self.patterns is None \
                else self.patterns(matcher, root, b.var)
            description = _description(kernel, b.var)
            if description is None:         # the operator stays; only its quantize is lowered
                computed = matcher.value(root.computed)
                left[computed.op.name.removeprefix("relax.") if isinstance(computed, relax.Call)
                     else "quantize"] += 1
                if root.scale is None:
                    continue
                kernel = _quantize_float(root)
                description = _description(kernel, b.var)
                if description is None:
                    continue
            kind, inputs, _ = kernel
            try:
                calls[b.var] = _kernel_call(bb, description, inputs, f"{kind}_{b.var.name}",
                                            f"binding '{b.var.name}'")
            except SerenityError as e:      # no kernel computes it: it stays as imported
                self.refused.setdefault(b.var.name, e)
                left[description.op.lower()] += 1
                continue
            self.lowered[kind] += 1
        if not calls:
            return None, left
        blocks = [type(block)([relax.VarBinding(b.var, calls[b.var]) if b.var in calls else b
                               for b in block.bindings]) for block in func.body.blocks]
        new = relax.Function(func.params, relax.SeqExpr(blocks, func.body.body), func.ret_ty,
                             func.is_pure, func.attrs, func.span)
        return relax.analysis.remove_all_unused(relax.BlockBuilder().normalize(new)), left


BEFORE_LEGALIZE.append(lambda **_: LowerFakeQuant())
