"""Shared by the front-end tests: where the real models are, and small generated models.

The real models are third-party data outside the repository (``<repo>/../shared/models``);
tests that need them skip when that folder is absent. The generated single-operator models
cover every kernel of the reference interpreter, with geometry and quantization the real models
do not exercise (dilation, groups, depth multipliers, odd sizes, broadcasting, ...).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tvm_serenity.frontend.builder import ModelBuilder
from tvm_serenity.frontend.reference import output_size, same_padding


MODELS_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "models"

MODEL_FILES = ["tinyengine/vww.tflite", "mcunet/mcunet-320kb-1mb_imagenet.tflite",
               "keras/mobilenet_v1_025_128.tflite", "keras/mobilenet_v2_035_96.tflite",
               "keras/mobilenet_v3_small_075_96.tflite",
               "keras/darts_v2_normal_cifar_32x32_C36.tflite",
               "keras/darts_v2_normal_imagenet_28x28_C48.tflite",
               "keras/randwire_cifar100_C78_cellA.tflite"]


def model_path(rel: str) -> Path:
    path = MODELS_DIR / rel
    if not path.is_file():
        pytest.skip(f"{path} is absent (third-party model data, not in the repository)")
    return path


def all_model_files() -> list[str]:
    """MODEL_FILES plus any other .tflite that appears under the models folder."""
    extra = sorted(str(p.relative_to(MODELS_DIR)) for p in MODELS_DIR.glob("**/*.tflite")
                   if str(p.relative_to(MODELS_DIR)) not in MODEL_FILES) \
        if MODELS_DIR.is_dir() else []
    return MODEL_FILES + extra


# --------------------------------------------------------------------- building blocks
def add_conv(b: ModelBuilder, rng, x: int, shape, op: str, cout: int, kernel, stride, padding,
             activation: str, q) -> tuple[int, tuple[int, ...]]:
    """Append a CONV_2D (``cout`` channels) or a DEPTHWISE_CONV_2D (multiplier 1) reading
    tensor ``x`` of NHWC ``shape`` to ``b``, with random per-channel int8 weights and int32
    bias; ``q`` = (scale, zero point) of the output. Returns (output tensor, its shape)."""
    _, h, w, cin = shape
    if op == "CONV_2D":
        wshape, axis = (cout, *kernel, cin), 0
    else:
        cout, wshape, axis = cin, (1, *kernel, cin), 3
    wt = b.add_tensor(wshape, scale=rng.uniform(0.002, 0.02, cout), axis=axis,
                      data=rng.integers(-127, 128, wshape))
    bias = b.add_tensor((cout,), "int32", data=rng.integers(-3000, 3000, cout))
    pt, pb, pl, pr = same_padding(padding, (h, w), kernel, stride, (1, 1))
    out = (1, output_size(h, kernel[0], stride[0], 1, pt, pb),
           output_size(w, kernel[1], stride[1], 1, pl, pr), cout)
    y = b.add_tensor(out, scale=q[0], zero_point=q[1])
    opts = {"padding": padding, "stride_h": stride[0], "stride_w": stride[1],
            "dilation_h_factor": 1, "dilation_w_factor": 1, "fused_activation_function": activation}
    if op != "CONV_2D":
        opts["depth_multiplier"] = 1
    b.add_operator(op, [x, wt, bias], [y], opts)
    return y, out


# --------------------------------------------------------------------- single-op models
def _unary(op, shape, in_q, out_q, options=None, out_shape=None, consts=(), in_dtype="int8",
           out_dtype="int8"):
    b = ModelBuilder()
    x = b.add_tensor(shape, in_dtype, scale=in_q and in_q[0], zero_point=in_q and in_q[1] or 0)
    cs = [b.add_tensor(np.shape(c), str(np.asarray(c).dtype), data=c) for c in consts]
    y = b.add_tensor(out_shape or shape, out_dtype, scale=out_q and out_q[0],
                     zero_point=out_q and out_q[1] or 0)
    b.add_operator(op, [x, *cs], [y], options)
    return b.build([x], [y])


def _binary(op, shape_a, shape_b, qa, qb, qo, activation="NONE"):
    b = ModelBuilder()
    x = b.add_tensor(shape_a, scale=qa[0], zero_point=qa[1])
    y = b.add_tensor(shape_b, scale=qb[0], zero_point=qb[1])
    out = b.add_tensor(np.broadcast_shapes(shape_a, shape_b), scale=qo[0], zero_point=qo[1])
    b.add_operator(op, [x, y], [out], {"fused_activation_function": activation})
    return b.build([x, y], [out])


def _conv(op, hw, cin, cout, kernel, stride, dilation, padding, activation, groups=1, mult=1,
          per_channel=True, seed=0):
    rng = np.random.default_rng(seed)
    b = ModelBuilder()
    si, zi, so, zo = 0.05, int(rng.integers(-20, 20)), 0.08, int(rng.integers(-30, 30))
    x = b.add_tensor((1, *hw, cin), scale=si, zero_point=zi)
    if op == "CONV_2D":
        wshape, axis = (cout, *kernel, cin // groups), 0
    else:
        cout = cin * mult
        wshape, axis = (1, *kernel, cout), 3
    ws = rng.uniform(0.002, 0.02, cout) if per_channel else 0.01
    w = b.add_tensor(wshape, scale=ws, zero_point=0, axis=axis,
                     data=rng.integers(-127, 128, wshape))
    bias = b.add_tensor((cout,), "int32", scale=si * np.atleast_1d(ws), zero_point=0,
                        data=rng.integers(-3000, 3000, cout))
    pt, pb, pl, pr = same_padding(padding, hw, kernel, stride, dilation)
    oh = output_size(hw[0], kernel[0], stride[0], dilation[0], pt, pb)
    ow = output_size(hw[1], kernel[1], stride[1], dilation[1], pl, pr)
    y = b.add_tensor((1, oh, ow, cout), scale=so, zero_point=zo)
    opts = {"padding": padding, "stride_h": stride[0], "stride_w": stride[1],
            "dilation_h_factor": dilation[0], "dilation_w_factor": dilation[1],
            "fused_activation_function": activation}
    if op != "CONV_2D":
        opts["depth_multiplier"] = mult
    b.add_operator(op, [x, w, bias], [y], opts)
    return b.build([x], [y])


def _fully_connected(batches, depth, units, per_channel, keep_num_dims=False, seed=0):
    rng = np.random.default_rng(seed)
    b = ModelBuilder()
    x = b.add_tensor((batches, depth), scale=0.03, zero_point=-7)
    ws = rng.uniform(0.002, 0.02, units) if per_channel else 0.013
    w = b.add_tensor((units, depth), scale=ws, data=rng.integers(-127, 128, (units, depth)))
    bias = b.add_tensor((units,), "int32", data=rng.integers(-2000, 2000, units))
    y = b.add_tensor((batches, units), scale=0.11, zero_point=5)
    b.add_operator("FULLY_CONNECTED", [x, w, bias], [y],
                   {"fused_activation_function": "RELU", "keep_num_dims": keep_num_dims})
    return b.build([x], [y])


def _pool(op, hw, c, kernel, stride, padding, activation="NONE"):
    q = (0.07, -3)
    pt, pb, pl, pr = same_padding(padding, hw, kernel, stride)
    out = (1, output_size(hw[0], kernel[0], stride[0], 1, pt, pb),
           output_size(hw[1], kernel[1], stride[1], 1, pl, pr), c)
    return _unary(op, (1, *hw, c), q, q, {"padding": padding, "stride_h": stride[0],
                                          "stride_w": stride[1], "filter_height": kernel[0],
                                          "filter_width": kernel[1],
                                          "fused_activation_function": activation}, out)


def _mean(shape, axes, keep_dims, qi=(0.05, 3), qo=(0.03, -9)):
    out = [1 if i in axes else d for i, d in enumerate(shape)] if keep_dims else \
        [d for i, d in enumerate(shape) if i not in axes]
    return _unary("MEAN", shape, qi, qo, {"keep_dims": keep_dims}, out,
                  [np.array(axes, dtype=np.int32)])


def _resize(shape, size, align_corners, half_pixel_centers):
    q = (0.1, 4)
    return _unary("RESIZE_NEAREST_NEIGHBOR", shape, q, q,
                  {"align_corners": align_corners, "half_pixel_centers": half_pixel_centers},
                  (shape[0], *size, shape[3]), [np.array(size, dtype=np.int32)])


def _concat(shapes, axis):
    b = ModelBuilder()
    xs = [b.add_tensor(s, scale=0.1, zero_point=2) for s in shapes]
    out = list(shapes[0])
    out[axis] = sum(s[axis] for s in shapes)
    y = b.add_tensor(out, scale=0.1, zero_point=2)
    b.add_operator("CONCATENATION", xs, [y], {"axis": axis})
    return b.build(xs, [y])


def strided_slice(shape, begin, end, strides, out_shape, q=(0.1, -7), dtype="int8", **masks):
    """STRIDED_SLICE with constant int32 begin/end/strides; ``masks``: begin_mask, end_mask,
    shrink_axis_mask, ellipsis_mask, new_axis_mask, offset (StridedSliceOptions fields)."""
    vectors = [np.array(v, dtype=np.int32) for v in (begin, end, strides)]
    quant = q if dtype == "int8" else None
    return _unary("STRIDED_SLICE", shape, quant, quant, masks or None, out_shape, vectors,
                  in_dtype=dtype, out_dtype=dtype)


def _padv2():
    """PADV2 with an explicit (quantized) pad value other than the zero point."""
    b = ModelBuilder()
    x = b.add_tensor((1, 5, 5, 3), scale=0.1, zero_point=-7)
    paddings = b.add_tensor((4, 2), "int32", data=[[0, 0], [0, 1], [2, 1], [0, 0]])
    value = b.add_tensor((), scale=0.1, zero_point=-7, data=np.int8(30))
    y = b.add_tensor((1, 6, 8, 3), scale=0.1, zero_point=-7)
    b.add_operator("PADV2", [x, paddings, value], [y])
    return b.build([x], [y])


def _pad_conv_chain():
    """PAD -> DEPTHWISE_CONV_2D (VALID), the pattern PAD folding rewrites."""
    rng = np.random.default_rng(3)
    b = ModelBuilder()
    x = b.add_tensor((1, 9, 9, 4), scale=0.05, zero_point=11)
    paddings = b.add_tensor((4, 2), "int32", data=[[0, 0], [1, 2], [2, 1], [0, 0]])
    xp = b.add_tensor((1, 12, 12, 4), scale=0.05, zero_point=11)
    w = b.add_tensor((1, 3, 3, 4), scale=rng.uniform(0.005, 0.02, 4), axis=3,
                     data=rng.integers(-127, 128, (1, 3, 3, 4)))
    bias = b.add_tensor((4,), "int32", data=rng.integers(-500, 500, 4))
    y = b.add_tensor((1, 5, 5, 4), scale=0.09, zero_point=-20)
    b.add_operator("PAD", [x, paddings], [xp])
    b.add_operator("DEPTHWISE_CONV_2D", [xp, w, bias], [y],
                   {"padding": "VALID", "stride_h": 2, "stride_w": 2, "depth_multiplier": 1,
                    "dilation_h_factor": 1, "dilation_w_factor": 1})
    return b.build([x], [y])


SQ = (1, 6, 7, 10)
SINGLE_OP_MODELS = {
    "conv3x3_same_relu6": lambda: _conv("CONV_2D", (9, 9), 8, 16, (3, 3), (1, 1), (1, 1),
                                        "SAME", "RELU6"),
    "conv3x3_same_s2_odd": lambda: _conv("CONV_2D", (10, 9), 8, 16, (3, 3), (2, 2), (1, 1),
                                         "SAME", "NONE", seed=1),
    "conv5x3_valid_s2x1": lambda: _conv("CONV_2D", (12, 11), 4, 6, (5, 3), (2, 1), (1, 1),
                                        "VALID", "RELU", seed=2),
    "conv_dilated": lambda: _conv("CONV_2D", (12, 12), 4, 6, (3, 3), (1, 1), (2, 2), "SAME",
                                  "NONE", seed=3),
    "conv1x1_per_tensor": lambda: _conv("CONV_2D", (8, 8), 16, 24, (1, 1), (1, 1), (1, 1),
                                        "VALID", "NONE", per_channel=False, seed=4),
    "conv_grouped": lambda: _conv("CONV_2D", (8, 8), 8, 12, (3, 3), (1, 1), (1, 1), "SAME",
                                  "NONE", groups=4, seed=5),
    "depthwise_s2": lambda: _conv("DEPTHWISE_CONV_2D", (11, 11), 8, 8, (3, 3), (2, 2), (1, 1),
                                  "SAME", "RELU6", seed=6),
    "depthwise_mult2": lambda: _conv("DEPTHWISE_CONV_2D", (9, 9), 4, 8, (3, 3), (1, 1), (1, 1),
                                     "SAME", "NONE", mult=2, seed=7),
    "depthwise_5x5_dilated": lambda: _conv("DEPTHWISE_CONV_2D", (14, 14), 6, 6, (5, 5), (1, 1),
                                           (2, 2), "VALID", "NONE", seed=8),
    "fc_per_tensor": lambda: _fully_connected(1, 40, 10, per_channel=False),
    "fc_per_channel_batched": lambda: _fully_connected(3, 24, 7, per_channel=True, seed=1),
    "fc_batched_in_place": lambda: _fully_connected(64, 16, 16, per_channel=True, seed=2),
    "add_same_shape_relu6": lambda: _binary("ADD", SQ, SQ, (0.05, -3), (0.11, 7), (0.1, -20),
                                            "RELU6"),
    "add_broadcast": lambda: _binary("ADD", SQ, (1, 1, 1, 10), (0.05, -3), (0.02, 1),
                                     (0.06, 4)),
    "mul_broadcast": lambda: _binary("MUL", SQ, (1, 1, 1, 10), (0.05, -3), (0.0078, -128),
                                     (0.03, 9)),
    "mul_relu": lambda: _binary("MUL", SQ, SQ, (0.1, 10), (0.2, -5), (0.5, -1), "RELU"),
    "mean_hw_keep": lambda: _mean((1, 5, 7, 12), [1, 2], True),
    "mean_hw_drop": lambda: _mean((1, 5, 7, 12), [1, 2], False),
    "mean_channels": lambda: _mean((1, 4, 4, 30), [3], False),
    "mean_same_quant": lambda: _mean((1, 6, 6, 8), [1, 2], True, (0.05, 3), (0.05, 3)),
    "avg_pool_same_s2": lambda: _pool("AVERAGE_POOL_2D", (9, 10), 5, (3, 3), (2, 2), "SAME"),
    "avg_pool_global": lambda: _pool("AVERAGE_POOL_2D", (7, 7), 6, (7, 7), (1, 1), "VALID"),
    "max_pool_same": lambda: _pool("MAX_POOL_2D", (9, 9), 5, (3, 3), (2, 2), "SAME", "RELU"),
    "max_pool_valid": lambda: _pool("MAX_POOL_2D", (8, 8), 3, (2, 2), (2, 2), "VALID"),
    "pad": lambda: _unary("PAD", (1, 5, 5, 3), (0.1, -7), (0.1, -7), None, (1, 7, 6, 3),
                          [np.array([[0, 0], [1, 1], [0, 1], [0, 0]], dtype=np.int32)]),
    "padv2": _padv2,
    "reshape": lambda: _unary("RESHAPE", (1, 2, 3, 4), (0.1, 0), (0.1, 0),
                              {"new_shape": [1, 24]}, (1, 24),
                              [np.array([1, 24], dtype=np.int32)]),
    "transpose": lambda: _unary("TRANSPOSE", (1, 2, 3, 4), (0.1, 0), (0.1, 0), None,
                                (1, 4, 2, 3), [np.array([0, 3, 1, 2], dtype=np.int32)]),
    "concat_channels": lambda: _concat([(1, 4, 4, 3), (1, 4, 4, 5)], 3),
    "concat_width": lambda: _concat([(1, 4, 2, 3), (1, 4, 5, 3), (1, 4, 1, 3)], 2),
    "resize_x2": lambda: _resize((1, 4, 5, 3), (8, 10), False, False),
    "resize_half_pixel": lambda: _resize((1, 5, 4, 2), (7, 9), False, True),
    "resize_align_corners": lambda: _resize((1, 5, 4, 2), (9, 7), True, False),
    "resize_down": lambda: _resize((1, 8, 9, 2), (3, 4), False, False),
    "hard_swish": lambda: _unary("HARD_SWISH", SQ, (0.05, -10), (0.035, -100)),
    "hard_swish_wide": lambda: _unary("HARD_SWISH", SQ, (0.2, -10), (0.01, -100)),
    "hard_swish_narrow": lambda: _unary("HARD_SWISH", SQ, (0.01, -10), (0.02, 30)),
    "logistic": lambda: _unary("LOGISTIC", SQ, (0.1, 5), (1 / 256, -128)),
    "logistic_fine": lambda: _unary("LOGISTIC", SQ, (0.004, -20), (1 / 256, -128)),
    "logistic_coarse": lambda: _unary("LOGISTIC", SQ, (1.5, 0), (1 / 256, -128)),
    "softmax": lambda: _unary("SOFTMAX", (1, 4, 100), (0.1, -3), (1 / 256, -128),
                              {"beta": 1.0}),
    "softmax_fine": lambda: _unary("SOFTMAX", (2, 10), (0.004, 7), (1 / 256, -128),
                                   {"beta": 1.0}),
    "softmax_coarse_beta": lambda: _unary("SOFTMAX", (3, 17), (1.0, 7), (1 / 256, -128),
                                          {"beta": 0.5}),
    "relu_requant": lambda: _unary("RELU", SQ, (0.05, -10), (0.08, -128)),
    "relu6_same_quant": lambda: _unary("RELU6", SQ, (0.05, -10), (0.05, -10)),
    "quantize_int8_int8": lambda: _unary("QUANTIZE", SQ, (0.05, -10), (0.065, 7)),
    "quantize_float_saturating": lambda: _unary("QUANTIZE", SQ, None, (0.005, 7),
                                                in_dtype="float32"),
    "dequantize": lambda: _unary("DEQUANTIZE", SQ, (0.02, 7), None, out_dtype="float32"),
    "pad_then_depthwise": _pad_conv_chain,
    # Where the runtimes differ (the reference has both): see RUNTIME_SPECIFIC.
    "relu6_requant": lambda: _unary("RELU6", SQ, (0.05, -10), (0.03, -128)),
    "fc_many_rows_per_channel": lambda: _fully_connected(256, 64, 40, per_channel=True, seed=2),
    "fc_many_rows_per_tensor": lambda: _fully_connected(256, 64, 40, per_channel=False, seed=3),
}

#: Single-op models on which TFLM's and LiteRT's arithmetic give different outputs.
RUNTIME_SPECIFIC = {"relu6_requant", "fc_many_rows_per_channel", "fc_many_rows_per_tensor"}

#: STRIDED_SLICE single-op models, kept apart from SINGLE_OP_MODELS because TVM's stock TFLite
#: frontend refuses quantized STRIDED_SLICE (test_fakequant.py runs SINGLE_OP_MODELS through
#: it); the reference, Relax and graph C tests run both dicts.
STRIDED_SLICE_MODELS = {
    # x[:, 1:, 1:, :], the NASNet / DARTS reduction-cell crop, as the converter writes it
    "strided_slice_crop": lambda: strided_slice((1, 7, 7, 8), [0, 1, 1, 0], [0, 0, 0, 0],
                                                [1, 1, 1, 1], (1, 6, 6, 8), begin_mask=0b1001,
                                                end_mask=0b1111),
    # x[:, 1::2, ::3, 1:5] (ragged last step on both strided axes)
    "strided_slice_step2": lambda: strided_slice((1, 9, 8, 6), [0, 1, 0, 1], [1, 9, 8, 5],
                                                 [1, 2, 3, 1], (1, 4, 3, 4), begin_mask=0b0100),
    # x[:, ::-1, 5:0:-2, :] (negative strides, end_mask meaning "through index 0")
    "strided_slice_reverse": lambda: strided_slice((1, 6, 7, 5), [0, 0, 5, 0], [1, 0, 0, 5],
                                                   [1, -1, -2, 1], (1, 6, 3, 5),
                                                   begin_mask=0b0010, end_mask=0b0010),
    # x[:, 2, 1:-1, -1] (shrunk axes, one by a negative index)
    "strided_slice_shrink": lambda: strided_slice((1, 6, 7, 5), [0, 2, 1, -1], [1, 3, -1, 0],
                                                  [1, 1, 1, 1], (1, 5), shrink_axis_mask=0b1010),
    # x[-1:, -4:-1, -100:100:2, 1:-1] (negative indices and clamping, batch 2)
    "strided_slice_clamp": lambda: strided_slice((2, 5, 6, 4), [-1, -4, -100, 1],
                                                 [2, -1, 100, -1], [1, 1, 2, 1], (1, 3, 3, 2),
                                                 q=(0.05, 20)),
    # rank 2, x[6:1:-2, 1::3]
    "strided_slice_rank2": lambda: strided_slice((8, 10), [6, 1], [1, 0], [-2, 3], (3, 3),
                                                 end_mask=0b10),
}


# ------------------------------------------------- MUL / ADD with one graph input (MCU C path)
def binary_one_input(op, shape, other, qa, qb, qo, activation="NONE", swap=False):
    """``op`` (MUL or ADD) of the graph input ``x`` and ``other``, a model with one input (what
    ``model_run`` takes): ``("const", data)`` an int8 constant quantized ``qb`` (broadcast as
    NumPy does), ``("mean",)`` ``MEAN(x)`` over H and W kept as [1, 1, 1, C] (quantized ``qb``;
    the squeeze-excite pattern), ``("self",)`` ``x`` itself (``qb`` ignored). ``swap``: ``other``
    is the first operand."""
    b = ModelBuilder()
    x = b.add_tensor(shape, scale=qa[0], zero_point=qa[1])
    if other[0] == "const":
        data = np.asarray(other[1], dtype=np.int8)
        y = b.add_tensor(data.shape, scale=qb[0], zero_point=qb[1], data=data)
    elif other[0] == "mean":
        axes = b.add_tensor((2,), "int32", data=[1, 2])
        y = b.add_tensor((1, 1, 1, shape[3]), scale=qb[0], zero_point=qb[1])
        b.add_operator("MEAN", [x, axes], [y], {"keep_dims": True})
    else:
        y = x
    shape_y = np.shape(other[1]) if other[0] == "const" else \
        (1, 1, 1, shape[3]) if other[0] == "mean" else shape
    out = b.add_tensor(np.broadcast_shapes(tuple(shape), tuple(shape_y)), scale=qo[0],
                       zero_point=qo[1])
    b.add_operator(op, [y, x] if swap else [x, y], [out],
                   {"fused_activation_function": activation})
    return b.build([x], [out])


_C10 = np.arange(-50, 50, 10)          # a non-uniform int8 constant of 10 values
ONE_INPUT_BINARY_MODELS = {
    # MobileNetV3's squeeze-excite scaling: x * hard_sigmoid(mean(x)), broadcast over H, W
    "mul_se_broadcast": lambda: binary_one_input("MUL", SQ, ("mean",), (0.05, -3),
                                                 (0.004, -128), (0.02, 9)),
    "mul_se_broadcast_first": lambda: binary_one_input("MUL", SQ, ("mean",), (0.05, -3),
                                                       (0.03, 5), (0.04, -2), swap=True),
    "mul_square_relu": lambda: binary_one_input("MUL", SQ, ("self",), (0.1, 10), None,
                                                (0.5, -1), "RELU"),
    # MobileNetV3's input scaling and hard-sigmoid's 1/6: a constant scalar (a table)
    "mul_const_scalar": lambda: binary_one_input("MUL", SQ, ("const", np.int8(127)),
                                                 (1.0, -128), (3.0757e-05, -128),
                                                 (0.011764, -43)),
    "mul_const_scalar_first": lambda: binary_one_input("MUL", SQ, ("const", np.int8(-90)),
                                                       (0.05, 4), (0.01, 3), (0.03, -7),
                                                       "RELU6", swap=True),
    "mul_const_channels": lambda: binary_one_input("MUL", SQ, ("const", _C10), (0.05, -3),
                                                   (0.02, 1), (0.03, 2)),
    "add_const_scalar": lambda: binary_one_input("ADD", SQ, ("const", np.int8(-128)),
                                                 (0.011764, -43), (0.0039216, 127),
                                                 (0.0078431, -1)),
    "add_const_channels": lambda: binary_one_input("ADD", SQ, ("const", _C10.reshape(1, 1, 1, 10)),
                                                   (0.05, -3), (0.02, 1), (0.06, 4), "RELU"),
    "add_broadcast_mean": lambda: binary_one_input("ADD", (1, 4, 4, 6), ("mean",), (0.1, 2),
                                                   (0.1, 2), (0.2, 0)),
}
