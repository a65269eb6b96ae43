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
run time.  In the dual layout a window kernel may also read its input out of, or write its
output rows into, a wider tensor (``spec.input_row_pitch`` / ``output_row_pitch``: elements
from one row to the next, a patch of :mod:`tvm_serenity.rewrite.patch`); only the row
strides of the indices change.

The kernels are shaped for the Cortex-M0+ (Pico) and GCC: no 64-bit arithmetic, no
division or data-dependent branch in the arithmetic, 32-bit loads with immediate offsets, and
inner loops whose live values (nearly) fit the eight low registers.  The multiply-accumulate
loops are not unrolled: on Thumb-1, GCC's scheduler spills the accumulators of an unrolled
body (measured in rp2040js: unrolling the conv2d dot loop twice costs 10% more cycles); the
gather and copy loops are, ``COPY_UNROLL`` times.  ``spec.py`` states the ABI and the RiP
safety argument of each structure.

**conv2d** (any window; pointwise is the 1x1 case), per output pixel ``q``::

    gather   scratch[k] = input[...] - input_zero_point    (int32; k over KH*KW*C_in, 0 for a
             padding tap; a window row that cannot reach the padding is one contiguous run)
    for each group b of four output channels:
        a0..a3 = 0; for k: w = weight[b*K + k]  (four packed int8 weights), x = scratch[k],
                           a_j += (int8)(w >> 8j) * x
        acc[4b + j] = a_j                            (int32, in scratch after the window)
    output[q*C_out + co] = clamp(MBQM(acc[co] + bias[co], multiplier[co], shift[co]) + zp_out)

One ``x`` load feeds four multiply-accumulates and one 32-bit load brings four weights
(register blocking over output channels).  Requantizing in a separate loop keeps the
requantization's temporaries out of the dot loop's registers.  Every write of pixel ``q``
comes after its whole gather.

