"""MLPerf Tiny on the Pico and the Pico 2: the four int8 reference models of MLPerf Tiny, the
TinyEngine and MCUNet models and a two-input DARTS cell, each built, measured and run on both
emulated boards, every output compared with TensorFlow Lite Micro's.

    python -m benchmarks.mlperf_bench [--write] [--quick] [--models NAME ...] [--out DIR]

Per model: TFLite Micro's head arena (:func:`~tvm_serenity.frontend.interpreters.tflm_arena`,
the interpreter's own plan) and its outputs on ``len(SEEDS)`` random input sets
(:func:`~tvm_serenity.frontend.interpreters.run_interpreter`). Per model and board (``pico``:
RP2040 on rp2040js, ``pico2``: RP2350 on QEMU mps2-an505), through
:func:`tvm_serenity.deploy.compile_tflite` (RiP, schedule ``serenity``, planner ``optimal``,
float edges on the device) and :func:`tvm_serenity.micro.build`:

* arena, kernel scratch and the SRAM total and fit as the fit check counts them
  (:func:`tvm_serenity.micro.measure_fit` on the linked ELF; an image it refuses is linked
  anyway for the measurement, so a refused row still says by how much SRAM or flash is over);
* when it fits: :func:`tvm_serenity.deploy.run` once per input set, each output compared byte
  for byte with TFLite Micro's; cycles (rp2040js) or instructions (QEMU) and the painted stack
  high-water mark of the first set;
* the I/O audit (:func:`sram_objects`): every sized object the ELF's symbol table places in
  SRAM's ``.data``/``.bss`` besides the ``arena`` (:func:`tvm_serenity.micro.fit.
  static_ram_objects`), sorted into the kernels' scratch buffers (``scratch*``), the harness's
  own state (:data:`RUNTIME_OBJECTS`) and anything else, which is what could be an input or
  output buffer outside the arena; the bytes of ``.data``/``.bss`` no symbol covers (alignment)
  are counted too, so an unnamed buffer could not hide.

``--write`` replaces the "mlperf" section of BENCHMARKS.md; ``--quick`` runs the keyword
spotter only.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks._markdown import SHARED_MODELS, geomean, publish, table
from tvm_serenity import micro
from tvm_serenity.deploy import CompiledModel, compile_tflite, run
from tvm_serenity.frontend.interpreters import TFLM, model_inputs, run_interpreter, tflm_arena
from tvm_serenity.frontend.tflite_model import TFLiteModel, load_tflite
from tvm_serenity.micro.elf import read_elf
from tvm_serenity.micro.fit import static_ram_objects

#: name -> (path under ../shared/models, what it is)
MODELS = {
    "ad01": ("mlperf_tiny/ad01_int8.tflite", "MLPerf Tiny anomaly detection (ToyADMOS FC "
                                             "autoencoder)"),
    "kws": ("mlperf_tiny/kws_ref_model.tflite", "MLPerf Tiny keyword spotting (DS-CNN)"),
    "resnet": ("mlperf_tiny/pretrainedResnet_quant.tflite", "MLPerf Tiny image classification "
                                                            "(CIFAR-10 ResNet-8)"),
    "vww96": ("mlperf_tiny/vww_96_int8.tflite", "MLPerf Tiny visual wake words (MobileNet "
                                                "0.25, 96x96)"),
    "tinyengine-vww": ("tinyengine/vww.tflite", "TinyEngine visual wake words (float32 in "
                                                "and out)"),
    "mcunet-320kb": ("mcunet/mcunet-320kb-1mb_imagenet.tflite", "MCUNet 320 KB ImageNet"),
    "darts-cifar": ("keras/darts_v2_normal_cifar_32x32_C36.tflite", "DARTS-V2 normal cell, "
                                                                    "two inputs"),
}
QUICK_MODELS = ["kws"]
BOARDS = ("pico", "pico2")
SEEDS = (1, 2, 3)
#: The harness's own SRAM objects (tvm_serenity/micro/firmware): name -> what it is.
RUNTIME_OBJECTS = {"serenity_result": "main.c: the run's result record",
                   "systick_wraps": "port_arm.c: SysTick wrap count",
                   "line": "port_arm.c: semihosting console line (QEMU)",
                   "line_len": "port_arm.c: its length"}
SCRATCH_PREFIX = "scratch"      # model.c's kernel scratch buffers (scratch16, scratch32, ...)


@dataclass(frozen=True)
class SramObjects:
    """SRAM ``.data``/``.bss`` of a linked image, from its symbol table (bytes)."""

    arena: int
    scratch: dict[str, int]
    runtime: dict[str, int]
    other: dict[str, int]     # neither arena, scratch nor runtime: what could be I/O
    uncovered: int            # .data/.bss bytes no sized symbol covers (alignment padding)

    @property
    def io_bytes(self) -> int:
        return sum(self.other.values())

    def describe(self) -> str:
        named = {**self.scratch, **self.runtime, **self.other}
        return ", ".join(f"{n} {b:,}" for n, b in sorted(named.items())) + \
            f"; padding {self.uncovered:,}"


def sram_objects(elf: Path, board: str) -> SramObjects:
    """Sort every SRAM data object of the emulator image ``elf`` built for ``board``."""
    objects = static_ram_objects(elf, board, emulate=True)
    image = read_elf(elf)
    ram = micro.get_board(board).layout(True).ram
    sections = sum(s.size for s in image.sections
                   if s.alloc and s.name in (".data", ".bss") and ram.contains(s.address))
    arena = image.symbols["arena"].size
    scratch = {n: b for n, b in objects.items() if n.startswith(SCRATCH_PREFIX)}
    runtime = {n: b for n, b in objects.items() if n in RUNTIME_OBJECTS}
    other = {n: b for n, b in objects.items() if n not in scratch and n not in runtime}
    return SramObjects(arena, scratch, runtime, other,
                       sections - arena - sum(objects.values()))


def input_sets(model: TFLiteModel) -> list[list[np.ndarray]]:
    """One random input set per seed of :data:`SEEDS` (int8 uniform, float32 in [-1, 1))."""
    return [model_inputs(model, np.random.default_rng(seed)) for seed in SEEDS]


def tflm_outputs(path: Path, model: TFLiteModel, sets) -> list[list[bytes]]:
    """Each output's bytes as TFLite Micro's interpreter computes them, per input set."""
    return [[np.ascontiguousarray(tensors[i], dtype=model.tensors[i].dtype).tobytes()
             for i in model.outputs] for tensors in run_interpreter(TFLM, path, sets)]


def build(compiled: CompiledModel) -> tuple[micro.FitReport, Path]:
    """Build the firmware; its fit report and ELF, also for an image the fit check refuses."""
    project = compiled.project_dir
    try:
        firmware = micro.build(project)
        return firmware.fit, firmware.elf
    except micro.DoesNotFitError:
        meta = micro.load_project(project)
        elf = project / micro.build_plan(compiled.target, emulate=True).output
        return micro.measure_fit(elf, compiled.target, emulate=True,
                                 stack_reserve=meta["stack_reserve"],
                                 scratch_bytes=meta["scratch_bytes"]), elf


def fits(fit: micro.FitReport) -> str:
    """"yes", or "no" with each overflow as the fit check words it."""
    over = ([f"SRAM over by {fit.over_bytes:,} B"] if not fit.sram_fits else []) + \
        ([f"flash over by {fit.flash_over_bytes:,} B"] if not fit.flash_fits else [])
    return f"no ({', '.join(over)})" if over else "yes"


def measure_board(path: Path, board: str, out: Path, sets, expected) -> dict:
    """One row: build ``path`` for ``board`` into ``out``, audit its ELF and, if it fits,
    run every input set of ``sets`` and compare with TFLM's outputs ``expected``."""
    compiled = compile_tflite(path, board, out, input=sets[0], build=False)
    fit, elf = build(compiled)
    row = {"board": board, "arena": compiled.arena_bytes, "scratch": compiled.scratch_bytes,
           "sram": fit.total_bytes, "fits": fits(fit), "sram_objects": sram_objects(elf, board),
           "io_tensors": sum(t.bytes for t in (*compiled.emitted.inputs,
                                               *compiled.emitted.outputs)),
           "counter": None, "stack": None, "exact": None}
    if fit.fits:
        results = [run(out, input=inputs, check=False) for inputs in sets]
        first = results[0]
        row.update(counter=first.cycles if board == "pico" else first.instructions,
                   stack=first.stack_high_water,
                   exact=sum(list(r.outputs) == want for r, want in zip(results, expected)))
    return row


