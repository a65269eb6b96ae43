"""TIR kernels of the identity rewrites (:mod:`tvm_serenity.rewrite`), for Relax and for C.

Each kernel is one PrimFunc over the tensors in their own shapes (NHWC activations, HWIO
weights) with the **destination last**, so the same function serves ``R.call_tir`` (a fresh
destination) and ``R.call_tir_inplace`` (the destination is the last argument, written in
place):

* :func:`conv2d_partial_prim_func` (channel-wise partitioning): for every output element,
  ``s = sum over the taps inside the input and the channels c of x of
  (int32(x[0, ih, iw, c]) - z_in) * int32(w[kh, kw, c, o])`` -- a padding tap contributes 0,
  as in TFLite -- and ``acc[0, oh, ow, o] = s`` (first partial) or ``acc[...] += s``
  (``accumulate``: the later partials).  int32 wraps like the C kernels, so the partial sums add
  up to the whole convolution's accumulator exactly, in any order.  Each element of ``acc`` is
  read and written by its own iteration only: running in place is safe.
* :func:`depthwise_slice_prim_func` (kernel-wise partitioning): output channels
  ``[out_lo, out_lo + C*M)`` of a depthwise convolution (depth multiplier ``M``) whose input
  channels are exactly ``x``'s ``C``: ``y[0, oh, ow, out_lo + c*M + m] = clamp(MBQM(s + bias,
  multiplier, shift) + z_out)`` with :func:`.kernels.requantize` (TFLite's arithmetic, bit-exact
  with the reference) and the per-channel tables of the slice; the other channels of ``y`` are
  not touched, so the slices of one output fill it in place, in any order.
* :func:`accumulator_requantize_prim_func` (the end of channel-wise partitioning):
  ``y[0, oh, ow, o] = clamp(MBQM(acc[0, oh, ow, o] + bias[o], multiplier[o], shift[o]) +
  z_out)``, the convolution's own epilogue on the accumulated partial sums, with
  :func:`.kernels.requantize`.  It visits the elements in memory order and reads ``acc``'s
  element ``j`` (bytes ``4j .. 4j+3``) before it writes ``y``'s element ``j`` (byte ``j <= 4j``),
  so the int8 result may be written over the int32 accumulator it reads (both pointers at the
  same address: the C path's in-place requantize); under Relax it writes a fresh tensor.

The loops are plain (one multiply-accumulate per iteration): these kernels make the rewrites
run, bit-exact, under TVM on the host. When a rewritten model is deployed, the graph C emitter
lowers the last two to plain C (:func:`.plain_c.emit_c_function`); its partial convolutions
use the conv2d kernel's own gather and dot loops instead (:meth:`.spec.LayerSpec.
conv2d_partial`, in :mod:`.kernels`), which the MCU runs about twice as fast.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Sequence

from tvm import tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T

from .kernels import _cast, _let, _local, _loop, _store, _store_clamped, requantize

__all__ = ["conv2d_partial_prim_func", "depthwise_slice_prim_func",
           "accumulator_requantize_prim_func"]


def _taps(x, kernel, stride, dilation, padding, oh, ow, body):
    """``body(kh, kw, ih, iw)`` for every window tap of output pixel ``(oh, ow)`` that lies
    inside ``x`` (``padding`` = top, bottom, left, right)."""
    _, in_h, in_w, _ = (int(d) for d in x.shape)
    with _loop("kh", kernel[0]) as kh:
        ih = _let("ih", oh * stride[0] - padding[0] + kh * dilation[0])
        with _loop("kw", kernel[1]) as kw:
            iw = _let("iw", ow * stride[1] - padding[2] + kw * dilation[1])
            with T.If(tirx.all(ih >= 0, ih < in_h, iw >= 0, iw < in_w)):
                with T.Then():
                    body(kh, kw, ih, iw)


@contextmanager
def _prim_func(name: str, x_shape, w_shape):
    """A PrimFunc ``name`` being built: yields ``(builder, x, w)``, its int8 input and weight
    buffers (its first two parameters)."""
    with IRBuilder() as builder:
        with T.prim_func():
            T.func_name(name)
            x = T.arg("x", T.Buffer(tuple(x_shape), "int8"))
            w = T.arg("w", T.Buffer(tuple(w_shape), "int8"))
            yield builder, x, w


def conv2d_partial_prim_func(name: str, x_shape: Sequence[int], w_shape: Sequence[int],
                             out_shape: Sequence[int], stride, dilation, padding,
                             input_zero_point: int, accumulate: bool) -> tirx.PrimFunc:
    """``(x int8 NHWC, w int8 HWIO, acc int32 NHWC)``: ``acc = partial`` or ``acc += partial``
    (module docstring); ``padding`` is (top, bottom, left, right)."""
    kh_n, kw_n, cin, cout = (int(d) for d in w_shape)
    _, oh_n, ow_n, _ = (int(d) for d in out_shape)
    with _prim_func(name, x_shape, w_shape) as (builder, x, w):
        acc = T.arg("acc", T.Buffer(tuple(out_shape), "int32"))
        s = _local("s")
        with _loop("oh", oh_n) as oh, _loop("ow", ow_n) as ow, _loop("o", cout) as o:
            _store(s, 0, acc[0, oh, ow, o] if accumulate else tirx.const(0, "int32"))

            def tap(kh, kw, ih, iw):
                with _loop("c", cin) as c:
                    _store(s, 0, s[0] + (_cast("int32", x[0, ih, iw, c]) - input_zero_point)
                           * _cast("int32", w[kh, kw, c, o]))
            _taps(x, (kh_n, kw_n), stride, dilation, padding, oh, ow, tap)
            _store(acc, (0, oh, ow, o), s[0])
    return builder.get()


def depthwise_slice_prim_func(name: str, x_shape: Sequence[int], w_shape: Sequence[int],
                              out_shape: Sequence[int], out_lo: int, stride, dilation, padding,
                              input_zero_point: int, output_zero_point: int, act_min: int,
                              act_max: int) -> tirx.PrimFunc:
    """``(x int8, w int8 (KH, KW, 1, C*M), bias, multiplier, shift int32 (C*M,), y int8)``:
    channels ``[out_lo, out_lo + C*M)`` of ``y`` (module docstring)."""
    kh_n, kw_n, _, slice_channels = (int(d) for d in w_shape)
    cin = int(x_shape[3])
    mult = slice_channels // cin
    _, oh_n, ow_n, _ = (int(d) for d in out_shape)
    with _prim_func(name, x_shape, w_shape) as (builder, x, w):
        bias, multiplier, shift = (T.arg(n, T.Buffer((slice_channels,), "int32"))
                                   for n in ("bias", "multiplier", "shift"))
        y = T.arg("y", T.Buffer(tuple(out_shape), "int8"))
        s = _local("s")
        with _loop("oh", oh_n) as oh, _loop("ow", ow_n) as ow, _loop("k", slice_channels) as k:
            _store(s, 0, bias[k])
            c = k // mult if mult > 1 else k

            def tap(kh, kw, ih, iw):
                _store(s, 0, s[0] + (_cast("int32", x[0, ih, iw, c]) - input_zero_point)
                       * _cast("int32", w[kh, kw, 0, k]))
            _taps(x, (kh_n, kw_n), stride, dilation, padding, oh, ow, tap)
            value = requantize(s[0], multiplier[k], shift[k])
            _store_clamped(y, (0, oh, ow, out_lo + k), value + output_zero_point, act_min,
                           act_max)
    return builder.get()


def accumulator_requantize_prim_func(name: str, out_shape: Sequence[int],
                                     output_zero_point: int, act_min: int,
                                     act_max: int) -> tirx.PrimFunc:
    """``(acc int32 NHWC, bias, multiplier, shift int32 (C,), y int8 NHWC)``: ``y`` is ``acc``
    plus the bias, requantized per output channel and clamped (module docstring); safe with
    ``y`` written over ``acc`` (the same address)."""
    _, oh_n, ow_n, channels = (int(d) for d in out_shape)
    with IRBuilder() as builder:
        with T.prim_func():
            T.func_name(name)
            acc = T.arg("acc", T.Buffer(tuple(out_shape), "int32"))
            bias, multiplier, shift = (T.arg(n, T.Buffer((channels,), "int32"))
                                       for n in ("bias", "multiplier", "shift"))
            y = T.arg("y", T.Buffer(tuple(out_shape), "int8"))
            s = _local("s")
            with _loop("oh", oh_n) as oh, _loop("ow", ow_n) as ow, _loop("o", channels) as o:
                _store(s, 0, acc[0, oh, ow, o] + bias[o])
                value = requantize(s[0], multiplier[o], shift[o])
                _store_clamped(y, (0, oh, ow, o), value + output_zero_point, act_min, act_max)
    return builder.get()
