"""NASNet-A normal and reduction cells (Zoph, Vasudevan, Shlens & Le, CVPR 2018).

The cell definitions of TF-Slim's ``nasnet_utils.py`` (``NasNetANormalCell``,
``NasNetAReductionCell``): ten operations applied pairwise to hidden states chosen by
``hiddenstate_indices``, each pair summed into a new hidden state; the output concatenates the
hidden states marked unused. Hidden state 0 is the current input after ReLU + 1x1 conv,
hidden state 1 the previous cell's output brought to the same channel count (ReLU + 1x1 conv).
On a reduction cell the operations reading states 0 and 1 have stride 2.

As TFLite sees the operations (:mod:`.builder`): ``separable_KxK_2`` = two (ReLU, depthwise
KxK, pointwise 1x1) layers, the second ReLU fused into the first pointwise conv; pooling is
'SAME' average/max pooling (followed by a 1x1 conv when the channel count differs); ``none``
is the identity (a ReLU + 1x1 conv when it must change stride or channels).

Shapes: the NASNet-A Mobile (4 @ 1056) ImageNet network's first stage, 28x28 with 44 filters
(cell inputs carry the 6 x 44 = 264 channels of a normal cell's output); its first reduction
cell takes 28x28x264 to 14x14 with 88 filters.
"""

from __future__ import annotations

from ..graph import Graph
from .builder import NetBuilder

__all__ = ["NORMAL", "REDUCTION", "cell", "nasnet_cell_graph"]

# (operations, hiddenstate_indices, used_hiddenstates), as in nasnet_utils.py
NORMAL = (["separable_5x5_2", "separable_3x3_2", "separable_5x5_2", "separable_3x3_2",
           "avg_pool_3x3", "none", "avg_pool_3x3", "avg_pool_3x3", "separable_3x3_2", "none"],
          [0, 1, 1, 1, 0, 1, 1, 1, 0, 0], [1, 0, 0, 0, 0, 0, 0])
REDUCTION = (["separable_5x5_2", "separable_7x7_2", "max_pool_3x3", "separable_7x7_2",
              "avg_pool_3x3", "separable_5x5_2", "none", "avg_pool_3x3", "separable_3x3_2",
              "max_pool_3x3"],
             [0, 1, 0, 1, 0, 1, 3, 2, 2, 0], [1, 1, 1, 0, 0, 0, 0])


def _operation(b: NetBuilder, kind: str, x: str, filters: int, stride: int, prefix: str) -> str:
    channels = b.shape[x][2]
    if kind.startswith("separable_"):
        k = int(kind.split("_")[1].split("x")[0])
        y = b.conv(b.depthwise(b.relu(x), k, stride, name=f"{prefix}/dw1"), filters, 1,
                   name=f"{prefix}/pw1")
        return b.conv(b.depthwise(b.relu(y), k, 1, name=f"{prefix}/dw2"), filters, 1,
                      name=f"{prefix}/pw2")
    if kind == "none":
        if stride == 1 and channels == filters:
            return x
        return b.conv(b.relu(x), filters, 1, stride, name=f"{prefix}/1x1")
    pool, window = kind.split("_pool_")
    y = b.pool(x, pool, int(window.split("x")[0]), stride, name=f"{prefix}/{pool}pool")
    return y if channels == filters else b.conv(y, filters, 1, name=f"{prefix}/1x1")


def cell(b: NetBuilder, current: str, previous: str, filters: int, reduction: bool,
         prefix: str) -> str:
    """Append one NASNet-A cell; both inputs must have the same spatial size."""
    if b.shape[current][:2] != b.shape[previous][:2]:
        raise ValueError(f"{prefix}: inputs of different spatial size need a factorized "
                         "reduction, which this builder does not model")
    operations, indices, used = REDUCTION if reduction else NORMAL
    h0 = b.conv(b.relu(current), filters, 1, name=f"{prefix}/1x1")
    h1 = previous
    if b.shape[previous][2] != filters:
        h1 = b.conv(b.relu(previous), filters, 1, name=f"{prefix}/prev_1x1")
    hidden = [h0, h1]
    for i in range(5):
        pair = []
        for j in (2 * i, 2 * i + 1):
            src = indices[j]
            stride = 2 if reduction and src < 2 else 1
            pair.append(_operation(b, operations[j], hidden[src], filters, stride,
                                   f"{prefix}/comb{i}_{'left' if j % 2 == 0 else 'right'}"))
        hidden.append(b.add(pair[0], pair[1], name=f"{prefix}/comb{i}"))
    return b.concat([h for h, u in zip(hidden, used) if not u], name=f"{prefix}/concat")


def nasnet_cell_graph(name: str, hw: int, in_channels: int, filters: int,
                      reduction: bool) -> Graph:
    b = NetBuilder(name)
    current = b.input("current", (hw, hw, in_channels))
    previous = b.input("previous", (hw, hw, in_channels))
    return b.build([cell(b, current, previous, filters, reduction, "cell")])
