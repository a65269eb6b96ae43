"""Generated int8 kernels (tvm_serenity.codegen): RiP == dual buffer == TFLite reference.

Every kernel runs on llvm with ``tvm.runtime`` tensors in both layouts and is compared byte for
byte with ``frontend.reference`` (the project's numpy restatement of TFLite's int8 kernels);
the emitted C is compiled with the host gcc (-std=c99 -Wall -Wextra -Werror) in a generated
harness and with arm-none-eabi-gcc for the Pico's Cortex-M0+.
"""

from __future__ import annotations

import random
import re
import shutil
import subprocess
from dataclasses import dataclass, field

import numpy as np
import pytest
import tvm

from tvm_serenity.codegen import (AddRescale, CodegenError, LayerSpec, build_llvm,
                                  c_prototype, emit_c_kernel, kernel_params, make_prim_func)
from tvm_serenity.frontend import reference as ref
from tvm_serenity.rip import ConvGeometry, rip_workspace_bytes


# ------------------------------------------------------------------ cases and references
@dataclass
class Case:
    """A layer with random data, its ABI arrays (besides input/output) and the expected
    output from the numpy reference."""

    spec: LayerSpec
    x: np.ndarray                                 # int8 H x W x C
    expected: np.ndarray                          # int8 H_out x W_out x C_out
    arrays: dict = field(default_factory=dict)    # weight, bias, ..., input2 (flat)


def _requant(rng, channels, zero_point, act):
    reals = 10.0 ** rng.uniform(-4.5, 0.6, channels)   # shifts from about -14 to +2
    pairs = [ref.quantize_multiplier(r) for r in reals]
    return ref.Requant(np.array([m for m, _ in pairs], dtype=np.int64),
                       np.array([s for _, s in pairs], dtype=np.int64), zero_point, *act)


def _activation(rng):
    return ((-128, 127), (-100, 90), (0, 127))[rng.integers(3)]


def make_case(spec: LayerSpec, seed: int) -> Case:
    rng = np.random.default_rng(seed)
    g = spec.geometry
    x = rng.integers(-128, 128, g.in_hwc, dtype=np.int8)
    zp_in, zp_out = spec.input_zero_point, spec.output_zero_point
    act = (spec.act_min, spec.act_max)
    if spec.op in ("conv2d", "depthwise_conv2d"):
        shape = ((g.out_channels,) + g.kernel + (g.in_channels,) if spec.op == "conv2d"
                 else (1,) + g.kernel + (g.out_channels,))
        weight = rng.integers(-127, 128, shape, dtype=np.int8)
        bias = rng.integers(-40000, 40000, g.out_channels).astype(np.int32)
        requant = _requant(rng, g.out_channels, zp_out, act)
        params = ref.ConvParams(g.stride, g.dilation, g.padding, zp_in, requant)
        kernel = ref.conv2d_int8 if spec.op == "conv2d" else ref.depthwise_conv2d_int8
        expected = kernel(x[None], weight, bias, params)[0]
        arrays = {"weight": weight.ravel(), "bias": bias,
                  "multiplier": requant.multiplier.astype(np.int32),
                  "shift": requant.shift.astype(np.int32)}
    elif spec.op in ("max_pool2d", "avg_pool2d"):
        params = ref.PoolParams(g.kernel, g.stride, g.padding, *act)
        kernel = ref.max_pool_int8 if spec.op == "max_pool2d" else ref.average_pool_int8
        expected, arrays = kernel(x[None], params)[0], {}
    else:
        x2 = rng.integers(-128, 128, g.in_hwc, dtype=np.int8)
        expected = ref.add_int8(x, x2, _reference_add_params(spec))
        arrays = {"input2": x2.ravel()}
    return Case(spec, x, expected, arrays)


