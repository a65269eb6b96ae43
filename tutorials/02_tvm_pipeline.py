"""Tutorial 2: add tvm-serenity's passes to your own ``tvm.compile`` pipeline.

A small Relax module with two branches is compiled three ways and run on the Relax VM:

1. TVM's default pipeline (its StaticPlanBlockMemory planner);
2. ``relax_pipeline="serenity"``: registered when ``tvm_serenity.passes`` is imported;
3. the passes one by one in your own ``tvm.transform.Sequential``, with options as
   constructor arguments.

All three give identical outputs; the reports say what each pass decided.

Run: ``.venv/bin/python tutorials/02_tvm_pipeline.py``
"""

import numpy as np
import tvm
import tvm.script
from tvm import relax
from tvm.script import relax as R

import tvm_serenity.passes as sp


@tvm.script.ir_module
class Cell:
    @R.function
    def main(x: R.Tensor((1, 32, 32, 16), "float32")):
        with R.dataflow():
            # the frontend's order computes both wide branches before either is consumed
            a = R.nn.relu(x)
            b = R.concat((x, x, x, x), axis=3)          # 4x wider
            c = R.concat((a, a, a, a), axis=3)
            d = R.sum(b, axis=[3], keepdims=True)
            e = R.sum(c, axis=[3], keepdims=True)
            y = R.add(d, e)
            R.output(y)
        return y


x = np.random.default_rng(0).standard_normal((1, 32, 32, 16)).astype("float32")
dev = tvm.cpu()


def run(executable):
    vm = relax.VirtualMachine(executable, dev)
    return vm["main"](tvm.runtime.tensor(x, dev)).numpy()


from tvm.relax.backend.cpu_generic import pipeline as cpu  # noqa: E402

target = tvm.target.Target("llvm")

# 1. TVM's own pipeline, and the bytes its planner (StaticPlanBlockMemory) reserves for the
#    module lowered in the frontend's order.
reference = run(tvm.compile(Cell, target="llvm"))
with target:
    default_lowered = tvm.transform.Sequential(cpu.legalize_passes(target)
                                               + cpu.dataflow_lower_passes(target))(Cell)
tvm_bytes = sp.static_plan_bytes(default_lowered)
print(f"TVM StaticPlanBlockMemory, frontend order: {tvm_bytes:,} B")

# 2. The registered pipeline.
out = run(tvm.compile(Cell, target="llvm", relax_pipeline="serenity"))
np.testing.assert_array_equal(out, reference)

# 3. Your own Sequential: the passes, with options, around TVM's stages.
schedule = sp.MemoryAwareSchedule(method="serenity", time_limit=10)
arena = sp.ArenaPlan(planner="optimal", alignment=64)
seq = tvm.transform.Sequential(cpu.legalize_passes(target) + [schedule]
                               + cpu.dataflow_lower_passes(target) + [arena]
                               + cpu.finalize_passes(target)[1:])   # [0] is StaticPlanBlockMemory
with target:
    lowered = seq(Cell)
np.testing.assert_array_equal(run(tvm.compile(lowered, target="llvm",
                                              relax_pipeline="zero")), reference)
block = schedule.report.blocks[0]
print(f"MemoryAwareSchedule: peak {block.peak_before:,} -> {block.peak_after:,} B "
      f"(optimal: {block.optimal}), order {' '.join(block.order)}")
planned = arena.report.functions[0]
print(f"ArenaPlan: {planned.arena_bytes:,} B in one arena ({planned.status}) vs TVM's "
      f"{tvm_bytes:,} B")
assert planned.arena_bytes <= tvm_bytes
print("outputs identical to TVM's default build")
