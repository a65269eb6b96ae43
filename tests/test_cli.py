"""The command line: JSON contract, readable table, one-line errors with exit status 2."""

import json
import subprocess
import sys

import pytest

from test_graph import CELL
from tvm_serenity.cli import main
from tvm_serenity.graph import Graph
from tvm_serenity.memory import simulate


@pytest.fixture
def cell_file(tmp_path):
    path = tmp_path / "cell.json"
    path.write_text(json.dumps(CELL))
    return path


def test_schedule_json_contract(cell_file, capsys):
    assert main(["schedule", str(cell_file), "--method", "kahn", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    g = Graph.from_json(CELL)
    assert sorted(out["order"]) == sorted(g.op_names)
    assert out["peak_bytes"] == simulate(g, out["order"]).peak_bytes
    assert out["method"] == "kahn" and isinstance(out["optimal"], bool)
    assert out["lower_bound_bytes"] <= out["peak_bytes"] and out["seconds"] >= 0


def test_schedule_no_inplace_and_table(cell_file, capsys):
    assert main(["schedule", str(cell_file), "--method", "stored", "--json",
                 "--no-inplace"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["peak_bytes"] == simulate(Graph.from_json(CELL), out["order"], False).peak_bytes
    assert out["inplace_nodes"] == []
    assert main(["schedule", str(cell_file), "--method", "all"]) == 0
    text = capsys.readouterr().out
    assert "peak KiB" in text and "order:" in text and "kahn" in text


@pytest.mark.parametrize("argv, message", [
    (["schedule", "MISSING.json"], "cannot read graph file 'MISSING.json'"),
    (["schedule", "{bad}", "--method", "nope"], "invalid choice: 'nope'"),
    (["schedule"], "the following arguments are required: graph"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
])
def test_errors_are_one_line_exit_2(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_invalid_graph_file_exit_2_without_traceback(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"name": "g", "nodes": [
        {"name": "x", "op": "input", "inputs": [], "bytes": 1},
        {"name": "y", "op": "conv2d", "inputs": ["ghost"], "bytes": 1}], "outputs": ["y"]}))
    proc = subprocess.run([sys.executable, "-m", "tvm_serenity.cli", "schedule", str(bad)],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr == "tvm-serenity: error: node 'y': unknown input 'ghost'\n"
    assert proc.stdout == ""


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "-inf"])
def test_schedule_refuses_a_bad_time_limit_in_one_line(value, cell_file, capsys):
    assert main(["schedule", str(cell_file), f"--time-limit={value}"]) == 2
    err = capsys.readouterr().err
    assert err == (f"tvm-serenity: error: --time-limit must be a finite number of seconds "
                   f">= 0, got {float(value)!r}\n")


def test_schedule_save_graph_to_a_directory_or_missing_folder(cell_file, tmp_path, capsys):
    for target, reason in ((tmp_path, "Is a directory"),
                           (tmp_path / "no" / "g.json", "No such file or directory")):
        assert main(["schedule", str(cell_file), "--save-graph", str(target)]) == 2
        err = capsys.readouterr().err
        assert err == f"tvm-serenity: error: cannot write graph file '{target}': {reason}\n"


@pytest.mark.parametrize("change, message", [
    (lambda g: g["nodes"][1].update(name="c1\x1b[2J", ), "nodes[1]: field 'name' contains"),
    (lambda g: g["nodes"][1].update(name="c\ud800"), "nodes[1]: field 'name' contains"),
    (lambda g: g["nodes"][1].update(bytes=2 ** 62), "field 'bytes' must be at most 2^40"),
])
def test_schedule_refuses_graphs_the_solvers_or_terminal_cannot_take(change, message,
                                                                      tmp_path, capsys):
    obj = json.loads(json.dumps(CELL))
    change(obj)
    path = tmp_path / "g.json"
    path.write_text(json.dumps(obj))          # ensure_ascii: escapes, as a fuzzer writes them
    assert main(["schedule", str(path), "--json"]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and err[:-1].isprintable()


def test_schedule_accepts_a_dag_listed_out_of_order(tmp_path, capsys):
    obj = json.loads(json.dumps(CELL))
    obj["nodes"].reverse()                    # every node before its inputs
    path = tmp_path / "g.json"
    path.write_text(json.dumps(obj))
    assert main(["schedule", str(path), "--method", "stored", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    graph = Graph.from_json(CELL)
    assert out["order"] == graph.op_names     # the stable topological order of the file
    assert out["peak_bytes"] == simulate(graph, out["order"]).peak_bytes


def test_the_cli_and_the_algorithms_import_without_tvm():
    """Importing TVM (its FFI) takes most of a second: the CLI, the graph IR and the
    scheduler must not pay it (errors.py registers with TVM only once passes import it)."""
    code = ("import sys, tvm_serenity.cli, tvm_serenity.graph, tvm_serenity.schedule; "
            "print(sorted(m for m in ('tvm', 'tvm_ffi') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"
