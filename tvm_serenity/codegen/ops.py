"""What the MCU's C kernels share, and the float32 operators still written as C text.

The graph emitter's kernels are generated from TIR: convolutions, depthwise convolutions,
pooling and same-shape ADD by :mod:`.kernels` / :mod:`.plain_c`; MEAN, FULLY_CONNECTED,
TRANSPOSE, CONCATENATION, PAD, STRIDED_SLICE and RESIZE_NEAREST_NEIGHBOR by :mod:`.layout_ops`;
int8 QUANTIZE (requantize), RELU, RELU6, the 256-entry table lookups (HARD_SWISH, LOGISTIC, a
binary operator with a constant scalar), broadcasting MUL and ADD, int8 SOFTMAX and the float
edges (float32 -> int8 QUANTIZE, int8 -> float32 DEQUANTIZE) by :mod:`.elementwise_ops`. Those
modules state each kernel's arithmetic and in-place safety. What is left here:

* what they share: :class:`OpKernel` (a generated C function and the scratch it needs),
  :func:`c_array` (a constant table as C), the parameter checks (``_check_int8``,
  ``_check_requant``), the rank-4 geometry (``_pad4``, ``_strides``, ``_broadcast_strides``),
  ``_plus``, :func:`c_float` and TFLM's SOFTMAX constants (:data:`SOFTMAX_ACCUMULATION_BITS`,
  gemmlowp's reciprocal constants);
* the float32 operators after the int8 core, still C text because their ``exp`` and ``log``
  are C helpers: ``softmax_float_kernel`` and ``log_softmax_float_kernel``, TFLite's
  ``reference_ops`` loops in float32
  (:func:`tvm_serenity.frontend.reference.softmax_float` and siblings), each ``static void
  name(const int8_t *input, int8_t *output)`` reading and writing through ``memcpy`` (float
  tensors sit at any byte offset of the arena: no unaligned word access).

Their ``exp`` and ``log`` are :func:`float_math_c`'s ``serenity_expf`` / ``serenity_logf``,
glibc's algorithm (the reference's :func:`~tvm_serenity.frontend.reference.expf`) in portable
C: float64 products and sums, integer bit manipulation and the reference's tables, no libm.
So every target computes what TFLite Micro computes on the glibc host where its outputs are
checked; the Pico toolchain's newlib ``expf``/``logf`` (fdlibm on soft-float Cortex-M) differ
from glibc in about 1% / 4% of the softmax range by 1 ulp, and the host harness links no libm.
The helpers turn floating-point contraction off (a fused multiply-add would round
differently). A float64 operation is a soft-float call on the Cortex-M0+ and M33 (no double
FPU): about one microsecond per exponential, for the few classes of a classifier head.

In-place safety, which the graph emitter relies on when the arena plan overlaps input and
output (docs/rip.md): the float32 SOFTMAX and LOG_SOFTMAX read a row whole (its maximum, its
sum) before writing it, then each output right after its input: exact alias is safe.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..frontend import reference as ref
from .spec import INT8_MAX, INT8_MIN, CodegenError

__all__ = ["OpKernel", "c_array", "c_float", "SOFTMAX_ACCUMULATION_BITS", "FLOAT_MATH",
           "float_math_c", "softmax_float_kernel", "log_softmax_float_kernel"]


_CTYPES = {"int8": "int8_t", "int16": "int16_t", "int32": "int32_t"}


@dataclass(frozen=True)
class OpKernel:
    """One generated C function: its name, definition and the scratch it needs
    (``scratch16`` int16 elements passed as ``scratch``, ``scratch32`` int32 elements passed
    as ``acc``; the caller owns both and may share them between layers)."""

    name: str
    source: str
    scratch16: int = 0
    scratch32: int = 0


def c_array(name: str, dtype: str, values, per_line: int = 24) -> str:
    """``static const <type> name[N] = {...};`` for a flat integer array or a float32 one
    (exact hexadecimal literals; flash on an MCU)."""
    if dtype == "float32":
        flat = np.asarray(values, np.float32).reshape(-1)
        if flat.size == 0:
            raise CodegenError(f"c_array {name}: empty arrays are not valid C")
        text = [c_float(v) for v in flat]
        rows = [", ".join(text[i:i + per_line // 2]) for i in range(0, len(text), per_line // 2)]
        return (f"static const float {name}[{flat.size}] = {{\n    "
                + ",\n    ".join(rows) + "\n};\n")
    if dtype not in _CTYPES:
        raise CodegenError(f"c_array: unsupported dtype {dtype!r}")
    flat = np.asarray(values).reshape(-1).astype(np.int64)
    info = np.iinfo(dtype)
    if flat.size and (flat.min() < info.min or flat.max() > info.max):
        raise CodegenError(f"c_array {name}: values outside {dtype}")
    if flat.size == 0:
        raise CodegenError(f"c_array {name}: empty arrays are not valid C")
    # INT32_MIN has no literal of type int32_t; write it as an expression.
    text = [str(v) if v != -(1 << 31) else "(-2147483647 - 1)" for v in flat.tolist()]
    rows = [", ".join(text[i:i + per_line]) for i in range(0, len(text), per_line)]
    body = ",\n    ".join(rows)
    return f"static const {_CTYPES[dtype]} {name}[{flat.size}] = {{\n    {body}\n}};\n"


def _plus(value: int) -> str:
    """`` + v`` / `` - |v|`` for adding a constant in C."""
    return f"+ {value}" if value >= 0 else f"- {-value}"


def _check_int8(what: str, *values: int) -> None:
    for v in values:
        if not INT8_MIN <= int(v) <= INT8_MAX:
            raise CodegenError(f"{what}: {v} is not an int8 value")


def _check_requant(what: str, multiplier: int, shift: int) -> None:
    if not 0 <= int(multiplier) < (1 << 31) or not -31 <= int(shift) <= 30:
        raise CodegenError(f"{what}: requantization ({multiplier}, {shift}) is not a "
                           "multiplier in [0, 2^31) with a shift in [-31, 30]")


def _check_ort_requant(what: str, multiplier: int, shift: int) -> None:
    """onnxruntime's requantization ``(M, E)`` of a float32 scale ``M * 2^-E``."""
    if not (1 << 23) <= int(multiplier) < (1 << 24) or not 0 <= int(shift) <= 200:
        raise CodegenError(f"{what}: onnxruntime requantization ({multiplier}, {shift}) is "
                           "not a float32 significand in [2^23, 2^24) with an exponent")


