"""codegen.elementwise_ops: the TIR elementwise kernels against the reference.

For seeded random shapes and quantizations of every operator (requantize / RELU, RELU6 clamp,
HARD_SWISH and LOGISTIC tables, broadcasting MUL and ADD, int8 SOFTMAX, the float32 edges):
the C that ``<op>_kernel`` prints, compiled for the host, is byte for byte the numpy reference
(``frontend.reference``), also called in place where the kernel allows it (exact alias; the
float edges' RiP layouts); the same PrimFunc built by TVM for llvm equals the reference; the C
prototypes are the ABI graph_c calls; the C builds for the Cortex-M0+ with ``-Wall -Werror``;
and the refusals name what is wrong.
"""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
from dataclasses import dataclass, field

import numpy as np
import pytest
import tvm

from tvm_serenity.codegen import elementwise_ops as ew
from tvm_serenity.codegen.ops import OpKernel
from tvm_serenity.codegen.spec import CodegenError
from tvm_serenity.frontend import reference as ref

HOST_CC = shutil.which("gcc") or shutil.which("cc")
ARM_CC = shutil.which("arm-none-eabi-gcc")
needs_host_cc = pytest.mark.skipif(HOST_CC is None, reason="no host C compiler")
needs_arm = pytest.mark.skipif(ARM_CC is None, reason="arm-none-eabi-gcc is not installed")

#: the C parameters of each kind of kernel (wrappers with external linkage call them)
SIGNATURES = {"unary": ["const int8_t *input", "int8_t *output"],
              "lookup": ["const int8_t *input", "int8_t *output", "const int8_t *table"],
              "binary": ["const int8_t *input1", "const int8_t *input2", "int8_t *output"],
              "softmax": ["const int8_t *input", "int8_t *output", "const int32_t *exps",
                          "const int32_t *terms"]}


@dataclass
class Case:
    """One kernel instance: ``args`` of ``<op>_kernel`` (after the name),
    ``prim_args`` of ``<op>_prim_func``, operand shapes, the reference, the constant tables
    (passed after the operands) and how it may run in place."""

    op: str
    kind: str
    args: tuple
    prim_args: tuple
    shapes: list                   # operand shapes (numpy, int8 or float32)
    out_shape: tuple
    reference: object              # operands -> expected output array
    tables: list = field(default_factory=list)
    inputs: object = None          # rng -> operands
    in_place: str | None = None    # "exact", "exact1", "quantize_rip", "dequantize_rip"
    output_dtype: str = "int8"


def _random_requant(rng, real_low: float, real_high: float) -> tuple[int, int]:
    return ref.quantize_multiplier(float(np.exp(rng.uniform(np.log(real_low),
                                                            np.log(real_high)))))


def _int8(rng, shape):
    return np.asarray(rng.integers(-128, 128, shape), dtype=np.int8)


def requantize_case(rng) -> Case:
    n = int(rng.integers(1, 400))
    zi, zo = (int(v) for v in rng.integers(-128, 128, 2))
    m, s = _random_requant(rng, 1e-3, 40.0)
    lo, hi = (max(-128, zo), 127) if rng.random() < 0.3 else (-128, 127)   # RELU or QUANTIZE
    return Case("requantize", "unary", (n, zi, m, s, zo, lo, hi), (n, zi, m, s, zo, lo, hi),
                [(n,)], (n,), lambda x: ref.requantize(x.astype(np.int64) - zi, m, s, zo, lo,
                                                       hi), in_place="exact")


def clamp_case(rng) -> Case:
    n = int(rng.integers(1, 400))
    lo = int(rng.integers(-128, 100))
    hi = int(rng.integers(lo, 128))
    return Case("clamp", "unary", (n, lo, hi), (n, lo, hi), [(n,)], (n,),
                lambda x: np.clip(x, lo, hi).astype(np.int8), in_place="exact")


