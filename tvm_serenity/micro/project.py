"""Project API in microTVM's spirit: generate a self-contained project, build, flash, run.

``generate_project(out_dir, model_c_dir, board)`` copies the emitted model (``model.c``,
``model.h`` and any other headers) and the firmware runtime (package data in
``micro/firmware``) into ``out_dir``, writes the input (``input.c``), a bare-metal ``Makefile``
with its linker scripts, ``serenity_project.json`` (board and build settings) and, for the
Pico boards, a Pico SDK CMake project in ``pico_sdk/`` for real boards (it needs
``PICO_SDK_PATH`` and cannot be built here).

The model contract (TFLite Micro's in spirit, what :mod:`tvm_serenity.codegen.graph_c`
emits): model.h defines ``MODEL_NUM_INPUTS``, ``MODEL_NUM_OUTPUTS``, ``MODEL_INPUT<i>_BYTES``,
``MODEL_OUTPUT<i>_BYTES`` and ``MODEL_ARENA_BYTES`` as integer constant expressions (and, for
users, each tensor's ``_NAME``, ``_TYPE``, ``_SHAPE``, ``_SCALE``, ``_ZERO_POINT``,
``_OFFSET``) and declares ``const uint32_t model_input_bytes[]`` / ``model_output_bytes[]``,
``void *model_input(int i)``, ``void *model_output(int i)`` and ``void model_run(void)``;
model.c has a file-local ``static uint8_t arena[MODEL_ARENA_BYTES]`` (the harness reaches it
through arena_probe.c). Inputs and outputs live in that arena: the harness (main.c) writes
input ``i`` at ``model_input(i)`` and reads the outputs in place, so the image holds no I/O
buffer besides the arena. ``input.c`` holds the run's input bytes as constants
(``serenity_inputs[i]``: flash on a device image, the stimulus rather than a buffer).

``build`` compiles (micro/builder.py), ``flash`` copies a UF2 to the board's BOOTSEL drive or
uses ``picotool``, ``run`` reads a real board over USB serial when one is connected and
otherwise runs the emulator (rp2040js for pico, QEMU for pico2, the executable for host).
"""

from __future__ import annotations

import ast
import json
import operator
import random
import re
import shlex
import shutil
import subprocess
from pathlib import Path

from ..errors import SerenityError
from ..builddir import absolute
from ..files import read_json
from ..text import counted
from .boards import Board, get_board
from .builder import (ARM_INSTALL_HINT, ARM_PREFIX, DEFAULT_STACK_RESERVE, Firmware,
                      build_firmware, build_plan, linker_script, variant_name)
from .runners import RunResult, find_board_port, run_host, run_qemu, run_rp2040js, run_serial

__all__ = ["PROJECT_FILE", "generate_project", "load_project", "build", "flash", "run",
           "find_uf2_drive", "read_model_sizes"]

PROJECT_FILE = "serenity_project.json"
FIRMWARE_DIR = Path(__file__).with_name("firmware")
RUNTIME_FILES = ("main.c", "serenity_port.h", "arena_probe.c", "port_arm.c", "port_host.c",
                 "startup.c", "image.ld")
SDK_DIR = "pico_sdk"
SDK_UF2 = f"{SDK_DIR}/build/serenity_model.uf2"
_C_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
          ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
          ast.LShift: operator.lshift, ast.RShift: operator.rshift}


def _c_integer(expr: str, defines: dict[str, str], depth: int = 0) -> int:
    """Value of a C integer constant expression made of literals, + - * / % << >>,
    parentheses and other object-like macros of the same header."""
    expr = re.sub(r"/\*.*?\*/|//.*", "", expr)
    expr = re.sub(r"\b(0[xX][0-9a-fA-F]+|\d+)[uUlL]*\b", r"\1", expr)
    expr = re.sub(r"\(\s*(?:unsigned|signed|int|long|size_t|u?int\d+_t|\s)+\)", "", expr)
    if depth > 16:
        raise ValueError("macro nesting too deep")

    def value(node: ast.AST) -> int:
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name) and node.id in defines:
            return _c_integer(defines[node.id], defines, depth + 1)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            v = value(node.operand)
            return -v if isinstance(node.op, ast.USub) else v
        if isinstance(node, ast.BinOp) and type(node.op) in _C_OPS:
            return _C_OPS[type(node.op)](value(node.left), value(node.right))
        raise ValueError(f"unsupported expression {ast.unparse(node)!r}")

    return value(ast.parse(expr.replace("/", "//").strip(), mode="eval").body)


