"""Plain-C kernels for the non-convolution operators of the MCU set, written by this generator.

The window kernels (CONV_2D, DEPTHWISE_CONV_2D, MAX/AVERAGE_POOL_2D) and same-shape ADD are
generated from TIR (:mod:`.kernels`, :mod:`.plain_c`). The remaining operators MCU networks use
around them are generated here directly as C99 text, from the integer semantics of
:mod:`tvm_serenity.frontend.reference` (the arithmetic specification; tests check every
kernel against it bit for bit): MEAN, FULLY_CONNECTED, TRANSPOSE, CONCATENATION, PAD,
STRIDED_SLICE, int8 QUANTIZE (requantize), RELU and RELU6 (TFLM's ``ReluQuantized`` /
``Relu6Quantized``) and RESHAPE (a copy, or nothing when aliased). They
are a small share of a network's cycles, so the C is written for clarity with constants baked
in (loop bounds, strides, zero points, multipliers); none divides inside a loop.

Every kernel is ``static void name(const int8_t *input, int8_t *output, ...)`` (CONCATENATION
takes one input pointer per operand). In-place safety, which the graph emitter relies on when
the arena plan overlaps input and output (docs/rip.md):

* QUANTIZE, RELU and RELU6 read element ``i`` before writing element ``i``: exact alias (same
  offset) is safe.
* MEAN accumulates a whole reduction block into the int32 ``acc`` scratch before writing any of
  its outputs; for a global spatial mean (one block) any overlap is safe.
* FULLY_CONNECTED gathers one input row (``x - zero_point`` as int16) into ``scratch`` before
  writing that row's outputs: the RiP layout of the row-as-pixel geometry is safe.
* TRANSPOSE, CONCATENATION, PAD, STRIDED_SLICE and the RESHAPE copy need disjoint buffers.

:func:`c_helpers` returns the shared fixed-point helpers, which a translation unit using these
kernels includes once: ``serenity_mbqm`` (TFLite's ``MultiplyByQuantizedMultiplier`` with
double rounding, lowered from the same TIR expression the generated kernels inline, see
:func:`.plain_c.requantize_c_function`) and ``serenity_clamp``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .plain_c import requantize_c_function
from .spec import INT8_MAX, INT8_MIN, CodegenError

__all__ = ["c_helpers", "OpKernel", "c_array", "mean_kernel", "fully_connected_kernel",
           "transpose_kernel", "concatenation_kernel", "pad_kernel", "strided_slice_kernel",
           "requantize_kernel", "clamp_kernel"]


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
                           output_zero_point: int, act_min: int, act_max: int) -> OpKernel:
    """``reference_integer_ops::FullyConnected[PerChannel]`` as TFLM runs it: per row, ``acc =
    bias[u] + sum_d weight[u*depth + d] * (x[d] - zp_in)``, requantized with the per-unit
    ``multiplier``/``shift`` arrays. Parameters after ``output``: ``weight`` (int8, units x
    depth), ``bias``, ``multiplier``, ``shift`` (int32, units each), ``scratch`` (int16,
    depth)."""
    if min(rows, depth, units) < 1:
        raise CodegenError(f"{name}: empty FULLY_CONNECTED ({rows}x{depth} -> {units})")
    _check_int8(name, input_zero_point, output_zero_point, act_min, act_max)
    source = f"""\
/* FULLY_CONNECTED: {rows} row(s) of {depth} -> {units} units; each row is gathered into
 * scratch (x - zero point) before its outputs are written. */
static void {name}(const int8_t *input, int8_t *output, const int8_t *weight,
                   const int32_t *bias, const int32_t *multiplier, const int32_t *shift,
                   int16_t *scratch) {{
    for (int32_t r = 0; r < {rows}; ++r) {{
        for (int32_t d = 0; d < {depth}; ++d) {{
            scratch[d] = (int16_t)(input[r * {depth} + d] {_plus(-input_zero_point)});
        }}
        for (int32_t u = 0; u < {units}; ++u) {{
            const int8_t *w = weight + u * {depth};
            int32_t acc = bias[u];
            for (int32_t d = 0; d < {depth}; ++d) acc += (int32_t)w[d] * scratch[d];
            output[r * {units} + u] = serenity_clamp(
                serenity_mbqm(acc, multiplier[u], shift[u]) {_plus(output_zero_point)},
                {act_min}, {act_max});
        }}
    }}
}}
"""
    return OpKernel(name, source, scratch16=depth)


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
