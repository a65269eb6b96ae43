"""The JSON files tvm-serenity writes next to a build (``plan.json``, ``project.json``,
``relax.json``), read back with one clear error when a file is missing or corrupt."""

from __future__ import annotations

import json
import os
from pathlib import Path

from .errors import SerenityError

__all__ = ["read_json", "check_fields"]

_JSON_TYPES = {str: "string", bool: "boolean", int: "integer", float: "number", dict: "object",
               list: "array"}


def read_json(path: str | os.PathLike, missing: str) -> dict:
    """The JSON object in ``path``. Raises :class:`~tvm_serenity.errors.SerenityError` with
    ``missing`` (what the directory is not, and how to make one) when the file cannot be read,
    and naming the file and the position when it is not a JSON object."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError:
        raise SerenityError(missing) from None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise SerenityError(f"'{path}' is corrupt: {e.msg} at line {e.lineno}, column "
                            f"{e.colno}") from None
    if not isinstance(value, dict):
        raise SerenityError(f"'{path}' is corrupt: expected a JSON object, found "
                            f"{type(value).__name__}")
    return value


def check_fields(value: dict, fields: dict[str, type], path: str | os.PathLike) -> dict:
    """``value`` (read from ``path``) after checking that each key of ``fields`` holds a JSON
    value of its type; raises :class:`SerenityError` naming the file and the first bad field."""
    for key, kind in fields.items():
        v = value.get(key)
        if not isinstance(v, kind) or (kind is not bool and isinstance(v, bool)):
            raise SerenityError(f"'{path}' is corrupt: field '{key}' must be a JSON "
                                f"{_JSON_TYPES[kind]}, found {json.dumps(v)[:40]}")
    return value
