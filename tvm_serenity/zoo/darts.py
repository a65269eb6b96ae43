"""DARTS V2 cells and a stacked DARTS CIFAR network (Liu, Simonyan & Yang, ICLR 2019).

Genotype (the paper's DARTS V2, ``genotypes.py`` of the reference code)::

    normal    = [('sep_conv_3x3', 0), ('sep_conv_3x3', 1), ('sep_conv_3x3', 0),
                 ('sep_conv_3x3', 1), ('sep_conv_3x3', 1), ('skip_connect', 0),
                 ('skip_connect', 0), ('dil_conv_3x3', 2)],            concat [2, 3, 4, 5]
    reduction = [('max_pool_3x3', 0), ('max_pool_3x3', 1), ('skip_connect', 2),
                 ('max_pool_3x3', 1), ('max_pool_3x3', 0), ('skip_connect', 2),
                 ('skip_connect', 2), ('max_pool_3x3', 1)],            concat [2, 3, 4, 5]

Intermediate node ``i`` (2..5) is the sum of the two ops of pairs ``2(i-2)`` and ``2(i-2)+1``.
Operations as TFLite sees them (BN folded, ReLU fused where the converter fuses it,
:mod:`.builder`):

* ``sep_conv_3x3`` = ReLU, dw 3x3, pw 1x1 (+ReLU fused), dw 3x3, pw 1x1;
* ``dil_conv_3x3`` = ReLU, dw 3x3 dilation 2, pw 1x1;
* ``max_pool_3x3`` = max pool 3x3 'SAME' (stride 2 on a reduction cell's inputs);
* ``skip_connect`` = identity, or FactorizedReduce on a stride-2 edge (ReLU, two 1x1 stride-2
  convs, the second on the input shifted by one pixel, concatenated);
* preprocessing of the cell inputs: ReLU + 1x1 conv to ``C`` channels (FactorizedReduce for
  ``s0`` when the previous cell reduced).

Shapes (NHWC int8): ImageNet cells at 28x28 with ``C = 48`` (the DARTS ImageNet network's first
stage; the reduction cell takes 28x28 to 14x14 with ``C = 96``), CIFAR cells at 32x32 with
``C = 36`` (reduction ``C = 72``); cell inputs carry ``4 C_prev`` channels (the previous cell's
concat).
"""

from __future__ import annotations

from ..graph import Graph
from .builder import NetBuilder

__all__ = ["NORMAL", "REDUCTION", "CONCAT", "cell", "darts_cell_graph", "darts_cifar_network"]

NORMAL = [("sep_conv_3x3", 0), ("sep_conv_3x3", 1), ("sep_conv_3x3", 0), ("sep_conv_3x3", 1),
          ("sep_conv_3x3", 1), ("skip_connect", 0), ("skip_connect", 0), ("dil_conv_3x3", 2)]
REDUCTION = [("max_pool_3x3", 0), ("max_pool_3x3", 1), ("skip_connect", 2),
             ("max_pool_3x3", 1), ("max_pool_3x3", 0), ("skip_connect", 2),
             ("skip_connect", 2), ("max_pool_3x3", 1)]
CONCAT = [2, 3, 4, 5]


def _factorized_reduce(b: NetBuilder, x: str, channels: int, prefix: str) -> str:
    r = b.relu(x)
    left = b.conv(r, channels // 2, 1, stride=2, name=f"{prefix}/fr_conv1")
    # The second path reads x[:, 1:, 1:] (TFLite: a STRIDED_SLICE, then the conv).
    shifted = b.crop(r, 1, 1, name=f"{prefix}/fr_slice")
    right = b.conv(shifted, channels - channels // 2, 1, stride=2, name=f"{prefix}/fr_conv2")
    return b.concat([left, right], name=f"{prefix}/fr_concat")


def _op(b: NetBuilder, kind: str, x: str, channels: int, stride: int, prefix: str) -> str:
    if kind == "sep_conv_3x3":
        y = b.depthwise(b.relu(x), 3, stride, name=f"{prefix}/dw1")
        y = b.relu(b.conv(y, channels, 1, name=f"{prefix}/pw1"))
        y = b.depthwise(y, 3, 1, name=f"{prefix}/dw2")
        return b.conv(y, channels, 1, name=f"{prefix}/pw2")
    if kind == "dil_conv_3x3":
        y = b.depthwise(b.relu(x), 3, stride, dilation=2, name=f"{prefix}/dw")
        return b.conv(y, channels, 1, name=f"{prefix}/pw")
    if kind == "max_pool_3x3":
        return b.pool(x, "max", 3, stride, name=f"{prefix}/maxpool")
    if kind == "skip_connect":
        return x if stride == 1 else _factorized_reduce(b, x, channels, prefix)
    raise ValueError(f"DARTS op '{kind}' is not in the DARTS V2 genotype")


def cell(b: NetBuilder, s0: str, s1: str, channels: int, reduction: bool,
         reduction_prev: bool, prefix: str) -> str:
    """Append one DARTS V2 cell reading tensors ``s0``, ``s1``; returns its concat."""
    if reduction_prev:
        p0 = _factorized_reduce(b, s0, channels, f"{prefix}/pre0")
    else:
        p0 = b.conv(b.relu(s0), channels, 1, name=f"{prefix}/pre0")
    p1 = b.conv(b.relu(s1), channels, 1, name=f"{prefix}/pre1")
    genotype = REDUCTION if reduction else NORMAL
    states = [p0, p1]
    for i in range(len(genotype) // 2):
        branches = []
        for kind, src in genotype[2 * i: 2 * i + 2]:
            stride = 2 if reduction and src < 2 else 1
            branches.append(_op(b, kind, states[src], channels, stride,
                                f"{prefix}/n{i + 2}_{kind}_{src}"))
        states.append(b.add(branches[0], branches[1], name=f"{prefix}/n{i + 2}"))
    return b.concat([states[i] for i in CONCAT], name=f"{prefix}/concat")


def darts_cell_graph(name: str, hw: int, channels: int, reduction: bool) -> Graph:
    """One cell whose two inputs are previous cells' outputs (``4 C_prev`` channels)."""
    b = NetBuilder(name)
    c_prev = channels // 2 if reduction else channels
    s0 = b.input("s0", (hw, hw, 4 * c_prev))
    s1 = b.input("s1", (hw, hw, 4 * c_prev))
    return b.build([cell(b, s0, s1, channels, reduction, False, "cell")])


def darts_cifar_network(name: str, layers: int = 8, channels: int = 36,
                        classes: int = 10) -> Graph:
    """The DARTS CIFAR network: stem 3x3 conv to ``3 C``, ``layers`` cells with reductions at
    ``layers // 3`` and ``2 layers // 3`` (channels doubling), global pool, classifier."""
    b = NetBuilder(name)
    x = b.input("image", (32, 32, 3))
    stem = b.conv(x, 3 * channels, 3, name="stem")
    s0 = s1 = stem
    c = channels
    reduction_prev = False
    for i in range(layers):
        reduction = i in (layers // 3, 2 * layers // 3)
        if reduction:
            c *= 2
        out = cell(b, s0, s1, c, reduction, reduction_prev, f"cell{i}")
        s0, s1, reduction_prev = s1, out, reduction
    return b.build([b.fully_connected(b.global_avg_pool(s1), classes, name="classifier")])
