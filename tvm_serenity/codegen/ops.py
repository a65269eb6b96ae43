"""Plain-C kernels for the non-convolution operators of the MCU set, written by this generator.

The window kernels (CONV_2D, DEPTHWISE_CONV_2D, MAX/AVERAGE_POOL_2D) and same-shape ADD are
generated from TIR (:mod:`.kernels`, :mod:`.plain_c`). The remaining operators MCU networks use
around them are generated here directly as C99 text, from the integer semantics of
:mod:`tvm_serenity.frontend.reference` (the arithmetic specification; tests check every
kernel against it bit for bit): MEAN, FULLY_CONNECTED, TRANSPOSE, CONCATENATION, PAD,
STRIDED_SLICE, int8 QUANTIZE (requantize), RELU and RELU6 (TFLM's ``ReluQuantized`` /
``Relu6Quantized``), HARD_SWISH and LOGISTIC (a 256-entry table of the reference kernel),
MUL and broadcasting/constant ADD (NumPy broadcasting up to rank 4), SOFTMAX (TFLM's
fixed-point exp tables and gemmlowp reciprocal, 32-bit), RESIZE_NEAREST_NEIGHBOR (index
tables), RESHAPE (a copy, or nothing when aliased) and the float edges: float32 -> int8
QUANTIZE and int8 -> float32 DEQUANTIZE (TFLM's ``AffineQuantize`` / ``Dequantize``, below). They
are a small share of a network's cycles, so the C is written for clarity with constants baked
in (loop bounds, strides, zero points, multipliers); none divides inside a loop.

Every kernel is ``static void name(const int8_t *input, int8_t *output, ...)`` (CONCATENATION
takes one input pointer per operand, MUL/ADD ``input1, input2, output``). In-place safety,
which the graph emitter relies on when the arena plan overlaps input and output (docs/rip.md):

* QUANTIZE, RELU, RELU6 and the table lookups (HARD_SWISH, LOGISTIC) read element ``i``
  before writing element ``i``: exact alias (same offset) is safe. So do MUL and ADD for an
  operand of the output's shape, and SOFTMAX (a row is read whole before it is written, each
  output right after its input).
* MEAN accumulates a whole reduction block into the int32 ``acc`` scratch before writing any of
  its outputs; for a global spatial mean (one block) any overlap is safe.
* FULLY_CONNECTED gathers one input row (``x - zero_point`` as int16) into ``scratch`` before
  writing that row's outputs: the RiP layout of the row-as-pixel geometry is safe.
* The float edges run front to back and read element ``i`` before writing it: QUANTIZE's
  int8 output may start where its float32 input starts (output byte ``i`` lies in float
  ``i / 4``, already read) and DEQUANTIZE's int8 input may end where its float32 output ends
  (its unread bytes ``3N + j``, ``j > i``, lie past output byte ``4i + 3``): the RiP layout
  of a workspace of the float tensor's size.
* The float32 SOFTMAX and LOG_SOFTMAX read a row whole (its maximum, its sum) before
  writing it, then each output right after its input: exact alias is safe. ARG_MAX writes
  index ``q`` (4 bytes) after reading column ``q`` whole: over a float32 input every
  input element at or before ``q`` is then read, so the output may start where the input
  starts; over int8 that holds when the reduced axis is the last and has 4 or more values
  (bytes ``4q .. 4q + 3`` lie in rows ``<= q``).
* TRANSPOSE, CONCATENATION, PAD, STRIDED_SLICE, RESIZE_NEAREST_NEIGHBOR and the RESHAPE copy
  need disjoint buffers.

Float edges. ``float_quantize_kernel`` is TFLM's ``AffineQuantize``,
``(int32_t)roundf(x / scale) + zero_point`` clamped to int8, with the division in float32;
``dequantize_kernel`` is TFLM's ``Dequantize``, ``(float)((double)scale * (q - zp))``,
computed as the float32 product ``scale * (float)(q - zp)``: both operands are exact in
float32 and their exact product has at most 24 + 9 significant bits, so double then float
rounds once, like the float32 product (no soft double on a Cortex-M0+). The quotient is
clamped to the int8 range (minus the zero point) before rounding: the result is the same and
no float outside the int32 range is converted (undefined in C), and rounding half away from
zero is done by hand, so the kernels need no libm. Float tensors sit at any byte offset of the
arena, so they are read and written through ``memcpy`` (no unaligned word access).

Float operators after the int8 core. ``softmax_float_kernel``, ``log_softmax_float_kernel``
and ``arg_max_kernel`` are TFLite's ``reference_ops`` loops in float32
(:func:`tvm_serenity.frontend.reference.softmax_float` and siblings). Their ``exp`` and
``log`` are :func:`float_math_c`'s ``serenity_expf`` / ``serenity_logf``, glibc's algorithm
(the reference's :func:`~tvm_serenity.frontend.reference.expf`) in portable C: float64
products and sums, integer bit manipulation and the reference's tables, no libm. So every
target computes what TFLite Micro computes on the glibc host where its outputs are checked;
the Pico toolchain's newlib ``expf``/``logf`` (fdlibm on soft-float Cortex-M) differ from
glibc in about 1% / 4% of the softmax range by 1 ulp, and the host harness links no libm. The
helpers turn floating-point contraction off (a fused multiply-add would round differently).
A float64 operation is a soft-float call on the Cortex-M0+ and M33 (no double FPU): about
one microsecond per exponential, for the few classes of a classifier head.

:func:`c_helpers` returns the shared fixed-point helpers, which a translation unit using these
kernels includes once: ``serenity_mbqm`` (TFLite's ``MultiplyByQuantizedMultiplier`` with
double rounding, lowered from the same TIR expression the generated kernels inline, see
:func:`.plain_c.requantize_c_function`) and ``serenity_clamp``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..frontend import reference as ref
from .plain_c import requantize_c_function
from .spec import INT8_MAX, INT8_MIN, CodegenError

__all__ = ["c_helpers", "OpKernel", "c_array", "mean_kernel", "fully_connected_kernel",
           "transpose_kernel", "concatenation_kernel", "pad_kernel", "strided_slice_kernel",
           "requantize_kernel", "clamp_kernel", "lookup_kernel", "mul_kernel", "add_kernel",
           "softmax_kernel", "resize_nearest_kernel", "c_float", "float_quantize_kernel",
           "dequantize_kernel", "FLOAT_MATH", "float_math_c", "softmax_float_kernel",
           "log_softmax_float_kernel", "arg_max_kernel"]


def c_helpers() -> str:
    """C definitions of ``serenity_mbqm`` and ``serenity_clamp`` (module docstring)."""
    return requantize_c_function() + """
