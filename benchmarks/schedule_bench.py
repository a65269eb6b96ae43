"""Peak memory of operator orders on the zoo: baselines vs SERENITY's exact scheduler.

    python -m benchmarks.schedule_bench            # print the tables
    python -m benchmarks.schedule_bench --write    # also write section "schedule" of BENCHMARKS.md
    python -m benchmarks.schedule_bench --quick    # a CI-sized subset

Per zoo graph: the liveness peak (KiB, int8 tensors) of the stored (TFLite flatbuffer) order,
Kahn, DFS, reverse post-order and the best of 100 random orders; the ``serenity`` method's peak
(divide and conquer + exact search); the static lower bound (``memory.lower_bound_bytes``);
stored / SERENITY; the scheduling time (wall and CPU); and the time of the textbook level DP
(every downset, no pruning) when it completes within the limit. Two tables: the paper's plain memory model and
the in-place (RiP) aware model.

Then, exact at scale (:func:`scaling`):

* every RandWire CIFAR cell of seeds 0-19 (WS(32, 4, 0.75), C = 40 and 78, both memory models):
  how many the ``serenity`` method proves optimal, and its slowest and median time;
* RandWire cells of growing size (WS(n, 4) for n = 16..64) and width (WS(32, k), k = 6, 8),
  and the hardest real cells of the sweep, in place: per exact method (``serenity``, the
  textbook DP, the pruned level DP ``dp``, best-first ``astar``) the time to proof or
  ``> L``, the states expanded and whether the peak was proven; then the peaks of the cheap
  orders (greedy, RPO = HMCOS's first try, Kahn, stored). Every exact method that finished
  must report the same peak (column ``agree``; the script fails otherwise).
"""

from __future__ import annotations

import argparse
import platform
import time

import statistics

from tvm_serenity import zoo
from tvm_serenity.memory import lower_bound_bytes
from tvm_serenity.schedule import schedule
from tvm_serenity.zoo.randwire import randwire_stage_graph

from ._markdown import geomean, publish, table

BASELINES = ["stored", "kahn", "dfs", "rpo", "random"]
QUICK = ["darts_v2_normal_cifar", "nasnet_a_reduction_mobile", "randwire_cifar10_C40_s0",
         "randwire_cifar100_C78_s1", "darts_v2_cifar_net8", "mcunet-320kb-1mb"]


def _kib(n: int) -> str:
    return f"{n / 1024:,.1f}"


def measure(name: str, inplace: bool, textbook_limit: float | None,
            time_limit: float) -> tuple[list, float]:
    graph = zoo.build(name)
    peaks = {m: schedule(graph, m, inplace=inplace).peak_bytes for m in BASELINES}
    cpu = time.process_time()
    best = schedule(graph, "serenity", inplace=inplace, time_limit=time_limit)
    cpu = time.process_time() - cpu
    ratio = peaks["stored"] / best.peak_bytes
    row = [name, zoo.kind(name), len(graph.op_names)] + [_kib(peaks[m]) for m in BASELINES]
    row += [_kib(best.peak_bytes), _kib(lower_bound_bytes(graph, inplace)),
            "yes" if best.optimal else f"no ({best.gap:.1%})", f"{ratio:.3f}",
            f"{best.seconds:.3f}", f"{cpu:.3f}"]
    if textbook_limit is not None:
        plain = schedule(graph, "textbook", inplace=inplace, time_limit=textbook_limit)
        row.append(f"{plain.seconds:.2f}" if not plain.details.get("timed_out")
                   else f"> {textbook_limit:g}")
    return row, ratio


