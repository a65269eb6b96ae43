"""Run fuzz cases as subprocesses, classify each outcome, and print the table.

A :class:`Case` is a sandbox directory (written by its ``setup``) and a list of :class:`Step`:
``tvm-serenity`` invocations (``cli``), arbitrary programs (``exec``) or post-checks written in
Python (``check``, functions of :mod:`tests.fuzz.checks`). Every step runs in its own process,
with the sandbox as working directory, stdin from ``/dev/null``, stdout/stderr to files outside
the sandbox, in its own session (so a timeout kills the compiler or emulator it started too).

``cli`` steps run ``tvm_serenity.cli.main`` in a child forked from this process after it imported
everything once (``engine="fork"``; the same code path as ``python -m tvm_serenity.cli``:
an escaping exception prints its traceback and exits 1, a signal kills the child) because
starting the CLI costs ~5 s of CPU to import TVM; ``engine="exec"`` runs ``[sys.executable, "-m",
"tvm_serenity.cli", ...]`` instead, for a faithful re-check of a few cases.

Classification of one step (:func:`classify`), first match wins: ``hang`` (killed at its
timeout), ``crash`` (killed by a signal), ``traceback`` (``Traceback`` in stderr), ``ok`` (exit
0), ``refused`` (exit 2 and stderr exactly one line starting ``tvm-serenity: error:``, with no
raw control character such as ESC or CR: a hostile name must be escaped, not echoed),
``bad-refusal`` (exit 2 otherwise), ``other-exit``. A check step reports its own outcome.
A case then fails with ``files-changed`` when anything in the sandbox outside the case's
output directory differs afterwards (every path's type, mode and SHA-256 or link target),
``not-refused`` when it must be refused (e.g. ``-o`` over user files) but exited 0,
``refused-valid`` when a valid input was refused, ``accepted-but-run-fails`` when a model that
compiled is refused by ``run`` (a bit-exactness claim that does not hold).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import stat
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

PREFIX = "tvm-serenity: error:"
PASS = ("ok", "refused")
FAILURES = ("traceback", "crash", "hang", "bad-refusal", "other-exit", "files-changed",
            "not-refused", "refused-valid", "accepted-but-run-fails",
            "accepted-but-tflm-refuses", "tflm-mismatch", "wrong-result", "harness-error")
OUTCOMES = PASS + FAILURES + ("skipped", "not-run")
POLL_SECONDS = 0.02
_FRAME = re.compile(r'File ".*?/(tvm_serenity/[^"]+)", line (\d+), in (\S+)')
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")     # a raw escape or CR breaks "one line"


@dataclass
class Step:
    """One process of a case. ``args``: the ``tvm-serenity`` arguments (``cli``), a whole argv
    (``exec``) or a check name and its arguments (``check``). ``always``: run even when an
    earlier step did not exit 0. ``must_pass``: a refusal here is a failure (``run`` of a
    model that compiled)."""

    args: tuple[str, ...]
    kind: str = "cli"
    always: bool = False
    must_pass: bool = False
    timeout: float = 120.0


@dataclass
class Case:
    """``setup(sandbox)`` writes the case's files (and may refine ``description``); ``output``
    is the directory (relative to the sandbox) that the steps may change, ``None`` when
    nothing may change."""

    generator: str
    id: str
    description: str
    steps: list[Step]
    setup: Callable[["Case", Path], None] = lambda case, sandbox: None
    output: str | None = "out"
    must_refuse: bool = False
    must_accept: bool = False
    skip: str | None = None


@dataclass
class StepResult:
    step: Step
    outcome: str
    returncode: int | None
    seconds: float
    stdout: str
    stderr: str


@dataclass
class CaseResult:
    case: Case
    outcome: str
    detail: str = ""
    steps: list[StepResult] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def failed(self) -> bool:
        return self.outcome in FAILURES

    def first_stderr_line(self) -> str:
        if self.detail:
            return self.detail
        for r in reversed(self.steps):
            lines = r.stderr.strip().splitlines()
            if not lines:
                continue
            if r.outcome != "traceback":
                return lines[0]
            # the exception, and the innermost frame of the package that raised it
            frames = _FRAME.findall(r.stderr)
            return lines[-1] + (f" [{frames[-1][0]}:{frames[-1][1]} in {frames[-1][2]}]"
                                if frames else "")
        return ""


def classify(returncode: int | None, stderr: str, timed_out: bool = False) -> str:
    """The outcome class of one finished ``tvm-serenity`` process (module docstring)."""
    if timed_out:
        return "hang"
    if returncode is None or returncode < 0:
        return "crash"
    if "Traceback" in stderr:
        return "traceback"
    if returncode == 0:
        return "ok"
    if returncode == 2:
        lines = stderr.rstrip("\n").split("\n")
        if len(lines) == 1 and lines[0].startswith(PREFIX) and not _CONTROL.search(lines[0]):
            return "refused"
        return "bad-refusal"
    return "other-exit"


# ------------------------------------------------------------------------------ data safety
def snapshot(root: Path, exclude: str | None) -> dict[str, tuple]:
    """Every path under ``root`` except ``root/exclude``: (type, mode, sha256 or link target)."""
    skip = os.path.normpath(root / exclude) if exclude else None
    seen: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            if skip and (path == skip or path.startswith(skip + os.sep)):
                continue
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                seen[path] = ("link", os.readlink(path))
            elif stat.S_ISREG(st.st_mode):
                seen[path] = ("file", stat.S_IMODE(st.st_mode), sha256_file(path))
            else:
                seen[path] = ("dir" if stat.S_ISDIR(st.st_mode) else "other",
                              stat.S_IMODE(st.st_mode))
        dirnames[:] = [d for d in dirnames
                       if not os.path.islink(os.path.join(dirpath, d))
                       and not (skip and os.path.join(dirpath, d) == skip)]
    return seen


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except OSError as e:          # e.g. a file made unreadable: still a comparable state
        return f"unreadable: {e.strerror}"
    return h.hexdigest()


def changed_paths(before: dict, after: dict, root: Path) -> list[str]:
    paths = sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))
    return [os.path.relpath(p, root) for p in paths]


def _make_writable(root: Path) -> None:
    """Undo the permission cases' chmods so the sandbox can be removed."""
    for dirpath, dirnames, _ in os.walk(root):
        for d in dirnames:
            p = os.path.join(dirpath, d)
            if not os.path.islink(p):
                os.chmod(p, 0o755)


