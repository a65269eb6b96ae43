"""export-tflm: our order and offline arena plan in a .tflite, checked through TFLite Micro.

Every arena figure asserted here is TFLite Micro's own (``tflm_arena``: its interpreter's
``print_allocations()``), every output comparison runs TFLM (the exported file in TFLM's
default configuration against the original in its preserve-all-tensors configuration, two
different interpreter set-ups), and the file's contents are read back with the project's own
flatbuffer reader and the ``tflite`` package, independently of the writer.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import tflite

import tflite_cases
from tvm_serenity.alloc import PlanError
from tvm_serenity.cli import main
from tvm_serenity.frontend import tflite_to_graph
from tvm_serenity.frontend.builder import ModelBuilder
from tvm_serenity.frontend.interpreters import (TFLM, available, model_inputs, run_interpreter,
                                                tflm_arena)
from tvm_serenity.frontend.tflite_model import FILE_IDENTIFIER, parse_tflite
from tvm_serenity.tflm_export import (OFFLINE_PLAN_METADATA, TFLM_ALIGNMENT, check_offsets,
                                      export_tflm, exported_model, tflm_outputs)

pytestmark = pytest.mark.skipif(not available(TFLM), reason="needs tflite-micro")

KWS = tflite_cases.MODELS_DIR / "mlperf_tiny" / "kws_ref_model.tflite"


def two_branch_model() -> bytes:
    """x -> (expand A, expand B) -> (project A, project B) -> ADD, stored with both wide
    expansions first: TFLite's order keeps both 27 KiB tensors alive at once, the
    memory-aware order finishes one branch before starting the other."""
    rng = np.random.default_rng(0)
    b = ModelBuilder()
    x = b.add_tensor((1, 24, 24, 8), scale=0.05, zero_point=-3, name="x")
    shape = (1, 24, 24, 8)

    def conv(src, src_shape, cout):
        return tflite_cases.add_conv(b, rng, src, src_shape, "CONV_2D", cout, (1, 1), (1, 1),
                                     "SAME", "RELU", (0.04, -128))

    a1, wide = conv(x, shape, 48)
    b1, _ = conv(x, shape, 48)
    a2, _ = conv(a1, wide, 8)
    b2, _ = conv(b1, wide, 8)
    y = b.add_tensor(shape, scale=0.08, zero_point=-128, name="y")
    b.add_operator("ADD", [a2, b2], [y], {"fused_activation_function": "NONE"})
    return b.build([x], [y])


def offline_words(buf: bytes) -> list[int]:
    """The int32 words of the model's OfflineMemoryAllocation buffer (tflite package)."""
    m = tflite.Model.GetRootAsModel(buf, 0)
    entries = [m.Metadata(i) for i in range(m.MetadataLength())
               if m.Metadata(i).Name() == OFFLINE_PLAN_METADATA.encode()]
    assert len(entries) == 1
    data = m.Buffers(entries[0].Buffer()).DataAsNumpy()
    return np.frombuffer(data.tobytes(), dtype="<i4").tolist()


def metadata(buf: bytes) -> dict[bytes, bytes]:
    m = tflite.Model.GetRootAsModel(buf, 0)
    out = {}
    for i in range(m.MetadataLength()):
        data = m.Buffers(m.Metadata(i).Buffer()).DataAsNumpy()
        out[m.Metadata(i).Name()] = b"" if isinstance(data, int) else data.tobytes()
    return out


