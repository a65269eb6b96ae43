"""Board targets: CPU flags, memory maps, SRAM budget and how each board is emulated.

A :class:`Board` has two image layouts:

* ``emulate`` -- what runs in this machine's emulator, with emulator-only instrumentation
  (BKPT markers for rp2040js, semihosting for QEMU);
* ``device`` -- what goes into the UF2 for a real board (no BKPT, no semihosting).

``pico`` (RP2040, Cortex-M0+, 264 KB SRAM, 2 MB flash)
    emulate: a flash image (vector table at 0x10000000, code, weights and the input in flash,
    .data copied to SRAM) written straight into rp2040js's ``mcu.flash`` with VTOR set: there
    is no boot2/bootrom in the emulator, and weights stay in flash as on a real board.
    device: a RAM-only image at 0x20000000. The RP2040 bootrom accepts a UF2 whose blocks all
    target SRAM and enters it at its lowest address; a flash image would need the SDK's
    boot2, which no registry ships. So in the bare-metal UF2 the weights take SRAM too (the
    fit check counts them); the Pico SDK project (micro/project.py) is the flash-resident
    alternative for real boards.

``pico2`` (RP2350, Cortex-M33, 520 KB SRAM, 4 MB flash)
    emulate: QEMU ``-M mps2-an505`` (a Cortex-M33 with code memory at 0x10000000 and RAM at
    0x38000000). The image is linked for the AN505 map but its RAM region is the Pico 2's
    520 KB, so the fit limit is the real chip's.
    device: a flash image at 0x10000000 carrying the minimal IMAGE_DEF block that the RP2350
    bootrom requires (no boot2 needed on the RP2350); weights stay in flash.

``host``: the same harness compiled natively with ``cc``, for byte-for-byte comparisons.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import SerenityError

__all__ = ["MemoryRegion", "ImageLayout", "Board", "BOARDS", "get_board",
           "UF2_FAMILY_RP2040", "UF2_FAMILY_RP2350_ARM_S"]

KIB = 1024

UF2_FAMILY_RP2040 = 0xE48BFF56
UF2_FAMILY_RP2350_ARM_S = 0xE48BFF59


@dataclass(frozen=True)
class MemoryRegion:
    origin: int
    size: int

    @property
    def end(self) -> int:
        return self.origin + self.size

    def contains(self, address: int) -> bool:
        return self.origin <= address < self.end


@dataclass(frozen=True)
class ImageLayout:
    """Where one firmware image lives. ``code is None`` means a RAM-only image (code and
    constants in SRAM too); ``defines`` select the runtime's features (firmware/*.c)."""
    code: MemoryRegion | None
    ram: MemoryRegion
    defines: tuple[str, ...]

    @property
    def ram_only(self) -> bool:
        return self.code is None


@dataclass(frozen=True)
class Board:
    name: str
    chip: str
    cpu: str
    cflags: tuple[str, ...]
    sram: MemoryRegion | None    # the real chip's SRAM: the fit limit
    flash: MemoryRegion | None
    uf2_family: int | None
    emulator: str | None         # "rp2040js", "qemu" or None (host)
    emulate: ImageLayout | None
    device: ImageLayout | None
    qemu_machine: str | None = None
    qemu_systick_hz: int | None = None  # the emulated board's SysTick processor clock
    bootsel_label: str | None = None    # volume label (and INFO_UF2.TXT Board-ID) in BOOTSEL
    pico_board: str | None = None      # PICO_BOARD for the Pico SDK project
    pico_platform: str | None = None   # PICO_PLATFORM for the Pico SDK project

    @property
    def is_host(self) -> bool:
        return self.emulator is None

    def layout(self, emulate: bool) -> ImageLayout:
        if self.is_host:
            raise SerenityError(f"board '{self.name}' has no bare-metal image layout")
        return self.emulate if emulate else self.device


_RP2040_SRAM = MemoryRegion(0x2000_0000, 264 * KIB)
_RP2040_FLASH = MemoryRegion(0x1000_0000, 2048 * KIB)
_RP2350_SRAM = MemoryRegion(0x2000_0000, 520 * KIB)
_RP2350_FLASH = MemoryRegion(0x1000_0000, 4096 * KIB)
_AN505_CODE = MemoryRegion(0x1000_0000, 4096 * KIB)          # SSRAM1, secure alias
_AN505_RAM = MemoryRegion(0x3800_0000, _RP2350_SRAM.size)     # SSRAM2/3, secure alias

BOARDS: dict[str, Board] = {
    "pico": Board(
        name="pico", chip="RP2040", cpu="cortex-m0plus",
        cflags=("-mcpu=cortex-m0plus", "-mthumb"),
        sram=_RP2040_SRAM, flash=_RP2040_FLASH, uf2_family=UF2_FAMILY_RP2040,
        emulator="rp2040js",
        emulate=ImageLayout(_RP2040_FLASH, _RP2040_SRAM,
                            ("SERENITY_CONSOLE_RP2040_UART", "SERENITY_BKPT_MARKERS")),
        device=ImageLayout(None, _RP2040_SRAM,
                           ("SERENITY_CONSOLE_RP2040_UART", "SERENITY_RAM_ENTRY")),
        pico_board="pico", pico_platform="rp2040", bootsel_label="RPI-RP2"),
    "pico2": Board(
        name="pico2", chip="RP2350", cpu="cortex-m33",
        cflags=("-mcpu=cortex-m33", "-mthumb", "-mfloat-abi=soft"),
        sram=_RP2350_SRAM, flash=_RP2350_FLASH, uf2_family=UF2_FAMILY_RP2350_ARM_S,
        emulator="qemu",
        emulate=ImageLayout(_AN505_CODE, _AN505_RAM, ("SERENITY_CONSOLE_SEMIHOSTING",)),
        device=ImageLayout(_RP2350_FLASH, _RP2350_SRAM, ("SERENITY_RP2350_IMAGE_DEF",)),
        qemu_machine="mps2-an505", qemu_systick_hz=20_000_000,
        pico_board="pico2", pico_platform="rp2350-arm-s", bootsel_label="RP2350"),
    "host": Board(
        name="host", chip="host", cpu="native", cflags=(), sram=None,
        flash=None, uf2_family=None, emulator=None, emulate=None, device=None),
}


def get_board(board: str | Board) -> Board:
    if isinstance(board, Board):
        return board
    if board not in BOARDS:
        raise SerenityError(f"unknown board '{board}' (choose from {', '.join(BOARDS)})")
    return BOARDS[board]