def read_model_sizes(model_h: str | Path) -> dict:
    """The sizes an emitted model.h defines (integer constant expressions):
    ``{"inputs": [MODEL_INPUT<i>_BYTES, ...], "outputs": [...], "arena_bytes": n}``."""
    text = Path(model_h).read_text()
    defines = dict(re.findall(r"^\s*#\s*define\s+(\w+)[ \t]+(.+?)\s*$", text, re.MULTILINE))

    def value(macro: str) -> int:
        if macro not in defines:
            raise SerenityError(f"{model_h} does not #define {macro}")
        try:
            return _c_integer(defines[macro], defines)
        except (ValueError, SyntaxError) as e:
            raise SerenityError(f"{model_h}: cannot evaluate {macro} = {defines[macro]!r} "
                                f"({e})") from None

    return {f"{kind.lower()}s": [value(f"MODEL_{kind}{i}_BYTES")
                                 for i in range(value(f"MODEL_NUM_{kind}S"))]
            for kind in ("INPUT", "OUTPUT")} | {"arena_bytes": value("MODEL_ARENA_BYTES")}


def _input_c(inputs: list[bytes]) -> str:
    arrays = []
    for k, data in enumerate(inputs):
        rows = [", ".join(f"{b:3d}" for b in data[i:i + 20]) for i in range(0, len(data), 20)]
        body = ",\n    ".join(rows)
        arrays.append(f"static const uint8_t input{k}[MODEL_INPUT{k}_BYTES] = {{\n    {body}"
                      "\n};\n")
    names = ", ".join(f"input{k}" for k in range(len(inputs)))
    return ("/* Model inputs for this run; generated by tvm_serenity.micro. */\n"
            '#include "model.h"\n\n' + "".join(arrays) +
            f"const uint8_t *const serenity_inputs[MODEL_NUM_INPUTS] = {{{names}}};\n")


def _makefile(board: Board, emulate: bool, stack_reserve: int) -> tuple[str, dict[str, str]]:
    """The bare-metal Makefile and the linker scripts it uses, from builder.build_plan."""
    variants = [("HOST", get_board("host"), False, None)]
    scripts = {}
    if not board.is_host:
        for emu, var in ((True, "EMULATOR"), (False, "DEVICE")):
            script = f"{variant_name(board, emu)}.ld"
            scripts[script] = linker_script(board, emulate=emu, stack_reserve=stack_reserve)
            variants.append((var, board, emu, script))
    default = "host" if board.is_host else ("emulator" if emulate else "device")
    lines = [
        f"# Bare-metal build of this tvm-serenity project for {board.name} ({board.chip}),",
        "# generated by tvm_serenity.micro from the same build plan as its Python build.",
        "#   make emulator  image for this machine's emulator (BKPT markers / semihosting)",
        "#   make device    image and UF2 for a real board",
        "#   make host      the same harness compiled natively, for comparisons",
        f"# Arm builds need: {ARM_INSTALL_HINT}. The UF2 step runs",
        "# tvm_serenity. The linker refuses an image that does not fit SRAM; the Python build",
        "# (tvm_serenity.micro.build) also itemises the overflow.",
        "PYTHON ?= python3",
        "DEPS := $(wildcard *.c *.h)",
        "",
        ".PHONY: all emulator device host clean",
        f"all: {default}",
    ]
    for var, target_board, emu, script in variants:
        plan = build_plan(target_board, emulate=emu, linker_script_path=script)
        objs = " ".join(plan.object_path(s) for s in plan.sources)
        goal = f"{plan.out_dir}/firmware.uf2" if var == "DEVICE" else plan.output
        lines += ["", f"{var}_CC := {plan.cc}", f"{var}_CFLAGS := {shlex.join(plan.cflags)}",
                  f"{var}_LDFLAGS := {shlex.join(plan.ldflags)}", f"{var}_OBJS := {objs}",
                  f"{var.lower()}: {goal}",
                  f"{plan.out_dir}/%.o: %.c $(DEPS)",
                  "\t@mkdir -p $(@D)",
                  f"\t$({var}_CC) $({var}_CFLAGS) -I. -c $< -o $@",
                  f"{plan.output}: $({var}_OBJS){' image.ld ' + script if script else ''}",
                  f"\t$({var}_CC) $({var}_CFLAGS) $({var}_OBJS) $({var}_LDFLAGS) -o $@"]
        if script:
            lines.append(f"\t{ARM_PREFIX}objcopy -O binary $@ {plan.out_dir}/firmware.bin")
        if var == "DEVICE":
            lines += [f"{goal}: {plan.output}",
                      "\t$(PYTHON) -m tvm_serenity.micro uf2 $< $@ "
                      f"--family {board.uf2_family:#010x}"]
    lines += ["", "clean:", "\trm -rf build", ""]
    return "\n".join(line.rstrip() for line in lines), scripts


