"""The elementwise int8 operators and the float edges as TIR PrimFuncs: one kernel, printed as
the MCU's C and built by TVM for llvm.

For each of int8 QUANTIZE / RELU (``requantize``), RELU6 (``clamp``), the 256-entry table
lookups (``lookup``: HARD_SWISH, LOGISTIC, a binary operator with a constant scalar), MUL and
broadcasting ADD, int8 SOFTMAX and the float edges (float32 -> int8 QUANTIZE, int8 -> float32
DEQUANTIZE), ``<op>_prim_func`` builds the kernel with TVM's IRBuilder, with the integer
arithmetic of :mod:`tvm_serenity.frontend.reference` (every requantization is
:func:`.kernels.requantize`, TFLite's ``MultiplyByQuantizedMultiplier`` in 32 bits) and
constants baked in (loop bounds, strides, zero points, multipliers); no loop divides (the
float QUANTIZE's float32 division by the scale is the operator's own arithmetic).
``<op>_kernel`` refuses what the kernel cannot do (a :class:`~.spec.CodegenError` naming it)
and returns the :class:`.ops.OpKernel` the graph emitter calls, whose ``source`` is the
PrimFunc (built by :func:`.kernels.prim_func`) lowered by :func:`.plain_c.op_kernel` as
``static void name(...)`` with the parameters below. The C needs ``<stdint.h>`` and, for the
float edges, ``<string.h>`` (``memcpy``); it calls no helper.

Buffer parameters, in this order (``elements``-long int8 unless stated):

* ``requantize``, ``clamp``: ``input``, ``output``.
* ``lookup``: ``input``, ``output``, ``table`` (int8[256], ``table[x + 128]``).
* ``mul``, ``add``: ``input1``, ``input2``, ``output`` (each of its own shape).
* ``softmax``: ``input``, ``output``, ``exps``, ``terms`` (int32[256] each,
  :func:`~tvm_serenity.frontend.reference.softmax_tables`).
* ``float_quantize``: ``input`` (``4 * elements`` bytes of float32), ``output``;
  ``dequantize``: ``input``, ``output`` (``4 * elements`` bytes).

The tables stay parameters (the graph emitter's ``static const`` arrays, flash on an MCU):
that is the graph emitter's ABI, and TVM 0.27's TIR has no constant allocation
(``AllocateConst`` is gone) to declare them inside the kernel.

How each kernel computes:

* ``requantize``: ``clamp(requantize(x - zp_in, m, s) + zp_out, act_min, act_max)``;
  ``clamp``: ``clamp(x, low, high)``; ``lookup``: ``table[x + 128]``.
* ``mul`` / ``add``: TFLite's ``BroadcastMul4DSlow`` / ``BroadcastAdd4DSlow`` element
  arithmetic over the output in row-major order. Both operands are padded to rank 4 and read
  with stride 0 along their broadcast axes; axes of extent 1 are dropped and neighbouring
  axes merged wherever both operands (and the output) are contiguous across them, so
  ``(1, 5, 6, 7) * (7,)`` is two loops (30 x 7), a same-shape MUL one. ADD's two rescaled
  inputs pass through a two-word local array, as in the same-shape TIR ADD of
  :mod:`.kernels` (TVM's simplifier would otherwise expand the let chain of one
  requantization feeding another).
* ``softmax``: per row the maximum, the sum of ``terms[x - max + 255]``, gemmlowp's
  ``GetReciprocal`` (leading zeros counted by a branch-free binary search of four
  steps: the sum is at least the maximum's own term, ``2^19``, so there are at most 12;
  three Newton-Raphson steps in Q2.29, each SRDHM a ``requantize(., ., 0)``; ``x`` stays
  in ``[1, 2]`` (Q2.29) and every step is small, so these int32 sums and differences do not
  overflow (wrapping arithmetic gives the same values), then per value
  ``requantize(exps[k], reciprocal, -(35 - headroom)) - 128`` clamped, -127 when that
  exponent exceeds 31 (a row sum of 2^27 or more) and -128 below ``diff_min``.
  The reciprocal is inlined in the row loop.
* ``float_quantize``: TFLM's ``AffineQuantize``: ``v = x / scale`` in float32, clamped to
  ``[low - 1, high + 1]`` of the rounded quotient (NaN to ``low - 1``: the result is the
  same and no float outside the int32 range is converted, undefined in C), truncated,
  rounded half away from zero by hand (no libm), plus the zero point, clamped to int8.
  ``dequantize``: TFLM's ``Dequantize``, ``(float)((double)scale * (q - zp))``, computed as
  the float32 product ``scale * (float)(q - zp)``: both operands are exact in float32 and
  their exact product has at most 24 + 9 significant bits, so double then float rounds
  once, like the float32 product (no soft double on a Cortex-M0+).

onnxruntime's arithmetic (operators of an ONNX QDQ model,
:mod:`tvm_serenity.frontend.ort_arithmetic` the specification): ``ort_binary`` (``input1,
input2, output`` and the float32[256] tables of :class:`~tvm_serenity.frontend.
ort_arithmetic.AddParams`) computes QLinearAdd (exact ``fmaf`` in float64,
:func:`.kernels.fma32`), QLinearMul (:func:`.kernels.ort_requantize`) or the float Add / Mul
between DequantizeLinear and QuantizeLinear over same-shape operands; ``ort_softmax``
(``input, output, table``) QLinearSoftmax or the float Softmax (MLAS's exp polynomial, 16
float32 lanes); ``float_quantize`` with ``arithmetic="onnxruntime"`` is ``QuantizeLinear``
(``x / scale``, clamped, half to even). Each reads element ``i`` before writing it (a
softmax row whole first): exact alias is safe.

No arithmetic relies on unsigned wrap-around: TVM's llvm back end emits uint32 additions,
subtractions and products with ``nuw`` (and int32 ones with ``nsw``), so a wrapping one is
poison there (measured: SOFTMAX's Newton step written as the wrapping
``(uint32)x + (uint32)step`` gave wrong reciprocals on llvm and right ones in C). Shifts carry no
such flag.

Two CodeGenC facts shape the float edges. (1) It prints a float32 constant with seven
significant digits (``%e``), which is not exact; a constant that does not survive that is
built as ``(float)M / (float)2^k`` (``M`` the 24-bit mantissa, one division by ``2^30`` at a
time), an exact constant expression that GCC folds and TVM's simplifier folds exactly.
(2) It prints ``reinterpret`` as ``*(float *)&bits``, which ``-Wall -Werror`` rejects
(strict aliasing). The graph emitter's arena plan has alignment 1 (``graph_c.emit``: "the C
emitter needs an alignment-1 plan"; ``model.h``: "the pointers are only byte-aligned"), so a
float tensor may sit at any byte offset and a word access could fault on the Cortex-M0+: the
float is moved between the int8 buffer and a one-element local array by ``memcpy``
(``T.call_extern``; TVM's llvm build links the C library's).

In-place safety (what the graph emitter relies on when the arena plan overlaps input and
output, docs/rip.md):

* requantize, clamp, lookup, and MUL / ADD for an operand of the output's shape, read element
  ``i`` before writing element ``i`` and write in order: exact alias (same offset) is safe.
* SOFTMAX reads a row whole (its maximum, its sum) before writing it, then writes each output
  right after reading its input: exact alias is safe.
* The float edges run front to back and read element ``i`` before writing it: QUANTIZE's int8
  output may start where its float32 input starts (output byte ``i`` lies in float ``i / 4``,
  already read) and DEQUANTIZE's int8 input may end where its float32 output ends (its unread
  bytes ``3N + j``, ``j > i``, lie past output byte ``4i + 3``): the RiP layout of a
  workspace of the float tensor's size.

The emitted C has no ``restrict``, so the C compiler keeps every read before the writes that
follow it in the loops.
"""

