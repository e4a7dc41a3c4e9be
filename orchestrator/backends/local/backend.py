"""Local backend: each node is a torchrun agent process on this machine.

Layout of a job folder (``$GPUCTL_HOME/jobs/JOB``)::

    progress.jsonl              training progress (rank 0 of every attempt appends)
    market.json                 which simulated market changes have fired
    attempt-N/rendezvous.pid    the attempt's c10d store process
    attempt-N/rendezvous.port
    attempt-N/NODE_ID/          runner.pid, exit_code, kill_at, launches.log, output.log, monitor.log
    monitor-summary-NODE_ID.jsonl   the node's GPU monitor windows (see orchestrator.backends.monitoring)

Everything the backend needs after a controller restart is in those files and in /proc, so a
restarted controller finds running nodes again and never starts one twice.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from orchestrator import contract
from orchestrator.backends.base import (
    AttemptObservation,
    LaunchRequest,
    NodeObservation,
    NodePhase,
    OwnPlacements,
)
from orchestrator.backends.local.market import SimulatedMarket
from orchestrator.backends.monitoring import MonitorSettings
from orchestrator.backends.progress import read_progress
from orchestrator.backends.secrets import launch_env
from orchestrator.backends.torchrun import RESTARTING_AGENT_ENV
from orchestrator.spec import JobSpec
from orchestrator.state.job_dir import OUTPUT_LOG, JobDir
from orchestrator.state.job_dir import attempt_folders as attempt_folders
from orchestrator.state.store import JobStore

PACKAGE_ROOT = Path(__file__).resolve().parents[3]
"""The folder holding the ``orchestrator`` package: put on the nodes' PYTHONPATH."""


