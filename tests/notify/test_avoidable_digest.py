"""The weekly "avoidable spend" digest per team: off by default, configured in the controller config,
sent to each team's targets through the outbox, and "not measured" for a team nobody measured (issue 34)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from apscheduler.schedulers.background import BackgroundScheduler

from orchestrator.controller.digest import register_digest_job, send_digest
from orchestrator.errors import UserError
from orchestrator.notify import NotifyConfig, Outbox, parse_notify_config
from orchestrator.notify.digest import DigestFix, TeamDigest, digest_notifications
from orchestrator.spec.notify import NotifyEvent
from orchestrator.state.store import JobStore
from orchestrator.testing.states import running_job
from tests.cli.hostile_home import write_lines

CONFIG = """
notify:
  avoidable_digest: {schedule: "0 8 * * 1", since: 7d}
  teams:
    vision: [{webhook: "https://hooks.example/vision"}]
    nlp: [{webhook: "https://hooks.example/nlp", events: [failed]}]
"""
NOW = datetime(2026, 3, 9, 8, 0, tzinfo=UTC)


def test_the_digest_is_off_by_default_and_parsed_when_set() -> None:
    assert NotifyConfig().avoidable_digest is None
    assert parse_notify_config("notify: {teams: {}}").avoidable_digest is None
    config = parse_notify_config(CONFIG)
    assert config.avoidable_digest is not None and config.avoidable_digest.schedule == "0 8 * * 1"
    with pytest.raises(UserError, match="five-field crontab"):
        parse_notify_config("notify: {avoidable_digest: {schedule: weekly}}")
    with pytest.raises(UserError, match="avoidable_digest"):
        parse_notify_config("notify: {avoidable_digest: {when: monday}}")


def test_each_team_hears_its_avoidable_spend_and_top_fixes() -> None:
    config = parse_notify_config(CONFIG)
    digests = [
        TeamDigest(
            "vision", "slow-1", "ana", 120.0, 48.0, (DigestFix("slow-1", "input-bound", "add workers", 48.0),)
        ),
        TeamDigest("nlp", "blind-2", "bo", 30.0, None),
    ]
    sent = digest_notifications(digests, config, NOW)
    assert [(n.team, n.event) for _, n in sent] == [
        ("vision", NotifyEvent.AVOIDABLE_DIGEST)
    ]  # nlp: failed only
    note = sent[0][1]
    assert note.headline == "gpuctl: team vision avoidable spend"
    assert "up to 48.00 USD avoidable" in note.message and "slow-1 input-bound: 48.00 USD" in note.message
    config_all = parse_notify_config(CONFIG.replace(", events: [failed]", ""))
    blind = [n for _, n in digest_notifications(digests, config_all, NOW) if n.team == "nlp"]
    assert "avoidable spend not measured" in blind[0].message
    assert digest_notifications(digests, NotifyConfig(config.teams), NOW) == []  # off: nothing sent


def test_the_controller_schedules_it_and_puts_it_in_the_outbox(tmp_path: Path) -> None:
    store = JobStore(tmp_path)
    job_id = running_job(store, NOW - timedelta(hours=2), name="slow", team="vision")
    write_lines(store.job_dir(job_id) / "progress.jsonl", [
        json.dumps({"step": s, "data_s": 0.5, "compute_s": 0.5}) for s in range(1, 30)
    ])  # fmt: skip
    config = parse_notify_config(CONFIG)
    scheduler = BackgroundScheduler(timezone=UTC)
    assert register_digest_job(scheduler, store, "local", NotifyConfig(config.teams)) is None
    assert register_digest_job(scheduler, store, "local", config) is not None
    assert send_digest(store, "local", config, NOW) == 1
    (pending,) = Outbox(store.path, "local").due(NOW + timedelta(seconds=1))
    assert pending.job_id == job_id
    assert "up to 1.00 USD avoidable" in pending.notification.message


def test_recommendations_are_left_out_of_the_digest(tmp_path: Path) -> None:
    """A busy V100 with memory to spare gets mixed-precision and larger-batch recommendations: they
    change the numerics, so the avoidable-spend digest neither counts nor lists them."""
    store = JobStore(tmp_path)
    job_id = running_job(store, NOW - timedelta(hours=2), name="roomy", team="vision")
    window = {"kind": "gpuctl.monitor.window", "start": (NOW - timedelta(hours=2)).timestamp(),
              "duration_s": 7200.0, "gpus": 1, "model": "Tesla V100-SXM2-16GB", "util_mean_pct": 80.0,
              "util_p95_pct": 95.0, "util_max_pct": 100.0, "mem_used_max_bytes": 4 * 2**30,
              "mem_total_bytes": 16 * 2**30, "idle_seconds": 0.0}  # fmt: skip
    (store.job_dir(job_id) / "monitor-summary-r-a1-n0.jsonl").write_text(json.dumps(window) + "\n")
    assert send_digest(store, "local", parse_notify_config(CONFIG), NOW) == 1
    (pending,) = Outbox(store.path, "local").due(NOW + timedelta(seconds=1))
    message = pending.notification.message
    assert "mixed-precision" not in message and "larger-batch" not in message, message
    assert "up to 0.00 USD avoidable" in message, message
