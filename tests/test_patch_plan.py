"""Patch-based execution (tvm_serenity.rewrite.patch): receptive fields against a brute-force
tap enumeration, run_patched byte-equal to the reference interpreter, the patched graph's peak
against an independent exhaustive evaluation of the memory rules, and the search."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tvm_serenity.frontend import ModelBuilder, parse_tflite, reference, tflite_to_graph
from tvm_serenity.frontend.reference import output_size, same_padding
from tvm_serenity.rewrite.patch import (PatchError, cuts, input_range, patch_regions,
                                        patched_graph,
                                        plan_for, plan_patches, prefix_chain, prefix_macs,
                                        run_patched, split_extent, without_inplace)
from tvm_serenity.memory import simulate
from tvm_serenity.schedule import schedule


# ------------------------------------------------------------------------ model building
def _q(rng):
    return float(rng.uniform(0.03, 0.1)), int(rng.integers(-20, 20))


def build_cnn(in_hw, cin, layers, seed=0, tail=True):
    """A chain of layers (dicts: op, kernel, stride, dilation, padding, cout/mult, pads; or
    ``{"op": "RESIDUAL", "layers": [...]}``, layers keeping the shape whose output is ADDed
    to their input), then (``tail``) a 1x1 conv and MEAN over H, W as the unpatched rest."""
    rng = np.random.default_rng(seed)
    b = ModelBuilder()
    shape = (1, *in_hw, cin)
    q = _q(rng)
    x0 = x = b.add_tensor(shape, scale=q[0], zero_point=q[1])

    def emit(spec, x, shape, q):
        op = spec["op"]
        _, h, w, c = shape
        if op == "RESIDUAL":
            y, out_shape, yq = x, shape, q
            for inner in spec["layers"]:
                y, out_shape, yq = emit(inner, y, out_shape, yq)
            assert out_shape == shape, "a residual block keeps the shape"
            q = _q(rng)
            s = b.add_tensor(shape, scale=q[0], zero_point=q[1])
            b.add_operator("ADD", [x, y], [s], {"fused_activation_function": "NONE"})
            return s, shape, q
        if op == "PAD":
            (t, bt), (lf, rt) = spec["pads"]
            paddings = b.add_tensor((4, 2), "int32", data=[[0, 0], [t, bt], [lf, rt], [0, 0]])
            shape = (1, h + t + bt, w + lf + rt, c)
            y = b.add_tensor(shape, scale=q[0], zero_point=q[1])
            b.add_operator("PAD", [x, paddings], [y])
            return y, shape, q
        kernel, stride = spec.get("kernel", (3, 3)), spec.get("stride", (1, 1))
        dilation, padding = spec.get("dilation", (1, 1)), spec.get("padding", "SAME")
        pt, pb, pl, pr = same_padding(padding, (h, w), kernel, stride, dilation)
        oh = output_size(h, kernel[0], stride[0], dilation[0], pt, pb)
        ow = output_size(w, kernel[1], stride[1], dilation[1], pl, pr)
        if op in ("AVERAGE_POOL_2D", "MAX_POOL_2D"):
            shape = (1, oh, ow, c)
            y = b.add_tensor(shape, scale=q[0], zero_point=q[1])
            b.add_operator(op, [x], [y], {"padding": padding, "stride_h": stride[0],
                                          "stride_w": stride[1], "filter_height": kernel[0],
                                          "filter_width": kernel[1],
                                          "fused_activation_function": "NONE"})
            return y, shape, q
        if op == "CONV_2D":
            cout = spec["cout"]
            wshape, axis = (cout, *kernel, c), 0
        else:
            cout = c * spec.get("mult", 1)
            wshape, axis = (1, *kernel, cout), 3
        wt = b.add_tensor(wshape, scale=rng.uniform(0.002, 0.02, cout), axis=axis,
                          data=rng.integers(-127, 128, wshape))
        bias = b.add_tensor((cout,), "int32", data=rng.integers(-3000, 3000, cout))
        q = _q(rng)
        shape = (1, oh, ow, cout)
        y = b.add_tensor(shape, scale=q[0], zero_point=q[1])
        opts = {"padding": padding, "stride_h": stride[0], "stride_w": stride[1],
                "dilation_h_factor": dilation[0], "dilation_w_factor": dilation[1],
                "fused_activation_function": spec.get("activation", "RELU6")}
        if op == "DEPTHWISE_CONV_2D":
            opts["depth_multiplier"] = spec.get("mult", 1)
        b.add_operator(op, [x, wt, bias], [y], opts)
        return y, shape, q

    for spec in list(layers) + ([{"op": "CONV_2D", "kernel": (1, 1), "cout": 5}] if tail else []):
        x, shape, q = emit(spec, x, shape, q)
    out = x
    if tail:
        axes = b.add_tensor((2,), "int32", data=[1, 2])
        q = _q(rng)
        out = b.add_tensor((1, shape[3]), scale=q[0], zero_point=q[1])
        b.add_operator("MEAN", [x, axes], [out], {"keep_dims": False})
    return parse_tflite(b.build([x0], [out]))


def inverted_residual(channels, expand=3, kernel=(3, 3), dilation=(1, 1)):
    """MobileNetV2's block at stride 1: 1x1 expand, depthwise, 1x1 project, + the input."""
    return {"op": "RESIDUAL", "layers": [
        {"op": "CONV_2D", "kernel": (1, 1), "cout": channels * expand},
        {"op": "DEPTHWISE_CONV_2D", "kernel": kernel, "dilation": dilation},
        {"op": "CONV_2D", "kernel": (1, 1), "cout": channels, "activation": "NONE"}]}


