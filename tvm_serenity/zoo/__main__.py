"""``python -m tvm_serenity.zoo NAME > graph.json`` (interchange JSON); ``--list`` lists names."""

from __future__ import annotations

import argparse
import sys

from ..errors import SerenityError
from . import build, describe, kind, names


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tvm_serenity.zoo",
                                     description="Print a zoo graph as interchange JSON.")
    parser.add_argument("name", nargs="?", help="zoo graph name (see --list)")
    parser.add_argument("--list", action="store_true", help="list the zoo graphs")
    args = parser.parse_args(argv)
    if args.list:
        for name in names():
            print(f"{name:<32} {kind(name):<8} {describe(name)}")
        return 0
    if not args.name:
        parser.error("give a graph NAME or --list")
    try:
        print(build(args.name).dumps())
    except SerenityError as e:
        print(f"python -m tvm_serenity.zoo: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