def assert_same_model(original: bytes, exported: bytes, order) -> None:
    """Tensors (names, shapes, types, quantization, weights), graph inputs and outputs
    unchanged; the operators the original's, permuted by ``order``."""
    a, b = parse_tflite(original), parse_tflite(exported)
    assert (a.inputs, a.outputs, a.description) == (b.inputs, b.outputs, b.description)
    assert len(a.tensors) == len(b.tensors)
    for s, t in zip(a.tensors, b.tensors):
        assert (s.name, s.shape, s.dtype) == (t.name, t.shape, t.dtype)
        assert (s.quant is None) == (t.quant is None)
        if s.quant is not None:
            assert np.array_equal(s.quant.scale, t.quant.scale)
            assert np.array_equal(s.quant.zero_point, t.quant.zero_point)
            assert s.quant.axis == t.quant.axis
        assert (s.data is None) == (t.data is None)
        if s.data is not None:
            assert s.data.tobytes() == t.data.tobytes()
    assert sorted(order) == list(range(len(a.operators)))
    for k, i in enumerate(order):
        s, t = a.operators[i], b.operators[k]
        assert (s.op, s.inputs, s.outputs, dict(s.options), s.version) == \
            (t.op, t.inputs, t.outputs, dict(t.options), t.version)


def test_two_branch_model_lowers_tflm_head(tmp_path):
    src = tmp_path / "branches.tflite"
    src.write_bytes(two_branch_model())
    out = tmp_path / "planned.tflite"
    e = export_tflm(src, out, inputs=3)
    exported = out.read_bytes()
    assert exported == e.model and exported[4:8] == FILE_IDENTIFIER

    # TFLM itself: the original in stored order, the same order without a plan, the export
    original = tflm_arena(src).head
    reordered = tflm_arena(src, order=e.order).head
    head = tflm_arena(out).head
    x, big, small = 24 * 24 * 8, 24 * 24 * 48, 24 * 24 * 8
    assert original >= x + 2 * big                     # both expansions alive at once
    assert head == e.tflm_head == e.planned_bytes == x + big + small
    assert head < original and head <= reordered
    assert (e.tflm_head_original, e.identical, e.checked) == (original, 3, 3)
    assert "in-place (RiP) overlap not exported" in e.summary()

    # the metadata: version, subgraphs, one offset per tensor; constants -1, the rest aligned
    model = parse_tflite(exported)
    words = offline_words(exported)
    assert words[:3] == [1, 1, len(model.tensors)]
    offsets = words[3:]
    assert offsets == list(e.offsets)
    for t, o in zip(model.tensors, offsets):
        assert (o == -1) == (t.data is not None)
        assert o == -1 or o % TFLM_ALIGNMENT == 0

    # the outputs: TFLM on the export (default config) against TFLM on the original
    # (preserve-all-tensors config, an independent run)
    rng = np.random.default_rng(7)
    sets = [model_inputs(model, rng) for _ in range(3)]
    expected = run_interpreter(TFLM, src, sets)
    [got] = tflm_outputs([exported], sets)
    y = model.outputs[0]
    for want, have in zip(expected, got):
        assert want[y].tobytes() == have[0].tobytes()
    assert_same_model(src.read_bytes(), exported, e.order)


def test_overlapping_plan_is_caught_by_verifier_and_by_tflm(tmp_path):
    """Offset 0 for every tensor: our check refuses it, and TFLM running it really computes
    something else (so the byte comparison export_tflm makes can fail)."""
    buf = two_branch_model()
    model = parse_tflite(buf)
    order = list(range(len(model.operators)))
    zeros = [-1 if t.data is not None else 0 for t in model.tensors]
    with pytest.raises(PlanError, match="overlap"):
        check_offsets(model, order, zeros, tflite_to_graph(model, fold_pad=False))
    broken, _ = exported_model(buf, "<bytes>", order, zeros)
    sets = [model_inputs(model, np.random.default_rng(1))]
    good, bad = tflm_outputs([buf, broken], sets)
    assert good[0][0].tobytes() != bad[0][0].tobytes()