#: a first stage like MCUNet's: a strided conv, two residual blocks, a strided depthwise
RESIDUAL_STAGE = [{"op": "CONV_2D", "kernel": (3, 3), "stride": (2, 2), "cout": 4},
                  inverted_residual(4), inverted_residual(4, expand=2, kernel=(5, 5)),
                  {"op": "DEPTHWISE_CONV_2D", "kernel": (3, 3), "stride": (2, 2)}]


def _input(model, seed=1):
    t = model.tensors[model.inputs[0]]
    return np.random.default_rng(seed).integers(-128, 128, t.shape).astype(np.int8)


def assert_exact(model, prefix_length, grid, fold_pad=True, seed=1):
    graph = tflite_to_graph(model, fold_pad=fold_pad)
    plan = plan_for(graph, prefix_length, grid, time_limit=10)
    x = _input(model, seed)
    want = reference.run(model, x)
    got = run_patched(model, plan, x)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        assert g.tobytes() == w.tobytes()
    return plan


MIXED = [{"op": "CONV_2D", "kernel": (3, 3), "stride": (2, 2), "cout": 6},
         {"op": "DEPTHWISE_CONV_2D", "kernel": (3, 3), "dilation": (2, 2)},
         {"op": "CONV_2D", "kernel": (1, 1), "cout": 8},
         {"op": "MAX_POOL_2D", "kernel": (3, 3), "stride": (2, 2), "padding": "VALID"},
         {"op": "DEPTHWISE_CONV_2D", "kernel": (3, 3), "stride": (2, 2), "mult": 2},
         {"op": "AVERAGE_POOL_2D", "kernel": (2, 3), "stride": (1, 1), "padding": "SAME"}]


# ------------------------------------------------------------------------ geometry
def test_split_extent_even_and_covering():
    for extent in range(1, 20):
        for parts in range(1, extent + 1):
            spans = split_extent(extent, parts)
            sizes = [b - a for a, b in spans]
            assert spans[0][0] == 0 and spans[-1][1] == extent
            assert all(spans[i][1] == spans[i + 1][0] for i in range(parts - 1))
            assert max(sizes) - min(sizes) <= 1 and min(sizes) >= 1


def test_input_range_hand_computed():
    # 3x3 stride 2 SAME on 9 rows: 5 outputs, padding (1, 1)
    assert input_range((0, 2), 9, 3, 2, 1, 1) == ((0, 4), 1, 0)
    assert input_range((2, 5), 9, 3, 2, 1, 1) == ((3, 9), 0, 1)
    # dilation 2, kernel 3, SAME stride 1 on 10: padding (2, 2); rows [4, 6) read [2, 8)
    assert input_range((4, 6), 10, 3, 1, 2, 2) == ((2, 8), 0, 0)
    # 1x1: the same rows
    assert input_range((3, 7), 10, 1, 1, 1, 0) == ((3, 7), 0, 0)


def _brute_needed(out_rows, extent, kernel, stride, dilation, pad_before):
    """Every tap's padded coordinate of every output row in the span, enumerated: the span
    from the first to the last tap, clipped to the tensor, and what lies outside it."""
    taps = [o * stride - pad_before + t * dilation
            for o in range(*out_rows) for t in range(kernel)]
    first, last = min(taps), max(taps)
    return (max(first, 0), min(last + 1, extent)), max(0, -first), max(0, last + 1 - extent)


