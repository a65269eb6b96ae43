"""Deployment to Raspberry Pi Pico (RP2040) and Pico 2 (RP2350): board targets, a
self-written bare-metal firmware runtime, firmware build with an SRAM fit check, UF2 output,
emulator runners (rp2040js for the Pico, QEMU mps2-an505 for the Pico 2) and a microTVM-like
project API that also emits a Pico SDK project for real boards.

Typical use, with a directory holding an emitted ``model.c``/``model.h``::

    from tvm_serenity import micro
    project = micro.generate_project("out/pico", "out/model_c", "pico")
    result = micro.run(project)          # board over USB if connected, else rp2040js
    print(result.cycles, result.stack_high_water, result.arena_touched)

From a model to a measured build in one call, whatever the front end::

    built = micro.build_model(mod_or_path, board="pico", out_dir="out")   # Relax IRModule,
    micro.run_model(built.out_dir)                                         # .tflite or .onnx

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
           "decode_uf2", "elf_to_uf2", "encode_uf2", "build_model", "run_model"]


def build_model(model, board: str = "pico", out_dir="serenity_out", **options):
    """Compile ``model`` for ``board`` (``"pico"``, ``"pico2"``, ``"host"``) into ``out_dir``
    through the one route (front end -> Relax integer kernels -> the MCU back end) and return
    the :class:`~tvm_serenity.deploy.CompiledModel`. ``model``: a Relax ``IRModule`` of integer
    kernels (or with float quantize/dequantize patterns ``LowerFakeQuant`` lowers; one the MCU
    passes already planned, ``ArenaPlan(memory_model="mcu")`` last, is compiled as they left
    it: :func:`~tvm_serenity.deploy.compile_module`), a ``.tflite`` or an int8 QDQ ``.onnx``
    file. ``options``: those of :func:`~tvm_serenity.deploy.compile_tflite` (``rip``,
    ``rewrite``, ``schedule``, ...)."""
    import os

    import tvm

    from .. import deploy            # deploy builds on this package: imported when used
    if isinstance(model, tvm.IRModule):
        return deploy.compile_module(model, board, out_dir, **options)
    path = os.fspath(model)
    if path.lower().endswith(".onnx"):
        from ..frontend.onnx_import import from_onnx
        stem = os.path.splitext(os.path.basename(path))[0]
        return deploy.compile_module(from_onnx(path), board, out_dir, name=stem,
                                     front_end="onnx", **options)
    return deploy.compile_tflite(path, board, out_dir, **options)


def run_model(out_dir, **options):
    """Run a directory :func:`build_model` wrote (:func:`tvm_serenity.deploy.run`: on the
    board's emulator, outputs checked against the reference interpreter)."""
    from .. import deploy
    return deploy.run(out_dir, **options)
