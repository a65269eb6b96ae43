"""onnxruntime's arithmetic in the kernel family (the ``arithmetic="onnxruntime"`` options of
:mod:`tvm_serenity.codegen`): every kernel equals the specification,
:mod:`tvm_serenity.frontend.ort_arithmetic`, byte for byte, as the C the microcontroller runs
(built for the host with ``-Wall -Wextra -Werror``; built for the Cortex-M0+ too) and as TVM's
llvm build of the same PrimFunc, on seeded random cases (a bounded number of each kind) and on
the edge values of the 32-bit requantization and of the exact float32 FMA.
"""

from __future__ import annotations

import ctypes
import dataclasses
import random
import shutil
import subprocess
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pytest
import tvm

from test_codegen_kernels import cortex_m0plus_symbols, random_spec

from tvm_serenity.codegen import (LayerSpec, emit_c_kernel, kernel_params, make_prim_func,
                                  pack_conv2d_weight)
from tvm_serenity.codegen import elementwise_ops as ew
from tvm_serenity.codegen import kernels as K
from tvm_serenity.codegen import layout_ops as lo
from tvm_serenity.codegen.plain_c import emit_c_function
from tvm_serenity.codegen.spec import CodegenError, OrtPool
from tvm_serenity.frontend import ort_arithmetic as ort
from tvm_serenity.frontend import reference as ref

HOST_CC = shutil.which("gcc") or shutil.which("cc")
ARM_CC = shutil.which("arm-none-eabi-gcc")
f32 = np.float32


@dataclass
class Case:
    """One kernel: its C source (``c(symbol)``), its PrimFunc (``prim(symbol)``), its
    arguments in ABI order (numpy arrays; ``out`` indexes the output) and the expected
    output (the specification's)."""

    what: str
    c: Callable[[str], str]
    prim: Callable[[str], object]
    args: list
    out: int
    expected: np.ndarray
    output: Callable[[list], np.ndarray] | None = None    # the output of the args (RiP)

    def got(self, args) -> np.ndarray:
        if self.output is not None:
            return self.output(args)
        return np.asarray(args[self.out]).reshape(self.expected.shape)


def _vector(symbol_base: str, params, emit) -> Callable[[str], object]:
    return lambda symbol: K.prim_func(symbol, params, emit)


def _c_of(prim: Callable[[str], object]) -> Callable[[str], str]:
    return lambda symbol: emit_c_function(prim(symbol), symbol, storage="")


