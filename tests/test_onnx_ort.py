"""ONNX QDQ models computed as onnxruntime computes them (``from_onnx``'s default arithmetic,
:mod:`tvm_serenity.frontend.ort_arithmetic`, decided per node by
:mod:`tvm_serenity.passes.ort_fakequant`).

Per QDQ pattern a small model is written with ``onnx.helper`` and quantized by onnxruntime's
``quantize_static`` (QDQ, int8, per-channel weights), once as onnxruntime fuses it into an
integer kernel and once with the operator's input read twice (fan-out keeps the tensor int8,
so onnxruntime runs the float operator between DequantizeLinear and QuantizeLinear). The
operators read back from the module run on the reference interpreter and are compared with
onnxruntime (default session options) on the int8 values behind the outputs: equal, except
for the float Conv and a several-row float Gemm, whose MLAS summation order is not reproduced
(within 1 LSB). Which onnxruntime kernel each operator names is the one in the graph
onnxruntime optimizes. The host C build equals the reference byte for byte, and one model
runs on rp2040js (slow). Random seeds come from hypothesis, a bounded number per pattern.
"""

from __future__ import annotations

import tempfile
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from hypothesis import HealthCheck, given, settings, strategies as st

from toolchain import needs_cc, needs_rp2040js

from tvm_serenity import micro
from tvm_serenity.frontend import ort_arithmetic as ort
from tvm_serenity.frontend.builder import tflite_bytes
from tvm_serenity.frontend.onnx_import import (compare_int8, from_onnx, onnx_reference_int8,
                                               quantize_outputs)
from tvm_serenity.frontend.reference import Interpreter
from tvm_serenity.frontend.relax_lift import operators_of
from tvm_serenity.frontend.tflite_model import UnsupportedOperatorError, parse_tflite
from tvm_serenity.zoo import onnx_cnns

ort_runtime = pytest.importorskip("onnxruntime")


# ------------------------------------------------------------------ models
def pattern_model(kind: str, seed: int, fan_out: bool) -> tuple[onnx.ModelProto, dict]:
    """A float model around one operator ``kind``: its (first) activation input the Add of two
    graph inputs (the graph input itself for Gemm / MatMul, a MatMul for Softmax), which
    onnxruntime computes exactly whether it fuses it or not. ``fan_out``: that input is also
    read by a second Add, a second output; the tensor then stays int8 and onnxruntime runs
    the operator in float between DequantizeLinear and QuantizeLinear. Returns the model and
    the stds of its inputs."""
    rng = np.random.default_rng(seed)
    n = onnx_cnns.Net(seed)
    c, hw = int(rng.choice([3, 4, 8])), int(rng.choice([5, 8, 9]))
    inputs = {"x": [1, c, hw, hw], "x2": [1, c, hw, hw]}
    first = n.node("Add", ["x", "x2"], "pre")
    if kind in ("conv", "conv_relu", "conv_stride2"):
        y = n.conv(first, "y", c, int(rng.choice([4, 8])), k=3,
                   stride=2 if kind == "conv_stride2" else 1)
        if kind == "conv_relu":
            y = n.node("Relu", [y], "yr")
    elif kind == "depthwise":
        y = n.conv(first, "y", c, c, group=c)
    elif kind in ("gemm", "gemm_rows", "matmul"):
        rows = 3 if kind == "gemm_rows" else 1
        inputs = {"x": [rows, 16]}
        n.nodes.pop()
        first = "x"
        if kind == "matmul":
            y = n.node("MatMul", ["x", n.const("w", rng.normal(size=(16, 6)) / 4)], "y")
        else:
            y = n.gemm("x", "y", 16, 10)
    elif kind in ("add", "mul", "concat"):
        op = {"add": "Add", "mul": "Mul", "concat": "Concat"}[kind]
        y = n.node(op, [first, "x2"], "y", **({"axis": 1} if kind == "concat" else {}))
    elif kind == "avgpool":
        y = n.node("AveragePool", [first], "y", kernel_shape=[2, 2], strides=[2, 2])
    elif kind in ("avgpool_pad", "avgpool_pad_include"):
        y = n.node("AveragePool", [first], "y", kernel_shape=[3, 3], strides=[1, 1],
                   pads=[1, 1, 1, 1], count_include_pad=int(kind.endswith("include")))
    elif kind == "avgpool_s3":
        y = n.node("AveragePool", [first], "y", kernel_shape=[3, 3], strides=[3, 3])
    elif kind == "gap":
        y = n.node("GlobalAveragePool", [first], "y")
    elif kind == "maxpool":
        y = n.node("MaxPool", [first], "y", kernel_shape=[3, 3], strides=[2, 2],
                   pads=[1, 1, 1, 1])
    elif kind in ("relu", "sigmoid"):
        y = n.node({"relu": "Relu", "sigmoid": "Sigmoid"}[kind], [first], "y")
    elif kind == "softmax":
        depth = int(rng.choice([5, 10, 12, 40]))
        inputs = {"x": [1, depth]}
        n.nodes.pop()
        first = n.node("MatMul", ["x", n.const("w", rng.normal(size=(depth, depth))
                                               / np.sqrt(depth))], "mm")
        y = n.node("Softmax", [first], "y", axis=1)
    elif kind in ("flatten", "transpose"):
        y = n.node("Flatten", [first], "y") if kind == "flatten" else \
            n.node("Transpose", [first], "y", perm=[0, 2, 3, 1])
    else:
        raise ValueError(kind)
    outputs = [y] + ([n.node("Add", [first, first], "second")] if fan_out else [])
    graph = helper.make_graph(
        n.nodes, kind,
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, s) for k, s in inputs.items()],
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, None) for k in outputs],
        n.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    shapes = {v.name: v for v in onnx.shape_inference.infer_shapes(model).graph.output}
    for out in model.graph.output:
        out.CopyFrom(shapes[out.name])
    onnx.checker.check_model(model)
    stds = {name: float(np.exp(rng.uniform(-1, 1))) for name in inputs}
    return model, stds


