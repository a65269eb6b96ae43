"""The MCUNet suite on a Pico 1 (RP2040, 264 KiB SRAM), measured: how many models fit, TFLite
Micro's way and ours.

    python -m benchmarks.mcunet_pico_bench [--write] [--models NAME ...] [--out DIR] [--no-run]

Every MCUNet / ProxylessNAS / MobileNetV2 config of the shared models folder
(:func:`tvm_serenity.zoo.mcunet.config_names`) is written as an int8 ``.tflite`` with seeded
random weights (:func:`tvm_serenity.zoo.tflite.mcunet_tflite`; into ``DIR/models``, a temporary
directory unless ``--out``) and compiled for ``pico`` three times with
:func:`tvm_serenity.deploy.compile_tflite`:

* ``TFLM-style``: TFLite's stored operator order, the greedy arena planner, no in-place
  execution (every operator reads and writes two buffers), what TFLite Micro does;
* ``ours``: the defaults (schedule ``serenity``, planner ``optimal``, Right In-Place and the
  other in-place kinds of the memory model);
* ``ours + rewriting``: the same with identity graph rewriting (``rewrite=True``, the CLI's
  ``--rewrite``), which fuses a 1x1 expand convolution into its depthwise consumer where the
  peak drops.

Per build (:func:`benchmarks.mlperf_bench.build`, which measures an image the fit check refuses
too): arena, kernel scratch (its buffers in ``.bss``), the stack reserve, the runtime (the rest
of what the fit check counts: the harness's ``.data``/``.bss`` and alignment), their sum as
the SRAM total against the RP2040's 270,336 B, and the fit check's verdict with its overflow.
A build that fits is run on rp2040js with one random input (seed :data:`SEED`): cycles, the
painted stack high-water mark, and whether the output equals TensorFlow Lite Micro's
interpreter byte for byte. TFLM's own head arena for the same model
(:func:`~tvm_serenity.frontend.interpreters.tflm_arena`) is listed next to the TFLM-style
arena. The counts of fitting models per strategy close the section; the RiP paper's anchor
(TinyEngine 6 of 11, RiP 9 of 11 on the real board, with the Pico SDK and TinyUSB in SRAM) is
quoted for scale. ``--write`` replaces the "mcunet_pico" section of BENCHMARKS.md;
``--no-run`` builds and measures the fit without running.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks._markdown import publish, table
from benchmarks.mlperf_bench import build, fits, tflm_outputs
from tvm_serenity import micro
from tvm_serenity.deploy import compile_tflite, run
from tvm_serenity.frontend.interpreters import model_inputs, tflm_arena
from tvm_serenity.frontend.tflite_model import load_tflite
from tvm_serenity.zoo.mcunet import config_names
from tvm_serenity.zoo.tflite import mcunet_tflite

#: strategy -> compile_tflite options
STRATEGIES = {"TFLM-style": {"schedule": "stored", "planner": "greedy", "rip": False},
              "ours": {}, "ours + rewriting": {"rewrite": True}}
OURS = ("ours", "ours + rewriting")
BOARD = "pico"
SEED = 1
PAPER = "TinyEngine 6 of 11, RiP 9 of 11 (RiP paper, Table 3, on a real Pico 1)"


def model_names() -> list[str]:
    """The configs of the shared models folder, without their ``_imagenet`` suffix."""
    return [stem.replace("_imagenet", "") for stem in config_names()]


def write_model(name: str, models_dir: Path) -> Path:
    path = models_dir / f"{name}.tflite"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(mcunet_tflite(name))
    return path


def measure_build(path: Path, options: dict, out: Path, inputs, expected, execute: bool
                  ) -> dict:
    """One build of ``path`` for the Pico into ``out``: its SRAM parts, the fit verdict and,
    when it fits and ``execute``, one rp2040js run compared with TFLM's outputs ``expected``."""
    compiled = compile_tflite(path, BOARD, out, input=inputs, build=False, **options)
    fit, _ = build(compiled)
    stack = fit.part("stack reserve")
    row = {"arena": compiled.arena_bytes, "scratch": compiled.scratch_bytes,
           "stack_reserve": stack, "sram": fit.total_bytes, "sram_limit": fit.sram_bytes,
           "runtime": fit.total_bytes - compiled.arena_bytes - compiled.scratch_bytes - stack,
           "fits": fit.fits, "verdict": fits(fit), "cycles": None, "stack_used": None,
           "exact": None}
    if fit.fits and execute:
        result = run(out, input=inputs, check=False)
        row.update(cycles=result.cycles, stack_used=result.stack_high_water,
                   exact=list(result.outputs) == expected)
    return row


