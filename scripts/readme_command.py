"""Print one of the README's numbered set-up commands, so CI runs exactly what a new user reads.

The README opens with a ```bash block whose commands are introduced by ``# 1. ...``, ``# 2. ...``::

    python scripts/readme_command.py 1    # install and run the quickstart
    python scripts/readme_command.py 2    # the test command

Exits 1 with a message when the README no longer has that numbered command.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def numbered_commands(text: str) -> dict[int, str]:
    """``{N: command}`` from the first ```bash block: the line after each ``# N.`` comment."""
    block = re.search(r"^```bash\n(.*?)^```", text, re.S | re.M)
    if block is None:
        return {}
    commands: dict[int, str] = {}
    number: int | None = None
    for line in block.group(1).splitlines():
        heading = re.match(r"#\s*(\d+)\.", line.strip())
        if heading:
            number = int(heading.group(1))
        elif line.strip() and number is not None:
            commands[number] = line.strip()
            number = None
    return commands


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not argv[0].isdigit():
        print("usage: readme_command.py N", file=sys.stderr)
        return 2
    commands = numbered_commands(README.read_text(encoding="utf-8"))
    command = commands.get(int(argv[0]))
    if command is None:
        print(f"{README}: no command numbered {argv[0]} in the first ```bash block", file=sys.stderr)
        return 1
    print(command)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
