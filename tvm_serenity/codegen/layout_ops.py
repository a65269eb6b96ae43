"""MEAN, FULLY_CONNECTED and the data-movement operators as TIR: one PrimFunc per kernel, printed
as the MCU's C and built by TVM for llvm.

Each operator is a TIR PrimFunc built with TVM's IRBuilder (:func:`.kernels.prim_func`),
over flat buffers whose names, element types and order are the kernel's C ABI (below);
``<op>_kernel`` refuses what the kernel cannot do (a :class:`~.spec.CodegenError` naming it)
and lowers the PrimFunc with :func:`.plain_c.op_kernel` into the :class:`~.ops.OpKernel`
the graph emitter calls (``const`` on the inputs and tables; the scratch it needs). The same
PrimFunc runs on the host through ``tvm.tirx.build(func, target="llvm")``.

The arithmetic is :mod:`tvm_serenity.frontend.reference`'s (TFLM's). Shapes, strides, zero
points and per-tensor requantization constants are baked in as Python ints; no loop divides;
a loop of one iteration is left out (its index is 0). Requantization is the TIR expression
:func:`.kernels.requantize` written inline, clamped by :func:`.kernels._store_clamped`, so the
C calls no helper function. A contiguous run of two or more bytes is copied by a TIR
``call_extern`` of ``memcpy`` and PAD's fill is one ``memset`` (the C library's word copies;
a byte loop costs 2-3x the Cortex-M0+ cycles, and GCC does not turn it into ``memcpy``
without ``restrict``). Their size argument is a 64-bit constant, so
the llvm build declares them as the host's C library does; the C converts it at compile time.
The C needs ``<stdint.h>`` and ``<string.h>`` (the graph emitter's translation unit includes
both). Strided byte copies go through ``uint8`` views of row pointers (``int8_t *in =
&input[...]``): no sign extension, and a row's address is computed once.

* **MEAN** (``input, output, acc``): per block of ``reduce x inner`` values, ``acc[i] =
  -zp_in * reduce + sum_r input[...]`` (int32), then ``output = clamp(MBQM(acc[i], m, s) +
  zp_out)`` with ``m, s`` already divided by the count as TFLM does.
* **FULLY_CONNECTED** (``input, output, weight, bias, multiplier, shift[, scratch]``): per row
  ``acc = bias[u] + sum_d weight[u*depth + d] * (x[d] - zp_in)`` requantized with the per-unit
  tables; with ``gather`` the row's ``x - zp_in`` is first copied into the int16 ``scratch``.
* With onnxruntime's arithmetic (``arithmetic="onnxruntime"``, operators of an ONNX QDQ
  model) MEAN is QLinearGlobalAveragePool and FULLY_CONNECTED QGemm / QLinearMatMul: the same
  sums requantized by :func:`.kernels.ort_requantize`; :class:`FloatMean` (float
  GlobalAveragePool, MLAS's four lanes) and :class:`FloatGemm` (float Gemm, MLAS's one-row
  kernel) compute in float32 from a ``table`` dequantizing the input.
* **TRANSPOSE**, **CONCATENATION** (``input0, input1, ..., output``), **PAD**,
  **STRIDED_SLICE** (rank <= 4, padded to 4 with leading axes of size 1) and
  **RESIZE_NEAREST_NEIGHBOR** (``input, output, rows, cols``: the reference's source row
  times ``W*C`` and column times ``C``, computed in Python): row-major loops over the output,
  each element read at constant strides (PAD fills the output with the pad value, then copies
  every innermost input row into place).

In-place safety (what the graph emitter relies on when the arena plan overlaps input and
output, docs/rip.md):

* MEAN accumulates a whole block into ``acc`` before writing any of the block's outputs; with
  one block (a global mean) any overlap of input and output is safe.
* FULLY_CONNECTED with ``gather`` copies row ``r`` into ``scratch`` before writing any output
  of row ``r`` and reads no input after it: the RiP layout of the row-as-pixel geometry is
  safe. Without ``gather`` input and output must be disjoint.
* **ARG_MAX** (``input, output``) of an ``(outer, size, inner)`` view of an int8 or float32
  tensor: per column the int32 index of the first value no later one exceeds (TFLite's
  ``reference_ops::ArgMinMax`` with ``std::greater``: a NaN is never greater), floats read and
  indices written through ``memcpy`` (any offset).
* TRANSPOSE, CONCATENATION, PAD, STRIDED_SLICE and RESIZE_NEAREST_NEIGHBOR need disjoint
  buffers. ARG_MAX writes index ``q`` (4 bytes) after reading column ``q`` whole: over a
  float32 input every input element at or before ``q`` is then read, so the output may start
  where the input starts; over int8 that holds when the reduced axis is the last and has 4 or
  more values (bytes ``4q .. 4q + 3`` lie in rows ``<= q``).

The C has no ``restrict``, so a compiler keeps each read before the writes that follow it.
"""

