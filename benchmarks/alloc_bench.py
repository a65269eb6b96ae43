"""Arena plans on the zoo and the shared models: the peers' planners against the optimal one.

    python -m benchmarks.alloc_bench            # print the tables
    python -m benchmarks.alloc_bench --write    # also write section "alloc" of BENCHMARKS.md
    python -m benchmarks.alloc_bench --quick    # a CI-sized subset
    python -m benchmarks.alloc_bench --minimalloc [--minimalloc-bin PATH] [--write]
                                                # section "minimalloc": the hard instances

Graphs: every zoo entry, and the ``.tflite`` models of the shared folder (``tinyengine/vww``,
``mcunet-320kb``, ``keras/*``, imported by :func:`tvm_serenity.frontend.tflite_to_graph`) when
it is present. Orders: ``stored`` (the frontend's) and ``serenity`` (the exact scheduler's
order for the same memory model). Per graph and order, with the in-place (RiP) aware memory model
and alignment 1 (MCU int8): the liveness peak, which no plan of that order can beat, and the
arena of TFLM's linear and greedy planners, TFLite's best fit and the optimal (CP-SAT) plan,
with its status, proven gap, time, in-place steps laid out in place (of those the order has)
and right shifts. A summary adds the plain memory model and TFLM's 16-byte alignment. Every
plan passes :func:`tvm_serenity.alloc.verify_plan` (``plan_arena`` verifies it).

``--minimalloc``: the 11 challenging instances of google/minimalloc (``../shared/data/
minimalloc``, half-open lifetimes, capacity 1 MiB) planned by ``plan_buffers`` with every
planner, and, given ``--minimalloc-bin`` (a MiniMalloc binary built outside the repository), by
MiniMalloc itself, its offsets checked by the same verifier.
"""

from __future__ import annotations

import argparse
import csv
import platform
import subprocess
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

from tvm_serenity import zoo
from tvm_serenity.alloc import (PLANNERS, buffer_liveness, plan_arena, plan_buffers,
                                read_minimalloc_csv, verify_plan)
from tvm_serenity.frontend import tflite_to_graph
from tvm_serenity.graph import Graph
from tvm_serenity.memory import liveness
from tvm_serenity.schedule import schedule

from ._markdown import ROOT, SHARED_MODELS, geomean, publish, table

MINIMALLOC_DATA = ROOT.parent / "shared" / "data" / "minimalloc"
MINIMALLOC_PLANNERS = ["optimal", "bestfit", "greedy"]

ORDERS = ["stored", "serenity"]
#: (in-place aware memory model, alignment): the first one gets the full table.
CONFIGS = [(True, 1), (False, 1), (True, 16)]
QUICK_ZOO = ["darts_v2_normal_cifar", "randwire_cifar10_C40_s1", "darts_v2_cifar_net8",
             "mcunet-320kb-1mb"]
QUICK_MODELS = ["tinyengine/vww.tflite"]
SCHEDULE_LIMIT = 60.0


@dataclass
class Row:
    graph: str
    ops: int
    order: str
    inplace: bool
    alignment: int
    peak: int            # liveness peak of the order (memory model)
    bound: int           # lower bound for this alignment (the peak when alignment is 1)
    arena: dict          # planner -> arena bytes
    status: str          # optimal planner's
    gap: float
    seconds: float
    shared: int          # in-place steps laid out in place by the optimal plan
    declared: int        # in-place steps of the order
    shifts: int


def graphs(quick: bool) -> list[tuple[str, Graph]]:
    available = zoo.names()
    names = [n for n in QUICK_ZOO if n in available] if quick else available
    out = [(n, zoo.build(n)) for n in names]
    if SHARED_MODELS.is_dir():
        paths = ([SHARED_MODELS / p for p in QUICK_MODELS] if quick else
                 sorted(SHARED_MODELS.glob("*/*.tflite")))
        out += [(f"{p.parent.name}/{p.stem}", tflite_to_graph(p)) for p in paths if p.is_file()]
    return out


def measure(name: str, graph: Graph, time_limit: float) -> list[Row]:
    rows = []
    for inplace in sorted({i for i, _ in CONFIGS}, reverse=True):
        orders = {"stored": graph.op_names,
                  "serenity": schedule(graph, "serenity", inplace=inplace,
                                       time_limit=SCHEDULE_LIMIT).order}
        for order_name in ORDERS:
            order = orders[order_name]
            declared = len(liveness(graph, order, inplace).inplace)
            for flag, alignment in CONFIGS:
                if flag != inplace:
                    continue
                plans = {p: plan_arena(graph, order, p, alignment, inplace, time_limit)
                         for p in PLANNERS}
                best = plans["optimal"]
                rows.append(Row(name, len(graph.op_names), order_name, inplace, alignment,
                                best.liveness_peak_bytes, best.lower_bound_bytes,
                                {p: plan.arena_bytes for p, plan in plans.items()},
                                best.status, best.gap, best.seconds, len(best.inplace),
                                declared, best.num_moves))
    return rows


