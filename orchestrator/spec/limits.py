"""Bounds on every value of a job spec, and the string types that refuse control characters.

A job file is input from anyone who can submit, so every number is finite and bounded (generously:
the bounds are far beyond real jobs, but small enough that nothing downstream overflows or builds a
billion of anything), and every string is free of characters that cannot reach a process, a file
name, a shell script or a Kubernetes object intact (NUL, escape codes, lone surrogates).
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, Field
from pydantic_core import PydanticCustomError

MAX_NODES = 4096
MAX_GPUS_PER_NODE = 16
MAX_CPUS_PER_NODE = 4096
MAX_MEMORY_GIB_PER_NODE = 65536  # 64 TiB
MAX_USD = 1e9
MAX_COMPUTE_HOURS = 1e6
MAX_STEPS = 10**12
MAX_KEEP = 1000
MAX_COUNT = 1_000_000
"""Restarts, preemptions: a bound, not a goal."""
MAX_GLOBAL_BATCH = 10**9
MAX_NOTICE_GRACE_SECONDS = 3600.0
MAX_DURATION_SECONDS = 10 * 365 * 86400
"""Durations (``deadline``, ``changeover``, ``checkpoint.every``) and deadlines: at most 10 years."""
MAX_LIST_ITEMS = 256
MAX_NOTIFY_TARGETS = 16
"""Webhooks and email targets of one job (``notify:``) or one team (config.yaml)."""
MAX_EMAIL_RECIPIENTS = 32
MAX_URL_CHARS = 2048
MAX_LINE_CHARS = 4096
"""A name, path, zone or label value: PATH_MAX is 4096."""
MAX_TEXT_CHARS = 32768
"""A command, setup script or environment value: Linux passes at most 128 KiB per string to a process."""

_LINE_FORBIDDEN = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
_TEXT_FORBIDDEN = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")  # tab, LF, CR allowed


def _refuse(pattern: re.Pattern[str], value: str, allowed: str) -> str:
    found = pattern.search(value)
    if found is not None:
        raise PydanticCustomError(
            "control_character",
            "contains the control character {char} at position {position}{allowed}",
            {"char": f"U+{ord(found.group()):04X}", "position": found.start(), "allowed": allowed},
        )
    return value


def _single_line(value: str) -> str:
    return _refuse(_LINE_FORBIDDEN, value, "")


def _multi_line(value: str) -> str:
    return _refuse(_TEXT_FORBIDDEN, value, " (only tab and newline may appear here)")


Line = Annotated[str, Field(max_length=MAX_LINE_CHARS), AfterValidator(_single_line)]
"""One line of printable text: names, paths, zones, durations, label keys and values."""
Text = Annotated[str, Field(max_length=MAX_TEXT_CHARS), AfterValidator(_multi_line)]
"""Text that may span lines: the command, setup, environment values."""

_SHOWN = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def shown(value: object, limit: int = 40) -> str:
    """``value`` quoted for an error message: at most ``limit`` characters, control characters escaped."""
    text = str(value)
    cut = text[:limit] + ("..." if len(text) > limit else "")
    return "'" + _SHOWN.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 256
                            else f"\\u{ord(m.group()):04x}", cut) + "'"  # fmt: skip
