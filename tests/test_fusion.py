"""Expand-depthwise fusion (issue #15): a 1x1 expand CONV_2D fused into the DEPTHWISE_CONV_2D
that reads it, computed channel by channel through a one-channel plane, so the expanded tensor
never exists.

* the rewrite (tvm_serenity.rewrite): matched only where it is an identity, kept only where the
  exact scheduler's peak drops, the fused node priced by the one memory model;
* the kernel (codegen.kernels, ``LayerSpec.expand_depthwise``) equals the numpy reference of the
  fused node (``reference.expand_depthwise_int8``: the two reference kernels in sequence) byte
  for byte on llvm;
* ``compile --rewrite`` runs it bit-exact on the host against the reference interpreter (and
  once on rp2040js, slow), with a smaller arena.
"""

import numpy as np
import pytest
import tvm

from tvm_serenity.codegen import LayerSpec, build_llvm
from tvm_serenity.codegen.spec import CodegenError, ExpandConv, kernel_params
from tvm_serenity.frontend import reference as ref


def _requant(rng, channels, zero_point, act):
    reals = 10.0 ** rng.uniform(-3.5, -0.5, channels)
    pairs = [ref.quantize_multiplier(r) for r in reals]
    return ref.Requant(np.array([m for m, _ in pairs], dtype=np.int64),
                       np.array([s for _, s in pairs], dtype=np.int64), zero_point, *act)


def _kernel_case(seed, hw, cin, channels, kernel, stride, padding):
    """(spec, ABI arrays by name, expected output) for random weights and parameters."""
    rng = np.random.default_rng(seed)
    zp_x, zp_mid, zp_out = (int(v) for v in rng.integers(-128, 128, 3))
    act_e = ((-128, 127), (zp_mid, 127), (-100, 90))[seed % 3]
    act_d = ((-128, 127), (zp_out, 127))[seed % 2]
    act_e = (min(act_e[0], act_e[1]), act_e[1])
    x = rng.integers(-128, 128, (1, *hw, cin), dtype=np.int8)
    ew = rng.integers(-127, 128, (channels, 1, 1, cin), dtype=np.int8)
    eb = rng.integers(-20000, 20000, channels).astype(np.int32)
    erq = _requant(rng, channels, zp_mid, act_e)
    dw = rng.integers(-127, 128, (1, *kernel, channels), dtype=np.int8)
    db = rng.integers(-20000, 20000, channels).astype(np.int32)
    drq = _requant(rng, channels, zp_out, act_d)
    eparams = ref.ConvParams((1, 1), (1, 1), (0, 0, 0, 0), zp_x, erq)
    dparams = ref.ConvParams(stride, (1, 1), padding, zp_mid, drq)
    expected = ref.expand_depthwise_int8(x, ew, eb, eparams, dw, db, dparams)[0]
    spec = LayerSpec.expand_depthwise(
        (*hw, cin), channels, kernel, stride, padding=padding,
        expand=ExpandConv(cin, zp_x, *act_e), input_zero_point=zp_mid,
        output_zero_point=zp_out, act_min=act_d[0], act_max=act_d[1])
    arrays = {"input": x.ravel(), "weight": dw.ravel(), "bias": db,
              "multiplier": drq.multiplier.astype(np.int32),
              "shift": drq.shift.astype(np.int32), "expand_weight": ew.ravel(),
              "expand_bias": eb, "expand_multiplier": erq.multiplier.astype(np.int32),
              "expand_shift": erq.shift.astype(np.int32)}
    return spec, arrays, expected


KERNEL_CASES = {
    "3x3_s1_same": ((6, 7), 5, 8, (3, 3), (1, 1), (1, 1, 1, 1)),
    "3x3_s2_uneven": ((7, 6), 3, 12, (3, 3), (2, 2), (0, 1, 0, 1)),
    "5x5_s2": ((9, 9), 4, 6, (5, 5), (2, 2), (1, 2, 1, 2)),
    "7x7_s1_valid": ((8, 8), 2, 3, (7, 7), (1, 1), (0, 0, 0, 0)),
}


