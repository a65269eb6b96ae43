"""ONNX QDQ models on the Pico: the one route from ``.onnx`` to rp2040js, against onnxruntime.

The models are the small CNNs of :mod:`tvm_serenity.zoo.onnx_cnns` (written with
``onnx.helper``, quantized by onnxruntime's ``quantize_static`` into QDQ int8 with per-channel
weights). No MLPerf Tiny model is here in ONNX form: the converter (tf2onnx) needs TensorFlow
and does not support the TensorFlow that installs here.

Per model: ``micro.build_model(path, "pico")`` (arena, kernel scratch, rp2040js cycles, the
output checked byte for byte against the reference interpreter on the operators the build
compiled), then over ``--seeds`` random float inputs, on the host build of the same C: the
outputs equal the llvm build of the module ``from_onnx`` returns (``tvm.compile``, the kernels
``LowerFakeQuant`` wrote), and how far they are from onnxruntime on the int8 values behind
each output (max LSB and the fraction of differing values). onnxruntime requantizes in float
with round half to even; the kernels use TFLite's fixed point, so single operators differ by at
most 1 LSB and differences can add up along a path.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks._markdown import publish, table

_TITLE = "## ONNX QDQ models on the Pico (`onnx`)"


def _llvm(mod, inputs):
    import tvm
    from tvm import relax
    ex = tvm.compile(mod, target="llvm")
    out = relax.VirtualMachine(ex, tvm.cpu())["main"](*[tvm.runtime.tensor(a) for a in inputs])
    return [out.numpy()] if isinstance(out, tvm.runtime.Tensor) else [o.numpy() for o in out]


def measure(name: str, symmetric: bool, seeds: int, work: Path) -> dict:
    from tvm_serenity import micro
    from tvm_serenity.frontend.onnx_import import (compare_int8, from_onnx,
                                                   onnx_reference_int8, quantize_outputs)
    from tvm_serenity.zoo import onnx_cnns

    folder = work / f"{name}_{'sym' if symmetric else 'asym'}"
    folder.mkdir()
    path = onnx_cnns.quantized(onnx_cnns.MODELS[name][0](), folder, symmetric=symmetric)
    pico = micro.build_model(path, "pico", folder / "pico")
    run = micro.run_model(pico.out_dir)                  # raises unless bit-exact
    host = micro.build_model(path, "host", folder / "host")
    module = from_onnx(path)
    lsb, differing, values, llvm_equal = 0, 0, 0, True
    for seed in range(seeds):
        inputs = onnx_cnns.model_inputs(path, seed)
        result = micro.run_model(host.out_dir, input=inputs)
        ours = [np.frombuffer(raw, t.dtype).reshape(t.shape)
                for raw, t in zip(result.outputs, host.emitted.outputs)]
        llvm_equal &= all(np.array_equal(a, b) for a, b in zip(ours, _llvm(module, inputs)))
        for got, want in zip(quantize_outputs(path, ours), onnx_reference_int8(path, inputs)):
            m, fraction = compare_int8(got, want)
            lsb = max(lsb, m)
            differing += round(fraction * got.size)
            values += got.size
    return {"model": name, "activations": "symmetric" if symmetric else "asymmetric",
            "operators": len(pico.core.model.operators), "arena": pico.arena_bytes,
            "scratch": pico.scratch_bytes, "cycles": run.cycles, "llvm_equal": llvm_equal,
            "lsb": lsb, "fraction": differing / values, "values": values}


def report(rows: list[dict], seeds: int) -> str:
    body = table(["model", "activations", "operators", "arena B", "scratch B",
                  "rp2040js cycles", "bit-exact (reference, rp2040js)", "= llvm build",
                  "max LSB vs onnxruntime", "values differing"],
                 [[r["model"], r["activations"], r["operators"], r["arena"], r["scratch"],
                   r["cycles"], "yes", "yes" if r["llvm_equal"] else "NO", r["lsb"],
                   f"{100 * r['fraction']:.1f}% of {r['values']:,}"] for r in rows])
    return (f"{_TITLE}\n\n`tvm-serenity compile MODEL.onnx --target pico` through the one "
            "route (TVM's ONNX frontend, NHWC, `LowerFakeQuant`, the `MemoryAwareSchedule` pass "
            "on the MCU memory model, the MCU back end) on the small CNNs of "
            "`tvm_serenity.zoo.onnx_cnns`, quantized by onnxruntime (QDQ, int8, per-channel "
            "weights). Bit-exact: the rp2040js output equals the reference interpreter on the "
            "operators the build compiled (`model.tflite`). Over "
            f"{seeds} random float inputs on the host build of the same C: equal to the llvm "
            "build of `from_onnx`'s module, and the int8 values behind each output against "
            "onnxruntime's (its requantization is float with round half to even, ours TFLite's "
            "fixed point: 1 LSB per operator at most, adding up along a path). No MLPerf Tiny "
            "model in ONNX form: tf2onnx needs a TensorFlow that does not install here.\n\n"
            f"{body}\n")


def main(argv=None) -> int:
    from tvm_serenity.zoo import onnx_cnns
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one model, two inputs")
    ap.add_argument("--seeds", type=int, default=8, help="random inputs per model")
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args(argv)
    started = time.perf_counter()
    variants = onnx_cnns.VARIANTS[:1] if args.quick else onnx_cnns.VARIANTS
    seeds = 2 if args.quick else args.seeds
    with tempfile.TemporaryDirectory() as work:
        rows = [measure(name, sym, seeds, Path(work)) for name, sym in variants]
    publish("onnx", report(rows, seeds), started, args.write)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
