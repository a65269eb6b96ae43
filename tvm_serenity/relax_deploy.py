"""An int8 ``.tflite`` compiled by TVM with the ``"serenity"`` Relax pipeline, for the host.

What ``tvmc compile --target llvm`` / ``tvmc run`` did, on Relax: :func:`compile_relax` imports
the model with :func:`tvm_serenity.frontend.relax_import.from_tflite` (integer semantics,
bit-exact with TFLite Micro), runs :func:`tvm_serenity.passes.serenity_pipeline` (identity
graph rewriting, memory-aware order, the arena planner instead of ``StaticPlanBlockMemory``)
and writes into ``out_dir``::

    model.so       the Relax VM executable (``export_library``), loadable with
                   ``tvm.runtime.load_module`` and ``relax.VirtualMachine``
    relax.json     what the passes decided (:func:`~tvm_serenity.passes.pipeline_report`:
                   rewrites kept, schedule peaks and lower bound, arena vs TVM's own
                   ``StaticPlanBlockMemory`` total for the same module) and the model's inputs
                   and outputs
    input.npz      the inputs :func:`run_relax` runs by default (seeded random, one array per
                   model input, by name)

:func:`run_relax` loads ``model.so``, runs ``main`` and by default checks every output against
the numpy reference interpreter (:mod:`tvm_serenity.frontend.reference`) byte for byte.
"""

from __future__ import annotations

import json
import os
import struct
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import SerenityError
from .builddir import (absolute, build_kind, checked_model, new_build, sha256_of,
                       verify_build)
from .files import check_fields, read_json
from .text import counted, one_line

__all__ = ["LIBRARY_FILE", "REPORT_FILE", "INPUTS_FILE", "RelaxBuild", "RelaxRun",
           "compile_relax", "run_relax", "is_relax_build", "load_relax_report"]

LIBRARY_FILE = "model.so"
REPORT_FILE = "relax.json"
INPUTS_FILE = "input.npz"
OPERATORS_FILE = "model.tflite"  # an ONNX model's operators (deploy.MODULE_FILE alike)
KIND = "llvm"                   # the build kind in the directory's marker
# relax.json fields that run and report read, with their JSON types
_REPORT_FIELDS = {"model": str, "name": str, "inputs": list, "outputs": list, "passes": dict}


@dataclass(frozen=True)
class RelaxBuild:
    """What :func:`compile_relax` produced (also in ``out_dir``)."""

    out_dir: Path
    report: dict            # the contents of relax.json
    seconds: float

    def summary(self) -> str:
        r = self.report
        sched = r["passes"]["schedule"]["functions"].get("main", {})
        arena = r["passes"]["arena"]["functions"][0]
        rewrite = r["passes"]["rewrite"] or {"applied": 0}
        return "\n".join([
            f"{r['name']} -> llvm (Relax VM, serenity pipeline), "
            f"{counted(r['bindings'], 'operator')}, "
            f"in {self.out_dir} ({self.seconds:.1f} s)",
            f"identity rewrites kept: {rewrite['applied']}; schedule peak "
            f"{sched.get('peak_before', 0):,} -> {sched.get('peak_after', 0):,} B (lower bound "
            f"{sched.get('lower_bound', 0):,} B over all orders, optimal: "
            f"{sched.get('optimal')})",
            f"arena {arena['arena_bytes']:,} B in one allocation (liveness peak "
            f"{arena['liveness_peak_bytes']:,} B) vs TVM's StaticPlanBlockMemory "
            f"{arena['static_plan_bytes']:,} B for the same module",
            *_rip_line(r["passes"].get("rip"), arena)])


def _rip_line(choice: dict | None, arena: dict) -> list[str]:
    """What the RiP comparison of ``rip="auto"`` decided, as one summary line (none when the
    build was forced one way)."""
    if choice is None:
        return []
    sizes = choice["arena_bytes"]
    if choice["chosen"] == "rip":
        return [f"RiP kernels kept: {len(arena['in_place'])} in place, "
                f"{len(arena['dual'])} on two buffers (arena without RiP: "
                f"{sizes['plain']:,} B)"]
    return [f"RiP kernels not kept: no smaller arena (with RiP: {sizes['rip']:,} B)"]


