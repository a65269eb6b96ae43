"""Malformed int8 models are refused as TFLite Micro's ``Prepare`` refuses them, with one line
naming the operator (its index in the file and its name) and the tensor, by every consumer: the
reference interpreter, the graph IR, the MCU C path and the Relax importer. TFLite Micro itself
is the judge: each malformation it can load is run through it, and it refuses it too (or, where
it does not, the test shows why its result cannot be trusted)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from tflite_cases import all_model_files, model_path
from tvm_serenity.codegen.graph_c import integer_core
from toolchain import needs_cc
from tvm_serenity.deploy import compile_tflite, run
from tvm_serenity.errors import SerenityError
from tvm_serenity.frontend import reference as ref
from tvm_serenity.frontend.builder import ModelBuilder
from tvm_serenity.frontend.interpreters import (TFLM, InterpreterError, available, model_inputs,
                                                run_interpreter)
from tvm_serenity.frontend.tflite_model import load_tflite, parse_tflite
from tvm_serenity.frontend.to_graph import tflite_to_graph

needs_tflm = pytest.mark.skipif(not available(TFLM), reason="tflite-micro is not installed")


# ============================================================================ malformed models
def conv(*, op="CONV_2D", x_shape=(1, 6, 6, 4), w_shape=None, out_shape=None, cin=None,
         in_q=(0.05, 3), w_scale=0.01, w_zp=0, out_q=(0.08, -5), options=None, inputs=None,
         outputs=None, graph_outputs=None, extra_input=False, seed=0) -> bytes:
    """One CONV_2D / DEPTHWISE_CONV_2D (3x3, SAME, stride 1), each part overridable."""
    rng = np.random.default_rng(seed)
    b = ModelBuilder()
    cin = x_shape[-1] if cin is None else cin
    cout = 6 if op == "CONV_2D" else cin
    w_shape = w_shape or ((cout, 3, 3, cin) if op == "CONV_2D" else (1, 3, 3, cout))
    cout = w_shape[0] if op == "CONV_2D" else w_shape[3]
    x = b.add_tensor(x_shape, scale=in_q[0], zero_point=in_q[1], name="x")
    w = b.add_tensor(w_shape, scale=w_scale, zero_point=w_zp, axis=0 if op == "CONV_2D" else 3,
                     data=rng.integers(-127, 128, w_shape), name="w")
    bias = b.add_tensor((cout,), "int32", data=rng.integers(-300, 300, cout), name="bias")
    y = b.add_tensor(out_shape or (*x_shape[:-1], cout), scale=out_q[0], zero_point=out_q[1],
                     name="y")
    opts = {"padding": "SAME", "stride_h": 1, "stride_w": 1, "dilation_h_factor": 1,
            "dilation_w_factor": 1, "fused_activation_function": "NONE"}
    if op == "DEPTHWISE_CONV_2D":
        opts["depth_multiplier"] = 1
    opts.update(options or {})
    ins = [x, w, bias] + ([bias] if extra_input else [])
    b.add_operator(op, ins if inputs is None else [{"x": x, "w": w, "b": bias}.get(i, i)
                                                   for i in inputs],
                   [y] if outputs is None else outputs, opts)
    return b.build([x], [y] if graph_outputs is None else [{"w": w}.get(o, o)
                                                           for o in graph_outputs])


def unary(op, shape=(1, 4, 4, 3), out_shape=None, in_q=(0.05, 3), out_q=(0.05, 3), consts=(),
          options=None, inputs=None, outputs=None) -> bytes:
    """One operator on one int8 activation (and constant operands ``consts``)."""
    b = ModelBuilder()
    x = b.add_tensor(shape, scale=in_q[0], zero_point=in_q[1], name="x")
    cs = [b.add_tensor(np.shape(c), str(np.asarray(c).dtype), data=c, name=f"c{k}")
          for k, c in enumerate(consts)]
    y = b.add_tensor(out_shape or shape, scale=out_q[0], zero_point=out_q[1], name="y")
    b.add_operator(op, [x, *cs] if inputs is None else inputs,
                   [y] if outputs is None else outputs, options)
    return b.build([x], [y])


def pool(x_shape=(1, 6, 6, 3), out_shape=(1, 3, 3, 3), **options) -> bytes:
    opts = {"padding": "VALID", "stride_h": 2, "stride_w": 2, "filter_height": 2,
            "filter_width": 2, "fused_activation_function": "NONE", **options}
    return unary("MAX_POOL_2D", x_shape, out_shape, options=opts)


def float_edged(middle) -> bytes:
    """float32 -> QUANTIZE (operator 0) -> ``middle(b, x)`` -> DEQUANTIZE -> float32."""
    b = ModelBuilder()
    xf = b.add_tensor((1, 6, 6, 4), "float32", name="xf")
    x = b.add_tensor((1, 6, 6, 4), scale=0.05, zero_point=3, name="x")
    b.add_operator("QUANTIZE", [xf], [x])
    y = middle(b, x)
    out = b.add_tensor(b._tensors[y]["shape"], "float32", name="out")
    b.add_operator("DEQUANTIZE", [y], [out])
    return b.build([xf], [out])


def grouped_conv(b: ModelBuilder, x: int) -> int:
    """A grouped CONV_2D (2 groups of 2 channels): the reference runs it, the C emitter not."""
    w = b.add_tensor((6, 3, 3, 2), scale=0.01, axis=0,
                     data=np.random.default_rng(0).integers(-127, 128, (6, 3, 3, 2)), name="w")
    y = b.add_tensor((1, 6, 6, 6), scale=0.08, zero_point=-5, name="y")
    b.add_operator("CONV_2D", [x, w, -1], [y], {"padding": "SAME", "stride_h": 1,
                                                "stride_w": 1})
    return y


DENORMAL = 1e-40          # below float32's smallest normal, 1.18e-38

#: name -> (model, what the refusal says after "operator N (OP): ", whether TFLite Micro can
#: load the file and run it to see whether it refuses).
MALFORMED = {
    # silently wrong before: TFLite Micro refuses these
    "mean_axis_out_of_range": (
        lambda: unary("MEAN", (1, 4, 4, 3), (1, 4, 4), consts=[np.array([5], np.int32)],
                      options={"keep_dims": False}),
        r"operator 0 \(MEAN\): axis 5 is out of range for input 'x' of rank 4"),
    "conv_four_inputs": (
        lambda: conv(extra_input=True),
        r"operator 0 \(CONV_2D\): has 4 inputs, TFLite takes 2 to 3"),
    "weight_zero_point_4.4e16": (
        lambda: conv(w_zp=44_000_000_000_000_000),
        r"operator 0 \(CONV_2D\): tensor 'w' has zero point 44000000000000000, outside "
        r"int8's \[-128, 127\]"),
    "input_scale_0": (
        lambda: conv(in_q=(0.0, 3)),
        r"operator 0 \(CONV_2D\): tensor 'x' has scale 0; activation scales must be finite, "
        r"positive and normal"),
    "depth_multiplier_contradicts_shapes": (
        lambda: conv(op="DEPTHWISE_CONV_2D", options={"depth_multiplier": 2}),
        r"operator 0 \(DEPTHWISE_CONV_2D\): weights 'w' of shape \[1, 3, 3, 4\] do not match "
        r"input 'x' of 4 channels with depth_multiplier 2"),
    # tracebacks before
    "stride_0": (
        lambda: conv(options={"stride_h": 0}),
        r"operator 0 \(CONV_2D\): stride_h is 0, must be at least 1"),
    "pool_stride_0": (
        lambda: pool(stride_w=0),
        r"operator 0 \(MAX_POOL_2D\): stride_w is 0, must be at least 1"),
    "output_scale_nan": (
        lambda: conv(out_q=(float("nan"), 0)),
        r"tensor 'y' has scale nan; activation scales must be finite"),
    "output_scale_inf": (
        lambda: conv(out_q=(float("inf"), 0)),
        r"tensor 'y' has scale inf; activation scales must be finite"),
    "output_scale_denormal": (
        lambda: conv(out_q=(DENORMAL, 0)),
        r"tensor 'y' has scale 9.99995e-41; activation scales must be finite, positive and "
        r"normal"),
    "relu_no_inputs": (
        lambda: unary("RELU", inputs=[]),
        r"operator 0 \(RELU\): has 0 inputs, TFLite takes 1"),
    "relu_no_outputs": (
        lambda: unary("RELU", outputs=[]),
        r"operator 0 \(RELU\): has 0 outputs, TFLite writes 1"),
    "unknown_fused_activation": (
        lambda: conv(options={"fused_activation_function": 17}),
        r"operator 0 \(CONV_2D\): fused activation 17 is not one of TFLite's int8 activations"),
    "conv_rank2_input": (
        lambda: conv(x_shape=(6, 4), out_shape=(6, 6)),
        r"operator 0 \(CONV_2D\): input 'x' has shape \[6, 4\], of rank 2; TFLite needs "
        r"rank 4"),
    "pool_rank2_input": (
        lambda: pool(x_shape=(6, 3), out_shape=(3, 3)),
        r"operator 0 \(MAX_POOL_2D\): input 'x' has shape \[6, 3\], of rank 2"),
    "omitted_first_input": (
        lambda: conv(inputs=[-1, "w", "b"]),
        r"operator 0 \(CONV_2D\): input 0 is omitted \(tensor index -1\); only an optional "
        r"input may be"),
    "omitted_weights": (
        lambda: conv(inputs=["x", -1, "b"]),
        r"operator 0 \(CONV_2D\): input 1 is omitted"),
    "graph_output_is_a_weight": (
        lambda: conv(graph_outputs=["w"]),
        r"graph output 'w' is a constant tensor"),
    "conv_fewer_input_channels_than_filter": (
        lambda: conv(x_shape=(1, 6, 6, 2), cin=4),
        r"operator 0 \(CONV_2D\): input 'x' has 2 channels, which weights 'w' of 4 input and "
        r"6 output channels do not split into groups"),
    "conv_one_channel_grammar": (
        lambda: conv(x_shape=(1, 6, 6, 1), w_shape=(6, 3, 3, 2)),
        r"input 'x' has 1 channel, which weights"),
    "concat_requantizing": (
        lambda: unary("CONCATENATION", (1, 4, 4, 3), (1, 4, 4, 6), out_q=(0.1, 3),
                      inputs=[0, 0], options={"axis": 3}),
        r"operator 0 \(CONCATENATION\): input 'x' is quantized unlike output 'y'"),
    "relu6_range_overflows_int32": (
        lambda: conv(out_q=(2e-38, 0), options={"fused_activation_function": "RELU6"}),
        r"operator 0 \(CONV_2D\): 6.0 quantized with scale 2e-38 .* overflows int32"),
    # multipliers that TFLite's C computes with an undefined shift
    "weight_scale_1.6e27": (
        lambda: conv(w_scale=[0.01, 1.6e27, 0.02, 0.01, 0.01, 0.01]),
        r"operator 0 \(CONV_2D\): output channel 1: requantization scale 1e\+27 is 2\^31 or "
        r"more"),
    "activation_scale_1e30": (
        lambda: unary("QUANTIZE", in_q=(1e30, 0), out_q=(0.05, 0)),
        r"operator 0 \(QUANTIZE\): requantization scale 2e\+31 is 2\^31 or more"),
}


def _model(case: str):
    return parse_tflite(MALFORMED[case][0](), f"{case}.tflite")


#: Where TFLite Micro loads and runs the malformation instead of refusing it: it ignores the
#: option, the quantization or the tensor (weight zero point, input scale 0, fused activation
#: 17 as NONE, depth_multiplier), reads past a tensor (MEAN axis 5, rank-2 pool input, a
#: constant as graph output), divides by a scale that is not a number, or shifts by 32 bits
#: or more (the two extreme scales: see test_extreme_multiplier_is_cpu_dependent_in_tflm).
#: We refuse all of them: none has a defined result.
TFLM_RUNS = {"mean_axis_out_of_range", "weight_zero_point_4.4e16", "input_scale_0",
             "depth_multiplier_contradicts_shapes", "stride_0", "pool_stride_0",
             "output_scale_nan", "output_scale_inf", "output_scale_denormal",
             "unknown_fused_activation", "pool_rank2_input", "graph_output_is_a_weight",
             "weight_scale_1.6e27", "activation_scale_1e30"}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_every_consumer_refuses_with_one_line_naming_the_culprit(case, tmp_path):
    """The reference interpreter, the MCU path (integer core, graph IR, C emitter) and the
    llvm route's Relax importer all refuse, with the same one-line message."""
    from tvm_serenity.frontend.relax_import import from_tflite
    model = _model(case)
    message = rf"^(.*/)?{case}\.tflite: .*{MALFORMED[case][1]}"
    path = tmp_path / f"{case}.tflite"
    path.write_bytes(MALFORMED[case][0]())
    consumers = [ref.Interpreter, from_tflite,
                 lambda m: compile_tflite(path, "host", tmp_path / "out", build=False)]
    for consume in consumers:
        with pytest.raises(SerenityError, match=message) as e:
            consume(model)
        assert "\n" not in str(e.value)


