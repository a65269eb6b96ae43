"""benchmarks.mlperf_bench: the ELF audit of SRAM objects besides the arena (cross-checked with
the Arm toolchain's own nm and size, and shown to catch an I/O buffer outside the arena), the
fit verdict of an image the fit check refuses, and (slow) a --quick run whose figures are
compared with the build's plan.json, TFLite Micro's interpreter and the fit check."""

import re
import subprocess

import numpy as np
import pytest

from benchmarks import _markdown, mlperf_bench as mb
from tvm_serenity.deploy import compile_tflite, load_plan
from tvm_serenity.frontend.builder import ModelBuilder
from tvm_serenity.frontend.interpreters import TFLM, available, tflm_arena
from tvm_serenity.micro import get_board
from toolchain import needs_arm, needs_qemu, needs_rp2040js

KWS = _markdown.SHARED_MODELS / mb.MODELS["kws"][0]
needs_kws = pytest.mark.skipif(not KWS.is_file(), reason=f"{KWS} is absent")
needs_tflm = pytest.mark.skipif(not available(TFLM), reason="tflite-micro is not installed")


def _nm_ram_objects(elf, board: str) -> dict[str, int]:
    """Name -> size of every sized .data/.bss symbol in ``board``'s emulator RAM, as
    ``arm-none-eabi-nm -S`` lists them."""
    ram = get_board(board).layout(True).ram
    out = subprocess.run(["arm-none-eabi-nm", "-S", str(elf)], capture_output=True, text=True,
                         check=True).stdout
    objects = {}
    for address, size, kind, name in re.findall(r"^(\w+) (\w+) ([bBdD]) (\S+)$", out, re.M):
        if ram.contains(int(address, 16)):
            assert name not in objects, f"two RAM objects named {name}"
            objects[name] = int(size, 16)
    return objects


def _size_sections(elf) -> int:
    """Bytes of .data and .bss, as ``arm-none-eabi-size -A`` reports them."""
    out = subprocess.run(["arm-none-eabi-size", "-A", str(elf)], capture_output=True,
                         text=True, check=True).stdout
    return sum(int(n) for name, n in re.findall(r"^(\.data|\.bss)\s+(\d+)", out, re.M))


@needs_arm
@needs_kws
def test_sram_objects_match_nm_and_catch_an_io_buffer(tmp_path):
    compiled = compile_tflite(KWS, "pico2", tmp_path / "out", time_limit=10)
    elf = compiled.firmware.elf
    audit = mb.sram_objects(elf, "pico2")
    nm = _nm_ram_objects(elf, "pico2")
    assert audit.arena == nm.pop("arena") == compiled.arena_bytes
    assert {**audit.scratch, **audit.runtime, **audit.other} == nm
    assert sum(audit.scratch.values()) == compiled.scratch_bytes
    assert audit.other == {} and audit.io_bytes == 0
    assert audit.arena + sum(nm.values()) + audit.uncovered == _size_sections(elf)
    assert 0 <= audit.uncovered < 16
    # a copy of the output outside the arena, as the harness once had: the audit names it
    project = compiled.project_dir
    model_c = project / "model.c"
    output_bytes = compiled.emitted.outputs[0].bytes
    model_c.write_text(model_c.read_text().replace(
        "void model_run(void) {",
        f"unsigned char serenity_output[{output_bytes}];\n"
        "void model_run(void) {\n    serenity_output[0] = 1;", 1))
    copied = mb.sram_objects(mb.micro.build(project).elf, "pico2")
    assert copied.other == {"serenity_output": output_bytes}
    assert copied.io_bytes == output_bytes


def _wide_conv() -> bytes:
    """int8 (1, 160, 160, 8) -> 1x1 CONV_2D -> (1, 160, 160, 16): 409,600 B of output alone,
    more than the Pico's SRAM."""
    b = ModelBuilder()
    rng = np.random.default_rng(0)
    x = b.add_tensor((1, 160, 160, 8), scale=0.05, zero_point=0)
    w = b.add_tensor((16, 1, 1, 8), scale=0.01, data=rng.integers(-127, 128, (16, 1, 1, 8)))
    bias = b.add_tensor((16,), "int32", data=rng.integers(-100, 100, 16))
    y = b.add_tensor((1, 160, 160, 16), scale=0.1, zero_point=0)
    b.add_operator("CONV_2D", [x, w, bias], [y],
                   {"padding": "VALID", "stride_h": 1, "stride_w": 1,
                    "fused_activation_function": "NONE"})
    return b.build([x], [y])


@needs_arm
def test_a_refused_image_is_measured_and_its_overflow_named(tmp_path):
    path = tmp_path / "wide.tflite"
    path.write_bytes(_wide_conv())
    compiled = compile_tflite(path, "pico", tmp_path / "out", build=False, time_limit=5)
    with pytest.raises(mb.micro.DoesNotFitError):
        mb.micro.build(compiled.project_dir)
    fit, elf = mb.build(compiled)
    sram = get_board("pico").sram.size
    assert fit.part("arena") == compiled.arena_bytes >= 160 * 160 * 16
    over = fit.total_bytes - sram
    assert over > 0 and fit.flash_fits
    assert mb.fits(fit) == f"no (SRAM over by {over:,} B)"
    audit = mb.sram_objects(elf, "pico")
    assert audit.arena == compiled.arena_bytes and audit.io_bytes == 0


@pytest.mark.slow
@needs_arm
@needs_qemu
@needs_rp2040js
@needs_tflm
@needs_kws
def test_quick_run_prints_what_the_builds_measure(tmp_path, capsys):
    before = _markdown.BENCHMARKS_MD.read_text()
    mb.main(["--quick", "--out", str(tmp_path)])
    assert _markdown.BENCHMARKS_MD.read_text() == before     # no --write: nothing written
    out = capsys.readouterr().out
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| model | in/out"))
    end = lines.index("", start)
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines[start:end]]
    rows = {r[2]: dict(zip(cells[0], r)) for r in cells[2:]}
    assert sorted(rows) == sorted(mb.BOARDS)
    head = tflm_arena(KWS).head
    for board, row in rows.items():
        plan = load_plan(tmp_path / f"kws-{board}")
        assert row["arena B"] == f"{plan['arena_bytes']:,}"
        assert row["scratch B"] == f"{plan['scratch_bytes']:,}"
        assert row["TFLM head arena B"] == f"{head:,}"
        assert row[f"bit-exact vs TFLM ({len(mb.SEEDS)} inputs)"] == f"{len(mb.SEEDS)}/3"
        assert row["I/O outside the arena B"] == "0"
        assert row["fits"] == "yes"
        assert int(row["cycles (pico) / instructions (pico2)"].replace(",", "")) > 0
        io = sum(t["bytes"] for t in plan["inputs"] + plan["outputs"])
        assert row["I/O tensors B"] == f"{io:,}"
