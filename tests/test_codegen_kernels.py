"""Generated int8 kernels (tvm_serenity.codegen): RiP == dual buffer == TFLite reference.

Every kernel runs on llvm with ``tvm.runtime`` tensors in both layouts and is compared byte for
byte with ``frontend.reference`` (the project's numpy restatement of TFLite's int8 kernels);
the emitted C is compiled with the host gcc (-std=c99 -Wall -Wextra -Werror) in a generated
harness and with arm-none-eabi-gcc for the Pico's Cortex-M0+.  RiP workspaces are the minimum
``S*`` with garbage in the gap (and garbage output buffers and scratch).  The 32-bit
requantization is checked exhaustively on edge operands and on millions of random ones against
the reference, and one-layer models compare the RiP and dual-buffer cycles in rp2040js.
"""

from __future__ import annotations

import ctypes
import dataclasses
import random
import re
import shutil
import subprocess
from dataclasses import dataclass, field

import numpy as np
import pytest
import tvm
from hypothesis import given, settings, strategies as st

import tflite_cases
from test_elementwise_ops import _softmax_rows

from tvm_serenity import SerenityError
from tvm_serenity.codegen import (AddRescale, CodegenError, LayerSpec, build_llvm,
                                  c_prototype, emit_c_kernel, kernel_params, make_prim_func,
                                  pack_conv2d_weight)
from tvm_serenity.codegen.kernels import (REQUANTIZE_SYMBOL, default_kernel_name,
                                          requantize_prim_func)
from tvm_serenity.codegen.layout_ops import strided_slice_kernel
from tvm_serenity.codegen.plain_c import requantize_c_function
from tvm_serenity.deploy import compile_tflite, run
from tvm_serenity.frontend import reference as ref
from tvm_serenity.micro.runners import find_rp2040js
from tvm_serenity.rip import (ChannelSimulator, ConvGeometry, CorruptionSimulator,
                              choose_inplace, rip_workspace_bytes)


# ------------------------------------------------------------------ cases and references
@dataclass
class Case:
    """A layer with random data, its ABI arrays (besides input/output) and the expected
    output from the numpy reference."""

    spec: LayerSpec
    x: np.ndarray                                 # int8 H x W x C
    expected: np.ndarray                          # int8 H_out x W_out x C_out
    arrays: dict = field(default_factory=dict)    # weight, bias, ..., input2 (flat)


def _requant(rng, channels, zero_point, act, right_shifts: bool = False):
    # shifts from about -14 to +2, or to 0 (scales below 1) for a right_shifts kernel
    reals = 10.0 ** rng.uniform(-4.5, -0.01 if right_shifts else 0.6, channels)
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
        requant = _requant(rng, g.out_channels, zp_out, act, spec.right_shifts)
        params = ref.ConvParams(g.stride, g.dilation, g.padding, zp_in, requant)
        kernel = ref.conv2d_int8 if spec.op == "conv2d" else ref.depthwise_conv2d_int8
        expected = kernel(x[None], weight, bias, params)[0]
        arrays = {"weight": pack_conv2d_weight(weight) if spec.op == "conv2d" else weight.ravel(),
                  "bias": bias,
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
    check_cases([case])


def check_cases(cases: list[Case]):
    """Every case's RiP and dual-buffer kernel on llvm equals its expected output. All the
    kernels are built as one module: one LLVM invocation instead of one per kernel."""
    funcs = {f"k{i}_{layout}": make_prim_func(case.spec, layout, f"k{i}_{layout}")
             for i, case in enumerate(cases) for layout in ("rip", "dual")}
    module = tvm.tirx.build(tvm.IRModule(funcs), target="llvm")
    for i, case in enumerate(cases):
        for layout in ("rip", "dual"):
            tensors = [tvm.runtime.tensor(a) for a in abi_arrays(case, layout)]
            module[f"k{i}_{layout}"](*tensors)
            got = output_of(case, layout, [t.numpy() for t in tensors])
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
    # padding corners: asymmetric padding on opposite corners, windows that lie entirely in
    # the padding without dilation (a whole window row is a run of zeros), partial channel
    # groups (C_out not a multiple of 4), row remainders of the channel-wise row blocks
    "padding corners s2": lambda: LayerSpec.conv2d((5, 4, 3), 5, 3, stride=2,
                                                   padding=(2, 0, 0, 2), input_zero_point=9),
    "windows in padding, no dilation": lambda: LayerSpec.conv2d(
        (2, 2, 2), 3, 3, padding=(3, 3, 4, 4), input_zero_point=-30, output_zero_point=12),
    "C_out 1": lambda: LayerSpec.pointwise_conv2d((4, 4, 9), 1, input_zero_point=-2),
    "C_out 5 s2 same": lambda: LayerSpec.conv2d(
        (6, 5, 7), 5, 3, stride=2, padding=same_padding((6, 5), (3, 3), (2, 2))),
    "pointwise s2 padded, C_out 3": lambda: LayerSpec.conv2d((7, 7, 6), 3, 1, stride=2,
                                                             padding=(1, 0, 1, 0)),
    "depthwise W_out 7 (block rest 1)": lambda: LayerSpec.depthwise_conv2d(
        (7, 7, 5), 3, padding=(1, 1, 1, 1), input_zero_point=100),
    "depthwise W_out 3 (no rest)": lambda: LayerSpec.depthwise_conv2d(
        (6, 3, 4), 3, padding=(1, 1, 1, 1), output_zero_point=-60),
    "depthwise 7x7 s2 same": lambda: LayerSpec.depthwise_conv2d(
        (15, 13, 6), 7, stride=2, padding=same_padding((15, 13), (7, 7), (2, 2)),
        input_zero_point=-3, act_min=-128, act_max=90),
    "depthwise 5x5 windows in padding": lambda: LayerSpec.depthwise_conv2d(
        (3, 3, 4), 5, padding=(4, 4, 4, 4), input_zero_point=17),
    "depthwise 1x3 s(1,2)": lambda: LayerSpec.depthwise_conv2d(
        (4, 11, 3), (1, 3), stride=(1, 2), padding=(0, 0, 1, 1)),
    "max pool 3x3 s2 W_out 4": lambda: LayerSpec.max_pool2d(
        (7, 8, 3), 3, 2, padding=same_padding((7, 8), (3, 3), (2, 2))),
    "avg pool 3x3 s1 W_out 5": lambda: LayerSpec.avg_pool2d((4, 5, 7), 3, 1, (1, 1, 1, 1),
                                                            act_min=-100),
}


@pytest.mark.parametrize("name", sorted(NAMED))
def test_named_geometries_llvm(name):
    check_case(make_case(NAMED[name](), seed=sum(map(ord, name))))