@dataclass(frozen=True)
class RelaxRun:
    """One run of a compiled directory on the Relax VM."""

    outputs: list[np.ndarray]
    seconds: float
    checked: bool

    def to_json(self) -> dict:
        return {"backend": "Relax VM (llvm)", "seconds": round(self.seconds, 6),
                "outputs": [{"shape": list(o.shape), "dtype": str(o.dtype),
                             "values": o.reshape(-1)[:16].tolist()} for o in self.outputs],
                "checked": self.checked}


def is_relax_build(out_dir: str | os.PathLike) -> bool:
    """Whether ``out_dir`` holds a build written by :func:`compile_relax`."""
    return build_kind(out_dir) == KIND


def compile_relax(path: str | os.PathLike, out_dir: str | os.PathLike = "serenity_out", *,
                  method: str = "serenity", planner: str = "optimal", rewrite: bool = True,
                  rip: bool | str = "auto", time_limit: float | None = 30.0, seed: int = 0,
                  force: bool = False) -> RelaxBuild:
    """Compile the int8 ``.tflite`` (or int8 QDQ ``.onnx``, read back as operators through
    :func:`~.frontend.onnx_import.from_onnx` and kept as ``model.tflite``) at ``path`` for the
    host into ``out_dir`` (module docstring). ``method``/``planner``/``rewrite``/``rip``/
    ``time_limit``: options of
    :func:`~tvm_serenity.passes.serenity_pipeline` (``rip="auto"``: with and without RiP, the
    smaller arena kept; the time limit bounds the scheduler and the arena solver, each).
    ``out_dir`` is written atomically, only when new, empty or an intact
    earlier build (``force``: also an edited one; :mod:`tvm_serenity.builddir`)."""
    import tvm

    from . import passes
    from .frontend.interpreters import model_inputs
    from .frontend.relax_import import from_tflite
    from .frontend.tflite_model import load_tflite

    t0 = time.perf_counter()
    source = absolute(path)
    onnx = source.suffix.lower() == ".onnx"
    marker = {"model": str(absolute(out_dir) / OPERATORS_FILE if onnx else source)}
    with new_build(out_dir, KIND, force=force, derived=("report",), extra=marker) as tmp:
        if onnx:        # read as operators, kept as the reference the run checks against
            from .frontend.builder import tflite_bytes
            from .frontend.onnx_import import from_onnx
            from .frontend.relax_lift import operators_of
            model = operators_of(from_onnx(source), source.stem, str(source))
            (tmp / OPERATORS_FILE).write_bytes(tflite_bytes(model))
            marker["model_sha256"] = sha256_of(tmp / OPERATORS_FILE)
        else:
            model = load_tflite(source)
            marker["model_sha256"] = sha256_of(source)
        mod = from_tflite(model)
        target = tvm.target.Target("llvm")
        with target:
            lowered = passes.serenity_pipeline(method=method, planner=planner, rewrite=rewrite,
                                               rip=rip,
                                               time_limit=time_limit,
                                               plan_time_limit=time_limit, target=target)(mod)
        executable = tvm.compile(lowered, target=target, relax_pipeline="zero")
        executable.export_library(str(tmp / LIBRARY_FILE))
        inputs = model_inputs(model, np.random.default_rng(seed))
        np.savez(tmp / INPUTS_FILE, **{f"input{k}": x for k, x in enumerate(inputs)})
        report = {"model": str(source), "name": source.stem, "target": "llvm",
                  "bindings": len(mod["main"].body.blocks[0].bindings),
                  "inputs": [model.tensors[i].to_json() for i in model.inputs],
                  "outputs": [model.tensors[i].to_json() for i in model.outputs],
                  "options": {"method": method, "planner": planner, "rewrite": rewrite,
                              "rip": rip, "time_limit": time_limit},
                  "passes": passes.pipeline_report(lowered)}
        (tmp / REPORT_FILE).write_text(json.dumps(report, indent=1) + "\n")
    return RelaxBuild(absolute(out_dir), report, time.perf_counter() - t0)


def load_relax_report(out_dir: str | os.PathLike) -> dict:
    """The ``relax.json`` of a directory written by :func:`compile_relax`."""
    verify_build(out_dir, (KIND,))
    path = absolute(out_dir) / REPORT_FILE
    report = read_json(path, f"'{out_dir}' is not a Relax build (no {REPORT_FILE}); create it "
                             "with `tvm-serenity compile MODEL --target llvm`")
    return check_fields(report, _REPORT_FIELDS, path)