def run(names: list[str], textbook_limit: float, time_limit: float) -> str:
    headers = ["graph", "kind", "ops", "stored", "Kahn", "DFS", "RPO", "random",
               "SERENITY", "bound", "optimal", "stored/SERENITY", "sched s", "sched CPU s"]
    sections = []
    for inplace in (False, True):
        rows, ratios = [], {"cell": [], "network": []}
        for name in names:
            row, ratio = measure(name, inplace, None if inplace else textbook_limit, time_limit)
            rows.append(row)
            ratios[zoo.kind(name)].append(ratio)
            print(" | ".join(str(x) for x in row), flush=True)
        title = ("In-place (RiP) aware memory model" if inplace
                 else "Plain memory model (the SERENITY paper's)")
        cols = headers + ([] if inplace else ["textbook DP s"])
        summary = ", ".join(f"{geomean(r):.3f}x over {len(r)} {kind}s"
                            for kind, r in ratios.items() if r)
        every = ratios["cell"] + ratios["network"]
        sections.append(f"### {title}\n\n{table(cols, rows)}\n\n"
                        f"Geomean stored/SERENITY: **{geomean(every):.3f}x** over {len(every)} "
                        f"graphs ({summary}).")
    intro = (f"## Memory-aware scheduling (`schedule`)\n\n"
             f"Liveness peak in KiB of int8 activations per order (`tvm_serenity.memory`); "
             f"`random` = best of 100 random topological orders; SERENITY = method "
             f"`serenity` (divide and conquer + exact search, limit {time_limit:g} s); "
             f"bound = static cut lower bound; `textbook DP s` = plain level DP over every "
             f"downset, '> L' when it did not finish within {textbook_limit:g} s. "
             f"Measured on {platform.machine()} with Python {platform.python_version()}, "
             f"`python -m benchmarks.schedule_bench`; `sched s` is wall-clock on a shared "
             f"2-core machine, `sched CPU s` this process's CPU time (what the "
             f"scheduler costs without the other processes' load).\n")
    return intro + "\n" + "\n\n".join(sections) + "\n"


# ------------------------------------------------------------------------- exact at scale
EXACT = ["serenity", "textbook", "dp", "astar"]
CHEAP = ["greedy", "rpo", "kahn", "stored"]
CHEAP_TITLES = {"greedy": "greedy", "rpo": "RPO (HMCOS first try)", "kahn": "Kahn",
                "stored": "stored"}
SWEEP_SEEDS = range(20)
HARDEST = (8, 9, 16)        # the slowest cells of the sweep (in place, C = 40)
SWEEP_HEADERS = ["channels", "memory model", "cells", "proven optimal", "max s", "median s",
                 "total s", "max states"]


class Disagreement(AssertionError):
    """Two exact methods proved different optima for one graph."""


def scaling_graphs(quick: bool) -> list[tuple[str, object]]:
    """(label, graph) of the scaling table: RandWire cells at C = 40, 32x32."""
    sizes = [16, 24] if quick else [16, 24, 32, 40, 48, 64]
    widths = [] if quick else [6, 8]
    hardest = HARDEST[:1] if quick else HARDEST
    graphs = [(f"WS({n}, 4) seed 0", randwire_stage_graph(f"rw_n{n}", 32, 40, 0, n))
              for n in sizes]
    graphs += [(f"WS(32, {k}) seed 0", randwire_stage_graph(f"rw_k{k}", 32, 40, 0, 32, k))
               for k in widths]
    graphs += [(f"WS(32, 4) seed {s} (hard)", randwire_stage_graph(f"rw_s{s}", 32, 40, s))
               for s in hardest]
    return graphs


def scaling_row(label: str, graph, limits: dict[str, float]) -> list:
    """One row of the scaling table; raises :class:`Disagreement` if two exact methods that
    proved their peak disagree."""
    row = [label, len(graph.op_names)]
    proven, results = {}, {}
    for method in EXACT:
        result = results[method] = schedule(graph, method, time_limit=limits[method])
        states = result.details.get("expanded_states", 0)
        finished = result.optimal and not result.details.get("timed_out")
        row += [f"{result.seconds:.2f}" if finished else f"> {limits[method]:g}", states]
        if result.optimal:
            proven[method] = result.peak_bytes
    if len(set(proven.values())) > 1:
        raise Disagreement(f"{label}: exact methods disagree: {proven}")
    best = results["serenity"]
    row.append(_kib(best.peak_bytes) if best.optimal else
               f"{_kib(best.peak_bytes)} (bound {_kib(best.lower_bound_bytes)})")
    row += [_kib(schedule(graph, m).peak_bytes) for m in CHEAP]
    row.append(f"yes ({len(proven)})" if proven else "-")
    return row