@pytest.mark.skipif(not KWS.is_file(), reason="needs ../shared/models")
def test_converter_metadata_kept_and_plan_replaced_on_reexport(tmp_path):
    first, second = tmp_path / "a.tflite", tmp_path / "b.tflite"
    e1 = export_tflm(KWS, first, inputs=2)
    original = KWS.read_bytes()
    kept = metadata(original)
    assert kept and OFFLINE_PLAN_METADATA.encode() not in kept
    got = metadata(first.read_bytes())
    assert {k: v for k, v in got.items() if k in kept} == kept
    assert set(got) == set(kept) | {OFFLINE_PLAN_METADATA.encode()}
    assert_same_model(original, first.read_bytes(), e1.order)
    assert e1.tflm_head == tflm_arena(first).head <= tflm_arena(KWS).head

    e2 = export_tflm(first, second, schedule_method="stored", inputs=2)
    assert e2.replaced_plan and not e1.replaced_plan
    assert e2.order == tuple(range(len(e1.order)))       # the first export's order, kept
    data = second.read_bytes()
    assert metadata(data).keys() == got.keys()
    assert tflite.Model.GetRootAsModel(data, 0).BuffersLength() == \
        tflite.Model.GetRootAsModel(first.read_bytes(), 0).BuffersLength()
    assert offline_words(data)[3:] == list(e2.offsets)


def _edited(buf: bytes, edit) -> bytes:
    """``buf`` changed by ``edit(model_object)`` (tflite-micro's object API)."""
    import flatbuffers
    from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as schema
    obj = schema.ModelT.InitFromPackedBuf(buf, 0)
    edit(obj)
    b = flatbuffers.Builder(len(buf) + 1024)
    b.Finish(obj.Pack(b), file_identifier=FILE_IDENTIFIER)
    return bytes(b.Output())


def _variable(obj):
    obj.subgraphs[0].tensors[obj.subgraphs[0].inputs[0]].isVariable = True


def _two_subgraphs(obj):
    obj.subgraphs.append(obj.subgraphs[0])


def softmax_tflm_aborts_on() -> bytes:
    """A 1000-wide int8 SOFTMAX with input scale 0.0041 (EfficientNet-B0's head, converted by
    TFLite): TFLite Micro's SoftmaxEval aborts the process on it."""
    b = ModelBuilder()
    x = b.add_tensor((1, 1000), scale=0.00413765, zero_point=5, name="logits")
    y = b.add_tensor((1, 1000), scale=1 / 256, zero_point=-128, name="probabilities")
    b.add_operator("SOFTMAX", [x], [y], {"beta": 1.0})
    return b.build([x], [y])


@pytest.mark.parametrize("case, message", [
    ("corrupt", "not a TFLite flatbuffer"),
    ("truncated", "bad.tflite"),
    ("variable", "is a variable tensor"),
    ("subgraphs", "2 subgraphs"),
    ("missing", "does not exist"),
    ("tflm_crash", "TFLite Micro crashed (signal 6) while running input set 1 of"),
])
def test_refusals_are_one_line_exit_2(tmp_path, case, message):
    bad = tmp_path / "bad.tflite"
    good = two_branch_model()
    contents = {"corrupt": lambda: b"garbage, not a model",
                "truncated": lambda: good[: len(good) // 2],
                "variable": lambda: _edited(good, _variable),
                "subgraphs": lambda: _edited(good, _two_subgraphs),
                "tflm_crash": softmax_tflm_aborts_on}
    if case in contents:
        bad.write_bytes(contents[case]())
    out = tmp_path / "out.tflite"
    proc = subprocess.run([sys.executable, "-m", "tvm_serenity.cli", "export-tflm", str(bad),
                           "-o", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("tvm-serenity: error: ") and message in proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert not out.exists()
    if case == "tflm_crash":      # the user learns the crash is TFLM's, on their own file
        assert "(the original model: this TFLite Micro cannot run it" in proc.stderr


def test_existing_output_is_kept_unless_force(tmp_path, capsys):
    src = tmp_path / "m.tflite"
    src.write_bytes(two_branch_model())
    out = tmp_path / "out.tflite"
    out.write_bytes(b"user's file")
    argv = ["export-tflm", str(src), "-o", str(out), "--inputs", "1"]
    assert main(argv) == 2
    assert "exists; pass --force" in capsys.readouterr().err
    assert out.read_bytes() == b"user's file"
    assert main([*argv, "--force", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["inplace"] is False and report["outputs_identical"] == 1
    assert report["tflm_head_bytes"] == tflm_arena(out).head < report[
        "tflm_head_original_bytes"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.tflite", "out.tflite"]
