"""The one route (#18): front end -> Relax integer kernels -> read back -> the MCU back end.

Checks that reading a module back (``operators_of``) gives the model it was imported from on
every shared model, that a module built with ``BlockBuilder`` deploys through the same call as a
``.tflite`` (bit-exact on host and rp2040js against the reference, and against TFLite Micro on
the ``model.tflite`` the build writes), and that what the route cannot compile is named.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.script import relax as R

from test_rewrite_pass import concat_cell
from tflite_cases import MODEL_FILES, model_path
from toolchain import needs_cc, needs_rp2040js
from tvm_serenity import micro
from tvm_serenity.errors import SerenityError
from tvm_serenity.codegen.graph_c import integer_core
from tvm_serenity.frontend import load_tflite, tflite_to_graph
from tvm_serenity.frontend.builder import tflite_bytes
from tvm_serenity.frontend.interpreters import available, run_interpreter
from tvm_serenity.frontend.reference import Interpreter
from tvm_serenity.frontend.relax_import import emit_operator, from_tflite, kernel_callee
from tvm_serenity.frontend.relax_lift import LiftError, operators_of
from tvm_serenity.frontend.tflite_model import parse_tflite
from tvm_serenity.alloc import PlanError
from tvm_serenity.codegen.relax_c import emit_main
from tvm_serenity.codegen.spec import CodegenError
from tvm_serenity.memory import liveness, simulate
from tvm_serenity.passes import (ArenaPlan, FoldPad, IdentityGraphRewrite, MemoryAwareSchedule,
                                  PassError, PatchExecution, RiPLowering)
from tvm_serenity.passes.arena import read_main_arena
from tvm_serenity.passes.mcu_graph import mcu_graph
from tvm_serenity.rip.choice import with_rip_workspaces

ALL_MODELS = MODEL_FILES + ["mlperf_tiny/ad01_int8.tflite", "mlperf_tiny/kws_ref_model.tflite",
                            "mlperf_tiny/pretrainedResnet_quant.tflite",
                            "mlperf_tiny/vww_96_int8.tflite"]


def _inputs(model, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for i in model.inputs:
        t = model.tensors[i]
        out.append(rng.integers(-128, 128, t.shape).astype(np.int8) if t.dtype == "int8"
                   else rng.uniform(-1, 1, t.shape).astype(np.float32))
    return out


def _graph_json(model):
    g = tflite_to_graph(model, fold_pad=True).to_json()
    for n in g["nodes"]:
        n.get("attrs", {}).pop("tensor_index", None)     # tensors are renumbered
    return g


def _operators(model):
    return [(op.index, op.op, dict(op.options)) for op in model.operators]


@pytest.mark.parametrize("rel", ALL_MODELS)
def test_reading_the_module_back_gives_the_model(rel):
    core = integer_core(load_tflite(model_path(rel)), float_edges=True).model
    lifted = operators_of(from_tflite(core), core.name, core.source)
    assert _operators(lifted) == _operators(core)
    assert _graph_json(lifted) == _graph_json(core)
    assert [lifted.tensors[i].name for i in lifted.inputs + lifted.outputs] == \
        [core.tensors[i].name for i in core.inputs + core.outputs]
    xs = _inputs(core)
    for a, b in zip(Interpreter(core).run(xs), Interpreter(lifted).run(xs)):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    # and written as a .tflite, it is still the same model
    again = parse_tflite(tflite_bytes(lifted))
    assert _operators(again) == [(k, op, o) for k, (_, op, o) in enumerate(_operators(core))]
    for a, b in zip(Interpreter(core).run(xs), Interpreter(again).run(xs)):
        assert np.array_equal(a, b)


def test_operators_follow_the_binding_order_the_passes_leave():
    mod = from_tflite(model_path("keras/randwire_cifar100_C78_cellA.tflite"))
    scheduled = MemoryAwareSchedule()(mod)
    # from_tflite names each kernel after its operator: conv2d_5 computes operator 5
    order = [int(kernel_callee(b.value)[0].name_hint.rsplit("_", 1)[1])
             for b in scheduled["main"].body.blocks[0].bindings]
    assert order != sorted(order)                 # the schedule moved something
    assert [op.index for op in operators_of(scheduled).operators] == order


def _block_model():
    """int8 image -> CONV_2D (RELU6) -> DEPTHWISE_CONV_2D -> ADD (residual) -> MEAN, built with
    BlockBuilder and emit_operator; two outputs (the pooled vector and the sum)."""
    rng = np.random.default_rng(3)
    bb = relax.BlockBuilder()
    x = relax.Var("image", relax.TensorType((1, 9, 9, 3), "int8"))
    conv = {"padding": "SAME", "stride_h": 1, "stride_w": 1, "dilation_h_factor": 1,
            "dilation_w_factor": 1}
    ws = rng.uniform(0.004, 0.02, 8).astype(np.float32)
    with bb.function("main", [x]):
        with bb.dataflow():
            c = emit_operator(
                bb, "CONV_2D", [(x, 0.05, -3), (rng.integers(-127, 128, (8, 3, 3, 3))
                                                .astype(np.int8), ws),
                                (rng.integers(-900, 900, 8).astype(np.int32), ws * 0.05)],
                ((1, 9, 9, 8), "int8", 0.1, -128),
                {**conv, "fused_activation_function": "RELU6"}, name="conv")
            d = emit_operator(
                bb, "DEPTHWISE_CONV_2D",
                [(c, 0.1, -128), (rng.integers(-127, 128, (1, 3, 3, 8)).astype(np.int8), ws, 0,
                                  3), (rng.integers(-900, 900, 8).astype(np.int32), ws * 0.1)],
                ((1, 9, 9, 8), "int8", 0.08, 5),
                {**conv, "depth_multiplier": 1, "fused_activation_function": "NONE"},
                name="dw")
            a = emit_operator(bb, "ADD", [(d, 0.08, 5), (c, 0.1, -128)],
                              ((1, 9, 9, 8), "int8", 0.12, 0),
                              {"fused_activation_function": "NONE"}, name="sum")
            m = emit_operator(bb, "MEAN", [(a, 0.12, 0), (np.array([1, 2], np.int32),)],
                              ((1, 8), "int8", 0.12, 0), {"keep_dims": False}, name="pooled")
            outs = bb.emit_output(relax.Tuple([m, a]))
        bb.emit_func_output(outs)
    return bb.get()


@needs_cc
def test_a_blockbuilder_module_deploys_like_a_tflite(tmp_path):
    mod = _block_model()
    built = micro.build_model(mod, "host", tmp_path / "host")
    plan = json.loads((built.out_dir / "plan.json").read_text())
    relax_entry = plan["relax"]
    assert (relax_entry["front_end"], relax_entry["kernels"]) == ("relax", 4)
    folded, scheduled, arena = relax_entry["passes"]   # the passes decided order and arena
    assert folded == {"name": "FoldPad", "folded": 0}
    assert scheduled["name"] == "MemoryAwareSchedule" and scheduled["memory_model"] == "mcu"
    assert scheduled["peak_after"] == plan["schedule"]["peak_bytes"]
    assert scheduled["lower_bound"] == plan["schedule"]["lower_bound_bytes"]
    assert arena["name"] == "ArenaPlan" and arena["memory_model"] == "mcu"
    assert arena["arena_bytes"] == plan["arena_bytes"] == built.arena_bytes
    assert [e["name"] for e in plan["inputs"]] == ["image"]
    assert [e["name"] for e in plan["outputs"]] == ["pooled", "sum"]
    result = micro.run_model(built.out_dir)               # checked against the reference
    # independently: TFLite Micro on the operators the build wrote
    model = load_tflite(built.out_dir / "model.tflite")
    x = np.frombuffer((built.out_dir / "input.bin").read_bytes(), np.int8).reshape(1, 9, 9, 3)
    if available("tflm"):
        tflm = run_interpreter("tflm", built.out_dir / "model.tflite", [[x]])[0]
        assert list(result.outputs) == [np.asarray(tflm[i], np.int8).tobytes()
                                        for i in model.outputs]
    # the same module through the tflite route gives the same C (but the line naming it)
    again = micro.build_model(built.out_dir / "model.tflite", "host", tmp_path / "again")

    def c_text(b):
        return [line for line in (b.model_dir / "model.c").read_text().splitlines()
                if "Relax module" not in line and "model.tflite" not in line]
    assert c_text(again) == c_text(built)


@needs_rp2040js
def test_a_blockbuilder_module_runs_on_the_emulated_pico(tmp_path):
    built = micro.build_model(_block_model(), "pico", tmp_path / "pico")
    result = micro.run_model(built.out_dir)               # raises unless bit-exact
    assert result.backend == "rp2040js" and result.cycles > 0


# ------------------------------------------------------------- ArenaPlan and the C emitter
def _planned(mod, **arena_options):
    """``mod`` after FoldPad, MemoryAwareSchedule and ArenaPlan on the MCU memory model, run as
    a TVM user runs passes, and the arena pass (its report)."""
    arena = ArenaPlan(memory_model="mcu", **arena_options)
    seq = tvm.transform.Sequential([FoldPad(), MemoryAwareSchedule(memory_model="mcu"), arena])
    return seq(mod), arena


def _overlaps(graph, plan, inplace):
    """Pairs of tensors live at one step whose bytes overlap, besides a claimed in-place pair
    at its step: by brute force over every step and pair (independent of verify_plan)."""
    lifetimes = liveness(graph, list(plan.order), inplace).lifetimes
    claimed = {(p.step, p.input, p.output) for p in plan.inplace}
    bad = []
    for k in range(len(plan.order)):
        live = [n for n, lt in lifetimes.items() if lt.start <= k <= lt.end and lt.bytes]
        for i, a in enumerate(live):
            for b in live[i + 1:]:
                ea, eb = (plan.offsets[n] + lifetimes[n].bytes for n in (a, b))
                if plan.offsets[a] < eb and plan.offsets[b] < ea and not (
                        (k, a, b) in claimed or (k, b, a) in claimed):
                    bad.append((k, a, b))
    return bad


@pytest.mark.parametrize("inplace", [True, False], ids=["rip", "dual"])
def test_arena_plan_pass_plans_main_for_the_mcu_and_changes_nothing_else(inplace):
    model = integer_core(load_tflite(model_path("tinyengine/vww.tflite")), True).model
    scheduled = MemoryAwareSchedule(memory_model="mcu")(FoldPad()(from_tflite(model)))
    arena = ArenaPlan(memory_model="mcu", inplace=inplace)
    planned = arena(scheduled)
    assert all(planned[g].same_as(f) for g, f in scheduled.functions.items())
    decided = read_main_arena(planned)
    assert decided.to_json() == arena.report.to_json()
    plan = decided.plan
    graph = with_rip_workspaces(tflite_to_graph(operators_of(planned), fold_pad=True),
                                decided.relaxed_channel_layers)
    assert list(plan.order) == graph.op_names               # main's binding order
    assert _overlaps(graph, plan, inplace) == []
    peak = simulate(graph, plan.order, inplace).peak_bytes
    assert peak <= plan.arena_bytes == max(plan.offsets[n] + graph[n].bytes
                                           for n in plan.offsets)
    assert (len(plan.inplace) > 0) == inplace
    assert bool(decided.relaxed_channel_layers) == inplace   # vww has channel-wise layers


def test_the_c_emitter_checks_the_plan_it_is_given():
    core = integer_core(_block_model_tflite(), True)
    planned, arena = _planned(from_tflite(core.model))
    emitted, graph, plan, source_graph, _ = emit_main(planned, core)
    assert source_graph is None                     # main's own graph
    assert emitted.arena_bytes == plan.arena_bytes == arena.report.plan.arena_bytes
    with pytest.raises(CodegenError, match=r"run ArenaPlan\(memory_model='mcu'\)"):
        emit_main(FoldPad()(from_tflite(core.model)), core)
    data = json.loads(str(planned.attrs["serenity.arena"]))

    def edited(change):
        copy = json.loads(json.dumps(data))
        change(copy["plan"])
        return planned.with_attr("serenity.arena", json.dumps(copy))

    def overlap(p):         # dw written over conv, which the residual ADD reads later
        p["offsets"]["depthwise_conv2d_1"] = p["offsets"]["conv2d_0"]
    with pytest.raises(CodegenError,
                       match="does not fit main: .*'(depthwise_conv2d_1|conv2d_0)'"):
        emit_main(edited(overlap), core)
    with pytest.raises(CodegenError, match="another order than the module's .step 0"):
        emit_main(edited(lambda p: p["order"].reverse()), core)
    with pytest.raises(PlanError, match=r"field 'inplace\[0\]\.step' must be int"):
        emit_main(edited(lambda p: p["inplace"][0].update(step="3")), core)
    with pytest.raises(PassError, match="'serenity.arena' is no JSON"):
        emit_main(planned.with_attr("serenity.arena", "{bad"), core)
    with pytest.raises(PassError, match="alignment 1"):
        ArenaPlan(memory_model="mcu", alignment=64)
    with pytest.raises(PassError, match="memory_model"):
        ArenaPlan(memory_model="aot")


def test_patch_and_rewrite_passes_leave_the_graph_the_arena_and_the_emitter_use(tmp_path):
    """PatchExecution and IdentityGraphRewrite(memory_model="mcu") change no function; the
    patched / rewritten graph they leave in the module is what ArenaPlan plans and emit_main
    writes, checked to come from the main the module has."""
    model = integer_core(load_tflite(model_path("tinyengine/vww.tflite")), True).model
    scheduled = MemoryAwareSchedule(memory_model="mcu")(FoldPad()(from_tflite(model)))
    patcher = PatchExecution(layers=[4], grids=[(3, 3)])
    patched = patcher(scheduled)
    assert all(patched[g].same_as(f) for g, f in scheduled.functions.items())
    decided = mcu_graph(patched, "test")
    assert decided.patched and patcher.plan.layers == tuple(
        n for n in decided.source.op_names[:4])
    assert list(decided.order) == list(patcher.plan.schedule.order)
    out = emit_main(ArenaPlan(memory_model="mcu")(patched))
    assert out.plan.order == decided.order and out.source_graph is not None
    assert sum(1 for n in out.graph.nodes.values() if "patch" in n.attrs) > 4
    # the decision belongs to this main: on another module it is refused, and the error
    # keeps its type through TVM's pass infrastructure
    other = MemoryAwareSchedule(memory_model="mcu")(FoldPad()(from_tflite(model_path(
        "mlperf_tiny/kws_ref_model.tflite"))))
    moved = other.with_attr("serenity.mcu_graph", str(patched.attrs["serenity.mcu_graph"]))
    with pytest.raises(PassError, match="made from another main"):
        tvm.transform.Sequential([ArenaPlan(memory_model="mcu")])(moved)
    with pytest.raises(PassError, match="no 'main' function"):
        ArenaPlan(memory_model="mcu")(tvm.IRModule())

    cell = from_tflite(concat_cell(tmp_path, consumer="CONV_2D"))   # test_rewrite_c's figures
    rewriter = IdentityGraphRewrite(memory_model="mcu", time_limit=60.0)
    folded = FoldPad()(cell)
    rewritten = rewriter(folded)
    assert all(rewritten[g].same_as(f) for g, f in folded.functions.items())
    assert (rewriter.result.peak_before, rewriter.result.peak_after) == (6144, 3328)
    out = emit_main(ArenaPlan(memory_model="mcu")(rewritten))
    assert any("rewrite" in n.attrs for n in out.graph.nodes.values())
    assert out.plan.liveness_peak_bytes == simulate(out.graph, out.plan.order).peak_bytes


@needs_cc
def test_a_module_the_caller_planned_deploys_as_its_passes_decided(tmp_path):
    """The passes a TVM user runs decide the microcontroller build: build_model compiles the
    planned module as it is (their order, patches and arena; no pass runs again), bit-exact;
    the options those passes decide are refused before anything is written."""
    model = integer_core(load_tflite(model_path("mlperf_tiny/vww_96_int8.tflite")), True).model
    seq = tvm.transform.Sequential([
        FoldPad(), MemoryAwareSchedule(memory_model="mcu"),
        PatchExecution(layers=[3], grids=[(2, 2)], inplace=False),
        ArenaPlan(memory_model="mcu", inplace=False)])
    planned = seq(from_tflite(model))
    arena = read_main_arena(planned)
    built = micro.build_model(planned, "host", tmp_path / "planned", name="vww96")
    plan = json.loads((built.out_dir / "plan.json").read_text())
    assert plan["relax"]["decided_by"] == "caller"
    assert [p["name"] for p in plan["relax"]["passes"]] == [
        "MemoryAwareSchedule", "PatchExecution", "ArenaPlan"]
    assert plan["order"] == list(arena.plan.order) == list(mcu_graph(planned, "t").order)
    assert plan["offsets"] == arena.plan.offsets and built.arena_bytes == arena.plan.arena_bytes
    assert sum(1 for n in built.graph.nodes.values() if "patch" in n.attrs) >= 3
    micro.run_model(built.out_dir)                  # raises unless equal to the reference
    with pytest.raises(SerenityError, match="without patch, rip"):
        micro.build_model(planned, "host", tmp_path / "again", rip=True, patch=True)
    assert not (tmp_path / "again").exists()


def _block_model_tflite():
    """The BlockBuilder model of :func:`_block_model` as operators (main read back)."""
    return operators_of(_block_model(), "block")


def _float_module():
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 4), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(R.nn.relu(x))
        bb.emit_func_output(y)
    return bb.get()


def test_what_the_route_cannot_compile_is_named(tmp_path):
    with pytest.raises(LiftError, match=r"binding 'gv' computes nn.relu, not an integer kernel"):
        operators_of(_float_module())
    with pytest.raises(LiftError, match="no 'main' function"):
        operators_of(tvm.IRModule())
    # nothing is written when the module cannot be compiled
    with pytest.raises(LiftError, match="nn.relu"):
        micro.build_model(_float_module(), "host", tmp_path / "out")
    assert not (tmp_path / "out").exists()


@needs_cc
def test_a_depth_multiplier_deploys_as_the_dense_convolution(tmp_path):
    """The kernel family runs a DEPTHWISE_CONV_2D with a depth multiplier as the dense
    convolution: the one kernel serves the Pico's C as it serves llvm (checked against the
    reference by run_model)."""
    from tflite_cases import SINGLE_OP_MODELS
    built = micro.build_model(from_tflite(parse_tflite(SINGLE_OP_MODELS["depthwise_mult2"]())),
                              "host", tmp_path / "out")
    micro.run_model(built.out_dir)


def test_a_kernel_a_pass_rewrote_is_refused_with_its_name():
    mod = from_tflite(model_path("mlperf_tiny/kws_ref_model.tflite"))
    lowered = RiPLowering()(MemoryAwareSchedule()(mod))       # in place: llvm only
    with pytest.raises(LiftError, match=r"binding '\w+_ws' computes kernel '\w+_rip_place', "
                                        r"which does not say which integer operator"):
        operators_of(lowered)


def test_producer_and_reader_must_agree_on_quantization():
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 4, 4, 2), "int8"))
    with bb.function("main", [x]):
        with bb.dataflow():
            r = emit_operator(bb, "RELU", [(x, 0.1, 0)], ((1, 4, 4, 2), "int8", 0.1, 0),
                              name="r")
            y = emit_operator(bb, "RELU", [(r, 0.2, 0)], ((1, 4, 4, 2), "int8", 0.2, 0),
                              name="y")
            bb.emit_output(y)
        bb.emit_func_output(y)
    with pytest.raises(LiftError, match=r"reads 'r' quantized as .*0\.2.*RELU\) as .*0\.1"):
        operators_of(bb.get())


def test_emit_operator_checks_the_operator_as_tflm_would():
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 4), "int8"))
    with bb.function("main", [x]):
        with bb.dataflow():
            with pytest.raises(SerenityError, match="SOFTMAX needs output scale 1/256"):
                emit_operator(bb, "SOFTMAX", [(x, 0.1, 0)], ((1, 4), "int8", 0.5, 3))
            y = bb.emit_output(emit_operator(bb, "RELU", [(x, 0.1, 0)],
                                             ((1, 4), "int8", 0.1, 0)))
        bb.emit_func_output(y)


def test_tflite_builds_say_they_went_through_relax(tmp_path):
    path = model_path("mlperf_tiny/ad01_int8.tflite")
    built = micro.build_model(path, "host", tmp_path / "ad01", build=False)
    plan = json.loads((built.out_dir / "plan.json").read_text())
    assert plan["relax"]["front_end"] == "tflite"
    assert plan["relax"]["kernels"] == len(load_tflite(path).operators)
    assert [p["name"] for p in plan["relax"]["passes"]] == ["FoldPad", "MemoryAwareSchedule",
                                                            "ArenaPlan"]
    assert plan["relax"]["passes"][2]["arena_bytes"] == plan["arena_bytes"]
    # the order compiled is the one the pass left in main, and it is the scheduler's
    from tvm_serenity.schedule import schedule
    core = integer_core(load_tflite(path), float_edges=True).model
    expected = schedule(tflite_to_graph(core, fold_pad=True), "serenity", inplace=True)
    assert plan["order"] == list(expected.order)
    assert plan["schedule"]["peak_bytes"] == expected.peak_bytes


# ------------------------------------------------------------------------------ ONNX in
onnx_cnns = pytest.importorskip("tvm_serenity.zoo.onnx_cnns")


@pytest.fixture(scope="module")
def onnx_models(tmp_path_factory):
    return {(name, sym): onnx_cnns.quantized(onnx_cnns.MODELS[name][0](),
                                             tmp_path_factory.mktemp(name), symmetric=sym)
            for name, sym in onnx_cnns.VARIANTS}


def _llvm_outputs(mod, inputs):
    ex = tvm.compile(mod, target="llvm")
    out = relax.VirtualMachine(ex, tvm.cpu())["main"](*[tvm.runtime.tensor(a) for a in inputs])
    return [out.numpy()] if isinstance(out, tvm.runtime.Tensor) else [o.numpy() for o in out]


@needs_cc
@pytest.mark.parametrize("name, symmetric", onnx_cnns.VARIANTS,
                         ids=[f"{n}-{'sym' if s else 'asym'}" for n, s in onnx_cnns.VARIANTS])
def test_an_onnx_qdq_model_deploys_through_the_same_call(onnx_models, name, symmetric,
                                                         tmp_path):
    from tvm_serenity.frontend.onnx_import import (compare_int8, from_onnx,
                                                   onnx_reference_int8, quantize_outputs)
    path = onnx_models[name, symmetric]
    inputs = onnx_cnns.model_inputs(path, 11)
    built = micro.build_model(path, "host", tmp_path / "out", input=inputs)
    plan = json.loads((built.out_dir / "plan.json").read_text())
    assert plan["relax"]["front_end"] == "onnx"          # from_onnx ran LowerFakeQuant
    assert [p["name"] for p in plan["relax"]["passes"]] == ["FoldPad", "MemoryAwareSchedule",
                                                            "ArenaPlan"]
    assert plan["relax"]["passes"][2]["arena_bytes"] == plan["arena_bytes"]
    result = micro.run_model(built.out_dir)          # == the reference on model.tflite
    ours = [np.frombuffer(raw, np.float32).reshape(t.shape)
            for raw, t in zip(result.outputs, built.emitted.outputs)]
    # the C the description gave is what LowerFakeQuant's kernels compute on llvm, exactly
    for a, b in zip(ours, _llvm_outputs(from_onnx(path), inputs)):
        assert np.array_equal(a, b)
    # and within the requantization difference of onnxruntime (float scale, round half to
    # even, vs TFLite's fixed point: 1 LSB per operator, test_onnx_import has the bounds)
    for got, want in zip(quantize_outputs(path, ours), onnx_reference_int8(path, inputs)):
        lsb, _ = compare_int8(got, want)
        assert lsb <= 3


@needs_rp2040js
def test_an_onnx_qdq_model_runs_on_the_emulated_pico(onnx_models, tmp_path):
    path = onnx_models["conv_stack", False]
    built = micro.build_model(path, "pico", tmp_path / "pico")
    result = micro.run_model(built.out_dir)          # raises unless bit-exact
    assert result.backend == "rp2040js"


# ------------------------------------------------ TVM's own TFLite frontend, LowerFakeQuant
STOCK = ["conv3x3_same_relu6", "fc_per_tensor", "add_broadcast", "mean_hw_drop",
         "concat_width", "softmax", "hard_swish", "logistic", "relu_requant"]


@needs_cc
@pytest.mark.parametrize("case", STOCK)
def test_a_stock_frontend_module_deploys_after_lowerfakequant(case, tmp_path):
    """TVM's frontend writes float ops between quantize/dequantize; the route lowers them and
    the C computes what TFLite's interpreter computes on the original file, byte for byte."""
    import tflite
    import tvm.relax.frontend.tflite  # noqa: F401  (registers relax.frontend.tflite)
    from tflite_cases import SINGLE_OP_MODELS
    buf = SINGLE_OP_MODELS[case]()
    model = parse_tflite(buf, f"{case}.tflite")
    mod = relax.frontend.tflite.from_tflite(tflite.Model.GetRootAsModel(buf, 0))
    xs = _inputs(model, 4)
    built = micro.build_model(mod, "host", tmp_path / "out", input=xs)
    plan = json.loads((built.out_dir / "plan.json").read_text())
    assert [p["name"] for p in plan["relax"]["passes"]][0] == "LowerFakeQuant"
    result = micro.run_model(built.out_dir)
    want = Interpreter(model).run(xs)
    assert list(result.outputs) == [np.ascontiguousarray(w).tobytes() for w in want]


