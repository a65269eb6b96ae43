"""Float operators after the int8 core: float32 SOFTMAX (beta != 1), float32 LOG_SOFTMAX and
ARG_MAX (int8 or float32 input, int32 indices), bit-exact with TFLite Micro on every route:
the numpy reference, the MCU C on the host and on an emulator, the Relax importer on llvm.

Their exp and log first: the reference's ``expf``/``logf`` against glibc's own (ctypes, the
libm TFLite Micro's Python wrapper calls) and the generated ``serenity_expf``/``serenity_logf``
C against the reference, on a million inputs each. Then models built with frontend.builder: a
LeNet-like int8 core (conv, pool, reshape, FC whose units 3 and 7 tie) ending in DEQUANTIZE ->
LOG_SOFTMAX, DEQUANTIZE -> SOFTMAX, ARG_MAX, or DEQUANTIZE -> SOFTMAX -> ARG_MAX (two
outputs); float heads on a float32 input, fed rows with ties, zeros of both signs,
infinities and 1000-value rows (summation order). Malformed variants are refused in one line
naming the operator.
"""

import ctypes
import ctypes.util
import re
import subprocess

import numpy as np
import pytest

from tvm_serenity import SerenityError
from tvm_serenity.codegen.ops import float_math_c
from tvm_serenity.deploy import compile_tflite, run
from tvm_serenity.frontend import reference as ref
from tvm_serenity.frontend.builder import ModelBuilder
from tvm_serenity.frontend.interpreters import (TFLM, InterpreterError, available,
                                                run_interpreter)
from tvm_serenity.frontend.tflite_model import UnsupportedOperatorError, parse_tflite
from tvm_serenity.frontend.to_graph import tflite_to_graph
from toolchain import needs_arm, needs_cc, needs_qemu, needs_rp2040js

needs_tflm = pytest.mark.skipif(not available(TFLM), reason="tflite-micro is not installed")
RNG = np.random.default_rng(41)
#: The two float32 inputs where glibc's FMA build of expf (x86 CPUs with FMA) rounds
#: differently from its generic code, which the reference and the C restate (1 ulp).
EXPF_FMA_INPUTS = {float.fromhex("-0x1.f8cbb2p+5"), float.fromhex("0x1.04845ep+5")}


# ----------------------------------------------------------------------------- models
def _lenet_core(b: ModelBuilder) -> tuple[int, int]:
    """int8 (1, 8, 8, 1) -> CONV_2D 3x3 RELU -> MAX_POOL 2x2 -> RESHAPE -> FULLY_CONNECTED
    (1, 10): (input, logits). Units 3 and 7 have equal weights and the largest bias, so they
    tie, often for the maximum."""
    x = b.add_tensor((1, 8, 8, 1), scale=0.02, zero_point=-5, name="image")
    w = b.add_tensor((4, 3, 3, 1), scale=RNG.uniform(0.01, 0.03, 4), axis=0,
                     data=RNG.integers(-127, 128, (4, 3, 3, 1)))
    bias = b.add_tensor((4,), "int32", data=RNG.integers(-300, 300, 4))
    conv = b.add_tensor((1, 8, 8, 4), scale=0.05, zero_point=-20)
    b.add_operator("CONV_2D", [x, w, bias], [conv], {"padding": "SAME", "stride_h": 1,
                                                     "stride_w": 1,
                                                     "fused_activation_function": "RELU"})
    pooled = b.add_tensor((1, 4, 4, 4), scale=0.05, zero_point=-20)
    b.add_operator("MAX_POOL_2D", [conv], [pooled], {"padding": "VALID", "stride_h": 2,
                                                     "stride_w": 2, "filter_height": 2,
                                                     "filter_width": 2})
    shape = b.add_tensor((2,), "int32", data=[1, 64])
    flat = b.add_tensor((1, 64), scale=0.05, zero_point=-20)
    b.add_operator("RESHAPE", [pooled, shape], [flat], {"new_shape": [1, 64]})
    weights = RNG.integers(-127, 128, (10, 64))
    weights[7] = weights[3]
    fc_bias = RNG.integers(-300, 300, 10)
    fc_bias[[3, 7]] = 900
    w = b.add_tensor((10, 64), scale=0.004, data=weights)
    bias = b.add_tensor((10,), "int32", data=fc_bias)
    logits = b.add_tensor((1, 10), scale=0.25, zero_point=-10, name="logits")
    b.add_operator("FULLY_CONNECTED", [flat, w, bias], [logits],
                   {"fused_activation_function": "NONE"})
    return x, logits