from __future__ import annotations


import numpy as np
import tvm
from tvm import tirx
from tvm.script.ir_builder import tirx as T

from ..frontend import ort_arithmetic as ort
from .kernels import (_cast, _f32, _if_else, _let, _local, _loop, _memcpy, _store,
                      _store_clamped, _u32, float32_const, fma32, ort_requantize, prim_func,
                      quantize_linear, requantize, rne_float)
from .ops import (_RECIPROCAL_32_17, _RECIPROCAL_48_17, SOFTMAX_ACCUMULATION_BITS, OpKernel,
                  _broadcast_strides, _check_int8, _check_requant, _pad4, _plus, _strides)
from .plain_c import op_kernel
from .spec import INT8_MAX, INT8_MIN, CodegenError

__all__ = ["requantize_prim_func", "requantize_kernel", "clamp_prim_func", "clamp_kernel",
           "lookup_prim_func", "lookup_kernel", "mul_prim_func", "mul_kernel", "add_prim_func",
           "add_kernel", "softmax_prim_func", "softmax_kernel", "float_quantize_prim_func",
           "float_quantize_kernel", "dequantize_prim_func", "dequantize_kernel", "build_llvm"]

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


# ------------------------------------------------------------------ building blocks
def _i32(value):
    return _cast("int32", value)


def _select(condition, then_value, else_value):
    return tirx.Select(condition, then_value, else_value)


def _const32(value: int):
    """An int32 constant; INT32_MIN as ``-INT32_MAX - 1`` (CodeGenC would print
    ``-2147483648``, a wider type in C)."""
    if value == INT32_MIN:
        return tirx.Sub(tirx.const(-INT32_MAX, "int32"), tirx.const(1, "int32"))
    return tirx.const(value, "int32")


