"""Graph IR: JSON round trip, validation errors naming the culprit, fuzzing the loader."""

import json
import os
import random

import pytest
from hypothesis import given, settings, strategies as st

from graphgen import random_graph
from tvm_serenity.graph import Graph, GraphError, Node

CELL = {"name": "cell", "nodes": [
    {"name": "x", "op": "input", "inputs": [], "bytes": 3072, "shape": [1, 32, 32, 3],
     "dtype": "int8"},
    {"name": "c1", "op": "conv2d", "inputs": ["x"], "bytes": 8192,
     "inplace": {"workspace_bytes": 9000}},
    {"name": "r", "op": "relu", "inputs": ["c1"], "bytes": 8192, "inplace": "alias"},
    {"name": "y", "op": "concat", "inputs": ["r", "x"], "bytes": 11264}],
    "outputs": ["y"]}


def with_nodes(*nodes, outputs=("y",)):
    return {"name": "g", "nodes": list(nodes), "outputs": list(outputs)}


def node(name, inputs=(), op=None, nbytes=1, **extra):
    return {"name": name, "op": op or ("input" if not inputs else "conv2d"),
            "inputs": list(inputs), "bytes": nbytes, **extra}


def test_round_trip_keeps_everything():
    g = Graph.from_json(CELL)
    assert g.to_json() == CELL
    assert Graph.loads(g.dumps()).to_json() == CELL
    assert g.op_names == ["c1", "r", "y"] and g.input_names == ["x"]
    assert g.consumers["x"] == ("c1", "y")
    assert g["c1"].inplace == 9000 and g["r"].inplace == "alias"


@pytest.mark.parametrize("obj, message", [
    (with_nodes(node("x"), node("a", ["b"]), node("b", ["a"]), node("y", ["b"])),
     r"node '(a|b)': on a cycle"),
    (with_nodes(node("x"), node("y", ["y"])), r"node 'y': consumes itself"),
    (with_nodes(node("x"), node("y", ["nope"])), r"node 'y': unknown input 'nope'"),
    (with_nodes(node("x"), node("x"), node("y", ["x"])), r"node 'x': duplicate name"),
    (with_nodes(node("x"), node("y", ["x"], nbytes=-4)), r"node 'y': field 'bytes' is negative"),
    (with_nodes(node("x"), node("y", ["x"], nbytes=2.5)),
     r"node 'y': field 'bytes' must be an integer"),
    (with_nodes(node("x"), node("y", ["x"], nbytes="8")),
     r"node 'y': field 'bytes' must be an integer"),
    (with_nodes(node("x"), node("y", ["x"]), outputs=["z"]), r"output 'z' is not a node"),
    (with_nodes(node("x"), node("y", ["x"]), outputs=[]), r"'outputs' is empty"),
    (with_nodes(), r"has no nodes"),
    (with_nodes(node("x"), outputs=["x"]), r"has no operators \(only inputs\)"),
    (with_nodes(node("x"), {"name": "y", "op": "conv2d", "inputs": ["x"]}),
     r"node 'y': field 'bytes' is missing"),
    (with_nodes(node("x"), node("y", ["x"], inplace="sideways")),
     r"node 'y': field 'inplace' must be"),
    (with_nodes(node("x", nbytes=10), node("y", ["x"], nbytes=4,
                                           inplace={"workspace_bytes": 6})),
     r"node 'y': inplace workspace_bytes 6 is smaller than max\(input, output\) = 10"),
    (with_nodes(node("x", inplace="alias"), node("y", ["x"])),
     r"node 'x': 'inplace' needs a node with an input"),
    (with_nodes(node("x"), node("y", ["x"], colour="red")), r"node 'y': unknown field 'colour'"),
    (with_nodes(node("x"), {"name": "", "op": "conv2d", "inputs": ["x"], "bytes": 1}),
     r"nodes\[1\]: field 'name' must be a non-empty string"),
    ({"nodes": "x", "outputs": []}, r"field 'nodes' must be a list"),
    ([], r"graph JSON must be an object"),
])
def test_invalid_graphs_name_the_culprit(obj, message):
    with pytest.raises(GraphError, match=message) as info:
        Graph.from_json(obj)
    assert "\n" not in str(info.value)


