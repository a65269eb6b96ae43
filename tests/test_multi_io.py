"""Any number of inputs and outputs, zero-copy I/O in the arena and float edges on the MCU path
(codegen.graph_c -> micro harness -> deploy.run), each output compared with TFLite Micro's
interpreter byte for byte.

Models built with frontend.builder: a two-head detector (boxes and class scores), a two-input
cell (ADD of both inputs, a conv, a concat with the second input), a float-edged classifier
(float32 QUANTIZE in, DEQUANTIZE float32 out); plus every .tflite under ../shared/models
(slow). Each runs on the host and, slow, on rp2040js (pico).
"""

import io

import numpy as np
import pytest

from tvm_serenity import SerenityError
from tvm_serenity.deploy import _input_arrays, _io_tensors, compile_tflite, load_plan, run
from tvm_serenity.frontend.builder import ModelBuilder
from tvm_serenity.frontend.interpreters import TFLM, available, run_interpreter
from tvm_serenity.frontend.tflite_model import parse_tflite
from tvm_serenity.micro.fit import static_ram_objects
from tflite_cases import MODELS_DIR, all_model_files, model_path
from toolchain import needs_arm, needs_cc, needs_rp2040js

needs_tflm = pytest.mark.skipif(not available(TFLM), reason="tflite-micro is not installed")
RNG = np.random.default_rng(14)


def _conv(b, x, cin, shape_out, kernel=(3, 3), q=(0.05, -3), activation="RELU"):
    cout = shape_out[3]
    w = b.add_tensor((cout, *kernel, cin), scale=RNG.uniform(0.004, 0.02, cout), axis=0,
                     data=RNG.integers(-127, 128, (cout, *kernel, cin)))
    bias = b.add_tensor((cout,), "int32", data=RNG.integers(-600, 600, cout))
    y = b.add_tensor(shape_out, scale=q[0], zero_point=q[1])
    b.add_operator("CONV_2D", [x, w, bias], [y],
                   {"padding": "SAME", "stride_h": 1, "stride_w": 1,
                    "fused_activation_function": activation})
    return y


def _classifier(b, x, shape, classes, q_logits=(0.15, 4)):
    """MEAN over H, W -> FULLY_CONNECTED -> int8 logits."""
    axes = b.add_tensor((2,), "int32", data=[1, 2])
    pooled = b.add_tensor((1, shape[3]), scale=0.05, zero_point=-3)
    b.add_operator("MEAN", [x, axes], [pooled], {"keep_dims": False})
    w = b.add_tensor((classes, shape[3]), scale=0.01,
                     data=RNG.integers(-127, 128, (classes, shape[3])))
    bias = b.add_tensor((classes,), "int32", data=RNG.integers(-300, 300, classes))
    logits = b.add_tensor((1, classes), scale=q_logits[0], zero_point=q_logits[1])
    b.add_operator("FULLY_CONNECTED", [pooled, w, bias], [logits],
                   {"fused_activation_function": "NONE"})
    return logits


def two_head_detector() -> bytes:
    """int8 (1, 8, 8, 3) -> conv -> {conv 1x1 -> boxes (1, 8, 8, 4),
    MEAN -> FC -> SOFTMAX -> scores (1, 5)}: one input, two outputs."""
    b = ModelBuilder()
    x = b.add_tensor((1, 8, 8, 3), scale=0.02, zero_point=-5, name="image")
    features = _conv(b, x, 3, (1, 8, 8, 8))
    boxes = _conv(b, features, 8, (1, 8, 8, 4), (1, 1), q=(0.07, 2), activation="NONE")
    logits = _classifier(b, features, (1, 8, 8, 8), 5)
    scores = b.add_tensor((1, 5), scale=1 / 256, zero_point=-128, name="scores")
    b.add_operator("SOFTMAX", [logits], [scores], {"beta": 1.0})
    b._tensors[boxes]["name"] = "boxes"
    return b.build([x], [boxes, scores])


def two_input_cell() -> bytes:
    """a, b int8 (1, 6, 6, 4) -> ADD -> conv -> CONCATENATION with b: two inputs, one output
    (the DARTS cells' shape of interface)."""
    b = ModelBuilder()
    q = (0.05, -3)
    xa = b.add_tensor((1, 6, 6, 4), scale=0.04, zero_point=1, name="a")
    xb = b.add_tensor((1, 6, 6, 4), scale=q[0], zero_point=q[1], name="b")
    s = b.add_tensor((1, 6, 6, 4), scale=0.06, zero_point=0)
    b.add_operator("ADD", [xa, xb], [s], {"fused_activation_function": "NONE"})
    c = _conv(b, s, 4, (1, 6, 6, 4), q=q)
    cat = b.add_tensor((1, 6, 6, 8), scale=q[0], zero_point=q[1], name="cell")
    b.add_operator("CONCATENATION", [c, xb], [cat], {"axis": 3})
    return b.build([xa, xb], [cat])