def test_a_stock_integer_pool_of_the_graph_input_is_refused():
    """The frontend writes an int8 AVERAGE_POOL_2D as integer ops that never say the
    quantization; on the graph input nothing else does either."""
    import tflite
    import tvm.relax.frontend.tflite  # noqa: F401
    from tflite_cases import SINGLE_OP_MODELS
    from tvm_serenity.passes import LowerFakeQuant
    buf = SINGLE_OP_MODELS["avg_pool_same_s2"]()
    mod = LowerFakeQuant()(relax.frontend.tflite.from_tflite(tflite.Model.GetRootAsModel(buf, 0)))
    with pytest.raises(LiftError, match=r"\(AVERAGE_POOL_2D\) reads the graph input .* nothing "
                                        "says which"):
        operators_of(mod)


@needs_cc
def test_the_cli_compiles_and_runs_an_onnx_model_like_a_tflite(onnx_models, tmp_path):
    import shutil
    import subprocess
    import sys
    shutil.copy(onnx_models["two_inputs", False], tmp_path / "cnn.onnx")
    for target in ("host", "llvm"):
        for argv in (["compile", "cnn.onnx", "--target", target, "-o", f"out_{target}"],
                     ["run", f"out_{target}"]):
            proc = subprocess.run([sys.executable, "-m", "tvm_serenity.cli", *argv],
                                  cwd=tmp_path, capture_output=True, text=True, timeout=600)
            assert proc.returncode == 0, proc.stderr
        assert "identical to the reference interpreter" in proc.stdout
    plan = json.loads((tmp_path / "out_host" / "plan.json").read_text())
    assert plan["relax"]["front_end"] == "onnx" and plan["model"].endswith("model.tflite")