def _pad4(shape) -> tuple[int, int, int, int]:
    shape = tuple(int(d) for d in shape)
    if len(shape) > 4:
        raise CodegenError(f"tensors of rank {len(shape)} are not supported (at most 4)")
    return (1,) * (4 - len(shape)) + shape   # type: ignore[return-value]


def _strides(shape) -> list[int]:
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= d
    return out[::-1]


def _broadcast_strides(name: str, shape, out4) -> list[int]:
    """Element strides of an operand of ``shape`` read at every index of ``out4`` (NumPy/TFLite
    broadcasting: a size-1 axis is read at index 0, stride 0)."""
    shape4 = _pad4(shape)
    if any(d not in (1, o) for d, o in zip(shape4, out4)):
        raise CodegenError(f"{name}: operand shape {list(shape)} does not broadcast to "
                           f"{list(out4)}")
    return [0 if d == 1 else s for d, s in zip(shape4, _strides(shape4))]


#: gemmlowp constants of ``one_over_one_plus_x_for_x_in_0_1`` (48/17 and 32/17 in Q2.29).
_RECIPROCAL_48_17, _RECIPROCAL_32_17 = 1515870810, 1010580540
#: TFLM's SOFTMAX: the sum of exponentials has 12 integer bits, the int8 output 8 bits.
SOFTMAX_ACCUMULATION_BITS = 12


def c_float(value: float) -> str:
    """A float32 value as an exact C99 literal (hexadecimal, ``f`` suffix)."""
    v = np.float32(value)
    if not np.isfinite(v):
        raise CodegenError(f"c_float: {value} is not a finite float32")
    return f"{float(v).hex()}f"


def _c_double(value: float) -> str:
    """A float64 value as an exact C99 hexadecimal literal."""
    return float(value).hex()


#: The functions :func:`float_math_c` defines, as kernels name them.
FLOAT_MATH = ("expf", "logf")


