"""The Relax passes: graph conversion, MemoryAwareSchedule, ArenaPlan and the "serenity" pipeline.

Tiny TVMScript modules in TVM's test style; every compiled module is checked against TVM's own
default build, bit-exactly (the examples are integer).
"""

import json

import numpy as np
import pytest
import tvm
import tvm.script
from tvm import relax
from tvm.relax.backend.cpu_generic import pipeline as cpu
from tvm.script import relax as R

import tvm_serenity.passes as sp
from tvm_serenity.memory import simulate
from tvm_serenity.passes.convert import (ConversionError, block_graph, graph_of_bindings,
                                         is_op)
from tvm_serenity.schedule import METHODS

TARGET = tvm.target.Target("llvm")
# The scheduler the pipeline uses by default must exist (no fallback).
assert "serenity" in METHODS


@tvm.script.ir_module
class Cell:
    """An irregular int8 cell: a shared int32 stem feeding two wide branches that meet in a
    concat. The stored order computes both wide tensors (16 KB, 12 KB) before narrowing either."""

    @R.function
    def main(x: R.Tensor((1, 16, 16, 16), "int8"), w0: R.Tensor((8, 16, 1, 1), "int8"),
             wa: R.Tensor((64, 8, 1, 1), "int8"), wb: R.Tensor((48, 8, 1, 1), "int8"),
             wa2: R.Tensor((8, 64, 3, 3), "int8"), wb2: R.Tensor((8, 48, 3, 3), "int8"),
             wy: R.Tensor((8, 16, 1, 1), "int8")):
        with R.dataflow():
            p = R.nn.conv2d(x, w0, out_dtype="int32")
            p1 = R.astype(R.clip(R.right_shift(p, R.const(5, "int32")), -128, 127), "int8")
            p2 = R.astype(R.clip(R.right_shift(p, R.const(6, "int32")), -128, 127), "int8")
            a = R.astype(R.clip(R.right_shift(R.nn.conv2d(p1, wa, out_dtype="int32"),
                                              R.const(6, "int32")), -128, 127), "int8")
            b = R.astype(R.clip(R.right_shift(R.nn.conv2d(p2, wb, out_dtype="int32"),
                                              R.const(6, "int32")), -128, 127), "int8")
            a2 = R.astype(R.clip(R.right_shift(R.nn.conv2d(a, wa2, padding=1, out_dtype="int32"),
                                               R.const(8, "int32")), -128, 127), "int8")
            b2 = R.astype(R.clip(R.right_shift(R.nn.conv2d(b, wb2, padding=1, out_dtype="int32"),
                                               R.const(8, "int32")), -128, 127), "int8")
            e = R.concat((a2, b2), axis=1)
            y = R.nn.conv2d(e, wy, out_dtype="int32")
            R.output(y)
        return y


@tvm.script.ir_module
class Views:
    """Tuples and tuple items: a split whose halves go different ways, a tuple result."""

    @R.function
    def main(x: R.Tensor((1, 4, 8, 8), "int32"), w: R.Tensor((16, 4, 1, 1), "int32")):
        with R.dataflow():
            a = R.nn.conv2d(x, w)
            f = R.split(a, 2, axis=1)
            g = f[0]
            k = R.add(g, g)
            h = (k, f[1])
            R.output(h)
        return h


@tvm.script.ir_module
class Branchy:
    """A dataflow block inside an If branch, in a memory-bad order (both wide concats first)."""

    @R.function
    def main(x: R.Tensor((8, 8), "int32"), flag: R.Tensor((), "bool")):
        if flag:
            with R.dataflow():
                big1 = R.concat((x, x, x, x), axis=0)
                big2 = R.concat((x, x, x, x, x, x), axis=0)
                s1 = R.sum(big1, axis=0, keepdims=True)
                s2 = R.sum(big2, axis=0, keepdims=True)
                r = R.add(s1, s2)
                R.output(r)
            v = r
        else:
            v = R.sum(x, axis=0, keepdims=True)
        return v


