"""The sbatch script of one attempt.

Every value that comes from a job spec (env values, command arguments, paths, setup) is passed
through :func:`shlex.quote`; names that go into ``#SBATCH`` lines must be plain tokens. The values of
``env`` references (secrets) are never in the script: :meth:`SlurmBackend.launch` reads them and runs
sbatch with them in its environment (``--export=ALL``), so they reach the batch shell and, through
``srun``, the tasks; the script only checks that they arrived.

The batch shell traps the notice signals and forwards SIGTERM (the runtime's notice signal) to the
job step with ``scancel --signal=TERM``, never by killing ``srun`` (that would SIGKILL the tasks
before they checkpoint):

* USR1 (``--signal=B:USR1@GRACE`` before the time limit, or :meth:`SlurmBackend.notify`): forward,
  wait for the step, then ``scontrol requeue`` so the job resumes from its checkpoint (under the
  controller, ``requeue_on_notice=False``: exit with the step's "preempted" code instead, and the
  controller places the next attempt, maybe on the other partition);
* USR2 (:meth:`SlurmBackend.stop`): forward, wait, then cancel the job (CANCELLED, no requeue);
* TERM (``scancel``): forward, wait, exit with the step's code.

SLURM preempting the job (``PreemptMode=REQUEUE`` with a partition ``GraceTime``) sends SIGTERM to
the step's tasks only; the training checkpoints and exits, and the shell, seeing ``PreemptTime`` in
``scontrol show job``, handles it as USR1 (SLURM itself requeues only a job still running when the
grace ends).

A step that exits with :data:`~orchestrator.contract.PREEMPTED_EXIT_CODE` by itself (a notice file
from the monitor) is handled like USR1; a step that finished (exit code 0) is never requeued or cancelled.

The GPU monitor (unless its source is ``off``, see :mod:`orchestrator.backends.monitoring`) runs once
per node, started in the background by the node's step wrapper beside the launcher: it writes
``monitor-summary-<node>.jsonl`` in the job folder and its output to ``monitor-<node>.log``. When the
launcher ends the wrapper stops it (TERM, then KILL after 5 s) and exits with the launcher's code, so
a monitor that is missing, dies or hangs never fails or holds up the step.

Each node's output (the setup's, torchrun's, the training's and the wrapper's own) reaches the job's
output file with every line headed by its time, as on the local backend
(:mod:`orchestrator.backends.output_log`): the wrapper sends its output, by a process substitution,
through ``python3 -m orchestrator.backends.output_log`` run by the monitor command's interpreter
(:func:`node_python`), and exits with the launcher's code (:func:`timed_output`).
"""

from __future__ import annotations

import math
import re
import shlex
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from orchestrator import contract
from orchestrator.backends.base import LaunchRequest
from orchestrator.backends.monitoring import MonitorSettings
from orchestrator.backends.output_log import IGNORED_SIGNALS
from orchestrator.backends.slurm.config import SlurmClusterConfig
from orchestrator.backends.slurm.time_limit import TimeLimit, time_limit
from orchestrator.backends.torchrun import RESTARTING_AGENT_ENV
from orchestrator.errors import UserError
from orchestrator.spec.env import EnvReference, env_references, plain_env
from orchestrator.state.job_dir import SUMMARY_PREFIX, JobDir

_TOKEN = re.compile(r"^[A-Za-z0-9_.:@+/-]+$")
JOB_NAME_PREFIX = "gpuctl-"


@dataclass(frozen=True)
class BatchJob:
    """What ``sbatch`` gets: its arguments (no shell involved) and the script on stdin."""

    sbatch_args: list[str]
    script: str
    output_path: Path
    slurm_name: str
    note: str | None = None
    """What the user should know about this attempt (a time limit shorter than its work), or None."""


def slurm_job_name(job_id: str) -> str:
    return JOB_NAME_PREFIX + job_id


def output_path(job_dir: Path, attempt: int) -> Path:
    return JobDir(job_dir).slurm_output(attempt)


def runs_path(job_dir: Path) -> Path:
    return JobDir(job_dir).slurm_runs


def progress_path(job_dir: Path) -> Path:
    return JobDir(job_dir).progress


def _token(value: str, what: str) -> str:
    if not _TOKEN.match(value):
        raise UserError(
            f"{what} {value!r} cannot go into an sbatch option",
            "use only letters, digits and . _ : @ + / - in GPU type, partition, QOS names and job ids",
        )
    return value


