"""``python -m tvm_serenity.micro uf2 ELF UF2 --family ID``: the UF2 step of a generated
project's Makefile, so that Makefile needs no other tool than the Arm toolchain."""

from __future__ import annotations

import argparse
import sys

from ..errors import SerenityError
from .uf2 import elf_to_uf2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tvm_serenity.micro")
    commands = parser.add_subparsers(dest="command", required=True)
    uf2 = commands.add_parser("uf2", help="convert a firmware ELF to UF2")
    uf2.add_argument("elf")
    uf2.add_argument("uf2")
    uf2.add_argument("--family", required=True, type=lambda s: int(s, 0),
                     help="UF2 family ID: 0xe48bff56 (RP2040), 0xe48bff59 (RP2350 Arm secure)")
    args = parser.parse_args(argv)
    try:
        elf_to_uf2(args.elf, args.uf2, args.family)
    except SerenityError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
