"""The benchmark zoo: structure checked against public definitions and TFLite files, in-place
marks recomputed, and every cell scheduled to a proven optimum."""

import collections
import json
import math
import subprocess
import sys
from pathlib import Path

import networkx as nx
import pytest

from tvm_serenity import zoo
from tvm_serenity.graph import Graph, GraphError
from tvm_serenity.rip import inplace_workspace_bytes
from tvm_serenity.schedule import schedule
from tvm_serenity.zoo import mcunet, randwire

SHARED_MODELS = Path(__file__).resolve().parents[1].parent / "shared" / "models"
CELLS = zoo.names("cell")


def test_registry_lists_cells_and_networks():
    assert {"darts_v2_normal_imagenet", "darts_v2_reduction_imagenet", "darts_v2_normal_cifar",
            "darts_v2_reduction_cifar", "randwire_cifar10_C40_s0",
            "randwire_cifar100_C78_s2"} <= set(CELLS)
    assert {"darts_v2_cifar_net8", "randwire_cifar10_net", "randwire_cifar100_net"} <= set(
        zoo.names("network"))
    with pytest.raises(GraphError, match="unknown zoo graph 'nope'"):
        zoo.build("nope")


@pytest.mark.parametrize("name", zoo.names())
def test_every_entry_is_int8_nhwc_and_round_trips(name):
    graph = zoo.build(name)
    for node in graph.nodes.values():
        assert node.dtype == "int8" and len(node.shape) == 4 and node.shape[0] == 1
        assert node.bytes == math.prod(node.shape)
    again = Graph.loads(graph.dumps())
    assert again.to_json() == graph.to_json()


@pytest.mark.parametrize("name", zoo.names())
def test_inplace_marks_are_rip_workspaces_and_aliases(name):
    graph = zoo.build(name)
    for node in graph.nodes.values():
        if node.op in ("conv2d", "depthwise_conv2d", "max_pool2d", "avg_pool2d"):
            _, h, w, c = graph.nodes[node.inputs[0]].shape
            out_c = node.shape[3]
            groups = node.attrs.get("groups", c)        # pooling: one window per channel
            expected = inplace_workspace_bytes(node.op, (h, w, c), out_c,
                                               tuple(node.attrs["kernel"]),
                                               tuple(node.attrs["stride"]),
                                               tuple(node.attrs.get("dilation", (1, 1))),
                                               tuple(node.attrs["padding"]), groups, 1)
            assert node.inplace == expected, node.name
        elif node.op in ("add", "relu", "relu6", "mul"):
            assert node.inplace == "alias", node.name
            assert graph.nodes[node.inputs[0]].bytes == node.bytes
        elif node.op in ("concatenation", "strided_slice", "input"):
            assert node.inplace is None, node.name


def test_same_padding_matches_tflite():
    # TFLite: out = ceil(in / stride); the odd pixel of padding goes to the bottom/right.
    from tvm_serenity.zoo.builder import same_padding
    assert same_padding(32, 3, 1) == (32, 1, 1)
    assert same_padding(32, 3, 2) == (16, 0, 1)
    assert same_padding(31, 1, 2) == (16, 0, 0)
    assert same_padding(28, 3, 1, dilation=2) == (28, 2, 2)
    assert same_padding(7, 7, 2) == (4, 3, 3)


def _tflite_ops(path):
    tflite = pytest.importorskip("tflite")
    from tflite.BuiltinOperator import BuiltinOperator
    codes = {v: k for k, v in vars(BuiltinOperator).items() if not k.startswith("_")}
    model = tflite.Model.GetRootAsModel(path.read_bytes(), 0)
    sub = model.Subgraphs(0)
    ops, sizes = collections.Counter(), collections.Counter()
    for i in range(sub.OperatorsLength()):
        op = sub.Operators(i)
        code = model.OperatorCodes(op.OpcodeIndex())
        ops[codes[max(code.BuiltinCode(), code.DeprecatedBuiltinCode())]] += 1
        sizes[int(sub.Tensors(op.Outputs(0)).ShapeAsNumpy().prod())] += 1
    return ops, sizes


