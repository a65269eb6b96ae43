"""From a model to a measured deployment on a Pico, a Pico 2 or the host, in two calls.

:func:`compile_tflite` (a ``.tflite``) and :func:`compile_module` (a Relax module of integer
kernels, e.g. built with ``BlockBuilder`` or from ONNX) share one route and write everything
into ``out_dir``::

    front end: TFLite int8 model, or a Relax module read back as operators
        ─ integer_core (float edges kept, or stripped with int8_core=True)
        ─ from_tflite                          Relax, one integer kernel call per operator
        ─ FoldPad                              PADs into the convolutions' kernels (a pass)
        ─ MemoryAwareSchedule(memory_model="mcu")   the pass orders main (tvm_serenity.passes)
          or IdentityGraphRewrite(memory_model="mcu")   with rewrite=True
        ─ PatchExecution                       with patch=True
        ─ ArenaPlan(memory_model="mcu")        the pass plans the arena (offsets, in-place
                                               pairs, right shifts; tvm_serenity.alloc)
        ─ emit_main                            the Relax-to-C emitter: the calls at the planned
                                               offsets, the plan verified against main
                                               (tvm_serenity.codegen.relax_c): model.c / model.h
        ─ micro.generate_project + build       firmware, SRAM fit check (tvm_serenity.micro)

Every decision is a pass's and lives in the module: the order in ``main``'s bindings, a
rewritten or patched graph (beyond what ``main``'s operators express: int32 partial sums,
patches) in its ``"serenity.mcu_graph"`` attribute (:mod:`tvm_serenity.passes.mcu_graph`), the
arena in ``"serenity.arena"``; the emitter compiles what the module says.

``plan.json``'s ``relax`` entry says where the module came from (``front_end``), how many
described kernels it had and what each pass decided (``passes``: ``LowerFakeQuant``'s lowered
patterns for a module with float quantize/dequantize, how many PADs ``FoldPad`` folded,
``MemoryAwareSchedule``'s peaks before and after, lower bound, optimality, ``ArenaPlan``'s
arena, status, in-place steps, right shifts and relaxed depthwise layers).

``rewrite=True`` replaces the schedule pass with identity graph rewriting on the graph IR
(the rewritten nodes are kernels of the MCU emitter, not TFLite operators):
:func:`tvm_serenity.rewrite.rewrite_graph` partitions ``concat -> (elementwise ops) -> conv`` and
``concat -> depthwise`` patterns (int32 partial sums accumulated in place and requantized once;
depthwise slices written into one output), keeping a rewrite only where the scheduler's peak
drops; it is judged with the same method, in-place model and time limit as the schedule, and
its final order is the schedule. ``graph.json`` is then the rewritten graph (each new node's
``attrs["rewrite"]`` says where it comes from) and ``plan.json`` has a ``rewrite`` section (the
decisions, the trials and both peaks). The emitted kernels are bit-exact with the model
(:mod:`tvm_serenity.codegen.graph_c`).

``rip=True`` schedules and plans with in-place execution (Right In-Place convolutions, exact
aliases for ADD/RESHAPE/...) and emits RiP kernels where the plan overlaps a layer's input and
output; once the order is known, a depthwise layer keeps the zero-gap channel-wise kind only
where the order's peak needs it (:func:`~tvm_serenity.rip.relax_channel_kinds`; the others get
RiP's workspace back and need no channel buffer in the scratch; ``plan.json``'s
``relaxed_channel_layers``); ``rip=False`` is the dual-buffer build of the same model (no
overlap anywhere, the same kernel loops on two buffers). Building checks the SRAM fit for
``pico``/``pico2`` (arena + kernel scratch + .data/.bss + stack reserve against the chip's
SRAM) and refuses a model that does not fit with every part itemised.

``patch=True`` runs the first layers in segments of patches (halos recomputed) or of row
strips (rows cached) where that lowers the peak (:func:`tvm_serenity.rewrite.patch.
plan_patches` on the graph IR after the schedule pass, judged by the same scheduler, at most
``patch_overhead`` extra MACs; ``patch_layers`` with ``patch_grid`` force a plan, lists of
them one per stretch, grids as :func:`~tvm_serenity.rewrite.patch.parse_grid` reads them):
the patched graph is what the arena is planned for and the emitter writes (bit-exact), and
``plan.json``'s ``patch`` section has the plan (layers, kind, grid and patches of each
segment, extra MACs, the flags that force it: ``forced_by``), both peaks (the input
resident and streamed), the order without patches, or why nothing was patched.
``stream_input=True`` builds the streamed one: the input is no arena tensor and ``model_run``
reads each patch's or strip's region through ``model_read_input``
(:mod:`tvm_serenity.codegen.graph_c`), when the plan's first segment reads the input.

Inputs and outputs: any number, as the model's signature has them (``model_input(i)`` /
``model_output(i)`` in the arena, :mod:`tvm_serenity.codegen.graph_c`). By default a float32
input with its QUANTIZE and a float32 output with its DEQUANTIZE run on the device (TFLM's
kernels, bit-exact), so the firmware takes and returns what the model's signature says;
``int8_core=True`` strips those edges and runs the int8 core (``plan.json`` ``int8_core``).

Layout of ``out_dir``: ``model/`` (model.c, model.h), ``project/`` (the micro project: harness,
Makefile, linker scripts, Pico SDK project, input.c), ``input.bin`` (the input bytes the
project runs: every input's raw bytes, in the model's order, one after the other),
``graph.json`` (the graph IR the order refers to; with ``rewrite``, also
``graph_source.json``, the graph before rewriting) and ``plan.json`` (order, offsets, arena
bytes, liveness peak, lower bounds, per-layer in-place savings, scratch, fit).

:func:`run` runs a compiled directory on the target's emulator (rp2040js for ``pico``, QEMU
for ``pico2``), a connected board (``emulate=False``) or natively (``host=True``, the same
model.c), and by default checks every output's bytes against the numpy reference
interpreter (:mod:`tvm_serenity.frontend.reference`, bit-exact with TFLite Micro) on the same
inputs, naming the first output that differs. An input given to :func:`compile_tflite` or
:func:`run` is raw bytes (one input, or all inputs one after the other), an array, a list of
arrays or bytes in the model's order, a mapping keyed by input index or tensor name (or
``arr_<i>``, as ``np.savez`` names positional arrays), or the bytes of an ``.npz`` file.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tvm

from . import micro
from .alloc import ArenaPlan as Plan
from .codegen.graph_c import EmittedModel, IntegerCore, IOTensor, integer_core
from .codegen.relax_c import emit_main
from .errors import SerenityError
from .builddir import (absolute, checked_model, new_build, refresh_marker, sha256_of,
                       verify_build, write_bytes)
from .files import check_fields, read_json
from .frontend import Interpreter, load_tflite
from .frontend.builder import tflite_bytes
from .frontend.ort_arithmetic import is_onnxruntime
from .frontend.relax_import import OperatorDescription, from_tflite
from .frontend.relax_lift import operators_of
from .frontend.tflite_model import Tensor
from .graph import Graph
from .passes import (ArenaPlan, FoldPad, IdentityGraphRewrite, LowerFakeQuant,
                     MemoryAwareSchedule, PatchExecution, read_report)
from .passes.arena import MainArena, read_main_arena
from .passes.mcu_graph import mcu_graph
from .rewrite import PATTERN_NAMES, RewriteResult
from .rewrite.patch import PatchError, PatchPlan, Segment, parse_grid, source_region
from .schedule import Deadline, ScheduleResult
from .schedule.result import make_result
from .text import counted

__all__ = ["TARGETS", "DEFAULT_TIME_LIMIT", "PLAN_FILE", "GRAPH_FILE", "SOURCE_GRAPH_FILE",
           "CompiledModel", "compile_tflite", "compile_module", "run", "reference_outputs",
           "load_plan"]

TARGETS = tuple(micro.BOARDS)     # pico, pico2, host
DEFAULT_TIME_LIMIT = 30.0
DEFAULT_PATCH_OVERHEAD = 0.2      # extra MACs a patch plan may cost, of the network's
#: compile options the MCU passes decide with (refused for a module the caller planned)
PASS_OPTIONS = ("schedule", "planner", "rip", "rewrite", "time_limit", "patch",
                "patch_overhead", "patch_layers", "patch_grid", "stream_input")
PLAN_FILE = "plan.json"
GRAPH_FILE = "graph.json"
SOURCE_GRAPH_FILE = "graph_source.json"     # the graph before identity rewriting
MODEL_DIR = "model"
PROJECT_DIR = "project"
INPUT_FILE = "input.bin"
MODULE_FILE = "model.tflite"                # a Relax module's operators, the run's reference
KIND = "mcu"                                # the build kind in the directory's marker
# regenerated from the rest, so neither hashed nor checked: objects and images (rebuilt by
# every run), the report
DERIVED = (f"{PROJECT_DIR}/build", f"{PROJECT_DIR}/pico_sdk/build", "report")


@dataclass(frozen=True)
class CompiledModel:
    """What :func:`compile_tflite` produced (all of it is also in ``out_dir``)."""

    out_dir: Path
    source: Path
    target: str
    rip: bool
    core: IntegerCore
    graph: Graph
    schedule: ScheduleResult
    plan: Plan
    emitted: EmittedModel
    firmware: micro.Firmware | None       # None when built with build=False
    rewrite: RewriteResult | None = None  # identity graph rewriting (rewrite=True)
    source_graph: Graph | None = None     # the graph before rewriting or patches
    int8_core: bool = False               # float edges stripped (module docstring)
    relaxed_channel_layers: tuple[str, ...] = ()  # depthwise layers given RiP's S* back
    relax: dict | None = None             # the Relax module it was read from (plan.json)
    patch: PatchPlan | None = None        # patch-based first layers (patch=True)
    patch_requested: bool = False
    unpatched_order: tuple[str, ...] = ()   # with a patch plan: the order before it
    patch_refusal: str = ""               # why there was nothing to patch (patch=True)
    stream_input: bool = False            # requested: the input read patch by patch

    @property
    def model_dir(self) -> Path:
        return self.out_dir / MODEL_DIR

    @property
    def project_dir(self) -> Path:
        return self.out_dir / PROJECT_DIR

    @property
    def arena_bytes(self) -> int:
        return self.plan.arena_bytes

    @property
    def scratch_bytes(self) -> int:
        return self.emitted.scratch_bytes

    @property
    def fit(self) -> micro.FitReport | None:
        return self.firmware.fit if self.firmware is not None else None

    def plan_json(self) -> dict:
        plan = self.plan
        return {
            "model": str(self.source), "name": self.core.source.name, "target": self.target,
            "rip": self.rip, "int8_core": self.int8_core,
            "stripped_edges": list(self.core.stripped),
            "inputs": [t.to_json() for t in self.emitted.inputs],
            "outputs": [t.to_json() for t in self.emitted.outputs],
            "schedule": {"method": self.schedule.method, "peak_bytes": self.schedule.peak_bytes,
                         "optimal": self.schedule.optimal,
                         "lower_bound_bytes": self.schedule.lower_bound_bytes,
                         "seconds": round(self.schedule.seconds, 6)},
            "planner": plan.planner, "plan_status": plan.status,
            "arena_bytes": plan.arena_bytes, "liveness_peak_bytes": plan.liveness_peak_bytes,
            "lower_bound_bytes": plan.lower_bound_bytes,
            "scratch_bytes": self.emitted.scratch_bytes,
            "inplace_saved_bytes": sum(s.saved_bytes for s in self.emitted.steps),
            "relaxed_channel_layers": list(self.relaxed_channel_layers),
            "order": list(plan.order), "offsets": dict(plan.offsets),
            "moves": [m.to_json() for m in plan.moves],
            "layers": [s.to_json() for s in self.emitted.steps],
            "fit": self.fit.to_json() if self.fit is not None else None,
            "rewrite": self.rewrite_json(),
            "patch": self.patch_json(),
            "relax": self.relax,
        }

    def patch_json(self) -> dict | None:
        """The patch plan (None when not requested; ``applied`` false when none helps)."""
        if not self.patch_requested:
            return None
        p = self.patch
        if p is None:
            return {"applied": False, "why": self.patch_refusal or "no plan lowers the peak "
                                                                  "within the MAC overhead"}
        return {"applied": True, "stream_input": p.stream_input,
                "input_streamed": self.input_streamed, "layers": list(p.layers),
                "segments": [{"layers": list(seg.layers), "grid": list(seg.grid),
                              "kind": "cached rows" if seg.cached else "recomputed halos",
                              "label": seg.label, "reads": seg.input,
                              "extra_macs": seg.extra_macs, "patches": _patches_json(seg)}
                             for seg in p.segments],
                "peak_unpatched_bytes": p.peak_unpatched,
                "peak_bytes": p.peak_full_input, "peak_streamed_bytes": p.peak_streamed,
                "extra_macs": p.extra_macs, "extra_macs_fraction": p.extra_macs_fraction,
                "prefix_overhead": p.prefix_overhead, "seconds": round(p.seconds, 3),
                "forced_by": "--patch-layers " + ",".join(str(k) for k, _ in p.layout)
                             + " --patch-grid " + ",".join(g for _, g in p.layout),
                "unpatched_order": list(self.unpatched_order)}

    def patch_summary(self) -> str | None:
        """One line on the patch plan (None when not requested)."""
        if not self.patch_requested:
            return None
        p = self.patch
        if p is None:
            why = self.patch_refusal or "no plan lowers the peak within the MAC overhead allowed"
            kept = "; the input stays in the arena" if self.stream_input else ""
            return f"patches: none ({why}){kept}"
        if self.input_streamed:
            streamed = (f"{p.peak_streamed:,} B with the input streamed (this build), "
                        f"{p.peak_full_input:,} B with it resident")
        elif p.stream_input:
            streamed = (f"{p.peak_full_input:,} B, the input in the arena (no segment reads "
                        "it: streaming it saves nothing)")
        else:
            streamed = (f"{p.peak_full_input:,} B ({p.peak_streamed:,} B with the input "
                        "streamed patch by patch)")
        grids = " then ".join(seg.label for seg in p.segments) + \
            ("; c: cached rows" if any(seg.cached for seg in p.segments) else "")
        return (f"patches: {counted(len(p.layers), 'layer')} ({p.layers[0]} .. "
                f"{p.layers[-1]}) in {counted(len(p.segments), 'segment')} ({grids}), "
                f"scheduler peak {p.peak_unpatched:,} -> {streamed}, "
                f"+{100 * p.extra_macs_fraction:.1f}% MACs")

    @property
    def input_streamed(self) -> bool:
        """Does this build read an input region by region (``model_read_input``)?"""
        return any(t.streamed for t in self.emitted.inputs)

    def rewrite_json(self) -> dict | None:
        """The identity rewriting decisions (None when not requested)."""
        r = self.rewrite
        if r is None:
            return None
        return {**r.to_json(), "method": self.schedule.method,
                "candidates": len({t for trial in r.trials for t in trial.candidates}),
                "nodes_before": len(self.source_graph.nodes) if self.source_graph else None,
                "nodes_after": len(self.graph.nodes)}

    def rewrite_summary(self) -> str | None:
        """One line on identity rewriting (None when not requested)."""
        r = self.rewrite
        if r is None:
            return None
        if not r.applied:
            tried = len(r.trials)
            return (f"identity rewriting: nothing applied ({tried} trial"
                    f"{'' if tried == 1 else 's'}, none lowers the peak "
                    f"{r.peak_before:,} B)")
        what = ", ".join(f"{PATTERN_NAMES[p]} {nodes[-1]}" for p, nodes in r.applied)
        return (f"identity rewriting: {len(r.applied)} applied ({what}), scheduler peak "
                f"{r.peak_before:,} -> {r.peak_after:,} B")

    def summary(self) -> str:
        """A few lines for a terminal."""
        p = self.plan
        build = "RiP" if self.rip else "dual-buffer"
        lines = [f"{self.core.source.name} -> {self.target} ({build}), "
                 f"{counted(len(p.order), 'step')}, {counted(self.emitted.kernels, 'kernel')}, "
                 f"in {self.out_dir}",
                 f"arena {p.arena_bytes:,} B (liveness peak {p.liveness_peak_bytes:,} B, "
                 f"lower bound {self.schedule.lower_bound_bytes:,} B over all orders), "
                 f"{len(p.inplace)} in-place steps saving "
                 f"{sum(s.saved_bytes for s in self.emitted.steps):,} B, {len(p.moves)} right "
                 f"shifts; kernel scratch {self.emitted.scratch_bytes:,} B"]
        if self.rewrite is not None:
            lines.append(self.rewrite_summary())
        if self.patch_requested:
            lines.append(self.patch_summary())
        if self.fit is not None:
            lines.append(self.fit.describe())
        return "\n".join(lines)


def _patches_json(seg: Segment) -> list[dict]:
    """Each patch (strip) of a segment: the rows and columns of the segment's output it
    writes, and those of the segment's input it reads (null where a cached strip reads no
    new input row)."""
    out = []
    for patch in seg.regions:
        read = source_region(list(seg.windows), patch, seg.input)
        out.append({"rows": list(patch[-1].out_rows), "cols": list(patch[-1].out_cols),
                    "input_rows": list(read[0]) if read else None,
                    "input_cols": list(read[1]) if read else None})
    return out


def _random_inputs(core: IntegerCore, seed: int) -> list[bytes]:
    """``seed``-random bytes for each input: int8 uniformly; a float32 input uniformly over
    the range its QUANTIZE maps onto int8, two steps beyond at each end (so clamping runs)."""
    rng = np.random.default_rng(seed)
    consumers = core.model.consumers()
    out = []
    for t in core.inputs:
        if t.dtype == "int8":
            out.append(rng.integers(-128, 128, t.size, dtype=np.int8).tobytes())
            continue
        readers = [core.model.operator(i) for i in consumers.get(t.index, ())]
        q = next((core.model.tensors[op.outputs[0]].quant for op in readers
                  if op.op == "QUANTIZE"), None)
        scale, zp = (q.scalar_scale, q.scalar_zero_point) if q is not None else (1 / 64, 0)
        x = rng.uniform(scale * (-130 - zp), scale * (129 - zp), t.size)
        out.append(x.astype(np.float32).tobytes())
    return out


def _nbytes(t: IOTensor | Tensor) -> int:
    return int(np.prod(t.shape, dtype=np.int64)) * np.dtype(t.dtype).itemsize


def _input_arrays(data, tensors) -> list[bytes]:
    """The bytes of each input from ``data`` in any of the forms of the module docstring,
    checked against the model's inputs ``tensors`` (:class:`IOTensor` or
    :class:`~tvm_serenity.frontend.tflite_model.Tensor`; one line naming the input on any
    mismatch)."""
    if isinstance(data, (bytes, bytearray)) and bytes(data[:4]) == b"PK\x03\x04":
        try:
            with np.load(io.BytesIO(bytes(data)), allow_pickle=False) as npz:
                data = {k: npz[k] for k in npz.files}
        except (OSError, ValueError, zipfile.BadZipFile) as e:
            raise SerenityError(f"the input is not a readable .npz file ({e})") from None
    if isinstance(data, (bytes, bytearray)):
        total = sum(_nbytes(t) for t in tensors)
        if len(data) != total:
            what = ", ".join(f"'{t.name}' {t.dtype} {list(t.shape)}" for t in tensors)
            raise SerenityError(f"the input has {counted(len(data), 'byte')}, the model takes "
                                f"{total:,} ({what})")
        ends = np.cumsum([0] + [_nbytes(t) for t in tensors])
        return [bytes(data[a:b]) for a, b in zip(ends[:-1], ends[1:])]
    if isinstance(data, np.ndarray):
        data = [data]
    if isinstance(data, dict):
        keys = {}
        for k, t in enumerate(tensors):
            for key in (k, str(k), f"arr_{k}", t.name):
                keys[key] = k
        unknown = [key for key in data if key not in keys]
        if unknown:
            raise SerenityError(f"input {unknown[0]!r} is not an input of the model (inputs: "
                                f"{', '.join(repr(t.name) for t in tensors)})")
        given = {keys[key]: value for key, value in data.items()}
        missing = [t.name for k, t in enumerate(tensors) if k not in given]
        if missing:
            raise SerenityError(f"no value for input '{missing[0]}'")
        data = [given[k] for k in range(len(tensors))]
    data = list(data)
    if len(data) != len(tensors):
        raise SerenityError(f"{counted(len(data), 'input')} given, the model has "
                            f"{len(tensors)}")
    out = []
    for value, t in zip(data, tensors):
        if isinstance(value, (bytes, bytearray)):
            raw = bytes(value)
        else:
            a = np.asarray(value)
            cast = a.astype(t.dtype)
            exact = a.dtype.kind in "fiu" if t.dtype == "float32" else \
                a.dtype.kind in "iu" and np.array_equal(cast, a)     # no int8 overflow
            if a.size != int(np.prod(t.shape)) or not exact:
                raise SerenityError(f"input '{t.name}' must be {t.dtype} of shape "
                                    f"{list(t.shape)}, got {a.dtype} {list(a.shape)}")
            raw = np.ascontiguousarray(cast).tobytes()
        if len(raw) != _nbytes(t):
            raise SerenityError(f"input '{t.name}' has {counted(len(raw), 'byte')}, the model "
                                f"takes {_nbytes(t):,} ({t.dtype} {list(t.shape)})")
        out.append(raw)
    return out


def compile_tflite(path: str | os.PathLike, target: str = "pico",
                   out_dir: str | os.PathLike = "serenity_out", *, schedule: str = "serenity",
                   planner: str = "optimal", rip: bool = True, rewrite: bool = False,
                   time_limit: float | None = DEFAULT_TIME_LIMIT, input=None, seed: int = 0,
                   opt_level: str | None = "O2", build: bool = True,
                   stack_reserve: int = micro.DEFAULT_STACK_RESERVE,
                   force: bool = False, int8_core: bool = False, patch: bool = False,
                   patch_overhead: float = DEFAULT_PATCH_OVERHEAD,
                   patch_layers: int | list[int] | None = None,
                   patch_grid: tuple[int, int] | list[tuple[int, int]] | None = None,
                   stream_input: bool = False) -> CompiledModel:
    """Compile the TFLite int8 model at ``path`` for ``target`` (``"pico"``, ``"pico2"`` or
    ``"host"``) into ``out_dir`` (see the module docstring).

    ``schedule``: a method of :mod:`tvm_serenity.schedule` (``"serenity"``: the exact
    divide-and-conquer search); ``planner``: an arena planner of :mod:`tvm_serenity.alloc`;
    ``time_limit`` bounds the two together (seconds: the search, with ``rewrite`` the whole
    rewrite search, gets up to half, the arena solver most of the rest; None: 30 s).
    ``rewrite``: identity graph rewriting (module docstring). ``input``: what the project runs
    (any form of the module docstring; default: ``seed``-random inputs).
    ``int8_core``: strip the float edges (module docstring). ``patch``: patch-based execution
    of the first layers where it lowers the peak, with at most ``patch_overhead`` extra MACs
    (a fraction of the network's; module docstring); ``patch_layers`` and ``patch_grid``
    together force a plan instead of the search (the first ``patch_layers`` layers in a
    ``(rows, columns)`` grid; lists for several segments, each from the output of the one
    before); ``stream_input``: the input is no arena tensor but read patch
    by patch through ``model_read_input`` (a camera, flash), and the plan minimises the
    peak that way (module docstring). ``build=False`` only generates
    the sources; otherwise the firmware is built and, for the Pico boards, a model that does
    not fit SRAM or flash is refused with :class:`~tvm_serenity.micro.DoesNotFitError`
    naming every part.

    ``out_dir`` is written atomically and only when it is new, empty or an intact earlier
    build (``force=True`` also replaces an edited one; :mod:`tvm_serenity.builddir`); on any
    error it is left as it was.
    """
    source = absolute(path)
    marker = {"model": str(source)}

    def front_end(tmp: Path) -> tuple[IntegerCore, dict]:
        model = load_tflite(source)
        marker["model_sha256"] = sha256_of(source)
        return integer_core(model, float_edges=not int8_core), {"front_end": "tflite",
                                                                "passes": []}

    return _compile(front_end, source, target, out_dir, marker, force=force,
                    schedule=schedule, planner=planner, rip=rip, rewrite=rewrite,
                    time_limit=time_limit, input=input, seed=seed, opt_level=opt_level,
                    build=build, stack_reserve=stack_reserve, int8_core=int8_core,
                    patch=patch, patch_overhead=patch_overhead, patch_layers=patch_layers,
                    patch_grid=patch_grid, stream_input=stream_input)


def compile_module(mod: tvm.IRModule, target: str = "pico",
                   out_dir: str | os.PathLike = "serenity_out", *, name: str = "model",
                   front_end: str = "relax", int8_core: bool = False, force: bool = False,
                   **options) -> CompiledModel:
    """Compile a Relax module of integer kernels for ``target`` into ``out_dir``, as
    :func:`compile_tflite` compiles a file (same ``options``, same directory layout).

    ``main`` is read back as integer operators (:func:`~.frontend.relax_lift.operators_of`:
    kernels of :func:`~.frontend.relax_import.from_tflite`, :class:`~.passes.LowerFakeQuant` or
    :func:`~.frontend.relax_import.emit_operator`); float ``quantize``/``dequantize`` patterns
    are lowered by ``LowerFakeQuant`` first, and whatever is still not an integer kernel is
    refused naming its binding before anything is written. The operators are also written as
    ``model.tflite`` in ``out_dir``: the model :func:`run` checks the outputs against, and one
    TFLite's own interpreters can run. ``name`` names the model, ``front_end`` says in
    ``plan.json`` where the module came from.

    A module the caller already ran ``ArenaPlan(memory_model="mcu")`` on (after their own
    choice of the MCU passes: ``MemoryAwareSchedule``, ``IdentityGraphRewrite``,
    ``PatchExecution`` with the options they wanted) is compiled as those passes left it: no
    pass runs again, the Relax-to-C emitter checks their plan against the module and writes it
    (``plan.json``'s ``relax`` entry says ``"decided_by": "caller"``). The options those passes
    decide (and ``int8_core``, which would change the operators) are then refused."""
    out = absolute(out_dir)
    marker = {"model": str(out / MODULE_FILE)}
    arena = read_main_arena(mod)
    if arena is not None:
        given = sorted(set(options) & set(PASS_OPTIONS)) + (["int8_core"] if int8_core else [])
        if given:
            raise SerenityError(f"the module's passes already decided its build "
                                f"(ArenaPlan(memory_model='mcu') ran on it): compile it without "
                                f"{', '.join(given)}, or pass the module from before the passes")
        options["rip"] = arena.inplace

    def lower(tmp: Path) -> tuple[IntegerCore, dict]:
        if arena is not None:
            model = operators_of(mod, name, f"Relax module '{name}'")
            (tmp / MODULE_FILE).write_bytes(tflite_bytes(model))
            marker["model_sha256"] = sha256_of(tmp / MODULE_FILE)
            return integer_core(model, float_edges=True), {
                "front_end": front_end, "decided_by": "caller", "passes": _caller_passes(mod)}
        fake_quant = LowerFakeQuant()
        lowered = fake_quant(mod)
        for error in fake_quant.refused.values():      # no kernel computes it: say why
            raise error
        model = operators_of(lowered, name, f"Relax module '{name}'")
        (tmp / MODULE_FILE).write_bytes(tflite_bytes(model))
        marker["model_sha256"] = sha256_of(tmp / MODULE_FILE)
        passes = [{"name": "LowerFakeQuant", "lowered": dict(fake_quant.lowered)}] \
            if fake_quant.lowered else []
        return integer_core(model, float_edges=not int8_core), {"front_end": front_end,
                                                                "passes": passes}

    return _compile(lower, out / MODULE_FILE, target, out_dir, marker, force=force,
                    int8_core=int8_core, planned=mod if arena is not None else None, **options)


def _forced_patch(patch: bool, layers, grid) -> tuple[list[int], list[tuple]] | None:
    """``(layers, grids)``, one per segment, when the caller forces a patch plan, after
    checking both (an int and a ``(rows, columns)`` pair for one segment, or lists)."""
    if layers is None and grid is None:
        return None
    if not patch or layers is None or grid is None:
        raise SerenityError("patch_layers and patch_grid force a patch plan together, with "
                            "patch=True")
    many = isinstance(layers, (list, tuple))
    layers = list(layers) if many else [layers]
    grids = list(grid) if many and isinstance(grid, (list, tuple)) else [grid]
    if any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in layers):
        raise SerenityError(f"patch_layers must be a positive number of layers (or one per "
                            f"segment), got {layers if many else layers[0]!r}")
    if len(grids) != len(layers):
        raise SerenityError(f"patch_grid must be one per segment of patch_layers "
                            f"({len(layers)} segments), got {grid!r}")
    for g in grids:
        try:
            parse_grid(g)
        except PatchError as e:
            raise SerenityError(f"patch_grid: {e}") from None
    return layers, grids


@dataclass
class _Decisions:
    """What the passes decided for a build (module docstring): the module as they left it, the
    order's :class:`ScheduleResult` (None: the caller's passes ran, the order is the plan's),
    the relaxed depthwise layers, and the rewrite / patch decisions."""

    mod: tvm.IRModule
    order: ScheduleResult | None
    relaxed: tuple[str, ...] = ()
    rewritten: RewriteResult | None = None
    patch_plan: PatchPlan | None = None
    refusal: str = ""
    unpatched_order: tuple[str, ...] = ()


def _run_passes(mod: tvm.IRModule, relax_entry: dict, *, schedule: str, planner: str, rip: bool,
                rewrite: bool, time_limit, patch: bool, patch_overhead: float, forced,
                stream_input: bool) -> _Decisions:
    """The MCU passes on ``mod`` (module docstring), each one's decisions appended to
    ``relax_entry["passes"]``."""
    search = Deadline.of(time_limit, DEFAULT_TIME_LIMIT)   # schedule + arena together
    fold = FoldPad()
    mod = fold(mod)
    relax_entry["passes"].append({"name": "FoldPad", "folded": len(fold.folded)})
    unpatched_order, rewritten, patch_plan, refusal = (), None, None, ""
    if rewrite:
        rewriter = IdentityGraphRewrite(schedule, search.share(0.5), memory_model="mcu",
                                        inplace=rip)
        mod = rewriter(mod)
        rewritten = rewriter.result
        order = rewritten.schedule          # the scheduler's order for the rewritten graph
        relax_entry["passes"].append(
            {"name": "IdentityGraphRewrite", "memory_model": "mcu", "method": schedule,
             "applied": len(rewritten.applied), "peak_before": rewritten.peak_before,
             "peak_after": rewritten.peak_after, "optimal": rewritten.optimal})
    else:
        scheduler = MemoryAwareSchedule(schedule, search.share(0.5), inplace=rip,
                                        memory_model="mcu")
        mod = scheduler(mod)
        order = scheduler.result
        decision = scheduler.report.blocks[0]
        relax_entry["passes"].append(
            {"name": "MemoryAwareSchedule", "memory_model": "mcu", "method": schedule,
             "peak_before": decision.peak_before, "peak_after": decision.peak_after,
             "lower_bound": decision.lower_bound, "optimal": decision.optimal,
             "changed": decision.changed})
    if patch:       # judged by the same scheduler, the input resident or streamed
        layers, grids = forced or (None, None)
        patcher = PatchExecution(patch_overhead, layers=layers, grids=grids,
                                 stream_input=stream_input, method=schedule, inplace=rip,
                                 time_limit=search.share(0.5))
        mod = patcher(mod)
        patch_plan, refusal = patcher.plan, patcher.refusal
        relax_entry["passes"].append(
            {"name": "PatchExecution", "forced": forced is not None,
             "patched_layers": len(patch_plan.layers) if patch_plan else 0,
             "peak_before": patch_plan.peak_unpatched if patch_plan else None,
             "peak_after": patch_plan.peak_bytes if patch_plan else None})
        if patch_plan is not None:
            unpatched_order, order = tuple(order.order), patch_plan.schedule
    # the back end compiles what the passes left: ArenaPlan plans it, the Relax-to-C
    # emitter checks the plan against main and writes the calls at its offsets
    arena = ArenaPlan(planner, memory_model="mcu", inplace=rip, time_limit=search)
    mod = arena(mod)
    relax_entry["passes"].append(_arena_entry(arena.report))
    return _Decisions(mod, order, arena.report.relaxed_channel_layers, rewritten, patch_plan,
                      refusal, unpatched_order)


def _arena_entry(arena: MainArena) -> dict:
    """``plan.json``'s entry for what ``ArenaPlan(memory_model="mcu")`` decided."""
    p = arena.plan
    return {"name": "ArenaPlan", "memory_model": "mcu", "planner": p.planner,
            "arena_bytes": p.arena_bytes, "status": p.status, "in_place_steps": len(p.inplace),
            "right_shifts": len(p.moves),
            "relaxed_channel_layers": len(arena.relaxed_channel_layers)}


def _caller_passes(mod: tvm.IRModule) -> list[dict]:
    """``plan.json``'s entries for a module whose passes the caller ran: what their module
    attributes say (the schedule's peaks, who made the MCU graph, the arena)."""
    entries = []
    schedule = read_report(mod)
    if schedule and schedule.get("blocks"):
        block = schedule["blocks"][0]
        entries.append({"name": "MemoryAwareSchedule", **{k: block[k] for k in (
            "peak_before", "peak_after", "lower_bound", "optimal", "changed")}})
    decided = mcu_graph(mod, "compile_module")
    if decided.by != "main":
        entries.append({"name": decided.by, "nodes_before": len(decided.source.nodes),
                        "nodes_after": len(decided.graph.nodes)})
    return entries + [_arena_entry(read_main_arena(mod))]


def _compile(front_end, source: Path, target: str, out_dir, marker: dict, *, force: bool,
             schedule: str = "serenity", planner: str = "optimal", rip: bool = True,
             rewrite: bool = False, time_limit: float | None = DEFAULT_TIME_LIMIT, input=None,
             seed: int = 0, opt_level: str | None = "O2", build: bool = True,
             stack_reserve: int = micro.DEFAULT_STACK_RESERVE,
             int8_core: bool = False, patch: bool = False,
             patch_overhead: float = DEFAULT_PATCH_OVERHEAD, patch_layers: int | None = None,
             patch_grid: tuple[int, int] | None = None,
             stream_input: bool = False, planned: tvm.IRModule | None = None) -> CompiledModel:
    """What every front end shares: ``front_end(tmp)`` gives the integer core and the start of
    ``plan.json``'s ``relax`` entry; the core is imported into Relax
    (:func:`~.frontend.relax_import.from_tflite`), the MCU passes decide order, rewrite,
    patches and arena there (:func:`_run_passes`), and the Relax-to-C emitter writes what they
    left; then the project and the firmware. ``planned``: a module the caller's passes already
    planned, compiled as it is (:func:`compile_module`)."""
    if target not in TARGETS:
        raise SerenityError(f"unknown target '{target}' (choose from {', '.join(TARGETS)})")
    if patch and rewrite:
        raise SerenityError("patch and rewrite cannot be combined yet: choose one")
    if isinstance(patch_overhead, bool) or not isinstance(patch_overhead, (int, float)) \
            or not 0 <= patch_overhead <= 10:
        raise SerenityError(f"patch_overhead must be a fraction of the MACs in [0, 10], got "
                            f"{patch_overhead!r}")
    forced = _forced_patch(patch, patch_layers, patch_grid)
    if stream_input and not patch:
        raise SerenityError("stream_input needs patch=True: only a patch plan reads the input "
                            "part by part")
    out = absolute(out_dir)
    with new_build(out_dir, KIND, force=force, derived=DERIVED, extra=marker) as tmp:
        core, relax_entry = front_end(tmp)
        if rewrite and any(is_onnxruntime(op.options) for op in core.model.operators):
            raise SerenityError("identity rewriting (rewrite) does not implement onnxruntime's "
                                "arithmetic (an ONNX model's operators): compile without it")
        if planned is None:
            decided = _run_passes(from_tflite(core.model), relax_entry, schedule=schedule,
                                  planner=planner, rip=rip, rewrite=rewrite,
                                  time_limit=time_limit, patch=patch,
                                  patch_overhead=patch_overhead, forced=forced,
                                  stream_input=stream_input)
        else:
            decided = _Decisions(planned, None, read_main_arena(planned).relaxed_channel_layers)
        mod = decided.mod
        relax_entry["kernels"] = sum(1 for f in mod.functions.values()
                                     if OperatorDescription.of(f) is not None)
        emitted, graph, plan, source_graph, core = emit_main(mod, core, opt_level=opt_level,
                                                             name=core.source.name)
        order = decided.order or make_result(graph, plan.order, "given", 0.0,
                                             inplace=read_main_arena(mod).inplace)
        emitted.write(tmp / MODEL_DIR)
        data = _random_inputs(core, seed) if input is None else \
            _input_arrays(input, emitted.inputs)
        (tmp / INPUT_FILE).write_bytes(b"".join(data))
        micro.generate_project(tmp / PROJECT_DIR, tmp / MODEL_DIR, target, emulate=True,
                               input_data=data, stack_reserve=stack_reserve)
        compiled = CompiledModel(out, source, target, rip, core, graph, order, plan, emitted,
                                 None, decided.rewritten, source_graph, int8_core,
                                 decided.relaxed, relax_entry, decided.patch_plan, patch,
                                 decided.unpatched_order, decided.refusal, stream_input)
        graph.save(tmp / GRAPH_FILE)
        if source_graph is not None:
            source_graph.save(tmp / SOURCE_GRAPH_FILE)
        if build:
            try:
                firmware = micro.build(tmp / PROJECT_DIR)
            except micro.DoesNotFitError as e:      # itemised; callers may want the plan
                e.plan = plan
                raise
            compiled = dataclasses.replace(compiled, firmware=_moved(firmware, tmp, out))
        (tmp / PLAN_FILE).write_text(json.dumps(compiled.plan_json(), indent=1) + "\n")
    return compiled


def _moved(firmware: micro.Firmware, old: Path, new: Path) -> micro.Firmware:
    """``firmware`` with its paths under ``old`` moved to ``new`` (the build was renamed)."""
    def move(p):
        return None if p is None else new / p.relative_to(old)
    return dataclasses.replace(firmware, elf=move(firmware.elf), bin=move(firmware.bin),
                               uf2=move(firmware.uf2))


# plan.json fields that run and report read, with their JSON types
_PLAN_FIELDS = {"model": str, "name": str, "target": str, "rip": bool, "int8_core": bool,
                "inputs": list, "outputs": list, "schedule": dict, "planner": str,
                "plan_status": str,
                "arena_bytes": int, "liveness_peak_bytes": int, "scratch_bytes": int,
                "inplace_saved_bytes": int, "order": list, "offsets": dict}


def load_plan(out_dir: str | os.PathLike) -> dict:
    """The ``plan.json`` of a directory written by :func:`compile_tflite`, after checking that
    the build is intact (:func:`tvm_serenity.builddir.verify_build`) and the file has the
    fields run and report read."""
    verify_build(out_dir, (KIND,))
    path = absolute(out_dir) / PLAN_FILE
    plan = read_json(path, f"'{out_dir}' is not a compiled model directory (no {PLAN_FILE}); "
                           "create it with `tvm-serenity compile`")
    return check_fields(plan, _PLAN_FIELDS, path)


def _io_tensors(entries: list, path) -> tuple[IOTensor, ...]:
    """The ``inputs``/``outputs`` entries of a ``plan.json`` as :class:`IOTensor`."""
    try:
        return tuple(IOTensor(**{**e, "shape": tuple(e["shape"])}) for e in entries)
    except TypeError as e:
        raise SerenityError(f"{path}: malformed inputs/outputs entry ({e})") from None


def reference_outputs(model: str | os.PathLike, input, *, int8_core: bool = False
                      ) -> list[bytes]:
    """The bytes of each output the numpy reference interpreter computes for ``input`` (any
    form of the module docstring) on what ``model_run`` computes for the ``.tflite`` at
    ``model`` (its float edges stripped with ``int8_core``)."""
    core = integer_core(load_tflite(model), float_edges=not int8_core)
    arrays = [np.frombuffer(raw, t.dtype).reshape(t.shape)
              for raw, t in zip(_input_arrays(input, core.inputs), core.inputs)]
    ys = Interpreter(core.model).run(arrays)
    return [np.ascontiguousarray(y, dtype=t.dtype).tobytes() for y, t in zip(ys, core.outputs)]


def _first_difference(a: bytes, b: bytes) -> str:
    if len(a) != len(b):
        return f"{len(a):,} vs {counted(len(b), 'byte')}"
    return f"first difference at byte {next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)}"


def run(out_dir: str | os.PathLike, emulate: bool = True, input=None, *, host: bool = False,
        check: bool = True, timeout: float = 600.0) -> micro.RunResult:
    """Run a directory written by :func:`compile_tflite` and return the measurements.

    ``emulate=True``: the target's emulator (rp2040js cycles for ``pico``, QEMU instruction
    counts for ``pico2``); ``False``: a connected board (:func:`tvm_serenity.micro.run`).
    ``host=True`` builds and runs the same model.c natively instead. ``input`` (any form of
    the module docstring) replaces the project's inputs first. ``check``: raise
    :class:`~tvm_serenity.errors.SerenityError` unless every output equals the numpy reference
    interpreter's, byte for byte. ``timeout`` bounds the run (seconds of wall time).
    """
    out = absolute(out_dir)
    meta = load_plan(out_dir)
    model = checked_model(out_dir) if check else None
    project = out / PROJECT_DIR
    inputs = _io_tensors(meta["inputs"], out / PLAN_FILE)
    if input is not None:
        data = _input_arrays(input, inputs)
        micro.generate_project(project, out / MODEL_DIR, meta["target"], emulate=True,
                               input_data=data,
                               stack_reserve=micro.load_project(project)["stack_reserve"])
        write_bytes(out / INPUT_FILE, b"".join(data))
        refresh_marker(out)
    try:
        data = (out / INPUT_FILE).read_bytes()
    except OSError as e:
        raise SerenityError(f"cannot read the build's input '{out / INPUT_FILE}': "
                            f"{e.strerror}; compile again") from None
    if host or meta["target"] == "host":
        result = micro.run_host(micro.build_firmware(project, "host"), timeout=timeout)
    else:
        result = micro.run(project, emulate=emulate, timeout=timeout)
    if check:
        expected = reference_outputs(model, data, int8_core=meta["int8_core"])
        names = [e["name"] for e in meta["outputs"]]
        if len(result.outputs) != len(expected):
            got = counted(len(result.outputs), "output")
            raise SerenityError(f"{result.backend} returned {got}, the model has "
                                f"{len(expected)}")
        for k, (got, want) in enumerate(zip(result.outputs, expected)):
            if got != want:
                raise SerenityError(f"{result.backend} output {k} ('{names[k]}') differs from "
                                    f"the reference interpreter ({_first_difference(got, want)})")
    return result