static inline int8_t serenity_clamp(int32_t v, int32_t low, int32_t high) {
    return (int8_t)(v < low ? low : (v > high ? high : v));
}
"""


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
    """``static const <type> name[N] = {...};`` for a flat integer array (flash on an MCU)."""
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


def mean_kernel(name: str, outer: int, reduce: int, inner: int, input_zero_point: int,
                multiplier: int, shift: int, output_zero_point: int) -> OpKernel:
    """TFLM ``QuantizedMeanOrSum`` (mean) over the middle axis of ``(outer, reduce, inner)``.

    ``multiplier``/``shift`` are already divided by the element count as TFLM does
    (``frontend.reference.mean_int8``): ``out = clamp(MBQM(sum - zp_in * reduce, multiplier,
    shift) + zp_out)``. ``acc`` holds ``inner`` int32 sums.
    """
    if min(outer, reduce, inner) < 1:
        raise CodegenError(f"{name}: empty MEAN ({outer}x{reduce}x{inner})")
    _check_int8(name, input_zero_point, output_zero_point)
    _check_requant(name, multiplier, shift)
    offset = -input_zero_point * reduce
    source = f"""\
/* MEAN: {outer} block(s) of {reduce} x {inner} int8 -> {outer} x {inner}; a block's sums are
 * complete before its outputs are written. */