@tvm.script.ir_module
class Dynamic:
    @R.function
    def main(x: R.Tensor(("n", 4), "float32")):
        with R.dataflow():
            a = R.add(x, x)
            b = R.multiply(a, a)
            R.output(b)
        return b


def stage(mod, *stages):
    with TARGET:
        return tvm.transform.Sequential([p for s in stages for p in s(TARGET)])(mod)


def callees(func):
    """PrimFunc names called by ``func``'s bindings, in binding order."""
    out = []
    for block in func.body.blocks:
        for b in block.bindings:
            v = b.value
            if isinstance(v, relax.Call):
                gv = v.args[0] if is_op(v, "relax.call_tir") else v.op
                if isinstance(gv, tvm.ir.GlobalVar):
                    out.append(gv.name_hint)
    return out


def random_args(mod, seed=0):
    rng = np.random.default_rng(seed)
    args = []
    for p in mod["main"].params:
        shape = [int(d) for d in p.ty.shape.values]
        args.append(rng.integers(-128, 128, shape).astype(str(p.ty.dtype.dtype)))
    return args


def run(ex, args, instrument=None):
    vm = relax.VirtualMachine(ex, tvm.cpu())
    if instrument is not None:
        vm.set_instrument(instrument)
    out = vm["main"](*[tvm.runtime.tensor(a) for a in args])
    return [out.numpy()] if isinstance(out, tvm.runtime.Tensor) else [o.numpy() for o in out]


@pytest.fixture(scope="module")
def fused():
    return stage(Cell, cpu.library_dispatch_passes, cpu.legalize_passes)


@pytest.fixture(scope="module")
def reference():
    """The cell built by TVM's default pipeline, and its outputs on random inputs."""
    args = random_args(Cell)
    return args, run(tvm.compile(Cell, target="llvm"), args)


# --------------------------------------------------------------------------------- convert
def test_convert_reads_views_and_round_trips():
    func = Views["main"]
    bg = block_graph(func, 0)
    g = bg.graph
    assert g.input_names == ["x", "w"]
    assert g["a"].bytes == 16 * 64 * 4 and g["f"].bytes == 16 * 64 * 4   # split: both halves
    assert g["g"].bytes == 0 and g["g"].op == "tuple_get_item"           # views are free
    assert g["h"].bytes == 0 and g["h"].op == "tuple"
    # whoever uses a view also holds what it refers to
    assert set(g["k"].inputs) == {"g", "f"}
    assert set(g.outputs) == {"h", "f", "k"}
    stored = list(bg.bindings)
    rebuilt = sp.with_blocks(func, [bg.rebuild(func.body.blocks[0], stored)])
    tvm.ir.assert_structural_equal(rebuilt, func)
    relax.analysis.well_formed(rebuilt)


def test_convert_after_call_tir_rewrite():
    lowered = stage(Views, cpu.legalize_passes, cpu.dataflow_lower_passes)["main"]
    bindings = [b for blk in lowered.body.blocks for b in blk.bindings]
    bg = graph_of_bindings(bindings, relax.analysis.free_vars(lowered.body.body))
    g = bg.graph
    allocs = [n for n in g.op_names if g[n].op == "builtin.alloc_tensor"]
    assert [g[n].bytes for n in allocs] == [4096, 2048, 2048, 2048]
    # destination-passing calls produce nothing; aliases, tuples and items are views
    assert all(g[n].bytes == 0 for n in g.op_names if n not in allocs)
    # the result h = (k, f[1]) keeps the add's and the split's second allocation alive
    assert set(g.outputs) == {"h", "alloc2", "alloc3"}
    first_half = next(n for n in allocs if g[n].bytes == 2048)
    assert first_half not in g.outputs


@tvm.script.ir_module
class Reshaped:
    @R.function
    def main(x: R.Tensor((4, 4), "float32")):
        a = R.add(x, x)
        b = R.reshape(a, (16,))
        c = R.add(b, b)
        return c


