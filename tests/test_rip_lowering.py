"""RiPLowering: int8 convolutions that are their input's last consumer run Right-in-Place.

A small int8 TFLite model (built with ModelBuilder, imported with ``relax_import.from_tflite``)
whose five convolutions cover every decision: a conv reading the function parameter and a
depthwise whose input is still read later (by an ADD) stay as they are; a pointwise, a strided
depthwise and a strided 3x1 conv are lowered. Lowered modules must run on llvm bit-identical to
the unlowered module and to the reference interpreter. (Each RiP kernel costs seconds of LLVM
time under TVM's default TIR pipeline, so the compiled modules are shared.)
"""

import json

import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.relax.backend.cpu_generic import pipeline as cpu

import tvm_serenity.passes as sp
from tvm_serenity.frontend import reference as ref
from tvm_serenity.frontend import relax_import as ri
from tvm_serenity.frontend.builder import ModelBuilder
from tvm_serenity.frontend.tflite_model import load_tflite
from tflite_cases import add_conv
from tvm_serenity.passes.convert import is_op
from tvm_serenity.passes.described import described_call
from tvm_serenity.passes.rip import shift_func
from tvm_serenity.codegen.spec import LayerSpec
from tvm_serenity.frontend.relax_import import spatial_pad
from tvm_serenity.frontend.to_graph import operator_node

TARGET = tvm.target.Target("llvm")
IN_SHAPE = (1, 7, 8, 8)
LOWERED = ["main:t10", "main:t13", "main:t16"]      # pointwise, depthwise s2, conv 3x1 s2x1
KEPT = {"main:t3": "input is a function parameter",
        "main:t6": "input is read by a later binding"}


def _model_bytes() -> bytes:
    """x -> conv3x3 (a) -> depthwise (c) ; add(a, c) -> pointwise -> depthwise s2 -> conv 3x1."""
    rng = np.random.default_rng(0)
    b = ModelBuilder()
    x = b.add_tensor(IN_SHAPE, scale=0.05, zero_point=-3)
    a, sa = add_conv(b, rng, x, IN_SHAPE, "CONV_2D", 12, (3, 3), (1, 1), "SAME", "RELU6",
                  (0.06, -5))
    c, _ = add_conv(b, rng, a, sa, "DEPTHWISE_CONV_2D", 12, (3, 3), (1, 1), "SAME", "NONE",
                 (0.06, -5))
    s = b.add_tensor(sa, scale=0.07, zero_point=2)
    b.add_operator("ADD", [a, c], [s], {"fused_activation_function": "NONE"})
    d, sd = add_conv(b, rng, s, sa, "CONV_2D", 16, (1, 1), (1, 1), "VALID", "RELU", (0.05, 7))
    e, se = add_conv(b, rng, d, sd, "DEPTHWISE_CONV_2D", 16, (3, 3), (2, 2), "SAME", "RELU6",
                  (0.05, -9))
    f, _ = add_conv(b, rng, e, se, "CONV_2D", 8, (3, 1), (2, 1), "VALID", "NONE", (0.1, 3))
    return b.build([x], [f])


def _imported(directory, name: str, buf: bytes, shape, seed: int, count: int):
    """(the Relax import of ``buf``, ``count`` seeded int8 inputs, the reference outputs)."""
    path = directory / name
    path.write_bytes(buf)
    model = load_tflite(path)
    rng = np.random.default_rng(seed)
    inputs = [rng.integers(-128, 128, shape).astype(np.int8) for _ in range(count)]
    expected = [ref.Interpreter(model).run([x])[0] for x in inputs]
    return ri.from_tflite(model), inputs, expected


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    return _imported(tmp_path_factory.mktemp("rip"), "cell.tflite", _model_bytes(), IN_SHAPE,
                     1, 2)


def _run(mod, inputs, pipeline="default"):
    ex = tvm.compile(mod, target=TARGET, relax_pipeline=pipeline)
    vm = relax.VirtualMachine(ex, tvm.cpu())
    return [vm["main"](tvm.runtime.tensor(x)).numpy() for x in inputs]


def _bindings(mod):
    return {b.var.name: b.value for block in mod["main"].body.blocks for b in block.bindings}


def _inplace_calls(mod):
    return {b.var.name: b for block in mod["main"].body.blocks for b in block.bindings
            if is_op(b.value, "relax.call_tir_inplace")}


def _convs(mod):
    """binding -> (op, geometry) of every described convolution call of ``main``."""
    out = {}
    for name, value in _bindings(mod).items():
        call = described_call(mod, value)
        if call is not None and call.op in ("CONV_2D", "DEPTHWISE_CONV_2D"):
            model, op = call.model()
            node = operator_node(model, op, spatial_pad(call.description))
            out[name] = (call.op, {k: node.attrs[k] for k in ("in_shape", "stride", "padding")})
    return out


