"""Bit-exact numpy emulation of onnxruntime 1.32 (CPU EP, x86-64) on int8 QDQ models.

onnxruntime rewrites a QDQ model before running it (level-2 "QDQ" transformers: S8->U8
activation conversion, DQ->op->Q fusion into QLinear* / QGemm kernels, Relu/Clip removal into Q);
which op runs in integer and which in float depends on the graph (see
docs/onnxruntime_arithmetic.md). This file
therefore emulates the graph *as onnxruntime optimized it*: it saves the session's optimized
model (ORT_ENABLE_EXTENDED: same kernels as ORT_ENABLE_ALL minus the NHWC/NCHWc layout
rewrites, checked equal below) and interprets every node with numpy, using the arithmetic of the
onnxruntime kernel that runs it (float32 where the kernel uses float32, exact integers where it
uses integers). Outputs are compared bit for bit with InferenceSession.

Run: ``python -m benchmarks.ort_emulation [trials]`` (default 10 random models per case); the
findings are written up in docs/onnxruntime_arithmetic.md. A study of what onnxruntime computes,
the specification for reproducing it exactly; nothing in the package imports it.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections import Counter, defaultdict

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

f32 = np.float32
WORK = tempfile.mkdtemp(prefix="ort_emulation_")

# ----------------------------------------------------------------------------- primitives


def rne(v):
    """float32 -> int64, round half to even (cvtps2dq with the default MXCSR)."""
    return np.rint(np.asarray(v, f32)).astype(np.int64)


def qrange(dtype):
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def quantize_linear(x, scale, zp):
    """MlasQuantizeLinearKernel: x / scale (divps), clamp to [min-zp, max-zp] in float,
    cvtps2dq (half-even), + zp."""
    lo, hi = qrange(zp.dtype)
    z = int(zp.reshape(-1)[0])
    v = np.asarray(x, f32) / f32(scale.reshape(-1)[0])
    v = np.minimum(np.maximum(v, f32(lo - z)), f32(hi - z))
    return (rne(v) + z).astype(zp.dtype)


def dequantize_linear(q, scale, zp, axis=1):
    """DequantizeLinear CPU: float32(q - zp) * scale (one float32 rounding)."""
    q = np.asarray(q)
    scale = np.asarray(scale, f32)
    zp = np.zeros_like(scale, np.int64) if zp is None else np.asarray(zp).astype(np.int64)
    if scale.size > 1:
        shape = [1] * q.ndim
        shape[axis] = -1
        scale, zp = scale.reshape(shape), zp.reshape(shape)
    return (q.astype(np.int64) - zp).astype(f32) * scale


def requantize(acc, scale, zp, dtype, channel_axis=None):
    """MlasRequantizeOutput: float32(int32 acc + bias) * scale (mulps), clamp to
    [min-zp, max-zp], cvtps2dq (half-even), + zp."""
    lo, hi = qrange(dtype)
    scale = np.asarray(scale, f32)
    if scale.size > 1 and channel_axis is not None:
        shape = [1] * acc.ndim
        shape[channel_axis] = -1
        scale = scale.reshape(shape)
    v = acc.astype(np.int32).astype(f32) * scale
    v = np.minimum(np.maximum(v, f32(lo - zp)), f32(hi - zp))
    return (rne(v) + zp).astype(dtype)


def im2col_conv(x, w, strides, pads, dilations, group, dtype):
    """Direct NCHW conv, exact in int64 (dtype=int64) or float64 (dtype=float64)."""
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    xp = np.zeros((n, c, h + pads[0] + pads[2], wd + pads[1] + pads[3]), dtype)
    xp[:, :, pads[0]:pads[0] + h, pads[1]:pads[1] + wd] = x
    oh = (xp.shape[2] - (dilations[0] * (kh - 1) + 1)) // strides[0] + 1
    ow = (xp.shape[3] - (dilations[1] * (kw - 1) + 1)) // strides[1] + 1
    out = np.zeros((n, m, oh, ow), dtype)
    mg = m // group
    for g in range(group):
        xg = xp[:, g * cg:(g + 1) * cg]
        wg = w[g * mg:(g + 1) * mg].astype(dtype)
        for i in range(kh):
            for j in range(kw):
                patch = xg[:, :, i * dilations[0]:i * dilations[0] + strides[0] * oh:strides[0],
                           j * dilations[1]:j * dilations[1] + strides[1] * ow:strides[1]]
                out[:, g * mg:(g + 1) * mg] += np.einsum("nchw,mc->nmhw", patch, wg[:, :, i, j])
    return out


def attrs_of(node):
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def conv_geometry(node, x, w):
    a = attrs_of(node)
    pads = list(a.get("pads", [0] * 4))
    auto = a.get("auto_pad", b"NOTSET")
    if auto not in (b"NOTSET", "NOTSET", b"VALID"):
        raise NotImplementedError(f"auto_pad {auto}")
    return (list(a.get("strides", [1, 1])), pads, list(a.get("dilations", [1, 1])),
            int(a.get("group", 1)))


# ----------------------------------------------------------------------------- kernels

def k_qlinearconv(node, ins):
    """QLinearConv (onnxruntime/core/providers/cpu/quantization/qlinearconv.cc):
    int32 acc = sum (x - x_zp) * (w - w_zp) + bias; scale[c] = x_scale * w_scale[c] / y_scale
    in float32; MlasRequantizeOutput."""
    x, xs, xz, w, ws, wz, ys, yz = ins[:8]
    bias = ins[8] if len(ins) > 8 and ins[8] is not None else None
    a = attrs_of(node)
    channels_last = a.get("channels_last", 0)
    if channels_last:
        x = x.transpose(0, 3, 1, 2)
    strides, pads, dil, group = conv_geometry(node, x, w)
    # ORT enforces one weight zero point for all channels (qlinearconv.cc).
    acc = im2col_conv(x.astype(np.int64) - int(xz), w.astype(np.int64) - int(wz.reshape(-1)[0]),
                      strides, pads, dil, group, np.int64)
    if bias is not None:
        acc = acc + bias.astype(np.int64).reshape(1, -1, 1, 1)
    scale = (f32(xs) * np.asarray(ws, f32)) / f32(ys)
    y = requantize(acc, scale, int(yz), yz.dtype, channel_axis=1)
    return [y.transpose(0, 2, 3, 1) if channels_last else y]


def matmul_requant(a_int, b_int, bias, a_s, b_s, y_s, y_zp, per_col_axis):
    acc = a_int @ b_int
    if bias is not None:
        acc = acc + bias.astype(np.int64)
    scale = (f32(a_s) * np.asarray(b_s, f32)) / f32(y_s)
    return requantize(acc, scale, int(y_zp), y_zp.dtype, channel_axis=per_col_axis)


def k_qgemm(node, ins):
    """QGemm (contrib_ops/cpu/quantization/quant_gemm.cc): int32 A.B + C, scale =
    a_scale * b_scale / y_scale (float32), MLAS_QGEMM_REQUANT_OUTPUT_PROCESSOR."""
    A, As, Az, B, Bs, Bz, C, Ys, Yz = (ins + [None] * 9)[:9]
    a = attrs_of(node)
    if a.get("alpha", 1.0) != 1.0 or Ys is None:
        raise NotImplementedError("QGemm alpha != 1 or float output")
    Ai = A.astype(np.int64) - int(Az)
    Bz = Bz.astype(np.int64)
    Bi = B.astype(np.int64) - (Bz.reshape(-1, 1) if Bz.size > 1 and a.get("transB", 0) else Bz)
    if a.get("transA", 0):
        Ai = Ai.T
    if a.get("transB", 0):
        Bi = Bi.T
    return [matmul_requant(Ai, Bi, C, As, Bs, Ys, Yz, per_col_axis=-1)]


def k_qlinearmatmul(node, ins):
    """QLinearMatMul (core/providers/cpu/quantization/quantize_linear_matmul.cc): as QGemm
    without bias."""
    A, As, Az, B, Bs, Bz, Ys, Yz = ins
    return [matmul_requant(A.astype(np.int64) - int(Az), B.astype(np.int64) - Bz.astype(np.int64),
                           None, As, Bs, Ys, Yz, per_col_axis=-1)]


def k_qlgap(node, ins):
    """QLinearGlobalAveragePool (mlas qlgavgpool.cpp): acc = sum(x) - x_zp * N (int32),
    scale = x_scale / (y_scale * float(N)) float32, MlasRequantizeOutput."""
    x, xs, xz, ys, yz = ins
    cl = attrs_of(node).get("channels_last", 0)
    axes = tuple(range(1, x.ndim - 1)) if cl else tuple(range(2, x.ndim))
    count = int(np.prod([x.shape[i] for i in axes]))
    acc = x.astype(np.int64).sum(axis=axes, keepdims=True) - int(xz) * count
    scale = f32(xs) / (f32(ys) * f32(count))
    return [requantize(acc, scale, int(yz), yz.dtype)]


def k_qlavgpool(node, ins):
    """QLinearAveragePool (contrib_ops/cpu/quantization/qlinear_pool.cc): x -> float32
    x_scale * (x - x_zp); window sum in float32 in row-major (h, w) order; / count (float32);
    q = clamp(int(nearbyintf(y / y_scale + y_zp)))."""
    x, xs, xz, ys, yz = ins
    a = attrs_of(node)
    if a.get("channels_last", 0):
        raise NotImplementedError("channels_last QLinearAveragePool")
    k = a["kernel_shape"]
    s = a.get("strides", [1, 1])
    p = a.get("pads", [0, 0, 0, 0])
    include = a.get("count_include_pad", 0)
    if a.get("ceil_mode", 0):
        raise NotImplementedError("ceil_mode")
    xf = f32(xs) * (x.astype(np.int32) - int(xz)).astype(f32)
    n, c, h, w = x.shape
    if k == [h, w] and not any(p):
        return k_qlgap(node, ins)
    oh, ow = (h + p[0] + p[2] - k[0]) // s[0] + 1, (w + p[1] + p[3] - k[1]) // s[1] + 1
    y = np.empty((n, c, oh, ow), f32)
    for i in range(oh):
        hs, he = i * s[0] - p[0], min(i * s[0] - p[0] + k[0], h)
        hs = max(hs, 0)
        for j in range(ow):
            ws_, we = j * s[1] - p[1], min(j * s[1] - p[1] + k[1], w)
            ws_ = max(ws_, 0)
            acc = np.zeros((n, c), f32)
            for hh in range(hs, he):
                for ww in range(ws_, we):
                    acc = acc + xf[:, :, hh, ww]
            cnt = k[0] * k[1] if include else (he - hs) * (we - ws_)
            y[:, :, i, j] = acc / f32(cnt)
    lo, hi = qrange(yz.dtype)
    q = rne(y / f32(ys) + f32(int(yz)))
    return [np.clip(q, lo, hi).astype(yz.dtype)]


def lookup_requant(x, xs, xz, ys, yz):
    """Per-value table Q_y(DQ_x(v)) for the 256 input codes: float32 x_scale*(v-x_zp), then
    MlasQuantizeLinear with (y_scale, y_zp)."""
    return quantize_linear(dequantize_linear(x, xs, xz), ys, yz)


def k_qlconcat(node, ins):
    """QLinearConcat (contrib_ops/cpu/quantization/qlinear_concat.cc): inputs whose
    (scale, zp) equal the output's are copied, the others mapped through a 256-entry table
    Q_y(DQ_x(v))."""
    ys, yz = ins[0], ins[1]
    axis = attrs_of(node)["axis"]
    parts = []
    for i in range(2, len(ins), 3):
        x, xs, xz = ins[i:i + 3]
        same = f32(xs) == f32(ys) and int(xz) == int(yz)
        parts.append(x if same else lookup_requant(x, xs, xz, ys, yz))
    return [np.concatenate(parts, axis=axis)]


def k_qlsoftmax(node, ins):
    """QLinearSoftmax (contrib_ops/cpu/quantization/qlinear_softmax.cc), opset 13 path on the
    last axis: a float32 table exp((i - 255 + shift) * x_scale) in double -> float;
    per row vsum = sequential float32 sum of table[v + 255 - max]; y = nearbyintf(table*Y /
    vsum) + y_zp with Y = floor(1 / y_scale) (float32), clamped only above 255 (uint8)."""
    x, xs, xz, ys, yz = ins
    a = attrs_of(node)
    axis = a.get("axis", -1) % x.ndim
    D = x.shape[axis]
    is_signed = x.dtype == np.int8
    bit_shift = np.log(np.float64(np.finfo(f32).max) / D)
    bit_shift = max(0.0, bit_shift - 5) / np.float64(f32(xs))
    idx = np.arange(256, dtype=np.float64)
    table_by_i = np.exp((idx - 255 + bit_shift) * np.float64(f32(xs))).astype(f32)
    table = np.empty(256, f32)
    for i in range(256):
        table[((i - 128) & 0xFF) if is_signed else i] = table_by_i[i]
    Y = f32(np.floor(f32(1.0) / f32(ys)))
    xm = np.moveaxis(x, axis, -1)
    flat = xm.reshape(-1, D)
    out = np.empty_like(flat)
    for r in range(flat.shape[0]):
        row = flat[r].astype(np.int32)
        if is_signed:
            ids = ((127 - row.max()) + row) & 0xFF
        else:
            ids = row + 255 - row.max()
        vals = table[ids]
        vsum = f32(0)
        for v in vals:
            vsum = f32(vsum + v)
        q = rne((vals * Y) / vsum) + int(yz)
        if is_signed:
            out[r] = np.where(q > 255, 255, q).astype(np.int64).astype(np.int8)
        else:
            out[r] = np.minimum(q, 255).astype(np.uint8)
    return [np.moveaxis(out.reshape(xm.shape), -1, axis)]


def k_qlbinary(op):
    def run(node, ins):
        """QLinearAdd / QLinearMul (mlas qladd.cpp / qlmul.cpp): dequantize both, combine in
        float32, quantize with MlasQuantizeLinear-like rounding (see
        docs/onnxruntime_arithmetic.md)."""
        a, as_, az, b, bs, bz, cs, cz = ins
        if op == "add":
            ra, rb = f32(as_) / f32(cs), f32(bs) / f32(cs)
            bias = f32(int(cz)) - ra * f32(int(az)) - rb * f32(int(bz))
            v = (a.astype(f32) * ra + b.astype(f32) * rb) + bias
            lo, hi = qrange(cz.dtype)
            return [np.clip(rne(v), lo, hi).astype(cz.dtype)]
        va = (a.astype(np.int32) - int(az)).astype(f32)
        vb = (b.astype(np.int32) - int(bz)).astype(f32)
        v = va * vb * (f32(as_) * f32(bs) / f32(cs))
        lo, hi = qrange(cz.dtype)
        return [np.clip(rne(v) + int(cz), lo, hi).astype(cz.dtype)]
    return run


def k_qlsigmoid(node, ins):
    """QLinearSigmoid (qlinear_lookup_table.cc): 256-entry table Q_y(sigmoid(DQ_x(v)))."""
    x, xs, xz, ys, yz = ins
    xf = dequantize_linear(x, xs, xz)
    return [quantize_linear(f32(1) / (f32(1) + np.exp(-xf)), ys, yz)]


# float kernels ---------------------------------------------------------------

def k_conv_float(node, ins):
    """Float Conv (MLAS SGEMM / direct conv, FMA): emulated as the exact sum in float64 of the
    float32 operands, rounded once to float32 (MLAS's summation order differs: 1-2 ulp)."""
    x, w = ins[0], ins[1]
    b = ins[2] if len(ins) > 2 and ins[2] is not None else None
    strides, pads, dil, group = conv_geometry(node, x, w)
    y = im2col_conv(x.astype(np.float64), w.astype(np.float64), strides, pads, dil, group,
                    np.float64)
    if b is not None:
        y = y + b.astype(np.float64).reshape(1, -1, 1, 1)
    y = y.astype(f32)
    a = attrs_of(node)
    act = a.get("activation", b"")
    if act in (b"Relu", "Relu"):
        y = np.maximum(y, f32(0))
    elif act in (b"Clip", "Clip"):
        lo, hi = a["activation_params"]
        y = np.minimum(np.maximum(y, f32(lo)), f32(hi))
    elif act:
        raise NotImplementedError(f"FusedConv activation {act}")
    return [y]


def k_gemm_float(node, ins):
    A, B = ins[0], ins[1]
    C = ins[2] if len(ins) > 2 else None
    a = attrs_of(node)
    A = A.T if a.get("transA", 0) else A
    B = B.T if a.get("transB", 0) else B
    y = A.astype(np.float64) @ B.astype(np.float64) * a.get("alpha", 1.0)
    if C is not None:
        y = y + a.get("beta", 1.0) * C.astype(np.float64)
    return [y.astype(f32)]


def k_maxpool(node, ins):
    x = ins[0]
    a = attrs_of(node)
    k, s = a["kernel_shape"], a.get("strides", [1, 1])
    p = a.get("pads", [0, 0, 0, 0])
    n, c, h, w = x.shape
    low = np.iinfo(x.dtype).min if x.dtype.kind in "iu" else -np.inf
    xp = np.full((n, c, h + p[0] + p[2], w + p[1] + p[3]), low, x.dtype)
    xp[:, :, p[0]:p[0] + h, p[1]:p[1] + w] = x
    oh, ow = (xp.shape[2] - k[0]) // s[0] + 1, (xp.shape[3] - k[1]) // s[1] + 1
    y = np.full((n, c, oh, ow), low, x.dtype)
    for i in range(k[0]):
        for j in range(k[1]):
            y = np.maximum(y, xp[:, :, i:i + s[0] * oh:s[0], j:j + s[1] * ow:s[1]])
    return [y]


def k_avgpool_float(node, ins):
    """Float AveragePool (MLAS pooling): float64 window mean rounded to float32."""
    x = ins[0].astype(np.float64)
    a = attrs_of(node)
    k, s = a["kernel_shape"], a.get("strides", [1, 1])
    p = a.get("pads", [0, 0, 0, 0])
    include = a.get("count_include_pad", 0)
    n, c, h, w = x.shape
    xp = np.zeros((n, c, h + p[0] + p[2], w + p[1] + p[3]))
    ones = np.zeros(xp.shape[2:])
    xp[:, :, p[0]:p[0] + h, p[1]:p[1] + w] = x
    ones[p[0]:p[0] + h, p[1]:p[1] + w] = 1
    oh, ow = (xp.shape[2] - k[0]) // s[0] + 1, (xp.shape[3] - k[1]) // s[1] + 1
    y, cnt = np.zeros((n, c, oh, ow)), np.zeros((oh, ow))
    for i in range(k[0]):
        for j in range(k[1]):
            y += xp[:, :, i:i + s[0] * oh:s[0], j:j + s[1] * ow:s[1]]
            cnt += ones[i:i + s[0] * oh:s[0], j:j + s[1] * ow:s[1]]
    return [(y / (k[0] * k[1] if include else cnt)).astype(f32)]


def k_softmax_float(node, ins):
    x = ins[0].astype(np.float64)
    axis = attrs_of(node).get("axis", -1)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return [(e / e.sum(axis=axis, keepdims=True)).astype(f32)]


def k_clip(node, ins):
    x = ins[0]
    lo = ins[1] if len(ins) > 1 and ins[1] is not None else None
    hi = ins[2] if len(ins) > 2 and ins[2] is not None else None
    if lo is not None:
        x = np.maximum(x, lo.astype(x.dtype))
    if hi is not None:
        x = np.minimum(x, hi.astype(x.dtype))
    return [x]


def k_flatten(node, ins):
    axis = attrs_of(node).get("axis", 1)
    x = ins[0]
    return [x.reshape(int(np.prod(x.shape[:axis])), -1)]


def k_hardswish(node, ins):
    x = ins[0]
    return [(x * np.maximum(f32(0), np.minimum(f32(1), x * f32(1 / 6) + f32(0.5)))).astype(f32)]


KERNELS = {
    ("", "QuantizeLinear"): lambda n, i: [quantize_linear(i[0], i[1], i[2])],
    ("", "DequantizeLinear"): lambda n, i: [dequantize_linear(i[0], i[1], i[2] if len(i) > 2
                                                                else None,
                                                                attrs_of(n).get("axis", 1))],
    ("com.microsoft", "QLinearConv"): k_qlinearconv,
    ("", "QLinearConv"): k_qlinearconv,
    ("com.microsoft", "QGemm"): k_qgemm,
    ("", "QLinearMatMul"): k_qlinearmatmul,
    ("com.microsoft", "QLinearGlobalAveragePool"): k_qlgap,
    ("com.microsoft", "QLinearAveragePool"): k_qlavgpool,
    ("com.microsoft", "QLinearConcat"): k_qlconcat,
    ("com.microsoft", "QLinearSoftmax"): k_qlsoftmax,
    ("com.microsoft", "QLinearAdd"): k_qlbinary("add"),
    ("com.microsoft", "QLinearMul"): k_qlbinary("mul"),
    ("com.microsoft", "QLinearSigmoid"): k_qlsigmoid,
    ("", "MaxPool"): k_maxpool,
    ("", "Flatten"): k_flatten,
    ("", "Reshape"): lambda n, i: [i[0].reshape([d if d != 0 else i[0].shape[k]
                                                 for k, d in enumerate(i[1].tolist())])],
    ("", "Transpose"): lambda n, i: [i[0].transpose(attrs_of(n).get("perm"))],
    ("", "Conv"): k_conv_float,
    ("com.microsoft", "FusedConv"): k_conv_float,
    ("", "Gemm"): k_gemm_float,
    ("", "MatMul"): lambda n, i: [(i[0].astype(np.float64) @ i[1].astype(np.float64))
                                  .astype(f32)],
    ("", "Add"): lambda n, i: [(i[0] + i[1]).astype(i[0].dtype)],
    ("", "Mul"): lambda n, i: [(i[0] * i[1]).astype(i[0].dtype)],
    ("", "Relu"): lambda n, i: [np.maximum(i[0], i[0].dtype.type(0))],
    ("", "Clip"): k_clip,
    ("", "Concat"): lambda n, i: [np.concatenate(i, axis=attrs_of(n)["axis"])],
    ("", "AveragePool"): k_avgpool_float,
    ("", "GlobalAveragePool"): lambda n, i: [i[0].astype(np.float64).mean(axis=(2, 3),
                                                                          keepdims=True)
                                             .astype(f32)],
    ("", "Softmax"): k_softmax_float,
    ("", "Sigmoid"): lambda n, i: [(1 / (1 + np.exp(-i[0].astype(np.float64)))).astype(f32)],
    ("", "HardSwish"): k_hardswish,
    ("", "HardSigmoid"): lambda n, i: [np.minimum(np.maximum(
        f32(attrs_of(n).get("alpha", 0.2)) * i[0] + f32(attrs_of(n).get("beta", 0.5)), f32(0)),
        f32(1))],
}

INTEGER_KERNELS = {"QLinearConv", "QGemm", "QLinearMatMul", "QLinearGlobalAveragePool",
                   "QLinearAveragePool", "QLinearConcat", "QLinearSoftmax", "QLinearAdd",
                   "QLinearMul", "QLinearSigmoid"}
FLOAT_COMPUTE = {"Conv", "FusedConv", "Gemm", "MatMul", "Add", "Mul", "AveragePool",
                 "GlobalAveragePool", "Softmax", "Sigmoid", "HardSwish"}


# ----------------------------------------------------------------------------- sessions

def session(model_bytes, level, optimized_path=None, extra=None):
    so = ort.SessionOptions()
    so.graph_optimization_level = level
    so.log_severity_level = 3
    for k, v in (extra or {}).items():
        so.add_session_config_entry(k, v)
    if optimized_path:
        so.optimized_model_filepath = optimized_path
    return ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])


