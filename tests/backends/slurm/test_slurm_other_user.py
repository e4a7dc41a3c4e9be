"""Another local user's SLURM jobs with a gpuctl job's name and comment are not that job's (real cluster).

A second Unix user submits, with its own output folder, the jobs the backend would submit for attempts 1
(it completes at once, with a "finished" progress line) and 2 (held, so it stays queued). The backend
must go on seeing only its own jobs: its attempt 1 is not SUCCEEDED, no progress or log comes from the
other user's folder, and its attempt 2 is still submitted."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.backends.base import LaunchRequest, NodePhase
from orchestrator.backends.slurm import SlurmBackend, SlurmClusterConfig, commands, status_from_slurm
from orchestrator.backends.slurm.script import progress_path, slurm_job_name
from tests.backends.slurm.test_slurm_cluster import make_request

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
OTHER = "gpuctl-other"


@pytest.fixture(scope="module")
def other_user(slurm_cluster: Path) -> pwd.struct_passwd:
    """A second local user (created once, kept) that can reach the dev cluster's slurm.conf."""
    with contextlib.suppress(KeyError):
        return reach_cluster(pwd.getpwnam(OTHER), slurm_cluster)
    added = subprocess.run(
        ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", OTHER],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert added.returncode in (0, 9), added.stderr  # 9: added meanwhile by another run
    return reach_cluster(pwd.getpwnam(OTHER), slurm_cluster)


def reach_cluster(user: pwd.struct_passwd, conf: Path) -> pwd.struct_passwd:
    """Lets every user pass through (not list) the folders above slurm.conf and the munge socket
    (pytest's temporary folders are the owner's alone)."""
    for folder in [conf.parent.parent, *conf.parent.parent.parents]:
        mode = folder.stat().st_mode
        if not mode & stat.S_IXOTH:
            folder.chmod(stat.S_IMODE(mode) | stat.S_IXOTH)
    return user


@pytest.fixture
def other_folder(other_user: pwd.struct_passwd) -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="gpuctl-other-"))
    os.chown(folder, other_user.pw_uid, other_user.pw_gid)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def sbatch_as(user: str, folder: Path, req: LaunchRequest, attempt: int, *extra: str) -> int:
    """What the backend submits for ``req``'s attempt (name, comment, output in a job folder), as
    ``user``: a job that writes a finished progress line to its folder."""
    line = json.dumps({"step": 999, "loss": 0.0, "event": "finished"})
    done = subprocess.run(
        ["runuser", "-u", user, "--", "sbatch", "--parsable", f"--job-name={slurm_job_name(req.job_id)}",
         f"--comment=gpuctl:{req.job_id}:{attempt}:V100", f"--chdir={folder}", "--partition=spot",
         f"--output={folder}/slurm-attempt-{attempt}.out", *extra,
         f"--wrap=echo '{line}' >> {progress_path(folder)}"],
        capture_output=True, text=True, check=False, env=os.environ,
    )  # fmt: skip
    assert done.returncode == 0, f"sbatch as {user} failed: {done.stderr}"
    return int(done.stdout.strip().split(";")[0])


def raw_state(slurm_id: int) -> str:
    """The job's state as root's squeue sees it (every user's jobs)."""
    out = subprocess.run(
        ["squeue", "--noheader", "--states=all", f"--jobs={slurm_id}", "--format=%T"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return out.stdout.strip()


def wait_for(what: str, condition: Callable[[], bool], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def accounted(slurm_id: int) -> bool:
    """Whether slurmdbd has recorded the job as ended (asked for every user's jobs)."""
    out = subprocess.run(
        ["sacct", "--allusers", "--noheader", "--parsable2", "--allocations", f"--jobs={slurm_id}",
         "--format=State"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return out.stdout.strip().startswith("COMPLETED")


def test_another_users_job_with_the_same_name_and_comment_is_ignored(
    backend: SlurmBackend,
    cluster_config: SlurmClusterConfig,
    other_user: pwd.struct_passwd,
    other_folder: Path,
    tmp_path: Path,
) -> None:
    req = make_request(tmp_path, cluster_config, "victim", steps=600)
    try:
        backend.launch(req)
        mine = backend.find(req.job_id, 1)
        assert mine is not None and mine.user_id == os.geteuid()
        finished = sbatch_as(OTHER, other_folder, req, attempt=1)
        queued = sbatch_as(OTHER, other_folder, req, 2, "--hold")
        wait_for("the other user's attempt 1 to complete", lambda: raw_state(finished) == "COMPLETED")
        assert progress_path(other_folder).exists() and raw_state(queued) == "PENDING"

        obs = backend.observe(req.job_id, 1, req.node_ids)
        assert obs.nodes[0].phase in (NodePhase.STARTING, NodePhase.RUNNING), obs
        assert obs.progress is None or obs.progress.step < 999, obs.progress
        assert [j.job_id for j in commands.list_jobs() if j.name == mine.name] == [mine.job_id]
        found = backend.find(req.job_id, 1)
        assert found is not None and found.job_id == mine.job_id
        assert all(other_folder not in p.parents for p in backend.log_paths(req.job_id))
        assert status_from_slurm(req.job_id, cluster_config).slurm_job.job_id == mine.job_id

        second = replace(req, attempt=2)  # the next attempt is still sent
        assert backend.find(req.job_id, 2) is None
        backend.launch(second)
        ours = backend.find(req.job_id, 2)
        assert ours is not None and ours.job_id not in (finished, queued) and ours.user_id == os.geteuid()

        wait_for("slurmdbd to record the other user's job", lambda: accounted(finished))
        rows = commands.accounting_jobs(slurm_job_name(req.job_id))
        assert finished not in {r.job_id for r in rows} and {r.user_id for r in rows} <= {os.geteuid()}
    finally:
        subprocess.run(["scancel", f"--name={slurm_job_name(req.job_id)}"], check=False)  # all users'
