"""ONNX QDQ models on the Pico: the one route from ``.onnx`` to rp2040js, against onnxruntime.

The models are the small CNNs of :mod:`tvm_serenity.zoo.onnx_cnns` (written with
``onnx.helper``, quantized by onnxruntime's ``quantize_static`` into QDQ int8 with per-channel
weights) and, with ``--tf2onnx PYTHON`` (a Python that has tf2onnx and TensorFlow, e.g. a
separate virtual environment), the MLPerf Tiny ``.tflite`` models of
``../shared/models/mlperf_tiny`` converted by ``PYTHON -m tf2onnx.convert --tflite ... --opset
13`` into a temporary directory (int8 graph inputs and outputs, QDQ pairs around each
operator, a symbolic batch).

Every operator computes onnxruntime's arithmetic (x86, :mod:`tvm_serenity.frontend.
ort_arithmetic`, the kernel onnxruntime runs decided per node). Per model:
``micro.build_model(path, "pico")`` (arena, kernel scratch, rp2040js cycles, the output checked
byte for byte against the reference interpreter on the operators the build compiled), then
over ``--seeds`` random inputs (float normal for the float inputs, uniform int8 for the MLPerf
models' int8 inputs), on the host build of the same C: its outputs equal the reference
interpreter's (and the llvm build's of ``from_onnx``'s module) on every input, and how far they
are from onnxruntime on the int8 values behind each output (max LSB and the fraction of
differing values). Exact except where onnxruntime
runs a float Conv (or a several-row float Gemm) whose MLAS summation order is not reproduced:
the table counts those kernels. For an MLPerf model the host build of the original ``.tflite``
runs the same int8 inputs too: "vs the .tflite" is the max LSB between the two builds'
outputs (TFLite's fixed point against onnxruntime's float requantization).
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks._markdown import SHARED_MODELS, publish, table

_TITLE = "## ONNX QDQ models on the Pico (`onnx`)"
MLPERF = SHARED_MODELS / "mlperf_tiny"


def _outputs(build, inputs) -> list[np.ndarray]:
    """The outputs of a host build run on ``inputs`` (raises unless bit-exact)."""
    from tvm_serenity import micro
    result = micro.run_model(build.out_dir, input=inputs)
    return [np.frombuffer(raw, t.dtype).reshape(t.shape)
            for raw, t in zip(result.outputs, build.emitted.outputs)]


def _llvm(mod, inputs) -> list[np.ndarray]:
    """The outputs of ``tvm.compile(mod, target="llvm")`` on ``inputs`` (the Relax VM)."""
    import tvm
    from tvm import relax
    ex = tvm.compile(mod, target="llvm")
    out = relax.VirtualMachine(ex, tvm.cpu())["main"](*[tvm.runtime.tensor(a) for a in inputs])
    return [out.numpy()] if isinstance(out, tvm.runtime.Tensor) else [o.numpy() for o in out]


def measure(label: str, activations: str, path: str, inputs: list[list[np.ndarray]],
            folder: Path, tflite: Path | None = None) -> dict:
    """One row: ``path`` built for the Pico and the host, run on each input set of
    ``inputs``; with ``tflite``, that model's host build runs them too."""
    from tvm_serenity import micro
    from tvm_serenity.frontend import ort_arithmetic as ort
    from tvm_serenity.frontend.onnx_import import (compare_int8, from_onnx,
                                                   onnx_reference_int8, quantize_outputs)
    from tvm_serenity.frontend.reference import Interpreter

    pico = micro.build_model(path, "pico", folder / "pico")
    run = micro.run_model(pico.out_dir)                  # raises unless bit-exact
    host = micro.build_model(path, "host", folder / "host")
    original = None if tflite is None else micro.build_model(tflite, "host", folder / "tflite")
    reference = Interpreter(host.core.model)
    module = from_onnx(path)
    lsb, differing, values, reference_equal, llvm_equal, tflite_lsb = 0, 0, 0, True, True, 0
    for feed in inputs:
        ours = _outputs(host, feed)
        reference_equal &= all(np.array_equal(a, b) for a, b in zip(ours, reference.run(feed)))
        llvm_equal &= all(np.array_equal(a, b) for a, b in zip(ours, _llvm(module, feed)))
        for got, want in zip(quantize_outputs(path, ours), onnx_reference_int8(path, feed)):
            m, fraction = compare_int8(got, want)
            lsb = max(lsb, m)
            differing += round(fraction * got.size)
            values += got.size
        if original is not None:
            tflite_lsb = max(tflite_lsb, compare_int8(ours, _outputs(original, feed))[0])
    operators = pico.core.model.operators
    return {"model": label, "activations": activations,
            "operators": len(operators), "arena": pico.arena_bytes,
            "scratch": pico.scratch_bytes, "cycles": run.cycles,
            "reference_equal": reference_equal, "llvm_equal": llvm_equal,
            "float": sum(op.options.get(ort.KERNEL) in ort.FLOAT_KERNELS for op in operators),
            "approximate": sum(not ort.reproduced(pico.core.model, op) for op in operators),
            "lsb": lsb, "fraction": differing / values, "values": values,
            "tflite_lsb": None if tflite is None else tflite_lsb}