def optimized_graph(model_bytes, extra=None):
    fd, path = tempfile.mkstemp(suffix=".onnx", dir=WORK)
    os.close(fd)
    session(model_bytes, ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED, path, extra)
    model = onnx.load(path)
    os.remove(path)
    return model


def interpret(model, feeds):
    """Run the optimized graph ``model`` with numpy kernels; returns {name: value} and the
    kernel op types executed."""
    values = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    values.update(feeds)
    ops = []
    for node in model.graph.node:
        kernel = KERNELS.get((node.domain, node.op_type))
        if kernel is None:
            raise NotImplementedError(f"{node.domain}:{node.op_type}")
        ins = [values[n] if n else None for n in node.input]
        outs = kernel(node, ins)
        ops.append(node.op_type)
        for name, v in zip(node.output, outs):
            values[name] = v
    return values, ops


# ----------------------------------------------------------------------------- models

class Calib(CalibrationDataReader):
    def __init__(self, shapes, rng, stds, count=8):
        self.b = iter([{n: (rng.normal(size=s) * stds[n]).astype(f32) for n, s in shapes.items()}
                       for _ in range(count)])

    def get_next(self):
        return next(self.b, None)


def build_single(kind, rng):
    """A float single-operator (or tiny) ONNX graph; returns (model, input shapes)."""
    nodes, inits = [], []

    def const(name, v):
        inits.append(numpy_helper.from_array(np.asarray(v, f32), name))
        return name

    def node(op, ins, out, **kw):
        nodes.append(helper.make_node(op, ins, [out], name=out, **kw))
        return out

    c_in = int(rng.choice([3, 4, 8, 16]))
    hw = int(rng.choice([5, 8, 9]))
    inputs = {"x": [1, c_in, hw, hw]}
    wscale = float(np.exp(rng.uniform(-2, 1)))

    def conv(x, out, cin, cout, k=3, stride=1, group=1, bias=True):
        w = const(out + "_w", rng.normal(size=(cout, cin // group, k, k)) * wscale
                  / np.sqrt(cin // group * k * k))
        ins = [x, w] + ([const(out + "_b", rng.normal(size=cout) * wscale)] if bias else [])
        return node("Conv", ins, out, pads=[k // 2] * 4, strides=[stride] * 2, group=group)

    # ops that quantize_static leaves in float when fed by a graph input get a 1x1 conv first
    pre = "x"
    if kind in ("avgpool", "avgpool_pad", "gap", "maxpool", "concat", "relu", "clip", "reshape",
                "flatten", "transpose", "sigmoid", "hardswish"):
        pre = conv("x", "pre", c_in, c_in, k=1)

    if kind == "conv":
        y = conv("x", "y", c_in, int(rng.choice([4, 8, 16])), k=int(rng.choice([1, 3])),
                 stride=int(rng.choice([1, 2])))
    elif kind == "conv_nobias":
        y = conv("x", "y", c_in, 8, bias=False)
    elif kind == "conv_relu":
        y = node("Relu", [conv("x", "c", c_in, 8)], "y")
    elif kind == "conv_relu6":
        y = node("Clip", [conv("x", "c", c_in, 8), const("lo", 0.0), const("hi", 6.0)], "y")
    elif kind == "depthwise":
        y = conv("x", "y", c_in, c_in, group=c_in)
    elif kind == "grouped":
        c_in = 8
        inputs = {"x": [1, 8, hw, hw]}
        y = conv("x", "y", 8, 8, group=2)
    elif kind == "gemm":
        inputs = {"x": [int(rng.choice([1, 3])), 16]}
        y = node("Gemm", ["x", const("w", rng.normal(size=(10, 16)) * wscale / 4),
                          const("b", rng.normal(size=10) * wscale)], "y", transB=1)
    elif kind == "matmul":
        inputs = {"x": [int(rng.choice([1, 3])), 16]}
        y = node("MatMul", ["x", const("w", rng.normal(size=(16, 6)) * wscale / 4)], "y")
    elif kind == "add":
        inputs = {"x": [1, c_in, hw, hw], "x2": [1, c_in, hw, hw]}
        y = node("Add", ["x", "x2"], "y")
    elif kind == "mul":
        inputs = {"x": [1, c_in, hw, hw], "x2": [1, c_in, hw, hw]}
        y = node("Mul", ["x", "x2"], "y")
    elif kind == "avgpool":
        y = node("AveragePool", [pre], "y", kernel_shape=[2, 2], strides=[2, 2])
    elif kind == "avgpool_pad":
        y = node("AveragePool", [pre], "y", kernel_shape=[3, 3], strides=[1, 1],
                 pads=[1, 1, 1, 1], count_include_pad=int(rng.choice([0, 1])))
    elif kind == "gap":
        y = node("GlobalAveragePool", [pre], "y")
    elif kind == "maxpool":
        y = node("MaxPool", [pre], "y", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    elif kind == "concat":
        inputs = {"x": [1, c_in, hw, hw], "x2": [1, 4, hw, hw]}
        y = node("Concat", [pre, "x2"], "y", axis=1)
    elif kind == "relu":
        y = node("Relu", [pre], "y")
    elif kind == "clip":
        y = node("Clip", [pre, const("lo", 0.0), const("hi", 1.0)], "y")
    elif kind == "softmax":
        inputs = {"x": [int(rng.choice([1, 2])), int(rng.choice([5, 10, 40]))]}
        d = inputs["x"][1]
        mm = node("MatMul", ["x", const("w", rng.normal(size=(d, d)) * wscale / np.sqrt(d))], "mm")
        y = node("Softmax", [mm], "y", axis=1)
    elif kind == "reshape":
        y = node("Reshape", [pre, "shape"], "y")
        inits.append(numpy_helper.from_array(np.array([1, -1], np.int64), "shape"))
    elif kind == "flatten":
        y = node("Flatten", [pre], "y")
    elif kind == "transpose":
        y = node("Transpose", [pre], "y", perm=[0, 2, 3, 1])
    elif kind == "sigmoid":
        y = node("Sigmoid", [pre], "y")
    elif kind == "hardswish":
        y = node("HardSwish", [pre], "y")
    else:
        raise ValueError(kind)
    graph = helper.make_graph(
        nodes, kind,
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info(y, TensorProto.FLOAT, None)], inits)
    opset = 14 if kind == "hardswish" else 13
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model, inputs


def quantize(model, inputs, rng, symmetric):
    stds = {n: float(np.exp(rng.uniform(-2, 2))) for n in inputs}
    with tempfile.TemporaryDirectory(dir=WORK) as d:
        fp, qp = os.path.join(d, "f.onnx"), os.path.join(d, "q.onnx")
        onnx.save(model, fp)
        quantize_static(fp, qp, Calib(inputs, rng, stds), quant_format=QuantFormat.QDQ,
                        activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                        per_channel=True, extra_options={"ActivationSymmetric": symmetric})
        return onnx.load(qp), stds


def int8_behind(model, float_out, name):
    """The int8 codes behind a float output produced by DequantizeLinear(q, s, zp):
    rint(y / s) + zp is the exact inverse (|q - zp| <= 255)."""
    producers = {o: n for n in model.graph.node for o in n.output}
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    dq = producers[name]
    if dq.op_type != "DequantizeLinear":  # a float output: compare its bits
        return np.asarray(float_out, f32).view(np.int32).astype(np.int64)
    s = inits[dq.input[1]]
    zp = inits[dq.input[2]] if len(dq.input) > 2 and dq.input[2] else 0
    return (np.rint(float_out.astype(np.float64) / float(s)) + int(zp)).astype(np.int64)


# ----------------------------------------------------------------------------- checks

KINDS = ["conv", "conv_nobias", "conv_relu", "conv_relu6", "depthwise", "grouped", "gemm",
         "matmul", "add", "mul", "avgpool", "avgpool_pad", "gap", "maxpool", "concat", "relu",
         "clip", "softmax", "reshape", "flatten", "transpose", "sigmoid", "hardswish"]


def compare(qmodel, feeds, stats, key, extra=None):
    mb = qmodel.SerializeToString()
    opt = optimized_graph(mb, extra)
    names = [o.name for o in qmodel.graph.output]
    emu_vals, ops = interpret(opt, feeds)
    ref_all = session(mb, ort.GraphOptimizationLevel.ORT_ENABLE_ALL, extra=extra).run(names, feeds)
    ref_ext = session(mb, ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED, extra=extra).run(
        names, feeds)
    ref_off = session(mb, ort.GraphOptimizationLevel.ORT_DISABLE_ALL, extra=extra).run(
        names, feeds)
    s = stats[key]
    s["kernels"].update(o for o in ops if o not in ("QuantizeLinear", "DequantizeLinear"))
    for name, r_all, r_ext, r_off in zip(names, ref_all, ref_ext, ref_off):
        q_all = int8_behind(qmodel, r_all, name)
        q_emu = int8_behind(qmodel, emu_vals[name], name)
        q_off = int8_behind(qmodel, r_off, name)
        s["bytes"] += q_all.size
        s["emu_match"] += int(np.count_nonzero(q_all == q_emu))
        s["emu_maxdiff"] = max(s["emu_maxdiff"], int(np.abs(q_all - q_emu).max()))
        s["all_vs_ext_diff"] += int(np.count_nonzero(r_all != r_ext))
        s["all_vs_off_diff"] += int(np.count_nonzero(q_all != q_off))
        s["all_vs_off_maxdiff"] = max(s["all_vs_off_maxdiff"], int(np.abs(q_all - q_off).max()))
    return ops


def new_stats():
    return defaultdict(lambda: {"bytes": 0, "emu_match": 0, "emu_maxdiff": 0,
                                "all_vs_ext_diff": 0, "all_vs_off_diff": 0,
                                "all_vs_off_maxdiff": 0, "kernels": Counter()})


def report(stats, title):
    print(f"\n## {title}")
    print(f"{'case':28s} {'bytes':>8s} {'emu==ORT':>9s} {'maxd':>4s} {'ALL!=EXT':>8s} "
          f"{'ALL!=OFF':>8s} {'maxd':>4s}  kernels")
    for key, s in stats.items():
        pct = 100.0 * s["emu_match"] / max(s["bytes"], 1)
        ks = ",".join(f"{k}x{v}" for k, v in sorted(s["kernels"].items()))
        print(f"{key:28s} {s['bytes']:8d} {pct:8.4f}% {s['emu_maxdiff']:4d} "
              f"{s['all_vs_ext_diff']:8d} {s['all_vs_off_diff']:8d} {s['all_vs_off_maxdiff']:4d}"
              f"  {ks}")


def single_op_checks(trials, extra=None, title="single-operator QDQ models"):
    stats = new_stats()
    for kind in KINDS:
        for sym in (False, True):
            for t in range(trials):
                rng = np.random.default_rng([hash(kind) % 2**31, sym, t])
                model, inputs = build_single(kind, rng)
                qmodel, stds = quantize(model, inputs, rng, sym)
                feeds = {n: (rng.normal(size=s) * stds[n] * rng.uniform(0.5, 2)).astype(f32)
                         for n, s in inputs.items()}
                try:
                    compare(qmodel, feeds, stats, f"{kind}{'/sym' if sym else ''}", extra)
                except NotImplementedError as err:
                    stats[f"{kind}{'/sym' if sym else ''}"]["kernels"][f"UNSUPPORTED {err}"] += 1
    report(stats, title)
    return stats


def zoo_checks(trials, extra=None, title="tvm_serenity.zoo.onnx_cnns models"):
    from tvm_serenity.zoo import onnx_cnns
    stats = new_stats()
    for name, sym in onnx_cnns.VARIANTS + [("conv_stack", True)]:
        with tempfile.TemporaryDirectory(dir=WORK) as d:
            path = onnx_cnns.quantized(onnx_cnns.MODELS[name][0](), d, symmetric=sym)
            qmodel = onnx.load(path)
            for seed in range(trials):
                feeds = {i.name: a for i, a in zip(qmodel.graph.input,
                                                   onnx_cnns.model_inputs(path, seed))}
                compare(qmodel, feeds, stats, f"{name}{'/sym' if sym else ''}", extra)
    report(stats, title)
    return stats


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    single_op_checks(n)
    zoo_checks(n)
    zoo_checks(n, {"session.qdqisint8allowed": "1"}, "zoo models, session.qdqisint8allowed=1")
