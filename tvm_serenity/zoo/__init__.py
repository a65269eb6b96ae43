"""Benchmark graphs built from public network definitions (int8, NHWC, batch 1).

``names()`` lists every entry, ``build(name)`` returns its :class:`~tvm_serenity.graph.Graph`,
``kind(name)`` says whether it is a ``"cell"`` (one irregular cell or stage: the unit SERENITY
schedules) or a ``"network"`` (a whole stacked network). ``python -m tvm_serenity.zoo NAME``
prints the interchange JSON; ``--list`` lists the names.

* DARTS V2 normal and reduction cells at ImageNet and CIFAR shapes, and a stacked 8-cell DARTS
  CIFAR network (:mod:`.darts`);
* NASNet-A normal and reduction cells at NASNet-A Mobile shapes (:mod:`.nasnet`);
* RandWire WS(32, 4, 0.75) stages at CIFAR-10 / CIFAR-100 sizes for three seeds, and
  three-stage RandWire CIFAR networks (:mod:`.randwire`);
* VGG-16 and MobileNet v1 at 224x224, the RiP paper's plain networks (:mod:`.classic`);
* MobileNetV2 / ProxylessNAS / MCUNet networks from the shared configs (:mod:`.mcunet`), listed
  only when the shared models folder is present.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..graph import Graph, GraphError
from . import classic, darts, mcunet, nasnet, randwire

__all__ = ["Entry", "names", "build", "kind", "describe", "entries"]

RANDWIRE_SEEDS = (0, 1, 2)


@dataclass(frozen=True)
class Entry:
    name: str
    kind: str                         # "cell" or "network"
    description: str
    make: Callable[[], Graph]


def _static_entries() -> list[Entry]:
    out = [
        Entry("darts_v2_normal_imagenet", "cell", "DARTS V2 normal cell, 28x28, C=48",
              lambda: darts.darts_cell_graph("darts_v2_normal_imagenet", 28, 48, False)),
        Entry("darts_v2_reduction_imagenet", "cell", "DARTS V2 reduction cell, 28x28->14x14, "
              "C=96", lambda: darts.darts_cell_graph("darts_v2_reduction_imagenet", 28, 96,
                                                      True)),
        Entry("darts_v2_normal_cifar", "cell", "DARTS V2 normal cell, 32x32, C=36",
              lambda: darts.darts_cell_graph("darts_v2_normal_cifar", 32, 36, False)),
        Entry("darts_v2_reduction_cifar", "cell", "DARTS V2 reduction cell, 32x32->16x16, "
              "C=72", lambda: darts.darts_cell_graph("darts_v2_reduction_cifar", 32, 72, True)),
    ]
    out += [
        Entry("nasnet_a_normal_mobile", "cell", "NASNet-A normal cell, 28x28, 44 filters",
              lambda: nasnet.nasnet_cell_graph("nasnet_a_normal_mobile", 28, 264, 44, False)),
        Entry("nasnet_a_reduction_mobile", "cell", "NASNet-A reduction cell, 28x28->14x14, "
              "88 filters", lambda: nasnet.nasnet_cell_graph("nasnet_a_reduction_mobile", 28,
                                                              264, 88, True)),
    ]
    for dataset, channels in (("cifar10", 40), ("cifar100", 78)):
        for seed in RANDWIRE_SEEDS:
            name = f"randwire_{dataset}_C{channels}_s{seed}"
            out.append(Entry(name, "cell", f"RandWire WS(32,4,0.75) stage, seed {seed}, "
                             f"32x32, C={channels}",
                             lambda n=name, c=channels, s=seed:
                             randwire.randwire_stage_graph(n, 32, c, s)))
    out.append(Entry("darts_v2_cifar_net8", "network", "DARTS V2 CIFAR network, 8 cells, C=36",
                     lambda: darts.darts_cifar_network("darts_v2_cifar_net8", 8, 36, 10)))
    for dataset, channels, classes in (("cifar10", 40, 10), ("cifar100", 78, 100)):
        name = f"randwire_{dataset}_net"
        out.append(Entry(name, "network", f"RandWire CIFAR network, 3 WS stages (seeds "
                         f"{RANDWIRE_SEEDS}), C={channels}",
                         lambda n=name, c=channels, k=classes:
                         randwire.randwire_cifar_network(n, c, k, RANDWIRE_SEEDS)))
    out += [Entry("vgg16", "network", "VGG-16, 224x224 (keras.applications shapes)",
                  classic.vgg16_graph),
            Entry("mobilenet_v1", "network", "MobileNet v1 1.0, 224x224",
                  classic.mobilenet_v1_graph)]
    return out


def entries() -> dict[str, Entry]:
    """Every entry by name (MCUNet ones only when their configs are present)."""
    out = {e.name: e for e in _static_entries()}
    for stem in mcunet.config_names():
        name = stem.replace("_imagenet", "")
        out[name] = Entry(name, "network", f"{name} from the MCUNet configs",
                          lambda s=stem: mcunet.mcunet_graph(s))
    return out


def names(kind_filter: str | None = None) -> list[str]:
    return [n for n, e in entries().items() if kind_filter is None or e.kind == kind_filter]


def _entry(name: str) -> Entry:
    all_entries = entries()
    if name not in all_entries:
        raise GraphError(f"unknown zoo graph '{name}' (see `python -m tvm_serenity.zoo --list`)")
    return all_entries[name]


def build(name: str) -> Graph:
    return _entry(name).make()


def kind(name: str) -> str:
    return _entry(name).kind


def describe(name: str) -> str:
    return _entry(name).description
