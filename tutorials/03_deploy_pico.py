"""Tutorial 3: deploy a ``.tflite`` to an emulated Raspberry Pi Pico, RiP vs dual buffering.

The model (``MODEL.tflite`` on the command line; default: TinyEngine's VWW model in
``../shared/models`` when present, else the built-in demo model) is compiled twice for the
``pico`` board (RP2040, Cortex-M0+, 264 KiB SRAM) with the same memory-aware order:

* dual buffering: every layer reads one buffer and writes another;
* Right In-Place: a layer that consumes its input last writes its output over it, the input
  right-aligned in one workspace with the minimum safe gap.

Both firmware images run on rp2040js; the outputs are checked byte for byte against the int8
reference interpreter (bit-exact with TensorFlow Lite Micro), and arena, stack and cycles are
printed side by side. A build that does not fit the Pico's SRAM is refused before it runs,
with the numbers (the built-in demo model's dual-buffer build is such a case).

Run: ``.venv/bin/python tutorials/03_deploy_pico.py [MODEL.tflite] [OUT_DIR]``
"""

import sys
from pathlib import Path

from tvm_serenity import deploy
from tvm_serenity.demo import demo_model_bytes
from tvm_serenity.errors import SerenityError

repo = Path(__file__).resolve().parent.parent
out_dir = Path(sys.argv[2] if len(sys.argv) > 2 else "tutorial_03_out")
if len(sys.argv) > 1:
    model = Path(sys.argv[1])
elif (repo.parent / "shared/models/tinyengine/vww.tflite").is_file():
    model = repo.parent / "shared/models/tinyengine/vww.tflite"
else:
    out_dir.mkdir(parents=True, exist_ok=True)
    model = out_dir / "demo.tflite"
    model.write_bytes(demo_model_bytes())
print(f"model: {model}")

rows = {}
for label, rip in (("dual buffer", False), ("Right In-Place", True)):
    try:
        compiled = deploy.compile_tflite(model, "pico", out_dir / label.replace(" ", "_"),
                                         rip=rip, time_limit=30)
    except SerenityError as e:                     # the SRAM fit check refuses it
        print(f"{label:>15}: {e}")
        continue
    result = deploy.run(compiled.out_dir)          # rp2040js; raises unless bit-exact
    rows[label] = (compiled, result)
    print(f"{label:>15}: arena {compiled.arena_bytes:>8,} B  stack {result.stack_high_water:>5} B"
          f"  cycles {result.cycles:>13,}  SRAM {compiled.fit.total_bytes:>8,} B "
          f"(fits 264 KiB)")

if len(rows) == 2:
    dual, rip = rows["dual buffer"], rows["Right In-Place"]
    print(f"RiP arena {1 - rip[0].arena_bytes / dual[0].arena_bytes:.1%} smaller, "
          f"cycles ratio {rip[1].cycles / dual[1].cycles:.4f}, outputs identical: "
          f"{rip[1].output == dual[1].output}")
if "Right In-Place" in rows:
    print(f"report: tvm-serenity report {rows['Right In-Place'][0].out_dir}")
