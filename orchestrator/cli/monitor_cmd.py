"""`gpuctl monitor` (the GPU monitor sidecar) and `gpuctl diagnose` (rules over its output)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.cli.output import add_output_option, print_json
from orchestrator.errors import UserError
from orchestrator.state.job_dir import PROGRESS_FILE, SUMMARY_PREFIX
from orchestrator.terminal import terminal_text

if TYPE_CHECKING:
    from orchestrator.cli.avoidable_view import Diagnosed


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
        help="find input stalls, idle or oversized GPUs, each priced in USD (what its fix saves)",
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


def _check_named_files(args: argparse.Namespace) -> None:
    """The files named on the command line are readable UTF-8 text files: else one error that names
    the file (a job's own files are the readers' to judge, record by record)."""
    from orchestrator.userfiles import check_text_file

    if args.summaries is not None:
        check_text_file(
            args.summaries, "monitor summary file", f"give --summaries a {SUMMARY_PREFIX}NODE.jsonl file"
        )
    if args.progress is not None:
        check_text_file(args.progress, "progress file", f"give --progress a job's {PROGRESS_FILE} file")


def run_diagnose(args: argparse.Namespace) -> int:
    from orchestrator.monitor.diagnosis import diagnose_files

    if not (args.job or args.summaries or args.progress):
        raise UserError(
            "nothing to diagnose: name a job, or the monitor output files to read",
            "`gpuctl diagnose JOB` (a job's id or name, as `gpuctl list` shows it), or "
            "`gpuctl diagnose --summaries FILE --progress FILE`",
        )
    _check_named_files(args)
    if args.job:
        return _diagnose_job(args)
    memory = args.gpu_memory_gib
    candidates: list[Any] = []
    if args.gpu_type:
        catalog_memory, candidates = catalog_candidates(args.gpu_type)
        memory = memory or catalog_memory
    findings = diagnose_files(args.summaries, args.progress, memory, candidates, gpu_type=args.gpu_type)
    _print_findings([f.to_dict() for f in findings], args.output)
    return 0


def _diagnose_job(args: argparse.Namespace) -> int:
    """``gpuctl diagnose JOB``: the findings of the job's files, each priced in USD, and the right-size
    recommendation on the same list."""
    from orchestrator.cli.avoidable_view import diagnose_job
    from orchestrator.monitor.summary import read_summaries
    from orchestrator.state.store import JobStore

    store = JobStore(read_only=True)
    job = store.job(args.job)
    if args.gpu_type:
        catalog_candidates(args.gpu_type)  # an unknown type: the error that lists the known ones
    windows = read_summaries(args.summaries) if args.summaries else None
    found = diagnose_job(store, job, gpu_type=args.gpu_type, gpu_memory_gib=args.gpu_memory_gib,
                         windows=windows, progress=Path(args.progress) if args.progress else None)  # fmt: skip
    entries = priced_entries(found)
    if args.output == "json":
        print_json(entries)
        return 0
    _print_findings(entries, args.output)
    from orchestrator.cli.avoidable_view import fix_lines
    from orchestrator.cli.views import avoidable_line

    print(terminal_text(avoidable_line(found.avoidable.to_dict())))
    lines = fix_lines(found.avoidable)
    if lines:
        print("fixes by what they save:")
        for line in lines:
            print(terminal_text(f"  {line}"))
    return 0


def priced_entries(found: Diagnosed) -> list[dict[str, Any]]:
    """The findings as JSON, each with its ``bound`` and USD (``remaining_usd``: over the job's remaining
    work at its current price; ``month_usd``: over its last 30 days of spend; null: not known) and what
    they were priced over (``priced_over``), then the right-size recommendation (code ``right-size``)
    priced the same way."""
    by_code = {p.fix.code: p for p in found.avoidable.priced}
    job = found.avoidable
    over = {"remaining_work_usd": job.to_finish_usd, "hourly_usd": job.hourly_usd,
            "month_spend_usd": round(job.month_spend_usd, 6)}  # fmt: skip
    entries = []
    for finding in found.findings:
        entry = finding.to_dict()
        priced = by_code.get(finding.code)
        entry["remaining_usd"] = None if priced is None else priced.to_dict()["remaining_usd"]
        entry["month_usd"] = None if priced is None else priced.to_dict()["month_usd"]
        entry["priced_over"] = {**over, "coverage": None if priced is None else priced.fix.coverage}
        entries.append(entry)
    for priced in found.avoidable.priced:
        if priced.fix.code == "right-size":
            fix = priced.fix
            entries.append({
                "code": fix.code, "severity": fix.severity, "message": fix.message, "evidence": {},
                "fix": fix.fix, "bound": {"share": fix.share, "basis": fix.basis, "speedup": None},
                "remaining_usd": priced.to_dict()["remaining_usd"], "month_usd": priced.to_dict()["month_usd"],
                "priced_over": {**over, "coverage": fix.coverage},
            })  # fmt: skip
    return entries


def _print_findings(entries: list[dict[str, Any]], output: str) -> None:
    if output == "json":
        print_json(entries)
        return
    if not entries:
        print("no problems found")
    for entry in entries:
        print(terminal_text(f"[{entry['severity']}] {entry['code']}: {entry['message']}"))
        if entry.get("evidence"):
            print(terminal_text(f"    evidence: {json.dumps(entry['evidence'])}"))
        bound = entry.get("bound")
        if bound is not None and (bound["share"] is None or bound["share"] > 0):
            print(terminal_text(f"    costs: {bound['basis']}"))
        if "month_usd" in entry and bound is not None and bound["share"] != 0:
            print(terminal_text(f"    worth: {_worth(entry)}"))
        print(terminal_text(f"    fix: {entry['fix']}"))


def _worth(entry: dict[str, Any]) -> str:
    if entry["bound"]["share"] is None:
        return "not measured"
    remaining = entry.get("remaining_usd")
    month = entry.get("month_usd")
    head = (
        "remaining work: not known yet"
        if remaining is None
        else f"up to {remaining:,.2f} USD of the remaining work"
    )
    return head + ("" if month is None else f", {month:,.2f} USD of the last 30 days' spend")
