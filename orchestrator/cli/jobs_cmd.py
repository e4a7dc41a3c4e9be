"""`gpuctl submit`, `list`, `status`, `events`, `logs`, `cancel` and `controller run`."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from datetime import UTC, datetime
from types import FrameType
from typing import Any

from rich.console import Console
from rich.live import Live

from orchestrator import extras
from orchestrator.backends import monitoring
from orchestrator.backends.base import Backend
from orchestrator.backends.local.backend import LocalBackend, attempt_folders
from orchestrator.backends.local.market import SimulatedMarket, parse_schedule, preemption_schedule
from orchestrator.backends.progress import read_progress
from orchestrator.backends.slurm import SlurmBackend, load_cluster_config
from orchestrator.backends.slurm.config import CONFIG_ENV as SLURM_CONFIG_ENV
from orchestrator.backends.slurm.placements import own_placements
from orchestrator.cli import kube_jobs, slurm_cmd
from orchestrator.cli.avoidable_view import diagnose_job
from orchestrator.cli.job_filters import JobFilter, add_list_filters, watch
from orchestrator.cli.log_files import LogView, print_logs
from orchestrator.cli.output import add_output_option, print_json, print_notes
from orchestrator.cli.secret_checks import check_references_now, warn_plain_secrets
from orchestrator.cli.status_document import local_document
from orchestrator.cli.views import (
    live_table,
    print_jobs,
    print_status,
    print_unmanaged_note,
    summary_lines,
)
from orchestrator.controller.admission import Refused, admit
from orchestrator.controller.driver import stored_spec
from orchestrator.controller.loop import (
    Controller,
    ControllerLock,
    controller_log,
    controller_running,
    spawn_background_controller,
)
from orchestrator.controller.placement import Candidates, candidates_for
from orchestrator.costs.budgets import (
    load_cost_config,
    submitted_user_standing,
    team_month_spent,
    with_namespace_team,
)
from orchestrator.errors import NotFoundError, SpecError, UserError
from orchestrator.home import home_dir
from orchestrator.spec import JobSpec, load_spec_file
from orchestrator.state.forecast import forecast
from orchestrator.state.job_dir import JobDir
from orchestrator.state.job_state import JobState
from orchestrator.state.leases import lease_holder
from orchestrator.state.records import JobRecord
from orchestrator.state.row_check import DamagedRow
from orchestrator.state.state_rows import load_state
from orchestrator.state.status import JobStatus
from orchestrator.state.store import JobStore
from orchestrator.state.usage import UsageStore
from orchestrator.terminal import terminal_text

BACKENDS = ["local", "slurm"]
"""Backends a gpuctl controller drives (on SLURM it runs on a login node)."""
SUBMIT_BACKENDS = [*BACKENDS, "kubernetes"]
"""Kubernetes jobs are driven by the in-cluster operator; the CLI only talks to the API server."""


def make_backend(name: str, store: JobStore, launches: bool = False) -> Backend:
    """The backend ``name``; ``launches``: it will start nodes, so what that needs must be installed."""
    if name == "local":
        if launches:  # each node is a torchrun agent: refuse before a job is stored that cannot start
            extras.check("torch", "the local backend (each node runs under torchrun)")
        return LocalBackend(store)
    if name == "slurm":  # the cluster config from $GPUCTL_SLURM_CONFIG or $GPUCTL_HOME/slurm.yaml
        return SlurmBackend(load_cluster_config(), controller_owned=True)
    raise UserError(f"unknown backend '{name}'", f"use one of {', '.join(BACKENDS)}")


JOB_HELP = "job id or name (as `gpuctl list` shows it)"


def register(sub: Any) -> None:
    p = sub.add_parser("submit", help="submit a job and follow it (or --detach)")
    p.add_argument("file", help="job spec (YAML)")
    _backend_options(p)
    p.add_argument("--detach", action="store_true", help="leave a background controller running and return")
    p.add_argument("--monitor-source", metavar="SOURCE",
                   help="GPU monitor on each node: nvml (default), replay:FILE (recorded samples) or off; "
                        f"default ${monitoring.ENV_SOURCE}")  # fmt: skip
    market = p.add_argument_group("simulated spot market (local backend)")
    market.add_argument("--preempt-at", action="append", default=[], metavar="WHEN",
                        help="reclaim spot capacity at WHEN: '30s' after submission or 'step:40'; repeatable")  # fmt: skip
    market.add_argument("--outage", default="10s", help="how long capacity stays gone after --preempt-at")
    market.add_argument("--spot-schedule", metavar="CHANGES",
                        help="capacity changes, e.g. 'step:20=1,after:15s=inf' (see docs)")  # fmt: skip
    market.add_argument(
        "--spot-trace",
        metavar="[ZONE=]FILE",
        action="append",
        default=[],
        help="spot availability trace (shared/data format); repeat as ZONE=FILE for one per zone",
    )
    market.add_argument("--trace-speedup", type=float, default=3600.0, help="trace seconds per real second")
    market.add_argument("--trace-start-tick", type=int, default=0, metavar="N",
                        help="start at the trace's tick N (default 0: its first)")  # fmt: skip
    p.set_defaults(run=run_submit)

    p = sub.add_parser("list", help="list jobs (ID and STATE are never cut; -o wide: every column)")
    _backend_options(p)
    add_output_option(p, wide=True)
    add_list_filters(p)
    p.set_defaults(run=run_list)

    p = sub.add_parser("status", help="show one job (--backend slurm: ask SLURM, no controller state)")
    _backend_options(p)
    p.add_argument("job", help="job id or name (--backend slurm: also a SLURM job id)")
    add_output_option(p)
    p.set_defaults(run=run_status)

    p = sub.add_parser("events", help="a job's event history (Kubernetes: its conditions and Events)")
    _backend_options(p)
    p.add_argument("job", help=JOB_HELP)
    add_output_option(p)
    p.set_defaults(run=run_events)

    p = sub.add_parser("logs", help="a job's output, all nodes and attempts")
    _backend_options(p)
    p.add_argument("job", help=JOB_HELP)
    p.add_argument("-f", "--follow", action="store_true", help="keep printing until the job ends")
    p.add_argument("--tail", type=_lines, metavar="N",
                   help="start each output file at its last N lines (default: from its start)")  # fmt: skip
    p.add_argument("--attempt", type=_lines, metavar="N", help="only the output of attempt N")
    p.add_argument("--node", metavar="NAME",
                   help="only the output of node NAME (its id, or n0, n1, ...; Kubernetes: or its pod's name)")  # fmt: skip
    p.add_argument("--no-timestamps", action="store_true",
                   help="leave out each line's time (UTC: when the node wrote it; Kubernetes: when it was logged)")  # fmt: skip
    p.add_argument("--raw", action="store_true",
                   help="each line as written: time heads kept, torchrun's signal tracebacks not folded")  # fmt: skip
    p.set_defaults(run=run_logs)

    p = sub.add_parser(
        "cancel",
        help="cancel a job (its nodes get the notice, then stop; it ends CANCELLED with its cost kept)",
        description="Cancel a job: its nodes get the checkpoint notice, then stop, and it ends CANCELLED "
        "with its segments and cost kept. On Kubernetes the GPUJob is marked (spec.cancel: true) and the "
        "operator cancels it; the GPUJob stays until `kubectl delete gpujob NAME` removes it.",
    )
    _backend_options(p)
    p.add_argument("job", help=JOB_HELP)
    p.set_defaults(run=run_cancel)

    ctl = sub.add_parser("controller", help="the background controller")
    ctl_sub = ctl.add_subparsers(dest="controller_command", metavar="SUBCOMMAND", required=True)
    p = ctl_sub.add_parser("run", help="run the controller in the foreground until stopped")
    p.add_argument(
        "--backend", default="local", choices=BACKENDS, help="the backend it drives (default local)"
    )
    _cluster_config_option(p.add_argument_group("SLURM"))
    p.add_argument("--exit-when-idle", action="store_true", help="exit once no job is left to run")
    p.add_argument("--detach", action="store_true",
                   help="start it in the background (it exits once no job is left to run) and return")  # fmt: skip
    p.set_defaults(run=run_controller)


def _lines(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"not a number of lines: {text!r}")
    return int(text)


def _backend_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--backend", default="local", choices=SUBMIT_BACKENDS, help="where the job runs (default local)"
    )
    kube = p.add_argument_group("Kubernetes (--backend kubernetes)")
    kube.add_argument("--namespace", default=kube_jobs.default_namespace(),
                      help="namespace of the GPUJob (default $GPUCTL_NAMESPACE or 'default')")  # fmt: skip
    _cluster_config_option(p.add_argument_group("SLURM (--backend slurm)"))


def _cluster_config_option(p: Any) -> None:
    p.add_argument("--cluster-config", metavar="FILE",
                   help=f"SLURM cluster config (default ${SLURM_CONFIG_ENV} or $GPUCTL_HOME/slurm.yaml)")  # fmt: skip


def _use_cluster_config(args: argparse.Namespace) -> None:
    """``--cluster-config`` goes into the environment, so a controller this process spawns reads it too."""
    if getattr(args, "cluster_config", None):
        os.environ[SLURM_CONFIG_ENV] = os.path.abspath(args.cluster_config)


def _market_options(args: argparse.Namespace) -> dict[str, Any]:
    if args.spot_trace and (args.preempt_at or args.spot_schedule):
        raise UserError("--spot-trace cannot be combined with --preempt-at or --spot-schedule", "pick one")
    schedule = preemption_schedule(args.preempt_at, args.outage)
    if args.spot_schedule:
        schedule += parse_schedule(args.spot_schedule)
    trace, zone_traces = _spot_traces(args.spot_trace)
    return SimulatedMarket.options(schedule, trace, args.trace_speedup, args.trace_start_tick, zone_traces)


def _spot_traces(values: list[str]) -> tuple[str | None, dict[str, str] | None]:
    """``--spot-trace FILE`` (one market for every zone) or ``--spot-trace ZONE=FILE ...``."""
    per_zone = [v for v in values if "=" in v]
    if not per_zone:
        if len(values) > 1:
            raise UserError("--spot-trace given twice without zones", "write one per zone as ZONE=FILE")
        return (values[0] if values else None), None
    if len(per_zone) != len(values):
        raise UserError("--spot-trace mixes FILE and ZONE=FILE", "name the zone of every trace: ZONE=FILE")
    zones = dict(v.split("=", 1) for v in per_zone)
    if len(zones) != len(per_zone):
        raise UserError("--spot-trace names a zone twice", "give one trace per zone")
    return None, zones


def run_submit(args: argparse.Namespace) -> int:
    now = datetime.now(UTC)
    spec = load_spec_file(args.file, now=now)
    costs = load_cost_config(home_dir() / "config.yaml")
    warn_plain_secrets(spec)
    if args.backend == "kubernetes":  # no team given: its namespace's
        spec = with_namespace_team(spec, costs, args.namespace)
        return kube_jobs.submit(spec, args.namespace, args.detach, costs, now)
    _use_cluster_config(args)
    store = JobStore()
    backend = make_backend(args.backend, store, launches=True)
    # Unknown policies and GPU types, impossible zones and budgets fail before anything is stored.
    decision = admit(
        spec,
        lambda s: _backend_candidates(s, backend),
        costs,
        lambda budget: team_month_spent(store.list_jobs(), store.segments(), budget.counts, now),
        user_spent=lambda user, limits: submitted_user_standing(
            store.list_jobs(), store.segments(), user, limits, now
        ),
    )
    if isinstance(decision, Refused):
        raise decision.error()
    backend.own_placements(spec)  # SLURM: the preflight (partitions and GRES types exist, via sinfo)
    lock = ControllerLock(store.home, args.backend)
    check_references_now(spec, controller_elsewhere=lock.held_elsewhere())  # secrets files, from_env
    deadline = spec.goals.deadline.resolve(now) if spec.goals.deadline else None
    options: dict[str, Any] = {"market": _market_options(args)}
    source = args.monitor_source or os.environ.get(monitoring.ENV_SOURCE)
    if source:  # kept with the job: a controller started elsewhere starts the same monitors
        options[monitoring.OPTIONS_KEY] = {"source": monitoring.parse_source(source)}
    with _Interrupts() as interrupts:  # from here on Ctrl-C hands the job over, never drops it
        job = store.create_job(
            name=spec.name, user=spec.user, team=spec.team, backend=args.backend,
            spec_json=spec.model_dump_json(), deadline=deadline, now=now, options=options,
        )  # fmt: skip
        if args.detach:
            if not lock.held_elsewhere():
                spawn_background_controller(store.home, args.backend)
            print(job.id)
            print(terminal_text(f"submitted; follow it with `gpuctl status {job.id}` or `gpuctl logs {job.id} -f`"),
                  file=sys.stderr)  # fmt: skip
            return 0
        return _attached(store, job.id, _Controlling(store, backend, lock), interrupts)


class _Interrupts:
    """Ctrl-C (SIGINT) and a closed terminal (SIGHUP) while ``submit`` follows its job: counted, never
    raised, so nothing is cut off half-done; the submit then hands the job to a background controller.
    More of them while it does so change nothing. Outside the main thread (no signals): nothing."""

    SIGNALS = (signal.SIGINT, signal.SIGHUP)

    def __init__(self) -> None:
        self.count = 0
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _Interrupts:
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self._previous[sig] = signal.signal(sig, self._note)
        return self

    def _note(self, _signum: int, _frame: FrameType | None) -> None:
        self.count += 1  # only a counter: a handler must not take locks the main thread may hold

    def __exit__(self, *_exc: object) -> None:
        # Interrupted: the job was handed over and the command is ending. A further Ctrl-C must change
        # nothing, also while Python shuts down (it then resets a Python handler to the default action,
        # which would end the process by the signal): ignored from here on.
        for sig, previous in self._previous.items():
            signal.signal(sig, signal.SIG_IGN if self.count else previous)

    def wait(self, seconds: float) -> None:
        """Sleep up to ``seconds``, less once interrupted."""
        end = time.monotonic() + seconds
        while not self.count and time.monotonic() < end:
            time.sleep(min(0.1, max(0.0, end - time.monotonic())))


class _Controlling:
    """The controller an attached ``submit`` runs while it follows its job (when no other holds the
    lock), and the hand-over that leaves every unfinished job to a background controller."""

    def __init__(self, store: JobStore, backend: Backend, lock: ControllerLock) -> None:
        self.store, self.backend, self.lock = store, backend, lock
        self.controller: Controller | None = None

    def take_over(self) -> None:
        """Run the controller here when none runs (the one that ran may have left: it was another
        attached submit whose job ended)."""
        if self.controller is not None or controller_running(self.store.home, self.backend.name):
            return
        if self.lock.acquire():
            self.controller = Controller(self.store, self.backend)
            self.controller.start()

    def errors(self) -> dict[str, str]:
        return self.controller.errors if self.controller is not None else {}

    def hand_over(self) -> str:
        """Stop ticking here and leave the jobs to a background controller; how they go on, in words."""
        if self.controller is not None:
            self.controller.stop()  # no tick here any more: never two controllers at once
        home, name = self.store.home, self.backend.name
        try:
            if self.lock.fd is None and controller_running(home, name):
                return "under the gpuctl controller that is running"
            pid = spawn_background_controller(home, name, self.lock)  # it inherits our lock, still held
        finally:
            self.lock.release()
        return f"under a background controller (pid {pid}, log {controller_log(home, name)})"

    def finish(self) -> str | None:
        """The followed job ended: stop, or hand over when other jobs (or nodes still stopping) need a
        controller; how they go on, in words (None: nothing is left)."""
        controller = self.controller
        if controller is not None and not controller.idle.is_set():
            return self.hand_over()
        if controller is not None:
            controller.stop()
        self.lock.release()
        return None


def _attached(store: JobStore, job_id: str, controlling: _Controlling, interrupts: _Interrupts) -> int:
    """Follow the job; on Ctrl-C, or an error of this command, it goes on in the background."""
    try:
        code = _follow(store, job_id, controlling, interrupts)
    except BaseException:
        how = controlling.hand_over()
        print(terminal_text(f"gpuctl: job {job_id} goes on {how}"), file=sys.stderr)
        raise
    if code is None:
        how = controlling.hand_over()
        print(terminal_text(
            f"gpuctl: interrupted; job {job_id} goes on {how}. Follow it: `gpuctl logs {job_id} -f` or "
            f"`gpuctl status {job_id}`; cancel it: `gpuctl cancel {job_id}`"), file=sys.stderr)  # fmt: skip
        return 130
    left = controlling.finish()
    if left is not None:
        print(f"gpuctl: note: the other unfinished jobs go on {left}", file=sys.stderr)
    return code


def _backend_candidates(spec: JobSpec, backend: Backend) -> Candidates:
    """Where the spec may run by the backend's prices: a SLURM cluster config's partitions (read from
    the config alone: the cluster is asked later, by the preflight), else the price catalog."""
    if isinstance(backend, SlurmBackend):
        return candidates_for(spec, own_placements(spec, backend.config))
    return candidates_for(spec, backend.own_placements(spec))


def _follow(store: JobStore, job_id: str, controlling: _Controlling, interrupts: _Interrupts) -> int | None:
    """The live panel until the job ends, then its summary: the exit code; None when interrupted first."""
    console = Console(stderr=True)
    with Live(console=console, refresh_per_second=2, transient=False) as live:
        while not interrupts.count:
            controlling.take_over()
            doc = job_document(store, job_id)
            waiting: str | None = controlling.errors().get(job_id) or doc.get("waiting_reason")
            live.update(live_table(doc, waiting))
            if doc["state"] in ("SUCCEEDED", "FAILED", "CANCELLED"):
                break
            interrupts.wait(0.5)
    if not console.is_terminal:  # the panel's last line has no newline there
        console.line()
    if interrupts.count:
        return None
    if controlling.controller is not None:  # let it finish its housekeeping (stop leftover nodes)
        time.sleep(controlling.controller.tick_seconds * 2)
    for line in summary_lines(job_document(store, job_id)):
        print(line)
    return 0 if doc["state"] == "SUCCEEDED" else 1


def job_document(store: JobStore, job_id: str, running: dict[str, bool] | None = None) -> dict[str, Any]:
    """The job's status document; rows of it that are damaged are left out (and noted in ``store``).
    ``running``: whether a controller runs, by backend, asked once per command (filled in here)."""
    job = store.job(job_id)
    progress = read_progress(JobDir(store.job_dir(job.id)).progress)
    usage = UsageStore(store).usage(job.id)
    try:
        state: JobState | None = load_state(store, job.id)
    except DamagedRow:  # shown without what its engine state adds (why it waits, the forecast)
        state = None
    found = (
        forecast(state, datetime.now(UTC), job.deadline, _budget(job))
        if state is not None and job.status is JobStatus.RUNNING
        else None
    )
    holder = None if job.status.terminal else lease_holder(store.connections, job.id)
    if store.sqlite:  # one controller per home, whose lock dies with it: a dead one's lease is no manager
        managed = _managed(store, job, running)
        holder = holder if managed else None
    else:  # PostgreSQL: a controller on any machine may hold the job's lease
        managed = True if holder is not None else _managed(store, job, running)
    document = local_document(job, store.segments(job.id), progress, store.summary(job.id), gpu_usage=usage,
                              state=state, forecast=found, managed=managed)  # fmt: skip
    return document.model_copy(update={"controller": holder}).as_json()


def job_status(store: JobStore, job_id: str) -> dict[str, Any]:
    """``gpuctl status JOB -o json``: the job's document with its findings priced (``avoidable``), which
    ``gpuctl list`` leaves null (it would diagnose every job)."""
    doc = job_document(store, job_id)
    doc["avoidable"] = diagnose_job(store, store.job(job_id)).avoidable.to_dict()
    return doc


def _managed(store: JobStore, job: JobRecord, running: dict[str, bool] | None) -> bool | None:
    """Whether a controller manages ``job`` now (None: it ended, or no gpuctl controller drives its backend)."""
    if job.status.terminal or job.backend not in BACKENDS:
        return None
    running = {} if running is None else running
    if job.backend not in running:
        running[job.backend] = controller_running(store.home, job.backend)
    return running[job.backend]


def _budget(job: JobRecord) -> float | None:
    """The job's ``goals.budget_usd`` (None when it has none, or its stored spec no longer reads)."""
    try:
        return stored_spec(job).goals.budget_usd
    except SpecError:
        return None


