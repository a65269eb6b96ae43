"""Peak memory of operator orders on the zoo: baselines vs SERENITY's exact scheduler.

    python -m benchmarks.schedule_bench            # print the tables
    python -m benchmarks.schedule_bench --write    # also write section "schedule" of BENCHMARKS.md
    python -m benchmarks.schedule_bench --quick    # a CI-sized subset

Per zoo graph: the liveness peak (KiB, int8 tensors) of the stored (TFLite flatbuffer) order,
Kahn, DFS, reverse post-order and the best of 100 random orders; the ``serenity`` method's peak
(divide and conquer + exact search); the static lower bound (``memory.lower_bound_bytes``);
stored / SERENITY; the scheduling time (wall and CPU); and the time of the textbook level DP (every downset,
no pruning) when it completes within the limit. Two tables: the paper's plain memory model and
the in-place (RiP) aware model.
"""

from __future__ import annotations

import argparse
import platform
import time

from tvm_serenity import zoo
from tvm_serenity.memory import lower_bound_bytes
from tvm_serenity.schedule import schedule

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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true",
                        help="write section 'schedule' of BENCHMARKS.md")
    parser.add_argument("--quick", action="store_true", help="a CI-sized subset")
    parser.add_argument("--textbook-limit", type=float, default=None, metavar="SEC",
                        help="time limit of the textbook DP per graph (default 10, quick 1)")
    parser.add_argument("--time-limit", type=float, default=60.0, metavar="SEC",
                        help="time limit of the serenity method per graph")
    args = parser.parse_args(argv)
    available = zoo.names()
    names = [n for n in QUICK if n in available] if args.quick else available
    limit = args.textbook_limit if args.textbook_limit is not None else (
        1.0 if args.quick else 10.0)
    t0 = time.perf_counter()
    markdown = run(names, limit, args.time_limit)
    publish("schedule", markdown, t0, args.write)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
