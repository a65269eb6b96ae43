"""Does a linked firmware fit the board's SRAM? Checked on the ELF before anything is flashed
or run, part by part: the model's arena, .data, the rest of .bss, code and constants that a
RAM-only image keeps in SRAM, alignment padding, the stack reserve and any extra scratch the
caller asks to keep free. The sizes come from the ELF's section headers and the ``arena``
symbol; the total equals the linker's own accounting (``__ram_free_start``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import SerenityError
from .boards import Board, get_board
from .elf import read_elf

__all__ = ["DoesNotFitError", "FitReport", "measure_fit", "check_fit"]


class DoesNotFitError(SerenityError):
    """The image is too big for the board's SRAM or flash; the message itemises it."""


@dataclass(frozen=True)
class FitReport:
    board: str
    chip: str
    sram_bytes: int
    parts: tuple[tuple[str, int], ...]   # (what, bytes) in a fixed order

    @property
    def total_bytes(self) -> int:
        return sum(n for _, n in self.parts)

    @property
    def over_bytes(self) -> int:
        return self.total_bytes - self.sram_bytes

    @property
    def fits(self) -> bool:
        return self.over_bytes <= 0

    def part(self, name: str) -> int:
        return dict(self.parts)[name]

    def describe(self) -> str:
        """One line: each part, the total against the SRAM size and the margin."""
        items = " + ".join(f"{name} {n:,} B" for name, n in self.parts)
        head = (f"{self.board} ({self.chip}) SRAM: {items} = {self.total_bytes:,} B of "
                f"{self.sram_bytes:,} B ({self.sram_bytes // 1024} KiB)")
        if self.fits:
            return f"{head}, {-self.over_bytes:,} B free"
        return f"{head}: over by {self.over_bytes:,} B"

    def to_json(self) -> dict:
        return {"board": self.board, "chip": self.chip, "sram_bytes": self.sram_bytes,
                "parts": dict(self.parts), "total_bytes": self.total_bytes,
                "over_bytes": self.over_bytes, "fits": self.fits}


def measure_fit(elf: str | Path, board: str | Board, *, emulate: bool, stack_reserve: int,
                scratch_bytes: int = 0) -> FitReport:
    """Account for every SRAM byte of the linked image ``elf`` built for ``board``."""
    board = get_board(board)
    ram = board.layout(emulate).ram
    image = read_elf(elf)
    in_ram = [s for s in image.sections if s.alloc and s.size and ram.contains(s.address)]
    data = sum(s.size for s in in_ram if s.name == ".data")
    bss = sum(s.size for s in in_ram if s.name == ".bss")
    code = sum(s.size for s in in_ram if s.name not in (".data", ".bss"))
    arena_sym = image.symbols.get("arena")
    # An oversized image (measured after a --noinhibit-exec link) may place the arena past
    # the end of RAM: it is still RAM the model needs.
    arena = arena_sym.size if arena_sym and arena_sym.address >= ram.origin else 0
    free_start = image.symbols.get("__ram_free_start")
    used = free_start.address - ram.origin if free_start else data + bss + code
    parts = (("arena", arena), (".data", data), (".bss besides the arena", bss - arena),
             ("code+constants in SRAM", code),
             ("alignment padding", max(used - data - bss - code, 0)),
             ("stack reserve", stack_reserve), ("scratch", scratch_bytes))
    return FitReport(board.name, board.chip, board.sram.size, parts)


def check_fit(elf: str | Path, board: str | Board, *, emulate: bool, stack_reserve: int,
              scratch_bytes: int = 0) -> FitReport:
    """:func:`measure_fit`, raising :class:`SerenityError` when the image does not fit."""
    report = measure_fit(elf, board, emulate=emulate, stack_reserve=stack_reserve,
                         scratch_bytes=scratch_bytes)
    if not report.fits:
        raise DoesNotFitError(f"model does not fit: {report.describe()}")
    return report
