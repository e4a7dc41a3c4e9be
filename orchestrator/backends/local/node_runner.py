"""One simulated node: runs the setup and the torchrun agent, and records how it ended.

Started by the local backend in a new session (its own process group), so the node survives a
controller crash and a notice signal sent to the group reaches the agent and every worker. The
runner itself only notes the notice and keeps waiting, so that it can write the exit code
atomically to ``exit_code`` in the node folder, which a restarted controller reads.

    python -m orchestrator.backends.local.node_runner NODE_DIR -- torchrun ARGS...
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def main(argv: list[str]) -> int:
    node_dir = Path(argv[0])
    command = argv[argv.index("--") + 1 :]
    _write_atomic(node_dir / "runner.pid", str(os.getpid()))
    with open(node_dir / "launches.log", "a") as fh:  # one line per start: tests check "never twice"
        fh.write(f"{os.getpid()}\n")

    noticed: list[int] = []

    def on_notice(signum: int, _frame: object) -> None:
        noticed.append(signum)  # the agent and workers got it too; we wait for them to finish

    for sig in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT):
        signal.signal(sig, on_notice)

    setup = os.environ.get("GPUCTL_SETUP")
    code = 0
    if setup:
        code = subprocess.call(["/bin/sh", "-c", setup])
    if code == 0:
        child = subprocess.Popen(command)
        while True:
            try:
                code = child.wait()
                break
            except InterruptedError:  # pragma: no cover - PEP 475 retries wait() for us
                continue
    _write_atomic(node_dir / "exit_code", str(code))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
