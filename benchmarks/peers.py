"""Side by side with the peers: what each would need for the same model, measured in one run.

    python -m benchmarks.peers [--models NAME ...] [--build] [--write] [--quick]
                               [--time-limit SEC] [--samples N]

Models: the real models of the shared folder (``tinyengine/vww``, ``mcunet-320kb``, ``keras/*``)
and the Keras-built ones of :mod:`benchmarks.keras_models` that are in its cache (``--build``
builds the missing ones first, in a subprocess: TensorFlow never enters this process). Every
figure is an activation arena in bytes for the model's own ``.tflite`` graph (graph input and
output included, as TFLite Micro allocates them):

* **TFLM**: the head (non-persistent) arena TFLite Micro's interpreter really plans, measured by
  :func:`tvm_serenity.frontend.interpreters.tflm_arena` (each model in its own subprocess);
* **TFLite best fit**: flatbuffer order, TFLite's ``ArenaPlanner`` + ``SimpleMemoryArena``
  re-implemented (``alloc`` planner ``bestfit``, 64 B alignment);
* **TFLM greedy**: flatbuffer order, TFLM's ``GreedyMemoryPlanner`` re-implemented (``greedy``,
  16 B alignment); cross-checked against the interpreter's head arena;
* **TVM**: TVM 0.27's ``StaticPlanBlockMemory`` on the module imported by our int8 importer
  (:func:`tvm_serenity.frontend.relax_import.from_tflite`; if it fails, TVM's stock TFLite
  frontend, which imports float fake-quant), plus the input and output tensors it leaves to the
  caller;
* **HMCOS first try**: reverse post-order; **random**: the best of ``N`` random topological
  orders (by liveness peak); both run in TFLite Micro: the interpreter's head arena for a copy
  of the model with its operators in that order (``tflm_arena(order=...)``);
* **ours**, one step per column: the exact DP order (``serenity``) of the same graph, in TFLite
  Micro the same way; + identity rewriting (PAD folding, then channel-/kernel-wise partitioning
  where it lowers the peak); + RiP (ordering and rewriting with in-place execution, in-place
  aware greedy planner); + the optimal (CP-SAT) arena for that order. The lower bound is the
  proven bound on the liveness peak of that last graph over all orders; ``gap`` is the final
  arena's distance to it.

Every peak comes from :mod:`tvm_serenity.memory`, every plan passes
:func:`tvm_serenity.alloc.verify_plan`. ``--write`` replaces the ``peers`` section of
BENCHMARKS.md; ``--quick`` uses shorter limits and fewer random orders (the CI run).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import tflite
import tvm
from tvm.relax.backend.cpu_generic import pipeline as cpu
from tvm.relax.frontend.tflite import from_tflite as stock_from_tflite

from tvm_serenity.alloc import plan_arena
from tvm_serenity.frontend import tflite_to_graph
from tvm_serenity.frontend.interpreters import InterpreterError, tflm_arena
from tvm_serenity.graph import Graph
from tvm_serenity.micro.boards import BOARDS
from tvm_serenity.passes import static_plan_bytes
from tvm_serenity.rewrite import rewrite_graph
from tvm_serenity.schedule import schedule

from . import keras_models
from ._markdown import SHARED_MODELS, geomean, table, write_section

TFLM_ALIGNMENT = 16      # TFLM's MicroArenaBufferAlignment(): every buffer is padded to it
TFLITE_ALIGNMENT = 64    # TFLite's kDefaultTensorAlignment
PICO_BYTES = BOARDS["pico"].sram.size      # 264 KiB
PICO2_BYTES = BOARDS["pico2"].sram.size    # 520 KiB

#: Models of the shared folder: name -> path relative to it.
SHARED = {
    "vww": "tinyengine/vww.tflite",
    "mcunet-320kb": "mcunet/mcunet-320kb-1mb_imagenet.tflite",
    **{p.stem: f"keras/{p.name}" for p in sorted((SHARED_MODELS / "keras").glob("*.tflite"))},
}

#: Columns of the main table, in order: key -> header.
PEERS = {"tflm": "TFLM (interpreter)", "bestfit": "TFLite order + best fit",
         "greedy": "TFLite order + TFLM greedy", "tvm": "TVM 0.27 static plan",
         "rpo": "HMCOS first try (RPO)", "random": "best of N random orders"}
OURS = {"dp": "ours: DP order", "rewrite": "+ rewriting", "rip": "+ RiP (in place)",
        "optimal": "+ optimal arena"}
COLUMNS = {**PEERS, **OURS}
#: Columns whose order runs in the TFLite Micro interpreter (cross-checked): key -> order.
TFLM_ORDERS = {"tflm": "TFLite order", "rpo": "RPO", "random": "random", "dp": "DP"}
#: TFLM's head arena as docs/peers.md quotes it: the RiP paper's dual-buffer column (bytes).
RIP_DUAL_BUFFER = {"mobilenet_224": 1_204_224, "mobilenet_v2_224": 1_505_280,
                   "mobilenet_v3_small_224": 401_408, "mobilenet_v3_large_224": 1_003_520,
                   "vgg16_224": 6_422_528}


@dataclass(frozen=True)
class Model:
    name: str
    path: Path
    kind: str             # "network" or "cell"
    source: str           # where the .tflite comes from
    build_seconds: float | None = None


@dataclass(frozen=True)
class Limits:
    time_limit: float     # seconds per scheduler call
    arena_time_limit: float
    random_samples: int


FULL = Limits(time_limit=60.0, arena_time_limit=60.0, random_samples=100)
QUICK = Limits(time_limit=10.0, arena_time_limit=10.0, random_samples=20)


@dataclass
class Row:
    model: Model
    ops: int
    arena: dict[str, int | None]            # column key -> bytes (None: not measured)
    notes: dict[str, str] = field(default_factory=dict)    # column key -> short annotation
    peaks: dict[str, int] = field(default_factory=dict)   # liveness peaks of the orders
    reimplemented: dict[str, int] = field(default_factory=dict)  # our TFLM greedy, same orders
    tflm_tail: int | None = None
    tvm_frontend: str = ""
    tvm_failures: list[str] = field(default_factory=list)
    pads_folded: int = 0
    rewrites: tuple[int, int] = (0, 0)      # kept without / with in-place execution
    lower_bound: int = 0
    schedule_optimal: bool = False
    arena_status: str = ""
    arena_gap: float = 0.0
    dp_seconds: float = 0.0
    ours_seconds: float = 0.0               # rewrite search + schedules with in-place
    arena_seconds: float = 0.0
    seconds: float = 0.0                    # the whole row

    @property
    def gap(self) -> float:
        """The final arena's relative distance above the lower bound."""
        final = self.arena["optimal"]
        return (final - self.lower_bound) / final if final else 0.0


