"""`gpuctl monitor` (the GPU monitor sidecar) and `gpuctl diagnose` (rules over its output)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from orchestrator.cli.output import add_output_option
from orchestrator.errors import UserError


def register(sub: Any) -> None:
    from orchestrator.monitor.app import add_monitor_arguments

    monitor = sub.add_parser(
        "monitor",
        help="GPU monitor sidecar: NVML -> /metrics (dcgm-exporter names), window summaries, notices",
    )
    add_monitor_arguments(monitor)
    monitor.set_defaults(run=run_monitor)

    diagnose = sub.add_parser(
        "diagnose",
        help="find input stalls, idle or oversized GPUs from monitor output",
        usage=DIAGNOSE_USAGE,
    )
    diagnose.add_argument("job", nargs="?", metavar="JOB",
                          help="a gpuctl job (id or name): reads its progress and monitor files")  # fmt: skip
    diagnose.add_argument("--summaries", help="monitor window summary file (JSON lines)")
    diagnose.add_argument("--progress", help="training progress file with data_s/compute_s per step")
    diagnose.add_argument(
        "--gpu-memory-gib", type=float, help="memory of the job's GPU (default: as sampled)"
    )
    diagnose.add_argument("--gpu-type", help="the job's GPU type (e.g. H100): suggests cheaper catalog GPUs")
    add_output_option(diagnose)
    diagnose.set_defaults(run=run_diagnose)


DIAGNOSE_USAGE = (
    "gpuctl diagnose JOB [options]\n       gpuctl diagnose --summaries FILE [--progress FILE] [options]"
)


def run_monitor(args: argparse.Namespace) -> int:
    from orchestrator.monitor.app import run_monitor as run

    return run(args)


def catalog_candidates(gpu_type: str) -> tuple[float, list[Any]]:
    """(memory GiB of gpu_type, cheaper GPU types as diagnosis candidates) from the built-in catalog."""
    from orchestrator.catalog.offers import MarketKind, builtin_offers
    from orchestrator.monitor.diagnosis import GpuCandidate

    cheapest: dict[str, tuple[float, float]] = {}
    for offer in builtin_offers():
        price = offer.price_per_gpu(MarketKind.ON_DEMAND)
        if price is None:
            continue
        known = cheapest.get(offer.gpu_type)
        if known is None or price < known[0]:
            cheapest[offer.gpu_type] = (price, offer.gpu_memory_gib)
    wanted = {name.lower(): name for name in cheapest}
    if gpu_type.lower() not in wanted:
        raise UserError(
            f"GPU type '{gpu_type}' is not in the catalog", f"use one of: {', '.join(sorted(cheapest))}"
        )
    own_price, own_memory = cheapest[wanted[gpu_type.lower()]]
    candidates = [
        GpuCandidate(name, memory, price / own_price)
        for name, (price, memory) in cheapest.items()
        if name != wanted[gpu_type.lower()]
    ]
    return own_memory, candidates


JOB_SUMMARY_FILE = "monitor-summary.jsonl"
"""Where a job's monitor window summaries live in its job folder."""


def _fill_from_job(args: argparse.Namespace) -> None:
    """``gpuctl diagnose JOB``: the job's progress file, monitor summaries and GPU type."""
    from orchestrator.state.store import JobStore

    store = JobStore(read_only=True)
    job = store.job(args.job)
    job_dir = store.job_dir(job.id)
    if args.progress is None and (job_dir / "progress.jsonl").exists():
        args.progress = str(job_dir / "progress.jsonl")
    if args.summaries is None and (job_dir / JOB_SUMMARY_FILE).exists():
        args.summaries = str(job_dir / JOB_SUMMARY_FILE)
    elif args.summaries is None:  # the node monitors' windows the controller stored, else their files
        from orchestrator.monitor.diagnosis import unavailable_reason
        from orchestrator.monitor.summary import read_summaries
        from orchestrator.state.usage import SUMMARY_GLOB, UsageStore

        files = sorted(job_dir.glob(SUMMARY_GLOB))
        args.job_windows = UsageStore(store).windows(job.id) or [w for f in files for w in read_summaries(f)]
        args.unmeasured_reason = unavailable_reason(files)
    segments = store.segments(job.id)
    if args.gpu_type is None and segments:
        args.gpu_type = segments[-1].gpu_type


def _check_named_files(args: argparse.Namespace) -> None:
    """The files named on the command line are readable UTF-8 text files: else one error that names
    the file (a job's own files are the readers' to judge, record by record)."""
    from orchestrator.userfiles import check_text_file

    if args.summaries is not None:
        check_text_file(
            args.summaries, "monitor summary file", "give --summaries a monitor-summary.jsonl file"
        )
    if args.progress is not None:
        check_text_file(args.progress, "progress file", "give --progress a job's progress.jsonl file")


def run_diagnose(args: argparse.Namespace) -> int:
    from orchestrator.monitor.diagnosis import diagnose, diagnose_files, read_step_timings

    if not (args.job or args.summaries or args.progress):
        raise UserError(
            "nothing to diagnose: name a job, or the monitor output files to read",
            "`gpuctl diagnose JOB` (a job's id or name, as `gpuctl list` shows it), or "
            "`gpuctl diagnose --summaries FILE --progress FILE`",
        )
    _check_named_files(args)
    if args.job:
        _fill_from_job(args)
    memory = args.gpu_memory_gib
    candidates: list[Any] = []
    if args.gpu_type:
        catalog_memory, candidates = catalog_candidates(args.gpu_type)
        memory = memory or catalog_memory
    job_windows = getattr(args, "job_windows", None)
    if job_windows is not None:  # a job's windows (none: its GPU use was not measured)
        steps = read_step_timings(args.progress) if args.progress else []
        findings = diagnose(job_windows, steps, memory, candidates, unmeasured_reason=args.unmeasured_reason)
    else:
        findings = diagnose_files(args.summaries, args.progress, memory, candidates)
    if args.output == "json":
        print(json.dumps([f.to_dict() for f in findings], indent=2))
        return 0
    if not findings:
        print("no problems found")
    for finding in findings:
        print(f"[{finding.severity}] {finding.code}: {finding.message}")
        print(f"    evidence: {json.dumps(finding.evidence)}")
        print(f"    fix: {finding.fix}")
    return 0
