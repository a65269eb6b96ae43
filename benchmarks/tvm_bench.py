"""The "serenity" Relax pipeline end to end on the shared models: TVM 0.27's own memory plan
against ours, and bit-exactness on the Relax VM.

    python -m benchmarks.tvm_bench            # print the table (the 8 shared models)
    python -m benchmarks.tvm_bench --write    # also write section "tvm" of BENCHMARKS.md
    python -m benchmarks.tvm_bench --quick    # vww and one Keras model, 2 input sets
    python -m benchmarks.tvm_bench --models vww mobilenet_v1_025_128 --inputs 5
    python -m benchmarks.tvm_bench --models vww nasnet_mobile_96   # + a built Keras model

Models (``../shared/models``): ``tinyengine/vww``, ``mcunet/mcunet-320kb-1mb_imagenet`` and the
six ``keras/*`` models, each imported by :func:`tvm_serenity.frontend.relax_import.from_tflite`
and compiled once with ``tvm.compile(mod, target="llvm", relax_pipeline="serenity")`` (default
options: identity graph rewriting, exact ``serenity`` schedule, ``optimal`` arena planner, 64 B
alignment). Our figures come from that one compilation: a pass instrument keeps the fused
module the scheduler reads and the module ArenaPlan returns, whose reports
:func:`tvm_serenity.passes.pipeline_report` reads. Every byte figure counts the intermediate
tensors only: TVM's ``StaticPlanBlockMemory`` and ArenaPlan both leave the parameters and the
returned tensor to the caller. Columns:

* ``bindings``: bindings of the imported ``main`` (one kernel call per TFLite operator);
  ``rewrites``: identity graph rewrites (concat -> conv partitioning) the pipeline kept
  (``n/a``: the pipeline has no such pass);
* ``tvm.compile B``: what a plain ``tvm.compile(mod, target="llvm")`` plans: on a CPU target it
  runs TVM's ``"default"`` Relax pipeline (``relax.pipeline.default_build_pipeline``: legalize,
  no operator fusion). Every operator of the module is already one ``call_tir`` of its kernel
  (the kernel family the microcontroller C prints; its int32 scratch is the kernel's own,
  outside every plan), so both TVM pipelines plan the same tensors as ours: the TFLite
  activations. Both get the module after :class:`~tvm_serenity.passes.ShareKernels` (each
  distinct kernel once, as the serenity pipeline builds it);
* ``TVM CPU B``: TVM's CPU pipeline (``relax.get_default_pipeline(llvm)``, i.e. ``cpu_generic``:
  legalize, ``FuseOps``/``FuseTIR``, dataflow lowering), stored (TFLite) order: the TVM figure
  of the ``peers`` section (there plus the graph input and output). Both TVM columns are
  :func:`tvm_serenity.passes.static_plan_bytes` (``StaticPlanBlockMemory``'s storages) of the
  module the pipeline hands to ``StaticPlanBlockMemory``;
* ``TVM stored B``: ``StaticPlanBlockMemory`` on the module our scheduler reads (after the
  serenity pipeline's pre-legalize passes: PAD folding, identity graph rewriting; and TVM's
  legalize and fusion), stored order, lowered with TVM's dataflow passes: our module before
  reordering (what tests/test_relax_import.py calls ``tvm_stored``);
* ``TVM serenity order B``: ``StaticPlanBlockMemory`` on the module ArenaPlan replaces it in
  (serenity order; ``static_plan_bytes`` of the ArenaPlan report of the build without RiP,
  whose copies would only add to TVM's plan);
* ``ours: arena B``: the one arena ArenaPlan lays out for the same tensors; ``liveness B``: the
  liveness peak of those tensors in that order (no allocator does better); ``bound B``: the same
  with sizes padded to the alignment (ArenaPlan's ``lower_bound_bytes``, so liveness <= bound <=
  arena); ``gap``: arena over that bound;
* ``schedule peak B`` (stored -> serenity order) and ``any order bound B``: MemoryAwareSchedule's
  peaks and its lower bound over all orders, under its own memory model (graph inputs and
  outputs counted, in-place steps allowed): not the arena's accounting;
* ``tvm.compile / ours``, ``TVM CPU / ours``, ``TVM stored / ours``: arena ratios (geomeans
  above the table);
* ``bit-exact``: random input sets (uniform int8; uniform [-1, 1) for a float input such as
  vww's; seed 11) on which the VM's outputs equal those of
  :mod:`tvm_serenity.frontend.reference` (``ref``) and, when the package is installed, LiteRT's
  reference kernels (``ai-edge-litert``) and TFLite Micro (``tflite-micro``), each run by
  :func:`tvm_serenity.frontend.interpreters.run_interpreter`;
* ``ours: arena B`` is the default pipeline's (``rip="auto"``: built with and without
  Right-in-Place convolutions, the smaller arena kept; ``RiP`` says which); ``ours, rip=False:
  arena B``: ArenaPlan's arena when the same module goes through
  ``serenity_pipeline(rip=False)``, what RiP saves against; ``rip=False outputs = ours``: input
  sets on which that build's outputs equal the checked ones;
* ``compile s``: wall-clock of ``tvm.compile`` with the serenity pipeline; ``VM load s``: of
  creating the ``relax.VirtualMachine`` from its result, which is when LLVM generates the
  machine code (often longer than the compilation itself).

A model that fails at some stage still gets its row, with the reason in ``notes``.
"""