def _write_pico_sdk(out: Path, board: Board) -> None:
    sdk = out / SDK_DIR
    sdk.mkdir(exist_ok=True)
    template = (FIRMWARE_DIR / SDK_DIR / "CMakeLists.txt.in").read_text()
    for key, value in (("BOARD", board.name), ("CHIP", board.chip),
                       ("PICO_BOARD", board.pico_board), ("PICO_PLATFORM", board.pico_platform)):
        template = template.replace(f"@{key}@", value)
    (sdk / "CMakeLists.txt").write_text(template)
    for name in ("pico_sdk_import.cmake", "port_pico_sdk.c"):
        shutil.copyfile(FIRMWARE_DIR / SDK_DIR / name, sdk / name)


def generate_project(out_dir: str | Path, model_c_dir: str | Path, board: str | Board, *,
                     emulate: bool = True, input_data: bytes | list[bytes] | None = None,
                     seed: int = 0, stack_reserve: int = DEFAULT_STACK_RESERVE,
                     scratch_bytes: int = 0) -> Path:
    """Write a self-contained project for ``board`` into ``out_dir`` and return its path.
    ``input_data``: the bytes of each input (a list, in the model's order; plain bytes for a
    one-input model); default: pseudo-random bytes drawn with ``seed``."""
    board = get_board(board)
    src, out = absolute(model_c_dir), absolute(out_dir)
    for name in ("model.c", "model.h"):
        if not (src / name).is_file():
            raise SerenityError(f"model directory '{src}' has no {name}")
    extra_c = sorted(p.name for p in src.glob("*.c") if p.name != "model.c")
    if extra_c:
        raise SerenityError(f"model directory '{src}' holds {', '.join(extra_c)}: the model "
                            "must be one model.c (plus headers)")
    sizes = read_model_sizes(src / "model.h")
    n_in = sizes["inputs"]
    if input_data is None:
        rng = random.Random(seed)
        input_data = [rng.randbytes(n) for n in n_in]
    elif isinstance(input_data, (bytes, bytearray)):
        input_data = [bytes(input_data)]
    if len(input_data) != len(n_in):
        raise SerenityError(f"input_data has {counted(len(input_data), 'input')}, the model "
                            f"takes {len(n_in)}")
    for k, (data, n) in enumerate(zip(input_data, n_in)):
        if len(data) != n:
            raise SerenityError(f"input_data[{k}] has {counted(len(data), 'byte')}, input {k} "
                                f"of the model takes {n:,}")

    out.mkdir(parents=True, exist_ok=True)
    for path in [src / "model.c", *sorted(src.glob("*.h"))]:
        shutil.copyfile(path, out / path.name)
    for name in RUNTIME_FILES:
        shutil.copyfile(FIRMWARE_DIR / name, out / name)
    (out / "input.c").write_text(_input_c(input_data))
    makefile, scripts = _makefile(board, emulate, stack_reserve)
    (out / "Makefile").write_text(makefile)
    for name, text in scripts.items():
        (out / name).write_text(text)
    if not board.is_host:
        _write_pico_sdk(out, board)
    meta = {"board": board.name, "emulate": emulate, "stack_reserve": stack_reserve,
            "scratch_bytes": scratch_bytes, "model": sizes}
    (out / PROJECT_FILE).write_text(json.dumps(meta, indent=2) + "\n")
    return out