def test_convert_reads_declared_views():
    """A binding declared a view (an R.reshape the VM runs as a view) holds no bytes and its
    users hold its source; without the declaration it is a tensor of its own."""
    func = Reshaped["main"]
    bindings = list(func.body.blocks[0].bindings)
    result = relax.analysis.free_vars(func.body.body)
    plain = graph_of_bindings(bindings, result)
    assert plain.graph["b"].bytes == 64 and plain.refs["b"] == {"b"}
    viewed = graph_of_bindings(bindings, result, views=[bindings[1].var])
    g = viewed.graph
    assert g["b"].bytes == 0 and viewed.refs["b"] == {"a"} and viewed.refs["a"] == {"a"}
    assert set(g["c"].inputs) == {"b", "a"}
    # running the reshape: only a is live as a view, a and b as a tensor
    assert simulate(g, g.op_names).step_bytes[1] == 64
    assert simulate(plain.graph, plain.graph.op_names).step_bytes[1] == 2 * 64


def test_convert_rejects_symbolic_shapes_and_schedule_skips_them():
    with pytest.raises(ConversionError, match="symbolic"):
        block_graph(Dynamic["main"], 0)
    pass_ = sp.MemoryAwareSchedule()
    out = pass_(Dynamic)
    tvm.ir.assert_structural_equal(out["main"], Dynamic["main"])
    (decision,) = pass_.report.blocks
    assert decision.skipped and "symbolic" in decision.skipped and not decision.changed
    rewrite = sp.IdentityGraphRewrite()
    out = rewrite(Dynamic)
    tvm.ir.assert_structural_equal(out["main"], Dynamic["main"])
    (decision,) = rewrite.report.blocks
    assert "symbolic" in decision.skipped and decision.applied == ()


# ------------------------------------------------------------------------ MemoryAwareSchedule
def test_schedule_finishes_one_branch_before_the_other(fused):
    pass_ = sp.MemoryAwareSchedule()
    out = pass_(fused)
    relax.analysis.well_formed(out)
    before, after = callees(fused["main"]), callees(out["main"])
    assert sorted(before) == sorted(after) and before != after
    wide = [n for n in before if n.startswith("fused_conv2d1") or n.startswith("fused_conv2d2")]
    narrow = [n for n in before if n.startswith("fused_conv2d3") or n.startswith("fused_conv2d4")]
    # stored: both wide convs, then both narrowing convs; now each branch runs to its end
    assert before.index(wide[1]) < before.index(narrow[0])
    pos = {n: after.index(n) for n in wide + narrow}
    pairs = sorted([(pos[wide[0]], pos[narrow[0]]), (pos[wide[1]], pos[narrow[1]])])
    assert pairs[0][1] < pairs[1][0]

    (decision,) = pass_.report.blocks
    assert decision.changed and decision.peak_after < decision.peak_before
    assert decision.lower_bound <= decision.peak_after and decision.optimal
    # the recorded peak is the memory model's peak of the block as it is now
    bg = block_graph(out["main"], 0)
    assert list(decision.order) == bg.graph.op_names
    assert simulate(bg.graph, bg.graph.op_names).peak_bytes == decision.peak_after
    assert simulate(bg.graph, list(block_graph(fused["main"], 0).bindings)).peak_bytes \
        == decision.peak_before
    # and the module carries the same report as JSON
    assert sp.read_report(out) == json.loads(json.dumps(pass_.report.to_json()))
    assert sp.read_report(out)["functions"]["main"]["peak_after"] == decision.peak_after


def test_schedule_leaves_a_good_order_alone_and_composes(fused):
    once = sp.MemoryAwareSchedule()(fused)
    pass_ = sp.MemoryAwareSchedule(method="serenity", time_limit=5.0)
    twice = tvm.transform.Sequential([pass_, relax.transform.Normalize()])(once)
    tvm.ir.assert_structural_equal(twice["main"], once["main"])
    assert not pass_.report.blocks[0].changed


