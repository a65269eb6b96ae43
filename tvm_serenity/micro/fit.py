"""Does a linked firmware fit the board's SRAM and flash? Checked on the ELF before anything is
flashed or run, every resource at once. SRAM part by part: the model's arena, .data, the rest
of .bss, code and constants that a RAM-only image keeps in SRAM, alignment padding, the stack
reserve and any extra scratch the caller asks to keep free. The sizes come from the ELF's
section headers and the ``arena`` symbol; the total equals the linker's own accounting
(``__ram_free_start``). Flash (the image's code region, when it has one): the extent of the
loadable segments placed there (code, weights and constants, the .data image), which is what
the linker's region check measures. An oversized image is measured the same way (it is linked
with ``--noinhibit-exec``), so one refusal names the SRAM and the flash figures together.

:func:`static_ram_objects` lists the image's objects in SRAM outside the arena (from the
symbol table): what besides the arena the firmware keeps in RAM, e.g. to show that no input or
output buffer sits outside it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import SerenityError
from .boards import Board, get_board
from .elf import read_elf

__all__ = ["DoesNotFitError", "FitReport", "measure_fit", "check_fit", "static_ram_objects"]


class DoesNotFitError(SerenityError):
    """The image is too big for the board's SRAM or flash; the message itemises it."""


@dataclass(frozen=True)
class FitReport:
    board: str
    chip: str
    sram_bytes: int
    parts: tuple[tuple[str, int], ...]   # (what, bytes) in a fixed order
    flash_used_bytes: int | None = None  # None: a RAM-only image (nothing in flash)
    flash_bytes: int | None = None       # size of the image's code region

    @property
    def total_bytes(self) -> int:
        return sum(n for _, n in self.parts)

    @property
    def over_bytes(self) -> int:
        """SRAM bytes over the chip's SRAM (negative: free)."""
        return self.total_bytes - self.sram_bytes

    @property
    def flash_over_bytes(self) -> int | None:
        if self.flash_used_bytes is None:
            return None
        return self.flash_used_bytes - self.flash_bytes

    @property
    def sram_fits(self) -> bool:
        return self.over_bytes <= 0

    @property
    def flash_fits(self) -> bool:
        return self.flash_used_bytes is None or self.flash_over_bytes <= 0

    @property
    def fits(self) -> bool:
        return self.sram_fits and self.flash_fits

    def part(self, name: str) -> int:
        return dict(self.parts)[name]

    def describe(self) -> str:
        """One line: each SRAM part, the total against the SRAM size and the margin, then the
        flash used against the flash size and its margin."""
        items = " + ".join(f"{name} {n:,} B" for name, n in self.parts)
        line = (f"{self.board} ({self.chip}) SRAM: {items} = {self.total_bytes:,} B of "
                f"{self.sram_bytes:,} B ({self.sram_bytes // 1024} KiB)"
                + _margin(self.over_bytes))
        if self.flash_used_bytes is not None:
            line += (f"; flash: code, weights and constants {self.flash_used_bytes:,} B of "
                     f"{self.flash_bytes:,} B ({self.flash_bytes // 1024} KiB)"
                     + _margin(self.flash_over_bytes))
        return line

    def to_json(self) -> dict:
        return {"board": self.board, "chip": self.chip, "sram_bytes": self.sram_bytes,
                "parts": dict(self.parts), "total_bytes": self.total_bytes,
                "over_bytes": self.over_bytes, "flash_used_bytes": self.flash_used_bytes,
                "flash_bytes": self.flash_bytes, "flash_over_bytes": self.flash_over_bytes,
                "fits": self.fits}


def _margin(over: int) -> str:
    return f": over by {over:,} B" if over > 0 else f", {-over:,} B free"


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
    flash = board.layout(emulate).code
    flash_used = None
    if flash is not None:
        ends = [seg.address + len(seg.data) for seg in image.segments
                if flash.contains(seg.address)]
        flash_used = max(ends, default=flash.origin) - flash.origin
    return FitReport(board.name, board.chip, board.sram.size, parts, flash_used,
                     flash.size if flash is not None else None)


def check_fit(elf: str | Path, board: str | Board, *, emulate: bool, stack_reserve: int,
              scratch_bytes: int = 0) -> FitReport:
    """:func:`measure_fit`, raising :class:`DoesNotFitError` when the image does not fit its
    SRAM or its flash (one line with both)."""
    report = measure_fit(elf, board, emulate=emulate, stack_reserve=stack_reserve,
                         scratch_bytes=scratch_bytes)
    if not report.fits:
        raise DoesNotFitError(f"model does not fit: {report.describe()}")
    return report


def static_ram_objects(elf: str | Path, board: str | Board, *, emulate: bool) -> dict[str, int]:
    """Name -> bytes of every sized data object (symbols in .data and .bss) the image keeps in
    SRAM, the model's ``arena`` excluded."""
    ram = get_board(board).layout(emulate).ram
    image = read_elf(elf)
    spans = [(s.address, s.address + s.size) for s in image.sections
             if s.alloc and s.size and s.name in (".data", ".bss") and ram.contains(s.address)]
    return {sym.name: sym.size for sym in image.symbols.values()
            if sym.size and sym.name != "arena"
            and any(a <= sym.address < b for a, b in spans)}
