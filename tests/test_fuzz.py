"""Issue #20's fuzz suite: the harness's classifier on processes whose outcome is known, then a
seeded campaign over every generator (tests/fuzz) asserting that every case ends in exit 0 or in
one ``tvm-serenity: error:`` line, with no traceback, crash, hang or changed user file, and no
model accepted that TFLite Micro refuses or disagrees with."""

import os
import signal
import sys

import pytest

from tests.fuzz import runner as fz
from tests.fuzz.campaign import campaign
from tests.fuzz.runner import Case, Step

CI_COUNTS = {"tflite": 60, "graphs": 150, "builds": 30, "paths": 80}


@pytest.fixture(scope="module")
def fuzz_runner(tmp_path_factory):
    return fz.Runner(tmp_path_factory.mktemp("fuzz"), jobs=2)


def _py(code: str, **kw) -> Step:
    return Step((sys.executable, "-c", code), kind="exec", **kw)


def test_classify_rules():
    assert fz.classify(0, "") == "ok"
    assert fz.classify(0, "warning\nTraceback (most recent call last):\n") == "traceback"
    assert fz.classify(2, "tvm-serenity: error: model 'm' has no subgraph\n") == "refused"
    assert fz.classify(2, "tvm-serenity: error: a\nb\n") == "bad-refusal"
    assert fz.classify(2, "tvm-serenity compile: invalid choice\n") == "bad-refusal"
    assert fz.classify(2, "") == "bad-refusal"
    assert fz.classify(2, "tvm-serenity: error: node '\x1b[31mred': bad\n") == "bad-refusal"
    assert fz.classify(2, "tvm-serenity: error: node '\\x1b[31mred': bad\n") == "refused"
    assert fz.classify(1, "tvm-serenity: error: x\n") == "other-exit"
    assert fz.classify(-signal.SIGBUS, "") == "crash"
    assert fz.classify(None, "", timed_out=True) == "hang"


def test_runner_classifies_real_processes(fuzz_runner, monkeypatch):
    """Each fake command ends in the class it was written to produce; a broken ``main`` in the
    fork engine is caught as a traceback or a crash, never passed."""
    from tvm_serenity import cli

    def write_user_file(case, sandbox):
        (sandbox / "user.txt").write_text("mine\n")

    cases = {
        "ok": Case("t", "ok", "", [_py("print('fine')")]),
        "refused": Case("t", "refused", "", [_py(
            "import sys; sys.stderr.write('tvm-serenity: error: bad input\\n'); sys.exit(2)")]),
        "bad-refusal": Case("t", "bad", "", [_py(
            "import sys; sys.stderr.write('tvm-serenity: error: a\\nsecond\\n'); sys.exit(2)")]),
        "traceback": Case("t", "tb", "", [_py("raise ValueError('boom')")]),
        "crash": Case("t", "crash", "", [_py("import os; os.kill(os.getpid(), 7)")]),
        "hang": Case("t", "hang", "", [_py("import time; time.sleep(60)", timeout=1)]),
        "other-exit": Case("t", "exit3", "", [_py("raise SystemExit(3)")]),
        "files-changed": Case("t", "changed", "", [_py("open('user.txt', 'a').write('x')")],
                              setup=write_user_file),
        "not-refused": Case("t", "notref", "", [_py("pass")], must_refuse=True),
        "refused-valid": Case("t", "refval", "", [_py(
            "import sys; sys.stderr.write('tvm-serenity: error: no\\n'); sys.exit(2)")],
            must_accept=True),
        "accepted-but-run-fails": Case("t", "runfail", "", [_py("pass"), _py(
            "import sys; sys.stderr.write('tvm-serenity: error: differs\\n'); sys.exit(2)",
            must_pass=True)]),
    }
    results = fuzz_runner.run(list(cases.values()))
    assert {k: r.outcome for k, r in zip(cases, results)} == {k: k for k in cases}
    assert results[0].steps[0].stdout == "fine\n"
    # writes inside the output directory are allowed
    inside = Case("t", "inside", "", [_py("import os; os.mkdir('out'); open('out/x', 'w')")])
    assert fuzz_runner.run([inside])[0].outcome == "ok"

    def raising(argv=None):
        raise KeyError("escaped")

    def segfault(argv=None):
        os.kill(os.getpid(), signal.SIGSEGV)

    monkeypatch.setattr(cli, "main", raising)       # the forked child runs the patched main
    assert fuzz_runner.run([Case("t", "cli-tb", "", [Step(("schedule", "x"))])])[0].outcome \
        == "traceback"
    monkeypatch.setattr(cli, "main", segfault)
    assert fuzz_runner.run([Case("t", "cli-sig", "", [Step(("schedule", "x"))])])[0].outcome \
        == "crash"


def test_cli_refusal_goes_through_the_fork_engine(fuzz_runner):
    r = fuzz_runner.run([Case("t", "missing", "", [Step(("schedule", "missing.json"))],
                              output=None)])[0]
    assert r.outcome == "refused", r.steps[0].stderr
    assert "missing.json" in r.steps[0].stderr


@pytest.mark.slow
def test_fuzz_campaign_keeps_the_promise():
    """A few hundred seeded cases (``python -m tests.fuzz`` with CI_COUNTS, seed 0)."""
    results, _ = campaign(0, CI_COUNTS, jobs=2)
    assert len(results) > 250 and not [r for r in results if r.outcome == "not-run"]
    if any(r.failed for r in results):
        pytest.fail("\n" + fz.table(results), pytrace=False)
