"""The int8 TFLite front end: the reader, corrupt files, TFLite's fixed-point arithmetic checked
by hand, and the reference interpreter bit-exact against TFLite Micro and LiteRT (every
intermediate tensor, generated single-operator models and the real models)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from tflite_cases import (RUNTIME_SPECIFIC, SINGLE_OP_MODELS, STRIDED_SLICE_MODELS,
                          all_model_files, model_path, strided_slice)
from tvm_serenity.errors import SerenityError
from tvm_serenity.frontend import reference as ref
from tvm_serenity.frontend.builder import ModelBuilder
from tvm_serenity.frontend.interpreters import (LITERT, TFLM, available, model_inputs,
                                                run_interpreter, run_interpreter_batch)
from tvm_serenity.frontend.tflite_model import (TFLiteError, UnsupportedOperatorError,
                                                load_tflite, parse_tflite)

INTERPRETERS = [
    pytest.param(TFLM, marks=pytest.mark.skipif(not available(TFLM),
                                                reason="tflite-micro is not installed")),
    pytest.param(LITERT, marks=pytest.mark.skipif(not available(LITERT),
                                                  reason="ai-edge-litert is not installed")),
]
# Whole models whose comparison takes more than a few seconds.
SLOW_MODELS = {"mcunet/mcunet-320kb-1mb_imagenet.tflite",
               "keras/randwire_cifar100_C78_cellA.tflite"}


def assert_bit_exact(model, input_sets, truth, what, runtime):
    """The reference's value of every tensor the interpreter reported equals it exactly."""
    interp = ref.Interpreter(model, runtime)
    for k, (inputs, expected) in enumerate(zip(input_sets, truth)):
        ours = interp.run_all(inputs)
        assert set(expected) <= set(ours)
        for index, value in expected.items():
            got = ours[index]
            value = np.asarray(value).reshape(got.shape)
            if not np.array_equal(got, value):
                op = next(o for o in model.operators if index in o.outputs)
                diff = np.abs(got.astype(np.float64) - value.astype(np.float64))
                pytest.fail(f"{what}, input set {k}: tensor {index} ('{model.tensors[index].name}'"
                            f", output of operator {op.index} {op.op}) differs in "
                            f"{int(np.count_nonzero(diff))}/{diff.size} elements, by up to "
                            f"{diff.max()}")


# ==================================================================================== reader
def test_vww_structure():
    m = load_tflite(model_path("tinyengine/vww.tflite"))
    assert len(m.operators) == 63 and m.name == "vww"
    first, last = m.operators[0], m.operators[-1]
    assert (first.op, last.op) == ("QUANTIZE", "DEQUANTIZE")
    x = m.tensors[m.inputs[0]]
    assert (x.shape, x.dtype, x.quant, x.data) == ((1, 80, 80, 3), "float32", None, None)
    assert m.tensors[m.outputs[0]].shape == (1, 2)
    conv = m.operators[2]
    assert conv.op == "CONV_2D"
    assert conv.options == {"padding": "VALID", "stride_w": 2, "stride_h": 2,
                            "fused_activation_function": "RELU6", "dilation_w_factor": 1,
                            "dilation_h_factor": 1, "quantized_bias_type": 0}
    w = m.tensors[conv.inputs[1]]
    assert w.shape == (16, 3, 3, 3) and w.dtype == "int8" and w.quant.axis == 0
    assert w.quant.per_channel and w.quant.scale.shape == (16,)
    assert w.data.shape == w.shape and not w.data.flags.writeable
    assert m.tensors[conv.inputs[2]].dtype == "int32"
    dw = m.operators[3]
    assert dw.op == "DEPTHWISE_CONV_2D" and dw.options["depth_multiplier"] == 1
    assert m.tensors[dw.inputs[1]].quant.axis == 3
    assert m.operators[59].options == {"keep_dims": False}
    assert m.consumers()[m.inputs[0]] == [0]


@pytest.mark.parametrize("rel", all_model_files())
def test_every_model_loads_and_is_supported(rel):
    m = load_tflite(model_path(rel))
    assert m.operators and m.inputs and m.outputs
    assert {op.op for op in m.operators} <= ref.SUPPORTED_OPS
    for t in m.tensors:
        assert all(d >= 0 for d in t.shape)
        if t.data is not None:
            assert t.data.shape == t.shape
    ref.Interpreter(m)          # prepares every operator without error


