"""README.md read the way test_readme.py needs it: its fenced code blocks, the commands of a
shell block, and the few promises its prose makes in a checkable form.

* :func:`code_blocks`: every fenced block (a line of three backticks, optionally followed by
  the language, up to the next bare fence) with its language and the line of its opening fence.
* :func:`commands`: the commands of one block, one per line, the trailing comment removed the
  way bash reads it (a ``#`` that starts a word), the command text itself untouched.
* :func:`bullet`: the text of the README's list item that starts with a given prefix.
* :func:`table_rows`: a plain-text table (columns separated by two or more spaces) as rows.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"

_FENCE = re.compile(r"^```(\S*)\s*$")
_COMMENT = re.compile(r"(?:^|\s)#.*$")


@dataclass(frozen=True)
class Block:
    lang: str          # "" for a block without a language
    line: int          # 1-based line of the opening fence in README.md
    text: str


def code_blocks(text: str) -> list[Block]:
    found, lang, start, body = [], None, 0, []
    for number, line in enumerate(text.splitlines(), 1):
        if lang is None:
            fence = _FENCE.match(line)
            if fence:
                lang, start, body = fence.group(1), number, []
        elif line.rstrip() == "```":
            found.append(Block(lang, start, "\n".join(body) + "\n"))
            lang = None
        else:
            body.append(line)
    if lang is not None:
        raise ValueError(f"README.md:{start}: code block never closed")
    return found


def commands(block: Block) -> list[str]:
    stripped = (_COMMENT.sub("", line).strip() for line in block.text.splitlines())
    return [line for line in stripped if line]


def bullet(text: str, prefix: str) -> str:
    """The list item starting with ``* {prefix}``, up to the next item or blank line."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(f"* {prefix}")), None)
    if start is None:
        raise ValueError(f"README.md has no list item starting with '* {prefix}'")
    item = [lines[start]]
    for line in lines[start + 1:]:
        if not line.strip() or line.startswith("* "):
            break
        item.append(line)
    return " ".join(part.strip() for part in item)


def table_rows(text: str) -> list[list[str]]:
    return [re.split(r"\s{2,}", line.strip()) for line in text.splitlines() if line.strip()]
