"""LowerFakeQuant and FoldPad: small TVMScript modules in TVM's test style (structure + run), the
stock TFLite frontend's output lowered to TFLite's integer arithmetic, and PAD folding on the real
models."""

import warnings

import numpy as np
import pytest
import tflite
import tvm
import tvm.relax.frontend.tflite  # noqa: F401  (registers relax.frontend.tflite)
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R

import tvm_serenity.passes as sp
from tflite_cases import SINGLE_OP_MODELS, model_path
from tvm_serenity.frontend import foldable_pads, load_tflite, parse_tflite, reference
from tvm_serenity.frontend.interpreters import model_inputs
from tvm_serenity.frontend.relax_import import OperatorDescription, emit_operator, from_tflite
from tvm_serenity.passes.convert import is_op

RNG = np.random.default_rng(5)
W = RNG.integers(-127, 128, (3, 3, 4, 8)).astype("int8")          # HWIO
W_SCALES = RNG.uniform(0.002, 0.02, 8).astype("float32")
BIAS = RNG.integers(-3000, 3000, 8).astype("int32")


def run_vm(mod, *inputs, pipeline="default"):
    ex = tvm.compile(mod, target="llvm", relax_pipeline=pipeline)
    out = relax.VirtualMachine(ex, tvm.cpu())["main"](*[tvm.runtime.tensor(a) for a in inputs])
    return [out.numpy()] if isinstance(out, tvm.runtime.Tensor) else [o.numpy() for o in out]


def int8(shape, seed=0):
    return np.random.default_rng(seed).integers(-128, 128, shape).astype("int8")


def kernel_calls(func):
    """(binding name, callee) for every binding of ``func``."""
    return [(b.var.name, b.value.op) for blk in func.body.blocks for b in blk.bindings]


def ops_in(func):
    names = []
    relax.analysis.post_order_visit(
        func.body, lambda e: names.append(e.op.name) if isinstance(e, relax.Call)
        and isinstance(e.op, tvm.ir.Op) else None)
    return names


# ----------------------------------------------------------------------------- LowerFakeQuant
@I.ir_module
class FakeQuantConv:
    """How the stock frontend writes an int8 CONV_2D with bias and a fused RELU."""

    @R.function
    def main(x: R.Tensor((1, 7, 6, 4), "int8")):
        with R.dataflow():
            dx = R.dequantize(x, R.const(0.05, "float32"), R.const(3, "int32"), axis=0)
            dw = R.dequantize(R.const(W), R.const(W_SCALES), R.const(0, "int32"), axis=3)
            c = R.nn.conv2d(dx, dw, strides=2, padding=(1, 1, 0, 0), data_layout="NHWC",
                            kernel_layout="HWIO")
            db = R.dequantize(R.const(BIAS), R.const(W_SCALES * np.float32(0.05)),
                              R.const(0, "int32"), axis=0)
            a = R.add(c, db)
            q = R.quantize(a, R.const(0.1, "float32"), R.const(-5, "int32"), axis=0)
            y = R.clip(q, -5, 127)
            R.output(y)
        return y


def test_lower_fake_quant_conv():
    pass_ = sp.LowerFakeQuant()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        after = pass_(FakeQuantConv)
    relax.analysis.well_formed(after)
    assert pass_.lowered == {"conv2d": 1} and not pass_.unlowered
    # main: one binding, the int8 result, computed by one described integer kernel
    ((name, value),) = [(b.var.name, b.value) for b in after["main"].body.blocks[0].bindings]
    assert name == "y" and is_op(value, "relax.call_tir")
    kernel = after[value.args[0]]
    assert isinstance(kernel, tvm.tirx.PrimFunc)
    description = OperatorDescription.of(kernel)
    assert description.op == "CONV_2D"
    assert description.options["fused_activation_function"] == "RELU"
    assert not {"relax.quantize", "relax.dequantize"} & set(ops_in(after["main"]))
    x = int8((1, 7, 6, 4))
    params = reference.ConvParams((2, 2), (1, 1), (1, 0, 1, 0), 3,
                                  reference.conv_requant(np.float32(0.05), W_SCALES,
                                                         np.float32(0.1), -5, "RELU"))
    want = reference.conv2d_int8(x, W.transpose(3, 0, 1, 2), BIAS, params)
    np.testing.assert_array_equal(run_vm(after, x)[0], want)


