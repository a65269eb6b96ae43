"""TFLite -> graph IR: structure, in-place flags, PAD folding (checked bit-exact with the
reference kernels) and the liveness peaks of TFLite's stored order against the peers'."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tflite_cases import SINGLE_OP_MODELS, model_path
from tvm_serenity.frontend import reference as ref
from tvm_serenity.frontend.builder import ModelBuilder
from tvm_serenity.frontend.interpreters import model_inputs
from tvm_serenity.frontend.tflite_model import (UnsupportedOperatorError, load_tflite,
                                                parse_tflite)
from tvm_serenity.frontend.to_graph import foldable_pads, tflite_to_graph
from tvm_serenity.graph import Graph
from tvm_serenity.memory import simulate
from tvm_serenity.rip import inplace_workspace_bytes, rip_workspace_bytes

KB = 1024

# peers.md: TFLite-order liveness peaks (keras models) and TFLM head arenas (MCU models).
TFLITE_ORDER_PEAK = {
    "keras/mobilenet_v1_025_128.tflite": 96.0 * KB,
    "keras/mobilenet_v2_035_96.tflite": 135.0 * KB,
    "keras/mobilenet_v3_small_075_96.tflite": 72.0 * KB,
    "keras/darts_v2_normal_cifar_32x32_C36.tflite": 432.0 * KB,
    "keras/darts_v2_normal_imagenet_28x28_C48.tflite": 441.0 * KB,
    "keras/randwire_cifar100_C78_cellA.tflite": 702.0 * KB,
}
TFLM_HEAD_ARENA = {"tinyengine/vww.tflite": 161_472,
                   "mcunet/mcunet-320kb-1mb_imagenet.tflite": 416_832}


def stored_order_peak(graph: Graph, inplace: bool) -> int:
    return simulate(graph, graph.op_names, inplace=inplace).peak_bytes


# ================================================================================ structure
def test_vww_graph_structure():
    m = load_tflite(model_path("tinyengine/vww.tflite"))
    g = tflite_to_graph(m, fold_pad=False)
    assert len(g.op_names) == 63 and g.input_names == ["input_0"]
    x = g["input_0"]
    assert (x.bytes, x.shape, x.dtype) == (80 * 80 * 3 * 4, (1, 80, 80, 3), "float32")
    assert g.op_names[:3] == ["quantize_0", "pad_1", "conv2d_2"]
    q = g["quantize_0"]
    # float -> int8 runs in place over a workspace of the float input's size
    assert (q.bytes, q.dtype, q.inplace) == (19_200, "int8", x.bytes)
    conv = g["conv2d_2"]
    assert conv.inputs == ("pad_1",) and conv.bytes == 40 * 40 * 16
    assert conv.attrs["kernel"] == [3, 3] and conv.attrs["stride"] == [2, 2]
    assert conv.attrs["padding"] == [0, 0, 0, 0] and conv.attrs["groups"] == 1
    assert conv.attrs["tflite_op"] == "CONV_2D" and conv.attrs["tflite_index"] == 2
    assert conv.attrs["activation"] == "relu6"
    assert "activation" not in g["conv2d_4"].attrs
    assert conv.inplace == rip_workspace_bytes((82, 82, 3), 16, (3, 3), (2, 2))
    dw = g["depthwise_conv2d_3"]
    assert dw.attrs["groups"] == 16 and dw.attrs["padding"] == [1, 1, 1, 1]
    # depthwise: the channel-wise in-place kind, no gap (RiP would need one)
    assert dw.inplace == inplace_workspace_bytes("depthwise_conv2d", (40, 40, 16), 16, (3, 3),
                                                 padding=(1, 1, 1, 1), groups=16) == 25_600
    assert rip_workspace_bytes((40, 40, 16), 16, (3, 3), padding=(1, 1, 1, 1),
                               groups=16) > 25_600
    assert g.outputs == ("dequantize_62",) and g["dequantize_62"].dtype == "float32"
    assert g["fully_connected_61"].attrs["units"] == 2
    assert g["mean_59"].attrs == {**g["mean_59"].attrs, "axis": [3], "keep_dims": False}
    assert g["mean_59"].inplace is None                      # not a global spatial mean
    assert g["transpose_58"].attrs["perm"] == [0, 3, 1, 2]
    adds = [n for n in g.nodes.values() if n.op == "add"]
    assert adds and all(n.inplace == "alias" for n in adds)
    # JSON round trip keeps everything.
    assert Graph.from_json(g.to_json()).to_json() == g.to_json()


def test_folding_rewires_convs_to_the_unpadded_tensor():
    m = load_tflite(model_path("tinyengine/vww.tflite"))
    assert foldable_pads(m) == {1: (1, 1, 1, 1), 6: (1, 1, 1, 1), 18: (3, 3, 3, 3),
                                30: (3, 3, 3, 3)}
    g = tflite_to_graph(m)
    assert len(g.op_names) == 59 and not any(n.op == "pad" for n in g.nodes.values())
    conv = g["conv2d_2"]
    assert conv.inputs == ("quantize_0",)
    assert conv.attrs["padding"] == [1, 1, 1, 1] and conv.attrs["folded_pad"] == [1, 1, 1, 1]
    assert conv.attrs["in_shape"] == [1, 80, 80, 3]
    assert conv.inplace == rip_workspace_bytes((80, 80, 3), 16, (3, 3), (2, 2),
                                               padding=(1, 1, 1, 1))


def test_layout_ops_and_elementwise_flags():
    def graph(case):
        return tflite_to_graph(parse_tflite(SINGLE_OP_MODELS[case](), f"{case}.tflite"))

    assert graph("reshape")["reshape_0"].inplace == "alias"
    assert graph("relu_requant")["relu_0"].inplace == "alias"
    assert graph("add_same_shape_relu6")["add_0"].inplace == "alias"
    assert graph("add_broadcast")["add_0"].inplace == "alias"        # first input full size
    assert graph("concat_channels")["concatenation_0"].inplace is None
    assert graph("transpose")["transpose_0"].inplace is None
    # int8 -> float32 runs in place: the int8 input at the end of the float output's bytes
    assert graph("dequantize")["dequantize_0"].inplace == 6 * 7 * 10 * 4
    assert graph("quantize_int8_int8")["quantize_0"].inplace == "alias"
    assert graph("mean_hw_keep")["mean_0"].inplace == rip_workspace_bytes(
        (5, 7, 12), 12, (5, 7), groups=12)
    assert graph("mean_channels")["mean_0"].inplace is None
    pool = graph("avg_pool_same_s2")["avg_pool2d_0"]
    assert pool.attrs["padding"] == [1, 1, 0, 1] and pool.attrs["kernel"] == [3, 3]
    assert pool.inplace == rip_workspace_bytes((9, 10, 5), 5, (3, 3), (2, 2),
                                               padding=(1, 1, 0, 1), groups=5)
    # FULLY_CONNECTED in place needs a row gather of 2 * depth bytes outside the arena: a
    # 3 x 24 -> 7 layer would save 72 + 21 - S* = 21 arena bytes for 48 of scratch (not in
    # place), a 64 x 16 -> 16 one 2,048 - S* for 32 (in place)
    fc = graph("fc_per_channel_batched")["fully_connected_0"]
    assert 72 + 21 - rip_workspace_bytes((3, 1, 24), 7, (1, 1)) <= 2 * 24 and fc.inplace is None
    fc = graph("fc_batched_in_place")["fully_connected_0"]
    assert fc.inplace == rip_workspace_bytes((64, 1, 16), 16, (1, 1)) < 2 * 1024 - 2 * 16
    resize = graph("resize_half_pixel")["resize_nearest_neighbor_0"]
    assert resize.attrs["size"] == [7, 9] and resize.attrs["half_pixel_centers"] is True


def _pad_then(reader: str, pad_value=None, second_reader: bool = False) -> bytes:
    b = ModelBuilder()
    x = b.add_tensor((1, 6, 6, 4), scale=0.1, zero_point=3)
    paddings = b.add_tensor((4, 2), "int32", data=[[0, 0], [1, 1], [1, 1], [0, 0]])
    xp = b.add_tensor((1, 8, 8, 4), scale=0.1, zero_point=3)
    if pad_value is None:
        b.add_operator("PAD", [x, paddings], [xp])
    else:
        value = b.add_tensor((), scale=0.1, zero_point=3, data=np.int8(pad_value))
        b.add_operator("PADV2", [x, paddings, value], [xp])
    y = b.add_tensor((1, 6, 6, 4), scale=0.1, zero_point=3)
    outputs = [y]
    if reader == "pool":
        b.add_operator("AVERAGE_POOL_2D", [xp], [y], {
            "padding": "VALID", "stride_h": 1, "stride_w": 1, "filter_height": 3,
            "filter_width": 3})
    else:
        w = b.add_tensor((1, 3, 3, 4), scale=0.01, axis=3, data=np.ones((1, 3, 3, 4)))
        b.add_operator("DEPTHWISE_CONV_2D", [xp, w, -1], [y], {
            "padding": "VALID", "stride_h": 1, "stride_w": 1, "depth_multiplier": 1})
    if second_reader:
        z = b.add_tensor((1, 8, 8, 4), scale=0.1, zero_point=3)
        b.add_operator("RELU", [xp], [z])
        outputs.append(z)
    return b.build([x], outputs)


@pytest.mark.parametrize("buf, folds", [
    (_pad_then("conv"), True),
    (_pad_then("conv", pad_value=3), True),           # PADV2 with the zero point
    (_pad_then("conv", pad_value=0), False),          # PADV2 with another value
    (_pad_then("pool"), False),                       # pooling cannot absorb a PAD
    (_pad_then("conv", second_reader=True), False),   # another reader needs the padded tensor
])
def test_fold_conditions(buf, folds):
    m = parse_tflite(buf)
    assert (0 in foldable_pads(m)) == folds
    g = tflite_to_graph(m)
    assert any(n.op in ("pad", "padv2") for n in g.nodes.values()) != folds


def test_multi_output_operator_is_rejected():
    b = ModelBuilder()
    axis = b.add_tensor((), "int32", data=np.int32(3))
    x = b.add_tensor((1, 2, 2, 4), scale=0.1)
    y1 = b.add_tensor((1, 2, 2, 2), scale=0.1)
    y2 = b.add_tensor((1, 2, 2, 2), scale=0.1)
    b.add_operator("SPLIT", [axis, x], [y1, y2])
    with pytest.raises(UnsupportedOperatorError, match=r"operator 0 \(SPLIT\) has 2 outputs"):
        tflite_to_graph(parse_tflite(b.build([x], [y1, y2])))


# ================================================================= PAD folding is bit-exact
@pytest.mark.parametrize("source", ["tinyengine/vww.tflite",
                                    "mcunet/mcunet-320kb-1mb_imagenet.tflite",
                                    "case:pad_then_depthwise"])
def test_folded_convolution_is_bit_exact(source):
    """Each absorbing convolution, run on the PAD's *input* with the combined padding, gives
    exactly the output of PAD -> convolution in the reference (itself bit-exact with TFLM)."""
    if source.startswith("case:"):
        m = parse_tflite(SINGLE_OP_MODELS[source[5:]]())
    else:
        m = load_tflite(model_path(source))
    folds = foldable_pads(m)
    assert folds
    values = ref.run_all(m, model_inputs(m, np.random.default_rng(0)))
    consumers = m.consumers()
    checked = 0
    for pad_index, pads in folds.items():
        pad = m.operators[pad_index]
        for reader_index in consumers[pad.outputs[0]]:
            op = m.operators[reader_index]
            p = ref.conv_params(m, op)
            folded = dataclasses.replace(p, padding=tuple(a + b for a, b in zip(p.padding, pads)))
            weights = m.tensors[op.inputs[1]].data
            bias = m.tensors[op.inputs[2]].data if len(op.inputs) > 2 and op.inputs[2] >= 0 \
                else None
            kernel = ref.depthwise_conv2d_int8 if op.op == "DEPTHWISE_CONV_2D" \
                else ref.conv2d_int8
            got = kernel(values[pad.inputs[0]], weights, bias, folded)
            assert np.array_equal(got, values[op.outputs[0]]), f"operator {op.index}"
            checked += 1
    assert checked >= len(folds)


# ================================================================ liveness against the peers
@pytest.mark.parametrize("rel", sorted(TFLITE_ORDER_PEAK))
def test_stored_order_liveness_matches_peers(rel):
    g = tflite_to_graph(load_tflite(model_path(rel)), fold_pad=False)
    assert stored_order_peak(g, inplace=False) == TFLITE_ORDER_PEAK[rel]


@pytest.mark.parametrize("rel", sorted(TFLM_HEAD_ARENA))
def test_liveness_within_tflm_arena(rel):
    m = load_tflite(model_path(rel))
    plain = stored_order_peak(tflite_to_graph(m, fold_pad=False), inplace=False)
    assert plain <= TFLM_HEAD_ARENA[rel]
    folded = tflite_to_graph(m)
    assert stored_order_peak(folded, inplace=False) < plain
    assert stored_order_peak(folded, inplace=True) <= stored_order_peak(folded, inplace=False)


def test_measured_mcu_figures():
    """The numbers reported for the MCU models (stored order; bytes)."""
    vww = load_tflite(model_path("tinyengine/vww.tflite"))
    mcunet = load_tflite(model_path("mcunet/mcunet-320kb-1mb_imagenet.tflite"))
    figures = {}
    for name, m in (("vww", vww), ("mcunet", mcunet)):
        plain, folded = tflite_to_graph(m, fold_pad=False), tflite_to_graph(m)
        figures[name] = (stored_order_peak(plain, False), stored_order_peak(folded, False),
                         stored_order_peak(folded, True))
    # vww: the unfolded peak equals TFLM's head arena exactly (PAD 40x40x48 -> 42x42x48);
    # folded, the float input + its QUANTIZE dominate (76,800 + 19,200) unless the QUANTIZE
    # runs in place over the float input (RiP model): then the float input alone.
    assert figures["vww"] == (161_472, 96_000, 76_800)
    # mcunet: with in place, b1/expand's 88x88x24 output alone (its depthwise runs
    # channel-wise in place, no gap)
    assert figures["mcunet"] == (397_920, 340_736, 88 * 88 * 24)