def zoo_row(name: str, symmetric: bool, seeds: int, work: Path) -> dict:
    from tvm_serenity.zoo import onnx_cnns
    folder = work / f"{name}_{'sym' if symmetric else 'asym'}"
    folder.mkdir()
    path = onnx_cnns.quantized(onnx_cnns.MODELS[name][0](), folder, symmetric=symmetric)
    return measure(name, "symmetric" if symmetric else "asymmetric", path,
                   [onnx_cnns.model_inputs(path, seed) for seed in range(seeds)], folder)


def int8_inputs(path: str, seed: int) -> list[np.ndarray]:
    """Uniform int8 values for each graph input of ``path`` (a symbolic batch as 1)."""
    import onnx
    rng = np.random.default_rng(seed)
    return [rng.integers(-128, 128, [d.dim_value or 1 for d in i.type.tensor_type.shape.dim],
                         np.int8) for i in onnx.load(path).graph.input]


def convert(python: str, tflite: Path, out: Path) -> str:
    """``tflite`` converted by ``python -m tf2onnx.convert`` into ``out``; exits naming the
    model and tf2onnx's last line if the conversion fails."""
    try:
        done = subprocess.run([python, "-m", "tf2onnx.convert", "--tflite", str(tflite),
                               "--output", str(out), "--opset", "13"],
                              capture_output=True, text=True)
    except OSError as e:
        raise SystemExit(f"onnx_bench: cannot run --tf2onnx {python}: {e.strerror}") from None
    if done.returncode != 0 or not out.exists():
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(f"onnx_bench: tf2onnx ({python}) cannot convert {tflite.name}: {last}")
    return str(out)


def mlperf_row(python: str, tflite: Path, seeds: int, work: Path) -> dict:
    folder = work / tflite.stem
    folder.mkdir()
    path = convert(python, tflite, folder / f"{tflite.stem}.onnx")
    return measure(f"{tflite.stem} (MLPerf Tiny, tf2onnx)", "as the .tflite", path,
                   [int8_inputs(path, seed) for seed in range(seeds)], folder, tflite)