def _check_elements(name: str, what: str, elements: int) -> None:
    if elements < 1:
        raise CodegenError(f"{name}: empty {what}")


# ------------------------------------------------------------------ requantize, clamp, lookup
def requantize_prim_func(elements: int, input_zero_point: int, multiplier: int, shift: int,
                         output_zero_point: int, act_min: int = INT8_MIN,
                         act_max: int = INT8_MAX, symbol: str = "requantize") -> tirx.PrimFunc:
    """``output[i] = clamp(requantize(input[i] - zp_in, m, s) + zp_out, act_min, act_max)``."""
    def emit(x, y):
        with _loop("i", elements) as i:
            value = requantize(_i32(x[i]) - input_zero_point, multiplier, shift)
            _store_clamped(y, i, value + output_zero_point, act_min, act_max)
    return prim_func(symbol, [("input", elements, "int8"), ("output", elements, "int8")],
                      emit)


def requantize_kernel(name: str, elements: int, input_zero_point: int, multiplier: int,
                      shift: int, output_zero_point: int, act_min: int = INT8_MIN,
                      act_max: int = INT8_MAX, what: str = "QUANTIZE int8 -> int8") -> OpKernel:
    """int8 -> int8 QUANTIZE (``reference_ops::Requantize``, the full int8 range) and TFLM's
    ``ReluQuantized`` (``act_min = max(-128, zp_out)``): :func:`requantize_prim_func` as C."""
    _check_int8(name, input_zero_point, output_zero_point, act_min, act_max)
    _check_requant(name, multiplier, shift)
    func = requantize_prim_func(elements, input_zero_point, multiplier, shift,
                                output_zero_point, act_min, act_max, name)
    return op_kernel(name, f"{what}: {elements} elements, requantized, clamped to "
                     f"[{act_min}, {act_max}]", func, ["input"])


def clamp_prim_func(elements: int, low: int, high: int, symbol: str = "clamp"
                    ) -> tirx.PrimFunc:
    """``output[i] = min(max(input[i], low), high)``."""
    def emit(x, y):
        with _loop("i", elements) as i:
            _store_clamped(y, i, _i32(x[i]), low, high)
    return prim_func(symbol, [("input", elements, "int8"), ("output", elements, "int8")],
                      emit)


def clamp_kernel(name: str, elements: int, low: int, high: int, what: str = "RELU6") -> OpKernel:
    """TFLM's int8 ``Relu6Quantized`` (no rescaling: ``[zp, zp + round(6 / scale)]`` of the
    input): :func:`clamp_prim_func` as C."""
    _check_int8(name, low, high)
    func = clamp_prim_func(elements, low, high, name)
    return op_kernel(name, f"{what} int8: {elements} elements clamped to [{low}, {high}]",
                     func, ["input"])


def lookup_prim_func(elements: int, symbol: str = "lookup") -> tirx.PrimFunc:
    """``output[i] = table[input[i] + 128]``."""
    def emit(x, y, table):
        with _loop("i", elements) as i:
            _store(y, i, table[_i32(x[i]) + 128])
    return prim_func(symbol, [("input", elements, "int8"), ("output", elements, "int8"),
                               ("table", 256, "int8")], emit)


def lookup_kernel(name: str, elements: int, what: str) -> OpKernel:
    """An elementwise int8 function given for all 256 inputs (HARD_SWISH, LOGISTIC, a binary
    operator with a constant scalar operand; ``table`` computed from the reference kernel):
    :func:`lookup_prim_func` as C."""
    _check_elements(name, what, elements)
    func = lookup_prim_func(elements, name)
    return op_kernel(name, f"{what}: {elements} elements through a 256-entry table of the "
                     "reference kernel", func, ["input", "table"])


# ------------------------------------------------------------------ MUL, ADD (broadcasting)
def _broadcast_loops(name: str, shape_a, shape_b, out_shape) -> list[tuple[int, int, int, int]]:
    """The loops of a broadcasting binary operator over ``out_shape``, outermost first, as
    ``(extent, output stride, stride of a, stride of b)``: rank-4 padded, axes of extent 1
    dropped, neighbours merged where all three are contiguous across them (module
    docstring). Refuses shapes that do not broadcast to ``out_shape`` or exceed rank 4."""
    out4 = _pad4(out_shape)
    try:
        shape = np.broadcast_shapes(tuple(shape_a), tuple(shape_b))
    except ValueError:
        shape = None
    if shape is None or tuple(int(d) for d in shape) != tuple(int(d) for d in out_shape):
        raise CodegenError(f"{name}: {list(shape_a)} and {list(shape_b)} do not broadcast to "
                           f"{list(out_shape)}")
    strides = zip(out4, _strides(out4), _broadcast_strides(name, shape_a, out4),
                  _broadcast_strides(name, shape_b, out4))
    loops: list[tuple[int, int, int, int]] = []
    for extent, *inner in (axis for axis in strides if axis[0] > 1):
        if loops and all(s == i * extent for s, i in zip(loops[-1][1:], inner)):
            loops[-1] = (loops[-1][0] * extent, *inner)
        else:
            loops.append((extent, *inner))
    return loops or [(1, 1, 0, 0)]