def test_cycle_error_names_a_node_on_the_cycle():
    obj = with_nodes(node("x"), node("a", ["x", "c"]), node("b", ["a"]), node("c", ["b"]),
                     node("y", ["c"]))
    with pytest.raises(GraphError) as info:
        Graph.from_json(obj)
    culprit = str(info.value).split("'")[1]
    assert culprit in {"a", "b", "c"}
    cycle = str(info.value).split("(")[1].rstrip(")").split(" -> ")
    assert cycle[0] == cycle[-1] == culprit and sorted(cycle[:-1]) == ["a", "b", "c"]
    for src, dst in zip(cycle, cycle[1:]):      # each arrow is a real edge
        assert src in next(n["inputs"] for n in obj["nodes"] if n["name"] == dst)


def test_random_graphs_round_trip():
    rng = random.Random(3)
    for _ in range(50):
        g = random_graph(rng, rng.randint(1, 40), rng.randint(1, 3))
        assert Graph.loads(g.dumps()).to_json() == g.to_json()


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.floats(allow_nan=False)
    | st.sampled_from(["x", "y", "input", "conv2d", "alias", ""]),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.sampled_from(["name", "op", "inputs", "bytes", "nodes", "outputs",
                                       "inplace", "shape", "workspace_bytes", "attrs"]),
                      children, max_size=6),
    max_leaves=30)


@settings(max_examples=400, deadline=None)
@given(json_values)
def test_fuzz_loader_never_crashes(obj):
    try:
        g = Graph.from_json(obj)
    except GraphError as e:
        assert str(e) and "\n" not in str(e)
    else:   # whatever loads is a valid graph that round-trips
        assert Graph.from_json(g.to_json()).to_json() == g.to_json()


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_fuzz_raw_text(raw):
    try:
        Graph.loads(raw.decode("utf-8", "replace"))
    except GraphError:
        pass


def test_mutated_valid_json_gives_graph_errors_only():
    text = json.dumps(CELL)
    rng = random.Random(0)
    for _ in range(500):
        chars = list(text)
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(chars))
            chars[i] = rng.choice('{}[]",:0123456789xyabc -')
        try:
            Graph.loads("".join(chars))
        except GraphError:
            pass


# ------------------------------------------------------------------- order, limits, names
def test_out_of_order_dag_is_accepted_in_a_stable_topological_order():
    # y reads a and b; a is listed after its reader, b before; x last of all.
    obj = with_nodes(node("y", ["a", "b"]), node("b", ["x"]), node("a", ["x"]),
                     node("x", op="input"))
    g = Graph.from_json(obj)
    stored = list(g.nodes)
    position = {n: i for i, n in enumerate(stored)}
    for n, nd in g.nodes.items():
        assert all(position[s] < position[n] for s in nd.inputs)
    # Stable: among the orders that respect the edges, the one keeping the file's relative
    # order wherever possible (each step takes the ready node listed first).
    file_order = [n["name"] for n in obj["nodes"]]
    expected, ready_done = [], set()
    while len(expected) < len(file_order):
        nxt = next(n for n in file_order if n not in ready_done and
                   all(s in ready_done for s in g.nodes[n].inputs))
        expected.append(nxt)
        ready_done.add(nxt)
    assert stored == expected == ["x", "b", "a", "y"]
    assert g.op_names == ["b", "a", "y"]
    # A file already in topological order keeps it exactly.
    assert list(Graph.from_json(g.to_json()).nodes) == stored


def test_out_of_order_cycle_is_still_refused_naming_it():
    obj = with_nodes(node("y", ["c"]), node("c", ["b"]), node("b", ["c", "x"]),
                     node("x", op="input"))
    with pytest.raises(GraphError, match=r"on a cycle \((b -> c|c -> b) -> (b|c)\)"):
        Graph.from_json(obj)


