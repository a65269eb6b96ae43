"""Build directories that are atomic, owned and checked: nothing of the user's is overwritten,
nothing stale survives a rebuild, and nothing edited after a build is run or reported as ours.

Contract (every command that writes a build goes through :func:`new_build`):

* **Where a build may go.** ``OUT`` must be absent, an empty directory, or a directory an
  earlier build marked as ours (:data:`MARKER_FILE`: tool version, kind, and the SHA-256 of
  every file it wrote). Anything else -- a file, a symbolic link, a directory of other files --
  is refused with one line and left untouched. A build of ours whose files were edited, deleted
  or joined by others is refused too, unless ``force=True`` (``--force``), which replaces it.
* **Atomic.** The build is written into a fresh hidden sibling ``.OUT.tmp-*`` and renamed
  into place once complete (the old build is moved aside first, then deleted without following
  any link in it). A failed build leaves ``OUT`` exactly as it was. No path of the user's is
  written through: the new tree is ours from its first byte, so a symlinked ``plan.json`` in
  the old one is removed, never followed.
* **Checked.** :func:`verify_build` re-hashes every file the marker lists (and refuses symbolic
  links anywhere in the tree) before ``run`` or ``report`` reads it; after they rewrite part of
  a build (a new input, the report), :func:`refresh_marker` records the new hashes.

Paths are made absolute once, here at the edge (:func:`absolute`), and stay absolute inside.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from . import __version__
from .errors import SerenityError

__all__ = ["MARKER_FILE", "BuildError", "absolute", "new_build", "verify_build",
           "refresh_marker", "build_kind", "marker_of", "sha256_of", "checked_model",
           "write_bytes", "write_text"]

MARKER_FILE = ".tvm-serenity-build.json"
TOOL = "tvm-serenity"


class BuildError(SerenityError):
    """An output directory cannot be written, or a build directory is not intact."""


def marker_of(out_dir: str | os.PathLike) -> dict | None:
    """The marker of the build in ``out_dir`` (None when there is no valid one)."""
    return _read_marker(absolute(out_dir))


def absolute(path: str | os.PathLike) -> Path:
    """``path`` made absolute against the current directory (symbolic links kept, so the
    last component can still be checked for being one)."""
    return Path(os.path.abspath(os.fspath(path)))


def sha256_of(path: str | os.PathLike) -> str:
    """The SHA-256 of a file's bytes (hex)."""
    return _sha256(Path(path))


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _tree(root: Path, derived=()) -> tuple[dict[str, Path], list[str]]:
    """The regular files under ``root`` by relative POSIX path, and every symbolic link or
    special file (relative paths), without following links; the ``derived`` folders
    (relative paths) are left out."""
    files, odd = {}, []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        base = Path(dirpath)
        for name in list(dirnames):
            rel = (base / name).relative_to(root).as_posix()
            if rel in derived:
                dirnames.remove(name)
            elif (base / name).is_symlink():
                odd.append(rel)
                dirnames.remove(name)
        for name in filenames:
            p = base / name
            rel = p.relative_to(root).as_posix()
            if p.is_symlink() or not p.is_file():
                odd.append(rel)
            elif rel != MARKER_FILE:
                files[rel] = p
    return files, odd


