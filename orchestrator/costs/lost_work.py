"""Work lost to preemptions, read from a job's training progress file (see orchestrator.contract).

Every time training resumes at step ``r`` after having reached step ``s > r``, the steps ``r..s`` are
computed twice. Their cost uses the measured time per step (median of step-to-step wall time).
"""

from __future__ import annotations

import json
import statistics
from datetime import datetime
from pathlib import Path

from orchestrator.costs.ledger import LostWork

RESUME_EVENT = "resumed"


def lost_work_from_progress(path: Path) -> LostWork | None:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    reached = 0
    lost = 0
    step_times: list[tuple[int, datetime]] = []
    gaps: list[float] = []
    for line in lines:
        try:
            doc = json.loads(line)
        except ValueError:
            continue  # a torn last line of a killed writer
        if doc.get("event") == RESUME_EVENT:
            resumed = int(doc.get("step", 0))
            lost += max(0, reached - resumed)
            reached = resumed
            step_times.clear()
        elif "event" not in doc and "step" in doc:
            step = int(doc["step"])
            reached = max(reached, step)
            if "time" in doc:
                moment = datetime.fromisoformat(str(doc["time"]))
                if step_times and step == step_times[-1][0] + 1:
                    gaps.append((moment - step_times[-1][1]).total_seconds())
                step_times.append((step, moment))
    if lost == 0:
        return LostWork(steps=0)
    return LostWork(steps=lost, seconds_per_step=statistics.median(gaps) if gaps else None)