def _tflm(buf: bytes):
    model = parse_tflite(buf)
    return run_interpreter(TFLM, buf, [model_inputs(model, np.random.default_rng(0))],
                           timeout=120)[0]


_TFLM_RESULT: dict[str, str] = {}


def tflm_outcome(case: str) -> str:
    """``"refuses"`` or ``"runs"``: every malformed model through TFLite Micro once, two
    subprocesses at a time (cached)."""
    if not _TFLM_RESULT:
        def outcome(name):
            try:
                _tflm(MALFORMED[name][0]())
                return "runs"
            except InterpreterError:
                return "refuses"
        with ThreadPoolExecutor(2) as pool:
            _TFLM_RESULT.update(zip(sorted(MALFORMED), pool.map(outcome, sorted(MALFORMED))))
    return _TFLM_RESULT[case]


@needs_tflm
@pytest.mark.slow          # one TFLite Micro subprocess per model: about 45 s on two cores
@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_tflm_refuses_the_same_models_or_runs_them_undefined(case):
    assert tflm_outcome(case) == ("runs" if case in TFLM_RUNS else "refuses")


def _x86_and_arm_requant(acc, multiplier: int, shift: int, zero_point: int):
    """TFLite's ``MultiplyByQuantizedMultiplier`` as x86 and as Arm compute ``x * (1 << s)``
    for ``s >= 32`` (undefined in C): x86 shifts by ``s mod 32``, Arm's LSL by the whole
    amount (giving 0)."""
    wrap = lambda v: ((np.asarray(v, np.int64) + (1 << 31)) % (1 << 32)) - (1 << 31)  # noqa
    out = []
    for left in (shift % 32, None):
        shifted = wrap(acc * (1 << left)) if left is not None else np.zeros_like(acc)
        v = ref.saturating_rounding_doubling_high_mul(shifted, multiplier) + zero_point
        out.append(np.clip(v, -128, 127))
    return out