def _binary_prim_func(symbol: str, loops, elements_a: int, elements_b: int, element,
                      tables: tuple[str, ...] = ()):
    """Loops ``loops`` writing ``output`` in order, each element ``element(output, index, x,
    y, *tables)`` of the int32 operand values ``x = input1[...]``, ``y = input2[...]`` (it
    stores an int8); ``tables`` are float32[256] parameters after ``output``."""
    elements = int(np.prod([extent for extent, *_ in loops]))

    def emit(first, second, output, *table_buffers):
        def nest(depth, out, a, c):
            if depth == len(loops):
                x = _let("x", _i32(first[a]))
                y = _let("y", _i32(second[c]))
                element(output, out, x, y, *table_buffers)
                return
            extent, so, sa, sb = loops[depth]
            if extent == 1:
                nest(depth + 1, out, a, c)
                return
            with _loop("abcd"[depth], extent) as v:
                nest(depth + 1, out + v * so, a + v * sa, c + v * sb)
        zero = tirx.const(0, "int32")
        nest(0, zero, zero, zero)
    return prim_func(symbol, [("input1", elements_a, "int8"), ("input2", elements_b, "int8"),
                               ("output", elements, "int8")]
                     + [(name, 256, "float32") for name in tables], emit)


def _size(shape) -> int:
    return int(np.prod([int(d) for d in shape], dtype=np.int64))


def mul_prim_func(shape_a, shape_b, out_shape, zero_a: int, zero_b: int, multiplier: int,
                  shift: int, output_zero_point: int, act_min: int = INT8_MIN,
                  act_max: int = INT8_MAX, symbol: str = "mul") -> tirx.PrimFunc:
    """``clamp(requantize((x - z1) * (y - z2), m, s) + z_out, act_min, act_max)`` with
    broadcasting (:func:`~tvm_serenity.frontend.reference.mul_int8`)."""
    def element(output, index, x, y):
        value = requantize((x - zero_a) * (y - zero_b), multiplier, shift)
        _store_clamped(output, index, value + output_zero_point, act_min, act_max)
    return _binary_prim_func(symbol, _broadcast_loops(symbol, shape_a, shape_b, out_shape),
                             _size(shape_a), _size(shape_b), element)


def mul_kernel(name: str, shape_a, shape_b, out_shape, zero_a: int, zero_b: int,
               multiplier: int, shift: int, output_zero_point: int, act_min: int = INT8_MIN,
               act_max: int = INT8_MAX) -> OpKernel:
    """int8 MUL (``reference_integer_ops::MulElementwise`` / ``BroadcastMul4DSlow``,
    ``frontend.reference.mul_int8``) with NumPy broadcasting of rank <= 4:
    :func:`mul_prim_func` as C; either input may be a constant array."""
    _check_int8(name, zero_a, zero_b, output_zero_point, act_min, act_max)
    _check_requant(name, multiplier, shift)
    func = mul_prim_func(shape_a, shape_b, out_shape, zero_a, zero_b, multiplier, shift,
                         output_zero_point, act_min, act_max, name)
    return op_kernel(name, f"MUL int8: {list(shape_a)} and {list(shape_b)} -> "
                     f"{list(out_shape)} (broadcast)", func, ["input1", "input2"])


def add_prim_func(shape_a, shape_b, out_shape, zero_a: int, zero_b: int, multiplier_a: int,
                  shift_a: int, multiplier_b: int, shift_b: int, multiplier: int, shift: int,
                  output_zero_point: int, act_min: int = INT8_MIN, act_max: int = INT8_MAX,
                  left_shift: int = 20, symbol: str = "add") -> tirx.PrimFunc:
    """TFLite's int8 ADD with broadcasting (:func:`~tvm_serenity.frontend.reference.add_int8`):
    each input ``(v - z) * 2^left_shift`` rescaled, summed, requantized, clamped."""
    scale = 1 << left_shift

    def element(output, index, x, y):
        r = _local("rescaled", 2)
        _store(r, 0, requantize((x - zero_a) * scale, multiplier_a, shift_a))
        _store(r, 1, requantize((y - zero_b) * scale, multiplier_b, shift_b))
        value = requantize(r[0] + r[1], multiplier, shift)
        _store_clamped(output, index, value + output_zero_point, act_min, act_max)
    return _binary_prim_func(symbol, _broadcast_loops(symbol, shape_a, shape_b, out_shape),
                             _size(shape_a), _size(shape_b), element)


