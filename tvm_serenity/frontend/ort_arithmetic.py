"""onnxruntime's arithmetic on int8 QDQ models: the specification of every operator the ONNX
route lowers with ``"arithmetic": "onnxruntime"`` (its :class:`~.relax_import.
OperatorDescription` / :class:`~.tflite_model.Operator` options).

An ONNX QDQ model means what onnxruntime computes from it, and on x86-64 onnxruntime 1.32 (the
CPU execution provider, AVX2 with FMA, as docs/onnxruntime_arithmetic.md studied it) runs each
``DequantizeLinear -> op -> QuantizeLinear`` either as an integer kernel (``QLinearConv``,
``QGemm``, ...) or, where its graph rewrites leave mixed int8/uint8 types, as the float
operator between the two. :mod:`tvm_serenity.passes.ort_fakequant` decides which from the graph
and writes the operator as the TFLite builtin it resembles with three options:
``"arithmetic": "onnxruntime"``, ``"ort_kernel"`` (the onnxruntime kernel that runs it) and,
where the raw codes enter float arithmetic, ``"ort_dtype"`` (``"uint8"`` or ``"int8"``, the
element type that kernel runs in). :func:`prepare` gives the numpy kernel of such an operator to
:class:`~.reference.Interpreter`; every back end is checked against it. Tensors are int8 here
(a uint8 code is the int8 code plus 128, its zero point too).

Primitives: :func:`rne` (``cvtps2dq``, half to even), :func:`quantize_linear`
(``MlasQuantizeLinear``: ``x / scale`` in float32, clamped, half to even, plus the zero point),
:func:`dequantize_table` (``float32(q - zp) * scale`` for the 256 codes), :func:`fma32` (one
float32 fused multiply-add, exactly rounded) and :class:`OrtRequant`, ``MlasRequantizeOutput``
(``clamp(rne(float32(float32(acc) * scale))) + zp``) computed exactly in int64 by the algorithm
of the study's section 3 (:func:`requantize`), scales as onnxruntime computes them in float32.

=======================================  =========================================  ==========
onnxruntime kernel (``ort_kernel``)       arithmetic                                 vs ORT
=======================================  =========================================  ==========
QLinearConv, QGemm, QLinearMatMul         int32 accumulator, requantized with         exact
                                          ``fl(fl(xs * ws[c]) / ys)``
QLinearMul                                ``(a - az)(b - bz)``, ``fl(fl(as * bs)/cs)`` exact
QLinearGlobalAveragePool (MEAN)           ``sum - xz * N``, ``fl(xs / fl(ys * N))``   exact
QLinearAdd                                ``fma(a, as/cs, fma(b, bs/cs, fixed))`` on  exact
                                          the raw codes (``MlasQLinearAddKernelAvx2``)
Add, Mul (float, between DQ and Q)        ``Q(fl(DQ(a) op DQ(b)))``                   exact
QLinearAveragePool, AveragePool,          float32 sums in the MLAS kernel's order,    exact
GlobalAveragePool (float)                 ``/ count``, then Q (QLinearAveragePool adds
                                          its type's zero point in float32)
QLinearSoftmax                            256-entry exp table (double), float32 sum   exact [1]
Softmax (float)                           MLAS's exp polynomial (FMA), lane sums,     exact [2]
                                          ``* (1 / sum)``, then Q
Gemm, MatMul (float, one row)             ``MlasSgemmKernelM1``: products in groups   exact
                                          of 4 (multiply, add), each added to bias
QLinearConcat, Concat (float)             a table ``Q_y(DQ_x(v))`` per input          exact
Relu, Clip, QuantizeLinear (int8),        256-entry tables of the float function      exact [3]
QLinearSigmoid, HardSwish                 (Sigmoid: MLAS's rational polynomial)
MaxPool, Reshape, Flatten, Transpose      integer max, data movement                  exact
QuantizeLinear (float input)              :func:`quantize_linear`                     exact
Conv (float, between DQ and Q)            QLinearConv's arithmetic                    1 LSB [4]
Gemm / MatMul (float, several rows)       the one-row formula per row                 1 LSB [4]
=======================================  =========================================  ==========

[1] the table's ``exp`` is the C library's, as onnxruntime's (glibc's on Linux; another
libm may differ in the last bit of a double, which the float32 rounding hides except on a
tie). [2] over at most 16
values per row (one AVX-512 vector; a longer row's lane order is the 16-lane one). [3] the
float functions are evaluated once per code at compile time. [4] MLAS computes a float Conv
(and a several-row Gemm) with FMA in its own summation order (blocked SGEMM, NCHWc kernels),
which is not reproduced: the integer accumulator is exact where the float sum has rounding
errors of about ``sqrt(K)`` ulps, so the two differ only where ``y / scale`` lies within such
an error of a rounding boundary (measured: BENCHMARKS.md ``onnx``).

On ARM onnxruntime fuses every operator in int8 and its QLinearAdd uses fixed point: these
results are x86's (docs/onnxruntime_arithmetic.md section 4).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from . import reference as ref
from .reference import INT8_MAX, INT8_MIN, ReferenceError
from .tflite_model import UnsupportedOperatorError

__all__ = ["ONNXRUNTIME", "ARITHMETIC", "KERNEL", "DTYPE", "FLOAT_KERNELS", "is_onnxruntime",
           "reproduced", "rne", "fma32", "quantize_linear", "dequantize_table", "scale_parts",
           "requantize", "OrtRequant", "requant_of", "conv_params", "AddParams", "add_params",
           "elementwise_params", "add_int8", "PoolParams", "pool_params",
           "average_pool_params", "average_pool", "global_mean", "global_average",
           "mean_requant", "fully_connected_params", "SoftmaxParams", "softmax_params",
           "softmax", "FullyConnectedFloat", "fully_connected_float", "unary_table",
           "mlas_logistic", "mlas_exp", "prepare"]

ONNXRUNTIME = "onnxruntime"
ARITHMETIC = "arithmetic"       # option: whose arithmetic the operator follows
KERNEL = "ort_kernel"           # option: the onnxruntime kernel that runs it
DTYPE = "ort_dtype"             # option: the element type it runs in ("uint8" or "int8")
f32, f64 = np.float32, np.float64
_CODES = np.arange(INT8_MIN, INT8_MAX + 1, dtype=np.int64)     # the 256 int8 codes


#: the ``ort_kernel`` values onnxruntime runs in float (between DequantizeLinear and
#: QuantizeLinear).
FLOAT_KERNELS = frozenset({"Conv", "Gemm", "MatMul", "Add", "Mul", "AveragePool",
                           "GlobalAveragePool", "Softmax"})


def is_onnxruntime(options) -> bool:
    """Whether an operator's options ask for onnxruntime's arithmetic."""
    return options.get(ARITHMETIC) == ONNXRUNTIME


def reproduced(model, op) -> bool:
    """Whether ``op`` computes exactly onnxruntime's values: all but a float Conv and a
    several-row float Gemm / MatMul, whose MLAS summation order is not reproduced (within
    1 LSB, note [4] above)."""
    kernel = op.options.get(KERNEL)
    out = model.tensors[op.outputs[0]]
    return not (kernel == "Conv" or kernel in ("Gemm", "MatMul")
                and out.size > out.shape[-1])


# ============================================================================== primitives
def rne(v) -> np.ndarray:
    """float32 -> int64, round half to even (``cvtps2dq``, ``nearbyintf``)."""
    return np.rint(np.asarray(v, f32)).astype(np.int64)


def fma32(a, b, c) -> np.ndarray:
    """``fmaf(a, b, c)``: ``a * b + c`` of float32 values rounded once to float32 (half to
    even). The product is exact in float64; the sum's rounding error is recovered exactly
    (Knuth's TwoSum), which decides the one case where rounding the float64 sum to float32 is
    wrong: a sum exactly halfway between two float32 values whose error is not zero."""
    a, b, c = np.broadcast_arrays(*(np.asarray(v, f32) for v in (a, b, c)))
    p = a.astype(f64) * b.astype(f64)
    cc = c.astype(f64)
    s = p + cc
    bb = s - p
    err = (p - (s - bb)) + (cc - bb)
    r = s.astype(f32)
    d = s - r.astype(f64)                   # exact (Sterbenz)
    other = r.astype(f64) + 2 * d           # the neighbour beyond s when s is a tie
    tie = (d != 0) & (other.astype(f32).astype(f64) == other)
    return np.where(tie & (err * d > 0), other.astype(f32), r)


def quantize_linear(x, scale: float, zero_point: int, lo: int = INT8_MIN,
                    hi: int = INT8_MAX) -> np.ndarray:
    """``MlasQuantizeLinear``: ``x / scale`` (a float32 division), clamped to ``[lo - zp,
    hi - zp]`` in float32 as ``maxps`` then ``minps`` do (a NaN becomes the low bound),
    rounded half to even, plus the zero point (int64)."""
    v = np.asarray(x, f32) / f32(scale)
    low, high = f32(lo - zero_point), f32(hi - zero_point)
    v = np.where(v > low, v, low)
    v = np.where(v < high, v, high)
    return rne(v) + int(zero_point)


def dequantize_table(scale: float, zero_point: int) -> np.ndarray:
    """``DequantizeLinear`` of the 256 int8 codes: ``float32(q - zp) * scale``, one float32
    rounding; ``table[q + 128]``."""
    return (_CODES - int(zero_point)).astype(f32) * f32(scale)


def scale_parts(scale: float) -> tuple[int, int]:
    """``(M, E)`` with ``float32(scale) = M * 2^-E`` and ``M`` in ``[2^23, 2^24)``: the float's
    24-bit significand and exponent (a zero, subnormal, negative or non-finite scale is
    refused; none of onnxruntime's requantization scales is one)."""
    s = f32(scale)
    if not (math.isfinite(float(s)) and s >= np.finfo(f32).tiny):
        raise ReferenceError(f"requantization scale {float(s):g} is not a positive normal "
                             "float32")
    bits = int(np.asarray(s).view(np.uint32))
    return (bits & 0x7FFFFF) | 0x800000, 150 - (bits >> 23)


def _round_float32(u: np.ndarray) -> np.ndarray:
    """Non-negative int64 values rounded to 24 significant bits, half to even (the value of
    their float32 conversion)."""
    u = np.asarray(u, np.int64)
    drop = np.maximum(np.frexp(u.astype(f64))[1] - 24, 0)   # bit length - 24 (exact: < 2^53)
    drop = np.where(u >> np.minimum(drop, 62) >= 1 << 24, drop + 1, drop)   # frexp rounds
    kept = u >> drop
    rest = u - (kept << drop)
    half = np.where(drop > 0, np.int64(1) << np.maximum(drop - 1, 0), 1)
    up = (drop > 0) & ((rest > half) | ((rest == half) & (kept & 1 == 1)))
    return (kept + up) << drop


def requantize(acc, multiplier, shift, zero_point: int, act_min: int = INT8_MIN,
               act_max: int = INT8_MAX) -> np.ndarray:
    """``MlasRequantizeOutput`` in int64, exactly (study section 3): with the scale
    ``M * 2^-E`` (:func:`scale_parts`), ``a = float32(acc)`` (24 significant bits),
    ``p = float32(a * M)`` (the exact product rounded to 24 bits), ``rne(p * 2^-E)``, clamped
    to ``[act_min - zp, act_max - zp]``, plus ``zp``. ``multiplier``/``shift`` broadcast along
    the last axis (per channel)."""
    acc = np.asarray(acc, np.int64)
    sign = np.where(acc < 0, -1, 1)
    p = _round_float32(_round_float32(np.abs(acc)) * np.asarray(multiplier, np.int64))
    e = np.minimum(np.asarray(shift, np.int64), 62)          # |p| < 2^56: 2^-62 rounds to 0
    kept = p >> e
    rest = p - (kept << e)
    half = np.int64(1) << (e - 1)
    r = kept + ((rest > half) | ((rest == half) & (kept & 1 == 1)))
    out = np.clip(sign * r, act_min - zero_point, act_max - zero_point) + zero_point
    return out.astype(np.int8)


@dataclass(frozen=True)
class OrtRequant(ref.Requant):
    """An int32 accumulator to int8 as :func:`requantize` computes it; ``multiplier`` /
    ``shift`` are ``(M, E)`` of each scale (arrays along the last axis, or scalars). A
    :class:`~.reference.Requant` with onnxruntime's formula, so the reference's integer
    kernels (convolutions, fully connected) accumulate and hand over to it."""

    def __call__(self, acc) -> np.ndarray:
        return requantize(acc, self.multiplier, self.shift, self.output_zero_point,
                          self.act_min, self.act_max)


def requant_of(scales, zero_point: int, act: tuple[int, int] = (INT8_MIN, INT8_MAX)
               ) -> OrtRequant:
    """:class:`OrtRequant` of float32 scales (one, or one per channel)."""
    parts = [scale_parts(s) for s in np.atleast_1d(np.asarray(scales, f32))]
    return OrtRequant(np.array([p[0] for p in parts], np.int64),
                      np.array([p[1] for p in parts], np.int64), int(zero_point), *act)


def activation_bounds(activation: str, scale: float, zero_point: int) -> tuple[int, int]:
    """The codes a float Relu / Clip(0, 6) / Clip(-1, 1) before a QuantizeLinear leaves:
    ``Q(max(y, 0)) = max(Q(y), Q(0))`` as ``Q`` is monotone, the bounds quantized by
    :func:`quantize_linear`."""
    bounds = {"NONE": (None, None), "RELU": (0.0, None), "RELU6": (0.0, 6.0),
              "RELU_N1_TO_1": (-1.0, 1.0)}.get(activation)
    if bounds is None:
        raise ReferenceError(f"fused activation {activation} has no onnxruntime form")
    lo, hi = (INT8_MIN if b is None and k == 0 else INT8_MAX if b is None
              else int(quantize_linear(f32(b), scale, zero_point)) for k, b in enumerate(bounds))
    return lo, hi


def conv_params(model, op) -> ref.ConvParams:
    """The :class:`~.reference.ConvParams` of a CONV_2D / DEPTHWISE_CONV_2D run as
    QLinearConv: per output channel the scale ``fl(fl(xs * ws[c]) / ys)``."""
    p = ref.conv_params(model, op)           # geometry and TFLM's checks
    x, w, out = (model.tensors[i] for i in (op.inputs[0], op.inputs[1], op.outputs[0]))
    cout = out.shape[-1]
    ws = np.broadcast_to(np.asarray(w.quant.scale, f32), (cout,))
    scales = (f32(x.quant.scalar_scale) * ws) / f32(out.quant.scalar_scale)
    act = activation_bounds(op.options.get("fused_activation_function", "NONE"),
                            out.quant.scalar_scale, out.quant.scalar_zero_point)
    return ref.ConvParams(p.stride, p.dilation, p.padding, p.input_zero_point,
                          requant_of(scales, out.quant.scalar_zero_point, act))


def mean_requant(input_scale: float, output_scale: float, count: int, zero_point: int
                 ) -> OrtRequant:
    """QLinearGlobalAveragePool's requantization: ``fl(xs / fl(ys * N))``; onnxruntime refuses
    a scale below 2^-32 or of 256 or more (``CheckQLinearGlobalAveragePoolScaleAndSize``)."""
    scale = f32(input_scale) / (f32(output_scale) * f32(count))
    if not 2.0 ** -32 <= scale < 256.0:
        raise ReferenceError(f"QLinearGlobalAveragePool scale {float(scale):g} is outside "
                             "[2^-32, 256), which onnxruntime refuses")
    return requant_of(scale, zero_point)


# =========================================================================== elementwise
@dataclass(frozen=True)
class AddParams:
    """ADD / MUL between two same-shape tensors. ``QLinearAdd`` (``kernel``) runs
    ``MlasQLinearAddKernelAvx2`` on the raw codes ``c`` of its element type (the int8 code
    plus ``offset``: 128 for uint8): ``v = fma(c_a, ratio_a, table[b + 128])`` with
    ``table[b + 128] = fma(c_b, ratio_b, fixed)``, ``fixed = zc - fma(ratio_a, za,
    ratio_b * zb)`` (onnxruntime's build contracts that expression too), then ``rne``,
    saturated to the type, minus ``offset``. The float ``Add`` / ``Mul`` between
    DequantizeLinear and QuantizeLinear: ``Q(fl(DQ(a) op DQ(b)))`` with ``table`` and
    ``table_a`` the two inputs' dequantization tables. ``QLinearMul``: ``requant``."""

    kernel: str
    table: np.ndarray                     # float32[256]
    table_a: np.ndarray | None = None     # float32[256] (float Add / Mul)
    ratio_a: float = 0.0
    offset: int = 0
    output_scale: float = 1.0
    output_zero_point: int = 0
    act: tuple[int, int] = (INT8_MIN, INT8_MAX)
    zero_points: tuple[int, int] = (0, 0)       # QLinearMul's input zero points
    requant: OrtRequant | None = None           # QLinearMul


def add_params(kernel: str, a: tuple[float, int], b: tuple[float, int], out: tuple[float, int],
               dtype: str = "uint8", activation: str = "NONE") -> AddParams:
    """The :class:`AddParams` of ``kernel`` (QLinearAdd, QLinearMul, Add, Mul) for inputs
    quantized ``(scale, zero point)`` as ``a``, ``b`` and the output as ``out`` (int8 zero
    points; ``dtype`` the QLinear kernel's element type)."""
    (sa, za), (sb, zb), (sc, zc) = ((f32(s), int(z)) for s, z in (a, b, out))
    act = activation_bounds(activation, sc, zc)
    if kernel == "QLinearAdd":
        offset = 128 if dtype == "uint8" else 0
        ra, rb = sa / sc, sb / sc
        fixed = f32(zc + offset) - fma32(ra, f32(za + offset), rb * f32(zb + offset))
        table = fma32((_CODES + offset).astype(f32), rb, fixed)
        return AddParams(kernel, table, None, float(ra), offset, float(sc), zc, act)
    if kernel == "QLinearMul":
        requant = requant_of((sa * sb) / sc, zc, act)
        return AddParams(kernel, np.zeros(256, f32), None, 0.0, 0, float(sc), zc, act,
                         (za, zb), requant)
    if kernel in ("Add", "Mul"):
        return AddParams(kernel, dequantize_table(sb, zb), dequantize_table(sa, za), 0.0, 0,
                         float(sc), zc, act)
    raise ReferenceError(f"no onnxruntime arithmetic for an elementwise {kernel}")


def add_int8(a: np.ndarray, b: np.ndarray, p: AddParams) -> np.ndarray:
    """ADD / MUL of two same-shape int8 tensors as :class:`AddParams` says."""
    ia, ib = np.asarray(a, np.int64) + 128, np.asarray(b, np.int64) + 128
    lo, hi = p.act
    if p.kernel == "QLinearAdd":
        v = fma32((ia - 128 + p.offset).astype(f32), f32(p.ratio_a), p.table[ib])
        top = 255 if p.offset else INT8_MAX
        q = np.clip(rne(v), top - 255, top) - p.offset
        return np.clip(q, lo, hi).astype(np.int8)
    if p.kernel == "QLinearMul":
        za, zb = p.zero_points
        return p.requant((ia - 128 - za) * (ib - 128 - zb))
    y = p.table_a[ia] + p.table[ib] if p.kernel == "Add" else p.table_a[ia] * p.table[ib]
    return quantize_linear(y, p.output_scale, p.output_zero_point, lo, hi).astype(np.int8)


# =============================================================================== pooling
#: The summation orders of the average pools (:func:`average_pool`).
ORDERS = ("generic", "vector", "global")


@dataclass(frozen=True)
class PoolParams:
    """An average pool as onnxruntime computes it: ``table`` dequantizes the codes,
    ``order`` is how the window is summed in float32 (:func:`average_pool`),
    ``include_pad`` whether padding counts in the divisor; ``qlinear``: QLinearAveragePool's
    output ``rne(fl(fl(y / ys) + yz))``, else QuantizeLinear's."""

    kernel: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int, int, int]        # top, bottom, left, right
    table: np.ndarray
    order: str
    include_pad: bool
    qlinear: bool
    output_scale: float
    output_zero_point: int
    offset: int = 0             # 128: QLinearAveragePool runs in uint8 (its zero point +128)


def pool_order(kernel, stride, padding, in_hw, qlinear: bool) -> str:
    """The order MLAS sums a float average pool's window in (``MlasPool`` picks the kernel):
    ``"global"`` (``MlasPoolGlobalKernel``, the window is the input, stride 1, no padding:
    four float32 lanes over the flattened window, ``(l0 + l2) + (l1 + l3)``, then the tail),
    ``"vector"`` (``MlasPool2DVectorKernel``, stride width <= 2 and windows of at most 32:
    each column's in-bounds rows summed from the first, then the window's columns from the
    first) or ``"generic"`` (``MlasPool2DKernel``: from 0.0, row by row). QLinearAveragePool
    always sums like the generic kernel."""
    if qlinear:
        return "generic"
    if tuple(kernel) == tuple(in_hw) and tuple(stride) == (1, 1) and not any(padding):
        return "global"
    if stride[1] <= 2 and max(kernel) <= 32:
        return "vector"
    return "generic"


def pool_params(kernel: str, x: tuple[float, int], out: tuple[float, int], window, stride,
                padding, in_hw, include_pad: bool, dtype: str = "uint8") -> PoolParams:
    """The :class:`PoolParams` of an AVERAGE_POOL_2D run as ``kernel`` (QLinearAveragePool,
    in ``dtype``, or AveragePool) or a global MEAN run as GlobalAveragePool (float)."""
    qlinear = kernel == "QLinearAveragePool"
    if kernel not in ("QLinearAveragePool", "AveragePool", "GlobalAveragePool"):
        raise ReferenceError(f"no onnxruntime arithmetic for an average pool run as {kernel}")
    return PoolParams(tuple(window), tuple(stride), tuple(padding), dequantize_table(*x),
                      pool_order(window, stride, padding, in_hw, qlinear), bool(include_pad),
                      qlinear, float(f32(out[0])), int(out[1]),
                      128 if qlinear and dtype == "uint8" else 0)


def _window_sum(values: np.ndarray, order: str, width: int) -> np.ndarray:
    """The float32 sum over axis 1 of ``values`` (``(n, taps)``, the window's in-bounds taps
    row by row, ``width`` of them per row) in ``order``."""
    n, taps = values.shape
    if order == "generic":
        total = np.zeros(n, f32)
        for t in range(taps):
            total = total + values[:, t]
        return total
    if order == "global":
        lanes = np.zeros((n, 4), f32)
        body = taps // 4 * 4
        for t in range(body):
            lanes[:, t % 4] = lanes[:, t % 4] + values[:, t]
        total = (lanes[:, 0] + lanes[:, 2]) + (lanes[:, 1] + lanes[:, 3])
        for t in range(body, taps):
            total = total + values[:, t]
        return total
    rows = values.reshape(n, taps // width, width)
    columns = rows[:, 0]
    for r in range(1, rows.shape[1]):
        columns = columns + rows[:, r]
    total = columns[:, 0]
    for c in range(1, width):
        total = total + columns[:, c]
    return total


def average_pool(x: np.ndarray, p: PoolParams) -> np.ndarray:
    """An NHWC int8 average pool as onnxruntime computes it: the in-bounds taps dequantized
    (``p.table``), summed in float32 in ``p.order`` (:func:`pool_order`; a padding tap adds
    +0.0, which changes no float32 sum), divided by the tap count (or the window's size with
    ``include_pad``) in float32, then quantized: QLinearAveragePool's ``rne(fl(fl(y / ys) +
    yz))`` clamped, or QuantizeLinear."""
    n, h, w, c = x.shape
    (kh, kw), (sh, sw) = p.kernel, p.stride
    top, bottom, left, right = p.padding
    oh, ow = ref.output_size(h, kh, sh, 1, top, bottom), ref.output_size(w, kw, sw, 1, left,
                                                                          right)
    xf = p.table[np.asarray(x, np.int64) + 128]
    out = np.empty((n, oh, ow, c), np.int64)
    for i in range(oh):
        h0, h1 = max(i * sh - top, 0), min(i * sh - top + kh, h)
        for j in range(ow):
            w0, w1 = max(j * sw - left, 0), min(j * sw - left + kw, w)
            if h1 <= h0 or w1 <= w0:
                raise ReferenceError("average pool: a window lies entirely in the padding")
            taps = xf[:, h0:h1, w0:w1, :].transpose(0, 3, 1, 2).reshape(n * c, -1)
            total = _window_sum(taps, p.order, w1 - w0)
            count = f32(kh * kw if p.include_pad else (h1 - h0) * (w1 - w0))
            y = total / count
            if p.qlinear:       # the zero point of the kernel's type is added in float32
                z = p.output_zero_point + p.offset
                q = np.clip(rne(y / f32(p.output_scale) + f32(z)), p.offset - 128,
                            p.offset + 127) - p.offset
            else:
                q = quantize_linear(y, p.output_scale, p.output_zero_point)
            out[:, i, j, :] = q.reshape(n, c)
    return out.astype(np.int8)


# =============================================================================== softmax
@dataclass(frozen=True)
class SoftmaxParams:
    """SOFTMAX over the last axis. QLinearSoftmax (``qlinear``): ``table[d]`` is the float32
    term of a value ``d`` below the row's maximum (``exp((255 - d - 255 + shift) * xs)`` in
    double, ``shift = max(0, ln(FLT_MAX / D) - 5) / xs``), ``divisor_scale = floor(1 / ys)``;
    per value ``rne(fl(t * divisor_scale) / sum) + yzp`` capped at 255 in uint8, and in int8
    wrapped (onnxruntime casts the capped value). Float Softmax: ``table`` dequantizes."""

    qlinear: bool
    table: np.ndarray               # float32[256]
    divisor_scale: float
    output_scale: float
    output_zero_point: int
    offset: int                     # 128: QLinearSoftmax runs in uint8


def softmax_params(kernel: str, x: tuple[float, int], out: tuple[float, int], depth: int,
                   dtype: str = "uint8") -> SoftmaxParams:
    """The :class:`SoftmaxParams` of a SOFTMAX run as ``kernel`` (QLinearSoftmax or
    Softmax) over rows of ``depth`` values."""
    xs, ys = f32(x[0]), f32(out[0])
    if kernel == "Softmax":
        return SoftmaxParams(False, dequantize_table(*x), 0.0, float(ys), int(out[1]), 0)
    if kernel != "QLinearSoftmax":
        raise ReferenceError(f"no onnxruntime arithmetic for a softmax run as {kernel}")
    shift = max(0.0, math.log(float(np.finfo(f32).max) / depth) - 5) / float(xs)
    above = np.arange(256, dtype=f64) - 255           # code - 255 (the maximum's index)
    by_code = np.array([math.exp(v) for v in (above + shift) * float(xs)]).astype(f32)
    table = by_code[::-1].copy()                        # table[d]: d below the maximum
    divisor = f32(np.floor(f32(1) / ys))
    with np.errstate(over="ignore"):
        if not np.isfinite(table[0] * divisor):
            raise ReferenceError(f"QLinearSoftmax with output scale {float(ys):g} over "
                                 f"{depth} values: onnxruntime's float32 product "
                                 "table * floor(1 / scale) overflows")
    return SoftmaxParams(True, table, float(divisor), float(ys), int(out[1]),
                         128 if dtype == "uint8" else 0)


def mlas_exp(x: np.ndarray) -> np.ndarray:
    """MLAS's float32 ``exp`` of the softmax kernels (``MlasComputeSumExpF32Kernel``,
    ``MlasExpConstants``): ``x`` clamped below at -88.376, ``x / ln 2`` rounded by adding
    ``1.5 * 2^23``, the reduced argument by two FMAs with ln 2 in two parts, a degree-6
    polynomial by FMAs, scaled by the power of two built in the exponent bits."""
    c = _EXP_CONSTANTS
    x = np.maximum(np.asarray(x, f32), c["lower"])
    biased = fma32(x, c["log2_reciprocal"], c["rounding_bias"])
    m = biased - c["rounding_bias"]
    r = fma32(m, c["log2_low"], fma32(m, c["log2_high"], x))
    p = c["p"][0]
    for coefficient in (*c["p"][1:], c["p"][-1]):
        p = fma32(p, r, coefficient)
    bits = (np.asarray(biased, f32).view(np.int32).astype(np.int64) << 23) + 0x3F800000
    return p * (bits & 0xFFFFFFFF).astype(np.uint32).view(f32)


_EXP_CONSTANTS = {"lower": f32(-88.3762626647949), "rounding_bias": f32(12582912.0),
                  "log2_reciprocal": f32(1.44269504088896341),
                  "log2_high": f32(-6.93145752e-1), "log2_low": f32(-1.42860677e-6),
                  "p": tuple(f32(float.fromhex(h)) for h in (
                      "0x1.694000p-10", "0x1.125edcp-7", "0x1.555b5ap-5", "0x1.555450p-3",
                      "0x1.fffff6p-2", "0x1.000000p+0"))}
SOFTMAX_LANES = 16      # float32 accumulators of MLAS's AVX-512 sum of exponentials


def _lane_sum(e: np.ndarray) -> np.ndarray:
    """MLAS's sum of a row's exponentials (axis 1): 16 lanes accumulating the values in
    order, the two halves added lane by lane, then ``((l0 + l1) + (l2 + l3)) ... `` as
    ``vhaddps`` reduces eight lanes."""
    lanes = np.zeros((e.shape[0], SOFTMAX_LANES), f32)
    for k in range(e.shape[1]):
        lanes[:, k % SOFTMAX_LANES] = lanes[:, k % SOFTMAX_LANES] + e[:, k]
    half = lanes[:, :8] + lanes[:, 8:]
    low = (half[:, 0] + half[:, 1]) + (half[:, 2] + half[:, 3])
    high = (half[:, 4] + half[:, 5]) + (half[:, 6] + half[:, 7])
    return high + low


def softmax(x: np.ndarray, p: SoftmaxParams) -> np.ndarray:
    """SOFTMAX of int8 ``x`` over its last axis as :class:`SoftmaxParams` says."""
    shape = x.shape
    v = np.asarray(x, np.int64).reshape(-1, shape[-1])
    top = v.max(axis=1, keepdims=True)
    if p.qlinear:
        t = p.table[top - v]
        total = np.zeros(v.shape[0], f32)
        for k in range(v.shape[1]):
            total = total + t[:, k]
        q = rne((t * f32(p.divisor_scale)) / total[:, None]) + p.output_zero_point + p.offset
        q = np.minimum(q, 255) - p.offset
        out = (q + 128) % 256 - 128 if not p.offset else q      # int8: the cast wraps
        return out.astype(np.int8).reshape(shape)
    xf = p.table[v + 128]
    e = mlas_exp(-p.table[top + 128] + xf)
    y = e * (f32(1) / _lane_sum(e))[:, None]
    return quantize_linear(y, p.output_scale, p.output_zero_point).astype(np.int8).reshape(
        shape)


# ======================================================================= fully connected
@dataclass(frozen=True)
class FullyConnectedFloat:
    """A float Gemm / MatMul between DequantizeLinear and QuantizeLinear, computed as
    ``MlasSgemmKernelM1`` computes one row: ``table`` dequantizes the input codes, weights
    are ``fl(w * weight_scales[u])``, the products of each group of four (then two, then one)
    depth values are summed left to right (a multiply, then an add: no FMA) and each group's
    sum is added to the output, which starts at the dequantized bias
    ``fl(float(b) * bias_scales[u])`` (or the first group without bias); then
    QuantizeLinear."""

    table: np.ndarray
    weight_scales: np.ndarray       # float32 per unit
    bias: np.ndarray | None         # float32 per unit
    output_scale: float
    output_zero_point: int
    act: tuple[int, int]


def fully_connected_float(x: np.ndarray, weights: np.ndarray, p: FullyConnectedFloat
                          ) -> np.ndarray:
    """FULLY_CONNECTED run as a float Gemm (:class:`FullyConnectedFloat`): int8 ``x`` read as
    rows of the ``(units, depth)`` weights' depth; returns ``(rows, units)``."""
    units, depth = weights.shape
    a = p.table[np.asarray(x, np.int64).reshape(-1, depth) + 128]
    b = (np.asarray(weights, np.int64).astype(f32) * p.weight_scales[:, None]).T
    groups = [(k, 4) for k in range(0, depth - 3, 4)]
    k = len(groups) * 4
    if depth - k >= 2:
        groups.append((k, 2))
        k += 2
    if depth > k:
        groups.append((k, 1))
    c = None if p.bias is None else np.broadcast_to(p.bias, (a.shape[0], units)).copy()
    for k0, size in groups:
        t = a[:, k0:k0 + 1] * b[k0:k0 + 1]
        for i in range(1, size):
            t = t + a[:, k0 + i:k0 + i + 1] * b[k0 + i:k0 + i + 1]
        c = t if c is None else t + c
    return quantize_linear(c, p.output_scale, p.output_zero_point, *p.act).astype(np.int8)


# ================================================================================ tables
def mlas_logistic(x) -> np.ndarray:
    """MLAS's float32 logistic (``MlasComputeLogistic``, FMA3/AVX-512 kernels): ``x``
    clamped to [-18, 18], ``x * p(x^2) / q(x^2) + 0.5`` with the polynomials evaluated by
    FMAs, clamped below at 0."""
    x = np.minimum(np.maximum(np.asarray(x, f32), f32(-18)), f32(18))
    x2 = x * x
    p = fma32(x2, _LOGISTIC_P[0], _LOGISTIC_P[1])
    for a in _LOGISTIC_P[2:]:
        p = fma32(x2, p, a)
    q = fma32(x2, _LOGISTIC_Q[0], _LOGISTIC_Q[1])
    for b in _LOGISTIC_Q[2:]:
        q = fma32(x2, q, b)
    return np.maximum((x * p) / q + f32(0.5), f32(0))


_LOGISTIC_P = tuple(f32(v) for v in (4.37031012579801e-11, 1.15627324459942e-07,
                                     6.08574864600143e-05, 8.51377133304701e-03,
                                     2.48287947061529e-01))
_LOGISTIC_Q = tuple(f32(v) for v in (6.10247389755681e-13, 5.76102136993427e-09,
                                     6.29106785017040e-06, 1.70198817374094e-03,
                                     1.16817656904453e-01, 9.93151921023180e-01))


def _hard_swish(x: np.ndarray) -> np.ndarray:
    """HardSwish as onnxruntime runs it after splitting it (HardSigmoid, then Mul):
    ``x * min(max(x * (1/6) + 0.5, 0), 1)`` in float32."""
    return x * np.minimum(np.maximum(x * f32(1 / 6) + f32(0.5), f32(0)), f32(1))


#: Float functions of the elementwise operators, applied to dequantized codes (a
#: QUANTIZE of a float32 input is :func:`quantize_linear` instead).
_UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "QUANTIZE": lambda v: v,
    "RELU": lambda v: np.maximum(v, f32(0)),
    "RELU6": lambda v: np.minimum(np.maximum(v, f32(0)), f32(6)),
    "RELU_N1_TO_1": lambda v: np.minimum(np.maximum(v, f32(-1)), f32(1)),
    "LOGISTIC": mlas_logistic,
    "HARD_SWISH": _hard_swish}


UNARY_OPS = frozenset(_UNARY)


def unary_table(op: str, x: tuple[float, int], out: tuple[float, int]) -> np.ndarray:
    """The int8 lookup table (``table[q + 128]``) of an elementwise operator run between
    DequantizeLinear and QuantizeLinear (Relu, Clip, a requantizing QuantizeLinear, Sigmoid
    as QLinearSigmoid builds its table, HardSwish): ``Q_out(f(DQ_in(q)))``."""
    if op not in _UNARY:
        raise ReferenceError(f"no onnxruntime table for {op}")
    return quantize_linear(_UNARY[op](dequantize_table(*x)), *out).astype(np.int8)


# ========================================================================== interpreter
def _scale_zp(t) -> tuple[float, int]:
    return t.quant.scalar_scale, t.quant.scalar_zero_point


def _prep_conv(ctx) -> ref.Kernel:
    params = conv_params(ctx.model, ctx.op)
    weights = ctx.const(1, "weights")
    bias = ctx.bias(2, ctx.out.shape[-1])
    fn = ref.depthwise_conv2d_int8 if ctx.op.op == "DEPTHWISE_CONV_2D" else ref.conv2d_int8
    return lambda a: fn(a[0], weights, bias, params)


def fully_connected_params(model, op) -> OrtRequant | FullyConnectedFloat:
    """FULLY_CONNECTED run as QGemm / QLinearMatMul (an :class:`OrtRequant` with
    ``fl(fl(xs * ws[u]) / ys)``) or as a float Gemm / MatMul (:class:`FullyConnectedFloat`)."""
    x, w, out = (model.tensors[i] for i in (op.inputs[0], op.inputs[1], op.outputs[0]))
    units = w.shape[0]
    ws = np.broadcast_to(np.asarray(w.quant.scale, f32), (units,))
    so, zo = _scale_zp(out)
    act = activation_bounds(op.options.get("fused_activation_function", "NONE"), so, zo)
    if op.options.get(KERNEL) in ("Gemm", "MatMul"):
        b = model.tensors[op.inputs[2]] if len(op.inputs) > 2 and op.inputs[2] >= 0 else None
        bias = None if b is None else (b.data.reshape(-1).astype(f32) * np.broadcast_to(
            np.asarray(b.quant.scale, f32), (units,)))
        return FullyConnectedFloat(dequantize_table(*_scale_zp(x)), np.ascontiguousarray(ws),
                                   bias, so, zo, act)
    return requant_of((f32(x.quant.scalar_scale) * ws) / f32(so), zo, act)


def _prep_fully_connected(ctx) -> ref.Kernel:
    weights = ctx.const(1, "weights")
    bias = ctx.bias(2, weights.shape[0])
    params = fully_connected_params(ctx.model, ctx.op)
    shape, zi = ctx.out.shape, _scale_zp(ctx.tensor(0))[1]
    if isinstance(params, FullyConnectedFloat):
        return lambda a: fully_connected_float(a[0], weights, params).reshape(shape)
    return lambda a: ref.fully_connected_int8(a[0], weights, bias, zi, params).reshape(shape)


def elementwise_params(model, op) -> AddParams:
    """The :class:`AddParams` of an ADD / MUL with onnxruntime's arithmetic (two activations
    of the output's shape)."""
    a, b, out = (model.tensors[i] for i in (op.inputs[0], op.inputs[1], op.outputs[0]))
    if a.shape != b.shape or a.shape != out.shape or a.data is not None or b.data is not None:
        raise UnsupportedOperatorError(
            f"{model.where(op)}: onnxruntime's arithmetic is implemented for two activations "
            "of the output's shape only (no broadcasting, no constant)", op.op, op.index)
    return add_params(op.options.get(KERNEL, ""), _scale_zp(a), _scale_zp(b), _scale_zp(out),
                      op.options.get(DTYPE, "uint8"),
                      op.options.get("fused_activation_function", "NONE"))


def _prep_elementwise(ctx) -> ref.Kernel:
    params = elementwise_params(ctx.model, ctx.op)
    return lambda v: add_int8(v[0], v[1], params)


def average_pool_params(model, op) -> PoolParams:
    """AVERAGE_POOL_2D run as QLinearAveragePool or AveragePool (``count_include_pad`` in the
    options)."""
    x, out = model.tensors[op.inputs[0]], model.tensors[op.outputs[0]]
    o = op.options
    window, stride = (o["filter_height"], o["filter_width"]), (o["stride_h"], o["stride_w"])
    padding = ref.same_padding(o.get("padding", "VALID"), x.shape[1:3], window, stride)
    return pool_params(o.get(KERNEL, ""), _scale_zp(x), _scale_zp(out), window, stride,
                       padding, x.shape[1:3], bool(o.get("count_include_pad", False)),
                       o.get(DTYPE, "uint8"))


def _prep_average_pool(ctx) -> ref.Kernel:
    params = average_pool_params(ctx.model, ctx.op)
    return lambda v: average_pool(v[0], params)


def _prep_max_pool(ctx) -> ref.Kernel:
    if _scale_zp(ctx.tensor(0)) != _scale_zp(ctx.out):
        raise ctx.unsupported("a MaxPool between DequantizeLinear and QuantizeLinear of other "
                              "quantizations is not supported")
    return ref._prep_pool(ctx, ref.max_pool_int8)


def global_mean(model, op) -> tuple[tuple[int, int], OrtRequant | PoolParams]:
    """A MEAN over the two spatial axes of a 4-D tensor (1 and 2 in NHWC, 2 and 3 in NCHW,
    kept) run as QLinearGlobalAveragePool (an :class:`OrtRequant`: the sum minus ``xz * N``)
    or as the float GlobalAveragePool (:class:`PoolParams`, the global order); with the axes
    reduced."""
    x, out = model.tensors[op.inputs[0]], model.tensors[op.outputs[0]]
    axes = tuple(sorted({int(a) % len(x.shape) for a in model.tensors[op.inputs[1]].data.ravel()}))
    if len(x.shape) != 4 or axes not in ((1, 2), (2, 3)) or len(out.shape) != 4:
        raise UnsupportedOperatorError(f"{model.where(op)}: onnxruntime's GlobalAveragePool "
                                       "reduces the two spatial axes of a 4-D tensor, keeping "
                                       "them", op.op, op.index)
    hw = tuple(x.shape[a] for a in axes)
    if op.options.get(KERNEL) == "GlobalAveragePool":
        return axes, pool_params("GlobalAveragePool", _scale_zp(x), _scale_zp(out), hw, (1, 1),
                                 (0, 0, 0, 0), hw, False)
    return axes, mean_requant(x.quant.scalar_scale, out.quant.scalar_scale, hw[0] * hw[1],
                              out.quant.scalar_zero_point)


def global_average(x: np.ndarray, axes: tuple[int, int], p: PoolParams) -> np.ndarray:
    """The float GlobalAveragePool of int8 ``x`` over ``axes`` (kept):
    ``MlasPoolGlobalKernel``'s order over each window (:func:`pool_order`), then
    QuantizeLinear."""
    moved = np.moveaxis(np.asarray(x, np.int64), axes, (-2, -1))
    taps = p.table[moved.reshape(-1, moved.shape[-2] * moved.shape[-1]) + 128]
    y = _window_sum(taps, "global", moved.shape[-1]) / f32(taps.shape[1])
    q = quantize_linear(y, p.output_scale, p.output_zero_point).astype(np.int8)
    return np.moveaxis(q.reshape(moved.shape[:-2] + (1, 1)), (-2, -1), axes)


def _prep_mean(ctx) -> ref.Kernel:
    axes, params = global_mean(ctx.model, ctx.op)
    if isinstance(params, PoolParams):
        return lambda v: global_average(v[0], axes, params)
    zi = _scale_zp(ctx.tensor(0))[1]
    count = int(np.prod([ctx.tensor(0).shape[a] for a in axes]))
    return lambda v: params(np.asarray(v[0], np.int64).sum(axis=axes, keepdims=True)
                            - zi * count)


def _prep_softmax(ctx) -> ref.Kernel:
    x, out = ctx.tensor(0), ctx.out
    params = softmax_params(ctx.op.options.get(KERNEL, ""), _scale_zp(x), _scale_zp(out),
                            x.shape[-1], ctx.op.options.get(DTYPE, "uint8"))
    return lambda v: softmax(v[0], params)


def _prep_unary(ctx) -> ref.Kernel:
    x, out = ctx.tensor(0), ctx.out
    if x.dtype == "float32":                 # QuantizeLinear of a float input
        so, zo = _scale_zp(out)
        return lambda v: quantize_linear(v[0], so, zo).astype(np.int8)
    table = unary_table(ctx.op.op, _scale_zp(x), _scale_zp(out))
    return lambda v: table[np.asarray(v[0], np.int64) + 128]


_PREPARE: dict[str, Callable] = {
    "CONV_2D": _prep_conv, "DEPTHWISE_CONV_2D": _prep_conv,
    "FULLY_CONNECTED": _prep_fully_connected, "ADD": _prep_elementwise,
    "MUL": _prep_elementwise, "AVERAGE_POOL_2D": _prep_average_pool,
    "MAX_POOL_2D": _prep_max_pool, "MEAN": _prep_mean, "SOFTMAX": _prep_softmax,
    **dict.fromkeys(_UNARY, _prep_unary)}


def prepare(ctx) -> ref.Kernel:
    """The numpy kernel of an operator with ``"arithmetic": "onnxruntime"`` (``ctx`` the
    reference's operator context); data-movement operators have no such option."""
    fn = _PREPARE.get(ctx.op.op)
    if fn is None:
        raise ctx.unsupported("has no onnxruntime arithmetic")
    return fn(ctx)