def run_list(args: argparse.Namespace) -> int:
    if args.backend == "kubernetes":
        if args.state or args.user or args.team or args.since or args.watch:
            raise UserError("--state, --user, --team, --since and --watch list local and SLURM jobs",
                            "for GPUJobs: `kubectl get gpujobs -n NAMESPACE -w`")  # fmt: skip
        return kube_jobs.list_jobs(args.namespace, args.output)
    JobFilter.from_args(args)  # a wrong filter fails at once; each round measures --since from its now
    return watch(lambda: _list_once(args, JobFilter.from_args(args)), args.watch)


def _list_once(args: argparse.Namespace, chosen: JobFilter) -> int:
    store = JobStore(read_only=True)
    docs = []
    running: dict[str, bool] = {}
    for job in store.list_jobs():  # a damaged job is left out, and noted
        if not chosen.keeps(job.status, job.user, job.team, job.submitted_at):
            continue
        try:
            docs.append(job_document(store, job.id, running))
        except DamagedRow:
            continue
    print_jobs(docs, args.output)
    print_notes(store.damaged.values())
    print_unmanaged_note(docs, args.output)
    return 0


def run_status(args: argparse.Namespace) -> int:
    if args.backend == "kubernetes":
        return kube_jobs.status(args.job, args.namespace, args.output)
    if args.backend == "slurm":
        _use_cluster_config(args)
        return slurm_cmd.status(args.job, load_cluster_config(), args.output)
    store = JobStore(read_only=True)
    print_status(job_status(store, store.job(args.job).id), args.output)  # a damaged job: the error
    print_notes(store.damaged.values())  # rows of it left out
    return 0