def test_an_int8_input_moved_before_its_first_kernel_takes_that_kernels_quantization():
    """A front end may transpose an int8 graph input before any kernel reads it (ONNX's NCHW
    input): the transpose is read as TRANSPOSE and both tensors get the reader's
    quantization."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 2, 4, 4), "int8"))
    with bb.function("main", [x]):
        with bb.dataflow():
            t = bb.emit(R.permute_dims(x, [0, 2, 3, 1]))
            y = bb.emit_output(emit_operator(bb, "RELU", [(t, 0.1, 3)],
                                             ((1, 4, 4, 2), "int8", 0.1, 3), name="y"))
        bb.emit_func_output(y)
    model = operators_of(bb.get())
    assert [op.op for op in model.operators] == ["TRANSPOSE", "RELU"]
    for i in (model.inputs[0], model.operators[0].outputs[0]):
        q = model.tensors[i].quant
        assert (q.scalar_scale, q.scalar_zero_point) == (np.float32(0.1), 3)
    v = np.random.default_rng(0).integers(-128, 128, (1, 2, 4, 4)).astype(np.int8)
    (out,) = Interpreter(model).run([v])
    assert np.array_equal(out, np.maximum(np.transpose(v, (0, 2, 3, 1)), 3))


def test_a_symbolic_shape_is_refused_naming_the_parameter():
    bb = relax.BlockBuilder()
    n = tvm.tirx.Var("n", "int64")
    x = relax.Var("x", relax.TensorType((n, 4), "int8"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(R.permute_dims(x))
        bb.emit_func_output(y)
    with pytest.raises(LiftError, match=r"parameter 'x' is not a tensor of static shape"):
        operators_of(bb.get())
