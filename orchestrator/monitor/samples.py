"""One GPU sample, its JSON-lines form, and the replay source that reads recorded samples.

Replay file format (JSON lines, one object per GPU per tick; ticks share the same ``time``)::

    {"time": 1763790000.0, "gpu": 0, "uuid": "GPU-...", "model": "NVIDIA H100 80GB HBM3",
     "util_pct": 97, "mem_used_bytes": 61203283968, "mem_total_bytes": 85520809984,
     "power_w": 612.4, "sm_clock_mhz": 1980, "temp_c": 64, "clock_event_reasons": 0,
     "processes": [{"pid": 4242, "used_bytes": 60129542144}],
     "gr_engine_active": 0.93, "sm_activity": 0.81, "sm_occupancy": 0.42}

``gr_engine_active``, ``sm_activity`` and ``sm_occupancy`` are ratios 0-1 (GPM) and may be
``null`` or absent where the GPU has no GPM; every other field is required except ``processes``
and ``clock_event_reasons`` (default empty / 0).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.errors import UserError
from orchestrator.userfiles import text_lines


@dataclass(frozen=True)
class ProcessMemory:
    pid: int
    used_bytes: int | None


@dataclass(frozen=True)
class GpuSample:
    """What one GPU reported at one instant. Units: %, bytes, W, MHz, °C, ratios 0-1."""

    time: float
    gpu: int
    uuid: str
    model: str
    util_pct: float
    mem_used_bytes: int
    mem_total_bytes: int
    power_w: float
    sm_clock_mhz: float
    temp_c: float
    clock_event_reasons: int = 0
    processes: tuple[ProcessMemory, ...] = field(default_factory=tuple)
    gr_engine_active: float | None = None
    sm_activity: float | None = None
    sm_occupancy: float | None = None

    @property
    def mem_free_bytes(self) -> int:
        return max(self.mem_total_bytes - self.mem_used_bytes, 0)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["processes"] = [asdict(p) for p in self.processes]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GpuSample:
        def ratio(key: str) -> float | None:
            value = data.get(key)
            return None if value is None else float(value)

        return cls(
            time=float(data["time"]),
            gpu=int(data["gpu"]),
            uuid=str(data["uuid"]),
            model=str(data["model"]),
            util_pct=float(data["util_pct"]),
            mem_used_bytes=int(data["mem_used_bytes"]),
            mem_total_bytes=int(data["mem_total_bytes"]),
            power_w=float(data["power_w"]),
            sm_clock_mhz=float(data["sm_clock_mhz"]),
            temp_c=float(data["temp_c"]),
            clock_event_reasons=int(data.get("clock_event_reasons", 0)),
            processes=tuple(
                ProcessMemory(int(p["pid"]), None if p.get("used_bytes") is None else int(p["used_bytes"]))
                for p in data.get("processes", [])
            ),
            gr_engine_active=ratio("gr_engine_active"),
            sm_activity=ratio("sm_activity"),
            sm_occupancy=ratio("sm_occupancy"),
        )


def read_sample_ticks(path: str | Path) -> Iterator[list[GpuSample]]:
    """Yield the samples of a replay file grouped by tick (consecutive lines with the same time)."""
    file = Path(path)
    tick: list[GpuSample] = []
    for number, line in text_lines(file, "replay file", "give the path of a JSON-lines sample file"):
        if not line.strip():
            continue
        try:
            sample = GpuSample.from_dict(json.loads(line))
        except (ValueError, KeyError, TypeError, RecursionError) as exc:
            raise UserError(
                f"{file}:{number}: not a valid GPU sample ({exc.__class__.__name__}: {exc})",
                "each line must be one JSON object as described in docs/monitor.md",
            ) from exc
        if tick and sample.time != tick[0].time:
            yield tick
            tick = []
        tick.append(sample)
    if tick:
        yield tick


class ReplaySource:
    """Sample source that returns the recorded ticks of a file, one tick per call."""

    def __init__(self, path: str | Path, loop: bool = False) -> None:
        self.path = Path(path)
        self.loop = loop
        self._ticks = read_sample_ticks(self.path)
        self._offset = 0.0
        self._first_time: float | None = None
        self._last_time = 0.0

    def sample(self) -> list[GpuSample] | None:
        """Next tick's samples, or None when the file is exhausted (and not looping)."""
        tick = next(self._ticks, None)
        if tick is None and self.loop:
            first = self._first_time if self._first_time is not None else 0.0
            self._offset = self._last_time + 1.0 - first
            self._ticks = read_sample_ticks(self.path)
            tick = next(self._ticks, None)
        if tick is None:
            return None
        if self._first_time is None:
            self._first_time = tick[0].time
        if self._offset:
            tick = [_shifted(s, self._offset) for s in tick]
        self._last_time = tick[0].time
        return tick

    def close(self) -> None:
        self._ticks = iter(())


def _shifted(sample: GpuSample, offset: float) -> GpuSample:
    data = sample.to_dict()
    data["time"] = sample.time + offset
    return GpuSample.from_dict(data)
