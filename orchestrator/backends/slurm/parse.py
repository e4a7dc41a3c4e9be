"""Parsing ``squeue --json``, ``sacct`` and ``scontrol show job -o`` output, and SLURM job states ->
gpuctl's. Each job keeps its owner (``user_id``): gpuctl takes only its own user's jobs for its own.

``squeue --json`` changed shape across SLURM releases (22.05: plain values; 23.02+: ``job_state`` as
a list, times and exit codes as ``{"set": ..., "number": ...}`` objects); both shapes are read.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from orchestrator.backends.base import NodePhase
from orchestrator.state.job_dir import slurm_output_name
from orchestrator.state.status import FailureReason, JobStatus


@dataclass(frozen=True)
class SlurmJob:
    """One SLURM job as the controller sees it now (the latest run of a requeued job)."""

    job_id: int
    name: str
    state: str
    reason: str
    restarts: int
    partition: str
    node_count: int
    nodes: str
    submit_time: datetime | None
    start_time: datetime | None
    end_time: datetime | None
    exit_code: int | None
    exit_signal: int | None
    comment: str = ""
    gres: str = ""
    stdout: str = ""
    user_id: int | None = None
    """The submitting user's numeric uid (squeue ``user_id``, sacct ``UID``); ``None`` when not given."""
    user_name: str = ""
    """The submitting user's name (squeue ``user_name``, sacct ``User``)."""

    def owned_by(self, uid: int, name: str) -> bool:
        """Whether the user ``uid`` (named ``name``) submitted this job: by uid when SLURM gave one,
        else by name; a job with neither is nobody's."""
        if self.user_id is not None:
            return self.user_id == uid
        return bool(self.user_name) and self.user_name == name

    @property
    def finished(self) -> bool:
        return self.state in FINISHED_STATES

    @property
    def gpus_per_node(self) -> int:
        """From ``gres:gpu:TYPE:N`` / ``gpu:N``; 0 when the job asked for no GPUs."""
        parts = self.gres.removeprefix("gres:").removeprefix("gres/").split(":")
        return int(parts[-1]) if parts[0] == "gpu" and parts[-1].isdigit() else 0

    @property
    def gres_type(self) -> str:
        parts = self.gres.removeprefix("gres:").removeprefix("gres/").split(":")
        return parts[1] if len(parts) == 3 else ""


@dataclass(frozen=True)
class StateMapping:
    status: JobStatus
    phase: NodePhase
    failure: FailureReason | None
    message: str


def _number(value: Any) -> int | None:
    """A JSON number in either shape: ``5`` or ``{"set": true, "infinite": false, "number": 5}``."""
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if isinstance(value, bool) or value is None:
        return None
    return int(value)


def _time(value: Any) -> datetime | None:
    seconds = _number(value)
    return datetime.fromtimestamp(seconds, UTC) if seconds else None


def _exit(value: Any) -> tuple[int | None, int | None]:
    """22.05 gives the raw wait status; newer releases ``{"return_code": .., "signal": {"id": ..}}``."""
    if isinstance(value, dict) and "return_code" in value:
        code = _number(value.get("return_code"))
        signal = value.get("signal") or {}
        return code, _number(signal.get("id")) if isinstance(signal, dict) else None
    raw = _number(value)
    if raw is None:
        return None, None
    return (raw >> 8) & 0xFF, (raw & 0x7F) or None


def _state(value: Any) -> str:
    if isinstance(value, list):
        return str(value[0]) if value else "UNKNOWN"
    return str(value or "UNKNOWN")


def json_errors(text: str) -> list[str]:
    """The ``errors`` of a ``--json`` answer, as ``source: description`` lines."""
    data = json.loads(text)
    return [
        f"{e.get('source', '?')}: {e.get('description') or e.get('error', '?')}"
        for e in data.get("errors", [])
        if isinstance(e, dict)
    ]


def parse_squeue_json(text: str) -> list[SlurmJob]:
    """Jobs of ``squeue --states=all --json`` (SLURM 22.05 ignores most filters with --json)."""
    data = json.loads(text)
    jobs = []
    for raw in data.get("jobs", []):
        code, signal = _exit(raw.get("exit_code"))
        jobs.append(
            SlurmJob(
                job_id=int(raw["job_id"]),
                name=str(raw.get("name", "")),
                state=_state(raw.get("job_state")),
                reason=str(raw.get("state_reason") or "None"),
                restarts=_number(raw.get("restart_cnt")) or 0,
                partition=str(raw.get("partition") or ""),
                node_count=_number(raw.get("node_count")) or 0,
                nodes=str(raw.get("nodes") or ""),
                submit_time=_time(raw.get("submit_time")),
                start_time=_time(raw.get("start_time")),
                end_time=_time(raw.get("end_time")),
                exit_code=code,
                exit_signal=signal,
                comment=str(raw.get("comment") or ""),
                gres=str(raw.get("tres_per_node") or ""),
                stdout=str(raw.get("standard_output") or ""),
                user_id=_number(raw.get("user_id")),
                user_name=str(raw.get("user_name") or ""),
            )
        )
    return jobs