def _zoo_ops(graph):
    names = {"conv2d": "CONV_2D", "depthwise_conv2d": "DEPTHWISE_CONV_2D", "add": "ADD",
             "relu": "RELU", "concatenation": "CONCATENATION", "fully_connected": "CONV_2D"}
    ops = collections.Counter(names.get(n.op, n.op) for n in graph.nodes.values()
                              if not n.is_input)
    sizes = collections.Counter(n.bytes for n in graph.nodes.values() if not n.is_input)
    return ops, sizes


def test_darts_cifar_normal_cell_is_what_tflite_sees():
    """Same operators and the same activation sizes as the shared Keras->TFLite conversion of
    the DARTS V2 normal cell (32x32, C=36)."""
    path = SHARED_MODELS / "keras" / "darts_v2_normal_cifar_32x32_C36.tflite"
    if not path.is_file():
        pytest.skip(f"{path} not present")
    assert _zoo_ops(zoo.build("darts_v2_normal_cifar")) == _tflite_ops(path)


def test_darts_cell_counts_from_the_genotype():
    # normal: 5 sep_conv (2 dw + 2 pw each), 1 dil_conv (dw + pw), 2 preprocessing convs,
    # 4 node sums, 1 concat; RELU ops stay on both inputs, on s0' (also read raw by
    # skip_connect) and on node 2 (also read raw by the concat).
    ops, _ = _zoo_ops(zoo.build("darts_v2_normal_imagenet"))
    assert ops == {"CONV_2D": 2 + 5 * 2 + 1, "DEPTHWISE_CONV_2D": 5 * 2 + 1, "ADD": 4,
                   "RELU": 4, "CONCATENATION": 1}
    # reduction: max pools on s0' and s1' shared (CSE), identical sums merged (n3 == n5).
    graph = zoo.build("darts_v2_reduction_cifar")
    ops, _ = _zoo_ops(graph)
    assert ops == {"CONV_2D": 2, "RELU": 2, "max_pool2d": 2, "ADD": 3, "CONCATENATION": 1}
    concat = next(n for n in graph.nodes.values() if n.op == "concatenation")
    assert concat.shape == (1, 16, 16, 4 * 72)


def test_nasnet_cells_from_the_slim_definition():
    # normal: 1x1 on both inputs, 5 separable ops (2 x (dw + pw) each), the two avg pools of
    # state 1 merged (CSE), ReLUs on both inputs and on both 1x1 outputs (also read raw).
    graph = zoo.build("nasnet_a_normal_mobile")
    ops, _ = _zoo_ops(graph)
    assert ops == {"CONV_2D": 2 + 5 * 2, "DEPTHWISE_CONV_2D": 5 * 2, "avg_pool2d": 2,
                   "ADD": 5, "RELU": 4, "CONCATENATION": 1}
    assert graph.nodes[graph.outputs[0]].shape == (1, 28, 28, 6 * 44)
    # reduction: 5 separable ops, max pool of state 0 shared by two combinations, two avg
    # pools; the output concatenates hidden states 3..6.
    graph = zoo.build("nasnet_a_reduction_mobile")
    ops, _ = _zoo_ops(graph)
    assert ops == {"CONV_2D": 2 + 5 * 2, "DEPTHWISE_CONV_2D": 5 * 2, "avg_pool2d": 2,
                   "max_pool2d": 1, "ADD": 5, "RELU": 4, "CONCATENATION": 1}
    assert graph.nodes[graph.outputs[0]].shape == (1, 14, 14, 4 * 88)


def test_randwire_stage_follows_the_ws_graph():
    for seed in zoo.RANDWIRE_SEEDS:
        ws = nx.watts_strogatz_graph(32, 4, 0.75, seed=seed)
        preds = {v: [u for u in ws.neighbors(v) if u < v] for v in ws}
        succs = {v: [u for u in ws.neighbors(v) if u > v] for v in ws}
        sinks = sum(1 for v in ws if not succs[v])
        graph = zoo.build(f"randwire_cifar10_C40_s{seed}")
        ops, _ = _zoo_ops(graph)
        assert ops["DEPTHWISE_CONV_2D"] == 32 and ops["CONV_2D"] == 32
        assert ops["ADD"] == sum(max(len(p) - 1, 0) for p in preds.values()) + sinks - 1
        assert ops.get("mul", 0) == (1 if sinks > 1 else 0)
        # ReLU ops: the stage input's (shared by the sources), and relu(u) for a node u read
        # by a single-input successor when u is also read raw by an ADD (else it is fused)
        kept = sum(1 for u in ws if any(len(preds[v]) == 1 for v in succs[u])
                   and any(len(preds[v]) > 1 for v in succs[u]))
        assert ops["RELU"] == 1 + kept
        assert all(n.shape[1:3] == (32, 32) for n in graph.nodes.values())