static void {name}(const int8_t *input, int8_t *output, int32_t *acc) {{
    for (int32_t o = 0; o < {outer}; ++o) {{
        const int8_t *block = input + o * {reduce * inner};
        for (int32_t i = 0; i < {inner}; ++i) acc[i] = {offset};
        for (int32_t r = 0; r < {reduce}; ++r) {{
            const int8_t *row = block + r * {inner};
            for (int32_t i = 0; i < {inner}; ++i) acc[i] += row[i];
        }}
        for (int32_t i = 0; i < {inner}; ++i) {{
            int32_t v = serenity_mbqm(acc[i], {multiplier}, {shift});
            output[o * {inner} + i] = serenity_clamp(v {_plus(output_zero_point)}, -128, 127);
        }}
    }}
}}
"""
    return OpKernel(name, source, scratch32=inner)


def fully_connected_kernel(name: str, rows: int, depth: int, units: int, input_zero_point: int,
                           output_zero_point: int, act_min: int, act_max: int,
                           gather: bool) -> OpKernel:
    """``reference_integer_ops::FullyConnected[PerChannel]`` as TFLM runs it: per row, ``acc =
    bias[u] + sum_d weight[u*depth + d] * (x[d] - zp_in)``, requantized with the per-unit
    ``multiplier``/``shift`` arrays. Parameters after ``output``: ``weight`` (int8, units x
    depth), ``bias``, ``multiplier``, ``shift`` (int32, units each) and, with ``gather`` (the
    in-place layout, where a row's outputs overwrite it), ``scratch`` (int16, depth): the row
    is gathered there (x - zero point) before any of its outputs is written."""
    if min(rows, depth, units) < 1:
        raise CodegenError(f"{name}: empty FULLY_CONNECTED ({rows}x{depth} -> {units})")
    _check_int8(name, input_zero_point, output_zero_point, act_min, act_max)
    if gather:
        note, scratch = "each row is gathered into\n * scratch (x - zero point) before its " \
                        "outputs are written", ",\n                   int16_t *scratch"
        load = f"""        for (int32_t d = 0; d < {depth}; ++d) {{
            scratch[d] = (int16_t)(input[r * {depth} + d] {_plus(-input_zero_point)});
        }}
"""
    else:
        note, scratch = "input and output\n * apart (no gather)", ""
        load = f"""        const int8_t *x = input + r * {depth};
"""
    term = "scratch[d]" if gather else f"((int32_t)x[d] {_plus(-input_zero_point)})"
    source = f"""\
/* FULLY_CONNECTED: {rows} row(s) of {depth} -> {units} units; {note}. */
static void {name}(const int8_t *input, int8_t *output, const int8_t *weight,
                   const int32_t *bias, const int32_t *multiplier, const int32_t *shift{scratch}) {{
    for (int32_t r = 0; r < {rows}; ++r) {{
{load}        for (int32_t u = 0; u < {units}; ++u) {{
            const int8_t *w = weight + u * {depth};
            int32_t acc = bias[u];
            for (int32_t d = 0; d < {depth}; ++d) acc += (int32_t)w[d] * {term};
            output[r * {units} + u] = serenity_clamp(
                serenity_mbqm(acc, multiplier[u], shift[u]) {_plus(output_zero_point)},
                {act_min}, {act_max});
        }}
    }}
}}
"""
    return OpKernel(name, source, scratch16=depth if gather else 0)


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


def transpose_kernel(name: str, in_shape, perm) -> OpKernel:
    """TRANSPOSE of a tensor of rank <= 4: ``output`` in row-major order of the permuted
    shape, each element gathered from ``input`` with constant strides."""
    rank = len(in_shape)
    perm = [int(p) % max(rank, 1) for p in perm]
    if sorted(perm) != list(range(rank)):
        raise CodegenError(f"{name}: {perm} is not a permutation of {rank} axes")
    shape4 = _pad4(in_shape)
    lead = 4 - rank
    perm4 = list(range(lead)) + [p + lead for p in perm]
    strides = _strides(shape4)
    dims = [shape4[p] for p in perm4]
    step = [strides[p] for p in perm4]
    source = f"""\
/* TRANSPOSE: {list(in_shape)} by {perm} -> {[int(shape4[p]) for p in perm4][lead:]}. */
static void {name}(const int8_t *input, int8_t *output) {{
    for (int32_t a = 0; a < {dims[0]}; ++a)
        for (int32_t b = 0; b < {dims[1]}; ++b)
            for (int32_t c = 0; c < {dims[2]}; ++c) {{
                const int8_t *src = input + a * {step[0]} + b * {step[1]} + c * {step[2]};
                for (int32_t d = 0; d < {dims[3]}; ++d) *output++ = src[d * {step[3]}];
            }}
}}
"""
    return OpKernel(name, source)


def concatenation_kernel(name: str, in_shapes, axis: int) -> OpKernel:
    """CONCATENATION along ``axis`` of same-quantization int8 tensors: per outer index, each
    operand's contiguous slab is copied in turn. Parameters: one ``const int8_t *`` per
    operand (``input0``, ``input1``, ...), then ``output``."""
    shapes = [tuple(int(d) for d in s) for s in in_shapes]
    rank = len(shapes[0])
    axis = axis % rank
    if any(len(s) != rank or s[:axis] + s[axis + 1:] != shapes[0][:axis] + shapes[0][axis + 1:]
           for s in shapes):
        raise CodegenError(f"{name}: shapes {shapes} do not concatenate along axis {axis}")
    outer = int(np.prod(shapes[0][:axis], dtype=np.int64))
    slabs = [int(np.prod(s[axis:], dtype=np.int64)) for s in shapes]
    total = sum(slabs)
    args = ", ".join(f"const int8_t *input{k}" for k in range(len(shapes)))
    copies, position = [], 0
    for k, slab in enumerate(slabs):
        if slab:
            copies.append(f"        memcpy(output + o * {total} + {position}, "
                          f"input{k} + o * {slab}, {slab});")
        position += slab
    body = "\n".join(copies)
    source = f"""\
/* CONCATENATION of {len(shapes)} tensors along axis {axis}: {outer} x {slabs} -> {total}. */
static void {name}({args}, int8_t *output) {{
    for (int32_t o = 0; o < {outer}; ++o) {{
{body}
    }}
}}
"""
    return OpKernel(name, source)


def pad_kernel(name: str, in_shape, paddings, value: int) -> OpKernel:
    """PAD / PADV2 with a constant ``value`` (int8 PAD pads with the output zero point): the
    output is filled, then every innermost row of the input is copied into place."""
    _check_int8(name, value)
    rank = len(in_shape)
    pads = [(int(a), int(b)) for a, b in np.asarray(paddings).reshape(-1, 2)]
    if len(pads) != rank or any(a < 0 or b < 0 for a, b in pads):
        raise CodegenError(f"{name}: paddings {pads} do not fit a rank-{rank} tensor "
                           "(negative padding is not supported)")
    shape4 = _pad4(in_shape)
    pads4 = [(0, 0)] * (4 - rank) + pads
    out4 = [d + a + b for d, (a, b) in zip(shape4, pads4)]
    ostr = _strides(out4)
    base = sum(a * s for (a, _), s in zip(pads4, ostr))
    n_out = int(np.prod(out4, dtype=np.int64))
    source = f"""\
/* PAD: {list(in_shape)} by {pads} with {value}. */
static void {name}(const int8_t *input, int8_t *output) {{
    memset(output, {value}, {n_out});
    for (int32_t a = 0; a < {shape4[0]}; ++a)
        for (int32_t b = 0; b < {shape4[1]}; ++b)
            for (int32_t c = 0; c < {shape4[2]}; ++c) {{
                memcpy(output + {base} + a * {ostr[0]} + b * {ostr[1]} + c * {ostr[2]},
                       input + ((a * {shape4[1]} + b) * {shape4[2]} + c) * {shape4[3]},
                       {shape4[3]});
            }}
}}
"""
    return OpKernel(name, source)


def strided_slice_kernel(name: str, in_shape, start, stride, count) -> OpKernel:
    """STRIDED_SLICE of a tensor of rank <= 4, resolved per axis as
    :class:`tvm_serenity.frontend.reference.StridedSliceParams` (``start``, ``stride`` and
    ``count`` per input axis; shrunk axes are count 1, which is the same bytes): ``output`` in
    row-major order, element ``(i_k)`` read at ``start_k + i_k * stride_k``. A contiguous
    innermost run (stride 1) is one ``memcpy`` per row."""
    rank = len(in_shape)
    start, stride, count = ([int(v) for v in values] for values in (start, stride, count))
    if not len(start) == len(stride) == len(count) == rank:
        raise CodegenError(f"{name}: {len(start)}/{len(stride)}/{len(count)} start/stride/count "
                           f"values for a rank-{rank} tensor")
    shape4 = _pad4(in_shape)
    lead = 4 - rank
    start4, stride4, count4 = [0] * lead + start, [1] * lead + stride, [1] * lead + count
    for k, (n, s, c, d) in enumerate(zip(start4, stride4, count4, shape4)):
        if s == 0 or c < 1 or not (0 <= n < d and 0 <= n + (c - 1) * s < d):
            raise CodegenError(f"{name}: axis {k - lead} reads {c} elements from {n} by {s}, "
                               f"not inside its {d} (empty slices are not supported)")
    strides = _strides(shape4)
    base = sum(n * t for n, t in zip(start4, strides))
    step = [s * t for s, t in zip(stride4, strides)]
    if step[3] == 1:
        inner = f"memcpy(output, src, {count4[3]});\n                output += {count4[3]};"
    else:
        inner = f"for (int32_t d = 0; d < {count4[3]}; ++d) *output++ = src[d * {step[3]}];"
    source = f"""\
/* STRIDED_SLICE: {list(in_shape)} from {start} by {stride}, {count} elements per axis. */
static void {name}(const int8_t *input, int8_t *output) {{
    for (int32_t a = 0; a < {count4[0]}; ++a)
        for (int32_t b = 0; b < {count4[1]}; ++b)
            for (int32_t c = 0; c < {count4[2]}; ++c) {{
                const int8_t *src = input + {base} + a * {step[0]} + b * {step[1]} + c * {step[2]};
                {inner}
            }}
}}
"""
    return OpKernel(name, source)


def requantize_kernel(name: str, elements: int, input_zero_point: int, multiplier: int,
                      shift: int, output_zero_point: int, act_min: int = -128,
                      act_max: int = 127, what: str = "QUANTIZE int8 -> int8") -> OpKernel:
    """``clamp(MBQM(x - zp_in, m, s) + zp_out, act_min, act_max)`` elementwise: int8 -> int8
    QUANTIZE (``reference_ops::Requantize``, the full int8 range) and TFLM's ``ReluQuantized``
    (``act_min = max(-128, zp_out)``); element ``i`` is read before it is written."""
    _check_int8(name, input_zero_point, output_zero_point, act_min, act_max)
    _check_requant(name, multiplier, shift)
    source = f"""\
/* {what}: {elements} elements, requantized, clamped to [{act_min}, {act_max}]. */
static void {name}(const int8_t *input, int8_t *output) {{
    for (int32_t i = 0; i < {elements}; ++i) {{
        output[i] = serenity_clamp(serenity_mbqm((int32_t)input[i] {_plus(-input_zero_point)},
                                                 {multiplier}, {shift})
                                   {_plus(output_zero_point)}, {act_min}, {act_max});
    }}
}}
"""
    return OpKernel(name, source)


def clamp_kernel(name: str, elements: int, low: int, high: int, what: str = "RELU6") -> OpKernel:
    """``output[i] = min(max(input[i], low), high)`` (TFLM's int8 ``Relu6Quantized``: no
    rescaling, ``[zp, zp + round(6 / scale)]`` of the input); element ``i`` is read before it
    is written."""
    _check_int8(name, low, high)
    source = f"""\
/* {what} int8: {elements} elements clamped to [{low}, {high}]. */
static void {name}(const int8_t *input, int8_t *output) {{
    for (int32_t i = 0; i < {elements}; ++i) {{
        output[i] = serenity_clamp(input[i], {low}, {high});
    }}
}}
"""
    return OpKernel(name, source)


def lookup_kernel(name: str, elements: int, what: str) -> OpKernel:
    """``output[i] = table[input[i] + 128]``: an elementwise int8 function given for all 256
    inputs (HARD_SWISH, LOGISTIC, a binary operator with a constant scalar operand), the
    table computed from the reference kernel. Parameters after ``output``: ``table``
    (int8[256]). Element ``i`` is read before it is written."""
    if elements < 1:
        raise CodegenError(f"{name}: empty {what}")
    source = f"""\
/* {what}: {elements} elements through a 256-entry table of the reference kernel. */
static void {name}(const int8_t *input, int8_t *output, const int8_t *table) {{
    for (int32_t i = 0; i < {elements}; ++i) output[i] = table[(int32_t)input[i] + 128];
}}
"""
    return OpKernel(name, source)


def _broadcast_strides(name: str, shape, out4) -> list[int]:
    """Element strides of an operand of ``shape`` read at every index of ``out4`` (NumPy/TFLite
    broadcasting: a size-1 axis is read at index 0, stride 0)."""
    shape4 = _pad4(shape)
    if any(d not in (1, o) for d, o in zip(shape4, out4)):
        raise CodegenError(f"{name}: operand shape {list(shape)} does not broadcast to "
                           f"{list(out4)}")
    return [0 if d == 1 else s for d, s in zip(shape4, _strides(shape4))]


def _offset(base: str, terms) -> str:
    """``base + a * 12 + c * 3`` without the zero terms."""
    return " + ".join([base] + [f"{v} * {s}" for v, s in terms if s])


def _binary_kernel(name: str, what: str, shape_a, shape_b, out_shape, element: str) -> str:
    """The loop nest of an elementwise binary operator with broadcasting (rank <= 4):
    ``element`` is a C expression of ``x`` and ``y`` (the two int32 operand values) giving the
    int8 result. Output elements are written in order, each right after reading its operands:
    an operand with the output's shape may share the output's address."""
    out4 = _pad4(out_shape)
    try:
        shape = np.broadcast_shapes(tuple(shape_a), tuple(shape_b))
    except ValueError:
        shape = None
    if shape is None or tuple(int(d) for d in shape) != tuple(int(d) for d in out_shape):
        raise CodegenError(f"{name}: {list(shape_a)} and {list(shape_b)} do not broadcast to "
                           f"{list(out_shape)}")
    sa = _broadcast_strides(name, shape_a, out4)
    sb = _broadcast_strides(name, shape_b, out4)
    loops = list(zip("abc", out4[:3]))
    index_a, index_b = "d" if sa[3] else "0", "d" if sb[3] else "0"
    return f"""\
/* {what}: {list(shape_a)} and {list(shape_b)} -> {list(out_shape)} (broadcast). */
static void {name}(const int8_t *input1, const int8_t *input2, int8_t *output) {{
    for (int32_t a = 0; a < {out4[0]}; ++a)
        for (int32_t b = 0; b < {out4[1]}; ++b)
            for (int32_t c = 0; c < {out4[2]}; ++c) {{
                const int8_t *p = {_offset("input1", [(v, s) for (v, _), s in zip(loops, sa)])};
                const int8_t *q = {_offset("input2", [(v, s) for (v, _), s in zip(loops, sb)])};
                for (int32_t d = 0; d < {out4[3]}; ++d) {{
                    int32_t x = p[{index_a}], y = q[{index_b}];
                    *output++ = {element};
                }}
            }}
}}
"""


def mul_kernel(name: str, shape_a, shape_b, out_shape, zero_a: int, zero_b: int,
               multiplier: int, shift: int, output_zero_point: int, act_min: int = -128,
               act_max: int = 127) -> OpKernel:
    """int8 MUL (``reference_integer_ops::MulElementwise`` / ``BroadcastMul4DSlow``):
    ``clamp(MBQM((x - z1) * (y - z2), m, s) + z_out, act_min, act_max)`` with NumPy
    broadcasting of tensors of rank <= 4 (``frontend.reference.mul_int8``). Parameters:
    ``input1``, ``input2``, ``output``; either input may be a constant array."""
    _check_int8(name, zero_a, zero_b, output_zero_point, act_min, act_max)
    _check_requant(name, multiplier, shift)
    element = (f"serenity_clamp(serenity_mbqm((x {_plus(-zero_a)}) * (y {_plus(-zero_b)}), "
               f"{multiplier}, {shift})\n                        {_plus(output_zero_point)}, "
               f"{act_min}, {act_max})")
    return OpKernel(name, _binary_kernel(name, "MUL int8", shape_a, shape_b, out_shape,
                                         element))


def add_kernel(name: str, shape_a, shape_b, out_shape, zero_a: int, zero_b: int,
               multiplier_a: int, shift_a: int, multiplier_b: int, shift_b: int,
               multiplier: int, shift: int, output_zero_point: int, act_min: int = -128,
               act_max: int = 127, left_shift: int = 20) -> OpKernel:
    """int8 ADD with broadcasting (``reference_integer_ops::BroadcastAdd4DSlow``, the same
    arithmetic as ``frontend.reference.add_int8``): each input ``(v - z) * 2^left_shift``
    rescaled by its own multiplier, summed, requantized. The TIR kernel of :mod:`.kernels`
    covers same-shape ADD of two activations; this one broadcasts and takes constants."""
    _check_int8(name, zero_a, zero_b, output_zero_point, act_min, act_max)
    for m, s in ((multiplier_a, shift_a), (multiplier_b, shift_b), (multiplier, shift)):
        _check_requant(name, m, s)
    if not 0 <= left_shift <= 22:
        raise CodegenError(f"{name}: left shift {left_shift} overflows int32")
    scale = 1 << left_shift
    element = (f"serenity_clamp(serenity_mbqm(\n"
               f"                        serenity_mbqm((x {_plus(-zero_a)}) * {scale}, "
               f"{multiplier_a}, {shift_a})\n"
               f"                        + serenity_mbqm((y {_plus(-zero_b)}) * {scale}, "
               f"{multiplier_b}, {shift_b}),\n"
               f"                        {multiplier}, {shift}) {_plus(output_zero_point)}, "
               f"{act_min}, {act_max})")
    return OpKernel(name, _binary_kernel(name, "ADD int8", shape_a, shape_b, out_shape,
                                         element))


#: gemmlowp constants of ``one_over_one_plus_x_for_x_in_0_1`` (48/17 and 32/17 in Q2.29).
_RECIPROCAL_48_17, _RECIPROCAL_32_17 = 1515870810, 1010580540
#: TFLM's SOFTMAX: the sum of exponentials has 12 integer bits, the int8 output 8 bits.
SOFTMAX_ACCUMULATION_BITS = 12


def softmax_kernel(name: str, rows: int, depth: int, valid_from: int) -> OpKernel:
    """TFLM's int8 SOFTMAX (``reference_ops::Softmax``, output scale 1/256, zero point -128)
    over ``rows`` rows of ``depth`` values, exactly as ``frontend.reference.softmax_int8``.

    A value's difference to its row maximum is one of -255..0, so its exponential and its
    term of the sum are the tables ``exps`` and ``terms`` (int32[256], index ``diff + 255``,
    computed in Python; a term is 0 below ``diff_min``, i.e. at indices below
    ``valid_from``). In C, per row: the maximum, the sum of terms, gemmlowp's fixed-point
    reciprocal of the sum (``GetReciprocal``: count leading zeros, Newton-Raphson in Q2.29),
    then ``RoundingDivideByPOT(SRDHM(reciprocal, exp), 35 - headroom) - 128`` per value. All
    32-bit: every SRDHM has a non-negative operand, so it is ``serenity_mbqm(x, m, 0)``. A
    division by 2^32 or more (a row sum of at least 2^27, TFLM's 32-bit mask wrapping to -1)
    gives 1, as in the reference. A row is read entirely before its outputs are written, each
    right after its input: exact alias is safe.
    """
    if rows < 1 or depth < 1:
        raise CodegenError(f"{name}: empty SOFTMAX ({rows}x{depth})")
    if depth >= 1 << SOFTMAX_ACCUMULATION_BITS:
        raise CodegenError(f"{name}: SOFTMAX over {depth} values overflows TFLite's int32 "
                           "sum of exponentials (at most 4095)")
    if not 0 <= valid_from <= 255:
        raise CodegenError(f"{name}: first valid difference index {valid_from} is not in "
                           "[0, 255]")
    invalid = (f"if (k < {valid_from}) {{\n                y[i] = -128;     "
               f"/* below diff_min */\n            }} else " if valid_from else "")
    source = f"""\
/* gemmlowp GetReciprocal of a SOFTMAX row sum in [2^19, 2^31) (Q12): sets *headroom
 * to its leading zeros and returns one_over_one_plus_x_for_x_in_0_1((sum << headroom) - 1)
 * (Q0.31), Newton-Raphson in Q2.29 on half the denominator d, 32-bit only. */
static int32_t {name}_reciprocal(int32_t sum, int32_t *headroom) {{
    int32_t h = 0;
    while (!(((uint32_t)sum << h) & 0x80000000u)) ++h;
    *headroom = h;
    /* RoundingHalfSum((sum << h) - 2^31, 2^31 - 1): (sum << h) / 2, in [2^30, 2^31) */
    const int32_t half_d = (int32_t)(((uint32_t)sum << h) >> 1);
    /* x = 48/17 - 32/17 d (the product d * -32/17 as SRDHM(-d, 32/17)); x stays in (0, 2) */
    int32_t x = {_RECIPROCAL_48_17} + serenity_mbqm(-half_d, {_RECIPROCAL_32_17}, 0);
    for (int32_t k = 0; k < 3; ++k) {{
        const int32_t one_minus_dx = (int32_t)((uint32_t)(1 << 29)
                                               - (uint32_t)serenity_mbqm(x, half_d, 0));
        const int32_t step = serenity_mbqm(one_minus_dx, x, 0);
        const int32_t step4 = step > 0x1FFFFFFF ? 0x7FFFFFFF
            : (step < -0x1FFFFFFF ? (-0x7FFFFFFF - 1) : step * 4);
        x = (int32_t)((uint32_t)x + (uint32_t)step4);
    }}
    return x > 0x3FFFFFFF ? 0x7FFFFFFF : (x < -0x3FFFFFFF ? (-0x7FFFFFFF - 1) : x * 2);
}}

/* SOFTMAX int8: {rows} row(s) of {depth}, output scale 1/256, zero point -128 (TFLM). */
static void {name}(const int8_t *input, int8_t *output, const int32_t *exps,
                   const int32_t *terms) {{
    for (int32_t r = 0; r < {rows}; ++r) {{
        const int8_t *x = input + r * {depth};
        int8_t *y = output + r * {depth};
        int32_t max = -128, sum = 0, headroom;
        for (int32_t i = 0; i < {depth}; ++i) if (x[i] > max) max = x[i];
        const int32_t base = 255 - max;      /* table index of a value: diff + 255 */
        for (int32_t i = 0; i < {depth}; ++i) sum += terms[x[i] + base];
        const int32_t scale = {name}_reciprocal(sum, &headroom);
        const int32_t exponent = {SOFTMAX_ACCUMULATION_BITS + 31 - 8} - headroom;  /* in [23, 34] */
        for (int32_t i = 0; i < {depth}; ++i) {{
            const int32_t k = x[i] + base;
            {invalid}if (exponent > 31) {{
                y[i] = -127;     /* RoundingDivideByPOT by >= 2^32 gives 1 */
            }} else {{
                y[i] = serenity_clamp(serenity_mbqm(exps[k], scale, -exponent) - 128,
                                      -128, 127);
            }}
        }}
    }}
}}
"""
    return OpKernel(name, source)


def resize_nearest_kernel(name: str, in_shape, out_hw) -> OpKernel:
    """RESIZE_NEAREST_NEIGHBOR of an NHWC int8 tensor: each output pixel is a copy of the
    ``C`` bytes of one input pixel. Parameters after ``output``: ``rows`` (int32[out H],
    the source row times ``W * C``) and ``cols`` (int32[out W], the source column times
    ``C``), the reference's source indices computed in Python. Needs disjoint buffers."""
    shape = tuple(int(d) for d in in_shape)
    if len(shape) != 4 or min(shape) < 1 or min(out_hw) < 1:
        raise CodegenError(f"{name}: RESIZE_NEAREST_NEIGHBOR of {list(shape)} to "
                           f"{list(out_hw)}: NHWC input and a non-empty size only")
    n, h, w, c = shape
    oh, ow = (int(v) for v in out_hw)
    copy = (f"*output++ = src[cols[x]];" if c == 1
            else f"memcpy(output, src + cols[x], {c});\n                output += {c};")
    source = f"""\
/* RESIZE_NEAREST_NEIGHBOR: {list(shape)} -> [{n}, {oh}, {ow}, {c}], pixel copies. */
static void {name}(const int8_t *input, int8_t *output, const int32_t *rows,
                   const int32_t *cols) {{
    for (int32_t b = 0; b < {n}; ++b)
        for (int32_t y = 0; y < {oh}; ++y) {{
            const int8_t *src = input + b * {h * w * c} + rows[y];
            for (int32_t x = 0; x < {ow}; ++x) {{
                {copy}
            }}
        }}
}}
"""
    return OpKernel(name, source)


def c_float(value: float) -> str:
    """A float32 value as an exact C99 literal (hexadecimal, ``f`` suffix)."""
    v = np.float32(value)
    if not np.isfinite(v):
        raise CodegenError(f"c_float: {value} is not a finite float32")
    return f"{float(v).hex()}f"


def float_quantize_kernel(name: str, elements: int, scale: float, zero_point: int) -> OpKernel:
    """float32 -> int8 QUANTIZE, TFLM's ``AffineQuantize`` (module docstring); ``input``
    points at ``4 * elements`` bytes of float32."""
    _check_int8(name, zero_point)
    if not np.float32(scale) > 0:
        raise CodegenError(f"{name}: QUANTIZE scale {scale} must be positive")
    low, high = INT8_MIN - zero_point, INT8_MAX - zero_point     # of the rounded quotient
    source = f"""\
/* QUANTIZE float32 -> int8: {elements} elements, round(x / {float(np.float32(scale))!r}f) \
{_plus(zero_point)}, clamped (TFLM AffineQuantize). */
static void {name}(const int8_t *input, int8_t *output) {{
    for (int32_t i = 0; i < {elements}; ++i) {{
        float x, v;
        int32_t r;
        memcpy(&x, input + 4 * i, 4);
        v = x / {c_float(scale)};
        if (!(v >= {low - 1}.0f)) v = {low - 1}.0f;  /* NaN too */
        if (v > {high + 1}.0f) v = {high + 1}.0f;
        r = (int32_t)v;                       /* toward zero; v - r is exact */
        if (v - (float)r >= 0.5f) ++r;       /* halves away from zero */
        else if (v - (float)r <= -0.5f) --r;
        output[i] = serenity_clamp(r {_plus(zero_point)}, {INT8_MIN}, {INT8_MAX});
    }}
}}
"""
    return OpKernel(name, source)


def dequantize_kernel(name: str, elements: int, scale: float, zero_point: int) -> OpKernel:
    """int8 -> float32 DEQUANTIZE, TFLM's ``Dequantize`` (module docstring); ``output``
    points at ``4 * elements`` bytes."""
    _check_int8(name, zero_point)
    source = f"""\
/* DEQUANTIZE int8 -> float32: {elements} elements, {float(np.float32(scale))!r}f * (q \
{_plus(-zero_point)}) (TFLM Dequantize). */
static void {name}(const int8_t *input, int8_t *output) {{
    for (int32_t i = 0; i < {elements}; ++i) {{
        float y = {c_float(scale)} * (float)((int32_t)input[i] {_plus(-zero_point)});
        memcpy(output + 4 * i, &y, 4);
    }}
}}
"""
    return OpKernel(name, source)


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


def arg_max_kernel(name: str, outer: int, size: int, inner: int, dtype: str) -> OpKernel:
    """TFLite's ARG_MAX (``reference_ops::ArgMinMax`` with ``std::greater``,
    :func:`~tvm_serenity.frontend.reference.arg_max`) of an ``(outer, size, inner)`` view of
    an int8 or float32 tensor: per column the int32 index of the first value no later one
    exceeds, written through ``memcpy`` (any offset). In place: module docstring."""
    if min(outer, size, inner) < 1:
        raise CodegenError(f"{name}: empty ARG_MAX ({outer}x{size}x{inner})")
    if dtype not in ("int8", "float32"):
        raise CodegenError(f"{name}: ARG_MAX of {dtype} (int8 or float32 only)")
    ctype, width = ("float", 4) if dtype == "float32" else ("int8_t", 1)
    load = ("memcpy(&v, input + {k} * 4, 4);" if width == 4 else "v = input[{k}];")
    source = f"""\
/* ARG_MAX {dtype}: {outer} x [{size}] x {inner} -> int32 indices, the first maximum wins
 * (TFLite reference_ops::ArgMinMax, std::greater). */
static void {name}(const int8_t *input, int8_t *output) {{
    for (int32_t o = 0; o < {outer}; ++o)
        for (int32_t j = 0; j < {inner}; ++j) {{
            {ctype} best, v;
            int32_t index = 0;
            {load.format(k=f"(o * {size * inner} + j)")}
            best = v;
            for (int32_t i = 1; i < {size}; ++i) {{
                {load.format(k=f"((o * {size} + i) * {inner} + j)")}
                if (v > best) {{
                    best = v;
                    index = i;
                }}
            }}
            memcpy(output + 4 * (o * {inner} + j), &index, 4);
        }}
}}
"""
    return OpKernel(name, source)
