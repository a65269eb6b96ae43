"""tvm_serenity.zoo.tflite and benchmarks.mcunet_pico_bench: the random-weight MCUNet
flatbuffers are the zoo's graphs (node for node, imported back by the TFLite frontend), follow
TFLite's int8 quantization rules, use the int8 range without saturating, and run in TFLite
Micro exactly as in our reference interpreter (every tensor); the benchmark's figures on one
model agree with the build's plan.json, the ELF (the Arm toolchain's nm and size) and TFLM's
own arena, and its rp2040js runs are bit-exact (slow: two firmware builds and runs)."""

import re
import subprocess

import numpy as np
import pytest

from benchmarks import mcunet_pico_bench as bench
from tvm_serenity import zoo
from tvm_serenity.deploy import load_plan
from tvm_serenity.frontend import tflite_to_graph
from tvm_serenity.frontend.interpreters import (TFLM, available, model_inputs,
                                                run_interpreter, tflm_arena)
from tvm_serenity.frontend.reference import Interpreter
from tvm_serenity.frontend.tflite_model import parse_tflite
from tvm_serenity.graph import GraphError
from tvm_serenity.micro import get_board
from tvm_serenity.zoo.mcunet import config_names
from tvm_serenity.zoo.tflite import TFLiteNetBuilder, mcunet_tflite
from toolchain import needs_arm, needs_rp2040js

SMALL = "mcunet-10fps"
needs_configs = pytest.mark.skipif(f"{SMALL}_imagenet" not in config_names(),
                                   reason="the shared MCUNet configs are absent")
needs_tflm = pytest.mark.skipif(not available(TFLM), reason="tflite-micro is not installed")


def _signature(graph):
    return [(n.op, n.bytes, n.inplace, n.attrs.get("activation"))
            for n in graph.nodes.values()]


@pytest.mark.parametrize("stem", config_names())
def test_flatbuffer_is_the_zoo_graph(stem):
    name = stem.replace("_imagenet", "")
    model = parse_tflite(mcunet_tflite(stem), name=name)
    assert _signature(tflite_to_graph(model, fold_pad=True)) == _signature(zoo.build(name))


@needs_configs
def test_quantization_follows_tflite_rules_and_does_not_saturate():
    model = parse_tflite(mcunet_tflite(SMALL), name=SMALL)
    relu_outputs = set()
    for op in model.operators:
        out = model.tensors[op.outputs[0]]
        assert out.quant.scale.size == 1
        if op.options.get("fused_activation_function") in ("RELU", "RELU6"):
            assert int(out.quant.zero_point[0]) == -128
            relu_outputs.add(out.index)
        if op.op not in ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED"):
            continue
        x, w, bias = (model.tensors[i] for i in op.inputs)
        channels = w.shape[3] if op.op == "DEPTHWISE_CONV_2D" else w.shape[0]
        per_channel = op.op != "FULLY_CONNECTED"
        assert w.quant.scale.size == (channels if per_channel else 1)
        assert w.quant.axis == (3 if op.op == "DEPTHWISE_CONV_2D" else 0)
        assert not w.quant.zero_point.any() and not bias.quant.zero_point.any()
        assert w.dtype == "int8" and bias.dtype == "int32" and bias.shape == (channels,)
        assert int(np.abs(w.data.astype(int)).max()) <= 127
        np.testing.assert_array_equal(
            bias.quant.scale, (np.float64(x.quant.scale[0]) * w.quant.scale).astype(np.float32))
    values = Interpreter(model).run_all(model_inputs(model, np.random.default_rng(5)))
    for op in model.operators:
        q = values[op.outputs[0]].astype(int)
        clamped = (q == 127) | ((q == -128) if op.outputs[0] not in relu_outputs else False)
        assert clamped.mean() < 0.01, model.tensors[op.outputs[0]].name
        assert len(np.unique(q)) > 32, model.tensors[op.outputs[0]].name


