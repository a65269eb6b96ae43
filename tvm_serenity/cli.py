"""``tvm-serenity``: the command line.

Every error a user can cause prints one line ``tvm-serenity: error: ...`` and exits 2.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

from . import __version__
from .builddir import absolute
from .errors import SerenityError
from .text import one_line
from .graph import Graph
from .memory import simulate

EXIT_USAGE = 2
ALL_METHODS_TIME_LIMIT = 10.0   # seconds per method for `schedule --method all`


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one clear line instead of usage + message
        raise SerenityError(f"{self.prog}: {message} (see --help)")


def _kib(n: int) -> str:
    return f"{n / 1024:,.1f}"


def _add_schedule(sub) -> None:
    from .alloc import PLANNERS
    from .schedule import DEFAULT_TIME_LIMIT, METHODS
    p = sub.add_parser("schedule", help="order a graph's operators for minimum peak memory",
                       description="Schedule GRAPH.json (interchange JSON), plan its arena and "
                                   "print the order, its liveness peak, a lower bound and the "
                                   "arena size.")
    p.add_argument("graph", help="graph interchange JSON file")
    p.add_argument("--method", default="serenity", choices=sorted(METHODS) + ["all"],
                   help="scheduling method (default: serenity; 'all' compares every method but "
                        "the exhaustive textbook DP, sharing the scheduling time, at most "
                        f"{ALL_METHODS_TIME_LIMIT:g} s each)")
    p.add_argument("--time-limit", type=float, default=None, metavar="SEC",
                   help="bound for the whole command, scheduling (and rewriting) up to half "
                        "of it, arena planning the rest; past it the best order and arena "
                        "found come back with optimal false and their gap (default: "
                        f"{DEFAULT_TIME_LIMIT:g})")
    p.add_argument("--no-inplace", dest="inplace", action="store_false",
                   help="ignore in-place capable nodes (the SERENITY paper's plain model)")
    p.add_argument("--rewrite", action="store_true",
                   help="apply identity graph rewriting where it lowers the optimal peak")
    p.add_argument("--save-graph", metavar="FILE",
                   help="write the (rewritten) graph that the order refers to")
    p.add_argument("--planner", default="optimal", choices=sorted(PLANNERS),
                   help="arena planner for the chosen order (default: optimal)")
    p.add_argument("--alignment", type=int, default=1, metavar="BYTES",
                   help="arena offset alignment (1 for MCU int8, 64 for the TVM host path)")
    p.add_argument("--seed", type=int, default=0, help="seed for randomised methods")
    p.add_argument("--json", action="store_true", help="print one JSON object (machines)")
    p.set_defaults(func=_cmd_schedule)


def _cmd_schedule(args) -> int:
    from .alloc import plan_arena
    from .schedule import METHODS, Deadline, schedule
    total = Deadline.of(args.time_limit, what="--time-limit")  # one deadline for everything
    graph = Graph.load(args.graph)
    # Scheduling (with rewriting) may take half the time; the arena planner gets what is left
    # but a fifth, kept for the plan's liveness and verification and the output.
    scheduling = total.share(0.5)
    rewrite = None
    if args.rewrite:
        if args.method == "all":
            raise SerenityError("--rewrite needs one --method, not 'all'")
        from .rewrite import rewrite_graph
        rewrite = rewrite_graph(graph, inplace=args.inplace, time_limit=scheduling,
                                method=args.method)
        graph = rewrite.graph
    if args.save_graph:
        graph.save(args.save_graph)
    if args.method == "all":    # the textbook DP is exhaustive by design: only on request
        methods = sorted(m for m in METHODS if m != "textbook")
    else:
        methods = [args.method]
    results = [rewrite.schedule] if rewrite else []
    for k, m in enumerate([] if rewrite else methods):   # equal shares of what is left
        limit = scheduling.share(1 / (len(methods) - k))
        if len(methods) > 1:
            limit = Deadline.of(min(limit.remaining(), ALL_METHODS_TIME_LIMIT))
        results.append(schedule(graph, m, inplace=args.inplace, time_limit=limit,
                                seed=args.seed))
    best = min(results, key=lambda r: r.peak_bytes)
    plan = plan_arena(graph, best.order, args.planner, args.alignment, args.inplace,
                      total.share(0.8))
    arena = {"arena_bytes": plan.arena_bytes, "planner": plan.planner,
             "arena_status": plan.status, "arena_gap": round(plan.gap, 6),
             "arena_seconds": round(plan.seconds, 6), "offsets": plan.offsets,
             "right_shifts": plan.num_moves}
    if args.json:
        if len(results) == 1:
            payload = {**results[0].to_json(), **arena}
            if rewrite:
                payload["rewrite"] = rewrite.to_json()
        else:
            payload = {"graph": graph.name, "results": [r.to_json() for r in results],
                       "best": best.method, **arena}
        print(json.dumps(payload))
        return 0
    print(f"graph {graph.name}: {len(graph.op_names)} ops, {len(graph.input_names)} inputs, "
          f"in-place {'on' if args.inplace else 'off'}")
    if rewrite:
        print(f"rewriting: {len(rewrite.applied)} rewrites applied, optimal peak "
              f"{rewrite.peak_before:,} -> {rewrite.peak_after:,} B")
    print(f"{'method':<12}{'peak KiB':>12}{'bound KiB':>12}{'gap':>8}{'optimal':>9}"
          f"{'seconds':>10}")
    for r in results:
        print(f"{r.method:<12}{_kib(r.peak_bytes):>12}{_kib(r.lower_bound_bytes):>12}"
              f"{r.gap:>8.1%}{'yes' if r.optimal else 'no':>9}{r.seconds:>10.3f}")
    sim = simulate(graph, best.order, args.inplace)
    print(f"\nbest: {best.method}, peak {best.peak_bytes:,} B at step {sim.peak_step} "
          f"('{sim.peak_node}'), live there: {', '.join(sim.live_at_peak)}")
    print(f"arena ({plan.planner}): {plan.arena_bytes:,} B for a liveness peak of "
          f"{plan.liveness_peak_bytes:,} B ({plan.status}), {plan.num_moves} right shifts")
    if sim.inplace_nodes:
        print(f"in place: {', '.join(sim.inplace_nodes)}")
    print("order: " + " ".join(best.order))
    return 0


LLVM_TARGET = "llvm"


def _add_compile(sub) -> None:
    from .alloc import PLANNERS
    from .micro.boards import BOARDS     # not deploy: it imports TVM (seconds of start-up)
    from .schedule import METHODS
    p = sub.add_parser("compile", help="compile an int8 .tflite or QDQ .onnx model for a "
                                       "board (like tvmc)",
                       description="Compile MODEL (int8 .tflite, or int8 QDQ .onnx) for TARGET "
                                   "into OUT: model.c/"
                                   "model.h, a firmware project, plan.json and a report; for "
                                   "--target llvm, a TVM Relax VM library (model.so) built with "
                                   "the serenity pipeline and relax.json.")
    p.add_argument("model", help="int8 .tflite model, or int8 .onnx in QDQ form")
    p.add_argument("--target", default="pico", choices=(*BOARDS, LLVM_TARGET),
                   help="a board (pico, pico2), its C built natively (host), or TVM's llvm "
                        "target through the Relax VM (llvm)")
    p.add_argument("-o", "--output", default="serenity_out", metavar="OUT",
                   help="output directory (default: serenity_out)")
    p.add_argument("--schedule", default="serenity", choices=sorted(METHODS),
                   help="operator order (default: serenity; 'stored' is TFLite's order)")
    p.add_argument("--planner", default="optimal", choices=sorted(PLANNERS),
                   help="arena planner (default: optimal)")
    p.add_argument("--rip", action=argparse.BooleanOptionalAction, default=None,
                   help="Right In-Place kernels and in-place planning (default: on for the "
                        "boards and host; for llvm, built with and without, the smaller "
                        "arena kept)")
    p.add_argument("--rewrite", action=argparse.BooleanOptionalAction, default=False,
                   help="identity graph rewriting: partition concat -> conv / depthwise "
                        "where it lowers the scheduler's peak (bit-exact; default: off)")
    p.add_argument("--time-limit", type=float, default=30.0, metavar="SEC",
                   help="bound for the scheduler (with --rewrite, the whole rewrite search) "
                        "and the arena solver together (default: 30)")
    p.add_argument("--patch", action="store_true",
                   help="patch-based execution of the first layers (MCUNetV2-style) where it "
                        "lowers the peak (bit-exact; MCU targets only; default: off)")
    p.add_argument("--patch-overhead", type=float, metavar="FRACTION",
                   help="with --patch: the extra MACs a plan may cost, a fraction of the "
                        "network's (default: 0.2)")
    p.add_argument("--patch-grid", metavar="ROWSxCOLS[c]",
                   help="with --patch and --patch-layers: force this grid instead of the "
                        "search: 4x4 (patches, halos recomputed) or 22x1c (22 full-width "
                        "row strips, rows cached); one per stretch of --patch-layers, none "
                        "leaving one unpatched: 22x1c,none,8x8")
    p.add_argument("--patch-layers", metavar="K",
                   help="with --patch and --patch-grid: patch the first K layers (or K "
                        "layers per segment, each from the output of the one before: 10,2)")
    p.add_argument("--stream-input", action="store_true",
                   help="with --patch: the input is not kept in the arena; model_run reads it "
                        "patch by patch through model_read_input() (a camera, flash)")
    p.add_argument("--int8-core", action="store_true",
                   help="strip a float32 input QUANTIZE and output DEQUANTIZE and run the int8 "
                        "core (default: the firmware takes and returns the model's own "
                        "float32/int8 tensors; MCU targets only)")
    p.add_argument("--force", action="store_true",
                   help="replace OUT even when it holds an earlier build whose files were "
                        "edited (never a directory that is not a tvm-serenity build)")
    p.add_argument("--json", action="store_true", help="print plan.json instead of a summary")
    p.set_defaults(func=_cmd_compile)


def _model_file(path: str) -> Path:
    """The model file the user named, refused in one line when it is not a readable file."""
    model = Path(path)
    if not os.path.lexists(model):
        raise SerenityError(f"model file '{model}' does not exist")
    if model.is_dir():
        raise SerenityError(f"model '{model}' is a directory, not a model file")
    if not model.is_file():
        raise SerenityError(f"model '{model}' is not a regular file (a .tflite or .onnx file "
                            "is needed)")
    if not os.access(model, os.R_OK):
        raise SerenityError(f"model file '{model}' is not readable")
    return model


def _cmd_compile(args) -> int:
    from . import micro
    model = _model_file(args.model)
    _check_seconds("--time-limit", args.time_limit)
    patching = args.patch or args.patch_grid is not None or args.patch_layers is not None \
        or args.patch_overhead is not None or args.stream_input
    if args.target == LLVM_TARGET and patching:
        raise SerenityError("--patch is for the MCU targets (pico, pico2, host), not llvm")
    if patching and not args.patch:       # the flags the API's messages would name otherwise
        raise SerenityError("--patch-layers, --patch-grid, --patch-overhead and --stream-input "
                            "go with --patch")
    if (args.patch_layers is None) != (args.patch_grid is None):
        raise SerenityError("--patch-layers and --patch-grid force a patch plan together")
    if args.patch_overhead is not None and not 0 <= args.patch_overhead <= 10:
        raise SerenityError(f"--patch-overhead must be a fraction of the MACs in [0, 10], got "
                            f"{args.patch_overhead:g}")
    layers, grid = _patch_plan(args.patch_layers, args.patch_grid)
    if args.target == LLVM_TARGET:
        from .relax_deploy import REPORT_FILE, compile_relax
        built = compile_relax(model, args.output, method=args.schedule, planner=args.planner,
                              rewrite=args.rewrite,
                              rip="auto" if args.rip is None else args.rip,
                              time_limit=args.time_limit,
                              force=args.force)
        from .report import write_relax_report
        report = write_relax_report(args.output)
        if args.json:
            print(json.dumps(built.report))
        else:
            print(built.summary())
            print(f"decisions: {Path(args.output) / REPORT_FILE}")
            print(f"report: {_shown(args.output, report.html)}")
        return 0
    compiled = micro.build_model(model, args.target, args.output, schedule=args.schedule,
                                 planner=args.planner, rip=args.rip is not False,
                                 rewrite=args.rewrite,
                                 time_limit=args.time_limit, force=args.force,
                                 int8_core=args.int8_core, patch=args.patch,
                                 **({} if args.patch_overhead is None
                                    else {"patch_overhead": args.patch_overhead}),
                                 patch_layers=layers, patch_grid=grid,
                                 stream_input=args.stream_input)
    from .report import write_compiled_report
    report = write_compiled_report(args.output)
    if args.json:
        print(json.dumps(compiled.plan_json()))
    else:
        print(compiled.summary())
        print(f"report: {_shown(args.output, report.html)}")
    return 0


def _patch_plan(layers: str | None, grids: str | None):
    """``--patch-layers K[,K...]`` as ints and ``--patch-grid G[,G...]`` as grid texts
    (``RxC`` or ``Rx1c``, one per segment; one segment: a plain int and text), refused in
    one line when malformed."""
    if layers is not None and not all(k.strip().isdigit() and int(k) > 0
                                      for k in layers.split(",")):
        raise SerenityError(f"--patch-layers must be a positive number of layers (or numbers "
                            f"joined by commas), got '{layers}'")
    from .rewrite.patch import PatchError, parse_grid
    texts = [t.strip() for t in grids.split(",")] if grids is not None else []
    for text in texts:
        try:
            parse_grid(text)
        except PatchError as e:
            raise SerenityError(f"--patch-grid: {e}") from None
    ks = [int(k) for k in layers.split(",")] if layers is not None else None
    if ks is not None and len(ks) == 1 and len(texts) <= 1:
        return ks[0], texts[0] if texts else None
    return ks, texts or None


def _shown(out: str, path: Path) -> Path:
    """``path`` (inside the build ``out``) as the user named ``out``: relative stays relative."""
    return Path(out) / path.relative_to(absolute(out))


def _check_seconds(flag: str, value: float | None) -> None:
    if value is not None and not (math.isfinite(value) and value > 0):
        raise SerenityError(f"{flag} must be a positive number of seconds, got {value}")


def _add_run(sub) -> None:
    p = sub.add_parser("run", help="run a compiled model (emulator, board or host; like tvmc "
                                   "run)",
                       description="Run OUT (from tvm-serenity compile) and check its output "
                                   "against the reference interpreter.")
    p.add_argument("output", metavar="OUT", help="directory written by tvm-serenity compile")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--emulate", dest="where", action="store_const", const="emulate",
                       help="the target's emulator: rp2040js (pico), QEMU (pico2) (default)")
    where.add_argument("--board", dest="where", action="store_const", const="board",
                       help="a connected board over USB serial")
    where.add_argument("--host", dest="where", action="store_const", const="host",
                       help="the same model.c built natively")
    p.add_argument("--input", metavar="FILE", help="raw int8 input bytes (default: the "
                                                   "input compiled into the project)")
    p.add_argument("--no-check", action="store_true",
                   help="do not compare the output with the reference interpreter")
    p.add_argument("--timeout", type=float, default=600.0, metavar="SEC")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_run, where="emulate")


def _cmd_run(args) -> int:
    from . import deploy
    from .relax_deploy import is_relax_build, run_relax
    _check_seconds("--timeout", args.timeout)
    data = None
    if args.input:
        try:
            data = Path(args.input).read_bytes()
        except OSError as e:
            raise SerenityError(f"cannot read input file '{args.input}': {e.strerror}") from None
    if is_relax_build(args.output):
        if args.where == "board":
            raise SerenityError(f"'{args.output}' is an llvm build: it runs on this host's "
                                "Relax VM, not on a board")
        result = run_relax(args.output, data, check=not args.no_check)
        payload = result.to_json()
        if args.json:
            print(json.dumps(payload))
        else:
            for key, value in payload.items():
                print(f"{key:>20}: {value}")
            if not args.no_check:
                print(f"{'check':>20}: outputs identical to the reference interpreter")
        return 0
    result = deploy.run(args.output, emulate=args.where != "board", input=data,
                        host=args.where == "host", check=not args.no_check,
                        timeout=args.timeout)
    payload = result.to_json()
    if args.json:
        print(json.dumps(payload))
    else:
        outputs = payload.pop("outputs")
        for key, value in payload.items():
            print(f"{key:>20}: {value}")
        if len(outputs) > 1:        # one line per output; "output" above is all of them
            for k, value in enumerate(outputs):
                print(f"{f'output {k}':>20}: {value}")
        if not args.no_check:
            print(f"{'check':>20}: " + ("output identical" if len(outputs) == 1 else
                                        f"all {len(outputs)} outputs identical")
                  + " to the reference interpreter")
    return 0


def _add_report(sub) -> None:
    p = sub.add_parser("report", help="(re)write the HTML/PNG report of a compiled model")
    p.add_argument("output", metavar="OUT", help="directory written by tvm-serenity compile")
    p.set_defaults(func=_cmd_report)


def _cmd_report(args) -> int:
    from .relax_deploy import is_relax_build
    from .report import write_compiled_report, write_relax_report
    write = write_relax_report if is_relax_build(args.output) else write_compiled_report
    print(_shown(args.output, write(args.output).html))
    return 0


def _add_export_tflm(sub) -> None:
    from .alloc import PLANNERS
    from .schedule import METHODS
    from .tflm_export import DEFAULT_INPUTS, DEFAULT_TIME_LIMIT
    p = sub.add_parser("export-tflm", help="write a .tflite for TFLite Micro with our operator "
                                           "order and offline arena plan in it",
                       description="Write a copy of MODEL whose operators are in our "
                                   "memory-aware order and whose OfflineMemoryAllocation "
                                   "metadata holds our arena offsets for that order (TFLM's "
                                   "rules: 16 B alignment, no in-place); load it in TFLite "
                                   "Micro and compare its outputs with the original's.")
    p.add_argument("model", help=".tflite model (one subgraph, no variable tensors)")
    p.add_argument("-o", "--output", required=True, metavar="PLANNED",
                   help="the .tflite to write (refused if it exists, unless --force)")
    p.add_argument("--schedule", default="serenity", choices=sorted(METHODS),
                   help="operator order (default: serenity; 'stored' keeps TFLite's order)")
    p.add_argument("--planner", default="optimal", choices=sorted(PLANNERS),
                   help="arena planner for that order (default: optimal)")
    p.add_argument("--time-limit", type=float, default=DEFAULT_TIME_LIMIT, metavar="SEC",
                   help="bound for the scheduler and the arena solver together (default: "
                        f"{DEFAULT_TIME_LIMIT:g})")
    p.add_argument("--inputs", type=int, default=DEFAULT_INPUTS, metavar="N",
                   help="random input sets on which TFLM's outputs for the copy must equal "
                        f"the original's byte for byte (default: {DEFAULT_INPUTS})")
    p.add_argument("--force", action="store_true", help="replace PLANNED if it exists")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_cmd_export_tflm)


def _cmd_export_tflm(args) -> int:
    from .tflm_export import export_tflm
    model = _model_file(args.model)
    _check_seconds("--time-limit", args.time_limit)
    exported = export_tflm(model, args.output, schedule_method=args.schedule,
                           planner=args.planner, time_limit=args.time_limit,
                           inputs=args.inputs, force=args.force)
    print(json.dumps(exported.to_json()) if args.json else exported.summary())
    return 0


def _add_demo(sub) -> None:
    p = sub.add_parser("demo", help="compile the built-in model for a Pico both ways and run "
                                    "it on the emulator")
    p.add_argument("-o", "--output", default="serenity_demo", metavar="DIR")
    p.add_argument("--no-emulate", dest="emulate", action="store_false",
                   help="compile only (no rp2040js run)")
    p.set_defaults(func=_cmd_demo)


def _cmd_demo(args) -> int:
    from .demo import demo_failure, format_demo, run_demo
    print("tvm-serenity demo: a two-branch int8 CNN (48x48x8 input) for the Raspberry Pi Pico "
          "(RP2040, 264 KiB SRAM), run on rp2040js", flush=True)
    rows = run_demo(args.output, emulate=args.emulate)
    print(format_demo(rows), flush=True)
    failure = demo_failure(rows)
    if failure:
        raise SerenityError(f"demo failed: {failure}")
    print(f"artefacts: {Path(args.output) / 'serenity'}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="tvm-serenity",
                     description="Make neural networks fit microcontroller SRAM.")
    parser.add_argument("--version", action="version", version=f"tvm-serenity {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    _add_schedule(sub)
    _add_compile(sub)
    _add_run(sub)
    _add_report(sub)
    _add_export_tflm(sub)
    _add_demo(sub)
    return parser


def main(argv=None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return args.func(args)
    except SerenityError as e:
        print(f"tvm-serenity: error: {one_line(str(e))}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("tvm-serenity: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
