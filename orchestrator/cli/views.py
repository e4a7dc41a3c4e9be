"""What the CLI shows of a job's status document (orchestrator/cli/status_document.py) as text: the
live panel, the summary of ``gpuctl status``, and the table of ``gpuctl list``. Same on every backend.

A document holds what job code, another user or a cluster wrote (names, teams, messages, metrics
names, conditions): every text shown here goes through :func:`terminal_text` (no escape sequences)
and, in rich tables, as a :class:`Text` (never read as markup)."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from orchestrator.cli.output import (
    JSON,
    WIDE,
    Column,
    fitted_table,
    print_json,
    terminal_console,
    usd,
)
from orchestrator.spec import format_duration
from orchestrator.terminal import terminal_text

SIMULATED_NOTE = "costs are simulated: local nodes are priced as the cloud instance they stand for"


def _text(value: str) -> Text:
    """A table value: shown as it is (never read as markup), with no escape sequence."""
    return Text(terminal_text(value))


def live_table(doc: dict[str, Any], waiting_reason: str | None) -> Table:
    title = Text(terminal_text(f"gpuctl job {doc['id']}"), style="table.title")
    table = Table(title=title, show_header=False, expand=False)
    table.add_column("what", style="bold")
    table.add_column("value")
    state = doc["state"]
    if waiting_reason:
        state += f" ({waiting_reason})"
    table.add_row("state", _text(state))
    progress = doc.get("progress")
    if progress:
        total = f"/{progress['total_steps']}" if progress.get("total_steps") else ""
        loss = f"{progress['loss']:.4f}" if progress.get("loss") is not None else "-"
        table.add_row(
            "step",
            _text(f"{progress['step']}{total}   loss {loss}   world size {progress.get('world_size')}"),
        )
    seg = doc["segments"][-1] if doc["segments"] else None
    if seg:
        where = (
            f"{seg['nodes']} x {seg['gpu_type']} {seg['market']} in {seg['zone']} ({seg['instance_type']})"
        )
        table.add_row("running on", _text(where if not seg["ended_at"] else f"(last) {where}"))
    table.add_row("attempts", _text(f"{doc['attempts']}   preemptions {doc['preemptions']}"))
    if doc.get("forecast"):
        table.add_row("forecast", _text(forecast_line(doc["forecast"])))
    table.add_row(
        "cost so far",
        _text(
            f"{usd(doc['cost_usd'])} USD (on-demand would be {usd(doc['on_demand_equivalent_usd'])} USD)"
            + ("  [simulated]" if doc["cost_is_simulated"] else "")
        ),
    )
    return table


def summary_lines(doc: dict[str, Any]) -> list[str]:
    """``gpuctl status`` as lines of terminal-safe text (:func:`terminal_text`)."""
    return [terminal_text(line) for line in _summary_lines(doc)]


def _summary_lines(doc: dict[str, Any]) -> list[str]:
    lines = [_headline(doc)]
    if doc.get("managed") is False:
        lines.append(unmanaged_line(doc["backend"]))
    if doc.get("progress") and doc["state"] != "RUNNING" and doc["state"] not in TERMINAL:
        lines.append(f"progress: {progress_text(doc['progress'], None)}")
    if doc.get("waiting_reason"):
        since = f" (since {doc['waiting_since'][:19]})" if doc.get("waiting_since") else ""
        lines.append(f"waiting: {doc['waiting_reason']}{since}")
    if doc.get("forecast"):
        lines.append(f"forecast: {forecast_line(doc['forecast'])}")
    metrics = doc.get("metrics") or {}
    if metrics:
        lines.append("final metrics: " + ", ".join(f"{k} {_number(v)}" for k, v in metrics.items()))
    lines.append(f"attempts {doc['attempts']}, preemptions {doc['preemptions']}, restarts {doc['restarts']}")
    cost, od = doc["cost_usd"], doc["on_demand_equivalent_usd"]
    saved = f" ({100 * (od - cost) / od:.0f}% saved)" if od else ""
    lines.append(f"cost {usd(cost)} USD; the same GPU-hours on-demand: {usd(od)} USD{saved}")
    if doc.get("gpu_usage"):
        lines.append(gpu_use_line(doc["gpu_usage"]))
    elif doc["segments"] or doc["backend_details"].get("gpu_monitor_message"):  # ran, nothing measured
        lines.append(gpu_not_measured_line(doc["backend_details"].get("gpu_monitor_message"), doc["id"]))
    if doc.get("avoidable") is not None and doc["segments"]:  # it ran: what it wasted, or "not measured"
        lines.append(avoidable_line(doc["avoidable"]))
    if doc["cost_is_simulated"]:
        lines.append(f"note: {SIMULATED_NOTE}")
    for seg in doc["segments"]:
        span = segment_span(seg)
        ended = seg["end_reason"] or ("ended" if seg["ended_at"] else "open")
        lines.append(
            f"  attempt {seg['attempt'] or '-'}: {seg['nodes']} x {seg['gpu_type'] or '-'} {seg['market'] or '-'}"
            f" {seg['zone'] or '-'} for {span}, {usd(seg['cost_usd'])} USD ({ended})"
        )
    return lines + _detail_lines(doc["backend_details"])


def segment_span(seg: dict[str, Any], now: datetime | None = None) -> str:
    """How long a segment ran (``12m``), or an open one has run so far (``3m12s so far``)."""
    if not seg.get("started_at"):
        return "-"
    start = datetime.fromisoformat(seg["started_at"])
    if seg.get("ended_at"):
        return format_duration((datetime.fromisoformat(seg["ended_at"]) - start).total_seconds())
    now = now or datetime.now(start.tzinfo or UTC)
    return f"{format_duration(max(0.0, (now - start).total_seconds()))} so far"


TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")


def _headline(doc: dict[str, Any]) -> str:
    """``job ID STATE: ...``: while the job runs, its live progress (``progress`` and ``nodes`` of the
    document, as in ``-o json``); otherwise the message of its last state change."""
    if doc["state"] == "RUNNING" and doc.get("progress"):
        return f"job {doc['id']} RUNNING: {progress_text(doc['progress'], doc.get('nodes'))}"
    failure = f" ({doc['failure_reason']})" if doc["failure_reason"] else ""
    return f"job {doc['id']} {doc['state']}{failure}: {doc['message'] or '-'}"


def progress_text(progress: dict[str, Any], nodes: int | None) -> str:
    """``training at step 128/300 on 2 node(s), loss 0.1234`` from a document's ``progress``."""
    total = f"/{progress['total_steps']}" if progress.get("total_steps") else ""
    where = f" on {nodes} node(s)" if nodes else ""
    loss = f", loss {progress['loss']:.4f}" if progress.get("loss") is not None else ""
    return f"training at step {progress['step']}{total}{where}{loss}"


