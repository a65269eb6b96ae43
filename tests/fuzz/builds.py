"""Damaged builds, hostile paths and bad command-line flags.

**Damaged builds.** The fuzz cell (:func:`tests.fuzz.mutants.cell_model_bytes`) is compiled once
per target (:func:`pristine_builds`: ``host`` when ``cc`` exists, ``pico`` when the Arm toolchain
does, and ``llvm``); each case copies one build into its sandbox as ``out/``, damages it
(:data:`DAMAGES`: plan.json empty / not an object / fields missing or of the wrong type / order
invalid / offsets overlapping; input.bin deleted, resized or a directory; model.c edited or
deleted; project files broken; report/ replaced by a file or a link out of the build;
plan.json a link to a file outside; model.so truncated, emptied or deleted; relax.json and
input.npz broken; the build marker removed or corrupt) and, for half of the file damages,
re-records the build marker's hashes (a consistent-looking build with bad contents, so the
loaders behind the marker check are exercised too); then runs ``run out`` (``--host`` for MCU
builds, sometimes the emulator for pico; sometimes with ``--timeout nan`` and friends or a
bad ``--input``) and ``report out``. Only ``out/`` may change.

**Hostile paths and flags** (:func:`path_cases`, a fixed list): ``-o`` an existing file, an
unwritable directory (skipped as root: permissions do not bind root), a directory of user
files, the current directory, a link to a directory elsewhere, a directory with a
``plan.json`` link to a file outside, a previous build whose ``plan.json`` or ``report/`` links
outside; names with spaces, newlines, escapes, 300 characters; MODEL a directory,
``/dev/null``, a FIFO, empty, missing, text, a graph; and out-of-range ``--time-limit``,
``--timeout``, ``--alignment``, ``--seed``, unknown targets, methods and planners.
"""

from __future__ import annotations

import functools
import json
import os
import random
import shutil
from pathlib import Path

from .mutants import cell_model_bytes
from .runner import Case, Runner, Step

COMPILE = ("--target", "host", "-o", "out", "--time-limit", "2")
MCU_TARGETS = ("host", "pico")


def available_targets() -> dict[str, str | None]:
    """target -> None when buildable here, else why not."""
    return {"host": None if shutil.which("cc") else "no native C compiler (cc)",
            "pico": None if shutil.which("arm-none-eabi-gcc") else "arm-none-eabi-gcc missing",
            "llvm": None}


def pristine_builds(runner: Runner, workdir: Path) -> dict[str, Path | str]:
    """Compile the cell for every available target once: target -> build directory, or the
    reason it is missing (its compile's outcome and first stderr line)."""
    root = workdir / "pristine"
    root.mkdir(parents=True, exist_ok=True)
    model = root / "cell.tflite"
    model.write_bytes(cell_model_bytes())
    builds: dict[str, Path | str] = {}
    for target, missing in available_targets().items():
        if missing:
            builds[target] = missing
            continue
        out = root / target
        if not out.is_dir():
            r = runner.run_step(Step(("compile", str(model), "--target", target, "-o", str(out),
                                      "--time-limit", "2"), timeout=600), root, root / target)
            if r.outcome != "ok":
                builds[target] = f"pristine {target} build: {r.outcome}: " + \
                    (r.stderr.strip().splitlines() or [""])[-1]
                continue
        builds[target] = out
    return builds


# ---------------------------------------------------------------------------- damages
def _json_edit(name, edit):
    def damage(rng, out: Path):
        path = out / name
        if not path.is_file():
            return None
        obj = json.loads(path.read_text())
        what = edit(rng, obj)
        if what is None:
            return None
        path.write_text(json.dumps(obj))
        return f"{name}: {what}"
    damage.__name__ = f"edit_{name}"
    return damage


def _write(name, contents):
    def damage(rng, out: Path):
        path = out / name
        if not path.exists():
            return None
        data = rng.choice(contents)
        _remove(path)
        path.write_bytes(data)
        return f"{name} = {data[:30]!r}"
    damage.__name__ = f"write_{name}"
    return damage


def _delete(name):
    def damage(rng, out: Path):
        path = out / name
        if not path.exists():
            return None
        _remove(path)
        return f"{name} deleted"
    damage.__name__ = f"delete_{name}"
    return damage


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


BAD = ["x", -1, None, [], {}, 2**64, 1e308, True, "", 0]