# ------------------------------------------------------------------ the building blocks
def requantize_case(rng, n: int = 4096) -> Case:
    """:func:`.kernels.ort_requantize` against float32 arithmetic itself (``rne(float32(
    float32(acc) * scale))``, saturated at 2^15), the edge accumulators included."""
    acc = np.concatenate([rng.integers(-2 ** 31, 2 ** 31, n // 4),
                          rng.integers(-2 ** 25, 2 ** 25, n // 4),
                          rng.integers(-3000, 3000, n - n // 2)]).astype(np.int32)
    edges = [0, 1, -1, -2 ** 31, 2 ** 31 - 1, 2 ** 24, 2 ** 24 + 1, -(2 ** 24) - 3,
             2 ** 24 + 2, 2 ** 25 + 6, 127, -128, 2 ** 31 - 64, -(2 ** 31) + 64]
    acc[:len(edges)] = edges
    scales = np.exp(rng.uniform(np.log(1e-9), np.log(60.0), n)).astype(f32)
    scales[:4] = [f32(2.0 ** -20), f32(0.5), f32(1.0 - 2 ** -24), f32(0.1)]
    parts = np.array([ort.scale_parts(s) for s in scales], np.int32)
    expected = np.clip(np.rint(acc.astype(f32) * scales).astype(np.float64), -2 ** 15,
                       2 ** 15).astype(np.int32)

    def emit(a, m, e, out):
        with K._loop("i", n) as i:
            K._store(out, i, K.ort_requantize(a[i], m[i], e[i]))
    prim = _vector("requant", [("acc", n, "int32"), ("m", n, "int32"), ("e", n, "int32"),
                               ("out", n, "int32")], emit)
    return Case("ort_requantize", _c_of(prim), prim,
                [acc, parts[:, 0].copy(), parts[:, 1].copy(), np.zeros(n, np.int32)], 3,
                expected)


def _ties(rng, n: int):
    """Operands whose float64 sum ``a * b + c`` lies exactly halfway between two float32
    values, with and without a remainder below it: the cases a float64 FMA rounds wrong."""
    a = rng.integers(-255, 256, n).astype(f32)
    b = rng.uniform(0.25, 4, n).astype(f32)
    p = a.astype(np.float64) * b.astype(np.float64)
    target = p.astype(f32).astype(np.float64)
    ulp = np.spacing(np.abs(target).astype(f32)).astype(np.float64)
    c = (target + ulp / 2 - p).astype(f32)           # sum close to a tie, often exactly on it
    return a, b, c


def fma_case(rng, n: int = 4096) -> Case:
    """:func:`.kernels.fma32` against :func:`.ort_arithmetic.fma32` (checked below against
    exact rational arithmetic), on random operands and near ties."""
    a, b, c = _ties(rng, n)
    a[n // 2:] = rng.uniform(-300, 300, n - n // 2)
    c[3 * n // 4:] = rng.uniform(-1e3, 1e3, n - 3 * n // 4)

    def emit(x, y, z, out):
        with K._loop("i", n) as i:
            K._store(out, i, K.fma32(x[i], y[i], z[i]))
    prim = _vector("fma", [("a", n, "float32"), ("b", n, "float32"), ("c", n, "float32"),
                           ("out", n, "float32")], emit)
    return Case("fma32", _c_of(prim), prim, [a, b, c, np.zeros(n, f32)], 3,
                ort.fma32(a, b, c))


def quantize_case(rng, n: int = 1024) -> Case:
    """:func:`.kernels.quantize_linear` (QuantizeLinear of float32) at halves, the clamp
    bounds, infinities and NaN."""
    scale, zp = float(np.exp(rng.uniform(-5, 1))), int(rng.integers(-128, 128))
    x = (rng.uniform(-300, 300, n) * scale).astype(f32)
    x[:n // 4] = ((rng.integers(-140, 140, n // 4) + 0.5) * scale).astype(f32)
    x[:6] = [np.inf, -np.inf, np.nan, 0.0, -0.0, f32(0.5 * scale)]

    def emit(v, out):
        with K._loop("i", n) as i:
            K._store(out, i, K._cast("int8", K.quantize_linear(v[i], scale, zp)))
    prim = _vector("quantize", [("x", n, "float32"), ("out", n, "int8")], emit)
    return Case("quantize_linear", _c_of(prim), prim, [x, np.zeros(n, np.int8)], 1,
                ort.quantize_linear(x, scale, zp).astype(np.int8))


# ------------------------------------------------------------------ window kernels
def _layer_case(spec: LayerSpec, layout: str, rng, expected_of) -> Case:
    """A LayerSpec kernel: random input, garbage output / scratch / RiP gap; ``expected_of(x,
    arrays)`` the specification's output."""
    g = spec.geometry
    x = rng.integers(-128, 128, g.in_hwc, dtype=np.int8)
    arrays, expected = expected_of(x)
    args, out = [], None
    for k, p in enumerate(kernel_params(spec, layout)):
        if p.name == "ws":
            ws = rng.integers(-128, 128, p.elements, dtype=np.int8)
            ws[spec.rip_input_offset:] = x.ravel()
            args.append(ws)
            out = k
        elif p.name == "input":
            args.append(x.ravel().copy())
        elif p.name in arrays:
            args.append(np.ascontiguousarray(arrays[p.name], dtype=p.dtype))
        else:
            args.append(rng.integers(-128, 128, p.elements).astype(p.dtype))
            out = k if p.name == "output" else out

    def output(a):
        return np.asarray(a[out])[:spec.output_bytes].reshape(expected.shape)
    return Case(f"{spec.op} {layout}", lambda symbol: emit_c_kernel(spec, layout, symbol),
                lambda symbol: make_prim_func(spec, layout, symbol), args, out, expected,
                output)


def conv_case(rng: random.Random, nrng) -> list[Case]:
    """A random conv2d / depthwise_conv2d (TFLite's test geometries) requantized as
    QLinearConv, both layouts."""
    while True:
        spec = random_spec(rng)
        if spec.op in ("conv2d", "depthwise_conv2d"):
            break
    spec = dataclasses.replace(spec, arithmetic="onnxruntime", right_shifts=False)
    g = spec.geometry
    xs = float(np.exp(nrng.uniform(-5, -1)))
    ws = np.exp(nrng.uniform(-7, -3, g.out_channels)).astype(f32)
    scales = (f32(xs) * ws) / f32(np.exp(nrng.uniform(-4, 0)))
    requant = ort.requant_of(scales, spec.output_zero_point, (spec.act_min, spec.act_max))
    params = ref.ConvParams(g.stride, g.dilation, g.padding, spec.input_zero_point, requant)
    if spec.op == "conv2d":
        weight = nrng.integers(-127, 128, (g.out_channels,) + g.kernel + (g.in_channels,),
                               dtype=np.int8)
        kernel, packed = ref.conv2d_int8, pack_conv2d_weight(weight)
    else:
        weight = nrng.integers(-127, 128, (1,) + g.kernel + (g.out_channels,), dtype=np.int8)
        kernel, packed = ref.depthwise_conv2d_int8, weight.ravel()
    bias = nrng.integers(-40000, 40000, g.out_channels).astype(np.int32)

    def expected_of(x):
        return ({"weight": packed, "bias": bias, "multiplier": requant.multiplier,
                 "shift": requant.shift}, kernel(x[None], weight, bias, params)[0])
    layouts = ("dual",) if spec.expand is not None else ("rip", "dual")
    return [_layer_case(spec, layout, nrng, expected_of) for layout in layouts]


def pool_case(nrng, order: str, qlinear: bool, include_pad: bool) -> list[Case]:
    """An average pool as onnxruntime computes it (``order``, QLinearAveragePool in uint8 or
    int8, or AveragePool then QuantizeLinear), both layouts."""
    h, w, c = (int(v) for v in nrng.integers(2, 9, 3))
    if order == "global":
        kernel, stride, padding = (h, w), (1, 1), (0, 0, 0, 0)
    else:
        kernel = (int(nrng.integers(1, min(h, 4) + 1)), int(nrng.integers(1, min(w, 4) + 1)))
        stride = (int(nrng.integers(1, 3)), 1 if order == "vector" else int(nrng.integers(1, 4)))
        padding = ref.same_padding("SAME" if nrng.random() < 0.5 else "VALID", (h, w), kernel,
                                   stride)
    x_quant = (float(np.exp(nrng.uniform(-5, 0))), int(nrng.integers(-128, 128)))
    y_quant = (float(np.exp(nrng.uniform(-5, 0))), int(nrng.integers(-128, 128)))
    p = ort.PoolParams(kernel, stride, padding, ort.dequantize_table(*x_quant), order,
                       include_pad, qlinear, *y_quant,
                       128 if qlinear and nrng.random() < 0.5 else 0)
    spec = LayerSpec.avg_pool2d((h, w, c), kernel, stride, padding, ort_pool=OrtPool(
        p.qlinear, p.order, p.include_pad, p.output_scale, p.output_zero_point, p.offset))

    def expected_of(x):
        return {"table": p.table.view(np.int32)}, ort.average_pool(x[None], p)[0]
    return [_layer_case(spec, layout, nrng, expected_of) for layout in ("rip", "dual")]


# ------------------------------------------------------------------ operator kernels
def _op_case(what: str, kernel, prim, args, out: int, expected) -> Case:
    return Case(what, lambda symbol: kernel(symbol).source, prim, args, out, expected)


def fully_connected_case(nrng, floating: bool, gather: bool, bias: bool = True) -> Case:
    rows, depth, units = (int(nrng.integers(1, 4)), int(nrng.integers(1, 70)),
                          int(nrng.integers(1, 20)))
    zi, zo = (int(v) for v in nrng.integers(-128, 128, 2))
    x = nrng.integers(-128, 128, rows * depth, dtype=np.int8)
    weights = nrng.integers(-127, 128, (units, depth), dtype=np.int8)
    xs, ys = (float(np.exp(nrng.uniform(-5, -1))) for _ in range(2))
    ws = np.exp(nrng.uniform(-7, -3, units)).astype(f32)
    low = int(nrng.integers(-128, 0))
    act = (low, int(nrng.integers(low, 128)))
    if floating:
        b = (nrng.integers(-40000, 40000, units).astype(f32) * (f32(xs) * ws)) if bias \
            else np.zeros(units, f32)
        p = ort.FullyConnectedFloat(ort.dequantize_table(xs, zi), ws, b, ys, zo, act)
        expected = ort.fully_connected_float(x, weights, p)
        gemm = lo.FloatGemm(ys, zo)
        values = (rows, depth, units, zi, zo, *act, gather, "onnxruntime", gemm)
        tables = [p.table, ws, b]
    else:
        b = nrng.integers(-40000, 40000, units).astype(np.int32)
        rq = ort.requant_of((f32(xs) * ws) / f32(ys), zo, act)
        expected = ref.fully_connected_int8(x, weights, b, zi, rq)
        values = (rows, depth, units, zi, zo, *act, gather, "onnxruntime")
        tables = [b, rq.multiplier.astype(np.int32), rq.shift.astype(np.int32)]
    args = [x, np.zeros(rows * units, np.int8), weights.ravel(), *tables]
    if gather:
        args.append(np.zeros(depth, np.int16))
    return _op_case(f"fully_connected float={floating} gather={gather}",
                    lambda symbol: lo.fully_connected_kernel(symbol, *values),
                    lambda symbol: lo.fully_connected_prim_func(symbol, *values), args, 1,
                    expected)


def mean_case(nrng) -> Case:
    outer, reduce, inner = (int(v) for v in nrng.integers(1, 20, 3))
    zi, zo = (int(v) for v in nrng.integers(-128, 128, 2))
    rq = ort.mean_requant(float(np.exp(nrng.uniform(-4, 0))),
                          float(np.exp(nrng.uniform(-4, 0))), reduce, zo)
    x = nrng.integers(-128, 128, (outer, reduce, inner), dtype=np.int8)
    expected = rq(x.astype(np.int64).sum(axis=1) - zi * reduce)
    values = (outer, reduce, inner, zi, int(rq.multiplier[0]), int(rq.shift[0]), zo,
              "onnxruntime")
    return _op_case("mean", lambda symbol: lo.mean_kernel(symbol, *values),
                    lambda symbol: lo.mean_prim_func(symbol, *values),
                    [x.ravel(), np.zeros(outer * inner, np.int8), np.zeros(inner, np.int32)],
                    1, expected)


def float_mean_case(nrng) -> Case:
    """The float GlobalAveragePool (MLAS's four lanes) over the middle axis."""
    outer, h, w, inner = (int(v) for v in nrng.integers(1, 8, 4))
    x_quant = (float(np.exp(nrng.uniform(-4, 0))), int(nrng.integers(-128, 128)))
    y_quant = (float(np.exp(nrng.uniform(-4, 0))), int(nrng.integers(-128, 128)))
    p = ort.pool_params("GlobalAveragePool", x_quant, y_quant, (h, w), (1, 1), (0, 0, 0, 0),
                        (h, w), False)
    x = nrng.integers(-128, 128, (outer, h, w, inner), dtype=np.int8)
    values = (outer, h * w, inner, 0, 0, 0, y_quant[1], "onnxruntime",
              lo.FloatMean(*y_quant))
    return _op_case("float mean", lambda symbol: lo.mean_kernel(symbol, *values),
                    lambda symbol: lo.mean_prim_func(symbol, *values),
                    [x.ravel(), np.zeros(outer * inner, np.int8), np.zeros(inner, np.int32),
                     p.table], 1, ort.global_average(x, (1, 2), p).reshape(-1))


def binary_case(nrng, kernel: str) -> Case:
    shape = tuple(int(v) for v in nrng.integers(1, 9, int(nrng.integers(1, 5))))
    quant = [(float(np.exp(nrng.uniform(-4, 0))), int(nrng.integers(-128, 128)))
             for _ in range(3)]
    p = ort.add_params(kernel, *quant, "uint8" if nrng.random() < 0.5 else "int8",
                       ("NONE", "RELU")[int(nrng.integers(2))])
    a, b = (nrng.integers(-128, 128, shape, dtype=np.int8) for _ in range(2))
    tables = {"QLinearAdd": [p.table], "QLinearMul": []}.get(kernel, [p.table_a, p.table])
    return _op_case(f"{kernel} {p.offset}",
                    lambda symbol: ew.ort_binary_kernel(symbol, shape, p),
                    lambda symbol: ew.ort_binary_prim_func(shape, p, symbol),
                    [a.ravel(), b.ravel(), np.zeros(a.size, np.int8), *tables], 2,
                    ort.add_int8(a, b, p).reshape(-1))


def softmax_case(nrng, kernel: str, dtype: str = "uint8") -> Case:
    rows, depth = int(nrng.integers(1, 5)), int(nrng.integers(1, 41))
    x_quant = (float(np.exp(nrng.uniform(-5, 0))), int(nrng.integers(-128, 128)))
    y_quant = (1.0 / float(nrng.uniform(100, 300)), int(nrng.integers(-128, 128)))
    p = ort.softmax_params(kernel, x_quant, y_quant, depth, dtype)
    x = nrng.integers(-128, 128, (rows, depth), dtype=np.int8)
    x[0, :] = x[0, 0]                                           # a flat row
    return _op_case(f"{kernel} {dtype} {depth}",
                    lambda symbol: ew.ort_softmax_kernel(symbol, rows, depth, p),
                    lambda symbol: ew.ort_softmax_prim_func(rows, depth, p, symbol),
                    [x.ravel(), np.zeros(x.size, np.int8), p.table], 1,
                    ort.softmax(x, p).reshape(-1))


def float_quantize_case(nrng) -> Case:
    n = int(nrng.integers(1, 300))
    scale, zp = float(np.exp(nrng.uniform(-6, 2))), int(nrng.integers(-128, 128))
    x = ((nrng.integers(-200, 200, n) + nrng.choice([0.5, 0.25, 0.0], n)) * scale).astype(f32)
    return _op_case("float_quantize",
                    lambda symbol: ew.float_quantize_kernel(symbol, n, scale, zp,
                                                            "onnxruntime"),
                    lambda symbol: ew.float_quantize_prim_func(n, scale, zp, symbol,
                                                               "onnxruntime"),
                    [x.view(np.int8), np.zeros(n, np.int8)], 1,
                    ort.quantize_linear(x, scale, zp).astype(np.int8))


def all_cases() -> list[Case]:
    rng, nrng = random.Random(18), np.random.default_rng(18)
    cases = [requantize_case(nrng), fma_case(nrng), quantize_case(nrng)]
    for _ in range(6):
        cases += conv_case(rng, nrng)
    for order in ("generic", "vector", "global"):
        for qlinear in ((False, True) if order == "generic" else (False,)):
            for include_pad in (False, True):
                cases += pool_case(nrng, order, qlinear, include_pad)
    for floating in (False, True):
        for gather in (False, True):
            cases.append(fully_connected_case(nrng, floating, gather))
    cases.append(fully_connected_case(nrng, True, False, bias=False))
    cases += [mean_case(nrng) for _ in range(3)]
    cases += [float_mean_case(nrng) for _ in range(3)]
    for kernel in ("QLinearAdd", "QLinearMul", "Add", "Mul"):
        cases += [binary_case(nrng, kernel) for _ in range(3)]
    cases += [softmax_case(nrng, "QLinearSoftmax", dtype) for dtype in ("uint8", "int8")]
    cases += [softmax_case(nrng, "Softmax") for _ in range(3)]
    cases += [float_quantize_case(nrng) for _ in range(3)]
    return cases


# ------------------------------------------------------------------ the tests
@pytest.fixture(scope="module")
def cases():
    return all_cases()


def _copies(case: Case) -> list[np.ndarray]:
    return [np.array(a, copy=True) for a in case.args]


@pytest.mark.skipif(HOST_CC is None, reason="no host C compiler")
def test_c_kernels_equal_the_specification(cases, tmp_path):
    """Every kernel's C, compiled for the host with -Wall -Wextra -Werror, called on the
    arguments: its output byte for byte the specification's."""
    source = "#include <stdint.h>\n#include <string.h>\n" + "\n".join(
        case.c(f"k{i}") for i, case in enumerate(cases)).replace("#include <stdint.h>", "")
    source = source.replace("static void k", "void k")
    (tmp_path / "kernels.c").write_text(source)
    subprocess.run([HOST_CC, "-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-shared",
                    "-fPIC", "kernels.c", "-o", "libkernels.so"], cwd=tmp_path, check=True,
                   capture_output=True, text=True)
    lib = ctypes.CDLL(str(tmp_path / "libkernels.so"))
    for i, case in enumerate(cases):
        args = _copies(case)
        getattr(lib, f"k{i}")(*(ctypes.c_void_p(a.ctypes.data) for a in args))
        got = case.got(args)
        assert got.tobytes() == np.ascontiguousarray(case.expected).astype(
            got.dtype).tobytes(), (case.what, int(np.count_nonzero(got != case.expected)))


def test_llvm_builds_equal_the_specification(cases):
    """The same PrimFuncs built by TVM for llvm (one module)."""
    module = tvm.tirx.build(tvm.IRModule({f"k{i}": case.prim(f"k{i}")
                                          for i, case in enumerate(cases)}), target="llvm")
    for i, case in enumerate(cases):
        tensors = [tvm.runtime.tensor(a) for a in _copies(case)]
        module[f"k{i}"](*tensors)
        got = case.got([t.numpy() for t in tensors])
        assert got.tobytes() == np.ascontiguousarray(case.expected).astype(
            got.dtype).tobytes(), (case.what, int(np.count_nonzero(got != case.expected)))


@pytest.mark.skipif(ARM_CC is None, reason="arm-none-eabi-gcc is not installed")
def test_kernels_build_for_cortex_m0plus(cases, tmp_path):
    """The C builds for the Pico's Cortex-M0+ (soft float) with -Wall -Wextra -Werror and
    calls nothing but libgcc's arithmetic helpers and memcpy (no libm, no TVM)."""
    source = "#include <stdint.h>\n#include <string.h>\n" + "\n".join(
        case.c(f"k{i}") for i, case in enumerate(cases)).replace("#include <stdint.h>", "")
    _, undefined = cortex_m0plus_symbols(source.replace("static void k", "void k"), tmp_path)
    assert all(s.startswith("__aeabi_") or s == "memcpy" for s in undefined), undefined


def test_exact_fma_against_rational_arithmetic():
    """:func:`.ort_arithmetic.fma32` is the exactly rounded ``a * b + c`` (fractions), ties
    included."""
    from fractions import Fraction
    rng = np.random.default_rng(3)
    a, b, c = _ties(rng, 3000)
    got = ort.fma32(a, b, c)
    ties = 0
    for x, y, z, r in zip(a, b, c, got):
        exact = Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z))
        low = f32(float(exact))                       # a neighbour of the exact value
        candidates = {float(v) for v in (low, np.nextafter(low, f32(np.inf)),
                                         np.nextafter(low, f32(-np.inf)))}
        best = min(candidates, key=lambda v: (abs(Fraction(v) - exact),
                                              int(np.asarray(f32(v)).view(np.int32)) & 1))
        assert float(r) == best, (x, y, z)
        ties += 2 * abs(Fraction(float(r)) - exact) == abs(
            Fraction(float(np.nextafter(r, f32(np.inf)))) - Fraction(float(r)))
    assert ties > 100                 # the operands do reach ties


def test_requantization_specification_is_float32_arithmetic():
    """:func:`.ort_arithmetic.requantize` (int64) is onnxruntime's float32 computation,
    clamp and zero point included."""
    rng = np.random.default_rng(4)
    acc = rng.integers(-2 ** 31, 2 ** 31, 200000)
    acc[:1000] = rng.integers(-3000, 3000, 1000)
    scale = f32(np.exp(rng.uniform(-12, 1)))
    m, e = ort.scale_parts(scale)
    for zp in (-128, 3, 127):
        want = np.clip(np.rint(acc.astype(np.int32).astype(f32) * scale), -128 - zp,
                       127 - zp) + zp
        assert np.array_equal(ort.requantize(acc, m, e, zp), want.astype(np.int8))


def test_an_overflowing_qlinear_softmax_is_refused():
    """onnxruntime's QLinearSoftmax overflows float32 for tiny output scales: refused."""
    with pytest.raises(ref.ReferenceError, match="overflows"):
        ort.softmax_params("QLinearSoftmax", (0.1, 0), (1 / 5000, -128), 8)


def test_kernel_options_are_checked():
    with pytest.raises(CodegenError, match="pool order"):
        OrtPool(False, "diagonal", False, 0.1, 0)
    with pytest.raises(CodegenError, match="ort_pool"):
        LayerSpec.max_pool2d((4, 4, 2), 2, 2, ort_pool=OrtPool(False, "generic", False,
                                                               0.1, 0))
    with pytest.raises(CodegenError, match="whole input"):
        LayerSpec.avg_pool2d((4, 4, 2), 2, 2, ort_pool=OrtPool(False, "global", False, 0.1,
                                                               0))
    with pytest.raises(CodegenError, match="arithmetic"):
        LayerSpec.conv2d((4, 4, 2), 3, 3, arithmetic="fixed")
    with pytest.raises(CodegenError, match="onnxruntime requantization"):
        lo.mean_kernel("m", 1, 4, 2, 0, 5, 30, 0, "onnxruntime")