@pytest.mark.parametrize("name", list(KERNEL_CASES))
def test_fused_kernel_equals_the_two_reference_kernels_in_sequence(name):
    for seed in (1, 2):
        spec, arrays, expected = _kernel_case(seed, *KERNEL_CASES[name])
        module, symbol = build_llvm(spec, "dual")
        garbage = np.random.default_rng(seed + 10)
        tensors = [tvm.runtime.tensor(np.ascontiguousarray(arrays[p.name]) if p.name in arrays
                                      else garbage.integers(-128, 128, p.elements)
                                      .astype(p.dtype)) for p in kernel_params(spec, "dual")]
        module[symbol](*tensors)
        got = tensors[1].numpy().reshape(expected.shape)
        assert got.tobytes() == expected.tobytes(), f"{name} seed {seed}"
        # the scratch holds the padded one-channel plane, not the expanded tensor
        g = spec.geometry
        plane = (g.in_height + sum(g.padding[:2])) * (g.in_width + sum(g.padding[2:]))
        assert spec.channel_buffer_bytes == plane
        assert 4 * spec.scratch_elements < g.input_elements + plane + 4 * 64


def test_fused_spec_refuses_what_it_cannot_run():
    expand = ExpandConv(4)
    with pytest.raises(CodegenError, match="dual layout only"):
        kernel_params(LayerSpec.expand_depthwise((4, 4, 4), 8, (3, 3), expand=expand), "rip")
    with pytest.raises(CodegenError, match="fuses into a whole depthwise_conv2d"):
        LayerSpec.conv2d((4, 4, 4), 8, 1).__class__(
            "conv2d", LayerSpec.conv2d((4, 4, 4), 8, 1).geometry, expand=expand)
    with pytest.raises(CodegenError, match="expand in_channels"):
        ExpandConv(0)


# ------------------------------------------------------------------ the rewrite on a model
from tflite_cases import add_conv                                     # noqa: E402
from toolchain import needs_cc, needs_rp2040js                        # noqa: E402
from tvm_serenity.deploy import compile_tflite, run                   # noqa: E402
from tvm_serenity.frontend.builder import ModelBuilder                # noqa: E402
from tvm_serenity.graph import Graph, Node                            # noqa: E402
from tvm_serenity.memory import simulate                              # noqa: E402
from tvm_serenity.rewrite import (CHANNEL, FUSE, FUSED_OP, KERNEL, Fusion,   # noqa: E402
                                  apply_rewrite, find_candidates, rewrite_graph)


def expand_dw_project(path, hw=12, cin=4, channels=24, stride=(2, 2), padding="SAME",
                      explicit_pad=None, seed=0):
    """x -> 1x1 CONV_2D expand (RELU6) -> [PAD] -> 3x3 DEPTHWISE_CONV_2D (RELU6) -> 1x1
    CONV_2D project, random int8 weights; ``explicit_pad`` = (top, bottom, left, right) puts a
    PAD (folded into the depthwise) before a VALID depthwise."""
    rng = np.random.default_rng(seed)
    b = ModelBuilder()
    shape = (1, hw, hw, cin)
    x = b.add_tensor(shape, scale=0.05, zero_point=-3)
    e, shape = add_conv(b, rng, x, shape, "CONV_2D", channels, (1, 1), (1, 1), "VALID",
                        "RELU6", (0.04, -17))
    if explicit_pad is not None:
        t, bo, le, r = explicit_pad
        paddings = b.add_tensor((4, 2), "int32", data=[[0, 0], [t, bo], [le, r], [0, 0]])
        shape = (1, shape[1] + t + bo, shape[2] + le + r, shape[3])
        padded = b.add_tensor(shape, scale=0.04, zero_point=-17)
        b.add_operator("PAD", [e, paddings], [padded])
        e, padding = padded, "VALID"
    d, shape = add_conv(b, rng, e, shape, "DEPTHWISE_CONV_2D", 0, (3, 3), stride, padding,
                        "RELU6", (0.03, 9))
    y, _ = add_conv(b, rng, d, shape, "CONV_2D", cin, (1, 1), (1, 1), "VALID", "NONE",
                    (0.06, 2))
    path.write_bytes(b.build([x], [y]))
    return path


MODELS = {"same_s2": {}, "valid_s2": dict(padding="VALID", hw=13),
          "pad_folded_s2": dict(explicit_pad=(1, 2, 2, 1), hw=11, channels=20)}


def _chain_graph(stride):
    """x (12x12x4) -> expand 1x1 (24) -> depthwise 3x3 -> project, as the zoo writes it."""
    def conv(name, src, shape, kernel, stride_, padding, op="conv2d", inplace=None):
        return Node(name, op, (src,), int(np.prod(shape)), shape, "int8",
                    {"kernel": list(kernel), "stride": list(stride_), "dilation": [1, 1],
                     "padding": list(padding), "groups": shape[3] if op != "conv2d" else 1},
                    inplace)
    out = 12 // stride
    return Graph([Node("x", "input", (), 576, (1, 12, 12, 4), "int8"),
                  conv("e", "x", (1, 12, 12, 24), (1, 1), (1, 1), (0, 0, 0, 0),
                       inplace=3456),
                  conv("d", "e", (1, out, out, 24), (3, 3), (stride, stride), (1, 1, 1, 1),
                       op="depthwise_conv2d", inplace=3456),
                  conv("p", "d", (1, out, out, 4), (1, 1), (1, 1), (0, 0, 0, 0))], ["p"])


