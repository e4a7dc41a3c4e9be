"""A simulated spot market for the local backend.

Spot capacity (how many spot nodes the "cloud" offers this job now) comes from either

* a **schedule**: an ordered list of changes, each firing at a time since submission (``30s``), at a
  training step (``step:40``) or some time after the previous change fired (``after:15s``); or
* a **trace**: a spot availability trace (``{"metadata": {"gap_seconds": N}, "data": [...]}``, the
  format of shared/data/spot-traces) played ``speedup`` times faster than real time; or one trace
  per zone (``zone=FILE``), so that zone policies have zones to choose between (a zone without a
  trace then has no spot capacity).

Changes fire in order, and their firing times are kept in a small file in the job folder, so a
restarted controller sees the same market. With no schedule and no trace, capacity is unlimited.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.errors import UserError
from orchestrator.spec import parse_duration


@dataclass(frozen=True)
class CapacityChange:
    trigger: str
    """``time`` (seconds since submission), ``step`` (training step) or ``after`` (seconds after the
    previous change fired)."""
    value: float
    capacity: int | None
    """Spot nodes offered from then on; ``None`` means no limit."""


def parse_schedule(text: str) -> list[CapacityChange]:
    """``"step:40=0,after:15s=inf"`` -> changes. Capacity ``inf`` (or ``-``) means no limit."""
    changes: list[CapacityChange] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        if "=" not in part:
            raise UserError(
                f"spot schedule entry '{part}' has no '='", "write entries like 'step:40=0' or '30s=1'"
            )
        when, cap_text = part.split("=", 1)
        capacity = None if cap_text.strip() in ("inf", "-", "") else _int(cap_text, part)
        changes.append(_change(when.strip(), capacity))
    return changes


def preemption_schedule(points: list[str], outage: str) -> list[CapacityChange]:
    """``--preempt-at 30s --preempt-at step:80 --outage 10s``: capacity 0 at each point, back after."""
    out: list[CapacityChange] = []
    back = parse_duration(outage).total_seconds()
    for point in points:
        out.append(_change(point, 0))
        out.append(CapacityChange("after", back, None))
    return out


def _change(when: str, capacity: int | None) -> CapacityChange:
    try:
        if when.startswith("step:"):
            return CapacityChange("step", float(int(when[5:])), capacity)
        if when.startswith("after:"):
            return CapacityChange("after", parse_duration(when[6:]).total_seconds(), capacity)
        return CapacityChange("time", parse_duration(when).total_seconds(), capacity)
    except ValueError as exc:
        raise UserError(
            f"'{when}' is not a market time: {exc}", "use '30s' (since submission), 'step:40' or 'after:15s'"
        ) from None


def _int(text: str, part: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise UserError(f"capacity in '{part}' is not a whole number", "use e.g. '0', '2' or 'inf'") from None
    if value < 0:
        raise UserError(f"capacity in '{part}' is negative", "use 0 or more")
    return value


def load_trace(path: str) -> tuple[float, list[int]]:
    try:
        doc = json.loads(Path(path).read_text())
        gap = float(doc["metadata"]["gap_seconds"])
        data = [int(x) for x in doc["data"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UserError(
            f"cannot read spot trace '{path}': {exc}",
            'give a JSON file like {"metadata": {"gap_seconds": 195}, "data": [0, 1, 1, ...]}',
        ) from None
    if not data or gap <= 0:
        raise UserError(
            f"spot trace '{path}' is empty or has no positive gap_seconds", "use a non-empty trace"
        )
    return gap, data


class SimulatedMarket:
    """Capacity of one job's simulated spot market; firing state persists in ``state_file``."""

    def __init__(self, options: dict[str, Any], state_file: Path) -> None:
        self.changes = [CapacityChange(**c) for c in options.get("schedule", [])]
        self.trace: tuple[float, list[int]] | None = None
        if options.get("trace"):
            self.trace = load_trace(options["trace"])
        self.zone_traces = {zone: load_trace(path) for zone, path in options.get("zone_traces", {}).items()}
        self.speedup = float(options.get("speedup", 1.0))
        self.start_tick = int(options.get("start_tick", 0))
        self.state_file = state_file

    @staticmethod
    def options(
        schedule: list[CapacityChange] | None = None,
        trace: str | None = None,
        speedup: float = 1.0,
        start_tick: int = 0,
        zone_traces: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """The JSON-able market options stored with a job."""
        out: dict[str, Any] = {}
        if schedule:
            out["schedule"] = [c.__dict__ for c in schedule]
        if trace or zone_traces:
            for path in [trace] if trace else list((zone_traces or {}).values()):
                load_trace(path)  # fail early on a bad file
            if trace:
                out["trace"] = str(Path(trace).resolve())
            if zone_traces:
                out["zone_traces"] = {zone: str(Path(path).resolve()) for zone, path in zone_traces.items()}
            out["speedup"] = speedup
            out["start_tick"] = start_tick
        return out

    @property
    def zones(self) -> list[str]:
        """Zones that have a trace of their own (empty: one market for every zone)."""
        return list(self.zone_traces)

    def capacity(self, elapsed_s: float, step: int | None, zone: str = "") -> int | None:
        if self.zone_traces:
            return self._play(self.zone_traces[zone], elapsed_s) if zone in self.zone_traces else 0
        if self.trace is not None:
            return self._play(self.trace, elapsed_s)
        fired = self._fire(elapsed_s, step)
        return self.changes[fired - 1].capacity if fired else None

    def _play(self, trace: tuple[float, list[int]], elapsed_s: float) -> int:
        gap, data = trace
        tick = self.start_tick + int(elapsed_s * self.speedup / gap)
        return data[min(tick, len(data) - 1)]

    def _fire(self, elapsed_s: float, step: int | None) -> int:
        times: list[float] = self._load()
        while len(times) < len(self.changes):
            change = self.changes[len(times)]
            if change.trigger == "time":
                ok = elapsed_s >= change.value
            elif change.trigger == "step":
                ok = step is not None and step >= change.value
            else:
                ok = bool(times) and elapsed_s >= times[-1] + change.value
            if not ok:
                break
            times.append(elapsed_s)
            self._save(times)
        return len(times)

    def _load(self) -> list[float]:
        try:
            return [float(t) for t in json.loads(self.state_file.read_text())["fired_at"]]
        except (OSError, ValueError, KeyError):
            return []

    def _save(self, times: list[float]) -> None:
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"fired_at": times}))
        os.replace(tmp, self.state_file)
