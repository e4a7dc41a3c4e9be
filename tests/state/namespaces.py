"""Run commands in a private mount namespace (``unshare -m``, as root), where a test can mount a tiny
tmpfs or a read-only bind mount without touching the machine's own mounts."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]

_DRIVER = """
import json, subprocess, sys
results = []
for argv in json.loads(sys.argv[1]):
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    results.append({"argv": argv, "rc": proc.returncode, "out": proc.stdout, "err": proc.stderr})
print(json.dumps(results))
"""


def mount_namespaces_available() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "-m", "true"], capture_output=True, timeout=30).returncode == 0


needs_mount_namespace = pytest.mark.skipif(
    not mount_namespaces_available(), reason="needs root and `unshare -m` (mount namespaces)"
)


def gpuctl(*args: str) -> list[str]:
    return [sys.executable, "-m", "orchestrator.cli", *args]


def run_in_namespace(mounts: str, commands: list[list[str]], home: Path) -> list[dict[str, Any]]:
    """Run ``mounts`` (shell) and then each command in one new mount namespace, with ``GPUCTL_HOME``
    set to ``home``; returns each command's rc, stdout and stderr."""
    script = f"{mounts} && exec {shlex.quote(sys.executable)} -c {shlex.quote(_DRIVER)} {shlex.quote(json.dumps(commands))}"
    env = {**os.environ, "GPUCTL_HOME": str(home), "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", script],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results: list[dict[str, Any]] = json.loads(proc.stdout)
    return results
