"""Small float CNNs written with ``onnx.helper`` and quantized by onnxruntime into int8 QDQ
models (``quantize_static``: QDQ format, int8 activations and per-channel weights, a seeded
calibration reader), the ONNX models the tests and the ``onnx`` benchmark compile.

:data:`MODELS` maps a name to its builder and the integer kernel kinds its import must contain;
:data:`VARIANTS` lists (name, symmetric activations) as quantized; :func:`quantized` writes one;
:func:`model_inputs` draws seeded float inputs. Needs ``onnx`` and ``onnxruntime`` (the
``test`` extra).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

__all__ = ["Net", "MODELS", "VARIANTS", "quantized", "model_inputs", "conv_stack", "pools_concat",
           "two_inputs"]


class _Calibration(CalibrationDataReader):
    """Seeded standard-normal batches for every graph input."""

    def __init__(self, shapes: dict, seed: int, count: int = 16):
        rng = np.random.default_rng(seed)
        self.batches = iter([{n: rng.normal(size=s).astype(np.float32) for n, s in shapes.items()}
                             for _ in range(count)])

    def get_next(self):
        return next(self.batches, None)


class Net:
    """A float ONNX graph under construction: initializers drawn from one seeded generator."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits = [], []

    def const(self, name, value):
        self.inits.append(numpy_helper.from_array(np.asarray(value, np.float32), name))
        return name

    def node(self, op, inputs, output, **attrs):
        self.nodes.append(helper.make_node(op, inputs, [output], name=output, **attrs))
        return output

    def conv(self, x, out, c_in, c_out, k=3, stride=1, group=1, bias=True):
        w = self.const(f"{out}_w", self.rng.normal(size=(c_out, c_in // group, k, k)) *
                       (1.5 / np.sqrt(c_in // group * k * k)))
        ins = [x, w] + ([self.const(f"{out}_b", self.rng.normal(size=c_out) * 0.1)] if bias else [])
        return self.node("Conv", ins, out, pads=[k // 2] * 4, strides=[stride, stride],
                         group=group)

    def relu6(self, x, out):
        return self.node("Clip", [x, self.const(f"{out}_lo", 0.0), self.const(f"{out}_hi", 6.0)],
                         out)

    def gemm(self, x, out, depth, units):
        w = self.const(f"{out}_w", self.rng.normal(size=(units, depth)) / np.sqrt(depth))
        b = self.const(f"{out}_b", self.rng.normal(size=units) * 0.1)
        return self.node("Gemm", [x, w, b], out, transB=1)

    def model(self, inputs: dict, outputs: dict) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes, "net",
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs.items()],
            self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        model.ir_version = 8
        onnx.checker.check_model(model)
        return model


def conv_stack():
    """conv 3x3 s1 + ReLU, conv 3x3 s2 + ReLU6, depthwise 3x3 + ReLU, pointwise, residual add,
    GlobalAveragePool + Flatten + Gemm."""
    n = Net(1)
    x = n.node("Relu", [n.conv("x", "c1", 3, 8)], "r1")
    x = n.relu6(n.conv(x, "c2", 8, 16, stride=2), "r2")
    y = n.node("Relu", [n.conv(x, "dw", 16, 16, group=16)], "r3")
    y = n.conv(y, "pw", 16, 16, k=1)
    x = n.node("Add", [x, y], "res")
    x = n.node("Flatten", [n.node("GlobalAveragePool", [x], "gap")], "flat")
    n.gemm(x, "fc", 16, 10)
    return n.model({"x": [1, 3, 16, 16]}, {"fc": [1, 10]})


def pools_concat():
    """MaxPool and AveragePool branches concatenated on channels, a 1x1 conv; two outputs: the
    NCHW feature map and a Gemm over the Flatten of a 4x4 map (a non-1x1 flatten)."""
    n = Net(2)
    x = n.node("Relu", [n.conv("x", "c1", 4, 8, stride=2)], "r1")
    a = n.node("MaxPool", [x], "mp", kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1])
    b = n.node("AveragePool", [n.conv(x, "c2", 8, 8)], "ap", kernel_shape=[2, 2], strides=[2, 2])
    a = n.node("MaxPool", [a], "mp2", kernel_shape=[2, 2], strides=[2, 2])
    x = n.node("Concat", [a, b], "cat", axis=1)
    feat = n.conv(x, "feat", 16, 8, k=1)
    flat = n.node("Flatten", [feat], "flat")
    n.gemm(flat, "fc", 8 * 4 * 4, 6)
    return n.model({"x": [1, 4, 16, 16]}, {"feat": [1, 8, 4, 4], "fc": [1, 6]})


def two_inputs():
    """Two inputs, each through a conv, added and concatenated; GlobalAveragePool, MatMul and
    Softmax."""
    n = Net(3)
    a = n.node("Relu", [n.conv("a", "ca", 3, 8)], "ra")
    b = n.node("Relu", [n.conv("b", "cb", 2, 8, stride=1)], "rb")
    x = n.node("Concat", [n.node("Add", [a, b], "sum"), b], "cat", axis=1)
    x = n.node("Flatten", [n.node("GlobalAveragePool", [x], "gap")], "flat")
    w = n.const("mm_w", n.rng.normal(size=(16, 5)) / 4)
    n.node("Softmax", [n.node("MatMul", [x, w], "mm")], "prob", axis=1)
    return n.model({"a": [1, 3, 8, 8], "b": [1, 2, 8, 8]}, {"prob": [1, 5]})


#: name -> (builder, kernel kinds the import must contain).
MODELS = {"conv_stack": (conv_stack, {"conv2d", "add", "mean", "fully_connected"}),
          "pools_concat": (pools_concat, {"conv2d", "max_pool2d", "average_pool2d",
                                          "concatenation", "fully_connected"}),
          "two_inputs": (two_inputs, {"conv2d", "add", "concatenation", "mean",
                                      "fully_connected", "softmax"})}


#: (model, symmetric activations) as quantized for the tests. Symmetric activations
#: keep ReLU (zero point 0 does not absorb it) and quantize Softmax with zero point 0; a kept
#: Clip (ReLU6) is not supported (TVM imports it as two ``call_tir``), so conv_stack has none.
VARIANTS = [("conv_stack", False), ("pools_concat", False), ("two_inputs", False),
            ("pools_concat", True), ("two_inputs", True)]


def quantized(model: onnx.ModelProto, directory, seed: int = 0, symmetric: bool = False) -> str:
    """``model`` as onnxruntime's int8 QDQ model (per-channel weights), saved in
    ``directory`` (as ``qdq.onnx``, next to the float ``float.onnx``); returns its path."""
    directory = Path(directory)
    float_path, qdq_path = directory / "float.onnx", directory / "qdq.onnx"
    onnx.save(model, float_path)
    shapes = {i.name: [d.dim_value for d in i.type.tensor_type.shape.dim]
              for i in model.graph.input}
    quantize_static(str(float_path), str(qdq_path), _Calibration(shapes, seed),
                    quant_format=QuantFormat.QDQ, activation_type=QuantType.QInt8,
                    weight_type=QuantType.QInt8, per_channel=True,
                    extra_options={"ActivationSymmetric": symmetric})
    return str(qdq_path)


def model_inputs(path: str, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.normal(size=[d.dim_value for d in i.type.tensor_type.shape.dim])
            .astype(np.float32) for i in onnx.load(path).graph.input]
