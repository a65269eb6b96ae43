"""The int8 Relax importer: integer semantics bit-exact with TFLite Micro, one kernel per TFLite
operator, and the memory figures of the "serenity" pipeline on the real models.

Every compiled model runs on the Relax VM against :mod:`tvm_serenity.frontend.reference` (itself
bit-exact with TFLite Micro, tested in test_frontend_tflite.py) on random int8 inputs; two real
models are also checked against the TFLite Micro interpreter itself.
"""

import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.relax.backend.cpu_generic import pipeline as cpu

import tvm_serenity.passes as sp
from tflite_cases import MODEL_FILES, SINGLE_OP_MODELS, STRIDED_SLICE_MODELS, model_path
from tvm_serenity.frontend import (ModelBuilder, UnsupportedOperatorError, load_tflite,
                                   parse_tflite, reference, tflite_to_graph)
from tvm_serenity.frontend.interpreters import TFLM, available, model_inputs, run_interpreter
from tvm_serenity.frontend.to_graph import GRAPH_OPS
from tvm_serenity.frontend.relax_import import (SUPPORTED_OPS, OperatorDescription,
                                                from_tflite, tensor_var_names)
from tvm_serenity.memory import simulate
from tvm_serenity.passes.convert import block_graph, is_op

TARGET = tvm.target.Target("llvm")


@tvm.instrument.pass_instrument
class Capture:
    """Keeps, from one run of the "serenity" pipeline, the fused module in stored order (what
    MemoryAwareSchedule reads) and the reports of MemoryAwareSchedule and ArenaPlan."""

    def __init__(self):
        self.fused = self.schedule = self.arena = None

    def run_before_pass(self, mod, info):
        if info.name == "serenity.MemoryAwareSchedule":
            self.fused = mod

    def run_after_pass(self, mod, info):
        if info.name == "serenity.MemoryAwareSchedule":
            self.schedule = sp.read_report(mod)
        elif info.name == "serenity.ArenaPlan":
            self.arena = sp.read_report(mod, "serenity.arena")


def compile_serenity(mod):
    capture = Capture()
    with tvm.transform.PassContext(instruments=[capture]):
        ex = tvm.compile(mod, target="llvm", relax_pipeline="serenity")
    return ex, capture


def run_vm(ex, inputs):
    out = relax.VirtualMachine(ex, tvm.cpu())["main"](*[tvm.runtime.tensor(a) for a in inputs])
    return [out.numpy()] if isinstance(out, tvm.runtime.Tensor) else [o.numpy() for o in out]


def assert_outputs_equal(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)


def fuse(mod):
    with TARGET:
        return tvm.transform.Sequential([*cpu.library_dispatch_passes(TARGET),
                                         *cpu.legalize_passes(TARGET)])(mod)