def test_builder_round_trip():
    buf = SINGLE_OP_MODELS["depthwise_mult2"]()
    m = parse_tflite(buf, "dw.tflite")
    op = m.operators[0]
    assert op.op == "DEPTHWISE_CONV_2D"
    assert op.options["padding"] == "SAME" and op.options["depth_multiplier"] == 2
    assert op.options["fused_activation_function"] == "NONE"
    w = m.tensors[op.inputs[1]]
    assert w.quant.axis == 3 and w.quant.scale.shape == (8,) and w.dtype == "int8"
    reshape = parse_tflite(SINGLE_OP_MODELS["reshape"]()).operators[0]
    assert reshape.options == {"new_shape": (1, 24)}


# ============================================================================= corrupt files
def _small_model() -> bytes:
    return SINGLE_OP_MODELS["conv3x3_same_relu6"]()


@pytest.mark.parametrize("data, message", [
    (b"", "too short"),
    (b"TFL3", "too short"),
    (b"\x10\x00\x00\x00XXXX" + bytes(64), "file identifier b'XXXX'"),
    (b"\xff\xff\xff\x7fTFL3" + bytes(64), "root table offset"),
])
def test_garbage_headers(data, message):
    with pytest.raises(TFLiteError, match=message) as e:
        parse_tflite(data, "junk.tflite")
    assert "junk.tflite" in str(e.value)


def test_wrong_identifier_names_the_file():
    buf = bytearray(_small_model())
    buf[4:8] = b"ONNX"
    with pytest.raises(TFLiteError, match=r"'bad\.tflite'.*not a TFLite flatbuffer"):
        parse_tflite(bytes(buf), "bad.tflite")


def test_unreadable_path(tmp_path):
    with pytest.raises(TFLiteError, match="cannot read TFLite file"):
        load_tflite(tmp_path / "missing.tflite")
    (tmp_path / "empty.tflite").write_bytes(b"")
    with pytest.raises(TFLiteError, match="empty.tflite.*too short"):
        load_tflite(tmp_path / "empty.tflite")


def test_random_bytes_never_escape_as_raw_exceptions():
    rng = random.Random(0)
    for _ in range(300):
        n = rng.randint(8, 2000)
        data = bytearray(rng.getrandbits(8) for _ in range(n))
        if rng.random() < 0.7:
            data[4:8] = b"TFL3"                 # get past the identifier check
        try:
            parse_tflite(bytes(data), "random.tflite")
        except TFLiteError as e:
            assert "random.tflite" in str(e)


def test_truncated_files():
    buf = _small_model()
    for cut in range(0, len(buf) - 1, 7):
        with pytest.raises(TFLiteError) as e:
            parse_tflite(buf[:cut], "cut.tflite")
        assert "cut.tflite" in str(e.value)


def test_truncated_real_model():
    buf = model_path("tinyengine/vww.tflite").read_bytes()
    for frac in (0.001, 0.01, 0.1, 0.3, 0.5, 0.7, 0.9, 0.99, 0.9999):
        with pytest.raises(TFLiteError, match="vww"):
            parse_tflite(buf[:int(len(buf) * frac)], "vww.tflite")


def test_bit_flips_parse_or_raise_tflite_error():
    buf = _small_model()
    rng = random.Random(1)
    for _ in range(500):
        data = bytearray(buf)
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(8, len(data))] = rng.getrandbits(8)
        try:
            parse_tflite(bytes(data), "flipped.tflite")
        except TFLiteError:
            pass


def test_missing_subgraph():
    import flatbuffers
    import tflite
    b = flatbuffers.Builder(64)
    tflite.ModelStartSubgraphsVector(b, 0)
    subgraphs = b.EndVector()
    tflite.ModelStart(b)
    tflite.ModelAddVersion(b, 3)
    tflite.ModelAddSubgraphs(b, subgraphs)
    b.Finish(tflite.ModelEnd(b), file_identifier=b"TFL3")
    with pytest.raises(TFLiteError, match="nosub.tflite.*no subgraph"):
        parse_tflite(bytes(b.Output()), "nosub.tflite")


def test_tensor_index_out_of_range():
    b = ModelBuilder()
    x = b.add_tensor((1, 4))
    b.add_operator("RELU", [x], [7])
    with pytest.raises(TFLiteError, match=r"operator 0 \(RELU\) outputs: tensor index 7"):
        parse_tflite(b.build([x], [x]), "idx.tflite")


