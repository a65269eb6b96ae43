"""`compile --rewrite`: identity graph rewrites (channel-wise partial sums, kernel-wise depthwise
slices) emitted as C by codegen.graph_c, bit-exact with the reference interpreter on the host
(and once on rp2040js), with the arena the rewritten graph's plan gives, below the unrewritten
one's.

The cells are tests/test_rewrite_pass.py's ``concat_cell``: x -> n pointwise convs (branches)
-> CONCATENATION -> RELU6 -> CONV_2D 3x3 or DEPTHWISE_CONV_2D 3x3 (fused RELU6).
"""

import json
import re
import shutil
import subprocess

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from test_rewrite_pass import CELL_STRATEGIES, concat_cell
from tflite_cases import SINGLE_OP_MODELS, add_conv
from toolchain import needs_arm, needs_cc, needs_rp2040js
from tvm_serenity.alloc import plan_arena
from tvm_serenity.cli import main
from tvm_serenity.codegen.graph_c import emit_model
from tvm_serenity.codegen.spec import CodegenError
from tvm_serenity.errors import SerenityError
from tvm_serenity.deploy import compile_tflite, load_plan, run
from tvm_serenity.frontend.builder import ModelBuilder
from tvm_serenity.graph import Graph
from tvm_serenity.memory import simulate
from tvm_serenity.rewrite import CHANNEL, KERNEL

# name -> (concat_cell options, pattern, scheduler peak before, after): the optimal peaks with
# in-place execution, which the optimal arena planner meets on both graphs. conv_3x16: before,
# the three 8x8x16 branches (3 x 1,024 B) and their concat (3,072 B) live together (6,144 B);
# after, the int32 accumulator of the 8x8x8 output (2,048 B), one branch (1,024 B) and the
# 8x8x4 input (256 B) that the later branches still need: 3,328 B.
CELLS = {
    "conv_3x16": (dict(consumer="CONV_2D"), CHANNEL, 6144, 3328),
    "conv_uneven_4": (dict(consumer="CONV_2D", branches=4, branch_channels=(8, 16, 24)),
                      CHANNEL, 7168, 3840),
    # stride 2, VALID, 3- and 6-channel branches: accumulators at odd arena offsets
    "conv_strided_odd": (dict(consumer="CONV_2D", hw=7, branches=4, branch_channels=(3, 6),
                              stride=(2, 2), padding="VALID", out_channels=3),
                         CHANNEL, 1764, 598),
    "dw_3x16": (dict(consumer="DEPTHWISE_CONV_2D"), KERNEL, 6144, 4352),
    "dw_uneven_strided": (dict(consumer="DEPTHWISE_CONV_2D", branches=4,
                               branch_channels=(8, 16, 24), stride=(2, 2)),
                          KERNEL, 7168, 2688),
    "dw_odd": (dict(consumer="DEPTHWISE_CONV_2D", hw=5, branch_channels=(3, 5, 7)),
               KERNEL, 750, 600),
}
# C functions every rewritten cell defines and calls (one slice function per output slice)
PARTIAL_KERNELS = {CHANNEL: ("serenity_conv2d_partial(", "serenity_conv2d_accumulate(",
                             "serenity_requantize("),
                   KERNEL: ()}


def _seeds_bit_exact(out_dir, nbytes, seeds=(1, 2, 3)):
    """``run`` raises unless the output equals the reference interpreter's."""
    for seed in seeds:
        x = np.random.default_rng(seed).integers(-128, 128, nbytes, dtype=np.int8)
        run(out_dir, input=x)