# ------------------------------------------------------------------------- fixed-point helper
def test_kernel_requantization_on_llvm_matches_the_reference():
    """The kernel family's requantization (kernels.requantize), built by TVM's llvm, against
    reference.multiply_by_quantized_multiplier: per-channel multipliers of both signs (negative
    scales occur: MCUNet's first convolution) with left shifts (of negative values too, where
    TVM's simplifier once folded the int32/uint32 casts wrongly), zero and right shifts, exact
    rounding ties, and int32 extremes; with the multipliers and shifts constants, then run-time
    values (as the kernels load them); and as a kernel does it, from int8 values to a clamped
    int8 (the context in which the folded casts showed)."""
    from tvm.script.ir_builder import IRBuilder
    from tvm.script.ir_builder import tirx as T
    from tvm_serenity.codegen.kernels import requantize

    rng = np.random.default_rng(0)
    shifts = np.array([3, 1, 0, -1, -5, -12, -31, -20, 2, 0, -7, -31], dtype=np.int64)
    multipliers = np.array([1 << 30, (1 << 31) - 1, 1518500250, 1 << 30, 1431655765,
                            2004318071, 1 << 30, 1717986918, -1921673769, -(1 << 30),
                            -((1 << 31) - 1), -1518500250], dtype=np.int64)
    channels = len(shifts)
    acc = rng.integers(-(1 << 31), 1 << 31, (64, channels), dtype=np.int64)
    acc[:8] = np.array([(1 << 31) - 1, -(1 << 31), 0, -1, 1, 2048, -2048, 6144])[:, None]
    acc[8:16] = (np.arange(-4, 4)[:, None] * 2 + 1) << np.maximum(-shifts - 1, 0)   # ties
    acc[16:24] = rng.integers(-5000, 5000, (8, channels))        # small, negative, shifted
    acc = acc.astype(np.int32)
    want = reference.multiply_by_quantized_multiplier(acc.astype(np.int64), multipliers, shifts)

    def build(runtime: bool, from_int8: bool):
        with IRBuilder() as builder:
            with T.prim_func():
                T.func_name("k")
                x = T.arg("x", T.Buffer(acc.shape, "int8" if from_int8 else "int32"))
                s = T.arg("s", T.Buffer((channels,), "int32"))
                m = T.arg("m", T.Buffer((channels,), "int32"))
                y = T.arg("y", T.Buffer(acc.shape, "int8" if from_int8 else "int32"))
                with T.serial(0, acc.shape[0]) as i:
                    for c in range(channels):
                        shift = s[c] if runtime else int(shifts[c])
                        multiplier = m[c] if runtime else int(multipliers[c])
                        value = requantize(tvm.tirx.Cast("int32", x[i, c]), multiplier, shift)
                        if from_int8:
                            value = tvm.tirx.Cast("int8", tvm.tirx.max(tvm.tirx.min(
                                value, tvm.tirx.const(127, "int32")),
                                tvm.tirx.const(-128, "int32")))
                        T.buffer_store(y, value, [i, c])
        return tvm.tirx.build(builder.get().with_attr("global_symbol", "k"), target="llvm")

    small = rng.integers(-128, 128, acc.shape).astype(np.int8)
    small_want = np.clip(reference.multiply_by_quantized_multiplier(
        small.astype(np.int64), multipliers, shifts), -128, 127).astype(np.int8)
    for runtime in (False, True):
        for from_int8, data, expected in ((False, acc, want), (True, small, small_want)):
            out = tvm.runtime.tensor(np.zeros_like(data))
            build(runtime, from_int8)["k"](tvm.runtime.tensor(data),
                                           tvm.runtime.tensor(shifts.astype(np.int32)),
                                           tvm.runtime.tensor(multipliers.astype(np.int32)),
                                           out)
            np.testing.assert_array_equal(out.numpy(), expected)


# ------------------------------------------------------------------------ single operators
FAST_CASES = {"conv3x3_same_relu6", "conv_grouped", "depthwise_mult2", "fc_per_tensor",
              "add_broadcast", "mul_broadcast", "mean_hw_drop", "avg_pool_same_s2",
              "max_pool_same", "pad_then_depthwise", "transpose", "concat_width",
              "resize_half_pixel", "hard_swish", "logistic", "softmax_fine", "relu_requant",
              "quantize_float_saturating", "dequantize", "strided_slice_crop",
              "strided_slice_reverse", "strided_slice_shrink"}


ALL_SINGLE_OP_MODELS = {**SINGLE_OP_MODELS, **STRIDED_SLICE_MODELS}


@pytest.mark.parametrize("case", [c if c in FAST_CASES else pytest.param(c, marks=pytest.mark.slow)
                                  for c in sorted(ALL_SINGLE_OP_MODELS)])
def test_single_operator_is_bit_exact(case):
    model = parse_tflite(ALL_SINGLE_OP_MODELS[case](), f"{case}.tflite")
    ex, _ = compile_serenity(from_tflite(model))
    rng = np.random.default_rng(7)
    for _ in range(3):
        inputs = model_inputs(model, rng)
        assert_outputs_equal(run_vm(ex, inputs), reference.run(model, inputs))


