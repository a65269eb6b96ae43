"""Plain feed-forward networks of the RiP paper's graph-level table (keras.applications
shapes, int8, 224x224): VGG-16 and MobileNet (v1, alpha 1.0).

Their peaks check the in-place model against published figures: under Right In-Place every
layer needs one workspace instead of input + output (the paper's Table 7: VGG-16 3,150.1 KB
vs 6,272.0 KB, MobileNet 784.0 KB vs 1,176.0 KB).
"""

from __future__ import annotations

from ..graph import Graph
from .builder import NetBuilder

__all__ = ["vgg16_graph", "mobilenet_v1_graph"]

_VGG16 = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M",
          512, 512, 512, "M"]

# (pointwise channels, depthwise stride) of MobileNet v1's 13 separable blocks
_MOBILENET_V1 = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), (512, 1),
                 (512, 1), (512, 1), (512, 1), (512, 1), (1024, 2), (1024, 1)]


def vgg16_graph(name: str = "vgg16", size: int = 224, classes: int = 1000) -> Graph:
    net = NetBuilder(name)
    x = net.input("input", (size, size, 3))
    block, index = 1, 1
    for layer in _VGG16:
        if layer == "M":
            x = net.pool(x, "max", 2, 2, name=f"block{block}_pool")
            block, index = block + 1, 1
        else:
            x = net.relu(net.conv(x, layer, 3, name=f"block{block}_conv{index}"))
            index += 1
    x = net.relu(net.fully_connected(x, 4096, name="fc1"))
    x = net.relu(net.fully_connected(x, 4096, name="fc2"))
    return net.build([net.fully_connected(x, classes, name="predictions")])


def mobilenet_v1_graph(name: str = "mobilenet_v1", size: int = 224,
                       classes: int = 1000) -> Graph:
    net = NetBuilder(name)
    x = net.input("input", (size, size, 3))
    x = net.relu(net.conv(x, 32, 3, stride=2, name="conv1"), six=True)
    for i, (channels, stride) in enumerate(_MOBILENET_V1, start=1):
        x = net.relu(net.depthwise(x, 3, stride, name=f"conv_dw_{i}"), six=True)
        x = net.relu(net.conv(x, channels, 1, name=f"conv_pw_{i}"), six=True)
    x = net.global_avg_pool(x)
    return net.build([net.fully_connected(x, classes, name="predictions")])