def main_table(rows: list[Row]) -> str:
    headers = ["graph", "ops", "order", "liveness peak B", "linear B", "greedy B", "bestfit B",
               "optimal B", "status", "gap", "optimal s", "in place", "shifts"]
    body = [[r.graph, r.ops, r.order, r.peak, r.arena["linear"], r.arena["greedy"],
             r.arena["bestfit"], r.arena["optimal"], r.status, f"{r.gap:.2%}",
             f"{r.seconds:.2f}", f"{r.shared}/{r.declared}", r.shifts] for r in rows]
    return table(headers, body)


def summary_table(rows: list[Row]) -> str:
    headers = ["memory model", "alignment", "plans", "optimal = lower bound",
               "greedy = lower bound", "bestfit = lower bound", "greedy / optimal",
               "bestfit / optimal", "linear / optimal", "not proven optimal",
               "max optimal s", "shifts (optimal)"]
    body = []
    for inplace, alignment in CONFIGS:
        rs = [r for r in rows if r.inplace == inplace and r.alignment == alignment]
        if not rs:
            continue

        def at_bound(planner):
            return f"{sum(r.arena[planner] <= r.bound for r in rs) / len(rs):.0%}"

        def ratio(planner):
            return f"{geomean([r.arena[planner] / r.arena['optimal'] for r in rs]):.3f}"

        body.append(["in place (RiP)" if inplace else "plain", alignment, len(rs),
                     at_bound("optimal"), at_bound("greedy"), at_bound("bestfit"),
                     ratio("greedy"), ratio("bestfit"), ratio("linear"),
                     sum(r.status not in ("bound", "optimal") for r in rs),
                     f"{max(r.seconds for r in rs):.2f}", sum(r.shifts for r in rs)])
    return table(headers, body)


def report(rows: list[Row], time_limit: float) -> str:
    main = [r for r in rows if (r.inplace, r.alignment) == CONFIGS[0]]
    at_peak = sum(r.arena["optimal"] == r.peak for r in main)
    return (
        "## Arena planning (`alloc`)\n\n"
        "Arena bytes of one static arena holding every tensor (graph input and output "
        "included) for a fixed order. `linear` and `greedy` are TFLite Micro's planners, "
        "`bestfit` TFLite's ArenaPlanner + SimpleMemoryArena, re-implemented (the greedy one "
        "reproduces TFLite Micro's measured head arena on the shared models), all three extended "
        "to place in-place pairs where they can; `optimal` is CP-SAT warm-started from the best "
        f"of greedy and bestfit, limit {time_limit:g} s per plan. `stored` is the frontend's "
        "order, `serenity` the exact scheduler's. The liveness peak (`tvm_serenity.memory`) is a "
        "lower bound for every plan of the order; `status` `bound` = the optimal arena meets it, "
        "`optimal` = CP-SAT proved a larger arena optimal, `time_limit` = stopped with `gap` to "
        "the best bound. `in place`: in-place steps laid out in place / in-place steps of the "
        "order; `shifts`: physical right shifts (memmoves) in the optimal plan. "
        f"Measured on {platform.machine()} with Python {platform.python_version()}, "
        "`python -m benchmarks.alloc_bench` (wall-clock on a shared 2-core machine).\n\n"
        f"**The optimal arena equals the liveness peak on {at_peak} of {len(main)} "
        f"graph/order pairs ({at_peak / len(main):.0%})** (in-place memory model, "
        "alignment 1).\n\n"
        "### In-place (RiP) aware memory model, alignment 1\n\n"
        f"{main_table(main)}\n\n"
        "### Summary: every configuration\n\n"
        "`X = lower bound`: share of plans whose arena meets the lower bound (the liveness "
        "peak with sizes padded to the alignment); `X / optimal`: geomean arena ratio.\n\n"
        f"{summary_table(rows)}\n")


