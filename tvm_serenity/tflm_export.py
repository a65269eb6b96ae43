"""Keep TensorFlow Lite Micro, get our memory: a ``.tflite`` with our order and arena plan in it.

TFLite Micro runs a subgraph's operators in the order its flatbuffer lists them, and its
``MicroAllocator`` reads an offline arena plan from the model's metadata (TFLM's
``docs/memory_management.md``, ``micro_allocation_info.cc``): an entry named
``OfflineMemoryAllocation`` whose buffer holds little-endian int32 words ``[version,
subgraphs, n, offset of tensor 0, ..., offset of tensor n-1]``, ``n`` the number of tensors
of every subgraph, each offset relative to the start of the non-persistent (head) section of
the arena, ``-1`` for a tensor TFLM plans itself. Its ``GreedyMemoryPlanner`` takes the given
offsets as fixed and fits everything else (``-1`` tensors, kernel scratch buffers from
``RequestScratchBufferInArena``, which an offline plan cannot place) into the gaps around them;
the head is the highest end. :func:`export_tflm` writes such a file:

1. **Read and refuse** what cannot be exported exactly: an unreadable file
   (:class:`~.frontend.tflite_model.TFLiteError`), several subgraphs, variable tensors
   (TFLM keeps them in the persistent tail, outside any plan), buffers stored outside the
   flatbuffer, an operator with several outputs (the graph IR has one tensor per node).
2. **Order and plan** on the graph IR (:func:`~.frontend.tflite_to_graph`, PADs not folded:
   TFLM runs every operator as stored): the ``schedule`` method's order and the ``planner``'s
   arena for it, both *without in-place execution* (TFLM never runs an operator over its own
   input, so Right In-Place overlap cannot be exported), with TFLM's 16 B buffer alignment
   (``MicroArenaBufferAlignment``: offsets and padded sizes multiples of 16). The plain memory
   model's lifetimes are TFLM's: graph inputs live from the start, graph outputs to the end, an
   operator's inputs and output overlap while it runs.
3. **Offsets per tensor**: the tensors TFLM plans in the head (``needs_allocating``: no
   constant data, not variable, more than 0 bytes) get the plan's offset; constants, 0-byte
   and unreferenced tensors get ``-1``.
4. **Check against TFLM's own rules**, independently of the graph IR: the lifetimes TFLM's
   ``AllocationInfoBuilder::MarkAllocationLifetimes`` gives the reordered flatbuffer (inputs
   and outputs created at scope 0, operator ``k`` at scope ``k + 1``, outputs used until the
   last scope) are checked with :func:`~.alloc.verify_plan` against the offsets: no two
   tensors TFLM has alive at once may overlap.
5. **Write** the copy: operators permuted (what :mod:`.frontend.interpreters` does to measure
   TFLM in another order), the metadata entry added (or an earlier ``OfflineMemoryAllocation``
   entry replaced, in place; every other metadata entry kept), repacked with tflite-micro's
   flatbuffer object API and re-aligned by TFLM's own ``tflite_flatbuffer_align`` (buffers on
   16 B). Tensors, buffers, weights, inputs, outputs and signatures are unchanged.
6. **Run it in TFLite Micro** (the ``tflite-micro`` Python interpreter, default configuration,
   which honours the plan; each run in a subprocess): the head arena of the original and of
   the copy, and the copy's outputs compared byte for byte with the original's on random
   inputs. A copy whose outputs differ is never written.

The output file is written atomically (a hidden sibling renamed into place) and never replaces
an existing path unless ``force``. Needs the ``tflite-micro`` package (test extra).
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from .alloc import plan_arena, verify_plan
from .alloc.plan import make_plan
from .builddir import absolute, write_bytes
from .errors import SerenityError
from .frontend.interpreters import (TFLM, TFLM_REQUIREMENT, InterpreterError, _reordered,
                                    available, model_inputs, tflm_arena)
from .frontend.tflite_model import FILE_IDENTIFIER, TFLiteModel, parse_tflite
from .frontend.to_graph import tflite_to_graph
from .memory import Lifetime, Liveness
from .schedule import Deadline, schedule
from .text import counted

__all__ = ["TFLM_ALIGNMENT", "OFFLINE_PLAN_METADATA", "OFFLINE_PLAN_VERSION", "ExportError",
           "TFLMExport", "export_tflm", "offline_plan", "tflm_lifetimes", "offline_offsets",
           "check_offsets", "exported_model", "tflm_outputs", "write_new_file"]

TFLM_ALIGNMENT = 16                       # MicroArenaBufferAlignment()
OFFLINE_PLAN_METADATA = "OfflineMemoryAllocation"
OFFLINE_PLAN_VERSION = 1
ONLINE = -1                               # kOnlinePlannedBuffer: TFLM plans the tensor
DEFAULT_TIME_LIMIT = 30.0
DEFAULT_INPUTS = 3
RUN_ARENA_BYTES = 256 << 20               # arena offered to TFLM (the plan sets what is used)


class ExportError(SerenityError):
    """A model cannot be exported for TFLite Micro, or TFLM disagrees with the export."""


@dataclass(frozen=True)
class TFLMExport:
    """What :func:`export_tflm` did: the order, the plan and what TFLite Micro measured.

    ``order``: operator indices of the source file in the order of the copy; ``offsets``: the
    offline plan, one per tensor (``-1``: TFLM plans it). ``planned_bytes``: our arena for
    that order (16 B alignment, no in-place); ``tflm_head``/``tflm_head_original``: the head
    arena TFLM's interpreter reports for the copy and for the source; ``identical``: input
    sets on which the copy's outputs equal the source's byte for byte, of ``checked``.
    """

    source: str
    output: str | None
    schedule: str
    planner: str
    order: tuple[int, ...]
    offsets: tuple[int, ...]
    planned_bytes: int
    liveness_peak_bytes: int
    plan_status: str
    schedule_optimal: bool             # the order's peak is proven minimal over all orders
    tflm_head: int
    tflm_head_original: int
    checked: int
    identical: int
    replaced_plan: bool                # the source had an OfflineMemoryAllocation entry
    model: bytes = field(repr=False, default=b"")

    @property
    def planned_tensors(self) -> int:
        return sum(o != ONLINE for o in self.offsets)

    @property
    def at_optimum(self) -> bool:
        """The order is proven optimal and the plan meets its lower bound (or is proven
        optimal): no order and offsets TFLM can run (without in-place) need less."""
        return self.schedule_optimal and self.plan_status in ("bound", "optimal")

    @property
    def tflm_extra_bytes(self) -> int:
        """Head bytes TFLM added around the plan (its own scratch buffers, -1 tensors)."""
        return self.tflm_head - self.planned_bytes

    def to_json(self) -> dict:
        return {"source": self.source, "output": self.output, "schedule": self.schedule,
                "planner": self.planner, "order": list(self.order),
                "offsets": list(self.offsets), "planned_tensors": self.planned_tensors,
                "planned_bytes": self.planned_bytes,
                "liveness_peak_bytes": self.liveness_peak_bytes,
                "plan_status": self.plan_status, "schedule_optimal": self.schedule_optimal,
                "tflm_head_bytes": self.tflm_head,
                "tflm_head_original_bytes": self.tflm_head_original,
                "tflm_extra_bytes": self.tflm_extra_bytes, "inplace": False,
                "outputs_identical": self.identical, "inputs_checked": self.checked,
                "replaced_offline_plan": self.replaced_plan}

    def summary(self) -> str:
        n = len(self.offsets)
        ratio = self.tflm_head_original / self.tflm_head if self.tflm_head else float("nan")
        extra = (f" + {self.tflm_extra_bytes:,} B TFLM placed itself (scratch buffers)"
                 if self.tflm_extra_bytes else "")
        lines = [
            f"order: {self.schedule}, {counted(len(self.order), 'operator')}, liveness peak "
            f"{self.liveness_peak_bytes:,} B"
            + (" (proven minimal over all orders)" if self.schedule_optimal else ""),
            f"offline plan ({self.planner}, {TFLM_ALIGNMENT} B alignment): "
            f"{self.planned_bytes:,} B ({self.plan_status}) for "
            f"{self.planned_tensors} of {counted(n, 'tensor')}"
            + (f", -1 for the other {n - self.planned_tensors} (constant or empty)"
               if self.planned_tensors < n else "")
            + "; TFLM fits its scratch buffers around it"
            + ("; the model's earlier OfflineMemoryAllocation was replaced"
               if self.replaced_plan else ""),
            "in-place (RiP) overlap not exported: TFLite Micro runs no operator over its own "
            "input, so the plan has none",
            f"TFLM head arena: {self.tflm_head_original:,} B original -> {self.tflm_head:,} B "
            f"exported ({ratio:.2f}x){extra}",
            f"TFLM check: outputs byte-identical to the original on {self.identical}/"
            f"{self.checked} random inputs",
        ]
        if self.output:
            lines.append(f"wrote {self.output}")
        return "\n".join(lines)


# ----------------------------------------------------------------------- reading, refusing
def _schema():
    if not available(TFLM):
        raise ExportError(f"export-tflm needs TFLite Micro's Python package: pip install "
                          f"'{TFLM_REQUIREMENT}'")
    from tflite_micro.tensorflow.lite.micro.python import schema_py_generated
    return schema_py_generated


def _checked_object(buf: bytes, source: str):
    """The flatbuffer object tree of ``buf`` after refusing what cannot be exported."""
    schema = _schema()
    try:
        obj = schema.ModelT.InitFromPackedBuf(buf, 0)
    except Exception as e:      # noqa: BLE001 - the flatbuffer library raises many types
        raise ExportError(f"{source}: not a readable TFLite model ({type(e).__name__} "
                          "reading its subgraphs and buffers)") from None
    if len(obj.subgraphs or ()) != 1:
        raise ExportError(f"{source}: {counted(len(obj.subgraphs or ()), 'subgraph')}; "
                          "export-tflm plans models with one subgraph only")
    for i, t in enumerate(obj.subgraphs[0].tensors or ()):
        if t.isVariable:
            raise ExportError(f"{source}: tensor {i} ('{_text(t.name)}') is a variable "
                              "tensor; export-tflm refuses models with variable tensors")
    for i, b in enumerate(obj.buffers or ()):
        if b.offset > 1:
            raise ExportError(f"{source}: buffer {i} keeps its data outside the flatbuffer "
                              "(a model over 2 GB); export-tflm cannot repack it")
    return obj


def _text(value) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


# ----------------------------------------------------------------------------- the plan
def tflm_lifetimes(model: TFLiteModel, order: Sequence[int]) -> dict[int, tuple[int, int]]:
    """Tensor index -> ``(first_created, last_used)`` scopes, as TFLM's
    ``MarkAllocationLifetimes`` marks them when the operators (indices) run in ``order``:
    graph inputs and outputs created at scope 0, operator ``k`` of ``order`` at scope
    ``k + 1`` (creating its outputs, using its inputs and outputs), graph outputs used until
    the last scope. Tensors no operator nor the graph mentions are absent."""
    scopes: dict[int, list[int]] = {}

    def created(t: int, scope: int) -> None:      # UpdateFirstCreated
        scopes[t] = [scope, scope]

    def used(t: int, scope: int) -> None:         # UpdateLastUsed (constants too: unplanned)
        scopes.setdefault(t, [-1, -1])[1] = scope

    for t in (*model.inputs, *model.outputs):
        created(t, 0)
    for scope, index in enumerate(order, 1):
        op = model.operator(index)
        for t in op.outputs:
            created(t, scope)
        for t in (*op.inputs, *op.outputs):
            if t >= 0:
                used(t, scope)
    for t in model.outputs:
        used(t, len(order))
    return {t: (a, b) for t, (a, b) in scopes.items()}


def offline_offsets(model: TFLiteModel, graph, plan) -> list[int]:
    """One offset per tensor of ``model``: the plan's for each tensor TFLM plans in the head
    (graph IR nodes: graph inputs and operator outputs with bytes), ``-1`` for the rest."""
    offsets = [ONLINE] * len(model.tensors)
    for name, node in graph.nodes.items():
        t = node.attrs["tensor_index"] if node.op == "input" else \
            model.operator(node.attrs["tflite_index"]).outputs[0]
        if model.tensors[t].data is None and node.bytes > 0:
            offsets[t] = plan.offsets[name]
    return offsets


def check_offsets(model: TFLiteModel, order: Sequence[int], offsets: Sequence[int],
                  graph) -> None:
    """Raise :class:`~.alloc.PlanError` unless no two tensors TFLM keeps alive at once (its
    own lifetime rules, :func:`tflm_lifetimes`) overlap in the offline plan."""
    scopes = tflm_lifetimes(model, order)
    steps = ("graph inputs", *(f"operator {i} ({model.operator(i).op})" for i in order))
    lifetimes, planned = {}, {}
    for t, offset in enumerate(offsets):
        if offset != ONLINE:
            name = f"tensor {t} ('{model.tensors[t].name}')"
            lifetimes[name] = Lifetime(name, model.tensors[t].nbytes, *scopes[t])
            planned[name] = offset
    live = Liveness(steps, lifetimes, (), 0)
    verify_plan(graph, live, make_plan("offline plan under TFLM's lifetimes", live,
                                       TFLM_ALIGNMENT, planned, (), (), 0.0))


def offline_plan(model: TFLiteModel, schedule_method: str = "serenity",
                 planner: str = "optimal",
                 time_limit: Deadline | float | None = DEFAULT_TIME_LIMIT):
    """``(order, offsets, schedule result, arena plan)`` for ``model``: operator indices in
    the memory-aware order and the offline offsets for it (module docstring, steps 2-4)."""
    graph = tflite_to_graph(model, fold_pad=False)
    total = Deadline.of(time_limit, DEFAULT_TIME_LIMIT, what="time_limit")
    result = schedule(graph, schedule_method, inplace=False, time_limit=total.share(0.5))
    plan = plan_arena(graph, result.order, planner, TFLM_ALIGNMENT, False, total.share(0.8))
    order = [graph.nodes[n].attrs["tflite_index"] for n in result.order]
    offsets = offline_offsets(model, graph, plan)
    check_offsets(model, order, offsets, graph)
    return order, offsets, result, plan


# ------------------------------------------------------------------------------- writing
def _metadata_buffer(obj) -> tuple[int, bool]:
    """The buffer index the plan goes to: an earlier plan's (reused in place when nothing
    else refers to it) or a new one; and whether an earlier plan was there."""
    entries = [m for m in obj.metadata or () if _text(m.name) == OFFLINE_PLAN_METADATA]
    if entries:
        index = entries[-1].buffer          # TFLM reads the last matching entry
        users = [t.buffer for s in obj.subgraphs for t in s.tensors or ()]
        users += [m.buffer for m in obj.metadata if m is not entries[-1]]
        users += list(obj.metadataBuffer if obj.metadataBuffer is not None else ())
        if index not in users and 0 < index < len(obj.buffers):
            return index, True
    obj.buffers.append(_schema().BufferT())
    index = len(obj.buffers) - 1
    if entries:
        entries[-1].buffer = index
    else:
        entry = _schema().MetadataT()
        entry.name, entry.buffer = OFFLINE_PLAN_METADATA, index
        obj.metadata = [*(obj.metadata or ()), entry]
    return index, bool(entries)


def exported_model(buf: bytes, source: str, order: Sequence[int],
                   offsets: Sequence[int]) -> tuple[bytes, bool]:
    """``buf`` with its operators in ``order`` and ``offsets`` as its offline plan (module
    docstring, step 5); and whether an earlier offline plan was replaced."""
    import flatbuffers
    obj = _checked_object(_reordered(buf, list(order)), source)
    index, replaced = _metadata_buffer(obj)
    words = [OFFLINE_PLAN_VERSION, 1, len(offsets), *offsets]
    obj.buffers[index].data = np.asarray(words, dtype="<i4").view(np.uint8)
    builder = flatbuffers.Builder(len(buf) + 4 * len(words) + 4096)
    builder.Finish(obj.Pack(builder), file_identifier=FILE_IDENTIFIER)
    return _aligned(bytes(builder.Output())), replaced


def _aligned(buf: bytes) -> bytes:
    """``buf`` re-laid out by TFLM's ``tflite_flatbuffer_align`` (C++ unpack and repack,
    buffers on 16 B, as TFLite's converter writes them)."""
    from tflite_micro.tensorflow.lite.micro.tools import tflite_flatbuffer_align_wrapper
    with tempfile.TemporaryDirectory(prefix="tvm-serenity-tflm-") as tmp:
        src, dst = Path(tmp) / "packed.tflite", Path(tmp) / "aligned.tflite"
        src.write_bytes(buf)
        tflite_flatbuffer_align_wrapper.align_tflite_model(str(src), str(dst))
        return dst.read_bytes()