def _add_spec(hwc, seed) -> LayerSpec:
    """An ADD with TFLite's parameters for random scales (``ref.add_params``)."""
    rng = np.random.default_rng(seed)
    s1, s2, so = 10.0 ** rng.uniform(-2.5, -1, 3)
    zp1, zp2, zpo = (int(v) for v in rng.integers(-128, 128, 3))
    p = ref.add_params(s1, zp1, s2, zp2, so, zpo, ("NONE", "RELU")[seed % 2])
    rescale = AddRescale(p.input2_zero_point, p.input1_multiplier, p.input1_shift,
                         p.input2_multiplier, p.input2_shift, p.output.multiplier,
                         p.output.shift, p.left_shift)      # numpy integers are accepted
    return LayerSpec.elementwise_add(hwc, rescale, input_zero_point=zp1,
                                     output_zero_point=zpo, act_min=p.output.act_min,
                                     act_max=p.output.act_max)


def _reference_add_params(spec: LayerSpec) -> ref.AddParams:
    r = spec.add
    return ref.AddParams(spec.input_zero_point, r.input2_zero_point, r.input1_multiplier,
                         r.input1_shift, r.input2_multiplier, r.input2_shift,
                         ref.Requant(np.int64(r.output_multiplier), np.int64(r.output_shift),
                                     spec.output_zero_point, spec.act_min, spec.act_max),
                         r.left_shift)


def abi_arrays(case: Case, layout: str, garbage_seed: int = 1) -> list[np.ndarray]:
    """One flat array per kernel parameter; everything the kernel must not depend on (the
    RiP gap, the output buffer, the scratch) is filled with garbage."""
    garbage = np.random.default_rng(garbage_seed)
    spec = case.spec
    out = []
    for p in kernel_params(spec, layout):
        if p.name == "ws":
            ws = garbage.integers(-128, 128, p.elements, dtype=np.int8)
            ws[spec.rip_input_offset:] = case.x.ravel()
            out.append(ws)
        elif p.name == "input":
            out.append(case.x.ravel().copy())
        elif p.name in case.arrays:
            out.append(np.ascontiguousarray(case.arrays[p.name]))
        else:   # output, scratch
            out.append(garbage.integers(-128, 128, p.elements).astype(p.dtype))
    return out


def output_of(case: Case, layout: str, arrays) -> np.ndarray:
    flat = arrays[0][:case.spec.output_bytes] if layout == "rip" else arrays[1]
    return np.asarray(flat).reshape(case.expected.shape)


def run_llvm(case: Case, layout: str) -> np.ndarray:
    module, symbol = build_llvm(case.spec, layout)
    tensors = [tvm.runtime.tensor(a) for a in abi_arrays(case, layout)]
    module[symbol](*tensors)
    return output_of(case, layout, [t.numpy() for t in tensors])


def check_case(case: Case):
    for layout in ("rip", "dual"):
        got = run_llvm(case, layout)
        assert np.array_equal(got, case.expected), (
            f"{layout} {case.spec}: {np.count_nonzero(got != case.expected)} of "
            f"{got.size} outputs differ")


# ------------------------------------------------------------------ geometries
def same_padding(in_hw, kernel, stride, dilation=(1, 1)):
    return ref.same_padding("SAME", in_hw, kernel, stride, dilation)