#: The patterns and, per variant, whether onnxruntime's arithmetic is reproduced exactly.
KINDS = ["conv", "conv_relu", "conv_stride2", "depthwise", "gemm", "gemm_rows", "matmul",
         "add", "mul", "concat", "avgpool", "avgpool_pad", "avgpool_pad_include",
         "avgpool_s3", "gap", "maxpool", "relu", "sigmoid", "softmax",
         "flatten", "transpose"]
#: (kind, fan_out) computed by a float kernel whose MLAS summation order is not reproduced.
WITHIN_ONE_LSB = {("conv", True), ("conv_relu", True), ("conv_stride2", True),
                  ("depthwise", True), ("gemm_rows", True)}
#: onnxruntime's kernels that compute (the rest moves data or looks up tables).
ARITHMETIC_KERNELS = {"QLinearConv", "Conv", "FusedConv", "QGemm", "Gemm", "QLinearMatMul",
                      "MatMul", "QLinearAdd", "Add", "QLinearMul", "Mul", "QLinearAveragePool",
                      "AveragePool", "QLinearGlobalAveragePool", "GlobalAveragePool",
                      "QLinearSoftmax", "Softmax"}


def quantized(model: onnx.ModelProto, stds: dict, directory, seed: int,
              symmetric: bool) -> str:
    """``model`` quantized by ``quantize_static`` with calibration data of ``stds``."""
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)

    class Calibration(CalibrationDataReader):
        def __init__(self):
            rng = np.random.default_rng(seed)
            shapes = {i.name: [d.dim_value for d in i.type.tensor_type.shape.dim]
                      for i in model.graph.input}
            self.batches = iter([{k: (rng.normal(size=s) * stds[k]).astype(np.float32)
                                  for k, s in shapes.items()} for _ in range(8)])

        def get_next(self):
            return next(self.batches, None)

    directory = Path(directory)
    onnx.save(model, directory / "float.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quantize_static(str(directory / "float.onnx"), str(directory / "qdq.onnx"),
                        Calibration(), quant_format=QuantFormat.QDQ,
                        activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                        per_channel=True, extra_options={"ActivationSymmetric": symmetric})
    return str(directory / "qdq.onnx")


def feeds(path: str, seed: int, stds: dict | None = None) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [(rng.normal(size=[d.dim_value for d in i.type.tensor_type.shape.dim])
             * (stds or {}).get(i.name, 1.0) * rng.uniform(0.5, 2)).astype(np.float32)
            for i in onnx.load(path).graph.input]