def test_schedule_reaches_blocks_inside_if_branches():
    pass_ = sp.MemoryAwareSchedule()
    out = pass_(Branchy)
    relax.analysis.well_formed(out)
    (decision,) = pass_.report.blocks
    assert decision.block == "0/v.then/0" and decision.changed
    branch = out["main"].body.blocks[0].bindings[0].value.true_branch
    order = [b.var.name for b in branch.blocks[0].bindings]
    assert order.index("s1") < order.index("big2") or order.index("s2") < order.index("big1")
    for flag in (True, False):
        args = [np.arange(64, dtype="int32").reshape(8, 8), np.array(flag)]
        want = run(tvm.compile(Branchy, target="llvm"), args)
        got = run(tvm.compile(out, target="llvm", relax_pipeline="serenity"), args)
        np.testing.assert_array_equal(got[0], want[0])


def test_schedule_rejects_unknown_method():
    with pytest.raises(ValueError, match="unknown method"):
        sp.MemoryAwareSchedule(method="nope")


# ---------------------------------------------------------------------------------- ArenaPlan
def allocation_kinds(func):
    """For each allocated variable: 'planned' (in a planned storage: TVM's or our arena) or
    'own' (left to LowerAllocTensor)."""
    kinds = {}
    for block in func.body.blocks:
        for b in block.bindings:
            if is_op(b.value, "relax.builtin.alloc_tensor"):
                kinds[b.var.name] = "own"
            elif is_op(b.value, "relax.memory.alloc_tensor"):
                kinds[b.var.name.removesuffix("_arena")] = "planned"
    return kinds


@pytest.mark.parametrize("module", [Cell, Views], ids=["cell", "views"])
def test_arena_plans_what_static_plan_block_memory_plans(module):
    lowered = stage(module, cpu.legalize_passes, cpu.dataflow_lower_passes)
    ours = sp.ArenaPlan(planner="greedy")(lowered)
    relax.analysis.well_formed(ours)
    theirs = relax.transform.StaticPlanBlockMemory()(lowered)
    assert allocation_kinds(ours["main"]) == allocation_kinds(theirs["main"])
    assert "own" in allocation_kinds(ours["main"]).values()      # the result is never planned


def test_arena_on_the_scheduled_cell_beats_static_plan(fused):
    scheduled = sp.MemoryAwareSchedule()(fused)
    figures = {}
    for name, mod in (("stored", fused), ("scheduled", scheduled)):
        lowered = stage(mod, cpu.dataflow_lower_passes)
        pass_ = sp.ArenaPlan()
        planned = pass_(lowered)
        (arena,) = pass_.report.functions
        assert arena.static_plan_bytes == sp.static_plan_bytes(lowered)
        assert arena.liveness_peak_bytes <= arena.lower_bound_bytes <= arena.arena_bytes
        assert arena.arena_bytes <= arena.static_plan_bytes
        assert all(off % 64 == 0 for off in arena.offsets.values())
        assert sp.read_report(planned, "serenity.arena")["functions"][0]["arena_bytes"] \
            == arena.arena_bytes
        storage = [b.value for blk in planned["main"].body.blocks for b in blk.bindings
                   if isinstance(b.value, relax.Call) and isinstance(b.value.op, tvm.ir.Op)
                   and b.value.op.name == "relax.memory.alloc_storage"]
        assert [int(s.args[0].values[0]) for s in storage] == [arena.arena_bytes]
        figures[name] = arena
    # ordering and offsets together: well below TVM's planner on the stored order
    assert figures["scheduled"].arena_bytes < figures["stored"].arena_bytes \
        < figures["stored"].static_plan_bytes
    assert figures["scheduled"].arena_bytes < figures["scheduled"].static_plan_bytes


