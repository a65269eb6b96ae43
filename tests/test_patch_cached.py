"""Cached-row (line-buffer) segments of a patch plan (tvm_serenity.rewrite.patch): strip
regions against a tap enumeration, run_patched byte-equal to the reference interpreter
(fixed cases and random small CNNs), the patched graph's peak against an exhaustive
evaluation of the memory rules, the search's chain of segments against every chain of the
same candidates, grids refused in one line, and the C build bit-exact on the host (on
rp2040js / QEMU: test_patch_c.py)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from test_patch_c import C_LAYER, C_MIXED, _compile_and_check, _write
from test_patch_plan import (_LAYER, EXPLICIT_PADS, MIXED, RESIDUAL_STAGE, TINY, _all_orders,
                             _fits, _independent_peak, _input, _plateau, build_cnn,
                             inverted_residual)
from toolchain import needs_cc
from tvm_serenity.cli import main
from tvm_serenity.deploy import compile_tflite, load_plan, run
from tvm_serenity.errors import SerenityError
from tvm_serenity.frontend import reference, tflite_to_graph
from tvm_serenity.memory import simulate
from tvm_serenity.rewrite.patch import (PatchError, _apply, _Search, _segment, _spliced,
                                        cuts, parse_grid, plan_for, plan_patches,
                                        prefix_chain, run_patched, split_extent,
                                        strip_regions, UNPATCHED)
from tvm_serenity.schedule import schedule


def _taps(rows, w) -> set[int]:
    """Every input row a layer's output ``rows`` read, by enumerating its taps (clipped)."""
    return {r * w.stride[0] - w.padding[0] + t * w.dilation[0]
            for r in range(*rows) for t in range(w.kernel[0])} & set(range(w.in_hw[0]))


def assert_cached_exact(model, lengths, grids, fold_pad=True, seed=1):
    graph = tflite_to_graph(model, fold_pad=fold_pad)
    plan = plan_for(graph, lengths, grids, time_limit=10)
    x = _input(model, seed)
    for got, want in zip(run_patched(model, plan, x), reference.run(model, x)):
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes()
    return plan


# ------------------------------------------------------------------------ regions
@pytest.mark.parametrize("layers, hw, length", [(MIXED, (23, 21), 6),
                                                (RESIDUAL_STAGE, (20, 18), 10)])
def test_strips_compute_each_row_once_and_keep_what_readers_read(layers, hw, length):
    graph = tflite_to_graph(build_cnn(hw, 3, layers, seed=2))
    name, chain = prefix_chain(graph)
    windows = chain[:length]
    readers = {w.name: [c for c in windows if w.name in c.inputs] for w in windows}
    for strips in range(1, windows[-1].out_hw[0] + 1):
        regions = strip_regions(windows, strips)
        assert [r[-1].out_rows for r in regions] == split_extent(windows[-1].out_hw[0], strips)
        for k, w in enumerate(windows):
            news = [r[k].out_rows for r in regions]
            # the new rows follow each other: every row computed once
            assert all(a[1] == b[0] for a, b in zip(news, news[1:])) and news[0][0] == 0
            held = None
            for s, strip in enumerate(regions):
                r = strip[k]
                if w is windows[-1]:
                    assert r.buffer_rows is None
                    continue
                if r.out_rows[0] < r.out_rows[1]:
                    # the buffer: kept rows of the one before, then the new rows
                    assert r.buffer_rows[1] == r.out_rows[1]
                    assert held is None or held[0] <= r.buffer_rows[0] <= r.out_rows[0]
                    held = r.buffer_rows
                    # it starts at a row read now or later (else nothing is kept)
                    later = set().union(*(_taps(t[windows.index(c)].out_rows, c)
                                          for t in regions[s:] for c in readers[w.name]))
                    assert held[0] in later or held[0] == r.out_rows[0]
                else:           # nothing new: the buffer stays as it is
                    assert r.buffer_rows == held
                # what each reader's new rows read (tap enumeration) lies in the buffer
                for c in readers[w.name]:
                    rc = strip[windows.index(c)]
                    need = _taps(rc.out_rows, c)
                    assert need <= set(range(*held)), (w.name, c.name, s)
                    assert need <= set(range(*rc.in_rows))