def controller_fix(backend: str) -> str:
    """The command that starts a controller for jobs of ``backend`` (local or slurm)."""
    flag = "" if backend == "local" else f" --backend {backend}"
    return f"`gpuctl controller run --detach{flag}` (or `gpuctl controller run{flag}` in the foreground)"


def unmanaged_line(backend: str) -> str:
    """Said of a job that no controller manages (``managed: false``)."""
    return (
        "not managed: no gpuctl controller is running for it, so it does not advance (nodes it has "
        f"keep running, and cost). To fix: start one: {controller_fix(backend)}"
    )


def print_unmanaged_note(docs: list[dict[str, Any]], output: str) -> None:
    """``gpuctl list`` as a table: one note on standard error naming the jobs no controller manages,
    and the fix (JSON has ``managed: false``)."""
    if output == JSON:
        return
    for backend in sorted({d["backend"] for d in docs if d.get("managed") is False}):
        ids = [terminal_text(d["id"]) for d in docs if d.get("managed") is False and d["backend"] == backend]
        shown = ", ".join(ids[:10]) + (f" and {len(ids) - 10} more" if len(ids) > 10 else "")
        print(terminal_text(f"gpuctl: note: no gpuctl controller is running for {len(ids)} unfinished "
                            f"{backend} job(s) ({shown}): they do not advance.\n  To fix: start one: "
                            f"{controller_fix(backend)}", multiline=True), file=sys.stderr)  # fmt: skip


def _number(value: Any) -> str:
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def _detail_lines(details: dict[str, Any]) -> list[str]:
    """``backend_details`` as text: SLURM's job and log, Kubernetes' namespace and conditions."""
    lines = []
    if details.get("slurm_job_id") is not None:
        nodes = details.get("node_list") or "-"
        lines.append(f"SLURM job {details['slurm_job_id']} ({details.get('slurm_state')}), partition "
                     f"{details.get('partition')}, nodes {nodes}")  # fmt: skip
    if details.get("log"):
        lines.append(f"log: {details['log']}")
    if details.get("namespace"):
        lines.append(f"namespace: {details['namespace']}")
    for cond in details.get("conditions") or []:
        lines.append(
            f"  {cond.get('type')}={cond.get('status')} {cond.get('reason', '')}: {cond.get('message', '')}"
        )
    return lines


def gpu_not_measured_line(message: str | None, job_id: str) -> str:
    """The GPU line of a job that ran with nothing measured (``message``: the monitor's, if known)."""
    if message:
        return f"GPU use: not measured ({message})"
    return f"GPU use: not measured (no NVML on the nodes, or no monitor: `gpuctl events {job_id}` says which)"


def avoidable_line(found: dict[str, Any]) -> str:
    """One line of a document's ``avoidable`` (:meth:`orchestrator.costs.avoidable.JobAvoidable.to_dict`):
    the largest fix in USD, or "not measured" when neither step timings nor GPU use were measured."""
    missing = found.get("not_measured") or []
    if not found.get("measured"):
        return "avoidable spend: not measured (no step timings and no GPU use measured)"
    note = f"; {' and '.join(missing)} not measured" if missing else ""
    if found.get("saved_by_tuning_usd") is not None:
        note += f"; saved by tuning {usd(found['saved_by_tuning_usd'])} USD"
    month, remaining = found.get("avoidable_month_usd"), found.get("avoidable_remaining_usd")
    fixes = [f for f in found.get("fixes") or [] if f.get("share") and f.get("counted", True)]
    if (month is None and remaining is None) or not fixes:
        return f"avoidable spend: none found{note}"
    rest = "" if remaining is None else f"up to {usd(remaining)} USD of the remaining work, "
    month_text = "-" if month is None else f"{usd(month)} USD"
    return (
        f"avoidable spend: {rest}{month_text} of team {found.get('team')}'s last 30 days (largest: "
        f"{fixes[0]['code']}; `gpuctl diagnose {found.get('job_id')}`){note}"
    )


