"""int8 TIR kernels generated per layer, for the RiP and the dual-buffer layout.

One generator, :func:`make_prim_func`, emits each kernel with TVM's TIR IRBuilder (the
machinery under TVMScript, driven directly from Python: ~10 ms per kernel instead of ~0.5 s of
TVMScript macro parsing) against two flat int8 buffers, ``input`` and ``output``.  The layout
is a parameter and changes only what those two buffers are:

* ``"dual"``: two buffer parameters.
* ``"rip"``: one parameter ``ws`` of ``S`` bytes; ``input`` is declared on it at element offset
  ``S - N_in`` and ``output`` at 0 (docs/rip.md).  A single buffer argument also keeps LLVM's
  alias analysis honest: input and output really overlap.

The loops are identical in both layouts, only base addresses differ, so RiP costs nothing at
run time.  Structure of the window kernels (conv2d, depthwise, pools), TinyEngine's::

    for oh, ow in row-major order:                     # output pixel q = oh*W_out + ow
        gather: for each tap (kh, kw), all C_in channels
            scratch[(kh*KW + kw)*C_in + c] = input[(ih*W_in + iw)*C_in + c] - input_zero_point
            (the padding value when (ih, iw) lies outside the input)
        compute: per output channel a dot product / max / sum over scratch, requantize
        write output[q*C_out + co]

Every read of ``input`` for pixel ``q`` happens in its gather, before its first write: exactly
the order that docs/rip.md's safety condition (and ``rip.simulate_rip``) assumes.  The scratch
holds ``x - input_zero_point`` as int16 (TinyEngine's q15 buffer), so padding taps are 0 and the
innermost loop is a bare multiply-accumulate ``acc += w * scratch`` with no offset, division or
modulo.  Bounds checks are per window row (``ih``) and per tap (``iw``), and are left out
entirely along an axis whose windows never leave the input (unpadded and pointwise layers).

Requantization is TFLite's ``MultiplyByQuantizedMultiplier`` with double rounding, written with
operations that are well defined in C (:func:`_emit_multiply_by_quantized_multiplier`).
"""

from __future__ import annotations

from contextlib import contextmanager

import tvm
from tvm import tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T

from .spec import CodegenError, LayerSpec, kernel_params


# ------------------------------------------------------------------ IRBuilder conveniences
@contextmanager
def _loop(name: str, extent: int):
    """``for (int32_t name = 0; name < extent; ++name)``; yields the loop variable."""
    with T.serial(0, extent) as var:
        IRBuilder.name(name, var)
        yield var


def _let(name: str, value, dtype: str = "int32"):
    """An immutable binding (a C local): ``dtype name = value;``."""
    return T.Bind(value, var=tirx.Var(name, dtype))


def _store(buffer, index, value):
    T.buffer_store(buffer, value, [index])


def _if_else(condition, then_body, else_body):
    with T.If(condition):
        with T.Then():
            then_body()
        with T.Else():
            else_body()


def _select(condition, if_true, if_false):
    """``condition ? if_true : if_false``, decided now when ``condition`` is a Python bool."""
    if isinstance(condition, bool):
        return if_true if condition else if_false
    return tirx.Select(condition, if_true, if_false)


def _cast(dtype: str, value):
    return tirx.Cast(dtype, value)


def _min(a, b):
    """``a < b ? a : b``.  Not TIR ``Min``: CodeGenC prints Min/Max operands as cached
    temporaries (``int32_t v_ = acc[0];``) and reuses them after a store to ``acc`` (checked
    on TVM 0.27: a max-pool reduction read a stale accumulator)."""
    return tirx.Select(a < b, a, b)


def _max(a, b):
    """``a > b ? a : b`` (see :func:`_min`)."""
    return tirx.Select(a > b, a, b)


UNROLL = 4


def _emit_reduce(acc, count: int, update):
    """``for t < count: acc[0] = update(acc[0], t)`` with the loop body unrolled ``UNROLL``
    times and the remainder straight-line: the innermost loop of every window kernel, so on a
    Cortex-M0+ (no hardware loops, 2-cycle taken branches) the loop overhead is amortized."""
    blocks, rest = divmod(count, UNROLL)
    if blocks:
        with _loop("t", blocks) as block:
            for u in range(UNROLL):
                _store(acc, 0, update(acc[0], block * UNROLL + u))
    for t in range(count - rest, count):
        _store(acc, 0, update(acc[0], t))