# --------------------------------------------------------------------------------- models
def shared_models() -> list[Model]:
    out = []
    for name, rel in SHARED.items():
        path = SHARED_MODELS / rel
        if path.is_file():
            kind = "cell" if name.startswith(("darts", "randwire")) else "network"
            out.append(Model(name, path, kind, f"shared `{rel}`"))
    return out


def built_models(names=None) -> list[Model]:
    out = []
    for name, spec in keras_models.MODELS.items():
        info = keras_models.build_info(name)
        if info is not None and (names is None or name in names):
            out.append(Model(name, keras_models.model_path(name), spec.kind,
                             f"Keras: {spec.description}", info["build_seconds"]))
    return out


def build_missing(names) -> None:
    """Build the Keras models among ``names`` that are not cached, one subprocess for all."""
    missing = [n for n in names if n in keras_models.MODELS and not keras_models.build_info(n)]
    if missing:
        subprocess.run([sys.executable, "-m", "benchmarks.keras_models", "--models", *missing],
                       check=True, cwd=Path(__file__).resolve().parent.parent)


def select(names=None, build: bool = False) -> list[Model]:
    """The models to measure: ``names`` (shared or Keras), default every available one."""
    known = set(SHARED) | set(keras_models.MODELS)
    unknown = sorted(set(names or ()) - known)
    if unknown:
        raise SystemExit(f"unknown model(s) {', '.join(unknown)}; "
                         f"known: {', '.join(sorted(known))}")
    if build:
        build_missing(names or list(keras_models.MODELS))
    models = [m for m in shared_models() if names is None or m.name in names]
    models += built_models(names)
    return sorted(models, key=lambda m: m.kind != "network")     # networks, then cells