def sbatch_options(
    request: LaunchRequest,
    config: SlurmClusterConfig,
    exact_nodes: bool = False,
    limit: TimeLimit | None = None,
) -> list[str]:
    """``exact_nodes``: ask for ``len(request.node_ids)`` nodes (the controller chose the count),
    else ``MIN-MAX`` for an elastic job. ``limit``: the attempt's ``--time`` (default: the time left
    to the deadline now, see :mod:`~orchestrator.backends.slurm.time_limit`)."""
    limit = limit or time_limit(request, config, datetime.now(UTC))
    spec, placement = request.spec, request.placement
    name = slurm_job_name(_token(request.job_id, "job id"))
    if exact_nodes:
        nodes = str(len(request.node_ids))
    elif request.min_nodes == request.max_nodes:
        nodes = str(request.min_nodes)
    else:
        nodes = f"{request.min_nodes}-{request.max_nodes}"
    gres = _token(config.gres_type(placement.gpu_type), "GRES type")
    grace = max(1, math.ceil(spec.checkpoint.notice_grace_seconds))
    elastic = request.min_nodes != request.max_nodes
    options = [
        f"--job-name={name}",
        f"--comment=gpuctl:{request.job_id}:{request.attempt}:{_token(placement.gpu_type, 'GPU type')}",
        f"--nodes={nodes}",
        "--ntasks-per-node=1",
        f"--gres=gpu:{gres}:{placement.gpus_per_node}",
        f"--signal=B:USR1@{grace}",
        "--requeue",
        "--open-mode=append",
        f"--time={_token(limit.value, 'time limit')}",
    ]
    if elastic:  # a failed node leaves the job instead of ending it: the survivors keep training
        options.append("--no-kill")
    if spec.resources.cpus_per_node:
        options.append(f"--cpus-per-task={math.ceil(spec.resources.cpus_per_node)}")
    if spec.resources.memory_gib_per_node:
        options.append(f"--mem={math.ceil(spec.resources.memory_gib_per_node * 1024)}M")
    partition = config.partition(placement.market)
    if partition:
        options.append(f"--partition={_token(partition, 'partition')}")
    qos = config.qos.get(placement.market)
    if qos:
        options.append(f"--qos={_token(qos, 'QOS')}")
    return options


def contract_env(request: LaunchRequest) -> dict[str, str]:
    """The :mod:`orchestrator.contract` variables (the attempt number is computed in the script)."""
    spec = request.spec
    every = spec.checkpoint.every
    return contract.training_env(
        job_id=request.job_id,
        checkpoint_dir=request.checkpoint_dir,
        keep=spec.checkpoint.keep,
        every_steps=spec.checkpoint.every_steps,
        every_seconds=int(every.total_seconds()) if every else None,
        global_batch=spec.policies.global_batch,
        progress_file=str(progress_path(request.job_dir)),
        tune=spec.runtime.tune.value,
    )


_STEP_LOOP = """\
notice=""
forward_notice() {
    notice=$1
    scancel --signal=TERM "$SLURM_JOB_ID"
}
trap 'forward_notice requeue' USR1
trap 'forward_notice stop' USR2
trap 'forward_notice term' TERM
"""

LINGER_AFTER_FINISHED_S = 30
"""A step still running this long after the training wrote its ``finished`` record is ended and the
run counts as done: a worker hung at exit (docs/runtime.md, "End of a DDP run"), torchrun's exit
barrier or an agent waiting on a store that is gone can hold a node's agent long after the training
finished, and those minutes are billed. The controller does the same for its nodes
(``orchestrator.controller.reconcile``); this covers ``gpuctl sbatch``."""

