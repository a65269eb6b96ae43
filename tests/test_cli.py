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
