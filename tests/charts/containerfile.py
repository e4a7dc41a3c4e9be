"""A small reader of the repository's Containerfile: its stages and their instructions."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CONTAINERFILE = REPO / "Containerfile"
CONTAINERIGNORE = REPO / ".containerignore"


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)
    """(KEYWORD, arguments) after FROM, continuation lines joined."""

    def args_of(self, keyword: str) -> list[str]:
        return [args for kw, args in self.instructions if kw == keyword]


def instructions(text: str) -> list[tuple[str, str]]:
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    result = []
    for line in joined.splitlines():
        if line.strip():
            keyword, _, args = line.strip().partition(" ")
            result.append((keyword.upper(), " ".join(args.split())))
    return result


def stages(text: str) -> tuple[dict[str, str], list[Stage]]:
    """Global ARG defaults (before the first FROM) and the stages in order."""
    global_args: dict[str, str] = {}
    found: list[Stage] = []
    for keyword, args in instructions(text):
        if keyword == "FROM":
            base, _, name = args.partition(" AS ")
            found.append(Stage(base.strip(), name.strip() or None))
        elif not found:
            assert keyword == "ARG", f"only ARG may come before the first FROM, not {keyword}"
            key, _, default = args.partition("=")
            global_args[key] = default
        else:
            found[-1].instructions.append((keyword, args))
    return global_args, found


def ignore_patterns() -> list[str]:
    text = CONTAINERIGNORE.read_text()
    return [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]
