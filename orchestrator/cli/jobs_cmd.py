"""`gpuctl submit`, `list`, `status`, `events`, `logs`, `cancel` and `controller run`."""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
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
from orchestrator.cli.log_files import LogFile, print_new_lines
from orchestrator.cli.output import add_output_option, print_json, print_notes
from orchestrator.cli.secret_checks import check_references_now, warn_plain_secrets
from orchestrator.cli.status_document import local_document
from orchestrator.cli.views import live_table, print_jobs, print_status, summary_lines
from orchestrator.controller.admission import Refused, admit
from orchestrator.controller.driver import stored_spec
from orchestrator.controller.loop import Controller, ControllerLock, spawn_background_controller
from orchestrator.controller.placement import Candidates, candidates_for
from orchestrator.costs.budgets import load_cost_config, team_month_spent
from orchestrator.errors import NotFoundError, SpecError, UserError
from orchestrator.home import home_dir
from orchestrator.spec import JobSpec, load_spec_file, parse_deadline
from orchestrator.state.forecast import forecast
from orchestrator.state.job_state import JobState
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
    market.add_argument("--trace-start-tick", type=int, default=0)
    p.set_defaults(run=run_submit)

    p = sub.add_parser("list", help="list jobs (ID and STATE are never cut; -o wide: every column)")
    _backend_options(p)
    add_output_option(p, wide=True)
    p.set_defaults(run=run_list)

    p = sub.add_parser("status", help="show one job (--backend slurm: ask SLURM, no controller state)")
    _backend_options(p)
    p.add_argument("job", help="job id or name (--backend slurm: also a SLURM job id)")
    add_output_option(p)
    p.set_defaults(run=run_status)

    p = sub.add_parser("events", help="a job's event history (Kubernetes: its conditions and Events)")
    _backend_options(p)
    p.add_argument("job")
    add_output_option(p)
    p.set_defaults(run=run_events)

    p = sub.add_parser("logs", help="a job's output, all nodes and attempts")
    _backend_options(p)
    p.add_argument("job")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing until the job ends")
    p.add_argument("--tail", type=_lines, metavar="N",
                   help="start each output file at its last N lines (default: from its start)")  # fmt: skip
    p.set_defaults(run=run_logs)

    p = sub.add_parser("cancel", help="cancel a job (its nodes get the notice, then stop)")
    _backend_options(p)
    p.add_argument("job")
    p.set_defaults(run=run_cancel)

    ctl = sub.add_parser("controller", help="the background controller")
    ctl_sub = ctl.add_subparsers(dest="controller_command", metavar="SUBCOMMAND", required=True)
    p = ctl_sub.add_parser("run", help="run the controller in the foreground until stopped")
    p.add_argument("--backend", default="local", choices=BACKENDS)
    _cluster_config_option(p.add_argument_group("SLURM"))
    p.add_argument("--exit-when-idle", action="store_true", help="exit once no job is left to run")
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
    if args.backend == "kubernetes":
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
    )
    if isinstance(decision, Refused):
        raise decision.error()
    backend.own_placements(spec)  # SLURM: the preflight (partitions and GRES types exist, via sinfo)
    lock = ControllerLock(store.home, args.backend)
    check_references_now(spec, controller_elsewhere=lock.held_elsewhere())  # secrets files, from_env
    deadline = parse_deadline(spec.goals.deadline, now) if spec.goals.deadline else None
    options: dict[str, Any] = {"market": _market_options(args)}
    source = args.monitor_source or os.environ.get(monitoring.ENV_SOURCE)
    if source:  # kept with the job: a controller started elsewhere starts the same monitors
        options[monitoring.OPTIONS_KEY] = {"source": monitoring.parse_source(source)}
    job = store.create_job(
        name=spec.name, user=spec.user, team=spec.team, backend=args.backend, spec_json=spec.model_dump_json(),
        deadline=deadline, now=now, options=options,
    )  # fmt: skip
    if args.detach:
        if not lock.held_elsewhere():
            spawn_background_controller(store.home, args.backend)
        print(job.id)
        print(
            f"submitted; follow it with `gpuctl status {job.id}` or `gpuctl logs {job.id} -f`",
            file=sys.stderr,
        )
        return 0
    controller = None
    if lock.acquire():
        controller = Controller(store, backend)
        controller.start()
    try:
        return _follow(store, job.id, controller)
    finally:
        if controller is not None:
            controller.stop()
        lock.release()


