"""Identity graph rewriting: structure, memory (hand-computed peaks), the greedy search, and
bit-exactness of the rewritten int8 computation against the reference kernels."""

import random

import numpy as np
import pytest

from tvm_serenity import zoo
from tvm_serenity.frontend.reference import (ConvParams, Requant, conv2d_int8, conv_requant,
                                             depthwise_conv2d_int8, quantize_multiplier,
                                             relu_int8)
from tvm_serenity.graph import Graph, GraphError, Node
from tvm_serenity.memory import simulate
from tvm_serenity.rewrite import (CHANNEL, KERNEL, UNARY, apply_rewrite, find_candidates,
                                  rewrite_graph)
from tvm_serenity.schedule import schedule
from tvm_serenity.zoo.builder import same_padding


def t(name, op, inputs, hwc, dtype="int8", **kw):
    """A node producing an NHWC tensor of shape ``(1, *hwc)``."""
    h, w, c = hwc
    size = {"int8": 1, "int32": 4}[dtype]
    return Node(name, op, tuple(inputs), size * h * w * c, (1, h, w, c), dtype, **kw)


CAT = {"axis": 3}
CONV = {"kernel": [1, 1], "stride": [1, 1], "dilation": [1, 1], "padding": [0, 0, 0, 0],
        "groups": 1}


def three_branch_graph(consumer_op: str, out_channels: int) -> Graph:
    """in (16 B) -> a, b, c (16 B each) -> concat (48 B) -> consumer, all 1x1 pixels."""
    return Graph([t("in", "input", (), (1, 1, 16)),
                  t("a", "conv2d", ["in"], (1, 1, 16), attrs=CONV),
                  t("b", "conv2d", ["in"], (1, 1, 16), attrs=CONV),
                  t("c", "conv2d", ["in"], (1, 1, 16), attrs=CONV),
                  t("cat", "concatenation", ["a", "b", "c"], (1, 1, 48), attrs=CAT),
                  t("y", consumer_op, ["cat"], (1, 1, out_channels),
                    attrs={**CONV, "groups": 48 if consumer_op == "depthwise_conv2d" else 1})],
                 ["y"], "three_branches")


# ------------------------------------------------------------------- hand-computed peaks
def test_channel_partition_lowers_the_peak_by_hand():
    g = three_branch_graph("conv2d", 4)
    # Unrewritten, every order runs a, b, c (any order), cat, y:
    #   a: in 16 + a 16 = 32;  b: 32 + 16 = 48;  c: 48 + 16 = 64, then in is freed -> 48;
    #   cat: 48 + 48 = 96 -> a, b, c freed -> 48;  y: 48 + 4 = 52.          peak 96 (cat)
    assert schedule(g, "serenity").peak_bytes == 96
    res = rewrite_graph(g)
    assert res.peak_before == 96
    # Rewritten: int32 accumulator = 4 B x 4 elements = 16 B. Order a, p0, b, p1, c, p2, y:
    #   a: 16 + 16 = 32;  p0 = partial(a): 32 + 16 = 48, a freed -> 32 (in, acc);
    #   b: 32 + 16 = 48;  p1 = accumulate(p0, b) in place: 48 - 16 + 16 = 48 -> 32;
    #   c: 48, in freed -> 32 (acc, c);  p2 in place: 32 -> 16;
    #   y = requantize(p2) in place: 16 - 16 + max(16, 4) = 16 -> 4.        peak 48
    # 48 is optimal: the first partial needs its input, the accumulator and `in` (still read
    # by a later branch), or all three branches (48 B) plus the accumulator.
    assert res.peak_after == 48 and res.optimal
    assert res.applied == [(CHANNEL, ("cat", "y"))]
    assert simulate(res.graph, res.graph.op_names).peak_bytes == 48   # stored order too
    assert simulate(res.graph, res.schedule.order).peak_bytes == 48


def test_kernel_partition_lowers_the_peak_by_hand():
    g = three_branch_graph("depthwise_conv2d", 48)
    # Unrewritten: cat: 48 + 48 = 96 -> 48; y (plain): 48 + 48 = 96.            peak 96
    assert schedule(g, "serenity").peak_bytes == 96
    res = rewrite_graph(g)
    # Rewritten (the output buffer is allocated by the first slice, filled in place):
    #   a: 32;  s0 = slice(a): 16 + 16 + 48 = 80, a freed -> 64 (in, buffer);
    #   b: 80;  s1 in place: 80 -> 64;  c: 80, in freed -> 64;  y = s2 in place: 64 -> 48.
    # 80 is optimal: the first slice needs `in`, its input and the buffer, or a, b, c and
    # the buffer (96).                                                          peak 80
    assert (res.peak_before, res.peak_after) == (96, 80)
    assert res.applied == [(KERNEL, ("cat", "y"))]