def owned_by(jobs: list[SlurmJob], uid: int, name: str) -> list[SlurmJob]:
    """The jobs the user ``uid`` submitted. ``squeue --json`` and ``sacct`` list every user's jobs
    (unless the cluster sets ``PrivateData=jobs``), and a job's name and comment are whatever its
    submitter chose: only the owner tells gpuctl's jobs from another user's copies."""
    return [job for job in jobs if job.owned_by(uid, name)]


SACCT_FIELDS = (
    "JobIDRaw,JobName,State,ExitCode,Submit,Start,End,Partition,NNodes,NodeList,Comment,AllocTRES,WorkDir,"
    "UID,User"
)
"""``sacct --parsable2 --format`` fields, in order (22.05 has no StdOut field: the job's folder is its
WorkDir, since gpuctl submits with ``--chdir``)."""


def parse_sacct(text: str, delimiter: str = "|") -> list[SlurmJob]:
    """``sacct -X -D -P -n --delimiter=DELIMITER --format=SACCT_FIELDS`` lines: one per run, a requeued
    job's earlier runs first (they become ``restarts`` 0, 1, ...). ``stdout`` is the attempt's log in
    the WorkDir. sacct prints comments and folders as they are, newlines included, so a line is a row
    only with exactly one field per name: give a ``delimiter`` no submitter can know in advance and a
    comment cannot forge a row."""
    runs: dict[int, int] = {}
    jobs = []
    for line in text.splitlines():
        parts = line.split(delimiter)
        if len(parts) != len(SACCT_FIELDS.split(",")) or not parts[0].isdigit():
            continue
        (
            raw_id,
            name,
            state,
            exit_code,
            submit,
            start,
            end,
            partition,
            nnodes,
            nodes,
            comment,
            tres,
            workdir,
            uid,
            user,
        ) = parts
        job_id = int(raw_id)
        restarts = runs.get(job_id, -1) + 1
        runs[job_id] = restarts
        code, _, signal = exit_code.partition(":")
        node_count = int(nnodes) if nnodes.isdigit() else 0
        state = state.split()[0] if state else "UNKNOWN"  # "CANCELLED by 0"
        attempt = comment.split(":")[2] if comment.count(":") >= 2 else "1"
        jobs.append(
            SlurmJob(
                job_id=job_id,
                name=name,
                state=state,
                reason="None",
                restarts=restarts,
                partition=partition,
                node_count=node_count,
                nodes=nodes if nodes not in ("None assigned", "(null)") else "",
                submit_time=_scontrol_time(submit),
                start_time=_scontrol_time(start),
                end_time=_scontrol_time(end) if state in FINISHED_STATES or state == "REQUEUED" else None,
                exit_code=int(code) if code.isdigit() else None,
                exit_signal=int(signal) if signal.isdigit() and int(signal) else None,
                comment=comment,
                gres=_gres_per_node(tres, node_count),
                stdout=f"{workdir}/{slurm_output_name(attempt)}" if workdir else "",
                user_id=int(uid) if uid.isdigit() else None,
                user_name=user,
            )
        )
    return jobs


def _gres_per_node(alloc_tres: str, nodes: int) -> str:
    """``gres/gpu:fake=2,...`` over ``nodes`` nodes -> ``gpu:fake:1`` (the squeue ``tres_per_node`` form)."""
    for item in alloc_tres.split(","):
        key, _, value = item.partition("=")
        if key.startswith("gres/gpu:") and value.isdigit():
            return f"gpu:{key.removeprefix('gres/gpu:')}:{int(value) // max(1, nodes)}"
    return ""


_PAIR = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9/:_]*)=")


def parse_scontrol_pairs(line: str) -> dict[str, str]:
    """``Key=Value Key2=Value with spaces`` -> dict (a value runs up to the next `` Key=``)."""
    matches = list(_PAIR.finditer(line.strip()))
    out = {}
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(line.strip())
        out[m.group(1)] = line.strip()[m.end() : end].strip()
    return out


def _scontrol_time(text: str) -> datetime | None:
    try:
        return datetime.fromisoformat(text).astimezone(UTC)
    except ValueError:
        return None  # "Unknown", "None", "N/A"


