"""Pico / Pico 2 deployment layer: board registry, UF2, fit check, generated projects, and
the same stand-in model (tests/micro_fixture: int8 3x3 conv + requantisation) run natively,
in rp2040js and in QEMU with byte-identical outputs. Tests needing the Arm toolchain, QEMU
or rp2040js (`npm ci`) skip with the reason when those are missing."""

import random
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from tvm_serenity import SerenityError, micro
from tvm_serenity.micro import project as micro_project
from tvm_serenity.micro.boards import UF2_FAMILY_RP2040, UF2_FAMILY_RP2350_ARM_S
from tvm_serenity.micro.elf import Segment, read_elf
from tvm_serenity.micro.project import read_model_sizes
from tvm_serenity.micro.runners import fnv1a32, parse_report
from toolchain import needs_arm, needs_cc, needs_qemu, needs_rp2040js
from tvm_serenity.micro.uf2 import (BLOCK_SIZE, FLAG_FAMILY_ID_PRESENT, MAGIC_END,
                                    MAGIC_START0, MAGIC_START1, PAYLOAD_SIZE)

FIXTURE = Path(__file__).parent / "micro_fixture"
FIRMWARE = Path(micro_project.__file__).with_name("firmware")


def _write_model(directory: Path, arena: str, body: str, n_in: int = 16,
                 n_out: int = 16) -> Path:
    """A one-input model: the input at arena[0], the output right after it; ``body`` is
    model_run's, with ``in`` and ``out`` pointing there."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "model.h").write_text(
        "#include <stdint.h>\n#define MODEL_NUM_INPUTS 1\n#define MODEL_NUM_OUTPUTS 1\n"
        f"#define MODEL_INPUT0_BYTES {n_in}\n#define MODEL_OUTPUT0_BYTES {n_out}\n"
        f"#define MODEL_ARENA_BYTES {arena}\n"
        "extern const uint32_t model_input_bytes[1];\n"
        "extern const uint32_t model_output_bytes[1];\n"
        "void *model_input(int i);\nvoid *model_output(int i);\nvoid model_run(void);\n")
    (directory / "model.c").write_text(
        '#include "model.h"\nstatic uint8_t arena[MODEL_ARENA_BYTES];\n'
        "const uint32_t model_input_bytes[1] = {MODEL_INPUT0_BYTES};\n"
        "const uint32_t model_output_bytes[1] = {MODEL_OUTPUT0_BYTES};\n"
        "void *model_input(int i) { (void)i; return arena; }\n"
        f"void *model_output(int i) {{ (void)i; return arena + {n_in}; }}\n"
        "void model_run(void) { const int8_t *in = (const int8_t *)arena; "
        f"int8_t *out = (int8_t *)arena + {n_in}; {body} }}\n")
    return directory


@pytest.fixture(scope="module")
def projects(tmp_path_factory):
    root = tmp_path_factory.mktemp("micro")
    return {board: micro.generate_project(root / board, FIXTURE, board)
            for board in ("pico", "pico2")}


# --- registry, UF2, model header: pure Python -------------------------------------------

def test_board_registry():
    pico, pico2 = micro.get_board("pico"), micro.get_board("pico2")
    assert (pico.sram.origin, pico.sram.size) == (0x2000_0000, 264 * 1024)
    assert (pico2.sram.size, pico2.qemu_machine) == (520 * 1024, "mps2-an505")
    assert "-mcpu=cortex-m0plus" in pico.cflags and "-mcpu=cortex-m33" in pico2.cflags
    assert "-mfloat-abi=soft" in pico2.cflags
    assert pico.uf2_family == 0xE48BFF56 and pico2.uf2_family == 0xE48BFF59
    # The Pico's emulator image keeps weights in flash; its UF2 is RAM-only.
    assert pico.layout(True).code.origin == 0x1000_0000 and pico.layout(False).ram_only
    # The Pico 2 emulator image is linked for the AN505 map but keeps the 520 KB budget.
    assert pico2.layout(True).ram.origin == 0x3800_0000
    assert pico2.layout(True).ram.size == pico2.sram.size
    with pytest.raises(SerenityError, match="unknown board 'pico3'"):
        micro.get_board("pico3")


def test_uf2_roundtrip_and_validation():
    segments = [Segment(0x2000_0010, bytes(range(200))), Segment(0x2000_0300, b"\x55" * 300)]
    data = micro.encode_uf2(segments, UF2_FAMILY_RP2040)
    assert len(data) % BLOCK_SIZE == 0
    blocks = micro.decode_uf2(data)
    assert [b.target_address for b in blocks] == [0x2000_0000, 0x2000_0300, 0x2000_0400]
    for n, (b, off) in enumerate(zip(blocks, range(0, len(data), BLOCK_SIZE))):
        m0, m1, flags, _, size, block_no, num_blocks, family = struct.unpack_from("<8I", data, off)
        assert (m0, m1, struct.unpack_from("<I", data, off + 508)[0]) == (
            MAGIC_START0, MAGIC_START1, MAGIC_END)
        assert (flags, size, block_no, num_blocks, family) == (
            FLAG_FAMILY_ID_PRESENT, PAYLOAD_SIZE, n, 3, UF2_FAMILY_RP2040)
        assert data[off + 32 + PAYLOAD_SIZE:off + 508] == bytes(476 - PAYLOAD_SIZE)
    memory = {b.target_address + i: v for b in blocks for i, v in enumerate(b.payload)}
    for seg in segments:
        assert bytes(memory[seg.address + i] for i in range(len(seg.data))) == seg.data
    assert memory[0x2000_0000] == 0 and memory[0x2000_0300 + 300] == 0   # padding
    corrupted = bytearray(data)
    corrupted[BLOCK_SIZE + 3] ^= 0xFF
    with pytest.raises(SerenityError, match="UF2 block at byte 512: bad magic"):
        micro.decode_uf2(bytes(corrupted))
    with pytest.raises(SerenityError, match="not a positive multiple of 512"):
        micro.decode_uf2(data[:-1])


def test_model_sizes_from_header(tmp_path):
    assert read_model_sizes(FIXTURE / "model.h") == {
        "inputs": [2048], "outputs": [4096], "arena_bytes": 6688}
    _write_model(tmp_path, "(ARENA_KB * 1024u) /* aligned */", "", n_in=8)
    (tmp_path / "model.h").write_text((tmp_path / "model.h").read_text()
                                      + "#define ARENA_KB 0x12\n")
    assert read_model_sizes(tmp_path / "model.h") == {
        "inputs": [8], "outputs": [16], "arena_bytes": 18 * 1024}
    (tmp_path / "model.h").write_text("#define MODEL_NUM_INPUTS 2\n#define MODEL_INPUT0_BYTES 4\n")
    with pytest.raises(SerenityError, match="does not #define MODEL_INPUT1_BYTES"):
        read_model_sizes(tmp_path / "model.h")


def test_report_parsing_rejects_garbled_output():
    out, out2 = bytes([1, 2, 250]), bytes([7, 0])
    good = (f"noise\nSERENITY-BEGIN\noutputs=2\noutput0={out.hex()}\noutput1={out2.hex()}\n"
            f"checksum={fnv1a32(out + out2):#010x}\noutput_bytes=5\nticks=10\n"
            "ticks_unit=cpu_clock\narena_bytes=8\narena_touched=3\nSERENITY-END\n")
    fields = parse_report(good, "test")
    assert fields["outputs"] == (out, out2) and fields["ticks"] == 10
    with pytest.raises(SerenityError, match="report garbled"):
        parse_report(good.replace(out.hex(), "0102fb"), "test")
    with pytest.raises(SerenityError, match="report garbled: 3 output bytes for 5"):
        parse_report(good.replace("outputs=2", "outputs=1"), "test")
    with pytest.raises(SerenityError, match="malformed report .*output1"):
        parse_report(good.replace("outputs=2", "outputs=3").replace("output1=", "outputX="),
                     "test")
    with pytest.raises(SerenityError, match="no complete SERENITY-BEGIN"):
        parse_report(good[:40], "test")
    with pytest.raises(SerenityError, match="fault exception"):
        parse_report("SERENITY-FAULT\n", "test")


# --- generated project -------------------------------------------------------------------

def test_generated_project_is_self_contained(projects, tmp_path):
    p = projects["pico"]
    for name in ("model.c", "model.h", "main.c", "startup.c", "port_arm.c", "port_host.c",
                 "arena_probe.c", "serenity_port.h", "image.ld", "input.c", "Makefile",
                 "pico-emulator.ld", "pico-device.ld", "serenity_project.json"):
        assert (p / name).is_file(), name
    meta = micro.load_project(p)
    assert meta["board"] == "pico" and meta["model"] == {
        "inputs": [2048], "outputs": [4096], "arena_bytes": 6688}
    values = re.findall(r"\d+", (p / "input.c").read_text().split("{", 1)[1].split("}")[0])
    assert bytes(int(v) for v in values) == random.Random(0).randbytes(2048)   # seed 0
    ld = (p / "pico-device.ld").read_text()
    assert 'REGION_ALIAS("CODE", RAM)' in ld and "__serenity_stack_reserve = 8192" in ld
    with pytest.raises(SerenityError, match="input_data.0. has 3 bytes, input 0 of the model "
                                            "takes 2,048"):
        micro.generate_project(tmp_path / "x", FIXTURE, "pico", input_data=b"abc")
    with pytest.raises(SerenityError, match="has no model.c"):
        micro.generate_project(tmp_path / "y", tmp_path, "pico")
    with pytest.raises(SerenityError, match="not a generated project"):
        micro.build(tmp_path)


@pytest.mark.parametrize("board, pico_board, platform",
                         [("pico", "pico", "rp2040"), ("pico2", "pico2", "rp2350-arm-s")])
def test_pico_sdk_project_is_complete(projects, board, pico_board, platform):
    sdk = projects[board] / "pico_sdk"
    cmake = (sdk / "CMakeLists.txt").read_text()
    assert "@" not in cmake
    assert f"set(PICO_BOARD {pico_board})" in cmake and f"set(PICO_PLATFORM {platform})" in cmake
    assert cmake.index("pico_sdk_import.cmake") < cmake.index("project(") < cmake.index(
        "pico_sdk_init()")
    for call in ("pico_add_extra_outputs(serenity_model)",
                 "pico_enable_stdio_usb(serenity_model 1)", "pico_stdlib"):
        assert call in cmake
    dirs = {"CMAKE_CURRENT_LIST_DIR": sdk, "SERENITY_PROJECT_DIR": sdk / ".."}
    sources = re.search(r"add_executable\(serenity_model(.*?)\)", cmake, re.S).group(1).split()
    assert len(sources) == 4
    for src in sources:
        var, rel = re.fullmatch(r"\$\{(\w+)\}/(.+)", src).groups()
        assert (dirs[var] / rel).is_file(), src
    assert "${CMAKE_CURRENT_LIST_DIR}/pico_sdk_import.cmake" in cmake
    assert "PICO_SDK_PATH" in (sdk / "pico_sdk_import.cmake").read_text()


def test_every_port_implements_the_port_interface(projects):
    declared = set(re.findall(r"\b(serenity_port_\w+)\(", (FIRMWARE / "serenity_port.h")
                              .read_text()))
    assert len(declared) == 8
    for port in ("port_arm.c", "port_host.c", "pico_sdk/port_pico_sdk.c"):
        text = (projects["pico"] / port).read_text()
        defined = set(re.findall(r"^\w[\w\s\*]*?\b(serenity_port_\w+)\([^;]*?\)\s*\{", text,
                                 re.M))
        assert defined == declared, port


def test_run_on_board_without_one_fails_clearly(projects, monkeypatch):
    monkeypatch.setattr(micro_project, "find_board_port", lambda: None)
    with pytest.raises(SerenityError, match="no RP2040 board on USB serial"):
        micro.run(projects["pico"], emulate=False)


def test_flash_copies_the_sdk_uf2_to_the_bootsel_drive(projects, tmp_path, monkeypatch):
    monkeypatch.setattr(micro_project, "build", lambda *a, **k: pytest.fail("rebuilt"))
    for board in ("pico", "pico2"):
        uf2 = projects[board] / micro_project.SDK_UF2
        uf2.parent.mkdir(parents=True, exist_ok=True)
        uf2.write_bytes(b"sdk-uf2")
    try:
        drive = tmp_path / "RPI-RP2"
        drive.mkdir()
        with pytest.raises(SerenityError, match="not a UF2 bootloader drive"):
            micro.flash(projects["pico"], mount_point=drive)
        (drive / "INFO_UF2.TXT").write_text("UF2 Bootloader v3.0\nModel: Raspberry Pi RP2\n"
                                            "Board-ID: RPI-RP2\n")
        assert micro.flash(projects["pico"], mount_point=drive).name == "serenity_model.uf2"
        assert (drive / "serenity_model.uf2").read_bytes() == b"sdk-uf2"
        with pytest.raises(SerenityError, match="not an RP2350 bootloader"):
            micro.flash(projects["pico2"], mount_point=drive)
        monkeypatch.setattr(micro_project, "find_uf2_drive", lambda board: None)
        monkeypatch.setattr(micro_project.shutil, "which", lambda name: None)
        with pytest.raises(SerenityError, match="hold BOOTSEL .* RP2350 drive mounts"):
            micro.flash(projects["pico2"])
    finally:
        for board in ("pico", "pico2"):
            shutil.rmtree(projects[board] / "pico_sdk" / "build")


# --- builds ---------------------------------------------------------------------------

@needs_arm
def test_pico_device_uf2_is_a_bootable_ram_image(projects):
    fw = micro.build(projects["pico"], emulate=False)
    blocks = micro.decode_uf2(fw.uf2.read_bytes())
    assert {b.family_id for b in blocks} == {UF2_FAMILY_RP2040}
    addrs = [b.target_address for b in blocks]
    assert addrs[0] == 0x2000_0000 and addrs == sorted(addrs)
    assert all(a % 256 == 0 and 0x2000_0000 <= a < 0x2004_2000 for a in addrs)
    image = b"".join(b.payload for b in blocks)
    assert image[:len(fw.bin.read_bytes())] == fw.bin.read_bytes()
    # Entry stub at the lowest address (where the bootrom jumps), vectors at +0x100.
    vectors = read_elf(fw.elf).symbols["serenity_vectors"]
    assert read_elf(fw.elf).symbols["serenity_ram_entry"].address & ~1 == 0x2000_0000
    assert vectors.address == 0x2000_0100
    sp, reset = struct.unpack_from("<II", image, 0x100)
    assert sp == 0x2004_2000 and reset & 1 and 0x2000_0000 < reset < 0x2004_2000
    assert fw.fit.part("code+constants in SRAM") > 2048 + 1152   # input + weights in SRAM


@needs_arm
def test_pico2_device_uf2_targets_flash_with_image_def(projects):
    fw = micro.build(projects["pico2"], emulate=False)
    blocks = micro.decode_uf2(fw.uf2.read_bytes())
    assert {b.family_id for b in blocks} == {UF2_FAMILY_RP2350_ARM_S}
    assert blocks[0].target_address == 0x1000_0000
    assert all(0x1000_0000 <= b.target_address < 0x1040_0000 for b in blocks)
    head = blocks[0].payload
    sp, reset = struct.unpack_from("<II", head, 0)
    assert sp == 0x2008_2000 and reset & 1 and 0x1000_0000 < reset < 0x1040_0000
    start = head.index(struct.pack("<I", 0xFFFFDED3))
    assert head[start:start + 20] == struct.pack("<5I", 0xFFFFDED3, 0x10210142, 0x1FF, 0,
                                                 0xAB123579)
    assert fw.fit.part("code+constants in SRAM") == 0   # weights stay in flash


@needs_arm
def test_fit_check_refuses_300kb_arena_on_pico(tmp_path):
    model = _write_model(tmp_path / "big", "(300u * 1024u)",
                         "for (int i = 0; i < 16; i++) { arena[i * 19000] = (uint8_t)in[i];"
                         " out[i] = (int8_t)arena[i * 19000]; }")
    project = micro.generate_project(tmp_path / "p", model, "pico")
    for emulate in (True, False):
        with pytest.raises(SerenityError) as err:
            micro.build(project, emulate=emulate)
        msg = str(err.value)
        assert "model does not fit: pico (RP2040) SRAM: arena 307,200 B" in msg
        assert "stack reserve 8,192 B" in msg and "of 270,336 B (264 KiB): over by" in msg
        over = int(re.search(r"over by ([\d,]+) B", msg).group(1).replace(",", ""))
        assert over > 307_200 + 8192 - 270_336 and "\n" not in msg
    fw = micro.build_firmware(project, "pico2")   # 520 KB: fits
    assert fw.fit.fits and fw.fit.part("arena") == 307_200
    with pytest.raises(SerenityError, match="scratch 300,000 B .* over by"):
        micro.build_firmware(project, "pico2", scratch_bytes=300_000)


@needs_arm
def test_fit_refusal_names_sram_and_flash_at_once(tmp_path):
    """3 MiB of weights (over the Pico's 2 MiB flash) and a 300 KiB arena (over its SRAM):
    one line names both overflows, each matching the linker's own figure; with the arena
    small, the flash overflow alone is refused the same way."""
    weights = ("static const uint8_t weights[3u << 20] = {1}; "
               "arena[0] = weights[in[0] & 0xFF]; out[0] = (int8_t)arena[0];")
    for arena, sram_over in (("(300u * 1024u)", True), ("64", False)):
        model = _write_model(tmp_path / f"w{sram_over}", arena, weights)
        project = micro.generate_project(tmp_path / f"p{sram_over}", model, "pico")
        with pytest.raises(micro.DoesNotFitError) as err:
            micro.build(project, emulate=True)
        msg = str(err.value)
        assert msg.startswith("model does not fit: pico (RP2040) SRAM: arena ") and "\n" not in msg
        flash = re.search(r"flash: code, weights and constants ([\d,]+) B of 2,097,152 B "
                          r"\(2048 KiB\): over by ([\d,]+) B", msg)
        used, over = (int(g.replace(",", "")) for g in flash.groups())
        assert used - over == 2 << 20 and 3 << 20 < used < (3 << 20) + 65536
        assert ("SRAM" in msg.split("; flash")[0]) and (
            ("over by" in msg.split("; flash")[0]) == sram_over)
        link = subprocess.run(micro.build_plan("pico", emulate=True).link_command(),
                              cwd=project, capture_output=True, text=True)
        assert f"region `CODE' overflowed by {over} bytes" in link.stderr


@needs_arm
def test_makefile_builds_the_same_images(projects, tmp_path):
    if shutil.which("make") is None:
        pytest.skip("make not installed")
    import subprocess
    import sys
    project = micro.generate_project(tmp_path / "p", FIXTURE, "pico2")
    py = {e: micro.build(project, emulate=e).bin.read_bytes() for e in (True, False)}
    uf2 = (project / "build/pico2-device/firmware.uf2").read_bytes()
    shutil.rmtree(project / "build")
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"}
    subprocess.run(["make", "-s", "emulator", "device", f"PYTHON={sys.executable}"],
                   cwd=project, check=True, capture_output=True, env=env)
    assert (project / "build/pico2-emulator/firmware.bin").read_bytes() == py[True]
    assert (project / "build/pico2-device/firmware.bin").read_bytes() == py[False]
    assert (project / "build/pico2-device/firmware.uf2").read_bytes() == uf2


def test_build_names_missing_toolchain(projects, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(SerenityError, match="'arm-none-eabi-gcc' not found on PATH: apt-get"):
        micro.build(projects["pico"])


# --- end to end: host vs rp2040js vs QEMU -----------------------------------------------

@pytest.fixture(scope="module")
def host_result(projects):
    if shutil.which("cc") is None:
        pytest.skip("no native C compiler (cc)")
    return micro.run_host(micro.build_firmware(projects["pico"], "host"))


def _check_measurements(result, arena_bytes=6688):
    assert 0 < result.stack_high_water < result.stack_reserve == 8192
    assert 0 < result.arena_touched <= result.arena_bytes == arena_bytes
    assert result.wall_seconds > 0


@needs_cc
def test_host_reference(host_result):
    assert len(host_result.output) == 4096 and len(set(host_result.output)) > 100
    assert host_result.host_ns > 0 and host_result.stack_high_water is None
    assert 6000 < host_result.arena_touched <= 6688


@needs_arm
@needs_rp2040js
@needs_cc
def test_rp2040js_matches_host(projects, host_result):
    result = micro.run(projects["pico"], emulate=True)
    assert result.backend == "rp2040js" and result.output == host_result.output
    assert result.checksum == fnv1a32(host_result.output)
    assert result.arena_touched == host_result.arena_touched
    _check_measurements(result)
    # The naive conv (8 -> 16 channels, 16x16, 3x3) takes millions of M0+ cycles.
    assert 2_000_000 < result.cycles < 20_000_000
    assert result.instructions < result.cycles
    assert "XIP" in result.counter_note


@needs_arm
@needs_rp2040js
@needs_cc
def test_pico_device_uf2_boots_in_rp2040js(projects, host_result):
    fw = micro.build(projects["pico"], emulate=False)
    result = micro.run_rp2040js(fw.uf2)   # entered at its lowest address, like the bootrom
    assert result.output == host_result.output
    _check_measurements(result)
    assert result.cycles > 2_000_000 and result.instructions is None   # SysTick, no BKPT


@needs_arm
@needs_qemu
@needs_cc
def test_qemu_matches_host(projects, host_result):
    result = micro.run(projects["pico2"], emulate=True)
    assert result.backend == "qemu" and result.output == host_result.output
    _check_measurements(result)
    assert result.cycles is None and 1_000_000 < result.instructions < 20_000_000
    assert "models no cycles" in result.counter_note


@needs_arm
@needs_qemu
def test_qemu_instruction_count_is_exact(tmp_path):
    loops = 250_000   # SUBS + BNE per iteration
    model = _write_model(
        tmp_path / "spin", "32",
        f'register uint32_t n __asm__("r0") = {loops}u;'
        ' __asm volatile("1: subs r0, r0, #1\\n bne 1b" : "+r"(n));'
        " arena[0] = 1; (void)in; (void)out;")
    project = micro.generate_project(tmp_path / "p", model, "pico2")
    result = micro.run(project, emulate=True)
    assert 2 * loops <= result.instructions <= 2 * loops + 100


@needs_arm
@needs_qemu
def test_qemu_fault_is_reported(tmp_path):
    model = _write_model(tmp_path / "bad", "16", '__asm volatile("udf #0"); (void)in; (void)out;')
    project = micro.generate_project(tmp_path / "p", model, "pico2")
    with pytest.raises(SerenityError, match="fault exception"):
        micro.run(project, emulate=True)
