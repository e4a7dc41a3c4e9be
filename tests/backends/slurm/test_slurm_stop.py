"""SLURM stop never blocks a tick: USR2 once, the kill time remembered in the job folder, scancel after.

The cluster commands are faked at the module boundary (``commands.list_jobs``/``cancel``), and time is
set by the test, so the grace period passes without waiting. The real cluster test of the same flow
is ``test_slurm_cluster.py::test_stop_checkpoints_and_cancels``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.backends.base import NodePhase
from orchestrator.backends.slurm import backend as slurm_backend
from orchestrator.backends.slurm import commands
from orchestrator.backends.slurm.backend import SlurmBackend
from orchestrator.backends.slurm.parse import SlurmJob
from orchestrator.backends.slurm.script import slurm_job_name


def running_job(job_dir: Path, state: str = "RUNNING") -> SlurmJob:
    return SlurmJob(
        42, slurm_job_name("j"), state, "None", 0, "spot", 1, "n1", None, None, None, None, None,
        comment="gpuctl:j:1", stdout=str(job_dir / "slurm-attempt-1.out"),
    )  # fmt: skip


@pytest.fixture
def cancels(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[tuple[int, str | None]]:
    calls: list[tuple[int, str | None]] = []
    jobs = [running_job(tmp_path)]
    monkeypatch.setattr(commands, "list_jobs", lambda: jobs)
    monkeypatch.setattr(
        commands, "cancel", lambda job_id, signal=None, batch_only=False: calls.append((job_id, signal))
    )
    return calls


def test_stop_signals_once_and_cancels_only_after_the_grace_period(
    cancels: list[tuple[int, str | None]], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    clock = [1000.0]
    monkeypatch.setattr(slurm_backend.time, "time", lambda: clock[0])
    backend = SlurmBackend(preflight=False, controller_owned=True)
    backend.stop("j", 1, ["j-a1-n0"], grace_s=30)
    assert cancels == [(42, "USR2")]
    assert (tmp_path / "slurm-42.kill_at").read_text().strip() == "1030.0"
    clock[0] = 1029.0  # the next ticks, within the grace: nothing more is sent
    backend.stop("j", 1, ["j-a1-n0"], grace_s=30)
    restarted = SlurmBackend(preflight=False, controller_owned=True)  # a new controller keeps the deadline
    restarted.stop("j", 1, ["j-a1-n0"], grace_s=30)
    assert cancels == [(42, "USR2")]
    clock[0] = 1030.5
    restarted.stop("j", 1, ["j-a1-n0"], grace_s=30)
    assert cancels == [(42, "USR2"), (42, None)]


def test_a_queued_job_or_no_grace_is_cancelled_at_once(
    cancels: list[tuple[int, str | None]], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    backend = SlurmBackend(preflight=False, controller_owned=True)
    backend.stop("j", 1, ["j-a1-n0"], grace_s=0)
    assert cancels == [(42, None)]
    monkeypatch.setattr(commands, "list_jobs", lambda: [running_job(tmp_path, "PENDING")])
    backend.stop("j", 1, ["j-a1-n0"], grace_s=30)
    assert cancels == [(42, None), (42, None)]


def test_an_elastic_jobs_lost_node_is_lost_and_stopping_it_leaves_the_survivors(
    cancels: list[tuple[int, str | None]], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(commands, "accounting_jobs", lambda name: [])
    backend = SlurmBackend(controller_owned=True)  # the job runs on 1 of its 2 nodes (SLURM took one out)
    seen = backend.observe("j", 1, ["j-a1-n0", "j-a1-n1"]).nodes
    assert [n.phase for n in seen] == [NodePhase.RUNNING, NodePhase.LOST] and seen[1].ended_at is not None
    assert [n.phase for n in backend.observe("j", 1, ["j-a1-n1"]).nodes] == [NodePhase.LOST]
    backend.stop("j", 1, ["j-a1-n1"], grace_s=20)
    assert cancels == []  # the survivor trains on
    backend.stop("j", 1, ["j-a1-n0", "j-a1-n1"], grace_s=20)
    assert cancels == [(42, "USR2")]
