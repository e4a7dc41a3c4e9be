"""One simulated node: runs the setup and the torchrun agent, and records how it ended.

Started by the local backend in a new session (its own process group), so the node survives a
controller crash and a notice signal sent to the group reaches the agent and every worker. The
runner itself only notes the notice and keeps waiting, so that it can write the exit code
atomically to ``exit_code`` in the node folder, which a restarted controller reads.

    python -m orchestrator.backends.local.node_runner NODE_DIR [--monitor JSON_ARGV] -- torchrun ARGS...

With ``--monitor`` the runner also starts the GPU monitor (a JSON list: its command line without
``--notify-pid``) right before the trainer, in a session of its own (so the notice sent to the node's
group does not stop it), dying with the runner (``PR_SET_PDEATHSIG``) and carrying the node's
``GPUCTL_NODE_ID`` (so killing the node kills it). Its output goes to ``monitor.log``. When the
trainer ends, the runner stops the monitor (SIGTERM: it writes its last window) before writing
``exit_code``. A monitor that cannot run (no NVML) costs one line in the node's output, never the job.

The setup command's and the trainer's output reach ``output.log`` (the runner's standard output)
through the runner, each line headed by its time (:mod:`orchestrator.backends.output_log`),
as do the runner's own lines.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from orchestrator.backends.output_log import TimedOutput
from orchestrator.state.job_dir import summary_file_name

MONITOR_STOP_TIMEOUT_S = 5.0
NO_NVML_EXIT_CODE = 3
"""The monitor's exit code without NVML (:class:`orchestrator.errors.EnvironmentProblem`)."""
NO_NVML_LINE = "GPU monitor: no NVML on this machine; utilization not measured"


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _die_with_parent() -> None:
    """In the monitor, before exec: SIGKILL it when the runner dies, however it dies."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class NodeMonitor:
    """The node's GPU monitor process: started, watched, stopped; never fails the node."""

    def __init__(self, argv: list[str], node_dir: Path, output: TimedOutput) -> None:
        self.output = output
        self.reported = False
        self.proc: subprocess.Popen[bytes] | None = None
        summary = node_dir.parent.parent / summary_file_name(node_dir.name)  # in the job folder
        argv = [*argv, f"--notify-pid=-{os.getpgrp()}", f"--summary-file={summary}"]
        try:
            with open(node_dir / "monitor.log", "ab") as log:
                self.proc = subprocess.Popen(
                    argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                    start_new_session=True, preexec_fn=_die_with_parent,
                )  # fmt: skip
        except OSError as exc:
            self._say(f"GPU monitor could not start ({exc}); utilization not measured")

    def _say(self, line: str) -> None:
        if not self.reported:
            self.reported = True
            self.output.say(f"gpuctl: {line}")

    def check(self) -> None:
        """Report, once, a monitor that ended by itself."""
        code = self.proc.poll() if self.proc is not None else None
        if code is None or code == 0:
            return
        if code == NO_NVML_EXIT_CODE:
            self._say(NO_NVML_LINE)
        else:
            self._say(f"GPU monitor exited with code {code} (see monitor.log); utilization not measured")

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(MONITOR_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                return
        self.check()


def _wait(child: subprocess.Popen[bytes], monitor: NodeMonitor | None) -> int:
    while True:
        try:
            return child.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            if monitor is not None:
                monitor.check()


def main(argv: list[str]) -> int:
    node_dir = Path(argv[0])
    split = argv.index("--")
    options, command = argv[1:split], argv[split + 1 :]
    monitor_argv: list[str] | None = None
    if len(options) == 2 and options[0] == "--monitor":
        monitor_argv = [str(part) for part in json.loads(options[1])]
    _write_atomic(node_dir / "runner.pid", str(os.getpid()))
    with open(node_dir / "launches.log", "a") as fh:  # one line per start: tests check "never twice"
        fh.write(f"{os.getpid()}\n")

    noticed: list[int] = []

    def on_notice(signum: int, _frame: object) -> None:
        noticed.append(signum)  # the agent and workers got it too; we wait for them to finish

    for sig in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT):
        signal.signal(sig, on_notice)

    output = TimedOutput(sys.stdout.fileno())
    try:
        code = _run(command, node_dir, monitor_argv, output, noticed)
    finally:
        output.close()
    _write_atomic(node_dir / "exit_code", str(code))
    return 0


def _run(
    command: list[str],
    node_dir: Path,
    monitor_argv: list[str] | None,
    output: TimedOutput,
    noticed: list[int],
) -> int:
    """The setup command, then the trainer (with the node's monitor); the exit code of the node."""
    setup = os.environ.get("GPUCTL_SETUP")
    code = 0
    if setup:
        code = subprocess.call(["/bin/sh", "-c", setup], stdin=subprocess.DEVNULL, stdout=output.fd,
                               stderr=output.fd)  # fmt: skip
    if code == 0:
        monitor = NodeMonitor(monitor_argv, node_dir, output) if monitor_argv and not noticed else None
        child = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=output.fd, stderr=output.fd)
        code = _wait(child, monitor)
        if monitor is not None:
            monitor.stop()
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
