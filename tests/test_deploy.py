"""Deployment: TFLite int8 model -> graph C (codegen.graph_c) -> micro project, bit-exact with
the numpy reference interpreter on the host, in rp2040js (Pico) and QEMU (Pico 2).

Small models come from frontend.builder (tests/tflite_cases.py and a multi-operator chain
below); the real models from <repo>/../shared/models (skipped when absent). Tests needing a
C compiler, the Arm toolchain, rp2040js or QEMU skip with the reason when those are missing.
"""


import numpy as np
import pytest

from tvm_serenity import SerenityError
from tvm_serenity.codegen.graph_c import SUPPORTED_OPS, integer_core
from tvm_serenity.deploy import compile_tflite, load_plan, reference_outputs, run
from tvm_serenity.frontend import UnsupportedOperatorError, parse_tflite
from tvm_serenity.frontend.builder import ModelBuilder
from tflite_cases import SINGLE_OP_MODELS, model_path
from toolchain import needs_arm, needs_cc, needs_qemu, needs_rp2040js


VWW = "tinyengine/vww.tflite"
MCUNET = "mcunet/mcunet-320kb-1mb_imagenet.tflite"


def _write(tmp_path, name: str, flatbuffer: bytes):
    path = tmp_path / f"{name}.tflite"
    path.write_bytes(flatbuffer)
    return path


def _chain_model() -> bytes:
    """float32 input -> QUANTIZE -> CONV 3x3 s2 SAME -> DEPTHWISE 3x3 -> CONV 1x1 -> ADD
    (residual) -> {PAD -> MAX_POOL, AVERAGE_POOL} -> CONCATENATION -> QUANTIZE int8 ->
    TRANSPOSE -> MEAN (last axis) -> RESHAPE -> FULLY_CONNECTED -> DEQUANTIZE -> float32."""
    rng = np.random.default_rng(0)
    b = ModelBuilder()

    def conv(x, cin, shape_out, kernel, stride, depthwise=False, activation="RELU6",
             q=(0.05, -20)):
        cout = shape_out[3]
        wshape, axis = ((1, *kernel, cout), 3) if depthwise else ((cout, *kernel, cin), 0)
        ws = rng.uniform(0.004, 0.02, cout)
        w = b.add_tensor(wshape, scale=ws, axis=axis, data=rng.integers(-127, 128, wshape))
        bias = b.add_tensor((cout,), "int32", data=rng.integers(-800, 800, cout))
        y = b.add_tensor(shape_out, scale=q[0], zero_point=q[1])
        options = {"padding": "SAME", "stride_h": stride, "stride_w": stride,
                   "fused_activation_function": activation}
        if depthwise:
            options["depth_multiplier"] = 1
        b.add_operator("DEPTHWISE_CONV_2D" if depthwise else "CONV_2D", [x, w, bias], [y],
                       options)
        return y

    xf = b.add_tensor((1, 12, 12, 3), "float32")
    x = b.add_tensor((1, 12, 12, 3), scale=0.02, zero_point=-5)
    b.add_operator("QUANTIZE", [xf], [x])
    c1 = conv(x, 3, (1, 6, 6, 8), (3, 3), 2, q=(0.05, -20))
    dw = conv(c1, 8, (1, 6, 6, 8), (3, 3), 1, depthwise=True, q=(0.04, -10))
    pw = conv(dw, 8, (1, 6, 6, 8), (1, 1), 1, activation="NONE", q=(0.06, 3))
    q = (0.08, 0)
    add = b.add_tensor((1, 6, 6, 8), scale=q[0], zero_point=q[1])
    b.add_operator("ADD", [c1, pw], [add], {"fused_activation_function": "NONE"})
    pads = b.add_tensor((4, 2), "int32", data=[[0, 0], [1, 1], [1, 1], [0, 0]])
    padded = b.add_tensor((1, 8, 8, 8), scale=q[0], zero_point=q[1])
    b.add_operator("PAD", [add, pads], [padded])
    maxp = b.add_tensor((1, 3, 3, 8), scale=q[0], zero_point=q[1])
    b.add_operator("MAX_POOL_2D", [padded], [maxp],
                   {"padding": "VALID", "stride_h": 2, "stride_w": 2, "filter_height": 3,
                    "filter_width": 3})
    avgp = b.add_tensor((1, 3, 3, 8), scale=q[0], zero_point=q[1])
    b.add_operator("AVERAGE_POOL_2D", [add], [avgp],
                   {"padding": "VALID", "stride_h": 2, "stride_w": 2, "filter_height": 2,
                    "filter_width": 2})
    cat = b.add_tensor((1, 3, 3, 16), scale=q[0], zero_point=q[1])
    b.add_operator("CONCATENATION", [maxp, avgp], [cat], {"axis": 3})
    req = b.add_tensor((1, 3, 3, 16), scale=0.1, zero_point=4)
    b.add_operator("QUANTIZE", [cat], [req])
    perm = b.add_tensor((4,), "int32", data=[0, 3, 1, 2])
    tr = b.add_tensor((1, 16, 3, 3), scale=0.1, zero_point=4)
    b.add_operator("TRANSPOSE", [req, perm], [tr])
    axis = b.add_tensor((1,), "int32", data=[3])
    mean = b.add_tensor((1, 16, 3), scale=0.07, zero_point=-2)
    b.add_operator("MEAN", [tr, axis], [mean], {"keep_dims": False})
    shape = b.add_tensor((2,), "int32", data=[1, 48])
    flat = b.add_tensor((1, 48), scale=0.07, zero_point=-2)
    b.add_operator("RESHAPE", [mean, shape], [flat], {"new_shape": [1, 48]})
    w = b.add_tensor((10, 48), scale=0.01, data=rng.integers(-127, 128, (10, 48)))
    bias = b.add_tensor((10,), "int32", data=rng.integers(-500, 500, 10))
    logits = b.add_tensor((1, 10), scale=0.2, zero_point=7)
    b.add_operator("FULLY_CONNECTED", [flat, w, bias], [logits],
                   {"fused_activation_function": "NONE"})
    out = b.add_tensor((1, 10), "float32")
    b.add_operator("DEQUANTIZE", [logits], [out])
    return b.build([xf], [out])


