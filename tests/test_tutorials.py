"""The tutorials run as written (CI runs them through this test)."""

import subprocess
import sys
from pathlib import Path

import pytest

from toolchain import rp2040js_missing

TUTORIALS = sorted((Path(__file__).resolve().parent.parent / "tutorials").glob("*.py"))


@pytest.mark.slow
@pytest.mark.parametrize("script", TUTORIALS, ids=[p.stem for p in TUTORIALS])
def test_tutorial_runs(script, tmp_path):
    args = [sys.executable, str(script)]
    if script.stem.startswith("01"):
        args.append(str(tmp_path / "out"))
    if script.stem.startswith("03"):
        if rp2040js_missing():
            pytest.skip(rp2040js_missing())
        args += [str(tmp_path / "demo.tflite"), str(tmp_path / "out")]
        from tvm_serenity.demo import demo_model_bytes
        (tmp_path / "demo.tflite").write_bytes(demo_model_bytes())
    proc = subprocess.run(args, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    if script.stem.startswith("03"):       # demo model: dual buffering is refused, RiP runs
        assert "over by" in proc.stdout and "Right In-Place: arena" in proc.stdout
    if script.stem.startswith("04"):       # the rewrite is kept and lowers the peak
        assert "kept channel_partition" in proc.stdout


def test_there_are_four_tutorials():
    assert [p.stem[:2] for p in TUTORIALS] == ["01", "02", "03", "04"]
