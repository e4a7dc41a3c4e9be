"""Running SLURM's client commands, with their failures turned into gpuctl errors."""

from __future__ import annotations

import os
import pwd
import secrets
import subprocess
from collections.abc import Mapping, Sequence

from orchestrator.backends.slurm.parse import (
    SACCT_FIELDS,
    SlurmJob,
    json_errors,
    owned_by,
    parse_sacct,
    parse_squeue_json,
)
from orchestrator.errors import EnvironmentProblem, TemporaryError, UserError

_UNREACHABLE = (
    "Failed while looking for jobs",
    "Unable to contact slurm controller",
    "Socket timed out",
    "Connection refused",
    "Zero Bytes were transmitted",
    "Communication connection failure",
)


def run_slurm(
    argv: Sequence[str],
    stdin: str | None = None,
    timeout_s: float = 30.0,
    extra_env: Mapping[str, str] | None = None,
) -> str:
    """Run one SLURM command (a list of arguments: no shell) and return its stdout; ``extra_env`` is
    added to the command's environment (this process's)."""
    env = {**os.environ, **extra_env} if extra_env else None
    try:
        done = subprocess.run(
            list(argv), input=stdin, capture_output=True, text=True, timeout=timeout_s, check=False,
            env=env,
        )  # fmt: skip
    except FileNotFoundError as exc:
        raise EnvironmentProblem(
            f"`{argv[0]}` was not found: the SLURM client commands are not installed on this machine",
            "install them (Debian/Ubuntu: `apt-get install slurm-client`) or add them to PATH, "
            "and set SLURM_CONF if the cluster's slurm.conf is not in /etc/slurm",
        ) from exc
    except subprocess.TimeoutExpired as exc:
        raise TemporaryError(
            f"`{' '.join(argv[:2])}` did not answer in {timeout_s:.0f} s",
            "check that slurmctld is up (`scontrol ping`)",
        ) from exc
    if done.returncode != 0:
        raise slurm_error(list(argv), done.stderr.strip() or done.stdout.strip())
    return done.stdout


def slurm_error(argv: list[str], message: str) -> Exception:
    """The gpuctl error for a failed SLURM command's message."""
    command = " ".join(argv[:1])
    if any(text in message for text in _UNREACHABLE):
        return TemporaryError(
            f"slurmctld is unreachable ({command}: {message})",
            "start slurmctld or check SlurmctldHost/port in slurm.conf (SLURM_CONF); `scontrol ping` tells",
            retry_after_s=10.0,
        )
    if (
        "Could not establish a configuration source" in message
        or "Unable to process configuration" in message
    ):
        return EnvironmentProblem(
            f"SLURM's configuration was not found ({command}: {message.splitlines()[-1]})",
            "set SLURM_CONF to the cluster's slurm.conf (or install it as /etc/slurm/slurm.conf)",
        )
    if "Invalid partition" in message or "invalid partition" in message:
        return UserError(
            f"the SLURM partition does not exist ({message})",
            "set `partitions:` in the SLURM cluster config to partitions that `sinfo -s` lists",
        )
    if "Invalid qos" in message:
        return UserError(
            f"the SLURM QOS is not allowed ({message})", "fix `qos:` in the SLURM cluster config"
        )
    if "Invalid generic resource" in message or "Invalid Trackable RESource" in message:
        return UserError(
            f"the cluster has no such GRES ({message})",
            "map the GPU type to a GRES type of the cluster in `gres_types:` (`sinfo -o %G` lists them)",
        )
    return TemporaryError(f"{command} failed: {message}", "see the message above; retrying may help")


def submit(sbatch_args: Sequence[str], script: str, extra_env: Mapping[str, str] | None = None) -> int:
    """``sbatch --parsable`` with the script on stdin; returns the SLURM job id. ``extra_env``: variables
    for the job (secrets) that go in sbatch's environment rather than in the script."""
    out = run_slurm(["sbatch", "--parsable", *sbatch_args], stdin=script, extra_env=extra_env)
    return int(out.strip().split(";")[0])


def submitting_user() -> tuple[int, str]:
    """This process's uid and user name: the owner of the jobs it submits (sbatch's munge credential
    carries the effective uid); the name is ``""`` when the uid has no passwd entry here."""
    uid = os.geteuid()
    try:
        return uid, pwd.getpwuid(uid).pw_name
    except KeyError:
        return uid, ""


