"""Patch-based execution of the first layers (issue #16): the plan's peak on the shared models.

For each model: the peak of the unpatched network, then the best patch plan
(:func:`tvm_serenity.rewrite.patch.plan_patches`, same scheduler) with the whole input resident
and with the input streamed patch by patch (each the objective of its own search), its grid,
prefix length and extra MACs (a fraction of the network's), and the search's seconds. Prints a
table; writes nothing. ``python -m benchmarks.patch_bench [--no-inplace] [--time-limit S]``
(``--no-inplace``: the networks' RiP workspaces and aliases dropped first).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from tvm_serenity.frontend import tflite_to_graph
from tvm_serenity.rewrite.patch import plan_patches, without_inplace
from tvm_serenity.schedule import schedule

MODELS_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "models"
MODELS = ["mcunet/mcunet-320kb-1mb_imagenet.tflite", "tinyengine/vww.tflite",
          "keras/mobilenet_v1_025_128.tflite", "keras/mobilenet_v2_035_96.tflite",
          "keras/mobilenet_v3_small_075_96.tflite", "mlperf_tiny/vww_96_int8.tflite"]


def _plan_cells(plan, streamed: bool, seconds: float) -> list[str]:
    if plan is None:
        return ["no gain", "", "", "", f"{seconds:.1f}"]
    peak = plan.peak_streamed if streamed else plan.peak_full_input
    return [f"{peak:,}", f"{plan.grid[0]}x{plan.grid[1]}", str(len(plan.layers)),
            f"{100 * plan.extra_macs_fraction:.1f}%", f"{seconds:.1f}"]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-inplace", action="store_true")
    parser.add_argument("--time-limit", type=float, default=60.0, help="seconds per search")
    parser.add_argument("--max-overhead", type=float, default=0.2)
    args = parser.parse_args(argv)
    head = ["model", "unpatched", "resident", "grid", "k", "extra MACs", "s",
            "streamed", "grid", "k", "extra MACs", "s"]
    rows = []
    for rel in MODELS:
        path = MODELS_DIR / rel
        if not path.is_file():
            print(f"skip {rel}: absent")
            continue
        graph = tflite_to_graph(path)
        unpatched = schedule(without_inplace(graph) if args.no_inplace else graph,
                             "serenity").peak_bytes
        cells = []
        for streamed in (False, True):
            t0 = time.perf_counter()
            plan = plan_patches(graph, stream_input=streamed, inplace=not args.no_inplace,
                                max_overhead=args.max_overhead, time_limit=args.time_limit)
            cells += _plan_cells(plan, streamed, time.perf_counter() - t0)
        rows.append([Path(rel).stem, f"{unpatched:,}", *cells])
        print(" | ".join(rows[-1]), flush=True)
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    print()
    for r in [head, *rows]:
        print("  ".join(c.rjust(w) for c, w in zip(r, widths)))


if __name__ == "__main__":
    main()