def test_fusion_is_matched_priced_by_the_memory_model_and_kept_only_where_the_peak_drops():
    g2 = _chain_graph(2)
    assert find_candidates(g2) == [Fusion("e", "d")]
    assert find_candidates(g2, (CHANNEL, KERNEL)) == []
    fused = apply_rewrite(g2, Fusion("e", "d"))
    d = fused["d"]
    assert list(fused.nodes) == ["x", "d", "p"] and d.op == FUSED_OP and d.inputs == ("x",)
    assert d.inplace is None and d.attrs["rewrite"] == {"pattern": FUSE, "of": "d",
                                                        "expand": "e", "role": "fused"}
    assert d.attrs["expand"] == {"channels": 24, "activation": None}
    # the fused step holds x and d's output; the pair held e (e in place over x, then d in
    # place over e)
    assert simulate(fused, ["d", "p"]).peak_bytes == 576 + 6 * 6 * 24
    assert simulate(g2, ["e", "d", "p"]).peak_bytes == 3456
    r = rewrite_graph(g2)
    assert r.applied == [(FUSE, ("e", "d"))] and r.peak_after == 576 + 864 < r.peak_before
    # stride 1: the fused step (x + d = 4,032 B) is not below e in place (3,456 B)
    g1 = _chain_graph(1)
    r1 = rewrite_graph(g1)
    assert find_candidates(g1) and r1.applied == [] and r1.peak_after == r1.peak_before
    # not an identity: a second reader of e, a strided or padded expand, e a graph output
    two = Graph(list(g2.nodes.values()) + [Node("q", "relu", ("e",), 3456, (1, 12, 12, 24),
                                                "int8")], ["p", "q"])
    assert find_candidates(two) == []
    assert find_candidates(Graph(list(g2.nodes.values()), ["p", "e"])) == []
    strided = Graph([n if n.name != "e" else Node(
        "e", n.op, n.inputs, n.bytes, n.shape, n.dtype, {**n.attrs, "stride": [2, 2]})
        for n in g2.nodes.values()], ["p"])
    assert find_candidates(strided) == []


def test_relax_pass_is_not_offered_the_fusion():
    from tvm_serenity.passes import rewrite as relax_rewrite
    assert FUSE not in relax_rewrite.KINDS
    assert rewrite_graph(_chain_graph(2), kinds=relax_rewrite.KINDS).applied == []


@needs_cc
@pytest.mark.parametrize("name", list(MODELS))
def test_compile_rewrite_runs_the_fused_node_bit_exact_on_host(tmp_path, name):
    path = expand_dw_project(tmp_path / "m.tflite", **MODELS[name])
    plain = compile_tflite(path, "host", tmp_path / "plain", build=False)
    compiled = compile_tflite(path, "host", tmp_path / "fused", rewrite=True)
    assert [p for p, _ in compiled.rewrite.applied] == [FUSE]
    fused = [n for n in compiled.graph.nodes.values() if n.op == FUSED_OP]
    assert f"1 applied (expand-depthwise fusion {fused[0].name})" in compiled.rewrite_summary()
    assert len(fused) == 1 and fused[0].attrs["rewrite"]["expand"] not in compiled.graph.nodes
    x, d = compiled.graph[fused[0].inputs[0]], fused[0]
    assert compiled.arena_bytes == compiled.plan.liveness_peak_bytes <= x.bytes + d.bytes
    assert compiled.arena_bytes < plain.arena_bytes
    c = compiled.emitted.model_c
    assert c.count("_expand4_dual(") >= 2 and "fused into" in c
    for seed in (1, 2, 3):      # run() raises unless the output equals the reference's
        run(compiled.out_dir, input=np.random.default_rng(seed).integers(
            -128, 128, compiled.emitted.input_bytes, dtype=np.int8))


@pytest.mark.slow
@needs_rp2040js
def test_fused_node_bit_exact_on_rp2040js(tmp_path):
    path = expand_dw_project(tmp_path / "m.tflite", **MODELS["pad_folded_s2"])
    compiled = compile_tflite(path, "pico", tmp_path / "fused", rewrite=True)
    assert [p for p, _ in compiled.rewrite.applied] == [FUSE]
    run(compiled.out_dir)
