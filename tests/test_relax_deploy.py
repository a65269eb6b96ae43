"""compile_relax / run_relax: an int8 .tflite through the serenity Relax pipeline to a host
library, run on the Relax VM and checked against the reference interpreter."""

import json
import shutil

import numpy as np
import pytest

from test_rewrite_pass import concat_cell
from tvm_serenity.cli import main
from tvm_serenity.errors import SerenityError
from tvm_serenity.frontend import reference
from tvm_serenity.frontend.tflite_model import load_tflite
from tvm_serenity.relax_deploy import (INPUTS_FILE, LIBRARY_FILE, REPORT_FILE, compile_relax,
                                       is_relax_build, run_relax)


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("relax")
    path = concat_cell(tmp, branches=4)
    return path, compile_relax(path, tmp / "out")


def test_compile_writes_library_report_and_inputs(build):
    path, b = build
    assert is_relax_build(b.out_dir) and not is_relax_build(b.out_dir.parent)
    for name in (LIBRARY_FILE, REPORT_FILE, INPUTS_FILE):
        assert (b.out_dir / name).is_file()
    report = json.loads((b.out_dir / REPORT_FILE).read_text())
    assert report == b.report and report["model"] == str(path.resolve())
    passes = report["passes"]
    assert passes["rewrite"]["applied"] == 1                   # the cell's concat -> conv
    arena = passes["arena"]["functions"][0]
    assert arena["liveness_peak_bytes"] <= arena["arena_bytes"] <= arena["static_plan_bytes"]
    summary = b.summary()
    assert "identity rewrites kept: 1" in summary
    assert f"arena {arena['arena_bytes']:,} B" in summary
    assert f"StaticPlanBlockMemory {arena['static_plan_bytes']:,} B" in summary
    # rip="auto" (the default): both builds planned, the smaller kept and said so
    choice = passes["rip"]
    assert report["options"]["rip"] == "auto"
    assert arena["arena_bytes"] == min(choice["arena_bytes"].values())
    assert arena["arena_bytes"] == choice["arena_bytes"][choice["chosen"]]
    line = "RiP kernels kept" if choice["chosen"] == "rip" else "RiP kernels not kept"
    assert line in summary


def test_run_is_bit_exact_on_saved_and_given_inputs(build):
    path, b = build
    model = load_tflite(path)
    with np.load(b.out_dir / INPUTS_FILE) as saved:
        x = saved["input0"]
    result = run_relax(b.out_dir)
    assert result.checked and np.array_equal(result.outputs[0], reference.run(model, [x])[0])
    other = np.random.default_rng(9).integers(-128, 128, x.shape).astype(np.int8)
    result = run_relax(b.out_dir, other.tobytes())
    assert np.array_equal(result.outputs[0], reference.run(model, [other])[0])
    assert result.to_json()["outputs"][0]["shape"] == list(result.outputs[0].shape)


def test_run_rejects_bad_inputs_and_directories(build, tmp_path):
    _, b = build
    with pytest.raises(SerenityError, match=r"the input has 3 bytes, input '\w+' takes 256 "
                                            r"\(int8 \[1, 8, 8, 4\]\)"):
        run_relax(b.out_dir, b"abc")
    with pytest.raises(SerenityError, match="is not a tvm-serenity build"):
        run_relax(tmp_path)


def test_check_refuses_a_model_changed_since_the_build(build, tmp_path):
    """The check compares with the reference of the model the build was compiled from: once
    that file holds other weights (same shapes), a checked run is refused, not misjudged."""
    path, b = build
    model = tmp_path / "cell.tflite"
    model.write_bytes(path.read_bytes())
    built = compile_relax(model, tmp_path / "out")
    assert run_relax(built.out_dir).checked
    (tmp_path / "other").mkdir()
    model.write_bytes(concat_cell(tmp_path / "other", branches=4, seed=1).read_bytes())
    with pytest.raises(SerenityError, match="was compiled from is gone or changed since"):
        run_relax(built.out_dir)
    assert not run_relax(built.out_dir, check=False).checked