def gpu_use_line(usage: dict[str, Any]) -> str:
    """One line of what the GPU monitors measured (the ``gpu_usage`` of a status document)."""
    total_gib = usage["mem_total_bytes"] / 2**30
    sm = f", SM activity {usage['sm_activity_mean']:.2f}" if usage.get("sm_activity_mean") is not None else ""
    return (
        f"GPU use: utilization mean {usage['util_mean_pct']:.0f}% (p95 {usage['util_p95_pct']:.0f}%), "
        f"peak memory {100 * usage['mem_peak_fraction']:.0f}% of {total_gib:.0f} GiB{sm}, "
        f"idle {usage['idle_gpu_hours']:.3f} GPU-h, {usage['samples']} samples ({usage['model']})"
    )


def forecast_line(found: dict[str, Any]) -> str:
    """One line of a status document's ``forecast``: ETA, cost to finish now and on-demand, the risks."""
    eta = format_duration(found["eta_seconds"])
    risks = [w for w, flag in (("deadline at risk", found.get("deadline_at_risk")),
                               ("budget at risk", found.get("budget_at_risk"))) if flag]  # fmt: skip
    return (
        f"ETA {eta} (finish {found['finish_at'][:16].replace('T', ' ')}, {found['steps_per_second']:.3g} steps/s); "
        f"to finish {usd(found['cost_to_finish_usd'])} USD now, {usd(found['cost_to_finish_on_demand_usd'])} USD "
        f"on-demand; projected {usd(found['projected_cost_usd'])} USD"
        + ("; " + ", ".join(risks) if risks else "")
    )


REASON_WIDTH = 60


def _reason(doc: dict[str, Any]) -> str:
    """Why a job waits (or why it ended, for a failed or cancelled one), cut to :data:`REASON_WIDTH`."""
    found = doc.get("waiting_reason") or (doc["message"] if doc["state"] in ("FAILED", "CANCELLED") else None)
    if not found:
        return "-"
    text = str(found)
    return text if len(text) <= REASON_WIDTH else text[: REASON_WIDTH - 1] + "…"


def _eta(doc: dict[str, Any]) -> str:
    found = doc.get("forecast")
    return format_duration(found["eta_seconds"]) if found else "-"


def _last_gpu(doc: dict[str, Any]) -> str:
    seg = doc["segments"][-1] if doc["segments"] else None
    return f"{seg['nodes']}x{seg['gpu_type']} {seg['market']}" if seg else "-"


JOB_COLUMNS = (
    Column("ID", lambda d: d["id"]),
    Column("STATE", lambda d: d["state"] + (" (unmanaged)" if d.get("managed") is False else "")),
    Column("ATTEMPTS", lambda d: str(d["attempts"]), drop=2, right=True),
    Column("PREEMPTIONS", lambda d: str(d["preemptions"]), drop=4, right=True),
    Column("COST USD", lambda d: usd(d["cost_usd"]), drop=1, right=True),
    Column("ON-DEMAND USD", lambda d: usd(d["on_demand_equivalent_usd"]), drop=5, right=True),
    Column("USER", lambda d: d["user"] or "-", drop=3),
    Column("TEAM", lambda d: d["team"] or "-", drop=6),
    Column("BACKEND", lambda d: d["backend"], drop=7, wide_only=True),
    Column("FAILURE", lambda d: d["failure_reason"] or "-", drop=8, wide_only=True),
    Column("GPUS", _last_gpu, drop=9, wide_only=True),
    Column("SUBMITTED", lambda d: (d["submitted_at"] or "-")[:19], drop=10, wide_only=True),
    Column("ETA", _eta, drop=11, wide_only=True, right=True),
    Column("REASON", _reason, drop=3),
)
"""``gpuctl list``: ID and STATE are never cut; the others go, TEAM first, when the terminal is narrow.
STATE says ``(unmanaged)`` of a job no controller manages (``managed: false``; a note says the fix)."""


def print_jobs(docs: list[dict[str, Any]], output: str) -> None:
    """``gpuctl list`` on any backend: the documents as JSON, or the table fitted to the terminal."""
    if output == JSON:
        print_json(docs)
        return
    wide = output == WIDE  # every column, one line per job, as long as it takes (as kubectl's wide)
    console = Console(width=100_000) if wide else terminal_console()
    console.print(fitted_table(JOB_COLUMNS, docs, console.width, wide=wide))


def print_status(doc: dict[str, Any], output: str) -> None:
    """``gpuctl status`` on any backend."""
    if output == JSON:
        print_json(doc)
        return
    for line in summary_lines(doc):
        print(line)