from __future__ import annotations

import argparse
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import tvm
from tvm import relax
from tvm.relax.backend.cpu_generic import pipeline as cpu

import tvm_serenity.passes as sp
from tvm_serenity.frontend import load_tflite, reference
from tvm_serenity.frontend.interpreters import (LITERT, TFLM, available, model_inputs,
                                                run_interpreter)
from tvm_serenity.frontend.relax_import import from_tflite

from . import keras_models
from ._markdown import SHARED_MODELS, geomean, publish, table

MODELS = ["tinyengine/vww.tflite", "mcunet/mcunet-320kb-1mb_imagenet.tflite",
          "keras/mobilenet_v1_025_128.tflite", "keras/mobilenet_v2_035_96.tflite",
          "keras/mobilenet_v3_small_075_96.tflite",
          "keras/darts_v2_normal_cifar_32x32_C36.tflite",
          "keras/darts_v2_normal_imagenet_28x28_C48.tflite",
          "keras/randwire_cifar100_C78_cellA.tflite"]
QUICK_MODELS = ["vww", "mobilenet_v1_025_128"]
INPUTS, QUICK_INPUTS = 3, 2
SEED = 11
#: Checkers of the VM outputs: the numpy reference, then the real interpreters.
CHECKERS = ["ref", LITERT, TFLM]
TARGET = "llvm"
#: TVM's own Relax pipelines: what ``tvm.compile(mod, "llvm")`` runs, and the CPU pipeline.
TVM_PIPELINES: dict[str, Callable[[], tvm.transform.Pass]] = {
    "tvm_compile": lambda: relax.get_pipeline("default"),
    "tvm_cpu": lambda: relax.get_default_pipeline(tvm.target.Target(TARGET)),
}


def name_of(rel: str) -> str:
    return Path(rel).stem


NAMES = {name_of(rel): rel for rel in MODELS}


@dataclass
class Row:
    model: str
    bindings: int | None = None
    rewrites: int | None = None           # identity graph rewrites kept
    tvm_compile: int | None = None        # plain tvm.compile(mod, "llvm")
    tvm_cpu: int | None = None            # TVM's CPU pipeline (fused), stored order
    tvm_stored: int | None = None         # StaticPlanBlockMemory, our module, stored order
    tvm_serenity: int | None = None       # StaticPlanBlockMemory, our module, serenity order
    arena: int | None = None
    liveness: int | None = None
    bound: int | None = None              # ArenaPlan's lower bound, this order
    status: str = ""                      # arena planner's
    peak_before: int | None = None        # schedule memory model, stored order
    peak_after: int | None = None         # schedule memory model, serenity order
    any_order_bound: int | None = None    # schedule memory model, all orders
    inputs: int = 0
    exact: dict[str, int | str] = field(default_factory=dict)   # checker -> equal sets or why
    rip_chosen: str = "n/a"               # SmallerArena's choice: "rip" or "plain"
    plain_arena: int | None = None        # ArenaPlan's arena with serenity_pipeline(rip=False)
    plain_exact: int | str = "n/a"        # input sets on which that build's outputs equal ours
    compile_seconds: float | None = None
    load_seconds: float | None = None     # relax.VirtualMachine(ex): LLVM code generation
    notes: list[str] = field(default_factory=list)