@given(st.integers(1, 5), st.integers(1, 3), st.integers(1, 3), st.integers(6, 30),
       st.sampled_from(["SAME", "VALID"]), st.data())
def test_input_range_matches_tap_enumeration(kernel, stride, dilation, extent, padding, data):
    eff = (kernel - 1) * dilation + 1
    assume(padding == "SAME" or eff <= extent)
    pb, pa = same_padding(padding, (extent, 1), (kernel, 1), (stride, 1), (dilation, 1))[:2]
    out = output_size(extent, kernel, stride, dilation, pb, pa)
    a = data.draw(st.integers(0, out - 1))
    b = data.draw(st.integers(a + 1, out))
    got = input_range((a, b), extent, kernel, stride, dilation, pb)
    assert got == _brute_needed((a, b), extent, kernel, stride, dilation, pb)
    assert got[1] <= pb and got[2] <= pa   # padding only where the full layer pads


def test_regions_chain_and_macs():
    model = build_cnn((20, 18), 3, MIXED[:3])
    graph = tflite_to_graph(model)
    name, chain = prefix_chain(graph)
    assert name == "input_0" and [w.op for w in chain] == [
        "conv2d", "depthwise_conv2d", "conv2d", "conv2d"]   # the tail's 1x1 conv chains too
    windows = chain[:3]
    regions = patch_regions(windows, (2, 3))
    assert len(regions) == 6
    for patch in regions:
        for lower, upper in zip(patch, patch[1:]):
            assert (lower.out_rows, lower.out_cols) == (upper.in_rows, upper.in_cols)
    # the last layer's patches tile its output exactly once
    cover = np.zeros(windows[-1].out_hw, dtype=int)
    for patch in regions:
        r = patch[-1]
        cover[slice(*r.out_rows), slice(*r.out_cols)] += 1
    assert (cover == 1).all()
    # 1x1 grid: no halo; a finer grid recomputes (the dilated depthwise needs 2-pixel halos)
    assert prefix_macs(windows, patch_regions(windows, (1, 1))) == prefix_macs(windows)
    assert prefix_macs(windows, regions) > prefix_macs(windows)


# ------------------------------------------------------------------------ exactness
@pytest.mark.parametrize("grid", [(1, 1), (2, 2), (3, 1), (1, 4), (4, 3)])
@pytest.mark.parametrize("prefix_length", [1, 3, 6])
def test_run_patched_exact_mixed(prefix_length, grid):
    model = build_cnn((23, 21), 3, MIXED, seed=prefix_length)
    graph = tflite_to_graph(model)
    last = prefix_chain(graph)[1][prefix_length - 1]
    if grid[0] > last.out_hw[0] or grid[1] > last.out_hw[1]:
        with pytest.raises(PatchError, match="does not fit"):
            plan_for(graph, prefix_length, grid)
        return
    assert_exact(model, prefix_length, grid)


#: explicit PADs, the first one foldable into the conv after it (fold_pad=True)
EXPLICIT_PADS = [{"op": "PAD", "pads": ((1, 2), (2, 0))},
                 {"op": "CONV_2D", "kernel": (3, 3), "stride": (2, 2), "padding": "VALID",
                  "cout": 4},
                 {"op": "PAD", "pads": ((0, 1), (1, 1))},
                 {"op": "MAX_POOL_2D", "kernel": (2, 2), "stride": (2, 2), "padding": "VALID"}]


@pytest.mark.parametrize("fold_pad", [True, False])
def test_run_patched_exact_explicit_pad(fold_pad):
    model = build_cnn((17, 15), 2, EXPLICIT_PADS, seed=5)
    graph = tflite_to_graph(model, fold_pad=fold_pad)
    chain = prefix_chain(graph)[1]
    # folded: the first PAD becomes the conv's padding (the second feeds a pool: never folded)
    assert [w.op for w in chain[:4 if fold_pad else 5]] == (
        ["conv2d", "pad", "max_pool2d", "conv2d"] if fold_pad
        else ["pad", "conv2d", "pad", "max_pool2d", "conv2d"])
    for k in range(1, len(chain) + 1):
        for grid in [(2, 2), (3, 2)]:
            if grid[0] <= chain[k - 1].out_hw[0] and grid[1] <= chain[k - 1].out_hw[1]:
                assert_exact(model, k, grid, fold_pad=fold_pad)