def write_new_file(path: str | os.PathLike, data: bytes, force: bool = False) -> Path:
    """Write ``data`` to ``path`` atomically: a hidden sibling renamed into place once
    complete. An existing path is refused untouched unless ``force`` (a directory always)."""
    dest = absolute(path)
    if dest.is_dir() and not dest.is_symlink():
        raise ExportError(f"output '{path}' is a directory; give a file name")
    if os.path.lexists(dest) and not force:
        raise ExportError(f"output '{path}' exists; pass --force to replace it")
    if not dest.parent.is_dir():
        raise ExportError(f"cannot write '{path}': directory '{dest.parent}' does not exist")
    tmp = dest.parent / f".{dest.name}.tmp-{os.getpid()}"
    try:
        write_bytes(tmp, data)
        if force:
            os.replace(tmp, dest)
        else:
            os.link(tmp, dest)          # fails, rather than replaces, if dest appeared since
    except FileExistsError:
        raise ExportError(f"output '{path}' exists; pass --force to replace it") from None
    except OSError as e:
        raise ExportError(f"cannot write '{path}': {e.strerror}") from None
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)
    return dest


# ------------------------------------------------------------------------- TFLM checking
def tflm_outputs(models: Sequence[bytes], input_sets, names: Sequence[str] | None = None,
                 timeout: float = 600.0) -> list[list[list[np.ndarray]]]:
    """Per model, per input set: the output arrays of TFLite Micro's interpreter in its
    default configuration (the greedy planner, which honours an offline plan), in a
    subprocess (TFLM aborts the process on some models). A model TFLM refuses raises
    :class:`~.frontend.interpreters.InterpreterError` naming it (``names``) and quoting TFLM."""
    names = list(names or (f"model {k}" for k in range(len(models))))
    payload = {"models": [bytes(m) for m in models],
               "inputs": [[np.asarray(a) for a in s] for s in input_sets]}
    proc = subprocess.run([sys.executable, "-m", __name__], input=pickle.dumps(payload),
                          capture_output=True, timeout=timeout)
    log = [line.strip() for line in proc.stderr.decode("utf-8", "replace").splitlines()
           if line.strip()]
    if proc.returncode != 0:
        raise InterpreterError(_crash_message(proc.returncode, log, names))
    result = pickle.loads(proc.stdout)
    if "failed" in result:                  # TFLM's own log lines say why
        raise InterpreterError(f"TFLite Micro cannot run {names[result['failed']]}: "
                               + " | ".join([*[line for line in log if not line.startswith(
                                   _PROGRESS)][-2:], result["error"]]))
    return result["outputs"]