def lookup_case(rng) -> Case:
    n = int(rng.integers(1, 400))
    si, so = rng.uniform(0.01, 0.2, 2)
    zi, zo = (int(v) for v in rng.integers(-100, 100, 2))
    if rng.random() < 0.5:
        p = ref.hard_swish_params(si, zi, so, zo)
        kernel, what = (lambda x: ref.hard_swish_int8(x, p)), "HARD_SWISH int8"
    else:
        p = ref.logistic_params(si, zi)
        kernel, what = (lambda x: ref.logistic_int8(x, p)), "LOGISTIC int8"
    return Case("lookup", "lookup", (n, what), (n,), [(n,)], (n,), kernel,
                tables=[ref.table_of(kernel)], in_place="exact")


def _broadcast_pair(rng) -> tuple[tuple, tuple, tuple]:
    """Two shapes of rank <= 4 broadcasting to a third (either side may broadcast)."""
    rank = int(rng.integers(0, 5))
    out = tuple(int(d) for d in rng.integers(1, 6, rank))

    def operand():
        keep = int(rng.integers(0, rank + 1))
        return tuple(d if rng.random() < 0.6 else 1 for d in out[rank - keep:])
    a, b = operand(), operand()
    if rng.random() < 0.4:
        a = out                  # an operand of the output's shape: may alias it
    return a, b, tuple(int(d) for d in np.broadcast_shapes(a, b))


def _binary_quantization(rng):
    """Broadcasting shapes ``a, b, out``, random scales and zero points of the three tensors,
    a fused activation and its int8 range."""
    a, b, out = _broadcast_pair(rng)
    sa, sb, so = rng.uniform(0.005, 0.2, 3)
    za, zb, zo = (int(v) for v in rng.integers(-128, 128, 3))
    activation = str(rng.choice(["NONE", "RELU", "RELU6"]))
    return a, b, out, sa, sb, so, za, zb, zo, activation, ref.activation_range(activation,
                                                                               so, zo)


def mul_case(rng) -> Case:
    a, b, out, sa, sb, so, za, zb, zo, activation, (lo, hi) = _binary_quantization(rng)
    rq = ref.mul_requant(sa, sb, so, zo, activation)
    args = (a, b, out, za, zb, int(rq.multiplier[0]), int(rq.shift[0]), zo, lo, hi)
    return Case("mul", "binary", args, args, [a, b], out,
                lambda x, y: ref.mul_int8(x, y, za, zb, rq),
                in_place="exact1" if a == out else None)


def add_case(rng) -> Case:
    a, b, out, sa, sb, so, za, zb, zo, activation, (lo, hi) = _binary_quantization(rng)
    p = ref.add_params(sa, za, sb, zb, so, zo, activation)
    args = (a, b, out, za, zb, p.input1_multiplier, p.input1_shift, p.input2_multiplier,
            p.input2_shift, int(p.output.multiplier), int(p.output.shift), zo, lo, hi)
    return Case("add", "binary", args, args, [a, b], out, lambda x, y: ref.add_int8(x, y, p),
                in_place="exact1" if a == out else None)


def _softmax_rows(rng, rows: int, depth: int) -> np.ndarray:
    """Rows of every kind: uniform, constant (the largest sums), one spike, narrow ranges."""
    x = rng.integers(-128, 128, (rows, depth))
    kind = np.arange(rows) % 5
    x[kind == 1] = rng.integers(-128, 128, (int(np.sum(kind == 1)), 1))
    spikes = np.flatnonzero(kind == 2)
    x[spikes] = rng.integers(-128, -100, (spikes.size, depth))
    x[spikes, rng.integers(0, depth, spikes.size)] = 127
    narrow = np.flatnonzero(kind == 3)
    x[narrow] = rng.integers(0, 4, (narrow.size, depth)) + rng.integers(-128, 124,
                                                                        (narrow.size, 1))
    return x.astype(np.int8)