def test_constant_size_mismatch():
    b = ModelBuilder()
    x = b.add_tensor((1, 2, 3, 4), scale=0.1)
    p = b.add_tensor((3,), "int32", data=[0, 3, 1])
    b._tensors[p]["data"] = np.array([0, 3, 1, 2], dtype=np.int32)   # 16 bytes for shape (3,)
    y = b.add_tensor((1, 4, 2, 3), scale=0.1)
    b.add_operator("TRANSPOSE", [x, p], [y])
    with pytest.raises(TFLiteError, match=r"tensor 1 .*16 bytes, shape \[3\] of int32 needs 12"):
        parse_tflite(b.build([x], [y]), "size.tflite")


def test_unsupported_operator_names_op_and_index():
    b = ModelBuilder()
    x = b.add_tensor((1, 8), scale=0.1)
    y = b.add_tensor((1, 8), scale=0.1)
    z = b.add_tensor((1, 8), scale=1 / 128)
    b.add_operator("RELU", [x], [y])
    b.add_operator("TANH", [y], [z])
    m = parse_tflite(b.build([x], [z]), "tanh.tflite")
    with pytest.raises(UnsupportedOperatorError, match=r"operator 1 \(TANH\)") as e:
        ref.Interpreter(m)
    assert (e.value.op, e.value.index) == ("TANH", 1)
    assert isinstance(e.value, SerenityError)


def test_float_conv_is_unsupported():
    b = ModelBuilder()
    x = b.add_tensor((1, 4, 4, 2), "float32")
    w = b.add_tensor((3, 1, 1, 2), "float32", data=np.ones((3, 1, 1, 2)))
    y = b.add_tensor((1, 4, 4, 3), "float32")
    b.add_operator("CONV_2D", [x, w, -1], [y], {"padding": "VALID", "stride_h": 1,
                                                "stride_w": 1})
    with pytest.raises(UnsupportedOperatorError, match=r"operator 0 \(CONV_2D\).*float32"):
        ref.Interpreter(parse_tflite(b.build([x], [y])))


def test_input_validation():
    m = parse_tflite(SINGLE_OP_MODELS["logistic"]())
    with pytest.raises(ref.ReferenceError, match="must be int8 of shape"):
        ref.run(m, np.zeros((1, 6, 7, 10), dtype=np.float32))
    with pytest.raises(ref.ReferenceError, match="2 inputs given"):
        ref.run(m, [np.zeros((1, 6, 7, 10), np.int8)] * 2)
    x = np.zeros((1, 6, 7, 10), np.int8)
    name = m.tensors[m.inputs[0]].name
    assert np.array_equal(ref.run(m, {name: x})[0], ref.run(m, [x])[0])


# ================================================================ fixed point, checked by hand
@pytest.mark.parametrize("real, expected", [
    (0.0, (0, 0)), (0.5, (1 << 30, 0)), (1.0, (1 << 30, 1)), (0.25, (1 << 30, -1)),
    (0.75, (3 << 29, 0)), (2.0 ** -40, (0, 0)),
    (1.0 - 2.0 ** -40, (1 << 30, 1)),         # q * 2^31 rounds to 2^31: halved, shift + 1
    (3.0, (3 << 29, 2)),
])
def test_quantize_multiplier(real, expected):
    assert ref.quantize_multiplier(real) == expected


def test_quantize_multiplier_round_half_away():
    # q = 0.5 + 2^-32 + 2^-33 : q * 2^31 = 2^30 + 0.5 + 0.25 -> rounds up to 2^30 + 1
    q = 0.5 + 2.0 ** -32 + 2.0 ** -33
    assert ref.quantize_multiplier(q) == ((1 << 30) + 1, 0)
    q = 0.5 + 2.0 ** -32                       # exactly half: away from zero
    assert ref.quantize_multiplier(q) == ((1 << 30) + 1, 0)


def test_saturating_rounding_doubling_high_mul():
    f = ref.saturating_rounding_doubling_high_mul
    assert f(ref.INT32_MIN, ref.INT32_MIN) == ref.INT32_MAX
    assert f(1 << 30, 1 << 30) == 1 << 29
    assert f(3, 1 << 30) == 2                  # 1.5 -> 2
    assert f(-3, 1 << 30) == -1                # -1.5 -> -1 (gemmlowp's nudge)
    assert f(-5, 1 << 30) == -2                # -2.5 -> -2
    assert f(ref.INT32_MIN, ref.INT32_MAX) == -ref.INT32_MAX
    assert f(-32768, -32768, bits=16) == 32767


