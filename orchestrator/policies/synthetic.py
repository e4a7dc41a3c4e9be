"""Synthetic spot availability traces, seeded and deterministic, for validating policies on data they
were not tuned on.

Base process: per zone, a semi-Markov up/down process whose run lengths are log-normal, fitted to a
real zone's up and down runs (:func:`fit_zone`), then perturbed per synthetic zone (means scaled by
0.5x to 2x) so that the zones are new ones. Regimes the real traces do not show are layered on top:

* ``fitted``: the base process alone;
* ``long-outages``: every few days a zone (sometimes all of them) loses spot for 12 to 48 hours;
* ``daily-cycles``: spot comes back faster and stays longer at night than by day (24 h period);
* ``fail-together``: a market-wide process, down a third of the time, takes every zone down at once.

:func:`trace_set` returns the zone groups of one regime: three single zones, a group of three and a
group of six.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from orchestrator.errors import UserError
from orchestrator.policies.traces import AvailabilityTrace

TICK_H = 195.0 / 3600.0  # the shared AWS traces' tick
REGIMES = ("fitted", "long-outages", "daily-cycles", "fail-together")
BoolRows = NDArray[np.bool_]


@dataclass(frozen=True)
class RunFit:
    """Log-normal run lengths in hours: mean and spread of log(hours), for up and for down runs."""

    up_mu: float
    up_sigma: float
    down_mu: float
    down_sigma: float


def runs(up: NDArray[np.bool_]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Lengths (ticks) of the up runs and of the down runs of one zone."""
    edges = np.flatnonzero(np.diff(up.astype(np.int8))) + 1
    bounds = np.concatenate([[0], edges, [up.shape[0]]])
    lengths = np.diff(bounds).astype(np.int64)
    first_up = bool(up[0]) if up.size else False
    kinds = np.array([(i % 2 == 0) == first_up for i in range(lengths.shape[0])], dtype=bool)
    return lengths[kinds], lengths[~kinds]


def fit_zone(up: NDArray[np.bool_], tick_h: float) -> RunFit:
    """Log-normal fit of one zone's run lengths (at least a tick's spread; a default when too few runs)."""
    ups, downs = runs(up)

    def fit(lengths: NDArray[np.int64], default_h: float) -> tuple[float, float]:
        if lengths.shape[0] < 3:
            return math.log(default_h), 1.0
        logs = np.log(lengths * tick_h)
        return float(logs.mean()), max(float(logs.std()), 0.3)

    up_mu, up_sigma = fit(ups, 4.0)
    down_mu, down_sigma = fit(downs, 2.0)
    return RunFit(up_mu, up_sigma, down_mu, down_sigma)


def fit_trace(trace: AvailabilityTrace) -> list[RunFit]:
    up = trace.available(1)
    return [fit_zone(up[z], trace.tick_h) for z in range(up.shape[0])]


Modulation = Callable[[float], float]  # hour of the trace -> factor on the mean up run (down: 1/x)


def semi_markov(
    fit: RunFit, ticks: int, rng: np.random.Generator, tick_h: float, modulation: Modulation | None = None
) -> BoolRows:
    """One zone's availability for ``ticks`` ticks, starting in a random state."""
    out = np.zeros(ticks, dtype=bool)
    t, state = 0, bool(rng.random() < 0.5)
    while t < ticks:
        mu, sigma = (fit.up_mu, fit.up_sigma) if state else (fit.down_mu, fit.down_sigma)
        hours = math.exp(rng.normal(mu, sigma))
        if modulation is not None:
            factor = modulation(t * tick_h)
            hours *= factor if state else 1.0 / factor
        length = max(1, round(hours / tick_h))
        out[t : t + length] = state
        t += length
        state = not state
    return out


def _perturbed(fit: RunFit, rng: np.random.Generator) -> RunFit:
    up_scale, down_scale = (math.log(2.0) * rng.uniform(-1.0, 1.0) for _ in range(2))
    return RunFit(fit.up_mu + up_scale, fit.up_sigma, fit.down_mu + down_scale, fit.down_sigma)


def zones_for(
    regime: str, fits: list[RunFit], zones: int, days: float, seed: int, tick_h: float = TICK_H
) -> AvailabilityTrace:
    """``zones`` synthetic zones of ``regime`` over ``days`` days (deterministic in ``seed``)."""
    if regime not in REGIMES:
        raise UserError(f"unknown synthetic regime '{regime}'", f"use one of {', '.join(REGIMES)}")
    if not fits:
        raise UserError("no zone fits to draw synthetic zones from", "fit at least one real trace")
    rng = np.random.default_rng([seed, REGIMES.index(regime), zones])
    ticks = int(days * 24.0 / tick_h)
    modulation: Modulation | None = None
    if regime == "daily-cycles":
        phase = rng.uniform(0.0, 24.0)
        modulation = lambda h: 3.0 ** math.sin(2.0 * math.pi * (h - phase) / 24.0)  # noqa: E731
    rows = np.stack(
        [
            semi_markov(_perturbed(fits[int(rng.integers(len(fits)))], rng), ticks, rng, tick_h, modulation)
            for _ in range(zones)
        ]
    )
    if regime == "long-outages":
        t = 0
        while True:
            t += int(rng.uniform(2.0, 6.0) * 24.0 / tick_h)
            if t >= ticks:
                break
            length = int(rng.uniform(12.0, 48.0) / tick_h)
            hit = slice(None) if rng.random() < 0.4 else int(rng.integers(zones))
            rows[hit, t : t + length] = False
    elif regime == "fail-together":
        market = RunFit(math.log(16.0), 0.8, math.log(8.0), 0.8)
        rows &= semi_markov(market, ticks, rng, tick_h)[None, :]
    names = tuple(f"{regime}-{zones}z-{i}" for i in range(zones))
    return AvailabilityTrace(names, tick_h, rows.astype(np.int64))


def trace_set(
    regime: str, fits: list[RunFit], seed: int = 0, days: float = 30.0, tick_h: float = TICK_H
) -> list[tuple[str, AvailabilityTrace]]:
    """The zone groups of one regime: three single zones, a group of three, a group of six."""
    groups: list[tuple[str, AvailabilityTrace]] = []
    for i in range(3):
        one = zones_for(regime, fits, 1, days, seed + 101 * i, tick_h)
        groups.append((f"{regime} zone {i + 1}", one))
    groups.append((f"{regime} 3 zones", zones_for(regime, fits, 3, days, seed, tick_h)))
    groups.append((f"{regime} 6 zones", zones_for(regime, fits, 6, days, seed, tick_h)))
    return groups