NAMED = {
    "3x3 same": lambda: LayerSpec.conv2d((9, 8, 5), 7, 3, padding=(1, 1, 1, 1),
                                         input_zero_point=-7, output_zero_point=3),
    "3x3 s2 asymmetric same": lambda: LayerSpec.conv2d(
        (10, 9, 4), 6, 3, stride=2, padding=same_padding((10, 9), (3, 3), (2, 2)),
        input_zero_point=12, output_zero_point=-5),
    "3x3 dilation 2": lambda: LayerSpec.conv2d((11, 10, 3), 5, 3, dilation=2,
                                               padding=(2, 2, 2, 2), input_zero_point=-128),
    "1x5 kernel": lambda: LayerSpec.conv2d((6, 12, 4), 4, (1, 5), padding=(0, 0, 2, 2)),
    "5x1 kernel s2": lambda: LayerSpec.conv2d((12, 5, 3), 6, (5, 1), stride=(2, 1),
                                              padding=(2, 2, 0, 0), input_zero_point=5),
    "C_out > C_in valid": lambda: LayerSpec.conv2d((7, 7, 2), 16, 3, output_zero_point=-20),
    "C_out < C_in": lambda: LayerSpec.conv2d((6, 6, 16), 3, 3, padding=(1, 1, 1, 1)),
    "collapsed H": lambda: LayerSpec.conv2d((1, 9, 6), 8, 3, padding=(1, 1, 1, 1)),
    "collapsed W": lambda: LayerSpec.conv2d((9, 2, 6), 4, 3, stride=(1, 2),
                                            padding=(1, 1, 1, 1)),
    "windows in padding only": lambda: LayerSpec.conv2d((3, 3, 2), 3, 2, dilation=2,
                                                        padding=(3, 3, 3, 3)),
    "7x7 s2 first layer": lambda: LayerSpec.conv2d(
        (16, 16, 3), 8, 7, stride=2, padding=same_padding((16, 16), (7, 7), (2, 2)),
        input_zero_point=-1, act_min=-128, act_max=127),
    "pointwise expand": lambda: LayerSpec.pointwise_conv2d((8, 8, 16), 48,
                                                           input_zero_point=3),
    "pointwise project": lambda: LayerSpec.pointwise_conv2d((7, 7, 48), 16,
                                                            output_zero_point=7),
    "pointwise stride 2": lambda: LayerSpec.conv2d((9, 9, 8), 12, 1, stride=2),
    "depthwise 3x3 same": lambda: LayerSpec.depthwise_conv2d((8, 8, 12), 3,
                                                             padding=(1, 1, 1, 1),
                                                             input_zero_point=-9),
    "depthwise 3x3 s2 asymmetric": lambda: LayerSpec.depthwise_conv2d(
        (9, 10, 8), 3, stride=2, padding=same_padding((9, 10), (3, 3), (2, 2))),
    "depthwise 5x5 dilation 2": lambda: LayerSpec.depthwise_conv2d(
        (12, 12, 4), 5, dilation=2, padding=(4, 4, 4, 4), output_zero_point=11),
    "depthwise collapsed W": lambda: LayerSpec.depthwise_conv2d((6, 1, 5), 3,
                                                                padding=(1, 1, 1, 1)),
    "max pool 2x2 s2": lambda: LayerSpec.max_pool2d((8, 9, 5), 2, 2),
    "max pool 3x3 s2 same": lambda: LayerSpec.max_pool2d(
        (9, 8, 4), 3, 2, padding=same_padding((9, 8), (3, 3), (2, 2)), act_min=-50),
    "avg pool 3x3 s1 same": lambda: LayerSpec.avg_pool2d((7, 6, 6), 3, 1, (1, 1, 1, 1)),
    "avg pool global": lambda: LayerSpec.avg_pool2d((5, 5, 16), 5),
    "avg pool 2x3 s2 asymmetric": lambda: LayerSpec.avg_pool2d(
        (8, 9, 3), (2, 3), 2, padding=same_padding((8, 9), (2, 3), (2, 2)), act_max=60),
    "add": lambda: _add_spec((5, 6, 7), 0),
    "add relu": lambda: _add_spec((3, 4, 9), 1),
}


@pytest.mark.parametrize("name", sorted(NAMED))
def test_named_geometries_llvm(name):
    check_case(make_case(NAMED[name](), seed=sum(map(ord, name))))


def random_spec(rng: random.Random) -> LayerSpec:
    """A random conv2d / depthwise / pointwise layer, 'same' or explicit padding."""
    while True:
        op = rng.choice(("conv2d", "conv2d", "depthwise_conv2d", "pointwise"))
        h, w = rng.randint(1, 10), rng.randint(1, 10)
        cin = rng.randint(1, 12)
        kernel = (1, 1) if op == "pointwise" else (rng.randint(1, 5), rng.randint(1, 5))
        stride = (rng.randint(1, 3), rng.randint(1, 3))
        dilation = (1, 1) if op == "pointwise" else (rng.randint(1, 2), rng.randint(1, 2))
        if op != "pointwise" and rng.random() < 0.4:
            padding = same_padding((h, w), kernel, stride, dilation)
        else:
            padding = tuple(rng.randint(0, 2) for _ in range(4)) if op != "pointwise" \
                else (0, 0, 0, 0)
        quant = dict(input_zero_point=rng.randint(-128, 127),
                     output_zero_point=rng.randint(-128, 127))
        try:
            if op == "depthwise_conv2d":
                return LayerSpec.depthwise_conv2d((h, w, cin), kernel, stride, dilation,
                                                  padding, **quant)
            return LayerSpec.conv2d((h, w, cin), rng.randint(1, 12), kernel, stride, dilation,
                                    padding, **quant)
        except CodegenError:     # the window does not fit the padded input: draw again
            continue


