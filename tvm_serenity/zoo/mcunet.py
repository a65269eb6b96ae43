"""MobileNetV2 / ProxylessNAS / MCUNet networks from their ``ProxylessNASNets`` JSON configs.

The configs (``first_conv``, ``blocks`` of ``MobileInvertedResidualBlock``, optional
``feature_mix_layer``, ``classifier``, ``resolution``) come from MIT Han Lab's tinyml
repository and live in the shared models folder, ``<repo>/../shared/models/mcunet`` (never
copied into this repository). Each block, as TFLite sees it (BN folded, ReLU6 fused):

* ``MBInvertedConvLayer``: 1x1 expand to ``mid_channels`` (``in * expand_ratio`` when absent;
  skipped when ``expand_ratio == 1``), depthwise ``k x k`` with the block's stride, 1x1
  projection (linear); an ``IdentityLayer`` shortcut adds the block input;
* ``ZeroLayer`` with an identity shortcut: the block is the identity (no op).

The head is the optional 1x1 ``feature_mix_layer``, a global average pool and the classifier.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..graph import Graph, GraphError
from .builder import NetBuilder

__all__ = ["MODELS_DIR", "config_names", "mcunet_graph", "graph_from_config", "network"]

MODELS_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "models" / "mcunet"


def config_names() -> list[str]:
    """Config file stems found in :data:`MODELS_DIR` (empty when the folder is absent)."""
    if not MODELS_DIR.is_dir():
        return []
    return sorted(p.stem for p in MODELS_DIR.glob("*.json"))


def _conv_layer(b: NetBuilder, x: str, layer: dict, name: str) -> str:
    if layer.get("groups", 1) != 1 or layer.get("dilation", 1) != 1:
        raise GraphError(f"{name}: only plain convolutions are supported in ConvLayer")
    y = b.conv(x, layer["out_channels"], layer["kernel_size"], layer.get("stride", 1),
               name=name)
    return b.relu(y, six=layer.get("act_func") == "relu6") if layer.get("act_func") else y


def network(b, config: dict, name: str) -> str:
    """The MCUNet / ProxylessNAS network of ``config`` on any builder ``b`` with the
    ``NetBuilder`` calls (the graph IR's :class:`NetBuilder`, or the int8 TFLite writer
    :class:`tvm_serenity.zoo.tflite.TFLiteNetBuilder`); returns the logits' name."""
    if config.get("name") != "ProxylessNASNets":
        raise GraphError(f"{name}: not a ProxylessNASNets config (name={config.get('name')!r})")
    r = config["resolution"]
    x = b.input("image", (r, r, config["first_conv"]["in_channels"]))
    x = _conv_layer(b, x, config["first_conv"], "first_conv")
    for i, block in enumerate(config["blocks"]):
        conv, shortcut = block["mobile_inverted_conv"], block.get("shortcut")
        if conv["name"] == "ZeroLayer":
            if not shortcut:
                raise GraphError(f"{name}: block {i} is a ZeroLayer without a shortcut")
            continue
        if conv["name"] != "MBInvertedConvLayer" or conv.get("use_se"):
            raise GraphError(f"{name}: block {i}: unsupported layer {conv['name']}"
                             f"{' with squeeze-excite' if conv.get('use_se') else ''}")
        six = conv.get("act_func", "relu6") == "relu6"
        y = x
        if conv["expand_ratio"] != 1:
            mid = conv.get("mid_channels") or conv["in_channels"] * conv["expand_ratio"]
            y = b.relu(b.conv(y, mid, 1, name=f"b{i}/expand"), six=six)
        y = b.relu(b.depthwise(y, conv["kernel_size"], conv["stride"], name=f"b{i}/dw"),
                   six=six)
        y = b.conv(y, conv["out_channels"], 1, name=f"b{i}/project")
        x = b.add(y, x, name=f"b{i}/add") if shortcut else y
    if config.get("feature_mix_layer"):
        x = _conv_layer(b, x, config["feature_mix_layer"], "feature_mix")
    return b.fully_connected(b.global_avg_pool(x), config["classifier"]["out_features"],
                             name="classifier")


def graph_from_config(config: dict, name: str) -> Graph:
    b = NetBuilder(name)
    return b.build([network(b, config, name)])


def mcunet_graph(stem: str) -> Graph:
    """Build the network of ``<MODELS_DIR>/<stem>.json``."""
    path = MODELS_DIR / f"{stem}.json"
    if not path.is_file():
        raise GraphError(f"MCUNet config '{path}' not found (the shared models folder is "
                         f"expected at {MODELS_DIR.parent})")
    return graph_from_config(json.loads(path.read_text()), stem.replace("_imagenet", ""))