from __future__ import annotations

from contextlib import ExitStack, contextmanager
from functools import partial
from dataclasses import dataclass

import numpy as np
import tvm
from tvm import tirx
from tvm.script.ir_builder import tirx as T

from .kernels import (_cast, _extern, _f32, _let, _local, _loop, _size, _store,
                      _store_clamped, ort_requantize, prim_func, quantize_linear, requantize)
from .ops import OpKernel, _check_int8, _check_ort_requant, _check_requant, _pad4, _strides
from .plain_c import op_kernel
from .spec import CodegenError

__all__ = ["mean_prim_func", "mean_kernel", "fully_connected_prim_func",
           "fully_connected_kernel", "transpose_prim_func", "transpose_kernel",
           "concatenation_prim_func", "concatenation_kernel", "pad_prim_func", "pad_kernel",
           "strided_slice_prim_func", "strided_slice_kernel", "resize_nearest_prim_func",
           "resize_nearest_kernel"]


# ------------------------------------------------------------------ building blocks
@contextmanager
def _nest(names, extents):
    """Loops ``names[k] < extents[k]``, outermost first; yields their indices (the constant 0
    for an extent of 1: no loop)."""
    with ExitStack() as stack:
        yield [stack.enter_context(_loop(n, e)) if e > 1 else tirx.const(0, "int32")
               for n, e in zip(names, extents)]


def _row(name: str, buffer, index):
    """``int8_t *name = &buffer[index];`` and a ``uint8`` buffer on it: byte copies through
    it need no sign extension (the Cortex-M0+'s ``ldrsb`` has no immediate offset, ``ldrb``
    has) and a row's base address is computed once, as a pointer."""
    pointer = T.Bind(tirx.address_of(buffer[index]),
                     var=tirx.Var(name, tvm.ir.PointerType(tvm.ir.PrimType("int8"))))
    return T.decl_buffer(buffer.shape, "uint8", data=pointer)


UNROLL_STRIDED = 4      # strided byte runs up to this long are written out, not looped


def _copy(dst_buffer, dst, src_buffer, src, count: int, step: int = 1, name: str = "j"):
    """``dst_buffer[dst + j] = src_buffer[src + j*step]`` for ``j < count`` (int8): one
    ``memcpy`` of a contiguous run (``step`` 1), else byte copies."""
    if step == 1 and count > 1:
        _extern("memcpy", tirx.address_of(dst_buffer[dst]), tirx.address_of(src_buffer[src]),
                _size(count))
    elif count == 1:
        _store(dst_buffer, dst, src_buffer[src])
    elif count <= UNROLL_STRIDED:   # a short run: constant offsets, no loop overhead
        out, inp = _row("out", dst_buffer, dst), _row("in", src_buffer, src)
        for j in range(count):
            _store(out, j, inp[j * step])
    else:
        out, inp = _row("out", dst_buffer, dst), _row("in", src_buffer, src)
        with _loop(name, count) as j:
            _store(out, j, inp[j * step])


# ------------------------------------------------------------------ MEAN
def _check_mean(name, outer, reduce, inner, input_zero_point, multiplier, shift,
                output_zero_point, arithmetic):
    if min(outer, reduce, inner) < 1:
        raise CodegenError(f"{name}: empty MEAN ({outer}x{reduce}x{inner})")
    _check_int8(name, input_zero_point, output_zero_point)
    (_check_ort_requant if arithmetic == "onnxruntime" else _check_requant)(name, multiplier,
                                                                           shift)


