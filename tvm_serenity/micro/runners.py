"""Run built firmware and read back the harness report (firmware/main.c).

Backends, each returning a :class:`RunResult`:

* :func:`run_host` -- the native executable; ``host_ns`` is wall time of model_run.
* :func:`run_rp2040js` -- the Pico in rp2040js (``rp2040js_runner.mjs`` under node). Report on
  the emulated UART0. ``cycles`` is rp2040js's per-instruction Cortex-M0+ cycle model read at
  the BKPT markers around model_run: it ignores XIP flash wait states, bus contention and
  exception entry, so quote it as emulated cycles (good for ratios). ``instructions`` is the
  number of instructions executed between the markers. A device image (no markers) is booted
  the way the bootrom enters a RAM-only UF2 and ``cycles`` is then its SysTick count.
* :func:`run_qemu` -- the Pico 2 proxy ``qemu-system-arm -M mps2-an505``, report over
  semihosting (QEMU 7.2 writes it to stderr). QEMU models no cycles (DWT CYCCNT reads 0); with
  ``-icount shift=N`` every instruction advances virtual time by 2**N ns and the AN505's
  SysTick runs at 20 MHz, so the harness's SysTick count converts exactly to
  ``instructions = ticks * 50 / 2**N`` (N = 6 gives sub-instruction resolution; verified
  against a counted loop, about 40 instructions of measuring overhead included).
* :func:`run_serial` -- a real board running the Pico SDK project, over USB serial
  (pyserial, optional); ``cycles`` is SysTick at the CPU clock.

The report is checked: the outputs (``output0=``, ``output1=``, ... one line each, as many as
``outputs=`` says), their total length and their FNV-1a checksum must match what the firmware
says, so a garbled console never passes as a result.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ..errors import SerenityError
from .boards import Board, get_board
from .builder import Firmware, require_tool
from .elf import Segment, read_elf
from .uf2 import decode_uf2

__all__ = ["RunResult", "parse_report", "fnv1a32", "find_rp2040js", "run_host",
           "run_rp2040js", "run_qemu", "run_serial", "find_board_port",
           "RP2040JS_VERSION", "QEMU_ICOUNT_SHIFT"]

RP2040JS_VERSION = "1.4.1"
QEMU_ICOUNT_SHIFT = 6
REPORT_BEGIN = "SERENITY-BEGIN"
REPORT_END = "SERENITY-END"
FAULT = "SERENITY-FAULT"
RASPBERRY_PI_USB_VID = 0x2E8A
_RUNNER = Path(__file__).with_name("rp2040js_runner.mjs")
_FLASH_BASE = 0x1000_0000
_SRAM_BASE = 0x2000_0000


@dataclass(frozen=True)
class RunResult:
    board: str
    backend: str                   # "host", "rp2040js", "qemu" or "serial"
    outputs: tuple[bytes, ...]     # each model output's bytes, in the model's order
    checksum: int
    cycles: int | None             # see the module docstring for what each backend counts
    instructions: int | None
    host_ns: int | None
    stack_high_water: int | None
    stack_reserve: int | None
    arena_bytes: int
    arena_touched: int
    wall_seconds: float
    counter_note: str

    @property
    def output(self) -> bytes:
        """All output bytes in order (the only output's, for a one-output model)."""
        return b"".join(self.outputs)

    def to_json(self) -> dict:
        d = asdict(self)
        d["outputs"] = [o.hex() for o in self.outputs]
        d["output"] = self.output.hex()
        d["checksum"] = f"{self.checksum:#010x}"
        return d


def fnv1a32(data: bytes) -> int:
    h = 0x811C9DC5
    for b in data:
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h


def parse_report(text: str, where: str) -> dict:
    """The key=value fields between SERENITY-BEGIN and SERENITY-END, validated."""
    if FAULT in text:
        raise SerenityError(f"{where}: the firmware took a fault exception (console: "
                            f"{text.strip()[-300:]!r})")
    start = text.find(REPORT_BEGIN)
    end = text.find(REPORT_END, start)
    if start < 0 or end < 0:
        raise SerenityError(f"{where}: no complete {REPORT_BEGIN}..{REPORT_END} report in the "
                            f"console output {text.strip()[-300:]!r}")
    fields = {}
    for line in text[start + len(REPORT_BEGIN):end].split():
        key, _, value = line.partition("=")
        fields[key] = value
    try:
        outputs = tuple(bytes.fromhex(fields[f"output{k}"])
                        for k in range(int(fields["outputs"])))
        checksum = int(fields["checksum"], 16)
        declared = int(fields["output_bytes"])
    except (KeyError, ValueError) as e:
        raise SerenityError(f"{where}: malformed report ({e})") from None
    output = b"".join(outputs)
    if len(output) != declared or fnv1a32(output) != checksum:
        raise SerenityError(f"{where}: report garbled: {len(output)} output bytes for "
                            f"{declared} declared, checksum {fnv1a32(output):#010x} for "
                            f"{checksum:#010x} declared")
    fields["outputs"], fields["checksum"] = outputs, checksum
    for key in ("ticks", "stack_high_water", "stack_reserve", "arena_bytes", "arena_touched"):
        if key in fields:
            fields[key] = int(fields[key])
    return fields


def _result(board: Board, backend: str, report: dict, wall: float, note: str, *,
            cycles: int | None = None, instructions: int | None = None,
            host_ns: int | None = None) -> RunResult:
    return RunResult(board=board.name, backend=backend, outputs=report["outputs"],
                     checksum=report["checksum"], cycles=cycles, instructions=instructions,
                     host_ns=host_ns, stack_high_water=report.get("stack_high_water"),
                     stack_reserve=report.get("stack_reserve"),
                     arena_bytes=report["arena_bytes"], arena_touched=report["arena_touched"],
                     wall_seconds=wall, counter_note=note)


def _firmware_elf(image: Firmware | str | Path) -> Path:
    return image.elf if isinstance(image, Firmware) else Path(image)


def run_host(executable: Firmware | str | Path, *, timeout: float = 60.0) -> RunResult:
    exe = _firmware_elf(executable)
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise SerenityError(f"host run of '{exe}' timed out after {timeout:g} s") from None
    except OSError as e:
        raise SerenityError(f"cannot run '{exe}': {e.strerror}") from None
    wall = time.perf_counter() - t0
    report = parse_report(proc.stdout, f"host run of '{exe}'")
    if proc.returncode:
        raise SerenityError(f"host run of '{exe}' exited with status {proc.returncode}")
    return _result(get_board("host"), "host", report, wall,
                   "host_ns: wall-clock nanoseconds of model_run on this machine",
                   host_ns=report["ticks"])


def find_rp2040js() -> Path:
    """The rp2040js npm package directory: ``$TVM_SERENITY_NODE_MODULES/rp2040js``, else
    ``node_modules/rp2040js`` in the current directory or a parent of this package (the
    repository root after ``npm ci``)."""
    roots = []
    if os.environ.get("TVM_SERENITY_NODE_MODULES"):
        roots.append(Path(os.environ["TVM_SERENITY_NODE_MODULES"]))
    roots += [p / "node_modules" for p in (Path.cwd(), *Path(__file__).resolve().parents)]
    for root in roots:
        package = root / "rp2040js" / "package.json"
        if package.is_file():
            version = json.loads(package.read_text()).get("version")
            if version != RP2040JS_VERSION:
                raise SerenityError(f"{package.parent} is rp2040js {version}, the project pins "
                                    f"{RP2040JS_VERSION}: run `npm ci` at the repository root")
            return package.parent
    raise SerenityError("rp2040js is not installed: run `npm ci` at the repository root "
                        f"(package.json pins rp2040js@{RP2040JS_VERSION}) or point "
                        "$TVM_SERENITY_NODE_MODULES at a node_modules directory holding it")


def _image_segments(image: Firmware | str | Path) -> list[Segment]:
    path = _firmware_elf(image)
    if path.suffix == ".uf2":
        try:
            raw = path.read_bytes()
        except OSError as e:
            raise SerenityError(f"cannot read '{path}': {e.strerror}") from None
        return [Segment(b.target_address, b.payload) for b in decode_uf2(raw)]
    return read_elf(path).segments


def run_rp2040js(image: Firmware | str | Path, *, timeout: float = 60.0,
                 max_cycles: int | None = None) -> RunResult:
    """Run a Pico image (a :class:`Firmware`, an ELF, or a RAM-only UF2) in rp2040js."""
    node = require_tool("node", "install Node.js 18+ (apt-get install nodejs npm)")
    segments = _image_segments(image)
    if not segments:
        raise SerenityError(f"'{_firmware_elf(image)}' has nothing to load")
    base = segments[0].address
    if _FLASH_BASE <= base < _SRAM_BASE:
        boot = {"vtor": base, "entry": None}
    else:
        boot = {"vtor": None, "entry": base}
    with tempfile.TemporaryDirectory(prefix="serenity-rp2040js-") as tmp:
        files = []
        for i, seg in enumerate(segments):
            f = Path(tmp) / f"segment{i}.bin"
            f.write_bytes(seg.data)
            files.append({"address": seg.address, "file": str(f)})
        config = {"rp2040js": str(find_rp2040js()), "segments": files, **boot,
                  "timeout_s": timeout, "max_cycles": max_cycles}
        try:
            proc = subprocess.run([node, str(_RUNNER), json.dumps(config)], capture_output=True,
                                  text=True, timeout=timeout + 30)
        except subprocess.TimeoutExpired:
            raise SerenityError(f"rp2040js did not return within {timeout + 30:g} s") from None
    where = f"rp2040js run of '{_firmware_elf(image)}'"
    if proc.returncode:
        raise SerenityError(f"{where} failed:\n{proc.stderr.strip()[-2000:]}")
    raw = json.loads(proc.stdout)
    if raw["stop"] not in ("halt", "report_end"):
        raise SerenityError(f"{where} stopped by {raw['stop']} after {raw['total_cycles']:,} "
                            f"cycles at pc={raw['pc']:#x} ({'; '.join(raw['warnings'][:5])}); "
                            f"console: {raw['uart'].strip()[-300:]!r}")
    if raw["status"]:
        raise SerenityError(f"{where} halted with status {raw['status']}: {raw['uart'][-300:]!r}")
    report = parse_report(raw["uart"], where)
    board = get_board("pico")
    if raw["cycles"] is not None:
        return _result(board, "rp2040js", report, raw["wall_seconds"],
                       "cycles: rp2040js Cortex-M0+ per-instruction cycle model between BKPT "
                       "markers around model_run (no XIP wait states, bus contention or "
                       "exception entry costs)",
                       cycles=raw["cycles"], instructions=raw["instructions"])
    return _result(board, "rp2040js", report, raw["wall_seconds"],
                   "cycles: SysTick (processor clock) in rp2040js around model_run, "
                   "Cortex-M0+ per-instruction cycle model without XIP wait states",
                   cycles=report["ticks"])


def run_qemu(elf: Firmware | str | Path, board: str | Board = "pico2", *,
             timeout: float = 60.0, icount_shift: int = QEMU_ICOUNT_SHIFT) -> RunResult:
    """Run an emulator image of ``board`` (pico2: ``-M mps2-an505``) under QEMU."""
    board = get_board(board)
    if board.qemu_machine is None:
        raise SerenityError(f"board '{board.name}' has no QEMU machine (use rp2040js for pico)")
    qemu = require_tool("qemu-system-arm", "apt-get install qemu-system-arm")
    path = _firmware_elf(elf)
    cmd = [qemu, "-M", board.qemu_machine, "-nographic", "-monitor", "none", "-serial", "none",
           "-semihosting-config", "enable=on,target=native", "-icount",
           f"shift={icount_shift}", "-kernel", str(path)]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise SerenityError(f"QEMU run of '{path}' timed out after {timeout:g} s") from None
    wall = time.perf_counter() - t0
    where = f"QEMU ({board.qemu_machine}) run of '{path}'"
    report = parse_report(proc.stderr + proc.stdout, where)
    if proc.returncode:
        raise SerenityError(f"{where} exited with status {proc.returncode}")
    ns_per_tick = 1e9 / board.qemu_systick_hz
    instructions = round(report["ticks"] * ns_per_tick / 2 ** icount_shift)
    return _result(board, "qemu", report, wall,
                   f"instructions: QEMU -icount shift={icount_shift} count around model_run "
                   "(SysTick-derived, ~40 instructions of measuring overhead); QEMU models no "
                   "cycles", instructions=instructions)


def find_board_port() -> str | None:
    """The serial device of a connected Raspberry Pi board (USB VID 0x2E8A), or None when
    there is none or pyserial is not installed."""
    try:
        from serial.tools import list_ports
    except ImportError:
        return None
    return next((p.device for p in list_ports.comports() if p.vid == RASPBERRY_PI_USB_VID),
                None)


def run_serial(port: str, board: str | Board, *, timeout: float = 60.0) -> RunResult:
    """Read the report of the Pico SDK firmware over USB serial (opening the port starts
    the measurement)."""
    board = get_board(board)
    try:
        import serial
    except ImportError:
        raise SerenityError("reading a board needs pyserial: pip install pyserial") from None
    text, t0 = "", time.perf_counter()
    try:
        with serial.Serial(port, 115200, timeout=0.5) as conn:
            while REPORT_END not in text and FAULT not in text:
                if time.perf_counter() - t0 > timeout:
                    raise SerenityError(f"no complete report from {port} within {timeout:g} s "
                                        f"(got {text[-300:]!r})")
                text += conn.read(4096).decode("ascii", "replace")
    except serial.SerialException as e:
        raise SerenityError(f"serial port {port}: {e}") from None
    report = parse_report(text, f"{board.name} on {port}")
    return _result(board, "serial", report, time.perf_counter() - t0,
                   f"cycles: SysTick at the {board.chip} CPU clock around model_run",
                   cycles=report["ticks"])