def _missing_key(rng, obj):
    key = rng.choice(sorted(obj))
    del obj[key]
    return f"field '{key}' removed"


def _wrong_type(rng, obj):
    key, value = rng.choice(sorted(obj)), rng.choice(BAD)
    obj[key] = value
    return f"{key} = {value!r}"


def _nested_field(rng, obj):
    options = [(k, f) for k in ("input", "output", "schedule", "fit")
               if isinstance(obj.get(k), dict) for f in obj[k]]
    if not options:
        return None
    key, f = rng.choice(options)
    obj[key][f] = rng.choice(BAD + [2**62, -2**62, "esp32"])
    return f"{key}.{f} = {obj[key][f]!r}"


def _order(rng, obj):
    order = obj.get("order")
    if not isinstance(order, list) or not order:
        return None
    kind = rng.randrange(4)
    if kind == 0:
        rng.shuffle(order)
    elif kind == 1:
        order.append(order[0])
    elif kind == 2:
        order[rng.randrange(len(order))] = "ghost"
    else:
        obj["order"] = []
    return f"order {['shuffled', 'with a duplicate', 'with an unknown node', 'empty'][kind]}"


def _offsets(rng, obj):
    offsets = obj.get("offsets")
    if not isinstance(offsets, dict) or not offsets:
        return None
    value = rng.choice([0, -8, 2**40, 3])
    for k in offsets:
        offsets[k] = value
    return f"every offset = {value}"


def _target(rng, obj):
    obj["target"] = rng.choice(["pico2", "esp32", "llvm", "", "../../x"])
    return f"target = {obj['target']!r}"


def _model_path(rng, obj):
    obj["model"] = rng.choice(["/nonexistent/m.tflite", "", "/dev/null", "."])
    return f"model = {obj['model']!r}"