def test_not_applied_when_the_accumulator_costs_more():
    # x1, x2 graph inputs (16 B each) -> cat (32 B) -> conv to 16 channels.
    # Unrewritten: cat: 32 + 32 = 64;  y: 32 + 16 = 48.                       peak 64
    # Rewritten: partial(x1) needs x1 + x2 (live from the start) + 64 B of int32: 96.
    g = Graph([t("x1", "input", (), (1, 1, 16)), t("x2", "input", (), (1, 1, 16)),
               t("cat", "concatenation", ["x1", "x2"], (1, 1, 32), attrs=CAT),
               t("y", "conv2d", ["cat"], (1, 1, 16), attrs=CONV)], ["y"])
    res = rewrite_graph(g)
    assert res.applied == [] and res.graph is g
    assert (res.peak_before, res.peak_after) == (64, 64)
    assert [(tr.peak_bytes, tr.kept) for tr in res.trials] == [(96, False)]


# -------------------------------------------------------------------------- structure
def test_channel_partition_structure():
    g = three_branch_graph("conv2d", 4)
    (cand,) = find_candidates(g)
    r = apply_rewrite(g, cand, order=[2, 0, 1])
    assert "cat" not in r.nodes and r.outputs == ("y",)
    chain = [r["y/part2"], r["y/part0"], r["y/part1"]]
    assert [n.op for n in chain] == ["conv2d_partial", "conv2d_accumulate", "conv2d_accumulate"]
    assert [n.inputs for n in chain] == [("c",), ("y/part2", "a"), ("y/part0", "b")]
    assert all(n.bytes == 16 and n.dtype == "int32" for n in chain)
    assert [n.inplace for n in chain] == [None, "alias", "alias"]
    y = r["y"]
    assert (y.op, y.inputs, y.bytes, y.dtype, y.inplace) == \
        ("requantize", ("y/part1",), 4, "int8", "alias")
    origins = [n.attrs["rewrite"] for n in chain]
    assert [o["channels"] for o in origins] == [[32, 48], [0, 16], [16, 32]]
    assert [o["role"] for o in origins] == ["partial", "accumulate", "accumulate"]
    assert all(o["of"] == "y" and o["concat"] == "cat" and o["steps"] == 3 for o in origins)
    assert chain[0].attrs["kernel"] == [1, 1] and "activation" not in chain[0].attrs
    assert y.attrs["rewrite"]["role"] == "requantize"
    with pytest.raises(GraphError, match="no longer matches"):
        apply_rewrite(r, cand)
    with pytest.raises(GraphError, match="permutation"):
        apply_rewrite(g, cand, order=[0, 0, 1])


def test_zoo_network_rewrites_keep_the_graph_consistent():
    """On the DARTS network the concat feeds a ReLU read by two convolutions (and the
    FactorizedReduce concat feeds depthwise convs and ADDs): the ReLU is pushed into the
    branches and shared, the concat stays while another reader needs it."""
    g = zoo.build("darts_v2_cifar_net8")
    cands = find_candidates(g, (CHANNEL, KERNEL))      # the concat patterns
    assert {c.pattern for c in cands} == {CHANNEL, KERNEL}
    first, second = [c for c in cands if c.concat == "cell0/concat"]
    assert first.unary == ("cell0/concat_relu",)
    one = apply_rewrite(g, first)
    assert "cell0/concat" in one.nodes and "cell0/concat_relu" in one.nodes
    both = apply_rewrite(one, second)
    assert "cell0/concat" not in both.nodes and "cell0/concat_relu" not in both.nodes
    pushed = [n for n in both.nodes.values()
              if n.attrs.get("rewrite", {}).get("pattern") == UNARY]
    assert len(pushed) == 4 and all(n.op == "relu" and n.inplace == "alias" for n in pushed)
    for name in (first.consumer, second.consumer):
        assert both[name].op == "requantize"
        assert both.consumers[name] == g.consumers[name]
        acc = both[both[name].inputs[0]]
        assert acc.bytes == 4 * g[name].bytes and acc.inputs[1] in {n.name for n in pushed}
    kern = next(c for c in cands if c.pattern == KERNEL)
    k = apply_rewrite(g, kern)
    dw = k[kern.consumer]
    assert dw.op == "depthwise_conv2d_slice_into" and dw.bytes == g[kern.consumer].bytes
    assert dw.attrs["rewrite"]["out_channels"] == [36, 72] and dw.attrs["groups"] == 36
    assert "cell3/pre0/fr_concat" in k.nodes          # the skip ADDs still read it
    assert sorted(k.outputs) == sorted(g.outputs)