def test_arena_rejects_unaligned_offsets():
    with pytest.raises(ValueError, match="multiple of 64"):
        sp.ArenaPlan(alignment=16)


# ----------------------------------------------------------------------------------- pipeline
def test_compile_with_the_registered_pipeline(fused, reference):
    args, expected = reference
    scheduled = sp.MemoryAwareSchedule()(fused)
    order = callees(scheduled["main"])
    ex = tvm.compile(Cell, target="llvm", relax_pipeline="serenity")
    calls = []

    def record(func, name, before_run, ret, *call_args):
        if before_run and name in order:
            calls.append((name, [np.from_dlpack(a).ctypes.data for a in call_args
                                 if isinstance(a, tvm.runtime.Tensor)]))
        return 0

    got = run(ex, args, record)
    for g, e in zip(got, expected):
        np.testing.assert_array_equal(g, e)
    # the VM ran the kernels in the order MemoryAwareSchedule chose
    assert [name for name, _ in calls] == order
    # and they wrote into the arena at the planned offsets (no hidden copies): output pointer
    # minus planned offset is the same base address for every kernel writing into the arena
    with TARGET:
        lowered = sp.serenity_pipeline()(Cell)
    report = sp.pipeline_report(lowered)
    assert report["schedule"]["functions"]["main"]["changed"]
    offsets = report["arena"]["functions"][0]["offsets"]
    bases = {ptrs[-1] - off for (name, ptrs), off in zip(calls, offsets.values())}
    assert len(offsets) == len(order) - 1 and len(bases) == 1


def test_pipeline_options_and_views_execute(reference):
    args, expected = reference
    pipe = sp.serenity_pipeline(method="kahn", planner="greedy", time_limit=1.0)
    assert isinstance(pipe, tvm.transform.Sequential)
    got = run(tvm.compile(Cell, target="llvm", relax_pipeline=pipe), args)
    for g, e in zip(got, expected):
        np.testing.assert_array_equal(g, e)

    views_args = random_args(Views, seed=1)
    want = run(tvm.compile(Views, target="llvm"), views_args)
    got = run(tvm.compile(Views, target="llvm", relax_pipeline="serenity"), views_args)
    for g, e in zip(got, want):
        np.testing.assert_array_equal(g, e)


def test_pipeline_stages_in_order_and_extension_points():
    for rip in (False, True):
        names = [p.info.name for p in sp.serenity_pipeline(rip=rip).passes]
        assert names.index("FuseTIR") < names.index("serenity.MemoryAwareSchedule") \
            < names.index("serenity.RiPLowering") < names.index("CallTIRRewrite") \
            < names.index("serenity.ArenaPlan") < names.index("LowerAllocTensor")
        assert "StaticPlanBlockMemory" not in names
    # rip="auto": everything after the schedule runs in SmallerArena (both ways, compared)
    names = [p.info.name for p in sp.serenity_pipeline().passes]
    assert names[-2:] == ["serenity.MemoryAwareSchedule", "serenity.SmallerArena"]
    with pytest.raises(sp.PassError, match="rip must be one of"):
        sp.serenity_pipeline(rip="yes")
    seen = {}

    def before(**options):
        seen.update(options)
        return relax.transform.CanonicalizeBindings()

    sp.BEFORE_LEGALIZE.append(before)
    sp.AFTER_SCHEDULE.append(lambda **_: relax.transform.DeadCodeElimination())
    try:
        names = [p.info.name for p in sp.serenity_pipeline(method="kahn", rip=False).passes]
    finally:
        sp.BEFORE_LEGALIZE.remove(before)
        sp.AFTER_SCHEDULE.pop()
    assert names.index("CanonicalizeBindings") < names.index("LegalizeOps")
    assert names.index("serenity.MemoryAwareSchedule") < names.index("DeadCodeElimination") \
        < names.index("ToNonDataflow")
    assert seen["method"] == "kahn" and seen["alignment"] == 64