**depthwise_conv2d, max_pool2d, avg_pool2d** (channel-wise), per output row ``oh``::

    for each channel c:
        rows[col*KH + kh] = input[ih, col - pad_left, c] + offset   (int32; ih = oh*s_h - pad_top
             + kh*d_h; the padding value for rows and columns outside the input)
        depthwise: wts[kw*KH + kh] = weight[kh, kw, c]
        for ow, ROW_BLOCK at a time: fold taps (kw, kh) of rows[(ow*s_w + kw*d_w)*KH + kh]
             -> rowbuf[ow*C + c]            (the adjacent outputs share each weight load)
    output row oh = rowbuf                 (after all channels: the row's only writes)

The column-major row buffer makes a window column ``KH`` consecutive words (without dilation
the whole window is ``KW*KH`` consecutive words, folded by one flat loop with the weights in
the same order), and padding is materialized (depthwise and average pooling pad with 0, i.e.
``x - zp`` of the zero point, max pooling with -128), so the window loops have no bounds
checks.  Gathering a channel's rows costs ``KH*W_in`` loads per ``W_out*KH*KW``
multiply-accumulates.

**depthwise_conv2d, channel-wise in place** (``spec.inplace_kind == "channel"``, docs in
:mod:`tvm_serenity.rip.workspace`): the same row gather and window loops, channel-major::

    plane border = zp_in                                  (int8, once per call)
    for each channel c:
        wts = weight[:, :, c];  plane interior = input[:, :, c]     (int8, the whole channel)
        for oh: rows[col*KH + kh] = plane[oh*s_h + kh*d_h, col] - zp_in    (a padded row of
                the plane: no bounds checks at all), then fold the windows as above
                -> output[oh, ow, c]              (straight into the workspace: no row buffer)

Every write of channel ``c`` lands on an input element of channel ``c``, which is already in
the plane.  Against the row order the extra work is one copy of the input into the plane.

**depthwise_conv2d with a fused 1x1 expand** (``spec.expand``, dual layout): the channel-wise
in-place structure above, whose plane interior is not a copy of the input but the expand
conv's output channel ``c``, computed pixel by pixel with the conv kernel's integer math::

    plane[pad_top + ih, pad_left + iw] = clamp(MBQM(expand_bias[c] + sum_k
        expand_weight[c*C_e + k] * (input[(ih*W + iw)*C_e + k] - zp_e), ...) + zp_in)

(``zp_in``, the depthwise input zero point, is the expand output's; the clamp is the expand
conv's activation).  Each expanded element is computed once: the same multiply-accumulates as
the two layers apart, and the expanded tensor never exists.

Requantization is TFLite's ``MultiplyByQuantizedMultiplier`` with double rounding
(:func:`requantize`), 32-bit only: its 64-bit product is assembled from 16-bit halves.  The
same expression is emitted inline in every kernel (these and those of :mod:`.layout_ops` and
:mod:`.elementwise_ops`); :func:`requantize_prim_func` wraps it alone, as the C function
``serenity_mbqm`` the tests check exhaustively on edge values and millions of random ones.

onnxruntime's arithmetic (``spec.arithmetic == "onnxruntime"``, operators of an ONNX QDQ
model, :mod:`tvm_serenity.frontend.ort_arithmetic` the specification) changes only the
epilogues of the same kernels: :func:`ort_requantize` (``MlasRequantizeOutput``'s float32
requantization computed exactly in 32-bit integers) in conv2d / depthwise_conv2d (and the
FULLY_CONNECTED / MEAN / MUL kernels of the other modules), and ``spec.ort_pool``'s float32
average pool (its rows hold float32 bit patterns, summed in MLAS's order). The float helpers
(:func:`rne_float`, :func:`quantize_linear`, :func:`fma32`, :func:`float32_const`) make
every float32 operation its own statement through a local array; the C is compiled as ISO C
(``-std=c99``: GCC contracts nothing; Clang only within one expression) and the targets'
float is soft float or SSE without FMA, so the IEEE operations run one by one in the
specification's order.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from functools import partial

import numpy as np
import tvm
from tvm import tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T

from .spec import PACK, CodegenError, LayerSpec, kernel_params
from tvm.s_tir import SBlock, SBlockRealize

COPY_UNROLL = 4     # copies of a gather / row-copy body per loop iteration
ROW_BLOCK = 3       # adjacent outputs one channel-wise window pass computes (sharing weights)
REQUANTIZE_SYMBOL = "serenity_mbqm"


# ------------------------------------------------------------------ IRBuilder conveniences
@contextmanager
def _loop(name: str, extent, start=0):
    """``for (int32_t name = start; name < extent; ++name)``; yields the loop variable."""
    with T.serial(start, extent) as var:
        IRBuilder.name(name, var)
        yield var


def _let(name: str, value, dtype: str = "int32"):
    """An immutable binding (a C local): ``dtype name = value;``."""
    return T.Bind(value, var=tirx.Var(name, dtype))


def _store(buffer, index, value):
    """``buffer[index] = value``; ``index`` one expression or a tuple (multi-dimensional)."""
    T.buffer_store(buffer, value, list(index) if isinstance(index, tuple) else [index])


def _local(name: str, elements: int = 1, dtype: str = "int32"):
    """A small array the C compiler keeps in registers (``int32_t name[n]``)."""
    buffer = T.alloc_buffer((elements,), dtype)
    IRBuilder.name(name, buffer)
    return buffer


def _extern(function: str, *args):
    """``function(args...);``, a C library call (``void *`` result dropped)."""
    T.evaluate(tirx.call_extern("handle", function, *args))


def _size(count: int):
    """A ``size_t`` argument: 64-bit, so the llvm build declares ``memcpy`` / ``memset`` as the
    host's C library defines them; in the C it is a constant the call converts (no 64-bit
    arithmetic)."""
    return tirx.const(count, "uint64")


def prim_func(symbol: str, params, emit) -> tirx.PrimFunc:
    """A PrimFunc ``symbol`` with flat buffer parameters ``params`` (``(name, elements,
    dtype)``, in ABI order) whose body is ``emit(*buffers)``, the buffers in that order: how
    every operator kernel of :mod:`.layout_ops` and :mod:`.elementwise_ops` is built."""
    with IRBuilder() as builder:
        with T.prim_func():
            T.func_name(symbol)
            emit(*[T.arg(name, T.Buffer((elements,), dtype)) for name, elements, dtype in params])
    return builder.get().with_attr("global_symbol", symbol)


#: TVM's ``OpPatternKind::kOpaque``: FuseOps fuses nothing into a call of such a PrimFunc.
OP_PATTERN_OPAQUE = 8
#: Parameter roles of :func:`relax_abi`.
ABI_ROLES = ("in", "out", "inout", "scratch")


def relax_abi(func: tirx.PrimFunc, roles, views) -> tirx.PrimFunc:
    """``func`` (flat buffer parameters in its C ABI order, as the MCU C calls it) as a PrimFunc
    Relax's ``R.call_tir`` calls, with the same body: one kernel, two calling conventions.

    Parameter ``k`` has role ``roles[k]``: ``"in"`` (an argument of the call), ``"out"`` (the
    call's result: moved to the end, as ``call_tir`` passes it), ``"inout"`` (stays in place:
    the buffer of ``call_tir_inplace``) or ``"scratch"`` (work memory: no parameter, an
    allocation of the function's own, which TVM's host runtime provides). ``views[k]``, a
    ``(shape, dtype)`` or None, declares the parameter as the Relax tensor it is passed (any
    shape, any dtype of the same bytes, e.g. a float32 tensor for an int8 byte buffer); the
    kernel's flat buffer is then a view of that tensor's data."""
    if len(roles) != len(func.params) or len(views) != len(func.params) \
            or any(r not in ABI_ROLES for r in roles):
        raise CodegenError(f"relax_abi: {len(func.params)} parameters, roles {list(roles)}")
    declared, views_first, heads, tails = [], [], [], []
    for k, (buffer, role, view) in enumerate(zip(func.params, roles, views)):
        if role == "scratch":
            declared.append(tirx.AllocBuffer(buffer))
            continue
        param = buffer
        if view is not None:
            shape, dtype = view
            param = tirx.decl_buffer(tuple(int(d) for d in shape), dtype,
                                     name=f"{buffer.name}_{k}")
            views_first.append(tirx.DeclBuffer(buffer, data=param.data))
        (tails if role == "out" else heads).append(param)
    # a root block, as TVM's own kernels have (Relax's analyses of call_tir callees need one);
    # opaque to FuseOps (TVM's kOpaque: the kernel is fused already, one operator each)
    body = SBlockRealize([], True, SBlock([], [], [], "root",
                                          tirx.SeqStmt([*views_first, *declared, func.body])))
    return tirx.PrimFunc(heads + tails, body, func.ret_type, func.attrs).with_attr(
        "op_pattern", OP_PATTERN_OPAQUE)


def float32_const(value: float):
    """The float32 ``value`` as an exact TIR constant for CodeGenC, which prints a float32
    constant with seven significant digits (``%e``), not exactly: a ``FloatImm`` when that
    print reads back exactly, else ``(float)M / 2^k`` (``M`` the 24-bit significand, one
    division by ``2^30`` at a time), an exact constant expression GCC and TVM fold exactly."""
    v = float(np.float32(value))
    if not math.isfinite(v):
        raise CodegenError(f"float32_const: {value} is not a finite float32")
    if float(np.float32(f"{v:e}")) == v:
        return tirx.FloatImm("float32", v)
    mantissa, exponent = math.frexp(v)
    m, k = int(mantissa * (1 << 24)), 24 - exponent              # v = m / 2^k, |m| < 2^24
    while m % 2 == 0 and k > 0:
        m, k = m // 2, k - 1
    expr = tirx.Cast("float32", tirx.const(m, "int32"))
    while k != 0:
        step = min(abs(k), 30)
        power = tirx.Cast("float32", tirx.const(1 << step, "int32"))
        expr = tirx.Div(expr, power) if k > 0 else tirx.Mul(expr, power)
        k -= step if k > 0 else -step
    return expr


def _memcpy(destination, source):
    """``memcpy(destination, source, 4)`` of two buffer elements' addresses."""
    _extern("memcpy", T.address_of(destination), T.address_of(source), _size(4))


def _f32(value: float):
    return tirx.FloatImm("float32", float(value))


def _if_else(condition, then_body, else_body):
    with T.If(condition):
        with T.Then():
            then_body()
        with T.Else():
            else_body()


def _cast(dtype: str, value):
    return tirx.Cast(dtype, value)


def _u32(value):
    return _cast("uint32", value)


def _min(a, b):
    """``a < b ? a : b``.  Not TIR ``Min``: CodeGenC prints Min/Max operands as cached
    temporaries (``int32_t v_ = acc[0];``) and reuses them after a store to ``acc`` (checked
    on TVM 0.27: a max-pool reduction read a stale accumulator)."""
    return tirx.Select(a < b, a, b)


def _max(a, b):
    """``a > b ? a : b`` (see :func:`_min`)."""
    return tirx.Select(a > b, a, b)


def _unrolled(name: str, count: int, copies: int, body):
    """``for t < count: body(t)`` with ``copies`` bodies per iteration and the remainder
    straight-line (a single block is straight-line too)."""
    blocks, rest = divmod(count, copies)
    if blocks == 1:
        for u in range(copies):
            body(u)
    elif blocks:
        with _loop(name, blocks) as block:
            for u in range(copies):
                body(block * copies + u)
    for t in range(count - rest, count):
        body(t)


# ------------------------------------------------------------------ requantization
def requantize(x, multiplier, shift, right_only: bool = False):
    """``MultiplyByQuantizedMultiplier(x, multiplier, shift)`` (TFLite, double rounding) in
    32-bit operations that are well defined in C; binds its temporaries as locals in the
    current frame and returns the result.  ``multiplier``/``shift`` are int32 expressions or
    Python ints (folded).  Preconditions: ``-2^31 < multiplier < 2^31`` (``QuantizeMultiplier``
    of a scale of either sign: MCUNet's first convolution has negative ones),
    ``-31 <= shift <= 30``, and ``shift <= 0`` with ``right_only`` (a caller that knows every
    shift of a layer when it generates the kernel: no left shift, three instructions fewer).

    * ``x << max(shift, 0)`` is done on uint32, so it wraps like TFLite's ``x * (1 << s)``.
    * ``SaturatingRoundingDoublingHighMul(a, m) = floor((a*m + 2^30) / 2^31)`` (gemmlowp's
      negative nudge followed by a truncating division gives the same floor; its saturating
      case needs ``m = INT32_MIN``).  With ``a = ah*2^16 + al``, ``m = mh*2^16 + ml``
      (``al, ml`` in ``[0, 2^16)``, ``ah``, ``mh`` signed in ``[-2^15, 2^15)``)::

          a*m + 2^30 = H*2^32 + u*2^16 + (ll mod 2^16)   with
          ll = al*ml                        in [0, 2^32)   (uint32)
          t  = ah*ml + (ll >> 16)           in [-2^31 + 2^15, 2^31 - 2^15)
          u  = al*mh + (t mod 2^16) + 2^14  in (-2^31 + 2^15, 2^31 - 2^14)
          H  = ah*mh + (t >> 16)            in [-2^30, 2^30)

      (``H = 2^30``, where ``2*H`` would overflow, needs ``ah = mh = -2^15`` and ``t >= 0``,
      so ``ml = 0``: ``m = INT32_MIN``), so the result is ``2*H + (u >> 15)``:
      four 32-bit multiplies and no 64-bit product (which costs a libgcc ``__aeabi_lmul`` call
      on a Cortex-M0+); by the ranges above no signed operation overflows and the one unsigned
      product cannot wrap (TVM's LLVM code marks unsigned multiplies ``nuw``: ``al*mh`` is a
      signed product, as ``mh`` may be negative).
    * ``RoundingDivideByPOT(v, e)`` with ``mask = 2^e - 1`` formed on uint32 (``e <= 31``);
      its comparison ``(v & mask) > (mask >> 1) + (v < 0)`` is read off the sign bit of the
      difference of the two sides (both lie in ``[0, 2^31)``).  The whole computation is
      branch-free: on a Cortex-M0+ each data-dependent branch costs a pipeline refill.
    """
    if isinstance(multiplier, int):     # its halves folded here: a negative one has no uint32
        m_parts = (tirx.const(multiplier & 0xFFFF, "uint32"),
                   tirx.const(multiplier >> 16, "int32"))
    else:
        m_parts = (_u32(multiplier) & tirx.const(0xFFFF, "uint32"),
                   _cast("int32", multiplier) >> 16)
    if isinstance(shift, int):
        left, right = max(shift, 0), max(-shift, 0)
    elif right_only:
        left, right = 0, _let("right", -shift)
    else:
        left = _let("left", shift & tirx.bitwise_not(shift >> 31))      # max(shift, 0)
        right = _let("right", left - shift)
    if isinstance(left, int) and not left:
        shifted = _let("shifted", x)
        x_low = _let("x_low", _u32(shifted & 0xFFFF), "uint32")
        x_high = _let("x_high", shifted >> 16)
    else:
        # x's bits shifted on uint32 (wrapping like TFLite's x * (1 << s)); int32 <-> uint32 by
        # reinterpreting (C: the same object read as its signed / unsigned type), which TVM's
        # simplifier does not fold into the arithmetic around it: its casts between int32 and
        # uint32 are unsound across the sign bit (an int8 -> int32 -> uint32 chain folded into
        # one LLVM zero-extends; an int32 cast of a uint32 bounded as non-negative)
        unshifted = tirx.reinterpret("uint32", _let("unshifted", x))
        bits = _let("bits", unshifted << _u32(left), "uint32")
        x_low = _let("x_low", bits & tirx.const(0xFFFF, "uint32"), "uint32")
        x_high = _let("x_high", tirx.reinterpret("int32", bits) >> 16)
    m_low = _let("m_low", m_parts[0], "uint32")
    m_high = _let("m_high", m_parts[1])
    low = _let("low", x_low * m_low, "uint32")
    t = _let("t", x_high * _cast("int32", m_low)
             + _cast("int32", low >> tirx.const(16, "uint32")))
    u = _let("u", _cast("int32", x_low) * m_high + (t & 0xFFFF) + (1 << 14))
    high = _let("high", (x_high * m_high + (t >> 16)) * 2 + (u >> 15))
    mask = _let("mask", _cast("int32", (tirx.const(1, "uint32") << _u32(right))
                              - tirx.const(1, "uint32")))
    # round up iff (high & mask) > (mask >> 1) + (high < 0): the sign of the difference
    threshold = (mask >> 1) - (high >> 31)
    round_up = _cast("int32", _u32(threshold - (high & mask)) >> tirx.const(31, "uint32"))
    return (high >> right) + round_up


def requantize_prim_func(name: str = REQUANTIZE_SYMBOL, right_only: bool = False
                         ) -> tirx.PrimFunc:
    """``int32 name(int32 x, int32 multiplier, int32 shift)`` returning :func:`requantize`
    (with ``right_only``): the expression every kernel inlines, alone
    (``plain_c.requantize_c_function``)."""
    with IRBuilder() as builder:
        with T.prim_func():
            T.func_name(name)
            x = T.arg("x", tirx.Var("x", "int32"))
            multiplier = T.arg("multiplier", tirx.Var("multiplier", "int32"))
            shift = T.arg("shift", tirx.Var("shift", "int32"))
            T.func_ret(tvm.ir.PrimType("int32"))
            T.Return(requantize(x, multiplier, shift, right_only))
    return builder.get().with_attr("global_symbol", name)


# ------------------------------------------------------------------ onnxruntime's arithmetic
def ort_requantize(acc, multiplier, shift):
    """onnxruntime's ``MlasRequantizeOutput`` of the int32 ``acc`` by the float32 scale
    ``multiplier * 2^-shift`` (``multiplier`` in ``[2^23, 2^24)``,
    :func:`~tvm_serenity.frontend.ort_arithmetic.scale_parts`): ``rne(float32(float32(acc) *
    scale))`` before the zero point, saturated at +-2^15 (the callers clamp to int8), in
    32-bit operations (:func:`~tvm_serenity.frontend.ort_arithmetic.requantize` is the int64
    specification). Branch-free, no 64-bit product:

    * ``|acc|`` (a uint32, so ``-2^31`` has one) is normalized to ``m = |acc| << z`` with its
      top bit set (``z`` by a five-step binary search) and rounded to 24 bits half to even:
      ``float32(acc) = am * 2^(8 - z + carry)``, ``am`` in ``[2^23, 2^24)``;
    * ``am * multiplier`` (``< 2^48``) is assembled from 12-bit halves as ``top * 2^24 + rest``
      and rounded half to even to 24 bits (drop 24 bits if ``top >= 2^23``, else 23): the
      float32 product ``q * 2^(t + 8 - z + carry)``;
    * ``rne(q * 2^-g)`` with ``g = shift - t - (8 - z + carry)``: ``g <= 8`` means
      ``|result| >= 2^15`` (saturated), ``g >= 25`` a result of 0 (``q <= 2^24``).
    """
    # every step goes through the local arrays: TVM's passes expand a let chain whose values
    # are read several times into an exponentially large expression
    w = _local("ort", 12)
    m = _local("ortm", 1, "uint32")
    Z, AM, CARRY, MID, LOW24, TOP, REST, Q, BIG, G, R, NEG = range(12)
    _store(w, NEG, _cast("int32", acc < 0))
    # |acc| without overflow: -(acc + 1) is an int32, the + 1 is done unsigned
    _store(m, 0, tirx.Select(acc < 0, _u32(-(acc + 1)) + tirx.const(1, "uint32"), _u32(acc)))
    _store(w, R, _cast("int32", m[0] != tirx.const(0, "uint32")))      # |acc| != 0
    _store(w, Z, 0)
    for bits in (16, 8, 4, 2, 1):
        small = _let(f"small{bits}", _cast("int32", (m[0] >> tirx.const(32 - bits, "uint32"))
                                           == tirx.const(0, "uint32")))
        _store(w, Z, w[Z] + small * bits)
        _store(m, 0, m[0] << _u32(small * bits))
    am0 = _let("am0", _cast("int32", m[0] >> tirx.const(8, "uint32")))
    low = _let("low8", _cast("int32", m[0] & tirx.const(0xFF, "uint32")))
    _store(w, AM, am0 + _cast("int32", tirx.any(low > 0x80, tirx.all(low == 0x80,
                                                                      (am0 & 1) == 1))))
    _store(w, CARRY, w[AM] >> 24)
    _store(w, AM, w[AM] >> w[CARRY])
    ah, al = _let("ah", w[AM] >> 12), _let("al", w[AM] & 0xFFF)
    mh, ml = _let("mh", multiplier >> 12), _let("ml", multiplier & 0xFFF)
    _store(w, MID, ah * ml + al * mh)
    _store(w, LOW24, ((w[MID] & 0xFFF) << 12) + al * ml)
    _store(w, TOP, ah * mh + (w[MID] >> 12) + (w[LOW24] >> 24))
    _store(w, REST, w[LOW24] & 0xFFFFFF)
    _store(w, BIG, w[TOP] >> 23)
    # round to 24 bits: drop 24 bits (the product has 48) or 23 (it has 47)
    _store(w, Q, tirx.Select(w[BIG] > 0, w[TOP], (w[TOP] << 1) | (w[REST] >> 23)))
    dropped = _let("dropped", tirx.Select(w[BIG] > 0, w[REST], w[REST] & 0x7FFFFF))
    half = _let("half", (1 << 22) << w[BIG])
    _store(w, Q, w[Q] + _cast("int32", tirx.any(dropped > half, tirx.all(
        dropped == half, (w[Q] & 1) == 1))))
    _store(w, G, shift - 31 - w[BIG] + w[Z] - w[CARRY])
    gs = _let("gs", tirx.Select(w[G] < 9, 9, tirx.Select(w[G] > 25, 25, w[G])))
    kept = _let("kept", w[Q] >> gs)
    remainder = _let("remainder", w[Q] & ((1 << gs) - 1))
    halfway = _let("halfway", 1 << (gs - 1))
    _store(w, R, w[R] * tirx.Select(w[G] < 9, 1 << 15, kept + _cast("int32", tirx.any(
        remainder > halfway, tirx.all(remainder == halfway, (kept & 1) == 1)))))
    return w[R] - 2 * w[NEG] * w[R]


def rne_float(v):
    """A float32 ``v`` (``|v| < 2^30``) rounded half to even to an int32, as ``cvtps2dq``
    does: truncated (C's conversion), then one step up or down by the exact remainder. The
    values go through local arrays (TVM expands a let read several times)."""
    value = _local("rne_value", 2, "float32")             # v, its fraction
    r = _local("rne")
    _store(value, 0, v)
    _store(r, 0, _cast("int32", value[0]))
    _store(value, 1, value[0] - _cast("float32", r[0]))
    f, odd = value[1], (r[0] & 1) == 1
    up = tirx.any(f > _f32(0.5), tirx.all(f == _f32(0.5), odd))
    down = tirx.any(f < _f32(-0.5), tirx.all(f == _f32(-0.5), odd))
    _store(r, 0, r[0] + _cast("int32", up) - _cast("int32", down))
    return r[0]


def quantize_linear(v, scale: float, zero_point: int, low: int = -128, high: int = 127):
    """onnxruntime's ``MlasQuantizeLinear`` of float32 ``v``: ``v / scale`` (a float32
    division), clamped to ``[low - zp, high - zp]`` (a NaN to ``low - zp``, as ``maxps``),
    :func:`rne_float`, plus ``zp``."""
    x = _local("quotient", 1, "float32")
    _store(x, 0, tirx.Div(v, float32_const(scale)))
    _store(x, 0, tirx.Select(x[0] > _f32(low - zero_point), x[0], _f32(low - zero_point)))
    _store(x, 0, tirx.Select(x[0] < _f32(high - zero_point), x[0], _f32(high - zero_point)))
    return rne_float(x[0]) + zero_point


def fma32(a, b, c):
    """``fmaf(a, b, c)`` of float32 values, exactly rounded, in float64 arithmetic (the
    targets have no float32 FMA; :func:`~tvm_serenity.frontend.ort_arithmetic.fma32`): the
    product is exact in float64, TwoSum gives the float64 sum's exact error, which decides
    the one case the float64 -> float32 rounding gets wrong (the sum is a float32 tie but the
    exact value is not). The steps go through a local array: TVM's simplifier must not
    cancel ``(s - p) - ...`` algebraically."""
    w = _local("fma", 6, "float64")
    _store(w, 0, _cast("float64", a) * _cast("float64", b))         # p, exact
    _store(w, 1, _cast("float64", c))
    _store(w, 2, w[0] + w[1])                                         # s
    _store(w, 3, w[2] - w[0])                                         # bb
    _store(w, 4, (w[0] - (w[2] - w[3])) + (w[1] - w[3]))              # err: s + err = p + c
    r = _let("fma_rounded", _cast("float32", w[2]), "float32")
    _store(w, 5, w[2] - _cast("float64", r))                          # d: s - r, exact
    other = _let("fma_other", _cast("float64", r) + (w[5] + w[5]), "float64")
    tie = tirx.all(w[5] != tirx.const(0.0, "float64"),
                   _cast("float64", _cast("float32", other)) == other)
    return tirx.Select(tirx.all(tie, w[4] * w[5] > tirx.const(0.0, "float64")),
                       _cast("float32", other), r)


def _store_clamped(output, index, value, low: int, high: int):
    """``output[index] = (int8) min(max(value, low), high)``."""
    v = _let("v", value)
    _store(output, index, _cast("int8", tirx.Select(v < low, low,
                                                    tirx.Select(v > high, high, v))))


def _copy_row(y, dst, rowbuf, count: int):
    """``y[dst + i] = rowbuf[i]`` for ``i < count`` (int8)."""
    _unrolled("i", count, COPY_UNROLL, lambda i: _store(y, dst + i, rowbuf[i]))


# ------------------------------------------------------------------ conv2d
def _emit_conv_kernel(spec: LayerSpec, x, y, buffers: dict):
    """conv2d over flat ``x`` and ``y`` (module docstring)."""
    g = spec.geometry
    in_h, in_w, cin = g.in_hwc
    out_w, cout = g.out_width, g.out_channels
    kh_n, kw_n = g.kernel
    (sh, sw), (dh, dw) = g.stride, g.dilation
    pad_top, pad_left = g.padding[0], g.padding[2]
    window, blocks = spec.window_elements, spec.channel_blocks
    scratch, weight = buffers["scratch"], buffers["weight"]
    zero_point = spec.input_zero_point
    row_len = kw_n * cin
    in_pitch, out_pitch = spec.in_row_pitch, spec.out_row_pitch

    def copy(dst, src, count):
        """scratch[dst + i] = input[src + i] - zp for i < count (one contiguous run)."""
        _unrolled("c", count, COPY_UNROLL, lambda i: _store(
            scratch, dst + i, _cast("int32", x[src + i]) - zero_point))

    def zero(dst, count):
        _unrolled("z", count, COPY_UNROLL, lambda i: _store(scratch, dst + i, 0))

    def gather_row(dst, ih, ow):
        iw0 = _let("iw0", ow * sw - pad_left)
        src = ih * in_pitch + iw0 * cin
        if dw == 1 and not spec.pads_width:        # the window row: one contiguous run
            copy(dst, src, row_len)
            return
        with _loop("kw", kw_n) as kw:
            tap_dst, tap_src = dst + kw * cin, src + kw * dw * cin
            if spec.pads_width:
                iw = _let("iw", iw0 + kw * dw)
                _if_else(tirx.all(iw >= 0, iw < in_w), lambda: copy(tap_dst, tap_src, cin),
                         lambda: zero(tap_dst, cin))
            else:
                copy(tap_dst, tap_src, cin)

    def gather(oh, ow):
        with _loop("kh", kh_n) as kh:
            ih = _let("ih", oh * sh - pad_top + kh * dh)
            dst = kh * row_len
            if spec.pads_height:
                _if_else(tirx.all(ih >= 0, ih < in_h), lambda: gather_row(dst, ih, ow),
                         lambda: zero(dst, row_len))
            else:
                gather_row(dst, ih, ow)

    acc = _local("acc", PACK)

    def dot(block):
        for j in range(PACK):
            _store(acc, j, 0)
        base = _let("base", block * window)
        with _loop("k", window) as k:
            w = _let("w", weight[base + k])
            xv = _let("xv", scratch[k])
            for j in range(PACK):
                _store(acc, j, acc[j] + _cast("int32", _cast("int8", w >> (8 * j))) * xv)
        for j in range(PACK):
            _store(scratch, window + block * PACK + j, acc[j])

    def epilogue(q, co):
        """Output ``co`` of pixel ``q`` (its first element at ``y[q]``) from its int32 sum:
        requantized, or (a partial) stored into / added to the accumulator."""
        total = scratch[window + co]
        if spec.partial is None:
            value = _requantizer(spec)(total + buffers["bias"][co], buffers["multiplier"][co],
                                       buffers["shift"][co])
            _store_clamped(y, q + co, value + spec.output_zero_point, spec.act_min,
                           spec.act_max)
        else:
            _store(y, q + co, y[q + co] + total if spec.partial == "accumulate" else total)

    with _loop("oh", g.out_height) as oh:
        with _loop("ow", out_w) as ow:
            gather(oh, ow)
            with _loop("b", blocks) as block:
                dot(block)
            q = _let("q", oh * out_pitch + ow * cout)
            with _loop("co", cout) as co:
                epilogue(q, co)


# ------------------------------------------------------------------ channel-wise ops
def _view(data, name: str, dtype: str, elements: int, offset: int):
    buffer = T.decl_buffer((elements,), dtype, data=data, elem_offset=offset)
    IRBuilder.name(name, buffer)
    return buffer


def _emit_channelwise_kernel(spec: LayerSpec, x, y, buffers: dict):
    """depthwise_conv2d / max_pool2d / avg_pool2d over flat ``x`` and ``y``: one output row at
    a time, or, channel-wise in place, one channel at a time (module docstring)."""
    g = spec.geometry
    op = spec.op
    in_h, in_w, ch = g.in_hwc
    out_w = g.out_width
    kh_n, kw_n = g.kernel
    (sh, sw), (dh, dw) = g.stride, g.dilation
    pad_top, pad_left = g.padding[0], g.padding[2]
    in_pitch, out_pitch = spec.in_row_pitch, spec.out_row_pitch
    cols = spec.padded_width
    depthwise = op == "depthwise_conv2d"
    channel_first = spec.plane_per_channel
    offset = -spec.input_zero_point if depthwise else 0
    ort = spec.ort_pool         # onnxruntime's average pool: the rows hold float32 bit patterns
    pad = -128 if op == "max_pool2d" else 0         # 0: also the bits of +0.0
    scratch = buffers["scratch"]
    rows_len = cols * kh_n
    weights_len = kh_n * kw_n if depthwise else 0
    rows = _view(scratch.data, "rows", "int32", rows_len, 0)

    def tap(value):
        """What the rows hold for an input value: its dequantized float32's bits
        (onnxruntime's pool), or it widened and shifted."""
        if ort:
            return buffers["table"][_cast("int32", value) + 128]
        return _cast("int32", value) + offset
    wts = _view(scratch.data, "wts", "int32", weights_len, rows_len) if depthwise else None
    tail = 4 * (rows_len + weights_len)
    if channel_first:       # the padded input plane of one channel, its border zp_in
        plane = _view(scratch.data, "plane", "int8", spec.channel_buffer_bytes, tail)
        border = _cast("int8", spec.input_zero_point)
        top_rows = pad_top * cols
        if top_rows:
            with _loop("p", top_rows) as p:
                _store(plane, p, border)
        bottom = (pad_top + in_h) * cols
        if spec.channel_buffer_bytes > bottom:
            with _loop("p", spec.channel_buffer_bytes, bottom) as p:
                _store(plane, p, border)
        if cols > in_w:
            with _loop("ih", in_h) as ih:
                row = _let("row", (pad_top + ih) * cols)
                for p in list(range(pad_left)) + list(range(pad_left + in_w, cols)):
                    _store(plane, row + p, border)
    else:
        rowbuf = _view(scratch.data, "rowbuf", "int8", out_w * ch, tail)

    def fill_columns(start, stop):
        if stop > start:
            with _loop("p", stop * kh_n, start * kh_n) as p:
                _store(rows, p, pad)

    if not channel_first:
        fill_columns(0, pad_left)                   # padding columns: once per call
        fill_columns(pad_left + in_w, cols)

    def load_weights(c):
        weight = buffers["weight"]
        with _loop("kw", kw_n) as kw:
            for kh in range(kh_n):
                _store(wts, kw * kh_n + kh, _cast("int32", weight[(kh * kw_n + kw) * ch + c]))

    def expand_plane(c):
        """plane interior = the fused expand conv's output channel ``c`` (int8)."""
        e = spec.expand
        cin = e.in_channels
        weight = buffers["expand_weight"]
        bias = _let("eb", buffers["expand_bias"][c])
        multiplier = _let("em", buffers["expand_multiplier"][c])
        shift = _let("es", buffers["expand_shift"][c])
        acc = _local("eacc")
        base = _let("ebase", c * cin)
        with _loop("ih", in_h) as ih:
            with _loop("iw", in_w) as iw:
                src = _let("src", (ih * in_w + iw) * cin)
                _store(acc, 0, bias)
                with _loop("k", cin) as k:
                    _store(acc, 0, acc[0] + _cast("int32", weight[base + k])
                           * (_cast("int32", x[src + k]) - e.input_zero_point))
                _store_clamped(plane, (pad_top + ih) * cols + pad_left + iw,
                               _requantizer(spec, expand=True)(acc[0], multiplier, shift)
                               + spec.input_zero_point, e.act_min, e.act_max)

    def load_plane(c):
        """plane interior = input channel ``c`` (int8), or the fused expand's channel."""
        if spec.expand is not None:
            expand_plane(c)
            return
        with _loop("ih", in_h) as ih:
            src = _let("src", ih * in_pitch + c)
            dst = _let("dst", (pad_top + ih) * cols + pad_left)
            _unrolled("iw", in_w, COPY_UNROLL, lambda iw: _store(plane, dst + iw,
                                                                 x[src + iw * ch]))

    def gather_channel(oh, c):
        if depthwise and not channel_first:
            load_weights(c)
        with _loop("kh", kh_n) as kh:
            ih = _let("ih", oh * sh - pad_top + kh * dh)
            if channel_first:                       # a whole padded row of the plane
                src = _let("src", (ih + pad_top) * cols)
                _unrolled("w", cols, COPY_UNROLL, lambda w: _store(
                    rows, kh + w * kh_n, tap(plane[src + w])))
                return
            dst = pad_left * kh_n + kh

            def copy():
                src = _let("src", ih * in_pitch + c)
                _unrolled("w", in_w, COPY_UNROLL, lambda w: _store(
                    rows, dst + w * kh_n, tap(x[src + w * ch])))

            def fill():
                _unrolled("w", in_w, COPY_UNROLL, lambda w: _store(rows, dst + w * kh_n, pad))

            if spec.pads_height:
                _if_else(tirx.all(ih >= 0, ih < in_h), copy, fill)
            else:
                copy()

    def fold(acc, outputs: int, first, tap):
        """Fold window tap ``tap`` (``kw*KH + kh``) of ``outputs`` adjacent outputs, the first
        one's tap at ``rows[first]``, into ``acc``."""
        if depthwise:
            w = _let("w", wts[tap])
        for i in range(outputs):
            value = rows[first + i * sw * kh_n]
            if depthwise:
                _store(acc, i, acc[i] + value * w)
            elif op == "max_pool2d":
                _store(acc, i, _max(value, acc[i]))
            else:
                _store(acc, i, acc[i] + value)

    def window(acc, outputs: int, ow):
        """Fold the windows of ``outputs`` adjacent outputs starting at ``ow`` into ``acc``.
        Without dilation a window is ``KW*KH`` consecutive words of ``rows``: one flat loop."""
        base = _let("base", ow * sw * kh_n)
        if dw == 1:
            with _loop("t", kh_n * kw_n) as t:
                fold(acc, outputs, base + t, t)
            return
        with _loop("kw", kw_n) as kw:
            column = _let("column", base + kw * dw * kh_n)
            for kh in range(kh_n):
                fold(acc, outputs, column + kh, kw * kh_n + kh)

    def avg_count(oh, ow):
        def in_bounds(o, stride, pad_before, k, n):      # TFLite's filter_end - filter_start
            origin = o * stride - pad_before
            return _min(origin + k, n) - _max(origin, 0)

        return _let("count", in_bounds(oh, sh, pad_top, kh_n, in_h)
                    * in_bounds(ow, sw, pad_left, kw_n, in_w))

    def ort_outputs(oh, c, ow, count: int):
        """onnxruntime's average of ``count`` adjacent outputs (:class:`~.spec.OrtPool`)."""
        acc = _local("acc", count, "float32")
        for i in range(count):
            _store(acc, i, _f32(0))
        _ort_window_sum(ort.order, rows, acc, count, ow * sw * kh_n, sw * kh_n, kh_n, kw_n)
        for i in range(count):
            n = kh_n * kw_n if ort.include_pad else avg_count(oh, ow + i)
            mean = _let("mean", tirx.Div(acc[i], _cast("float32", n)), "float32")
            if ort.qlinear:     # rne(y / scale + zero point) in float32, in the kernel's type
                z = ort.output_zero_point + ort.offset
                v = _let("scaled", tirx.Div(mean, float32_const(ort.output_scale))
                         + float32_const(z), "float32")
                low, high = ort.offset - 128, ort.offset + 127
                v = _let("clamped", tirx.Select(v < _f32(low), _f32(low), tirx.Select(
                    v > _f32(high), _f32(high), v)), "float32")
                value = rne_float(v) - ort.offset
            else:
                value = quantize_linear(mean, ort.output_scale, ort.output_zero_point)
            _store_clamped(rowbuf, (ow + i) * ch + c, value, spec.act_min, spec.act_max)

    def outputs(oh, c, ow, count: int, channel_quant):
        if ort:
            ort_outputs(oh, c, ow, count)
            return
        acc = _local("acc", count)
        for i in range(count):
            _store(acc, i, channel_quant["init"])
        window(acc, count, ow)
        for i in range(count):
            s = acc[i]
            if depthwise:
                value = _requantizer(spec)(s, channel_quant["multiplier"],
                                           channel_quant["shift"]) + spec.output_zero_point
            elif op == "avg_pool2d":                    # TFLite: C division, half away
                n = avg_count(oh, ow + i)
                value = tirx.truncdiv(tirx.Select(s > 0, s + (n >> 1), s - (n >> 1)), n)
            else:
                value = s
            if channel_first:                           # straight into the output
                _store_clamped(y, oh * out_pitch + (ow + i) * ch + c, value, spec.act_min,
                               spec.act_max)
            else:
                _store_clamped(rowbuf, (ow + i) * ch + c, value, spec.act_min, spec.act_max)

    def channel_quant(c):
        if ort:
            return {}
        if depthwise:
            return {"init": _let("b", buffers["bias"][c]),
                    "multiplier": _let("m", buffers["multiplier"][c]),
                    "shift": _let("s", buffers["shift"][c])}
        return {"init": -128 if op == "max_pool2d" else 0}

    def output_row(oh, c, quant):
        gather_channel(oh, c)
        groups, rest = divmod(out_w, ROW_BLOCK)
        if groups:
            with _loop("group", groups) as group:
                outputs(oh, c, group * ROW_BLOCK, ROW_BLOCK, quant)
        if rest:
            outputs(oh, c, out_w - rest, rest, quant)

    if channel_first:
        with _loop("c", ch) as c:
            load_weights(c)
            load_plane(c)
            quant = channel_quant(c)
            with _loop("oh", g.out_height) as oh:
                output_row(oh, c, quant)
        return
    with _loop("oh", g.out_height) as oh:
        with _loop("c", ch) as c:
            output_row(oh, c, channel_quant(c))
        if spec.output_slice is None:
            _copy_row(y, oh * out_pitch, rowbuf, out_w * ch)
        else:                               # this slice's channels of a wider output row
            first, total = spec.output_slice
            with _loop("ow", out_w) as ow:
                dst = _let("dst", oh * out_pitch + ow * total + first)
                _unrolled("k", ch, COPY_UNROLL, lambda k: _store(y, dst + k,
                                                                 rowbuf[ow * ch + k]))


def _ort_window_sum(order: str, rows, acc, count: int, first, step, kh_n: int, kw_n: int):
    """The float32 window sums of ``count`` adjacent outputs into ``acc`` in the order MLAS
    sums (:func:`~tvm_serenity.frontend.ort_arithmetic.pool_order`); output ``i``'s tap
    ``(kh, kw)`` is ``rows[first + i*step + kw*KH + kh]``, padding taps hold +0.0, which no
    float32 sum of dequantized values (never -0.0) changes. ``"generic"``: row by row;
    ``"vector"``: each column's rows, then the columns; ``"global"`` (one output, the window
    the whole input): four lanes over the window row by row, ``(l0 + l2) + (l1 + l3)``, then
    the taps past the last full four."""
    tap = _local("tap", 1, "float32")

    def at(i, kh, kw):
        """The float32 whose bits the int32 row buffer holds (``memcpy``: no type punning;
        the compilers make it a register move)."""
        _memcpy(tap[0], rows[first + i * step + kw * kh_n + kh])
        return tap[0]

    if order == "generic":
        with _loop("kh", kh_n) as kh:
            with _loop("kw", kw_n) as kw:
                for i in range(count):
                    _store(acc, i, acc[i] + at(i, kh, kw))
    elif order == "vector":
        column = _local("column", count, "float32")
        with _loop("kw", kw_n) as kw:
            for i in range(count):
                _store(column, i, _f32(0))
            with _loop("kh", kh_n) as kh:
                for i in range(count):
                    _store(column, i, column[i] + at(i, kh, kw))
            for i in range(count):
                _store(acc, i, acc[i] + column[i])
    else:
        lanes = _local("lanes", 4, "float32")
        for lane in range(4):
            _store(lanes, lane, _f32(0))
        taps = kh_n * kw_n
        body = taps // 4 * 4
        with _loop("kh", kh_n) as kh:
            with _loop("kw", kw_n) as kw:
                flat = _let("flat", kh * kw_n + kw)
                _store(lanes, flat & 3, lanes[flat & 3] + tirx.Select(
                    flat < body, at(0, kh, kw), _f32(0)))
        _store(acc, 0, (lanes[0] + lanes[2]) + (lanes[1] + lanes[3]))
        for flat in range(body, taps):
            _store(acc, 0, acc[0] + at(0, flat // kw_n, flat % kw_n))


def _requantizer(spec: LayerSpec, expand: bool = False):
    """The requantization of a convolution's accumulators (or of its fused ``expand``'s):
    TFLite's, right shifts only where ``spec.right_shifts`` says so, or onnxruntime's."""
    if spec.arithmetic == "onnxruntime":
        return ort_requantize
    return partial(requantize, right_only=spec.right_shifts and not expand)


# ------------------------------------------------------------------ add
def _emit_add_kernel(spec: LayerSpec, x, y, buffers: dict):
    """TFLite int8 ADD (``AddElementwise``), same shapes; element ``i`` is read before it is
    written, so the output may overwrite input 1 (RiP workspace ``S = N``, offset 0)."""
    r = spec.add
    scale = 1 << r.left_shift
    input2 = buffers["input2"]
    # the rescaled inputs go through a local array: TVM's passes expand a let chain that
    # feeds another requantization into an exponentially large expression
    rescaled = _local("rescaled", 2)
    with _loop("i", spec.input_bytes) as i:
        _store(rescaled, 0, requantize((_cast("int32", x[i]) - spec.input_zero_point) * scale,
                                       r.input1_multiplier, r.input1_shift))
        _store(rescaled, 1, requantize((_cast("int32", input2[i]) - r.input2_zero_point)
                                       * scale, r.input2_multiplier, r.input2_shift))
        _store_clamped(y, i, requantize(rescaled[0] + rescaled[1], r.output_multiplier,
                                        r.output_shift)
                       + spec.output_zero_point, spec.act_min, spec.act_max)


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
                ws = buffers["ws"].data
                x = _view(ws, "input", "int8", spec.input_bytes, spec.rip_input_offset)
                y = _view(ws, "output", "int8", spec.output_bytes, 0)
            else:
                x, y = buffers["input"], buffers.get("output", buffers.get("acc"))
            emit = {"add": _emit_add_kernel, "conv2d": _emit_conv_kernel}.get(
                spec.op, _emit_channelwise_kernel)
            emit(spec, x, y, buffers)
    return builder.get().with_attr("global_symbol", symbol)


def default_kernel_name(spec: LayerSpec, layout: str) -> str:
    """A descriptive C identifier, e.g. ``conv2d_3x3s2x2_16x16x8_to_16_rip``."""
    g = spec.geometry
    h, w, c = g.in_hwc
    pitched = "".join(f"_{side}rows{pitch}" for side, pitch in (
        ("in", spec.input_row_pitch), ("out", spec.output_row_pitch)) if pitch is not None)
    variant = (f"_into{spec.output_slice[0]}of{spec.output_slice[1]}" if spec.output_slice
               else f"_{spec.partial}" if spec.partial
               else f"_expand{spec.expand.in_channels}" if spec.expand
               else "_channelwise" if spec.inplace_kind == "channel" else "")
    ort = "_ort" if spec.arithmetic == "onnxruntime" or spec.ort_pool is not None else ""
    return (f"{spec.op}_{g.kernel[0]}x{g.kernel[1]}s{g.stride[0]}x{g.stride[1]}"
            f"_{h}x{w}x{c}_to_{g.out_channels}{variant}{pitched}{ort}_{layout}")


def build_llvm(spec: LayerSpec, layout: str = "rip", name: str | None = None):
    """``tvm.tirx.build`` of the kernel for the host (llvm); returns ``(module, symbol)``.

    Call ``module[symbol](*tensors)`` with one ``tvm.runtime.tensor`` per
    :func:`~.spec.kernel_params` entry (flat, of that dtype and size).
    """
    func = make_prim_func(spec, layout, name)
    symbol = str(func.attrs["global_symbol"])
    return tvm.tirx.build(func, target="llvm"), symbol