# ---------------------------------------------------------------------------- measurement
def _greedy(row: Row, key: str, graph: Graph, order, inplace: bool = False) -> int:
    """Plan ``order`` with TFLM's greedy planner (re-implemented, or extended to in-place);
    records the order's liveness peak in ``row.peaks[key]``, returns the arena."""
    plan = plan_arena(graph, order, "greedy", TFLM_ALIGNMENT, inplace)
    row.peaks[key] = plan.liveness_peak_bytes
    return plan.arena_bytes


def _in_tflm(row: Row, key: str, path: Path, graph: Graph, order) -> None:
    """Column ``key``: TFLite Micro's head arena with the operators run in ``order`` (the
    interpreter's figure), next to the re-implemented greedy planner's for the cross-check."""
    row.reimplemented[key] = _greedy(row, key, graph, order)
    reordered = None if list(order) == graph.op_names else \
        [graph.nodes[n].attrs["tflite_index"] for n in order]
    try:
        measured = tflm_arena(path, order=reordered)
    except InterpreterError as e:
        row.notes[key] = "TFLM aborted" if "status -6" in str(e) else "TFLM failed"
        return
    row.arena[key] = measured.head
    if key == "tflm":
        row.tflm_tail = measured.tail


def _lowered(mod: tvm.IRModule) -> tvm.IRModule:
    target = tvm.target.Target("llvm")
    with target:
        return tvm.transform.Sequential([*cpu.library_dispatch_passes(target),
                                         *cpu.legalize_passes(target),
                                         *cpu.dataflow_lower_passes(target)])(mod)


def _int8_module(path: Path) -> tvm.IRModule:
    # imported here: a failure of the importer (even to import) falls back to the stock one
    from tvm_serenity.frontend.relax_import import from_tflite
    return from_tflite(path)


def _stock_module(path: Path) -> tvm.IRModule:
    return stock_from_tflite(tflite.Model.GetRootAsModel(path.read_bytes(), 0))


def tvm_static_plan(path: Path, graph: Graph) -> tuple[int | None, str, list[str]]:
    """TVM 0.27's own figure: ``StaticPlanBlockMemory`` storages (:func:`static_plan_bytes`,
    after TVM's CPU legalize and dataflow-lowering passes) plus the graph input and output,
    which TVM leaves to the caller. Tries our int8 importer, then TVM's stock frontend.
    Returns ``(bytes or None, frontend used, failures of the frontends tried before)``."""
    edges = sum(graph.nodes[n].bytes for n in (*graph.input_names, *graph.outputs))
    failures = []
    for label, importer in (("int8", _int8_module), ("float fake-quant", _stock_module)):
        try:
            return static_plan_bytes(_lowered(importer(path))) + edges, label, failures
        except Exception as e:     # noqa: BLE001 - TVM raises many types; reported in the table
            lines = str(e).strip().splitlines() or [type(e).__name__]
            failures.append(f"{label}: {lines[-1].split('. ')[0][:160]}")
    return None, "none", failures