@pytest.mark.parametrize("seed", range(4))
def test_random_geometries_llvm(seed):
    rng = random.Random(seed)
    for index in range(6):
        check_case(make_case(random_spec(rng), seed=1000 * seed + index))


@pytest.mark.slow
def test_many_random_geometries_llvm():
    rng = random.Random(12345)
    for index in range(150):
        check_case(make_case(random_spec(rng), seed=index))


def test_requantization_edge_cases():
    """MultiplyByQuantizedMultiplier on extreme accumulators, multipliers and shifts: a 1x1
    conv of a zero-point input makes ``acc == bias``, so the bias feeds the rescale directly."""
    accs = np.array([0, 1, -1, 2, -2, 3, -3, 1 << 20, -(1 << 20), (1 << 31) - 1, -(1 << 31),
                     -(1 << 31) + 1, 123456789, -123456789, 1 << 30, -(1 << 30), 0x5A5A5A5,
                     -0x5A5A5A5], dtype=np.int64)
    rules = [((1 << 31) - 1, 0), (1 << 30, 0), (1 << 30, -31), ((1 << 31) - 1, -31),
             (1518500250, -1), (1518500250, 1), (1 << 30, 2), (1900000000, -7),
             (1073741825, -20), (0, 0), (1 << 30, 30), (2147483647, 1)]
    channels = len(accs) * len(rules)
    bias = np.tile(accs, len(rules)).astype(np.int32)
    multiplier = np.repeat([m for m, _ in rules], len(accs)).astype(np.int32)
    shift = np.repeat([s for _, s in rules], len(accs)).astype(np.int32)
    spec = LayerSpec.pointwise_conv2d((1, 1, 1), channels, input_zero_point=-17)
    x = np.full((1, 1, 1), -17, dtype=np.int8)
    expected = ref.requantize(bias.astype(np.int64), multiplier.astype(np.int64),
                              shift.astype(np.int64), 0).reshape(1, 1, channels)
    case = Case(spec, x, expected, {"weight": np.ones(channels, np.int8), "bias": bias,
                                     "multiplier": multiplier, "shift": shift})
    check_case(case)
    assert len(set(expected.ravel().tolist())) > 10   # the table exercises many outputs


def test_rip_workspace_is_the_minimum_and_layout_is_as_documented():
    spec = NAMED["C_out > C_in valid"]()
    g = spec.geometry
    minimum = rip_workspace_bytes(g.in_hwc, g.out_channels, g.kernel, g.stride, g.dilation,
                                  g.padding)
    assert spec.rip_workspace_bytes == minimum > max(spec.input_bytes, spec.output_bytes)
    assert spec.rip_input_offset == minimum - spec.input_bytes == spec.rip.gap_bytes
    params = kernel_params(spec, "rip")
    assert [p.name for p in params] == ["ws", "weight", "bias", "multiplier", "shift",
                                        "scratch"]
    assert params[0].elements == minimum and params[-1].elements == 3 * 3 * 2
    func = make_prim_func(spec, "rip")
    assert [p.name for p in func.params] == [p.name for p in params]
    assert "elem_offset=" + str(spec.rip_input_offset) in func.script()
    # a larger workspace moves the input, not the output
    bigger = LayerSpec.conv2d(g.in_hwc, g.out_channels, g.kernel, workspace_bytes=minimum + 5)
    assert bigger.rip_input_offset == spec.rip_input_offset + 5
    case = make_case(bigger, seed=3)
    assert np.array_equal(run_llvm(case, "rip"), case.expected)