def measure(names, out_dir: Path) -> list[dict]:
    rows = []
    for name in names:
        path = SHARED_MODELS / MODELS[name][0]
        if not path.is_file():
            print(f"skip {name}: {path} is absent")
            continue
        model = load_tflite(path)
        sets = input_sets(model)
        expected = tflm_outputs(path, model, sets)
        head = tflm_arena(path).head
        for board in BOARDS:
            t0 = time.perf_counter()
            row = measure_board(path, board, out_dir / f"{name}-{board}", sets, expected)
            row.update(model=name, tflm_head=head, inputs=len(model.inputs),
                       outputs=len(model.outputs), seconds=time.perf_counter() - t0)
            print(f"{name} {board}: {row}", flush=True)
            rows.append(row)
    return rows


def _fmt(value) -> str:
    return "n/a" if value is None else f"{value:,}"


def render(rows: list[dict]) -> str:
    headers = ["model", "in/out", "board", "TFLM head arena B", "arena B", "TFLM/ours",
               "scratch B", "stack B", "SRAM total B", "fits", "cycles (pico) / instructions "
               "(pico2)", f"bit-exact vs TFLM ({len(SEEDS)} inputs)", "I/O tensors B",
               "I/O outside the arena B", "s"]
    main, objects = [], []
    for r in rows:
        exact = "n/a" if r["exact"] is None else f"{r['exact']}/{len(SEEDS)}"
        main.append([r["model"], f"{r['inputs']}/{r['outputs']}", r["board"], r["tflm_head"],
                     r["arena"], f"{r['tflm_head'] / r['arena']:.2f}x", r["scratch"],
                     _fmt(r["stack"]), r["sram"], r["fits"], _fmt(r["counter"]), exact,
                     r["io_tensors"], r["sram_objects"].io_bytes, f"{r['seconds']:.0f}"])
        objects.append([r["model"], r["board"], r["sram_objects"].arena,
                        r["sram_objects"].describe(), r["sram_objects"].io_bytes])
    ratio = geomean(r["tflm_head"] / r["arena"] for r in rows if r["board"] == BOARDS[0])
    files = "\n".join(f"* `{name}`: {MODELS[name][1]}, `{MODELS[name][0]}`"
                      for name in dict.fromkeys(r["model"] for r in rows))
    text = ["## MLPerf Tiny on the Pico and the Pico 2 (`mlperf`)\n",
            "The four int8 reference models of MLPerf Tiny (mlcommons/tiny), TinyEngine's and "
            "MCUNet's models and a two-input DARTS cell, each compiled with "
            "`tvm_serenity.deploy.compile_tflite` (RiP, schedule `serenity`, planner "
            "`optimal`, float edges on the device) for the Pico (RP2040, rp2040js) and the "
            "Pico 2 (RP2350, QEMU mps2-an505). TFLM head arena: the activation arena TFLite "
            "Micro's interpreter plans for the same model (`tflm_arena`). Arena, scratch "
            "(kernel gather buffers) and stack (painted high-water mark of the emulated run) "
            "are ours; SRAM total is what the fit check counts on the linked ELF (arena, "
            ".data, the rest of .bss, the 8 KiB stack reserve), and `fits` its verdict, with "
            "the SRAM or flash overflow of a refused image. Cycles are rp2040js's Cortex-M0+ "
            "model (no XIP wait states), QEMU counts instructions. Bit-exact: on how many of "
            f"{len(SEEDS)} random input sets every device output equals TFLite Micro's "
            "interpreter byte for byte. I/O: the bytes of the model's inputs and outputs (all "
            "in the arena, where the harness writes and reads them; an output may reuse its "
            "input's bytes, so they can exceed the arena), and the bytes of SRAM "
            "objects in the ELF's symbol table that could be an I/O buffer outside the arena: "
            "every `.data`/`.bss` object but the arena, the kernel scratch and the harness's "
            "state (listed below with each object's size). The run's test inputs are "
            "constants in flash (`input.c`), copied once into the arena as a sensor driver "
            "would write them. `s`: wall time of the row (build and runs).", "",
            files, "",
            table(headers, main), "",
            f"Geomean TFLM head arena / ours over these models: **{ratio:.2f}x**.", "",
            "<details><summary>SRAM objects besides the arena (ELF symbol table, "
            "bytes)</summary>\n",
            table(["model", "board", "arena B", "objects besides the arena",
                   "could be I/O B"], objects), "", "</details>"]
    return "\n".join(text)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="update BENCHMARKS.md")
    parser.add_argument("--models", nargs="+", choices=sorted(MODELS), default=list(MODELS))
    parser.add_argument("--out", type=Path, help="keep the builds here (default: temporary)")
    parser.add_argument("--quick", action="store_true",
                        help=f"{', '.join(QUICK_MODELS)} only (under a minute)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="mlperf-bench-") as tmp:
        rows = measure(QUICK_MODELS if args.quick else args.models, args.out or Path(tmp))
    publish("mlperf", render(rows), started, args.write)


if __name__ == "__main__":
    main()