def random_spec(rng: random.Random) -> LayerSpec:
    """A random conv2d / depthwise / pointwise / pooling layer, 'same' or explicit padding;
    half the depthwise layers at :func:`choose_inplace`'s workspace (channel-wise in place
    where RiP would need a gap)."""
    while True:
        op = rng.choice(("conv2d", "conv2d", "depthwise_conv2d", "depthwise_conv2d",
                         "pointwise", "max_pool2d", "avg_pool2d"))
        h, w = rng.randint(1, 10), rng.randint(1, 10)
        cin = rng.randint(1, 12)
        kernel = (1, 1) if op == "pointwise" else (rng.randint(1, 5), rng.randint(1, 5))
        stride = (rng.randint(1, 3), rng.randint(1, 3))
        dilation = (1, 1) if op in ("pointwise", "max_pool2d", "avg_pool2d") \
            else (rng.randint(1, 2), rng.randint(1, 2))
        if op != "pointwise" and rng.random() < 0.4:
            padding = same_padding((h, w), kernel, stride, dilation)
        else:
            padding = tuple(rng.randint(0, 2) for _ in range(4)) if op != "pointwise" \
                else (0, 0, 0, 0)
        quant = dict(input_zero_point=rng.randint(-128, 127),
                     output_zero_point=rng.randint(-128, 127),
                     right_shifts=rng.random() < 0.5)
        try:
            if op in ("max_pool2d", "avg_pool2d"):
                make = LayerSpec.max_pool2d if op == "max_pool2d" else LayerSpec.avg_pool2d
                low = rng.randint(-128, 0)
                return make((h, w, cin), kernel, stride, padding, act_min=low,
                            act_max=rng.randint(low, 127))
            if op == "depthwise_conv2d":
                spec = LayerSpec.depthwise_conv2d((h, w, cin), kernel, stride, dilation,
                                                  padding, **quant)
                if rng.random() < 0.5:  # the workspace graph builders record (channel-wise)
                    workspace = choose_inplace(op, spec.geometry).workspace_bytes
                    spec = LayerSpec.depthwise_conv2d((h, w, cin), kernel, stride, dilation,
                                                      padding, workspace_bytes=workspace,
                                                      **quant)
                return spec
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
    check_cases([make_case(random_spec(rng), seed=index) for index in range(150)])


def _pitched_case(rng: random.Random, seed: int):
    """A random window layer run on a window of wider tensors: its input ``extra_in`` columns
    narrower than the rows it is cut from, its output written into rows ``extra_out`` columns
    wider (a patch of :mod:`tvm_serenity.rewrite.patch`)."""
    while True:
        spec = random_spec(rng)
        if spec.workspace_bytes is None:
            break
    g = spec.geometry
    extra_in, extra_out = rng.randint(0, 3), rng.randint(0, 3)
    pitched = dataclasses.replace(spec, input_row_pitch=(g.in_width + extra_in) * g.in_channels,
                                  output_row_pitch=(g.out_width + extra_out) * g.out_channels)
    return make_case(spec, seed), pitched, extra_in, extra_out


@pytest.mark.parametrize("seed", range(3))
def test_kernels_read_and_write_rows_of_wider_tensors(seed):
    """With row pitches the kernel reads its input out of a wider tensor (the first layer of a
    patch) and writes its rows into a wider one (the last), touching nothing else."""
    rng = random.Random(100 + seed)
    garbage = np.random.default_rng(seed)
    for index in range(6):
        case, spec, extra_in, extra_out = _pitched_case(rng, 7000 * seed + index)
        g = spec.geometry
        wide_in = garbage.integers(-128, 128, (g.in_height, g.in_width + extra_in,
                                               g.in_channels), dtype=np.int8)
        first = rng.randint(0, extra_in)
        wide_in[:, first:first + g.in_width] = case.x
        wide_out = garbage.integers(-128, 128, (g.out_height, g.out_width + extra_out,
                                                g.out_channels), dtype=np.int8)
        at = rng.randint(0, extra_out)
        before = wide_out.copy()
        params = kernel_params(spec, "dual")
        arrays = []
        for p in params:
            if p.name == "input":
                arrays.append(wide_in.ravel()[first * g.in_channels:][:p.elements].copy())
            elif p.name == "output":
                arrays.append(wide_out.ravel()[at * g.out_channels:][:p.elements].copy())
            elif p.name in case.arrays:
                arrays.append(np.ascontiguousarray(case.arrays[p.name]))
            else:
                arrays.append(garbage.integers(-128, 128, p.elements).astype(p.dtype))
        module, symbol = build_llvm(spec, "dual")
        tensors = [tvm.runtime.tensor(a) for a in arrays]
        module[symbol](*tensors)
        flat = wide_out.ravel()
        flat[at * g.out_channels:][:params[1].elements] = tensors[1].numpy()
        region = wide_out[:, at:at + g.out_width]
        assert np.array_equal(region, case.expected), spec
        outside = np.ones(wide_out.shape, bool)
        outside[:, at:at + g.out_width] = False
        assert np.array_equal(wide_out[outside], before[outside]), spec
        assert "rows" in default_kernel_name(spec, "dual") or not (extra_in or extra_out)


def test_row_pitches_are_checked():
    spec = LayerSpec.conv2d((4, 5, 3), 2, 3, padding=(1, 1, 1, 1))
    with pytest.raises(CodegenError, match="input_row_pitch 14 is shorter than a row"):
        dataclasses.replace(spec, input_row_pitch=14)
    with pytest.raises(CodegenError, match="output_row_pitch: only a whole window layer"):
        dataclasses.replace(spec, output_row_pitch=12, workspace_bytes=200)
    assert dataclasses.replace(spec, input_row_pitch=21).input_bytes == 3 * 21 + 15


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
    weight = pack_conv2d_weight(np.ones((channels, 1), np.int8))
    case = Case(spec, x, expected, {"weight": weight, "bias": bias, "multiplier": multiplier,
                                     "shift": shift})
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
    assert params[0].elements == minimum and params[-1].elements == 3 * 3 * 2 + 16
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
    (lambda: LayerSpec.max_pool2d((4, 4, 2), 2, right_shifts=True), "right_shifts"),
    (lambda: LayerSpec.conv2d((4, 4, 2), 2, 3, arithmetic="onnxruntime", right_shifts=True),
     "right_shifts"),
])
def test_invalid_specs_are_rejected(bad, message):
    with pytest.raises(CodegenError, match=message):
        bad()


# ------------------------------------------------------------------ plain C
C_CASES = ("3x3 s2 asymmetric same", "3x3 dilation 2", "1x5 kernel", "collapsed W",
           "windows in padding only", "windows in padding, no dilation", "pointwise expand",
           "C_out 5 s2 same", "depthwise 3x3 s2 asymmetric", "depthwise 5x5 dilation 2",
           "depthwise 7x7 s2 same", "max pool 3x3 s2 same", "avg pool 2x3 s2 asymmetric",
           "add relu")
HOST_CC = shutil.which("gcc") or shutil.which("cc")
ARM_CC = shutil.which("arm-none-eabi-gcc")
needs_host_cc = pytest.mark.skipif(HOST_CC is None, reason="no host C compiler")


def cortex_m0plus_symbols(source: str, tmp_path, *flags: str) -> tuple[str, set[str]]:
    """``source`` compiled for the Pico's Cortex-M0+ (-Os, freestanding, C99, -Wall -Wextra
    -Werror, and ``flags``): the object's ``nm -S`` listing and its undefined symbols."""
    (tmp_path / "kernels.c").write_text(source)
    subprocess.run([ARM_CC, "-mcpu=cortex-m0plus", "-mthumb", "-Os", "-ffreestanding", *flags,
                    "-std=c99", "-Wall", "-Wextra", "-Werror", "-c", "kernels.c", "-o",
                    "kernels.o"], cwd=tmp_path, check=True, capture_output=True, text=True)
    nm = shutil.which("arm-none-eabi-nm") or "nm"
    symbols = subprocess.run([nm, "-S", "kernels.o"], cwd=tmp_path, check=True,
                             capture_output=True, text=True).stdout
    return symbols, set(re.findall(r"^\s+U (\S+)$", symbols, re.M))


def _c_array(name: str, array: np.ndarray, const: bool) -> str:
    ctype = {"int8": "int8_t", "int32": "int32_t"}[array.dtype.name]
    values = ",".join(str(int(v)) for v in array.ravel())
    return (f"static {'const ' if const else ''}{ctype} {name}[{max(array.size, 1)}] = "
            f"{{{values}}};")


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


