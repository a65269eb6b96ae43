"""Seeded graph interchange JSON files (README "Schedule a graph") for ``tvm-serenity schedule``.

* valid: random DAGs (:func:`tests.graphgen.random_graph`), half of them listed out of
  topological order, scheduled with a random method / planner / in-place mode / alignment under
  ``--time-limit``; they must be accepted, and the ``--json`` result is checked
  (:func:`tests.fuzz.checks.schedule`). Huge ones: a 10,000-node chain and a 2,000-node fan
  with ``--time-limit 2``.
* malformed: fields missing or of the wrong type, cycles, unknown inputs, duplicate names or
  outputs, huge integers (2**62, 2**64, a 5,000-digit number), floats, negative bytes, NaN and
  Infinity literals, lone surrogates / newlines / ANSI escapes / empty or huge names, deep
  nesting, empty / non-JSON / non-UTF-8 files, and byte-level damage of a valid file's text.
"""

from __future__ import annotations

import copy
import functools
import json
import random
from pathlib import Path

from .runner import Case, Step

TIME_LIMIT = "2"
NAMES = ["a\nb", "\ud800", "\x1b[31mred\x1b[0m", "", " ", "x" * 100_000, "\u202enaive",
         "../../etc/passwd", "nul\x00byte", "tab\there", "\r\n"]
BAD_VALUES = [None, True, "12", [1], {"a": 1}, 1.5, -1, 2**62, 2**64 + 1, -2**63, 1e308, 0.0]
DEEP = "\x00deep"
RAW_NUMBERS = ["NaN", "Infinity", "-Infinity", "1e400", "-0", "1" * 5000, "-" + "9" * 5000,
               "1.0e2", "0x10", "01"]


def _valid(rng: random.Random) -> dict:
    from tests.graphgen import random_graph
    g = random_graph(rng, rng.randint(1, 24), rng.randint(1, 3))
    obj = g.to_json()
    if rng.random() < 0.5:
        rng.shuffle(obj["nodes"])
    return obj


def _chain(n: int) -> dict:
    nodes = [{"name": "x", "op": "input", "inputs": [], "bytes": 64}]
    nodes += [{"name": f"n{i}", "op": "relu", "inputs": [nodes[-1]["name"] if i == 0 else
                                                           f"n{i - 1}"], "bytes": 64 + i % 7,
               "inplace": "alias"} for i in range(n)]
    return {"name": f"chain{n}", "nodes": nodes, "outputs": [f"n{n - 1}"]}


def _fan(n: int) -> dict:
    nodes = [{"name": "x", "op": "input", "inputs": [], "bytes": 16}]
    nodes += [{"name": f"b{i}", "op": "conv2d", "inputs": ["x"], "bytes": 1 + i % 13}
              for i in range(n)]
    nodes.append({"name": "y", "op": "concat", "inputs": [f"b{i}" for i in range(n)],
                  "bytes": 8 * n})
    return {"name": f"fan{n}", "nodes": nodes, "outputs": ["y"]}


# --------------------------------------------------------------------- malformations
def _missing_field(rng, obj):
    if rng.random() < 0.3:
        key = rng.choice(["nodes", "outputs", "name"])
        obj.pop(key, None)
        return obj, f"top-level '{key}' missing"
    node = rng.choice(obj["nodes"])
    key = rng.choice(["name", "op", "inputs", "bytes"])
    node.pop(key, None)
    return obj, f"node field '{key}' missing"


def _wrong_type(rng, obj):
    value = rng.choice(BAD_VALUES)
    if rng.random() < 0.3:
        key = rng.choice(["nodes", "outputs", "name"])
        obj[key] = value
        return obj, f"top-level '{key}' = {value!r}"
    node = rng.choice(obj["nodes"])
    key = rng.choice(["name", "op", "inputs", "bytes", "shape", "dtype", "attrs", "inplace"])
    if key == "inplace" and rng.random() < 0.5:
        value = {"workspace_bytes": value} if rng.random() < 0.7 else {"workspace": 1}
    node[key] = value
    return obj, f"node '{str(node.get('name'))[:20]}': {key} = {str(value)[:40]}"