def test_hand_computed_line_buffers():
    """Two 3x3 convs (SAME, stride 1) on 8 rows in 1-row strips: the first keeps 3 rows,
    after two at strip 0; the second writes its row straight into the output."""
    model = build_cnn((8, 5), 2, [{"op": "CONV_2D", "kernel": (3, 3), "cout": 3},
                                  {"op": "CONV_2D", "kernel": (3, 3), "cout": 4}], tail=False)
    graph = tflite_to_graph(model)
    plan = plan_for(graph, 2, "8x1c", time_limit=10)
    (seg,) = plan.segments
    assert seg.cached and seg.label == "8x1c" and seg.extra_macs == 0
    first = [strip[0] for strip in seg.regions]
    assert [r.out_rows for r in first] == [(0, 2)] + [(s + 1, s + 2) for s in range(1, 7)] \
        + [(8, 8)]
    # (strip 7 needs no new row: the buffer stays rows 5..7)
    assert [r.buffer_rows for r in first] == [(0, 2)] + [(s - 1, s + 2) for s in range(1, 7)] \
        + [(5, 8)]
    g = plan.graph(graph)
    # one node per strip where it computes rows; from strip 2 on an alias over the one before
    # that keeps 2 rows of 5 x 3 channels (from 1 row into the buffer before)
    nodes = [g[f"conv2d_0.patch{s}"] for s in range(7)]
    assert [n.bytes for n in nodes] == [2 * 5 * 3] + [3 * 5 * 3] * 6
    assert nodes[1].inplace == "alias" and nodes[1].inputs[0] == "conv2d_0.patch0"
    assert nodes[1].attrs["patch"]["keep"] == [0, 2 * 5 * 3]
    assert nodes[2].attrs["patch"]["keep"] == [5 * 3, 2 * 5 * 3]
    assert "conv2d_0.patch7" not in g.nodes
    # the last strip's conv reads rows 6, 7 of the strip-6 buffer (rows 5..7): offset 1 row
    assert g["conv2d_1.patch7"].attrs["patch"]["in_offsets"] == [5 * 3]
    assert g["conv2d_1.patch7"].inputs[1:] == ("conv2d_0.patch6",)


# ------------------------------------------------------------------------ exactness
@pytest.mark.parametrize("strips", [1, 2, 3, 5, 100])
@pytest.mark.parametrize("length", [1, 3, 6])
def test_cached_exact_mixed(length, strips):
    model = build_cnn((23, 21), 3, MIXED, seed=length)
    chain = prefix_chain(tflite_to_graph(model))[1]
    assert_cached_exact(model, length, f"{min(strips, chain[length - 1].out_hw[0])}x1c")


@pytest.mark.parametrize("strips", [2, 4, 9])
@pytest.mark.parametrize("lengths", [[5], [9], [10], [1, 4, 4, 1], [5, 5]])
def test_cached_exact_through_residual_blocks(lengths, strips):
    model = build_cnn((20, 18), 3, RESIDUAL_STAGE, seed=len(lengths))
    graph = tflite_to_graph(model)
    name, chain = prefix_chain(graph)
    ends = list(itertools.accumulate(lengths))
    assert all(k in cuts(graph, name, chain) for k in ends)
    assert_cached_exact(model, lengths, [f"{min(strips, chain[k - 1].out_hw[0])}x1c"
                                         for k in ends])


@pytest.mark.parametrize("fold_pad", [True, False])
def test_cached_exact_explicit_pads(fold_pad):
    """Strips of an explicit PAD's output may lie entirely in its padding (no input row)."""
    model = build_cnn((17, 15), 2, EXPLICIT_PADS, seed=5)
    graph = tflite_to_graph(model, fold_pad=fold_pad)
    name, chain = prefix_chain(graph)
    for k in cuts(graph, name, chain):
        for strips in range(1, chain[k - 1].out_hw[0] + 1):
            assert_cached_exact(model, k, f"{strips}x1c", fold_pad=fold_pad)


def test_cached_and_recomputed_segments_mix():
    model = build_cnn((20, 18), 3, RESIDUAL_STAGE, seed=8)
    plan = assert_cached_exact(model, [5, 4, 1], ["10x1c", (3, 2), "3x1c"])
    assert [seg.cached for seg in plan.segments] == [True, False, True]
    assert plan.segments[0].extra_macs == 0 < plan.segments[1].extra_macs


#: a 1x1 conv to 3 channels and an inverted-residual block on them
_TO_3 = {"op": "CONV_2D", "kernel": (1, 1), "stride": (1, 1), "padding": "SAME", "cout": 3}
_RESIDUAL = st.builds(lambda e, k, d: [_TO_3, inverted_residual(3, e, k, d)],
                      st.integers(1, 3), st.sampled_from([(3, 3), (5, 5), (1, 3)]),
                      st.sampled_from([(1, 1), (2, 2)]))