# ------------------------------------------------------------------------------- execution
def _child_cli(args: Sequence[str]) -> int:
    from tvm_serenity import cli
    try:
        code = cli.main(list(args))
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:         # what the interpreter does with an uncaught exception
        traceback.print_exc()
        code = 1
    return code


def _child_check(args: Sequence[str]) -> int:
    from . import checks
    outcome, message = checks.CHECKS[args[0]](*args[1:])
    sys.stdout.write(outcome + "\n")
    if message:
        sys.stderr.write(message + "\n")
    return 0


def _preload() -> None:
    """Import what every ``cli`` step needs once, before forking (the children share it)."""
    from tvm_serenity import cli, deploy, relax_deploy, report  # noqa: F401
    from tvm_serenity.frontend import interpreters  # noqa: F401
    cli.build_parser()


class Runner:
    """Runs cases ``jobs`` at a time (each case's steps in sequence) in a work directory."""

    def __init__(self, workdir: Path, *, jobs: int = 2, engine: str = "fork",
                 keep: bool = False, keep_failures: bool = False,
                 progress: Callable[[CaseResult], None] | None = None):
        if engine not in ("fork", "exec"):
            raise ValueError(f"unknown engine {engine!r}")
        self.workdir = Path(workdir)
        self.jobs, self.engine, self.progress = jobs, engine, progress
        self.keep, self.keep_failures = keep, keep_failures
        self.workdir.mkdir(parents=True, exist_ok=True)
        _preload()

    # one process ------------------------------------------------------------------------
    def _spawn(self, step: Step, cwd: Path, log: Path) -> int:
        out_fd = os.open(log.with_suffix(".out"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        err_fd = os.open(log.with_suffix(".err"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        pid = os.fork()
        if pid:
            os.close(out_fd)
            os.close(err_fd)
            return pid
        code = 1
        try:
            os.setsid()
            os.chdir(cwd)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(out_fd, 1)
            os.dup2(err_fd, 2)
            # the parent's sys streams may be wrappers (pytest's capture): use the fds
            sys.stdin = open(0, closefd=False)
            sys.stdout = open(1, "w", closefd=False)
            sys.stderr = open(2, "w", closefd=False)
            if step.kind == "exec" or (step.kind == "cli" and self.engine == "exec"):
                argv = list(step.args) if step.kind == "exec" else \
                    [sys.executable, "-m", "tvm_serenity.cli", *step.args]
                os.execvp(argv[0], argv)
            code = _child_cli(step.args) if step.kind == "cli" else _child_check(step.args)
        except BaseException:
            traceback.print_exc()
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code)

    def run_step(self, step: Step, cwd: Path, log: Path) -> StepResult:
        """Run one step to completion (used for the pristine builds)."""
        pid, start = self._spawn(step, cwd, log), time.monotonic()
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return self._finish(step, log, status, False, time.monotonic() - start)
            if time.monotonic() - start > step.timeout:
                return self._finish(step, log, self._kill(pid), True, step.timeout)
            time.sleep(POLL_SECONDS)

    @staticmethod
    def _kill(pid: int) -> int:
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return os.waitpid(pid, 0)[1]

    @staticmethod
    def _finish(step: Step, log: Path, status: int, timed_out: bool,
                seconds: float) -> StepResult:
        out = log.with_suffix(".out").read_text(errors="replace")
        err = log.with_suffix(".err").read_text(errors="replace")
        code = os.waitstatus_to_exitcode(status)
        if step.kind == "check" and not timed_out and code == 0:
            outcome = out.strip().splitlines()[-1] if out.strip() else "harness-error"
        elif step.kind == "check":
            outcome = classify(code, err, timed_out)
            outcome = outcome if outcome in ("hang", "crash") else "harness-error"
        else:
            outcome = classify(code, err, timed_out)
        return StepResult(step, outcome, code, seconds, out, err)

    # cases ------------------------------------------------------------------------------
    def run(self, cases: Sequence[Case], time_budget: float | None = None) -> list[CaseResult]:
        """Run ``cases``, ``jobs`` at a time; cases not started within ``time_budget`` seconds
        are ``not-run``. Results come back in the order of ``cases``."""
        start = time.monotonic()
        pending = list(enumerate(cases))
        active: dict[int, _Active] = {}            # pid -> the case it runs
        results: dict[int, CaseResult] = {}
        while pending or active:
            while pending and len(active) < self.jobs:
                index, case = pending.pop(0)
                if time_budget is not None and time.monotonic() - start > time_budget:
                    results[index] = CaseResult(case, "not-run")
                    continue
                state = _Active(index, case, self.workdir / case.id)
                result = self._begin(state)
                if result is not None:
                    results[index] = self._report(result)
                else:
                    active[state.pid] = state
            if not active:
                continue
            time.sleep(POLL_SECONDS)
            for pid, state in list(active.items()):
                done, status = os.waitpid(pid, os.WNOHANG)
                elapsed = time.monotonic() - state.step_start
                step = state.step
                if not done and elapsed <= step.timeout:
                    continue
                timed_out = not done
                if timed_out:
                    status = self._kill(pid)
                del active[pid]
                state.results.append(self._finish(step, state.log, status, timed_out,
                                                  elapsed))
                result = self._advance(state)
                if result is not None:
                    results[state.index] = self._report(result)
                else:
                    active[state.pid] = state
        return [results[i] for i in range(len(cases))]

    def _report(self, result: CaseResult) -> CaseResult:
        if self.progress:
            self.progress(result)
        return result

    def _begin(self, state: "_Active") -> CaseResult | None:
        case = state.case
        if case.skip:
            return CaseResult(case, "skipped", case.skip)
        state.sandbox = state.root / "sandbox"
        if state.root.exists():
            _make_writable(state.root)
            shutil.rmtree(state.root)
        state.sandbox.mkdir(parents=True)
        try:
            case.setup(case, state.sandbox)
        except Exception as e:
            return self._close(state, CaseResult(case, "harness-error",
                                                 f"setup: {type(e).__name__}: {e}"))
        state.before = snapshot(state.sandbox, case.output)
        state.start = time.monotonic()
        return self._advance(state)

    def _advance(self, state: "_Active") -> CaseResult | None:
        """Start the next step that should run (``always``, or every step so far exited 0),
        or finish the case."""
        case = state.case
        all_ok = all(r.outcome == "ok" for r in state.results)
        while state.next_step < len(case.steps):
            index, step = state.next_step, case.steps[state.next_step]
            state.next_step += 1
            if step.always or all_ok:
                state.step, state.log = step, state.root / f"step{index}"
                state.step_start = time.monotonic()
                state.pid = self._spawn(step, state.sandbox, state.log)
                return None
        return self._close(state, self._verdict(state))

    def _verdict(self, state: "_Active") -> CaseResult:
        case, steps = state.case, state.results
        result = CaseResult(case, "ok", steps=steps, seconds=time.monotonic() - state.start)
        for r in steps:
            if r.outcome in FAILURES:
                result.outcome = r.outcome
                return result
        for r in steps:
            if r.outcome == "refused" and r.step.must_pass:
                result.outcome = "accepted-but-run-fails"
                return result
        changed = changed_paths(state.before, snapshot(state.sandbox, case.output),
                                state.sandbox)
        if changed:
            result.outcome = "files-changed"
            result.detail = "changed: " + ", ".join(map(repr, changed[:4])) + \
                (f" (+{len(changed) - 4})" if len(changed) > 4 else "")
            return result
        first = steps[0].outcome if steps else "ok"
        if case.must_refuse and first == "ok":
            result.outcome, result.detail = "not-refused", "exit 0 where a refusal is required"
        elif case.must_accept and first == "refused":
            result.outcome = "refused-valid"
        else:
            result.outcome = first
        return result

    def _close(self, state: "_Active", result: CaseResult) -> CaseResult:
        """Remove the case's directory unless ``keep`` or (``keep_failures``) it failed."""
        if not (self.keep or self.keep_failures and result.failed) and state.root.exists():
            _make_writable(state.root)
            shutil.rmtree(state.root, ignore_errors=True)
        return result


@dataclass
class _Active:
    index: int
    case: Case
    root: Path
    sandbox: Path | None = None
    before: dict | None = None
    results: list = field(default_factory=list)
    next_step: int = 0
    step: Step | None = None
    step_start: float = 0.0
    start: float = 0.0
    pid: int = 0
    log: Path | None = None


def new_workdir(prefix: str = "tvm-serenity-fuzz-") -> Path:
    return Path(tempfile.mkdtemp(prefix=prefix))


# ---------------------------------------------------------------------------------- report
def table(results: Sequence[CaseResult]) -> str:
    """Counts by outcome per generator (outcomes that occurred, failures marked ``!``), then
    one line per failing case."""
    generators = list(dict.fromkeys(r.case.generator for r in results))
    present = [o for o in OUTCOMES if any(r.outcome == o for r in results)]
    labels = [o + ("!" if o in FAILURES else "") for o in present]
    lines = [f"{'generator':<10}{'cases':>7}" + "".join(f"  {h}" for h in labels)]
    for g in generators + ["total"]:
        rs = [r for r in results if g in ("total", r.case.generator)]
        lines.append(f"{g:<10}{len(rs):>7}" + "".join(
            f"  {sum(r.outcome == o for r in rs):>{len(h)}}" for o, h in zip(present, labels)))
    failing = [r for r in results if r.failed]
    if failing:
        lines += ["", f"failing cases ({len(failing)}):"]
        for r in failing:
            lines.append(f"  {r.outcome:<26} {r.case.id:<14} {_one_line(r.case.description, 70)}"
                         f"\n  {'':<26} {'':<14} -> {_one_line(r.first_stderr_line(), 150)}")
    return "\n".join(lines)


def _one_line(text: str, limit: int) -> str:
    text = text.encode("unicode_escape").decode("ascii") if any(
        c in text for c in "\n\r\x1b") else text
    return text if len(text) <= limit else text[:limit - 3] + "..."