# ---------------------------------------------------------------------------- search
def random_concat_graph(rng: random.Random) -> Graph:
    """A stem, 2-4 branches of 1-3 convs with random widths, a concat, optionally a ReLU,
    then a conv or depthwise consumer; sometimes a second reader of the concat."""
    hw = (rng.randint(2, 4), rng.randint(2, 4))
    nodes = [t("x", "input", (), (*hw, rng.randint(2, 8)))]
    ends = []
    for b in range(rng.randint(2, 4)):
        src = "x"
        for k in range(rng.randint(1, 3)):
            name = f"b{b}_{k}"
            nodes.append(t(name, "conv2d", [src], (*hw, rng.randint(1, 12)), attrs=CONV))
            src = name
        ends.append(src)
    channels = sum(next(n for n in nodes if n.name == e).shape[3] for e in ends)
    nodes.append(t("cat", "concatenation", ends, (*hw, channels), attrs=CAT))
    src = "cat"
    if rng.random() < 0.5:
        nodes.append(t("act", "relu", ["cat"], (*hw, channels), inplace="alias"))
        src = "act"
    outputs = ["y"]
    if rng.random() < 0.5:
        nodes.append(t("y", "conv2d", [src], (*hw, rng.randint(1, 8)), attrs=CONV))
    else:
        nodes.append(t("y", "depthwise_conv2d", [src], (*hw, channels),
                       attrs={**CONV, "groups": channels}))
    if rng.random() < 0.3:
        nodes.append(t("z", "conv2d", [src], (*hw, rng.randint(1, 8)), attrs=CONV))
        outputs.append("z")
    return Graph(nodes, outputs, "random_concat")


@pytest.mark.parametrize("seed", range(12))
def test_search_never_raises_the_peak_and_keeps_only_improvements(seed):
    g = random_concat_graph(random.Random(seed))
    res = rewrite_graph(g)
    assert res.peak_after <= res.peak_before == schedule(g, "serenity").peak_bytes
    assert res.optimal and res.schedule_before.optimal
    assert simulate(res.graph, res.schedule.order).peak_bytes == res.peak_after
    incumbent = res.peak_before
    for trial in res.trials:
        assert trial.kept == (trial.peak_bytes < incumbent)
        incumbent = min(incumbent, trial.peak_bytes)
    assert incumbent == res.peak_after
    kept = [(c.pattern, c.nodes) for tr in res.trials if tr.kept for c in tr.candidates]
    assert kept == res.applied
    assert (res.graph is g) == (not res.applied)


def test_search_on_the_darts_network():
    g = zoo.build("darts_v2_cifar_net8")
    res = rewrite_graph(g)
    assert res.peak_after <= res.peak_before
    assert len(res.trials) >= len({c.nodes[0] for c in find_candidates(g)})
    assert res.to_json()["peak_after_bytes"] == res.peak_after


# --------------------------------------------------------------------- bit-exactness
INPUT_ZP, CAT_SCALE = -3, 0.05


def per_tensor(real: float, zp: int, lo: int = -128) -> Requant:
    m, s = quantize_multiplier(real)
    return Requant(np.array([m]), np.array([s]), zp, lo, 127)


def sliced(r: Requant, lo: int, hi: int) -> Requant:
    return Requant(r.multiplier[lo:hi], r.shift[lo:hi], r.output_zero_point, r.act_min,
                   r.act_max)


def keep_accumulator(acc):
    """Stand-in requantization: the kernel returns its int32 accumulator."""
    return acc


def wrap32(x):
    return ((np.asarray(x, dtype=np.int64) + 2**31) % 2**32 - 2**31).astype(np.int64)


class Weights:
    """Random int8 parameters for every original node of the numerics graph."""

    def __init__(self, rng: np.random.Generator, graph: Graph):
        self.w, self.bias, self.params = {}, {}, {}
        for node in graph.nodes.values():
            cout = node.shape[3]
            if node.op in ("conv2d", "depthwise_conv2d"):
                cin = graph[node.inputs[0]].shape[3]
                kh, kw = node.attrs["kernel"]
                shape = (cout, kh, kw, cin) if node.op == "conv2d" else (1, kh, kw, cout)
                self.w[node.name] = rng.integers(-127, 128, shape, dtype=np.int8)
                self.bias[node.name] = rng.integers(-5000, 5000, cout).astype(np.int32)
                requant = conv_requant(CAT_SCALE, rng.uniform(0.002, 0.02, cout), 0.1, 7,
                                       node.attrs.get("activation", "NONE"))
                self.params[node.name] = ConvParams(tuple(node.attrs["stride"]),
                                                    tuple(node.attrs["dilation"]),
                                                    tuple(node.attrs["padding"]), INPUT_ZP,
                                                    requant)
            elif node.op == "relu":
                # Same scale in and out: the output zero point of a same-quantization ReLU.
                self.params[node.name] = per_tensor(1.0, INPUT_ZP, lo=INPUT_ZP)