def test_randwire_dag_orientation():
    preds = randwire.ws_dag(5)
    assert sum(len(p) for p in preds.values()) == 32 * 4 // 2
    assert all(u < v for v, ps in preds.items() for u in ps)


@pytest.mark.skipif(not mcunet.config_names(), reason="shared MCUNet configs absent")
def test_mcunet_matches_the_shared_tflite():
    """Same convolutions, depthwise convolutions and residual adds as the int8 MCUNet
    (the TFLite file also carries explicit PAD ops and a RESHAPE; we use 'SAME' padding)."""
    path = mcunet.MODELS_DIR / "mcunet-320kb-1mb_imagenet.tflite"
    if not path.is_file():
        pytest.skip(f"{path} not present")
    ops, _ = _tflite_ops(path)
    mine, _ = _zoo_ops(zoo.build("mcunet-320kb-1mb"))
    for op in ("CONV_2D", "DEPTHWISE_CONV_2D", "ADD"):
        assert mine[op] == ops[op], op
    assert zoo.build("mcunet-320kb-1mb")["image"].shape == (1, 176, 176, 3)


@pytest.mark.skipif(not mcunet.config_names(), reason="shared MCUNet configs absent")
def test_mcunet_blocks_from_config():
    config = json.loads((mcunet.MODELS_DIR / "mbv2-w0.3-r80_imagenet.json").read_text())
    graph = zoo.build("mbv2-w0.3-r80")
    blocks = config["blocks"]
    expands = sum(1 for b in blocks if b["mobile_inverted_conv"]["expand_ratio"] != 1)
    ops, _ = _zoo_ops(graph)
    assert ops["DEPTHWISE_CONV_2D"] == len(blocks)
    assert ops["ADD"] == sum(1 for b in blocks if b["shortcut"])
    # first conv + expand + project per block + feature mix + classifier
    assert ops["CONV_2D"] == 1 + expands + len(blocks) + 1 + 1


def test_mcunet_missing_config_is_a_clear_error():
    with pytest.raises(GraphError, match="MCUNet config .* not found"):
        mcunet.mcunet_graph("no-such-net")


@pytest.mark.parametrize("inplace", [True, False])
@pytest.mark.parametrize("name", CELLS)
def test_every_cell_is_scheduled_to_a_proven_optimum(name, inplace):
    graph = zoo.build(name)
    result = schedule(graph, "serenity", inplace=inplace)
    assert result.optimal and result.lower_bound_bytes == result.peak_bytes
    # an independent exact search on the unsplit graph (best-first, or the budget descent)
    unsplit = schedule(graph, "astar" if inplace else "descent", inplace=inplace)
    assert unsplit.optimal and unsplit.peak_bytes == result.peak_bytes
    stored = schedule(graph, "stored", inplace=inplace)
    assert result.peak_bytes <= stored.peak_bytes


def test_zoo_cli_dumps_json_and_lists():
    listed = subprocess.run([sys.executable, "-m", "tvm_serenity.zoo", "--list"],
                            capture_output=True, text=True, check=True).stdout
    assert "darts_v2_normal_cifar" in listed and "randwire_cifar100_net" in listed
    dumped = subprocess.run([sys.executable, "-m", "tvm_serenity.zoo", "darts_v2_normal_cifar"],
                            capture_output=True, text=True, check=True).stdout
    assert Graph.loads(dumped).to_json() == zoo.build("darts_v2_normal_cifar").to_json()
    bad = subprocess.run([sys.executable, "-m", "tvm_serenity.zoo", "nope"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown zoo graph 'nope'" in bad.stderr