def run_events(args: argparse.Namespace) -> int:
    """Kubernetes: the GPUJob's conditions and Events; local and SLURM: the controller's store (a SLURM
    job sent with `gpuctl sbatch` has no controller, so no events: `gpuctl status --backend slurm`)."""
    if args.backend == "kubernetes":
        events = kube_jobs.job_events(args.job, args.namespace)
    else:
        store = JobStore(read_only=True)
        try:
            events = _stored_events(store, _stored_job(store, args.job, args.backend))
        except DamagedRow as damage:  # its jobs row: its events still tell what happened
            events = _stored_events(store, damage.job_id)
        print_notes(store.damaged.values())
    if args.output == "json":
        print_json(events)
        return 0
    for e in events:
        print(terminal_text(f"{e['time']}  {e['kind']:<18} {e['message']}"))
    return 0


def _stored_events(store: JobStore, job_id: str) -> list[dict[str, str]]:
    return [{"time": e.time.isoformat(timespec="seconds"), "kind": e.kind, "message": e.message}
            for e in store.events(job_id)]  # fmt: skip


def _stored_job(store: JobStore, name_or_id: str, backend: str) -> str:
    try:
        return store.job(name_or_id).id
    except NotFoundError:
        if backend != "slurm":
            raise
        raise NotFoundError(
            f"no job '{name_or_id}' in the gpuctl controller's store ({store.home})",
            "events are kept for jobs a gpuctl controller runs (`gpuctl submit --backend slurm`); for a "
            "job sent with `gpuctl sbatch` see `gpuctl status JOB --backend slurm`",
        ) from None