def test_convolutions_are_read_from_their_descriptions(case):
    mod, _, _ = case
    convs = _convs(mod)
    assert {k: v[0] for k, v in convs.items()} == {
        "t3": "CONV_2D", "t6": "DEPTHWISE_CONV_2D", "t10": "CONV_2D",
        "t13": "DEPTHWISE_CONV_2D", "t16": "CONV_2D"}
    assert convs["t13"][1] == {"in_shape": [1, 7, 8, 16], "stride": [2, 2],
                               "padding": [1, 1, 0, 1]}


def test_folded_padding_is_read_from_the_description():
    """A kernel FoldPad widened is read with its folded padding (PAD (1, 2) x (2, 1) into a
    VALID depthwise); its input is the function parameter: nothing to lower."""
    import tflite_cases as tc
    from tvm_serenity.frontend.tflite_model import parse_tflite

    mod = ri.from_tflite(parse_tflite(tc._pad_conv_chain(), "pad_conv.tflite"))
    folded = sp.FoldPad()(mod)
    ((_, (op, geometry)),) = _convs(folded).items()
    assert (geometry["in_shape"][1:], geometry["padding"], geometry["stride"]) == \
        ([9, 9, 4], [1, 2, 2, 1], [2, 2])
    p = sp.RiPLowering()
    p(folded)
    assert p.lowered == [] and list(p.skipped.values()) == ["input is a function parameter"]


def test_structure_alone(case):
    mod, _, _ = case
    p = sp.RiPLowering()
    low = tvm.transform.Sequential([p])(mod)
    assert p.lowered == LOWERED and p.skipped == KEPT
    calls = _inplace_calls(low)
    assert sorted(calls) == ["t10_rip", "t13_rip", "t16_rip"]
    for b in calls.values():
        assert [int(i) for i in b.value.attrs.inplace_indices] == [0]
        kernel = low[b.value.args[0]]
        assert isinstance(kernel, tvm.tirx.PrimFunc)
        assert b.value.args[0].name_hint.endswith("_rip")
    values = _bindings(low)
    # the kept convolutions still call their kernels; the lowered kernels are gone
    assert values["t3"].args[0].name_hint == "conv2d_0"
    assert values["t6"].args[0].name_hint == "depthwise_conv2d_1"
    names = {gv.name_hint for gv in low.functions}
    assert "conv2d_3" not in names and "depthwise_conv2d_4" not in names
    relax.analysis.well_formed(low)
    # idempotent: a second run finds nothing left to lower
    again = sp.RiPLowering()
    tvm.transform.Sequential([again])(low)
    assert again.lowered == []


def test_input_still_used_is_not_lowered(case):
    """The depthwise t6 reads t3, which the ADD reads afterwards: no in-place kernel for it,
    nor for the first conv (its input is the parameter)."""
    mod, _, _ = case
    low = sp.RiPLowering()(mod)
    for name in ("t3", "t6"):
        value = _bindings(low)[name]
        assert is_op(value, "relax.call_tir") and not value.args[0].name_hint.endswith("_rip")


def test_execution_alone_bit_exact(case):
    mod, inputs, expected = case
    low = tvm.transform.Sequential([sp.RiPLowering()])(mod)
    base = _run(mod, inputs)
    got = _run(low, inputs)
    for b, g, e in zip(base, got, expected):
        np.testing.assert_array_equal(b, e)
        np.testing.assert_array_equal(g, e)


def test_in_serenity_pipeline(case):
    mod, inputs, expected = case
    assert "serenity.RiPLowering" in [f().info.name for f in sp.AFTER_SCHEDULE]
    # off by default: the registered pipeline leaves the module's kernels alone
    default = sp.serenity_pipeline()
    assert not any(getattr(p, "enabled", False) for p in default.passes)
    # after the schedule the kernels still say what they compute: lowered from there
    staged = tvm.transform.Sequential([
        *cpu.library_dispatch_passes(TARGET),
        *(factory(rip=True) for factory in sp.BEFORE_LEGALIZE),
        *cpu.legalize_passes(TARGET),
        sp.MemoryAwareSchedule(),
    ])(mod)
    assert not _inplace_calls(staged)
    p = sp.RiPLowering()
    lowered = p(staged)
    assert p.lowered == LOWERED and p.skipped == KEPT
    assert sorted(_inplace_calls(lowered)) == ["t10_rip", "t13_rip", "t16_rip"]
    # the whole pipeline with RiP on (ArenaPlan included), executed
    ex = tvm.compile(mod, target=TARGET, relax_pipeline=sp.serenity_pipeline(rip=True))
    vm = relax.VirtualMachine(ex, tvm.cpu())
    for x, e in zip(inputs, expected):
        np.testing.assert_array_equal(vm["main"](tvm.runtime.tensor(x)).numpy(), e)


