"""Patch-based execution in C (``compile_tflite(..., patch=True)``): every output byte equal to
the reference interpreter on the host (and on rp2040js / QEMU, slow) for random small CNNs
with strides, dilation, padding, depthwise, pointwise and pooling layers, for a float input
quantized patch by patch and elementwise layers in the prefix, and for the shared models the
search patches; ``plan.json`` and the summary say what was decided."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from test_patch_plan import (_LAYER, MIXED, RESIDUAL_STAGE, _fits, build_cnn,
                             inverted_residual)
from toolchain import needs_cc, needs_qemu, needs_rp2040js
from tvm_serenity.cli import main
from tvm_serenity.codegen.graph_c import PATCH_OPS
from tvm_serenity.deploy import compile_tflite, load_plan, run
from tvm_serenity.errors import SerenityError
from tvm_serenity.frontend import ModelBuilder, parse_tflite, tflite_to_graph
from tvm_serenity.frontend.builder import tflite_bytes
from tvm_serenity.memory import simulate
from tvm_serenity.report import write_compiled_report
from tvm_serenity.rewrite.patch import (PatchError, cuts, patch_regions, patched_graph,
                                        prefix_chain)

MODELS = Path(__file__).resolve().parents[2] / "shared" / "models"
# the MCU's depthwise kernels have depth multiplier 1 (with or without patches)
C_MIXED = [{**layer, "mult": 1} if "mult" in layer else layer for layer in MIXED]
C_LAYER = _LAYER.map(lambda layer: {**layer, "mult": 1} if "mult" in layer else layer)


def _write(model, tmp_path, name="model") -> Path:
    path = tmp_path / f"{name}.tflite"
    path.write_bytes(tflite_bytes(model))
    return path


def _compile_and_check(path, out, target="host", **options):
    """Compile with the options, run on ``target`` (run() compares every output byte with the
    reference interpreter and raises on the first difference) and return the build."""
    compiled = compile_tflite(path, target, out, time_limit=10, **options)
    result = run(out, host=target == "host")
    assert result.arena_bytes == compiled.arena_bytes
    return compiled, result


@needs_cc
@pytest.mark.parametrize("rip", [True, False])
@pytest.mark.parametrize("layers, grid", [(1, (2, 2)), (3, (3, 2)), (6, (2, 3))])
def test_forced_plans_of_a_mixed_cnn_are_bit_exact_on_host(tmp_path, layers, grid, rip):
    model = build_cnn((23, 21), 3, C_MIXED, seed=layers)
    path = _write(model, tmp_path)
    compiled, _ = _compile_and_check(path, tmp_path / "out", patch=True, patch_layers=layers,
                                     patch_grid=grid, rip=rip)
    p = compiled.patch
    assert p is not None and len(p.layers) == layers and p.grid == grid
    plan = load_plan(tmp_path / "out")
    (segment,) = plan["patch"]["segments"]
    assert plan["patch"]["applied"] and segment["grid"] == list(grid)
    assert segment["kind"] == "recomputed halos" and segment["label"] == f"{grid[0]}x{grid[1]}"
    assert len(segment["patches"]) == grid[0] * grid[1]
    # the arena plan is made for the patched graph: its liveness peak is the memory model's
    assert compiled.plan.liveness_peak_bytes == simulate(compiled.graph,
                                                         compiled.plan.order).peak_bytes
    assert sum(1 for n in compiled.graph.nodes.values() if "patch" in n.attrs) \
        == layers * grid[0] * grid[1]
    # patches that read a patch tensor of their own run in place (RiP) where the plan pairs
    # them; the patches of the last layer write into the full output (its alias chain)
    layouts = {s.layout for s in compiled.emitted.steps if "/patch" in s.op}
    assert "alias" in layouts and ("rip" in layouts) <= rip
    if rip and layers == 6:
        assert "rip" in layouts
    # the report draws the grid and the memory over time with and without the patches
    report = write_compiled_report(tmp_path / "out")
    assert report.images["patches"].is_file()
    without = report.memory_series["tvm-serenity without patches"]
    assert max(without) == p.peak_unpatched if rip else max(without) >= p.peak_unpatched
    assert max(report.memory_series["tvm-serenity"]) == compiled.plan.liveness_peak_bytes
    assert "Patch grid" in report.html.read_text()
    # the patches of a layer share its constant tables: one weight array per conv layer
    model_c = (tmp_path / "out" / "model" / "model.c").read_text()
    for name in p.layers:
        if name.startswith("conv2d"):
            assert model_c.count(f"{name}_weight[") == 1


@needs_cc
@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.tuples(st.integers(6, 18), st.integers(6, 18)), st.integers(1, 3),
       st.lists(C_LAYER, min_size=1, max_size=4), st.integers(0, 2 ** 16), st.booleans(),
       st.data())
def test_random_cnns_patched_are_bit_exact_on_host(tmp_path_factory, in_hw, cin, layers, seed,
                                                   rip, data):
    assume(_fits(in_hw, layers))
    model = build_cnn(in_hw, cin, layers, seed=seed)
    chain = prefix_chain(tflite_to_graph(model, fold_pad=True))[1]
    k = data.draw(st.integers(1, len(chain)))
    oh, ow = chain[k - 1].out_hw
    grid = (data.draw(st.integers(1, min(oh, 4))), data.draw(st.integers(1, min(ow, 4))))
    tmp = tmp_path_factory.mktemp("cnn")
    _compile_and_check(_write(model, tmp), tmp / "out", patch=True, patch_layers=k,
                       patch_grid=grid, rip=rip, seed=seed)


@needs_cc
@pytest.mark.parametrize("rip", [True, False])
@pytest.mark.parametrize("layers, grid", [(5, (2, 2)), (9, (3, 2)), (10, (2, 3)), (1, (4, 4))])
def test_residual_blocks_patched_are_bit_exact_on_host(tmp_path, layers, grid, rip):
    """The residual ADD reads a window of its block input's patch (row by row), the expand
    conv the whole of it; the exit may be the ADD itself."""
    model = build_cnn((20, 18), 3, RESIDUAL_STAGE, seed=layers)
    compiled, _ = _compile_and_check(_write(model, tmp_path), tmp_path / "out", patch=True,
                                     patch_layers=layers, patch_grid=grid, rip=rip)
    assert len(compiled.patch.layers) == layers
    adds = [n for n in compiled.graph.nodes.values()
            if "patch" in n.attrs and n.op == "add"]
    assert len(adds) == (0 if layers < 5 else 1 if layers < 9 else 2) * grid[0] * grid[1]


@needs_cc
@settings(max_examples=8, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.integers(8, 16), st.integers(1, 3), st.integers(1, 3), st.sampled_from([1, 2]),
       st.sampled_from([(3, 3), (5, 5), (1, 3)]), st.sampled_from([(1, 1), (2, 2)]),
       st.integers(0, 2 ** 16), st.data())
def test_random_residual_stages_bit_exact_on_host(tmp_path_factory, hw, cin, blocks, expand,
                                                  kernel, dilation, seed, data):
    layers = [{"op": "CONV_2D", "kernel": (3, 3), "stride": (2, 2), "cout": 3}] + \
        [inverted_residual(3, expand, kernel, dilation) for _ in range(blocks)]
    model = build_cnn((hw, hw + 1), cin, layers, seed=seed)
    graph = tflite_to_graph(model, fold_pad=True)
    lengths, grids, start = [], [], None
    for _ in range(data.draw(st.integers(1, 2))):      # one or two segments
        name, chain = prefix_chain(graph, start=start)
        possible = cuts(graph, name, chain)
        if not possible:
            break
        k = data.draw(st.sampled_from(possible))
        oh, ow = chain[k - 1].out_hw
        grid = (data.draw(st.integers(1, min(oh, 4))), data.draw(st.integers(1, min(ow, 4))))
        lengths.append(k)
        grids.append(grid)
        graph = patched_graph(graph, name, chain[:k], patch_regions(chain[:k], grid))
        start = f"{chain[k - 1].name}.patch{grid[0] * grid[1] - 1}"
    tmp = tmp_path_factory.mktemp("res")
    _compile_and_check(_write(model, tmp), tmp / "out", patch=True, patch_layers=lengths,
                       patch_grid=grids, seed=seed)


@needs_cc
@pytest.mark.parametrize("stream_input", [False, True])
def test_two_segments_from_the_cli_are_bit_exact_on_host(tmp_path, capsys, stream_input):
    """--patch-layers 5,4 --patch-grid 2x2,3x2: the first block patched from the input, the
    second from the full output the first wrote."""
    model = build_cnn((20, 18), 3, RESIDUAL_STAGE, seed=9)
    path = _write(model, tmp_path)
    out = tmp_path / "out"
    argv = ["compile", str(path), "--target", "host", "-o", str(out), "--patch",
            "--patch-layers", "5,4", "--patch-grid", "2x2,3x2"]
    assert main(argv + (["--stream-input"] if stream_input else [])) == 0
    assert "in 2 segments (2x2 then 3x2)" in capsys.readouterr().out
    run(out, host=True)                      # raises on the first differing output byte
    plan = load_plan(out)["patch"]
    assert [seg["grid"] for seg in plan["segments"]] == [[2, 2], [3, 2]]
    assert len(plan["layers"]) == 9 and plan["segments"][1]["reads"] == "add_4.patch3"
    for bad, message in ((["--patch-layers", "5,x", "--patch-grid", "2x2"], "numbers joined"),
                         (["--patch-layers", "5,0", "--patch-grid", "2x2,2x2"],
                          "--patch-layers must be a positive number"),
                         (["--patch-layers", "5,4", "--patch-grid", "2x2"], "one per segment"),
                         (["--patch-layers", "5,3", "--patch-grid", "2x2,2x2"],
                          "cannot end there"),
                         (["--patch-layers", "5"], "--patch-layers and --patch-grid force"),
                         (["--patch-overhead", "-1"], "--patch-overhead must be a fraction")):
        assert main(["compile", str(path), "--target", "host", "-o", str(tmp_path / "bad"),
                     "--patch", *bad]) != 0
        assert message in capsys.readouterr().err
    # the flags that only mean something with --patch, named as flags
    for alone in (["--stream-input"], ["--patch-overhead", "0.1"],
                  ["--patch-layers", "5", "--patch-grid", "2x2"]):
        assert main(["compile", str(path), "--target", "host", "-o", str(tmp_path / "bad"),
                     *alone]) != 0
        assert "go with --patch" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()


def _float_input_cnn(seed=3):
    """float32 input -> QUANTIZE -> conv 3x3/2 -> HARD_SWISH -> MUL by a constant -> depthwise
    3x3 -> conv 1x1 -> MEAN -> DEQUANTIZE: a float edge and elementwise layers in the
    prefix (run row by row where a patch is a window of a wider tensor)."""
    rng = np.random.default_rng(seed)
    b = ModelBuilder()
    x0 = b.add_tensor((1, 15, 13, 3), "float32")
    x = b.add_tensor((1, 15, 13, 3), scale=0.02, zero_point=3)
    b.add_operator("QUANTIZE", [x0], [x])

    def conv(x, shape, cout, kernel, stride, depthwise=False):
        _, h, w, c = shape
        wshape = (1, kernel, kernel, c) if depthwise else (cout, kernel, kernel, c)
        cout = c if depthwise else cout
        wt = b.add_tensor(wshape, scale=rng.uniform(0.002, 0.02, cout),
                          axis=3 if depthwise else 0, data=rng.integers(-127, 128, wshape))
        bias = b.add_tensor((cout,), "int32", data=rng.integers(-3000, 3000, cout))
        out_shape = (1, -(-h // stride), -(-w // stride), cout)
        y = b.add_tensor(out_shape, scale=float(rng.uniform(0.03, 0.1)),
                         zero_point=int(rng.integers(-20, 20)))
        opts = {"padding": "SAME", "stride_h": stride, "stride_w": stride,
                "fused_activation_function": "NONE"}
        if depthwise:
            opts["depth_multiplier"] = 1
        b.add_operator("DEPTHWISE_CONV_2D" if depthwise else "CONV_2D", [x, wt, bias], [y],
                       opts)
        return y, out_shape

    y, shape = conv(x, (1, 15, 13, 3), 6, 3, 2)
    h = b.add_tensor(shape, scale=0.05, zero_point=-5)
    b.add_operator("HARD_SWISH", [y], [h])
    c = b.add_tensor((1,), scale=0.01, zero_point=0, data=[77])
    m = b.add_tensor(shape, scale=0.04, zero_point=2)
    b.add_operator("MUL", [h, c], [m], {"fused_activation_function": "NONE"})
    d, shape = conv(m, shape, 0, 3, 1, depthwise=True)
    e, shape = conv(d, shape, 5, 1, 1)
    axes = b.add_tensor((2,), "int32", data=[1, 2])
    mean = b.add_tensor((1, 5), scale=0.05, zero_point=1)
    b.add_operator("MEAN", [e, axes], [mean], {"keep_dims": False})
    out = b.add_tensor((1, 5), "float32")
    b.add_operator("DEQUANTIZE", [mean], [out])
    return parse_tflite(b.build([x0], [out]))


@needs_cc
@pytest.mark.parametrize("layers, grid", [(1, (2, 3)), (3, (2, 2)), (4, (3, 3)), (5, (1, 2)),
                                          (5, (4, 1))])
def test_float_input_and_elementwise_layers_patched_bit_exact(tmp_path, layers, grid):
    model = _float_input_cnn()
    chain = prefix_chain(tflite_to_graph(model, fold_pad=True))[1]
    assert [w.op for w in chain] == ["quantize", "conv2d", "hard_swish", "mul",
                                     "depthwise_conv2d", "conv2d"]
    compiled, _ = _compile_and_check(_write(model, tmp_path), tmp_path / "out", patch=True,
                                     patch_layers=layers, patch_grid=grid)
    model_c = (tmp_path / "out" / "model" / "model.c").read_text()
    if grid[1] > 1:       # a column of patches reads rows out of the wider input
        assert "for (int r = 0; r <" in model_c
    assert compiled.patch.layers[0] == "quantize_0"


@needs_cc
@pytest.mark.parametrize("grid", [(2, 3), (3, 1)])
def test_streamed_input_is_read_patch_by_patch_and_bit_exact(tmp_path, grid):
    """stream_input: the input is no arena tensor; model_run reads each patch's region
    through model_read_input (the harness serves it from the embedded bytes)."""
    model = _float_input_cnn(seed=7)
    compiled, result = _compile_and_check(_write(model, tmp_path), tmp_path / "out",
                                          patch=True, patch_layers=5, patch_grid=grid,
                                          stream_input=True)
    (streamed,) = compiled.emitted.inputs
    assert streamed.streamed and streamed.offset == -1
    h = compiled.emitted.model_h
    assert "#define MODEL_STREAMS_INPUT 1" in h and "#define MODEL_INPUT0_STREAMED 1" in h
    model_c = compiled.emitted.model_c
    assert model_c.count("model_read_input(") >= grid[0] * grid[1]
    # the arena holds no input: the plan's peak is the streamed one, below the resident one
    p = compiled.patch
    assert p.stream_input and compiled.plan.liveness_peak_bytes == p.peak_streamed
    assert p.peak_streamed < p.peak_full_input
    assert "input_0" not in compiled.plan.offsets    # only its patch regions are in the arena
    assert load_plan(tmp_path / "out")["patch"]["stream_input"] is True


def test_explicit_pad_ends_the_prefix_the_c_back_end_can_patch():
    model = build_cnn((12, 12), 2, [{"op": "CONV_2D", "kernel": (3, 3), "cout": 3},
                                    {"op": "PAD", "pads": ((0, 1), (1, 1))},
                                    {"op": "MAX_POOL_2D", "kernel": (2, 2), "stride": (2, 2),
                                     "padding": "VALID"}])
    graph = tflite_to_graph(model, fold_pad=True)
    assert [w.op for w in prefix_chain(graph)[1]][:2] == ["conv2d", "pad"]
    assert [w.op for w in prefix_chain(graph, PATCH_OPS)[1]] == ["conv2d"]


@needs_cc
def test_bad_patch_options_are_refused_in_one_line(tmp_path):
    path = _write(build_cnn((12, 12), 2, C_MIXED[:2], seed=1), tmp_path)
    cases = [(dict(patch=True, rewrite=True), "cannot be combined"),
             (dict(patch=True, patch_layers=2), "together"),
             (dict(patch=False, patch_layers=1, patch_grid=(2, 2)), "with patch=True"),
             (dict(patch=True, patch_layers=0, patch_grid=(2, 2)), "positive number"),
             (dict(patch=True, patch_layers=1, patch_grid=(2, "2")), r"\(rows, columns\)"),
             (dict(patch=True, patch_overhead=-1), "patch_overhead"),
             (dict(stream_input=True), "stream_input needs patch=True"),
             (dict(patch=True, patch_layers=9, patch_grid=(2, 2)), "prefix length 9"),
             (dict(patch=True, patch_layers=1, patch_grid=(7, 2)), "does not fit")]
    for options, message in cases:
        with pytest.raises(SerenityError, match=message) as info:
            compile_tflite(path, "host", tmp_path / "out", build=False, **options)
        assert "\n" not in str(info.value)
        assert not (tmp_path / "out").exists()
    with pytest.raises(PatchError):
        compile_tflite(path, "host", tmp_path / "out", build=False, patch=True,
                       patch_layers=9, patch_grid=(2, 2))


@needs_cc
def test_search_reports_when_no_plan_helps(tmp_path):
    # a 1x1 conv on a 4x4 input, then the tail: nothing to gain from patches
    path = _write(build_cnn((4, 4), 2, [{"op": "CONV_2D", "kernel": (1, 1), "cout": 2}]),
                  tmp_path)
    compiled = compile_tflite(path, "host", tmp_path / "out", patch=True, build=False)
    assert compiled.patch is None
    assert load_plan(tmp_path / "out")["patch"]["applied"] is False
    assert "patches: none (no plan lowers the peak" in compiled.summary()
    plain = compile_tflite(path, "host", tmp_path / "plain", build=False)
    assert load_plan(tmp_path / "plain")["patch"] is None
    assert "patches" not in plain.summary()


def _two_input_model():
    b = ModelBuilder()
    x = b.add_tensor((1, 8, 8, 2), scale=0.05, zero_point=0)
    y = b.add_tensor((1, 8, 8, 2), scale=0.05, zero_point=1)
    s = b.add_tensor((1, 8, 8, 2), scale=0.08, zero_point=0)
    b.add_operator("ADD", [x, y], [s], {"fused_activation_function": "NONE"})
    return parse_tflite(b.build([x, y], [s]))


@needs_cc
def test_a_model_with_two_inputs_has_nothing_to_patch_and_says_why(tmp_path):
    path = _write(_two_input_model(), tmp_path)
    compiled = compile_tflite(path, "host", tmp_path / "out", patch=True, build=False)
    assert compiled.patch is None
    assert "patches: none (the model has 2 inputs; a patch plan starts from one)" \
        in compiled.summary()
    assert load_plan(tmp_path / "out")["patch"]["why"].startswith("the model has 2 inputs")
    streamed = compile_tflite(path, "host", tmp_path / "streamed", patch=True,
                              stream_input=True, build=False)
    assert "starts from one); the input stays in the arena" in streamed.summary()
    assert not any(t.streamed for t in streamed.emitted.inputs)
    with pytest.raises(PatchError, match="has 2 inputs; a patch plan starts from a single"):
        compile_tflite(path, "host", tmp_path / "forced", patch=True, patch_layers=1,
                       patch_grid=(2, 2), build=False)


@needs_cc
@pytest.mark.skipif(not (MODELS / "keras" / "mobilenet_v2_035_96.tflite").is_file(),
                    reason="../shared/models absent")
def test_mobilenet_v2_patched_on_host_halves_the_arena(tmp_path):
    path = MODELS / "keras" / "mobilenet_v2_035_96.tflite"
    plain = compile_tflite(path, "host", tmp_path / "plain", time_limit=30, build=False)
    compiled, _ = _compile_and_check(path, tmp_path / "out", patch=True)
    p = compiled.patch
    assert p is not None and p.extra_macs_fraction <= 0.2
    assert p.peak_full_input < p.peak_unpatched and p.peak_streamed <= p.peak_full_input
    assert compiled.arena_bytes < 0.6 * plain.arena_bytes
    plan = json.loads((tmp_path / "out" / "plan.json").read_text())
    assert plan["arena_bytes"] == compiled.arena_bytes
    assert plan["patch"]["peak_unpatched_bytes"] == p.peak_unpatched


@pytest.mark.slow
@needs_rp2040js
@pytest.mark.parametrize("stream_input", [False, True])
@pytest.mark.parametrize("grid", [(2, 3), "4x1c"])       # patches; cached row strips
def test_patched_cnn_bit_exact_on_rp2040js(tmp_path, stream_input, grid):
    model = _float_input_cnn(seed=5)
    _compile_and_check(_write(model, tmp_path), tmp_path / "out", "pico", patch=True,
                       patch_layers=5, patch_grid=grid, stream_input=stream_input)


@pytest.mark.slow
@needs_qemu
@pytest.mark.parametrize("stream_input", [False, True])
@pytest.mark.parametrize("layers, grid", [(9, (3, 2)),
                                          ([5, 4, 1], ["10x1c", "3x2", "5x1c"])])
def test_patched_cnn_bit_exact_on_qemu(tmp_path, stream_input, layers, grid):
    model = build_cnn((20, 18), 3, RESIDUAL_STAGE, seed=2)
    _compile_and_check(_write(model, tmp_path), tmp_path / "out", "pico2", patch=True,
                       patch_layers=layers, patch_grid=grid, stream_input=stream_input)
