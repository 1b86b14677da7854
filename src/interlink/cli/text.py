"""Text the subcommands print: notes wrapped to a width a terminal or a pasted log shows whole."""

from __future__ import annotations

import textwrap

#: the widest line a subcommand's notes take (tests/test_cli_usability.py checks the commands' widths)
WIDTH = 100


def note_lines(prefix: str, text: str, width: int = WIDTH) -> list[str]:
    """``prefix + text`` wrapped to ``width`` columns, the continuation lines indented under the text (a
    leading '#' of the prefix repeated, so that a commented block stays commented)."""
    indent = ("# " if prefix.startswith("#") else "") + " " * (len(prefix) - (2 if prefix.startswith("#") else 0))
    return textwrap.wrap(text, width=width, initial_indent=prefix, subsequent_indent=indent,
                         break_long_words=False, break_on_hyphens=False) or [prefix.rstrip()]


def note(prefix: str, text: str, width: int = WIDTH) -> str:
    """:func:`note_lines` joined by newlines."""
    return "\n".join(note_lines(prefix, text, width))