def test_layouts_share_the_loops():
    """The two layouts differ only in the buffer declarations."""
    spec = NAMED["3x3 same"]()

    def loops(layout):
        text = make_prim_func(spec, layout, "k").script()
        return text[text.index("for oh"):]

    rip, dual = loops("rip"), loops("dual")
    assert rip.replace("input", "X").replace("output", "Y") == \
        dual.replace("input", "X").replace("output", "Y")


@pytest.mark.parametrize("bad, message", [
    (lambda: LayerSpec("conv3d", LayerSpec.conv2d((4, 4, 2), 2, 3).geometry), "op must be"),
    (lambda: LayerSpec.conv2d((4, 4, 2), 2, 5), "does not fit"),
    (lambda: LayerSpec.conv2d((4, 4, 2), 2, 3, input_zero_point=128), "input_zero_point"),
    (lambda: LayerSpec.conv2d((4, 4, 2), 2, 3, act_min=10, act_max=0), "exceeds"),
    (lambda: LayerSpec.conv2d((4, 4, 2), 2, 3, output_zero_point=1.5), "integer"),
    (lambda: LayerSpec("conv2d", ConvGeometry((4, 4, 4), 4, 3, groups=2)), "not grouped"),
    (lambda: LayerSpec("depthwise_conv2d", ConvGeometry((4, 4, 4), 8, 3, groups=4)),
     "groups == in_channels == out_channels"),
    (lambda: LayerSpec.conv2d((4, 4, 2), 4, 3, workspace_bytes=10), "below"),
    (lambda: LayerSpec.avg_pool2d((4, 4, 2), 2, 1, (3, 0, 0, 0)), "entirely in the padding"),
    (lambda: LayerSpec.max_pool2d((4, 4, 2), 2, 1, (1, 1, 1, 1), act_min=5, act_max=1),
     "exceeds"),
    (lambda: AddRescale(0, 1 << 30, 1, 1 << 30, -1, 1 << 30, -20), "shift"),
    (lambda: kernel_params(LayerSpec.conv2d((4, 4, 2), 2, 3), "inplace"), "layout"),
])
def test_invalid_specs_are_rejected(bad, message):
    with pytest.raises(CodegenError, match=message):
        bad()


# ------------------------------------------------------------------ plain C
C_CASES = ("3x3 s2 asymmetric same", "3x3 dilation 2", "1x5 kernel", "collapsed W",
           "windows in padding only", "pointwise expand", "depthwise 3x3 s2 asymmetric",
           "depthwise 5x5 dilation 2", "max pool 3x3 s2 same", "avg pool 2x3 s2 asymmetric",
           "add relu")
HOST_CC = shutil.which("gcc") or shutil.which("cc")
ARM_CC = shutil.which("arm-none-eabi-gcc")


def _c_array(name: str, array: np.ndarray, const: bool) -> str:
    ctype = {"int8": "int8_t", "int16": "int16_t", "int32": "int32_t"}[array.dtype.name]
    values = ",".join(str(int(v)) for v in array.ravel())
    return f"static {'const ' if const else ''}{ctype} {name}[{max(array.size, 1)}] = {{{values}}};"


def c_harness(cases: list[Case]) -> tuple[str, list[tuple[Case, str]]]:
    """One C program running every case in both layouts; it prints one hex line each."""
    parts, calls, runs = ["#include <stdio.h>"], [], []
    for index, case in enumerate(cases):
        for layout in ("rip", "dual"):
            name = f"k{index}_{layout}"
            parts.append(emit_c_kernel(case.spec, layout, name))
            params = kernel_params(case.spec, layout)
            args = []
            for p, array in zip(params, abi_arrays(case, layout)):
                parts.append(_c_array(f"{name}_{p.name}", array, not p.writable))
                args.append(f"{name}_{p.name}")
            out = f"{name}_{'ws' if layout == 'rip' else 'output'}"
            calls.append(f"  {name}({', '.join(args)});\n"
                         f"  for (i = 0; i < {case.spec.output_bytes}; ++i) "
                         f"printf(\"%02x\", (unsigned)(uint8_t){out}[i]);\n  printf(\"\\n\");")
            runs.append((case, layout))
    main = "int main(void) {\n  int i;\n" + "\n".join(calls) + "\n  return 0;\n}\n"
    return "\n".join(parts) + "\n" + main, runs


