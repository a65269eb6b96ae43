"""Ground truth from the real TFLite runtimes, each run in its own subprocess.

Two interpreters install from PyPI here (test extras; neither is needed by the package itself):

* ``tflite-micro`` (``TFLM_REQUIREMENT``): TFLite Micro's Python wrapper, built with its
  reference kernels, run with ``kPreserveAllTensors`` so every intermediate is readable. It
  aborts the whole process (SIGABRT) on some quantizations it rejects, hence the subprocess.
* ``ai-edge-litert`` (``LITERT_REQUIREMENT``): LiteRT (TFLite) with the reference op resolver
  (``OpResolverType.BUILTIN_REF``: reference kernels, no default XNNPACK delegate) and
  ``experimental_preserve_all_tensors``. Only the model's own tensors are read back (reading
  the interpreter's scratch tensors can crash it).

:func:`run_interpreter` sends the model and the input sets to ``python -m
tvm_serenity.frontend.interpreters`` and returns, per input set, a dict tensor index -> value
for every non-constant tensor (graph inputs, intermediates, outputs);
:func:`run_interpreter_batch` does the same for many models in one subprocess.
:func:`tflm_arena` measures the arena TFLite Micro plans for a model (no inference), optionally
with its operators reordered, in its own subprocess. A crash or error in the child raises :class:`InterpreterError` with its exit status
and stderr's end.
"""

from __future__ import annotations

import importlib.util
import os
import pickle
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..errors import SerenityError
from .reference import LITERT, TFLM
from .tflite_model import FILE_IDENTIFIER, TFLiteModel, parse_tflite

__all__ = ["TFLM", "LITERT", "TFLM_REQUIREMENT", "LITERT_REQUIREMENT", "InterpreterError",
           "available", "run_interpreter", "run_interpreter_batch", "model_inputs",
           "TFLMArena", "tflm_arena"]

TFLM_REQUIREMENT = "tflite-micro==0.dev20261023182759"
LITERT_REQUIREMENT = "ai-edge-litert==2.3.0"
_MODULES = {TFLM: "tflite_micro", LITERT: "ai_edge_litert"}


class InterpreterError(SerenityError, RuntimeError):
    """The interpreter subprocess failed (crash, abort, or an error it reported)."""


def available(kind: str) -> bool:
    """Whether the Python package behind ``kind`` (``"tflm"`` or ``"litert"``) is installed
    (looked up without importing it)."""
    try:
        return importlib.util.find_spec(_MODULES[kind]) is not None
    except (ImportError, ValueError):       # ValueError: a module stubbed out in sys.modules
        return False


def run_interpreter(kind: str, model: str | os.PathLike | bytes,
                    input_sets: Sequence[Sequence[np.ndarray]], *, timeout: float = 600.0,
                    arena_bytes: int = 64 << 20) -> list[dict[int, np.ndarray]]:
    """Run ``model`` (path or bytes) once per input set (arrays in model input order)."""
    return run_interpreter_batch(kind, [(model, input_sets)], timeout=timeout,
                                 arena_bytes=arena_bytes)[0]


def run_interpreter_batch(kind: str, jobs: Sequence[tuple[str | os.PathLike | bytes,
                                                          Sequence[Sequence[np.ndarray]]]],
                          *, timeout: float = 600.0, arena_bytes: int = 64 << 20
                          ) -> list[list[dict[int, np.ndarray]]]:
    """:func:`run_interpreter` for several ``(model, input_sets)`` jobs in one subprocess
    (one interpreter start-up instead of many; an abort fails the whole batch)."""
    if kind not in _MODULES:
        raise ValueError(f"unknown interpreter {kind!r} (use {TFLM!r} or {LITERT!r})")
    requests, sources = [], []
    for model, input_sets in jobs:
        if isinstance(model, (bytes, bytearray)):
            buf, source = bytes(model), "<bytes>"
        else:
            with open(model, "rb") as f:
                buf, source = f.read(), os.fspath(model)
        parsed = parse_tflite(buf, source)
        sources.append(source)
        requests.append({"model": buf, "read": [t.index for t in parsed.tensors
                                                 if t.data is None],
                         "inputs": [[np.asarray(a) for a in s] for s in input_sets]})
    payload = {"kind": kind, "arena_bytes": arena_bytes, "jobs": requests}
    what = sources[0] if len(sources) == 1 else f"{len(sources)} models"
    return _in_child(payload, f"{kind} interpreter on {what}", timeout)


@dataclass(frozen=True)
class TFLMArena:
    """The arena TFLite Micro's ``MicroAllocator`` laid out for one model (bytes).

    ``head``: the non-persistent part, planned by TFLM's ``GreedyMemoryPlanner``: activation
    tensors and kernel scratch buffers (the planned activation memory, docs/peers.md);
    ``tail``: persistent structures (tensor and node structs, quantization data, kernel
    persistent buffers; sizes of a 64-bit host); ``total = head + tail``.
    """

    total: int
    head: int
    tail: int


_ALLOCATION = re.compile(r"Arena allocation (total|head|tail) (\d+) bytes")


