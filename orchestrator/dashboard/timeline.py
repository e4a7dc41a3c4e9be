"""The geometry of a job's attempts timeline (an SVG the job page draws): one row per attempt with a
bar per segment (its market, zone and nodes), a mark where a segment ended preempted, and a row of
the job's events (the policy's reasons are in their messages) on the same time axis."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

WIDTH = 960
LEFT = 240
"""Room for the attempt labels."""
ROW = 26
TOP = 8
TICKS = 5


@dataclass(frozen=True)
class Bar:
    x: float
    width: float
    market: str
    title: str


@dataclass(frozen=True)
class Lane:
    label: str
    y: float
    bars: list[Bar] = field(default_factory=list)
    preempted_at: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class Mark:
    x: float
    kind: str
    title: str


@dataclass(frozen=True)
class Timeline:
    width: int
    height: int
    left: int
    lanes: list[Lane]
    events_y: float
    marks: list[Mark]
    ticks: list[tuple[float, str]]

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def _t(text: str) -> datetime:
    return datetime.fromisoformat(text)


def build_timeline(doc: dict[str, Any], events: list[dict[str, str]], now: datetime) -> Timeline:
    """The timeline of a status document and its events (``gpuctl events -o json``), up to ``now``
    for a job that has not ended."""
    segments = doc["segments"]
    starts = [_t(s["started_at"]) for s in segments] + [_t(e["time"]) for e in events]
    t0 = min([*starts, _t(doc["submitted_at"])] if doc.get("submitted_at") else starts or [now])
    ends = [_t(s["ended_at"]) for s in segments if s["ended_at"]] + [_t(e["time"]) for e in events]
    ended = doc["state"] in ("SUCCEEDED", "FAILED", "CANCELLED")
    t1 = max([*ends, t0]) if ended else now
    span = max((t1 - t0).total_seconds(), 1.0)
    plot = WIDTH - LEFT - 10

    def x(t: datetime) -> float:
        return round(LEFT + plot * min(max((t - t0).total_seconds() / span, 0.0), 1.0), 1)

    lanes: dict[Any, Lane] = {}
    for seg in segments:
        key = seg["attempt"]
        lane = lanes.get(key)
        if lane is None:
            label = f"attempt {key or '-'}: {seg['nodes']} x {seg['gpu_type'] or '-'} {seg['market'] or '-'} {seg['zone'] or '-'}"
            lane = lanes[key] = Lane(label, TOP + ROW * len(lanes))
        start, end = _t(seg["started_at"]), _t(seg["ended_at"]) if seg["ended_at"] else t1
        title = (f"attempt {key or '-'}: {seg['nodes']} node(s) {seg['gpu_type'] or '-'} {seg['market'] or '-'} in "
                 f"{seg['zone'] or '-'}, {seg['started_at'][:19]} to {seg['ended_at'][:19] if seg['ended_at'] else 'now'}"
                 f" ({seg['end_reason'] or 'open'})")  # fmt: skip
        lane.bars.append(
            Bar(x(start), max(round(x(end) - x(start), 1), 1.0), seg["market"] or "unknown", title)
        )
        if seg["end_reason"] == "preempted":
            lane.preempted_at.append(x(end))
    events_y = TOP + ROW * len(lanes)
    marks = [
        Mark(x(_t(e["time"])), e["kind"], f"{e['time'][:19]} {e['kind']}: {e['message']}") for e in events
    ]
    ticks = [(round(LEFT + plot * i / (TICKS - 1), 1),
              (t0 + (t1 - t0) * i / (TICKS - 1)).strftime("%H:%M:%S")) for i in range(TICKS)]  # fmt: skip
    return Timeline(WIDTH, int(events_y + ROW + 22), LEFT, list(lanes.values()), events_y, marks, ticks)
