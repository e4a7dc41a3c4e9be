"""Every input file a command reads, when it is a folder, a FIFO, not UTF-8 or under a file: one error
that names the file and the fix, exit code 2, never a traceback (nor a hang on a FIFO)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from orchestrator.cli.main import main


def _folder(tmp: Path) -> Path:
    (tmp / "input").mkdir()
    return tmp / "input"


def _fifo(tmp: Path) -> Path:
    os.mkfifo(tmp / "input")
    return tmp / "input"


def _not_utf8(tmp: Path) -> Path:
    (tmp / "input").write_bytes(b"name: caf\xe9\n")
    return tmp / "input"


def _under_a_file(tmp: Path) -> Path:
    (tmp / "file").write_text("x")
    return tmp / "file" / "input"


BAD_INPUTS: dict[str, tuple[Callable[[Path], Path], str]] = {
    "folder": (_folder, "is a folder, not a regular file"),
    "FIFO": (_fifo, "is a FIFO (named pipe), not a regular file"),
    "not UTF-8": (_not_utf8, "the file is not UTF-8 text (byte 0xe9 on line 1)"),
    "under a file": (_under_a_file, "part of the path is a file, not a folder"),
}

COMMANDS: dict[str, Callable[[str], list[str]]] = {
    "validate": lambda f: ["validate", f],
    "diagnose --summaries": lambda f: ["diagnose", "--summaries", f],
    "diagnose --progress": lambda f: ["diagnose", "--progress", f],
    "cost report --input": lambda f: ["cost", "report", "--input", f],
    "monitor --source replay": lambda f: ["monitor", "--source", "replay", f, "--once"],
    "sbatch --cluster-config": lambda f: ["sbatch", "job.yaml", "--dry-run", "--cluster-config", f],
    "config.yaml": lambda f: ["submit", "job.yaml", "--detach"],  # reads $GPUCTL_HOME/config.yaml first
    "simulate --trace": lambda f: [
        "simulate",
        "--trace",
        f,
        "--compute-hours",
        "6",
        "--deadline-hours",
        "12",
    ],
}


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "w").mkdir()
    (tmp_path / "job.yaml").write_text("name: a\ncommand: train.py\nworkdir: w\n")
    monkeypatch.setenv("GPUCTL_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("GPUCTL_SLURM_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", BAD_INPUTS)
@pytest.mark.parametrize("command", COMMANDS)
def test_a_bad_input_file_is_one_error_naming_it(
    command: str, case: str, workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make, expected = BAD_INPUTS[case]
    if command == "config.yaml":
        (workspace / "home").mkdir()
        path = make(workspace / "home")
        if case == "under a file":
            pytest.skip("config.yaml is always directly in the home folder")
        path.rename(workspace / "home" / "config.yaml")
        path = workspace / "home" / "config.yaml"
    else:
        path = make(workspace)
    assert main(COMMANDS[command](str(path))) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpuctl: error: ") and str(path) in err, err
    assert expected in err and "To fix: " in err and "Traceback" not in err, err
    assert err.count("\n") <= 3, err  # the error, its fix (a job file's problem is listed: one more line)


def test_gpuctl_validate_of_a_folder_in_a_fresh_process(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "orchestrator.cli", "validate", str(tmp_path)],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr == (
        f"gpuctl: error: job file '{tmp_path}': is a folder, not a regular file\n"
        "  To fix: give the path of a job file, e.g. examples/quickstart/job.yaml\n"
    )