@needs_tflm
def test_extreme_multiplier_is_cpu_dependent_in_tflm():
    """A per-channel weight scale of 1.6e27 makes channel 1's multiplier 1e27 = m * 2^90:
    TFLite Micro on this x86 host computes ``x * (1 << 90)`` as a shift by 26, a Cortex-M by
    90 (0), so the model has no one result and is refused (above) rather than guessed."""
    buf = MALFORMED["weight_scale_1.6e27"][0]()
    model = parse_tflite(buf)
    op = model.operators[0]
    w, bias = (model.tensors[i] for i in op.inputs[1:])
    got = _tflm(buf)
    x = model_inputs(model, np.random.default_rng(0))[0]
    shifted = ref.pad(x.astype(np.int64) - 3, [[0, 0], [1, 1], [1, 1], [0, 0]], 0)
    acc = sum(shifted[:, i:i + 6, j:j + 6, :] @ w.data[1, i, j].astype(np.int64)
              for i in range(3) for j in range(3)) + int(bias.data[1])
    real = np.float64(np.float32(0.05)) * np.float64(np.float32(1.6e27)) / np.float64(
        np.float32(0.08))                 # PopulateConvolutionQuantizationParams, in double
    m, s = np.frexp(real)
    multiplier = int(round(m * 2 ** 31))
    x86, arm = _x86_and_arm_requant(acc, multiplier, int(s), -5)
    channel = np.asarray(got[model.outputs[0]]).reshape(1, 6, 6, 6)[..., 1]
    assert np.array_equal(channel, x86) and not np.array_equal(channel, arm)


