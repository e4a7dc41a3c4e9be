"""Only the submitting user's SLURM jobs are gpuctl's: another user's job with the same name and comment
is ignored on every path that reads squeue or sacct (captured from SLURM 22.05.8 on the dev cluster:
jobs 1, 3 and 4 were submitted by `gpuctl-other` (uid 999) as `gpuctl-x-t`, job 2 by root, and the
comments of 3 and 4 hold newlines and a whole forged sacct row).

The same on the real cluster, with a second local user: test_slurm_other_user.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.backends.base import NodePhase
from orchestrator.backends.slurm import SlurmBackend, commands, status_from_slurm
from orchestrator.backends.slurm.parse import SlurmJob, owned_by, parse_sacct, parse_squeue_json

DATA = Path(__file__).parent / "data"
SQUEUE = (DATA / "squeue-22.05-two-users.json").read_text()
SACCT = (DATA / "sacct-22.05-two-users.txt").read_text()
CAPTURED_DELIMITER = "|d3adb33f|"


@pytest.fixture
def as_root(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """SLURM answers with the captures; gpuctl runs as root (uid 0). Returns the commands run."""
    calls: list[list[str]] = []

    def run_slurm(argv: list[str]) -> str:
        calls.append(list(argv))
        if argv[0] == "squeue":
            return SQUEUE
        delimiter = next(a.split("=", 1)[1] for a in argv if a.startswith("--delimiter="))
        return SACCT.replace(CAPTURED_DELIMITER, delimiter)

    monkeypatch.setattr(commands, "run_slurm", run_slurm)
    monkeypatch.setattr(commands, "submitting_user", lambda: (0, "root"))
    return calls


def test_squeue_json_gives_each_jobs_owner() -> None:
    jobs = {j.job_id: j for j in parse_squeue_json(SQUEUE)}
    assert {i: (j.user_id, j.user_name) for i, j in jobs.items()} == {
        1: (999, "gpuctl-other"), 2: (0, "root"), 3: (999, "gpuctl-other"), 4: (999, "gpuctl-other"),
    }  # fmt: skip
    assert {j.name for j in jobs.values()} == {"gpuctl-x-t"}
    assert [j.job_id for j in owned_by(list(jobs.values()), 0, "root")] == [2]
    assert [j.job_id for j in owned_by(list(jobs.values()), 999, "gpuctl-other")] == [1, 3, 4]


def test_sacct_rows_give_each_owner_and_a_comment_cannot_forge_a_row() -> None:
    rows = parse_sacct(SACCT, CAPTURED_DELIMITER)
    # rows 3 and 4, cut in pieces by their comments' newlines, are no rows at all
    assert [(r.job_id, r.user_id, r.user_name) for r in rows] == [(1, 999, "gpuctl-other"), (2, 0, "root")]
    assert [r.job_id for r in owned_by(rows, 0, "root")] == [2]
    # With `|` between fields, job 4's comment would be a row of root's: why the delimiter is secret
    plain = parse_sacct(SACCT.replace(CAPTURED_DELIMITER, "|"), "|")
    assert [(r.job_id, r.user_id) for r in plain if r.job_id == 77] == [(77, 0)]


def test_a_job_is_owned_by_uid_else_by_name_else_by_nobody() -> None:
    job = SlurmJob(1, "gpuctl-a", "RUNNING", "None", 0, "", 1, "", None, None, None, None, None)
    assert not job.owned_by(0, "root")  # no owner given: nobody's
    assert SlurmJob(**{**job.__dict__, "user_name": "root"}).owned_by(0, "root")
    assert not SlurmJob(**{**job.__dict__, "user_id": 999, "user_name": "root"}).owned_by(0, "root")
    assert SlurmJob(**{**job.__dict__, "user_id": 0, "user_name": "x"}).owned_by(0, "root")


def test_squeue_and_sacct_keep_only_this_users_jobs(as_root: list[list[str]]) -> None:
    assert [j.job_id for j in commands.list_jobs()] == [2]
    assert [j.job_id for j in commands.accounting_jobs("gpuctl-x-t")] == [2]
    assert commands.show_job(1) is None and commands.show_job(2) is not None
    squeue, sacct, *_ = as_root
    assert "--user=0" in squeue and "--user=0" in sacct and "--allusers" not in sacct
    delimiter = next(a for a in sacct if a.startswith("--delimiter="))
    assert len(delimiter) > len("--delimiter=||") + 8  # a fresh random token at each call
    commands.accounting_jobs("gpuctl-x-t")
    assert next(a for a in as_root[-1] if a.startswith("--delimiter=")) != delimiter


def test_a_uid_without_passwd_entry_asks_slurm_for_no_user(
    as_root: list[list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(commands, "submitting_user", lambda: (999, ""))  # squeue/sacct refuse it by name
    assert [j.job_id for j in commands.list_jobs()] == [1, 3, 4]
    assert not any(a.startswith("--user") for a in as_root[0])


def test_backend_and_status_ignore_another_users_job(as_root: list[list[str]]) -> None:
    backend = SlurmBackend(preflight=False, controller_owned=True)
    assert backend.find("x-t", 2) is None  # the other user's pending attempt 2 is not ours
    first = backend.find("x-t", 1)
    assert first is not None and first.job_id == 2
    obs = backend.observe("x-t", 2, ["x-t-a2-n0"])
    assert obs.nodes[0].phase is NodePhase.LOST and obs.progress is None
    assert backend.log_paths("x-t") == [Path("/tmp/slurm-explore/mine.out")]
    assert status_from_slurm("x-t").slurm_job.job_id == 2