def _cycle(rng, obj):
    ops = [n for n in obj["nodes"] if n["op"] != "input"]
    a, b = rng.choice(ops), rng.choice(ops)
    a["inputs"] = list(a["inputs"]) + [b["name"]]
    b["inputs"] = list(b["inputs"]) + [a["name"]]
    return obj, f"cycle through '{a['name']}' and '{b['name']}'"


def _unknown_input(rng, obj):
    node = rng.choice([n for n in obj["nodes"] if n["op"] != "input"])
    node["inputs"] = list(node["inputs"]) + [rng.choice(["ghost", "", "X" * 300])]
    return obj, f"node '{node['name']}' reads an unknown node"


def _duplicates(rng, obj):
    kind = rng.randrange(4)
    if kind == 0:
        obj["nodes"].append(copy.deepcopy(rng.choice(obj["nodes"])))
        return obj, "a node listed twice"
    if kind == 1:
        obj["outputs"] = obj["outputs"] + obj["outputs"][:1]
        return obj, "an output listed twice"
    if kind == 2:
        obj["outputs"] = rng.choice([[], ["ghost"], [obj["nodes"][0]["name"]]])
        return obj, f"outputs = {obj['outputs']}"
    node = rng.choice(obj["nodes"])
    node["inputs"] = list(node["inputs"]) * 2
    return obj, f"node '{node['name']}' reads each input twice"


def _numbers(rng, obj):
    node = rng.choice(obj["nodes"])
    key = rng.choice(["bytes", "bytes", "inplace", "shape"])
    value = rng.choice([2**62, 2**63, 2**64 + 1, -1, -2**62, 0, 1.5, 1e18, 2.0 ** 70, -0.5])
    if key == "inplace":
        if node["op"] == "input":
            return obj, None
        node["inplace"] = {"workspace_bytes": value}
    elif key == "shape":
        node["shape"] = [1, value if isinstance(value, int) else 3, 4]
    else:
        node["bytes"] = value
    return obj, f"node '{node['name']}': {key} = {value}"


def _names(rng, obj):
    node = rng.choice(obj["nodes"])
    old, new = node["name"], rng.choice(NAMES)
    node["name"] = new
    for n in obj["nodes"]:
        n["inputs"] = [new if s == old else s for s in n["inputs"]]
    obj["outputs"] = [new if o == old else o for o in obj["outputs"]]
    if rng.random() < 0.3:
        obj["name"] = rng.choice(NAMES)
    return obj, f"node renamed to {new[:30]!r}"


def _extra(rng, obj):
    node = rng.choice(obj["nodes"])
    kind = rng.randrange(3)
    if kind == 0:
        node["colour"] = "blue"
        return obj, "unknown node field"
    if kind == 1:
        depth = rng.choice([50, 500, 5000])
        node["attrs"] = {DEEP: depth}           # spelled out by _serialize
        return obj, f"attrs nested {depth} deep"
    obj["nodes"] = obj["nodes"] + [rng.choice(["node", 5, None, [], {"name": "lone"}])]
    return obj, f"nodes[-1] = {obj['nodes'][-1]!r}"


MALFORMATIONS = [_missing_field, _wrong_type, _cycle, _unknown_input, _duplicates, _numbers,
                 _numbers, _names, _names, _extra]


def _text(rng: random.Random) -> tuple[bytes, str]:
    """A whole file that is not a graph object, or a valid graph's text damaged."""
    kind = rng.randrange(8)
    text = json.dumps(_valid(rng))
    if kind == 0:
        return rng.choice([b"", b"null", b"[]", b"{}", b"0", b'"graph"', b"\xef\xbb\xbf{}",
                           b"{\"nodes\": []}", b"\xff\xfe\x00{"]), "whole file"
    if kind == 1:
        depth = rng.choice([1000, 100_000])
        return ("[" * depth + "]" * depth).encode(), f"a list nested {depth} deep"
    if kind == 2:
        n = rng.randrange(len(text))
        return text[:n].encode(), f"truncated to {n} characters"
    if kind == 3:
        raw = bytearray(text.encode())
        for _ in range(rng.randint(1, 4)):
            raw[rng.randrange(len(raw))] = rng.randrange(256)
        return bytes(raw), "bytes damaged"
    if kind == 4:
        number = rng.choice(RAW_NUMBERS)
        return _replace_first_bytes(text, number).encode(), \
            f"bytes = {number[:20]}{'...' if len(number) > 20 else ''} ({len(number)} chars)"
    if kind == 5:
        return (text + rng.choice(["x", "{}", "\x00"])).encode(), "trailing garbage"
    if kind == 6:
        return text.replace('"name"', '"name": "dup", "name"', 1).encode(), "duplicate keys"
    return text.encode("utf-16"), "UTF-16 encoded"