@tvm.instrument.pass_instrument
class _Capture:
    """From one run of the serenity pipeline: the fused module in stored order (what
    MemoryAwareSchedule reads) and the module ArenaPlan returns (carrying the reports)."""

    def __init__(self):
        self.fused = self.planned = None

    def run_before_pass(self, mod, info):
        if info.name == "serenity.MemoryAwareSchedule":
            self.fused = mod

    def run_after_pass(self, mod, info):
        # with rip="auto" ArenaPlan runs in both candidates; SmallerArena returns the one kept
        if info.name in ("serenity.ArenaPlan", "serenity.SmallerArena"):
            self.planned = mod


@tvm.instrument.pass_instrument
class _BeforeStaticPlan:
    """The module a pipeline hands to (its first) StaticPlanBlockMemory."""

    def __init__(self):
        self.mod = None

    def run_before_pass(self, mod, info):
        if info.name == "StaticPlanBlockMemory" and self.mod is None:
            self.mod = mod


def _why(error: BaseException) -> str:
    """One short line for a table cell (TVM errors carry long tracebacks)."""
    lines = [s.strip() for s in str(error).strip().splitlines() if s.strip()]
    text = lines[-1] if lines else ""
    return f"{type(error).__name__}: {text}"[:160].replace("|", "/")


def tvm_plan(mod: tvm.IRModule, pipeline: tvm.transform.Pass) -> int:
    """``StaticPlanBlockMemory`` bytes the Relax ``pipeline`` plans for ``mod`` (no codegen)."""
    before = _BeforeStaticPlan()
    with tvm.target.Target(TARGET), tvm.transform.PassContext(instruments=[before]):
        pipeline(mod)
    if before.mod is None:
        raise RuntimeError("the pipeline ran no StaticPlanBlockMemory")
    return sp.static_plan_bytes(before.mod)


def _stored_plan(fused: tvm.IRModule) -> int:
    target = tvm.target.Target(TARGET)
    with target:
        lowered = tvm.transform.Sequential(cpu.dataflow_lower_passes(target))(fused)
    return sp.static_plan_bytes(lowered)


def run_vm(vm: relax.VirtualMachine, inputs) -> list[np.ndarray]:
    out = vm["main"](*[tvm.runtime.tensor(a) for a in inputs])
    return [out.numpy()] if isinstance(out, tvm.runtime.Tensor) else [o.numpy() for o in out]


def outputs_equal(got, want) -> bool:
    return len(got) == len(want) and all(
        g.dtype == w.dtype and g.shape == w.shape and np.array_equal(g, w)
        for g, w in zip(got, want))


def _check(row: Row, model, path: Path, outputs, input_sets) -> None:
    """Fill ``row.exact``: per checker, on how many input sets the VM outputs are equal."""
    try:
        row.exact["ref"] = sum(outputs_equal(got, reference.run(model, inputs))
                               for got, inputs in zip(outputs, input_sets))
    except Exception as e:      # noqa: BLE001 - reported in the row
        row.exact["ref"] = "error"
        row.notes.append(f"reference: {_why(e)}")
    for kind in CHECKERS[1:]:
        if not available(kind):
            row.exact[kind] = "n/a"
            continue
        try:
            results = run_interpreter(kind, path, input_sets)
        except Exception as e:  # noqa: BLE001 - an abort or error of the interpreter
            row.exact[kind] = "error"
            row.notes.append(f"{kind}: {_why(e)}")
            continue
        row.exact[kind] = sum(outputs_equal(got, [tensors[i] for i in model.outputs])
                              for got, tensors in zip(outputs, results))


def _read_reports(row: Row, capture: _Capture) -> None:
    report = sp.pipeline_report(capture.planned) if capture.planned is not None else {}
    if report.get("rewrite") is not None:
        row.rewrites = report["rewrite"].get("applied")
    arena = next((f for f in (report.get("arena") or {}).get("functions", [])
                  if f["function"] == "main"), None)
    if arena is None:
        row.notes.append("ArenaPlan planned nothing in main")
    else:
        row.tvm_serenity, row.arena = arena["static_plan_bytes"], arena["arena_bytes"]
        row.liveness, row.bound = arena["liveness_peak_bytes"], arena["lower_bound_bytes"]
        row.status = arena["status"]
    if report.get("rip") is not None:
        row.rip_chosen = report["rip"]["chosen"]
    schedule = ((report.get("schedule") or {}).get("functions") or {}).get("main")
    if schedule is None:
        row.notes.append("MemoryAwareSchedule left main alone")
    else:
        row.peak_before, row.peak_after = schedule["peak_before"], schedule["peak_after"]
        row.any_order_bound = schedule["lower_bound"]