def check_c_cases(cases: list[Case], directory):
    """Compile ``cases`` into one host program (-Wall -Wextra -Werror) and compare every
    output, both layouts, with the numpy reference; the RiP workspaces are the minimum ``S*``
    with garbage in the gap, the output buffers and scratch are garbage too."""
    source, runs = c_harness(cases)
    (directory / "harness.c").write_text(source)
    subprocess.run([HOST_CC, "-std=c99", "-Wall", "-Wextra", "-Werror", "-O2", "harness.c",
                    "-o", "harness"], cwd=directory, check=True, capture_output=True, text=True)
    lines = subprocess.run([str(directory / "harness")], check=True, capture_output=True,
                           text=True).stdout.split()
    assert len(lines) == len(runs)
    for (case, layout), line in zip(runs, lines):
        got = np.frombuffer(bytes.fromhex(line), dtype=np.int8).reshape(case.expected.shape)
        assert np.array_equal(got, case.expected), (layout, case.spec)


@needs_host_cc
def test_plain_c_matches_reference_on_host(tmp_path):
    cases = [make_case(NAMED[name](), seed=7 + i) for i, name in enumerate(C_CASES)]
    check_c_cases(cases, tmp_path)
    # and the C agrees with the llvm build byte for byte (same TIR, two back ends)
    assert np.array_equal(run_llvm(cases[0], "rip"), cases[0].expected)


@needs_host_cc
@pytest.mark.parametrize("seed", range(2))
def test_random_geometries_plain_c(tmp_path, seed):
    """The C that ships, on random conv2d / depthwise / pointwise / pooling layers."""
    rng = random.Random(100 + seed)
    check_c_cases([make_case(random_spec(rng), seed=500 * seed + i) for i in range(25)],
                  tmp_path)


def _minimum_workspace_channelwise_specs() -> list[LayerSpec]:
    """MCUNet-like depthwise layers (and pools) whose minimum RiP workspace has a gap
    (``S* > N_in``): the output overtakes the input inside the layer."""
    specs = [LayerSpec.depthwise_conv2d((9, 9, 8), 3, padding=(1, 1, 1, 1)),
             LayerSpec.depthwise_conv2d((11, 10, 6), 5, padding=(2, 2, 2, 2),
                                        input_zero_point=-20),
             LayerSpec.depthwise_conv2d((12, 12, 5), 7, padding=(3, 3, 3, 3),
                                        output_zero_point=9),
             LayerSpec.depthwise_conv2d((13, 13, 4), 5, 2, padding=(4, 0, 4, 0)),
             LayerSpec.depthwise_conv2d((9, 9, 4), 3, (1, 2), padding=(1, 1, 1, 1)),
             LayerSpec.depthwise_conv2d((10, 9, 3), 3, dilation=2, padding=(2, 2, 2, 2)),
             LayerSpec.max_pool2d((8, 7, 4), 3, 1, padding=(1, 1, 1, 1)),
             LayerSpec.avg_pool2d((7, 8, 3), 3, 1, padding=(1, 1, 1, 1))]
    for spec in specs:
        assert spec.rip_input_offset > 0, spec    # a real gap, filled with garbage
    return specs


@needs_host_cc
def test_channelwise_kernels_at_the_minimum_workspace(tmp_path):
    """Row-block order (gather a whole output row, then write it) at exactly ``S*``: the
    corruption simulator replays it and finds no clobbered read, and the kernels are
    bit-exact on llvm and in C with garbage in the gap."""
    specs = _minimum_workspace_channelwise_specs()
    for spec in specs:
        g = spec.geometry
        simulator = CorruptionSimulator(g, block_pixels=g.out_width)
        assert simulator.run(spec.rip_workspace_bytes).ok, spec
        # the replay has teeth: without the gap the first rows clobber input still needed
        assert not simulator.run(max(spec.input_bytes, spec.output_bytes)).ok, spec
    cases = [make_case(spec, seed=40 + i) for i, spec in enumerate(specs)]
    for case in cases:
        check_case(case)
    check_c_cases(cases, tmp_path)


def test_row_blocks_are_safe_wherever_pixels_are():
    """For random channel-wise layers, gathering whole rows before writing them never needs
    more workspace than the per-pixel order: the simulator passes at ``S*``."""
    rng = random.Random(7)
    checked = 0
    while checked < 60:
        spec = random_spec(rng)
        if spec.op == "conv2d":
            continue
        g = spec.geometry       # at RiP's S* (channel-kind specs run below it: ChannelSimulator)
        assert CorruptionSimulator(g, block_pixels=g.out_width).run(
            spec.rip.workspace_bytes).ok, spec
        checked += 1


@pytest.mark.skipif(ARM_CC is None, reason="arm-none-eabi-gcc is not installed")
def test_plain_c_builds_for_cortex_m0plus_without_tvm_symbols(tmp_path):
    specs = [NAMED[name]() for name in C_CASES]
    source = "\n".join(emit_c_kernel(spec, layout, f"k{i}_{layout}")
                       for i, spec in enumerate(specs) for layout in ("rip", "dual"))
    # -fno-ipa-icf: GCC would otherwise fold each dual kernel into the identical RiP body
    symbols, undefined = cortex_m0plus_symbols(source, tmp_path, "-fno-ipa-icf")
    assert not re.search(r"tvm|TVM", symbols)
    assert all(s.startswith("__aeabi_") for s in undefined), undefined   # libgcc helpers only
    assert "__aeabi_lmul" not in undefined            # the requantization is 32-bit only
    sizes = {name: int(size, 16) for size, kind, name in
             re.findall(r"^[0-9a-f]+ ([0-9a-f]+) ([Tt]) (\S+)$", symbols, re.M)}
    assert set(sizes) == {f"k{i}_{suffix}" for i in range(len(specs))
                          for suffix in ("rip", "rip_body", "dual")}
    for i in range(len(specs)):   # the RiP kernel runs the dual-layout body: the same C
        # (GCC's interprocedural passes see the one call of each body and may shave a few
        # bytes off it)
        assert abs(sizes[f"k{i}_rip_body"] - sizes[f"k{i}_dual"]) <= 16, (C_CASES[i], sizes)
        assert sizes[f"k{i}_rip"] <= 48                   # plus a call with two base pointers


def test_emitted_c_declares_the_abi():
    spec = NAMED["depthwise 3x3 same"]()
    text = emit_c_kernel(spec, "dual", "dw")
    prototype = c_prototype(spec, "dual", "dw")
    assert prototype == ("void dw(const int8_t *input, int8_t *output, const int8_t *weight, "
                         "const int32_t *bias, const int32_t *multiplier, const int32_t *shift, "
                         "int32_t *scratch)")
    assert text.count(prototype) == 2 and text.startswith("#include <stdint.h>")
    assert "__tvm_ffi_main" not in text and "TVM" not in text and "int64" not in text
    rip = emit_c_kernel(spec, "rip")
    name = "depthwise_conv2d_3x3s1x1_8x8x12_to_12_rip"
    assert f"ws[{spec.rip_workspace_bytes}]" in rip
    assert f"void {name}(int8_t *ws, const int8_t *weight" in rip
    assert f"  {name}_body(ws + {spec.rip_input_offset}, ws, weight, bias, multiplier, " \
        "shift, scratch);" in rip


# ------------------------------------------------------------------ STRIDED_SLICE (graph C)
STRIDED_SLICE_CASES = sorted(tflite_cases.STRIDED_SLICE_MODELS)