_WAIT_AND_REQUEUE = """\
step_pid=$!
finished_flag="$runs_file.finished-$SLURM_JOB_ID-${SLURM_RESTART_COUNT:-0}"
(
    while kill -0 "$step_pid" 2>/dev/null; do
        # only this run's records, and of them only the last 4 KiB: "finished" is the last record
        size=$(stat -c %s "$GPUCTL_PROGRESS_FILE" 2>/dev/null || echo 0)
        from=$(( size - 4096 > progress_offset ? size - 4096 : progress_offset ))
        if tail -c +$(( from + 1 )) "$GPUCTL_PROGRESS_FILE" 2>/dev/null | grep -q '"event": "finished"'; then
            sleep LINGER
            if kill -0 "$step_pid" 2>/dev/null; then
                echo "gpuctl: training finished LINGER s ago but the step still runs (a worker or torchrun hung at exit); ending it" >&2
                : >"$finished_flag"
                scancel --signal=KILL "$SLURM_JOB_ID"
            fi
            exit 0
        fi
        sleep 2
    done
) &
linger_watch=$!
while :; do
    wait "$step_pid"
    rc=$?
    kill -0 "$step_pid" 2>/dev/null || break
done
kill "$linger_watch" 2>/dev/null
if [[ -e $finished_flag ]]; then
    rc=0
    rm -f "$finished_flag"
fi
# SLURM preempting the job (PreemptMode=REQUEUE with a GraceTime) signals the step, not this shell,
# and requeues only a job still running when the grace ends: a step that checkpointed and exited
# early is a notice all the same.
if [[ $rc -ne 0 && -z $notice ]] && scontrol show job -o "$SLURM_JOB_ID" 2>/dev/null | grep -q "PreemptTime=[0-9]"; then
    notice=requeue
fi
echo "end $SLURM_JOB_ID ${SLURM_RESTART_COUNT:-0} $(date +%s) $rc $notice" >>"$runs_file"
if [[ $rc -ne 0 && ( $notice == requeue || ( $rc -eq PREEMPTED && -z $notice ) ) ]]; then
    if [[ $requeue_on_notice == 0 ]]; then  # torchrun exits 1 whatever its workers' codes were
        echo "gpuctl: job $SLURM_JOB_ID preempted (notice=${notice:-none}, step exit code $rc)" >&2
        exit PREEMPTED
    fi
    echo "gpuctl: requeueing job $SLURM_JOB_ID (notice=${notice:-none}, step exit code $rc)" >&2
    scontrol requeue "$SLURM_JOB_ID"
    exit 0
fi
if [[ $rc -ne 0 && $notice == stop ]]; then
    scancel "$SLURM_JOB_ID"
fi
exit "$rc"
"""


_TIMED_OUTPUT = """\
trap : TERM
exec {{output}}> >(trap '' {ignored}; {writer} 2>/dev/null || {{ echo {note}"$SLURMD_NODENAME"; exec cat; }})
output_writer=$!
(
exec {{output}}>&-
{payload}) >&"$output" 2>&1
rc=$?
exec {{output}}>&-
for _ in {{1..{polls}}}; do
    kill -0 "$output_writer" 2>/dev/null || break
    sleep 0.2
done
exit "$rc"
"""

OUTPUT_DRAIN_S = 5
"""How long a node's wrapper waits, after the launcher ended, for the output writer to write what it
read: longer only when a process the launcher left behind still holds the pipe open (its lines so far
are written; the wrapper then exits and SLURM ends what is left of the step)."""

OUTPUT_WRITER_MODULE = "orchestrator.backends.output_log"

_NODE_WITH_MONITOR = """\
export {node_id_var}="$GPUCTL_JOB_ID-$SLURMD_NODENAME"
trap : TERM
"$@" &
trainer=$!
{monitor} --summary-file={summary}"$SLURMD_NODENAME".jsonl --notify-pid="$trainer" \
    </dev/null >>{log}"$SLURMD_NODENAME".log 2>&1 &
monitor=$!
while :; do
    wait "$trainer"
    rc=$?
    kill -0 "$trainer" 2>/dev/null || break
done
kill -TERM "$monitor" 2>/dev/null
for _ in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25; do
    kill -0 "$monitor" 2>/dev/null || break
    sleep 0.2
done
kill -KILL "$monitor" 2>/dev/null
wait "$monitor" 2>/dev/null
if [[ $? -eq 3 ]]; then
    echo "gpuctl: GPU monitor: no NVML on $SLURMD_NODENAME; utilization not measured" >&2
fi
exit "$rc"
"""


def node_python(monitor: MonitorSettings) -> tuple[str, ...]:
    """How a compute node runs gpuctl's Python: the interpreter of the monitor's command when it is
    ``PYTHON... -m orchestrator.monitor`` (``GPUCTL_MONITOR_COMMAND``), else ``python3``."""
    command = monitor.command
    if len(command) > 2 and command[-2:] == ("-m", "orchestrator.monitor"):
        return command[:-2]
    return ("python3",)