def _dequantized(b: ModelBuilder, logits: int) -> int:
    f = b.add_tensor((1, 10), "float32")
    b.add_operator("DEQUANTIZE", [logits], [f])
    return f


def _arg_max(b: ModelBuilder, x: int, in_shape, axis: int, name="class") -> int:
    out_shape = [d for k, d in enumerate(in_shape) if k != axis % len(in_shape)]
    a = b.add_tensor((1,), "int32", data=[axis])
    y = b.add_tensor(out_shape, "int32", name=name)
    b.add_operator("ARG_MAX", [x, a], [y], {"output_type": "INT32"})
    return y


def lenet(tail: str) -> bytes:
    """The LeNet-like core ending in ``tail``."""
    b = ModelBuilder()
    x, logits = _lenet_core(b)
    if tail == "arg_max":
        return b.build([x], [_arg_max(b, logits, (1, 10), 1)])
    f = _dequantized(b, logits)
    y = b.add_tensor((1, 10), "float32", name="probabilities")
    if tail == "log_softmax":
        b.add_operator("LOG_SOFTMAX", [f], [y])
        return b.build([x], [y])
    b.add_operator("SOFTMAX", [f], [y], {"beta": 0.6})
    if tail == "softmax":
        return b.build([x], [y])
    return b.build([x], [y, _arg_max(b, y, (1, 10), -1)])       # "softmax_arg_max"


def float_head(op: str, shape, axis: int = -1) -> bytes:
    """A float32 graph input straight into ``op`` (SOFTMAX with beta 1.7, LOG_SOFTMAX, or
    ARG_MAX along ``axis``)."""
    b = ModelBuilder()
    x = b.add_tensor(shape, "float32", name="x")
    if op == "ARG_MAX":
        return b.build([x], [_arg_max(b, x, shape, axis)])
    y = b.add_tensor(shape, "float32", name="y")
    b.add_operator(op, [x], [y], {"beta": 1.7} if op == "SOFTMAX" else None)
    return b.build([x], [y])


LENET = ("log_softmax", "softmax", "arg_max", "softmax_arg_max")
HEADS = {"softmax_rows": ("SOFTMAX", (24, 10)), "log_softmax_rows": ("LOG_SOFTMAX", (24, 10)),
         "softmax_1000": ("SOFTMAX", (3, 1000)), "log_softmax_1000": ("LOG_SOFTMAX", (3, 1000)),
         "arg_max_middle": ("ARG_MAX", (4, 6, 5), 1), "arg_max_last": ("ARG_MAX", (24, 10))}


def _model(case: str) -> bytes:
    return lenet(case) if case in LENET else float_head(*HEADS[case])


def _float_rows(shape, seed: int) -> np.ndarray:
    """Rows of logits with the cases the kernels must order like TFLM: ties for the maximum,
    -0 and +0 (the first zero is the maximum), -inf entries, a row that is all -inf but one,
    a row of one repeated value, wide ranges (exp underflows)."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * rng.choice([0.5, 4.0, 30.0], shape[:-1] + (1,)))
    x = x.astype(np.float32).reshape(-1, shape[-1])
    n = x.shape[1]
    specials = [np.full(n, 2.5), np.where(np.arange(n) % 3 == 0, 7.0, -1.0),
                np.where(np.arange(n) % 2 == 0, -0.0, 0.0) - (np.arange(n) > 3),
                np.where(np.arange(n) == n - 1, 3.0, -np.inf),
                np.where(np.arange(n) == 1, -np.inf, np.linspace(-200, 5, n))]
    for k, row in enumerate(specials[:len(x)]):
        x[(seed + 3 * k) % len(x)] = row
    return x.reshape(shape)


def _inputs(case: str, seed: int) -> list[np.ndarray]:
    if case in LENET:
        rng = np.random.default_rng(seed)
        image = (np.full((1, 8, 8, 1), -5, np.int8) if seed == 0 else
                 rng.integers(-128, 128, (1, 8, 8, 1), dtype=np.int8))
        return [image]
    return [_float_rows(HEADS[case][1], seed)]


def _bytes(arrays, model) -> list[bytes]:
    return [np.ascontiguousarray(a, dtype=model.tensors[i].dtype).tobytes()
            for a, i in zip(arrays, model.outputs)]


def _tflm(data: bytes, input_sets) -> list[list[bytes]]:
    model = parse_tflite(data)
    return [_bytes([t[i] for i in model.outputs], model)
            for t in run_interpreter(TFLM, data, input_sets)]


SEEDS = (0, 1, 2, 3)


# ------------------------------------------------------------------------- exp and log
def _glibc():
    libm = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
    for name in ("expf", "logf"):
        getattr(libm, name).restype = ctypes.c_float
        getattr(libm, name).argtypes = [ctypes.c_float]
    return libm


def _samples(n: int, low: float, high: float) -> np.ndarray:
    """``n`` float32 values in ``[low, high]``: half uniform in value, half uniform in bit
    pattern (every binade), and both ends."""
    rng = np.random.default_rng(n)
    by_value = rng.uniform(low, high, n // 2).astype(np.float32)
    a, b = sorted(np.float32([low, high]).view(np.int32).tolist())
    by_bits = rng.integers(a, b, n // 2, endpoint=True).astype(np.int32).view(np.float32)
    return np.concatenate([by_value, by_bits, np.float32([low, high])])


def _differing(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Where two float32 arrays differ in bits (two NaNs are equal)."""
    return (a.view(np.uint32) != b.view(np.uint32)) & ~(np.isnan(a) & np.isnan(b))


