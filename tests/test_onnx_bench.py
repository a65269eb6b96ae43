"""The ``onnx`` benchmark's measurement on one model: what its table reports is real (the
arena is the build's plan, the rp2040js run was checked, the host build equals the reference,
the LSB figures are onnxruntime's)."""

import json

import pytest

from toolchain import needs_arm, needs_cc, needs_rp2040js

pytest.importorskip("onnxruntime")


@needs_cc
@needs_arm
@needs_rp2040js
def test_measure_reports_what_the_build_and_onnxruntime_say(tmp_path):
    from benchmarks.onnx_bench import report, zoo_row
    row = zoo_row("conv_stack", False, 2, tmp_path)
    plan = json.loads((tmp_path / "conv_stack_asym" / "pico" / "plan.json").read_text())
    assert row["arena"] == plan["arena_bytes"] and row["cycles"] > 0
    # conv_stack runs two float Convs (MLAS order not reproduced): within 1 LSB
    assert row["reference_equal"] and row["llvm_equal"]
    assert row["lsb"] <= 1 and row["values"] == 2 * 10
    assert row["float"] >= row["approximate"] == 2
    assert "| conv_stack | asymmetric |" in report([row], 2, False)
