"""Admission, the one up-front check every backend's submission and the operator call: a decision,
Admitted or Refused with a failure reason, from the spec, the backend's placements and the budgets."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from orchestrator.backends.base import OwnPlacements
from orchestrator.backends.slurm import SlurmClusterConfig
from orchestrator.backends.slurm.placements import own_placements
from orchestrator.catalog.offers import MarketKind
from orchestrator.controller.admission import Admitted, Refused, admit, policy_refusal
from orchestrator.controller.placement import Candidates, candidates_for, zone_candidates
from orchestrator.costs.budgets import CostConfig, parse_cost_config
from orchestrator.policies.market import POLICIES
from orchestrator.spec import JobSpec, load_spec_text
from orchestrator.state.status import FailureReason

OVER_BUDGET_JOB = """name: capped
command: train.py
resources: {gpu_types: [H100], gpus_per_node: 8, nodes: 1}
market: {mode: on-demand, max_hourly_usd: 1}
"""
"""The over-budget job of the admission tests on every backend: no backend prices 8 H100 at $1/h."""

SLURM_CONFIG = SlurmClusterConfig(
    gres_types={"H100": "h100"},
    partitions={MarketKind.SPOT: "preempt", MarketKind.ON_DEMAND: "batch"},
    prices_usd_per_gpu_hour={"h100": {"preempt": 1.0, "batch": 2.5}},
)
"""A SLURM cluster config pricing 8 H100 at $8/h on spot and $20/h on demand."""


def spec(text: str = "", **fields: Any) -> JobSpec:
    doc = yaml.safe_load(text or OVER_BUDGET_JOB)
    for key, value in fields.items():
        doc[key] = {**doc.get(key, {}), **value} if isinstance(value, dict) else value
    return load_spec_text(yaml.safe_dump(doc))


def catalog(s: JobSpec) -> Candidates:
    return zone_candidates(s)


def slurm(s: JobSpec) -> Candidates:
    return candidates_for(s, own_placements(s, SLURM_CONFIG))


@pytest.mark.parametrize("search", [catalog, slurm], ids=["catalog", "slurm"])
def test_over_the_hourly_cap_is_refused_over_budget(search: Any) -> None:
    decision = admit(spec(), search)
    assert isinstance(decision, Refused) and decision.reason is FailureReason.OVER_BUDGET
    assert "above its max_hourly_usd $1.00/h" in decision.message and decision.how_to_fix

    admitted = admit(spec(market={"max_hourly_usd": 1000}), search)
    assert isinstance(admitted, Admitted) and admitted.placement.market is MarketKind.ON_DEMAND
    assert admitted.hourly_usd == admitted.placement.node_price_usd_per_hour > 1.0


def test_slurm_prices_are_the_cluster_configs() -> None:
    admitted = admit(spec(market={"max_hourly_usd": 20}), slurm)
    assert isinstance(admitted, Admitted) and admitted.hourly_usd == 20.0
    assert (admitted.placement.zone, admitted.placement.cloud) == ("batch", "slurm")
    spot = admit(spec(market={"mode": "spot", "max_hourly_usd": 8}), slurm)
    assert isinstance(spot, Admitted) and spot.placement.zone == "preempt"
    assert isinstance(admit(spec(market={"max_hourly_usd": 19.9}), slurm), Refused)


def test_job_budget_and_team_budget() -> None:
    uncapped = {"mode": "on-demand", "max_hourly_usd": None}
    job = spec(market=uncapped, goals={"budget_usd": 20, "compute_hours": 2})
    refused = admit(job, slurm)  # 2 h at $20/h
    assert isinstance(refused, Refused) and refused.reason is FailureReason.OVER_BUDGET
    assert "above its budget_usd $20.00" in refused.message
    one_hour = spec(market=uncapped)
    costs = CostConfig(team_budgets_usd={"default": 1000.0})
    assert isinstance(admit(one_hour, slurm, costs, lambda _: 980.0), Admitted)  # $20 left: one hour fits
    team = admit(one_hour, slurm, costs, lambda _: 980.01)
    assert isinstance(team, Refused) and team.reason is FailureReason.OVER_BUDGET
    assert "team 'default' has $19.99 left of its $1000.00 monthly budget" in team.message


def test_unknown_policy_is_an_invalid_spec_naming_the_valid_ones() -> None:
    job = spec(market={"policy": "nope"})
    refused = policy_refusal(job)
    assert refused is not None and refused.reason is FailureReason.INVALID_SPEC
    assert "unknown market policy 'nope'" in refused.message
    assert all(name in refused.how_to_fix for name in POLICIES)
    assert admit(job, catalog) == refused
    assert policy_refusal(spec(market={"policy": next(iter(POLICIES))})) is None


def test_unknown_gpu_type_and_no_offer_in_the_zones() -> None:
    unknown = admit(spec(resources={"gpu_types": ["Z900"]}), catalog)
    assert isinstance(unknown, Refused) and unknown.reason is FailureReason.INVALID_SPEC
    assert "unknown GPU type 'Z900'" in unknown.message
    nowhere = admit(spec(market={"zones": ["nowhere-1a"]}), catalog)
    assert isinstance(nowhere, Refused) and nowhere.reason is FailureReason.NO_CAPACITY
    assert "no offer of H100 in nowhere-1a" in nowhere.message


def test_spot_only_without_a_spot_offer_is_refused_no_capacity() -> None:
    on_demand_only = slurm(spec())
    only = OwnPlacements({}, on_demand_only.on_demand)
    search = lambda s: candidates_for(s, only)  # noqa: E731
    refused = admit(spec(market={"mode": "spot", "max_hourly_usd": None}), search)
    assert isinstance(refused, Refused) and refused.reason is FailureReason.NO_CAPACITY
    fallback = admit(spec(market={"mode": "spot-with-fallback", "max_hourly_usd": None}), search)
    assert isinstance(fallback, Admitted) and fallback.placement.market is MarketKind.ON_DEMAND


@pytest.mark.parametrize("team", ["ml-research2", "default", "ML-Research"])
@pytest.mark.parametrize("search", [catalog, slurm], ids=["local", "slurm"])
def test_a_team_variant_does_not_escape_the_budgets_of_config_yaml(search: Any, team: str) -> None:
    config = parse_cost_config("budgets: {teams: {ml-research: 5}}")  # $GPUCTL_HOME/config.yaml
    uncapped = {"mode": "on-demand", "max_hourly_usd": None}
    listed = admit(spec(market=uncapped, team="ml-research"), search, config)
    assert isinstance(listed, Refused) and listed.reason is FailureReason.OVER_BUDGET
    variant = admit(spec(market=uncapped, team=team), search, config)
    assert isinstance(variant, Refused) and variant.reason is FailureReason.INVALID_SPEC
    shared = parse_cost_config("budgets: {teams: {ml-research: 5}, other_teams_monthly_usd: 5}")
    pooled = admit(spec(market=uncapped, team=team), search, shared)
    assert isinstance(pooled, Refused), "a shared budget of $5 is no more than $5"