@pytest.mark.parametrize("x, e, expected", [
    (5, 1, 3), (-5, 1, -3), (4, 1, 2), (-4, 1, -2), (7, 2, 2), (-6, 2, -2), (-7, 2, -2),
    (6, 2, 2), (0, 5, 0), (ref.INT32_MAX, 31, 1), (ref.INT32_MIN, 31, -1), (123, 0, 123),
])
def test_rounding_divide_by_pot(x, e, expected):
    assert ref.rounding_divide_by_pot(x, e) == expected


def _c_srdhm(a: int, b: int) -> int:
    """gemmlowp SaturatingRoundingDoublingHighMul, transcribed with Python integers."""
    if a == b == -(1 << 31):
        return (1 << 31) - 1
    ab = a * b
    nudge = (1 << 30) if ab >= 0 else 1 - (1 << 30)
    q = abs(ab + nudge) // (1 << 31)
    return q if ab + nudge >= 0 else -q


def _c_rdbpot(x: int, e: int) -> int:
    mask = (1 << e) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (1 if x < 0 else 0)
    return (x >> e) + (1 if remainder > threshold else 0)


def _c_mbqm(x: int, m: int, shift: int) -> int:
    left, right = max(shift, 0), max(-shift, 0)
    shifted = ((x * (1 << left) + (1 << 31)) % (1 << 32)) - (1 << 31)     # int32 wrap
    return _c_rdbpot(_c_srdhm(shifted, m), right)


int32s = st.one_of(st.integers(-(1 << 31), (1 << 31) - 1),
                   st.sampled_from([-(1 << 31), (1 << 31) - 1, -1, 0, 1]))


@settings(max_examples=400, deadline=None)
@given(x=st.lists(int32s, min_size=1, max_size=8), m=st.integers(0, (1 << 31) - 1),
       shift=st.integers(-31, 30))
def test_vectorized_fixed_point_equals_scalar_transcription(x, m, shift):
    got = ref.multiply_by_quantized_multiplier(np.array(x), m, shift).tolist()
    assert got == [_c_mbqm(v, m, shift) for v in x]
    assert ref.saturating_rounding_doubling_high_mul(np.array(x), m).tolist() == \
        [_c_srdhm(v, m) for v in x]
    e = min(abs(shift), 31)
    assert ref.rounding_divide_by_pot(np.array(x), e).tolist() == [_c_rdbpot(v, e) for v in x]


@settings(max_examples=300, deadline=None)
@given(real=st.floats(min_value=1e-12, max_value=1e6, allow_nan=False))
def test_quantize_multiplier_reconstructs_the_scale(real):
    m, s = ref.quantize_multiplier(real)
    if m == 0:
        assert real < 2.0 ** -31
    else:
        assert (1 << 30) <= m < (1 << 31)
        assert abs(m * 2.0 ** (s - 31) - real) <= real * 2.0 ** -30


def test_multiply_by_quantized_multiplier():
    m, s = ref.quantize_multiplier(0.3)
    assert ref.multiply_by_quantized_multiplier(100, m, s) == 30
    assert ref.multiply_by_quantized_multiplier(-5, m, s) == -2     # -1.5 rounds away
    m3, s3 = ref.quantize_multiplier(3.0)
    assert ref.multiply_by_quantized_multiplier(7, m3, s3) == 21
    # Per-channel multipliers broadcast over the last axis.
    pairs = [ref.quantize_multiplier(r) for r in (0.5, 0.25, 2.0)]
    out = ref.multiply_by_quantized_multiplier(np.full((2, 3), 40), [p[0] for p in pairs],
                                               [p[1] for p in pairs])
    assert out.tolist() == [[20, 10, 80]] * 2


def test_requantize_and_activation_range():
    m, s = ref.quantize_multiplier(0.5)
    # -3 * 0.5 = -1.5 rounds to -1: with shift 0 only the high-mul rounds (half up)
    assert ref.requantize(np.array([-1000, -3, 3, 1000]), m, s, 10).tolist() == \
        [-128, 9, 12, 127]
    lo, hi = ref.activation_range("RELU6", 6.0 / 255, -128)
    assert (lo, hi) == (-128, 127)
    assert ref.activation_range("RELU", 0.1, 5) == (5, 127)
    assert ref.activation_range("RELU6", 0.1, -100) == (-100, -40)
    assert ref.requantize(np.array([-400, 400]), m, s, 0, -100, -40).tolist() == [-100, -40]


