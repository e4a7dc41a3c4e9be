"""The progress file's records (format in :data:`orchestrator.contract.ENV_PROGRESS_FILE`), read into
:class:`ProgressRecord`: the one parser every reader uses (local, SLURM, the Kubernetes sidecar and
operator, cost reports, right-sizing, diagnosis). Training code writes the file, so a record is
untrusted: one whose known fields have the wrong type, a non-finite number anywhere, or a number out of
range is skipped (and logged once per file), never raised out of a reader.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from orchestrator.contract.fields import (
    MAX_COUNT,
    MAX_SECONDS,
    BadRecord,
    aware_time,
    json_object,
    real,
    require_finite,
    text,
    warn_once,
    whole,
)

MAX_WORLD_SIZE = 1 << 20
MAX_TUNE_SETTINGS = 32
"""Most entries a ``tune`` record's ``settings`` may hold."""
MAX_SETTING_TEXT = 200
"""Longest setting name or string value taken."""


@dataclass(frozen=True)
class TuneResult:
    """What the runtime's input-pipeline tuning (``runtime: {tune: auto}``) measured and kept: the mean
    step time before and after, and the loader settings it runs on with (such as ``num_workers``)."""

    before_step_s: float
    after_step_s: float
    settings: Mapping[str, str | int | bool] = field(default_factory=dict)

    @property
    def speedup(self) -> float | None:
        """``before / after`` (how many times faster the steps run); None for a zero after-time."""
        return self.before_step_s / self.after_step_s if self.after_step_s > 0 else None


@dataclass(frozen=True)
class ProgressRecord:
    """One valid record. ``event`` is None for a step record (``finished``, ``preempted``, ``resumed``,
    ``checkpoint``, ... otherwise); absent or null fields are None (``metrics``: empty)."""

    event: str | None = None
    step: int | None = None
    time: datetime | None = None
    """Timezone-aware (a record's time must carry a UTC offset)."""
    total_steps: int | None = None
    loss: float | None = None
    world_size: int | None = None
    metrics: Mapping[str, float] = field(default_factory=dict)
    """The metrics that are numbers (others, such as the nulls the runtime writes for NaN, are left out)."""
    data_s: float | None = None
    compute_s: float | None = None
    tune: TuneResult | None = None
    """Present on the record the runtime writes when tuning ends (JSON key ``tune``)."""
    data_wait_share: float | None = None
    """On ``tuned`` / ``tune_unchanged`` records: the share of step time the baseline waited on data."""
    gpu_memory_headroom_share: float | None = None
    """On ``tuned`` / ``tune_unchanged`` records: the share of the GPU's memory the process never
    reserved (None: no CUDA, not measured)."""
    fields: Mapping[str, Any] = field(default_factory=dict)
    """The record as written, whole numbers as ints: strict JSON (every number in it is finite)."""

    @property
    def is_step(self) -> bool:
        """A step line (not an event) that carries its step."""
        return self.event is None and self.step is not None


def progress_record(record: Mapping[str, Any]) -> ProgressRecord:
    """The typed record of one JSON object; raises :class:`BadRecord` (naming the field) for a bad one."""
    require_finite(record)
    metrics = record.get("metrics")
    if metrics is not None and not isinstance(metrics, Mapping):
        raise BadRecord("metrics must be an object")
    step, total = whole(record, "step"), whole(record, "total_steps")
    world_size = whole(record, "world_size", low=1, high=MAX_WORLD_SIZE)
    counts = {"step": step, "total_steps": total, "world_size": world_size}
    return ProgressRecord(
        event=text(record, "event"),
        step=step,
        time=aware_time(record, "time"),
        total_steps=total,
        loss=real(record, "loss"),
        world_size=world_size,
        metrics=_metrics(metrics or {}),
        data_s=real(record, "data_s", 0.0, MAX_SECONDS),
        compute_s=real(record, "compute_s", 0.0, MAX_SECONDS),
        tune=_tune(record.get("tune")),
        data_wait_share=real(record, "data_wait_share", 0.0, 1.0),
        gpu_memory_headroom_share=real(record, "gpu_memory_headroom_share", 0.0, 1.0),
        fields={**record, **{k: v for k, v in counts.items() if v is not None}},
    )


def _tune(value: Any) -> TuneResult | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise BadRecord("tune must be an object")
    return TuneResult(_seconds(value, "before_step_s"), _seconds(value, "after_step_s"),
                      _settings(value.get("settings")))  # fmt: skip


def _seconds(tune: Mapping[str, Any], key: str) -> float:
    try:
        number = real(tune, key, 0.0, MAX_SECONDS, required=True)
    except BadRecord as bad:
        raise BadRecord(f"tune.{bad}") from None
    return 0.0 if number is None else number


def _settings(value: Any) -> dict[str, str | int | bool]:
    problem = (
        f"tune.settings must be an object of at most {MAX_TUNE_SETTINGS} names (up to "
        f"{MAX_SETTING_TEXT} characters) whose values are strings (as long), whole numbers or booleans"
    )
    if value is None:
        return {}
    if not isinstance(value, Mapping) or len(value) > MAX_TUNE_SETTINGS:
        raise BadRecord(problem)
    settings: dict[str, str | int | bool] = {}
    for name, setting in value.items():
        if not isinstance(name, str) or len(name) > MAX_SETTING_TEXT or not _setting_ok(setting):
            raise BadRecord(problem)
        settings[name] = setting
    return settings


def _setting_ok(value: Any) -> bool:
    if isinstance(value, bool):
        return True
    if isinstance(value, int):
        return -MAX_COUNT <= value <= MAX_COUNT
    return isinstance(value, str) and len(value) <= MAX_SETTING_TEXT


def _metrics(values: Mapping[str, Any]) -> dict[str, float]:
    kept = {}
    for name, value in values.items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            try:
                kept[str(name)] = float(value)
            except OverflowError:  # an int too large for a float
                continue
    return {name: value for name, value in kept.items() if math.isfinite(value)}


def parse_progress_records(data: str | bytes, source: str = "progress records") -> list[ProgressRecord]:
    """The valid records of progress-file text, in order. A line that is not one JSON object (torn by a
    writer killed mid-append, the cut start of a tail, not UTF-8) is skipped quietly; a JSON object that
    is not a valid record is skipped with a warning, once per ``source``."""
    records = []
    for line in data.splitlines():
        found = json_object(line)
        if found is None:
            continue
        try:
            records.append(progress_record(found))
        except BadRecord as bad:
            warn_once(source, str(bad))
    return records


def read_progress_records(path: str | Path, tail_bytes: int | None = None) -> list[ProgressRecord]:
    """Every valid record of the progress file at ``path`` (only of its last ``tail_bytes`` when
    given), in file order; [] when it cannot be read."""
    try:
        with open(path, "rb") as handle:
            if tail_bytes is not None:
                size = handle.seek(0, os.SEEK_END)
                handle.seek(max(0, size - tail_bytes))
            data = handle.read()
    except OSError:
        return []
    return parse_progress_records(data, f"progress file {path}")