@needs_cc
@pytest.mark.parametrize("cell", list(CELLS))
def test_rewritten_cell_is_bit_exact_on_host_with_a_smaller_arena(tmp_path, cell):
    options, pattern, before, after = CELLS[cell]
    path = concat_cell(tmp_path, **options)
    plain = compile_tflite(path, "host", tmp_path / "plain", build=False)
    compiled = compile_tflite(path, "host", tmp_path / "rewrite", rewrite=True)

    # the decision: one rewrite of concat -> RELU6 -> consumer, the peak it was kept for
    r = compiled.rewrite
    consumer = compiled.source_graph.outputs[0]
    assert [(p, nodes[0].startswith("concatenation"), nodes[-1]) for p, nodes in r.applied] \
        == [(pattern, True, consumer)]
    assert (r.peak_before, r.peak_after) == (before, after)
    assert r.peak_before == plain.schedule.peak_bytes == plain.plan.liveness_peak_bytes

    # the arena: exactly the rewritten graph's plan for the scheduler's order, which meets the
    # liveness peak; below the unrewritten model's arena
    graph = compiled.graph
    assert compiled.plan.order == tuple(r.schedule.order)
    assert simulate(graph, compiled.plan.order).peak_bytes == after
    assert compiled.arena_bytes == plan_arena(graph, r.schedule.order).arena_bytes == after
    assert plain.arena_bytes == before
    assert compiled.arena_bytes < plain.arena_bytes

    # the int32 accumulator (channel-wise) is 4 bytes per output element
    y = graph[consumer]
    accumulators = [n for n in graph.nodes.values() if n.dtype == "int32"]
    if pattern == CHANNEL:
        assert accumulators and all(n.bytes == 4 * y.bytes for n in accumulators)
        assert y.op == "requantize" and y.inplace == "alias"
    else:
        assert not accumulators and y.op == "depthwise_conv2d_slice_into"

    # the C: the partial kernels, no concatenation, every rewrite node emitted as a step
    c = compiled.emitted.model_c
    assert all(c.count(k) >= 2 for k in PARTIAL_KERNELS[pattern])   # defined and called
    if pattern == KERNEL:           # one depthwise kernel per slice, into its channels
        firsts = sorted(n.attrs["rewrite"]["out_channels"][0] for n in graph.nodes.values()
                        if n.attrs.get("rewrite", {}).get("pattern") == KERNEL)
        for first in firsts:
            assert len(re.findall(rf"depthwise_conv2d_\w+_into{first}of\d+_dual\(", c)) >= 2
    assert "CONCATENATION" not in c and "concatenation_" not in c
    assert "CONCATENATION" in plain.emitted.model_c
    steps = {s.node: s for s in compiled.emitted.steps}
    for node in graph.nodes.values():
        if "rewrite" in node.attrs:
            assert steps[node.name].op.endswith("/" + node.attrs["rewrite"].get("role",
                                                                                "pushdown"))
    _seeds_bit_exact(compiled.out_dir, compiled.emitted.input_bytes)
    assert run(compiled.out_dir).arena_bytes == compiled.arena_bytes


@needs_cc
def test_kernel_wise_slices_with_depth_multiplier_2(tmp_path):
    """Output channel c*2 + m reads input channel c: each slice takes its branch's 2*C_i
    output channels (the unrewritten C path runs multiplier 2 as the dense convolution)."""
    rng = np.random.default_rng(0)
    b = ModelBuilder()
    shape, q = (1, 8, 8, 4), (0.06, -5)
    x = b.add_tensor(shape, scale=0.05, zero_point=-3)
    branches = [add_conv(b, rng, x, shape, "CONV_2D", c, (1, 1), (1, 1), "VALID", "RELU", q)[0]
                for c in (6, 10)]
    cat = b.add_tensor((1, 8, 8, 16), scale=q[0], zero_point=q[1])
    b.add_operator("CONCATENATION", branches, [cat],
                   {"axis": 3, "fused_activation_function": "NONE"})
    wshape = (1, 3, 3, 32)
    w = b.add_tensor(wshape, scale=rng.uniform(0.002, 0.02, 32), axis=3,
                     data=rng.integers(-127, 128, wshape))
    bias = b.add_tensor((32,), "int32", data=rng.integers(-3000, 3000, 32))
    y = b.add_tensor((1, 4, 4, 32), scale=0.1, zero_point=2)
    b.add_operator("DEPTHWISE_CONV_2D", [cat, w, bias], [y],
                   {"padding": "SAME", "stride_h": 2, "stride_w": 2, "depth_multiplier": 2,
                    "fused_activation_function": "RELU6"})
    path = tmp_path / "depth_multiplier_2.tflite"
    path.write_bytes(b.build([x], [y]))
    plain = compile_tflite(path, "host", tmp_path / "plain")
    _seeds_bit_exact(plain.out_dir, plain.emitted.input_bytes)
    compiled = compile_tflite(path, "host", tmp_path / "out", rewrite=True)
    r = compiled.rewrite
    assert [p for p, _ in r.applied] == [KERNEL] and (r.peak_before, r.peak_after) == (2048, 1152)
    slices = [n.attrs["rewrite"]["out_channels"] for n in compiled.graph.nodes.values()
              if n.op.startswith("depthwise_conv2d_slice")]
    assert slices == [[0, 12], [12, 32]]
    _seeds_bit_exact(compiled.out_dir, compiled.emitted.input_bytes)