# ------------------------------------------------------------------ the command line
def test_cli_compile_run_report_for_llvm(tmp_path, capsys):
    path = concat_cell(tmp_path, branches=3)
    out = tmp_path / "out"
    assert main(["compile", str(path), "--target", "llvm", "--rewrite", "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    report = json.loads((out / REPORT_FILE).read_text())
    arena = report["passes"]["arena"]["functions"][0]
    assert "identity rewrites kept: 1" in printed
    assert f"StaticPlanBlockMemory {arena['static_plan_bytes']:,} B" in printed
    assert report["options"]["rewrite"] is True

    raw = np.random.default_rng(4).integers(-128, 128, 256).astype(np.int8)
    (tmp_path / "x.bin").write_bytes(raw.tobytes())
    assert main(["run", str(out), "--input", str(tmp_path / "x.bin"), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    want = reference.run(load_tflite(path), [raw.reshape(1, 8, 8, 4)])[0]
    assert payload["checked"] and payload["outputs"][0]["values"] == want.reshape(-1)[:16].tolist()

    assert main(["run", str(out), "--board"]) == 2
    assert "runs on this host's Relax VM" in capsys.readouterr().err
    assert main(["report", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out / "report" / "report.html")


def test_report_plots_what_the_passes_decided(build):
    from tvm_serenity.report import write_relax_report
    _, b = build
    report = write_relax_report(b.out_dir)
    passes = b.report["passes"]
    (block,) = [x for x in passes["schedule"]["blocks"] if x["function"] == "main"]
    arena = passes["arena"]["functions"][0]
    series = report.memory_series
    assert max(series["frontend order"]) == block["peak_before"]
    assert max(series["tvm-serenity"]) == block["peak_after"] <= block["peak_before"]
    tops = [y0 + height for _, _, _, y0, height in report.arena_rectangles]
    assert len(tops) == arena["tensors"] and max(tops) == arena["arena_bytes"]
    assert set(report.images) == {"memory", "arena"}
    page = report.html.read_text()
    assert f"{arena['static_plan_bytes']:,} B" in page and "identity rewrites kept" in page


def test_edited_or_foreign_build_files_are_refused(build, tmp_path):
    """A build whose files changed after compile (here relax.json, then the library cut
    short, which would crash the process when loaded) is refused naming the file; a
    directory holding the same file names without our marker is no build at all."""
    _, b = build
    copy = tmp_path / "copy"
    shutil.copytree(b.out_dir, copy)
    (copy / REPORT_FILE).write_text('{"model": ')
    with pytest.raises(SerenityError, match="'relax.json' was changed"):
        run_relax(copy)
    shutil.rmtree(copy)
    shutil.copytree(b.out_dir, copy)
    lib = copy / LIBRARY_FILE
    lib.write_bytes(lib.read_bytes()[:4096])
    with pytest.raises(SerenityError, match="'model.so' was changed"):
        run_relax(copy)
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / REPORT_FILE).write_text("{}")
    with pytest.raises(SerenityError, match="is not a tvm-serenity build"):
        run_relax(foreign)


def test_summary_says_which_rip_build_was_kept():
    from tvm_serenity.relax_deploy import _rip_line
    arena = {"in_place": ["a_rip", "b_rip"], "dual": ["c_rip_dual"]}
    kept = _rip_line({"chosen": "rip", "arena_bytes": {"plain": 16000, "rip": 8832}}, arena)
    assert kept == ["RiP kernels kept: 2 in place, 1 on two buffers (arena without RiP: "
                    "16,000 B)"]
    plain = _rip_line({"chosen": "plain", "arena_bytes": {"plain": 256, "rip": 256}}, arena)
    assert plain == ["RiP kernels not kept: no smaller arena (with RiP: 256 B)"]
    assert _rip_line(None, arena) == []