def float_edged() -> bytes:
    """float32 (1, 6, 6, 3) -> QUANTIZE -> conv -> MEAN -> FC -> DEQUANTIZE float32 (1, 4)."""
    b = ModelBuilder()
    xf = b.add_tensor((1, 6, 6, 3), "float32", name="x")
    x = b.add_tensor((1, 6, 6, 3), scale=0.03125, zero_point=-7)
    b.add_operator("QUANTIZE", [xf], [x])
    features = _conv(b, x, 3, (1, 6, 6, 8))
    logits = _classifier(b, features, (1, 6, 6, 8), 4)
    y = b.add_tensor((1, 4), "float32", name="y")
    b.add_operator("DEQUANTIZE", [logits], [y])
    return b.build([xf], [y])


MODELS = {"detector": two_head_detector, "cell": two_input_cell, "float": float_edged}


def _inputs(model, seed: int) -> list[np.ndarray]:
    """Random inputs; a float32 input gets every rounding case: exact halves of the
    QUANTIZE's step (rounded away from zero), values beyond the int8 range (clamped)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in model.inputs:
        t = model.tensors[i]
        if t.dtype == "int8":
            out.append(rng.integers(-128, 128, t.shape, dtype=np.int8))
        else:
            steps = rng.integers(-140, 140, t.shape) + rng.choice([0.0, 0.5, 0.25], t.shape)
            out.append((steps * 0.03125).astype(np.float32))
    return out


def _tflm_outputs(model_bytes: bytes, inputs: list[np.ndarray]) -> list[bytes]:
    model = parse_tflite(model_bytes)
    tensors = run_interpreter(TFLM, model_bytes, [inputs])[0]
    return [np.ascontiguousarray(tensors[i], dtype=model.tensors[i].dtype).tobytes()
            for i in model.outputs]


def _check_against_tflm(out_dir, model_bytes: bytes, seed: int, **run_options):
    """Run ``out_dir`` on ``seed``-random inputs (deploy.run checks every output against the
    reference interpreter) and compare every output with TFLite Micro's."""
    inputs = _inputs(parse_tflite(model_bytes), seed)
    result = run(out_dir, input=inputs, **run_options)
    assert list(result.outputs) == _tflm_outputs(model_bytes, inputs)
    return result


# ------------------------------------------------------------------- C interface, no compiler
def test_model_h_describes_every_input_and_output(tmp_path):
    path = tmp_path / "detector.tflite"
    path.write_bytes(two_head_detector())
    compiled = compile_tflite(path, "host", tmp_path / "out", build=False)
    h, c = compiled.emitted.model_h, compiled.emitted.model_c
    assert "#define MODEL_NUM_INPUTS 1\n" in h and "#define MODEL_NUM_OUTPUTS 2\n" in h
    assert '#define MODEL_OUTPUT0_NAME "boxes"\n' in h
    assert "#define MODEL_OUTPUT0_SHAPE {1, 8, 8, 4}\n" in h
    assert "#define MODEL_OUTPUT1_BYTES 5\n" in h and "#define MODEL_OUTPUT1_ZERO_POINT -128" in h
    assert f"#define MODEL_OUTPUT1_SCALE {float(1 / 256).hex()}f\n" in h
    assert "void model_run(void);" in h and "void *model_output(int i);" in h
    plan = load_plan(tmp_path / "out")
    offsets = {t.name: t.offset for t in compiled.emitted.inputs + compiled.emitted.outputs}
    # every I/O tensor sits at its planned offset (no right shift moves these)
    nodes = {compiled.graph.outputs[k]: o["name"] for k, o in enumerate(plan["outputs"])}
    for node, name in nodes.items():
        assert offsets[name] == plan["offsets"][node]
    assert offsets["image"] == plan["offsets"]["input_0"]
    assert f"offsets[MODEL_NUM_OUTPUTS] = {{{offsets['boxes']}, {offsets['scores']}}};" in c
    # zero copy: model_run copies no I/O (no memcpy from/to a caller's buffer)
    assert "MODEL_INPUT0_BYTES)" not in c and "serenity_output" not in c


