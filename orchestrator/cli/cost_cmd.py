"""`gpuctl cost report`: the ledger as a table, CSV, JSON or a self-contained HTML page."""

from __future__ import annotations

import argparse
import dataclasses
import io
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console

from orchestrator.cli import kube_jobs
from orchestrator.cli.avoidable_view import job_folders, stored_fixes
from orchestrator.cli.output import print_notes
from orchestrator.costs.budgets import load_cost_config
from orchestrator.costs.bulk import without_collector
from orchestrator.costs.html import to_html
from orchestrator.costs.inputs import ReportInputs, read_inputs_file, read_ledger, read_store_ledger
from orchestrator.costs.ledger import Window
from orchestrator.costs.lost_work import lost_work_from_progress
from orchestrator.costs.render import TABLE_ROWS, to_csv, to_json, to_table, top_fixes_table
from orchestrator.costs.report import GroupBy, Report, build_report_from, parse_since, parse_window
from orchestrator.errors import UserError
from orchestrator.home import home_dir
from orchestrator.state import store as store_module
from orchestrator.state.external_jobs import configured_database_url
from orchestrator.state.job_dir import JobDir, job_dir_path
from orchestrator.state.usage import usage_from_files
from orchestrator.terminal import terminal_text


@without_collector  # a record or more per segment of the ledger
def load_report_inputs(home: Path, since: datetime | None = None) -> ReportInputs:
    """Jobs and segments from the job store under ``home``, with the work lost to preemptions (from
    the progress files) and the idle and measured GPU-hours (from the stored monitor windows, else
    from the monitor summary files ``monitor-summary*.jsonl``; a job with neither was not measured)."""
    store = store_module.open_store(home, read_only=True)
    stored = isinstance(store, store_module.JobStore)
    inputs = read_store_ledger(store, since) if stored else read_ledger(store, since)  # one query a table
    lost = {}
    legacy = inputs.idle is not None and inputs.measured is None  # a source of idle GPU-hours only
    idle, measured = dict(inputs.idle or {}), dict(inputs.measured or {})
    in_report = {s.job_id for s in inputs.segments}  # only these jobs are diagnosed
    folders = job_folders(home)
    diagnosis = None
    if stored:  # with no start, every segment was read already
        every = inputs.segments if since is None else None
        diagnosis = stored_fixes(store, datetime.now(UTC), in_report, every, inputs.jobs, folders)
    for job in inputs.jobs:
        if diagnosis is not None and job.id in diagnosis.fixes:  # its progress file, read once
            found = diagnosis.lost.get(job.id)
        elif job.id in in_report:  # a job with no segment in the report costs no lost work there
            found = lost_work_from_progress(JobDir.of(home, job.id).progress)
        else:
            found = None
        if found is not None and found.steps:
            lost[job.id] = found
        if job.id in measured or legacy or job.id not in folders:  # what the controller stored; else the
            continue  # summary files themselves (a job with no folder on this machine has none)
        usage = usage_from_files(job_dir_path(home, job.id))
        if usage is not None and usage.measured_gpu_hours > 0:
            idle[job.id], measured[job.id] = usage.idle_gpu_hours, usage.measured_gpu_hours
    fixes, tuned = None, dict(inputs.tuned)
    if diagnosis is not None:
        fixes, tuned = diagnosis.fixes, diagnosis.tuned
        print_notes(store.damaged.values())  # damaged rows left out of the report
    return dataclasses.replace(
        inputs, lost={**inputs.lost, **lost}, idle=idle, measured=None if legacy else measured, fixes=fixes,
        tuned=tuned,
    )  # fmt: skip


REPORT_BACKENDS = ("local", "slurm", "kubernetes")


def _inputs(args: argparse.Namespace, since: datetime | None) -> ReportInputs:
    """What the report reads: an export (``--input``), the job store (its jobs of ``--backend`` only,
    when given; with a database configured it holds the Kubernetes jobs the operators write), or for
    ``--backend kubernetes`` without a configured database the GPUJobs that exist."""
    backend = getattr(args, "backend", None)
    namespace = getattr(args, "namespace", None)
    if namespace is not None and backend != "kubernetes":
        raise UserError("--namespace names GPUJobs", "add --backend kubernetes, or leave out --namespace")
    if args.input:
        if backend is not None:
            raise UserError("--input reads an export; --backend reads jobs", "give one of them")
        return read_inputs_file(args.input)
    if backend == "kubernetes" and configured_database_url(home_dir()) is None:
        return kube_jobs.cost_report_inputs(namespace, since)  # no ledger: the GPUJobs that exist
    inputs = load_report_inputs(home_dir(), since)
    inputs = inputs if backend is None else of_backend(inputs, backend)
    return inputs if namespace is None else of_namespace(inputs, namespace)