def onnxruntime_kernels(path: str) -> Counter:
    """The arithmetic kernels of the graph onnxruntime optimizes ``path`` into (x86)."""
    with tempfile.TemporaryDirectory() as d:
        options = ort_runtime.SessionOptions()
        options.graph_optimization_level = ort_runtime.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        options.optimized_model_filepath = str(Path(d) / "optimized.onnx")
        ort_runtime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        graph = onnx.load(options.optimized_model_filepath).graph
    return Counter("Conv" if n.op_type == "FusedConv" else n.op_type for n in graph.node
                   if n.op_type in ARITHMETIC_KERNELS)


def our_kernels(model) -> Counter:
    return Counter(op.options[ort.KERNEL] for op in model.operators
                   if op.options.get(ort.KERNEL) in ARITHMETIC_KERNELS)


def check_against_onnxruntime(path: str, inputs: list[list[np.ndarray]], exact: bool
                              ) -> tuple[int, float]:
    """The reference interpreter on the module's operators against onnxruntime, over every
    input set; returns (max LSB, fraction differing) after asserting exactness or 1 LSB."""
    lifted = operators_of(from_onnx(path))
    interpreter = Interpreter(lifted)
    assert our_kernels(lifted) == onnxruntime_kernels(path)
    got, want = [], []
    for x in inputs:
        got += quantize_outputs(path, interpreter.run(x))
        want += onnx_reference_int8(path, x)
    lsb, fraction = compare_int8(got, want)
    assert lsb == 0 if exact else lsb <= 1, (path, lsb, fraction)
    return lsb, fraction


# ------------------------------------------------------------------ tests
@pytest.mark.parametrize("fan_out", [False, True], ids=["fused", "float"])
@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=4, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2 ** 16), symmetric=st.booleans())
def test_each_pattern_computes_what_onnxruntime_computes(kind, fan_out, seed, symmetric,
                                                         tmp_path_factory):
    model, stds = pattern_model(kind, seed, fan_out)
    path = quantized(model, stds, tmp_path_factory.mktemp(kind), seed, symmetric)
    check_against_onnxruntime(path, [feeds(path, seed + k, stds) for k in range(3)],
                              exact=(kind, fan_out) not in WITHIN_ONE_LSB)


@pytest.mark.slow
@pytest.mark.parametrize("fan_out", [False, True], ids=["fused", "float"])
@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2 ** 30), symmetric=st.booleans())
def test_each_pattern_on_many_models(kind, fan_out, seed, symmetric, tmp_path_factory):
    model, stds = pattern_model(kind, seed, fan_out)
    path = quantized(model, stds, tmp_path_factory.mktemp(kind), seed, symmetric)
    check_against_onnxruntime(path, [feeds(path, seed + k, stds) for k in range(4)],
                              exact=(kind, fan_out) not in WITHIN_ONE_LSB)


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    return {(name, sym): onnx_cnns.quantized(onnx_cnns.MODELS[name][0](),
                                             tmp_path_factory.mktemp(name), symmetric=sym)
            for name, sym in onnx_cnns.VARIANTS}


@pytest.mark.parametrize("name, symmetric", onnx_cnns.VARIANTS,
                         ids=[f"{n}-{'sym' if s else 'asym'}" for n, s in onnx_cnns.VARIANTS])
def test_zoo_models_equal_onnxruntime(zoo, name, symmetric):
    """The small CNNs (fan-out, graph outputs, a float Conv among QLinearConvs): equal to
    onnxruntime on every value."""
    path = zoo[name, symmetric]
    check_against_onnxruntime(path, [onnx_cnns.model_inputs(path, s) for s in range(6)],
                              exact=True)


@needs_cc
@pytest.mark.parametrize("name, symmetric", [("pools_concat", False), ("two_inputs", True)])
def test_host_c_equals_the_reference_and_onnxruntime(zoo, name, symmetric, tmp_path):
    """``build_model(onnx, "host")``: the C (the kernel family with onnxruntime's options)
    equals the reference interpreter on ``model.tflite`` byte for byte (``run_model``
    checks), and onnxruntime."""
    path = zoo[name, symmetric]
    for seed in range(2):
        x = onnx_cnns.model_inputs(path, 20 + seed)
        built = micro.build_model(path, "host", tmp_path / f"out{seed}", input=x)
        result = micro.run_model(built.out_dir)
        ours = [np.frombuffer(raw, t.dtype).reshape(t.shape)
                for raw, t in zip(result.outputs, built.emitted.outputs)]
        assert compare_int8(quantize_outputs(path, ours), onnx_reference_int8(path, x))[0] == 0


