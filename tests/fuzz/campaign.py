"""One seeded campaign over every generator (what ``python -m tests.fuzz`` and
``tests/test_fuzz.py`` run)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable, Sequence

from .builds import build_cases, path_cases, pristine_builds
from .graphs import graph_cases
from .mutants import tflite_cases
from .runner import CaseResult, Runner, new_workdir

GENERATORS = {"tflite": 200, "graphs": 300, "builds": 60, "paths": 80}


def campaign(seed: int, counts: dict[str, int], *, jobs: int = 2, engine: str = "fork",
             time_budget: float | None = None, only: Sequence[str] | None = None,
             workdir: Path | None = None, keep: bool = False,
             progress: Callable[[CaseResult], None] | None = None
             ) -> tuple[list[CaseResult], Path]:
    """Generate ``counts[g]`` cases of each generator ``g`` and run them; (results, workdir).
    The work directory is removed afterwards unless given (then the failing cases' sandboxes
    and logs stay in it) or ``keep`` (every case's stays)."""
    own = workdir is None
    workdir = new_workdir() if own else Path(workdir)
    try:
        runner = Runner(workdir, jobs=jobs, engine=engine, keep=keep, keep_failures=not own,
                        progress=progress)
        builds = pristine_builds(runner, workdir) \
            if counts.get("builds") or counts.get("paths") else {}
        cases = (tflite_cases(seed, counts.get("tflite", 0))
                 + graph_cases(seed, counts.get("graphs", 0))
                 + build_cases(seed, counts.get("builds", 0), builds)
                 + path_cases(counts.get("paths", 0), builds))
        if only:
            cases = [c for c in cases if c.id in set(only)]
        return runner.run(cases, time_budget), workdir
    finally:
        if own and not keep:
            shutil.rmtree(workdir, ignore_errors=True)
