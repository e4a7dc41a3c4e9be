"""Every option, argument and command of every `gpuctl` subcommand says what it is for in --help
(issue 32, item 8: `submit --help` listed a flag without a word)."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

from orchestrator.cli.main import build_parser


def _parsers(parser: argparse.ArgumentParser, path: str) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, f"{path} {name}")


def test_every_action_of_every_command_has_help() -> None:
    missing = []
    for path, parser in _parsers(build_parser(), "gpuctl"):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                helped = {a.dest for a in action._choices_actions if a.help}
                missing += [f"{path} {name} (command)" for name in action.choices if name not in helped]
            elif action.help is None or not str(action.help).strip():  # SUPPRESS: hidden on purpose
                missing.append(f"{path} {'/'.join(action.option_strings) or action.dest}")
    assert not missing, "no help text: " + ", ".join(missing)