def _replace_first_bytes(text: str, number: str) -> str:
    head, sep, tail = text.partition('"bytes": ')
    digits = len(tail) - len(tail.lstrip("-0123456789"))
    return head + sep + number + tail[digits:]


def _schedule_args(rng: random.Random, graph: str, valid: bool) -> tuple[list[str], str]:
    from tvm_serenity.alloc import PLANNERS
    from tvm_serenity.schedule import METHODS
    args = ["schedule", graph, "--json", "--time-limit", TIME_LIMIT]
    mode = "inplace"
    if valid:
        if rng.random() < 0.5:
            args += ["--method", rng.choice(sorted(METHODS))]
        if rng.random() < 0.3:
            args += ["--planner", rng.choice(sorted(PLANNERS))]
        if rng.random() < 0.3:
            args.append("--no-inplace")
            mode = "noinplace"
        if rng.random() < 0.2:
            args += ["--alignment", rng.choice(["4", "16", "64"])]
    elif rng.random() < 0.2:
        args = args[:3]                # no time limit: a malformed file must fail fast anyway
    return args, mode


def graph_cases(seed: int, count: int) -> list[Case]:
    """``count`` cases (two of them the huge graphs); case ``i`` depends on ``seed`` and ``i``."""
    cases = []
    for i in range(count):
        rng = random.Random(f"{seed}/graphs/{i}")
        cid = f"graphs-{i:04d}"
        if i in (0, 1):
            obj = _chain(10_000) if i == 0 else _fan(2_000)
            cases.append(_case(cid, f"huge valid graph {obj['name']}",
                               json.dumps(obj).encode(), rng, valid=True, timeout=60))
            continue
        kind = rng.random()
        if kind < 0.35:
            cases.append(_case(cid, "valid random DAG", None, rng, valid=True))
        elif kind < 0.8:
            obj = _valid(rng)
            obj, what = rng.choice(MALFORMATIONS)(rng, obj)
            if what is None:
                obj, what = _missing_field(rng, obj)
            cases.append(_case(cid, what, _serialize(obj), rng, valid=False))
        else:
            data, what = _text(rng)
            cases.append(_case(cid, what, data, rng, valid=False))
    return cases


def _serialize(obj: dict) -> bytes:
    """JSON text of ``obj``, with an ``attrs`` of ``{DEEP: n}`` written as lists nested ``n``
    deep (deeper than json.dumps can write)."""
    text = json.dumps(obj)
    for node in obj["nodes"] if isinstance(obj.get("nodes"), list) else []:
        attrs = node.get("attrs") if isinstance(node, dict) else None
        if isinstance(attrs, dict) and DEEP in attrs:
            depth = attrs[DEEP]
            text = text.replace(json.dumps({DEEP: depth}),
                                '{"deep": ' + "[" * depth + "]" * depth + "}", 1)
    return text.encode("utf-8", "surrogatepass")


def _case(cid: str, description: str, data: bytes | None, rng: random.Random, *,
          valid: bool, timeout: float = 45.0) -> Case:
    args, mode = _schedule_args(rng, "g.json", valid)
    steps = [Step(tuple(args), timeout=timeout)]
    if valid:
        steps.append(Step(("schedule", "g.json", "../step0.out", mode), kind="check"))
        if data is None:
            data = json.dumps(_valid(rng)).encode()
            description += f" ({len(json.loads(data)['nodes'])} nodes)"
    return Case("graphs", cid, description, steps, output=None, must_accept=valid,
                setup=functools.partial(_write, data=data))


def _write(case: Case, sandbox: Path, data: bytes) -> None:
    (sandbox / "g.json").write_bytes(data)