def tflm_arena(model: str | os.PathLike | bytes, *, order: Sequence[int] | None = None,
               timeout: float = 600.0, arena_bytes: int = 256 << 20) -> TFLMArena:
    """Measure the arena TFLite Micro plans for ``model`` (path or bytes), in its own subprocess.

    ``order``: operator indices of the main subgraph in the order to run them (a topological
    order using each operator once; default: the flatbuffer's). The child then writes a copy of
    the model whose operator list is in that order (tflite-micro's flatbuffer object API;
    tensors, buffers and everything else unchanged), which TFLM executes, and therefore plans,
    in that order. The child builds the interpreter (which allocates and plans; nothing is
    invoked) and calls ``print_allocations()``, whose report goes to the C-level stderr: it is
    captured by redirecting file descriptor 2. ``arena_bytes`` is the arena offered (large
    enough for the plan; the figures do not depend on it). TFLM aborts the process on some
    models: that, like any other failure, raises :class:`InterpreterError`.
    """
    if isinstance(model, (bytes, bytearray)):
        buf, source = bytes(model), "<bytes>"
    else:
        with open(model, "rb") as f:
            buf, source = f.read(), os.fspath(model)
    payload = {"kind": TFLM, "task": "arena", "arena_bytes": arena_bytes, "model": buf,
               "order": None if order is None else [int(i) for i in order]}
    report = _in_child(payload, f"{TFLM} arena of {source}", timeout)
    found = dict((k, int(v)) for k, v in _ALLOCATION.findall(report))
    if set(found) != {"total", "head", "tail"}:
        raise InterpreterError(f"{TFLM} arena of {source}: print_allocations() reported no "
                               f"arena totals: {report[:200]!r}")
    return TFLMArena(found["total"], found["head"], found["tail"])


def _in_child(payload: dict, what: str, timeout: float):
    """Run ``python -m tvm_serenity.frontend.interpreters`` on ``payload``; its result."""
    proc = subprocess.run([sys.executable, "-m", __name__], input=pickle.dumps(payload),
                          capture_output=True, timeout=timeout)
    if proc.returncode != 0:
        tail = proc.stderr.decode("utf-8", "replace").strip().splitlines()[-5:]
        raise InterpreterError(f"{what} exited with status {proc.returncode}: "
                               f"{' | '.join(tail) or 'no message'}")
    return pickle.loads(proc.stdout)


# ---------------------------------------------------------------------- child process side
def _run_tflm(req, arena_bytes: int) -> list[dict[int, np.ndarray]]:
    from tflite_micro import runtime
    interp = runtime.Interpreter.from_bytes(
        req["model"], arena_size=arena_bytes,
        intrepreter_config=runtime.InterpreterConfig.kPreserveAllTensors)
    results = []
    for inputs in req["inputs"]:
        for k, arr in enumerate(inputs):
            interp.set_input(arr, k)
        interp.invoke()
        results.append({i: np.array(interp.GetTensor(i, 0)["tensor_data"]) for i in req["read"]})
    return results


def _run_litert(req) -> list[dict[int, np.ndarray]]:
    from ai_edge_litert.interpreter import Interpreter, OpResolverType
    interp = Interpreter(model_content=req["model"], num_threads=1,
                         experimental_op_resolver_type=OpResolverType.BUILTIN_REF,
                         experimental_preserve_all_tensors=True)
    interp.allocate_tensors()
    details = interp.get_input_details()
    results = []
    for inputs in req["inputs"]:
        for d, arr in zip(details, inputs):
            interp.set_tensor(d["index"], arr)
        interp.invoke()
        results.append({i: np.array(interp.get_tensor(i)) for i in req["read"]})
    return results


def _reordered(model: bytes, order: list[int]) -> bytes:
    """``model`` with the main subgraph's operators in ``order`` (indices into its list)."""
    import flatbuffers
    from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as schema
    obj = schema.ModelT.InitFromPackedBuf(model, 0)
    operators = obj.subgraphs[0].operators
    if sorted(order) != list(range(len(operators))):
        raise ValueError(f"order must use each of the {len(operators)} operators once")
    obj.subgraphs[0].operators = [operators[i] for i in order]
    builder = flatbuffers.Builder(len(model) + 4096)
    builder.Finish(obj.Pack(builder), file_identifier=FILE_IDENTIFIER)
    return bytes(builder.Output())


def _tflm_allocations(model: bytes, order: list[int] | None, arena_bytes: int) -> str:
    """What TFLM's ``print_allocations()`` writes to file descriptor 2, as text."""
    from tflite_micro import runtime
    if order is not None:
        model = _reordered(model, order)
    interp = runtime.Interpreter.from_bytes(model, arena_size=arena_bytes)
    with tempfile.TemporaryFile() as captured:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(captured.fileno(), 2)
        try:
            interp.print_allocations()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        captured.seek(0)
        return captured.read().decode("utf-8", "replace")


def _child() -> None:
    payload = pickle.loads(sys.stdin.buffer.read())
    if payload.get("task") == "arena":
        out = _tflm_allocations(payload["model"], payload["order"], payload["arena_bytes"])
    elif payload["kind"] == TFLM:
        out = [_run_tflm(job, payload["arena_bytes"]) for job in payload["jobs"]]
    else:
        out = [_run_litert(job) for job in payload["jobs"]]
    sys.stdout.buffer.write(pickle.dumps(out))
    sys.stdout.buffer.flush()


def model_inputs(model: TFLiteModel, rng: np.random.Generator) -> list[np.ndarray]:
    """Random inputs for ``model``: uniform int8 for int8 inputs, uniform [-1, 1) floats."""
    out = []
    for i in model.inputs:
        t = model.tensors[i]
        if t.dtype == "int8":
            out.append(rng.integers(-128, 128, t.shape, dtype=np.int8))
        else:
            out.append(rng.uniform(-1.0, 1.0, t.shape).astype(t.dtype))
    return out


if __name__ == "__main__":
    _child()