def test_residual_blocks_are_in_the_prefix_and_cut_only_after_their_add():
    model = build_cnn((20, 18), 3, RESIDUAL_STAGE, seed=4)
    graph = tflite_to_graph(model)
    name, chain = prefix_chain(graph)
    ops = [w.op for w in chain]
    assert ops[:9] == ["conv2d", "conv2d", "depthwise_conv2d", "conv2d", "add",
                       "conv2d", "depthwise_conv2d", "conv2d", "add"]
    # inside a block two tensors leave the layers so far (the block input, the branch)
    assert cuts(graph, name, chain)[:4] == [1, 5, 9, 10]
    with pytest.raises(PatchError, match=r"a prefix of 3 layers cannot end there, "
                                         r"'conv2d_0' is read after it"):
        plan_for(graph, 3, (2, 2))
    # the block input's patch region is what the expand conv needs (the depthwise halo),
    # the ADD reads a part of it
    regions = patch_regions(chain[:5], (2, 2))
    for patch in regions:
        by = {r.layer: r for r in patch}
        add = by[chain[4].name]
        first = by[chain[0].name]
        assert first.out_rows[0] <= add.in_rows[0] and add.in_rows[1] <= first.out_rows[1]
        assert (first.out_rows, first.out_cols) == (by[chain[1].name].in_rows,
                                                    by[chain[1].name].in_cols)
        assert (add.out_rows, add.out_cols) == (add.in_rows, add.in_cols)


@pytest.mark.parametrize("grid", [(2, 2), (3, 2), (1, 3)])
@pytest.mark.parametrize("prefix_length", [5, 9, 10])
def test_run_patched_exact_through_residual_blocks(prefix_length, grid):
    model = build_cnn((20, 18), 3, RESIDUAL_STAGE, seed=prefix_length)
    plan = assert_exact(model, prefix_length, grid)
    assert plan.layers[-1].startswith("add" if prefix_length < 10 else "depthwise")


@pytest.mark.parametrize("stream_input", [False, True])
def test_segments_each_start_from_the_output_the_one_before_wrote(stream_input):
    model = build_cnn((20, 18), 3, RESIDUAL_STAGE, seed=6)
    graph = tflite_to_graph(model)
    plan = plan_for(graph, [5, 4, 1], [(2, 2), (3, 2), (2, 1)], stream_input=stream_input)
    first, second, third = plan.segments
    assert first.input == "input_0" and second.input == first.exit
    assert third.input == second.exit and plan.layers[-1] == third.layers[-1]
    assert plan.extra_macs == sum(seg.extra_macs for seg in plan.segments)
    pg = plan.graph(graph)
    assert simulate(pg, plan.order).peak_bytes == plan.peak_bytes
    x = _input(model)
    assert run_patched(model, plan, x)[0].tobytes() == reference.run(model, x)[0].tobytes()
    with pytest.raises(PatchError, match="one grid per segment"):
        plan_for(graph, [5, 4], [(2, 2)])
    with pytest.raises(PatchError, match=r"after 'add_4.patch3': prefix length 9 is not "):
        plan_for(graph, [5, 9], [(2, 2), (2, 2)])


def _plateau():
    """Two wide 5x5 convolutions with narrow tensors around them: equal peaks far apart."""
    wide = [{"op": "CONV_2D", "kernel": (5, 5), "cout": 16},
            {"op": "CONV_2D", "kernel": (1, 1), "cout": 2}]
    return build_cnn((16, 16), 2, wide + [{"op": "CONV_2D", "kernel": (5, 5), "cout": 2}]
                     + wide, seed=12)


def test_search_lowers_a_plateau_segment_by_segment():
    """One segment over all five layers costs halos; two short ones, one per wide conv, give
    a lower peak: the first lowers only how many steps reach the peak, the second the peak."""
    model = _plateau()
    graph = tflite_to_graph(model)
    one = plan_patches(graph, max_segments=1, time_limit=60)
    plan = plan_patches(graph, time_limit=60)
    assert plan is not None and len(plan.segments) == 2
    assert plan.peak_bytes < plan.peak_unpatched
    assert one is None or plan.peak_bytes < one.peak_bytes
    assert plan.extra_macs_fraction <= 0.2
    x = _input(model)
    assert run_patched(model, plan, x)[0].tobytes() == reference.run(model, x)[0].tobytes()