def _crop_chain() -> bytes:
    """CONV 3x3 s1 SAME -> STRIDED_SLICE x[:, 1:, 1:, :] -> DEPTHWISE 3x3 s2 VALID ->
    STRIDED_SLICE x[:, ::-1, :, 1::2]: a NASNet-style reduction path (the crop feeds an
    in-place depthwise; the slices read tensors the plan places anywhere in the arena)."""
    rng = np.random.default_rng(4)
    b = tflite_cases.ModelBuilder()
    x = b.add_tensor((1, 11, 11, 4), scale=0.05, zero_point=-3)
    w = b.add_tensor((6, 3, 3, 4), scale=rng.uniform(0.005, 0.02, 6), axis=0,
                     data=rng.integers(-127, 128, (6, 3, 3, 4)))
    bias = b.add_tensor((6,), "int32", data=rng.integers(-500, 500, 6))
    c1 = b.add_tensor((1, 11, 11, 6), scale=0.06, zero_point=5)
    b.add_operator("CONV_2D", [x, w, bias], [c1], {"padding": "SAME", "stride_h": 1,
                                                   "stride_w": 1,
                                                   "fused_activation_function": "RELU"})

    def slice_(src, shape, begin, end, strides, out_shape, **masks):
        consts = [b.add_tensor((4,), "int32", data=v) for v in (begin, end, strides)]
        out = b.add_tensor(out_shape, scale=0.06, zero_point=5)
        b.add_operator("STRIDED_SLICE", [src, *consts], [out], masks)
        return out

    crop = slice_(c1, (1, 11, 11, 6), [0, 1, 1, 0], [0, 0, 0, 0], [1, 1, 1, 1], (1, 10, 10, 6),
                  begin_mask=0b1001, end_mask=0b1111)
    dw = b.add_tensor((1, 3, 3, 6), scale=rng.uniform(0.005, 0.02, 6), axis=3,
                      data=rng.integers(-127, 128, (1, 3, 3, 6)))
    dbias = b.add_tensor((6,), "int32", data=rng.integers(-500, 500, 6))
    d1 = b.add_tensor((1, 4, 4, 6), scale=0.07, zero_point=-9)
    b.add_operator("DEPTHWISE_CONV_2D", [crop, dw, dbias], [d1],
                   {"padding": "VALID", "stride_h": 2, "stride_w": 2, "depth_multiplier": 1})
    out = slice_(d1, (1, 4, 4, 6), [0, -1, 0, 1], [1, 0, 4, 6], [1, -1, 1, 2], (1, 4, 4, 3),
                 end_mask=0b0010)
    return b.build([x], [out])


@needs_host_cc
@pytest.mark.parametrize("case", STRIDED_SLICE_CASES + ["crop_chain"])
def test_strided_slice_bit_exact_on_host(tmp_path, case):
    """The graph C emitter's STRIDED_SLICE kernel against the reference (deploy.run checks
    the output byte for byte), alone and between convolutions."""
    path = tmp_path / f"{case}.tflite"
    path.write_bytes(_crop_chain() if case == "crop_chain"
                     else tflite_cases.STRIDED_SLICE_MODELS[case]())
    compiled = compile_tflite(path, "host", tmp_path / "out")
    slices = [s for s in compiled.emitted.steps if s.op == "STRIDED_SLICE"]
    assert slices and all(s.layout == "dual" for s in slices)
    if case == "crop_chain":
        assert {s.op for s in compiled.emitted.steps if s.layout == "rip"} >= {"DEPTHWISE_CONV_2D"}
    n = compiled.emitted.input_bytes
    for seed in (1, 2):
        run(tmp_path / "out", input=np.random.default_rng(seed).integers(-128, 128, n,
                                                                         dtype=np.int8))


def test_strided_slice_kernel_text_and_checks():
    """A contiguous innermost run is one memcpy per row; a strided one byte copies (written
    out up to four, a loop beyond), from the base offset of ``start`` (rank padded to 4)."""
    crop = strided_slice_kernel("crop", (1, 7, 7, 8), (0, 1, 1, 0), (1, 1, 1, 1), (1, 6, 6, 8))
    assert "memcpy((&(output[dst])), (&(input[src])), (uint64_t)8ULL)" in crop.source
    assert "int32_t src = ((64 + (b * 56)) + (c * 8));" in crop.source       # 7 * 8 + 8
    rank2 = strided_slice_kernel("r2", (8, 10), (6, 1), (-2, 3), (3, 3))
    assert "int32_t src = (61 + (c * -20));" in rank2.source                 # 6 * 10 + 1
    assert "((uint8_t*)out)[2] = ((uint8_t*)in)[6];" in rank2.source
    assert "memcpy" not in rank2.source
    wide = strided_slice_kernel("w", (8, 20), (6, 1), (-2, 3), (3, 6))
    assert "((uint8_t*)out)[d] = ((uint8_t*)in)[(d * 3)];" in wide.source
    with pytest.raises(CodegenError, match="axis 1 reads 4 elements from 1 by 2, not inside"):
        strided_slice_kernel("bad", (1, 6, 6, 2), (0, 1, 0, 0), (1, 2, 1, 1), (1, 4, 6, 2))
    with pytest.raises(CodegenError, match="empty slices are not supported"):
        strided_slice_kernel("empty", (1, 6, 6, 2), (0, 0, 0, 0), (1, 1, 1, 1), (1, 0, 6, 2))


# ------------------------------- HARD_SWISH, LOGISTIC, MUL, ADD, SOFTMAX, RESIZE (graph C)
#: Every single-op model of these operators with one graph input (the two-input MUL/ADD models
#: of SINGLE_OP_MODELS cannot be a model_run; ONE_INPUT_BINARY_MODELS cover MUL and
#: broadcasting/constant ADD instead).
MCU_OP_MODELS = {**{c: f for c, f in tflite_cases.SINGLE_OP_MODELS.items()
                    if c.startswith(("hard_swish", "logistic", "softmax", "resize"))},
                 **tflite_cases.ONE_INPUT_BINARY_MODELS}


@needs_host_cc
@pytest.mark.parametrize("case", sorted(MCU_OP_MODELS))
def test_table_binary_softmax_resize_bit_exact_on_host(tmp_path, case):
    """Each operator compiled by graph_c and run on the host against the reference, byte for
    byte (deploy.run checks): every int8 value in turn, then random inputs. The elementwise
    operators reading the graph input run in place (one address) when the plan aliases them,
    RESIZE on two buffers; the dual-buffer build (rip=False) is bit-exact too."""
    path = tmp_path / f"{case}.tflite"
    path.write_bytes(MCU_OP_MODELS[case]())
    compiled = compile_tflite(path, "host", tmp_path / "out")
    last = compiled.emitted.steps[-1]
    if last.op == "RESIZE_NEAREST_NEIGHBOR":
        assert last.layout == "dual"
    elif case != "mul_se_broadcast_first":   # its first activation is the broadcast one
        assert last.layout == "rip" and last.output_offset == last.input_offset, last
    n = compiled.emitted.input_bytes
    every = np.resize(np.arange(-128, 128, dtype=np.int8), n)
    rng = np.random.default_rng(len(case))
    for x in [every, every[::-1].copy(), *(rng.integers(-128, 128, n, dtype=np.int8)
                                          for _ in range(3))]:
        run(tmp_path / "out", input=x)
    dual = compile_tflite(path, "host", tmp_path / "dual", rip=False)
    assert {s.layout for s in dual.emitted.steps} == {"dual"}
    run(tmp_path / "dual", input=every)


def test_mcu_path_supports_every_int8_operator_of_the_relax_importer():
    """graph_c emits every operator relax_import lowers (DEQUANTIZE to float32 and a float
    QUANTIZE included: the float edges, tests/test_multi_io.py)."""
    from tvm_serenity.codegen.graph_c import SUPPORTED_OPS
    from tvm_serenity.frontend import relax_import
    assert set(relax_import.SUPPORTED_OPS) <= set(SUPPORTED_OPS)