# ------------------------------------------------------------------ in the arena on llvm
CHAIN_SHAPE = (1, 8, 8, 16)


def _chain_bytes() -> bytes:
    """x -> conv 1x1 -> depthwise 3x3 -> pointwise -> depthwise 3x3 -> conv 1x1 (8 channels):
    every tensor 1 KiB, so without RiP the peak is a convolution's input plus output."""
    rng = np.random.default_rng(2)
    b = ModelBuilder()
    t = b.add_tensor(CHAIN_SHAPE, scale=0.05, zero_point=-3)
    x, s = t, CHAIN_SHAPE
    for op, cout, k in (("CONV_2D", 16, 1), ("DEPTHWISE_CONV_2D", 16, 3), ("CONV_2D", 16, 1),
                        ("DEPTHWISE_CONV_2D", 16, 3), ("CONV_2D", 8, 1)):
        t, s = add_conv(b, rng, t, s, op, cout, (k, k), (1, 1), "SAME", "RELU", (0.05, 7))
    return b.build([x], [t])


def _chain_layers():
    """The four lowered layers as LayerSpecs (their geometry only)."""
    dw = LayerSpec.depthwise_conv2d((8, 8, 16), (3, 3), 1, 1, (1, 1, 1, 1))
    return [dw, LayerSpec.conv2d((8, 8, 16), 16, (1, 1)), dw,
            LayerSpec.conv2d((8, 8, 16), 8, (1, 1))]


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    return _imported(tmp_path_factory.mktemp("rip"), "chain.tflite", _chain_bytes(),
                     CHAIN_SHAPE, 3, 3)


def _planned(mod, **options):
    """The module after the serenity pipeline, its main's arena report, its outputs."""
    with TARGET:
        low = sp.serenity_pipeline(**options)(mod)
    (arena,) = sp.pipeline_report(low)["arena"]["functions"]
    return low, arena


def _callees(mod):
    return [b.value.op.name_hint for block in mod["main"].body.blocks for b in block.bindings
            if isinstance(b.value, relax.Call) and isinstance(b.value.op, tvm.ir.GlobalVar)]


