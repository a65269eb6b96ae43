"""ShareKernels: descriptions dropped, identical kernels merged, nothing computed changes."""

import numpy as np
import tvm
import tvm_ffi
from tvm import relax, tirx

from tflite_cases import model_path
from tvm_serenity.frontend import load_tflite
from tvm_serenity.frontend.reference import Interpreter
from tvm_serenity.frontend.relax_import import OPERATOR_ATTR, from_tflite, kernel_callee
from tvm_serenity.passes import ShareKernels


def _kernels(mod):
    return {gv: f for gv, f in mod.functions.items() if isinstance(f, tirx.PrimFunc) or (
        isinstance(f, relax.Function) and f.attrs is not None and "Primitive" in f.attrs)}


def test_identical_kernels_are_merged_and_the_module_computes_the_same():
    path = model_path("mlperf_tiny/kws_ref_model.tflite")
    mod = from_tflite(path)
    share = ShareKernels()
    out = share(mod)
    kernels = _kernels(out)
    # independently: the distinct kernels by pairwise structural equality, attributes dropped
    bare = [f.without_attr(OPERATOR_ATTR).without_attr("serenity.constants")
            .without_attr("serenity.kernel_hash") for f in _kernels(mod).values()]
    distinct = []
    for f in bare:
        if not any(tvm_ffi.structural_equal(f, g, map_free_vars=True) for g in distinct):
            distinct.append(f)
    assert len(kernels) == len(distinct) < len(bare) and share.merged == len(bare) - len(distinct)
    assert not any(OPERATOR_ATTR in f.attrs for f in kernels.values())
    called = {kernel_callee(b.value)[0] for b in out["main"].body.blocks[0].bindings} - {None}
    assert called == set(kernels)
    model = load_tflite(path)
    x = np.random.default_rng(2).integers(-128, 128, model.tensors[model.inputs[0]].shape,
                                          dtype=np.int8)
    vm = relax.VirtualMachine(tvm.compile(out, target="llvm"), tvm.cpu())
    got = vm["main"](tvm.runtime.tensor(x)).numpy()
    assert np.array_equal(got, Interpreter(model).run([x])[0])
