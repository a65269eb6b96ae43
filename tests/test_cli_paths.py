"""Relative and spaced output paths through the CLI and the Python API (issue #13).

A relative ``-o`` was joined onto the project directory a second time when a build step ran
with ``cwd=project`` (``OUT/project/OUT/project/...``); tests writing to absolute tmp_path
outputs never saw it. Here every command runs from tmp_path with relative paths only (the
console script ``tvm-serenity`` as a subprocess, the API after ``chdir``), and each test checks
the artefacts under OUT, that tmp_path holds nothing but the inputs and OUT (no stray or
temporary directory beside it, no doubled path inside it), and that a run's output equals
TFLite Micro's for the same input.

The model is small (conv 3x3 then depthwise 3x3 on 12x12x4, a few kB): the API tests take
about a second each. Each CLI command pays TVM's import and, for ``compile``, the report's
plots (5-15 s), so the CLI tests are marked slow.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tflite_cases import add_conv
from toolchain import needs_arm, needs_cc, needs_qemu, needs_rp2040js
from tvm_serenity import deploy, micro
from tvm_serenity.frontend.builder import ModelBuilder
from tvm_serenity.frontend.interpreters import TFLM, run_interpreter
from tvm_serenity.frontend.tflite_model import parse_tflite

CLI = Path(sys.executable).with_name("tvm-serenity")
MODEL, INPUT = "model.tflite", "input.bin"
SHAPE = (1, 12, 12, 4)
MCU_FILES = ("model/model.c", "model/model.h", "plan.json", "graph.json", "input.bin",
             "project/serenity_project.json", "project/Makefile", "project/model.c")
REPORT_FILES = ("report/report.html", "report/memory.png", "report/arena.png")
RIP_PLOT = "report/rip.png"                  # MCU builds only
FIRMWARE = {"host": ("project/build/host/firmware",),
            "pico": ("project/build/pico-emulator/firmware.elf",
                     "project/build/pico-emulator/firmware.bin"),
            "pico2": ("project/build/pico2-emulator/firmware.elf",
                      "project/build/pico2-emulator/firmware.bin")}
LLVM_FILES = ("model.so", "relax.json", "input.npz")
BUILD = {"host": [needs_cc], "pico": [needs_arm], "pico2": [needs_arm], "llvm": []}
RUN = {"host": [needs_cc], "pico": [needs_arm, needs_rp2040js], "pico2": [needs_arm, needs_qemu],
       "llvm": []}


def small_model() -> bytes:
    rng = np.random.default_rng(13)
    b = ModelBuilder()
    x = b.add_tensor(SHAPE, scale=0.05, zero_point=-3)
    y, shape = add_conv(b, rng, x, SHAPE, "CONV_2D", 8, (3, 3), (1, 1), "SAME", "RELU",
                        (0.04, -128))
    z, _ = add_conv(b, rng, y, shape, "DEPTHWISE_CONV_2D", 8, (3, 3), (1, 1), "SAME", "RELU6",
                    (0.03, -128))
    return b.build([x], [z])


@pytest.fixture(scope="module")
def model_and_input() -> tuple[bytes, bytes, bytes]:
    """The model, an input and TFLite Micro's output for it."""
    buf = small_model()
    x = np.random.default_rng(5).integers(-128, 128, SHAPE, dtype=np.int8)
    out = parse_tflite(buf, MODEL).outputs[0]
    expected = np.asarray(run_interpreter(TFLM, buf, [[x]])[0][out], np.int8).tobytes()
    return buf, x.tobytes(), expected