def test_mcu_ops_refuse_what_they_cannot_do(tmp_path):
    from tvm_serenity.codegen.elementwise_ops import mul_kernel, softmax_kernel
    from tvm_serenity.codegen.layout_ops import resize_nearest_kernel
    with pytest.raises(CodegenError, match="overflows TFLite's int32 sum"):
        softmax_kernel("s", 1, 4096, 0)
    with pytest.raises(CodegenError, match=r"\[1, 3\] and \[1, 4\] do not broadcast"):
        mul_kernel("m", (1, 3), (1, 4), (1, 4), 0, 0, 1 << 30, 0, 0)
    with pytest.raises(CodegenError, match="NHWC input"):
        resize_nearest_kernel("r", (4, 4, 2), (8, 8))
    b = tflite_cases.ModelBuilder()                      # rank 5: beyond the 4-D kernel
    x = b.add_tensor((1, 2, 2, 2, 3), scale=0.1, zero_point=0)
    y = b.add_tensor((1, 2, 2, 2, 3), scale=0.1, zero_point=0)
    b.add_operator("MUL", [x, x], [y])
    path = tmp_path / "mul5.tflite"
    path.write_bytes(b.build([x], [y]))
    with pytest.raises(SerenityError, match=r"operator 0 \(MUL\): rank above 4"):
        compile_tflite(path, "host", tmp_path / "out", build=False)


def _shared_library(directory, source: str, name: str) -> ctypes.CDLL:
    (directory / f"{name}.c").write_text(source)
    subprocess.run([HOST_CC, "-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-shared",
                    "-fPIC", f"{name}.c", "-o", f"lib{name}.so"], cwd=directory, check=True,
                   capture_output=True, text=True)
    return ctypes.CDLL(str(directory / f"lib{name}.so"))


_I8 = np.ctypeslib.ndpointer(np.int8, flags="C_CONTIGUOUS")
_I32 = np.ctypeslib.ndpointer(np.int32, flags="C_CONTIGUOUS")

#: (rows, depth, beta, input scale): the three SINGLE_OP_MODELS regimes, MobileNet's 1000
#: classes (whose flat rows divide by 2^32 or more) and the widest row TFLite's sum allows.
SOFTMAX_SHAPES = [(3000, 7, 1.0, 0.1), (2000, 10, 1.0, 0.004), (2000, 17, 0.5, 1.0),
                  (300, 1000, 1.0, 0.0883), (40, 4095, 1.0, 0.05)]


@needs_host_cc
def test_softmax_kernel_matches_the_reference_on_every_kind_of_row(tmp_path):
    """The C SOFTMAX (tables from reference.softmax_tables) against reference.softmax_int8 on
    thousands of rows per regime."""
    from tvm_serenity.codegen.elementwise_ops import softmax_kernel
    rng = np.random.default_rng(11)
    cases, parts = [], ["#include <stdint.h>", "#include <string.h>"]
    for k, (rows, depth, beta, scale) in enumerate(SOFTMAX_SHAPES):
        params = ref.softmax_params(beta, scale)
        exps, terms, valid_from = ref.softmax_tables(params)
        parts.append(softmax_kernel(f"sm{k}", rows, depth, valid_from).source)
        parts.append(f"void run{k}(const int8_t *x, int8_t *y, const int32_t *e, "
                     f"const int32_t *t) {{ sm{k}(x, y, e, t); }}")
        cases.append((k, rows, depth, params, exps, terms))
    library = _shared_library(tmp_path, "\n".join(parts), "softmax")
    for k, rows, depth, params, exps, terms in cases:
        x = _softmax_rows(rng, rows, depth)
        y = np.empty_like(x)
        function = getattr(library, f"run{k}")
        function.argtypes = [_I8, _I8, _I32, _I32]
        function(x, y, exps.astype(np.int32), terms.astype(np.int32))
        assert np.array_equal(y, ref.softmax_int8(x, params)), (rows, depth)
        if depth >= 1000:               # flat rows: RoundingDivideByPOT by >= 2^32
            assert np.any(np.all(y == -127, axis=1))


def _softmax_of_tables(x: np.ndarray, exps: np.ndarray, terms: np.ndarray) -> np.ndarray:
    """reference.softmax_int8's fixed-point steps on given tables (index ``x - max + 255``):
    sum of terms, headroom, gemmlowp's one_over_one_plus_x_for_x_in_0_1 (int64 numpy),
    RoundingDivideByPOT(SRDHM(reciprocal, exp), 35 - headroom) - 128."""
    index = x.astype(np.int64) - x.max(axis=-1, keepdims=True) + 255
    sums = terms.astype(np.int64)[index].sum(axis=-1, keepdims=True)
    headroom = 32 - np.frexp(sums.astype(np.float64))[1]
    shifted = ((sums << headroom) & 0xFFFFFFFF) - (1 << 31)
    scale = ref.one_over_one_plus_x_for_x_in_0_1(shifted)
    out = ref.rounding_divide_by_pot(ref.saturating_rounding_doubling_high_mul(
        scale, exps.astype(np.int64)[index]), 35 - headroom) - 128
    return np.clip(out, -128, 127).astype(np.int8)


@needs_host_cc
def test_softmax_reciprocal_on_edge_and_random_sums(tmp_path):
    """The kernel's inlined GetReciprocal (headroom by binary search, Newton-Raphson in 32
    bits) on row sums the real tables rarely reach: one kernel of 256 rows ``[127, 127 - j]``
    (sum ``terms[255] + terms[255 - j]``) called with crafted tables, the edge sums (2^19,
    2^31 - 1, around 2^30, 2^27 and 2^28, TFLite's largest rows) and 100k log-uniform ones,
    against the reference's int64 steps, every headroom 1..12 covered."""
    from tvm_serenity.codegen.elementwise_ops import softmax_kernel
    source = "\n".join(["#include <stdint.h>", "#include <string.h>",
                        softmax_kernel("sm", 256, 2, 0).source,
                        "void run(const int8_t *x, int8_t *y, const int32_t *e, "
                        "const int32_t *t) { sm(x, y, e, t); }"])
    function = _shared_library(tmp_path, source, "reciprocal").run
    function.argtypes = [_I8, _I8, _I32, _I32]
    x = np.stack([np.full(256, 127), 127 - np.arange(256)], axis=1).astype(np.int8)
    rng = np.random.default_rng(12)
    edges = [(1 << 19) + 1, (1 << 31) - 1, 1 << 30, (1 << 30) - 1, (1 << 30) + 1, 4095 << 19,
             1000 << 19, 3 << 27, (1 << 27) - 1, 1 << 27, (1 << 28) - 1, 1 << 28, (1 << 20) - 1]
    edge_terms = np.concatenate([rng.integers(1 << 18, 1 << 29, 256 - len(edges) - 1),
                                 np.array(edges[::-1]) - (1 << 18), [1 << 18]])  # j=0: 2^19
    tables = [edge_terms] + [np.exp2(rng.uniform(18, 30, 256)).astype(np.int64)
                             for _ in range(400)]
    headrooms, values = set(), set()
    for terms in tables:
        exps = np.exp2(rng.uniform(0, 31, 256)).astype(np.int64).clip(0, (1 << 31) - 1)
        y = np.empty_like(x)
        function(x, y, exps.astype(np.int32), terms.astype(np.int32))
        assert np.array_equal(y, _softmax_of_tables(x, exps, terms)), terms[255]
        sums = terms[255] + terms[255 - np.arange(256)]
        headrooms |= set((32 - np.frexp(sums.astype(np.float64))[1]).tolist())
        values |= set(y.ravel().tolist())
    assert set(edges) | {1 << 19} <= set((edge_terms[255] + edge_terms[::-1]).tolist())
    assert headrooms == set(range(1, 13)) and len(values) > 120