def test_inputs_by_name_index_npz_and_refusals(tmp_path):
    path = tmp_path / "cell.tflite"
    path.write_bytes(two_input_cell())
    compile_tflite(path, "host", tmp_path / "out", build=False)
    a, b = _inputs(parse_tflite(path.read_bytes()), 3)
    buf = io.BytesIO()
    np.savez(buf, b=b, a=a)
    # the one reader behind compile_tflite(input=...), run(input=...) and run --input FILE
    io_t = _io_tensors(load_plan(tmp_path / "out")["inputs"], "plan.json")
    expected = [a.tobytes(), b.tobytes()]
    assert _input_arrays(buf.getvalue(), io_t) == expected                 # .npz by name
    assert _input_arrays({"1": b, 0: a}, io_t) == expected                 # by index
    assert _input_arrays(a.tobytes() + b.tobytes(), io_t) == expected      # raw, in order
    with pytest.raises(SerenityError, match="no value for input 'b'"):
        _input_arrays({"a": a}, io_t)
    with pytest.raises(SerenityError, match="'c' is not an input of the model"):
        _input_arrays({"a": a, "b": b, "c": b}, io_t)
    with pytest.raises(SerenityError, match="input 'a' must be int8 of shape"):
        _input_arrays([a.astype(np.int32) * 200, b], io_t)
    with pytest.raises(SerenityError, match="the model takes 288 "):
        _input_arrays(a.tobytes(), io_t)


def _compiled(tmp_path, case: str, target: str):
    """The model bytes of ``MODELS[case]`` and its build for ``target``."""
    data = MODELS[case]()
    path = tmp_path / f"{case}.tflite"
    path.write_bytes(data)
    return data, compile_tflite(path, target, tmp_path / "out")


# ----------------------------------------------------------------------- host, bit-exact
@needs_cc
@needs_tflm
@pytest.mark.parametrize("case", sorted(MODELS))
def test_host_outputs_equal_tflm(tmp_path, case):
    data, compiled = _compiled(tmp_path, case, "host")
    model = parse_tflite(data)
    assert [t.name for t in compiled.emitted.outputs] == [model.tensors[i].name
                                                           for i in model.outputs]
    for seed in (1, 2):
        result = _check_against_tflm(compiled.out_dir, data, seed)
        assert [len(o) for o in result.outputs] == [t.bytes for t in compiled.emitted.outputs]


@needs_cc
@needs_tflm
def test_int8_core_strips_the_float_edges(tmp_path):
    """--int8-core: the firmware takes the quantized input and returns the int8 logits,
    TFLM's own intermediate tensors (its QUANTIZE output and its DEQUANTIZE input)."""
    data = float_edged()
    path = tmp_path / "float.tflite"
    path.write_bytes(data)
    compiled = compile_tflite(path, "host", tmp_path / "out", int8_core=True)
    assert [t.dtype for t in compiled.emitted.inputs + compiled.emitted.outputs] == ["int8"] * 2
    model = parse_tflite(data)
    xf = _inputs(model, 5)[0]
    tensors = run_interpreter(TFLM, data, [[xf]])[0]
    q_in, q_out = model.operators[0].outputs[0], model.operators[-1].inputs[0]
    result = run(compiled.out_dir, input=tensors[q_in])
    assert result.output == np.asarray(tensors[q_out], np.int8).tobytes()


# --------------------------------------------------------------- zero-copy, measured in the ELF
@needs_arm
def test_no_io_byte_outside_the_arena(tmp_path):
    """The only SRAM objects besides the arena are the kernel scratch and the harness's
    state: no input or output buffer (the detector's 256 + 5 output bytes were a .bss copy)."""
    path = tmp_path / "detector.tflite"
    path.write_bytes(two_head_detector())
    compiled = compile_tflite(path, "pico", tmp_path / "out")
    objects = static_ram_objects(compiled.firmware.elf, "pico", emulate=True)
    scratch = {k: v for k, v in objects.items() if k.startswith("scratch")}
    assert sum(scratch.values()) == compiled.scratch_bytes
    rest = {k: v for k, v in objects.items() if k not in scratch}
    # the harness's own state only: its result record and the port's SysTick wrap count
    assert rest == {"serenity_result": 32, "systick_wraps": 4}, rest
    fit = compiled.fit
    assert fit.part("arena") == compiled.arena_bytes
    assert fit.flash_fits and 0 < fit.flash_used_bytes < fit.flash_bytes


# --------------------------------------------------------------------- emulator, bit-exact
@pytest.mark.slow
@needs_arm
@needs_rp2040js
@needs_tflm
@pytest.mark.parametrize("case", sorted(MODELS))
def test_rp2040js_outputs_equal_tflm(tmp_path, case):
    data, compiled = _compiled(tmp_path, case, "pico")
    result = _check_against_tflm(compiled.out_dir, data, 7)
    assert result.backend == "rp2040js" and result.cycles > 0


# ------------------------------------------------------------------ every shared model
@pytest.mark.slow
@needs_cc
@needs_tflm
@pytest.mark.parametrize("rel", all_model_files())
def test_shared_model_on_host_equals_tflm(tmp_path, rel):
    """Every .tflite under ../shared/models (the two-input DARTS cells, vww's float edges
    included) compiles for the host and runs bit-exact with TFLite Micro."""
    path = model_path(rel)
    compiled = compile_tflite(path, "host", tmp_path / "out", time_limit=10)
    _check_against_tflm(compiled.out_dir, path.read_bytes(), 1)
    assert MODELS_DIR in path.parents