def _identical(a: Sequence[np.ndarray], b: Sequence[np.ndarray]) -> bool:
    return len(a) == len(b) and all(x.dtype == y.dtype and x.shape == y.shape
                                    and x.tobytes() == y.tobytes() for x, y in zip(a, b))


def export_tflm(model: str | os.PathLike | bytes, output: str | os.PathLike | None = None,
                *, schedule_method: str = "serenity", planner: str = "optimal",
                time_limit: float | None = DEFAULT_TIME_LIMIT, inputs: int = DEFAULT_INPUTS,
                seed: int = 0, force: bool = False) -> TFLMExport:
    """Export ``model`` (path or bytes) for TFLite Micro with our order and offline arena
    plan, checked in TFLM, and write it to ``output`` (None: only return it in ``.model``).
    ``inputs``: random input sets (seed ``seed``) the outputs are compared on (at least 1).
    Every problem raises a :class:`~.errors.SerenityError` subclass with one line."""
    if isinstance(inputs, bool) or not isinstance(inputs, int) or inputs < 1:
        raise ExportError(f"inputs (--inputs) must be a positive number of input sets, got "
                          f"{inputs!r}")
    if isinstance(model, (bytes, bytearray)):
        buf, source = bytes(model), "<bytes>"
    else:
        source = os.fspath(model)
        try:
            buf = Path(model).read_bytes()
        except OSError as e:
            raise ExportError(f"cannot read model '{source}': {e.strerror}") from None
    parsed = parse_tflite(buf, source)
    _checked_object(buf, source)
    order, offsets, result, plan = offline_plan(parsed, schedule_method, planner, time_limit)
    exported, replaced = exported_model(buf, source, order, offsets)
    rng = np.random.default_rng(seed)
    input_sets = [model_inputs(parsed, rng) for _ in range(inputs)]
    before, after = tflm_outputs([buf, exported], input_sets,
                                 [f"'{source}'", f"the export of '{source}'"])
    identical = sum(_identical(a, b) for a, b in zip(before, after))
    if identical != inputs:
        raise ExportError(f"{source}: TFLite Micro's outputs for the exported model differ "
                          f"from the original's on {inputs - identical} of {inputs} inputs; "
                          "nothing written")
    head, head_original = tflm_arena(exported).head, tflm_arena(buf).head
    if head < plan.arena_bytes:
        raise ExportError(f"{source}: TFLite Micro's head arena ({head:,} B) is below the "
                          f"offline plan's {plan.arena_bytes:,} B: it ignored the plan; "
                          "nothing written")
    if output is not None:
        write_new_file(output, exported, force)
    written = None if output is None else os.fspath(output)
    return TFLMExport(source, written, schedule_method, planner, tuple(order), tuple(offsets),
                      plan.arena_bytes, plan.liveness_peak_bytes, plan.status,
                      result.optimal, head,
                      head_original, inputs, identical, replaced, exported)