def test_same_padding_puts_the_odd_row_last():
    assert ref.same_padding("SAME", (10, 9), (3, 3), (2, 2)) == (0, 1, 1, 1)
    assert ref.same_padding("SAME", (5, 5), (3, 3), (1, 1), (2, 2)) == (2, 2, 2, 2)
    assert ref.same_padding("VALID", (10, 9), (3, 3), (2, 2)) == (0, 0, 0, 0)


def test_fixed_point_transcendentals_are_accurate():
    for v in (-0.001, -0.1, -0.25, -1.0, -2.5, -7.9):
        e = int(ref.exp_on_negative_values(round(v * 2 ** 26), 5)) / 2 ** 31
        assert abs(e - math.exp(v)) < 2e-6
    for v in (0.0, 0.25, 0.5, 0.99):
        r = int(ref.one_over_one_plus_x_for_x_in_0_1(round(v * 2 ** 31))) / 2 ** 31
        assert abs(r - 1 / (1 + v)) < 1e-8
    for v in (-3.0, -0.5, 0.5, 3.0):
        s = int(ref.fixed_point_logistic(round(v * 2 ** 27), 4)) / 2 ** 31
        assert abs(s - 1 / (1 + math.exp(-v))) < 1e-6
    assert ref.fixed_point_logistic(0, 4) == 1 << 30


# ==================================================================== kernels, checked by hand
def _identity_requant(zp=0):
    m, s = ref.quantize_multiplier(1.0)
    return ref.Requant(np.array([m]), np.array([s]), zp)


def test_conv2d_same_padding_skips_out_of_bounds_taps():
    x = np.full((1, 3, 3, 1), 7, dtype=np.int8)          # zero point 6: every tap is 1
    w = np.ones((1, 3, 3, 1), dtype=np.int8)
    p = ref.ConvParams((1, 1), (1, 1), (1, 1, 1, 1), 6, _identity_requant())
    y = ref.conv2d_int8(x, w, np.array([100], dtype=np.int32), p)
    assert y[0, :, :, 0].tolist() == [[104, 106, 104], [106, 109, 106], [104, 106, 104]]


def test_explicit_zero_point_padding_equals_conv_padding():
    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, (1, 6, 5, 3), dtype=np.int8)
    w = rng.integers(-127, 128, (4, 3, 3, 3), dtype=np.int8)
    req = ref.conv_requant(0.05, rng.uniform(0.01, 0.02, 4), 0.3, -4)
    zp = 9
    folded = ref.conv2d_int8(x, w, None, ref.ConvParams((2, 1), (1, 1), (1, 2, 0, 1), zp, req))
    padded = ref.pad(x, [[0, 0], [1, 2], [0, 1], [0, 0]], zp)
    plain = ref.conv2d_int8(padded, w, None, ref.ConvParams((2, 1), (1, 1), (0, 0, 0, 0), zp,
                                                            req))
    assert np.array_equal(folded, plain)


def test_depthwise_multiplier_channel_order():
    x = np.array([[[[1, 2]]]], dtype=np.int8)            # 1x1x1x2, zero point 0
    w = np.array([[[[1, 2, 3, 4]]]], dtype=np.int8)      # out channel c*2+m reads input c
    p = ref.ConvParams((1, 1), (1, 1), (0, 0, 0, 0), 0, _identity_requant())
    assert ref.depthwise_conv2d_int8(x, w, None, p).ravel().tolist() == [1, 2, 6, 8]


def test_average_pool_rounds_half_away_and_ignores_padding():
    x = np.array([1, 2, -1, -2, 5, 6], dtype=np.int8).reshape(1, 1, 6, 1)
    p = ref.PoolParams((1, 2), (1, 2), (0, 0, 0, 0))
    assert ref.average_pool_int8(x, p).ravel().tolist() == [2, -2, 6]   # 1.5, -1.5, 5.5
    x = np.array([[4, 8], [8, 8]], dtype=np.int8).reshape(1, 2, 2, 1)
    p = ref.PoolParams((3, 3), (1, 1), (1, 1, 1, 1))
    assert ref.average_pool_int8(x, p).ravel().tolist() == [7, 7, 7, 7]    # 28 / 4


def test_max_pool_ignores_padding():
    x = np.full((1, 2, 2, 1), -100, dtype=np.int8)
    p = ref.PoolParams((3, 3), (1, 1), (1, 1, 1, 1))
    assert ref.max_pool_int8(x, p).ravel().tolist() == [-100] * 4