def float_math_c(functions=FLOAT_MATH) -> str:
    """C definitions of ``serenity_expf`` and / or ``serenity_logf`` (``functions``, a subset
    of :data:`FLOAT_MATH`): glibc's ``expf`` and ``logf`` (:func:`tvm_serenity.frontend.
    reference.expf` / ``logf``, every float64 operation rounded on its own), with the
    reference's tables (module docstring)."""
    unknown = set(functions) - set(FLOAT_MATH)
    if unknown or not functions:
        raise CodegenError(f"float_math_c: {sorted(unknown) or 'no function'} (choose from "
                           f"{', '.join(FLOAT_MATH)})")
    e, g = ref.EXPF_CONSTANTS, ref.LOGF_CONSTANTS
    exp_table = ",\n    ".join(", ".join(f"0x{int(v):016x}ull" for v in ref.EXPF_TABLE[i:i + 4])
                               for i in range(0, 32, 4))
    log_table = ",\n    ".join(f"{{{_c_double(a)}, {_c_double(b)}}}" for a, b in ref.LOGF_TABLE)
    prologue = f"""\
/* expf and logf as glibc computes them (Arm optimized-routines), without libm: float64
 * products and sums each rounded on its own, so no fused multiply-add. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
static float serenity_float_of_bits(uint32_t bits) {{
    float x;
    memcpy(&x, &bits, 4);
    return x;
}}
"""
    exp = f"""
static const uint64_t serenity_exp2_table[32] = {{
    {exp_table}
}};

static float serenity_expf(float x) {{
    uint32_t bits, top;
    uint64_t k, t;
    double z, kd, r, s, p, q;
    memcpy(&bits, &x, 4);
    top = (bits >> 20) & 0x7ffu;
    if (top >= 0x42bu) {{                 /* |x| >= 88, inf or NaN */
        if (bits == 0xff800000u) return 0.0f;
        if (top >= 0x7f8u) return x + x;
        if (x > {c_float(ref.EXPF_OVERFLOW)}) return serenity_float_of_bits(0x7f800000u);
        if (x < {c_float(ref.EXPF_UNDERFLOW)}) return 0.0f;
        if (x < {c_float(ref.EXPF_MAY_UNDERFLOW)}) return {c_float(2.0 ** -149)};
    }}
    z = {_c_double(e["invln2_n"])} * (double)x;      /* x * 32 / ln 2 = k + r */
    kd = z + {_c_double(e["shift"])};               /* k in the low bits */
    memcpy(&k, &kd, 8);
    kd = kd - {_c_double(e["shift"])};
    r = z - kd;
    t = serenity_exp2_table[k % 32u] + (k << 47);     /* 2^(k/32) */
    memcpy(&s, &t, 8);
    p = {_c_double(e["c0"])} * r;
    p = p + {_c_double(e["c1"])};
    q = {_c_double(e["c2"])} * r;
    q = q + 1.0;
    p = p * (r * r);
    p = p + q;
    return (float)(p * s);
}}
"""
    log = f"""
static const double serenity_log_table[16][2] = {{
    {log_table}
}};

static float serenity_logf(float x) {{
    uint32_t bits, tmp, zbits;
    int32_t k, i;
    float zf;
    double z, r, r2, y, y0, p;
    memcpy(&bits, &x, 4);
    if (bits == 0x3f800000u) return 0.0f;
    if (bits - 0x00800000u >= 0x7f000000u) {{   /* zero, subnormal, negative, inf or NaN */
        if (bits * 2u == 0u) return serenity_float_of_bits(0xff800000u);   /* -inf */
        if (bits == 0x7f800000u) return x;
        if ((bits & 0x80000000u) || bits * 2u >= 0xff000000u) return (x - x) / (x - x);
        x = x * {c_float(2.0 ** 23)};              /* subnormal: normalize */
        memcpy(&bits, &x, 4);
        bits -= 23u << 23;
    }}
    tmp = bits - 0x3f330000u;                /* x = 2^k z, z in [0x1.66p-1, 0x1.66p0) */
    i = (int32_t)((tmp >> 19) % 16u);
    k = (int32_t)(tmp & 0xff800000u) / (1 << 23);
    zbits = bits - (tmp & 0xff800000u);
    memcpy(&zf, &zbits, 4);
    z = (double)zf;
    p = z * serenity_log_table[i][0];
    r = p - 1.0;                             /* z / c - 1 */
    p = (double)k * {_c_double(g["ln2"])};
    y0 = serenity_log_table[i][1] + p;
    r2 = r * r;
    p = {_c_double(g["a1"])} * r;
    y = p + {_c_double(g["a2"])};
    p = {_c_double(g["a0"])} * r2;
    y = p + y;
    p = y * r2;
    return (float)(p + (y0 + r));
}}
"""
    return prologue + (exp if "expf" in functions else "") + (log if "logf" in functions else "")