@dataclass(frozen=True)
class FloatMean:
    """A MEAN computed as onnxruntime's float GlobalAveragePool (``MlasPoolGlobalKernel``):
    the output's quantization; the ``table`` parameter dequantizes the input."""

    output_scale: float
    output_zero_point: int


def mean_prim_func(name: str, outer: int, reduce: int, inner: int, input_zero_point: int,
                   multiplier: int, shift: int, output_zero_point: int,
                   arithmetic: str = "tflite",
                   float_mean: FloatMean | None = None) -> tirx.PrimFunc:
    """``(input int8[outer*reduce*inner], output int8[outer*inner], acc int32[inner])``:
    TFLM's ``QuantizedMeanOrSum`` (mean) over the middle axis (module docstring), or with
    ``arithmetic="onnxruntime"`` QLinearGlobalAveragePool (the same sums requantized by
    :func:`.kernels.ort_requantize`, ``(multiplier, shift)`` the scale's ``(M, E)``); with
    ``float_mean`` the float GlobalAveragePool (``..., table float32[256]``,
    :func:`_emit_float_mean`)."""
    if float_mean is not None:
        if min(outer, reduce, inner) < 1:
            raise CodegenError(f"{name}: empty MEAN ({outer}x{reduce}x{inner})")
        return prim_func(name, [("input", outer * reduce * inner, "int8"),
                                ("output", outer * inner, "int8"), ("acc", inner, "int32"),
                                ("table", 256, "float32")],
                         lambda *b: _emit_float_mean(float_mean, outer, reduce, inner, *b))
    _check_mean(name, outer, reduce, inner, input_zero_point, multiplier, shift,
                output_zero_point, arithmetic)
    requantizer = ort_requantize if arithmetic == "onnxruntime" else requantize
    def emit(x, y, acc):
        with _nest(["o"], [outer]) as (o,):
            with _nest(["i"], [inner]) as (i,):
                _store(acc, i, tirx.const(-input_zero_point * reduce, "int32"))
            with _nest(["r"], [reduce]) as (r,):
                row = _let("row", o * (reduce * inner) + r * inner)
                with _nest(["i"], [inner]) as (i,):
                    _store(acc, i, acc[i] + _cast("int32", x[row + i]))
            with _nest(["i"], [inner]) as (i,):
                _store_clamped(y, o * inner + i, requantizer(acc[i], multiplier, shift)
                               + output_zero_point, -128, 127)
    return prim_func(name, [("input", outer * reduce * inner, "int8"),
                            ("output", outer * inner, "int8"), ("acc", inner, "int32")], emit)


def _emit_float_mean(p: FloatMean, outer: int, reduce: int, inner: int, x, y, acc, table):
    """Per output: the dequantized values summed in four float32 lanes over the reduced axis
    (``MlasPoolGlobalKernel``: lane ``r % 4`` for the values before the last full four,
    ``(l0 + l2) + (l1 + l3)``, then the rest in order), divided by the count, quantized; a
    block's codes wait in ``acc`` until all its values are read (in place, any overlap of
    input and output is safe for one block)."""
    lanes = _local("lanes", 4, "float32")
    body = reduce // 4 * 4
    with _nest(["o"], [outer]) as (o,):
        with _nest(["i"], [inner]) as (i,):
            for lane in range(4):
                _store(lanes, lane, _f32(0))
            with _nest(["r"], [reduce]) as (r,):
                value = table[_cast("int32", x[o * (reduce * inner) + r * inner + i]) + 128]
                _store(lanes, r & 3, lanes[r & 3] + tirx.Select(r < body, value, _f32(0)))
            _store(lanes, 0, (lanes[0] + lanes[2]) + (lanes[1] + lanes[3]))
            for r in range(body, reduce):
                _store(lanes, 0, lanes[0] + table[_cast(
                    "int32", x[o * (reduce * inner) + r * inner + i]) + 128])
            _store(acc, i, quantize_linear(tirx.Div(lanes[0], _cast("float32", reduce)),
                                           p.output_scale, p.output_zero_point))
        with _nest(["i"], [inner]) as (i,):
            _store(y, o * inner + i, _cast("int8", acc[i]))


