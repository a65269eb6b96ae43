"""`tvm-serenity compile/run/report/demo`: artefacts, report images, one-line errors."""

import json
import subprocess
import sys

import numpy as np
import pytest

from toolchain import needs_cc, needs_rp2040js
from tvm_serenity import SerenityError
from tvm_serenity.cli import main
from tvm_serenity.demo import demo_model_bytes, format_demo, run_demo
from tvm_serenity.frontend.builder import ModelBuilder
from tvm_serenity.graph import Graph
from tvm_serenity.memory import simulate


@pytest.fixture(scope="module")
def compiled_host(tmp_path_factory):
    out = tmp_path_factory.mktemp("host")
    model = out / "demo.tflite"
    model.write_bytes(demo_model_bytes())
    assert main(["compile", str(model), "--target", "host", "-o", str(out / "build"),
                 "--time-limit", "20"]) == 0
    return out / "build"


@needs_cc
def test_compile_writes_plan_graph_and_report(compiled_host):
    plan = json.loads((compiled_host / "plan.json").read_text())
    graph = Graph.load(compiled_host / "graph.json")
    sim = simulate(graph, plan["order"], plan["rip"])
    assert sim.peak_bytes == plan["liveness_peak_bytes"] <= plan["arena_bytes"]
    report = compiled_host / "report"
    import matplotlib.image as mpimg
    for name in ("memory.png", "arena.png", "rip.png"):
        image = mpimg.imread(report / name)          # raises on a corrupt PNG
        assert image.ndim == 3 and image.shape[0] > 200 and image.shape[1] > 400
        assert image.std() > 0.01                    # not a blank canvas
    html = (report / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 3 and f"{plan['arena_bytes']:,} B" in html


@needs_cc
def test_report_plots_the_plan(compiled_host):
    from tvm_serenity.report import write_compiled_report
    report = write_compiled_report(compiled_host)
    plan = json.loads((compiled_host / "plan.json").read_text())
    ours = report.memory_series["tvm-serenity"]
    assert max(ours) == plan["liveness_peak_bytes"]
    baseline = report.memory_series["TFLite order, dual buffer"]
    graph = Graph.load(compiled_host / "graph.json")
    assert max(baseline) == simulate(graph, graph.op_names, inplace=False).peak_bytes
    top = max(y + h for _, _, _, y, h in report.arena_rectangles)
    assert top == plan["arena_bytes"]


@needs_cc
def test_run_on_host_is_bit_exact(compiled_host, capsys):
    assert main(["run", str(compiled_host), "--host", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["backend"] == "host" and len(bytes.fromhex(result["output"])) == 10


def _tanh_model(path):
    b = ModelBuilder()
    x = b.add_tensor((1, 4), scale=0.1, zero_point=0)
    y = b.add_tensor((1, 4), scale=1 / 128, zero_point=0)
    b.add_operator("TANH", [x], [y])
    path.write_bytes(b.build([x], [y]))


@pytest.mark.parametrize("case, message", [
    ("missing", "model file"),
    ("corrupt", "corrupt.tflite"),
    ("onnx", "not a valid ONNX model"),
    ("unsupported", "TANH"),
    ("flag", "unrecognized arguments: --frobnicate"),
    ("target", "invalid choice: 'arduino'"),
])
def test_compile_errors_are_one_line(tmp_path, case, message):
    model = tmp_path / "m.tflite"
    model.write_bytes(demo_model_bytes())
    argv = ["compile", str(model), "-o", str(tmp_path / "out"), "--target", "host"]
    if case == "missing":
        argv[1] = str(tmp_path / "nope.tflite")
    elif case == "corrupt":
        bad = tmp_path / "corrupt.tflite"
        bad.write_bytes(b"TFL3" + bytes(range(200)))
        argv[1] = str(bad)
    elif case == "onnx":
        argv[1] = str(tmp_path / "m.onnx")
        (tmp_path / "m.onnx").write_bytes(b"")
    elif case == "unsupported":
        _tanh_model(model)
    elif case == "flag":
        argv.append("--frobnicate")
    elif case == "target":
        argv[argv.index("host")] = "arduino"
    proc = subprocess.run([sys.executable, "-m", "tvm_serenity.cli", *argv],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert "Traceback" not in proc.stderr


def test_run_and_report_errors(tmp_path, capsys):
    assert main(["run", str(tmp_path)]) == 2
    assert "is not a tvm-serenity build" in capsys.readouterr().err
    assert main(["report", str(tmp_path)]) == 2


def test_demo_model_is_deterministic_and_baseline_does_not_fit(tmp_path):
    assert demo_model_bytes() == demo_model_bytes()
    rows = run_demo(tmp_path, emulate=False, time_limit=20)
    base, ours = rows
    assert not base.fits and "over by" in base.note
    assert ours.fits and ours.arena_bytes < base.arena_bytes
    assert ours.sram_bytes <= 264 * 1024
    assert "peak reduction" in format_demo(rows)


def test_demo_reports_a_failed_build_as_failed_and_exits_non_zero(tmp_path, monkeypatch,
                                                                  capsys):
    """Our build failing for a reason other than its size (here the C compiler breaking) is
    'failed' with its cause, never 'no' in the fits column, and the command exits 2 with one
    line; the baseline's size refusal stays 'no'."""
    from tvm_serenity import micro
    real_build = micro.build

    def broken(project, **kw):
        if "serenity" in str(project):
            raise SerenityError("compiling model.c for pico failed: model.c:1: error: boom")
        return real_build(project, **kw)

    monkeypatch.setattr(micro, "build", broken)
    assert main(["demo", "--no-emulate", "-o", str(tmp_path / "demo")]) == 2
    captured = capsys.readouterr()
    base, ours = [line for line in captured.out.splitlines()
                  if line.startswith(("TFLite order + TFLM greedy arena, dual buffer ",
                                      "tvm-serenity: DP order + RiP + optimal arena "))]
    assert base.split()[-2:] == ["no", "-"] and ours.split()[-2:] == ["failed", "-"]
    assert captured.err.count("\n") == 1 and captured.err.startswith(
        "tvm-serenity: error: demo failed: tvm-serenity: DP order + RiP + optimal arena: build "
        "failed: compiling model.c for pico failed: model.c:1: error: boom")


def test_demo_into_a_file_is_one_line(tmp_path, capsys):
    target = tmp_path / "taken"
    target.write_text("mine")
    assert main(["demo", "-o", str(target)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "exists and is not a directory" in err
    assert target.read_text() == "mine"


@pytest.mark.slow
@needs_rp2040js
def test_demo_runs_on_rp2040js(tmp_path):
    rows = run_demo(tmp_path, emulate=True, time_limit=20)
    assert rows[-1].output_ok is True and rows[-1].cycles > 0
