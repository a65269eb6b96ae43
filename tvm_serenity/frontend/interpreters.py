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
:func:`run_interpreter_batch` does the same for many models in one subprocess. A crash or
error in the child raises :class:`InterpreterError` with its exit status and stderr's end.
"""

from __future__ import annotations

import importlib.util
import os
import pickle
import subprocess
import sys
from typing import Sequence

import numpy as np

from ..errors import SerenityError
from .reference import LITERT, TFLM
from .tflite_model import TFLiteModel, parse_tflite

__all__ = ["TFLM", "LITERT", "TFLM_REQUIREMENT", "LITERT_REQUIREMENT", "InterpreterError",
           "available", "run_interpreter", "run_interpreter_batch", "model_inputs"]

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
    proc = subprocess.run([sys.executable, "-m", __name__], input=pickle.dumps(payload),
                          capture_output=True, timeout=timeout)
    if proc.returncode != 0:
        tail = proc.stderr.decode("utf-8", "replace").strip().splitlines()[-5:]
        what = sources[0] if len(sources) == 1 else f"{len(sources)} models"
        raise InterpreterError(f"{kind} interpreter on {what} exited with status "
                               f"{proc.returncode}: {' | '.join(tail) or 'no message'}")
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


def _child() -> None:
    payload = pickle.loads(sys.stdin.buffer.read())
    if payload["kind"] == TFLM:
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