# ------------------------------------------------------------------ emission, no compiler
def test_integer_core_strips_float_edges():
    core = integer_core(parse_tflite(_chain_model(), name="chain"))
    assert core.stripped == ("QUANTIZE #0", "DEQUANTIZE #14")
    assert [op.index for op in core.model.operators] == list(range(1, 14))   # file indices
    assert core.input.dtype == core.output.dtype == "int8"
    assert core.input.shape == (1, 12, 12, 3) and core.output.shape == (1, 10)
    edged = integer_core(parse_tflite(_chain_model(), name="chain"), float_edges=True)
    assert edged.stripped == () and len(edged.model.operators) == 15
    assert [t.dtype for t in edged.inputs + edged.outputs] == ["float32", "float32"]


def test_rip_build_overlaps_and_dual_build_does_not(tmp_path):
    path = _write(tmp_path, "chain", _chain_model())
    # the int8 core: with the float edges the 1,728 B float input dominates both arenas
    rip = compile_tflite(path, "host", tmp_path / "rip", build=False, int8_core=True)
    dual = compile_tflite(path, "host", tmp_path / "dual", rip=False, build=False,
                          int8_core=True)
    assert {s.layout for s in dual.emitted.steps} <= {"dual", "copy"}
    assert "rip" in {s.layout for s in rip.emitted.steps}
    assert rip.arena_bytes < dual.arena_bytes
    plan = load_plan(tmp_path / "rip")
    assert plan["arena_bytes"] == rip.arena_bytes and plan["rip"] is True
    assert plan["inplace_saved_bytes"] == sum(layer["saved_bytes"] for layer in plan["layers"])
    assert f"#define MODEL_ARENA_BYTES {rip.arena_bytes}\n" in rip.emitted.model_h
    assert "static uint8_t arena[MODEL_ARENA_BYTES]" in rip.emitted.model_c
    assert "scale 0.019999" in rip.emitted.model_h       # the stripped QUANTIZE's scale
    assert "#define MODEL_OUTPUT0_BYTES 10\n" in rip.emitted.model_h
    assert plan["stripped_edges"] == ["QUANTIZE #0", "DEQUANTIZE #14"] and plan["int8_core"]
    # default: the float edges run on the device, the I/O is the model's float32 tensors
    edged = compile_tflite(path, "host", tmp_path / "edged", build=False)
    assert "#define MODEL_INPUT0_TYPE float\n" in edged.emitted.model_h
    assert "#define MODEL_OUTPUT0_BYTES 40\n" in edged.emitted.model_h       # 10 float32
    assert [s.op for s in edged.emitted.steps][::len(edged.emitted.steps) - 1] == [
        "QUANTIZE", "DEQUANTIZE"]
    # the float32 -> int8 QUANTIZE runs in place over its float input, so the float input
    # alone is the peak; the dual-buffer build holds both
    assert edged.emitted.steps[0].layout == "rip"
    assert edged.arena_bytes == 12 * 12 * 3 * 4
    edged_dual = compile_tflite(path, "host", tmp_path / "edged_dual", rip=False, build=False)
    assert edged_dual.emitted.steps[0].layout == "dual"
    assert edged_dual.arena_bytes == 12 * 12 * 3 * 5          # float input + its int8 copy