def test_mean_uses_the_count_scaled_multiplier():
    m, s = ref.quantize_multiplier(1.0)
    x = np.array([1, 2, 3, 4], dtype=np.int8).reshape(1, 2, 2, 1)
    assert ref.mean_int8(x, [1, 2], 0, m, s, 0).ravel().tolist() == [3]     # 2.5 -> 3
    x = np.array([-1, -2, -3, -4], dtype=np.int8).reshape(1, 2, 2, 1)
    assert ref.mean_int8(x, [1, 2], 0, m, s, 0).ravel().tolist() == [-3]


def test_add_same_scale_is_exact_sum():
    p = ref.add_params(0.1, 0, 0.1, 0, 0.1, 0)
    a = np.array([10, -50, 100], dtype=np.int8)
    b = np.array([20, -60, 100], dtype=np.int8)
    assert ref.add_int8(a, b, p).tolist() == [30, -110, 127]
    assert p.left_shift == 20


def test_softmax_uniform_row_and_logistic_midpoint():
    p = ref.softmax_params(1.0, 0.1)
    assert ref.softmax_int8(np.zeros((2, 4), dtype=np.int8), p).tolist() == [[-64] * 4] * 2
    lp = ref.logistic_params(0.1, 5)
    assert ref.logistic_int8(np.array([5, 127, -128], dtype=np.int8), lp).tolist() == \
        [0, 127, -128]
    hp = ref.hard_swish_params(0.05, -3, 0.05, -3)
    assert ref.hard_swish_int8(np.array([-3], dtype=np.int8), hp).tolist() == [-3]


def test_quantize_rounds_half_away_and_saturates():
    x = np.array([0.5, -0.5, 1.5, 2.5, 1e9, -1e9], dtype=np.float32)
    assert ref.quantize(x, 1.0, 0).tolist() == [1, -1, 2, 3, 127, -128]
    assert ref.dequantize(np.array([3, -128], dtype=np.int8), 0.5, 1).tolist() == [1.0, -64.5]


def test_resize_nearest_neighbor():
    x = np.arange(4, dtype=np.int8).reshape(1, 2, 2, 1)
    up = ref.resize_nearest_neighbor(x, (4, 4), False, False)
    assert up[0, :, :, 0].tolist() == [[0, 0, 1, 1], [0, 0, 1, 1], [2, 2, 3, 3], [2, 2, 3, 3]]
    x = np.arange(3, dtype=np.int8).reshape(1, 1, 3, 1)
    assert ref.resize_nearest_neighbor(x, (1, 5), True, False).ravel().tolist() == \
        [0, 1, 1, 2, 2]


#: The single-op STRIDED_SLICE cases as numpy slicing (TFLite's semantics are numpy's).
STRIDED_SLICES = {
    "strided_slice_crop": lambda x: x[:, 1:, 1:, :],
    "strided_slice_step2": lambda x: x[:, 1::2, ::3, 1:5],
    "strided_slice_reverse": lambda x: x[:, ::-1, 5:0:-2, :],
    "strided_slice_shrink": lambda x: x[:, 2, 1:-1, -1],
    "strided_slice_clamp": lambda x: x[-1:, -4:-1, -100:100:2, 1:-1],
    "strided_slice_rank2": lambda x: x[6:1:-2, 1::3],
}


@pytest.mark.parametrize("case", sorted(STRIDED_SLICES))
def test_strided_slice_is_numpy_slicing(case):
    assert set(STRIDED_SLICE_MODELS) == set(STRIDED_SLICES)
    m = parse_tflite(STRIDED_SLICE_MODELS[case]())
    x = np.random.default_rng(1).integers(-128, 128, m.tensors[m.inputs[0]].shape, np.int8)
    for runtime in ref.RUNTIMES:
        np.testing.assert_array_equal(ref.run(m, x, runtime)[0], STRIDED_SLICES[case](x))


def _interpreter_truth(kind, buf, x):
    m = parse_tflite(buf)
    return np.asarray(run_interpreter(kind, buf, [[x]])[0][m.outputs[0]]).reshape(
        m.tensors[m.outputs[0]].shape)


