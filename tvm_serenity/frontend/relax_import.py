"""Import an int8 TFLite model into Relax with integer semantics, bit-exact with TFLite Micro.

TVM 0.27's TFLite frontend turns every quantized operator into float arithmetic between
``dequantize`` and ``quantize`` (and refuses quantized PAD, TRANSPOSE and
RESIZE_NEAREST_NEIGHBOR). :func:`from_tflite` instead writes each operator as the integer
computation TFLite Micro performs (:mod:`.reference` is the specification): int8 tensors between
operators, int32 accumulators, and TFLite's fixed-point requantization as Relax integer ops.

**Module layout: one kernel per TFLite operator.** Every operator becomes a private Relax function
with the attribute ``Primitive`` (the form ``FuseOps`` produces; ``FuseTIR`` turns each into one
PrimFunc and ``FuseOps`` leaves calls to it alone), named like the operator's node in
:func:`~.to_graph.tflite_to_graph` (``conv2d_5``, ``add_12``, ...; operators whose kernels are
identical up to their constants have one function each, since their descriptions differ;
:class:`~tvm_serenity.passes.ShareKernels` merges them for TVM's build).
``main`` has one dataflow
block with one binding per operator, in stored (TFLite execution) order, each named after the
operator's output tensor (sanitized, see :func:`tensor_var_names`). So the tensors between kernels
are exactly the TFLite activation tensors: an int32 accumulator, the int16 zero-point-shifted
input of a convolution or a lookup index never leaves its kernel, and nothing of two operators is
ever fused into one kernel. Weights, biases, per-channel multipliers and lookup tables are Relax
constants that ``main`` passes to the kernels (``FuseTIR`` takes no tensor constants inside a
primitive function); scalars stay inline. Layout is NHWC throughout, weights are HWIO.

**Every kernel says what it computes.** Each carries its :class:`OperatorDescription` (the
TFLite operator, options, tensors with their quantization, its constants in TFLite's layout)
and the :func:`kernel_hash` of the kernel described, as function attributes: the
microcontroller route reads ``main`` back as operators through them
(:mod:`.relax_lift`), a pass that changes a kernel invalidates its description.
:func:`emit_operator` writes one such kernel into any ``BlockBuilder`` function, so a model
built by hand deploys like an imported one.

**Arithmetic.** The fixed-point helpers below restate :mod:`.reference`'s primitives as Relax
expressions on int64 values: :func:`multiply_by_quantized_multiplier` (double rounding, with the
int32 wrap of the left shift), :func:`requantize` (plus zero point, clamp, int8) and
:func:`rounding_divide_by_pot`. The kernel builders (:func:`conv2d_int8`,
:func:`fully_connected_int8`, :func:`add_int8`, ...) are named like the reference kernels they
restate and are shared with :class:`tvm_serenity.passes.LowerFakeQuant`:

* CONV_2D / DEPTHWISE_CONV_2D: ``conv2d`` of the zero-point-shifted input (``int16(x) - z``)
  with the conv's own padding, so a padded tap contributes 0 exactly like the tap TFLite skips;
  bias add; requantize per output channel;
* FULLY_CONNECTED: ``matmul`` of the shifted input; MEAN: int32 sums and TFLM's count-rescaled
  multiplier; AVERAGE_POOL_2D: window sums (a depthwise ``conv2d`` with ones) divided by the
  in-bounds tap count, rounding half away from zero; MAX_POOL_2D: ``max_pool2d`` (pads with -128);
* ADD (``left_shift = 20`` scheme), MUL: elementwise integer ops and requantization;
* RELU, RELU6, HARD_SWISH, LOGISTIC and int8 QUANTIZE: a lookup table (``R.take`` of a constant
  int8[256]) computed with the reference kernel for all 256 inputs, exact and MCU-friendly;
* SOFTMAX: the exponentials of the (at most 256) differences to the row maximum from lookup
  tables, then gemmlowp's fixed-point reciprocal, count-leading-zeros and rounding in Relax ops;
* PAD, RESHAPE, TRANSPOSE, CONCATENATION, RESIZE_NEAREST_NEIGHBOR (two ``take`` with the
  reference's source indices), STRIDED_SLICE (one ``take`` per sliced axis with the indices of
  :func:`.reference.strided_slice_params`, then a ``reshape`` dropping shrunk axes): data
  movement on int8; QUANTIZE from float32 and DEQUANTIZE to float32 at the model's edges;
* after them, float32 SOFTMAX and LOG_SOFTMAX as TFLite's ``reference_ops`` compute them
  (:func:`softmax_float`): the row maximum as ``std::max`` finds it (NaN skipped, the first of
  equal values kept), ``exp((x - max) * beta) / sum`` and ``(x - max) - log(sum)`` in float32
  with TVM's ``exp`` / ``log`` (on ``llvm`` the process's libm: glibc's, as TFLite Micro's
  Python wrapper calls, bit for bit) and a front-to-back ``sum``; ARG_MAX of int8 or float32
  (:func:`arg_max`) by ``argmax`` over float64 keys (TVM's ``argmax`` answers -1 for a row
  of its type's lowest value, so no key reaches it) with TFLite's NaN rule.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections import Counter
from typing import Callable, Sequence

import numpy as np
import tvm
import tvm_ffi
from tvm import relax
from tvm.script import relax as R

from ..graph import unique_name
from . import ort_arithmetic as ort
from . import reference as ref
from .reference import table_of
from ..text import counted
from .tflite_model import (Operator, Quantization, Tensor, TFLiteModel, check_operators,
                           load_tflite)
from .to_graph import GRAPH_OPS

__all__ = ["from_tflite", "SUPPORTED_OPS", "tensor_var_names", "kernel_function",
           "rounding_divide_by_pot", "multiply_by_quantized_multiplier", "requantize",
           "shift_zero_point", "lookup_table", "conv2d_int8", "fully_connected_int8",
           "fully_connected_requant", "add_int8", "mul_int8", "mean_int8", "average_pool_int8",
           "max_pool_int8", "softmax_int8", "quantize_float", "relu_table", "table_of",
           "row_max_float", "softmax_float", "log_softmax_float", "arg_max",
           "OperatorDescription", "describe_operator", "quant_description", "tensor_description",
           "described_tensor",
           "OPERATOR_ATTR", "CONSTANTS_ATTR", "KERNEL_HASH_ATTR", "kernel_hash",
           "emit_operator"]

INT32_MAX = (1 << 31) - 1


# ============================================================ fixed-point arithmetic in Relax
def _i64(value) -> tvm.ir.Constant:
    """An int64 constant: a scalar (inlined by LegalizeOps) or an array (a kernel argument)."""
    return relax.const(np.asarray(value, dtype=np.int64), "int64")


def _wrap32(x: relax.Expr) -> relax.Expr:
    """Two's-complement wrap of int64 values to int32, kept as int64 (a C int32 overflow)."""
    return R.astype(R.astype(x, "int32"), "int64")