def test_unsupported_operator_is_named(tmp_path):
    b = ModelBuilder()                    # TANH: neither the reference nor the emitter has it
    x = b.add_tensor((1, 4), scale=0.1, zero_point=0)
    y = b.add_tensor((1, 4), scale=1 / 128, zero_point=0)
    b.add_operator("TANH", [x], [y])
    path = _write(tmp_path, "tanh", b.build([x], [y]))
    with pytest.raises(UnsupportedOperatorError, match="TANH"):
        compile_tflite(path, "host", tmp_path / "out", build=False)
    assert "TANH" not in SUPPORTED_OPS and "ADD" in SUPPORTED_OPS


def test_bad_target_and_input(tmp_path):
    path = _write(tmp_path, "pad", SINGLE_OP_MODELS["pad"]())
    with pytest.raises(SerenityError, match="unknown target 'esp32'"):
        compile_tflite(path, "esp32", tmp_path / "out")
    with pytest.raises(SerenityError, match=r"the input has 3 bytes, the model takes 75 "
                                            r"\('\w+' int8 \[1, 5, 5, 3\]\)"):
        compile_tflite(path, "host", tmp_path / "out", input=b"abc", build=False)
    with pytest.raises(SerenityError, match="not a build directory"):
        run(tmp_path / "nowhere")


def test_rip_arena_at_least_one_eighth_smaller_on_vww(tmp_path):
    path = model_path(VWW)
    rip = compile_tflite(path, "pico", tmp_path / "rip", build=False, int8_core=True)
    dual = compile_tflite(path, "pico", tmp_path / "dual", rip=False, build=False,
                          int8_core=True)
    assert rip.arena_bytes <= 0.875 * dual.arena_bytes
    assert rip.arena_bytes == rip.plan.liveness_peak_bytes


# ------------------------------------------------------------------ host builds, bit-exact
@needs_cc
@pytest.mark.parametrize("rip, planner, int8_core", [(True, "optimal", False),
                                                     (False, "optimal", False),
                                                     (True, "bestfit", True)])
def test_chain_model_bit_exact_on_host(tmp_path, rip, planner, int8_core):
    """bestfit keeps an in-place input where it was and shifts it right before its step (on
    the int8 core; the float edges, by default, make the float input the peak)."""
    path = _write(tmp_path, "chain", _chain_model())
    compiled = compile_tflite(path, "host", tmp_path / "out", rip=rip, planner=planner,
                              int8_core=int8_core)
    result = run(compiled.out_dir)                  # raises unless equal to the reference
    assert list(result.outputs) == reference_outputs(
        path, (tmp_path / "out" / "input.bin").read_bytes(), int8_core=int8_core)
    assert len(result.output) == (10 if int8_core else 40)    # int8, or float32 DEQUANTIZE
    assert result.arena_bytes == compiled.arena_bytes
    moved = [s for s in compiled.emitted.steps if s.moved_bytes]
    assert len(moved) == len(compiled.plan.moves) and (planner != "bestfit" or moved)
    assert ("memmove(" in compiled.emitted.model_c) == bool(moved)


SINGLE_OP_CASES = ["conv3x3_same_s2_odd", "conv5x3_valid_s2x1", "conv_dilated",
                   "conv1x1_per_tensor", "depthwise_5x5_dilated", "fc_per_channel_batched",
                   "fc_batched_in_place",
                   "mean_hw_keep", "avg_pool_global", "max_pool_same",
                   "padv2", "pad_then_depthwise"]


@needs_cc
@pytest.mark.parametrize("case", SINGLE_OP_CASES)
def test_single_operator_bit_exact_on_host(tmp_path, case):
    """One operator over the graph input: in place whenever the memory model allows it."""
    path = _write(tmp_path, case, SINGLE_OP_MODELS[case]())
    compiled = compile_tflite(path, "host", tmp_path / "out")
    if case.startswith("fc_"):      # the row gather (int16 scratch) exactly when in place
        assert bool(compiled.plan.inplace) == (case == "fc_batched_in_place")
        assert ("int16_t scratch16[" in compiled.emitted.model_c) == bool(compiled.plan.inplace)
    n = load_plan(tmp_path / "out")["inputs"][0]["bytes"]
    for seed in (1, 2):
        x = np.random.default_rng(seed).integers(-128, 128, n, dtype=np.int8)
        run(tmp_path / "out", input=x)