def measure(rel: str, inputs: int = INPUTS, seed: int = SEED) -> Row:
    """Every column of one model (module docstring); failures end up in ``notes``."""
    row = Row(name_of(rel), inputs=inputs)
    path = SHARED_MODELS / rel
    if path.parent == keras_models.cache_dir():
        row.notes.append("built Keras model (benchmarks.keras_models), not in shared/models")
    if not path.is_file():
        row.notes.append(f"{path} is absent")
        return row
    try:
        model = load_tflite(path)
        mod = from_tflite(model)
    except Exception as e:      # noqa: BLE001 - reported in the row
        row.notes.append(f"import failed: {_why(e)}")
        return row
    row.bindings = sum(len(b.bindings) for b in mod["main"].body.blocks)
    shared = sp.ShareKernels()(mod)     # what TVM's pipelines build: each kernel once, as ours
    for key, pipeline in TVM_PIPELINES.items():
        try:
            setattr(row, key, tvm_plan(shared, pipeline()))
        except Exception as e:  # noqa: BLE001
            row.notes.append(f"{key}: {_why(e)}")
    capture = _Capture()
    t0 = time.perf_counter()
    try:
        with tvm.transform.PassContext(instruments=[capture]):
            ex = tvm.compile(mod, target=TARGET, relax_pipeline=sp.PIPELINE_NAME)
    except Exception as e:      # noqa: BLE001
        row.notes.append(f"serenity compile failed: {_why(e)}")
        return row
    row.compile_seconds = time.perf_counter() - t0
    if capture.fused is not None:
        try:
            row.tvm_stored = _stored_plan(capture.fused)
        except Exception as e:  # noqa: BLE001
            row.notes.append(f"TVM stored-order plan failed: {_why(e)}")
    _read_reports(row, capture)
    rng = np.random.default_rng(seed)
    input_sets = [model_inputs(model, rng) for _ in range(inputs)]
    try:
        t0 = time.perf_counter()
        vm = relax.VirtualMachine(ex, tvm.cpu())
        row.load_seconds = time.perf_counter() - t0
        outputs = [run_vm(vm, s) for s in input_sets]
    except Exception as e:      # noqa: BLE001
        row.notes.append(f"VM run failed: {_why(e)}")
        return row
    _check(row, model, path, outputs, input_sets)
    _measure_plain(row, mod, input_sets, outputs)
    return row


def _measure_plain(row: Row, mod: tvm.IRModule, input_sets, outputs) -> None:
    """The column without RiP: the same module through ``serenity_pipeline(rip=False)``, its
    arena and whether its outputs equal the checked ones."""
    capture = _Capture()
    try:
        with tvm.transform.PassContext(instruments=[capture]):
            ex = tvm.compile(mod, target=TARGET,
                             relax_pipeline=sp.serenity_pipeline(rip=False))
        arena = next(f for f in sp.pipeline_report(capture.planned)["arena"]["functions"]
                     if f["function"] == "main")
        row.plain_arena = arena["arena_bytes"]
        row.tvm_serenity = arena["static_plan_bytes"]     # TVM's plan of the module sans RiP
        vm = relax.VirtualMachine(ex, tvm.cpu())
        row.plain_exact = sum(all(np.array_equal(a, b) for a, b in zip(run_vm(vm, s), want))
                            for s, want in zip(input_sets, outputs))
    except Exception as e:      # noqa: BLE001
        row.notes.append(f"rip=False: {_why(e)}")


def _n(value):
    return "n/a" if value is None else value


def _ratio(num, den) -> str:
    return f"{num / den:.2f}x" if num and den else "n/a"


def _exact(row: Row) -> str:
    if not row.exact:
        return "n/a"
    return " / ".join(f"{v}/{row.inputs}" if isinstance(v, int) else v
                      for v in (row.exact.get(k, "n/a") for k in CHECKERS))


def _seconds(value) -> str:
    return "n/a" if value is None else f"{value:.1f}"