@needs_configs
@needs_tflm
def test_tflite_micro_runs_it_as_the_reference_interpreter_does():
    buf = mcunet_tflite(SMALL)
    model = parse_tflite(buf, name=SMALL)
    inputs = model_inputs(model, np.random.default_rng(3))
    tflm = run_interpreter(TFLM, buf, [inputs])[0]
    ours = Interpreter(model).run_all(inputs)
    activations = [t.index for t in model.tensors if t.data is None]
    assert sorted(tflm) == sorted(ours) == sorted(activations)
    for i in activations:
        assert tflm[i].tobytes() == ours[i].tobytes(), model.tensors[i].name


def test_unfusable_relu_and_unknown_config_are_refused():
    b = TFLiteNetBuilder("two_readers")
    x = b.input("x", (8, 8, 4))
    y = b.conv(x, 4, 3)
    b.relu(y)
    with pytest.raises(GraphError, match="relu 'conv_relu' cannot be fused into 'conv'"):
        b.build([b.add(y, x)])
    with pytest.raises(GraphError, match="MCUNet config .*no-such-net.json' not found"):
        mcunet_tflite("no-such-net")


def _nm_sizes(elf) -> dict[str, int]:
    out = subprocess.run(["arm-none-eabi-nm", "-S", str(elf)], capture_output=True, text=True,
                         check=True).stdout
    return {name: int(size, 16)
            for size, name in re.findall(r"^\w+ (\w+) [bBdD] (\S+)$", out, re.M)}


def _data_bss(elf) -> int:
    out = subprocess.run(["arm-none-eabi-size", "-A", str(elf)], capture_output=True,
                         text=True, check=True).stdout
    return sum(int(n) for n in re.findall(r"^(?:\.data|\.bss)\s+(\d+)", out, re.M))


@pytest.mark.slow
@needs_configs
@needs_tflm
@needs_arm
@needs_rp2040js
def test_figures_agree_with_the_plan_the_elf_and_tflm_and_runs_are_bit_exact(tmp_path):
    rows = bench.measure([SMALL], tmp_path)
    assert [r["strategy"] for r in rows] == list(bench.STRATEGIES)
    head = tflm_arena(tmp_path / "models" / f"{SMALL}.tflite").head
    sram = get_board("pico").sram.size
    for row in rows:
        out = tmp_path / f"{SMALL}-{row['strategy']}"
        plan = load_plan(out)
        assert row["arena"] == plan["arena_bytes"] and row["scratch"] == plan["scratch_bytes"]
        elf = next((out / "project" / "build").rglob("*.elf"))
        symbols = _nm_sizes(elf)
        assert symbols["arena"] == row["arena"]
        assert sum(b for n, b in symbols.items() if n.startswith("scratch")) == row["scratch"]
        assert row["sram"] == _data_bss(elf) + row["stack_reserve"]
        assert row["runtime"] == _data_bss(elf) - row["arena"] - row["scratch"]
        assert row["sram_limit"] == sram == 264 * 1024
        assert row["fits"] == (row["sram"] <= sram) and row["verdict"] == "yes"
        assert row["tflm_head"] == head
        assert row["exact"] is True and row["cycles"] > 0
        assert 0 < row["stack_used"] <= row["stack_reserve"]
    tflm_style, ours, rewritten = rows
    assert tflm_style["arena"] == head         # TFLM's order and greedy plan, no in-place
    # mcunet-10fps: its peak, b1/expand's output, is what the expand-depthwise fusion removes
    assert rewritten["arena"] < ours["arena"] < tflm_style["arena"]
    text = bench.render(rows)
    assert ("**TFLM-style 1 of 1, ours 1 of 1, ours + rewriting 1 of 1**" in text
            and "3 of 3 runs" in text)
    assert f"| {SMALL} | ours | {head:,} | {ours['arena']:,} |" in text
