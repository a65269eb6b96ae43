"""IdentityGraphRewrite: concat -> conv / depthwise partitioned in Relax, only where the
optimal peak drops; structure, peaks against an exhaustive search, and bit-exact execution on
llvm against the reference interpreter (bit-exact with TFLite Micro) and TVM's own build of
the unrewritten module."""

import re
import warnings

import numpy as np
import pytest
import tvm
from hypothesis import given, settings
from hypothesis import strategies as st
from tvm import relax

import tvm_serenity.passes as sp
from graphgen import all_topological_orders
from tflite_cases import add_conv
from tvm_serenity.frontend import reference as ref
from tvm_serenity.frontend import relax_import as ri
from tvm_serenity.frontend.builder import ModelBuilder
from tvm_serenity.frontend.interpreters import model_inputs
from tvm_serenity.frontend.tflite_model import load_tflite
from tvm_serenity.memory import simulate
from tvm_serenity.passes.convert import block_graph, is_op
from tvm_serenity.passes.rewrite import REPORT_ATTR
from tvm_serenity.rewrite import CHANNEL, KERNEL

TARGET = tvm.target.Target("llvm")


def concat_cell(tmp_path, consumer="CONV_2D", branches=3, hw=8, cin=4, branch_channels=(16,),
                kernel=(3, 3), stride=(1, 1), padding="SAME", unary=("RELU6",), out_channels=8,
                concat_is_output=False, repeat_first=False, seed=0):
    """x -> ``branches`` pointwise convs -> concat -> ``unary`` chain -> consumer: the shape of a
    SwiftNet / NAS cell output feeding the next layer (``consumer=None``: the concat is the
    output; ``repeat_first``: the concat reads the first branch twice). Returns the path."""
    rng = np.random.default_rng(seed)
    b = ModelBuilder()
    shape = (1, hw, hw, cin)
    x = b.add_tensor(shape, scale=0.05, zero_point=-3)
    q = (0.06, -5)                      # one quantization for the branches and the concat
    outs, channels = [], []
    for i in range(branches):
        channels.append(branch_channels[i % len(branch_channels)])
        outs.append(add_conv(b, rng, x, shape, "CONV_2D", channels[-1], (1, 1), (1, 1), "VALID",
                          "RELU", q)[0])
    if repeat_first:
        outs.append(outs[0])
        channels.append(channels[0])
    cshape = (1, hw, hw, sum(channels))
    c = cat = b.add_tensor(cshape, scale=q[0], zero_point=q[1])
    b.add_operator("CONCATENATION", outs, [c], {"axis": 3, "fused_activation_function": "NONE"})
    for op in unary:
        u = b.add_tensor(cshape, scale=q[0], zero_point=q[1])
        b.add_operator(op, [c], [u], {})
        c = u
    if consumer == "AVERAGE_POOL_2D":
        y = b.add_tensor((1, hw, hw, cshape[3]), scale=q[0], zero_point=q[1])
        b.add_operator(consumer, [c], [y], {"padding": "SAME", "stride_h": 1, "stride_w": 1,
                                            "filter_height": 3, "filter_width": 3})
    else:
        y = c if consumer is None else add_conv(b, rng, c, cshape, consumer, out_channels,
                                                kernel, stride, padding, "RELU6", (0.1, 2))[0]
    path = tmp_path / f"cell_{consumer}_{branches}.tflite"
    path.write_bytes(b.build([x], [y, cat] if concat_is_output else [y]))
    return path


def _calls(func, *ops):
    return [b for b in func.body.blocks[0].bindings if is_op(b.value, *ops)]


def _kernel(binding):
    """The name of the kernel a binding calls (``R.call_tir`` / ``R.call_tir_inplace``)."""
    value = binding.value
    return value.args[0].name_hint if is_op(value, "relax.call_tir", "relax.call_tir_inplace") \
        else None


def _kernel_names(func):
    return [_kernel(b) for b in func.body.blocks[0].bindings if _kernel(b) is not None]