@needs_cc
@pytest.mark.parametrize("case", ["relu_requant", "relu6_same_quant", "relu6_requant"])
def test_pushed_down_operators_standalone_bit_exact_on_host(tmp_path, case):
    """RELU (requantizing) and RELU6 (TFLM: a clamp) alone: the kernels a pushed-down copy
    runs, in place over the graph input when the plan allows it."""
    path = tmp_path / f"{case}.tflite"
    path.write_bytes(SINGLE_OP_MODELS[case]())
    compiled = compile_tflite(path, "host", tmp_path / "out")
    assert [s.op for s in compiled.emitted.steps] == [case.split("_")[0].upper()]
    _seeds_bit_exact(compiled.out_dir, compiled.emitted.input_bytes, seeds=(1, 2))


@needs_cc
def test_generated_c_is_warning_free_with_unaligned_accumulators(tmp_path):
    options = CELLS["conv_strided_odd"][0]
    compiled = compile_tflite(concat_cell(tmp_path, **options), "host", tmp_path / "out",
                              rewrite=True, build=False)
    offsets = [compiled.plan.offsets[n.name] for n in compiled.graph.nodes.values()
               if n.dtype == "int32"]
    assert any(o % 4 for o in offsets)         # the case the aligned(1) typedef is for
    assert "typedef int32_t serenity_acc32_t __attribute__((aligned(1), may_alias));" \
        in compiled.emitted.model_c
    cc = shutil.which("gcc") or shutil.which("cc")
    proc = subprocess.run([cc, "-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-c",
                           str(compiled.model_dir / "model.c"), "-I", str(compiled.model_dir),
                           "-o", str(tmp_path / "model.o")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@needs_cc
def test_dual_buffer_build_copies_the_running_sum(tmp_path):
    """Without in-place execution the plan keeps every partial result apart: each accumulate
    step first copies the running sum to its own buffer (still bit-exact, still smaller)."""
    path = concat_cell(tmp_path, consumer="CONV_2D")
    plain = compile_tflite(path, "host", tmp_path / "plain", rip=False, build=False)
    compiled = compile_tflite(path, "host", tmp_path / "dual", rip=False, rewrite=True)
    assert compiled.rewrite.applied and not compiled.plan.inplace
    accumulate = [s for s in compiled.emitted.steps if s.op == "CONV_2D/accumulate"]
    assert len(accumulate) == 2 and {s.layout for s in accumulate} == {"dual"}
    assert compiled.emitted.model_c.count("memcpy(ARENA(") >= 2      # one per accumulation
    assert compiled.arena_bytes == compiled.rewrite.peak_after < plain.arena_bytes
    _seeds_bit_exact(compiled.out_dir, compiled.emitted.input_bytes, seeds=(4, 5))


def test_nothing_applied_leaves_the_graph_and_reports_it(tmp_path):
    # without in-place execution the depthwise slices cannot share the output: no gain
    path = concat_cell(tmp_path, consumer="DEPTHWISE_CONV_2D")
    plain = compile_tflite(path, "host", tmp_path / "plain", rip=False, build=False)
    compiled = compile_tflite(path, "host", tmp_path / "out", rip=False, rewrite=True,
                              build=False)
    assert compiled.rewrite.applied == [] and compiled.rewrite.trials
    assert compiled.graph.to_json() == compiled.source_graph.to_json()
    assert compiled.arena_bytes == plain.arena_bytes
    assert compiled.emitted.model_c.count("\n") == plain.emitted.model_c.count("\n")
    assert "identity rewriting: nothing applied" in compiled.summary()
    plan = load_plan(tmp_path / "out")
    assert plan["rewrite"]["applied"] == [] and load_plan(tmp_path / "plain")["rewrite"] is None


def test_concat_that_requantizes_is_refused_on_both_paths(tmp_path):
    """A concat whose operands are quantized differently from its output is refused by
    TFLite Micro (int8 CONCATENATION copies bytes), so the model is refused when read, with or
    without --rewrite, naming the operator and the tensor."""
    rng = np.random.default_rng(3)
    b = ModelBuilder()
    shape = (1, 6, 6, 4)
    x = b.add_tensor(shape, scale=0.05, zero_point=-3)
    left = add_conv(b, rng, x, shape, "CONV_2D", 8, (1, 1), (1, 1), "VALID", "RELU",
                    (0.06, -5))[0]
    right = add_conv(b, rng, x, shape, "CONV_2D", 8, (1, 1), (1, 1), "VALID", "RELU",
                     (0.07, -5))[0]
    cat = b.add_tensor((1, 6, 6, 16), scale=0.06, zero_point=-5)
    b.add_operator("CONCATENATION", [left, right], [cat],
                   {"axis": 3, "fused_activation_function": "NONE"})
    y = add_conv(b, rng, cat, (1, 6, 6, 16), "CONV_2D", 8, (3, 3), (1, 1), "SAME", "RELU6",
                 (0.1, 2))[0]
    path = tmp_path / "requantizing_concat.tflite"
    path.write_bytes(b.build([x], [y]))
    for rewrite in (False, True):
        with pytest.raises(SerenityError, match=r"operator 2 \(CONCATENATION\): input '\w+' "
                                                r"is quantized unlike output"):
            compile_tflite(path, "host", tmp_path / f"out{rewrite}", rewrite=rewrite,
                           build=False)


def test_emitter_needs_the_graph_before_rewriting(tmp_path):
    path = concat_cell(tmp_path, consumer="CONV_2D")
    compiled = compile_tflite(path, "host", tmp_path / "out", rewrite=True, build=False)
    with pytest.raises(CodegenError, match="pass the graph before rewriting"):
        emit_model(compiled.core, compiled.graph, compiled.plan)


@needs_cc
def test_cli_compile_rewrite_reports_and_records_the_decision(tmp_path, capsys):
    path = concat_cell(tmp_path, consumer="CONV_2D")
    out = tmp_path / "build"
    assert main(["compile", str(path), "--target", "host", "-o", str(out), "--rewrite",
                 "--time-limit", "20"]) == 0
    printed = capsys.readouterr().out
    assert "identity rewriting: 1 applied (channel-wise partitioning conv2d_5), scheduler peak " \
           "6,144 -> 3,328 B" in printed
    assert "arena 3,328 B" in printed and (out / "report" / "report.html").is_file()

    plan = json.loads((out / "plan.json").read_text())
    rewrite = plan["rewrite"]
    assert rewrite["applied"] == [{"pattern": CHANNEL,
                                   "nodes": ["concatenation_3", "relu6_4", "conv2d_5"]}]
    assert (rewrite["peak_before_bytes"], rewrite["peak_after_bytes"]) == (6144, 3328)
    assert rewrite["optimal"] and rewrite["method"] == "serenity"
    assert [t["kept"] for t in rewrite["trials"]] == [True]
    assert plan["arena_bytes"] == plan["liveness_peak_bytes"] == 3328
    assert {layer["op"] for layer in plan["layers"]} >= {
        "RELU6/pushdown", "CONV_2D/partial", "CONV_2D/accumulate", "CONV_2D/requantize"}

    graph = Graph.load(out / "graph.json")            # the graph the order refers to
    assert simulate(graph, plan["order"], plan["rip"]).peak_bytes == 3328
    roles = [graph[n].attrs["rewrite"].get("role") for n in plan["order"]
             if "rewrite" in graph[n].attrs]
    assert roles.count(None) == 3                     # three pushed-down RELU6 copies
    assert [r for r in roles if r] == ["partial", "accumulate", "accumulate", "requantize"]
    assert "concatenation_3" not in graph.nodes and "relu6_4" not in graph.nodes

    # the report's baseline is TFLite's order of the model as it was, before rewriting
    source = Graph.load(out / "graph_source.json")
    assert "concatenation_3" in source.nodes
    baseline = simulate(source, source.op_names, inplace=False).peak_bytes
    page = (out / "report" / "report.html").read_text()
    assert f"TFLite order, dual buffer: liveness peak</th><td>{baseline:,} B" in page

    assert main(["run", str(out), "--host"]) == 0
    assert "output identical to the reference interpreter" in capsys.readouterr().out

    assert main(["compile", str(path), "--target", "host", "-o", str(tmp_path / "plain"),
                 "--no-rewrite", "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert plain["rewrite"] is None and plain["arena_bytes"] == 6144


@pytest.mark.slow
@needs_arm
@needs_rp2040js
@pytest.mark.parametrize("cell", ["conv_3x16", "dw_3x16", "conv_strided_odd"])
def test_rewritten_cell_runs_on_rp2040js(tmp_path, cell):
    """Both builds of the cell on the emulated Pico, bit-exact; prints the cycles
    (``pytest tests/test_rewrite_c.py -m slow -k rp2040js -s``)."""
    options, _, before, after = CELLS[cell]
    path = concat_cell(tmp_path, **options)
    runs = {}
    for rewrite in (False, True):
        compiled = compile_tflite(path, "pico", tmp_path / str(rewrite), rewrite=rewrite)
        assert compiled.fit.fits
        runs[rewrite] = run(compiled.out_dir)        # rp2040js; raises unless bit-exact
        assert runs[rewrite].backend == "rp2040js" and runs[rewrite].cycles > 0
    assert (runs[False].arena_bytes, runs[True].arena_bytes) == (before, after)
    print(f"\n{cell}: arena {before:,} -> {after:,} B, rp2040js cycles "
          f"{runs[False].cycles:,} -> {runs[True].cycles:,} "
          f"({runs[True].cycles / runs[False].cycles:.3f}x)")


@pytest.mark.slow
@needs_cc
@settings(max_examples=10, deadline=None, derandomize=True)
@given(unary=st.sampled_from([(), ("RELU",), ("RELU6",), ("RELU", "RELU6"), ("HARD_SWISH",)]),
       rip=st.booleans(), **CELL_STRATEGIES)
def test_random_cells_compile_bit_exact_and_never_plan_more(
        tmp_path_factory, consumer, branch_channels, hw, kernel, stride, padding, unary,
        out_channels, rip, seed):
    tmp = tmp_path_factory.mktemp("cell")
    path = concat_cell(tmp, consumer, len(branch_channels), hw, 3, tuple(branch_channels),
                       kernel, stride, padding, unary, out_channels, seed=seed)
    plain = compile_tflite(path, "host", tmp / "plain", rip=rip, build=False)
    compiled = compile_tflite(path, "host", tmp / "rewrite", rip=rip, rewrite=True)
    r = compiled.rewrite
    assert r.peak_after <= r.peak_before == plain.schedule.peak_bytes
    assert bool(r.applied) == (r.peak_after < r.peak_before)
    assert compiled.plan.liveness_peak_bytes <= plain.plan.liveness_peak_bytes
    _seeds_bit_exact(tmp / "rewrite", compiled.emitted.input_bytes, seeds=(seed, seed + 1))


@needs_cc
def test_hard_swish_is_pushed_into_the_branches_in_c(tmp_path):
    path = concat_cell(tmp_path, consumer="CONV_2D", unary=("HARD_SWISH",))
    compiled = compile_tflite(path, "host", tmp_path / "out", rewrite=True)
    assert [p for p, _ in compiled.rewrite.applied] == [CHANNEL]
    assert [s.op for s in compiled.emitted.steps].count("HARD_SWISH/pushdown") == 3
    _seeds_bit_exact(compiled.out_dir, compiled.emitted.input_bytes)