def test_unsupported_operator_is_named():
    b = ModelBuilder()
    x = b.add_tensor((1, 4), scale=0.1, zero_point=0)
    y = b.add_tensor((1, 4), scale=1 / 128, zero_point=0)
    b.add_operator("TANH", [x], [y])
    with pytest.raises(UnsupportedOperatorError, match=r"operator 0 \(TANH\)") as info:
        from_tflite(parse_tflite(b.build([x], [y]), "tanh.tflite"))
    assert info.value.op == "TANH"


def test_strided_slice_is_gathers_and_rejections_are_the_references():
    """STRIDED_SLICE is a call of its described kernel, refuses what the reference refuses,
    with its message, and is a plain ``strided_slice`` node of the graph IR."""
    import tflite_cases

    model = parse_tflite(STRIDED_SLICE_MODELS["strided_slice_crop"]())
    mod = from_tflite(model)
    (binding,) = mod["main"].body.blocks[0].bindings
    assert is_op(binding.value, "relax.call_tir")
    kernel = mod[binding.value.args[0]]
    assert OperatorDescription.of(kernel).op == "STRIDED_SLICE"
    bad = parse_tflite(tflite_cases.strided_slice((1, 5, 5, 3), [0, 1, 1, 0], [1, 5, 5, 3],
                                                  [1, 1, 1, 1], (1, 4, 4, 3), ellipsis_mask=1),
                       "ellipsis.tflite")
    with pytest.raises(reference.ReferenceError,
                       match=r"ellipsis\.tflite: operator 0 \(STRIDED_SLICE\): ellipsis_mask=1"):
        from_tflite(bad)
    assert "STRIDED_SLICE" in SUPPORTED_OPS and GRAPH_OPS["STRIDED_SLICE"] == "strided_slice"
    node = tflite_to_graph(model)["strided_slice_0"]      # the graph IR node (zoo's op name)
    assert (node.op, node.inputs, node.bytes, node.inplace) == ("strided_slice", ("input_0",),
                                                               288, None)
    assert {k: node.attrs[k] for k in ("begin", "end", "strides", "begin_mask", "end_mask",
                                       "shrink_axis_mask", "out_shape")} == {
        "begin": [0, 1, 1, 0], "end": [0, 0, 0, 0], "strides": [1, 1, 1, 1], "begin_mask": 9,
        "end_mask": 15, "shrink_axis_mask": 0, "out_shape": [1, 6, 6, 8]}


# -------------------------------------------------------------------- structure and memory
def test_one_kernel_per_operator_named_after_its_tensor():
    model = load_tflite(model_path("tinyengine/vww.tflite"))
    mod = from_tflite(model)
    relax.analysis.well_formed(mod)
    names = tensor_var_names(model)
    main = mod["main"]
    assert [p.name for p in main.params] == [names[i] for i in model.inputs]
    (block,) = main.body.blocks
    assert len(block.bindings) == len(model.operators)
    for b, op in zip(block.bindings, model.operators):
        out = model.tensors[op.outputs[0]]
        assert b.var.name == names[op.outputs[0]]
        assert [int(d) for d in b.var.ty.shape.values] == list(out.shape)
        assert b.var.ty.dtype == out.dtype
        # a call of a kernel, nothing else in main (RESHAPE: a Relax function, a view)
        gvar = b.value.op if op.op == "RESHAPE" else b.value.args[0]
        assert is_op(b.value, "relax.call_tir") != (op.op == "RESHAPE")
        assert OperatorDescription.of(mod[gvar]).op == op.op
        assert gvar.name_hint == f"{GRAPH_OPS.get(op.op, op.op.lower())}_{op.index}"
    # readable names: the TFLite name up to ';', sanitized, unique
    assert names[model.inputs[0]] == "input_0_f_1"
    assert names[model.outputs[0]] == "t_1422"
    assert len(set(names.values())) == len(names)
    v3 = tensor_var_names(load_tflite(model_path("keras/mobilenet_v3_small_075_96.tflite")))
    assert "conv_bn_1_batchnorm_add_1" in v3.values()      # "MobileNetV3Small_1/" dropped


