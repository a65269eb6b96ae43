"""The TVM benchmark (benchmarks/tvm_bench.py): its quick path on one shared model, with the
figures checked against each other and TVM's own compile, and its failure rows."""

import pytest
import tvm
from tvm.relax.backend.cpu_generic import pipeline as cpu

import tvm_serenity.passes as sp
from benchmarks import _markdown, tvm_bench      # the repository root is on pytest's pythonpath
from tvm_serenity.frontend import load_tflite
from tvm_serenity.frontend.interpreters import available
from tvm_serenity.frontend.relax_import import from_tflite

MODEL = "mobilenet_v1_025_128"          # the fastest of the shared models to compile


@tvm.instrument.pass_instrument
class _BeforeStaticPlan:
    """The module TVM's default pipeline hands to StaticPlanBlockMemory."""

    def __init__(self):
        self.mod = None

    def run_before_pass(self, mod, info):
        if info.name == "StaticPlanBlockMemory":
            self.mod = mod


@pytest.mark.slow
def test_quick_path_on_one_model():
    rel = tvm_bench.NAMES[MODEL]
    path = tvm_bench.SHARED_MODELS / rel
    if not path.is_file():
        pytest.skip(f"{path} is absent (third-party model data, not in the repository)")
    (row,) = tvm_bench.run(tvm_bench.select([MODEL]), tvm_bench.QUICK_INPUTS, progress=False)
    assert row.notes == []
    assert row.bindings == len(load_tflite(path).operators)

    # "tvm.compile" is what a plain tvm.compile(mod, "llvm") plans; "TVM CPU" what TVM's CPU
    # stage lists (legalize with fusion, dataflow lowering) leave to StaticPlanBlockMemory,
    # both for the module with each distinct kernel once (as the serenity pipeline builds it)
    mod = sp.ShareKernels()(from_tflite(path))
    before = _BeforeStaticPlan()
    with tvm.transform.PassContext(instruments=[before]):
        tvm.compile(mod, target="llvm")
    assert row.tvm_compile == sp.static_plan_bytes(before.mod) > 0
    target = tvm.target.Target("llvm")
    with target:
        lowered = tvm.transform.Sequential([*cpu.library_dispatch_passes(target),
                                            *cpu.legalize_passes(target),
                                            *cpu.dataflow_lower_passes(target)])(mod)
    assert row.tvm_cpu == sp.static_plan_bytes(lowered) > 0

    # the arena is laid out for the tensors StaticPlanBlockMemory would plan, same order:
    # never more than it, never less than their liveness peak (padded to the alignment)
    assert 0 < row.liveness <= row.bound <= row.arena <= row.tvm_serenity
    assert row.any_order_bound <= row.peak_after <= row.peak_before
    assert row.tvm_stored > 0

    # bit-exact on every input set with every checker that is installed
    assert row.inputs == tvm_bench.QUICK_INPUTS
    assert row.exact["ref"] == row.inputs
    for kind in tvm_bench.CHECKERS[1:]:
        assert row.exact[kind] == (row.inputs if available(kind) else "n/a")

    markdown = tvm_bench.render([row])
    (line,) = [ln for ln in markdown.splitlines() if ln.startswith(f"| {MODEL} |")]
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert f"{row.arena:,}" in cells and f"{row.tvm_cpu:,}" in cells
    assert f"{row.tvm_cpu / row.arena:.2f}x" in cells
    n = row.inputs
    assert f"{n}/{n}" in line


def test_failures_are_rows(tmp_path):
    bad = tmp_path / "garbage.tflite"
    bad.write_bytes(b"not a flatbuffer")
    absent, broken = tvm_bench.measure("keras/no_such_model.tflite", 1), \
        tvm_bench.measure(str(bad), 1)
    assert absent.notes and "absent" in absent.notes[0]
    assert broken.notes and broken.notes[0].startswith("import failed: ")
    markdown = tvm_bench.render([absent, broken])
    assert "| no_such_model | n/a |" in markdown and "| garbage | n/a |" in markdown
    assert "Traceback" not in markdown


def test_section_goes_after_alloc(tmp_path):
    md = tmp_path / "BENCHMARKS.md"
    for name in ("rip", "alloc", "tvm"):
        _markdown.write_section(name, f"{name} body", md)
    text = md.read_text()
    assert text.index("BEGIN alloc") < text.index("BEGIN tvm") < text.index("BEGIN rip")