def measure(model: Model, limits: Limits = FULL) -> Row:
    """Every column for one model (module docstring)."""
    t0 = time.perf_counter()
    graph = tflite_to_graph(model.path, fold_pad=False, name=model.name)
    stored = graph.op_names
    row = Row(model, len(stored), {k: None for k in COLUMNS})
    _in_tflm(row, "tflm", model.path, graph, stored)
    row.arena["bestfit"] = plan_arena(graph, stored, "bestfit", TFLITE_ALIGNMENT,
                                      False).arena_bytes
    row.arena["greedy"] = row.reimplemented["tflm"]
    row.arena["tvm"], row.tvm_frontend, row.tvm_failures = tvm_static_plan(model.path, graph)
    if row.arena["tvm"] is None:
        row.notes["tvm"] = "failed"
    elif row.tvm_frontend != "int8":
        row.notes["tvm"] = "fq"
    _in_tflm(row, "rpo", model.path, graph, schedule(graph, "rpo", inplace=False).order)
    _in_tflm(row, "random", model.path, graph,
             schedule(graph, "random", inplace=False, samples=limits.random_samples).order)
    dp = schedule(graph, "serenity", inplace=False, time_limit=limits.time_limit)
    _in_tflm(row, "dp", model.path, graph, dp.order)
    row.dp_seconds = dp.seconds
    folded = tflite_to_graph(model.path, fold_pad=True, name=model.name)
    row.pads_folded = len(stored) - len(folded.op_names)
    plain = rewrite_graph(folded, inplace=False, time_limit=limits.time_limit)
    row.arena["rewrite"] = _greedy(row, "rewrite", plain.graph, plain.schedule.order)
    ours = rewrite_graph(folded, inplace=True, time_limit=limits.time_limit)
    row.rewrites, row.ours_seconds = (len(plain.applied), len(ours.applied)), ours.seconds
    row.arena["rip"] = _greedy(row, "rip", ours.graph, ours.schedule.order, inplace=True)
    final = plan_arena(ours.graph, ours.schedule.order, "optimal", TFLM_ALIGNMENT, True,
                       limits.arena_time_limit)
    row.arena["optimal"], row.arena_seconds = final.arena_bytes, final.seconds
    row.arena_status, row.arena_gap = final.status, final.gap
    row.lower_bound = ours.schedule.lower_bound_bytes
    row.schedule_optimal = ours.schedule.optimal
    row.seconds = time.perf_counter() - t0
    return row


def run(models: list[Model], limits: Limits = FULL, progress: bool = True) -> list[Row]:
    rows = []
    for model in models:
        rows.append(measure(model, limits))
        if progress:
            r = rows[-1]
            print(f"{model.name}: " + ", ".join(f"{k} {v}" for k, v in r.arena.items())
                  + f" (lower bound {r.lower_bound}, {r.seconds:.1f} s)", file=sys.stderr,
                  flush=True)
    return rows


# ------------------------------------------------------------------------------- report
def kib(nbytes: int) -> str:
    return f"{nbytes / 1024:,.1f}"


def fits(nbytes: int | None) -> str:
    """``both`` (Pico and Pico 2), ``Pico 2`` (only), ``no`` or ``n/a``."""
    if nbytes is None:
        return "n/a"
    return "both" if nbytes <= PICO_BYTES else "Pico 2" if nbytes <= PICO2_BYTES else "no"


def comparable(row: Row, key: str) -> int | None:
    """The column's bytes when they are an int8 arena of the model (TVM's float fake-quant
    import is shown but not compared)."""
    if key == "tvm" and row.tvm_frontend != "int8":
        return None
    return row.arena[key]


def ratio(row: Row, key: str, against: str = "tflm") -> float | None:
    """``against``'s bytes over the column's (above 1: the column needs less)."""
    base, value = comparable(row, against), comparable(row, key)
    return base / value if base and value else None


def best_peer(row: Row) -> int | None:
    values = [comparable(row, k) for k in PEERS]
    values = [v for v in values if v is not None]
    return min(values) if values else None


def _cell(row: Row, key: str) -> str:
    value, note = row.arena[key], row.notes.get(key)
    if value is None:
        return note or "n/a"
    return kib(value) + (f" ({note})" if note else "")


def _geomean_cell(rows: list[Row], key: str) -> str:
    values = [ratio(r, key) for r in rows]
    values = [v for v in values if v is not None]
    return f"{geomean(values):.2f}x" if values else ""