def timed_output(monitor: MonitorSettings, payload: str) -> str:
    """A task's ``bash -c`` script that runs ``payload`` (in a subshell, with the task's ``$@``) with
    its output, and its children's, going through the output writer
    (:mod:`orchestrator.backends.output_log`), each line timed, by a process substitution: no
    pipeline stage stands between the launcher and the signals SLURM sends the step's process group,
    and the payload's exit code is the script's. The writer, and the process substitution that runs
    it, ignore the signals of a step and end when the pipe does; the script waits for them at most
    :data:`OUTPUT_DRAIN_S`, polling (the payload's subshell, not this shell, waits for the launcher:
    no ``wait`` of it can block on the writer). A writer that cannot run (no gpuctl for that python
    on the node) costs one line: the output then goes through ``cat``, untimed."""
    q = shlex.quote
    writer = [*node_python(monitor), "-m", OUTPUT_WRITER_MODULE]
    note = f"gpuctl: note: {' '.join(writer)} did not run; lines not timed on "
    return _TIMED_OUTPUT.format(
        ignored=" ".join(name.removeprefix("SIG") for name in IGNORED_SIGNALS),
        writer=" ".join(q(part) for part in writer),
        note=q(note),
        payload=payload,
        polls=int(OUTPUT_DRAIN_S / 0.2),
    )


ELASTIC_RDZV_CONF = "last_call_timeout=15,join_timeout=300,keep_alive_interval=1,keep_alive_max_attempt=3"
"""torchrun's rendezvous settings for an elastic job: a lost node is noticed in about 3 s. The
rendezvous closes at once when all the job's nodes joined; the last call (15 s) only matters when
fewer than that come (a survivor alone), and keeps a node that is slow to start on a busy machine in
the first world."""


def rendezvous_conf(request: LaunchRequest) -> str:
    """The line each node's task runs first: its torchrun ``--rdzv-conf`` (``PET_RDZV_CONF``).

    Only the first node of the allocation (``GPUCTL_RDZV_HOST_NODE``, the batch host) hosts the c10d
    store (``is_host=true``): torchrun's own guess (does the endpoint name this machine?) is true on
    every node when several nodes share a host (the dev cluster), and the store could land on a node
    whose loss would end the rendezvous of the survivors.
    """
    elastic = "," + ELASTIC_RDZV_CONF if request.min_nodes != request.max_nodes else ""
    return (
        'if [[ $SLURMD_NODENAME == "$GPUCTL_RDZV_HOST_NODE" ]]; then rdzv_host=true; else rdzv_host=false; fi\n'
        f'export PET_RDZV_CONF="is_host=$rdzv_host{elastic}"\n'
    )


def node_wrapper(request: LaunchRequest, monitor: MonitorSettings) -> str:
    """The ``bash -c`` script each node's task runs (the launcher command line is its ``$@``)."""
    rdzv = rendezvous_conf(request)
    if not monitor.enabled:
        payload = rdzv + f'export {contract.ENV_NODE_ID}="$GPUCTL_JOB_ID-$SLURMD_NODENAME"\nexec "$@"\n'
        return timed_output(monitor, payload)
    q = shlex.quote
    command = [*monitor.command, *monitor.arguments(request.job_id, monitor.addr)]
    return timed_output(
        monitor,
        rdzv
        + _NODE_WITH_MONITOR.format(
            node_id_var=contract.ENV_NODE_ID,
            monitor=" ".join(q(part) for part in command),
            summary=q(str(request.job_dir / SUMMARY_PREFIX)),
            log=q(str(request.job_dir / "monitor-")),
        ),
    )


def setup_wrapper(monitor: MonitorSettings) -> str:
    """The ``bash -c`` script each node's setup task runs (the spec's setup command is its ``$1``)."""
    return timed_output(monitor, 'exec bash -c "$1"\n')


def _reference_checks(references: dict[str, EnvReference]) -> list[str]:
    """For each ``env`` reference, a comment saying where its value comes from and a check that it
    arrived: the value is in sbatch's environment (``--export=ALL``), never in this script."""
    lines = []
    for name, ref in references.items():
        lines.append(f"# {name}: {ref.describe()}; its value is in sbatch's environment, not here")
        message = (
            f"gpuctl: {name} ({ref.describe()}) did not reach the job; was sbatch run with --export=NONE?"
        )
        lines.append(f"[[ -v {name} ]] || {{ echo {shlex.quote(message)} >&2; exit 1; }}")
    return lines