def _flat(parts) -> list[dict]:
    return [spec for part in parts for spec in part]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.tuples(st.integers(6, 20), st.integers(6, 20)), st.integers(1, 3),
       st.lists(st.one_of(_LAYER.map(lambda spec: [spec]), _RESIDUAL), min_size=1,
                max_size=4).map(_flat),
       st.integers(0, 2 ** 16), st.data())
def test_cached_exact_random_cnns(in_hw, cin, layers, seed, data):
    """Strides, dilation, SAME/VALID padding, depthwise, pointwise, pools and residual
    blocks."""
    assume(_fits(in_hw, [spec for spec in layers if spec["op"] != "RESIDUAL"]))
    model = build_cnn(in_hw, cin, layers, seed=seed)
    graph = tflite_to_graph(model)
    name, chain = prefix_chain(graph)
    k = data.draw(st.sampled_from(cuts(graph, name, chain)))
    strips = data.draw(st.integers(1, chain[k - 1].out_hw[0]))
    assert_cached_exact(model, k, f"{strips}x1c", seed=seed)


# ------------------------------------------------------------------------ memory model
@pytest.mark.parametrize("stream_input", [False, True])
def test_cached_graph_peak_is_the_brute_force_optimum(stream_input):
    model = build_cnn((9, 6), 2, TINY, seed=3)
    graph = tflite_to_graph(model)
    plan = plan_for(graph, 2, "3x1c", stream_input=stream_input, time_limit=20)
    pg = plan.graph(graph)
    chained = [n for n in pg.nodes.values() if n.op == "conv2d" and n.inplace == "alias"]
    assert chained and all(n.attrs["patch"]["keep"] for n in chained)
    orders = list(_all_orders(pg))
    assert len(orders) >= 8
    best = min(_independent_peak(pg, o) for o in orders)
    assert schedule(pg, "serenity", time_limit=20).peak_bytes == best == plan.peak_bytes
    assert plan.extra_macs == 0


def _chains(positions, stops, n):
    """Every way to cover chain positions with segments (start, stop) or leave them."""
    if not positions or positions[0] >= n:
        yield ()
        return
    p, rest = positions[0], positions[1:]
    yield from _chains(rest, stops, n)                      # stretch p.. left unpatched
    for q in (k for k in stops if k > p):
        for tail in _chains([x for x in rest if x >= q], stops, n):
            yield ((p, q),) + tail


@pytest.mark.parametrize("stream_input", [False, True])
def test_search_chain_is_the_best_of_every_chain_of_its_candidates(stream_input):
    """The dynamic program against every chain of the same priced segments (cached, one-row
    strips), each chain's peak simulated on the whole patched graph in sequence."""
    model = _plateau()
    graph = tflite_to_graph(model)
    base = schedule(graph, "serenity", time_limit=20)
    name, chain = prefix_chain(graph)
    search = _Search(graph, base, name, chain, stream_input, 0.0, None)
    for p, q in search.pairs():
        search.price(p, q, (chain[q - 1].out_hw[0], 1), True)
    peaks = []
    for pairs in _chains(search.positions, search.stops, len(chain)):
        segments, g = [], graph
        for p, q in pairs:
            start = segments[-1].exit if segments and segments[-1].layers[-1] == \
                chain[p - 1].name else (None if p == 0 else chain[p - 1].name)
            segments.append(_segment(g, start, q - p, f"{chain[q - 1].out_hw[0]}x1c", None))
            g = segments[-1].apply(g, stream_input and p == 0)
        order = _spliced(base.order, g, segments)
        peaks.append(simulate(g, order).peak_bytes)
    assert len(peaks) > 10
    assert search.best()[0] == min(peaks) < base.peak_bytes


def test_search_prefers_cached_rows_at_equal_peak():
    """Where one-row cached strips reach the lowest peak, no MAC is spent on halos."""
    model = _plateau()
    graph = tflite_to_graph(model)
    plan = plan_patches(graph, time_limit=60)
    cached = plan_patches(graph, max_overhead=0.0, time_limit=60)
    assert plan.peak_bytes <= cached.peak_bytes < plan.peak_unpatched
    if plan.peak_bytes == cached.peak_bytes:
        assert plan.extra_macs <= 0 and all(seg.cached for seg in plan.segments)
    x = _input(model)
    assert run_patched(model, plan, x)[0].tobytes() == reference.run(model, x)[0].tobytes()


