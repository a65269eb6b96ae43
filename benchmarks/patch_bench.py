"""Patch-based execution of the first layers (issue #16), measured on a Pico 1 (rp2040js).

    python -m benchmarks.patch_bench [--write | --quick] [--models NAME ...] [--out DIR]
                                     [--no-run] [--time-limit S]

Per model (the shared CNNs and the MCUNet configs written as int8 ``.tflite`` by
:func:`tvm_serenity.zoo.tflite.mcunet_tflite`), three builds for ``pico`` with
:func:`tvm_serenity.deploy.compile_tflite`, all with the defaults (``serenity`` order, optimal
arena, Right In-Place):

* ``unpatched``;
* ``patch, input resident`` (``patch=True``: the search of
  :func:`tvm_serenity.rewrite.patch.plan_patches`, at most 20% extra MACs, the input in the
  arena from the start as without patches);
* ``patch, input streamed`` (``patch=True, stream_input=True``: the input is no arena tensor,
  ``model_run`` reads each patch's region through ``model_read_input``).

Columns: the plan (patched layers, the grid of each segment: ``RxC`` patches with recomputed
halos or ``Rx1c`` row strips with cached rows, extra MACs as a fraction of the network's),
the arena and how many times smaller it is than the unpatched one, the SRAM total of the fit
check against the RP2040's 270,336 B, rp2040js cycles and their ratio to the unpatched build,
and whether the outputs equal TensorFlow Lite Micro's interpreter byte for byte (one random
input). A build that does not fit is measured, not run; where the unpatched build does not
fit but the streamed one runs, both are also built for the Pico 2 and run on QEMU, for their
instruction ratio (:func:`qemu_ratio`).

MobileNetV2 (width 1.0, 224x224, int8) is too large for the Pico's flash; its row is the
memory model's peaks in MCUNetV2's accounting next to the paper's figures (Lin et al., NeurIPS
2021: 1,372 KB -> 172 KB with 4x4 patches, the input image excluded): TFLite's
stored order without in-place execution, ours, and ours patched with the input streamed (the
input excluded except the patch being read) and resident. ``--write`` replaces the "patch"
section of BENCHMARKS.md; ``--quick`` measures two shared models and MobileNetV2-224's plan
with shorter searches and writes nothing.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks._markdown import SHARED_MODELS, publish, table
from benchmarks.mlperf_bench import build, fits, tflm_outputs
from tvm_serenity.deploy import compile_tflite, run
from tvm_serenity.frontend import parse_tflite, tflite_to_graph
from tvm_serenity.frontend.interpreters import model_inputs
from tvm_serenity.frontend.tflite_model import load_tflite
from tvm_serenity.rewrite.patch import plan_patches, without_inplace
from tvm_serenity.schedule import schedule
from tvm_serenity.zoo.mcunet import network
from tvm_serenity.zoo.tflite import TFLiteNetBuilder, mcunet_tflite

SHARED = ["tinyengine/vww.tflite", "mlperf_tiny/vww_96_int8.tflite",
          "keras/mobilenet_v1_025_128.tflite", "keras/mobilenet_v2_035_96.tflite",
          "keras/mobilenet_v3_small_075_96.tflite", "mcunet/mcunet-320kb-1mb_imagenet.tflite"]
ZOO = ["mcunet-320kb-1mb", "mcunet-512kb-2mb", "mcunet-256kb-1mb", "mbv2-w0.35-r144",
       "proxyless-w0.3-r176"]
SEED = 0
PAPER = (1372, 172)          # MCUNetV2's MobileNetV2-224 peak, KB, without / with patches


def mobilenet_v2_config(width: float = 1.0, resolution: int = 224) -> dict:
    """MobileNetV2 (Sandler et al.) as a ProxylessNAS config for :func:`network`."""
    def channels(c):
        return max(8, int(c * width + 4) // 8 * 8)

    blocks, cin = [], channels(32)
    for t, c, n, s in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                       (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]:
        for i in range(n):
            cout = channels(c)
            blocks.append({"name": "MobileInvertedResidualBlock",
                           "mobile_inverted_conv": {
                               "name": "MBInvertedConvLayer", "in_channels": cin,
                               "out_channels": cout, "kernel_size": 3,
                               "stride": s if i == 0 else 1, "expand_ratio": t,
                               "act_func": "relu6", "use_se": False},
                           "shortcut": {"name": "IdentityLayer"} if i > 0 else None})
            cin = cout
    return {"name": "ProxylessNASNets", "resolution": resolution,
            "first_conv": {"kernel_size": 3, "stride": 2, "in_channels": 3,
                           "out_channels": channels(32), "act_func": "relu6"},
            "blocks": blocks,
            "feature_mix_layer": {"kernel_size": 1, "stride": 1, "out_channels": 1280,
                                  "act_func": "relu6"},
            "classifier": {"out_features": 1000}}


def _models(names, directory: Path) -> list[tuple[str, Path]]:
    out = []
    for rel in SHARED:
        stem = Path(rel).stem
        if (not names or stem in names) and (SHARED_MODELS / rel).is_file():
            out.append((stem, SHARED_MODELS / rel))
    for stem in ZOO:
        if names and stem not in names:
            continue
        path = directory / f"{stem}.tflite"
        path.write_bytes(mcunet_tflite(stem, seed=SEED))
        out.append((f"{stem} (zoo)", path))
    return out


def _measure(path: Path, out: Path, inputs, expected, time_limit: float, execute: bool,
             **options) -> dict:
    compiled = compile_tflite(path, "pico", out, input=inputs, build=False,
                              time_limit=time_limit, **options)
    fit, _ = build(compiled)
    row = {"compiled": compiled, "fit": fit, "cycles": None, "exact": None}
    if fit.fits and execute:
        result = run(out, check=False)
        row["cycles"], row["exact"] = result.cycles, list(result.outputs) == expected
    return row


def _plan_cells(row: dict) -> list:
    p = row["compiled"].patch
    if p is None:
        return ["no gain", "", ""]
    return [f"{len(p.layers)} ({p.layers[-1]})", " + ".join(seg.label for seg in p.segments),
            f"{100 * p.extra_macs_fraction:.1f}%"]


def _run_cells(row: dict, base: dict) -> list:
    fit = row["fit"]
    arena = row["compiled"].arena_bytes
    cells = [arena, f"{base['compiled'].arena_bytes / arena:.2f}", fit.total_bytes, fits(fit)]
    if row["cycles"] is None:
        return cells + ["n/a", "n/a", "n/a"]
    ratio = f"{row['cycles'] / base['cycles']:.3f}" if base["cycles"] else "n/a"
    return cells + [row["cycles"], ratio, _exact(row)]


HEAD = ["model", "arena B", "SRAM B", "fits", "cycles", "exact",
        *[column for kind in ("resident", "streamed")
          for column in (f"{kind}: layers", "grid", "extra MACs", "arena B", "x smaller",
                         "SRAM B", "fits", "cycles", "x cycles", "bit-exact vs TFLM")]]


def _exact(row: dict) -> str:
    return "n/a" if row["exact"] is None else "yes" if row["exact"] else "NO"


def measure_model(name: str, path: Path, work: Path, time_limit: float, execute: bool
                  ) -> list:
    """One table row: the three builds of the model at ``path`` (module docstring)."""
    return _row(name, _builds(path, work, time_limit, execute))


def _builds(path: Path, work: Path, time_limit: float, execute: bool) -> list[dict]:
    model = load_tflite(path)
    inputs = model_inputs(model, np.random.default_rng(SEED))
    expected = tflm_outputs(path, model, [inputs])[0]
    return [_measure(path, work / kind, inputs, expected, time_limit, execute, **options)
            for kind, options in (("plain", {}), ("resident", {"patch": True}),
                                  ("streamed", {"patch": True, "stream_input": True}))]


def _row(name: str, builds: list[dict]) -> list:
    base = builds[0]
    row = [name, base["compiled"].arena_bytes, base["fit"].total_bytes, fits(base["fit"]),
           base["cycles"] or "n/a", _exact(base)]
    for b in builds[1:]:
        row += _plan_cells(b) + _run_cells(b, base)
    return row


def qemu_ratio(path: Path, streamed: dict, work: Path, time_limit: float) -> str:
    """Where the unpatched build cannot run on the Pico: the streamed plan (forced by its
    layout, so the same plan) and the unpatched model built for the Pico 2 (RP2350, 520 KB
    SRAM) and run on QEMU; their instruction counts (QEMU models no cycles), both checked
    against the reference interpreter."""
    plan = streamed["compiled"].patch
    counts = []
    for kind, options in (("plain", {}), ("streamed", {
            "patch": True, "stream_input": True, "patch_layers": [k for k, _ in plan.layout],
            "patch_grid": [g for _, g in plan.layout]})):
        out = work / f"pico2-{kind}"
        compile_tflite(path, "pico2", out, time_limit=time_limit, **options)
        counts.append(run(out).instructions)
    return (f"on QEMU (Pico 2) the streamed plan runs {counts[1]:,} instructions, the "
            f"unpatched model {counts[0]:,}: {counts[1] / counts[0]:.3f}x, both bit-exact")


def mobilenet_v2_224(time_limit: float) -> list:
    """MobileNetV2-224's peaks in KiB (the paper's KB: 1,372 KB is the 112x112x96 expand
    output and its 112x112x16 input, 1,404,928 B)."""
    b = TFLiteNetBuilder("mbv2-w1.0-r224", SEED)
    model = parse_tflite(b.build([network(b, mobilenet_v2_config(), "mbv2-w1.0-r224")]))
    graph = tflite_to_graph(model, fold_pad=True)
    tflite_order = schedule(without_inplace(graph), "stored").peak_bytes
    ours = schedule(graph, "serenity", time_limit=time_limit).peak_bytes
    plans = [plan_patches(graph, stream_input=s, time_limit=time_limit) for s in (True, False)]
    streamed = plans[0].peak_streamed if plans[0] else ours
    resident = plans[1].peak_full_input if plans[1] else ours
    grids = "; ".join(f"{kind}: {' + '.join(seg.label for seg in p.segments)}"
                      f" over {len(p.layers)} layers, +{100 * p.extra_macs_fraction:.1f}% MACs"
                      for kind, p in zip(("streamed", "resident"), plans) if p is not None)
    return [f"{PAPER[0]:,} -> {PAPER[1]:,} KiB", f"{tflite_order / 1024:,.0f} KiB",
            f"{ours / 1024:,.0f} KiB", f"{streamed / 1024:,.0f} KiB",
            f"{resident / 1024:,.0f} KiB", grids]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true")
    mode.add_argument("--quick", action="store_true",
                      help="vww and mobilenet_v1_025_128 only, 20 s searches; writes nothing")
    parser.add_argument("--models", nargs="*", default=None)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--no-run", action="store_true")
    parser.add_argument("--time-limit", type=float, default=60.0,
                        help="seconds per build (schedule, patch search, arena)")
    args = parser.parse_args(argv)
    if args.quick:
        args.models = args.models or ["vww", "mobilenet_v1_025_128"]
        args.time_limit = min(args.time_limit, 20.0)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        work = args.out or Path(tmp)
        (work / "models").mkdir(parents=True, exist_ok=True)
        rows, notes = [], []
        for name, path in _models(args.models, work / "models"):
            builds = _builds(path, work / name.split()[0], args.time_limit, not args.no_run)
            rows.append(_row(name, builds))
            print(" | ".join(str(c) for c in rows[-1]), flush=True)
            if not args.no_run and builds[0]["cycles"] is None and builds[2]["cycles"] \
                    and builds[2]["compiled"].patch is not None:
                notes.append(f"* {name}: the unpatched build does not fit the Pico; "
                             + qemu_ratio(path, builds[2], work / name.split()[0],
                                          args.time_limit) + ".")
                print(notes[-1], flush=True)
        mbv2 = mobilenet_v2_224(args.time_limit)
    fitting = [sum(1 for r in rows if str(r[col]).startswith("yes"))
               for col, head in enumerate(HEAD) if head == "fits"]
    text = "\n".join([
        "## Patch-based execution of the first layers (`patch`)", "",
        "`python -m benchmarks.patch_bench --write`. Each model compiled for the Pico "
        "(RP2040) three times by `tvm_serenity.deploy.compile_tflite` with the defaults "
        "(serenity order, optimal arena, Right In-Place): unpatched; `patch=True` (the CLI's "
        "`--patch`: the search of `tvm_serenity.rewrite.patch.plan_patches`, a chain of "
        "segments of window layers and residual blocks, each computed in a grid of up to "
        "8x8 patches whose halos are recomputed or in full-width row strips whose layers "
        "keep the rows the next strip reads (no recomputation), at most 20% extra MACs in "
        "all, kept only where the whole network's peak drops), the input resident in the "
        "arena as without patches; and `patch=True, stream_input=True` (`--stream-input`: "
        "the input is no arena tensor, `model_run` reads each patch's or strip's region "
        "through `model_read_input`, here served from flash). layers: how many layers the "
        "segments cover (the last one); grid: one per segment, in order (`RxC`: patches, "
        "halos recomputed; `Rx1c`: R row strips, rows cached; a segment starts from the "
        "full output the one before wrote, or after layers left unpatched); extra MACs: the "
        "halo recomputation, a fraction of the network's MACs; x smaller: the unpatched "
        "arena over this one; SRAM: what the fit check counts (arena, scratch, 8 KiB stack "
        "reserve, runtime) against 270,336 B; cycles on rp2040js with one random input; "
        "bit-exact: all outputs equal TensorFlow Lite Micro's interpreter byte for byte. "
        "`(zoo)`: an MCUNet config of `../shared/models/mcunet` written as int8 `.tflite` "
        "with seeded random weights. x cycles is n/a where the unpatched build does not fit "
        "the Pico and so cannot run (its instruction ratio on QEMU is below the table).", "",
        table(HEAD, rows), "",
        f"Models that fit the Pico: unpatched {fitting[0]}, patched with the input resident "
        f"{fitting[1]}, patched with the input streamed {fitting[2]} of {len(rows)}.", "",
        *([*notes, ""] if notes else []),
        "MobileNetV2 (width 1.0, 224x224, int8; too large for the Pico's flash), peak "
        "activation memory from the memory model, against MCUNetV2's published figures "
        "(their KB is KiB: 1,372 KB is the 112x112x96 expand output with its 112x112x16 "
        "input; the 172 KB of 4x4 patches excludes the input image, which the streamed "
        "figure counts as the patch regions being read):", "",
        table(["MCUNetV2 (paper)", "TFLite order, no in-place", "ours", "ours, patched, "
               "input streamed", "ours, patched, input resident", "plans"], [mbv2])])
    publish("patch", text, t0, args.write)


if __name__ == "__main__":
    main()
