"""Tutorial 4: identity graph rewriting of an int8 NAS-style cell, in TVM.

NAS cells often end in a channel concatenation read by a convolution: every branch and the
concat are alive together when the convolution runs. ``IdentityGraphRewrite`` splits that
convolution into partial convolutions, one per branch, accumulated in int32 (channel-wise
partitioning), so each branch dies as soon as its partial ran; a depthwise convolution is split
into slices written straight into its output (kernel-wise partitioning). It keeps a rewrite
only where the exact scheduler's optimal peak drops, and the result is bit-identical.

This script builds such a cell as an int8 ``.tflite`` (three 1x1 conv branches -> concat ->
RELU6 -> 3x3 conv), imports it with tvm-serenity's int8 importer, compiles it with the
``"serenity"`` pipeline with and without the rewrite, prints what the passes decided and
checks the outputs against the numpy reference interpreter (bit-exact with TFLite Micro).

Run: ``.venv/bin/python tutorials/04_identity_rewrite.py``
"""

import tempfile
from pathlib import Path

import numpy as np
import tvm
from tvm import relax

import tvm_serenity.passes as sp
from tvm_serenity.frontend import reference
from tvm_serenity.frontend.builder import ModelBuilder
from tvm_serenity.frontend.relax_import import from_tflite
from tvm_serenity.frontend.tflite_model import load_tflite

rng = np.random.default_rng(0)
b = ModelBuilder()


def conv(x, cin, cout, k, out_q, activation):
    """A CONV_2D with random int8 weights, SAME padding, stride 1 on a 16x16 map."""
    w = b.add_tensor((cout, k, k, cin), scale=rng.uniform(0.002, 0.02, cout),
                     data=rng.integers(-127, 128, (cout, k, k, cin)))
    bias = b.add_tensor((cout,), "int32", data=rng.integers(-3000, 3000, cout))
    y = b.add_tensor((1, 16, 16, cout), scale=out_q[0], zero_point=out_q[1])
    b.add_operator("CONV_2D", [x, w, bias], [y],
                   {"padding": "SAME", "stride_h": 1, "stride_w": 1, "dilation_h_factor": 1,
                    "dilation_w_factor": 1, "fused_activation_function": activation})
    return y


branch_q = (0.06, -5)             # the concat's inputs share its quantization (TFLite rule)
x = b.add_tensor((1, 16, 16, 8), scale=0.05, zero_point=-3)
branches = [conv(x, 8, 32, 1, branch_q, "RELU") for _ in range(3)]
cat = b.add_tensor((1, 16, 16, 96), scale=branch_q[0], zero_point=branch_q[1])
b.add_operator("CONCATENATION", branches, [cat], {"axis": 3})
act = b.add_tensor((1, 16, 16, 96), scale=branch_q[0], zero_point=branch_q[1])
b.add_operator("RELU6", [cat], [act], {})
y = conv(act, 96, 16, 3, (0.1, 2), "RELU6")
path = Path(tempfile.mkdtemp()) / "cell.tflite"
path.write_bytes(b.build([x], [y]))

model = load_tflite(path)
mod = from_tflite(model)
target = tvm.target.Target("llvm")
inputs = [rng.integers(-128, 128, (1, 16, 16, 8)).astype(np.int8) for _ in range(3)]

for rewrite in (False, True):
    # The pipeline as one Sequential, to read its reports; tvm.compile(mod, target="llvm",
    # relax_pipeline="serenity") runs the same passes (rewriting on).
    with target:
        lowered = sp.serenity_pipeline(rewrite=rewrite)(mod)
    report = sp.pipeline_report(lowered)
    schedule = report["schedule"]["functions"]["main"]
    arena = report["arena"]["functions"][0]
    print(f"rewrite={rewrite}: optimal peak {schedule['peak_after']:,} B, arena "
          f"{arena['arena_bytes']:,} B (TVM's StaticPlanBlockMemory on the same module: "
          f"{arena['static_plan_bytes']:,} B)")
    if rewrite:
        for block in report["rewrite"]["blocks"]:
            for kept in block["applied"]:
                print(f"  kept {kept['pattern']} of {' -> '.join(kept['nodes'])}: optimal peak "
                      f"{block['peak_before']:,} -> {block['peak_after']:,} B")
    vm = relax.VirtualMachine(tvm.compile(lowered, target=target, relax_pipeline="zero"),
                              tvm.cpu())
    for data in inputs:
        got = vm["main"](tvm.runtime.tensor(data)).numpy()
        np.testing.assert_array_equal(got, reference.run(model, [data])[0])
print("outputs bit-identical to the reference interpreter on", len(inputs), "inputs")