# ------------------------------------------------------------------ requantization
def _emit_multiply_by_quantized_multiplier(result, x, multiplier, shift):
    """``result[0] = MultiplyByQuantizedMultiplier(x, multiplier, shift)``: TFLite's int32
    rescale with double rounding, from operations that are well defined in C.

    ``multiplier``/``shift`` are int32 loads (per channel) or Python ints (folded).

    * ``x << max(shift, 0)`` is done on uint32, so it wraps like TFLite's ``x * (1 << s)``
      instead of being undefined for negative ``x``.
    * ``SaturatingRoundingDoublingHighMul(a, b)`` is ``(a*b + 2^30) >> 31`` on int64 with an
      arithmetic shift: for ``a*b < 0`` gemmlowp's nudge ``1 - 2^30`` followed by a division
      truncating toward zero gives the same floor, so no 64-bit division is needed (a slow
      libgcc call on Cortex-M0+).  Its saturating case ``a == b == INT32_MIN`` cannot occur:
      multipliers lie in ``[0, 2^31)`` (``QuantizeMultiplier``), a precondition of the kernels.
    * ``RoundingDivideByPOT(v, e)`` with ``mask = 2^e - 1`` formed on uint32 (``e <= 31``).
    """
    left = _let("left", _select(shift > 0, shift, 0))
    right = _let("right", _select(shift > 0, 0, -shift))
    shifted = _let("shifted", _cast("int32", _cast("uint32", x) << _cast("uint32", left)))
    product = _let("product", _cast("int64", shifted) * _cast("int64", multiplier), "int64")
    high = _let("high", _cast("int32", (product + tirx.const(1 << 30, "int64"))
                              >> tirx.const(31, "int64")))
    mask = _let("mask", _cast("int32", (tirx.const(1, "uint32") << _cast("uint32", right))
                              - tirx.const(1, "uint32")))
    round_up = (high & mask) > (mask >> 1) + tirx.Select(high < 0, 1, 0)
    _store(result, 0, (high >> right) + tirx.Select(round_up, 1, 0))


def _emit_store_clamped(output, index, value, low: int, high: int):
    """``output[index] = (int8) min(max(value, low), high)``."""
    v = _let("v", value)
    _store(output, index, _cast("int8", tirx.Select(v < low, low, tirx.Select(v > high, high, v))))


# ------------------------------------------------------------------ kernel bodies
def _emit_window_kernel(spec: LayerSpec, x, y, buffers: dict):
    """conv2d / depthwise_conv2d / max_pool2d / avg_pool2d over flat ``x`` and ``y``."""
    g = spec.geometry
    op = spec.op
    in_h, in_w, ch = g.in_hwc
    out_w, out_ch = g.out_width, g.out_channels
    kh_n, kw_n = g.kernel
    (sh, sw), (dh, dw) = g.stride, g.dilation
    pad_top, pad_left = g.padding[0], g.padding[2]
    taps, window = kh_n * kw_n, spec.window_elements
    scratch = buffers["scratch"]
    weighted = op in ("conv2d", "depthwise_conv2d")
    # scratch holds x + offset; padding taps hold `pad`, which adds nothing to any result
    offset = tirx.const(-spec.input_zero_point if weighted else 0, "int16")
    pad = tirx.const(-128 if op == "max_pool2d" else 0, "int16")

    acc = T.alloc_buffer((1,), "int32")
    IRBuilder.name("acc", acc)

    def fill_tap(tap):
        with _loop("c", ch) as c:
            _store(scratch, tap * ch + c, pad)

    def copy_tap(tap, pixel):
        with _loop("c", ch) as c:
            _store(scratch, tap * ch + c, _cast("int16", x[pixel * ch + c]) + offset)

    def gather_row(kh, ih, ow):
        with _loop("kw", kw_n) as kw:
            iw = _let("iw", ow * sw - pad_left + kw * dw)
            tap, pixel = kh * kw_n + kw, ih * in_w + iw
            if spec.pads_width:
                _if_else(tirx.all(iw >= 0, iw < in_w), lambda: copy_tap(tap, pixel),
                         lambda: fill_tap(tap))
            else:
                copy_tap(tap, pixel)

    def fill_row(kh):
        with _loop("kw", kw_n) as kw:
            fill_tap(kh * kw_n + kw)

    def gather(oh, ow):
        with _loop("kh", kh_n) as kh:
            ih = _let("ih", oh * sh - pad_top + kh * dh)
            if spec.pads_height:
                _if_else(tirx.all(ih >= 0, ih < in_h), lambda: gather_row(kh, ih, ow),
                         lambda: fill_row(kh))
            else:
                gather_row(kh, ih, ow)

    def requantize_store(index, channel):
        _emit_multiply_by_quantized_multiplier(acc, acc[0], buffers["multiplier"][channel],
                                               buffers["shift"][channel])
        _emit_store_clamped(y, index, acc[0] + spec.output_zero_point, spec.act_min,
                            spec.act_max)

    def conv(q):
        weight, bias = buffers["weight"], buffers["bias"]
        with _loop("co", out_ch) as co:
            _store(acc, 0, bias[co])
            row = _let("row", co * window)
            _emit_reduce(acc, window, lambda a, t: a + _cast("int32", weight[row + t])
                         * _cast("int32", scratch[t]))
            requantize_store(q * out_ch + co, co)

    def depthwise(q):
        weight, bias = buffers["weight"], buffers["bias"]
        with _loop("c", ch) as c:
            _store(acc, 0, bias[c])
            _emit_reduce(acc, taps, lambda a, t: a + _cast("int32", weight[t * ch + c])
                         * _cast("int32", scratch[t * ch + c]))
            requantize_store(q * ch + c, c)

    def max_pool(q):
        with _loop("c", ch) as c:
            _store(acc, 0, -128)
            _emit_reduce(acc, taps, lambda a, t: _max(_cast("int32", scratch[t * ch + c]), a))
            _emit_store_clamped(y, q * ch + c, acc[0], spec.act_min, spec.act_max)

    def avg_pool(q, oh, ow):
        def in_bounds(o, stride, pad_before, k, n):   # TFLite's filter_end - filter_start
            origin = o * stride - pad_before
            return _min(origin + k, n) - _max(origin, 0)

        count = _let("count", in_bounds(oh, sh, pad_top, kh_n, in_h)
                     * in_bounds(ow, sw, pad_left, kw_n, in_w))
        with _loop("c", ch) as c:
            _store(acc, 0, 0)
            _emit_reduce(acc, taps, lambda a, t: a + _cast("int32", scratch[t * ch + c]))
            s = acc[0]
            rounded = tirx.truncdiv(tirx.Select(s > 0, s + (count >> 1), s - (count >> 1)),
                                    count)               # TFLite: C division, half away
            _emit_store_clamped(y, q * ch + c, rounded, spec.act_min, spec.act_max)

    with _loop("oh", g.out_height) as oh:
        with _loop("ow", out_w) as ow:
            gather(oh, ow)
            q = _let("q", oh * out_w + ow)
            if op == "conv2d":
                conv(q)
            elif op == "depthwise_conv2d":
                depthwise(q)
            elif op == "max_pool2d":
                max_pool(q)
            else:
                avg_pool(q, oh, ow)