def report(rows: list[dict], seeds: int, mlperf: bool) -> str:
    body = table(["model", "activations", "operators", "float kernels (not reproduced)",
                  "arena B", "scratch B", "rp2040js cycles", "bit-exact (reference, rp2040js)",
                  f"host = reference ({seeds} inputs)", "= llvm build", "max LSB vs onnxruntime",
                  "values differing", "vs the .tflite"],
                 [[r["model"], r["activations"], r["operators"],
                   f"{r['float']} ({r['approximate']})", r["arena"], r["scratch"],
                   r["cycles"], "yes", "yes" if r["reference_equal"] else "NO",
                   "yes" if r["llvm_equal"] else "NO", r["lsb"],
                   f"{100 * r['fraction']:.1f}% of {r['values']:,}",
                   "-" if r["tflite_lsb"] is None else f"{r['tflite_lsb']} LSB"]
                  for r in rows])
    models = ("the MLPerf Tiny `.tflite` models converted by tf2onnx (`--tf2onnx PYTHON`, "
              "opset 13: int8 inputs and outputs, a symbolic batch fixed to 1; their "
              "activations quantized as in the `.tflite`), whose last column is the max LSB "
              "between this build and the host build of the original `.tflite` on the same "
              "int8 inputs (TFLite's fixed point against onnxruntime's float requantization)"
              if mlperf else
              "no MLPerf Tiny rows: tf2onnx and TensorFlow are not in the project's "
              "environment; they install in a separate one (`pip install tensorflow "
              "tf2onnx`), whose Python `--tf2onnx PYTHON` takes to convert "
              "`../shared/models/mlperf_tiny/*.tflite` and add their rows")
    return (f"{_TITLE}\n\n`tvm-serenity compile MODEL.onnx --target pico` through the one "
            "route (TVM's ONNX frontend, NHWC, `LowerFakeQuant` with onnxruntime's arithmetic, "
            "the `MemoryAwareSchedule` pass on the MCU memory model, the MCU back end) on the "
            "small CNNs of `tvm_serenity.zoo.onnx_cnns`, quantized by onnxruntime (QDQ, int8, "
            f"per-channel weights), and {models}. Every operator computes what onnxruntime "
            "1.32 computes on x86 (`tvm_serenity.frontend.ort_arithmetic`): the kernel it "
            "runs is decided per node as its graph rewrites decide it (a tensor with fan-out, "
            "a graph output or an int8 graph input stays int8, and its neighbours run in float "
            "between DequantizeLinear and QuantizeLinear), integer kernels requantize exactly "
            "as its float32 `MlasRequantizeOutput`, float ones run in float32 in MLAS's order "
            "(soft float on the Cortex-M0+). 'float kernels' counts the operators onnxruntime "
            "runs in float; in parentheses those whose MLAS summation order is not "
            "reproduced (a float Conv, a several-row float Gemm), the only possible source "
            "of a difference (1 LSB where a value lies within a few float32 ulps of a rounding "
            "boundary). Exactness costs cycles against TFLite's fixed point: on the "
            "Cortex-M0+ every float32 operation is a libgcc soft-float call (QuantizeLinear "
            "divides; QLinearAdd's exact fused multiply-add takes several float64 ones), and "
            "the float32 requantization computed exactly in 32-bit integers takes more "
            "instructions than TFLite's; ad01's two float Gemms (next to its int8 graph input "
            "and output) and resnet's float residual Adds cost the most. Bit-exact: the "
            "rp2040js output equals the reference interpreter on "
            f"the operators the build compiled (`model.tflite`); over {seeds} random inputs "
            "(float normal, or uniform int8 for int8 inputs) the host build of the same C "
            "equals the reference interpreter, and the int8 values behind each output are "
            "compared with onnxruntime's (default session options); '= llvm build': the same "
            "outputs from `tvm.compile(from_onnx(path), target=\"llvm\")`, whose operators "
            "call the same kernels (one kernel family).\n\n"
            f"{body}\n")


def main(argv=None) -> int:
    from tvm_serenity.zoo import onnx_cnns
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one model, two inputs")
    ap.add_argument("--seeds", type=int, default=8, help="random inputs per model")
    ap.add_argument("--tf2onnx", metavar="PYTHON",
                    help="a Python with tf2onnx: add the MLPerf Tiny models, converted by it")
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args(argv)
    started = time.perf_counter()
    variants = onnx_cnns.VARIANTS[:1] if args.quick else onnx_cnns.VARIANTS
    seeds = 2 if args.quick else args.seeds
    with tempfile.TemporaryDirectory() as work:
        rows = [zoo_row(name, sym, seeds, Path(work)) for name, sym in variants]
        if args.tf2onnx:
            models = sorted(MLPERF.glob("*.tflite"))
            if not models:
                raise SystemExit(f"onnx_bench: no .tflite model in {MLPERF}")
            rows += [mlperf_row(args.tf2onnx, m, seeds, Path(work)) for m in models]
    publish("onnx", report(rows, seeds, bool(args.tf2onnx)), started, args.write)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