def render_batch_job(
    request: LaunchRequest,
    config: SlurmClusterConfig,
    monitor: MonitorSettings | None = None,
    requeue_on_notice: bool = True,
    now: datetime | None = None,
    partition_limit: str | None = None,
) -> BatchJob:
    """``monitor`` defaults to :meth:`MonitorSettings.from_env` (``GPUCTL_MONITOR_*``); ``now`` (the
    launch time, default the clock) and ``partition_limit`` (the partition's ``MaxTime``) set ``--time``.

    ``requeue_on_notice=False`` is the controller's form: one SLURM job per attempt, asking for
    exactly the attempt's nodes, ending with the "preempted" exit code on a notice.
    """
    spec, q = request.spec, shlex.quote
    monitor = monitor if monitor is not None else MonitorSettings.from_env()
    limit = time_limit(request, config, now or datetime.now(UTC), partition_limit)
    options = sbatch_options(request, config, exact_nodes=not requeue_on_notice, limit=limit)
    out = output_path(request.job_dir, request.attempt)
    lines = ["#!/bin/bash", *(f"#SBATCH {opt}" for opt in options)]
    lines += [
        "# Generated by gpuctl; every value from the job spec is shell-quoted.",
        "set -u",
        *([f"echo {q('gpuctl: warning: ' + limit.note)} >&2"] if limit.note else []),
        f"export {contract.ENV_ATTEMPT}=$(( {int(request.attempt)} + ${{SLURM_RESTART_COUNT:-0}} ))",
    ]
    env = {**plain_env(spec.env), **contract_env(request)}
    lines += [f"export {key}={q(value)}" for key, value in env.items()]
    lines += _reference_checks(env_references(spec.env))
    lines += [
        f"runs_file={q(str(runs_path(request.job_dir)))}",
        'echo "start $SLURM_JOB_ID ${SLURM_RESTART_COUNT:-0} $(date +%s) $SLURM_JOB_NUM_NODES'
        ' $SLURM_JOB_NODELIST" >>"$runs_file"',
        f"cd {q(str(Path(spec.workdir).absolute()))} || exit 1",
        'head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        # the node's address (NodeAddr): a NodeName need not resolve (several nodes on one host)
        'head_addr=$(scontrol show node -o "$head_node" | tr " " "\\n" | sed -n "s/^NodeAddr=//p")',
        'export GPUCTL_RDZV_HOST_NODE="$head_node"',
        f"rdzv_port=$(( {config.rendezvous_port_base} + SLURM_JOB_ID % 10000 ))",
        f"requeue_on_notice={int(requeue_on_notice)}",
        # where this run's progress records start (a finished record before it is not this run's)
        f'progress_offset=$(stat -c %s "${contract.ENV_PROGRESS_FILE}" 2>/dev/null || echo 0)',
        _STEP_LOOP,
    ]
    if spec.setup:
        lines.append(f"srun bash -c {q(setup_wrapper(monitor))} gpuctl-setup {q(spec.setup)} || exit $?")
    node_id = node_wrapper(request, monitor)
    launcher = " ".join(q(part) for part in config.launcher)
    elastic = request.min_nodes != request.max_nodes
    torchrun_args = [
        # elastic: from the spec's minimum up to the nodes SLURM gave; survivors of a lost node go on
        f'--nnodes={int(request.min_nodes)}:"$SLURM_JOB_NUM_NODES"'
        if elastic
        else '--nnodes="$SLURM_JOB_NUM_NODES"',
        f"--nproc-per-node={int(request.placement.gpus_per_node)}",
        f"--max-restarts={100 if elastic else 0}",
        "--rdzv-backend=c10d",
        '--rdzv-endpoint="${head_addr:-$head_node}:$rdzv_port"',
        '--rdzv-id="$SLURM_JOB_ID-${SLURM_RESTART_COUNT:-0}"',
    ]
    if elastic:
        torchrun_args.append("--monitor-interval=0.5")
        lines += [f"export {key}={q(value)}" for key, value in RESTARTING_AGENT_ENV.items()]
    user_argv = " ".join(q(arg) for arg in spec.command_argv)
    # elastic: a failed node's task ends alone (--no-kill), else one failed node ends the step
    step_option = "--no-kill" if elastic else "--kill-on-bad-exit=1"
    lines.append(
        f"srun {step_option} bash -c {q(node_id)} gpuctl-node {launcher} "
        f"{' '.join(torchrun_args)} {user_argv} &"
    )
    lines.append(
        _WAIT_AND_REQUEUE.replace("PREEMPTED", str(contract.PREEMPTED_EXIT_CODE)).replace(
            "LINGER", str(LINGER_AFTER_FINISHED_S)
        )
    )
    script = "\n".join(lines)
    args = [f"--output={out}", f"--chdir={request.job_dir}"]
    if env_references(spec.env):  # the values travel in sbatch's environment to the batch shell
        args.append("--export=ALL")
    return BatchJob(
        sbatch_args=args,
        script=script,
        output_path=out,
        slurm_name=slurm_job_name(request.job_id),
        note=limit.note,
    )