def sweep(seeds, time_limit: float) -> list[list]:
    """RandWire CIFAR cells of ``seeds``: proven count and times per channel count and model."""
    rows = []
    for channels in (40, 78):
        graphs = [randwire_stage_graph(f"rw{s}_C{channels}", 32, channels, s) for s in seeds]
        for inplace in (False, True):
            results = [schedule(g, "serenity", inplace=inplace, time_limit=time_limit)
                       for g in graphs]
            seconds = [r.seconds for r in results]
            rows.append([f"C = {channels}", "in place" if inplace else "plain", len(results),
                         sum(r.optimal for r in results), f"{max(seconds):.2f}",
                         f"{statistics.median(seconds):.2f}",
                         f"{sum(seconds):.1f}",
                         max(r.details["expanded_states"] for r in results)])
            print(" | ".join(str(x) for x in rows[-1]), flush=True)
    return rows


def scaling(quick: bool, limit: float, serenity_limit: float) -> str:
    seeds = range(3) if quick else SWEEP_SEEDS
    sweep_rows = sweep(seeds, serenity_limit)
    limits = {m: limit for m in EXACT} | {"serenity": serenity_limit}
    rows = []
    for label, graph in scaling_graphs(quick):
        rows.append(scaling_row(label, graph, limits))
        print(" | ".join(str(x) for x in rows[-1]), flush=True)
    headers = ["cell", "ops"]
    for m in EXACT:
        headers += [f"{m} s", f"{m} states"]
    headers += ["SERENITY KiB"] + [f"{CHEAP_TITLES[m]} KiB" for m in CHEAP] + ["agree"]
    return (f"### Exact at scale\n\n"
            f"RandWire CIFAR cells, seeds {seeds.start}-{seeds.stop - 1} (WS(32, 4, 0.75), "
            f"32x32; `serenity`, limit {serenity_limit:g} s): cells proven optimal, slowest, "
            f"median and total seconds, most states expanded.\n\n"
            f"{table(SWEEP_HEADERS, sweep_rows)}"
            f"\n\nGrowing RandWire cells (WS(n, k, 0.75) from "
            f"`randwire_stage_graph(..., nodes=n, k=k)`, C = 40, 32x32, in place) and the "
            f"hardest cells of the sweep. Per exact method: seconds to a proven optimum, or "
            f"'> L' when it stopped at its limit ({limit:g} s; `serenity` {serenity_limit:g} "
            f"s), and the states it expanded; `serenity` is divide and conquer + the "
            f"bidirectional budget descent, `textbook` the plain level DP over every downset, "
            f"`dp` the level DP with bounds and dominance, `astar` best-first on the same "
            f"states. `SERENITY KiB`: its peak, proven optimal unless a lower bound is "
            f"given. Then the peaks of the cheap orders. `agree`: the exact methods that "
            f"proved a peak all found the same one (how many).\n\n"
            f"{table(headers, rows)}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true",
                        help="write section 'schedule' of BENCHMARKS.md")
    parser.add_argument("--quick", action="store_true", help="a CI-sized subset")
    parser.add_argument("--textbook-limit", type=float, default=None, metavar="SEC",
                        help="time limit of the textbook DP per graph (default 10, quick 1)")
    parser.add_argument("--time-limit", type=float, default=60.0, metavar="SEC",
                        help="time limit of the serenity method per graph")
    parser.add_argument("--scaling-limit", type=float, default=None, metavar="SEC",
                        help="time limit of the textbook DP, dp and astar in the scaling "
                             "table (default 5, quick 1); serenity gets 4x")
    args = parser.parse_args(argv)
    available = zoo.names()
    names = [n for n in QUICK if n in available] if args.quick else available
    limit = args.textbook_limit if args.textbook_limit is not None else (
        1.0 if args.quick else 10.0)
    t0 = time.perf_counter()
    markdown = run(names, limit, args.time_limit)
    scaling_limit = args.scaling_limit if args.scaling_limit is not None else (
        1.0 if args.quick else 5.0)
    markdown += "\n" + scaling(args.quick, scaling_limit, 4 * scaling_limit) + "\n"
    publish("schedule", markdown, t0, args.write)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
