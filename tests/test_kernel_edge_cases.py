"""Kernel edge cases found by fuzzing: each is a one-layer model built with frontend.builder,
compiled to C for the host, run, and compared byte for byte with TFLite Micro and with the
numpy reference (frontend.reference), the expected values computed independently.

* float32 -> int8 QUANTIZE on exact halves of the step (fuzz case tflite-0165, a vww
  mutant). TFLM's ``AffineQuantize`` rounds ``x / scale`` half away from zero. The C kernel
  truncated, added one when ``v - r >= 0.5`` and then, in a second independent test, took it
  back when ``v - r <= -0.5``, so a positive ``k + 0.5`` came out as ``k``. vww's seed-0 input
  has one pixel with ``x / scale == 20.5`` exactly: C wrote 20, TFLM 21. In vww that one LSB
  is masked downstream, but the mutant's changed 1x1 conv weights (operator 42) carried it
  to the logits.
"""

import numpy as np
import pytest

from tvm_serenity.deploy import compile_tflite, run
from tvm_serenity.frontend import reference as ref
from tvm_serenity.frontend.builder import ModelBuilder
from tvm_serenity.frontend.interpreters import TFLM, available, run_interpreter
from tvm_serenity.frontend.tflite_model import parse_tflite
from toolchain import needs_cc

needs_tflm = pytest.mark.skipif(not available(TFLM), reason="tflite-micro is not installed")

VWW_INPUT_SCALE = 0.007839307188987732          # vww's input QUANTIZE
FUZZ_PIXEL = float.fromhex("0x1.49201ep-3")     # tflite-0165's pixel: x / scale == 20.5


def _quantize_model(shape, scale: float, zero_point: int) -> bytes:
    b = ModelBuilder()
    x = b.add_tensor(shape, "float32", name="x")
    q = b.add_tensor(shape, scale=scale, zero_point=zero_point, name="q")
    b.add_operator("QUANTIZE", [x], [q])
    return b.build([x], [q])


@needs_cc
@needs_tflm
@pytest.mark.parametrize("zero_point", [0, -5])
def test_float_quantize_rounds_exact_halves_away_from_zero(tmp_path, zero_point):
    scale = np.float32(VWW_INPUT_SCALE)
    k = np.arange(-128, 128)
    halves = ((k + 0.5) * np.float64(scale)).astype(np.float32)
    rng = np.random.default_rng(0)
    x = np.concatenate([halves, [FUZZ_PIXEL, -FUZZ_PIXEL],
                        rng.uniform(-1.2, 1.2, 254)]).astype(np.float32).reshape(1, 8, 8, 8)
    v = (x / scale).astype(np.float64)                  # float32 quotient, as TFLM divides
    assert np.count_nonzero((v > 0) & (v == np.floor(v) + 0.5)) >= 129    # the edge is hit
    away = np.where(v >= 0, np.floor(v + 0.5), -np.floor(0.5 - v))        # exact in float64
    expected = np.clip(away + zero_point, -128, 127).astype(np.int8)
    assert expected.flat[256] == 21 + zero_point

    data = _quantize_model(x.shape, VWW_INPUT_SCALE, zero_point)
    model = parse_tflite(data)
    tflm = run_interpreter(TFLM, data, [[x]])[0][model.outputs[0]]
    assert np.array_equal(tflm, expected)
    assert np.array_equal(ref.run(model, [x])[0], expected)

    path = tmp_path / "quantize.tflite"
    path.write_bytes(data)
    compile_tflite(path, "host", tmp_path / "out")
    result = run(tmp_path / "out", input=[x], check=False)
    assert np.array_equal(np.frombuffer(result.outputs[0], np.int8).reshape(x.shape), expected)