def _main_table(rows: list[Row]) -> str:
    headers = ["model", "ops", *COLUMNS.values(), "lower bound", "gap", "TFLM / ours", "best peer / ours", "schedule s"]
    body = []
    for r in rows:
        final, peer = ratio(r, "optimal"), best_peer(r)
        body.append([r.model.name, r.ops, *[_cell(r, k) for k in COLUMNS], kib(r.lower_bound),
                     f"{100 * r.gap:.1f}%", "n/a" if final is None else f"{final:.2f}x",
                     "n/a" if peer is None else f"{peer / r.arena['optimal']:.2f}x",
                     f"{r.dp_seconds:.2f} / {r.ours_seconds:.2f}"])
    groups = [("geomean TFLM / column, all models", rows)]
    kinds = sorted({r.model.kind for r in rows})
    if len(kinds) > 1:
        groups += [(f"geomean, {k}s", [r for r in rows if r.model.kind == k]) for k in kinds]
    for label, group in groups:
        peers_ratio = [best_peer(r) / r.arena["optimal"] for r in group if best_peer(r)]
        body.append([label, "", *[_geomean_cell(group, k) for k in COLUMNS], "", "",
                     _geomean_cell(group, "optimal"),
                     f"{geomean(peers_ratio):.2f}x" if peers_ratio else "", ""])
    return table(headers, body)


def _crosscheck(rows: list[Row]) -> str:
    pairs = [(r, k) for r in rows for k in TFLM_ORDERS if r.arena[k] is not None]
    mismatched = [(r, k) for r, k in pairs if r.arena[k] != r.reimplemented[k]]
    text = ("TFLite Micro's head arena (interpreter) against `tvm_serenity.alloc`'s greedy planner "
            "for the same order (no in-place, 16 B alignment): "
            f"{len(pairs) - len(mismatched)} of {len(pairs)} (model, order) pairs match to the "
            "byte")
    if mismatched:
        text += " (differing: " + ", ".join(
            f"{r.model.name} {TFLM_ORDERS[k]} {r.arena[k] - r.reimplemented[k]:+,} B"
            for r, k in mismatched) + ")"
    text += (". TFLM's head would also hold kernel scratch buffers "
             "(`RequestScratchBufferInArena`); where the figures match, none changed the plan. "
             "Its greedy planner needs more than the order's liveness peak on branchy graphs "
             "(fragmentation).")
    failed = [(r, k) for r in rows for k in TFLM_ORDERS if r.arena[k] is None]
    if failed:
        text += " TFLM could not plan: " + ", ".join(
            f"{r.model.name} {TFLM_ORDERS[k]} ({r.notes[k]})" for r, k in failed) + "."
    known = [r for r in rows if r.model.name in RIP_DUAL_BUFFER]
    if known:
        same = [r for r in known if r.arena["tflm"] == RIP_DUAL_BUFFER[r.model.name]]
        text += (f" The head equals the RiP paper's dual-buffer figure (docs/peers.md) on "
                 f"{len(same)} of the {len(known)} Keras networks it lists"
                 + (": " + ", ".join(f"{r.model.name} {kib(RIP_DUAL_BUFFER[r.model.name])} KiB"
                                     for r in same) if same else "") + ".")
    headers = ["model", "TFLM head, TFLite order B", "re-implemented B",
               "difference B: " + " / ".join(TFLM_ORDERS.values()),
               "TFLite-order liveness peak B", "head / liveness peak", "TFLM tail B"]
    body = []
    for r in rows:
        head = r.arena["tflm"]
        diffs = " / ".join("n/a" if r.arena[k] is None else f"{r.arena[k] - r.reimplemented[k]:,}"
                           for k in TFLM_ORDERS)
        body.append([r.model.name, "n/a" if head is None else head, r.reimplemented["tflm"],
                     diffs, r.peaks["tflm"],
                     "n/a" if head is None else f"{head / r.peaks['tflm']:.3f}",
                     "n/a" if r.tflm_tail is None else r.tflm_tail])
    return text + "\n\n" + table(headers, body)