def add_kernel(name: str, shape_a, shape_b, out_shape, zero_a: int, zero_b: int,
               multiplier_a: int, shift_a: int, multiplier_b: int, shift_b: int,
               multiplier: int, shift: int, output_zero_point: int, act_min: int = INT8_MIN,
               act_max: int = INT8_MAX, left_shift: int = 20) -> OpKernel:
    """int8 ADD with broadcasting (``reference_integer_ops::BroadcastAdd4DSlow``,
    ``frontend.reference.add_int8``): each input ``(v - z) * 2^left_shift`` rescaled by its
    own multiplier, summed, requantized; :func:`add_prim_func` as C. The TIR kernel of
    :mod:`.kernels` covers same-shape ADD of two activations; this one broadcasts and takes
    constants."""
    _check_int8(name, zero_a, zero_b, output_zero_point, act_min, act_max)
    for m, s in ((multiplier_a, shift_a), (multiplier_b, shift_b), (multiplier, shift)):
        _check_requant(name, m, s)
    if not 0 <= left_shift <= 22:
        raise CodegenError(f"{name}: left shift {left_shift} overflows int32")
    func = add_prim_func(shape_a, shape_b, out_shape, zero_a, zero_b, multiplier_a, shift_a,
                         multiplier_b, shift_b, multiplier, shift, output_zero_point, act_min,
                         act_max, left_shift, name)
    return op_kernel(name, f"ADD int8: {list(shape_a)} and {list(shape_b)} -> "
                     f"{list(out_shape)} (broadcast)", func, ["input1", "input2"])


def ort_binary_prim_func(shape, p: ort.AddParams, symbol: str = "ort_binary"
                         ) -> tirx.PrimFunc:
    """ADD / MUL of two ``shape`` tensors with onnxruntime's arithmetic
    (:class:`~tvm_serenity.frontend.ort_arithmetic.AddParams`, ``p.kernel``): QLinearAdd
    ``fma32(x + offset, ratio_a, table[y + 128])`` rounded half to even and saturated to the
    kernel's type (``table`` a parameter); the float Add / Mul ``QuantizeLinear(table_a[x +
    128] op table[y + 128])`` (both parameters); QLinearMul ``ort_requantize((x - za)(y -
    zb), M, E)`` (baked in)."""
    low, high = p.act
    if p.kernel == "QLinearAdd":
        top = 255 if p.offset else INT8_MAX

        def element(output, index, x, y, table):
            v = _let("v", fma32(_cast("float32", x + p.offset), float32_const(p.ratio_a),
                                table[y + 128]), "float32")
            code = _let("code", rne_float(v))
            code = _select(code < top - 255, top - 255, _select(code > top, top, code))
            _store_clamped(output, index, code - p.offset, low, high)
        tables = ("table",)
    elif p.kernel == "QLinearMul":
        (za, zb), rq = p.zero_points, p.requant
        m, e = int(rq.multiplier.reshape(-1)[0]), int(rq.shift.reshape(-1)[0])

        def element(output, index, x, y):
            _store_clamped(output, index, ort_requantize((x - za) * (y - zb), m, e)
                           + p.output_zero_point, low, high)
        tables = ()
    else:
        def element(output, index, x, y, table_a, table):
            a, b = table_a[x + 128], table[y + 128]
            value = _let("value", a + b if p.kernel == "Add" else a * b, "float32")
            _store_clamped(output, index, quantize_linear(
                value, p.output_scale, p.output_zero_point, low, high), low, high)
        tables = ("table_a", "table")
    return _binary_prim_func(symbol, _broadcast_loops(symbol, shape, shape, shape),
                             _size(shape), _size(shape), element, tables)


def ort_binary_kernel(name: str, shape, p: ort.AddParams) -> OpKernel:
    """:func:`ort_binary_prim_func` as C (the tables after the operands and the output)."""
    func = ort_binary_prim_func(shape, p, name)
    tables = {"QLinearAdd": ["table"], "QLinearMul": []}.get(p.kernel, ["table_a", "table"])
    return op_kernel(name, f"{p.kernel} (onnxruntime) of two int8 {list(shape)} tensors",
                     func, ["input1", "input2", *tables])


# ------------------------------------------------------------------ SOFTMAX
def _saturate(value, limit: int, bits: int):
    """``value * 2^bits`` saturated to int32 (gemmlowp's ``SaturatingRoundingMultiplyByPOT``
    for a positive exponent): ``limit`` is the largest ``value`` that does not saturate. The
    product is a uint32 shift (defined in C for a negative ``value``; llvm's ``shl`` of it
    carries no overflow flag)."""
    return _select(value > limit, _const32(INT32_MAX),
                   _select(value < -limit, _const32(INT32_MIN),
                           _i32(_u32(value) << tirx.const(bits, "uint32"))))


