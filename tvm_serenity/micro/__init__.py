"""Deployment to Raspberry Pi Pico (RP2040) and Pico 2 (RP2350): board targets, a
self-written bare-metal firmware runtime, firmware build with an SRAM fit check, UF2 output,
emulator runners (rp2040js for the Pico, QEMU mps2-an505 for the Pico 2) and a microTVM-like
project API that also emits a Pico SDK project for real boards.

Typical use, with a directory holding an emitted ``model.c``/``model.h``::

    from tvm_serenity import micro
    project = micro.generate_project("out/pico", "out/model_c", "pico")
    result = micro.run(project)          # board over USB if connected, else rp2040js
    print(result.cycles, result.stack_high_water, result.arena_touched)

Layers: :mod:`.boards` (registry), :mod:`.builder` (compile, link, fit check via
:mod:`.fit`, BIN/UF2 via :mod:`.uf2`), :mod:`.runners` (host, rp2040js, QEMU, USB serial),
:mod:`.project` (generate/build/flash/run). The C runtime lives in ``micro/firmware``.
"""

from .boards import BOARDS, Board, ImageLayout, MemoryRegion, get_board
from .builder import DEFAULT_STACK_RESERVE, Firmware, build_firmware, build_plan
from .fit import DoesNotFitError, FitReport, check_fit, measure_fit
from .project import build, flash, generate_project, load_project, run
from .runners import RunResult, parse_report, run_host, run_qemu, run_rp2040js, run_serial
from .uf2 import decode_uf2, elf_to_uf2, encode_uf2

__all__ = ["BOARDS", "Board", "ImageLayout", "MemoryRegion", "get_board",
           "DEFAULT_STACK_RESERVE", "Firmware", "build_firmware", "build_plan",
           "DoesNotFitError", "FitReport", "check_fit", "measure_fit",
           "build", "flash", "generate_project", "load_project", "run",
           "RunResult", "parse_report", "run_host", "run_qemu", "run_rp2040js", "run_serial",
           "decode_uf2", "elf_to_uf2", "encode_uf2"]