def mean_kernel(name: str, outer: int, reduce: int, inner: int, input_zero_point: int,
                multiplier: int, shift: int, output_zero_point: int,
                arithmetic: str = "tflite", float_mean: FloatMean | None = None) -> OpKernel:
    """TFLM's ``QuantizedMeanOrSum`` (mean) over the middle axis of ``(outer, reduce,
    inner)``, :func:`mean_prim_func` as C; ``multiplier``/``shift`` are already divided by the
    element count as TFLM does (``frontend.reference.mean_int8``), or onnxruntime's
    (``arithmetic``, ``float_mean``). ``acc`` holds ``inner`` int32 sums or codes
    (``scratch32``)."""
    func = mean_prim_func(name, outer, reduce, inner, input_zero_point, multiplier, shift,
                          output_zero_point, arithmetic, float_mean)
    what = "float GlobalAveragePool (onnxruntime)" if float_mean else (
        "QLinearGlobalAveragePool (onnxruntime)" if arithmetic == "onnxruntime" else "TFLM")
    return op_kernel(name, f"MEAN, {what}: {outer} block(s) of {reduce} x {inner} int8 -> "
                     f"{outer} x {inner}; a block's values are\n * all read before its outputs "
                     "are written.", func, ["input"] + (["table"] if float_mean else []),
                     scratch32=inner)


# ------------------------------------------------------------------ FULLY_CONNECTED
@dataclass(frozen=True)
class FloatGemm:
    """A FULLY_CONNECTED computed as onnxruntime's float Gemm (``MlasSgemmKernelM1``,
    :class:`~tvm_serenity.frontend.ort_arithmetic.FullyConnectedFloat`): the output's
    quantization; the tables are parameters (``table``: the input's dequantization,
    ``wscale``, ``bias``: float32 per unit)."""

    output_scale: float
    output_zero_point: int


def fully_connected_prim_func(name: str, rows: int, depth: int, units: int,
                              input_zero_point: int, output_zero_point: int, act_min: int,
                              act_max: int, gather: bool, arithmetic: str = "tflite",
                              float_gemm: FloatGemm | None = None,
                              right_shifts: bool = False) -> tirx.PrimFunc:
    """``(input int8[rows*depth], output int8[rows*units], weight int8[units*depth], bias,
    multiplier, shift int32[units][, scratch int16[depth]])``: TFLM's
    ``FullyConnected[PerChannel]`` (module docstring; ``right_shifts``: every shift is <= 0,
    :func:`.kernels.requantize`'s ``right_only``), or with ``arithmetic="onnxruntime"``
    QGemm (:func:`.kernels.ort_requantize`; the tables hold each unit's ``(M, E)``). With
    ``float_gemm`` the float Gemm instead: ``(input, output, weight, table, wscale, bias
    float32[...][, scratch])`` (:func:`_emit_float_gemm`)."""
    if min(rows, depth, units) < 1:
        raise CodegenError(f"{name}: empty FULLY_CONNECTED ({rows}x{depth} -> {units})")
    _check_int8(name, input_zero_point, output_zero_point, act_min, act_max)
    if float_gemm is not None:
        params = [("input", rows * depth, "int8"), ("output", rows * units, "int8"),
                  ("weight", units * depth, "int8"), ("table", 256, "float32"),
                  ("wscale", units, "float32"), ("bias", units, "float32")]
        return prim_func(name, params + ([("scratch", depth, "int16")] if gather else []),
                         lambda *b: _emit_float_gemm(float_gemm, rows, depth, units, act_min,
                                                     act_max, gather, *b))
    requantizer = ort_requantize if arithmetic == "onnxruntime" else partial(
        requantize, right_only=right_shifts)
    params = [("input", rows * depth, "int8"), ("output", rows * units, "int8"),
              ("weight", units * depth, "int8"), ("bias", units, "int32"),
              ("multiplier", units, "int32"), ("shift", units, "int32")]

    def emit(x, y, weight, bias, multiplier, shift, *scratch):
        acc = _local("acc")
        with _nest(["r"], [rows]) as (r,):
            row = _let("row", r * depth)
            if gather:
                with _nest(["d"], [depth]) as (d,):
                    _store(scratch[0], d, _cast("int16", _cast("int32", x[row + d])
                                                - input_zero_point))
            with _nest(["u"], [units]) as (u,):
                w_row = _let("w_row", u * depth)
                _store(acc, 0, bias[u])
                with _nest(["d"], [depth]) as (d,):
                    term = (_cast("int32", scratch[0][d]) if gather
                            else _cast("int32", x[row + d]) - input_zero_point)
                    _store(acc, 0, acc[0] + _cast("int32", weight[w_row + d]) * term)
                _store_clamped(y, r * units + u, requantizer(acc[0], multiplier[u], shift[u])
                               + output_zero_point, act_min, act_max)
    return prim_func(name, params + ([("scratch", depth, "int16")] if gather else []), emit)