def measure(names, out_dir: Path, execute: bool = True) -> list[dict]:
    rows = []
    for name in names:
        path = write_model(name, out_dir / "models")
        model = load_tflite(path)
        inputs = model_inputs(model, np.random.default_rng(SEED))
        expected = tflm_outputs(path, model, [inputs])[0]
        head = tflm_arena(path).head
        for strategy, options in STRATEGIES.items():
            t0 = time.perf_counter()
            row = measure_build(path, options, out_dir / f"{name}-{strategy}", inputs,
                                expected, execute)
            row.update(model=name, strategy=strategy, tflm_head=head,
                       seconds=time.perf_counter() - t0)
            print(f"{name} {strategy}: {row}", flush=True)
            rows.append(row)
    return rows


def fit_counts(rows: list[dict]) -> dict[str, int]:
    """Strategy -> how many models fit the Pico."""
    return {s: sum(r["fits"] for r in rows if r["strategy"] == s) for s in STRATEGIES}


def _fmt(value) -> str:
    return "n/a" if value is None else f"{value:,}"


def render(rows: list[dict]) -> str:
    limit = rows[0]["sram_limit"] if rows else micro.get_board(BOARD).sram.size
    headers = ["model", "strategy", "TFLM head arena B", "arena B", "scratch B",
               "stack reserve B", "runtime B", "SRAM total B", f"fits {limit:,} B",
               "stack used B", "rp2040js cycles", "bit-exact vs TFLM", "s"]
    body = []
    for r in rows:
        exact = "n/a" if r["exact"] is None else ("yes" if r["exact"] else "NO")
        body.append([r["model"], r["strategy"], r["tflm_head"], r["arena"], r["scratch"],
                     r["stack_reserve"], r["runtime"], r["sram"], r["verdict"],
                     _fmt(r["stack_used"]), _fmt(r["cycles"]), exact, f"{r['seconds']:.0f}"])
    models = len({r["model"] for r in rows})
    counts = fit_counts(rows)
    newly = sorted({r["model"] for r in rows if r["strategy"] in OURS and r["fits"]}
                   - {r["model"] for r in rows if r["strategy"] == "TFLM-style" and r["fits"]})
    ran = [r for r in rows if r["exact"] is not None]
    text = ["## The MCUNet suite on a Pico 1 (`mcunet_pico`)\n",
            "Every MCUNet / ProxylessNAS / MobileNetV2 config of `../shared/models/mcunet` "
            "written as an int8 `.tflite` with seeded random weights "
            "(`tvm_serenity.zoo.tflite.mcunet_tflite`: the zoo's graph, operator for operator; "
            "the `-int4` configs with int8 weights, as the zoo counts them) and compiled for "
            "the Pico (RP2040) by `tvm_serenity.deploy.compile_tflite` three times: **TFLM-style** "
            "(TFLite's stored order, greedy arena, no in-place execution: "
            "`schedule=\"stored\", planner=\"greedy\", rip=False`) and **ours** (defaults: "
            "`serenity` order, `optimal` arena, Right In-Place and the memory model's other "
            "in-place kinds) and **ours + rewriting** (`rewrite=True`, the CLI's `--rewrite`: "
            "identity graph rewriting, here a 1x1 expand convolution fused into its depthwise "
            "consumer wherever the peak drops). TFLM head arena: TFLite Micro's own plan for the model. SRAM "
            "total is what the fit check counts on the linked image: arena + kernel scratch "
            "+ the 8 KiB stack reserve + runtime (the bare-metal harness's other "
            ".data/.bss and alignment); `fits` is its verdict, with the overflow of a refused "
            "image (SRAM, or flash for weights beyond the Pico's 2 MiB). Builds that fit run "
            "on rp2040js with one random input; bit-exact: the output equals TensorFlow Lite "
            "Micro's interpreter byte for byte; stack used: the painted high-water mark.", "",
            table(headers, body), "",
            f"Models that fit the Pico's {limit:,} B: **TFLM-style {counts['TFLM-style']} "
            f"of {models}, ours {counts['ours']} of {models}, ours + rewriting "
            f"{counts['ours + rewriting']} of {models}**"
            + (f" (newly fitting: {', '.join(newly)})" if newly else "")
            + f". Bit-exact on rp2040js: {sum(r['exact'] for r in ran)} of {len(ran)} runs. "
            f"Anchor: {PAPER}; the paper's suite has Visual Wake Words models this folder does "
            "not, and its board keeps the Pico SDK and TinyUSB in SRAM."]
    return "\n".join(text)


def main(argv=None) -> None:
    names = model_names()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="update BENCHMARKS.md")
    parser.add_argument("--models", nargs="+", choices=names, default=names)
    parser.add_argument("--out", type=Path, help="keep the models and builds here "
                                                 "(default: temporary)")
    parser.add_argument("--no-run", action="store_true", help="measure the fit only")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="mcunet-pico-bench-") as tmp:
        rows = measure(args.models, args.out or Path(tmp), not args.no_run)
    publish("mcunet_pico", render(rows), started, args.write)


if __name__ == "__main__":
    main()