def softmax_case(rng, depth: int | None = None) -> Case:
    depth = depth or int(rng.choice([1, 2, 7, 10, 17, 100, 1000]))
    rows = max(1, 3000 // depth)
    beta, scale = float(rng.choice([1.0, 0.5])), float(rng.uniform(0.004, 1.0))
    params = ref.softmax_params(beta, scale)
    exps, terms, valid_from = ref.softmax_tables(params)
    case = Case("softmax", "softmax", (rows, depth, valid_from), (rows, depth, valid_from),
                [(rows, depth)], (rows, depth), lambda x: ref.softmax_int8(x, params),
                tables=[exps.astype(np.int32), terms.astype(np.int32)], in_place="exact")
    case.inputs = lambda rng: [_softmax_rows(rng, rows, depth)]
    return case


def _float_inputs(rng, n: int, scale: float) -> np.ndarray:
    """Exact halves and quarters of the step, normal values, huge ones, signed zeros and
    infinities (``n >= 16``). No NaN: the reference (TFLM's ``(int32_t)round(NaN)``) leaves
    it undefined; the C kernels give -128 (:func:`test_nan_quantizes_to_minus_128`)."""
    special = [-0.0, 0.0, 1e30, -1e30, 3e9, np.inf, -np.inf, 0.5 * scale, -0.5 * scale,
               1.5 * scale, -2.5 * scale, 127.5 * scale, -128.5 * scale]
    k = n - len(special)
    steps = (rng.integers(-160, 160, k) + rng.choice([0, 0.5, 0.25, 0.75], k)) * scale
    x = np.concatenate([special, np.where(rng.random(k) < 0.7, steps, rng.normal(0, 3, k))])
    return x.astype(np.float32)


def _float_scale(rng) -> float:
    return float(rng.choice([0.03125, 0.1, 1 / 255, float(rng.uniform(1e-3, 2.0)),
                             float(2.0 ** rng.integers(-40, 30) * rng.uniform(1, 2))]))


def float_quantize_case(rng) -> Case:
    n = int(rng.integers(16, 400))
    scale, zp = _float_scale(rng), int(rng.integers(-128, 128))
    case = Case("float_quantize", "unary", (n, scale, zp), (n, scale, zp), [(n,)], (n,),
                lambda x: ref.quantize(x, scale, zp), in_place="quantize_rip")
    case.inputs = lambda rng: [_float_inputs(rng, n, scale)]
    return case


def dequantize_case(rng) -> Case:
    n = int(rng.integers(1, 400))
    scale, zp = _float_scale(rng), int(rng.integers(-128, 128))
    return Case("dequantize", "unary", (n, scale, zp), (n, scale, zp), [(n,)], (n,),
                lambda q: ref.dequantize(q, scale, zp), in_place="dequantize_rip",
                output_dtype="float32")


MAKERS = {"requantize": requantize_case, "clamp": clamp_case, "lookup": lookup_case,
          "mul": mul_case, "add": add_case, "softmax": softmax_case,
          "float_quantize": float_quantize_case, "dequantize": dequantize_case}
CASES_PER_OP = 8


def all_cases() -> list[Case]:
    rng = np.random.default_rng(2024)
    cases = [MAKERS[op](rng) for op in MAKERS for _ in range(CASES_PER_OP)]
    cases += [softmax_case(rng, 4095)]           # the widest row TFLite's sum allows
    return cases


def operands(case: Case, rng) -> list[np.ndarray]:
    if case.inputs is not None:
        return case.inputs(rng)
    return [_int8(rng, shape) for shape in case.shapes]


def kernel_of(case: Case, k: int) -> OpKernel:
    return getattr(ew, f"{case.op}_kernel")(f"k{k}", *case.args)


def _wrapper(kernel: OpKernel, kind: str) -> str:
    params = SIGNATURES[kind]
    names = [p.rsplit("*", 1)[1] for p in params]
    return (f"void run_{kernel.name}({', '.join(params)}) {{ "
            f"{kernel.name}({', '.join(names)}); }}\n")


def _prototype(source: str, name: str) -> str:
    match = re.search(rf"static void {name}\(([^)]*)\)", source)
    assert match, name
    return re.sub(r"\s+", " ", match[1].replace(name, "NAME"))


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    """Every case's kernel in one host shared library."""
    if HOST_CC is None:
        pytest.skip("no host C compiler")
    cases = all_cases()
    parts = ["#include <stdint.h>", "#include <string.h>"]
    for k, case in enumerate(cases):
        kernel = kernel_of(case, k)
        parts += [kernel.source, _wrapper(kernel, case.kind)]
    directory = tmp_path_factory.mktemp("elementwise")
    (directory / "kernels.c").write_text("\n".join(parts))
    subprocess.run([HOST_CC, "-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-shared",
                    "-fPIC", "kernels.c", "-o", "libkernels.so"], cwd=directory, check=True,
                   capture_output=True, text=True)
    return cases, ctypes.CDLL(str(directory / "libkernels.so"))


def _address(array: np.ndarray, offset: int = 0) -> ctypes.c_void_p:
    return ctypes.c_void_p(array.ctypes.data + offset)


def _call(library, name: str, case: Case, xs: list[np.ndarray], in_place: bool) -> np.ndarray:
    """Run kernel ``name`` on operands ``xs``: on separate buffers, or in the layout
    ``case.in_place`` names; returns the output as an array of ``case.out_shape``."""
    function = getattr(library, f"run_{name}")
    tables = [_address(t) for t in case.tables]
    out_bytes = int(np.prod(case.out_shape)) * np.dtype(case.output_dtype).itemsize
    if not in_place:
        y = np.full(max(out_bytes, 1), 0x55, np.uint8)
        function(*(_address(np.ascontiguousarray(x)) for x in xs), _address(y), *tables)
        return y[:out_bytes].view(case.output_dtype).reshape(case.out_shape)
    if case.in_place in ("exact", "quantize_rip"):         # output starts where input starts
        buffer = np.ascontiguousarray(xs[0]).reshape(-1).view(np.uint8).copy()
        function(_address(buffer), _address(buffer), *tables)
    elif case.in_place == "exact1":                       # input1 is the output
        buffer = np.ascontiguousarray(xs[0]).reshape(-1).view(np.uint8).copy()
        function(_address(buffer), _address(np.ascontiguousarray(xs[1])), _address(buffer))
    else:                          # dequantize_rip: int8 input ends where the output ends
        n = xs[0].size
        buffer = np.full(4 * n, 0x55, np.uint8)
        buffer[3 * n:] = xs[0].view(np.uint8)
        function(_address(buffer, 3 * n), _address(buffer))
    return buffer[:out_bytes].view(case.output_dtype).reshape(case.out_shape)


def _same(got: np.ndarray, want: np.ndarray) -> bool:
    """Byte equality (float32 NaN and signed zeros included)."""
    want = np.asarray(want)
    return got.size == want.size and got.tobytes() == np.ascontiguousarray(
        want.astype(got.dtype)).tobytes()


def test_every_operator_has_cases():
    assert {case.op for case in all_cases()} == set(MAKERS)
    assert any(case.in_place == "exact1" for case in all_cases() if case.op == "mul")
    assert any(case.in_place == "exact1" for case in all_cases() if case.op == "add")


@needs_host_cc
def test_c_kernels_equal_the_reference_in_place_too(library):
    """The C on separate buffers and in place, three random operand sets per case: byte for
    byte the reference's output."""
    cases, lib = library
    rng = np.random.default_rng(7)
    aliased = 0
    for k, case in enumerate(cases):
        for _ in range(3):
            xs = operands(case, rng)
            want = case.reference(*xs)
            assert _same(_call(lib, f"k{k}", case, xs, False), want), (case.op, case.args)
            if case.in_place:
                assert _same(_call(lib, f"k{k}", case, xs, True), want), (case.op, case.args)
                aliased += 1
    assert aliased > len(cases)


@needs_host_cc
def test_nan_quantizes_to_minus_128(library):
    """NaN is clamped to the low end before rounding (``v >= low - 1`` is false): the C and
    llvm give -128, in place too."""
    cases, lib = library
    quantizes = 0
    for k, case in enumerate(cases):
        if case.op == "float_quantize":
            xs = [np.full(case.shapes[0], np.nan, np.float32)]
            for in_place in (False, True):
                assert np.all(_call(lib, f"k{k}", case, xs, in_place) == -128), case.args
            assert np.all(_run_llvm(case, xs) == -128)
            quantizes += 1
    assert quantizes == CASES_PER_OP


def _run_llvm(case: Case, xs: list[np.ndarray]) -> np.ndarray:
    func = getattr(ew, f"{case.op}_prim_func")(*case.prim_args)
    module, symbol = ew.build_llvm(func)
    out_bytes = int(np.prod(case.out_shape)) * np.dtype(case.output_dtype).itemsize
    flat = [np.ascontiguousarray(x).reshape(-1) for x in xs]
    buffers = [tvm.runtime.tensor(x.view(np.int8) if x.dtype == np.float32 else x)
               for x in flat]
    y = tvm.runtime.tensor(np.full(max(out_bytes, 1), 0x55, np.uint8).view(np.int8))
    module[symbol](*buffers, y, *(tvm.runtime.tensor(t) for t in case.tables))
    return y.numpy()[:out_bytes].view(case.output_dtype).reshape(case.out_shape)


def test_prim_funcs_on_llvm_equal_the_reference():
    cases = all_cases()
    rng = np.random.default_rng(8)
    for case in cases[::2] + [cases[-1]]:
        xs = operands(case, rng)
        assert _same(_run_llvm(case, xs), case.reference(*xs)), (case.op, case.args)


def test_float_edges_on_llvm_at_every_value():
    """QUANTIZE on infinities, halves and huge values; DEQUANTIZE on all 256 int8 values, for
    scales CodeGenC prints exactly and scales it could not (1/3, 0.023528477, 5e6 + 1)."""
    rng = np.random.default_rng(9)
    for scale, zp in [(0.1, -3), (1 / 3, 7), (0.023528477, -128), (3.7e-9, 127),
                      (5e6 + 1, 0)]:
        q = Case("float_quantize", "unary", (), (272, scale, zp), [], (272,), None)
        x = _float_inputs(rng, 272, scale)
        assert _same(_run_llvm(q, [x]), ref.quantize(x, scale, zp)), scale
        d = Case("dequantize", "unary", (), (256, scale, zp), [], (256,), None,
                 output_dtype="float32")
        every = np.arange(-128, 128, dtype=np.int8)
        assert _same(_run_llvm(d, [every]), ref.dequantize(every, scale, zp)), scale


def _float32_value(expr) -> np.float32:
    """A constant expression of (float)int casts, products and quotients, evaluated in
    float32 as C does."""
    if isinstance(expr, tvm.tirx.Cast):
        assert isinstance(expr.value, tvm.tirx.IntImm)
        return np.float32(expr.value.value)
    a, b = _float32_value(expr.a), _float32_value(expr.b)
    return a / b if isinstance(expr, tvm.tirx.Div) else a * b


def test_float32_constants_are_exact_in_c():
    """A float32 whose seven-digit print (CodeGenC's) reads back exactly is a FloatImm; any
    other is an exact constant expression (random scales: most need nine digits)."""
    rng = np.random.default_rng(10)
    values = [0.5, 0.1, 1 / 3, 2.0 ** -140 * 1.75, 5e6 + 1, *rng.uniform(1e-4, 1.0, 50)]
    inexact = 0
    for value in values:
        v = float(np.float32(value))
        expr = ew.float32_const(value)
        if isinstance(expr, tvm.tirx.FloatImm):
            assert float(np.float32(f"{v:e}")) == v
        else:
            inexact += 1
            assert float(_float32_value(expr)) == v, value
    assert inexact > 25
    assert "((float)11184811) / ((float)33554432)" in ew.dequantize_kernel("d", 4, 1 / 3,
                                                                           0).source
    with pytest.raises(CodegenError, match="not a finite float32"):
        ew.float32_const(float("inf"))


def test_prototypes_are_the_graph_emitters_abi():
    """Parameter names, types and order as graph_c calls them; no scratch."""
    for k, case in enumerate(all_cases()):
        kernel = kernel_of(case, k)
        assert _prototype(kernel.source, kernel.name) == ", ".join(SIGNATURES[case.kind]), \
            case.op
        assert (kernel.scratch16, kernel.scratch32) == (0, 0)


def test_no_division_in_loops_and_no_helper_calls():
    """The only division is float QUANTIZE's ``x / scale`` (the operator's own float32
    arithmetic); the exact constants' divisions by ``(float)2^k`` are folded by the compiler.
    No kernel calls a helper (the requantizations are inlined)."""
    for k, case in enumerate(all_cases()):
        body = kernel_of(case, k).source.split("*/", 1)[1]
        assert "serenity_" not in body and "%" not in body, case.op
        divisions = re.findall(r"/(?! \(\(float\)\d+\))", body)
        assert len(divisions) == (case.op == "float_quantize"), (case.op, divisions)


@pytest.mark.parametrize("call, message", [
    (lambda m: m.softmax_kernel("s", 1, 4096, 0), "overflows TFLite's int32 sum"),
    (lambda m: m.softmax_kernel("s", 0, 4, 0), "empty SOFTMAX"),
    (lambda m: m.softmax_kernel("s", 1, 4, 256), "first valid difference index 256"),
    (lambda m: m.mul_kernel("m", (1, 3), (1, 4), (1, 4), 0, 0, 1 << 30, 0, 0),
     r"\[1, 3\] and \[1, 4\] do not broadcast"),
    (lambda m: m.mul_kernel("m", (1, 2, 2, 2, 3), (3,), (1, 2, 2, 2, 3), 0, 0, 1 << 30, 0, 0),
     "rank 5 are not supported"),
    (lambda m: m.add_kernel("a", (3,), (3,), (3,), 0, 0, 1, 0, 1, 0, 1, 0, 0, left_shift=23),
     "left shift 23 overflows"),
    (lambda m: m.add_kernel("a", (3,), (3,), (3,), 0, 200, 1, 0, 1, 0, 1, 0, 0),
     "200 is not an int8 value"),
    (lambda m: m.requantize_kernel("q", 4, 0, 1 << 31, 0, 0), r"requantization \(2147483648"),
    (lambda m: m.requantize_kernel("q", 4, 0, 1 << 30, 31, 0), "shift in"),
    (lambda m: m.clamp_kernel("c", 4, -129, 3), "-129 is not an int8 value"),
    (lambda m: m.lookup_kernel("l", 0, "HARD_SWISH"), "empty HARD_SWISH"),
    (lambda m: m.float_quantize_kernel("f", 4, 0.0, 0), "scale 0.0 must be positive"),
    (lambda m: m.dequantize_kernel("d", 4, 0.1, 128), "128 is not an int8 value"),
])
def test_refusals_name_what_is_wrong(call, message):
    with pytest.raises(CodegenError, match=message):
        call(ew)


@needs_arm
def test_c_builds_for_cortex_m0plus(tmp_path):
    """Every kernel in one translation unit, -Os -Wall -Werror for the Cortex-M0+; its
    only undefined symbols are memcpy (the float edges) and libgcc's soft-float helpers."""
    parts = ["#include <stdint.h>", "#include <string.h>"]
    for k, case in enumerate(all_cases()):
        kernel = kernel_of(case, k)
        parts += [kernel.source, _wrapper(kernel, case.kind)]
    (tmp_path / "kernels.c").write_text("\n".join(parts))
    subprocess.run([ARM_CC, "-std=c99", "-mcpu=cortex-m0plus", "-mthumb", "-Os", "-Wall",
                    "-Wextra", "-Werror", "-c", "kernels.c", "-o", "kernels.o"], cwd=tmp_path,
                   check=True, capture_output=True, text=True)
    nm = subprocess.run(["arm-none-eabi-nm", "-u", "kernels.o"], cwd=tmp_path, check=True,
                        capture_output=True, text=True).stdout.split()
    undefined = {s for s in nm if s != "U"}
    assert "memcpy" in undefined
    assert all(s == "memcpy" or s.startswith("__aeabi_f") or s.startswith("__aeabi_i2f")
               for s in undefined), undefined