def _run(mod, input_sets, pipeline="serenity"):
    """Compile ``mod`` once and run it on each set of inputs: a list of output lists."""
    vm = relax.VirtualMachine(tvm.compile(mod, target=TARGET, relax_pipeline=pipeline),
                              tvm.cpu())
    results = []
    for inputs in input_sets:
        out = vm["main"](*[tvm.runtime.tensor(x) for x in inputs])
        results.append([o.numpy() for o in (out if isinstance(out, (list, tuple, tvm.ir.Array))
                                            else [out])])
    return results


def _inputs(model, seed):
    return model_inputs(model, np.random.default_rng(seed))


def _min_peak(graph):
    return min(simulate(graph, order).peak_bytes for order in all_topological_orders(graph))


# ------------------------------------------------------------------ structure and peaks
@pytest.mark.parametrize("consumer, pattern", [("CONV_2D", CHANNEL),
                                               ("DEPTHWISE_CONV_2D", KERNEL)])
def test_rewrite_structure_and_peaks_match_exhaustive_search(tmp_path, consumer, pattern):
    before = ri.from_tflite(concat_cell(tmp_path, consumer))
    rewrite = sp.IdentityGraphRewrite()
    after = rewrite(before)
    relax.analysis.well_formed(after)
    main_before, main = before["main"], after["main"]

    # the concat and the unary chain on it are gone, y keeps its variable and is the result
    assert not any(n.startswith("concatenation") for n in _kernel_names(main))
    assert main.body.body.same_as(main_before.body.body)
    first = [b for b in _calls(main, "relax.call_tir")
             if re.search(r"_(part|slice)\d+$", _kernel(b))]
    later = _calls(main, "relax.call_tir_inplace")
    assert len(first) == 1 and len(later) == 2       # three branches: one fresh, two in place
    if pattern == KERNEL:         # the last slice writes y itself, in place
        assert later[-1].var.same_as(main.body.body)
    else:                         # y = requantize(accumulator)
        assert _kernel_names(main)[-1].endswith("_requantize")
    # every unary kernel now reads one branch (three pushed copies, one shared function)
    relus = [b for b in main.body.blocks[0].bindings if "relu6" in (_kernel(b) or "")]
    assert len(relus) == 3 and all(tuple(r.var.ty.shape) == (1, 8, 8, 16) for r in relus)

    # the decision: the report's peaks are the exhaustive optimum of each block's graph
    (block,) = rewrite.report.blocks
    assert block.applied == ({"pattern": pattern,
                              "nodes": list(block.applied[0]["nodes"])},)
    assert block.peak_before == _min_peak(block_graph(main_before, 0).graph)
    assert block.peak_after == _min_peak(block_graph(main, 0).graph)
    assert block.peak_after < block.peak_before and block.optimal
    assert sp.read_report(after, REPORT_ATTR)["applied"] == 1


def test_rewrite_is_not_applied_where_the_peak_does_not_drop(tmp_path):
    # the concat is also a model output, so it must exist anyway: partitioning only adds the
    # accumulator
    before = ri.from_tflite(concat_cell(tmp_path, concat_is_output=True))
    rewrite = sp.IdentityGraphRewrite()
    after = rewrite(before)
    (block,) = rewrite.report.blocks
    assert block.candidates == 1 and block.applied == ()
    assert block.peak_after == block.peak_before
    tvm.ir.assert_structural_equal(after["main"], before["main"])


@pytest.mark.parametrize("options", [dict(consumer=None), dict(consumer="AVERAGE_POOL_2D"),
                                     dict(repeat_first=True)],
                         ids=["no_consumer", "pool_consumer", "same_tensor_twice"])
def test_rewrite_leaves_modules_without_candidates_alone(tmp_path, options):
    before = ri.from_tflite(concat_cell(tmp_path, **options))
    rewrite = sp.IdentityGraphRewrite()
    if options.get("repeat_first"):
        with pytest.warns(UserWarning, match=r"main:\w+ \(concat 'concatenation_\d+' reads a "
                                             r"constant or one tensor twice\)"):
            after = rewrite(before)
    else:                 # no warning either: an average pool is no convolution to partition
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            after = rewrite(before)
        assert rewrite.report.not_matched == {}
    tvm.ir.assert_structural_equal(after["main"], before["main"])
    assert rewrite.report.blocks == []


