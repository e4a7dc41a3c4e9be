"""Spot availability traces: ``{"metadata": {"gap_seconds": N}, "data": [count, ...]}`` per zone.

Several files are the zones of one market: they must share the tick and are aligned from their start
(cut to the shortest).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from orchestrator.errors import UserError
from orchestrator.userfiles import MAX_DATA_BYTES, read_text

_FIX = 'write one JSON object {"metadata": {"gap_seconds": N}, "data": [count, ...]} per zone'


@dataclass(frozen=True)
class AvailabilityTrace:
    """Spot capacity per zone and tick: ``counts[z, t]`` nodes available in zone z at tick t."""

    zones: tuple[str, ...]
    tick_h: float
    counts: NDArray[np.int64]

    @property
    def ticks(self) -> int:
        return int(self.counts.shape[1])

    @property
    def max_count(self) -> int:
        return int(self.counts.max()) if self.counts.size else 0

    def available(self, nodes: int = 1) -> NDArray[np.bool_]:
        """(Z, T): whether a zone offers at least ``nodes`` spot nodes at each tick."""
        return self.counts >= nodes

    def select(self, zones: Sequence[str]) -> AvailabilityTrace:
        idx = [self.zones.index(z) for z in zones]
        return AvailabilityTrace(tuple(zones), self.tick_h, self.counts[idx])


def _zone_name(path: Path) -> str:
    stem = path.stem
    return stem.split("_")[0] if "_" in stem else stem


def read_trace_file(path: Path | str) -> tuple[float, NDArray[np.int64]]:
    """(tick hours, counts) of one trace file; a clear :class:`UserError` when it is malformed."""
    p = Path(path)
    text = read_text(p, "trace file", "check the --trace path", MAX_DATA_BYTES)
    try:
        doc = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise UserError(f"trace {p} is not valid JSON ({exc})", _FIX) from exc
    if not isinstance(doc, dict) or "data" not in doc or "metadata" not in doc:
        raise UserError(f"trace {p} lacks 'metadata' or 'data'", _FIX)
    meta, data = doc["metadata"], doc["data"]
    gap = meta.get("gap_seconds") if isinstance(meta, dict) else None
    if isinstance(gap, bool) or not isinstance(gap, int | float) or gap <= 0:
        raise UserError(f"trace {p}: metadata.gap_seconds must be a positive number, got {gap!r}", _FIX)
    if not isinstance(data, list) or not data:
        raise UserError(f"trace {p} has no data (an empty trace)", _FIX)
    if not all(isinstance(v, int | float) and not isinstance(v, bool) and v >= 0 for v in data):
        raise UserError(f"trace {p}: data must be non-negative node counts", _FIX)
    counts = np.asarray(data, dtype=np.float64)
    if not np.all(counts == np.round(counts)):
        raise UserError(f"trace {p}: data must be whole node counts", _FIX)
    return float(gap) / 3600.0, counts.astype(np.int64)


def load_traces(paths: Sequence[Path | str]) -> AvailabilityTrace:
    """The zones of one market, one file each, aligned from their start."""
    if not paths:
        raise UserError("no trace given", "pass at least one --trace FILE")
    loaded = [read_trace_file(p) for p in paths]
    ticks = {round(t * 3600.0, 6) for t, _ in loaded}
    if len(ticks) > 1:
        raise UserError(
            f"traces have different tick lengths ({', '.join(f'{s:g} s' for s in sorted(ticks))})",
            "give traces of one market, recorded with the same gap_seconds",
        )
    names = [_zone_name(Path(p)) for p in paths]
    if len(set(names)) != len(names):
        names = [f"{n}#{i}" for i, n in enumerate(names)]
    length = min(c.shape[0] for _, c in loaded)
    counts = np.stack([c[:length] for _, c in loaded])
    return AvailabilityTrace(tuple(names), loaded[0][0], counts)
