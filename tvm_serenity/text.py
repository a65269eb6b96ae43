"""Wording shared by every message: counted nouns and one-line rendering of names."""

from __future__ import annotations

__all__ = ["counted", "one_line"]


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and ``noun``, in the plural unless ``n`` is 1: ``counted(1, "input")`` is
    ``"1 input"``, ``counted(3, "input")`` is ``"3 inputs"``; thousands are separated."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


def one_line(message: str) -> str:
    """``message`` as one printable line: control characters (newlines, ANSI escapes) and
    unpaired surrogates from names in the input are shown escaped, not obeyed."""
    message = message.encode("utf-8", "backslashreplace").decode("utf-8")
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in message)