def _emit_float_gemm(p: FloatGemm, rows: int, depth: int, units: int, act_min: int,
                     act_max: int, gather: bool, x, y, weight, table, wscale, bias, *scratch):
    """Per row and unit: ``c = bias[u]``; the products ``table[x + 128] * (float)w *
    wscale[u]`` summed in groups of four (a running float32 sum of the group, then added to
    ``c``), then a group of two and one of the remaining depth; ``c`` quantized. With
    ``gather`` the row's codes are first copied into ``scratch`` (the in-place layout)."""
    sums = _local("sums", 2, "float32")             # the running output, the group's sum

    def group(row, w_row, ws, start, size: int):
        for i in range(size):
            code = scratch[0][start + i] if gather else x[row + start + i]
            product = table[_cast("int32", code) + 128] * (
                _cast("float32", weight[w_row + start + i]) * ws)
            _store(sums, 1, product if i == 0 else sums[1] + product)
        _store(sums, 0, sums[1] + sums[0])

    with _nest(["r"], [rows]) as (r,):
        row = _let("row", r * depth)
        if gather:
            with _nest(["d"], [depth]) as (d,):
                _store(scratch[0], d, _cast("int16", x[row + d]))
        with _nest(["u"], [units]) as (u,):
            w_row = _let("w_row", u * depth)
            ws = _let("ws", wscale[u], "float32")
            _store(sums, 0, bias[u])
            if depth >= 4:
                with _loop("k", depth // 4) as k:
                    group(row, w_row, ws, k * 4, 4)
            start = depth // 4 * 4
            for size in (2, 1):
                if depth - start >= size:
                    group(row, w_row, ws, start, size)
                    start += size
            _store_clamped(y, r * units + u, quantize_linear(
                sums[0], p.output_scale, p.output_zero_point, act_min, act_max), act_min,
                act_max)


def fully_connected_kernel(name: str, rows: int, depth: int, units: int, input_zero_point: int,
                           output_zero_point: int, act_min: int, act_max: int,
                           gather: bool, arithmetic: str = "tflite",
                           float_gemm: FloatGemm | None = None,
                           right_shifts: bool = False) -> OpKernel:
    """``reference_integer_ops::FullyConnected[PerChannel]`` as TFLM runs it (or onnxruntime's
    QGemm / float Gemm, ``arithmetic`` / ``float_gemm``), :func:`fully_connected_prim_func` as
    C; with ``gather`` (the in-place layout, where a row's outputs overwrite it), ``scratch``
    holds the row's ``depth`` int16 values ``x - zp_in`` (its codes for the float Gemm;
    ``scratch16``)."""
    func = fully_connected_prim_func(name, rows, depth, units, input_zero_point,
                                     output_zero_point, act_min, act_max, gather, arithmetic,
                                     float_gemm, right_shifts)
    note = ("each row is gathered into\n * scratch before its outputs are written" if gather
            else "input and output\n * apart (no gather)")
    what = "float Gemm (onnxruntime)" if float_gemm else (
        "QGemm (onnxruntime)" if arithmetic == "onnxruntime" else "TFLM")
    tables = ["table", "wscale", "bias"] if float_gemm else ["bias", "multiplier", "shift"]
    return op_kernel(name, f"FULLY_CONNECTED, {what}: {rows} row(s) of {depth} -> {units} "
                     f"units; {note}.", func, ["input", "weight", *tables],
                     scratch16=depth if gather else 0)


# ------------------------------------------------------------------ TRANSPOSE
def _transpose_geometry(name: str, in_shape, perm):
    rank = len(in_shape)
    perm = [int(p) % max(rank, 1) for p in perm]
    if sorted(perm) != list(range(rank)):
        raise CodegenError(f"{name}: {perm} is not a permutation of {rank} axes")
    shape4 = _pad4(in_shape)
    lead = 4 - rank
    perm4 = list(range(lead)) + [p + lead for p in perm]
    strides = _strides(shape4)
    return perm, shape4, [shape4[p] for p in perm4], [strides[p] for p in perm4]


def transpose_prim_func(name: str, in_shape, perm) -> tirx.PrimFunc:
    """``(input, output int8[N])``: ``output`` in row-major order of the permuted shape, each
    element gathered from ``input`` at constant strides."""
    _, shape4, dims, step = _transpose_geometry(name, in_shape, perm)
    n = int(np.prod(shape4, dtype=np.int64))

    def emit(x, y):
        with _nest("abc", dims[:3]) as (a, b, c):
            src = _let("src", a * step[0] + b * step[1] + c * step[2])
            dst = _let("dst", ((a * dims[1] + b) * dims[2] + c) * dims[3])
            _copy(y, dst, x, src, dims[3], step[3], "d")
    return prim_func(name, [("input", n, "int8"), ("output", n, "int8")], emit)


def transpose_kernel(name: str, in_shape, perm) -> OpKernel:
    """TRANSPOSE of a tensor of rank <= 4, :func:`transpose_prim_func` as C."""
    perm_, shape4, dims, _ = _transpose_geometry(name, in_shape, perm)
    func = transpose_prim_func(name, in_shape, perm)
    lead = 4 - len(in_shape)
    return op_kernel(name, f"TRANSPOSE: {list(in_shape)} by {perm_} -> {dims[lead:]}.", func,
                   ["input"])


# ------------------------------------------------------------------ CONCATENATION
def _concat_geometry(name: str, in_shapes, axis: int):
    shapes = [tuple(int(d) for d in s) for s in in_shapes]
    rank = len(shapes[0])
    axis = axis % rank
    if any(len(s) != rank or s[:axis] + s[axis + 1:] != shapes[0][:axis] + shapes[0][axis + 1:]
           for s in shapes):
        raise CodegenError(f"{name}: shapes {shapes} do not concatenate along axis {axis}")
    outer = int(np.prod(shapes[0][:axis], dtype=np.int64))
    slabs = [int(np.prod(s[axis:], dtype=np.int64)) for s in shapes]
    return shapes, axis, outer, slabs


def concatenation_prim_func(name: str, in_shapes, axis: int) -> tirx.PrimFunc:
    """``(input0, input1, ..., output int8)``: per outer index, each operand's contiguous slab
    copied in turn."""
    _, _, outer, slabs = _concat_geometry(name, in_shapes, axis)
    total = sum(slabs)

    def emit(*buffers):
        *xs, y = buffers
        with _nest(["o"], [outer]) as (o,):
            position = 0
            for k, (x, slab) in enumerate(zip(xs, slabs)):
                if slab:
                    _copy(y, o * total + position, x, o * slab, slab, name=f"j{k}")
                position += slab
    return prim_func(name, [(f"input{k}", outer * slab, "int8") for k, slab in enumerate(slabs)]
                     + [("output", outer * total, "int8")], emit)


def concatenation_kernel(name: str, in_shapes, axis: int) -> OpKernel:
    """CONCATENATION along ``axis`` of same-quantization int8 tensors,
    :func:`concatenation_prim_func` as C: one ``const int8_t *`` per operand (``input0``,
    ``input1``, ...), then ``output``."""
    shapes, axis, outer, slabs = _concat_geometry(name, in_shapes, axis)
    func = concatenation_prim_func(name, in_shapes, axis)
    return op_kernel(name, f"CONCATENATION of {len(shapes)} tensors along axis {axis}: {outer} x "
                   f"{slabs} -> {sum(slabs)}.", func, [f"input{k}" for k in range(len(shapes))])


# ------------------------------------------------------------------ PAD
def _pad_geometry(name: str, in_shape, paddings, value: int):
    _check_int8(name, value)
    rank = len(in_shape)
    pads = [(int(a), int(b)) for a, b in np.asarray(paddings).reshape(-1, 2)]
    if len(pads) != rank or any(a < 0 or b < 0 for a, b in pads):
        raise CodegenError(f"{name}: paddings {pads} do not fit a rank-{rank} tensor "
                           "(negative padding is not supported)")
    shape4 = _pad4(in_shape)
    pads4 = [(0, 0)] * (4 - rank) + pads
    out4 = [d + a + b for d, (a, b) in zip(shape4, pads4)]
    return pads, shape4, pads4, out4


def pad_prim_func(name: str, in_shape, paddings, value: int) -> tirx.PrimFunc:
    """``(input, output int8)``: PAD / PADV2 with a constant ``value``: the output filled,
    then every innermost input row copied into place."""
    _, shape4, pads4, out4 = _pad_geometry(name, in_shape, paddings, value)
    ostr = _strides(out4)
    base = sum(a * s for (a, _), s in zip(pads4, ostr))
    n_in, n_out = (int(np.prod(s, dtype=np.int64)) for s in (shape4, out4))

    def emit(x, y):
        _extern("memset", y.data, tirx.const(value, "int32"), _size(n_out))
        with _nest("abc", shape4[:3]) as (a, b, c):
            dst = _let("dst", base + a * ostr[0] + b * ostr[1] + c * ostr[2])
            src = _let("src", ((a * shape4[1] + b) * shape4[2] + c) * shape4[3])
            _copy(y, dst, x, src, shape4[3], name="d")
    return prim_func(name, [("input", n_in, "int8"), ("output", n_out, "int8")], emit)


def pad_kernel(name: str, in_shape, paddings, value: int) -> OpKernel:
    """PAD / PADV2 with a constant ``value`` (int8 PAD pads with the output zero point),
    :func:`pad_prim_func` as C."""
    pads, *_ = _pad_geometry(name, in_shape, paddings, value)
    return op_kernel(name, f"PAD: {list(in_shape)} by {pads} with {value}.",
                   pad_prim_func(name, in_shape, paddings, value), ["input"])


# ------------------------------------------------------------------ STRIDED_SLICE
def _slice_geometry(name: str, in_shape, start, stride, count):
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
    return (start, stride, count), shape4, count4, base, step


def strided_slice_prim_func(name: str, in_shape, start, stride, count) -> tirx.PrimFunc:
    """``(input, output int8)``: STRIDED_SLICE resolved per input axis (``start``, ``stride``,
    ``count``; :class:`~tvm_serenity.frontend.reference.StridedSliceParams`), ``output`` in
    row-major order, element ``(i_k)`` read at ``start_k + i_k * stride_k``."""
    _, shape4, count4, base, step = _slice_geometry(name, in_shape, start, stride, count)
    n_in, n_out = (int(np.prod(s, dtype=np.int64)) for s in (shape4, count4))

    def emit(x, y):
        with _nest("abc", count4[:3]) as (a, b, c):
            src = _let("src", base + a * step[0] + b * step[1] + c * step[2])
            dst = _let("dst", ((a * count4[1] + b) * count4[2] + c) * count4[3])
            _copy(y, dst, x, src, count4[3], step[3], "d")
    return prim_func(name, [("input", n_in, "int8"), ("output", n_out, "int8")], emit)


def strided_slice_kernel(name: str, in_shape, start, stride, count) -> OpKernel:
    """STRIDED_SLICE of a tensor of rank <= 4 resolved per axis as
    :class:`tvm_serenity.frontend.reference.StridedSliceParams` (``start``, ``stride``,
    ``count``; a shrunk axis is count 1), :func:`strided_slice_prim_func` as C."""
    (start, stride, count), *_ = _slice_geometry(name, in_shape, start, stride, count)
    func = strided_slice_prim_func(name, in_shape, start, stride, count)
    return op_kernel(name, f"STRIDED_SLICE: {list(in_shape)} from {start} by {stride}, {count} "
                   "elements per axis.", func, ["input"])


# ------------------------------------------------------------------ RESIZE_NEAREST_NEIGHBOR
def _resize_geometry(name: str, in_shape, out_hw):
    shape = tuple(int(d) for d in in_shape)
    if len(shape) != 4 or min(shape) < 1 or min(out_hw) < 1:
        raise CodegenError(f"{name}: RESIZE_NEAREST_NEIGHBOR of {list(shape)} to "
                           f"{list(out_hw)}: NHWC input and a non-empty size only")
    return shape, tuple(int(v) for v in out_hw)


def resize_nearest_prim_func(name: str, in_shape, out_hw) -> tirx.PrimFunc:
    """``(input, output int8, rows int32[out H], cols int32[out W])``: each output pixel a
    copy of the ``C`` bytes at ``rows[y] + cols[x]`` of its batch's input."""
    (n, h, w, c), (oh, ow) = _resize_geometry(name, in_shape, out_hw)

    def emit(x, y, rows, cols):
        with _nest(["b", "y"], [n, oh]) as (b, r):
            src = _row("src", x, b * (h * w * c) + rows[r])
            dst = _row("dst", y, (b * oh + r) * (ow * c))
            with _nest(["x"], [ow]) as (col,):
                _copy(dst, col * c, src, cols[col], c, name="k")
    return prim_func(name, [("input", n * h * w * c, "int8"), ("output", n * oh * ow * c, "int8"),
                            ("rows", oh, "int32"), ("cols", ow, "int32")], emit)


def resize_nearest_kernel(name: str, in_shape, out_hw) -> OpKernel:
    """RESIZE_NEAREST_NEIGHBOR of an NHWC int8 tensor, :func:`resize_nearest_prim_func` as
    C: ``rows`` holds the source row times ``W * C``, ``cols`` the source column times
    ``C``."""
    (n, _, _, c), (oh, ow) = _resize_geometry(name, in_shape, out_hw)
    func = resize_nearest_prim_func(name, in_shape, out_hw)
    return op_kernel(name, f"RESIZE_NEAREST_NEIGHBOR: {list(in_shape)} -> [{n}, {oh}, {ow}, "
                   f"{c}], pixel copies.", func, ["input", "rows", "cols"])


# ------------------------------------------------------------------ ARG_MAX
def arg_max_prim_func(name: str, outer: int, size: int, inner: int, dtype: str
                      ) -> tirx.PrimFunc:
    """ARG_MAX of an ``(outer, size, inner)`` view of an int8 or float32 tensor (module
    docstring): ``input`` holds its bytes, ``output`` the ``4 * outer * inner`` bytes of the
    int32 indices."""
    if min(outer, size, inner) < 1:
        raise CodegenError(f"{name}: empty ARG_MAX ({outer}x{size}x{inner})")
    if dtype not in ("int8", "float32"):
        raise CodegenError(f"{name}: ARG_MAX of {dtype} (int8 or float32 only)")
    width = 4 if dtype == "float32" else 1

    def emit(source, output):
        with ExitStack() as stack:
            o, j = (stack.enter_context(_loop(n, e)) if e > 1 else tirx.const(0, "int32")
                    for n, e in (("o", outer), ("j", inner)))
            best, value, index = (_local(n, dtype=t) for n, t in (
                ("best", dtype), ("v", dtype), ("index", "int32")))

            def load(target, k):
                if width == 4:
                    _extern("memcpy", tirx.address_of(target[0]),
                            tirx.address_of(source[4 * k]), _size(4))
                else:
                    _store(target, 0, source[k])
            load(best, o * (size * inner) + j)
            _store(index, 0, 0)
            with _loop("i", size - 1) as i:
                load(value, (o * size + i + 1) * inner + j)
                with T.If(value[0] > best[0]):
                    with T.Then():
                        _store(best, 0, value[0])
                        _store(index, 0, i + 1)
            _extern("memcpy", tirx.address_of(output[4 * (o * inner + j)]),
                    tirx.address_of(index[0]), _size(4))
    return prim_func(name, [("input", outer * size * inner * width, "int8"),
                            ("output", 4 * outer * inner, "int8")], emit)


def arg_max_kernel(name: str, outer: int, size: int, inner: int, dtype: str) -> OpKernel:
    """ARG_MAX (:func:`arg_max_prim_func`) as C."""
    return op_kernel(name, f"ARG_MAX {dtype}: {outer} x [{size}] x {inner} -> int32 "
                     "indices, the first maximum wins (TFLite reference_ops::ArgMinMax, "
                     "std::greater)", arg_max_prim_func(name, outer, size, inner, dtype),
                     ["input"])