def test_unreadable_convolution_on_a_concat_is_named_and_left_alone():
    """A grouped convolution on a concat: the pass cannot partition it, says so, changes
    nothing."""
    a, b_ = (relax.Var(n, relax.TensorType((1, 4, 4, 2), "int8")) for n in "ab")
    bb = relax.BlockBuilder()
    with bb.function("main", [a, b_]):
        with bb.dataflow():
            c = ri.emit_operator(bb, "CONCATENATION", [(a, 0.1, 0), (b_, 0.1, 0)],
                                 ((1, 4, 4, 4), "int8", 0.1, 0),
                                 {"axis": 3, "fused_activation_function": "NONE"}, name="c")
            y = ri.emit_operator(bb, "CONV_2D", [(c, 0.1, 0),
                                                 (np.ones((4, 1, 1, 2), np.int8), [0.01] * 4)],
                                 ((1, 4, 4, 4), "int8", 0.2, 0),
                                 {"padding": "VALID", "stride_h": 1, "stride_w": 1,
                                  "fused_activation_function": "NONE"}, name="y")
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    before = bb.get()
    rewrite = sp.IdentityGraphRewrite()
    with pytest.warns(UserWarning, match="main:y \\(convolution 'conv2d_y': a grouped "
                                         "convolution \\(2 groups\\)\\)"):
        after = rewrite(before)
    tvm.ir.assert_structural_equal(after["main"], before["main"])
    assert list(rewrite.report.not_matched) == ["main:y"]


def test_rewrite_options():
    mod = tvm.IRModule()
    assert sp.IdentityGraphRewrite(enabled=False)(mod).same_as(mod)
    with pytest.raises(sp.PassError, match="unknown method 'nope'"):
        sp.IdentityGraphRewrite(method="nope")