_LAYER = st.one_of(
    st.builds(lambda k, s, d, p, c: {"op": "CONV_2D", "kernel": (k, k), "stride": (s, s),
                                     "dilation": (d, d), "padding": p, "cout": c},
              st.sampled_from([1, 2, 3]), st.sampled_from([1, 2]), st.sampled_from([1, 2]),
              st.sampled_from(["SAME", "VALID"]), st.integers(1, 4)),
    st.builds(lambda k, s, d, p, m: {"op": "DEPTHWISE_CONV_2D", "kernel": k, "stride": (s, s),
                                     "dilation": (d, d), "padding": p, "mult": m},
              st.sampled_from([(3, 3), (1, 3), (5, 5)]), st.sampled_from([1, 2]),
              st.sampled_from([1, 2]), st.sampled_from(["SAME", "VALID"]),
              st.sampled_from([1, 2])),
    st.builds(lambda op, k, s, p: {"op": op, "kernel": (k, k), "stride": (s, s), "padding": p},
              st.sampled_from(["AVERAGE_POOL_2D", "MAX_POOL_2D"]), st.sampled_from([2, 3]),
              st.sampled_from([1, 2]), st.sampled_from(["SAME", "VALID"])),
)


def _fits(in_hw, layers) -> bool:
    h, w = in_hw
    for spec in layers:
        k, s = spec["kernel"], spec["stride"]
        d = spec.get("dilation", (1, 1))
        pads = same_padding(spec["padding"], (h, w), k, s, d)
        h = output_size(h, k[0], s[0], d[0], *pads[:2])
        w = output_size(w, k[1], s[1], d[1], *pads[2:])
        if h < 1 or w < 1:
            return False
    return True


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.tuples(st.integers(6, 20), st.integers(6, 20)), st.integers(1, 3),
       st.lists(_LAYER, min_size=1, max_size=4), st.integers(0, 2 ** 16), st.data())
def test_run_patched_exact_random_cnns(in_hw, cin, layers, seed, data):
    assume(_fits(in_hw, layers))
    model = build_cnn(in_hw, cin, layers, seed=seed)
    graph = tflite_to_graph(model)
    chain = prefix_chain(graph)[1]
    k = data.draw(st.integers(1, len(layers)))
    oh, ow = chain[k - 1].out_hw
    grid = (data.draw(st.integers(1, min(oh, 5))), data.draw(st.integers(1, min(ow, 5))))
    assert_exact(model, k, grid, seed=seed)


# ------------------------------------------------------------------------ memory model
def _independent_peak(graph, order) -> int:
    """The memory rules re-stated (no tvm_serenity.memory): live set of tensors; a node's
    step needs the live tensors plus its output, or, when it runs in place (an alias, or a
    RiP workspace ``S``) and is the last reader of its first input, the live tensors with
    that input replaced by ``max(input, output)`` (alias) or ``S``."""
    readers = {n: [c for c in graph.nodes if n in graph[c].inputs] for n in graph.nodes}
    live = {n for n in graph.nodes if graph[n].op == "input"}
    done = set(live)
    peak = 0
    for v in order:
        node = graph[v]
        done.add(v)
        dying = [u for u in dict.fromkeys(node.inputs)
                 if all(r in done for r in readers[u]) and u not in graph.outputs]
        size = sum(graph[u].bytes for u in live)
        if node.inplace == "alias" and node.inputs[0] in dying:
            step = size - graph[node.inputs[0]].bytes + max(graph[node.inputs[0]].bytes,
                                                             node.bytes)
        elif node.inplace is not None and node.inputs[0] in dying:
            step = size - graph[node.inputs[0]].bytes + node.inplace
        else:
            step = size + node.bytes
        peak = max(peak, step)
        live.add(v)
        live.difference_update(dying)
        if not readers[v] and v not in graph.outputs:
            live.discard(v)
    return peak


def _all_orders(graph):
    ops = graph.op_names

    def extend(prefix, placed):
        if len(prefix) == len(ops):
            yield list(prefix)
            return
        for v in ops:
            if v not in placed and all(s in placed or graph[s].op == "input"
                                       for s in graph[v].inputs):
                placed.add(v)
                prefix.append(v)
                yield from extend(prefix, placed)
                prefix.pop()
                placed.discard(v)

    return extend([], set())


#: two layers whose patched graphs have few enough orders to try them all
TINY = [{"op": "CONV_2D", "kernel": (3, 3), "cout": 3},
        {"op": "DEPTHWISE_CONV_2D", "kernel": (3, 3), "stride": (2, 2)}]


