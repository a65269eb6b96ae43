"""From a ``.tflite`` file to a measured deployment on a Pico, a Pico 2 or the host, in two calls.

:func:`compile_tflite` runs the whole pipeline and writes everything into ``out_dir``::

    TFLite int8 model ─ integer_core (strip float QUANTIZE/DEQUANTIZE edges)
        ─ tflite_to_graph (graph IR, PAD folded into convolutions, in-place flags)
        ─ schedule(graph, method)              memory-aware order (tvm_serenity.schedule)
        ─ plan_arena(graph, order, planner)    offsets in one arena, verified (tvm_serenity.alloc)
        ─ emit_model                           model.c / model.h (tvm_serenity.codegen.graph_c)
        ─ micro.generate_project + build       firmware, SRAM fit check (tvm_serenity.micro)

``rewrite=True`` inserts identity graph rewriting between the graph and the schedule:
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
output; ``rip=False`` is the dual-buffer build of the same model (no overlap anywhere, the same
kernel loops on two buffers). Building checks the SRAM fit for ``pico``/``pico2`` (arena +
kernel scratch + .data/.bss + stack reserve against the chip's SRAM) and refuses a model that
does not fit with every part itemised.

Layout of ``out_dir``: ``model/`` (model.c, model.h), ``project/`` (the micro project: harness,
Makefile, linker scripts, Pico SDK project, input.c), ``input.bin`` (the int8 input the
project runs), ``graph.json`` (the graph IR the order refers to; with ``rewrite``, also
``graph_source.json``, the graph before rewriting) and ``plan.json`` (order,
offsets, arena bytes, liveness peak, lower bounds, per-layer in-place savings, scratch, fit).

:func:`run` runs a compiled directory on the target's emulator (rp2040js for ``pico``, QEMU
for ``pico2``), a connected board (``emulate=False``) or natively (``host=True``, the same
model.c), and by default checks the output bytes against the numpy reference interpreter
(:mod:`tvm_serenity.frontend.reference`, bit-exact with TFLite Micro) on the same input.
Inputs and outputs are the int8 tensors of :func:`~tvm_serenity.codegen.graph_c.integer_core`.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import micro
from .alloc import ArenaPlan, plan_arena
from .codegen.graph_c import (EmittedModel, IntegerCore, concat_is_copy, emit_model,
                              integer_core)
from .errors import SerenityError
from .builddir import (absolute, checked_model, new_build, refresh_marker, sha256_of,
                       verify_build, write_bytes)
from .files import check_fields, read_json
from .frontend import Interpreter, load_tflite, tflite_to_graph
from .frontend.tflite_model import TFLiteModel
from .graph import Graph
from .rewrite import RewriteResult, rewrite_graph
from .schedule import ScheduleResult
from .schedule import schedule as schedule_graph
from .text import counted

__all__ = ["TARGETS", "DEFAULT_TIME_LIMIT", "PLAN_FILE", "GRAPH_FILE", "SOURCE_GRAPH_FILE",
           "CompiledModel", "compile_tflite", "run", "reference_output", "load_plan"]

TARGETS = ("pico", "pico2", "host")
DEFAULT_TIME_LIMIT = 30.0
PLAN_FILE = "plan.json"
GRAPH_FILE = "graph.json"
SOURCE_GRAPH_FILE = "graph_source.json"     # the graph before identity rewriting
MODEL_DIR = "model"
PROJECT_DIR = "project"
INPUT_FILE = "input.bin"
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
    plan: ArenaPlan
    emitted: EmittedModel
    firmware: micro.Firmware | None       # None when built with build=False
    rewrite: RewriteResult | None = None  # identity graph rewriting (rewrite=True)
    source_graph: Graph | None = None     # the graph before rewriting (rewrite=True)

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
            "rip": self.rip, "stripped_edges": list(self.core.stripped),
            "input": self.core.input.to_json(), "output": self.core.output.to_json(),
            "schedule": {"method": self.schedule.method, "peak_bytes": self.schedule.peak_bytes,
                         "optimal": self.schedule.optimal,
                         "lower_bound_bytes": self.schedule.lower_bound_bytes,
                         "seconds": round(self.schedule.seconds, 6)},
            "planner": plan.planner, "plan_status": plan.status,
            "arena_bytes": plan.arena_bytes, "liveness_peak_bytes": plan.liveness_peak_bytes,
            "lower_bound_bytes": plan.lower_bound_bytes,
            "scratch_bytes": self.emitted.scratch_bytes,
            "inplace_saved_bytes": sum(s.saved_bytes for s in self.emitted.steps),
            "order": list(plan.order), "offsets": dict(plan.offsets),
            "moves": [m.to_json() for m in plan.moves],
            "layers": [s.to_json() for s in self.emitted.steps],
            "fit": self.fit.to_json() if self.fit is not None else None,
            "rewrite": self.rewrite_json(),
        }

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
        what = ", ".join(f"{'channel-wise' if p == 'channel_partition' else 'kernel-wise'} "
                         f"{nodes[-1]}" for p, nodes in r.applied)
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
        if self.fit is not None:
            lines.append(self.fit.describe())
        return "\n".join(lines)


def _random_input(nbytes: int, seed: int) -> bytes:
    return np.random.default_rng(seed).integers(-128, 128, nbytes, dtype=np.int8).tobytes()


def _input_bytes(data, nbytes: int) -> bytes:
    raw = np.ascontiguousarray(data, dtype=np.int8).tobytes() if isinstance(data, np.ndarray) \
        else bytes(data)
    if len(raw) != nbytes:
        raise SerenityError(f"the input has {counted(len(raw), 'byte')}, the model takes "
                            f"{nbytes:,} (int8)")
    return raw


def _rewrite(graph: Graph, model: TFLiteModel, rip: bool, method: str,
             time_limit: float | None) -> RewriteResult:
    """:func:`rewrite_graph` on ``graph``, with the concats that are not pure copies in the
    model (:func:`~tvm_serenity.codegen.graph_c.concat_is_copy`) kept out of every pattern."""
    hidden = {n.name for n in graph.nodes.values() if n.op == "concatenation"
              and not concat_is_copy(model, model.operators[int(n.attrs["tflite_index"])])}
    masked = Graph([dataclasses.replace(n, op="concatenation_requantized")
                    if n.name in hidden else n for n in graph.nodes.values()],
                   graph.outputs, graph.name)
    result = rewrite_graph(masked if hidden else graph, inplace=rip, time_limit=time_limit,
                           method=method)
    if hidden:
        result.graph = Graph([dataclasses.replace(n, op="concatenation")
                              if n.name in hidden else n for n in result.graph.nodes.values()],
                             result.graph.outputs, result.graph.name)
    return result


def compile_tflite(path: str | os.PathLike, target: str = "pico",
                   out_dir: str | os.PathLike = "serenity_out", *, schedule: str = "serenity",
                   planner: str = "optimal", rip: bool = True, rewrite: bool = False,
                   time_limit: float | None = DEFAULT_TIME_LIMIT, input=None, seed: int = 0,
                   opt_level: str | None = "O2", build: bool = True,
                   stack_reserve: int = micro.DEFAULT_STACK_RESERVE,
                   force: bool = False) -> CompiledModel:
    """Compile the TFLite int8 model at ``path`` for ``target`` (``"pico"``, ``"pico2"`` or
    ``"host"``) into ``out_dir`` (see the module docstring).

    ``schedule``: a method of :mod:`tvm_serenity.schedule` (``"serenity"``: the exact
    divide-and-conquer search); ``planner``: an arena planner of :mod:`tvm_serenity.alloc`;
    ``time_limit`` bounds each (seconds; with ``rewrite``, each scheduler call of the rewrite
    search). ``rewrite``: identity graph rewriting (module docstring). ``input``: the int8
    input the project runs (bytes or
    an int8 array; default: ``seed``-random bytes). ``build=False`` only generates the sources;
    otherwise the firmware is built and, for the Pico boards, a model that does not fit SRAM
    is refused with :class:`~tvm_serenity.errors.SerenityError` naming every part.

    ``out_dir`` is written atomically and only when it is new, empty or an intact earlier
    build (``force=True`` also replaces an edited one; :mod:`tvm_serenity.builddir`); on any
    error it is left as it was.
    """
    if target not in TARGETS:
        raise SerenityError(f"unknown target '{target}' (choose from {', '.join(TARGETS)})")
    source = absolute(path)
    out = absolute(out_dir)
    marker = {"model": str(source)}
    with new_build(out_dir, KIND, force=force, derived=DERIVED, extra=marker) as tmp:
        model = load_tflite(source)
        marker["model_sha256"] = sha256_of(source)
        core = integer_core(model)
        graph = tflite_to_graph(core.model, fold_pad=True, name=core.source.name)
        source_graph, rewritten = None, None
        if rewrite:
            rewritten = _rewrite(graph, core.model, rip, schedule, time_limit)
            source_graph, graph = graph, rewritten.graph
            order = rewritten.schedule          # the scheduler's order for the rewritten graph
        else:
            order = schedule_graph(graph, schedule, inplace=rip, time_limit=time_limit)
        plan = plan_arena(graph, order.order, planner, 1, rip, time_limit)
        emitted = emit_model(core, graph, plan, opt_level=opt_level, name=core.source.name,
                             source_graph=source_graph)
        emitted.write(tmp / MODEL_DIR)
        data = _random_input(emitted.input_bytes, seed) if input is None else \
            _input_bytes(input, emitted.input_bytes)
        (tmp / INPUT_FILE).write_bytes(data)
        micro.generate_project(tmp / PROJECT_DIR, tmp / MODEL_DIR, target, emulate=True,
                               input_data=data, stack_reserve=stack_reserve)
        compiled = CompiledModel(out, source, target, rip, core, graph, order, plan, emitted,
                                 None, rewritten, source_graph)
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
_PLAN_FIELDS = {"model": str, "name": str, "target": str, "rip": bool, "input": dict,
                "output": dict, "schedule": dict, "planner": str, "plan_status": str,
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


def reference_output(model: str | os.PathLike, input: bytes) -> bytes:
    """The int8 output bytes the numpy reference interpreter computes for ``input`` on the
    integer core of the ``.tflite`` at ``model`` (what ``model_run`` must return)."""
    core = integer_core(load_tflite(model))
    x = np.frombuffer(_input_bytes(input, core.input.nbytes), dtype=np.int8)
    y = Interpreter(core.model).run([x.reshape(core.input.shape)])[0]
    return np.ascontiguousarray(y, dtype=np.int8).tobytes()


def run(out_dir: str | os.PathLike, emulate: bool = True, input=None, *, host: bool = False,
        check: bool = True, timeout: float = 600.0) -> micro.RunResult:
    """Run a directory written by :func:`compile_tflite` and return the measurements.

    ``emulate=True``: the target's emulator (rp2040js cycles for ``pico``, QEMU instruction
    counts for ``pico2``); ``False``: a connected board (:func:`tvm_serenity.micro.run`).
    ``host=True`` builds and runs the same model.c natively instead. ``input`` (bytes or an
    int8 array) replaces the project's input first. ``check``: raise
    :class:`~tvm_serenity.errors.SerenityError` unless the output equals the numpy reference
    interpreter's, byte for byte. ``timeout`` bounds the run (seconds of wall time).
    """
    out = absolute(out_dir)
    meta = load_plan(out_dir)
    model = checked_model(out_dir) if check else None
    project = out / PROJECT_DIR
    if input is not None:
        data = _input_bytes(input, meta["input"]["bytes"])
        micro.generate_project(project, out / MODEL_DIR, meta["target"], emulate=True,
                               input_data=data,
                               stack_reserve=micro.load_project(project)["stack_reserve"])
        write_bytes(out / INPUT_FILE, data)
        refresh_marker(out)
    data = (out / INPUT_FILE).read_bytes()
    if host or meta["target"] == "host":
        result = micro.run_host(micro.build_firmware(project, "host"), timeout=timeout)
    else:
        result = micro.run(project, emulate=emulate, timeout=timeout)
    if check:
        expected = reference_output(model, data)
        if result.output != expected:
            first = next(i for i, (a, b) in enumerate(zip(result.output, expected)) if a != b) \
                if len(result.output) == len(expected) else 0
            raise SerenityError(f"{result.backend} output differs from the reference "
                                f"interpreter ({len(result.output):,} vs "
                                f"{counted(len(expected), 'byte')}, "
                                f"first difference at byte {first})")
    return result
