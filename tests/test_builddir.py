"""Build directories (tvm_serenity/builddir.py): a build only goes where nothing of the user's
can be lost, nothing stale survives a rebuild, a failed build leaves the old one as it was, and
nothing edited after compile is run or reported as ours.

Every check hashes the user's files before and after, so "untouched" is measured, not assumed.
"""

import hashlib
import json
import os
import shutil

import pytest

from tvm_serenity import SerenityError
from tvm_serenity.builddir import MARKER_FILE, new_build, verify_build
from tvm_serenity.cli import main
from tvm_serenity.deploy import compile_tflite, load_plan, run
from tvm_serenity.report import write_compiled_report
from tflite_cases import SINGLE_OP_MODELS
from toolchain import needs_cc


def _hashes(root):
    """SHA-256 of every file under ``root`` (links recorded by target, not followed)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, root)
            out[rel] = ("link:" + os.readlink(p)) if os.path.islink(p) else \
                hashlib.sha256(open(p, "rb").read()).hexdigest()
    return out


@pytest.fixture
def model(tmp_path):
    path = tmp_path / "pad.tflite"
    path.write_bytes(SINGLE_OP_MODELS["pad"]())
    return path


def _compile(model, out, **kw):
    return compile_tflite(model, "host", out, build=False, time_limit=5, **kw)


def test_new_build_writes_atomically_and_leaves_nothing_on_failure(tmp_path):
    out = tmp_path / "out"
    with new_build(out, "test") as tmp:
        (tmp / "a.txt").write_text("one")
        assert not out.exists() and tmp.parent == tmp_path     # a sibling until complete
    assert (out / "a.txt").read_text() == "one"
    assert json.loads((out / MARKER_FILE).read_text())["files"] == {
        "a.txt": hashlib.sha256(b"one").hexdigest()}
    before = _hashes(tmp_path)
    with pytest.raises(RuntimeError):
        with new_build(out, "test") as tmp:
            (tmp / "b.txt").write_text("two")
            raise RuntimeError("the build broke")
    assert _hashes(tmp_path) == before                       # no temp left, old build intact
    verify_build(out, ("test",))


@pytest.mark.parametrize("case", ["user-files", "file", "symlink"])
def test_foreign_destinations_are_refused_untouched(tmp_path, model, case):
    out = tmp_path / "out"
    if case == "user-files":
        out.mkdir()
        (out / "plan.json").write_text("my notes")
        (out / "model").mkdir()
        (out / "model" / "model.c").write_text("int main(void) { return 0; }")
        message = "is not empty and holds no tvm-serenity build"
    elif case == "file":
        out.write_text("a file of mine")
        message = "exists and is not a directory"
    else:
        (tmp_path / "elsewhere").mkdir()
        out.symlink_to(tmp_path / "elsewhere")
        message = "is a symbolic link"
    before = _hashes(tmp_path)
    for force in (False, True):
        with pytest.raises(SerenityError, match=message):
            _compile(model, out, force=force)
    assert _hashes(tmp_path) == before


def test_empty_directory_and_rebuilds_leave_nothing_stale(tmp_path, model):
    out = tmp_path / "out"
    out.mkdir()
    first = _compile(model, out, rewrite=True)
    assert (out / "graph_source.json").is_file()
    (out / "report").mkdir()
    (out / "report" / "old.png").write_bytes(b"stale")      # derived: replaced with the build
    second = _compile(model, out)                            # an intact build of ours: replaced
    assert not (out / "graph_source.json").exists() and not (out / "report").exists()
    assert second.out_dir == first.out_dir == out
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    verify_build(out)


def test_edited_build_is_refused_without_force_and_links_are_never_followed(tmp_path, model):
    out = tmp_path / "out"
    _compile(model, out)
    outside = tmp_path / "precious.txt"
    outside.write_text("not yours")
    (out / "plan.json").unlink()
    (out / "plan.json").symlink_to(outside)
    before = _hashes(tmp_path)
    with pytest.raises(SerenityError, match=r"modified since \('plan.json' is a symbolic link"):
        _compile(model, out)
    with pytest.raises(SerenityError, match="'plan.json' is a symbolic link"):
        load_plan(out)
    assert _hashes(tmp_path) == before
    _compile(model, out, force=True)
    assert outside.read_text() == "not yours" and not (out / "plan.json").is_symlink()
    verify_build(out)


def test_failed_rebuild_keeps_the_previous_build(tmp_path, model):
    out = tmp_path / "out"
    _compile(model, out)
    before = _hashes(tmp_path)
    with pytest.raises(SerenityError, match="the input has 3 bytes"):
        _compile(model, out, input=b"abc")
    assert _hashes(tmp_path) == before


@needs_cc
def test_run_and_report_refuse_edited_builds(tmp_path, model):
    out = tmp_path / "out"
    compile_tflite(model, "host", out, time_limit=5)
    run(out)
    c = out / "model" / "model.c"
    c.write_text(c.read_text() + "\n/* edited */\n")
    for call in (lambda: run(out), lambda: write_compiled_report(out)):
        with pytest.raises(SerenityError, match="'model/model.c' was changed"):
            call()
    assert main(["run", str(out)]) == 2
    shutil.rmtree(out / "model")
    with pytest.raises(SerenityError, match="'model/model.c' is missing"):
        run(out)


@needs_cc
def test_run_with_a_new_input_and_a_damaged_report_folder(tmp_path, model):
    """run --input rewrites the build's input (recorded, so the build stays verified); a
    report folder replaced by a file is regenerated (it is derived from the build)."""
    out = tmp_path / "out"
    compiled = compile_tflite(model, "host", out, time_limit=5)
    data = bytes(range(compiled.emitted.input_bytes))
    assert run(out, input=data).output == run(out).output
    assert (out / "input.bin").read_bytes() == data
    (out / "report").write_text("not a folder")
    report = write_compiled_report(out)
    assert report.html.is_file() and report.html.parent == out / "report"
    verify_build(out)


@needs_cc
def test_run_refuses_a_model_changed_since_compile(tmp_path, model):
    out = tmp_path / "out"
    compile_tflite(model, "host", out, time_limit=5)
    model.write_bytes(SINGLE_OP_MODELS["pad"]())        # the same bytes again: still fine
    run(out)
    model.write_bytes(SINGLE_OP_MODELS["relu6_same_quant"]())
    with pytest.raises(SerenityError, match="was compiled from is gone or changed since"):
        run(out)
    assert run(out, check=False).output
