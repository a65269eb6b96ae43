"""Tutorial 1: schedule a NAS cell for minimum memory and read the report.

A RandWire cell (CIFAR-10 sizes, int8) from the built-in zoo is scheduled four ways: the stored
(frontend) order, Kahn's breadth-first order, HMCOS's first try (reverse post-order) and
tvm-serenity's exact search. Every peak comes from the same memory model; the exact search
also proves its order optimal. Then the arena is planned for the best order, and a report
(memory over time, arena map, per-layer in-place savings) is written.

Run: ``.venv/bin/python tutorials/01_schedule_nas_cell.py [OUT_DIR]``
"""

import sys

from tvm_serenity import lower_bound_bytes, zoo
from tvm_serenity.alloc import plan_arena
from tvm_serenity.report import write_report
from tvm_serenity.schedule import schedule

out_dir = sys.argv[1] if len(sys.argv) > 1 else "tutorial_01_out"

# 1. A graph: nodes produce one tensor each, with its size in bytes (the interchange JSON).
graph = zoo.build("randwire_cifar10_C40_s0")
print(f"{graph.name}: {len(graph.op_names)} operators, "
      f"cut lower bound {lower_bound_bytes(graph):,} B")

# 2. Orders. `inplace=True` lets Right In-Place convolutions and aliasing ops share memory
#    with the input they consume last; the exact search decides order and in-place together.
results = {m: schedule(graph, m, time_limit=30) for m in ("stored", "kahn", "rpo", "serenity")}
for method, r in results.items():
    print(f"  {method:<9} peak {r.peak_bytes:>9,} B   optimal: {r.optimal}   "
          f"{r.seconds:.3f} s")
best = results["serenity"]
assert best.optimal and best.peak_bytes == min(r.peak_bytes for r in results.values())
print(f"stored / serenity: {results['stored'].peak_bytes / best.peak_bytes:.2f}x lower peak")

# 3. Offsets: one static arena for the whole run (a microcontroller has no malloc).
plan = plan_arena(graph, best.order, planner="optimal", time_limit=30)
print(f"arena {plan.arena_bytes:,} B for a liveness peak of {plan.liveness_peak_bytes:,} B "
      f"({plan.status})")

# 4. The report: PNGs and a self-contained HTML page.
report = write_report(out_dir, graph,
                      {"stored order": (graph.op_names, True), "serenity": (best.order, True)},
                      plan.offsets, plan.arena_bytes, plan.planner,
                      [("graph", graph.name), ("peak", f"{best.peak_bytes:,} B"),
                       ("arena", f"{plan.arena_bytes:,} B")])
print(f"report: {report.html}")