@pytest.mark.skipif(HOST_CC is None, reason="no host C compiler")
def test_plain_c_matches_reference_on_host(tmp_path):
    cases = [make_case(NAMED[name](), seed=7 + i) for i, name in enumerate(C_CASES)]
    source, runs = c_harness(cases)
    (tmp_path / "harness.c").write_text(source)
    subprocess.run([HOST_CC, "-std=c99", "-Wall", "-Wextra", "-Werror", "-O2", "harness.c",
                    "-o", "harness"], cwd=tmp_path, check=True, capture_output=True, text=True)
    lines = subprocess.run([str(tmp_path / "harness")], check=True, capture_output=True,
                           text=True).stdout.split()
    assert len(lines) == len(runs)
    for (case, layout), line in zip(runs, lines):
        got = np.frombuffer(bytes.fromhex(line), dtype=np.int8).reshape(case.expected.shape)
        assert np.array_equal(got, case.expected), (layout, case.spec)
    # and the C agrees with the llvm build byte for byte (same TIR, two back ends)
    assert np.array_equal(run_llvm(cases[0], "rip"), cases[0].expected)


@pytest.mark.skipif(ARM_CC is None, reason="arm-none-eabi-gcc is not installed")
def test_plain_c_builds_for_cortex_m0plus_without_tvm_symbols(tmp_path):
    specs = [NAMED[name]() for name in C_CASES]
    source = "\n".join(emit_c_kernel(spec, layout, f"k{i}_{layout}")
                       for i, spec in enumerate(specs) for layout in ("rip", "dual"))
    (tmp_path / "kernels.c").write_text(source)
    subprocess.run([ARM_CC, "-mcpu=cortex-m0plus", "-mthumb", "-Os", "-ffreestanding",
                    "-std=c99", "-Wall", "-Wextra", "-Werror", "-c", "kernels.c", "-o",
                    "kernels.o"], cwd=tmp_path, check=True, capture_output=True, text=True)
    nm = shutil.which("arm-none-eabi-nm") or "nm"
    symbols = subprocess.run([nm, "-S", "kernels.o"], cwd=tmp_path, check=True,
                             capture_output=True, text=True).stdout
    assert not re.search(r"tvm|TVM", symbols)
    undefined = set(re.findall(r"^\s+U (\S+)$", symbols, re.M))
    assert all(s.startswith("__aeabi_") for s in undefined), undefined   # libgcc helpers only
    sizes = {name: int(size, 16) for size, kind, name in
             re.findall(r"^[0-9a-f]+ ([0-9a-f]+) ([Tt]) (\S+)$", symbols, re.M)}
    assert set(sizes) == {f"k{i}_{layout}" for i in range(len(specs))
                          for layout in ("rip", "dual")}
    for i in range(len(specs)):   # same loops, other base pointers: same code size +- a few
        assert abs(sizes[f"k{i}_rip"] - sizes[f"k{i}_dual"]) <= 16, (C_CASES[i], sizes)


def test_emitted_c_declares_the_abi():
    spec = NAMED["depthwise 3x3 same"]()
    text = emit_c_kernel(spec, "dual", "dw")
    prototype = c_prototype(spec, "dual", "dw")
    assert prototype == ("void dw(const int8_t *input, int8_t *output, const int8_t *weight, "
                         "const int32_t *bias, const int32_t *multiplier, const int32_t *shift, "
                         "int16_t *scratch)")
    assert text.count(prototype) == 2 and text.startswith("#include <stdint.h>")
    assert "__tvm_ffi_main" not in text and "TVM" not in text
    rip = emit_c_kernel(spec, "rip")
    assert f"ws[{spec.rip_workspace_bytes}]" in rip
    assert "void depthwise_conv2d_3x3s1x1_8x8x12_to_12_rip(int8_t *ws, const int8_t *weight" \
        in rip