def parse_scontrol_job(line: str) -> SlurmJob:
    """One line of ``scontrol show job -o ID``. No owner: a job name or comment holding
    `` UserId=...`` text would pass for it, so gpuctl reads jobs (and their owners) from squeue's JSON."""
    kv = parse_scontrol_pairs(line)
    code, _, signal = kv.get("ExitCode", "").partition(":")
    state = kv.get("JobState", "UNKNOWN")
    started = state not in ("PENDING", "REQUEUED")
    return SlurmJob(
        job_id=int(kv["JobId"]),
        name=kv.get("JobName", ""),
        state=state,
        reason=kv.get("Reason", "None"),
        restarts=int(kv.get("Restarts", "0") or 0),
        partition=kv.get("Partition", ""),
        node_count=int(kv["NumNodes"].split("-")[0]) if kv.get("NumNodes", "").split("-")[0].isdigit() else 0,
        nodes=kv.get("NodeList", "") if kv.get("NodeList") != "(null)" else "",
        submit_time=_scontrol_time(kv.get("SubmitTime", "")),
        start_time=_scontrol_time(kv.get("StartTime", "")) if started else None,
        end_time=_scontrol_time(kv.get("EndTime", "")) if state in FINISHED_STATES else None,
        exit_code=int(code) if code.isdigit() else None,
        exit_signal=int(signal) if signal.isdigit() and int(signal) else None,
        comment=kv.get("Comment", "") if kv.get("Comment") != "(null)" else "",
        gres=kv.get("TresPerNode", ""),
        stdout=kv.get("StdOut", ""),
    )


FINISHED_STATES = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "OUT_OF_MEMORY",
        "BOOT_FAIL",
        "DEADLINE",
        "REVOKED",
        "SPECIAL_EXIT",
    }
)
"""States after which the job does not run again by itself (a requeued job shows PENDING/REQUEUED)."""

_S, _P, _F = JobStatus, NodePhase, FailureReason
_MAPPING: dict[str, tuple[JobStatus, NodePhase, FailureReason | None, str]] = {
    "PENDING": (_S.LAUNCHING, _P.STARTING, None, "waiting in the SLURM queue"),
    "CONFIGURING": (_S.LAUNCHING, _P.STARTING, None, "nodes are being configured"),
    "RUNNING": (_S.RUNNING, _P.RUNNING, None, "running"),
    "COMPLETING": (_S.RUNNING, _P.RUNNING, None, "finishing"),
    "SUSPENDED": (_S.RUNNING, _P.RUNNING, None, "suspended by SLURM"),
    "STOPPED": (_S.RUNNING, _P.RUNNING, None, "stopped by SLURM"),
    "RESIZING": (_S.RESCALING, _P.RUNNING, None, "changing size"),
    "REQUEUED": (_S.RECOVERING, _P.PREEMPTED, None, "requeued; will resume from its checkpoint"),
    "REQUEUE_FED": (_S.RECOVERING, _P.PREEMPTED, None, "requeued; will resume from its checkpoint"),
    "REQUEUE_HOLD": (_S.RECOVERING, _P.PREEMPTED, None, "requeued and held (scontrol release to go on)"),
    "PREEMPTED": (_S.PREEMPTED, _P.PREEMPTED, None, "preempted by a higher-priority job"),
    "COMPLETED": (_S.SUCCEEDED, _P.SUCCEEDED, None, "completed"),
    "FAILED": (_S.FAILED, _P.FAILED, _F.USER_CODE_ERROR, "the training command failed"),
    "OUT_OF_MEMORY": (_S.FAILED, _P.FAILED, _F.USER_CODE_ERROR, "out of memory (raise memory_gib_per_node)"),
    "TIMEOUT": (_S.FAILED, _P.FAILED, _F.BACKEND_ERROR, "hit the SLURM time limit"),
    "DEADLINE": (_S.FAILED, _P.LOST, _F.DEADLINE_IMPOSSIBLE, "passed its SLURM deadline"),
    "NODE_FAIL": (_S.FAILED, _P.LOST, _F.BACKEND_ERROR, "a node failed and the job was not requeued"),
    "BOOT_FAIL": (_S.FAILED, _P.LOST, _F.BACKEND_ERROR, "a node failed to boot"),
    "SPECIAL_EXIT": (_S.FAILED, _P.FAILED, _F.USER_CODE_ERROR, "held after a special exit code"),
    "CANCELLED": (_S.CANCELLED, _P.LOST, None, "cancelled"),
    "REVOKED": (_S.CANCELLED, _P.LOST, None, "revoked (federation)"),
}


def map_state(job: SlurmJob) -> StateMapping:
    """gpuctl's view of a SLURM job state; a pending job that has run before is RECOVERING."""
    status, phase, failure, message = _MAPPING.get(
        job.state, (JobStatus.RUNNING, NodePhase.RUNNING, None, f"unknown SLURM state {job.state}")
    )
    if job.state == "PENDING" and job.restarts > 0:
        status, phase = JobStatus.RECOVERING, NodePhase.STARTING
        message = f"requeued ({job.restarts}x), waiting to resume from its checkpoint"
    if job.state == "PENDING" and job.reason not in ("None", "Priority", "Resources", "BeginTime"):
        message += f" ({job.reason})"
    if job.state == "FAILED" and job.exit_code is not None:
        message += f" with exit code {job.exit_code}"
    return StateMapping(status, phase, failure, f"SLURM job {job.job_id} {job.state}: {message}")