def load_project(project_dir: str | Path) -> dict:
    return read_json(Path(project_dir) / PROJECT_FILE,
                     f"'{project_dir}' is not a generated project (no {PROJECT_FILE}); "
                     "create it with generate_project")


def build(project_dir: str | Path, *, emulate: bool | None = None) -> Firmware:
    """Build the project's board image (emulator or device variant; default: the project's
    ``emulate`` setting), checking that it fits the board's SRAM."""
    meta = load_project(project_dir)
    return build_firmware(absolute(project_dir), meta["board"],
                          emulate=meta["emulate"] if emulate is None else emulate,
                          stack_reserve=meta["stack_reserve"],
                          scratch_bytes=meta["scratch_bytes"])


def find_uf2_drive(board: str | Board) -> Path | None:
    """A mounted BOOTSEL drive of ``board`` (labelled RPI-RP2 for the Pico, RP2350 for the
    Pico 2), or None."""
    label = get_board(board).bootsel_label
    for pattern in (f"media/*/{label}", f"media/{label}", f"run/media/*/{label}",
                    f"mnt/{label}", f"Volumes/{label}"):
        for path in sorted(Path("/").glob(pattern)):
            if (path / "INFO_UF2.TXT").is_file():
                return path
    return None


def flash(project_dir: str | Path, mount_point: str | Path | None = None) -> Path:
    """Put the project on a board in BOOTSEL mode and return the UF2 used: the Pico SDK
    build's ``pico_sdk/build/serenity_model.uf2`` when it exists (its report goes over USB,
    which :func:`run` reads), else the bare-metal device UF2 (report on UART0/GP0 at 115200
    for the Pico; kept in ``serenity_result`` for a debugger on the Pico 2). Copies it to
    ``mount_point`` or a mounted BOOTSEL drive, else uses ``picotool load`` if installed."""
    project = absolute(project_dir)
    board = get_board(load_project(project)["board"])
    if board.is_host:
        raise SerenityError("the host board has nothing to flash")
    uf2 = project / SDK_UF2
    if not uf2.is_file():
        uf2 = build(project, emulate=False).uf2
    drive = Path(mount_point) if mount_point is not None else find_uf2_drive(board)
    if drive is not None:
        info = drive / "INFO_UF2.TXT"
        if not info.is_file():
            raise SerenityError(f"'{drive}' is not a UF2 bootloader drive (no INFO_UF2.TXT)")
        text = info.read_text(errors="replace")
        if f"Board-ID: {board.bootsel_label}" not in text:
            raise SerenityError(f"the drive at '{drive}' is not an {board.chip} bootloader "
                                f"(its INFO_UF2.TXT says {text.strip()!r})")
        shutil.copyfile(uf2, drive / uf2.name)
        return uf2
    picotool = shutil.which("picotool")
    if picotool is None:
        raise SerenityError(
            f"no {board.chip} board found: hold BOOTSEL while plugging it in so its "
            f"{board.bootsel_label} drive mounts (or pass mount_point=...), or install picotool")
    proc = subprocess.run([picotool, "load", "-f", "-x", str(uf2)], capture_output=True,
                          text=True)
    if proc.returncode:
        raise SerenityError(f"picotool load failed: {(proc.stderr or proc.stdout).strip()}")
    return uf2


def run(project_dir: str | Path, emulate: bool | None = None, *,
        timeout: float = 60.0) -> RunResult:
    """Run the project and return its measurements. ``emulate=None``: a connected board
    running the Pico SDK build (found over USB serial with pyserial) if there is one, else
    the emulator; ``True``: always the emulator; ``False``: the board or an error. The
    emulator image is rebuilt first (about a second), so it always matches the sources."""
    project = absolute(project_dir)
    board = get_board(load_project(project)["board"])
    if board.is_host:
        return run_host(build(project), timeout=timeout)
    if emulate is not True:
        port = find_board_port()
        if port is not None:
            return run_serial(port, board, timeout=timeout)
        if emulate is False:
            raise SerenityError(f"no {board.chip} board on USB serial (needs pyserial, and the "
                                "Pico SDK build flashed: see pico_sdk/CMakeLists.txt)")
    firmware = build(project, emulate=True)
    if board.emulator == "rp2040js":
        return run_rp2040js(firmware, timeout=timeout)
    return run_qemu(firmware, board, timeout=timeout)