def _srdhm(a: relax.Expr, b: relax.Expr) -> relax.Expr:
    """gemmlowp ``SaturatingRoundingDoublingHighMul`` on int64 values in int32 range.

    ``(a*b + nudge) / 2^31`` truncated, with nudge ``2^30`` or ``1 - 2^30`` by the sign of
    ``a*b``, equals ``(a*b + 2^30) >> 31`` (arithmetic shift) for both signs. The saturating case
    ``a == b == INT32_MIN`` cannot occur where it is used (one operand is never negative).
    """
    return R.right_shift(R.add(R.multiply(a, b), _i64(1 << 30)), _i64(31))


def rounding_divide_by_pot(x: relax.Expr, exponent) -> relax.Expr:
    """gemmlowp ``RoundingDivideByPOT``: ``x / 2^exponent`` rounded half away from zero.

    ``x`` is int64; ``exponent`` is a non-negative integer or array (broadcast along the last
    axis), or an int64 Relax expression of positive values. Computed as
    ``(x + 2^(e-1) - (x < 0)) >> e`` for ``e > 0`` (and ``x`` for ``e == 0``).
    """
    if isinstance(exponent, relax.Expr):
        nudge = R.right_shift(R.left_shift(_i64(1), exponent), _i64(1))
        return R.right_shift(R.subtract(R.add(x, nudge), R.astype(R.less(x, _i64(0)), "int64")),
                             exponent)
    e = np.asarray(exponent, dtype=np.int64)
    if not e.any():
        return x
    negative = R.astype(R.less(x, _i64(0)), "int64")
    if not e.all():           # per-channel exponents, some 0: no rounding on those channels
        negative = R.multiply(negative, _i64(e > 0))
    return R.right_shift(R.subtract(R.add(x, _i64((1 << e) >> 1)), negative), _i64(e))


def multiply_by_quantized_multiplier(x: relax.Expr, multiplier, shift) -> relax.Expr:
    """TFLite's ``MultiplyByQuantizedMultiplier`` (double rounding) on int64 values in int32
    range: ``RoundingDivideByPOT(SRDHM(wrap32(x << max(s, 0)), m), max(-s, 0))``.
    ``multiplier``/``shift`` are integers or per-channel arrays (last axis), ``multiplier >= 0``.
    """
    m = np.asarray(multiplier, dtype=np.int64)
    s = np.asarray(shift, dtype=np.int64)
    left, right = np.maximum(s, 0), np.maximum(-s, 0)
    if left.any():
        x = _wrap32(R.left_shift(x, _i64(left)))
    return rounding_divide_by_pot(_srdhm(x, _i64(m)), right)


def requantize(acc: relax.Expr, requant: ref.Requant) -> relax.Expr:
    """:func:`.reference.requantize` in Relax: the int32 (or int64) accumulator ``acc`` to int8,
    ``clamp(MBQM(acc, m, s) + zero_point, act_min, act_max)`` with ``requant``'s parameters
    (per output channel along the last axis when they are arrays). The accumulator is bound
    (as ``acc``) in the current BlockBuilder's block, as kernel bodies are built (see
    :func:`kernel_function`)."""
    acc = relax.BlockBuilder.current().emit(acc, "acc")
    x = acc if acc.ty.dtype == "int64" else R.astype(acc, "int64")
    x = multiply_by_quantized_multiplier(x, requant.multiplier, requant.shift)
    x = R.add(x, _i64(requant.output_zero_point))
    return R.astype(R.clip(x, int(requant.act_min), int(requant.act_max)), "int8")


def shift_zero_point(x: relax.Expr, zero_point: int) -> relax.Expr:
    """``int16(x) - zero_point``: the input of an integer convolution or matmul, in which a zero
    (e.g. of padding) contributes nothing, as TFLite's ``w * (x - z)`` sums."""
    return R.subtract(R.astype(x, "int16"), relax.const(int(zero_point), "int16"))


def lookup_table(x: relax.Expr, table: np.ndarray) -> relax.Expr:
    """``table[x + 128]`` for int8 ``x``: an elementwise int8 function given for all 256 inputs
    (``table[i]`` is the value at ``i - 128``)."""
    return R.take(relax.const(np.asarray(table, dtype=np.int8), "int8"),
                  R.add(R.astype(x, "int32"), relax.const(128, "int32")), axis=0, mode="clip")


# ================================================================ kernels (Relax expressions)
def _conv_padding(padding: Sequence[int]) -> tuple[int, int, int, int]:
    """The reference's ``(top, bottom, left, right)`` as Relax's ``(top, left, bottom, right)``."""
    top, bottom, left, right = (int(p) for p in padding)
    return top, left, bottom, right


def conv2d_int8(x: relax.Expr, weights_hwio: np.ndarray, bias: np.ndarray | None,
                params: ref.ConvParams, groups: int) -> relax.Expr:
    """:func:`.reference.conv2d_int8` / ``depthwise_conv2d_int8`` on NHWC int8 ``x`` with HWIO
    int8 weights (a depthwise conv is ``groups = C_in``, output channel ``c*M + m`` reading input
    channel ``c``): int32 ``conv2d`` of the shifted input, bias, per-channel requantization."""
    acc = R.nn.conv2d(shift_zero_point(x, params.input_zero_point),
                      relax.const(np.asarray(weights_hwio, dtype=np.int8), "int8"),
                      strides=params.stride, padding=_conv_padding(params.padding),
                      dilation=params.dilation, groups=groups, data_layout="NHWC",
                      kernel_layout="HWIO", out_dtype="int32")
    if bias is not None:
        acc = R.add(acc, relax.const(np.asarray(bias, dtype=np.int32), "int32"))
    return requantize(acc, params.requant)


def fully_connected_int8(x: relax.Expr, weights: np.ndarray, bias: np.ndarray | None,
                         input_zero_point: int, requant: ref.Requant,
                         out_shape: Sequence[int]) -> relax.Expr:
    """:func:`.reference.fully_connected_int8`: ``x`` read as rows of ``depth`` values times the
    ``(units, depth)`` int8 weights, int32 accumulators, bias, requantization, reshaped to
    ``out_shape`` (``keep_num_dims``)."""
    units, depth = weights.shape
    rows = int(np.prod([int(d) for d in x.ty.shape.values])) // depth
    lhs = shift_zero_point(R.reshape(x, (rows, depth)), input_zero_point)
    acc = R.matmul(lhs, relax.const(np.ascontiguousarray(np.asarray(weights, np.int8).T), "int8"),
                   out_dtype="int32")
    if bias is not None:
        acc = R.add(acc, relax.const(np.asarray(bias, dtype=np.int32), "int32"))
    out = requantize(acc, requant)
    return out if tuple(out_shape) == (rows, units) else R.reshape(out, tuple(out_shape))


