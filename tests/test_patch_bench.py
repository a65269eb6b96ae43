"""benchmarks.patch_bench: its BENCHMARKS.md section is what the script measures now (one
model, three Pico builds run on rp2040js: slow), and its MobileNetV2 config is the textbook
network (the paper's 1,372 KB is its expand output with that output's input)."""

import re
from pathlib import Path

import pytest

from benchmarks import patch_bench as bench
from benchmarks._markdown import BENCHMARKS_MD, SHARED_MODELS
from tvm_serenity.frontend import parse_tflite, tflite_to_graph
from tvm_serenity.zoo.mcunet import network
from tvm_serenity.zoo.tflite import TFLiteNetBuilder
from toolchain import needs_arm, needs_rp2040js

MODEL = "mlperf_tiny/vww_96_int8.tflite"


def _section_rows() -> dict[str, list[str]]:
    text = BENCHMARKS_MD.read_text()
    section = text[text.index("<!-- BEGIN patch -->"):text.index("<!-- END patch -->")]
    rows = [[c.strip() for c in line.strip().strip("|").split("|")]
            for line in section.splitlines() if line.startswith("| ")]
    return {r[0]: r for r in rows[2:] if len(r) == len(bench.HEAD)}


def test_mobilenet_v2_config_is_the_textbook_network():
    b = TFLiteNetBuilder("mbv2", 0)
    model = parse_tflite(b.build([network(b, bench.mobilenet_v2_config(), "mbv2")]))
    graph = tflite_to_graph(model, fold_pad=True)
    convs = [n for n in graph.nodes.values() if n.op in ("conv2d", "depthwise_conv2d")]
    # the first conv, 16 blocks of expand, depthwise, project, one without the expand,
    # the feature mix
    assert len(convs) == 1 + 16 * 3 + 2 + 1
    assert max(n.bytes for n in convs) == 112 * 112 * 96
    assert sum(1 for n in graph.nodes.values() if n.op == "add") == 10
    assert graph[graph.outputs[0]].shape[-1] == 1000


@pytest.mark.slow
@needs_arm
@needs_rp2040js
@pytest.mark.skipif(not (SHARED_MODELS / MODEL).is_file(), reason="../shared/models absent")
def test_section_row_is_what_the_script_measures(tmp_path):
    name = Path(MODEL).stem
    published = _section_rows().get(name)
    assert published is not None, f"BENCHMARKS.md's patch section has no row for {name}"
    row = [str(c) for c in bench.measure_model(name, SHARED_MODELS / MODEL, tmp_path, 60.0,
                                               True)]
    formatted = [re.sub(r"(?<=\d)(?=(\d{3})+$)", ",", c) if c.isdigit() else c for c in row]
    # the unpatched build (plans are reproducible: the same model.c, the same cycles)
    assert formatted[:6] == published[:6]
    for column, head in enumerate(bench.HEAD):
        if "bit-exact" in head or head == "exact":
            assert formatted[column] in ("yes", "n/a") and published[column] == \
                formatted[column], head
    # the streamed plan and its arena (the searches finish: the same plan each time)
    streamed = bench.HEAD.index("streamed: layers")
    assert formatted[streamed:streamed + 5] == published[streamed:streamed + 5]
