"""README.md's own commands, run exactly as written, so README and behaviour cannot drift apart.

Every line of the README's ``sh`` blocks is either run or listed in :data:`NOT_RUN` with the
reason it cannot run here; the first test fails when the README gains a line that is neither,
when a listed line is no longer in the README (the list cannot go stale), and when a listed
line compiles, runs, reports, schedules or uses the zoo (``.venv/bin/tvm-serenity ...``,
``.venv/bin/python -m tvm_serenity...``): those always run.

They run as a user runs them: ``bash -c LINE`` at the root of a copy of the checkout (the files
``git ls-files`` lists) with ``.venv`` and ``node_modules`` linked to the real ones (what
``make`` leaves there) and ``../shared`` reachable as in the real checkout, a block's lines in
README order (compile, then run, then report). The editable install makes
``.venv/bin/tvm-serenity`` import the package of the real checkout; ``python -m`` imports the
copy's. Where the README says what comes out, that is checked (the artefacts ``compile`` writes,
the path ``report`` prints, the keys of ``schedule --json``, ``make demo``'s table), and a
``run``'s output bytes are compared with TFLite Micro's, independently of the tool's own check.
"""

from __future__ import annotations

import ast
import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from readme_blocks import README, bullet, code_blocks, commands, table_rows
from toolchain import needs_arm, needs_cc, needs_qemu, needs_rp2040js
from tvm_serenity import Graph, simulate, validate_order
from tvm_serenity.cli import build_parser
from tvm_serenity.codegen.graph_c import integer_core
from tvm_serenity.deploy import INPUT_FILE
from tvm_serenity.frontend.interpreters import TFLM, run_interpreter
from tvm_serenity.frontend.tflite_model import load_tflite
from tvm_serenity.schedule import METHODS
from tvm_serenity.zoo import names as zoo_names

ROOT = README.parent
TEXT = README.read_text()
BLOCKS = code_blocks(TEXT)
SH_BLOCKS = [b for b in BLOCKS if b.lang == "sh"]
RUN_PREFIXES = (".venv/bin/tvm-serenity ", ".venv/bin/python -m tvm_serenity")
SDK = "the Pico SDK is not installable from a package registry (README: 'it cannot be built here')"
BENCH = "minutes to hours and rewrites BENCHMARKS.md"

# README shell lines not run as written, each with the reason.
NOT_RUN = {
    "make demo": "installs system packages first (root); its recipe's last command runs in "
                 "test_make_demo_runs_the_demo",
    "make test": "runs the whole test suite, this file included",
    "export PICO_SDK_PATH=/path/to/pico-sdk": SDK,
    "cd OUT/project && cmake -S pico_sdk -B pico_sdk/build && cmake --build pico_sdk/build": SDK,
    ".venv/bin/python -m benchmarks.schedule_bench --write": BENCH,
    ".venv/bin/python -m benchmarks.rewrite_bench --write": f"{BENCH}; runs with --quick "
                                                            "instead of --write below",
    ".venv/bin/python -m benchmarks.tvm_bench --write": BENCH,
    ".venv/bin/python -m benchmarks.rip_table_bench --write": f"{BENCH} (what it runs: "
                                                              "test_rip_table_bench.py)",
    ".venv/bin/python -m benchmarks.deploy_bench --write": BENCH,
    ".venv/bin/python -m benchmarks.tflm_export_bench --write": "rewrites BENCHMARKS.md "
                                                                "(what it runs: "
                                                                "test_tflm_export.py)",
    ".venv/bin/python -m benchmarks.mlperf_bench --write": BENCH,
    ".venv/bin/python -m benchmarks.onnx_bench --write": f"{BENCH} (what it runs: "
                                                         "test_onnx_bench.py)",
    ".venv/bin/python -m benchmarks.patch_bench --write": BENCH,
    '.venv/bin/pip install -e ".[bench]"': "downloads TensorFlow (1.6 GB)",
    ".venv/bin/python -m benchmarks.peers --build --write": "converts Keras models with "
                                                            "TensorFlow (the bench extra): hours",
}
# The benchmark line run with --quick instead of --write (README: "`--quick` for a short run").
QUICK = ".venv/bin/python -m benchmarks.rewrite_bench --write"
# README python blocks not run, by their first line.
PYTHON_NOT_RUN = {
    "import tvm, tvm_serenity.passes as sp": "a fragment: `mod` and the elided passes (`...`) "
                                             "are the reader's",
}
# What each target's build needs; its run backend as `run` prints it (README: `pico` runs on
# rp2040js, `pico2` on QEMU, `--host` natively).
TARGET_NEEDS = {"pico": (needs_arm, needs_rp2040js), "pico2": (needs_arm, needs_qemu),
                "host": (needs_cc,), "llvm": ()}
