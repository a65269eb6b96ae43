"""``tvm-serenity``: the command line.

Every error a user can cause prints one line ``tvm-serenity: error: ...`` and exits 2.
"""

from __future__ import annotations

import argparse
import json
import sys

from . import __version__
from .errors import SerenityError
from .graph import Graph
from .memory import simulate

EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one clear line instead of usage + message
        raise SerenityError(f"{self.prog}: {message} (see --help)")


def _kib(n: int) -> str:
    return f"{n / 1024:,.1f}"


def _add_schedule(sub) -> None:
    from .schedule import METHODS
    p = sub.add_parser("schedule", help="order a graph's operators for minimum peak memory",
                       description="Schedule GRAPH.json (interchange JSON) and print the order, "
                                   "its liveness peak and a lower bound.")
    p.add_argument("graph", help="graph interchange JSON file")
    p.add_argument("--method", default="stored", choices=sorted(METHODS) + ["all"],
                   help="scheduling method ('all' compares every method)")
    p.add_argument("--time-limit", type=float, default=None, metavar="SEC",
                   help="stop searching after SEC seconds and return the best order found")
    p.add_argument("--no-inplace", dest="inplace", action="store_false",
                   help="ignore in-place capable nodes (the SERENITY paper's plain model)")
    p.add_argument("--seed", type=int, default=0, help="seed for randomised methods")
    p.add_argument("--json", action="store_true", help="print one JSON object (machines)")
    p.set_defaults(func=_cmd_schedule)


def _cmd_schedule(args) -> int:
    from .schedule import METHODS, schedule
    graph = Graph.load(args.graph)
    methods = sorted(METHODS) if args.method == "all" else [args.method]
    results = [schedule(graph, m, inplace=args.inplace, time_limit=args.time_limit,
                        seed=args.seed) for m in methods]
    if args.json:
        payload = (results[0].to_json() if len(results) == 1
                   else {"graph": graph.name, "results": [r.to_json() for r in results]})
        print(json.dumps(payload))
        return 0
    print(f"graph {graph.name}: {len(graph.op_names)} ops, {len(graph.input_names)} inputs, "
          f"in-place {'on' if args.inplace else 'off'}")
    print(f"{'method':<12}{'peak KiB':>12}{'bound KiB':>12}{'gap':>8}{'optimal':>9}"
          f"{'seconds':>10}")
    for r in results:
        print(f"{r.method:<12}{_kib(r.peak_bytes):>12}{_kib(r.lower_bound_bytes):>12}"
              f"{r.gap:>8.1%}{'yes' if r.optimal else 'no':>9}{r.seconds:>10.3f}")
    best = min(results, key=lambda r: r.peak_bytes)
    sim = simulate(graph, best.order, args.inplace)
    print(f"\nbest: {best.method}, peak {best.peak_bytes:,} B at step {sim.peak_step} "
          f"('{sim.peak_node}'), live there: {', '.join(sim.live_at_peak)}")
    if sim.inplace_nodes:
        print(f"in place: {', '.join(sim.inplace_nodes)}")
    print("order: " + " ".join(best.order))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="tvm-serenity",
                     description="Make neural networks fit microcontroller SRAM.")
    parser.add_argument("--version", action="version", version=f"tvm-serenity {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    _add_schedule(sub)
    return parser


def main(argv=None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return args.func(args)
    except SerenityError as e:
        msg = str(e)
        print(msg if msg.startswith("tvm-serenity") else f"tvm-serenity: error: {msg}",
              file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("tvm-serenity: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
