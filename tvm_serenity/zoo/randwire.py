"""RandWire stages and networks (Xie, Kirillov, Girshick & He, ICCV 2019), CIFAR sizes.

A stage is a Watts-Strogatz graph WS(N=32, K=4, P=0.75) (``networkx.watts_strogatz_graph``
with a fixed seed), made a DAG by orienting every edge from the smaller to the larger node
index. The stage input feeds every node without predecessors; the stage output is the mean of
every node without successors. Each node is, as TFLite sees it (:mod:`.builder`):

* weighted-sum aggregation of its inputs: a chain of binary ADDs (the converter splits an
  n-ary add; the sigmoid edge weights are folded, as in the shared Keras->TFLite RandWire
  model, but two nodes' sums are never merged), ReLU fused into the last ADD; a node with a
  single input reads ``relu(input)``, one op shared by all such readers, fused into the
  producing conv when nothing else reads that conv;
* depthwise 3x3 (stride 2 on the nodes reading the input of a down-sampling stage);
* 1x1 conv to ``C`` channels (BN folded).

The mean of the sinks is an ADD chain and a MUL by ``1/n``.

Sizes follow the SERENITY evaluation (RandWire on CIFAR-10 and CIFAR-100): a stage at 32x32
with ``C = 78`` for CIFAR-100 (the channel count of the shared ``randwire_cifar100_C78_cellA``
model) and ``C = 40`` for CIFAR-10 (the paper's Table 1 has ~4x fewer weights, i.e. about half
the channels). The network is the small-regime layout adapted to 32x32 inputs: a 3x3 stem conv
to ``C/2``, three stages at 32x32xC, 16x16x2C and 8x8x4C, a 1x1 conv to 1280, global pool and
the classifier.

:func:`randwire_stage_graph` also takes the generator's ``nodes`` and ``k`` (the scaling
benchmark's cells of growing size and width: ``benchmarks/schedule_bench.py``).
"""

from __future__ import annotations

import networkx as nx

from ..graph import Graph
from .builder import NetBuilder

__all__ = ["ws_dag", "stage", "randwire_stage_graph", "randwire_cifar_network"]

NODES, NEIGHBOURS, REWIRE = 32, 4, 0.75


def ws_dag(seed: int, nodes: int = NODES, k: int = NEIGHBOURS,
           p: float = REWIRE) -> dict[int, list[int]]:
    """Predecessors of every node of the oriented WS(nodes, k, p) graph."""
    g = nx.watts_strogatz_graph(nodes, k, p, seed=seed)
    preds: dict[int, list[int]] = {v: [] for v in range(nodes)}
    for a, b in g.edges():
        lo, hi = min(a, b), max(a, b)
        preds[hi].append(lo)
    return {v: sorted(ps) for v, ps in preds.items()}


def stage(b: NetBuilder, x: str, channels: int, stride: int, seed: int, prefix: str,
          nodes: int = NODES, k: int = NEIGHBOURS) -> str:
    """Append one RandWire stage (WS(nodes, k, 0.75)) reading ``x``; returns the stage
    output."""
    preds = ws_dag(seed, nodes, k)
    successors = {v: [w for w in preds if v in preds[w]] for v in preds}
    out: dict[int, str] = {}
    for v in sorted(preds):
        if preds[v]:
            acc = out[preds[v][0]]
            for i, u in enumerate(preds[v][1:], start=1):
                acc = b.add(acc, out[u], name=f"{prefix}/n{v}/sum{i}", shared=False)
            agg = b.relu(acc, name=f"{prefix}/n{v}/relu")
            node_stride = 1
        else:
            agg = b.relu(x, name=f"{prefix}/in_relu")
            node_stride = stride
        y = b.depthwise(agg, 3, node_stride, name=f"{prefix}/n{v}/dw")
        out[v] = b.conv(y, channels, 1, name=f"{prefix}/n{v}/pw")
    sinks = [out[v] for v in sorted(preds) if not successors[v]]
    acc = sinks[0]
    for i, s in enumerate(sinks[1:], start=1):
        acc = b.add(acc, s, name=f"{prefix}/out_sum{i}")
    return b.scale(acc, name=f"{prefix}/out_mean") if len(sinks) > 1 else acc


def randwire_stage_graph(name: str, hw: int, channels: int, seed: int, nodes: int = NODES,
                         k: int = NEIGHBOURS) -> Graph:
    """One stride-1 stage whose input has ``channels`` channels (a cell of the paper; the
    paper's generator is WS(32, 4, 0.75), ``nodes`` and ``k`` change its size and width)."""
    b = NetBuilder(name)
    x = b.input("x", (hw, hw, channels))
    return b.build([stage(b, x, channels, 1, seed, "stage", nodes, k)])


def randwire_cifar_network(name: str, channels: int, classes: int,
                           seeds: tuple[int, int, int]) -> Graph:
    b = NetBuilder(name)
    x = b.input("image", (32, 32, 3))
    y = b.conv(x, channels // 2, 3, name="stem")
    for i, (c, stride, seed) in enumerate(zip((channels, 2 * channels, 4 * channels), (1, 2, 2),
                                              seeds)):
        y = stage(b, y, c, stride, seed, f"stage{i + 1}")
    y = b.relu(b.conv(b.relu(y), 1280, 1, name="head"))
    return b.build([b.fully_connected(b.global_avg_pool(y), classes, name="classifier")])