@needs_cc
@pytest.mark.parametrize("kind, fan_out", [("avgpool_pad_include", True), ("gap", True),
                                           ("softmax", True), ("add", False),
                                           ("gemm", True), ("sigmoid", False)],
                         ids=["avgpool", "gap", "softmax", "add", "gemm", "sigmoid"])
def test_host_c_of_the_float_kernels(kind, fan_out, tmp_path):
    """The float kernels (pools in MLAS's orders, Softmax, the float Gemm, QLinearAdd's FMAs)
    as C on the host: equal to the reference (checked by ``run_model``) and to
    onnxruntime."""
    model, stds = pattern_model(kind, 5, fan_out)
    path = quantized(model, stds, tmp_path, 5, False)
    x = feeds(path, 6, stds)
    built = micro.build_model(path, "host", tmp_path / "out", input=x)
    result = micro.run_model(built.out_dir)
    ours = [np.frombuffer(raw, t.dtype).reshape(t.shape)
            for raw, t in zip(result.outputs, built.emitted.outputs)]
    assert compare_int8(quantize_outputs(path, ours), onnx_reference_int8(path, x))[0] == 0


def test_model_tflite_keeps_the_arithmetic(zoo):
    """The operators written as ``.tflite`` (the run's reference): the onnxruntime options
    ride in the metadata and read back; the builtin options stay TFLite's, so TFLite's
    interpreter still loads the file."""
    lifted = operators_of(from_onnx(zoo["two_inputs", False]))
    data = tflite_bytes(lifted)
    again = parse_tflite(data)
    for a, b in zip(lifted.operators, again.operators):
        assert {k: v for k, v in b.options.items() if k in a.options} == dict(a.options)
    assert any(ort.is_onnxruntime(op.options) for op in again.operators)
    x = onnx_cnns.model_inputs(zoo["two_inputs", False], 3)
    for a, b in zip(Interpreter(lifted).run(x), Interpreter(again).run(x)):
        assert np.array_equal(a, b)
    from ai_edge_litert.interpreter import Interpreter as LiteRT
    assert len(LiteRT(model_content=data).get_input_details()) == 2


def test_tflite_arithmetic_is_still_available(zoo):
    """``from_onnx(..., arithmetic="tflite")`` keeps TFLite's fixed point (no onnxruntime
    options), which differs from onnxruntime."""
    lifted = operators_of(from_onnx(zoo["pools_concat", False], arithmetic="tflite"))
    assert not any(ort.is_onnxruntime(op.options) for op in lifted.operators)
    with pytest.raises(ValueError, match="arithmetic"):
        from_onnx(zoo["pools_concat", False], arithmetic="float")


def test_a_broadcasting_add_is_refused_naming_the_operator(tmp_path):
    """onnxruntime's QLinearAdd of a per-channel constant (a broadcast) is not implemented:
    refused in one line naming the operator before any C is written."""
    n = onnx_cnns.Net(0)
    first = n.node("Add", ["x", "x2"], "pre")
    y = n.node("Add", [first, n.const("b", np.arange(4.0).reshape(1, 4, 1, 1))], "y")
    graph = helper.make_graph(
        n.nodes, "broadcast",
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, [1, 4, 5, 5]) for k in ("x", "x2")],
        [helper.make_tensor_value_info(y, TensorProto.FLOAT, [1, 4, 5, 5])], n.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path = quantized(model, {"x": 1.0, "x2": 1.0}, tmp_path, 0, False)
    with pytest.raises(UnsupportedOperatorError, match=r"operator \d+ \(ADD\): onnxruntime's "
                       "arithmetic is implemented for two activations of the output's shape"):
        micro.build_model(path, "host", tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
@needs_rp2040js
def test_an_onnx_model_runs_on_rp2040js_as_onnxruntime_computes_it(zoo, tmp_path):
    """pools_concat (float Convs, QLinearAveragePool, concat tables, QGemm) on the emulated
    Pico: byte for byte the reference (``run_model``) and onnxruntime."""
    path = zoo["pools_concat", True]
    x = onnx_cnns.model_inputs(path, 31)
    built = micro.build_model(path, "pico", tmp_path / "pico", input=x)
    result = micro.run_model(built.out_dir)
    assert result.cycles > 0
    ours = [np.frombuffer(raw, t.dtype).reshape(t.shape)
            for raw, t in zip(result.outputs, built.emitted.outputs)]
    assert compare_int8(quantize_outputs(path, ours), onnx_reference_int8(path, x))[0] == 0