def render_table(rows: list[Row]) -> str:
    headers = ["model", "bindings", "rewrites", "tvm.compile B", "TVM CPU B", "TVM stored B",
               "TVM serenity order B", "ours: arena B", "liveness B", "bound B", "gap",
               "schedule peak B", "any order bound B", "tvm.compile / ours", "TVM CPU / ours",
               "TVM stored / ours", f"bit-exact ({' / '.join(CHECKERS)})",
               "RiP", "ours, rip=False: arena B", "rip=False outputs = ours", "compile s",
               "VM load s", "notes"]
    body = []
    for r in rows:
        gap = f"{r.arena / r.bound - 1:.1%}" if r.arena is not None and r.bound else "n/a"
        peaks = "n/a" if r.peak_before is None else f"{r.peak_before:,} -> {r.peak_after:,}"
        body.append([r.model, _n(r.bindings), _n(r.rewrites), _n(r.tvm_compile), _n(r.tvm_cpu),
                     _n(r.tvm_stored), _n(r.tvm_serenity), _n(r.arena), _n(r.liveness),
                     _n(r.bound), gap, peaks, _n(r.any_order_bound),
                     _ratio(r.tvm_compile, r.arena), _ratio(r.tvm_cpu, r.arena),
                     _ratio(r.tvm_stored, r.arena), _exact(r), r.rip_chosen,
                     _n(r.plain_arena),
                     f"{r.plain_exact}/{r.inputs}" if isinstance(r.plain_exact, int) else
                     r.plain_exact, _seconds(r.compile_seconds),
                     _seconds(r.load_seconds), "; ".join(r.notes)])
    return table(headers, body)


def _all_exact(rows: list[Row]) -> tuple[int, int]:
    """(rows whose every available checker agrees on every input set, rows checked)."""
    checked = [r for r in rows if r.exact]
    ok = sum(all(v == r.inputs for v in r.exact.values() if v != "n/a") for r in checked)
    return ok, len(checked)


def summary(rows: list[Row]) -> str:
    measured = [r for r in rows if r.arena]
    if not measured:
        return "No model was measured (see `notes`)."

    def ratio(key):
        return geomean([getattr(r, key) / r.arena for r in measured if getattr(r, key)])

    ok, checked = _all_exact(rows)
    plain = [r for r in measured if r.plain_arena]
    inputs = "/".join(map(str, sorted({r.inputs for r in rows if r.exact}))) or "0"
    return (f"Over {len(measured)} models, ours needs a geomean **{ratio('tvm_cpu'):.2f}x** "
            f"less than TVM's CPU pipeline, **{ratio('tvm_stored'):.2f}x** less than "
            f"`StaticPlanBlockMemory` on our module in stored order, "
            f"**{ratio('tvm_serenity'):.2f}x** less than it in serenity order and "
            f"**{ratio('tvm_compile'):.2f}x** less than a plain `tvm.compile`; "
            f"{sum(r.arena == r.bound for r in measured)} of {len(measured)} arenas meet their "
            f"lower bound. {ok} of {checked} models bit-exact on every input set ({inputs} "
            "per model) against every interpreter available. Against "
            "`serenity_pipeline(rip=False)` (no Right-in-Place convolutions) our arena is "
            f"smaller on {sum(r.arena < r.plain_arena for r in plain)}, equal on "
            f"{sum(r.arena == r.plain_arena for r in plain)} and larger on "
            f"{sum(r.arena > r.plain_arena for r in plain)} of {len(plain)} models (geomean "
            f"**{geomean([r.plain_arena / r.arena for r in plain]):.2f}x**), outputs equal on "
            f"{sum(r.plain_exact == r.inputs for r in plain)} of {len(plain)}.")


