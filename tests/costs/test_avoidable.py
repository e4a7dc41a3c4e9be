"""Avoidable spend: findings priced in USD over the remaining work and the last 30 days, the report's
avoidable column and top fixes (table, CSV, JSON, HTML), the tuning credit, and "not measured" for a
job nobody measured (issue 34, 1 and 3)."""

from __future__ import annotations

import csv
import io
import json
from datetime import timedelta

import pytest
from rich.console import Console

from orchestrator.costs.avoidable import FixShare, JobFixes, Tuned, job_fixes, price, saved_by_tuning
from orchestrator.costs.html import to_html
from orchestrator.costs.inputs import ReportInputs, inputs_from_json, inputs_to_json
from orchestrator.costs.render import to_csv, to_json, to_table, top_fixes_table
from orchestrator.costs.report import build_report, build_report_from
from orchestrator.monitor.diagnosis import StepTiming, diagnose
from tests.costs.factory import at, job, seg

INPUT_BOUND = FixShare("input-bound", "add loader workers", 0.4, "steps wait 40 % on data")
RIGHT_SIZE = FixShare("right-size", "move to L4 x1 (g6.xlarge)", 0.6, "right-size: the rest costs less on L4")


def test_a_fix_is_priced_over_the_remaining_work_and_the_month() -> None:
    found = price("j1", "ml", JobFixes((INPUT_BOUND,), ("step timings",)), spend_usd=50.0, to_finish_usd=20.0)
    (priced,) = found.priced
    assert priced.remaining_usd == pytest.approx(0.4 * 20.0)
    assert priced.month_usd == pytest.approx(0.4 * 50.0)
    no_forecast = price("j1", "ml", JobFixes((INPUT_BOUND,), ("step timings",)), 50.0, None)
    assert no_forecast.priced[0].remaining_usd is None and no_forecast.remaining_usd is None


def test_overlapping_fixes_are_not_summed_and_rank_on_one_list() -> None:
    fixes = JobFixes((INPUT_BOUND, RIGHT_SIZE), ("step timings", "GPU use"))
    found = price("j1", "ml", fixes, spend_usd=100.0, to_finish_usd=10.0)
    assert [p.fix.code for p in found.priced] == ["right-size", "input-bound"]
    assert found.month_usd == pytest.approx(60.0)  # the largest, never 40 + 60


def test_gpu_findings_count_only_the_measured_share_of_the_spend() -> None:
    findings = diagnose([], [StepTiming(0.5, 0.5)] * 10)
    fixes = job_fixes(findings, steps_measured=True, gpu_coverage=0.0)
    assert fixes.measured == ("step timings",) and fixes.not_measured == ("GPU use",)
    partial = FixShare("idle-gpu", "use fewer GPUs", 0.5, "idle", coverage=0.25)
    found = price("j", "t", JobFixes((partial,), ("GPU use",)), 100.0, None)
    assert found.month_usd == pytest.approx(0.5 * 100.0 * 0.25)


def test_tuning_is_credited_over_the_segments_after_it() -> None:
    segments = [seg("j1", at(10), at(12), price=3.0, od=3.0)]
    tuned = [Tuned(at(11), before_step_s=0.3, after_step_s=0.2)]
    # after 11:00 the job paid 3 USD; at the old step time the same work would have cost 4.5 USD
    assert saved_by_tuning(tuned, segments, at(13)) == pytest.approx(1.5)
    assert saved_by_tuning([Tuned(at(11), 0.2, 0.2)], segments, at(13)) is None


def _report_inputs() -> ReportInputs:
    jobs = [job("slow", team="vision"), job("blind", team="nlp"), job("clean", team="vision")]
    segments = [
        seg("slow", at(10), at(12), price=2.0, od=4.0),
        seg("blind", at(10), at(11), price=5.0, od=5.0),
        seg("clean", at(10), at(11), price=1.0, od=1.0),
    ]
    fixes = {
        "slow": JobFixes((INPUT_BOUND, RIGHT_SIZE), ("step timings",), ("GPU use",)),
        "blind": JobFixes((), (), ("step timings", "GPU use")),
        "clean": JobFixes((), ("step timings",)),
    }
    return ReportInputs(jobs, segments, fixes=fixes, tuned={"slow": [Tuned(at(11), 0.3, 0.2)]})


def test_the_report_has_an_avoidable_column_by_job_and_team_with_not_measured() -> None:
    inputs = _report_inputs()
    by_job = build_report_from(inputs, at(13), None, "job")
    rows = {r.name: r for r in by_job.rows}
    assert rows["slow"].avoidable == pytest.approx(0.6 * 4.0)
    assert rows["clean"].avoidable == 0.0  # measured, nothing found
    assert rows["blind"].avoidable is None  # nobody measured it: never zero waste
    assert rows["slow"].tuned_usd == pytest.approx(2.0 * 0.5)
    by_team = {r.name: r for r in build_report_from(inputs, at(13), None, "team").rows}
    assert by_team["vision"].avoidable == pytest.approx(2.4) and by_team["nlp"].avoidable is None

    data = json.loads(to_json(by_job))
    shown = {r["name"]: r["avoidableCost"] for r in data["rows"]}
    assert shown["blind"] is None and shown["slow"] == pytest.approx(2.4)
    assert [(f["job"], f["finding"]) for f in data["topFixes"]] == [
        ("slow", "right-size"),
        ("slow", "input-bound"),
    ]
    table = list(csv.DictReader(io.StringIO(to_csv(by_job))))
    assert {r["job"]: r["avoidableCost"] for r in table}["blind"] == ""

    console = Console(file=io.StringIO(), width=200, record=True)
    console.print(to_table(by_job))
    fixes = top_fixes_table(by_job)
    assert fixes is not None
    console.print(fixes)
    text = console.export_text()
    assert "Avoidable" in text and "not measured" in text and "move to L4" in text
    page = to_html(by_job)
    assert "Top fixes" in page and "move to L4" in page and "Avoidable spend by job" in page


def test_a_report_without_diagnosis_says_not_measured() -> None:
    report = build_report([job("a")], [seg("a", at(10), at(11), price=1.0, od=1.0)], at(12), None, "job")
    assert report.rows[0].avoidable is None and report.top_fixes == []
    assert json.loads(to_json(report))["rows"][0]["avoidableCost"] is None


def test_fixes_and_tune_records_survive_a_ledger_export() -> None:
    inputs = _report_inputs()
    again = inputs_from_json(inputs_to_json(inputs))
    assert again.fixes == inputs.fixes and again.tuned == inputs.tuned
    window_report = build_report_from(again, at(13), None, "job")
    assert window_report.totals.avoidable == pytest.approx(2.4)
    assert window_report.window.end - window_report.window.start >= timedelta(hours=1)