@pytest.mark.skipif(ctypes.util.find_library("m") is None, reason="no libm to compare with")
def test_reference_exp_and_log_are_glibcs():
    """The exponentials of softmax ((x - max) * beta <= 0), the logarithm of its sums (>= 1),
    and random bit patterns (every special case): equal to glibc's, but for the two inputs
    where its FMA build rounds differently."""
    libm = _glibc()
    rng = np.random.default_rng(5)
    everything = rng.integers(0, 1 << 32, 20_000, dtype=np.uint64).astype(np.uint32)
    extremes = np.float32([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, 2.0 ** -149, 88.72,
                           -103.3, -103.9, -104.0, *EXPF_FMA_INPUTS])
    for fn, low, high in (("expf", -104.0, 0.0), ("logf", 1.0, 4096.0)):
        x = np.concatenate([_samples(200_000, low, high), everything.view(np.float32),
                            extremes])
        glibc = np.array([getattr(libm, fn)(float(v)) for v in x], dtype=np.float32)
        ours = getattr(ref, fn)(x)
        assert set(x[_differing(ours, glibc)].tolist()) <= EXPF_FMA_INPUTS, fn


@needs_cc
def test_generated_c_exp_and_log_equal_the_reference(tmp_path):
    """serenity_expf / serenity_logf, compiled natively from float_math_c(), against the
    reference on a million inputs of each range and random bit patterns."""
    program = tmp_path / "math.c"
    program.write_text("#include <stdint.h>\n#include <stdio.h>\n#include <string.h>\n"
                       + float_math_c() + """
int main(void) {
    float x, y[2];
    while (fread(&x, 4, 1, stdin) == 1) {
        y[0] = serenity_expf(x);
        y[1] = serenity_logf(x);
        fwrite(y, 4, 2, stdout);
    }
    return 0;
}
""")
    exe = tmp_path / "math"
    subprocess.run(["cc", "-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", str(program), "-o",
                    str(exe)], check=True)
    rng = np.random.default_rng(6)
    x = np.concatenate([_samples(1_000_000, -104.0, 0.0), _samples(1_000_000, 1.0, 4096.0),
                        rng.integers(0, 1 << 32, 200_000, dtype=np.uint64)
                        .astype(np.uint32).view(np.float32)])
    out = subprocess.run([str(exe)], input=x.tobytes(), capture_output=True, check=True).stdout
    got = np.frombuffer(out, np.float32).reshape(-1, 2)
    assert not _differing(got[:, 0], ref.expf(x)).any()
    assert not _differing(got[:, 1], ref.logf(x)).any()


# -------------------------------------------------------------- reference vs TFLite Micro
@needs_tflm
def test_reference_equals_tflm():
    for case in (*LENET, *HEADS):
        data = _model(case)
        model = parse_tflite(data)
        sets = [_inputs(case, seed) for seed in SEEDS]
        want = _tflm(data, sets)
        got = [_bytes(ref.run(model, inputs), model) for inputs in sets]
        assert got == want, case


def test_ties_keep_the_first_index():
    """ARG_MAX and the row maximum of SOFTMAX keep the first of equal values: index 3 of the
    tied units, the -0 before a +0 (LOG_SOFTMAX then writes -0 - log(sum))."""
    x = np.float32([[1.0, 5.0, -2.0, 5.0], [-0.0, 0.0, -np.inf, -3.0]])
    assert ref.arg_max(x, 1).tolist() == [1, 0]
    assert ref.arg_max(np.float32([[np.nan, 1.0, 2.0]]), 1).tolist() == [0]
    assert np.signbit(ref.row_max_float(x)[1, 0])
    assert ref.row_max_float(np.float32([[np.nan, -np.inf]]))[0, 0] == np.finfo(np.float32).min
    model = parse_tflite(lenet("arg_max"))
    assert ref.run(model, [np.full((1, 8, 8, 1), -5, np.int8)])[0].tolist() == [3]