def softmax_prim_func(rows: int, depth: int, valid_from: int, symbol: str = "softmax"
                      ) -> tirx.PrimFunc:
    """TFLM's int8 SOFTMAX over ``rows`` rows of ``depth`` (module docstring), exactly
    :func:`~tvm_serenity.frontend.reference.softmax_int8` given its tables."""
    def emit(x, y, exps, terms):
        with _loop("r", rows) as r:
            row = _let("row", r * depth)
            state = _local("state", 5)      # max, sum, headroom, reciprocal (Q2.29), step
            _store(state, 0, INT8_MIN)
            with _loop("i", depth) as i:
                value = _let("value", _i32(x[row + i]))
                _store(state, 0, _select(value > state[0], value, state[0]))
            base = _let("base", 255 - state[0])          # table index of a value: diff + 255
            _store(state, 1, 0)
            with _loop("i", depth) as i:
                _store(state, 1, state[1] + terms[_i32(x[row + i]) + base])
            # GetReciprocal: headroom = leading zeros of the sum (in [0, 12]), binary search
            _store(state, 2, 0)
            for bits in (8, 4, 2, 1):
                top = (_u32(state[1]) << _u32(state[2])) >> tirx.const(32 - bits, "uint32")
                _store(state, 2, state[2] + _select(top == tirx.const(0, "uint32"), bits, 0))
            # (sum << headroom) / 2 in [2^30, 2^31): half the denominator d in Q0.31
            half_d = _let("half_d", _i32((_u32(state[1]) << _u32(state[2]))
                                         >> tirx.const(1, "uint32")))
            _store(state, 3, _RECIPROCAL_48_17 + requantize(-half_d, _RECIPROCAL_32_17, 0))
            with _loop("k", 3):       # x += 4 * SRDHM(1 - d * x, x); nothing overflows
                _store(state, 4, (1 << 29) - requantize(state[3], half_d, 0))
                _store(state, 4, requantize(state[4], state[3], 0))
                _store(state, 3, state[3] + _saturate(state[4], 0x1FFFFFFF, 2))
            scale = _let("scale", _saturate(state[3], 0x3FFFFFFF, 1))
            exponent = _let("exponent", SOFTMAX_ACCUMULATION_BITS + 31 - 8 - state[2])

            with _loop("i", depth) as i:
                k = _let("k", _i32(x[row + i]) + base)

                def output():
                    _if_else(exponent > 31, lambda: _store(y, row + i, tirx.const(-127, "int8")),
                             lambda: _store_clamped(y, row + i, requantize(
                                 exps[k], scale, -exponent) - 128, INT8_MIN, INT8_MAX))
                if valid_from:
                    _if_else(k < valid_from, lambda: _store(y, row + i,
                                                            tirx.const(INT8_MIN, "int8")),
                             output)
                else:
                    output()
    return prim_func(symbol, [("input", rows * depth, "int8"), ("output", rows * depth, "int8"),
                               ("exps", 256, "int32"), ("terms", 256, "int32")], emit)


def softmax_kernel(name: str, rows: int, depth: int, valid_from: int) -> OpKernel:
    """TFLM's int8 SOFTMAX (output scale 1/256, zero point -128) over ``rows`` rows of
    ``depth``, exactly ``frontend.reference.softmax_int8`` given its tables
    (:func:`~tvm_serenity.frontend.reference.softmax_tables`; a term is 0 below ``diff_min``,
    i.e. at indices below ``valid_from``): :func:`softmax_prim_func` as C."""
    if rows < 1 or depth < 1:
        raise CodegenError(f"{name}: empty SOFTMAX ({rows}x{depth})")
    if depth >= 1 << SOFTMAX_ACCUMULATION_BITS:
        raise CodegenError(f"{name}: SOFTMAX over {depth} values overflows TFLite's int32 "
                           "sum of exponentials (at most 4095)")
    if not 0 <= valid_from <= 255:
        raise CodegenError(f"{name}: first valid difference index {valid_from} is not in "
                           "[0, 255]")
    func = softmax_prim_func(rows, depth, valid_from, name)
    return op_kernel(name, f"SOFTMAX int8: {rows} row(s) of {depth}, output scale 1/256, "
                     "zero point -128 (TFLM)", func, ["input", "exps", "terms"])