@I.ir_module
class FakeQuantAddAndTanh:
    """A residual ADD with a fused RELU (lowered) next to a TANH (no integer lowering)."""

    @R.function
    def main(a: R.Tensor((1, 4, 4, 6), "int8"), b: R.Tensor((1, 4, 4, 6), "int8")):
        with R.dataflow():
            s = R.add(R.dequantize(a, R.const(0.05, "float32"), R.const(-3, "int32"), axis=0),
                      R.dequantize(b, R.const(0.11, "float32"), R.const(7, "int32"), axis=0))
            y = R.quantize(R.nn.relu(s), R.const(0.1, "float32"), R.const(-20, "int32"), axis=0)
            t = R.tanh(R.dequantize(a, R.const(0.05, "float32"), R.const(-3, "int32"), axis=0))
            z = R.quantize(t, R.const(1 / 128, "float32"), R.const(0, "int32"), axis=0)
            R.output(y, z)
        return (y, z)


def test_lower_fake_quant_add_and_fall_back_on_tanh():
    pass_ = sp.LowerFakeQuant()
    with pytest.warns(UserWarning, match=r"without an integer lowering: tanh x1"):
        after = pass_(FakeQuantAddAndTanh)
    relax.analysis.well_formed(after)
    assert pass_.lowered == {"add": 1, "quantize": 1} and pass_.unlowered == {"tanh": 1}
    assert "relax.tanh" in ops_in(after["main"])          # left as it was, in float

    a, b = int8((1, 4, 4, 6), 1), int8((1, 4, 4, 6), 2)
    y, z = run_vm(after, a, b)
    f32 = np.float32                    # the module's scales are float32, as TFLite's
    params = reference.add_params(f32(0.05), -3, f32(0.11), 7, f32(0.1), -20, "RELU")
    np.testing.assert_array_equal(y, reference.add_int8(a, b, params))
    # the float TANH computes what it did (only its quantize rounds half away from zero now)
    _, z_stock = run_vm(FakeQuantAddAndTanh, a, b)
    np.testing.assert_array_equal(z, z_stock)


def test_lower_fake_quant_leaves_float_modules_alone():
    @I.ir_module
    class Float:
        @R.function
        def main(x: R.Tensor((2, 3), "float32")):
            with R.dataflow():
                y = R.nn.relu(R.add(x, x))
                R.output(y)
            return y

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert sp.LowerFakeQuant()(Float).same_as(Float)


def stock_import(buf: bytes) -> tvm.IRModule:
    return relax.frontend.tflite.from_tflite(tflite.Model.GetRootAsModel(buf, 0))


#: Single-operator models the stock frontend imports (no quantized PAD, TRANSPOSE, RESIZE),
#: except two whose imported float graph means something else than TFLite Micro computes:
#: RELU6 with a requantization (TFLM only clamps) and SOFTMAX with beta != 1 (the frontend
#: drops beta).
STOCK_CASES = sorted(set(SINGLE_OP_MODELS) - {
    "pad", "padv2", "transpose", "resize_x2", "resize_half_pixel", "resize_align_corners",
    "resize_down", "pad_then_depthwise", "relu6_requant", "softmax_coarse_beta"})
STOCK_FAST = {"conv3x3_same_relu6", "depthwise_mult2", "fc_per_tensor", "add_broadcast",
              "avg_pool_same_s2", "mean_hw_drop", "concat_width", "softmax", "hard_swish",
              "logistic", "relu_requant"}


@pytest.mark.parametrize("case", [c if c in STOCK_FAST else pytest.param(c, marks=pytest.mark.slow)
                                  for c in STOCK_CASES])
def test_stock_import_lowered_is_bit_exact(case):
    buf = SINGLE_OP_MODELS[case]()
    model = parse_tflite(buf, f"{case}.tflite")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lowered = sp.LowerFakeQuant()(stock_import(buf))
    main_ops = set(ops_in(lowered["main"]))
    assert not {"relax.quantize", "relax.nn.conv2d", "relax.matmul"} & main_ops
    rng = np.random.default_rng(3)
    for _ in range(3):
        inputs = model_inputs(model, rng)
        got = run_vm(lowered, *inputs)
        for g, w in zip(got, reference.run(model, inputs)):
            np.testing.assert_array_equal(g, w)


@pytest.mark.slow
def test_stock_import_of_a_real_model_through_the_pipeline():
    """The stock import differs from TFLite on most outputs of the RandWire cell (tvm.md); with
    LowerFakeQuant in the "serenity" pipeline it is bit-exact."""
    path = model_path("keras/randwire_cifar100_C78_cellA.tflite")
    model = load_tflite(path)
    with open(path, "rb") as f:
        mod = stock_import(f.read())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ex = tvm.compile(mod, target="llvm", relax_pipeline="serenity")
    vm = relax.VirtualMachine(ex, tvm.cpu())
    rng = np.random.default_rng(4)
    for _ in range(2):
        inputs = model_inputs(model, rng)
        got = vm["main"](*[tvm.runtime.tensor(a) for a in inputs]).numpy()
        np.testing.assert_array_equal(got, reference.run(model, inputs)[0])