# ------------------------------------------------------------------ execution, bit-exact
CASES = {
    "conv3x3_relu6": dict(consumer="CONV_2D"),
    "conv1x1_no_unary_uneven": dict(consumer="CONV_2D", kernel=(1, 1), unary=(),
                                    branch_channels=(16, 24, 8)),
    "conv3x3_s2_valid_two_unary": dict(consumer="CONV_2D", stride=(2, 2), padding="VALID",
                                       unary=("RELU", "RELU6"), hw=9),
    "conv_4_branches": dict(consumer="CONV_2D", branches=4, kernel=(3, 1)),
    "depthwise3x3": dict(consumer="DEPTHWISE_CONV_2D"),
    "depthwise_s2_uneven": dict(consumer="DEPTHWISE_CONV_2D", stride=(2, 2), hw=9,
                                branch_channels=(16, 8, 24), unary=("HARD_SWISH",)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_rewritten_module_runs_bit_exact(tmp_path, case):
    path = concat_cell(tmp_path, **CASES[case])
    model = load_tflite(path)
    before = ri.from_tflite(model)
    after = sp.IdentityGraphRewrite()(before)
    assert sp.read_report(after, REPORT_ATTR)["applied"] == 1, case
    input_sets = [_inputs(model, seed) for seed in range(3)]
    got = _run(after, input_sets, pipeline="default")
    for inputs, out in zip(input_sets, got):
        assert np.array_equal(out[0], ref.run(model, inputs)[0]), case
    if case == "conv3x3_relu6":       # and TVM's own pipeline on the unrewritten module
        assert all(np.array_equal(a[0], b[0])
                   for a, b in zip(got, _run(before, input_sets, pipeline="default")))


def test_serenity_pipeline_rewrites_and_plans_less(tmp_path):
    path = concat_cell(tmp_path, branches=4)
    model = load_tflite(path)
    mod = ri.from_tflite(model)
    figures = {}
    for rewrite in (False, True):
        with TARGET:
            lowered = sp.serenity_pipeline(rewrite=rewrite)(mod)
        report = sp.pipeline_report(lowered)
        figures[rewrite] = report
    on, off = figures[True], figures[False]
    assert off["rewrite"] is None and on["rewrite"]["applied"] == 1
    # the schedule of the legalized module sees exactly the peak the rewrite decided on
    (block,) = on["rewrite"]["blocks"]
    assert on["schedule"]["functions"]["main"]["peak_after"] == block["peak_after"]
    assert off["schedule"]["functions"]["main"]["peak_after"] == block["peak_before"]
    arena_on, arena_off = (f["arena"]["functions"][0]["arena_bytes"] for f in (on, off))
    assert arena_on < arena_off
    # and the registered pipeline (rewrite on by default) runs it bit-exact
    inputs = _inputs(model, 7)
    assert np.array_equal(_run(mod, [inputs])[0][0], ref.run(model, inputs)[0])


def test_rewrite_with_rip_lowering_in_one_pipeline(tmp_path):
    """Rewriting and RiPLowering in one pipeline: the partials and the requantize are no RiP
    kernels, so RiPLowering leaves them alone; still bit-exact."""
    path = concat_cell(tmp_path, branches=3)
    model = load_tflite(path)
    mod = ri.from_tflite(model)
    with TARGET:
        lowered = sp.serenity_pipeline(rip=True)(mod)
    assert sp.pipeline_report(lowered)["rewrite"]["applied"] == 1
    inputs = _inputs(model, 5)
    assert np.array_equal(_run(lowered, [inputs], pipeline="zero")[0][0],
                          ref.run(model, inputs)[0])


def test_rewrite_inside_a_sequential_with_foldpad(tmp_path):
    path = concat_cell(tmp_path, consumer="DEPTHWISE_CONV_2D")
    model = load_tflite(path)
    seq = tvm.transform.Sequential([sp.FoldPad(), sp.IdentityGraphRewrite(time_limit=5.0)])
    after = seq(ri.from_tflite(model))
    assert sp.read_report(after, REPORT_ATTR)["time_limit"] == 5.0
    inputs = _inputs(model, 3)
    assert np.array_equal(_run(after, [inputs], pipeline="default")[0][0],
                          ref.run(model, inputs)[0])


# ------------------------------------------------------------------ the TIR kernels alone
def _build(prim):
    return tvm.tirx.build(prim.with_attr("global_symbol", "k"), target="llvm")["k"]


@pytest.mark.parametrize("stride, dilation, padding", [((1, 1), (1, 1), (1, 1, 1, 1)),
                                                       ((2, 1), (1, 2), (0, 1, 2, 0))])
def test_partial_conv_kernels_sum_to_the_reference_accumulator(stride, dilation, padding):
    """Partials over a channel split (assign, then accumulate in place) == the int32
    accumulator of the whole convolution (numpy, over the zero-padded input)."""
    from tvm_serenity.codegen.partial import conv2d_partial_prim_func
    rng = np.random.default_rng(5)
    x = rng.integers(-128, 128, (1, 7, 6, 10)).astype(np.int8)
    w = rng.integers(-127, 128, (3, 2, 10, 5)).astype(np.int8)          # HWIO
    xs = np.pad(x.astype(np.int64) + 7, ((0, 0), padding[:2], padding[2:], (0, 0)))
    out_h = (7 + padding[0] + padding[1] - dilation[0] * 2 - 1) // stride[0] + 1
    out_w = (6 + padding[2] + padding[3] - dilation[1] * 1 - 1) // stride[1] + 1
    want = np.zeros((1, out_h, out_w, 5), np.int64)
    for kh in range(3):
        for kw in range(2):
            win = xs[:, kh * dilation[0]::stride[0], kw * dilation[1]::stride[1]][:, :out_h, :out_w]
            want += np.einsum("nhwc,co->nhwo", win, w[kh, kw].astype(np.int64))
    acc = tvm.runtime.tensor(np.full(want.shape, 99, np.int32))
    for i, (lo, hi) in enumerate([(0, 3), (3, 4), (4, 10)]):
        kernel = _build(conv2d_partial_prim_func(
            "k", (1, 7, 6, hi - lo), (3, 2, hi - lo, 5), want.shape, stride, dilation, padding,
            -7, accumulate=i > 0))
        kernel(tvm.runtime.tensor(np.ascontiguousarray(x[..., lo:hi])),
               tvm.runtime.tensor(np.ascontiguousarray(w[:, :, lo:hi])), acc)
    assert np.array_equal(acc.numpy(), want)


def test_depthwise_slices_fill_the_reference_output_with_depth_multiplier():
    from tvm_serenity.codegen.partial import depthwise_slice_prim_func
    rng = np.random.default_rng(6)
    cin, mult = 6, 2
    x = rng.integers(-128, 128, (1, 6, 5, cin)).astype(np.int8)
    w = rng.integers(-127, 128, (1, 3, 3, cin * mult)).astype(np.int8)
    bias = rng.integers(-3000, 3000, cin * mult).astype(np.int32)
    requant = ref.conv_requant(0.05, rng.uniform(0.002, 0.02, cin * mult), 0.1, 3, "RELU6")
    p = ref.ConvParams((2, 1), (1, 1), (1, 1, 0, 2), 4, requant)
    want = ref.depthwise_conv2d_int8(x, w, bias, p)
    y = tvm.runtime.tensor(np.zeros(want.shape, np.int8))
    for lo, hi in [(2, 6), (0, 2)]:                       # input channels, in any order
        k = slice(lo * mult, hi * mult)
        kernel = _build(depthwise_slice_prim_func(
            "k", (1, 6, 5, hi - lo), (3, 3, 1, (hi - lo) * mult), want.shape, lo * mult, (2, 1),
            (1, 1), (1, 1, 0, 2), 4, 3, requant.act_min, requant.act_max))
        kernel(*(tvm.runtime.tensor(np.ascontiguousarray(a)) for a in (
            x[..., lo:hi], w[0, :, :, k].reshape(3, 3, 1, -1), bias[k],
            np.asarray(requant.multiplier, np.int32)[k], np.asarray(requant.shift, np.int32)[k])),
            y)
    assert np.array_equal(y.numpy(), want)


# ------------------------------------------------------------------ random cells
#: Hypothesis strategies for concat_cell's geometry (the unary chain is each test's own).
CELL_STRATEGIES = dict(
    consumer=st.sampled_from(["CONV_2D", "DEPTHWISE_CONV_2D"]),
    branch_channels=st.lists(st.integers(1, 12), min_size=2, max_size=4),
    hw=st.integers(3, 9), kernel=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    stride=st.tuples(st.integers(1, 2), st.integers(1, 2)),
    padding=st.sampled_from(["SAME", "VALID"]), out_channels=st.integers(1, 6),
    seed=st.integers(0, 1000))


@pytest.mark.slow
@settings(max_examples=12, deadline=None, derandomize=True)
@given(unary=st.sampled_from([(), ("RELU",), ("RELU6",), ("HARD_SWISH", "RELU")]),
       **CELL_STRATEGIES)
def test_random_cells_stay_bit_exact_and_never_raise_the_peak(
        tmp_path_factory, consumer, branch_channels, hw, kernel, stride, padding, unary,
        out_channels, seed):
    """Whatever the pass decides on a random concat cell, the module computes the same bytes
    and its optimal peak does not grow; when it rewrites, the peak strictly drops."""
    tmp = tmp_path_factory.mktemp("cell")
    path = concat_cell(tmp, consumer, len(branch_channels), hw, 3, tuple(branch_channels),
                       kernel, stride, padding, unary, out_channels, seed=seed)
    model = load_tflite(path)
    before = ri.from_tflite(model)
    rewrite = sp.IdentityGraphRewrite()
    after = rewrite(before)
    (block,) = rewrite.report.blocks
    assert block.peak_after <= block.peak_before
    assert bool(block.applied) == (block.peak_after < block.peak_before)
    input_sets = [_inputs(model, s) for s in range(2)]
    for inputs, out in zip(input_sets, _run(after, input_sets, pipeline="default")):
        assert np.array_equal(out[0], ref.run(model, inputs)[0])