def add_int8(a: relax.Expr, b: relax.Expr, params: ref.AddParams) -> relax.Expr:
    """:func:`.reference.add_int8`: both inputs shifted left by 20 and rescaled to a common
    scale, summed, requantized (numpy broadcasting, as TFLite's)."""
    def rescaled(v, zero_point, multiplier, shift):
        v = R.left_shift(R.subtract(R.astype(v, "int64"), _i64(zero_point)),
                         _i64(params.left_shift))
        return multiply_by_quantized_multiplier(v, multiplier, shift)

    return requantize(R.add(rescaled(a, params.input1_zero_point, params.input1_multiplier,
                                     params.input1_shift),
                            rescaled(b, params.input2_zero_point, params.input2_multiplier,
                                     params.input2_shift)), params.output)


def mul_int8(a: relax.Expr, b: relax.Expr, zero_a: int, zero_b: int,
              requant: ref.Requant) -> relax.Expr:
    """:func:`.reference.mul_int8`: ``requant((a - z1) * (b - z2))``."""
    return requantize(R.multiply(R.subtract(R.astype(a, "int64"), _i64(zero_a)),
                                 R.subtract(R.astype(b, "int64"), _i64(zero_b))), requant)


def mean_int8(x: relax.Expr, axes: Sequence[int], out_shape: Sequence[int],
              input_zero_point: int, multiplier: int, shift: int,
              output_zero_point: int) -> relax.Expr:
    """:func:`.reference.mean_int8` (TFLM ``QuantizedMeanOrSum``): int32 sums over ``axes``, the
    multiplier of ``s_in / s_out`` pre-divided by the element count; the result in
    ``out_shape`` (reduced axes dropped, or kept as 1 for ``keep_dims``)."""
    shape = [int(d) for d in x.ty.shape.values]
    axes = sorted({int(a) % len(shape) for a in axes})
    count = int(np.prod([shape[a] for a in axes], dtype=np.int64))
    s = min(count.bit_length() - 1, 32, 31 + int(shift))
    keepdims = len(out_shape) == len(shape)
    sums = R.sum(R.astype(x, "int32"), axis=axes, keepdims=keepdims)
    shifted = R.subtract(R.astype(sums, "int64"), _i64(int(input_zero_point) * count))
    out = requantize(shifted, ref.Requant(np.int64((int(multiplier) << s) // count),
                                          np.int64(int(shift) - s), int(output_zero_point)))
    reduced = [(1 if keepdims else None) if i in axes else d for i, d in enumerate(shape)]
    reduced = [d for d in reduced if d is not None]
    return out if reduced == list(out_shape) else R.reshape(out, tuple(out_shape))


def _window_counts(size: int, kernel: int, stride: int, before: int, out: int) -> np.ndarray:
    """In-bounds taps of each output position of a window along one axis."""
    start = np.arange(out) * stride - before
    return np.minimum(start + kernel, size) - np.maximum(start, 0)


def average_pool_int8(x: relax.Expr, params: ref.PoolParams) -> relax.Expr:
    """:func:`.reference.average_pool_int8`: window sums over in-bounds taps (a depthwise int32
    ``conv2d`` with ones), divided by the tap count rounding half away from zero, clamped."""
    _, h, w, c = (int(d) for d in x.ty.shape.values)
    (kh, kw), (sh, sw) = params.kernel, params.stride
    top, bottom, left, right = params.padding
    oh = ref.output_size(h, kh, sh, 1, top, bottom)
    ow = ref.output_size(w, kw, sw, 1, left, right)
    acc = R.nn.conv2d(x, relax.const(np.ones((kh, kw, 1, c), dtype=np.int8), "int8"),
                      strides=params.stride, padding=_conv_padding(params.padding), groups=c,
                      data_layout="NHWC", kernel_layout="HWIO", out_dtype="int32")
    counts = np.outer(_window_counts(h, kh, sh, top, oh), _window_counts(w, kw, sw, left, ow))
    if np.any(counts == 0):
        raise ref.ReferenceError("average pool: a window lies entirely in the padding")
    if np.all(counts == counts.flat[0]):
        count, half = (relax.const(int(counts.flat[0]), "int32"),
                       relax.const(int(counts.flat[0]) // 2, "int32"))
    else:
        count = relax.const(counts.reshape(1, oh, ow, 1).astype(np.int32), "int32")
        half = relax.const((counts // 2).reshape(1, oh, ow, 1).astype(np.int32), "int32")
    up = R.floor_divide(R.add(acc, half), count)
    down = R.negative(R.floor_divide(R.subtract(half, acc), count))
    avg = R.where(R.greater(acc, relax.const(0, "int32")), up, down)
    return R.astype(R.clip(avg, int(params.act_min), int(params.act_max)), "int8")


def max_pool_int8(x: relax.Expr, params: ref.PoolParams) -> relax.Expr:
    """:func:`.reference.max_pool_int8`: ``max_pool2d`` (padding counts as -128), clamped."""
    out = R.nn.max_pool2d(x, params.kernel, params.stride, _conv_padding(params.padding),
                          layout="NHWC")
    if (params.act_min, params.act_max) == (ref.INT8_MIN, ref.INT8_MAX):
        return out
    return R.clip(out, int(params.act_min), int(params.act_max))


def fully_connected_requant(input_scale: float, weight_scales: np.ndarray,
                            output_scale: float, output_zero_point: int, act_min: int,
                            act_max: int) -> ref.Requant:
    """FULLY_CONNECTED's requantization as TFLM prepares it: per channel like a convolution
    (double), per tensor from a float32 scale product (``GetQuantizedConvolutionMultipler``)."""
    weight_scales = np.asarray(weight_scales, dtype=np.float32).reshape(-1)
    if weight_scales.size > 1:
        return dataclasses.replace(ref.conv_requant(input_scale, weight_scales, output_scale,
                                                    output_zero_point),
                                   act_min=act_min, act_max=act_max)
    product = np.float32(input_scale) * weight_scales[0]
    m, s = ref.quantize_multiplier(float(product) / float(output_scale))
    return ref.Requant(np.int64(m), np.int64(s), int(output_zero_point), act_min, act_max)


def relu_table(input_scale: float, input_zero_point: int, output_scale: float,
               output_zero_point: int, act_min: int = ref.INT8_MIN,
               act_max: int = ref.INT8_MAX) -> np.ndarray:
    """The lookup table of int8 RELU (TFLM ``ReluQuantized``: requantize by the float32 quotient
    of the scales, clamp at the output zero point), further clamped to ``[act_min, act_max]``."""
    real = float(np.float32(input_scale) / np.float32(output_scale))
    m, s = ref.quantize_multiplier(real)
    requant = ref.Requant(np.int64(m), np.int64(s), int(output_zero_point),
                          max(ref.INT8_MIN, int(output_zero_point), act_min), act_max)
    return table_of(lambda v: ref.relu_int8(v, input_zero_point, requant))


def _one_over_one_plus_x(a: relax.Expr) -> relax.Expr:
    """gemmlowp ``one_over_one_plus_x_for_x_in_0_1`` (:mod:`.reference`) on int64 values."""
    half_denominator = R.right_shift(R.add(a, _i64(INT32_MAX + 1)), _i64(1))   # a >= 0
    x = _wrap32(R.add(_i64(1515870810), _srdhm(half_denominator, _i64(-1010580540))))
    for _ in range(3):
        one_minus = _wrap32(R.subtract(_i64(1 << 29), _srdhm(half_denominator, x)))
        x = _wrap32(R.add(x, _saturating_left_shift(_srdhm(x, one_minus), 2)))
    return _saturating_left_shift(x, 1)


def _saturating_left_shift(x: relax.Expr, exponent: int) -> relax.Expr:
    """gemmlowp ``SaturatingRoundingMultiplyByPOT<exponent > 0>`` on int32-range values."""
    return R.clip(R.left_shift(x, _i64(exponent)), -INT32_MAX - 1, INT32_MAX)


def softmax_int8(x: relax.Expr, params: ref.SoftmaxParams) -> relax.Expr:
    """:func:`.reference.softmax_int8` over the last axis. The differences to the row maximum
    take the 256 values -255..0, so their exponentials (and the terms summed) are tables."""
    exps, terms, _ = ref.softmax_tables(params)

    v = R.astype(x, "int64")
    diff = R.subtract(v, R.max(v, axis=-1, keepdims=True))
    index = R.add(diff, _i64(255))
    exp = R.take(_i64(exps), index, axis=0, mode="clip")
    total = _wrap32(R.sum(R.take(_i64(terms), index, axis=0, mode="clip"), axis=-1,
                          keepdims=True))
    # count leading zeros of the (positive) int32 sum: how many 2^k, k < 32, exceed it
    powers = _i64(np.left_shift(np.int64(1), np.arange(32, dtype=np.int64)))
    headroom = R.sum(R.astype(R.less(R.expand_dims(total, -1), powers), "int64"), axis=-1)
    shifted_scale = _one_over_one_plus_x(
        R.subtract(R.left_shift(total, headroom), _i64(INT32_MAX + 1)))
    exponent = R.subtract(_i64(12 + 31 - 8), headroom)
    out = R.clip(R.subtract(rounding_divide_by_pot(_srdhm(shifted_scale, exp), exponent),
                            _i64(128)), ref.INT8_MIN, ref.INT8_MAX)
    # invalid differences (below diff_min) give -128
    out = R.subtract(R.multiply(R.add(out, _i64(128)),
                                R.astype(R.greater_equal(diff, _i64(params.diff_min)), "int64")),
                     _i64(128))
    return R.astype(out, "int8")


#: float32's lowest value (``std::numeric_limits<float>::lowest()``, TFLite's initial maximum).
_FLOAT32_LOWEST = float(np.finfo(np.float32).min)


def _first_max_index(x: relax.Expr, axis: int) -> relax.Expr:
    """The int64 index (``keepdims``) along ``axis`` of the first value no later value
    exceeds, comparing as TFLite does (a NaN and -inf below every other value), from float64
    keys above ``argmax``'s identity: NaN and -inf become ``-2 * FLT_MAX``."""
    key = R.astype(x, "float64")
    if x.ty.dtype == "float32":
        low = R.logical_or(R.isnan(x), R.equal(x, relax.const(-np.inf, "float32")))
        key = R.where(low, relax.const(2.0 * _FLOAT32_LOWEST, "float64"), key)
    return R.argmax(key, axis=axis, keepdims=True)


def row_max_float(x: relax.Expr) -> relax.Expr:
    """:func:`.reference.row_max_float` (``keepdims``): the first maximal value of each row,
    its sign included (``-0`` before ``+0`` stays), ``lowest()`` for a row of NaN and -inf."""
    first = R.gather_elements(x, _first_max_index(x, -1), axis=-1)
    low = R.logical_or(R.isnan(first), R.equal(first, relax.const(-np.inf, "float32")))
    return R.where(low, relax.const(_FLOAT32_LOWEST, "float32"), first)


def softmax_float(x: relax.Expr, beta: float) -> relax.Expr:
    """:func:`.reference.softmax_float`: ``exp((x - max) * beta)``, summed along the last
    axis, each divided by the sum, in float32."""
    e = R.exp(R.multiply(R.subtract(x, row_max_float(x)), relax.const(np.float32(beta),
                                                                        "float32")))
    return R.divide(e, R.sum(e, axis=-1, keepdims=True))


def log_softmax_float(x: relax.Expr) -> relax.Expr:
    """:func:`.reference.log_softmax_float`: ``(x - max) - log(sum exp(x - max))``."""
    d = R.subtract(x, row_max_float(x))
    return R.subtract(d, R.log(R.sum(R.exp(d), axis=-1, keepdims=True)))


def arg_max(x: relax.Expr, axis: int, out_dtype: str) -> relax.Expr:
    """:func:`.reference.arg_max`: the first index of the largest value along ``axis``;
    over float32 a NaN first value keeps index 0 (nothing is greater than it)."""
    index = _first_max_index(x, axis)
    if x.ty.dtype == "float32":
        first = R.strided_slice(x, axes=[axis], begin=[0], end=[1])
        index = R.where(R.isnan(first), _i64(0), index)
    return R.astype(R.squeeze(index, [axis]), out_dtype)


def quantize_float(x: relax.Expr, scale: float, zero_point: int, act_min: int = ref.INT8_MIN,
                   act_max: int = ref.INT8_MAX) -> relax.Expr:
    """:func:`.reference.quantize`: ``round_half_away(x / scale)`` in float32, plus zero
    point, saturated to ``[act_min, act_max]`` (int8 by default)."""
    v = R.divide(x, relax.const(np.float32(scale), "float32"))
    a = R.abs(v)
    f = R.floor(a)
    r = R.add(f, R.astype(R.greater_equal(R.subtract(a, f), relax.const(0.5, "float32")),
                          "float32"))
    r = R.where(R.less(v, relax.const(0.0, "float32")), R.negative(r), r)
    q = R.clip(R.add(r, relax.const(float(zero_point), "float32")), act_min, act_max)
    return R.astype(q, "int8")


def _dequantize(x: relax.Expr, scale: float, zero_point: int) -> relax.Expr:
    """:func:`.reference.dequantize`: ``scale * (q - zp)`` (exact products, one rounding)."""
    shifted = R.astype(R.subtract(R.astype(x, "int32"), relax.const(int(zero_point), "int32")),
                       "float32")
    return R.multiply(shifted, relax.const(np.float32(scale), "float32"))


# ==================================================================== operator descriptions
OPERATOR_ATTR = "serenity.operator"      # the description as JSON text
CONSTANTS_ATTR = "serenity.constants"    # its constant tensors, in TFLite's layout
KERNEL_HASH_ATTR = "serenity.kernel_hash"   # the kernel it describes (a pass may change it)


def kernel_hash(func: relax.Function) -> str:
    """The structural hash of a kernel's parameters, body and type (not its attributes)."""
    bare = relax.Function(func.params, func.body, func.ret_ty, func.is_pure)
    return str(tvm_ffi.structural_hash(bare, map_free_vars=True))


def _json_value(value):
    if isinstance(value, (tuple, list, np.ndarray)):
        return [_json_value(v) for v in value]
    return value.item() if isinstance(value, np.generic) else value


def _options_value(value):
    return tuple(_options_value(v) for v in value) if isinstance(value, list) else value


def quant_description(scale, zero_point=0, axis: int = 0) -> dict:
    """Affine quantization as a description holds it: the float32 scales (exactly, as Python
    floats), the zero points broadcast to them, the axis."""
    scales = np.atleast_1d(np.asarray(scale, np.float32))
    zero_points = np.broadcast_to(np.asarray(zero_point, np.int64), scales.shape)
    return {"scale": [float(v) for v in scales], "zero_point": [int(z) for z in zero_points],
            "axis": int(axis)}


def tensor_description(t: Tensor) -> dict:
    """Name, shape, dtype and quantization of ``t`` as JSON (:func:`quant_description`)."""
    quant = None if t.quant is None else quant_description(t.quant.scale, t.quant.zero_point,
                                                           t.quant.axis)
    return {"name": t.name, "shape": [int(d) for d in t.shape], "dtype": t.dtype,
            "quant": quant}


def described_tensor(index: int, entry: dict, data: np.ndarray | None = None) -> Tensor:
    """The :class:`Tensor` ``index`` that :func:`tensor_description` gave ``entry``."""
    q = entry.get("quant")
    quant = None if q is None else Quantization(
        np.asarray(q["scale"], np.float32), np.asarray(q["zero_point"], np.int64),
        int(q.get("axis", 0)))
    if data is not None:
        data = np.asarray(data).reshape(entry["shape"])
        data.setflags(write=False)
    return Tensor(index, entry["name"], tuple(entry["shape"]), entry["dtype"], quant, data)


@dataclasses.dataclass(frozen=True)
class OperatorDescription:
    """The integer operator a kernel computes, in the terms of TFLite's int8 operator set
    (:mod:`.reference` is the specification): the builtin name, its options and, per operator
    input, the tensor (:func:`tensor_description`) plus where its value is: ``"arg": k``,
    argument ``k`` of the kernel's call (an activation, or a constant operand of ADD/MUL/
    CONCATENATION), or ``"constant": j``, ``constants[j]`` (weights, biases, shapes, axes in
    TFLite's own layout, which the kernel has already folded into its own form); ``None`` for
    an omitted optional input. ``pad``: ``{"paddings": [[before, after], ...], "value": v}``
    when the kernel pads its first input with ``v`` before the operator (whose own padding is
    then VALID): read back as a PAD (``v`` the zero point) or PADV2 before it, for a window
    whose explicit padding TFLite's SAME/VALID cannot say. ``index`` is the operator's number
    in its source file (None: none). Kept as function attributes with the kernel's
    :func:`kernel_hash`, so it holds for as long as no pass changes the kernel (a pass that
    does, keeping the attributes, leaves a kernel without description);
    :func:`tvm_serenity.frontend.relax_lift.operators_of` reads it back."""

    op: str
    options: dict
    inputs: tuple[dict | None, ...]
    outputs: tuple[dict, ...]
    constants: tuple[np.ndarray, ...] = ()
    index: int | None = None
    pad: dict | None = None

    def attrs(self) -> dict:
        text = json.dumps({"op": self.op, "options": _json_value(self.options),
                           "inputs": list(self.inputs), "outputs": list(self.outputs),
                           "index": self.index, "pad": self.pad})
        return {OPERATOR_ATTR: text,
                CONSTANTS_ATTR: [tvm.runtime.tensor(np.ascontiguousarray(c))
                                 for c in self.constants]}

    @staticmethod
    def of(func) -> OperatorDescription | None:
        """The description in the attributes of ``func`` (None when it has none, or when a
        pass changed the kernel after it was described and kept the attributes)."""
        if not isinstance(func, relax.Function) or func.attrs is None \
                or OPERATOR_ATTR not in func.attrs \
                or str(func.attrs.get(KERNEL_HASH_ATTR, "")) != kernel_hash(func):
            return None
        d = json.loads(str(func.attrs[OPERATOR_ATTR]))
        consts = tuple(c.numpy() for c in func.attrs[CONSTANTS_ATTR]) \
            if CONSTANTS_ATTR in func.attrs else ()
        options = {k: _options_value(v) for k, v in d["options"].items()}
        return OperatorDescription(d["op"], options, tuple(d["inputs"]), tuple(d["outputs"]),
                                   consts, d.get("index"), d.get("pad"))


def describe_operator(model: TFLiteModel, op: Operator) -> OperatorDescription:
    """The description of ``op`` when :func:`from_tflite` passes its data inputs (activations,
    and for ADD/MUL/CONCATENATION every input) as kernel arguments in operator order."""
    inputs, constants, args = [], [], 0
    for i in op.inputs:
        if i < 0:
            inputs.append(None)
            continue
        t = model.tensors[i]
        entry = tensor_description(t)
        if t.data is None or op.op in _ALL_DATA:
            entry["arg"], args = args, args + 1
        else:
            entry["constant"] = len(constants)
            constants.append(t.data)
        inputs.append(entry)
    outputs = tuple(tensor_description(model.tensors[i]) for i in op.outputs)
    return OperatorDescription(op.op, dict(op.options), tuple(inputs), outputs,
                               tuple(constants), op.index)


# ========================================================================= kernel functions
def kernel_function(name: str, inputs: Sequence[relax.Expr],
                    body: Callable[..., relax.Expr],
                    operator: OperatorDescription | None = None
                    ) -> tuple[relax.Function, list[relax.Expr]]:
    """One kernel: a private Relax function with attribute ``Primitive`` computing
    ``body(*params)`` (one parameter per input, typed like it), and the arguments to call it
    with. ``FuseTIR`` accepts no tensor constant inside a primitive function, so every
    non-scalar constant ``body`` uses becomes a parameter of its own (arguments: ``inputs``,
    then those constants); scalars stay inline, where ``LegalizeOps`` folds them into the
    elementwise ops. ``body`` must not compute anything from constants alone (``FoldConstant``
    would make that a tensor constant again): a constant operand is an input. ``operator``:
    the integer operator the kernel computes, kept in its attributes
    (:class:`OperatorDescription`; ``arg`` ``k`` of it is ``inputs[k]``)."""
    params = [relax.Var(v.name if isinstance(v, relax.Var) else f"x{i}", v.ty)
              for i, v in enumerate(inputs)]
    kb = relax.BlockBuilder()
    with kb.function(name, params, {"Primitive": True}, private=True):
        with kb.dataflow():
            out = kb.emit_output(body(*params))
        kb.emit_func_output(out)
    func = kb.get()[name]
    consts: list[tvm.ir.Constant] = []
    const_params: list[relax.Var] = []

    def lift(arg):
        if (isinstance(arg, tvm.ir.Constant) and isinstance(arg.ty, relax.TensorType)
                and arg.ty.ndim > 0):
            consts.append(arg)
            const_params.append(relax.Var(f"c{len(consts) - 1}", arg.ty))
            return const_params[-1]
        if isinstance(arg, relax.Tuple):
            return relax.Tuple([lift(f) for f in arg.fields])
        return arg

    bindings = []
    for b in func.body.blocks[0].bindings:
        value = b.value
        if isinstance(value, relax.Call):
            value = relax.Call(value.op, [lift(a) for a in value.args], value.attrs,
                               value.ty_args)
        bindings.append(relax.VarBinding(b.var, value))
    func = relax.Function(params + const_params,
                          relax.SeqExpr([relax.DataflowBlock(bindings)], func.body.body),
                          func.ret_ty, func.is_pure, func.attrs)
    func = relax.BlockBuilder().normalize(func)
    if operator is not None:
        for key, value in {**operator.attrs(), KERNEL_HASH_ATTR: kernel_hash(func)}.items():
            func = func.with_attr(key, value)
    return func, [*inputs, *consts]


# ============================================================================ TFLite import
def _sanitize(name: str) -> str:
    name = re.sub(r"[^0-9A-Za-z_]+", "_", name).strip("_")
    return name if name[:1].isalpha() or name[:1] == "_" else f"t_{name}"


def tensor_var_names(model: TFLiteModel) -> dict[int, str]:
    """Tensor index -> Relax variable name, for every non-constant tensor: the TFLite name up to
    its first ``;`` (converters join the names of fused nodes with ``;``), without a first path
    component that most names share (``MobileNetV3Small_1/``), non-identifier characters as
    ``_``; repeated names get ``_1``, ``_2``... suffixes."""
    heads = {t.index: (t.name.split(";")[0] or f"tensor_{t.index}") for t in model.tensors
             if t.data is None}
    firsts = Counter(h.split("/")[0] for h in heads.values() if "/" in h)
    common = [p for p, n in firsts.items() if 2 * n > len(heads)]
    out: dict[int, str] = {}
    taken: set[str] = set()
    for index, head in heads.items():
        if common and head.startswith(common[0] + "/"):
            head = head[len(common[0]) + 1:]
        name = unique_name(_sanitize(head) or f"tensor_{index}", taken, start=1)
        taken.add(name)
        out[index] = name
    return out


class _Op:
    """Accessors for lowering one operator (errors name it, like the reference's)."""

    def __init__(self, model: TFLiteModel, op: Operator):
        self.model, self.op = model, op
        self.out = model.tensors[op.outputs[0]]

    def tensor(self, i: int):
        j = self.op.inputs[i] if i < len(self.op.inputs) else -1
        return self.model.tensors[j] if j >= 0 else None

    def scale_zp(self, i: int | None = None) -> tuple[float, int]:
        t = self.out if i is None else self.tensor(i)
        return t.quant.scalar_scale, t.quant.scalar_zero_point

    def bias(self):
        t = self.tensor(2)
        return None if t is None else t.data.reshape(-1)

    def activation_range(self) -> tuple[int, int]:
        return ref.activation_range(self.op.options.get("fused_activation_function", "NONE"),
                                    *self.scale_zp())

    def pool_params(self) -> ref.PoolParams:
        o = self.op.options
        kernel, stride = (o["filter_height"], o["filter_width"]), (o["stride_h"], o["stride_w"])
        padding = ref.same_padding(o.get("padding", "VALID"), self.tensor(0).shape[1:3], kernel,
                                   stride)
        return ref.PoolParams(kernel, stride, padding, *self.activation_range())


Lowering = Callable[[_Op], Callable[..., relax.Expr]]


def _lower_conv(c: _Op):
    params = ref.conv_params(c.model, c.op)
    w = c.tensor(1).data
    if c.op.op == "DEPTHWISE_CONV_2D":          # (1, KH, KW, C*M) -> (KH, KW, 1, C*M)
        hwio, groups = np.transpose(w, (1, 2, 0, 3)), c.tensor(0).shape[3]
    else:                                        # (O, KH, KW, I) -> (KH, KW, I, O)
        hwio, groups = np.transpose(w, (1, 2, 3, 0)), c.tensor(0).shape[3] // w.shape[3]
    bias = c.bias()
    return lambda x: conv2d_int8(x, hwio, bias, params, groups)


def _lower_fully_connected(c: _Op):
    w = c.tensor(1)
    requant = fully_connected_requant(c.scale_zp(0)[0], w.quant.scale, *c.scale_zp(),
                                      *c.activation_range())
    bias, shape, z_in = c.bias(), c.out.shape, c.scale_zp(0)[1]
    return lambda x: fully_connected_int8(x, w.data, bias, z_in, requant, shape)


def _lower_add(c: _Op):
    params = ref.add_params(*c.scale_zp(0), *c.scale_zp(1), *c.scale_zp(),
                            c.op.options.get("fused_activation_function", "NONE"))
    return lambda a, b: add_int8(a, b, params)


def _lower_mul(c: _Op):
    (sa, za), (sb, zb), (so, zo) = c.scale_zp(0), c.scale_zp(1), c.scale_zp()
    requant = ref.mul_requant(sa, sb, so, zo, c.op.options.get("fused_activation_function",
                                                               "NONE"))
    return lambda a, b: mul_int8(a, b, za, zb, requant)


def _lower_mean(c: _Op):
    axes = [int(a) for a in c.tensor(1).data.reshape(-1)]
    (si, zi), (so, zo) = c.scale_zp(0), c.scale_zp()
    m, s = ref.quantize_multiplier(float(si) / float(so))
    return lambda x: mean_int8(x, axes, c.out.shape, zi, m, s, zo)


def _lower_pad(c: _Op):
    paddings = [int(v) for v in c.tensor(1).data.reshape(-1)]
    value = c.scale_zp()[1] if c.out.dtype == "int8" else 0
    if c.tensor(2) is not None:
        value = int(c.tensor(2).data.reshape(-1)[0])
    return lambda x: R.nn.pad(x, paddings, pad_value=float(value))


def _lower_resize_nearest(c: _Op):
    _, h, w, _ = c.tensor(0).shape
    oh, ow = (int(s) for s in c.tensor(1).data.reshape(-1))
    o = c.op.options
    corners, half = bool(o.get("align_corners")), bool(o.get("half_pixel_centers"))
    # the reference's source indices, read off by resizing the indices themselves
    rows = ref.resize_nearest_neighbor(np.arange(h).reshape(1, h, 1, 1), (oh, 1), corners, half)
    cols = ref.resize_nearest_neighbor(np.arange(w).reshape(1, 1, w, 1), (1, ow), corners, half)
    rows = relax.const(rows.reshape(-1).astype(np.int32), "int32")
    cols = relax.const(cols.reshape(-1).astype(np.int32), "int32")
    return lambda x: R.take(R.take(x, rows, axis=1, mode="clip"), cols, axis=2, mode="clip")


def _lower_strided_slice(c: _Op):
    params = ref.strided_slice_params(c.model, c.op)
    shape = c.tensor(0).shape
    takes = [(k, relax.const(params.indices(k).astype(np.int32), "int32"))
             for k in range(len(shape))
             if (params.start[k], params.stride[k], params.count[k]) != (0, 1, shape[k])]

    def body(x):
        for axis, indices in takes:
            x = R.take(x, indices, axis=axis, mode="clip")
        return x if takes and not any(params.shrink) else R.reshape(x, c.out.shape)
    return body


def _lower_quantize(c: _Op):
    so, zo = c.scale_zp()
    if c.tensor(0).dtype == "float32":
        return lambda x: quantize_float(x, so, zo)
    si, zi = c.scale_zp(0)
    m, s = ref.quantize_multiplier(float(si) / float(so))
    table = table_of(lambda v: ref.requantize_int8(v, zi, m, s, zo))
    return lambda x: lookup_table(x, table)


def _lower_relu(c: _Op):
    table = relu_table(*c.scale_zp(0), *c.scale_zp())
    return lambda x: lookup_table(x, table)


def _lower_table(kernel_of: Callable[[_Op], Callable[[np.ndarray], np.ndarray]]) -> Lowering:
    def lower(c: _Op):
        table = table_of(kernel_of(c))
        return lambda x: lookup_table(x, table)
    return lower


def _lower_softmax(c: _Op):
    if c.tensor(0).dtype == "float32":
        beta = c.op.options.get("beta", 1.0)
        return lambda x: softmax_float(x, beta)
    if c.tensor(0).shape[-1] >= 1 << 12:     # the sum of 2^19-sized terms must fit in int32
        raise ref.ReferenceError(f"{c.model.where(c.op)} over "
                                 f"{counted(c.tensor(0).shape[-1], 'value')} overflows TFLite's "
                                 "int32 sum")
    params = ref.softmax_params(c.op.options.get("beta", 1.0), c.scale_zp(0)[0])
    return lambda x: softmax_int8(x, params)


def _lower_concatenation(c: _Op):
    axis = c.op.options.get("axis", 0) % len(c.out.shape)
    return lambda *xs: R.concat(xs, axis=axis)


_LOWER: dict[str, Lowering] = {
    "CONV_2D": _lower_conv,
    "DEPTHWISE_CONV_2D": _lower_conv,
    "FULLY_CONNECTED": _lower_fully_connected,
    "ADD": _lower_add,
    "MUL": _lower_mul,
    "MEAN": _lower_mean,
    "AVERAGE_POOL_2D": lambda c: lambda x: average_pool_int8(x, c.pool_params()),
    "MAX_POOL_2D": lambda c: lambda x: max_pool_int8(x, c.pool_params()),
    "PAD": _lower_pad,
    "PADV2": _lower_pad,
    "RESHAPE": lambda c: lambda x: R.reshape(x, c.out.shape),
    "TRANSPOSE": lambda c: lambda x: R.permute_dims(
        x, [int(p) for p in c.tensor(1).data.reshape(-1)]),
    "CONCATENATION": _lower_concatenation,
    "STRIDED_SLICE": _lower_strided_slice,
    "RESIZE_NEAREST_NEIGHBOR": _lower_resize_nearest,
    "QUANTIZE": _lower_quantize,
    "DEQUANTIZE": lambda c: lambda x: _dequantize(x, *c.scale_zp(0)),
    "RELU": _lower_relu,
    "RELU6": _lower_table(lambda c: lambda v: ref.relu6_int8(v, *c.scale_zp(0))),
    "HARD_SWISH": _lower_table(lambda c: lambda v, p=ref.hard_swish_params(
        *c.scale_zp(0), *c.scale_zp()): ref.hard_swish_int8(v, p)),
    "LOGISTIC": _lower_table(lambda c: lambda v, p=ref.logistic_params(
        *c.scale_zp(0)): ref.logistic_int8(v, p)),
    "SOFTMAX": _lower_softmax,
    "LOG_SOFTMAX": lambda c: log_softmax_float,
    "ARG_MAX": lambda c: lambda x: arg_max(
        x, int(c.tensor(1).data.reshape(-1)[0]) % len(c.tensor(0).shape), c.out.dtype),
}

def _lowering(op: Operator) -> Lowering:
    """The operator's lowering; an elementwise operator with onnxruntime's arithmetic is its
    table (:func:`.ort_arithmetic.unary_table`), the other onnxruntime operators keep
    TFLite's kernels, which the llvm route computes until it runs the kernel family."""
    if ort.is_onnxruntime(op.options) and op.op in ort.UNARY_OPS:
        def lower(c: _Op):
            if c.tensor(0).dtype != "int8":
                return _LOWER[op.op](c)
            table = ort.unary_table(op.op, c.scale_zp(0), c.scale_zp())
            return lambda x: lookup_table(x, table)
        return lower
    return _LOWER[op.op]


#: Operators whose every input is data (a constant one, e.g. a MUL by a constant, is passed to
#: the kernel like an activation); the others read only their activation inputs, constant inputs
#: (weights, shapes, axes) are part of their lowering.
_ALL_DATA = frozenset({"ADD", "MUL", "CONCATENATION"})

#: TFLite operators :func:`from_tflite` imports (int8 activations; QUANTIZE from float32 and
#: DEQUANTIZE to float32 at the edges, float32 SOFTMAX / LOG_SOFTMAX, ARG_MAX).
SUPPORTED_OPS = frozenset(_LOWER)


def emit_operator(bb: relax.BlockBuilder, op: str, inputs: Sequence, output: Sequence,
                  options: dict | None = None, name: str | None = None) -> relax.Var:
    """Emit one integer operator of :data:`SUPPORTED_OPS` into ``bb``'s current dataflow
    block, as :func:`from_tflite` writes it (a described kernel, so the module deploys to a
    microcontroller too), and return its variable. Building a model with ``BlockBuilder``::

        y = emit_operator(bb, "CONV_2D", [(x, 0.05, -3), (w, w_scales), (b, b_scales)],
                          ((1, 8, 8, 16), "int8", 0.1, -128),
                          {"padding": "SAME", "stride_h": 1, "stride_w": 1,
                           "fused_activation_function": "RELU6"})

    Each input is ``(value, scale, zero_point=0, axis=0)``, ``(value,)`` (no quantization) or
    None (an omitted optional input): ``value`` a Relax tensor expression of ``bb`` (an
    activation) or a numpy array (a constant, in TFLite's layout: OHWI filters, ``1 x KH x KW
    x C`` depthwise filters, per-channel scales along axis 0 / 3); ``output`` is ``(shape,
    dtype, scale, zero_point)``; ``options`` the TFLite builtin options (snake_case, as
    :mod:`.tflite_model` reads them). The operator is checked as TFLite Micro's ``Prepare``
    would (the reference interpreter's checks); errors name it."""
    tensors, op_inputs, activations = [], [], []
    for k, spec in enumerate(inputs):
        if spec is None:
            op_inputs.append(-1)
            continue
        value, *quant = spec
        scale, zero_point, axis = (list(quant) + [None, 0, 0][len(quant):])[:3]
        q = None if scale is None else Quantization(
            np.atleast_1d(np.asarray(scale, np.float32)),
            np.broadcast_to(np.atleast_1d(np.asarray(zero_point, np.int64)),
                            np.atleast_1d(scale).shape).copy(), int(axis))
        if isinstance(value, np.ndarray):
            data = np.ascontiguousarray(value)
            data.setflags(write=False)
            tensors.append(Tensor(len(tensors), f"{name or op.lower()}_input{k}", value.shape,
                                  str(value.dtype), q, data))
        else:
            ty = value.ty
            tname = value.name if isinstance(value, relax.Var) else f"input{k}"
            tensors.append(Tensor(len(tensors), tname,
                                  tuple(int(d) for d in ty.shape.values), str(ty.dtype.dtype), q))
            activations.append(value)
        op_inputs.append(tensors[-1].index)
    shape, dtype, scale, zero_point = output
    out_q = None if scale is None else Quantization(np.asarray([scale], np.float32),
                                                    np.asarray([zero_point], np.int64))
    out_name = name or op.lower()
    tensors.append(Tensor(len(tensors), out_name, tuple(shape), dtype, out_q))
    operator = Operator(0, op, tuple(op_inputs), (len(tensors) - 1,), dict(options or {}))
    graph_inputs = tuple(t.index for t in tensors[:-1] if t.data is None)
    model = TFLiteModel(out_name, tuple(tensors), (operator,), graph_inputs,
                        (len(tensors) - 1,), source=f"emit_operator({op})")
    check_operators(model, SUPPORTED_OPS, "Relax importer")
    ref.Interpreter(model)                      # the reference's checks, as from_tflite's
    body = _LOWER[op](_Op(model, operator))
    args = [activations.pop(0) if model.tensors[i].data is None
            else relax.const(model.tensors[i].data, model.tensors[i].dtype)
            for i in op_inputs if i >= 0 and (op in _ALL_DATA or model.tensors[i].data is None)]
    description = dataclasses.replace(describe_operator(model, operator), index=None)
    fname = f"{GRAPH_OPS.get(op, op.lower())}_{out_name}"
    func, call_args = kernel_function(fname, args, body, description)
    return bb.emit(relax.Call(bb.add_func(func, fname), call_args), name_hint=out_name)


def from_tflite(model: TFLiteModel | str | os.PathLike) -> tvm.IRModule:
    """Import an int8 TFLite model (a :class:`TFLiteModel` or a ``.tflite`` path) as a Relax
    module with integer semantics, bit-exact with TFLite Micro (see the module docstring).

    ``main`` takes the model's inputs (named after their tensors) in model order and returns its
    output, or a tuple of its outputs. Raises :class:`~.tflite_model.UnsupportedOperatorError`
    for an operator outside :data:`SUPPORTED_OPS` and :class:`~.reference.ReferenceError` (or
    the former) for one the reference interpreter rejects (same checks, same messages).
    """
    if not isinstance(model, TFLiteModel):
        model = load_tflite(model)
    check_operators(model, SUPPORTED_OPS, "Relax importer")
    ref.Interpreter(model)                      # the reference's validation of every operator
    names = tensor_var_names(model)
    values: dict[int, relax.Expr] = {}
    params = []
    for i in model.inputs:
        t = model.tensors[i]
        values[i] = relax.Var(names[i], relax.TensorType(t.shape, t.dtype))
        params.append(values[i])
    outputs = set(model.outputs)
    bb = relax.BlockBuilder()
    with bb.function("main", params):
        with bb.dataflow():
            for op in model.operators:
                body = _lowering(op)(_Op(model, op))
                inputs = [values[i] if model.tensors[i].data is None
                          else relax.const(model.tensors[i].data, model.tensors[i].dtype)
                          for i in op.inputs if i >= 0 and (
                              op.op in _ALL_DATA or model.tensors[i].data is None)]
                fname = f"{GRAPH_OPS.get(op.op, op.op.lower())}_{op.index}"
                func, args = kernel_function(fname, inputs, body,
                                             describe_operator(model, op))
                call = relax.Call(bb.add_func(func, fname), args)
                out = op.outputs[0]
                emit = bb.emit_output if out in outputs else bb.emit
                values[out] = emit(call, name_hint=names[out])
        results = [values[i] for i in model.outputs]
        bb.emit_func_output(results[0] if len(results) == 1 else relax.Tuple(results))
    return bb.get()