def _user_filter() -> list[str]:
    """``--user=UID`` for squeue/sacct, so SLURM leaves other users' jobs out where it can (squeue
    22.05 ignores it with ``--json``); none for a uid without a passwd entry, which they refuse.
    The callers check each job's owner themselves all the same."""
    uid, name = submitting_user()
    return [f"--user={uid}"] if name else []


def list_jobs() -> list[SlurmJob]:
    """This user's jobs that slurmctld still remembers (finished ones for MinJobAge); other users'
    jobs, whatever their name and comment, are left out."""
    argv = ["squeue", "--states=all", "--json", *_user_filter()]
    out = run_slurm(argv)
    try:
        errors = json_errors(out)
    except ValueError as exc:
        raise slurm_error(argv, f"unreadable output ({exc})") from exc
    if errors:  # squeue --json exits 0 even when slurmctld did not answer
        raise slurm_error(argv, "; ".join(errors))
    return owned_by(parse_squeue_json(out), *submitting_user())


def accounting_jobs(name: str) -> list[SlurmJob]:
    """Every run of this user's jobs named ``name`` that slurmdbd recorded (``sacct``), oldest first;
    ``[]`` when the cluster keeps no accounting. Used once slurmctld has forgotten a job (``MinJobAge``).
    The field delimiter is new at each call, so no comment (sacct prints its newlines) can forge a row."""
    delimiter = f"|{secrets.token_hex(8)}|"
    argv = ["sacct", *_user_filter(), "--allocations", "--duplicates", "--parsable2", "--noheader",
            f"--delimiter={delimiter}", "--starttime=1970-01-01", f"--name={name}",
            f"--format={SACCT_FIELDS}"]  # fmt: skip
    out = run_slurm(argv)
    if "accounting storage is disabled" in out:
        return []
    return owned_by(parse_sacct(out, delimiter), *submitting_user())


def show_job(slurm_id: int) -> SlurmJob | None:
    """One of this user's jobs by its SLURM id (from squeue's JSON: ``scontrol show job`` text has no
    owner that a job's name or comment could not forge); ``None`` when slurmctld has no such job of
    this user."""
    return next((job for job in list_jobs() if job.job_id == slurm_id), None)


def cancel(slurm_id: int, signal: str | None = None, batch_only: bool = False) -> None:
    argv = ["scancel"]
    if signal:
        argv.append(f"--signal={signal}")
    if batch_only:
        argv.append("--batch")
    try:
        run_slurm([*argv, str(slurm_id)])
    except TemporaryError as err:
        if "already completing or completed" not in err.what and "Invalid job id" not in err.what:
            raise


def gres_types_of_partition(partition: str | None) -> set[str]:
    """GRES types (``gpu:TYPE:N`` -> TYPE) the partition's nodes offer."""
    argv = ["sinfo", "--noheader", "--format=%G"]
    if partition:
        argv.append(f"--partition={partition}")
    types = set()
    for entry in run_slurm(argv).replace("\n", ",").split(","):
        parts = entry.split("(")[0].split(":")
        if len(parts) >= 3 and parts[0] == "gpu":
            types.add(parts[1])
    return types


def partition_time_limit(partition: str | None) -> str | None:
    """The partition's ``MaxTime`` as ``sinfo`` writes it (``1-00:00:00``, ``infinite``); the default
    partition's when ``partition`` is None; None when ``sinfo`` names no such partition."""
    argv = ["sinfo", "--noheader", "--format=%P|%l"]
    if partition:
        argv.append(f"--partition={partition}")
    for line in run_slurm(argv).splitlines():
        name, _, limit = line.strip().partition("|")
        if limit and (partition is not None or name.endswith("*")):
            return limit.strip()
    return None


def partitions() -> set[str]:
    out = run_slurm(["sinfo", "--noheader", "--format=%R"])
    return {line.strip() for line in out.splitlines() if line.strip()}


_IN_SERVICE = frozenset(
    {"idle", "mix", "mixed", "alloc", "allocated", "comp", "completing", "plnd", "planned"}
)


def nodes_in_service(partition: str) -> int:
    """Nodes of ``partition`` that can run jobs now: 0 when the partition is down; a node counts
    when it is idle, mixed or allocated and responding (``sinfo`` marks a silent node with ``*``)."""
    out = run_slurm(["sinfo", "--noheader", f"--partition={partition}", "--format=%a|%t|%D"])
    return sum(
        int(count) for avail, state, count in _sinfo_rows(out) if avail == "up" and state in _IN_SERVICE
    )


def _sinfo_rows(text: str) -> list[tuple[str, str, str]]:
    rows = []
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 3 and parts[2].isdigit():
            rows.append((parts[0], parts[1], parts[2]))
    return rows
