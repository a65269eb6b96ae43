"""The zoo's MCUNet networks as int8 TFLite flatbuffers with random weights, to deploy and run.

:func:`mcunet_tflite` ``(stem)`` walks ``<MODELS_DIR>/<stem>.json`` exactly as
:func:`tvm_serenity.zoo.mcunet.graph_from_config` does, but on a :class:`TFLiteNetBuilder`,
which implements the ``NetBuilder`` calls that walk makes by writing TFLite operators with
:class:`tvm_serenity.frontend.builder.ModelBuilder`: CONV_2D and DEPTHWISE_CONV_2D ('SAME'
padding, ReLU/ReLU6 fused), ADD, MEAN over H and W (``keep_dims`` false, as the converter
writes a global average pool) and FULLY_CONNECTED. Imported back by
:func:`tvm_serenity.frontend.tflite_to_graph`, the model has the zoo graph's operators, tensor
sizes and in-place workspaces, node for node (tests check it).

Quantization follows TFLite's int8 rules: int8 activations per tensor; int8 weights symmetric
(zero point 0) per output channel (axis 0 of OHWI convolution filters, axis 3 of the
``1 x kh x kw x C`` depthwise filters), per tensor for FULLY_CONNECTED; int32 biases with scale
``input_scale * weight_scale[c]`` and zero point 0; the ReLU/ReLU6 outputs with zero point
-128 (their range starts at 0). Weights are seeded uniform int8 in [-127, 127]; the scales are
chosen so activations use the int8 range without saturating: every tensor's root mean square
``rms`` (real units) is propagated, a channel's weight scale makes its pre-activation rms
:data:`PRE_ACTIVATION_RMS` (``weight_scale[c] = PRE_ACTIVATION_RMS / (rms_in * |w_c|)``, the
accumulator of independent inputs, with ``|w_c|^2`` the sum of squared weights over the taps
inside the input, averaged over the output pixels, so that taps in the 'SAME' padding of small
late feature maps do not count), and each output range covers :data:`RANGE_IN_RMS` times its
rms (``[-4 rms, 4 rms]``, or ``[0, 4 rms]`` after a ReLU). An ADD of independent operands has
``rms = sqrt(rms_a^2 + rms_b^2)``; MEAN keeps its input's quantization (its output's rms is at
most its input's). Biases are random with rms :data:`BIAS_RMS` in real units.

The ``-int4`` configs are separate architectures (MCUNet searched them for int4 weights); like
the zoo, which counts every tensor as int8, they are built here with int8 weights and
activations: TFLite has no int4 kernels for these operators, and activation memory, which is
what the benchmarks measure, is int8 in both. Weights are random: memory and cycles are
meaningful, accuracy is not.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import numpy as np

from ..frontend.builder import ModelBuilder
from ..graph import GraphError, unique_name
from .builder import same_padding
from .mcunet import MODELS_DIR, network

__all__ = ["TFLiteNetBuilder", "mcunet_tflite", "SEED", "INPUT_SCALE", "PRE_ACTIVATION_RMS",
           "RANGE_IN_RMS", "BIAS_RMS"]

SEED = 0
INPUT_SCALE = 1 / 128        # the int8 input image spans [-1, 1)
PRE_ACTIVATION_RMS = 1.0     # rms of every convolution's / FC's accumulator, real units
RANGE_IN_RMS = 4.0           # an output's quantized range covers this many rms
BIAS_RMS = 0.1

_UNIFORM_INT8_RMS = math.sqrt(sum(q * q for q in range(-128, 128)) / 256)   # random inputs
_RELU_RMS = math.sqrt(0.5)   # a zero-mean symmetric pre-activation after ReLU, per unit rms
_FUSES_RELU = ("conv2d", "depthwise_conv2d", "add", "fully_connected")
_OPERATOR = {"conv2d": ("CONV_2D", 3), "depthwise_conv2d": ("DEPTHWISE_CONV_2D", 3),
             "add": ("ADD", 2), "mean": ("MEAN", 2), "fully_connected": ("FULLY_CONNECTED", 4)}


@dataclass
class _Node:
    name: str
    op: str
    inputs: tuple[str, ...]
    hwc: tuple[int, int, int]
    attrs: dict = field(default_factory=dict)
    activation: str | None = None      # fused "relu" / "relu6", set by build()


@dataclass(frozen=True)
class _Quantized:
    """An activation tensor written into the flatbuffer."""

    index: int
    scale: float
    zero_point: int
    rms: float                         # root mean square of its real values (estimate)


class TFLiteNetBuilder:
    """The ``NetBuilder`` calls of :func:`tvm_serenity.zoo.mcunet.graph_from_config`, writing
    an int8 TFLite model (module docstring). Methods record nodes and return their names;
    :meth:`build` fuses each ReLU into its producer, draws the weights and returns the
    flatbuffer. A ReLU TFLite cannot fuse (its producer has other readers, or is not a
    convolution, ADD or FULLY_CONNECTED) is refused: the MCUNet configs have none."""

    def __init__(self, name: str, seed: int = SEED):
        self.name = name
        self.seed = seed
        self.shape: dict[str, tuple[int, int, int]] = {}        # HWC of every tensor
        self._nodes: dict[str, _Node] = {}

    def _add(self, hint: str, op: str, inputs: tuple[str, ...], hwc, **attrs) -> str:
        name = unique_name(hint, self._nodes)
        self._nodes[name] = _Node(name, op, inputs, tuple(hwc), attrs)
        self.shape[name] = tuple(hwc)
        return name

    # ------------------------------------------------------------------------------ ops
    def input(self, name: str, hwc: tuple[int, int, int]) -> str:
        return self._add(name, "input", (), hwc)

    def conv(self, x: str, out_channels: int, kernel: int = 1, stride: int = 1,
             dilation: int = 1, groups: int = 1, name: str = "conv") -> str:
        """CONV_2D (``groups == 1``) or DEPTHWISE_CONV_2D (``groups == in_channels``), with
        'SAME' padding."""
        h, w, c = self.shape[x]
        if groups != 1 and not groups == c == out_channels:
            raise GraphError(f"{name}: groups={groups} with {c} input and {out_channels} "
                             f"output channels is neither a convolution nor a depthwise one")
        oh = same_padding(h, kernel, stride, dilation)[0]
        ow = same_padding(w, kernel, stride, dilation)[0]
        op = "conv2d" if groups == 1 else "depthwise_conv2d"
        return self._add(name, op, (x,), (oh, ow, out_channels), kernel=kernel, stride=stride,
                         dilation=dilation)

    def depthwise(self, x: str, kernel: int, stride: int = 1, dilation: int = 1,
                  name: str = "dw") -> str:
        c = self.shape[x][2]
        return self.conv(x, c, kernel, stride, dilation, groups=c, name=name)

    def relu(self, x: str, name: str | None = None, six: bool = False) -> str:
        return self._add(name or f"{x}_relu", "relu6" if six else "relu", (x,), self.shape[x])

    def add(self, a: str, b: str, name: str = "add") -> str:
        if self.shape[a] != self.shape[b]:
            raise GraphError(f"add '{name}': shapes {self.shape[a]} and {self.shape[b]} "
                             "differ")
        return self._add(name, "add", (a, b), self.shape[a])

    def global_avg_pool(self, x: str, name: str = "gap") -> str:
        return self._add(name, "mean", (x,), (1, 1, self.shape[x][2]))

    def fully_connected(self, x: str, units: int, name: str = "fc") -> str:
        return self._add(name, "fully_connected", (x,), (1, 1, units))

    # ----------------------------------------------------------------------------- build
    def _fused(self, outputs: list[str]) -> tuple[list[_Node], dict[str, str]]:
        """The nodes with every ReLU fused into its producer, and relu name -> producer."""
        readers: dict[str, list[str]] = {n: [] for n in self._nodes}
        for node in self._nodes.values():
            for src in node.inputs:
                readers[src].append(node.name)
        fused: dict[str, str] = {}
        for node in self._nodes.values():
            if node.op not in ("relu", "relu6"):
                continue
            src = self._nodes[node.inputs[0]]
            if src.op not in _FUSES_RELU or readers[src.name] != [node.name] \
                    or src.name in outputs:
                raise GraphError(f"{self.name}: {node.op} '{node.name}' cannot be fused into "
                                 f"'{src.name}' ({src.op}), and a separate ReLU operator is "
                                 "not supported")
            src.activation = node.op
            fused[node.name] = src.name
        return [n for n in self._nodes.values() if n.name not in fused], fused

    def build(self, outputs: list[str]) -> bytes:
        """The int8 flatbuffer computing ``outputs`` (a ReLU's name stands for its producer)."""
        nodes, fused = self._fused(outputs)
        rng = np.random.default_rng(self.seed)
        mb = ModelBuilder()
        done: dict[str, _Quantized] = {}
        inputs = []
        for node in nodes:
            srcs = [done[fused.get(s, s)] for s in node.inputs]
            if node.op == "input":
                shape = (1, *node.hwc)
                index = mb.add_tensor(shape, scale=INPUT_SCALE, zero_point=0, name=node.name)
                done[node.name] = _Quantized(index, INPUT_SCALE, 0,
                                             INPUT_SCALE * _UNIFORM_INT8_RMS)
                inputs.append(index)
            else:
                done[node.name] = self._emit(mb, rng, node, srcs)
        return mb.build(inputs, [done[fused.get(o, o)].index for o in outputs],
                        description=f"tvm-serenity zoo {self.name}, random int8 weights "
                                    f"(seed {self.seed})")

    def _output(self, mb: ModelBuilder, node: _Node, shape, rms_pre: float) -> _Quantized:
        """The output tensor of ``node`` for a pre-activation rms ``rms_pre``."""
        if node.activation:
            scale, zp, rms = RANGE_IN_RMS * rms_pre / 255, -128, _RELU_RMS * rms_pre
        else:
            scale, zp, rms = RANGE_IN_RMS * rms_pre / 127, 0, rms_pre
        scale = float(np.float32(scale))             # as stored, for the bias scales
        index = mb.add_tensor(shape, scale=scale, zero_point=zp, name=node.name)
        return _Quantized(index, scale, zp, rms)

    def _emit(self, mb: ModelBuilder, rng, node: _Node, srcs: list[_Quantized]) -> _Quantized:
        op, version = _OPERATOR[node.op]
        x = srcs[0]
        act = {"fused_activation_function": (node.activation or "none").upper()}
        if node.op == "add":
            y = self._output(mb, node, (1, *node.hwc),
                             math.hypot(*(s.rms for s in srcs)))
            mb.add_operator(op, [s.index for s in srcs], [y.index], act, version)
            return y
        if node.op == "mean":
            axes = mb.add_tensor((2,), "int32", data=[1, 2], name=f"{node.name}/axes")
            index = mb.add_tensor((1, node.hwc[2]), scale=x.scale, zero_point=x.zero_point,
                                  name=node.name)
            mb.add_operator(op, [x.index, axes], [index], {"keep_dims": False}, version)
            return _Quantized(index, x.scale, x.zero_point, x.rms)
        cin = self.shape[node.inputs[0]][2]
        if node.op == "fully_connected":
            wshape, axis, shape = (node.hwc[2], cin), None, (1, node.hwc[2])
            options = act
        else:
            k, stride, dilation = node.attrs["kernel"], node.attrs["stride"], \
                node.attrs["dilation"]
            shape = (1, *node.hwc)
            options = {"padding": "SAME", "stride_h": stride, "stride_w": stride,
                       "dilation_h_factor": dilation, "dilation_w_factor": dilation, **act}
            if node.op == "conv2d":
                wshape, axis = (node.hwc[2], k, k, cin), 0
            else:
                wshape, axis = (1, k, k, cin), 3
                options["depth_multiplier"] = 1
        w = rng.integers(-127, 128, wshape).astype(np.int8)
        squares = w.astype(np.float64) ** 2
        if axis is None:                              # per-tensor FULLY_CONNECTED weights
            norms = np.sqrt(squares.sum(axis=1).mean())[None]
        else:                                         # |w_c|, taps in the padding excluded
            taps = _tap_coverage(self.shape[node.inputs[0]][:2], node.hwc[:2], k, stride,
                                 dilation)
            per_tap = squares.sum(axis=3) if axis == 0 else squares[0].transpose(2, 0, 1)
            norms = np.sqrt((per_tap * taps).sum(axis=(1, 2)))
        w_scale = (PRE_ACTIVATION_RMS / (x.rms * norms)).astype(np.float32)
        bias_scale = (np.float64(x.scale) * w_scale).astype(np.float32)
        channels = node.hwc[2]
        bias = np.round(rng.normal(0, BIAS_RMS, channels) / bias_scale)
        wt = mb.add_tensor(wshape, scale=w_scale, zero_point=0, axis=axis or 0, data=w,
                           name=f"{node.name}/weights")
        bt = mb.add_tensor((channels,), "int32", scale=bias_scale, zero_point=0, data=bias,
                           name=f"{node.name}/bias")
        y = self._output(mb, node, shape, PRE_ACTIVATION_RMS)
        mb.add_operator(op, [x.index, wt, bt], [y.index], options, version)
        return y


def _tap_coverage(in_hw, out_hw, kernel: int, stride: int, dilation: int) -> np.ndarray:
    """``kernel x kernel``: the fraction of output pixels for which each tap of a 'SAME'
    window falls inside the input (not in the zero padding)."""
    coverage = []
    for size, out in zip(in_hw, out_hw):
        before = same_padding(size, kernel, stride, dilation)[1]
        rows = np.arange(out)[:, None] * stride - before + np.arange(kernel)[None] * dilation
        coverage.append(((rows >= 0) & (rows < size)).mean(axis=0))
    return np.outer(*coverage)


def mcunet_tflite(stem: str, seed: int = SEED) -> bytes:
    """The int8 ``.tflite`` bytes of ``<MODELS_DIR>/<stem>.json`` (e.g.
    ``"mcunet-320kb-1mb_imagenet"``; the ``_imagenet`` suffix may be left out) with weights
    drawn from ``seed``."""
    path = MODELS_DIR / f"{stem}.json"
    if not path.is_file():
        path = MODELS_DIR / f"{stem}_imagenet.json"
    if not path.is_file():
        raise GraphError(f"MCUNet config '{MODELS_DIR / stem}.json' not found (the shared "
                         f"models folder is expected at {MODELS_DIR.parent})")
    name = path.stem.replace("_imagenet", "")
    b = TFLiteNetBuilder(name, seed)
    return b.build([network(b, json.loads(path.read_text()), name)])
