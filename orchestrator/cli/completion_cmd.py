"""`gpuctl completion bash|zsh|tcsh`: a shell completion script generated from the parser (shtab).

    gpuctl completion bash > ~/.local/share/bash-completion/completions/gpuctl
    gpuctl completion zsh > "${fpath[1]}/_gpuctl"

The script is static: it lists the commands and flags of this version, so regenerate it after an upgrade.
"""

from __future__ import annotations

import argparse
from typing import Any

SHELLS = ("bash", "zsh", "tcsh")


def register(sub: Any) -> None:
    p = sub.add_parser("completion", help="print a shell completion script (bash, zsh or tcsh)")
    p.add_argument("shell", choices=SHELLS, help="the shell to complete for")
    p.set_defaults(run=run_completion)


def completion_script(shell: str) -> str:
    import shtab

    from orchestrator.cli.main import build_parser  # the whole parser, this command included

    script: str = shtab.complete(build_parser(), shell=shell)
    return script


def run_completion(args: argparse.Namespace) -> int:
    print(completion_script(args.shell))
    return 0
