"""Scheduled cost reports: an APScheduler cron job that writes HTML and CSV into a folder."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from apscheduler.job import Job
from apscheduler.schedulers.base import BaseScheduler
from apscheduler.triggers.cron import CronTrigger

from orchestrator.costs.budgets import CostConfig
from orchestrator.costs.html import to_html
from orchestrator.costs.inputs import ReportInputs
from orchestrator.costs.render import to_csv
from orchestrator.costs.report import GroupBy, build_report_from, parse_since
from orchestrator.errors import UserError

REPORT_JOB_ID = "gpuctl-cost-report"


_CRON_DAYS = ["sun", "mon", "tue", "wed", "thu", "fri", "sat", "sun"]


def _weekday_names(field: str) -> str:
    """Crontab weekdays (0 or 7 = Sunday) as names: APScheduler 3 numbers them from Monday."""
    if field == "*" or not any(ch.isdigit() for ch in field):
        return field
    days: list[str] = []
    for part in field.split(","):
        span, _, step_text = part.partition("/")
        step = int(step_text) if step_text else 1
        if span == "*":
            lo, hi = 0, 6
        elif "-" in span:
            lo_text, hi_text = span.split("-", 1)
            lo, hi = int(lo_text), int(hi_text)
        else:
            lo = hi = int(span)
        if not 0 <= lo <= hi <= 7 or step < 1:
            raise ValueError(f"weekday field {field!r} is out of range 0-7")
        days.extend(_CRON_DAYS[d] for d in range(lo, hi + 1, step) if _CRON_DAYS[d] not in days)
    return ",".join(days)


def cron_trigger(schedule: str) -> CronTrigger:
    """A UTC trigger from a five-field crontab line such as ``0 8 * * 1-5`` (crontab weekday numbers)."""
    fields = schedule.split()
    try:
        if len(fields) != 5:
            raise ValueError(f"expected 5 fields, got {len(fields)}")
        minute, hour, day, month, weekday = fields
        return CronTrigger(
            minute=minute,
            hour=hour,
            day=day,
            month=month,
            day_of_week=_weekday_names(weekday),
            timezone=UTC,
        )
    except ValueError as exc:
        raise UserError(
            f"reports.schedule {schedule!r} is not a crontab line ({exc})",
            "write five fields: minute hour day month weekday, e.g. '0 8 * * *'",
        ) from exc


def write_report_files(
    folder: Path,
    load_inputs: Callable[[], ReportInputs],
    now: datetime | None = None,
    since: str = "7d",
    by: GroupBy | str = GroupBy.TEAM,
    budgets: CostConfig | None = None,
) -> list[Path]:
    """Build the report of the last ``since`` and write ``cost-report-<time>.html`` and ``.csv``
    (``budgets``: the config whose monthly budgets the HTML charts)."""
    moment = now or datetime.now(UTC)
    inputs = load_inputs()
    window = parse_since(since, moment)
    report = build_report_from(inputs, moment, window, by, budgets)
    folder.mkdir(parents=True, exist_ok=True)
    stem = folder / f"cost-report-{moment.strftime('%Y%m%dT%H%M%SZ')}"
    written = []
    for suffix, text in ((".html", to_html(report)), (".csv", to_csv(report))):
        path = stem.with_suffix(suffix)
        tmp = path.with_suffix(suffix + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
        written.append(path)
    return written


def register_report_job(
    scheduler: BaseScheduler,
    config: CostConfig,
    load_inputs: Callable[[], ReportInputs],
    since: str = "7d",
    by: GroupBy | str = GroupBy.TEAM,
) -> Job | None:
    """Add (or replace) the scheduled report job; ``None`` when the config has no schedule."""
    if not config.report_schedule:
        return None
    if config.report_folder is None:
        raise UserError(
            "reports.schedule is set but reports.folder is not",
            "add reports.folder (where the HTML and CSV files go) to the controller config",
        )
    return scheduler.add_job(
        write_report_files,
        trigger=cron_trigger(config.report_schedule),
        kwargs={
            "folder": config.report_folder,
            "load_inputs": load_inputs,
            "since": since,
            "by": by,
            "budgets": config,
        },
        id=REPORT_JOB_ID,
        name="gpuctl cost report",
        replace_existing=True,
        coalesce=True,
        misfire_grace_time=3600,
    )
