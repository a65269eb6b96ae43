"""Post-checks a case runs after a command exited 0 (each in its own process, see
:mod:`tests.fuzz.runner`): they return ``(outcome, message)``.

* ``tflm MODEL OUT``: TFLite Micro must accept the ``.tflite`` that ``compile`` accepted, and agree
  with it: TFLM runs the model on the build's ``input.bin`` (its inputs as ``plan.json`` lists
  them; dequantized where ``--int8-core`` stripped a float QUANTIZE edge), and the reference
  interpreter (:func:`tvm_serenity.deploy.reference_outputs`, what ``run`` checks model.c
  against) must give TFLM's outputs byte for byte on the inputs TFLM ran.
* ``schedule GRAPH STDOUT [noinplace]``: the ``--json`` result of ``schedule`` is an order of
  every operator once, inputs before consumers, whose peak (the memory model,
  :func:`tvm_serenity.memory.simulate`) is the peak reported, at or above the lower bound and at
  most the arena.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np


def tflm(model: str, out_dir: str) -> tuple[str, str]:
    from tvm_serenity.deploy import reference_outputs
    from tvm_serenity.frontend.interpreters import InterpreterError, run_interpreter
    from tvm_serenity.frontend.tflite_model import parse_tflite
    buf = Path(model).read_bytes()
    parsed = parse_tflite(buf, model)
    plan = json.loads((Path(out_dir) / "plan.json").read_text())
    int8_core = bool(plan.get("int8_core"))
    by_name = {t.name: t for t in parsed.tensors}
    core_in = [by_name[i["name"]] for i in plan["inputs"]]
    raw = (Path(out_dir) / "input.bin").read_bytes()
    ends = np.cumsum([0] + [t.nbytes for t in core_in])
    arrays = {t.index: np.frombuffer(raw[a:b], t.dtype).reshape(t.shape)
              for t, a, b in zip(core_in, ends[:-1], ends[1:])}
    feed = [_model_input(parsed, i, arrays) for i in parsed.inputs]
    try:
        values = run_interpreter("tflm", buf, [feed], timeout=120)[0]
    except InterpreterError as e:
        return "accepted-but-tflm-refuses", str(e)
    # the reference on the inputs TFLM's own QUANTIZE edges produced (int8 core) or on the
    # build's inputs themselves
    used = b"".join(np.ascontiguousarray(values[t.index], dtype=t.dtype).tobytes()
                    for t in core_in)
    expected = reference_outputs(model, used, int8_core=int8_core)
    for o, want in zip(plan["outputs"], expected):
        t = by_name[o["name"]]
        got = np.ascontiguousarray(values[t.index], dtype=t.dtype).tobytes()
        if got != want:
            differ = [k for k, (x, y) in enumerate(zip(got, want)) if x != y] or [0]
            return ("tflm-mismatch", f"TFLM's output '{t.name}' differs from the reference "
                                     f"interpreter's at {len(differ)} of {len(want)} bytes "
                                     f"(first: byte {differ[0]})")
    return "ok", ""


def _model_input(parsed, index: int, arrays: dict) -> np.ndarray:
    """What TFLM is fed for model input ``index``: the build's bytes for it, or (a float edge
    stripped by ``--int8-core``) the build's int8 input of its QUANTIZE, dequantized."""
    if index in arrays:
        return arrays[index]
    q = next(op for op in parsed.operators if op.op == "QUANTIZE" and op.inputs[0] == index)
    t = parsed.tensors[q.outputs[0]]
    scale, zero = t.quant.scalar_scale, t.quant.scalar_zero_point
    return ((arrays[t.index].astype(np.float64) - zero) * scale).astype(parsed.tensors[index].dtype)


def schedule(graph_file: str, stdout_file: str, mode: str = "inplace") -> tuple[str, str]:
    from tvm_serenity.graph import Graph
    from tvm_serenity.memory import simulate
    graph = Graph.load(graph_file)
    payload = json.loads(Path(stdout_file).read_text().strip().splitlines()[-1])
    order = payload["order"]
    if sorted(order) != sorted(graph.op_names):
        return "wrong-result", f"the order has {len(order)} entries for {len(graph.op_names)} ops"
    position = {n: i for i, n in enumerate(order)}
    for n in order:
        late = [s for s in graph.nodes[n].inputs if s in position and position[s] > position[n]]
        if late:
            return "wrong-result", f"'{n}' is ordered before its input '{late[0]}'"
    peak = simulate(graph, order, mode == "inplace").peak_bytes
    if payload["peak_bytes"] != peak:
        return "wrong-result", f"peak_bytes {payload['peak_bytes']} but the order peaks at {peak}"
    if payload["lower_bound_bytes"] > peak:
        return "wrong-result", f"lower bound {payload['lower_bound_bytes']} above the peak {peak}"
    if payload["arena_bytes"] < peak:
        return "wrong-result", f"arena {payload['arena_bytes']} below the liveness peak {peak}"
    return "ok", ""


CHECKS = {"tflm": tflm, "schedule": schedule}