#: (op, shape a, shape b, activation): broadcasting both ways, ranks 1 to 4.
BINARY_SHAPES = [("MUL", (1, 5, 6, 7), (1, 1, 1, 7), "NONE"),
                 ("MUL", (1, 1, 1, 7), (1, 5, 6, 7), "RELU"),
                 ("MUL", (2, 3, 1, 4), (1, 1, 5, 1), "NONE"), ("MUL", (3, 4), (4,), "RELU6"),
                 ("MUL", (5,), (1,), "NONE"), ("MUL", (1, 4, 4, 3), (1, 4, 4, 3), "NONE"),
                 ("ADD", (1, 5, 6, 7), (1, 1, 1, 7), "NONE"),
                 ("ADD", (1, 6, 1), (4, 1, 3), "RELU"),
                 ("ADD", (2, 1, 3, 1), (1, 4, 1, 5), "RELU6"), ("ADD", (7,), (), "NONE")]


@needs_host_cc
def test_broadcasting_mul_and_add_kernels_match_the_reference(tmp_path):
    """elementwise_ops.mul_kernel / add_kernel on random operands and quantizations against
    reference.mul_int8 / add_int8 (NumPy broadcasting, as TFLite's BroadcastMul/Add4DSlow)."""
    from tvm_serenity.codegen.elementwise_ops import add_kernel, mul_kernel
    rng = np.random.default_rng(3)
    parts, cases = ["#include <stdint.h>", "#include <string.h>"], []
    for k, (op, shape_a, shape_b, activation) in enumerate(BINARY_SHAPES):
        sa, sb, so = rng.uniform(0.005, 0.2, 3)
        za, zb, zo = (int(v) for v in rng.integers(-128, 128, 3))
        out_shape = np.broadcast_shapes(shape_a, shape_b)
        lo, hi = ref.activation_range(activation, so, zo)
        if op == "MUL":
            rq = ref.mul_requant(sa, sb, so, zo, activation)
            kernel = mul_kernel(f"k{k}", shape_a, shape_b, out_shape, za, zb,
                                int(rq.multiplier[0]), int(rq.shift[0]), zo, lo, hi)
            want = lambda a, b, rq=rq, za=za, zb=zb: ref.mul_int8(a, b, za, zb, rq)  # noqa
        else:
            p = ref.add_params(sa, za, sb, zb, so, zo, activation)
            kernel = add_kernel(f"k{k}", shape_a, shape_b, out_shape, za, zb,
                                p.input1_multiplier, p.input1_shift, p.input2_multiplier,
                                p.input2_shift, int(p.output.multiplier), int(p.output.shift),
                                zo, lo, hi)
            want = lambda a, b, p=p: ref.add_int8(a, b, p)                        # noqa
        parts += [kernel.source, f"void run{k}(const int8_t *a, const int8_t *b, int8_t *y) "
                                 f"{{ k{k}(a, b, y); }}"]
        cases.append((k, shape_a, shape_b, out_shape, want))
    library = _shared_library(tmp_path, "\n".join(parts), "binary")
    for k, shape_a, shape_b, out_shape, want in cases:
        function = getattr(library, f"run{k}")
        function.argtypes = [_I8, _I8, _I8]
        for _ in range(20):
            a = np.asarray(rng.integers(-128, 128, shape_a), dtype=np.int8)
            b = np.asarray(rng.integers(-128, 128, shape_b), dtype=np.int8)
            y = np.empty(out_shape, np.int8)
            function(a.reshape(-1), b.reshape(-1), y.reshape(-1))
            assert np.array_equal(y, want(a, b)), BINARY_SHAPES[k]


# ------------------------------------------------------------------ requantization
EDGE_X = sorted({0, 1, -1, 2, -2, 3, -3, 7, -7, 255, -255, (1 << 15) - 1, 1 << 15,
                 -(1 << 15), -(1 << 15) - 1, (1 << 16) - 1, 1 << 16, (1 << 16) + 1,
                 -(1 << 16), -(1 << 16) + 1, -(1 << 16) - 1, 1 << 20, -(1 << 20), 123456789,
                 -123456789, 0x5A5A5A5, -0x5A5A5A5, (1 << 30) - 1, 1 << 30, -(1 << 30),
                 -(1 << 30) - 1, (1 << 31) - 1, (1 << 31) - 2, -(1 << 31), -(1 << 31) + 1})
EDGE_M = sorted({0, 1, 2, 3, (1 << 15) - 1, 1 << 15, (1 << 16) - 1, 1 << 16, (1 << 16) + 1,
                 (1 << 30) - 1, 1 << 30, (1 << 30) + 1, 1073741825, 1518500250, 1900000000,
                 (1 << 31) - (1 << 16), (1 << 31) - (1 << 15), (1 << 31) - 2, (1 << 31) - 1,
                 0x7FFF0000, 0x4000FFFF})
EDGE_M = sorted(set(EDGE_M) | {-m for m in EDGE_M} | {-(1 << 31) + 1, -1921673769})  # scales
SHIFTS = range(-31, 31)                                      # of either sign (MCUNet's first conv)
M_RANGE = (-(1 << 31) + 1, 1 << 31)       # every multiplier but INT32_MIN (kernels.requantize)


UBSAN = ["-fsanitize=undefined", "-fno-sanitize-recover=undefined"]


@pytest.fixture(scope="module")
def c_requantize(tmp_path_factory):
    """The emitted C helper ``serenity_mbqm`` as a host shared library, applied elementwise
    to int32 numpy arrays."""
    if HOST_CC is None:
        pytest.skip("no host C compiler")
    directory = tmp_path_factory.mktemp("requantize")
    (directory / "mbqm.c").write_text(
        "#include <stdint.h>\n" + requantize_c_function() +
        "\nvoid mbqm_array(const int32_t *x, const int32_t *m, const int32_t *s, "
        "int32_t *out, int32_t n) {\n"
        "  for (int32_t i = 0; i < n; ++i) out[i] = serenity_mbqm(x[i], m[i], s[i]);\n}\n")
    command = [HOST_CC, "-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC",
               "mbqm.c", "-o", "libmbqm.so"]
    # with UBSan where the compiler has it: a signed overflow or an oversized shift in the
    # helper aborts the run instead of passing by luck
    if subprocess.run(command + UBSAN, cwd=directory, capture_output=True).returncode:
        subprocess.run(command, cwd=directory, check=True, capture_output=True, text=True)
    library = ctypes.CDLL(str(directory / "libmbqm.so"))
    pointer = np.ctypeslib.ndpointer(np.int32, flags="C_CONTIGUOUS")
    library.mbqm_array.argtypes = [pointer, pointer, pointer, pointer, ctypes.c_int32]

    def apply(x, m, s):
        x, m, s = (np.ascontiguousarray(a, dtype=np.int32) for a in np.broadcast_arrays(x, m, s))
        out = np.empty_like(x)
        library.mbqm_array(x.ravel(), m.ravel(), s.ravel(), out.ravel(), x.size)
        return out

    return apply


def _reference_mbqm(x, m, s):
    return ref.multiply_by_quantized_multiplier(np.asarray(x, np.int64), np.asarray(m, np.int64),
                                                np.asarray(s, np.int64))


def test_requantize_exhaustive_on_edge_values(c_requantize):
    """Every combination of edge accumulators, multipliers and all 62 shifts."""
    x, m, s = np.meshgrid(EDGE_X, EDGE_M, list(SHIFTS), indexing="ij")
    assert np.array_equal(c_requantize(x, m, s), _reference_mbqm(x, m, s))


def test_requantize_on_millions_of_random_values(c_requantize):
    rng = np.random.default_rng(2026)
    for _ in range(4):
        n = 1_000_000
        x = rng.integers(-(1 << 31), 1 << 31, n)
        m = rng.integers(*M_RANGE, n)
        s = rng.integers(-31, 31, n)
        assert np.array_equal(c_requantize(x, m, s), _reference_mbqm(x, m, s))
        # realistic operands: normalized multipliers, conv-sized accumulators and shifts
        x = rng.integers(-(1 << 24), 1 << 24, n)
        m = rng.integers(1 << 30, 1 << 31, n)
        s = rng.integers(-14, 3, n)
        assert np.array_equal(c_requantize(x, m, s), _reference_mbqm(x, m, s))