@pytest.mark.parametrize("rel,fold", [("tinyengine/vww.tflite", False),
                                      ("mcunet/mcunet-320kb-1mb_imagenet.tflite", True)])
def test_fused_tensors_are_the_tflite_tensors(rel, fold):
    """After FuseOps/FuseTIR each operator is one call_tir whose result is its int8 TFLite
    tensor: the Relax block read as a graph is the TFLite graph IR (same nodes, bytes, order,
    peak), so no int32 accumulator or int16 shifted input inflates the planning figures."""
    model = load_tflite(model_path(rel))
    mod = from_tflite(model)
    if fold:
        mod = sp.FoldPad()(mod)
    fused = fuse(mod)
    bindings = fused["main"].body.blocks[0].bindings
    assert all(is_op(b.value, "relax.call_tir") for b in bindings)
    graph = block_graph(fused["main"], 0).graph
    tflite = tflite_to_graph(model, fold_pad=fold)
    assert [graph[n].bytes for n in graph.op_names] == [tflite[n].bytes for n in tflite.op_names]
    assert [len(graph[n].inputs) for n in graph.op_names] == \
        [len(tflite[n].inputs) for n in tflite.op_names]
    assert simulate(graph, graph.op_names, inplace=False).peak_bytes == \
        simulate(tflite, tflite.op_names, inplace=False).peak_bytes
    assert {graph[n].dtype for n in graph.op_names} <= {"int8", "float32"}


# ------------------------------------------------------------------------------ real models
#: Models also run through the TFLite Micro interpreter itself (float edges, PAD, TRANSPOSE,
#: AVERAGE_POOL_2D, 54 PADs folded).
TFLM_CHECKED = {"tinyengine/vww.tflite", "mcunet/mcunet-320kb-1mb_imagenet.tflite"}


@pytest.mark.slow
@pytest.mark.parametrize("rel", MODEL_FILES)
def test_real_model_is_bit_exact_and_planned(rel):
    path = model_path(rel)
    model = load_tflite(path)
    ex, capture = compile_serenity(from_tflite(model))
    # one random input: the VM run of an unscheduled whole model is most of this test's time
    # (7 s per mobilenet_v2 input); the tvm benchmark checks three, every kernel's own test many
    rng = np.random.default_rng(11)
    input_sets = [model_inputs(model, rng)]
    outputs = [run_vm(ex, inputs) for inputs in input_sets]
    for inputs, got in zip(input_sets, outputs):
        assert_outputs_equal(got, reference.run(model, inputs))
    if rel in TFLM_CHECKED and available(TFLM):
        for got, tensors in zip(outputs, run_interpreter(TFLM, path, input_sets)):
            assert_outputs_equal(got, [tensors[i] for i in model.outputs])

    (arena,) = capture.arena["functions"]
    schedule = capture.schedule["functions"]["main"]
    with TARGET:
        stored = tvm.transform.Sequential(cpu.dataflow_lower_passes(TARGET))(capture.fused)
    tvm_stored = sp.static_plan_bytes(stored)
    assert arena["liveness_peak_bytes"] <= arena["lower_bound_bytes"] <= arena["arena_bytes"]
    assert arena["arena_bytes"] <= arena["static_plan_bytes"]
    assert schedule["lower_bound"] <= schedule["peak_after"] <= schedule["peak_before"]
    print(f"\n{rel}: arena {arena['arena_bytes']} B (liveness {arena['liveness_peak_bytes']} B, "
          f"{arena['tensors']} tensors) | StaticPlanBlockMemory {arena['static_plan_bytes']} B "
          f"same order, {tvm_stored} B stored order | schedule peak {schedule['peak_before']} -> "
          f"{schedule['peak_after']} B, lower bound {schedule['lower_bound']} B")
