"""Helpers to run the real `gpuctl` CLI against a private GPUCTL_HOME (fixture `gpuctl` in tests/conftest.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

TINY = Path(__file__).parent / "fixtures" / "tiny_ddp.py"
REPO = Path(__file__).resolve().parents[2]


class Gpuctl:
    def __init__(self, home: Path) -> None:
        self.home = home
        self.env = {**os.environ, "GPUCTL_HOME": str(home), "PYTHONPATH": str(REPO)}

    def run(self, *args: str, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [sys.executable, "-m", "orchestrator.cli", *args],
            env=self.env, capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip
        if check and proc.returncode != 0:
            raise AssertionError(
                f"gpuctl {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
            )
        return proc

    def popen(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "orchestrator.cli", *args], env=self.env, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip

    def status(self, job: str) -> dict[str, Any]:
        doc: dict[str, Any] = json.loads(self.run("status", job, "-o", "json").stdout)
        return doc

    def wait_for(
        self, job: str, predicate: Callable[[dict[str, Any]], bool], timeout: float = 240
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            doc = self.status(job)
            if predicate(doc):
                return doc
            time.sleep(0.5)
        raise AssertionError(f"timed out waiting on {job}: {self.status(job)}")


def write_job(folder: Path, name: str, body: str) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(f"name: {name}\n{body}")
    return path
