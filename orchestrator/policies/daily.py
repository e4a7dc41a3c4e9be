"""The market's daily cycle, read off the days before a job.

Spot markets have a daily rhythm (the shared AWS traces too: in us-east-1c spot is up 60 % of the
time in the first hours of the trace's day and 32 % twelve hours later). A job's own history learns
it a day into the job, when most of its slack may be spent; a controller that has watched the zones
knows it at the start. This module turns the hours before a job (the share of each hour in which some
allowed zone had spot) into a cycle the plan can use, or into none:

* **Only when the days agree.** A week of a market without a rhythm reads as a cycle of strength 0.1
  to 0.4 from noise alone. So each whole day gives its own first harmonic (by clock hour), and the
  cycle counts only when their mean is at least two standard errors from zero, over at least three
  days. Else the strength is 0: no cycle.
* **Strength and peak** from all those days together: the log-odds of spot by clock hour, its first
  harmonic ``A cos(2 pi (h - peak) / 24)``; strength = A / 2, because the plan multiplies the rate of
  getting spot back by m(h) and divides the rate of losing it by m(h) (:class:`DailyCycle` in
  :mod:`orchestrator.policies.planner`), so the odds move by m(h) squared.

Pure numpy over a batch of jobs (rows); hours not watched are NaN, and a day with one counts no more.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]

MARKET_LOG_H = 168.0
"""Hours of the market before a job that the simulator gives it (and a controller keeps): a week."""
MIN_DAYS = 3
_SHARE_CLIP = 0.02  # log-odds of an hour always or never with spot: as if 2 % / 98 %


def fit_daily_cycle(hourly: FloatArray, first_clock_h: FloatArray) -> tuple[FloatArray, FloatArray]:
    """(strength, peak clock hour) per row of ``hourly`` (rows x hours, oldest first: the share of
    each hour with spot in some zone, NaN where not watched), whose first hour begins at clock hour
    ``first_clock_h`` (per row). Strength 0 where the whole days do not agree on a cycle."""
    rows, hours = hourly.shape
    days = hours // 24
    strength, peak = np.zeros(rows), np.zeros(rows)
    if days < MIN_DAYS:
        return strength, peak
    recent = hourly[:, hours - 24 * days :].reshape(rows, days, 24)
    # clock hour (the middle) of each of the 24 positions of a day: the same in every day
    clock = np.mod(first_clock_h[:, None] + (hours - 24 * days) + np.arange(24)[None, :] + 0.5, 24.0)
    turn = np.exp(-2j * math.pi * clock / 24.0)  # (rows, 24)
    whole = np.isnan(recent).sum(axis=2) == 0  # (rows, days): watched every hour
    filled = np.where(np.isnan(recent), 0.0, recent)
    per_day = 2.0 * np.mean(filled * turn[:, None, :], axis=2)  # each day's first harmonic
    n = whole.sum(axis=1)
    enough = n >= MIN_DAYS
    safe_n = np.maximum(n, 1)
    mean = np.where(whole, per_day, 0.0).sum(axis=1) / safe_n
    spread = np.where(whole, np.abs(per_day - mean[:, None]) ** 2, 0.0).sum(axis=1)
    se = np.sqrt(spread / np.maximum(safe_n * (safe_n - 1), 1))
    agree = enough & (np.abs(mean) >= 2.0 * se) & (np.abs(mean) > 0.0)
    # strength and peak from the log-odds of the days' mean share by clock hour
    share = np.where(whole[:, :, None], filled, 0.0).sum(axis=1) / safe_n[:, None]
    share = np.clip(share, _SHARE_CLIP, 1.0 - _SHARE_CLIP)
    log_odds = np.log(share / (1.0 - share))
    harmonic = 2.0 * np.mean(log_odds * turn, axis=1)
    strength = np.where(agree, np.abs(harmonic) / 2.0, 0.0)
    peak = np.mod(-np.angle(harmonic) * 24.0 / (2.0 * math.pi), 24.0)
    return strength, np.where(agree, peak, 0.0)


__all__ = ["MARKET_LOG_H", "MIN_DAYS", "fit_daily_cycle"]
