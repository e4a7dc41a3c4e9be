"""docs/cli.md, the command reference, generated from the argument parser (:func:`build_parser`).

    python -m orchestrator.cli.docs            # rewrite docs/cli.md
    python -m orchestrator.cli.docs --check    # exit 1 when docs/cli.md is out of date

Every command and subcommand, depth first in the parser's order, with its usage and help as
``gpuctl COMMAND --help`` prints them at a fixed width of :data:`COLUMNS` columns, so the file is the
same on every machine. Help strings must not interpolate the environment (``%(default)s`` of a
default read from ``$GPUCTL_NAMESPACE``, the home folder): the test of docs/cli.md would then depend
on where it runs. argparse's layout changes between Python versions; the file says which one wrote it.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from orchestrator.cli.main import build_parser

COLUMNS = 100
DEFAULT_OUTPUT = Path("docs") / "cli.md"
REGENERATE = "python -m orchestrator.cli.docs"


def python_version() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def header() -> str:
    return (
        "# gpuctl command reference\n\n"
        f"Generated from the argument parser by `{REGENERATE}` (Python {python_version()} argparse, "
        f"{COLUMNS} columns); do not edit by hand. `gpuctl COMMAND --help` prints the same.\n"
    )


def walk(parser: argparse.ArgumentParser) -> Iterator[tuple[argparse.ArgumentParser, str]]:
    """(parser, one-line help) of the parser and every subcommand below it, depth first."""
    yield from _walk(parser, parser.description or "")


def _walk(parser: argparse.ArgumentParser, summary: str) -> Iterator[tuple[argparse.ArgumentParser, str]]:
    yield parser, summary
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
        seen: set[int] = set()
        for name, child in action.choices.items():
            if id(child) in seen:  # an alias of a command already listed
                continue
            seen.add(id(child))
            yield from _walk(child, helps.get(name, ""))


@contextmanager
def fixed_width() -> Iterator[None]:
    """argparse wraps help at ``$COLUMNS`` (via shutil.get_terminal_size): pin it."""
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(COLUMNS)
    try:
        yield
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old


def render(parser: argparse.ArgumentParser | None = None) -> str:
    """The whole of docs/cli.md."""
    parser = parser or build_parser()
    parts = [header()]
    with fixed_width():
        for command, summary in walk(parser):
            parts.append(f"\n## {command.prog}\n")
            if summary and command is not parser:
                parts.append(f"\n{summary[0].upper()}{summary[1:]}.\n")
            parts.append(f"\n```text\n{command.format_help().rstrip()}\n```\n")
    return "".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    cli = argparse.ArgumentParser(prog="python -m orchestrator.cli.docs", description=__doc__.split("\n")[0])
    cli.add_argument(
        "--output", type=Path, default=DEFAULT_OUTPUT, help="file to write (default docs/cli.md)"
    )
    cli.add_argument("--check", action="store_true", help="only compare; exit 1 when the file differs")
    args = cli.parse_args(argv)
    text = render()
    current = args.output.read_text(encoding="utf-8") if args.output.exists() else None
    if args.check:
        if current != text:
            print(f"{args.output} is out of date: run `{REGENERATE}` to regenerate it", file=sys.stderr)
            return 1
        return 0
    if current != text:
        args.output.write_text(text, encoding="utf-8")
        print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