@needs_cc
@pytest.mark.parametrize("planner", ["optimal", "bestfit"])
def test_vww_bit_exact_on_host(tmp_path, planner):
    compiled = compile_tflite(model_path(VWW), "host", tmp_path / "out", planner=planner)
    assert planner == "optimal" or compiled.plan.moves
    result = run(compiled.out_dir)
    assert list(result.outputs) == reference_outputs(model_path(VWW), (tmp_path / "out/input.bin")
                                                     .read_bytes())


@needs_cc
def test_mobilenet_v3_bit_exact_on_host(tmp_path):
    """HARD_SWISH, squeeze-excite MUL (broadcast, and by a constant), constant ADD, SOFTMAX
    over 1000 classes: the whole model in C, bit-exact on two random inputs."""
    path = model_path("keras/mobilenet_v3_small_075_96.tflite")
    compiled = compile_tflite(path, "host", tmp_path / "out")
    assert {"HARD_SWISH", "MUL", "SOFTMAX"} <= {s.op for s in compiled.emitted.steps}
    n = compiled.emitted.input_bytes
    for seed in (1, 2):
        x = np.random.default_rng(seed).integers(-128, 128, n, dtype=np.int8)
        assert len(run(compiled.out_dir, input=x).output) == 1000   # checked vs reference


@pytest.mark.slow
@needs_arm
def test_flash_overflow_is_refused_with_the_figures(tmp_path):
    """mobilenet_v3's 2 MB of weights do not fit the Pico's 2 MiB flash (its SRAM would):
    one line with the bytes, not the linker's output."""
    path = model_path("keras/mobilenet_v3_small_075_96.tflite")
    with pytest.raises(SerenityError, match=r"model does not fit: pico \(RP2040\) SRAM: .* = "
                                            r"[\d,]+ B of 270,336 B \(264 KiB\), [\d,]+ B "
                                            r"free; flash: code, weights and constants [\d,]+ B "
                                            r"of 2,097,152 B \(2048 KiB\): over by [\d,]+ B$"):
        compile_tflite(path, "pico", tmp_path / "out")


@pytest.mark.slow
@needs_cc
def test_mcunet_bit_exact_on_host(tmp_path):
    compiled = compile_tflite(model_path(MCUNET), "host", tmp_path / "out")
    assert len(run(compiled.out_dir).output) == 1000


# ------------------------------------------------------------------ devices
@needs_arm
def test_model_that_does_not_fit_is_refused_with_numbers(tmp_path):
    b = ModelBuilder()
    x = b.add_tensor((1, 300, 300, 4), scale=0.1, zero_point=0)
    y = b.add_tensor((1, 300, 300, 4), scale=0.1, zero_point=0)
    b.add_operator("MAX_POOL_2D", [x], [y], {"padding": "SAME", "stride_h": 1, "stride_w": 1,
                                             "filter_height": 2, "filter_width": 2})
    path = _write(tmp_path, "big", b.build([x], [y]))
    with pytest.raises(SerenityError, match="does not fit") as refusal:
        compile_tflite(path, "pico", tmp_path / "out")
    arena = refusal.value.plan.arena_bytes
    assert not (tmp_path / "out").exists()          # a refused build leaves nothing
    assert arena >= 360_000 and f"arena {arena:,} B" in str(refusal.value)
    assert "over by" in str(refusal.value)


@pytest.mark.slow
@needs_arm
@needs_rp2040js
@needs_cc
def test_vww_on_rp2040js_matches_host_and_reference(tmp_path):
    compiled = compile_tflite(model_path(VWW), "pico", tmp_path / "out")
    assert compiled.fit.fits
    device = run(compiled.out_dir)                  # checked against the reference
    host = run(compiled.out_dir, host=True)
    assert device.output == host.output
    assert device.cycles > 0 and 0 < device.stack_high_water < 4096
    assert device.arena_bytes == compiled.arena_bytes


@pytest.mark.slow
@needs_arm
@needs_qemu
def test_vww_on_qemu_pico2(tmp_path):
    compiled = compile_tflite(model_path(VWW), "pico2", tmp_path / "out", rip=False)
    result = run(compiled.out_dir)                  # checked against the reference
    assert result.backend == "qemu" and result.instructions > 0