_PROGRESS = "tvm-serenity-tflm-step"


def _crash_message(status: int, log: list[str], names: Sequence[str]) -> str:
    """What a crashed TFLM child was doing (its last progress line) and what it printed."""
    how = f"crashed (signal {-status})" if status < 0 else f"exited with status {status}"
    steps = [line.split()[1:] for line in log if line.startswith(_PROGRESS)]
    messages = [line for line in log if not line.startswith(_PROGRESS)]
    quoted = f": {' | '.join(messages[-3:])}" if messages else ""
    if not steps:
        return f"TFLite Micro's interpreter {how} before running any model{quoted}"
    stage, k, j = steps[-1][0], int(steps[-1][1]), int(steps[-1][2])
    doing = "loading" if stage == "load" else f"running input set {j + 1} of"
    blame = (" (the original model: this TFLite Micro cannot run it, so no export of it can be "
             "checked)" if k == 0 and len(names) > 1 else "")
    return f"TFLite Micro {how} while {doing} {names[k]}{blame}{quoted}"


# ---------------------------------------------------------------------- child process side
def _progress(stage: str, model: int, input_set: int) -> None:
    sys.stderr.write(f"{_PROGRESS} {stage} {model} {input_set}\n")
    sys.stderr.flush()


def _run_default(models: list[bytes], input_sets) -> dict:
    from tflite_micro import runtime
    out = []
    for k, model in enumerate(models):
        try:
            _progress("load", k, 0)
            interp = runtime.Interpreter.from_bytes(model, arena_size=RUN_ARENA_BYTES)
            outputs = range(len(parse_tflite(model).outputs))
            runs = []
            for j, inputs in enumerate(input_sets):
                for i, arr in enumerate(inputs):
                    interp.set_input(arr, i)
                _progress("invoke", k, j)
                interp.invoke()
                runs.append([np.array(interp.get_output(i)) for i in outputs])
        except (RuntimeError, ValueError) as e:       # what the wrapper raises on TFLM errors
            return {"failed": k, "error": str(e)}
        out.append(runs)
    return {"outputs": out}


if __name__ == "__main__":
    request = pickle.loads(sys.stdin.buffer.read())
    sys.stdout.buffer.write(pickle.dumps(_run_default(request["models"], request["inputs"])))
    sys.stdout.buffer.flush()
