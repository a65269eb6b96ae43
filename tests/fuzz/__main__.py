"""``python -m tests.fuzz``: run a seeded campaign and print the outcome table; exit 1 when any
case failed (traceback, crash, hang, bad refusal, files changed, ...), 0 otherwise."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from .campaign import GENERATORS, campaign
from .runner import table


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__)
    p.add_argument("--seed", type=int, default=0)
    for g, default in GENERATORS.items():
        p.add_argument(f"--{g}", type=int, default=default, metavar="N",
                       help=f"number of {g} cases (default {default})")
    p.add_argument("--time-budget", type=float, default=None, metavar="SEC",
                   help="start no case after SEC seconds (the rest are 'not-run')")
    p.add_argument("--jobs", type=int, default=2, help="cases run at once (default 2)")
    p.add_argument("--engine", choices=("fork", "exec"), default="fork",
                   help="fork: tvm-serenity's main() in a forked child of this process after "
                        "one import (fast); exec: a fresh `python -m tvm_serenity.cli` per step")
    p.add_argument("--only", nargs="+", metavar="ID", help="run only these case ids")
    p.add_argument("--workdir", type=Path,
                   help="work here and keep the pristine builds and each failing case's "
                        "sandbox and logs (ID/sandbox, ID/stepN.out, ID/stepN.err)")
    p.add_argument("--keep", action="store_true", help="keep every case's sandbox and logs")
    p.add_argument("-v", "--verbose", action="store_true", help="one line per finished case")
    args = p.parse_args(argv)
    counts = {g: getattr(args, g) for g in GENERATORS}
    start = time.monotonic()

    def progress(r):
        if args.verbose:
            print(f"{time.monotonic() - start:7.1f}s {r.outcome:<26} {r.case.id:<14} "
                  f"{r.case.description[:100]!r}", flush=True)

    results, workdir = campaign(args.seed, counts, jobs=args.jobs, engine=args.engine,
                                time_budget=args.time_budget, only=args.only,
                                workdir=args.workdir, keep=args.keep, progress=progress)
    print(table(results))
    print(f"\nseed {args.seed}, {len(results)} cases in {time.monotonic() - start:.0f} s"
          + (f", sandboxes in {workdir}" if args.keep or args.workdir else ""))
    return 1 if any(r.failed for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