def _flip_constant(name):
    def damage(rng, out: Path):
        path = out / name
        if not path.is_file():
            return None
        text = path.read_text()
        digits = [i for i in range(len(text) // 2, len(text)) if text[i] in "123456789"
                  and text[i - 1] in " ,{-"]
        if not digits:
            return None
        i = rng.choice(digits)
        path.write_text(text[:i] + ("2" if text[i] == "1" else "1") + text[i + 1:])
        return f"{name}: a constant edited at character {i}"
    damage.__name__ = f"flip_{name}"
    return damage


def _resize(name):
    def damage(rng, out: Path):
        path = out / name
        if not path.is_file():
            return None
        data = path.read_bytes()
        n = rng.choice([0, 1, len(data) // rng.choice([2, 4, 10, 50]), len(data) - 1,
                        len(data) + 1, 4 * len(data)])
        path.write_bytes((data * 5)[:n])
        return f"{name} resized from {len(data)} to {n} bytes"
    damage.__name__ = f"resize_{name}"
    return damage


def _dir_instead(name):
    def damage(rng, out: Path):
        path = out / name
        if not path.exists():
            return None
        _remove(path)
        path.mkdir()
        return f"{name} replaced by a directory"
    damage.__name__ = f"dir_{name}"
    return damage


def _link_outside(name):
    def damage(rng, out: Path):
        path = out / name
        if not path.exists():
            return None
        outside = out.parent / "outside" / name
        outside.parent.mkdir(exist_ok=True)
        if path.is_dir():
            outside.mkdir()
            (outside / "keep.txt").write_text("user data\n")
        else:
            outside.write_bytes(path.read_bytes())
        _remove(path)
        path.symlink_to(os.path.relpath(outside, path.parent))
        return f"{name} is a link to a copy outside the build"
    damage.__name__ = f"link_{name}"
    return damage


MARKER = ".tvm-serenity-build.json"
COMMON = [   # every build has a report and a marker
    _write("report", [b"not a folder"]), _link_outside("report"),
    _delete(MARKER), _write(MARKER, [b"{}", b"", b'{"tool": "tvm-serenity", "files": 1}']),
]
MCU = COMMON + [
    _json_edit("plan.json", _missing_key), _json_edit("plan.json", _wrong_type),
    _json_edit("plan.json", _nested_field), _json_edit("plan.json", _order),
    _json_edit("plan.json", _offsets), _json_edit("plan.json", _target),
    _json_edit("plan.json", _model_path), _write("plan.json", [b"{}", b"[]", b"null", b"", b"{"]),
    _link_outside("plan.json"), _write("graph.json", [b"{}", b"", b"[1]"]), _delete("graph.json"),
    _delete("input.bin"), _resize("input.bin"), _dir_instead("input.bin"),
    _flip_constant("model/model.c"), _flip_constant("project/model.c"),
    _delete("model/model.c"), _delete("model/model.h"), _write("model/model.c", [b"int x = ;"]),
    _delete("project"), _write("project/Makefile", [b"all:\n\tfalse\n", b""]),
    _write("project/serenity_project.json", [b"{}", b"[]"]),
    _json_edit("project/serenity_project.json", _wrong_type),
    _flip_constant("project/input.c"),
]
LLVM = COMMON + [
    _resize("model.so"), _resize("model.so"), _write("model.so", [b"", b"\x7fELF" + b"\0" * 60]),
    _delete("model.so"), _write("relax.json", [b"{}", b"[]", b""]), _link_outside("relax.json"),
    _json_edit("relax.json", _missing_key), _json_edit("relax.json", _wrong_type),
    _delete("input.npz"), _resize("input.npz"), _write("input.npz", [b"PK\x03\x04", b""]),
]
RUN_FLAGS = [("--timeout", "nan"), ("--timeout", "-1"), ("--timeout", "0"), ("--timeout", "inf"),
             ("--timeout", "1e-9"), ("--input", "missing.bin"), ("--input", "tiny.bin"),
             ("--input", "/dev/null"), ("--input", "."), ("--no-check",)]


def forge_marker(out: Path) -> bool:
    """Re-record the hashes of a build marker after a damage (like a tool that rebuilt the
    marker but not the contents). False when there is no marker to forge."""
    from .runner import sha256_file
    path = out / MARKER
    try:
        marker = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(marker, dict) or not isinstance(marker.get("files"), dict):
        return False
    derived = tuple(marker.get("derived", ()))
    files = {}
    for p in sorted(out.rglob("*")):
        rel = p.relative_to(out).as_posix()
        if p.is_file() and not p.is_symlink() and rel != MARKER and \
                not any(rel == d or rel.startswith(d + "/") for d in derived):
            files[rel] = sha256_file(str(p))
    marker["files"] = files
    path.write_text(json.dumps(marker, indent=1) + "\n")
    return True


def build_cases(seed: int, count: int, builds: dict[str, Path | str]) -> list[Case]:
    """``count`` damaged-build cases over the available pristine builds."""
    targets = [t for t, b in builds.items() if isinstance(b, Path)]
    cases = []
    for i in range(count):
        rng = random.Random(f"{seed}/builds/{i}")
        cid = f"builds-{i:04d}"
        if not targets:
            cases.append(Case("builds", cid, "damaged build", [], skip="; ".join(
                str(b) for b in builds.values())))
            continue
        target = rng.choice(targets)
        damage = rng.choice(LLVM if target == "llvm" else MCU)
        flags = rng.choice(RUN_FLAGS) if rng.random() < 0.25 else ()
        forge = rng.random() < 0.5
        run = ("run", "out") if target == "llvm" else \
            ("run", "out") if target == "pico" and rng.random() < 0.15 else \
            ("run", "out", "--host")
        cases.append(Case(
            "builds", cid, f"{target} build: (not damaged yet)",
            [Step(run + flags, always=True, timeout=240),
             Step(("report", "out"), always=True, timeout=120)],
            setup=functools.partial(_damage, build=builds[target], target=target,
                                    damage=damage, forge=forge, flags=flags,
                                    rng_state=rng.getstate())))
    return cases


def _damage(case: Case, sandbox: Path, build: Path, target: str, damage, forge: bool,
            flags: tuple, rng_state) -> None:
    rng = random.Random()
    rng.setstate(rng_state)
    out = sandbox / "out"
    shutil.copytree(build, out, symlinks=True)
    (sandbox / "tiny.bin").write_bytes(b"\x01\x02")
    what = damage(rng, out) or "undamaged (the damage does not apply)"
    forged = forge and forge_marker(out)
    case.description = f"{target} build: {what}" + ("; marker re-hashed" if forged else "") + \
        (f"; run {' '.join(flags)}" if flags else "")


# ------------------------------------------------------------------------- paths, flags
def _files(**files):
    """A setup writing ``files`` (name -> bytes, "DIR" for a directory, "FIFO", ("LINK",
    target), "CELL" for the fuzz cell model)."""
    def setup(case: Case, sandbox: Path) -> None:
        for name, what in files.items():
            path = sandbox / name.replace("__", "/")
            path.parent.mkdir(parents=True, exist_ok=True)
            if what == "DIR":
                path.mkdir(exist_ok=True)
            elif what == "FIFO":
                os.mkfifo(path)
            elif isinstance(what, tuple):
                path.symlink_to(what[1])
            else:
                path.write_bytes(cell_model_bytes() if what == "CELL" else what)
    return setup


def _chained(*setups):
    def setup(case: Case, sandbox: Path) -> None:
        for s in setups:
            s(case, sandbox)
    return setup


def _chmod(name: str, mode: int):
    def setup(case: Case, sandbox: Path) -> None:
        os.chmod(sandbox / name, mode)
    return setup


def _copy_build(build: Path | str, damage=None):
    def setup(case: Case, sandbox: Path) -> None:
        if not isinstance(build, Path):
            raise RuntimeError(build)
        shutil.copytree(build, sandbox / "out", symlinks=True)
        if damage is not None:
            damage(random.Random(0), sandbox / "out")
    return setup


def path_cases(count: int, builds: dict[str, Path | str]) -> list[Case]:
    """The first ``count`` of the fixed list of hostile path and flag cases."""
    root = os.geteuid() == 0
    cell = _files(**{"cell.tflite": "CELL"})
    user = {"mydir__notes.txt": b"my notes\n", "mydir__sub__data.bin": b"\x00\x01"}
    host = builds.get("host")

    def compile_to(out, model="cell.tflite", *extra):
        return Step(("compile", model, "--target", "host", "-o", out, "--time-limit", "2",
                     *extra), timeout=180)

    def case(desc, steps, setup=cell, **kw):
        return (desc, steps if isinstance(steps, list) else [steps], setup, kw)

    specs = [
        case("-o an existing file", compile_to("user.txt"),
             _files(**{"cell.tflite": "CELL", "user.txt": b"keep me\n"}),
             output=None, must_refuse=True),
        case("-o a directory of user files", compile_to("mydir"),
             _files(**{"cell.tflite": "CELL"}, **user), output=None, must_refuse=True),
        case("-o the current directory (holds the model)", compile_to("."), output=None,
             must_refuse=True),
        case("-o an unwritable directory's child", compile_to("ro/out"),
             _chained(_files(**{"cell.tflite": "CELL", "ro": "DIR"}), _chmod("ro", 0o500)),
             output=None, skip="running as root: permissions do not bind root" if root else None),
        case("-o an unwritable existing empty directory", compile_to("ro"),
             _chained(_files(**{"cell.tflite": "CELL", "ro": "DIR"}), _chmod("ro", 0o500)),
             output=None, skip="running as root: permissions do not bind root" if root else None),
        case("-o a link to a directory elsewhere", compile_to("out"),
             _files(**{"cell.tflite": "CELL", "elsewhere": "DIR", "out": ("LINK", "elsewhere")}),
             output=None),
        case("-o a directory holding plan.json -> ../outside.json", compile_to("linkdir"),
             _files(**{"cell.tflite": "CELL", "outside.json": b'{"mine": 1}\n',
                       "linkdir__plan.json": ("LINK", "../outside.json")}), output="linkdir"),
        case("recompile over a build whose plan.json links outside", compile_to("out"),
             _chained(cell, _copy_build(host, _link_outside("plan.json")))),
        case("recompile over a build whose report/ links outside",
             [compile_to("out"), Step(("report", "out"), always=True)],
             _chained(cell, _copy_build(host, _link_outside("report")))),
        case("report on a build whose report/ links outside", Step(("report", "out")),
             _chained(cell, _copy_build(host, _link_outside("report")))),
        case("recompile over an intact build of ours", compile_to("out"),
             _chained(cell, _copy_build(host))),
        case("report on a directory of user files", Step(("report", "mydir")),
             _files(**user), output=None),
        case("run on a directory of user files", Step(("run", "mydir", "--host")),
             _files(**user), output=None),
        case("model and output names with spaces",
             [compile_to("out dir", "my model.tflite"), Step(("run", "out dir", "--host"))],
             _files(**{"my model.tflite": "CELL"}), output="out dir"),
        case("model and output names with newlines",
             [compile_to("out\nnl", "new\nline.tflite")],
             _files(**{"new\nline.tflite": "CELL"}), output="out\nnl"),
        case("a missing model whose name has a newline and an ANSI escape",
             compile_to("out", "no\n\x1b[31mpe.tflite")),
        case("output name of 300 characters", compile_to("o" * 300)),
        case("MODEL is a directory", compile_to("out", "modeldir"), _files(modeldir="DIR")),
        case("MODEL is /dev/null", compile_to("out", "/dev/null")),
        case("MODEL is a FIFO", compile_to("out", "fifo.tflite"),
             _files(**{"fifo.tflite": "FIFO"})),
        case("MODEL is empty", compile_to("out", "empty.tflite"),
             _files(**{"empty.tflite": b""})),
        case("MODEL is missing", compile_to("out", "missing.tflite")),
        case("MODEL is text", compile_to("out", "text.tflite"),
             _files(**{"text.tflite": b"hello\n" * 100})),
        case("MODEL is a graph JSON", compile_to("out", "g.json"),
             _files(**{"g.json": b'{"nodes": [], "outputs": []}'})),
        case("MODEL is .onnx", compile_to("out", "m.onnx"), _files(**{"m.onnx": b"\x08\x07"})),
        case("schedule a directory", Step(("schedule", "modeldir")), _files(modeldir="DIR")),
        case("schedule /dev/null", Step(("schedule", "/dev/null"))),
        case("schedule a FIFO", Step(("schedule", "fifo.json"), timeout=30),
             _files(**{"fifo.json": "FIFO"})),
        case("schedule a .tflite", Step(("schedule", "cell.tflite"))),
        case("schedule --save-graph into a missing directory",
             Step(("schedule", "g.json", "--save-graph", "nodir/x.json")), _graph_file()),
        case("schedule --save-graph onto a directory",
             Step(("schedule", "g.json", "--save-graph", "mydir")),
             _chained(_graph_file(), _files(**user)), output=None),
        case("run a missing directory", Step(("run", "nowhere", "--host"))),
        case("run a file", Step(("run", "cell.tflite", "--host")), output=None),
        case("report a missing directory", Step(("report", "nowhere"))),
        case("demo -o an existing file", Step(("demo", "--no-emulate", "-o", "user.txt")),
             _files(**{"user.txt": b"keep\n"}), output=None, must_refuse=True),
        case("no arguments", Step(())),
        case("unknown command", Step(("frobnicate",))),
        case("compile without a model", Step(("compile",))),
        case("unknown option", Step(("schedule", "g.json", "--frob")), _graph_file()),
    ]
    for value in ("-1", "nan", "inf", "-inf", "0", "1e308", "abc"):
        specs.append(case(f"compile --time-limit {value}",
                          Step(("compile", "cell.tflite", "--target", "host", "-o", "out",
                                "--time-limit", value), timeout=120)))
        specs.append(case(f"schedule --time-limit {value}",
                          Step(("schedule", "g.json", "--time-limit", value), timeout=60),
                          _graph_file()))
    for flag, value in (("--target", "esp32"), ("--target", ""), ("--schedule", "bogus"),
                        ("--planner", "bogus")):
        specs.append(case(f"compile {flag} {value!r}", compile_to("out", "cell.tflite",
                                                                  flag, value)))
    for flag, value in (("--alignment", "0"), ("--alignment", "-8"), ("--alignment", "3"),
                        ("--alignment", str(2**40)), ("--seed", "-1"), ("--seed", str(2**70)),
                        ("--method", "bogus"), ("--planner", "bogus")):
        specs.append(case(f"schedule {flag} {value}",
                          Step(("schedule", "g.json", "--time-limit", "2", flag, value)),
                          _graph_file()))
    for flags in RUN_FLAGS[:6]:
        specs.append(case(f"run an intact host build with {' '.join(flags)}",
                          Step(("run", "out", "--host", *flags), timeout=120),
                          _chained(cell, _copy_build(host))))
    cases = []
    for i, (desc, steps, setup, kw) in enumerate(specs[:count]):
        cases.append(Case("paths", f"paths-{i:04d}", desc, steps, setup=setup, **kw))
    return cases


def _graph_file():
    from .graphs import _chain
    return _files(**{"g.json": json.dumps(_chain(5)).encode(), "cell.tflite": "CELL"})