@given(st.integers(-(1 << 31), (1 << 31) - 1), st.integers(M_RANGE[0], M_RANGE[1] - 1),
       st.integers(-31, 30))
@settings(max_examples=3000, deadline=None)
def test_requantize_property(c_requantize, x, m, s):
    assert c_requantize(x, m, s)[()] == _reference_mbqm(x, m, s)[()]


def test_requantize_tir_on_llvm_matches_the_c():
    """The TIR expression itself (llvm back end) on random and edge operands."""
    module = tvm.tirx.build(requantize_prim_func(), target="llvm")
    function = module[REQUANTIZE_SYMBOL]
    rng = np.random.default_rng(5)
    operands = list(zip(rng.integers(-(1 << 31), 1 << 31, 1500).tolist(),
                        rng.integers(*M_RANGE, 1500).tolist(),
                        rng.integers(-31, 31, 1500).tolist()))
    operands += [(x, m, s) for x in EDGE_X[::3] for m in EDGE_M[::3] for s in (-31, -7, 0, 5)]
    got = [function(x, m, s) for x, m, s in operands]
    assert got == _reference_mbqm(*np.array(operands).T).tolist()


def test_right_only_requantization_on_llvm_matches_the_reference():
    """``right_only`` (a layer whose shifts are all <= 0) on every non-positive shift."""
    module = tvm.tirx.build(requantize_prim_func("mbqm_right", right_only=True), target="llvm")
    function = module["mbqm_right"]
    rng = np.random.default_rng(6)
    operands = list(zip(rng.integers(-(1 << 31), 1 << 31, 1500).tolist(),
                        rng.integers(*M_RANGE, 1500).tolist(),
                        rng.integers(-31, 1, 1500).tolist()))
    operands += [(x, m, s) for x in EDGE_X[::2] for m in EDGE_M[::2] for s in (-31, -8, -1, 0)]
    got = [function(x, m, s) for x, m, s in operands]
    assert got == _reference_mbqm(*np.array(operands).T).tolist()


# ------------------------------------------------------------------ rp2040js
def _rp2040js_missing() -> str | None:
    if shutil.which("node") is None or ARM_CC is None:
        return "node or arm-none-eabi-gcc not installed"
    try:
        find_rp2040js()
    except SerenityError as e:
        return str(e)
    return None


@pytest.mark.skipif(_rp2040js_missing() is not None,
                    reason=f"rp2040js unavailable: {_rp2040js_missing()}")
@pytest.mark.parametrize("op, hw, channels, kernel, stride", [
    ("DEPTHWISE_CONV_2D", (12, 12), 24, (7, 7), (1, 1)),
    ("DEPTHWISE_CONV_2D", (13, 13), 16, (3, 3), (2, 2)),
    ("CONV_2D", (10, 10), 16, (1, 1), (1, 1)),
])
def test_rip_and_dual_layouts_cost_the_same_cycles(tmp_path, op, hw, channels, kernel, stride):
    """A one-layer model built for the Pico in both layouts, run in rp2040js: both outputs
    are bit-exact (checked by deploy.run) and the RiP build costs at most 1% more cycles."""
    path = tmp_path / "layer.tflite"
    path.write_bytes(tflite_cases._conv(op, hw, channels, 24, kernel, stride, (1, 1), "SAME",
                                        "RELU6", seed=3))
    cycles = {}
    for rip in (True, False):
        out = tmp_path / ("rip" if rip else "dual")
        compiled = compile_tflite(path, "pico", out, rip=rip, time_limit=10)
        assert len(compiled.plan.inplace) == (1 if rip else 0)
        cycles[rip] = run(out).cycles
    assert cycles[True] <= 1.01 * cycles[False], cycles


# ------------------------------------------------------------------ identity-rewrite variants
def test_partial_conv2d_kernels_sum_to_the_whole_accumulator():
    """LayerSpec.conv2d_partial over a channel split (assign, then accumulate) leaves exactly
    the int32 accumulator of the whole convolution (numpy over the zero-padded input)."""
    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, (1, 7, 6, 10)).astype(np.int8)
    w = rng.integers(-127, 128, (5, 3, 2, 10)).astype(np.int8)            # OHWI
    pad, stride, dil = (1, 1, 1, 0), (2, 1), (1, 2)
    xs = np.pad(x.astype(np.int64) + 7, ((0, 0), pad[:2], pad[2:], (0, 0)))
    want = np.zeros((1, 4, 5, 5), np.int64)
    for kh in range(3):
        for kw in range(2):
            win = xs[:, kh * dil[0]::stride[0], kw * dil[1]::stride[1]][:, :4, :5]
            want += np.einsum("nhwc,oc->nhwo", win, w[:, kh, kw].astype(np.int64))
    acc = tvm.runtime.tensor(np.full(want.size, 99, np.int32))
    for i, (lo, hi) in enumerate([(0, 3), (3, 4), (4, 10)]):
        spec = LayerSpec.conv2d_partial((7, 6, hi - lo), 5, (3, 2), stride, dil, pad,
                                        input_zero_point=-7, accumulate=i > 0)
        module, symbol = build_llvm(spec, "dual")
        module[symbol](tvm.runtime.tensor(np.ascontiguousarray(x[..., lo:hi]).reshape(-1)), acc,
                       tvm.runtime.tensor(pack_conv2d_weight(np.ascontiguousarray(
                           w[..., lo:hi]))),
                       tvm.runtime.tensor(np.zeros(spec.scratch_elements, np.int32)))
    assert np.array_equal(acc.numpy().reshape(want.shape), want)


def test_depthwise_slices_fill_the_reference_output():
    rng = np.random.default_rng(6)
    cin = 9
    x = rng.integers(-128, 128, (1, 6, 5, cin)).astype(np.int8)
    w = rng.integers(-127, 128, (1, 3, 3, cin)).astype(np.int8)
    bias = rng.integers(-3000, 3000, cin).astype(np.int32)
    rq = ref.conv_requant(0.05, rng.uniform(0.002, 0.02, cin), 0.1, 3, "RELU6")
    want = ref.depthwise_conv2d_int8(x, w, bias, ref.ConvParams((2, 1), (1, 1), (1, 1, 0, 2),
                                                                4, rq))
    y = tvm.runtime.tensor(np.zeros(want.size, np.int8))
    for lo, hi in [(2, 6), (0, 2), (6, 9)]:                # any order, each its channels
        spec = LayerSpec.depthwise_slice((6, 5, hi - lo), (3, 3), (2, 1), 1, (1, 1, 0, 2),
                                         first_channel=lo, out_channels=cin,
                                         input_zero_point=4, output_zero_point=3,
                                         act_min=rq.act_min, act_max=rq.act_max)
        module, symbol = build_llvm(spec, "dual")
        tables = [w[0, :, :, lo:hi], bias[lo:hi], np.asarray(rq.multiplier, np.int32)[lo:hi],
                  np.asarray(rq.shift, np.int32)[lo:hi], np.zeros(spec.scratch_elements,
                                                                  np.int32)]
        module[symbol](tvm.runtime.tensor(np.ascontiguousarray(x[..., lo:hi]).reshape(-1)), y,
                       *(tvm.runtime.tensor(np.ascontiguousarray(t).reshape(-1))
                         for t in tables))
        assert f"_into{lo}of{cin}_dual" in symbol
    assert np.array_equal(y.numpy(), want.reshape(-1))