def _padded(n, a=64):
    return -(-n // a) * a


def test_rip_kernels_run_in_the_arena_on_llvm(chain):
    """With rip=True every lowered kernel runs on its slice of ArenaPlan's arena: no copy in
    or out (only the function result is copied out of its workspace, and inputs the plan
    shifts are memmoved right in place), the arena drops to the largest RiP workspace (the
    kernels' int32 scratch is their own, outside the arena), and the outputs stay
    bit-identical to the reference interpreter."""
    mod, inputs, expected = chain
    plain, off = _planned(mod, rip=False)
    low, on = _planned(mod, rip=True)
    # without RiP: a 1 KiB input and a 1 KiB output at once
    assert off["arena_bytes"] == 2 * int(np.prod(CHAIN_SHAPE)) and off["in_place"] == []
    # with RiP: each step needs the workspace S (gap rounded up to 64 B)
    need = [layer.input_bytes + _padded(layer.rip_input_offset) for layer in _chain_layers()]
    assert on["arena_bytes"] == on["lower_bound_bytes"] == max(need) < off["arena_bytes"]
    assert on["in_place"] == ["depthwise_conv2d_1_rip", "conv2d_2_rip",
                              "depthwise_conv2d_3_rip", "conv2d_4_rip"]
    assert set(on["moved"]) <= {"depthwise_conv2d_1_rip", "depthwise_conv2d_3_rip"}
    callees = _callees(low)
    assert not [c for c in callees if c.endswith("_rip_place")]
    assert [c for c in callees if c.endswith("_rip_take")] == ["conv2d_4_rip_take"]
    assert callees.count("rip_shift") == len(on["moved"])
    for x, e in zip(inputs, expected):
        for m in (plain, low):
            vm = relax.VirtualMachine(tvm.compile(m, target=TARGET, relax_pipeline="zero"),
                                      tvm.cpu())
            np.testing.assert_array_equal(vm["main"](tvm.runtime.tensor(x)).numpy(), e)


@pytest.mark.parametrize("apart", ["dual", "copies"])
def test_groups_the_plan_cannot_lay_out(chain, apart):
    """ArenaPlan at 128 B after RiPLowering at 64 B: the depthwise gaps (192 B) are no offset
    distance the plan can give, so those kernels run in their dual layout (the same loops on
    an input and an output buffer, no workspace, no copy) or keep copying into a workspace of
    their own; the pointwise ones (gap 0) still run in place. ``apart="best"`` keeps the
    smaller of the two arenas. No RiP function is left uncalled; bit-exact every way."""
    mod, inputs, expected = chain

    def staged(**options):
        passes = tvm.transform.Sequential([
            *cpu.library_dispatch_passes(TARGET),
            *(factory(rip=True) for factory in sp.BEFORE_LEGALIZE),
            *cpu.legalize_passes(TARGET), sp.MemoryAwareSchedule(), sp.RiPLowering(),
            *cpu.dataflow_lower_passes(TARGET), sp.ArenaPlan(alignment=128, **options)])
        with TARGET:
            low = passes(mod)
        (arena,) = sp.read_report(low, "serenity.arena")["functions"]
        return low, arena

    low, arena = staged(apart=apart)
    assert arena["in_place"] == ["conv2d_2_rip", "conv2d_4_rip"] and arena["moved"] == []
    callees = _callees(low)
    duals = [c for c in callees if c.endswith("_rip_dual")]
    places = [c for c in callees if c.endswith("_rip_place")]
    assert (len(duals), len(places)) == ((2, 0) if apart == "dual" else (0, 2))
    assert arena["dual"] == duals
    prims = {g.name_hint for g, f in low.functions.items() if isinstance(f, tvm.tirx.PrimFunc)}
    assert not {c for c in prims if "_rip" in c} - set(callees)
    vm = relax.VirtualMachine(tvm.compile(low, target=TARGET), tvm.cpu())
    for x, e in zip(inputs, expected):
        np.testing.assert_array_equal(vm["main"](tvm.runtime.tensor(x)).numpy(), e)
    _, best = staged()
    _, other = staged(apart="copies" if apart == "dual" else "dual")
    assert best["arena_bytes"] == min(arena["arena_bytes"], other["arena_bytes"])


def test_auto_keeps_the_smaller_arena(chain):
    """``rip="auto"`` (the default) builds with and without RiP and keeps the smaller arena:
    on the chain the RiP one, with both figures in the pipeline report; bit-exact."""
    mod, inputs, expected = chain
    _, off = _planned(mod, rip=False)
    _, on = _planned(mod, rip=True)
    low, auto = _planned(mod)
    choice = sp.pipeline_report(low)["rip"]
    assert choice == {"chosen": "rip", "arena_bytes": {"plain": off["arena_bytes"],
                                                       "rip": on["arena_bytes"]}}
    assert auto["arena_bytes"] == on["arena_bytes"] < off["arena_bytes"]
    vm = relax.VirtualMachine(tvm.compile(low, target=TARGET, relax_pipeline="zero"), tvm.cpu())
    for x, e in zip(inputs, expected):
        np.testing.assert_array_equal(vm["main"](tvm.runtime.tensor(x)).numpy(), e)


def test_smaller_arena_keeps_the_first_on_a_tie_and_refuses_nothing_to_compare():
    """Two candidates planning the same arena: the first is kept."""
    mod = tvm.IRModule.from_expr(relax.Function([], relax.Tuple([])))

    def tagged(label, size):
        @tvm.transform.module_pass(opt_level=0, name=f"tag_{label}")
        def tag(m, _ctx):
            report = {"functions": [{"arena_bytes": size}]}
            return m.with_attr("serenity.arena", json.dumps(report)).with_attr("label", label)
        return tag

    kept = sp.SmallerArena({"a": tagged("a", 64), "b": tagged("b", 64)})(mod)
    assert str(kept.attrs["label"]) == "a"
    kept = sp.SmallerArena({"a": tagged("a", 128), "b": tagged("b", 64)})(mod)
    assert str(kept.attrs["label"]) == "b"
    assert json.loads(str(kept.attrs["serenity.rip_choice"]))["chosen"] == "b"
    with pytest.raises(sp.PassError, match="no candidate"):
        sp.SmallerArena({})


def test_arena_plan_refuses_unknown_apart():
    with pytest.raises(sp.PassError, match="apart must be one of best, dual, copies"):
        sp.ArenaPlan(apart="never")


def test_shift_func_is_a_memmove_right():
    data = np.random.default_rng(4).integers(-128, 128, 300).astype(np.int8)
    f = tvm.tirx.build(shift_func(200, 300).with_attr("global_symbol", "k"), target="llvm")
    ws = tvm.runtime.tensor(data)
    f["k"](ws)
    want = data.copy()
    want[100:] = data[:200]
    np.testing.assert_array_equal(ws.numpy(), want)