def _mlas_exp(v):
    """:func:`~tvm_serenity.frontend.ort_arithmetic.mlas_exp` of float32 ``v``: the
    power of two is built in the float's bits through ``memcpy`` (no type punning)."""
    c = ort._EXP_CONSTANTS
    x = _let("x", _select(v > float32_const(c["lower"]), v, float32_const(c["lower"])),
             "float32")
    floats = _local("expf", 2, "float32")           # biased, then the power of two
    bits = _local("expbits", 1, "uint32")
    _store(floats, 0, fma32(x, float32_const(c["log2_reciprocal"]),
                            float32_const(c["rounding_bias"])))
    m = _let("m", floats[0] - float32_const(c["rounding_bias"]), "float32")
    r = _let("r", fma32(m, float32_const(c["log2_high"]), x), "float32")
    r = _let("r2", fma32(m, float32_const(c["log2_low"]), r), "float32")
    poly = _local("poly", 1, "float32")
    _store(poly, 0, float32_const(c["p"][0]))
    for coefficient in (*c["p"][1:], c["p"][-1]):
        _store(poly, 0, fma32(poly[0], r, float32_const(coefficient)))
    _memcpy(bits[0], floats[0])
    _store(bits, 0, (bits[0] << tirx.const(23, "uint32")) + tirx.const(0x3F800000, "uint32"))
    _memcpy(floats[1], bits[0])
    return poly[0] * floats[1]


def ort_softmax_prim_func(rows: int, depth: int, p: ort.SoftmaxParams,
                          symbol: str = "ort_softmax") -> tirx.PrimFunc:
    """SOFTMAX with onnxruntime's arithmetic over ``rows`` rows of ``depth``
    (:func:`~tvm_serenity.frontend.ort_arithmetic.softmax`; ``table`` float32[256] a
    parameter). QLinearSoftmax: the row's maximum, the float32 sum of ``table[max - x]``, per
    value ``rne(fl(t * divisor_scale) / sum) + zp``, capped at 255 in the kernel's type (in
    int8 the cap's cast wraps). Float Softmax: ``e = exp(table[x + 128] - table[max + 128])``
    (MLAS's exp), summed in 16 lanes, each ``e * (1 / sum)`` quantized; the exponentials are
    computed twice (no buffer for them)."""
    def emit(x, y, table):
        state = _local("state", 1)              # the row's maximum
        sums = _local("sums", 18, "float32")    # 16 lanes, the sum, its reciprocal

        def qlinear_row(row):
            _store(sums, 16, _f32(0))
            with _loop("i", depth) as i:
                _store(sums, 16, sums[16] + table[state[0] - _i32(x[row + i])])
            with _loop("i", depth) as i:
                t = table[state[0] - _i32(x[row + i])]
                v = _let("v", tirx.Div(t * float32_const(p.divisor_scale), sums[16]),
                         "float32")
                code = _let("code", rne_float(v) + p.output_zero_point + p.offset)
                code = _let("capped", _select(code > 255, 255, code) - p.offset)
                if not p.offset:                    # int8: the capped value's cast wraps
                    code = ((code + 128) & 255) - 128
                _store(y, row + i, _cast("int8", code))

        def float_row(row):
            top = _let("top", -table[state[0] + 128], "float32")
            for lane in range(16):
                _store(sums, lane, _f32(0))
            with _loop("i", depth) as i:
                e = _let("e", _mlas_exp(top + table[_i32(x[row + i]) + 128]), "float32")
                _store(sums, i & 15, sums[i & 15] + e)
            for lane in range(8):
                _store(sums, lane, sums[lane] + sums[lane + 8])
            _store(sums, 16, ((sums[4] + sums[5]) + (sums[6] + sums[7]))
                   + ((sums[0] + sums[1]) + (sums[2] + sums[3])))
            _store(sums, 17, tirx.Div(_f32(1), sums[16]))
            with _loop("i", depth) as i:
                e = _let("e", _mlas_exp(top + table[_i32(x[row + i]) + 128]), "float32")
                _store_clamped(y, row + i, quantize_linear(
                    e * sums[17], p.output_scale, p.output_zero_point), INT8_MIN, INT8_MAX)

        with _loop("r", rows) as r:
            row = _let("row", r * depth)
            _store(state, 0, INT8_MIN)
            with _loop("i", depth) as i:
                value = _let("value", _i32(x[row + i]))
                _store(state, 0, _select(value > state[0], value, state[0]))
            (qlinear_row if p.qlinear else float_row)(row)
    return prim_func(symbol, [("input", rows * depth, "int8"), ("output", rows * depth, "int8"),
                              ("table", 256, "float32")], emit)


def ort_softmax_kernel(name: str, rows: int, depth: int, p: ort.SoftmaxParams) -> OpKernel:
    """:func:`ort_softmax_prim_func` as C."""
    if rows < 1 or depth < 1:
        raise CodegenError(f"{name}: empty SOFTMAX ({rows}x{depth})")
    func = ort_softmax_prim_func(rows, depth, p, name)
    what = "QLinearSoftmax" if p.qlinear else "Softmax"
    return op_kernel(name, f"SOFTMAX int8 as onnxruntime's {what}: {rows} row(s) of {depth}",
                     func, ["input", "table"])