def run_logs(args: argparse.Namespace) -> int:
    view = LogView(timestamps=not args.no_timestamps, raw=args.raw)
    if args.backend == "kubernetes":
        return kube_jobs.logs(args.job, args.namespace, follow=args.follow, tail=args.tail, view=view,
                              choice=kube_jobs.PodChoice(args.attempt, args.node))  # fmt: skip
    store = JobStore()
    job = store.job(args.job)
    backend = make_backend(job.backend, store)
    if isinstance(backend, LocalBackend):
        for other in attempt_folders(store.job_dir(job.id))[1]:
            print(terminal_text(f"gpuctl: note: skipped {other}: not an attempt-<number> folder of gpuctl"),
                  file=sys.stderr)  # fmt: skip
    print_logs(lambda: backend.log_paths(job.id), lambda: store.job(job.id).status.terminal,
               attempt=args.attempt, node=args.node, view=view,
               tail=args.tail, follow=args.follow)  # fmt: skip
    return 0


def run_cancel(args: argparse.Namespace) -> int:
    if args.backend == "kubernetes":
        return kube_jobs.cancel(args.job, args.namespace)
    store = JobStore()
    job = store.job(args.job)
    if job.status.terminal:
        print(f"job {job.id} already ended ({job.status})")
        return 0
    store.request_cancel(job.id, datetime.now(UTC))
    _use_cluster_config(args)
    lock = ControllerLock(store.home, job.backend)
    if lock.acquire():  # no controller running: apply the cancel ourselves
        try:
            controller = Controller(store, make_backend(job.backend, store))
            try:
                controller.tick_job(job.id, datetime.now(UTC))
            finally:
                controller.hand_back()  # the next controller ticks the job at once
        finally:
            lock.release()
        problem = controller.errors.get(job.id)
        if problem:
            print(f"gpuctl: the cancel is recorded but could not be applied yet: {problem}\n"
                  "  the next `gpuctl controller run` applies it", file=sys.stderr)  # fmt: skip
        ended = store.job(job.id)
        if ended.status.terminal and ended.status is not JobStatus.CANCELLED:
            print(f"job {job.id} ended {ended.status} ({ended.failure_reason}): {ended.message}")
            return 0
    print(f"cancel requested for {job.id}")
    return 0


