"""The operator's admission of a GPUJob's team: a team it may not charge, or one without a budget of
its own, never escapes the chart's budgets; bad prices and budgets are refused with the field named.

The pure admission step (:func:`operators.kubernetes.admission.admission_refusal`) with the API's
GPUJob listing replaced by the GPUJobs of a dict of namespaces."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from operators.kubernetes.admission import admission_refusal, check_settings, first_sight
from orchestrator.backends.kubernetes import client
from orchestrator.backends.kubernetes.config import COST_CONFIG_ENV, PRICE_CATALOG_ENV
from orchestrator.backends.kubernetes.gpujob import job_spec
from orchestrator.controller.admission import Refused
from orchestrator.errors import UserError
from orchestrator.state.status import FailureReason

NOW = datetime(2026, 3, 20, 12, tzinfo=UTC)
CATALOG = (
    "cloud,instance_type,accelerator,accelerator_count,gpu_memory_gib,vcpus,memory_gib,"
    "on_demand_usd_per_hour,spot_usd_per_hour,region,zone\n"
    "onprem,rack-a,A10G,1,24,8,32,{price},,dc1,dc1-a\n"
)
"""One on-demand A10G node at ``price`` USD an hour."""


def gpujob_spec(team: str) -> dict[str, Any]:
    return {"team": team, "command": "train.py", "resources": {"gpu_types": ["A10G"], "nodes": 1}}


def spent_gpujob(team: str, usd: float, running: bool = False) -> dict[str, Any]:
    """A GPUJob whose status holds one segment of ``usd`` this month (one hour at that price; still
    open when ``running``)."""
    segment = {"start": "2026-03-02T00:00:00+00:00", "end": "2026-03-02T01:00:00+00:00", "nodes": 1,
               "nodePriceUsdPerHour": usd}  # fmt: skip
    if running:
        segment = {**segment, "start": "2026-03-20T11:00:00+00:00", "end": None}
    state = "RUNNING" if running else "SUCCEEDED"
    return {"spec": {"team": team}, "status": {"state": state, "segments": [segment]}}


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, list[dict[str, Any]]]:
    """GPUJobs by namespace, as the operator lists them (one namespace, or all); A10G at $2/h."""
    jobs: dict[str, list[dict[str, Any]]] = {}

    def listed(namespace: str) -> list[dict[str, Any]]:
        return [
            {**job, "metadata": {"name": f"j{i}", "namespace": namespace}}
            for i, job in enumerate(jobs.get(namespace, []))
        ]

    monkeypatch.setattr(client, "list_gpujobs", lambda ns, api=None: listed(ns))
    monkeypatch.setattr(
        client, "list_gpujobs_everywhere", lambda api=None: [j for ns in jobs for j in listed(ns)]
    )
    catalog = tmp_path / "prices.csv"
    catalog.write_text(CATALOG.format(price=2.0))
    monkeypatch.setenv(PRICE_CATALOG_ENV, str(catalog))
    return jobs


def chart_budgets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    """The chart's ``budgets`` as the operator reads them (``costs.yaml``, ``$GPUCTL_COST_CONFIG``)."""
    path = tmp_path / "costs.yaml"
    path.write_text(text)
    monkeypatch.setenv(COST_CONFIG_ENV, str(path))


def refusal(team: str, namespace: str = "ml", spec: Mapping[str, Any] | None = None) -> Refused | None:
    job = job_spec("j", namespace, spec if spec is not None else gpujob_spec(team))
    return admission_refusal(job, namespace, NOW)


ML_CHARGES = "namespace_teams: {ml: [ml-research, ml-research2, default, ML-Research]}"
"""Namespace ``ml`` may charge every team these tests name: what refuses them is the budgets."""