def _fit_table(rows: list[Row]) -> str:
    headers = ["model", *COLUMNS.values()]
    body = [[r.model.name, *[fits(r.arena[k]) for k in COLUMNS]] for r in rows]
    counts = []
    for key in COLUMNS:
        values = [r.arena[key] for r in rows if r.arena[key] is not None]
        counts.append(f"{sum(v <= PICO_BYTES for v in values)} / "
                      f"{sum(v <= PICO2_BYTES for v in values)}")
    body.append(["models fitting Pico / Pico 2", *counts])
    return table(headers, body)


def _details(rows: list[Row]) -> str:
    headers = ["model", "kind", "source", "conversion s", "TVM frontend", "PADs folded",
               "rewrites kept (plain / in place)", "liveness peak KiB: TFLite order / DP / "
               "+ rewriting / + RiP", "schedule", "arena solver", "DP s", "rewrite + RiP s",
               "arena s", "row s"]
    body = []
    for r in rows:
        solver = {"bound": "meets the bound", "optimal": "CP-SAT optimal"}.get(
            r.arena_status, f"time limit, gap {100 * r.arena_gap:.1f}%")
        peaks = " / ".join(kib(r.peaks[k]) for k in ("tflm", "dp", "rewrite", "rip"))
        body.append([r.model.name, r.model.kind, r.model.source,
                     "" if r.model.build_seconds is None else f"{r.model.build_seconds:.1f}",
                     r.tvm_frontend, r.pads_folded, f"{r.rewrites[0]} / {r.rewrites[1]}",
                     peaks, "optimal" if r.schedule_optimal else "time limit", solver,
                     f"{r.dp_seconds:.2f}", f"{r.ours_seconds:.2f}", f"{r.arena_seconds:.2f}",
                     f"{r.seconds:.1f}"])
    text = table(headers, body)
    failures: dict[str, list[str]] = {}
    for r in rows:
        for failure in r.tvm_failures:
            failures.setdefault(failure.replace(f"{r.model.path}: ", ""), []).append(r.model.name)
    if failures:
        text += "\n\nTVM import failures (the next frontend was tried):\n\n" + "\n".join(
            f"* {', '.join(names)}: {message}" for message, names in failures.items())
    return text