def test_strided_slice_offset():
    """``offset`` (end relative to begin) is TFLite's; TFLite Micro ignores the option, so the
    TFLM reference accepts it only where both read the same elements."""
    x = np.random.default_rng(2).integers(-128, 128, (1, 5, 5, 3), np.int8)
    moved = strided_slice((1, 5, 5, 3), [0, 1, 2, 0], [1, 3, 3, 3], [1, 1, 1, 1], (1, 3, 3, 3),
                          offset=True)
    m = parse_tflite(moved, "offset.tflite")
    np.testing.assert_array_equal(ref.run(m, x, LITERT)[0], x[:, 1:4, 2:5, :])
    with pytest.raises(ref.ReferenceError, match=r"offset\.tflite: operator 0 \(STRIDED_SLICE\)"
                       r": offset=True is not supported: TFLite Micro ignores it"):
        ref.Interpreter(m)
    at_zero = strided_slice((1, 5, 5, 3), [0, 0, 0, 0], [1, 3, 3, 3], [1, 1, 1, 1],
                            (1, 3, 3, 3), offset=True)
    for runtime in ref.RUNTIMES:
        np.testing.assert_array_equal(ref.run(parse_tflite(at_zero), x, runtime)[0],
                                      x[:, :3, :3, :])
    if available(LITERT):
        np.testing.assert_array_equal(_interpreter_truth(LITERT, moved, x), x[:, 1:4, 2:5, :])
        np.testing.assert_array_equal(_interpreter_truth(LITERT, at_zero, x), x[:, :3, :3, :])
    if available(TFLM):
        np.testing.assert_array_equal(_interpreter_truth(TFLM, at_zero, x), x[:, :3, :3, :])


@pytest.mark.parametrize("dtype", ["float32", "int16", "int32"])
def test_strided_slice_other_types(dtype):
    """Data movement: TFLite Micro slices float32, int16 and int32 tensors too."""
    buf = strided_slice((1, 6, 5, 4), [0, 1, 4, 0], [1, 6, 0, 3], [1, 2, -1, 1], (1, 3, 4, 3),
                        dtype=dtype)
    m = parse_tflite(buf)
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((1, 6, 5, 4)) * 1000).astype(dtype)
    np.testing.assert_array_equal(ref.run(m, x)[0], x[:, 1::2, 4:0:-1, :3])
    for kind in (TFLM, LITERT):
        if available(kind):
            np.testing.assert_array_equal(_interpreter_truth(kind, buf, x), x[:, 1::2, 4:0:-1, :3])


def _slice_with_tensors(begin, end, strides, begin_dtype="int32", constant=True):
    b = ModelBuilder()
    x = b.add_tensor((1, 4, 4, 2), scale=0.1)
    cs = [b.add_tensor((len(v),), begin_dtype, data=v if constant else None)
          for v in (begin, end, strides)]
    y = b.add_tensor((1, 3, 3, 2), scale=0.1)
    b.add_operator("STRIDED_SLICE", [x, *cs], [y])
    return parse_tflite(b.build([x] + ([] if constant else cs), [y]), "slice.tflite")


@pytest.mark.parametrize("make, error, message", [
    (lambda: strided_slice((1, 5, 5, 3), [0, 1, 1, 0], [1, 5, 5, 3], [1, 1, 1, 1],
                           (1, 4, 4, 3), ellipsis_mask=1),
     ref.ReferenceError, r"ellipsis_mask=1 is not supported \(TFLite Micro ignores it"),
    (lambda: strided_slice((1, 5, 5, 3), [0, 0, 0, 0], [1, 5, 5, 3], [1, 1, 1, 1],
                           (1, 1, 5, 5, 3), new_axis_mask=1),
     ref.ReferenceError, r"new_axis_mask=1 is not supported \(TFLite Micro ignores it"),
    (lambda: strided_slice((1, 5, 5, 3), [0, 0, 0, 0], [1, 5, 5, 3], [1, 0, 1, 1],
                           (1, 5, 5, 3)),
     ref.ReferenceError, r"the stride of axis 1 is 0"),
    (lambda: strided_slice((1, 5, 5, 3), [0, 2, 0, 0], [1, 3, 5, 3], [1, -1, 1, 1],
                           (1, 5, 3), shrink_axis_mask=0b10),
     ref.ReferenceError, r"axis 1 is shrunk with a negative stride"),
    (lambda: strided_slice((1, 5, 5, 3), [0, 5, 0, 0], [1, 6, 5, 3], [1, 1, 1, 1],
                           (1, 5, 3), shrink_axis_mask=0b10),
     ref.ReferenceError, r"shrunk axis 1 reads index 5, outside its 5 elements"),
    (lambda: strided_slice((1, 5, 5, 3), [0, 1, 1, 0], [1, 5, 5, 3], [1, 1, 1, 1],
                           (1, 5, 5, 3)),
     ref.ReferenceError, r"computed output shape \(1, 4, 4, 3\) differs from the model's"),
    (lambda: strided_slice((1, 1, 2, 3, 4), [0] * 5, [1, 1, 2, 3, 4], [1] * 5,
                           (1, 1, 2, 3, 4)),
     ref.ReferenceError, r"input of rank 5 \(TFLite Micro slices at most 4"),
    (lambda: _slice_with_tensors([0, 1, 1, 0], [1, 4, 4, 2], [1, 1, 1, 1], constant=False),
     UnsupportedOperatorError, r"begin must be a constant tensor"),
    (lambda: _slice_with_tensors([0, 1, 1, 0], [1, 4, 4, 2], [1, 1, 1, 1], "int64"),
     UnsupportedOperatorError, r"begin must be an int32 vector of 4 values"),
    (lambda: _slice_with_tensors([0, 1, 1], [1, 4, 4], [1, 1, 1]),
     UnsupportedOperatorError, r"begin must be an int32 vector of 4 values .*int32 \[3\]"),
])
def test_strided_slice_rejections_name_the_operator(make, error, message):
    model = make()
    model = model if not isinstance(model, bytes) else parse_tflite(model, "slice.tflite")
    for runtime in ref.RUNTIMES:
        with pytest.raises(error, match=r"slice\.tflite: operator 0 \(STRIDED_SLICE\): "
                                        + message):
            ref.Interpreter(model, runtime)