def _extreme_but_defined() -> bytes:
    """Per-channel weight scales at the edges QuantizeMultiplier defines: flushed to zero
    (shift < -31), shift exactly 31, negative, ordinary."""
    return conv(w_scale=[1e-12, 3e9, -0.02, 0.01, 2.5e9, 1e-9], seed=3)


def test_extreme_but_defined_scales_prepare():
    model = parse_tflite(_extreme_but_defined())
    requant = ref.conv_params(model, model.operators[0]).requant
    assert requant.shift.tolist() == [0, 31, -6, -7, 31, -30]   # 6.25e-13 flushed to (0, 0)
    assert requant.multiplier[0] == 0 and requant.multiplier[2] < 0


@needs_tflm
def test_extreme_but_defined_scales_are_bit_exact_with_tflm():
    buf = _extreme_but_defined()
    model = parse_tflite(buf)
    x = model_inputs(model, np.random.default_rng(0))
    ours = ref.run(model, x)[0]
    theirs = np.asarray(_tflm(buf)[model.outputs[0]]).reshape(ours.shape)
    assert np.array_equal(ours, theirs)


@needs_cc
def test_mcu_path_names_operators_by_their_index_in_the_file(tmp_path):
    """The integer core drops the float QUANTIZE (operator 0); the build still calls the
    grouped CONV_2D operator 1 (node ``conv2d_1``), as the file does, and runs it (as the
    dense convolution) bit-exact with the reference."""
    path = tmp_path / "grouped.tflite"
    path.write_bytes(float_edged(grouped_conv))
    core = integer_core(load_tflite(path))
    assert [op.index for op in core.model.operators] == [1]
    assert core.model.operator(1).op == "CONV_2D"
    compiled = compile_tflite(path, "host", tmp_path / "out")
    assert "conv2d_1" in compiled.graph.op_names
    run(compiled.out_dir)               # every output byte checked against the reference


