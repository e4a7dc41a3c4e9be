"""Work lost to preemptions, read from a job's training progress file (see orchestrator.contract).

Every time training resumes at step ``r`` after having reached step ``s > r``, the steps ``r..s`` are
computed twice. Their cost uses the measured time per step (median of step-to-step wall time).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

from orchestrator.contract import ProgressRecord, read_progress_records
from orchestrator.costs.ledger import LostWork

RESUME_EVENT = "resumed"


def lost_work_from_progress(path: Path) -> LostWork | None:
    """The work lost of the progress file at ``path`` (None when there is none)."""
    if not path.is_file():
        return None
    return lost_work(read_progress_records(path))


def lost_work(records: Iterable[ProgressRecord]) -> LostWork:
    """The work lost of a progress file's records."""
    reached = 0
    lost = 0
    step_times: list[tuple[int, datetime]] = []
    gaps: list[float] = []
    for record in records:
        if record.event == RESUME_EVENT:
            resumed = record.step or 0
            lost += max(0, reached - resumed)
            reached = resumed
            step_times.clear()
        elif record.is_step and record.step is not None:
            reached = max(reached, record.step)
            if record.time is not None:
                if step_times and record.step == step_times[-1][0] + 1:
                    gap = (record.time - step_times[-1][1]).total_seconds()
                    if gap >= 0:  # a clock set back says nothing of the step time
                        gaps.append(gap)
                step_times.append((record.step, record.time))
    if lost == 0:
        return LostWork(steps=0)
    return LostWork(steps=lost, seconds_per_step=statistics.median(gaps) if gaps else None)
