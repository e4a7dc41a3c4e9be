"""A job's :class:`MarketLog` from what a controller saw of its zones before the job.

The spans come from the controller's market log (:mod:`orchestrator.state.zone_watch`). Over the
``hours`` before ``until`` (the job's submit), cut at every span's edge and every hour's: a piece of
time counts as watched when every zone of the job was watched then; in it, a zone has spot when it
offered at least the job's ``min_nodes``. The counts are those a :class:`ZoneHistory` kept tick by
tick over the watched time would hold (a run that a gap in the watching cuts counts twice, as after
a controller restart, and so do the lengths of its ended runs); an hour watched less than half of
the time has no share (NaN). The hours are whole hours back from ``until``, and ``start_clock_h`` is
``until``'s hour of the day in UTC.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from datetime import datetime

from orchestrator.policies.context import MarketLog, ZoneHistory
from orchestrator.policies.daily import MARKET_LOG_H
from orchestrator.state.zone_watch import WatchedSpan


def market_log_from(
    spans: Sequence[WatchedSpan],
    zones: Sequence[str],
    min_nodes: int,
    until: datetime,
    hours: float = MARKET_LOG_H,
) -> MarketLog:
    whole_hours = int(hours)
    end = until.timestamp()
    start = end - whole_hours * 3600.0
    by_zone = {z: sorted((s for s in spans if s.zone == z), key=lambda s: s.begin_s) for z in zones}
    cuts = {start, end, *(start + 3600.0 * k for k in range(whole_hours))}
    for s in spans:
        cuts.update(t for t in (s.begin_s, s.end_s) if start < t < end)
    points = sorted(cuts)
    cursor = dict.fromkeys(zones, 0)
    observed = any_up = 0.0
    available = dict.fromkeys(zones, 0.0)
    runs = dict.fromkeys(zones, 0)
    ended = dict.fromkeys(zones, 0)
    ended_s, ended_s2 = dict.fromkeys(zones, 0.0), dict.fromkeys(zones, 0.0)
    up_for: dict[str, float] = {}  # seconds of each zone's run of spot under way
    before: dict[str, bool] = {}
    watched_in_hour = [0.0] * whole_hours
    up_in_hour = [0.0] * whole_hours
    for a, b in itertools.pairwise(points):
        middle, length = (a + b) / 2.0, b - a
        now: dict[str, bool] = {}
        for zone in zones:
            spans_of = by_zone[zone]
            i = cursor[zone]
            while i < len(spans_of) and spans_of[i].end_s <= middle:
                i += 1
            cursor[zone] = i
            if i < len(spans_of) and spans_of[i].begin_s <= middle:
                capacity = spans_of[i].capacity
                now[zone] = capacity is None or capacity >= min_nodes
        if len(now) < len(zones):  # some zone was not watched: a gap, after which runs begin anew
            before, up_for = {}, {}
            continue
        observed += length
        some = any(now.values())
        any_up += length if some else 0.0
        hour = min(int((middle - start) // 3600.0), whole_hours - 1)
        watched_in_hour[hour] += length
        up_in_hour[hour] += length if some else 0.0
        for zone, up in now.items():
            available[zone] += length if up else 0.0
            runs[zone] += 1 if up and before.get(zone) is not True else 0
            if not up and before.get(zone) is True:  # its run of spot ended
                ended[zone] += 1
                ended_s[zone] += up_for[zone]
                ended_s2[zone] += up_for[zone] ** 2
            up_for[zone] = up_for.get(zone, 0.0) + length if up else 0.0
        before = now
    history = ZoneHistory(
        observed_h=observed / 3600.0,
        any_available_h=any_up / 3600.0,
        available_h={z: v / 3600.0 for z, v in available.items()},
        up_runs=runs,
        ended_runs=ended,
        ended_run_h={z: v / 3600.0 for z, v in ended_s.items()},
        ended_run_h2={z: v / 3600.0**2 for z, v in ended_s2.items()},
    )
    hourly = tuple(
        up / watched if watched >= 1800.0 else math.nan
        for up, watched in zip(up_in_hour, watched_in_hour, strict=True)
    )
    return MarketLog(history, hourly, start_clock_h=(end / 3600.0) % 24.0)


__all__ = ["market_log_from"]