@pytest.fixture
def workdir(tmp_path, monkeypatch, model_and_input) -> Path:
    buf, data, _ = model_and_input
    (tmp_path / MODEL).write_bytes(buf)
    (tmp_path / INPUT).write_bytes(data)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def cli(cwd: Path, *args: str) -> str:
    proc = subprocess.run([str(CLI), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, f"tvm-serenity {' '.join(args)}: {proc.stdout}\n{proc.stderr}"
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.stdout


def assert_confined(root: Path, *outs: str, inputs=(MODEL, INPUT)) -> None:
    """``root`` holds only ``inputs`` and the directories on the way to each of ``outs``, and
    no path inside an out repeats its first component (the doubled OUT/project/OUT/...)."""
    expected = {Path(): set(inputs)}
    for parts in (Path(out).parts for out in outs):
        for depth in range(len(parts)):
            expected.setdefault(Path(*parts[:depth]), set()).add(parts[depth])
    for directory, names in expected.items():
        assert set(os.listdir(root / directory)) == names, f"{root / directory}"
    for out in outs:
        first = Path(out).parts[0]
        doubled = [p for p in (root / out).rglob("*") if first in p.relative_to(root / out).parts]
        assert not doubled, f"doubled path: {doubled[0]}"


def assert_artefacts(out: Path, target: str, report: bool = True) -> None:
    """What a build for ``target`` writes into ``out``; the CLI adds the report."""
    files = LLVM_FILES if target == "llvm" else MCU_FILES + FIRMWARE[target]
    if report:
        files += REPORT_FILES + (() if target == "llvm" else (RIP_PLOT,))
    missing = [f for f in files if not (out / f).is_file()]
    assert not missing, f"{out}: missing {missing}"


def printed_path(stdout: str, label: str) -> Path:
    """The path printed on the line that starts with ``label`` (after its first ': ')."""
    (line,) = [line for line in stdout.splitlines() if line.startswith(label)]
    return Path(line.split(": ", 1)[1].strip())


def run_output(stdout: str) -> bytes:
    return bytes.fromhex(json.loads(stdout)["output"])


def slow_params(needs: dict) -> list:
    return [pytest.param(target, marks=[pytest.mark.slow, *marks])
            for target, marks in needs.items()]


def params(needs: dict) -> list:
    return [pytest.param(target, marks=marks) for target, marks in needs.items()]


@pytest.mark.parametrize("target", slow_params(BUILD))
def test_compile_relative_output(target, workdir):
    out = f"builds/{target}"
    stdout = cli(workdir, "compile", MODEL, "--target", target, "-o", out)
    assert_artefacts(workdir / out, target)
    assert (workdir / printed_path(stdout, "report:")).samefile(out + "/report/report.html")
    assert_confined(workdir, out)


@pytest.mark.parametrize("target", slow_params(RUN))
def test_run_relative_output(target, workdir, model_and_input):
    out = f"builds/{target}"
    cli(workdir, "compile", MODEL, "--target", target, "-o", out)
    stdout = cli(workdir, "run", out, "--input", INPUT, "--json")
    expected = model_and_input[2]
    if target == "llvm":
        (got,) = json.loads(stdout)["outputs"]   # the first 16 values of each output
        assert got["values"] == np.frombuffer(expected, np.int8)[:16].tolist()
    else:
        assert run_output(stdout) == expected
    assert_confined(workdir, out)


@pytest.mark.slow
@needs_cc
def test_report_relative_output(workdir):
    out = "builds/host"
    cli(workdir, "compile", MODEL, "--target", "host", "-o", out)
    html = Path(cli(workdir, "report", out).strip())
    assert (workdir / html).samefile(out + "/report/report.html")
    assert_confined(workdir, out)


def demo_rows(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines()
            if line.startswith(("TFLite order", "tvm-serenity: DP"))]


@pytest.mark.slow
@needs_arm
def test_demo_relative_output_compiles(tmp_path):
    """--no-emulate: both builds are compiled (the baseline is refused by the fit check)."""
    out = "runs/demo"
    stdout = cli(tmp_path, "demo", "--no-emulate", "-o", out)
    assert (tmp_path / printed_path(stdout, "artefacts")).samefile(tmp_path / out / "serenity")
    assert_artefacts(tmp_path / out / "serenity", "pico", report=False)
    baseline, ours = demo_rows(stdout)[:2]
    assert baseline.split()[-2:] == ["no", "-"] and ours.split()[-2:] == ["yes", "-"]
    assert_confined(tmp_path, out, inputs=())


@pytest.mark.slow
@needs_arm
@needs_rp2040js
def test_demo_relative_output_runs(tmp_path):
    out = "runs/demo"
    stdout = cli(tmp_path, "demo", "-o", out)
    baseline, ours = demo_rows(stdout)[:2]
    assert ours.split()[-2:] == ["yes", "yes"], ours          # fits, bit-exact
    assert_confined(tmp_path, out, inputs=())


@pytest.mark.parametrize("target", slow_params({t: RUN[t] for t in ("host", "pico")}))
def test_output_path_with_a_space(target, workdir, model_and_input):
    out = "my builds/vww out"
    cli(workdir, "compile", MODEL, "--target", target, "-o", out)
    assert_artefacts(workdir / out, target)
    assert run_output(cli(workdir, "run", out, "--input", INPUT, "--json")) == \
        model_and_input[2]
    assert (workdir / cli(workdir, "report", out).strip()).samefile(
        out + "/report/report.html")
    assert_confined(workdir, out)


@pytest.mark.parametrize("target", params({t: RUN[t] for t in ("host", "pico")}))
def test_deploy_api_relative_dirs(target, workdir, model_and_input):
    out = "api/out"
    deploy.compile_tflite(MODEL, target, out)
    assert_artefacts(workdir / out, target, report=False)
    result = deploy.run(out, input=model_and_input[1])
    assert result.output == model_and_input[2]
    assert_confined(workdir, out)


@pytest.mark.parametrize("target", params({t: RUN[t] for t in ("host", "pico")}))
def test_micro_project_api_relative_dirs(target, workdir, model_and_input):
    """generate_project / build / run on a relative project made from compiled C sources."""
    deploy.compile_tflite(MODEL, target, "api/c", build=False)
    project = micro.generate_project("api/project", "api/c/model", target,
                                     input_data=model_and_input[1])
    firmware = micro.build(project)
    assert all(p is None or p.is_file() for p in (firmware.elf, firmware.bin, firmware.uf2))
    assert micro.run(project, emulate=True).output == model_and_input[2]
    assert_confined(workdir, "api/c", "api/project")