BACKEND = {"pico": "rp2040js", "pico2": "qemu", "host": "host"}
CHECK_LINE = "output identical to the reference interpreter"


def runnable(command: str) -> bool:
    return command.startswith(RUN_PREFIXES)


def bash(command: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", command], cwd=cwd, capture_output=True, text=True,
                          timeout=1800)


def explain(command: str, proc: subprocess.CompletedProcess) -> str:
    return f"`{command}` exited {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"


def cli_args(command: str):
    """A ``.venv/bin/tvm-serenity`` line parsed by the CLI's own parser (defaults included)."""
    return build_parser().parse_args(shlex.split(command)[1:])


def block_marks(block) -> list:
    marks = [pytest.mark.slow]          # each block takes tens of seconds (TVM import per line)
    for command in commands(block):
        if command.startswith(".venv/bin/tvm-serenity compile "):
            marks += TARGET_NEEDS[cli_args(command).target]
    return marks


RUN_BLOCKS = [pytest.param(b, marks=block_marks(b), id=f"README.md:{b.line}")
              for b in SH_BLOCKS if any(map(runnable, commands(b)))]
PYTHON_BLOCKS = [pytest.param(b, marks=pytest.mark.slow, id=f"README.md:{b.line}")
                 for b in BLOCKS if b.lang == "python" and commands(b)[0] not in PYTHON_NOT_RUN]


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    if not (ROOT / ".venv" / "bin" / "python").is_file():
        pytest.skip("no .venv in the checkout (the README's commands need `make` first)")
    base = tmp_path_factory.mktemp("readme")
    repo = base / "repo"
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                            check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        if (ROOT / name).is_file():       # a tracked file deleted in the working tree is gone
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, repo / name)
    for name in (".venv", "node_modules"):
        if (ROOT / name).exists():
            (repo / name).symlink_to(ROOT / name)
    if (ROOT.parent / "shared").is_dir():
        (base / "shared").symlink_to((ROOT.parent / "shared").resolve())
    return repo


@pytest.fixture(scope="module")
def run_block(checkout):
    """Runs a block's runnable lines once per module, in order, up to the first failure."""
    done = {}

    def run(block) -> list[tuple[str, subprocess.CompletedProcess]]:
        if block.line not in done:
            lines = list(filter(runnable, commands(block)))
            for arg in (a for line in lines for a in shlex.split(line)):
                if arg.startswith("../shared/") and not (checkout / arg).exists():
                    pytest.skip(f"{arg} is absent (third-party data, not in the repository)")
            ran = done[block.line] = []
            for command in lines:
                ran.append((command, bash(command, checkout)))
                if ran[-1][1].returncode:
                    break
        return done[block.line]
    return run


# ------------------------------------------------------------------------- classification
def test_every_shell_line_is_run_or_listed():
    lines = [c for b in SH_BLOCKS for c in commands(b)]
    assert any(map(runnable, lines))
    unknown = [c for c in lines if not runnable(c) and c not in NOT_RUN]
    assert not unknown, f"README shell lines neither run nor in NOT_RUN (with a reason): {unknown}"
    stale = [c for c in NOT_RUN if c not in lines]
    assert not stale, f"NOT_RUN lists lines the README no longer has: {stale}"
    must_run = [c for c in NOT_RUN if runnable(c)]
    assert not must_run, f"these README lines must run, not be excluded: {must_run}"
    assert QUICK in NOT_RUN and "--write" in QUICK


def test_every_python_block_is_run_or_listed():
    firsts = [commands(b)[0] for b in BLOCKS if b.lang == "python"]
    assert len(PYTHON_BLOCKS) + len(PYTHON_NOT_RUN) == len(firsts)
    assert not [f for f in PYTHON_NOT_RUN if f not in firsts], "PYTHON_NOT_RUN is stale"


# ------------------------------------------------------------------------- the shell blocks
def tflm_output(model: Path, data: bytes) -> bytes:
    """TFLite Micro's output bytes for the input bytes a build ran (its input.bin): the
    model's own output for the model's own input or, for a build of a float-edged model's
    integer core (int8 input and output inside its QUANTIZE/DEQUANTIZE), the core's output for
    the int8 input dequantized, which the model's QUANTIZE maps back exactly."""
    source = load_tflite(model)
    given, output = source.tensors[source.inputs[0]], source.outputs[0]
    if len(data) == given.nbytes:
        x = np.frombuffer(data, given.dtype).reshape(given.shape)
    else:
        core = integer_core(source)
        q, output = core.input.quant, core.model.outputs[0]
        x = np.frombuffer(data, np.int8).reshape(core.input.shape).astype(np.float32)
        x = ((x - q.zero_point[0]) * q.scale[0]).astype(given.dtype)
    return np.ascontiguousarray(run_interpreter(TFLM, model, [[x]])[0][output]).tobytes()