def test_rewrite_variants_reject_what_they_cannot_be():
    with pytest.raises(CodegenError, match="partial must be one of"):
        LayerSpec("depthwise_conv2d", LayerSpec.depthwise_conv2d((4, 4, 3), 3).geometry,
                  partial="assign")
    with pytest.raises(CodegenError, match="dual layout only"):
        kernel_params(LayerSpec.conv2d_partial((4, 4, 3), 2, 1), "rip")
    with pytest.raises(CodegenError, match=r"output_slice \(6, 8\) must place the 3 channels"):
        LayerSpec.depthwise_slice((4, 4, 3), 3, first_channel=6, out_channels=8)
    with pytest.raises(CodegenError, match="dual layout only"):
        kernel_params(LayerSpec.depthwise_slice((4, 4, 3), 3, first_channel=0,
                                                out_channels=8), "rip")


# ------------------------------------------------------ float edges: QUANTIZE / DEQUANTIZE
@needs_host_cc
def test_float_edge_kernels_equal_the_reference(tmp_path):
    """float32 -> int8 QUANTIZE on exact halves of the step (away from zero, both signs),
    quarters, values far outside the int8 range (clamped, no int32 overflow) and signed zeros;
    int8 -> float32 DEQUANTIZE on all 256 values: byte for byte the reference's
    (TFLM's AffineQuantize / Dequantize)."""
    from tvm_serenity.codegen.elementwise_ops import dequantize_kernel, float_quantize_kernel
    rng = np.random.default_rng(0)
    scale, zp = 0.03125, -7
    x = np.concatenate([(rng.integers(-160, 160, 3000) + rng.choice([0, 0.5, 0.25], 3000))
                        * scale, rng.normal(0, 3, 2000), [-0.0, 0.0, 1e30, -1e30, 3e9],
                        [0.5 * scale, -0.5 * scale]]).astype(np.float32)
    q = np.arange(-128, 128, dtype=np.int8)
    quant = float_quantize_kernel("quant", x.size, scale, zp)
    deq = dequantize_kernel("deq", q.size, 0.1, 3)
    assert "(x_ptr[0] / 3.125000e-02f)" in quant.source      # a division, in float32
    src = tmp_path / "edges.c"
    src.write_text("#include <stdint.h>\n#include <stdio.h>\n#include <string.h>\n"
                   + quant.source + deq.source + f"""
static float xs[{x.size}], ys[256]; static int8_t qs[{x.size}], q8[256];
int main(void) {{
    if (fread(xs, 4, {x.size}, stdin) != {x.size} || fread(q8, 1, 256, stdin) != 256) return 1;
    quant((const int8_t *)xs, qs);
    deq(q8, (int8_t *)ys);
    fwrite(qs, 1, {x.size}, stdout);
    fwrite(ys, 4, 256, stdout);
    return 0;
}}
""")
    exe = tmp_path / "edges"
    subprocess.run([HOST_CC, "-std=c99", "-O2", "-Wall", "-Werror", str(src), "-o", str(exe)],
                   check=True)
    raw = subprocess.run([str(exe)], input=x.tobytes() + q.tobytes(), capture_output=True,
                         check=True).stdout
    assert np.array_equal(np.frombuffer(raw[:x.size], np.int8), ref.quantize(x, scale, zp))
    assert raw[x.size:] == ref.dequantize(q, 0.1, 3).tobytes()


# ------------------------------------------------------------------ channel-wise in place
def _channel_inplace_specs() -> list[LayerSpec]:
    """Depthwise layers at the workspace :func:`choose_inplace` gives them (the channel kind:
    below RiP's ``S*``), plus one with a gap of one channel (``S - N_in = C``, garbage there)
    and one whose output outgrows its input (the input right-aligned behind a gap)."""
    shapes = [((9, 9, 8), 3, 1, (1, 1, 1, 1), {}),
              ((11, 10, 6), 5, 1, (2, 2, 2, 2), dict(input_zero_point=-20)),
              ((12, 11, 5), 7, 2, (2, 3, 2, 3), dict(output_zero_point=9)),     # MCUNet b1/dw
              ((9, 9, 4), 3, (1, 2), (1, 1, 1, 1), dict(input_zero_point=127)),
              ((10, 9, 3), 3, 1, (2, 2, 2, 2), dict(dilation=2, input_zero_point=-128)),
              ((1, 2, 2), 5, 1, (3, 3, 3, 3), dict(input_zero_point=7))]       # N_out > N_in
    specs = []
    for hwc, k, s, pad, quant in shapes:
        g = LayerSpec.depthwise_conv2d(hwc, k, s, padding=pad, **quant).geometry
        choice = choose_inplace("depthwise_conv2d", g)
        assert choice.kind == "channel" and choice.workspace_bytes < choice.rip.workspace_bytes
        specs.append(LayerSpec.depthwise_conv2d(hwc, k, s, padding=pad,
                                                workspace_bytes=choice.workspace_bytes, **quant))
    g = specs[0].geometry
    specs.append(LayerSpec.depthwise_conv2d(g.in_hwc, 3, padding=(1, 1, 1, 1),
                                            workspace_bytes=g.input_elements + g.in_channels))
    return specs


@needs_host_cc
def test_channel_inplace_depthwise_bit_exact(tmp_path):
    """The channel-wise in-place depthwise kernel at the zero-gap workspace: the channel
    simulator replays it with no clobbered read, one more byte of gap (not a multiple of C)
    corrupts, and the kernel is bit-exact with the numpy reference on llvm and in C, both
    layouts, with garbage in the scratch (and in the gap where there is one)."""
    specs = _channel_inplace_specs()
    for spec in specs:
        g = spec.geometry
        assert spec.inplace_kind == "channel", spec
        assert spec.scratch_elements == (g.kernel[0] * (g.kernel[1] + spec.padded_width)
                                         + -(-spec.channel_buffer_bytes // 4))
        simulator = ChannelSimulator(g)
        assert simulator.run(spec.rip_workspace_bytes).ok, spec
        assert not simulator.run(spec.rip_workspace_bytes + 1).ok, spec
        # RiP's pixel order in the same workspace corrupts: the kind is what makes it safe
        assert not CorruptionSimulator(g).run(spec.rip_workspace_bytes).ok, spec
    assert specs[-2].rip_input_offset > 0 and specs[-1].rip_input_offset == 8
    cases = [make_case(spec, seed=60 + i) for i, spec in enumerate(specs)]
    check_cases(cases)
    check_c_cases(cases, tmp_path)


def test_channel_inplace_kind_is_chosen_by_the_workspace():
    """RiP's row kernel wherever the workspace allows it; the channel kernel below ``S*``;
    a workspace neither kind is safe in is refused, naming both minimums."""
    g = LayerSpec.depthwise_conv2d((9, 9, 8), 3, padding=(1, 1, 1, 1)).geometry
    s_star = LayerSpec("depthwise_conv2d", g).rip.workspace_bytes
    assert LayerSpec("depthwise_conv2d", g, workspace_bytes=s_star).inplace_kind == "rip"
    assert LayerSpec("depthwise_conv2d", g, workspace_bytes=648).inplace_kind == "channel"
    assert "_channelwise_" in default_kernel_name(
        LayerSpec("depthwise_conv2d", g, workspace_bytes=648), "rip")
    with pytest.raises(CodegenError, match=r"S\* = 728 nor a channel-wise one \(S >= 648"):
        LayerSpec("depthwise_conv2d", g, workspace_bytes=649)
    pool = LayerSpec.max_pool2d((9, 9, 8), 3, 1, (1, 1, 1, 1)).geometry
    with pytest.raises(CodegenError, match=r"below the corruption-free RiP minimum"):
        LayerSpec("max_pool2d", pool, workspace_bytes=648)
