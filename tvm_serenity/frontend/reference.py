"""A numpy int8 reference interpreter, bit-exact with TFLite Micro's reference kernels.

This module is the arithmetic specification for every int8 kernel tvm-serenity generates (TIR,
plain C, Pico firmware): each public function below states one kernel's integer semantics, and
:class:`Interpreter` runs a whole :class:`~.tflite_model.TFLiteModel` with them, in stored order,
keeping every intermediate tensor on request.

Arithmetic follows TFLite's ``kernels/internal`` reference code as TFLite Micro builds it:

* **Double rounding** (``TFLITE_SINGLE_ROUNDING`` undefined, the default of both TFLM and the
  LiteRT/TFLite wheels): ``MultiplyByQuantizedMultiplier(x, m, s)`` =
  ``RoundingDivideByPOT(SaturatingRoundingDoublingHighMul(x << max(s, 0), m), max(-s, 0))``,
  with ``(m, s)`` from :func:`quantize_multiplier` (``frexp`` + round-half-away, the
  ``q == 2^31`` fix-up and the flush of ``s < -31`` to zero).
* Requantization parameters are computed in the same floating-point precision as the kernels'
  ``Prepare`` (double for convolutions, a float32 product for per-tensor FULLY_CONNECTED,
  a float32 quotient for RELU, ...), since a one-ulp difference in a scale can change a
  multiplier.
* int32 accumulators wrap like the C kernels; numpy sums are exact (float64 GEMMs are exact for
  these magnitudes, < 2^53) and are wrapped to int32 once, which is the same modulo 2^32.
* LOGISTIC and SOFTMAX use gemmlowp's fixed-point ``logistic`` / ``exp_on_negative_values`` /
  ``one_over_one_plus_x_for_x_in_0_1`` (reimplemented here on int64 arrays with int32 wrap-around),
  HARD_SWISH the int16 fixed-point path, MEAN TFLM's ``QuantizedMeanOrSum`` (integer multiplier
  rescaled by the element count), AVERAGE_POOL the round-half-away integer division over the
  in-bounds window, ADD the ``left_shift = 20`` scheme.

**onnxruntime's arithmetic**: an operator whose options say ``"arithmetic": "onnxruntime"``
(an ONNX QDQ model's, :mod:`.ort_arithmetic`) runs that module's kernel instead.

**Float32 kernels** (the float operators models put after their int8 core): SOFTMAX,
LOG_SOFTMAX and ARG_MAX follow TFLite's ``reference_ops`` loop by loop, in float32 with its
order of operations: the row maximum as ``std::max`` from ``lowest()`` (a NaN never becomes
the maximum), the sum of exponentials accumulated front to back, ``exp((x - max) * beta) /
sum`` and ``(x - max) - log(sum)``; ARG_MAX keeps the first index of the largest value
(``curr > best``). ``std::exp`` / ``std::log`` are the platform's ``expf`` / ``logf``:
TFLite Micro's Python wrapper calls glibc's, whose algorithm (Arm's optimized-routines, also
musl's) :func:`expf` and :func:`logf` restate in float64 numpy, operation for operation, with
its tables and polynomials. The C kernels compute the same
(:mod:`tvm_serenity.codegen.ops`), so every target gets glibc's bits: the Pico toolchain's
newlib uses the older fdlibm code on soft-float Cortex-M, which differs from glibc in 0.8% of
``expf`` and 3.8% of ``logf`` results in the softmax ranges (1 ulp).

Before any kernel is prepared, :func:`validate` refuses what TFLite Micro's ``Prepare`` refuses
(operand counts, ranks, axes, shapes against the options, scales and zero points) and what it
would run with an undefined result (a shift of 32 bits or more, an unknown fused activation,
...), one line naming the operator by its index in the file; every consumer of a model (this
interpreter, the graph IR, the C emitter, the Relax importer) calls it.

LiteRT (``ai-edge-litert`` 2.3 with ``OpResolverType.BUILTIN_REF``) runs the same reference code
except in two kernels, and ``Interpreter(model, runtime="litert")`` reproduces it too (tests
check both runtimes): its reference FULLY_CONNECTED requantizes with
``round(double(acc) * s_in * s_w / s_out)`` instead of ``MultiplyByQuantizedMultiplier`` (they
differ by one LSB on rare accumulators), and its RELU6 requantizes when input and output
quantization differ (TFLM only clamps; converters fuse RELU6, so models rarely have it).
"""

from __future__ import annotations

import decimal
import math
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np

from ..errors import SerenityError
from ..text import counted
from .tflite_model import Operator, TFLiteModel, UnsupportedOperatorError, check_operators

__all__ = [
    # fixed-point primitives
    "round_half_away", "quantize_multiplier", "saturating_rounding_doubling_high_mul",
    "rounding_divide_by_pot", "multiply_by_quantized_multiplier", "requantize",
    "activation_range", "same_padding", "output_size",
    # gemmlowp fixed-point transcendental helpers
    "exp_on_negative_values", "one_over_one_plus_x_for_x_in_0_1", "fixed_point_logistic",
    # parameters and kernels
    "Requant", "ConvParams", "AddParams", "PoolParams", "HardSwishParams", "LogisticParams",
    "SoftmaxParams", "conv_requant", "add_params", "mul_requant", "hard_swish_params",
    "logistic_params", "softmax_params", "softmax_tables", "table_of",
    "quantize", "dequantize", "requantize_int8", "conv2d_int8", "depthwise_conv2d_int8",
    "expand_depthwise_int8",
    "fully_connected_int8", "add_int8", "mul_int8", "mean_int8", "average_pool_int8",
    "max_pool_int8", "pad", "resize_nearest_neighbor", "hard_swish_int8", "logistic_int8",
    "softmax_int8", "relu_int8", "relu6_int8", "fully_connected_accumulate",
    "requantize_float", "conv_params",
    "StridedSliceParams", "resolve_strided_slice", "strided_slice_params", "strided_slice",
    # float32 kernels
    "expf", "logf", "EXPF_TABLE", "EXPF_CONSTANTS", "LOGF_TABLE", "LOGF_CONSTANTS",
    "row_max_float", "softmax_float", "log_softmax_float", "arg_max", "ARG_MAX_TYPES",
    # interpreter
    "SUPPORTED_OPS", "TFLM", "LITERT", "RUNTIMES", "Interpreter", "run", "run_all",
    "ReferenceError", "validate", "ACTIVATIONS",
]

TFLM = "tflm"
LITERT = "litert"
RUNTIMES = (TFLM, LITERT)

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1
INT8_MIN, INT8_MAX = -128, 127


class ReferenceError(SerenityError, ValueError):
    """A model or input the reference interpreter cannot run (the message says why)."""


# ====================================================================== fixed-point primitives
def _i64(x) -> np.ndarray:
    return np.asarray(x, dtype=np.int64)


def _wrap(x, bits: int = 32) -> np.ndarray:
    """Two's-complement wrap of int64 values to ``bits`` (what a C cast/overflow does)."""
    half = 1 << (bits - 1)
    return ((_i64(x) + half) & ((1 << bits) - 1)) - half


def _trunc_div(a, b) -> np.ndarray:
    """C integer division (truncation toward zero) for int64 arrays, ``b > 0``."""
    a = _i64(a)
    q = np.abs(a) // b
    return np.where(a < 0, -q, q)


def round_half_away(x):
    """``TfLiteRound`` (``std::round``/``roundf``): halves away from zero, exact, dtype kept."""
    x = np.asarray(x)
    a = np.abs(x)
    f = np.floor(a)
    r = f + (a - f >= 0.5).astype(x.dtype if x.dtype.kind == "f" else np.float64)
    return np.copysign(r, x)


def quantize_multiplier(real: float) -> tuple[int, int]:
    """``QuantizeMultiplier``: ``real ~= m * 2^(s - 31)`` with ``m`` in [2^30, 2^31).

    As TFLite's (double-rounding build): ``frexp``, ``q * 2^31`` rounded half away from zero,
    ``2^31`` halved with the shift raised by one, a shift below -31 flushed to ``(0, 0)``.
    A ``real`` of ``2^31`` or more (a shift above 31) raises :class:`ReferenceError`: the
    kernels would compute ``x * (1 << s)``, undefined in C for ``s >= 32``, and TFLite Micro's
    result then depends on the CPU (x86 shifts by ``s mod 32``, Arm by all ``s`` bits); only
    the single-rounding build saturates the shift at 30. The C emitter and the Relax importer
    take their multipliers from this function too.
    """
    real = float(real)
    if real == 0.0:
        return 0, 0
    if not math.isfinite(real) or abs(real) >= 2.0 ** 31:
        raise ReferenceError(f"requantization scale {real:.6g} is 2^31 or more: TFLite's "
                             "MultiplyByQuantizedMultiplier would shift left by 32 bits or "
                             "more, undefined in C (TFLite Micro's result depends on the CPU)")
    q, shift = math.frexp(real)
    q_fixed = int(round_half_away(np.float64(q * float(1 << 31))))
    if q_fixed == 1 << 31:
        q_fixed //= 2
        shift += 1
    if shift < -31:
        return 0, 0
    return q_fixed, shift


def saturating_rounding_doubling_high_mul(a, b, bits: int = 32) -> np.ndarray:
    """gemmlowp ``SaturatingRoundingDoublingHighMul`` for int32 (or int16 with ``bits=16``)."""
    a, b = _i64(a), _i64(b)
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    ab = a * b
    nudge = np.where(ab >= 0, 1 << (bits - 2), 1 - (1 << (bits - 2)))
    res = _trunc_div(ab + nudge, 1 << (bits - 1))
    return np.where((a == b) & (a == lo), hi, res)


def _saturating_doubling_high_mul16(a, b) -> np.ndarray:
    """HARD_SWISH's ``SaturatingDoublingHighMul``: like the above but truncating (int16)."""
    a, b = _i64(a), _i64(b)
    res = _trunc_div(a * b, 1 << 15)
    return np.where((a == b) & (a == -32768), 32767, res)


def rounding_divide_by_pot(x, exponent, bits: int = 32) -> np.ndarray:
    """gemmlowp ``RoundingDivideByPOT``: ``x / 2^exponent`` rounded half away from zero.

    ``bits=16`` reproduces the int16 instantiation (its mask is an int16 constant).
    """
    x, e = _i64(x), _i64(exponent)
    mask = _wrap((np.int64(1) << e) - 1, bits)
    remainder = x & mask
    threshold = (mask >> 1) + (x < 0)
    return (x >> e) + (remainder > threshold)


def _saturating_left_shift32(x, exponent: int) -> np.ndarray:
    """gemmlowp ``SaturatingRoundingMultiplyByPOT<exponent>`` for exponent > 0 (int32)."""
    x = _i64(x)
    threshold = (1 << (31 - exponent)) - 1
    return np.where(x > threshold, INT32_MAX, np.where(x < -threshold, INT32_MIN, x << exponent))


def multiply_by_quantized_multiplier(x, multiplier, shift) -> np.ndarray:
    """``MultiplyByQuantizedMultiplier`` (int32 version, double rounding); broadcasts."""
    x, m, s = _i64(x), _i64(multiplier), _i64(shift)
    left = np.maximum(s, 0)
    right = np.maximum(-s, 0)
    return rounding_divide_by_pot(
        saturating_rounding_doubling_high_mul(_wrap(x << left), m), right)


def requantize(acc, multiplier, shift, out_zp: int, act_min: int = INT8_MIN,
               act_max: int = INT8_MAX) -> np.ndarray:
    """int32 accumulator -> int8: ``clamp(MBQM(acc, m, s) + out_zp, act_min, act_max)``.

    ``multiplier``/``shift`` may be per output channel (last axis of ``acc``).
    """
    out = multiply_by_quantized_multiplier(acc, multiplier, shift) + out_zp
    return np.clip(out, act_min, act_max).astype(np.int8)


def _quantize_scalar(f: float, scale: float, zp: int) -> int:
    """Kernel-util ``Quantize``: ``zp + round(f / scale)`` in float32; like TFLite, refuses a
    quotient outside the int32 range."""
    q = round_half_away(np.float32(f) / np.float32(scale))
    if not -2.0 ** 31 <= q <= 2.0 ** 31:
        raise ReferenceError(f"{f} quantized with scale {float(np.float32(scale)):.6g} "
                             f"({float(q):.6g}) overflows int32; TFLite rejects this "
                             "activation range")
    return zp + int(q)