# ----------------------------------------------------------------------- in-place flags
def _flags(data: bytes) -> dict[str, object]:
    """Graph IR op -> its in-place flag."""
    return {n.op: n.inplace for n in tflite_to_graph(parse_tflite(data)).nodes.values()}


def test_in_place_flags_are_what_the_kernels_prove():
    """float32 SOFTMAX and LOG_SOFTMAX alias exactly; ARG_MAX aliases (its int32 output
    starting where the input starts) over float32, and over int8 only along the last axis of
    at least 4 values."""
    flags = _flags(lenet("softmax_arg_max"))
    assert flags["softmax"] == "alias" and flags["arg_max"] == "alias"
    assert flags["dequantize"] == 40          # the float tensor's workspace
    assert _flags(lenet("log_softmax"))["log_softmax"] == "alias"
    assert _flags(lenet("arg_max"))["arg_max"] == "alias"
    assert _flags(float_head(*HEADS["arg_max_middle"]))["arg_max"] == "alias"
    b = ModelBuilder()
    x = b.add_tensor((1, 3, 5), scale=0.1, name="x")
    assert _flags(b.build([x], [_arg_max(b, x, (1, 3, 5), 1)]))["arg_max"] is None


# ------------------------------------------------------------------- MCU C on the host
@needs_cc
@needs_tflm
@pytest.mark.parametrize("case", [*LENET, *HEADS])
def test_host_equals_tflm_and_reference(tmp_path, case):
    """deploy.run checks every output against the reference byte for byte; TFLM's outputs
    are compared here. The float kernels run in place where the plan lays them out so."""
    data = _model(case)
    path = tmp_path / "model.tflite"
    path.write_bytes(data)
    compiled = compile_tflite(path, "host", tmp_path / "out")
    model = parse_tflite(data)
    assert [t.dtype for t in compiled.emitted.outputs] == [model.tensors[i].dtype
                                                           for i in model.outputs]
    sets = [_inputs(case, seed) for seed in SEEDS]
    for inputs, want in zip(sets, _tflm(data, sets)):
        assert list(run(compiled.out_dir, input=inputs).outputs) == want
    if case == "softmax_arg_max":
        assert "#define MODEL_OUTPUT1_TYPE int32_t\n" in compiled.emitted.model_h
        assert "#define MODEL_OUTPUT0_TYPE float\n" in compiled.emitted.model_h
        assert "serenity_expf" in compiled.emitted.model_c
        assert "serenity_logf" not in compiled.emitted.model_c      # only what is used


# ------------------------------------------------------------------------ the emulator
@pytest.mark.slow
@needs_arm
@needs_tflm
@pytest.mark.parametrize("target, case", [
    pytest.param("pico2", "softmax_arg_max", marks=needs_qemu),
    pytest.param("pico2", "log_softmax", marks=needs_qemu),
    pytest.param("pico", "log_softmax", marks=needs_rp2040js)])
def test_emulator_equals_tflm(tmp_path, target, case):
    """The soft-float Cortex-M33 (QEMU) and Cortex-M0+ (rp2040js) builds, whose exp and log
    are float64 soft-float calls and no newlib libm, give TFLM's bits."""
    data = _model(case)
    path = tmp_path / "model.tflite"
    path.write_bytes(data)
    compiled = compile_tflite(path, target, tmp_path / "out")
    sets = [_inputs(case, seed) for seed in (0, 1)]
    for inputs, want in zip(sets, _tflm(data, sets)):
        result = run(compiled.out_dir, input=inputs)
        assert result.backend == {"pico2": "qemu", "pico": "rp2040js"}[target]
        assert list(result.outputs) == want


# ----------------------------------------------------------------------- Relax on llvm
@needs_tflm
@pytest.mark.parametrize("case", [*LENET, *HEADS])
def test_relax_import_equals_tflm(case):
    """TVM's exp and log on llvm are the process's libm (glibc), as TFLM's are."""
    tvm = pytest.importorskip("tvm")
    from tvm import relax
    from tvm_serenity.frontend.relax_import import from_tflite
    data = _model(case)
    model = parse_tflite(data)
    vm = relax.VirtualMachine(tvm.compile(from_tflite(model), target="llvm"), tvm.cpu())
    sets = [_inputs(case, seed) for seed in SEEDS]
    for inputs, want in zip(sets, _tflm(data, sets)):
        out = vm["main"](*[tvm.runtime.tensor(a) for a in inputs])
        outs = [out] if isinstance(out, tvm.runtime.Tensor) else list(out)
        assert _bytes([o.numpy() for o in outs], model) == want