class LocalBackend:
    name = "local"

    def __init__(self, store: JobStore) -> None:
        self.store = store

    # --- launching ------------------------------------------------------------------------------
    def launch(self, request: LaunchRequest) -> None:
        attempt_dir = JobDir(request.job_dir).attempt(request.attempt)
        attempt_dir.mkdir(parents=True, exist_ok=True)
        # Secret references are read first (an error starts nothing) and only into the nodes' env.
        where = f"the environment of the gpuctl controller that launches the job (pid {os.getpid()})"
        job_env = launch_env(request.spec.env, os.environ, self.store.home, where)
        port = self._ensure_rendezvous(attempt_dir, request.job_id, request.attempt)
        for node_id in request.node_ids:
            node_dir = attempt_dir / node_id
            node_dir.mkdir(exist_ok=True)
            if (node_dir / "exit_code").exists() or _alive(_read_pid(node_dir / "runner.pid"), node_id):
                continue  # idempotent: never start a node twice
            self._start_node(request, node_id, node_dir, port, job_env)

    def _ensure_rendezvous(self, attempt_dir: Path, job_id: str, attempt: int) -> int:
        store_id = f"{job_id}-a{attempt}-rendezvous"
        pid_file = attempt_dir / "rendezvous.pid"
        port_file = attempt_dir / "rendezvous.port"
        if port_file.exists() and _alive(_read_pid(pid_file), store_id):
            return int(port_file.read_text())
        port = _free_port()
        port_file.write_text(str(port))
        env = {**os.environ, contract.ENV_NODE_ID: store_id, "PYTHONPATH": _pythonpath()}
        with open(attempt_dir / "rendezvous.log", "ab") as log:
            subprocess.Popen(
                [sys.executable, "-m", "orchestrator.backends.local.rendezvous", str(port), str(pid_file)],
                env=env, start_new_session=True, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        _wait_for_port(port)
        return port

    def _start_node(
        self, request: LaunchRequest, node_id: str, node_dir: Path, port: int, job_env: dict[str, str]
    ) -> None:
        spec = request.spec
        elastic = request.min_nodes != request.max_nodes
        torchrun = [
            sys.executable, "-m", "torch.distributed.run",
            f"--nnodes={request.min_nodes}:{request.max_nodes}",
            f"--nproc-per-node={request.placement.gpus_per_node}",
            "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}",
            f"--rdzv-id={request.job_id}-a{request.attempt}",
            "--rdzv-conf=is_host=false,last_call_timeout=1,join_timeout=300,keep_alive_interval=1,keep_alive_max_attempt=3",
            f"--max-restarts={100 if elastic else 0}", "--monitor-interval=0.5",
            "--local-addr=127.0.0.1",
            *spec.command_argv,
        ]  # fmt: skip
        env = {
            **os.environ,
            **job_env,
            "PYTHONPATH": _pythonpath(),
            "PYTHONUNBUFFERED": "1",
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
            **(RESTARTING_AGENT_ENV if elastic else {}),
            **contract.training_env(
                job_id=request.job_id,
                attempt=request.attempt,
                node_id=node_id,
                checkpoint_dir=request.checkpoint_dir,
                keep=spec.checkpoint.keep,
                every_steps=spec.checkpoint.every_steps,
                every_seconds=spec.checkpoint.every.total_seconds() if spec.checkpoint.every else None,
                global_batch=spec.policies.global_batch,
                progress_file=str(JobDir(request.job_dir).progress),
                tune=spec.runtime.tune.value,
            ),
        }
        if spec.setup:
            env["GPUCTL_SETUP"] = spec.setup
        runner = [sys.executable, "-m", "orchestrator.backends.local.node_runner", str(node_dir)]
        monitor = MonitorSettings.for_job(self.store.job_options(request.job_id))
        if monitor.enabled:
            runner += ["--monitor", json.dumps(monitor.local_argv(request.job_id))]
        with open(node_dir / OUTPUT_LOG, "ab") as log:
            proc = subprocess.Popen(
                [*runner, "--", *torchrun],
                cwd=spec.workdir, env=env, start_new_session=True, stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        (node_dir / "runner.pid").write_text(str(proc.pid))

    # --- observing ------------------------------------------------------------------------------
    def observe(self, job_id: str, attempt: int, node_ids: Sequence[str]) -> AttemptObservation:
        _reap_children()
        attempt_dir = JobDir(self.store.job_dir(job_id)).attempt(attempt)
        nodes = []
        for node_id in node_ids:
            node_dir = attempt_dir / node_id
            notice_at = _read_notice(node_dir)
            exit_file = node_dir / "exit_code"
            if exit_file.exists():
                code = int(exit_file.read_text() or "1")
                if code == 0:
                    phase = NodePhase.SUCCEEDED
                else:
                    phase = NodePhase.PREEMPTED if notice_at else NodePhase.FAILED
                ended = datetime.fromtimestamp(exit_file.stat().st_mtime, UTC)
                nodes.append(NodeObservation(node_id, phase, code, notice_at, ended))
            elif _alive(_read_pid(node_dir / "runner.pid"), node_id):
                nodes.append(NodeObservation(node_id, NodePhase.RUNNING, notice_at=notice_at))
            elif (node_dir / "runner.pid").exists():
                phase = NodePhase.PREEMPTED if notice_at else NodePhase.LOST
                nodes.append(NodeObservation(node_id, phase, None, notice_at, datetime.now(UTC)))
            else:
                nodes.append(NodeObservation(node_id, NodePhase.STARTING, notice_at=notice_at))
        return AttemptObservation(tuple(nodes), read_progress(JobDir(self.store.job_dir(job_id)).progress))

    def own_placements(self, spec: JobSpec) -> OwnPlacements | None:
        return None  # the public price catalog prices the simulated nodes

    def spot_capacity(self, job_id: str, zone: str, now: datetime) -> int | None:
        job = self.store.job(job_id)
        market = SimulatedMarket(
            self.store.job_options(job_id).get("market", {}), self.store.job_dir(job_id) / "market.json"
        )
        progress = read_progress(JobDir(self.store.job_dir(job_id)).progress)
        return market.capacity(
            (now - job.submitted_at).total_seconds(), progress.step if progress else None, zone
        )

    def tick(
        self, job_id: str, attempt: int, node_ids: Sequence[str], spot: bool, grace_s: float, now: datetime
    ) -> None:
        """Play the simulated cloud: reclaim spot nodes above the market's capacity, kill after grace."""
        if spot and node_ids:
            placement = self.store.attempt_placement(job_id, attempt) or {}
            capacity = self.spot_capacity(job_id, str(placement.get("zone", "")), now)
            attempt_dir = JobDir(self.store.job_dir(job_id)).attempt(attempt)
            noticed = {n for n in node_ids if _read_notice(attempt_dir / n) is not None}
            alive = [
                n for n in node_ids
                if n not in noticed and _alive(_read_pid(attempt_dir / n / "runner.pid"), n)
            ]  # fmt: skip
            if capacity is not None and len(alive) > capacity:
                reclaimed = sorted(alive, key=_node_index)[capacity:]
                for node_id in reclaimed:  # the market's notice, observed by the controller (observe)
                    _write_notice(attempt_dir / node_id, now)
                self.stop(job_id, attempt, reclaimed, grace_s)
        self.enforce(job_id, attempt, node_ids, now)

    # --- stopping ------------------------------------------------------------------------------
    def stop(self, job_id: str, attempt: int, node_ids: Sequence[str], grace_s: float) -> None:
        """Send the notice now; :meth:`enforce` kills whatever is still alive after ``grace_s``."""
        attempt_dir = JobDir(self.store.job_dir(job_id)).attempt(attempt)
        now = datetime.now(UTC)
        for node_id in node_ids:
            node_dir = attempt_dir / node_id
            pid = _read_pid(node_dir / "runner.pid")
            if not _alive(pid, node_id) or (node_dir / "kill_at").exists():
                continue
            (node_dir / "kill_at").write_text(str(now.timestamp() + grace_s))
            if grace_s > 0:
                _signal_group(pid, signal.SIGTERM)
            else:
                _kill_node(pid, node_id)

    def enforce(self, job_id: str, attempt: int, node_ids: Sequence[str], now: datetime) -> None:
        """Kill nodes whose grace period is over; stop the rendezvous once no node is left."""
        attempt_dir = JobDir(self.store.job_dir(job_id)).attempt(attempt)
        any_alive = False
        for node_id in node_ids:
            node_dir = attempt_dir / node_id
            pid = _read_pid(node_dir / "runner.pid")
            if not _alive(pid, node_id):
                continue
            kill_at = node_dir / "kill_at"
            if kill_at.exists() and now.timestamp() >= float(kill_at.read_text()):
                _kill_node(pid, node_id)
            else:
                any_alive = True
        if not any_alive:
            self.stop_rendezvous(job_id, attempt)

    def stop_rendezvous(self, job_id: str, attempt: int) -> None:
        attempt_dir = JobDir(self.store.job_dir(job_id)).attempt(attempt)
        pid = _read_pid(attempt_dir / "rendezvous.pid")
        if _alive(pid, f"{job_id}-a{attempt}-rendezvous"):
            _signal_group(pid, signal.SIGTERM)

    def log_paths(self, job_id: str) -> list[Path]:
        attempts, _ = attempt_folders(self.store.job_dir(job_id))
        return [log for a in attempts for log in sorted(a.glob(f"*/{OUTPUT_LOG}"))]


def _node_index(node_id: str) -> int:
    return int(node_id.rsplit("-n", 1)[1])


def _pythonpath() -> str:
    existing = os.environ.get("PYTHONPATH")
    return f"{PACKAGE_ROOT}{os.pathsep}{existing}" if existing else str(PACKAGE_ROOT)


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _alive(pid: int | None, node_id: str) -> bool:
    """Is ``pid`` a live (not zombie) process of this node? Guards against pid reuse."""
    if pid is None:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            return False
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
    return f"{contract.ENV_NODE_ID}={node_id}".encode() in environ.split(b"\0")


def _signal_group(pid: int | None, sig: signal.Signals) -> None:
    if pid is None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def _kill_node(pid: int | None, node_id: str) -> None:
    """SIGKILL a node: its process group, and every process carrying its id in the environment
    (torchrun starts workers in sessions of their own, so the group alone would orphan them)."""
    _signal_group(pid, signal.SIGKILL)
    marker = f"{contract.ENV_NODE_ID}={node_id}".encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if marker in (proc / "environ").read_bytes().split(b"\0"):
                os.kill(int(proc.name), signal.SIGKILL)
        except (OSError, ProcessLookupError):
            continue


def _reap_children() -> None:
    with contextlib.suppress(ChildProcessError):
        while True:
            pid, _ = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                return


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for_port(port: int, timeout_s: float = 20.0) -> None:
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)


NOTICE_FILE = "notice_at"
"""In a node's folder: when the simulated market sent it the preemption notice (ISO 8601)."""


def _write_notice(node_dir: Path, now: datetime) -> None:
    if not (node_dir / NOTICE_FILE).exists():
        tmp = node_dir / f".{NOTICE_FILE}.tmp"
        tmp.write_text(now.isoformat())
        os.replace(tmp, node_dir / NOTICE_FILE)


def _read_notice(node_dir: Path) -> datetime | None:
    try:
        return datetime.fromisoformat((node_dir / NOTICE_FILE).read_text().strip())
    except (OSError, ValueError):
        return None
