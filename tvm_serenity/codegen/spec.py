"""What a generated int8 kernel computes, and its calling convention (the ABI).

A :class:`LayerSpec` fixes everything that is baked into a kernel at generation time: the
operator, its window geometry (a :class:`~tvm_serenity.rip.ConvGeometry`), the scalar
quantization (zero points, activation clamp, ADD's rescale factors) and, for the RiP layout,
the workspace size ``S``.  Per-channel arrays (weights, bias, multipliers, shifts) are *not*
baked: they are pointer parameters, so a graph emitter can keep them in flash as ``const``
tables and the kernel text stays independent of the trained values.

Layouts (docs/rip.md):

* ``"rip"``: one flat int8 workspace ``ws`` of ``S >= S*`` bytes.  The input is right-aligned
  (flat input element ``j`` at ``ws[S - N_in + j]``), the output is written left-aligned
  (element ``i`` at ``ws[i]``), pixels in row-major order.
* ``"dual"``: the same loops on a separate ``input`` and ``output`` buffer.

Parameter order (:func:`kernel_params`; every tensor is flat, NHWC, row-major):

====================  ==========================================================================
op                    parameters (``rip`` | ``dual``), then the rest
====================  ==========================================================================
conv2d                ``ws`` | ``input, output``; ``weight`` (int32, packed: see below),
                      ``bias``, ``multiplier``, ``shift`` (int32, ``C_out`` each), ``scratch``
depthwise_conv2d      as conv2d with ``weight`` int8 ``KH*KW*C`` (TFLite's ``1 x KH x KW x C``)
max/avg_pool2d        ``ws`` | ``input, output``; (``ort_pool``: ``table``, int32[256], the
                      bits of float32 values); ``scratch``
add                   ``ws`` (holds input 1, receives the output) | ``input, output``;
                      then ``input2`` (int8, same shape)
depthwise, ``output_  dual only: as depthwise_conv2d, ``output`` holding ``H_out*W_out*total``
slice``               channels (:meth:`LayerSpec.depthwise_slice`)
conv2d, ``partial``   dual only: ``input, acc`` (int32, ``H_out*W_out*C_out``), ``weight``
                      (packed as for conv2d), ``scratch``
depthwise, ``expand`` dual only: ``input`` (the expand conv's, ``H*W*C_e``), ``output``, the
                      depthwise ``weight, bias, multiplier, shift``, then the expand conv's
                      ``expand_weight`` (int8 ``C*C_e``, TFLite's OHWI of a 1x1),
                      ``expand_bias, expand_multiplier, expand_shift`` (int32, ``C`` each),
                      ``scratch`` (:meth:`LayerSpec.expand_depthwise`)
====================  ==========================================================================

With ``arithmetic="onnxruntime"`` a conv2d / depthwise_conv2d requantizes as onnxruntime's
QLinearConv (:func:`.kernels.ort_requantize`; ``multiplier`` and ``shift`` hold each channel's
float32 scale as ``M`` and ``E``, ``M * 2^-E``), and an avg_pool2d with ``ort_pool`` (an
:class:`OrtPool`) averages as onnxruntime's pools do, in float32. With ``right_shifts`` (TFLite's
arithmetic) every entry of ``shift`` is ``<= 0``, as for any scale below 1, and the kernel
shifts right only (:func:`.kernels.requantize`'s ``right_only``); the caller knows the table when
it generates the kernel (:mod:`.kernel_call` sets it from the layer's shifts).

A depthwise_conv2d with ``expand`` set (an :class:`ExpandConv`) is the fused node of the
expand-depthwise rewrite (:mod:`tvm_serenity.rewrite.patterns`): its geometry is the depthwise
layer's (input ``H x W x C``), its input is the 1x1 expand conv's (``H x W x C_e``), and for
each channel ``c`` the kernel computes the expand conv's output channel ``c`` (TFLite's
per-channel conv arithmetic, ``input_zero_point`` of the expand conv, its requantization and
clamp, ``+`` the depthwise input zero point, which is the expand output's) into the padded
one-channel plane, then the depthwise channel ``c`` from it exactly as the channel-wise
in-place kernel does from its copy of the input plane.

A conv2d with ``partial`` set (``"assign"`` or ``"accumulate"``, :meth:`LayerSpec.
conv2d_partial`) is one partial convolution of identity graph rewriting's channel-wise
partitioning (:mod:`tvm_serenity.rewrite`): the same gather and dot loops, and instead of
requantizing, ``acc = sum`` or ``acc += sum`` per output element (no bias: the requantize
after the last partial adds it).

conv2d weights are packed four output channels to a word (:func:`pack_conv2d_weight`): word
``b*K + k`` (``K = KH*KW*C_in``, ``k`` the flat OHWI index within a filter) holds the int8
weights ``k`` of output channels ``4b .. 4b+3`` in its bytes 0..3 (least significant first;
channels past ``C_out`` are zero), ``ceil(C_out/4)*K`` words.  The word is an integer, so the
layout does not depend on the target's endianness, and the kernel loads four weights with one
aligned 32-bit access.

``scratch`` is int32, :attr:`LayerSpec.scratch_elements` of them, caller-owned and reusable
between layers (the kernels never rely on its contents).  Pointers need their element type's
natural alignment (int32: 4 bytes); ``ws``, ``input`` and ``output`` are byte arrays and may
sit at any arena offset.  Conv/depthwise semantics are TFLite's per-channel int8 reference
kernels (``acc = bias + sum w * (x - input_zero_point)`` over in-bounds taps, then
``MultiplyByQuantizedMultiplier`` with double rounding, ``+ output_zero_point``, clamp to
``[act_min, act_max]``); pass a zero bias for a layer without one.

Kernel structure and RiP safety (the loops are in :mod:`.kernels`):

* **conv2d** (channel-mixing) gathers one output pixel's whole receptive field,
  ``x - input_zero_point`` as int32 (0 for a padding tap), into ``scratch`` before writing any
  of that pixel's ``C_out`` outputs: exactly docs/rip.md's per-pixel model, safe at ``S*``.
* **depthwise_conv2d, max_pool2d, avg_pool2d** (channel-wise) work one output *row* at a time:
  for each channel they gather that channel's ``KH`` input rows into ``scratch``, compute the
  row's outputs of that channel into a row buffer in ``scratch``, and only when every channel
  is done copy the row buffer to the output row.  This block order is safe whenever the
  per-pixel order is, i.e. at every ``S >= S*``.  Proof: let the row hold pixels
  ``q_a..q_b`` and put ``G = S - N_in``.  (1) Reads of a pixel ``q`` in the row happen after
  the writes of rows above, ``[0, q_a*C)``; it reads input elements ``>= Lmin(q)`` at
  addresses ``>= G + Lmin(q) >= q*C >= q_a*C`` (``D(q) = q*C - Lmin(q) <= G`` for ``q >= 1``;
  for ``q = 0`` nothing has been written), so no read finds an output.  (2) The row's own
  writes ``[q_a*C, (q_b+1)*C)`` happen after all of its reads, and every later pixel reads at
  addresses ``>= G + Lmin(q_b+1) >= (q_b+1)*C``.  Compared with the per-pixel order the reads
  move earlier and the writes do not move, so no new conflict can arise;
  ``rip.CorruptionSimulator(geometry, block_pixels=W_out)`` replays this order cell by cell.
* **depthwise_conv2d, channel-wise in place** (``inplace_kind == "channel"``: a workspace
  below RiP's ``S*``, e.g. the zero-gap ``S = max(N_in, N_out)`` that
  :func:`~tvm_serenity.rip.choose_inplace` gives every depthwise layer with a RiP gap): one
  channel at a time, the whole input plane of channel ``c`` is copied into an int8 channel
  buffer in ``scratch`` (its padding border holds the input zero point), then output channel
  ``c`` of every pixel is computed row by row with the gather and window loops above and
  written straight to the output.  Output element ``(j, c)`` only
  overwrites an input element of channel ``c`` (docs: :mod:`tvm_serenity.rip.workspace`), so
  it is safe at every ``S >= max(N_in, N_out)`` with ``S - N_in`` a multiple of ``C``;
  ``rip.ChannelSimulator`` replays it cell by cell.  The same loops run in the dual layout.
* **add** reads element ``i`` of both inputs before writing element ``i`` (``S = N``).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field

import numpy as np

from ..errors import SerenityError
from ..rip import (ConvGeometry, RipArgumentError, RipWorkspace, channel_buffer_bytes,
                   inplace_kind, rip_workspace_for_geometry)

OPS = ("conv2d", "depthwise_conv2d", "max_pool2d", "avg_pool2d", "add")
ARITHMETICS = ("tflite", "onnxruntime")
POOL_ORDERS = ("generic", "vector", "global")     # :func:`..frontend.ort_arithmetic.pool_order`
PARTIAL_MODES = ("assign", "accumulate")
PACK = 4                    # conv2d output channels per packed weight word
LAYOUTS = ("rip", "dual")
INT8_MIN, INT8_MAX = -128, 127
INT32_MAX = (1 << 31) - 1

_CTYPES = {"int8": "int8_t", "int32": "int32_t", "float32": "float"}


class CodegenError(SerenityError, ValueError):
    """A layer or layout the kernel generator cannot produce; the message says why."""


@dataclass(frozen=True)
class AddRescale:
    """TFLite int8 ADD's integer parameters (``CalculateOpDataAdd``, ``left_shift = 20``).

    Input 1's zero point and the output zero point / clamp live in the :class:`LayerSpec`.
    Every shift here is ``<= 0`` (TFLite's "smaller than one" multipliers).
    """

    input2_zero_point: int
    input1_multiplier: int
    input1_shift: int
    input2_multiplier: int
    input2_shift: int
    output_multiplier: int
    output_shift: int
    left_shift: int = 20

    def __post_init__(self):
        for name in self.__dataclass_fields__:
            object.__setattr__(self, name, _as_int(name, getattr(self, name)))
        for name in ("input1", "input2", "output"):
            multiplier = getattr(self, f"{name}_multiplier")
            shift = getattr(self, f"{name}_shift")
            if not 0 <= multiplier <= INT32_MAX or not -31 <= shift <= 0:
                raise CodegenError(f"ADD {name} rescale ({multiplier}, {shift}) is not a "
                                   "multiplier in [0, 2^31) with a shift in [-31, 0]")
        _check_int8("input2_zero_point", self.input2_zero_point)
        if not 0 <= self.left_shift <= 22:
            raise CodegenError(f"ADD left_shift {self.left_shift} overflows int32 "
                               "(int8 differences need left_shift <= 22)")


def _as_int(name: str, value) -> int:
    """``value`` as a Python int (numpy integers accepted; bools and floats rejected)."""
    if isinstance(value, bool):
        raise CodegenError(f"{name} must be an integer, got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise CodegenError(f"{name} must be an integer, got {value!r}") from None


def _check_int8(name: str, value: int):
    if not INT8_MIN <= value <= INT8_MAX:
        raise CodegenError(f"{name} must be an int8 value, got {value!r}")


def _axis_reads_padding(n_in: int, n_out: int, k: int, s: int, d: int, before: int) -> bool:
    """Whether some window tap along one axis falls outside ``[0, n_in)``."""
    return before > 0 or (n_out - 1) * s - before + (k - 1) * d > n_in - 1


@dataclass(frozen=True)
class KernelParam:
    """One parameter of a generated kernel, in ABI order."""

    name: str
    dtype: str          # "int8" | "int32" | "float32"
    elements: int
    writable: bool      # False: the C prototype declares it ``const``

    @property
    def ctype(self) -> str:
        return _CTYPES[self.dtype]

    @property
    def c_declaration(self) -> str:
        return f"{'' if self.writable else 'const '}{self.ctype} *{self.name}"


@dataclass(frozen=True)
class OrtPool:
    """An avg_pool2d with onnxruntime's arithmetic
    (:func:`~tvm_serenity.frontend.ort_arithmetic.average_pool`): the taps dequantized by the
    ``table`` parameter (int32[256]: the bits of the float32 values, which the kernel keeps in
    its int32 scratch and reads back by ``memcpy``, never through a float pointer into int32
    memory), summed in float32 in ``order``, divided by the tap
    count (the window's size with ``include_pad``), then QLinearAveragePool's rounding
    (``qlinear``: ``rne(y / scale + zero point)`` in float32, in the kernel's type, whose
    codes are the int8 ones plus ``offset``) or QuantizeLinear's."""

    qlinear: bool
    order: str
    include_pad: bool
    output_scale: float
    output_zero_point: int
    offset: int = 0

    def __post_init__(self):
        if self.order not in POOL_ORDERS:
            raise CodegenError(f"pool order must be one of {POOL_ORDERS}, got {self.order!r}")
        if not np.float32(self.output_scale) > 0:
            raise CodegenError(f"output scale {self.output_scale} must be positive")
        _check_int8("output_zero_point", _as_int("output_zero_point", self.output_zero_point))
        if self.offset not in (0, 128):
            raise CodegenError(f"offset {self.offset} is neither 0 (int8) nor 128 (uint8)")


@dataclass(frozen=True)
class ExpandConv:
    """The 1x1 expand conv fused into a depthwise kernel: its input channels, input zero point
    and activation clamp (its output zero point is the depthwise input zero point)."""

    in_channels: int
    input_zero_point: int = 0
    act_min: int = INT8_MIN
    act_max: int = INT8_MAX

    def __post_init__(self):
        for name in self.__dataclass_fields__:
            object.__setattr__(self, name, _as_int(f"expand {name}", getattr(self, name)))
        if self.in_channels < 1:
            raise CodegenError(f"expand in_channels must be positive, got {self.in_channels}")
        for name in ("input_zero_point", "act_min", "act_max"):
            _check_int8(f"expand {name}", getattr(self, name))
        if self.act_min > self.act_max:
            raise CodegenError(f"expand act_min {self.act_min} exceeds act_max {self.act_max}")


@dataclass(frozen=True)
class LayerSpec:
    """One int8 layer to generate a kernel for; build it with the classmethods."""

    op: str
    geometry: ConvGeometry
    input_zero_point: int = 0
    output_zero_point: int = 0
    act_min: int = INT8_MIN
    act_max: int = INT8_MAX
    add: AddRescale | None = None
    workspace_bytes: int | None = None      # RiP workspace S; None means the minimum S*
    partial: str | None = None              # conv2d only: "assign" / "accumulate" int32 sums
    output_slice: tuple[int, int] | None = None   # depthwise only: (first channel, channels)
    expand: ExpandConv | None = None        # depthwise only: the fused 1x1 expand conv
    input_row_pitch: int | None = None      # elements from one input row to the next; None:
    output_row_pitch: int | None = None     # W*C (contiguous). A patch's window of a tensor
    arithmetic: str = "tflite"              # conv / depthwise: "onnxruntime" requantizes as
    #                                         onnxruntime (multiplier, shift: its M, E)
    ort_pool: OrtPool | None = None         # avg_pool2d with onnxruntime's arithmetic
    right_shifts: bool = False              # conv / depthwise, TFLite's arithmetic: every
    #                                         shift of the layer is <= 0 (a scale below 1)
    rip: RipWorkspace = field(init=False, repr=False, compare=False)
    inplace_kind: str = field(init=False, repr=False, compare=False)   # "rip" or "channel"

    def __post_init__(self):
        g = self.geometry
        if self.op not in OPS:
            raise CodegenError(f"op must be one of {OPS}, got {self.op!r}")
        if not isinstance(g, ConvGeometry):
            raise CodegenError(f"geometry must be a ConvGeometry, got {type(g).__name__}")
        for name in ("input_zero_point", "output_zero_point", "act_min", "act_max"):
            object.__setattr__(self, name, _as_int(name, getattr(self, name)))
            _check_int8(name, getattr(self, name))
        if self.act_min > self.act_max:
            raise CodegenError(f"act_min {self.act_min} exceeds act_max {self.act_max}")
        channels = g.in_channels
        if self.op == "conv2d" and g.groups != 1:
            raise CodegenError(f"conv2d kernels are not grouped, got groups={g.groups} "
                               "(use depthwise_conv2d for groups == channels)")
        if self.op != "conv2d" and not (g.groups == channels == g.out_channels):
            raise CodegenError(f"{self.op} needs groups == in_channels == out_channels, got "
                               f"groups={g.groups}, {channels} -> {g.out_channels}")
        if self.op in ("max_pool2d", "avg_pool2d") and g.dilation != (1, 1):
            raise CodegenError(f"{self.op} has no dilation, got {g.dilation}")
        if self.op == "avg_pool2d" and self._has_empty_window():
            raise CodegenError("avg_pool2d: some window lies entirely in the padding "
                               "(TFLite divides by a zero tap count)")
        if self.op == "add":
            if self.add is None:
                raise CodegenError("add needs its AddRescale parameters")
            if g.kernel != (1, 1) or g.stride != (1, 1) or any(g.padding):
                raise CodegenError("add is elementwise: kernel 1, stride 1, no padding")
        elif self.add is not None:
            raise CodegenError(f"{self.op} takes no AddRescale")
        if self.output_slice is not None:
            first, total = (_as_int("output_slice", v) for v in self.output_slice)
            object.__setattr__(self, "output_slice", (first, total))
            if self.op != "depthwise_conv2d" or first < 0 \
                    or first + g.out_channels > total:
                raise CodegenError(f"output_slice {self.output_slice} must place the "
                                   f"{g.out_channels} channels of a depthwise_conv2d in a wider "
                                   f"output, got it on {self.op}")
        if self.arithmetic not in ARITHMETICS:
            raise CodegenError(f"arithmetic must be one of {ARITHMETICS}, got "
                               f"{self.arithmetic!r}")
        if self.ort_pool is not None:
            if self.op != "avg_pool2d" or not isinstance(self.ort_pool, OrtPool):
                raise CodegenError(f"ort_pool (an OrtPool) is for avg_pool2d, got it on "
                                   f"{self.op}")
            if self.ort_pool.order == "global" and (
                    g.kernel != (g.in_height, g.in_width) or g.stride != (1, 1)
                    or any(g.padding)):
                raise CodegenError("the global pool order sums a window that is the whole "
                                   "input (stride 1, no padding)")
        if self.right_shifts and (self.op not in ("conv2d", "depthwise_conv2d")
                                  or self.arithmetic != "tflite" or self.partial is not None):
            raise CodegenError(f"right_shifts is for the requantization of a conv2d or "
                               f"depthwise_conv2d in TFLite's arithmetic, got it on {self.op} "
                               f"({self.arithmetic}{', partial' if self.partial else ''})")
        if self.partial is not None and (self.op != "conv2d"
                                         or self.partial not in PARTIAL_MODES):
            raise CodegenError(f"partial must be one of {PARTIAL_MODES} on a conv2d, got "
                               f"{self.partial!r} on {self.op}")
        if self.expand is not None and (self.op != "depthwise_conv2d" or not isinstance(
                self.expand, ExpandConv) or self.output_slice is not None
                or self.workspace_bytes is not None):
            raise CodegenError("expand (an ExpandConv) fuses into a whole depthwise_conv2d "
                               f"run apart from its input, got it on {self.op}")
        for name, row in (("input_row_pitch", g.in_width * g.in_channels),
                          ("output_row_pitch", g.out_width * self._output_channels)):
            pitch = getattr(self, name)
            if pitch is None:
                continue
            pitch = _as_int(name, pitch)
            # a contiguous tensor's pitch is no pitch: one kernel either way
            object.__setattr__(self, name, None if pitch == row else pitch)
            if pitch == row:
                continue
            if pitch < row:
                raise CodegenError(f"{name} {pitch} is shorter than a row ({row} elements)")
            if self.op == "add" or self.partial is not None or self.expand is not None \
                    or self.output_slice is not None or self.workspace_bytes is not None:
                raise CodegenError(f"{name}: only a whole window layer run apart from its "
                                   "input reads or writes rows of a wider tensor")
        rip = rip_workspace_for_geometry(g)
        object.__setattr__(self, "rip", rip)
        kind = "rip"
        if self.workspace_bytes is not None:
            object.__setattr__(self, "workspace_bytes",
                               _as_int("workspace_bytes", self.workspace_bytes))
            try:
                kind = inplace_kind(self.op, g, self.workspace_bytes)
            except RipArgumentError as error:
                raise CodegenError(str(error)) from None
        object.__setattr__(self, "inplace_kind", kind)

    def _has_empty_window(self) -> bool:
        g = self.geometry
        for n_in, n_out, k, s, before in ((g.in_height, g.out_height, g.kernel[0], g.stride[0],
                                           g.padding[0]),
                                          (g.in_width, g.out_width, g.kernel[1], g.stride[1],
                                           g.padding[2])):
            for x in range(n_out):
                if all(not 0 <= x * s - before + i < n_in for i in range(k)):
                    return True
        return False

    # ------------------------------------------------------------------ constructors
    @classmethod
    def conv2d(cls, in_hwc, out_channels, kernel, stride=1, dilation=1, padding=(0, 0, 0, 0),
               **quant) -> "LayerSpec":
        """int8 CONV_2D (OHWI weights); ``padding=(top, bottom, left, right)``; ``quant``:
        ``input_zero_point, output_zero_point, act_min, act_max, workspace_bytes``."""
        return cls("conv2d", _geometry(in_hwc, out_channels, kernel, stride, dilation,
                                       padding, 1), **quant)

    @classmethod
    def conv2d_partial(cls, in_hwc, out_channels, kernel, stride=1, dilation=1,
                       padding=(0, 0, 0, 0), *, input_zero_point: int = 0,
                       accumulate: bool = False) -> "LayerSpec":
        """The int32 partial sums of a CONV_2D over the input channels ``in_hwc`` supplies
        (``acc = sum``, or ``acc += sum`` with ``accumulate``): module docstring."""
        return cls("conv2d", _geometry(in_hwc, out_channels, kernel, stride, dilation,
                                       padding, 1), input_zero_point=input_zero_point,
                   partial="accumulate" if accumulate else "assign")

    @classmethod
    def depthwise_slice(cls, in_hwc, kernel, stride=1, dilation=1, padding=(0, 0, 0, 0), *,
                        first_channel: int, out_channels: int, **quant) -> "LayerSpec":
        """A DEPTHWISE_CONV_2D (multiplier 1) of the ``C`` channels ``in_hwc`` supplies, written
        into channels ``[first_channel, first_channel + C)`` of an output with ``out_channels``
        channels (kernel-wise partitioning: the other channels are not touched)."""
        channels = _channels(in_hwc)
        return cls("depthwise_conv2d", _geometry(in_hwc, channels, kernel, stride, dilation,
                                                 padding, channels),
                   output_slice=(first_channel, out_channels), **quant)

    @classmethod
    def expand_depthwise(cls, in_hwc, channels, kernel, stride=1, dilation=1,
                         padding=(0, 0, 0, 0), *, expand: ExpandConv, **quant) -> "LayerSpec":
        """A 1x1 conv ``in_hwc -> channels`` (``expand``) fused into the DEPTHWISE_CONV_2D
        (multiplier 1) that reads it: the expanded tensor is computed one channel at a time into
        the plane, never whole."""
        h, w, _ = _geometry(in_hwc, 1, 1, 1, 1, (0, 0, 0, 0), 1).in_hwc
        return cls("depthwise_conv2d", _geometry((h, w, channels), channels, kernel, stride,
                                                 dilation, padding, channels),
                   expand=expand, **quant)

    @classmethod
    def pointwise_conv2d(cls, in_hwc, out_channels, **quant) -> "LayerSpec":
        """1x1, stride 1, unpadded CONV_2D (the kernel has no bounds checks at all)."""
        return cls.conv2d(in_hwc, out_channels, 1, **quant)

    @classmethod
    def depthwise_conv2d(cls, in_hwc, kernel, stride=1, dilation=1, padding=(0, 0, 0, 0),
                         **quant) -> "LayerSpec":
        """int8 DEPTHWISE_CONV_2D with depth multiplier 1."""
        channels = _channels(in_hwc)
        return cls("depthwise_conv2d", _geometry(in_hwc, channels, kernel, stride, dilation,
                                                 padding, channels), **quant)

    @classmethod
    def max_pool2d(cls, in_hwc, kernel, stride=1, padding=(0, 0, 0, 0), **quant) -> "LayerSpec":
        """int8 MAX_POOL_2D (padding taps ignored; ``act_min/act_max`` clamp the result)."""
        return cls._pool("max_pool2d", in_hwc, kernel, stride, padding, quant)

    @classmethod
    def avg_pool2d(cls, in_hwc, kernel, stride=1, padding=(0, 0, 0, 0), **quant) -> "LayerSpec":
        """int8 AVERAGE_POOL_2D (sum of in-bounds taps / their count, rounded half away)."""
        return cls._pool("avg_pool2d", in_hwc, kernel, stride, padding, quant)

    @classmethod
    def _pool(cls, op, in_hwc, kernel, stride, padding, quant) -> "LayerSpec":
        channels = _channels(in_hwc)
        return cls(op, _geometry(in_hwc, channels, kernel, stride, 1, padding, channels),
                   **quant)

    @classmethod
    def elementwise_add(cls, hwc, rescale: AddRescale, **quant) -> "LayerSpec":
        """int8 ADD of two same-shape tensors; ``input_zero_point`` is input 1's."""
        channels = _channels(hwc)
        return cls("add", _geometry(hwc, channels, 1, 1, 1, (0, 0, 0, 0), channels),
                   add=rescale, **quant)

    # ------------------------------------------------------------------ derived sizes
    @property
    def _output_channels(self) -> int:
        return self.output_slice[1] if self.output_slice is not None \
            else self.geometry.out_channels

    @property
    def in_row_pitch(self) -> int:
        """Input elements from one row to the next (``W_in*C`` unless ``input_row_pitch``)."""
        g = self.geometry
        return self.input_row_pitch or g.in_width * g.in_channels

    @property
    def out_row_pitch(self) -> int:
        """Output elements from one row to the next (``W_out*C_out`` unless
        ``output_row_pitch``)."""
        return self.output_row_pitch or self.geometry.out_width * self._output_channels

    @property
    def input_bytes(self) -> int:
        g = self.geometry
        if self.expand is not None:
            return g.in_height * g.in_width * self.expand.in_channels
        return (g.in_height - 1) * self.in_row_pitch + g.in_width * g.in_channels

    @property
    def plane_per_channel(self) -> bool:
        """The kernel runs channel-major through a padded one-channel plane: the channel-wise
        in-place depthwise (a copy of the input channel) or the fused expand (its output
        channel)."""
        return self.inplace_kind == "channel" or self.expand is not None

    @property
    def output_bytes(self) -> int:
        g = self.geometry
        return (g.out_height - 1) * self.out_row_pitch + g.out_width * self._output_channels

    @property
    def rip_workspace_bytes(self) -> int:
        """``S`` of the RiP layout: ``workspace_bytes`` or the minimum ``S*``."""
        return self.workspace_bytes if self.workspace_bytes is not None \
            else self.rip.workspace_bytes

    @property
    def rip_input_offset(self) -> int:
        """Where the input starts in the RiP workspace: ``S - N_in``."""
        return self.rip_workspace_bytes - self.input_bytes

    @property
    def window_elements(self) -> int:
        """``KH*KW*C_in``: one pixel's receptive field (0 for ADD, which gathers nothing)."""
        g = self.geometry
        return 0 if self.op == "add" else g.kernel[0] * g.kernel[1] * g.in_channels

    @property
    def channel_blocks(self) -> int:
        """conv2d: ``ceil(C_out / 4)`` groups of output channels, one packed word each."""
        return -(-self.geometry.out_channels // PACK)

    @property
    def padded_width(self) -> int:
        """``pad_left + W_in + pad_right``: the columns of a channel-wise kernel's row buffer."""
        g = self.geometry
        return g.padding[2] + g.in_width + g.padding[3]

    @property
    def scratch_elements(self) -> int:
        """int32 elements of ``scratch`` (see :mod:`.kernels` for what each part holds).

        conv2d: the gathered window and ``4*ceil(C_out/4)`` accumulators; channel-wise ops:
        ``KH`` gathered input rows of one channel (``padded_width`` columns each), the
        channel's ``KH*KW`` weights (depthwise only) and the int8 output row
        (``W_out*C`` bytes), which the channel-wise in-place depthwise replaces by its int8
        channel buffer (:attr:`channel_buffer_bytes`), as does the fused expand; ADD: none."""
        g = self.geometry
        if self.op == "add":
            return 0
        if self.op == "conv2d":
            return self.window_elements + PACK * self.channel_blocks
        rows = self.padded_width * g.kernel[0]
        weights = g.kernel[0] * g.kernel[1] if self.op == "depthwise_conv2d" else 0
        if self.plane_per_channel:
            return rows + weights + -(-self.channel_buffer_bytes // 4)
        return rows + weights + -(-g.out_width * g.out_channels // 4)

    @property
    def channel_buffer_bytes(self) -> int:
        """The int8 padded input plane of the channel-wise in-place depthwise kernel and of the
        fused expand-depthwise kernel."""
        return channel_buffer_bytes(self.geometry)

    @property
    def scratch_bytes(self) -> int:
        """Size of the int32 ``scratch`` parameter in bytes."""
        return 4 * self.scratch_elements

    @property
    def weight_elements(self) -> int:
        """Elements of ``weight``: packed int32 words for conv2d, int8 for depthwise."""
        if self.op == "conv2d":
            return self.channel_blocks * self.window_elements
        return self.window_elements if self.op == "depthwise_conv2d" else 0

    @property
    def pads_height(self) -> bool:
        """Whether some window row falls outside the input (the kernel checks rows)."""
        g = self.geometry
        return _axis_reads_padding(g.in_height, g.out_height, g.kernel[0], g.stride[0],
                                   g.dilation[0], g.padding[0])

    @property
    def pads_width(self) -> bool:
        """Whether some window column falls outside the input (the kernel checks columns)."""
        g = self.geometry
        return _axis_reads_padding(g.in_width, g.out_width, g.kernel[1], g.stride[1],
                                   g.dilation[1], g.padding[2])


def _geometry(in_hwc, out_channels, kernel, stride, dilation, padding, groups) -> ConvGeometry:
    try:
        return ConvGeometry(in_hwc, out_channels, kernel, stride, dilation, padding, groups)
    except RipArgumentError as error:
        raise CodegenError(str(error)) from None


def _channels(in_hwc) -> int:
    """The validated channel count of ``(H, W, C)``."""
    return _geometry(in_hwc, 1, 1, 1, 1, (0, 0, 0, 0), 1).in_channels


def kernel_params(spec: LayerSpec, layout: str) -> tuple[KernelParam, ...]:
    """The kernel's parameters in ABI order (see the module docstring)."""
    if layout not in LAYOUTS:
        raise CodegenError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if spec.output_slice is not None and layout != "dual":
        raise CodegenError("a depthwise slice writes into a wider output: dual layout only")
    if spec.expand is not None and layout != "dual":
        raise CodegenError("a fused expand-depthwise reads its input for every channel: dual "
                           "layout only")
    if spec.partial is not None:
        if layout != "dual":
            raise CodegenError("a partial conv2d writes an int32 accumulator: dual layout only")
        return (KernelParam("input", "int8", spec.input_bytes, False),
                KernelParam("acc", "int32", spec.output_bytes, True),
                KernelParam("weight", "int32", spec.weight_elements, False),
                KernelParam("scratch", "int32", spec.scratch_elements, True))
    if layout == "rip":
        params = [KernelParam("ws", "int8", spec.rip_workspace_bytes, True)]
    else:
        params = [KernelParam("input", "int8", spec.input_bytes, False),
                  KernelParam("output", "int8", spec.output_bytes, True)]
    if spec.op == "add":
        return tuple(params + [KernelParam("input2", "int8", spec.input_bytes, False)])
    if spec.ort_pool is not None:
        params += [KernelParam("table", "int32", 256, False)]
    if spec.op in ("conv2d", "depthwise_conv2d"):
        channels = spec.geometry.out_channels
        params += [KernelParam("weight", "int32" if spec.op == "conv2d" else "int8",
                               spec.weight_elements, False),
                   KernelParam("bias", "int32", channels, False),
                   KernelParam("multiplier", "int32", channels, False),
                   KernelParam("shift", "int32", channels, False)]
    if spec.expand is not None:
        channels = spec.geometry.out_channels
        params += [KernelParam("expand_weight", "int8", channels * spec.expand.in_channels,
                               False)]
        params += [KernelParam(f"expand_{name}", "int32", channels, False)
                   for name in ("bias", "multiplier", "shift")]
    return tuple(params + [KernelParam("scratch", "int32", spec.scratch_elements, True)])


def pack_conv2d_weight(weight) -> np.ndarray:
    """TFLite's int8 OHWI conv2d filter as the kernels' packed int32 words (module docstring):
    ``ceil(O/4) * H*W*I`` words, four output channels per word, least significant byte first."""
    w = np.asarray(weight)
    if w.dtype != np.int8 or w.ndim < 2:
        raise CodegenError(f"conv2d weights must be an int8 O x ... array, got {w.dtype} "
                           f"{w.shape}")
    out_channels = w.shape[0]
    flat = w.reshape(out_channels, -1)
    blocks = -(-out_channels // PACK)
    padded = np.zeros((blocks * PACK, flat.shape[1]), np.uint8)
    padded[:out_channels] = flat.view(np.uint8)
    lanes = padded.reshape(blocks, PACK, -1).astype(np.uint32)
    words = sum(lanes[:, j] << np.uint32(8 * j) for j in range(PACK))
    return words.astype(np.uint32).view(np.int32).reshape(-1)
