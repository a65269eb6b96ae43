"""The TIR kernels of tvm_serenity.codegen.layout_ops against the reference.

For seeded random shapes and parameters of MEAN, FULLY_CONNECTED, TRANSPOSE, CONCATENATION, PAD,
STRIDED_SLICE and RESIZE_NEAREST_NEIGHBOR: the emitted C (host gcc, -Wall -Wextra -Werror) is
run in one harness (garbage in the output and scratch buffers) and compared byte for byte with
the numpy reference; the same PrimFuncs built by TVM for llvm are compared with it too; the C
builds for the Cortex-M0+ needing nothing but libgcc, memcpy and memset; the prototypes are the
ABI graph_c calls and the refusals name what is wrong. MEAN over one block and FULLY_CONNECTED
with the row gather also run in place, on the overlapping buffers the graph emitter gives them.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass

import numpy as np
import pytest
import tvm

from test_codegen_kernels import cortex_m0plus_symbols

from tvm_serenity.codegen import layout_ops
from tvm_serenity.codegen.ops import OpKernel
from tvm_serenity.codegen.spec import CodegenError
from tvm_serenity.frontend import reference as ref

HOST_CC = shutil.which("gcc") or shutil.which("cc")
ARM_CC = shutil.which("arm-none-eabi-gcc")
needs_host_cc = pytest.mark.skipif(HOST_CC is None, reason="no host C compiler")
OPS = ("mean", "fully_connected", "transpose", "concatenation", "pad", "strided_slice",
       "resize_nearest", "arg_max")
CASES_PER_OP = 14


@dataclass
class Case:
    """One kernel call: the builder arguments after the name, the ABI arrays (inputs, then
    garbage in the output and scratch), which of them is the output, the expected output."""

    op: str
    args: tuple
    arrays: list[np.ndarray]
    output: int
    expected: np.ndarray

    def kernel(self, name: str) -> OpKernel:
        return getattr(layout_ops, f"{self.op}_kernel")(name, *self.args)

    def prim_func(self, name: str):
        return getattr(layout_ops, f"{self.op}_prim_func")(name, *self.args)


def _int8(rng, shape) -> np.ndarray:
    return rng.integers(-128, 128, shape, dtype=np.int8)


def _garbage(rng, elements: int, dtype: str = "int8") -> np.ndarray:
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, elements, endpoint=True).astype(dtype)


def _shape(rng, rank: int, high: int = 6) -> tuple[int, ...]:
    return tuple(int(d) for d in rng.integers(1, high + 1, rank))


def _zp(rng) -> int:
    return int(rng.integers(-128, 128))


def mean_case(rng) -> Case:
    """A rank-1..4 tensor, a contiguous run of reduced axes, multipliers as graph_c derives
    them (TFLM divides the multiplier by the count)."""
    rank = int(rng.integers(1, 5))
    shape = _shape(rng, rank, 7)
    first = int(rng.integers(0, rank))
    axes = list(range(first, int(rng.integers(first, rank)) + 1))
    outer = int(np.prod(shape[:axes[0]]))
    reduce = int(np.prod([shape[a] for a in axes]))
    inner = int(np.prod(shape[axes[-1] + 1:]))
    zi, zo = _zp(rng), _zp(rng)
    multiplier, shift = ref.quantize_multiplier(float(rng.uniform(0.05, 4.0)))
    x = _int8(rng, shape)
    expected = ref.mean_int8(x, axes, zi, multiplier, shift, zo)
    s = min(reduce.bit_length() - 1, 32, 31 + shift)
    args = (outer, reduce, inner, zi, (multiplier << s) // reduce, shift - s, zo)
    return Case("mean", args, [x.ravel(), _garbage(rng, expected.size),
                               _garbage(rng, inner, "int32")], 1, expected)


def fully_connected_case(rng, gather: bool | None = None) -> Case:
    rows, depth, units = (int(v) for v in rng.integers(1, [6, 40, 20]))
    zi, zo = _zp(rng), _zp(rng)
    x, weight = _int8(rng, (rows, depth)), _int8(rng, (units, depth))
    bias = rng.integers(-5000, 5000, units).astype(np.int32)
    activation = str(rng.choice(["NONE", "RELU", "RELU6"]))
    requant = ref.conv_requant(0.03, rng.uniform(0.001, 0.03, units), 0.1, zo, activation)
    expected = ref.fully_connected_int8(x, weight, bias, zi, requant)
    gather = bool(rng.integers(0, 2)) if gather is None else gather
    args = (rows, depth, units, zi, zo, requant.act_min, requant.act_max, gather)
    arrays = [x.ravel(), _garbage(rng, expected.size), weight.ravel(), bias,
              requant.multiplier.astype(np.int32), requant.shift.astype(np.int32)]
    return Case("fully_connected", args, arrays + ([_garbage(rng, depth, "int16")]
                                                   if gather else []), 1, expected)


def transpose_case(rng) -> Case:
    rank = int(rng.integers(1, 5))
    x = _int8(rng, _shape(rng, rank))
    perm = [int(p) for p in rng.permutation(rank)]
    expected = np.transpose(x, perm)
    return Case("transpose", (x.shape, perm), [x.ravel(), _garbage(rng, x.size)], 1, expected)


def concatenation_case(rng) -> Case:
    rank = int(rng.integers(1, 5))
    axis = int(rng.integers(0, rank))
    base = _shape(rng, rank, 5)
    xs = []
    for _ in range(int(rng.integers(1, 5))):
        shape = list(base)
        shape[axis] = int(rng.integers(1, 6))
        xs.append(_int8(rng, shape))
    expected = np.concatenate(xs, axis)
    axis_arg = axis - rank if rng.integers(0, 2) else axis      # negative axes too
    return Case("concatenation", ([x.shape for x in xs], axis_arg),
                [x.ravel() for x in xs] + [_garbage(rng, expected.size)], len(xs), expected)


def pad_case(rng) -> Case:
    rank = int(rng.integers(1, 5))
    x = _int8(rng, _shape(rng, rank, 5))
    paddings = rng.integers(0, 4, (rank, 2))
    value = _zp(rng)
    expected = ref.pad(x, paddings, value)
    return Case("pad", (x.shape, paddings, value), [x.ravel(), _garbage(rng, expected.size)],
                1, expected)


def strided_slice_case(rng) -> Case:
    """Random begin / end / strides / masks resolved by the reference (TFLM's rules); drawn
    again until no axis is empty."""
    while True:
        rank = int(rng.integers(1, 5))
        shape = _shape(rng, rank, 9)
        begin = [int(rng.integers(-d - 2, d + 2)) for d in shape]
        end = [int(rng.integers(-d - 2, d + 2)) for d in shape]
        strides = [int(rng.choice([-3, -2, -1, 1, 1, 2, 3])) for _ in shape]
        masks = {k: int(rng.integers(0, 1 << rank)) for k in ("begin_mask", "end_mask")}
        masks["shrink_axis_mask"] = int(rng.integers(0, 1 << rank)) if rng.integers(0, 3) \
            else 0
        try:
            params = ref.resolve_strided_slice(shape, begin, end, strides, **masks)
        except ref.ReferenceError:
            continue
        if min(params.count) >= 1:
            break
    x = _int8(rng, shape)
    expected = ref.strided_slice(x, params)
    return Case("strided_slice", (shape, params.start, params.stride, params.count),
                [x.ravel(), _garbage(rng, expected.size)], 1, expected)


def resize_nearest_case(rng) -> Case:
    """The source tables as graph_c computes them (the reference resizing its indices)."""
    n, h, w, c = (int(v) for v in rng.integers(1, [3, 7, 7, 5]))
    oh, ow = (int(v) for v in rng.integers(1, 13, 2))
    corners, half = bool(rng.integers(0, 2)), bool(rng.integers(0, 2))
    rows = ref.resize_nearest_neighbor(np.arange(h).reshape(1, h, 1, 1), (oh, 1), corners,
                                       half).reshape(-1)
    cols = ref.resize_nearest_neighbor(np.arange(w).reshape(1, 1, w, 1), (1, ow), corners,
                                       half).reshape(-1)
    x = _int8(rng, (n, h, w, c))
    expected = ref.resize_nearest_neighbor(x, (oh, ow), corners, half)
    return Case("resize_nearest", ((n, h, w, c), (oh, ow)),
                [x.ravel(), _garbage(rng, expected.size), (rows * (w * c)).astype(np.int32),
                 (cols * c).astype(np.int32)], 1, expected)


def arg_max_case(rng) -> Case:
    """int8 or float32 (ties, NaN and -inf among the values), indices as int32 bytes."""
    outer, size, inner = (int(v) for v in rng.integers(1, [4, 9, 5]))
    dtype = ("int8", "float32")[int(rng.integers(0, 2))]
    if dtype == "int8":
        x = rng.integers(-4, 4, (outer, size, inner)).astype(np.int8)      # ties
        data = x.ravel()
    else:
        x = rng.choice(np.array([-2.5, 0.0, -0.0, 1.5, 1.5, 3.0, np.nan, -np.inf],
                                np.float32), (outer, size, inner))
        data = x.ravel().view(np.int8)
    expected = ref.arg_max(x, 1).astype("<i4").view(np.int8).ravel()
    return Case("arg_max", (outer, size, inner, dtype),
                [data.copy(), _garbage(rng, expected.size)], 1, expected)


def random_cases(op: str, seed: int, count: int = CASES_PER_OP) -> list[Case]:
    rng = np.random.default_rng([seed, OPS.index(op)])
    return [globals()[f"{op}_case"](rng) for _ in range(count)]


def all_cases(seed: int) -> list[Case]:
    return [case for op in OPS for case in random_cases(op, seed)]


# ------------------------------------------------------------------ host C
_CTYPES = {"int8": "int8_t", "int16": "int16_t", "int32": "int32_t"}


def _c_array(name: str, array: np.ndarray) -> str:
    values = ",".join(str(int(v)) for v in array.ravel())
    return f"static {_CTYPES[array.dtype.name]} {name}[{max(array.size, 1)}] = {{{values}}};"


def _run_harness(directory, definitions: list[str], calls: list[str]) -> list[bytes]:
    """Compile the kernels and a main running ``calls`` (each prints one hex line) with the
    host gcc, -Wall -Wextra -Werror; returns the printed bytes."""
    source = "\n".join(["#include <stdint.h>", "#include <stdio.h>", "#include <string.h>",
                        *definitions,
                        "static void print(const int8_t *y, int n) {",
                        "  for (int i = 0; i < n; ++i) printf(\"%02x\", (unsigned)(uint8_t)y[i]);",
                        "  printf(\"\\n\");", "}",
                        "int main(void) {", *calls, "  return 0;", "}", ""])
    (directory / "harness.c").write_text(source)
    subprocess.run([HOST_CC, "-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "harness.c",
                    "-o", "harness"], cwd=directory, check=True, capture_output=True, text=True)
    out = subprocess.run([str(directory / "harness")], check=True, capture_output=True,
                         text=True).stdout.split("\n")
    assert len(out) == len(calls) + 1 and out[-1] == ""
    return [bytes.fromhex(line) for line in out[:-1]]


def _call(kernel: OpKernel, array_names: list[str], output: str, size: int) -> str:
    return f"  {kernel.name}({', '.join(array_names)}); print({output}, {size});"


@needs_host_cc
@pytest.mark.parametrize("seed", range(2))
def test_c_equals_the_reference_on_host(tmp_path, seed):
    """Every random case through the C, on its own arrays (garbage output and scratch):
    byte for byte the reference."""
    cases = all_cases(seed)
    definitions, calls = [], []
    for index, case in enumerate(cases):
        kernel = case.kernel(f"k{index}")
        definitions.append(kernel.source)
        names = [f"{kernel.name}_a{j}" for j in range(len(case.arrays))]
        definitions += [_c_array(n, a) for n, a in zip(names, case.arrays)]
        calls.append(_call(kernel, names, names[case.output], case.expected.size))
    got = _run_harness(tmp_path, definitions, calls)
    for case, output in zip(cases, got, strict=True):
        assert np.array_equal(np.frombuffer(output, np.int8).reshape(case.expected.shape),
                              case.expected), (case.op, case.args)


@needs_host_cc
def test_in_place_mean_and_gathering_fully_connected(tmp_path):
    """MEAN of one block with the output at every offset inside its input (any overlap), and
    FULLY_CONNECTED with the gather on a workspace where the output starts at 0 and the input
    at the smallest offset its row order allows: the C equals the reference."""
    rng = np.random.default_rng(11)
    definitions, calls, expected = [], [], []
    for index in range(8):
        case = mean_case(rng)
        while case.args[0] != 1:
            case = mean_case(rng)
        x = case.arrays[0]
        for offset in sorted({0, x.size - case.expected.size, x.size // 2}):
            kernel = case.kernel(f"m{index}_{offset}")
            definitions += [kernel.source, _c_array(f"{kernel.name}_ws", x),
                            _c_array(f"{kernel.name}_acc", case.arrays[2])]
            ws = f"{kernel.name}_ws"
            calls.append(_call(kernel, [ws, f"{ws} + {offset}", f"{kernel.name}_acc"],
                               f"{ws} + {offset}", case.expected.size))
            expected.append(case.expected)
    for index in range(8):
        case = fully_connected_case(rng, gather=True)
        rows, depth, units = case.args[:3]
        offset = max(0, (rows - 1) * (units - depth))   # row r's outputs end before row r + 1
        size = max(offset + rows * depth, rows * units)
        ws = _garbage(rng, size)
        ws[offset:offset + rows * depth] = case.arrays[0]
        kernel = case.kernel(f"fc{index}")
        names = [f"{kernel.name}_ws"] + [f"{kernel.name}_a{j}" for j in range(2, 7)]
        definitions += [_c_array(n, a) for n, a in zip(names, [ws, *case.arrays[2:]])]
        definitions.append(kernel.source)
        calls.append(_call(kernel, [f"{names[0]} + {offset}", *names], names[0],
                           case.expected.size))
        expected.append(case.expected)
    for got, want in zip(_run_harness(tmp_path, definitions, calls), expected, strict=True):
        assert np.array_equal(np.frombuffer(got, np.int8).reshape(want.shape), want)


# ------------------------------------------------------------------ llvm
@pytest.mark.parametrize("seed", range(2))
def test_prim_funcs_on_llvm_equal_the_reference(seed):
    """The same PrimFuncs built by TVM for llvm (one module), run on tvm.runtime tensors."""
    cases = all_cases(seed)
    funcs = {f"k{i}": case.prim_func(f"k{i}") for i, case in enumerate(cases)}
    module = tvm.tirx.build(tvm.IRModule(funcs), target="llvm")
    for i, case in enumerate(cases):
        tensors = [tvm.runtime.tensor(a) for a in case.arrays]
        module[f"k{i}"](*tensors)
        got = tensors[case.output].numpy().reshape(case.expected.shape)
        assert np.array_equal(got, case.expected), (case.op, case.args)


# ------------------------------------------------------------------ Cortex-M0+
@pytest.mark.skipif(ARM_CC is None, reason="arm-none-eabi-gcc is not installed")
def test_c_builds_for_cortex_m0plus(tmp_path):
    """-Os -Wall -Wextra -Werror, freestanding; the object needs nothing but libgcc helpers,
    memcpy and memset (the kernels' contiguous copies and PAD's fill), no TVM symbol and no
    division or 64-bit multiply helper."""
    cases = all_cases(0)
    definitions, calls = [], []
    for index, case in enumerate(cases):
        kernel = case.kernel(f"k{index}")
        definitions.append(kernel.source)
        pointers = ["(int8_t *)p" if a.dtype == np.int8 else f"({_CTYPES[a.dtype.name]} *)p"
                    for a in case.arrays]
        calls.append(f"  {kernel.name}({', '.join(pointers)});")
    source = "\n".join(["#include <stdint.h>", "#include <string.h>", *definitions,
                        "void run_all(void *p) {",
                        *calls, "}", ""])
    symbols, undefined = cortex_m0plus_symbols(source, tmp_path)
    assert not re.search(r"tvm|TVM", symbols)
    assert all(s.startswith("__aeabi_") or s in ("memcpy", "memset") for s in undefined), \
        undefined
    assert not undefined & {"__aeabi_lmul", "__aeabi_idiv", "__aeabi_uidiv"}, undefined
    assert "T run_all" in symbols


# ------------------------------------------------------------------ ABI and refusals
def _prototype(source: str, name: str) -> str:
    match = re.search(rf"static void {name}\((?P<args>[^)]*)\)", source)
    assert match, source
    return re.sub(r"\s+", " ", match["args"])


def _abi(case: Case) -> tuple[str, int, int]:
    """The prototype and scratch graph_c calls each kernel with."""
    io = "const int8_t *input, int8_t *output"
    if case.op == "mean":
        return f"{io}, int32_t *acc", 0, case.args[2]
    if case.op == "fully_connected":
        tables = f"{io}, const int8_t *weight, const int32_t *bias, const int32_t *multiplier, " \
            "const int32_t *shift"
        gather = case.args[-1]
        return tables + (", int16_t *scratch" if gather else ""), case.args[1] if gather else 0, 0
    if case.op == "concatenation":
        inputs = ", ".join(f"const int8_t *input{k}" for k in range(len(case.args[0])))
        return f"{inputs}, int8_t *output", 0, 0
    if case.op == "resize_nearest":
        return f"{io}, const int32_t *rows, const int32_t *cols", 0, 0
    return io, 0, 0


@pytest.mark.parametrize("op", OPS)
def test_prototypes_and_scratch_are_the_graph_emitters_abi(op):
    """Parameter names, types and order and the scratch graph_c passes; the C calls no
    serenity_* helper (requantization inlined) and divides nowhere."""
    cases = random_cases(op, 5, 6)
    if op == "fully_connected":
        cases += [fully_connected_case(np.random.default_rng(g), gather=g) for g in (False, True)]
    for case in cases:
        kernel = case.kernel("k")
        assert (_prototype(kernel.source, kernel.name), kernel.scratch16,
                kernel.scratch32) == _abi(case)
        assert "serenity_" not in kernel.source and "/" not in re.sub(
            r"/\*.*?\*/", "", kernel.source, flags=re.S)


@pytest.mark.parametrize("op, args, message", [
    ("mean", (0, 3, 4, 0, 1 << 30, 0, 0), "k: empty MEAN (0x3x4)"),
    ("mean", (1, 3, 4, 200, 1 << 30, 0, 0), "k: 200 is not an int8 value"),
    ("mean", (1, 3, 4, 0, 1 << 31, 0, 0), "k: requantization (2147483648, 0) is not a "
     "multiplier in [0, 2^31) with a shift in [-31, 30]"),
    ("mean", (1, 3, 4, 0, 1 << 30, 31, 0), "k: requantization (1073741824, 31) is not a "
     "multiplier in [0, 2^31) with a shift in [-31, 30]"),
    ("fully_connected", (1, 0, 4, 0, 0, -128, 127, False), "k: empty FULLY_CONNECTED (1x0 -> 4)"),
    ("fully_connected", (1, 4, 4, 0, 0, -129, 127, True), "k: -129 is not an int8 value"),
    ("transpose", ((2, 3, 4), (0, 1, 1)), "k: [0, 1, 1] is not a permutation of 3 axes"),
    ("concatenation", ([(2, 3), (3, 3)], 1),
     "k: shapes [(2, 3), (3, 3)] do not concatenate along axis 1"),
    ("pad", ((2, 3), [[0, 1], [-1, 0]], 0), "k: paddings [(0, 1), (-1, 0)] do not fit a rank-2 "
     "tensor (negative padding is not supported)"),
    ("pad", ((2, 3), [[0, 1]], 0), "k: paddings [(0, 1)] do not fit a rank-2 tensor (negative "
     "padding is not supported)"),
    ("pad", ((2, 3), [[0, 1], [1, 0]], 300), "k: 300 is not an int8 value"),
    ("strided_slice", ((1, 6, 6, 2), (0, 1, 0, 0), (1, 2, 1, 1), (1, 4, 6, 2)),
     "k: axis 1 reads 4 elements from 1 by 2, not inside its 6 (empty slices are not supported)"),
    ("strided_slice", ((1, 6, 6, 2), (0, 0, 0, 0), (1, 1, 1, 1), (1, 0, 6, 2)),
     "k: axis 1 reads 0 elements from 0 by 1, not inside its 6 (empty slices are not supported)"),
    ("strided_slice", ((6, 6), (0, 0, 0), (1, 1, 1), (1, 1, 1)),
     "k: 3/3/3 start/stride/count values for a rank-2 tensor"),
    ("resize_nearest", ((4, 4, 2), (8, 8)), "k: RESIZE_NEAREST_NEIGHBOR of [4, 4, 2] to [8, 8]: "
     "NHWC input and a non-empty size only"),
    ("resize_nearest", ((1, 4, 4, 2), (0, 8)), "k: RESIZE_NEAREST_NEIGHBOR of [1, 4, 4, 2] to "
     "[0, 8]: NHWC input and a non-empty size only"),
    ("arg_max", (2, 0, 3, "int8"), "k: empty ARG_MAX (2x0x3)"),
    ("arg_max", (2, 4, 3, "int16"), "k: ARG_MAX of int16 (int8 or float32 only)"),
])
def test_refusals_name_what_is_wrong(op, args, message):
    for build in (f"{op}_kernel", f"{op}_prim_func"):
        with pytest.raises(CodegenError) as refused:
            getattr(layout_ops, build)("k", *args)
        assert str(refused.value) == message