# ------------------------------------------------------------------ float edges
def float_quantize_prim_func(elements: int, scale: float, zero_point: int,
                             symbol: str = "float_quantize",
                             arithmetic: str = "tflite") -> tirx.PrimFunc:
    """float32 -> int8 QUANTIZE, TFLM's ``AffineQuantize`` (module docstring), or with
    ``arithmetic="onnxruntime"`` its ``QuantizeLinear`` (:func:`.kernels.quantize_linear`:
    clamped, then half to even)."""
    low, high = INT8_MIN - zero_point, INT8_MAX - zero_point     # of the rounded quotient

    def emit(source, output):
        with _loop("i", elements) as i:
            x = _local("x", dtype="float32")
            _memcpy(x[0], source[4 * i])
            if arithmetic == "onnxruntime":
                _store_clamped(output, i, quantize_linear(x[0], scale, zero_point),
                               INT8_MIN, INT8_MAX)
            else:
                _affine_quantize(output, i, x[0], scale, zero_point, low, high)
    return prim_func(symbol, [("input", 4 * elements, "int8"), ("output", elements, "int8")],
                      emit)


def _affine_quantize(output, i, x, scale: float, zero_point: int, low: int, high: int):
    """``output[i]``: TFLM's ``AffineQuantize`` of the float32 ``x`` (module docstring)."""
    v = _let("v", tirx.Div(x, float32_const(scale)), "float32")
    v = _let("low_clamped", _select(v >= _f32(low - 1), v, _f32(low - 1)),
             "float32")                                       # NaN too
    v = _let("clamped", _select(v > _f32(high + 1), _f32(high + 1), v), "float32")
    r = _local("r")                                # toward zero; v - r is exact
    _store(r, 0, _i32(v))
    fraction = _let("fraction", v - _cast("float32", r[0]), "float32")
    # halves away from zero, as branches: the second comparison (a soft-float call on
    # the Cortex-M0+) only runs when the first fails
    with T.If(fraction >= _f32(0.5)):
        with T.Then():
            _store(r, 0, r[0] + 1)
        with T.Else():
            with T.If(fraction <= _f32(-0.5)):
                with T.Then():
                    _store(r, 0, r[0] - 1)
    _store_clamped(output, i, r[0] + zero_point, INT8_MIN, INT8_MAX)


def float_quantize_kernel(name: str, elements: int, scale: float, zero_point: int,
                          arithmetic: str = "tflite") -> OpKernel:
    """float32 -> int8 QUANTIZE, TFLM's ``AffineQuantize`` (module docstring) or
    onnxruntime's (``arithmetic``): :func:`float_quantize_prim_func` as C; ``input`` points at
    ``4 * elements`` bytes."""
    _check_int8(name, zero_point)
    if not np.float32(scale) > 0:
        raise CodegenError(f"{name}: QUANTIZE scale {scale} must be positive")
    func = float_quantize_prim_func(elements, scale, zero_point, name, arithmetic)
    return op_kernel(name, f"QUANTIZE float32 -> int8: {elements} elements, "
                     f"round(x / {float(np.float32(scale))!r}f) {_plus(zero_point)}, clamped "
                     "(TFLM AffineQuantize)", func, ["input"])


def dequantize_prim_func(elements: int, scale: float, zero_point: int,
                         symbol: str = "dequantize") -> tirx.PrimFunc:
    """int8 -> float32 DEQUANTIZE, TFLM's ``Dequantize`` (module docstring)."""
    def emit(source, output):
        with _loop("i", elements) as i:
            y = _local("y", dtype="float32")
            _store(y, 0, tirx.Mul(float32_const(scale),
                                  _cast("float32", _i32(source[i]) - zero_point)))
            _memcpy(output[4 * i], y[0])
    return prim_func(symbol, [("input", elements, "int8"), ("output", 4 * elements, "int8")],
                      emit)


def dequantize_kernel(name: str, elements: int, scale: float, zero_point: int) -> OpKernel:
    """int8 -> float32 DEQUANTIZE, TFLM's ``Dequantize`` (module docstring):
    :func:`dequantize_prim_func` as C; ``output`` points at ``4 * elements`` bytes."""
    _check_int8(name, zero_point)
    func = dequantize_prim_func(elements, scale, zero_point, name)
    return op_kernel(name, f"DEQUANTIZE int8 -> float32: {elements} elements, "
                     f"{float(np.float32(scale))!r}f * (q {_plus(-zero_point)}) (TFLM "
                     "Dequantize)", func, ["input"])


def build_llvm(func: tirx.PrimFunc):
    """``tvm.tirx.build`` of one of these PrimFuncs for the host; returns ``(module, symbol)``:
    call ``module[symbol](*tensors)`` with one flat ``tvm.runtime.tensor`` per buffer
    parameter, in order."""
    return tvm.tirx.build(func, target="llvm"), str(func.attrs["global_symbol"])