# -------------------------------------------------------------------------- refusals
def _variant(kind: str) -> bytes:
    b = ModelBuilder()
    if kind.startswith("arg_max"):
        x = b.add_tensor((2, 5), "int16" if kind == "arg_max_int16" else "float32", name="x")
        axis = {"arg_max_axis_range": [2], "arg_max_two_axes": [0, 1]}.get(kind, [1])
        a = b.add_tensor((len(axis),), "int32", data=axis)
        out_type = "int64" if kind == "arg_max_int64" else "int32"
        shape = (5,) if kind == "arg_max_shape" else (2,)
        y = b.add_tensor(shape, out_type, name="y")
        b.add_operator("ARG_MAX", [x, a], [y], {"output_type": out_type.upper()})
        return b.build([x], [y])
    op = "LOG_SOFTMAX" if kind.startswith("log_softmax") else "SOFTMAX"
    shape = () if kind == "log_softmax_scalar" else (1, 4)
    x = b.add_tensor(shape, "float32", name="x")
    y = (b.add_tensor(shape, scale=1 / 256, zero_point=-128, name="y")
         if kind == "softmax_int8_output" else b.add_tensor(shape, "float32", name="y"))
    b.add_operator(op, [x], [y], {"beta": 1.0} if op == "SOFTMAX" else None)
    return b.build([x], [y])


REFUSALS = {
    "softmax_int8_output": "operator 0 (SOFTMAX): input 'x' is float32, output 'y' int8",
    "log_softmax_scalar": "operator 0 (LOG_SOFTMAX): input 'x' is a scalar",
    "arg_max_int64": "operator 0 (ARG_MAX): output 'y' is int64; TFLite Micro's ARG_MAX "
                     "writes int32",
    "arg_max_int16": "operator 0 (ARG_MAX): input 'x' is int16",
    "arg_max_axis_range": "operator 0 (ARG_MAX): axis 2 is out of range",
    "arg_max_two_axes": "operator 0 (ARG_MAX): axis 't1' has 2 values",
    "arg_max_shape": "operator 0 (ARG_MAX): output 'y' has shape [5], the operator computes [2]",
}


@pytest.mark.parametrize("kind", sorted(REFUSALS))
def test_malformed_models_are_refused_in_one_line(tmp_path, kind):
    path = tmp_path / "bad.tflite"
    path.write_bytes(_variant(kind))
    with pytest.raises(ref.ReferenceError) as e:
        ref.validate(parse_tflite(path.read_bytes(), str(path)))
    assert REFUSALS[kind] in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(SerenityError, match=re.escape(REFUSALS[kind])):
        compile_tflite(path, "host", tmp_path / "out", build=False)


@needs_tflm
def test_tflm_refuses_int64_arg_max_too():
    """The int64 refusal is TFLite Micro's: its ARG_MAX writes int32 indices only."""
    x = np.zeros((2, 5), np.float32)
    with pytest.raises(InterpreterError):
        run_interpreter(TFLM, _variant("arg_max_int64"), [[x]])
    assert run_interpreter(TFLM, _variant("arg_max_ok"), [[x]])


def test_int8_log_softmax_is_refused_by_every_route(tmp_path):
    """TFLM has an int8 LOG_SOFTMAX (output scale 16/256, zero point 127); it is not
    implemented here, and each route says so in one line."""
    b = ModelBuilder()
    x = b.add_tensor((1, 10), scale=0.1, zero_point=0, name="x")
    y = b.add_tensor((1, 10), scale=16 / 256, zero_point=127, name="y")
    b.add_operator("LOG_SOFTMAX", [x], [y])
    path = tmp_path / "int8_log_softmax.tflite"
    path.write_bytes(b.build([x], [y]))
    model = parse_tflite(path.read_bytes(), str(path))
    with pytest.raises(UnsupportedOperatorError, match=r"operator 0 \(LOG_SOFTMAX\).*int8"):
        ref.Interpreter(model)
    with pytest.raises(SerenityError, match=r"operator 0 \(LOG_SOFTMAX\).*int8") as e:
        compile_tflite(path, "host", tmp_path / "out", build=False)
    assert "\n" not in str(e.value)
