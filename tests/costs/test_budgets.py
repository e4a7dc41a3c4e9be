"""Budget refusals and the controller config's budget and report sections."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from orchestrator.costs.budgets import (
    CostConfig,
    TeamBudget,
    check_submission,
    gpujob_month_spent,
    load_cost_config,
    month_window,
    over_budget,
    parse_cost_config,
    team_budget,
    team_month_spent,
    with_namespace_team,
)
from orchestrator.errors import UserError
from orchestrator.spec import load_spec_text
from tests.costs.factory import at, job, seg

SPEC = "name: train\nteam: ml-research\ncommand: train.py\n"


def test_team_budget_refusal_names_the_numbers() -> None:
    spec = load_spec_text(SPEC)
    with pytest.raises(UserError) as err:
        check_submission(
            spec,
            estimated_hourly_usd=30.0,
            team_month_spent=980.0,
            team_budget=TeamBudget("ml-research", 1000.0),
        )
    text = str(err.value)
    assert "$20.00 left of its $1000.00" in text and "$30.00" in text and "To fix" in text
    check_submission(
        spec, estimated_hourly_usd=19.0, team_month_spent=980.0, team_budget=TeamBudget("ml-research", 1000.0)
    )
    check_submission(spec, estimated_hourly_usd=500.0, team_month_spent=0.0, team_budget=None)


def test_whole_estimate_counts_when_compute_hours_known() -> None:
    spec = load_spec_text(SPEC + "goals: {compute_hours: 10, budget_usd: 100}\n")
    with pytest.raises(UserError, match=r"about \$120.00 .*budget_usd \$100.00"):
        check_submission(spec, estimated_hourly_usd=12.0, team_month_spent=0.0, team_budget=None)
    with pytest.raises(UserError, match=r"estimated cost is \$90.00"):
        check_submission(
            spec,
            estimated_hourly_usd=9.0,
            team_month_spent=950.0,
            team_budget=TeamBudget("ml-research", 1000.0),
        )
    check_submission(
        spec, estimated_hourly_usd=9.0, team_month_spent=900.0, team_budget=TeamBudget("ml-research", 1000.0)
    )


def test_max_hourly_cap() -> None:
    spec = load_spec_text(SPEC + "market: {max_hourly_usd: 5}\n")
    with pytest.raises(UserError, match=r"\$6.00/h, above its max_hourly_usd \$5.00/h"):
        check_submission(spec, estimated_hourly_usd=6.0, team_month_spent=0.0, team_budget=None)


def test_over_budget() -> None:
    assert over_budget(10.0, 10.0) and over_budget(10.5, 10.0)
    assert not over_budget(9.99, 10.0) and not over_budget(1e9, None)


def test_team_month_spent_counts_only_this_month_and_team() -> None:
    jobs = [job("a", team="ml-research"), job("b", team="other")]
    segments = [
        seg("a", at(23, day=28).replace(month=2), at(2).replace(day=1), price=1.0, od=1.0),  # 2h in March
        seg("a", at(10), at(12), price=3.0, od=3.0),
        seg("b", at(10), at(12), price=100.0, od=100.0),
    ]
    assert team_month_spent(jobs, segments, "ml-research", now=at(20)) == pytest.approx(2.0 + 6.0)
    dec = month_window(at(10).replace(month=12))
    assert (dec.start.month, dec.end.year, dec.end.month) == (12, 2027, 1)


def test_config_file(tmp_path: Path) -> None:
    path = tmp_path / "controller.yaml"
    path.write_text('budgets: {teams: {ml-research: 1000}}\nreports: {schedule: "0 8 * * *", folder: /r}\n')
    config = load_cost_config(path)
    assert team_budget(config, "ml-research") == TeamBudget("ml-research", 1000.0)
    assert config.report_schedule == "0 8 * * *" and config.report_folder == Path("/r")
    assert load_cost_config(tmp_path / "missing.yaml").team_budgets_usd == {}
    with pytest.raises(UserError, match="not an amount"):
        parse_cost_config("budgets: {teams: {a: lots}}")
    with pytest.raises(UserError, match="must be a mapping"):
        parse_cost_config("budgets: [1]")


def test_gpujob_month_spent_clips_segments_to_this_month_and_now() -> None:
    now = datetime(2026, 11, 10, 12, 0, tzinfo=UTC)

    def gpujob(team: str | None, *segments: tuple[str, str | None]) -> dict[str, Any]:
        spec = {"team": team} if team else {}
        segs = [{"start": s, "end": e, "nodes": 2, "nodePriceUsdPerHour": 5.0} for s, e in segments]
        return {"spec": spec, "status": {"segments": segs}}

    jobs: list[dict[str, Any]] = [
        gpujob("vision", ("2026-10-31T22:00:00Z", "2026-11-01T03:00:00Z")),  # 3 h of it in November
        gpujob("vision", ("2026-11-10T10:00:00Z", None)),  # open: 2 h up to now
        gpujob("vision", ("2026-10-01T00:00:00Z", "2026-10-02T00:00:00Z")),  # last month
        gpujob("nlp", ("2026-11-02T00:00:00Z", "2026-11-03T00:00:00Z")),
        gpujob(None, ("2026-11-02T00:00:00Z", "2026-11-02T01:00:00Z")),  # team "default"
        {"spec": {"team": "vision"}},  # not started: no status
    ]
    assert gpujob_month_spent(jobs, "vision", now) == pytest.approx(5 * 2 * 5.0)
    assert gpujob_month_spent(jobs, "default", now) == pytest.approx(10.0)
    assert gpujob_month_spent(jobs, "nobody", now) == 0.0


@pytest.mark.parametrize("team", ["ml-research2", "default", "ML-Research"])
def test_a_team_not_in_budgets_teams_is_never_unlimited(team: str) -> None:
    config = parse_cost_config("budgets: {teams: {ml-research: 1000}}")
    with pytest.raises(UserError, match=f"team '{team}'") as err:
        team_budget(config, team)
    assert "To fix" in str(err.value)
    shared = parse_cost_config("budgets: {teams: {ml-research: 1000}, other_teams_monthly_usd: 50}")
    if team == "ML-Research":  # a listed name in another case is never a team of its own
        with pytest.raises(UserError, match="write team: ml-research"):
            team_budget(shared, team)
        return
    budget = team_budget(shared, team)
    assert budget.monthly_usd == 50.0 and budget.counts("someone-else") and not budget.counts("ml-research")


def test_the_shared_budget_counts_every_unlisted_teams_spend() -> None:
    config = parse_cost_config("budgets: {teams: {ml-research: 1000}, other_teams_monthly_usd: 50}")
    jobs = [job("a", team="ml-research"), job("b", team="x"), job("c", team="default")]
    segments = [seg(j, at(10), at(11), price=10.0, od=10.0) for j in "abc"]
    shared = team_budget(config, "ml-research2")
    assert team_month_spent(jobs, segments, shared.counts, now=at(20)) == pytest.approx(20.0)
    with pytest.raises(UserError, match=r"team 'ml-research2' \(sharing .*\$30.00 left of its \$50.00"):
        check_submission(load_spec_text(SPEC), 31.0, 20.0, shared)


def test_no_budgets_at_all_is_no_limit_and_namespaces_restrict_teams() -> None:
    assert team_budget(CostConfig(), "anything") == TeamBudget("anything", None)
    config = parse_cost_config("budgets: {teams: {a: 1}, namespace_teams: {ns-a: [a]}}")
    assert team_budget(config, "a", "ns-a").monthly_usd == 1.0
    assert team_budget(config, "a").monthly_usd == 1.0  # no namespace: not Kubernetes
    with pytest.raises(UserError, match="may not be charged from namespace 'ns-b': it may charge no team"):
        team_budget(config, "a", "ns-b")


def test_by_default_a_namespace_charges_only_the_team_named_as_it() -> None:
    none = CostConfig()
    assert team_budget(none, "vision", "vision") == TeamBudget("vision", None)
    with pytest.raises(
        UserError, match=r"'ml' may not be charged from namespace 'vision': it may charge only 'vision'"
    ):
        team_budget(none, "ml", "vision")
    assert team_budget(none, "ml").monthly_usd is None, "not Kubernetes: no namespace"


def test_a_job_submitted_to_kubernetes_without_a_team_charges_its_namespaces() -> None:
    untold = load_spec_text("name: train\ncommand: train.py\n")
    assert with_namespace_team(untold, CostConfig(), "vision").team == "vision"
    listed = parse_cost_config("budgets: {namespace_teams: {ml: [ml-research], lab: [a, b]}}")
    assert with_namespace_team(untold, listed, "ml").team == "ml-research"
    assert with_namespace_team(untold, listed, "lab").team == "default", "several: admission names them"
    told = load_spec_text(SPEC)
    assert with_namespace_team(told, CostConfig(), "vision").team == "ml-research", "named: as named"


@pytest.mark.parametrize("amount", [".nan", ".inf", "-.inf", "-98", "true", "'5'"])
@pytest.mark.parametrize("field", ["teams: {ml-research: AMOUNT}", "other_teams_monthly_usd: AMOUNT"])
def test_a_budget_that_is_no_finite_amount_is_refused_naming_the_field(amount: str, field: str) -> None:
    name = "budgets.teams.ml-research" if field.startswith("teams") else "budgets.other_teams_monthly_usd"
    with pytest.raises(UserError, match=rf"{name} is .*not an amount of USD") as err:
        parse_cost_config(f"budgets: {{{field.replace('AMOUNT', amount)}}}")
    assert f"To fix: set {name} to a number of USD" in str(err.value)


def test_unknown_budget_settings_and_bad_namespace_teams_are_refused() -> None:
    with pytest.raises(UserError, match=r"budgets\.other_team_monthly_usd is not a budgets setting"):
        parse_cost_config("budgets: {other_team_monthly_usd: 5}")
    with pytest.raises(UserError, match=r"budgets\.namespace_teams\.ns-a is 'a', not a list"):
        parse_cost_config("budgets: {namespace_teams: {ns-a: a}}")