def render(rows: list[Row], limits: Limits = FULL, missing=()) -> str:
    final = [ratio(r, "optimal") for r in rows if ratio(r, "optimal") is not None]
    peer = [best_peer(r) / r.arena["optimal"] for r in rows if best_peer(r)]
    fit = {k: sum(1 for r in rows if r.arena[k] is not None and r.arena[k] <= PICO_BYTES)
           for k in ("tflm", "optimal")}
    text = [
        "## Side by side with the peers",
        "",
        "Generated by `python -m benchmarks.peers --build --write` (README). Activation arena "
        "in KiB (1024 B) for each model's own `.tflite` graph, graph input and output "
        "included; every column measured in this run on the same file. Ratios `X / column` "
        "above 1 mean the column needs less than X.",
        "",
        "* **TFLM (interpreter)**: the head (non-persistent) arena of TFLite Micro's "
        "interpreter (`tflite-micro` Python package, `print_allocations()`), each model in its "
        "own subprocess. Every column marked *in TFLM* below is that same figure for a copy "
        "of the model whose operator list is in the column's order (TFLM runs and plans "
        "operators in stored order); `TFLM aborted` when TFLM killed the process.",
        "* **TFLite order + best fit / + TFLM greedy**: the flatbuffer's operator order with "
        "TFLite's `ArenaPlanner`/`SimpleMemoryArena` (64 B alignment) and TFLM's "
        "`GreedyMemoryPlanner` (16 B alignment), re-implemented in `tvm_serenity.alloc` "
        "(the greedy one is cross-checked below). TFLite itself also keeps graph inputs alive "
        "for the whole run and adds im2col scratch: its real arena is larger than this column.",
        "* **TVM 0.27 static plan**: `StaticPlanBlockMemory` storages of the module after TVM's "
        "CPU legalize and lowering passes, plus the input and output tensors TVM leaves to the "
        "caller (it reuses whole storages, never packs at offsets). Module from our int8 Relax "
        "importer; `(fq)`: our importer failed on the model (reasons below) and TVM's stock "
        "TFLite frontend imported it as float fake-quant: float intermediates, not "
        "comparable, left out of the geomeans.",
        "* **HMCOS first try (RPO)** and **best of N random** topological orders (best by "
        "liveness peak), both in TFLM.",
        "* **ours**, one step per column: the exact DP order (`serenity`) in TFLM (a stock "
        "TFLM, operators reordered); + identity rewriting (PADs folded "
        "into convolutions, channel-/kernel-wise partitioning kept only where the optimal "
        "peak drops), in our re-implementation of TFLM's greedy planner; + RiP: order and "
        "rewrites chosen with in-place execution, in-place aware greedy planner; + the optimal "
        "CP-SAT arena for that order (16 B alignment). The "
        "greedy planner's fragmentation is why a step can look worse before the optimal arena "
        "(the liveness peaks of each order are in the last table). **lower bound**: proven "
        "lower bound on the liveness peak of the final graph over all orders; **gap**: final "
        "arena above it; **best peer / ours**: the smallest comparable peer column over "
        "ours; **schedule s**: DP order / rewrite search with in-place (all its scheduler "
        "calls).",
        f"* Limits: {limits.time_limit:g} s per scheduler call, {limits.arena_time_limit:g} s "
        f"for the arena solver, N = {limits.random_samples} random orders (seed 0). Fits: arena "
        f"alone against the Pico's {PICO_BYTES:,} B and the Pico 2's {PICO2_BYTES:,} B of SRAM.",
        "",
    ]
    if final:
        text += [f"Over {len(rows)} models, ours needs a geomean **{geomean(final):.2f}x** less "
                 f"arena than TFLite Micro and **{geomean(peer):.2f}x** less than the best peer "
                 f"of each model; {fit['optimal']} models fit the Pico's 264 KiB with ours, "
                 f"{fit['tflm']} with TFLM.", ""]
    text += [
        _main_table(rows), "",
        "### Cross-check: TFLite Micro against the re-implemented greedy planner", "",
        _crosscheck(rows), "",
        "### Fits in SRAM: Pico (264 KiB) and Pico 2 (520 KiB)", "",
        "Activation arena alone (weights in flash; no stack, runtime or persistent "
        "structures): `both`, `Pico 2` only, or `no`.", "",
        _fit_table(rows), "",
        "### Models, liveness peaks and solver details", "",
        _details(rows),
    ]
    if missing:
        text += ["", "Not measured (not built; `python -m benchmarks.keras_models --models ...` "
                 f"needs TensorFlow): {', '.join(missing)}."]
    return "\n".join(text)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", metavar="NAME",
                    help="shared or Keras model names (default: every available model)")
    ap.add_argument("--build", action="store_true",
                    help="build missing Keras models first (needs the bench extra)")
    ap.add_argument("--write", action="store_true", help="replace BENCHMARKS.md's section")
    ap.add_argument("--quick", action="store_true", help="short limits (CI)")
    ap.add_argument("--time-limit", type=float, metavar="SEC",
                    help="seconds per scheduler call and for the arena solver")
    ap.add_argument("--samples", type=int, metavar="N", help="random orders")
    args = ap.parse_args(argv)
    limits = QUICK if args.quick else FULL
    if args.time_limit is not None:
        limits = replace(limits, time_limit=args.time_limit, arena_time_limit=args.time_limit)
    if args.samples is not None:
        limits = replace(limits, random_samples=args.samples)
    models = select(args.models, args.build)
    measured = {m.name for m in models}
    missing = [n for n in (args.models or keras_models.MODELS) if n not in measured]
    markdown = render(run(models, limits), limits, missing)
    print(markdown)
    if args.write:
        write_section("peers", markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