def evaluate(graph: Graph, inputs: dict, p: Weights) -> dict:
    """Run the original or rewritten graph with the reference kernels; rewritten nodes are
    interpreted from their ``attrs["rewrite"]`` only."""
    v = dict(inputs)
    for node in graph.nodes.values():
        x = [v[s] for s in node.inputs]
        origin = node.attrs.get("rewrite", {})
        of = origin.get("of", node.name)
        if node.op == "input":
            continue
        if node.op == "concatenation":
            v[node.name] = np.concatenate(x, axis=3)
        elif node.op == "relu":
            v[node.name] = relu_int8(x[0], INPUT_ZP, p.params[of])
        elif node.op in ("conv2d", "depthwise_conv2d"):
            kernel = conv2d_int8 if node.op == "conv2d" else depthwise_conv2d_int8
            v[node.name] = kernel(x[0], p.w[of], p.bias[of], p.params[of])
        elif node.op in ("conv2d_partial", "conv2d_accumulate"):
            lo, hi = origin["channels"]
            first = node.op == "conv2d_partial"
            prm = p.params[of]
            part = conv2d_int8(x[-1], p.w[of][..., lo:hi], p.bias[of] if first else None,
                               ConvParams(prm.stride, prm.dilation, prm.padding,
                                          prm.input_zero_point, keep_accumulator))
            v[node.name] = part if first else wrap32(x[0] + part)
        elif node.op == "requantize":
            v[node.name] = p.params[of].requant(x[0])
        elif node.op in ("depthwise_conv2d_slice", "depthwise_conv2d_slice_into"):
            lo, hi = origin["out_channels"]
            prm = p.params[of]
            out = np.zeros(node.shape, np.int8) if node.op == "depthwise_conv2d_slice" \
                else x[0].copy()
            out[..., lo:hi] = depthwise_conv2d_int8(
                x[-1], p.w[of][..., lo:hi], p.bias[of][lo:hi],
                ConvParams(prm.stride, prm.dilation, prm.padding, prm.input_zero_point,
                           sliced(prm.requant, lo, hi)))
            v[node.name] = out
        else:
            raise AssertionError(f"unexpected op {node.op}")
    return v


def numerics_graph(stride: int, multiplier: int) -> Graph:
    """x0, x1, x2 (5, 3, 4 channels) -> concat -> ReLU -> {3x3 conv, 3x3 depthwise}."""
    hw = (6, 7)
    (oh, top, bottom), (ow, left, right) = (same_padding(n, 3, stride) for n in hw)
    geo = {"kernel": [3, 3], "stride": [stride, stride], "dilation": [1, 1],
           "padding": [top, bottom, left, right]}
    return Graph([t("x0", "input", (), (*hw, 5)), t("x1", "input", (), (*hw, 3)),
                  t("x2", "input", (), (*hw, 4)),
                  t("cat", "concatenation", ["x0", "x1", "x2"], (*hw, 12), attrs=CAT),
                  t("act", "relu", ["cat"], (*hw, 12), inplace="alias"),
                  t("conv", "conv2d", ["act"], (oh, ow, 8),
                    attrs={**geo, "groups": 1, "activation": "RELU"}),
                  t("dw", "depthwise_conv2d", ["act"], (oh, ow, 12 * multiplier),
                    attrs={**geo, "groups": 12})],
                 ["conv", "dw"], "numerics")


@pytest.mark.parametrize("stride,multiplier,order", [(1, 1, [0, 1, 2]), (2, 2, [2, 0, 1]),
                                                     (1, 2, [1, 2, 0])])
def test_rewritten_int8_graph_is_bit_identical(stride, multiplier, order):
    g = numerics_graph(stride, multiplier)
    rng = np.random.default_rng(stride * 10 + multiplier)
    weights = Weights(rng, g)
    inputs = {x: rng.integers(-128, 128, g[x].shape, dtype=np.int8)
              for x in ("x0", "x1", "x2")}
    expected = evaluate(g, inputs, weights)
    r = g
    for cand in find_candidates(g):
        r = apply_rewrite(r, cand, order)
    assert {n.op for n in r.nodes.values()} >= {"conv2d_partial", "requantize",
                                                "depthwise_conv2d_slice_into"}
    assert "cat" not in r.nodes and "act" not in r.nodes
    got = evaluate(r, inputs, weights)
    for out in g.outputs:
        assert got[out].dtype == np.int8 and got[out].shape == g[out].shape
        np.testing.assert_array_equal(got[out], expected[out])
    # The int32 accumulator of the rewritten conv equals the whole convolution's.
    whole = conv2d_int8(expected["act"], weights.w["conv"], weights.bias["conv"],
                        ConvParams(*[getattr(weights.params["conv"], f) for f in
                                     ("stride", "dilation", "padding", "input_zero_point")],
                                   keep_accumulator))
    np.testing.assert_array_equal(got[r["conv"].inputs[0]], whole)