def check_compile(command, stdout, repo, built):
    args = cli_args(command)
    item = bullet(TEXT, "`compile MODEL.tflite --target "
                  + ("llvm" if args.target == "llvm" else "{"))
    out = repo / args.output
    promised = re.findall(r"`OUT/([^`]*)`", item)
    assert promised, item
    for rel in promised:
        assert (out / rel).is_dir() if rel.endswith("/") else (out / rel).is_file(), \
            f"README: `{command}` writes OUT/{rel}; {out / rel} is missing"
    built[args.output] = (repo / args.model, args.target)


def check_run(command, stdout, repo, built):
    args = cli_args(command)
    assert args.output in built, f"`{command}` runs a directory no earlier line compiled"
    model, target = built[args.output]
    fields = dict(line.strip().split(": ", 1) for line in stdout.splitlines() if ": " in line)
    assert fields["check"] == CHECK_LINE
    assert fields["backend"] == BACKEND[target]
    data = (repo / args.output / INPUT_FILE).read_bytes()
    assert bytes.fromhex(fields["output"]) == tflm_output(model, data)


def check_report(command, stdout, repo, built):
    printed = stdout.strip().splitlines()[-1]
    html = Path(cli_args(command).output) / "report" / "report.html"
    assert printed.endswith(str(html)), printed          # README: "prints OUT/report/report.html"
    assert (repo / printed).is_file() and (repo / printed).samefile(repo / html)


def check_schedule(command, stdout, repo, built):
    args = cli_args(command)
    graph = Graph.load(repo / args.graph)
    if args.json:
        payload = json.loads(stdout)                     # one JSON object, nothing else
        keys = re.findall(r'"(\w+)"', re.search(r"`--json` prints `\{(.*?)\}`", TEXT,
                                                re.DOTALL).group(1))
        assert set(keys) <= payload.keys(), set(keys) - payload.keys()
        validate_order(graph, payload["order"])
        assert simulate(graph, payload["order"]).peak_bytes == payload["peak_bytes"]
        assert payload["lower_bound_bytes"] <= payload["peak_bytes"] <= payload["arena_bytes"]
        return
    assert stdout.startswith(f"graph {graph.name}: {len(graph.op_names)} ops"), stdout[:200]
    rows = {line.split()[0] for line in stdout.splitlines() if line.strip()}
    methods = sorted(m for m in METHODS if m != "textbook") if args.method == "all" \
        else [args.method]
    assert set(methods) <= rows, f"`{command}` printed no row for {set(methods) - rows}"


def check_zoo(command, stdout, repo, built):
    argv = shlex.split(command)
    if ">" in argv:                                      # zoo NAME > FILE writes the graph
        name, target = argv[argv.index(">") - 1], argv[argv.index(">") + 1]
        assert Graph.load(repo / target).name == name
    else:                                                # --list: every built-in graph
        assert [line.split()[0] for line in stdout.splitlines()] == list(zoo_names())


CHECKS = {"compile": check_compile, "run": check_run, "report": check_report,
          "schedule": check_schedule}


@pytest.mark.parametrize("block", RUN_BLOCKS)
def test_shell_block_runs_as_written(block, run_block, checkout):
    built = {}
    ran = run_block(block)
    for command, proc in ran:                            # stops after the first failure
        assert proc.returncode == 0, explain(command, proc)
        assert "Traceback" not in proc.stderr, explain(command, proc)
        if command.startswith(".venv/bin/tvm-serenity "):
            verb = cli_args(command).command
            CHECKS.get(verb, lambda *a: None)(command, proc.stdout, checkout, built)
        elif command.startswith(".venv/bin/python -m tvm_serenity.zoo"):
            check_zoo(command, proc.stdout, checkout, built)
    assert [c for c, _ in ran] == list(filter(runnable, commands(block)))


