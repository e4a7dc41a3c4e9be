"""`gpuctl completion bash`: the generated script completes commands, flags and choices in real bash."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from orchestrator.cli.completion_cmd import completion_script
from orchestrator.cli.main import main


def complete_in_bash(script: str, *words: str) -> list[str]:
    """What bash offers for the last of ``words`` (``gpuctl`` first), using the script's function."""
    quoted = " ".join(f"'{w}'" for w in words)
    program = (
        f"{script}\nCOMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}; "
        'COMP_LINE="${COMP_WORDS[*]}"; COMP_POINT=${#COMP_LINE}; _shtab_gpuctl; printf "%s\\n" "${COMPREPLY[@]}"'
    )
    proc = subprocess.run(["bash", "-c", program], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_bash_completes_commands_flags_and_choices() -> None:
    script = completion_script("bash")
    assert complete_in_bash(script, "gpuctl", "sub") == ["submit"]
    assert "--output" in complete_in_bash(script, "gpuctl", "list", "--out")
    assert set(complete_in_bash(script, "gpuctl", "list", "-o", "")) >= {"table", "json"}


@pytest.mark.parametrize("shell", ["bash", "zsh", "tcsh"])
def test_every_shell_gets_a_script_naming_every_command(
    shell: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["completion", shell]) == 0
    out = capsys.readouterr().out
    for command in ("submit", "status", "simulate", "cost", "completion"):
        assert command in out