def activation_range(activation: str, scale: float, zero_point: int) -> tuple[int, int]:
    """``CalculateActivationRangeQuantized`` for int8 output (fused activation clamp)."""
    if activation in ("NONE", None):
        return INT8_MIN, INT8_MAX
    if activation == "RELU":
        return max(INT8_MIN, _quantize_scalar(0.0, scale, zero_point)), INT8_MAX
    if activation == "RELU6":
        return (max(INT8_MIN, _quantize_scalar(0.0, scale, zero_point)),
                min(INT8_MAX, _quantize_scalar(6.0, scale, zero_point)))
    if activation == "RELU_N1_TO_1":
        return (max(INT8_MIN, _quantize_scalar(-1.0, scale, zero_point)),
                min(INT8_MAX, _quantize_scalar(1.0, scale, zero_point)))
    raise ReferenceError(f"fused activation {activation} has no int8 implementation")


def output_size(in_size: int, kernel: int, stride: int, dilation: int, pad_before: int,
                pad_after: int) -> int:
    """Output extent of a window op with explicit padding."""
    eff = (kernel - 1) * dilation + 1
    return (in_size + pad_before + pad_after - eff) // stride + 1


def same_padding(padding: str, in_hw: Sequence[int], kernel: Sequence[int],
                 stride: Sequence[int], dilation: Sequence[int] = (1, 1)
                 ) -> tuple[int, int, int, int]:
    """TFLite's ``SAME``/``VALID`` as explicit ``(top, bottom, left, right)``.

    ``SAME`` puts the odd extra row/column at the bottom/right, as ``ComputePaddingHeightWidth``
    does (kernels read from ``top``/``left`` and run to the output size).
    """
    pads = []
    for n, k, s, d in zip(in_hw, kernel, stride, dilation):
        eff = (k - 1) * d + 1
        out = (n + s - 1) // s if padding == "SAME" else (n - eff + s) // s
        total = max((out - 1) * s + eff - n, 0)
        pads += [total // 2, total - total // 2]
    return tuple(pads)  # type: ignore[return-value]


# ===================================================== gemmlowp fixed-point (int32 raw values)
def _add(a, b):
    return _wrap(_i64(a) + _i64(b))


def _mul(a, b):
    return saturating_rounding_doubling_high_mul(a, b)


def _exp_on_interval_between_negative_one_quarter_and_0_excl(a) -> np.ndarray:
    constant_term = 1895147668          # exp(-1/8) in Q0.31
    constant_1_over_3 = 715827883
    x = _add(a, 1 << 28)                # a + 1/8
    x2 = _mul(x, x)
    x3 = _mul(x2, x)
    x4 = _mul(x2, x2)
    x4_over_4 = rounding_divide_by_pot(x4, 2)
    poly = rounding_divide_by_pot(_add(_mul(_add(x4_over_4, x3), constant_1_over_3), x2), 1)
    return _add(constant_term, _mul(constant_term, _add(x, poly)))


_EXP_BARREL = ((-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308),
               (2, 39332535), (3, 720401), (4, 242))


def exp_on_negative_values(a, integer_bits: int) -> np.ndarray:
    """gemmlowp ``exp_on_negative_values``: input Q(integer_bits), result Q0.31."""
    a = _i64(a)
    frac_bits = 31 - integer_bits
    one_quarter = 1 << (frac_bits - 2)
    a_mod_quarter_minus_one_quarter = _add(a & (one_quarter - 1), -one_quarter)
    rescaled = (_saturating_left_shift32(a_mod_quarter_minus_one_quarter, integer_bits)
                if integer_bits > 0 else a_mod_quarter_minus_one_quarter)
    result = _exp_on_interval_between_negative_one_quarter_and_0_excl(rescaled)
    remainder = _add(a_mod_quarter_minus_one_quarter, -a)
    for exponent, multiplier in _EXP_BARREL:
        if integer_bits > exponent:
            bit = np.int64(1) << (frac_bits + exponent)
            result = np.where(remainder & bit, _mul(result, multiplier), result)
    if integer_bits > 5:
        result = np.where(a < -(1 << (36 - integer_bits)), 0, result)
    return np.where(a == 0, INT32_MAX, result)


def one_over_one_plus_x_for_x_in_0_1(a) -> np.ndarray:
    """gemmlowp ``one_over_one_plus_x_for_x_in_0_1`` (Newton-Raphson on Q2.29), Q0.31 in/out."""
    a = _i64(a)
    s = a + INT32_MAX
    half_denominator = _trunc_div(s + np.where(s >= 0, 1, -1), 2)     # RoundingHalfSum(a, 1)
    x = _add(1515870810, _mul(half_denominator, -1010580540))          # 48/17 - 32/17 * d
    for _ in range(3):
        one_minus = _add(1 << 29, -_mul(half_denominator, x))            # 1 - d * x
        x = _add(x, _saturating_left_shift32(_mul(x, one_minus), 2))
    return _saturating_left_shift32(x, 1)


def fixed_point_logistic(a, integer_bits: int) -> np.ndarray:
    """gemmlowp ``logistic``: input Q(integer_bits), result Q0.31."""
    a = _i64(a)
    positive = a > 0
    abs_input = np.where(positive, a, _wrap(-a))
    if_positive = one_over_one_plus_x_for_x_in_0_1(
        exp_on_negative_values(_wrap(-abs_input), integer_bits))
    if_negative = _add(INT32_MAX, -if_positive)
    return np.where(a == 0, 1 << 30, np.where(positive, if_positive, if_negative))


# ================================================================ parameters and kernels
@dataclass(frozen=True)
class Requant:
    """int32 accumulator -> int8 output (see :func:`requantize`); arrays are per channel."""

    multiplier: np.ndarray
    shift: np.ndarray
    output_zero_point: int
    act_min: int = INT8_MIN
    act_max: int = INT8_MAX

    def __call__(self, acc) -> np.ndarray:
        return requantize(acc, self.multiplier, self.shift, self.output_zero_point,
                          self.act_min, self.act_max)


def _requant(reals, out_zp: int, act: tuple[int, int]) -> Requant:
    reals = np.atleast_1d(reals)
    pairs = []
    for k, real in enumerate(reals):
        try:
            pairs.append(quantize_multiplier(real))
        except ReferenceError as e:
            raise ReferenceError(f"output channel {k}: {e}" if reals.size > 1 else str(e)) \
                from None
    return Requant(np.array([p[0] for p in pairs], dtype=np.int64),
                   np.array([p[1] for p in pairs], dtype=np.int64), int(out_zp), *act)


def conv_requant(input_scale: float, filter_scales, output_scale: float, output_zero_point: int,
                 activation: str = "NONE") -> Requant:
    """``PopulateConvolutionQuantizationParams``: per channel, in double precision."""
    reals = (float(input_scale) * np.asarray(filter_scales, dtype=np.float32).astype(np.float64)
             / float(output_scale))
    return _requant(reals, output_zero_point,
                    activation_range(activation, output_scale, output_zero_point))


@dataclass(frozen=True)
class ConvParams:
    """CONV_2D / DEPTHWISE_CONV_2D: window geometry plus the requantization."""

    stride: tuple[int, int]
    dilation: tuple[int, int]
    padding: tuple[int, int, int, int]        # top, bottom, left, right
    input_zero_point: int
    requant: Requant


def _windows(x: np.ndarray, kernel, stride, dilation, padding, fill):
    """Yield ``(ky, kx, view)`` with ``view[n, oy, ox, c] = xpadded[n, oy*sh + ky*dh, ...]``."""
    n, h, w, c = x.shape
    (kh, kw), (sh, sw), (dh, dw) = kernel, stride, dilation
    top, bottom, left, right = padding
    oh = output_size(h, kh, sh, dh, top, bottom)
    ow = output_size(w, kw, sw, dw, left, right)
    if oh <= 0 or ow <= 0:
        raise ReferenceError(f"window {kh}x{kw} (stride {sh}x{sw}, dilation {dh}x{dw}, "
                             f"padding {padding}) leaves no output on a {h}x{w} input")
    xp = np.full((n, h + top + max(bottom, 0), w + left + max(right, 0), c), fill, dtype=x.dtype)
    xp[:, top:top + h, left:left + w, :] = x
    for ky in range(kh):
        for kx in range(kw):
            y0, x0 = ky * dh, kx * dw
            yield ky, kx, xp[:, y0:y0 + (oh - 1) * sh + 1:sh, x0:x0 + (ow - 1) * sw + 1:sw, :]


def conv2d_int8(x: np.ndarray, weights: np.ndarray, bias: np.ndarray | None,
                p: ConvParams) -> np.ndarray:
    """``reference_integer_ops::ConvPerChannel`` (NHWC input, OHWI weights, grouped if
    ``C_in > I``): ``acc = bias + sum w * (x - input_zp)`` over in-bounds taps, then requant."""
    n, h, w, cin = x.shape
    cout, kh, kw, cg = weights.shape
    groups = cin // cg
    if groups * cg != cin or cout % groups:
        raise ReferenceError(f"conv2d: input channels {cin} do not split into groups of {cg}")
    xs = x.astype(np.float64) - p.input_zero_point
    wg = weights.astype(np.float64).reshape(groups, cout // groups, kh, kw, cg)
    acc = None
    for ky, kx, win in _windows(xs, (kh, kw), p.stride, p.dilation, p.padding, 0.0):
        b, oh, ow, _ = win.shape
        cols = win.reshape(b * oh * ow, groups, cg).transpose(1, 0, 2)
        part = np.matmul(cols, wg[:, :, ky, kx, :].transpose(0, 2, 1))   # (groups, M, cout/g)
        part = part.transpose(1, 0, 2).reshape(b, oh, ow, cout)
        acc = part if acc is None else acc + part
    acc = np.rint(acc).astype(np.int64)
    if bias is not None:
        acc = acc + bias.astype(np.int64)
    return p.requant(_wrap(acc))


def depthwise_conv2d_int8(x: np.ndarray, weights: np.ndarray, bias: np.ndarray | None,
                          p: ConvParams) -> np.ndarray:
    """``reference_integer_ops::DepthwiseConvPerChannel`` (weights ``1 x KH x KW x C_out``,
    output channel ``c*M + m`` reads input channel ``c``)."""
    cin = x.shape[3]
    _, kh, kw, cout = weights.shape
    mult = cout // cin
    if mult * cin != cout:
        raise ReferenceError(f"depthwise conv: {cout} output channels are not a multiple of "
                             f"{cin} input channels")
    xs = np.repeat(x.astype(np.int64) - p.input_zero_point, mult, axis=3)
    w = weights.astype(np.int64)
    acc = None
    for ky, kx, win in _windows(xs, (kh, kw), p.stride, p.dilation, p.padding, 0):
        part = win * w[0, ky, kx, :]
        acc = part if acc is None else acc + part
    if bias is not None:
        acc = acc + bias.astype(np.int64)
    return p.requant(_wrap(acc))


def expand_depthwise_int8(x: np.ndarray, expand_weights: np.ndarray,
                          expand_bias: np.ndarray | None, expand_params: ConvParams,
                          weights: np.ndarray, bias: np.ndarray | None,
                          p: ConvParams) -> np.ndarray:
    """The fused node of the expand-depthwise rewrite (:mod:`tvm_serenity.rewrite.patterns`):
    by definition the 1x1 CONV_2D and then the DEPTHWISE_CONV_2D, each its reference kernel."""
    return depthwise_conv2d_int8(conv2d_int8(x, expand_weights, expand_bias, expand_params),
                                 weights, bias, p)


def fully_connected_accumulate(x: np.ndarray, weights: np.ndarray, bias: np.ndarray | None,
                               input_zero_point: int) -> np.ndarray:
    """FULLY_CONNECTED's int32 accumulators ``bias + W (x - zp)``, shape ``(batches, units)``."""
    units, depth = weights.shape
    xs = x.reshape(-1, depth).astype(np.float64) - input_zero_point
    acc = np.rint(xs @ weights.astype(np.float64).T).astype(np.int64)
    if bias is not None:
        acc = acc + bias.astype(np.int64)
    return _wrap(acc)


def fully_connected_int8(x: np.ndarray, weights: np.ndarray, bias: np.ndarray | None,
                         input_zero_point: int, requant: Requant) -> np.ndarray:
    """``reference_integer_ops::FullyConnected[PerChannel]`` as TFLM runs it: the
    accumulators requantized with ``MultiplyByQuantizedMultiplier``. Returns
    ``(batches, units)``; the caller reshapes (``keep_num_dims``)."""
    return requant(fully_connected_accumulate(x, weights, bias, input_zero_point))


def requantize_float(acc, real_scale, out_zp: int, act_min: int = INT8_MIN,
                     act_max: int = INT8_MAX) -> np.ndarray:
    """LiteRT's reference FULLY_CONNECTED requantization: ``round(double(acc) * scale)``
    (half away from zero) with ``scale = (double) s_in * s_w / s_out``, per channel or not."""
    out = round_half_away(_i64(acc).astype(np.float64) * np.asarray(real_scale, np.float64))
    return np.clip(out + out_zp, act_min, act_max).astype(np.int8)


@dataclass(frozen=True)
class AddParams:
    """int8 ADD (``left_shift = 20``): both inputs are rescaled to a common scale first."""

    input1_zero_point: int
    input2_zero_point: int
    input1_multiplier: int
    input1_shift: int
    input2_multiplier: int
    input2_shift: int
    output: Requant
    left_shift: int = 20


def _smaller_than_one(real: float, what: str) -> tuple[int, int]:
    """``QuantizeMultiplierSmallerThanOneExp`` (TFLM aborts outside (0, 1))."""
    if not 0.0 < real < 1.0:
        raise ReferenceError(f"{what}: rescale factor {real} is outside (0, 1); TFLite "
                             "rejects this quantization")
    return quantize_multiplier(real)


def add_params(input1_scale: float, input1_zero_point: int, input2_scale: float,
               input2_zero_point: int, output_scale: float, output_zero_point: int,
               activation: str = "NONE") -> AddParams:
    """``CalculateOpDataAdd`` for int8."""
    left_shift = 20
    twice_max = 2.0 * float(max(np.float32(input1_scale), np.float32(input2_scale)))
    m1, s1 = _smaller_than_one(float(input1_scale) / twice_max, "ADD input 1")
    m2, s2 = _smaller_than_one(float(input2_scale) / twice_max, "ADD input 2")
    mo, so = _smaller_than_one(twice_max / ((1 << left_shift) * float(output_scale)),
                               "ADD output")
    act = activation_range(activation, output_scale, output_zero_point)
    return AddParams(int(input1_zero_point), int(input2_zero_point), m1, s1, m2, s2,
                     Requant(np.int64(mo), np.int64(so), int(output_zero_point), *act),
                     left_shift)


def add_int8(a: np.ndarray, b: np.ndarray, p: AddParams) -> np.ndarray:
    """``reference_integer_ops::AddFunc`` elementwise (numpy broadcasting = TFLite's)."""
    va = (_i64(a) - p.input1_zero_point) << p.left_shift
    vb = (_i64(b) - p.input2_zero_point) << p.left_shift
    sa = multiply_by_quantized_multiplier(va, p.input1_multiplier, p.input1_shift)
    sb = multiply_by_quantized_multiplier(vb, p.input2_multiplier, p.input2_shift)
    return p.output(_wrap(sa + sb))


def mul_requant(input1_scale: float, input2_scale: float, output_scale: float,
                output_zero_point: int, activation: str = "NONE") -> Requant:
    """int8 MUL: one multiplier for ``s1 * s2 / s_out`` (double)."""
    real = float(input1_scale) * float(input2_scale) / float(output_scale)
    return _requant(real, output_zero_point,
                    activation_range(activation, output_scale, output_zero_point))


def mul_int8(a: np.ndarray, b: np.ndarray, input1_zero_point: int, input2_zero_point: int,
             requant: Requant) -> np.ndarray:
    """``reference_integer_ops::MulElementwise``: ``requant((a - z1) * (b - z2))``."""
    return requant(_wrap((_i64(a) - input1_zero_point) * (_i64(b) - input2_zero_point)))


def mean_int8(x: np.ndarray, axes: Sequence[int], input_zero_point: int, multiplier: int,
              shift: int, output_zero_point: int) -> np.ndarray:
    """TFLM ``QuantizedMeanOrSum`` (mean): int32 sums, multiplier pre-divided by the count.

    ``(multiplier, shift) = quantize_multiplier(s_in / s_out)``; reduced axes are dropped from
    the result (reshape for ``keep_dims``).
    """
    axes = tuple(sorted({a % x.ndim for a in axes}))
    count = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    sums = _wrap(x.astype(np.int64).sum(axis=axes))
    s = min(count.bit_length() - 1, 32, 31 + shift)
    mult = (int(multiplier) << s) // count
    shifted = _wrap(sums - input_zero_point * count)
    out = multiply_by_quantized_multiplier(shifted, mult, shift - s) + output_zero_point
    return np.clip(out, INT8_MIN, INT8_MAX).astype(np.int8)


@dataclass(frozen=True)
class PoolParams:
    kernel: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int, int, int]        # top, bottom, left, right
    act_min: int = INT8_MIN
    act_max: int = INT8_MAX


def average_pool_int8(x: np.ndarray, p: PoolParams) -> np.ndarray:
    """``reference_integer_ops::AveragePool``: raw int8 sum over in-bounds taps (padding not
    counted), divided by the tap count rounding half away from zero, then clamped."""
    acc = cnt = None
    ones = np.ones(x.shape[:3] + (1,), dtype=np.int64)
    for (_, _, win), (_, _, one) in zip(
            _windows(x.astype(np.int64), p.kernel, p.stride, (1, 1), p.padding, 0),
            _windows(ones, p.kernel, p.stride, (1, 1), p.padding, 0)):
        acc = win.copy() if acc is None else acc + win
        cnt = one.copy() if cnt is None else cnt + one
    if np.any(cnt == 0):
        raise ReferenceError("average pool: a window lies entirely in the padding")
    half = cnt // 2
    avg = np.where(acc > 0, (acc + half) // cnt, -((half - acc) // cnt))
    return np.clip(avg, p.act_min, p.act_max).astype(np.int8)


def max_pool_int8(x: np.ndarray, p: PoolParams) -> np.ndarray:
    """``reference_integer_ops::MaxPool``: max over in-bounds taps (at least -128), clamped."""
    out = None
    for _, _, win in _windows(x.astype(np.int16), p.kernel, p.stride, (1, 1), p.padding,
                              INT8_MIN):
        out = win.copy() if out is None else np.maximum(out, win)
    return np.clip(out, p.act_min, p.act_max).astype(np.int8)


def pad(x: np.ndarray, paddings, value) -> np.ndarray:
    """PAD/PADV2: constant padding (int8 PAD pads with the output zero point)."""
    return np.pad(x, [(int(a), int(b)) for a, b in np.asarray(paddings).reshape(-1, 2)],
                  constant_values=value)


@dataclass(frozen=True)
class StridedSliceParams:
    """STRIDED_SLICE resolved per input axis ``k``: the output takes the elements
    ``start[k] + i * stride[k]`` for ``i < count[k]`` (always in bounds), in row-major order;
    the ``shrink`` axes (``count`` 1) are dropped from the output shape."""

    start: tuple[int, ...]
    stride: tuple[int, ...]
    count: tuple[int, ...]
    shrink: tuple[bool, ...]

    @property
    def out_shape(self) -> tuple[int, ...]:
        return tuple(c for c, s in zip(self.count, self.shrink) if not s)

    def indices(self, axis: int) -> np.ndarray:
        """The input indices read along ``axis``, in output order."""
        return self.start[axis] + self.stride[axis] * np.arange(self.count[axis],
                                                                dtype=np.int64)


def _clamp(v: int, lo: int, hi: int) -> int:
    return hi if v > hi else lo if v < lo else v


def resolve_strided_slice(in_shape: Sequence[int], begin: Sequence[int], end: Sequence[int],
                          strides: Sequence[int], begin_mask: int = 0, end_mask: int = 0,
                          shrink_axis_mask: int = 0, offset: bool = False
                          ) -> StridedSliceParams:
    """TFLite's ``StridedSliceStartForAxis`` / ``StridedSliceEndForAxis`` per axis (TFLM's
    ``strided_slice_logic.h``): a negative index counts from the end, then it is clamped to
    ``[0, size]`` (``[-1, size - 1]`` for a negative stride); a ``begin_mask`` / ``end_mask``
    bit takes the whole axis in the stride's direction; ``offset`` makes ``end`` relative to
    the start; a ``shrink_axis_mask`` bit takes the one element at the start. ``count`` is
    ``ceil((end - start) / stride)`` or 0, the size TFLM's ``CheckOutputSize`` computes and
    the iterations of ``reference_ops::StridedSlice``.

    Raises :class:`ReferenceError` where TFLite would not slice as written: a zero stride, a
    shrunk axis with a negative stride (the kernel's loop ``index > start + 1`` never runs, so
    TFLite leaves the output unwritten) or whose index is out of range (likewise)."""
    rank = len(in_shape)
    if not len(begin) == len(end) == len(strides) == rank:
        raise ReferenceError(f"STRIDED_SLICE: begin/end/strides have {len(begin)}/{len(end)}/"
                             f"{counted(len(strides), 'value')} for a rank-{rank} input")
    starts, counts, shrinks = [], [], []
    for k, size in enumerate(int(d) for d in in_shape):
        stride = int(strides[k])
        if stride == 0:
            raise ReferenceError(f"STRIDED_SLICE: the stride of axis {k} is 0")
        start = int(begin[k])
        start += size if start < 0 else 0
        start = _clamp(start, 0, size) if stride > 0 else _clamp(start, -1, size - 1)
        if begin_mask >> k & 1:
            start = 0 if stride > 0 else size - 1
        shrink = bool(shrink_axis_mask >> k & 1)
        if shrink:
            if stride < 0:
                raise ReferenceError(f"STRIDED_SLICE: axis {k} is shrunk with a negative stride "
                                     f"({stride}); TFLite's kernel writes no output then")
            if start >= size:
                raise ReferenceError(f"STRIDED_SLICE: shrunk axis {k} reads index "
                                     f"{int(begin[k])}, outside its {counted(size, 'element')}")
            count = 1
        else:
            stop = int(end[k]) + (start if offset else 0)
            stop += size if stop < 0 else 0
            stop = _clamp(stop, 0, size) if stride > 0 else _clamp(stop, -1, size - 1)
            if end_mask >> k & 1:
                stop = size if stride > 0 else -1
            count = max(0, -((start - stop) // stride))          # ceil((stop - start) / stride)
        starts.append(start)
        counts.append(count)
        shrinks.append(shrink)
    return StridedSliceParams(tuple(starts), tuple(int(s) for s in strides), tuple(counts),
                              tuple(shrinks))


def strided_slice(x: np.ndarray, params: StridedSliceParams) -> np.ndarray:
    """``reference_ops::StridedSlice``: gather :meth:`StridedSliceParams.indices` on every
    axis, drop the shrunk axes (data movement, any dtype)."""
    return x[np.ix_(*(params.indices(k) for k in range(x.ndim)))].reshape(params.out_shape)


def resize_nearest_neighbor(x: np.ndarray, out_hw: Sequence[int], align_corners: bool,
                            half_pixel_centers: bool) -> np.ndarray:
    """``reference_ops::ResizeNearestNeighbor`` (``GetNearestNeighbor`` in float32)."""

    def source(out_size: int, in_size: int) -> np.ndarray:
        if align_corners and out_size > 1:
            scale = np.float32(in_size - 1) / np.float32(out_size - 1)
        else:
            scale = np.float32(in_size) / np.float32(out_size)
        offset = np.float32(0.5 if half_pixel_centers else 0.0)
        pos = (np.arange(out_size, dtype=np.float32) + offset) * scale
        idx = (round_half_away(pos) if align_corners else np.floor(pos)).astype(np.int64)
        idx = np.minimum(idx, in_size - 1)
        return np.maximum(idx, 0) if half_pixel_centers else idx

    rows = source(int(out_hw[0]), x.shape[1])
    cols = source(int(out_hw[1]), x.shape[2])
    return x[:, rows][:, :, cols]


def quantize(x: np.ndarray, scale: float, zero_point: int) -> np.ndarray:
    """``AffineQuantize`` float -> int8: ``round(x / scale)`` in float32, plus zero point."""
    q = round_half_away(np.asarray(x, dtype=np.float32) / np.float32(scale))
    return np.clip(q.astype(np.float64) + zero_point, INT8_MIN, INT8_MAX).astype(np.int8)


def dequantize(x: np.ndarray, scale: float, zero_point: int) -> np.ndarray:
    """``Dequantize`` int8 -> float32: ``(double) scale * (q - zp)`` cast to float."""
    return (float(np.float32(scale)) * (_i64(x) - zero_point)).astype(np.float32)


def requantize_int8(x: np.ndarray, input_zero_point: int, multiplier: int, shift: int,
                    output_zero_point: int) -> np.ndarray:
    """QUANTIZE int8 -> int8 (``reference_ops::Requantize``), ``(m, s)`` from s_in / s_out."""
    return requantize(_i64(x) - input_zero_point, multiplier, shift, output_zero_point)


@dataclass(frozen=True)
class HardSwishParams:
    input_zero_point: int
    output_zero_point: int
    output_multiplier: int           # int16 fixed point
    output_exponent: int             # <= 0
    reluish_multiplier: int          # int16 fixed point
    reluish_exponent: int


def _downscale_to_int16(m: int) -> int:
    """``DownScaleInt32ToInt16Multiplier``."""
    if m >= INT32_MAX - (1 << 15):
        return 32767
    return (m + (1 << 15)) >> 16


def hard_swish_params(input_scale: float, input_zero_point: int, output_scale: float,
                      output_zero_point: int) -> HardSwishParams:
    """``HardSwishPrepare`` (float32 scale arithmetic, then int16 multipliers)."""
    hires = np.float32(1.0 / 128.0) * np.float32(input_scale)
    reluish_scale = np.float32(3.0) / np.float32(32768.0)
    om, oe = quantize_multiplier(float(hires / np.float32(output_scale)))
    if oe > 0:
        raise ReferenceError("HARD_SWISH: output scale smaller than input scale / 128 is "
                             "rejected by TFLite")
    rm, re = quantize_multiplier(float(hires / reluish_scale))
    return HardSwishParams(int(input_zero_point), int(output_zero_point),
                           _downscale_to_int16(om), oe, _downscale_to_int16(rm), re)


def hard_swish_int8(x: np.ndarray, p: HardSwishParams) -> np.ndarray:
    """``reference_ops::HardSwish`` (int16 fixed point)."""

    def sat_left_shift16(v, amount):
        return np.clip(_i64(v) * (1 << amount), -32768, 32767)

    hires = (_i64(x) - p.input_zero_point) * 128
    preshift_output = saturating_rounding_doubling_high_mul(hires, p.output_multiplier, 16)
    reluish = hires
    if p.reluish_exponent > 0:
        reluish = sat_left_shift16(reluish, p.reluish_exponent - 1)
    reluish = saturating_rounding_doubling_high_mul(reluish, p.reluish_multiplier, 16)
    if p.reluish_exponent > 0:
        reluish = sat_left_shift16(reluish, 1)
    if p.reluish_exponent < 0:
        reluish = rounding_divide_by_pot(reluish, -p.reluish_exponent, 16)
    reluish = (reluish + (1 << 15)) >> 1
    out = _saturating_doubling_high_mul16(reluish, preshift_output)
    out = _wrap(rounding_divide_by_pot(out, -p.output_exponent, 16) + p.output_zero_point, 16)
    return np.clip(out, INT8_MIN, INT8_MAX).astype(np.int8)


@dataclass(frozen=True)
class LogisticParams:
    input_zero_point: int
    input_multiplier: int
    input_left_shift: int
    input_range_radius: int


def _input_radius(integer_bits: int, left_shift: int, total_bits: int = 31) -> int:
    """``CalculateInputRadius`` (double, floored)."""
    return int(math.floor(((1 << integer_bits) - 1) * float(1 << (total_bits - integer_bits))
                          / float(2.0 ** left_shift)))


def logistic_params(input_scale: float, input_zero_point: int) -> LogisticParams:
    """TFLM ``CalculateArithmeticOpDataLogistic`` for int8 (output must be 1/256, -128)."""
    real = float(np.float32(input_scale)) * float(1 << (31 - 4))
    q, left_shift = math.frexp(real)
    multiplier = int(_wrap(round_half_away(np.float64(q * float(1 << 31))).astype(np.int64)))
    return LogisticParams(int(input_zero_point), multiplier, left_shift,
                          _input_radius(4, left_shift))


def logistic_int8(x: np.ndarray, p: LogisticParams) -> np.ndarray:
    """``reference_integer_ops::Logistic``: gemmlowp logistic on Q4.27, output Q0.8 - 128."""
    v = _i64(x) - p.input_zero_point
    q4 = multiply_by_quantized_multiplier(v, p.input_multiplier, p.input_left_shift)
    q0 = fixed_point_logistic(q4, 4)
    out = np.clip(rounding_divide_by_pot(q0, 23) - 128, INT8_MIN, INT8_MAX)
    out = np.where(v <= -p.input_range_radius, INT8_MIN,
                   np.where(v >= p.input_range_radius, INT8_MAX, out))
    return out.astype(np.int8)


@dataclass(frozen=True)
class SoftmaxParams:
    input_multiplier: int
    input_left_shift: int
    diff_min: int


def softmax_params(beta: float, input_scale: float) -> SoftmaxParams:
    """``PreprocessSoftmaxScaling`` with 5 integer bits, and ``diff_min``."""
    real = min(float(np.float32(beta)) * float(np.float32(input_scale)) * float(1 << 26),
               float((1 << 31) - 1))
    if not real > 1.0:
        raise ReferenceError(f"SOFTMAX: beta * input scale * 2^26 = {real} must exceed 1; "
                             "TFLite rejects this quantization")
    m, s = quantize_multiplier(real)
    return SoftmaxParams(m, s, -_input_radius(5, s))


def table_of(kernel) -> np.ndarray:
    """The 256 values of an elementwise int8 kernel (``kernel(int8 array) -> array``) for the
    inputs -128..127: ``table[x + 128]`` is its output at ``x``; how the importer and the C
    emitter run HARD_SWISH, LOGISTIC, RELU, int8 QUANTIZE, ..."""
    return np.asarray(kernel(np.arange(-128, 128, dtype=np.int8)), dtype=np.int8)


def softmax_tables(params: SoftmaxParams) -> tuple[np.ndarray, np.ndarray, int]:
    """:func:`softmax_int8`'s per-element work as tables, for the kernels that restate it
    (the Relax importer, the C emitter): at index ``diff + 255`` for the differences -255..0
    to the row maximum, the fixed-point exponential (Q0.31) and its term of the sum (Q12, 0
    below ``diff_min``), and the first index at or above ``diff_min``."""
    diffs = np.arange(-255, 1, dtype=np.int64)
    shifted = (diffs << params.input_left_shift).astype(np.int32).astype(np.int64)  # C wrap
    scaled = saturating_rounding_doubling_high_mul(shifted, params.input_multiplier)
    exps = exp_on_negative_values(scaled, 5)
    terms = np.where(diffs >= params.diff_min, rounding_divide_by_pot(exps, 12), 0)
    return exps, terms, int(np.clip(params.diff_min + 255, 0, 255))


def softmax_int8(x: np.ndarray, p: SoftmaxParams) -> np.ndarray:
    """``reference_ops::Softmax`` int8 -> int8 (output scale 1/256, zero point -128) over the
    last axis: fixed-point exp of the scaled difference to the row max, gemmlowp reciprocal."""
    v = _i64(x)
    diff = v - v.max(axis=-1, keepdims=True)
    valid = diff >= p.diff_min
    scaled = saturating_rounding_doubling_high_mul(_wrap(diff << p.input_left_shift),
                                                   p.input_multiplier)
    exps = exp_on_negative_values(scaled, 5)
    sum_of_exps = _wrap(np.where(valid, rounding_divide_by_pot(exps, 12), 0).sum(
        axis=-1, keepdims=True))
    headroom = 32 - np.frexp(sum_of_exps.astype(np.float64))[1]     # count leading zeros
    num_bits_over_unit = 12 - headroom
    shifted_minus_one = _wrap(((sum_of_exps << headroom) & 0xFFFFFFFF) - (1 << 31))
    shifted_scale = one_over_one_plus_x_for_x_in_0_1(shifted_minus_one)
    exponent = num_bits_over_unit + 31 - 8
    out = rounding_divide_by_pot(saturating_rounding_doubling_high_mul(shifted_scale, exps),
                                 exponent) - 128
    return np.where(valid, np.clip(out, INT8_MIN, INT8_MAX), INT8_MIN).astype(np.int8)


def relu_int8(x: np.ndarray, input_zero_point: int, requant: Requant) -> np.ndarray:
    """TFLM ``ReluQuantized``: requantize ``x - zp_in`` and clamp at the output zero point."""
    return requant(_i64(x) - input_zero_point)


def relu6_int8(x: np.ndarray, scale: float, zero_point: int) -> np.ndarray:
    """TFLM ``Relu6Quantized``: clamp to ``[zp, zp + round(6 / scale)]`` without rescaling."""
    six = min(INT8_MAX, max(INT8_MIN, zero_point + int(round_half_away(
        np.float32(6.0) / np.float32(scale)))))
    return np.clip(x, zero_point, six).astype(np.int8)


# ========================================================================== float32 kernels
def _exp2_table() -> np.ndarray:
    """``EXPF_TABLE[i]``: the bits of ``2^(i/32)`` (rounded to nearest double) minus ``i <<
    47``, so that adding ``k << 47`` for ``k = 32 e + i`` gives ``2^(k/32)``."""
    with decimal.localcontext() as ctx:
        ctx.prec = 60
        values = [float(decimal.Decimal(2) ** (decimal.Decimal(i) / 32)) for i in range(32)]
    return np.array(values).view(np.uint64) - (np.arange(32, dtype=np.uint64) << np.uint64(47))


def _hex_rows(text: str) -> np.ndarray:
    """Rows of C99 hexadecimal float literals as a float64 array."""
    return np.array([[float.fromhex(v) for v in row.split()] for row in text.split(";")])


#: glibc's ``__exp2f_data`` (Arm optimized-routines ``expf``): the 32-entry table and, for
#: ``x * 32 / ln 2 = k + r``, ``2^(r/32) ~= (c0 r + c1) r^2 + (c2 r + 1)`` (the
#: polynomial scaled by ``1/32^n``), with the round-to-integer shift ``1.5 * 2^52``.
EXPF_TABLE = _exp2_table()
EXPF_CONSTANTS = dict(zip(("invln2_n", "shift", "c0", "c1", "c2"), _hex_rows(
    "0x1.71547652b82fep+5 0x1.8p+52 0x1.c6af84b912394p-20 0x1.ebfce50fac4f3p-13 "
    "0x1.62e42ff0c52d6p-6")[0].tolist()))
#: glibc's ``__logf_data``: per subinterval of ``[0x1.66p-1, 0x1.66p0)`` (``x = 2^k z``),
#: ``(1/c, log c)``; ``log(x) ~= k ln2 + log c + r + a0 r^4 + a1 r^3 + a2 r^2`` with
#: ``r = z/c - 1``.
LOGF_TABLE = _hex_rows(
    "0x1.661ec79f8f3bep+0 -0x1.57bf7808caadep-2; 0x1.571ed4aaf883dp+0 -0x1.2bef0a7c06ddbp-2;"
    "0x1.49539f0f010bp+0 -0x1.01eae7f513a67p-2; 0x1.3c995b0b80385p+0 -0x1.b31d8a68224e9p-3;"
    "0x1.30d190c8864a5p+0 -0x1.6574f0ac07758p-3; 0x1.25e227b0b8eap+0 -0x1.1aa2bc79c81p-3;"
    "0x1.1bb4a4a1a343fp+0 -0x1.a4e76ce8c0e5ep-4; 0x1.12358f08ae5bap+0 -0x1.1973c5a611cccp-4;"
    "0x1.0953f419900a7p+0 -0x1.252f438e10c1ep-5; 0x1p+0 0x0p+0;"
    "0x1.e608cfd9a47acp-1 0x1.aa5aa5df25984p-5; 0x1.ca4b31f026aap-1 0x1.c5e53aa362eb4p-4;"
    "0x1.b2036576afce6p-1 0x1.526e57720db08p-3; 0x1.9c2d163a1aa2dp-1 0x1.bc2860d22477p-3;"
    "0x1.886e6037841edp-1 0x1.1058bc8a07ee1p-2; 0x1.767dcf5534862p-1 0x1.4043057b6ee09p-2")
LOGF_CONSTANTS = dict(zip(("ln2", "a0", "a1", "a2"), _hex_rows(
    "0x1.62e42fefa39efp-1 -0x1.00ea348b88334p-2 0x1.5575b0be00b6ap-2 "
    "-0x1.ffffef20a4123p-2")[0].tolist()))
#: ``expf``'s range limits (float32): above, +inf; below the first, 0; below the second,
#: glibc's ``__math_may_uflowf``, the smallest subnormal.
EXPF_OVERFLOW, EXPF_UNDERFLOW, EXPF_MAY_UNDERFLOW = (
    float.fromhex(v) for v in ("0x1.62e42ep6", "-0x1.9fe368p6", "-0x1.9d1d9ep6"))


def expf(x) -> np.ndarray:
    """glibc's ``expf`` (its generic C code: every float64 product and sum rounded on its
    own), float32 in and out. Equal to glibc on all 2^32 inputs but two where glibc's FMA
    build, which x86 CPUs with FMA run, fuses ``x * 32/ln2 - k`` (``-0x1.f8cbb2p+5`` and
    ``0x1.04845ep+5``, 1 ulp)."""
    shape = np.shape(x)
    x = np.asarray(x, dtype=np.float32).reshape(-1)
    c = EXPF_CONSTANTS
    with np.errstate(all="ignore"):
        z = c["invln2_n"] * x.astype(np.float64)
        kd = z + c["shift"]                         # rounds z to an integer (ties to even)
        ki = kd.view(np.uint64)
        r = z - (kd - c["shift"])
        s = (EXPF_TABLE[ki % 32] + (ki << np.uint64(47))).view(np.float64)
        y = ((c["c0"] * r + c["c1"]) * (r * r) + (c["c2"] * r + 1.0)) * s
        y = y.astype(np.float32)
        return np.select([x == -np.inf, np.isnan(x) | (x == np.inf), x > EXPF_OVERFLOW,
                          x < EXPF_UNDERFLOW, x < EXPF_MAY_UNDERFLOW],
                         [np.float32(0), x + x, np.float32(np.inf), np.float32(0),
                          np.float32(2.0 ** -149)], y).astype(np.float32).reshape(shape)


def logf(x) -> np.ndarray:
    """glibc's ``logf`` (generic C code), float32 in and out: equal to glibc on all 2^32
    inputs (NaN payloads aside). Subnormals are scaled by 2^23 first."""
    shape = np.shape(x)
    x = np.asarray(x, dtype=np.float32).reshape(-1)
    c = LOGF_CONSTANTS
    with np.errstate(all="ignore"):
        bits = x.view(np.uint32)
        scaled = (x * np.float32(2.0 ** 23)).view(np.uint32) - np.uint32(23 << 23)
        ix = np.where(bits < 0x00800000, scaled, bits)
        tmp = ix - np.uint32(0x3f330000)
        i = (tmp >> np.uint32(19)) % 16
        k = tmp.view(np.int32) >> 23
        z = (ix - (tmp & np.uint32(0xff800000))).view(np.float32).astype(np.float64)
        r = z * LOGF_TABLE[i, 0] - 1.0
        y0 = LOGF_TABLE[i, 1] + k.astype(np.float64) * c["ln2"]
        r2 = r * r
        y = (c["a0"] * r2 + (c["a1"] * r + c["a2"])) * r2 + (y0 + r)
        y = y.astype(np.float32)
        return np.select([x == 1, x == 0, x == np.inf, np.isnan(x) | (x < 0)],
                         [np.float32(0), np.float32(-np.inf), x, np.float32(np.nan)],
                         y).astype(np.float32).reshape(shape)


def row_max_float(x: np.ndarray) -> np.ndarray:
    """``max = lowest(); max = std::max(max, x[c])`` along the last axis, front to back: a NaN
    is never taken, and a zero keeps the sign of the first zero that became the maximum."""
    x = np.asarray(x, dtype=np.float32)
    best = np.full(x.shape[:-1], np.finfo(np.float32).min, dtype=np.float32)
    for c in range(x.shape[-1]):
        best = np.where(best < x[..., c], x[..., c], best)
    return best[..., None]


def _row_sum_float(x: np.ndarray) -> np.ndarray:
    """``sum = 0.f; sum += x[c]`` along the last axis, front to back, in float32."""
    total = np.zeros(x.shape[:-1], dtype=np.float32)
    for c in range(x.shape[-1]):
        total = total + x[..., c]
    return total[..., None]


def softmax_float(x: np.ndarray, beta: float) -> np.ndarray:
    """``reference_ops::Softmax`` (float): ``exp((x - max) * beta)`` per value, their sum in
    order, each exponential divided by the sum, all in float32."""
    x = np.asarray(x, dtype=np.float32)
    with np.errstate(all="ignore"):
        e = expf((x - row_max_float(x)) * np.float32(beta))
        return e / _row_sum_float(e)


def log_softmax_float(x: np.ndarray) -> np.ndarray:
    """``reference_ops::LogSoftmax`` (float): ``(x - max) - log(sum exp(x - max))`` in
    float32."""
    x = np.asarray(x, dtype=np.float32)
    with np.errstate(all="ignore"):
        d = x - row_max_float(x)
        return d - logf(_row_sum_float(expf(d)))


#: ARG_MAX's input and output types in TFLite Micro (``arg_min_max.cc``; its axis is int32).
ARG_MAX_TYPES = (("float32", "int8"), ("int32",))


def arg_max(x: np.ndarray, axis: int) -> np.ndarray:
    """``reference_ops::ArgMinMax`` with ``std::greater``: along ``axis``, the index of the
    first value no later value exceeds (ties keep the first; a NaN is never greater, so a
    leading NaN keeps index 0); int64 indices."""
    x = np.moveaxis(np.asarray(x), axis, -1)
    best, index = x[..., 0], np.zeros(x.shape[:-1], dtype=np.int64)
    for i in range(1, x.shape[-1]):
        greater = x[..., i] > best
        best = np.where(greater, x[..., i], best)
        index = np.where(greater, i, index)
    return index


# ============================================================================ interpreter
Kernel = Callable[[Sequence[np.ndarray | None]], np.ndarray]


class _OpContext:
    """Accessors an operator's preparation needs, with errors naming the operator."""

    def __init__(self, model: TFLiteModel, op: Operator, runtime: str = TFLM):
        self.model, self.op, self.runtime = model, op, runtime
        self.where = model.where(op)

    def tensor(self, i: int):
        return self.model.tensors[self.op.inputs[i]] if (
            i < len(self.op.inputs) and self.op.inputs[i] >= 0) else None

    @property
    def out(self):
        return self.model.tensors[self.op.outputs[0]]

    def unsupported(self, why: str) -> UnsupportedOperatorError:
        return UnsupportedOperatorError(f"{self.where}: {why}", self.op.op, self.op.index)

    def int8(self, *tensors) -> None:
        for t in tensors:
            if t.dtype != "int8" or t.quant is None:
                raise self.unsupported(f"tensor '{t.name}' is {t.dtype}"
                                       f"{'' if t.quant else ' without quantization'}; the "
                                       "reference interpreter implements int8 kernels")

    def scale_zp(self, t) -> tuple[float, int]:
        if t.quant.per_channel:
            raise self.unsupported(f"activation tensor '{t.name}' is quantized per channel")
        return t.quant.scalar_scale, t.quant.scalar_zero_point

    def const(self, i: int, what: str) -> np.ndarray:
        t = self.tensor(i)
        if t is None or t.data is None:
            raise self.unsupported(f"{what} must be a constant tensor")
        return t.data

    def bias(self, i: int, units: int) -> np.ndarray | None:
        t = self.tensor(i)
        if t is None:
            return None
        if t.data is None or t.dtype != "int32" or t.size != units:
            raise self.unsupported(f"bias '{t.name}' must be a constant int32 vector of "
                                   f"{counted(units, 'value')}")
        return t.data.reshape(units)

    def activation(self) -> str:
        return self.op.options.get("fused_activation_function", "NONE")

    def fail(self, why: str) -> ReferenceError:
        return ReferenceError(f"{self.where}: {why}")


# ============================================================================= validation
#: Fused activations TFLite's int8 kernels implement (TFLM reads others as NONE).
ACTIVATIONS = ("NONE", "RELU", "RELU6", "RELU_N1_TO_1")
_PADDINGS = ("SAME", "VALID")
#: Operator -> (fewest, most inputs; None: any number), as TFLite Micro's Prepare checks them.
_ARITY = {"CONV_2D": (2, 3), "DEPTHWISE_CONV_2D": (2, 3), "FULLY_CONNECTED": (2, 3),
          "ADD": (2, 2), "MUL": (2, 2), "MEAN": (2, 2), "AVERAGE_POOL_2D": (1, 1),
          "MAX_POOL_2D": (1, 1), "PAD": (2, 3), "PADV2": (2, 3), "RESHAPE": (1, 2),
          "TRANSPOSE": (2, 2), "CONCATENATION": (1, None), "STRIDED_SLICE": (4, 4),
          "RESIZE_NEAREST_NEIGHBOR": (2, 2), "QUANTIZE": (1, 1), "DEQUANTIZE": (1, 1),
          "RELU": (1, 1), "RELU6": (1, 1), "HARD_SWISH": (1, 1), "LOGISTIC": (1, 1),
          "SOFTMAX": (1, 1), "LOG_SOFTMAX": (1, 1), "ARG_MAX": (2, 2)}
#: Inputs that may be omitted (tensor index -1): biases, RESHAPE's shape, PADV2's value.
_OPTIONAL = {"CONV_2D": {2}, "DEPTHWISE_CONV_2D": {2}, "FULLY_CONNECTED": {2},
             "RESHAPE": {1}, "PAD": {2}, "PADV2": {2}}
#: Operators whose input 1 is a weight tensor, and the axis of its per-channel scales.
_WEIGHT_AXIS = {"CONV_2D": 0, "DEPTHWISE_CONV_2D": 3, "FULLY_CONNECTED": 0}
_INT_RANGES = {"int8": (INT8_MIN, INT8_MAX), "int16": (-32768, 32767), "uint8": (0, 255)}
_FLOAT32_NORMAL = float(np.finfo(np.float32).tiny)


def validate(model: TFLiteModel) -> None:
    """Refuse what TFLite Micro's ``Prepare`` (or its kernels) would refuse, or would run with
    undefined results, for every operator of :data:`SUPPORTED_OPS` in ``model``; other
    operators are left to the consumer (:func:`.tflite_model.check_operators`).

    Per operator: input and output counts, tensor indices (-1 only for an optional input),
    activations written by an earlier operator or given as graph inputs, outputs that are no
    constant; every quantized tensor's scales finite, positive and normal (float32), zero
    points in the range of its type, weights with zero points 0 (TFLite's kernels ignore them)
    and one scale per output channel; fused activation, padding, strides, dilations, filter
    sizes, ranks, axes and shapes as the operator's options and the other tensors imply
    (channels, depth multiplier, groups, broadcast and computed output shapes). Model level:
    every graph output is a graph input or written by an operator, and no tensor is written
    twice (by two operators, or by one when it is a graph input). Raises
    :class:`ReferenceError` naming the operator (its index in the file and name) and the tensor.
    The reference interpreter, :func:`.to_graph.tflite_to_graph`, the C emitter's
    ``integer_core`` and the Relax importer call it first."""
    written = set(model.inputs)
    for i in model.inputs:
        if model.tensors[i].data is not None:
            raise ReferenceError(f"{model.source}: graph input '{model.tensors[i].name}' is a "
                                 "constant tensor")
    for op in model.operators:
        if op.op in _ARITY:
            ctx = _OpContext(model, op)
            _check_operands(ctx, written)
            _check_quantization(ctx)
            _CHECKS.get(op.op, _check_same_shape)(ctx)
        written.update(op.outputs)
    for i in model.outputs:
        t = model.tensors[i]
        if i not in written:
            what = "a constant tensor" if t.data is not None else "written by no operator"
            raise ReferenceError(f"{model.source}: graph output '{t.name}' is {what}")


def _check_operands(ctx: _OpContext, written: set[int]) -> None:
    op = ctx.op
    lo, hi = _ARITY[op.op]
    n = len(op.inputs)
    if n < lo or (hi is not None and n > hi):
        expected = f"{lo}" if lo == hi else f"{lo} to {hi}" if hi is not None else \
            f"at least {lo}"
        raise ctx.fail(f"has {counted(n, 'input')}, TFLite takes {expected}")
    if len(op.outputs) != 1:
        raise ctx.fail(f"has {counted(len(op.outputs), 'output')}, TFLite writes 1")
    for k, i in enumerate(op.inputs):
        if i < 0:
            if k not in _OPTIONAL.get(op.op, ()):
                raise ctx.fail(f"input {k} is omitted (tensor index {i}); only an optional "
                               "input may be")
            continue
        t = ctx.model.tensors[i]
        if t.data is None and i not in written:
            raise ctx.fail(f"reads tensor '{t.name}', which no earlier operator writes")
    if ctx.out.data is not None:
        raise ctx.fail(f"writes its output into the constant tensor '{ctx.out.name}'")
    if op.outputs[0] in written:        # each activation has one producer
        what = "a graph input" if op.outputs[0] in ctx.model.inputs else \
            "written by an earlier operator"
        raise ctx.fail(f"writes its output into tensor '{ctx.out.name}', which is {what}")


def _check_quantization(ctx: _OpContext) -> None:
    op = ctx.op
    for k, i in enumerate((*op.inputs, *op.outputs)):
        t = ctx.model.tensors[i] if i >= 0 else None
        if t is None or t.quant is None or t.dtype == "int32":
            continue                # an int32 bias's quantization is not read by TFLite
        weights = k == 1 and op.op in _WEIGHT_AXIS
        for scale in t.quant.scale.astype(np.float64):
            # weight scales only enter the multipliers (converters write negative ones too);
            # an activation's scale is also divided by and must be a normal float32
            if not math.isfinite(scale) or not (weights or scale >= _FLOAT32_NORMAL):
                raise ctx.fail(f"tensor '{t.name}' has scale {scale:g}; "
                               + ("weight scales must be finite" if weights else
                                  "activation scales must be finite, positive and normal"))
        lo, hi = _INT_RANGES.get(t.dtype, (INT32_MIN, INT32_MAX))
        zps = t.quant.zero_point
        if np.any((zps < lo) | (zps > hi)):
            z = int(zps[(zps < lo) | (zps > hi)][0])
            raise ctx.fail(f"tensor '{t.name}' has zero point {z}, outside {t.dtype}'s "
                           f"[{lo}, {hi}]")
        if weights and t.dtype == "int8":
            if np.any(zps != 0):
                raise ctx.fail(f"weights '{t.name}' have zero point {int(zps[zps != 0][0])}; "
                               "TFLite's int8 kernels take weight zero points as 0")
            if t.quant.per_channel and t.quant.axis != _WEIGHT_AXIS[op.op]:
                raise ctx.fail(f"weights '{t.name}' are quantized along axis {t.quant.axis}, "
                               f"not the output channels (axis {_WEIGHT_AXIS[op.op]})")


def _rank(ctx: _OpContext, t, ranks, what: str) -> None:
    if len(t.shape) not in ranks:
        expected = " or ".join(str(r) for r in ranks)
        raise ctx.fail(f"{what} '{t.name}' has shape {list(t.shape)}, of rank {len(t.shape)}; "
                       f"TFLite needs rank {expected}")


#: The largest stride, dilation, pool filter or dilated filter span accepted: beyond it TFLM's
#: int arithmetic (padding, extents) overflows and windows lie almost wholly in the padding.
MAX_WINDOW_EXTENT = 65_535


def _options(ctx: _OpContext, *keys: str) -> None:
    """Fused activation, padding and the named positive integer options (strides, ...)."""
    o = ctx.op.options
    act = o.get("fused_activation_function", "NONE")
    if act not in ACTIVATIONS:
        raise ctx.fail(f"fused activation {act!r} is not one of TFLite's int8 activations "
                       f"({', '.join(ACTIVATIONS)})")
    if "padding" in o and o["padding"] not in _PADDINGS:
        raise ctx.fail(f"padding {o['padding']!r} is neither SAME nor VALID")
    for key in keys:
        if int(o.get(key, 1)) < 1:
            raise ctx.fail(f"{key} is {o.get(key)}, must be at least 1")
        if int(o.get(key, 1)) > MAX_WINDOW_EXTENT:
            raise ctx.fail(f"{key} is {o.get(key):,}; windows of more than "
                           f"{MAX_WINDOW_EXTENT:,} rows or columns are not supported")


def _check_shape_is(ctx: _OpContext, shape) -> None:
    if tuple(int(d) for d in shape) != ctx.out.shape:
        raise ctx.fail(f"output '{ctx.out.name}' has shape {list(ctx.out.shape)}, the "
                       f"operator computes {[int(d) for d in shape]}")


def _check_conv(ctx: _OpContext) -> None:
    x, w, out = ctx.tensor(0), ctx.tensor(1), ctx.out
    for t, what in ((x, "input"), (w, "weights"), (out, "output")):
        _rank(ctx, t, (4,), what)
    _options(ctx, "stride_h", "stride_w", "dilation_h_factor", "dilation_w_factor")
    if w.data is None:
        raise ctx.fail(f"weights '{w.name}' must be a constant tensor")
    cin = x.shape[3]
    if min(w.shape[1:3]) < 1:
        raise ctx.fail(f"weights '{w.name}' have an empty {w.shape[1]}x{w.shape[2]} filter")
    o = ctx.op.options
    for k, d in zip(w.shape[1:3], (o.get("dilation_h_factor", 1), o.get("dilation_w_factor", 1))):
        if (k - 1) * int(d) + 1 > MAX_WINDOW_EXTENT:     # TFLM's int arithmetic overflows
            raise ctx.fail(f"a {k}-tap filter dilated by {int(d):,} spans {(k - 1) * int(d) + 1:,} "
                           f"rows or columns; more than {MAX_WINDOW_EXTENT:,} is not supported")
    if ctx.op.op == "CONV_2D":
        cout, filter_cin = w.shape[0], w.shape[3]
        if filter_cin < 1 or cin % filter_cin or cout % (cin // filter_cin):
            raise ctx.fail(f"input '{x.name}' has {counted(cin, 'channel')}, which weights "
                           f"'{w.name}' of {filter_cin} input and {cout} output channels do "
                           "not split into groups")
    else:
        cout = w.shape[3]
        multiplier = int(ctx.op.options.get("depth_multiplier", 1))
        if w.shape[0] != 1 or cout != cin * multiplier:
            raise ctx.fail(f"weights '{w.name}' of shape {list(w.shape)} do not match input "
                           f"'{x.name}' of {counted(cin, 'channel')} with depth_multiplier "
                           f"{multiplier} (TFLite needs 1 x KH x KW x {cin * multiplier})")
    if w.quant is not None and w.quant.per_channel and w.quant.scale.size != cout:
        raise ctx.fail(f"weights '{w.name}' have {counted(w.quant.scale.size, 'scale')} for "
                       f"{counted(cout, 'output channel')}")
    if out.shape[0] != x.shape[0] or out.shape[3] != cout:
        raise ctx.fail(f"output '{out.name}' has shape {list(out.shape)}, but {x.shape[0]} "
                       f"batch(es) of {counted(cout, 'channel')} are computed")
    _check_bias(ctx, cout)


def _check_bias(ctx: _OpContext, units: int) -> None:
    t = ctx.tensor(2)
    if t is not None and (t.data is None or t.dtype not in ("int32", "float32")
                          or t.size != units):
        raise ctx.fail(f"bias '{t.name}' must be a constant int32 vector of "
                       f"{counted(units, 'value')}, got {t.dtype} {list(t.shape)}")


def _check_fully_connected(ctx: _OpContext) -> None:
    x, w, out = ctx.tensor(0), ctx.tensor(1), ctx.out
    _options(ctx)
    if w.data is None or len(w.shape) != 2 or min(w.shape) < 1:
        raise ctx.fail(f"weights '{w.name}' must be a constant non-empty matrix, got shape "
                       f"{list(w.shape)}")
    units, depth = w.shape
    if x.size % depth:
        raise ctx.fail(f"input '{x.name}' of {counted(x.size, 'element')} does not split into "
                       f"rows of the weights' depth {depth}")
    if w.quant is not None and w.quant.per_channel and w.quant.scale.size != units:
        raise ctx.fail(f"weights '{w.name}' have {counted(w.quant.scale.size, 'scale')} for "
                       f"{counted(units, 'unit')}")
    if out.size != x.size // depth * units or (out.shape and out.shape[-1] != units):
        raise ctx.fail(f"output '{out.name}' has shape {list(out.shape)}, but "
                       f"{x.size // depth} row(s) of {counted(units, 'unit')} are computed")
    _check_bias(ctx, units)


def _check_binary(ctx: _OpContext) -> None:
    a, b = ctx.tensor(0), ctx.tensor(1)
    _options(ctx)
    try:
        shape = np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        raise ctx.fail(f"inputs '{a.name}' {list(a.shape)} and '{b.name}' {list(b.shape)} do "
                       "not broadcast") from None
    _check_shape_is(ctx, shape)


def _axis_values(ctx: _OpContext, i: int, what: str, rank: int) -> list[int]:
    """A constant int32 operand of axes, each in ``[-rank, rank)``."""
    t = ctx.tensor(i)
    if t.data is None or t.dtype != "int32":
        raise ctx.fail(f"{what} '{t.name}' must be a constant int32 tensor, got "
                       f"{'a computed ' if t.data is None else ''}{t.dtype}")
    values = [int(v) for v in t.data.reshape(-1)]
    for v in values:
        if not -rank <= v < rank:
            raise ctx.fail(f"{what} {v} is out of range for input '{ctx.tensor(0).name}' of "
                           f"rank {rank}")
    return values


def _check_mean(ctx: _OpContext) -> None:
    x = ctx.tensor(0)
    axes = sorted({a % len(x.shape) for a in _axis_values(ctx, 1, "axis", len(x.shape))})
    keep = bool(ctx.op.options.get("keep_dims", False))
    shape = [1 if k in axes else d for k, d in enumerate(x.shape) if keep or k not in axes]
    _check_shape_is(ctx, shape)


def _check_pool(ctx: _OpContext) -> None:
    x = ctx.tensor(0)
    _rank(ctx, x, (4,), "input")
    _options(ctx, "stride_h", "stride_w", "filter_height", "filter_width")
    o = ctx.op.options
    kernel = (int(o.get("filter_height", 1)), int(o.get("filter_width", 1)))
    stride = (int(o.get("stride_h", 1)), int(o.get("stride_w", 1)))
    pads = same_padding(o.get("padding", "VALID"), x.shape[1:3], kernel, stride)
    _check_shape_is(ctx, (x.shape[0], output_size(x.shape[1], kernel[0], stride[0], 1, *pads[:2]),
                          output_size(x.shape[2], kernel[1], stride[1], 1, *pads[2:]),
                          x.shape[3]))


def _check_pad(ctx: _OpContext) -> None:
    x, p = ctx.tensor(0), ctx.tensor(1)
    if p.data is None or p.dtype not in ("int32", "int64") or p.data.shape != (len(x.shape), 2):
        raise ctx.fail(f"paddings '{p.name}' must be a constant int32 tensor of shape "
                       f"[{len(x.shape)}, 2], got {p.dtype} {list(p.shape)}")
    if np.any(p.data < 0):
        raise ctx.fail(f"paddings '{p.name}' are negative ({p.data.tolist()})")
    value = ctx.tensor(2)
    if value is not None and (value.data is None or value.size != 1 or value.dtype != x.dtype):
        raise ctx.fail(f"constant value '{value.name}' must be one constant {x.dtype}")
    _check_type_kept(ctx)
    _check_shape_is(ctx, [d + int(a) + int(b) for d, (a, b) in zip(x.shape, p.data)])


def _check_same_type(ctx: _OpContext, a, a_role: str, b, b_role: str, why: str) -> None:
    """Tensor ``a`` has ``b``'s type and, for int8, its quantization (values are copied)."""
    if a.dtype != b.dtype:
        raise ctx.fail(f"{a_role} '{a.name}' is {a.dtype}, {b_role} '{b.name}' {b.dtype}")
    if a.dtype == "int8" and a.quant is not None and b.quant is not None and (
            a.quant.scalar_scale, a.quant.scalar_zero_point) != (
            b.quant.scalar_scale, b.quant.scalar_zero_point):
        raise ctx.fail(f"{a_role} '{a.name}' is quantized unlike {b_role} '{b.name}'; {why}")


def _check_type_kept(ctx: _OpContext) -> None:
    """Data movement: the output has the input's type (and int8 quantization)."""
    _check_same_type(ctx, ctx.out, "output", ctx.tensor(0), "input",
                     "TFLite copies the values unchanged")


def _check_reshape(ctx: _OpContext) -> None:
    x, out = ctx.tensor(0), ctx.out
    if out.size != x.size:
        raise ctx.fail(f"output '{out.name}' {list(out.shape)} has {counted(out.size, 'element')}"
                       f", input '{x.name}' {list(x.shape)} {x.size}")


def _check_transpose(ctx: _OpContext) -> None:
    x = ctx.tensor(0)
    perm = _axis_values(ctx, 1, "perm", len(x.shape))
    if sorted(perm) != list(range(len(x.shape))):
        raise ctx.fail(f"perm {perm} is not a permutation of the {len(x.shape)} input axes")
    _check_type_kept(ctx)
    _check_shape_is(ctx, [x.shape[p] for p in perm])


def _check_concatenation(ctx: _OpContext) -> None:
    out = ctx.out
    rank = len(out.shape)
    axis = int(ctx.op.options.get("axis", 0))
    if not -rank <= axis < rank:
        raise ctx.fail(f"axis {axis} is out of range for output '{out.name}' of rank {rank}")
    axis %= rank
    _options(ctx)
    parts = [ctx.tensor(k) for k in range(len(ctx.op.inputs))]
    for t in parts:
        if len(t.shape) != rank or any(d != e for k, (d, e) in enumerate(zip(t.shape, out.shape))
                                       if k != axis):
            raise ctx.fail(f"input '{t.name}' {list(t.shape)} does not concatenate into "
                           f"output '{out.name}' {list(out.shape)} along axis {axis}")
        _check_same_type(ctx, t, "input", out, "output",
                         "TFLite Micro concatenates int8 values unchanged")
    _check_shape_is(ctx, [sum(t.shape[axis] for t in parts) if k == axis else d
                          for k, d in enumerate(out.shape)])


def _check_resize_nearest(ctx: _OpContext) -> None:
    x, size = ctx.tensor(0), ctx.tensor(1)
    _rank(ctx, x, (4,), "input")
    if size.data is None or size.dtype != "int32" or size.size != 2 or np.any(size.data < 1):
        raise ctx.fail(f"size '{size.name}' must be a constant int32 vector of 2 positive "
                       "values")
    oh, ow = (int(v) for v in size.data.reshape(-1))
    _check_shape_is(ctx, (x.shape[0], oh, ow, x.shape[3]))


def _check_same_shape(ctx: _OpContext) -> None:
    """Elementwise operators (activations, QUANTIZE, DEQUANTIZE)."""
    _check_shape_is(ctx, ctx.tensor(0).shape)


def _check_softmax(ctx: _OpContext) -> None:
    """SOFTMAX and LOG_SOFTMAX, over the last axis: the input's shape, and a float32 input
    gives a float32 output (TFLite Micro: float32 -> float32, int8 -> int8 or int16)."""
    x, out = ctx.tensor(0), ctx.out
    if not x.shape:
        raise ctx.fail(f"input '{x.name}' is a scalar; {ctx.op.op} needs at least one axis")
    if "float32" in (x.dtype, out.dtype) and x.dtype != out.dtype:
        raise ctx.fail(f"input '{x.name}' is {x.dtype}, output '{out.name}' {out.dtype}; "
                       f"TFLite's float {ctx.op.op} writes float32")
    _check_shape_is(ctx, x.shape)


def _check_arg_max(ctx: _OpContext) -> None:
    """ARG_MAX: TFLite Micro's types (:data:`ARG_MAX_TYPES`), one constant int32 axis, the
    input's shape without that axis."""
    x, out = ctx.tensor(0), ctx.out
    inputs, outputs = ARG_MAX_TYPES
    if x.dtype not in inputs:
        raise ctx.fail(f"input '{x.name}' is {x.dtype}; TFLite Micro's ARG_MAX takes "
                       f"{' or '.join(inputs)}")
    if out.dtype not in outputs:
        raise ctx.fail(f"output '{out.name}' is {out.dtype}; TFLite Micro's ARG_MAX writes "
                       f"{' or '.join(outputs)} indices")
    axis = _axis_values(ctx, 1, "axis", len(x.shape))
    if len(axis) != 1:
        raise ctx.fail(f"axis '{ctx.tensor(1).name}' has {counted(len(axis), 'value')}; "
                       "ARG_MAX reduces one axis")
    axis = axis[0] % len(x.shape)
    _check_shape_is(ctx, x.shape[:axis] + x.shape[axis + 1:])


_CHECKS: dict[str, Callable[[_OpContext], None]] = {
    "CONV_2D": _check_conv, "DEPTHWISE_CONV_2D": _check_conv,
    "FULLY_CONNECTED": _check_fully_connected, "ADD": _check_binary, "MUL": _check_binary,
    "MEAN": _check_mean, "AVERAGE_POOL_2D": _check_pool, "MAX_POOL_2D": _check_pool,
    "PAD": _check_pad, "PADV2": _check_pad, "RESHAPE": _check_reshape,
    "TRANSPOSE": _check_transpose, "CONCATENATION": _check_concatenation,
    "STRIDED_SLICE": lambda ctx: None,      # strided_slice_params validates it completely
    "RESIZE_NEAREST_NEIGHBOR": _check_resize_nearest, "SOFTMAX": _check_softmax,
    "LOG_SOFTMAX": _check_softmax, "ARG_MAX": _check_arg_max,
}


def conv_params(model: TFLiteModel, op: Operator) -> ConvParams:
    """The :class:`ConvParams` TFLM prepares for a CONV_2D or DEPTHWISE_CONV_2D of ``model``
    (weights are ``model.tensors[op.inputs[1]].data``, the bias ``op.inputs[2]``)."""
    ctx = _OpContext(model, op)
    x, w, out = ctx.tensor(0), ctx.tensor(1), ctx.out
    ctx.int8(x, w, out)
    o = op.options
    weights = ctx.const(1, "weights")
    if op.op == "DEPTHWISE_CONV_2D":
        _, kh, kw, cout = weights.shape
    else:
        cout, kh, kw, _ = weights.shape
    stride = (o.get("stride_h", 1), o.get("stride_w", 1))
    dilation = (o.get("dilation_h_factor", 1), o.get("dilation_w_factor", 1))
    padding = same_padding(o.get("padding", "VALID"), x.shape[1:3], (kh, kw), stride, dilation)
    in_scale, in_zp = ctx.scale_zp(x)
    out_scale, out_zp = ctx.scale_zp(out)
    filter_scales = np.broadcast_to(w.quant.scale, (cout,))
    _check_shape(ctx, (x.shape[0], output_size(x.shape[1], kh, stride[0], dilation[0],
                                               *padding[:2]),
                       output_size(x.shape[2], kw, stride[1], dilation[1], *padding[2:]), cout))
    try:
        requant = conv_requant(in_scale, filter_scales, out_scale, out_zp, ctx.activation())
    except ReferenceError as e:
        raise ctx.fail(str(e)) from None
    return ConvParams(stride, dilation, padding, in_zp, requant)


def _prep_conv(ctx: _OpContext) -> Kernel:
    params = conv_params(ctx.model, ctx.op)
    weights = ctx.const(1, "weights")
    bias = ctx.bias(2, ctx.out.shape[-1])
    fn = depthwise_conv2d_int8 if ctx.op.op == "DEPTHWISE_CONV_2D" else conv2d_int8
    return lambda a: fn(a[0], weights, bias, params)


#: Tensor types TFLite Micro's STRIDED_SLICE copies (``strided_slice.cc``).
_STRIDED_SLICE_TYPES = ("int8", "int16", "int32", "float32", "bool")


def strided_slice_params(model: TFLiteModel, op: Operator, runtime: str = TFLM
                         ) -> StridedSliceParams:
    """The :class:`StridedSliceParams` of a STRIDED_SLICE of ``model``, validated as TFLite Micro
    prepares it: ``begin``, ``end`` and ``strides`` constant int32 vectors of one value per
    input axis, rank at most 4, output type equal to the input's, output shape as computed.

    ``ellipsis_mask`` and ``new_axis_mask`` are refused: TFLM ignores both (it zeroes them),
    so it would slice differently than TFLite. ``offset`` (``end`` relative to ``begin``) is
    applied for ``runtime="litert"``; TFLM ignores it too, so for ``runtime="tflm"`` a model
    with ``offset`` is accepted only when it slices the same either way."""
    ctx = _OpContext(model, op, runtime)
    x, out = ctx.tensor(0), ctx.out
    o = op.options
    for mask in ("ellipsis_mask", "new_axis_mask"):
        if o.get(mask, 0):
            raise ReferenceError(f"{ctx.where}: {mask}={o[mask]} is not supported (TFLite Micro "
                                 "ignores it, so its result would differ from TFLite's)")
    if len(op.inputs) != 4 or x is None:
        raise ctx.unsupported(f"{counted(len(op.inputs), 'input')} (expected input, begin, end, "
                              "strides)")
    if x.dtype not in _STRIDED_SLICE_TYPES:
        raise ctx.unsupported(f"tensor '{x.name}' is {x.dtype} (TFLite Micro slices "
                              f"{', '.join(_STRIDED_SLICE_TYPES)})")
    if out.dtype != x.dtype:
        raise ReferenceError(f"{ctx.where}: output type {out.dtype} differs from the input's "
                             f"{x.dtype}")
    if len(x.shape) > 4:
        raise ReferenceError(f"{ctx.where}: input of rank {len(x.shape)} (TFLite Micro slices "
                             "at most 4 dimensions)")
    vectors = []
    for i, what in ((1, "begin"), (2, "end"), (3, "strides")):
        data = ctx.const(i, what)
        if ctx.tensor(i).dtype != "int32" or data.ndim != 1 or data.size != len(x.shape):
            raise ctx.unsupported(f"{what} must be an int32 vector of "
                                  f"{counted(len(x.shape), 'value')} "
                                  f"(one per input axis), got {ctx.tensor(i).dtype} "
                                  f"{list(data.shape)}")
        vectors.append([int(v) for v in data])
    masks = {k: int(o.get(k, 0)) for k in ("begin_mask", "end_mask", "shrink_axis_mask")}
    offset = bool(o.get("offset", False))
    try:
        params = resolve_strided_slice(x.shape, *vectors, **masks, offset=offset)
        if offset and runtime == TFLM:
            ignored = resolve_strided_slice(x.shape, *vectors, **masks)
            if ignored != params:
                raise ReferenceError(
                    f"offset=True is not supported: TFLite Micro ignores it and would take "
                    f"{list(ignored.count)} elements from {list(ignored.start)} instead of "
                    f"TFLite's {list(params.count)} from {list(params.start)}")
    except ReferenceError as e:
        raise ReferenceError(f"{ctx.where}: {str(e).removeprefix('STRIDED_SLICE: ')}") from None
    _check_shape(ctx, params.out_shape)
    return params


def _check_shape(ctx: _OpContext, shape) -> None:
    if tuple(shape) != ctx.out.shape:
        raise ReferenceError(f"{ctx.where}: computed output shape {tuple(shape)} differs from "
                             f"the model's {ctx.out.shape}")


def _prep_fully_connected(ctx: _OpContext) -> Kernel:
    x, w, out = ctx.tensor(0), ctx.tensor(1), ctx.out
    ctx.int8(x, w, out)
    weights = ctx.const(1, "weights")
    units, depth = weights.shape
    in_scale, in_zp = ctx.scale_zp(x)
    out_scale, out_zp = ctx.scale_zp(out)
    act = activation_range(ctx.activation(), out_scale, out_zp)
    bias = ctx.bias(2, units)
    shape = out.shape
    if ctx.runtime == LITERT:
        reals = float(in_scale) * w.quant.scale.astype(np.float64) / float(out_scale)
        return lambda a: requantize_float(fully_connected_accumulate(a[0], weights, bias, in_zp),
                                          reals if w.quant.per_channel else reals[0], out_zp,
                                          *act).reshape(shape)
    if w.quant.per_channel:
        requant = conv_requant(in_scale, w.quant.scale, out_scale, out_zp, ctx.activation())
    else:   # GetQuantizedConvolutionMultipler: the scale product is taken in float32
        product = np.float32(in_scale) * np.float32(w.quant.scale[0])
        requant = _requant(float(product) / float(out_scale), out_zp, act)
    return lambda a: fully_connected_int8(a[0], weights, bias, in_zp, requant).reshape(shape)


def _prep_add(ctx: _OpContext) -> Kernel:
    a, b, out = ctx.tensor(0), ctx.tensor(1), ctx.out
    ctx.int8(a, b, out)
    params = add_params(*ctx.scale_zp(a), *ctx.scale_zp(b), *ctx.scale_zp(out), ctx.activation())
    return lambda v: add_int8(v[0], v[1], params)


def _prep_mul(ctx: _OpContext) -> Kernel:
    a, b, out = ctx.tensor(0), ctx.tensor(1), ctx.out
    ctx.int8(a, b, out)
    (sa, za), (sb, zb), (so, zo) = ctx.scale_zp(a), ctx.scale_zp(b), ctx.scale_zp(out)
    requant = mul_requant(sa, sb, so, zo, ctx.activation())
    return lambda v: mul_int8(v[0], v[1], za, zb, requant)


def _prep_mean(ctx: _OpContext) -> Kernel:
    x, out = ctx.tensor(0), ctx.out
    ctx.int8(x, out)
    axes = [int(a) for a in np.asarray(ctx.const(1, "axis")).reshape(-1)]
    (si, zi), (so, zo) = ctx.scale_zp(x), ctx.scale_zp(out)
    m, s = quantize_multiplier(float(si) / float(so))
    shape = out.shape
    return lambda v: mean_int8(v[0], axes, zi, m, s, zo).reshape(shape)


def _prep_pool(ctx: _OpContext, fn) -> Kernel:
    x, out = ctx.tensor(0), ctx.out
    ctx.int8(x, out)
    if ctx.scale_zp(x) != ctx.scale_zp(out):
        raise ctx.unsupported("input and output quantization differ (TFLite requires equal)")
    o = ctx.op.options
    kernel = (o["filter_height"], o["filter_width"])
    stride = (o["stride_h"], o["stride_w"])
    padding = same_padding(o.get("padding", "VALID"), x.shape[1:3], kernel, stride)
    params = PoolParams(kernel, stride, padding,
                        *activation_range(ctx.activation(), *ctx.scale_zp(out)))
    return lambda v: fn(v[0], params)


def _prep_pad(ctx: _OpContext) -> Kernel:
    x, out = ctx.tensor(0), ctx.out
    paddings = ctx.const(1, "paddings")
    if x.dtype == "int8":
        ctx.int8(out)
        value = ctx.scale_zp(out)[1]
    else:
        value = 0
    if ctx.tensor(2) is not None:
        value = ctx.const(2, "constant_values").reshape(-1)[0]
    return lambda v: pad(v[0], paddings, value)


def _prep_reshape(ctx: _OpContext) -> Kernel:
    shape = ctx.out.shape
    return lambda v: v[0].reshape(shape)


def _prep_transpose(ctx: _OpContext) -> Kernel:
    perm = [int(p) for p in ctx.const(1, "perm").reshape(-1)]
    return lambda v: np.transpose(v[0], perm)


def _prep_strided_slice(ctx: _OpContext) -> Kernel:
    params = strided_slice_params(ctx.model, ctx.op, ctx.runtime)
    return lambda v: strided_slice(v[0], params)


def _prep_concatenation(ctx: _OpContext) -> Kernel:
    if ctx.activation() != "NONE":
        raise ctx.unsupported(f"fused activation {ctx.activation()}")
    axis = ctx.op.options.get("axis", 0) % len(ctx.out.shape)
    return lambda v: np.concatenate(list(v), axis=axis)


def _prep_resize_nearest(ctx: _OpContext) -> Kernel:
    size = [int(s) for s in ctx.const(1, "size").reshape(-1)]
    o = ctx.op.options
    ac, hp = bool(o.get("align_corners")), bool(o.get("half_pixel_centers"))
    return lambda v: resize_nearest_neighbor(v[0], size, ac, hp)


def _prep_quantize(ctx: _OpContext) -> Kernel:
    x, out = ctx.tensor(0), ctx.out
    ctx.int8(out)
    so, zo = ctx.scale_zp(out)
    if x.dtype == "float32":
        return lambda v: quantize(v[0], so, zo)
    ctx.int8(x)
    si, zi = ctx.scale_zp(x)
    m, s = quantize_multiplier(float(si) / float(so))
    return lambda v: requantize_int8(v[0], zi, m, s, zo)


def _prep_dequantize(ctx: _OpContext) -> Kernel:
    x = ctx.tensor(0)
    ctx.int8(x)
    if ctx.out.dtype != "float32":
        raise ctx.unsupported(f"output type {ctx.out.dtype} (expected float32)")
    s, z = ctx.scale_zp(x)
    return lambda v: dequantize(v[0], s, z)


def _prep_hard_swish(ctx: _OpContext) -> Kernel:
    x, out = ctx.tensor(0), ctx.out
    ctx.int8(x, out)
    params = hard_swish_params(*ctx.scale_zp(x), *ctx.scale_zp(out))
    return lambda v: hard_swish_int8(v[0], params)


def _prep_logistic(ctx: _OpContext) -> Kernel:
    x, out = ctx.tensor(0), ctx.out
    ctx.int8(x, out)
    if ctx.scale_zp(out)[1] != INT8_MIN:
        raise ctx.unsupported("int8 LOGISTIC needs output zero point -128")
    params = logistic_params(*ctx.scale_zp(x))
    return lambda v: logistic_int8(v[0], params)


def _prep_softmax(ctx: _OpContext) -> Kernel:
    x, out = ctx.tensor(0), ctx.out
    if x.dtype == "float32":
        beta = np.float32(ctx.op.options.get("beta", 1.0))
        return lambda v: softmax_float(v[0], beta)
    ctx.int8(x, out)
    if ctx.scale_zp(out) != (np.float32(1.0 / 256), INT8_MIN):
        raise ctx.unsupported("int8 SOFTMAX needs output scale 1/256 and zero point -128")
    params = softmax_params(ctx.op.options.get("beta", 1.0), ctx.scale_zp(x)[0])
    return lambda v: softmax_int8(v[0], params)


def _prep_log_softmax(ctx: _OpContext) -> Kernel:
    if ctx.tensor(0).dtype != "float32":
        raise ctx.unsupported(f"tensor '{ctx.tensor(0).name}' is {ctx.tensor(0).dtype}; the "
                              "reference interpreter implements float32 LOG_SOFTMAX only")
    return lambda v: log_softmax_float(v[0])


def _prep_arg_max(ctx: _OpContext) -> Kernel:
    axis = int(ctx.const(1, "axis").reshape(-1)[0]) % len(ctx.tensor(0).shape)
    return lambda v: arg_max(v[0], axis)


def _prep_relu(ctx: _OpContext) -> Kernel:
    x, out = ctx.tensor(0), ctx.out
    ctx.int8(x, out)
    (si, zi), (so, zo) = ctx.scale_zp(x), ctx.scale_zp(out)
    real = float(np.float32(si) / np.float32(so))         # the quotient is float32 in TFLM
    requant = _requant(real, zo, (max(INT8_MIN, zo), INT8_MAX))
    return lambda v: relu_int8(v[0], zi, requant)


def _prep_relu6(ctx: _OpContext) -> Kernel:
    x, out = ctx.tensor(0), ctx.out
    ctx.int8(x, out)
    (si, zi), (so, zo) = ctx.scale_zp(x), ctx.scale_zp(out)
    if ctx.runtime == LITERT:     # QuantizedReluX(0, 6): requantize, then clamp
        requant = _requant(float(np.float32(si) / np.float32(so)), zo,
                           (max(INT8_MIN, zo), min(INT8_MAX, _quantize_scalar(6.0, so, zo))))
        return lambda v: relu_int8(v[0], zi, requant)
    return lambda v: relu6_int8(v[0], si, zi)


_PREPARE: dict[str, Callable[[_OpContext], Kernel]] = {
    "CONV_2D": _prep_conv,
    "DEPTHWISE_CONV_2D": _prep_conv,
    "FULLY_CONNECTED": _prep_fully_connected,
    "ADD": _prep_add,
    "MUL": _prep_mul,
    "MEAN": _prep_mean,
    "AVERAGE_POOL_2D": lambda c: _prep_pool(c, average_pool_int8),
    "MAX_POOL_2D": lambda c: _prep_pool(c, max_pool_int8),
    "PAD": _prep_pad,
    "PADV2": _prep_pad,
    "RESHAPE": _prep_reshape,
    "TRANSPOSE": _prep_transpose,
    "STRIDED_SLICE": _prep_strided_slice,
    "CONCATENATION": _prep_concatenation,
    "RESIZE_NEAREST_NEIGHBOR": _prep_resize_nearest,
    "QUANTIZE": _prep_quantize,
    "DEQUANTIZE": _prep_dequantize,
    "HARD_SWISH": _prep_hard_swish,
    "LOGISTIC": _prep_logistic,
    "SOFTMAX": _prep_softmax,
    "LOG_SOFTMAX": _prep_log_softmax,
    "ARG_MAX": _prep_arg_max,
    "RELU": _prep_relu,
    "RELU6": _prep_relu6,
}

#: Operators the reference interpreter runs (int8 activations; QUANTIZE/DEQUANTIZE, SOFTMAX,
#: LOG_SOFTMAX and ARG_MAX also float32).
SUPPORTED_OPS = frozenset(_PREPARE)


def _prepare(ctx: _OpContext) -> Kernel:
    """The operator's kernel (onnxruntime's arithmetic for an operator whose options ask for
    it, :mod:`.ort_arithmetic`); a refusal of a shared helper (multiplier, window, ...) gets
    the operator's name."""
    try:
        if _ort.is_onnxruntime(ctx.op.options):
            return _ort.prepare(ctx)
        return _PREPARE[ctx.op.op](ctx)
    except ReferenceError as e:
        if str(e).startswith(ctx.where):
            raise
        raise ctx.fail(str(e)) from None


class Interpreter:
    """Runs a model with the kernels above. Parameters are prepared once, at construction
    (raising :class:`UnsupportedOperatorError` or :class:`ReferenceError` up front).

    ``runtime="tflm"`` (default) is TFLite Micro's arithmetic, the MCU specification;
    ``runtime="litert"`` switches the two kernels where LiteRT's reference resolver differs
    (FULLY_CONNECTED requantizes in double precision, RELU6 requantizes before clamping).
    """

    def __init__(self, model: TFLiteModel, runtime: str = TFLM):
        if runtime not in RUNTIMES:
            raise ValueError(f"unknown runtime {runtime!r} (use one of {RUNTIMES})")
        check_operators(model, SUPPORTED_OPS, "reference interpreter")
        validate(model)
        self.model = model
        self.runtime = runtime
        self._kernels = [_prepare(_OpContext(model, op, runtime)) for op in model.operators]

    def _feed(self, inputs) -> dict[int, np.ndarray]:
        model = self.model
        if isinstance(inputs, np.ndarray):
            inputs = [inputs]
        if isinstance(inputs, Mapping):
            by_name = {model.tensors[i].name: i for i in model.inputs}
            inputs = {by_name.get(k, k): v for k, v in inputs.items()}
            missing = [i for i in model.inputs if i not in inputs]
            if missing:
                raise ReferenceError(f"{model.source}: no value for input tensor "
                                     f"'{model.tensors[missing[0]].name}'")
            inputs = [inputs[i] for i in model.inputs]
        inputs = list(inputs)
        if len(inputs) != len(model.inputs):
            raise ReferenceError(f"{model.source}: {counted(len(inputs), 'input')} given, the "
                                 f"model has {len(model.inputs)}")
        values: dict[int, np.ndarray] = {}
        for i, arr in zip(model.inputs, inputs):
            t = model.tensors[i]
            arr = np.asarray(arr)
            if arr.shape != t.shape or arr.dtype != np.dtype(t.dtype):
                raise ReferenceError(f"{model.source}: input '{t.name}' must be {t.dtype} of "
                                     f"shape {list(t.shape)}, got {arr.dtype} "
                                     f"{list(arr.shape)}")
            values[i] = arr
        return values

    def run_all(self, inputs) -> dict[int, np.ndarray]:
        """Every activation tensor (graph inputs and every operator output) by tensor index."""
        values = self._feed(inputs)
        tensors = self.model.tensors
        for op, kernel in zip(self.model.operators, self._kernels):
            args = [None if i < 0 else (tensors[i].data if tensors[i].data is not None
                                        else values[i]) for i in op.inputs]
            out = np.asarray(kernel(args))
            t = tensors[op.outputs[0]]
            values[op.outputs[0]] = out.astype(t.dtype, copy=False).reshape(t.shape)
        return values

    def run(self, inputs) -> list[np.ndarray]:
        """The graph outputs, in the model's output order."""
        values = self.run_all(inputs)
        return [values[i] for i in self.model.outputs]


def run(model: TFLiteModel, inputs, runtime: str = TFLM) -> list[np.ndarray]:
    """One-shot :meth:`Interpreter.run`; ``inputs`` is an array, a list in model input order,
    or a dict keyed by input tensor index or name."""
    return Interpreter(model, runtime).run(inputs)


def run_all(model: TFLiteModel, inputs, runtime: str = TFLM) -> dict[int, np.ndarray]:
    """One-shot :meth:`Interpreter.run_all`."""
    return Interpreter(model, runtime).run_all(inputs)


# onnxruntime's arithmetic builds on the kernels above (it imports this module)
from . import ort_arithmetic as _ort  # noqa: E402