# -------------------------------------------------------------------------------------- FoldPad
W_OHWI = np.random.default_rng(9).integers(-127, 128, (8, 3, 3, 4)).astype("int8")
W_SCALES8 = np.full(8, 0.01, np.float32)
BIAS8 = np.arange(-400, 400, 100).astype("int32")
CONV = {"padding": "VALID", "stride_h": 1, "stride_w": 1,
        "fused_activation_function": "NONE"}


def pad_module(readers) -> tvm.IRModule:
    """``main(x)``: PAD(s) of ``x`` (1x6x6x4, zero point -3) each read by what ``readers``
    says: ``(pad op, pad value, "conv" | "pool" | "output")``."""
    x = relax.Var("x", relax.TensorType((1, 6, 6, 4), "int8"))
    bb = relax.BlockBuilder()
    paddings = np.array([[0, 0], [1, 1], [2, 1], [0, 0]], np.int32)
    with bb.function("main", [x]):
        with bb.dataflow():
            outs = []
            for k, (op, value, reader) in enumerate(readers):
                inputs = [(x, 0.05, -3), (paddings,)]
                if op == "PADV2":
                    inputs.append((np.array([value], np.int8), 0.05, -3))
                p = emit_operator(bb, op, inputs, ((1, 8, 9, 4), "int8", 0.05, -3), {},
                                  name=f"p{k}")
                if reader == "conv":
                    p = emit_operator(bb, "CONV_2D", [(p, 0.05, -3), (W_OHWI, W_SCALES8),
                                                      (BIAS8, W_SCALES8 * np.float32(0.05))],
                                      ((1, 6, 7, 8), "int8", 0.1, -5), CONV, name=f"c{k}")
                elif reader == "pool":
                    p = emit_operator(bb, "MAX_POOL_2D", [(p, 0.05, -3)],
                                      ((1, 6, 7, 4), "int8", 0.05, -3),
                                      {"padding": "VALID", "stride_h": 1, "stride_w": 1,
                                       "filter_height": 3, "filter_width": 3,
                                       "fused_activation_function": "NONE"}, name=f"m{k}")
                outs.append(p)
            out = bb.emit_output(relax.Tuple(outs) if len(outs) > 1 else outs[0])
        bb.emit_func_output(out)
    return bb.get()


def test_fold_pad_into_conv():
    before = pad_module([("PAD", None, "conv")])
    pass_ = sp.FoldPad()
    after = pass_(before)
    relax.analysis.well_formed(after)
    assert pass_.folded == ["main:p0"]
    ((binding),) = [b for b in after["main"].body.blocks[0].bindings
                    if not isinstance(b.value, relax.Var)]
    assert binding.var.name == "c0" and binding.value.args[1].fields[0].name == "x"
    description = OperatorDescription.of(after[binding.value.args[0]])
    assert description.op == "CONV_2D" and description.inputs[0]["shape"] == [1, 6, 6, 4]
    assert description.pad == {"paddings": [[0, 0], [1, 1], [2, 1], [0, 0]], "value": -3}
    x = int8((1, 6, 6, 4), 1)
    np.testing.assert_array_equal(run_vm(after, x)[0], run_vm(before, x)[0])
    # read back, the folded kernel is the PAD and the convolution again
    from tvm_serenity.frontend.relax_lift import operators_of
    assert [op.op for op in operators_of(after).operators] == ["PAD", "CONV_2D"]


def test_fold_pad_keeps_pads_it_cannot_fold():
    """PADs FoldPad must keep: one read by a max pool, a PADV2 of another value read by a
    convolution, one read by a convolution but also a result of ``main``."""
    before = pad_module([("PAD", None, "pool"), ("PADV2", 5, "conv"), ("PAD", None, "output")])
    pass_ = sp.FoldPad()
    assert pass_(before).same_as(before)
    assert pass_.folded == []


@pytest.mark.parametrize("rel", ["tinyengine/vww.tflite",
                                 "mcunet/mcunet-320kb-1mb_imagenet.tflite"])
def test_fold_pad_on_the_real_models(rel):
    model = load_tflite(model_path(rel))
    pass_ = sp.FoldPad()
    after = pass_(from_tflite(model))
    relax.analysis.well_formed(after)
    assert len(pass_.folded) == len(foldable_pads(model)) \
        == sum(op.op == "PAD" for op in model.operators)
    assert not any(g.name_hint.startswith("pad") for g in after.get_global_vars())
    assert len(after["main"].body.blocks[0].bindings) == len(model.operators) - len(pass_.folded)


def test_pipeline_runs_them_before_legalization():
    names = [p.info.name for p in sp.serenity_pipeline().passes]
    assert names.index("serenity.LowerFakeQuant") < names.index("serenity.FoldPad") \
        < names.index("LegalizeOps")