def _backend_candidates(spec: JobSpec, backend: Backend) -> Candidates:
    """Where the spec may run by the backend's prices: a SLURM cluster config's partitions (read from
    the config alone: the cluster is asked later, by the preflight), else the price catalog."""
    if isinstance(backend, SlurmBackend):
        return candidates_for(spec, own_placements(spec, backend.config))
    return candidates_for(spec, backend.own_placements(spec))


def _follow(store: JobStore, job_id: str, controller: Controller | None) -> int:
    console = Console(stderr=True)
    with Live(console=console, refresh_per_second=2, transient=False) as live:
        while True:
            doc = _document(store, job_id)
            waiting = controller.errors.get(job_id) if controller else None
            if not waiting:
                waiting = doc.get("waiting_reason")
            live.update(live_table(doc, waiting))
            if doc["state"] in ("SUCCEEDED", "FAILED", "CANCELLED"):
                break
            time.sleep(0.5)
    if controller is not None:  # let the controller finish its housekeeping (stop leftover nodes)
        time.sleep(controller.tick_seconds * 2)
    for line in summary_lines(_document(store, job_id)):
        print(line)
    return 0 if doc["state"] == "SUCCEEDED" else 1


def _document(store: JobStore, job_id: str) -> dict[str, Any]:
    """The job's status document; rows of it that are damaged are left out (and noted in ``store``)."""
    job = store.job(job_id)
    progress = read_progress(store.job_dir(job.id) / "progress.jsonl")
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
    document = local_document(job, store.segments(job.id), progress, store.summary(job.id), gpu_usage=usage,
                              state=state, forecast=found)  # fmt: skip
    return document.as_json()


def _budget(job: JobRecord) -> float | None:
    """The job's ``goals.budget_usd`` (None when it has none, or its stored spec no longer reads)."""
    try:
        return stored_spec(job).goals.budget_usd
    except SpecError:
        return None


def run_list(args: argparse.Namespace) -> int:
    if args.backend == "kubernetes":
        return kube_jobs.list_jobs(args.namespace, args.output)
    store = JobStore(read_only=True)
    docs = []
    for job in store.list_jobs():  # a damaged job is left out, and noted
        try:
            docs.append(_document(store, job.id))
        except DamagedRow:
            continue
    print_jobs(docs, args.output)
    print_notes(store.damaged.values())
    return 0


def run_status(args: argparse.Namespace) -> int:
    if args.backend == "kubernetes":
        return kube_jobs.status(args.job, args.namespace, args.output)
    if args.backend == "slurm":
        _use_cluster_config(args)
        return slurm_cmd.status(args.job, load_cluster_config(), args.output)
    store = JobStore(read_only=True)
    print_status(_document(store, store.job(args.job).id), args.output)  # a damaged job: the error
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
    if args.backend == "kubernetes":
        return kube_jobs.logs(args.job, args.namespace, follow=args.follow, tail=args.tail)
    store = JobStore()
    job = store.job(args.job)
    backend = make_backend(job.backend, store)
    if isinstance(backend, LocalBackend):
        for other in attempt_folders(store.job_dir(job.id))[1]:
            print(terminal_text(f"gpuctl: note: skipped {other}: not an attempt-<number> folder of gpuctl"),
                  file=sys.stderr)  # fmt: skip
    files: dict[Path, LogFile] = {}
    while True:
        for path in backend.log_paths(job.id):
            if path not in files:
                prefix = f"[{path.parent.parent.name}/{path.parent.name.rsplit('-', 1)[-1]}] "
                files[path] = LogFile(path, prefix)
            print_new_lines(files[path], args.tail)
        if not args.follow or store.job(job.id).status.terminal:
            return 0
        sys.stdout.flush()
        time.sleep(1.0)


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
            controller.tick_job(job.id, datetime.now(UTC))
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
    lock = ControllerLock(store.home, args.backend)
    if not lock.acquire():
        raise UserError(
            f"another gpuctl controller of the {args.backend} backend is already running for {store.home}",
            "stop it first, or use a different GPUCTL_HOME",
        )
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