def _inputs_from_bytes(report: dict, data: bytes) -> list[np.ndarray]:
    if len(report["inputs"]) != 1:
        raise SerenityError(f"{report['name']} has {counted(len(report['inputs']), 'input')}; "
                            "a raw input file can only feed a model with one")
    t = report["inputs"][0]
    want = int(np.prod(t["shape"])) * np.dtype(t["dtype"]).itemsize
    if len(data) != want:
        raise SerenityError(f"the input has {counted(len(data), 'byte')}, input '{t['name']}' "
                            f"takes {want:,} "
                            f"({t['dtype']} {t['shape']})")
    return [np.frombuffer(data, dtype=t["dtype"]).reshape(t["shape"])]


def _saved_inputs(path: Path, count: int) -> list[np.ndarray]:
    """The ``count`` input arrays of a build's ``input.npz``."""
    try:
        with np.load(path) as saved:
            return [saved[f"input{k}"] for k in range(count)]
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as e:
        raise SerenityError(f"cannot read the inputs '{path}' ({type(e).__name__}: "
                            f"{str(e)[:80]}); compile again") from None


def check_shared_library(path: Path) -> None:
    """Refuse a file that is not a whole ELF shared library: every program and section header
    and every segment they describe must lie inside the file (``dlopen`` maps a truncated one
    and the process dies of SIGBUS on first access)."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise SerenityError(f"cannot read '{path}': {e.strerror}; compile again") from None
    bad = SerenityError(f"'{path}' is not a complete shared library (truncated or damaged); "
                        "compile again")
    if len(data) < 64 or data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise bad                       # 64-bit little-endian ELF, as llvm builds here
    phoff, shoff = struct.unpack_from("<QQ", data, 32)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", data, 54)
    if phoff + phnum * phentsize > len(data) or shoff + shnum * shentsize > len(data):
        raise bad
    for k in range(phnum):
        p_offset, _, _, p_filesz = struct.unpack_from("<QQQQ", data, phoff + k * phentsize + 8)
        if p_offset + p_filesz > len(data):
            raise bad


def run_relax(out_dir: str | os.PathLike, input: bytes | None = None, *,
              check: bool = True) -> RelaxRun:
    """Run ``main`` of a directory written by :func:`compile_relax` on the Relax VM. ``input``:
    raw bytes of the (single) model input (default: the compiled ``input.npz``). ``check``:
    raise :class:`~tvm_serenity.errors.SerenityError` unless every output equals the numpy
    reference interpreter's, byte for byte."""
    import tvm
    from tvm import relax

    from .frontend import reference
    from .frontend.tflite_model import load_tflite

    out = absolute(out_dir)
    report = load_relax_report(out_dir)
    model = checked_model(out_dir) if check else None
    if input is not None:
        inputs = _inputs_from_bytes(report, input)
    else:
        inputs = _saved_inputs(out / INPUTS_FILE, len(report["inputs"]))
    library = out / LIBRARY_FILE
    check_shared_library(library)       # a cut-short library would crash the process (SIGBUS)
    try:
        vm = relax.VirtualMachine(tvm.runtime.load_module(str(library)), tvm.cpu())
    except Exception as e:              # TVM's loader raises its own error types
        raise SerenityError(f"cannot load '{library}': {one_line(str(e)).splitlines()[0][:200]}"
                            "; compile again") from None
    t0 = time.perf_counter()
    result = vm["main"](*[tvm.runtime.tensor(np.ascontiguousarray(x)) for x in inputs])
    seconds = time.perf_counter() - t0
    results = list(result) if not hasattr(result, "numpy") else [result]
    outputs = [r.numpy() for r in results]
    if check:
        expected = reference.run(load_tflite(model), inputs)
        for k, (got, want) in enumerate(zip(outputs, expected)):
            if got.shape != want.shape or not np.array_equal(got, want):
                raise SerenityError(f"output {k} of the Relax VM differs from the reference "
                                    f"interpreter ({int(np.sum(got != want))} of {got.size} "
                                    "values)")
    return RelaxRun(outputs, seconds, check)