def _read_marker(out: Path) -> dict | None:
    """The marker of ``out`` (None if there is none or it is not ours)."""
    path = out / MARKER_FILE
    if path.is_symlink() or not path.is_file():
        return None
    try:
        marker = json.loads(path.read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    if not (isinstance(marker, dict) and marker.get("tool") == TOOL
            and isinstance(marker.get("files"), dict)
            and all(isinstance(k, str) and isinstance(v, str)
                    for k, v in marker["files"].items())):
        return None
    return marker


def _changes(out: Path, marker: dict) -> list[str]:
    """What differs in ``out`` from its marker: one short phrase per file."""
    files, odd = _tree(out, marker.get("derived", ()))
    changes = [f"'{rel}' is a symbolic link or special file" for rel in odd]
    for rel, digest in marker["files"].items():
        path = files.get(rel)
        if path is None:
            if rel not in odd:
                changes.append(f"'{rel}' is missing")
        elif _sha256(path) != digest:
            changes.append(f"'{rel}' was changed")
    return changes


def build_kind(out_dir: str | os.PathLike) -> str | None:
    """The kind recorded by the build in ``out_dir`` (``"mcu"``, ``"llvm"``, ``"demo"``), or
    None when it holds no build of ours."""
    marker = marker_of(out_dir)
    return None if marker is None else marker.get("kind")


def verify_build(out_dir: str | os.PathLike, kinds: tuple[str, ...] | None = None) -> dict:
    """Check that ``out_dir`` holds an intact build of ours (of one of ``kinds``) and return
    its marker; raise :class:`BuildError` naming the first changed, missing or linked file."""
    try:
        return _verify(out_dir, kinds)
    except OSError as e:
        raise BuildError(f"cannot read build '{out_dir}': {e.strerror or e}") from None


def _verify(out_dir, kinds) -> dict:
    out = absolute(out_dir)
    if out.is_symlink() or not out.is_dir():
        what = "does not exist" if not os.path.lexists(out) else "is not a directory"
        raise BuildError(f"'{out_dir}' {what}: not a build directory (create one with "
                         "`tvm-serenity compile MODEL -o DIR`)")
    marker = _read_marker(out)
    if marker is None:
        raise BuildError(f"'{out_dir}' is not a tvm-serenity build (no valid {MARKER_FILE}); "
                         "create one with `tvm-serenity compile MODEL -o DIR`")
    if marker.get("version") != __version__:
        raise BuildError(f"'{out_dir}' was built by tvm-serenity {marker.get('version')}, this "
                         f"is {__version__}: compile it again")
    if kinds is not None and marker.get("kind") not in kinds:
        raise BuildError(f"'{out_dir}' is a {marker.get('kind')} build, not "
                         f"{' or '.join(kinds)}")
    changes = _changes(out, marker)
    if changes:
        more = f" (and {len(changes) - 1} more)" if len(changes) > 1 else ""
        raise BuildError(f"build '{out_dir}' was modified after it was written: "
                         f"{changes[0]}{more}; compile it again (tvm-serenity compile ... "
                         "--force replaces it)")
    return marker


def checked_model(out_dir: str | os.PathLike) -> Path:
    """The ``.tflite`` a build was compiled from, refused when it changed since (the
    reference output would not be the build's)."""
    marker = marker_of(out_dir) or {}
    model = Path(marker.get("model", ""))
    if not model.is_file() or sha256_of(model) != marker.get("model_sha256"):
        raise BuildError(f"the model '{model}' that '{out_dir}' was compiled from is gone or "
                         "changed since: its output cannot be checked (compile again, or run "
                         "with --no-check)")
    return model


def _write_marker(out: Path, kind: str, derived: tuple[str, ...], extra: dict) -> None:
    files, odd = _tree(out, derived)
    if odd:
        raise BuildError(f"build '{out}' holds a symbolic link or special file: '{odd[0]}'")
    marker = {"tool": TOOL, "version": __version__, "kind": kind, **extra,
              "derived": list(derived),
              "files": {rel: _sha256(p) for rel, p in sorted(files.items())}}
    write_text(out / MARKER_FILE, json.dumps(marker, indent=1) + "\n")


def refresh_marker(out_dir: str | os.PathLike) -> None:
    """Record the current files of a verified build of ours (after ``run`` or ``report``
    rewrote some of them)."""
    out = absolute(out_dir)
    marker = _read_marker(out)
    if marker is None:
        raise BuildError(f"'{out_dir}' is not a tvm-serenity build (no valid {MARKER_FILE})")
    extra = {k: v for k, v in marker.items()
             if k not in ("tool", "version", "kind", "derived", "files")}
    _write_marker(out, marker["kind"], tuple(marker.get("derived", ())), extra)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _check_destination(out: Path, shown: str, force: bool) -> bool:
    """Whether ``out`` exists (and may be replaced); raise if it must not be touched."""
    if out.is_symlink():
        raise BuildError(f"output '{shown}' is a symbolic link; give a real directory")
    if not os.path.lexists(out):
        return False
    if not out.is_dir():
        raise BuildError(f"output '{shown}' exists and is not a directory")
    if not any(out.iterdir()):
        return True
    marker = _read_marker(out)
    if marker is None:
        raise BuildError(f"output directory '{shown}' is not empty and holds no tvm-serenity "
                         "build: refusing to overwrite it (choose a new or empty directory)")
    if not force:
        changes = _changes(out, marker)
        if changes:
            raise BuildError(f"output directory '{shown}' holds a tvm-serenity build that was "
                             f"modified since ({changes[0]}); --force replaces it")
    return True


@contextmanager
def new_build(out_dir: str | os.PathLike, kind: str, *, force: bool = False,
              derived: tuple[str, ...] = (), extra: dict | None = None) -> Iterator[Path]:
    """Yield a fresh empty directory to write a build of ``kind`` into; on success it becomes
    ``out_dir`` (with its marker), on any error ``out_dir`` is left as it was.
    ``derived``: folders (relative paths) that are regenerated from the rest (object files,
    the report): neither hashed nor checked. ``extra``: a dict of JSON values recorded in the
    marker (the caller may fill it in while the build is written)."""
    out = absolute(out_dir)
    shown = os.fspath(out_dir)
    try:
        exists = _check_destination(out, shown, force)
    except OSError as e:        # a name too long, a folder that cannot be listed, ...
        raise BuildError(f"cannot use output directory '{shown}': {e.strerror or e}") from None
    parent = out.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=parent))
        tmp.chmod(0o777 & ~_umask())        # mkdtemp makes it private; a build is not
    except OSError as e:
        raise BuildError(f"cannot create output directory '{shown}': "
                         f"{e.strerror or e}") from None
    try:
        yield tmp
        _write_marker(tmp, kind, derived, extra if extra is not None else {})
        if exists:
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=parent))
            os.replace(out, old / "build")
            os.replace(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out)
    except OSError as e:
        raise BuildError(f"cannot write output directory '{shown}': {e.strerror or e}") from None
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _unlinked(path: Path) -> Path:
    """``path`` with whatever was there removed (a link is removed, never followed), its
    folder created."""
    if path.is_symlink() or path.is_file():
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to a new file at ``path`` (replacing a file or link, never writing
    through a link)."""
    _unlinked(Path(path)).write_bytes(data)


def write_text(path: str | os.PathLike, text: str) -> None:
    _unlinked(Path(path)).write_text(text)