def run_minimalloc(binary: Path, path: Path, capacity: int, buffers, timeout: float):
    """MiniMalloc's own solver on one instance: (arena or None, seconds), offsets verified."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.csv"
        t0 = time.perf_counter()
        done = subprocess.run([str(binary), f"--capacity={capacity}", f"--input={path}",
                               f"--output={out}", f"--timeout={timeout:g}s"],
                              capture_output=True, text=True)
        seconds = time.perf_counter() - t0
        if done.returncode != 0 or not out.is_file() or "ERROR" in done.stderr.upper():
            return None, seconds
        offsets = {row["id"]: int(row["offset"]) for row in csv.DictReader(out.open())}
    live = buffer_liveness(buffers)
    plan = plan_buffers(buffers, planner="linear").plan
    arena = max(offsets[b.name] + b.size for b in buffers)
    verify_plan(None, live, replace(plan, planner="minimalloc", offsets=offsets,
                                    arena_bytes=arena))
    return arena, seconds


def minimalloc_report(time_limit: float, binary: Path | None) -> str:
    rows = []
    for path in sorted(MINIMALLOC_DATA.glob("*.csv")):
        capacity = int(path.stem.split(".")[1])
        buffers = read_minimalloc_csv(path)
        row = [path.stem.split(".")[0], len(buffers), capacity]
        for planner in MINIMALLOC_PLANNERS:
            p = plan_buffers(buffers, capacity, planner, time_limit=time_limit)
            row += ["yes" if p.fits else "no", p.arena_bytes, f"{p.seconds:.2f}",
                    f"{p.gap:.2%}"]
            print(path.name, planner, p.arena_bytes, p.fits, p.status, f"{p.seconds:.2f}",
                  flush=True)
        if binary is not None:
            arena, seconds = run_minimalloc(binary, path, capacity, buffers, time_limit)
            row += ["yes" if arena is not None else "no (time limit)",
                    arena if arena is not None else "-", f"{seconds:.2f}"]
        rows.append(row)
    headers = ["instance", "buffers", "capacity B"]
    for planner in MINIMALLOC_PLANNERS:
        headers += [f"{planner} fits", f"{planner} B", f"{planner} s", f"{planner} gap"]
    if binary is not None:
        headers += ["MiniMalloc fits", "MiniMalloc B", "MiniMalloc s"]
    fits = sum(r[3] == "yes" for r in rows)
    return (
        "## Arena planning: MiniMalloc's challenging instances (`alloc`, `plan_buffers`)\n\n"
        "The 11 hard static-allocation instances of google/minimalloc (ASPLOS 2023, "
        "`benchmarks/challenging/`, Apache-2.0; `../shared/data/minimalloc`): buffers live on "
        "half-open `[lower, upper)`, capacity 1 MiB. `tvm_serenity.alloc.plan_buffers` with "
        f"the optimal planner (limit {time_limit:g} s per instance: MiniMalloc's canonical "
        "search re-implemented in Python at the lower bound, then at the capacity, then CP-SAT "
        "minimising the arena; `gap` = (arena - proven lower bound) / arena, the bound being "
        "the largest live total unless a search proved more) and TFLite's best fit / TFLite "
        "Micro's greedy planners. "
        + ("MiniMalloc: its own C++ solver (commit 9f5cf81, built here with Debian's abseil, "
           "default settings, same time limit, decision at the capacity), its offsets "
           "checked by our verifier. " if binary is not None else "")
        + f"Measured on {platform.machine()} with Python {platform.python_version()} "
        "(wall-clock on a shared 2-core machine), `python -m benchmarks.alloc_bench "
        "--minimalloc" + (" --minimalloc-bin PATH" if binary is not None else "") + "`.\n\n"
        f"**The optimal planner fits {fits} of {len(rows)} instances within 1 MiB.**\n\n"
        f"{table(headers, rows)}\n"
        + ("\nNot fitted by the optimal planner: "
           + ", ".join(r[0] for r in rows if r[3] != "yes")
           + ": within the limit neither the canonical search (Python, about 10^4 nodes/s; "
           "MiniMalloc in C++ needs 10^4-10^5 backtracks on them) nor CP-SAT finds a "
           "placement at the lower bound or the capacity; the arena is CP-SAT's best and the "
           "gap is measured to the largest live total, which is also the capacity.\n"
           if fits < len(rows) else ""))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true",
                        help="write the section of BENCHMARKS.md")
    parser.add_argument("--quick", action="store_true", help="a CI-sized subset")
    parser.add_argument("--time-limit", type=float, default=5.0, metavar="SEC",
                        help="time limit of the optimal planner per plan")
    parser.add_argument("--minimalloc", action="store_true",
                        help="only the MiniMalloc instances (section 'minimalloc')")
    parser.add_argument("--minimalloc-bin", type=Path, metavar="PATH",
                        help="a MiniMalloc binary to run on the same instances")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    if args.minimalloc:
        publish("minimalloc", minimalloc_report(args.time_limit, args.minimalloc_bin), t0,
                args.write)
        return 0
    rows = []
    for name, graph in graphs(args.quick):
        for r in measure(name, graph, args.time_limit):
            rows.append(r)
            print(f"{r.graph} {r.order} inplace={r.inplace} a={r.alignment}: peak {r.peak} "
                  f"{r.arena} {r.status} {r.seconds:.2f}s", flush=True)
    markdown = report(rows, args.time_limit)
    publish("alloc", markdown, t0, args.write)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