@pytest.mark.parametrize("rel", all_model_files())
def test_shared_models_validate(rel):
    """No false refusal: every shared model (all subfolders) passes every consumer's checks."""
    model = load_tflite(model_path(rel))
    ref.validate(model)
    ref.Interpreter(model)
    tflite_to_graph(model)



@pytest.mark.parametrize("op", ["CONV_2D", "ADD"])
def test_operator_without_its_builtin_options_is_refused_when_read(op, tmp_path):
    """TFLite Micro runs an operator whose options table is missing with zeroed options
    (stride 0, ...), so the result is undefined (the fuzz suite saw it differ): the reader
    refuses it, naming the operator, for every consumer."""
    b = ModelBuilder()
    x = b.add_tensor((1, 4, 4, 2), scale=0.05, zero_point=0, name="x")
    y = b.add_tensor((1, 4, 4, 2), scale=0.05, zero_point=0, name="y")
    if op == "CONV_2D":
        w = b.add_tensor((2, 1, 1, 2), scale=0.01, data=np.ones((2, 1, 1, 2)), name="w")
        b.add_operator(op, [x, w, -1], [y], omit_options=True)
    else:
        b.add_operator(op, [x, x], [y], omit_options=True)
    path = tmp_path / "no_options.tflite"
    path.write_bytes(b.build([x], [y]))
    message = rf"operator 0 \({op}\): its builtin options must be \w+Options, found none"
    with pytest.raises(SerenityError, match=message):
        load_tflite(path)
    with pytest.raises(SerenityError, match=message):
        compile_tflite(path, "host", tmp_path / "out", build=False)


@pytest.mark.parametrize("dilation, stride", [((2**31 - 1, 1), (1, 1)), ((1, 70_000), (1, 1)),
                                              ((1, 1), (1, 2**31 - 1))])
def test_windows_beyond_the_supported_extent_are_refused(dilation, stride, tmp_path):
    """A dilation of 2^31-1 overflowed TIR's int32 literals in the C emitter and asked the
    reference for a 1.25 TiB padded input (seen by the fuzz suite): strides, dilations and
    dilated filter spans above MAX_WINDOW_EXTENT are refused, naming the operator."""
    from tflite_cases import _conv
    path = tmp_path / "wide.tflite"
    path.write_bytes(_conv("DEPTHWISE_CONV_2D", (8, 8), 4, 4, (3, 3), stride, dilation, "SAME",
                           "NONE"))
    message = r"operator 0 \(DEPTHWISE_CONV_2D\): .*not supported"
    with pytest.raises(SerenityError, match=message):
        ref.Interpreter(load_tflite(path))
    with pytest.raises(SerenityError, match=message):
        compile_tflite(path, "host", tmp_path / "out", build=False)


@pytest.mark.parametrize("case", ["graph_input", "two_producers"])
def test_a_tensor_written_twice_is_refused(case, tmp_path):
    """An activation has one producer: a graph input that an operator also writes (the fuzz
    suite's vww with an intermediate listed as a second input: the C and the reference then
    disagreed) or a tensor two operators write is refused, naming the second writer."""
    b = ModelBuilder()
    q = dict(scale=0.05, zero_point=0)
    x, y, z = (b.add_tensor((1, 4, 4, 2), name=n, **q) for n in "xyz")
    b.add_operator("RELU", [x], [y])
    if case == "graph_input":
        b.add_operator("RELU", [y], [z])
        data = b.build([x, y], [z])
        message = r"operator 0 \(RELU\): .*'y', which is a graph input"
    else:
        b.add_operator("RELU", [x], [y])
        data = b.build([x], [y])
        message = r"operator 1 \(RELU\): .*'y', which is written by an earlier operator"
    path = tmp_path / f"{case}.tflite"
    path.write_bytes(data)
    with pytest.raises(SerenityError, match=message):
        ref.Interpreter(load_tflite(path))
    with pytest.raises(SerenityError, match=message):
        compile_tflite(path, "host", tmp_path / "out", build=False)