@pytest.mark.parametrize("team", ["ml-research2", "default", "ML-Research"])
def test_a_team_without_a_budget_of_its_own_is_refused(
    cluster: dict[str, list[dict[str, Any]]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, team: str
) -> None:
    chart_budgets(tmp_path, monkeypatch, f"budgets: {{teams: {{ml-research: 100}}, {ML_CHARGES}}}\n")
    cluster["ml"] = [spent_gpujob("ml-research", 99.0)]
    over = refusal("ml-research")
    assert over is not None and over.reason is FailureReason.OVER_BUDGET
    dodged = refusal(team)
    assert dodged is not None and dodged.reason is FailureReason.INVALID_SPEC, "never unlimited"
    assert f"team '{team}'" in dodged.message and dodged.how_to_fix


@pytest.mark.parametrize("team", ["ml-research2", "default"])
def test_unlisted_teams_share_one_budget(
    cluster: dict[str, list[dict[str, Any]]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, team: str
) -> None:
    chart_budgets(
        tmp_path,
        monkeypatch,
        f"budgets: {{teams: {{ml-research: 100}}, other_teams_monthly_usd: 50, {ML_CHARGES}}}\n",
    )
    assert refusal(team) is None
    cluster["ml"] = [spent_gpujob("someone-else", 49.0)]  # another unlisted team spent the shared $50
    shared = refusal(team)
    assert shared is not None and shared.reason is FailureReason.OVER_BUDGET
    assert "$1.00 left of its $50.00" in shared.message and "other_teams_monthly_usd" in shared.message
    case = refusal("ML-Research")
    assert case is not None and case.reason is FailureReason.INVALID_SPEC
    assert "write team: ml-research" in case.how_to_fix


def test_a_namespace_charges_only_its_teams_and_spend_counts_across_them(
    cluster: dict[str, list[dict[str, Any]]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    chart_budgets(
        tmp_path,
        monkeypatch,
        "budgets: {teams: {ml-research: 100, vision: 100},"
        " namespace_teams: {ml: [ml-research], cv: [vision, ml-research]}}\n",
    )
    assert refusal("ml-research") is None
    other = refusal("vision")
    assert other is not None and other.reason is FailureReason.INVALID_SPEC
    assert "may not be charged from namespace 'ml'" in other.message
    unlisted = refusal("ml-research", namespace="sandbox")
    assert unlisted is not None and "may charge no team" in unlisted.message
    cluster["cv"] = [spent_gpujob("ml-research", 99.0)]  # spent from the other namespace allowed to
    over = refusal("ml-research")
    assert over is not None and over.reason is FailureReason.OVER_BUDGET and "(spent $99.00)" in over.message


@pytest.mark.parametrize("amount", [".nan", ".inf", "-98"])
def test_a_bad_budget_in_the_chart_is_refused_naming_the_field(
    cluster: dict[str, list[dict[str, Any]]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, amount: str
) -> None:
    chart_budgets(tmp_path, monkeypatch, f"budgets: {{teams: {{ml-research: {amount}}}}}\n")
    with pytest.raises(UserError, match=r"budgets\.teams\.ml-research is .* not an amount of USD"):
        refusal("ml-research")


@pytest.mark.parametrize("price", ["nan", "inf", "-98", "-inf"])
def test_a_bad_price_in_the_charts_catalog_is_refused_naming_the_column(
    cluster: dict[str, list[dict[str, Any]]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, price: str
) -> None:
    chart_budgets(tmp_path, monkeypatch, "budgets: {teams: {ml: 100}}\n")
    (tmp_path / "prices.csv").write_text(CATALOG.format(price=price))
    refused = refusal("ml")
    assert refused is not None and refused.reason is FailureReason.INVALID_SPEC, "never admitted"
    assert f"line 2: on_demand_usd_per_hour is '{price}'" in refused.message


def test_the_operator_checks_budgets_and_prices_at_startup(
    cluster: dict[str, list[dict[str, Any]]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    chart_budgets(tmp_path, monkeypatch, "budgets: {other_teams_monthly_usd: 10}\n")
    check_settings()
    (tmp_path / "prices.csv").write_text(CATALOG.format(price="nan"))
    with pytest.raises(UserError, match="on_demand_usd_per_hour is 'nan'"):
        check_settings()
    chart_budgets(tmp_path, monkeypatch, "budgets: {other_teams_monthly_usd: -98}\n")
    with pytest.raises(UserError, match=r"budgets\.other_teams_monthly_usd is -98"):
        check_settings()


def test_by_default_a_namespace_charges_only_the_team_named_as_it(
    cluster: dict[str, list[dict[str, Any]]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert refusal("ml") is None, "no budgets at all: the namespace's own team"
    dodged = refusal("vision")
    assert dodged is not None and dodged.reason is FailureReason.INVALID_SPEC
    assert dodged.message == (
        "team 'vision' may not be charged from namespace 'ml': it may charge only 'ml' "
        "(by default, the team named as the namespace)"
    )
    assert "budgets.namespaceTeams" in dodged.how_to_fix
    chart_budgets(tmp_path, monkeypatch, "budgets: {teams: {vision: 100}}\n")
    dodged = refusal("vision")
    assert dodged is not None and dodged.reason is FailureReason.INVALID_SPEC, "never another team's budget"


def test_team_spend_counts_the_gpujobs_of_every_watched_namespace(
    cluster: dict[str, list[dict[str, Any]]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    chart_budgets(tmp_path, monkeypatch, "budgets: {teams: {ml: 100}, spend_namespaces: [ml, sandbox]}\n")
    cluster["ml"] = [spent_gpujob("ml", 50.0)]
    cluster["sandbox"] = [spent_gpujob("ml", 49.0)]  # charged to ml before namespaceTeams said otherwise
    cluster["unwatched"] = [spent_gpujob("ml", 1000.0)]  # not in spend_namespaces: not listed
    over = refusal("ml")
    assert over is not None and over.reason is FailureReason.OVER_BUDGET and "(spent $99.00)" in over.message
    chart_budgets(tmp_path, monkeypatch, "budgets: {teams: {ml: 1100}}\n")  # no list: every namespace
    over = refusal("ml")
    assert over is not None and "(spent $1099.00)" in over.message


def test_a_users_month_and_hourly_cap_count_its_gpujobs_in_every_namespace(
    cluster: dict[str, list[dict[str, Any]]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On Kubernetes a GPUJob's user is its namespace: its spend is summed over the listing of every
    namespace (the one source, :func:`operators.kubernetes.admission.ledger_gpujobs`)."""
    chart_budgets(tmp_path, monkeypatch, "budgets: {default_user: {monthly_usd: 100, hourly_usd: 10}}\n")
    cluster["ml"] = [spent_gpujob("ml", 90.0)]
    cluster["cv"] = [spent_gpujob("cv", 95.0)]  # another user's
    assert refusal("ml") is None  # $10 left, one hour at $2
    cluster["ml"].append(spent_gpujob("ml", 9.0))
    over = refusal("ml")
    assert over is not None and over.reason is FailureReason.OVER_BUDGET
    assert over.message == (
        "user 'ml' has $1.00 left of its $100.00 monthly budget (spent $99.00); one hour of job 'j' is $2.00"
    )
    assert "budgets.default_user.monthly_usd" in over.how_to_fix
    cluster["ml"] = [spent_gpujob("ml", 1.0), spent_gpujob("ml", 9.0, running=True)]
    hourly = refusal("ml")
    assert hourly is not None and hourly.message == (
        "user 'ml' runs $9.00/h; job 'j' adds $2.00/h, above its $10.00/h cap"
    )


def test_a_job_admitted_and_waiting_for_its_users_slot_is_not_admitted_again() -> None:
    waiting = {"type": "Waiting", "status": "True", "reason": "UserJobs", "message": "user 'ml' has 2 job(s)"}
    assert first_sight({}) and first_sight({"state": "PENDING"})
    assert not first_sight({"state": "PENDING", "conditions": [waiting]})
    assert first_sight({"state": "PENDING", "conditions": [{**waiting, "reason": "Pending"}]})
    assert not first_sight({"state": "PLACING"})