def _rows_check(name: str, what: str, rows: int, depth: int) -> None:
    if rows < 1 or depth < 1:
        raise CodegenError(f"{name}: empty {what} ({rows}x{depth})")


def _float_rows_kernel(name: str, comment: str, rows: int, depth: int, locals_: str,
                       body: str) -> OpKernel:
    """A kernel over ``rows`` rows of ``depth`` float32 values that starts every row with its
    maximum (``max``, TFLite's ``std::numeric_limits<float>::lowest()`` start) and then runs
    ``body`` with ``x``/``y`` pointing at the row's input/output and ``v`` a float."""
    source = f"""\
/* {comment} */
static void {name}(const int8_t *input, int8_t *output) {{
    for (int32_t r = 0; r < {rows}; ++r) {{
        const int8_t *x = input + r * {4 * depth};
        int8_t *y = output + r * {4 * depth};
        float max = {c_float(np.finfo(np.float32).min)}, sum = 0.0f, v{locals_};
        for (int32_t i = 0; i < {depth}; ++i) {{
            memcpy(&v, x + 4 * i, 4);
            if (max < v) max = v;
        }}
{body}    }}
}}
"""
    return OpKernel(name, source)


def softmax_float_kernel(name: str, rows: int, depth: int, beta: float) -> OpKernel:
    """TFLite's float SOFTMAX (``reference_ops::Softmax``, :func:`~tvm_serenity.frontend.
    reference.softmax_float`) over ``rows`` rows of ``depth`` float32 values: the row
    maximum, ``exp((x - max) * beta)`` written to the output and summed in order, then each
    divided by the sum. Exact alias is safe (module docstring)."""
    _rows_check(name, "SOFTMAX", rows, depth)
    body = f"""\
        for (int32_t i = 0; i < {depth}; ++i) {{
            memcpy(&v, x + 4 * i, 4);
            v = serenity_expf((v - max) * {c_float(beta)});
            memcpy(y + 4 * i, &v, 4);
            sum += v;
        }}
        for (int32_t i = 0; i < {depth}; ++i) {{
            memcpy(&v, y + 4 * i, 4);
            v = v / sum;
            memcpy(y + 4 * i, &v, 4);
        }}
"""
    return _float_rows_kernel(
        name, f"SOFTMAX float32: {rows} row(s) of {depth}, beta {float(np.float32(beta))!r} "
        "(TFLite\n * reference_ops::Softmax).", rows, depth, "", body)


def log_softmax_float_kernel(name: str, rows: int, depth: int) -> OpKernel:
    """TFLite's float LOG_SOFTMAX (``reference_ops::LogSoftmax``, :func:`~tvm_serenity.
    frontend.reference.log_softmax_float`): per row the maximum, the sum of ``exp(x - max)``
    in order, then ``(x - max) - log(sum)``. Exact alias is safe."""
    _rows_check(name, "LOG_SOFTMAX", rows, depth)
    body = f"""\
        for (int32_t i = 0; i < {depth}; ++i) {{
            memcpy(&v, x + 4 * i, 4);
            sum += serenity_expf(v - max);
        }}
        log_sum = serenity_logf(sum);
        for (int32_t i = 0; i < {depth}; ++i) {{
            memcpy(&v, x + 4 * i, 4);
            v = v - max - log_sum;
            memcpy(y + 4 * i, &v, 4);
        }}
"""
    return _float_rows_kernel(
        name, f"LOG_SOFTMAX float32: {rows} row(s) of {depth} (TFLite reference_ops::LogSoftmax).",
        rows, depth, ", log_sum", body)