def test_run_all_keeps_every_intermediate():
    m = parse_tflite(SINGLE_OP_MODELS["pad_then_depthwise"]())
    x = np.random.default_rng(0).integers(-128, 128, (1, 9, 9, 4), dtype=np.int8)
    values = ref.run_all(m, x)
    assert set(values) == {m.inputs[0], *(op.outputs[0] for op in m.operators)}
    padded = values[m.operators[0].outputs[0]]
    assert padded.shape == (1, 12, 12, 4) and np.all(padded[:, 0] == 11)
    assert np.array_equal(ref.run(m, x)[0], values[m.outputs[0]])


# ========================================================== bit-exact against the interpreters
def _single_op_inputs(model):
    return [model_inputs(model, np.random.default_rng(seed)) for seed in range(3)]


_SINGLE_OP_TRUTH: dict[str, dict] = {}
ALL_SINGLE_OP_MODELS = {**SINGLE_OP_MODELS, **STRIDED_SLICE_MODELS}


def single_op_truth(kind: str, case: str):
    """Every single-op model through ``kind``, in one interpreter subprocess (cached)."""
    if kind not in _SINGLE_OP_TRUTH:
        cases = sorted(ALL_SINGLE_OP_MODELS)
        jobs = []
        for c in cases:
            buf = ALL_SINGLE_OP_MODELS[c]()
            jobs.append((buf, _single_op_inputs(parse_tflite(buf))))
        _SINGLE_OP_TRUTH[kind] = dict(zip(cases, run_interpreter_batch(kind, jobs)))
    return _SINGLE_OP_TRUTH[kind][case]


@pytest.mark.parametrize("kind", INTERPRETERS)
@pytest.mark.parametrize("case", sorted(ALL_SINGLE_OP_MODELS))
def test_single_op_models_bit_exact(case, kind):
    model = parse_tflite(ALL_SINGLE_OP_MODELS[case](), f"{case}.tflite")
    assert_bit_exact(model, _single_op_inputs(model), single_op_truth(kind, case),
                     f"{case} vs {kind}", kind)


@pytest.mark.parametrize("case", sorted(RUNTIME_SPECIFIC))
def test_runtime_specific_cases_really_differ(case):
    """The two arithmetic variants are distinguishable on these models, so the bit-exact
    tests above check which one each interpreter runs."""
    model = parse_tflite(SINGLE_OP_MODELS[case]())
    sets = _single_op_inputs(model)
    tflm, litert = ref.Interpreter(model, TFLM), ref.Interpreter(model, LITERT)
    assert any(not np.array_equal(tflm.run(s)[0], litert.run(s)[0]) for s in sets)


@pytest.mark.parametrize("kind", INTERPRETERS)
@pytest.mark.parametrize("rel", [pytest.param(r, marks=pytest.mark.slow) if r in SLOW_MODELS
                                 else r for r in all_model_files()])
def test_real_models_bit_exact(rel, kind):
    path = model_path(rel)
    model = load_tflite(path)
    sets = [model_inputs(model, np.random.default_rng(seed)) for seed in range(4)]
    truth = run_interpreter(kind, path, sets)
    assert all(len(t) == sum(1 for x in model.tensors if x.data is None) for t in truth)
    assert_bit_exact(model, sets, truth, f"{rel} vs {kind}", kind)