@pytest.mark.parametrize("field, value, message", [
    ("bytes", 2 ** 62, r"node 'y': field 'bytes' must be at most 2\^40, got 4611686018427387904"),
    ("bytes", 10 ** 4000, r"node 'y': field 'bytes' must be at most 2\^40, got about 2\^13287"),
    ("inplace", {"workspace_bytes": 2 ** 41},
     r"node 'y': inplace workspace_bytes must be at most 2\^40"),
])
def test_sizes_beyond_what_the_solvers_take_are_refused(field, value, message):
    obj = with_nodes(node("x", op="input"), node("y", ["x"], **{field: value}))
    with pytest.raises(GraphError, match=message) as info:
        Graph.from_json(obj)
    assert "\n" not in str(info.value)


def test_total_bytes_beyond_the_limit_name_the_node_that_crosses_it():
    obj = with_nodes(node("x", op="input", nbytes=2 ** 39), node("a", ["x"], nbytes=2 ** 39),
                     node("y", ["a"], nbytes=1))
    with pytest.raises(GraphError, match=r"node 'y': the graph's tensors reach "
                                         r"1099511627777 bytes together"):
        Graph.from_json(obj)


def test_a_5000_digit_integer_is_one_parse_error():
    text = '{"nodes": [{"name": "x", "op": "input", "bytes": ' + "9" * 5000 + '}], "outputs": []}'
    with pytest.raises(GraphError, match="graph JSON does not parse: Exceeds the limit") as info:
        Graph.loads(text)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("bad", ["a\nb", "\x1b[31mred", "tab\there", "\u2028", "\ud800"])
def test_control_characters_and_lone_surrogates_in_names_are_refused(bad):
    obj = with_nodes(node("x", op="input"), node(bad, ["x"]), outputs=(bad,))
    with pytest.raises(GraphError, match=r"^nodes\[1\]: field 'name' contains the control or "
                                         r"surrogate character U\+[0-9A-F]{4}$") as info:
        Graph.loads(json.dumps(obj))          # json.dumps escapes: the loader decodes them
    assert str(info.value).isprintable()
    # In inputs, ops and outputs too; printable messages everywhere.
    for obj in (with_nodes(node("x", op="input"), node("y", [bad])),
                with_nodes(node("x", op="input"), node("y", ["x"], op=bad)),
                with_nodes(node("x", op="input"), node("y", ["x"]), outputs=(bad,))):
        with pytest.raises(GraphError) as info:
            Graph.from_json(obj)
        assert str(info.value).isprintable()


@pytest.mark.parametrize("make, message", [
    (lambda: Graph([{"name": "x"}], ["x"]), r"nodes\[0\]: must be a Node, got dict"),
    (lambda: Graph("xy", ["x"]), r"nodes must be a list of Node, got str"),
    (lambda: Graph([Node("x", "input", (), 1), Node("y", "relu", ("x",), 1)], "y"),
     r"'outputs' must be a list of node names"),
    (lambda: Graph([Node("x", "input", (), 1), Node("y", "relu", "x", 1)], ["y"]),
     r"node 'y': field 'inputs' must be a tuple of node names"),
    (lambda: Graph([Node("x", "input", (), 1), Node("y", "relu", ("x",), 1.5)], ["y"]),
     r"node 'y': field 'bytes' must be an integer, got 1.5"),
    (lambda: Graph([Node("x", "input", (), 1), Node("y", "relu", ("x",), 1)], ["y"], name=3),
     r"graph: field 'name' must be a non-empty string"),
])
def test_python_api_refuses_wrong_types_with_graph_errors(make, message):
    with pytest.raises(GraphError, match=message):
        make()


def test_save_to_a_directory_or_missing_folder_is_one_graph_error(tmp_path):
    g = Graph.from_json(CELL)
    for target, reason in ((tmp_path, "Is a directory"),
                           (tmp_path / "missing" / "g.json", "No such file or directory")):
        with pytest.raises(GraphError, match=f"cannot write graph file '.*': {reason}$"):
            g.save(target)


def test_load_refuses_what_is_not_a_regular_file(tmp_path):
    """A FIFO would block the read forever, a directory is no graph: one line each."""
    fifo = tmp_path / "graph.json"
    os.mkfifo(fifo)
    for path in (fifo, tmp_path):
        with pytest.raises(GraphError, match="is not a regular file"):
            Graph.load(path)