def run_controller(args: argparse.Namespace) -> int:
    _use_cluster_config(args)
    store = JobStore()
    if args.detach:
        return _detach_controller(store, args.backend)
    lock = ControllerLock(store.home, args.backend)
    if not (lock.adopt_inherited() or lock.acquire()) and store.sqlite:
        raise UserError(
            f"another gpuctl controller of the {args.backend} backend is already running for {store.home}",
            "stop it first, or use a different GPUCTL_HOME",
        )  # on a shared database (PostgreSQL) any number run: each job's lease decides who ticks it
    controller = Controller(store, make_backend(args.backend, store, launches=True))
    controller.start()
    print(f"gpuctl controller running (home {store.home}, backend {args.backend})", flush=True)
    try:
        while True:
            time.sleep(1.0)
            if args.exit_when_idle and controller.idle.is_set():
                time.sleep(controller.tick_seconds * 3)
                if controller.idle.is_set():
                    return 0
    finally:
        controller.stop()
        lock.release()


def _detach_controller(store: JobStore, backend: str) -> int:
    """``controller run --detach``: a background controller, unless one runs already."""
    if controller_running(store.home, backend):
        print(f"a gpuctl controller of the {backend} backend is already running for {store.home}")
        return 0
    make_backend(backend, store, launches=True)  # what it needs is installed, or say so now
    pid = spawn_background_controller(store.home, backend)
    print(f"gpuctl controller started in the background (pid {pid}, log {controller_log(store.home, backend)});"
          " it exits once no job is left to run")  # fmt: skip
    return 0