@pytest.mark.parametrize("stream_input", [False, True])
def test_patched_graph_peak_is_the_brute_force_optimum(stream_input):
    model = build_cnn((12, 10), 2, TINY, seed=3)
    graph = tflite_to_graph(model)
    name, chain = prefix_chain(graph)
    regions = patch_regions(chain[:2], (2, 1))
    pg = patched_graph(graph, name, chain[:2], regions, stream_input)
    # the structure: Y0, 2 patches x 2 layers (the last an alias over the previous Y)
    alias = [n for n, node in pg.nodes.items() if node.inplace == "alias"]
    assert len(alias) == 2 and pg[alias[0]].inputs[0] == "depthwise_conv2d_1.alloc"
    assert pg[alias[1]].inputs[0] == alias[0]
    assert ("input_0" in pg.nodes) != stream_input
    orders = list(_all_orders(pg))
    assert len(orders) >= 8
    best = min(_independent_peak(pg, o) for o in orders)
    # hand check of one order: patch by patch
    first = regions[0]
    in_bytes = 12 * 10 * 2
    c1 = first[0].out_pixels * 3
    y = 6 * 5 * 3
    if not stream_input:
        # input + Y + patch 0's conv region while patch 0's depthwise writes into Y
        assert _independent_peak(pg, pg.op_names) >= in_bytes + y + c1
    res = schedule(pg, "serenity", time_limit=20)
    assert res.peak_bytes == best
    plan = plan_for(graph, 2, (2, 1), stream_input=stream_input, time_limit=20)
    assert plan.peak_bytes == best
    assert plan.peak_streamed <= plan.peak_full_input


def test_one_patch_costs_what_the_unpatched_layer_costs():
    """A 1x1 grid is the unpatched prefix with its output pre-allocated: without in-place
    kernels the peak is the same."""
    model = build_cnn((16, 16), 3, MIXED[:3], seed=7)
    graph = tflite_to_graph(model)
    plan = plan_for(graph, 3, (1, 1), inplace=False, time_limit=20)
    assert plan.peak_full_input == schedule(without_inplace(graph), "serenity").peak_bytes
    assert plan.extra_macs == 0


# ------------------------------------------------------------------------ search
def _funnel():
    """A wide early activation (the peak) shrinking fast: what patching is for."""
    return build_cnn((32, 32), 3, [
        {"op": "CONV_2D", "kernel": (3, 3), "cout": 16},
        {"op": "DEPTHWISE_CONV_2D", "kernel": (3, 3), "stride": (2, 2)},
        {"op": "CONV_2D", "kernel": (1, 1), "cout": 4},
        {"op": "MAX_POOL_2D", "kernel": (2, 2), "stride": (2, 2), "padding": "VALID"}],
        seed=11)


@pytest.mark.parametrize("stream_input", [False, True])
def test_search_lowers_the_peak_and_stays_exact(stream_input):
    model = _funnel()
    graph = tflite_to_graph(model)
    plan = plan_patches(graph, stream_input=stream_input, max_overhead=0.3, time_limit=60)
    assert plan is not None
    unpatched = schedule(graph, "serenity").peak_bytes
    assert plan.peak_unpatched == unpatched
    assert plan.peak_bytes < unpatched
    assert plan.extra_macs_fraction <= 0.3
    # the reported peak is the memory model's for the reported order
    assert simulate(plan.graph(graph), plan.order).peak_bytes == plan.peak_bytes
    x = _input(model)
    assert run_patched(model, plan, x)[0].tobytes() == reference.run(model, x)[0].tobytes()


def test_search_respects_the_overhead_limit():
    """No extra MAC allowed: only cached strips (no recomputation) remain, and they still
    lower the peak."""
    model = _funnel()
    graph = tflite_to_graph(model)
    plan = plan_patches(graph, max_overhead=0.0, time_limit=30)
    assert plan is not None and plan.peak_bytes < plan.peak_unpatched
    assert all(seg.cached for seg in plan.segments) and plan.extra_macs <= 0
    x = _input(model)
    assert run_patched(model, plan, x)[0].tobytes() == reference.run(model, x)[0].tobytes()


def test_no_plan_when_patching_cannot_help():
    """One 3x3 conv: input and full output are both live whatever the grid, and the
    unpatched conv needs exactly that."""
    model = build_cnn((10, 10), 4, [{"op": "CONV_2D", "kernel": (3, 3), "cout": 4}],
                      tail=False)
    graph = tflite_to_graph(model)
    assert plan_patches(graph, inplace=False, time_limit=20) is None
    for grid in itertools.product([1, 2, 5], repeat=2):
        assert plan_for(graph, 1, grid, inplace=False).peak_full_input == 2 * 400