def render(rows: list[Row]) -> str:
    return (
        "## The serenity Relax pipeline vs TVM's memory plan (`tvm`)\n\n"
        "Each model imported by our int8 Relax importer and compiled once with "
        "`tvm.compile(mod, target=\"llvm\", relax_pipeline=\"serenity\")` (identity graph "
        "rewriting, exact `serenity` schedule, `optimal` arena planner, 64 B alignment). Bytes "
        "of the intermediate tensors only: TVM's `StaticPlanBlockMemory` and our ArenaPlan both "
        "leave the parameters and the returned tensor to the caller. `tvm.compile`: what a "
        "plain `tvm.compile(mod, target=\"llvm\")` plans (TVM's `\"default\"` Relax pipeline, "
        "which on CPU legalizes without fusing operators; every operator is one `call_tir` of "
        "the kernel the Pico's C prints, its int32 scratch the kernel's own, so every column "
        "plans the same tensors, the TFLite activations); "
        "`TVM CPU`: TVM's CPU pipeline (`relax.get_default_pipeline`: legalize + "
        "`FuseOps`/`FuseTIR`), stored TFLite order, the TVM figure of the peers section without "
        "the graph input and output; `TVM stored`: `StaticPlanBlockMemory` on our module before "
        "reordering (after the serenity pipeline's PAD folding and the `rewrites` it kept); "
        "`TVM serenity order`: on the module ArenaPlan replaces it in; `ours: arena`: "
        "ArenaPlan's one arena; `liveness` / `bound`: the liveness peak of the arena's tensors "
        "in that order, unpadded / padded to the alignment (the arena's lower bound; `gap` = "
        "arena over it); `schedule peak` (stored -> serenity order) and `any order bound`: "
        "MemoryAwareSchedule's figures, whose memory model also counts the graph inputs and "
        "outputs and in-place steps. `RiP`: which build the default `rip=\"auto\"` kept (with "
        "Right-in-Place convolutions on their slice of the arena, or without: the smaller "
        "arena). `ours, rip=False`: the arena of the same module through "
        "`serenity_pipeline(rip=False)`, and on how many input sets its outputs equal the "
        "checked ones. `bit-exact`: random input sets (uniform int8; uniform "
        "[-1, 1) for a float input such as vww's; seed 11) on which the VM's outputs equal, "
        "byte for byte, the numpy reference interpreter's, LiteRT's (reference kernels) and "
        "TFLite Micro's (`n/a`: interpreter not installed). Measured on "
        f"{platform.machine()} with Python {platform.python_version()} and TVM "
        f"{tvm.__version__}, `python -m benchmarks.tvm_bench` (`compile s`: wall-clock of "
        "`tvm.compile`, `VM load s`: of creating the VM from its result, when LLVM generates "
        "the machine code; on a shared 2-core machine).\n\n"
        f"{summary(rows)}\n\n"
        f"{render_table(rows)}\n")


def select(names) -> list[str]:
    """Model paths (relative to the shared folder) for names or relative paths; a name of
    :data:`benchmarks.keras_models.MODELS` that is not a shared model is the built Keras model
    in its cache (``python -m benchmarks.peers --build`` makes them)."""
    return [NAMES[n] if n in NAMES else str(keras_models.model_path(n))
            if n in keras_models.MODELS else n for n in names]


def run(rels: list[str], inputs: int, progress: bool = True) -> list[Row]:
    rows = []
    for rel in rels:
        t0 = time.perf_counter()
        row = measure(rel, inputs)
        rows.append(row)
        if progress:
            print(f"{row.model}: tvm.compile {row.tvm_compile} TVM CPU {row.tvm_cpu} stored "
                  f"{row.tvm_stored} serenity order {row.tvm_serenity} | arena {row.arena} "
                  f"liveness {row.liveness} bound {row.bound} any order "
                  f"{row.any_order_bound} | exact {_exact(row)} | compile "
                  f"{_seconds(row.compile_seconds)} s, VM load {_seconds(row.load_seconds)} s, "
                  f"RiP {row.rip_chosen}, rip=False arena {row.plain_arena} exact "
                  f"{row.plain_exact}, "
                  f"row {time.perf_counter() - t0:.1f} s {row.notes or ''}", flush=True)
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true",
                        help="write section 'tvm' of BENCHMARKS.md")
    parser.add_argument("--quick", action="store_true",
                        help=f"{' and '.join(QUICK_MODELS)}, {QUICK_INPUTS} input sets")
    parser.add_argument("--models", nargs="+", metavar="NAME",
                        help=f"model names ({', '.join(NAMES)}) or paths relative to "
                             f"{SHARED_MODELS}")
    parser.add_argument("--inputs", type=int, metavar="N",
                        help=f"random input sets per model (default {INPUTS}, "
                             f"{QUICK_INPUTS} with --quick)")
    args = parser.parse_args(argv)
    names = args.models or (QUICK_MODELS if args.quick else list(NAMES))
    inputs = args.inputs or (QUICK_INPUTS if args.quick else INPUTS)
    t0 = time.perf_counter()
    rows = run(select(names), inputs)
    publish("tvm", render(rows), t0, args.write)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
