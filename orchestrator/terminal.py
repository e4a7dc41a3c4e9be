"""Text that is safe to write to a terminal. Stored data (job names, teams, users, messages, events,
log lines, report rows) is written by job authors and other users: shown as it is, an escape sequence
in it could move the cursor, rewrite the screen, open a hyperlink or reorder the text around it.
Every terminal output of gpuctl (the CLI's tables and lines, the cost report's table and CSV) goes
through :func:`terminal_text`. JSON output needs nothing: ``json.dumps`` escapes controls itself."""

from __future__ import annotations

import unicodedata

UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
"""Characters never written to a terminal as they are: controls (C0, DEL, C1: ESC starts escape
sequences, 0x9b is CSI, BEL rings), format characters (bidi overrides such as U+202E reorder what
follows; zero-width ones hide text), lone surrogates and line/paragraph separators."""


def terminal_text(value: object, *, multiline: bool = False) -> str:
    """``value`` as text safe to write to a terminal: each character of :data:`UNSAFE_CATEGORIES` is
    shown as its escape (ESC as ``\\x1b``, U+202E as ``\\u202e``), so stored data (names, teams,
    messages, events, log lines) can neither move the cursor, rewrite the screen, open a hyperlink
    nor reorder the text around it. ``multiline``: newline and tab are kept (for lines of a log)."""
    text = str(value)
    if text.isprintable():  # the common case, checked in C: nothing to escape
        return text
    text = text.translate(_LOG_CONTROLS if multiline else _CONTROLS)  # C0 and C1, also in C
    rest = text.replace("\n", "").replace("\t", "") if multiline else text
    if rest.isprintable():
        return text
    return "".join(_safe_char(c) for c in text)


_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0))}
_LOG_CONTROLS = {c: e for c, e in _CONTROLS.items() if chr(c) not in "\n\t"}


def _safe_char(char: str) -> str:
    if char in "\n\t" or unicodedata.category(char) not in UNSAFE_CATEGORIES:
        return char
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
