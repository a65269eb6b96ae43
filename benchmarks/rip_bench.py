"""Per-layer Right In-Place workspace over every convolution of the real and zoo models.

For each CONV_2D / DEPTHWISE_CONV_2D (pointwise included): dual-buffer bytes (input + output),
the RiP workspace (O(1) closed form, ``tvm_serenity.rip``), the generalized herringbone bound
(the corruption simulator replaying Gural & Murmann's traversal, binary search on the gap;
only for layers small enough to simulate within the budget, ``-`` otherwise) and the saving.
Per model: layer count, mean saving vs dual buffering, layers where RiP equals / is within 5%
of herringbone. Section "rip" of BENCHMARKS.md.

    python -m benchmarks.rip_bench [--quick] [--write] [--herringbone-limit N]
"""

from __future__ import annotations

import argparse
import time

from benchmarks._markdown import SHARED_MODELS, table, write_section
from tvm_serenity import zoo
from tvm_serenity.rip import rip_workspace_for_geometry, window_geometry
from tvm_serenity.rip.herringbone import herringbone_min_workspace

CONV_OPS = ("conv2d", "depthwise_conv2d")
REAL_MODELS = ["tinyengine/vww.tflite", "mcunet/mcunet-320kb-1mb_imagenet.tflite",
               "keras/mobilenet_v1_025_128.tflite", "keras/mobilenet_v2_035_96.tflite",
               "keras/mobilenet_v3_small_075_96.tflite",
               "keras/darts_v2_normal_cifar_32x32_C36.tflite",
               "keras/randwire_cifar100_C78_cellA.tflite"]
ZOO_MODELS = ["vgg16", "mobilenet_v1", "mcunet-320kb-1mb", "darts_v2_normal_cifar"]


def conv_layers(graph):
    """(layer name, ConvGeometry) of every convolution node of a graph IR."""
    out = []
    for node in graph.nodes.values():
        if node.op not in CONV_OPS:
            continue
        out.append((node.name, window_geometry(graph, node)))
    return out


def model_graphs(quick: bool):
    from tvm_serenity.frontend import tflite_to_graph
    for rel in REAL_MODELS[:2] if quick else REAL_MODELS:
        path = SHARED_MODELS / rel
        if path.is_file():
            yield path.stem, tflite_to_graph(path)
    for name in ZOO_MODELS[:1] if quick else ZOO_MODELS:
        if name in zoo.names():
            yield f"zoo:{name}", zoo.build(name)


def measure(quick: bool, herringbone_limit: int):
    rows, summary = [], []
    for model, graph in model_graphs(quick):
        layers = conv_layers(graph)
        exact = within5 = simulated = 0
        savings = []
        for name, geo in layers:
            rip = rip_workspace_for_geometry(geo)
            work = geo.out_height * geo.out_width * geo.out_channels * \
                geo.kernel[0] * geo.kernel[1] * geo.in_hwc[2] // geo.groups
            herring = herringbone_min_workspace(geo, gather_first=True) if work <= herringbone_limit else None
            if herring is not None:
                simulated += 1
                exact += rip.workspace_bytes == herring
                within5 += rip.workspace_bytes <= 1.05 * herring
            saving = 1 - rip.workspace_bytes / rip.dual_buffer_bytes
            savings.append(saving)
            rows.append([model, name, "dw" if geo.groups > 1 else
                         f"{geo.kernel[0]}x{geo.kernel[1]}",
                         f"{geo.in_hwc[0]}x{geo.in_hwc[1]}x{geo.in_hwc[2]}>{geo.out_channels}"
                         f"/s{geo.stride[0]}", rip.dual_buffer_bytes, rip.workspace_bytes,
                         "-" if herring is None else herring, f"{saving:.1%}"])
        summary.append([model, len(layers), f"{sum(savings) / max(len(savings), 1):.1%}",
                        simulated, exact, within5])
    return rows, summary


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--herringbone-limit", type=int, default=4_000_000, metavar="MACS",
                    help="simulate herringbone only for layers with at most this many MACs")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    rows, summary = measure(args.quick, args.herringbone_limit)
    head = table(["model", "conv layers", "mean RiP saving vs dual", "herringbone simulated",
                  "RiP == herringbone", "RiP within 5%"], summary)
    layers = table(["model", "layer", "kernel", "geometry", "dual buffer B", "RiP B",
                    "herringbone B", "saving"], rows)
    text = (f"## Right In-Place workspace per convolution\n\n`python -m benchmarks.rip_bench"
            f"{' --quick' if args.quick else ''}` ({time.perf_counter() - t0:.0f} s). RiP: the "
            "O(1) closed form; herringbone: Gural & Murmann's traversal replayed by the same "
            "corruption simulator with the receptive field gathered first like RiP, minimum safe "
            "workspace by binary search (layers over "
            f"{args.herringbone_limit:,} MACs not simulated). Every RiP figure equals the "
            "simulator's minimum (10,000-layer sweep: `make sweep`).\n\n" + head +
            "\n\n<details><summary>every layer</summary>\n\n" + layers + "\n\n</details>\n")
    print(head)
    print(f"{len(rows)} layers")
    if args.write:
        write_section("rip", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