def of_backend(inputs: ReportInputs, backend: str) -> ReportInputs:
    """``inputs`` with the jobs of ``backend`` only, and their segments."""
    jobs = [j for j in inputs.jobs if j.backend == backend]
    ids = {j.id for j in jobs}
    return dataclasses.replace(inputs, jobs=jobs, segments=[s for s in inputs.segments if s.job_id in ids])


def of_namespace(inputs: ReportInputs, namespace: str) -> ReportInputs:
    """``inputs`` with the jobs of Kubernetes namespace ``namespace`` only, and their segments."""
    jobs = [j for j in inputs.jobs if j.namespace == namespace]
    ids = {j.id for j in jobs}
    return dataclasses.replace(inputs, jobs=jobs, segments=[s for s in inputs.segments if s.job_id in ids])


def _table_text(report: Report, limit: int | None) -> str:
    console = Console(file=io.StringIO(), width=160, record=True)
    console.print(to_table(report, limit))
    fixes = top_fixes_table(report)
    if fixes is not None:
        console.print(fixes)
    return console.export_text()


def register(sub: Any) -> None:
    cost = sub.add_parser("cost", help="what jobs cost: reports from the ledger")
    cost_sub = cost.add_subparsers(dest="cost_command", metavar="SUBCOMMAND", required=True)
    report = cost_sub.add_parser(
        "report", help="cost, savings, idle, lost work and avoidable spend by job/user/team/gpu/market"
    )
    when = report.add_mutually_exclusive_group()
    when.add_argument("--since", metavar="DURATION", help="the last DURATION, such as 7d or 24h")
    when.add_argument("--window", metavar="START,END", help="ISO 8601 times or dates, UTC if no zone")
    report.add_argument("--by", choices=[g.value for g in GroupBy], default=GroupBy.JOB.value,
                        help="one row per job (default), user, team, GPU type, market, Kubernetes "
                             "namespace or cluster ('-': jobs with none)")  # fmt: skip
    report.add_argument("--backend", choices=REPORT_BACKENDS,
                        help="only this backend's jobs; kubernetes: from the ledger database when one is "
                             "configured (GPUCTL_DATABASE_URL or database.url), else read from the GPUJobs "
                             "in the cluster (deleted GPUJobs are missing; the report says so). Default: "
                             "every job in the job store")  # fmt: skip
    report.add_argument("-n", "--namespace", metavar="NAMESPACE",
                        help="--backend kubernetes: only this namespace's jobs (default: every namespace "
                             "in the ledger, or that you may list)")  # fmt: skip
    report.add_argument("-o", "--output", choices=["table", "csv", "json", "html"], default="table",
                        help="output format (default table); html: a page with charts")  # fmt: skip
    report.add_argument("--out", metavar="FILE", help="write to FILE instead of standard output")
    report.add_argument(
        "--limit", type=int, default=TABLE_ROWS, help=f"table rows shown (default {TABLE_ROWS}; 0 for all)"
    )
    report.add_argument("--input", metavar="FILE", help="read a JSON ledger export instead of the job store")
    report.epilog = (
        "The cluster's name (--by cluster) is $GPUCTL_CLUSTER_NAME when set (the chart's clusterName), "
        "else the kubeconfig's current context."
    )
    report.set_defaults(run=run_report)


@without_collector  # reading, building and rendering a report of the whole ledger
def run_report(args: argparse.Namespace) -> int:
    now = datetime.now(UTC)
    window: Window | None = None
    if args.since:
        window = parse_since(args.since, now)
    elif args.window:
        window = parse_window(args.window)
    inputs = _inputs(args, window.start if window else None)
    budgets = load_cost_config(home_dir() / "config.yaml") if args.output == "html" else None  # its chart
    report = build_report_from(inputs, now, window, args.by, budgets)
    if args.output == "table" and not args.out:
        console = Console(width=160)
        console.print(to_table(report, args.limit or None))
        fixes = top_fixes_table(report)
        if fixes is not None:
            console.print(fixes)
        return 0
    text = {
        "table": lambda r: _table_text(r, args.limit or None),
        "csv": to_csv,
        "json": to_json,
        "html": to_html,
    }[args.output](report)
    if args.out:
        try:
            Path(args.out).write_text(text, encoding="utf-8")
        except OSError as exc:
            raise UserError(
                f"cannot write {args.out}: {exc.strerror}", "choose a writable path for --out"
            ) from exc
        print(f"wrote {args.output} report to {args.out}")
    elif args.output == "json":
        print(text, end="" if text.endswith("\n") else "\n")  # JSON escapes controls itself
    else:  # a table, CSV or HTML on standard output: nothing in a name may drive the terminal
        lines = text.replace("\r\n", "\n").split("\n")
        print("\n".join(terminal_text(line, multiline=True) for line in lines).rstrip("\n"))
    return 0