# ------------------------------------------------------------------------- the python blocks
@pytest.mark.parametrize("block", PYTHON_BLOCKS)
def test_python_block_runs_as_written(block, run_block, checkout):
    """Run in the copy, after the shell block that writes the graph file it loads; what it
    prints must agree with that block's ``schedule FILE --json``."""
    loaded = re.search(r'Graph\.load\("([^"]+)"\)', block.text)
    schedule_json = None
    if loaded:
        writer = next(b for b in SH_BLOCKS if f"> {loaded.group(1)}" in b.text)
        for command, proc in run_block(writer):
            assert proc.returncode == 0, explain(command, proc)
            if command.startswith(".venv/bin/tvm-serenity schedule ") \
                    and cli_args(command).json and cli_args(command).graph == loaded.group(1):
                schedule_json = json.loads(proc.stdout)
    proc = subprocess.run([str(checkout / ".venv/bin/python"), "-c", block.text], cwd=checkout,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, explain(block.text, proc)
    if schedule_json is not None:                        # print(peak, optimal, arena, live)
        peak, optimal, arena, live = proc.stdout.strip().split(" ", 3)
        assert int(peak) == schedule_json["peak_bytes"]
        assert (optimal == "True") == schedule_json["optimal"]
        assert int(arena) == schedule_json["arena_bytes"]
        graph = Graph.load(checkout / loaded.group(1))
        assert set(ast.literal_eval(live)) <= set(graph.nodes)


def test_interchange_json_example_is_a_valid_graph():
    """The README's example graph loads; its one order has all three tensors live while the
    concat runs (both inputs and its output), so that is its peak."""
    (example,) = [b for b in BLOCKS if b.lang == "json"]
    graph = Graph.loads(example.text)
    spec = json.loads(example.text)
    assert simulate(graph, graph.op_names).peak_bytes == sum(n["bytes"] for n in spec["nodes"])


# ------------------------------------------------------------------------- make demo, benchmarks
def makefile_recipe(target: str) -> list[str]:
    lines = (ROOT / "Makefile").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{target}:"))
    recipe = []
    for line in lines[start + 1:]:
        if not line.startswith("\t"):
            break
        recipe.append(line.strip())
    return recipe


@pytest.mark.slow
@needs_arm
@needs_rp2040js
def test_make_demo_runs_the_demo(checkout):
    """``make demo``'s prerequisites are the install; its command runs in the copy and prints
    the README's table: same columns, builds, peaks, arenas, SRAM, fits and bit-exactness."""
    command = makefile_recipe("demo")[-1].replace("$(VENV)", ".venv")
    assert runnable(command), command
    proc = bash(command, checkout)
    assert proc.returncode == 0, explain(command, proc)
    (table,) = [b for b in BLOCKS if b.lang == "" and b.text.startswith("build ")]
    promised = table_rows(table.text)
    lines = proc.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("build "))
    got = table_rows("\n".join(lines[start:start + len(promised)]))
    cycles = promised[0].index("cycles")
    for want, have in zip(promised, got):
        assert want[:cycles] + want[cycles + 1:] == have[:cycles] + have[cycles + 1:], have
        assert (want[cycles] == "-") == (have[cycles] == "-"), have


def test_benchmark_runs_with_quick(checkout):
    """The rewrite benchmark, with --quick instead of --write: prints its table, writes
    nothing, and its rows (cells only) carry the figures BENCHMARKS.md's section has."""
    before = (checkout / "BENCHMARKS.md").read_text()
    command = QUICK.replace("--write", "--quick")
    proc = bash(command, checkout)
    assert proc.returncode == 0, explain(command, proc)
    assert (checkout / "BENCHMARKS.md").read_text() == before

    def rows(text):                                      # name -> cells but the times
        table = [[c.strip() for c in r.strip().strip("|").split("|")]
                 for r in text.splitlines() if r.startswith("| ")]
        keep = [i for i, h in enumerate(table[0]) if not h.endswith(" s")]
        return {r[0]: [r[i] for i in keep] for r in table[2:]}
    section = before[before.index("<!-- BEGIN rewrite -->"):before.index("<!-- END rewrite -->")]
    quick, written = rows(proc.stdout), rows(section)
    cells = [name for name, row in quick.items() if row[1] == "cell"]
    assert cells
    assert {n: written.get(n) for n in cells} == {n: quick[n] for n in cells}, \
        "BENCHMARKS.md's rewrite section is not what the script measures now"


def test_benchmark_scripts_accept_quick():
    """README: "each section by one script (`--quick` for a short run)"."""
    modules = sorted({m for b in SH_BLOCKS for c in commands(b)
                      for m in re.findall(r"-m benchmarks\.(\w+)", c)})
    assert modules
    lacking = [m for m in modules
               if '"--quick"' not in (ROOT / "benchmarks" / f"{m}.py").read_text()]
    assert not lacking, f"README promises --quick; these benchmark scripts lack it: {lacking}"