def _emit_add_kernel(spec: LayerSpec, x, y, buffers: dict):
    """TFLite int8 ADD (``AddElementwise``), same shapes; element ``i`` is read before it is
    written, so the output may overwrite input 1 (RiP workspace ``S = N``, offset 0)."""
    r = spec.add
    scale = 1 << r.left_shift
    input2 = buffers["input2"]
    a = T.alloc_buffer((1,), "int32")
    IRBuilder.name("a", a)
    b = T.alloc_buffer((1,), "int32")
    IRBuilder.name("b", b)
    with _loop("i", spec.input_bytes) as i:
        _emit_multiply_by_quantized_multiplier(
            a, (_cast("int32", x[i]) - spec.input_zero_point) * scale,
            r.input1_multiplier, r.input1_shift)
        _emit_multiply_by_quantized_multiplier(
            b, (_cast("int32", input2[i]) - r.input2_zero_point) * scale,
            r.input2_multiplier, r.input2_shift)
        _emit_multiply_by_quantized_multiplier(a, a[0] + b[0], r.output_multiplier,
                                               r.output_shift)
        _emit_store_clamped(y, i, a[0] + spec.output_zero_point, spec.act_min, spec.act_max)


def _view(workspace, name: str, elements: int, offset: int):
    buffer = T.decl_buffer((elements,), "int8", data=workspace.data, elem_offset=offset)
    IRBuilder.name(name, buffer)
    return buffer


def make_prim_func(spec: LayerSpec, layout: str = "rip", name: str | None = None
                   ) -> tirx.PrimFunc:
    """The TIR kernel of ``spec`` in ``layout``; its buffer parameters are exactly
    :func:`~.spec.kernel_params` (names, dtypes, flat sizes, order)."""
    if not isinstance(spec, LayerSpec):
        raise CodegenError(f"spec must be a LayerSpec, got {type(spec).__name__}")
    params = kernel_params(spec, layout)
    symbol = name or default_kernel_name(spec, layout)
    with IRBuilder() as builder:
        with T.prim_func():
            T.func_name(symbol)
            buffers = {p.name: T.arg(p.name, T.Buffer((p.elements,), p.dtype)) for p in params}
            if layout == "rip":
                x = _view(buffers["ws"], "input", spec.input_bytes, spec.rip_input_offset)
                y = _view(buffers["ws"], "output", spec.output_bytes, 0)
            else:
                x, y = buffers["input"], buffers["output"]
            (_emit_add_kernel if spec.op == "add" else _emit_window_kernel)(spec, x, y, buffers)
    return builder.get().with_attr("global_symbol", symbol)


def default_kernel_name(spec: LayerSpec, layout: str) -> str:
    """A descriptive C identifier, e.g. ``conv2d_3x3s2x2_16x16x8_to_16_rip``."""
    g = spec.geometry
    h, w, c = g.in_hwc
    return (f"{spec.op}_{g.kernel[0]}x{g.kernel[1]}s{g.stride[0]}x{g.stride[1]}"
            f"_{h}x{w}x{c}_to_{g.out_channels}_{layout}")


def build_llvm(spec: LayerSpec, layout: str = "rip", name: str | None = None):
    """``tvm.tirx.build`` of the kernel for the host (llvm); returns ``(module, symbol)``.

    Call ``module[symbol](*tensors)`` with one ``tvm.runtime.tensor`` per
    :func:`~.spec.kernel_params` entry (flat, of that dtype and size).
    """
    func = make_prim_func(spec, layout, name)
    symbol = str(func.attrs["global_symbol"])
    return tvm.tirx.build(func, target="llvm"), symbol