# ------------------------------------------------------------------------ refusals
@pytest.mark.parametrize("grid, message", [
    ("4x2c", r"cached row strips span the full width \(4x1c\)"),
    ("0x1c", "must be positive"), ("4x", "neither"), ("4x4cc", "neither"),
    ("c4x1", "neither"), ((2, "2"), "neither"), ((2, 2, 1), "neither"), (True, "neither")])
def test_malformed_grids_are_refused_in_one_line(grid, message):
    with pytest.raises(PatchError, match=message) as info:
        parse_grid(grid)
    assert "\n" not in str(info.value)


def test_grid_spellings():
    assert parse_grid("8x8") == (8, 8, False) and parse_grid((3, 2)) == (3, 2, False)
    assert parse_grid(" 22X1C ") == (22, 1, True)


def test_a_cached_grid_taller_than_the_output_is_refused():
    graph = tflite_to_graph(build_cnn((12, 10), 2, C_MIXED[:2], seed=1))
    with pytest.raises(PatchError, match=r"grid 7x1c does not fit its 6x5 output"):
        plan_for(graph, 1, "7x1c")


@needs_cc
def test_malformed_cached_grids_are_refused_by_the_front_door(tmp_path, capsys):
    path = _write(build_cnn((12, 12), 2, C_MIXED[:2], seed=1), tmp_path)
    for grid in ("4x2c", "3x1cc"):
        with pytest.raises(SerenityError, match="patch_grid: grid") as info:
            compile_tflite(path, "host", tmp_path / "out", build=False, patch=True,
                           patch_layers=1, patch_grid=grid)
        assert "\n" not in str(info.value) and not (tmp_path / "out").exists()
        assert main(["compile", str(path), "--target", "host", "-o", str(tmp_path / "bad"),
                     "--patch", "--patch-layers", "1", "--patch-grid", f"2x2,{grid}"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("tvm-serenity: error: --patch-grid: grid") and \
            err.count("\n") == 1


# ------------------------------------------------------------------------ C
@needs_cc
@pytest.mark.parametrize("stream_input", [False, True])
@pytest.mark.parametrize("rip", [True, False])
@pytest.mark.parametrize("layers, grid", [(3, "11x1c"), (6, "3x1c"), (6, "1x1c")])
def test_cached_mixed_cnn_bit_exact_on_host(tmp_path, layers, grid, rip, stream_input):
    model = build_cnn((23, 21), 3, C_MIXED, seed=layers)
    compiled, _ = _compile_and_check(_write(model, tmp_path), tmp_path / "out", patch=True,
                                     patch_layers=layers, patch_grid=grid, rip=rip,
                                     stream_input=stream_input)
    (seg,) = compiled.patch.segments
    assert seg.cached and compiled.patch.extra_macs <= 0
    plan = load_plan(tmp_path / "out")["patch"]
    assert plan["segments"][0]["kind"] == "cached rows" and plan["segments"][0]["label"] == grid
    assert plan["input_streamed"] is stream_input
    # the arena plan is made for the patched graph: its liveness peak is the memory model's
    assert compiled.plan.liveness_peak_bytes == simulate(compiled.graph,
                                                         compiled.plan.order).peak_bytes
    kept = [n for n in compiled.graph.nodes.values()
            if isinstance(n.attrs.get("patch"), dict) and n.attrs["patch"]["keep"]]
    model_c = (tmp_path / "out" / "model" / "model.c").read_text()
    if grid != "1x1c":
        assert kept and "memmove(" in model_c
    assert f"in 1 segment ({grid}; c: cached rows)" in compiled.summary()


@needs_cc
@pytest.mark.parametrize("stream_input", [False, True])
@pytest.mark.parametrize("grids, kinds", [
    ("10x1c,3x2,5x1c", ["cached rows", "recomputed halos", "cached rows"]),
    ("none,10x1c,5x1c", ["cached rows", "cached rows"])])
def test_cached_residual_blocks_bit_exact_on_host_from_the_cli(tmp_path, capsys, grids, kinds,
                                                                 stream_input):
    """--patch-grid 10x1c,3x2,5x1c: a cached stage with its first block, a recomputed block,
    a cached strided depthwise; none,10x1c,5x1c leaves the first block as it is."""
    model = build_cnn((20, 18), 3, RESIDUAL_STAGE, seed=9)
    path = _write(model, tmp_path)
    out = tmp_path / "out"
    argv = ["compile", str(path), "--target", "host", "-o", str(out), "--patch",
            "--patch-layers", "5,4,1", "--patch-grid", grids]
    assert main(argv + (["--stream-input"] if stream_input else [])) == 0
    labels = [g for g in grids.split(",") if g != UNPATCHED]
    assert f"in {len(labels)} segments ({' then '.join(labels)}; c: cached rows)" in \
        capsys.readouterr().out
    run(out, host=True)                      # raises on the first differing output byte
    plan = load_plan(out)["patch"]
    assert [seg["kind"] for seg in plan["segments"]] == kinds
    assert [len(seg["patches"]) for seg in plan["segments"]] == \
        [int(label.split("x")[0]) * (1 if label.endswith("c") else 2) for label in labels]
    assert plan["forced_by"] == f"--patch-layers 5,4,1 --patch-grid {grids}"
    # only a plan whose first segment reads the input streams it
    assert plan["input_streamed"] is (stream_input and not grids.startswith(UNPATCHED))


@needs_cc
@settings(max_examples=10, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.tuples(st.integers(6, 16), st.integers(6, 16)), st.integers(1, 3),
       st.lists(st.one_of(C_LAYER.map(lambda spec: [spec]), _RESIDUAL), min_size=1,
                max_size=3).map(_flat),
       st.integers(0, 2 ** 16), st.booleans(), st.booleans(), st.data())
def test_random_cnns_cached_bit_exact_on_host(tmp_path_factory, in_hw, cin, layers, seed,
                                              rip, stream_input, data):
    assume(_fits(in_hw, [spec for spec in layers if spec["op"] != "RESIDUAL"]))
    model = build_cnn(in_hw, cin, layers, seed=seed)
    graph = tflite_to_graph(model, fold_pad=True)
    name, chain = prefix_chain(graph)
    k = data.draw(st.sampled_from(cuts(graph, name, chain)))
    strips = data.draw(st.integers(1, chain[k - 1].out_hw[0]))
    tmp = tmp_path_factory.mktemp("cached")
    _compile_and_check(_write(model, tmp), tmp / "out", patch=True, patch_layers=k,
                       patch_grid=f"{strips}x1c", rip=rip, stream_input=stream_input,
                       seed=seed)


@needs_cc
def test_search_with_cached_rows_builds_bit_exact_on_host(tmp_path):
    """The search's own plan (cached and recomputed segments as it chose) in C."""
    model = build_cnn((24, 22), 3, RESIDUAL_STAGE + [inverted_residual(4, 3, (5, 5))],
                      seed=13)
    compiled, _ = _compile_and_check(_write(model, tmp_path), tmp_path / "out", patch=True,
                                     stream_input=True)
    p = compiled.patch
    assert p is not None and p.peak_streamed < p.peak_unpatched
    assert any(seg.cached for seg in p.segments)


def test_plan_graph_streams_only_a_segment_that_reads_the_input():
    """A chain may leave the first layers unpatched: then nothing reads the input region by
    region, and the streamed graph is the resident one."""
    graph = tflite_to_graph(_plateau())
    name, chain = prefix_chain(graph)
    start = cuts(graph, name, chain)[0]
    plan = plan_for(graph, 2, "16x1c", time_limit=10)
    later = _apply(graph, plan.segments, True)
    assert name not in later.nodes and plan.peak_streamed <= plan.peak_full_input
    seg = _segment(graph, chain[start - 1].name, 2, "16x1c", None)
    assert name in _apply(graph, [seg], True).nodes


def test_a_searched_plan_is_forced_again_by_its_layout():
    """PatchPlan.layout (what plan.json's forced_by spells for the CLI) gives the same plan,
    a stretch left unpatched between two segments included."""
    graph = tflite_to_graph(_plateau())
    plan = plan_patches(graph, time_limit=60)
    assert (1, UNPATCHED) in plan.layout and len(plan.segments) == 2
    again = plan_for(graph, [k for k, _ in plan.layout], [g for _, g in plan.layout],
                     time_limit=20)
    assert [s.label for s in again.segments] == [s.label for s in plan.segments]
    assert again.layers == plan.layers and again.layout == plan.layout
    assert again.peak_bytes == plan.peak_bytes
    with pytest.raises(PatchError, match="every grid is 'none', no segment"):
        plan_for(graph, [2], [UNPATCHED])
    with pytest.raises(PatchError, match="prefix length 3 is not within the 2 window layers"):
        plan_for(graph, [4, 3], [UNPATCHED, "4x1c"])
