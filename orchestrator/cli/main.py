"""`gpuctl` entry point: builds the argument parser from the command modules and maps errors.

Each command module has ``register(subparsers)``, adding its commands with ``set_defaults(run=...)``
where ``run(args) -> int`` returns the exit code. Add a new command group by listing its module in
:data:`COMMAND_MODULES`.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from orchestrator import __version__
from orchestrator.errors import GpuctlError
from orchestrator.terminal import terminal_text

COMMAND_MODULES = [
    "orchestrator.cli.spec_cmd",
    "orchestrator.cli.jobs_cmd",
    "orchestrator.cli.monitor_cmd",
    "orchestrator.cli.cost_cmd",
    "orchestrator.cli.catalog_cmd",
    "orchestrator.cli.simulate_cmd",
    "orchestrator.cli.slurm_cmd",
    "orchestrator.cli.completion_cmd",
    "orchestrator.cli.db_cmd",
    "orchestrator.dashboard.command",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpuctl",
        description="Run GPU training jobs cheaply and reliably: spot-aware, preemption-safe, cost-tracked.",
    )
    parser.add_argument("--version", action="version", version=f"gpuctl {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    run = getattr(args, "run", None)
    if run is None:
        parser.print_help()
        return 2
    try:
        code: int = run(args)
        return code
    except GpuctlError as err:
        print(terminal_text(f"gpuctl: error: {err.message}", multiline=True), file=sys.stderr)
        return err.exit_code
    except BrokenPipeError:  # `gpuctl ... | head`: the reader left; not an error of ours
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print("gpuctl: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
