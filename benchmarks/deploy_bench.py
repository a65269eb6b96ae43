"""Deployment benchmark: dual-buffer vs Right In-Place builds of real MCU models on the Pico
(RP2040, rp2040js) and the Pico 2 (RP2350 proxy, QEMU mps2-an505).

    python -m benchmarks.deploy_bench [--write] [--quick] [--models vww mcunet] [--out DIR]

For each model and each build (``rip=False``: dual-buffer, ``rip=True``: RiP), through
:func:`tvm_serenity.deploy.compile_tflite` with the exact ``serenity`` schedule and the
``optimal`` arena planner: the arena, the kernel scratch, the measured stack high-water mark,
whether the image fits the Pico's 264 KiB (the build refuses it otherwise), rp2040js cycles
(Cortex-M0+ per-instruction model: no XIP wait states or bus contention, good for ratios),
QEMU instruction counts on the Pico 2 proxy, and a bit-exactness check of every device output
against the host build of the same model.c and the numpy reference interpreter (same random
int8 input). TFLite Micro's planned head arena for the same model is quoted for scale
(docs/peers.md). ``--write`` replaces the "deploy" section of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import re
import tempfile
import time
from pathlib import Path

from benchmarks._markdown import SHARED_MODELS, table, write_section
from tvm_serenity import micro
from tvm_serenity.deploy import compile_tflite, run
from tvm_serenity.errors import SerenityError

MODELS = {
    "vww": ("tinyengine/vww.tflite", 161_472),
    "mcunet": ("mcunet/mcunet-320kb-1mb_imagenet.tflite", 416_832),
}
PICO_SRAM = 264 * 1024


def _pico(path: Path, out: Path, rip: bool) -> dict:
    """Build for the Pico, run in rp2040js and natively; the figures of one build."""
    row = {"fits": "yes", "cycles": None, "stack": None, "wall": None, "exact": None}
    compiled = compile_tflite(path, "pico", out, rip=rip, build=False)
    try:
        micro.build(compiled.project_dir)            # the fit check
    except SerenityError as refusal:
        over = re.search(r"over by ([\d,]+) B", str(refusal))
        if over is None:
            raise
        row.update(fits=f"no (over by {over.group(1)} B)")
    row.update(arena=compiled.arena_bytes, scratch=compiled.scratch_bytes,
               peak=compiled.plan.liveness_peak_bytes, inplace=len(compiled.plan.inplace),
               moves=len(compiled.plan.moves))
    host = run(out, host=True)                       # checked against the reference
    if row["fits"] == "yes":
        device = run(out)                            # checked against the reference
        row.update(cycles=device.cycles, stack=device.stack_high_water,
                   wall=device.wall_seconds, exact=device.output == host.output)
    return row


def _pico2(path: Path, out: Path, rip: bool) -> int:
    compile_tflite(path, "pico2", out, rip=rip)
    return run(out).instructions                     # checked against the reference


def measure(names, out_dir: Path) -> list[dict]:
    results = []
    for name in names:
        rel, tflm_head = MODELS[name]
        path = SHARED_MODELS / rel
        if not path.is_file():
            print(f"skip {name}: {path} is absent")
            continue
        for rip in (False, True):
            t0 = time.perf_counter()
            build = "RiP" if rip else "dual"
            row = _pico(path, out_dir / f"{name}-{build}-pico", rip)
            row.update(model=name, build=build, tflm_head=tflm_head,
                       qemu=_pico2(path, out_dir / f"{name}-{build}-pico2", rip))
            row["seconds"] = time.perf_counter() - t0
            print(f"{name} {build}: {row}", flush=True)
            results.append(row)
    return results


def _fmt(value, unit=""):
    return "n/a" if value is None else (f"{value:,}{unit}" if isinstance(value, int)
                                        else f"{value:.1f}{unit}")


def render(results: list[dict]) -> str:
    headers = ["model", "build", "arena B", "scratch B", "stack B", "arena+scratch+stack B",
               "fits Pico 264 KiB", "rp2040js cycles", "emulated s", "bit-exact",
               "QEMU instructions (Pico 2)", "TFLM head arena B"]
    rows = []
    for r in results:
        ram = None if r["stack"] is None else r["arena"] + r["scratch"] + r["stack"]
        exact = "n/a" if r["exact"] is None else ("yes" if r["exact"] else "NO")
        rows.append([r["model"], r["build"], r["arena"], r["scratch"], _fmt(r["stack"]),
                     _fmt(ram), r["fits"], _fmt(r["cycles"]), _fmt(r["wall"]), exact,
                     r["qemu"], r["tflm_head"]])
    summary = []
    by_model: dict[str, dict[str, dict]] = {}
    for r in results:
        by_model.setdefault(r["model"], {})[r["build"]] = r
    for model, builds in by_model.items():
        dual, rip = builds.get("dual"), builds.get("RiP")
        if dual is None or rip is None:
            continue
        cycles = (f"{rip['cycles'] / dual['cycles']:.4f}" if rip["cycles"] and dual["cycles"]
                  else "n/a (dual-buffer build does not fit the Pico)")
        summary.append([model, f"{100 * (1 - rip['arena'] / dual['arena']):.1f}%", cycles,
                        f"{rip['qemu'] / dual['qemu']:.5f}", rip["inplace"], rip["moves"]])
    text = ["## Deploying to the Pico and the Pico 2 (`deploy`)\n\n"
            "Dual-buffer (`rip=False`) vs Right In-Place (`rip=True`) builds from "
            "`tvm_serenity.deploy.compile_tflite` (schedule `serenity`, planner `optimal`, "
            "`-Os` firmware with the model at `-O2`). Arena, scratch (kernel gather buffers "
            "outside the arena) and stack (painted high-water mark in rp2040js) are the "
            "device's activation RAM. rp2040js cycles use its per-instruction Cortex-M0+ model "
            "(no XIP wait states or bus contention): good for ratios, not wall-clock "
            "predictions. QEMU counts instructions, not cycles. Every device output equals the "
            "host build and the numpy reference interpreter byte for byte (same random "
            "input); vww takes and returns float32 as its signature says: its QUANTIZE and "
            "DEQUANTIZE run on the device (the float32 division of each of its 19,200 input "
            "values is soft float on a Cortex-M0+), the QUANTIZE in place over the float "
            "input in the RiP build. TFLM head arena: TFLite Micro's planned activation "
            "arena for the original model, for scale.", "",
            table(headers, rows), "",
            table(["model", "RiP arena saving", "RiP/dual cycles (rp2040js)",
                   "RiP/dual instructions (QEMU)", "in-place steps", "right shifts"], summary)]
    return "\n".join(text)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="update BENCHMARKS.md")
    parser.add_argument("--models", nargs="+", choices=sorted(MODELS), default=list(MODELS))
    parser.add_argument("--out", type=Path, help="keep the builds here (default: temporary)")
    parser.add_argument("--quick", action="store_true", help="vww only (a few minutes)")
    args = parser.parse_args(argv)
    if args.quick:
        args.models = ["vww"]
    with tempfile.TemporaryDirectory(prefix="deploy-bench-") as tmp:
        results = measure(args.models, args.out or Path(tmp))
    markdown = render(results)
    print(markdown)
    if args.write:
        write_section("deploy", markdown)


if __name__ == "__main__":
    main()
